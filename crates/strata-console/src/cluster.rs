//! The cluster: the node's `/admin/cluster/status` shown as pages, and its
//! commands (remove or mark down a node, start or cancel a rebalancing)
//! each behind a confirmation page that says what will happen.

use crate::page::{self, esc};
use crate::session::Session;
use crate::{Console, S, checked, failed, signed_in};
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) fn routes() -> axum::Router<Arc<Console>> {
    axum::Router::new()
        .route("/ui/cluster", get(overview))
        .route("/ui/cluster/nodes/{id}", get(node))
        .route("/ui/cluster/partitions", get(partitions))
        .route("/ui/cluster/confirm", post(confirm))
        .route("/ui/cluster/act", post(act))
}

fn state_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => o.keys().next().cloned().unwrap_or_default(),
        other => other.to_string(),
    }
}

fn loc(v: &Value) -> (u64, u64) {
    (v["node"].as_u64().unwrap_or(u64::MAX), v["disk"].as_u64().unwrap_or(u64::MAX))
}

/// A rebalancing plan's progress read from the map: (moves done, moves).
/// A planned move is done once its partition holds the new replica and
/// not the old one.
pub fn plan_progress(map: &Value) -> Option<(usize, usize)> {
    let moves = map["rebalance"]["moves"].as_array()?;
    let done = moves
        .iter()
        .filter(|m| {
            let p = &map["partitions"][m["partition"].as_u64().unwrap_or(u64::MAX).to_string()];
            let reps: Vec<(u64, u64)> = p["replicas"].as_array().into_iter().flatten().map(loc).collect();
            reps.contains(&loc(&m["to"])) && !reps.contains(&loc(&m["from"]))
        })
        .count();
    Some((done, moves.len()))
}

/// How long a page waits for another node.
const PEER_WAIT: std::time::Duration = std::time::Duration::from_millis(1500);

/// `path` asked of every node of `nodes` (id, address) at once, at most
/// [`PEER_WAIT`] each; a node that did not answer maps to why.
pub(crate) async fn ask_all(c: &Console, s: &Session, nodes: &[(u64, String)], path: &str) -> BTreeMap<u64, Result<Value, String>> {
    let asks = nodes.iter().map(|(n, addr)| {
        let client = c.peer(s, addr);
        async move {
            let got = match tokio::time::timeout(PEER_WAIT, client.json(http::Method::GET, path)).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer in {} ms", PEER_WAIT.as_millis())),
            };
            (*n, got)
        }
    });
    futures_util::future::join_all(asks).await.into_iter().collect()
}

/// Posts a map command (or a rebalancing) through this node; the
/// cluster's refusal, or a failed call, as the page to answer with.
pub(crate) async fn propose(c: &Console, s: &Session, path: &str, body: String) -> Result<Value, Response> {
    let sent = c.client(s).send(http::Method::POST, path, &[("content-type", "application/json".into())], strata_client::full(body)).await;
    let answer = match sent {
        Ok(r) => match r.bytes().await {
            Ok(b) => serde_json::from_slice::<Value>(&b).unwrap_or(Value::Null),
            Err(e) => return Err(failed(s, "Sending the command", &e)),
        },
        Err(e) => return Err(failed(s, "Sending the command", &e)),
    };
    if !answer["Refused"].is_null() {
        let why = answer["message"].as_str().map_or_else(|| answer["Refused"].to_string(), str::to_owned);
        return Err((StatusCode::CONFLICT, page::message(s, "Refused", &format!("The cluster refused it: {why}"))).into_response());
    }
    Ok(answer)
}

/// What the nodes receiving moves say of their copies, by partition
/// (`GET /admin/cluster/moves` on each, at once; a node that does not
/// answer in time is left out, and named in the second value).
async fn copies(c: &Console, s: &Session, map: &Value) -> (BTreeMap<u64, Value>, Vec<u64>) {
    let mut receivers: Vec<(u64, String)> = map["partitions"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, p)| p["moving"]["to"]["node"].as_u64())
        .filter_map(|n| Some((n, map["nodes"][n.to_string()]["addr"].as_str()?.to_owned())))
        .collect();
    receivers.sort();
    receivers.dedup();
    let mut out = BTreeMap::new();
    let mut silent = Vec::new();
    for (n, answer) in ask_all(c, s, &receivers, "/admin/cluster/moves").await {
        match answer {
            Ok(v) => {
                for m in v["moves"].as_array().into_iter().flatten() {
                    if let Some(p) = m["partition"].as_u64() {
                        out.insert(p, m.clone());
                    }
                }
            }
            Err(_) => silent.push(n),
        }
    }
    (out, silent)
}

