//! Request handlers.

use crate::error::ApiError;
use crate::{AppState, USER_META_BYTES_MAX};
use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use strata_router::{BlobData, BlobInfo, ByteRange, PutOptions};
use strata_types::BlobId;

type S = State<Arc<AppState>>;

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", post(put_blob))
        .route("/health", get(health))
        .route("/admin/metrics/recent", get(recent))
        .route("/metrics", get(metrics))
        .route("/admin/partitions", get(partitions))
        .route("/admin/partitions/{pid}/blobs", get(partition_blobs))
        .route("/admin/compact", post(compact))
        .route("/admin/scrub", get(scrub_status).post(scrub_now))
        .route("/admin/sweep", get(sweep_status).post(sweep_now))
        .route("/admin/audit", get(audit))
        .route("/admin/workers", get(workers))
        .route("/{id}", get(get_blob).head(head_blob).delete(delete_blob))
        .route("/{id}/info", get(blob_info))
        .route("/{id}/ttl", put(update_ttl))
}

/// Records metrics for a finished request.
fn done(st: &AppState, op: &'static str, t: Instant, r: Result<Response, ApiError>) -> Response {
    let resp = r.unwrap_or_else(|e| {
        if e.status_code().0.is_server_error() {
            tracing::warn!(op, error = %e, "request failed");
        }
        e.into_response()
    });
    st.metrics.observe(op, resp.status().as_u16(), t.elapsed().as_secs_f64());
    resp
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    match h.get(name) {
        None => Ok(None),
        Some(v) => std::str::from_utf8(v.as_bytes()).map(Some).map_err(|_| ApiError::BadHeader { name: name.into(), reason: "not UTF-8".into() }),
    }
}

fn parse_ttl(h: &HeaderMap) -> Result<Option<Option<u64>>, ApiError> {
    let bad = |reason: &str| ApiError::BadHeader { name: "x-strata-ttl".into(), reason: reason.into() };
    match header_str(h, "x-strata-ttl")? {
        None => Ok(None),
        Some("never" | "infinite") => Ok(Some(None)),
        Some(s) => {
            let secs: u64 = s.trim().parse().map_err(|_| bad("expected a number of seconds or \"never\""))?;
            if secs == 0 {
                return Err(bad("a TTL must be at least 1 second (use \"never\" for no expiry)"));
            }
            Ok(Some(Some(secs.checked_mul(1000).ok_or_else(|| bad("too large"))?)))
        }
    }
}

/// `x-strata-policy`: the acks a write needs, overriding the cluster's
/// policy: `one`, `majority`, `all` or a count of replicas in every zone,
/// or `local:N`, N of the local zone's (Ambry's, the default).
fn parse_policy(h: &HeaderMap) -> Result<Option<strata_router::Policy>, ApiError> {
    match header_str(h, "x-strata-policy")? {
        None => Ok(None),
        Some(s) => strata_router::Policy::parse(s.trim())
            .map(Some)
            .ok_or_else(|| ApiError::BadHeader { name: "x-strata-policy".into(), reason: "expected one, majority, all, a positive count, or local:N".into() }),
    }
}

fn put_options(h: &HeaderMap, container: strata_types::ContainerRef) -> Result<PutOptions, ApiError> {
    let mut meta = Vec::new();
    let mut meta_bytes = 0;
    for (name, value) in h {
        if let Some(k) = name.as_str().strip_prefix("x-strata-meta-") {
            let v = std::str::from_utf8(value.as_bytes())
                .map_err(|_| ApiError::BadHeader { name: name.to_string(), reason: "user metadata must be UTF-8".into() })?;
            meta_bytes += k.len() + v.len();
            meta.push((k.to_string(), v.to_string()));
        }
    }
    if meta_bytes > USER_META_BYTES_MAX {
        return Err(ApiError::MetadataTooLarge { size: meta_bytes, max: USER_META_BYTES_MAX });
    }
    let owner = header_str(h, "x-strata-owner")?.unwrap_or("").to_string();
    // Reserved owners mark blobs only Strata's own layers may write (the
    // orphan sweep frees an S3-owned blob that no name holds).
    if owner.starts_with(strata_router::RESERVED_OWNER_PREFIX) {
        return Err(ApiError::BadHeader {
            name: "x-strata-owner".into(),
            reason: format!("owners starting with {:?} are reserved", strata_router::RESERVED_OWNER_PREFIX),
        });
    }
    Ok(PutOptions {
        ttl_ms: parse_ttl(h)?.flatten(),
        content_type: header_str(h, "content-type")?.unwrap_or("application/octet-stream").to_string(),
        owner,
        meta,
        policy: parse_policy(h)?,
        container,
        size_hint: None,
        actor: None,
    })
}

