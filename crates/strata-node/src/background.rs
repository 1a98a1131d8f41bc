//! The node's housekeeping over its disks: compaction and the space monitor.

use crate::Disks;
use crate::worker::{Next, PassFailed, Workers};
use std::sync::Arc;
use std::time::Duration;

/// Re-checks every replica's capacity and free space every second (the
/// worker `space-monitor`), so partitions that filled up return to service
/// once space is freed.
pub fn start_space_monitor(workers: &Workers, disks: Arc<Disks>) {
    workers.spawn("space-monitor", Next::Now, move || {
        let disks = disks.clone();
        async move {
            tokio::task::spawn_blocking(move || disks.refresh_read_only())
                .await
                .map_err(|e| PassFailed::new(format!("space monitor panicked: {e}"), Duration::from_secs(1)))?;
            Ok(Next::After(Duration::from_secs(1)))
        }
    });
}

/// Runs a compaction pass over every disk every `interval` (the worker
/// `compaction`), off the async threads.
pub fn start_compactor(workers: &Workers, disks: Arc<Disks>, interval: Duration) {
    workers.spawn("compaction", Next::After(interval), move || {
        let disks = disks.clone();
        async move {
            match tokio::task::spawn_blocking(move || disks.compact_all(false)).await {
                Ok(Ok(r)) => {
                    if r.segments_compacted > 0 {
                        tracing::info!(segments = r.segments_compacted, bytes = r.bytes_reclaimed, "compaction reclaimed space");
                    }
                    Ok(Next::After(interval))
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "compaction failed");
                    Err(PassFailed::new(format!("compaction failed: {e}"), interval))
                }
                Err(e) => Err(PassFailed::new(format!("compaction panicked: {e}"), interval)),
            }
        }
    });
}
