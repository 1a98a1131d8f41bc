//! Who may do what on the node's HTTP port. Every request is classified by
//! its route into what it needs ([`Need`]: nothing, any identity, a right,
//! or a cluster node), the signer is identified (SigV4 with an access key
//! of the name index, or a TLS client certificate from the cluster's CA),
//! and the right is checked by the one rights model
//! ([`strata_names::NameState::check`]) before any handler runs. A route
//! this classification does not know needs an admin: a new route is closed
//! until someone opens it here.
//!
//! A signed payload hash is checked as the body arrives: a blob put's body
//! ends in an error (nothing is stored), a JSON body is checked before its
//! handler runs. JSON bodies are bounded ([`JSON_BODY_BYTES_MAX`]).

use crate::AppState;
use crate::audit::{AuditEntry, AuditLog};
use crate::error::ApiError;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use strata_auth::sigv4::{self, Payload, RequestView, Scope, SigningKey};
use strata_names::{ContainerRef, Denied, NameIndex, NameState, Right};
use strata_types::{BlobId, Clock};

/// Largest JSON body of any endpoint but a blob put's.
pub const JSON_BODY_BYTES_MAX: usize = 1 << 20;
/// Signing keys cached (per access key and day) before the cache is emptied.
const SIGNING_KEYS_MAX: usize = 4096;
/// Largest request body recorded in the audit log.
const AUDIT_DETAIL_BYTES_MAX: usize = 1024;

/// Whether requests must be signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Every protected route needs an identity with the right (the default).
    Required,
    /// Everything is allowed, unsigned: for benchmarks measuring the cost
    /// of authentication, on loopback only (the server refuses it elsewhere).
    Off,
}

/// How the HTTP port authenticates.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// Required or off.
    pub mode: AuthMode,
    /// The region signatures must be scoped to (the S3 port's).
    pub region: String,
    /// A bearer token that may read `/metrics` (for Prometheus, which does
    /// not sign); admins may always.
    pub metrics_token: Option<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self { mode: AuthMode::Required, region: "us-east-1".into(), metrics_token: None }
    }
}

/// Facts about the connection a request came on, set by the connection loop.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnInfo {
    /// The client's address.
    pub remote: Option<std::net::SocketAddr>,
    /// The client presented a certificate of the cluster's CA: a node (or
    /// an operator holding the cluster secret).
    pub peer: bool,
}

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Nobody: not signed.
    Anonymous,
    /// An access key (its id).
    Key(String),
    /// A node of the cluster (a TLS client certificate from its CA).
    Peer,
    /// Authentication is off.
    Open,
}

impl Principal {
    /// How the audit log names it.
    pub fn label(&self) -> String {
        match self {
            Self::Anonymous => "anonymous".into(),
            Self::Key(k) => format!("key:{k}"),
            Self::Peer => "node".into(),
            Self::Open => "open".into(),
        }
    }

    /// How a change's event names it (docs/events.md `who`): the access
    /// key, `node` for a peer, nothing when authentication is off.
    pub fn who(&self) -> Option<String> {
        match self {
            Self::Anonymous => Some("anonymous".into()),
            Self::Key(k) => Some(k.clone()),
            Self::Peer => Some("node".into()),
            Self::Open => None,
        }
    }
}

/// What a route needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Nothing (`/health`).
    Public,
    /// Any identity (the cluster map, for clients that route themselves).
    Authenticated,
    /// A right of the rights model (or a node).
    Right(OwnedRight),
    /// A cluster node only: replica RPCs, Raft, the metadata service.
    Peer,
    /// `/metrics`: an admin, a node, or the metrics token.
    Metrics,
}

/// [`Right`] with owned names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedRight {
    /// Administration.
    Admin,
    /// Read a container's blobs.
    BlobRead(ContainerRef),
    /// Write into a container.
    BlobWrite(ContainerRef),
    /// Delete a container's blobs.
    BlobDelete(ContainerRef),
    /// Read a store.
    KvRead(String),
    /// Administer a store.
    KvAdmin(String),
}

