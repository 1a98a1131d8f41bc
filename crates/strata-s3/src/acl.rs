//! Access control lists, S3's oldest rights model: a bucket's ACL (kept
//! as its `acl` document in the names) and an object's (kept in its
//! metadata under `/acl`), each a list of grants of READ, WRITE, READ_ACP,
//! WRITE_ACP or FULL_CONTROL to an access key (its id is its canonical
//! user id), to everyone (`AllUsers`) or to every signed request
//! (`AuthenticatedUsers`).
//!
//! ACLs add rights, never take them away: [`crate::access::KeyAccess`]
//! asks [`allows`] only after the bucket policy (whose Deny still wins)
//! and the key's grants, in that one place. What each permission allows is
//! S3's: on a bucket READ lists it, WRITE puts and deletes any of its
//! objects, READ_ACP and WRITE_ACP read and replace its ACL; on an object
//! READ gets it and WRITE_ACP replaces its ACL. A bucket whose ownership
//! controls say `BucketOwnerEnforced` has ACLs disabled: they grant
//! nothing there and a request that sets one is refused.
//!
//! Stored form (docs/formats.md "ACLs"): one grant per line,
//! `<grantee> <PERMISSION>`, the grantee `group:AllUsers`,
//! `group:AuthenticatedUsers`, `group:LogDelivery` or `id:<access key>`.

use s3s::dto::{AccessControlPolicy, Grant, Grantee as S3Grantee, Owner, Permission, Type};
use s3s::{S3Error, s3_error};
use strata_names::NameState;

/// The document kind a bucket's ACL is kept under.
pub(crate) const DOC: &str = "acl";
/// The metadata entry an object's ACL is kept in.
pub(crate) const META: &str = "/acl";
/// The document kind a bucket's ownership controls are kept under.
pub(crate) const OWNERSHIP_DOC: &str = "ownership";
/// The ownership setting that disables ACLs.
pub(crate) const ENFORCED: &str = "BucketOwnerEnforced";

const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
const LOG_DELIVERY: &str = "http://acs.amazonaws.com/groups/s3/LogDelivery";
/// An ACL holds at most this many grants (S3's limit).
const GRANTS_MAX: usize = 100;

/// A permission an ACL grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Perm {
    Read,
    Write,
    ReadAcp,
    WriteAcp,
    FullControl,
}

impl Perm {
    fn name(self) -> &'static str {
        match self {
            Self::Read => "READ",
            Self::Write => "WRITE",
            Self::ReadAcp => "READ_ACP",
            Self::WriteAcp => "WRITE_ACP",
            Self::FullControl => "FULL_CONTROL",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Self::Read, Self::Write, Self::ReadAcp, Self::WriteAcp, Self::FullControl].into_iter().find(|p| p.name() == s)
    }
}

/// Who a grant is to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Grantee {
    AllUsers,
    AuthenticatedUsers,
    /// S3's log delivery group: stored and shown, grants Strata's keys nothing.
    LogDelivery,
    /// An access key, by id.
    Key(String),
}

impl Grantee {
    fn stored(&self) -> String {
        match self {
            Self::AllUsers => "group:AllUsers".into(),
            Self::AuthenticatedUsers => "group:AuthenticatedUsers".into(),
            Self::LogDelivery => "group:LogDelivery".into(),
            Self::Key(k) => format!("id:{k}"),
        }
    }

    fn parse_stored(s: &str) -> Option<Self> {
        match s {
            "group:AllUsers" => Some(Self::AllUsers),
            "group:AuthenticatedUsers" => Some(Self::AuthenticatedUsers),
            "group:LogDelivery" => Some(Self::LogDelivery),
            _ => s.strip_prefix("id:").map(|k| Self::Key(k.to_owned())),
        }
    }

    fn of_uri(uri: &str) -> Result<Self, S3Error> {
        match uri {
            ALL_USERS => Ok(Self::AllUsers),
            AUTHENTICATED_USERS => Ok(Self::AuthenticatedUsers),
            LOG_DELIVERY => Ok(Self::LogDelivery),
            _ => Err(s3_error!(InvalidArgument, "the grantee group {uri:?} does not exist")),
        }
    }

    /// Whether the grant covers a request by `who` (`None`: anonymous).
    fn covers(&self, who: Option<&str>) -> bool {
        match self {
            Self::AllUsers => true,
            Self::AuthenticatedUsers => who.is_some(),
            Self::LogDelivery => false,
            Self::Key(k) => who == Some(k.as_str()),
        }
    }
}

