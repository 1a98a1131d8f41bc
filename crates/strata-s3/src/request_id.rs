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

/// What a browser POST upload's form says beside what s3s reads: its file
/// part's name, for `${filename}` in its key, and its `acl` field (s3s
/// reads only `x-amz-acl`). See `StrataS3::do_put`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PostForm {
    pub file_name: Option<String>,
    pub acl: Option<String>,
}

/// How far into a form its file part's header is looked for: S3 allows
/// 20 KB of form fields before the file.
const FORM_HEAD_MAX: usize = 64 * 1024;

/// Reads the head of a form upload's body up to its file part's
/// `Content-Disposition`, and gives back the whole body (what was read,
/// then the rest) with the file name found there.
async fn post_form(mut body: s3s::Body) -> (s3s::Body, PostForm) {
    use futures_util::StreamExt;
    let mut head: Vec<Bytes> = Vec::new();
    let mut seen = Vec::new();
    let mut name = None;
    let mut failed = None;
    while seen.len() < FORM_HEAD_MAX {
        match body.next().await {
            Some(Ok(chunk)) => {
                seen.extend_from_slice(&chunk);
                head.push(chunk);
                if let Some(n) = file_name_in(&seen) {
                    name = Some(n);
                    break;
                }
            }
            Some(Err(e)) => {
                failed = Some(e);
                break;
            }
            None => break,
        }
    }
    let acl = field_in(&seen, "acl");
    let rest: s3s::stream::DynByteStream = Box::pin(Prefixed { head: head.into(), failed, rest: body });
    (s3s::Body::from(rest), PostForm { file_name: name, acl })
}

/// The value of the form field `name` (a one-line value), if the head holds it whole.
fn field_in(head: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    let lower = text.to_ascii_lowercase();
    let at = lower.find(&format!("form-data; name=\"{name}\"\r\n"))?;
    let value_at = at + text[at..].find("\r\n\r\n")? + 4;
    let end = text[value_at..].find("\r\n")?;
    Some(text[value_at..value_at + end].to_owned())
}

/// The `filename` of the form part named `file`, once its header line is whole.
fn file_name_in(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    for line in text.split("\r\n") {
        let lower = line.to_ascii_lowercase();
        if !lower.starts_with("content-disposition:") || !lower.contains("name=\"file\"") {
            continue;
        }
        let at = lower.find("filename=\"")? + "filename=\"".len();
        let end = line[at..].find('"')?;
        // Only a line that ended (the CRLF after it is in the head) is whole.
        if !text.contains(&format!("{line}\r\n")) {
            return None;
        }
        return Some(line[at..at + end].to_owned());
    }
    None
}

/// A body whose first chunks were read already.
struct Prefixed {
    head: std::collections::VecDeque<Bytes>,
    failed: Option<s3s::StdError>,
    rest: s3s::Body,
}

impl futures_util::Stream for Prefixed {
    type Item = Result<Bytes, s3s::StdError>;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
        if let Some(b) = self.head.pop_front() {
            return std::task::Poll::Ready(Some(Ok(b)));
        }
        if let Some(e) = self.failed.take() {
            return std::task::Poll::Ready(Some(Err(e)));
        }
        std::pin::Pin::new(&mut self.rest).poll_next(cx)
    }
}

impl s3s::stream::ByteStream for Prefixed {}

/// The answer to a POST upload whose key said `${filename}`, naming the
/// key it was stored under (s3s writes the key as the form gave it).
fn with_file_name(resp: &mut Resp, name: &str) {
    const RAW: &str = "${filename}";
    const ENCODED: &str = "%24%7Bfilename%7D";
    if let Some(loc) = resp.headers().get(http::header::LOCATION).and_then(|v| v.to_str().ok()) {
        let encoded: String = form_urlencoded::byte_serialize(name.as_bytes()).collect();
        let fixed = loc.replace(ENCODED, &encoded).replace(RAW, &encoded);
        if let Ok(v) = http::HeaderValue::from_str(&fixed) {
            resp.headers_mut().insert(http::header::LOCATION, v);
        }
    }
    if let Some(body) = resp.body().bytes()
        && let Ok(text) = std::str::from_utf8(&body)
        && text.contains(RAW)
    {
        let escaped = name.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        let fixed = text.replace(RAW, &escaped).into_bytes();
        let len = fixed.len();
        *resp.body_mut() = s3s::Body::from(Bytes::from(fixed));
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    }
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
        let form_post = req.method() == http::Method::POST
            && req
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.to_ascii_lowercase().starts_with("multipart/form-data"));
        let inner = self.inner.clone();
        Box::pin(crate::cause::scope(async move {
            let mut req = req.map(s3s::Body::from);
            // A browser POST upload's key may say `${filename}`: the file
            // part's name, read from the form's head before s3s parses it.
            let mut file_name = None;
            if form_post {
                let (body, form) = post_form(std::mem::take(req.body_mut())).await;
                *req.body_mut() = body;
                file_name.clone_from(&form.file_name);
                req.extensions_mut().insert(form);
            }
            let mut resp = inner.call(req).await?;
            if let Some(name) = &file_name {
                with_file_name(&mut resp, name);
            }
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
        }))
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
    fn the_file_name_comes_from_the_file_part_once_its_line_is_whole() {
        let form = b"--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nup/${filename}\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"cat.jpg\"\r\nContent-Type: image/jpeg\r\n\r\nDATA";
        assert_eq!(super::file_name_in(form), Some("cat.jpg".into()));
        let cut = form.iter().position(|&c| c == b'j').unwrap();
        assert_eq!(super::file_name_in(&form[..cut]), None, "a name cut short is not read");
        assert_eq!(super::file_name_in(b"--b\r\nContent-Disposition: form-data; name=\"key\"; filename=\"k\"\r\n"), None);
        assert_eq!(super::field_in(form, "key").as_deref(), Some("up/${filename}"));
        assert_eq!(super::field_in(form, "acl"), None);
    }

    #[tokio::test]
    async fn the_body_read_for_the_name_is_given_back_whole() {
        use futures_util::StreamExt;
        let form: Vec<u8> = [&b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\n"[..], &[7u8; 100_000][..]].concat();
        let (mut body, got) = super::post_form(s3s::Body::from(form.clone())).await;
        assert_eq!(got.file_name.as_deref(), Some("a.txt"));
        let mut back = Vec::new();
        while let Some(chunk) = body.next().await {
            back.extend_from_slice(&chunk.unwrap());
        }
        assert_eq!(back, form);
    }

    #[test]
    fn a_failed_post_condition_is_s3s_access_denied() {
        let body = b"<Error><Code>InvalidPolicyDocument</Code><Message>Policy condition 'eq' failed</Message></Error>";
        let out = String::from_utf8(super::as_s3_policy_refusal(body).unwrap()).unwrap();
        assert_eq!(out, "<Error><Code>AccessDenied</Code><Message>Invalid according to Policy: Policy condition 'eq' failed</Message></Error>");
        assert_eq!(super::as_s3_policy_refusal(b"<Error><Code>InvalidPolicyDocument</Code><Message>not base64</Message></Error>"), None);
    }
}
