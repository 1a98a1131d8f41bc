//! Prometheus metrics: request counts, latencies and bytes, plus the storage
//! engine's counters per partition, read at scrape time.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use strata_node::{ClusterNode, Disks};

type Labels = Vec<(&'static str, String)>;

/// A request's labels, built without allocating: requests are counted on
/// the hot path (a KV lookup takes about a microsecond).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct OpStatus {
    op: &'static str,
    status: u16,
}

impl prometheus_client::encoding::EncodeLabelSet for OpStatus {
    fn encode(&self, mut encoder: prometheus_client::encoding::LabelSetEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        ("op", self.op).encode(encoder.encode_label())?;
        ("status", self.status).encode(encoder.encode_label())
    }
}

/// An operation label.
type Op = [(&'static str, &'static str); 1];

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<OpStatus, Counter>,
    latency: Family<Op, Histogram>,
    s3_requests: Family<OpStatus, Counter>,
    s3_latency: Family<Op, Histogram>,
    /// Blob bytes received in put bodies.
    pub bytes_received: Counter,
    /// Blob bytes sent in get bodies.
    pub bytes_sent: Counter,
    /// GETs answered with sendfile(2) on the fast path.
    pub sendfile_responses: Counter,
    /// GETs answered on the fast path from bytes in memory (the tail
    /// cache, or a remote replica's answer).
    pub memory_responses: Counter,
    /// Read-write store sessions opened (connections upgraded to `strata-rw/1`).
    pub rw_sessions: Counter,
    /// TLS handshakes refused (a client without a trusted certificate, a
    /// node of another cluster, a plain-HTTP client on a TLS port).
    pub tls_handshake_failures: Counter,
    /// Requests the HTTP port refused before any handler, by code
    /// (`AuthenticationRequired`, `SignatureDoesNotMatch`, `AccessDenied`, ...).
    auth_refusals: Family<[(&'static str, &'static str); 1], Counter>,
    /// The connection gate every port of the node shares (one budget of
    /// open files).
    gate: Arc<std::sync::OnceLock<Arc<crate::limits::Gate>>>,
    /// The last ten minutes of PUTs and GETs (the console's charts).
    pub recent: crate::recent::Recent,
}

/// What the metrics read at scrape time.
pub struct Sources {
    /// The node's disks (engine metrics).
    pub disks: Arc<Disks>,
    /// The router (its partitions and queues).
    pub router: Arc<strata_router::Router>,
    /// The cluster node and the router's failure detector, in cluster mode.
    pub cluster: Option<(Arc<ClusterNode>, Arc<strata_router::FailureDetector>)>,
    /// Read-only stores.
    pub kv: Arc<crate::KvStores>,
    /// The name index.
    pub names: Option<Arc<dyn strata_names::NameIndex>>,
    /// The scrubber.
    pub scrub: Arc<strata_node::Scrubber>,
    /// The orphan sweep.
    pub sweep: Arc<strata_node::Sweeper>,
    /// The background workers.
    pub workers: Arc<strata_node::Workers>,
    /// Change capture's senders.
    pub capture: Arc<strata_node::Capture>,
}

