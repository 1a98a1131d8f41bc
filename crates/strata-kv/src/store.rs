//! A store on a node: versions side by side, one live.
//!
//! ```text
//! <root>/
//!   store.json         the store definition (name, ring, chunks)
//!   version-1/ ...     chunk files and .metadata
//!   version-2/ ...
//!   latest             the live version and its last changes, replaced
//!                      atomically (`crate::latest`)
//! ```
//!
//! A version is verified and mapped before it goes live; going live is one
//! pointer swap under a write lock, so it takes microseconds whatever the
//! size. Readers take the live version (an `Arc`) under the read lock and
//! read without it: a read never fails during a swap and never sees two
//! versions, and an old version's maps last until its last reader is done.

use crate::Search;
use crate::latest::{By, Change, ChangeKind, Latest};
use crate::version::{Layout, StoreDef, Version, VersionError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

const LATEST: &str = "latest";
const DEF_FILE: &str = "store.json";
/// A ring store's share: `Layout` as JSON. Absent for a single-node store.
const LAYOUT_FILE: &str = "layout.json";
/// In a version directory: the metadata checksum of a version whose files'
/// CRCs were checked as they were copied in, so a swap need not re-read them.
const VERIFIED_FILE: &str = ".verified";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VersionError + '_ {
    move |source| VersionError::Io { path: path.to_path_buf(), source }
}

/// Whether `dir`'s files were CRC-checked when copied in: its `.verified`
/// names the checksum of its current metadata.
fn verified(dir: &Path) -> bool {
    let Ok(text) = std::fs::read(dir.join(crate::version::METADATA_FILE)) else { return false };
    let Ok(m) = crate::version::Metadata::parse(&text, dir) else { return false };
    std::fs::read_to_string(dir.join(VERIFIED_FILE)).is_ok_and(|t| t.trim() == m.checksum.to_string())
}

/// Records that `dir`'s files match its metadata's CRCs.
fn mark_verified(dir: &Path, checksum: u32) -> Result<(), VersionError> {
    write_atomic(&dir.join(VERIFIED_FILE), format!("{checksum}\n").as_bytes())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), VersionError> {
    strata_fs::replace_file(path, bytes).map_err(io(path))
}

/// How far a load has got.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LoadProgress {
    /// The version being loaded.
    pub version: u64,
    /// `checking` (metadata and checksums) or `copying`.
    pub phase: &'static str,
    /// Bytes copied so far.
    pub copied: u64,
    /// Bytes to copy.
    pub total: u64,
}

/// A read-only store on this node.
pub struct ReadOnlyStore {
    progress: Mutex<Option<LoadProgress>>,
    def: StoreDef,
    layout: RwLock<Layout>,
    root: PathBuf,
    keep: usize,
    search: Search,
    live: RwLock<Option<Arc<Version>>>,
    admin: Mutex<()>,
    /// The version a fetch is filling, if one runs.
    fetching: Mutex<Option<u64>>,
    /// The `latest` file as last written.
    latest: Mutex<Latest>,
}

