//! What an operator configures: a target's spec (stored with the names as
//! JSON, so every metadata member knows the targets), and S3 bucket
//! notification rules (which events of a bucket go to which target).

use crate::{Event, EventError, FileTarget, Kafka, Target, Webhook};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use strata_types::Clock;

/// A target, as configured (`strata events target add`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum TargetSpec {
    /// A local JSON-lines file on the sending node.
    File {
        /// Its path.
        path: String,
    },
    /// Signed HTTP POSTs.
    Webhook {
        /// `http://` URL.
        url: String,
        /// The HMAC-SHA256 key signatures are made with.
        secret: String,
    },
    /// A Kafka topic.
    Kafka {
        /// `host:port`, comma-separated.
        brokers: String,
        /// The topic.
        topic: String,
    },
}

/// Longest target name; names are `a-z 0-9 - _`.
pub const TARGET_NAME_MAX: usize = 63;

/// Whether `name` is a valid target name: 1 to 63 of `a-z 0-9 - _`.
pub fn valid_target_name(name: &str) -> bool {
    (1..=TARGET_NAME_MAX).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl TargetSpec {
    /// Checks the spec names something usable; the message says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Self::File { path } if path.is_empty() => Err("a file target needs a path".into()),
            Self::File { path } if !std::path::Path::new(path).is_absolute() => Err(format!("the file target's path {path:?} must be absolute")),
            Self::Webhook { url, .. } if !url.starts_with("http://") => Err(format!("the webhook URL {url:?} must start with http://")),
            Self::Webhook { url, .. } if url.parse::<http::Uri>().is_err() => Err(format!("the webhook URL {url:?} is not a valid URL")),
            Self::Webhook { secret, .. } if secret.len() < 16 => Err("the webhook secret must be at least 16 characters".into()),
            Self::Kafka { brokers, .. } if brokers.split(',').all(|b| b.trim().is_empty()) => Err("a Kafka target needs brokers (host:port)".into()),
            Self::Kafka { brokers, .. } if brokers.split(',').any(|b| !b.trim().contains(':')) => {
                Err(format!("Kafka brokers {brokers:?} must each be host:port"))
            }
            Self::Kafka { topic, .. } if topic.is_empty() || topic.len() > 249 || !topic.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) => {
                Err(format!("invalid Kafka topic {topic:?}: use 1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-'"))
            }
            _ => Ok(()),
        }
    }

    /// The target this spec names, called `name`.
    pub fn build(&self, name: &str, clock: Arc<dyn Clock>) -> Result<Arc<dyn Target>, EventError> {
        Ok(match self {
            Self::File { path } => Arc::new(FileTarget::new(name, std::path::Path::new(path))),
            Self::Webhook { url, secret } => Arc::new(Webhook::new(name, url, secret.as_bytes(), clock)?),
            Self::Kafka { brokers, topic } => Arc::new(Kafka::new(name, brokers, topic)),
        })
    }

    /// What to show of it (never the webhook's secret).
    pub fn describe(&self) -> String {
        match self {
            Self::File { path } => format!("file {path}"),
            Self::Webhook { url, .. } => format!("webhook {url}"),
            Self::Kafka { brokers, topic } => format!("kafka {brokers} topic {topic}"),
        }
    }
}

/// The event types S3 bucket notifications may select (each also as a
/// `prefix:*` wildcard of its family, and `s3:ObjectCreated:*` ...).
pub const S3_EVENT_TYPES: &[&str] = &[
    "s3:ObjectCreated:Put",
    "s3:ObjectCreated:Post",
    "s3:ObjectCreated:Copy",
    "s3:ObjectCreated:CompleteMultipartUpload",
    "s3:ObjectRemoved:Delete",
    "s3:ObjectRemoved:DeleteMarkerCreated",
    "s3:LifecycleExpiration:Delete",
    "s3:LifecycleExpiration:DeleteMarkerCreated",
    "s3:ObjectTagging:Put",
    "s3:ObjectTagging:Delete",
    "s3:ObjectAcl:Put",
    "s3:ObjectRetention:Put",
    "s3:ObjectLegalHold:Put",
];

/// Whether `pattern` (an event type, or `family:*`) is one S3 notifications accept.
pub fn valid_event_pattern(pattern: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(family) => family.ends_with(':') && S3_EVENT_TYPES.iter().any(|t| t.starts_with(family)),
        None => S3_EVENT_TYPES.contains(&pattern),
    }
}

