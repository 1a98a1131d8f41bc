//! Large blobs (Ambry §4.2.1): split into chunks stored as independent blobs
//! on random partitions, written in parallel; a composite blob lists them.
//! Gets stream the chunks in order with a sliding window of parallel fetches.

use crate::{BlobInfo, PutOptions, Router, RouterError, Unavailable, info_of};
use bytes::{Bytes, BytesMut};
use futures_util::stream::{BoxStream, FuturesUnordered};
use futures_util::{Stream, StreamExt};
use std::sync::Arc;
use strata_engine::BlobRecord;
use strata_format::{ChunkList, PutProps};
use strata_types::{BlobId, BlobKind};
use tokio::sync::OwnedSemaphorePermit;

/// A byte range as a client asks for it (HTTP `Range: bytes=` forms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `a-b`, inclusive.
    FromTo(u64, u64),
    /// `a-`.
    From(u64),
    /// `-n`: the last n bytes.
    Suffix(u64),
}

impl ByteRange {
    /// Resolves against a size to `[start, end)`, or None if unsatisfiable.
    pub fn resolve(self, size: u64) -> Option<(u64, u64)> {
        match self {
            Self::FromTo(a, b) if a <= b && a < size => Some((a, b.min(size - 1) + 1)),
            Self::From(a) if a < size => Some((a, size)),
            Self::Suffix(n) if n > 0 && size > 0 => Some((size.saturating_sub(n), size)),
            _ => None,
        }
    }
}

/// The upload buffer is counted in units of this many bytes.
pub(crate) const UPLOAD_UNIT: usize = 64 << 10;

/// Units in an upload buffer of `bytes`, at least one. A request is capped
/// at the total, so a buffer smaller than a chunk only makes puts take turns.
pub(crate) fn upload_units(bytes: u64) -> usize {
    usize::try_from(bytes / UPLOAD_UNIT as u64).unwrap_or(usize::MAX).clamp(1, tokio::sync::Semaphore::MAX_PERMITS)
}

