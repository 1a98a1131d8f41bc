//! Identities and rights: one model for every port. An access key (the
//! identity a SigV4 signature names) may be an admin, or hold grants:
//! read and write on S3 buckets; read, write and delete on native-blob
//! containers (Ambry's accounts and containers: a blob's id names its
//! container, so the frontend checks a right before any I/O); read and
//! administration of read-only key-value stores. A key may expire.
//!
//! [`NameState::check`] is the one decision every port asks.

use crate::NameState;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The container id standing for "every container of the account" in a grant.
pub const ALL_CONTAINERS: u16 = u16::MAX;
/// The name of the account (id 0) and container (id 0) every blob without
/// an explicit container belongs to, and every blob written before
/// containers existed.
pub const DEFAULT: &str = "default";
/// Longest account or container name.
pub const CONTAINER_NAME_MAX: usize = 63;

/// A container by ids, as blob ids carry it; in a grant, a container id of
/// [`ALL_CONTAINERS`] stands for every container of the account.
pub use strata_types::ContainerRef;

/// Rights on a container's blobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobGrant {
    /// Get, head, info.
    pub read: bool,
    /// Put, TTL updates.
    pub write: bool,
    /// Delete.
    pub delete: bool,
}

/// Rights on a read-only store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvGrant {
    /// Gets and multi-gets.
    pub read: bool,
    /// Create, load, fetch, swap, rollback, discard.
    pub admin: bool,
}

/// What an access key holds besides its bucket grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRights {
    /// When the key stops working, ms since the epoch (0: never).
    pub expires_ms: u64,
    /// Native-blob rights by container.
    pub containers: BTreeMap<ContainerRef, BlobGrant>,
    /// Read-only store rights by store name (`*`: every store).
    pub kv: BTreeMap<String, KvGrant>,
}

/// A container of an account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// Id within the account (1 up; 0 is the default account's `default`).
    pub id: u16,
    /// Created, ms since the epoch.
    pub created_ms: u64,
}

/// An account: a namespace of containers (a team, an application).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// Id (1 up; 0 is the default account).
    pub id: u16,
    /// Created, ms since the epoch.
    pub created_ms: u64,
    /// Containers by name.
    pub containers: BTreeMap<String, Container>,
}

