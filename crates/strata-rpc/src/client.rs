//! The calling side.

use crate::wire::*;
use bytes::Bytes;
use std::time::Duration;
use strata_engine::WriteOp;
use strata_net::NetError;
use strata_types::{Key, PartitionId};

/// Why an RPC failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The node answered with an error.
    #[error("{0}")]
    Remote(WireError),
    /// No answer: connection refused or broken, or the deadline passed.
    #[error("node unreachable: {0}")]
    Unreachable(String),
    /// The answer is not a valid message.
    #[error("bad answer: {0}")]
    Garbage(String),
}

fn from_net(e: NetError) -> RpcError {
    match e {
        NetError::Unreachable { .. } => RpcError::Unreachable(e.to_string()),
        NetError::Garbage { .. } => RpcError::Garbage(e.to_string()),
    }
}

/// The answer frame `body` to a message of `kind`: its epoch, result and data.
fn answer_of<T: serde::de::DeserializeOwned>(addr: &str, kind: u16, body: &Bytes) -> Result<(u64, T, Bytes), RpcError> {
    let (answer, data): (Answer<T>, Bytes) = decode_message(kind, body).map_err(|e| RpcError::Garbage(format!("{addr}: {e}")))?;
    match answer.result {
        Ok(v) => Ok((answer.epoch, v, data)),
        Err(e) => Err(RpcError::Remote(e)),
    }
}

/// [`answer_of`] with the answer's [`Extension`].
fn answer_of_ext<T: serde::de::DeserializeOwned>(addr: &str, kind: u16, body: &Bytes) -> Result<(u64, T, Extension, Bytes), RpcError> {
    let (answer, ext, data): (Answer<T>, Extension, Bytes) = decode_message_ext(kind, body).map_err(|e| RpcError::Garbage(format!("{addr}: {e}")))?;
    match answer.result {
        Ok(v) => Ok((answer.epoch, v, ext, data)),
        Err(e) => Err(RpcError::Remote(e)),
    }
}

/// Hands an extension's actors out to `n` items in order: none from a node
/// that sent none (an earlier release), an error if the count differs.
fn actors_for(addr: &str, actors: Vec<Option<String>>, n: usize) -> Result<Vec<Option<String>>, RpcError> {
    if actors.is_empty() {
        return Ok(vec![None; n]);
    }
    if actors.len() != n {
        return Err(RpcError::Garbage(format!("{addr}: {} actors for {n} records", actors.len())));
    }
    Ok(actors)
}

/// An RPC client; cheap to clone.
#[derive(Clone)]
pub struct RpcClient {
    http: strata_net::Client,
    /// Deadline of one call.
    pub timeout: Duration,
}

impl Default for RpcClient {
    fn default() -> Self {
        Self::new(Duration::from_secs(10))
    }
}

