//! Read-only stores served by a real `strata server`: create, load, swap,
//! get and multi-get over HTTP (binary keys as base64url), rollback, and
//! bad input answered with the right status while the live version keeps
//! serving.

mod common;

use base64::Engine;
use common::Node;
use http::Method;
use strata_client::{ClientError, full};

fn b64(k: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k)
}

fn status(r: Result<serde_json::Value, ClientError>) -> (u16, String, String) {
    match r {
        Err(ClientError::Api { status, code, message }) => (status, code, message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_swap_rollback_and_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let node = Node::start(&tmp.path().join("n"), &[]).await;
    let c = &node.client;
    let def = strata_kv::StoreDef { name: "scores".into(), partitions: 4, replication: 1, chunks: 2 };
    for v in [1u8, 2] {
        let recs: Vec<(Vec<u8>, Vec<u8>)> = (0..500u32).map(|i| (i.to_be_bytes().to_vec(), format!("v{v}:{i}").into_bytes())).collect();
        strata_kv::build_in_memory(&def, recs, &tmp.path().join(format!("b{v}")), strata_kv::Duplicates::Fail).unwrap();
    }
    c.post_json("/admin/kv/scores", &serde_json::json!({ "partitions": 4, "chunks": 2, "search": "Interpolation", "keep": 3 })).await.unwrap();
    assert_eq!(status(c.post_json("/admin/kv/scores", &serde_json::json!({ "partitions": 4, "chunks": 2 })).await).0, 409);
    let load = |v: u8| serde_json::json!({ "dir": tmp.path().join(format!("b{v}")) });
    let n1 = c.post_json("/admin/kv/scores/load", &load(1)).await.unwrap()["version"].as_u64().unwrap();
    c.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": n1 })).await.unwrap();

    // Binary keys, one at a time and several at once.
    let got = c.send(Method::GET, &format!("/kv/scores/{}", b64(&7u32.to_be_bytes())), &[], full(bytes::Bytes::new())).await.unwrap().bytes().await.unwrap();
    assert_eq!(&got[..], b"v1:7");
    let keys: Vec<String> = [1u32, 2, 9999].iter().map(|i| b64(&i.to_be_bytes())).collect();
    let m = c.post_json("/kv/scores/multi-get", &serde_json::json!({ "keys": keys })).await.unwrap();
    assert_eq!(m["values"][0], b64(b"v1:1"));
    assert!(m["values"][2].is_null());

    // Unknown store, unknown key, a key that is not base64url.
    let get = |path: String| async move { c.send(Method::GET, &path, &[], full(bytes::Bytes::new())).await.map(|_| serde_json::Value::Null) };
    assert_eq!(status(get("/kv/nope/AAAA".into()).await).1, "NoSuchStore");
    assert_eq!(status(get(format!("/kv/scores/{}", b64(b"missing"))).await).1, "NoSuchKey");
    assert_eq!(status(get("/kv/scores/not*base64".into()).await).0, 400);

    // A corrupt version is rejected naming the file; version 1 keeps serving.
    let bad = tmp.path().join("b2/1_0_1.data");
    let mut b = std::fs::read(&bad).unwrap();
    b[20] ^= 0xff;
    std::fs::write(&bad, &b).unwrap();
    let (code, name, msg) = status(c.post_json("/admin/kv/scores/load", &load(2)).await);
    assert_eq!((code, name.as_str()), (422, "VersionRejected"));
    assert!(msg.contains("1_0_1.data"), "{msg}");
    b[20] ^= 0xff;
    std::fs::write(&bad, &b).unwrap();
    let n2 = c.post_json("/admin/kv/scores/load", &load(2)).await.unwrap()["version"].as_u64().unwrap();
    assert_eq!(c.post_json("/kv/scores/multi-get", &serde_json::json!({ "keys": [b64(&3u32.to_be_bytes())] })).await.unwrap()["values"][0], b64(b"v1:3"));
    c.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": n2 })).await.unwrap();
    assert_eq!(c.post_json("/kv/scores/multi-get", &serde_json::json!({ "keys": [b64(&3u32.to_be_bytes())] })).await.unwrap()["values"][0], b64(b"v2:3"));
    // Rollback, and the versions listing.
    assert_eq!(c.post_json("/admin/kv/scores/rollback", &serde_json::json!({})).await.unwrap()["live"], n1);
    let list = c.json(Method::GET, "/admin/kv").await.unwrap();
    assert_eq!(list[0]["live"], n1);
    assert_eq!((list[0]["search"].as_str(), list[0]["keep"].as_u64()), (Some("Interpolation"), Some(3)));
    assert_eq!(list[0]["versions"], serde_json::json!([n1, n2]));
    assert_eq!(status(c.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": 99 })).await).0, 422);
    assert_eq!(status(c.post_json("/admin/kv/scores/load", &serde_json::json!({ "nodir": 1 })).await).0, 400);
    // Timestamped versions: numbered by the node's clock, then + 1 again.
    let both = serde_json::json!({ "dir": tmp.path().join("b2"), "version": 7, "timestamp": true });
    assert_eq!(status(c.post_json("/admin/kv/scores/load", &both).await).0, 400);
    let stamped = serde_json::json!({ "dir": tmp.path().join("b2"), "timestamp": true });
    let before = strata_types::Clock::now_ms(&strata_types::SystemClock) / 1000;
    let n3 = c.post_json("/admin/kv/scores/load", &stamped).await.unwrap()["version"].as_u64().unwrap();
    assert!(n3 >= before && n3 <= before + 60, "version {n3} is not the clock's {before}");
    assert_eq!(c.post_json("/admin/kv/scores/load", &load(2)).await.unwrap()["version"].as_u64().unwrap(), n3 + 1);

    // A connection that only GETs is answered straight from the socket
    // (op kv_get in the metrics); a miss on it still gets the handler's 404.
    let fresh = node.client.to(&node.url);
    let path = format!("/kv/scores/{}", b64(&42u32.to_be_bytes()));
    let r = fresh.send(Method::GET, &path, &[], full(bytes::Bytes::new())).await.unwrap();
    assert_eq!(r.head.headers["x-strata-kv-version"], n1.to_string().as_str());
    assert_eq!(&r.bytes().await.unwrap()[..], b"v1:42");
    let miss = fresh.send(Method::GET, &format!("/kv/scores/{}", b64(b"nope")), &[], full(bytes::Bytes::new())).await.map(|_| serde_json::Value::Null);
    assert_eq!(status(miss).1, "NoSuchKey");
    let m = c.get_text("/metrics").await.unwrap();
    assert!(m.lines().any(|l| l.starts_with("strata_http_requests_total{op=\"kv_get\",status=\"200\"}")), "no fast-path lookups counted");
    let gauge = |name: &str| m.lines().find_map(|l| l.strip_prefix(&format!("{name}{{store=\"scores\"}} "))?.parse::<f64>().ok());
    assert_eq!(gauge("strata_kv_live_version"), Some(n1 as f64), "live-version gauge");
    assert!(m.lines().any(|l| l.starts_with("strata_kv_records{store=\"scores\"} ") && !l.ends_with(" 0")), "no records gauge");
}
