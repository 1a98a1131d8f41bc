//! The S3 API against real clients: a real `strata server` process driven by
//! boto3 and the aws CLI (tests/s3/test_clients.py); a crash test that kills
//! the server with SIGKILL during S3 puts and checks every acknowledged
//! object after a restart (tests/s3/crash.py); and Debian's headless
//! Chromium posting a form and fetching across origins
//! (tests/s3/test_browser.py). The clients come from the Python environment
//! `scripts/test.sh` makes.

mod common;

use common::{Node, pyenv, workspace};
use std::process::Command;
use std::time::Duration;

/// The S3 endpoint and the default admin key the server printed.
async fn s3_of(node: &Node) -> (String, String, String) {
    let line = node.printed("S3 API on").await;
    let endpoint = line.split_whitespace().find(|w| w.starts_with("http://")).expect("S3 banner names the URL").to_owned();
    let keys = node.printed("AWS_ACCESS_KEY_ID=").await;
    let field = |name: &str| keys.split_whitespace().find_map(|w| w.strip_prefix(name)).expect("key printed").to_owned();
    (endpoint, field("AWS_ACCESS_KEY_ID="), field("AWS_SECRET_ACCESS_KEY="))
}

fn python(script: &str) -> Command {
    let mut c = Command::new(pyenv().join("bin/python"));
    c.arg(workspace().join("crates/strata-cli/tests/s3").join(script));
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn boto3_and_the_aws_cli_work_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("data"), &["--s3-listen", "127.0.0.1:0", "--s3-domain", "s3.strata.test"]).await;
    let (endpoint, ak, sk) = s3_of(&node).await;
    let out = python("test_clients.py")
        .env("STRATA_S3", &endpoint)
        .env("STRATA_URL", &node.url)
        .env("STRATA_BIN", env!("CARGO_BIN_EXE_strata"))
        .env("STRATA_CREDENTIALS", node.credentials())
        .env("STRATA_S3_DOMAIN", "s3.strata.test")
        .env("STRATA_DATA", dir.path().join("data"))
        .env("AWS_ACCESS_KEY_ID", &ak)
        .env("AWS_SECRET_ACCESS_KEY", &sk)
        .env("HOME", dir.path())
        .output()
        .expect("run python");
    let text = String::from_utf8_lossy(&out.stderr);
    println!("{}{text}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "S3 client tests failed:\n{text}");
}

