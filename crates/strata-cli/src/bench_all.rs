//! `strata bench all`: every benchmark with a floor, run one after the
//! other as child processes of this binary (`--json`), and one table of
//! verdicts with the limits each measured in the same run, so a regression
//! on any row shows at once. The floors are the issues' (each line names
//! its baseline); a benchmark that cannot run here (MinIO not installed)
//! says so instead of passing.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Debug)]
pub struct BenchAllArgs {
    /// Directory for the benchmarks' data (removed afterwards).
    #[arg(long, default_value = "./strata-bench-all")]
    pub data_dir: PathBuf,
    /// The MinIO server binary for the S3 rows (default: the one
    /// scripts/bench-s3.sh installs under target/minio).
    #[arg(long)]
    pub minio: Option<PathBuf>,
    /// Shorter phases (1 s) and 1M key-value records only: for a quick look,
    /// not for a closing note.
    #[arg(long)]
    pub quick: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, serde::Serialize)]
struct Verdict {
    bench: &'static str,
    floor: String,
    measured: String,
    /// None: not measured, or (with `reported`) a figure without a floor.
    pass: Option<bool>,
    /// A figure an issue asks to report, with no floor to judge it by.
    reported: bool,
}

fn verdict(bench: &'static str, floor: impl Into<String>, measured: impl Into<String>, pass: Option<bool>) -> Verdict {
    Verdict { bench, floor: floor.into(), measured: measured.into(), pass, reported: false }
}

fn report(bench: &'static str, what: impl Into<String>, measured: impl Into<String>) -> Verdict {
    Verdict { bench, floor: what.into(), measured: measured.into(), pass: None, reported: true }
}

