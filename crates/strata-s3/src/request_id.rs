//! Request ids: every S3 answer carries `x-amz-request-id` (and
//! `x-amz-id-2`), and every error body its `<RequestId>`, so a client's
//! report of a failure can be matched with the server's log. Ids are a
//! per-process random prefix and a counter, 16 hex digits as S3's.

use bytes::Bytes;
use s3s::service::S3Service;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The S3 service with request ids on every answer.
#[derive(Clone)]
pub struct S3Endpoint {
    inner: S3Service,
    ids: Arc<Ids>,
}

struct Ids {
    prefix: u32,
    next: AtomicU64,
}

impl S3Endpoint {
    pub(crate) fn new(inner: S3Service) -> Self {
        Self { inner, ids: Arc::new(Ids { prefix: rand::random(), next: AtomicU64::new(0) }) }
    }
}

/// `body` (an S3 error document) with `<RequestId>id</RequestId>` added
/// before `</Error>`, unless it has one or is not an error document.
fn with_request_id(body: &[u8], id: &str) -> Option<Vec<u8>> {
    const END: &[u8] = b"</Error>";
    if body.windows(11).any(|w| w == b"<RequestId>") {
        return None;
    }
    let at = body.windows(END.len()).rposition(|w| w == END)?;
    let mut out = Vec::with_capacity(body.len() + id.len() + 24);
    out.extend_from_slice(&body[..at]);
    out.extend_from_slice(b"<RequestId>");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"</RequestId>");
    out.extend_from_slice(&body[at..]);
    Some(out)
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for S3Endpoint {
    type Response = <S3Service as hyper::service::Service<http::Request<hyper::body::Incoming>>>::Response;
    type Error = <S3Service as hyper::service::Service<http::Request<hyper::body::Incoming>>>::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let n = self.ids.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("{:08X}{:08X}", self.ids.prefix, n as u32);
        let fut = hyper::service::Service::call(&self.inner, req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if (resp.status().is_client_error() || resp.status().is_server_error())
                && let Some(body) = resp.body().bytes()
                && let Some(rewritten) = with_request_id(&body, &id)
            {
                let len = rewritten.len();
                *resp.body_mut() = s3s::Body::from(Bytes::from(rewritten));
                resp.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
            }
            if let Ok(v) = http::HeaderValue::from_str(&id) {
                resp.headers_mut().insert("x-amz-request-id", v.clone());
                resp.headers_mut().insert("x-amz-id-2", v);
            }
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::with_request_id;

    #[test]
    fn the_id_goes_inside_the_error_once() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code></Error>";
        let out = with_request_id(body, "ABC").unwrap();
        assert_eq!(out, b"<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><RequestId>ABC</RequestId></Error>".to_vec());
        assert_eq!(with_request_id(&out, "DEF"), None);
        assert_eq!(with_request_id(b"", "ABC"), None);
        assert_eq!(with_request_id(b"<ListBucketResult/>", "ABC"), None);
    }
}
