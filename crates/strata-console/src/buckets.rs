//! Buckets and objects: the node's S3 API, signed as the page's user.

use crate::page::{self, esc};
use crate::s3::{self, enc};
use crate::session::{Session, same_token};
use crate::{Console, S, checked, failed, signed_in};
use axum::body::Body;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post, put};
use futures_util::StreamExt;
use std::sync::Arc;
use strata_client::Client;

/// Objects per page of the browser.
const PAGE_KEYS: u32 = 100;
/// Uploads of more than this go up as S3 multipart uploads, in parts this big.
const PART_BYTES: usize = 8 << 20;

pub(crate) fn routes() -> axum::Router<Arc<Console>> {
    axum::Router::new()
        .route("/ui/buckets", get(list).post(create))
        .route("/ui/buckets/{bucket}", get(browse))
        .route("/ui/buckets/{bucket}/delete", post(delete_bucket))
        .route("/ui/buckets/{bucket}/public", post(set_public))
        .route("/ui/buckets/{bucket}/object", get(object))
        .route("/ui/buckets/{bucket}/download", get(download))
        .route("/ui/buckets/{bucket}/delete-object", post(delete_object))
        .route("/ui/buckets/{bucket}/upload", put(upload))
        .route("/ui/buckets/{bucket}/lifecycle", post(set_lifecycle))
        .route("/ui/buckets/{bucket}/tags", post(set_tags))
}

fn s3_of(c: &Console, s: &Session) -> Result<Client, Box<Response>> {
    c.s3_client(s).ok_or_else(|| Box::new((StatusCode::SERVICE_UNAVAILABLE, page::message(s, "No S3 API", "This node serves no S3 API.")).into_response()))
}

async fn text(r: strata_client::Response) -> Result<String, strata_client::ClientError> {
    Ok(String::from_utf8_lossy(&r.bytes().await?).into_owned())
}

async fn list(State(c): S, headers: HeaderMap) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let s3c = tryr!(s3_of(&c, &s));
    let xml = match s3c.send(http::Method::GET, "/", &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => match text(r).await {
            Ok(t) => t,
            Err(e) => return failed(&s, "Listing the buckets", &e),
        },
        Err(e) => return failed(&s, "Listing the buckets", &e),
    };
    let buckets = match s3::buckets(&xml) {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_GATEWAY, page::message(&s, "Not done", &e)).into_response(),
    };
    let mut body = String::from("<h1>Buckets</h1>");
    if buckets.is_empty() {
        body.push_str("<p>No buckets you may see.</p>");
    } else {
        body.push_str("<table><thead><tr><th scope=\"col\">Bucket</th><th scope=\"col\">Created</th></tr></thead><tbody>");
        for b in &buckets {
            body.push_str(&format!(
                "<tr><td><a class=\"bucket\" href=\"/ui/buckets/{}\">{}</a></td><td>{}</td></tr>",
                enc(&b.name, false),
                esc(&b.name),
                esc(&b.created)
            ));
        }
        body.push_str("</tbody></table>");
    }
    body.push_str(&format!(
        "<h2>New bucket</h2><form method=\"post\" action=\"/ui/buckets\">{}<label for=\"bucket-name\">Name</label>\
<input id=\"bucket-name\" name=\"name\" required pattern=\"[a-z0-9][a-z0-9.\\-]{{1,61}}[a-z0-9]\" title=\"3 to 63 lowercase letters, digits, dots and hyphens\">\
<p><button id=\"create-bucket\">Create bucket</button></p></form>",
        page::csrf(&s)
    ));
    page::page(&s, "Buckets", &body).into_response()
}

#[derive(serde::Deserialize)]
struct NameForm {
    #[serde(default)]
    csrf: String,
    name: String,
}

async fn create(State(c): S, headers: HeaderMap, Form(f): Form<NameForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let s3c = tryr!(s3_of(&c, &s));
    let name = f.name.trim();
    match s3c.send(http::Method::PUT, &format!("/{}", enc(name, false)), &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(_) => Redirect::to(&format!("/ui/buckets/{}", enc(name, false))).into_response(),
        Err(e) => failed(&s, &format!("Creating bucket {name:?}"), &e),
    }
}

