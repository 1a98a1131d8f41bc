//! Admin endpoints of change capture (`strata events`, docs/events.md).
//!
//! - `GET /admin/events`: where capture stands: events made, in the
//!   outbox, dropped; per target what it is (never its secret), delivered,
//!   pending, failures, the last error and the alarm
//! - `PUT /admin/events/targets/{name}` `{"spec": {"kind": "file"|"webhook"|"kafka", ...}, "all": bool}`:
//!   adds or replaces a target; `all` sends it every event, otherwise only
//!   those of bucket notifications naming it (ARN `arn:strata:sqs:::{name}`)
//! - `DELETE /admin/events/targets/{name}`: removes one (409 while a
//!   bucket's notification configuration names it)

use crate::{ApiError, AppState};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use bytes::Bytes;
use std::sync::Arc;
use strata_events::{Notification, TargetSpec, valid_target_name};
use strata_names::NameOp;

type S = State<Arc<AppState>>;

pub(crate) fn routes() -> axum::Router<Arc<AppState>> {
    axum::Router::new().route("/admin/events", get(status)).route("/admin/events/targets/{name}", put(set).delete(remove))
}

async fn status(State(st): S) -> Response {
    Json(st.capture.status()).into_response()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Set {
    spec: TargetSpec,
    #[serde(default)]
    all: bool,
}

async fn set(State(st): S, Path(name): Path<String>, body: Bytes) -> Response {
    let r = async {
        if !valid_target_name(&name) {
            return Err(ApiError::BadRequest(format!("invalid target name {name:?}: use 1 to 63 of a-z, 0-9, '-' and '_'")));
        }
        let s: Set = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("bad target JSON: {e}")))?;
        s.spec.check().map_err(ApiError::BadRequest)?;
        let spec = serde_json::to_string(&s.spec).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        st.names.apply(NameOp::SetEventTarget { name: name.clone(), spec: Some(spec), all: s.all, now_ms: st.router.clock().now_ms() }).await?;
        st.capture.reconcile();
        Ok::<_, ApiError>(serde_json::json!({ "name": name, "target": s.spec.describe(), "all": s.all }))
    }
    .await;
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn remove(State(st): S, Path(name): Path<String>) -> Response {
    let r = async {
        let (exists, used_by) = strata_names::read(&*st.names, |s| {
            let used_by: Vec<String> = s
                .bucket_docs
                .iter()
                .filter(|(_, docs)| {
                    docs.get(strata_names::events::NOTIFICATION_DOC)
                        .and_then(|d| serde_json::from_str::<Notification>(d).ok())
                        .is_some_and(|n| n.rules.iter().any(|r| r.target == name))
                })
                .map(|(b, _)| b.clone())
                .collect();
            (s.outbox.targets.contains_key(&name), used_by)
        });
        if !exists {
            return Err(ApiError::NoSuchEventTarget(name));
        }
        if !used_by.is_empty() {
            return Err(ApiError::EventTargetInUse { name, buckets: used_by.join(", ") });
        }
        st.names.apply(NameOp::SetEventTarget { name: name.clone(), spec: None, all: false, now_ms: st.router.clock().now_ms() }).await?;
        st.capture.reconcile();
        Ok::<_, ApiError>(())
    }
    .await;
    match r {
        Ok(()) => axum::http::StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}
