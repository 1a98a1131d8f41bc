//! Fetching a read-only store version onto this node (Spock §4.3: the pull
//! model, so a node throttles its own fetch). The source holds a build's
//! output: `node-<id>/` folders of a ring build, or one version directory
//! for a single-node store. It is a directory this node can read (local or
//! shared), an `http://` or `https://` URL serving the same tree (TLS by
//! rustls; server certificates checked against the system's roots, or the
//! file `SSL_CERT_FILE` names), or blobs stored in
//! Strata itself: `strata://host:port/<manifest blob id>`, where the
//! manifest (written by `strata kv upload`) maps each file's path in the
//! tree to its blob.
//!
//! The node reads `.metadata` first and refuses a version for another store,
//! ring or node before copying a byte. Each chunk file is then copied into
//! the store's staging directory with its CRC32C computed on the way and
//! compared with the metadata; a file already there whole is kept, a
//! partial one continued (an HTTP `Range` request, or a seek), so a failed
//! fetch resumes. The copy is paced to the configured MB/s. Progress shows
//! in `GET /admin/kv`.

use bytes::Bytes;
use futures_util::StreamExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_kv::version::FileSum;
use strata_kv::{LoadProgress, Metadata, ReadOnlyStore, VersionError};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

/// Where a build's output is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A directory on this node's filesystem (local or shared).
    Dir(PathBuf),
    /// An HTTP or HTTPS server serving the directory tree (the URL).
    Http(String),
    /// Blobs in a Strata cluster: the frontend's URL and the manifest's id.
    Strata {
        /// `http://host:port` of any frontend.
        base: String,
        /// The manifest blob.
        manifest: String,
    },
    /// One folder of a Strata manifest: file name → blob id.
    Blobs {
        /// `http://host:port` of any frontend.
        base: String,
        /// The folder's files.
        ids: std::collections::BTreeMap<String, String>,
    },
    /// A node's live version of a store (a rebalance's donor), read with
    /// this node's identity.
    Node(String),
}

/// The identity this node presents when it reads Strata endpoints itself
/// (a `strata://` manifest's blobs, a donor's chunk files): on a cluster its
/// certificate from the cluster's CA, on a single node its admin key.
static NODE_IDENTITY: std::sync::OnceLock<strata_client::ClientOptions> = std::sync::OnceLock::new();

/// Sets [`NODE_IDENTITY`] (once, at start; later calls are ignored).
pub fn set_node_identity(opts: strata_client::ClientOptions) {
    let _ = NODE_IDENTITY.set(opts);
}

pub(crate) fn node_client(base: &str) -> strata_client::Client {
    strata_client::Client::with_options(base, NODE_IDENTITY.get().unwrap_or(&strata_client::ClientOptions::default()))
}

/// A client of the node at `addr` (`host:port`), kept: its connections
/// (and their TLS sessions) serve every later request to that node.
pub(crate) fn peer_client(addr: &str) -> strata_client::Client {
    static PEERS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, strata_client::Client>>> = std::sync::OnceLock::new();
    let mut m = PEERS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    m.entry(addr.to_string()).or_insert_with(|| node_client(&format!("{}://{addr}", node_scheme()))).clone()
}

/// The options this node's own requests to other nodes use.
pub fn node_options() -> strata_client::ClientOptions {
    NODE_IDENTITY.get().cloned().unwrap_or_default()
}

/// `https` when this node talks TLS to its peers, else `http`.
pub fn node_scheme() -> &'static str {
    if NODE_IDENTITY.get().is_some_and(|o| o.tls.is_some()) { "https" } else { "http" }
}

/// The manifest `strata kv upload` stores: the build's files by path
/// (`node-3/0_1_0.data`, or `0_0_0.data` for a single-node build).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// Layout version (1).
    pub format: u16,
    /// Path → blob id.
    pub files: std::collections::BTreeMap<String, String>,
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The source is not usable.
    #[error("source {0}")]
    Source(String),
    /// The version does not fit, or a file is damaged.
    #[error(transparent)]
    Version(#[from] VersionError),
    /// Reading the source failed.
    #[error("{file}: {detail}")]
    Transfer {
        /// File.
        file: String,
        /// What went wrong.
        detail: String,
    },
}

