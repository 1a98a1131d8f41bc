//! The machine's limits each benchmark row is a ratio to, measured in the
//! same run: the data directory's fsync'd sequential write and `O_DIRECT`
//! read, and loopback TCP.

use anyhow::{Context, Result};
use rand::RngCore;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const MB: f64 = 1e6;

/// The disk's own sequential write rate: O_DIRECT writes of 4 MiB from an
/// aligned buffer, an fdatasync every 64 MiB, so the page cache's cost of
/// taking fresh pages (see `scripts/page-cost.py`) is not in the figure.
pub(crate) fn disk_direct_limit(dir: &Path, secs: f64) -> Result<f64> {
    use std::os::unix::fs::OpenOptionsExt;
    let block = 4 << 20;
    let mut raw = vec![0u8; block + 4096];
    let at = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[at..at + block];
    rand::rng().fill_bytes(buf);
    let path = dir.join("disk-probe-direct");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_DIRECT).open(&path)?;
    let t = Instant::now();
    let deadline = t + Duration::from_secs_f64(secs);
    let mut written = 0u64;
    while Instant::now() < deadline {
        for _ in 0..16 {
            f.write_all(buf)?;
            written += block as u64;
        }
        f.sync_data()?;
    }
    let rate = written as f64 / t.elapsed().as_secs_f64() / MB;
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(rate)
}

/// Sustained sequential write for `secs`, split over `streams` files written
/// in parallel: 1 MiB writes with an fdatasync after every 16 MiB, which is
/// what group commit does with a batch of 16 one-MiB puts. Measured over the
/// same time span as a benchmark phase so burst absorption by a virtual
/// disk's cache affects the limit and the PUTs alike.
pub(crate) fn disk_write_limit(dir: &Path, secs: f64, streams: usize) -> Result<f64> {
    let block = 1 << 20;
    let mut buf = vec![0u8; block];
    rand::rng().fill_bytes(&mut buf);
    let buf = Arc::new(buf);
    let t = Instant::now();
    let deadline = t + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..streams)
        .map(|i| {
            let (path, buf) = (dir.join(format!("disk-probe-{i}")), buf.clone());
            std::thread::spawn(move || probe_stream(&path, &buf, |_| Instant::now() < deadline))
        })
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.join().map_err(|_| anyhow::anyhow!("disk probe thread panicked"))??;
    }
    Ok(total as f64 / t.elapsed().as_secs_f64() / MB)
}

/// One probe stream: `buf` written to `path` 16 times between fdatasyncs
/// while `more(bytes written)` says so; the bytes written.
fn probe_stream(path: &Path, buf: &[u8], more: impl Fn(u64) -> bool) -> std::io::Result<u64> {
    let mut f = std::fs::File::create(path)?;
    let mut written = 0u64;
    while more(written) {
        for _ in 0..16 {
            f.write_all(buf)?;
            written += buf.len() as u64;
        }
        f.sync_data()?;
    }
    Ok(written)
}

/// The rate of writing `bytes` now, as [`disk_write_limit`] writes (1 MiB
/// writes, an fdatasync after every 16 MiB, one stream): the limit of a
/// phase that writes that much, measured next to it.
pub(crate) fn disk_write_bytes(dir: &Path, bytes: u64) -> Result<f64> {
    let mut buf = vec![0u8; 1 << 20];
    rand::rng().fill_bytes(&mut buf);
    let path = dir.join("disk-probe-now");
    let t = Instant::now();
    let written = probe_stream(&path, &buf, |w| w < bytes.max(16 << 20));
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    Ok(written? as f64 / secs / MB)
}

/// O_DIRECT sequential read of the probe file: the device's read rate,
/// bypassing the page cache.
pub(crate) fn disk_read_limit(dir: &Path) -> Result<f64> {
    let block = 1 << 20;
    let layout = std::alloc::Layout::from_size_align(block, 4096)?;
    // SAFETY: the layout has a non-zero size; the buffer is freed below.
    let ptr = unsafe { std::alloc::alloc(layout) };
    anyhow::ensure!(!ptr.is_null(), "allocation failed");
    // SAFETY: ptr is valid for `block` bytes until dealloc.
    let aligned = unsafe { std::slice::from_raw_parts_mut(ptr, block) };
    let read = (|| -> Result<f64> {
        let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(dir.join("disk-probe-0"))?;
        let t = Instant::now();
        let mut total = 0u64;
        loop {
            let n = f.read(aligned)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        Ok(total as f64 / t.elapsed().as_secs_f64() / MB)
    })();
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(ptr, layout) };
    read.context("O_DIRECT read of the probe file")
}

/// (single-stream fsync'd write, parallel fsync'd write, O_DIRECT read), MB/s.
pub(crate) fn disk_limits(dir: &Path, secs: f64, streams: usize) -> Result<(f64, f64, f64)> {
    let single = disk_write_limit(dir, secs, 1)?;
    let read = disk_read_limit(dir)?;
    let parallel = disk_write_limit(dir, secs, streams)?;
    for i in 0..streams {
        let _ = std::fs::remove_file(dir.join(format!("disk-probe-{i}")));
    }
    Ok((single, parallel, read))
}

/// Loopback TCP bandwidth: `streams` connections each sending 1 MiB writes
/// for `secs`, received and counted in the same process (as a GET's bytes are).
pub(crate) async fn loopback_limit(secs: f64, streams: usize) -> Result<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        let mut tasks = Vec::new();
        for _ in 0..streams {
            let (mut s, _) = listener.accept().await?;
            tasks.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 20];
                let mut n = 0u64;
                loop {
                    let r = s.read(&mut buf).await?;
                    if r == 0 {
                        break;
                    }
                    n += r as u64;
                }
                Ok::<_, std::io::Error>(n)
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await??;
        }
        Ok::<_, anyhow::Error>(total)
    });
    let t = Instant::now();
    let deadline = t + Duration::from_secs_f64(secs);
    let mut senders = Vec::new();
    for _ in 0..streams {
        senders.push(tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            let buf = vec![7u8; 1 << 20];
            while Instant::now() < deadline {
                s.write_all(&buf).await?;
            }
            s.shutdown().await?;
            Ok::<_, std::io::Error>(())
        }));
    }
    for s in senders {
        s.await??;
    }
    let total = server.await??;
    Ok(total as f64 / t.elapsed().as_secs_f64() / MB)
}

/// The loopback limit for a GET row: the best of one stream and `conc`
/// streams, measured right before the row so both see the same machine.
pub(crate) async fn loopback_for(conc: usize, secs: f64) -> Result<f64> {
    let one = loopback_limit(secs, 1).await?;
    Ok(if conc > 1 { one.max(loopback_limit(secs, conc).await?) } else { one })
}
