//! The CLI as a Unix tool: a command whose output is piped into a reader
//! that stops early (`strata partitions | head`) ends quietly.

use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_pipe_ends_a_command_quietly() {
    let out = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["sim", "kinesis-recovery", "--out"])
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run strata sim");
    // The reader goes away before the command prints its table.
    drop(child.stdout.take());
    let done = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(done.status.signal(), Some(libc::SIGPIPE), "{:?}: {stderr}", done.status);
}

#[test]
fn a_server_that_hangs_up_mid_upload_is_an_error_not_a_silent_death() {
    // A "server" that reads a little of the request and closes the socket.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        use std::io::Read;
        for _ in 0..4 {
            let Ok((mut s, _)) = listener.accept() else { return };
            let mut buf = vec![0u8; 64 << 10];
            let _ = s.read(&mut buf);
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big");
    std::fs::write(&file, vec![7u8; 64 << 20]).expect("write");
    let done = Command::new(env!("CARGO_BIN_EXE_strata")).args(["put", "--server", &format!("http://{addr}")]).arg(&file).output().expect("run strata put");
    let stderr = String::from_utf8_lossy(&done.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(done.status.signal(), None, "killed by a signal: {stderr}");
    assert!(!done.status.success(), "a put the server never answered succeeded");
    assert!(stderr.contains("error"), "{stderr}");
    drop(server);
}

/// `strata bench all` reads `strata bench-kv-push --json`: a small run on
/// three real node processes prints both pushes, every node's bytes and
/// rate, and the swap time.
#[test]
fn bench_kv_push_prints_its_figures_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["bench-kv-push", "--records", "3000", "--pyenv", "/nonexistent", "--json", "--data-dir"])
        .arg(dir.path().join("push"))
        .output()
        .expect("run strata bench-kv-push");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    assert_eq!(v["records"], 3000);
    assert!(v["spark_build_s"].is_null() && v["spark_output_identical"].is_null(), "no PySpark given: {v}");
    assert!(v["rust_build_s"].as_f64().is_some_and(|s| s > 0.0) && v["disk_write_mbps"].as_f64().is_some_and(|d| d > 0.0), "{v}");
    let pushes = v["pushes"].as_array().expect("pushes");
    assert_eq!(pushes.len(), 2, "{v}");
    for p in pushes {
        assert!(p["swap_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{p}");
        let nodes = p["nodes"].as_array().expect("nodes");
        assert_eq!(nodes.len(), 3, "{p}");
        assert!(nodes.iter().all(|n| n["bytes"].as_u64().is_some_and(|b| b > 0) && n["mb_per_s"].as_f64().is_some_and(|r| r > 0.0)), "{p}");
    }
}

/// `strata bench-tract` on its smallest cluster: every phase measured,
/// a dead node's rows re-replicated, every floor judged.
#[test]
fn bench_tract_measures_throughput_and_recovery_and_judges_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["bench-tract", "--nodes", "3", "--blob", "2MiB", "--per-node", "2MiB", "--tract-size", "256KiB", "--json", "--data-dir"])
        .arg(dir.path().join("b"))
        .output()
        .expect("run strata bench-tract");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = v["throughput"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{v}");
    assert!(rows.iter().all(|r| r["mbps"].as_f64().unwrap() > 0.0), "{v}");
    let rec = &v["recovery"][0];
    assert!(rec["bytes"].as_u64().unwrap() > 0 && rec["targets"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 2, "random against sequential, reads and writes: {v}");
    assert!(!dir.path().join("b").exists(), "the data is removed");
}

/// `strata bench-txn` on a short slice: every way measured at every
/// client count (measurements stored, the lock-based way through etcd),
/// where commit time goes, the isolation experiment, and its floors judged.
#[test]
fn bench_txn_measures_three_ways_and_isolation_and_judges_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["bench-txn", "--seconds", "1", "--clients", "1,4", "--json", "--data-dir"])
        .arg(dir.path().join("t"))
        .output()
        .expect("run strata bench-txn");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let points = v["points"].as_array().unwrap();
    for way in ["tyr-atomic", "tyr-ruw", "locks"] {
        for clients in [1, 4] {
            let p = points.iter().find(|p| p["way"] == way && p["clients"] == clients).unwrap_or_else(|| panic!("{way} {clients}: {v}"));
            assert!(p["per_second"].as_f64().unwrap() > 0.0, "{p}");
        }
    }
    assert!(v["timing"].as_array().unwrap().iter().all(|t| t["hops"].as_f64().unwrap() >= 4.0), "an append and three aggregates: {v}");
    assert_eq!(v["isolation"].as_array().unwrap().len(), 8, "{v}");
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 3, "{v}");
    assert!(!dir.path().join("t").exists(), "the data is removed");
}

/// `strata bench-rw` measures every system it names (Strata on 1 and 3
/// nodes, Redis, etcd), finds every key it wrote, and judges every floor.
#[test]
fn bench_rw_measures_every_system_and_judges_every_floor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["bench-rw", "--seconds", "0.5", "--concurrency", "4", "--json", "--data-dir"])
        .arg(dir.path().join("rw"))
        .output()
        .expect("run strata bench-rw");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    let rows = v["rows"].as_array().expect("rows");
    for (system, nodes) in [("strata", 1), ("redis", 1), ("strata", 3), ("etcd", 3)] {
        for op in ["put", "get"] {
            let r = rows
                .iter()
                .find(|r| r["system"] == system && r["nodes"] == nodes && r["op"] == op)
                .unwrap_or_else(|| panic!("no {system} {nodes} {op} row: {v}; {stderr}"));
            assert!(r["ops_per_s"].as_f64().is_some_and(|x| x > 0.0), "{r}");
            assert!(r["p99_ms"].as_f64().is_some_and(|x| x >= r["p50_ms"].as_f64().unwrap_or(f64::MAX)), "{r}");
            assert_eq!(r["missing"], 0, "every key written is found: {r}");
        }
    }
    let verdicts = v["verdicts"].as_array().expect("verdicts");
    assert_eq!(verdicts.len(), 4, "{v}");
    assert!(verdicts.iter().all(|x| x["pass"].is_boolean()), "every floor judged: {v}");
}