impl Source {
    /// `http://host:port/path` or a directory path (`file://` optional).
    pub fn parse(s: &str) -> Result<Self, FetchError> {
        if s.starts_with("http://") {
            return Ok(Self::Http(s.trim_end_matches('/').to_string()));
        }
        if let Some(rest) = s.strip_prefix("strata://") {
            let (host, id) = rest.split_once('/').ok_or_else(|| FetchError::Source(format!("{s}: expected strata://host:port/<manifest blob id>")))?;
            if host.is_empty() || id.is_empty() || id.contains('/') {
                return Err(FetchError::Source(format!("{s}: expected strata://host:port/<manifest blob id>")));
            }
            return Ok(Self::Strata { base: format!("{}://{host}", node_scheme()), manifest: id.to_string() });
        }
        if s.starts_with("https://") {
            return Ok(Self::Http(s.trim_end_matches('/').to_string()));
        }
        let p = s.strip_prefix("file://").unwrap_or(s);
        if p.is_empty() {
            return Err(FetchError::Source("is empty".into()));
        }
        Ok(Self::Dir(PathBuf::from(p)))
    }

    /// The folder for `node` (`None`: a single-node build at the root); a
    /// Strata manifest is read here.
    async fn folder(&self, node: Option<u32>) -> Result<Self, FetchError> {
        let sub = node.map(|n| format!("node-{n}"));
        Ok(match (self, sub) {
            (Self::Dir(d), Some(s)) => Self::Dir(d.join(s)),
            (Self::Http(u), Some(s)) => Self::Http(format!("{u}/{s}")),
            (Self::Strata { base, manifest }, sub) => {
                let whole = Self::Blobs { base: base.clone(), ids: [(manifest.clone(), manifest.clone())].into() };
                let text = read_all(&whole, manifest).await?;
                let m: Manifest = serde_json::from_slice(&text).map_err(|e| FetchError::Source(format!("blob {manifest} is not a build manifest: {e}")))?;
                let ids = m
                    .files
                    .into_iter()
                    .filter_map(|(path, id)| match (&sub, path.split_once('/')) {
                        (Some(s), Some((dir, name))) if dir == s => Some((name.to_string(), id)),
                        (None, None) => Some((path, id)),
                        _ => None,
                    })
                    .collect();
                Self::Blobs { base: base.clone(), ids }
            }
            (s, _) => s.clone(),
        })
    }

    fn show(&self, file: &str) -> String {
        match self {
            Self::Dir(d) => d.join(file).display().to_string(),
            Self::Http(u) => format!("{u}/{file}"),
            Self::Strata { base, manifest } => format!("{base}/{manifest} ({file})"),
            Self::Blobs { base, ids } => format!("{base}/{} ({file})", ids.get(file).map_or("<not in the manifest>", String::as_str)),
            Self::Node(u) => format!("{u}/{file}"),
        }
    }
}

/// Paces a copy to `bytes_per_sec` (None: as fast as it goes).
struct Throttle {
    rate: Option<f64>,
    start: Instant,
    sent: u64,
}

