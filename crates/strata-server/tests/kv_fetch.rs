//! Fetching a version onto a node: from a directory, paced by the throttle;
//! resuming after a failed attempt (the staged files are kept: the second
//! attempt succeeds although the source has lost a file the first one
//! copied); refusing a damaged file by name; and over HTTP from a real
//! `python3 -m http.server` process (which ignores Range requests).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use strata_kv::{Duplicates, ReadOnlyStore, Search, StoreDef, build_in_memory};
use strata_node::kv_fetch::{Source, fetch};

fn def() -> StoreDef {
    StoreDef { name: "f".into(), partitions: 2, replication: 1, chunks: 2 }
}

fn build(out: &Path, records: u32, tag: &str) {
    let recs = (0..records).map(|i| (format!("k{i}").into_bytes(), format!("{tag}-{i}-{}", "x".repeat(200)).into_bytes()));
    build_in_memory(&def(), recs, out, Duplicates::Fail).unwrap();
}

fn store(root: &Path) -> Arc<ReadOnlyStore> {
    Arc::new(ReadOnlyStore::open(root, def(), 2, Search::Binary).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_throttles_resumes_and_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("build");
    build(&src, 10_000, "a");
    let s = store(&tmp.path().join("store"));
    // Throttled: about 2.4 MB at 8 MB/s takes at least a quarter second.
    let t = Instant::now();
    let n = fetch(s.clone(), &Source::Dir(src.clone()), None, Some(8.0)).await.unwrap();
    let bytes = s.version_bytes(n).unwrap();
    assert!(bytes > 2_000_000, "{bytes}");
    assert!(t.elapsed().as_secs_f64() >= bytes as f64 / 8e6 * 0.9, "throttle ignored: {:?}", t.elapsed());
    s.swap(n).unwrap();
    assert!(s.get(b"k7").unwrap().unwrap().starts_with(b"a-7-"));

    // A damaged file fails the fetch, naming it; nothing is added.
    let src2 = tmp.path().join("build2");
    build(&src2, 10_000, "b");
    let mut names: Vec<String> =
        std::fs::read_dir(&src2).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".data")).collect();
    names.sort();
    let (first, last) = (names[0].clone(), names[names.len() - 1].clone());
    let good = std::fs::read(src2.join(&last)).unwrap();
    let mut bad = good.clone();
    bad[100] ^= 1;
    std::fs::write(src2.join(&last), &bad).unwrap();
    let e = fetch(s.clone(), &Source::Dir(src2.clone()), None, None).await.unwrap_err().to_string();
    assert!(e.contains(&last) && e.contains("corrupt"), "{e}");
    assert_eq!(s.versions(), vec![n]);
    // Repair the source but lose a file the first attempt copied: the retry
    // resumes from the staged copy.
    std::fs::write(src2.join(&last), &good).unwrap();
    std::fs::remove_file(src2.join(&first)).unwrap();
    let n2 = fetch(s.clone(), &Source::Dir(src2.clone()), None, None).await.unwrap();
    assert_eq!(n2, n + 1);
    s.swap(n2).unwrap();
    assert!(s.get(b"k7").unwrap().unwrap().starts_with(b"b-7-"));

    // A version for another store is refused before anything is copied.
    let other = tmp.path().join("other");
    build_in_memory(&StoreDef { name: "g".into(), partitions: 2, replication: 1, chunks: 2 }, vec![(b"x".to_vec(), b"y".to_vec())], &other, Duplicates::Fail)
        .unwrap();
    let e = fetch(s.clone(), &Source::Dir(other), None, None).await.unwrap_err().to_string();
    assert!(e.contains("built for store \"g\""), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_over_http() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("build");
    build(&src, 2_000, "h");
    let (mut server, port) = python_server(tmp.path(), None);
    let base = format!("http://127.0.0.1:{port}/build");
    let s = store(&tmp.path().join("store"));
    let r = fetch(s.clone(), &Source::parse(&base).unwrap(), Some(5), None).await;
    let missing = fetch(s.clone(), &Source::parse(&format!("http://127.0.0.1:{port}/nothing")).unwrap(), None, None).await;
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(r.unwrap(), 5);
    s.swap(5).unwrap();
    assert!(s.get(b"k1999").unwrap().unwrap().starts_with(b"h-1999-"));
    let e = missing.unwrap_err().to_string();
    assert!(e.contains("/nothing/.metadata"), "{e}");
}

/// Over HTTPS from a real Python server with a self-signed certificate,
/// trusted through `SSL_CERT_FILE` (the system roots otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_over_https() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("build");
    build(&src, 1_000, "s");
    // A CA, and a server certificate for 127.0.0.1 that it signs.
    let d = tmp.path();
    let (ca, cert, key) = (d.join("ca.pem"), d.join("cert.pem"), d.join("key.pem"));
    std::fs::write(d.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
    let openssl = |args: &[&str]| {
        let ok = std::process::Command::new("openssl")
            .args(args)
            .current_dir(d)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl")
            .success();
        assert!(ok, "openssl {args:?} failed");
    };
    openssl(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=strata-test-ca", "-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "key.pem", "-out", "leaf.csr"]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        "cert.pem",
        "-extfile",
        "ext.cnf",
    ]);
    let (mut server, port) = python_server(tmp.path(), Some((&cert, &key)));
    // SAFETY: set before the first HTTPS request of this test binary, which
    // reads it once; no other thread reads the environment meanwhile.
    unsafe { std::env::set_var("SSL_CERT_FILE", &ca) };
    let s = store(&tmp.path().join("store"));
    let r = fetch(s.clone(), &Source::parse(&format!("https://127.0.0.1:{port}/build")).unwrap(), None, None).await;
    let _ = server.kill();
    let _ = server.wait();
    let n = r.unwrap();
    s.swap(n).unwrap();
    assert!(s.get(b"k999").unwrap().unwrap().starts_with(b"s-999-"));
}

/// Starts a Python HTTP(S) server over `dir` on a port it picks itself (no
/// window in which another process could take a port chosen here), and
/// returns it with that port once it listens.
fn python_server(dir: &std::path::Path, tls: Option<(&std::path::Path, &std::path::Path)>) -> (std::process::Child, u16) {
    use std::io::BufRead;
    let wrap = match tls {
        Some((cert, key)) => format!(
            "c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\nc.load_cert_chain({:?}, {:?})\ns.socket = c.wrap_socket(s.socket, server_side=True)\n",
            cert.to_str().unwrap(),
            key.to_str().unwrap()
        ),
        None => String::new(),
    };
    let script = format!(
        "import http.server, ssl, functools\n\
         h = functools.partial(http.server.SimpleHTTPRequestHandler, directory={dir:?})\n\
         s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n\
         {wrap}\
         print(s.server_address[1], flush=True)\n\
         s.serve_forever()\n",
        dir = dir.to_str().unwrap(),
    );
    let mut child = std::process::Command::new("python3")
        .args(["-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 http.server");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the server prints its port");
    let port = line.trim().parse().unwrap_or_else(|_| panic!("the server printed {line:?}, not a port"));
    (child, port)
}
