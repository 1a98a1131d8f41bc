//! The name state's earlier layouts and the decoder that reads any of
//! them. postcard has no field tags: each older layout is a prefix of the
//! next (new fields go at the end of `NameState`), so the newest is tried
//! first and an older one decodes with none of what came after it.

use crate::rights::{Account, KeyRights};
use crate::state::{AccessKey, Bucket, KmsKey, NameState};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The state as written before change capture's outbox.
#[derive(Deserialize)]
struct NameStateV5 {
    buckets: BTreeMap<String, Bucket>,
    keys: BTreeMap<String, AccessKey>,
    accounts: BTreeMap<String, Account>,
    rights: BTreeMap<String, KeyRights>,
    kms: BTreeMap<String, KmsKey>,
    versioning: BTreeMap<String, crate::versions::Versioning>,
    bucket_docs: BTreeMap<String, BTreeMap<String, String>>,
}

impl From<NameStateV5> for NameState {
    fn from(v: NameStateV5) -> Self {
        Self {
            buckets: v.buckets,
            keys: v.keys,
            accounts: v.accounts,
            rights: v.rights,
            kms: v.kms,
            versioning: v.versioning,
            bucket_docs: v.bucket_docs,
            outbox: crate::events::Outbox::default(),
        }
    }
}

/// The state as written before bucket documents.
#[derive(Deserialize)]
struct NameStateV4 {
    buckets: BTreeMap<String, Bucket>,
    keys: BTreeMap<String, AccessKey>,
    accounts: BTreeMap<String, Account>,
    rights: BTreeMap<String, KeyRights>,
    kms: BTreeMap<String, KmsKey>,
    versioning: BTreeMap<String, crate::versions::Versioning>,
}

impl From<NameStateV4> for NameState {
    fn from(v: NameStateV4) -> Self {
        Self { buckets: v.buckets, keys: v.keys, accounts: v.accounts, rights: v.rights, kms: v.kms, versioning: v.versioning, ..Self::default() }
    }
}

/// The state as written before versioning.
#[derive(Deserialize)]
struct NameStateV3 {
    buckets: BTreeMap<String, Bucket>,
    keys: BTreeMap<String, AccessKey>,
    accounts: BTreeMap<String, Account>,
    rights: BTreeMap<String, KeyRights>,
    kms: BTreeMap<String, KmsKey>,
}

impl From<NameStateV3> for NameState {
    fn from(v: NameStateV3) -> Self {
        Self { buckets: v.buckets, keys: v.keys, accounts: v.accounts, rights: v.rights, kms: v.kms, ..Self::default() }
    }
}

/// The state as written before the key store existed.
#[derive(Deserialize)]
struct NameStateV2 {
    buckets: BTreeMap<String, Bucket>,
    keys: BTreeMap<String, AccessKey>,
    accounts: BTreeMap<String, Account>,
    rights: BTreeMap<String, KeyRights>,
}

impl From<NameStateV2> for NameState {
    fn from(v: NameStateV2) -> Self {
        Self { buckets: v.buckets, keys: v.keys, accounts: v.accounts, rights: v.rights, ..Self::default() }
    }
}

/// The state as written before accounts and rights existed.
#[derive(Deserialize)]
struct NameStateV1 {
    buckets: BTreeMap<String, Bucket>,
    keys: BTreeMap<String, AccessKey>,
}

impl NameState {
    /// Decodes postcard of a state written by this version or, failing
    /// that, by the version before versioning, the one before the key
    /// store or the one before accounts and rights (each decodes with none
    /// of what came after it). postcard has no field tags: each
    /// older layout is a prefix of the next, so the newest is tried first.
    pub fn decode(bytes: &[u8]) -> Result<Self, postcard::Error> {
        Ok(Self::decode_with_lsn_of::<()>(bytes)?.1)
    }

    /// Decodes postcard of `(lsn, state)` (the embedded snapshot), any layout.
    pub fn decode_with_lsn(bytes: &[u8]) -> Result<(u64, Self), postcard::Error> {
        Self::decode_with_lsn_of::<u64>(bytes)
    }

    /// Decodes postcard of `(prefix, state)` for any of the state's layouts.
    fn decode_with_lsn_of<P: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<(P, Self), postcard::Error> {
        let e = match postcard::from_bytes::<(P, Self)>(bytes) {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        if let Ok((p, v5)) = postcard::from_bytes::<(P, NameStateV5)>(bytes) {
            return Ok((p, v5.into()));
        }
        if let Ok((p, v4)) = postcard::from_bytes::<(P, NameStateV4)>(bytes) {
            return Ok((p, v4.into()));
        }
        if let Ok((p, v3)) = postcard::from_bytes::<(P, NameStateV3)>(bytes) {
            return Ok((p, v3.into()));
        }
        if let Ok((p, v2)) = postcard::from_bytes::<(P, NameStateV2)>(bytes) {
            return Ok((p, v2.into()));
        }
        match postcard::from_bytes::<(P, NameStateV1)>(bytes) {
            Ok((p, v1)) => Ok((p, Self { buckets: v1.buckets, keys: v1.keys, ..Self::default() })),
            Err(_) => Err(e),
        }
    }
}
