//! Sessions: connections upgraded from HTTP that then carry checksummed
//! frames (docs/formats.md), one request after another, answered in order,
//! for requests whose HTTP framing would cost more than their work.
//!
//! - **Read-write store sessions** (`strata-rw/1`): `POST
//!   /rw/{store}/session` (gets; the store's read right) or `POST
//!   /rw/{store}/write-session` (gets, puts and deletes; the store's admin
//!   right), then `strata_format::rw_session` messages. Each request runs
//!   through the same `RwService` calls as the HTTP handlers, and each
//!   refusal carries the status and code the HTTP API would give.
//! - **Replica RPC sessions** (`strata-rpc/1`): `POST /rpc/v1/session` by a
//!   node (its certificate), then replica RPC frames, each answered as
//!   `/rpc/v1/...` answers it (`strata_rpc::serve`).
//!
//! The connection loop recognizes the upgrade on the request's head and
//! checks its signature and right there, as it does for its other fast
//! paths; a request it does not take (unsigned, refused, malformed) goes
//! to the HTTP handlers, which answer it with the usual error. A frame
//! that cannot be decoded ends the session (after an error answer, for a
//! client's): nothing later on the connection can be trusted to start
//! where a frame starts.

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

/// A session a request head asks for.
pub(crate) enum Session {
    /// A read-write store session.
    Rw(Upgrade),
    /// A node's replica RPC session.
    Rpc,
}

