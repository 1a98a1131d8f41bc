//! Connections. A plain `GET /{id}` of a simple blob stored locally is
//! answered here with `sendfile(2)`: the bytes go from the page cache to the
//! socket without passing through user space (or, for a blob the engine
//! serves from memory, from the tail cache with vectored writes). Every
//! other request (and any GET the fast path does not fully handle,
//! including all errors) goes to hyper and the axum handlers, with the
//! bytes already read replayed first, so both paths give the same answers. A connection stays on the fast path
//! while its requests are plain GETs; the first other request hands it to
//! hyper for the rest of its life (hyper cannot hand a kept-alive connection
//! back), so clients that mix puts and gets on one pooled connection are
//! served correctly but without sendfile.

use crate::AppState;
use crate::auth::ConnInfo;
use crate::handlers::set_blob_headers;
use crate::limits::{Ended, Limits, Ticket};
use bytes::{Buf, Bytes, BytesMut};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use strata_router::BlobData;
use strata_types::{BlobId, BlobKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Largest request head the fast path buffers before handing the connection over.
const HEAD_BYTES_MAX: usize = 16 * 1024;
/// How long shutdown waits for in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

type Service = TowerToHyperService<axum::Router>;

/// Accepts connections until `shutdown` resolves, then drains them. With
/// `tls`, every connection is TLS (no sendfile fast path: the bytes must be
/// encrypted in user space), and one that presents a certificate of the
/// cluster's CA is a node's.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let console = state.console.get().cloned();
    let service = TowerToHyperService::new(crate::app_with(state.clone(), console));
    let graceful = GracefulShutdown::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let gate = state.metrics.connection_gate(limits.max_connections);
    gate.spawn_reaper(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = gate.room() => {}
            _ = &mut shutdown => break,
        }
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, remote)) => {
                    let _ = stream.set_nodelay(true);
                    match (gate.admit(), &acceptor) {
                        (Some(ticket), Some(acceptor)) => {
                            let (service, watcher, state, acceptor) = (service.clone(), graceful.watcher(), state.clone(), acceptor.clone());
                            tasks.spawn(async move {
                                let Some((tls, peer)) = handshake(acceptor, stream, remote, &ticket, &state).await else { return };
                                let info = ConnInfo { remote: Some(remote), peer };
                                serve_hyper(tls, ticket, limits, with_conn_info(service, info), Some(watcher), Some((state, info))).await;
                            });
                        }
                        (Some(ticket), None) => {
                            let info = ConnInfo { remote: Some(remote), peer: false };
                            let conn = Conn { state: state.clone(), service: service.clone(), watcher: graceful.watcher(), stop: stop_rx.clone(), ticket, limits, info };
                            tasks.spawn(conn.run(stream));
                        }
                        (None, _) => {
                            gate.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tasks.spawn(crate::limits::refuse(stream, limits.max_connections));
                        }
                    }
                }
                Err(e) => {
                    // Out of descriptors or similar: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = &mut shutdown => break,
        }
        while tasks.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Kept sessions and connections between requests end now; the drain
    // waits for requests in flight only.
    gate.close_idle();
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        graceful.shutdown().await;
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("connections still open after the drain timeout");
    }
    Ok(())
}

/// Serves `service` (the S3 API) on `listener` under `limits`, until
/// `shutdown` resolves: the same gate, head timeout and refusal of
/// `Transfer-Encoding` with `Content-Length` as the node's own port, and
/// TLS with `tls`.
pub async fn serve_service<S, B>(
    listener: TcpListener,
    service: S,
    gate: Arc<crate::limits::Gate>,
    limits: Limits,
    tls: Option<(Arc<rustls::ServerConfig>, Arc<AppState>)>,
    shutdown: impl std::future::Future<Output = ()>,
) -> io::Result<()>
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    gate.spawn_reaper(limits.header_timeout);
    let tls = tls.map(|(config, state)| (tokio_rustls::TlsAcceptor::from(config), state));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = gate.room() => {}
            () = &mut shutdown => return Ok(()),
        }
        let (stream, remote) = tokio::select! {
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let Some(ticket) = gate.admit() else {
            gate.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(crate::limits::refuse(stream, limits.max_connections));
            continue;
        };
        let service = WithRemote { inner: service.clone(), remote };
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                Some((acceptor, state)) => {
                    if let Some((stream, _)) = handshake(acceptor, stream, remote, &ticket, &state).await {
                        serve_hyper(stream, ticket, limits, service, None, None).await;
                    }
                }
                None => serve_hyper(stream, ticket, limits, service, None, None).await,
            }
        });
    }
}

