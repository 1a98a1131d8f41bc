//! The sender: one per (source, target), delivering in order after the
//! target's cursor, with exponential back-off while the target is down.

use crate::{Cursor, Event, EventError, Target};
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_types::Clock;

/// A durable, ordered log of events (the node's logs that hold each change
/// in the commit that made it).
pub trait Source: Send + Sync {
    /// Up to `max` events with sequence numbers above `after`, in order,
    /// and the position the read covered: a source that filters events for
    /// its target (a bucket notification's prefix, say) may return fewer,
    /// or none, and still move the target past what it skipped.
    fn read_after(&self, after: u64, max: usize) -> Result<Read, EventError>;
    /// The highest sequence number the source holds (0: none).
    fn last(&self) -> u64;
}

/// What one read of a source returned.
#[derive(Debug, Clone, Default)]
pub struct Read {
    /// The events, in order.
    pub events: Vec<Event>,
    /// Every event up to here was read (delivered with `events` or skipped).
    pub upto: u64,
}

impl Read {
    /// A read of `events` that skipped none.
    pub fn all(after: u64, events: Vec<Event>) -> Self {
        let upto = events.last().map_or(after, |e| e.seq);
        Self { events, upto }
    }
}

/// Where a target's delivery stands, durably: a [`Cursor`] file on one
/// node, or the position the names hold for a target of their outbox.
pub trait Progress: Send + Sync {
    /// The last sequence number the target holds (0: none).
    fn seq(&self) -> u64;
    /// Durably records that the target holds everything up to `seq`.
    fn store(&self, seq: u64) -> BoxFuture<'_, Result<(), EventError>>;
}

impl Progress for Mutex<Cursor> {
    fn seq(&self) -> u64 {
        self.lock().map(|c| c.seq()).unwrap_or_else(|p| p.into_inner().seq())
    }

    fn store(&self, seq: u64) -> BoxFuture<'_, Result<(), EventError>> {
        let r = self.lock().unwrap_or_else(std::sync::PoisonError::into_inner).store(seq);
        Box::pin(async move { r })
    }
}

/// How long to wait after a failed delivery: doubling from `first` to `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// After the first failure.
    pub first: Duration,
    /// The most.
    pub max: Duration,
}

impl Backoff {
    /// The wait after `failures` failures in a row (at least one).
    pub fn after(&self, failures: u32) -> Duration {
        let doubled = self.first.saturating_mul(1u32.checked_shl(failures.saturating_sub(1).min(20)).unwrap_or(u32::MAX));
        doubled.min(self.max)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self { first: Duration::from_millis(100), max: Duration::from_secs(30) }
    }
}

/// What a sender reports (the metrics and `strata events status`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SenderStatus {
    /// The target's name.
    pub target: String,
    /// The last sequence number the target has.
    pub delivered_seq: u64,
    /// Events delivered since start.
    pub delivered: u64,
    /// Events the source holds beyond the cursor.
    pub pending: u64,
    /// Failed delivery attempts since start.
    pub failures: u64,
    /// The last failure's message, until a delivery succeeds.
    pub last_error: Option<String>,
    /// Since when (ms since the epoch) the target has been failing, if it is.
    pub down_since_ms: Option<u64>,
    /// Whether it has been down longer than the alarm threshold.
    pub alarm: bool,
}

/// Delivers one source's events to one target.
pub struct Sender {
    source: Arc<dyn Source>,
    target: Arc<dyn Target>,
    cursor: Arc<dyn Progress>,
    /// The last sequence number delivered (the durable position may lag
    /// it by up to `store_every_ms`).
    pos: AtomicU64,
    /// When the position was last stored durably (ms), and what it was.
    stored: Mutex<(u64, u64)>,
    store_every_ms: u64,
    clock: Arc<dyn Clock>,
    backoff: Backoff,
    batch: usize,
    alarm_after_ms: u64,
    delivered: AtomicU64,
    failures: AtomicU64,
    trouble: Mutex<Option<(u64, String)>>,
}