/// Who a native write's record names (change capture's `who`).
fn actor(who: &crate::Principal) -> Option<Arc<str>> {
    who.who().map(Arc::from)
}

async fn put_blob(State(st): S, Extension(who): Extension<crate::Principal>, headers: HeaderMap, body: Body) -> Response {
    let t = Instant::now();
    let r = async {
        let container = strata_names::read(&*st.names, |s| crate::auth::put_container(headers.get("x-strata-container").map(HeaderValue::as_bytes), s))?;
        let mut opts = put_options(&headers, container)?;
        opts.actor = actor(&who);
        let max = st.router.config().blob_bytes_max;
        if let Some(len) = header_str(&headers, "content-length")? {
            let len: u64 = len.parse().map_err(|_| ApiError::BadHeader { name: "content-length".into(), reason: "not a number".into() })?;
            if len > max {
                return Err(strata_router::RouterError::TooLarge { size: len, max }.into());
            }
            opts.size_hint = Some(len);
        }
        let received = Arc::new(AtomicU64::new(0));
        let counter = received.clone();
        let stream = body.into_data_stream().map(move |r| {
            if let Ok(b) = &r {
                counter.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
            r
        });
        let id = st.router.put_stream(opts, stream).await?;
        let size = received.load(Ordering::Relaxed);
        st.metrics.bytes_received.inc_by(size);
        let mut resp = (StatusCode::CREATED, Json(serde_json::json!({ "id": id, "size": size }))).into_response();
        if let Ok(v) = HeaderValue::from_str(&format!("/{id}")) {
            resp.headers_mut().insert(header::LOCATION, v);
        }
        Ok(resp)
    }
    .await;
    done(&st, "put", t, r)
}

/// Runs every parser of the native API's request headers (for fuzzing).
pub(crate) fn fuzz_headers(h: &HeaderMap) {
    let _ = parse_range(h);
    let _ = parse_ttl(h);
    let _ = parse_policy(h);
    let _ = put_options(h, strata_types::ContainerRef::DEFAULT);
}

fn parse_range(h: &HeaderMap) -> Result<Option<ByteRange>, ApiError> {
    let Some(v) = header_str(h, "range")? else { return Ok(None) };
    let bad = || ApiError::BadRange(v.to_string());
    let spec = v.trim().strip_prefix("bytes=").ok_or_else(bad)?;
    if spec.contains(',') {
        return Err(bad());
    }
    let (a, b) = spec.split_once('-').ok_or_else(bad)?;
    let num = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
    Ok(Some(match (a.trim().is_empty(), b.trim().is_empty()) {
        (true, false) => ByteRange::Suffix(num(b)?),
        (false, true) => ByteRange::From(num(a)?),
        (false, false) => {
            let (a, b) = (num(a)?, num(b)?);
            if a > b {
                return Err(bad());
            }
            ByteRange::FromTo(a, b)
        }
        (true, true) => return Err(bad()),
    }))
}

pub(crate) fn blob_headers(resp: &mut Response, info: &BlobInfo) {
    set_blob_headers(resp.headers_mut(), info)
}

/// The headers describing a blob, shared by the axum and sendfile paths.
pub(crate) fn set_blob_headers(h: &mut HeaderMap, info: &BlobInfo) {
    let mut set = |name: &str, value: String| {
        if let (Ok(n), Ok(v)) = (header::HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value.as_bytes())) {
            h.insert(n, v);
        }
    };
    set("content-type", info.content_type.clone());
    set("accept-ranges", "bytes".into());
    set("x-strata-blob-size", info.size.to_string());
    set("x-strata-created-ms", info.created_ms.to_string());
    if info.expiry_ms != 0 {
        set("x-strata-expires-ms", info.expiry_ms.to_string());
    }
    if !info.owner.is_empty() {
        set("x-strata-owner", info.owner.clone());
    }
    for (k, v) in &info.meta {
        set(&format!("x-strata-meta-{k}"), v.clone());
    }
}

