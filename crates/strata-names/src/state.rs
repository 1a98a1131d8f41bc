//! The state machine: buckets, objects, uploads and access keys, changed
//! only by [`NameOp`]s. `apply` is deterministic (every time it needs comes
//! inside the op), so a log replayed, or a Raft log applied on another
//! member, gives the same state.

use crate::rights::{ALL_CONTAINERS, Account, BlobGrant, Container, ContainerRef, DEFAULT, KeyRights, KvGrant, valid_name};
use crate::{KEY_BYTES_MAX, NameError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use strata_types::BlobId;

pub use crate::op::NameOp;

const DAY_MS: u64 = 86_400_000;

/// A named object: the blob holding its bytes and its S3 properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// The blob (simple, or composite for chunked and multipart objects).
    pub blob: BlobId,
    /// Size in bytes.
    pub size: u64,
    /// The ETag without quotes: hex MD5, or `<hex>-N` for N parts.
    pub etag: String,
    /// MIME type.
    pub content_type: String,
    /// `x-amz-meta-*` pairs, names lower-cased, without the prefix.
    pub meta: Vec<(String, String)>,
    /// Last modified, ms since the epoch.
    pub modified_ms: u64,
    /// When the object expires (0 = never), from a lifecycle rule.
    pub expiry_ms: u64,
    /// Parts it was assembled from (0 for a single put).
    pub parts: u32,
}

impl ObjectMeta {
    /// Whether the object has expired at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expiry_ms != 0 && self.expiry_ms <= now_ms
    }
}

/// One uploaded part of a multipart upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartMeta {
    /// The blob holding the part.
    pub blob: BlobId,
    /// Size in bytes.
    pub size: u64,
    /// Hex MD5 of the part.
    pub etag: String,
    /// Upload time, ms since the epoch.
    pub modified_ms: u64,
}

/// A multipart upload in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upload {
    /// The object key it will complete into.
    pub key: String,
    /// Started, ms since the epoch.
    pub created_ms: u64,
    /// MIME type of the object.
    pub content_type: String,
    /// User metadata of the object.
    pub meta: Vec<(String, String)>,
    /// The access key that started it ("" if anonymous).
    pub owner: String,
    /// Parts uploaded so far, by part number.
    pub parts: BTreeMap<u32, PartMeta>,
}

/// A lifecycle expiration rule: objects under `prefix` expire `days` after
/// they are written, or at `date_ms`, mapped onto their blobs' TTLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpiryRule {
    /// Rule id.
    pub id: String,
    /// Key prefix the rule covers ("" = all).
    pub prefix: String,
    /// Days after writing.
    pub days: Option<u32>,
    /// A fixed date, ms since the epoch.
    pub date_ms: Option<u64>,
    /// Whether the rule is enabled.
    pub enabled: bool,
}

/// A bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// Created, ms since the epoch.
    pub created_ms: u64,
    /// The access key that created it ("" for an admin tool).
    pub owner: String,
    /// Anonymous reads allowed.
    pub public: bool,
    /// Lifecycle expiration rules.
    pub lifecycle: Vec<ExpiryRule>,
    /// Objects by key.
    pub objects: BTreeMap<String, ObjectMeta>,
    /// Uploads in progress by upload id.
    pub uploads: BTreeMap<String, Upload>,
}

impl Bucket {
    /// The expiry (ms since the epoch, 0 = never) the lifecycle rules give
    /// an object named `key` written at `now_ms`: the earliest of the
    /// enabled rules whose prefix it has.
    pub fn expiry_for(&self, key: &str, now_ms: u64) -> u64 {
        self.lifecycle
            .iter()
            .filter(|r| r.enabled && key.starts_with(&r.prefix))
            .filter_map(|r| match (r.days, r.date_ms) {
                (Some(d), _) => Some(now_ms.saturating_add(u64::from(d) * DAY_MS)),
                (None, Some(t)) => Some(t.max(1)),
                (None, None) => None,
            })
            .min()
            .unwrap_or(0)
    }

    /// The live object named `key` at `now_ms`.
    pub fn object(&self, key: &str, now_ms: u64) -> Option<&ObjectMeta> {
        self.objects.get(key).filter(|o| !o.expired(now_ms))
    }
}

/// Read and write rights of an access key on a bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// List and get.
    pub read: bool,
    /// Put, copy into, delete, multipart.
    pub write: bool,
}

