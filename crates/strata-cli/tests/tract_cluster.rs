//! Multi-process tests of FDS's striped blobs (issue 23): real `strata`
//! processes (two per zone) behind the fault-injecting proxy of
//! `cluster.rs`, whose harness this file includes. The tract locator
//! table, tracts written to every replica of their row by concurrent
//! clients and read back, a client whose row version went stale retried
//! transparently, a move of a row's replica filling from the others, and
//! bad requests refused.

// The harness serves several binaries; each uses part of it.
#![allow(dead_code)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_client::{Client, PutArgs};
use strata_tract::{Guid, TractClient};
use tokio::net::{TcpListener, TcpStream};

include!("cluster/harness.rs");

const TRACT: usize = 64 << 10;

/// Deterministic bytes of tract `i` of a test blob, written by `who`.
fn tract_bytes(who: u8, i: u64, len: usize) -> bytes::Bytes {
    let mut x = (u64::from(who) << 32) ^ i ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// What node `n` itself holds of a tract of `blob`, asked directly under
/// the row version `row`: `Ok(bytes)` or the error code.
async fn held(c: &Cluster, n: u8, blob: &strata_tract::Blob, tract: u64, row: u64) -> Result<bytes::Bytes, String> {
    let guid = blob.guid;
    let headers = [(strata_tract::ROW_VERSION_HEADER, row.to_string()), (strata_tract::INCARNATION_HEADER, blob.incarnation.to_string())];
    match c.client(n).send(http::Method::GET, &format!("/tract/{guid}/{tract}"), &headers, strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => Ok(r.bytes().await.expect("tract body")),
        Err(strata_client::ClientError::Api { code, .. }) => Err(code),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes tracts `range` of `blob` as `who`, all in flight at once.
async fn write_all(client: &Arc<TractClient>, blob: strata_tract::Blob, range: std::ops::Range<u64>, who: u8) {
    let writes = range.map(|i| {
        let client = client.clone();
        async move { client.write_tract(&blob, i, tract_bytes(who, i, TRACT)).await.unwrap_or_else(|e| panic!("tract {i}: {e}")) }
    });
    futures_util::future::join_all(writes).await;
}

/// [`held`], asked again while the node's map is behind the row version
/// the test read from another node (it answers `StaleRow` until its map
/// feed catches up).
async fn held_current(c: &Cluster, n: u8, blob: &strata_tract::Blob, tract: u64, row: u64) -> Result<bytes::Bytes, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match held(c, n, blob, tract, row).await {
            Err(code) if code == "StaleRow" && Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            other => return other,
        }
    }
}

/// Two clients write one blob's tracts at once, all in flight; everything
/// reads back, from the client and from every replica of each tract's row;
/// blob puts never land on a row; a client whose row version went stale
/// (a move of one of the row's replicas) is refused and retries by itself,
/// and the moved replica fills from the others; bad requests are refused
/// with the status and code that name the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tracts_reach_every_replica_of_their_row_and_a_stale_client_retries() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start_zones(76, 2, 2, &[]).await;
    let out = c
        .command(1, serde_json::json!({ "TractInit": { "tract_bytes": TRACT, "replicas": 3, "scatter": 4, "capacity_bytes": 256u64 << 20, "seed": 5 } }))
        .await;
    let rows: Vec<u64> = out["PartitionsAdded"]["ids"].as_array().expect("rows").iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(rows.len() >= 2, "{out}");
    let table = table_everywhere(&c, 2).await;
    assert_eq!(table["tract_bytes"], TRACT);
    for r in table["rows"].as_array().unwrap() {
        let nodes: std::collections::BTreeSet<&str> = r["disks"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().split(':').next().unwrap()).collect();
        assert_eq!(nodes.len(), 3, "a row's disks are on distinct nodes: {r}");
    }

    // Three clients, each through another node, extend one blob by a few
    // tracts at a time and write the tracts each extend gave them, every
    // tract of a round in flight at once (the last tract of each round
    // short): every tract ends up as its writer's extend said.
    let url = |n: u8| format!("https://{}", c.real(n));
    let guid = Guid::random();
    let first = TractClient::connect(&[url(2)], &c.opts).await.expect("tract client");
    let created = first.create_blob(&guid, None).await.expect("create");
    assert_eq!((created.size_tracts, created.incarnation, created.replication), (0, 1, 3));
    assert!(matches!(first.create_blob(&guid, None).await, Err(strata_tract::TractError::BlobExists(_))));
    let len_of = |round: u64, k: u64, i: u64| if i == k - 1 { 1000 + round as usize } else { TRACT };
    let mut writers = Vec::new();
    for who in 0..3u8 {
        let client = Arc::new(TractClient::connect(&[url(1 + who * 2)], &c.opts).await.expect("tract client"));
        assert!(client.simultaneous_limit() >= 8);
        writers.push(tokio::spawn(async move {
            let mut mine: Vec<(u64, usize)> = Vec::new();
            for round in 0..4u64 {
                let k = 1 + (u64::from(who) + round) % 4;
                let blob = client.extend_blob(&guid, k).await.expect("extend");
                let start = blob.size_tracts - k;
                let mut all = futures_util::stream::FuturesUnordered::new();
                for j in 0..k {
                    let (client, len) = (client.clone(), len_of(round, k, j));
                    all.push(async move { client.write_tract(&blob, start + j, tract_bytes(who, start + j, len)).await.map(|_| (start + j, len)) });
                }
                while let Some(r) = futures_util::StreamExt::next(&mut all).await {
                    mine.push(r.expect("tract write"));
                }
            }
            (who, mine)
        }));
    }
    let mut owner: BTreeMap<u64, (u8, usize)> = BTreeMap::new();
    for w in writers {
        let (who, mine) = w.await.unwrap();
        for (i, len) in mine {
            assert!(owner.insert(i, (who, len)).is_none(), "tract {i} was given to two extenders");
        }
    }
    let reader = TractClient::connect(&[url(4)], &c.opts).await.expect("tract client");
    let blob = reader.open_blob(&guid).await.expect("open");
    let tracts = blob.size_tracts;
    assert_eq!(owner.keys().copied().collect::<Vec<_>>(), (0..tracts).collect::<Vec<_>>(), "the extends cover the blob exactly");
    let want = |i: u64| {
        let (who, len) = owner[&i];
        tract_bytes(who, i, len)
    };
    for i in 0..tracts {
        assert_eq!(reader.read_tract(&blob, i).await.expect("tract read"), want(i), "tract {i}");
    }
    match reader.read_tract(&blob, tracts).await {
        Err(strata_tract::TractError::OutOfRange { tract, size, .. }) => assert_eq!((tract, size), (tracts, tracts)),
        other => panic!("a tract beyond the end: {other:?}"),
    }
    // A tract inside the blob never written reads as not found.
    let grown = reader.extend_blob(&guid, 1).await.expect("extend");
    match reader.read_tract(&grown, tracts).await {
        Err(strata_tract::TractError::NotFound { tract, .. }) => assert_eq!(tract, tracts),
        other => panic!("a tract never written: {other:?}"),
    }
    // Every replica of each tract's row holds it.
    let map = reader.map();
    for i in 0..tracts {
        let route = map.tract_route(&guid.0, i, 3).unwrap();
        for loc in &route.write {
            assert_eq!(held(&c, loc.node as u8, &blob, i, route.version).await, Ok(want(i)), "tract {i} on node {}", loc.node);
        }
        // A node outside the row holds no replica of it.
        if let Some(other) = c.nodes().into_iter().find(|n| !route.write.iter().any(|l| l.node == u64::from(*n))) {
            assert_eq!(held(&c, other, &blob, i, route.version).await, Err("NotHere".to_string()));
        }
    }
    // Metadata operations go to the metadata row's primary only.
    let meta_route = map.tract_route(&guid.0, strata_tract::meta::METADATA_TRACT, 3).unwrap();
    let not_primary = meta_route.write[1].node as u8;
    let headers = [(strata_tract::ROW_VERSION_HEADER, meta_route.version.to_string())];
    match c.client(not_primary).send(http::Method::POST, &format!("/tract/{guid}"), &headers, strata_client::full(r#"{"op":"open"}"#)).await {
        Err(strata_client::ClientError::Api { status: 421, code, .. }) => assert_eq!(code, "NotPrimary"),
        other => panic!("a metadata operation on a replica that is not the primary: {:?}", other.map(|r| r.head.status)),
    }

    // Every replica of the metadata row holds the blob's metadata.
    let meta_handle = strata_tract::Blob { incarnation: 0, ..blob };
    for loc in &meta_route.write {
        let b = held(&c, loc.node as u8, &meta_handle, strata_tract::meta::METADATA_TRACT, meta_route.version).await.expect("metadata tract");
        let m = strata_tract::meta::BlobMeta::decode(&b).expect("metadata decodes");
        assert_eq!((m.size_tracts, m.incarnation, m.deleted), (tracts + 1, 1, false), "metadata on node {}", loc.node);
    }

    // Deleted, then created again under the same GUID: empty, and the old
    // incarnation's tracts are not the new one's.
    reader.delete_blob(&guid).await.expect("delete");
    assert!(matches!(reader.open_blob(&guid).await, Err(strata_tract::TractError::NoSuchBlob(_))));
    let again = reader.create_blob(&guid, Some(2)).await.expect("create again");
    assert_eq!((again.incarnation, again.size_tracts, again.replication), (2, 0, 2));
    let again = reader.extend_blob(&guid, 1).await.unwrap();
    assert!(matches!(reader.read_tract(&again, 0).await, Err(strata_tract::TractError::NotFound { .. })));
    reader.write_tract(&again, 0, tract_bytes(9, 0, 10)).await.unwrap();
    assert_eq!(reader.read_tract(&again, 0).await.unwrap(), tract_bytes(9, 0, 10));
    // A blob of two replicas is on the first two disks of the row only.
    let r2 = map.tract_route(&guid.0, 0, 3).unwrap();
    assert_eq!(held(&c, r2.write[1].node as u8, &again, 0, r2.version).await, Ok(tract_bytes(9, 0, 10)));
    assert_eq!(held(&c, r2.write[2].node as u8, &again, 0, r2.version).await, Err("NoSuchTract".to_string()));
    // The first incarnation's tracts are still on disk (orphans) but not the new one's.
    assert_eq!(held(&c, r2.write[2].node as u8, &blob, 0, r2.version).await, Ok(want(0)));

    // Blob puts never land on a row.
    for k in 0..20 {
        let id = put(&c.client(1 + k % 6), format!("blob {k}").as_bytes(), None).await;
        let p = strata_types::BlobId::parse(&id).unwrap().partition();
        assert!(!rows.contains(&p), "blob {id} landed on tract row {p}");
    }

    // A move of one replica of tract 0's row: the row's version changes. A
    // client that read the map before it keeps the old version.
    let wide = first.create_blob(&Guid::random(), None).await.expect("create");
    let wide = first.extend_blob(&wide.guid, 64).await.unwrap();
    let stale = TractClient::connect(&[url(3)], &c.opts).await.expect("tract client");
    let before = map.tract_route(&guid.0, 0, 3).unwrap();
    let on_row: Vec<u64> = (0..64).filter(|i| map.tract_partition(&wide.guid.0, *i) == Some(before.partition)).collect();
    assert!(!on_row.is_empty());
    let zone = |n: u64| map.nodes[&n].zone.clone();
    let (from, to_node) = before
        .write
        .iter()
        .find_map(|from| (1..=6u64).find(|n| zone(*n) == zone(from.node) && !before.write.iter().any(|l| l.node == *n)).map(|n| (*from, n)))
        .expect("a replica of the row with a spare node in its zone");
    let to = strata_cluster::ReplicaLoc { node: to_node, disk: 0 };
    c.command(1, serde_json::json!({ "StartMove": { "partition": before.partition, "from": from, "to": to, "now_ms": 1 } })).await;
    // A request under the old version is refused by every node that knows the new one...
    let deadline = Instant::now() + Duration::from_secs(20);
    while held(&c, before.read[0].node as u8, &blob, 0, before.version).await != Err("StaleRow".to_string()) {
        assert!(Instant::now() < deadline, "the old row version was never refused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and a client holding it retries under the new one by itself.
    assert_eq!(stale.map().tract_route(&guid.0, 0, 3).unwrap().version, before.version);
    for &i in &on_row {
        stale.write_tract(&wide, i, tract_bytes(2, i, TRACT)).await.expect("write through a stale table");
    }
    let after = stale.map().tract_route(&guid.0, 0, 3).unwrap();
    assert!(after.version > before.version, "the client refreshed its table");

    // The new replica fills from the others, is promoted, and then holds
    // every tract of its row, old and new.
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let r = TractClient::connect(&[url(2)], &c.opts).await.expect("tract client");
        let route = r.map().row_route(before.partition, 3).unwrap();
        if r.map().partitions[&before.partition].moving.is_none() && route.read.contains(&to) {
            break route;
        }
        assert!(Instant::now() < deadline, "the move of row {} never finished", before.partition);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for i in (0..tracts).filter(|i| map.tract_partition(&guid.0, *i) == Some(before.partition)) {
        assert_eq!(held_current(&c, to_node as u8, &blob, i, done.version).await, Ok(want(i)), "tract {i} on the moved replica");
    }
    for &i in &on_row {
        assert_eq!(held_current(&c, to_node as u8, &wide, i, done.version).await, Ok(tract_bytes(2, i, TRACT)), "tract {i} written during the move");
    }

    // Bad requests: each refused with the status and code that name it.
    reader.refresh().await.unwrap();
    let route = reader.map().tract_route(&wide.guid.0, 1, 3).unwrap();
    let on_row = route.write[0].node as u8;
    let send = |n: u8, method: http::Method, path: String, headers: Vec<(&'static str, String)>, body: bytes::Bytes| {
        let client = c.client(n);
        async move { client.send(method, &path, &headers, strata_client::full(body)).await.err() }
    };
    let code = |e: Option<strata_client::ClientError>| match e {
        Some(strata_client::ClientError::Api { status, code, .. }) => (status, code),
        other => panic!("want an API error, got {other:?}"),
    };
    let g = wide.guid;
    let row = |v: u64| {
        vec![
            (strata_tract::ROW_VERSION_HEADER, v.to_string()),
            (strata_tract::TRACT_VERSION_HEADER, "7".to_string()),
            (strata_tract::INCARNATION_HEADER, wide.incarnation.to_string()),
        ]
    };
    let empty = bytes::Bytes::new;
    assert_eq!(code(send(on_row, http::Method::GET, "/tract/nothex/1".into(), row(route.version), empty()).await), (400, "BadRequest".into()));
    assert_eq!(code(send(on_row, http::Method::GET, format!("/tract/{g}/x"), row(route.version), empty()).await), (400, "BadRequest".into()));
    assert_eq!(code(send(on_row, http::Method::GET, format!("/tract/{g}/1"), vec![], empty()).await), (400, "InvalidHeader".into()));
    let too_big = bytes::Bytes::from(vec![0u8; TRACT + 1]);
    assert_eq!(code(send(on_row, http::Method::PUT, format!("/tract/{g}/1"), row(route.version), too_big).await), (413, "TractTooLarge".into()));
    let meta = format!("/tract/{g}");
    let mrow = |v: u64| vec![(strata_tract::ROW_VERSION_HEADER, v.to_string())];
    let mroute = reader.map().tract_route(&g.0, strata_tract::meta::METADATA_TRACT, 3).unwrap();
    let primary = mroute.primary.unwrap().node as u8;
    assert_eq!(
        code(send(primary, http::Method::POST, meta.clone(), mrow(mroute.version), bytes::Bytes::from_static(b"{\"op\":\"grow\"}")).await),
        (400, "BadRequest".into())
    );
    let huge = bytes::Bytes::from_static(b"{\"op\":\"extend\",\"tracts\":18446744073709551615}");
    assert_eq!(code(send(primary, http::Method::POST, meta.clone(), mrow(mroute.version), huge).await), (400, "BadRequest".into()));
    let wide_rep = bytes::Bytes::from_static(b"{\"op\":\"create\",\"replication\":9}");
    let rg = Guid::random();
    let rroute = reader.map().tract_route(&rg.0, strata_tract::meta::METADATA_TRACT, 3).unwrap();
    let rprimary = rroute.primary.unwrap().node as u8;
    assert_eq!(code(send(rprimary, http::Method::POST, format!("/tract/{rg}"), mrow(rroute.version), wide_rep).await), (400, "BadRequest".into()));
    assert!(matches!(reader.open_blob(&rg).await, Err(strata_tract::TractError::NoSuchBlob(_))));
    // The CLI: a file into a new blob and out again, its metadata, a delete.
    let file = c.dir.join("striped.bin");
    let body: Vec<u8> = (0..5 * TRACT + 12_345).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&file, &body).unwrap();
    let (ok, out) = c.cli(1, &["tract", "write", file.to_str().unwrap()]);
    assert!(ok, "{out}");
    let written = out.split_whitespace().next().unwrap().to_string();
    assert!(out.contains("6 tracts"), "{out}");
    let copy = c.dir.join("striped.copy");
    let (ok, out) = c.cli(3, &["tract", "read", "--guid", &written, "-o", copy.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(std::fs::read(&copy).unwrap() == body, "the file read back differs");
    let (ok, out) = c.cli(2, &["tract", "stat", "--guid", &written]);
    assert!(ok && out.contains("6 tracts, 3 replicas, incarnation 1"), "{out}");
    let (ok, out) = c.cli(2, &["tract", "delete", "--guid", &written]);
    assert!(ok, "{out}");
    let (ok, out) = c.cli(2, &["tract", "stat", "--guid", &written]);
    assert!(!ok && out.contains("no blob"), "{out}");
    let (ok, out) = c.cli(2, &["tract", "table"]);
    assert!(ok && out.contains(&format!("tracts of {TRACT} bytes")), "{out}");

    // Orphans: the first incarnation's tracts (still on disk, on the moved
    // replica too), and a tract written past the end by hand (the client
    // refuses to): every node's reclaimer deletes them and keeps the rest.
    reader.refresh().await.unwrap();
    let fresh = reader.map();
    let r0 = fresh.tract_route(&guid.0, 0, 3).unwrap();
    let old_on = r0.write[2].node as u8;
    assert_eq!(held(&c, old_on, &blob, 0, r0.version).await, Ok(want(0)));
    let beyond = 5u64;
    let rb = fresh.tract_route(&guid.0, beyond, 2).unwrap();
    let headers = [
        (strata_tract::ROW_VERSION_HEADER, rb.version.to_string()),
        (strata_tract::TRACT_VERSION_HEADER, "9".to_string()),
        (strata_tract::INCARNATION_HEADER, again.incarnation.to_string()),
    ];
    c.client(rb.write[0].node as u8)
        .send(http::Method::PUT, &format!("/tract/{guid}/{beyond}"), &headers, strata_client::full(tract_bytes(9, 5, 10)))
        .await
        .expect("a write past the end");
    assert_eq!(held(&c, rb.write[0].node as u8, &again, beyond, rb.version).await, Ok(tract_bytes(9, 5, 10)));
    let mut reclaimed = 0;
    for n in c.nodes() {
        let v = c.client(n).post_json("/admin/tracts/orphans", &serde_json::json!({})).await.expect("orphan pass");
        assert!(v["errors"].as_array().unwrap().is_empty(), "{v}");
        reclaimed += v["reclaimed"].as_u64().unwrap();
    }
    assert!(reclaimed > 3 * tracts, "reclaimed {reclaimed}");
    assert_eq!(held(&c, old_on, &blob, 0, r0.version).await, Err("NoSuchTract".to_string()));
    assert_eq!(held(&c, rb.write[0].node as u8, &again, beyond, rb.version).await, Err("NoSuchTract".to_string()));
    assert_eq!(reader.read_tract(&again, 0).await.unwrap(), tract_bytes(9, 0, 10));
    assert_eq!(held(&c, r0.write[1].node as u8, &again, 0, r0.version).await, Ok(tract_bytes(9, 0, 10)));
    for i in (0..64).filter(|i| map.tract_partition(&wide.guid.0, *i) == Some(before.partition)) {
        assert_eq!(reader.read_tract(&wide, i).await.unwrap(), tract_bytes(2, i, TRACT), "a live blob's tract {i} was kept");
    }

    // None of them changed the blob.
    let still = reader.open_blob(&g).await.unwrap();
    assert_eq!(still.size_tracts, 64);
    assert_eq!(reader.read_tract(&still, on_row_tract(&reader, &wide, before.partition)).await.unwrap().len(), TRACT);
}

/// A tract of `blob` on row `row`.
fn on_row_tract(c: &TractClient, blob: &strata_tract::Blob, row: u64) -> u64 {
    (0..blob.size_tracts).find(|i| c.map().tract_partition(&blob.guid.0, *i) == Some(row)).expect("a tract on the row")
}

/// FDS §3.2: a node killed with SIGKILL is declared down, every row it was
/// in gets a replacement disk at once (all rows in parallel, no down-out
/// wait), the replacements copy the rows' tracts from the survivors while
/// reads keep being served and new writes succeed, and afterwards every
/// tract reads back identical from every replica of its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_node_s_rows_are_re_replicated_at_once_and_every_tract_survives() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start_zones(77, 3, 1, &["--heartbeat-ms", "200", "--down-after-ms", "1500"]).await;
    c.command(1, serde_json::json!({ "TractInit": { "tract_bytes": TRACT, "replicas": 3, "scatter": 4, "capacity_bytes": 256u64 << 20, "seed": 11 } })).await;
    table_everywhere(&c, 1).await;
    let url = |n: u8| format!("https://{}", c.real(n));
    let client = Arc::new(TractClient::connect(&[url(1), url(4)], &c.opts).await.expect("tract client"));
    let guid = Guid::random();
    client.create_blob(&guid, None).await.expect("create");
    let blob = client.extend_blob(&guid, 60).await.expect("extend");
    write_all(&client, blob, 0..60, 3).await;
    let dead = 5u8;
    let map = client.map();
    let map_before = map.clone();
    let rows_of_dead: Vec<u64> =
        map.tracts.as_ref().unwrap().rows.iter().copied().filter(|r| map.partitions[r].replicas.iter().any(|l| l.node == u64::from(dead))).collect();
    assert!(rows_of_dead.len() >= 2, "node {dead} is in {} rows", rows_of_dead.len());

    let started = Instant::now();
    c.kill9(dead);
    // While the rows recover: every old tract reads, and new ones write.
    let blob = client.extend_blob(&guid, 20).await.expect("extend during recovery");
    for i in 0..60 {
        assert_eq!(client.read_tract(&blob, i).await.expect("read during recovery"), tract_bytes(3, i, TRACT), "tract {i}");
    }
    write_all(&client, blob, 60..80, 3).await;
    // Every row of the dead node gets a new disk and finishes its move.
    let deadline = Instant::now() + Duration::from_secs(90);
    let map = loop {
        client.refresh().await.expect("map");
        let m = client.map();
        let done = rows_of_dead.iter().all(|r| m.partitions[r].moving.is_none() && !m.partitions[r].replicas.iter().any(|l| l.node == u64::from(dead)));
        if done {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "the dead node's rows were not re-replicated: {:?}",
            rows_of_dead.iter().map(|r| (&m.partitions[r].replicas, m.partitions[r].moving)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let metrics = c.client(1).get_text("/metrics").await.unwrap();
    assert_eq!(metric(&metrics, "strata_tract_rows_recovering"), 0.0);
    assert!(metric(&metrics, "strata_tract_rows") >= rows_of_dead.len() as f64);
    eprintln!("{} rows of node {dead} re-replicated {:.1} s after SIGKILL", rows_of_dead.len(), started.elapsed().as_secs_f64());
    // The dead node's places went to several nodes (of its rack: a row's
    // racks stay distinct), which copied in parallel.
    let before = map_before.clone();
    let new_homes: std::collections::BTreeSet<u64> = rows_of_dead
        .iter()
        .flat_map(|r| {
            map.partitions[r].replicas.iter().map(|l| l.node).filter(|n| !before.partitions[r].replicas.iter().any(|l| l.node == *n)).collect::<Vec<_>>()
        })
        .collect();
    assert!(new_homes.len() >= 2, "every row of node {dead} went to {new_homes:?}");
    for i in 0..80 {
        // A row's version also moves when one of its nodes' heartbeats
        // lapse and resume (a loaded machine): a node whose map is newer
        // than the client's refuses it, and the client refreshes.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let route = client.map().tract_route(&guid.0, i, 3).unwrap();
            assert_eq!(route.write.len(), 3);
            let mut stale = false;
            for loc in &route.write {
                match held(&c, loc.node as u8, &blob, i, route.version).await {
                    Err(code) if code == "StaleRow" && Instant::now() < deadline => stale = true,
                    got => assert_eq!(got, Ok(tract_bytes(3, i, TRACT)), "tract {i} on node {}", loc.node),
                }
            }
            if !stale {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = client.refresh().await;
        }
        assert_eq!(client.read_tract(&blob, i).await.unwrap(), tract_bytes(3, i, TRACT));
    }

    // The dead node comes back with its old rows: it is refused for them
    // (its map no longer places them there) and the client never reads it.
    c.spawn(dead);
    c.wait_healthy(dead).await;
    let old_tract = (0..60).find(|i| map_before.tract_partition(&guid.0, *i).is_some_and(|r| rows_of_dead.contains(&r))).unwrap();
    let route = map.tract_route(&guid.0, old_tract, 3).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match held(&c, dead, &blob, old_tract, route.version).await {
            Err(code) if code == "NotHere" => break,
            other => assert!(Instant::now() < deadline, "the returned node answered {other:?} for a row it lost"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!route.read.iter().any(|l| l.node == u64::from(dead)));
    assert_eq!(client.read_tract(&blob, old_tract).await.unwrap(), tract_bytes(3, old_tract, TRACT));
}

/// FDS §3.4: nodes join a cluster whose clients keep writing; `TractGrow`
/// gives the new disks rows of the fullest as pending members, which take
/// writes while they fill and the old member's place once caught up; no
/// acknowledged tract is lost, and every one is on every replica of its
/// row afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn growth_moves_rows_to_new_nodes_while_clients_write() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start_zones(78, 2, 1, &[]).await;
    c.command(1, serde_json::json!({ "TractInit": { "tract_bytes": TRACT, "replicas": 3, "scatter": 4, "capacity_bytes": 256u64 << 20, "seed": 3 } })).await;
    table_everywhere(&c, 1).await;
    let url = |n: u8| format!("https://{}", c.real(n));
    let client = Arc::new(TractClient::connect(&[url(1), url(3)], &c.opts).await.expect("tract client"));
    let guid = Guid::random();
    client.create_blob(&guid, None).await.expect("create");
    // A writer extends the blob and writes what it got until told to stop.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let blob = client.extend_blob(&guid, 4).await.expect("extend while growing");
                let start = blob.size_tracts - 4;
                let writes = (start..blob.size_tracts).map(|i| {
                    let client = client.clone();
                    async move { client.write_tract(&blob, i, tract_bytes(4, i, TRACT)).await.map(|_| i) }
                });
                for r in futures_util::future::join_all(writes).await {
                    acked.push(r.expect("write while growing"));
                }
            }
            acked
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (n, zone) in [(7u8, 1u8), (8, 2), (9, 3)] {
        c.add_node(n, zone).await;
    }
    let out = c.command(1, serde_json::json!({ "TractGrow": { "now_ms": 1 } })).await;
    let moved: Vec<u64> = out["PartitionsAdded"]["ids"].as_array().expect("rows moved").iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(!moved.is_empty(), "{out}");
    // The new nodes report their filling rows (while they last), and the
    // CLI follows the copying until every row has caught up.
    for n in 7..=9u8 {
        let v = c.client(n).json(http::Method::GET, "/admin/tracts/recovery").await.expect("recovery status");
        for r in v.as_array().unwrap() {
            assert!(r["to"].as_str().unwrap().starts_with(&format!("{n}:")), "{r}");
            assert!(moved.contains(&r["partition"].as_u64().unwrap()), "{r}");
        }
    }
    let (ok, out) = c.cli(1, &["tract", "recovery", "--wait"]);
    assert!(ok && out.contains("every row has caught up"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let map = loop {
        client.refresh().await.unwrap();
        let m = client.map();
        if moved.iter().all(|r| m.partitions[r].moving.is_none()) {
            break m;
        }
        assert!(Instant::now() < deadline, "growth did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (ok, out) = c.cli(2, &["tract", "recovery"]);
    assert!(ok && out.starts_with("0 rows moving"), "{out}");
    let metrics = c.client(7).get_text("/metrics").await.unwrap();
    assert!(metrics.contains("strata_tract_fill_bytes"), "the fill metric is exported");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writer.await.unwrap();
    assert!(acked.len() >= 8, "the writer wrote {} tracts", acked.len());
    // The new nodes hold rows now.
    for n in 7..=9u64 {
        assert!(
            map.partitions.values().any(|p| p.kind == strata_cluster::PartitionKind::Tract && p.replicas.iter().any(|r| r.node == n)),
            "node {n} holds no row"
        );
    }
    let blob = client.open_blob(&guid).await.unwrap();
    for &i in &acked {
        let route = map.tract_route(&guid.0, i, 3).unwrap();
        for loc in &route.write {
            assert_eq!(held(&c, loc.node as u8, &blob, i, route.version).await, Ok(tract_bytes(4, i, TRACT)), "tract {i} on node {}", loc.node);
        }
        assert_eq!(client.read_tract(&blob, i).await.unwrap(), tract_bytes(4, i, TRACT));
    }
}
