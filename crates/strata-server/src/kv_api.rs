//! Read-only key-value stores on a node: the stores in `<data>/kv/`, and
//! their HTTP API.
//!
//! - `GET /kv/{store}/{key}`: the value; the key is base64url (no padding),
//!   so any bytes can be a key.
//! - `POST /kv/{store}/multi-get`: `{"keys": [base64url, ...]}` →
//!   `{"values": [base64url or null, ...]}`, all from one version.
//! - `GET /admin/kv`: stores, versions, live version, load progress.
//! - `POST /admin/kv/{store}`: creates a store (`{"partitions", "chunks",
//!   "search"?: "Binary" | "Interpolation", "keep"?: old versions kept}`).
//! - `POST /admin/kv/{store}/load`: `{"dir", "version"?}` copies a built
//!   version in after checking it (not live yet).
//! - `POST /admin/kv/{store}/swap`: `{"version"}` makes it live.
//! - `POST /admin/kv/{store}/rollback`: `{"version"?}` back to an older one.
//! - `POST /admin/kv/{store}/fetch`: `{"source", "version"?, "throttle_mb_s"?}`
//!   pulls this node's folder of a build (a directory, an `http(s)://` URL
//!   or `strata://` blobs)
//!   after checking its metadata; a store the cluster map defines on the
//!   ring is created here on its first fetch.
//! - `POST /admin/kv/{store}/discard`: `{"version"}` removes a version that
//!   is not live (a push that did not swap).
//!
//! - `GET /admin/kv/{store}/live/{file}`: a file of the live version
//!   (`Range: bytes=N-` resumes), for nodes stealing chunks in a rebalance.
//! - `POST /admin/kv/{store}/steal`: `{"donor", "files": [[from, to]...],
//!   "throttle_mb_s"?}` copies chunk files of a donor's live version into
//!   the steal directory, checking their CRCs.
//! - `POST /admin/kv/{store}/relayout`: `{"layout"}` gives this node a new
//!   share of the ring: stolen files join the live version, dropped ones go.
//!
//! On a ring store, a key of a partition this node does not hold is 421
//! `NotOwned`, so clients re-read the map and retry.

use crate::{ApiError, AppState};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use strata_kv::{ReadOnlyStore, Search, StoreDef};

/// How a store on this node is served: kept in `<store>/serve.json`.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct ServeOptions {
    /// Index search: binary, or interpolation (fewer probes when the index
    /// is not in the page cache, Spock §4.2.2).
    search: Search,
    /// Old versions kept for rollbacks.
    keep: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self { search: Search::Binary, keep: 2 }
    }
}

