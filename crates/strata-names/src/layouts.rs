//! The name state's earlier layouts and the decoder that reads any of
//! them. postcard has no field tags: each older layout is a prefix of the
//! next (new fields go at the end of `NameState`), so the newest is tried
//! first and an older one decodes with none of what came after it.

use crate::rights::{Account, KeyRights};
use crate::state::{AccessKey, Bucket, KmsKey, NameState};
use serde::Deserialize;
use std::collections::BTreeMap;

/// An outbox event as written before cluster events (no `name`).
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct NameEventV1 {
    seq: u64,
    time_ms: u64,
    kind: String,
    who: Option<String>,
    bucket: String,
    key: Option<String>,
    version_id: Option<String>,
    size: Option<u64>,
    etag: Option<String>,
}

/// The outbox as written before cluster events.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct OutboxV1 {
    last_seq: u64,
    events: std::collections::VecDeque<NameEventV1>,
    dropped: u64,
    targets: BTreeMap<String, crate::events::EventTarget>,
}

/// The state as written before cluster events.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct NameStateV6 {
    buckets: BTreeMap<String, Bucket>,
    keys: BTreeMap<String, AccessKey>,
    accounts: BTreeMap<String, Account>,
    rights: BTreeMap<String, KeyRights>,
    kms: BTreeMap<String, KmsKey>,
    versioning: BTreeMap<String, crate::versions::Versioning>,
    bucket_docs: BTreeMap<String, BTreeMap<String, String>>,
    outbox: OutboxV1,
}

impl From<NameStateV6> for NameState {
    fn from(v: NameStateV6) -> Self {
        let o = v.outbox;
        let events = o
            .events
            .into_iter()
            .map(|e| {
                std::sync::Arc::new(crate::events::NameEvent {
                    seq: e.seq,
                    time_ms: e.time_ms,
                    kind: e.kind,
                    who: e.who,
                    bucket: e.bucket,
                    key: e.key,
                    version_id: e.version_id,
                    size: e.size,
                    etag: e.etag,
                    name: None,
                })
            })
            .collect();
        Self {
            buckets: v.buckets,
            keys: v.keys,
            accounts: v.accounts,
            rights: v.rights,
            kms: v.kms,
            versioning: v.versioning,
            bucket_docs: v.bucket_docs,
            outbox: crate::events::Outbox { last_seq: o.last_seq, events, dropped: o.dropped, targets: o.targets },
        }
    }
}

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
        let e = match exact::<(P, Self)>(bytes) {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        if let Ok((p, v6)) = exact::<(P, NameStateV6)>(bytes) {
            return Ok((p, v6.into()));
        }
        if let Ok((p, v5)) = exact::<(P, NameStateV5)>(bytes) {
            return Ok((p, v5.into()));
        }
        if let Ok((p, v4)) = exact::<(P, NameStateV4)>(bytes) {
            return Ok((p, v4.into()));
        }
        if let Ok((p, v3)) = exact::<(P, NameStateV3)>(bytes) {
            return Ok((p, v3.into()));
        }
        if let Ok((p, v2)) = exact::<(P, NameStateV2)>(bytes) {
            return Ok((p, v2.into()));
        }
        match exact::<(P, NameStateV1)>(bytes) {
            Ok((p, v1)) => Ok((p, Self { buckets: v1.buckets, keys: v1.keys, ..Self::default() })),
            Err(_) => Err(e),
        }
    }
}

/// Decodes `bytes` as one `T`, refusing bytes left over: a layout whose
/// change is inside a collection (an outbox event's new field) would
/// otherwise misread an older one and stop early without an error.
fn exact<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, postcard::Error> {
    match postcard::take_from_bytes::<T>(bytes)? {
        (t, []) => Ok(t),
        _ => Err(postcard::Error::DeserializeUnexpectedEnd),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NameOp;

    /// A state written before cluster events, with 0, 1, 2 and 130 events
    /// in its outbox, decodes to the same state (no event misread as one
    /// with a `name`), and the current layout round-trips.
    #[test]
    fn the_outbox_from_before_cluster_events_decodes() {
        for n in [0usize, 1, 2, 130] {
            let mut s = NameState::default();
            s.apply(NameOp::SetEventTarget { name: "t".into(), spec: Some("{}".into()), all: true, now_ms: 1 }).unwrap();
            s.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
            s.outbox.events.clear();
            for i in 0..n {
                s.outbox.note("strata:NodeAdded", Some("AK".into()), i as u64, format!("{i}"));
                if let Some(e) = s.outbox.events.back_mut() {
                    std::sync::Arc::make_mut(e).name = None;
                }
            }
            let o = &s.outbox;
            let old = NameStateV6 {
                buckets: s.buckets.clone(),
                keys: s.keys.clone(),
                accounts: s.accounts.clone(),
                rights: s.rights.clone(),
                kms: s.kms.clone(),
                versioning: s.versioning.clone(),
                bucket_docs: s.bucket_docs.clone(),
                outbox: OutboxV1 {
                    last_seq: o.last_seq,
                    dropped: o.dropped,
                    targets: o.targets.clone(),
                    events: o
                        .events
                        .iter()
                        .map(|e| NameEventV1 {
                            seq: e.seq,
                            time_ms: e.time_ms,
                            kind: e.kind.clone(),
                            who: e.who.clone(),
                            bucket: e.bucket.clone(),
                            key: e.key.clone(),
                            version_id: e.version_id.clone(),
                            size: e.size,
                            etag: e.etag.clone(),
                        })
                        .collect(),
                },
            };
            assert_eq!(NameState::decode(&postcard::to_allocvec(&old).unwrap()).unwrap(), s, "{n} events");
            assert_eq!(NameState::decode_with_lsn(&postcard::to_allocvec(&(5u64, &old)).unwrap()).unwrap(), (5, s.clone()), "{n} events");
            let mut new = s.clone();
            new.outbox.note("strata:NodeDown", None, 9, "3".into());
            assert_eq!(NameState::decode(&postcard::to_allocvec(&new).unwrap()).unwrap(), new);
        }
    }
}