/// An access key for SigV4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessKey {
    /// Access key id (public).
    pub id: String,
    /// Secret access key.
    pub secret: String,
    /// A name for people.
    pub name: String,
    /// Created, ms since the epoch.
    pub created_ms: u64,
    /// Every right on every bucket, and bucket creation for others.
    pub admin: bool,
    /// Rights by bucket.
    pub grants: BTreeMap<String, Grant>,
}

impl AccessKey {
    /// The key's rights on `bucket`.
    pub fn grant(&self, bucket: &str) -> Grant {
        if self.admin { Grant { read: true, write: true } } else { self.grants.get(bucket).copied().unwrap_or_default() }
    }
}

/// A key of Strata's key store (SSE-S3 and SSE-KMS seal each object's data
/// key under one). Its material is sealed under the root key, which is not
/// in the names; keys are never deleted, since their objects would become
/// unreadable (disable one instead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KmsKey {
    /// Key id (what SSE-KMS requests name).
    pub id: String,
    /// A description for people.
    pub description: String,
    /// Created, ms since the epoch.
    pub created_ms: u64,
    /// The 32-byte key sealed under the root key with the id as context.
    pub sealed: Vec<u8>,
    /// Whether it seals and opens objects.
    pub enabled: bool,
}

impl KmsKey {
    /// A new random key, sealed under `root` (with its id as the context,
    /// so a sealed key cannot be passed off under another id).
    pub fn generate(root: &strata_sse::Key, id: &str, description: &str, now_ms: u64) -> Self {
        let sealed = strata_sse::seal_key(root, id.as_bytes(), &strata_sse::Key::random());
        Self { id: id.to_owned(), description: description.to_owned(), created_ms: now_ms, sealed, enabled: true }
    }

    /// The key, opened with `root`.
    pub fn open(&self, root: &strata_sse::Key) -> Result<strata_sse::Key, strata_sse::SseError> {
        strata_sse::unseal_key(root, self.id.as_bytes(), &self.sealed)
    }

    /// Whether `id` is a valid key id: 1 to 64 of `A-Z a-z 0-9 - _ / .`.
    pub fn valid_id(id: &str) -> bool {
        (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_/.".contains(&b))
    }
}

/// What an op replaced or released: blobs the caller should free.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// The object the op replaced or removed.
    pub replaced: Option<ObjectMeta>,
    /// Parts released (replaced, unused by a completion, or aborted).
    pub parts: Vec<PartMeta>,
}

/// All names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameState {
    /// Buckets by name.
    pub buckets: BTreeMap<String, Bucket>,
    /// Access keys by id.
    pub keys: BTreeMap<String, AccessKey>,
    /// Accounts of native-blob containers by name (the default account's
    /// `default` container is implicit). Added with identities on every
    /// port: fields go at the end, see [`NameState::decode`].
    pub accounts: BTreeMap<String, Account>,
    /// Rights of access keys beyond bucket grants, by key id.
    pub rights: BTreeMap<String, KeyRights>,
    /// The key store's keys by id. Added with server-side encryption.
    pub kms: BTreeMap<String, KmsKey>,
    /// Versioning of the buckets that ever had it, by bucket. Added with
    /// versioning (a field of its own, so `Bucket` keeps its layout).
    pub versioning: BTreeMap<String, crate::versions::Versioning>,
    /// Buckets' configuration documents by bucket, then by kind (`cors`,
    /// `tagging`, ...): text the S3 API writes and reads (JSON), so new
    /// kinds need no new layout.
    pub bucket_docs: BTreeMap<String, BTreeMap<String, String>>,
    /// The change-capture outbox and its targets (docs/events.md). Added
    /// with change capture.
    pub outbox: crate::events::Outbox,
}

impl NameState {
    fn key_mut(&mut self, id: &str) -> Result<&mut KeyRights, NameError> {
        if !self.keys.contains_key(id) {
            return Err(NameError::NoSuchAccessKey(id.to_owned()));
        }
        Ok(self.rights.entry(id.to_owned()).or_default())
    }

    /// Drops a key's rights entry once it holds nothing.
    fn tidy_rights(&mut self, id: &str) {
        if self.rights.get(id).is_some_and(|r| *r == KeyRights::default()) {
            self.rights.remove(id);
        }
    }