/// One rule of a bucket's notification configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifyRule {
    /// The rule's id.
    pub id: String,
    /// The target's name.
    pub target: String,
    /// The ARN the configuration named it by (given back by Get).
    pub arn: String,
    /// Event types or `family:*` patterns.
    pub events: Vec<String>,
    /// Keys must start with this.
    #[serde(default)]
    pub prefix: String,
    /// Keys must end with this.
    #[serde(default)]
    pub suffix: String,
}

impl NotifyRule {
    /// Whether `event` is one this rule sends.
    pub fn matches(&self, event: &Event) -> bool {
        let key = event.subject.key.as_deref().unwrap_or("");
        key.starts_with(&self.prefix)
            && key.ends_with(&self.suffix)
            && self.events.iter().any(|p| match p.strip_suffix('*') {
                Some(family) => event.kind.starts_with(family),
                None => *p == event.kind,
            })
    }
}

/// A bucket's notification configuration, as stored (bucket document
/// `notification`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// The rules.
    pub rules: Vec<NotifyRule>,
}

impl Notification {
    /// Whether `event` goes to `target` under these rules.
    pub fn sends(&self, target: &str, event: &Event) -> bool {
        self.rules.iter().any(|r| r.target == target && r.matches(event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Subject;

    fn event(kind: &str, key: &str) -> Event {
        Event::new("n", "names", 1, 0, kind, None, Subject { bucket: Some("b".into()), key: Some(key.into()), ..Default::default() })
    }

    #[test]
    fn rules_filter_by_type_prefix_and_suffix() {
        let rule = NotifyRule {
            id: "r".into(),
            target: "hook".into(),
            arn: "arn:strata:sqs:::hook".into(),
            events: vec!["s3:ObjectCreated:*".into(), "s3:ObjectRemoved:Delete".into()],
            prefix: "images/".into(),
            suffix: ".jpg".into(),
        };
        assert!(rule.matches(&event("s3:ObjectCreated:Put", "images/a.jpg")));
        assert!(rule.matches(&event("s3:ObjectCreated:CompleteMultipartUpload", "images/b.jpg")));
        assert!(rule.matches(&event("s3:ObjectRemoved:Delete", "images/a.jpg")));
        assert!(!rule.matches(&event("s3:ObjectRemoved:DeleteMarkerCreated", "images/a.jpg")));
        assert!(!rule.matches(&event("s3:ObjectCreated:Put", "docs/a.jpg")));
        assert!(!rule.matches(&event("s3:ObjectCreated:Put", "images/a.png")));
        let n = Notification { rules: vec![rule] };
        assert!(n.sends("hook", &event("s3:ObjectCreated:Put", "images/a.jpg")));
        assert!(!n.sends("other", &event("s3:ObjectCreated:Put", "images/a.jpg")));
        assert!(valid_event_pattern("s3:ObjectCreated:*") && valid_event_pattern("s3:ObjectRemoved:Delete"));
        assert!(!valid_event_pattern("s3:ObjectCreated") && !valid_event_pattern("s3:Nope:*") && !valid_event_pattern("*"));
    }

    #[test]
    fn specs_are_checked_and_never_show_a_secret() {
        let hook = TargetSpec::Webhook { url: "http://127.0.0.1:9/x".into(), secret: "0123456789abcdefXYZ".into() };
        assert_eq!(hook.check(), Ok(()));
        assert!(!hook.describe().contains("XYZ"));
        let json = serde_json::to_string(&hook).unwrap();
        assert_eq!(serde_json::from_str::<TargetSpec>(&json).unwrap(), hook);
        assert!(TargetSpec::Webhook { url: "ftp://x".into(), secret: "0123456789abcdef".into() }.check().is_err());
        assert!(TargetSpec::Webhook { url: "http://x/".into(), secret: "short".into() }.check().is_err());
        assert!(TargetSpec::File { path: "rel/path".into() }.check().is_err());
        assert!(TargetSpec::Kafka { brokers: "localhost".into(), topic: "t".into() }.check().is_err());
        assert!(TargetSpec::Kafka { brokers: "h:9092".into(), topic: "bad topic".into() }.check().is_err());
        assert!(valid_target_name("kafka-1") && !valid_target_name("Kafka") && !valid_target_name(""));
    }
}
