//! Týr's transactions on a cluster node (docs/transactions.md).
//!
//! The commit chain and the reads, between clients and nodes (bodies in
//! the transaction envelope, docs/formats.md "Transactions"):
//! - `POST /txn/step`: a forward-pass step, on the hop's row primary;
//! - `POST /txn/finish`: the decision on one hop (backward pass);
//! - `POST /txn/resolve`: a question to a decider (decides Abort when it
//!   has no decision yet);
//! - `POST /txn/vm-read`: a read through a blob's version manager;
//! - `POST /txn/chunk`: a chunk as of a blob version;
//! - `POST /txn/usage`: the versions of a blob in use, from its version
//!   manager (asked by the version collectors of the blob's chunk rows).
//!
//! For people and scripts, `POST /txn` runs a whole transaction given as
//! JSON, `{"chunk_bytes": 65536, "ops": [...]}`, each op one of
//! `{"op": "read", "blob": "a", "offset": 0, "len": 8}`,
//! `{"op": "write", "blob": "a", "offset": 0, "data": "<base64>"}`,
//! `{"op": "append", "blob": "a", "data": "<base64>"}`,
//! `{"op": "add", "blob": "a", "offset": 0, "delta": -3}`,
//! `{"op": "size", "blob": "a"}`: it answers `{"seq": n, "results": [...]}`
//! (a read's bytes in base64, an append's offset, a size) or 409
//! `TxnConflict` when it aborted with no effect.
//! An interactive transaction: `POST /txn/begin` (`{"chunk_bytes": N,
//! "timeout_ms": T}`, both optional) answers `{"id": ...}`; `POST
//! /txn/{id}/op` runs one op as above and answers its result; `POST
//! /txn/{id}/commit` answers `{"seq": n}` or 409 `TxnConflict`; `POST
//! /txn/{id}/abort` drops it. Until commit nothing reaches a participant
//! (writes are buffered, reads hold nothing), so a transaction left past
//! its timeout (60 s by default) is simply dropped: 404 `NoSuchTxn`.
//! `POST /admin/txn/recover` runs a pass of the intent recovery sweep now,
//! `POST /admin/txn/gc` one of the version collector;
//! `GET /admin/txn` says what this node holds.

use crate::{ApiError, AppState};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use http_body_util::BodyExt;
use std::sync::Arc;
use strata_txn::TxnError;
use strata_txn::model::{decode, encode};

/// The largest step or read a node takes.
const TXN_BODY_BYTES_MAX: usize = 64 << 20;

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/txn/step", post(step))
        .route("/txn/finish", post(finish))
        .route("/txn/resolve", post(resolve))
        .route("/txn/vm-read", post(vm_read))
        .route("/txn/chunk", post(chunk))
        .route("/txn/usage", post(usage))
        .route("/txn", post(batch))
        .route("/txn/begin", post(begin))
        .route("/txn/{id}/op", post(session_op))
        .route("/txn/{id}/commit", post(session_commit))
        .route("/txn/{id}/abort", post(session_abort))
        .route("/admin/txn", get(status))
        .route("/admin/txn/recover", post(recover))
        .route("/admin/txn/gc", post(gc))
}

type S = State<Arc<AppState>>;

fn node(st: &AppState) -> Result<&Arc<strata_node::ClusterNode>, ApiError> {
    st.cluster.as_ref().ok_or(ApiError::NotClustered)
}

async fn envelope<T: for<'a> serde::Deserialize<'a>>(body: Body) -> Result<T, ApiError> {
    let b = match http_body_util::Limited::new(body, TXN_BODY_BYTES_MAX).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => return Err(ApiError::BodyTooLarge { max: TXN_BODY_BYTES_MAX }),
        Err(e) => return Err(ApiError::BadRequest(format!("reading the body: {e}"))),
    };
    decode(&b).map_err(|e| TxnError::Invalid(format!("the request body: {e}")).into())
}

fn answer<T: serde::Serialize>(v: &T) -> Response {
    ([(http::header::CONTENT_TYPE, "application/octet-stream")], encode(v)).into_response()
}

async fn step(State(st): S, body: Body) -> Result<Response, ApiError> {
    let n = node(&st)?;
    Ok(answer(&strata_node::txn::step(n, envelope(body).await?).await?))
}