/// Debian's headless Chromium uploads through an HTML form and passes a
/// CORS preflight with fetch() (tests/s3/test_browser.py).
#[tokio::test(flavor = "multi_thread")]
async fn a_real_browser_posts_a_form_and_passes_cors_preflight() {
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(std::path::Path::new(tool).exists(), "{tool} is missing: scripts/test.sh installs Debian's chromium and chromium-driver");
    }
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("data"), &["--s3-listen", "127.0.0.1:0"]).await;
    let (endpoint, ak, sk) = s3_of(&node).await;
    let out = python("test_browser.py")
        .env("STRATA_S3", &endpoint)
        .env("AWS_ACCESS_KEY_ID", &ak)
        .env("AWS_SECRET_ACCESS_KEY", &sk)
        .env("HOME", dir.path())
        // Selenium's own driver manager would try the network: the paths are given.
        .env("SE_AVOID_STATS", "true")
        .output()
        .expect("run python");
    let text = String::from_utf8_lossy(&out.stderr);
    println!("{}{text}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "browser tests failed:\n{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_s3_puts_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let acked = dir.path().join("acked.txt");
    let mut node = Node::start(&data, &["--s3-listen", "127.0.0.1:0"]).await;
    let (endpoint, ak, sk) = s3_of(&node).await;
    let mut writer = python("crash.py")
        .args(["write", acked.to_str().unwrap()])
        .env("STRATA_S3", &endpoint)
        .env("AWS_ACCESS_KEY_ID", &ak)
        .env("AWS_SECRET_ACCESS_KEY", &sk)
        .spawn()
        .expect("run the writer");
    // Let puts of every size be in flight, then kill the server mid-write.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&acked).map_or(0, |s| s.lines().count()) < 40 {
        assert!(std::time::Instant::now() < deadline, "the writer made no progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.kill9();
    assert!(writer.wait().expect("writer exits").success());
    let count = std::fs::read_to_string(&acked).unwrap().lines().count();
    drop(node);

    let node = Node::start(&data, &["--s3-listen", "127.0.0.1:0"]).await;
    let (endpoint, ak2, _) = s3_of(&node).await;
    assert_eq!(ak, ak2, "the default key survives a restart");
    let out = python("crash.py")
        .args(["verify", acked.to_str().unwrap()])
        .env("STRATA_S3", &endpoint)
        .env("AWS_ACCESS_KEY_ID", &ak)
        .env("AWS_SECRET_ACCESS_KEY", &sk)
        .output()
        .expect("run the verifier");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{count} acknowledged before kill -9; {text}");
    assert!(out.status.success(), "acknowledged S3 objects lost or damaged after kill -9:\n{text}");
}

/// Four `strata` processes serving S3 on 127.81.0.N: nodes 1–3 are the
/// metadata members, node 4 follows their log as a Raft learner. Names are
/// read-after-write consistent across all four (the learner included, for
/// writes through it and reads of others' writes), and survive the loss of
/// the leader.
#[tokio::test(flavor = "multi_thread")]
async fn names_are_consistent_across_a_cluster() {
    use strata_client::Client;
    let dir = tempfile::tempdir().unwrap();
    let addr = |n: u8, port: u16| format!("127.81.0.{n}:{port}");
    let meta: Vec<String> = (1..=3).map(|n| format!("{n}={}", addr(n, 7000))).collect();
    // The nodes' ports speak TLS with certificates of the cluster's CA;
    // boto3 trusts it through AWS_CA_BUNDLE.
    let (secret_path, opts) = common::cluster_secret(dir.path());
    let ca = dir.path().join("cluster-ca.pem");
    std::fs::write(&ca, strata_auth::ClusterSecret::load(&secret_path).unwrap().ca_cert_pem()).unwrap();
    let mut procs = Vec::new();
    for n in 1..=4u8 {
        let log = std::fs::File::create(dir.path().join(format!("n{n}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["server", "--data-dir"])
            .arg(dir.path().join(format!("n{n}")))
            .args(["--listen", &addr(n, 7000), "--node-id", &n.to_string(), "--meta", &meta.join(",")])
            .args(["--outbound-ip", &format!("127.81.0.{n}"), "--s3-listen", &addr(n, 7001)])
            .arg("--cluster-secret")
            .arg(&secret_path)
            .args(["--chunk-size", "1MiB", "--segment-size", "16MiB", "--disk-reserve", "0", "--replica-capacity", "256MiB"])
            .args(["--tail-cache", "32MiB"])
            .env("STRATA_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn strata");
        procs.push(ScopedChild(child));
    }
    let client = |n: u8| Client::with_options(&format!("https://{}", addr(n, 7000)), &opts);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while client(1).post_json("/admin/cluster/init", &serde_json::json!({})).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "the metadata group did not form");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let command = |via: u8, cmd: serde_json::Value| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match client(via).post_json("/admin/cluster/command", &cmd).await {
                Ok(v) if v.get("Refused").is_none() => return,
                other => assert!(std::time::Instant::now() < deadline, "{cmd}: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    for n in 1..=4u8 {
        command(n, serde_json::json!({ "AddNode": { "id": n, "addr": addr(n, 7000), "zone": "z1", "rack": format!("r{n}") } })).await;
        command(n, serde_json::json!({ "AddDisk": { "node": n, "path": "d0", "capacity_bytes": 4u64 << 30 } })).await;
    }
    command(1, serde_json::json!({ "AddPartitions": { "count": 4, "replicas_per_zone": 3, "capacity_bytes": 256u64 << 20 } })).await;
    // 4 partitions × 3 replicas over the four nodes.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut opened = 0;
        for n in 1..=4u8 {
            opened += client(n).json(http::Method::GET, "/admin/partitions").await.map_or(0, |v| v.as_array().map_or(0, Vec::len));
        }
        if opened == 12 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the nodes opened {opened} of 12 replicas");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A key made through node 2 works on every node.
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["key", "create", "--admin", "--json", "--server", &format!("https://{}", addr(2, 7000))])
        .env("STRATA_CLUSTER_SECRET", &secret_path)
        .output()
        .expect("strata key create");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (ak, sk) = (key["access_key_id"].as_str().unwrap().to_owned(), key["secret_access_key"].as_str().unwrap().to_owned());
    // The learner first: it creates the bucket and starts the upload.
    let endpoints: Vec<String> = [4, 1, 2, 3].iter().map(|&n| format!("https://{}", addr(n, 7001))).collect();
    let run = |mode: &str, endpoints: &[String]| {
        let out = python("cluster.py")
            .arg(mode)
            .env("STRATA_S3_ENDPOINTS", endpoints.join(","))
            .env("AWS_ACCESS_KEY_ID", &ak)
            .env("AWS_SECRET_ACCESS_KEY", &sk)
            .env("AWS_CA_BUNDLE", &ca)
            .output()
            .expect("run python");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        println!("{mode}: {text}");
        assert!(out.status.success(), "{mode} failed:\n{text}");
    };
    // Node 4 asks to be a learner once the map gives its address.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = client(1).json(http::Method::GET, "/admin/cluster/status").await.unwrap();
        let learners = status["meta"]["learners"].as_object().map(|l| l.keys().cloned().collect::<Vec<_>>());
        if learners == Some(vec!["4".to_string()]) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "node 4 did not become a learner: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    run("check", &endpoints);
    // SIGKILL the leader: the learner must follow the new one.
    let status = client(1).json(http::Method::GET, "/admin/cluster/status").await.unwrap();
    let leader = status["meta"]["leader"].as_u64().expect("a leader") as u8;
    assert!((1..=3).contains(&leader), "{status}");
    drop(procs.remove(leader as usize - 1));
    let left: Vec<String> = [4, 1, 2, 3].iter().filter(|&&n| n != leader).map(|&n| format!("https://{}", addr(n, 7001))).collect();
    run("after-kill", &left);
}

struct ScopedChild(std::process::Child);

impl Drop for ScopedChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
