//! Striped blobs (FDS) and transactions (Týr) in a cluster: the tract
//! locator table with its rows and their recovery, and what each node's
//! transaction participant holds, from the nodes' own admin endpoints
//! (`/admin/tracts`, `/admin/tracts/recovery`, `/admin/txn`), with the
//! passes an operator may run now (orphan reclaim, intent recovery,
//! version collection).

use crate::cluster::{ask_all, page_from, propose};
use crate::page::{self, esc};
use crate::session::Session;
use crate::{Console, S, checked, failed, signed_in};
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use strata_client::ClientError;

pub(crate) fn routes() -> axum::Router<Arc<Console>> {
    axum::Router::new()
        .route("/ui/striped", get(striped))
        .route("/ui/striped/run", post(run_striped))
        .route("/ui/striped/table", post(make_table))
        .route("/ui/striped/grow", post(grow))
        .route("/ui/transactions", get(transactions))
        .route("/ui/transactions/run", post(run_txn))
}

/// Rows a page of the table shows.
const ROWS_PAGE: usize = 200;

/// The map's nodes as (id, address).
fn nodes_of(st: &Value) -> Vec<(u64, String)> {
    st["map"]["nodes"].as_object().into_iter().flatten().filter_map(|(id, n)| Some((id.parse().ok()?, n["addr"].as_str()?.to_owned()))).collect()
}

#[derive(serde::Deserialize, Default)]
struct RowsQuery {
    #[serde(default)]
    from: u64,
}

