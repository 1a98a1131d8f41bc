//! Writing a request body into a blob while its MD5 (the ETag) is computed
//! beside it, and freeing the blobs an op made unreachable.

use crate::StrataS3;
use crate::checksum::Expected;
use crate::convert::router_err;
use crate::md5x;
use crate::sse::Seal;
use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use s3s::dto::StreamingBlob;
use s3s::{S3Error, s3_error};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use strata_names::Outcome;
use strata_router::PutOptions;
use strata_types::BlobId;

/// Bodies up to this size are hashed inline; bigger ones beside the write
/// (see [`BodyHasher`]).
const INLINE_HASH_BYTES: i64 = 256 << 10;

/// Bodies being hashed beside their write, process-wide.
static HASHING: AtomicUsize = AtomicUsize::new(0);

/// Where a big body's bytes go to be hashed while they are written. Alone,
/// a body is hashed on a blocking thread ([`md5x::Single`]: one stream is
/// fastest there); when other bodies are being hashed too, it
/// joins the multi-buffer pool, which hashes up to 16 at once ([`md5x`]).
struct BodyHasher {
    feed: Feed,
    pending: Pending,
    _busy: Busy,
}

#[derive(Clone)]
enum Feed {
    Pool(md5x::Stream),
    Thread(tokio::sync::mpsc::Sender<Bytes>),
}

enum Pending {
    Pool(md5x::Stream),
    Thread(tokio::task::JoinHandle<[u8; 16]>),
}

/// Counts a body in [`HASHING`] while it lives.
struct Busy;

impl Drop for Busy {
    fn drop(&mut self) {
        HASHING.fetch_sub(1, Ordering::Relaxed);
    }
}

impl BodyHasher {
    fn start() -> Self {
        let others = HASHING.fetch_add(1, Ordering::Relaxed);
        let busy = Busy;
        if others > 0
            && let Some(pool) = md5x::pool()
        {
            let s = pool.stream();
            return Self { feed: Feed::Pool(s.clone()), pending: Pending::Pool(s), _busy: busy };
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(32);
        let h = tokio::task::spawn_blocking(move || {
            let mut h = md5x::Single::new();
            while let Some(b) = rx.blocking_recv() {
                h.update(&b);
            }
            h.finalize()
        });
        Self { feed: Feed::Thread(tx), pending: Pending::Thread(h), _busy: busy }
    }

    /// The MD5, once every clone of the feed is gone (the body is done).
    async fn finish(self) -> Result<[u8; 16], S3Error> {
        let Self { feed, pending, _busy } = self;
        drop(feed);
        match pending {
            Pending::Pool(s) => s.finish().await.ok_or_else(|| s3_error!(InternalError, "the MD5 pool stopped")),
            Pending::Thread(h) => h.await.map_err(|e| s3_error!(InternalError, "MD5 task: {e}")),
        }
    }
}

impl Feed {
    async fn send(&self, b: Bytes) {
        match self {
            Self::Pool(s) => s.update(b).await,
            // The hasher only stops when the channel closes.
            Self::Thread(tx) => {
                let _ = tx.send(b).await;
            }
        }
    }
}

/// Blobs freed at once when an op releases many (an upload's parts).
const FREES_IN_FLIGHT: usize = 32;

/// How long a replaced chunked object stays readable for GETs that opened it.
const RETIRE_GRACE_MS: u64 = 10 * 60 * 1000;

/// A body written to a blob.
pub(crate) struct Stored {
    pub blob: BlobId,
    /// Plaintext bytes.
    pub size: u64,
    /// The ETag's bytes: the body's MD5, or (for SSE-C and SSE-KMS) a
    /// tag of it under the object's data key.
    pub md5: [u8; 16],
    /// The additional checksums the request gave, checked.
    pub checksums: s3s::dto::Checksum,
    /// When writing began (the blob must be named within half the orphan
    /// grace period of it).
    pub started_ms: u64,
}

/// `body` sealed under `dek` as it streams: each frame's sealed bytes
/// (whole segments, once more follows), then the last segment.
fn sealing<E: std::fmt::Display + Send + 'static>(
    body: futures_util::stream::BoxStream<'static, Result<Bytes, E>>,
    dek: &strata_sse::Key,
) -> futures_util::stream::BoxStream<'static, Result<Bytes, String>> {
    let sealer = Arc::new(std::sync::Mutex::new(Some(strata_sse::StreamSealer::new(dek))));
    let tail = sealer.clone();
    let frames = body.map(move |frame| {
        let b = frame.map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(b.len() + 64);
        let mut g = sealer.lock().map_err(|_| "the sealer's lock is poisoned".to_owned())?;
        g.as_mut().ok_or("the body went on after its end")?.push(&b, &mut out).map_err(|e| e.to_string())?;
        Ok(Bytes::from(out))
    });
    let last = futures_util::stream::once(async move {
        let s = tail.lock().map_err(|_| "the sealer's lock is poisoned".to_owned())?.take().ok_or("the body ended twice")?;
        let mut out = Vec::with_capacity(strata_sse::TAG_BYTES + strata_sse::SEGMENT_BYTES);
        s.finish(&mut out).map_err(|e| e.to_string())?;
        Ok(Bytes::from(out))
    });
    frames.chain(last).boxed()
}

