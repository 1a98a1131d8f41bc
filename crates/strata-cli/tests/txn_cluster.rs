//! Multi-process tests of Týr's transactions (issue 24): real `strata`
//! processes behind the fault-injecting proxy of `cluster.rs`, whose
//! harness this file includes.
//!
//! - Concurrent clients run list-append and register transactions while
//!   nodes are paused and killed and the killed node's rows move (the
//!   tract table changes under them); every client logs what it invoked and how
//!   it ended, and the history checker (`strata_txn::history`) must find
//!   no anomaly. The same workload against nodes started in a deliberately
//!   broken validation mode must make it report anomalies.
//! - A bank: transfers made of atomic adds between accounts in two blobs
//!   while nodes fail; read-only transactions summing every account always
//!   see the total, and so does the end.
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

async fn table(c: &Cluster) {
    c.command(1, serde_json::json!({ "TractInit": { "tract_bytes": 64 << 10, "replicas": 3, "scatter": 4, "capacity_bytes": 256u64 << 20, "seed": 7 } })).await;
    table_everywhere(c, 1).await;
}

async fn client(c: &Cluster) -> Arc<TxnClient> {
    let seeds: Vec<String> = c.nodes().iter().map(|n| format!("https://{}", c.real(*n))).collect();
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
    let client = client(c).await;
    let history = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..processes)
        .map(|p| {
            let (client, history, stop, committed, keys) = (client.clone(), history.clone(), stop.clone(), committed.clone(), keys.clone());
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
    for t in tasks {
        t.await.expect("client task");
    }
    Arc::try_unwrap(history).map(|m| m.into_inner().unwrap()).unwrap_or_default()
}

fn seconds(default: u64) -> u64 {
    std::env::var("STRATA_TXN_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The serializable run: list appends crossing chunks, registers, reads,
/// while one node is paused and another killed and restarted; the
/// checker finds no anomaly in at least 10,000 committed transactions.
/// Then the bank on the same cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactions_stay_serializable_while_nodes_fail_and_the_bank_balances() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start_zones(79, 2, 1, &["--txn-intent-timeout-ms", "1500", "--down-after-ms", "2000", "--heartbeat-ms", "250"]).await;
    table(&c).await;
    let started = Instant::now();
    let secs = seconds(240);
    let faults = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        c.pause(3, true);
        tokio::time::sleep(Duration::from_secs(3)).await;
        c.pause(3, false);
        tokio::time::sleep(Duration::from_secs(5)).await;
        // SAFETY of the test: the pid is our own child's.
        let pid = c.procs.get(&5).expect("node 5").id() as i32;
        unsafe { libc::kill(pid, libc::SIGKILL) };
    };
    let rows_of_5 = |t: &serde_json::Value| -> Vec<u64> {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["disks"].as_array().unwrap().iter().any(|d| d.as_str().unwrap().starts_with("5:")))
            .map(|r| r["partition"].as_u64().unwrap())
            .collect()
    };
    let before = rows_of_5(&c.client(1).json(http::Method::GET, "/admin/tracts").await.expect("the table"));
    let history = workload(&c, 24, secs, 10_000, Keys { prefix: "h-", lists: 24, registers: 8 }, faults).await;
    // The tract table changed under the clients: the dead node's rows
    // were re-replicated elsewhere (new row versions, new primaries).
    let after = rows_of_5(&c.client(1).json(http::Method::GET, "/admin/tracts").await.expect("the table"));
    assert!(!before.is_empty() && after.len() < before.len(), "node 5's rows before the kill {before:?}, after {after:?}");
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
    assert!(report.committed >= 10_000, "only {} transactions committed in {secs} s", report.committed);

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
    let c = Cluster::start_zones(82, 1, 1, &["--txn-read-lease-ms", "1500", "--txn-gc-interval-secs", "3600"]).await;
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
        let mut deleted = 0;
        for n in c.nodes() {
            let v = c.client(n).post_json("/admin/txn/gc", &serde_json::json!({})).await.expect("a collector pass");
            assert!(v["errors"].as_array().is_some_and(Vec::is_empty), "{v}");
            deleted += v["deleted"].as_u64().unwrap();
        }
        deleted
    };
    // Within the lease nothing goes: the successors were only just seen.
    assert_eq!(gc_all().await, 0);
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let deleted = gc_all().await;
    // Five superseded versions of each chunk, and of the blob's record.
    assert_eq!(deleted, 15, "versions reclaimed");
    assert_eq!(gc_all().await, 0, "a second pass finds nothing more");
    match old.read("gc", 36, 36).await {
        Err(TxnError::Conflict(m)) => assert!(m.contains("read lease"), "{m}"),
        other => panic!("a read under an expired blob version: {other:?}"),
    }
    assert_eq!(client.read("gc", 0, 72).await.unwrap(), vec![6u8; 72], "the newest versions stay");
}
