//! Multi-process tests of the live cluster (issue 20): failure detection
//! in the map, replica moves, removals and re-replication, rebalancing.
//! Real `strata` processes behind the same fault-injecting proxy as
//! `cluster.rs`, whose harness this file includes.

// The harness serves both binaries; each uses part of it.
#![allow(dead_code)]

mod common;

use common::content;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_client::{Client, PutArgs};
use tokio::net::{TcpListener, TcpStream};

include!("cluster/harness.rs");

/// Blobs acknowledged, with their bytes.
type Acked = Vec<(String, Vec<u8>)>;

/// Load while the cluster changes: a reader of every acknowledged blob,
/// checking its bytes, and optionally a writer adding blobs.
struct Load {
    acked: Arc<Mutex<Acked>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    writer: Option<tokio::task::JoinHandle<()>>,
    reader: tokio::task::JoinHandle<(u64, Vec<String>)>,
}

impl Load {
    /// Reads through node `read_via` (every `step`-th blob, round and
    /// round) the blobs in `acked` and those the writer adds; with
    /// `write = Some((via, size, seed))`, puts a `size`-byte blob through
    /// node `via` every 20 ms.
    fn start(c: &Cluster, acked: Acked, write: Option<(u8, usize, u64)>, read_via: u8, step: usize) -> Load {
        let acked = Arc::new(Mutex::new(acked));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = write.map(|(via, size, first_seed)| {
            let (client, acked, stop) = (c.client(via), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seed = first_seed;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let data = content(seed, size);
                    if let Ok(r) = client.put_bytes(data.clone(), &PutArgs::default()).await {
                        acked.lock().unwrap().push((r.id, data));
                    }
                    seed += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        });
        let reader = {
            let (client, acked, stop) = (c.client(read_via), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut reads, mut failures) = (0u64, Vec::new());
                let mut i = 0usize;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let pick = {
                        let a = acked.lock().unwrap();
                        a[i % a.len()].clone()
                    };
                    i += step;
                    match client.get_bytes(&pick.0).await {
                        Ok(b) if b[..] == pick.1[..] => reads += 1,
                        Ok(_) => failures.push(format!("{}: different bytes", pick.0)),
                        Err(e) => failures.push(format!("{}: {e}", pick.0)),
                    }
                }
                (reads, failures)
            })
        };
        Load { acked, stop, writer, reader }
    }

    /// Stops both; returns every acknowledged blob, the reads that
    /// returned the right bytes and the failures.
    async fn stop(self) -> (Acked, u64, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(w) = self.writer {
            w.await.expect("writer");
        }
        let (reads, failures) = self.reader.await.expect("reader");
        let acked = self.acked.lock().unwrap().clone();
        (acked, reads, failures)
    }
}

