//! Who may do what: SigV4 secrets from the name index's access keys, grants
//! per bucket, bucket policies, ACLs, anonymous reads of public buckets, and
//! virtual hosts.

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::host::{S3Host, VirtualHost};
use s3s::path::S3Path;
use s3s::{S3Result, s3_error};
use std::sync::Arc;
use strata_names::NameIndex;

/// Secrets for SigV4 come from the name index.
pub struct KeyAuth(Arc<dyn NameIndex>);

impl KeyAuth {
    /// Over `names`.
    pub fn new(names: Arc<dyn NameIndex>) -> Self {
        Self(names)
    }
}

#[async_trait::async_trait]
impl S3Auth for KeyAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        let find = || strata_names::read(&*self.0, |s| s.keys.get(access_key).map(|k| SecretKey::from(k.secret.as_str())));
        if let Some(k) = find() {
            return Ok(k);
        }
        // A key created on another node may not be applied here yet.
        self.0.barrier().await.map_err(|e| s3_error!(ServiceUnavailable, "{e}"))?;
        find().ok_or_else(|| s3_error!(InvalidAccessKeyId, "the access key {access_key:?} does not exist"))
    }
}

/// Operations that only read: anonymous requests may make them on public
/// buckets, and a read grant allows them.
pub(crate) fn is_read(op: &str) -> bool {
    op.starts_with("Get") || op.starts_with("Head") || op.starts_with("List")
}

/// Longest validity of a presigned URL (S3's limit: seven days).
pub(crate) const PRESIGNED_EXPIRES_MAX_SECS: u64 = 7 * 24 * 3600;

/// The credential scope a signed request names: `(region, service)` from
/// the `Authorization` header's `Credential=KEY/DATE/REGION/SERVICE/aws4_request`
/// or a presigned URL's `X-Amz-Credential`, and a presigned URL's
/// `X-Amz-Expires`. `None` for an unsigned request.
pub(crate) struct Scope {
    pub region: String,
    pub service: String,
    pub expires_secs: Option<String>,
}

pub(crate) fn scope_of(headers: &http::HeaderMap, query: Option<&str>) -> Option<Scope> {
    let from_credential = |c: &str| {
        let mut parts = c.split('/');
        let (_key, _date, region, service) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        Some((region.to_owned(), service.to_owned()))
    };
    if let Some(auth) = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let cred = auth.split([' ', ',']).find_map(|p| p.trim().strip_prefix("Credential="))?;
        let (region, service) = from_credential(cred)?;
        return Some(Scope { region, service, expires_secs: None });
    }
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query?.as_bytes()).into_owned().collect();
    let cred = pairs.iter().find(|(k, _)| k == "X-Amz-Credential")?;
    let (region, service) = from_credential(&cred.1)?;
    let expires_secs = pairs.iter().find(|(k, _)| k == "X-Amz-Expires").map(|(_, v)| v.clone());
    Some(Scope { region, service, expires_secs })
}

/// Refuses a signature scoped to another region or service, and a
/// presigned URL valid for longer than seven days. (s3s checks the
/// signature with whatever region the request names.)
pub(crate) fn check_scope(scope: &Scope, region: &str) -> S3Result<()> {
    if scope.region != region {
        return Err(s3_error!(AuthorizationHeaderMalformed, "the credential scope's region {:?} is wrong; expecting {region:?}", scope.region));
    }
    if scope.service != "s3" {
        return Err(s3_error!(AuthorizationHeaderMalformed, "the credential scope's service {:?} is wrong; expecting \"s3\"", scope.service));
    }
    if let Some(e) = &scope.expires_secs {
        match e.parse::<u64>() {
            Ok(secs) if secs <= PRESIGNED_EXPIRES_MAX_SECS => {}
            _ => {
                return Err(s3_error!(
                    AuthorizationQueryParametersError,
                    "X-Amz-Expires must be a number of seconds from 1 to {PRESIGNED_EXPIRES_MAX_SECS} (seven days), not {e:?}"
                ));
            }
        }
    }
    Ok(())
}

