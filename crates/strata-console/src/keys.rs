//! Access keys: the node's `/admin/keys` API, signed as the page's user
//! (an admin key; any other gets the API's 403).

use crate::page::{self, esc};
use crate::s3::enc;
use crate::{Console, S, checked, failed, signed_in};
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use std::sync::Arc;

pub(crate) fn routes() -> axum::Router<Arc<Console>> {
    axum::Router::new().route("/ui/keys", get(list).post(create)).route("/ui/keys/{id}/delete", post(delete)).route("/ui/keys/{id}/grant", post(grant))
}

async fn list(State(c): S, headers: HeaderMap) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let keys = match c.client(&s).json(http::Method::GET, "/admin/keys").await {
        Ok(v) => v,
        Err(e) => return failed(&s, "Listing the access keys", &e),
    };
    let mut body = String::from(
        "<h1>Access keys</h1><table id=\"keys\"><thead><tr><th scope=\"col\">Id</th><th scope=\"col\">Name</th><th scope=\"col\">Role</th>\
<th scope=\"col\">Bucket grants</th><th scope=\"col\">Actions</th></tr></thead><tbody>",
    );
    for k in keys.as_array().into_iter().flatten() {
        let id = k["access_key_id"].as_str().unwrap_or("");
        let grants: Vec<String> =
            k["grants"].as_object().into_iter().flatten().map(|(b, g)| format!("{}: {}", esc(b), esc(g.as_str().unwrap_or("")))).collect();
        let actions = if id == s.creds.access_key_id {
            "(this session's key)".to_owned()
        } else {
            format!(
                "<form method=\"post\" action=\"/ui/keys/{}/grant\" class=\"grant\">{}<label>Bucket <input name=\"bucket\" required></label>\
<label>Right <select name=\"right\"><option value=\"readwrite\">read and write</option><option value=\"read\">read</option>\
<option value=\"none\">none</option></select></label><button>Grant</button></form>\
<form method=\"post\" action=\"/ui/keys/{}/delete\" onsubmit=\"return confirm('Delete this key? Its clients stop working at once.')\">{}\
<button>Delete</button></form>",
                enc(id, false),
                page::csrf(&s),
                enc(id, false),
                page::csrf(&s)
            )
        };
        body.push_str(&format!(
            "<tr data-key=\"{}\"><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{actions}</td></tr>",
            esc(id),
            esc(id),
            esc(k["name"].as_str().unwrap_or("")),
            if k["admin"].as_bool() == Some(true) { "admin" } else { "key" },
            grants.join(", ")
        ));
    }
    body.push_str(&format!(
        "</tbody></table><h2>New key</h2><form method=\"post\" action=\"/ui/keys\">{}<label for=\"key-name\">Name</label>\
<input id=\"key-name\" name=\"name\"><label><input type=\"checkbox\" name=\"admin\" value=\"true\" style=\"width:auto\"> Admin (sees and changes everything)</label>\
<p><button id=\"create-key\">Create key</button></p></form>",
        page::csrf(&s)
    ));
    page::page(&s, "Access keys", &body).into_response()
}

#[derive(serde::Deserialize)]
struct NewKey {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    admin: String,
}

async fn create(State(c): S, headers: HeaderMap, Form(f): Form<NewKey>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let body = serde_json::json!({ "name": f.name.trim(), "admin": f.admin == "true" });
    match c.client(&s).post_json("/admin/keys", &body).await {
        Ok(k) => {
            let id = k["access_key_id"].as_str().unwrap_or("");
            let secret = k["secret_access_key"].as_str().unwrap_or("");
            // Shown once, on this answer only: the node keeps no way to show it again.
            let text = format!(
                "<h1>Key created</h1><p class=\"ok\" role=\"status\">Copy the secret now: it is shown only once.</p>\
<table><tbody><tr><th scope=\"row\">Access key id</th><td><code id=\"new-key-id\">{}</code></td></tr>\
<tr><th scope=\"row\">Secret access key</th><td><code id=\"new-key-secret\">{}</code></td></tr></tbody></table>\
<p><a href=\"/ui/keys\">Back to the keys</a></p>",
                esc(id),
                esc(secret)
            );
            let mut r = page::page(&s, "Key created", &text).into_response();
            r.headers_mut().insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
            r
        }
        Err(e) => failed(&s, "Creating a key", &e),
    }
}

async fn delete(State(c): S, headers: HeaderMap, Path(id): Path<String>, Form(f): Form<crate::CsrfForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    match c.client(&s).send(http::Method::DELETE, &format!("/admin/keys/{}", enc(&id, false)), &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(_) => Redirect::to("/ui/keys").into_response(),
        Err(e) => failed(&s, &format!("Deleting key {id}"), &e),
    }
}

#[derive(serde::Deserialize)]
struct GrantForm {
    #[serde(default)]
    csrf: String,
    bucket: String,
    right: String,
}

async fn grant(State(c): S, headers: HeaderMap, Path(id): Path<String>, Form(f): Form<GrantForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let (read, write) = match f.right.as_str() {
        "readwrite" => (true, true),
        "read" => (true, false),
        "none" => (false, false),
        other => {
            return (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &format!("{other:?} is not a right: readwrite, read or none"))).into_response();
        }
    };
    let bucket = f.bucket.trim();
    let path = format!("/admin/keys/{}/grants/{}", enc(&id, false), enc(bucket, false));
    match c.client(&s).send(http::Method::PUT, &path, &[], strata_client::full(serde_json::json!({ "read": read, "write": write }).to_string())).await {
        Ok(_) => Redirect::to("/ui/keys").into_response(),
        Err(e) => failed(&s, &format!("Granting key {id} bucket {bucket:?}"), &e),
    }
}
