//! Multi-process tests of Spock's read-write stores (issue 22): real
//! `strata` processes, one per zone, behind the same fault-injecting proxy
//! as `cluster.rs`, whose harness this file includes. Counting with
//! applyUpdate, hinted handoff and read repair after SIGKILL, siblings
//! across a cut zone, bad input, the CLI, `kv rebalance` with writers
//! running, and kill -9 of every node in turn under load.

// The harness serves several binaries; each uses part of it.
#![allow(dead_code)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_client::{Client, PutArgs};
use tokio::net::{TcpListener, TcpStream};

include!("cluster/harness.rs");

fn rw_b64(k: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k)
}

/// What node `n`'s own replica holds of `key` in `store`: each version's
/// value (`None` for a delete).
async fn rw_local(c: &Cluster, n: u8, store: &str, key: &[u8]) -> Vec<Option<String>> {
    use base64::Engine;
    let v = c.client(n).json(http::Method::GET, &format!("/admin/rw/local/{store}/{}", rw_b64(key))).await.expect("local versions");
    v["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|e| e["value"].as_str().map(|s| String::from_utf8(base64::engine::general_purpose::STANDARD.decode(s).unwrap()).unwrap()))
        .collect()
}

/// Waits until each of `nodes` serves every one of `stores` (has a map
/// that defines them).
async fn stores_everywhere(c: &Cluster, nodes: &[u8], stores: &[&str]) {
    for &n in nodes {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !c.client(n).json(http::Method::GET, "/admin/rw").await.is_ok_and(|v| stores.iter().all(|s| v["stores"].get(*s).is_some())) {
            assert!(Instant::now() < deadline, "node {n} never served the stores {stores:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn rw_until(c: &Cluster, n: u8, store: &str, key: &[u8], want: &[&str], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut got: Vec<String> = rw_local(c, n, store, key).await.into_iter().flatten().collect();
        got.sort();
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: node {n} holds {got:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A writer of `store` until `stop`: new keys `w{w}-{i}`, and every
/// `update_every`-th step an update of an earlier key, each put over what a
/// get read. Returns, per key, the last acknowledged value and the values
/// of later puts that failed (a failed put may still have been applied,
/// and then rightly replaced it).
fn spawn_writer(
    urls: &[String],
    opts: &strata_client::ClientOptions,
    store: &'static str,
    w: u32,
    update_every: u32,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<BTreeMap<String, (String, Vec<String>)>> {
    let client = strata_kv_client::RwClient::new(urls, opts);
    tokio::spawn(async move {
        let mut acked: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        let mut i = 0u32;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let (key, value) =
                if i % update_every == update_every - 1 { (format!("w{w}-{}", i / 2), format!("u{i}")) } else { (format!("w{w}-{i}"), format!("v{i}")) };
            if let Ok(read) = client.get(store, key.as_bytes()).await {
                match client.put(store, key.as_bytes(), bytes::Bytes::from(value.clone()), &read.clock).await {
                    Ok(_) => {
                        acked.insert(key, (value, Vec::new()));
                    }
                    Err(_) => {
                        if let Some((_, later)) = acked.get_mut(&key) {
                            later.push(value);
                        }
                    }
                }
            }
            i += 1;
        }
        acked
    })
}

/// One answer read from a session opened by hand.
async fn session_answer(io: &mut strata_client::Upgraded) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut buf = bytes::BytesMut::new();
    loop {
        if let Ok(Some(n)) = strata_format::frame::next_frame_len(&buf, 1 << 20)
            && buf.len() >= n
        {
            return Some(buf[..n].to_vec());
        }
        if io.read_buf(&mut buf).await.ok()? == 0 {
            return None;
        }
    }
}

/// Sessions: a client through them reads and writes what HTTP clients
/// see and gets HTTP's refusals; a session opened by hand refuses what it
/// must: an unsigned upgrade (401, from the HTTP path), a replica RPC
/// session asked for by a client that is not a node, a signed request
/// without the upgrade (400), a write on a read session (an error answer,
/// the session still usable), a bad frame (an error answer, then the
/// session ends).
async fn sessions_answer_as_http_does(c: &Cluster, url: &str) {
    use strata_format::rw_session::{self, Answer, Request};
    use tokio::io::AsyncWriteExt;
    let sess = strata_kv_client::RwClient::new(&[url.to_string()], &c.opts).with_sessions(true);
    let http = strata_kv_client::RwClient::new(&[url.to_string()], &c.opts);
    let clock = sess.put("loose", b"sess", bytes::Bytes::from_static(b"one"), "").await.expect("session put");
    let read = http.get("loose", b"sess").await.expect("http get");
    assert_eq!(read.versions, vec![(clock.clone(), bytes::Bytes::from_static(b"one"))]);
    assert_eq!(sess.get("loose", b"sess").await.expect("session get"), read);
    let again = sess.put("loose", b"sess", bytes::Bytes::from_static(b"two"), "").await;
    assert!(matches!(again, Err(strata_kv_client::RwClientError::Obsolete(_))), "{again:?}");
    let big = sess.put("counters", b"big", bytes::Bytes::from(vec![b'x'; 2000]), "").await;
    assert!(matches!(&big, Err(strata_kv_client::RwClientError::Api(e)) if e.status() == Some(413)), "{big:?}");
    let nope = sess.get("nope", b"k").await;
    assert!(matches!(&nope, Err(strata_kv_client::RwClientError::Api(e)) if e.status() == Some(404)), "{nope:?}");
    sess.delete("loose", b"sess", &clock).await.expect("session delete");
    assert!(http.get("loose", b"sess").await.expect("get after delete").versions.is_empty());

    let secret = strata_auth::ClusterSecret::load(&c.secret).expect("secret");
    let anonymous = strata_client::ClientOptions {
        tls: Some(strata_auth::tls::client_config(secret.roots().expect("roots"), None).expect("tls")),
        server_name: Some(strata_auth::CLUSTER_SERVER_NAME.into()),
        ..Default::default()
    };
    let refused = strata_client::Client::with_options(url, &anonymous).upgrade("/rw/counters/session", rw_session::PROTOCOL).await;
    assert!(matches!(&refused, Err(e) if e.status() == Some(401)), "{:?}", refused.err());
    // A replica RPC session is a node's only.
    let rpc = strata_client::Client::with_options(url, &anonymous).upgrade("/rpc/v1/session", "strata-rpc/1").await;
    assert!(matches!(&rpc, Err(e) if e.status() == Some(401) || e.status() == Some(403)), "{:?}", rpc.err());
    let plain = c.client(1).send(http::Method::POST, "/rw/counters/session", &[], strata_client::full(bytes::Bytes::new())).await;
    assert!(matches!(&plain, Err(e) if e.status() == Some(400)), "{:?}", plain.map(|r| r.head.status));

    let node = strata_client::Client::with_options(url, &c.opts);
    let mut read_only = node.upgrade("/rw/counters/session", rw_session::PROTOCOL).await.expect("read session");
    read_only.write_all(&Request::Put { key: b"hits", clock: "", value: b"0" }.encode()).await.unwrap();
    let a = session_answer(&mut read_only).await.expect("an answer");
    assert!(matches!(rw_session::decode_answer(&a), Ok(Answer::Error { status: 400, .. })), "{:?}", rw_session::decode_answer(&a));
    read_only.write_all(&Request::Get { key: b"hits" }.encode()).await.unwrap();
    let a = session_answer(&mut read_only).await.expect("an answer");
    match rw_session::decode_answer(&a) {
        Ok(Answer::Versions { versions, .. }) => assert_eq!(versions.iter().map(|(_, v)| *v).collect::<Vec<_>>(), vec![b"60".as_slice()]),
        other => panic!("want the counter, got {other:?}"),
    }
    let mut broken = node.upgrade("/rw/counters/write-session", rw_session::PROTOCOL).await.expect("write session");
    broken.write_all(b"this is not a frame at all").await.unwrap();
    let a = session_answer(&mut broken).await.expect("an answer");
    assert!(matches!(rw_session::decode_answer(&a), Ok(Answer::Error { status: 400, .. })), "{:?}", rw_session::decode_answer(&a));
    assert!(session_answer(&mut broken).await.is_none(), "the session goes on after a bad frame");
    let metrics = c.client(1).get_text("/metrics").await.expect("metrics");
    assert!(metric(&metrics, "strata_rw_sessions_total") >= 3.0, "sessions not counted");
}

/// A session that stops sending, between requests or halfway through
/// one, is ended after the head timeout: a frame left half-sent holds no
/// connection for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_session_is_ended_after_the_head_timeout() {
    use strata_format::rw_session::{self, Request};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _serial = SERIAL.lock().await;
    let c = Cluster::start_zones(75, 1, 1, &["--header-timeout-secs", "2"]).await;
    c.command(1, serde_json::json!({ "KvInitRing": { "partitions": 4 } })).await;
    let spec = serde_json::json!({ "replication": { "Nodes": 3 }, "required_reads": 1, "required_writes": 1, "value_limit": 1024 });
    c.command(1, serde_json::json!({ "RwCreateStore": { "name": "s", "spec": spec } })).await;
    stores_everywhere(&c, &[1], &["s"]).await;
    let node = strata_client::Client::with_options(&format!("https://127.75.0.1:{PORT}"), &c.opts);
    let frame = Request::Put { key: b"k", clock: "", value: b"v" }.encode();
    for sent in [0, frame.len() / 2] {
        let mut s = node.upgrade("/rw/s/write-session", rw_session::PROTOCOL).await.expect("session");
        s.write_all(&frame[..sent]).await.unwrap();
        let t = Instant::now();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf)).await.expect("the node never ended the stalled session");
        assert!(matches!(n, Ok(0) | Err(_)), "{sent} bytes sent: {n:?}");
        assert!(t.elapsed() >= Duration::from_secs(1), "{sent} bytes sent: ended after {:?}, before the timeout", t.elapsed());
    }

    // Frames larger than a socket's buffers cross sessions whole, both
    // ways: the client's put and the get's answer on its session, and the
    // coordinator's puts and gets on its replica RPC sessions to the other
    // nodes. (Whether a TLS writer's unflushed tail stalls a session
    // depends on timing here; `session::tests` holds the flush itself.)
    let spec = serde_json::json!({ "replication": { "Nodes": 3 }, "required_reads": 3, "required_writes": 3, "value_limit": 2_000_000 });
    c.command(1, serde_json::json!({ "RwCreateStore": { "name": "wide", "spec": spec } })).await;
    stores_everywhere(&c, &[1, 2, 3], &["wide"]).await;
    let sess = strata_kv_client::RwClient::new(&[format!("https://127.75.0.1:{PORT}")], &c.opts).with_sessions(true);
    for (i, len) in [(0u8, 1_900_000), (1, 1_500_000), (2, 100)] {
        let value = bytes::Bytes::from((0..len).map(|j| (j as u8).wrapping_mul(31).wrapping_add(i)).collect::<Vec<u8>>());
        let key = [b'w', i];
        let put = tokio::time::timeout(Duration::from_secs(20), sess.put("wide", &key, value.clone(), "")).await;
        let clock = put.expect("a large put stalled on its session").expect("large put");
        let got = tokio::time::timeout(Duration::from_secs(20), sess.get("wide", &key)).await.expect("a large get stalled on its session").expect("large get");
        assert_eq!(got.versions, vec![(clock, value)], "{len} bytes");
    }
    // A value within a store's limit but over a node's record limit (the
    // test nodes' chunk size, 1 MiB, plus 1 MiB) is refused as too large.
    let spec = serde_json::json!({ "replication": { "Nodes": 3 }, "required_reads": 1, "required_writes": 1, "value_limit": 8 << 20 });
    c.command(1, serde_json::json!({ "RwCreateStore": { "name": "wider", "spec": spec } })).await;
    stores_everywhere(&c, &[1], &["wider"]).await;
    let over = sess.put("wider", b"k", bytes::Bytes::from(vec![1u8; 3 << 20]), "").await;
    assert!(matches!(&over, Err(strata_kv_client::RwClientError::Api(e)) if e.status() == Some(413)), "{over:?}");
    assert!(sess.get("wider", b"k").await.expect("get").versions.is_empty(), "a refused put left a value");
}

/// Spock's read-write stores on three real nodes, one per zone: (a) N
/// clients' applyUpdate increments of one counter all count; (c) a node
/// killed during a put gets it by hinted handoff once back (its replica
/// read directly), and a stale replica is fixed by read repair; (b) with a
/// zone cut off, writes on both sides are siblings that a get after the
/// cut returns together, and a put with the merged clock resolves them.
/// Bad input (a stale clock, a malformed clock, a value over the limit,
/// an unknown store or transform, required writes that cannot be met)
/// gets its error and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_stores_count_hand_off_repair_and_keep_siblings() {
    let _serial = SERIAL.lock().await;
    // The hint pusher never runs on its own here: the test pushes.
    let mut c = Cluster::start_zones(72, 1, 1, &["--rw-hint-interval-secs", "3600"]).await;
    c.command(1, serde_json::json!({ "KvInitRing": { "partitions": 12 } })).await;
    let spec = |r: u32, w: u32| serde_json::json!({ "replication": { "Nodes": 3 }, "required_reads": r, "required_writes": w, "value_limit": 1024 });
    c.command(1, serde_json::json!({ "RwCreateStore": { "name": "counters", "spec": spec(2, 2) } })).await;
    c.command(1, serde_json::json!({ "RwCreateStore": { "name": "loose", "spec": spec(3, 1) } })).await;
    stores_everywhere(&c, &c.nodes(), &["counters", "loose"]).await;
    let opts = c.opts.clone();
    let url = |n: u8| format!("https://127.72.0.{n}:{PORT}");
    let client_via = |first: u8| {
        let urls: Vec<String> = (first..=3).chain(1..first).map(url).collect();
        strata_kv_client::RwClient::new(&urls, &opts)
    };

    // (a) Three clients, each through another node, 20 increments each.
    let mut tasks = Vec::new();
    for i in 1..=3u8 {
        // Two clients routed by the nodes, one routing itself from the map.
        let client = if i == 3 {
            strata_kv_client::RwClient::connect(&[url(3)], vec!["z3".into(), "z1".into()], &opts).await.expect("bootstrap")
        } else {
            client_via(i)
        };
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                client
                    .apply_update("counters", b"hits", 1000, |live| {
                        let n = live.iter().map(|b| std::str::from_utf8(b).unwrap().parse::<u64>().unwrap()).max().unwrap_or(0);
                        bytes::Bytes::from((n + 1).to_string())
                    })
                    .await
                    .expect("applyUpdate");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let read = client_via(2).get("counters", b"hits").await.unwrap();
    assert_eq!(read.versions.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), vec![bytes::Bytes::from_static(b"60")], "every increment counted once");

    // Bad input changes nothing.
    let stale = client_via(1).put("counters", b"hits", bytes::Bytes::from_static(b"0"), "").await;
    assert!(matches!(stale, Err(strata_kv_client::RwClientError::Obsolete(_))), "{stale:?}");
    for (req, status, code) in [
        (
            c.client(1)
                .send(http::Method::PUT, &format!("/rw/counters/{}", rw_b64(b"hits")), &[("x-strata-clock", "1:x".into())], strata_client::full("1"))
                .await,
            400,
            "InvalidClock",
        ),
        (
            c.client(1).send(http::Method::PUT, &format!("/rw/counters/{}", rw_b64(b"big")), &[], strata_client::full(vec![b'x'; 2000])).await,
            413,
            "ValueTooLarge",
        ),
        (c.client(1).send(http::Method::PUT, &format!("/rw/nope/{}", rw_b64(b"k")), &[], strata_client::full("1")).await, 404, "NoSuchStore"),
        (
            c.client(1).send(http::Method::PUT, &format!("/rw/counters/{}?transform=reverse", rw_b64(b"k")), &[], strata_client::full("1")).await,
            400,
            "UnknownTransform",
        ),
    ] {
        match req {
            Err(strata_client::ClientError::Api { status: s, code: k, message }) => {
                assert_eq!((s, k.as_str()), (status, code), "{message}");
                assert!(!message.is_empty());
            }
            other => panic!("want {status} {code}, got {:?}", other.map(|r| r.head.status)),
        }
    }
    let after = client_via(3).get("counters", b"hits").await.unwrap();
    assert_eq!(after.versions.len(), 1);
    assert_eq!(after.versions[0].1, bytes::Bytes::from_static(b"60"));
    assert!(client_via(3).get("counters", b"big").await.unwrap().versions.is_empty());

    // A multi-get answers every key, in order, absent ones with no version.
    let keys = [rw_b64(b"hits"), rw_b64(b"never-written"), rw_b64(b"hits")];
    let got = c.client(2).post_json("/rw/counters/multi-get", &serde_json::json!({ "keys": keys })).await.expect("multi-get");
    let results = got["results"].as_array().expect("results");
    assert_eq!(results.iter().map(|r| r["key"].as_str().unwrap()).collect::<Vec<_>>(), keys.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(results[0]["versions"][0]["value"], "NjA=", "{got}");
    assert_eq!(results[1]["versions"].as_array().map(Vec::len), Some(0), "{got}");
    assert_eq!(results[2], results[0]);
    for body in [serde_json::json!({ "keys": ["not base64!"] }), serde_json::json!({ "keys": vec![rw_b64(b"k"); 1001] })] {
        let refused = c.client(2).post_json("/rw/counters/multi-get", &body).await;
        assert!(matches!(&refused, Err(e) if e.status() == Some(400)), "{refused:?}");
    }

    // The Rust client's multi-get, routed by a node and routing itself.
    for client in [client_via(3), strata_kv_client::RwClient::connect(&[url(1)], vec!["z1".into()], &opts).await.expect("bootstrap")] {
        let many = client.get_many("counters", &[b"hits", b"never-written"]).await.expect("get_many");
        assert_eq!(many.len(), 2);
        assert_eq!(many[0], client.get("counters", b"hits").await.unwrap());
        assert!(many[1].versions.is_empty());
    }

    // Sessions (connections upgraded to strata-rw/1) answer as HTTP does.
    sessions_answer_as_http_does(&c, &url(1)).await;

    // Transforms: appends on the server, a sub-list read.
    for item in ["1", "2", "3", "4"] {
        c.client(2)
            .send(http::Method::PUT, &format!("/rw/counters/{}?transform=append", rw_b64(b"list")), &[], strata_client::full(item))
            .await
            .expect("append");
    }
    let sub = c.client(3).json(http::Method::GET, &format!("/rw/counters/{}?transform=sublist&arg=1:3", rw_b64(b"list"))).await.unwrap();
    use base64::Engine;
    let sub = base64::engine::general_purpose::STANDARD.decode(sub["versions"][0]["value"].as_str().unwrap()).unwrap();
    assert_eq!(sub, b"[2,3]");

    // (c) Hinted handoff: the key's third node is killed during a put.
    let map = strata_cluster::decode_map(
        &c.client(1).send(http::Method::GET, "/meta/v1/map", &[], strata_client::full(bytes::Bytes::new())).await.unwrap().bytes().await.unwrap(),
    )
    .unwrap();
    let pref: Vec<u8> = map.rw_route("counters", b"handoff").unwrap().into_iter().map(|n| n as u8).collect();
    let (master, victim) = (pref[0], pref[2]);
    c.kill9(victim);
    let up = strata_kv_client::RwClient::new(&[url(pref[0]), url(pref[1])], &opts);
    let clock = up.put("counters", b"handoff", bytes::Bytes::from_static(b"v1"), "").await.expect("a put meets 2 of 3 with a node down");
    c.spawn(victim);
    c.wait_healthy(victim).await;
    assert!(rw_local(&c, victim, "counters", b"handoff").await.is_empty(), "node {victim} was down during the put");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c.client(master).post_json("/admin/rw/hints/push", &serde_json::json!({})).await.expect("push");
        if r["pushed"].as_u64() == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "the hint never reached node {victim}: {r}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    rw_until(&c, victim, "counters", b"handoff", &["v1"], "hinted handoff").await;
    // The CLI pushes every node's hints (none left now).
    let (ok, out) = c.cli(2, &["kv", "rw", "push-hints"]);
    assert!(ok && c.nodes().iter().all(|n| out.contains(&format!("node {n}: 0 hints pushed"))), "{out}");

    // Read repair: the victim misses v2 (its hint is not pushed), and a get
    // through the master brings it there.
    c.kill9(victim);
    up.put("counters", b"handoff", bytes::Bytes::from_static(b"v2"), &clock).await.expect("second put");
    c.spawn(victim);
    c.wait_healthy(victim).await;
    rw_until(&c, victim, "counters", b"handoff", &["v1"], "before the get").await;
    let repairs = |v: serde_json::Value| v["read_repairs"].as_u64().unwrap_or(0);
    let before = repairs(c.client(master).json(http::Method::GET, "/admin/rw").await.unwrap());
    let got = strata_kv_client::RwClient::new(&[url(master)], &opts).get("counters", b"handoff").await.unwrap();
    assert_eq!(got.versions.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), vec![bytes::Bytes::from_static(b"v2")]);
    rw_until(&c, victim, "counters", b"handoff", &["v2"], "read repair").await;
    assert!(repairs(c.client(master).json(http::Method::GET, "/admin/rw").await.unwrap()) > before, "read repair is counted");
    let metrics = String::from_utf8(
        c.client(master).send(http::Method::GET, "/metrics", &[], strata_client::full(bytes::Bytes::new())).await.unwrap().bytes().await.unwrap().to_vec(),
    )
    .unwrap();
    for name in ["strata_rw_read_repairs_total", "strata_rw_hints_written_total", "strata_rw_hints_pushed_total", "strata_rw_hints_pending"] {
        let line = metrics.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} missing from /metrics"));
        if name != "strata_rw_hints_pending" {
            assert!(!line.ends_with(" 0"), "{line}");
        }
    }

    // (b) Siblings across a cut: zone 3 (node 3) cut off, a write on each side.
    let first = client_via(1).put("loose", b"split", bytes::Bytes::from_static(b"v0"), "").await.unwrap();
    for n in c.nodes() {
        rw_until(&c, n, "loose", b"split", &["v0"], "the first write").await;
    }
    c.proxy.cut(3);
    client_via(1).put("loose", b"split", bytes::Bytes::from_static(b"left"), &first).await.expect("majority side");
    strata_kv_client::RwClient::new(&[url(3)], &opts).put("loose", b"split", bytes::Bytes::from_static(b"right"), &first).await.expect("minority side");
    c.proxy.heal();
    let both = client_via(2).get("loose", b"split").await.unwrap();
    let mut values: Vec<bytes::Bytes> = both.versions.iter().map(|(_, v)| v.clone()).collect();
    values.sort();
    assert_eq!(values, vec![bytes::Bytes::from_static(b"left"), bytes::Bytes::from_static(b"right")], "siblings");
    client_via(2).put("loose", b"split", bytes::Bytes::from_static(b"merged"), &both.clock).await.expect("resolving put");
    let one = client_via(3).get("loose", b"split").await.unwrap();
    assert_eq!(one.versions.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), vec![bytes::Bytes::from_static(b"merged")]);
    for n in c.nodes() {
        rw_until(&c, n, "loose", b"split", &["merged"], "the resolution on every replica").await;
    }
    // The CLI: define, put, get, delete; export, truncate, import.
    let (ok, out) = c.cli(1, &["kv", "rw", "create", "--store", "cli", "--replicas", "3", "--required-reads", "2", "--required-writes", "2"]);
    assert!(ok, "{out}");
    stores_everywhere(&c, &c.nodes(), &["cli"]).await;
    let (ok, out) = c.cli(2, &["kv", "rw", "put", "--store", "cli", "greeting", "hello"]);
    assert!(ok, "{out}");
    let (ok, out) = c.cli(3, &["kv", "rw", "put", "--store", "cli", "other", "world"]);
    assert!(ok, "{out}");
    let (ok, out) = c.cli(3, &["kv", "rw", "get", "--store", "cli", "greeting"]);
    assert!(ok && out.contains("hello"), "{out}");
    let (ok, out) = c.cli(1, &["kv", "rw", "delete", "--store", "cli", "other"]);
    assert!(ok, "{out}");
    let (ok, out) = c.cli(1, &["kv", "rw", "get", "--store", "cli", "other"]);
    assert!(!ok && out.contains("no value"), "{out}");
    let (ok, exported) = c.cli(2, &["kv", "rw", "export", "--store", "cli"]);
    assert!(ok, "{exported}");
    assert_eq!(exported.lines().count(), 2, "two keys, one of them deleted: {exported}");
    let (ok, out) = c.cli(1, &["kv", "rw", "truncate", "--store", "cli"]);
    assert!(ok, "{out}");
    let (ok, out) = c.cli(1, &["kv", "rw", "get", "--store", "cli", "greeting"]);
    assert!(!ok, "truncated: {out}");
    let mut import = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["kv", "rw", "import", "--store", "cli", "--server", &format!("https://{}", c.real(1)), "--cluster-secret"])
        .arg(&c.secret)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run strata");
    {
        use std::io::Write;
        import.stdin.take().unwrap().write_all(exported.as_bytes()).unwrap();
    }
    let out = import.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (ok, out) = c.cli(2, &["kv", "rw", "get", "--store", "cli", "greeting"]);
    assert!(ok && out.contains("hello"), "after the import: {out}");
    let (ok, out) = c.cli(2, &["kv", "rw", "get", "--store", "cli", "other"]);
    assert!(!ok, "the delete came back with the import too: {out}");
    // An import line that does not parse changes nothing.
    let bad =
        c.client(1).send(http::Method::POST, "/admin/rw/cli/entries", &[], strata_client::full("{\"key\": \"Zm9v\", \"versions\": []}\nnot json\n")).await;
    assert!(
        matches!(bad, Err(strata_client::ClientError::Api { status: 400, ref message, .. }) if message.contains("line 2")),
        "{:?}",
        bad.map(|r| r.head.status)
    );
}