/// A service with the client's address in each request's extensions
/// (`std::net::SocketAddr`): what bucket policies on `aws:SourceIp` judge.
#[derive(Clone)]
struct WithRemote<S> {
    inner: S,
    remote: std::net::SocketAddr,
}

impl<S> hyper::service::Service<http::Request<hyper::body::Incoming>> for WithRemote<S>
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, mut req: http::Request<hyper::body::Incoming>) -> Self::Future {
        req.extensions_mut().insert(self.remote);
        self.inner.call(req)
    }
}

/// The TLS handshake of a new connection, within the head timeout (and
/// evictable like a connection waiting for its head). A failed one is
/// logged with the client's address: a node with another cluster's
/// secret shows here. Returns the stream and whether the client presented
/// a certificate of the cluster's CA.
async fn handshake(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    remote: std::net::SocketAddr,
    ticket: &Ticket,
    state: &AppState,
) -> Option<(tokio_rustls::server::TlsStream<TcpStream>, bool)> {
    ticket.set_waiting(true);
    let result = tokio::select! {
        r = acceptor.accept(stream) => r,
        _ = ticket.ended() => return None,
    };
    match result {
        Ok(tls) => {
            let peer = tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
            Some((tls, peer))
        }
        Err(e) => {
            state.metrics.tls_handshake_failures.inc();
            tracing::warn!(%remote, error = %e, "TLS handshake refused");
            None
        }
    }
}

/// Serves one connection through hyper: waits for its first head
/// (evictable, within the head timeout), refuses `Transfer-Encoding` with
/// `Content-Length`, then hands it to hyper, whose head timeout covers the
/// waits for later requests. With `sessions` (the node's own port), a
/// first request that upgrades to a read-write store session is served
/// here instead.
async fn serve_hyper<IO, S, B>(
    mut stream: IO,
    ticket: Ticket,
    limits: Limits,
    service: S,
    watcher: Option<Watcher>,
    sessions: Option<(Arc<AppState>, ConnInfo)>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Evictable until the first head is in: a connection that never
    // sends one is the first to make room.
    ticket.set_waiting(true);
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        match parse_head(&buf, sessions.as_ref().map(|(st, info)| (&*st.auth, *info))) {
            Head::Session { session, len } => {
                let Some((state, _)) = &sessions else { return };
                ticket.set_waiting(false);
                crate::session::serve_session(stream, buf, len, state, session, &ticket).await;
                return;
            }
            Head::Smuggle => {
                let _ = stream.write_all(crate::limits::te_and_cl_response().as_bytes()).await;
                return;
            }
            Head::Partial if buf.len() < HEAD_BYTES_MAX => {}
            _ if !buf.is_empty() => break,
            _ => {}
        }
        tokio::select! {
            r = stream.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            why = ticket.ended() => {
                if why == Ended::TimedOut && !buf.is_empty() {
                    let _ = stream.write_all(crate::limits::head_timeout_response().as_bytes()).await;
                }
                return;
            }
        }
    }
    ticket.set_waiting(false);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(Rewind { pre: buf.freeze(), inner: stream }), service);
    let r = match watcher {
        Some(w) => w.watch(conn).await,
        None => conn.await,
    };
    if let Err(e) = r {
        if e.is_timeout() {
            ticket.timed_out();
        }
        tracing::debug!(error = %e, "connection ended");
    }
    drop(ticket);
}

enum Head {
    /// A complete GET of `/{id}` the fast path may serve; `len` bytes of head.
    Fast { id: String, len: usize },
    /// A complete GET of `/kv/{store}/{key}`: a read-only store lookup.
    Kv { store: String, key: String, len: usize },
    /// A signed and allowed upgrade to a read-write store session.
    Session { session: crate::session::Session, len: usize },
    /// Anything else, complete or malformed: hyper's job.
    Other,
    /// Not all of the head has arrived.
    Partial,
    /// Both `Transfer-Encoding` and `Content-Length`: refused.
    Smuggle,
}