fn read_options(dir: &std::path::Path) -> ServeOptions {
    std::fs::read(dir.join("serve.json")).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// One store's numbers for `/metrics`.
pub(crate) struct StoreGauges {
    pub(crate) store: String,
    pub(crate) live: u64,
    pub(crate) records: u64,
    pub(crate) versions: u64,
    pub(crate) buckets: u64,
    pub(crate) copied: u64,
    pub(crate) total: u64,
}

/// The read-only stores of a node.
pub struct KvStores {
    root: PathBuf,
    stores: RwLock<BTreeMap<String, Arc<ReadOnlyStore>>>,
}

impl KvStores {
    /// Opens every store under `root` (`<root>/<name>/store.json`).
    pub fn open(root: PathBuf) -> Result<Arc<Self>, strata_kv::VersionError> {
        let mut stores = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir(&root) {
            for e in dir.flatten() {
                let path = e.path();
                let Ok(b) = std::fs::read(path.join("store.json")) else { continue };
                let def: StoreDef = serde_json::from_slice(&b).map_err(|e| strata_kv::VersionError::Invalid(format!("{}: {e}", path.display())))?;
                let name = def.name.clone();
                let o = read_options(&path);
                stores.insert(name, Arc::new(ReadOnlyStore::open(&path, def, o.keep, o.search)?));
            }
        }
        Ok(Arc::new(Self { root, stores: RwLock::new(stores) }))
    }

    /// The store `name`, created from the cluster map if the map defines it
    /// on the ring and this node has none yet (its share: `Layout::for_node`).
    /// `empty_ok`: a node joining the ring in a rebalance holds nothing yet.
    fn get_or_create_from_map(&self, name: &str, cluster: Option<&strata_node::ClusterNode>, empty_ok: bool) -> Result<Arc<ReadOnlyStore>, ApiError> {
        if let Ok(s) = self.get(name) {
            return Ok(s);
        }
        let Some(node) = cluster else { return Err(ApiError::NoSuchStore(name.to_string())) };
        let map = node.map();
        let Some(spec) = map.kv.stores.get(name) else { return Err(ApiError::NoSuchStore(name.to_string())) };
        let table = map.kv_table(name).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let me = u32::try_from(node.id()).map_err(|_| ApiError::BadRequest("node id too large for the ring".into()))?;
        let layout = strata_kv::Layout::for_node(&table, me);
        if layout.buckets.is_empty() && !empty_ok {
            return Err(ApiError::BadRequest(format!("this node holds no partition of store {name:?} on the ring")));
        }
        let def = StoreDef { name: name.to_string(), partitions: table.len() as u32, replication: spec.factor(), chunks: spec.chunks };
        let mut g = self.stores.write().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = g.get(name) {
            return Ok(s.clone());
        }
        self.install(&mut g, def, layout, ServeOptions::default())
    }

    /// Creates a store's directory, `serve.json` and the store itself, under
    /// the caller's write lock.
    fn install(
        &self,
        g: &mut BTreeMap<String, Arc<ReadOnlyStore>>,
        def: StoreDef,
        layout: strata_kv::Layout,
        o: ServeOptions,
    ) -> Result<Arc<ReadOnlyStore>, ApiError> {
        let name = def.name.clone();
        let dir = self.root.join(&name);
        std::fs::create_dir_all(&dir).map_err(|e| ApiError::Internal(format!("{}: {e}", dir.display())))?;
        let opts = serde_json::to_vec(&o).map_err(|e| ApiError::Internal(e.to_string()))?;
        std::fs::write(dir.join("serve.json"), opts).map_err(|e| ApiError::Internal(format!("{}: {e}", dir.display())))?;
        let store = Arc::new(ReadOnlyStore::open_with(&dir, def, layout, o.keep, o.search)?);
        g.insert(name, store.clone());
        Ok(store)
    }

    /// Per-store numbers for the metrics.
    pub(crate) fn gauges(&self) -> Vec<StoreGauges> {
        let stores = self.stores.read().unwrap_or_else(|p| p.into_inner()).clone();
        stores
            .values()
            .map(|s| {
                let live = s.snapshot();
                let progress = s.load_progress();
                StoreGauges {
                    store: s.def().name.clone(),
                    live: live.as_ref().map_or(0, |v| v.number),
                    records: live.as_ref().map_or(0, |v| v.meta.records),
                    versions: s.versions().len() as u64,
                    buckets: s.layout().buckets.len() as u64,
                    copied: progress.as_ref().map_or(0, |p| p.copied),
                    total: progress.as_ref().map_or(0, |p| p.total),
                }
            })
            .collect()
    }

    /// Every store of this node.
    pub fn all(&self) -> Vec<Arc<ReadOnlyStore>> {
        self.stores.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    fn get(&self, name: &str) -> Result<Arc<ReadOnlyStore>, ApiError> {
        self.stores.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned().ok_or_else(|| ApiError::NoSuchStore(name.to_string()))
    }

    /// For the connection fast path: `render(version, value)` on a found
    /// key (the key in base64url), reading the value in place from the map;
    /// `None` for anything the handler must answer (errors included).
    pub(crate) fn lookup<T>(&self, store: &str, key_b64: &str, render: impl FnOnce(u64, &[u8]) -> T) -> Option<T> {
        let s = self.stores.read().unwrap_or_else(|p| p.into_inner()).get(store).cloned()?;
        let key = b64().decode(key_b64).ok()?;
        let v = s.snapshot()?;
        let value = v.get(&key, s.search()).ok()??;
        Some(render(v.number, value))
    }

    fn create(&self, def: StoreDef, o: ServeOptions) -> Result<(), ApiError> {
        let mut g = self.stores.write().unwrap_or_else(|p| p.into_inner());
        if g.contains_key(&def.name) {
            return Err(ApiError::StoreExists(def.name));
        }
        let layout = strata_kv::Layout::single(&def);
        self.install(&mut g, def, layout, o).map(|_| ())
    }
}

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/kv/{store}/multi-get", post(multi_get))
        .route("/kv/{store}/{key}", get(get_key))
        .route("/admin/kv", get(list))
        .route("/admin/kv/{store}", post(create))
        .route("/admin/kv/{store}/load", post(load))
        .route("/admin/kv/{store}/swap", post(swap))
        .route("/admin/kv/{store}/rollback", post(rollback))
        .route("/admin/kv/{store}/fetch", post(fetch))
        .route("/admin/kv/{store}/discard", post(discard))
        .route("/admin/kv/{store}/live/{file}", get(live_file))
        .route("/admin/kv/{store}/steal", post(steal))
        .route("/admin/kv/{store}/relayout", post(relayout))
}

type S = State<Arc<AppState>>;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

fn decode_key(k: &str) -> Result<Vec<u8>, ApiError> {
    b64().decode(k).map_err(|e| ApiError::BadRequest(format!("key {k:?} is not base64url: {e}")))
}

fn json_body<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(b).map_err(|e| ApiError::BadRequest(format!("bad JSON body: {e}")))
}