/// (d) `strata kv rebalance` gives a fourth node its share of the ring
/// while writers put and update keys of a read-write store: every
/// acknowledged write is readable afterwards (the newest acknowledged
/// value of each key), and the new node holds its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_stores_follow_a_rebalance_while_writers_run() {
    let _serial = SERIAL.lock().await;
    // Deletes may be reclaimed 3 s after they are written (hints live 1.5 s).
    let mut c = Cluster::start_zones(73, 1, 1, &["--rw-delete-grace-ms", "3000"]).await;
    c.command(1, serde_json::json!({ "KvInitRing": { "partitions": 16 } })).await;
    let spec = serde_json::json!({ "replication": { "Nodes": 3 }, "required_reads": 2, "required_writes": 2, "value_limit": 1024 });
    c.command(1, serde_json::json!({ "RwCreateStore": { "name": "users", "spec": spec } })).await;
    c.add_node(4, 1).await;
    stores_everywhere(&c, &[1, 2, 3, 4], &["users"]).await;
    let opts = c.opts.clone();
    let urls: Vec<String> = (1..=3u8).map(|n| format!("https://127.73.0.{n}:{PORT}")).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Each writer: new keys, and every third step an update of an earlier one.
    let writers: Vec<_> = (0..2u32).map(|w| spawn_writer(&urls, &opts, "users", w, 3, stop.clone())).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let checkpoint = c.dir.join("rebalance.json");
    let cli = {
        let (secret, real) = (c.secret.clone(), format!("https://{}", c.real(1)));
        let checkpoint = checkpoint.clone();
        tokio::task::spawn_blocking(move || {
            let out = Command::new(env!("CARGO_BIN_EXE_strata"))
                .args(["kv", "rebalance", "--add-node", "4", "--batch", "3", "--checkpoint"])
                .arg(&checkpoint)
                .args(["--server", &real, "--cluster-secret"])
                .arg(&secret)
                .output()
                .expect("run strata");
            (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
        })
    };
    let (ok, out) = cli.await.unwrap();
    assert!(ok, "kv rebalance: {out}");
    assert!(out.contains("read-write versions copied"), "{out}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = BTreeMap::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    assert!(acked.len() > 20, "the writers got only {} puts through", acked.len());
    // Before any read (a read repairs what it finds stale): the new node
    // holds its share itself, every acknowledged value of the keys whose
    // preference list it joined (copied from the donors, or written to it
    // after the ring changed).
    let map = strata_cluster::decode_map(
        &c.client(1).send(http::Method::GET, "/meta/v1/map", &[], strata_client::full(bytes::Bytes::new())).await.unwrap().bytes().await.unwrap(),
    )
    .unwrap();
    let mine: Vec<_> = acked.iter().filter(|(k, _)| map.rw_route("users", k.as_bytes()).unwrap().contains(&4)).collect();
    assert!(mine.len() > 5, "node 4 joined the preference lists of only {} keys", mine.len());
    for (key, (value, later)) in mine {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let held: Vec<String> = rw_local(&c, 4, "users", key.as_bytes()).await.into_iter().flatten().collect();
            if held.contains(value) || held.iter().any(|v| later.contains(v)) {
                break;
            }
            assert!(Instant::now() < deadline, "{key}: node 4 holds {held:?}, not the acknowledged {value:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let all: Vec<String> = (1..=4u8).map(|n| format!("https://127.73.0.{n}:{PORT}")).collect();
    let reader = strata_kv_client::RwClient::new(&all, &opts);
    for (key, (value, later)) in &acked {
        let got = reader.get("users", key.as_bytes()).await.unwrap_or_else(|e| panic!("{key}: {e}"));
        let values: Vec<String> = got.versions.iter().map(|(_, v)| String::from_utf8_lossy(v).into_owned()).collect();
        assert!(values.contains(value) || values.iter().any(|v| later.contains(v)), "{key}: acknowledged {value:?}, read {values:?}");
    }

    // Deletes, some of keys node 4 joined: kept through the grace, then
    // reclaimed from every replica of their keys, which read as absent.
    let deleted: Vec<&String> = acked.keys().step_by(acked.len() / 6).take(6).collect();
    for key in &deleted {
        let got = reader.get("users", key.as_bytes()).await.unwrap();
        reader.delete("users", key.as_bytes(), &got.clock).await.unwrap_or_else(|e| panic!("delete {key}: {e}"));
    }
    for key in &deleted {
        for n in map.rw_route("users", key.as_bytes()).unwrap() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while rw_local(&c, n as u8, "users", key.as_bytes()).await != vec![None] {
                assert!(Instant::now() < deadline, "{key}: node {n} never held the delete alone");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let reclaim = |n: u8| {
        let client = c.client(n);
        async move { client.post_json("/admin/rw/deletes/reclaim", &serde_json::json!({})).await.expect("reclaim") }
    };
    let early = reclaim(1).await;
    assert_eq!(early["reclaimed"], 0, "within the grace: {early}");
    tokio::time::sleep(Duration::from_millis(3200)).await;
    // Each node's worker reclaims on its own every second here; a pass
    // asked for now on every node (the CLI) finishes what is left.
    let (ok, out) = c.cli(2, &["kv", "rw", "reclaim-deletes"]);
    assert!(ok && out.matches(" reclaimed, ").count() == 4, "{out}");
    let mut reclaimed = 0;
    for n in 1..=4u8 {
        reclaimed += c.client(n).json(http::Method::GET, "/admin/rw").await.unwrap()["deletes_reclaimed"].as_u64().unwrap();
    }
    let copies: usize = deleted.iter().map(|k| map.rw_route("users", k.as_bytes()).unwrap().len()).sum();
    assert_eq!(reclaimed as usize, copies, "deletes reclaimed, of the copies the keys' replicas held");
    for key in &deleted {
        for n in map.rw_route("users", key.as_bytes()).unwrap() {
            assert!(rw_local(&c, n as u8, "users", key.as_bytes()).await.is_empty(), "{key}: node {n} still holds a version");
        }
        assert!(reader.get("users", key.as_bytes()).await.unwrap().versions.is_empty(), "{key} came back");
    }
    let metrics = String::from_utf8(
        c.client(1).send(http::Method::GET, "/metrics", &[], strata_client::full(bytes::Bytes::new())).await.unwrap().bytes().await.unwrap().to_vec(),
    )
    .unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("strata_rw_deletes_reclaimed") && !l.ends_with(" 0")), "strata_rw_deletes_reclaimed");

    // A node given back partitions it held before drops what it still
    // holds of them first: the truncate a rebalance sends it, by partition.
    let key = acked.keys().find(|k| !deleted.contains(k)).unwrap();
    let holder = map.rw_route("users", key.as_bytes()).unwrap()[0] as u8;
    let partition = map.rw_partition_of(key.as_bytes());
    let other = (0..16).find(|p| *p != partition).unwrap();
    c.client(holder).post_json(&format!("/admin/rw/users/truncate?partitions={other}"), &serde_json::json!({})).await.expect("truncate one partition");
    assert!(!rw_local(&c, holder, "users", key.as_bytes()).await.is_empty(), "another partition's truncate took {key}");
    c.client(holder).post_json(&format!("/admin/rw/users/truncate?partitions={partition}"), &serde_json::json!({})).await.expect("truncate its partition");
    assert!(rw_local(&c, holder, "users", key.as_bytes()).await.is_empty(), "{key} stayed on node {holder}");
}

/// Kill -9 of each node in turn while writers put fresh keys of a
/// read-write store (3 replicas, 2 required writes) and update earlier
/// ones: the puts whose pseudo-master is down go to the next node of
/// their preference list, and after every node is back, every
/// acknowledged value is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_stores_lose_no_acknowledged_put_across_kill_9() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start_zones(74, 1, 1, &["--rw-hint-interval-secs", "1"]).await;
    c.command(1, serde_json::json!({ "KvInitRing": { "partitions": 12 } })).await;
    let spec = serde_json::json!({ "replication": { "Nodes": 3 }, "required_reads": 2, "required_writes": 2, "value_limit": 1024 });
    c.command(1, serde_json::json!({ "RwCreateStore": { "name": "crash", "spec": spec } })).await;
    stores_everywhere(&c, &c.nodes(), &["crash"]).await;
    let opts = c.opts.clone();
    let urls: Vec<String> = (1..=3u8).map(|n| format!("https://127.74.0.{n}:{PORT}")).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Each writer: new keys, and every fourth step an update of an earlier one.
    let writers: Vec<_> = (0..2u32).map(|w| spawn_writer(&urls, &opts, "crash", w, 4, stop.clone())).collect();
    for victim in [1u8, 2, 3] {
        tokio::time::sleep(Duration::from_millis(700)).await;
        c.kill9(victim);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        c.spawn(victim);
        c.wait_healthy(victim).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = BTreeMap::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    assert!(acked.len() > 30, "the writers got only {} puts through", acked.len());
    let reader = strata_kv_client::RwClient::new(&urls, &opts);
    for (key, (value, later)) in &acked {
        let got = reader.get("crash", key.as_bytes()).await.unwrap_or_else(|e| panic!("{key}: {e}"));
        let values: Vec<String> = got.versions.iter().map(|(_, v)| String::from_utf8_lossy(v).into_owned()).collect();
        assert!(
            values.contains(value) || values.iter().any(|v| later.contains(v)),
            "{key}: acknowledged {value:?} (later, failed: {later:?}), read {values:?}"
        );
    }
}
