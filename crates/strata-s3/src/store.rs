//! Writing a request body into a blob while its MD5 (the ETag) is computed
//! beside it, and freeing the blobs an op made unreachable.

use crate::StrataS3;
use crate::convert::router_err;
use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use md5::{Digest, Md5};
use s3s::dto::StreamingBlob;
use s3s::{S3Error, s3_error};
use strata_names::Outcome;
use strata_router::PutOptions;
use strata_types::BlobId;

/// Bodies up to this size are hashed inline; bigger ones on a blocking
/// thread, in parallel with the write.
const INLINE_HASH_BYTES: i64 = 256 << 10;

/// How long a replaced chunked object stays readable for GETs that opened it.
const RETIRE_GRACE_MS: u64 = 10 * 60 * 1000;

/// A body written to a blob.
pub(crate) struct Stored {
    pub blob: BlobId,
    pub size: u64,
    pub md5: [u8; 16],
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
    /// Writes `body` to a new blob. With `content_md5` (base64), a body
    /// whose MD5 differs is deleted again and the put fails with BadDigest.
    pub(crate) async fn store(&self, body: Option<StreamingBlob>, length: Option<i64>, content_md5: Option<&str>, opts: PutOptions) -> Result<Stored, S3Error> {
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
        let (blob, size, md5) = if length.is_some_and(|l| l <= INLINE_HASH_BYTES) {
            let mut hasher = Md5::new();
            let mut size = 0u64;
            let mut buf = bytes::BytesMut::new();
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
            let blob = self.router.put_bytes(opts, buf.freeze()).await.map_err(router_err)?;
            (blob, size, <[u8; 16]>::from(hasher.finalize()))
        } else {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(32);
            let hasher = tokio::task::spawn_blocking(move || {
                let mut h = Md5::new();
                let mut size = 0u64;
                while let Some(b) = rx.blocking_recv() {
                    size += b.len() as u64;
                    h.update(&b);
                }
                (size, <[u8; 16]>::from(h.finalize()))
            });
            let tee = body.then(move |frame| {
                let tx = tx.clone();
                async move {
                    if let Ok(b) = &frame {
                        // The hasher only stops when the channel closes.
                        let _ = tx.send(b.clone()).await;
                    }
                    frame
                }
            });
            let put = self.router.put_stream(opts, Box::pin(tee)).await;
            let (size, md5) = hasher.await.map_err(|e| s3_error!(InternalError, "MD5 task: {e}"))?;
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
        Ok(Stored { blob, size, md5 })
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

    /// Frees what an op replaced.
    pub(crate) async fn free_outcome(&self, out: Outcome) {
        if let Some(o) = out.replaced {
            self.retire(o.blob).await;
        }
        for p in out.parts {
            self.free(p.blob).await;
        }
    }
}
