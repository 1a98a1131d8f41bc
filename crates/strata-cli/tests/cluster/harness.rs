// The cluster tests' harness, included by `cluster.rs`: a fault-injecting
// proxy in front of every node, a cluster of real `strata` processes on
// 127.x.0.N addresses, and helpers that read their state over HTTP.

const PORT: u16 = 7000;
/// Nodes per zone in most tests (three zones of three); README's cluster
/// has one node per zone.
const PER_ZONE: u8 = 3;

/// The cluster tests share addresses and CPU: run them one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The zone of `node` when each of the three zones has `per_zone` nodes.
fn zone_of(node: u8, per_zone: u8) -> u8 {
    (node - 1) / per_zone + 1
}

/// The proxy in front of every node: forwards `127.x.1.N` to `127.x.0.N`,
/// refusing and breaking connections across a cut zone, and looking at
/// every byte it forwards ([`Tap`]).
struct Proxy {
    octet: u8,
    per_zone: u8,
    cut: Arc<Mutex<Option<u8>>>,
    conns: Arc<Mutex<Vec<(u8, u8, tokio::task::AbortHandle)>>>,
    tap: Arc<Mutex<Tap>>,
}

/// What the proxy saw on the wire between nodes (and anyone else who
/// connects through it): whether each connection opened with a TLS
/// handshake record, and whether a marker ever crossed in clear.
#[derive(Default)]
struct Tap {
    /// Connections that sent their first bytes (one just accepted and
    /// still silent is neither TLS nor clear yet).
    connections: u64,
    opened_with_tls: u64,
    marker: Vec<u8>,
    marker_seen: u64,
}

/// Forwards `from` to `to`, showing every byte to the tap.
async fn forward(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, tap: Arc<Mutex<Tap>>, first: bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 << 10];
    // The last bytes of the previous read, so a marker split across reads is found.
    let mut carry: Vec<u8> = Vec::new();
    let mut opened = !first;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut t = tap.lock().unwrap();
            if !opened {
                opened = true;
                t.connections += 1;
                // A TLS record of type handshake (22), version 3.x.
                if buf[0] == 0x16 && n > 1 && buf[1] == 0x03 {
                    t.opened_with_tls += 1;
                }
            }
            if !t.marker.is_empty() {
                carry.extend_from_slice(&buf[..n]);
                let m = t.marker.clone();
                t.marker_seen += carry.windows(m.len()).filter(|w| *w == &m[..]).count() as u64;
                let keep = carry.len().saturating_sub(m.len() - 1);
                carry.drain(..keep);
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Proxy {
    async fn start(octet: u8, per_zone: u8) -> Arc<Self> {
        let p = Arc::new(Self { octet, per_zone, cut: Arc::new(Mutex::new(None)), conns: Arc::new(Mutex::new(Vec::new())), tap: Arc::default() });
        // Three spare addresses beyond the first nodes, for nodes a test adds.
        for n in 1..=3 * per_zone + 3 {
            let l = TcpListener::bind((format!("127.{octet}.1.{n}"), PORT)).await.expect("bind proxy");
            let p = p.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((inbound, from)) = l.accept().await else { return };
                    // A node's connections leave from its real address; anything else is a client.
                    let src = match from.ip() {
                        std::net::IpAddr::V4(ip) if ip.octets()[1] == p.octet && ip.octets()[2] == 0 => zone_of(ip.octets()[3], p.per_zone),
                        _ => 0,
                    };
                    let dst = zone_of(n, p.per_zone);
                    if p.blocked(src, dst) {
                        drop(inbound);
                        continue;
                    }
                    let upstream = format!("127.{}.0.{n}:{PORT}", p.octet);
                    let tap = p.tap.clone();
                    let task = tokio::spawn(async move {
                        if let Ok(out) = TcpStream::connect(&upstream).await {
                            let ((in_r, in_w), (out_r, out_w)) = (inbound.into_split(), out.into_split());
                            let up = forward(in_r, out_w, tap.clone(), true);
                            let down = forward(out_r, in_w, tap, false);
                            tokio::join!(up, down);
                        }
                    });
                    let mut conns = p.conns.lock().unwrap();
                    conns.retain(|(_, _, h)| !h.is_finished());
                    conns.push((src, dst, task.abort_handle()));
                }
            });
        }
        p
    }

    fn blocked(&self, src: u8, dst: u8) -> bool {
        match *self.cut.lock().unwrap() {
            Some(z) => src != 0 && src != dst && (src == z || dst == z),
            None => false,
        }
    }

    /// Cuts zone `z` off from the others, breaking open connections too.
    fn cut(&self, z: u8) {
        *self.cut.lock().unwrap() = Some(z);
        for (src, dst, h) in self.conns.lock().unwrap().iter() {
            if self.blocked(*src, *dst) {
                h.abort();
            }
        }
    }

    fn heal(&self) {
        *self.cut.lock().unwrap() = None;
    }
}

