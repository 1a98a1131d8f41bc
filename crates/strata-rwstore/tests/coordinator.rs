//! Read-write stores over several nodes in one process: each node a real
//! engine store in its own directory, the network an in-memory transport
//! that can take a node down or cut it off. (The multi-process tests with
//! real nodes are the server's.)

use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use strata_engine::{EngineConfig, Store};
use strata_rwstore::{Coordinator, LocalStore, PutOutcome, RwError, StorePolicy, Transport, VectorClock, Versioned, resolve};
use strata_types::SystemClock;

#[derive(Default)]
struct Net {
    stores: Mutex<HashMap<u64, Arc<LocalStore>>>,
    /// Nodes that answer nobody.
    down: Mutex<HashSet<u64>>,
    /// Nodes cut off: they reach nobody and nobody reaches them.
    cut: Mutex<HashSet<u64>>,
    /// Requests sent to each node: single-key gets and many-key gets.
    gets: Mutex<HashMap<u64, (u64, u64)>>,
}

impl Net {
    fn reach(&self, from: u64, to: u64) -> Result<Arc<LocalStore>, RwError> {
        let unreachable = |why: &str| RwError::Unreachable { node: to, detail: why.into() };
        if self.down.lock().unwrap().contains(&to) {
            return Err(unreachable("down"));
        }
        let cut = self.cut.lock().unwrap();
        if cut.contains(&to) != cut.contains(&from) {
            return Err(unreachable("cut off"));
        }
        Ok(self.stores.lock().unwrap()[&to].clone())
    }
}

struct Link {
    from: u64,
    net: Arc<Net>,
}

impl Transport for Link {
    fn get(&self, node: u64, store: &str, key: &Bytes) -> futures_util::future::BoxFuture<'static, Result<Vec<Versioned>, RwError>> {
        let r = self.net.reach(self.from, node);
        self.net.gets.lock().unwrap().entry(node).or_default().0 += 1;
        let (store, key) = (store.to_string(), key.clone());
        Box::pin(async move { tokio::task::spawn_blocking(move || r?.get(&store, &key)).await.unwrap() })
    }
    fn get_many(&self, node: u64, store: &str, keys: Vec<Bytes>) -> futures_util::future::BoxFuture<'static, Result<Vec<Vec<Versioned>>, RwError>> {
        let r = self.net.reach(self.from, node);
        self.net.gets.lock().unwrap().entry(node).or_default().1 += 1;
        let store = store.to_string();
        Box::pin(async move { tokio::task::spawn_blocking(move || r.and_then(|l| keys.iter().map(|k| l.get(&store, k)).collect())).await.unwrap() })
    }
    fn put(&self, node: u64, store: &str, key: &Bytes, v: &Versioned) -> futures_util::future::BoxFuture<'static, Result<PutOutcome, RwError>> {
        let r = self.net.reach(self.from, node);
        let (store, key, v) = (store.to_string(), key.clone(), v.clone());
        Box::pin(async move { r?.put(&store, &key, &v).await })
    }
}

struct Cluster {
    _dirs: Vec<tempfile::TempDir>,
    _stores: Vec<Store>,
    net: Arc<Net>,
    nodes: Vec<Coordinator>,
}

fn cluster(n: u64) -> Cluster {
    cluster_on(n, Arc::new(SystemClock))
}

/// A cluster whose nodes all read `clock`.
fn cluster_on(n: u64, clock: Arc<dyn strata_types::Clock>) -> Cluster {
    let net = Arc::new(Net::default());
    let (mut dirs, mut stores, mut nodes) = (Vec::new(), Vec::new(), Vec::new());
    for id in 1..=n {
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig { disk_reserve_bytes: 0, tail_cache_bytes: 0, write_cache_bytes: 0, ..EngineConfig::default() };
        let store = Store::open(dir.path(), config, Arc::new(SystemClock)).unwrap();
        let local = Arc::new(LocalStore::new(store.create_replica(1).unwrap()));
        let slop = Arc::new(LocalStore::new(store.create_replica(2).unwrap()));
        net.stores.lock().unwrap().insert(id, local.clone());
        nodes.push(Coordinator::new(id, local, slop, Arc::new(Link { from: id, net: net.clone() }), clock.clone()));
        dirs.push(dir);
        stores.push(store);
    }
    Cluster { _dirs: dirs, _stores: stores, net, nodes }
}