async fn striped(State(c): S, headers: HeaderMap, Query(q): Query<RowsQuery>) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let client = c.client(&s);
    let table = match client.json(http::Method::GET, "/admin/tracts").await {
        Ok(v) => v,
        Err(ClientError::Api { status: 404, code, .. }) if code == "NoTractTable" || code == "NotClustered" => {
            let why = if code == "NotClustered" {
                "Striped blobs live on a cluster; this node runs alone."
            } else {
                "The cluster has no tract locator table yet: make one with strata tract init."
            };
            let mut body = format!("<h1>Striped blobs</h1><p><a href=\"/ui/cluster\">Cluster</a></p><p id=\"no-table\">{}</p>", esc(why));
            if s.admin && code == "NoTractTable" {
                body.push_str(&format!(
                    "<h2>Make the table</h2><form method=\"post\" action=\"/ui/striped/table\">{}\
<label for=\"tract-mib\">Tract size, MiB (a power of two up to 64; fixed for the cluster's life)</label><input id=\"tract-mib\" name=\"tract_mib\" value=\"8\" inputmode=\"numeric\">\
<label for=\"row-disks\">Disks per row (the most replicas a blob may have)</label><input id=\"row-disks\" name=\"replicas\" value=\"3\" inputmode=\"numeric\">\
<label for=\"scatter\">Scatter width (the other disks each disk shares rows with)</label><input id=\"scatter\" name=\"scatter\" value=\"8\" inputmode=\"numeric\">\
<label for=\"row-gib\">Capacity of each row's replicas, GiB</label><input id=\"row-gib\" name=\"capacity_gib\" value=\"64\" inputmode=\"numeric\">\
<p><button id=\"make-table\">Make the table…</button></p></form>",
                    page::csrf(&s)
                ));
            }
            return page::page(&s, "Striped blobs", &body).into_response();
        }
        Err(e) => return failed(&s, "Reading the tract locator table", &e),
    };
    let rows: Vec<(u64, &Value)> = table["rows"].as_array().into_iter().flatten().enumerate().map(|(i, r)| (i as u64, r)).collect();
    let filling: Vec<&Value> = rows.iter().map(|(_, r)| *r).filter(|r| !r["filling"].is_null()).collect();
    // Rows per disk: how evenly the table spreads them.
    let mut per_disk: BTreeMap<String, usize> = BTreeMap::new();
    for (_, r) in &rows {
        for d in r["disks"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            *per_disk.entry(d.to_owned()).or_default() += 1;
        }
    }
    let (least, most) = (per_disk.values().min().copied().unwrap_or(0), per_disk.values().max().copied().unwrap_or(0));
    let mut body = format!(
        "<h1>Striped blobs</h1><p><a href=\"/ui/cluster\">Cluster</a> · <a href=\"/ui/transactions\">Transactions</a></p>\
<h2>Tract locator table</h2><table id=\"tract-table\"><tbody>\
<tr><th scope=\"row\">Tract size</th><td>{}</td></tr><tr><th scope=\"row\">Disks per row</th><td>{}</td></tr>\
<tr><th scope=\"row\">Scatter width</th><td>{}</td></tr><tr><th scope=\"row\">A client's simultaneous limit</th><td>{}</td></tr>\
<tr><th scope=\"row\">Rows</th><td id=\"tract-rows\">{}</td></tr><tr><th scope=\"row\">Rows per disk</th><td>{least} to {most}, over {} disks</td></tr>\
<tr><th scope=\"row\">Rows recovering</th><td id=\"rows-recovering\">{}</td></tr></tbody></table>",
        page::bytes(table["tract_bytes"].as_u64().unwrap_or(0)),
        table["replicas"],
        table["scatter"],
        table["simultaneous_limit"],
        rows.len(),
        per_disk.len(),
        filling.len(),
    );

    // Recovery: each node filling rows says how far it got.
    if !filling.is_empty() {
        let st = match client.json(http::Method::GET, "/admin/cluster/status").await {
            Ok(v) => v,
            Err(e) => return failed(&s, "Reading the cluster's status", &e),
        };
        let filling_nodes: std::collections::BTreeSet<u64> = filling.iter().filter_map(|r| r["filling"].as_str()?.split(':').next()?.parse().ok()).collect();
        let nodes: Vec<(u64, String)> = nodes_of(&st).into_iter().filter(|(n, _)| filling_nodes.contains(n)).collect();
        let (copied, total, lines) = recovery(&ask_all(&c, &s, &nodes, "/admin/tracts/recovery").await);
        body.push_str(&format!("<h2>Recovery</h2><p id=\"recovery\">{} of {} copied into the rows filling.</p>", page::bytes(copied), page::bytes(total)));
        body.push_str(&page::bar("recovery-progress", copied, total));
        body.push_str("<ul>");
        for l in &lines {
            body.push_str(&format!("<li>{}</li>", esc(l)));
        }
        body.push_str("</ul>");
    }

    if s.admin {
        body.push_str(&format!(
            "<h2>Actions</h2><form method=\"post\" action=\"/ui/striped/run\">{}<input type=\"hidden\" name=\"pass\" value=\"orphans\">\
<button id=\"reclaim-orphans\">Reclaim orphaned tracts on this node now</button></form>\
<form method=\"post\" action=\"/ui/striped/grow\">{}<button id=\"grow\">Give new disks their share of rows…</button></form>",
            page::csrf(&s),
            page::csrf(&s)
        ));
    }

    // The rows, a page at a time.
    let (shown, next) = page_from(&rows, q.from, ROWS_PAGE);
    body.push_str(
        "<h2>Rows</h2><table id=\"tract-rows-list\"><thead><tr><th scope=\"col\">Row</th><th scope=\"col\">Partition</th><th scope=\"col\">Version</th>\
<th scope=\"col\">Disks (node:disk)</th><th scope=\"col\">Filling</th></tr></thead><tbody>",
    );
    for (i, r) in shown {
        let disks: Vec<&str> = r["disks"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        body.push_str(&format!(
            "<tr><td>{i}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r["partition"],
            r["version"],
            esc(&disks.join(", ")),
            esc(r["filling"].as_str().unwrap_or(""))
        ));
    }
    body.push_str("</tbody></table>");
    if let Some(n) = next {
        body.push_str(&format!("<p><a id=\"next-rows\" href=\"/ui/striped?from={n}\">Next {ROWS_PAGE} rows</a></p>"));
    }
    page::page_refreshing(&s, "Striped blobs", &body, (!filling.is_empty()).then_some(2)).into_response()
}

/// What the nodes filling rows answered (`/admin/tracts/recovery`): bytes
/// copied, bytes to copy (a row whose source could not be asked counts
/// what it has), and a line per row and per node that did not answer.
fn recovery(answers: &BTreeMap<u64, Result<Value, String>>) -> (u64, u64, Vec<String>) {
    let (mut copied, mut total, mut lines) = (0u64, 0u64, Vec::new());
    for (n, got) in answers {
        match got {
            Ok(v) => {
                for f in v.as_array().into_iter().flatten() {
                    let (have, of) = (f["copied_bytes"].as_u64().unwrap_or(0), f["source_bytes"].as_u64());
                    copied += have;
                    total += of.unwrap_or(have).max(have);
                    lines.push(format!(
                        "row partition {}: {} → {}, {} of {}",
                        f["partition"],
                        f["from"].as_str().unwrap_or(""),
                        f["to"].as_str().unwrap_or(""),
                        page::bytes(have),
                        of.map_or("an unknown size".to_owned(), page::bytes)
                    ));
                }
            }
            Err(e) => lines.push(format!("node {n} did not say: {e}")),
        }
    }
    (copied, total, lines)
}

