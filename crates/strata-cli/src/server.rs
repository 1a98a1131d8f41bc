//! `strata server`: a single node with an embedded default configuration.

use crate::size::parse_size;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use strata_engine::{EngineConfig, FlushPolicy, Store};
use strata_router::{LocalView, Router, RouterConfig};
use strata_types::SystemClock;

/// Flags of `strata server`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// Directory holding the data (created if missing).
    #[arg(long, default_value = "./strata-data")]
    pub data_dir: PathBuf,
    /// Address of the HTTP API.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Partitions created on first start.
    #[arg(long, default_value_t = 4)]
    pub partitions: u64,
    /// Blobs larger than this are chunked.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub chunk_size: u64,
    /// Size of one log segment file.
    #[arg(long, default_value = "512MiB", value_parser = parse_size)]
    pub segment_size: u64,
    /// Capacity of each partition replica; read-only past 85% of it.
    #[arg(long, default_value = "64GiB", value_parser = parse_size)]
    pub replica_capacity: u64,
    /// Free space each disk keeps; below it puts are refused (deletes and
    /// compaction still use it, so a full node can free space). `auto`: a
    /// twentieth of the disk, at most 256 MiB.
    #[arg(long, default_value = "auto")]
    pub disk_reserve: String,
    /// Durability of puts: `every-batch` (fsync before ack) or `never`.
    #[arg(long, default_value = "every-batch")]
    pub flush: String,
    /// Recently written data kept in the page cache; older data is dropped
    /// from it once durable. `auto` is a sixteenth of the machine's memory,
    /// 0 leaves the page cache to the kernel.
    #[arg(long, default_value = "auto")]
    pub write_cache: String,
    /// Buffers for reading large blobs that are not in the page cache
    /// straight from disk (`O_DIRECT`), per data directory; 0 reads them
    /// through the page cache.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub cold_read_buffer: u64,
    /// Memory allocated at start through which large writes go to disk
    /// with `O_DIRECT`, and from which the blobs written last are read.
    /// Shared by the node's disks. `auto` is an eighth of the machine's
    /// memory (what a working set of large blobs needs to be read without
    /// the disk; see docs/architecture.md); 0 writes everything through
    /// the page cache.
    #[arg(long, default_value = "auto")]
    pub tail_cache: String,
    /// Bytes of upload bodies buffered at once over every put; past it,
    /// puts wait (their clients are slowed, the process does not run out
    /// of memory). `auto` is an eighth of the machine's memory.
    #[arg(long, default_value = "auto")]
    pub upload_buffer: String,
    /// Largest blob accepted.
    #[arg(long, default_value = "64GiB", value_parser = parse_size)]
    pub max_blob_size: u64,
    /// Seconds between background compaction passes.
    #[arg(long, default_value_t = 300)]
    pub compaction_interval_secs: u64,
    /// Seconds between the starts of two scheduled scrub passes (every
    /// record read back and checked; on a cluster, replicas compared and
    /// repaired); 0: only on request (`strata scrub now`).
    #[arg(long, default_value_t = 86_400)]
    pub scrub_interval_secs: u64,
    /// Bytes per second a scrub pass reads at most (0: no limit).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub scrub_rate: u64,
    /// Every this many scheduled scrub passes is deep (data checksums
    /// compared across replicas, as Ceph's weekly deep scrub).
    #[arg(long, default_value_t = 7)]
    pub scrub_deep_every: u64,
    /// Seconds between the starts of two scheduled orphan sweeps (chunks
    /// and S3 blobs nothing points at are freed); 0: only on request
    /// (`strata sweep now`). On a cluster, only the metadata leader sweeps
    /// on schedule.
    #[arg(long, default_value_t = 86_400)]
    pub sweep_interval_secs: u64,
    /// Seconds an unreferenced chunk or S3 blob is kept before the sweep
    /// frees it. A put must make its blob reachable within half of it.
    #[arg(long, default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(1..))]
    pub orphan_grace_secs: u64,
    /// Seconds a request head may take to arrive, and a connection may sit
    /// idle between requests, before the connection is closed (408 if part
    /// of a head had come).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_secs: u64,
    /// Connections the node's HTTP and S3 ports hold together. When full, a
    /// new connection evicts the oldest one still waiting for a request
    /// head, or is refused with 503. `auto`: the open-file limit (raised to
    /// its hard limit at start) less 256 for the store's files.
    #[arg(long, default_value = "auto")]
    pub max_connections: String,
    /// Cluster mode: this node's id, as `strata node add --id` registers it.
    #[arg(long, requires = "meta")]
    pub node_id: Option<u64>,
    /// Cluster mode: the metadata group, `id=host:port,...` (1, 3 or 5 members).
    #[arg(long, requires = "node_id")]
    pub meta: Option<String>,
    /// Cluster mode: the address node-to-node connections leave from.
    #[arg(long)]
    pub outbound_ip: Option<std::net::IpAddr>,
    /// Failure detection: how long a node marked down is skipped before it is probed again, ms.
    #[arg(long, default_value_t = 5000)]
    pub failure_wait_ms: u64,
    /// Cluster mode: how often the node heartbeats the metadata members, ms.
    #[arg(long, default_value_t = 1000)]
    pub heartbeat_ms: u64,
    /// Cluster mode: how long a node may miss heartbeats before the
    /// metadata leader marks it down in the map, ms.
    #[arg(long, default_value_t = 6000)]
    pub down_after_ms: u64,
    /// Cluster mode: how long a node may stay down in the map before the
    /// metadata leader re-creates its replicas on other nodes, ms (Ceph's
    /// down-out interval).
    #[arg(long, default_value_t = 600_000)]
    pub down_out_ms: u64,
    /// Cluster mode: how long a node may stay down in the map before the
    /// metadata leader re-creates its replicas of tract rows (striped
    /// blobs) on other disks, ms; FDS recovers as soon as a node is
    /// declared dead, and so does the default.
    #[arg(long, default_value_t = 0)]
    pub tract_down_out_ms: u64,
    /// Cluster mode: seconds between passes of the reclaimer of orphaned
    /// tracts (of deleted blobs, or beyond a blob's size).
    #[arg(long, default_value_t = 600)]
    pub tract_orphan_interval_secs: u64,
    /// Cluster mode: how long a transaction's intent may be held before
    /// its row's primary asks the transaction's decider what became of it
    /// (its client presumed gone), ms.
    #[arg(long, default_value_t = 5000)]
    pub txn_intent_timeout_ms: u64,
    /// Cluster mode: how long a transaction's step waits for another's
    /// lock before it aborts, ms.
    #[arg(long, default_value_t = 2000)]
    pub txn_wait_ms: u64,
    /// Cluster mode: transaction validation. Anything but `serializable`
    /// is broken on purpose, for the history checker's own tests.
    #[arg(long, default_value = "serializable")]
    pub txn_mode: strata_txn::Mode,
    /// Cluster mode: how long a transaction may read under the blob
    /// versions it took (Týr's read timeout), ms; superseded chunk versions
    /// are reclaimed once no read may still need them.
    #[arg(long, default_value_t = 300_000)]
    pub txn_read_lease_ms: u64,
    /// Cluster mode: seconds between passes of the version collector.
    #[arg(long, default_value_t = 60)]
    pub txn_gc_interval_secs: u64,
    /// Cluster mode: replica moves under way at most, cluster-wide, when
    /// the leader evacuates removed, failed or long-down nodes and disks
    /// (blob partitions; tract rows all move at once).
    #[arg(long, default_value_t = 4)]
    pub max_moves: usize,
    /// Cluster mode: where the leader re-creates a replica that must leave
    /// a node or disk: `kinesis` (Kinesis's recovery rule: the partition's
    /// hash location, one per rack, with the least recovery work under
    /// way, so many disks share the copying) or `most-room` (Ambry's
    /// greedy: the disk with the most unallocated room).
    #[arg(long, default_value = "kinesis")]
    pub recovery_placement: strata_cluster::RecoveryPlacement,
    /// Idle period of intra-zone replication, ms.
    #[arg(long, default_value_t = 100)]
    pub intra_replication_ms: u64,
    /// Idle period of inter-zone replication, ms.
    #[arg(long, default_value_t = 500)]
    pub inter_replication_ms: u64,
    /// Cluster mode: how often hints of read-write store puts are pushed to
    /// the nodes that missed them, seconds (`POST /admin/rw/hints/push`
    /// pushes at once).
    #[arg(long, default_value_t = 10)]
    pub rw_hint_interval_secs: u64,
    /// Cluster mode: how long a read-write store delete is kept before it
    /// may be reclaimed (once every replica of its key holds it), ms; hints
    /// undelivered after half of it are dropped (`POST
    /// /admin/rw/deletes/reclaim` reclaims at once).
    #[arg(long, default_value_t = strata_rwstore::DELETE_GRACE_MS)]
    pub rw_delete_grace_ms: u64,
    /// Where the S3 API listens (`off` to disable). Default: 127.0.0.1:8081 on a
    /// single node; off on a cluster node. A cluster node outside the
    /// metadata group that serves S3 follows the group's log as a learner.
    #[arg(long)]
    pub s3_listen: Option<String>,
    /// Base domain for virtual-host-style S3 requests (`bucket.DOMAIN`); repeatable.
    #[arg(long = "s3-domain", default_value = "localhost")]
    pub s3_domains: Vec<String>,
    /// Region the S3 API reports, and that signatures on both ports are scoped to.
    #[arg(long, alias = "region", default_value = "us-east-1")]
    pub s3_region: String,
    /// Authentication on the HTTP port: `required` (every request but
    /// /health signed by an access key with the right), or `off` (anyone
    /// may do anything: only to measure what authentication costs, and
    /// refused unless the port listens on loopback).
    #[arg(long, default_value = "required")]
    pub auth: String,
    /// A bearer token that may read /metrics (for Prometheus, which does
    /// not sign requests); admin keys may always.
    #[arg(long, env = "STRATA_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// TLS on the HTTP and S3 ports: the certificate chain (PEM), with --tls-key.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// TLS with a self-signed certificate for localhost and the listen
    /// address, made once in `<data>/tls/` (clients trust
    /// `<data>/tls/cert.pem` with --ca-file): for tests and trials.
    #[arg(long, conflicts_with = "tls_cert")]
    pub tls_self_signed: bool,
    /// Cluster mode: the cluster secret (`strata cluster secret`). Nodes
    /// talk mutual TLS with certificates from it; a process without it can
    /// neither join nor read a replica. Required with --node-id.
    #[arg(long, env = "STRATA_CLUSTER_SECRET")]
    pub cluster_secret: Option<PathBuf>,
    /// The key store's root key file, made on first start (mode 0600): it
    /// seals the keys SSE-S3 and SSE-KMS objects are encrypted under, so
    /// keep it off the data disks in production. Default: on one node
    /// `<data>/kms-root.key`; on a cluster, derived from the cluster secret
    /// (given, every node must be given the same file).
    #[arg(long, env = "STRATA_KMS_ROOT_KEY")]
    pub kms_root_key: Option<PathBuf>,
}