fn policy(r: u32, w: u32) -> StorePolicy {
    StorePolicy { name: "counters".into(), required_reads: r, required_writes: w, value_limit: 1 << 20 }
}

/// A client routing as Spock's does: gets through `via`, puts through the
/// first node of the preference list it can reach (the pseudo-master).
struct Client<'a> {
    c: &'a Cluster,
    via: u64,
    pref: Vec<u64>,
    policy: StorePolicy,
}

impl Client<'_> {
    fn master(&self) -> &Coordinator {
        let down = self.c.net.down.lock().unwrap().clone();
        let cut = self.c.net.cut.lock().unwrap().clone();
        let id = *self.pref.iter().find(|n| !down.contains(n) && cut.contains(n) == cut.contains(&self.via)).expect("a reachable master");
        &self.c.nodes[id as usize - 1]
    }
}

impl Client<'_> {
    async fn get(&self, _store: &str, key: &[u8]) -> Result<Vec<Versioned>, RwError> {
        self.c.nodes[self.via as usize - 1].get(&self.policy, &self.pref, Bytes::copy_from_slice(key)).await
    }
    async fn put(&self, _store: &str, key: &[u8], value: Option<Bytes>, clock: &VectorClock) -> Result<VectorClock, RwError> {
        self.master().put(&self.policy, &self.pref, Bytes::copy_from_slice(key), value, clock).await
    }
}

/// applyUpdate as `RwClient::apply_update` runs it, over this test's client:
/// a get, the new value from the live ones, a put with the covering clock,
/// again while the put comes back obsolete.
async fn apply_update(api: &Client<'_>, store: &str, key: &[u8], tries: u32, mut f: impl FnMut(&[Bytes]) -> Bytes) -> Result<VectorClock, RwError> {
    let mut last = None;
    for _ in 0..tries {
        let versions = api.get(store, key).await?;
        let clock = VectorClock::covering(versions.iter().map(|v| &v.clock));
        let live: Vec<Bytes> = versions.into_iter().filter_map(|v| v.value).collect();
        match api.put(store, key, Some(f(&live)), &clock).await {
            Err(e) if e.is_obsolete() => last = Some(e),
            r => return r,
        }
    }
    Err(last.expect("at least one try"))
}

fn count(live: &[Bytes]) -> u64 {
    live.iter().map(|b| std::str::from_utf8(b).unwrap().parse::<u64>().unwrap()).max().unwrap_or(0)
}

/// Done-when (a), in process: N clients x K applyUpdate increments of one
/// counter, through different nodes; the count is N x K.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apply_update_counts_every_increment() {
    let c = Arc::new(cluster(3));
    let (clients, k) = (4u64, 25u64);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let client = Client { c: &c, via: 1 + i % 3, pref: vec![1, 2, 3], policy: policy(2, 2) };
            for _ in 0..k {
                apply_update(&client, "counters", b"hits", 1000, |live| Bytes::from((count(live) + 1).to_string())).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let client = Client { c: &c, via: 2, pref: vec![1, 2, 3], policy: policy(2, 2) };
    let got = client.get("counters", b"hits").await.unwrap();
    assert_eq!(got.len(), 1, "no siblings: every put went through the master");
    assert_eq!(count(&[got[0].value.clone().unwrap()]), clients * k);
}

/// Done-when (b), in process: writes on both sides of a cut make
/// siblings; a get after the cut heals returns both; a put with the merged
/// clock resolves them on every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_on_both_sides_of_a_cut_are_siblings_until_resolved() {
    let c = cluster(3);
    let pol = policy(1, 1);
    let majority = Client { c: &c, via: 1, pref: vec![1, 2, 3], policy: pol.clone() };
    let first = majority.put("s", b"k", Some(Bytes::from_static(b"v0")), &VectorClock::new()).await.unwrap();
    // Let the background writes land everywhere.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    c.net.cut.lock().unwrap().insert(3);
    let minority = Client { c: &c, via: 3, pref: vec![1, 2, 3], policy: pol.clone() };
    let a = majority.put("s", b"k", Some(Bytes::from_static(b"left")), &first).await.unwrap();
    let b = minority.put("s", b"k", Some(Bytes::from_static(b"right")), &first).await.unwrap();
    assert_eq!(a.compare(&b), strata_rwstore::Occurred::Concurrent, "{a} and {b}");
    c.net.cut.lock().unwrap().clear();
    let all = Client { c: &c, via: 2, pref: vec![1, 2, 3], policy: policy(3, 3) };
    let siblings = all.get("s", b"k").await.unwrap();
    let mut values: Vec<&[u8]> = siblings.iter().map(|v| &v.value.as_ref().unwrap()[..]).collect();
    values.sort();
    assert_eq!(values, vec![&b"left"[..], b"right"]);
    let merged = VectorClock::covering(siblings.iter().map(|v| &v.clock));
    all.put("s", b"k", Some(Bytes::from_static(b"both")), &merged).await.unwrap();
    let resolved = all.get("s", b"k").await.unwrap();
    assert_eq!(resolved.iter().map(|v| v.value.clone().unwrap()).collect::<Vec<_>>(), vec![Bytes::from_static(b"both")]);
    for node in &c.nodes {
        let held = resolve(node.local().get("counters", b"k").unwrap());
        assert_eq!(held.iter().map(|v| v.value.clone().unwrap()).collect::<Vec<_>>(), vec![Bytes::from_static(b"both")], "node {}", node.node());
    }
}