/// A failure reading the body: a chunk of a streaming SigV4 payload whose
/// signature does not match (s3s reports it only as a body error), or a
/// body cut short.
fn body_err(msg: &str) -> S3Error {
    if msg.contains("SignatureMismatch") {
        s3_error!(SignatureDoesNotMatch, "a chunk signature of the streaming payload does not match")
    } else {
        s3_error!(IncompleteBody, "reading the request body: {msg}")
    }
}

impl StrataS3 {
    /// Writes `body` to a new blob, as a sealed stream under `seal`'s data
    /// key if given. With `content_md5` (base64) or additional checksums
    /// in `sums`, a body that does not match them (checked on the
    /// plaintext) is deleted again and the put fails with BadDigest.
    pub(crate) async fn store(
        &self,
        body: Option<StreamingBlob>,
        length: Option<i64>,
        content_md5: Option<&str>,
        sums: &Expected,
        mut opts: PutOptions,
        seal: Option<&Seal>,
    ) -> Result<Stored, S3Error> {
        let started_ms = self.now_ms();
        opts.size_hint = length.and_then(|l| u64::try_from(l).ok()).map(|l| if seal.is_some() { strata_sse::sealed_len(l) } else { l });
        let want = match content_md5 {
            None => None,
            Some(b64) => {
                let raw = base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok().filter(|r| r.len() == 16);
                Some(raw.ok_or_else(|| s3_error!(InvalidDigest, "Content-MD5 {b64:?} is not the base64 of 16 bytes"))?)
            }
        };
        let body = match body {
            Some(b) => b.boxed(),
            None => futures_util::stream::empty().boxed(),
        };
        // The additional checksums, computed in line (CRCs run at memory
        // speed); a body without any is passed on untouched.
        let extra = sums.hasher().map(|h| Arc::new(std::sync::Mutex::new(Some(h))));
        let body = match &extra {
            None => body,
            Some(summed) => {
                let summed = summed.clone();
                body.inspect(move |frame| {
                    if let Ok(b) = frame
                        && let Ok(mut g) = summed.lock()
                        && let Some(h) = g.as_mut()
                    {
                        h.update(b);
                    }
                })
                .boxed()
            }
        };
        let (blob, size, md5) = if length.is_some_and(|l| l <= INLINE_HASH_BYTES) {
            let mut hasher = md5x::Single::new();
            let mut size = 0u64;
            let mut buf = bytes::BytesMut::with_capacity(length.and_then(|l| usize::try_from(l).ok()).unwrap_or(0));
            let mut body = body;
            while let Some(frame) = body.next().await {
                let frame = frame.map_err(|e| body_err(&e.to_string()))?;
                size += frame.len() as u64;
                if size > INLINE_HASH_BYTES as u64 * 4 {
                    return Err(s3_error!(IncompleteBody, "the body is longer than its Content-Length"));
                }
                hasher.update(&frame);
                buf.extend_from_slice(&frame);
            }
            let bytes = match seal {
                None => buf.freeze(),
                Some(s) => Bytes::from(strata_sse::StreamSealer::seal_all(&s.dek, &buf).map_err(|e| s3_error!(InternalError, "sealing: {e}"))?),
            };
            let blob = self.router.put_bytes(opts, bytes).await.map_err(router_err)?;
            (blob, size, hasher.finalize())
        } else {
            let size = Arc::new(AtomicU64::new(0));
            let hasher = BodyHasher::start();
            let (feed, counted) = (hasher.feed.clone(), size.clone());
            let tee = body.then(move |frame| {
                let (feed, counted) = (feed.clone(), counted.clone());
                async move {
                    if let Ok(b) = &frame {
                        counted.fetch_add(b.len() as u64, Ordering::Relaxed);
                        feed.send(b.clone()).await;
                    }
                    frame
                }
            });
            let put = match seal {
                None => self.router.put_stream(opts, Box::pin(tee)).await,
                Some(s) => self.router.put_stream(opts, sealing(tee.boxed(), &s.dek)).await,
            };
            let md5 = hasher.finish().await?;
            let size = size.load(Ordering::Relaxed);
            let put = match put {
                Err(strata_router::RouterError::IncompleteBody(m)) => Err(body_err(&m)),
                other => other.map_err(router_err),
            };
            (put?, size, md5)
        };
        if let Some(want) = want
            && want != md5
        {
            self.free(blob).await;
            return Err(s3_error!(BadDigest, "the Content-MD5 you specified did not match what we received"));
        }
        let md5 = seal.map_or(md5, |s| s.etag_of(md5));
        let computed = extra.and_then(|e| e.lock().ok().and_then(|mut g| g.take())).map(|h| h.finalize()).unwrap_or_default();
        match sums.check(computed) {
            Ok(checksums) => Ok(Stored { blob, size, md5, checksums, started_ms }),
            Err(e) => {
                self.free(blob).await;
                Err(e)
            }
        }
    }

