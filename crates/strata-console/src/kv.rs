//! Key-value stores: read-only stores with their versions (swap and
//! rollback behind a confirmation), read-write store definitions, and a
//! key lookup box. All through the node's own API as the page's user.

use crate::page::{self, esc};
use crate::s3::enc;
use crate::{Console, S, checked, failed, signed_in};
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::Value;
use std::sync::Arc;

pub(crate) fn routes() -> axum::Router<Arc<Console>> {
    axum::Router::new().route("/ui/kv", get(list)).route("/ui/kv/lookup", get(lookup)).route("/ui/kv/confirm", post(confirm)).route("/ui/kv/act", post(act))
}

async fn list(State(c): S, headers: HeaderMap) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let client = c.client(&s);
    let stores = match client.json(http::Method::GET, "/admin/kv").await {
        Ok(v) => v,
        Err(e) => return failed(&s, "Listing the read-only stores", &e),
    };
    let mut body = String::from("<h1>Key-value stores</h1><h2>Read-only stores</h2>");
    let list = stores.as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        body.push_str("<p>No read-only stores.</p>");
    } else {
        body.push_str(
            "<table id=\"ro-stores\"><thead><tr><th scope=\"col\">Store</th><th scope=\"col\">Live version</th><th scope=\"col\">Versions</th>\
<th scope=\"col\">Records</th><th scope=\"col\">Loading</th><th scope=\"col\">Actions</th></tr></thead><tbody>",
        );
        for st in &list {
            let name = st["store"].as_str().unwrap_or("");
            let versions: Vec<u64> = st["versions"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
            let live = st["live"].as_u64();
            let loading = if st["loading"].is_null() { "—".to_owned() } else { st["loading"].to_string() };
            let options: String = versions.iter().filter(|v| Some(**v) != live).map(|v| format!("<option value=\"{v}\">{v}</option>")).collect();
            let actions = if options.is_empty() {
                String::new()
            } else {
                format!(
                    "<form method=\"post\" action=\"/ui/kv/confirm\">{}<input type=\"hidden\" name=\"store\" value=\"{}\">\
<input type=\"hidden\" name=\"action\" value=\"swap\"><label>Version <select name=\"version\">{options}</select></label> <button>Swap…</button></form>\
<form method=\"post\" action=\"/ui/kv/confirm\">{}<input type=\"hidden\" name=\"store\" value=\"{}\">\
<input type=\"hidden\" name=\"action\" value=\"rollback\"><button>Roll back…</button></form>",
                    page::csrf(&s),
                    esc(name),
                    page::csrf(&s),
                    esc(name)
                )
            };
            body.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{actions}</td></tr>",
                esc(name),
                live.map_or("none".to_owned(), |v| v.to_string()),
                esc(&versions.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
                st["records"].as_u64().map_or("—".to_owned(), |r| r.to_string()),
                esc(&loading)
            ));
        }
        body.push_str("</tbody></table>");
    }
    // Read-write stores exist in a cluster's map.
    body.push_str("<h2>Read-write stores</h2>");
    match client.json(http::Method::GET, "/admin/rw").await {
        Ok(rw) => {
            let defs = rw["stores"].as_object().cloned().unwrap_or_default();
            if defs.is_empty() {
                body.push_str("<p>No read-write stores.</p>");
            } else {
                body.push_str("<table id=\"rw-stores\"><thead><tr><th scope=\"col\">Store</th><th scope=\"col\">Definition</th></tr></thead><tbody>");
                for (name, d) in &defs {
                    body.push_str(&format!("<tr><td>{}</td><td><code>{}</code></td></tr>", esc(name), esc(&d.to_string())));
                }
                body.push_str("</tbody></table>");
            }
        }
        Err(_) => body.push_str("<p>Read-write stores live in a cluster; this node is not one.</p>"),
    }
    body.push_str(
        "<h2>Look up a key</h2><form method=\"get\" action=\"/ui/kv/lookup\"><label for=\"lookup-store\">Store</label><input id=\"lookup-store\" name=\"store\" required>\
<label for=\"lookup-kind\">Kind</label><select id=\"lookup-kind\" name=\"kind\"><option value=\"ro\">read-only</option><option value=\"rw\">read-write</option></select>\
<label for=\"lookup-key\">Key (text, or hex: followed by hex digits)</label><input id=\"lookup-key\" name=\"key\" required>\
<p><button id=\"lookup\">Look up</button></p></form>",
    );
    page::page(&s, "Key-value stores", &body).into_response()
}