/// Failure detection in the map (FDS's heartbeats): a frozen node (SIGSTOP)
/// is marked down by the metadata leader within seconds and back up after
/// SIGCONT; a disk whose directory disappears is marked failed without an
/// operator. Routers skip both at once; puts and gets go on; the affected
/// partitions show as degraded in the status and the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_mark_a_frozen_node_down_and_back_up_and_a_lost_disk_failed() {
    let _serial = SERIAL.lock().await;
    let extra = ["--heartbeat-ms", "200", "--down-after-ms", "1500", "--intra-replication-ms", "50", "--inter-replication-ms", "100"];
    let mut c = Cluster::start_zones(67, 2, 4, &extra).await;
    // A spare node in zone 2, where a disk will fail.
    c.add_node(7, 2).await;
    let node_state = |v: &serde_json::Value, n: u8| v["map"]["nodes"][n.to_string()]["state"].clone();
    // Every node heartbeats; on a member, the liveness worker runs.
    let workers = c.client(1).json(http::Method::GET, "/admin/workers").await.expect("workers");
    let names: Vec<&str> = workers.as_array().into_iter().flatten().filter_map(|w| w["name"].as_str()).collect();
    for w in ["map-feed", "reconciler", "heartbeat", "liveness", "replication", "scrub", "sweep", "compaction", "space-monitor"] {
        assert!(names.contains(&w), "worker {w} missing: {names:?}");
    }
    let before = c.status(1).await.expect("status");
    assert!(c.nodes().iter().all(|&n| node_state(&before, n) == "Up"), "{}", before["map"]["nodes"]);

    // Node 2 (not a metadata member) freezes.
    let mut blobs = Vec::new();
    for seed in 0..4u64 {
        let data = content(700 + seed, 20_000);
        blobs.push((put(&c.client(1), &data, None).await, data));
    }
    c.pause(2, true);
    let started = Instant::now();
    let down = c.map_until(3, Duration::from_secs(15), "node 2 down", |v| node_state(v, 2).get("Down").is_some()).await;
    eprintln!("node 2 marked down {:?} after SIGSTOP", started.elapsed());
    let degraded = down["degraded"].as_array().map_or(0, |d| d.len());
    assert!(degraded > 0, "partitions with a replica on node 2 are degraded: {down}");
    let metrics = c.client(3).get_text("/metrics").await.expect("metrics");
    assert_eq!(metric(&metrics, "strata_cluster_nodes_down"), 1.0);
    assert!(metric(&metrics, "strata_cluster_partitions_degraded") >= 1.0);
    // Puts and gets go on without waiting on the frozen node.
    for seed in 4..8u64 {
        let data = content(700 + seed, 20_000);
        blobs.push((put(&c.client(1), &data, None).await, data));
    }
    for (id, data) in &blobs {
        get_ok(&c.client(3), id, data).await;
    }
    c.pause(2, false);
    c.map_until(3, Duration::from_secs(15), "node 2 up again", |v| node_state(v, 2) == "Up").await;

    // Node 4's only disk loses its directory: the next probe fails and the
    // leader marks the disk failed.
    let disk = c.dir.join("n4/d0");
    // Renamed away at once (removing it races the node's own writes).
    std::fs::rename(&disk, c.dir.join("n4/d0.gone")).expect("take the disk's directory away");
    let started = Instant::now();
    let failed = c.map_until(1, Duration::from_secs(15), "node 4's disk failed", |v| v["map"]["nodes"]["4"]["disks"][0]["state"] == "Failed").await;
    eprintln!("node 4's disk marked failed {:?} after its directory went", started.elapsed());
    assert!(failed["degraded"].as_array().is_some_and(|d| !d.is_empty()), "{failed}");
    assert_eq!(node_state(&failed, 4), "Up", "the node itself still heartbeats");
    for (id, data) in &blobs {
        get_ok(&c.client(1), id, data).await;
    }
    for seed in 8..12u64 {
        let data = content(700 + seed, 20_000);
        let id = put(&c.client(3), &data, None).await;
        get_ok(&c.client(5), &id, &data).await;
    }
    let (ok, text) = c.cli(1, &["cluster", "status"]);
    assert!(ok && text.contains("1 disk(s) failed (map)"), "{text}");
    // Without an operator, the failed disk's replicas are re-created on the
    // spare node of its zone, from the survivors; nothing is degraded then.
    let healed = c
        .map_until(1, Duration::from_secs(60), "node 4's replicas re-created elsewhere", |v| {
            let parts = v["map"]["partitions"].as_object().cloned().unwrap_or_default();
            v["degraded"].as_array().is_some_and(|d| d.is_empty())
                && parts.values().all(|p| p["moving"].is_null() && p["replicas"].as_array().is_some_and(|r| r.iter().all(|r| r["node"] != 4) && r.len() == 6))
        })
        .await;
    eprintln!("re-replicated: {}", healed["map"]["partitions"]);
    for (id, data) in &blobs {
        assert!(holds(&c, 7, id).await, "node 7 lacks {id}");
        get_ok(&c.client(7), id, data).await;
    }
}

