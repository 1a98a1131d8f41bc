//! The change-capture outbox (docs/events.md): events derived from the
//! name ops as they apply, kept inside the state.
//!
//! An op and its event are one change: [`NameState::apply`] derives the
//! events from the op, the state before it and what it did, and appends
//! them to [`Outbox`], which is part of the state. So the event is written
//! in the same log record (or Raft entry) as the change, and rides in every
//! snapshot: no crash, fold or purge can keep one without the other.
//! Derivation is deterministic (every time and identity comes in the op),
//! so every replay and every metadata member derives the same events with
//! the same sequence numbers.
//!
//! Events are derived only while a target wants them: a target of every
//! event, or a bucket with a notification configuration (and some target).
//! Each target's delivered position is in the state too ([`NameOp::TrimEvents`]),
//! so whichever node sends next resumes where the last one stopped; events
//! every target has are dropped. A full outbox drops its oldest events and
//! counts them ([`Outbox::dropped`]) rather than refusing writes.

use crate::state::{NameOp, NameState, ObjectMeta, Outcome};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Most events the outbox holds; past it the oldest are dropped (and
/// counted) so a target down for long cannot stop writes.
pub const OUTBOX_MAX: usize = 100_000;

/// The bucket document kind of S3 bucket notification configurations
/// (whose presence turns capture on for the bucket).
pub const NOTIFICATION_DOC: &str = "notification";

/// One captured change of the names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameEvent {
    /// Position in the outbox: strictly increasing.
    pub seq: u64,
    /// When, ms since the epoch (from the op).
    pub time_ms: u64,
    /// S3's event name (`s3:ObjectCreated:Put`, ...) or a `strata:` one.
    pub kind: String,
    /// The access key that caused it, if known.
    pub who: Option<String>,
    /// Bucket.
    pub bucket: String,
    /// Object key, for object events.
    pub key: Option<String>,
    /// Version id, in a versioned bucket.
    pub version_id: Option<String>,
    /// Size in bytes, for created objects.
    pub size: Option<u64>,
    /// ETag, for created objects.
    pub etag: Option<String>,
    /// What a cluster event names (a node id, `node/disk`); bucket events
    /// leave it empty and their `bucket` names it.
    pub name: Option<String>,
}

/// A configured target, as the names hold it: what it is (opaque here: the
/// node parses `spec`), whether it takes every event, and how far it has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTarget {
    /// What the target is (JSON the node reads: kind, address, ...).
    pub spec: String,
    /// Every event (Ambry's operation capture), not only the buckets'
    /// notifications that name it.
    pub all: bool,
    /// The last sequence number the target holds.
    pub delivered: u64,
    /// Added, ms since the epoch.
    pub created_ms: u64,
}

/// The outbox and the targets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbox {
    /// The last sequence number given (0: none yet).
    pub last_seq: u64,
    /// Events not yet delivered to every target, oldest first (shared, so
    /// a sender takes a batch under the state's lock without copying it;
    /// encoded as the events themselves).
    pub events: VecDeque<Arc<NameEvent>>,
    /// Events dropped undelivered because the outbox was full.
    pub dropped: u64,
    /// Targets by name.
    pub targets: BTreeMap<String, EventTarget>,
}

impl Outbox {
    /// Up to `max` events after `seq`, oldest first.
    pub fn after(&self, seq: u64, max: usize) -> impl Iterator<Item = &Arc<NameEvent>> {
        let start = self.events.partition_point(|e| e.seq <= seq);
        self.events.range(start..).take(max)
    }

    /// Whether an op on `bucket` (in `state`) is captured.
    fn capturing(&self, state: &NameState, bucket: &str) -> bool {
        !self.targets.is_empty() && (self.targets.values().any(|t| t.all) || state.bucket_doc(bucket, NOTIFICATION_DOC).is_some())
    }