async fn delete_bucket(State(c): S, headers: HeaderMap, Path(bucket): Path<String>, Form(f): Form<crate::CsrfForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let s3c = tryr!(s3_of(&c, &s));
    match s3c.send(http::Method::DELETE, &format!("/{}", enc(&bucket, false)), &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(_) => Redirect::to("/ui/buckets").into_response(),
        Err(e) => failed(&s, &format!("Deleting bucket {bucket:?}"), &e),
    }
}

#[derive(serde::Deserialize)]
struct PublicForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    public: String,
}

async fn set_public(State(c): S, headers: HeaderMap, Path(bucket): Path<String>, Form(f): Form<PublicForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let public = f.public == "true";
    let api = c.client(&s);
    match api
        .send(
            http::Method::PUT,
            &format!("/admin/s3/buckets/{}/public", enc(&bucket, false)),
            &[],
            strata_client::full(serde_json::json!({ "public": public }).to_string()),
        )
        .await
    {
        Ok(_) => Redirect::to(&format!("/ui/buckets/{}", enc(&bucket, false))).into_response(),
        Err(e) => failed(&s, &format!("Making bucket {bucket:?} {}", if public { "public" } else { "private" }), &e),
    }
}

#[derive(serde::Deserialize, Default)]
struct BrowseQuery {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    token: String,
}

async fn browse(State(c): S, headers: HeaderMap, Path(bucket): Path<String>, Query(q): Query<BrowseQuery>) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let s3c = tryr!(s3_of(&c, &s));
    let mut path = format!("/{}?list-type=2&delimiter=%2F&max-keys={PAGE_KEYS}&prefix={}", enc(&bucket, false), enc(&q.prefix, false));
    if !q.token.is_empty() {
        path.push_str(&format!("&continuation-token={}", enc(&q.token, false)));
    }
    let listing = match s3c.send(http::Method::GET, &path, &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => match text(r).await.map_err(|e| e.to_string()).and_then(|t| s3::listing(&t)) {
            Ok(l) => l,
            Err(e) => return (StatusCode::BAD_GATEWAY, page::message(&s, "Not done", &e)).into_response(),
        },
        Err(e) => return failed(&s, &format!("Listing bucket {bucket:?}"), &e),
    };
    let b = enc(&bucket, false);
    let mut body = format!("<h1>Bucket {}</h1><nav aria-label=\"Folder\"><a href=\"/ui/buckets/{b}\">{}</a>", esc(&bucket), esc(&bucket));
    let mut so_far = String::new();
    for part in q.prefix.split_terminator('/') {
        so_far.push_str(part);
        so_far.push('/');
        body.push_str(&format!(" / <a href=\"/ui/buckets/{b}?prefix={}\">{}</a>", enc(&so_far, false), esc(part)));
    }
    body.push_str("</nav>");
    body.push_str("<table id=\"objects\"><thead><tr><th scope=\"col\">Name</th><th scope=\"col\">Size</th><th scope=\"col\">Modified</th></tr></thead><tbody>");
    for p in &listing.prefixes {
        let name = p.strip_prefix(q.prefix.as_str()).unwrap_or(p);
        body.push_str(&format!(
            "<tr><td><a class=\"folder\" href=\"/ui/buckets/{b}?prefix={}\">📁 {}</a></td><td>folder</td><td></td></tr>",
            enc(p, false),
            esc(name)
        ));
    }
    for o in &listing.objects {
        let name = o.key.strip_prefix(q.prefix.as_str()).unwrap_or(&o.key);
        body.push_str(&format!(
            "<tr><td><a class=\"object\" href=\"/ui/buckets/{b}/object?key={}\">{}</a></td><td>{}</td><td>{}</td></tr>",
            enc(&o.key, false),
            esc(name),
            page::bytes(o.size),
            esc(&o.modified)
        ));
    }
    body.push_str("</tbody></table>");
    if listing.prefixes.is_empty() && listing.objects.is_empty() {
        body.push_str("<p>Nothing here.</p>");
    }
    if let Some(next) = &listing.next {
        body.push_str(&format!(
            "<p><a id=\"next-page\" href=\"/ui/buckets/{b}?prefix={}&token={}\">Next page</a></p>",
            enc(&q.prefix, false),
            enc(next, false)
        ));
    }
    body.push_str(&format!(
        "<h2>Upload</h2><form id=\"upload-form\" data-bucket=\"{}\" data-prefix=\"{}\" data-csrf=\"{}\">\
<label for=\"file\">File (into this folder)</label><input id=\"file\" type=\"file\" required>\
<p><button id=\"upload\">Upload</button></p><progress id=\"upload-progress\" max=\"100\" value=\"0\" hidden></progress>\
<p id=\"upload-status\" role=\"status\" aria-live=\"polite\"></p></form><script src=\"/ui/static/console.js\"></script>",
        esc(&bucket),
        esc(&q.prefix),
        esc(&s.csrf)
    ));
    // Lifecycle: the expiration rules S3 holds for the bucket.
    let rules = match s3c.send(http::Method::GET, &format!("/{b}?lifecycle"), &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => text(r).await.ok().and_then(|t| s3::lifecycle(&t).ok()).unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    body.push_str(&lifecycle_section(&s, &b, &rules));
    if s.admin {
        body.push_str(&format!(
            "<h2>Access</h2><form method=\"post\" action=\"/ui/buckets/{b}/public\">{}<label for=\"public\">Anonymous reads</label>\
<select id=\"public\" name=\"public\"><option value=\"false\">Private</option><option value=\"true\">Public</option></select>\
<p><button id=\"set-public\">Set</button></p></form>",
            page::csrf(&s)
        ));
    }
    body.push_str(&format!(
        "<h2>Delete this bucket</h2><form method=\"post\" action=\"/ui/buckets/{b}/delete\" \
onsubmit=\"return confirm('Delete bucket {}? It must be empty.')\">{}<p><button id=\"delete-bucket\">Delete bucket</button></p></form>",
        esc(&bucket.replace('\'', "")),
        page::csrf(&s)
    ));
    page::page(&s, &format!("Bucket {bucket}"), &body).into_response()
}