/// Done-when (c), in process: a node down during a put gets it by hinted
/// handoff once back (its replica read directly), and a stale replica is
/// fixed by read repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hinted_handoff_and_read_repair_bring_a_replica_up_to_date() {
    let c = cluster(3);
    let pol = policy(2, 2);
    let client = Client { c: &c, via: 1, pref: vec![1, 2, 3], policy: pol.clone() };
    c.net.down.lock().unwrap().insert(3);
    let clock = client.put("s", b"k", Some(Bytes::from_static(b"v1")), &VectorClock::new()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let master = &c.nodes[0];
    assert_eq!(master.hints_pending().await.unwrap(), 1);
    assert!(master.local().entries(strata_rwstore::SLOP_STORE).unwrap().is_empty(), "a hint went to the data replica");
    assert!(c.nodes[2].local().get("counters", b"k").unwrap().is_empty(), "node 3 was down");
    // Still down: the push fails and the hint stays.
    let r = master.push_hints().await.unwrap();
    assert_eq!((r.pushed, r.failed), (0, 1));
    c.net.down.lock().unwrap().clear();
    let r = master.push_hints().await.unwrap();
    assert_eq!((r.pushed, r.pending), (1, 0));
    let held = c.nodes[2].local().get("counters", b"k").unwrap();
    assert_eq!(held, vec![Versioned::value(&b"v1"[..], clock.clone())]);
    assert_eq!(master.hints_pending().await.unwrap(), 0);
    // Read repair: node 2's replica misses the next version (written to
    // the others directly), and a get brings it there.
    let v2 = Versioned::value(&b"v2"[..], clock.incremented(1, 0));
    for n in [0, 2] {
        c.nodes[n].local().put("counters", b"k", &v2).await.unwrap();
    }
    let reader = Client { c: &c, via: 2, pref: vec![1, 2, 3], policy: pol };
    let got = reader.get("s", b"k").await.unwrap();
    assert_eq!(got, vec![v2.clone()]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while c.nodes[1].local().get("counters", b"k").unwrap() != vec![v2.clone()] {
        assert!(std::time::Instant::now() < deadline, "read repair never reached node 2");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(c.nodes[1].stats().read_repairs.load(std::sync::atomic::Ordering::Relaxed) >= 1);
}

/// A hint an earlier version kept in the data replica (before hints had
/// a replica of their own) is moved to the slop replica by the first push
/// and delivered like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_kept_with_the_data_by_an_earlier_version_are_moved_and_delivered() {
    let c = cluster(3);
    let v = Versioned::value(&b"v1"[..], VectorClock::new().incremented(1, strata_types::Clock::now_ms(&SystemClock)));
    // The slop store's key of a hint: target node, store, key.
    let mut hk = 3u64.to_be_bytes().to_vec();
    hk.push(8);
    hk.extend_from_slice(b"counters");
    hk.extend_from_slice(b"old");
    let master = &c.nodes[0];
    master.local().put(strata_rwstore::SLOP_STORE, &hk, &v).await.unwrap();
    let r = master.push_hints().await.unwrap();
    assert_eq!((r.pushed, r.failed), (1, 0));
    assert_eq!(c.nodes[2].local().get("counters", b"old").unwrap(), vec![v]);
    assert!(master.local().entries(strata_rwstore::SLOP_STORE).unwrap().is_empty(), "the old hint stayed with the data");
    assert_eq!(master.hints_pending().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_puts_are_refused_and_change_nothing() {
    let c = cluster(3);
    let client = Client { c: &c, via: 1, pref: vec![1, 2, 3], policy: policy(2, 2) };
    let clock = client.put("s", b"k", Some(Bytes::from_static(b"v1")), &VectorClock::new()).await.unwrap();
    client.put("s", b"k", Some(Bytes::from_static(b"v2")), &clock).await.unwrap();
    // A stale clock: obsolete.
    let e = client.put("s", b"k", Some(Bytes::from_static(b"stale")), &clock).await.unwrap_err();
    assert!(matches!(e, RwError::Obsolete { .. }), "{e}");
    // Over the limit.
    let small = StorePolicy { value_limit: 4, ..policy(2, 2) };
    let e = c.nodes[0].put(&small, &[1, 2, 3], Bytes::from_static(b"k"), Some(Bytes::from_static(b"too long")), &clock).await.unwrap_err();
    assert!(matches!(e, RwError::TooLarge { size: 8, limit: 4, .. }), "{e}");
    // Required writes that cannot be met: says how many acks came back.
    c.net.down.lock().unwrap().extend([2, 3]);
    let latest = c.nodes[0].local().get("counters", b"k").unwrap()[0].clock.clone();
    let e = client.put("s", b"k", Some(Bytes::from_static(b"lonely")), &latest).await.unwrap_err();
    assert!(matches!(e, RwError::InsufficientReplicas { got: 1, required: 2, .. }), "{e}");
    assert!(e.to_string().contains("1 of 2"), "{e}");
    c.net.down.lock().unwrap().clear();
    let got = client.get("s", b"k").await.unwrap();
    assert!(got.iter().any(|v| v.value.as_deref() == Some(&b"v2"[..]) || v.value.as_deref() == Some(&b"lonely"[..])));
    assert!(got.iter().all(|v| v.value.as_deref() != Some(&b"stale"[..]) && v.value.as_deref() != Some(&b"too long"[..])));
    // A delete is a version: it wins over the value and reads as absent.
    let current = VectorClock::covering(resolve(got).iter().map(|v| &v.clock));
    client.put("s", b"k", None, &current).await.unwrap();
    let after = client.get("s", b"k").await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].value, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transforms_run_on_the_server() {
    let c = cluster(3);
    let pol = policy(2, 2);
    for item in ["1", "\"two\"", "{\"three\":3}", "4"] {
        c.nodes[0].put_transformed(&pol, &[1, 2, 3], Bytes::from_static(b"list"), Bytes::from(item), "append").await.unwrap();
    }
    let got = c.nodes[1].get(&pol, &[1, 2, 3], Bytes::from_static(b"list")).await.unwrap();
    assert_eq!(got.len(), 1);
    let value = got[0].value.clone().unwrap();
    assert_eq!(&value[..], br#"[1,"two",{"three":3},4]"#);
    let sub = strata_rwstore::transform::by_name("sublist").unwrap().on_get(&value, b"1:3").unwrap().unwrap();
    assert_eq!(sub, br#"["two",{"three":3}]"#);
    let e = c.nodes[0].put_transformed(&pol, &[1, 2, 3], Bytes::from_static(b"list"), Bytes::from_static(b"5"), "sublist").await.unwrap_err();
    assert!(e.to_string().contains("does not apply to puts"), "{e}");
    let e = c.nodes[0].put_transformed(&pol, &[1, 2, 3], Bytes::from_static(b"list"), Bytes::from_static(b"5"), "nope").await.unwrap_err();
    assert!(matches!(e, RwError::UnknownTransform(_)));
}

/// Waits until node `n` (1-based) holds exactly `want` of `key`.
async fn holds(c: &Cluster, n: usize, key: &[u8], want: &[Versioned]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while c.nodes[n - 1].local().get("counters", key).unwrap() != want {
        assert!(std::time::Instant::now() < deadline, "node {n} holds {:?}, want {want:?}", c.nodes[n - 1].local().get("counters", key).unwrap());
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

const GRACE_MS: u64 = 10_000;

fn grace_cluster() -> (Cluster, strata_types::ManualClock) {
    let clock = strata_types::ManualClock::new(1_000_000);
    let c = cluster_on(3, Arc::new(clock.clone()));
    for n in &c.nodes {
        n.set_delete_grace_ms(GRACE_MS);
    }
    (c, clock)
}

fn route(_: &str, _: &[u8]) -> Option<Vec<u64>> {
    Some(vec![1, 2, 3])
}

/// A delete is kept for the grace, and after it while any replica cannot
/// confirm it holds the delete (or nothing); then each node reclaims its
/// copy, and the key reads as never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_are_reclaimed_past_the_grace_once_every_replica_holds_them() {
    let (c, clock) = grace_cluster();
    let client = Client { c: &c, via: 1, pref: vec![1, 2, 3], policy: policy(2, 2) };
    let c1 = client.put("s", b"k", Some(Bytes::from_static(b"v1")), &VectorClock::new()).await.unwrap();
    client.put("s", b"kept", Some(Bytes::from_static(b"live")), &VectorClock::new()).await.unwrap();
    let c2 = client.put("s", b"k", None, &c1).await.unwrap();
    for n in 1..=3 {
        holds(&c, n, b"k", &[Versioned::deleted(c2.clone())]).await;
    }
    let r = c.nodes[0].reclaim_deletes(&route).await.unwrap();
    assert_eq!((r.examined, r.reclaimed), (0, 0), "within the grace");
    clock.advance(GRACE_MS + 1);
    // A replica that does not answer cannot confirm it holds the delete.
    c.net.down.lock().unwrap().insert(3);
    let r = c.nodes[0].reclaim_deletes(&route).await.unwrap();
    assert_eq!((r.examined, r.reclaimed, r.kept), (1, 0, 1));
    holds(&c, 1, b"k", &[Versioned::deleted(c2.clone())]).await;
    c.net.down.lock().unwrap().clear();
    for n in 0..3 {
        let r = c.nodes[n].reclaim_deletes(&route).await.unwrap();
        assert_eq!((r.examined, r.reclaimed), (1, 1), "node {}", n + 1);
        assert_eq!(c.nodes[n].stats().deletes_reclaimed.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
    for n in 1..=3 {
        holds(&c, n, b"k", &[]).await;
        assert_eq!(c.nodes[n - 1].local().get("counters", b"kept").unwrap().len(), 1, "a live value is not touched");
    }
    assert!(client.get("s", b"k").await.unwrap().is_empty());
    // The key takes new writes as a fresh one.
    client.put("s", b"k", Some(Bytes::from_static(b"again")), &VectorClock::new()).await.unwrap();
    assert_eq!(client.get("s", b"k").await.unwrap().iter().map(|v| v.value.clone()).collect::<Vec<_>>(), vec![Some(Bytes::from_static(b"again"))]);
}

/// A replica that missed the delete still holds the old value: the others
/// keep the delete (it must still replace that value), read repair brings
/// it there, and only then does it go everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_is_kept_while_a_replica_holds_an_older_value() {
    let (c, clock) = grace_cluster();
    let client = Client { c: &c, via: 1, pref: vec![1, 2, 3], policy: policy(2, 2) };
    let c1 = client.put("s", b"k", Some(Bytes::from_static(b"v1")), &VectorClock::new()).await.unwrap();
    holds(&c, 3, b"k", &[Versioned::value(&b"v1"[..], c1.clone())]).await;
    c.net.down.lock().unwrap().insert(3);
    let c2 = client.put("s", b"k", None, &c1).await.unwrap();
    c.net.down.lock().unwrap().clear();
    // Its hint is dropped: node 3 is left to read repair.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    clock.advance(GRACE_MS + 1);
    let r = c.nodes[0].push_hints().await.unwrap();
    assert_eq!((r.expired, r.pushed), (1, 0), "a hint older than half the grace is not delivered");
    for n in 0..2 {
        let r = c.nodes[n].reclaim_deletes(&route).await.unwrap();
        assert_eq!((r.examined, r.reclaimed, r.kept), (1, 0, 1), "node {}: node 3 still holds v1", n + 1);
    }
    holds(&c, 3, b"k", &[Versioned::value(&b"v1"[..], c1.clone())]).await;
    // A get reads all three and repairs node 3.
    let reader = Client { c: &c, via: 2, pref: vec![1, 2, 3], policy: policy(2, 2) };
    assert_eq!(reader.get("s", b"k").await.unwrap(), vec![Versioned::deleted(c2.clone())]);
    holds(&c, 3, b"k", &[Versioned::deleted(c2.clone())]).await;
    for n in 0..3 {
        assert_eq!(c.nodes[n].reclaim_deletes(&route).await.unwrap().reclaimed, 1, "node {}", n + 1);
    }
    for n in 1..=3 {
        holds(&c, n, b"k", &[]).await;
    }
}

/// A hint of a value older than a delete is dropped before the delete
/// may be reclaimed: delivered after it, it would bring the value back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_hint_does_not_bring_back_a_reclaimed_delete() {
    let (c, clock) = grace_cluster();
    let client = Client { c: &c, via: 1, pref: vec![1, 2, 3], policy: policy(2, 2) };
    c.net.down.lock().unwrap().insert(3);
    let c1 = client.put("s", b"k", Some(Bytes::from_static(b"v1")), &VectorClock::new()).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while c.nodes[0].hints_pending().await.unwrap() != 1 {
        assert!(std::time::Instant::now() < deadline, "no hint for node 3");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // Node 3 is back and takes the delete; the hint of v1 is not pushed yet.
    c.net.down.lock().unwrap().clear();
    let c2 = client.put("s", b"k", None, &c1).await.unwrap();
    for n in 1..=3 {
        holds(&c, n, b"k", &[Versioned::deleted(c2.clone())]).await;
    }
    clock.advance(GRACE_MS + 1);
    for n in 0..3 {
        assert_eq!(c.nodes[n].reclaim_deletes(&route).await.unwrap().reclaimed, 1, "node {}", n + 1);
    }
    let r = c.nodes[0].push_hints().await.unwrap();
    assert_eq!((r.pushed, r.expired, r.pending), (0, 1, 0));
    holds(&c, 3, b"k", &[]).await;
    assert!(client.get("s", b"k").await.unwrap().is_empty(), "the old value came back");
}

/// A multi-get sends each node one request for all the keys it holds,
/// answers as key-by-key gets do, in order, repairs what it finds stale,
/// and fails when a key misses its required reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_get_asks_each_node_once_and_answers_as_gets_do() {
    let c = cluster(3);
    let pol = policy(2, 2);
    let prefs = [vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2]];
    let mut written = Vec::new();
    for i in 0..30u64 {
        let pref = prefs[i as usize % 3].clone();
        let key = Bytes::from(format!("k{i}"));
        let master = &c.nodes[pref[0] as usize - 1];
        master.put(&pol, &pref, key.clone(), Some(Bytes::from(format!("v{i}"))), &VectorClock::new()).await.unwrap();
        written.push((key, pref));
    }
    written.push((Bytes::from_static(b"never"), vec![1, 2, 3]));
    for (key, _) in &written[..30] {
        for n in 1..=3 {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while c.nodes[n - 1].local().get("counters", key).unwrap().is_empty() {
                assert!(std::time::Instant::now() < deadline, "node {n} never got {key:?}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
    // Node 3 misses a newer version of k0, written to the others only.
    let old = c.nodes[0].local().get("counters", b"k0").unwrap();
    let newer = Versioned::value(&b"v0-new"[..], old[0].clock.incremented(1, 1));
    for n in [0, 1] {
        c.nodes[n].local().put("counters", b"k0", &newer).await.unwrap();
    }
    c.net.gets.lock().unwrap().clear();
    let got = c.nodes[0].get_many(&pol, written.clone()).await.unwrap();
    let asked = c.net.gets.lock().unwrap().clone();
    assert_eq!(asked.get(&2), Some(&(0, 1)), "node 2: one request for every key: {asked:?}");
    assert_eq!(asked.get(&3), Some(&(0, 1)), "node 3: one request for every key: {asked:?}");
    assert_eq!(got.len(), written.len());
    // Repaired by the multi-get itself (before any single get reads k0).
    holds(&c, 3, b"k0", std::slice::from_ref(&newer)).await;
    for (i, ((key, pref), versions)) in written.iter().zip(&got).enumerate() {
        let one = c.nodes[0].get(&pol, pref, key.clone()).await.unwrap();
        assert_eq!(versions, &one, "{key:?}");
        match i {
            0 => assert_eq!(versions, &vec![newer.clone()]),
            30 => assert!(versions.is_empty()),
            _ => assert_eq!(versions.iter().map(|v| v.value.clone()).collect::<Vec<_>>(), vec![Some(Bytes::from(format!("v{i}")))]),
        }
    }
    // Two nodes down: no key meets two required reads.
    c.net.down.lock().unwrap().extend([2, 3]);
    let e = c.nodes[0].get_many(&pol, written[..3].to_vec()).await.unwrap_err();
    assert!(matches!(e, RwError::InsufficientReplicas { got: 1, required: 2, .. }), "{e}");
}