/// A copy's progress in words: "copied 12.0 MiB of about 40.0 MiB at 5.1 MB/s".
fn copy_text(m: &Value) -> String {
    let copied = m["copied_bytes"].as_u64().unwrap_or(0);
    let source = m["source_bytes"].as_u64().unwrap_or(0);
    let rate = m["bytes_per_sec"].as_u64().unwrap_or(0);
    let of = if source > 0 { format!(" of about {}", page::bytes(source)) } else { String::new() };
    format!("copied {}{of} at {}", page::bytes(copied), mb_s(rate))
}

fn mb_s(bytes_per_sec: u64) -> String {
    format!("{:.1} MB/s", bytes_per_sec as f64 / 1e6)
}

async fn overview(State(c): S, headers: HeaderMap) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let st = match c.client(&s).json(http::Method::GET, "/admin/cluster/status").await {
        Ok(v) => v,
        Err(e) => return failed(&s, "Reading the cluster's status", &e),
    };
    let map = &st["map"];
    let mut body = format!(
        "<h1>Cluster</h1><p>Map epoch {}; this page is node {}'s view. <a id=\"striped\" href=\"/ui/striped\">Striped blobs</a> · \
<a id=\"transactions\" href=\"/ui/transactions\">Transactions</a></p>",
        map["epoch"], st["node"]
    );
    // The metadata group.
    let meta = if st["meta"].is_null() { &st["learner"] } else { &st["meta"] };
    body.push_str("<h2>Metadata group</h2><table><tbody>");
    body.push_str(&format!("<tr><th scope=\"row\">Leader</th><td id=\"meta-leader\">{}</td></tr>", esc(&meta["leader"].to_string())));
    body.push_str(&format!("<tr><th scope=\"row\">Term</th><td>{}</td></tr>", esc(&meta["term"].to_string())));
    let members: Vec<String> = meta["members"].as_object().into_iter().flatten().map(|(id, a)| format!("{id} ({})", a.as_str().unwrap_or(""))).collect();
    body.push_str(&format!("<tr><th scope=\"row\">Members</th><td>{}</td></tr></tbody></table>", esc(&members.join(", "))));

    // Rebalancing and moves: the page refreshes itself while they last.
    let (copying, silent) =
        if map["partitions"].as_object().into_iter().flatten().any(|(_, p)| !p["moving"].is_null()) { copies(&c, &s, map).await } else { Default::default() };
    let mut moving: Vec<String> = Vec::new();
    let mut by_state: BTreeMap<String, usize> = BTreeMap::new();
    let mut replicas: BTreeMap<u64, usize> = BTreeMap::new();
    for (id, p) in map["partitions"].as_object().into_iter().flatten() {
        *by_state.entry(state_text(&p["state"])).or_default() += 1;
        for r in p["replicas"].as_array().into_iter().flatten() {
            *replicas.entry(loc(r).0).or_default() += 1;
        }
        if !p["moving"].is_null() {
            let (f, t) = (loc(&p["moving"]["from"]), loc(&p["moving"]["to"]));
            let copy = id.parse::<u64>().ok().and_then(|p| copying.get(&p)).map_or(String::new(), |m| format!("; {}", copy_text(m)));
            moving.push(format!("partition {id}: node {}:{} → node {}:{} ({}{copy})", f.0, f.1, t.0, t.1, state_text(&p["moving"]["phase"])));
        }
    }
    let removing: Vec<u64> =
        map["nodes"].as_object().into_iter().flatten().filter(|(_, n)| n["removing"].as_bool() == Some(true)).filter_map(|(id, _)| id.parse().ok()).collect();
    let busy = !moving.is_empty() || !map["rebalance"].is_null() || !removing.is_empty();
    body.push_str("<h2>Rebalancing</h2>");
    match plan_progress(map) {
        Some((done, total)) => body.push_str(&format!(
            "<p id=\"rebalance-state\">Rebalancing: {done} of {total} moves done, {} left.</p><progress id=\"rebalance-progress\" max=\"{total}\" value=\"{done}\"></progress>",
            total - done
        )),
        None => body.push_str("<p id=\"rebalance-state\">No rebalancing under way.</p>"),
    }
    for n in &removing {
        body.push_str(&format!("<p class=\"removing\">Node {n} is being removed: {} replicas left to move off it.</p>", replicas.get(n).copied().unwrap_or(0)));
    }
    body.push_str(&format!("<p id=\"moves-under-way\">Moves under way: {}.</p>", moving.len()));
    if !moving.is_empty() {
        // The rate of the copies still filling; a draining move copied
        // what it had to.
        let filling = |p: &u64| map["partitions"][p.to_string()]["moving"]["phase"] == "Filling";
        let rate: u64 = copying.iter().filter(|(p, _)| filling(p)).filter_map(|(_, m)| m["bytes_per_sec"].as_u64()).sum();
        let copied: u64 = copying.values().filter_map(|m| m["copied_bytes"].as_u64()).sum();
        body.push_str(&format!("<p id=\"move-rate\">Copying at {} in all; {} copied by the moves under way.</p>", mb_s(rate), page::bytes(copied)));
        if !silent.is_empty() {
            let names: Vec<String> = silent.iter().map(u64::to_string).collect();
            body.push_str(&format!("<p class=\"attention\">No answer from node {} about its copies.</p>", names.join(", ")));
        }
    }
    if !moving.is_empty() {
        body.push_str("<ul id=\"moves\">");
        for m in &moving {
            body.push_str(&format!("<li>{}</li>", esc(m)));
        }
        body.push_str("</ul>");
    }
    if s.admin {
        let action = if map["rebalance"].is_null() { ("rebalance", "Start a rebalancing") } else { ("cancel-rebalance", "Cancel the rebalancing") };
        body.push_str(&format!(
            "<form method=\"post\" action=\"/ui/cluster/confirm\">{}<input type=\"hidden\" name=\"action\" value=\"{}\"><button id=\"{}\">{}…</button></form>",
            page::csrf(&s),
            action.0,
            action.0,
            action.1
        ));
    }

    // Nodes and their disks.
    body.push_str(
        "<h2>Nodes</h2><table id=\"nodes\"><thead><tr><th scope=\"col\">Node</th><th scope=\"col\">Address</th><th scope=\"col\">Zone / rack</th>\
<th scope=\"col\">State</th><th scope=\"col\">Disks</th><th scope=\"col\">Replicas</th><th scope=\"col\">Actions</th></tr></thead><tbody>",
    );
    for (id, n) in map["nodes"].as_object().into_iter().flatten() {
        let nid: u64 = id.parse().unwrap_or(u64::MAX);
        let mut state = state_text(&n["state"]);
        if n["removing"].as_bool() == Some(true) {
            state.push_str(", being removed");
        }
        let disks: Vec<String> = n["disks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| format!("{} {} ({})", d["path"].as_str().unwrap_or(""), page::bytes(d["capacity_bytes"].as_u64().unwrap_or(0)), state_text(&d["state"])))
            .collect();
        let actions = if s.admin && n["removing"].as_bool() != Some(true) {
            format!(
                "<form method=\"post\" action=\"/ui/cluster/confirm\">{}<input type=\"hidden\" name=\"action\" value=\"remove-node\">\
<input type=\"hidden\" name=\"node\" value=\"{nid}\"><button class=\"remove-node\">Remove…</button></form>\
<form method=\"post\" action=\"/ui/cluster/confirm\">{}<input type=\"hidden\" name=\"action\" value=\"mark-down\">\
<input type=\"hidden\" name=\"node\" value=\"{nid}\"><button class=\"mark-down\">Mark down…</button></form>",
                page::csrf(&s),
                page::csrf(&s)
            )
        } else {
            String::new()
        };
        body.push_str(&format!(
            "<tr data-node=\"{nid}\"><td><a class=\"node\" href=\"/ui/cluster/nodes/{nid}\">{nid}</a></td><td>{}</td><td>{} / {}</td><td class=\"state\">{}</td><td>{}</td><td class=\"replicas\">{}</td><td>{actions}</td></tr>",
            esc(n["addr"].as_str().unwrap_or("")),
            esc(n["zone"].as_str().unwrap_or("")),
            esc(n["rack"].as_str().unwrap_or("")),
            esc(&state),
            esc(&disks.join("; ")),
            replicas.get(&nid).copied().unwrap_or(0)
        ));
    }
    body.push_str("</tbody></table>");

    // Partitions by state, and the degraded ones.
    body.push_str("<h2>Partitions</h2><table><tbody>");
    for (state, n) in &by_state {
        body.push_str(&format!(
            "<tr><th scope=\"row\"><a href=\"/ui/cluster/partitions?state={}\">{}</a></th><td>{n}</td></tr>",
            crate::s3::enc(state, false),
            esc(state)
        ));
    }
    body.push_str("</tbody></table>");
    let degraded = st["degraded"].as_array().map_or(0, Vec::len);
    body.push_str(&format!(
        "<p id=\"degraded\">Degraded partitions: <a href=\"/ui/cluster/partitions?state=degraded\">{degraded}</a>. \
<a id=\"all-partitions\" href=\"/ui/cluster/partitions\">Every partition with its replicas</a>.</p>"
    ));
    page::page_refreshing(&s, "Cluster", &body, busy.then_some(2)).into_response()
}