#[derive(serde::Deserialize)]
struct TableForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    tract_mib: String,
    #[serde(default)]
    replicas: String,
    #[serde(default)]
    scatter: String,
    #[serde(default)]
    capacity_gib: String,
    /// Set by the confirmation page's form.
    #[serde(default)]
    confirmed: Option<String>,
}

/// The `TractInit` a form asks for (its seed aside), or what is wrong.
fn table_command(f: &TableForm) -> Result<(u64, u32, u32, u64), String> {
    let num = |v: &str, what: &str| v.trim().parse::<u64>().map_err(|_| format!("{what}: {v:?} is not a whole number"));
    let mib = num(&f.tract_mib, "tract size")?;
    if !(1..=64).contains(&mib) || !mib.is_power_of_two() {
        return Err(format!("tract size: {mib} MiB is not a power of two from 1 to 64"));
    }
    let replicas = num(&f.replicas, "disks per row")?;
    let scatter = num(&f.scatter, "scatter width")?;
    let gib = num(&f.capacity_gib, "row capacity")?;
    if replicas == 0 || replicas > 16 {
        return Err(format!("disks per row: {replicas} is not from 1 to 16"));
    }
    if scatter == 0 || scatter > 1024 {
        return Err(format!("scatter width: {scatter} is not from 1 to 1024"));
    }
    if gib == 0 || gib > 1 << 20 {
        return Err(format!("row capacity: {gib} GiB is not from 1 to {}", 1u64 << 20));
    }
    Ok((mib << 20, replicas as u32, scatter as u32, gib << 30))
}

/// Makes the tract locator table, after a confirmation.
async fn make_table(State(c): S, headers: HeaderMap, Form(f): Form<TableForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let (tract_bytes, replicas, scatter, capacity_bytes) = match table_command(&f) {
        Ok(t) => t,
        Err(e) => return (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &e)).into_response(),
    };
    if f.confirmed.as_deref() != Some("yes") {
        let body = format!(
            "<h1>Confirm</h1><p id=\"consequence\">Make the tract locator table: tracts of {}, rows of {replicas} disks, each disk sharing rows with about {scatter} others, \
each row's replicas holding up to {}? The tract size cannot be changed afterwards.</p>\
<form method=\"post\" action=\"/ui/striped/table\">{}<input type=\"hidden\" name=\"tract_mib\" value=\"{}\"><input type=\"hidden\" name=\"replicas\" value=\"{replicas}\">\
<input type=\"hidden\" name=\"scatter\" value=\"{scatter}\"><input type=\"hidden\" name=\"capacity_gib\" value=\"{}\"><input type=\"hidden\" name=\"confirmed\" value=\"yes\">\
<button id=\"confirm\">Yes, make it</button> <a href=\"/ui/striped\">No, go back</a></form>",
            page::bytes(tract_bytes),
            page::bytes(capacity_bytes),
            page::csrf(&s),
            tract_bytes >> 20,
            capacity_bytes >> 30
        );
        return page::page(&s, "Confirm", &body).into_response();
    }
    let seed: u64 = rand::random();
    let cmd = serde_json::json!({ "TractInit": { "tract_bytes": tract_bytes, "replicas": replicas, "scatter": scatter, "capacity_bytes": capacity_bytes, "seed": seed } });
    match propose(&c, &s, "/admin/cluster/command", cmd.to_string()).await {
        Ok(_) => axum::response::Redirect::to("/ui/striped").into_response(),
        Err(r) => r,
    }
}

/// FDS growth: new disks get their share of the rows, after a confirmation.
async fn grow(State(c): S, headers: HeaderMap, Form(f): Form<TableForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    if f.confirmed.as_deref() != Some("yes") {
        let body = format!(
            "<h1>Confirm</h1><p id=\"consequence\">Give disks with fewer rows than their share (new ones) rows of the disks with the most? \
Each moved row's new replica takes writes while it fills, and takes the old one's place when it has caught up.</p>\
<form method=\"post\" action=\"/ui/striped/grow\">{}<input type=\"hidden\" name=\"confirmed\" value=\"yes\">\
<button id=\"confirm\">Yes, grow</button> <a href=\"/ui/striped\">No, go back</a></form>",
            page::csrf(&s)
        );
        return page::page(&s, "Confirm", &body).into_response();
    }
    match propose(&c, &s, "/admin/cluster/command", serde_json::json!({ "TractGrow": { "now_ms": c.clock.now_ms() } }).to_string()).await {
        Ok(_) => axum::response::Redirect::to("/ui/striped").into_response(),
        Err(r) => r,
    }
}

