//! The HTTP API against a real server process: every operation, and every
//! kind of bad input getting a clear error while changing nothing.

mod common;

use bytes::Bytes;
use common::{Node, content};
use http::Method;
use std::time::Duration;
use strata_client::{ClientError, PutArgs, full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn api_err(r: Result<impl Sized, ClientError>) -> (u16, String) {
    match r {
        Err(ClientError::Api { status, code, .. }) => (status, code),
        Err(e) => panic!("expected an API error, got {e}"),
        Ok(_) => panic!("expected an API error, got success"),
    }
}

/// Live blobs of every partition: (id, kind).
async fn live_blobs(node: &Node) -> Vec<(String, String)> {
    let parts = node.client.json(Method::GET, "/admin/partitions").await.expect("partitions");
    let mut out = Vec::new();
    for p in parts.as_array().expect("array") {
        let pid = p["partition"].as_u64().expect("pid");
        let blobs = node.client.json(Method::GET, &format!("/admin/partitions/{pid}/blobs")).await.expect("blobs");
        for b in blobs.as_array().expect("array") {
            if b["state"] == "live" {
                out.push((b["id"].as_str().expect("id").to_string(), b["kind"].as_str().expect("kind").to_string()));
            }
        }
    }
    out.sort();
    out
}

/// Sends a raw HTTP/1.1 request whose body is shorter than its Content-Length
/// (possibly empty) and returns the raw response.
async fn short_body(node: &Node, declared: usize, sent: &[u8]) -> String {
    let addr = node.url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!("POST / HTTP/1.1\r\nHost: {addr}\r\n{}Content-Length: {declared}\r\n\r\n", node.auth_lines("POST", "/"));
    s.write_all(head.as_bytes()).await.expect("write head");
    s.write_all(sent).await.expect("write body");
    s.shutdown().await.expect("half-close");
    let mut resp = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut resp)).await;
    String::from_utf8_lossy(&resp).into_owned()
}

/// `GET /health` then `GET /{id}` pipelined on one connection; the raw
/// bytes of both answers.
async fn get_after_other_request(node: &Node, id: &str) -> Vec<u8> {
    let addr = node.url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = node.auth_lines("GET", &format!("/{id}"));
    let reqs = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\nGET /{id} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(reqs.as_bytes()).await.expect("write requests");
    let mut resp = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut resp)).await.expect("answers within 10 s").expect("read answers");
    resp
}