impl Sender {
    /// A sender of `source` to `target`, resuming after `cursor`.
    pub fn new(source: Arc<dyn Source>, target: Arc<dyn Target>, cursor: Cursor, clock: Arc<dyn Clock>) -> Self {
        Self::with_progress(source, target, Arc::new(Mutex::new(cursor)), clock)
    }

    /// A sender of `source` to `target`, resuming after `progress`.
    pub fn with_progress(source: Arc<dyn Source>, target: Arc<dyn Target>, progress: Arc<dyn Progress>, clock: Arc<dyn Clock>) -> Self {
        let at = progress.seq();
        Self {
            source,
            target,
            pos: AtomicU64::new(at),
            stored: Mutex::new((0, at)),
            store_every_ms: 0,
            cursor: progress,
            clock,
            backoff: Backoff::default(),
            batch: 256,
            alarm_after_ms: 5 * 60 * 1000,
            delivered: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            trouble: Mutex::new(None),
        }
    }

    /// With `backoff` between failed attempts.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// With batches of at most `n` events.
    pub fn with_batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Storing the delivered position durably at most every `ms` (0: after
    /// every batch). A crash then repeats up to that much of the stream,
    /// which at-least-once delivery allows, for far fewer position writes
    /// under load.
    pub fn with_position_every_ms(mut self, ms: u64) -> Self {
        self.store_every_ms = ms;
        self
    }

    /// Raising the alarm once the target has been failing for `ms`.
    pub fn with_alarm_after_ms(mut self, ms: u64) -> Self {
        self.alarm_after_ms = ms;
        self
    }

    fn cursor_seq(&self) -> u64 {
        self.pos.load(Ordering::Relaxed)
    }

    /// Moves the position to `seq`, storing it if it is time to.
    async fn advance(&self, seq: u64, force: bool) -> Result<(), EventError> {
        self.pos.store(seq, Ordering::Relaxed);
        let now = self.clock.now_ms();
        let due = {
            let stored = self.stored.lock().unwrap_or_else(|p| p.into_inner());
            stored.1 != seq && (force || self.store_every_ms == 0 || now.saturating_sub(stored.0) >= self.store_every_ms)
        };
        if due {
            // What the position covers must be durable at the target first.
            self.target.sync().await?;
            self.cursor.store(seq).await?;
            *self.stored.lock().unwrap_or_else(|p| p.into_inner()) = (now, seq);
        }
        Ok(())
    }

    /// Stores the delivered position now (a sender stopping).
    pub async fn flush(&self) -> Result<(), EventError> {
        self.advance(self.cursor_seq(), true).await
    }

    /// One attempt: reads the next batch after the cursor and delivers it.
    /// `Ok(n)`: `n` events delivered (0: nothing pending). A failure leaves
    /// the cursor where it was.
    pub async fn step(&self) -> Result<usize, EventError> {
        let after = self.cursor_seq();
        let Read { events, upto } = self.source.read_after(after, self.batch)?;
        if let Some(bad) = events.windows(2).find(|w| w[1].seq <= w[0].seq).or_else(|| events.first().filter(|e| e.seq <= after).map(std::slice::from_ref)) {
            return Err(EventError::Source(format!("events out of order at seq {}", bad[bad.len() - 1].seq)));
        }
        if events.last().is_some_and(|e| e.seq > upto) {
            return Err(EventError::Source(format!("a read says it covered {upto} but holds later events")));
        }
        if events.is_empty() {
            // Nothing for this target: move past what was skipped.
            if upto > after {
                self.advance(upto, false).await?;
            }
            return Ok(0);
        }
        match self.target.deliver(&events).await {
            Ok(()) => {
                self.advance(upto, false).await?;
                self.delivered.fetch_add(events.len() as u64, Ordering::Relaxed);
                *self.trouble.lock().unwrap_or_else(|p| p.into_inner()) = None;
                Ok(events.len())
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                let mut t = self.trouble.lock().unwrap_or_else(|p| p.into_inner());
                let since = t.as_ref().map_or(self.clock.now_ms(), |(s, _)| *s);
                *t = Some((since, e.to_string()));
                Err(e)
            }
        }
    }

    /// Delivers until `stop` is set: at once while events are pending,
    /// every `idle` otherwise, backing off after failures.
    pub async fn run(&self, idle: Duration, stop: Arc<std::sync::atomic::AtomicBool>) {
        let mut failures = 0u32;
        while !stop.load(Ordering::Relaxed) {
            match self.step().await {
                // A short batch: let more gather before the next, so a
                // steady trickle of writes is not one delivery (and one
                // cursor write) each.
                Ok(n) if n < self.batch => {
                    failures = 0;
                    tokio::time::sleep(idle).await;
                }
                Ok(_) => failures = 0,
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = self.backoff.after(failures);
                    tracing::warn!(target_name = self.target.name(), error = %e, ?wait, "event delivery failed; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
        if let Err(e) = self.flush().await {
            tracing::warn!(target_name = self.target.name(), error = %e, "could not store the delivered position; the next sender repeats what follows the last one stored");
        }
    }

    /// Where it stands.
    pub fn status(&self) -> SenderStatus {
        let delivered_seq = self.cursor_seq();
        let trouble = self.trouble.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let down_since_ms = trouble.as_ref().map(|(s, _)| *s);
        SenderStatus {
            target: self.target.name().to_owned(),
            delivered_seq,
            delivered: self.delivered.load(Ordering::Relaxed),
            pending: self.source.last().saturating_sub(delivered_seq),
            failures: self.failures.load(Ordering::Relaxed),
            last_error: trouble.map(|(_, m)| m),
            down_since_ms,
            alarm: down_since_ms.is_some_and(|s| self.clock.now_ms().saturating_sub(s) >= self.alarm_after_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileTarget, Subject};
    use futures_util::future::BoxFuture;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;

    /// Events 1..=n of one source, some with gaps (sequence numbers need
    /// not be dense).
    struct Log(Vec<Event>);

    impl Source for Log {
        fn read_after(&self, after: u64, max: usize) -> Result<Read, EventError> {
            Ok(Read::all(after, self.0.iter().filter(|e| e.seq > after).take(max).cloned().collect()))
        }
        fn last(&self) -> u64 {
            self.0.last().map_or(0, |e| e.seq)
        }
    }

    fn log(n: u64) -> Arc<Log> {
        let subject = |i: u64| Subject { bucket: Some(format!("b{}", i % 3)), key: Some(format!("k{i}")), ..Default::default() };
        Arc::new(Log((1..=n).map(|i| Event::new("n1", "names", i * 2, 1000 + i, "s3:ObjectCreated:Put", None, subject(i))).collect()))
    }

    struct ManualClock(AtomicU64);
    impl Clock for ManualClock {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    /// A target that is down while `down` is set, and a file otherwise.
    struct Flaky {
        file: FileTarget,
        down: AtomicBool,
    }
    impl Target for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }
        fn deliver<'a>(&'a self, events: &'a [Event]) -> BoxFuture<'a, Result<(), EventError>> {
            if self.down.load(Ordering::Relaxed) {
                return Box::pin(async { Err(EventError::Target { target: "flaky".into(), why: "down".into() }) });
            }
            self.file.deliver(events)
        }
        fn sync(&self) -> BoxFuture<'_, Result<(), EventError>> {
            self.file.sync()
        }
    }

    /// A target that holds events in memory until synced, and a position
    /// store that checks every event up to a stored position was synced.
    #[derive(Default)]
    struct Volatile {
        unsynced: Mutex<Vec<u64>>,
        durable: Mutex<Vec<u64>>,
    }
    impl Target for Volatile {
        fn name(&self) -> &str {
            "volatile"
        }
        fn deliver<'a>(&'a self, events: &'a [Event]) -> BoxFuture<'a, Result<(), EventError>> {
            self.unsynced.lock().unwrap().extend(events.iter().map(|e| e.seq));
            Box::pin(async { Ok(()) })
        }
        fn sync(&self) -> BoxFuture<'_, Result<(), EventError>> {
            let moved = std::mem::take(&mut *self.unsynced.lock().unwrap());
            self.durable.lock().unwrap().extend(moved);
            Box::pin(async { Ok(()) })
        }
    }
    struct Checked(Arc<Volatile>, Mutex<u64>);
    impl Progress for Checked {
        fn seq(&self) -> u64 {
            *self.1.lock().unwrap()
        }
        fn store(&self, seq: u64) -> BoxFuture<'_, Result<(), EventError>> {
            assert!(self.0.unsynced.lock().unwrap().iter().all(|&s| s > seq), "a position was stored past events the target had not synced");
            *self.1.lock().unwrap() = seq;
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn a_position_is_stored_only_after_the_target_synced_what_it_covers() {
        let target = Arc::new(Volatile::default());
        let progress = Arc::new(Checked(target.clone(), Mutex::new(0)));
        let clock = Arc::new(ManualClock(AtomicU64::new(0)));
        let sender = Sender::with_progress(log(100), target.clone(), progress.clone(), clock.clone()).with_batch(10).with_position_every_ms(1000);
        for i in 0..10 {
            clock.0.store(i * 400, Ordering::Relaxed);
            assert_eq!(sender.step().await.unwrap(), 10);
        }
        sender.flush().await.unwrap();
        assert_eq!(progress.seq(), 200);
        assert_eq!(target.durable.lock().unwrap().len(), 100);
    }

    /// A crash mid-append leaves a torn last line: the next writer of the
    /// file cuts it off before appending, so every line is a whole event.
    #[tokio::test]
    async fn a_torn_last_line_is_cut_off_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("events.jsonl");
        let whole: Vec<String> = log(3).0.iter().map(Event::to_json).collect();
        std::fs::write(&out, format!("{}\n{}\n{}", whole[0], whole[1], &whole[2][..20])).unwrap();
        let target = FileTarget::new("f", &out);
        target.deliver(&log(5).0[3..]).await.unwrap();
        target.sync().await.unwrap();
        let seqs: Vec<u64> = lines(&out).iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![2, 4, 8, 10]);
        // A second target of the same path shares the writer: no second cut.
        let again = FileTarget::new("g", &out);
        again.deliver(&log(1).0).await.unwrap();
        assert_eq!(lines(&out).len(), 5);
        // Rotated away: the old file keeps what it has, a new one starts.
        let rotated = dir.path().join("events.jsonl.1");
        std::fs::rename(&out, &rotated).unwrap();
        target.deliver(&log(2).0[1..]).await.unwrap();
        assert_eq!((lines(&rotated).len(), lines(&out).len()), (5, 1));
    }

    fn lines(path: &std::path::Path) -> Vec<Event> {
        std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    #[tokio::test]
    async fn every_event_arrives_in_order_across_outages_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("events.jsonl");
        let source = log(1000);
        let clock = Arc::new(ManualClock(AtomicU64::new(10_000)));
        let target = Arc::new(Flaky { file: FileTarget::new("file", &out), down: AtomicBool::new(false) });
        let cursor_path = dir.path().join("file.cursor");
        let sender =
            Sender::new(source.clone(), target.clone(), Cursor::open(&cursor_path).unwrap(), clock.clone()).with_batch(100).with_alarm_after_ms(60_000);
        assert_eq!(sender.step().await.unwrap(), 100);
        assert_eq!(sender.step().await.unwrap(), 100);
        // The target goes down: nothing moves, the failure is reported, and
        // the alarm rises only after the threshold.
        target.down.store(true, Ordering::Relaxed);
        assert!(sender.step().await.is_err());
        clock.0.fetch_add(30_000, Ordering::Relaxed);
        assert!(sender.step().await.is_err());
        let s = sender.status();
        assert_eq!((s.delivered, s.pending, s.failures, s.down_since_ms, s.alarm), (200, 1600, 2, Some(10_000), false));
        clock.0.fetch_add(30_000, Ordering::Relaxed);
        assert!(sender.status().alarm);
        target.down.store(false, Ordering::Relaxed);
        assert_eq!(sender.step().await.unwrap(), 100);
        assert!(!sender.status().alarm && sender.status().last_error.is_none());
        // A restart resumes after the durable cursor: no event skipped, none repeated.
        drop(sender);
        let sender = Sender::new(source.clone(), target.clone(), Cursor::open(&cursor_path).unwrap(), clock.clone()).with_batch(64);
        while sender.step().await.unwrap() > 0 {}
        let got = lines(&out);
        assert_eq!(got.len(), 1000);
        assert!(got.windows(2).all(|w| w[0].seq < w[1].seq), "in order");
        assert_eq!(got.iter().map(|e| e.seq).collect::<Vec<_>>(), source.0.iter().map(|e| e.seq).collect::<Vec<_>>());
        assert_eq!(sender.status().pending, 0);
    }

    #[tokio::test]
    async fn run_retries_with_back_off_until_the_target_is_back() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("events.jsonl");
        let target = Arc::new(Flaky { file: FileTarget::new("file", &out), down: AtomicBool::new(true) });
        let clock = Arc::new(strata_types::SystemClock);
        let sender = Arc::new(
            Sender::new(log(50), target.clone(), Cursor::open(&dir.path().join("c")).unwrap(), clock)
                .with_backoff(Backoff { first: Duration::from_millis(5), max: Duration::from_millis(20) }),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (sender, stop) = (sender.clone(), stop.clone());
            async move { sender.run(Duration::from_millis(5), stop).await }
        });
        while sender.status().failures < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(lines(&out).is_empty());
        target.down.store(false, Ordering::Relaxed);
        while sender.status().pending > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.store(true, Ordering::Relaxed);
        task.await.unwrap();
        assert_eq!(lines(&out).len(), 50);
    }