/// The bytes of a blob being read.
pub enum BlobData {
    /// A simple blob: one zero-copy view of the log, and where it lies in
    /// its file when the replica is local (for `sendfile(2)`).
    Whole(Bytes, Option<strata_engine::FileRange>),
    /// A chunked blob: chunks fetched through a sliding window, in order.
    Stream(BoxStream<'static, Result<Bytes, RouterError>>),
}

/// A blob being read: its properties, the range served, and its bytes.
pub struct BlobBody {
    /// Properties.
    pub info: BlobInfo,
    /// `[start, end)` served.
    pub range: (u64, u64),
    /// The bytes.
    pub data: BlobData,
}

pub(crate) fn decode_list(rec: &BlobRecord) -> Result<ChunkList, RouterError> {
    ChunkList::decode(&rec.data).map_err(|e| RouterError::Internal(format!("chunk list of a composite blob is corrupt: {e}")))
}

impl Router {
    /// Puts a blob whose bytes arrive as a stream. Blobs over the chunk size
    /// are chunked; if any chunk fails, the written chunks are deleted and
    /// the put fails.
    pub async fn put_stream<S, E>(self: &Arc<Self>, opts: PutOptions, mut body: S) -> Result<BlobId, RouterError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
        E: std::fmt::Display,
    {
        let chunk_size = self.config.chunk_size;
        let started_ms = self.now_ms();
        let expiry_ms = opts.ttl_ms.map_or(0, |t| started_ms.saturating_add(t.max(1)));
        let policy = opts.policy.unwrap_or(self.policies().put);
        let mut buf = BytesMut::new();
        // Room in the upload buffer for `buf`'s bytes; it travels with each
        // chunk until the chunk is written.
        let mut held: Option<OwnedSemaphorePermit> = None;
        let mut total = 0u64;
        let mut next_index = 0usize;
        let mut inflight = FuturesUnordered::new();
        let mut done: Vec<(usize, BlobId, u64)> = Vec::new();
        let mut failure: Option<RouterError> = None;
        loop {
            let frame = match body.next().await {
                None => break,
                Some(Err(e)) => {
                    failure = Some(RouterError::IncompleteBody(e.to_string()));
                    break;
                }
                Some(Ok(b)) => b,
            };
            total += frame.len() as u64;
            if total > self.config.blob_bytes_max {
                failure = Some(RouterError::TooLarge { size: total, max: self.config.blob_bytes_max });
                break;
            }
            let mut frame = &frame[..];
            while !frame.is_empty() {
                if held.is_none() {
                    // Room for a whole chunk before filling it: a buffer
                    // half full never waits for more, so puts waiting for
                    // room hold none and cannot wait on each other.
                    match self.hold_upload(chunk_size).await {
                        Ok(p) => held = Some(p),
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                    // A whole chunk, or what the sender announced is left
                    // of its body (more if it sends more).
                    let left = opts.size_hint.map_or(chunk_size as u64, |n| n.saturating_sub(total - frame.len() as u64));
                    buf.reserve((left as usize).max(frame.len()).min(chunk_size));
                }
                let take = frame.len().min(chunk_size - buf.len());
                buf.extend_from_slice(&frame[..take]);
                frame = &frame[take..];
                if buf.len() == chunk_size {
                    inflight.push(self.spawn_chunk(next_index, buf.split().freeze(), expiry_ms, &opts, policy, held.take()));
                    next_index += 1;
                    if inflight.len() >= self.config.chunk_window {
                        match inflight.next().await.expect("non-empty") {
                            Ok(c) => done.push(c),
                            Err(e) => failure = Some(e),
                        }
                    }
                }
                if failure.is_some() {
                    break;
                }
            }
            if failure.is_some() {
                break;
            }
        }
        // The body ended: give back the room its last buffer did not use.
        if let Some(p) = held.as_mut() {
            let used = buf.len().div_ceil(UPLOAD_UNIT).max(1);
            if p.num_permits() > used {
                drop(p.split(p.num_permits() - used));
            }
        }
        if failure.is_none() && next_index == 0 {
            // Small blob: one simple put with the user's properties.
            let props = PutProps { expiry_ms, content_type: opts.content_type, owner: opts.owner, meta: opts.meta };
            return self.put_one(BlobKind::Simple, opts.container, props, buf.freeze(), policy, &opts.actor).await;
        }
        if failure.is_none() && !buf.is_empty() {
            inflight.push(self.spawn_chunk(next_index, buf.split().freeze(), expiry_ms, &opts, policy, held.take()));
        }
        while let Some(r) = inflight.next().await {
            match r {
                Ok(c) => done.push(c),
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        // The chunks become reachable only through the composite: written
        // too late, the orphan sweep may already be freeing them.
        if failure.is_none()
            && let Err(e) = self.check_naming_deadline(started_ms)
        {
            failure = Some(e);
        }
        if let Some(e) = failure {
            self.delete_chunks(done.iter().map(|c| c.1)).await;
            return Err(e);
        }
        done.sort_by_key(|c| c.0);
        let list = ChunkList { chunk_size: chunk_size as u64, total_size: total, chunks: done.iter().map(|c| (c.1, c.2)).collect() };
        let props = PutProps { expiry_ms, content_type: opts.content_type, owner: opts.owner, meta: opts.meta };
        match self.put_one(BlobKind::Composite, opts.container, props, Bytes::from(list.encode()), policy, &opts.actor).await {
            Ok(id) => Ok(id),
            Err(e) => {
                self.delete_chunks(done.iter().map(|c| c.1)).await;
                Err(e)
            }
        }
    }

    /// Puts a blob held in memory.
    pub async fn put_bytes(self: &Arc<Self>, opts: PutOptions, data: Bytes) -> Result<BlobId, RouterError> {
        let body = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(data)]);
        self.put_stream(opts, body).await
    }

    /// Puts a composite blob over chunks that already exist (each a chunk
    /// or a simple blob, in order, with its size): how a multipart upload's
    /// parts become one object without copying their bytes. The chunks then
    /// belong to the new blob: deleting it deletes them.
    pub async fn put_composite(self: &Arc<Self>, opts: PutOptions, chunks: Vec<(BlobId, u64)>) -> Result<BlobId, RouterError> {
        let expiry_ms = opts.ttl_ms.map_or(0, |t| self.now_ms().saturating_add(t.max(1)));
        let policy = opts.policy.unwrap_or(self.policies().put);
        if chunks.iter().any(|c| c.0.kind() == BlobKind::Composite) {
            return Err(RouterError::BadRequest("a composite blob cannot list another composite blob".into()));
        }
        let total_size = chunks.iter().map(|c| c.1).sum();
        let chunk_size = chunks.iter().map(|c| c.1).max().unwrap_or(0);
        let list = ChunkList { chunk_size, total_size, chunks };
        let props = PutProps { expiry_ms, content_type: opts.content_type, owner: opts.owner, meta: opts.meta };
        self.put_one(BlobKind::Composite, opts.container, props, Bytes::from(list.encode()), policy, &opts.actor).await
    }

    /// The pieces of a blob as [`Router::put_composite`] takes them: a
    /// composite blob's chunks, or a simple blob itself.
    pub async fn pieces(self: &Arc<Self>, id: BlobId) -> Result<Vec<(BlobId, u64)>, RouterError> {
        let rec = self.read_record(id, id.kind() == BlobKind::Composite).await?;
        match id.kind() {
            BlobKind::Composite => Ok(decode_list(&rec)?.chunks),
            _ => Ok(vec![(id, rec.size)]),
        }
    }

    /// Deletes a composite blob's record but not its chunks, once another
    /// composite blob has taken them over.
    pub async fn forget_composite(&self, id: BlobId) -> Result<(), RouterError> {
        if id.kind() != BlobKind::Composite {
            return Err(RouterError::BadRequest(format!("{id} is not a composite blob")));
        }
        match self.write_quorum(id.partition(), strata_engine::WriteOp::Delete { key: id.key() }, self.policies().delete, &None).await {
            Ok(()) | Err(RouterError::Deleted) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Room for `bytes` of body in the upload buffer (never more than the
    /// whole buffer), waiting for it if the buffer is full.
    async fn hold_upload(&self, bytes: usize) -> Result<OwnedSemaphorePermit, RouterError> {
        let closed = || RouterError::Internal("the upload buffer is closed".into());
        let n = bytes.div_ceil(UPLOAD_UNIT).clamp(1, upload_units(self.config.upload_buffer_bytes));
        let n = u32::try_from(n).map_err(|_| RouterError::Internal("upload buffer request too large".into()))?;
        match self.uploads.clone().try_acquire_many_owned(n) {
            Ok(p) => Ok(p),
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                self.stats.upload_buffer_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.uploads.clone().acquire_many_owned(n).await.map_err(|_| closed())
            }
            Err(tokio::sync::TryAcquireError::Closed) => Err(closed()),
        }
    }

    /// Starts a chunk put on its own task, so chunks progress while the
    /// body is still being received.
    fn spawn_chunk(
        self: &Arc<Self>,
        index: usize,
        data: Bytes,
        expiry_ms: u64,
        opts: &PutOptions,
        policy: crate::Policy,
        room: Option<OwnedSemaphorePermit>,
    ) -> impl std::future::Future<Output = Result<(usize, BlobId, u64), RouterError>> + use<> {
        let router = self.clone();
        let props = PutProps { expiry_ms, owner: opts.owner.clone(), ..PutProps::default() };
        let (container, actor) = (opts.container, opts.actor.clone());
        // The chunk's room in the upload buffer goes back as soon as it is
        // written, in the task: the put may not poll this future until much
        // later (it polls only when its window is full).
        let task = tokio::spawn(async move {
            let len = data.len() as u64;
            let put = router.put_one(BlobKind::Chunk, container, props, data, policy, &actor).await.map(|id| (index, id, len));
            drop(room);
            put
        });
        async move { task.await.unwrap_or_else(|e| Err(RouterError::Internal(format!("chunk task failed: {e}")))) }
    }

    async fn delete_chunks(&self, ids: impl Iterator<Item = BlobId>) {
        for id in ids {
            if let Err(e) = self.write_quorum(id.partition(), strata_engine::WriteOp::Delete { key: id.key() }, self.policies().delete, &None).await {
                tracing::warn!(chunk = %id, error = %e, "could not delete a chunk of a failed put");
            }
        }
    }

    /// Gets a blob, or a range of it, as a stream of bytes.
    pub async fn get(self: &Arc<Self>, id: BlobId, range: Option<ByteRange>) -> Result<BlobBody, RouterError> {
        if id.kind() == BlobKind::Chunk {
            return Err(RouterError::BadRequest("chunk ids are internal: use the id the put returned".into()));
        }
        let rec = self.read_record(id, true).await?;
        let list = if id.kind() == BlobKind::Composite { Some(decode_list(&rec)?) } else { None };
        let info = info_of(id, &rec, list.as_ref());
        let (start, end) = match range {
            None => (0, info.size),
            Some(r) => r.resolve(info.size).ok_or(RouterError::InvalidRange { size: info.size })?,
        };
        let data = match list {
            None => {
                let range = rec.file_range.map(|mut r| {
                    r.offset += start;
                    r.len = end - start;
                    r
                });
                BlobData::Whole(rec.data.slice(start as usize..end as usize), range)
            }
            Some(list) => {
                let mut pieces = Vec::new();
                let mut off = 0u64;
                for (chunk, len) in list.chunks {
                    let (lo, hi) = (start.max(off), end.min(off + len));
                    if lo < hi {
                        pieces.push((chunk, len, lo - off, hi - off));
                    }
                    off += len;
                }
                let router = self.clone();
                let stream = futures_util::stream::iter(pieces)
                    .map(move |(chunk, len, lo, hi)| {
                        let router = router.clone();
                        async move {
                            let rec = router.read_record(chunk, true).await.map_err(|e| match e {
                                RouterError::Corrupt(m) => RouterError::Corrupt(format!("chunk {chunk} of the blob: {m}")),
                                RouterError::Unavailable(cause) => Unavailable::Chunk { chunk: chunk.to_string(), cause: Box::new(cause) }.into(),
                                e => RouterError::Internal(format!("chunk {chunk} of the blob: {e}")),
                            })?;
                            if rec.size != len {
                                return Err(RouterError::Internal(format!("chunk {chunk} is {} bytes, the chunk list says {len}", rec.size)));
                            }
                            Ok(rec.data.slice(lo as usize..hi as usize))
                        }
                    })
                    .buffered(self.config.chunk_window);
                // The first piece is read before the caller answers, so a
                // damaged or unreachable first chunk is an error status, not
                // a 200 with nothing after it. A later chunk that fails ends
                // the stream with an error, which the server turns into a
                // response cut short of its Content-Length.
                let mut stream = stream.boxed();
                match stream.next().await {
                    Some(Err(e)) => return Err(e),
                    Some(Ok(first)) => BlobData::Stream(futures_util::stream::once(async move { Ok(first) }).chain(stream).boxed()),
                    None => BlobData::Stream(stream),
                }
            }
        };
        Ok(BlobBody { info, range: (start, end), data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve() {
        assert_eq!(ByteRange::FromTo(0, 9).resolve(5), Some((0, 5)));
        assert_eq!(ByteRange::FromTo(5, 9).resolve(5), None);
        assert_eq!(ByteRange::From(2).resolve(5), Some((2, 5)));
        assert_eq!(ByteRange::Suffix(2).resolve(5), Some((3, 5)));
        assert_eq!(ByteRange::Suffix(9).resolve(5), Some((0, 5)));
        assert_eq!(ByteRange::Suffix(0).resolve(5), None);
        assert_eq!(ByteRange::From(0).resolve(0), None);
    }
}
