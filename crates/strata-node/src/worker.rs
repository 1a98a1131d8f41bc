//! The one way a node runs background work: a named worker that waits, runs
//! a pass, records how it went, and is told by the pass when to run again.
//!
//! Every loop of the node (the map feed, the reconciler, replication per
//! peer, the scrubber, the orphan sweep, compaction, the space monitor, the
//! full-partition reporter) is a worker of one [`Workers`] set, so an
//! operator sees them all in one list (`GET /admin/workers`, the
//! `strata_worker_*` metrics) and shutdown stops them all in one call.

use futures_util::future::BoxFuture;
use serde::Serialize;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// When a worker runs its next pass.
pub enum Next {
    /// At once (there is more to do).
    Now,
    /// After a pause.
    After(Duration),
    /// When the future completes (a map change, a request, a timer); if
    /// it answers false, the worker is finished instead (its source is gone).
    Until(BoxFuture<'static, bool>),
    /// Never: the worker is finished (its source is gone).
    Done,
}

impl Next {
    /// When `f` completes.
    pub fn until(f: impl Future<Output = ()> + Send + 'static) -> Self {
        Self::Until(Box::pin(async move {
            f.await;
            true
        }))
    }

    /// When `wake` is notified (a request), or `interval` after the wait
    /// starts (never, without one).
    pub fn requested_or(wake: &Arc<tokio::sync::Notify>, interval: Option<Duration>) -> Self {
        let wake = wake.clone();
        Self::until(async move {
            match interval {
                Some(every) => {
                    let _ = tokio::time::timeout(every, wake.notified()).await;
                }
                None => wake.notified().await,
            }
        })
    }

    /// At the next change `rx` sees after the value it has seen (a clone
    /// of a receiver has seen what the original has); finished when the
    /// sender is gone.
    pub fn on_change<T: Send + Sync + 'static>(mut rx: watch::Receiver<T>) -> Self {
        Self::Until(Box::pin(async move { rx.changed().await.is_ok() }))
    }
}

/// A pass that failed, and when to try again.
#[derive(Debug)]
pub struct PassFailed {
    /// What went wrong (kept as the worker's last error).
    pub error: String,
    /// When to run again.
    pub retry_in: Duration,
}

impl PassFailed {
    /// A failure retried after `retry_in`.
    pub fn new(error: impl Into<String>, retry_in: Duration) -> Self {
        Self { error: error.into(), retry_in }
    }
}

/// What a worker has done, for `/admin/workers` and the metrics.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerInfo {
    /// The worker's name (`replication/3`, `scrub`, ...).
    pub name: String,
    /// `running` (in a pass), `idle` (waiting for the next) or `stopped`.
    pub state: &'static str,
    /// Passes completed.
    pub passes: u64,
    /// Passes that failed.
    pub failures: u64,
    /// The last failure's message, if the last pass failed.
    pub last_error: Option<String>,
    /// How long the last pass took, in milliseconds.
    pub last_pass_ms: u64,
    /// Seconds since the last pass ended (`None` before the first).
    pub idle_seconds: Option<f64>,
}

/// One worker's counters.
struct WorkerState {
    name: String,
    passes: AtomicU64,
    failures: AtomicU64,
    running: AtomicBool,
    stopped: AtomicBool,
    last_error: Mutex<Option<String>>,
    last_pass_us: AtomicU64,
    last_end: Mutex<Option<Instant>>,
}

impl WorkerState {
    fn info(&self) -> WorkerInfo {
        let state = if self.stopped.load(Ordering::Relaxed) {
            "stopped"
        } else if self.running.load(Ordering::Relaxed) {
            "running"
        } else {
            "idle"
        };
        WorkerInfo {
            name: self.name.clone(),
            state,
            passes: self.passes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_error: self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            last_pass_ms: self.last_pass_us.load(Ordering::Relaxed) / 1000,
            idle_seconds: self.last_end.lock().unwrap_or_else(|p| p.into_inner()).map(|t| t.elapsed().as_secs_f64()),
        }
    }
}

/// A node's background workers.
pub struct Workers {
    states: Mutex<Vec<Arc<WorkerState>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    stop: watch::Sender<bool>,
}

impl Default for Workers {
    fn default() -> Self {
        Self { states: Mutex::new(Vec::new()), tasks: Mutex::new(Vec::new()), stop: watch::channel(false).0 }
    }
}