impl Metrics {
    /// Registers everything, including the collectors over `from`.
    pub fn new(from: Sources) -> Self {
        let Sources { disks: store, router, cluster, kv, names, scrub, sweep, workers, capture } = from;
        let recent = crate::recent::Recent::new(router.clock().clone());
        let mut registry = Registry::default();
        let requests = Family::<OpStatus, Counter>::default();
        let latency = Family::<Op, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_05, 2.0, 20)));
        let bytes_received = Counter::default();
        let bytes_sent = Counter::default();
        let sendfile_responses = Counter::default();
        let memory_responses = Counter::default();
        let rw_sessions = Counter::default();
        let tls_handshake_failures = Counter::default();
        let auth_refusals = Family::<[(&'static str, &'static str); 1], Counter>::default();
        registry.register("strata_http_requests", "HTTP requests by operation and status", requests.clone());
        registry.register("strata_http_request_duration_seconds", "HTTP request latency by operation (to the response head)", latency.clone());
        registry.register("strata_http_blob_bytes_received", "Blob bytes received in put bodies", bytes_received.clone());
        registry.register("strata_http_blob_bytes_sent", "Blob bytes sent in get bodies", bytes_sent.clone());
        registry.register("strata_http_sendfile_responses", "GETs answered with sendfile(2), bypassing user space", sendfile_responses.clone());
        registry.register(
            "strata_http_memory_responses",
            "GETs answered by the connection loop from bytes in memory (the tail cache), bypassing the HTTP stack",
            memory_responses.clone(),
        );
        registry.register("strata_rw_sessions", "Read-write store sessions opened (connections upgraded to strata-rw/1)", rw_sessions.clone());
        registry.register("strata_tls_handshake_failures", "TLS handshakes refused on the node's ports", tls_handshake_failures.clone());
        registry.register("strata_auth_refusals", "Requests of the HTTP port refused by authentication or authorization, by code", auth_refusals.clone());
        registry.register_collector(Box::new(EngineCollector(store)));
        registry.register_collector(Box::new(KvCollector(kv)));
        registry.register_collector(Box::new(ClusterCollector { router, cluster }));
        registry.register_collector(Box::new(ScrubCollector(scrub)));
        registry.register_collector(Box::new(SweepCollector(sweep)));
        registry.register_collector(Box::new(WorkerCollector(workers)));
        let s3_requests = Family::<OpStatus, Counter>::default();
        let s3_latency = Family::<Op, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_05, 2.0, 20)));
        registry.register("strata_s3_requests", "S3 requests by operation and status", s3_requests.clone());
        registry.register("strata_s3_request_duration_seconds", "S3 request latency by operation (to the response head)", s3_latency.clone());
        registry.register_collector(Box::new(CaptureCollector(capture)));
        if let Some(names) = names {
            registry.register_collector(Box::new(NamesCollector(names)));
        }
        let gate = Arc::default();
        registry.register_collector(Box::new(GateCollector(Arc::clone(&gate))));
        Self {
            registry,
            requests,
            latency,
            s3_requests,
            s3_latency,
            bytes_received,
            bytes_sent,
            sendfile_responses,
            memory_responses,
            rw_sessions,
            tls_handshake_failures,
            auth_refusals,
            gate,
            recent,
        }
    }

    /// The connection gate of the node's ports (HTTP and S3 share one),
    /// made on the first call with `max_connections`; counted in `/metrics`.
    pub fn connection_gate(&self, max_connections: usize) -> Arc<crate::limits::Gate> {
        self.gate.get_or_init(|| crate::limits::Gate::new(max_connections)).clone()
    }

    /// Records one finished request.
    pub fn observe(&self, op: &'static str, status: u16, seconds: f64) {
        self.requests.get_or_create(&OpStatus { op, status }).inc();
        self.latency.get_or_create(&[("op", op)]).observe(seconds);
        match op {
            "put" => self.recent.record(crate::recent::Kind::Put, seconds),
            "get" => self.recent.record(crate::recent::Kind::Get, seconds),
            _ => {}
        }
    }

    /// Records a request refused by authentication or authorization.
    pub fn refused(&self, code: &'static str) {
        self.auth_refusals.get_or_create(&[("code", code)]).inc();
    }

    /// Records one finished S3 operation.
    pub fn observe_s3(&self, op: &'static str, status: u16, seconds: f64) {
        self.s3_requests.get_or_create(&OpStatus { op, status }).inc();
        self.s3_latency.get_or_create(&[("op", op)]).observe(seconds);
        match op {
            "PutObject" | "UploadPart" => self.recent.record(crate::recent::Kind::Put, seconds),
            "GetObject" => self.recent.record(crate::recent::Kind::Get, seconds),
            _ => {}
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

struct EngineCollector(Arc<Disks>);

/// Read-only stores, read at scrape time: live version, records, versions
/// kept, buckets held, and a running fetch or load.
struct KvCollector(Arc<crate::KvStores>);

impl std::fmt::Debug for KvCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KvCollector")
    }
}

