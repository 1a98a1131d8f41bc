//! The HTTP frontend (Ambry's frontend operations): `POST /`, `GET /{id}`,
//! `HEAD /{id}`, `GET /{id}/info`, `DELETE /{id}`, `PUT /{id}/ttl`, plus
//! `/health`, `/metrics` and `/admin/*`. Errors are mapped to statuses in
//! exactly one place ([`error::ApiError::into_response`]).
//!
//! Owns: HTTP parsing, the error-to-status mapping, request metrics.
//! Must not depend on: the CLI. It embeds the router; storage is reached only
//! through the router, except the admin endpoints that report on the store.

mod conn;
mod error;
mod handlers;
mod metrics;

pub use error::ApiError;
pub use metrics::Metrics;

use std::sync::Arc;
use std::time::Duration;
use strata_engine::Store;
use strata_router::Router;

/// Largest total of user metadata (keys + values) accepted on a put.
pub const USER_META_BYTES_MAX: usize = 8 * 1024;

/// What the handlers share.
pub struct AppState {
    /// The router serving blob operations.
    pub router: Arc<Router>,
    /// The local store (admin and status endpoints).
    pub store: Arc<Store>,
    /// Request and engine metrics.
    pub metrics: Metrics,
}

impl AppState {
    /// State for a router over a local store.
    pub fn new(router: Arc<Router>, store: Arc<Store>) -> Arc<Self> {
        let metrics = Metrics::new(store.clone());
        Arc::new(Self { router, store, metrics })
    }
}

/// The axum application.
pub fn app(state: Arc<AppState>) -> axum::Router {
    handlers::routes().with_state(state)
}

pub use conn::serve;

/// Re-checks every replica's capacity and free space every second, so
/// partitions that filled up return to service once space is freed.
pub fn spawn_space_monitor(store: Arc<Store>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let s = store.clone();
            if tokio::task::spawn_blocking(move || s.refresh_read_only()).await.is_err() {
                tracing::error!("space monitor task panicked");
            }
        }
    })
}

/// Runs a compaction pass over the store every `interval`, off the async threads.
pub fn spawn_compactor(store: Arc<Store>, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.tick().await;
        loop {
            tick.tick().await;
            let s = store.clone();
            match tokio::task::spawn_blocking(move || s.compact_all(false)).await {
                Ok(Ok(r)) if r.segments_compacted > 0 => {
                    tracing::info!(segments = r.segments_compacted, bytes = r.bytes_reclaimed, "compaction reclaimed space")
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "compaction failed"),
                Err(e) => tracing::error!(error = %e, "compaction task panicked"),
            }
        }
    })
}
