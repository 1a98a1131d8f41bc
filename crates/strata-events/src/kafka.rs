//! Apache Kafka: each event one record in a topic, keyed by its order key
//! (the bucket or container), so one bucket's events land in one partition
//! in order. Through `rskafka`, a pure-Rust client: nothing to build or
//! install beside Strata (rdkafka would need librdkafka and its C build).
//!
//! A batch counts as delivered once every partition it touches has
//! acknowledged its records (the broker's `acks=all` default of rskafka's
//! produce). A failure drops the connection; the sender retries the whole
//! batch, so a consumer may see a record twice (deduplicate by `id`), but
//! never a later event of a bucket before an earlier one's first copy.

use crate::{Event, EventError, Target};
use futures_util::future::BoxFuture;
use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Partitions of a topic Strata creates (an existing topic keeps its own).
pub const DEFAULT_PARTITIONS: i32 = 8;

struct Connected {
    _client: Client,
    partitions: Vec<Arc<PartitionClient>>,
}

/// A Kafka topic.
pub struct Kafka {
    name: String,
    brokers: Vec<String>,
    topic: String,
    conn: tokio::sync::Mutex<Option<Connected>>,
}

impl Kafka {
    /// The topic `topic` on the cluster reached through `brokers`
    /// (`host:port`, comma-separated); created with
    /// [`DEFAULT_PARTITIONS`] partitions if it does not exist.
    pub fn new(name: &str, brokers: &str, topic: &str) -> Self {
        Self {
            name: name.into(),
            brokers: brokers.split(',').map(str::trim).filter(|b| !b.is_empty()).map(str::to_owned).collect(),
            topic: topic.into(),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    fn err(&self, doing: &str, e: impl std::fmt::Display) -> EventError {
        EventError::Target { target: self.name.clone(), why: format!("{doing}: {e}") }
    }

    async fn connect(&self) -> Result<Connected, EventError> {
        // rskafka retries forever by default; a deadline hands failures to
        // the sender, which backs off and reports them.
        let backoff = rskafka::BackoffConfig { deadline: Some(Duration::from_secs(10)), ..Default::default() };
        let client =
            ClientBuilder::new(self.brokers.clone()).client_id("strata").backoff_config(backoff).build().await.map_err(|e| self.err("connecting", e))?;
        let topics = client.list_topics().await.map_err(|e| self.err("listing topics", e))?;
        let count = match topics.iter().find(|t| t.name == self.topic) {
            Some(t) => i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
            None => {
                let controller = client.controller_client().map_err(|e| self.err("reaching the controller", e))?;
                match controller.create_topic(&self.topic, DEFAULT_PARTITIONS, 1, 10_000).await {
                    Ok(()) => {}
                    // Created meanwhile by another sender: fine.
                    Err(rskafka::client::error::Error::ServerError { protocol_error: rskafka::client::error::ProtocolError::TopicAlreadyExists, .. }) => {}
                    Err(e) => return Err(self.err("creating the topic", e)),
                }
                DEFAULT_PARTITIONS
            }
        };
        let mut partitions = Vec::new();
        for p in 0..count.max(1) {
            let pc = client.partition_client(self.topic.clone(), p, UnknownTopicHandling::Retry).await.map_err(|e| self.err("opening a partition", e))?;
            partitions.push(Arc::new(pc));
        }
        Ok(Connected { _client: client, partitions })
    }
}

/// The partition of `key` among `n`: CRC32C, stable across runs and nodes.
pub fn partition_of(key: &str, n: usize) -> usize {
    crc32c::crc32c(key.as_bytes()) as usize % n.max(1)
}

impl Target for Kafka {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver<'a>(&'a self, events: &'a [Event]) -> BoxFuture<'a, Result<(), EventError>> {
        Box::pin(async move {
            let mut conn = self.conn.lock().await;
            if conn.is_none() {
                *conn = Some(self.connect().await?);
            }
            let parts = conn.as_ref().map(|c| c.partitions.clone()).unwrap_or_default();
            let mut by_partition: BTreeMap<usize, Vec<Record>> = BTreeMap::new();
            for e in events {
                let key = e.order_key();
                let mut headers = BTreeMap::new();
                headers.insert("id".to_owned(), e.id.clone().into_bytes());
                let timestamp = rskafka::chrono::DateTime::from_timestamp_millis(i64::try_from(e.time_ms).unwrap_or(i64::MAX)).unwrap_or_default();
                let record = Record { key: Some(key.as_bytes().to_vec()), value: Some(e.to_json().into_bytes()), headers, timestamp };
                by_partition.entry(partition_of(key, parts.len())).or_default().push(record);
            }
            for (p, records) in by_partition {
                let Some(pc) = parts.get(p) else { continue };
                if let Err(e) = pc.produce(records, Compression::NoCompression).await {
                    // Reconnect next time: the broker may have moved or restarted.
                    *conn = None;
                    return Err(self.err(&format!("producing to partition {p}"), e));
                }
            }
            Ok(())
        })
    }
}