impl Collector for KvCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.0.gauges();
        type Get = fn(&crate::kv_api::StoreGauges) -> f64;
        let gauges: [(&str, &str, Get); 6] = [
            ("strata_kv_live_version", "The live version of a read-only store (0: none)", |g| g.live as f64),
            ("strata_kv_records", "Records in the live version on this node", |g| g.records as f64),
            ("strata_kv_versions", "Versions kept on this node", |g| g.versions as f64),
            ("strata_kv_buckets", "(partition, replica) buckets this node holds", |g| g.buckets as f64),
            ("strata_kv_transfer_bytes", "Bytes copied by the running fetch or load", |g| g.copied as f64),
            ("strata_kv_transfer_total_bytes", "Bytes the running fetch or load copies in all", |g| g.total as f64),
        ];
        for (name, help, get) in gauges {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for g in &rows {
                ConstGauge::new(get(g)).encode(m.encode_family(&vec![("store", g.store.clone())])?)?;
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for EngineCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineCollector")
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let replicas = self.0.replicas();
        let rows: Vec<(String, strata_engine::ReplicaStatus, &strata_engine::ReplicaStats)> =
            replicas.iter().map(|r| (r.partition().to_string(), r.status(), r.stats())).collect();
        type Get = fn(&strata_engine::ReplicaStatus, &strata_engine::ReplicaStats) -> f64;
        let gauges: [(&str, &str, Get); 8] = [
            ("strata_replica_used_bytes", "Bytes of log on disk", |s, _| s.used_bytes as f64),
            ("strata_replica_capacity_bytes", "Configured replica capacity", |s, _| s.capacity_bytes as f64),
            ("strata_replica_read_only", "1 if the replica refuses puts", |s, _| s.read_only.is_some() as u8 as f64),
            ("strata_replica_segments", "Log segments", |s, _| s.segments as f64),
            ("strata_replica_index_files", "Persisted index files", |s, _| s.index_files as f64),
            ("strata_replica_memtable_entries", "Entries in the in-memory index segment", |s, _| s.memtable_entries as f64),
            ("strata_replica_damaged_ranges", "Quarantined (damaged) log ranges awaiting repair", |s, _| s.damaged_ranges as f64),
            ("strata_replica_damaged_unknown_ranges", "Quarantined log ranges whose key is unknown (absence is then unsure)", |s, _| s.damaged_unknown as f64),
        ];
        for (name, help, get) in gauges {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (p, st, stats) in &rows {
                ConstGauge::new(get(st, stats)).encode(m.encode_family(&vec![("partition", p.clone())])?)?;
            }
        }
        let counters: [(&str, &str, Get); 18] = [
            ("strata_engine_batches", "Group-commit batches written", |_, s| s.batches.load(Ordering::Relaxed) as f64),
            ("strata_engine_records", "Records written", |_, s| s.records.load(Ordering::Relaxed) as f64),
            ("strata_engine_bytes_written", "Bytes appended to logs", |_, s| s.bytes_written.load(Ordering::Relaxed) as f64),
            ("strata_engine_fsyncs", "fdatasync calls on the write path", |_, s| s.fsyncs.load(Ordering::Relaxed) as f64),
            ("strata_engine_fsync_seconds", "Time spent in write-path fsyncs", |_, s| s.fsync_nanos.load(Ordering::Relaxed) as f64 / 1e9),
            ("strata_engine_segments_compacted", "Segments rewritten by compaction", |_, s| s.segments_compacted.load(Ordering::Relaxed) as f64),
            ("strata_engine_bytes_reclaimed", "Bytes reclaimed by compaction", |_, s| s.bytes_reclaimed.load(Ordering::Relaxed) as f64),
            ("strata_engine_torn_bytes_truncated", "Bytes of torn log tail cut at recovery", |_, s| s.torn_bytes_truncated.load(Ordering::Relaxed) as f64),
            ("strata_engine_damage_found", "Damaged log ranges found (recovery, reads, compaction) and quarantined", |_, s| {
                s.damage_found.load(Ordering::Relaxed) as f64
            }),
            ("strata_engine_damage_cleared", "Quarantined keys repaired from a peer or deleted", |_, s| s.damage_cleared.load(Ordering::Relaxed) as f64),
            ("strata_engine_cache_dropped_bytes", "Bytes of durable log dropped from the page cache behind the write window", |_, s| {
                s.cache_dropped_bytes.load(Ordering::Relaxed) as f64
            }),
            ("strata_engine_direct_reads", "Large records read with O_DIRECT because they were not in the page cache", |_, s| {
                s.direct_reads.load(Ordering::Relaxed) as f64
            }),
            ("strata_engine_direct_read_bytes", "Bytes read with O_DIRECT", |_, s| s.direct_read_bytes.load(Ordering::Relaxed) as f64),
            ("strata_engine_direct_writes", "Write groups written with O_DIRECT from the tail cache", |_, s| s.direct_writes.load(Ordering::Relaxed) as f64),
            ("strata_engine_tail_cache_full", "Large write groups sent through the page cache because every tail cache region was leased", |_, s| {
                s.tail_cache_full.load(Ordering::Relaxed) as f64
            }),
            ("strata_engine_tail_cache_hits", "Records read from the tail cache", |_, s| s.tail_cache_hits.load(Ordering::Relaxed) as f64),
            ("strata_engine_tail_cache_hit_bytes", "Bytes read from the tail cache", |_, s| s.tail_cache_hit_bytes.load(Ordering::Relaxed) as f64),
            ("strata_engine_tail_cache_fills", "Cold large records read from the disk into the tail cache", |_, s| {
                s.tail_cache_fills.load(Ordering::Relaxed) as f64
            }),
        ];
        for (name, help, get) in counters {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (p, st, stats) in &rows {
                ConstCounter::new(get(st, stats)).encode(m.encode_family(&vec![("partition", p.clone())])?)?;
            }
        }
        let tail = self.0.stores().iter().filter_map(|s| s.tail_cache_stats()).fold(strata_engine::TailStats::default(), |a, t| a + t);
        let store: [(&str, &str, f64); 3] = [
            ("strata_engine_tail_cache_bytes", "Bytes of memory of the tail cache (0: off)", tail.capacity as f64),
            ("strata_engine_tail_cache_ready_bytes", "Bytes of the tail cache faulted in and in use; grows to its size after start", tail.ready as f64),
            ("strata_engine_tail_cache_records", "Records the tail cache holds", tail.records as f64),
        ];
        for (name, help, v) in store {
            ConstGauge::new(v).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}

/// Every background worker: passes, failures, whether it runs now.
struct WorkerCollector(Arc<strata_node::Workers>);

impl std::fmt::Debug for WorkerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkerCollector")
    }
}

