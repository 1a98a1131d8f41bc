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

/// What node `n` itself holds of a tract, asked directly under the row
/// version `row`: `Ok(bytes)` or the error code.
async fn held(c: &Cluster, n: u8, guid: &Guid, tract: u64, row: u64) -> Result<bytes::Bytes, String> {
    let headers = [(strata_tract::ROW_VERSION_HEADER, row.to_string())];
    match c.client(n).send(http::Method::GET, &format!("/tract/{guid}/{tract}"), &headers, strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => Ok(r.bytes().await.expect("tract body")),
        Err(strata_client::ClientError::Api { code, .. }) => Err(code),
        Err(e) => Err(e.to_string()),
    }
}

/// Waits until every node's map holds the table and every node opened its
/// replicas of the rows.
async fn table_everywhere(c: &Cluster) -> serde_json::Value {
    let mut table = serde_json::Value::Null;
    for n in c.nodes() {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(t) = c.client(n).json(http::Method::GET, "/admin/tracts").await {
                let mine = t["rows"].as_array().unwrap().iter().filter(|r| r["disks"].as_array().unwrap().iter().any(|d| d.as_str().unwrap().starts_with(&format!("{n}:")))).count();
                let open = c.client(n).json(http::Method::GET, "/admin/partitions").await.map_or(0, |v| v.as_array().map_or(0, Vec::len));
                if open >= mine + 2 {
                    table = t;
                    break;
                }
            }
            assert!(Instant::now() < deadline, "node {n} never opened its rows of the tract table");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    table
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
    let table = table_everywhere(&c).await;
    assert_eq!(table["tract_bytes"], TRACT);
    for r in table["rows"].as_array().unwrap() {
        let nodes: std::collections::BTreeSet<&str> = r["disks"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().split(':').next().unwrap()).collect();
        assert_eq!(nodes.len(), 3, "a row's disks are on distinct nodes: {r}");
    }

    // Two clients, each through another node, write halves of one blob
    // (the last tract short), every tract of a client in flight at once.
    let url = |n: u8| format!("https://{}", c.real(n));
    let guid = Guid::random();
    let tracts = 40u64;
    let last_len = 1000;
    let len_of = move |i: u64| if i == tracts - 1 { last_len } else { TRACT };
    let mut writers = Vec::new();
    for who in 0..2u8 {
        let client = Arc::new(TractClient::connect(&[url(1 + who * 3)], &c.opts).await.expect("tract client"));
        assert!(client.simultaneous_limit() >= 8);
        writers.push(tokio::spawn(async move {
            let mut all = futures_util::stream::FuturesUnordered::new();
            for i in (0..tracts).filter(|i| i % 2 == u64::from(who)) {
                let client = client.clone();
                all.push(async move { client.write_tract(&guid, i, tract_bytes(1, i, len_of(i))).await.map(|v| (i, v)) });
            }
            let mut done = Vec::new();
            while let Some(r) = futures_util::StreamExt::next(&mut all).await {
                done.push(r.expect("tract write"));
            }
            done
        }));
    }
    for w in writers {
        assert_eq!(w.await.unwrap().len(), tracts as usize / 2);
    }
    let reader = TractClient::connect(&[url(2)], &c.opts).await.expect("tract client");
    for i in 0..tracts {
        assert_eq!(reader.read_tract(&guid, i).await.expect("tract read"), tract_bytes(1, i, len_of(i)), "tract {i}");
    }
    match reader.read_tract(&guid, tracts).await {
        Err(strata_tract::TractError::NotFound { tract, .. }) => assert_eq!(tract, tracts),
        other => panic!("a tract never written: {other:?}"),
    }
    // Every replica of each tract's row holds it.
    let map = reader.map();
    for i in 0..tracts {
        let route = map.tract_route(&guid.0, i).unwrap();
        for loc in &route.write {
            assert_eq!(held(&c, loc.node as u8, &guid, i, route.version).await, Ok(tract_bytes(1, i, len_of(i))), "tract {i} on node {}", loc.node);
        }
        // A node outside the row holds no replica of it.
        if let Some(other) = c.nodes().into_iter().find(|n| !route.write.iter().any(|l| l.node == u64::from(*n))) {
            assert_eq!(held(&c, other, &guid, i, route.version).await, Err("NotHere".to_string()));
        }
    }

    // Blob puts never land on a row.
    for k in 0..20 {
        let id = put(&c.client(1 + k % 6), format!("blob {k}").as_bytes(), None).await;
        let p = strata_types::BlobId::parse(&id).unwrap().partition();
        assert!(!rows.contains(&p), "blob {id} landed on tract row {p}");
    }

    // A move of one replica of tract 0's row: the row's version changes.
    let stale = TractClient::connect(&[url(3)], &c.opts).await.expect("tract client");
    let before = map.tract_route(&guid.0, 0).unwrap();
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
    while held(&c, before.read[0].node as u8, &guid, 0, before.version).await != Err("StaleRow".to_string()) {
        assert!(Instant::now() < deadline, "the old row version was never refused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and a client holding it retries under the new one by itself.
    assert_eq!(stale.map().tract_route(&guid.0, 0).unwrap().version, before.version);
    stale.write_tract(&guid, 0, tract_bytes(2, 0, TRACT)).await.expect("write through a stale table");
    let after = stale.map().tract_route(&guid.0, 0).unwrap();
    assert!(after.version > before.version);
    assert_eq!(stale.read_tract(&guid, 0).await.unwrap(), tract_bytes(2, 0, TRACT));

    // The new replica fills from the others, is promoted, and then holds
    // every tract of its row, the old ones included.
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let r = TractClient::connect(&[url(2)], &c.opts).await.expect("tract client");
        let route = r.map().row_route(before.partition).unwrap();
        if r.map().partitions[&before.partition].moving.is_none() && route.read.contains(&to) {
            break route;
        }
        assert!(Instant::now() < deadline, "the move of row {} never finished", before.partition);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let row_tracts: Vec<u64> = (0..tracts).filter(|i| map.tract_partition(&guid.0, *i) == Some(before.partition)).collect();
    assert!(row_tracts.contains(&0));
    for i in row_tracts {
        let want = if i == 0 { tract_bytes(2, 0, TRACT) } else { tract_bytes(1, i, len_of(i)) };
        assert_eq!(held(&c, to_node as u8, &guid, i, done.version).await, Ok(want), "tract {i} on the moved replica");
    }

    // Bad requests: each refused with the status and code that name it.
    let route = reader.map().tract_route(&guid.0, 1).unwrap();
    let on_row = route.write[0].node as u8;
    let send = |n: u8, method: http::Method, path: String, headers: Vec<(&'static str, String)>, body: bytes::Bytes| {
        let client = c.client(n);
        async move { client.send(method, &path, &headers, strata_client::full(body)).await.err() }
    };
    let code = |e: Option<strata_client::ClientError>| match e {
        Some(strata_client::ClientError::Api { status, code, .. }) => (status, code),
        other => panic!("want an API error, got {other:?}"),
    };
    let row = |v: u64| vec![(strata_tract::ROW_VERSION_HEADER, v.to_string()), (strata_tract::TRACT_VERSION_HEADER, "7".to_string())];
    assert_eq!(code(send(on_row, http::Method::GET, "/tract/nothex/1".into(), row(route.version), bytes::Bytes::new()).await), (400, "BadRequest".into()));
    assert_eq!(code(send(on_row, http::Method::GET, format!("/tract/{guid}/x"), row(route.version), bytes::Bytes::new()).await), (400, "BadRequest".into()));
    assert_eq!(code(send(on_row, http::Method::GET, format!("/tract/{guid}/1"), vec![], bytes::Bytes::new()).await), (400, "InvalidHeader".into()));
    let too_big = bytes::Bytes::from(vec![0u8; TRACT + 1]);
    assert_eq!(code(send(on_row, http::Method::PUT, format!("/tract/{guid}/1"), row(route.version), too_big).await), (413, "TractTooLarge".into()));
    let unknown = Guid::random();
    let r2 = reader.map().tract_route(&unknown.0, 1).unwrap();
    let r2_node = r2.read[0].node as u8;
    assert_eq!(code(send(r2_node, http::Method::GET, format!("/tract/{unknown}/1"), row(r2.version), bytes::Bytes::new()).await), (404, "NoSuchTract".into()));
    // None of them changed the tract.
    assert_eq!(reader.read_tract(&guid, 1).await.unwrap(), tract_bytes(1, 1, TRACT));
}
