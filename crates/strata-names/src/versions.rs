//! S3 object versioning: a versioned bucket keeps, beside each key's
//! current object (in [`Bucket::objects`], its version id in its metadata
//! under [`VERSION_META`], absent meaning `null`), the key's other
//! versions and delete markers, newest first ([`Versioning::older`]).
//!
//! Invariant: when a key has no current object but older versions, the
//! newest of them is a delete marker (which is then the current version);
//! removing a current object permanently promotes the newest older one if
//! it is an object. A key has at most one `null` version: an unversioned
//! or suspended write replaces it (and frees its blob).

use crate::NameError;
use crate::state::{NameState, ObjectMeta};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The metadata entry holding an object's version id (none: `null`).
pub const VERSION_META: &str = "/version-id";
/// S3's version id of an object written while versioning was off or suspended.
pub const NULL_VERSION: &str = "null";

/// One version of a key other than its current object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// Version id.
    pub id: String,
    /// The object, or None for a delete marker.
    pub object: Option<ObjectMeta>,
    /// When it was written (a delete marker: when the delete was).
    pub modified_ms: u64,
}

/// A bucket's versioning (absent for a bucket never versioned).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versioning {
    /// Enabled (or else suspended: new writes are `null` versions).
    pub enabled: bool,
    /// Each key's versions other than its current object, newest first.
    pub older: BTreeMap<String, Vec<Version>>,
    /// Object lock, once enabled (never disabled again, as on S3).
    pub lock: Option<Lock>,
}

/// A bucket's object lock: the retention new objects get by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// The default retention's mode and length in days (None: no default).
    pub default: Option<(LockMode, u32)>,
}

/// An object lock retention mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockMode {
    /// Protected unless the request bypasses governance retention.
    Governance,
    /// Protected from everyone until its date.
    Compliance,
}

impl LockMode {
    /// S3's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Governance => "GOVERNANCE",
            Self::Compliance => "COMPLIANCE",
        }
    }

    /// The mode S3 names so.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "GOVERNANCE" => Some(Self::Governance),
            "COMPLIANCE" => Some(Self::Compliance),
            _ => None,
        }
    }
}

/// Metadata entries of an object's lock: its retention mode, the time it
/// is retained until (ms since the epoch), and `ON` under a legal hold.
pub const LOCK_MODE_META: &str = "/lock-mode";
/// See [`LOCK_MODE_META`].
pub const LOCK_UNTIL_META: &str = "/lock-until";
/// See [`LOCK_MODE_META`].
pub const LEGAL_HOLD_META: &str = "/legal-hold";

/// An object's lock as its metadata holds it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectLock {
    /// Retention: mode and until when (ms since the epoch).
    pub retention: Option<(LockMode, u64)>,
    /// Under a legal hold.
    pub legal_hold: bool,
}

impl ObjectLock {
    /// The lock in `meta`.
    pub fn of(meta: &[(String, String)]) -> Self {
        let get = |name: &str| meta.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let retention = get(LOCK_MODE_META).and_then(LockMode::parse).zip(get(LOCK_UNTIL_META).and_then(|u| u.parse().ok()));
        Self { retention, legal_hold: get(LEGAL_HOLD_META) == Some("ON") }
    }

    /// `meta` with this lock's entries in place of any before.
    pub fn store_in(&self, meta: &mut Vec<(String, String)>) {
        meta.retain(|(k, _)| ![LOCK_MODE_META, LOCK_UNTIL_META, LEGAL_HOLD_META].contains(&k.as_str()));
        if let Some((mode, until)) = self.retention {
            meta.push((LOCK_MODE_META.to_owned(), mode.as_str().to_owned()));
            meta.push((LOCK_UNTIL_META.to_owned(), until.to_string()));
        }
        if self.legal_hold {
            meta.push((LEGAL_HOLD_META.to_owned(), "ON".to_owned()));
        }
    }