/// A recent large blob is read from the tail cache, in memory: the
/// connection loop writes it itself (no hyper), with the answer the
/// regular path gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_large_blobs_are_answered_from_memory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&tmp.path().join("n"), &["--tail-cache", "16MiB"]).await;
    let c = &node.client;
    let counter = |name: &'static str| async move {
        let m = c.send(Method::GET, "/metrics", &[], full(Bytes::new())).await.expect("metrics").bytes().await.expect("body");
        String::from_utf8_lossy(&m).lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok()).unwrap_or(0.0)
    };
    // The tail cache takes records once it has faulted in its memory.
    for _ in 0..500 {
        if counter("strata_engine_tail_cache_ready_bytes").await >= 16.0 * 1024.0 * 1024.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let args = PutArgs { meta: vec![("color".into(), "blue".into())], ..PutArgs::default() };
    let data = content(3, 1 << 20);
    let id = c.put_bytes(data.clone(), &args).await.expect("put").id;
    let reader = node.client.to(&node.url);
    let (memory, sendfile) = (counter("strata_http_memory_responses_total").await, counter("strata_http_sendfile_responses_total").await);
    for _ in 0..3 {
        let got = reader.get(&id, None).await.expect("get");
        assert_eq!(got.head.status, 200);
        assert_eq!(got.head.headers["x-strata-meta-color"], "blue", "the in-memory path sends the regular headers");
        assert_eq!(got.head.headers["content-length"], (1 << 20).to_string());
        assert_eq!(&got.bytes().await.expect("body")[..], &data[..]);
    }
    // Counted after the last byte left: wait for the count.
    let mut now = counter("strata_http_memory_responses_total").await;
    for _ in 0..50 {
        if now >= memory + 3.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        now = counter("strata_http_memory_responses_total").await;
    }
    assert_eq!(now, memory + 3.0, "plain GETs of a blob in the tail cache are answered from memory by the connection loop");
    assert_eq!(counter("strata_http_sendfile_responses_total").await, sendfile, "not with sendfile");
    let ranged = reader.get(&id, Some("bytes=5-9")).await.expect("range");
    assert_eq!(ranged.head.status, 206);
    assert_eq!(&ranged.bytes().await.expect("body")[..], &data[5..10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_and_bad_input() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&tmp.path().join("n"), &["--chunk-size", "64KiB", "--max-blob-size", "2MiB"]).await;
    let c = &node.client;

    let sendfile_count = || async {
        let m = c.send(Method::GET, "/metrics", &[], full(Bytes::new())).await.expect("metrics").bytes().await.expect("body");
        String::from_utf8_lossy(&m).lines().find_map(|l| l.strip_prefix("strata_http_sendfile_responses_total ")?.parse::<f64>().ok()).expect("sendfile metric")
    };

    // Put with metadata and TTL; info, head, get, range.
    let args = PutArgs {
        ttl_secs: Some(3600),
        content_type: Some("text/plain".into()),
        owner: Some("team-a".into()),
        meta: vec![("color".into(), "blue".into()), ("lang".into(), "ünïcode ✓".into())],
        policy: None,
        container: None,
    };
    let data = content(1, 1000);
    let id = c.put_bytes(data.clone(), &args).await.expect("put").id;
    let before = sendfile_count().await;
    // One raw connection, so no client pool can open a fresh one between
    // the requests: its first request is not a blob GET, so hyper owns it,
    // and the blob GET after it is a regular one. A fresh connection that
    // only GETs stays on the sendfile path.
    assert!(get_after_other_request(&node, &id).await.ends_with(&data[..]), "the blob after /health on one connection");
    assert_eq!(sendfile_count().await, before, "a connection handed to hyper stays with hyper");
    let reader = node.client.to(&node.url);
    for _ in 0..3 {
        let plain = reader.get(&id, None).await.expect("get");
        assert_eq!(plain.head.headers["x-strata-meta-color"], "blue", "the sendfile path sends the same headers");
        assert_eq!(plain.head.headers["content-length"], "1000");
        assert_eq!(&plain.bytes().await.expect("body")[..], &data[..]);
    }
    let before = before + 3.0;
    // The server counts a sendfile response after its last byte left, so
    // the client can see the body before the count moves: wait for it.
    let mut seen = sendfile_count().await;
    for _ in 0..50 {
        if seen >= before {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        seen = sendfile_count().await;
    }
    assert_eq!(seen, before, "plain GETs of a simple blob on a GET-only connection use sendfile");
    let info = c.info(&id).await.expect("info");
    assert_eq!(info["size"], 1000);
    assert_eq!(info["content_type"], "text/plain");
    assert_eq!(info["owner"], "team-a");
    assert_eq!(info["meta"]["color"], "blue");
    assert_eq!(info["meta"]["lang"], "ünïcode ✓");
    assert!(info["expiry_ms"].as_u64().is_some());
    let head = c.send(Method::HEAD, &format!("/{id}"), &[], full(Bytes::new())).await.expect("head");
    assert_eq!(head.head.headers["content-length"], "1000");
    assert_eq!(head.head.headers["x-strata-meta-color"], "blue");
    let r = c.get(&id, Some("bytes=10-19")).await.expect("range");
    assert_eq!(r.head.status, 206);
    assert_eq!(r.head.headers["content-range"], "bytes 10-19/1000");
    assert_eq!(&r.bytes().await.expect("body")[..], &data[10..20]);
    assert_eq!(sendfile_count().await, before, "ranged GETs take the regular path");
    assert_eq!(&c.get(&id, Some("bytes=-5")).await.expect("suffix").bytes().await.expect("body")[..], &data[995..]);
    assert_eq!(&c.get(&id, Some("bytes=990-")).await.expect("open").bytes().await.expect("body")[..], &data[990..]);

    // Ranges outside the blob, and forms we do not serve.
    assert_eq!(api_err(c.get(&id, Some("bytes=1000-1010")).await), (416, "InvalidRange".into()));
    assert_eq!(api_err(c.get(&id, Some("bytes=0-1,5-6")).await), (416, "InvalidRange".into()));
    assert_eq!(api_err(c.get(&id, Some("lines=1-2")).await), (416, "InvalidRange".into()));

    // Malformed and unknown ids, on every route.
    assert_eq!(api_err(c.get_bytes("not-an-id").await), (400, "InvalidBlobId".into()));
    assert_eq!(api_err(c.info("AAAA").await), (400, "InvalidBlobId".into()));
    assert_eq!(api_err(c.delete("%20").await), (400, "InvalidBlobId".into()));
    assert_eq!(api_err(c.update_ttl("x", "10").await), (400, "InvalidBlobId".into()));
    let unknown = {
        let mut b = id.clone().into_bytes();
        b[20] = if b[20] == b'A' { b'B' } else { b'A' };
        String::from_utf8(b).expect("ascii")
    };
    assert_eq!(api_err(c.get_bytes(&unknown).await), (404, "BlobNotFound".into()));
    // A well-formed id naming a partition that does not exist.
    let no_partition = "AQAHAAAAAAAAAI9lbuMOFC5tkCcWQ0uhJ9A";
    assert_eq!(api_err(c.get_bytes(no_partition).await), (404, "NoSuchPartition".into()));

    // Bad headers.
    let bad_ttl = c.send(Method::POST, "/", &[("x-strata-ttl", "soon".into())], full("x")).await;
    assert_eq!(api_err(bad_ttl), (400, "InvalidHeader".into()));
    assert_eq!(api_err(c.update_ttl(&id, "-3").await), (400, "InvalidHeader".into()));
    for policy in ["0", "most", "-1"] {
        let bad_policy = c.send(Method::POST, "/", &[("x-strata-policy", policy.into())], full("x")).await;
        assert_eq!(api_err(bad_policy), (400, "InvalidHeader".into()), "policy {policy:?}");
    }
    let big_meta = c.send(Method::POST, "/", &[("x-strata-meta-a", "v".repeat(9000))], full("x")).await;
    assert_eq!(api_err(big_meta), (400, "MetadataTooLarge".into()));
    // Non-UTF-8 metadata, sent raw (header values may carry any byte).
    let raw = {
        let addr = node.url.trim_start_matches("http://");
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut req = format!("POST / HTTP/1.1\r\nHost: {addr}\r\n{}Content-Length: 1\r\nx-strata-meta-bin: ", node.auth_lines("POST", "/")).into_bytes();
        req.extend_from_slice(b"\xff\xfe\r\nConnection: close\r\n\r\nx");
        s.write_all(&req).await.expect("write");
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).await.expect("read");
        String::from_utf8_lossy(&resp).into_owned()
    };
    assert!(raw.starts_with("HTTP/1.1 400") && raw.contains("must be UTF-8"), "{raw}");

    // Too large: declared, and streamed without a length.
    let before = live_blobs(&node).await;
    // The 413 comes from the declared length alone, before any body is read
    // (a client that keeps writing may see its connection closed instead).
    let declared = short_body(&node, 3 << 20, &[]).await;
    assert!(declared.starts_with("HTTP/1.1 413") && declared.contains("BlobTooLarge"), "{declared}");
    let stream = futures_util::stream::iter((0..48).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![1u8; 64 << 10]))));
    assert_eq!(api_err(c.put(strata_client::streaming(stream), None, &PutArgs::default()).await), (413, "BlobTooLarge".into()));
    // A body shorter than its Content-Length, long enough that chunks were written.
    let resp = short_body(&node, 1 << 20, &vec![7u8; 200 << 10]).await;
    assert!(resp.starts_with("HTTP/1.1 400") && resp.contains("IncompleteBody"), "{resp}");
    assert_eq!(live_blobs(&node).await, before, "a failed put must leave no live blob or chunk behind");

    // Chunked blob: many chunks, ranges across chunk boundaries.
    let big = content(2, (1 << 20) + 12345);
    let big_id = c.put_bytes(big.clone(), &PutArgs::default()).await.expect("chunked put").id;
    assert_eq!(c.info(&big_id).await.expect("info")["chunks"], 17);
    assert_eq!(&c.get_bytes(&big_id).await.expect("get")[..], &big[..]);
    let r = c.get(&big_id, Some("bytes=65530-200000")).await.expect("range").bytes().await.expect("body");
    assert_eq!(&r[..], &big[65530..200001]);
    assert!(live_blobs(&node).await.iter().any(|(_, k)| k == "Chunk"));
    // Chunk ids are internal.
    let chunk = live_blobs(&node).await.into_iter().find(|(_, k)| k == "Chunk").expect("a chunk").0;
    assert_eq!(api_err(c.get_bytes(&chunk).await).0, 400);

    // TTL update, then delete: 410 with BlobDeleted; deleting twice is fine.
    c.update_ttl(&big_id, "never").await.expect("ttl never");
    assert!(c.info(&big_id).await.expect("info")["expiry_ms"].is_null());
    c.delete(&big_id).await.expect("delete");
    assert_eq!(api_err(c.get_bytes(&big_id).await), (410, "BlobDeleted".into()));
    c.delete(&big_id).await.expect("delete is idempotent");
    assert!(!live_blobs(&node).await.iter().any(|(_, k)| k == "Chunk"), "deleting a chunked blob deletes its chunks");

    // Expiry: 410 with a different code.
    let short = c.put_bytes(content(3, 100), &PutArgs { ttl_secs: Some(1), ..PutArgs::default() }).await.expect("put").id;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(api_err(c.get_bytes(&short).await), (410, "BlobExpired".into()));
    assert_eq!(api_err(c.update_ttl(&short, "100").await), (410, "BlobExpired".into()));

    // Health and metrics.
    assert_eq!(c.json(Method::GET, "/health").await.expect("health")["status"], "ok");
    let m = c.send(Method::GET, "/metrics", &[], full(Bytes::new())).await.expect("metrics").bytes().await.expect("body");
    let m = String::from_utf8_lossy(&m);
    for name in ["strata_http_requests_total", "strata_engine_fsyncs_total", "strata_replica_used_bytes", "strata_http_request_duration_seconds_bucket"] {
        assert!(m.contains(name), "metric {name} missing");
    }
    // The tail cache (64 MiB here) has its first 16 MiB region faulted in
    // at open; the rest comes while a CPU is idle.
    let gauge =
        |name: &str| m.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok()).unwrap_or_else(|| panic!("metric {name} missing"));
    let (ready, size) = (gauge("strata_engine_tail_cache_ready_bytes"), gauge("strata_engine_tail_cache_bytes"));
    assert!(ready >= f64::from(16u32 << 20) && ready <= size, "tail cache ready {ready} of {size} bytes");
    // The first blob is untouched by all of the above.
    assert_eq!(&c.get_bytes(&id).await.expect("get")[..], &data[..]);
}