impl OwnedRight {
    fn as_right(&self) -> Right<'_> {
        match self {
            Self::Admin => Right::Admin,
            Self::BlobRead(c) => Right::BlobRead(*c),
            Self::BlobWrite(c) => Right::BlobWrite(*c),
            Self::BlobDelete(c) => Right::BlobDelete(*c),
            Self::KvRead(s) => Right::KvRead(s),
            Self::KvAdmin(s) => Right::KvAdmin(s),
        }
    }
}

/// The container a put names (`x-strata-container: account/container`),
/// default if none.
pub(crate) fn put_container(header: Option<&[u8]>, names: &NameState) -> Result<ContainerRef, ApiError> {
    let Some(v) = header else { return Ok(ContainerRef::DEFAULT) };
    let bad = |reason: &str| ApiError::BadHeader { name: "x-strata-container".into(), reason: reason.into() };
    let v = std::str::from_utf8(v).map_err(|_| bad("not UTF-8"))?.trim();
    let (account, container) = v.split_once('/').ok_or_else(|| bad("expected account/container"))?;
    if container == "*" {
        return Err(bad("a put names one container, not *"));
    }
    names.container_ref(account, container).ok_or_else(|| strata_names::NameError::NoSuchContainer(v.to_owned()).into())
}

/// What `method path` needs. `container` is the put's `x-strata-container`.
pub(crate) fn classify(method: &Method, path: &str, container: Option<&[u8]>, names: &NameState) -> Result<Need, ApiError> {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let blob = |s: &str, f: fn(ContainerRef) -> OwnedRight| match BlobId::parse(s) {
        Ok(id) => Need::Right(f(id.container())),
        // A malformed id gets its 400 from the handler, once signed.
        Err(_) => Need::Authenticated,
    };
    let m = method.clone();
    Ok(match (m, segs.as_slice()) {
        (Method::GET, ["health"]) => Need::Public,
        (Method::GET, ["metrics"]) => Need::Metrics,
        (Method::POST, [""]) => Need::Right(OwnedRight::BlobWrite(put_container(container, names)?)),
        (Method::GET | Method::HEAD, [id]) | (Method::GET, [id, "info"]) if BlobId::is_text_len(id.len()) => blob(id, OwnedRight::BlobRead),
        (Method::DELETE, [id]) if BlobId::is_text_len(id.len()) => blob(id, OwnedRight::BlobDelete),
        (Method::PUT, [id, "ttl"]) if BlobId::is_text_len(id.len()) => blob(id, OwnedRight::BlobWrite),
        (Method::GET, ["kv", store, _]) | (Method::POST, ["kv", store, "multi-get"]) => Need::Right(OwnedRight::KvRead(decode(store))),
        (Method::GET, ["rw", store, _]) | (Method::POST, ["rw", store, "multi-get" | "session"]) => Need::Right(OwnedRight::KvRead(decode(store))),
        (Method::POST, ["rw", store, "write-session"]) => Need::Right(OwnedRight::KvAdmin(decode(store))),
        // Writing a read-write store takes the store's admin grant (the
        // grants have no separate write right yet).
        (Method::PUT | Method::DELETE, ["rw", store, _]) => Need::Right(OwnedRight::KvAdmin(decode(store))),
        (Method::GET, ["admin", "kv"]) | (Method::GET, ["admin", "whoami"]) => Need::Authenticated,
        (Method::POST, ["admin", "kv", store]) | (Method::POST, ["admin", "kv", store, _]) => Need::Right(OwnedRight::KvAdmin(decode(store))),
        (Method::GET, ["admin", "kv", store, "live", _]) => Need::Right(OwnedRight::KvAdmin(decode(store))),
        (Method::GET, ["meta", "v1", "map"]) => Need::Authenticated,
        (_, ["rpc" | "raft" | "meta", ..]) => Need::Peer,
        _ => Need::Right(OwnedRight::Admin),
    })
}

fn decode(s: &str) -> String {
    sigv4::percent_decode(s).unwrap_or_else(|| s.to_owned())
}