impl Collector for WorkerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.0.list();
        let mut m = encoder.encode_descriptor("strata_worker_passes", "Passes a background worker finished", None, MetricType::Counter)?;
        for w in &rows {
            ConstCounter::new(w.passes as f64).encode(m.encode_family(&vec![("worker", w.name.clone())])?)?;
        }
        let mut m = encoder.encode_descriptor("strata_worker_failures", "Passes of a background worker that failed", None, MetricType::Counter)?;
        for w in &rows {
            ConstCounter::new(w.failures as f64).encode(m.encode_family(&vec![("worker", w.name.clone())])?)?;
        }
        let mut m =
            encoder.encode_descriptor("strata_worker_running", "1 while a background worker is in a pass, -1 once it stopped", None, MetricType::Gauge)?;
        for w in &rows {
            let v = match w.state {
                "running" => 1.0,
                "stopped" => -1.0,
                _ => 0.0,
            };
            ConstGauge::new(v).encode(m.encode_family(&vec![("worker", w.name.clone())])?)?;
        }
        Ok(())
    }
}

/// The scrubber's totals and whether a pass runs.
struct ScrubCollector(Arc<strata_node::Scrubber>);

impl std::fmt::Debug for ScrubCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScrubCollector")
    }
}

impl Collector for ScrubCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let t = &self.0.totals;
        let counters: [(&str, &str, &std::sync::atomic::AtomicU64); 7] = [
            ("strata_scrub_passes", "Scrub passes finished", &t.passes),
            ("strata_scrub_keys_checked", "Keys the scrubber checked", &t.keys_checked),
            ("strata_scrub_bytes_verified", "Record bytes the scrubber read back and verified", &t.bytes_verified),
            ("strata_scrub_damage_found", "Damaged records the scrubber found (and quarantined)", &t.damaged_found),
            ("strata_scrub_repaired", "Keys the scrubber copied here from a peer (missing or damaged here)", &t.repaired),
            ("strata_scrub_deletes_applied", "Deletes the scrubber applied here because a peer had deleted the key", &t.deletes_applied),
            ("strata_scrub_inconsistent", "Keys whose data differs between two replicas that both check out", &t.inconsistent),
        ];
        for (name, help, v) in counters {
            counter(&mut encoder, name, help, v.load(Ordering::Relaxed) as f64)?;
        }
        gauge(&mut encoder, "strata_scrub_running", "1 while a scrub pass runs", self.0.status().running as u8 as f64)
    }
}

