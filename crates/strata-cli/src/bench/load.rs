//! The load generator's pieces every benchmark shares: a lean GET client,
//! timed phases of concurrent workers, percentiles, and the wait for a
//! freshly started node to finish starting.

use anyhow::Result;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A minimal keep-alive HTTP/1.1 GET reader for the load generator: one
/// connection, one reused 1 MiB buffer, bytes counted and dropped, like the
/// loopback probe's receiver. A general client's per-frame allocations would
/// otherwise be charged to the server, since both share this machine's cores.
pub(crate) struct RawGetter {
    stream: Box<dyn Stream>,
    host: String,
    buf: Vec<u8>,
    signer: Option<Arc<strata_auth::Signer>>,
}

/// A connection the getter reads: TCP, or TLS over it.
pub(crate) trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

impl RawGetter {
    /// A connection to `addr`, signing each GET with `signer` (SigV4, as
    /// every client does) when given.
    pub(crate) async fn connect(addr: std::net::SocketAddr, signer: Option<Arc<strata_auth::Signer>>) -> Result<Self> {
        Self::connect_with(addr, signer, None).await
    }

    /// [`RawGetter::connect`], over TLS with `tls` when given.
    pub(crate) async fn connect_with(
        addr: std::net::SocketAddr,
        signer: Option<Arc<strata_auth::Signer>>,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let stream: Box<dyn Stream> = match tls {
            Some(cfg) => {
                let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
                Box::new(tokio_rustls::TlsConnector::from(cfg).connect(name, tcp).await?)
            }
            None => Box::new(tcp),
        };
        Ok(Self { stream, host: addr.to_string(), buf: vec![0u8; 1 << 20], signer })
    }

    /// GETs `/id`, checks the status is 200, and returns the body length read.
    pub(crate) async fn get(&mut self, id: &str) -> Result<u64> {
        let head = self.head(id);
        self.send(&head, id).await
    }

    /// The request head of a GET of `/id`, signed now when the getter signs
    /// (valid for the server's clock-skew window, 15 minutes): a load
    /// generator can build its requests before its clock starts.
    pub(crate) fn head(&self, id: &str) -> Vec<u8> {
        match &self.signer {
            None => format!("GET /{id} HTTP/1.1\r\nHost: {}\r\n\r\n", self.host),
            Some(signer) => {
                let path = format!("/{id}");
                let headers: [(&str, &[u8]); 1] = [("host", self.host.as_bytes())];
                let view = strata_auth::RequestView { method: "GET", path: &path, query: "", headers: &headers };
                let sig = signer.sign(&view, strata_auth::sigv4::UNSIGNED_PAYLOAD, strata_types::Clock::now_ms(&strata_types::SystemClock) / 1000);
                format!(
                    "GET {path} HTTP/1.1\r\nHost: {}\r\nx-amz-date: {}\r\nx-amz-content-sha256: {}\r\nAuthorization: {}\r\n\r\n",
                    self.host, sig.amz_date, sig.content_sha256, sig.authorization
                )
            }
        }
        .into_bytes()
    }

    /// Sends a head from [`RawGetter::head`] (of a GET of `/id`), checks the
    /// status is 200, and returns the body length read.
    pub(crate) async fn send(&mut self, head: &[u8], id: &str) -> Result<u64> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.stream.write_all(head).await?;
        // Read until the end of the head; the rest of the buffer is body.
        let mut filled = 0;
        let head_end = loop {
            let n = self.stream.read(&mut self.buf[filled..]).await?;
            anyhow::ensure!(n > 0, "connection closed in the response head");
            filled += n;
            if let Some(p) = self.buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            anyhow::ensure!(filled < self.buf.len(), "response head too large");
        };
        let head = std::str::from_utf8(&self.buf[..head_end])?;
        anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "GET /{id}: {}", head.lines().next().unwrap_or(""));
        let len: u64 = head
            .lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")).map(|(_, v)| v.trim().parse()))
            .ok_or_else(|| anyhow::anyhow!("no content-length"))??;
        let mut got = (filled - head_end) as u64;
        while got < len {
            let want = ((len - got) as usize).min(self.buf.len());
            let n = self.stream.read(&mut self.buf[..want]).await?;
            anyhow::ensure!(n > 0, "connection closed after {got} of {len} bytes");
            got += n as u64;
        }
        Ok(got)
    }
}

pub(crate) fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// Runs `conc` workers for `secs`; each calls `op(worker, i)` in a loop.
pub(crate) async fn phase<F, Fut>(conc: usize, secs: f64, op: F) -> Result<(u64, f64, Vec<u64>)>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let op = Arc::new(op);
    let t = Instant::now();
    let deadline = t + Duration::from_secs_f64(secs);
    let mut workers = Vec::new();
    for w in 0..conc {
        let op = op.clone();
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0u64;
            // Bounded: stops at the deadline, and after at least one op.
            while lat.is_empty() || Instant::now() < deadline {
                let s = Instant::now();
                op(w, i).await?;
                lat.push(s.elapsed().as_micros() as u64);
                i += 1;
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await??);
    }
    let elapsed = t.elapsed().as_secs_f64();
    all.sort_unstable();
    Ok((all.len() as u64, elapsed, all))
}

/// A node's tail cache as its `/metrics` text says: (bytes faulted in,
/// size), the two gauges [`wait_for_tail_cache`] compares.
pub(crate) fn tail_cache_gauges(metrics: &str) -> (u64, u64) {
    let gauge = |name: &str| -> u64 { metrics.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse::<f64>().ok())).unwrap_or(0.0) as u64 };
    (gauge("strata_engine_tail_cache_ready_bytes "), gauge("strata_engine_tail_cache_bytes "))
}

/// Waits until a freshly started node has faulted its tail cache in
/// (`poll` answers the ready bytes and the cache's size), at most 120 s,
/// printing progress. The node faults the cache in on an idle-priority
/// thread, but on a VM each fresh page is a host fault that no guest
/// priority holds back: a 4 KiB PUT phase started right after a node lost
/// 30% of its CPU samples to it. The rows measure a node that has finished
/// starting.
pub(crate) async fn wait_for_tail_cache<F, Fut>(name: &str, mut poll: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(u64, u64)>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (ready, size) = poll().await?;
        if ready >= size {
            return Ok(());
        }
        if Instant::now() > deadline {
            eprintln!("{name}: the tail cache is still faulting in ({} of {} MiB) after 120 s; measuring anyway", ready >> 20, size >> 20);
            return Ok(());
        }
        eprintln!("{name}: waiting for the tail cache to fault in ({} of {} MiB) ...", ready >> 20, size >> 20);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
