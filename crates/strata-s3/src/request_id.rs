//! The S3 endpoint around s3s's service: request ids and CORS.
//!
//! Every S3 answer carries `x-amz-request-id` (and `x-amz-id-2`), and
//! every error body its `<RequestId>`, so a client's report of a failure
//! can be matched with the server's log. Ids are a per-process random
//! prefix and a counter, 16 hex digits as S3's. CORS preflights
//! (`OPTIONS`) are answered here from the bucket's rules, before s3s
//! authenticates (a browser's preflight carries no credentials), and the
//! answers to cross-origin requests a rule allows get its headers.

use crate::cors;
use bytes::Bytes;
use s3s::host::S3Host;
use s3s::service::S3Service;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use strata_names::NameIndex;

/// The S3 service with request ids on every answer.
#[derive(Clone)]
pub struct S3Endpoint {
    inner: S3Service,
    ids: Arc<Ids>,
    names: Arc<dyn NameIndex>,
    hosts: Arc<crate::VirtualHosts>,
}

struct Ids {
    prefix: u32,
    next: AtomicU64,
}

impl S3Endpoint {
    pub(crate) fn new(inner: S3Service, names: Arc<dyn NameIndex>, domains: Vec<String>) -> Self {
        Self { inner, ids: Arc::new(Ids { prefix: rand::random(), next: AtomicU64::new(0) }), names, hosts: Arc::new(crate::VirtualHosts::new(domains)) }
    }

    /// The bucket a request addresses (by virtual host, else its path's first segment).
    fn bucket_of<B>(&self, req: &http::Request<B>) -> Option<String> {
        let host = req.headers().get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if let Ok(v) = self.hosts.parse_host_header(host)
            && let Some(b) = v.bucket()
        {
            return Some(b.to_owned());
        }
        req.uri().path().trim_start_matches('/').split('/').next().filter(|b| !b.is_empty()).map(str::to_owned)
    }

    /// The bucket's CORS rules (none if it has none, or does not exist).
    fn cors_rules(&self, bucket: &str) -> Vec<cors::Rule> {
        strata_names::read(&*self.names, |s| s.bucket_doc(bucket, cors::DOC).and_then(|d| serde_json::from_str(d).ok())).unwrap_or_default()
    }
}

type Resp = http::Response<s3s::Body>;

/// An S3 error answer of `status`, `code` and `message`.
fn error_answer(status: http::StatusCode, code: &str, message: &str, id: &str) -> Resp {
    let body = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message><RequestId>{id}</RequestId></Error>");
    let mut r = http::Response::new(s3s::Body::from(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/xml"));
    r
}

/// Answers a CORS preflight from `rules`.
fn preflight<B>(req: &http::Request<B>, rules: &[cors::Rule], id: &str) -> Resp {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let (Some(origin), Some(method)) = (header("origin"), header("access-control-request-method")) else {
        return error_answer(
            http::StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information: a preflight needs the Origin and Access-Control-Request-Method headers",
            id,
        );
    };
    let asked: Vec<&str> =
        header("access-control-request-headers").map(|h| h.split(',').map(str::trim).filter(|h| !h.is_empty()).collect()).unwrap_or_default();
    let Some(rule) = cors::find(rules, origin, method, &asked) else {
        return error_answer(http::StatusCode::FORBIDDEN, "AccessForbidden", "CORSResponse: This CORS request is not allowed", id);
    };
    let mut r = http::Response::new(s3s::Body::empty());
    let h = r.headers_mut();
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = http::HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    };
    put("access-control-allow-origin", cors::allow_origin(rule, origin));
    put("access-control-allow-methods", rule.methods.join(", "));
    if !asked.is_empty() {
        put("access-control-allow-headers", asked.join(", "));
    }
    if !rule.expose.is_empty() {
        put("access-control-expose-headers", rule.expose.join(", "));
    }
    if let Some(age) = rule.max_age {
        put("access-control-max-age", age.to_string());
    }
    put("vary", "Origin, Access-Control-Request-Headers, Access-Control-Request-Method".to_owned());
    r
}

/// A POST upload whose policy conditions fail is answered by s3s with 400
/// InvalidPolicyDocument; S3 answers 403 AccessDenied ("Invalid according
/// to Policy"): the same error, in S3's code and status.
fn as_s3_policy_refusal(body: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    if !text.contains("<Code>InvalidPolicyDocument</Code>") || !text.contains("condition") {
        return None;
    }
    Some(text.replacen("<Code>InvalidPolicyDocument</Code><Message>", "<Code>AccessDenied</Code><Message>Invalid according to Policy: ", 1).into_bytes())
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
        // CORS: a preflight is answered here; a cross-origin request's
        // answer gets the headers of the rule that allows it.
        let origin = req.headers().get("origin").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let rules = match (&origin, req.method() == http::Method::OPTIONS) {
            (None, false) => Vec::new(),
            _ => self.bucket_of(&req).map(|b| self.cors_rules(&b)).unwrap_or_default(),
        };
        if req.method() == http::Method::OPTIONS {
            let mut resp = preflight(&req, &rules, &id);
            if let Ok(v) = http::HeaderValue::from_str(&id) {
                resp.headers_mut().insert("x-amz-request-id", v);
            }
            return Box::pin(async move { Ok(resp) });
        }
        let allowed =
            origin.as_deref().and_then(|o| cors::find(&rules, o, req.method().as_str(), &[]).map(|r| (cors::allow_origin(r, o), r.expose.join(", "))));
        let fut = hyper::service::Service::call(&self.inner, req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if let Some((allow, expose)) = allowed {
                let h = resp.headers_mut();
                if let Ok(v) = http::HeaderValue::from_str(&allow) {
                    h.insert("access-control-allow-origin", v);
                }
                if let Ok(v) = http::HeaderValue::from_str(&expose)
                    && !expose.is_empty()
                {
                    h.insert("access-control-expose-headers", v);
                }
                h.append(http::header::VARY, http::HeaderValue::from_static("Origin"));
            }
            if resp.status() == http::StatusCode::BAD_REQUEST
                && let Some(body) = resp.body().bytes()
                && let Some(refusal) = as_s3_policy_refusal(&body)
            {
                *resp.status_mut() = http::StatusCode::FORBIDDEN;
                let len = refusal.len();
                *resp.body_mut() = s3s::Body::from(Bytes::from(refusal));
                resp.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
            }
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

    #[test]
    fn a_failed_post_condition_is_s3s_access_denied() {
        let body = b"<Error><Code>InvalidPolicyDocument</Code><Message>Policy condition 'eq' failed</Message></Error>";
        let out = String::from_utf8(super::as_s3_policy_refusal(body).unwrap()).unwrap();
        assert_eq!(out, "<Error><Code>AccessDenied</Code><Message>Invalid according to Policy: Policy condition 'eq' failed</Message></Error>");
        assert_eq!(super::as_s3_policy_refusal(b"<Error><Code>InvalidPolicyDocument</Code><Message>not base64</Message></Error>"), None);
    }
}
