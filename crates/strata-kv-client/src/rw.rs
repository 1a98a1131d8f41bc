//! A client of read-write stores (Spock §3.1) over the nodes' HTTP API,
//! with server-side routing: any node coordinates any key; a node that
//! cannot be reached is skipped for the next. [`RwClient::apply_update`]
//! is Spock's applyUpdate: read, modify, put if nothing changed since,
//! and again when something did.
//!
//! Clocks travel in their text form and the client never needs to order
//! them: it sends back the clock that covers what it read.

use base64::Engine;
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a get returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RwVersions {
    /// Each concurrent version's clock (text form) and value; empty when
    /// the key has no live value.
    pub versions: Vec<(String, Bytes)>,
    /// The clock covering every version read: what a put that replaces
    /// them sends.
    pub clock: String,
}

/// Why a read-write store request failed.
#[derive(Debug, thiserror::Error)]
pub enum RwClientError {
    /// The put's clock does not follow what a replica holds: read again.
    #[error("obsolete version: {0}")]
    Obsolete(String),
    /// A node answered with another error.
    #[error(transparent)]
    Api(strata_client::ClientError),
    /// No node could be reached.
    #[error("no node answered: {0}")]
    Unreachable(String),
    /// An answer that is not what the API promises.
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

/// A read-write store client over a set of nodes.
pub struct RwClient {
    nodes: Vec<strata_client::Client>,
    next: AtomicUsize,
}

fn b64url(k: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k)
}

impl RwClient {
    /// A client of the nodes at `urls`, signing and trusting as `opts` says.
    pub fn new(urls: &[String], opts: &strata_client::ClientOptions) -> Self {
        Self { nodes: urls.iter().map(|u| strata_client::Client::with_options(u, opts)).collect(), next: AtomicUsize::new(0) }
    }

    /// Sends to the next node, skipping those that cannot be reached.
    async fn call(&self, method: http::Method, path: &str, headers: &[(&str, String)], body: Bytes) -> Result<serde_json::Value, RwClientError> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut errors = Vec::new();
        for i in 0..self.nodes.len() {
            let c = &self.nodes[(start + i) % self.nodes.len()];
            match c.send(method.clone(), path, headers, strata_client::full(body.clone())).await {
                Ok(r) => {
                    let b = r.bytes().await.map_err(RwClientError::Api)?;
                    return serde_json::from_slice(&b).map_err(|e| RwClientError::Protocol(e.to_string()));
                }
                Err(strata_client::ClientError::Api { status: 409, message, .. }) => return Err(RwClientError::Obsolete(message)),
                Err(e @ strata_client::ClientError::Transport(_)) => errors.push(format!("{}: {e}", c.base())),
                Err(e) => return Err(RwClientError::Api(e)),
            }
        }
        Err(RwClientError::Unreachable(errors.join("; ")))
    }

    /// Every concurrent version of `key`.
    pub async fn get(&self, store: &str, key: &[u8]) -> Result<RwVersions, RwClientError> {
        let v = self.call(http::Method::GET, &format!("/rw/{store}/{}", b64url(key)), &[], Bytes::new()).await?;
        let bad = |what: &str| RwClientError::Protocol(format!("get answer without {what}"));
        let mut out = RwVersions { clock: v["clock"].as_str().ok_or_else(|| bad("clock"))?.to_string(), versions: Vec::new() };
        for e in v["versions"].as_array().ok_or_else(|| bad("versions"))? {
            let clock = e["clock"].as_str().ok_or_else(|| bad("a version's clock"))?.to_string();
            let value = base64::engine::general_purpose::STANDARD
                .decode(e["value"].as_str().ok_or_else(|| bad("a version's value"))?)
                .map_err(|e| RwClientError::Protocol(e.to_string()))?;
            out.versions.push((clock, Bytes::from(value)));
        }
        Ok(out)
    }

    /// Puts `value` over what was read with `clock`; the clock written.
    pub async fn put(&self, store: &str, key: &[u8], value: Bytes, clock: &str) -> Result<String, RwClientError> {
        let v = self.call(http::Method::PUT, &format!("/rw/{store}/{}", b64url(key)), &[("x-strata-clock", clock.to_string())], value).await?;
        v["clock"].as_str().map(String::from).ok_or_else(|| RwClientError::Protocol("put answer without clock".into()))
    }

    /// Deletes what was read with `clock`.
    pub async fn delete(&self, store: &str, key: &[u8], clock: &str) -> Result<String, RwClientError> {
        let v = self.call(http::Method::DELETE, &format!("/rw/{store}/{}", b64url(key)), &[("x-strata-clock", clock.to_string())], Bytes::new()).await?;
        v["clock"].as_str().map(String::from).ok_or_else(|| RwClientError::Protocol("delete answer without clock".into()))
    }

    /// Spock's applyUpdate: reads `key`, computes the new value from the
    /// values read (several when there are siblings, none when absent) and
    /// puts it with the clock read; a put made obsolete by a concurrent one
    /// runs the whole step again, at most `tries` times. The clock written.
    pub async fn apply_update(&self, store: &str, key: &[u8], tries: u32, mut f: impl FnMut(&[Bytes]) -> Bytes) -> Result<String, RwClientError> {
        let mut last = None;
        for _ in 0..tries.max(1) {
            let read = self.get(store, key).await?;
            let values: Vec<Bytes> = read.versions.iter().map(|(_, v)| v.clone()).collect();
            match self.put(store, key, f(&values), &read.clock).await {
                Err(RwClientError::Obsolete(m)) => last = Some(RwClientError::Obsolete(m)),
                r => return r,
            }
        }
        Err(last.unwrap_or_else(|| RwClientError::Protocol("applyUpdate made no attempt".into())))
    }
}