impl Workers {
    /// An empty set.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Starts worker `name` on the current runtime: it waits as `first`
    /// says, runs `pass`, and waits as each pass answers, until the pass
    /// says [`Next::Done`] or [`Workers::stop`] is called.
    pub fn spawn<F, Fut>(&self, name: impl Into<String>, first: Next, pass: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Next, PassFailed>> + Send + 'static,
    {
        self.spawn_on(&tokio::runtime::Handle::current(), name, first, pass);
    }

    /// [`Workers::spawn`] on another runtime (replication's thread pools).
    pub fn spawn_on<F, Fut>(&self, rt: &tokio::runtime::Handle, name: impl Into<String>, first: Next, mut pass: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Next, PassFailed>> + Send + 'static,
    {
        let state = Arc::new(WorkerState {
            name: name.into(),
            passes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            running: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            last_error: Mutex::new(None),
            last_pass_us: AtomicU64::new(0),
            last_end: Mutex::new(None),
        });
        self.states.lock().unwrap_or_else(|p| p.into_inner()).push(state.clone());
        let mut stop = self.stop.subscribe();
        if *stop.borrow() {
            state.stopped.store(true, Ordering::Relaxed);
            return;
        }
        let task = rt.spawn(async move {
            let mut next = first;
            loop {
                let wait = async {
                    match next {
                        Next::Now => true,
                        Next::After(d) => {
                            tokio::time::sleep(d).await;
                            true
                        }
                        Next::Until(f) => f.await,
                        Next::Done => false,
                    }
                };
                let go = tokio::select! {
                    go = wait => go,
                    _ = stop.wait_for(|s| *s) => false,
                };
                if !go {
                    break;
                }
                state.running.store(true, Ordering::Relaxed);
                let started = Instant::now();
                let outcome = tokio::select! {
                    r = pass() => Some(r),
                    _ = stop.wait_for(|s| *s) => None,
                };
                state.running.store(false, Ordering::Relaxed);
                state.last_pass_us.store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                *state.last_end.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                let Some(outcome) = outcome else { break };
                state.passes.fetch_add(1, Ordering::Relaxed);
                next = match outcome {
                    Ok(n) => {
                        *state.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        n
                    }
                    Err(f) => {
                        state.failures.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(worker = %state.name, error = %f.error, "worker pass failed");
                        *state.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(f.error);
                        Next::After(f.retry_in)
                    }
                };
            }
            state.stopped.store(true, Ordering::Relaxed);
        });
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Every worker, in the order they started.
    pub fn list(&self) -> Vec<WorkerInfo> {
        self.states.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|s| s.info()).collect()
    }

    /// Stops every worker at its next wait or await point, and waits (at
    /// most `grace`) for them to end; workers started later do not run.
    pub async fn stop(&self, grace: Duration) {
        self.stop.send_replace(true);
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        let _ = tokio::time::timeout(grace, futures_util::future::join_all(tasks)).await;
    }

    /// Whether [`Workers::stop`] was called.
    pub fn stopping(&self) -> bool {
        *self.stop.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_worker_runs_passes_records_failures_and_stops() {
        let workers = Workers::new();
        let n = Arc::new(AtomicU64::new(0));
        let seen = n.clone();
        workers.spawn("counter", Next::Now, move || {
            let n = seen.clone();
            async move {
                let i = n.fetch_add(1, Ordering::SeqCst);
                if i == 1 { Err(PassFailed::new("second pass fails", Duration::from_millis(1))) } else { Ok(Next::After(Duration::from_millis(1))) }
            }
        });
        let wake = Arc::new(tokio::sync::Notify::new());
        let w = wake.clone();
        workers.spawn("on-request", Next::until(async move { w.notified().await }), || async { Ok(Next::Done) });
        tokio::time::timeout(Duration::from_secs(5), async {
            while n.load(Ordering::SeqCst) < 5 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the worker runs its passes");
        let list = workers.list();
        assert_eq!(list[0].name, "counter");
        assert!(list[0].failures >= 1, "{list:?}");
        assert_eq!(list[1].passes, 0, "waits for its request");
        wake.notify_one();
        tokio::time::timeout(Duration::from_secs(5), async {
            while workers.list()[1].state != "stopped" {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("a worker that is done stops");
        assert_eq!(workers.list()[1].passes, 1);
        workers.stop(Duration::from_secs(5)).await;
        assert_eq!(workers.list()[0].state, "stopped");
        let after = n.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(n.load(Ordering::SeqCst), after, "no pass after stop");
    }
}