/// Something a request wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right<'a> {
    /// Administration: keys, cluster, maintenance, every bucket, container and store.
    Admin,
    /// List and get in a bucket.
    BucketRead(&'a str),
    /// Put, copy, delete, multipart in a bucket.
    BucketWrite(&'a str),
    /// Get a blob of a container.
    BlobRead(ContainerRef),
    /// Put into a container, update a TTL there.
    BlobWrite(ContainerRef),
    /// Delete a blob of a container.
    BlobDelete(ContainerRef),
    /// Read a store.
    KvRead(&'a str),
    /// Load, swap, roll back a store.
    KvAdmin(&'a str),
}

/// Why a right was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The key does not exist (never did, or was deleted).
    #[error("the access key {0:?} does not exist (or was revoked)")]
    NoSuchKey(String),
    /// The key expired.
    #[error("the access key {key:?} expired at {expires_ms} ms since the epoch")]
    Expired {
        /// Key id.
        key: String,
        /// When.
        expires_ms: u64,
    },
    /// The key exists but lacks the right.
    #[error("access key {key} may not {what}")]
    Missing {
        /// Key id.
        key: String,
        /// The right, in words.
        what: String,
    },
}

/// A valid account or container name: 1 to 63 of `a-z 0-9 - _ .`.
pub fn valid_name(s: &str) -> bool {
    (1..=CONTAINER_NAME_MAX).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'))
}

impl NameState {
    /// The ids of `account/container`; the default account's `default`
    /// container always exists.
    pub fn container_ref(&self, account: &str, container: &str) -> Option<ContainerRef> {
        if account == DEFAULT && container == DEFAULT {
            return Some(ContainerRef::DEFAULT);
        }
        let a = self.accounts.get(account)?;
        if container == "*" {
            return Some(ContainerRef { account: a.id, container: ALL_CONTAINERS });
        }
        Some(ContainerRef { account: a.id, container: a.containers.get(container)?.id })
    }

    /// `account/container` of `r` (ids in hex when unknown).
    pub fn container_name(&self, r: ContainerRef) -> String {
        if r == ContainerRef::DEFAULT {
            return format!("{DEFAULT}/{DEFAULT}");
        }
        let Some((aname, a)) = self.accounts.iter().find(|(_, a)| a.id == r.account) else {
            return format!("account#{}/container#{}", r.account, r.container);
        };
        if r.container == ALL_CONTAINERS {
            return format!("{aname}/*");
        }
        match a.containers.iter().find(|(_, c)| c.id == r.container) {
            Some((cname, _)) => format!("{aname}/{cname}"),
            None => format!("{aname}/container#{}", r.container),
        }
    }

    /// The access key `key`, if it exists and has not expired at `now_ms`.
    pub fn identity(&self, key: &str, now_ms: u64) -> Result<&crate::AccessKey, Denied> {
        let k = self.keys.get(key).ok_or_else(|| Denied::NoSuchKey(key.chars().take(64).collect()))?;
        if let Some(r) = self.rights.get(key).filter(|r| r.expires_ms != 0 && r.expires_ms <= now_ms) {
            return Err(Denied::Expired { key: key.into(), expires_ms: r.expires_ms });
        }
        Ok(k)
    }

    /// Whether access key `key` may do `right` at `now_ms`.
    pub fn check(&self, key: &str, right: Right<'_>, now_ms: u64) -> Result<(), Denied> {
        let k = self.identity(key, now_ms)?;
        let rights = self.rights.get(key);
        if k.admin {
            return Ok(());
        }
        let empty = KeyRights::default();
        let rights = rights.unwrap_or(&empty);
        let blob = |c: ContainerRef, f: fn(&BlobGrant) -> bool| {
            let all = ContainerRef { account: c.account, container: ALL_CONTAINERS };
            rights.containers.get(&c).is_some_and(f) || rights.containers.get(&all).is_some_and(f)
        };
        let kv = |store: &str, f: fn(&KvGrant) -> bool| rights.kv.get(store).is_some_and(f) || rights.kv.get("*").is_some_and(f);
        let ok = match right {
            Right::Admin => false,
            Right::BucketRead(b) => k.grant(b).read,
            Right::BucketWrite(b) => k.grant(b).write,
            Right::BlobRead(c) => blob(c, |g| g.read),
            Right::BlobWrite(c) => blob(c, |g| g.write),
            Right::BlobDelete(c) => blob(c, |g| g.delete),
            Right::KvRead(s) => kv(s, |g| g.read),
            Right::KvAdmin(s) => kv(s, |g| g.admin),
        };
        if ok {
            return Ok(());
        }
        let what = match right {
            Right::Admin => "administer this node or cluster (an admin key is needed)".to_owned(),
            Right::BucketRead(b) => format!("read bucket {b}"),
            Right::BucketWrite(b) => format!("write bucket {b}"),
            Right::BlobRead(c) => format!("read blobs of container {}", self.container_name(c)),
            Right::BlobWrite(c) => format!("write blobs into container {}", self.container_name(c)),
            Right::BlobDelete(c) => format!("delete blobs of container {}", self.container_name(c)),
            Right::KvRead(s) => format!("read store {s}"),
            Right::KvAdmin(s) => format!("administer store {s}"),
        };
        Err(Denied::Missing { key: key.into(), what })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AccessKey, NameError, NameOp};

    fn key(id: &str, admin: bool) -> NameOp {
        NameOp::CreateKey { key: AccessKey { id: id.into(), secret: "s".into(), name: id.into(), created_ms: 1, admin, grants: BTreeMap::new() } }
    }

    #[test]
    fn containers_get_ids_and_grants_decide() {
        let mut s = NameState::default();
        s.apply(key("admin", true)).unwrap();
        s.apply(key("k", false)).unwrap();
        s.apply(NameOp::CreateContainer { account: "media".into(), container: "photos".into(), now_ms: 1 }).unwrap();
        s.apply(NameOp::CreateContainer { account: "media".into(), container: "video".into(), now_ms: 1 }).unwrap();
        s.apply(NameOp::CreateContainer { account: "default".into(), container: "logs".into(), now_ms: 1 }).unwrap();
        let photos = s.container_ref("media", "photos").unwrap();
        let video = s.container_ref("media", "video").unwrap();
        assert_eq!((photos, video), (ContainerRef { account: 1, container: 1 }, ContainerRef { account: 1, container: 2 }));
        assert_eq!(s.container_ref("default", "logs"), Some(ContainerRef { account: 0, container: 1 }));
        assert_eq!(s.container_ref("default", "default"), Some(ContainerRef::DEFAULT));
        assert_eq!(s.container_name(video), "media/video");
        let before = s.clone();
        for (a, c) in [("media", "photos"), ("default", "default"), ("Bad", "x"), ("a", "")] {
            assert!(s.apply(NameOp::CreateContainer { account: a.into(), container: c.into(), now_ms: 2 }).is_err(), "{a}/{c}");
        }
        assert_eq!(s, before, "refused ops change nothing");

        let now = 10;
        assert!(s.check("admin", Right::BlobDelete(video), now).is_ok());
        assert!(s.check("admin", Right::Admin, now).is_ok());
        assert!(matches!(s.check("k", Right::BlobRead(photos), now), Err(Denied::Missing { what, .. }) if what.contains("media/photos")));
        s.apply(NameOp::SetBlobGrant { id: "k".into(), container: photos, grant: BlobGrant { read: true, write: true, delete: false } }).unwrap();
        assert!(s.check("k", Right::BlobWrite(photos), now).is_ok());
        assert!(s.check("k", Right::BlobDelete(photos), now).is_err());
        assert!(s.check("k", Right::BlobRead(video), now).is_err());
        let all = ContainerRef { account: 1, container: ALL_CONTAINERS };
        s.apply(NameOp::SetBlobGrant { id: "k".into(), container: all, grant: BlobGrant { read: true, ..BlobGrant::default() } }).unwrap();
        assert!(s.check("k", Right::BlobRead(video), now).is_ok(), "the account-wide grant covers every container");
        assert!(s.check("k", Right::BlobRead(ContainerRef::DEFAULT), now).is_err());
        assert!(s.check("k", Right::Admin, now).is_err());
        let missing = ContainerRef { account: 1, container: 9 };
        assert!(matches!(
            s.apply(NameOp::SetBlobGrant { id: "k".into(), container: missing, grant: BlobGrant::default() }),
            Err(NameError::NoSuchContainer(_))
        ));

        s.apply(NameOp::SetKvGrant { id: "k".into(), store: "scores".into(), grant: KvGrant { read: true, admin: false } }).unwrap();
        assert!(s.check("k", Right::KvRead("scores"), now).is_ok());
        assert!(s.check("k", Right::KvAdmin("scores"), now).is_err());
        assert!(s.check("k", Right::KvRead("other"), now).is_err());
        s.apply(NameOp::SetKvGrant { id: "k".into(), store: "*".into(), grant: KvGrant { read: true, admin: true } }).unwrap();
        assert!(s.check("k", Right::KvAdmin("other"), now).is_ok());

        s.apply(NameOp::SetKeyExpiry { id: "k".into(), expires_ms: 20 }).unwrap();
        assert!(s.check("k", Right::KvRead("scores"), 19).is_ok());
        assert!(matches!(s.check("k", Right::KvRead("scores"), 20), Err(Denied::Expired { .. })));
        s.apply(NameOp::DeleteKey { id: "k".into() }).unwrap();
        assert!(matches!(s.check("k", Right::KvRead("scores"), 1), Err(Denied::NoSuchKey(_))));
        assert!(!s.rights.contains_key("k"), "a deleted key's rights go with it");
        assert!(matches!(s.apply(NameOp::SetKeyExpiry { id: "k".into(), expires_ms: 1 }), Err(NameError::NoSuchAccessKey(_))));
    }

    #[test]
    fn a_state_written_before_rights_decodes_with_none() {
        #[derive(serde::Serialize)]
        struct V1<'a> {
            buckets: &'a BTreeMap<String, crate::Bucket>,
            keys: &'a BTreeMap<String, AccessKey>,
        }
        let mut s = NameState::default();
        s.apply(key("k", false)).unwrap();
        s.apply(NameOp::CreateBucket { name: "b".into(), owner: "k".into(), now_ms: 1 }).unwrap();
        let old = postcard::to_allocvec(&V1 { buckets: &s.buckets, keys: &s.keys }).unwrap();
        assert_eq!(NameState::decode(&old).unwrap(), s);
        let old_snap = postcard::to_allocvec(&(7u64, V1 { buckets: &s.buckets, keys: &s.keys })).unwrap();
        assert_eq!(NameState::decode_with_lsn(&old_snap).unwrap(), (7, s.clone()));
        s.apply(NameOp::CreateContainer { account: "a".into(), container: "c".into(), now_ms: 1 }).unwrap();
        s.apply(NameOp::SetKeyExpiry { id: "k".into(), expires_ms: 9 }).unwrap();
        assert_eq!(NameState::decode(&postcard::to_allocvec(&s).unwrap()).unwrap(), s);
        assert_eq!(NameState::decode_with_lsn(&postcard::to_allocvec(&(8u64, &s)).unwrap()).unwrap(), (8, s.clone()));
        // The layout before the key store: accounts and rights, no keys.
        #[derive(serde::Serialize)]
        struct V2<'a> {
            buckets: &'a BTreeMap<String, crate::Bucket>,
            keys: &'a BTreeMap<String, AccessKey>,
            accounts: &'a BTreeMap<String, crate::Account>,
            rights: &'a BTreeMap<String, crate::KeyRights>,
        }
        let v2 = V2 { buckets: &s.buckets, keys: &s.keys, accounts: &s.accounts, rights: &s.rights };
        assert_eq!(NameState::decode(&postcard::to_allocvec(&v2).unwrap()).unwrap(), s);
        assert_eq!(NameState::decode_with_lsn(&postcard::to_allocvec(&(9u64, &v2)).unwrap()).unwrap(), (9, s.clone()));
        let root = strata_sse::Key::random();
        s.apply(NameOp::CreateKmsKey { key: crate::KmsKey::generate(&root, "app", "", 1) }).unwrap();
        assert_eq!(s.apply(NameOp::CreateKmsKey { key: crate::KmsKey::generate(&root, "app", "", 2) }), Err(NameError::KmsKeyExists("app".into())));
        s.apply(NameOp::SetKmsKeyEnabled { id: "app".into(), enabled: false }).unwrap();
        assert_eq!(s.apply(NameOp::SetKmsKeyEnabled { id: "nope".into(), enabled: false }), Err(NameError::NoSuchKmsKey("nope".into())));
        assert!(!s.kms["app"].enabled);
        assert!(s.kms["app"].open(&root).is_ok() && s.kms["app"].open(&strata_sse::Key::random()).is_err());
        assert_eq!(NameState::decode(&postcard::to_allocvec(&s).unwrap()).unwrap(), s);
        assert_eq!(NameState::decode_with_lsn(&postcard::to_allocvec(&(10u64, &s)).unwrap()).unwrap(), (10, s));
    }
}