async fn finish(State(st): S, body: Body) -> Result<Response, ApiError> {
    let n = node(&st)?;
    strata_node::txn::finish(n, envelope(body).await?).await?;
    Ok(answer(&()))
}

async fn resolve(State(st): S, body: Body) -> Result<Response, ApiError> {
    let n = node(&st)?;
    Ok(answer(&strata_node::txn::resolve(n, envelope(body).await?).await?))
}

async fn vm_read(State(st): S, headers: axum::http::HeaderMap, body: Body) -> Result<Response, ApiError> {
    let n = node(&st)?;
    let txn = match headers.get(strata_txn::TXN_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(strata_txn::TxnId::parse)
                .ok_or_else(|| TxnError::Invalid(format!("{} must be a transaction id in 32 hex digits", strata_txn::TXN_HEADER)))?,
        ),
    };
    Ok(answer(&strata_node::txn::vm_read(n, envelope(body).await?, txn).await?))
}

async fn usage(State(st): S, body: Body) -> Result<Response, ApiError> {
    let n = node(&st)?;
    Ok(answer(&strata_node::txn::usage(n, envelope(body).await?)?))
}

async fn chunk(State(st): S, body: Body) -> Result<Response, ApiError> {
    let n = node(&st)?;
    Ok(answer(&strata_node::txn::chunk(n, envelope(body).await?)?))
}

async fn status(State(st): S) -> Result<Response, ApiError> {
    let n = node(&st)?;
    let c = n.txn().config();
    let (committed, aborted, presumed_aborted) = n.txn().stats.get();
    Ok(Json(serde_json::json!({
        "committed": committed,
        "aborted": aborted,
        "presumed_aborted": presumed_aborted,
        "held": n.txn().held(),
        "readers": n.txn().readers(),
        "mode": format!("{:?}", c.mode),
        "wait_ms": c.wait.as_millis() as u64,
        "intent_timeout_ms": c.intent_timeout.as_millis() as u64,
        "read_lease_ms": c.read_lease.as_millis() as u64,
    }))
    .into_response())
}

async fn gc(State(st): S) -> Result<Response, ApiError> {
    Ok(Json(strata_node::txn::collect(node(&st)?).await).into_response())
}

async fn recover(State(st): S) -> Result<Response, ApiError> {
    Ok(Json(strata_node::txn::recover(node(&st)?).await).into_response())
}

/// One operation of a JSON transaction.
#[derive(serde::Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
enum JsonOp {
    Read { blob: String, offset: u64, len: u64 },
    Write { blob: String, offset: u64, data: String },
    Append { blob: String, data: String },
    Add { blob: String, offset: u64, delta: i64 },
    Size { blob: String },
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonTxn {
    #[serde(default)]
    chunk_bytes: Option<u64>,
    ops: Vec<JsonOp>,
}

fn b64(s: &str, what: &str) -> Result<Vec<u8>, ApiError> {
    base64::engine::general_purpose::STANDARD.decode(s).map_err(|e| ApiError::BadRequest(format!("{what}: not base64: {e}")))
}

/// Runs one operation in `txn`; its result.
async fn run_op(txn: &mut strata_txn::Transaction, op: JsonOp, what: &str) -> Result<serde_json::Value, ApiError> {
    Ok(match op {
        JsonOp::Read { blob, offset, len } => {
            serde_json::json!({"data": base64::engine::general_purpose::STANDARD.encode(txn.read(&blob, offset, len).await?)})
        }
        JsonOp::Write { blob, offset, data } => {
            txn.write(&blob, offset, &b64(&data, what)?);
            serde_json::json!({})
        }
        JsonOp::Append { blob, data } => serde_json::json!({"offset": txn.append(&blob, &b64(&data, what)?).await?}),
        JsonOp::Add { blob, offset, delta } => {
            txn.add(&blob, offset, delta)?;
            serde_json::json!({})
        }
        JsonOp::Size { blob } => serde_json::json!({"size": txn.size(&blob).await?}),
    })
}

/// A client of this node's cluster, as the JSON transactions use.
async fn local_client(n: &strata_node::ClusterNode, chunk_bytes: Option<u64>) -> Result<Arc<strata_txn::TxnClient>, ApiError> {
    let map = n.map();
    let me = map.nodes.get(&n.config.node_id).map(|x| x.addr.clone()).ok_or_else(|| ApiError::BadRequest("this node is not in its map yet".into()))?;
    let seeds = [format!("{}://{me}", strata_node::kv_fetch::node_scheme())];
    Ok(strata_txn::TxnClient::connect(&seeds, &strata_node::kv_fetch::node_options(), chunk_bytes.unwrap_or(64 << 10)).await?)
}

/// Interactive transactions open on this node: each with its deadline,
/// taken out while one of its ops runs.
type Sessions = std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, Option<strata_txn::Transaction>)>>;

