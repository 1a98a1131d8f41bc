//! Multi-process cluster tests: real `strata` processes on 127.x.0.N
//! addresses in three zones (of three nodes, or of one as in README), the
//! Raft metadata group on one node per zone. Nodes reach each other only through a fault-injecting
//! proxy in this test process (each node's map address is its proxy), so a
//! zone can be cut off for real: the proxy refuses and breaks every
//! connection between that zone and the others. Nodes are killed with
//! SIGKILL and restarted from their data directories.

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
    // incarnation and start over).
    c.kill9(9);
    std::fs::remove_dir_all(c.dir.join("n9")).expect("wipe node 9");
    c.spawn(9);
    c.wait_healthy(9).await;
    c.converged(&all, Duration::from_secs(60)).await;
    for (id, data) in blobs.iter().chain(during.iter()) {
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

    // A blob written in zone 1 and read at once in zone 2 is proxied.
    let proxied_before = metric(&c.client(4).get_text("/metrics").await.expect("metrics"), "strata_router_proxied_gets_total");
    let fresh = content(50, 5_000);
    let fresh_id = put(&c.client(2), &fresh, None).await;
    get_ok(&c.client(4), &fresh_id, &fresh).await;
    let proxied_after = metric(&c.client(4).get_text("/metrics").await.expect("metrics"), "strata_router_proxied_gets_total");
    assert!(proxied_after > proxied_before, "the get was not proxied ({proxied_before} -> {proxied_after})");

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
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let parts = c.client(3).json(http::Method::GET, "/admin/partitions").await.unwrap_or_default();
        let damaged: u64 = parts.as_array().into_iter().flatten().map(|p| p["damaged_ranges"].as_u64().unwrap_or(0)).sum();
        if damaged == 0 && holds(&c, 3, &whole_id).await {
            break;
        }
        assert!(Instant::now() < deadline, "node 3's damaged copy was never repaired: {parts}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let repairs = metric(&c.client(3).get_text("/metrics").await.expect("metrics"), "strata_router_read_repairs_total");
    assert!(repairs >= 1.0, "{repairs} read repairs");
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
    let mut c = Cluster::start_zones(66, 1, 2, &["--intra-replication-ms", "50", "--inter-replication-ms", "100"]).await;
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
    let map = c.client(1).json(http::Method::GET, "/admin/cluster/status").await.expect("status");
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
    let acked = Arc::new(Mutex::new(acked));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (client, acked, stop) = (c.client(2), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seed = 2000u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let data = content(seed, 30_000);
                if let Ok(r) = client.put_bytes(data.clone(), &PutArgs::default()).await {
                    acked.lock().unwrap().push((r.id, data));
                }
                seed += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let reader = {
        let (client, acked, stop) = (c.client(5), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut reads, mut failures) = (0u64, Vec::new());
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let pick = {
                    let a = acked.lock().unwrap();
                    a[i % a.len()].clone()
                };
                i += 7;
                match client.get_bytes(&pick.0).await {
                    Ok(b) if b[..] == pick.1[..] => reads += 1,
                    Ok(_) => failures.push(format!("{}: different bytes", pick.0)),
                    Err(e) => failures.push(format!("{}: {e}", pick.0)),
                }
            }
            (reads, failures)
        })
    };

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
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.await.expect("writer");
    let (reads, failures) = reader.await.expect("reader");
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
    let acked = acked.lock().unwrap().clone();
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
    let acked = Arc::new(Mutex::new(blobs));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (client, acked, stop) = (c.client(3), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seed = 4000u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let data = content(seed, 20_000);
                if let Ok(r) = client.put_bytes(data.clone(), &PutArgs::default()).await {
                    acked.lock().unwrap().push((r.id, data));
                }
                seed += 1;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
    };
    let reader = {
        let (client, acked, stop) = (c.client(5), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut reads, mut failures) = (0u64, Vec::new());
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let pick = {
                    let a = acked.lock().unwrap();
                    a[i % a.len()].clone()
                };
                i += 5;
                match client.get_bytes(&pick.0).await {
                    Ok(b) if b[..] == pick.1[..] => reads += 1,
                    Ok(_) => failures.push(format!("{}: different bytes", pick.0)),
                    Err(e) => failures.push(format!("{}: {e}", pick.0)),
                }
            }
            (reads, failures)
        })
    };

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
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.await.expect("writer");
    let (reads, failures) = reader.await.expect("reader");
    assert!(failures.is_empty(), "{} of {} reads failed: {:?}", failures.len(), reads + failures.len() as u64, &failures[..failures.len().min(5)]);
    let acked = acked.lock().unwrap().clone();
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

    let acked = Arc::new(Mutex::new(blobs));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (client, acked, stop) = (c.client(2), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut reads, mut failures) = (0u64, Vec::new());
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let pick = {
                    let a = acked.lock().unwrap();
                    a[i % a.len()].clone()
                };
                i += 3;
                match client.get_bytes(&pick.0).await {
                    Ok(b) if b[..] == pick.1[..] => reads += 1,
                    Ok(_) => failures.push(format!("{}: different bytes", pick.0)),
                    Err(e) => failures.push(format!("{}: {e}", pick.0)),
                }
            }
            (reads, failures)
        })
    };
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
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (reads, failures) = reader.await.expect("reader");
    assert!(failures.is_empty(), "{} of {} reads failed: {:?}", failures.len(), reads + failures.len() as u64, &failures[..failures.len().min(5)]);
    let acked = acked.lock().unwrap().clone();
    for (id, data) in &acked {
        get_ok(&c.client(4), id, data).await;
    }
    c.map_until(2, Duration::from_secs(30), "the old leader up again", |v| v["map"]["nodes"][leader.to_string()]["state"] == "Up").await;
    let (ok, out) = c.cli(2, &["cluster", "rebalance", "--dry-run"]);
    assert!(ok && out.contains("nothing to move"), "{out}");
    let metrics = c.client(2).get_text("/metrics").await.expect("metrics");
    assert_eq!(metric(&metrics, "strata_rebalance_moves_planned"), 0.0);
}