    /// Why the object cannot be deleted (or overwritten as a `null`
    /// version) at `now_ms`, if it cannot: a legal hold, a compliance
    /// retention, or a governance retention the request does not bypass.
    pub fn protects(&self, now_ms: u64, bypass_governance: bool) -> Option<String> {
        if self.legal_hold {
            return Some("it is under a legal hold".into());
        }
        match self.retention {
            Some((LockMode::Compliance, until)) if until > now_ms => Some(format!("it is retained in COMPLIANCE mode until {until} ms")),
            Some((LockMode::Governance, until)) if until > now_ms && !bypass_governance => {
                Some(format!("it is retained in GOVERNANCE mode until {until} ms (bypassing governance retention would allow it)"))
            }
            _ => None,
        }
    }
}

/// An object's version id.
pub fn version_id(o: &ObjectMeta) -> &str {
    o.meta.iter().find(|(k, _)| k == VERSION_META).map_or(NULL_VERSION, |(_, v)| v.as_str())
}

/// What a version id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found<'a> {
    /// An object (current or not).
    Object(&'a ObjectMeta),
    /// A delete marker.
    Marker,
    /// Nothing.
    Missing,
}

impl NameState {
    /// The version `id` of `key` in `bucket` (which must exist).
    pub fn version(&self, name: &str, key: &str, id: &str) -> Found<'_> {
        if let Some(o) = self.buckets.get(name).and_then(|b| b.objects.get(key)).filter(|o| version_id(o) == id) {
            return Found::Object(o);
        }
        match self.versioning.get(name).and_then(|v| v.older.get(key)).and_then(|vs| vs.iter().find(|v| v.id == id)) {
            Some(Version { object: Some(o), .. }) => Found::Object(o),
            Some(Version { object: None, .. }) => Found::Marker,
            None => Found::Missing,
        }
    }

    /// Whether `key`'s current version is a delete marker.
    pub fn deleted_by_marker(&self, bucket: &str, key: &str) -> bool {
        !self.buckets.get(bucket).is_some_and(|b| b.objects.contains_key(key))
            && self.versioning.get(bucket).and_then(|v| v.older.get(key)).and_then(|vs| vs.first()).is_some_and(|v| v.object.is_none())
    }

    /// Every blob the names point at: current objects, older versions and
    /// the parts of uploads in progress (what the orphan sweep must keep).
    pub fn named_blobs(&self) -> impl Iterator<Item = strata_types::BlobId> + '_ {
        let current =
            self.buckets.values().flat_map(|b| b.objects.values().map(|o| o.blob).chain(b.uploads.values().flat_map(|u| u.parts.values().map(|p| p.blob))));
        let older = self.versioning.values().flat_map(|v| v.older.values().flatten().filter_map(|v| v.object.as_ref().map(|o| o.blob)));
        current.chain(older)
    }

    /// Whether `bucket` keeps versions other than its current objects.
    pub(crate) fn has_older_versions(&self, bucket: &str) -> bool {
        self.versioning.get(bucket).is_some_and(|v| !v.older.is_empty())
    }

    /// Files `replaced` (the current object a write of version `new_id`
    /// displaced) as an older version if the bucket is versioned; returns
    /// what to free: the displaced object of an unversioned bucket, or
    /// the key's `null` version that a `null` write replaces.
    pub(crate) fn displace(&mut self, bucket: &str, key: &str, new_id: &str, replaced: Option<ObjectMeta>) -> Option<ObjectMeta> {
        let Some(v) = self.versioning.get_mut(bucket) else { return replaced };
        let mut freed = None;
        let list = v.older.entry(key.to_owned()).or_default();
        if let Some(old) = replaced {
            if version_id(&old) == NULL_VERSION && new_id == NULL_VERSION {
                freed = Some(old);
            } else {
                list.insert(0, Version { id: version_id(&old).to_owned(), modified_ms: old.modified_ms, object: Some(old) });
            }
        }
        if new_id == NULL_VERSION
            && let Some(i) = list.iter().position(|v| v.id == NULL_VERSION)
        {
            freed = freed.or(list.remove(i).object);
        }
        if list.is_empty() {
            v.older.remove(key);
        }
        freed
    }

    /// [`Self::remove_current`] for the `DeleteObject` op (lifecycle
    /// expiry, conditional deletes): an object with any lock setting stays,
    /// since the op carries no time to judge a retention by (S3 deletes of
    /// versions go through [`Self::delete_versioned`]).
    pub(crate) fn remove_current_unless_locked(&mut self, bucket: &str, key: &str) -> Option<ObjectMeta> {
        if self.buckets.get(bucket)?.objects.get(key).is_some_and(|o| ObjectLock::of(&o.meta) != ObjectLock::default()) {
            return None;
        }
        self.remove_current(bucket, key)
    }

    /// Removes `key`'s current object permanently, promoting its newest
    /// older version if that is an object; returns the removed object.
    fn remove_current(&mut self, bucket: &str, key: &str) -> Option<ObjectMeta> {
        let removed = self.buckets.get_mut(bucket)?.objects.remove(key);
        self.promote(bucket, key);
        removed
    }

    fn promote(&mut self, bucket: &str, key: &str) {
        let Some(v) = self.versioning.get_mut(bucket) else { return };
        let Some(list) = v.older.get_mut(key) else { return };
        if list.first().is_some_and(|v| v.object.is_some())
            && let Some(b) = self.buckets.get_mut(bucket)
            && !b.objects.contains_key(key)
        {
            let top = list.remove(0);
            if let Some(o) = top.object {
                b.objects.insert(key.to_owned(), o);
            }
        }
        if list.is_empty() {
            v.older.remove(key);
        }
    }

    /// S3's DELETE in a versioned bucket. Without `version`: a delete
    /// marker (`marker_id`, or `null` when suspended) becomes the current
    /// version. With it: that version is removed for good (the current
    /// object's removal promotes the next). Returns the object to free.
    /// A version under object lock is refused ([`ObjectLock::protects`]).
    pub(crate) fn delete_versioned(
        &mut self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        marker_id: &str,
        now_ms: u64,
        bypass_governance: bool,
    ) -> Result<Option<ObjectMeta>, NameError> {
        if let Some(id) = version
            && let Found::Object(o) = self.version(bucket, key, id)
            && let Some(why) = ObjectLock::of(&o.meta).protects(now_ms, bypass_governance)
        {
            return Err(NameError::ObjectLocked(format!("version {id} of {key:?} cannot be deleted: {why}")));
        }
        Ok(self.delete_unlocked(bucket, key, version, marker_id, now_ms))
    }

    fn delete_unlocked(&mut self, bucket: &str, key: &str, version: Option<&str>, marker_id: &str, now_ms: u64) -> Option<ObjectMeta> {
        let Some(v) = self.versioning.get(bucket) else {
            // Never versioned: a plain delete (a version id other than null names nothing).
            return match version {
                None | Some(NULL_VERSION) => self.buckets.get_mut(bucket)?.objects.remove(key),
                Some(_) => None,
            };
        };
        match version {
            None => {
                let id = if v.enabled { marker_id } else { NULL_VERSION };
                let current = self.buckets.get_mut(bucket)?.objects.remove(key);
                let freed = self.displace(bucket, key, id, current);
                if let Some(v) = self.versioning.get_mut(bucket) {
                    v.older.entry(key.to_owned()).or_default().insert(0, Version { id: id.to_owned(), object: None, modified_ms: now_ms });
                }
                freed
            }
            Some(id) => {
                if self.buckets.get(bucket)?.objects.get(key).is_some_and(|o| version_id(o) == id) {
                    return self.remove_current(bucket, key);
                }
                let v = self.versioning.get_mut(bucket)?;
                let list = v.older.get_mut(key)?;
                let i = list.iter().position(|v| v.id == id)?;
                let gone = list.remove(i);
                if list.is_empty() {
                    v.older.remove(key);
                }
                // A current delete marker removed: the next version, if an
                // object, becomes current.
                self.promote(bucket, key);
                gone.object
            }
        }
    }
}

