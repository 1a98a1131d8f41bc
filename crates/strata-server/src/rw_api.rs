//! Read-write stores' HTTP API (Spock §3.1), served by any node of a
//! cluster for any key (server-side routing: the node coordinates gets and
//! hands puts to the key's pseudo-master).
//!
//! - `GET /rw/{store}/{key}` (key base64url, no padding): `{"versions":
//!   [{"clock", "value"}], "clock"}`: every concurrent version's value
//!   (base64) and clock (text form, `node:counter,...@ms`), and the clock
//!   that covers them all (what a put that resolves them sends). A key
//!   with no live value has no versions (and, after a delete, the delete's
//!   clock, which the next put must follow). `?transform=sublist&arg=1:3`
//!   runs a get transform on each.
//! - `PUT /rw/{store}/{key}`: the body is the value; `x-strata-clock` the
//!   clock read (absent: never read). `?transform=append` runs a put
//!   transform on the value held instead. Answers `{"clock"}` written; 409
//!   `ObsoleteVersion` when the clock does not follow what is held.
//! - `DELETE /rw/{store}/{key}`: with `x-strata-clock`.
//! - `POST /rw/{store}/multi-get`: `{"keys": [base64url...]}` (at most
//!   1,000) → `{"results": [{"key", "versions", "clock"}...]}`, in the
//!   order of the keys, each key coordinated as a get (32 at a time).
//! - `POST /rw/{store}/session` and `POST /rw/{store}/write-session`
//!   with `Connection: upgrade` and `Upgrade: strata-rw/1`: the connection
//!   becomes a binary session of gets (and, for a write session, puts and
//!   deletes) on the store (`crate::rw_session`). The connection loop
//!   takes those; one that reaches this handler lacks the upgrade headers
//!   or has a body, and is refused.
//! - `GET /admin/rw`: stores, hints pending, counters;
//!   `POST /admin/rw/hints/push`: pushes the hints now;
//!   `GET /admin/rw/local/{store}/{key}`: what this node's own replica
//!   holds of a key (every version, deletes included), for operators and
//!   tests checking one replica.
//! - `GET /admin/rw/{store}/entries?partitions=1,5`: this node's entries
//!   of a store (of those ring partitions), JSON Lines `{"key": base64url,
//!   "versions": [{"clock", "value": base64 or null}]}`; `POST` the same
//!   lines writes them into this node's replica, clocks kept (stream in;
//!   the copies of a rebalancing) → `{"written", "skipped"}`.
//! - `POST /admin/rw/{store}/truncate`: deletes every version of the store
//!   on this node → `{"deleted"}`.

use crate::{ApiError, AppState};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use strata_node::rw::RwService;
use strata_rwstore::{VectorClock, Versioned};

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/rw/{store}/multi-get", post(multi_get))
        .route("/rw/{store}/session", post(session_without_upgrade))
        .route("/rw/{store}/write-session", post(session_without_upgrade))
        .route("/rw/{store}/{key}", get(get_key).put(put_key).delete(delete_key))
        .route("/admin/rw", get(status))
        .route("/admin/rw/hints/push", post(push_hints))
        .route("/admin/rw/deletes/reclaim", post(reclaim_deletes))
        .route("/admin/rw/local/{store}/{key}", get(local_versions))
        .route("/admin/rw/{store}/entries", get(export_entries).post(import_entries))
        .route("/admin/rw/{store}/truncate", post(truncate))
}

type S = State<Arc<AppState>>;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

fn decode_key(k: &str) -> Result<Bytes, ApiError> {
    b64().decode(k).map(Bytes::from).map_err(|e| ApiError::BadRequest(format!("key {k:?} is not base64url: {e}")))
}

pub(crate) fn service(st: &AppState) -> Result<&RwService, ApiError> {
    let node = st.cluster.as_ref().ok_or(ApiError::NotClustered)?;
    node.rw().ok_or_else(|| ApiError::Internal("this node has no disk open yet for read-write stores".into()))
}