    fn container_exists(&self, c: ContainerRef) -> bool {
        if c.account == 0 && (c.container == 0 || c.container == ALL_CONTAINERS) {
            return true;
        }
        self.accounts.values().find(|a| a.id == c.account).is_some_and(|a| c.container == ALL_CONTAINERS || a.containers.values().any(|x| x.id == c.container))
    }

    /// The bucket, or NoSuchBucket.
    pub fn bucket(&self, name: &str) -> Result<&Bucket, NameError> {
        self.buckets.get(name).ok_or_else(|| NameError::NoSuchBucket(name.to_owned()))
    }

    /// Removes a bucket and every grant on it. Its expired objects still
    /// name blobs, which the engine expires itself.
    fn remove_bucket(&mut self, name: &str) -> Option<Bucket> {
        for k in self.keys.values_mut() {
            k.grants.remove(name);
        }
        self.versioning.remove(name);
        self.bucket_docs.remove(name);
        self.buckets.remove(name)
    }

    /// An object named in a versioned bucket carries no expiry of its own:
    /// the bucket keeps its versions, and lifecycle expiration turns into a
    /// delete marker (`ExpireVersioned`). (The S3 API gives such an
    /// object's blob no TTL either; this holds the names to it too.)
    fn keep_versions(&self, bucket: &str, object: &mut ObjectMeta) {
        if self.versioning.contains_key(bucket) {
            object.expiry_ms = 0;
        }
    }

    fn bucket_mut(&mut self, name: &str) -> Result<&mut Bucket, NameError> {
        self.buckets.get_mut(name).ok_or_else(|| NameError::NoSuchBucket(name.to_owned()))
    }

    /// Applies `op`: all of it, or (on error) none of it. An op captured
    /// for change capture appends its events to the outbox in the same
    /// step (crate::events).
    pub fn apply(&mut self, op: NameOp) -> Result<Outcome, NameError> {
        let (cause, op) = match op {
            NameOp::As { who, kind, now_ms, op } => (crate::events::Cause { who, kind, now_ms }, *op),
            op => (crate::events::Cause::default(), op),
        };
        match op {
            NameOp::As { .. } => return Err(NameError::Unavailable("a nested As op".into())),
            NameOp::TrimEvents { target, seq } => {
                self.outbox.delivered(&target, seq);
                return Ok(Outcome::default());
            }
            NameOp::SetEventTarget { name, spec, all, now_ms } => {
                self.outbox.set_target(name, spec.map(|s| (s, all)), now_ms);
                return Ok(Outcome::default());
            }
            _ => {}
        }
        let Some(before) = self.before(&op) else { return self.apply_op(op) };
        let copy = op.clone();
        let out = self.apply_op(op)?;
        self.record(&copy, &out, before, cause);
        Ok(out)
    }

