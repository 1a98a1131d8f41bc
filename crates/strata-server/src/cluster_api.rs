//! HTTP endpoints of cluster mode: replica RPCs, Raft messages, the map,
//! and the admin calls behind `strata cluster|node|disk|partition`.

use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;
use strata_cluster::{Command, encode_map};

type S = State<Arc<AppState>>;

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/rpc/v1/{name}", post(rpc))
        .route("/raft/v1/{name}", post(raft))
        .route("/meta/v1/propose", post(raft))
        .route("/meta/v1/map", get(map_bytes))
        .route("/admin/cluster/status", get(status))
        .route("/admin/cluster/init", post(init))
        .route("/admin/cluster/command", post(command))
        .route("/admin/replication", get(replication))
}

fn json_error(status: StatusCode, code: &str, message: impl std::fmt::Display) -> Response {
    (status, Json(serde_json::json!({ "code": code, "message": message.to_string() }))).into_response()
}

fn not_clustered() -> Response {
    json_error(StatusCode::NOT_FOUND, "NotClustered", "this node runs as a single node (start it with --node-id and --meta)")
}

async fn rpc(State(st): S, body: Bytes) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let answer = strata_rpc::serve(&*n, body).await;
    ([(header::CONTENT_TYPE, "application/x-strata-frame")], answer).into_response()
}

async fn raft(State(st): S, body: Bytes) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let Some(meta) = n.meta.clone() else {
        return json_error(StatusCode::NOT_FOUND, "NotAMetadataMember", "this node is not a member of the metadata group");
    };
    match meta.handle(&body).await {
        Ok(frame) => ([(header::CONTENT_TYPE, "application/x-strata-frame")], frame).into_response(),
        Err(e) => json_error(StatusCode::BAD_REQUEST, "BadFrame", e),
    }
}

async fn map_bytes(State(st): S) -> Response {
    match &st.cluster {
        Some(n) => ([(header::CONTENT_TYPE, "application/octet-stream")], encode_map(&n.map())).into_response(),
        None => not_clustered(),
    }
}

async fn status(State(st): S) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let map = n.map();
    let detector: Vec<serde_json::Value> = st
        .router_detector
        .as_ref()
        .map(|d| d.nodes().into_iter().map(|(id, h)| serde_json::json!({ "node": id, "health": format!("{h:?}") })).collect())
        .unwrap_or_default();
    Json(serde_json::json!({
        "node": n.config.node_id,
        "meta": n.meta.as_ref().map(|m| m.status()),
        "map": &*map,
        "replication": n.replication.lag(),
        "failure_detector": detector,
    }))
    .into_response()
}

async fn init(State(st): S) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let Some(meta) = n.meta.clone() else {
        return json_error(StatusCode::BAD_REQUEST, "NotAMetadataMember", "run init on a member of the metadata group");
    };
    match meta.initialize(n.config.meta_peers.clone()).await {
        Ok(()) => Json(serde_json::json!({ "initialized": true, "members": n.config.meta_peers })).into_response(),
        Err(e @ strata_cluster::meta::MetaError::AlreadyInitialized) => json_error(StatusCode::CONFLICT, "AlreadyInitialized", e),
        Err(e) => json_error(StatusCode::SERVICE_UNAVAILABLE, "MetaUnavailable", e),
    }
}

async fn command(State(st): S, body: Bytes) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let cmd: Command = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => return json_error(StatusCode::BAD_REQUEST, "BadCommand", format!("not a cluster command: {e}")),
    };
    match n.propose(cmd).await {
        Ok(outcome) => Json(outcome).into_response(),
        Err(e) => json_error(StatusCode::SERVICE_UNAVAILABLE, "MetaUnavailable", e),
    }
}

async fn replication(State(st): S) -> Response {
    match &st.cluster {
        Some(n) => Json(n.replication.lag()).into_response(),
        None => not_clustered(),
    }
}
