//! A harness that runs real `strata` processes for integration tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use strata_client::Client;

/// A running `strata server` process.
pub struct Node {
    pub child: Child,
    pub url: String,
    pub client: Client,
    pub data_dir: PathBuf,
    /// Everything the server printed on stdout so far.
    pub stdout: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Node {
    /// Starts `strata server` on an ephemeral loopback port and waits until it is healthy.
    pub async fn start(data_dir: &Path, extra: &[&str]) -> Node {
        Self::start_with_open_files(data_dir, extra, None).await
    }

    /// Like [`Node::start`], with the process's open-file limit (soft and
    /// hard) set to `nofile`.
    pub async fn start_with_open_files(data_dir: &Path, extra: &[&str], nofile: Option<u64>) -> Node {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(data_dir.with_extension("log")).expect("open server log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
        if let Some(n) = nofile {
            // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit { rlim_cur: n as libc::rlim_t, rlim_max: n as libc::rlim_t };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd
            .args(["server", "--data-dir"])
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(if extra.contains(&"--s3-listen") { &[][..] } else { &["--s3-listen", "off"][..] })
            // Tests run side by side: a small tail cache (still several regions).
            .args(if extra.contains(&"--tail-cache") { &[][..] } else { &["--tail-cache", "64MiB"][..] })
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn strata server");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        let printed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = printed.clone();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            // Keep draining so the server never blocks on stdout.
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        let first = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let log = std::fs::read_to_string(data_dir.with_extension("log")).unwrap_or_default();
                panic!("strata server did not start; log:\n{log}");
            }
        };
        let url = first.split_whitespace().find(|w| w.starts_with("http://") || w.starts_with("https://")).expect("banner names the URL").to_string();
        // The server wrote its admin key before it printed the banner.
        let client = Client::with_options(&url, &admin_options(data_dir));
        let deadline = Instant::now() + Duration::from_secs(30);
        while client.json(http::Method::GET, "/health").await.is_err() {
            assert!(Instant::now() < deadline, "server never became healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Node { child, url, client, data_dir: data_dir.to_owned(), stdout: printed }
    }

    /// The node's admin credentials file.
    pub fn credentials(&self) -> PathBuf {
        self.data_dir.join("admin.credentials")
    }

    /// Runs `strata ARGS --server URL` as this node's admin; returns (success, stdout + stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(args)
            .args(["--server", &self.url])
            .env("STRATA_CREDENTIALS", self.credentials())
            .output()
            .expect("run strata");
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }

    /// The header lines (each ending in CRLF) that sign a raw request for
    /// `method` `path` (query included) as this node's admin: `host` and the
    /// SigV4 headers, the payload unsigned. For tests that write requests
    /// by hand.
    pub fn auth_lines(&self, method: &str, path: &str) -> String {
        let creds = strata_auth::credentials::load(&self.credentials()).expect("admin credentials");
        let host = self.url.trim_start_matches("http://").trim_start_matches("https://");
        let (p, q) = path.split_once('?').unwrap_or((path, ""));
        let headers: [(&str, &[u8]); 1] = [("host", host.as_bytes())];
        let view = strata_auth::RequestView { method, path: p, query: q, headers: &headers };
        let now = strata_types::Clock::now_ms(&strata_types::SystemClock) / 1000;
        let sig = strata_auth::sigv4::sign(
            &view,
            strata_auth::sigv4::UNSIGNED_PAYLOAD,
            &creds,
            strata_auth::Scope { region: "us-east-1", service: strata_auth::SERVICE },
            now,
        );
        format!("x-amz-date: {}\r\nx-amz-content-sha256: {}\r\nAuthorization: {}\r\n", sig.amz_date, sig.content_sha256, sig.authorization)
    }

    /// A client that sends unsigned requests.
    pub fn anonymous(&self) -> Client {
        Client::with_options(&self.url, &strata_client::ClientOptions { credentials: None, ..self.client.options().clone() })
    }

    /// A client signing as `creds`.
    pub fn client_as(&self, creds: strata_client::Credentials) -> Client {
        Client::with_options(&self.url, &strata_client::ClientOptions { credentials: Some(creds), ..self.client.options().clone() })
    }

    /// Waits for a stdout line containing `needle` and returns it.
    pub async fn printed(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self.stdout.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            assert!(Instant::now() < deadline, "the server never printed {needle:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A new cluster secret in `dir` (`cluster.secret`), and client options
/// that act as a node of that cluster (mutual TLS, its CA trusted).
pub fn cluster_secret(dir: &Path) -> (PathBuf, strata_client::ClientOptions) {
    let secret = strata_auth::ClusterSecret::generate().expect("a cluster secret");
    let path = dir.join("cluster.secret");
    strata_auth::credentials::write_private(&path, &secret.to_file()).expect("write the cluster secret");
    (path, secret_options(&secret))
}

/// Client options acting as a holder of `secret`.
pub fn secret_options(secret: &strata_auth::ClusterSecret) -> strata_client::ClientOptions {
    let me = secret.mint(&["test-harness".into()]).expect("a client certificate");
    let tls = strata_auth::tls::client_config(secret.roots().expect("roots"), Some(&me)).expect("TLS config");
    strata_client::ClientOptions { tls: Some(tls), server_name: Some(strata_auth::CLUSTER_SERVER_NAME.into()), ..Default::default() }
}

/// Client options signing as the admin key a node wrote to `data_dir`.
/// With `--tls-self-signed`, they trust its certificate; a test that gives
/// its own certificate there names the server name to verify in
/// `tls/server-name`.
pub fn admin_options(data_dir: &Path) -> strata_client::ClientOptions {
    let creds = strata_auth::credentials::load(&data_dir.join("admin.credentials")).expect("the server wrote its admin credentials");
    let cert = data_dir.join("tls/cert.pem");
    let tls = cert.exists().then(|| strata_auth::tls::client_config(strata_auth::tls::roots_from_file(&cert).expect("roots"), None).expect("TLS config"));
    let server_name = std::fs::read_to_string(data_dir.join("tls/server-name")).ok().map(|n| n.trim().to_owned());
    strata_client::ClientOptions { credentials: Some(creds), tls, server_name, ..Default::default() }
}

/// Deterministic, self-describing blob content: a 16-byte header
/// (`STRT`, seed, length) followed by a stream derived from the seed, so any
/// blob read back can be checked for completeness without knowing its id.
pub fn content(seed: u64, len: usize) -> Vec<u8> {
    assert!(len >= 16);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(b"STRT");
    v.extend_from_slice(&seed.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    let mut x = seed | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes()[..(len - v.len()).min(8)]);
    }
    v
}

/// True if `b` is exactly what [`content`] produced for its header.
pub fn self_consistent(b: &[u8]) -> bool {
    if b.len() < 16 || &b[..4] != b"STRT" {
        return false;
    }
    let seed = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")) as usize;
    len == b.len() && content(seed, len) == b
}

// The Spark builder and build-output comparisons (spark.rs, kv_cluster.rs).

use std::collections::BTreeMap;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn pyenv() -> PathBuf {
    let p = std::env::var_os("STRATA_PYENV").map(PathBuf::from).unwrap_or_else(|| workspace().join("target/pyenv"));
    assert!(
        p.join("bin/spark-submit").exists(),
        "PySpark is not installed in {}: run scripts/test.sh, which installs tools/spark/requirements.txt there",
        p.display()
    );
    p
}

/// Runs a Selenium test script of the test environment (under
/// `crates/strata-cli/tests`) in Debian's headless Chromium with `env`,
/// its screenshots going to `target/console-screenshots`, and asserts it
/// passed (its output printed either way).
pub fn browser_test(script: &str, home: &Path, env: &[(&str, String)]) {
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(Path::new(tool).exists(), "{tool} is missing: scripts/test.sh installs Debian's chromium and chromium-driver");
    }
    let out = Command::new(pyenv().join("bin/python"))
        .arg(workspace().join("crates/strata-cli/tests").join(script))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("SHOTS", workspace().join("target/console-screenshots"))
        .env("HOME", home)
        // Selenium's own driver manager would try the network: the paths are given.
        .env("SE_AVOID_STATS", "true")
        .output()
        .expect("run python");
    let text = String::from_utf8_lossy(&out.stderr);
    println!("{}{text}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "the browser test {script} failed:\n{text}");
}

/// Runs the Spark job; returns (success, stdout + stderr).
pub fn spark(args: &[&str]) -> (bool, String) {
    let env = pyenv();
    let python = env.join("bin/python");
    let home = Command::new(&python).args(["-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"]).output().expect("python");
    let home = String::from_utf8_lossy(&home.stdout).trim().to_string();
    let path = format!("{}:{}", env.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let job = workspace().join("tools/spark/build_store.py");
    let out = Command::new(env.join("bin/spark-submit"))
        .args(["--master", "local[2]", "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=8"])
        .arg(&job)
        .args(args)
        .env("SPARK_HOME", home)
        .env("PYSPARK_PYTHON", &python)
        .env("PATH", path)
        .output()
        .expect("spark-submit");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

pub fn strata(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata")).args(args).output().expect("run strata");
    assert!(out.status.success(), "strata {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn tree(d: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            for (k, v) in tree(&e.path()) {
                out.insert(format!("{}/{k}", e.file_name().to_string_lossy()), v);
            }
        } else {
            out.insert(e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap());
        }
    }
    out
}

pub fn same(a: &Path, b: &Path) {
    let (a, b) = (tree(a), tree(b));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "different files");
    for (name, bytes) in &a {
        assert!(b[name] == *bytes, "{name} differs");
    }
}