/// The `x-strata-clock` header: the clock a client read (empty if absent).
fn clock_header(h: &HeaderMap) -> Result<VectorClock, ApiError> {
    match h.get("x-strata-clock") {
        None => Ok(VectorClock::new()),
        Some(v) => {
            let s = v.to_str().map_err(|_| ApiError::BadHeader { name: "x-strata-clock".into(), reason: "not ASCII".into() })?;
            Ok(VectorClock::parse_text(s).map_err(strata_rwstore::RwError::from)?)
        }
    }
}

fn versions_json(versions: &[Versioned], transform: Option<(&str, &str)>) -> Result<serde_json::Value, ApiError> {
    let covering = VectorClock::covering(versions.iter().map(|v| &v.clock));
    let mut out = Vec::new();
    for v in versions {
        let Some(value) = &v.value else { continue };
        let value = match transform {
            Some((name, arg)) => {
                let t = strata_rwstore::transform::by_name(name)?;
                t.on_get(value, arg.as_bytes()).ok_or_else(|| ApiError::BadRequest(format!("transform {name} does not apply to gets")))??
            }
            None => value.to_vec(),
        };
        out.push(serde_json::json!({ "clock": v.clock.to_text(), "value": base64::engine::general_purpose::STANDARD.encode(value) }));
    }
    Ok(serde_json::json!({ "versions": out, "clock": covering.to_text() }))
}

async fn get_key(State(st): S, Path((store, key)): Path<(String, String)>, Query(q): Query<HashMap<String, String>>) -> Result<Response, ApiError> {
    let key = decode_key(&key)?;
    let versions = service(&st)?.get(&store, key).await?;
    let transform = q.get("transform").map(|t| (t.as_str(), q.get("arg").map_or("", String::as_str)));
    Ok(Json(versions_json(&versions, transform)?).into_response())
}

async fn put_key(
    State(st): S,
    Path((store, key)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = decode_key(&key)?;
    let clock = clock_header(&headers)?;
    let written = service(&st)?.put(&store, key, Some(body), &clock, q.get("transform").map(String::as_str)).await?;
    Ok(Json(serde_json::json!({ "clock": written.to_text() })).into_response())
}

async fn delete_key(State(st): S, Path((store, key)): Path<(String, String)>, headers: HeaderMap) -> Result<Response, ApiError> {
    let key = decode_key(&key)?;
    let clock = clock_header(&headers)?;
    let written = service(&st)?.put(&store, key, None, &clock, None).await?;
    Ok(Json(serde_json::json!({ "clock": written.to_text() })).into_response())
}

/// A session request the connection loop did not take (signed and
/// allowed, or the middleware would have answered).
async fn session_without_upgrade() -> ApiError {
    ApiError::BadRequest(format!(
        "a session is opened by the first request of a connection, with Connection: upgrade and Upgrade: {}, and no body",
        strata_format::rw_session::PROTOCOL
    ))
}

#[derive(serde::Deserialize)]
struct MultiGet {
    keys: Vec<String>,
}

/// Keys one multi-get may name.
const MULTI_GET_KEYS_MAX: usize = 1000;

async fn multi_get(State(st): S, Path(store): Path<String>, body: Bytes) -> Result<Response, ApiError> {
    let req: MultiGet = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("bad JSON body: {e}")))?;
    if req.keys.len() > MULTI_GET_KEYS_MAX {
        return Err(ApiError::BadRequest(format!("a multi-get names at most {MULTI_GET_KEYS_MAX} keys, not {}", req.keys.len())));
    }
    let keys = req.keys.iter().map(|k| decode_key(k)).collect::<Result<Vec<_>, _>>()?;
    let rw = service(&st)?;
    // One request per node for all the keys it holds; answers in order.
    let answers: Vec<Vec<Versioned>> = rw.get_many(&store, keys).await?;
    let mut results = Vec::with_capacity(answers.len());
    for (k, versions) in req.keys.iter().zip(&answers) {
        let mut v = versions_json(versions, None)?;
        v["key"] = k.clone().into();
        results.push(v);
    }
    Ok(Json(serde_json::json!({ "results": results })).into_response())
}

