//! A Rust client for Strata's HTTP API, used by the CLI, the benchmark and
//! the integration tests. Streams bodies both ways; pools connections;
//! signs every request with SigV4 when it has credentials, and speaks
//! `https://` with the roots (and, for a node or a holder of the cluster
//! secret, the client certificate) its [`ClientOptions`] give.
//! Must not depend on any server-side crate: it speaks only HTTP.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-auth; never the engine, the cluster map, the router, the node
//! crate, or the server.

use bytes::Bytes;
use futures_util::{Stream, TryStreamExt};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use strata_auth::sigv4::{RequestView, Signer, UNSIGNED_PAYLOAD};
use strata_types::Clock;

pub use strata_auth::Credentials;

/// How a client authenticates and what it trusts.
#[derive(Clone, Default)]
pub struct ClientOptions {
    /// The access key it signs with (none: unsigned requests).
    pub credentials: Option<Credentials>,
    /// The region signatures are scoped to (default `us-east-1`).
    pub region: Option<String>,
    /// The TLS configuration for `https://` (none: the system's roots).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The server name to verify instead of the URL's host (a node's
    /// certificate names [`strata_auth::CLUSTER_SERVER_NAME`]).
    pub server_name: Option<String>,
}

impl ClientOptions {
    /// These options trusting the certificates of the PEM file at `path`
    /// (a server's self-signed certificate, a private CA, a cluster's
    /// `cluster-ca.pem`) for `https://`.
    pub fn with_ca_file(mut self, path: &std::path::Path) -> Result<Self, ClientError> {
        let roots = strata_auth::tls::roots_from_file(path).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.tls = Some(strata_auth::tls::client_config(roots, None).map_err(|e| ClientError::Protocol(e.to_string()))?);
        Ok(self)
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("credentials", &self.credentials)
            .field("region", &self.region)
            .field("tls", &self.tls.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

fn connector(opts: &ClientOptions) -> Connector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    let tls = match &opts.tls {
        Some(t) => (**t).clone(),
        None => strata_auth::tls::client_config(strata_auth::tls::system_roots(), None).map(|c| (*c).clone()).unwrap_or_else(|_| {
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        }),
    };
    let b = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
    let b = match opts.server_name.as_deref().map(rustls::pki_types::ServerName::try_from) {
        Some(Ok(name)) => b.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name.to_owned())),
        _ => b,
    };
    b.enable_http1().wrap_connector(http)
}

/// A connection upgraded from HTTP ([`Client::upgrade`]): tokio's
/// `AsyncRead` and `AsyncWrite`.
pub type Upgraded = hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>;

/// A request body.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status.
    #[error("{status}: {code}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// Machine-readable code from the body.
        code: String,
        /// Human message from the body.
        message: String,
    },
    /// The request could not be sent or the response not read.
    #[error("transport: {0}")]
    Transport(String),
    /// The response was not what the API promises.
    #[error("unexpected response: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The HTTP status, if the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Result of a put.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct PutResult {
    /// The new blob's id.
    pub id: String,
    /// Bytes stored.
    pub size: u64,
}

/// Options of a put.
#[derive(Debug, Clone, Default)]
pub struct PutArgs {
    /// TTL in seconds.
    pub ttl_secs: Option<u64>,
    /// MIME type.
    pub content_type: Option<String>,
    /// Owner.
    pub owner: Option<String>,
    /// User metadata.
    pub meta: Vec<(String, String)>,
    /// Acks the put needs (`one`, `majority`, `all` or a count), instead of
    /// the cluster's put policy.
    pub policy: Option<String>,
    /// The container, `account/container` (default: `default/default`).
    pub container: Option<String>,
}

/// A response whose body has not been read yet.
pub struct Response {
    /// The head.
    pub head: http::response::Parts,
    /// The body.
    pub body: Incoming,
}

impl Response {
    /// Content-Length, if sent.
    pub fn content_length(&self) -> Option<u64> {
        self.head.headers.get(http::header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
    }
    /// The body as a stream of chunks.
    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, ClientError>> {
        self.body.into_data_stream().map_err(|e| ClientError::Transport(e.to_string()))
    }
    /// Reads the whole body.
    pub async fn bytes(self) -> Result<Bytes, ClientError> {
        Ok(self.body.collect().await.map_err(|e| ClientError::Transport(e.to_string()))?.to_bytes())
    }
}

/// A pooled HTTP client for one Strata server.
#[derive(Clone)]
pub struct Client {
    base: String,
    http: HyperClient<Connector, Body>,
    /// For upgrades only: keeps no idle connection, so each upgrade is the
    /// first request of a new connection, where a node looks for one.
    upgrades: HyperClient<Connector, Body>,
    signer: Option<Arc<Signer>>,
    opts: ClientOptions,
}

/// A body from bytes in memory.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

/// A reader as a stream of chunks of up to 1 MiB (a file for an upload or
/// a download body).
pub fn read_stream<R>(reader: R) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static
where
    R: tokio::io::AsyncRead + Unpin + Send + Sync + 'static,
{
    futures_util::stream::unfold(reader, |mut r| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 1 << 20];
        match r.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), r))
            }
            Err(e) => Some((Err(e), r)),
        }
    })
}