async fn get_blob(State(st): S, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let t = Instant::now();
    let r = async {
        let id = BlobId::parse(&id)?;
        let range = parse_range(&headers)?;
        let body = st.router.get(id, range).await?;
        let (start, end) = body.range;
        let size = body.info.size;
        let http_body = match body.data {
            BlobData::Whole(bytes, _) => {
                st.metrics.bytes_sent.inc_by(bytes.len() as u64);
                Body::from(bytes)
            }
            BlobData::Stream(stream) => {
                let st2 = st.clone();
                Body::from_stream(stream.map(move |r| {
                    if let Ok(b) = &r {
                        st2.metrics.bytes_sent.inc_by(b.len() as u64);
                    }
                    r
                }))
            }
        };
        let mut resp = Response::new(http_body);
        blob_headers(&mut resp, &body.info);
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
        if range.is_some() {
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{}/{size}", end.saturating_sub(1))) {
                resp.headers_mut().insert(header::CONTENT_RANGE, v);
            }
        }
        Ok(resp)
    }
    .await;
    done(&st, "get", t, r)
}

async fn head_blob(State(st): S, Path(id): Path<String>) -> Response {
    let t = Instant::now();
    let r = async {
        let info = st.router.info(BlobId::parse(&id)?).await?;
        let mut resp = Response::new(Body::empty());
        blob_headers(&mut resp, &info);
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(info.size));
        Ok(resp)
    }
    .await;
    done(&st, "head", t, r)
}

fn info_json(info: &BlobInfo) -> serde_json::Value {
    serde_json::json!({
        "id": info.id,
        "size": info.size,
        "content_type": info.content_type,
        "owner": info.owner,
        "created_ms": info.created_ms,
        "expiry_ms": if info.expiry_ms == 0 { None } else { Some(info.expiry_ms) },
        "chunks": info.chunks,
        "meta": info.meta.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
    })
}

async fn blob_info(State(st): S, Path(id): Path<String>) -> Response {
    let t = Instant::now();
    let r = async {
        let info = st.router.info(BlobId::parse(&id)?).await?;
        Ok(Json(info_json(&info)).into_response())
    }
    .await;
    done(&st, "info", t, r)
}

async fn delete_blob(State(st): S, Extension(who): Extension<crate::Principal>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let t = Instant::now();
    let r = async {
        st.router.delete_with(BlobId::parse(&id)?, parse_policy(&headers)?, actor(&who)).await?;
        Ok(StatusCode::NO_CONTENT.into_response())
    }
    .await;
    done(&st, "delete", t, r)
}

async fn update_ttl(State(st): S, Extension(who): Extension<crate::Principal>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let t = Instant::now();
    let r = async {
        let id = BlobId::parse(&id)?;
        let ttl = parse_ttl(&headers)?
            .ok_or_else(|| ApiError::BadHeader { name: "x-strata-ttl".into(), reason: "required: seconds from now, or \"never\"".into() })?;
        st.router.update_ttl_with(id, ttl, parse_policy(&headers)?, actor(&who)).await?;
        Ok(StatusCode::NO_CONTENT.into_response())
    }
    .await;
    done(&st, "ttl_update", t, r)
}

/// The last ten minutes of PUTs and GETs in 10-second windows (the
/// console's overview charts).
async fn recent(State(st): S) -> Response {
    Json(st.metrics.recent.json()).into_response()
}

async fn health(State(st): S) -> Response {
    let replicas = st.disks.replicas();
    let writable = replicas.iter().filter(|r| r.is_writable()).count();
    let status = if writable > 0 { "ok" } else { "read-only" };
    Json(serde_json::json!({ "status": status, "partitions": replicas.len(), "writable_partitions": writable })).into_response()
}

async fn metrics(State(st): S) -> Response {
    let mut resp = st.metrics.encode().into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"));
    resp
}