/// Runs `strata <args> --json` and parses its standard output (the last
/// line that parses, so progress on stdout cannot confuse it).
fn run_json(args: &[&str]) -> Result<Value> {
    let exe = std::env::current_exe().context("finding the strata binary")?;
    eprintln!("== strata {}", args.join(" "));
    let out = Command::new(exe).args(args).arg("--json").stderr(std::process::Stdio::inherit()).output().context("running a benchmark")?;
    if !out.status.success() {
        bail!("strata {} failed ({})", args.join(" "), out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    if let Ok(v) = serde_json::from_str(&text) {
        return Ok(v);
    }
    text.lines().rev().find_map(|l| serde_json::from_str(l).ok()).with_context(|| format!("strata {} printed no JSON", args.join(" ")))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(0.0)
}

fn dir(base: &Path, name: &str) -> String {
    base.join(name).display().to_string()
}

/// `strata bench`: its own floors, and issue 21's 4 KiB PUT rate.
fn native(a: &BenchAllArgs, limits: &mut Vec<String>) -> Vec<Verdict> {
    let secs = if a.quick { "1" } else { "3" };
    let v = match run_json(&["bench", "--data-dir", &dir(&a.data_dir, "native"), "--seconds", secs]) {
        Ok(v) => v,
        Err(e) => return vec![verdict("native", "strata bench", format!("error: {e:#}"), Some(false))],
    };
    let l = &v["limits"];
    limits.push(format!(
        "native: fsync'd write {:.0} MB/s, O_DIRECT read {:.0} MB/s, loopback {:.0} MB/s",
        f(l, "disk_write_fsync_mb_per_sec"),
        f(l, "disk_read_direct_mb_per_sec"),
        f(l, "loopback_tcp_mb_per_sec")
    ));
    let rows = v["rows"].as_array().cloned().unwrap_or_default();
    let row = |op: &str, size: u64, conc: u64, limit: Option<&str>| {
        rows.iter()
            .find(|r| r["op"] == op && r["size"].as_u64() == Some(size) && r["concurrency"].as_u64() == Some(conc) && limit.is_none_or(|l| r["limit"] == l))
            .cloned()
    };
    let mut out = Vec::new();
    for fl in v["floors"].as_array().cloned().unwrap_or_default() {
        let name = fl["floor"].as_str().unwrap_or("?").to_string();
        let measured = match name.as_str() {
            n if n.starts_with("durable 1MiB PUT") => row("PUT", 1 << 20, 16, None),
            n if n.starts_with("page-cached 1MiB GET") => row("GET", 1 << 20, 16, Some("loopback")),
            n if n.starts_with("durable 4KiB PUT") => row("PUT", 4 << 10, 16, None),
            n if n.starts_with("cold 1MiB GET") => row("GET", 1 << 20, 16, Some("O_DIRECT disk read")),
            _ => None,
        };
        let text = measured.map_or("-".to_string(), |r| {
            format!("{:.0} ops/s, {:.0} MB/s, {:.2} of its limit", f(&r, "ops_per_sec"), f(&r, "mb_per_sec"), f(&r, "ratio_to_limit"))
        });
        out.push(verdict("native", name, text, fl["pass"].as_bool()));
    }
    let put4 = row("PUT", 4 << 10, 16, None);
    out.push(verdict(
        "native",
        "durable 4KiB PUT x16 >= 25000 ops/s (group commit)",
        put4.as_ref().map_or("-".to_string(), |r| format!("{:.0} ops/s", f(r, "ops_per_sec"))),
        put4.map(|r| f(&r, "ops_per_sec") >= 25_000.0),
    ));
    out
}

/// The MinIO binary: the one given, or the one scripts/bench-s3.sh installed.
fn minio(a: &BenchAllArgs) -> Option<PathBuf> {
    if let Some(m) = &a.minio {
        return Some(m.clone());
    }
    let root = PathBuf::from("target/minio");
    std::fs::read_dir(&root).ok()?.filter_map(|e| e.ok()).map(|e| e.path().join("minio")).find(|p| p.is_file())
}

/// `strata bench s3` against MinIO: the S3 issue's floors (every PUT row
/// 2x MinIO, every GET row 1.2x) and issue 21's 4 KiB PUT rate.
fn s3(a: &BenchAllArgs, limits: &mut Vec<String>) -> Vec<Verdict> {
    let Some(minio) = minio(a) else {
        return vec![verdict(
            "s3",
            "every PUT row >= 2x MinIO, every GET row >= 1.2x",
            "not measured: MinIO not installed (scripts/bench-s3.sh installs it)",
            None,
        )];
    };
    let (minio, data) = (minio.display().to_string(), dir(&a.data_dir, "s3"));
    let mut args = vec!["bench", "s3", "--dir", &data, "--minio", &minio];
    if a.quick {
        args.extend(["--seconds", "1", "--rounds", "1"]);
    }
    let v = match run_json(&args) {
        Ok(v) => v,
        Err(e) => return vec![verdict("s3", "strata bench s3", format!("error: {e:#}"), Some(false))],
    };
    let l = &v["limits"];
    limits.push(format!("s3: fsync'd write {:.0} MB/s, loopback {:.0} MB/s", f(l, "disk_write_mbps"), f(l, "loopback_mbps")));
    let rows = v["rows"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r["system"] == "strata") {
        let Some(m) = rows.iter().find(|m| m["system"] == "minio" && m["op"] == r["op"] && m["size"] == r["size"] && m["conc"] == r["conc"]) else { continue };
        let op = r["op"].as_str().unwrap_or("?");
        let floor = if op == "PUT" { 2.0 } else { 1.2 };
        let ratio = f(r, "objects_per_s") / f(m, "objects_per_s").max(1e-9);
        out.push(verdict(
            "s3",
            format!("{op} {} x{} >= {floor}x MinIO", crate::size::format_size(r["size"].as_u64().unwrap_or(0)), r["conc"]),
            format!("{:.0} against {:.0} objects/s: {ratio:.2}x", f(r, "objects_per_s"), f(m, "objects_per_s")),
            Some(ratio >= floor),
        ));
    }
    // SSE-S3's cost, reported over Strata's own unencrypted rows (MinIO
    // without a KMS has no SSE-S3 to compare with).
    for r in rows.iter().filter(|r| r["system"] == "sse-s3") {
        let Some(plain) = rows.iter().find(|m| m["system"] == "strata" && m["op"] == r["op"] && m["size"] == r["size"] && m["conc"] == r["conc"]) else {
            continue;
        };
        out.push(report(
            "s3",
            format!("SSE-S3 {} {} x{} over unencrypted", r["op"].as_str().unwrap_or("?"), crate::size::format_size(r["size"].as_u64().unwrap_or(0)), r["conc"]),
            format!(
                "{:.0} against {:.0} objects/s: {:.2}x",
                f(r, "objects_per_s"),
                f(plain, "objects_per_s"),
                f(r, "objects_per_s") / f(plain, "objects_per_s").max(1e-9)
            ),
        ));
    }
    let put4 = rows.iter().find(|r| r["system"] == "strata" && r["op"] == "PUT" && r["size"].as_u64() == Some(4 << 10) && r["conc"].as_u64() == Some(16));
    out.push(verdict(
        "s3",
        "durable 4KiB PUT x16 >= 25000 objects/s (group commit)",
        put4.map_or("-".to_string(), |r| format!("{:.0} objects/s", f(r, "objects_per_s"))),
        put4.map(|r| f(r, "objects_per_s") >= 25_000.0),
    ));
    out
}

/// `strata bench-cluster`: issue 21's floors (replicated writes at 80% of
/// one node's rate over the replica count; catch-up at 80% of the disk).
fn cluster(a: &BenchAllArgs, limits: &mut Vec<String>) -> Vec<Verdict> {
    let secs = if a.quick { "2" } else { "5" };
    let v = match run_json(&["bench-cluster", "--data-dir", &dir(&a.data_dir, "cluster"), "--seconds", secs]) {
        Ok(v) => v,
        Err(e) => return vec![verdict("cluster", "strata bench-cluster", format!("error: {e:#}"), Some(false))],
    };
    limits.push(format!("cluster: fsync'd write {:.0} MB/s, loopback {:.0} MB/s", f(&v, "disk_write_mbps"), f(&v, "loopback_mbps")));
    let rows = v["rows"].as_array().cloned().unwrap_or_default();
    let one = rows.iter().find(|r| r["nodes"].as_u64() == Some(1)).map(|r| f(r, "put_mbps"));
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r["nodes"].as_u64().unwrap_or(0) > 1) {
        let replicas = r["replicas"].as_u64().unwrap_or(1).max(1) as f64;
        let floor = one.map(|o| 0.8 * o / replicas);
        out.push(verdict(
            "cluster",
            format!("{} nodes x{replicas} PUT >= 80% of one node's / {replicas}", r["nodes"]),
            floor.map_or("-".to_string(), |fl| format!("{:.0} MB/s, floor {fl:.0} MB/s ({:.2})", f(r, "put_mbps"), f(r, "put_mbps") / (fl / 0.8))),
            floor.map(|fl| f(r, "put_mbps") >= fl),
        ));
    }
    let c = &v["catch_up"];
    out.push(verdict(
        "cluster",
        "catch-up of a wiped node >= 80% of fsync'd disk write",
        format!(
            "{:.0} MB/s, {:.2} of {:.0} MB/s ({:.2} of the disk copying to itself)",
            f(c, "mbps"),
            f(c, "ratio_to_disk"),
            f(c, "disk_write_mbps"),
            f(c, "ratio_to_disk_copy")
        ),
        c.get("ratio_to_disk").map(|_| f(c, "ratio_to_disk") >= 0.8),
    ));
    out
}

/// The verdicts a benchmark prints itself (`{"verdicts": [{floor,
/// measured, pass}]}`), and its limits.
fn own_verdicts(bench: &'static str, args: &[&str], limits: &mut Vec<String>) -> Vec<Verdict> {
    let v = match run_json(args) {
        Ok(v) => v,
        Err(e) => return vec![verdict(bench, format!("strata {}", args[0]), format!("error: {e:#}"), Some(false))],
    };
    let mut lim = Vec::new();
    for (key, what) in [("disk_write_mbps", "fsync'd write"), ("loopback_mbps", "loopback")] {
        if v.get(key).is_some() {
            lim.push(format!("{what} {:.0} MB/s", f(&v, key)));
        }
    }
    if !lim.is_empty() {
        limits.push(format!("{bench}: {}", lim.join(", ")));
    }
    v["verdicts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| verdict(bench, x["floor"].as_str().unwrap_or("?").to_string(), x["measured"].as_str().unwrap_or("?").to_string(), x["pass"].as_bool()))
        .collect()
}

/// `strata bench-rw` against Redis and etcd, `strata bench-tract`
/// (striped blobs: random against sequential tracts, recovery by node
/// count) and `strata bench-txn` (Týr's MonALISA workload against blobs
/// under etcd locks).
fn rw_and_tracts(a: &BenchAllArgs, limits: &mut Vec<String>) -> Vec<Verdict> {
    let secs = if a.quick { "2" } else { "5" };
    let mut out = own_verdicts("rw", &["bench-rw", "--data-dir", &dir(&a.data_dir, "rw"), "--seconds", secs], limits);
    let tract_dir = dir(&a.data_dir, "tract");
    let mut args = vec!["bench-tract", "--data-dir", &tract_dir];
    if a.quick {
        args.extend(["--nodes", "3,6", "--blob", "64MiB", "--per-node", "64MiB,192MiB"]);
    }
    out.extend(own_verdicts("tract", &args, limits));
    let txn_dir = dir(&a.data_dir, "txn");
    let mut args = vec!["bench-txn", "--data-dir", &txn_dir, "--seconds", secs];
    if a.quick {
        args.extend(["--clients", "1,16"]);
    }
    out.extend(own_verdicts("txn", &args, limits));
    out
}

/// `strata bench-kv` against SQLite: the key-value issue's floors.
fn kv(a: &BenchAllArgs) -> Vec<Verdict> {
    let records = if a.quick { "1000000" } else { "1000000,10000000" };
    let v = match run_json(&["bench-kv", "--data-dir", &dir(&a.data_dir, "kv"), "--records", records]) {
        Ok(v) => v,
        Err(e) => return vec![verdict("kv", "strata bench-kv", format!("error: {e:#}"), Some(false))],
    };
    let rows = v.as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r["system"] != "sqlite") {
        let n = r["records"].as_u64().unwrap_or(0);
        let Some(sql) = rows.iter().find(|s| s["system"] == "sqlite" && s["records"].as_u64() == Some(n)) else { continue };
        out.push(report(
            "kv",
            format!("{n} records: build rate against SQLite's inserts"),
            format!("{:.0} against {:.0} MB/s: {:.2}x", f(r, "build_mb_s"), f(sql, "build_mb_s"), f(r, "build_mb_s") / f(sql, "build_mb_s").max(1e-9)),
        ));
        let p50 = f(&r["uniform"], "p50_us");
        out.push(verdict("kv", format!("{n} records: in-process lookup p50 <= 5 us"), format!("{p50:.2} us"), Some(p50 <= 5.0)));
        let http = f(r, "http_p50_us_at_1000");
        out.push(verdict("kv", format!("{n} records: HTTP p50 <= 200 us at 1000/s"), format!("{http:.0} us"), Some(http <= 200.0)));
        let (mine, theirs) = (f(&r["uniform"], "ops_per_s"), f(&sql["uniform"], "ops_per_s"));
        out.push(verdict(
            "kv",
            format!("{n} records: in-process lookups >= 2x SQLite"),
            format!("{mine:.0} against {theirs:.0}/s: {:.2}x", mine / theirs.max(1e-9)),
            Some(mine >= 2.0 * theirs),
        ));
        let (mine, theirs) = (f(r, "http_ops_per_s"), f(sql, "http_ops_per_s"));
        out.push(verdict(
            "kv",
            format!("{n} records: HTTP lookups >= 2x SQLite"),
            format!("{mine:.0} against {theirs:.0}/s: {:.2}x", mine / theirs.max(1e-9)),
            Some(mine >= 2.0 * theirs),
        ));
    }
    out
}

/// `strata bench-kv-push`: the key-value issue asks for its figures
/// (push rate as a ratio to the disk, swap time, Spark against the Rust
/// builder) without floors; the one verdict is that Spark's output is
/// identical to the Rust builder's.
fn kv_push(a: &BenchAllArgs, limits: &mut Vec<String>) -> Vec<Verdict> {
    let records = if a.quick { "200000" } else { "1000000" };
    match run_json(&["bench-kv-push", "--data-dir", &dir(&a.data_dir, "kv-push"), "--records", records]) {
        Ok(v) => kv_push_verdicts(&v, limits),
        Err(e) => vec![verdict("kv push", "strata bench-kv-push", format!("error: {e:#}"), Some(false))],
    }
}

/// The rows of `strata bench-kv-push --json`'s output `v`.
fn kv_push_verdicts(v: &Value, limits: &mut Vec<String>) -> Vec<Verdict> {
    let mut out = Vec::new();
    let disk = f(v, "disk_write_mbps");
    limits.push(format!("kv push: disk fsync'd write {disk:.0} MB/s (1 stream)"));
    for p in v["pushes"].as_array().into_iter().flatten() {
        let nodes = p["nodes"].as_array().cloned().unwrap_or_default();
        let rates: Vec<String> = nodes.iter().map(|n| format!("{:.0}", f(n, "mb_per_s"))).collect();
        let ratios: Vec<f64> = nodes.iter().map(|n| f(n, "ratio_to_disk")).collect();
        let (lo, hi) = (ratios.iter().copied().fold(f64::INFINITY, f64::min), ratios.iter().copied().fold(0.0, f64::max));
        out.push(report(
            "kv push",
            format!(
                "{} records, push {}: MB/s per node, ratio to the disk's fsync'd write ({disk:.0} MB/s)",
                v["records"],
                p["version"].as_str().unwrap_or("?")
            ),
            format!("{} MB/s ({lo:.2}-{hi:.2})", rates.join(" / ")),
        ));
        out.push(report("kv push", format!("push {}: swap of every node", p["version"].as_str().unwrap_or("?")), format!("{:.1} ms", f(p, "swap_ms"))));
    }
    let rust = f(v, "rust_build_s");
    match v["spark_build_s"].as_f64() {
        Some(spark) => {
            out.push(report("kv push", "build time, Spark (local[2]) against the Rust builder", format!("{spark:.1} s against {rust:.1} s")));
            out.push(verdict(
                "kv push",
                "Spark's store is byte for byte the Rust builder's",
                format!("{}", v["spark_output_identical"]),
                v["spark_output_identical"].as_bool(),
            ));
        }
        None => out.push(verdict("kv push", "Spark's store is byte for byte the Rust builder's", format!("no PySpark (Rust build {rust:.1} s)"), None)),
    }
    out
}

pub async fn run(a: BenchAllArgs) -> Result<()> {
    std::fs::create_dir_all(&a.data_dir).with_context(|| format!("creating {}", a.data_dir.display()))?;
    let mut limits = Vec::new();
    let a2 = &a;
    let verdicts = tokio::task::block_in_place(|| {
        let mut v = native(a2, &mut limits);
        v.extend(s3(a2, &mut limits));
        v.extend(cluster(a2, &mut limits));
        v.extend(kv(a2));
        v.extend(kv_push(a2, &mut limits));
        v.extend(rw_and_tracts(a2, &mut limits));
        v
    });
    let _ = std::fs::remove_dir_all(&a.data_dir);
    let failed = verdicts.iter().filter(|v| v.pass == Some(false)).count();
    if a.json {
        println!("{}", serde_json::json!({ "limits": limits, "verdicts": verdicts }));
    } else {
        println!("limits measured in this run (each benchmark measures its own, right before its rows):");
        for l in &limits {
            println!("  {l}");
        }
        println!();
        println!("| bench | floor | measured | verdict |");
        println!("|---|---|---|---|");
        for v in &verdicts {
            let verdict = match (v.pass, v.reported) {
                (Some(true), _) => "PASS",
                (Some(false), _) => "FAIL",
                (None, true) => "reported",
                (None, false) => "not measured",
            };
            println!("| {} | {} | {} | {verdict} |", v.bench, v.floor, v.measured);
        }
        println!();
        let judged = verdicts.iter().filter(|v| !v.reported).count();
        println!(
            "{judged} floors: {} pass, {failed} fail, {} not measured; {} figures reported without a floor",
            verdicts.iter().filter(|v| v.pass == Some(true)).count(),
            verdicts.iter().filter(|v| v.pass.is_none() && !v.reported).count(),
            verdicts.len() - judged
        );
    }
    if failed > 0 {
        bail!("{failed} floor(s) failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn push_output(spark: Value, identical: Value) -> Value {
        let node = |n: u64, rate: f64| json!({ "node": n, "bytes": 90_000_000u64, "mb_per_s": rate, "ratio_to_disk": rate / 1000.0 });
        json!({
            "records": 1000, "input_mb": 0.1, "rust_build_s": 1.5, "spark_build_s": spark, "spark_output_identical": identical,
            "disk_write_mbps": 1000.0,
            "pushes": [
                { "version": "v1", "swap_ms": 4.2, "nodes": [node(1, 150.0), node(2, 300.0)] },
                { "version": "v2", "swap_ms": 3.1, "nodes": [node(1, 200.0), node(2, 250.0)] },
            ],
        })
    }

    #[test]
    fn kv_push_rows_report_its_figures_and_judge_only_the_spark_output() {
        let mut limits = Vec::new();
        let rows = kv_push_verdicts(&push_output(json!(30.0), json!(true)), &mut limits);
        assert_eq!(limits, vec!["kv push: disk fsync'd write 1000 MB/s (1 stream)".to_string()]);
        assert_eq!(rows.iter().filter(|r| r.reported).count(), 5, "two pushes x (rate, swap) and the build times");
        assert!(rows[0].measured.contains("150 / 300 MB/s (0.15-0.30)"), "{}", rows[0].measured);
        assert_eq!(rows[1].measured, "4.2 ms");
        let judged: Vec<_> = rows.iter().filter(|r| !r.reported).collect();
        assert_eq!(judged.len(), 1);
        assert_eq!(judged[0].pass, Some(true));

        // Spark's store differs: a failure, never a report.
        let rows = kv_push_verdicts(&push_output(json!(30.0), json!(false)), &mut Vec::new());
        assert_eq!(rows.iter().find(|r| !r.reported).map(|r| r.pass), Some(Some(false)));
        // No PySpark: not measured, and nothing passes.
        let rows = kv_push_verdicts(&push_output(Value::Null, Value::Null), &mut Vec::new());
        assert!(rows.iter().all(|r| r.pass.is_none()));
        assert!(rows.iter().any(|r| !r.reported && r.measured.starts_with("no PySpark")));
    }
}