impl ServerArgs {
    /// The key store's root key (see `--kms-root-key`).
    fn kms_root(&self, secret: Option<&strata_auth::ClusterSecret>) -> Result<strata_sse::Key> {
        match (&self.kms_root_key, secret) {
            (Some(path), _) => Ok(strata_sse::root::load_or_create(path)?),
            (None, Some(s)) => Ok(strata_sse::Key::from_slice(&s.derive("kms root key"))?),
            (None, None) => Ok(strata_sse::root::load_or_create(&self.data_dir.join("kms-root.key"))?),
        }
    }
}

/// Parses `1=127.0.0.1:7001,2=...`.
pub fn parse_meta(s: &str) -> Result<std::collections::BTreeMap<u64, String>> {
    let mut out = std::collections::BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('=').with_context(|| format!("--meta entry {part:?} is not id=host:port"))?;
        let id: u64 = id.parse().with_context(|| format!("--meta entry {part:?}: {id:?} is not a node id"))?;
        if !addr.contains(':') {
            anyhow::bail!("--meta entry {part:?}: {addr:?} is not host:port");
        }
        out.insert(id, addr.to_string());
    }
    if ![1, 3, 5].contains(&out.len()) {
        anyhow::bail!("--meta must list 1, 3 or 5 members, not {}", out.len());
    }
    Ok(out)
}