/// One node: its disks with the replicas each holds and their space, the
/// partitions it holds and how they stand, what the failure detector of
/// the node answering says of it.
async fn node(State(c): S, headers: HeaderMap, Path(id): Path<u64>) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let st = match c.client(&s).json(http::Method::GET, "/admin/cluster/status").await {
        Ok(v) => v,
        Err(e) => return failed(&s, "Reading the cluster's status", &e),
    };
    let map = &st["map"];
    let n = &map["nodes"][id.to_string()];
    if n.is_null() {
        return (StatusCode::NOT_FOUND, page::message(&s, "No such node", &format!("node {id} is not in the cluster (removed, or never added)")))
            .into_response();
    }
    let mut state = state_text(&n["state"]);
    if n["removing"].as_bool() == Some(true) {
        state.push_str(", being removed");
    }
    let health = st["failure_detector"].as_array().into_iter().flatten().find(|d| d["node"] == id).and_then(|d| d["health"].as_str()).unwrap_or("—");
    let mut body = format!(
        "<h1>Node {id}</h1><p><a href=\"/ui/cluster\">Cluster</a></p><table><tbody>\
<tr><th scope=\"row\">Address</th><td>{}</td></tr><tr><th scope=\"row\">Zone / rack</th><td>{} / {}</td></tr>\
<tr><th scope=\"row\">State in the map</th><td id=\"node-state\">{}</td></tr><tr><th scope=\"row\">This node's failure detector</th><td>{}</td></tr></tbody></table>",
        esc(n["addr"].as_str().unwrap_or("")),
        esc(n["zone"].as_str().unwrap_or("")),
        esc(n["rack"].as_str().unwrap_or("")),
        esc(&state),
        esc(health)
    );
    let parts: Vec<(&String, &Value)> = map["partitions"].as_object().into_iter().flatten().collect();
    let receiving = parts.iter().any(|(_, p)| p["moving"]["to"]["node"].as_u64() == Some(id));
    let (copying, _) = if receiving { copies(&c, &s, map).await } else { Default::default() };
    let disk_form = |action: &str, disk: usize, label: &str| {
        format!(
            "<form method=\"post\" action=\"/ui/cluster/confirm\">{}<input type=\"hidden\" name=\"action\" value=\"{action}\">\
<input type=\"hidden\" name=\"node\" value=\"{id}\"><input type=\"hidden\" name=\"disk\" value=\"{disk}\"><button class=\"{action}\">{label}…</button></form>",
            page::csrf(&s)
        )
    };
    body.push_str(
        "<h2>Disks</h2><table id=\"disks\"><thead><tr><th scope=\"col\">Disk</th><th scope=\"col\">Path</th><th scope=\"col\">State</th>\
<th scope=\"col\">Capacity</th><th scope=\"col\">Allocated to replicas</th><th scope=\"col\">Replicas</th><th scope=\"col\">Actions</th></tr></thead><tbody>",
    );
    for (i, d) in n["disks"].as_array().into_iter().flatten().enumerate() {
        let on: Vec<&Value> =
            parts.iter().filter(|(_, p)| p["replicas"].as_array().into_iter().flatten().any(|r| loc(r) == (id, i as u64))).map(|(_, p)| *p).collect();
        let allocated: u64 = on.iter().filter_map(|p| p["capacity_bytes"].as_u64()).sum();
        let dstate = state_text(&d["state"]);
        let mut actions = String::new();
        if s.admin && !matches!(dstate.as_str(), "Removing" | "Removed") {
            if dstate == "Up" {
                actions.push_str(&disk_form("mark-disk-down", i, "Mark down"));
            } else {
                actions.push_str(&disk_form("mark-disk-up", i, "Mark up"));
            }
            actions.push_str(&disk_form("remove-disk", i, "Remove"));
        }
        body.push_str(&format!(
            "<tr data-disk=\"{i}\"><td>{i}</td><td>{}</td><td class=\"state\">{}</td><td>{}</td><td>{}</td><td class=\"replicas\">{}</td><td>{actions}</td></tr>",
            esc(d["path"].as_str().unwrap_or("")),
            esc(&dstate),
            page::bytes(d["capacity_bytes"].as_u64().unwrap_or(0)),
            page::bytes(allocated),
            on.len()
        ));
    }
    body.push_str(
        "</tbody></table><h2>Partitions</h2><table id=\"node-partitions\"><thead><tr><th scope=\"col\">Partition</th><th scope=\"col\">State</th>\
<th scope=\"col\">Replicas</th><th scope=\"col\">Moving</th></tr></thead><tbody>",
    );
    for (pid, p) in &parts {
        let reps: Vec<(u64, u64)> = p["replicas"].as_array().into_iter().flatten().map(loc).collect();
        let moving_here = !p["moving"].is_null() && (loc(&p["moving"]["from"]).0 == id || loc(&p["moving"]["to"]).0 == id);
        if !reps.iter().any(|r| r.0 == id) && !moving_here {
            continue;
        }
        let moving = if p["moving"].is_null() {
            String::new()
        } else {
            let (f, t) = (loc(&p["moving"]["from"]), loc(&p["moving"]["to"]));
            let copy = pid.parse::<u64>().ok().and_then(|p| copying.get(&p)).map_or(String::new(), |m| format!("; {}", copy_text(m)));
            format!("node {}:{} → node {}:{} ({}{copy})", f.0, f.1, t.0, t.1, state_text(&p["moving"]["phase"]))
        };
        let reps: Vec<String> = reps.iter().map(|(n, d)| format!("{n}:{d}")).collect();
        body.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(pid),
            esc(&state_text(&p["state"])),
            esc(&reps.join(", ")),
            esc(&moving)
        ));
    }
    body.push_str("</tbody></table>");
    page::page_refreshing(&s, &format!("Node {id}"), &body, receiving.then_some(2)).into_response()
}