/// A refusal of the rights model as S3 reports it.
fn denied(d: strata_names::Denied) -> s3s::S3Error {
    let msg = d.to_string();
    let code = match d {
        strata_names::Denied::NoSuchKey(_) => s3s::S3ErrorCode::InvalidAccessKeyId,
        strata_names::Denied::Expired { .. } => s3s::S3ErrorCode::ExpiredToken,
        strata_names::Denied::Missing { .. } => s3s::S3ErrorCode::AccessDenied,
    };
    s3s::S3Error::with_message(code, msg)
}

/// Grants and public buckets, and the signature's scope.
pub struct KeyAccess {
    names: Arc<dyn NameIndex>,
    region: String,
    clock: Arc<dyn strata_types::Clock>,
}

impl KeyAccess {
    /// Over `names`, for a service in `region`, deciding expiry by `clock`.
    pub fn new(names: Arc<dyn NameIndex>, region: String, clock: Arc<dyn strata_types::Clock>) -> Self {
        Self { names, region, clock }
    }
}

#[async_trait::async_trait]
impl S3Access for KeyAccess {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_some()
            && let Some(scope) = scope_of(cx.headers(), cx.uri().query())
        {
            check_scope(&scope, &self.region)?;
        }
        let source_ip = cx.extensions_mut().get::<std::net::SocketAddr>().map(|a| a.ip());
        let op = cx.s3_op().name();
        let (bucket, key) = match cx.s3_path() {
            S3Path::Root => (None, None),
            S3Path::Bucket { bucket } => (Some(bucket.to_string()), None),
            S3Path::Object { bucket, key } => (Some(bucket.to_string()), Some(key.to_string())),
        };
        let who = cx.credentials().map(|c| c.access_key.clone());
        if let Some(w) = &who {
            crate::cause::set_who(w);
        }
        let prefix = cx.uri().query().and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "prefix").map(|(_, v)| v.into_owned()));
        strata_names::read(&*self.names, |s| {
            // The bucket policy first: an explicit Deny wins over every
            // grant, an Allow grants what the grants would not.
            let verdict = match bucket.as_deref().and_then(|b| s.bucket_doc(b, crate::policy::DOC).map(|d| (b, d))) {
                None => crate::policy::Verdict::Silent,
                Some((b, doc)) => {
                    let action = crate::policy::action_of(op);
                    let resource = match &key {
                        Some(k) => format!("arn:aws:s3:::{b}/{k}"),
                        None => format!("arn:aws:s3:::{b}"),
                    };
                    let r = crate::policy::Request { who: who.as_deref(), action: &action, resource: &resource, source_ip, prefix: prefix.as_deref() };
                    // A stored policy was checked when it was put.
                    crate::policy::Policy::parse(doc, b).map_or(crate::policy::Verdict::Silent, |p| p.evaluate(&r))
                }
            };
            // An admin key can always manage the policy itself, so a
            // policy cannot lock every key out of its bucket.
            let manages_policy = op.ends_with("BucketPolicy") && who.as_deref().and_then(|w| s.keys.get(w)).is_some_and(|k| k.admin);
            if verdict == crate::policy::Verdict::Deny && !manages_policy {
                return Err(s3_error!(AccessDenied, "{op} is denied by the bucket policy"));
            }
            // What the bucket's or the object's ACL grants (nothing where
            // ACLs are off), asked only when nothing else allows the request.
            let acl = |who: Option<&str>| bucket.as_deref().is_some_and(|b| crate::acl::allows(s, op, b, key.as_deref(), who));
            let Some(who) = who else {
                // Anonymous: what the policy and the ACLs allow, and reads of a public bucket.
                let public = bucket.as_deref().and_then(|b| s.buckets.get(b)).is_some_and(|b| b.public);
                return if verdict == crate::policy::Verdict::Allow || (public && is_read(op) && op != "ListBuckets") || acl(None) {
                    Ok(())
                } else {
                    Err(s3_error!(AccessDenied, "anonymous {op} is not allowed here: sign the request with an access key"))
                };
            };
            let now = self.clock.now_ms();
            s.identity(&who, now).map_err(denied)?;
            if verdict == crate::policy::Verdict::Allow {
                return Ok(());
            }
            let Some(bucket) = bucket.as_deref() else { return Ok(()) }; // ListBuckets filters by grant itself.
            if op == "CreateBucket" || !s.buckets.contains_key(bucket) {
                // Creating gives the creator its grant; a missing bucket
                // gets its NoSuchBucket from the operation.
                return Ok(());
            }
            let right = if is_read(op) { strata_names::Right::BucketRead(bucket) } else { strata_names::Right::BucketWrite(bucket) };
            match s.check(&who, right, now) {
                Err(strata_names::Denied::Missing { .. }) if acl(Some(&who)) => Ok(()),
                r => r.map_err(denied),
            }
        })
    }
}