/// The share of a disk `--disk-reserve auto` keeps free (capped at the
/// engine's default of 256 MiB): on a 64 MiB disk, 3.2 MiB.
const DISK_RESERVE_FRACTION: f64 = 0.05;

impl ServerArgs {
    /// When and how fast the scrubber runs.
    fn scrub_config(&self) -> strata_node::ScrubConfig {
        strata_node::ScrubConfig {
            interval: (self.scrub_interval_secs > 0).then(|| Duration::from_secs(self.scrub_interval_secs)),
            rate_bytes_per_sec: self.scrub_rate,
            deep_every: self.scrub_deep_every,
        }
    }

    /// Defaults for a node a benchmark runs in-process.
    pub fn for_bench(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            listen: "127.0.0.1:0".into(),
            partitions: 4,
            chunk_size: 4 << 20,
            segment_size: 512 << 20,
            replica_capacity: 64 << 30,
            disk_reserve: "auto".into(),
            flush: "every-batch".into(),
            write_cache: "auto".into(),
            cold_read_buffer: 256 << 20,
            tail_cache: "auto".into(),
            upload_buffer: "auto".into(),
            max_blob_size: 64 << 30,
            compaction_interval_secs: 3600,
            scrub_interval_secs: 0,
            scrub_rate: 64 << 20,
            scrub_deep_every: 7,
            sweep_interval_secs: 0,
            orphan_grace_secs: 86_400,
            header_timeout_secs: 30,
            max_connections: "auto".into(),
            node_id: None,
            meta: None,
            outbound_ip: None,
            failure_wait_ms: 5000,
            heartbeat_ms: 1000,
            down_after_ms: 6000,
            down_out_ms: 600_000,
            tract_down_out_ms: 0,
            tract_orphan_interval_secs: 600,
            txn_intent_timeout_ms: 5000,
            txn_wait_ms: 2000,
            txn_mode: strata_txn::Mode::Serializable,
            txn_read_lease_ms: 300_000,
            txn_gc_interval_secs: 60,
            max_moves: 4,
            recovery_placement: strata_cluster::RecoveryPlacement::default(),
            intra_replication_ms: 100,
            inter_replication_ms: 500,
            rw_hint_interval_secs: 10,
            rw_delete_grace_ms: strata_rwstore::DELETE_GRACE_MS,
            s3_listen: Some("off".into()),
            s3_domains: vec!["localhost".into()],
            s3_region: "us-east-1".into(),
            auth: "required".into(),
            metrics_token: None,
            tls_cert: None,
            tls_key: None,
            tls_self_signed: false,
            cluster_secret: None,
            kms_root_key: None,
        }
    }

    /// The client-facing TLS identity, if any: `--tls-cert`/`--tls-key`, or
    /// the self-signed one (made on first use) for the listen address.
    fn public_tls(&self, listen: std::net::SocketAddr) -> Result<Option<strata_auth::Identity>> {
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            return Ok(Some(strata_auth::Identity::from_pem_files(cert, key)?));
        }
        if !self.tls_self_signed {
            return Ok(None);
        }
        let dir = self.data_dir.join("tls");
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        if !cert.exists() || !key.exists() {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
            if !listen.ip().is_unspecified() && !names.contains(&listen.ip().to_string()) {
                names.push(listen.ip().to_string());
            }
            let (c, k) = strata_auth::tls::self_signed(&names)?;
            strata_auth::credentials::write_private(&key, k.as_bytes())?;
            std::fs::write(&cert, c).with_context(|| format!("writing {}", cert.display()))?;
        }
        Ok(Some(strata_auth::Identity::from_pem_files(&cert, &key)?))
    }

    /// How the HTTP port authenticates; `off` only on a loopback address.
    pub fn auth_config(&self, listen: std::net::SocketAddr) -> Result<strata_server::AuthConfig> {
        let mode = match self.auth.as_str() {
            "required" => strata_server::AuthMode::Required,
            "off" if listen.ip().is_loopback() => strata_server::AuthMode::Off,
            "off" => anyhow::bail!("--auth off is only for benchmarks on loopback; {listen} is reachable from elsewhere"),
            other => anyhow::bail!("--auth must be required or off, not {other:?}"),
        };
        Ok(strata_server::AuthConfig { mode, region: self.s3_region.clone(), metrics_token: self.metrics_token.clone() })
    }

    /// The engine configuration these flags describe.
    pub fn engine_config(&self) -> Result<EngineConfig> {
        let flush = match self.flush.as_str() {
            "every-batch" => FlushPolicy::EveryBatch,
            "never" => FlushPolicy::Never,
            other => anyhow::bail!("--flush must be every-batch or never, not {other:?}"),
        };
        let record_max = self.chunk_size + (1 << 20);
        Ok(EngineConfig {
            segment_bytes: self.segment_size.max(record_max + 4096),
            record_bytes_max: record_max,
            replica_capacity_bytes: self.replica_capacity,
            disk_reserve_bytes: match self.disk_reserve.as_str() {
                "auto" => EngineConfig::default().disk_reserve_bytes,
                size => parse_size(size).map_err(|e| anyhow::anyhow!("--disk-reserve: {e}"))?,
            },
            disk_reserve_fraction: (self.disk_reserve == "auto").then_some(DISK_RESERVE_FRACTION),
            flush,
            write_cache_bytes: match self.write_cache.as_str() {
                "auto" => memory_bytes().map_or(1 << 30, |m| m / 16),
                size => parse_size(size).map_err(|e| anyhow::anyhow!("--write-cache: {e}"))?,
            },
            cold_read_buffer_bytes: self.cold_read_buffer,
            tail_cache_bytes: match self.tail_cache.as_str() {
                "auto" => memory_bytes().map_or(1 << 30, |m| m / 8),
                size => parse_size(size).map_err(|e| anyhow::anyhow!("--tail-cache: {e}"))?,
            },
            tail_cache_prefault: true,
            ..EngineConfig::default()
        })
    }
}

