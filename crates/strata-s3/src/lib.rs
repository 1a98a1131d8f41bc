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
            let now = clock.now_ms();
            let expired: Vec<_> = strata_names::read(&*names, |s| {
                s.buckets
                    .iter()
                    .flat_map(|(b, bucket)| bucket.objects.iter().filter(|(_, o)| o.expired(now)).map(move |(k, o)| (b.clone(), k.clone(), o.blob)))
                    .take(10_000)
                    .collect()
            });
            for (bucket, key, blob) in expired {
                if let Err(e) = names.apply(strata_names::NameOp::DeleteObject { bucket, key, blob: Some(blob) }).await {
                    tracing::warn!(error = %e, "could not remove an expired name");
                    break;
                }
            }
        }
    });
}
