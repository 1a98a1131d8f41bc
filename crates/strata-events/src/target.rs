//! Where events go: the [`Target`] trait and the local JSON-lines file.

use crate::{Event, EventError};
use futures_util::future::BoxFuture;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A destination for events. `deliver` returns once the target holds the
/// batch, durably or durably after the next [`Target::sync`]; the sender
/// calls `sync` before it stores a position past the batch, so a batch may
/// be delivered twice but never skipped.
pub trait Target: Send + Sync {
    /// The target's name (in metrics, status and cursor files).
    fn name(&self) -> &str;
    /// Delivers `events`, in order.
    fn deliver<'a>(&'a self, events: &'a [Event]) -> BoxFuture<'a, Result<(), EventError>>;
    /// Makes everything delivered so far durable (for targets whose
    /// `deliver` alone does not).
    fn sync(&self) -> BoxFuture<'_, Result<(), EventError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A local file of JSON lines, one event per line, for offline analysis.
/// Batches are appended as they come and fsync'd before a sender stores
/// its position past them ([`Target::sync`]): one fsync a second per
/// sender under load rather than one per batch. Every sender of one path
/// in this process shares one writer, which on first opening the file cuts
/// off a torn last line (a crash mid-append: the cut events' positions were
/// never stored, so they are sent again).
pub struct FileTarget {
    name: String,
    file: Arc<SharedFile>,
}

/// The one writer of a path in this process.
struct SharedFile {
    path: PathBuf,
    /// Open for appending, once the torn tail (if any) is cut off.
    handle: Mutex<Option<std::fs::File>>,
    /// Appended since the last fsync.
    dirty: AtomicBool,
    /// Held across a sync, so a sync that finds nothing dirty returns only
    /// after the one under way (which covers its data) has finished.
    syncing: Mutex<()>,
}

fn shared(path: &Path) -> Arc<SharedFile> {
    static FILES: Mutex<BTreeMap<PathBuf, Weak<SharedFile>>> = Mutex::new(BTreeMap::new());
    let mut files = FILES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    files.retain(|_, w| w.strong_count() > 0);
    if let Some(f) = files.get(path).and_then(Weak::upgrade) {
        return f;
    }
    let f = Arc::new(SharedFile { path: path.to_owned(), handle: Mutex::new(None), dirty: AtomicBool::new(false), syncing: Mutex::new(()) });
    files.insert(path.to_owned(), Arc::downgrade(&f));
    f
}

impl SharedFile {
    fn what(&self, doing: &str) -> String {
        format!("{doing} {}", self.path.display())
    }

    /// Opens the file for appending, cutting a torn last line off first.
    fn open(&self) -> Result<std::fs::File, EventError> {
        let mut f = std::fs::OpenOptions::new().create(true).read(true).append(true).open(&self.path).map_err(EventError::io(self.what("opening")))?;
        let len = f.metadata().map_err(EventError::io(self.what("reading")))?.len();
        let mut end = len;
        let mut buf = vec![0u8; 64 << 10];
        while end > 0 {
            let from = end.saturating_sub(buf.len() as u64);
            let chunk = &mut buf[..(end - from) as usize];
            f.seek(SeekFrom::Start(from)).map_err(EventError::io(self.what("reading")))?;
            f.read_exact(chunk).map_err(EventError::io(self.what("reading")))?;
            match chunk.iter().rposition(|&b| b == b'\n') {
                Some(i) => {
                    end = from + i as u64 + 1;
                    break;
                }
                None => end = from,
            }
        }
        if end < len {
            tracing::warn!(path = %self.path.display(), bytes = len - end, "cutting off a torn last line (a crash mid-append); its events are sent again");
            f.set_len(end).map_err(EventError::io(self.what("truncating")))?;
            f.sync_data().map_err(EventError::io(self.what("syncing")))?;
        }
        Ok(f)
    }

    fn append(&self, text: &[u8]) -> Result<(), EventError> {
        let mut h = self.handle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A file renamed or removed away (log rotation) is left complete
        // and durable, and a new one started at the path.
        if let Some(old) = h.as_ref() {
            use std::os::unix::fs::MetadataExt;
            let here = std::fs::metadata(&self.path).ok().map(|m| (m.dev(), m.ino()));
            let open = old.metadata().ok().map(|m| (m.dev(), m.ino()));
            if here.is_none() || here != open {
                old.sync_data().map_err(EventError::io(self.what("syncing the rotated")))?;
                *h = None;
            }
        }
        if h.is_none() {
            *h = Some(self.open()?);
        }
        let f = h.as_mut().ok_or_else(|| EventError::Io { what: self.what("opening"), source: std::io::ErrorKind::NotFound.into() })?;
        self.dirty.store(true, Ordering::SeqCst);
        f.write_all(text).map_err(EventError::io(self.what("appending to")))
    }

    fn sync(&self) -> Result<(), EventError> {
        let _one = self.syncing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !self.dirty.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let f = self.handle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref().map(std::fs::File::try_clone);
        match f {
            Some(Ok(f)) => f.sync_data().map_err(|e| {
                self.dirty.store(true, Ordering::SeqCst);
                EventError::io(self.what("syncing"))(e)
            }),
            Some(Err(e)) => {
                self.dirty.store(true, Ordering::SeqCst);
                Err(EventError::io(self.what("syncing"))(e))
            }
            None => Ok(()),
        }
    }
}

impl FileTarget {
    /// Appending to `path` (created if missing).
    pub fn new(name: &str, path: &Path) -> Self {
        Self { name: name.into(), file: shared(path) }
    }
}

impl Target for FileTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver<'a>(&'a self, events: &'a [Event]) -> BoxFuture<'a, Result<(), EventError>> {
        Box::pin(async move {
            // One buffer for the batch, each event encoded straight into it.
            let mut text = Vec::new();
            for e in events {
                serde_json::to_writer(&mut text, e)?;
                text.push(b'\n');
            }
            let file = self.file.clone();
            tokio::task::spawn_blocking(move || file.append(&text))
                .await
                .map_err(|e| EventError::Target { target: self.name.clone(), why: format!("the writer stopped: {e}") })?
        })
    }

    fn sync(&self) -> BoxFuture<'_, Result<(), EventError>> {
        Box::pin(async move {
            let file = self.file.clone();
            tokio::task::spawn_blocking(move || file.sync())
                .await
                .map_err(|e| EventError::Target { target: self.name.clone(), why: format!("the writer stopped: {e}") })?
        })
    }
}