impl ServerArgs {
    /// The router's settings.
    pub fn router_config(&self) -> Result<RouterConfig> {
        Ok(RouterConfig {
            chunk_size: self.chunk_size as usize,
            blob_bytes_max: self.max_blob_size,
            upload_buffer_bytes: match self.upload_buffer.as_str() {
                "auto" => memory_bytes().map_or(1 << 30, |m| m / 8),
                size => parse_size(size).map_err(|e| anyhow::anyhow!("--upload-buffer: {e}"))?,
            },
            orphan_grace_ms: self.orphan_grace_secs.saturating_mul(1000),
            ..RouterConfig::default()
        })
    }

    /// The connection limits, after raising the open-file limit as far as
    /// the hard limit allows (both logged).
    pub fn limits(&self) -> Result<strata_server::limits::Limits> {
        /// Open files kept for the store (segments, indexes, KV chunks).
        const STORE_FDS: u64 = 256;
        let nofile = strata_server::limits::raise_open_file_limit().context("reading the open-file limit")?;
        let mut limits = strata_server::limits::Limits::for_fd_limit(nofile, STORE_FDS);
        if self.max_connections != "auto" {
            limits.max_connections = self.max_connections.parse().map_err(|e| anyhow::anyhow!("--max-connections {:?}: {e}", self.max_connections))?;
            if limits.max_connections == 0 {
                anyhow::bail!("--max-connections must be at least 1");
            }
        }
        limits.header_timeout = Duration::from_secs(self.header_timeout_secs);
        tracing::info!(open_files = nofile, max_connections = limits.max_connections, header_timeout_secs = self.header_timeout_secs, "connection limits");
        Ok(limits)
    }