impl ReadOnlyStore {
    /// Opens (or creates) the store in `root`; serves its live version if
    /// it has one. `keep` old versions are kept for rollbacks.
    /// A ring store's `layout.json` gives its share; without one, the
    /// store is a single-node store.
    pub fn open(root: &Path, def: StoreDef, keep: usize, search: Search) -> Result<Self, VersionError> {
        let path = root.join(LAYOUT_FILE);
        let layout = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| VersionError::Invalid(format!("{}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Layout::single(&def),
            Err(e) => return Err(io(&path)(e)),
        };
        Self::open_with(root, def, layout, keep, search)
    }

    /// Opens a store whose versions hold `layout`: one node's share of a
    /// ring, or everything of a single-node store.
    pub fn open_with(root: &Path, def: StoreDef, layout: Layout, keep: usize, search: Search) -> Result<Self, VersionError> {
        def.validate()?;
        std::fs::create_dir_all(root).map_err(io(root))?;
        let def_path = root.join(DEF_FILE);
        match std::fs::read(&def_path) {
            Ok(b) => {
                let have: StoreDef = serde_json::from_slice(&b).map_err(|e| VersionError::Invalid(format!("{}: {e}", def_path.display())))?;
                if have != def {
                    return Err(VersionError::Invalid(format!("{} holds store {:?}, not the definition given ({:?})", root.display(), have, def)));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                write_atomic(&def_path, &serde_json::to_vec(&def).map_err(|e| VersionError::Invalid(e.to_string()))?)?;
            }
            Err(e) => return Err(io(&def_path)(e)),
        }
        if layout.node.is_some() {
            write_atomic(&root.join(LAYOUT_FILE), &serde_json::to_vec(&layout).map_err(|e| VersionError::Invalid(e.to_string()))?)?;
        }
        let store = Self {
            progress: Mutex::new(None),
            def,
            layout: RwLock::new(layout),
            root: root.to_path_buf(),
            keep,
            search,
            live: RwLock::new(None),
            admin: Mutex::new(()),
            fetching: Mutex::new(None),
            latest: Mutex::new(Latest::default()),
        };
        let path = root.join(LATEST);
        if let Ok(text) = std::fs::read_to_string(&path) {
            let latest = Latest::parse(&text, &path.display().to_string())?;
            if let Some(n) = latest.live {
                let v = Version::open(n, &store.version_dir(n), &store.def, &store.layout())?;
                *store.live.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(v));
            }
            let recorded = latest.history.iter().map(|c| c.version).chain(latest.live).max().unwrap_or(0);
            let keeps_history = latest.last_seq > 0;
            *store.latest.lock().unwrap_or_else(|p| p.into_inner()) = latest;
            // A load moves its version in, then records it: one cut off
            // between the two is recorded now (with no identity).
            if keeps_history {
                for n in store.versions().into_iter().filter(|&n| n > recorded) {
                    store.commit(|l| l.push(ChangeKind::Loaded, n, &By::system()))?;
                }
            }
        }
        Ok(store)
    }

    /// Rewrites `latest` with `change` applied (under the admin lock).
    fn commit(&self, change: impl FnOnce(&mut Latest)) -> Result<(), VersionError> {
        let mut g = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = g.clone();
        change(&mut next);
        write_atomic(&self.root.join(LATEST), &next.encode())?;
        *g = next;
        Ok(())
    }

    /// The changes of this store's versions after `seq`, oldest first, and
    /// whether the kept history reaches back that far (change capture).
    pub fn changes_after(&self, seq: u64) -> (Vec<Change>, bool) {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).after(seq)
    }