/// An ACL: its grants, beside the owner's full control (always implied).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Acl(pub Vec<(Grantee, Perm)>);

impl Acl {
    /// The stored form; `None` for an ACL granting nothing (nothing stored).
    pub(crate) fn stored(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| self.0.iter().map(|(g, p)| format!("{} {}", g.stored(), p.name())).collect::<Vec<_>>().join("\n"))
    }

    /// Reads the stored form; lines it cannot read grant nothing (a stored
    /// ACL was checked when it was set).
    pub(crate) fn parse_stored(s: &str) -> Self {
        Self(
            s.lines()
                .filter_map(|l| {
                    let (g, p) = l.rsplit_once(' ')?;
                    Some((Grantee::parse_stored(g)?, Perm::parse(p)?))
                })
                .collect(),
        )
    }

    /// Whether it grants `perm` (or FULL_CONTROL) to `who`.
    fn grants(&self, who: Option<&str>, perm: Perm) -> bool {
        self.0.iter().any(|(g, p)| g.covers(who) && (*p == perm || *p == Perm::FullControl))
    }

    /// As S3's grant list: the owner's FULL_CONTROL first.
    pub(crate) fn to_grants(&self, owner: &Owner) -> Vec<Grant> {
        let user = |id: Option<String>, name: Option<String>| S3Grantee {
            type_: Type::from_static(Type::CANONICAL_USER),
            id,
            display_name: name,
            email_address: None,
            uri: None,
        };
        let group =
            |uri: &str| S3Grantee { type_: Type::from_static(Type::GROUP), uri: Some(uri.to_owned()), id: None, display_name: None, email_address: None };
        let mut out = vec![Grant {
            grantee: Some(user(owner.id.clone(), owner.display_name.clone())),
            permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
        }];
        for (g, p) in &self.0 {
            let grantee = match g {
                Grantee::AllUsers => group(ALL_USERS),
                Grantee::AuthenticatedUsers => group(AUTHENTICATED_USERS),
                Grantee::LogDelivery => group(LOG_DELIVERY),
                Grantee::Key(k) => user(Some(k.clone()), Some(k.clone())),
            };
            out.push(Grant { grantee: Some(grantee), permission: Some(Permission::from(p.name().to_owned())) });
        }
        out
    }
}

/// What a request asks an ACL to be, in any of S3's three ways.
pub(crate) struct Asked<'a> {
    /// `x-amz-acl`.
    pub canned: Option<&'a str>,
    /// `x-amz-grant-read`, `-write`, `-read-acp`, `-write-acp`, `-full-control`.
    pub headers: [Option<&'a str>; 5],
    /// An `AccessControlPolicy` body (PutBucketAcl, PutObjectAcl).
    pub body: Option<&'a AccessControlPolicy>,
}

/// The grant headers of an input, in [`Asked::headers`]' order.
macro_rules! grant_headers {
    ($i:expr) => {
        [$i.grant_read.as_deref(), $i.grant_write.as_deref(), $i.grant_read_acp.as_deref(), $i.grant_write_acp.as_deref(), $i.grant_full_control.as_deref()]
    };
}
pub(crate) use grant_headers;

/// Like [`grant_headers`], for inputs with no `x-amz-grant-write` (objects).
macro_rules! object_grant_headers {
    ($i:expr) => {
        [$i.grant_read.as_deref(), None, $i.grant_read_acp.as_deref(), $i.grant_write_acp.as_deref(), $i.grant_full_control.as_deref()]
    };
}
pub(crate) use object_grant_headers;

const HEADER_PERMS: [(Perm, &str); 5] = [
    (Perm::Read, "x-amz-grant-read"),
    (Perm::Write, "x-amz-grant-write"),
    (Perm::ReadAcp, "x-amz-grant-read-acp"),
    (Perm::WriteAcp, "x-amz-grant-write-acp"),
    (Perm::FullControl, "x-amz-grant-full-control"),
];