/// A real full filesystem (a small tmpfs): puts fail with 507, partitions go
/// read-only instead of corrupting, every stored blob stays readable, the
/// node restarts on the full disk, and puts resume once space is freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_turns_read_only_without_corruption() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = tmp.path().join("small");
    std::fs::create_dir(&mnt).expect("mkdir");
    let ok = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"]).arg(&mnt).status().map(|s| s.success()).unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("STRATA_SKIP_MOUNT_TESTS").is_ok(),
            "mounting a tmpfs failed: run as root, or set STRATA_SKIP_MOUNT_TESTS=1 to skip this test knowingly"
        );
        eprintln!("SKIPPED: cannot mount a tmpfs here");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let data = mnt.join("n");
    let args = ["--chunk-size", "256KiB", "--segment-size", "4MiB", "--partitions", "2", "--disk-reserve", "0"];
    let mut node = Node::start(&data, &args).await;
    let mut stored = Vec::new();
    let mut full_seen = None;
    for i in 0..400u64 {
        match node.client.put_bytes(content(i, 200 << 10), &PutArgs::default()).await {
            Ok(r) => stored.push((r.id, i)),
            Err(e) => {
                full_seen = Some(e);
                break;
            }
        }
    }
    let e = full_seen.expect("a 24 MiB filesystem must fill up");
    assert_eq!(e.status(), Some(507), "{e}");
    assert!(stored.len() > 20, "only {} blobs fit", stored.len());
    for (id, i) in &stored {
        assert_eq!(&node.client.get_bytes(id).await.expect("readable on a full disk")[..], &content(*i, 200 << 10)[..]);
    }
    let parts = node.client.json(Method::GET, "/admin/partitions").await.expect("partitions");
    assert!(parts.as_array().expect("array").iter().any(|p| p["state"] == "read-only"), "{parts}");
    // Restart on the full disk: recovery must not need space it cannot get.
    node.stop();
    let node = Node::start(&data, &args).await;
    for (id, i) in &stored {
        assert_eq!(&node.client.get_bytes(id).await.expect("readable after restart")[..], &content(*i, 200 << 10)[..]);
    }
    // Deleting and compacting frees space; the space monitor notices and puts resume.
    for (id, _) in stored.iter().take(stored.len() / 2) {
        node.client.delete(id).await.expect("deletes work on a full disk");
    }
    node.client.json(Method::POST, "/admin/compact").await.expect("compact");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = node.client.put_bytes(content(999, 1000), &PutArgs::default()).await;
    assert!(r.is_ok(), "puts resume once space is freed: {r:?}");
}
