//! `strata`: the server, the client commands and the benchmark in one binary.

mod bench;
mod bench_all;
mod bench_cluster;
mod bench_console;
mod bench_events;
mod bench_kv;
mod bench_kv_push;
mod bench_recovery;
mod bench_rw;
mod bench_s3;
mod bench_tract;
mod bench_txn;
mod cluster;
mod commands;
mod events;
mod fault;
mod identity;
mod kv;
mod kv_ring;
mod kv_rw;
mod s3;
mod server;
mod sim;
mod size;
mod tract;
mod txn;

use clap::{Parser, Subcommand};

/// jemalloc, not glibc's malloc: under many small allocations made and
/// freed across threads (requests, change capture's events) glibc's arenas
/// spent a measured share of a node's CPU consolidating (docs/architecture.md,
/// "The memory allocator"). `--no-default-features` builds without it.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "strata", version, about = "Strata: a distributed blob store")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs a Strata node (with no flags: a single node with data in ./strata-data on 127.0.0.1:8080).
    Server(Box<server::ServerArgs>),
    /// Stores a file (or stdin with `-`) and prints its id.
    Put(commands::PutArgs),
    /// Fetches a blob to a file or stdout.
    Get(commands::GetArgs),
    /// Shows a blob's properties and user metadata.
    Info(commands::IdArgs),
    /// Deletes a blob.
    Delete(commands::IdArgs),
    /// Sets a blob's time to live (seconds from now, or `never`).
    Ttl(commands::TtlArgs),
    /// Prints a URL that GETs a blob without credentials until it expires (SigV4 presigned).
    Presign(commands::PresignArgs),
    /// Shows the partitions of a node.
    Partitions(commands::Common),
    /// Runs a compaction pass on a node now.
    Compact(commands::Common),
    /// The scrubber: every record read back and checked, replicas compared and repaired.
    #[command(subcommand)]
    Scrub(commands::ScrubCmd),
    /// The orphan sweep: chunks and S3 blobs nothing points at, freed after a grace period.
    #[command(subcommand)]
    Sweep(commands::SweepCmd),
    /// Cluster administration: init, status.
    #[command(subcommand)]
    Cluster(cluster::ClusterCmd),
    /// Registers nodes in the cluster map.
    #[command(subcommand)]
    Node(cluster::NodeCmd),
    /// Adds disks to nodes.
    #[command(subcommand)]
    Disk(cluster::DiskCmd),
    /// Creates partitions.
    #[command(subcommand)]
    Partition(cluster::PartitionCmd),
    /// Read-only key-value stores: build versions offline.
    #[command(subcommand)]
    Kv(kv::KvCmd),
    /// Striped blobs (FDS): the tract locator table; files written to and read from tracts.
    #[command(subcommand)]
    Tract(tract::TractCmd),
    /// Týr transactions on striped blobs: a JSON transaction, reads, appends, atomic adds.
    #[command(subcommand)]
    Txn(txn::TxnCmd),
    /// Access keys (every port's identities): create, list, delete, grant, expire.
    #[command(subcommand)]
    Key(identity::KeyCmd),
    /// Containers of native blobs (Ambry's accounts and containers): create, list.
    #[command(subcommand)]
    Container(identity::ContainerCmd),
    /// The node's log of administrative actions (who, what, when, result).
    Audit(identity::AuditArgs),
    /// S3 buckets: list, make public.
    #[command(subcommand)]
    Bucket(s3::BucketCmd),
    /// The key store: keys for SSE-KMS (SSE-S3 uses its own, made on first use).
    #[command(subcommand)]
    Kms(s3::KmsCmd),
    /// Change capture: event targets (Kafka, webhooks, files) and their status.
    #[command(subcommand)]
    Events(events::EventsCmd),
    /// Measures PUT/GET over loopback against this machine's disk and network limits (`bench s3`: the S3 API against MinIO).
    Bench(bench::BenchArgs),
    /// Measures a cluster of 1, 3 and 6 node processes on this machine: throughput, replication lag, catch-up.
    BenchCluster(bench_cluster::BenchClusterArgs),
    /// Read-write store puts and gets on 1 and 3 nodes against Redis (appendfsync always) and a 3-member etcd.
    BenchRw(bench_rw::BenchRwArgs),
    /// Striped blobs (FDS) on 3, 6 and 9 nodes: one client's sequential and random tract throughput, and recovery of a dead node's rows.
    BenchTract(bench_tract::BenchTractArgs),
    /// Týr's MonALISA workload: transactions with atomic adds, with read-update-write, and blobs under etcd locks, at 1 to 64 clients; reader/writer isolation.
    BenchTxn(bench_txn::BenchTxnArgs),
    /// Re-replication of a dead node at several cluster sizes against the
    /// disk's write limit, and disk spread before and after a rebalance.
    BenchRecovery(bench_recovery::BenchRecoveryArgs),
    /// Measures read-only stores against SQLite on the same data: build, lookups in-process and over HTTP.
    BenchKv(bench_kv::BenchKvArgs),
    /// Read-only stores on a cluster: Rust vs Spark build time, push rate per node against the disk, swap time.
    BenchKvPush(bench_kv_push::BenchKvPushArgs),
    /// Runs a placement experiment of the papers (CSV, SVG and a summary).
    Sim(sim::SimArgs),
    /// The fault-injection suite: kill -9, flipped bytes, torn writes and full disks against a real server, every acknowledged blob checked.
    Fault(fault::FaultArgs),
    /// Fuzzes every parser of untrusted bytes (records, index files, frames, RPC messages, KV files, HTTP heads, SigV4 scopes, ...).
    Fuzz(FuzzArgs),
}