/// Partitions a page of the partitions list shows.
const PARTITIONS_PAGE: usize = 200;

#[derive(serde::Deserialize, Default)]
struct PartitionsQuery {
    /// A state ("ReadWrite", ...) or "degraded"; empty: all.
    #[serde(default)]
    state: String,
    /// The first partition of the page.
    #[serde(default)]
    from: u64,
}

/// The page of `rows` (sorted by id) from id `from`, `size` long, and the
/// id the next page starts at.
pub(crate) fn page_from<T>(rows: &[(u64, T)], from: u64, size: usize) -> (&[(u64, T)], Option<u64>) {
    let start = rows.partition_point(|(id, _)| *id < from);
    let end = (start + size).min(rows.len());
    (&rows[start..end], rows.get(end).map(|(id, _)| *id))
}

/// Every partition (of a state, or degraded) with its replicas, each
/// replica's node and disk state, and its move: 200 a page.
async fn partitions(State(c): S, headers: HeaderMap, axum::extract::Query(q): axum::extract::Query<PartitionsQuery>) -> Response {
    let s = tryr!(signed_in(&c, &headers));
    let st = match c.client(&s).json(http::Method::GET, "/admin/cluster/status").await {
        Ok(v) => v,
        Err(e) => return failed(&s, "Reading the cluster's status", &e),
    };
    let map = &st["map"];
    let degraded: std::collections::BTreeSet<u64> = st["degraded"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
    let mut rows: Vec<(u64, &Value)> = map["partitions"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(id, p)| Some((id.parse::<u64>().ok()?, p)))
        .filter(|(id, p)| match q.state.as_str() {
            "" => true,
            "degraded" => degraded.contains(id),
            other => state_text(&p["state"]) == other,
        })
        .collect();
    rows.sort_by_key(|(id, _)| *id);
    let total = rows.len();
    let (shown, next) = page_from(&rows, q.from, PARTITIONS_PAGE);
    let which = if q.state.is_empty() { "All partitions".to_owned() } else { format!("Partitions: {}", q.state) };
    let mut body = format!("<h1>{}</h1><p><a href=\"/ui/cluster\">Cluster</a></p><p id=\"partition-count\">{total} partitions.</p>", esc(&which));
    body.push_str(
        "<table id=\"partitions\"><thead><tr><th scope=\"col\">Partition</th><th scope=\"col\">Kind</th><th scope=\"col\">State</th>\
<th scope=\"col\">Capacity</th><th scope=\"col\">Replicas (node:disk, state)</th><th scope=\"col\">Moving</th></tr></thead><tbody>",
    );
    for (id, p) in shown {
        let reps: Vec<String> = p["replicas"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let (n, d) = loc(r);
                let node = &map["nodes"][n.to_string()];
                let disk = state_text(&node["disks"][d as usize]["state"]);
                format!("{n}:{d} ({}, disk {})", state_text(&node["state"]), if disk.is_empty() || disk == "null" { "?".to_owned() } else { disk })
            })
            .collect();
        let moving = if p["moving"].is_null() {
            String::new()
        } else {
            let (f, t) = (loc(&p["moving"]["from"]), loc(&p["moving"]["to"]));
            format!("{}:{} → {}:{} ({})", f.0, f.1, t.0, t.1, state_text(&p["moving"]["phase"]))
        };
        let flag = if degraded.contains(id) { " (degraded)" } else { "" };
        body.push_str(&format!(
            "<tr data-partition=\"{id}\"><td>{id}</td><td>{}</td><td>{}{flag}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&state_text(&p["kind"])),
            esc(&state_text(&p["state"])),
            page::bytes(p["capacity_bytes"].as_u64().unwrap_or(0)),
            esc(&reps.join("; ")),
            esc(&moving)
        ));
    }
    body.push_str("</tbody></table>");
    if let Some(next) = next {
        body.push_str(&format!(
            "<p><a id=\"next-partitions\" href=\"/ui/cluster/partitions?state={}&amp;from={next}\">Next {PARTITIONS_PAGE}</a></p>",
            crate::s3::enc(&q.state, false)
        ));
    }
    page::page(&s, "Partitions", &body).into_response()
}