#[derive(serde::Deserialize)]
struct LookupQuery {
    store: String,
    key: String,
    #[serde(default)]
    kind: String,
}

/// The bytes a typed key stands for: text as UTF-8, or `hex:` and hex digits.
pub fn key_bytes(typed: &str) -> Result<Vec<u8>, String> {
    match typed.strip_prefix("hex:") {
        Some(h) => {
            if h.len() % 2 != 0 {
                return Err("a hex key needs an even number of digits".into());
            }
            (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|_| format!("{:?} is not hex", &h[i..i + 2]))).collect()
        }
        None => Ok(typed.as_bytes().to_vec()),
    }
}

async fn lookup(State(c): S, headers: HeaderMap, Query(q): Query<LookupQuery>) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let key = match key_bytes(&q.key) {
        Ok(k) => k,
        Err(e) => return (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &e)).into_response(),
    };
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&key);
    let base = if q.kind == "rw" { "rw" } else { "kv" };
    let path = format!("/{base}/{}/{b64}", enc(&q.store, false));
    let r = match c.client(&s).send(http::Method::GET, &path, &[], strata_client::full(bytes::Bytes::new())).await {
        Ok(r) => r,
        Err(e) => return failed(&s, &format!("Looking up {:?} in {:?}", q.key, q.store), &e),
    };
    let value = match r.bytes().await {
        Ok(v) => v,
        Err(e) => return failed(&s, "Reading the value", &e),
    };
    let shown = match std::str::from_utf8(&value) {
        Ok(t) => esc(t),
        Err(_) => format!("hex: {}", value.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    };
    let body = format!(
        "<h1>{} in {}</h1><p>{} bytes</p><pre id=\"value\">{shown}</pre><p><a href=\"/ui/kv\">Back to the stores</a></p>",
        esc(&q.key),
        esc(&q.store),
        value.len()
    );
    page::page(&s, "Key lookup", &body).into_response()
}

#[derive(serde::Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
    store: String,
    action: String,
    #[serde(default)]
    version: Option<u64>,
}

fn describe(f: &ActionForm) -> Result<String, String> {
    match (f.action.as_str(), f.version) {
        ("swap", Some(v)) => {
            Ok(format!("Swap store {} to version {v}? Lookups answer from version {v} at once; the live version is kept for a rollback.", f.store))
        }
        ("swap", None) => Err("swap to which version?".into()),
        ("rollback", _) => Ok(format!("Roll store {} back to the version before the live one? Lookups answer from it at once.", f.store)),
        (other, _) => Err(format!("{other:?} is not an action")),
    }
}

async fn confirm(State(c): S, headers: HeaderMap, Form(f): Form<ActionForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let text = match describe(&f) {
        Ok(t) => t,
        Err(e) => return (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &e)).into_response(),
    };
    let version = f.version.map_or(String::new(), |v| format!("<input type=\"hidden\" name=\"version\" value=\"{v}\">"));
    let body = format!(
        "<h1>Confirm</h1><p id=\"consequence\">{}</p><form method=\"post\" action=\"/ui/kv/act\">{}<input type=\"hidden\" name=\"store\" value=\"{}\">\
<input type=\"hidden\" name=\"action\" value=\"{}\">{version}<button id=\"confirm\">Yes, do it</button> <a href=\"/ui/kv\">No, go back</a></form>",
        esc(&text),
        page::csrf(&s),
        esc(&f.store),
        esc(&f.action)
    );
    page::page(&s, "Confirm", &body).into_response()
}

async fn act(State(c): S, headers: HeaderMap, Form(f): Form<ActionForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    if let Err(e) = describe(&f) {
        return (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &e)).into_response();
    }
    let (path, body) = match f.action.as_str() {
        "swap" => (format!("/admin/kv/{}/swap", enc(&f.store, false)), serde_json::json!({ "version": f.version })),
        _ => (format!("/admin/kv/{}/rollback", enc(&f.store, false)), serde_json::json!({})),
    };
    match c.client(&s).post_json(&path, &body).await {
        Ok(_) => Redirect::to("/ui/kv").into_response(),
        Err(e) => failed(&s, &format!("{} of store {:?}", f.action, f.store), &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_keys_are_text_or_hex() {
        assert_eq!(key_bytes("abc").unwrap(), b"abc");
        assert_eq!(key_bytes("hex:00ff10").unwrap(), vec![0, 255, 16]);
        assert!(key_bytes("hex:0").is_err());
        assert!(key_bytes("hex:zz").is_err());
    }
}