/// Why a request was not allowed.
enum Refusal {
    /// Not signed, on a protected route.
    Unauthenticated,
    /// A signature that does not hold.
    BadSignature(sigv4::SigError),
    /// A key that does not exist, expired or lacks the right.
    Denied(Denied),
    /// A route for nodes only.
    NodesOnly,
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Unauthenticated => ApiError::Unauthenticated,
            Refusal::BadSignature(e) => ApiError::Signature(e),
            Refusal::Denied(d) => ApiError::Denied(d),
            Refusal::NodesOnly => ApiError::NodesOnly,
        }
    }
}

/// The authenticator of one node.
pub struct Auth {
    names: Arc<dyn NameIndex>,
    config: AuthConfig,
    clock: Arc<dyn Clock>,
    /// Signing keys by access key id, with the day (`YYYYMMDD`) each is for.
    keys: Mutex<HashMap<String, (String, SigningKey)>>,
    audit: Option<Arc<AuditLog>>,
    node: Option<u64>,
}

impl Auth {
    /// Over `names`' access keys; with `audit`, administrative actions are logged there.
    pub fn new(names: Arc<dyn NameIndex>, config: AuthConfig, clock: Arc<dyn Clock>, audit: Option<AuditLog>, node: Option<u64>) -> Self {
        Self { names, config, clock, keys: Mutex::new(HashMap::new()), audit: audit.map(Arc::new), node }
    }

    /// The configuration.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// The audit log, if kept.
    pub fn audit(&self) -> Option<&Arc<AuditLog>> {
        self.audit.as_ref()
    }

    fn signing_key(&self, key: &str, date: &str) -> Option<SigningKey> {
        if let Some((d, k)) = self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key)
            && d == date
        {
            // A deleted key is still refused: the caller checks rights
            // against the state after the signature.
            return Some(k.clone());
        }
        let secret = strata_names::read(&*self.names, |s| s.keys.get(key).map(|k| k.secret.clone()))?;
        let k = SigningKey::derive(&secret, date, &self.config.region, strata_auth::SERVICE);
        let mut cache = self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= SIGNING_KEYS_MAX {
            cache.clear();
        }
        cache.insert(key.to_owned(), (date.to_owned(), k.clone()));
        Some(k)
    }

    /// Identifies the signer of `view`. `Ok(None)` inside: the key is not
    /// known here (yet).
    fn identify(&self, view: &RequestView<'_>, conn: ConnInfo) -> Result<Option<(Principal, Payload)>, Refusal> {
        if self.config.mode == AuthMode::Off {
            return Ok(Some((Principal::Open, Payload::Unsigned)));
        }
        let claim = sigv4::claim(view).map_err(Refusal::BadSignature)?;
        let Some(claim) = claim else {
            return Ok(Some((if conn.peer { Principal::Peer } else { Principal::Anonymous }, Payload::Unsigned)));
        };
        let Some(key) = self.signing_key(&claim.access_key_id, &claim.date) else { return Ok(None) };
        let scope = Scope { region: &self.config.region, service: strata_auth::SERVICE };
        let payload = sigv4::verify(&claim, view, &key, scope, self.clock.now_ms() / 1000).map_err(Refusal::BadSignature)?;
        Ok(Some((Principal::Key(claim.access_key_id), payload)))
    }

    fn allow(&self, who: &Principal, need: &Need, bearer: Option<&[u8]>) -> Result<(), Refusal> {
        match (who, need) {
            (_, Need::Public) | (Principal::Open | Principal::Peer, _) => Ok(()),
            (_, Need::Metrics) if bearer.is_some() && self.config.metrics_token.as_deref().map(str::as_bytes) == bearer => Ok(()),
            (Principal::Anonymous, _) => Err(Refusal::Unauthenticated),
            (Principal::Key(_), Need::Peer) => Err(Refusal::NodesOnly),
            (Principal::Key(k), Need::Authenticated) => {
                strata_names::read(&*self.names, |s| s.identity(k, self.clock.now_ms()).map(|_| ())).map_err(Refusal::Denied)
            }
            (Principal::Key(k), Need::Metrics) => strata_names::read(&*self.names, |s| s.check(k, Right::Admin, self.clock.now_ms())).map_err(Refusal::Denied),
            (Principal::Key(k), Need::Right(r)) => strata_names::read(&*self.names, |s| s.check(k, r.as_right(), self.clock.now_ms())).map_err(Refusal::Denied),
        }
    }

    /// The fast path's check: whether a GET the connection loop would
    /// serve itself may be served, without waiting for anything. `false`
    /// sends it to the full path, which answers any refusal properly.
    pub(crate) fn allows_view(&self, view: &RequestView<'_>, conn: ConnInfo, need: &Need) -> bool {
        if self.config.mode == AuthMode::Off {
            return true;
        }
        match self.identify(view, conn) {
            Ok(Some((who, Payload::Unsigned))) => self.allow(&who, need, None).is_ok(),
            _ => false,
        }
    }

    /// Checks a request, waiting for the name index once if its key is
    /// not known here yet (created on another node a moment ago).
    /// `body_sha256`: the hash of a body already read, standing in for an
    /// absent `x-amz-content-sha256` (what signers of other AWS services,
    /// and curl's `--aws-sigv4`, sign without sending).
    async fn check(&self, parts: &http::request::Parts, conn: ConnInfo, need: &Need, body_sha256: Option<&str>) -> Result<(Principal, Payload), Refusal> {
        let mut pairs: Vec<(&str, &[u8])> = parts.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
        if let Some(h) = body_sha256.filter(|_| !parts.headers.contains_key("x-amz-content-sha256")) {
            pairs.push(("x-amz-content-sha256", h.as_bytes()));
        }
        let view = RequestView { method: parts.method.as_str(), path: parts.uri.path(), query: parts.uri.query().unwrap_or(""), headers: &pairs };
        let found = match self.identify(&view, conn)? {
            Some(f) => f,
            None => {
                let _ = self.names.barrier().await;
                match self.identify(&view, conn)? {
                    Some(f) => f,
                    None => {
                        let id = sigv4::claim(&view).ok().flatten().map(|c| c.access_key_id).unwrap_or_default();
                        return Err(Refusal::Denied(Denied::NoSuchKey(id.chars().take(64).collect())));
                    }
                }
            }
        };
        let bearer = parts.headers.get(http::header::AUTHORIZATION).and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        self.allow(&found.0, need, bearer)?;
        Ok(found)
    }
}

