//! Request limits against a real server: heads that take too long, idle
//! connections, requests with both Transfer-Encoding and Content-Length
//! (on the native and S3 ports, first request or later), and a flood of
//! idle half-sent connections at an open-file limit of 1,024 that must not
//! lock a well-behaved client out.

mod common;

use common::{Node, content};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use strata_client::PutArgs;

/// Everything the server sends on `s` until it closes (or `limit` passes).
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(limit)).expect("timeout");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
}

async fn live_blobs(node: &Node) -> usize {
    let rows = node.client.json(http::Method::GET, "/admin/partitions/0/blobs").await.expect("list");
    rows.as_array().expect("rows").iter().filter(|r| r["state"] == "live").count()
}

async fn metric(node: &Node, name: &str) -> f64 {
    let text = node.client.get_text("/metrics").await.expect("metrics");
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or_else(|| panic!("no metric {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_idle_connections_and_ambiguous_lengths_are_cut_off() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&tmp.path().join("node"), &["--partitions", "1", "--header-timeout-secs", "2", "--s3-listen", "127.0.0.1:0"]).await;
    let addr = node.url.trim_start_matches("http://").to_string();
    let s3 = node.printed("S3 API on").await.split_whitespace().find(|w| w.starts_with("http://")).expect("S3 URL").trim_start_matches("http://").to_string();

    // A head that never ends: 408, and the connection closes.
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").expect("send");
    let (answer, took) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(took < Duration::from_secs(5), "closed after {took:?}");
    // A connection that never sends anything is closed as well, silently.
    let mut s = TcpStream::connect(&addr).expect("connect");
    let (answer, took) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(answer.is_empty() && took < Duration::from_secs(5), "{answer:?} after {took:?}");
    // Idle after a request that hyper served: closed by hyper's timer.
    let signed_post = |body: &str, extra: &str| format!("POST / HTTP/1.1\r\nHost: {addr}\r\n{}{extra}\r\n{body}", node.auth_lines("POST", "/"));
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.write_all(signed_post("hi", "Content-Length: 2\r\n").as_bytes()).expect("send");
    let (answer, took) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer:?}");
    assert!(took < Duration::from_secs(5), "kept idle for {took:?}");
    assert!(metric(&node, "strata_connections_timed_out_total").await >= 3.0);

    // Both Transfer-Encoding and Content-Length on a connection's first
    // request: 400 and nothing stored, on both ports.
    let before = live_blobs(&node).await;
    let smuggle = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n2\r\nab\r\n0\r\n\r\n";
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.write_all(smuggle).expect("send");
    let (answer, _) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("Transfer-Encoding and Content-Length"), "{answer:?}");
    assert_eq!(live_blobs(&node).await, before, "nothing stored");
    // On a later request of a kept-alive connection hyper reads the body
    // as chunked (never by the Content-Length) and closes the connection.
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.write_all(signed_post("ok", "Content-Length: 2\r\n").as_bytes()).expect("send");
    s.write_all(signed_post("2\r\nab\r\n0\r\n\r\n", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n").as_bytes()).expect("send");
    s.write_all(signed_post("bad", "Content-Length: 3\r\n").as_bytes()).expect("send");
    let (answer, _) = read_until_closed(&mut s, Duration::from_secs(10));
    assert_eq!(answer.matches("HTTP/1.1 201").count(), 2, "{answer:?}");
    assert!(answer.contains("\"size\":2}") && answer.contains("connection: close"), "{answer:?}");
    assert_eq!(live_blobs(&node).await, before + 2, "the request after the ambiguous one was not read");
    let mut s = TcpStream::connect(&s3).expect("connect S3");
    s.write_all(b"PUT /b/k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n2\r\nab\r\n0\r\n\r\n").expect("send");
    let (answer, _) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 400"), "S3: {answer:?}");
    // A slow head on the S3 port is cut off too.
    let mut s = TcpStream::connect(&s3).expect("connect S3");
    s.write_all(b"GET /b/k HTTP/1.1\r\n").expect("send");
    let (_, took) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(took < Duration::from_secs(5), "S3 head kept for {took:?}");
}

/// The report: at an open-file limit of 1,024, about 1,000 idle
/// half-sent requests locked every other client out. Now 2,000 of them only
/// evict each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_half_sent_requests_do_not_lock_out_a_real_client_at_1024_open_files() {
    // This test process holds the 2,000 connections: it needs the files.
    let nofile = strata_server::limits::raise_open_file_limit().expect("rlimit");
    if nofile < 2_300 {
        eprintln!("skipped: this process may open only {nofile} files");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("node");
    let node = Node::start_with_open_files(&data, &["--partitions", "2"], Some(1024)).await;
    let addr = node.url.trim_start_matches("http://").to_string();
    let mut idle = Vec::new();
    for i in 0..2_000 {
        match TcpStream::connect(&addr) {
            Ok(mut s) => {
                let _ = s.write_all(b"GET /health HTTP/1.1\r\nHo");
                idle.push(s);
            }
            Err(e) => panic!("connection {i}: {e}"),
        }
    }
    let t = Instant::now();
    let blob = content(5, 100_000);
    let id = node.client.put_bytes(blob.clone(), &PutArgs::default()).await.expect("put while flooded").id;
    let got = node.client.get_bytes(&id).await.expect("get while flooded");
    assert!(got == blob, "wrong bytes");
    assert!(t.elapsed() < Duration::from_secs(10), "served only after {:?}", t.elapsed());
    assert!(metric(&node, "strata_connections_evicted_total").await > 0.0);
    let max = metric(&node, "strata_connections_max").await;
    assert!(max <= 1024.0 - 256.0, "the limit leaves room for the store's files: {max}");
    drop(idle);
    let log = std::fs::read_to_string(data.with_extension("log")).unwrap_or_default();
    assert!(!log.contains("accept failed"), "the server ran out of descriptors:\n{}", &log[log.len().saturating_sub(2000)..]);
}

/// When every connection a node may hold is busy (mid-request, nothing to
/// evict), a new one is refused at once with 503 `TooManyConnections`,
/// and it is counted; once one finishes, clients are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_refuses_new_connections_clearly_when_every_one_is_busy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&tmp.path().join("node"), &["--partitions", "1", "--max-connections", "4", "--header-timeout-secs", "30"]).await;
    let addr = node.url.trim_start_matches("http://").to_string();
    // Four puts whose bodies never finish: busy, not waiting for a head.
    let mut busy = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(&addr).expect("connect");
        let head = format!("POST / HTTP/1.1\r\nHost: {addr}\r\n{}Content-Length: 1000000\r\n\r\npartial", node.auth_lines("POST", "/"));
        s.write_all(head.as_bytes()).expect("send");
        busy.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let (answer, took) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("TooManyConnections"), "{answer:?}");
    assert!(took < Duration::from_secs(2), "refused only after {took:?}");
    drop(busy);
    // The node serves again once the busy connections are gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(v) = node.client.json(http::Method::GET, "/health").await {
            assert_eq!(v["status"], "ok");
            break;
        }
        assert!(Instant::now() < deadline, "the node never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(metric(&node, "strata_connections_refused_total").await >= 1.0);
}