/// A replica move on a live cluster: a new node joins zone 1 and partition
/// 0's replica on node 1 moves to it while a writer and a reader run. The
/// receiving node is killed and restarted, and the metadata leader too,
/// mid-move; the move resumes from the map and finishes. Reads never fail,
/// the new replica holds every acknowledged blob of the partition, and
/// node 1 no longer holds the partition at all. Bad moves are refused with
/// the reason and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_moves_under_load_survives_crashes_and_the_old_copy_goes() {
    let _serial = SERIAL.lock().await;
    let extra = ["--heartbeat-ms", "200", "--down-after-ms", "3000", "--intra-replication-ms", "50", "--inter-replication-ms", "100"];
    let mut c = Cluster::start_zones(68, 2, 2, &extra).await;
    c.add_node(7, 1).await;
    // Data to move: about 12 MB in partition 0.
    let mut acked: Vec<(String, Vec<u8>)> = Vec::new();
    for seed in 0..24u64 {
        let data = content(900 + seed, 1_000_000);
        acked.push((put(&c.client(2), &data, None).await, data));
    }
    // A writer through zone 1 and a reader of everything acknowledged.
    let load = Load::start(&c, acked, Some((2, 30_000, 2000)), 5, 7);

    // Bad moves: refused with the reason, nothing changes.
    let before = c.status(1).await.expect("status")["map"]["partitions"].clone();
    for (args, why) in [
        (["--from", "1:0", "--to", "2:0"], "already holds a replica"),
        (["--from", "3:0", "--to", "7:0"], "stays in its zone"),
        (["--from", "7:0", "--to", "1:0"], "holds no replica"),
        (["--from", "1:0", "--to", "7:3"], "has no disk"),
    ] {
        let (ok, out) = c.cli(1, &[&["partition", "move", "--id", "0"][..], &args[..]].concat());
        assert!(!ok && out.contains(why), "{args:?}: {out}");
    }
    assert_eq!(c.status(1).await.expect("status")["map"]["partitions"], before, "a refused move changed the map");

    // The move, then crashes of the receiving node and of the leader.
    let (ok, out) = c.cli(3, &["partition", "move", "--id", "0", "--from", "1:0", "--to", "7:0"]);
    assert!(ok, "{out}");
    let (ok, out) = c.cli(3, &["partition", "move", "--id", "0", "--from", "2:0", "--to", "7:0"]);
    assert!(!ok && out.contains("already moving"), "{out}");
    c.kill9(7);
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.spawn(7);
    c.wait_healthy(7).await;
    if let Some(l) = c.leader().await {
        c.kill9(l);
        tokio::time::sleep(Duration::from_millis(500)).await;
        c.spawn(l);
        c.wait_healthy(l).await;
    }
    let done = c
        .map_until(3, Duration::from_secs(60), "the move finished", |v| {
            let p = &v["map"]["partitions"]["0"];
            p["moving"].is_null() && p["replicas"].as_array().is_some_and(|r| r.iter().any(|r| r["node"] == 7) && !r.iter().any(|r| r["node"] == 1))
        })
        .await;
    eprintln!("partition 0 now on {}", done["map"]["partitions"]["0"]["replicas"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (acked, reads, failures) = load.stop().await;
    assert!(
        failures.is_empty(),
        "{} of {} reads failed during the move: {:?}",
        failures.len(),
        reads + failures.len() as u64,
        &failures[..failures.len().min(5)]
    );
    assert!(reads > 20, "the reader read {reads} times");

    // Node 7 holds every acknowledged blob of partition 0 (after the writes
    // it got directly have settled); node 1 holds nothing of it.
    let in_p0: Vec<&(String, Vec<u8>)> = acked.iter().filter(|(id, _)| strata_types::BlobId::parse(id).expect("id").partition() == 0).collect();
    assert!(in_p0.len() > 10, "{} blobs in partition 0", in_p0.len());
    let deadline = Instant::now() + Duration::from_secs(30);
    for (id, data) in &in_p0 {
        while !holds(&c, 7, id).await {
            assert!(Instant::now() < deadline, "node 7 lacks {id}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        get_ok(&c.client(7), id, data).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.dir.join("n1/d0/partitions/00000000").exists() {
        assert!(Instant::now() < deadline, "node 1 never dropped partition 0's files");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let parts = c.client(1).json(http::Method::GET, "/admin/partitions").await.expect("partitions");
    assert!(parts.as_array().into_iter().flatten().all(|p| p["partition"] != 0), "{parts}");
    for (id, data) in &acked {
        get_ok(&c.client(1), id, data).await;
    }
    // Cancelled before promotion: the pending copy goes, nothing else.
    let (ok, out) = c.cli(1, &["partition", "move", "--id", "1", "--from", "1:0", "--to", "7:0"]);
    assert!(ok, "{out}");
    let (ok, out) = c.cli(1, &["partition", "move", "--id", "1", "--cancel"]);
    // The move may already have been promoted on a quick machine: then it
    // refuses to cancel and finishes.
    assert!(ok || out.contains("finishes on its own"), "{out}");
}

/// Decommissioning and Ceph's down-out, on real processes: node 2 is
/// removed while a writer and a reader run (its replicas move to the spare
/// node of its zone, then it leaves the map and drops its files); node 4 is
/// killed and, once down longer than the down-out time, its replicas are
/// re-created on the spare node of its zone from the survivors. No read
/// fails, and every acknowledged blob is back at full replication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_removed_under_load_and_a_dead_one_is_replaced_after_the_down_out_time() {
    let _serial = SERIAL.lock().await;
    let extra = ["--heartbeat-ms", "200", "--down-after-ms", "1500", "--down-out-ms", "3000", "--intra-replication-ms", "50", "--inter-replication-ms", "100"];
    let mut c = Cluster::start_zones(69, 2, 3, &extra).await;
    c.add_node(7, 1).await;
    c.add_node(8, 2).await;
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    for seed in 0..12u64 {
        let data = content(3000 + seed, 400_000);
        blobs.push((put(&c.client(1), &data, None).await, data));
    }
    let load = Load::start(&c, blobs, Some((3, 20_000, 4000)), 5, 5);

    // The last node of a zone cannot go; node 2 can, and does.
    let (ok, out) = c.cli(1, &["node", "remove", "--id", "2", "--wait"]);
    assert!(ok, "{out}");
    let map = c.status(1).await.expect("status")["map"].clone();
    assert!(map["nodes"].get("2").is_none(), "node 2 is still in the map: {}", map["nodes"]);
    let (ok, out) = c.cli(1, &["node", "remove", "--id", "7"]);
    assert!(!ok && out.contains("nowhere to go"), "zone 1 has only nodes 1 and 7 left: {out}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(c.dir.join("n2/d0/partitions")).map(|d| d.count()).unwrap_or(0) > 0 {
        assert!(Instant::now() < deadline, "node 2 kept replicas the map no longer places on it");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Node 4 dies; past the down-out time its replicas go to node 8.
    c.kill9(4);
    let started = Instant::now();
    c.map_until(1, Duration::from_secs(60), "node 4's replicas re-created on node 8", |v| {
        let parts = v["map"]["partitions"].as_object().cloned().unwrap_or_default();
        !parts.is_empty()
            && parts.values().all(|p| p["moving"].is_null() && p["replicas"].as_array().is_some_and(|r| r.len() == 6 && r.iter().all(|r| r["node"] != 4)))
    })
    .await;
    eprintln!("node 4 replaced {:?} after it died", started.elapsed());
    let (acked, reads, failures) = load.stop().await;
    assert!(failures.is_empty(), "{} of {} reads failed: {:?}", failures.len(), reads + failures.len() as u64, &failures[..failures.len().min(5)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    for (id, data) in &acked {
        for n in [7u8, 8] {
            while !holds(&c, n, id).await {
                assert!(Instant::now() < deadline, "node {n} lacks {id}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        get_ok(&c.client(8), id, data).await;
        get_ok(&c.client(1), id, data).await;
    }
}

/// Ambry's rebalancing on the live cluster: a node joins zone 1 and
/// `strata cluster rebalance` moves its share of replicas onto it while a
/// reader runs, with the metadata leader killed (SIGKILL) mid-plan: the
/// plan lives in the map, the next leader carries it on. No read fails;
/// the dry run changes nothing; a second rebalance finds nothing to move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_moves_replicas_onto_a_new_node_and_survives_the_leaders_death() {
    let _serial = SERIAL.lock().await;
    let extra = ["--heartbeat-ms", "200", "--down-after-ms", "1500", "--intra-replication-ms", "50", "--inter-replication-ms", "100"];
    let mut c = Cluster::start_zones(70, 1, 8, &extra).await;
    // Every event to a file: the cluster's changes are among them.
    let events = c.dir.join("events.jsonl");
    let (ok, out) = c.cli(1, &["events", "target", "add", "ops", "--file", &events.to_string_lossy(), "--all"]);
    assert!(ok, "{out}");
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    for seed in 0..16u64 {
        let data = content(5000 + seed, 300_000);
        blobs.push((put(&c.client(2), &data, None).await, data));
    }
    c.add_node(4, 1).await;
    let before = c.status(1).await.expect("status")["map"].clone();
    let (ok, out) = c.cli(1, &["cluster", "rebalance", "--dry-run"]);
    assert!(ok && out.contains("plan: 4 moves") && out.contains("-> 4:0"), "{out}");
    assert_eq!(c.status(1).await.expect("status")["map"], before, "a dry run changed the map");

    let load = Load::start(&c, blobs, None, 2, 3);
    let (ok, out) = c.cli(3, &["cluster", "rebalance", "--max-moves", "1", "--no-wait"]);
    assert!(ok, "{out}");
    let (ok, out) = c.cli(3, &["cluster", "rebalance", "--dry-run"]);
    assert!(!ok && (out.contains("under way") || out.contains("moving")), "a second plan while one runs: {out}");
    // Kill the leader once the first move is done.
    c.map_until(3, Duration::from_secs(60), "a planned move done", |v| {
        v["map"]["partitions"].as_object().is_some_and(|ps| ps.values().any(|p| p["replicas"].as_array().is_some_and(|r| r.iter().any(|r| r["node"] == 4))))
    })
    .await;
    let leader = c.leader().await.expect("a leader");
    c.kill9(leader);
    let done = c
        .map_until(if leader == 3 { 2 } else { 3 }, Duration::from_secs(90), "the rebalancing finished", |v| {
            v["map"]["rebalance"].is_null() && v["map"]["partitions"].as_object().is_some_and(|ps| ps.values().all(|p| p["moving"].is_null()))
        })
        .await;
    c.spawn(leader);
    c.wait_healthy(leader).await;
    let on4 = done["map"]["partitions"]
        .as_object()
        .map_or(0, |ps| ps.values().filter(|p| p["replicas"].as_array().is_some_and(|r| r.iter().any(|r| r["node"] == 4))).count());
    assert_eq!(on4, 4, "node 4 holds half of zone 1's replicas: {}", done["map"]["partitions"]);
    let (acked, reads, failures) = load.stop().await;
    assert!(failures.is_empty(), "{} of {} reads failed: {:?}", failures.len(), reads + failures.len() as u64, &failures[..failures.len().min(5)]);
    for (id, data) in &acked {
        get_ok(&c.client(4), id, data).await;
    }
    c.map_until(2, Duration::from_secs(30), "the old leader up again", |v| v["map"]["nodes"][leader.to_string()]["state"] == "Up").await;
    let (ok, out) = c.cli(2, &["cluster", "rebalance", "--dry-run"]);
    assert!(ok && out.contains("nothing to move"), "{out}");
    let metrics = c.client(2).get_text("/metrics").await.expect("metrics");
    assert_eq!(metric(&metrics, "strata_rebalance_moves_planned"), 0.0);

    // The cluster's changes were captured, once each by id, with who made
    // them, through the leader's death: the new leader resumed the stream.
    let mut cluster_events: Vec<serde_json::Value> = Vec::new();
    let leader_name = leader.to_string();
    for _ in 0..100 {
        let text = std::fs::read_to_string(&events).unwrap_or_default();
        let mut seen = std::collections::BTreeSet::new();
        cluster_events = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("a line that is not an event ({e}): {l}")))
            .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with("strata:Node") || t.starts_with("strata:Rebalance") || t.starts_with("strata:Disk")))
            .filter(|e| seen.insert(e["id"].as_str().unwrap_or("").to_owned()))
            .collect();
        let is = |e: &serde_json::Value, kind: &str| e["type"] == kind && e["subject"]["name"].as_str() == Some(leader_name.as_str());
        let down = cluster_events.iter().position(|e| is(e, "strata:NodeDown"));
        let up_again = down.is_none_or(|d| cluster_events[d..].iter().any(|e| is(e, "strata:NodeUp")));
        if cluster_events.iter().any(|e| e["type"] == "strata:RebalanceFinished") && up_again {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let kinds: Vec<(String, String, String)> = cluster_events
        .iter()
        .map(|e| {
            (e["type"].as_str().unwrap_or("").to_owned(), e["subject"]["name"].as_str().unwrap_or("").to_owned(), e["who"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    eprintln!("cluster events: {kinds:?}");
    let at = |kind: &str, name: &str| kinds.iter().position(|(k, n, _)| k == kind && n == name).unwrap_or_else(|| panic!("no {kind} {name}: {kinds:?}"));
    let (added, disk, started, finished) =
        (at("strata:NodeAdded", "4"), at("strata:DiskAdded", "4/0"), at("strata:RebalanceStarted", "4 moves"), at("strata:RebalanceFinished", "rebalance"));
    assert!(added < disk && disk < started && started < finished, "out of order: {kinds:?}");
    assert_eq!(kinds[started].2, "node", "asked for with the cluster secret: {kinds:?}");
    assert_eq!(kinds[finished].2, "strata", "ended by the cluster itself: {kinds:?}");
    let seqs: Vec<u64> = cluster_events.iter().map(|e| e["seq"].as_u64().unwrap_or(0)).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "names events in seq order: {seqs:?}");
    // The killed leader was seen down (it stayed away past the down time) and up again.
    if let Some(down) = kinds.iter().position(|(k, n, _)| k == "strata:NodeDown" && *n == leader_name) {
        assert!(kinds[down..].iter().any(|(k, n, _)| k == "strata:NodeUp" && *n == leader_name), "{kinds:?}");
    }
}

/// The web console's cluster page in Debian's headless Chromium
/// (tests/console/test_cluster_console.py): an admin removes a node
/// through the page's confirmation and watches its replicas move until it
/// leaves the map; the map agrees, and every blob still reads whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_removes_a_node_and_watches_the_moves_finish() {
    let _serial = SERIAL.lock().await;
    let extra = ["--heartbeat-ms", "200", "--intra-replication-ms", "50", "--inter-replication-ms", "100"];
    let mut c = Cluster::start_zones(88, 2, 3, &extra).await;
    c.add_node(7, 1).await;
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    for seed in 0..12u64 {
        let data = content(7000 + seed, 300_000);
        blobs.push((put(&c.client(1), &data, None).await, data));
    }
    let key = c.client(1).post_json("/admin/keys", &serde_json::json!({ "name": "ops", "admin": true })).await.expect("an admin key");
    common::browser_test(
        "console/test_cluster_console.py",
        &c.dir,
        &[
            ("STRATA_UI", format!("https://{}/ui", c.real(1))),
            ("AWS_ACCESS_KEY_ID", key["access_key_id"].as_str().expect("id").to_owned()),
            ("AWS_SECRET_ACCESS_KEY", key["secret_access_key"].as_str().expect("secret").to_owned()),
            ("REMOVE", "2".to_owned()),
            ("DISK_NODE", "3".to_owned()),
            ("PARTITIONS", "3".to_owned()),
            ("NODES_AFTER", "6".to_owned()),
        ],
    );
    let map = c.status(1).await.expect("status")["map"].clone();
    assert!(map["nodes"].get("2").is_none(), "node 2 is still in the map: {}", map["nodes"]);
    // Node 7 received node 2's replicas: its metrics count the bytes, at
    // least the blobs' (each partition's replicas hold them all).
    let metrics = c.client(7).get_text("/metrics").await.expect("metrics");
    let copied = metric(&metrics, "strata_move_bytes_copied_total");
    assert!(copied >= (blobs.len() * 300_000) as f64, "strata_move_bytes_copied_total = {copied}");
    assert_eq!(metric(&metrics, "strata_moves_filling"), 0.0);
    assert_eq!(c.client(7).json(http::Method::GET, "/admin/cluster/moves").await.expect("moves")["moves"], serde_json::json!([]));
    for (id, data) in &blobs {
        get_ok(&c.client(1), id, data).await;
    }
}