/// Checks a streamed body against its signed SHA-256 as it arrives; a
/// mismatch ends it with an error, so nothing built from it is acknowledged.
struct HashChecked {
    inner: Body,
    hasher: Option<sigv4::PayloadHasher>,
    want: [u8; 32],
}

impl http_body::Body for HashChecked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        use std::task::Poll;
        match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(h)) = (frame.data_ref(), self.hasher.as_mut()) {
                    h.update(data);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => match self.hasher.take().map(sigv4::PayloadHasher::finish) {
                Some(got) if got != self.want => Poll::Ready(Some(Err(axum::Error::new("the body does not match its signed x-amz-content-sha256")))),
                _ => Poll::Ready(None),
            },
            other => other,
        }
    }
}

/// The middleware every request of the HTTP port passes (see the module docs).
pub(crate) async fn middleware(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let conn = req.extensions().get::<ConnInfo>().copied().unwrap_or_default();
    let (parts, body) = req.into_parts();
    let need = {
        let container = parts.headers.get("x-strata-container").map(http::HeaderValue::as_bytes);
        strata_names::read(&*st.names, |s| classify(&parts.method, parts.uri.path(), container, s))
    };
    let audited = parts.uri.path().starts_with("/admin/") && parts.method != Method::GET;
    let action = format!("{} {}", parts.method, parts.uri.path_and_query().map_or("", |p| p.as_str()));
    let need = match need {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    // Blob puts and tract writes stream (a tract write bounds its body by
    // the tract size); the nodes' own messages (replica writes, Raft
    // snapshots) are bounded by their frames, not by the JSON limit.
    let streamed = (parts.method == Method::POST && parts.uri.path() == "/")
        || (parts.method == Method::PUT && parts.uri.path().starts_with("/tract/"))
        || (parts.method == Method::POST && parts.uri.path().starts_with("/txn/"))
        || need == Need::Peer;
    // JSON and empty bodies are read first: bounded, hashed for signers
    // that sign a body's hash without sending it, and checked against a
    // signed hash before the handler runs.
    let (read, body) = if streamed {
        (None, body)
    } else {
        match http_body_util::Limited::new(body, JSON_BODY_BYTES_MAX).collect().await {
            Ok(b) => (Some(b.to_bytes()), Body::empty()),
            Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
                return ApiError::BodyTooLarge { max: JSON_BODY_BYTES_MAX }.into_response();
            }
            Err(e) => return ApiError::BadRequest(format!("reading the body: {e}")).into_response(),
        }
    };
    let body_hash = read.as_ref().filter(|b| !b.is_empty()).map(|b| sigv4::payload_sha256(b));
    let (who, payload) = match st.auth.check(&parts, conn, &need, body_hash.as_deref()).await {
        Ok(p) => p,
        Err(r) => {
            let who = if conn.peer { Principal::Peer } else { sigv4_who(&parts) };
            let e = ApiError::from(r);
            st.metrics.refused(e.status_code().1);
            let resp = e.into_response();
            if parts.uri.path().starts_with("/admin/") {
                st.auth.record(&who, conn, action, None, resp.status().as_u16()).await;
            }
            return resp;
        }
    };
    let (body, detail) = match read {
        None => {
            let body = match payload {
                Payload::Sha256(want) => Body::new(HashChecked { inner: body, hasher: Some(sigv4::PayloadHasher::default()), want }),
                Payload::Unsigned => body,
            };
            (body, None)
        }
        Some(bytes) => {
            if let Payload::Sha256(want) = payload {
                let mut h = sigv4::PayloadHasher::default();
                h.update(&bytes);
                if h.finish() != want {
                    let e = sigv4::SigError::Malformed { what: "body", detail: "it does not match its signed x-amz-content-sha256".into() };
                    return ApiError::Signature(e).into_response();
                }
            }
            let detail = (audited && bytes.len() <= AUDIT_DETAIL_BYTES_MAX).then(|| serde_json::from_slice(&bytes).ok()).flatten();
            (Body::from(bytes), detail)
        }
    };
    let mut req = Request::from_parts(parts, body);
    req.extensions_mut().insert(who.clone());
    let resp = next.run(req).await;
    if audited {
        st.auth.record(&who, conn, action, detail, resp.status().as_u16()).await;
    }
    resp
}

