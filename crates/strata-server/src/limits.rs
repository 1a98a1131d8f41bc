//! Connection limits shared by the node's HTTP and S3 ports: how long a
//! request head (and an idle keep-alive connection) may take, how many
//! connections a port holds, and the process's open-file limit.
//!
//! A port holds at most `max_connections`. When it is full, a new
//! connection evicts the oldest one that is still waiting for a request
//! head (idle, or sending its head slowly); only if none is waiting is the
//! new one refused, with a 503 naming the limit. So clients that open
//! connections and never finish a request cannot lock out the ones that
//! do: they are the first to go, and their head timeout ends them anyway.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

/// Limits of a listening port.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a request head may take to arrive, and how long a
    /// connection may sit idle between requests.
    pub header_timeout: Duration,
    /// Connections held at once.
    pub max_connections: usize,
}

impl Limits {
    /// 30 s heads; connections up to what the open-file limit leaves after
    /// `reserved_fds` for the store's files (at least 64).
    pub fn for_fd_limit(nofile: u64, reserved_fds: u64) -> Self {
        let max = nofile.saturating_sub(reserved_fds).max(64);
        Self { header_timeout: Duration::from_secs(30), max_connections: usize::try_from(max).unwrap_or(usize::MAX) }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self { header_timeout: Duration::from_secs(30), max_connections: 10_000 }
    }
}

/// Raises the soft open-file limit to the hard one; returns the limit in
/// effect afterwards (the soft one, unchanged, if raising failed).
pub fn raise_open_file_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(raised.rlim_cur);
        }
        tracing::warn!(error = %std::io::Error::last_os_error(), soft = lim.rlim_cur, hard = lim.rlim_max, "could not raise the open-file limit");
    }
    Ok(lim.rlim_cur)
}

/// Counts the node's connections, picks which to evict when they fill the
/// budget, and ends the ones whose head (or next request) is overdue.
///
/// A connection's state is one atomic (when it began waiting for a head,
/// or 0 while it is serving one), so marking a request costs two stores; a
/// reaper task, once a second, ends connections that have waited longer
/// than the head timeout, instead of a timer armed for every read.
pub struct Gate {
    max: usize,
    start: std::time::Instant,
    slots: Mutex<Slots>,
    reaper: std::sync::Once,
    /// Connections refused because the port was full and none was evictable.
    pub refused: AtomicU64,
    /// Connections closed to make room for a new one.
    pub evicted: AtomicU64,
    /// Connections closed because their head or idle time ran out.
    pub timed_out: AtomicU64,
    /// Told whenever a connection's place is freed.
    freed: Notify,
    /// Set at shutdown: idle connections end, and busy ones once idle.
    closing: AtomicBool,
}

/// Connections admitted beyond the budget while the ones they evicted are
/// still closing. Each holds a descriptor, so the accept loop waits for
/// evicted connections to close before it takes more than this many over:
/// a flood of new connections (2,000 half-sent requests) would otherwise
/// accept faster than the evicted ones close and run the process out of
/// descriptors. Well inside the headroom the budget leaves (256).
pub const OVER_BUDGET_MAX: usize = 64;

#[derive(Default)]
struct Slots {
    open: Vec<Option<Arc<Slot>>>,
    free: Vec<usize>,
    count: usize,
}

#[derive(Default)]
struct Slot {
    /// Ms since the gate started (+1) when the connection began waiting
    /// for a head; 0 while it serves one.
    waiting_since: AtomicU64,
    /// Why the connection was told to close: 1 evicted, 2 timed out, 3
    /// the node is shutting down.
    ended: AtomicU64,
    wake: Notify,
}

/// One admitted connection; dropping it frees its place.
pub struct Ticket {
    gate: Arc<Gate>,
    index: usize,
    slot: Arc<Slot>,
}

/// Why a connection was told to close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A new connection needed its place.
    Evicted,
    /// Its head (or next request) did not come in time.
    TimedOut,
    /// The node is shutting down and the connection was idle.
    Closing,
}