async fn status(State(st): S) -> Result<Response, ApiError> {
    let node = st.cluster.as_ref().ok_or(ApiError::NotClustered)?;
    let rw = service(&st)?;
    let s = rw.coordinator().stats();
    let stores: serde_json::Value = serde_json::to_value(&node.map().rw_stores).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Json(serde_json::json!({
        "stores": stores,
        "hints_pending": rw.coordinator().hints_pending().await?,
        "hints_written": s.hints_written.load(Ordering::Relaxed),
        "hints_pushed": s.hints_pushed.load(Ordering::Relaxed),
        "hints_failed": s.hints_failed.load(Ordering::Relaxed),
        "hints_expired": s.hints_expired.load(Ordering::Relaxed),
        "deletes_reclaimed": s.deletes_reclaimed.load(Ordering::Relaxed),
        "delete_grace_ms": rw.coordinator().delete_grace_ms(),
        "read_repairs": s.read_repairs.load(Ordering::Relaxed),
        "obsolete": s.obsolete.load(Ordering::Relaxed),
    }))
    .into_response())
}

async fn push_hints(State(st): S) -> Result<Response, ApiError> {
    let r = service(&st)?.coordinator().push_hints().await?;
    Ok(Json(serde_json::json!({ "pushed": r.pushed, "failed": r.failed, "expired": r.expired, "pending": r.pending })).into_response())
}

async fn reclaim_deletes(State(st): S) -> Result<Response, ApiError> {
    let r = service(&st)?.reclaim_deletes().await?;
    Ok(Json(serde_json::json!({ "examined": r.examined, "reclaimed": r.reclaimed, "kept": r.kept })).into_response())
}

async fn local_versions(State(st): S, Path((store, key)): Path<(String, String)>) -> Result<Response, ApiError> {
    let key = decode_key(&key)?;
    let local = service(&st)?.coordinator().local().clone();
    let versions = tokio::task::spawn_blocking(move || local.get(&store, &key)).await.map_err(|e| ApiError::Internal(e.to_string()))??;
    let out: Vec<serde_json::Value> = versions
        .iter()
        .map(|v| {
            serde_json::json!({
                "clock": v.clock.to_text(),
                "value": v.value.as_ref().map(|b| base64::engine::general_purpose::STANDARD.encode(b)),
            })
        })
        .collect();
    Ok(Json(serde_json::json!({ "versions": out })).into_response())
}

/// The ring partitions a `partitions=1,2,3` query names (all when absent).
fn partitions_of(q: &HashMap<String, String>) -> Result<Option<std::collections::BTreeSet<u32>>, ApiError> {
    q.get("partitions")
        .map(|list| {
            list.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<u32>().map_err(|e| ApiError::BadRequest(format!("partition {s:?}: {e}"))))
                .collect::<Result<std::collections::BTreeSet<u32>, _>>()
        })
        .transpose()
}

async fn export_entries(State(st): S, Path(store): Path<String>, Query(q): Query<HashMap<String, String>>) -> Result<Response, ApiError> {
    let entries = service(&st)?.entries(&store, partitions_of(&q)?).await?;
    let mut body = String::new();
    for (k, v) in &entries {
        body.push_str(&strata_rwstore::value::entry_line(k, v));
        body.push('\n');
    }
    Ok(([(axum::http::header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

async fn import_entries(State(st): S, Path(store): Path<String>, body: Bytes) -> Result<Response, ApiError> {
    let rw = service(&st)?;
    let node = st.cluster.as_ref().ok_or(ApiError::NotClustered)?;
    if !node.map().rw_stores.contains_key(&store) {
        return Err(strata_rwstore::RwError::NoSuchStore(store).into());
    }
    // Every line is checked before anything is written.
    let entries = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .enumerate()
        .map(|(i, l)| strata_rwstore::value::parse_entry_line(l).map_err(|e| ApiError::BadRequest(format!("line {}: {e}", i + 1))))
        .collect::<Result<Vec<_>, _>>()?;
    let (written, skipped) = rw.import(&store, entries).await?;
    Ok(Json(serde_json::json!({ "written": written, "skipped": skipped })).into_response())
}

async fn truncate(State(st): S, Path(store): Path<String>, Query(q): Query<HashMap<String, String>>) -> Result<Response, ApiError> {
    let deleted = service(&st)?.truncate(&store, partitions_of(&q)?).await?;
    Ok(Json(serde_json::json!({ "deleted": deleted })).into_response())
}
