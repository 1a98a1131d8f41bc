//! Strata's S3 API, on `s3s`: the protocol (routing, XML, SigV4 headers,
//! presigned URLs and streaming payloads) is the crate's; what this crate
//! adds is Strata's own: buckets and object names from the name index
//! (`strata-names`), bytes in blobs through the router, multipart uploads
//! completed by stitching the parts' chunks into one composite blob (no
//! copy), lifecycle expiration mapped onto blob TTLs, and access keys with
//! per-bucket grants.
//!
//! A leaf crate: only the `strata` binary depends on it, so the rest of the
//! workspace builds without `s3s`.

mod access;
mod convert;
mod md5x;

/// MD5 throughput, for benchmarks: see [`md5x::throughput`].
pub use md5x::throughput as md5_throughput;
mod ops;
mod store;

pub use access::{KeyAccess, KeyAuth, VirtualHosts};

use futures_util::FutureExt;
use s3s::service::{S3Service, S3ServiceBuilder};
use std::sync::Arc;
use std::time::Duration;
use strata_names::NameIndex;
use strata_router::Router;
use strata_types::Clock;

/// Called once per S3 operation with its name, status and seconds taken
/// (the server turns it into Prometheus metrics).
pub type Observer = Arc<dyn Fn(&'static str, u16, f64) + Send + Sync>;

/// S3 settings.
#[derive(Debug, Clone)]
pub struct S3Options {
    /// Region reported to clients.
    pub region: String,
    /// Base domains for virtual-host-style requests (`bucket.DOMAIN`);
    /// any other host is path-style.
    pub domains: Vec<String>,
    /// Smallest part but the last of a multipart upload (S3: 5 MiB).
    pub min_part_bytes: u64,
}

impl Default for S3Options {
    fn default() -> Self {
        Self { region: "us-east-1".into(), domains: vec![], min_part_bytes: 5 << 20 }
    }
}

/// The S3 implementation over a router and a name index.
pub struct StrataS3 {
    router: Arc<Router>,
    names: Arc<dyn NameIndex>,
    clock: Arc<dyn Clock>,
    opts: S3Options,
    observer: Option<Observer>,
}

impl StrataS3 {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}

/// Builds the S3 service: the implementation, SigV4 against the name
/// index's access keys, grants and public buckets, virtual hosts.
pub fn service(router: Arc<Router>, names: Arc<dyn NameIndex>, clock: Arc<dyn Clock>, opts: S3Options, observer: Option<Observer>) -> S3Service {
    let domains = opts.domains.clone();
    let s3 = StrataS3 { router, names: names.clone(), clock, opts, observer };
    let mut b = S3ServiceBuilder::new(s3);
    b.set_auth(KeyAuth::new(names.clone()));
    b.set_access(KeyAccess::new(names));
    b.set_host(VirtualHosts::new(domains));
    b.build()
}

/// Serves `svc` on `listener` until `shutdown` resolves.
pub async fn serve(listener: tokio::net::TcpListener, svc: S3Service, shutdown: impl std::future::Future<Output = ()>) -> std::io::Result<()> {
    let shutdown = shutdown.fuse();
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "S3 accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let svc = svc.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let conn = hyper::server::conn::http1::Builder::new().keep_alive(true).serve_connection(io, svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "S3 connection ended");
            }
        });
    }
}

/// Removes the names of expired objects every `period` (their blobs expire
/// in the engine by themselves); runs until the process ends.
pub fn spawn_expiry_sweeper(names: Arc<dyn NameIndex>, clock: Arc<dyn Clock>, period: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            if let Err(e) = sweep_expired(&*names, clock.now_ms()).await {
                tracing::warn!(error = %e, "could not remove expired names");
            }
        }
    });
}

/// Removes the names of objects expired at `now_ms` (at most 10,000 per
/// call), each only if it still names the expired blob; returns how many.
pub async fn sweep_expired(names: &dyn NameIndex, now_ms: u64) -> Result<usize, strata_names::NameError> {
    let expired: Vec<_> = strata_names::read(names, |s| {
        s.buckets
            .iter()
            .flat_map(|(b, bucket)| bucket.objects.iter().filter(|(_, o)| o.expired(now_ms)).map(move |(k, o)| (b.clone(), k.clone(), o.blob)))
            .take(10_000)
            .collect()
    });
    let mut removed = 0;
    for (bucket, key, blob) in expired {
        if names.apply(strata_names::NameOp::DeleteObject { bucket, key, blob: Some(blob) }).await?.replaced.is_some() {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_names::{EmbeddedIndex, NameOp, ObjectMeta};
    use strata_types::{BlobId, BlobKind};

    fn object(n: u8, expiry_ms: u64) -> ObjectMeta {
        let blob = BlobId::from_parts(BlobKind::Simple, 0, [n; 16]);
        ObjectMeta { blob, size: 1, etag: String::new(), content_type: String::new(), meta: vec![], modified_ms: 1, expiry_ms, parts: 0 }
    }

    #[tokio::test]
    async fn the_sweeper_removes_only_expired_names() {
        let dir = tempfile::tempdir().unwrap();
        let names = EmbeddedIndex::open(dir.path()).unwrap();
        names.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).await.unwrap();
        for (key, n, expiry) in [("old", 1, 100), ("forever", 2, 0), ("later", 3, 10_000)] {
            names.apply(NameOp::PutObject { bucket: "b".into(), key: key.into(), object: object(n, expiry), if_absent: false }).await.unwrap();
        }
        assert_eq!(sweep_expired(&names, 50).await.unwrap(), 0);
        assert_eq!(sweep_expired(&names, 200).await.unwrap(), 1);
        let keys: Vec<String> = strata_names::read(&names, |s| s.buckets["b"].objects.keys().cloned().collect());
        assert_eq!(keys, vec!["forever", "later"]);
        assert_eq!(sweep_expired(&names, 20_000).await.unwrap(), 1);
    }
}