#[derive(serde::Deserialize)]
struct PassForm {
    #[serde(default)]
    csrf: String,
    pass: String,
}

/// A pass's answer as a definition list.
fn answer_list(v: &Value) -> String {
    let mut out = String::from("<dl id=\"pass-result\">");
    for (k, x) in v.as_object().into_iter().flatten() {
        let text = match x {
            Value::Array(a) if a.is_empty() => "none".to_owned(),
            Value::Array(a) => a.iter().map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned)).collect::<Vec<_>>().join("; "),
            other => other.to_string(),
        };
        out.push_str(&format!("<dt>{}</dt><dd>{}</dd>", esc(&k.replace('_', " ")), esc(&text)));
    }
    out.push_str("</dl>");
    out
}

/// Runs one of a node's passes now and shows what it did.
async fn run_pass(c: &Console, s: &Session, path: &str, title: &str, back: &str) -> Response {
    match c.client(s).send(http::Method::POST, path, &[], strata_client::full("")).await {
        Ok(r) => match r.bytes().await {
            Ok(b) => {
                let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                let body = format!("<h1>{}</h1><p>Done on this node.</p>{}<p><a href=\"{back}\">Back</a></p>", esc(title), answer_list(&v));
                page::page(s, title, &body).into_response()
            }
            Err(e) => failed(s, title, &e),
        },
        Err(e) => failed(s, title, &e),
    }
}

async fn run_striped(State(c): S, headers: HeaderMap, Form(f): Form<PassForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    match f.pass.as_str() {
        "orphans" => run_pass(&c, &s, "/admin/tracts/orphans", "Orphaned tracts reclaimed", "/ui/striped").await,
        other => (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &format!("{other:?} is not a pass"))).into_response(),
    }
}

async fn run_txn(State(c): S, headers: HeaderMap, Form(f): Form<PassForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    match f.pass.as_str() {
        "recover" => run_pass(&c, &s, "/admin/txn/recover", "Intent recovery", "/ui/transactions").await,
        "gc" => run_pass(&c, &s, "/admin/txn/gc", "Version collection", "/ui/transactions").await,
        other => (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &format!("{other:?} is not a pass"))).into_response(),
    }
}

