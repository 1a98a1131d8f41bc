//! Zero-cost failure detection (Ambry §4.2.3, Fig. 5): no heartbeats. The
//! router counts consecutive transport failures of each node; enough of
//! them within a check period mark the node temporarily down for a wait
//! period, during which requests skip it. After the wait the node is
//! temporarily available: the next request probes it, and one failure sends
//! it straight back down while one success clears it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use strata_types::Clock;

/// Tunables.
#[derive(Debug, Clone, Copy)]
pub struct FailureDetectorConfig {
    /// Failures count together only within this window, ms.
    pub check_period_ms: u64,
    /// Consecutive failures within the window that mark a node down.
    pub failures_to_down: u32,
    /// How long a node stays down before it is probed again, ms.
    pub wait_ms: u64,
}

impl Default for FailureDetectorConfig {
    fn default() -> Self {
        Self { check_period_ms: 10_000, failures_to_down: 3, wait_ms: 5_000 }
    }
}

/// A node's health as the router sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeHealth {
    /// Serving (or not known to fail).
    Available,
    /// Marked down: requests skip it until the wait ends.
    Down {
        /// When it becomes temporarily available, ms.
        until_ms: u64,
    },
    /// The wait ended: the next request decides.
    TemporarilyAvailable,
}

#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    consecutive: u32,
    window_start_ms: u64,
    down_until_ms: Option<u64>,
}

/// Failure detector shared by every request of a router.
pub struct FailureDetector {
    config: FailureDetectorConfig,
    clock: Arc<dyn Clock>,
    nodes: Mutex<HashMap<u64, Entry>>,
}

impl FailureDetector {
    /// A detector with `config`, reading time from `clock`.
    pub fn new(config: FailureDetectorConfig, clock: Arc<dyn Clock>) -> Self {
        Self { config, clock, nodes: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node's health now.
    pub fn health(&self, node: u64) -> NodeHealth {
        let now = self.clock.now_ms();
        match self.lock().get(&node).and_then(|e| e.down_until_ms) {
            Some(until) if now < until => NodeHealth::Down { until_ms: until },
            Some(_) => NodeHealth::TemporarilyAvailable,
            None => NodeHealth::Available,
        }
    }

    /// Whether a request may go to the node now.
    pub fn allow(&self, node: u64) -> bool {
        !matches!(self.health(node), NodeHealth::Down { .. })
    }

    /// The node answered (whatever the answer): it is available.
    pub fn success(&self, node: u64) {
        let mut g = self.lock();
        if g.get(&node).is_some_and(|e| e.consecutive > 0 || e.down_until_ms.is_some()) {
            g.insert(node, Entry::default());
        }
    }

    /// The node did not answer.
    pub fn failure(&self, node: u64) {
        let now = self.clock.now_ms();
        let mut g = self.lock();
        let e = g.entry(node).or_default();
        if let Some(until) = e.down_until_ms {
            if now >= until {
                // The probe of a temporarily available node failed.
                e.down_until_ms = Some(now + self.config.wait_ms);
            }
            return;
        }
        if e.consecutive == 0 || now.saturating_sub(e.window_start_ms) > self.config.check_period_ms {
            e.consecutive = 0;
            e.window_start_ms = now;
        }
        e.consecutive += 1;
        if e.consecutive >= self.config.failures_to_down {
            e.down_until_ms = Some(now + self.config.wait_ms);
        }
    }

    /// Every node with a non-default state.
    pub fn nodes(&self) -> Vec<(u64, NodeHealth)> {
        let ids: Vec<u64> = self.lock().keys().copied().collect();
        ids.into_iter().map(|n| (n, self.health(n))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_types::ManualClock;

    #[test]
    fn down_after_consecutive_failures_then_probed() {
        let clock = ManualClock::new(1_000);
        let d = FailureDetector::new(FailureDetectorConfig { check_period_ms: 1_000, failures_to_down: 3, wait_ms: 500 }, Arc::new(clock.clone()));
        d.failure(7);
        d.failure(7);
        assert!(d.allow(7), "two failures are not enough");
        // Failures spread beyond the check period do not add up.
        clock.advance(2_000);
        d.failure(7);
        assert!(d.allow(7));
        d.failure(7);
        d.failure(7);
        assert!(matches!(d.health(7), NodeHealth::Down { .. }));
        assert!(!d.allow(7));
        clock.advance(500);
        assert_eq!(d.health(7), NodeHealth::TemporarilyAvailable);
        // A failed probe sends it straight back down.
        d.failure(7);
        assert!(!d.allow(7));
        clock.advance(500);
        d.success(7);
        assert_eq!(d.health(7), NodeHealth::Available);
        // A success in between resets the count.
        d.failure(7);
        d.failure(7);
        d.success(7);
        d.failure(7);
        assert!(d.allow(7));
    }
}