    fn apply_op(&mut self, op: NameOp) -> Result<Outcome, NameError> {
        let mut out = Outcome::default();
        match op {
            NameOp::CreateBucket { name, owner, now_ms } => {
                if let Some(b) = self.buckets.get(&name) {
                    return Err(NameError::BucketExists { name, yours: b.owner == owner });
                }
                if let Some(k) = self.keys.get_mut(&owner).filter(|k| !k.admin) {
                    k.grants.insert(name.clone(), Grant { read: true, write: true });
                }
                self.buckets.insert(name, Bucket { created_ms: now_ms, owner, ..Bucket::default() });
            }
            NameOp::DeleteBucket { name, now_ms } => {
                let b = self.bucket(&name)?;
                if b.objects.values().any(|o| !o.expired(now_ms)) || !b.uploads.is_empty() || self.has_older_versions(&name) {
                    return Err(NameError::BucketNotEmpty(name));
                }
                self.remove_bucket(&name);
            }
            NameOp::DeleteBucketAbortingUploads { name, now_ms } => {
                let b = self.bucket(&name)?;
                if b.objects.values().any(|o| !o.expired(now_ms)) || self.has_older_versions(&name) {
                    return Err(NameError::BucketNotEmpty(name));
                }
                if let Some(b) = self.remove_bucket(&name) {
                    out.parts = b.uploads.into_values().flat_map(|u| u.parts.into_values()).collect();
                }
            }
            NameOp::SetVersioning { bucket, enabled } => {
                self.bucket(&bucket)?;
                if !enabled && self.versioning.get(&bucket).is_some_and(|v| v.lock.is_some()) {
                    return Err(NameError::InvalidBucketState(format!("versioning of {bucket:?} cannot be suspended: it has object lock")));
                }
                if !self.versioning.contains_key(&bucket) {
                    // A versioned bucket keeps every version: lifecycle
                    // expiration adds delete markers (ExpireVersioned)
                    // instead of names (and blobs) that expire on their own.
                    for o in self.bucket_mut(&bucket)?.objects.values_mut() {
                        o.expiry_ms = 0;
                    }
                }
                self.versioning.entry(bucket).or_default().enabled = enabled;
            }
            NameOp::ExpireVersioned { bucket, key, version_id, marker_id, now_ms } => {
                let current = self.bucket(&bucket)?.objects.get(&key).map(|o| crate::versions::version_id(o) == version_id);
                if self.versioning.contains_key(&bucket) && current == Some(true) {
                    out.replaced = self.delete_versioned(&bucket, &key, None, &marker_id, now_ms, false)?;
                }
            }
            NameOp::DeleteVersioned { bucket, key, version_id, marker_id, now_ms, bypass_governance } => {
                self.bucket(&bucket)?;
                out.replaced = self.delete_versioned(&bucket, &key, version_id.as_deref(), &marker_id, now_ms, bypass_governance)?;
            }
            NameOp::SetBucketDoc { bucket, kind, doc } => {
                self.bucket(&bucket)?;
                let docs = self.bucket_docs.entry(bucket.clone()).or_default();
                match doc {
                    Some(d) => {
                        docs.insert(kind, d);
                    }
                    None => {
                        docs.remove(&kind);
                    }
                }
                if docs.is_empty() {
                    self.bucket_docs.remove(&bucket);
                }
            }
            NameOp::SetObjectLock { bucket, default } => {
                self.bucket(&bucket)?;
                self.set_object_lock(&bucket, default)?;
            }
            NameOp::SetLockState { bucket, key, version_id, retention, legal_hold, bypass_governance, now_ms } => {
                self.bucket(&bucket)?;
                self.set_lock_state(&bucket, &key, version_id.as_deref(), retention, legal_hold, bypass_governance, now_ms)?;
            }
            NameOp::CreateKmsKey { key } => {
                if self.kms.contains_key(&key.id) {
                    return Err(NameError::KmsKeyExists(key.id));
                }
                self.kms.insert(key.id.clone(), key);
            }
            NameOp::SetKmsKeyEnabled { id, enabled } => match self.kms.get_mut(&id) {
                Some(k) => k.enabled = enabled,
                None => return Err(NameError::NoSuchKmsKey(id)),
            },
            NameOp::SetPublic { bucket, public } => self.bucket_mut(&bucket)?.public = public,
            NameOp::SetLifecycle { bucket, rules } => {
                // Existing objects expire as the rules now say, counted from
                // when each was written (S3's semantics); in a versioned
                // bucket they never expire on their own (ExpireVersioned).
                let versioned = self.versioning.contains_key(&bucket);
                let b = self.bucket_mut(&bucket)?;
                b.lifecycle = rules;
                let rules = Bucket { lifecycle: std::mem::take(&mut b.lifecycle), ..Bucket::default() };
                for (key, o) in &mut b.objects {
                    o.expiry_ms = if versioned { 0 } else { rules.expiry_for(key, o.modified_ms) };
                }
                b.lifecycle = rules.lifecycle;
            }
            NameOp::PutObject { bucket, key, mut object, if_absent } => {
                self.keep_versions(&bucket, &mut object);
                if key.len() > KEY_BYTES_MAX {
                    return Err(NameError::KeyTooLong(key.len()));
                }
                let b = self.bucket_mut(&bucket)?;
                if if_absent && b.object(&key, object.modified_ms).is_some() {
                    return Err(NameError::PreconditionFailed(format!("{key:?} exists (If-None-Match: *)")));
                }
                let id = crate::versions::version_id(&object).to_owned();
                let old = b.objects.insert(key.clone(), object);
                out.replaced = self.displace(&bucket, &key, &id, old);
            }
            NameOp::PutObjectIfMatch { bucket, key, mut object, etag } => {
                self.keep_versions(&bucket, &mut object);
                if key.len() > KEY_BYTES_MAX {
                    return Err(NameError::KeyTooLong(key.len()));
                }
                let b = self.bucket_mut(&bucket)?;
                match b.object(&key, object.modified_ms) {
                    None => return Err(NameError::NoSuchKey { bucket, key }),
                    Some(o) if etag.as_ref().is_some_and(|e| *e != o.etag) => {
                        return Err(NameError::PreconditionFailed(format!("{key:?} has another ETag than If-Match gives")));
                    }
                    Some(_) => {}
                }
                let id = crate::versions::version_id(&object).to_owned();
                let old = b.objects.insert(key.clone(), object);
                out.replaced = self.displace(&bucket, &key, &id, old);
            }
            NameOp::SetObjectMeta { bucket, key, blob, meta, now_ms } => {
                let b = self.bucket_mut(&bucket)?;
                match b.objects.get_mut(&key).filter(|o| !o.expired(now_ms)) {
                    None => return Err(NameError::NoSuchKey { bucket, key }),
                    Some(o) if o.blob != blob => return Err(NameError::PreconditionFailed(format!("{key:?} was overwritten meanwhile"))),
                    Some(o) => o.meta = meta,
                }
            }
            NameOp::DeleteObject { bucket, key, blob } => {
                let b = self.bucket_mut(&bucket)?;
                if blob.is_none_or(|id| b.objects.get(&key).is_some_and(|o| o.blob == id)) {
                    out.replaced = self.remove_current_unless_locked(&bucket, &key);
                }
            }
            NameOp::CreateUpload { bucket, upload_id, upload } => {
                if upload.key.len() > KEY_BYTES_MAX {
                    return Err(NameError::KeyTooLong(upload.key.len()));
                }
                self.bucket_mut(&bucket)?.uploads.insert(upload_id, upload);
            }
            NameOp::PutPart { bucket, upload_id, number, part } => {
                let b = self.bucket_mut(&bucket)?;
                let u = b.uploads.get_mut(&upload_id).ok_or(NameError::NoSuchUpload(upload_id))?;
                out.parts.extend(u.parts.insert(number, part));
            }
            NameOp::CompleteUpload { bucket, upload_id, used, mut object } => {
                self.keep_versions(&bucket, &mut object);
                let b = self.bucket_mut(&bucket)?;
                let u = b.uploads.get(&upload_id).ok_or_else(|| NameError::NoSuchUpload(upload_id.clone()))?;
                for (n, blob) in &used {
                    if u.parts.get(n).is_none_or(|p| p.blob != *blob) {
                        return Err(NameError::InvalidPart(format!("part {n} was replaced or removed while completing")));
                    }
                }
                let Some(u) = b.uploads.remove(&upload_id) else { return Err(NameError::NoSuchUpload(upload_id)) };
                out.parts = u.parts.into_iter().filter(|(n, _)| !used.iter().any(|(m, _)| m == n)).map(|p| p.1).collect();
                let id = crate::versions::version_id(&object).to_owned();
                let old = b.objects.insert(u.key.clone(), object);
                out.replaced = self.displace(&bucket, &u.key, &id, old);
            }
            NameOp::AbortUpload { bucket, upload_id } => {
                let b = self.bucket_mut(&bucket)?;
                let u = b.uploads.remove(&upload_id).ok_or(NameError::NoSuchUpload(upload_id))?;
                out.parts = u.parts.into_values().collect();
            }
            NameOp::CreateKey { key } => {
                if self.keys.contains_key(&key.id) {
                    return Err(NameError::AccessKeyExists(key.id));
                }
                self.keys.insert(key.id.clone(), key);
            }
            NameOp::DeleteKey { id } => {
                self.keys.remove(&id).ok_or_else(|| NameError::NoSuchAccessKey(id.clone()))?;
                self.rights.remove(&id);
            }
            NameOp::CreateContainer { account, container, now_ms } => {
                if !valid_name(&account) || !valid_name(&container) {
                    return Err(NameError::InvalidName(format!("{account}/{container}")));
                }
                if account == DEFAULT && container == DEFAULT || self.container_ref(&account, &container).is_some() {
                    return Err(NameError::ContainerExists(format!("{account}/{container}")));
                }
                let next_account = self.accounts.values().map(|a| a.id).max().unwrap_or(0).checked_add(1).filter(|id| *id < ALL_CONTAINERS);
                let a = match self.accounts.get_mut(&account) {
                    Some(a) => a,
                    None if account == DEFAULT => self.accounts.entry(account).or_insert(Account { id: 0, created_ms: now_ms, containers: BTreeMap::new() }),
                    None => {
                        let id = next_account.ok_or_else(|| NameError::InvalidName("no account ids left".into()))?;
                        self.accounts.entry(account).or_insert(Account { id, created_ms: now_ms, containers: BTreeMap::new() })
                    }
                };
                let id = a.containers.values().map(|c| c.id).max().unwrap_or(0).checked_add(1).filter(|id| *id < ALL_CONTAINERS);
                let id = id.ok_or_else(|| NameError::InvalidName("no container ids left in the account".into()))?;
                a.containers.insert(container, Container { id, created_ms: now_ms });
            }
            NameOp::SetBlobGrant { id, container, grant } => {
                if !self.container_exists(container) {
                    return Err(NameError::NoSuchContainer(self.container_name(container)));
                }
                let r = self.key_mut(&id)?;
                if grant == BlobGrant::default() {
                    r.containers.remove(&container);
                } else {
                    r.containers.insert(container, grant);
                }
                self.tidy_rights(&id);
            }
            NameOp::SetKvGrant { id, store, grant } => {
                let r = self.key_mut(&id)?;
                if grant == KvGrant::default() {
                    r.kv.remove(&store);
                } else {
                    r.kv.insert(store, grant);
                }
                self.tidy_rights(&id);
            }
            NameOp::SetKeyExpiry { id, expires_ms } => {
                self.key_mut(&id)?.expires_ms = expires_ms;
                self.tidy_rights(&id);
            }
            // Applied by `apply` before it gets here.
            NameOp::As { .. } | NameOp::TrimEvents { .. } | NameOp::SetEventTarget { .. } => {
                return Err(NameError::Unavailable("a change-capture op out of place".into()));
            }
            NameOp::SetGrant { id, bucket, grant } => {
                if !self.buckets.contains_key(&bucket) {
                    return Err(NameError::NoSuchBucket(bucket));
                }
                let k = self.keys.get_mut(&id).ok_or(NameError::NoSuchAccessKey(id))?;
                if grant == Grant::default() {
                    k.grants.remove(&bucket);
                } else {
                    k.grants.insert(bucket, grant);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_types::BlobKind;

    fn blob(n: u8) -> BlobId {
        BlobId::from_parts(BlobKind::Simple, 1, [n; 16])
    }

    fn obj(n: u8, t: u64) -> ObjectMeta {
        ObjectMeta { blob: blob(n), size: 1, etag: "e".into(), content_type: String::new(), meta: vec![], modified_ms: t, expiry_ms: 0, parts: 0 }
    }

    fn put(bucket: &str, key: &str, n: u8) -> NameOp {
        NameOp::PutObject { bucket: bucket.into(), key: key.into(), object: obj(n, 10), if_absent: false }
    }

    #[test]
    fn if_match_swaps_only_the_object_it_names() {
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        let object = |n: u8| ObjectMeta { etag: format!("e{n}"), ..obj(n, 10) };
        let cas =
            |n: u8, etag: Option<&str>| NameOp::PutObjectIfMatch { bucket: "b".into(), key: "k".into(), object: object(n), etag: etag.map(str::to_owned) };
        assert!(matches!(s.apply(cas(1, None)), Err(NameError::NoSuchKey { .. })), "nothing to match yet");
        s.apply(put("b", "k", 1)).unwrap();
        let first = s.buckets["b"].objects["k"].clone();
        assert!(matches!(s.apply(cas(2, Some("not-it"))), Err(NameError::PreconditionFailed(_))));
        assert_eq!(s.buckets["b"].objects["k"], first, "a refused swap changes nothing");
        let out = s.apply(cas(2, Some(&first.etag))).unwrap();
        assert_eq!(out.replaced, Some(first.clone()));
        assert!(matches!(s.apply(cas(3, Some(&first.etag))), Err(NameError::PreconditionFailed(_))), "the old ETag is gone");
        s.apply(cas(3, None)).unwrap();
        assert_eq!(s.buckets["b"].objects["k"].blob, obj(3, 10).blob);
    }

    #[test]
    fn object_metadata_changes_in_place_only_on_the_same_blob() {
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        let set = |n: u8, tag: &str| NameOp::SetObjectMeta {
            bucket: "b".into(),
            key: "k".into(),
            blob: blob(n),
            meta: vec![("/tag:t".into(), tag.into())],
            now_ms: 10,
        };
        assert!(matches!(s.apply(set(1, "x")), Err(NameError::NoSuchKey { .. })));
        s.apply(put("b", "k", 1)).unwrap();
        let before = s.clone();
        assert!(matches!(s.apply(set(2, "x")), Err(NameError::PreconditionFailed(_))), "another blob");
        assert_eq!(s, before);
        assert_eq!(s.apply(set(1, "x")).unwrap(), Outcome::default(), "frees nothing");
        let o = &s.buckets["b"].objects["k"];
        assert_eq!((o.blob, o.meta.clone()), (blob(1), vec![("/tag:t".to_owned(), "x".to_owned())]));
        let expired = NameOp::SetObjectMeta { bucket: "b".into(), key: "k".into(), blob: blob(1), meta: vec![], now_ms: 10 };
        s.buckets.get_mut("b").unwrap().objects.get_mut("k").unwrap().expiry_ms = 5;
        assert!(matches!(s.apply(expired), Err(NameError::NoSuchKey { .. })), "an expired object is gone");
    }

    #[test]
    fn overwrite_returns_the_old_blob_and_failed_ops_change_nothing() {
        let mut s = NameState::default();
        assert_eq!(s.apply(put("b", "k", 1)), Err(NameError::NoSuchBucket("b".into())));
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        assert_eq!(s.apply(put("b", "k", 1)).unwrap().replaced, None);
        assert_eq!(s.apply(put("b", "k", 2)).unwrap().replaced.map(|o| o.blob), Some(blob(1)));
        let before = s.clone();
        let op = NameOp::PutObject { bucket: "b".into(), key: "k".into(), object: obj(3, 10), if_absent: true };
        assert!(matches!(s.apply(op), Err(NameError::PreconditionFailed(_))));
        assert_eq!(s.apply(NameOp::DeleteBucket { name: "b".into(), now_ms: 20 }), Err(NameError::BucketNotEmpty("b".into())));
        assert_eq!(s, before);
        // A conditional delete of a blob the name no longer points at is a no-op.
        assert_eq!(s.apply(NameOp::DeleteObject { bucket: "b".into(), key: "k".into(), blob: Some(blob(1)) }).unwrap().replaced, None);
        assert_eq!(s.apply(NameOp::DeleteObject { bucket: "b".into(), key: "k".into(), blob: None }).unwrap().replaced.map(|o| o.blob), Some(blob(2)));
        s.apply(NameOp::DeleteBucket { name: "b".into(), now_ms: 20 }).unwrap();
    }

    /// Bucket `b` with upload `u` of key `k`, its parts 1..=`parts` the blobs of those numbers.
    fn with_upload(parts: u8) -> NameState {
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        let upload = Upload { key: "k".into(), created_ms: 1, content_type: String::new(), meta: vec![], owner: String::new(), parts: BTreeMap::new() };
        s.apply(NameOp::CreateUpload { bucket: "b".into(), upload_id: "u".into(), upload }).unwrap();
        for n in 1..=parts {
            let part = PartMeta { blob: blob(n), size: 1, etag: "p".into(), modified_ms: 1 };
            s.apply(NameOp::PutPart { bucket: "b".into(), upload_id: "u".into(), number: u32::from(n), part }).unwrap();
        }
        s
    }

    #[test]
    fn deleting_a_bucket_aborts_its_uploads_but_the_older_op_refuses() {
        let mut s = with_upload(2);
        // The op a log written before holds keeps refusing, so replaying it
        // gives the state it gave then.
        assert_eq!(s.apply(NameOp::DeleteBucket { name: "b".into(), now_ms: 2 }), Err(NameError::BucketNotEmpty("b".into())));
        s.apply(put("b", "k", 7)).unwrap();
        let before = s.clone();
        assert_eq!(s.apply(NameOp::DeleteBucketAbortingUploads { name: "b".into(), now_ms: 2 }), Err(NameError::BucketNotEmpty("b".into())));
        assert_eq!(s, before);
        s.apply(NameOp::DeleteObject { bucket: "b".into(), key: "k".into(), blob: None }).unwrap();
        let out = s.apply(NameOp::DeleteBucketAbortingUploads { name: "b".into(), now_ms: 2 }).unwrap();
        assert_eq!(out.parts.iter().map(|p| p.blob).collect::<Vec<_>>(), vec![blob(1), blob(2)]);
        assert!(s.buckets.is_empty());
    }

    #[test]
    fn a_versioned_bucket_s_objects_never_expire_on_their_own_and_expiry_adds_one_marker() {
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        let rule = ExpiryRule { id: "r".into(), prefix: String::new(), enabled: true, days: Some(1), date_ms: None };
        s.apply(put("b", "k", 1)).unwrap();
        s.apply(NameOp::SetLifecycle { bucket: "b".into(), rules: vec![rule] }).unwrap();
        assert_eq!(s.buckets["b"].objects["k"].expiry_ms, 10 + DAY_MS);
        s.apply(NameOp::SetVersioning { bucket: "b".into(), enabled: true }).unwrap();
        assert_eq!(s.buckets["b"].objects["k"].expiry_ms, 0, "enabling versioning keeps what is there");
        let expiring = ObjectMeta { expiry_ms: 10 + DAY_MS, ..obj(2, 10) };
        s.apply(NameOp::PutObject { bucket: "b".into(), key: "k".into(), object: expiring, if_absent: false }).unwrap();
        assert_eq!(s.buckets["b"].objects["k"].expiry_ms, 0, "an expiry given with a put is dropped");
        s.apply(NameOp::SetLifecycle { bucket: "b".into(), rules: s.buckets["b"].lifecycle.clone() }).unwrap();
        assert_eq!(s.buckets["b"].objects["k"].expiry_ms, 0);
        assert!(s.buckets["b"].object("k", u64::MAX).is_some(), "never expires by itself");
        // Expiry judged on another version (overwritten meanwhile) does nothing.
        let expire = |v: &str| NameOp::ExpireVersioned { bucket: "b".into(), key: "k".into(), version_id: v.into(), marker_id: "m1".into(), now_ms: 20 };
        let before = s.clone();
        assert_eq!(s.apply(expire("not-current")).unwrap(), Outcome::default());
        assert_eq!(s, before);
        let out = s.apply(expire(crate::NULL_VERSION)).unwrap();
        assert_eq!(out.replaced, None, "the version is kept, not freed");
        assert!(!s.buckets["b"].objects.contains_key("k"));
        let after = s.clone();
        assert_eq!(s.apply(expire(crate::NULL_VERSION)).unwrap(), Outcome::default(), "a second sweep's op does nothing");
        assert_eq!(s, after);
        let ids: Vec<&str> = s.versioning["b"].older["k"].iter().map(|v| v.id.as_str()).collect();
        assert_eq!(ids, vec!["m1", crate::NULL_VERSION]);
    }

    #[test]
    fn completion_checks_parts_and_releases_unused_ones() {
        let mut s = with_upload(3);
        let stale = NameOp::CompleteUpload { bucket: "b".into(), upload_id: "u".into(), used: vec![(1, blob(9))], object: obj(7, 2) };
        assert!(matches!(s.apply(stale), Err(NameError::InvalidPart(_))));
        let op = NameOp::CompleteUpload { bucket: "b".into(), upload_id: "u".into(), used: vec![(1, blob(1)), (3, blob(3))], object: obj(7, 2) };
        let out = s.apply(op).unwrap();
        assert_eq!(out.parts.iter().map(|p| p.blob).collect::<Vec<_>>(), vec![blob(2)]);
        assert!(s.buckets["b"].uploads.is_empty());
        assert_eq!(s.buckets["b"].objects["k"].blob, blob(7));
    }

    #[test]
    fn lifecycle_rules_give_the_earliest_expiry() {
        let b = Bucket {
            lifecycle: vec![
                ExpiryRule { id: "a".into(), prefix: "logs/".into(), days: Some(2), date_ms: None, enabled: true },
                ExpiryRule { id: "b".into(), prefix: "".into(), days: Some(5), date_ms: None, enabled: true },
                ExpiryRule { id: "c".into(), prefix: "".into(), days: Some(1), date_ms: None, enabled: false },
            ],
            ..Bucket::default()
        };
        assert_eq!(b.expiry_for("logs/x", 0), 2 * DAY_MS);
        assert_eq!(b.expiry_for("data/x", 0), 5 * DAY_MS);
        // Setting rules re-dates existing objects from when they were written.
        let mut s = NameState::default();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        s.apply(put("b", "logs/x", 1)).unwrap();
        s.apply(NameOp::SetLifecycle { bucket: "b".into(), rules: b.lifecycle.clone() }).unwrap();
        assert_eq!(s.buckets["b"].objects["logs/x"].expiry_ms, 10 + 2 * DAY_MS);
        s.apply(NameOp::SetLifecycle { bucket: "b".into(), rules: vec![] }).unwrap();
        assert_eq!(s.buckets["b"].objects["logs/x"].expiry_ms, 0);
    }
}