/// Runs blocking store work (file copies, checksums, maps) off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::Internal(e.to_string()))?
}

/// The oldest version the client accepts (`x-strata-kv-min-version`): a
/// router that has seen version N never takes an older one (monotonic
/// reads across replicas that swap a few milliseconds apart).
fn min_version(headers: &http::HeaderMap) -> Result<u64, ApiError> {
    match headers.get("x-strata-kv-min-version") {
        None => Ok(0),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ApiError::BadHeader { name: "x-strata-kv-min-version".into(), reason: "expected a version number".into() }),
    }
}

fn check_min(store: &str, live: Option<u64>, wanted: u64) -> Result<(), ApiError> {
    if wanted > 0 && live.is_none_or(|l| l < wanted) {
        return Err(ApiError::VersionBehind { store: store.to_string(), live, wanted });
    }
    Ok(())
}

async fn get_key(State(st): S, Path((store, key)): Path<(String, String)>, headers: http::HeaderMap) -> Response {
    let r = (|| {
        let s = st.kv.get(&store)?;
        let k = decode_key(&key)?;
        let wanted = min_version(&headers)?;
        let snap = s.snapshot();
        check_min(&store, snap.as_ref().map(|v| v.number), wanted)?;
        let v = snap.ok_or_else(|| ApiError::NoSuchKey(store.clone()))?;
        let value = match v.lookup(&k, s.search()).map_err(strata_kv::VersionError::from)? {
            strata_kv::Lookup::Found(value) => value,
            strata_kv::Lookup::Missing => return Err(ApiError::NoSuchKey(store.clone())),
            strata_kv::Lookup::NotHeld => return Err(not_owned(&st, &store)),
        };
        Ok::<_, ApiError>(([("content-type", "application/octet-stream"), ("x-strata-kv-version", &v.number.to_string())], value.to_vec()).into_response())
    })();
    r.unwrap_or_else(|e| e.into_response())
}

#[derive(serde::Deserialize)]
struct MultiGet {
    keys: Vec<String>,
}

async fn multi_get(State(st): S, Path(store): Path<String>, headers: http::HeaderMap, body: Bytes) -> Response {
    let r = (|| {
        let s = st.kv.get(&store)?;
        let req: MultiGet = json_body(&body)?;
        let keys: Vec<Vec<u8>> = req.keys.iter().map(|k| decode_key(k)).collect::<Result<_, _>>()?;
        let snap = s.snapshot();
        check_min(&store, snap.as_ref().map(|v| v.number), min_version(&headers)?)?;
        let Some(v) = snap else {
            return Ok(Json(serde_json::json!({ "version": null, "values": vec![serde_json::Value::Null; keys.len()] })).into_response());
        };
        let mut values = Vec::with_capacity(keys.len());
        for k in &keys {
            values.push(match v.lookup(k, s.search()).map_err(strata_kv::VersionError::from)? {
                strata_kv::Lookup::Found(x) => serde_json::Value::String(b64().encode(x)),
                strata_kv::Lookup::Missing => serde_json::Value::Null,
                strata_kv::Lookup::NotHeld => return Err(not_owned(&st, &store)),
            });
        }
        Ok::<_, ApiError>(Json(serde_json::json!({ "version": v.number, "values": values })).into_response())
    })();
    r.unwrap_or_else(|e| e.into_response())
}

fn not_owned(st: &AppState, store: &str) -> ApiError {
    ApiError::NotOwned { store: store.to_string(), epoch: st.cluster.as_ref().map_or(0, |c| c.map().epoch) }
}