/// Parses a head as the connection loop does (for fuzzing).
pub(crate) fn fuzz_head(buf: &[u8]) {
    let _ = parse_head(buf, None);
}

/// Whether a GET the fast path would serve is allowed: signed by a key
/// with the right (or authentication off), checked on the head as parsed.
/// A refused one goes to the full path, whose middleware answers it.
fn fast_allowed(auth: Option<(&crate::auth::Auth, ConnInfo)>, req: &httparse::Request<'_, '_>, need: crate::auth::Need) -> bool {
    let Some((auth, info)) = auth else { return true };
    let (Some(method), Some(target)) = (req.method, req.path) else { return false };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let pairs: Vec<(&str, &[u8])> = req.headers.iter().map(|h| (h.name, h.value)).collect();
    let view = strata_auth::RequestView { method, path, query, headers: &pairs };
    auth.allows_view(&view, info, &need)
}

/// Parses a request head. With `auth`, a GET the fast path could serve but
/// may not is `Other`.
fn parse_head(buf: &[u8], auth: Option<(&crate::auth::Auth, ConnInfo)>) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            if crate::limits::te_and_cl(req.headers.iter().map(|h| h.name)) {
                return Head::Smuggle;
            }
            let path = req.path.unwrap_or("");
            if let Some(session) = crate::session::recognize(req.method, path, req.headers)
                && auth.is_some()
            {
                use crate::auth::{Need, OwnedRight};
                let need = match &session {
                    crate::session::Session::Rw(up) if up.write => Need::Right(OwnedRight::KvAdmin(up.store.clone())),
                    crate::session::Session::Rw(up) => Need::Right(OwnedRight::KvRead(up.store.clone())),
                    crate::session::Session::Rpc => Need::Peer,
                };
                if !fast_allowed(auth, &req, need) {
                    return Head::Other;
                }
                return Head::Session { session, len };
            }
            let get = req.method == Some("GET") && req.version == Some(1) && !path.contains('?');
            let plain = get && BlobId::is_text_len(path.len().saturating_sub(1));
            let simple_headers = req.headers.iter().all(|h| {
                let n = h.name;
                !(n.eq_ignore_ascii_case("range")
                    || n.eq_ignore_ascii_case("transfer-encoding")
                    || n.eq_ignore_ascii_case("expect")
                    || n.eq_ignore_ascii_case("upgrade")
                    || (n.eq_ignore_ascii_case("connection") && !h.value.eq_ignore_ascii_case(b"keep-alive"))
                    || (n.eq_ignore_ascii_case("content-length") && h.value != b"0"))
            });
            if !simple_headers {
                return Head::Other;
            }
            if plain {
                use crate::auth::{Need, OwnedRight};
                let Ok(id) = BlobId::parse(&path[1..]) else { return Head::Other };
                if !fast_allowed(auth, &req, Need::Right(OwnedRight::BlobRead(id.container()))) {
                    return Head::Other;
                }
                return Head::Fast { id: path[1..].to_string(), len };
            }
            // A client's version floor is checked by the handler.
            let floor = req.headers.iter().any(|h| h.name.eq_ignore_ascii_case("x-strata-kv-min-version"));
            if get
                && !floor
                && let Some(rest) = path.strip_prefix("/kv/")
                && let Some((store, key)) = rest.split_once('/')
                && !store.is_empty()
                && !key.is_empty()
                && !key.contains('/')
            {
                use crate::auth::{Need, OwnedRight};
                let Some(decoded) = strata_auth::sigv4::percent_decode(store) else { return Head::Other };
                if !fast_allowed(auth, &req, Need::Right(OwnedRight::KvRead(decoded))) {
                    return Head::Other;
                }
                return Head::Kv { store: store.to_string(), key: key.to_string(), len };
            }
            Head::Other
        }
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(_) => Head::Other,
    }
}

enum Fast {
    Served,
    NotApplicable,
    Broken,
}