async fn partitions(State(st): S) -> Response {
    let rows: Vec<_> = st
        .disks
        .replicas()
        .iter()
        .map(|r| {
            let s = r.status();
            serde_json::json!({
                "partition": s.partition,
                "state": if s.read_only.is_some() { "read-only" } else { "read-write" },
                "read_only_reason": s.read_only.map(|r| format!("{r:?}")),
                "used_bytes": s.used_bytes,
                "capacity_bytes": s.capacity_bytes,
                "segments": s.segments,
                "index_files": s.index_files,
                "next_lsn": s.next_lsn,
                "damaged_ranges": s.damaged_ranges,
                "damage": r.damage().iter().map(|d| serde_json::json!({
                    "segment": d.segment_id,
                    "generation": d.generation,
                    "offset": d.offset,
                    "len": d.len,
                    "detected_ms": d.detected_ms,
                    "key": d.key.as_ref().map(|k| k.to_string()),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Json(rows).into_response()
}

async fn partition_blobs(State(st): S, Path(pid): Path<u64>) -> Response {
    let t = Instant::now();
    let r = async {
        let replica = st.disks.replica(pid).ok_or(ApiError::NoSuchPartition(pid))?;
        let keys = tokio::task::spawn_blocking(move || replica.keys())
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let rows: Vec<_> = keys
            .into_iter()
            .filter_map(|(k, s)| {
                let id = k.blob_id()?;
                let state = match s {
                    strata_engine::KeyState::Missing => "missing",
                    strata_engine::KeyState::Deleted => "deleted",
                    strata_engine::KeyState::Live { .. } => "live",
                };
                Some(serde_json::json!({ "id": id, "kind": format!("{:?}", id.kind()), "state": state }))
            })
            .collect();
        Ok(Json(rows).into_response())
    }
    .await;
    done(&st, "admin_list", t, r)
}

/// The node's background workers: name, state, passes, failures, last error.
async fn workers(State(st): S) -> Response {
    Json(st.workers.list()).into_response()
}

async fn scrub_status(State(st): S) -> Response {
    Json(st.scrub.status()).into_response()
}

/// Starts a scrub pass now: `{"deep": true}` also compares data checksums
/// with peer replicas. 202 with the status, 409 if a pass runs.
async fn scrub_now(State(st): S, body: axum::body::Bytes) -> Response {
    let t = Instant::now();
    let r = async {
        let deep = if body.is_empty() {
            false
        } else {
            let v: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("body must be JSON like {{\"deep\": true}}: {e}")))?;
            match &v["deep"] {
                serde_json::Value::Null => false,
                serde_json::Value::Bool(b) => *b,
                other => return Err(ApiError::BadRequest(format!("\"deep\" must be true or false, not {other}"))),
            }
        };
        if !st.scrub.request(deep) {
            return Err(ApiError::ScrubRunning);
        }
        Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "started": true, "deep": deep }))).into_response())
    }
    .await;
    done(&st, "admin_scrub", t, r)
}

/// The orphan sweep's progress and last results.
async fn sweep_status(State(st): S) -> Response {
    Json(st.sweep.status()).into_response()
}

/// Starts an orphan sweep pass now. 202, or 409 if a pass runs.
async fn sweep_now(State(st): S) -> Response {
    let t = Instant::now();
    let r = async {
        if !st.sweep.request() {
            return Err(ApiError::SweepRunning);
        }
        Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "started": true }))).into_response())
    }
    .await;
    done(&st, "admin_sweep", t, r)
}

#[derive(serde::Deserialize)]
struct AuditQuery {
    limit: Option<usize>,
}

/// The last entries of this node's audit log (`?limit=N`, default 100).
async fn audit(State(st): S, axum::extract::Query(q): axum::extract::Query<AuditQuery>) -> Response {
    let Some(log) = st.auth.audit().cloned() else { return Json(serde_json::json!({ "entries": [], "damaged_lines": 0, "kept": false })).into_response() };
    let limit = q.limit.unwrap_or(100);
    match tokio::task::spawn_blocking(move || log.tail(limit)).await {
        Ok(Ok((entries, damaged))) => Json(serde_json::json!({ "entries": entries, "damaged_lines": damaged, "kept": true })).into_response(),
        Ok(Err(e)) => ApiError::Internal(format!("reading the audit log: {e}")).into_response(),
        Err(e) => ApiError::Internal(format!("reading the audit log: {e}")).into_response(),
    }
}

async fn compact(State(st): S) -> Response {
    let t = Instant::now();
    let store = st.disks.clone();
    let r = async {
        let rep = tokio::task::spawn_blocking(move || store.compact_all(true))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(Json(serde_json::json!({ "segments_compacted": rep.segments_compacted, "bytes_reclaimed": rep.bytes_reclaimed })).into_response())
    }
    .await;
    done(&st, "admin_compact", t, r)
}
