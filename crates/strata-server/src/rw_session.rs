//! Read-write store sessions (docs/formats.md, "Read-write store
//! sessions"): a connection upgraded from `POST /rw/{store}/session`
//! (gets; the store's read right) or `POST /rw/{store}/write-session`
//! (gets, puts and deletes; the store's admin right), with
//! `Connection: upgrade` and `Upgrade: strata-rw/1`, then speaking
//! `strata_format::rw_session` frames instead of HTTP. The connection loop
//! recognizes the upgrade on the request's head and checks its signature
//! there, as it does for its other fast paths; a request it does not take
//! (unsigned, refused, malformed) goes to the HTTP handlers, which answer
//! it with the usual error.
//!
//! Each request runs through the same `RwService` calls as the HTTP
//! handlers, and each refusal carries the status and code the HTTP API
//! would give. A frame that cannot be decoded gets an error answer and ends
//! the session: after a bad frame nothing later on the connection can be
//! trusted to start where a frame starts.

use crate::limits::Ticket;
use crate::{ApiError, AppState};
use bytes::{Buf, Bytes, BytesMut};
use std::time::Instant;
use strata_format::rw_session::{self, Answer, Request};
use strata_rwstore::{VectorClock, Versioned};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest message a session takes: a value at the largest limit a store
/// may set, its key and clock.
const MESSAGE_BYTES_MAX: usize = (16 << 20) + (64 << 10);

/// A session upgrade recognized on a request head.
pub(crate) struct Upgrade {
    /// The store, percent-decoded.
    pub store: String,
    /// Whether the session may write.
    pub write: bool,
}