/// One connection and what it needs.
struct Conn {
    state: Arc<AppState>,
    service: Service,
    watcher: Watcher,
    stop: watch::Receiver<bool>,
    ticket: Ticket,
    limits: Limits,
    info: ConnInfo,
}

/// `service` with the connection's facts in every request's extensions,
/// where the authentication middleware finds them.
fn with_conn_info(
    service: Service,
    info: ConnInfo,
) -> impl hyper::service::Service<http::Request<hyper::body::Incoming>, Response = axum::response::Response, Error = std::convert::Infallible, Future: Send> + Clone
{
    hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(info);
        hyper::service::Service::call(&service, req)
    })
}

impl Conn {
    async fn run(self, mut stream: TcpStream) {
        let Conn { state, service, watcher, mut stop, ticket, limits, info } = self;
        let mut buf = BytesMut::with_capacity(4096);
        loop {
            // Waiting for a head: the gate may evict this connection for a
            // new one, and it has `header_timeout` to finish the head (or, idle
            // between requests, to start one).
            ticket.set_waiting(true);
            let fast = loop {
                if !buf.is_empty() {
                    match parse_head(&buf, Some((&state.auth, info))) {
                        Head::Smuggle => {
                            let _ = stream.write_all(crate::limits::te_and_cl_response().as_bytes()).await;
                            return;
                        }
                        Head::Fast { id, len } => break Some((id, len)),
                        Head::Session { session, len } => {
                            ticket.set_waiting(false);
                            crate::session::serve_session(stream, buf, len, &state, session, &ticket).await;
                            return;
                        }
                        Head::Kv { store, key, len } => match fast_kv(&mut stream, &state, &store, &key).await {
                            Fast::Served => {
                                buf.advance(len);
                                continue;
                            }
                            Fast::NotApplicable => break None,
                            Fast::Broken => return,
                        },
                        Head::Other => break None,
                        Head::Partial if buf.len() >= HEAD_BYTES_MAX => break None,
                        Head::Partial => {}
                    }
                }
                if buf.is_empty() && *stop.borrow() {
                    return;
                }
                // No timer per read: the gate's reaper ends a wait that
                // outlasts the head timeout.
                tokio::select! {
                    r = stream.read_buf(&mut buf) => match r {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    },
                    _ = stop.changed(), if buf.is_empty() => return,
                    why = ticket.ended() => {
                        if why == Ended::TimedOut && !buf.is_empty() {
                            let _ = stream.write_all(crate::limits::head_timeout_response().as_bytes()).await;
                        }
                        return;
                    }
                }
            };
            ticket.set_waiting(false);
            if let Some((id, len)) = fast {
                match fast_get(&mut stream, &state, &id).await {
                    Fast::Served => {
                        buf.advance(len);
                        continue;
                    }
                    Fast::NotApplicable => {}
                    Fast::Broken => return,
                }
            }
            let io = TokioIo::new(Rewind { pre: buf.freeze(), inner: stream });
            // hyper's head timeout also covers the wait for the next request.
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(io, with_conn_info(service, info));
            if let Err(e) = watcher.watch(conn).await {
                if e.is_timeout() {
                    ticket.timed_out();
                }
                tracing::debug!(error = %e, "connection ended with an error");
            }
            return;
        }
    }
}

/// Serves a read-only store lookup that finds its key straight from the
/// socket: one write of head and value. Anything else (unknown store or
/// key, bad key) goes to the axum handler, which answers it the same way
/// with its error.
async fn fast_kv(stream: &mut TcpStream, state: &AppState, store: &str, key: &str) -> Fast {
    let t = Instant::now();
    // Head and value in one buffer: the value's only copy out of the map.
    let rendered = state.kv.lookup(store, key, |version, value| {
        let mut out =
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\nx-strata-kv-version: {version}\r\n\r\n", value.len())
                .into_bytes();
        out.extend_from_slice(value);
        out
    });
    let Some(out) = rendered else { return Fast::NotApplicable };
    if stream.write_all(&out).await.is_err() {
        return Fast::Broken;
    }
    state.metrics.observe("kv_get", 200, t.elapsed().as_secs_f64());
    Fast::Served
}