/// A body from a stream of chunks.
pub fn streaming<S>(s: S) -> Body
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
{
    BodyExt::boxed(StreamBody::new(s.map_ok(Frame::data)))
}

impl Client {
    /// An unsigned client for `base`, e.g. `http://127.0.0.1:8080`.
    pub fn new(base: &str) -> Self {
        Self::with_options(base, &ClientOptions::default())
    }

    /// A client for `base` that signs and trusts as `opts` says.
    pub fn with_options(base: &str, opts: &ClientOptions) -> Self {
        let conn = connector(opts);
        let http = HyperClient::builder(TokioExecutor::new()).pool_max_idle_per_host(256).build(conn.clone());
        let upgrades = HyperClient::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build(conn);
        let region = opts.region.as_deref().unwrap_or("us-east-1");
        let signer = opts.credentials.clone().map(|c| Arc::new(Signer::new(c, region, strata_auth::SERVICE)));
        Self { base: base.trim_end_matches('/').to_string(), http, upgrades, signer, opts: opts.clone() }
    }

    /// A client for another server with the same credentials and trust
    /// (each node of a cluster).
    pub fn to(&self, base: &str) -> Self {
        Self::with_options(base, &self.opts)
    }

    /// The options this client was made with.
    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    /// The server URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A URL for `method` on `path` that anyone may use for `expires_secs`
    /// (at most seven days), signed with this client's key: SigV4's
    /// presigned query. `None` without credentials.
    pub fn presign(&self, method: &Method, path: &str, expires_secs: u64) -> Option<String> {
        let signer = self.signer.as_ref()?;
        let uri: http::Uri = format!("{}{}", self.base, path).parse().ok()?;
        let host = uri.authority()?.as_str().to_owned();
        let headers: [(&str, &[u8]); 1] = [("host", host.as_bytes())];
        let view = RequestView { method: method.as_str(), path: uri.path(), query: uri.query().unwrap_or(""), headers: &headers };
        let query = signer.presign(&view, strata_types::SystemClock.now_ms() / 1000, expires_secs);
        Some(format!("{}{}?{query}", self.base, uri.path()))
    }

    /// Sends a request; error statuses become [`ClientError::Api`].
    pub async fn send(&self, method: Method, path: &str, headers: &[(&str, String)], body: Body) -> Result<Response, ClientError> {
        self.send_on(&self.http, method, path, headers, body).await
    }

    async fn send_on(
        &self,
        http: &HyperClient<Connector, Body>,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Body,
    ) -> Result<Response, ClientError> {
        let uri: http::Uri = format!("{}{}", self.base, path).parse().map_err(|e: http::uri::InvalidUri| ClientError::Protocol(e.to_string()))?;
        let mut req = Request::builder().method(method.clone()).uri(uri.clone());
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(signer) = &self.signer {
            let host = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_default();
            let mut signed: Vec<(&str, &[u8])> =
                headers.iter().filter(|(k, _)| !k.eq_ignore_ascii_case("content-length")).map(|(k, v)| (*k, v.as_bytes())).collect();
            signed.push(("host", host.as_bytes()));
            let view = RequestView { method: method.as_str(), path: uri.path(), query: uri.query().unwrap_or(""), headers: &signed };
            let sig = signer.sign(&view, UNSIGNED_PAYLOAD, strata_types::SystemClock.now_ms() / 1000);
            req = req
                .header(http::header::HOST, &host)
                .header("x-amz-date", sig.amz_date)
                .header("x-amz-content-sha256", sig.content_sha256)
                .header(http::header::AUTHORIZATION, sig.authorization);
        }
        let req = req.body(body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = http.request(req).await.map_err(|e| ClientError::Transport(format!("{e:?}")))?;
        let (head, body) = resp.into_parts();
        if head.status.is_client_error() || head.status.is_server_error() {
            let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            return Err(ClientError::Api {
                status: head.status.as_u16(),
                code: v["code"].as_str().unwrap_or("Unknown").to_string(),
                message: v["message"].as_str().map(String::from).unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned()),
            });
        }
        Ok(Response { head, body })
    }