#[derive(serde::Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
    action: String,
    #[serde(default)]
    node: Option<u64>,
    #[serde(default)]
    disk: Option<u32>,
}

/// What an action will do, in words, and the command that does it.
fn describe(a: &ActionForm, map: &Value, now_ms: u64) -> Result<(String, String), String> {
    let node = |a: &ActionForm| a.node.ok_or_else(|| "which node?".to_owned());
    match a.action.as_str() {
        "remove-node" => {
            let n = node(a)?;
            if map["nodes"][n.to_string()].is_null() {
                return Err(format!("node {n} is not in the cluster"));
            }
            let held = map["partitions"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, p)| p["replicas"].as_array().into_iter().flatten().any(|r| r["node"] == n))
                .count();
            Ok((
                format!(
                    "Remove node {n}? Its {held} replicas are copied to other nodes, a few at a time; then it leaves the map. Its data stays on its disks."
                ),
                serde_json::json!({ "RemoveNode": { "node": n } }).to_string(),
            ))
        }
        "mark-down" => {
            let n = node(a)?;
            if map["nodes"][n.to_string()].is_null() {
                return Err(format!("node {n} is not in the cluster"));
            }
            Ok((
                format!("Mark node {n} down? Routers stop sending it requests until it heartbeats again."),
                serde_json::json!({ "SetNodeState": { "node": n, "state": { "Down": { "since_ms": now_ms } } } }).to_string(),
            ))
        }
        "mark-disk-down" | "mark-disk-up" | "remove-disk" => {
            let n = node(a)?;
            let d = a.disk.ok_or_else(|| "which disk?".to_owned())?;
            let disk = &map["nodes"][n.to_string()]["disks"][d as usize];
            if map["nodes"][n.to_string()].is_null() {
                return Err(format!("node {n} is not in the cluster"));
            }
            if disk.is_null() {
                return Err(format!("node {n} has no disk {d}"));
            }
            let held = map["partitions"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, p)| p["replicas"].as_array().into_iter().flatten().any(|r| loc(r) == (n, u64::from(d))))
                .count();
            Ok(match a.action.as_str() {
                "mark-disk-down" => (
                    format!(
                        "Mark disk {d} of node {n} down? Its {held} replicas stop serving (routers skip them) and it takes no new ones until it is marked up. They are not copied elsewhere: removing the disk does that."
                    ),
                    serde_json::json!({ "SetDiskState": { "node": n, "disk": d, "state": "Down" } }).to_string(),
                ),
                "mark-disk-up" => (
                    format!("Mark disk {d} of node {n} up? Its {held} replicas serve again once they have caught up."),
                    serde_json::json!({ "SetDiskState": { "node": n, "disk": d, "state": "Up" } }).to_string(),
                ),
                _ => (
                    format!(
                        "Remove disk {d} of node {n}? Its {held} replicas are copied to other disks, a few at a time; then it leaves the map. Its files stay."
                    ),
                    serde_json::json!({ "RemoveDisk": { "node": n, "disk": d } }).to_string(),
                ),
            })
        }
        "rebalance" => Ok(("Start a rebalancing? Replicas move to even out the disks, at most 2 at a time.".to_owned(), String::new())),
        "cancel-rebalance" => Ok(("Cancel the rebalancing? Moves under way finish; no new one starts.".to_owned(), "\"EndRebalance\"".to_owned())),
        other => Err(format!("{other:?} is not an action")),
    }
}

