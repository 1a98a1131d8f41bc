//! `strata`: the server, the client commands and the benchmark in one binary.

mod bench;
mod bench_cluster;
mod bench_kv;
mod bench_kv_push;
mod bench_s3;
mod cluster;
mod commands;
mod fault;
mod kv;
mod kv_ring;
mod s3;
mod server;
mod sim;
mod size;

use clap::{Parser, Subcommand};

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
    /// S3 access keys: create, list, delete, grant.
    #[command(subcommand)]
    Key(s3::KeyCmd),
    /// S3 buckets: list, make public.
    #[command(subcommand)]
    Bucket(s3::BucketCmd),
    /// Measures PUT/GET over loopback against this machine's disk and network limits (`bench s3`: the S3 API against MinIO).
    Bench(bench::BenchArgs),
    /// Measures a cluster of 1, 3 and 6 node processes on this machine: throughput, replication lag, catch-up.
    BenchCluster(bench_cluster::BenchClusterArgs),
    /// Measures read-only stores against SQLite on the same data: build, lookups in-process and over HTTP.
    BenchKv(bench_kv::BenchKvArgs),
    /// Read-only stores on a cluster: Rust vs Spark build time, push rate per node against the disk, swap time.
    BenchKvPush(bench_kv_push::BenchKvPushArgs),
    /// Runs a placement experiment of the papers (CSV, SVG and a summary).
    Sim(sim::SimArgs),
    /// The fault-injection suite: kill -9, flipped bytes, torn writes and full disks against a real server, every acknowledged blob checked.
    Fault(fault::FaultArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
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
            Cmd::Partitions(a) => commands::partitions(a).await,
            Cmd::Compact(a) => commands::compact(a).await,
            Cmd::Scrub(c) => commands::scrub(c).await,
            Cmd::Sweep(c) => commands::sweep(c).await,
            Cmd::Cluster(c) => cluster::cluster(c).await,
            Cmd::Node(c) => cluster::node(c).await,
            Cmd::Disk(c) => cluster::disk(c).await,
            Cmd::Partition(c) => cluster::partition(c).await,
            Cmd::Kv(c) => kv::run(c).await,
            Cmd::Key(c) => s3::key(c).await,
            Cmd::Bucket(c) => s3::bucket(c).await,
            Cmd::Bench(a) => bench::run(a).await,
            Cmd::BenchCluster(a) => bench_cluster::run(a).await,
            Cmd::BenchKv(a) => bench_kv::run(a).await,
            Cmd::BenchKvPush(a) => bench_kv_push::run(a).await,
            Cmd::Sim(a) => tokio::task::spawn_blocking(move || sim::run(a)).await?,
            Cmd::Fault(a) => fault::run(a).await,
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
