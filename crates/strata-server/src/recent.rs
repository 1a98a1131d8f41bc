//! The last ten minutes of PUTs and GETs, in 10-second windows: rates and
//! p99 latencies for the console's overview charts (`GET
//! /admin/metrics/recent`). Prometheus keeps the long history; this is
//! what a node can show of itself with nothing else running.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use strata_types::Clock;

/// Seconds per window.
pub const WINDOW_SECS: u64 = 10;
/// Windows kept.
pub const WINDOWS: usize = 60;
/// Latency buckets: the upper bound of bucket `i` is 50 µs × 2^i.
const BUCKETS: usize = 24;

/// Which kind of request a sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A write of an object or blob.
    Put,
    /// A read of one.
    Get,
}

#[derive(Debug, Clone)]
struct Window {
    start_ms: u64,
    count: [u64; 2],
    latency: [[u32; BUCKETS]; 2],
}

/// The recent windows of one node.
pub struct Recent {
    clock: Arc<dyn Clock>,
    windows: Mutex<VecDeque<Window>>,
}

fn bucket(seconds: f64) -> usize {
    let mut bound = 0.000_05;
    for i in 0..BUCKETS {
        if seconds <= bound {
            return i;
        }
        bound *= 2.0;
    }
    BUCKETS - 1
}

fn p99_ms(latency: &[u32; BUCKETS]) -> Option<f64> {
    let total: u64 = latency.iter().map(|&n| u64::from(n)).sum();
    if total == 0 {
        return None;
    }
    let want = (total as f64 * 0.99).ceil() as u64;
    let mut seen = 0u64;
    for (i, &n) in latency.iter().enumerate() {
        seen += u64::from(n);
        if seen >= want {
            return Some(0.05 * f64::from(1u32 << i));
        }
    }
    None
}

impl Recent {
    /// Empty, reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock, windows: Mutex::new(VecDeque::with_capacity(WINDOWS + 1)) }
    }

    /// Records one request of `kind` that took `seconds`.
    pub fn record(&self, kind: Kind, seconds: f64) {
        let start_ms = self.clock.now_ms() / (WINDOW_SECS * 1000) * (WINDOW_SECS * 1000);
        let k = kind as usize;
        let mut w = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.back().is_none_or(|b| b.start_ms != start_ms) {
            w.push_back(Window { start_ms, count: [0; 2], latency: [[0; BUCKETS]; 2] });
            while w.len() > WINDOWS {
                w.pop_front();
            }
        }
        if let Some(b) = w.back_mut() {
            b.count[k] += 1;
            let slot = &mut b.latency[k][bucket(seconds)];
            *slot = slot.saturating_add(1);
        }
    }

    /// The windows of the last ten minutes, oldest first, every one of
    /// them (a window with no request is zeros), as JSON.
    pub fn json(&self) -> serde_json::Value {
        let now = self.clock.now_ms() / (WINDOW_SECS * 1000) * (WINDOW_SECS * 1000);
        let w = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let span = WINDOW_SECS * 1000;
        let first = now.saturating_sub(span * (WINDOWS as u64 - 1));
        let rows: Vec<serde_json::Value> = (0..WINDOWS as u64)
            .map(|i| first + i * span)
            .map(|start| {
                let win = w.iter().find(|x| x.start_ms == start);
                let rate = |k: usize| win.map_or(0.0, |x| x.count[k] as f64 / WINDOW_SECS as f64);
                let p99 = |k: usize| win.and_then(|x| p99_ms(&x.latency[k]));
                serde_json::json!({
                    "start_ms": start,
                    "puts_per_s": rate(0), "gets_per_s": rate(1),
                    "put_p99_ms": p99(0), "get_p99_ms": p99(1),
                })
            })
            .collect();
        serde_json::json!({ "window_secs": WINDOW_SECS, "windows": rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_count_rates_and_p99_and_age_out() {
        let clock = Arc::new(strata_types::ManualClock::new(1_000_000));
        let r = Recent::new(clock.clone());
        for _ in 0..99 {
            r.record(Kind::Put, 0.001);
        }
        r.record(Kind::Put, 0.5);
        r.record(Kind::Get, 0.0001);
        let v = r.json();
        let rows = v["windows"].as_array().unwrap();
        assert_eq!(rows.len(), WINDOWS);
        let last = rows.last().unwrap();
        assert_eq!(last["puts_per_s"], 10.0);
        assert_eq!(last["gets_per_s"], 0.1);
        // 99 of 100 at 1 ms: the p99 is the 1 ms bucket's bound (1.6 ms).
        assert_eq!(last["put_p99_ms"], 1.6);
        assert!(rows[0]["put_p99_ms"].is_null());
        clock.advance(WINDOW_SECS * 1000 * WINDOWS as u64);
        r.record(Kind::Get, 0.001);
        let v = r.json();
        let total: f64 = v["windows"].as_array().unwrap().iter().map(|w| w["puts_per_s"].as_f64().unwrap()).sum();
        assert_eq!(total, 0.0, "ten minutes later the puts are gone");
    }
}
