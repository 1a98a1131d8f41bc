//! Where events go: the [`Target`] trait and the local JSON-lines file.

use crate::{Event, EventError};
use futures_util::future::BoxFuture;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A destination for events. `deliver` returns once the target holds the
/// batch durably (or refuses it); the sender moves the target's cursor
/// only then, so a batch may be delivered twice but never skipped.
pub trait Target: Send + Sync {
    /// The target's name (in metrics, status and cursor files).
    fn name(&self) -> &str;
    /// Delivers `events`, in order.
    fn deliver<'a>(&'a self, events: &'a [Event]) -> BoxFuture<'a, Result<(), EventError>>;
}

/// A local file of JSON lines, one event per line, for offline analysis;
/// each batch is fsync'd before it counts as delivered.
pub struct FileTarget {
    name: String,
    path: PathBuf,
}

impl FileTarget {
    /// Appending to `path` (created if missing).
    pub fn new(name: &str, path: &Path) -> Self {
        Self { name: name.into(), path: path.to_owned() }
    }
}

impl Target for FileTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver<'a>(&'a self, events: &'a [Event]) -> BoxFuture<'a, Result<(), EventError>> {
        Box::pin(async move {
            let mut text = String::new();
            for e in events {
                text.push_str(&e.to_json());
                text.push('\n');
            }
            let path = self.path.clone();
            tokio::task::spawn_blocking(move || {
                let what = |doing: &str| format!("{doing} {}", path.display());
                let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(EventError::io(what("opening")))?;
                f.write_all(text.as_bytes()).map_err(EventError::io(what("appending to")))?;
                f.sync_data().map_err(EventError::io(what("syncing")))
            })
            .await
            .map_err(|e| EventError::Target { target: self.name.clone(), why: format!("the writer stopped: {e}") })?
        })
    }
}