/// Connections per port: open, refused, evicted, timed out.
struct GateCollector(Arc<std::sync::OnceLock<Arc<crate::limits::Gate>>>);

impl std::fmt::Debug for GateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GateCollector")
    }
}

impl Collector for GateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(g) = self.0.get() else { return Ok(()) };
        gauge(&mut encoder, "strata_connections_open", "Connections the node's ports hold now", g.open() as f64)?;
        gauge(&mut encoder, "strata_connections_max", "Connections the node's ports hold at most (--max-connections)", g.max() as f64)?;
        let counters: [(&str, &str, &AtomicU64); 3] = [
            ("strata_connections_refused", "Connections refused: the ports were full of busy connections", &g.refused),
            ("strata_connections_evicted", "Connections waiting for a request head closed to make room for a new one", &g.evicted),
            ("strata_connections_timed_out", "Connections closed because a request head (or the next request) did not come in time", &g.timed_out),
        ];
        for (name, help, v) in counters {
            counter(&mut encoder, name, help, v.load(Ordering::Relaxed) as f64)?;
        }
        Ok(())
    }
}

/// The orphan sweep's totals and whether a pass runs.
struct SweepCollector(Arc<strata_node::Sweeper>);

impl std::fmt::Debug for SweepCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SweepCollector")
    }
}

impl Collector for SweepCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let t = &self.0.totals;
        let counters: [(&str, &str, &std::sync::atomic::AtomicU64); 4] = [
            ("strata_sweep_passes", "Orphan sweep passes finished", &t.passes),
            ("strata_sweep_stopped", "Orphan sweep passes stopped before freeing (a replica or chunk list unreadable)", &t.stopped),
            ("strata_sweep_freed", "Records the orphan sweep freed (chunks and S3 blobs nothing pointed at)", &t.freed),
            ("strata_sweep_too_young", "Unreferenced records the sweep left because they were younger than the grace period", &t.too_young),
        ];
        for (name, help, v) in counters {
            counter(&mut encoder, name, help, v.load(Ordering::Relaxed) as f64)?;
        }
        gauge(&mut encoder, "strata_sweep_running", "1 while an orphan sweep pass runs", self.0.status().running as u8 as f64)
    }
}

/// Router counters, and in cluster mode the map epoch, the metadata group,
/// replication lag per replica pair and bytes replicated, and the failure
/// detector's view of nodes.
struct ClusterCollector {
    router: Arc<strata_router::Router>,
    cluster: Option<(Arc<ClusterNode>, Arc<strata_router::FailureDetector>)>,
}

