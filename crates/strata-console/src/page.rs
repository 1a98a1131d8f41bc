//! The pages, rendered on the server: every value that came from a user
//! or the node is escaped ([`esc`]).

use crate::session::Session;
use axum::response::Html;

/// The style sheet, inside the binary.
pub const CSS: &str = "\
*{box-sizing:border-box}body{margin:0;font:16px/1.5 system-ui,sans-serif;color:#1b1f24;background:#f6f7f9}\
header{display:flex;flex-wrap:wrap;gap:1rem;align-items:center;padding:.5rem 1rem;background:#1b2a41;color:#fff}\
header a{color:#fff}header form{margin-left:auto}main{max-width:70rem;margin:0 auto;padding:1rem}\
table{border-collapse:collapse;width:100%;background:#fff}th,td{text-align:left;padding:.4rem;border-bottom:1px solid #d0d5dd}\
label{display:block;margin:.5rem 0 .2rem}input{font:inherit;padding:.4rem;width:100%;max-width:28rem}\
button{font:inherit;padding:.4rem .9rem;cursor:pointer}a:focus,button:focus,input:focus{outline:3px solid #f0a500}\
.legend{list-style:none;padding:0;display:flex;gap:1.5rem;flex-wrap:wrap}figure{margin:0 0 1rem;background:#fff;padding:.5rem}\
.error{border-left:4px solid #b42318;background:#fef3f2;padding:.5rem}.ok{border-left:4px solid #067647;background:#ecfdf3;padding:.5rem}\
@media (max-width:40rem){header{flex-direction:column;align-items:flex-start}header form{margin-left:0}\
table{display:block;overflow-x:auto}main{padding:.5rem}}";

/// `s` escaped for HTML text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn doc(title: &str, header: &str, body: &str) -> Html<String> {
    doc_refreshing(title, header, body, None)
}

fn doc_refreshing(title: &str, header: &str, body: &str, refresh_secs: Option<u32>) -> Html<String> {
    let refresh = refresh_secs.map_or(String::new(), |s| format!("<meta http-equiv=\"refresh\" content=\"{s}\">"));
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">{refresh}\
<title>{} · Strata</title><link rel=\"stylesheet\" href=\"/ui/static/console.css\"></head><body>{header}<main>{body}</main></body></html>",
        esc(title)
    ))
}

fn nav(s: &Session) -> String {
    let who = if s.name.is_empty() { s.creds.access_key_id.clone() } else { format!("{} ({})", s.name, s.creds.access_key_id) };
    let role = if s.admin { "admin" } else { "key" };
    format!(
        "<header><strong>Strata</strong><nav><a href=\"/ui/overview\">Overview</a> · <a href=\"/ui/buckets\">Buckets</a> · <a href=\"/ui/kv\">Key-value stores</a>{}</nav>\
<span>Signed in as {} · {role}</span>\
<form method=\"post\" action=\"/ui/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button id=\"sign-out\">Sign out</button></form></header>",
        if s.admin { " · <a href=\"/ui/cluster\">Cluster</a> · <a href=\"/ui/keys\">Access keys</a>" } else { "" },
        esc(&who),
        esc(&s.csrf)
    )
}

/// A page with the header of a signed-in user.
pub fn page(s: &Session, title: &str, body: &str) -> Html<String> {
    doc(title, &nav(s), body)
}

/// [`page`], reloading itself every `refresh_secs` when given (a page
/// watching work under way).
pub fn page_refreshing(s: &Session, title: &str, body: &str, refresh_secs: Option<u32>) -> Html<String> {
    doc_refreshing(title, &nav(s), body, refresh_secs)
}

/// A hidden field with the session's CSRF token, for a form.
pub fn csrf(s: &Session) -> String {
    format!("<input type=\"hidden\" name=\"csrf\" value=\"{}\">", esc(&s.csrf))
}

/// A progress bar (a native `<progress>`, which screen readers announce)
/// with its figure beside it in words.
pub fn bar(id: &str, value: u64, max: u64) -> String {
    let pct = if max == 0 { 100.0 } else { value.min(max) as f64 * 100.0 / max as f64 };
    format!("<progress id=\"{}\" max=\"{}\" value=\"{}\"></progress> <span>{pct:.0}%</span>", esc(id), max.max(1), value.min(max.max(1)))
}

/// A byte count for people.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

/// The sign-in page, with `message` (why the last try failed) if any.
pub fn login(message: &str) -> Html<String> {
    let msg = if message.is_empty() { String::new() } else { format!("<p class=\"error\" role=\"alert\">{}</p>", esc(message)) };
    doc(
        "Sign in",
        "<header><strong>Strata</strong></header>",
        &format!(
            "<h1>Sign in</h1>{msg}<form method=\"post\" action=\"/ui/login\">\
<label for=\"access_key_id\">Access key id</label><input id=\"access_key_id\" name=\"access_key_id\" autocomplete=\"username\" required>\
<label for=\"secret_access_key\">Secret access key</label><input id=\"secret_access_key\" name=\"secret_access_key\" type=\"password\" autocomplete=\"current-password\" required>\
<p><button id=\"sign-in\" type=\"submit\">Sign in</button></p></form>"
        ),
    )
}