impl Asked<'_> {
    fn nothing(&self) -> bool {
        self.canned.is_none() && self.headers.iter().all(Option::is_none) && self.body.is_none()
    }

    /// The ACL asked for (`None` if the request asks none), checked:
    /// canned names S3 knows for a bucket or an object, grantees that exist
    /// (`key_exists`), one way at a time.
    pub(crate) fn acl(&self, bucket: bool, key_exists: impl Fn(&str) -> bool) -> Result<Option<Acl>, S3Error> {
        let has_headers = self.headers.iter().any(Option::is_some);
        if self.canned.is_some() && has_headers {
            return Err(s3_error!(InvalidRequest, "specifying both a canned ACL (x-amz-acl) and grant headers (x-amz-grant-*) is not allowed"));
        }
        if self.body.is_some() && (self.canned.is_some() || has_headers) {
            return Err(s3_error!(UnexpectedContent, "an ACL is given both in headers and in the body: give one"));
        }
        let acl = if let Some(c) = self.canned {
            canned(c, bucket)?
        } else if has_headers {
            let mut grants = Vec::new();
            for ((perm, name), value) in HEADER_PERMS.iter().zip(self.headers) {
                if let Some(v) = value {
                    for g in grantees_in(name, v, &key_exists)? {
                        grants.push((g, *perm));
                    }
                }
            }
            Acl(grants)
        } else if let Some(p) = self.body {
            from_policy(p, &key_exists)?
        } else {
            return Ok(None);
        };
        if acl.0.len() > GRANTS_MAX {
            return Err(s3_error!(MalformedACLError, "an ACL holds at most {GRANTS_MAX} grants, not {}", acl.0.len()));
        }
        Ok(Some(acl))
    }

    /// Whether this asks for an ACL that grants someone beside the owner
    /// something: what a bucket with ACLs disabled refuses. (S3 accepts
    /// `private` and `bucket-owner-full-control` there.)
    pub(crate) fn grants_others(&self, bucket: bool) -> bool {
        if self.nothing() {
            return false;
        }
        match self.canned {
            Some(c) => canned(c, bucket).map_or(true, |a| !a.0.is_empty()),
            None => true,
        }
    }
}

/// A canned ACL's grants. In Strata a bucket's owner owns its objects, so
/// `bucket-owner-read` and `bucket-owner-full-control` add nothing to an
/// object's ACL, and `aws-exec-read` (EC2's) grants none of Strata's keys.
fn canned(name: &str, bucket: bool) -> Result<Acl, S3Error> {
    let grants = match (name, bucket) {
        ("private", _) => vec![],
        ("public-read", _) => vec![(Grantee::AllUsers, Perm::Read)],
        ("public-read-write", _) => vec![(Grantee::AllUsers, Perm::Read), (Grantee::AllUsers, Perm::Write)],
        ("authenticated-read", _) => vec![(Grantee::AuthenticatedUsers, Perm::Read)],
        ("aws-exec-read" | "bucket-owner-read" | "bucket-owner-full-control", false) => vec![],
        ("log-delivery-write", true) => vec![(Grantee::LogDelivery, Perm::Write), (Grantee::LogDelivery, Perm::ReadAcp)],
        _ => {
            let what = if bucket { "a bucket" } else { "an object" };
            return Err(s3_error!(InvalidArgument, "{name:?} is not a canned ACL for {what}"));
        }
    };
    Ok(Acl(grants))
}

/// The grantees of one `x-amz-grant-*` header: `id="…"`, `uri="…"` or
/// `emailAddress="…"`, comma separated.
fn grantees_in(header: &str, value: &str, key_exists: &impl Fn(&str) -> bool) -> Result<Vec<Grantee>, S3Error> {
    let mut out = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((kind, v)) = part.split_once('=') else {
            return Err(s3_error!(InvalidArgument, "{header}: {part:?} is not of the form id=\"…\", uri=\"…\" or emailAddress=\"…\""));
        };
        let v = v.trim().trim_matches('"');
        out.push(match kind.trim().to_ascii_lowercase().as_str() {
            "id" => user(v, key_exists)?,
            "uri" => Grantee::of_uri(v)?,
            "emailaddress" => return Err(s3_error!(UnresolvableGrantByEmailAddress, "grants by e-mail address are not supported: name the access key by id")),
            other => return Err(s3_error!(InvalidArgument, "{header}: unknown grantee type {other:?}")),
        });
    }
    if out.is_empty() {
        return Err(s3_error!(InvalidArgument, "{header} names no grantee"));
    }
    Ok(out)
}

fn user(id: &str, key_exists: &impl Fn(&str) -> bool) -> Result<Grantee, S3Error> {
    if !key_exists(id) {
        return Err(s3_error!(InvalidArgument, "invalid id: no access key {id:?} exists"));
    }
    Ok(Grantee::Key(id.to_owned()))
}

