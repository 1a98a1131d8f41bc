//! The HTTP frontend (Ambry's frontend operations): `POST /`, `GET /{id}`,
//! `HEAD /{id}`, `GET /{id}/info`, `DELETE /{id}`, `PUT /{id}/ttl`, plus
//! `/health`, `/metrics` and `/admin/*`. Errors are mapped to statuses in
//! exactly one place ([`error::ApiError::into_response`]).
//!
//! Owns: HTTP parsing, TLS on the node's ports, authentication and
//! authorization of every request of the HTTP port (`auth`), the audit log,
//! the error-to-status mapping, request metrics.
//! It embeds the router for blob operations; the node's disks, cluster
//! node and background workers are `strata-node`'s, which this crate only
//! serves (the replica RPCs, the admin and status endpoints, the metrics).
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-engine, strata-router, strata-cluster, strata-rpc, strata-kv,
//! strata-rwstore, strata-tract, strata-txn, strata-names, strata-client, strata-auth, strata-net, strata-node,
//! strata-format, strata-sse, strata-events, strata-console; never the S3 crate or the CLI.

pub mod audit;
pub mod auth;
mod cluster_api;
mod conn;
mod error;
mod events_api;
mod handlers;
mod identity_api;
mod kms_api;
mod kv_api;
pub mod limits;
mod metrics;
mod recent;
mod rw_api;
mod session;
mod tract_api;
mod txn_api;

pub use auth::{AuthConfig, AuthMode, ConnInfo, Principal};
pub use error::ApiError;
pub use identity_api::new_access_key;
pub use kv_api::KvStores;
pub use metrics::Metrics;

use std::sync::Arc;
use strata_node::{ClusterNode, Disks, Scrubber, Sweeper, Workers};
use strata_router::Router;

/// Largest total of user metadata (keys + values) accepted on a put.
pub const USER_META_BYTES_MAX: usize = 8 * 1024;

/// What the handlers share.
pub struct AppState {
    /// The router serving blob operations.
    pub router: Arc<Router>,
    /// The node's stores (admin and status endpoints).
    pub disks: Arc<Disks>,
    /// Request and engine metrics.
    pub metrics: Metrics,
    /// The cluster node, in cluster mode.
    pub cluster: Option<Arc<ClusterNode>>,
    /// The router's failure detector, in cluster mode.
    pub router_detector: Option<Arc<strata_router::FailureDetector>>,
    /// Read-only key-value stores.
    pub kv: Arc<KvStores>,
    /// Named blobs, access keys and their rights, containers: the S3
    /// API's metadata and every port's identities.
    pub names: Arc<dyn strata_names::NameIndex>,
    /// Who may do what on the HTTP port.
    pub auth: Arc<auth::Auth>,
    /// The scrubber over the node's replicas (started with [`Scrubber::start`]).
    pub scrub: Arc<Scrubber>,
    /// The orphan sweep (started with [`Sweeper::start`]).
    pub sweep: Arc<Sweeper>,
    /// The node's background workers (`/admin/workers`, `strata_worker_*`).
    pub workers: Arc<Workers>,
    /// The key store's root key (see [`Identities::kms_root`]).
    pub kms_root: Option<strata_sse::Key>,
    /// Change capture's senders (started with [`strata_node::Capture::start`]).
    pub capture: Arc<strata_node::Capture>,
    /// The web console of the HTTP port, once it serves one.
    pub console: std::sync::OnceLock<Arc<strata_console::Console>>,
}

/// What identifies requests: the name index's keys, how the port
/// authenticates, and where administrative actions are logged.
pub struct Identities {
    /// Access keys, rights and containers.
    pub names: Arc<dyn strata_names::NameIndex>,
    /// Required or off, the region, the metrics token.
    pub config: AuthConfig,
    /// The audit log's file (`<data>/audit.log`); `None` keeps none.
    pub audit_path: Option<std::path::PathBuf>,
    /// The root key that seals the key store's keys (`/admin/kms`);
    /// `None` refuses to create any.
    pub kms_root: Option<strata_sse::Key>,
}

impl AppState {
    /// State for a router over a node's stores.
    pub fn new(router: Arc<Router>, disks: Arc<Disks>, kv: Arc<KvStores>, ids: Identities, workers: Arc<Workers>) -> Arc<Self> {
        let names = ids.names.clone();
        let auth = Arc::new(auth::Auth::new(names.clone(), ids.config, router.clock().clone(), ids.audit_path.map(audit::AuditLog::new), None));
        let scrub = Scrubber::new(disks.clone(), None, router.clock().clone());
        let sweep = Sweeper::new(router.clone(), Some(names.clone()), None);
        let capture = strata_node::Capture::new(names.clone(), router.clock().clone(), Arc::new(|| true));
        let metrics = Metrics::new(metrics::Sources {
            disks: disks.clone(),
            router: router.clone(),
            cluster: None,
            kv: kv.clone(),
            names: Some(names.clone()),
            scrub: scrub.clone(),
            sweep: sweep.clone(),
            workers: workers.clone(),
            capture: capture.clone(),
        });
        let kms_root = ids.kms_root;
        Arc::new(Self {
            router,
            disks,
            metrics,
            cluster: None,
            router_detector: None,
            kv,
            names,
            auth,
            scrub,
            sweep,
            workers,
            kms_root,
            capture,
            console: std::sync::OnceLock::new(),
        })
    }

