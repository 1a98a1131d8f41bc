//! The orphan sweep against a real server: a chunked put cut off by kill -9
//! leaves chunks no composite lists; after a restart the sweep leaves them
//! alone while they are younger than the grace period, then frees exactly
//! them, and every acknowledged blob still reads back whole.

mod common;

use common::{Node, content, self_consistent};
use std::io::Write;
use std::time::{Duration, Instant};
use strata_client::PutArgs;

/// Live chunk records on the node's partitions.
async fn live_chunks(node: &Node, partitions: u64) -> usize {
    let mut n = 0;
    for p in 0..partitions {
        let rows = node.client.json(http::Method::GET, &format!("/admin/partitions/{p}/blobs")).await.expect("list");
        n += rows.as_array().expect("rows").iter().filter(|r| r["kind"] == "Chunk" && r["state"] == "live").count();
    }
    n
}

/// `strata sweep now --wait --json` against `node`.
fn sweep_now(node: &Node) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["sweep", "now", "--wait", "--json", "--server", &node.url])
        .env("STRATA_CREDENTIALS", node.credentials())
        .output()
        .expect("run strata sweep");
    assert!(out.status.success(), "strata sweep now failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_of_a_put_cut_by_kill_9_are_freed_after_the_grace_period_and_nothing_else() {
    const GRACE_SECS: u64 = 8;
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("node");
    let grace = GRACE_SECS.to_string();
    let args = ["--partitions", "2", "--disk-reserve", "0", "--chunk-size", "64KiB", "--orphan-grace-secs", &grace, "--sweep-interval-secs", "0"];
    let mut node = Node::start(&data, &args).await;
    // Acknowledged blobs, chunked and simple.
    let mut kept = Vec::new();
    for (seed, len) in [(1, 300_000), (2, 1000), (3, 200_000), (4, 50)] {
        let blob = content(seed, len.max(16));
        kept.push((node.client.put_bytes(blob.clone(), &PutArgs::default()).await.expect("put").id, blob));
    }
    // Clients cannot pass a blob off as the S3 API's (the sweep would free
    // it when no name holds it).
    let owned =
        node.client.send(http::Method::POST, "/", &[("x-strata-owner", "strata:s3".to_string())], strata_client::full(bytes::Bytes::from_static(b"x"))).await;
    match owned {
        Err(strata_client::ClientError::Api { status: 400, message, .. }) => assert!(message.contains("reserved"), "{message}"),
        other => panic!("a reserved owner was accepted: {:?}", other.map(|r| r.head.status)),
    }
    let acknowledged_chunks = live_chunks(&node, 2).await;
    assert_eq!(acknowledged_chunks, 5 + 4, "300 kB and 200 kB in 64 KiB chunks");
    // A put whose body stops at 400 kB of 1 MB: six chunks are written,
    // then the process dies before any composite lists them.
    let addr = node.url.trim_start_matches("http://").to_string();
    let mut s = std::net::TcpStream::connect(&addr).expect("connect");
    write!(s, "POST / HTTP/1.1\r\nHost: {addr}\r\n{}Content-Length: 1000000\r\n\r\n", node.auth_lines("POST", "/")).expect("head");
    s.write_all(&content(9, 1_000_000)[..400_000]).expect("body");
    let deadline = Instant::now() + Duration::from_secs(20);
    while live_chunks(&node, 2).await < acknowledged_chunks + 6 {
        assert!(Instant::now() < deadline, "the cut put's chunks were never written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed = Instant::now();
    node.kill9();
    drop(s);

    let node = Node::start(&data, &args).await;
    assert_eq!(live_chunks(&node, 2).await, acknowledged_chunks + 6, "the orphans survive the restart");
    // Within the grace period: candidates, left alone.
    let st = sweep_now(&node);
    if killed.elapsed() < Duration::from_secs(GRACE_SECS - 2) {
        assert_eq!(st["freed"], 0, "{st}");
        assert_eq!(st["too_young"], 6, "{st}");
    }
    // After it: exactly the six orphans go.
    tokio::time::sleep(Duration::from_secs(GRACE_SECS + 1).saturating_sub(killed.elapsed())).await;
    let st = sweep_now(&node);
    assert_eq!(st["freed"], 6, "{st}");
    assert_eq!(st["stopped"], serde_json::Value::Null, "{st}");
    assert_eq!(live_chunks(&node, 2).await, acknowledged_chunks);
    for (id, blob) in &kept {
        let got = node.client.get_bytes(id).await.expect("get");
        assert!(got == *blob && self_consistent(&got), "{id} changed");
    }
    // Nothing left to free; the metric counts what was.
    assert_eq!(sweep_now(&node)["freed"], 0);
    let text = node.client.get_text("/metrics").await.expect("metrics");
    let freed: f64 = text.lines().find_map(|l| l.strip_prefix("strata_sweep_freed_total ")).expect("the metric").trim().parse().expect("a number");
    assert_eq!(freed, 6.0);
}