fn from_policy(p: &AccessControlPolicy, key_exists: &impl Fn(&str) -> bool) -> Result<Acl, S3Error> {
    let mut grants = Vec::new();
    for g in p.grants.iter().flatten() {
        let perm = g.permission.as_ref().map(Permission::as_str).unwrap_or("");
        let perm = Perm::parse(perm).ok_or_else(|| s3_error!(MalformedACLError, "{perm:?} is not a permission"))?;
        let Some(grantee) = &g.grantee else { return Err(s3_error!(MalformedACLError, "a grant has no grantee")) };
        let grantee = match (grantee.type_.as_str(), &grantee.id, &grantee.uri) {
            (Type::CANONICAL_USER, Some(id), _) => {
                // The owner's own grant (what GetBucketAcl shows first) is implied.
                if id == crate::ops::OWNER_ID {
                    continue;
                }
                user(id, key_exists)?
            }
            (Type::GROUP, _, Some(uri)) => Grantee::of_uri(uri)?,
            ("AmazonCustomerByEmail", ..) => {
                return Err(s3_error!(UnresolvableGrantByEmailAddress, "grants by e-mail address are not supported: name the access key by id"));
            }
            (t, ..) => return Err(s3_error!(MalformedACLError, "a grantee of type {t:?} needs its ID (CanonicalUser) or URI (Group)")),
        };
        grants.push((grantee, perm));
    }
    Ok(Acl(grants))
}

/// Whether a bucket has ACLs enabled (its ownership controls are not
/// `BucketOwnerEnforced`).
pub(crate) fn enabled(s: &NameState, bucket: &str) -> bool {
    s.bucket_doc(bucket, OWNERSHIP_DOC) != Some(ENFORCED)
}

/// A bucket's ACL.
pub(crate) fn of_bucket(s: &NameState, bucket: &str) -> Acl {
    s.bucket_doc(bucket, DOC).map(Acl::parse_stored).unwrap_or_default()
}

/// An object's ACL, from its metadata.
pub(crate) fn of_object(meta: &[(String, String)]) -> Acl {
    meta.iter().find(|(k, _)| k == META).map(|(_, v)| Acl::parse_stored(v)).unwrap_or_default()
}

/// `meta` with its ACL replaced by `acl`.
pub(crate) fn replaced(meta: &[(String, String)], acl: &Acl) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = meta.iter().filter(|(k, _)| k != META).cloned().collect();
    out.extend(acl.stored().map(|v| (META.to_owned(), v)));
    out
}

/// The permission an operation needs, and whether on the bucket's ACL
/// (`true`) or the object's.
fn needed(op: &str) -> Option<(bool, Perm)> {
    Some(match op {
        "GetObject" | "HeadObject" | "GetObjectAttributes" => (false, Perm::Read),
        "GetObjectAcl" => (false, Perm::ReadAcp),
        "PutObjectAcl" => (false, Perm::WriteAcp),
        "ListObjects" | "ListObjectsV2" | "ListObjectVersions" | "ListMultipartUploads" | "HeadBucket" => (true, Perm::Read),
        "PutObject"
        | "PostObject"
        | "CopyObject"
        | "DeleteObject"
        | "DeleteObjects"
        | "CreateMultipartUpload"
        | "UploadPart"
        | "UploadPartCopy"
        | "CompleteMultipartUpload"
        | "AbortMultipartUpload"
        | "ListParts" => (true, Perm::Write),
        "GetBucketAcl" => (true, Perm::ReadAcp),
        "PutBucketAcl" => (true, Perm::WriteAcp),
        _ => return None,
    })
}

/// Whether the ACLs let `who` (`None`: anonymous) make `op` on `bucket`
/// (and `key`, for an object's operations).
pub(crate) fn allows(s: &NameState, op: &str, bucket: &str, key: Option<&str>, who: Option<&str>) -> bool {
    let Some((on_bucket, perm)) = needed(op) else { return false };
    if !s.buckets.contains_key(bucket) || !enabled(s, bucket) {
        return false;
    }
    if on_bucket {
        return of_bucket(s, bucket).grants(who, perm);
    }
    object_allows(s, bucket, key.unwrap_or(""), who, perm)
}

