//! The web console (docs/console.md): HTML pages `strata server` serves
//! under `/ui`, every asset inside the binary, no script or font from
//! anywhere else.
//!
//! It owns sign-in, sessions and the pages; it owns no rule about who may
//! do what. A user signs in with an access key; the console checks the
//! key by asking the node's own API who it is (`GET /admin/whoami`,
//! signed with it), keeps the key in a server-side [`session`] (the cookie
//! holds only a random id: HttpOnly, SameSite=Strict, Secure over TLS),
//! and reads and changes everything through the node's own HTTP API,
//! signed as that key. So the node's authorization decides each request
//! in one place, for the console as for any client, and a page a key may
//! not see answers what the API answered (403). Every state-changing form
//! carries its session's CSRF token.
//!
//! Layer rule (checked by the test command): may use strata-client,
//! strata-types; never the server, the engine, the router, the cluster map.

/// A page's `Result<_, Box<Response>>` step: the value, or the page
/// answered with at once.
macro_rules! tryr {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(r) => return *r,
        }
    };
}

mod buckets;
mod cluster;
mod keys;
mod kv;
pub mod page;
pub mod s3;
pub mod session;
mod striped;

use axum::extract::{Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use session::{COOKIE, Session, Sessions, same_token};
use std::sync::Arc;
use strata_client::{Client, ClientError, Credentials};
use strata_types::Clock;

/// Makes a client of the node's own API signing as `creds` (none: unsigned).
pub type Backend = Arc<dyn Fn(Option<Credentials>) -> Client + Send + Sync>;

/// One node's console.
pub struct Console {
    sessions: Sessions,
    backend: Backend,
    /// The node's S3 API, once it listens (buckets and objects).
    s3: std::sync::RwLock<Option<Backend>>,
    secure_cookie: bool,
    clock: Arc<dyn Clock>,
    /// Clients by (port or peer, access key id), kept so a page's calls
    /// reuse their connections (one per request cost a few ms a page).
    clients: std::sync::Mutex<std::collections::HashMap<(String, String), Client>>,
}

/// How long a session lasts without a request.
pub const SESSION_IDLE_MS: u64 = 30 * 60 * 1000;

impl Console {
    /// A console over the node `backend` reaches; `secure_cookie` when the
    /// node serves TLS (the cookie then goes over TLS only).
    pub fn new(backend: Backend, secure_cookie: bool, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            sessions: Sessions::new(SESSION_IDLE_MS, clock.clone()),
            backend,
            s3: std::sync::RwLock::new(None),
            secure_cookie,
            clock,
            clients: std::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Where the node's S3 API answers (the buckets and objects pages use it).
    pub fn set_s3(&self, backend: Backend) {
        *self.s3.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(backend);
    }

    fn s3_client(&self, s: &Session) -> Option<Client> {
        let backend = self.s3.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()?;
        Some(self.cached("s3", s, || backend(Some(s.creds.clone()))))
    }

    /// The client of a port signing as `s`'s key, made once per key.
    fn cached(&self, port: &str, s: &Session, make: impl FnOnce() -> Client) -> Client {
        let mut m = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Keys signed in at once are few; a bound keeps a stream of
        // different keys from growing the map without end.
        if m.len() > 1024 {
            m.clear();
        }
        m.entry((port.to_owned(), s.creds.access_key_id.clone())).or_insert_with(make).clone()
    }

    /// Sessions alive now (a metric).
    pub fn sessions(&self) -> usize {
        self.sessions.count()
    }

    fn cookie(&self, value: &str, max_age: Option<u64>) -> HeaderValue {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        let age = max_age.map_or(String::new(), |s| format!("; Max-Age={s}"));
        HeaderValue::from_str(&format!("{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict{secure}{age}")).unwrap_or(HeaderValue::from_static(""))
    }

    fn client(&self, s: &Session) -> Client {
        self.cached("api", s, || (self.backend)(Some(s.creds.clone())))
    }

    /// A client of another node of the cluster (`host:port` from the map),
    /// signing as `s`'s key and trusting what this node's client trusts.
    fn peer(&self, s: &Session, addr: &str) -> Client {
        let own = self.client(s);
        self.cached(addr, s, || own.to(&format!("https://{addr}")))
    }
}

type S = State<Arc<Console>>;

/// The console's routes, all under `/ui`.
pub fn routes(console: Arc<Console>) -> axum::Router {
    axum::Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/overview") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/overview") }))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/overview", get(overview))
        .merge(buckets::routes())
        .merge(keys::routes())
        .merge(cluster::routes())
        .merge(kv::routes())
        .merge(striped::routes())
        .route("/ui/static/console.css", get(|| async { ([(header::CONTENT_TYPE, "text/css")], page::CSS) }))
        .route("/ui/static/console.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript")], include_str!("console.js")) }))
        .with_state(console)
}

/// A page saying what the node answered to a call that failed, with the
/// node's status (403 for a key without the right, 404 for what is gone).
fn failed(s: &Session, what: &str, e: &ClientError) -> Response {
    let (status, text) = match e {
        ClientError::Api { status, code, message } => {
            // The S3 API answers in XML: its code and message.
            let (code, message) = match s3::leaves(message) {
                Ok(l) if l.iter().any(|(p, _)| p == "Error/Code") => {
                    let get = |k: &str| l.iter().find(|(p, _)| p == k).map(|(_, t)| t.clone()).unwrap_or_default();
                    (get("Error/Code"), get("Error/Message"))
                }
                _ => (code.clone(), message.clone()),
            };
            (StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY), format!("{what}: {code}: {message}"))
        }
        other => (StatusCode::BAD_GATEWAY, format!("{what}: the node did not answer: {other}")),
    };
    (status, page::message(s, "Not done", &text)).into_response()
}