struct Cluster {
    octet: u8,
    per_zone: u8,
    dir: PathBuf,
    procs: BTreeMap<u8, Child>,
    proxy: Arc<Proxy>,
    extra: Vec<String>,
    /// The cluster secret every node is started with.
    secret: PathBuf,
    /// How the test talks to nodes: as a holder of the secret (mutual TLS).
    opts: strata_client::ClientOptions,
}

impl Cluster {
    /// Every node id.
    fn nodes(&self) -> Vec<u8> {
        (1..=3 * self.per_zone).collect()
    }
    /// Nodes with a metadata member: the first of each zone.
    fn meta(&self) -> [u8; 3] {
        [1, 1 + self.per_zone, 1 + 2 * self.per_zone]
    }
    fn real(&self, n: u8) -> String {
        format!("127.{}.0.{n}:{PORT}", self.octet)
    }
    fn mapped(&self, n: u8) -> String {
        format!("127.{}.1.{n}:{PORT}", self.octet)
    }
    fn client(&self, n: u8) -> Client {
        Client::with_options(&format!("https://{}", self.real(n)), &self.opts)
    }

    fn spawn(&mut self, n: u8) {
        let secret = self.secret.clone();
        self.spawn_with(n, &secret);
    }

    /// Starts node `n` with the cluster secret at `secret` (another
    /// cluster's, to see it refused).
    fn spawn_with(&mut self, n: u8, secret: &std::path::Path) {
        let meta: Vec<String> = self.meta().iter().map(|&m| format!("{m}={}", self.mapped(m))).collect();
        let data = self.dir.join(format!("n{n}"));
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(format!("n{n}.log"))).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["server", "--data-dir"])
            .arg(&data)
            .args(["--listen", &self.real(n), "--node-id", &n.to_string(), "--meta", &meta.join(",")])
            .args(["--outbound-ip", &format!("127.{}.0.{n}", self.octet)])
            .arg("--cluster-secret")
            .arg(secret)
            .args(["--chunk-size", "1MiB", "--segment-size", "16MiB", "--disk-reserve", "0", "--failure-wait-ms", "1000"])
            .args(if self.extra.iter().any(|a| a == "--replica-capacity") { &[][..] } else { &["--replica-capacity", "256MiB"][..] })
            // Several nodes share this machine: a small tail cache each.
            .args(["--tail-cache", "32MiB"])
            .args(&self.extra)
            .env("STRATA_LOG", std::env::var("STRATA_TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn strata");
        self.procs.insert(n, child);
    }

    /// SIGTERM: the node shuts down cleanly (its index is persisted).
    fn stop(&mut self, n: u8) {
        if let Some(mut c) = self.procs.remove(&n) {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }

    fn kill9(&mut self, n: u8) {
        if let Some(mut c) = self.procs.remove(&n) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP (`stop = true`) or SIGCONT: the node freezes (it answers
    /// nothing, heartbeats stop) and later resumes as it was.
    fn pause(&self, n: u8, stop: bool) {
        let pid = self.procs.get(&n).expect("a running node").id() as i32;
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(pid, if stop { libc::SIGSTOP } else { libc::SIGCONT }) };
    }

    /// Waits until node `via`'s map says what `check` wants of it.
    async fn map_until(&self, via: u8, within: Duration, what: &str, check: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(v) = self.status(via).await
                && check(&v)
            {
                return v;
            }
            assert!(Instant::now() < deadline, "node {via}'s map never showed {what} within {within:?}: {:?}", self.status(via).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_healthy(&self, n: u8) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.client(n).json(http::Method::GET, "/health").await.is_err() {
            assert!(Instant::now() < deadline, "node {n} never became healthy; log:\n{}", self.log(n));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log(&self, n: u8) -> String {
        let s = std::fs::read_to_string(self.dir.join(format!("n{n}.log"))).unwrap_or_default();
        s[s.len().saturating_sub(4000)..].to_string()
    }

    async fn command(&self, via: u8, cmd: serde_json::Value) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.client(via).post_json("/admin/cluster/command", &cmd).await {
                Ok(v) => {
                    assert!(v.get("Refused").is_none(), "{cmd} refused: {v}");
                    return v;
                }
                Err(e) => {
                    assert!(Instant::now() < deadline, "{cmd} failed: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    async fn status(&self, n: u8) -> Option<serde_json::Value> {
        self.client(n).json(http::Method::GET, "/admin/cluster/status").await.ok()
    }

    /// Starts nine nodes, forms the metadata group, registers the nodes and
    /// their disks and creates `partitions` partitions with 3 replicas per zone.
    async fn start(octet: u8, partitions: u32, extra: &[&str]) -> Cluster {
        Self::start_zones(octet, PER_ZONE, partitions, extra).await
    }

    /// Like [`Cluster::start`] with `per_zone` nodes (and replicas) per zone.
    async fn start_zones(octet: u8, per_zone: u8, partitions: u32, extra: &[&str]) -> Cluster {
        let dir = tempfile::Builder::new().prefix("strata-cluster").tempdir().expect("tempdir").keep();
        let proxy = Proxy::start(octet, per_zone).await;
        let (secret, opts) = common::cluster_secret(&dir);
        let mut c = Cluster { octet, per_zone, dir, procs: BTreeMap::new(), proxy, extra: extra.iter().map(|s| s.to_string()).collect(), secret, opts };
        for n in c.nodes() {
            c.spawn(n);
        }
        for n in c.nodes() {
            c.wait_healthy(n).await;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = c.client(1).post_json("/admin/cluster/init", &serde_json::json!({})).await {
            assert!(Instant::now() < deadline, "init failed: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for n in c.nodes() {
            let zone = format!("z{}", zone_of(n, per_zone));
            let cmd = serde_json::json!({ "AddNode": { "id": n, "addr": c.mapped(n), "zone": zone, "rack": format!("r{}", (n - 1) % 3 + 1) } });
            c.command(n, cmd).await;
            c.command(n, serde_json::json!({ "AddDisk": { "node": n, "path": "d0", "capacity_bytes": 4u64 << 30 } })).await;
        }
        c.command(2, serde_json::json!({ "AddPartitions": { "count": partitions, "replicas_per_zone": per_zone, "capacity_bytes": 256u64 << 20 } })).await;
        // Every node opens its replicas.
        for n in c.nodes() {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let v = c.client(n).json(http::Method::GET, "/admin/partitions").await.unwrap_or_default();
                if v.as_array().map_or(0, |a| a.len()) == partitions as usize {
                    break;
                }
                assert!(Instant::now() < deadline, "node {n} did not open its replicas");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        c
    }

    /// Every replica's index of every partition, per node.
    async fn indexes(&self, nodes: &[u8]) -> BTreeMap<u8, BTreeMap<u64, Vec<(String, String)>>> {
        let mut out = BTreeMap::new();
        for &n in nodes {
            let mut per = BTreeMap::new();
            let parts = self.client(n).json(http::Method::GET, "/admin/partitions").await.unwrap_or_default();
            for p in parts.as_array().into_iter().flatten() {
                let pid = p["partition"].as_u64().unwrap_or(0);
                let blobs = self.client(n).json(http::Method::GET, &format!("/admin/partitions/{pid}/blobs")).await.unwrap_or_default();
                let mut rows: Vec<(String, String)> = blobs
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|b| (b["id"].as_str().unwrap_or("").to_string(), b["state"].as_str().unwrap_or("").to_string()))
                    .collect();
                rows.sort();
                per.insert(pid, rows);
            }
            out.insert(n, per);
        }
        out
    }

    /// Waits until every replica of every partition on `nodes` holds the same
    /// keys in the same states: the checker of replica convergence.
    async fn converged(&self, nodes: &[u8], within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let idx = self.indexes(nodes).await;
            let first = idx.values().next().cloned().unwrap_or_default();
            let non_empty = first.values().any(|v| !v.is_empty());
            if non_empty && idx.values().all(|v| *v == first) {
                return;
            }
            if Instant::now() > deadline {
                let diff: Vec<String> = idx
                    .iter()
                    .flat_map(|(n, parts)| {
                        parts.iter().filter(|(p, rows)| first.get(p) != Some(rows)).map(move |(p, rows)| format!("node {n} partition {p}: {} keys", rows.len()))
                    })
                    .collect();
                panic!("replicas did not converge: {diff:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until `via`'s failure detector holds no node down.
    async fn detector_clear(&self, via: u8) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.status(via).await.unwrap_or_default();
            let down = s["failure_detector"].as_array().into_iter().flatten().any(|h| h["health"].as_str().is_some_and(|x| x.starts_with("Down")));
            if !down {
                return;
            }
            assert!(Instant::now() < deadline, "node {via} keeps nodes marked down: {}", s["failure_detector"]);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts node `n` beyond the first `3 × per_zone` and adds it (and
    /// its disk) to zone `zone` of the map.
    async fn add_node(&mut self, n: u8, zone: u8) {
        self.spawn(n);
        self.wait_healthy(n).await;
        let cmd = serde_json::json!({ "AddNode": { "id": n, "addr": self.mapped(n), "zone": format!("z{zone}"), "rack": "r9" } });
        self.command(1, cmd).await;
        self.command(1, serde_json::json!({ "AddDisk": { "node": n, "path": "d0", "capacity_bytes": 4u64 << 30 } })).await;
        // A command returns once committed; node 1 may publish the entry a
        // moment later. Callers compare maps read from node 1 next.
        let key = n.to_string();
        self.map_until(1, Duration::from_secs(10), "the new node's disk", |v| {
            v["map"]["nodes"][key.as_str()]["disks"].as_array().is_some_and(|d| !d.is_empty())
        })
        .await;
    }

    /// Runs the `strata` CLI against node `via` as a holder of the secret.
    fn cli(&self, via: u8, args: &[&str]) -> (bool, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(args)
            .args(["--server", &format!("https://{}", self.real(via)), "--cluster-secret"])
            .arg(&self.secret)
            .output()
            .expect("run strata");
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }

    async fn leader(&self) -> Option<u8> {
        for m in self.meta() {
            if !self.procs.contains_key(&m) {
                continue;
            }
            if let Some(s) = self.status(m).await
                && let Some(l) = s["meta"]["leader"].as_u64()
            {
                return Some(l as u8);
            }
        }
        None
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, c) in self.procs.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("cluster data and logs kept in {}", self.dir.display());
        }
    }
}

async fn put(c: &Client, data: &[u8], policy: Option<&str>) -> String {
    let args = PutArgs { policy: policy.map(String::from), ..PutArgs::default() };
    c.put_bytes(data.to_vec(), &args).await.unwrap_or_else(|e| panic!("put of {} bytes: {e}", data.len())).id
}

async fn get_ok(c: &Client, id: &str, want: &[u8]) {
    let got = c.get_bytes(id).await.unwrap_or_else(|e| panic!("get {id} from {}: {e}", c.base()));
    assert!(got[..] == *want, "get {id} from {} returned different bytes", c.base());
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(name)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Whether node `n`'s own replica holds `id` live (its index, not a proxied get).
async fn holds(c: &Cluster, n: u8, id: &str) -> bool {
    let pid = strata_types::BlobId::parse(id).expect("an id").partition();
    let blobs = c.client(n).json(http::Method::GET, &format!("/admin/partitions/{pid}/blobs")).await.unwrap_or_default();
    blobs.as_array().into_iter().flatten().any(|b| b["id"] == id && b["state"] == "live")
}

/// Waits until node `n`'s replication tokens against `peers`, as its tokens
/// files hold them (where replication starts again after a crash; the file
/// is written at most once a second), reach every record those peers hold
/// now.
async fn caught_up(c: &Cluster, n: u8, peers: &[u8]) {
    let mut target = BTreeMap::new();
    for &peer in peers {
        let parts = c.client(peer).json(http::Method::GET, "/admin/partitions").await.expect("partitions");
        for p in parts.as_array().into_iter().flatten() {
            target.insert((p["partition"].as_u64().unwrap_or(0), peer as u64), p["next_lsn"].as_u64().unwrap_or(1).saturating_sub(1));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lag = c.client(n).json(http::Method::GET, "/admin/replication").await.unwrap_or_default();
        let tokens: BTreeMap<(u64, u64), u64> = lag
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| ((l["partition"].as_u64().unwrap_or(0), l["peer"].as_u64().unwrap_or(0)), l["token_persisted_lsn"].as_u64().unwrap_or(0)))
            .collect();
        if target.iter().all(|(pair, lsn)| tokens.get(pair).is_some_and(|t| t >= lsn)) {
            return;
        }
        assert!(Instant::now() < deadline, "node {n} never caught up with {peers:?}: {lag}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every log segment file under node `n`'s data directory.
fn segment_files(c: &Cluster, n: u8) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let parts = c.dir.join(format!("n{n}/d0/partitions"));
    for p in std::fs::read_dir(&parts).expect("partitions").flatten() {
        for f in std::fs::read_dir(p.path()).expect("replica").flatten() {
            if f.path().extension().is_some_and(|e| e == "log") && f.file_name().to_string_lossy().starts_with("seg-") {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

/// Starts a scrub pass on node `n` and returns its status once finished.
async fn scrub_now(c: &Cluster, n: u8, deep: bool) -> serde_json::Value {
    pass_now(c, n, "/admin/scrub", serde_json::json!({ "deep": deep })).await
}

/// Starts a background pass (`/admin/scrub`, `/admin/sweep`) on node `n`
/// and returns its status once finished.
async fn pass_now(c: &Cluster, n: u8, path: &str, body: serde_json::Value) -> serde_json::Value {
    let before = c.client(n).json(http::Method::GET, path).await.expect("pass status")["passes"].as_u64().unwrap_or(0);
    c.client(n).post_json(path, &body).await.expect("start a pass");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = c.client(n).json(http::Method::GET, path).await.expect("pass status");
        if v["passes"].as_u64().unwrap_or(0) > before && v["running"] == false {
            return v;
        }
        assert!(Instant::now() < deadline, "node {n}'s {path} pass never finished: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every node's map holds the table and every node opened its
/// replicas of the rows (beside its `blobs` replicas of blob partitions).
async fn table_everywhere(c: &Cluster, blobs: usize) -> serde_json::Value {
    let mut table = serde_json::Value::Null;
    for n in c.nodes() {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(t) = c.client(n).json(http::Method::GET, "/admin/tracts").await {
                let mine = t["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["disks"].as_array().unwrap().iter().any(|d| d.as_str().unwrap().starts_with(&format!("{n}:"))))
                    .count();
                let open = c.client(n).json(http::Method::GET, "/admin/partitions").await.map_or(0, |v| v.as_array().map_or(0, Vec::len));
                if open >= mine + blobs {
                    table = t;
                    break;
                }
            }
            assert!(Instant::now() < deadline, "node {n} never opened its rows of the tract table");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    table
}
