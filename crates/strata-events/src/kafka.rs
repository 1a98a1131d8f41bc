//! Apache Kafka: each event one record in a topic, keyed by its order key
//! (the bucket or container), so one bucket's events land in one partition
//! in order. Through `rskafka`, a pure-Rust client: nothing to build or
//! install beside Strata (rdkafka would need librdkafka and its C build).
//!
//! A batch counts as delivered once every partition it touches has
//! acknowledged its records (the broker's `acks=all` default of rskafka's
//! produce). A failure drops the connection and the sender retries the
//! batch; partitions that took their part before the failure are not sent
//! it again. Delivery stays at least once (a crash repeats what follows the
//! stored position: deduplicate by `id`), and a later event of a bucket
//! never precedes an earlier one's first copy.

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

/// A batch cut short: its first event's id, the partition count, and
/// the last sequence number each partition already holds.
type Partial = (String, usize, BTreeMap<usize, u64>);

/// A Kafka topic.
pub struct Kafka {
    name: String,
    brokers: Vec<String>,
    topic: String,
    conn: tokio::sync::Mutex<Option<Connected>>,
    /// A batch cut short: its first event's id, the topic's partition
    /// count then (a different count maps keys elsewhere), and per partition the last
    /// sequence number that partition already holds, so its retry sends a
    /// partition only what it lacks.
    partial: std::sync::Mutex<Option<Partial>>,
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
            partial: std::sync::Mutex::new(None),
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
            // A retry of a batch cut short skips what partitions already hold.
            let first = events.first().map(|e| e.id.clone()).unwrap_or_default();
            let mut held: BTreeMap<usize, u64> = match self.partial.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
                Some((id, n, held)) if id == first && n == parts.len() => held,
                _ => BTreeMap::new(),
            };
            let mut by_partition: BTreeMap<usize, (Vec<Record>, u64)> = BTreeMap::new();
            for e in events {
                let key = e.order_key();
                let p = partition_of(key, parts.len());
                if held.get(&p).is_some_and(|&upto| e.seq <= upto) {
                    continue;
                }
                let mut headers = BTreeMap::new();
                headers.insert("id".to_owned(), e.id.clone().into_bytes());
                let timestamp = rskafka::chrono::DateTime::from_timestamp_millis(i64::try_from(e.time_ms).unwrap_or(i64::MAX)).unwrap_or_default();
                let record = Record { key: Some(key.as_bytes().to_vec()), value: Some(e.to_json().into_bytes()), headers, timestamp };
                let entry = by_partition.entry(p).or_default();
                entry.0.push(record);
                entry.1 = e.seq;
            }
            for (p, (records, last)) in by_partition {
                let Some(pc) = parts.get(p) else { continue };
                if let Err(e) = pc.produce(records, Compression::NoCompression).await {
                    // Reconnect next time: the broker may have moved or restarted.
                    *conn = None;
                    *self.partial.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((first, parts.len(), held));
                    return Err(self.err(&format!("producing to partition {p}"), e));
                }
                held.insert(p, last);
            }
            Ok(())
        })
    }
}