/// The session `method path` with `headers` asks for, if it is one: a
/// bodiless POST with `Connection: upgrade` and the session's `Upgrade`
/// token, of `/rw/{store}/session` or `/rw/{store}/write-session`
/// (`strata-rw/1`), or of `/rpc/v1/session` (`strata-rpc/1`).
pub(crate) fn recognize(method: Option<&str>, path: &str, headers: &[httparse::Header<'_>]) -> Option<Session> {
    if method != Some("POST") {
        return None;
    }
    let has = |name: &str, token: &str| {
        headers.iter().any(|h| {
            h.name.eq_ignore_ascii_case(name) && std::str::from_utf8(h.value).is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    let body = headers.iter().any(|h| h.name.eq_ignore_ascii_case("transfer-encoding") || (h.name.eq_ignore_ascii_case("content-length") && h.value != b"0"));
    if body || !has("connection", "upgrade") {
        return None;
    }
    if path == "/rpc/v1/session" {
        return has("upgrade", strata_net::RPC_SESSION_PROTOCOL).then_some(Session::Rpc);
    }
    let rest = path.strip_prefix("/rw/")?;
    let (store, what) = rest.split_once('/')?;
    let write = match what {
        "session" => false,
        "write-session" => true,
        _ => return None,
    };
    if store.is_empty() || !has("upgrade", rw_session::PROTOCOL) {
        return None;
    }
    Some(Session::Rw(Upgrade { store: strata_auth::sigv4::percent_decode(store)?, write }))
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

/// Answers one request (decoded from `frame`, whose bytes its key and
/// value are taken from without a copy); the metric's op name and the
/// answer.
async fn answer(state: &AppState, up: &Upgrade, frame: &Bytes, req: Request<'_>) -> (&'static str, Result<Vec<u8>, ApiError>) {
    let read_only = |op: &str| ApiError::BadRequest(format!("a {op} needs a write session (POST /rw/{}/write-session); this one is read-only", up.store));
    let clock = |c: &str| VectorClock::parse_text(c).map_err(|e| ApiError::from(strata_rwstore::RwError::from(e)));
    let (op, key, value, c) = match req {
        Request::Get { key } => {
            let r = async { Ok(versions_answer(&crate::rw_api::service(state)?.get(&up.store, frame.slice_ref(key)).await?)) };
            return ("rw_session_get", r.await);
        }
        Request::Put { key, clock, value } => ("rw_session_put", key, Some(frame.slice_ref(value)), clock),
        Request::Delete { key, clock } => ("rw_session_delete", key, None, clock),
    };
    let r = async {
        if !up.write {
            return Err(read_only(if value.is_some() { "put" } else { "delete" }));
        }
        let written = crate::rw_api::service(state)?.put(&up.store, frame.slice_ref(key), value, &clock(c)?, None).await?;
        Ok(Answer::Written { clock: &written.to_text() }.encode())
    };
    (op, r.await)
}

/// Serves `session` on `io`, whose upgrade request (`head_len` bytes of
/// `buf`) was recognized and allowed.
pub(crate) async fn serve_session<IO: AsyncRead + AsyncWrite + Unpin>(
    io: IO,
    buf: BytesMut,
    head_len: usize,
    state: &AppState,
    session: Session,
    ticket: &Ticket,
) {
    match session {
        Session::Rw(up) => serve(io, buf, head_len, state, up, ticket).await,
        Session::Rpc => serve_rpc(io, buf, head_len, state, ticket).await,
    }
}

/// Serves a read-write store session on `io`, whose upgrade request
/// (`head_len` bytes of `buf`) was recognized and allowed.
async fn serve<IO: AsyncRead + AsyncWrite + Unpin>(io: IO, mut buf: BytesMut, head_len: usize, state: &AppState, up: Upgrade, ticket: &Ticket) {
    buf.advance(head_len);
    let head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: {}\r\nx-strata-session: {}\r\n\r\n",
        rw_session::PROTOCOL,
        if up.write { "write" } else { "read" }
    );
    state.metrics.rw_sessions.inc();
    let bad = |e: String| error_answer(&ApiError::BadRequest(format!("bad session message: {e}")));
    let up = &up;
    serve_frames(io, buf, ticket, &head, MESSAGE_BYTES_MAX, bad, |frame| async move {
        let t = Instant::now();
        let req = match rw_session::decode_request(&frame) {
            Ok(r) => r,
            Err(e) => return (vec![Bytes::from(bad(e.to_string()))], false),
        };
        let (op, r) = answer(state, up, &frame, req).await;
        let (status, out) = match r {
            Ok(a) => (200, a),
            Err(e) => {
                if e.status_code().0.is_server_error() {
                    tracing::warn!(op, error = %e, "session request failed");
                }
                (e.status_code().0.as_u16(), error_answer(&e))
            }
        };
        state.metrics.observe(op, status, t.elapsed().as_secs_f64());
        (vec![Bytes::from(out)], true)
    })
    .await;
}

/// Serves a node's replica RPC session (`POST /rpc/v1/session`, `Upgrade:
/// strata-rpc/1`, a node's certificate): each frame is a replica RPC
/// (docs/formats.md, "Replica RPCs") answered as `/rpc/v1/...` answers it.
async fn serve_rpc<IO: AsyncRead + AsyncWrite + Unpin>(io: IO, mut buf: BytesMut, head_len: usize, state: &AppState, ticket: &Ticket) {
    buf.advance(head_len);
    let Some(node) = state.cluster.clone() else { return };
    let head = format!("HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: {}\r\n\r\n", strata_net::RPC_SESSION_PROTOCOL);
    // A frame whose length is refused gets no answer a caller could match:
    // the session just ends.
    let node = &node;
    serve_frames(
        io,
        buf,
        ticket,
        &head,
        strata_net::RPC_SESSION_FRAME_MAX,
        |_| Vec::new(),
        |frame| async move { (strata_rpc::serve(&**node, frame).await, true) },
    )
    .await;
}

/// Parts of an answer at least this long are written on their own rather
/// than copied into the buffer that gathers small answers.
const DIRECT_PART_BYTES: usize = 64 << 10;

/// The loop of a session: answers `101 Switching Protocols` (`head`), then
/// takes frames until the client leaves, the connection breaks, a frame
/// is refused (its length by `bad_len`, whose bytes are sent last; its
/// content by `handle`), or no byte arrives for the head timeout, between
/// requests or within one (it is evictable while it waits, like a
/// kept-alive connection). Every whole frame that has arrived is answered
/// in order, and the answers go out in one write (less the parts of
/// [`DIRECT_PART_BYTES`] or more, written as they are).
async fn serve_frames<IO, H, F>(mut io: IO, mut buf: BytesMut, ticket: &Ticket, head: &str, max: usize, bad_len: impl Fn(String) -> Vec<u8>, mut handle: H)
where
    IO: AsyncRead + AsyncWrite + Unpin,
    H: FnMut(Bytes) -> F,
    F: std::future::Future<Output = (Vec<Bytes>, bool)>,
{
    if io.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let mut out = Vec::new();
    loop {
        let mut go_on = true;
        while go_on {
            let len = match strata_format::frame::next_frame_len(&buf, max) {
                Ok(Some(n)) if buf.len() >= n => n,
                // The buffer grows as bytes arrive, never ahead of them: a
                // client announcing long frames and sending nothing holds
                // no memory for them.
                Ok(_) => break,
                Err(e) => {
                    out.extend(bad_len(e.to_string()));
                    go_on = false;
                    break;
                }
            };
            let (answer, more) = handle(buf.split_to(len).freeze()).await;
            for part in answer {
                if part.len() < DIRECT_PART_BYTES {
                    out.extend_from_slice(&part);
                    continue;
                }
                // A large part (a fetch's record data) goes out as it is,
                // after what is gathered before it: no copy into `out`.
                if !out.is_empty() {
                    if io.write_all(&out).await.is_err() {
                        return;
                    }
                    out.clear();
                }
                if io.write_all(&part).await.is_err() {
                    return;
                }
            }
            go_on = more;
        }
        if !out.is_empty() {
            if io.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if !go_on {
            let _ = io.shutdown().await;
            return;
        }
        // Everything written so far reaches the peer before the loop waits:
        // a TLS stream's `write_all` may end with the last records still in
        // its buffer (the socket took only part of them), where they would
        // stay until the next write, and the peer waits for them.
        if io.flush().await.is_err() {
            return;
        }
        // Waiting for more bytes, a next request or the rest of one: a
        // session that sends nothing for the head timeout is ended (and
        // it is evictable meanwhile), so a frame left half-sent cannot hold
        // its connection for ever.
        ticket.set_waiting(true);
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

    /// A session's head and answers reach a peer through a writer that
    /// holds bytes until it is flushed (as TLS holds the records a full
    /// socket did not take), small answers and large parts alike.
    #[tokio::test]
    async fn answers_are_flushed_before_the_session_waits() {
        use std::time::Duration;
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (r, w) = tokio::io::split(server);
        let io = tokio::io::join(r, tokio::io::BufWriter::with_capacity(1 << 20, w));
        let gate = crate::limits::Gate::new(4);
        let ticket = gate.admit().expect("a ticket");
        let head = "HTTP/1.1 101 Switching Protocols\r\n\r\n";
        let big = Bytes::from(vec![7u8; DIRECT_PART_BYTES + 10]);
        let answer = big.clone();
        tokio::spawn(async move {
            serve_frames(
                io,
                BytesMut::new(),
                &ticket,
                head,
                1 << 20,
                |_| Vec::new(),
                move |f| {
                    let answer = answer.clone();
                    async move { (vec![f, answer], true) }
                },
            )
            .await
        });
        async fn read(n: usize, client: &mut tokio::io::DuplexStream) -> Vec<u8> {
            let mut got = vec![0u8; n];
            tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await.expect("bytes left unflushed").expect("read");
            got
        }
        assert_eq!(read(head.len(), &mut client).await, head.as_bytes());
        for _ in 0..2 {
            let frame = strata_format::frame::encode_frame(0x40, b"ping");
            client.write_all(&frame).await.expect("write");
            let mut want = frame.clone();
            want.extend_from_slice(&big);
            assert!(read(want.len(), &mut client).await == want, "the answer came back changed");
        }
    }

    fn h<'a>(name: &'a str, value: &'a [u8]) -> httparse::Header<'a> {
        httparse::Header { name, value }
    }

    #[test]
    fn only_a_bodiless_upgrade_post_of_a_session_path_is_one() {
        let ok = [h("Upgrade", b"strata-rw/1"), h("Connection", b"keep-alive, Upgrade")];
        let rw = |path: &str, headers: &[httparse::Header<'_>]| match recognize(Some("POST"), path, headers) {
            Some(Session::Rw(up)) => Some((up.store, up.write)),
            _ => None,
        };
        assert_eq!(rw("/rw/my%20store/write-session", &ok), Some(("my store".into(), true)));
        assert_eq!(rw("/rw/s/session", &ok), Some(("s".into(), false)));
        // The replica RPC session has its own token.
        assert!(recognize(Some("POST"), "/rpc/v1/session", &ok).is_none());
        let rpc = [h("Upgrade", b"strata-rpc/1"), h("Connection", b"upgrade")];
        assert!(matches!(recognize(Some("POST"), "/rpc/v1/session", &rpc), Some(Session::Rpc)));
        assert!(rw("/rw/s/session", &rpc).is_none());
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
