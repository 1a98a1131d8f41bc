//! Admin endpoints of identities and what they hold: access keys (`strata
//! key`), their rights (buckets, containers, read-only stores, expiry),
//! containers (`strata container`) and public buckets (`strata bucket`).
//! Every port's identities are these keys.
//!
//! - `GET /admin/keys`: keys and their rights, without secrets
//! - `POST /admin/keys` `{"name", "admin", "expires_in_secs"?}`: a new key, with its secret (shown once here)
//! - `DELETE /admin/keys/{id}`: revokes the key on every node before answering
//! - `PUT /admin/keys/{id}/grants/{bucket}` `{"read", "write"}`
//! - `PUT /admin/keys/{id}/containers/{account}/{container}` `{"read", "write", "delete"}` (`*`: every container of the account)
//! - `PUT /admin/keys/{id}/kv/{store}` `{"read", "admin"}` (`*`: every store)
//! - `PUT /admin/keys/{id}/expiry` `{"expires_ms"}` (0: never)
//! - `GET /admin/containers`, `POST /admin/containers` `{"account", "container"}`
//! - `GET /admin/s3/buckets`: buckets with object counts and bytes
//! - `PUT /admin/s3/buckets/{bucket}/public` `{"public"}`
//!
//! `/admin/s3/keys...` are the same key endpoints under their first names.
//!
//! A change that takes rights away (a key deleted, expired sooner, a grant
//! removed) is answered once every node of a cluster has applied it, or
//! says which nodes did not confirm in time: a revoked key stops working
//! everywhere at once, not whenever a node next hears from the leader.

use crate::{ApiError, AppState};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use bytes::Bytes;
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;
use strata_names::{AccessKey, BlobGrant, ContainerRef, Grant, KvGrant, NameOp, NameState};

type S = State<Arc<AppState>>;

/// How long a revocation waits for the other nodes to confirm it.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) fn routes() -> axum::Router<Arc<AppState>> {
    let mut r = axum::Router::new();
    for base in ["/admin/keys", "/admin/s3/keys"] {
        r = r
            .route(base, get(list_keys).post(create_key))
            .route(&format!("{base}/{{id}}"), axum::routing::delete(delete_key))
            .route(&format!("{base}/{{id}}/grants/{{bucket}}"), put(set_grant))
            .route(&format!("{base}/{{id}}/containers/{{account}}/{{container}}"), put(set_container_grant))
            .route(&format!("{base}/{{id}}/kv/{{store}}"), put(set_kv_grant))
            .route(&format!("{base}/{{id}}/expiry"), put(set_expiry));
    }
    r.route("/admin/containers", get(list_containers).post(create_container))
        .route("/admin/whoami", get(whoami))
        .route("/admin/s3/buckets", get(list_buckets))
        .route("/admin/s3/buckets/{bucket}/public", put(set_public))
        .route("/meta/v1/barrier", axum::routing::post(barrier))
}

fn json<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(b).map_err(|e| ApiError::BadRequest(format!("bad JSON body: {e}")))
}

fn respond(r: Result<serde_json::Value, ApiError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

fn grant_text(g: Grant) -> &'static str {
    match (g.read, g.write) {
        (true, true) => "readwrite",
        (true, false) => "read",
        (false, true) => "write",
        (false, false) => "none",
    }
}

fn now_ms(st: &AppState) -> u64 {
    st.router.clock().now_ms()
}

/// A new access key: an id of 20 upper-case letters and digits starting
/// `SK`, and a 40-character secret, from the OS's randomness.
pub fn new_access_key(name: &str, admin: bool, now_ms: u64) -> AccessKey {
    const ID: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const SECRET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = rand::rng();
    let id: String = "SK".chars().chain((0..18).map(|_| ID[rng.random_range(0..ID.len())] as char)).collect();
    let secret: String = (0..40).map(|_| SECRET[rng.random_range(0..SECRET.len())] as char).collect();
    AccessKey { id, secret, name: name.to_owned(), created_ms: now_ms, admin, grants: Default::default() }
}

fn key_json(s: &NameState, k: &AccessKey) -> serde_json::Value {
    let grants: serde_json::Map<String, serde_json::Value> = k.grants.iter().map(|(b, g)| (b.clone(), grant_text(*g).into())).collect();
    let rights = s.rights.get(&k.id);
    let containers: serde_json::Map<String, serde_json::Value> = rights
        .map(|r| {
            r.containers.iter().map(|(c, g)| (s.container_name(*c), serde_json::json!({ "read": g.read, "write": g.write, "delete": g.delete }))).collect()
        })
        .unwrap_or_default();
    let kv: serde_json::Map<String, serde_json::Value> =
        rights.map(|r| r.kv.iter().map(|(st, g)| (st.clone(), serde_json::json!({ "read": g.read, "admin": g.admin }))).collect()).unwrap_or_default();
    let expires = rights.map_or(0, |r| r.expires_ms);
    serde_json::json!({
        "access_key_id": k.id, "name": k.name, "admin": k.admin, "created_ms": k.created_ms,
        "expires_ms": (expires != 0).then_some(expires), "grants": grants, "containers": containers, "kv": kv,
    })
}

