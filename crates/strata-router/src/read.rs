//! The read path: a blob's record from the first replica with a whole
//! copy (local zone first, then a proxy request to the others), and read
//! repair of the damaged copies it met on the way.

use crate::{ReplicaError, ReplicaHandle, Router, RouterError, Unavailable, summarize};
use std::sync::Arc;
use strata_engine::{BlobRecord, EngineError, WriteOp};
use strata_types::{BlobId, Key};

impl Router {
    /// Reads from the partition's local-zone replicas in random order until
    /// one answers with the record or an authoritative answer (deleted,
    /// expired); on a miss, asks the other zones' replicas the same way (a
    /// proxy request). "Not found" only when every replica asked answered
    /// so; when some did not answer, the outcome is unknown (503).
    pub(crate) async fn read_record(&self, id: BlobId, with_data: bool) -> Result<BlobRecord, RouterError> {
        let (mut local, mut remote) = (self.view.replicas(id.partition()), self.view.remote_replicas(id.partition()));
        if local.is_empty() && remote.is_empty() && !self.view.has_partition(id.partition()) {
            self.view.catch_up().await;
            (local, remote) = (self.view.replicas(id.partition()), self.view.remote_replicas(id.partition()));
        }
        if local.is_empty() && remote.is_empty() {
            // A partition whose replicas all sit on down nodes or disks:
            // whether the blob exists is unknown, not "no".
            return Err(if self.view.has_partition(id.partition()) {
                Unavailable::NoReplicaAnswered { partition: id.partition(), failures: Vec::new() }.into()
            } else {
                RouterError::NoSuchPartition(id.partition())
            });
        }
        {
            use rand::seq::SliceRandom;
            let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            local.shuffle(&mut *rng);
            remote.shuffle(&mut *rng);
        }
        // The get policy's count of replicas is asked at once; the next ones
        // when those all miss, or when none has answered within
        // `hedge_after` (a slow node must not hold the get up).
        let fanout = self.policies().get.needed(local.len().max(1));
        let mut errors = Vec::new();
        let remote_start = local.len();
        let all: Vec<Arc<dyn ReplicaHandle>> = local.into_iter().chain(remote).collect();
        let mut next = 0;
        let mut pending = futures_util::stream::FuturesUnordered::new();
        // Asks the next group of replicas; counts a proxy get when the group
        // reaches the first replica of another zone.
        let ask_next = |next: &mut usize, pending: &mut futures_util::stream::FuturesUnordered<_>| {
            let end = (*next + fanout).min(all.len());
            if *next <= remote_start && remote_start < end && remote_start > 0 {
                self.stats.proxied_gets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            pending.extend((*next..end).map(|i| {
                let read = all[i].read(id.key(), with_data);
                async move { (i, read.await) }
            }));
            *next = end;
        };
        // Replicas that answered with a damaged copy: repaired from the
        // first whole copy found.
        let mut damaged = Vec::new();
        loop {
            if pending.is_empty() || next < all.len() && pending.len() < fanout {
                if next >= all.len() {
                    break;
                }
                ask_next(&mut next, &mut pending);
            }
            use futures_util::StreamExt;
            let answer = if next < all.len() {
                match tokio::time::timeout(self.config.hedge_after, pending.next()).await {
                    Ok(a) => a,
                    Err(_) => {
                        // Hedge: ask the next group too, and keep waiting for all.
                        ask_next(&mut next, &mut pending);
                        continue;
                    }
                }
            } else {
                pending.next().await
            };
            match answer {
                Some((i, Ok(rec))) => {
                    if !damaged.is_empty() {
                        let targets = damaged.iter().map(|d: &usize| all[*d].clone()).collect();
                        self.repair(id.key(), with_data.then(|| rec.clone()), all[i].clone(), targets);
                    }
                    return Ok(rec);
                }
                Some((_, Err(ReplicaError::Engine(e @ (EngineError::Deleted | EngineError::Expired))))) => return Err(e.into()),
                Some((i, Err(e @ ReplicaError::Engine(EngineError::Damaged { .. })))) => {
                    tracing::warn!(blob = %id, error = %e, "a replica holds a damaged copy; asking the others");
                    damaged.push(i);
                    errors.push(e);
                }
                Some((_, Err(e))) => errors.push(e),
                None => {}
            }
        }
        // Every replica answered, and none with a whole copy: damaged
        // copies make it an integrity error, never "not found".
        if errors.iter().all(|e| matches!(e, ReplicaError::Engine(EngineError::NotFound | EngineError::Damaged { .. }))) {
            if damaged.is_empty() {
                Err(RouterError::NotFound)
            } else {
                Err(RouterError::Corrupt(format!("every copy of blob {id} that answered is damaged: {}", summarize(&errors))))
            }
        } else {
            Err(Unavailable::NoReplicaAnswered { partition: id.partition(), failures: errors }.into())
        }
    }

    /// Read repair: writes a whole copy of `key` (`source`, or read again
    /// from `from` with its data) to each replica in `targets`, which
    /// answered with damaged copies. Runs in the background: the read that
    /// found the damage has its answer already.
    fn repair(&self, key: Key, source: Option<BlobRecord>, from: Arc<dyn ReplicaHandle>, targets: Vec<Arc<dyn ReplicaHandle>>) {
        use std::sync::atomic::Ordering::Relaxed;
        let stats = self.stats.clone();
        tokio::spawn(async move {
            let rec = match source {
                Some(rec) => rec,
                None => match from.read(key.clone(), true).await {
                    Ok(rec) => rec,
                    Err(e) => {
                        tracing::warn!(key = %key, error = %e, "read repair could not fetch a whole copy");
                        stats.read_repair_failures.fetch_add(targets.len() as u64, Relaxed);
                        return;
                    }
                },
            };
            let mut props = rec.props.clone();
            props.expiry_ms = rec.expiry_ms;
            let actor: Option<Arc<str>> = (!rec.actor.is_empty()).then(|| Arc::from(rec.actor.as_str()));
            for t in targets {
                let op = WriteOp::ReplicaPut { key: key.clone(), props: props.clone(), data: rec.data.clone(), created_ms: rec.created_ms };
                match t.write_as(op, actor.clone()).await {
                    Ok(_) => {
                        tracing::info!(key = %key, "read repair wrote a whole copy over a damaged one");
                        stats.read_repairs.fetch_add(1, Relaxed);
                    }
                    Err(e) => {
                        tracing::warn!(key = %key, error = %e, "read repair failed");
                        stats.read_repair_failures.fetch_add(1, Relaxed);
                    }
                }
            }
        });
    }
}