impl NameState {
    /// The bucket's configuration document of `kind`, if set.
    pub fn bucket_doc(&self, bucket: &str, kind: &str) -> Option<&str> {
        self.bucket_docs.get(bucket).and_then(|d| d.get(kind)).map(String::as_str)
    }

    /// Sets a bucket's object lock (its default retention); the bucket
    /// must keep versions.
    pub(crate) fn set_object_lock(&mut self, bucket: &str, default: Option<(LockMode, u32)>) -> Result<(), NameError> {
        match self.versioning.get_mut(bucket) {
            Some(v) if v.enabled => {
                v.lock = Some(Lock { default });
                Ok(())
            }
            _ => Err(NameError::InvalidBucketState(format!("bucket {bucket:?} must have versioning enabled for object lock"))),
        }
    }

    /// Changes the retention (`Some(None)` removes it) or legal hold of a
    /// version of `key` (the current object without `version`), as S3
    /// allows: a retention in force may only be made stronger (a later
    /// date, or GOVERNANCE to COMPLIANCE) unless it is GOVERNANCE and the
    /// request bypasses it; COMPLIANCE, never.
    #[allow(clippy::too_many_arguments, clippy::option_option)]
    pub(crate) fn set_lock_state(
        &mut self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        retention: Option<Option<(LockMode, u64)>>,
        legal_hold: Option<bool>,
        bypass_governance: bool,
        now_ms: u64,
    ) -> Result<(), NameError> {
        if self.versioning.get(bucket).is_none_or(|v| v.lock.is_none()) {
            return Err(NameError::InvalidBucketState(format!("bucket {bucket:?} has no object lock configuration")));
        }
        let missing = || NameError::NoSuchKey { bucket: bucket.to_owned(), key: key.to_owned() };
        let current = self.buckets.get(bucket).and_then(|b| b.objects.get(key)).filter(|o| version.is_none_or(|id| version_id(o) == id)).is_some();
        let meta = if current {
            &mut self.buckets.get_mut(bucket).and_then(|b| b.objects.get_mut(key)).ok_or_else(missing)?.meta
        } else {
            let id = version.ok_or_else(missing)?;
            let v = self.versioning.get_mut(bucket).and_then(|v| v.older.get_mut(key)).and_then(|vs| vs.iter_mut().find(|v| v.id == id)).ok_or_else(missing)?;
            &mut v.object.as_mut().ok_or_else(missing)?.meta
        };
        let mut lock = ObjectLock::of(meta);
        if let Some(new) = retention {
            if let Some((mode, until)) = lock.retention.filter(|(_, until)| *until > now_ms) {
                let stronger = match new {
                    Some((m, u)) => u >= until && (m == LockMode::Compliance || mode == LockMode::Governance),
                    None => false,
                };
                if !stronger && (mode == LockMode::Compliance || !bypass_governance) {
                    return Err(NameError::ObjectLocked(format!(
                        "{key:?} is retained in {} mode until {until} ms: its retention can only be extended{}",
                        mode.as_str(),
                        if mode == LockMode::Governance { " (or changed bypassing governance retention)" } else { "" }
                    )));
                }
            }
            lock.retention = new;
        }
        if let Some(h) = legal_hold {
            lock.legal_hold = h;
        }
        lock.store_in(meta);
        Ok(())
    }
}

