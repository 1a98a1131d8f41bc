//! HTTP endpoints of cluster mode: replica RPCs, Raft messages, the map,
//! and the admin calls behind `strata cluster|node|disk|partition`.

use crate::{ApiError, AppState};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use std::sync::Arc;
use strata_cluster::{Command, Outcome, encode_map};

type S = State<Arc<AppState>>;

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/rpc/v1/session", post(rpc_session_without_upgrade))
        .route("/rpc/v1/{name}", post(rpc))
        .route("/raft/v1/{name}", post(raft))
        .route("/meta/v1/propose", post(raft))
        .route("/meta/v1/read-index", post(raft))
        .route("/meta/v1/add-learner", post(raft))
        .route("/meta/v1/map", get(map_bytes))
        .route("/meta/v1/heartbeat", post(heartbeat))
        .route("/admin/cluster/status", get(status))
        .route("/admin/cluster/init", post(init))
        .route("/admin/cluster/command", post(command))
        .route("/admin/cluster/rebalance", post(rebalance))
        .route("/admin/cluster/moves", get(moves))
        .route("/admin/replication", get(replication))
}

fn not_clustered() -> Response {
    ApiError::NotClustered.into_response()
}

/// A replica RPC session request the connection loop did not take.
async fn rpc_session_without_upgrade() -> ApiError {
    ApiError::BadRequest(format!(
        "a replica RPC session is opened by the first request of a connection, with Connection: upgrade and Upgrade: {}",
        strata_net::RPC_SESSION_PROTOCOL
    ))
}

async fn rpc(State(st): S, body: Bytes) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let answer = strata_rpc::serve(&*n, body).await;
    ([(header::CONTENT_TYPE, "application/x-strata-frame")], axum::body::Body::new(strata_net::Chunks::new(answer))).into_response()
}

async fn raft(State(st): S, body: Bytes) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let Some(meta) = n.raft_node() else {
        return ApiError::NotAMetadataMember.into_response();
    };
    match meta.handle(&body).await {
        Ok(frame) => ([(header::CONTENT_TYPE, "application/x-strata-frame")], frame).into_response(),
        Err(e) => ApiError::BadRequest(format!("bad Raft frame: {e}")).into_response(),
    }
}

/// A node's heartbeat to this metadata member: recorded for the leader's
/// failure detection; answered with this member's map epoch.
async fn heartbeat(State(st): S, body: Bytes) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    if n.meta.is_none() {
        return ApiError::NotAMetadataMember.into_response();
    }
    let hb = match strata_format::frame::decode_frame(&body) {
        Ok((strata_cluster::KIND_HEARTBEAT, p)) => postcard::from_bytes::<strata_cluster::Heartbeat>(p).map_err(|e| e.to_string()),
        Ok((k, _)) => Err(format!("frame kind {k:#x}, expected a heartbeat")),
        Err(e) => Err(e.to_string()),
    };
    match hb {
        Ok(hb) => {
            let epoch = n.record_heartbeat(&hb);
            let payload = postcard::to_stdvec(&epoch).unwrap_or_default();
            ([(header::CONTENT_TYPE, "application/x-strata-frame")], strata_format::frame::encode_frame(strata_cluster::KIND_HEARTBEAT, &payload))
                .into_response()
        }
        Err(e) => ApiError::BadRequest(format!("bad heartbeat: {e}")).into_response(),
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
        "learner": n.learner.as_ref().map(|m| m.status()),
        "map": &*map,
        "degraded": map.degraded(),
        "replication": n.replication.lag(),
        "failure_detector": detector,
    }))
    .into_response()
}

/// The copies into the replicas this node receives by moves under way:
/// bytes copied, bytes to copy, and the rate (the console's MB/s).
async fn moves(State(st): S) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let moves: Vec<serde_json::Value> = n
        .move_copies()
        .into_iter()
        .map(|c| {
            let mut v = serde_json::to_value(c).unwrap_or_default();
            v["bytes_per_sec"] = serde_json::json!(c.rate().round() as u64);
            v
        })
        .collect();
    Json(serde_json::json!({ "node": n.config.node_id, "copied_bytes_total": n.move_copies.total(), "moves": moves })).into_response()
}

