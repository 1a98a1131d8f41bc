//! Admin endpoints of the key store (`strata kms`): the keys SSE-KMS
//! requests name and SSE-S3 uses. Key material never leaves the server:
//! it is made here, sealed under the node's root key and kept in the
//! names; these endpoints show ids and states only.
//!
//! - `GET /admin/kms/keys`: `[{"id", "description", "created_ms", "enabled"}]`
//! - `POST /admin/kms/keys` `{"id", "description"?}`: a new key (409 if the id exists)
//! - `PUT /admin/kms/keys/{id}/enabled` `{"enabled"}`: a disabled key seals
//!   no new object and opens none until it is enabled again

use crate::{ApiError, AppState};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use bytes::Bytes;
use std::sync::Arc;
use strata_names::{KmsKey, NameOp};

type S = State<Arc<AppState>>;

pub(crate) fn routes() -> axum::Router<Arc<AppState>> {
    axum::Router::new().route("/admin/kms/keys", get(list).post(create)).route("/admin/kms/keys/{id}/enabled", put(set_enabled))
}

fn key_json(k: &KmsKey) -> serde_json::Value {
    serde_json::json!({ "id": k.id, "description": k.description, "created_ms": k.created_ms, "enabled": k.enabled })
}

async fn list(State(st): S) -> Response {
    let v = strata_names::read(&*st.names, |s| serde_json::Value::Array(s.kms.values().map(key_json).collect()));
    Json(v).into_response()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Create {
    id: String,
    #[serde(default)]
    description: String,
}

async fn create(State(st): S, body: Bytes) -> Response {
    let r = async {
        let c: Create = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("bad JSON body: {e}")))?;
        if !KmsKey::valid_id(&c.id) {
            return Err(ApiError::BadRequest(format!("invalid key id {:?}: use 1 to 64 of A-Z, a-z, 0-9, '-', '_', '/' and '.'", c.id)));
        }
        let root = st.kms_root.as_ref().ok_or_else(|| ApiError::BadRequest("this server has no key store root key".into()))?;
        let key = KmsKey::generate(root, &c.id, &c.description, st.router.clock().now_ms());
        let v = key_json(&key);
        st.names.apply(NameOp::CreateKmsKey { key }).await?;
        Ok::<_, ApiError>(v)
    }
    .await;
    match r {
        Ok(v) => (axum::http::StatusCode::CREATED, Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Enabled {
    enabled: bool,
}

async fn set_enabled(State(st): S, Path(id): Path<String>, body: Bytes) -> Response {
    let r = async {
        let e: Enabled = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("bad JSON body: {e}")))?;
        st.names.apply(NameOp::SetKmsKeyEnabled { id: id.clone(), enabled: e.enabled }).await?;
        let v = strata_names::read(&*st.names, |s| s.kms.get(&id).map(key_json)).unwrap_or_default();
        Ok::<_, ApiError>(v)
    }
    .await;
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}
