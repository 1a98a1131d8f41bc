//! Multi-process cluster tests: real `strata` processes on 127.x.0.N
//! addresses in three zones (of three nodes, or of one as in README), the
//! Raft metadata group on one node per zone. Nodes reach each other only through a fault-injecting
//! proxy in this test process (each node's map address is its proxy), so a
//! zone can be cut off for real: the proxy refuses and breaks every
//! connection between that zone and the others. Nodes are killed with
//! SIGKILL and restarted from their data directories.

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

// The harness (the proxy, the cluster of real processes and their helpers)
// lives beside this file, included as text so this stays one test binary.
include!("cluster/harness.rs");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_durability_availability_catch_up_and_leader_loss() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(61, 4, &["--intra-replication-ms", "50", "--inter-replication-ms", "200"]).await;

    // Policy k = 2 (the default) and k = 3: kill k - 1 nodes of the writing
    // zone as soon as the put is acknowledged; the blob is still readable.
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    for (k, victims) in [(2u8, vec![2u8]), (3, vec![2, 3])] {
        for seed in 0..4u64 {
            let data = content(seed * 10 + k as u64, if seed % 2 == 0 { 3_000 } else { 2_500_000 });
            let policy = k.to_string();
            let id = put(&c.client(1), &data, Some(&policy)).await;
            for &v in &victims {
                c.kill9(v);
            }
            get_ok(&c.client(1), &id, &data).await;
            for &v in &victims {
                c.spawn(v);
            }
            for &v in &victims {
                c.wait_healthy(v).await;
            }
            c.detector_clear(1).await;
            blobs.push((id, data));
        }
    }

    // The cluster's default put policy, set in the map, applies on every
    // node: with "all", a put cannot succeed while a replica's node is down.
    c.command(3, serde_json::json!({ "SetPolicies": { "policies": { "put": "All", "get": "One", "delete": { "Count": 2 }, "ttl_update": { "Count": 2 } } } }))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.kill9(2);
    let refused = c.client(1).put_bytes(content(999, 100), &PutArgs::default()).await.map(|r| r.id);
    assert!(matches!(refused, Err(strata_client::ClientError::Api { status: 503, .. })), "{refused:?}");
    c.command(
        3,
        serde_json::json!({ "SetPolicies": { "policies": { "put": { "Count": 2 }, "get": "One", "delete": { "Count": 2 }, "ttl_update": { "Count": 2 } } } }),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let data = content(998, 100);
    blobs.push((put(&c.client(1), &data, None).await, data));
    c.spawn(2);
    c.wait_healthy(2).await;

    // A paused node (SIGSTOP: connections open, no answers) holds up
    // neither puts (2 acks of 3) nor gets (hedged to the next replica).
    let paused = c.procs[&3].id() as i32;
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(paused, libc::SIGSTOP) };
    for seed in 200..204u64 {
        let data = content(seed, 50_000);
        let id = put(&c.client(1), &data, None).await;
        get_ok(&c.client(1), &id, &data).await;
        blobs.push((id, data));
    }
    for (id, data) in &blobs {
        get_ok(&c.client(2), id, data).await;
    }
    // SAFETY: as above.
    unsafe { libc::kill(paused, libc::SIGCONT) };

    // One node per zone down: gets and puts keep succeeding everywhere else.
    for n in [2, 5, 8] {
        c.kill9(n);
    }
    for (i, (id, data)) in blobs.iter().enumerate() {
        let via = [1, 3, 4, 6, 7, 9][i % 6];
        get_ok(&c.client(via), id, data).await;
    }
    let mut during = Vec::new();
    for seed in 100..110u64 {
        let data = content(seed, 20_000 + seed as usize * 1000);
        let via = [1, 4, 7][seed as usize % 3];
        during.push((put(&c.client(via), &data, None).await, data));
    }
    let deleted = blobs.pop().expect("blobs").0;
    c.client(4).delete(&deleted).await.expect("delete while nodes are down");

    // The killed nodes restart and catch up: every replica of every
    // partition ends with the same keys in the same states.
    for n in [2, 5, 8] {
        c.spawn(n);
    }
    for n in [2, 5, 8] {
        c.wait_healthy(n).await;
    }
    let all = c.nodes();
    c.converged(&all, Duration::from_secs(60)).await;
    for (id, data) in blobs.iter().chain(during.iter()) {
        get_ok(&c.client(5), id, data).await;
    }
    let gone = c.client(8).get_bytes(&deleted).await.map(|b| b.len());
    assert!(matches!(gone, Err(strata_client::ClientError::Api { status: 410, .. })), "{gone:?}");

    // A replaced disk: node 9 loses its data. Its replicas start empty and
    // bootstrap from their peers (whose tokens against node 9 name the old
    // incarnation and start over). Enough small blobs that a replica's
    // bootstrap takes several fetch batches (128 keys each), several in
    // flight at once.
    let bulk: Vec<(String, Vec<u8>)> = futures_util::StreamExt::collect(futures_util::StreamExt::buffer_unordered(
        futures_util::stream::iter((0..2_400u64).map(|i| {
            let client = c.client([1, 4, 7][i as usize % 3]);
            async move {
                let data = content(10_000 + i, 1_000 + (i as usize % 7) * 100);
                (put(&client, &data, None).await, data)
            }
        })),
        16,
    ))
    .await;
    c.converged(&all, Duration::from_secs(60)).await;
    c.kill9(9);
    std::fs::remove_dir_all(c.dir.join("n9")).expect("wipe node 9");
    c.spawn(9);
    c.wait_healthy(9).await;
    c.converged(&all, Duration::from_secs(60)).await;
    let held = c.indexes(&[9]).await;
    let most = held.get(&9).into_iter().flat_map(|parts| parts.values()).map(Vec::len).max().unwrap_or(0);
    assert!(most > 4 * 128, "node 9's fullest replica holds {most} keys: too few for several fetch batches");
    for (id, data) in blobs.iter().chain(during.iter()).chain(bulk.iter().step_by(37)) {
        get_ok(&c.client(9), id, data).await;
    }

    // Killing the metadata leader: the others elect a new one and the map
    // stays available for changes.
    let old = c.leader().await.expect("a leader");
    let epoch = c.status(2).await.expect("status")["map"]["epoch"].as_u64().expect("epoch");
    c.kill9(old);
    let deadline = Instant::now() + Duration::from_secs(30);
    let new = loop {
        if let Some(l) = c.leader().await
            && l != old
        {
            break l;
        }
        assert!(Instant::now() < deadline, "no new leader after killing node {old}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(c.meta().contains(&new));
    let via = *c.meta().iter().find(|&&m| m != old).expect("a live member");
    let out = c.command(via, serde_json::json!({ "AddPartitions": { "count": 1, "replicas_per_zone": 3, "capacity_bytes": 256u64 << 20 } })).await;
    assert!(out["PartitionsAdded"]["epoch"].as_u64().expect("epoch") > epoch, "{out}");
    // A node that is not a member sees the change.
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.status(9).await.map_or(0, |s| s["map"]["epoch"].as_u64().unwrap_or(0)) <= epoch {
        assert!(Instant::now() < deadline, "node 9 never saw the new map");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.spawn(old);
    c.wait_healthy(old).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_cut_off_serves_locally_proxies_and_converges_after_healing() {
    let _serial = SERIAL.lock().await;
    // Slow inter-zone replication, so a read right after a put in another
    // zone must be proxied.
    let c = Cluster::start(62, 3, &["--intra-replication-ms", "50", "--inter-replication-ms", "3000"]).await;
    let mut before = Vec::new();
    for seed in 0..6u64 {
        let data = content(seed, 10_000 + seed as usize * 300_000);
        before.push((put(&c.client(1), &data, None).await, data));
    }
    let all = c.nodes();
    c.converged(&all, Duration::from_secs(60)).await;

    // A blob written in zone 1 and read at once in zone 2 is proxied. An
    // inter-zone pull may land between the put and the get (one every 3 s):
    // then zone 2 holds the blob and rightly serves it itself; try again.
    let mut proxied = false;
    for attempt in 0..5u64 {
        let proxied_before = metric(&c.client(4).get_text("/metrics").await.expect("metrics"), "strata_router_proxied_gets_total");
        let fresh = content(50 + attempt, 5_000);
        let fresh_id = put(&c.client(2), &fresh, None).await;
        get_ok(&c.client(4), &fresh_id, &fresh).await;
        let proxied_after = metric(&c.client(4).get_text("/metrics").await.expect("metrics"), "strata_router_proxied_gets_total");
        if proxied_after > proxied_before {
            proxied = true;
            break;
        }
        let mut local = false;
        for n in 4..=6 {
            local |= holds(&c, n, &fresh_id).await;
        }
        assert!(local, "the get was neither proxied ({proxied_before} -> {proxied_after}) nor served by a replica of zone 2");
    }
    assert!(proxied, "five gets in a row found the blob already replicated to zone 2");

    // Zone 3 is cut off.
    c.proxy.cut(3);
    // Local reads in zone 3 keep working.
    for (id, data) in &before {
        get_ok(&c.client(8), id, data).await;
    }
    // Writes in zone 3 succeed (synchronous in the local zone only).
    let mut in_cut = Vec::new();
    for seed in 60..64u64 {
        let data = content(seed, 40_000);
        in_cut.push((put(&c.client(7), &data, None).await, data));
    }
    // Writes elsewhere succeed and are proxied between the zones still joined.
    let mut outside = Vec::new();
    for seed in 70..74u64 {
        let data = content(seed, 40_000);
        let id = put(&c.client(5), &data, None).await;
        get_ok(&c.client(1), &id, &data).await;
        outside.push((id, data));
    }
    // A blob zone 3 cannot reach is "unavailable" (retry), never "not found".
    let r = c.client(9).get_bytes(&outside[0].0).await.map(|b| b.len());
    assert!(matches!(r, Err(strata_client::ClientError::Api { status: 503, .. })), "{r:?}");

    // Healing: every replica converges, and each side reads the other's writes.
    c.proxy.heal();
    c.converged(&all, Duration::from_secs(90)).await;
    for (id, data) in &in_cut {
        get_ok(&c.client(3), id, data).await;
    }
    for (id, data) in &outside {
        get_ok(&c.client(9), id, data).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_partition_turns_read_only_in_the_map_and_new_ones_take_puts() {
    let _serial = SERIAL.lock().await;
    // One partition whose replicas hold 4 MiB (read-only past 85%).
    let c = Cluster::start(63, 1, &["--replica-capacity", "4MiB"]).await;
    let mut stored = Vec::new();
    let refused = loop {
        let data = content(stored.len() as u64, 600_000);
        match c.client(1).put_bytes(data.clone(), &PutArgs::default()).await {
            Ok(r) => stored.push((r.id, data)),
            Err(e) => break e,
        }
        assert!(stored.len() < 20, "capacity never enforced");
    };
    assert!(matches!(refused, strata_client::ClientError::Api { status: 507, .. }), "{refused:?}");
    // The full partition becomes read-only in the map, for every node.
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.status(9).await.is_none_or(|s| s["map"]["partitions"]["0"]["state"] != "ReadOnly") {
        assert!(Instant::now() < deadline, "partition 0 never turned read-only in the map");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (id, data) in &stored {
        get_ok(&c.client(5), id, data).await;
    }
    // A new partition takes the puts.
    c.command(4, serde_json::json!({ "AddPartitions": { "count": 1, "replicas_per_zone": 3, "capacity_bytes": 4u64 << 20 } })).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let data = content(77, 100_000);
    let id = loop {
        match c.client(7).put_bytes(data.clone(), &PutArgs::default()).await {
            Ok(r) => break r.id,
            Err(e) => assert!(Instant::now() < deadline, "puts never resumed: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(strata_types::BlobId::parse(&id).expect("an id").partition(), 1, "the put went to the full partition");
    get_ok(&c.client(2), &id, &data).await;
}

/// README's cluster: three nodes, one per zone, so each partition has one
/// replica per zone. Items 2, 3 and 4 of the integrity issue, on real
/// processes: write policies count every zone; a damaged copy is served
/// from a peer and repaired; a node whose log lost acknowledged records
/// never reuses their lsns, so its new writes still reach its peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_per_zone_policies_read_repair_and_lsns_that_never_repeat() {
    let _serial = SERIAL.lock().await;
    // Inter-zone replication is slow here, so a put's copies in other zones
    // come from the put itself, not from replication racing the test.
    let mut c = Cluster::start_zones(64, 1, 2, &["--intra-replication-ms", "50", "--inter-replication-ms", "3000"]).await;

    // `all` means all three zones: with node 2 down it cannot be met, and
    // says how many acks came back.
    c.kill9(2);
    let all = c.client(1).put_bytes(content(1, 1000), &PutArgs { policy: Some("all".into()), ..PutArgs::default() }).await.map(|r| r.id);
    match all {
        Err(strata_client::ClientError::Api { status: 503, message, .. }) => assert!(message.contains("2 of 3 acks"), "{message}"),
        other => panic!("a put with `all` and a zone down: {other:?}"),
    }
    // `2` waits for a second zone: the blob survives node 1 at once.
    let two = content(2, 5000);
    let two_id = put(&c.client(1), &two, Some("2")).await;
    c.kill9(1);
    get_ok(&c.client(3), &two_id, &two).await;
    // The default (Ambry's local:2) is the local zone's one replica.
    let local = content(3, 5000);
    let local_id = put(&c.client(3), &local, None).await;
    assert!(holds(&c, 3, &local_id).await);
    c.spawn(1);
    c.spawn(2);
    c.wait_healthy(1).await;
    c.wait_healthy(2).await;
    c.detector_clear(1).await;
    c.detector_clear(3).await;

    // A damaged copy on node 3 (a byte flipped while it was down): a get
    // on node 3 serves a whole copy from another zone and repairs its own.
    let whole = content(4, 300_000);
    let whole_id = put(&c.client(1), &whole, Some("all")).await;
    // Node 3's replication passes the put first, so only a read can repair it.
    caught_up(&c, 3, &[1, 2]).await;
    c.kill9(3);
    let mut flipped = false;
    for seg in segment_files(&c, 3) {
        let mut bytes = std::fs::read(&seg).expect("segment");
        if let Some(at) = bytes.windows(64).position(|w| w == &whole[..64]) {
            bytes[at + 1010] ^= 0x40;
            std::fs::write(&seg, bytes).expect("write segment");
            flipped = true;
        }
    }
    assert!(flipped, "node 3 held the blob");
    c.spawn(3);
    c.wait_healthy(3).await;
    get_ok(&c.client(3), &whole_id, &whole).await;
    // The replica clears its damage when the repair's write is applied; the
    // router counts the repair when that write is acknowledged, after its
    // fsync: the count is read after both, not between them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let parts = c.client(3).json(http::Method::GET, "/admin/partitions").await.unwrap_or_default();
        let damaged: u64 = parts.as_array().into_iter().flatten().map(|p| p["damaged_ranges"].as_u64().unwrap_or(0)).sum();
        let repairs = metric(&c.client(3).get_text("/metrics").await.expect("metrics"), "strata_router_read_repairs_total");
        if damaged == 0 && holds(&c, 3, &whole_id).await && repairs >= 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "node 3's damaged copy was never repaired by a read ({repairs} read repairs): {parts}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.kill9(1);
    c.kill9(2);
    get_ok(&c.client(3), &whole_id, &whole).await;
    c.spawn(1);
    c.spawn(2);
    c.wait_healthy(1).await;
    c.wait_healthy(2).await;
    c.detector_clear(1).await;

    // Node 1 writes; its peers pull the writes; then node 1 loses the end
    // of its logs (acknowledged records its peers' tokens have passed).
    let mut early = Vec::new();
    for i in 0..10u64 {
        let data = content(100 + i, 3000);
        early.push((put(&c.client(1), &data, None).await, data));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for (id, _) in &early {
        while !(holds(&c, 2, id).await && holds(&c, 3, id).await) {
            assert!(Instant::now() < deadline, "{id} never replicated");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Node 1's tokens pass its peers' copies too, so replication alone will
    // not bring back what the cut takes.
    caught_up(&c, 1, &[2, 3]).await;
    c.kill9(1);
    for seg in segment_files(&c, 1) {
        let bytes = std::fs::read(&seg).expect("segment");
        let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
        if end > 64 {
            let f = std::fs::OpenOptions::new().write(true).open(&seg).expect("open segment");
            f.set_len(64 + (end as u64 - 64) / 2).expect("cut the log");
        }
    }
    c.spawn(1);
    c.wait_healthy(1).await;
    c.detector_clear(3).await;
    let mut late = Vec::new();
    for i in 0..29u64 {
        let data = content(200 + i, 3000);
        late.push((put(&c.client(1), &data, None).await, data));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for (id, _) in &late {
        while !(holds(&c, 2, id).await && holds(&c, 3, id).await) {
            assert!(Instant::now() < deadline, "{id}, written on node 1 after its log was cut, never reached its peers");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Node 1's own copies of the early blobs went with the cut, and
    // replication will not bring them back (its tokens passed them): a
    // scrub pass compares node 1's replicas with its peers' and copies them.
    let lost = {
        let mut n = 0;
        for (id, _) in &early {
            n += usize::from(!holds(&c, 1, id).await);
        }
        n
    };
    assert!(lost > 0, "the cut lost none of node 1's early blobs");
    let report = scrub_now(&c, 1, false).await;
    assert!(report["repaired"].as_u64().unwrap_or(0) >= lost as u64, "{report}");
    for (id, _) in &early {
        assert!(holds(&c, 1, id).await, "{id} not restored on node 1 by the scrub: {report}");
    }
    // Bit rot under an indexed record of node 2 (stopped cleanly, so its
    // index covers the record and recovery does not read it): a deep scrub
    // finds it and repairs it from a peer.
    let (rot_id, rot) = &late[3];
    c.stop(2);
    let mut flipped = false;
    for seg in segment_files(&c, 2) {
        let mut bytes = std::fs::read(&seg).expect("segment");
        // The window starts with the blob's own header: content() streams
        // of seeds 2k and 2k+1 share everything after it.
        if let Some(at) = bytes.windows(64).position(|w| w == &rot[..64]) {
            bytes[at + 100] ^= 0x01;
            std::fs::write(&seg, bytes).expect("write segment");
            flipped = true;
        }
    }
    assert!(flipped, "node 2 held the blob");
    c.spawn(2);
    c.wait_healthy(2).await;
    let report = scrub_now(&c, 2, true).await;
    assert_eq!(report["damaged_found"], 1, "{report}");
    assert_eq!(report["unrepaired"], 0, "{report}");
    assert_eq!(report["inconsistent"], 0, "{report}");
    c.kill9(1);
    c.kill9(3);
    for (id, data) in late.iter().chain(early.iter()) {
        get_ok(&c.client(2), id, data).await;
    }
    get_ok(&c.client(2), rot_id, rot).await;
}

/// Starts an orphan sweep on node `n` and returns its status once finished.
async fn sweep_now(c: &Cluster, n: u8) -> serde_json::Value {
    pass_now(c, n, "/admin/sweep", serde_json::json!({})).await
}

/// Live chunk records on node `n`'s own replicas.
async fn live_chunks(c: &Cluster, n: u8, partitions: u64) -> usize {
    let mut count = 0;
    for p in 0..partitions {
        let rows = c.client(n).json(http::Method::GET, &format!("/admin/partitions/{p}/blobs")).await.unwrap_or_default();
        count += rows.as_array().into_iter().flatten().filter(|r| r["kind"] == "Chunk" && r["state"] == "live").count();
    }
    count
}

/// The orphan sweep lists every replica in every zone: with a node down it
/// stops before freeing anything (a key only that node holds would be
/// missed); with every node up it frees, once the grace period has passed,
/// the chunks a put cut off by kill -9 left on all three nodes, and
/// nothing an acknowledged blob needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_frees_a_cut_puts_chunks_in_every_zone_and_stops_while_a_replica_is_down() {
    let _serial = SERIAL.lock().await;
    const GRACE_SECS: u64 = 6;
    let grace = GRACE_SECS.to_string();
    let extra = ["--orphan-grace-secs", &grace, "--sweep-interval-secs", "0", "--intra-replication-ms", "50", "--inter-replication-ms", "100"];
    let mut c = Cluster::start_zones(65, 1, 2, &extra).await;
    let kept = content(1, 3_000_000);
    let kept_id = put(&c.client(1), &kept, Some("all")).await;
    // A put cut off after two of its 1 MiB chunks: node 1 dies before a
    // composite lists them; replication has copied them to the others.
    // (The body declares 5 MB, sends half and then nothing more.)
    let half = bytes::Bytes::from(content(2, 5_000_000)[..2_500_000].to_vec());
    let stalled = futures_util::StreamExt::chain(futures_util::stream::iter([Ok::<_, std::io::Error>(half)]), futures_util::stream::pending());
    let cut = c.client(1);
    let s = tokio::spawn(async move { cut.put(strata_client::streaming(stalled), Some(5_000_000), &PutArgs::default()).await });
    let deadline = Instant::now() + Duration::from_secs(30);
    while live_chunks(&c, 1, 2).await < 3 + 2 {
        assert!(Instant::now() < deadline, "the cut put's chunks were never written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    caught_up(&c, 2, &[1]).await;
    caught_up(&c, 3, &[1]).await;
    for n in [2, 3] {
        assert_eq!(live_chunks(&c, n, 2).await, 5, "node {n} holds the orphans too");
    }
    let killed = Instant::now();
    c.kill9(1);
    assert!(s.await.expect("the put task").is_err(), "a put cut off by kill -9 was acknowledged");

    let st = sweep_now(&c, 2).await;
    assert!(st["stopped"].as_str().is_some_and(|w| w.contains("listing partition")), "{st}");
    assert_eq!(st["freed"], 0, "{st}");

    c.spawn(1);
    c.wait_healthy(1).await;
    c.detector_clear(2).await;
    tokio::time::sleep(Duration::from_secs(GRACE_SECS + 1).saturating_sub(killed.elapsed())).await;
    let st = sweep_now(&c, 2).await;
    assert_eq!(st["stopped"], serde_json::Value::Null, "{st}");
    assert_eq!(st["freed"], 2, "{st}");
    // The tombstones reach every zone by replication.
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in [1, 2, 3] {
        while live_chunks(&c, n, 2).await != 3 {
            assert!(Instant::now() < deadline, "node {n} still holds orphans");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        get_ok(&c.client(n), &kept_id, &kept).await;
    }
}

/// The cluster's own traffic on README's topology (three zones of one
/// node): every node-to-node connection the proxy forwards opens with a
/// TLS handshake and no byte of a blob crosses in clear (the same tap
/// finds the marker when it is sent in clear, so the check can fail); a
/// node started with another cluster's secret gets no map and no replica,
/// and the members log its refused handshakes; a client with the other
/// secret cannot call a replica RPC, nor can an admin key; a key revoked
/// through one node is refused by another at once; a key without admin
/// rights runs no cluster command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_traffic_is_encrypted_a_stranger_cannot_join_and_revocation_is_everywhere_at_once() {
    let _serial = SERIAL.lock().await;
    // Node 4 below never heartbeats (its handshakes fail), so a slow
    // machine must not mark it down before the map gives it replicas.
    let mut c = Cluster::start_zones(66, 1, 2, &["--intra-replication-ms", "50", "--inter-replication-ms", "100", "--down-after-ms", "120000"]).await;
    let marker: Vec<u8> = format!("PLAINTEXT-{}-MARKER", std::process::id()).into_bytes();
    c.proxy.tap.lock().unwrap().marker = marker.clone();
    let data: Vec<u8> = marker.iter().copied().cycle().take(300_000).collect();
    let id = put(&c.client(1), &data, Some("all")).await;
    for n in [2, 3] {
        get_ok(&c.client(n), &id, &data).await;
        assert!(holds(&c, n, &id).await, "node {n} holds a copy");
    }
    {
        let t = c.proxy.tap.lock().unwrap();
        assert!(t.connections > 0, "no node-to-node traffic went through the proxy");
        assert_eq!(
            t.opened_with_tls,
            t.connections,
            "{} of {} connections did not open with a TLS handshake",
            t.connections - t.opened_with_tls,
            t.connections
        );
        assert_eq!(t.marker_seen, 0, "a blob's bytes crossed between nodes in clear");
    }
    // The tap does see bytes sent in clear.
    {
        use tokio::io::AsyncWriteExt;
        let mut clear = TcpStream::connect(c.mapped(1)).await.expect("connect through the proxy");
        clear.write_all(&marker).await.expect("send");
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.proxy.tap.lock().unwrap().marker_seen == 0 {
            assert!(Instant::now() < deadline, "the tap missed a marker sent in clear");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // A node with another cluster's secret: registered in the map (by an
    // operator's mistake), given replicas, it still gets nothing.
    std::fs::create_dir_all(c.dir.join("other")).expect("a directory for the other secret");
    let (other, other_opts) = common::cluster_secret(&c.dir.join("other"));
    c.spawn_with(4, &other);
    c.command(1, serde_json::json!({ "AddNode": { "id": 4, "addr": c.real(4), "zone": "z1", "rack": "r9" } })).await;
    c.command(1, serde_json::json!({ "AddDisk": { "node": 4, "path": "d0", "capacity_bytes": 4u64 << 30 } })).await;
    let added = c.command(1, serde_json::json!({ "AddPartitions": { "count": 2, "replicas_per_zone": 2, "capacity_bytes": 256u64 << 20 } })).await;
    let fresh: Vec<u64> = added["PartitionsAdded"]["ids"].as_array().expect("ids").iter().filter_map(|v| v.as_u64()).collect();
    // Node 1's map may trail the leader's by a moment: wait for the new
    // partitions to be in it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let map = loop {
        let map = c.client(1).json(http::Method::GET, "/admin/cluster/status").await.expect("status");
        if fresh.iter().all(|id| !map["map"]["partitions"][id.to_string()].is_null()) {
            break map;
        }
        assert!(Instant::now() < deadline, "node 1's map never got partitions {fresh:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let on4 = map["map"]["partitions"]
        .as_object()
        .expect("partitions")
        .values()
        .filter(|p| p["replicas"].as_array().into_iter().flatten().any(|r| r["node"] == 4))
        .count();
    assert!(on4 > 0, "the map gave node 4 no replica: {fresh:?}");
    let stranger = Client::with_options(&format!("https://{}", c.real(4)), &other_opts);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let opened = stranger.json(http::Method::GET, "/admin/partitions").await.expect("node 4 answers its own cluster");
    assert_eq!(opened.as_array().map_or(0, Vec::len), 0, "node 4 opened replicas from a map it should not have: {opened}");
    let st = stranger.json(http::Method::GET, "/admin/cluster/status").await.expect("node 4's status");
    assert_eq!(st["map"]["epoch"], 0, "node 4 got the cluster's map: {st}");
    let members_log: String = [1u8, 2, 3].iter().map(|&n| c.log(n)).collect();
    assert!(members_log.contains("TLS handshake refused"), "no member logged node 4's refused handshakes");
    let metrics = c.client(1).get_text("/metrics").await.expect("metrics");
    assert!(metric(&metrics, "strata_tls_handshake_failures_total") > 0.0);
    // Its secret reads no replica of this cluster: the handshake fails.
    let rpc =
        Client::with_options(&format!("https://{}", c.real(1)), &other_opts).send(http::Method::POST, "/rpc/v1/read", &[], strata_client::full("x")).await;
    assert!(matches!(rpc, Err(strata_client::ClientError::Transport(_))), "{:?}", rpc.map(|r| r.head.status));
    c.kill9(4);

    // Keys: made through node 1, revoked through node 1, refused by node 3 at once.
    let key = c.client(1).post_json("/admin/keys", &serde_json::json!({ "name": "ops", "admin": true })).await.expect("key");
    let creds = strata_client::Credentials {
        access_key_id: key["access_key_id"].as_str().expect("id").into(),
        secret_access_key: key["secret_access_key"].as_str().expect("secret").into(),
    };
    let secret = strata_auth::ClusterSecret::load(&c.secret).expect("secret");
    let key_opts = strata_client::ClientOptions {
        credentials: Some(creds.clone()),
        tls: Some(strata_auth::tls::client_config(secret.roots().expect("roots"), None).expect("tls")),
        server_name: Some(strata_auth::CLUSTER_SERVER_NAME.into()),
        ..Default::default()
    };
    let as_key = |n: u8| Client::with_options(&format!("https://{}", c.real(n)), &key_opts);
    get_ok(&as_key(3), &id, &data).await;
    // An admin key is not a node.
    match as_key(2).send(http::Method::POST, "/rpc/v1/read", &[], strata_client::full("x")).await {
        Err(strata_client::ClientError::Api { status: 403, code, .. }) => assert_eq!(code, "NodesOnly"),
        other => panic!("an admin key called a replica RPC: {:?}", other.map(|r| r.head.status)),
    }
    let gone = c.client(1).send(http::Method::DELETE, &format!("/admin/keys/{}", creds.access_key_id), &[], strata_client::full(bytes::Bytes::new())).await;
    let gone: serde_json::Value = serde_json::from_slice(&gone.expect("revoke").bytes().await.expect("body")).expect("json");
    assert_eq!(gone["unconfirmed_nodes"], serde_json::json!([4]), "every live node confirmed: {gone}");
    for n in [3, 2] {
        match as_key(n).get_bytes(&id).await {
            Err(strata_client::ClientError::Api { status: 403, code, .. }) => assert_eq!(code, "InvalidAccessKeyId", "node {n}"),
            other => panic!("node {n} still took a revoked key: {:?}", other.map(|b| b.len())),
        }
    }
    // A key without admin rights runs no cluster command, on any node.
    let plain = c.client(2).post_json("/admin/keys", &serde_json::json!({ "name": "user" })).await.expect("key");
    let user_opts = strata_client::ClientOptions {
        credentials: Some(strata_client::Credentials {
            access_key_id: plain["access_key_id"].as_str().expect("id").into(),
            secret_access_key: plain["secret_access_key"].as_str().expect("secret").into(),
        }),
        ..key_opts.clone()
    };
    let user = Client::with_options(&format!("https://{}", c.real(3)), &user_opts);
    let refused = user.post_json("/admin/cluster/command", &serde_json::json!({ "SetPartitionState": { "partition": 0, "state": "ReadOnly" } })).await;
    assert!(matches!(refused, Err(strata_client::ClientError::Api { status: 403, .. })), "{refused:?}");
    let st = c.client(1).json(http::Method::GET, "/admin/cluster/status").await.expect("status");
    assert_eq!(st["map"]["partitions"]["0"]["state"], "ReadWrite", "the refused command changed the map");
}