impl Gate {
    /// A gate holding at most `max` connections.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            start: std::time::Instant::now(),
            slots: Mutex::default(),
            reaper: std::sync::Once::new(),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            freed: Notify::new(),
            closing: AtomicBool::new(false),
        })
    }

    /// Resolves once fewer than [`OVER_BUDGET_MAX`] connections are held
    /// beyond the budget (evicted ones still closing): the accept loop
    /// awaits it before each accept, so a flood waits in the kernel's
    /// backlog, holding no descriptor here.
    pub async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.lock().count < self.max + OVER_BUDGET_MAX {
                return;
            }
            freed.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64 + 1
    }

    /// Connections held at most.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections held now.
    pub fn open(&self) -> usize {
        self.lock().count
    }

    /// Starts (once) the task that ends connections waiting longer than
    /// `timeout` for a head.
    pub fn spawn_reaper(self: &Arc<Self>, timeout: Duration) {
        let gate = Arc::downgrade(self);
        self.reaper.call_once(|| {
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1).min(timeout));
                loop {
                    tick.tick().await;
                    let Some(g) = gate.upgrade() else { return };
                    g.reap(timeout);
                }
            });
        });
    }

    /// At shutdown: ends every connection waiting for a request (a kept
    /// session between frames, a connection before its first head), and
    /// each busy one as soon as it waits, so the drain waits only for
    /// requests in flight.
    pub fn close_idle(&self) {
        self.closing.store(true, Ordering::SeqCst);
        for slot in self.lock().open.iter().flatten() {
            if slot.waiting_since.load(Ordering::SeqCst) != 0 {
                slot.end(3);
            }
        }
    }

    /// Ends every connection that has waited longer than `timeout`.
    pub fn reap(&self, timeout: Duration) {
        let now = self.now();
        let limit = timeout.as_millis() as u64;
        for slot in self.lock().open.iter().flatten() {
            let since = slot.waiting_since.load(Ordering::Acquire);
            if since != 0 && now.saturating_sub(since) > limit && slot.end(2) {
                self.timed_out.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Admits a connection, evicting the oldest one waiting for a head if
    /// the node is full; `None` if it is full of busy connections.
    pub fn admit(self: &Arc<Self>) -> Option<Ticket> {
        let mut g = self.lock();
        if g.count >= self.max {
            let victim = g
                .open
                .iter()
                .flatten()
                .filter(|s| s.ended.load(Ordering::Relaxed) == 0)
                .filter_map(|s| Some((NonZero::new(s.waiting_since.load(Ordering::Acquire))?, s)))
                .min_by_key(|(since, _)| *since)
                .map(|(_, s)| s.clone())?;
            // The victim closes promptly and frees its place itself; until
            // then the node is one over (the budget keeps headroom for it).
            if victim.end(1) {
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let slot = Arc::new(Slot::default());
        let index = match g.free.pop() {
            Some(i) => {
                g.open[i] = Some(slot.clone());
                i
            }
            None => {
                g.open.push(Some(slot.clone()));
                g.open.len() - 1
            }
        };
        g.count += 1;
        Some(Ticket { gate: self.clone(), index, slot })
    }
}

use std::num::NonZero;

impl Slot {
    /// Tells the connection to close, for `why` (see `ended`), unless it
    /// was told already; whether this call told it.
    fn end(&self, why: u64) -> bool {
        let told = self.ended.compare_exchange(0, why, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if told {
            self.wake.notify_one();
        }
        told
    }
}

impl Ticket {
    /// Marks the connection as waiting for a request head (evictable, and
    /// on the clock) or serving one.
    pub fn set_waiting(&self, waiting: bool) {
        let v = if waiting { self.gate.now() } else { 0 };
        self.slot.waiting_since.store(v, Ordering::SeqCst);
        // Against [`Gate::close_idle`]: it sets the flag, then looks at the
        // slots; this stores, then looks at the flag; one of them sees the other.
        if waiting && self.gate.closing.load(Ordering::SeqCst) {
            self.slot.end(3);
        }
    }

    /// Resolves when the gate ends this connection, saying why.
    pub async fn ended(&self) -> Ended {
        loop {
            match self.slot.ended.load(Ordering::Acquire) {
                1 => return Ended::Evicted,
                2 => return Ended::TimedOut,
                3 => return Ended::Closing,
                _ => self.slot.wake.notified().await,
            }
        }
    }

    /// Counts a head or idle timeout seen by the connection itself.
    pub fn timed_out(&self) {
        self.gate.timed_out.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut g = self.gate.lock();
        if let Some(s) = g.open.get_mut(self.index) {
            *s = None;
            g.free.push(self.index);
            g.count = g.count.saturating_sub(1);
        }
        drop(g);
        self.gate.freed.notify_waiters();
    }
}

/// Answers a connection the port has no room for, and closes it.
pub async fn refuse(mut stream: tokio::net::TcpStream, max: usize) {
    let msg = canned("503 Service Unavailable", "TooManyConnections", &format!("this node holds at most {max} connections and all are busy; retry"));
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(msg.as_bytes())).await;
}

/// A request with both `Transfer-Encoding` and `Content-Length` (request
/// smuggling's favourite ambiguity): refused, never guessed at. Both ports
/// check a connection's first head before hyper sees it; on a later
/// request of a kept-alive connection hyper drops the `Content-Length`,
/// reads the body as chunked and closes the connection after answering
/// (RFC 9112 §6.3), so the two lengths can never both be used.
pub fn te_and_cl<'a>(mut names: impl Iterator<Item = &'a str>) -> bool {
    let (mut te, mut cl) = (false, false);
    for n in names.by_ref() {
        te |= n.eq_ignore_ascii_case("transfer-encoding");
        cl |= n.eq_ignore_ascii_case("content-length");
    }
    te && cl
}

/// A whole HTTP/1.1 error response that closes the connection, with a
/// JSON body in the API's `{"code", "message"}` form.
fn canned(status: &str, code: &str, message: &str) -> String {
    let body = serde_json::json!({ "code": code, "message": message }).to_string();
    format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}", body.len())
}

/// The 400 answer to [`te_and_cl`].
pub fn te_and_cl_response() -> String {
    canned("400 Bad Request", "BadRequest", "a request may not carry both Transfer-Encoding and Content-Length headers")
}

/// The 408 answer to a head that did not arrive in time.
pub fn head_timeout_response() -> String {
    canned("408 Request Timeout", "RequestTimeout", "the request head did not arrive within the time allowed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flood_waits_for_evicted_connections_to_close_past_the_overshoot() {
        let gate = Gate::new(4);
        let mut held = Vec::new();
        // Every admitted connection waits for a head, so each new one
        // evicts one; none of the evicted closes yet.
        for _ in 0..4 + OVER_BUDGET_MAX {
            tokio::time::timeout(Duration::from_secs(1), gate.room()).await.expect("room below the overshoot");
            let t = gate.admit().expect("an evictable connection");
            t.set_waiting(true);
            held.push(t);
        }
        assert_eq!(gate.open(), 4 + OVER_BUDGET_MAX);
        // Now the accept loop waits instead of taking one more descriptor...
        assert!(tokio::time::timeout(Duration::from_millis(100), gate.room()).await.is_err(), "the overshoot is unbounded");
        // ...until an evicted connection closes.
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.room().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        held.remove(0);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.expect("woken when a place was freed").expect("task");
    }

    #[tokio::test]
    async fn a_full_gate_evicts_the_oldest_waiting_connection_and_refuses_when_all_are_busy() {
        let gate = Gate::new(2);
        let a = gate.admit().expect("room");
        let b = gate.admit().expect("room");
        a.set_waiting(true);
        std::thread::sleep(Duration::from_millis(3));
        b.set_waiting(true);
        let c = gate.admit().expect("evicts a");
        assert_eq!(a.ended().await, Ended::Evicted);
        assert_eq!(gate.evicted.load(Ordering::Relaxed), 1);
        drop(a);
        b.set_waiting(false);
        c.set_waiting(false);
        assert!(gate.admit().is_none(), "all busy: refused");
        c.set_waiting(true);
        let d = gate.admit().expect("c waits again: evicted");
        assert_eq!(c.ended().await, Ended::Evicted);
        drop((b, c));
        // Waiting past the timeout: the reaper ends it; serving: never.
        d.set_waiting(false);
        let e = gate.admit().expect("room");
        e.set_waiting(true);
        std::thread::sleep(Duration::from_millis(20));
        gate.reap(Duration::from_millis(10));
        assert_eq!(e.ended().await, Ended::TimedOut);
        assert_eq!(d.slot.ended.load(Ordering::Relaxed), 0, "a busy connection is never reaped");
        assert_eq!(gate.open(), 2);
    }

    #[tokio::test]
    async fn at_shutdown_idle_connections_end_and_busy_ones_once_idle() {
        let gate = Gate::new(4);
        let (idle, busy) = (gate.admit().expect("room"), gate.admit().expect("room"));
        idle.set_waiting(true);
        busy.set_waiting(false);
        gate.close_idle();
        async fn quick(t: &Ticket) -> Ended {
            tokio::time::timeout(Duration::from_secs(5), t.ended()).await.expect("not ended")
        }
        assert_eq!(quick(&idle).await, Ended::Closing);
        assert_eq!(busy.slot.ended.load(Ordering::Relaxed), 0, "a request in flight is left to finish");
        busy.set_waiting(true);
        assert_eq!(quick(&busy).await, Ended::Closing);
        assert_eq!(gate.evicted.load(Ordering::Relaxed) + gate.timed_out.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_canned_responses_declare_their_true_length() {
        for r in [te_and_cl_response(), head_timeout_response()] {
            let (head, body) = r.split_once("\r\n\r\n").expect("head and body");
            let len: usize = head.lines().find_map(|l| l.strip_prefix("content-length: ")).expect("length").parse().expect("number");
            assert_eq!(len, body.len(), "{r}");
        }
        assert!(te_and_cl(["Host", "Transfer-Encoding", "content-length"].into_iter()));
        assert!(!te_and_cl(["Host", "content-length"].into_iter()));
    }
}
