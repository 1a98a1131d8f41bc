//! The map for nodes, frontends and embedded routers that are not members
//! of the metadata group: pulled from the members (`GET /meta/v1/map`)
//! every period, and at once when asked (a node answered with a newer
//! epoch). Only newer maps are published.

use crate::codec::decode_map;
use crate::map::ClusterMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// A pulled map: a receiver of every newer map, and a way to ask for a
/// refresh now.
#[derive(Clone)]
pub struct MapFeed {
    rx: watch::Receiver<Arc<ClusterMap>>,
    refresh: Arc<Notify>,
}

impl MapFeed {
    /// Starts pulling from `members` (`host:port` of metadata members),
    /// beginning with `initial` (a cached map, or the empty one).
    pub fn pull(members: Vec<String>, initial: Arc<ClusterMap>, period: Duration) -> Self {
        let (tx, rx) = watch::channel(initial);
        let refresh = Arc::new(Notify::new());
        let wake = refresh.clone();
        tokio::spawn(async move {
            let http = strata_net::Client::new();
            loop {
                for addr in &members {
                    if let Ok(map) = fetch_map(&http, addr).await {
                        if map.epoch > tx.borrow().epoch {
                            tx.send_replace(Arc::new(map));
                        }
                        break;
                    }
                }
                if tx.is_closed() {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = wake.notified() => {}
                }
            }
        });
        Self { rx, refresh }
    }

    /// The map as last pulled; `changed()` wakes on every newer one.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterMap>> {
        self.rx.clone()
    }

    /// A node reported epoch `epoch`: pull now if it is newer than ours.
    pub fn saw_epoch(&self, epoch: u64) {
        if epoch > self.rx.borrow().epoch {
            self.refresh.notify_one();
        }
    }
}

/// Fetches and checks the map from one member.
pub async fn fetch_map(http: &strata_net::Client, addr: &str) -> Result<ClusterMap, String> {
    let b = http.get(addr, "/meta/v1/map", Duration::from_secs(3)).await.map_err(|e| e.to_string())?;
    decode_map(&b).map_err(|e| e.to_string())
}