    /// When the orphan sweep runs.
    fn sweep_config(&self) -> strata_node::SweepConfig {
        strata_node::SweepConfig { interval: (self.sweep_interval_secs > 0).then(|| Duration::from_secs(self.sweep_interval_secs)) }
    }
}

/// The machine's memory (MemTotal of /proc/meminfo), if known.
fn memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Opens the store (creating partitions on first start) and a router over it.
pub fn open_node(args: &ServerArgs) -> Result<(Arc<Store>, Arc<Router>)> {
    let clock = Arc::new(SystemClock);
    let store = Arc::new(
        Store::open(&args.data_dir, args.engine_config()?, clock.clone()).with_context(|| format!("opening data directory {}", args.data_dir.display()))?,
    );
    if store.replicas().is_empty() {
        for p in 0..args.partitions {
            store.create_replica(p).with_context(|| format!("creating partition {p}"))?;
        }
    }
    let router = Arc::new(Router::new(Arc::new(LocalView::new(store.clone())), args.router_config()?, clock, None));
    Ok((store, router))
}

/// Runs a cluster node: its metadata member if it is one, its replicas as
/// the cluster map places them, replication, and the router.
async fn run_cluster(args: ServerArgs, node_id: u64) -> Result<()> {
    use strata_router::{ClusterMapView, FailureDetector, FailureDetectorConfig, LocalReplicas};
    let clock: Arc<dyn strata_types::Clock> = Arc::new(SystemClock);
    let meta_peers = parse_meta(args.meta.as_deref().unwrap_or(""))?;
    if let Some(ip) = args.outbound_ip {
        strata_net::set_outbound_ip(ip);
    }
    let listener = tokio::net::TcpListener::bind(&args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let listen = listener.local_addr()?;
    // The cluster's transport: mutual TLS with certificates of the
    // cluster's CA, minted at every start from the shared secret.
    let secret_path = args.cluster_secret.as_deref().context("a cluster node needs --cluster-secret (make one with strata cluster secret)")?;
    let secret = strata_auth::ClusterSecret::load(secret_path)?;
    let mut names = vec![strata_auth::CLUSTER_SERVER_NAME.to_string(), "localhost".into()];
    names.extend([Some(listen.ip()), args.outbound_ip].into_iter().flatten().filter(|ip| !ip.is_unspecified()).map(|ip| ip.to_string()));
    let node_identity = secret.mint(&names)?;
    let peer_tls = strata_auth::tls::client_config(secret.roots()?, Some(&node_identity))?;
    strata_net::set_cluster_tls(peer_tls.clone());
    strata_node::kv_fetch::set_node_identity(strata_client::ClientOptions {
        tls: Some(peer_tls),
        server_name: Some(strata_auth::CLUSTER_SERVER_NAME.into()),
        ..Default::default()
    });
    let public = args.public_tls(listen)?;
    let tls = strata_auth::tls::server_config(public.as_ref(), Some((&node_identity, &secret)))?;
    tracing::info!(cluster = secret.cluster_id(), "cluster transport: mutual TLS");
    let config = strata_node::ClusterConfig {
        node_id,
        data_dir: args.data_dir.clone(),
        meta_peers,
        engine: args.engine_config()?,
        intra_period: Duration::from_millis(args.intra_replication_ms.max(1)),
        inter_period: Duration::from_millis(args.inter_replication_ms.max(1)),
        // Every node holds the names: they are every port's identities.
        names_learner: true,
        heartbeat: Duration::from_millis(args.heartbeat_ms.max(10)),
        down_after: Duration::from_millis(args.down_after_ms.max(args.heartbeat_ms.saturating_mul(2)).max(100)),
        down_out: Duration::from_millis(args.down_out_ms.max(args.down_after_ms)),
        tract_down_out: Duration::from_millis(args.tract_down_out_ms),
        max_moves: args.max_moves.max(1),
        recovery_placement: args.recovery_placement,
        hint_period: Duration::from_secs(args.rw_hint_interval_secs.max(1)),
        delete_grace: Duration::from_millis(args.rw_delete_grace_ms.max(2)),
    };
    let workers = strata_node::Workers::new();
    let node = strata_node::ClusterNode::start(config, clock.clone(), workers.clone()).await?;
    let fd = FailureDetectorConfig { wait_ms: args.failure_wait_ms, ..FailureDetectorConfig::default() };
    let detector = Arc::new(FailureDetector::new(fd, clock.clone()));
    let stale = node.clone();
    let view = ClusterMapView::new(
        node.subscribe(),
        Some(node_id),
        None,
        Some(node.disks.clone() as Arc<dyn LocalReplicas>),
        node.rpc().clone(),
        detector.clone(),
        Arc::new(move |epoch| stale.saw_epoch(epoch)),
    )
    .with_catch_up({
        let node = node.clone();
        Arc::new(move || {
            let node = node.clone();
            Box::pin(async move { node.catch_up().await })
        })
    });
    let rconfig = args.router_config()?;
    let router = Arc::new(Router::new(Arc::new(view), rconfig, clock, None));
    let kv = strata_server::KvStores::open(args.data_dir.join("kv")).context("opening the read-only stores")?;
    // Names (and with them access keys) live in the metadata service's Raft
    // state machine; a member reads its own copy, a node outside the group
    // its learner's (both after a read index from the leader).
    let s3_listen = args.s3_listen.clone().filter(|l| l != "off");
    let raft = node.raft_node().context("a cluster node runs a member or a learner of the metadata group")?;
    let names: Arc<dyn strata_names::NameIndex> = Arc::new(strata_cluster::meta::RaftNames::new(raft));
    let limits = args.limits()?;
    let ids = strata_server::Identities {
        names: names.clone(),
        config: args.auth_config(listener.local_addr()?)?,
        audit_path: Some(args.data_dir.join("audit.log")),
        kms_root: Some(args.kms_root(Some(&secret))?),
    };
    let state = strata_server::AppState::clustered(router, node.clone(), detector, kv, ids);
    // The web console calls this node's own ports (and, for moves, the
    // other nodes') as its users, asking for the cluster's name and
    // trusting the cluster's CA: the port answers that name with the node's
    // cluster certificate even when clients get an operator's (--tls-cert).
    let console_opts = strata_client::ClientOptions {
        tls: Some(strata_auth::tls::client_config(secret.roots()?, None)?),
        server_name: Some(strata_auth::CLUSTER_SERVER_NAME.into()),
        ..Default::default()
    };
    let _ = state.console.set(strata_console::Console::new(strata_server::console_backend(listen, console_opts.clone()), true, state.router.clock().clone()));
    strata_node::tracts::start_orphan_reclaimer(&node, Duration::from_secs(args.tract_orphan_interval_secs.max(1)));
    node.set_txn_config(strata_txn::participant::Config {
        wait: Duration::from_millis(args.txn_wait_ms.max(1)),
        intent_timeout: Duration::from_millis(args.txn_intent_timeout_ms.max(100)),
        mode: args.txn_mode,
        read_lease: Duration::from_millis(args.txn_read_lease_ms.max(1)),
    });
    strata_node::txn::start_collector(&node, Duration::from_secs(args.txn_gc_interval_secs.max(1)));
    strata_node::txn::start_recovery(&node, Duration::from_millis((args.txn_intent_timeout_ms / 4).clamp(100, 1000)));
    strata_node::start_compactor(&workers, node.disks.clone(), Duration::from_secs(args.compaction_interval_secs.max(1)));
    strata_node::start_space_monitor(&workers, node.disks.clone());
    state.scrub.start(&workers, args.scrub_config());
    state.sweep.start(&workers, args.sweep_config());
    // A partition's blob events are sent by the node of its first replica.
    state.capture.capture_blobs(strata_node::capture::BlobCapture {
        disks: node.disks.clone(),
        stores: {
            let kv = state.kv.clone();
            Arc::new(move || kv.all())
        },
        dir: args.data_dir.join("events"),
        node: format!("n{node_id}"),
        leads: {
            let (node, me) = (node.clone(), node.id());
            Arc::new(move |p| node.map().holders(p).first().is_some_and(|l| l.node == me))
        },
    });
    state.capture.start(&workers);
    println!("Strata node {node_id} is serving https://{listen} (data in {}; cluster {})", args.data_dir.display(), secret.cluster_id());
    match &public {
        None => println!("Web console on https://{listen}/ui (the cluster's CA certificate, cluster-ca.pem, vouches for it)"),
        Some(_) => println!("Web console on https://{listen}/ui"),
    }
    if let Some(s3) = &s3_listen {
        let s3_addr =
            crate::s3::start(s3, args.s3_domains.clone(), args.s3_region.clone(), state.clone(), names, limits, Some((tls.clone(), state.clone()))).await?;
        if let Some(console) = state.console.get() {
            console
                .set_s3(strata_server::console_backend(s3_addr, strata_client::ClientOptions { region: Some(args.s3_region.clone()), ..console_opts.clone() }));
        }
        println!("S3 API on https://{s3_addr} (names replicated by the metadata group; make keys with strata key create)");
    }
    // Background work stops first, while the listener still answers: the
    // failure detector must not decide on the silence of heartbeats that
    // the closed listener (and the drain after it) would cause, or a
    // stopping leader marks every node down, itself included.
    let stopping = workers.clone();
    let shutdown = async move {
        shutdown_signal().await;
        stopping.stop(Duration::from_secs(5)).await;
    };
    strata_server::serve(listener, state, limits, Some(tls), shutdown).await?;
    workers.stop(Duration::from_secs(5)).await;
    if let Some(meta) = &node.meta {
        meta.shutdown().await;
    }
    let d = node.disks.clone();
    tokio::task::spawn_blocking(move || d.close()).await?;
    Ok(())
}

/// An in-process benchmark node's identities: the embedded names under
/// `data_dir` with its admin key (returned, for the load generator to sign
/// with), authentication required, an audit log.
pub async fn bench_identities(data_dir: &std::path::Path, listen: std::net::SocketAddr) -> Result<(strata_server::Identities, strata_client::Credentials)> {
    let (names, (id, secret)) = crate::s3::open_names(data_dir).await?;
    let config = ServerArgs::for_bench(data_dir.to_owned()).auth_config(listen)?;
    let ids = strata_server::Identities { names, config, audit_path: Some(data_dir.join("audit.log")), kms_root: None };
    Ok((ids, strata_client::Credentials { access_key_id: id, secret_access_key: secret }))
}

/// Writes the admin key to `<data>/admin.credentials` (owner-only) unless
/// the file already holds it; returns the path.
fn write_admin_credentials(data_dir: &std::path::Path, id: &str, secret: &str) -> Result<PathBuf> {
    let path = data_dir.join("admin.credentials");
    let creds = strata_client::Credentials { access_key_id: id.to_owned(), secret_access_key: secret.to_owned() };
    if strata_auth::credentials::load(&path).is_ok_and(|c| c == creds) {
        return Ok(path);
    }
    let text = strata_auth::credentials::render(&creds, "the admin access key this node made on its first start");
    strata_auth::credentials::write_private(&path, text.as_bytes()).context("writing the admin credentials")?;
    Ok(path)
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
    }
    tracing::info!("shutting down");
}

