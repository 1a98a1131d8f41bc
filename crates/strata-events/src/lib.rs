//! Change capture: Ambry's "capturing operations" (every operation pushed
//! to a change-capture system for offline analysis, §4.2) and S3's bucket
//! notifications, built once.
//!
//! This crate owns the delivery side. An [`Event`] is one state change in
//! a stable, versioned JSON schema ([`event`], docs/events.md). Events come
//! from a [`Source`]: a durable log that holds each change in the commit
//! that made it, read in order by sequence number, so a crash between a
//! change and its delivery loses nothing. A [`Sender`] reads a source after
//! a target's durable [`Cursor`], hands the events in order to a [`Target`]
//! (a JSON-lines [`FileTarget`], a signed HTTP [`Webhook`], a [`Kafka`]
//! topic), moves the
//! cursor only once the target has them, and retries with exponential
//! back-off while the target is down, raising an alarm when it has been
//! down too long. Delivery is at least once: a send retried after a crash
//! may repeat events, each with an id to deduplicate by.
//!
//! Which logs are sources, and which changes become events, is the node's
//! business, not this crate's.
//!
//! Layer rule (checked by the test command): may use strata-types, strata-fs; never the
//! engine, the router, the server, the cluster map, the node crate, the S3
//! crate or the CLI.

pub mod config;
mod cursor;
pub mod event;
mod kafka;
mod sender;
mod target;
mod webhook;

pub use config::{Notification, NotifyRule, S3_EVENT_TYPES, TargetSpec, valid_event_pattern, valid_target_name};
pub use cursor::Cursor;
pub use event::{Event, SCHEMA_VERSION, Subject};
pub use kafka::{DEFAULT_PARTITIONS, Kafka, partition_of};
pub use sender::{Backoff, Progress, Read, Sender, SenderStatus, Source};
pub use target::{FileTarget, Target};
pub use webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER, Webhook, signature, verify};

/// What can go wrong in change capture.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// A file of the outbox or a cursor could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// Which file, doing what.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A cursor file is damaged (wrong magic, version or checksum).
    #[error("cursor file {path} is damaged: {why}")]
    DamagedCursor {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// An event could not be encoded or decoded.
    #[error("event JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A target refused or did not take a batch; it will be retried.
    #[error("target {target}: {why}")]
    Target {
        /// The target's name.
        target: String,
        /// Why.
        why: String,
    },
    /// A source could not be read.
    #[error("source: {0}")]
    Source(String),
}

impl EventError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}