/// Every node's transaction participant: what it holds now, and its
/// settings; the passes this node runs on its own, to run now.
async fn transactions(State(c): S, headers: HeaderMap) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let st = match c.client(&s).json(http::Method::GET, "/admin/cluster/status").await {
        Ok(v) => v,
        Err(ClientError::Api { status: 404, code, .. }) if code == "NotClustered" => {
            let body = "<h1>Transactions</h1><p id=\"no-cluster\">Transactions run on a cluster; this node runs alone.</p>";
            return page::page(&s, "Transactions", body).into_response();
        }
        Err(e) => return failed(&s, "Reading the cluster's status", &e),
    };
    let nodes = nodes_of(&st);
    let mut body = String::from(
        "<h1>Transactions</h1><p><a href=\"/ui/cluster\">Cluster</a> · <a href=\"/ui/striped\">Striped blobs</a></p>\
<p>Each node leads the transaction rows the map makes it primary of: the intents it holds there wait for their transaction's decision.</p>\
<table id=\"participants\"><thead><tr><th scope=\"col\">Node</th><th scope=\"col\">Committed</th><th scope=\"col\">Aborted</th>\
<th scope=\"col\">Presumed aborted</th><th scope=\"col\">Intents held</th><th scope=\"col\">Readers</th><th scope=\"col\">Mode</th><th scope=\"col\">Wait</th><th scope=\"col\">Intent timeout</th><th scope=\"col\">Read lease</th></tr></thead><tbody>",
    );
    let (mut held, mut committed, mut aborted, mut silent) = (0u64, 0u64, 0u64, 0usize);
    for (n, got) in ask_all(&c, &s, &nodes, "/admin/txn").await {
        match got {
            Ok(v) => {
                held += v["held"].as_u64().unwrap_or(0);
                committed += v["committed"].as_u64().unwrap_or(0);
                aborted += v["aborted"].as_u64().unwrap_or(0) + v["presumed_aborted"].as_u64().unwrap_or(0);
                body.push_str(&format!(
                    "<tr data-node=\"{n}\"><td>{n}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"held\">{}</td><td>{}</td><td>{}</td><td>{} ms</td><td>{} ms</td><td>{} ms</td></tr>",
                    v["committed"],
                    v["aborted"],
                    v["presumed_aborted"],
                    v["held"],
                    v["readers"],
                    esc(v["mode"].as_str().unwrap_or("")),
                    v["wait_ms"],
                    v["intent_timeout_ms"],
                    v["read_lease_ms"]
                ));
            }
            Err(e) => {
                silent += 1;
                body.push_str(&format!("<tr data-node=\"{n}\"><td>{n}</td><td colspan=\"9\">no answer: {}</td></tr>", esc(&e)));
            }
        }
    }
    let partial = if silent > 0 { " (some nodes did not answer)" } else { "" };
    body.push_str(&format!(
        "</tbody></table><p id=\"intents-held\">Intents held in all: {held}{partial}.</p>\
<p id=\"decided\">Since the nodes started: {committed} committed, {aborted} aborted{partial}.</p>"
    ));
    if s.admin {
        body.push_str(&format!(
            "<h2>Passes on this node</h2><p>Both run on their own; run one now to see what it finds.</p>\
<form method=\"post\" action=\"/ui/transactions/run\">{}<input type=\"hidden\" name=\"pass\" value=\"recover\"><button id=\"run-recover\">Resolve intents past their timeout now</button></form>\
<form method=\"post\" action=\"/ui/transactions/run\">{}<input type=\"hidden\" name=\"pass\" value=\"gc\"><button id=\"run-gc\">Collect old versions now</button></form>",
            page::csrf(&s),
            page::csrf(&s)
        ));
    }
    page::page(&s, "Transactions", &body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_answer_reads_as_a_list() {
        let v = serde_json::json!({ "expired": 2, "errors": [], "notes": ["a", "b"] });
        let html = answer_list(&v);
        assert!(html.contains("<dt>expired</dt><dd>2</dd>"), "{html}");
        assert!(html.contains("<dt>errors</dt><dd>none</dd>"), "{html}");
        assert!(html.contains("<dd>a; b</dd>"), "{html}");
    }

    #[test]
    fn a_table_form_is_checked_before_it_is_proposed() {
        let form = |mib: &str, replicas: &str| TableForm {
            csrf: String::new(),
            tract_mib: mib.into(),
            replicas: replicas.into(),
            scatter: "8".into(),
            capacity_gib: "64".into(),
            confirmed: None,
        };
        assert_eq!(table_command(&form("8", "3")), Ok((8 << 20, 3, 8, 64 << 30)));
        assert!(table_command(&form("3", "3")).unwrap_err().contains("not a power of two"));
        assert!(table_command(&form("128", "3")).is_err());
        assert!(table_command(&form("eight", "3")).unwrap_err().contains("not a whole number"));
        assert!(table_command(&form("8", "0")).unwrap_err().contains("disks per row"));
    }

    #[test]
    fn recovery_adds_up_the_filling_rows() {
        let mut answers = BTreeMap::new();
        answers.insert(
            4,
            Ok(serde_json::json!([
                { "partition": 9, "from": "2:0", "to": "4:0", "copied_bytes": 1u64 << 20, "source_bytes": 4u64 << 20 },
                { "partition": 10, "from": "2:0", "to": "4:0", "copied_bytes": 3u64 << 20, "source_bytes": null },
            ])),
        );
        answers.insert(5, Err("no answer in 1500 ms".to_owned()));
        let (copied, total, lines) = recovery(&answers);
        assert_eq!((copied, total), (4 << 20, 7 << 20));
        assert_eq!(lines[0], "row partition 9: 2:0 → 4:0, 1.0 MiB of 4.0 MiB");
        assert!(lines[1].ends_with("of an unknown size"), "{}", lines[1]);
        assert_eq!(lines[2], "node 5 did not say: no answer in 1500 ms");
    }

    #[test]
    fn nodes_come_from_the_map() {
        let st = serde_json::json!({ "map": { "nodes": { "1": { "addr": "127.0.0.1:7000" }, "2": { "addr": "127.0.0.2:7000" }, "x": {} } } });
        assert_eq!(nodes_of(&st), vec![(1, "127.0.0.1:7000".to_owned()), (2, "127.0.0.2:7000".to_owned())]);
    }
}
