//! Tracts of striped blobs (FDS §2.1) on a cluster node: the node answers
//! for its own replicas of the tract locator table's rows; the client
//! library (`strata_tract::TractClient`) sends each write to every replica
//! of the row and each read to one.
//!
//! - `PUT /tract/{guid}/{tract}`: the body (at most the tract size) is the
//!   whole tract; `x-strata-row-version` the row version the client's
//!   table holds, `x-strata-tract-version` the version written. Durable
//!   when it answers 204 with `x-strata-tract-version`: the newest version
//!   this replica holds.
//! - `GET /tract/{guid}/{tract}` with `x-strata-row-version`: the newest
//!   version's bytes, its version in `x-strata-tract-version`.
//! - `POST /tract/{guid}` with a JSON metadata operation (`{"op":
//!   "create", "replication": 3}`, `{"op": "open"}`, `{"op": "delete"}`,
//!   `{"op": "extend", "tracts": 4}`) and `x-strata-row-version` of the
//!   blob's metadata row, on that row's primary: the blob's metadata after
//!   it, `{deleted, replication, size_tracts, created_ms, incarnation}`.
//! - Tract reads and writes name the blob's incarnation in
//!   `x-strata-incarnation`.
//! - `POST /admin/tracts/orphans`: a pass of this node's orphan reclaimer
//!   now (`strata_node::tracts::reclaim_orphans`; the worker
//!   `tract-orphans` runs one every `--tract-orphan-interval-secs`).
//! - `GET /admin/tracts/recovery`: the row replicas filling on this node
//!   (recovery or growth), bytes copied against bytes their sources hold.
//! - `GET /admin/tracts`: the table (tract size, replicas, scatter width,
//!   the client's simultaneous limit, each row's partition, version and
//!   disks).
//!
//! A row version other than the node's is refused with 409 `StaleRow`; a
//! node that holds no replica of the row answers 421 `NotHere`; a replica
//! still filling refuses reads with 503 `Filling`.

use crate::{ApiError, AppState};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http_body_util::BodyExt;
use std::sync::Arc;
use strata_tract::{Guid, INCARNATION_HEADER, ROW_VERSION_HEADER, TRACT_VERSION_HEADER, TractError};

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/tract/{guid}", axum::routing::post(blob_meta))
        .route("/tract/{guid}/{tract}", get(read_tract).put(write_tract))
        .route("/admin/tracts", get(table))
        .route("/admin/tracts/orphans", axum::routing::post(orphans))
        .route("/admin/tracts/recovery", get(recovery))
}

type S = State<Arc<AppState>>;

fn node(st: &AppState) -> Result<&Arc<strata_node::ClusterNode>, ApiError> {
    st.cluster.as_ref().ok_or(ApiError::NotClustered)
}

fn number(h: &HeaderMap, name: &str) -> Result<u64, ApiError> {
    let v = h.get(name).ok_or_else(|| ApiError::BadHeader { name: name.into(), reason: "missing".into() })?;
    v.to_str().ok().and_then(|s| s.parse().ok()).ok_or_else(|| ApiError::BadHeader { name: name.into(), reason: "not a decimal number".into() })
}

fn incarnation(h: &HeaderMap) -> Result<u32, ApiError> {
    match h.get(INCARNATION_HEADER) {
        None => Ok(0),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ApiError::BadHeader { name: INCARNATION_HEADER.into(), reason: "not a decimal number below 2^32".into() }),
    }
}

fn target(guid: &str, tract: &str) -> Result<(Guid, u64), ApiError> {
    let guid = Guid::parse(guid)?;
    let tract = tract.parse().map_err(|_| TractError::Invalid(format!("tract index {tract:?}: want a decimal number")))?;
    Ok((guid, tract))
}

fn with_version(mut resp: Response, version: u64) -> Response {
    if let Ok(v) = HeaderValue::from_str(&version.to_string()) {
        resp.headers_mut().insert(TRACT_VERSION_HEADER, v);
    }
    resp
}

async fn write_tract(State(st): S, Path((guid, tract)): Path<(String, String)>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let node = node(&st)?;
    let (guid, tract) = target(&guid, &tract)?;
    let (row, version) = (number(&headers, ROW_VERSION_HEADER)?, number(&headers, TRACT_VERSION_HEADER)?);
    let max = node.map().tracts.as_ref().map(|t| t.tract_bytes).ok_or(TractError::NoTable)?;
    let data = match http_body_util::Limited::new(body, max as usize).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            return Err(TractError::TooLarge { size: max + 1, max }.into());
        }
        Err(e) => return Err(ApiError::BadRequest(format!("reading the tract: {e}"))),
    };
    let newest = strata_node::tracts::write(node, &guid, incarnation(&headers)?, tract, row, version, data).await?;
    Ok(with_version(StatusCode::NO_CONTENT.into_response(), newest))
}

async fn read_tract(State(st): S, Path((guid, tract)): Path<(String, String)>, headers: HeaderMap) -> Result<Response, ApiError> {
    let node = node(&st)?;
    let (guid, tract) = target(&guid, &tract)?;
    let (version, data) = strata_node::tracts::read(node, &guid, incarnation(&headers)?, tract, number(&headers, ROW_VERSION_HEADER)?)?;
    Ok(with_version(data.into_response(), version))
}

async fn blob_meta(State(st): S, Path(guid): Path<String>, headers: HeaderMap, body: axum::body::Bytes) -> Result<Response, ApiError> {
    let node = node(&st)?;
    let guid = Guid::parse(&guid)?;
    let op: strata_tract::meta::MetaOp = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("metadata operation: {e} (want {{\"op\": \"create\" | \"open\" | \"delete\" | \"extend\", ...}})")))?;
    let m = strata_node::tracts::meta(node, &guid, op, number(&headers, ROW_VERSION_HEADER)?).await?;
    Ok(Json(m).into_response())
}

async fn orphans(State(st): S) -> Result<Response, ApiError> {
    Ok(Json(strata_node::tracts::reclaim_orphans(node(&st)?).await?).into_response())
}

async fn recovery(State(st): S) -> Result<Response, ApiError> {
    Ok(Json(strata_node::tracts::fills(node(&st)?).await).into_response())
}

async fn table(State(st): S) -> Result<Response, ApiError> {
    let map = node(&st)?.map();
    let Some(t) = &map.tracts else { return Err(TractError::NoTable.into()) };
    let rows: Vec<serde_json::Value> = t
        .rows
        .iter()
        .filter_map(|id| map.partitions.get(id))
        .map(|p| {
            serde_json::json!({
                "partition": p.id,
                "version": p.version,
                "disks": p.replicas.iter().map(|r| format!("{}:{}", r.node, r.disk)).collect::<Vec<_>>(),
                "filling": p.moving.filter(|m| m.phase == strata_cluster::MovePhase::Filling).map(|m| format!("{}:{}", m.to.node, m.to.disk)),
            })
        })
        .collect();
    Ok(Json(serde_json::json!({
        "tract_bytes": t.tract_bytes,
        "replicas": t.replicas,
        "scatter": t.scatter,
        "simultaneous_limit": map.tract_simultaneous_limit(),
        "rows": rows,
    }))
    .into_response())
}