/// Who signed the request: the key with its rights (what the console
/// shows its user), `{"principal": ...}` for any other caller.
async fn whoami(State(st): S, axum::extract::Extension(who): axum::extract::Extension<crate::Principal>) -> Response {
    let v = match &who {
        crate::Principal::Key(id) => strata_names::read(&*st.names, |s| s.keys.get(id).map(|k| key_json(s, k))),
        _ => None,
    };
    Json(v.unwrap_or_else(|| serde_json::json!({ "principal": who.label() }))).into_response()
}

async fn list_keys(State(st): S) -> Response {
    let v = strata_names::read(&*st.names, |s| serde_json::Value::Array(s.keys.values().map(|k| key_json(s, k)).collect()));
    Json(v).into_response()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateKey {
    #[serde(default)]
    name: String,
    #[serde(default)]
    admin: bool,
    /// Seconds until the key stops working (none: never).
    #[serde(default)]
    expires_in_secs: Option<u64>,
}

async fn create_key(State(st): S, body: Bytes) -> Response {
    respond(
        async {
            let c: CreateKey = if body.is_empty() { CreateKey { name: String::new(), admin: false, expires_in_secs: None } } else { json(&body)? };
            let now = now_ms(&st);
            let key = new_access_key(&c.name, c.admin, now);
            let id = key.id.clone();
            let mut v = serde_json::json!({ "access_key_id": key.id, "secret_access_key": key.secret, "name": key.name, "admin": key.admin });
            st.names.apply(NameOp::CreateKey { key }).await?;
            if let Some(secs) = c.expires_in_secs {
                let expires_ms = now.saturating_add(secs.max(1).saturating_mul(1000));
                st.names.apply(NameOp::SetKeyExpiry { id, expires_ms }).await?;
                v["expires_ms"] = expires_ms.into();
            }
            Ok(v)
        }
        .await,
    )
}

async fn delete_key(State(st): S, Path(id): Path<String>) -> Response {
    respond(
        async {
            st.names.apply(NameOp::DeleteKey { id: id.clone() }).await?;
            let confirmed = confirm_everywhere(&st).await;
            Ok(serde_json::json!({ "access_key_id": id, "deleted": true, "unconfirmed_nodes": confirmed }))
        }
        .await,
    )
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SetGrant {
    #[serde(default)]
    read: bool,
    #[serde(default)]
    write: bool,
}

async fn set_grant(State(st): S, Path((id, bucket)): Path<(String, String)>, body: Bytes) -> Response {
    respond(
        async {
            let g: SetGrant = json(&body)?;
            let grant = Grant { read: g.read, write: g.write };
            st.names.apply(NameOp::SetGrant { id: id.clone(), bucket: bucket.clone(), grant }).await?;
            let unconfirmed = confirm_everywhere(&st).await;
            Ok(serde_json::json!({ "access_key_id": id, "bucket": bucket, "grant": grant_text(grant), "unconfirmed_nodes": unconfirmed }))
        }
        .await,
    )
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SetBlobGrant {
    #[serde(default)]
    read: bool,
    #[serde(default)]
    write: bool,
    #[serde(default)]
    delete: bool,
}

async fn set_container_grant(State(st): S, Path((id, account, container)): Path<(String, String, String)>, body: Bytes) -> Response {
    respond(
        async {
            let g: SetBlobGrant = json(&body)?;
            let c: ContainerRef = strata_names::read(&*st.names, |s| s.container_ref(&account, &container))
                .ok_or_else(|| strata_names::NameError::NoSuchContainer(format!("{account}/{container}")))?;
            let grant = BlobGrant { read: g.read, write: g.write, delete: g.delete };
            st.names.apply(NameOp::SetBlobGrant { id: id.clone(), container: c, grant }).await?;
            let unconfirmed = confirm_everywhere(&st).await;
            Ok(serde_json::json!({
                "access_key_id": id, "container": format!("{account}/{container}"),
                "read": g.read, "write": g.write, "delete": g.delete, "unconfirmed_nodes": unconfirmed,
            }))
        }
        .await,
    )
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SetKvGrant {
    #[serde(default)]
    read: bool,
    #[serde(default)]
    admin: bool,
}

async fn set_kv_grant(State(st): S, Path((id, store)): Path<(String, String)>, body: Bytes) -> Response {
    respond(
        async {
            let g: SetKvGrant = json(&body)?;
            st.names.apply(NameOp::SetKvGrant { id: id.clone(), store: store.clone(), grant: KvGrant { read: g.read, admin: g.admin } }).await?;
            let unconfirmed = confirm_everywhere(&st).await;
            Ok(serde_json::json!({ "access_key_id": id, "store": store, "read": g.read, "admin": g.admin, "unconfirmed_nodes": unconfirmed }))
        }
        .await,
    )
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SetExpiry {
    expires_ms: u64,
}

async fn set_expiry(State(st): S, Path(id): Path<String>, body: Bytes) -> Response {
    respond(
        async {
            let e: SetExpiry = json(&body)?;
            st.names.apply(NameOp::SetKeyExpiry { id: id.clone(), expires_ms: e.expires_ms }).await?;
            let unconfirmed = confirm_everywhere(&st).await;
            Ok(serde_json::json!({ "access_key_id": id, "expires_ms": e.expires_ms, "unconfirmed_nodes": unconfirmed }))
        }
        .await,
    )
}

async fn list_containers(State(st): S) -> Response {
    let v = strata_names::read(&*st.names, |s| {
        let mut rows = vec![serde_json::json!({ "account": strata_names::DEFAULT, "container": strata_names::DEFAULT, "account_id": 0, "container_id": 0 })];
        for (aname, a) in &s.accounts {
            for (cname, c) in &a.containers {
                rows.push(serde_json::json!({ "account": aname, "container": cname, "account_id": a.id, "container_id": c.id, "created_ms": c.created_ms }));
            }
        }
        serde_json::Value::Array(rows)
    });
    Json(v).into_response()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateContainer {
    account: String,
    container: String,
}

async fn create_container(State(st): S, body: Bytes) -> Response {
    respond(
        async {
            let c: CreateContainer = json(&body)?;
            st.names.apply(NameOp::CreateContainer { account: c.account.clone(), container: c.container.clone(), now_ms: now_ms(&st) }).await?;
            let r = strata_names::read(&*st.names, |s| s.container_ref(&c.account, &c.container))
                .ok_or_else(|| ApiError::Internal("the container just created is not there".into()))?;
            Ok(serde_json::json!({ "account": c.account, "container": c.container, "account_id": r.account, "container_id": r.container }))
        }
        .await,
    )
}

async fn list_buckets(State(st): S) -> Response {
    let now = now_ms(&st);
    let v = strata_names::read(&*st.names, |s| {
        serde_json::Value::Array(
            s.buckets
                .iter()
                .map(|(name, b)| {
                    let live = b.objects.values().filter(|o| !o.expired(now));
                    let (count, bytes) = live.fold((0u64, 0u64), |(c, by), o| (c + 1, by + o.size));
                    serde_json::json!({
                        "bucket": name, "created_ms": b.created_ms, "owner": b.owner, "public": b.public,
                        "objects": count, "bytes": bytes, "uploads": b.uploads.len(), "lifecycle_rules": b.lifecycle.len(),
                    })
                })
                .collect(),
        )
    });
    Json(v).into_response()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SetPublic {
    public: bool,
}

async fn set_public(State(st): S, Path(bucket): Path<String>, body: Bytes) -> Response {
    respond(
        async {
            let p: SetPublic = json(&body)?;
            st.names.apply(NameOp::SetPublic { bucket: bucket.clone(), public: p.public }).await?;
            Ok(serde_json::json!({ "bucket": bucket, "public": p.public }))
        }
        .await,
    )
}

/// A node's half of [`confirm_everywhere`]: answers once this node's names
/// hold every op committed before the call (a read index from the leader).
async fn barrier(State(st): S) -> Response {
    match st.names.barrier().await {
        Ok(()) => Json(serde_json::json!({ "applied": true })).into_response(),
        Err(e) => ApiError::Names(e).into_response(),
    }
}

/// Waits until every other node of the cluster has applied the names as
/// they are now (each takes a read index and waits for it); returns the
/// nodes that did not confirm within [`CONFIRM_TIMEOUT`]. Nothing to wait
/// for on a single node.
async fn confirm_everywhere(st: &AppState) -> Vec<u64> {
    let Some(node) = &st.cluster else { return Vec::new() };
    let map = node.map();
    let others: Vec<(u64, String)> = map.nodes.values().filter(|n| n.id != node.id()).map(|n| (n.id, n.addr.clone())).collect();
    let client = strata_net::Client::new();
    let asks = others.iter().map(|(id, addr)| {
        let client = client.clone();
        async move {
            let ok = client.post_raw(addr, "/meta/v1/barrier", Vec::new(), CONFIRM_TIMEOUT).await.is_ok();
            (*id, ok)
        }
    });
    let unconfirmed: Vec<u64> = futures_util::future::join_all(asks).await.into_iter().filter(|(_, ok)| !ok).map(|(id, _)| id).collect();
    if !unconfirmed.is_empty() {
        tracing::warn!(nodes = ?unconfirmed, "a rights change was not confirmed by every node in time; they apply it when they next hear from the metadata group");
    }
    unconfirmed
}