    fn push(&mut self, mut e: NameEvent) {
        self.last_seq += 1;
        e.seq = self.last_seq;
        self.events.push_back(Arc::new(e));
        while self.events.len() > OUTBOX_MAX {
            self.events.pop_front();
            self.dropped += 1;
        }
    }

    /// Drops the events every target holds (all of them with no target).
    fn trim(&mut self) {
        let upto = self.targets.values().map(|t| t.delivered).min().unwrap_or(u64::MAX);
        while self.events.front().is_some_and(|e| e.seq <= upto) {
            self.events.pop_front();
        }
    }

    /// Adds, replaces (keeping its position) or with `None` removes a target.
    pub(crate) fn set_target(&mut self, name: String, spec: Option<(String, bool)>, now_ms: u64) {
        match spec {
            Some((spec, all)) => {
                let (delivered, created_ms) = self.targets.get(&name).map_or((self.last_seq, now_ms), |t| (t.delivered, t.created_ms));
                self.targets.insert(name, EventTarget { spec, all, delivered, created_ms });
            }
            None => {
                self.targets.remove(&name);
            }
        }
        self.trim();
    }

    /// Appends an event of the cluster (not of a bucket: `name` says what
    /// it is about) if a target of every event exists. The metadata
    /// service calls it as it applies the map change the event describes,
    /// so the two are one Raft entry.
    pub fn note(&mut self, kind: &str, who: Option<String>, now_ms: u64, name: String) {
        if !self.targets.values().any(|t| t.all) {
            return;
        }
        self.push(NameEvent {
            seq: 0,
            time_ms: now_ms,
            kind: kind.to_owned(),
            who,
            bucket: String::new(),
            key: None,
            version_id: None,
            size: None,
            etag: None,
            name: Some(name),
        });
    }

    /// Records that `target` holds every event up to `seq`.
    pub(crate) fn delivered(&mut self, target: &str, seq: u64) {
        if let Some(t) = self.targets.get_mut(target) {
            t.delivered = t.delivered.max(seq.min(self.last_seq));
        }
        self.trim();
    }
}

/// Who caused an op, and anything the op alone does not say (`NameOp::As`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cause {
    pub who: Option<String>,
    pub kind: Option<String>,
    pub now_ms: u64,
}

/// What must be read before an op applies to describe it after.
pub(crate) struct Before {
    bucket: String,
    /// The key a completion names (its upload is gone after).
    upload_key: Option<String>,
    /// Whether a lifecycle expiry will act (the current version is the one judged).
    expires: bool,
}

fn bucket_of(op: &NameOp) -> Option<&str> {
    Some(match op {
        NameOp::CreateBucket { name, .. } | NameOp::DeleteBucket { name, .. } | NameOp::DeleteBucketAbortingUploads { name, .. } => name,
        NameOp::PutObject { bucket, .. }
        | NameOp::PutObjectIfMatch { bucket, .. }
        | NameOp::CompleteUpload { bucket, .. }
        | NameOp::DeleteObject { bucket, .. }
        | NameOp::DeleteVersioned { bucket, .. }
        | NameOp::ExpireVersioned { bucket, .. }
        | NameOp::SetObjectMeta { bucket, .. }
        | NameOp::SetLockState { bucket, .. } => bucket,
        _ => return None,
    })
}

impl NameState {
    /// Whether `op` is captured and, if so, what to read before it applies.
    pub(crate) fn before(&self, op: &NameOp) -> Option<Before> {
        let bucket = bucket_of(op)?;
        if !self.outbox.capturing(self, bucket) {
            return None;
        }
        let b = self.buckets.get(bucket);
        let upload_key = match op {
            NameOp::CompleteUpload { upload_id, .. } => b.and_then(|b| b.uploads.get(upload_id)).map(|u| u.key.clone()),
            _ => None,
        };
        let expires = match op {
            NameOp::ExpireVersioned { key, version_id, .. } => {
                self.versioning.contains_key(bucket) && b.and_then(|b| b.objects.get(key)).is_some_and(|o| crate::versions::version_id(o) == version_id)
            }
            _ => false,
        };
        Some(Before { bucket: bucket.to_owned(), upload_key, expires })
    }