fn sessions() -> &'static Sessions {
    static S: std::sync::OnceLock<Sessions> = std::sync::OnceLock::new();
    S.get_or_init(Default::default)
}

/// Takes transaction `id` out to run something on it (expired ones are dropped).
fn take(id: &str) -> Result<strata_txn::Transaction, ApiError> {
    let mut m = sessions().lock().unwrap_or_else(|p| p.into_inner());
    let now = std::time::Instant::now();
    m.retain(|_, (deadline, _)| *deadline > now);
    match m.get_mut(id) {
        None => Err(ApiError::NoSuchTxn(id.to_string())),
        Some((_, t)) => t.take().ok_or_else(|| TxnError::Invalid(format!("transaction {id} is running another operation")).into()),
    }
}

fn put_back(id: &str, t: strata_txn::Transaction) {
    if let Some((_, slot)) = sessions().lock().unwrap_or_else(|p| p.into_inner()).get_mut(id) {
        *slot = Some(t);
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct BeginArgs {
    #[serde(default)]
    chunk_bytes: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

async fn small_body(body: Body, max: usize) -> Result<axum::body::Bytes, ApiError> {
    match http_body_util::Limited::new(body, max).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(ApiError::BodyTooLarge { max }),
        Err(e) => Err(ApiError::BadRequest(format!("reading the body: {e}"))),
    }
}

async fn begin(State(st): S, body: Body) -> Result<Response, ApiError> {
    let n = node(&st)?;
    let b = small_body(body, 4096).await?;
    let a: BeginArgs = if b.is_empty() {
        BeginArgs::default()
    } else {
        serde_json::from_slice(&b).map_err(|e| ApiError::BadRequest(format!("begin: {e} (want {{\"chunk_bytes\": N, \"timeout_ms\": T}})")))?
    };
    let timeout = std::time::Duration::from_millis(a.timeout_ms.unwrap_or(60_000).clamp(1, 3_600_000));
    let t = local_client(n, a.chunk_bytes).await?.begin();
    let id = t.id().to_string();
    sessions().lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), (std::time::Instant::now() + timeout, Some(t)));
    Ok(Json(serde_json::json!({"id": id, "timeout_ms": timeout.as_millis() as u64})).into_response())
}

async fn session_op(Path(id): Path<String>, body: Body) -> Result<Response, ApiError> {
    let b = small_body(body, crate::auth::JSON_BODY_BYTES_MAX).await?;
    let op: JsonOp = serde_json::from_slice(&b).map_err(|e| ApiError::BadRequest(format!("op: {e}")))?;
    let mut t = take(&id)?;
    let r = run_op(&mut t, op, "the op").await;
    put_back(&id, t);
    Ok(Json(r?).into_response())
}

async fn session_commit(Path(id): Path<String>) -> Result<Response, ApiError> {
    let t = take(&id)?;
    sessions().lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    Ok(Json(serde_json::json!({"seq": t.commit().await?})).into_response())
}

async fn session_abort(Path(id): Path<String>) -> Result<Response, ApiError> {
    take(&id)?.abort();
    sessions().lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn batch(State(st): S, body: axum::body::Bytes) -> Result<Response, ApiError> {
    let n = node(&st)?;
    let t: JsonTxn = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "transaction: {e} (want {{\"ops\": [{{\"op\": \"read\" | \"write\" | \"append\" | \"add\" | \"size\", \"blob\": ..., ...}}]}})"
        ))
    })?;
    let client = local_client(n, t.chunk_bytes).await?;
    let mut txn = client.begin();
    let mut results = Vec::with_capacity(t.ops.len());
    for (i, op) in t.ops.into_iter().enumerate() {
        results.push(run_op(&mut txn, op, &format!("op {i}")).await?);
    }
    let seq = txn.commit().await?;
    Ok(Json(serde_json::json!({"seq": seq, "results": results})).into_response())
}