/// Virtual-host-style addressing for the configured base domains;
/// everything else (IP addresses, localhost) is path-style.
pub struct VirtualHosts(Vec<String>);

impl VirtualHosts {
    /// For `domains` (may be empty).
    pub fn new(domains: Vec<String>) -> Self {
        Self(domains)
    }
}

impl S3Host for VirtualHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        let name = host.rsplit_once(':').filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit())).map_or(host, |(h, _)| h);
        for d in &self.0 {
            if name == d {
                return Ok(VirtualHost::new(host));
            }
            if let Some(bucket) = name.strip_suffix(d.as_str()).and_then(|h| h.strip_suffix('.'))
                && !bucket.is_empty()
            {
                return Ok(VirtualHost::new(host).with_bucket(bucket));
            }
        }
        Ok(VirtualHost::new(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_hosts_only_for_configured_domains() {
        let h = VirtualHosts::new(vec!["s3.strata.test".into()]);
        assert_eq!(h.parse_host_header("photos.s3.strata.test:8081").unwrap().bucket(), Some("photos"));
        assert_eq!(h.parse_host_header("s3.strata.test:8081").unwrap().bucket(), None);
        assert_eq!(h.parse_host_header("127.0.0.1:8081").unwrap().bucket(), None);
        assert_eq!(h.parse_host_header("localhost").unwrap().bucket(), None);
        assert!(is_read("GetObject") && is_read("ListObjectsV2") && !is_read("PutObject") && !is_read("DeleteObjects"));
    }

    #[test]
    fn the_credential_scope_must_name_this_region_and_s3_and_presigned_urls_last_at_most_a_week() {
        let mut h = http::HeaderMap::new();
        let auth =
            |region: &str, service: &str| format!("AWS4-HMAC-SHA256 Credential=AK/20261125/{region}/{service}/aws4_request, SignedHeaders=host, Signature=00");
        h.insert(http::header::AUTHORIZATION, auth("us-east-1", "s3").parse().unwrap());
        assert!(check_scope(&scope_of(&h, None).unwrap(), "us-east-1").is_ok());
        let err = check_scope(&scope_of(&h, None).unwrap(), "eu-west-1").unwrap_err();
        assert_eq!(err.code(), &s3s::S3ErrorCode::AuthorizationHeaderMalformed);
        h.insert(http::header::AUTHORIZATION, auth("us-east-1", "sqs").parse().unwrap());
        assert!(check_scope(&scope_of(&h, None).unwrap(), "us-east-1").is_err());

        let q = |expires: &str| {
            format!(
                "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20261125%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Expires={expires}&X-Amz-Signature=00"
            )
        };
        let none = http::HeaderMap::new();
        assert!(check_scope(&scope_of(&none, Some(&q("604800"))).unwrap(), "us-east-1").is_ok());
        for bad in ["604801", "999999999", "-1", "x"] {
            let err = check_scope(&scope_of(&none, Some(&q(bad))).unwrap(), "us-east-1").unwrap_err();
            assert_eq!(err.code(), &s3s::S3ErrorCode::AuthorizationQueryParametersError, "{bad}");
        }
        assert!(check_scope(&scope_of(&none, Some(&q("60"))).unwrap(), "ap-south-1").is_err());
        assert!(scope_of(&none, Some("list-type=2")).is_none());
        assert!(scope_of(&none, None).is_none());
    }
}