/// Serves a GET of a simple blob: with `sendfile(2)` from its segment
/// file when it is stored here, or with one vectored write of head and
/// bytes when the engine answered from memory (the tail cache holds a
/// recent large blob, and then gives no file range).
async fn fast_get(stream: &mut TcpStream, state: &AppState, id: &str) -> Fast {
    let t = Instant::now();
    let Ok(id) = BlobId::parse(id) else { return Fast::NotApplicable };
    if id.kind() != BlobKind::Simple {
        return Fast::NotApplicable;
    }
    let Ok(body) = state.router.get(id, None).await else { return Fast::NotApplicable };
    let BlobData::Whole(bytes, range) = body.data else { return Fast::NotApplicable };
    let len = range.as_ref().map_or(bytes.len() as u64, |r| r.len);
    let mut headers = http::HeaderMap::new();
    set_blob_headers(&mut headers, &body.info);
    let mut head = format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n").into_bytes();
    for (k, v) in &headers {
        head.extend_from_slice(k.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(v.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    let Some(range) = range else {
        // Head and bytes in vectored writes: the head does not go out as
        // a segment of its own.
        if stream.write_all_buf(&mut Buf::chain(head.as_slice(), &bytes[..])).await.is_err() {
            return Fast::Broken;
        }
        state.metrics.bytes_sent.inc_by(len);
        state.metrics.memory_responses.inc();
        state.metrics.observe("get", 200, t.elapsed().as_secs_f64());
        return Fast::Served;
    };
    if stream.write_all(&head).await.is_err() {
        return Fast::Broken;
    }
    let (sock, file) = (stream.as_raw_fd(), range.raw_fd());
    let mut offset = range.offset as libc::off_t;
    let end = (range.offset + range.len) as libc::off_t;
    while offset < end {
        let want = (end - offset).min(1 << 30) as usize;
        let sent = stream
            .async_io(tokio::io::Interest::WRITABLE, || {
                // SAFETY: both descriptors are open for the duration (the
                // FileRange keeps the segment file open); `offset` is ours.
                let n = unsafe { libc::sendfile(sock, file, &mut offset, want) };
                if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
            })
            .await;
        match sent {
            Ok(0) | Err(_) => return Fast::Broken,
            Ok(_) => {}
        }
    }
    state.metrics.bytes_sent.inc_by(range.len);
    state.metrics.sendfile_responses.inc();
    state.metrics.observe("get", 200, t.elapsed().as_secs_f64());
    Fast::Served
}

/// Replays bytes already read from a connection before reading more.
struct Rewind<IO> {
    pre: Bytes,
    inner: IO,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Rewind<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(buf.remaining());
            buf.put_slice(&self.pre[..n]);
            self.pre.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Rewind<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_gets_take_the_fast_path() {
        let id = BlobId::from_parts(BlobKind::Simple, 3, [7; 16]).to_string();
        let get = format!("GET /{id} HTTP/1.1\r\nHost: x\r\n\r\n");
        let in_container = BlobId::from_parts(BlobKind::Simple, 3, [7; 16]).in_container(strata_types::ContainerRef { account: 1, container: 2 });
        let get2 = format!("GET /{in_container} HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(matches!(parse_head(get2.as_bytes(), None), Head::Fast { .. }), "an id of another container is served fast too");
        let bad = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "A".repeat(35));
        assert!(matches!(parse_head(bad.as_bytes(), None), Head::Other), "a malformed id is the handler's to refuse");
        assert!(matches!(parse_head(get.as_bytes(), None), Head::Fast { len, .. } if len == get.len()));
        assert!(matches!(parse_head(&get.as_bytes()[..10], None), Head::Partial));
        for other in [
            format!("GET /{id} HTTP/1.1\r\nRange: bytes=0-1\r\n\r\n"),
            format!("HEAD /{id} HTTP/1.1\r\n\r\n"),
            format!("GET /{id}/info HTTP/1.1\r\n\r\n"),
            format!("GET /{id} HTTP/1.0\r\n\r\n"),
            format!("GET /{id} HTTP/1.1\r\nConnection: close\r\n\r\n"),
            "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc".to_string(),
            "garbage\r\n\r\n".to_string(),
        ] {
            assert!(matches!(parse_head(other.as_bytes(), None), Head::Other), "{other:?}");
        }
    }
}