    #[tokio::test]
    async fn a_lazy_position_repeats_after_a_restart_but_never_skips() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("events.jsonl");
        let source = log(100);
        let clock = Arc::new(ManualClock(AtomicU64::new(0)));
        let target = Arc::new(FileTarget::new("file", &out));
        let cursor_path = dir.path().join("c");
        let sender =
            Sender::new(source.clone(), target.clone(), Cursor::open(&cursor_path).unwrap(), clock.clone()).with_batch(10).with_position_every_ms(1000);
        for _ in 0..3 {
            assert_eq!(sender.step().await.unwrap(), 10);
        }
        // Within the first second nothing is stored; the position is in memory.
        assert_eq!(Cursor::open(&cursor_path).unwrap().seq(), 0);
        assert_eq!(sender.status().delivered_seq, 60);
        clock.0.store(5000, Ordering::Relaxed);
        assert_eq!(sender.step().await.unwrap(), 10);
        assert_eq!(Cursor::open(&cursor_path).unwrap().seq(), 80);
        assert_eq!(sender.step().await.unwrap(), 10);
        // A crash now: the restarted sender repeats the batch after the stored position and skips none.
        drop(sender);
        let sender = Sender::new(source.clone(), target.clone(), Cursor::open(&cursor_path).unwrap(), clock.clone());
        while sender.step().await.unwrap() > 0 {}
        let got: Vec<u64> = lines(&out).iter().map(|e| e.seq / 2).collect();
        let first: std::collections::BTreeSet<u64> = got.iter().copied().collect();
        assert_eq!(first, (1..=100).collect());
        assert_eq!(got.len(), 110, "the 10 events after the stored position come twice");
        // A stopping sender stores where it is.
        sender.flush().await.unwrap();
        assert_eq!(Cursor::open(&cursor_path).unwrap().seq(), 200);
    }

    #[test]
    fn back_off_doubles_up_to_its_most() {
        let b = Backoff { first: Duration::from_millis(100), max: Duration::from_secs(1) };
        let waits: Vec<u128> = (1..=6).map(|f| b.after(f).as_millis()).collect();
        assert_eq!(waits, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.after(u32::MAX), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_source_out_of_order_is_refused_not_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("events.jsonl");
        let mut events = log(3).0.clone();
        events.swap(1, 2);
        let sender = Sender::new(
            Arc::new(Log(events)),
            Arc::new(FileTarget::new("f", &out)),
            Cursor::open(&dir.path().join("c")).unwrap(),
            Arc::new(strata_types::SystemClock),
        );
        assert!(matches!(sender.step().await, Err(EventError::Source(_))));
        assert!(lines(&out).is_empty());
    }
}