#[derive(serde::Deserialize)]
struct KeyQuery {
    key: String,
}

async fn object(State(c): S, headers: HeaderMap, Path(bucket): Path<String>, Query(q): Query<KeyQuery>) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let s3c = tryr!(s3_of(&c, &s));
    let path = format!("/{}/{}", enc(&bucket, false), enc(&q.key, true));
    let head = match s3c.send(http::Method::HEAD, &path, &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => r.head,
        Err(e) => return failed(&s, &format!("Reading object {:?}", q.key), &e),
    };
    let tags = match s3c.send(http::Method::GET, &format!("{path}?tagging"), &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => text(r).await.ok().and_then(|t| s3::leaves(&t).ok()).unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let b = enc(&bucket, false);
    let mut body = format!("<h1>{}</h1><p>In <a href=\"/ui/buckets/{b}\">{}</a></p><table><tbody>", esc(&q.key), esc(&bucket));
    for (name, v) in head.headers.iter() {
        let n = name.as_str();
        if matches!(n, "content-length" | "content-type" | "etag" | "last-modified") || n.starts_with("x-amz-meta-") {
            body.push_str(&format!("<tr><th scope=\"row\">{}</th><td>{}</td></tr>", esc(n), esc(v.to_str().unwrap_or("(not text)"))));
        }
    }
    let mut key = None;
    for (p, t) in &tags {
        match p.as_str() {
            "Tagging/TagSet/Tag/Key" => key = Some(t.clone()),
            "Tagging/TagSet/Tag/Value" => {
                if let Some(k) = key.take() {
                    body.push_str(&format!("<tr><th scope=\"row\">tag {}</th><td>{}</td></tr>", esc(&k), esc(t)));
                }
            }
            _ => {}
        }
    }
    let tag_lines: Vec<String> = {
        let mut out = Vec::new();
        let mut k = None;
        for (p, t) in &tags {
            match p.as_str() {
                "Tagging/TagSet/Tag/Key" => k = Some(t.clone()),
                "Tagging/TagSet/Tag/Value" => {
                    if let Some(k) = k.take() {
                        out.push(format!("{k}={t}"));
                    }
                }
                _ => {}
            }
        }
        out
    };
    body.push_str(&format!(
        "</tbody></table><form method=\"post\" action=\"/ui/buckets/{b}/tags\">{}<input type=\"hidden\" name=\"key\" value=\"{}\">\
<label for=\"tags\">Tags, one key=value a line</label><textarea id=\"tags\" name=\"tags\" rows=\"3\" cols=\"40\">{}</textarea>\
<p><button id=\"set-tags\">Save tags</button></p></form>",
        page::csrf(&s),
        esc(&q.key),
        esc(&tag_lines.join("\n"))
    ));
    body.push_str(&format!(
        "<p><a id=\"download\" href=\"/ui/buckets/{b}/download?key={}\">Download</a></p>\
<form method=\"post\" action=\"/ui/buckets/{b}/delete-object\" onsubmit=\"return confirm('Delete this object?')\">{}\
<input type=\"hidden\" name=\"key\" value=\"{}\"><button id=\"delete-object\">Delete object</button></form>",
        enc(&q.key, false),
        page::csrf(&s),
        esc(&q.key)
    ));
    page::page(&s, &q.key, &body).into_response()
}

