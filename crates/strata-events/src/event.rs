//! The event schema, version 1 (docs/events.md).
//!
//! Field names and meanings are stable within a version: a consumer reads
//! `v` first and may ignore fields it does not know. A change that removes
//! or renames a field, or changes a meaning, bumps [`SCHEMA_VERSION`].

use serde::{Deserialize, Serialize};

/// The schema version every event carries as `v`.
pub const SCHEMA_VERSION: u32 = 1;

/// One state change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Schema version ([`SCHEMA_VERSION`]).
    pub v: u32,
    /// Unique and stable across retries: `<node>/<source>/<seq>`; a
    /// consumer deduplicates by it.
    pub id: String,
    /// The node whose log holds the change.
    pub node: String,
    /// The log on that node (`names`, `partition-7`, ...).
    pub source: String,
    /// Position in that log: strictly increasing, so events of one source
    /// are delivered in this order.
    pub seq: u64,
    /// When the change was made, ms since the Unix epoch.
    pub time_ms: u64,
    /// What happened: S3's event names for S3 changes
    /// (`s3:ObjectCreated:Put`, `s3:ObjectRemoved:DeleteMarkerCreated`,
    /// ...), `strata:` names for the rest (`strata:BlobPut`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// The access key (or `admin`, `anonymous`) that caused it, if known.
    pub who: Option<String>,
    /// What it happened to.
    pub subject: Subject,
}

/// What an event happened to; fields that do not apply are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// S3 bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// S3 object key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// S3 version id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// Native container, `ACCOUNT/CONTAINER`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Blob id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
    /// Size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// S3 ETag (no quotes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Read-only store name, node id, or another subject a kind names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Event {
    /// An event of `kind` at `seq` in `node`'s `source`, made at `time_ms`.
    pub fn new(node: &str, source: &str, seq: u64, time_ms: u64, kind: &str, who: Option<String>, subject: Subject) -> Self {
        Self {
            v: SCHEMA_VERSION,
            id: format!("{node}/{source}/{seq}"),
            node: node.into(),
            source: source.into(),
            seq,
            time_ms,
            kind: kind.into(),
            who,
            subject,
        }
    }

    /// The key events are ordered by at a partitioned target (a Kafka
    /// partition key): the bucket or container, else the source.
    pub fn order_key(&self) -> &str {
        self.subject.bucket.as_deref().or(self.subject.container.as_deref()).unwrap_or(&self.source)
    }

    /// One line of JSON.
    pub fn to_json(&self) -> String {
        // An Event is strings and numbers: encoding it cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_is_what_docs_events_md_says() {
        let subject = Subject { bucket: Some("photos".into()), key: Some("a.jpg".into()), size: Some(3), etag: Some("abc".into()), ..Default::default() };
        let e = Event::new("n1", "names", 42, 1_700_000_000_000, "s3:ObjectCreated:Put", Some("AK1".into()), subject);
        assert_eq!(
            e.to_json(),
            r#"{"v":1,"id":"n1/names/42","node":"n1","source":"names","seq":42,"time_ms":1700000000000,"type":"s3:ObjectCreated:Put","who":"AK1","subject":{"bucket":"photos","key":"a.jpg","size":3,"etag":"abc"}}"#
        );
        let back: Event = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(back, e);
        assert_eq!(e.order_key(), "photos");
        // A consumer of version 1 reads events with fields it does not know.
        let newer = r#"{"v":1,"id":"n/s/1","node":"n","source":"s","seq":1,"time_ms":0,"type":"strata:BlobPut","who":null,"subject":{"blob":"b","colour":"red"},"extra":true}"#;
        assert_eq!(serde_json::from_str::<Event>(newer).unwrap().order_key(), "s");
    }
}
