//! The S3 API against real clients: a real `strata server` process driven by
//! boto3 and the aws CLI (tests/s3/test_clients.py), and a crash test that
//! kills the server with SIGKILL during S3 puts and checks every
//! acknowledged object after a restart (tests/s3/crash.py). The clients come
//! from the Python environment `scripts/test.sh` makes.

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
        .env("STRATA_S3_DOMAIN", "s3.strata.test")
        .env("AWS_ACCESS_KEY_ID", &ak)
        .env("AWS_SECRET_ACCESS_KEY", &sk)
        .env("HOME", dir.path())
        .output()
        .expect("run python");
    let text = String::from_utf8_lossy(&out.stderr);
    println!("{}{text}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "S3 client tests failed:\n{text}");
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