async fn download(State(c): S, headers: HeaderMap, Path(bucket): Path<String>, Query(q): Query<KeyQuery>) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let s3c = tryr!(s3_of(&c, &s));
    let path = format!("/{}/{}", enc(&bucket, false), enc(&q.key, true));
    match s3c.send(http::Method::GET, &path, &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => {
            let file = q.key.rsplit('/').next().unwrap_or("download").replace(['"', '\\', '\r', '\n'], "_");
            let mut resp = Response::new(Body::new(r.body));
            *resp.status_mut() = StatusCode::OK;
            let h = resp.headers_mut();
            for name in [header::CONTENT_LENGTH, header::CONTENT_TYPE, header::ETAG] {
                if let Some(v) = r.head.headers.get(&name) {
                    h.insert(name, v.clone());
                }
            }
            if let Ok(v) = format!("attachment; filename=\"{file}\"").parse() {
                h.insert(header::CONTENT_DISPOSITION, v);
            }
            resp
        }
        Err(e) => failed(&s, &format!("Downloading {:?}", q.key), &e),
    }
}

#[derive(serde::Deserialize)]
struct KeyForm {
    #[serde(default)]
    csrf: String,
    key: String,
}

async fn delete_object(State(c): S, headers: HeaderMap, Path(bucket): Path<String>, Form(f): Form<KeyForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let s3c = tryr!(s3_of(&c, &s));
    let path = format!("/{}/{}", enc(&bucket, false), enc(&f.key, true));
    match s3c.send(http::Method::DELETE, &path, &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(_) => {
            let folder = f.key.rfind('/').map_or(String::new(), |i| f.key[..=i].to_owned());
            Redirect::to(&format!("/ui/buckets/{}?prefix={}", enc(&bucket, false), enc(&folder, false))).into_response()
        }
        Err(e) => failed(&s, &format!("Deleting {:?}", f.key), &e),
    }
}

/// An upload from the browser page (`console.js`): the file's bytes as
/// the body, its key in the query, the CSRF token in `x-csrf-token`.
/// Up to one part it is one S3 PUT; beyond, an S3 multipart upload of
/// 8 MiB parts, sent as the body arrives. Answers JSON.
async fn upload(State(c): S, headers: HeaderMap, Path(bucket): Path<String>, Query(q): Query<KeyQuery>, body: Body) -> Response {
    let Some((_, s)) = crate::session_of(&c, &headers) else {
        return (StatusCode::UNAUTHORIZED, axum::Json(serde_json::json!({ "error": "Your session has ended: sign in again." }))).into_response();
    };
    let token = headers.get("x-csrf-token").and_then(|v| v.to_str().ok()).unwrap_or("");
    if !same_token(&s.csrf, token) {
        return (StatusCode::FORBIDDEN, axum::Json(serde_json::json!({ "error": "The upload's security token is missing or wrong; nothing was stored." })))
            .into_response();
    }
    let Some(s3c) = c.s3_client(&s) else {
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(serde_json::json!({ "error": "This node serves no S3 API." }))).into_response();
    };
    if q.key.is_empty() {
        return (StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({ "error": "An object needs a name." }))).into_response();
    }
    let path = format!("/{}/{}", enc(&bucket, false), enc(&q.key, true));
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/octet-stream").to_owned();
    match store(&s3c, &path, &content_type, body).await {
        Ok(size) => axum::Json(serde_json::json!({ "bucket": bucket, "key": q.key, "size": size })).into_response(),
        Err((status, e)) => (status, axum::Json(serde_json::json!({ "error": e }))).into_response(),
    }
}

type UploadError = (StatusCode, String);

fn upstream(what: &str, e: &strata_client::ClientError) -> UploadError {
    let status = e.status().and_then(|s| StatusCode::from_u16(s).ok()).unwrap_or(StatusCode::BAD_GATEWAY);
    (status, format!("{what}: {e}"))
}

