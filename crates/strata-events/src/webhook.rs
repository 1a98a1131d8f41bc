//! Signed HTTP webhooks: each batch is one `POST` of a JSON array of
//! events. The receiver checks the signature to know the batch came from
//! Strata and was not altered or replayed: `x-strata-timestamp` is the
//! sending time (ms since the epoch) and `x-strata-signature` is
//! `v1=<hex HMAC-SHA256(secret, timestamp "." body)>`. Any 2xx answer
//! delivers the batch; anything else (or no answer) is retried.

use crate::{Event, EventError, Target};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use hmac::{KeyInit, Mac};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use std::sync::Arc;
use std::time::Duration;
use strata_types::Clock;

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-strata-signature";
/// The timestamp header.
pub const TIMESTAMP_HEADER: &str = "x-strata-timestamp";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The MAC of `body` sent at `timestamp_ms` under `secret`.
fn mac(secret: &[u8], timestamp_ms: u64, body: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret).unwrap_or_else(|_| unreachable!("HMAC keys have no length limit"));
    mac.update(timestamp_ms.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The signature of `body` sent at `timestamp_ms` under `secret`.
pub fn signature(secret: &[u8], timestamp_ms: u64, body: &[u8]) -> String {
    format!("v1={}", hex::encode(mac(secret, timestamp_ms, body).finalize().into_bytes()))
}

/// Whether `signature_header` signs `body` sent at `timestamp_ms` under
/// `secret` (compared in constant time).
pub fn verify(secret: &[u8], timestamp_ms: u64, body: &[u8], signature_header: &str) -> bool {
    let Some(sig) = signature_header.strip_prefix("v1=").and_then(|h| hex::decode(h).ok()) else { return false };
    mac(secret, timestamp_ms, body).verify_slice(&sig).is_ok()
}

/// A webhook target.
pub struct Webhook {
    name: String,
    url: http::Uri,
    secret: Vec<u8>,
    clock: Arc<dyn Clock>,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl Webhook {
    /// Posting to `url` (http), signing with `secret`, timing by `clock`.
    pub fn new(name: &str, url: &str, secret: &[u8], clock: Arc<dyn Clock>) -> Result<Self, EventError> {
        let url: http::Uri = url.parse().map_err(|e| EventError::Target { target: name.into(), why: format!("bad URL {url:?}: {e}") })?;
        if url.scheme_str() != Some("http") {
            return Err(EventError::Target { target: name.into(), why: format!("{url} is not an http:// URL") });
        }
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        Ok(Self { name: name.into(), url, secret: secret.to_vec(), clock, client, timeout: Duration::from_secs(10) })
    }

    fn failed(&self, why: String) -> EventError {
        EventError::Target { target: self.name.clone(), why }
    }
}

impl Target for Webhook {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver<'a>(&'a self, events: &'a [Event]) -> BoxFuture<'a, Result<(), EventError>> {
        Box::pin(async move {
            let body = serde_json::to_vec(events)?;
            let now = self.clock.now_ms();
            let req = http::Request::post(self.url.clone())
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(TIMESTAMP_HEADER, now.to_string())
                .header(SIGNATURE_HEADER, signature(&self.secret, now, &body))
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| self.failed(format!("building the request: {e}")))?;
            let resp = tokio::time::timeout(self.timeout, self.client.request(req))
                .await
                .map_err(|_| self.failed(format!("no answer in {:?}", self.timeout)))?
                .map_err(|e| self.failed(format!("sending: {e}")))?;
            if resp.status().is_success() { Ok(()) } else { Err(self.failed(format!("answered {}", resp.status()))) }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real HTTP server on loopback: refuses the first `refuse`
    /// requests with 503, then takes each batch whose signature verifies.
    async fn receiver(refuse: usize) -> (String, tokio::sync::mpsc::UnboundedReceiver<(bool, Vec<Event>)>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut seen = 0;
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = Vec::new();
                let mut chunk = [0u8; 65536];
                // Read the head, then the body by its length.
                let (head, body) = loop {
                    let n = conn.read(&mut chunk).await.unwrap();
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..at]).to_string();
                        let len: usize =
                            head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())).unwrap();
                        while buf.len() < at + 4 + len {
                            let n = conn.read(&mut chunk).await.unwrap();
                            buf.extend_from_slice(&chunk[..n]);
                        }
                        break (head, buf[at + 4..at + 4 + len].to_vec());
                    }
                };
                let header =
                    |name: &str| head.lines().find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_owned()));
                seen += 1;
                let status = if seen <= refuse { "503 Service Unavailable" } else { "200 OK" };
                if seen > refuse {
                    let ts: u64 = header(TIMESTAMP_HEADER).unwrap().parse().unwrap();
                    let ok = verify(b"hook secret", ts, &body, &header(SIGNATURE_HEADER).unwrap());
                    tx.send((ok, serde_json::from_slice(&body).unwrap())).unwrap();
                }
                conn.write_all(format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").as_bytes()).await.unwrap();
            }
        });
        (url, rx)
    }

    #[tokio::test]
    async fn a_webhook_gets_signed_batches_and_a_refusal_is_an_error_to_retry() {
        let (url, mut got) = receiver(1).await;
        let hook = Webhook::new("hook", &url, b"hook secret", Arc::new(strata_types::SystemClock)).unwrap();
        let events: Vec<Event> = (1..=3).map(|i| Event::new("n1", "names", i, 0, "s3:ObjectCreated:Put", None, Default::default())).collect();
        let err = hook.deliver(&events).await.unwrap_err().to_string();
        assert!(err.contains("503"), "{err}");
        hook.deliver(&events).await.unwrap();
        let (signed, batch) = got.recv().await.unwrap();
        assert!(signed, "the receiver verifies the signature");
        assert_eq!(batch, events);
        // Signed under another secret, the receiver's check fails.
        let forged = Webhook::new("forged", &url, b"not the secret", Arc::new(strata_types::SystemClock)).unwrap();
        forged.deliver(&events).await.unwrap();
        assert!(!got.recv().await.unwrap().0);
        assert!(Webhook::new("bad", "https://example.com/", b"s", Arc::new(strata_types::SystemClock)).is_err());
    }

    #[test]
    fn a_signature_verifies_only_for_its_secret_time_and_body() {
        let s = signature(b"secret", 1000, b"[1]");
        assert!(verify(b"secret", 1000, b"[1]", &s));
        assert!(!verify(b"other", 1000, b"[1]", &s));
        assert!(!verify(b"secret", 1001, b"[1]", &s), "a replay at another time");
        assert!(!verify(b"secret", 1000, b"[2]", &s), "an altered body");
        assert!(!verify(b"secret", 1000, b"[1]", "v1=zz"));
        assert!(!verify(b"secret", 1000, b"[1]", &s.replace("v1=", "v2=")));
    }
}