    /// Appends the events of `op`, which applied with `out`.
    pub(crate) fn record(&mut self, op: &NameOp, out: &Outcome, before: Before, cause: Cause) {
        let versioned = self.versioning.contains_key(&before.bucket);
        let event = |kind: &str, key: Option<&str>| NameEvent {
            seq: 0,
            time_ms: cause.now_ms,
            kind: cause.kind.clone().unwrap_or_else(|| kind.to_owned()),
            who: cause.who.clone(),
            bucket: before.bucket.clone(),
            key: key.map(str::to_owned),
            version_id: None,
            size: None,
            etag: None,
            name: None,
        };
        let created = |kind: &str, key: &str, o: &ObjectMeta| NameEvent {
            time_ms: if cause.now_ms == 0 { o.modified_ms } else { cause.now_ms },
            version_id: versioned.then(|| crate::versions::version_id(o).to_owned()),
            size: Some(o.size),
            etag: Some(o.etag.clone()),
            ..event(kind, Some(key))
        };
        let e = match op {
            NameOp::CreateBucket { now_ms, .. } => NameEvent { time_ms: *now_ms, ..event("strata:BucketCreated", None) },
            NameOp::DeleteBucket { now_ms, .. } | NameOp::DeleteBucketAbortingUploads { now_ms, .. } => {
                NameEvent { time_ms: *now_ms, ..event("strata:BucketRemoved", None) }
            }
            NameOp::PutObject { key, object, .. } | NameOp::PutObjectIfMatch { key, object, .. } => created("s3:ObjectCreated:Put", key, object),
            NameOp::CompleteUpload { object, .. } => {
                let Some(key) = &before.upload_key else { return };
                created("s3:ObjectCreated:CompleteMultipartUpload", key, object)
            }
            NameOp::DeleteObject { key, .. } => {
                if out.replaced.is_none() {
                    return;
                }
                event("s3:ObjectRemoved:Delete", Some(key))
            }
            NameOp::DeleteVersioned { key, version_id, marker_id, now_ms, .. } => match (version_id, self.versioning.get(&before.bucket)) {
                (None, Some(v)) => NameEvent {
                    time_ms: *now_ms,
                    version_id: Some(if v.enabled { marker_id.clone() } else { crate::versions::NULL_VERSION.to_owned() }),
                    ..event("s3:ObjectRemoved:DeleteMarkerCreated", Some(key))
                },
                (id, _) => NameEvent { time_ms: *now_ms, version_id: id.clone(), ..event("s3:ObjectRemoved:Delete", Some(key)) },
            },
            NameOp::ExpireVersioned { key, marker_id, now_ms, .. } => {
                if !before.expires {
                    return;
                }
                NameEvent { time_ms: *now_ms, version_id: Some(marker_id.clone()), ..event("s3:LifecycleExpiration:DeleteMarkerCreated", Some(key)) }
            }
            NameOp::SetObjectMeta { key, now_ms, .. } => NameEvent { time_ms: *now_ms, ..event("s3:ObjectTagging:Put", Some(key)) },
            NameOp::SetLockState { key, version_id, retention, now_ms, .. } => {
                let kind = if retention.is_some() { "s3:ObjectRetention:Put" } else { "s3:ObjectLegalHold:Put" };
                NameEvent { time_ms: *now_ms, version_id: version_id.clone(), ..event(kind, Some(key)) }
            }
            _ => return,
        };
        self.outbox.push(e);
    }
}

#[cfg(test)]
mod tests {
    use crate::state::{NameOp, NameState, ObjectMeta};
    use strata_types::BlobId;