    /// Opens a connection upgraded to `protocol` by a signed, bodiless
    /// `POST path` with `Connection: upgrade` (a read-write store session,
    /// say): the server's `101 Switching Protocols` hands the connection,
    /// TLS and all, to the caller. An answer other than 101 is an error.
    pub async fn upgrade(&self, path: &str, protocol: &str) -> Result<Upgraded, ClientError> {
        let headers = [("connection", "upgrade".to_string()), ("upgrade", protocol.to_string())];
        let resp = self.send_on(&self.upgrades, Method::POST, path, &headers, full(Bytes::new())).await?;
        if resp.head.status != http::StatusCode::SWITCHING_PROTOCOLS {
            return Err(ClientError::Protocol(format!("{path} answered {} instead of switching to {protocol}", resp.head.status)));
        }
        let io = hyper::upgrade::on(http::Response::from_parts(resp.head, resp.body)).await.map_err(|e| ClientError::Transport(e.to_string()))?;
        Ok(hyper_util::rt::TokioIo::new(io))
    }

    /// Puts a blob.
    pub async fn put(&self, body: Body, size: Option<u64>, args: &PutArgs) -> Result<PutResult, ClientError> {
        let mut h: Vec<(&str, String)> = Vec::new();
        if let Some(n) = size {
            h.push(("content-length", n.to_string()));
        }
        if let Some(t) = args.ttl_secs {
            h.push(("x-strata-ttl", t.to_string()));
        }
        if let Some(ct) = &args.content_type {
            h.push(("content-type", ct.clone()));
        }
        if let Some(o) = &args.owner {
            h.push(("x-strata-owner", o.clone()));
        }
        if let Some(p) = &args.policy {
            h.push(("x-strata-policy", p.clone()));
        }
        if let Some(c) = &args.container {
            h.push(("x-strata-container", c.clone()));
        }
        let meta: Vec<(String, String)> = args.meta.iter().map(|(k, v)| (format!("x-strata-meta-{k}"), v.clone())).collect();
        for (k, v) in &meta {
            h.push((k.as_str(), v.clone()));
        }
        let resp = self.send(Method::POST, "/", &h, body).await?;
        if resp.head.status != StatusCode::CREATED {
            return Err(ClientError::Protocol(format!("put answered {}", resp.head.status)));
        }
        serde_json::from_slice(&resp.bytes().await?).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Puts bytes held in memory.
    pub async fn put_bytes(&self, data: impl Into<Bytes>, args: &PutArgs) -> Result<PutResult, ClientError> {
        let data = data.into();
        let n = data.len() as u64;
        self.put(full(data), Some(n), args).await
    }

    /// Starts a get; `range` is a `Range` header value such as `bytes=0-99`.
    pub async fn get(&self, id: &str, range: Option<&str>) -> Result<Response, ClientError> {
        let h: Vec<(&str, String)> = range.map(|r| ("range", r.to_string())).into_iter().collect();
        self.send(Method::GET, &format!("/{id}"), &h, full(Bytes::new())).await
    }

    /// Gets a whole blob into memory.
    pub async fn get_bytes(&self, id: &str) -> Result<Bytes, ClientError> {
        self.get(id, None).await?.bytes().await
    }

    /// A blob's properties as JSON.
    pub async fn info(&self, id: &str) -> Result<serde_json::Value, ClientError> {
        self.json(Method::GET, &format!("/{id}/info")).await
    }

    /// Deletes a blob.
    pub async fn delete(&self, id: &str) -> Result<(), ClientError> {
        self.send(Method::DELETE, &format!("/{id}"), &[], full(Bytes::new())).await.map(|_| ())
    }

    /// Sets a blob's TTL: seconds from now, or `never`.
    pub async fn update_ttl(&self, id: &str, ttl: &str) -> Result<(), ClientError> {
        self.send(Method::PUT, &format!("/{id}/ttl"), &[("x-strata-ttl", ttl.to_string())], full(Bytes::new())).await.map(|_| ())
    }

    /// A JSON endpoint.
    pub async fn json(&self, method: Method, path: &str) -> Result<serde_json::Value, ClientError> {
        let resp = self.send(method, path, &[], full(Bytes::new())).await?;
        serde_json::from_slice(&resp.bytes().await?).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// POSTs a JSON document to a JSON endpoint.
    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> Result<serde_json::Value, ClientError> {
        let b = serde_json::to_vec(body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = self.send(Method::POST, path, &[("content-type", "application/json".to_string())], full(b)).await?;
        serde_json::from_slice(&resp.bytes().await?).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// `post_json` taking its arguments by value, for futures that outlive
    /// the caller's borrows (one request per node, joined).
    pub async fn post_json_owned(self, path: String, body: serde_json::Value) -> Result<serde_json::Value, ClientError> {
        self.post_json(&path, &body).await
    }

    /// A text endpoint (such as `/metrics`).
    pub async fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let resp = self.send(Method::GET, path, &[], full(Bytes::new())).await?;
        Ok(String::from_utf8_lossy(&resp.bytes().await?).into_owned())
    }
}