/// Initializes the metadata group and makes the cluster's first admin key
/// (there is no key before: only a holder of the cluster secret gets here).
async fn init(State(st): S) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let Some(meta) = n.meta.clone() else {
        return ApiError::NotAMetadataMember.into_response();
    };
    match meta.initialize(n.config.meta_peers.clone()).await {
        Ok(()) => {}
        Err(strata_cluster::meta::MetaError::AlreadyInitialized) => return ApiError::AlreadyInitialized.into_response(),
        Err(e) => return ApiError::MetaUnavailable(e.to_string()).into_response(),
    }
    // The group elects its leader in a moment; until then a proposal fails.
    let key = crate::new_access_key("admin", true, st.router.clock().now_ms());
    let made = serde_json::json!({ "access_key_id": key.id, "secret_access_key": key.secret, "name": key.name, "admin": true });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match st.names.apply(strata_names::NameOp::CreateKey { key: key.clone() }).await {
            // A retry of a proposal that did commit: the key is there.
            Ok(_) | Err(strata_names::NameError::AccessKeyExists(_)) => break,
            Err(e) if std::time::Instant::now() > deadline => {
                return ApiError::MetaUnavailable(format!(
                    "initialized, but the first admin key could not be made ({e}): make one with strata key create --admin --cluster-secret"
                ))
                .into_response();
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    Json(serde_json::json!({ "initialized": true, "members": n.config.meta_peers, "admin_key": made })).into_response()
}

async fn command(State(st): S, Extension(who): Extension<crate::Principal>, body: Bytes) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let cmd: Command = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => return ApiError::BadRequest(format!("not a cluster command: {e}")).into_response(),
    };
    // The event records who asked: the caller, unless a node forwards a
    // command that already says (docs/events.md).
    let cmd = match (&who, cmd) {
        (crate::Principal::Peer | crate::Principal::Open, c @ Command::As { .. }) => c,
        (_, c) => c.by(who.who(), st.router.clock().now_ms()),
    };
    match n.propose(cmd).await {
        // A refusal says why in words too, for the CLI to print.
        Ok(Outcome::Refused(e)) => {
            let message = e.to_string();
            Json(serde_json::json!({ "Refused": e, "message": message })).into_response()
        }
        Ok(outcome) => Json(outcome).into_response(),
        Err(e) => ApiError::MetaUnavailable(e.to_string()).into_response(),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RebalanceRequest {
    /// Moves under way at most.
    #[serde(default = "two")]
    max_moves: u32,
    /// MB/s each node copies into the replicas the plan fills (0: unthrottled).
    #[serde(default)]
    throttle_mb_s: u32,
    /// The plan's random choices.
    #[serde(default = "one")]
    seed: u64,
}

fn two() -> u32 {
    2
}

fn one() -> u64 {
    1
}

/// Plans Ambry's rebalancing on this node's map and proposes it (what
/// `strata cluster rebalance` does from outside): `{"moves": n}`, 0 when
/// the map is balanced already (nothing is proposed then).
async fn rebalance(State(st): S, Extension(who): Extension<crate::Principal>, body: Bytes) -> Response {
    let Some(n) = st.cluster.clone() else { return not_clustered() };
    let req: RebalanceRequest = if body.is_empty() {
        RebalanceRequest { max_moves: two(), throttle_mb_s: 0, seed: one() }
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => return ApiError::BadRequest(format!("not a rebalancing request: {e}")).into_response(),
        }
    };
    if req.max_moves == 0 {
        return ApiError::BadRequest("max_moves must be at least 1".into()).into_response();
    }
    let map = n.map();
    let plan = match map.rebalance_plan(req.seed) {
        Ok(p) => p,
        Err(e) => return ApiError::BadRequest(e.to_string()).into_response(),
    };
    if plan.is_empty() {
        return Json(serde_json::json!({ "moves": 0, "message": "balanced already: nothing to move" })).into_response();
    }
    let moves = plan.len();
    let now_ms = st.router.clock().now_ms();
    let plan = strata_cluster::Rebalance { moves: plan, max_moves: req.max_moves, throttle_mb_s: req.throttle_mb_s, started_ms: now_ms };
    match n.propose(Command::StartRebalance { plan }.by(who.who(), now_ms)).await {
        Ok(Outcome::Refused(e)) => ApiError::ClusterRefused(e.to_string()).into_response(),
        Ok(outcome) => Json(serde_json::json!({ "moves": moves, "outcome": outcome })).into_response(),
        Err(e) => ApiError::MetaUnavailable(e.to_string()).into_response(),
    }
}

async fn replication(State(st): S) -> Response {
    match &st.cluster {
        Some(n) => Json(n.replication.lag()).into_response(),
        None => not_clustered(),
    }
}