/// Stores `body` at `path`: one PUT when it fits a part, else a multipart upload.
async fn store(s3c: &Client, path: &str, content_type: &str, body: Body) -> Result<u64, UploadError> {
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut upload: Option<String> = None;
    let mut parts: Vec<String> = Vec::new();
    let mut total = 0u64;
    let headers = [("content-type", content_type.to_owned())];
    loop {
        let chunk = match stream.next().await {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => return Err((StatusCode::BAD_REQUEST, format!("the upload was cut off: {e}"))),
            None => None,
        };
        let done = chunk.is_none();
        if let Some(c) = chunk {
            total += c.len() as u64;
            buf.extend_from_slice(&c);
        }
        if buf.len() >= PART_BYTES || (done && upload.is_some()) {
            let id = match &upload {
                Some(id) => id.clone(),
                None => {
                    let r = s3c
                        .send(http::Method::POST, &format!("{path}?uploads"), &headers, strata_client::full(bytes::Bytes::new()))
                        .await
                        .map_err(|e| upstream("starting the upload", &e))?;
                    let xml = text(r).await.map_err(|e| upstream("starting the upload", &e))?;
                    let id = s3::upload_id(&xml).map_err(|e| (StatusCode::BAD_GATEWAY, e))?;
                    upload = Some(id.clone());
                    id
                }
            };
            while buf.len() >= PART_BYTES || (done && !buf.is_empty()) {
                let take = buf.len().min(PART_BYTES);
                let part: Vec<u8> = buf.drain(..take).collect();
                let n = parts.len() + 1;
                let r = s3c
                    .send(
                        http::Method::PUT,
                        &format!("{path}?partNumber={n}&uploadId={}", enc(&id, false)),
                        &[("content-length", part.len().to_string())],
                        strata_client::full(part),
                    )
                    .await
                    .map_err(|e| upstream(&format!("sending part {n}"), &e))?;
                let etag = r.head.headers.get(header::ETAG).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                parts.push(etag);
            }
        }
        if done {
            break;
        }
    }
    match upload {
        None => {
            s3c.send(
                http::Method::PUT,
                path,
                &[("content-type", content_type.to_owned()), ("content-length", buf.len().to_string())],
                strata_client::full(buf),
            )
            .await
            .map_err(|e| upstream("storing the object", &e))?;
        }
        Some(id) => {
            let list: String =
                parts.iter().enumerate().map(|(i, e)| format!("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1, esc(e))).collect();
            let xml = format!("<CompleteMultipartUpload>{list}</CompleteMultipartUpload>");
            s3c.send(
                http::Method::POST,
                &format!("{path}?uploadId={}", enc(&id, false)),
                &[("content-length", xml.len().to_string())],
                strata_client::full(xml),
            )
            .await
            .map_err(|e| upstream("completing the upload", &e))?;
        }
    }
    Ok(total)
}

/// What a rule does, in a sentence.
fn rule_sentence(r: &s3::ExpiryRule) -> String {
    let what = if r.prefix.is_empty() { "Objects".to_owned() } else { format!("Objects under {:?}", r.prefix) };
    let when = match (&r.days, &r.date) {
        (Some(1), _) => "after 1 day".to_owned(),
        (Some(d), _) => format!("after {d} days"),
        (None, Some(date)) => format!("on {}", date.get(..10).unwrap_or(date)),
        (None, None) => "never".to_owned(),
    };
    let off = if r.enabled { "" } else { " (rule disabled)" };
    format!("{what} expire {when}{off}.")
}

/// The bucket page's lifecycle: every rule, each with a remove button,
/// and a form that adds one (or replaces the one for its prefix).
fn lifecycle_section(s: &Session, b: &str, rules: &[s3::ExpiryRule]) -> String {
    let summary = if rules.is_empty() { "Objects never expire.".to_owned() } else { rules.iter().map(rule_sentence).collect::<Vec<_>>().join(" ") };
    let mut out = format!("<h2>Lifecycle</h2><p id=\"lifecycle\">{}</p>", esc(&summary));
    if !rules.is_empty() {
        out.push_str(
            "<table id=\"lifecycle-rules\"><thead><tr><th scope=\"col\">Rule</th><th scope=\"col\">Applies to</th><th scope=\"col\">Expires</th>\
<th scope=\"col\">Status</th><th scope=\"col\"></th></tr></thead><tbody>",
        );
        for r in rules {
            let when = match (&r.days, &r.date) {
                (Some(1), _) => "1 day after writing".to_owned(),
                (Some(d), _) => format!("{d} days after writing"),
                (None, Some(date)) => format!("on {date}"),
                (None, None) => "never".to_owned(),
            };
            out.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><form method=\"post\" action=\"/ui/buckets/{b}/lifecycle\">{}\
<input type=\"hidden\" name=\"remove\" value=\"{id}\"><button class=\"remove-rule\" aria-label=\"Remove rule {id}\">Remove</button></form></td></tr>",
                esc(&r.id),
                if r.prefix.is_empty() { "every object".to_owned() } else { format!("keys starting {}", esc(&r.prefix)) },
                esc(&when),
                if r.enabled { "Enabled" } else { "Disabled" },
                page::csrf(s),
                id = esc(&r.id)
            ));
        }
        out.push_str("</tbody></table>");
    }
    out.push_str(&format!(
        "<form method=\"post\" action=\"/ui/buckets/{b}/lifecycle\">{}\
<label for=\"expire-prefix\">Objects whose keys start with (empty: every object; a prefix with a rule already gets this one instead)</label>\
<input id=\"expire-prefix\" name=\"prefix\">\
<label for=\"expire-days\">Expire them this many days after writing</label><input id=\"expire-days\" name=\"days\" inputmode=\"numeric\" pattern=\"[0-9]*\" required>\
<p><button id=\"set-lifecycle\">Add the rule</button></p></form>",
        page::csrf(s)
    ));
    out
}