    fn object(n: u8, now_ms: u64) -> ObjectMeta {
        ObjectMeta {
            blob: BlobId::from_parts(strata_types::BlobKind::Simple, 1, [n; 16]),
            size: u64::from(n),
            etag: format!("e{n}"),
            content_type: String::new(),
            meta: vec![],
            modified_ms: now_ms,
            expiry_ms: 0,
            parts: 0,
        }
    }

    fn put(bucket: &str, key: &str, n: u8) -> NameOp {
        NameOp::PutObject { bucket: bucket.into(), key: key.into(), object: object(n, 100 + u64::from(n)), if_absent: false }
    }

    fn by(who: &str, op: NameOp) -> NameOp {
        NameOp::As { who: Some(who.into()), kind: None, now_ms: 7, op: Box::new(op) }
    }

    fn target(name: &str, all: bool) -> NameOp {
        NameOp::SetEventTarget { name: name.into(), spec: Some(format!("{{\"file\":\"{name}\"}}")), all, now_ms: 1 }
    }

    fn kinds(s: &NameState) -> Vec<(u64, String, Option<String>)> {
        s.outbox.events.iter().map(|e| (e.seq, e.kind.clone(), e.key.clone())).collect()
    }

    #[test]
    fn nothing_is_captured_without_a_target_and_everything_with_one() {
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        s.apply(put("b", "k", 1)).unwrap();
        assert!(s.outbox.events.is_empty() && s.outbox.last_seq == 0);
        s.apply(target("t", true)).unwrap();
        s.apply(by("AK1", put("b", "k", 2))).unwrap();
        s.apply(by("AK1", NameOp::DeleteObject { bucket: "b".into(), key: "k".into(), blob: None })).unwrap();
        // A delete that removes nothing is no event; a refused op none either.
        s.apply(NameOp::DeleteObject { bucket: "b".into(), key: "k".into(), blob: None }).unwrap();
        assert!(s.apply(put("nope", "k", 3)).is_err());
        assert_eq!(kinds(&s), vec![(1, "s3:ObjectCreated:Put".into(), Some("k".into())), (2, "s3:ObjectRemoved:Delete".into(), Some("k".into()))]);
        let e = &s.outbox.events[0];
        assert_eq!((e.who.as_deref(), e.time_ms, e.size, e.etag.as_deref(), e.version_id.as_deref()), (Some("AK1"), 7, Some(2), Some("e2"), None));
    }

    #[test]
    fn a_bucket_notification_captures_its_bucket_only() {
        let mut s = NameState::default();
        for b in ["a", "b"] {
            s.apply(NameOp::CreateBucket { name: b.into(), owner: String::new(), now_ms: 1 }).unwrap();
        }
        s.apply(target("hook", false)).unwrap();
        s.apply(NameOp::SetBucketDoc { bucket: "a".into(), kind: super::NOTIFICATION_DOC.into(), doc: Some("{}".into()) }).unwrap();
        s.apply(put("a", "x", 1)).unwrap();
        s.apply(put("b", "y", 2)).unwrap();
        assert_eq!(kinds(&s), vec![(1, "s3:ObjectCreated:Put".into(), Some("x".into()))]);
    }