/// The signed-in session of a page request, or the sign-in page.
fn signed_in(c: &Console, headers: &HeaderMap) -> Result<Session, Box<Response>> {
    session_of(c, headers).map(|(_, s)| s).ok_or_else(|| Box::new(signed_out("Sign in to see this page.")))
}

/// The session a request's cookie names, if live.
fn session_of(c: &Console, headers: &HeaderMap) -> Option<(String, Session)> {
    let cookies = headers.get_all(header::COOKIE);
    for v in cookies.iter().filter_map(|v| v.to_str().ok()) {
        for part in v.split(';') {
            if let Some(id) = part.trim().strip_prefix(COOKIE).and_then(|r| r.strip_prefix('='))
                && let Some(s) = c.sessions.get(id)
            {
                return Some((id.to_owned(), s));
            }
        }
    }
    None
}

/// A page for someone not signed in: the sign-in page, 401 (a script
/// sees the status; a person sees why).
fn signed_out(message: &str) -> Response {
    (StatusCode::UNAUTHORIZED, page::login(message)).into_response()
}

async fn login_page(State(c): S, headers: HeaderMap) -> Response {
    if session_of(&c, &headers).is_some() {
        return Redirect::to("/ui/overview").into_response();
    }
    page::login("").into_response()
}

#[derive(serde::Deserialize)]
struct LoginForm {
    access_key_id: String,
    secret_access_key: String,
}

async fn login(State(c): S, Form(f): Form<LoginForm>) -> Response {
    let id = f.access_key_id.trim();
    if id.is_empty() || f.secret_access_key.is_empty() {
        return (StatusCode::BAD_REQUEST, page::login("Give an access key id and its secret.")).into_response();
    }
    let creds = Credentials { access_key_id: id.to_owned(), secret_access_key: f.secret_access_key };
    let client = (c.backend)(Some(creds.clone()));
    match client.json(http::Method::GET, "/admin/whoami").await {
        Ok(me) if me["access_key_id"].as_str() == Some(id) => {
            let admin = me["admin"].as_bool().unwrap_or(false);
            let name = me["name"].as_str().unwrap_or("").to_owned();
            let sid = c.sessions.start(creds, admin, name);
            tracing::info!(key = %id, admin, "console sign-in");
            let mut r = Redirect::to("/ui/overview").into_response();
            r.headers_mut().insert(header::SET_COOKIE, c.cookie(&sid, None));
            r
        }
        Ok(_) | Err(ClientError::Api { status: 401 | 403, .. }) => {
            tracing::info!(key = %id, "console sign-in refused");
            signed_out("Those credentials are not valid: check the access key id and secret.")
        }
        Err(e) => (StatusCode::BAD_GATEWAY, page::login(&format!("The node did not answer: {e}"))).into_response(),
    }
}

/// A form that carries only its CSRF token.
#[derive(serde::Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    pub(crate) csrf: String,
}

/// The session of a state-changing form, if its CSRF token is its own.
fn checked(c: &Console, headers: &HeaderMap, csrf: &str) -> Result<(String, Session), Box<Response>> {
    let Some((id, s)) = session_of(c, headers) else { return Err(Box::new(signed_out("Your session has ended: sign in again."))) };
    if !same_token(&s.csrf, csrf) {
        tracing::warn!(key = %s.creds.access_key_id, "console form refused: CSRF token missing or wrong");
        let text = "The form's security token is missing or wrong; nothing was changed. Reload the page and try again.";
        return Err(Box::new((StatusCode::FORBIDDEN, page::message(&s, "Refused", text)).into_response()));
    }
    Ok((id, s))
}

async fn logout(State(c): S, headers: HeaderMap, Form(f): Form<CsrfForm>) -> Response {
    let (id, s) = match checked(&c, &headers, &f.csrf) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    c.sessions.end(&id);
    // Its key's clients (and the secret they hold) go with it.
    c.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(_, k), _| *k != s.creds.access_key_id);
    let mut r = Redirect::to("/ui/login").into_response();
    r.headers_mut().insert(header::SET_COOKIE, c.cookie("", Some(0)));
    r
}

async fn overview(State(c): S, headers: HeaderMap) -> Response {
    let Some((_, s)) = session_of(&c, &headers) else { return signed_out("") };
    let client = c.client(&s);
    let health = client.json(http::Method::GET, "/health").await.ok();
    let (metrics, figures) = if s.admin {
        let get = |path: &'static str| {
            let client = client.clone();
            async move { client.json(http::Method::GET, path).await.ok() }
        };
        let (metrics, recent, partitions, cluster) =
            tokio::join!(client.get_text("/metrics"), get("/admin/metrics/recent"), get("/admin/partitions"), get("/admin/cluster/status"));
        (metrics.ok(), page::Figures { recent, partitions, cluster })
    } else {
        (None, page::Figures::default())
    };
    page::overview(&s, health.as_ref(), metrics.as_deref(), &figures).into_response()
}