#[derive(serde::Deserialize)]
struct Fetch {
    source: String,
    version: Option<u64>,
    throttle_mb_s: Option<f64>,
}

/// Who asked, and when: what a version change records (docs/events.md).
fn by(st: &AppState, who: &crate::Principal) -> strata_kv::By {
    strata_kv::By::new(who.who(), st.router.clock().now_ms())
}

async fn fetch(State(st): S, Extension(who): Extension<crate::Principal>, Path(store): Path<String>, body: Bytes) -> Response {
    let r = async {
        let req: Fetch = json_body(&body)?;
        let source = strata_node::kv_fetch::Source::parse(&req.source)?;
        let kv = st.kv.clone();
        let cluster = st.cluster.clone();
        let name = store.clone();
        let s = blocking(move || kv.get_or_create_from_map(&name, cluster.as_deref(), false)).await?;
        let t = std::time::Instant::now();
        let n = strata_node::kv_fetch::fetch_by(s.clone(), &source, req.version, req.throttle_mb_s, by(&st, &who)).await?;
        let bytes: u64 = s.versions().contains(&n).then(|| s.version_bytes(n)).flatten().unwrap_or(0);
        Ok::<_, ApiError>(Json(serde_json::json!({ "store": store, "version": n, "bytes": bytes, "seconds": t.elapsed().as_secs_f64() })).into_response())
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

async fn discard(State(st): S, Path(store): Path<String>, body: Bytes) -> Response {
    let r = async {
        let req: Swap = json_body(&body)?;
        let s = st.kv.get(&store)?;
        blocking(move || Ok(s.discard(req.version)?)).await?;
        Ok::<_, ApiError>(Json(serde_json::json!({ "store": store, "discarded": req.version })).into_response())
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

async fn live_file(State(st): S, Path((store, file)): Path<(String, String)>, headers: http::HeaderMap) -> Response {
    use futures_util::StreamExt;
    let r = async {
        let s = st.kv.get(&store)?;
        let live = s.snapshot().ok_or_else(|| ApiError::NoSuchKey(store.clone()))?;
        if file.contains('/') || file.starts_with("..") || !(file.ends_with(".index") || file.ends_with(".data") || file == strata_kv::version::METADATA_FILE) {
            return Err(ApiError::BadRequest(format!("{file:?} is not a file of a version")));
        }
        let path = live.dir.join(&file);
        let mut f = tokio::fs::File::open(&path).await.map_err(|_| ApiError::NoSuchKey(format!("{store}/{file}")))?;
        let len = f.metadata().await.map_err(|e| ApiError::Internal(e.to_string()))?.len();
        let start = headers
            .get(http::header::RANGE)
            .and_then(|v| v.to_str().ok()?.strip_prefix("bytes=")?.strip_suffix('-')?.parse::<u64>().ok())
            .filter(|&s| s <= len);
        if let Some(off) = start {
            use tokio::io::AsyncSeekExt;
            f.seek(std::io::SeekFrom::Start(off)).await.map_err(|e| ApiError::Internal(e.to_string()))?;
        }
        let stream = strata_client::read_stream(f);
        let mut resp = axum::body::Body::from_stream(stream.boxed()).into_response();
        let from = start.unwrap_or(0);
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len - from));
        if start.is_some() {
            *resp.status_mut() = http::StatusCode::PARTIAL_CONTENT;
        }
        Ok::<_, ApiError>(resp)
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

#[derive(serde::Deserialize)]
struct Steal {
    donor: String,
    files: Vec<(String, String)>,
    throttle_mb_s: Option<f64>,
}

async fn steal(State(st): S, Path(store): Path<String>, body: Bytes) -> Response {
    let r = async {
        let req: Steal = json_body(&body)?;
        let (kv, cluster, name) = (st.kv.clone(), st.cluster.clone(), store.clone());
        let s = blocking(move || kv.get_or_create_from_map(&name, cluster.as_deref(), true)).await?;
        let t = std::time::Instant::now();
        let bytes = strata_node::kv_fetch::steal(s, &req.donor, &req.files, req.throttle_mb_s).await?;
        Ok::<_, ApiError>(Json(serde_json::json!({ "store": store, "bytes": bytes, "seconds": t.elapsed().as_secs_f64() })).into_response())
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

#[derive(serde::Deserialize)]
struct Relayout {
    layout: strata_kv::Layout,
    /// The version number to create if this node has no live version yet
    /// (a node joining the ring).
    version: Option<u64>,
}

async fn relayout(State(st): S, Path(store): Path<String>, body: Bytes) -> Response {
    let r = async {
        let req: Relayout = json_body(&body)?;
        let s = st.kv.get(&store)?;
        let n = req.layout.buckets.len();
        blocking(move || Ok(s.relayout(req.layout, req.version)?)).await?;
        Ok::<_, ApiError>(Json(serde_json::json!({ "store": store, "buckets": n })).into_response())
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

async fn list(State(st): S) -> Response {
    let stores = st.kv.stores.read().unwrap_or_else(|p| p.into_inner()).clone();
    let rows: Vec<serde_json::Value> = stores
        .values()
        .map(|s| {
            let d = s.def();
            serde_json::json!({
                "store": d.name, "partitions": d.partitions, "chunks": d.chunks, "search": s.search(), "keep": s.keep(),
                "live": s.live_version(), "versions": s.versions(),
                "records": s.snapshot().map(|v| v.meta.records), "loading": s.load_progress(),
                "layout": s.layout(),
            })
        })
        .collect();
    Json(rows).into_response()
}

#[derive(serde::Deserialize)]
struct Create {
    partitions: u32,
    chunks: u32,
    /// `Binary` (default) or `Interpolation`.
    search: Option<Search>,
    /// Old versions kept (default 2).
    keep: Option<usize>,
}

async fn create(State(st): S, Path(store): Path<String>, body: Bytes) -> Response {
    let r = async {
        let c: Create = json_body(&body)?;
        let def = StoreDef { name: store.clone(), partitions: c.partitions, replication: 1, chunks: c.chunks };
        def.validate()?;
        let o = ServeOptions { search: c.search.unwrap_or(Search::Binary), keep: c.keep.unwrap_or(2).min(1000) };
        let kv = st.kv.clone();
        blocking(move || kv.create(def, o)).await?;
        Ok::<_, ApiError>(Json(serde_json::json!({ "store": store, "created": true })).into_response())
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

#[derive(serde::Deserialize)]
struct Load {
    dir: PathBuf,
    /// The version number; default the highest present + 1.
    version: Option<u64>,
    /// Number the version by the node's clock (UNIX seconds) instead.
    #[serde(default)]
    timestamp: bool,
}

async fn load(State(st): S, Extension(who): Extension<crate::Principal>, Path(store): Path<String>, body: Bytes) -> Response {
    let r = async {
        let req: Load = json_body(&body)?;
        let number = match (req.version, req.timestamp) {
            (Some(_), true) => return Err(ApiError::BadRequest("give a version or timestamp, not both".into())),
            (v, false) => v,
            (None, true) => Some(strata_types::Clock::now_ms(&strata_types::SystemClock) / 1000),
        };
        let s = st.kv.get(&store)?;
        let by = by(&st, &who);
        let n = blocking(move || Ok(s.load_by(&req.dir, number, &by)?)).await?;
        Ok::<_, ApiError>(Json(serde_json::json!({ "store": store, "version": n })).into_response())
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

#[derive(serde::Deserialize)]
struct Swap {
    version: u64,
}

async fn swap(State(st): S, Extension(who): Extension<crate::Principal>, Path(store): Path<String>, body: Bytes) -> Response {
    let r = async {
        let req: Swap = json_body(&body)?;
        let s = st.kv.get(&store)?;
        let by = by(&st, &who);
        blocking(move || Ok(s.swap_by(req.version, &by)?)).await?;
        Ok::<_, ApiError>(Json(serde_json::json!({ "store": store, "live": req.version })).into_response())
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

#[derive(serde::Deserialize, Default)]
struct Rollback {
    version: Option<u64>,
}

async fn rollback(State(st): S, Extension(who): Extension<crate::Principal>, Path(store): Path<String>, body: Bytes) -> Response {
    let r = async {
        let req: Rollback = if body.is_empty() { Rollback::default() } else { json_body(&body)? };
        let s = st.kv.get(&store)?;
        let by = by(&st, &who);
        let n = blocking(move || Ok(s.rollback_by(req.version, &by)?)).await?;
        Ok::<_, ApiError>(Json(serde_json::json!({ "store": store, "live": n })).into_response())
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}
