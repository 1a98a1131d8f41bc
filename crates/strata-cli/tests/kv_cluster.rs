//! Read-only stores on a cluster of real `strata` processes: six nodes in
//! three zones (127.71.0.1-6), the Raft group on one node per zone.
//!
//! The store is defined on the map's ring with one replica per zone. It is
//! built by Spark and by the Rust builder from the same generated input,
//! which must be byte-identical. Then `strata kv push` fetches it onto
//! every node and swaps it in. Every key is read from each of its owners,
//! and every other node answers 421 `NotOwned`. Version 2 is uploaded as
//! blobs into Strata itself and pushed from there while readers run: no read fails, and no reader sees version 2 and then 1. A
//! push with one node's folder corrupted swaps nothing and leaves no
//! version behind. A cluster-wide rollback returns every node to version 1.
//! A seventh node joins and `strata kv rebalance` moves its share to it in
//! batches while readers run, without a failed read. With one node killed,
//! every key is still readable.

mod common;

use base64::Engine;
use common::{same, spark, strata};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use strata_client::Client;

const OCTET: u8 = 71;
const NODES: u8 = 6;
const META: [u8; 3] = [1, 3, 5];
const RECORDS: u32 = 5_000;

fn addr(n: u8) -> String {
    format!("127.{OCTET}.0.{n}:7000")
}

fn url(n: u8) -> String {
    format!("https://{}", addr(n))
}

/// The cluster secret of this test's cluster, and client options acting
/// as a holder of it.
fn secret() -> &'static (PathBuf, strata_client::ClientOptions) {
    static SECRET: std::sync::OnceLock<(PathBuf, strata_client::ClientOptions)> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| common::cluster_secret(&tempfile::Builder::new().prefix("strata-kv-secret").tempdir().expect("tempdir").keep()))
}

fn client(n: u8) -> Client {
    Client::with_options(&url(n), &secret().1)
}

struct Cluster {
    dir: PathBuf,
    procs: BTreeMap<u8, Child>,
}

