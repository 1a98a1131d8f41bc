//! Admin endpoints of the S3 API's metadata: access keys (`strata key`),
//! grants and public buckets (`strata bucket`).
//!
//! - `GET /admin/s3/keys`: keys without their secrets
//! - `POST /admin/s3/keys` `{"name", "admin"}`: a new key, with its secret (shown once here)
//! - `DELETE /admin/s3/keys/{id}`
//! - `PUT /admin/s3/keys/{id}/grants/{bucket}` `{"read", "write"}`
//! - `GET /admin/s3/buckets`: buckets with object counts and bytes
//! - `PUT /admin/s3/buckets/{bucket}/public` `{"public"}`

use crate::{ApiError, AppState};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use bytes::Bytes;
use rand::Rng;
use std::sync::Arc;
use strata_names::{AccessKey, Grant, NameIndex, NameOp};
use strata_types::Clock;

type S = State<Arc<AppState>>;

pub(crate) fn routes() -> axum::Router<Arc<AppState>> {
    axum::Router::new()
        .route("/admin/s3/keys", get(list_keys).post(create_key))
        .route("/admin/s3/keys/{id}", axum::routing::delete(delete_key))
        .route("/admin/s3/keys/{id}/grants/{bucket}", put(set_grant))
        .route("/admin/s3/buckets", get(list_buckets))
        .route("/admin/s3/buckets/{bucket}/public", put(set_public))
}

fn names(st: &AppState) -> Result<&Arc<dyn NameIndex>, ApiError> {
    st.names.as_ref().ok_or(ApiError::NoS3)
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

async fn list_keys(State(st): S) -> Response {
    respond((|| {
        let n = names(&st)?;
        Ok(strata_names::read(&**n, |s| {
            serde_json::Value::Array(
                s.keys
                    .values()
                    .map(|k| {
                        let grants: serde_json::Map<String, serde_json::Value> = k.grants.iter().map(|(b, g)| (b.clone(), grant_text(*g).into())).collect();
                        serde_json::json!({ "access_key_id": k.id, "name": k.name, "admin": k.admin, "created_ms": k.created_ms, "grants": grants })
                    })
                    .collect(),
            )
        }))
    })())
}

#[derive(serde::Deserialize)]
struct CreateKey {
    #[serde(default)]
    name: String,
    #[serde(default)]
    admin: bool,
}

async fn create_key(State(st): S, body: Bytes) -> Response {
    respond(
        async {
            let n = names(&st)?;
            let c: CreateKey = if body.is_empty() { CreateKey { name: String::new(), admin: false } } else { json(&body)? };
            let key = new_access_key(&c.name, c.admin, strata_types::SystemClock.now_ms());
            let v = serde_json::json!({ "access_key_id": key.id, "secret_access_key": key.secret, "name": key.name, "admin": key.admin });
            n.apply(NameOp::CreateKey { key }).await?;
            Ok(v)
        }
        .await,
    )
}

async fn delete_key(State(st): S, Path(id): Path<String>) -> Response {
    respond(
        async {
            names(&st)?.apply(NameOp::DeleteKey { id: id.clone() }).await?;
            Ok(serde_json::json!({ "access_key_id": id, "deleted": true }))
        }
        .await,
    )
}

#[derive(serde::Deserialize)]
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
            names(&st)?.apply(NameOp::SetGrant { id: id.clone(), bucket: bucket.clone(), grant }).await?;
            Ok(serde_json::json!({ "access_key_id": id, "bucket": bucket, "grant": grant_text(grant) }))
        }
        .await,
    )
}

async fn list_buckets(State(st): S) -> Response {
    respond((|| {
        let n = names(&st)?;
        let now = strata_types::SystemClock.now_ms();
        Ok(strata_names::read(&**n, |s| {
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
        }))
    })())
}

#[derive(serde::Deserialize)]
struct SetPublic {
    public: bool,
}

async fn set_public(State(st): S, Path(bucket): Path<String>, body: Bytes) -> Response {
    respond(
        async {
            let p: SetPublic = json(&body)?;
            names(&st)?.apply(NameOp::SetPublic { bucket: bucket.clone(), public: p.public }).await?;
            Ok(serde_json::json!({ "bucket": bucket, "public": p.public }))
        }
        .await,
    )
}