    #[test]
    fn versioned_deletes_and_expiry_say_what_they_did() {
        let mut s = NameState::default();
        s.apply(target("t", true)).unwrap();
        s.apply(NameOp::CreateBucket { name: "v".into(), owner: String::new(), now_ms: 1 }).unwrap();
        s.apply(NameOp::SetVersioning { bucket: "v".into(), enabled: true }).unwrap();
        s.apply(put("v", "k", 1)).unwrap();
        let marker = |id: &str| NameOp::DeleteVersioned {
            bucket: "v".into(),
            key: "k".into(),
            version_id: None,
            marker_id: id.into(),
            now_ms: 50,
            bypass_governance: false,
        };
        s.apply(marker("m1")).unwrap();
        s.apply(put("v", "k", 2)).unwrap();
        let current = crate::versions::version_id(&s.buckets["v"].objects["k"]).to_owned();
        // An expiry judged on another version does nothing and says nothing.
        let expire = |v: &str| NameOp::ExpireVersioned { bucket: "v".into(), key: "k".into(), version_id: v.into(), marker_id: "m2".into(), now_ms: 60 };
        s.apply(expire("old")).unwrap();
        s.apply(expire(&current)).unwrap();
        let got: Vec<_> = s.outbox.events.iter().map(|e| (e.kind.as_str(), e.version_id.clone())).collect();
        assert_eq!(
            got,
            vec![
                ("strata:BucketCreated", None),
                ("s3:ObjectCreated:Put", Some(crate::NULL_VERSION.into())),
                ("s3:ObjectRemoved:DeleteMarkerCreated", Some("m1".into())),
                ("s3:ObjectCreated:Put", Some(crate::NULL_VERSION.into())),
                ("s3:LifecycleExpiration:DeleteMarkerCreated", Some("m2".into())),
            ]
        );
    }

    #[test]
    fn delivered_events_are_dropped_and_a_full_outbox_drops_its_oldest() {
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        s.apply(target("one", true)).unwrap();
        for i in 0..10u8 {
            s.apply(put("b", &format!("k{i}"), i)).unwrap();
        }
        // A target added later starts at the end; the outbox keeps what the
        // slower target lacks.
        s.apply(target("two", true)).unwrap();
        s.apply(put("b", "late", 11)).unwrap();
        s.apply(NameOp::TrimEvents { target: "two".into(), seq: 11 }).unwrap();
        assert_eq!(s.outbox.events.len(), 11);
        s.apply(NameOp::TrimEvents { target: "one".into(), seq: 4 }).unwrap();
        assert_eq!(s.outbox.events.front().map(|e| e.seq), Some(5));
        assert_eq!(s.outbox.after(9, 10).map(|e| e.seq).collect::<Vec<_>>(), vec![10, 11]);
        // A position past the end counts as the end; an unknown target is ignored.
        s.apply(NameOp::TrimEvents { target: "one".into(), seq: 99 }).unwrap();
        s.apply(NameOp::TrimEvents { target: "ghost".into(), seq: 99 }).unwrap();
        assert!(s.outbox.events.is_empty());
        assert_eq!(s.outbox.targets["one"].delivered, 11);
        // Removing the last target drops everything and stops capture.
        s.apply(NameOp::SetEventTarget { name: "one".into(), spec: None, all: false, now_ms: 2 }).unwrap();
        s.apply(NameOp::SetEventTarget { name: "two".into(), spec: None, all: false, now_ms: 2 }).unwrap();
        s.apply(put("b", "after", 1)).unwrap();
        assert!(s.outbox.events.is_empty());
        // Full: the oldest go, counted.
        s.apply(target("slow", true)).unwrap();
        for i in 0..super::OUTBOX_MAX + 5 {
            s.apply(put("b", "k", (i % 200) as u8)).unwrap();
        }
        assert_eq!((s.outbox.events.len(), s.outbox.dropped), (super::OUTBOX_MAX, 5));
    }

    #[test]
    fn the_outbox_survives_encoding_and_an_older_state_decodes_without_one() {
        let mut s = NameState::default();
        s.apply(target("t", true)).unwrap();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        let bytes = postcard::to_allocvec(&s).unwrap();
        assert_eq!(NameState::decode(&bytes).unwrap(), s);
        let mut old = s.clone();
        old.outbox = super::Outbox::default();
        let mut bytes = postcard::to_allocvec(&old).unwrap();
        // The layout before the outbox: everything but its bytes at the end.
        let empty = postcard::to_allocvec(&super::Outbox::default()).unwrap();
        bytes.truncate(bytes.len() - empty.len());
        assert_eq!(NameState::decode(&bytes).unwrap(), old);
    }
}