/// The upgrade `method path` with `headers` asks for, if it is one: a POST
/// of `/rw/{store}/session` or `/rw/{store}/write-session` with
/// `Upgrade: strata-rw/1`, `Connection: upgrade` and no body.
pub(crate) fn recognize(method: Option<&str>, path: &str, headers: &[httparse::Header<'_>]) -> Option<Upgrade> {
    if method != Some("POST") {
        return None;
    }
    let rest = path.strip_prefix("/rw/")?;
    let (store, what) = rest.split_once('/')?;
    let write = match what {
        "session" => false,
        "write-session" => true,
        _ => return None,
    };
    let has = |name: &str, token: &str| {
        headers.iter().any(|h| {
            h.name.eq_ignore_ascii_case(name) && std::str::from_utf8(h.value).is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    let body = headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding") || (h.name.eq_ignore_ascii_case("content-length") && h.value != b"0")
    });
    if store.is_empty() || body || !has("upgrade", rw_session::PROTOCOL) || !has("connection", "upgrade") {
        return None;
    }
    Some(Upgrade { store: strata_auth::sigv4::percent_decode(store)?, write })
}

fn versions_answer(versions: &[Versioned]) -> Vec<u8> {
    let covering = VectorClock::covering(versions.iter().map(|v| &v.clock)).to_text();
    let clocks: Vec<String> = versions.iter().filter(|v| v.value.is_some()).map(|v| v.clock.to_text()).collect();
    let live = versions.iter().filter_map(|v| v.value.as_deref());
    Answer::Versions { clock: &covering, versions: clocks.iter().map(String::as_str).zip(live).collect() }.encode()
}

fn error_answer(e: &ApiError) -> Vec<u8> {
    let (status, code) = e.status_code();
    Answer::Error { status: status.as_u16(), code, message: &e.to_string() }.encode()
}

/// Answers one request; the metric's op name and the answer's status.
async fn answer(state: &AppState, up: &Upgrade, req: Request<'_>) -> (&'static str, Result<Vec<u8>, ApiError>) {
    let service = || -> Result<&strata_node::rw::RwService, ApiError> {
        let node = state.cluster.as_ref().ok_or(ApiError::NotClustered)?;
        node.rw().ok_or_else(|| ApiError::Internal("this node has no disk open yet for read-write stores".into()))
    };
    let read_only = |op: &str| ApiError::BadRequest(format!("a {op} needs a write session (POST /rw/{}/write-session); this one is read-only", up.store));
    let clock = |c: &str| VectorClock::parse_text(c).map_err(|e| ApiError::from(strata_rwstore::RwError::from(e)));
    match req {
        Request::Get { key } => {
            let r = async { Ok(versions_answer(&service()?.get(&up.store, Bytes::copy_from_slice(key)).await?)) };
            ("rw_session_get", r.await)
        }
        Request::Put { key, clock: c, value } => {
            let r = async {
                if !up.write {
                    return Err(read_only("put"));
                }
                let written = service()?.put(&up.store, Bytes::copy_from_slice(key), Some(Bytes::copy_from_slice(value)), &clock(c)?, None).await?;
                Ok(Answer::Written { clock: &written.to_text() }.encode())
            };
            ("rw_session_put", r.await)
        }
        Request::Delete { key, clock: c } => {
            let r = async {
                if !up.write {
                    return Err(read_only("delete"));
                }
                let written = service()?.put(&up.store, Bytes::copy_from_slice(key), None, &clock(c)?, None).await?;
                Ok(Answer::Written { clock: &written.to_text() }.encode())
            };
            ("rw_session_delete", r.await)
        }
    }
}

/// Serves a session on `io`, whose upgrade request (`head_len` bytes of
/// `buf`) was recognized and allowed: answers `101 Switching Protocols`,
/// then requests until the client leaves, the connection breaks, a frame
/// is bad, or the session waits longer than the head timeout for its
/// next request (it is evictable meanwhile, like a kept-alive connection).
pub(crate) async fn serve<IO: AsyncRead + AsyncWrite + Unpin>(mut io: IO, mut buf: BytesMut, head_len: usize, state: &AppState, up: Upgrade, ticket: &Ticket) {
    buf.advance(head_len);
    let head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: {}\r\nx-strata-session: {}\r\n\r\n",
        rw_session::PROTOCOL,
        if up.write { "write" } else { "read" }
    );
    if io.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    state.metrics.rw_sessions.inc();
    let mut out = Vec::new();
    loop {
        // Every whole request in, answered in order, in one write.
        loop {
            let len = match rw_session::next_frame_len(&buf, MESSAGE_BYTES_MAX) {
                Ok(Some(n)) if buf.len() >= n => n,
                Ok(_) => break,
                Err(e) => {
                    out.extend(error_answer(&ApiError::BadRequest(format!("bad session message: {e}"))));
                    let _ = io.write_all(&out).await;
                    return;
                }
            };
            let t = Instant::now();
            let frame = buf.split_to(len).freeze();
            let req = match rw_session::decode_request(&frame) {
                Ok(r) => r,
                Err(e) => {
                    out.extend(error_answer(&ApiError::BadRequest(format!("bad session message: {e}"))));
                    let _ = io.write_all(&out).await;
                    return;
                }
            };
            let (op, r) = answer(state, &up, req).await;
            let status = match r {
                Ok(a) => {
                    out.extend(a);
                    200
                }
                Err(e) => {
                    if e.status_code().0.is_server_error() {
                        tracing::warn!(op, error = %e, "session request failed");
                    }
                    out.extend(error_answer(&e));
                    e.status_code().0.as_u16()
                }
            };
            state.metrics.observe(op, status, t.elapsed().as_secs_f64());
        }
        if !out.is_empty() {
            if io.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        ticket.set_waiting(buf.is_empty());
        tokio::select! {
            r = io.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = ticket.ended() => return,
        }
        ticket.set_waiting(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h<'a>(name: &'a str, value: &'a [u8]) -> httparse::Header<'a> {
        httparse::Header { name, value }
    }

    #[test]
    fn only_a_bodiless_upgrade_post_of_a_session_path_is_one() {
        let ok = [h("Upgrade", b"strata-rw/1"), h("Connection", b"keep-alive, Upgrade")];
        let up = recognize(Some("POST"), "/rw/my%20store/write-session", &ok).unwrap();
        assert_eq!((up.store.as_str(), up.write), ("my store", true));
        assert!(!recognize(Some("POST"), "/rw/s/session", &ok).unwrap().write);
        assert!(recognize(Some("GET"), "/rw/s/session", &ok).is_none());
        assert!(recognize(Some("POST"), "/rw/s/other", &ok).is_none());
        assert!(recognize(Some("POST"), "/rw//session", &ok).is_none());
        assert!(recognize(Some("POST"), "/kv/s/session", &ok).is_none());
        assert!(recognize(Some("POST"), "/rw/s/session", &[h("Upgrade", b"websocket"), h("Connection", b"upgrade")]).is_none());
        assert!(recognize(Some("POST"), "/rw/s/session", &[h("Upgrade", b"strata-rw/1")]).is_none());
        let with_body = [h("Upgrade", b"strata-rw/1"), h("Connection", b"upgrade"), h("Content-Length", b"5")];
        assert!(recognize(Some("POST"), "/rw/s/session", &with_body).is_none());
    }
}