pub async fn run(args: ServerArgs) -> Result<()> {
    if let Some(id) = args.node_id {
        return run_cluster(args, id).await;
    }
    let (store, router) = open_node(&args)?;
    let listener = tokio::net::TcpListener::bind(&args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let disks = strata_node::Disks::single(store.clone());
    let workers = strata_node::Workers::new();
    let kv = strata_server::KvStores::open(args.data_dir.join("kv")).context("opening the read-only stores")?;
    let s3_listen = args.s3_listen.clone().unwrap_or_else(|| "127.0.0.1:8081".into());
    let s3 = s3_listen != "off";
    // The names hold every port's access keys: open them whether or not S3 is on.
    let (names, (id, secret)) = crate::s3::open_names(&args.data_dir).await?;
    let creds_path = write_admin_credentials(&args.data_dir, &id, &secret)?;
    strata_node::kv_fetch::set_node_identity(strata_client::ClientOptions {
        credentials: Some(strata_client::Credentials { access_key_id: id.clone(), secret_access_key: secret.clone() }),
        region: Some(args.s3_region.clone()),
        ..Default::default()
    });
    let limits = args.limits()?;
    let ids = strata_server::Identities {
        names: names.clone(),
        config: args.auth_config(addr)?,
        audit_path: Some(args.data_dir.join("audit.log")),
        kms_root: Some(args.kms_root(None)?),
    };
    let state = strata_server::AppState::new(router, disks.clone(), kv, ids, workers.clone());
    // The web console calls this node's own ports as its users: in clear,
    // or over TLS asking for a name the port answers with a certificate the
    // node made in memory at this start, trusting only that one (an
    // operator's certificate need not name the loopback address it calls).
    let (tls, console_opts) = match args.public_tls(addr)? {
        Some(identity) => {
            let (own, roots) = strata_auth::Identity::own()?;
            let opts = strata_client::ClientOptions {
                tls: Some(strata_auth::tls::client_config(roots, None)?),
                server_name: Some(strata_auth::CLUSTER_SERVER_NAME.into()),
                ..Default::default()
            };
            (Some(strata_auth::tls::server_config_with_own(&identity, &own)?), opts)
        }
        None => (None, strata_client::ClientOptions::default()),
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let console = strata_console::Console::new(strata_server::console_backend(addr, console_opts.clone()), tls.is_some(), state.router.clock().clone());
    let _ = state.console.set(console);
    strata_node::start_compactor(&workers, disks.clone(), Duration::from_secs(args.compaction_interval_secs.max(1)));
    strata_node::start_space_monitor(&workers, disks.clone());
    state.scrub.start(&workers, args.scrub_config());
    state.sweep.start(&workers, args.sweep_config());
    state.capture.capture_blobs(strata_node::capture::BlobCapture {
        disks: disks.clone(),
        stores: {
            let kv = state.kv.clone();
            Arc::new(move || kv.all())
        },
        dir: args.data_dir.join("events"),
        node: "node".into(),
        leads: Arc::new(|_| true),
    });
    state.capture.start(&workers);
    println!("Strata is serving {scheme}://{addr} (data in {}, {} partitions)", args.data_dir.display(), store.replicas().len());
    println!("Web console on {scheme}://{addr}/ui (sign in with an access key)");
    println!("Admin access key in {} (the strata CLI finds it there; more keys: strata key create)", creds_path.display());
    if args.tls_self_signed {
        println!("TLS with a self-signed certificate: clients trust {} (--ca-file)", args.data_dir.join("tls/cert.pem").display());
    }
    if s3 {
        let s3_tls = tls.clone().map(|t| (t, state.clone()));
        let s3_addr = crate::s3::start(&s3_listen, args.s3_domains.clone(), args.s3_region.clone(), state.clone(), names, limits, s3_tls).await?;
        if let Some(console) = state.console.get() {
            // The console's buckets and objects pages go through this port.
            console
                .set_s3(strata_server::console_backend(s3_addr, strata_client::ClientOptions { region: Some(args.s3_region.clone()), ..console_opts.clone() }));
        }
        println!("S3 API on {scheme}://{s3_addr} (region {}); access key for it (admin):", args.s3_region);
        println!("  AWS_ACCESS_KEY_ID={id} AWS_SECRET_ACCESS_KEY={secret}");
        println!("  aws --endpoint-url {scheme}://{s3_addr} s3 mb s3://demo   # more keys: strata key create");
    }
    println!("Try it:");
    println!("  strata put README.md                      # prints the new blob id");
    println!("  strata get <ID> -o copy.md");
    println!(
        "  curl -sS --aws-sigv4 aws:amz:{}:s3 --user \"$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY\" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' --data-binary @README.md {scheme}://{addr}/",
        args.s3_region
    );
    println!("Stop with Ctrl-C.");
    strata_server::serve(listener, state, limits, tls, shutdown_signal()).await?;
    workers.stop(Duration::from_secs(5)).await;
    let s = store.clone();
    tokio::task::spawn_blocking(move || s.close()).await?;
    Ok(())
}