/// Keeps freed buffers in the allocator for the next request. glibc's
/// defaults hand every buffer over 128 KiB (a request body, a chunk, a TLS
/// read buffer) back to the kernel when it is freed and fault it in again,
/// page by page, for the next one: in a 3-replica cluster that was 25 page
/// faults per 256 KiB put. Buffers up to 32 MiB now come from the heap, and
/// a heap gives memory back once 64 MiB of it is free at its top.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_allocator() {
    // SAFETY: mallopt only sets allocator parameters; called first in main,
    // before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_allocator() {}

fn main() -> std::process::ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    // A command whose output is piped into `head` ends quietly when the pipe
    // closes, as Unix tools do: printing to a closed stdout panics in
    // println!, and the hook turns that one panic into death by SIGPIPE.
    // SIGPIPE itself stays ignored (Rust's default), so a socket whose peer
    // hung up mid-write (hyper writes with writev, which has no
    // MSG_NOSIGNAL) is an error the command reports, never a silent death.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info.payload().downcast_ref::<String>().map(String::as_str).or_else(|| info.payload().downcast_ref::<&str>().copied()).unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            // SAFETY: restoring the default action of a signal and raising
            // it on this process; no handler runs.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                libc::raise(libc::SIGPIPE);
            }
        }
        default_hook(info);
    }));
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        match cli.cmd {
            Cmd::Server(a) => server::run(*a).await,
            Cmd::Put(a) => commands::put(a).await,
            Cmd::Get(a) => commands::get(a).await,
            Cmd::Info(a) => commands::info(a).await,
            Cmd::Delete(a) => commands::delete(a).await,
            Cmd::Ttl(a) => commands::ttl(a).await,
            Cmd::Presign(a) => commands::presign(a).await,
            Cmd::Partitions(a) => commands::partitions(a).await,
            Cmd::Compact(a) => commands::compact(a).await,
            Cmd::Scrub(c) => commands::scrub(c).await,
            Cmd::Sweep(c) => commands::sweep(c).await,
            Cmd::Cluster(c) => cluster::cluster(c).await,
            Cmd::Node(c) => cluster::node(c).await,
            Cmd::Disk(c) => cluster::disk(c).await,
            Cmd::Partition(c) => cluster::partition(c).await,
            Cmd::Kv(c) => kv::run(c).await,
            Cmd::Tract(c) => tract::run(c).await,
            Cmd::Txn(c) => txn::run(c).await,
            Cmd::Key(c) => identity::key(c).await,
            Cmd::Container(c) => identity::container(c).await,
            Cmd::Audit(a) => identity::audit(a).await,
            Cmd::Bucket(c) => s3::bucket(c).await,
            Cmd::Kms(c) => s3::kms(c).await,
            Cmd::Events(c) => events::events(c).await,
            Cmd::Bench(a) => bench::run(a).await,
            Cmd::BenchCluster(a) => bench_cluster::run(a).await,
            Cmd::BenchRw(a) => bench_rw::run(a).await,
            Cmd::BenchTract(a) => bench_tract::run(a).await,
            Cmd::BenchTxn(a) => bench_txn::run(a).await,
            Cmd::BenchRecovery(a) => bench_recovery::run(a).await,
            Cmd::BenchKv(a) => bench_kv::run(a).await,
            Cmd::BenchKvPush(a) => bench_kv_push::run(a).await,
            Cmd::Sim(a) => tokio::task::spawn_blocking(move || sim::run(a)).await?,
            Cmd::Fault(a) => fault::run(a).await,
            Cmd::Fuzz(a) => fuzz(a),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[derive(clap::Args, Debug)]
struct FuzzArgs {
    /// Only this target (default: all but the deliberately broken one).
    #[arg(long)]
    target: Option<String>,
    /// Seconds per target.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seed of the mutations (default: from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Where an input that panics is written.
    #[arg(long, default_value = "fuzz-crashes")]
    crashes: std::path::PathBuf,
    /// Runs `--target` once over this file's bytes, panics not caught (to
    /// see where a crash comes from).
    #[arg(long, requires = "target")]
    replay: Option<std::path::PathBuf>,
}

/// `strata fuzz`: the long mode of the fuzz targets the test command runs
/// briefly. Exits non-zero if any input panics, after writing it to
/// `--crashes`.
fn fuzz(a: FuzzArgs) -> anyhow::Result<()> {
    let targets: Vec<_> = match &a.target {
        Some(name) => vec![strata_fuzz::target(name).ok_or_else(|| {
            let names: Vec<_> = strata_fuzz::targets().iter().map(|t| t.name).collect();
            anyhow::anyhow!("no fuzz target {name:?}; the targets are {}", names.join(", "))
        })?],
        None => strata_fuzz::targets().into_iter().filter(|t| t.name != "broken").collect(),
    };
    if let (Some(path), Some(t)) = (&a.replay, targets.first()) {
        let input = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        (t.run)(&input);
        println!("{}: {} bytes ran without a panic", t.name, input.len());
        return Ok(());
    }
    #[allow(clippy::disallowed_methods)]
    let seed = a.seed.unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64));
    println!("fuzzing {} targets for {} s each, seed {seed}", targets.len(), a.seconds);
    // Panics are caught and reported per input; the default hook would
    // print each one.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut crashed = 0;
    println!("{:<16} {:>12}  result", "target", "inputs");
    for t in &targets {
        let r = strata_fuzz::fuzz(t, strata_fuzz::Budget::Time(std::time::Duration::from_secs(a.seconds)), seed);
        match r.crash {
            None => println!("{:<16} {:>12}  ok", r.target, r.inputs),
            Some((input, msg)) => {
                crashed += 1;
                std::fs::create_dir_all(&a.crashes)?;
                let path = a.crashes.join(format!("{}-{seed}.bin", r.target));
                std::fs::write(&path, &input)?;
                println!("{:<16} {:>12}  PANIC: {msg} (input in {})", r.target, r.inputs, path.display());
            }
        }
    }
    std::panic::set_hook(hook);
    if crashed > 0 {
        anyhow::bail!("{crashed} targets panicked; add each input to crates/strata-fuzz/corpus/<target>/ with the fix");
    }
    Ok(())
}