/// A page that only says something (a refusal, say).
pub fn message(s: &Session, title: &str, text: &str) -> Html<String> {
    doc(title, &nav(s), &format!("<h1>{}</h1><p class=\"error\" role=\"alert\">{}</p>", esc(title), esc(text)))
}

/// A line chart as inline SVG (no script, no library): one polyline per
/// series over the same x steps, each told apart by its dash pattern and
/// named in the legend as well as by colour; gaps where a value is none.
pub fn chart(id: &str, title: &str, unit: &str, series: &[(&str, &str, Vec<Option<f64>>)]) -> String {
    let (w, h, left, bottom) = (600.0f64, 160.0f64, 48.0f64, 20.0f64);
    let n = series.iter().map(|s| s.2.len()).max().unwrap_or(0).max(2);
    let max = series.iter().flat_map(|s| s.2.iter().flatten()).fold(0.0f64, |a, &b| a.max(b));
    let top = if max <= 0.0 { 1.0 } else { max * 1.1 };
    let x = |i: usize| left + (w - left - 4.0) * i as f64 / (n - 1) as f64;
    let y = |v: f64| (h - bottom) - (h - bottom - 6.0) * (v / top);
    let mut svg = format!(
        "<figure id=\"{}\"><figcaption>{}</figcaption><svg viewBox=\"0 0 {w} {h}\" width=\"100%\" role=\"img\" aria-label=\"{}\">\
<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#667\"/><line x1=\"{left}\" y1=\"6\" x2=\"{left}\" y2=\"{}\" stroke=\"#667\"/>\
<text x=\"{}\" y=\"14\" font-size=\"11\" text-anchor=\"end\">{:.1}</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">0</text>\
<text x=\"{left}\" y=\"{}\" font-size=\"11\">10 min ago</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">now</text>",
        esc(id),
        esc(title),
        esc(title),
        h - bottom,
        w - 4.0,
        h - bottom,
        h - bottom,
        left - 4.0,
        top,
        left - 4.0,
        h - bottom,
        h - 4.0,
        w - 4.0,
        h - 4.0
    );
    let colours = ["#1d4ed8", "#b45309", "#047857"];
    let mut legend = String::new();
    for (k, (label, dash, values)) in series.iter().enumerate() {
        let colour = colours[k % colours.len()];
        let mut path = String::new();
        let mut pen = false;
        for (i, v) in values.iter().enumerate() {
            match v {
                Some(v) => {
                    path.push_str(&format!("{}{:.1},{:.1} ", if pen { "L" } else { "M" }, x(i), y(*v)));
                    pen = true;
                }
                None => pen = false,
            }
        }
        svg.push_str(&format!("<path d=\"{path}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>"));
        let last = values.iter().rev().flatten().next().map_or("—".to_owned(), |v| format!("{v:.1} {unit}"));
        let peak = values.iter().flatten().fold(None::<f64>, |a, &v| Some(a.map_or(v, |a| a.max(v))));
        let peak = peak.map_or("—".to_owned(), |v| format!("{v:.1} {unit}"));
        legend.push_str(&format!(
            "<li><svg width=\"28\" height=\"8\" aria-hidden=\"true\"><line x1=\"0\" y1=\"4\" x2=\"28\" y2=\"4\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/></svg> {} (now {}, peak {})</li>",
            esc(label),
            esc(&last),
            esc(&peak)
        ));
    }
    svg.push_str(&format!("</svg><ul class=\"legend\">{legend}</ul></figure>"));
    svg
}

/// The value of the unlabelled metric `name` in Prometheus text, if any.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
}

/// What an admin's overview shows besides the health: the last ten
/// minutes' windows, the partitions' space, the cluster's status.
#[derive(Default)]
pub struct Figures {
    /// `GET /admin/metrics/recent`.
    pub recent: Option<serde_json::Value>,
    /// `GET /admin/partitions`.
    pub partitions: Option<serde_json::Value>,
    /// `GET /admin/cluster/status`, on a cluster node.
    pub cluster: Option<serde_json::Value>,
}

/// What needs an operator's attention, in words.
pub fn attention(health: Option<&serde_json::Value>, f: &Figures) -> Vec<String> {
    let mut out = Vec::new();
    match health {
        None => out.push("The node did not answer its health check.".to_owned()),
        Some(h) if h["status"] != "ok" => out.push(format!("The node is {}: no partition takes writes.", h["status"].as_str().unwrap_or("?"))),
        _ => {}
    }
    for p in f.partitions.as_ref().and_then(|p| p.as_array()).into_iter().flatten() {
        if let Some(reason) = p["read_only_reason"].as_str() {
            out.push(format!("Partition {} is read-only: {reason}.", p["partition"]));
        }
    }
    if let Some(c) = &f.cluster {
        let degraded = c["degraded"].as_array().map_or(0, Vec::len);
        if degraded > 0 {
            out.push(format!("{degraded} partitions are degraded (a replica is out of service)."));
        }
        for (id, n) in c["map"]["nodes"].as_object().into_iter().flatten() {
            if n["state"].is_object() {
                out.push(format!("Node {id} is down."));
            }
        }
    }
    out
}

