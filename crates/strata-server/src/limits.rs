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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Counts a port's connections and picks which to evict when it is full.
pub struct Gate {
    max: usize,
    inner: Mutex<GateInner>,
    /// Connections refused because the port was full and none was evictable.
    pub refused: AtomicU64,
    /// Connections closed to make room for a new one.
    pub evicted: AtomicU64,
    /// Connections closed because their head or idle time ran out.
    pub timed_out: AtomicU64,
}

#[derive(Default)]
struct GateInner {
    next: u64,
    open: usize,
    /// Connections waiting for a request head, oldest first, with what
    /// tells each to close.
    waiting: BTreeMap<u64, Arc<Notify>>,
}

/// One admitted connection; dropping it frees its place.
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    evict: Arc<Notify>,
}

impl Gate {
    /// A gate holding at most `max` connections.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { max: max.max(1), inner: Mutex::default(), refused: AtomicU64::new(0), evicted: AtomicU64::new(0), timed_out: AtomicU64::new(0) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections held at most.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections held now.
    pub fn open(&self) -> usize {
        self.lock().open
    }

    /// Admits a connection, evicting the oldest one waiting for a head if
    /// the port is full; `None` if it is full of busy connections.
    pub fn admit(self: &Arc<Self>) -> Option<Ticket> {
        let mut g = self.lock();
        if g.open >= self.max {
            let (_, victim) = g.waiting.pop_first()?;
            // The victim closes promptly and frees its place itself; until
            // then the port is one over (the limit keeps headroom for it).
            victim.notify_one();
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        g.open += 1;
        g.next += 1;
        let id = g.next;
        Some(Ticket { gate: self.clone(), id, evict: Arc::new(Notify::new()) })
    }
}

impl Ticket {
    /// Marks the connection as waiting for a request head (evictable) or
    /// serving one (not).
    pub fn set_waiting(&self, waiting: bool) {
        let mut g = self.gate.lock();
        if waiting {
            g.waiting.insert(self.id, self.evict.clone());
        } else {
            g.waiting.remove(&self.id);
        }
    }

    /// Resolves when the gate evicts this connection.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }

    /// Counts a head or idle timeout.
    pub fn timed_out(&self) {
        self.gate.timed_out.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut g = self.gate.lock();
        g.waiting.remove(&self.id);
        g.open = g.open.saturating_sub(1);
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

    #[test]
    fn a_full_gate_evicts_the_oldest_waiting_connection_and_refuses_when_all_are_busy() {
        let gate = Gate::new(2);
        let a = gate.admit().expect("room");
        let b = gate.admit().expect("room");
        a.set_waiting(true);
        b.set_waiting(true);
        let c = gate.admit().expect("evicts a");
        assert_eq!(gate.evicted.load(Ordering::Relaxed), 1);
        drop(a);
        b.set_waiting(false);
        c.set_waiting(false);
        assert!(gate.admit().is_none(), "all busy: refused");
        c.set_waiting(true);
        assert!(gate.admit().is_some(), "c waits again: evicted");
        drop((b, c));
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