/// One version in a listing of versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedVersion {
    /// Key.
    pub key: String,
    /// Version id.
    pub id: String,
    /// The object, or None for a delete marker.
    pub object: Option<ObjectMeta>,
    /// Whether it is the key's current version.
    pub latest: bool,
    /// Written (a marker: deleted) at.
    pub modified_ms: u64,
}

/// One page of a listing of versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionPage {
    /// Versions, by key, each key's newest first.
    pub versions: Vec<ListedVersion>,
    /// Common prefixes, in order.
    pub prefixes: Vec<String>,
    /// More follow.
    pub truncated: bool,
    /// When truncated: the key (or prefix) and version id (empty for a
    /// prefix) to continue after.
    pub next: Option<(String, String)>,
}

impl NameState {
    /// A page of `bucket`'s versions (S3's ListObjectVersions): `q.after`
    /// is the key marker; with `version_after`, the listing goes on inside
    /// that key after that version, else after the whole key. A bucket
    /// never versioned lists each object as its `null` version.
    pub fn list_versions(&self, bucket: &str, q: &crate::ListQuery<'_>, version_after: Option<&str>) -> VersionPage {
        use std::ops::Bound;
        let mut page = VersionPage::default();
        let Some(b) = self.buckets.get(bucket) else { return page };
        let empty = BTreeMap::new();
        let older = self.versioning.get(bucket).map_or(&empty, |v| &v.older);
        let version_after = version_after.filter(|v| !v.is_empty());
        let start = match (q.after, version_after) {
            (Some(a), Some(_)) => Bound::Included(a),
            (Some(a), None) if a >= q.prefix => Bound::Excluded(a),
            _ => Bound::Included(q.prefix),
        };
        let mut current = b.objects.range::<str, _>((start, Bound::Unbounded)).peekable();
        let mut rest = older.range::<str, _>((start, Bound::Unbounded)).peekable();
        let delimiter = q.delimiter.filter(|d| !d.is_empty());
        let mut last_prefix: Option<String> = None;
        let mut last: Option<(String, String)> = None;
        loop {
            // The next key of either map, in order.
            let key = match (current.peek(), rest.peek()) {
                (Some((a, _)), Some((b, _))) => (*a).min(*b).clone(),
                (Some((a, _)), None) => (*a).clone(),
                (None, Some((b, _))) => (*b).clone(),
                (None, None) => break,
            };
            let cur = current.next_if(|(k, _)| **k == key).map(|(_, o)| o).filter(|o| !o.expired(q.now_ms));
            let old = rest.next_if(|(k, _)| **k == key).map(|(_, v)| v);
            if !key.starts_with(q.prefix) {
                if key.as_str() > q.prefix {
                    break;
                }
                continue;
            }
            if cur.is_none() && old.is_none_or(|v| v.is_empty()) {
                continue;
            }
            let rolled = delimiter.and_then(|d| key[q.prefix.len()..].find(d).map(|i| key[..q.prefix.len() + i + d.len()].to_owned()));
            if let Some(cp) = rolled {
                if last_prefix.as_deref() == Some(cp.as_str()) || q.after == Some(cp.as_str()) {
                    continue;
                }
                if page.versions.len() + page.prefixes.len() >= q.max {
                    page.truncated = true;
                    page.next = last;
                    return page;
                }
                last = Some((cp.clone(), String::new()));
                last_prefix = Some(cp.clone());
                page.prefixes.push(cp);
                continue;
            }
            let mut all: Vec<ListedVersion> = Vec::new();
            if let Some(o) = cur {
                all.push(ListedVersion { key: key.clone(), id: version_id(o).to_owned(), object: Some(o.clone()), latest: true, modified_ms: o.modified_ms });
            }
            for (i, v) in old.into_iter().flatten().enumerate() {
                all.push(ListedVersion {
                    key: key.clone(),
                    id: v.id.clone(),
                    object: v.object.clone(),
                    latest: cur.is_none() && i == 0,
                    modified_ms: v.modified_ms,
                });
            }
            let skip = match (q.after, version_after) {
                (Some(a), Some(after)) if a == key => all.iter().position(|v| v.id == after).map_or(0, |i| i + 1),
                _ => 0,
            };
            for v in all.into_iter().skip(skip) {
                if page.versions.len() + page.prefixes.len() >= q.max {
                    page.truncated = true;
                    page.next = last;
                    return page;
                }
                last = Some((v.key.clone(), v.id.clone()));
                page.versions.push(v);
            }
        }
        page
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NameOp;

    fn obj(n: u8, id: &str) -> ObjectMeta {
        let meta = if id == NULL_VERSION { vec![] } else { vec![(VERSION_META.to_owned(), id.to_owned())] };
        ObjectMeta {
            blob: strata_types::BlobId::from_parts(strata_types::BlobKind::Simple, 1, [n; 16]),
            size: u64::from(n),
            etag: format!("e{n}"),
            content_type: String::new(),
            meta,
            modified_ms: u64::from(n),
            expiry_ms: 0,
            parts: 0,
        }
    }

    fn put(s: &mut NameState, o: ObjectMeta) -> Option<ObjectMeta> {
        s.apply(NameOp::PutObject { bucket: "b".into(), key: "k".into(), object: o, if_absent: false }).unwrap().replaced
    }

    fn del(s: &mut NameState, version: Option<&str>, marker: &str) -> Option<ObjectMeta> {
        s.apply(NameOp::DeleteVersioned {
            bucket: "b".into(),
            key: "k".into(),
            version_id: version.map(str::to_owned),
            marker_id: marker.into(),
            now_ms: 50,
            bypass_governance: false,
        })
        .unwrap()
        .replaced
    }

    fn ids(s: &NameState) -> Vec<String> {
        let current = s.buckets["b"].objects.get("k").map(|o| format!("*{}", version_id(o)));
        let older = s
            .versioning
            .get("b")
            .and_then(|v| v.older.get("k"))
            .into_iter()
            .flatten()
            .map(|v| if v.object.is_some() { v.id.clone() } else { format!("{}(marker)", v.id) });
        current.into_iter().chain(older).collect()
    }

    #[test]
    fn versions_are_kept_through_overwrites_and_deletes() {
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        // Before versioning: a null object, replaced and freed by the next.
        assert_eq!(put(&mut s, obj(1, NULL_VERSION)), None);
        s.apply(NameOp::SetVersioning { bucket: "b".into(), enabled: true }).unwrap();
        assert_eq!(put(&mut s, obj(2, "v2")), None, "the null version is kept");
        assert_eq!(put(&mut s, obj(3, "v3")), None);
        assert_eq!(ids(&s), ["*v3", "v2", "null"]);
        assert_eq!(s.named_blobs().count(), 3, "older versions are named: the sweep keeps them");
        // A delete adds a marker; nothing is freed.
        assert_eq!(del(&mut s, None, "m4"), None);
        assert_eq!(ids(&s), ["m4(marker)", "v3", "v2", "null"]);
        assert!(s.deleted_by_marker("b", "k"));
        assert_eq!(s.version("b", "k", "v2"), Found::Object(&obj(2, "v2")));
        assert_eq!(s.version("b", "k", "m4"), Found::Marker);
        assert_eq!(s.version("b", "k", "nope"), Found::Missing);
        // Listed newest first, paged by version.
        let q = |after: Option<&'static str>, max| crate::ListQuery { after, max, ..Default::default() };
        let all = s.list_versions("b", &q(None, 10), None);
        let listed: Vec<(String, bool)> = all.versions.iter().map(|v| (v.id.clone(), v.latest)).collect();
        assert_eq!(listed, [("m4".into(), true), ("v3".into(), false), ("v2".into(), false), ("null".into(), false)]);
        let first = s.list_versions("b", &q(None, 2), None);
        assert_eq!((first.versions.len(), first.truncated, first.next.clone()), (2, true, Some(("k".into(), "v3".into()))));
        let second = s.list_versions("b", &q(Some("k"), 10), Some("v3"));
        assert_eq!(second.versions.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(), ["v2", "null"]);
        assert!(s.list_versions("b", &q(Some("k"), 10), None).versions.is_empty(), "a key marker alone moves past the key");
        // Removing the marker brings v3 back.
        assert_eq!(del(&mut s, Some("m4"), "x"), None);
        assert_eq!(ids(&s), ["*v3", "v2", "null"]);
        // Removing a version for good frees it; removing the current promotes the next.
        assert_eq!(del(&mut s, Some("v2"), "x"), Some(obj(2, "v2")));
        assert_eq!(del(&mut s, Some("v3"), "x"), Some(obj(3, "v3")));
        assert_eq!(ids(&s), ["*null"]);
        // A bucket with older versions is not empty.
        put(&mut s, obj(5, "v5"));
        del(&mut s, None, "m6");
        assert_eq!(s.apply(NameOp::DeleteBucket { name: "b".into(), now_ms: 60 }), Err(NameError::BucketNotEmpty("b".into())));
        // Suspended: writes and deletes are null versions, replacing the null one.
        s.apply(NameOp::SetVersioning { bucket: "b".into(), enabled: false }).unwrap();
        assert_eq!(put(&mut s, obj(7, NULL_VERSION)), Some(obj(1, NULL_VERSION)), "the old null version is freed");
        assert_eq!(ids(&s), ["*null", "m6(marker)", "v5"]);
        assert_eq!(del(&mut s, None, "unused"), Some(obj(7, NULL_VERSION)));
        assert_eq!(ids(&s), ["null(marker)", "m6(marker)", "v5"]);
        for id in ["null", "m6", "v5"] {
            del(&mut s, Some(id), "x");
        }
        assert_eq!(ids(&s), Vec::<String>::new());
        assert!(s.list_versions("b", &crate::ListQuery { max: 10, ..Default::default() }, None).versions.is_empty());
        assert!(!s.has_older_versions("b"));
        s.apply(NameOp::DeleteBucket { name: "b".into(), now_ms: 60 }).unwrap();
        assert!(s.versioning.is_empty());
    }

    #[test]
    fn object_lock_keeps_retained_and_held_versions() {
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        let lock = NameOp::SetObjectLock { bucket: "b".into(), default: None };
        assert!(matches!(s.apply(lock.clone()), Err(NameError::InvalidBucketState(_))), "object lock needs versioning");
        s.apply(NameOp::SetVersioning { bucket: "b".into(), enabled: true }).unwrap();
        s.apply(lock).unwrap();
        assert!(matches!(s.apply(NameOp::SetVersioning { bucket: "b".into(), enabled: false }), Err(NameError::InvalidBucketState(_))));
        let locked = |n: u8, id: &str, l: ObjectLock| {
            let mut o = obj(n, id);
            l.store_in(&mut o.meta);
            o
        };
        put(&mut s, locked(1, "c", ObjectLock { retention: Some((LockMode::Compliance, 100)), legal_hold: false }));
        put(&mut s, locked(2, "g", ObjectLock { retention: Some((LockMode::Governance, 100)), legal_hold: false }));
        put(&mut s, locked(3, "h", ObjectLock { retention: None, legal_hold: true }));
        let delete = |s: &mut NameState, id: &str, now_ms, bypass_governance| {
            s.apply(NameOp::DeleteVersioned {
                bucket: "b".into(),
                key: "k".into(),
                version_id: Some(id.into()),
                marker_id: "m".into(),
                now_ms,
                bypass_governance,
            })
        };
        for (id, bypass) in [("c", true), ("g", false), ("h", true)] {
            assert!(matches!(delete(&mut s, id, 50, bypass), Err(NameError::ObjectLocked(_))), "{id}");
        }
        // Retention only grows stronger: COMPLIANCE never shortened, GOVERNANCE only bypassed.
        let retain = |id: &str, r: Option<(LockMode, u64)>, bypass| NameOp::SetLockState {
            bucket: "b".into(),
            key: "k".into(),
            version_id: Some(id.into()),
            retention: Some(r),
            legal_hold: None,
            bypass_governance: bypass,
            now_ms: 50,
        };
        assert!(matches!(s.apply(retain("c", Some((LockMode::Compliance, 90)), true)), Err(NameError::ObjectLocked(_))));
        assert!(matches!(s.apply(retain("c", None, true)), Err(NameError::ObjectLocked(_))));
        assert!(matches!(s.apply(retain("c", Some((LockMode::Governance, 200)), true)), Err(NameError::ObjectLocked(_))));
        s.apply(retain("c", Some((LockMode::Compliance, 200)), false)).unwrap();
        assert!(matches!(s.apply(retain("g", None, false)), Err(NameError::ObjectLocked(_))));
        s.apply(retain("g", None, true)).unwrap();
        assert_eq!(delete(&mut s, "g", 50, false).unwrap().replaced.map(|o| o.size), Some(2));
        // The legal hold lifted, the version goes; the compliance one only after its (extended) date.
        s.apply(NameOp::SetLockState {
            bucket: "b".into(),
            key: "k".into(),
            version_id: Some("h".into()),
            retention: None,
            legal_hold: Some(false),
            bypass_governance: false,
            now_ms: 50,
        })
        .unwrap();
        assert!(delete(&mut s, "h", 50, false).is_ok());
        assert!(matches!(delete(&mut s, "c", 150, true), Err(NameError::ObjectLocked(_))));
        assert!(delete(&mut s, "c", 250, false).is_ok());
        assert!(s.buckets["b"].objects.is_empty() && !s.has_older_versions("b"));
    }

    #[test]
    fn bucket_documents_are_set_removed_and_decoded_from_the_layout_before_them() {
        #[derive(serde::Serialize)]
        struct V4<'a> {
            buckets: &'a BTreeMap<String, crate::Bucket>,
            keys: &'a BTreeMap<String, crate::AccessKey>,
            accounts: &'a BTreeMap<String, crate::Account>,
            rights: &'a BTreeMap<String, crate::KeyRights>,
            kms: &'a BTreeMap<String, crate::KmsKey>,
            versioning: &'a BTreeMap<String, Versioning>,
        }
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        s.apply(NameOp::SetVersioning { bucket: "b".into(), enabled: true }).unwrap();
        let v4 = V4 { buckets: &s.buckets, keys: &s.keys, accounts: &s.accounts, rights: &s.rights, kms: &s.kms, versioning: &s.versioning };
        assert_eq!(NameState::decode(&postcard::to_allocvec(&v4).unwrap()).unwrap(), s);
        let doc = |d: Option<&str>| NameOp::SetBucketDoc { bucket: "b".into(), kind: "cors".into(), doc: d.map(str::to_owned) };
        s.apply(doc(Some("[]"))).unwrap();
        assert_eq!(s.bucket_doc("b", "cors"), Some("[]"));
        assert_eq!(NameState::decode(&postcard::to_allocvec(&s).unwrap()).unwrap(), s);
        s.apply(doc(None)).unwrap();
        assert!(s.bucket_docs.is_empty());
        s.apply(doc(Some("[]"))).unwrap();
        s.apply(NameOp::DeleteBucket { name: "b".into(), now_ms: 2 }).unwrap();
        assert!(s.bucket_docs.is_empty(), "a deleted bucket's documents go with it");
        assert!(matches!(s.apply(doc(Some("[]"))), Err(NameError::NoSuchBucket(_))));
    }

    #[test]
    fn a_state_written_before_versioning_decodes_with_none() {
        #[derive(serde::Serialize)]
        struct V3<'a> {
            buckets: &'a BTreeMap<String, crate::Bucket>,
            keys: &'a BTreeMap<String, crate::AccessKey>,
            accounts: &'a BTreeMap<String, crate::Account>,
            rights: &'a BTreeMap<String, crate::KeyRights>,
            kms: &'a BTreeMap<String, crate::KmsKey>,
        }
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        put(&mut s, obj(1, NULL_VERSION));
        let v3 = V3 { buckets: &s.buckets, keys: &s.keys, accounts: &s.accounts, rights: &s.rights, kms: &s.kms };
        assert_eq!(NameState::decode(&postcard::to_allocvec(&v3).unwrap()).unwrap(), s);
        assert_eq!(NameState::decode_with_lsn(&postcard::to_allocvec(&(3u64, &v3)).unwrap()).unwrap(), (3, s.clone()));
        s.apply(NameOp::SetVersioning { bucket: "b".into(), enabled: true }).unwrap();
        put(&mut s, obj(2, "v2"));
        assert_eq!(NameState::decode(&postcard::to_allocvec(&s).unwrap()).unwrap(), s);
    }
}