impl Cluster {
    async fn start() -> Self {
        let dir = tempfile::Builder::new().prefix("strata-kv-cluster").tempdir().expect("tempdir").keep();
        let mut c = Cluster { dir, procs: BTreeMap::new() };
        for n in 1..=NODES {
            c.spawn(n).await;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = client(1).post_json("/admin/cluster/init", &serde_json::json!({})).await {
            assert!(Instant::now() < deadline, "init failed: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for n in 1..=NODES {
            c.add_node(n).await;
        }
        // Blob partitions too: builds can be pushed from blobs in Strata.
        for n in 1..=NODES {
            c.command(serde_json::json!({ "AddDisk": { "node": n, "path": "d0", "capacity_bytes": 4u64 << 30 } })).await;
        }
        c.command(serde_json::json!({ "AddPartitions": { "count": 2, "replicas_per_zone": 1, "capacity_bytes": 256u64 << 20 } })).await;
        c
    }

    async fn command(&self, cmd: serde_json::Value) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match client(1).post_json("/admin/cluster/command", &cmd).await {
                Ok(v) if v.get("Refused").is_none() => break,
                other => assert!(Instant::now() < deadline, "{cmd}: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn spawn(&mut self, n: u8) {
        let meta: Vec<String> = META.iter().map(|&m| format!("{m}={}", addr(m))).collect();
        let log = std::fs::File::create(self.dir.join(format!("n{n}.log"))).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["server", "--data-dir"])
            .arg(self.dir.join(format!("n{n}")))
            .args(["--listen", &addr(n), "--node-id", &n.to_string(), "--meta", &meta.join(",")])
            .args(["--outbound-ip", &format!("127.{OCTET}.0.{n}")])
            .arg("--cluster-secret")
            .arg(&secret().0)
            .args(["--replica-capacity", "256MiB", "--disk-reserve", "0", "--segment-size", "16MiB"])
            .args(["--tail-cache", "32MiB"])
            .env("STRATA_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn strata");
        self.procs.insert(n, child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while client(n).json(http::Method::GET, "/health").await.is_err() {
            assert!(Instant::now() < deadline, "node {n} never became healthy");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn add_node(&self, n: u8) {
        let zone = format!("z{}", ((n - 1) / 2) % 3 + 1);
        self.command(serde_json::json!({ "AddNode": { "id": n, "addr": addr(n), "zone": zone, "rack": "r1" } })).await;
    }

    fn kill9(&mut self, n: u8) {
        if let Some(mut c) = self.procs.remove(&n) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, c) in self.procs.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("cluster data and logs kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn input(path: &Path, version: u32) {
    let mut text = String::from("key,value\n");
    for i in 0..RECORDS {
        text.push_str(&format!("k{i},v{version}-{i}\n"));
    }
    std::fs::write(path, text).unwrap();
}

fn cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .arg("--server")
        .arg(url(1))
        .env("STRATA_CLUSTER_SECRET", &secret().0)
        .output()
        .expect("run strata");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn b64(k: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k)
}

/// The nodes holding each key's partition, from the cluster map.
async fn owners_of_keys() -> Vec<Vec<u8>> {
    let r = client(1).send(http::Method::GET, "/meta/v1/map", &[], strata_client::full(bytes::Bytes::new())).await.unwrap();
    let map = strata_cluster::decode_map(&r.bytes().await.unwrap()).unwrap();
    let table = map.kv_table("people").unwrap();
    (0..RECORDS)
        .map(|i| {
            let d = strata_kv::placement::KeyHash::digest(&strata_kv::placement::Md5Hash, format!("k{i}").as_bytes());
            table[strata_kv::placement::partition_of(&d, table.len() as u32) as usize].iter().map(|&n| n as u8).collect()
        })
        .collect()
}

/// Two readers routing with `KvRouter` (nearest zone z1 and z3) until
/// stopped; each returns the last version it saw, and panics on a failed
/// read, a wrong value or a version going back.
#[allow(clippy::type_complexity)]
fn readers() -> (Arc<AtomicBool>, Arc<AtomicU64>, Vec<tokio::task::JoinHandle<u64>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let handles = (0..2u32)
        .map(|r| {
            let (stop, reads) = (stop.clone(), reads.clone());
            tokio::spawn(async move {
                let proximity: Vec<String> = if r == 0 { vec!["z1".into(), "z2".into()] } else { vec!["z3".into(), "z1".into()] };
                let router = strata_kv_client::KvRouter::connect(vec![url(1)], proximity, secret().1.clone()).await.expect("router");
                let mut seen = 0u64;
                let mut i = r * 997;
                while !stop.load(Ordering::Relaxed) {
                    let k = i % RECORDS;
                    let got = router.get("people", format!("k{k}").as_bytes()).await.unwrap_or_else(|e| panic!("read of key {k} failed: {e}"));
                    let v = got.unwrap_or_else(|| panic!("key {k} missing"));
                    assert_eq!(v.value, format!("v{}-{k}", v.version).into_bytes(), "the value is version {}'s", v.version);
                    assert!(v.version >= seen, "reader {r} saw version {seen} and then {}", v.version);
                    seen = v.version;
                    reads.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                seen
            })
        })
        .collect();
    (stop, reads, handles)
}

/// GET a key from a node: (status, version header, body).
async fn get(n: u8, i: u32) -> Result<(u16, u64, Vec<u8>), String> {
    let path = format!("/kv/people/{}", b64(format!("k{i}").as_bytes()));
    match client(n).send(http::Method::GET, &path, &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => {
            let v = r.head.headers.get("x-strata-kv-version").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(0);
            Ok((r.head.status.as_u16(), v, r.bytes().await.map_err(|e| e.to_string())?.to_vec()))
        }
        Err(strata_client::ClientError::Api { status, .. }) => Ok((status, 0, Vec::new())),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_swap_rollback_and_a_failed_fetch_across_a_three_zone_cluster() {
    let mut c = Cluster::start().await;
    let dir = c.dir.clone();
    let p = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let (ok, log) = cli(&["kv", "ring", "init", "--partitions", "24"]);
    assert!(ok, "{log}");
    let (ok, log) = cli(&["kv", "define", "--store", "people", "--chunks", "2", "--zone-replicas", "z1=1,z2=1,z3=1"]);
    assert!(ok, "{log}");
    let (ok, log) = cli(&["kv", "ring", "export", "--store", "people", "--out", &p("ring.json")]);
    assert!(ok, "{log}");

    // Version 1 from both builders, identical; versions 2 and 3 from Rust.
    for v in 1..=3 {
        input(&dir.join(format!("in{v}.csv")), v);
        strata(&["kv", "build", "--store", "people", "--ring", &p("ring.json"), "--input", &p(&format!("in{v}.csv")), "--out", &p(&format!("v{v}"))]);
    }
    let (ok, log) = spark(&["--store", "people", "--ring", &p("ring.json"), "--input", &p("in1.csv"), "--out", &p("spark1")]);
    assert!(ok, "{log}");
    same(&dir.join("v1"), &dir.join("spark1"));

    let (ok, log) = cli(&["kv", "push", "--store", "people", "--from", &p("spark1")]);
    assert!(ok, "{log}");
    assert!(log.contains("pushed people version 1 to 6 nodes"), "{log}");
    let owners = owners_of_keys().await;
    for i in (0..RECORDS).step_by(7) {
        for n in 1..=NODES {
            let (status, version, body) = get(n, i).await.unwrap();
            if owners[i as usize].contains(&n) {
                assert_eq!((status, version, body), (200, 1, format!("v1-{i}").into_bytes()), "key {i} on owner {n}");
            } else {
                assert_eq!(status, 421, "key {i} on node {n}, which does not hold it");
            }
        }
    }

    // Version 2 while readers run: no failed read, no going back.
    let (stop, reads, rs) = readers();
    // Version 2 comes from blobs stored in Strata itself.
    let (ok, log) = cli(&["kv", "upload", "--dir", &p("v2")]);
    assert!(ok, "{log}");
    let source = log.lines().find(|l| l.starts_with("strata://")).unwrap_or_else(|| panic!("no source in {log}")).to_string();
    let push = tokio::task::spawn_blocking(move || cli(&["kv", "push", "--store", "people", "--from", &source]));
    let (ok, log) = push.await.unwrap();
    assert!(ok, "{log}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for r in rs {
        assert_eq!(r.await.expect("reader"), 2, "readers end on version 2");
    }
    assert!(reads.load(Ordering::Relaxed) > 100, "the readers ran");

    // One node's folder is corrupt: nothing swaps and version 3 is gone everywhere.
    let victim = dir.join("v3/node-4");
    let chunk = std::fs::read_dir(&victim).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|e| e == "data")).unwrap();
    let mut bytes = std::fs::read(&chunk).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x5a;
    std::fs::write(&chunk, bytes).unwrap();
    let (ok, log) = cli(&["kv", "push", "--store", "people", "--from", &p("v3")]);
    assert!(!ok);
    assert!(log.contains("node 4") && log.contains("corrupt") && log.contains("nothing swapped"), "{log}");
    for n in 1..=NODES {
        let rows = client(n).json(http::Method::GET, "/admin/kv").await.unwrap();
        let row = rows.as_array().unwrap().iter().find(|r| r["store"] == "people").unwrap().clone();
        assert_eq!(row["live"], 2, "node {n}");
        assert_eq!(row["versions"], serde_json::json!([1, 2]), "node {n} kept no version 3");
    }

    // Cluster-wide rollback to version 1.
    let (ok, log) = cli(&["kv", "rollback", "--store", "people", "--all-nodes"]);
    assert!(ok, "{log}");
    for i in (0..RECORDS).step_by(101) {
        for &n in &owners[i as usize] {
            assert_eq!(get(n, i).await.unwrap(), (200, 1, format!("v1-{i}").into_bytes()));
        }
    }

    // A seventh node joins. While it is down, the rebalance fails and
    // changes nothing; started again, a rerun resumes from the checkpoint
    // and moves its share to it, in batches, while readers run.
    c.spawn(7).await;
    c.add_node(7).await;
    c.kill9(7);
    let before = owners_of_keys().await;
    let (ok, log) = cli(&["kv", "rebalance", "--add-node", "7", "--batch", "1", "--checkpoint", &p("rebalance.json")]);
    assert!(!ok && log.contains("nothing changed in the map"), "{log}");
    assert_eq!(owners_of_keys().await, before, "a failed rebalance leaves the ring as it was");
    assert!(dir.join("rebalance.json").exists(), "the checkpoint stays for the rerun");
    for i in (0..RECORDS).step_by(53) {
        for &n in &before[i as usize] {
            assert_eq!(get(n, i).await.unwrap(), (200, 1, format!("v1-{i}").into_bytes()), "key {i} on node {n} after the failed rebalance");
        }
    }
    c.spawn(7).await;
    let (stop, reads, rs) = readers();
    let rebalance = tokio::task::spawn_blocking({
        let cp = p("rebalance.json");
        move || cli(&["kv", "rebalance", "--add-node", "7", "--batch", "1", "--checkpoint", &cp])
    });
    let (ok, log) = rebalance.await.unwrap();
    assert!(ok, "{log}");
    assert!(log.contains("rebalanced: node 7 owns 3 of 24"), "{log}");
    assert!(!dir.join("rebalance.json").exists(), "the checkpoint is removed when done");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for r in rs {
        assert_eq!(r.await.expect("reader"), 1);
    }
    assert!(reads.load(Ordering::Relaxed) > 100);
    let owners = owners_of_keys().await;
    let on7 = owners.iter().filter(|o| o.contains(&7)).count();
    assert!(on7 > 0, "node 7 holds keys after the rebalance");
    for i in 0..RECORDS {
        for &n in &owners[i as usize] {
            assert_eq!(get(n, i).await.unwrap(), (200, 1, format!("v1-{i}").into_bytes()), "key {i} on node {n}");
        }
    }

    // One node down: every key is still on another zone's node.
    c.kill9(2);
    for i in 0..RECORDS {
        let mut found = false;
        for &n in owners[i as usize].iter().filter(|&&n| n != 2) {
            if let Ok((200, 1, body)) = get(n, i).await {
                assert_eq!(body, format!("v1-{i}").into_bytes());
                found = true;
                break;
            }
        }
        assert!(found, "key {i} unreadable with node 2 down");
    }
}