#[derive(serde::Deserialize)]
struct LifecycleForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    days: String,
    /// A rule to remove, by id (instead of adding one).
    #[serde(default)]
    remove: Option<String>,
}

/// The rules after a form: `rules` less the one removed, or with the new
/// rule in place of the rules for its prefix.
fn lifecycle_change(mut rules: Vec<s3::ExpiryRule>, f: &LifecycleForm) -> Result<Vec<s3::ExpiryRule>, String> {
    if let Some(id) = &f.remove {
        let before = rules.len();
        rules.retain(|r| &r.id != id);
        if rules.len() == before {
            return Err(format!("the bucket has no lifecycle rule {id:?} (changed meanwhile?)"));
        }
        return Ok(rules);
    }
    let days = f.days.trim();
    let n: u32 = match days.parse() {
        Ok(n) if n > 0 => n,
        _ => return Err(format!("{days:?} is not a number of days (1 or more)")),
    };
    if f.prefix.len() > 1024 {
        return Err(format!("a prefix is at most 1024 bytes, not {}", f.prefix.len()));
    }
    rules.retain(|r| r.prefix != f.prefix);
    let mut id =
        if f.prefix.is_empty() { "console-expiration".to_owned() } else { format!("console-expiration {}", f.prefix.chars().take(200).collect::<String>()) };
    while rules.iter().any(|r| r.id == id) {
        id.push('+');
    }
    rules.push(s3::ExpiryRule { id, prefix: f.prefix.clone(), days: Some(n), date: None, enabled: true });
    Ok(rules)
}

async fn set_lifecycle(State(c): S, headers: HeaderMap, Path(bucket): Path<String>, Form(f): Form<LifecycleForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let s3c = tryr!(s3_of(&c, &s));
    let path = format!("/{}?lifecycle", enc(&bucket, false));
    // The bucket's rules now, so a change keeps every other rule.
    let rules = match s3c.send(http::Method::GET, &path, &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => match text(r).await.map_err(|e| e.to_string()).and_then(|t| s3::lifecycle(&t)) {
            Ok(rules) => rules,
            Err(e) => return (StatusCode::BAD_GATEWAY, page::message(&s, "Not done", &format!("Reading bucket {bucket:?}'s lifecycle: {e}"))).into_response(),
        },
        Err(strata_client::ClientError::Api { status: 404, code, message })
            if code == "NoSuchLifecycleConfiguration" || message.contains("NoSuchLifecycleConfiguration") =>
        {
            Vec::new()
        }
        Err(e) => return failed(&s, &format!("Reading bucket {bucket:?}'s lifecycle"), &e),
    };
    let rules = match lifecycle_change(rules, &f) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &e)).into_response(),
    };
    let sent = if rules.is_empty() {
        s3c.send(http::Method::DELETE, &path, &[], strata_client::full(bytes::Bytes::new())).await
    } else {
        let xml = s3::lifecycle_xml(&rules);
        s3c.send(http::Method::PUT, &path, &[("content-length", xml.len().to_string())], strata_client::full(xml)).await
    };
    match sent {
        Ok(_) => Redirect::to(&format!("/ui/buckets/{}", enc(&bucket, false))).into_response(),
        Err(e) => failed(&s, &format!("Setting bucket {bucket:?}'s lifecycle"), &e),
    }
}