/// The confirmation step: says what the action will do; its form does it.
async fn confirm(State(c): S, headers: HeaderMap, Form(f): Form<ActionForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let st = match c.client(&s).json(http::Method::GET, "/admin/cluster/status").await {
        Ok(v) => v,
        Err(e) => return failed(&s, "Reading the cluster's status", &e),
    };
    let (text, _) = match describe(&f, &st["map"], c.clock.now_ms()) {
        Ok(d) => d,
        Err(e) => return (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &e)).into_response(),
    };
    let mut node = f.node.map_or(String::new(), |n| format!("<input type=\"hidden\" name=\"node\" value=\"{n}\">"));
    if let Some(d) = f.disk {
        node.push_str(&format!("<input type=\"hidden\" name=\"disk\" value=\"{d}\">"));
    }
    let body = format!(
        "<h1>Confirm</h1><p id=\"consequence\">{}</p><form method=\"post\" action=\"/ui/cluster/act\">{}<input type=\"hidden\" name=\"action\" value=\"{}\">{node}\
<button id=\"confirm\">Yes, do it</button> <a href=\"/ui/cluster\">No, go back</a></form>",
        esc(&text),
        page::csrf(&s),
        esc(&f.action)
    );
    page::page(&s, "Confirm", &body).into_response()
}