impl std::fmt::Debug for ClusterCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterCollector")
    }
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> Result<(), std::fmt::Error> {
    ConstCounter::new(v).encode(encoder.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> Result<(), std::fmt::Error> {
    ConstGauge::new(v).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

impl Collector for ClusterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.router.stats();
        counter(
            &mut encoder,
            "strata_router_proxied_gets",
            "Gets forwarded to other zones after missing in the local zone",
            stats.proxied_gets.load(Ordering::Relaxed) as f64,
        )?;
        counter(
            &mut encoder,
            "strata_router_put_replication_races",
            "Put acks from replicas that already held the blob through replication",
            stats.put_replication_races.load(Ordering::Relaxed) as f64,
        )?;
        counter(
            &mut encoder,
            "strata_router_read_repairs",
            "Damaged replica copies rewritten from a whole copy by a read",
            stats.read_repairs.load(Ordering::Relaxed) as f64,
        )?;
        counter(
            &mut encoder,
            "strata_router_read_repair_failures",
            "Read repairs that could not write their copy",
            stats.read_repair_failures.load(Ordering::Relaxed) as f64,
        )?;
        counter(
            &mut encoder,
            "strata_router_late_writes_done",
            "Replica writes that completed after their operation was acknowledged",
            stats.late_writes_done.load(Ordering::Relaxed) as f64,
        )?;
        counter(
            &mut encoder,
            "strata_router_late_writes_failed",
            "Replica writes after the acknowledgement that failed (replication catches the replica up)",
            stats.late_writes_failed.load(Ordering::Relaxed) as f64,
        )?;
        counter(
            &mut encoder,
            "strata_router_late_writes_dropped",
            "Replica writes cancelled at the acknowledgement because too many late bytes were in flight",
            stats.late_writes_dropped.load(Ordering::Relaxed) as f64,
        )?;
        gauge(
            &mut encoder,
            "strata_router_late_write_bytes",
            "Bytes of replica writes still running after their acknowledgement",
            stats.late_write_bytes.load(Ordering::Relaxed) as f64,
        )?;
        gauge(
            &mut encoder,
            "strata_router_upload_buffer_bytes",
            "Bytes of put bodies buffered now (chunks filling or being written)",
            self.router.upload_buffer_held() as f64,
        )?;
        counter(
            &mut encoder,
            "strata_router_upload_buffer_waits",
            "Puts that waited for room in the upload buffer (--upload-buffer)",
            stats.upload_buffer_waits.load(Ordering::Relaxed) as f64,
        )?;
        let Some((node, detector)) = &self.cluster else { return Ok(()) };
        let map = node.map();
        gauge(&mut encoder, "strata_cluster_map_epoch", "Epoch of the cluster map this node has", map.epoch as f64)?;
        let down = map.nodes.values().filter(|n| !n.state.is_up()).count();
        gauge(&mut encoder, "strata_cluster_nodes_down", "Nodes the cluster map holds down (missed their heartbeats)", down as f64)?;
        let failed = map.nodes.values().flat_map(|n| &n.disks).filter(|d| d.state == strata_cluster::DiskState::Failed).count();
        gauge(&mut encoder, "strata_cluster_disks_failed", "Disks the cluster map holds failed", failed as f64)?;
        let moving = map.partitions.values().filter(|p| p.moving.is_some()).count();
        gauge(&mut encoder, "strata_cluster_moves_under_way", "Replica moves under way in the cluster map", moving as f64)?;
        let rows = map.partitions.values().filter(|p| p.kind == strata_cluster::PartitionKind::Tract);
        let (rows_total, rows_moving) = rows.fold((0, 0), |(t, m), p| (t + 1, m + usize::from(p.moving.is_some())));
        gauge(&mut encoder, "strata_tract_rows", "Rows of the tract locator table", rows_total as f64)?;
        gauge(&mut encoder, "strata_tract_rows_recovering", "Rows of the tract locator table with a replica filling (recovery or growth)", rows_moving as f64)?;
        let filling = strata_node::tracts::filling_bytes(node);
        gauge(&mut encoder, "strata_tract_fill_bytes", "Bytes held so far by this node's row replicas that are filling", filling as f64)?;
        let (planned, done) = map.rebalance.as_ref().map_or((0, 0), |r| {
            (r.moves.len(), r.moves.iter().filter(|m| matches!(map.plan_state(m), strata_cluster::PlanState::Done | strata_cluster::PlanState::Stale)).count())
        });
        gauge(&mut encoder, "strata_rebalance_moves_planned", "Moves of the rebalancing under way (0: none)", planned as f64)?;
        gauge(&mut encoder, "strata_rebalance_moves_done", "Moves of the rebalancing under way that are done (or skipped)", done as f64)?;
        gauge(
            &mut encoder,
            "strata_cluster_partitions_degraded",
            "Partitions with a replica on a node that is down or a disk that is not up",
            map.degraded().len() as f64,
        )?;
        if let Some(meta) = &node.meta {
            let st = meta.status();
            gauge(&mut encoder, "strata_meta_term", "Raft term of the metadata group", st.term as f64)?;
            gauge(&mut encoder, "strata_meta_is_leader", "1 if this node leads the metadata group", (st.leader == Some(st.id)) as u8 as f64)?;
        }
        if let Some(raft) = node.raft_node() {
            let st = raft.status();
            let applied = st.last_applied.unwrap_or(0) as f64;
            gauge(&mut encoder, "strata_meta_last_applied", "Index of the last metadata log entry this node (member or learner) applied", applied)?;
        }
        counter(
            &mut encoder,
            "strata_tract_rows_fenced",
            "Writes and reads of a tract row refused because the caller's map predates the row's version (a replaced primary fenced off) or is newer than this node could catch up to",
            node.fenced.load(Ordering::Relaxed) as f64,
        )?;
        gauge(&mut encoder, "strata_txn_intents_held", "Transaction intents held on the rows this node leads", node.txn().held() as f64)?;
        let (committed, aborted, presumed) = node.txn().stats.get();
        counter(&mut encoder, "strata_txn_committed", "Transactions this node, as their decider, decided committed", committed as f64)?;
        counter(&mut encoder, "strata_txn_aborted", "Transactions a step on this node refused (a conflict, or a wait that ran out)", aborted as f64)?;
        counter(
            &mut encoder,
            "strata_txn_presumed_aborted",
            "Transactions this node found undecided when asked to resolve them, and decided aborted",
            presumed as f64,
        )?;
        if let Some(rw) = node.rw_if_open() {
            let s = rw.coordinator().stats();
            let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
            counter(&mut encoder, "strata_rw_read_repairs", "Versions read repair wrote to stale read-write store replicas", l(&s.read_repairs))?;
            counter(&mut encoder, "strata_rw_hints_written", "Hints written for nodes a read-write store put could not reach", l(&s.hints_written))?;
            counter(&mut encoder, "strata_rw_hints_pushed", "Hints delivered to their nodes", l(&s.hints_pushed))?;
            counter(&mut encoder, "strata_rw_hints_failed", "Hint pushes that failed (the hint is kept)", l(&s.hints_failed))?;
            gauge(&mut encoder, "strata_rw_hints_pending", "Hints this node holds (as of the last push pass, plus those written since)", l(&s.hints_pending))?;
            counter(&mut encoder, "strata_rw_hints_expired", "Hints dropped undelivered, older than half the delete grace", l(&s.hints_expired))?;
            counter(
                &mut encoder,
                "strata_rw_deletes_reclaimed",
                "Read-write store deletes reclaimed once every replica held them, past the delete grace",
                l(&s.deletes_reclaimed),
            )?;
            counter(&mut encoder, "strata_rw_obsolete_puts", "Read-write store puts refused as obsolete (the optimistic lock)", l(&s.obsolete))?;
        }
        let rep = &node.replication;
        counter(
            &mut encoder,
            "strata_replication_bytes_intra_zone",
            "Blob bytes copied from peers in this zone",
            rep.bytes_intra.load(Ordering::Relaxed) as f64,
        )?;
        counter(
            &mut encoder,
            "strata_replication_bytes_inter_zone",
            "Blob bytes copied from peers in other zones",
            rep.bytes_inter.load(Ordering::Relaxed) as f64,
        )?;
        counter(&mut encoder, "strata_replication_records", "Records applied by replication", rep.records.load(Ordering::Relaxed) as f64)?;
        counter(
            &mut encoder,
            "strata_move_bytes_copied",
            "Blob bytes copied into the replicas this node receives by moves (rebalancing, removals, re-replication)",
            node.move_copies.total() as f64,
        )?;
        gauge(&mut encoder, "strata_moves_filling", "Replicas this node receives by moves that are still copying", node.move_copies().len() as f64)?;
        counter(
            &mut encoder,
            "strata_replication_deferred_rounds",
            "Replication rounds that stopped at a missing put the peer wrote less than the push grace ago (its pushed copy on its way), leaving the rest for a later round",
            rep.deferred_rounds.load(Ordering::Relaxed) as f64,
        )?;
        counter(
            &mut encoder,
            "strata_replication_token_writes",
            "Writes of replicas' replication tokens files (at most one a second per replica)",
            rep.token_writes.load(Ordering::Relaxed) as f64,
        )?;
        let lag = rep.lag();
        type Get = fn(&strata_node::PairLag) -> f64;
        let gauges: [(&str, &str, Get); 3] = [
            ("strata_replication_lag_bytes", "Bytes the peer replica's log holds beyond this one's", |l| l.lag_bytes as f64),
            ("strata_replication_lag_records", "Records of the peer replica not yet replicated here", |l| l.lag_records as f64),
            ("strata_replication_lag_seconds", "Seconds since this replica last had all the peer had", |l| l.lag_seconds),
        ];
        for (name, help, get) in gauges {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for l in &lag {
                let labels: Labels = vec![
                    ("partition", l.partition.to_string()),
                    ("peer", l.peer.to_string()),
                    ("zone", (if l.intra_zone { "intra" } else { "inter" }).to_string()),
                ];
                ConstGauge::new(get(l)).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = encoder.encode_descriptor("strata_node_marked_down", "1 while the failure detector holds a node down", None, MetricType::Gauge)?;
        for (id, h) in detector.nodes() {
            let down = matches!(h, strata_router::NodeHealth::Down { .. }) as u8 as f64;
            ConstGauge::new(down).encode(m.encode_family(&vec![("node", id.to_string())])?)?;
        }
        Ok(())
    }
}

/// Named blobs, read at scrape time: buckets, objects, bytes, multipart
/// uploads in progress and access keys.
struct NamesCollector(Arc<dyn strata_names::NameIndex>);

impl std::fmt::Debug for NamesCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NamesCollector")
    }
}

impl Collector for NamesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (buckets, objects, bytes, uploads, keys) = strata_names::read(&*self.0, |s| {
            let objects: usize = s.buckets.values().map(|b| b.objects.len()).sum();
            let bytes: u64 = s.buckets.values().flat_map(|b| b.objects.values()).map(|o| o.size).sum();
            let uploads: usize = s.buckets.values().map(|b| b.uploads.len()).sum();
            (s.buckets.len(), objects, bytes, uploads, s.keys.len())
        });
        for (name, help, v) in [
            ("strata_s3_buckets", "Buckets", buckets as i64),
            ("strata_s3_objects", "Named objects (expired ones until swept included)", objects as i64),
            ("strata_s3_object_bytes", "Bytes of named objects", bytes as i64),
            ("strata_s3_multipart_uploads", "Multipart uploads in progress", uploads as i64),
            ("strata_s3_access_keys", "Access keys", keys as i64),
        ] {
            ConstGauge::new(v).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}

/// Change capture, read at scrape time: events made, in the outbox,
/// dropped; per target delivered, pending, failed, and whether it is down
/// past the alarm threshold.
struct CaptureCollector(Arc<strata_node::Capture>);

impl std::fmt::Debug for CaptureCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaptureCollector")
    }
}