#[derive(serde::Deserialize)]
struct TagsForm {
    #[serde(default)]
    csrf: String,
    key: String,
    #[serde(default)]
    tags: String,
}

/// Tags typed one `key=value` a line.
pub(crate) fn parse_tags(text: &str) -> Result<Vec<(String, String)>, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
            _ => Err(format!("{l:?} is not key=value")),
        })
        .collect()
}

async fn set_tags(State(c): S, headers: HeaderMap, Path(bucket): Path<String>, Form(f): Form<TagsForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let s3c = tryr!(s3_of(&c, &s));
    let tags = match parse_tags(&f.tags) {
        Ok(t) => t,
        Err(e) => return (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &e)).into_response(),
    };
    let path = format!("/{}/{}?tagging", enc(&bucket, false), enc(&f.key, true));
    let sent = if tags.is_empty() {
        s3c.send(http::Method::DELETE, &path, &[], strata_client::full(bytes::Bytes::new())).await
    } else {
        let set: String = tags.iter().map(|(k, v)| format!("<Tag><Key>{}</Key><Value>{}</Value></Tag>", esc(k), esc(v))).collect();
        let xml = format!("<Tagging><TagSet>{set}</TagSet></Tagging>");
        s3c.send(http::Method::PUT, &path, &[("content-length", xml.len().to_string())], strata_client::full(xml)).await
    };
    match sent {
        Ok(_) => Redirect::to(&format!("/ui/buckets/{}/object?key={}", enc(&bucket, false), enc(&f.key, false))).into_response(),
        Err(e) => failed(&s, &format!("Tagging {:?}", f.key), &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_key_value_lines() {
        assert_eq!(parse_tags("a=1\n\n b = two \n").unwrap(), vec![("a".into(), "1".into()), ("b".into(), "two".into())]);
        assert!(parse_tags("novalue").is_err());
        assert!(parse_tags("=x").is_err());
        assert!(parse_tags("").unwrap().is_empty());
    }

    /// Adding a rule keeps the others and replaces only its prefix's;
    /// removing one takes only it; bad days and an unknown id change nothing.
    #[test]
    fn a_lifecycle_change_keeps_the_other_rules() {
        let rule = |id: &str, prefix: &str, days| s3::ExpiryRule { id: id.into(), prefix: prefix.into(), days: Some(days), date: None, enabled: true };
        let form = |prefix: &str, days: &str, remove: Option<&str>| LifecycleForm {
            csrf: String::new(),
            prefix: prefix.into(),
            days: days.into(),
            remove: remove.map(str::to_owned),
        };
        let mine = vec![rule("from-a-tool", "tmp/", 1), rule("old", "logs/", 90)];
        let added = lifecycle_change(mine.clone(), &form("logs/", "7", None)).unwrap();
        assert_eq!(added.len(), 2);
        assert_eq!(added[0], mine[0], "another tool's rule is kept as it was");
        assert_eq!((added[1].prefix.as_str(), added[1].days), ("logs/", Some(7)));
        let whole = lifecycle_change(added.clone(), &form("", "30", None)).unwrap();
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[2].id, "console-expiration");
        assert_eq!(lifecycle_change(whole.clone(), &form("", "", Some("from-a-tool"))).unwrap(), whole[1..].to_vec());
        assert!(lifecycle_change(whole.clone(), &form("", "", Some("nope"))).unwrap_err().contains("no lifecycle rule \"nope\""));
        assert!(lifecycle_change(whole.clone(), &form("", "soon", None)).unwrap_err().contains("is not a number of days"));
        assert!(lifecycle_change(whole, &form("", "0", None)).is_err());
        assert_eq!(rule_sentence(&rule("x", "logs/", 7)), "Objects under \"logs/\" expire after 7 days.");
    }
}