/// The overview: the node's health and, for an admin, its main figures.
pub fn overview(s: &Session, health: Option<&serde_json::Value>, metrics: Option<&str>, f: &Figures) -> Html<String> {
    let mut body = String::from("<h1>Overview</h1>");
    if s.admin {
        let issues = attention(health, f);
        body.push_str("<h2>Needs attention</h2>");
        if issues.is_empty() {
            body.push_str("<p id=\"attention\" class=\"ok\">Nothing: every partition takes writes and every node is up.</p>");
        } else {
            body.push_str("<ul id=\"attention\" class=\"error\">");
            for i in &issues {
                body.push_str(&format!("<li>{}</li>", esc(i)));
            }
            body.push_str("</ul>");
        }
    }
    if let Some(r) = &f.recent {
        let rows = r["windows"].as_array().cloned().unwrap_or_default();
        let col = |k: &str| rows.iter().map(|w| w[k].as_f64()).collect::<Vec<_>>();
        body.push_str("<h2>The last ten minutes</h2>");
        body.push_str(&chart(
            "chart-rate",
            "Requests per second (10-second windows)",
            "/s",
            &[("PUT", "0", col("puts_per_s")), ("GET", "6 3", col("gets_per_s"))],
        ));
        body.push_str(&chart("chart-latency", "p99 latency, ms", "ms", &[("PUT", "0", col("put_p99_ms")), ("GET", "6 3", col("get_p99_ms"))]));
    }
    if let Some(parts) = f.partitions.as_ref().and_then(|p| p.as_array()) {
        let used: u64 = parts.iter().filter_map(|p| p["used_bytes"].as_u64()).sum();
        let cap: u64 = parts.iter().filter_map(|p| p["capacity_bytes"].as_u64()).sum();
        let pct = if cap > 0 { used as f64 * 100.0 / cap as f64 } else { 0.0 };
        body.push_str(&format!(
            "<h2>Capacity</h2><p id=\"capacity\">{} used of {} ({pct:.1}%), {} free, in {} partitions on this node.</p>\
<progress max=\"100\" value=\"{pct:.0}\" aria-label=\"capacity used\"></progress>",
            bytes(used),
            bytes(cap),
            bytes(cap.saturating_sub(used)),
            parts.len()
        ));
    }
    if let Some(c) = &f.cluster {
        let lag = c["replication"].as_array().map_or(0, Vec::len);
        body.push_str(&format!(
            "<h2>Replication</h2><p>Map epoch {}; {} degraded partitions; {lag} replication peers tracked.</p><pre class=\"lag\">{}</pre>",
            c["map"]["epoch"],
            c["degraded"].as_array().map_or(0, Vec::len),
            esc(&serde_json::to_string_pretty(&c["replication"]).unwrap_or_default())
        ));
    }
    match health {
        Some(h) => {
            body.push_str("<h2>Health</h2><table><tbody>");
            if let Some(o) = h.as_object() {
                for (k, v) in o {
                    let v = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
                    body.push_str(&format!("<tr><th scope=\"row\">{}</th><td>{}</td></tr>", esc(k), esc(&v)));
                }
            }
            body.push_str("</tbody></table>");
        }
        None => body.push_str("<p class=\"error\" role=\"alert\">The node did not answer its health check.</p>"),
    }
    if let Some(m) = metrics {
        body.push_str("<h2>This node</h2><table><tbody>");
        for (label, name) in [
            ("Cluster nodes down", "strata_cluster_nodes_down"),
            ("Change capture: events in the outbox", "strata_events_outbox"),
            ("Console sessions", "strata_console_sessions"),
        ] {
            let v = metric(m, name).map_or("—".to_owned(), |v| v.to_string());
            body.push_str(&format!("<tr><th scope=\"row\">{}</th><td>{}</td></tr>", esc(label), esc(&v)));
        }
        body.push_str("</tbody></table>");
    }
    doc("Overview", &nav(s), &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_values_is_text() {
        assert_eq!(esc("<script>\"x\"&'y'</script>"), "&lt;script&gt;&quot;x&quot;&amp;&#39;y&#39;&lt;/script&gt;");
        let page = login("<b>bad</b>").0;
        assert!(page.contains("&lt;b&gt;bad&lt;/b&gt;") && !page.contains("<b>bad"), "{page}");
    }

    #[test]
    fn metrics_are_read_by_exact_name() {
        let text = "strata_cluster_nodes_down 2\nstrata_cluster_nodes_down_total 9\n";
        assert_eq!(metric(text, "strata_cluster_nodes_down"), Some(2.0));
        assert_eq!(metric(text, "strata_missing"), None);
    }
}
