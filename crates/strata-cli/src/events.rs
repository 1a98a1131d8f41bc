//! `strata events`: change capture's targets and status (docs/events.md).

use crate::commands::Common;
use crate::identity::{print, send_json};
use anyhow::{Context, Result, bail};
use serde_json::json;

#[derive(clap::Subcommand, Debug)]
pub enum EventsCmd {
    /// Where capture stands: events made, in the outbox, dropped; per target delivered, pending, failures, alarm.
    Status(Common),
    /// Event targets: add, remove.
    #[command(subcommand)]
    Target(TargetCmd),
}

#[derive(clap::Subcommand, Debug)]
pub enum TargetCmd {
    /// Adds (or replaces) a target: a JSON-lines file, a signed webhook or a Kafka topic.
    Add(TargetAdd),
    /// Removes a target (refused while a bucket's notification configuration names it).
    Remove(TargetName),
}

#[derive(clap::Args, Debug)]
pub struct TargetAdd {
    #[command(flatten)]
    common: Common,
    /// Its name: 1 to 63 of a-z, 0-9, '-' and '_'; bucket notifications name it as arn:strata:sqs:::NAME.
    name: String,
    /// Append events as JSON lines to this file (an absolute path on the sending node).
    #[arg(long, group = "kind")]
    file: Option<String>,
    /// POST batches of events to this http:// URL, signed with --secret.
    #[arg(long, group = "kind")]
    webhook: Option<String>,
    /// The webhook's HMAC-SHA256 key (at least 16 characters).
    #[arg(long, env = "STRATA_WEBHOOK_SECRET", requires = "webhook")]
    secret: Option<String>,
    /// Produce to Kafka through these brokers (host:port, comma-separated).
    #[arg(long, group = "kind", requires = "topic")]
    kafka: Option<String>,
    /// The Kafka topic (created with 8 partitions if missing).
    #[arg(long, requires = "kafka")]
    topic: Option<String>,
    /// Send it every event (Ambry's operation capture), not only bucket notifications naming it.
    #[arg(long)]
    all: bool,
}

#[derive(clap::Args, Debug)]
pub struct TargetName {
    #[command(flatten)]
    common: Common,
    /// The target's name.
    name: String,
}

pub async fn events(cmd: EventsCmd) -> Result<()> {
    match cmd {
        EventsCmd::Status(c) => {
            let v = c.client()?.json(http::Method::GET, "/admin/events").await?;
            print(c.json, &v, render_status)
        }
        EventsCmd::Target(TargetCmd::Add(a)) => {
            let spec = match (&a.file, &a.webhook, &a.kafka) {
                (Some(path), None, None) => json!({ "kind": "file", "path": path }),
                (None, Some(url), None) => {
                    let Some(secret) = &a.secret else { bail!("a webhook needs --secret (or STRATA_WEBHOOK_SECRET)") };
                    json!({ "kind": "webhook", "url": url, "secret": secret })
                }
                (None, None, Some(brokers)) => json!({ "kind": "kafka", "brokers": brokers, "topic": a.topic.clone().unwrap_or_default() }),
                _ => bail!("name what the target is: --file PATH, --webhook URL --secret S, or --kafka BROKERS --topic T"),
            };
            let c = a.common.client()?;
            let v = send_json(&c, http::Method::PUT, &format!("/admin/events/targets/{}", a.name), json!({ "spec": spec, "all": a.all }))
                .await
                .context("adding the event target")?;
            print(a.common.json, &v, |v| {
                format!(
                    "event target {} is {}{}",
                    a.name,
                    v["target"].as_str().unwrap_or(""),
                    if a.all { ", taking every event" } else { "; bucket notifications name it as arn:strata:sqs:::NAME" }.replace("NAME", &a.name)
                )
            })
        }
        EventsCmd::Target(TargetCmd::Remove(a)) => {
            let c = a.common.client()?;
            c.send(http::Method::DELETE, &format!("/admin/events/targets/{}", a.name), &[], strata_client::full(bytes::Bytes::new()))
                .await
                .context("removing the event target")?;
            print(a.common.json, &json!({ "removed": a.name }), |_| format!("event target {} removed", a.name))
        }
    }
}

fn render_status(v: &serde_json::Value) -> String {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let mut out = format!(
        "events made {}, in the outbox {}, dropped {}; this node {}\n{:<20} {:<44} {:>5} {:>12} {:>10} {:>9} {:>8}  last error",
        n("produced"),
        n("outbox"),
        n("dropped"),
        if v["sending"].as_bool().unwrap_or(false) { "sends them" } else { "does not send (the metadata leader does)" },
        "target",
        "what",
        "all",
        "delivered to",
        "pending",
        "failures",
        "alarm"
    );
    for t in v["targets"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n{:<20} {:<44} {:>5} {:>12} {:>10} {:>9} {:>8}  {}",
            t["target"].as_str().unwrap_or(""),
            t["describe"].as_str().unwrap_or(""),
            t["all"].as_bool().unwrap_or(false),
            t["delivered_seq"].as_u64().unwrap_or(0),
            t["pending"].as_u64().unwrap_or(0),
            t["failures"].as_u64().unwrap_or(0),
            if t["alarm"].as_bool().unwrap_or(false) { "DOWN" } else { "ok" },
            t["last_error"].as_str().unwrap_or("-")
        ));
    }
    let blobs = v["blob_senders"].as_array().cloned().unwrap_or_default();
    if !blobs.is_empty() {
        let sum = |k: &str| blobs.iter().map(|b| b[k].as_u64().unwrap_or(0)).sum::<u64>();
        let failing = blobs.iter().filter(|b| !b["last_error"].is_null()).count();
        out.push_str(&format!(
            "\nnative blob events: {} senders (target/partition), delivered {}, pending {}, {failing} failing, {} lost behind a journal",
            blobs.len(),
            sum("delivered"),
            sum("pending"),
            v["blob_lost"].as_u64().unwrap_or(0)
        ));
    }
    out
}