/// The access key a refused request claimed, for the audit log.
fn sigv4_who(parts: &http::request::Parts) -> Principal {
    let pairs: Vec<(&str, &[u8])> = parts.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
    let view = RequestView { method: parts.method.as_str(), path: parts.uri.path(), query: parts.uri.query().unwrap_or(""), headers: &pairs };
    match sigv4::claim(&view) {
        Ok(Some(c)) => Principal::Key(c.access_key_id.chars().take(64).collect()),
        _ => Principal::Anonymous,
    }
}

impl Auth {
    /// Appends an entry to the audit log (off the async threads); an action's
    /// entry is durable before this returns, a refusal's with the next action's.
    async fn record(&self, who: &Principal, conn: ConnInfo, action: String, detail: Option<serde_json::Value>, status: u16) {
        let Some(log) = self.audit.clone() else { return };
        let result = match status {
            401 | 403 => "denied",
            s if s < 400 => "ok",
            _ => "failed",
        };
        let entry = AuditEntry {
            v: crate::audit::VERSION,
            time_ms: self.clock.now_ms(),
            node: self.node,
            who: who.label(),
            remote: conn.remote.map(|a| a.to_string()),
            action,
            detail,
            status,
            result: result.into(),
        };
        let durable = result != "denied";
        if let Err(e) = tokio::task::spawn_blocking(move || log.record(&entry, durable)).await {
            tracing::error!(error = %e, "the audit log's writer panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_needs_what_it_should() {
        let mut s = NameState::default();
        s.apply(strata_names::NameOp::CreateContainer { account: "a".into(), container: "c".into(), now_ms: 1 }).unwrap();
        let c = s.container_ref("a", "c").unwrap();
        let id = BlobId::from_parts(strata_types::BlobKind::Simple, 1, [1; 16]);
        let id_c = id.in_container(c);
        let n = |m: Method, p: &str, h: Option<&[u8]>| classify(&m, p, h, &s).unwrap();
        let right = Need::Right;
        assert_eq!(n(Method::GET, "/health", None), Need::Public);
        assert_eq!(n(Method::GET, "/metrics", None), Need::Metrics);
        assert_eq!(n(Method::POST, "/", None), right(OwnedRight::BlobWrite(ContainerRef::DEFAULT)));
        assert_eq!(n(Method::POST, "/", Some(b"a/c")), right(OwnedRight::BlobWrite(c)));
        assert!(classify(&Method::POST, "/", Some(b"a/nope"), &s).is_err());
        assert!(classify(&Method::POST, "/", Some(b"a/*"), &s).is_err());
        assert_eq!(n(Method::GET, &format!("/{id}"), None), right(OwnedRight::BlobRead(ContainerRef::DEFAULT)));
        assert_eq!(n(Method::HEAD, &format!("/{id_c}"), None), right(OwnedRight::BlobRead(c)));
        assert_eq!(n(Method::GET, &format!("/{id_c}/info"), None), right(OwnedRight::BlobRead(c)));
        assert_eq!(n(Method::DELETE, &format!("/{id_c}"), None), right(OwnedRight::BlobDelete(c)));
        assert_eq!(n(Method::PUT, &format!("/{id_c}/ttl"), None), right(OwnedRight::BlobWrite(c)));
        assert_eq!(n(Method::GET, &format!("/{}", "!".repeat(35)), None), Need::Authenticated);
        assert_eq!(n(Method::GET, "/kv/scores/YWxpY2U", None), right(OwnedRight::KvRead("scores".into())));
        assert_eq!(n(Method::POST, "/kv/scores/multi-get", None), right(OwnedRight::KvRead("scores".into())));
        assert_eq!(n(Method::POST, "/admin/kv/scores/swap", None), right(OwnedRight::KvAdmin("scores".into())));
        assert_eq!(n(Method::POST, "/admin/kv/scores", None), right(OwnedRight::KvAdmin("scores".into())));
        assert_eq!(n(Method::GET, "/admin/kv", None), Need::Authenticated);
        assert_eq!(n(Method::GET, "/rw/counters/YWxpY2U", None), right(OwnedRight::KvRead("counters".into())));
        assert_eq!(n(Method::PUT, "/rw/counters/YWxpY2U", None), right(OwnedRight::KvAdmin("counters".into())));
        assert_eq!(n(Method::DELETE, "/rw/counters/YWxpY2U", None), right(OwnedRight::KvAdmin("counters".into())));
        assert_eq!(n(Method::POST, "/rw/counters/session", None), right(OwnedRight::KvRead("counters".into())));
        assert_eq!(n(Method::POST, "/rw/counters/write-session", None), right(OwnedRight::KvAdmin("counters".into())));
        assert_eq!(n(Method::POST, "/admin/rw/hints/push", None), right(OwnedRight::Admin));
        assert_eq!(n(Method::POST, "/rpc/v1/write", None), Need::Peer);
        assert_eq!(n(Method::POST, "/raft/v1/vote", None), Need::Peer);
        assert_eq!(n(Method::POST, "/meta/v1/propose", None), Need::Peer);
        assert_eq!(n(Method::GET, "/meta/v1/map", None), Need::Authenticated);
        for admin in ["/admin/s3/keys", "/admin/cluster/command", "/admin/compact", "/admin/audit", "/anything/new"] {
            assert_eq!(n(Method::POST, admin, None), right(OwnedRight::Admin), "{admin}");
        }
    }
}