/// Whether `key`'s ACL grants `who` `perm`.
pub(crate) fn object_allows(s: &NameState, bucket: &str, key: &str, who: Option<&str>, perm: Perm) -> bool {
    enabled(s, bucket) && s.buckets.get(bucket).and_then(|b| b.objects.get(key)).is_some_and(|o| of_object(&o.meta).grants(who, perm))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked<'a>(canned: Option<&'a str>, headers: [Option<&'a str>; 5]) -> Asked<'a> {
        Asked { canned, headers, body: None }
    }

    #[test]
    fn canned_acls_grant_what_s3_says() {
        let exists = |k: &str| k == "AK1";
        let acl = |c: &str, bucket: bool| asked(Some(c), [None; 5]).acl(bucket, exists);
        assert_eq!(acl("private", true).unwrap(), Some(Acl(vec![])));
        assert_eq!(acl("public-read", false).unwrap(), Some(Acl(vec![(Grantee::AllUsers, Perm::Read)])));
        assert_eq!(acl("public-read-write", true).unwrap().unwrap().0.len(), 2);
        assert_eq!(acl("authenticated-read", true).unwrap(), Some(Acl(vec![(Grantee::AuthenticatedUsers, Perm::Read)])));
        assert_eq!(acl("bucket-owner-full-control", false).unwrap(), Some(Acl(vec![])));
        assert!(acl("bucket-owner-full-control", true).is_err(), "an object's canned ACL, not a bucket's");
        assert!(acl("log-delivery-write", false).is_err());
        assert!(acl("everyone", true).is_err());
        assert_eq!(asked(None, [None; 5]).acl(true, exists).unwrap(), None);
    }

    #[test]
    fn grant_headers_name_existing_keys_and_known_groups() {
        let exists = |k: &str| k == "AK1";
        let a = asked(None, [Some(r#"id="AK1", uri="http://acs.amazonaws.com/groups/global/AllUsers""#), None, None, Some("id=AK1"), None]);
        let acl = a.acl(false, exists).unwrap().unwrap();
        assert_eq!(acl.0, vec![(Grantee::Key("AK1".into()), Perm::Read), (Grantee::AllUsers, Perm::Read), (Grantee::Key("AK1".into()), Perm::WriteAcp)]);
        assert_eq!(Acl::parse_stored(&acl.stored().unwrap()), acl, "the stored form reads back");
        let err = |h: &str| asked(None, [Some(h), None, None, None, None]).acl(false, exists).unwrap_err().code().clone();
        assert_eq!(err("id=\"AK2\""), s3s::S3ErrorCode::InvalidArgument);
        assert_eq!(err("emailAddress=\"a@b.c\""), s3s::S3ErrorCode::UnresolvableGrantByEmailAddress);
        assert_eq!(err("uri=\"http://acs.amazonaws.com/groups/global/Nobody\""), s3s::S3ErrorCode::InvalidArgument);
        assert_eq!(err("AK1"), s3s::S3ErrorCode::InvalidArgument);
        let both = asked(Some("private"), [Some("id=AK1"), None, None, None, None]);
        assert_eq!(both.acl(false, exists).unwrap_err().code(), &s3s::S3ErrorCode::InvalidRequest);
    }

    #[test]
    fn full_control_implies_every_permission_and_groups_cover_who_they_say() {
        let acl = Acl(vec![(Grantee::Key("AK1".into()), Perm::FullControl), (Grantee::AuthenticatedUsers, Perm::Read)]);
        for p in [Perm::Read, Perm::Write, Perm::ReadAcp, Perm::WriteAcp] {
            assert!(acl.grants(Some("AK1"), p));
        }
        assert!(acl.grants(Some("AK2"), Perm::Read));
        assert!(!acl.grants(Some("AK2"), Perm::Write));
        assert!(!acl.grants(None, Perm::Read), "anonymous is not authenticated");
        assert!(Acl(vec![(Grantee::AllUsers, Perm::Read)]).grants(None, Perm::Read));
        assert!(!Acl(vec![(Grantee::LogDelivery, Perm::Write)]).grants(Some("AK1"), Perm::Write));
    }

    #[test]
    fn acls_off_refuse_only_grants_to_others() {
        assert!(!asked(Some("private"), [None; 5]).grants_others(true));
        assert!(!asked(Some("bucket-owner-full-control"), [None; 5]).grants_others(false));
        assert!(!asked(None, [None; 5]).grants_others(false));
        assert!(asked(Some("public-read"), [None; 5]).grants_others(false));
        assert!(asked(None, [Some("id=AK1"), None, None, None, None]).grants_others(false));
    }
}