    /// Deletes a blob no name points at any more (failures are logged: the
    /// blob is unreachable either way).
    pub(crate) async fn free(&self, blob: BlobId) {
        if let Err(e) = self.router.delete(blob).await {
            tracing::warn!(%blob, error = %e, "could not free an unreachable blob");
        }
    }

    /// Frees an object's blob once its name is gone. A chunked blob may
    /// still be streaming to readers that opened it before: it is given a
    /// short TTL instead (durable, so a crash cannot leak it), and the
    /// engine drops it and its chunks when that expires. A simple blob is
    /// read in one piece, so it is deleted at once.
    async fn retire(&self, blob: BlobId) {
        if blob.kind() != strata_types::BlobKind::Composite {
            return self.free(blob).await;
        }
        if let Err(e) = self.router.update_ttl(blob, Some(RETIRE_GRACE_MS)).await {
            tracing::warn!(%blob, error = %e, "could not retire a replaced chunked blob; deleting it now");
            self.free(blob).await;
        }
    }

    /// Frees what an op replaced (an aborted upload's parts a few at a
    /// time, so their deletes share fsyncs).
    pub(crate) async fn free_outcome(&self, out: Outcome) {
        if let Some(o) = out.replaced {
            self.retire(o.blob).await;
        }
        futures_util::stream::iter(out.parts).for_each_concurrent(FREES_IN_FLIGHT, |p| self.free(p.blob)).await;
    }
}