async fn act(State(c): S, headers: HeaderMap, Form(f): Form<ActionForm>) -> Response {
    let (_, s) = tryr!(checked(&c, &headers, &f.csrf));
    let client = c.client(&s);
    let st = match client.json(http::Method::GET, "/admin/cluster/status").await {
        Ok(v) => v,
        Err(e) => return failed(&s, "Reading the cluster's status", &e),
    };
    let command = match describe(&f, &st["map"], c.clock.now_ms()) {
        Ok((_, cmd)) => cmd,
        Err(e) => return (StatusCode::BAD_REQUEST, page::message(&s, "Not done", &e)).into_response(),
    };
    let (path, body) = if f.action == "rebalance" { ("/admin/cluster/rebalance", "{}".to_owned()) } else { ("/admin/cluster/command", command) };
    if let Err(r) = propose(&c, &s, path, body).await {
        return r;
    }
    match (f.disk, f.node) {
        // A disk's action came from its node's page: back there.
        (Some(_), Some(n)) => Redirect::to(&format!("/ui/cluster/nodes/{n}")).into_response(),
        _ => Redirect::to("/ui/cluster").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plans_progress_counts_moves_whose_partition_moved() {
        let map = serde_json::json!({
            "rebalance": { "moves": [
                { "partition": 1, "from": { "node": 1, "disk": 0 }, "to": { "node": 4, "disk": 0 } },
                { "partition": 2, "from": { "node": 2, "disk": 0 }, "to": { "node": 4, "disk": 0 } },
            ] },
            "partitions": {
                "1": { "replicas": [{ "node": 4, "disk": 0 }, { "node": 2, "disk": 0 }] },
                "2": { "replicas": [{ "node": 2, "disk": 0 }, { "node": 3, "disk": 0 }] },
            },
        });
        assert_eq!(plan_progress(&map), Some((1, 2)));
        assert_eq!(plan_progress(&serde_json::json!({ "rebalance": null })), None);
    }

    #[test]
    fn actions_on_a_node_that_is_gone_are_refused() {
        let map = serde_json::json!({ "nodes": { "1": {} }, "partitions": {} });
        let a = ActionForm { csrf: String::new(), action: "remove-node".into(), node: Some(9), disk: None };
        assert!(describe(&a, &map, 1).unwrap_err().contains("node 9 is not in the cluster"));
        let a = ActionForm { csrf: String::new(), action: "remove-node".into(), node: Some(1), disk: None };
        assert!(describe(&a, &map, 1).unwrap().1.contains("RemoveNode"));
        let a = ActionForm { csrf: String::new(), action: "explode".into(), node: None, disk: None };
        assert!(describe(&a, &map, 1).is_err());
    }

    #[test]
    fn disk_actions_name_the_disk_and_refuse_one_that_is_not_there() {
        let map = serde_json::json!({
            "nodes": { "1": { "disks": [{ "path": "/d0", "state": "Up" }] } },
            "partitions": { "5": { "replicas": [{ "node": 1, "disk": 0 }] } },
        });
        let form = |action: &str, node, disk| ActionForm { csrf: String::new(), action: action.into(), node, disk };
        let (text, cmd) = describe(&form("mark-disk-down", Some(1), Some(0)), &map, 1).unwrap();
        assert!(text.contains("Its 1 replicas"), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&cmd).unwrap(), serde_json::json!({ "SetDiskState": { "node": 1, "disk": 0, "state": "Down" } }));
        let (_, cmd) = describe(&form("remove-disk", Some(1), Some(0)), &map, 1).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&cmd).unwrap(), serde_json::json!({ "RemoveDisk": { "node": 1, "disk": 0 } }));
        assert!(describe(&form("remove-disk", Some(1), Some(3)), &map, 1).unwrap_err().contains("node 1 has no disk 3"));
        assert!(describe(&form("mark-disk-up", Some(2), Some(0)), &map, 1).unwrap_err().contains("node 2 is not in the cluster"));
        assert!(describe(&form("mark-disk-up", Some(1), None), &map, 1).unwrap_err().contains("which disk"));
    }

    #[test]
    fn partitions_page_by_id() {
        let rows: Vec<(u64, ())> = [1, 2, 5, 7, 9].into_iter().map(|id| (id, ())).collect();
        let ids = |p: &[(u64, ())]| p.iter().map(|r| r.0).collect::<Vec<_>>();
        let (first, next) = page_from(&rows, 0, 2);
        assert_eq!((ids(first), next), (vec![1, 2], Some(5)));
        let (second, next) = page_from(&rows, 5, 2);
        assert_eq!((ids(second), next), (vec![5, 7], Some(9)));
        let (last, next) = page_from(&rows, 9, 2);
        assert_eq!((ids(last), next), (vec![9], None));
        assert_eq!(page_from(&rows, 3, 10).0.len(), 3, "from an id between rows: the next row");
        assert!(page_from(&rows, 10, 2).0.is_empty());
    }

    #[test]
    fn a_copy_reads_as_bytes_and_mb_s() {
        let m = serde_json::json!({ "copied_bytes": 12u64 << 20, "source_bytes": 40u64 << 20, "bytes_per_sec": 5_100_000 });
        assert_eq!(copy_text(&m), "copied 12.0 MiB of about 40.0 MiB at 5.1 MB/s");
    }
}
