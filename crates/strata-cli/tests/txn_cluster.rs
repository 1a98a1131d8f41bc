//! Multi-process tests of Týr's transactions (issue 24): real `strata`
//! processes behind the fault-injecting proxy of `cluster.rs`, whose
//! harness this file includes.
//!
//! - Concurrent clients run list-append and register transactions while
//!   a node is paused, a zone is cut off from the others (its nodes still
//!   answering clients, half of which read their map there) and a node is
//!   killed, and the rows of all three move (the tract table changes under
//!   them); every client logs what it invoked and how it ended, and the
//!   history checker (`strata_txn::history`) must find no anomaly. The
//!   same workload against nodes started in a deliberately broken
//!   validation mode must make it report anomalies.
//! - A bank: transfers made of atomic adds between accounts in two blobs
//!   while nodes fail; read-only transactions summing every account always
//!   see the total, and so does the end.
//! - Fencing: a row's replicas refuse writes and reads made under a map
//!   from before its primary changed, and a resolve adopts a decision
//!   only another replica holds.
//!
//! `STRATA_TXN_SECONDS` lengthens the serializable run (CI runs a seeded,
//! bounded slice: enough for the committed-transaction floor).

// The harness serves several binaries; each uses part of it.
#![allow(dead_code)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_client::{Client, PutArgs};
use strata_txn::history::{MicroOp, Outcome, Txn};
use strata_txn::{TxnClient, TxnError};
use tokio::net::{TcpListener, TcpStream};

include!("cluster/harness.rs");

/// Týr chunk size of the tests: small, and not a multiple of the 8-byte
/// list elements, so appends cross chunks.
const CHUNK: u64 = 36;

/// Commits after which the window of list keys moves on by one.
const ROTATE: u64 = 100;

async fn table(c: &Cluster) -> serde_json::Value {
    c.command(1, serde_json::json!({ "TractInit": { "tract_bytes": 64 << 10, "replicas": 3, "scatter": 4, "capacity_bytes": 256u64 << 20, "seed": 7 } })).await;
    table_everywhere(c, 1).await
}

async fn client(c: &Cluster) -> Arc<TxnClient> {
    client_from(c, 1).await
}

/// A client that asks node `first` for the map before the others: one
/// seeded in a zone that is cut off keeps reading that zone's stale map,
/// and sends its steps to primaries the cluster has since replaced.
async fn client_from(c: &Cluster, first: u8) -> Arc<TxnClient> {
    let mut nodes = c.nodes();
    let at = nodes.iter().position(|n| *n == first).unwrap_or(0);
    nodes.rotate_left(at);
    let seeds: Vec<String> = nodes.iter().map(|n| format!("https://{}", c.real(*n))).collect();
    TxnClient::connect(&seeds, &c.opts, CHUNK).await.expect("transaction client")
}