impl Collector for CaptureCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let st = self.0.status();
        counter(&mut encoder, "strata_events_produced", "Change-capture events made (the outbox's last sequence number)", st.produced as f64)?;
        gauge(&mut encoder, "strata_events_outbox", "Events in the outbox, not yet with every target", st.outbox as f64)?;
        counter(
            &mut encoder,
            "strata_events_dropped",
            "Events dropped undelivered: the names' outbox was full, or a target fell behind a partition's journal",
            (st.dropped + st.blob_lost) as f64,
        )?;
        gauge(
            &mut encoder,
            "strata_events_sending",
            "1 if this node sends the events (the one node, or the metadata leader)",
            f64::from(u8::from(st.sending)),
        )?;
        type Row = (&'static str, &'static str, MetricType, fn(&strata_events::SenderStatus) -> f64);
        let rows: [Row; 5] = [
            ("strata_events_delivered", "Events delivered to a target since this node started sending", MetricType::Counter, |s| s.delivered as f64),
            ("strata_events_pending", "Events in the outbox beyond a target's delivered position", MetricType::Gauge, |s| s.pending as f64),
            ("strata_events_failed", "Failed deliveries to a target since this node started sending", MetricType::Counter, |s| s.failures as f64),
            ("strata_events_delivered_seq", "A target's delivered position in the outbox", MetricType::Gauge, |s| s.delivered_seq as f64),
            ("strata_events_target_alarm", "1 if a target has been failing longer than the alarm threshold (5 minutes)", MetricType::Gauge, |s| {
                f64::from(u8::from(s.alarm))
            }),
        ];
        for (name, help, kind, f) in rows {
            let mut m = encoder.encode_descriptor(name, help, None, kind)?;
            // Names events by target; native blob events by target/partition-N.
            for sender in st.targets.iter().map(|t| &t.sender).chain(&st.blob_senders) {
                let labels = vec![("target", sender.target.clone())];
                match kind {
                    MetricType::Counter => ConstCounter::new(f(sender)).encode(m.encode_family(&labels)?)?,
                    _ => ConstGauge::new(f(sender)).encode(m.encode_family(&labels)?)?,
                }
            }
        }
        Ok(())
    }
}