impl RpcClient {
    /// A client whose calls give up after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self { http: strata_net::Client::new(), timeout }
    }

    async fn call<T: serde::de::DeserializeOwned>(&self, addr: &str, path: &str, kind: u16, frame: Vec<Bytes>) -> Result<(u64, T, Bytes), RpcError> {
        let body = self.http.post_chunks(addr, path, frame, self.timeout).await.map_err(from_net)?;
        answer_of(addr, kind, &body)
    }

    /// [`RpcClient::call`] through a replica RPC session (`strata_net`):
    /// for the small, frequent messages whose HTTP framing would cost more
    /// than their work. `retry`: the message may be sent twice.
    async fn call_session<T: serde::de::DeserializeOwned>(&self, addr: &str, kind: u16, frame: Vec<Bytes>, retry: bool) -> Result<(u64, T, Bytes), RpcError> {
        let body = self.http.session_exchange(addr, &frame, retry, self.timeout).await.map_err(from_net)?;
        answer_of(addr, kind, &body)
    }

    /// Applies a write on `addr`'s replica of `partition`, made by `actor`
    /// (recorded with it: change capture's `who`).
    pub async fn write(&self, addr: &str, epoch: u64, partition: PartitionId, op: &WriteOp, actor: Option<&str>) -> Result<(u64, WireAck), RpcError> {
        let (wire, data) = match op {
            WriteOp::Put { key, props, data } => (WireOp::Put { key: key.as_bytes().to_vec(), props: props.into() }, Some(data)),
            WriteOp::Delete { key } => (WireOp::Delete { key: key.as_bytes().to_vec() }, None),
            WriteOp::TtlUpdate { key, expiry_ms } => (WireOp::TtlUpdate { key: key.as_bytes().to_vec(), expiry_ms: *expiry_ms }, None),
            WriteOp::ReplicaPut { key, props, data, created_ms } => {
                (WireOp::Repair { key: key.as_bytes().to_vec(), props: props.into(), created_ms: *created_ms }, Some(data))
            }
            WriteOp::ReplicaDelete { .. } => {
                return Err(RpcError::Remote(WireError::Invalid("replicated deletes are pulled, not pushed".into())));
            }
        };
        let ext = Extension { actor: actor.map(String::from), ..Extension::default() };
        let frame = message_ext(KIND_WRITE, &WriteRequest { epoch, partition, op: wire }, &ext, data.into_iter().cloned().collect());
        let (e, ack, _) = self.call(addr, "/rpc/v1/write", KIND_WRITE, frame).await?;
        Ok((e, ack))
    }

    /// Every version of a read-write store key `addr`'s replica holds.
    pub async fn rw_get(&self, addr: &str, req: &RwGetRequest) -> Result<Vec<WireVersion>, RpcError> {
        let frame = message(KIND_RW_GET, req, Vec::new());
        Ok(self.call_session(addr, KIND_RW_GET, frame, true).await?.1)
    }

    /// Every version of each of several read-write store keys `addr`'s
    /// replica holds, in the order asked.
    pub async fn rw_get_many(&self, addr: &str, req: &RwGetManyRequest) -> Result<Vec<Vec<WireVersion>>, RpcError> {
        let frame = message(KIND_RW_GET_MANY, req, Vec::new());
        let answer: Vec<Vec<WireVersion>> = self.call_session(addr, KIND_RW_GET_MANY, frame, true).await?.1;
        if answer.len() != req.keys.len() {
            return Err(RpcError::Remote(WireError::Invalid(format!("{} answers to a read of {} keys", answer.len(), req.keys.len()))));
        }
        Ok(answer)
    }

    /// Writes one version to `addr`'s replica of a read-write store.
    pub async fn rw_put(&self, addr: &str, req: &RwPutRequest) -> Result<u32, RpcError> {
        let frame = message(KIND_RW_PUT, req, Vec::new());
        // A version written twice is refused the second time as held.
        Ok(self.call_session(addr, KIND_RW_PUT, frame, true).await?.1)
    }

    /// Hands a put to `addr`, the key's pseudo-master; the clock written.
    pub async fn rw_coordinate(&self, addr: &str, req: &RwCoordinateRequest) -> Result<Vec<u8>, RpcError> {
        let frame = message(KIND_RW_COORDINATE, req, Vec::new());
        Ok(self.call_session(addr, KIND_RW_COORDINATE, frame, false).await?.1)
    }

    /// Reads a blob from `addr`'s replica.
    pub async fn read(&self, addr: &str, epoch: u64, partition: PartitionId, key: &Key, with_data: bool) -> Result<(u64, WireRecord, Bytes), RpcError> {
        let frame = message(KIND_READ, &ReadRequest { epoch, partition, key: key.as_bytes().to_vec(), with_data }, Vec::new());
        let body = self.http.post_chunks(addr, "/rpc/v1/read", frame, self.timeout).await.map_err(from_net)?;
        let (e, mut rec, ext, data): (u64, WireRecord, Extension, Bytes) = answer_of_ext(addr, KIND_READ, &body)?;
        rec.actor = ext.actor;
        if with_data && data.len() as u64 != rec.size {
            return Err(RpcError::Garbage(format!("{addr}: {} data bytes for a blob of {}", data.len(), rec.size)));
        }
        Ok((e, rec, data))
    }

    /// Asks `addr` what its replicas hold after each token.
    pub async fn journal(&self, addr: &str, items: Vec<JournalItem>) -> Result<(u64, Vec<JournalAnswer>), RpcError> {
        let frame = message(KIND_JOURNAL, &items, Vec::new());
        let body = self.http.post_chunks(addr, "/rpc/v1/journal", frame, self.timeout).await.map_err(from_net)?;
        let (e, mut answers, ext, _): (u64, Vec<JournalAnswer>, Extension, Bytes) = answer_of_ext(addr, KIND_JOURNAL, &body)?;
        let n = answers.iter().filter_map(|a| a.result.as_ref().ok()).map(|c| c.entries.len()).sum();
        let mut actors = actors_for(addr, ext.actors, n)?.into_iter();
        for entry in answers.iter_mut().filter_map(|a| a.result.as_mut().ok()).flat_map(|c| c.entries.iter_mut()) {
            entry.actor = actors.next().flatten();
        }
        Ok((e, answers))
    }

    /// A page of key digests of `addr`'s replica of `partition`.
    pub async fn digest(&self, addr: &str, req: &DigestRequest) -> Result<Vec<WireDigest>, RpcError> {
        let frame = message(KIND_DIGEST, req, Vec::new());
        let (_, page, _): (u64, Vec<WireDigest>, Bytes) = self.call(addr, "/rpc/v1/digest", KIND_DIGEST, frame).await?;
        Ok(page)
    }

    /// Fetches records from `addr`'s replica: each key's state, and the data
    /// of the live ones.
    pub async fn fetch(&self, addr: &str, partition: PartitionId, keys: &[Key]) -> Result<Vec<(Fetched, Bytes)>, RpcError> {
        let frame = message(KIND_FETCH, &FetchRequest { partition, keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect() }, Vec::new());
        // On a session: its answer (up to 16 MiB of records) is read into
        // one buffer as it arrives, where a response body would be
        // gathered from its chunks and copied again. A fetch only reads,
        // so a reused session that broke is retried on a new one.
        let body = self.http.session_exchange(addr, &frame, true, self.timeout).await.map_err(from_net)?;
        let (_, mut states, ext, data): (u64, Vec<Fetched>, Extension, Bytes) = answer_of_ext(addr, KIND_FETCH, &body)?;
        if states.len() != keys.len() {
            return Err(RpcError::Garbage(format!("{addr}: {} answers for {} keys", states.len(), keys.len())));
        }
        let live = states.iter().filter(|s| matches!(s, Fetched::Live(_))).count();
        let mut actors = actors_for(addr, ext.actors, live)?.into_iter();
        for s in states.iter_mut() {
            if let Fetched::Live(r) = s {
                r.actor = actors.next().flatten();
            }
        }
        let mut off = 0usize;
        let mut out = Vec::with_capacity(states.len());
        for s in states {
            let len = match &s {
                Fetched::Live(r) => r.size as usize,
                _ => 0,
            };
            if off + len > data.len() {
                return Err(RpcError::Garbage(format!("{addr}: fetched data shorter than its headers")));
            }
            out.push((s, data.slice(off..off + len)));
            off += len;
        }
        Ok(out)
    }
}