impl Throttle {
    async fn pace(&mut self, n: usize) {
        self.sent += n as u64;
        if let Some(rate) = self.rate {
            let due = Duration::from_secs_f64(self.sent as f64 / rate);
            if let Some(wait) = due.checked_sub(self.start.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// One source file, read from an offset.
enum Reader {
    /// A file, or an HTTP body through strata-client.
    Stream(std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, String>> + Send>>),
    Https(hyper::body::Incoming),
}

impl Reader {
    /// The next piece; `None` at the end.
    async fn next(&mut self) -> Result<Option<Bytes>, String> {
        match self {
            Self::Stream(s) => s.next().await.transpose(),
            Self::Https(body) => {
                use http_body_util::BodyExt;
                loop {
                    match body.frame().await {
                        None => return Ok(None),
                        Some(Err(e)) => return Err(e.to_string()),
                        Some(Ok(f)) => {
                            if let Ok(d) = f.into_data() {
                                return Ok(Some(d));
                            }
                        }
                    }
                }
            }
        }
    }
}

type HttpsClient =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, http_body_util::Empty<Bytes>>;

/// The HTTPS client: rustls with ring, roots from the system's store
/// (which honours `SSL_CERT_FILE`), built once.
fn https_client() -> Result<&'static HttpsClient, String> {
    static CLIENT: std::sync::OnceLock<Result<HttpsClient, String>> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let conn = hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
                .map_err(|e| format!("no TLS roots: {e}"))?
                .https_only()
                .enable_http1()
                .build();
            Ok(hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(conn))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Opens `file` of `src` at `offset`; the flag says whether it really
/// starts there (an HTTP server that ignores `Range` starts at 0).
async fn open(src: &Source, file: &str, offset: u64) -> Result<(Reader, bool), FetchError> {
    let t = |detail: String| FetchError::Transfer { file: src.show(file), detail };
    match src {
        Source::Dir(d) => {
            let mut f = tokio::fs::File::open(d.join(file)).await.map_err(|e| t(e.to_string()))?;
            f.seek(std::io::SeekFrom::Start(offset)).await.map_err(|e| t(e.to_string()))?;
            Ok((Reader::Stream(Box::pin(strata_client::read_stream(f).map(|r| r.map_err(|e| e.to_string())))), true))
        }
        Source::Strata { .. } => Err(t("a manifest is read through its folder".into())),
        Source::Blobs { base, ids } => {
            let id = ids.get(file).ok_or_else(|| t("not in the manifest".into()))?;
            open_strata(&node_client(base), &format!("/{id}"), offset).await.map_err(t)
        }
        Source::Node(u) => {
            let (base, path) = split_url(u);
            open_strata(&node_client(base), &format!("{path}/{file}"), offset).await.map_err(t)
        }
        Source::Http(u) if u.starts_with("https://") => {
            let client = https_client().map_err(t)?;
            let mut req = http::Request::get(format!("{u}/{file}"));
            if offset > 0 {
                req = req.header(http::header::RANGE, format!("bytes={offset}-"));
            }
            let req = req.body(http_body_util::Empty::new()).map_err(|e| t(e.to_string()))?;
            let r = client.request(req).await.map_err(|e| t(format!("{e}: {}", std::error::Error::source(&e).map_or(String::new(), |s| s.to_string()))))?;
            let status = r.status();
            if !status.is_success() {
                return Err(t(format!("the server answered {status}")));
            }
            let from_offset = offset == 0 || status == http::StatusCode::PARTIAL_CONTENT;
            Ok((Reader::Https(r.into_body()), from_offset))
        }
        Source::Http(u) => {
            let (base, path) = split_url(u);
            open_strata(&strata_client::Client::new(base), &format!("{path}/{file}"), offset).await.map_err(t)
        }
    }
}

/// `scheme://host` and the path of a URL.
fn split_url(u: &str) -> (&str, &str) {
    let after = u.find("://").map_or(0, |i| i + 3);
    u.split_at(u[after..].find('/').map_or(u.len(), |i| after + i))
}

/// GETs `path` through a Strata client, from `offset`.
async fn open_strata(client: &strata_client::Client, path: &str, offset: u64) -> Result<(Reader, bool), String> {
    let headers: Vec<(&str, String)> = if offset > 0 { vec![("range", format!("bytes={offset}-"))] } else { vec![] };
    let r = client.send(http::Method::GET, path, &headers, strata_client::full(Bytes::new())).await.map_err(|e| e.to_string())?;
    let from_offset = offset == 0 || r.head.status == http::StatusCode::PARTIAL_CONTENT;
    Ok((Reader::Stream(Box::pin(r.into_stream().map(|r| r.map_err(|e| e.to_string())))), from_offset))
}

/// Reads a small file whole (the metadata).
async fn read_all(src: &Source, file: &str) -> Result<Vec<u8>, FetchError> {
    let (mut r, _) = open(src, file, 0).await?;
    let mut out = Vec::new();
    while let Some(b) = r.next().await.map_err(|detail| FetchError::Transfer { file: src.show(file), detail })? {
        out.extend_from_slice(&b);
        if out.len() > 64 << 20 {
            return Err(FetchError::Transfer { file: src.show(file), detail: "over 64 MiB: not a metadata file".into() });
        }
    }
    Ok(out)
}

/// CRC32C and size of the first bytes of a staged file (to resume after them).
async fn staged(path: &Path) -> (u64, u32) {
    let Ok(mut f) = tokio::fs::File::open(path).await else { return (0, 0) };
    let mut buf = vec![0u8; 1 << 20];
    let (mut n, mut crc) = (0u64, 0u32);
    loop {
        match f.read(&mut buf).await {
            Ok(0) | Err(_) => return (n, crc),
            Ok(k) => {
                crc = crc32c::crc32c_append(crc, &buf[..k]);
                n += k as u64;
            }
        }
    }
}

/// Fetches this node's folder of `source` into `store` as version `number`
/// (default: the highest present + 1), pacing the copy to `mb_per_sec`.
/// Returns the version number; it is not live until swapped.
pub async fn fetch(store: Arc<ReadOnlyStore>, source: &Source, number: Option<u64>, mb_per_sec: Option<f64>) -> Result<u64, FetchError> {
    fetch_by(store, source, number, mb_per_sec, strata_kv::By::system()).await
}

/// [`fetch`], recording who asked for the version (change capture).
pub async fn fetch_by(store: Arc<ReadOnlyStore>, source: &Source, number: Option<u64>, mb_per_sec: Option<f64>, by: strata_kv::By) -> Result<u64, FetchError> {
    let layout = store.layout();
    let src = source.folder(layout.node).await?;
    let text = read_all(&src, strata_kv::version::METADATA_FILE).await?;
    let meta = Metadata::parse(&text, Path::new(&src.show(strata_kv::version::METADATA_FILE)))?;
    // Refuse a version for another store, ring or node before copying.
    meta.fits(Path::new(&src.show("")), store.def(), &layout)?;
    let (n, staging) = store.begin_fetch(number)?;
    let r = copy_files(&store, &src, &meta, &text, n, &staging, mb_per_sec).await;
    let ok = r.is_ok();
    let adopted = tokio::task::spawn_blocking({
        let store = store.clone();
        move || store.end_fetch_by(n, ok, &by)
    })
    .await
    .map_err(|e| FetchError::Source(e.to_string()))?;
    r?;
    Ok(adopted?)
}

async fn copy_files(
    store: &ReadOnlyStore,
    src: &Source,
    meta: &Metadata,
    text: &[u8],
    n: u64,
    staging: &Path,
    mb_per_sec: Option<f64>,
) -> Result<(), FetchError> {
    let items: Vec<(FileSum, String)> = meta.files.iter().map(|f| (f.clone(), f.name.clone())).collect();
    copy_list(store, src, &items, n, staging, mb_per_sec).await?;
    let mp = staging.join(strata_kv::version::METADATA_FILE);
    tokio::fs::write(&mp, text).await.map_err(|e| FetchError::Transfer { file: mp.display().to_string(), detail: e.to_string() })?;
    Ok(())
}

/// Copies each source file (its size and CRC as listed) to `staging` under
/// the paired name, resuming a partial copy and checking the CRC; the
/// bytes copied.
async fn copy_list(
    store: &ReadOnlyStore,
    src: &Source,
    items: &[(FileSum, String)],
    n: u64,
    staging: &Path,
    mb_per_sec: Option<f64>,
) -> Result<u64, FetchError> {
    let total: u64 = items.iter().map(|(f, _)| f.bytes).sum();
    let mut done = 0u64;
    let mut throttle = Throttle { rate: mb_per_sec.filter(|r| *r > 0.0).map(|r| r * 1e6), start: Instant::now(), sent: 0 };
    for (f, to) in items {
        let path = staging.join(to);
        let t = |detail: String| FetchError::Transfer { file: src.show(&f.name), detail };
        let (mut have, mut crc) = staged(&path).await;
        if have > f.bytes {
            (have, crc) = (0, 0);
        }
        if have == f.bytes && crc == f.crc32c {
            done += have;
            continue;
        }
        let (mut reader, from_offset) = open(src, &f.name, have).await?;
        if !from_offset {
            (have, crc) = (0, 0);
        }
        let mut out = tokio::fs::OpenOptions::new().create(true).write(true).truncate(false).open(&path).await.map_err(|e| t(e.to_string()))?;
        out.set_len(have).await.map_err(|e| t(e.to_string()))?;
        out.seek(std::io::SeekFrom::Start(have)).await.map_err(|e| t(e.to_string()))?;
        done += have;
        while let Some(b) = reader.next().await.map_err(t)? {
            if have + b.len() as u64 > f.bytes {
                return Err(t(format!("longer than the {} bytes the metadata says", f.bytes)));
            }
            crc = crc32c::crc32c_append(crc, &b);
            out.write_all(&b).await.map_err(|e| t(e.to_string()))?;
            have += b.len() as u64;
            done += b.len() as u64;
            store.set_progress(Some(LoadProgress { version: n, phase: "fetching", copied: done.min(total), total }));
            throttle.pace(b.len()).await;
        }
        out.flush().await.map_err(|e| t(e.to_string()))?;
        if have != f.bytes {
            return Err(t(format!("{have} bytes, the metadata says {} (truncated)", f.bytes)));
        }
        if crc != f.crc32c {
            // Damaged at the source or on the way: do not resume from it.
            let _ = tokio::fs::remove_file(&path).await;
            return Err(t(format!("checksum {crc:#010x}, the metadata says {:#010x} (corrupt)", f.crc32c)));
        }
    }
    Ok(total)
}

/// Steals chunk files from a donor's live version for a rebalance (Spock
/// §4.3.2): `files` pairs the donor's file names with the names they take
/// here (a partition's replica id can differ between the two nodes). The
/// donor's `.metadata` gives each file's size and CRC, checked on the way.
/// The files wait in the store's steal directory for `relayout`.
pub async fn steal(store: Arc<ReadOnlyStore>, donor: &str, files: &[(String, String)], mb_per_sec: Option<f64>) -> Result<u64, FetchError> {
    let name = store.def().name.clone();
    let src = Source::Node(format!("{}/admin/kv/{name}/live", donor.trim_end_matches('/')));
    let text = read_all(&src, strata_kv::version::METADATA_FILE).await?;
    let meta = Metadata::parse(&text, Path::new(&src.show(strata_kv::version::METADATA_FILE)))?;
    if meta.store != *store.def() {
        return Err(FetchError::Source(format!("{donor}: its store {:?} is not this one", meta.store)));
    }
    let mut items = Vec::with_capacity(files.len());
    for (from, to) in files {
        let f = meta
            .files
            .iter()
            .find(|f| f.name == *from)
            .ok_or_else(|| FetchError::Transfer { file: src.show(from), detail: "not in the donor's live version".into() })?;
        items.push((f.clone(), to.clone()));
    }
    let staging = store.steal_dir(false)?;
    let live = store.live_version().unwrap_or(0);
    let r = copy_list(&store, &src, &items, live, &staging, mb_per_sec).await;
    store.set_progress(None);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse() {
        assert_eq!(Source::parse("/data/build").unwrap(), Source::Dir("/data/build".into()));
        assert_eq!(Source::parse("file:///data/b").unwrap(), Source::Dir("/data/b".into()));
        assert_eq!(Source::parse("http://h:1/x/").unwrap(), Source::Http("http://h:1/x".into()));
        assert_eq!(Source::parse("https://h/x/").unwrap(), Source::Http("https://h/x".into()));
        assert_eq!(Source::parse("strata://h:1/abc").unwrap(), Source::Strata { base: "http://h:1".into(), manifest: "abc".into() });
        assert_eq!(split_url("https://h:1/a/b"), ("https://h:1", "/a/b"));
        assert_eq!(split_url("http://h:1"), ("http://h:1", ""));
        assert!(Source::parse("strata://h:1").is_err());
    }
}
