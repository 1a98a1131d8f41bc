//! Who may do what: SigV4 secrets from the name index's access keys, grants
//! per bucket, anonymous reads of public buckets, and virtual hosts.

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

/// Grants and public buckets.
pub struct KeyAccess(Arc<dyn NameIndex>);

impl KeyAccess {
    /// Over `names`.
    pub fn new(names: Arc<dyn NameIndex>) -> Self {
        Self(names)
    }
}

#[async_trait::async_trait]
impl S3Access for KeyAccess {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let op = cx.s3_op().name();
        let bucket = match cx.s3_path() {
            S3Path::Root => None,
            S3Path::Bucket { bucket } | S3Path::Object { bucket, .. } => Some(bucket.to_string()),
        };
        let who = cx.credentials().map(|c| c.access_key.clone());
        strata_names::read(&*self.0, |s| {
            let Some(who) = who else {
                // Anonymous: reads of a public bucket, nothing else.
                let public = bucket.as_deref().and_then(|b| s.buckets.get(b)).is_some_and(|b| b.public);
                return if public && is_read(op) && op != "ListBuckets" {
                    Ok(())
                } else {
                    Err(s3_error!(AccessDenied, "anonymous {op} is not allowed here: sign the request with an access key"))
                };
            };
            let key = s.keys.get(&who).ok_or_else(|| s3_error!(InvalidAccessKeyId))?;
            let Some(bucket) = bucket else { return Ok(()) }; // ListBuckets filters by grant itself.
            if op == "CreateBucket" || !s.buckets.contains_key(&bucket) {
                // Creating gives the creator its grant; a missing bucket
                // gets its NoSuchBucket from the operation.
                return Ok(());
            }
            let g = key.grant(&bucket);
            let ok = if is_read(op) { g.read } else { g.write };
            if ok {
                Ok(())
            } else {
                Err(s3_error!(AccessDenied, "access key {who} has no {} grant on bucket {bucket}", if is_read(op) { "read" } else { "write" }))
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
}