    /// The last change's sequence number (0: none).
    pub fn last_change(&self) -> u64 {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).last_seq
    }

    /// The definition.
    pub fn def(&self) -> &StoreDef {
        &self.def
    }

    /// What this node's versions hold.
    pub fn layout(&self) -> Layout {
        self.layout.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How lookups search the index.
    pub fn search(&self) -> Search {
        self.search
    }

    /// Old versions kept for rollbacks.
    pub fn keep(&self) -> usize {
        self.keep
    }

    fn version_dir(&self, n: u64) -> PathBuf {
        self.root.join(format!("version-{n}"))
    }

    /// Version numbers present, ascending.
    pub fn versions(&self) -> Vec<u64> {
        let mut v: Vec<u64> =
            std::fs::read_dir(&self.root).into_iter().flatten().filter_map(|e| parse_version(&e.ok()?.file_name().to_string_lossy())).collect();
        v.sort_unstable();
        v
    }

    /// The live version, for a consistent set of reads.
    pub fn snapshot(&self) -> Option<Arc<Version>> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The live version's number.
    pub fn live_version(&self) -> Option<u64> {
        self.snapshot().map(|v| v.number)
    }

    /// Looks a key up in the live version (`None`: no live version or no key).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, VersionError> {
        match self.snapshot() {
            Some(v) => Ok(v.get(key, self.search)?.map(<[u8]>::to_vec)),
            None => Ok(None),
        }
    }

    /// Looks several keys up in one version.
    pub fn multi_get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, VersionError> {
        let Some(v) = self.snapshot() else { return Ok(vec![None; keys.len()]) };
        keys.iter().map(|k| Ok(v.get(k, self.search)?.map(<[u8]>::to_vec))).collect()
    }

    /// Copies a built version from `src` into the store as version `number`
    /// (default: the highest present + 1; it must exceed every present
    /// one), after checking it against the store. Does not make it live.
    pub fn load(&self, src: &Path, number: Option<u64>) -> Result<u64, VersionError> {
        self.load_by(src, number, &By::system())
    }

    /// [`ReadOnlyStore::load`], recording who asked.
    pub fn load_by(&self, src: &Path, number: Option<u64>, by: &By) -> Result<u64, VersionError> {
        let _g = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let max = self.versions().last().copied().unwrap_or(0);
        let n = number.unwrap_or(max + 1);
        if n <= max {
            return Err(VersionError::Invalid(format!("version {n} is not above the highest present ({max})")));
        }
        let set = |p: Option<LoadProgress>| *self.progress.lock().unwrap_or_else(|e| e.into_inner()) = p;
        set(Some(LoadProgress { version: n, phase: "checking", copied: 0, total: 0 }));
        let r = self.copy_in(src, n, &set).and_then(|n| self.commit(|l| l.push(ChangeKind::Loaded, n, by)).map(|()| n));
        set(None);
        r
    }

    fn copy_in(&self, src: &Path, n: u64, set: &dyn Fn(Option<LoadProgress>)) -> Result<u64, VersionError> {
        use std::io::{Read, Write};
        let meta = crate::version::Metadata::verify(src, &self.def, &self.layout())?;
        let total: u64 = meta.files.iter().map(|f| f.bytes).sum();
        let tmp = self.root.join(format!(".loading-{n}"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        let mut copied = 0u64;
        let mut buf = vec![0u8; 8 << 20];
        let names = meta.files.iter().map(|f| f.name.as_str()).chain(std::iter::once(crate::version::METADATA_FILE));
        for name in names {
            let (from, to) = (src.join(name), tmp.join(name));
            let mut r = std::fs::File::open(&from).map_err(io(&from))?;
            let mut w = std::fs::File::create(&to).map_err(io(&to))?;
            let mut crc = 0u32;
            loop {
                let k = r.read(&mut buf).map_err(io(&from))?;
                if k == 0 {
                    break;
                }
                crc = crc32c::crc32c_append(crc, &buf[..k]);
                w.write_all(&buf[..k]).map_err(io(&to))?;
                copied += k as u64;
                set(Some(LoadProgress { version: n, phase: "copying", copied: copied.min(total), total }));
            }
            w.sync_all().map_err(io(&to))?;
            // What was copied is what the metadata lists (the source may change under us).
            if let Some(f) = meta.files.iter().find(|f| f.name == name)
                && f.crc32c != crc
            {
                return Err(VersionError::Invalid(format!("{}: changed while it was copied (checksum {crc:#010x})", from.display())));
            }
        }
        mark_verified(&tmp, meta.checksum)?;
        std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(io(&tmp))?;
        // The copy is checked again before it can go live (swap verifies).
        let dir = self.version_dir(n);
        std::fs::rename(&tmp, &dir).map_err(io(&dir))?;
        std::fs::File::open(&self.root).and_then(|f| f.sync_all()).map_err(io(&self.root))?;
        Ok(n)
    }

    /// Starts fetching a version from elsewhere: reserves its number
    /// (default the highest present + 1) and returns the staging directory
    /// to fill (`.fetch-N`, kept across failed attempts so a retry resumes).
    /// One fetch at a time.
    pub fn begin_fetch(&self, number: Option<u64>) -> Result<(u64, PathBuf), VersionError> {
        let _g = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let mut f = self.fetching.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = *f {
            return Err(VersionError::Invalid(format!("store {}: version {n} is being fetched", self.def.name)));
        }
        let max = self.versions().last().copied().unwrap_or(0);
        let n = number.unwrap_or(max + 1);
        if n <= max {
            return Err(VersionError::Invalid(format!("version {n} is not above the highest present ({max})")));
        }
        let dir = self.root.join(format!(".fetch-{n}"));
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        *f = Some(n);
        self.set_progress(Some(LoadProgress { version: n, phase: "fetching", copied: 0, total: 0 }));
        Ok((n, dir))
    }

    /// Ends a fetch: on success checks the staging directory fully against
    /// its metadata and this store (sizes, CRCs, layout) and moves it in as
    /// version `n`; on failure leaves it for a retry to resume.
    pub fn end_fetch(&self, n: u64, ok: bool) -> Result<u64, VersionError> {
        self.end_fetch_by(n, ok, &By::system())
    }

    /// [`ReadOnlyStore::end_fetch`], recording who asked.
    pub fn end_fetch_by(&self, n: u64, ok: bool, by: &By) -> Result<u64, VersionError> {
        let _g = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let r = if ok { self.adopt(n).and_then(|n| self.commit(|l| l.push(ChangeKind::Loaded, n, by)).map(|()| n)) } else { Ok(n) };
        *self.fetching.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.set_progress(None);
        r
    }

    fn adopt(&self, n: u64) -> Result<u64, VersionError> {
        let staging = self.root.join(format!(".fetch-{n}"));
        // The fetch checked every file's CRC as it arrived: sizes suffice here.
        let mp = staging.join(crate::version::METADATA_FILE);
        let meta = crate::version::Metadata::parse(&std::fs::read(&mp).map_err(io(&mp))?, &mp)?;
        meta.fits(&staging, &self.def, &self.layout())?;
        meta.check_files_with(&staging, false)?;
        mark_verified(&staging, meta.checksum)?;
        for e in std::fs::read_dir(&staging).map_err(io(&staging))? {
            let p = e.map_err(io(&staging))?.path();
            std::fs::File::open(&p).and_then(|f| f.sync_all()).map_err(io(&p))?;
        }
        std::fs::File::open(&staging).and_then(|f| f.sync_all()).map_err(io(&staging))?;
        let dir = self.version_dir(n);
        std::fs::rename(&staging, &dir).map_err(io(&dir))?;
        std::fs::File::open(&self.root).and_then(|f| f.sync_all()).map_err(io(&self.root))?;
        Ok(n)
    }

    /// Removes version `n` (fetched or loaded, never the live one) and any
    /// staging of it: a cluster push that did not swap cleans up with this.
    pub fn discard(&self, n: u64) -> Result<(), VersionError> {
        let _g = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        if self.live_version() == Some(n) {
            return Err(VersionError::Invalid(format!("store {}: version {n} is live", self.def.name)));
        }
        if *self.fetching.lock().unwrap_or_else(|p| p.into_inner()) == Some(n) {
            return Err(VersionError::Invalid(format!("store {}: version {n} is being fetched", self.def.name)));
        }
        for d in [self.version_dir(n), self.root.join(format!(".fetch-{n}"))] {
            match std::fs::remove_dir_all(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&d)(e)),
            }
        }
        Ok(())
    }

    /// Bytes of version `n`'s chunk files, from its metadata.
    pub fn version_bytes(&self, n: u64) -> Option<u64> {
        let text = std::fs::read(self.version_dir(n).join(crate::version::METADATA_FILE)).ok()?;
        let m: crate::version::Metadata = serde_json::from_slice(&text).ok()?;
        Some(m.files.iter().map(|f| f.bytes).sum())
    }

    /// The staging directory for chunk files stolen from other nodes while
    /// the ring is rebalanced (Spock §4.3.2), emptied first if `fresh`.
    pub fn steal_dir(&self, fresh: bool) -> Result<PathBuf, VersionError> {
        let d = self.root.join(".steal");
        if fresh {
            match std::fs::remove_dir_all(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&d)(e)),
            }
        }
        std::fs::create_dir_all(&d).map_err(io(&d))?;
        Ok(d)
    }

    /// Gives this node a new share of the ring (Spock §4.3.2): the stolen
    /// chunk files staged in `steal_dir` move into the live version, the
    /// files of buckets no longer held are deleted, the live version's
    /// `.metadata` is rewritten for `layout`, and the version is reopened
    /// and swapped in under the same number. Readers never fail: the old
    /// maps serve until the swap. Older versions keep their old layout and
    /// can no longer be rolled back to.
    /// A node with no live version yet (joining the ring) creates version
    /// `create` from the stolen files alone.
    pub fn relayout(&self, layout: Layout, create: Option<u64>) -> Result<(), VersionError> {
        use crate::version::{FileSum, Metadata, sum_file};
        let _g = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let (live, fresh) = match (self.live_version(), create) {
            (Some(n), _) => (n, false),
            (None, Some(n)) => (n, true),
            (None, None) => return Err(VersionError::Invalid(format!("store {} has no live version to rebalance", self.def.name))),
        };
        let dir = self.version_dir(live);
        let meta_path = dir.join(crate::version::METADATA_FILE);
        let old = if fresh {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            Metadata {
                format: 1,
                store: self.def.clone(),
                hash: "md5".into(),
                node: None,
                ring: None,
                records: 0,
                collided_prefixes: 0,
                files: Vec::new(),
                checksum: 0,
            }
        } else {
            Metadata::parse(&std::fs::read(&meta_path).map_err(io(&meta_path))?, &meta_path)?
        };
        let staged = self.root.join(".steal");
        if let Ok(entries) = std::fs::read_dir(&staged) {
            for e in entries {
                let p = e.map_err(io(&staged))?.path();
                let Some(name) = p.file_name().map(|n| n.to_os_string()) else { continue };
                std::fs::File::open(&p).and_then(|f| f.sync_all()).map_err(io(&p))?;
                std::fs::rename(&p, dir.join(name)).map_err(io(&p))?;
            }
        }
        let known: std::collections::HashMap<&str, &FileSum> = old.files.iter().map(|f| (f.name.as_str(), f)).collect();
        let (mut files, mut records, mut collided) = (Vec::new(), 0u64, 0u64);
        for &(p, r) in &layout.buckets {
            for c in 0..self.def.chunks {
                let stem = StoreDef::chunk_name(p, r, c);
                for ext in ["index", "data"] {
                    let name = format!("{stem}.{ext}");
                    let f = match known.get(name.as_str()) {
                        Some(f) => (*f).clone(),
                        None => {
                            let (bytes, crc32c) = sum_file(&dir.join(&name)).map_err(|e| VersionError::Invalid(format!("rebalancing needs {name}: {e}")))?;
                            FileSum { name, bytes, crc32c }
                        }
                    };
                    files.push(f);
                }
                let reader = crate::format::ChunkReader::open(&dir.join(format!("{stem}.index")), &dir.join(format!("{stem}.data")))?;
                let (n, k) = reader.stats()?;
                records += n;
                collided += k;
            }
        }
        let keep: std::collections::HashSet<String> = files.iter().map(|f| f.name.clone()).collect();
        Metadata::write(&dir, &self.def, &layout, records, collided, files)?;
        for e in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let p = e.map_err(io(&dir))?.path();
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if (name.ends_with(".index") || name.ends_with(".data")) && !keep.contains(&name) {
                std::fs::remove_file(&p).map_err(io(&p))?;
            }
        }
        write_atomic(&self.root.join(LAYOUT_FILE), &serde_json::to_vec(&layout).map_err(|e| VersionError::Invalid(e.to_string()))?)?;
        *self.layout.write().unwrap_or_else(|p| p.into_inner()) = layout.clone();
        let v = Arc::new(Version::open(live, &dir, &self.def, &layout)?);
        mark_verified(&dir, v.meta.checksum)?;
        if fresh {
            self.commit(|l| l.live = Some(live))?;
        }
        *self.live.write().unwrap_or_else(|p| p.into_inner()) = Some(v);
        Ok(())
    }

    /// Sets the progress `/admin/kv` shows.
    pub fn set_progress(&self, p: Option<LoadProgress>) {
        *self.progress.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// The load in progress, if any.
    pub fn load_progress(&self) -> Option<LoadProgress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Makes version `n` live: verifies and maps it first, then swaps the
    /// pointer under the write lock, then drops versions beyond `keep`.
    pub fn swap(&self, n: u64) -> Result<(), VersionError> {
        self.swap_by(n, &By::system())
    }

    /// [`ReadOnlyStore::swap`], recording who asked.
    pub fn swap_by(&self, n: u64, by: &By) -> Result<(), VersionError> {
        let _g = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        self.swap_locked(n, ChangeKind::Swapped, by)
    }

    fn swap_locked(&self, n: u64, kind: ChangeKind, by: &By) -> Result<(), VersionError> {
        let dir = self.version_dir(n);
        if !dir.is_dir() {
            return Err(VersionError::Invalid(format!("store {} has no version {n}", self.def.name)));
        }
        let v = Arc::new(Version::open_checked(n, &dir, &self.def, &self.layout(), !verified(&dir))?);
        self.commit(|l| {
            l.live = Some(n);
            l.push(kind, n, by);
        })?;
        *self.live.write().unwrap_or_else(|p| p.into_inner()) = Some(v);
        self.collect_old(n);
        Ok(())
    }

    /// Makes an older version live again: `to`, or the newest one below the
    /// live version.
    pub fn rollback(&self, to: Option<u64>) -> Result<u64, VersionError> {
        self.rollback_by(to, &By::system())
    }

    /// [`ReadOnlyStore::rollback`], recording who asked.
    pub fn rollback_by(&self, to: Option<u64>, by: &By) -> Result<u64, VersionError> {
        let _g = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let live = self.live_version().ok_or_else(|| VersionError::Invalid(format!("store {} has no live version", self.def.name)))?;
        let target = match to {
            Some(t) => t,
            None => self
                .versions()
                .into_iter()
                .rev()
                .find(|&v| v < live)
                .ok_or_else(|| VersionError::Invalid(format!("store {} keeps no version older than {live}", self.def.name)))?,
        };
        self.swap_locked(target, ChangeKind::RolledBack, by)?;
        Ok(target)
    }

    /// Deletes versions older than the live one beyond the `keep` newest of
    /// them, in the background.
    fn collect_old(&self, live: u64) {
        let old: Vec<u64> = self.versions().into_iter().filter(|&v| v < live).collect();
        let doomed: Vec<PathBuf> = old.iter().rev().skip(self.keep).map(|&v| self.version_dir(v)).collect();
        if doomed.is_empty() {
            return;
        }
        std::thread::spawn(move || {
            for d in doomed {
                if let Err(e) = std::fs::remove_dir_all(&d) {
                    tracing::warn!(dir = %d.display(), error = %e, "could not delete an old version");
                }
            }
        });
    }
}

pub(crate) fn parse_version(name: &str) -> Option<u64> {
    name.strip_prefix("version-")?.parse().ok()
}