    /// State for a cluster node, its router and the router's failure detector.
    pub fn clustered(
        router: Arc<Router>,
        node: Arc<ClusterNode>,
        detector: Arc<strata_router::FailureDetector>,
        kv: Arc<KvStores>,
        ids: Identities,
    ) -> Arc<Self> {
        let names = ids.names.clone();
        let kms_root = ids.kms_root;
        let audit = ids.audit_path.map(audit::AuditLog::new);
        let auth = Arc::new(auth::Auth::new(names.clone(), ids.config, node.clock().clone(), audit, Some(node.id())));
        let scrub = Scrubber::new(node.disks.clone(), Some(node.clone()), node.clock().clone());
        let sweep = Sweeper::new(router.clone(), Some(names.clone()), Some(node.clone()));
        // The metadata leader sends (the targets' positions are in the names).
        let leads = {
            let meta = node.meta.clone();
            Arc::new(move || meta.as_ref().is_some_and(|m| m.status().leader == Some(m.status().id))) as Arc<dyn Fn() -> bool + Send + Sync>
        };
        let capture = strata_node::Capture::new(names.clone(), node.clock().clone(), leads);
        let metrics = Metrics::new(metrics::Sources {
            disks: node.disks.clone(),
            router: router.clone(),
            cluster: Some((node.clone(), detector.clone())),
            kv: kv.clone(),
            names: Some(names.clone()),
            scrub: scrub.clone(),
            sweep: sweep.clone(),
            workers: node.workers.clone(),
            capture: capture.clone(),
        });
        let workers = node.workers.clone();
        Arc::new(Self {
            router,
            disks: node.disks.clone(),
            metrics,
            cluster: Some(node),
            router_detector: Some(detector),
            kv,
            names,
            auth,
            scrub,
            sweep,
            workers,
            kms_root,
            capture,
            console: std::sync::OnceLock::new(),
        })
    }
}

/// The axum application: every route behind the authentication middleware.
pub fn app(state: Arc<AppState>) -> axum::Router {
    app_with(state, None)
}

/// A console backend: clients of this node's listener on `addr` (a
/// wildcard address reached on loopback), made from `opts` (its TLS
/// trust and server name, the region signatures are scoped to) with the
/// signed-in user's credentials.
pub fn console_backend(addr: std::net::SocketAddr, opts: strata_client::ClientOptions) -> strata_console::Backend {
    let ip = if addr.ip().is_unspecified() { std::net::IpAddr::from([127, 0, 0, 1]) } else { addr.ip() };
    let scheme = if opts.tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", std::net::SocketAddr::new(ip, addr.port()));
    Arc::new(move |credentials| strata_client::Client::with_options(&url, &strata_client::ClientOptions { credentials, ..opts.clone() }))
}

/// [`app`] with the web console's pages under `/ui`, when given.
pub fn app_with(state: Arc<AppState>, console: Option<Arc<strata_console::Console>>) -> axum::Router {
    let api = handlers::routes()
        .merge(cluster_api::routes())
        .merge(kv_api::routes())
        .merge(rw_api::routes())
        .merge(tract_api::routes())
        .merge(txn_api::routes())
        .merge(identity_api::routes())
        .merge(kms_api::routes())
        .merge(events_api::routes())
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::middleware))
        .with_state(state);
    // The console's pages sit beside the API, not behind its signature
    // check: they sign their users in themselves, and every call they make
    // for them comes back through that check.
    match console {
        Some(c) => strata_console::routes(c).merge(api),
        None => api,
    }
}

pub use conn::{serve, serve_service};

/// The parsers of untrusted bytes this crate writes itself (hyper and
/// httparse parse the rest), for the fuzz targets in `strata-fuzz`.
#[doc(hidden)]
pub mod fuzz {
    /// A request head as the connection's fast path sees it.
    pub fn http_head(bytes: &[u8]) {
        crate::conn::fuzz_head(bytes);
    }
    /// The native API's request headers (range, TTL, policy, put options,
    /// container).
    pub fn native_headers(headers: &http::HeaderMap) {
        crate::handlers::fuzz_headers(headers);
        let mut names = strata_names::NameState::default();
        let _ = names.apply(strata_names::NameOp::CreateContainer { account: "a".into(), container: "c".into(), now_ms: 1 });
        let _ = crate::auth::put_container(headers.get("x-strata-container").map(http::HeaderValue::as_bytes), &names);
    }

    /// What a request line needs (the route classification every request
    /// passes before its handler).
    pub fn route(method: &[u8], path: &str) {
        if let Ok(m) = http::Method::from_bytes(method) {
            let _ = crate::auth::classify(&m, path, None, &strata_names::NameState::default());
        }
    }

    /// An audit log line.
    pub fn audit_line(line: &[u8]) {
        let _ = crate::audit::decode(line);
    }
}
