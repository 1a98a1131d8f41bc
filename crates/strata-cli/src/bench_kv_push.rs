//! `strata bench-kv-push`: read-only stores on a cluster, in one run.
//!
//! - Build time of the same CSV input, written for the cluster's ring, by
//!   the Rust builder and by the Spark job in local mode (if PySpark is
//!   installed); the outputs are compared byte for byte.
//! - Push to `--nodes` local node processes, all on this machine and its
//!   one disk: each node's fetch rate, as a ratio to the disk's fsync'd
//!   sequential write bandwidth measured in the same run.
//! - Swap time: the coordinator's wall time to swap every node.

use crate::bench_cluster::{Nodes, command};
use crate::commands::Common;
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct BenchKvPushArgs {
    /// Records in the data set.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Node processes.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Replicas of every key.
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// PySpark's virtual environment (`scripts/test.sh` makes target/pyenv);
    /// without one the Spark row is skipped.
    #[arg(long, default_value = "target/pyenv")]
    pub pyenv: PathBuf,
    /// Working directory (removed afterwards).
    #[arg(long, default_value = "./strata-bench-kv-push")]
    pub data_dir: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

fn write_input(path: &Path, n: u64, size: usize, version: u64) -> Result<u64> {
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    writeln!(w, "key,value")?;
    let mut bytes = 0u64;
    let pad = "x".repeat(size.saturating_sub(24));
    for i in 0..n {
        let v = format!("v{version}-{i:012}-{pad}");
        let k = format!("key-{i:012}");
        bytes += (k.len() + v.len()) as u64;
        writeln!(w, "{k},{v}")?;
    }
    w.flush()?;
    Ok(bytes)
}

fn rust_build(ring: &Path, input: &Path, out: &Path) -> Result<f64> {
    let r = strata_kv::RingFile::read(ring)?;
    let t = Instant::now();
    let mut b = strata_kv::Builder::for_ring(&r.store, out, strata_kv::Duplicates::Fail, strata_kv::build::DEFAULT_MEMORY, r.table)?;
    let mut batch = Vec::with_capacity(strata_kv::build::BATCH);
    for rec in strata_kv::input::read(input, strata_kv::input::InputFormat::Csv, "key", "value")? {
        batch.push(rec?);
        if batch.len() == strata_kv::build::BATCH {
            b.add_batch(std::mem::replace(&mut batch, Vec::with_capacity(strata_kv::build::BATCH)))?;
        }
    }
    b.add_batch(batch)?;
    b.finish()?;
    Ok(t.elapsed().as_secs_f64())
}

fn spark_build(pyenv: &Path, ring: &Path, input: &Path, out: &Path) -> Result<Option<f64>> {
    let submit = pyenv.join("bin/spark-submit");
    if !submit.exists() {
        return Ok(None);
    }
    let python = pyenv.join("bin/python");
    let home = std::process::Command::new(&python).args(["-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"]).output()?;
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/spark/build_store.py");
    let t = Instant::now();
    let out = std::process::Command::new(submit)
        .args(["--master", "local[2]", "--driver-memory", "4g", "--conf", "spark.ui.enabled=false"])
        .arg(job)
        .args(["--store", "bench", "--ring"])
        .arg(ring)
        .arg("--input")
        .arg(input)
        .arg("--out")
        .arg(out)
        .env("SPARK_HOME", String::from_utf8_lossy(&home.stdout).trim())
        .env("PYSPARK_PYTHON", &python)
        .output()?;
    if !out.status.success() {
        bail!("the Spark build failed: {}", String::from_utf8_lossy(&out.stderr).lines().rev().take(20).collect::<Vec<_>>().join("\n"));
    }
    Ok(Some(t.elapsed().as_secs_f64()))
}

fn same_tree(a: &Path, b: &Path) -> Result<bool> {
    let mut names: Vec<PathBuf> = Vec::new();
    for d in std::fs::read_dir(a)? {
        let d = d?.path();
        for f in std::fs::read_dir(&d)? {
            names.push(f?.path().strip_prefix(a)?.to_path_buf());
        }
    }
    for n in &names {
        if std::fs::read(a.join(n))? != std::fs::read(b.join(n)).unwrap_or_default() {
            return Ok(false);
        }
    }
    let count_b: usize = std::fs::read_dir(b)?.map(|d| d.map(|d| std::fs::read_dir(d.path()).map_or(0, |r| r.count()))).sum::<std::io::Result<usize>>()?;
    Ok(count_b == names.len())
}

pub async fn run(a: BenchKvPushArgs) -> Result<()> {
    let root = std::path::absolute(&a.data_dir)?;
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let nodes = Nodes::start(&root, a.nodes, 0).await?;
    let c0 = nodes.client(0);
    command(&c0, json!({ "KvInitRing": { "partitions": 6 * a.nodes as u32 } })).await?;
    command(&c0, json!({ "KvCreateStore": { "name": "bench", "spec": { "chunks": 2, "replication": { "Nodes": a.replicas }, "required_reads": 1 } } })).await?;
    let server = c0.base().to_string();
    // The node's map catches up with the metadata service in a moment.
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    let map = loop {
        let m = crate::kv_ring::fetch_map(&c0).await?;
        if m.kv.stores.contains_key("bench") {
            break m;
        }
        if Instant::now() > deadline {
            bail!("the store never appeared in node 1's map");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let ring = root.join("ring.json");
    crate::kv_ring::ring_file(&map, "bench")?.write(&ring)?;

    let input = root.join("input.csv");
    let input_bytes = write_input(&input, a.records, a.value_size, 1)?;
    let rust_s = {
        let (ring, input, out) = (ring.clone(), input.clone(), root.join("rust"));
        tokio::task::spawn_blocking(move || rust_build(&ring, &input, &out)).await??
    };
    let spark_s = {
        let (py, ring, input, out) = (a.pyenv.clone(), ring.clone(), input.clone(), root.join("spark"));
        tokio::task::spawn_blocking(move || spark_build(&py, &ring, &input, &out)).await??
    };
    let identical = match spark_s {
        Some(_) => Some(same_tree(&root.join("rust"), &root.join("spark"))?),
        None => None,
    };
    let disk = {
        let d = root.join("probe");
        std::fs::create_dir_all(&d)?;
        tokio::task::spawn_blocking(move || crate::bench::disk_write_limit(&d, 3.0, 1)).await??
    };
    let common = Common { server: server.clone(), json: true, auth: nodes.auth() };
    let push = |from: &Path| crate::kv_ring::PushArgs {
        store: "bench".into(),
        from: from.display().to_string(),
        version: None,
        throttle_mb_s: None,
        common: Common { server: common.server.clone(), json: true, auth: common.auth.clone() },
    };
    let first = crate::kv_ring::push_summary(&push(&root.join("rust"))).await?;
    // A second version, swapped while the first is live.
    let second = crate::kv_ring::push_summary(&push(&root.join("rust"))).await?;
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);

    let mb = input_bytes as f64 / 1e6;
    if a.json {
        let pushes: Vec<_> = [("v1", &first), ("v2", &second)]
            .into_iter()
            .map(|(label, s)| {
                let nodes: Vec<_> = s["node_mb_per_s"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|n| {
                        let rate = n["mb_per_s"].as_f64().unwrap_or(0.0);
                        json!({ "node": n["node"], "bytes": n["bytes"], "mb_per_s": rate, "ratio_to_disk": rate / disk.max(1e-9) })
                    })
                    .collect();
                json!({ "version": label, "swap_ms": s["swap_ms"], "nodes": nodes })
            })
            .collect();
        let out = json!({
            "records": a.records,
            "input_mb": mb,
            "rust_build_s": rust_s,
            "spark_build_s": spark_s,
            "spark_output_identical": identical,
            "disk_write_mbps": disk,
            "pushes": pushes,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "{} records of {}-byte values ({:.0} MB of keys and values), ring of {} partitions, {} replicas",
        a.records,
        a.value_size,
        mb,
        6 * a.nodes,
        a.replicas
    );
    println!();
    println!("| builder | seconds | input MB/s | output identical |");
    println!("|---|---|---|---|");
    println!("| strata kv build --ring (Rust) | {rust_s:.1} | {:.0} | - |", mb / rust_s);
    match (spark_s, identical) {
        (Some(s), Some(same)) => println!("| tools/spark/build_store.py (Spark local[2]) | {s:.1} | {:.0} | {} |", mb / s, if same { "yes" } else { "NO" }),
        _ => println!("| tools/spark/build_store.py | skipped: no PySpark in {} | | |", a.pyenv.display()),
    }
    println!();
    println!("disk limit (fsync'd sequential write, 1 stream, same run): {disk:.0} MB/s");
    println!();
    println!("| push | node | MB fetched | MB/s | ratio to disk | swap ms (all nodes) |");
    println!("|---|---|---|---|---|---|");
    for (label, s) in [("v1 (first)", &first), ("v2 (over v1)", &second)] {
        for n in s["node_mb_per_s"].as_array().into_iter().flatten() {
            let rate = n["mb_per_s"].as_f64().unwrap_or(0.0);
            println!(
                "| {label} | {} | {:.1} | {:.0} | {:.2} | {:.1} |",
                n["node"],
                n["bytes"].as_f64().unwrap_or(0.0) / 1e6,
                rate,
                rate / disk.max(1e-9),
                s["swap_ms"].as_f64().unwrap_or(0.0)
            );
        }
    }
    Ok(())
}