fn list_of(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks(8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect()
}

/// A tiny seeded generator (xorshift), one per client process.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The blobs a workload runs on: `lists` list keys at a time, `registers`
/// registers, named with `prefix`.
#[derive(Clone)]
struct Keys {
    prefix: &'static str,
    lists: u64,
    registers: u64,
}

/// Runs one random transaction of 1–4 operations over `lists` lists and
/// `registers` registers (blob names prefixed `prefix`) and logs it. The
/// lists are a window of `lists` keys that moves on every `ROTATE`
/// commits (`epoch`), so no list grows long.
async fn one(client: &Arc<TxnClient>, rng: &mut Rng, process: u32, counter: &mut u64, keys: &Keys, epoch: u64) -> Txn {
    let Keys { prefix, lists, registers } = keys;
    let (lists, registers) = (*lists, *registers);
    let mut t = client.begin();
    let mut ops = Vec::new();
    let n = 1 + rng.below(4);
    let mut failed = None;
    for _ in 0..n {
        *counter += 1;
        let value = (u64::from(process) << 32) | *counter;
        let r = rng.below(10);
        let res: Result<MicroOp, TxnError> = if r < 7 || registers == 0 {
            let key = format!("{prefix}list{}", epoch + rng.below(lists));
            if rng.below(2) == 0 {
                t.append(&key, &value.to_le_bytes()).await.map(|_| MicroOp::Append { key, value })
            } else {
                t.read(&key, 0, u64::MAX / 2).await.map(|b| MicroOp::Read { key, value: Some(list_of(&b)) })
            }
        } else {
            let key = format!("{prefix}reg{}", rng.below(registers));
            if rng.below(2) == 0 {
                t.write(&key, 0, &value.to_le_bytes());
                Ok(MicroOp::Write { key, value })
            } else {
                t.read(&key, 0, 8).await.map(|b| MicroOp::ReadRegister { key, value: Some(list_of(&b).first().copied().unwrap_or(0)) })
            }
        };
        match res {
            Ok(op) => ops.push(op),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let result = match failed {
        // A read that failed before commit: nothing was sent to commit.
        Some(e) => Err(e),
        None => t.commit().await,
    };
    if let Err(e) = &result
        && std::env::var("STRATA_TXN_DEBUG").is_ok()
    {
        eprintln!("process {process}: {e}");
    }
    let outcome = match result {
        Ok(_) => Outcome::Ok,
        Err(TxnError::Unknown(_)) => Outcome::Unknown,
        Err(_) => Outcome::Fail,
    };
    Txn { process, ops, outcome }
}

/// Runs `processes` clients for `secs` seconds (or until `enough`
/// transactions committed), with `faults` run beside them; the history.
async fn workload<F: std::future::Future<Output = ()>>(c: &Cluster, processes: u32, secs: u64, enough: usize, keys: Keys, faults: F) -> Vec<Txn> {
    // Half the processes read the map from the first node, half from the
    // first of the second zone (the one the serializable run cuts off).
    let clients = [client(c).await, client_from(c, 1 + c.per_zone).await];
    let history = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..processes)
        .map(|p| {
            let client = clients[p as usize % 2].clone();
            let (history, stop, committed, keys) = (history.clone(), stop.clone(), committed.clone(), keys.clone());
            tokio::spawn(async move {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((u64::from(p) + 1) * 0x1000_0001));
                let mut counter = 0;
                while !stop.load(Ordering::Relaxed) {
                    let epoch = committed.load(Ordering::Relaxed) / ROTATE;
                    let t = one(&client, &mut rng, p, &mut counter, &keys, epoch).await;
                    if t.outcome == Outcome::Ok {
                        committed.fetch_add(1, Ordering::Relaxed);
                    }
                    history.lock().unwrap().push(t);
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let watch = async {
        while Instant::now() < deadline && (committed.load(Ordering::Relaxed) as usize) < enough {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::join!(watch, faults);
    stop.store(true, Ordering::Relaxed);
    // A node that stops answering (a deadlock) must fail the test, not
    // hang it: every client ends its transaction well within this.
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(180), t)
            .await
            .expect("a client's transaction did not end within 180 s of the stop: a node stopped answering")
            .expect("client task");
    }
    Arc::try_unwrap(history).map(|m| m.into_inner().unwrap()).unwrap_or_default()
}

fn seconds(default: u64) -> u64 {
    std::env::var("STRATA_TXN_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The serializable run: list appends crossing chunks, registers, reads,
/// while one node is paused, a zone cut off and another node killed and
/// restarted; the
/// checker finds no anomaly in at least 10,000 committed transactions.
/// Then the bank on the same cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactions_stay_serializable_while_nodes_fail_and_the_bank_balances() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start_zones(79, 2, 1, &["--txn-intent-timeout-ms", "1500", "--down-after-ms", "2000", "--heartbeat-ms", "250"]).await;
    table(&c).await;
    let started = Instant::now();
    let secs = seconds(240);
    let rows_of = |t: &serde_json::Value, nodes: &[u8]| -> Vec<u64> {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["disks"].as_array().unwrap().iter().any(|d| nodes.iter().any(|n| d.as_str().unwrap().starts_with(&format!("{n}:")))))
            .map(|r| r["partition"].as_u64().unwrap())
            .collect()
    };
    let tracts = || async { c.client(1).json(http::Method::GET, "/admin/tracts").await.expect("the table") };
    let moved = Mutex::new(BTreeMap::new());
    let faults = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        c.pause(3, true);
        tokio::time::sleep(Duration::from_secs(3)).await;
        c.pause(3, false);
        tokio::time::sleep(Duration::from_secs(4)).await;
        // The second zone (nodes 3 and 4) is cut off from the others;
        // clients still reach it, and half of them read their map there.
        // Its rows move away, and its nodes, with the map of before, are
        // the stale primaries the fence must stop.
        // (Node 3's rows moved away while it was paused: those of the
        // zone are node 4's.)
        let before = rows_of(&tracts().await, &[3, 4]);
        c.proxy.cut(2);
        let cut = Instant::now();
        let mut after = before.clone();
        while cut.elapsed() < Duration::from_secs(5) || (after.len() >= before.len() && cut.elapsed() < Duration::from_secs(20)) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            after = rows_of(&tracts().await, &[3, 4]);
        }
        c.proxy.heal();
        moved.lock().unwrap().insert("the second zone", (before, after));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let before = rows_of(&tracts().await, &[5]);
        // SAFETY of the test: the pid is our own child's.
        let pid = c.procs.get(&5).expect("node 5").id() as i32;
        unsafe { libc::kill(pid, libc::SIGKILL) };
        tokio::time::sleep(Duration::from_secs(6)).await;
        let after = rows_of(&tracts().await, &[5]);
        moved.lock().unwrap().insert("node 5", (before, after));
    };
    let history = workload(&c, 24, secs, 10_000, Keys { prefix: "h-", lists: 24, registers: 8 }, faults).await;
    // The tract table changed under the clients: the cut-off node's and
    // the dead node's rows were re-replicated elsewhere (new row versions,
    // new primaries).
    let moved = moved.into_inner().unwrap();
    for (n, (before, after)) in &moved {
        eprintln!("rows of {n} before its failure {before:?}, after {after:?}");
    }
    // Node 5 was killed -9: reap it and bring it back.
    c.kill9(5);
    c.spawn(5);
    c.wait_healthy(5).await;
    let report = strata_txn::history::check(&history);
    eprintln!(
        "serializable run: {} transactions in {:?}: {} committed, {} failed, {} unknown, {} edges",
        history.len(),
        started.elapsed(),
        report.committed,
        report.failed,
        report.unknown,
        report.edges
    );
    for a in report.anomalies.iter().take(10) {
        eprintln!("{}: {}", a.kind, a.witness);
    }
    assert!(report.valid(), "anomalies: {:?}", report.kinds());
    for (n, (before, after)) in &moved {
        assert!(!before.is_empty() && after.len() < before.len(), "rows of {n} before its failure {before:?}, after {after:?}");
    }
    assert!(report.committed >= 10_000, "only {} transactions committed in {secs} s", report.committed);
    let mut fenced = 0.0;
    for n in c.nodes() {
        if let Ok(r) = c.client(n).send(http::Method::GET, "/metrics", &[], strata_client::full(bytes::Bytes::new())).await {
            fenced += metric(&String::from_utf8_lossy(&r.bytes().await.unwrap_or_default()), "strata_tract_rows_fenced");
        }
    }
    eprintln!("row writes and reads fenced off during the run: {fenced}");

    // The bank: 8 accounts in two blobs, 1,000 each.
    let client = client(&c).await;
    const ACCOUNTS: u64 = 8;
    let accounts = ACCOUNTS;
    let total = 1000 * accounts as i64;
    let account = |i: u64| (if i.is_multiple_of(2) { "bank-a" } else { "bank-b" }, (i / 2) * 8);
    let mut t = client.begin();
    for i in 0..accounts {
        let (b, o) = account(i);
        t.add(b, o, 1000).unwrap();
    }
    t.commit().await.expect("opening balances");
    let sum_all = |client: Arc<TxnClient>| async move {
        let mut t = client.begin();
        let mut sum = 0i64;
        for b in ["bank-a", "bank-b"] {
            let bytes = t.read(b, 0, 8 * ACCOUNTS).await?;
            sum += list_of(&bytes).iter().map(|v| *v as i64).sum::<i64>();
        }
        t.commit().await.map(|_| sum)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let transfers: Vec<_> = (0..3u64)
        .map(|p| {
            let (client, stop) = (client.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = Rng(77 + p);
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let (from, to) = (rng.below(accounts), rng.below(accounts));
                    if from == to {
                        continue;
                    }
                    let x = 1 + rng.below(50) as i64;
                    let mut t = client.begin();
                    let ((fb, fo), (tb, to_)) = (account(from), account(to));
                    t.add(fb, fo, -x).unwrap();
                    t.add(tb, to_, x).unwrap();
                    if t.commit().await.is_ok() {
                        done += 1;
                    }
                    // Room between transfers for the audits' validation.
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                done
            })
        })
        .collect();
    let auditors: Vec<_> = (0..2)
        .map(|_| {
            let (client, stop) = (client.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seen = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(sum) = sum_all(client.clone()).await {
                        assert_eq!(sum, total, "a read-only transaction saw the accounts sum to {sum}");
                        seen += 1;
                    }
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.pause(2, true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.pause(2, false);
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, Ordering::Relaxed);
    let mut moved = 0;
    for t in transfers {
        moved += t.await.expect("transfer task");
    }
    let mut audits = 0;
    for a in auditors {
        audits += a.await.expect("an auditor saw the total change");
    }
    eprintln!("bank: {moved} transfers, {audits} audits");
    // Read-only transactions validate like the others, so under a steady
    // stream of transfers many abort (docs/transactions.md, "Limits"):
    // the floor asks for some that commit, each of which saw the total.
    assert!(moved > 50 && audits >= 5, "{moved} transfers, {audits} audits");
    assert_eq!(sum_all(client.clone()).await.expect("final audit"), total);

    // The CLI and the JSON transaction; bad input refused with a reason.
    let (ok, out) = c.cli(1, &["txn", "add", "--blob", "cli-counter", "--offset", "8", "--delta", "-5", "--chunk-size", "36"]);
    assert!(ok, "{out}");
    let tx = serde_json::json!({ "chunk_bytes": 36, "ops": [
        { "op": "read", "blob": "cli-counter", "offset": 8, "len": 8 },
        { "op": "append", "blob": "cli-log", "data": "aGVsbG8=" },
        { "op": "add", "blob": "cli-counter", "offset": 8, "delta": 12 },
        { "op": "size", "blob": "cli-log" },
    ]});
    let v = c.client(2).post_json("/txn", &tx).await.expect("a JSON transaction");
    let read = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, v["results"][0]["data"].as_str().unwrap()).unwrap();
    assert_eq!(i64::from_le_bytes(read.try_into().unwrap()), -5, "{v}");
    assert_eq!(v["results"][3]["size"], 5, "{v}");
    let (ok, out) = c.cli(3, &["txn", "read", "--blob", "cli-counter", "--offset", "8", "--len", "8", "-o", c.dir.join("counter").to_str().unwrap()]);
    assert!(ok, "{out}");
    assert_eq!(i64::from_le_bytes(std::fs::read(c.dir.join("counter")).unwrap().try_into().unwrap()), 7);
    for (body, want) in [
        (serde_json::json!({ "ops": [{ "op": "shuffle", "blob": "x" }] }), "unknown variant"),
        (serde_json::json!({ "ops": [{ "op": "write", "blob": "x", "offset": 0, "data": "%%%" }] }), "not base64"),
        (serde_json::json!({ "chunk_bytes": 36, "ops": [{ "op": "add", "blob": "x", "offset": 32, "delta": 1 }] }), "straddle"),
        (serde_json::json!({ "chunk_bytes": 64, "ops": [{ "op": "add", "blob": "cli-counter", "offset": 0, "delta": 1 }] }), "chunks of 36 bytes"),
    ] {
        match c.client(1).post_json("/txn", &body).await {
            Err(strata_client::ClientError::Api { status: 400, message, .. }) => assert!(message.contains(want), "{body}: {message}"),
            other => panic!("{body}: {other:?}"),
        }
    }
    match c.client(1).send(http::Method::POST, "/txn/step", &[], strata_client::full(bytes::Bytes::from_static(b"not an envelope"))).await {
        Err(strata_client::ClientError::Api { status: 400, message, .. }) => assert!(message.contains("STXN"), "{message}"),
        other => panic!("a garbled step: {:?}", other.err()),
    }
    // An interactive transaction: begun, ops one request each, committed.
    let id = c.client(2).post_json("/txn/begin", &serde_json::json!({ "chunk_bytes": 36 })).await.expect("begin")["id"].as_str().unwrap().to_string();
    let v = c
        .client(2)
        .post_json(&format!("/txn/{id}/op"), &serde_json::json!({ "op": "read", "blob": "cli-counter", "offset": 8, "len": 8 }))
        .await
        .expect("a read");
    let read = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, v["data"].as_str().unwrap()).unwrap();
    assert_eq!(i64::from_le_bytes(read.try_into().unwrap()), 7, "{v}");
    c.client(2).post_json(&format!("/txn/{id}/op"), &serde_json::json!({ "op": "add", "blob": "cli-counter", "offset": 8, "delta": 3 })).await.expect("an add");
    let v = c.client(2).post_json(&format!("/txn/{id}/commit"), &serde_json::json!({})).await.expect("commit");
    assert!(v["seq"].as_u64().is_some_and(|s| s > 0), "{v}");
    assert_eq!(i64::from_le_bytes(client.read("cli-counter", 8, 8).await.unwrap().try_into().unwrap()), 10);
    // Ended, unknown, or left past its timeout: 404 NoSuchTxn.
    let short = c.client(2).post_json("/txn/begin", &serde_json::json!({ "timeout_ms": 200 })).await.expect("begin")["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(400)).await;
    for gone in [id.as_str(), short.as_str(), "0123"] {
        match c.client(2).post_json(&format!("/txn/{gone}/op"), &serde_json::json!({ "op": "size", "blob": "x" })).await {
            Err(strata_client::ClientError::Api { status: 404, code, .. }) => assert_eq!(code, "NoSuchTxn"),
            other => panic!("transaction {gone}: {other:?}"),
        }
    }
    let (ok, out) = c.cli(1, &["txn", "status"]);
    assert!(ok && out.contains("held"), "{out}");
}

/// The workload on two lists and two registers only: every transaction
/// contends with the others, so a validation that lets a stale read
/// through shows in the history within seconds.
async fn skew(c: &Cluster, processes: u32, secs: u64) -> Vec<Txn> {
    workload(c, processes, secs, usize::MAX, Keys { prefix: "s-", lists: 2, registers: 2 }, async {}).await
}

/// The checker is not a test that cannot fail: against nodes that skip
/// read validation, or validate as snapshot isolation does, the same kind
/// of workload yields anomalies it reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_catches_broken_validation() {
    let _serial = SERIAL.lock().await;
    for (octet, mode, want) in
        [(80, "skip-read-validation", &["G-single", "G2", "incompatible-order", "G1c", "duplicate"][..]), (81, "snapshot-isolation", &["G2", "G-single"][..])]
    {
        let c = Cluster::start_zones(octet, 1, 1, &["--txn-mode", mode]).await;
        table(&c).await;
        let history = skew(&c, 8, 15).await;
        let report = strata_txn::history::check(&history);
        eprintln!("{mode}: {} committed, anomalies {:?}", report.committed, report.kinds());
        for a in report.anomalies.iter().take(4) {
            eprintln!("  {}: {}", a.kind, a.witness);
        }
        assert!(report.kinds().iter().any(|k| want.contains(k)), "{mode}: the checker found {:?}", report.kinds());
    }
}

/// The version collector: superseded chunk versions go once their
/// successor has been visible for the read lease, the newest stays, and a
/// transaction reading under a blob version older than the lease is
/// refused (`SnapshotTooOld`), never answered from reclaimed data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn superseded_versions_are_reclaimed_after_the_read_lease() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start_zones(82, 1, 1, &["--txn-read-lease-ms", "3000", "--txn-gc-interval-secs", "3600"]).await;
    table(&c).await;
    let client = client(&c).await;
    // Two chunks of 36 bytes, each written five times.
    for round in 1..=5u8 {
        let mut t = client.begin();
        t.write("gc", 0, &[round; 72]);
        t.commit().await.expect("a write");
    }
    // A transaction reads chunk 0 now, chunk 1 after the lease.
    let mut old = client.begin();
    assert_eq!(old.read("gc", 0, 36).await.unwrap(), vec![5u8; 36]);
    let mut t = client.begin();
    t.write("gc", 0, &[6; 72]);
    t.commit().await.expect("a write");
    let gc_all = || async {
        let (mut deleted, mut cleared) = (0, 0);
        for n in c.nodes() {
            let v = c.client(n).post_json("/admin/txn/gc", &serde_json::json!({})).await.expect("a collector pass");
            assert!(v["errors"].as_array().is_some_and(Vec::is_empty), "{v}");
            deleted += v["deleted"].as_u64().unwrap();
            cleared += v["cleared"].as_u64().unwrap();
        }
        (deleted, cleared)
    };
    // Within the lease nothing goes: the successors were only just seen,
    // and the version manager has not led its row for a lease yet (so it
    // cannot vouch for readers an earlier one served).
    assert_eq!(gc_all().await, (0, 0));
    tokio::time::sleep(Duration::from_millis(3200)).await;
    // Five superseded versions of each chunk, and of the blob's record.
    let (deleted, _) = gc_all().await;
    assert_eq!(deleted, 15, "versions reclaimed");
    assert_eq!(gc_all().await, (0, 0), "a second pass finds nothing more");
    match old.read("gc", 36, 36).await {
        Err(TxnError::Conflict(m)) => assert!(m.contains("read lease"), "{m}"),
        other => panic!("a read under an expired blob version: {other:?}"),
    }
    assert_eq!(client.read("gc", 0, 72).await.unwrap(), vec![6u8; 72], "the newest versions stay");

    // Now the version manager knows every reader (it has led the row for
    // a lease): a version no running transaction reads goes at once,
    // cleared by its usage, while one a running transaction reads stays.
    let mut reader = client.begin();
    assert_eq!(reader.read("gc", 0, 36).await.unwrap(), vec![6u8; 36]);
    for round in 7..=9u8 {
        let mut t = client.begin();
        t.write("gc", 0, &[round; 72]);
        t.commit().await.expect("a write");
    }
    // Versions 7 and 8 of each chunk and of the blob's record: superseded,
    // read by nobody. Version 6: read by `reader`.
    assert_eq!(gc_all().await, (6, 6), "versions cleared by their version manager");
    assert_eq!(reader.read("gc", 36, 36).await.unwrap(), vec![6u8; 36], "the version a running transaction reads stays");
    assert_eq!(client.read("gc", 0, 72).await.unwrap(), vec![9u8; 72]);
    // Decided, it reads no more; its version goes with the next pass.
    assert!(matches!(reader.commit().await, Err(TxnError::Conflict(_))), "a read-only transaction over overwritten data aborts");
    assert_eq!(gc_all().await, (3, 3), "the reader's versions, once it was decided");
    let (mut committed, mut aborted) = (0, 0);
    for n in c.nodes() {
        let held = c.client(n).json(http::Method::GET, "/admin/txn").await.expect("status");
        assert_eq!(held["readers"], 0, "node {n} still counts readers: {held}");
        committed += held["committed"].as_u64().expect("a count of commits");
        aborted += held["aborted"].as_u64().expect("a count of aborts");
    }
    // Every write above committed (the rounds, and those before); the
    // reader over overwritten data aborted: the deciders counted them.
    assert!(committed >= 3, "the nodes count {committed} commits");
    assert!(aborted >= 1, "the nodes count {aborted} aborts");
}

/// One replica RPC write or read of a tract row, as another node sends
/// it, made under the map of `epoch`: the node's answer.
async fn rpc(c: &Cluster, n: u8, epoch: u64, row: u64, key: &strata_types::Key, put: Option<&[u8]>) -> Result<Vec<u8>, strata_rpc::WireError> {
    use strata_rpc::*;
    let (path, frame) = match put {
        Some(data) => {
            let op = WireOp::Put { key: key.as_bytes().to_vec(), props: WireProps::default() };
            ("/rpc/v1/write", encode_message(KIND_WRITE, &WriteRequest { epoch, partition: row, op }, &[data]))
        }
        None => ("/rpc/v1/read", encode_message(KIND_READ, &ReadRequest { epoch, partition: row, key: key.as_bytes().to_vec(), with_data: true }, &[])),
    };
    let resp = c.client(n).send(http::Method::POST, path, &[], strata_client::full(bytes::Bytes::from(frame))).await.expect("an RPC answer");
    let body = resp.bytes().await.expect("the answer's body");
    if put.is_some() {
        let (a, _): (Answer<WireAck>, _) = decode_message(KIND_WRITE, &body).expect("a write answer");
        a.result.map(|_| Vec::new())
    } else {
        let (a, data): (Answer<WireRecord>, bytes::Bytes) = decode_message(KIND_READ, &body).expect("a read answer");
        a.result.map(|_| data.to_vec())
    }
}

/// Fencing, which keeps a replaced primary (paused, or cut off, with the
/// map of before) from acting for its row: a row's version changes when
/// its primary does (its node goes down), and its replicas refuse writes
/// and reads made under a map older than that, or newer than they can
/// catch up to, changing nothing. And a decision that only another replica
/// holds (its primary failed while writing it) is the one a resolve
/// answers, not an abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replaced_primaries_are_fenced_off_and_a_partial_decision_is_adopted() {
    use strata_rpc::WireError;
    use strata_txn::model::{Decision, Hop, Resolve, TxnId, decode, encode};
    use strata_txn::store::decision_key;
    let _serial = SERIAL.lock().await;
    let c = Cluster::start_zones(83, 1, 1, &["--down-after-ms", "1500", "--heartbeat-ms", "250"]).await;
    let t = table(&c).await;
    let row = &t["rows"][0];
    let r = row["partition"].as_u64().unwrap();
    let node_of = |i: usize| row["disks"][i].as_str().unwrap().split(':').next().unwrap().parse::<u8>().unwrap();
    let (p, x) = (node_of(0), node_of(1));
    let map = c.status(x).await.expect("status")["map"].clone();
    let (e0, v0) = (map["epoch"].as_u64().unwrap(), map["partitions"][r.to_string()]["version"].as_u64().unwrap());
    assert!(v0 > 0 && e0 >= v0, "epoch {e0}, row version {v0}");
    let fenced = |r: &Result<Vec<u8>, WireError>| matches!(r, Err(WireError::Fenced { .. }));

    // Under the current map a write is taken; under one from before the
    // row's version it is refused, and nothing was written.
    let k1 = decision_key(&TxnId::random());
    assert_eq!(rpc(&c, x, e0, r, &k1, Some(b"one")).await, Ok(Vec::new()));
    let k2 = decision_key(&TxnId::random());
    let stale = rpc(&c, x, v0 - 1, r, &k2, Some(b"two")).await;
    assert!(fenced(&stale), "a write under epoch {} of row version {v0}: {stale:?}", v0 - 1);
    assert!(stale.unwrap_err().to_string().contains("refresh the map"));
    assert_eq!(rpc(&c, x, e0, r, &k2, None).await, Err(WireError::NotFound));
    assert!(fenced(&rpc(&c, x, v0 - 1, r, &k1, None).await));

    // A decision only replica x holds: the primary's resolve adopts it.
    let presumed = || async { c.client(p).json(http::Method::GET, "/admin/txn").await.expect("status")["presumed_aborted"].as_u64().expect("a count") };
    let presumed_before = presumed().await;
    let txn = TxnId::random();
    rpc(&c, x, e0, r, &decision_key(&txn), Some(&encode(&Decision::Commit(7)))).await.expect("the decision on x");
    let ask = Resolve { txn, hop: Hop { chunks: true, row: r }, row_version: v0 };
    let resp = c.client(p).send(http::Method::POST, "/txn/resolve", &[], strata_client::full(bytes::Bytes::from(encode(&ask)))).await.expect("resolve");
    let d: Decision = decode(&resp.bytes().await.expect("resolve's answer")).expect("a decision");
    assert_eq!(d, Decision::Commit(7), "the resolve did not adopt the decision replica {x} holds");
    assert_eq!(presumed().await, presumed_before, "an adopted decision is no presumed abort");
    // With none anywhere, it is abort.
    let ask = Resolve { txn: TxnId::random(), ..ask };
    let resp = c.client(p).send(http::Method::POST, "/txn/resolve", &[], strata_client::full(bytes::Bytes::from(encode(&ask)))).await.expect("resolve");
    assert_eq!(decode::<Decision>(&resp.bytes().await.expect("resolve's answer")).expect("a decision"), Decision::Abort);
    assert_eq!(presumed().await, presumed_before + 1, "the primary counts the abort it presumed");

    // The primary stops; once the map has it down, the row has a new
    // version and a new primary, and what the old primary would send under
    // its map is refused.
    c.pause(p, true);
    let now = c
        .map_until(x, Duration::from_secs(20), "the row's new version", |s| s["map"]["partitions"][r.to_string()]["version"].as_u64().unwrap_or(0) > v0)
        .await["map"]
        .clone();
    let e1 = now["epoch"].as_u64().unwrap();
    let k3 = decision_key(&TxnId::random());
    let old = rpc(&c, x, e0, r, &k3, Some(b"stale primary")).await;
    assert!(fenced(&old), "a write under the map of before the failover: {old:?}");
    assert!(fenced(&rpc(&c, x, e0, r, &k1, None).await));
    assert_eq!(rpc(&c, x, e1, r, &k3, None).await, Err(WireError::NotFound));
    assert_eq!(rpc(&c, x, e1, r, &k1, None).await, Ok(b"one".to_vec()));
    // A map newer than any the cluster has is refused too (after the node
    // tried to catch up to it).
    assert!(fenced(&rpc(&c, x, e1 + 1000, r, &k3, Some(b"from the future")).await));
    let metrics = c.client(x).send(http::Method::GET, "/metrics", &[], strata_client::full(bytes::Bytes::new())).await.expect("metrics");
    let text = String::from_utf8_lossy(&metrics.bytes().await.expect("metrics body")).to_string();
    assert!(metric(&text, "strata_tract_rows_fenced") >= 5.0, "{}", text.lines().filter(|l| l.contains("fenced")).collect::<Vec<_>>().join("\n"));
    c.pause(p, false);
}
