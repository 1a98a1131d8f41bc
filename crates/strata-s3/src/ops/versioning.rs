//! Object versioning (the names keep the versions: `strata-names`'
//! `versions` module): the bucket's status, the version id each new object
//! gets, reads of one version, and DELETE of a key (a delete marker) or of
//! one version (for good).

use super::*;
use strata_names::{Found, NULL_VERSION, VERSION_META};

/// What a DELETE did, for its answer.
pub(crate) struct Deleted {
    /// A delete marker was made, or removed.
    pub marker: bool,
    /// The version made or removed (none on a never-versioned bucket).
    pub version_id: Option<String>,
}

/// A new random version id (32 hex digits).
pub(crate) fn new_version_id() -> String {
    use rand::RngCore;
    let mut raw = [0u8; 16];
    rand::rng().fill_bytes(&mut raw);
    hex::encode(raw)
}

impl StrataS3 {
    /// Whether `bucket` ever had versioning, and if so whether it is on.
    fn versioning(&self, bucket: &str) -> Option<bool> {
        strata_names::read(&*self.names, |s| s.versioning.get(bucket).map(|v| v.enabled))
    }

    /// Gives a new object of `bucket` its version id in `meta` (dropping
    /// one copied from elsewhere): a new one while versioning is enabled,
    /// `null` (no entry) otherwise. Returns the id for the answer (none
    /// for a bucket never versioned).
    pub(crate) fn stamp_version(&self, bucket: &str, meta: &mut Vec<(String, String)>) -> Option<String> {
        meta.retain(|(k, _)| k != VERSION_META);
        match self.versioning(bucket)? {
            true => {
                let id = new_version_id();
                meta.push((VERSION_META.to_owned(), id.clone()));
                Some(id)
            }
            false => Some(NULL_VERSION.to_owned()),
        }
    }

    /// The object a request names: the current one, or version `version`
    /// (a delete marker answers 405, an unknown version 404; on a bucket
    /// never versioned, only `null` names anything).
    pub(crate) fn object_version(&self, bucket: &str, key: &str, version: Option<&str>) -> Result<ObjectMeta, S3Error> {
        let Some(id) = version else { return self.object(bucket, key) };
        let now = self.now_ms();
        strata_names::read(&*self.names, |s| {
            s.bucket(bucket).map_err(name_err)?;
            if !s.versioning.contains_key(bucket) && id != NULL_VERSION {
                return Err(s3_error!(InvalidArgument, "invalid version id {id:?}: this bucket was never versioned, each object's is \"null\""));
            }
            match s.version(bucket, key, id) {
                Found::Object(o) if !o.expired(now) => Ok(o.clone()),
                Found::Marker => Err(s3_error!(MethodNotAllowed, "version {id:?} of {key:?} is a delete marker")),
                _ => Err(s3_error!(NoSuchVersion, "no version {id:?} of {key:?} in bucket {bucket:?}")),
            }
        })
    }

    /// S3's DELETE of `key` (a delete marker in a versioned bucket) or of
    /// one version of it (for good, freeing its blob).
    pub(crate) async fn delete_key(&self, bucket: &str, key: &str, version: Option<&str>, bypass_governance: bool) -> Result<Deleted, S3Error> {
        let status = self.versioning(bucket);
        if status.is_none() {
            if let Some(id) = version.filter(|v| *v != NULL_VERSION) {
                return Err(s3_error!(InvalidArgument, "invalid version id {id:?}: this bucket was never versioned, each object's is \"null\""));
            }
            self.delete_one(bucket, key).await?;
            return Ok(Deleted { marker: false, version_id: version.map(str::to_owned) });
        }
        let removes_marker = version.is_some_and(|id| strata_names::read(&*self.names, |s| s.version(bucket, key, id) == Found::Marker));
        let marker_id = if status == Some(true) { new_version_id() } else { NULL_VERSION.to_owned() };
        let op = NameOp::DeleteVersioned {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            version_id: version.map(str::to_owned),
            marker_id: marker_id.clone(),
            now_ms: self.now_ms(),
            bypass_governance,
        };
        let out = self.names.apply(op).await.map_err(name_err)?;
        self.free_outcome(out).await;
        Ok(match version {
            None => Deleted { marker: true, version_id: Some(marker_id) },
            Some(id) => Deleted { marker: removes_marker, version_id: Some(id.to_owned()) },
        })
    }

    pub(crate) async fn do_put_bucket_versioning(&self, i: PutBucketVersioningInput) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        strata_names::read(&*self.names, |s| s.bucket(&i.bucket).map(|_| ())).map_err(name_err)?;
        if i.versioning_configuration.mfa_delete.as_ref().is_some_and(|m| m.as_str() == MFADelete::ENABLED) {
            return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
        }
        let enabled = match i.versioning_configuration.status.as_ref().map(|s| s.as_str()) {
            Some(BucketVersioningStatus::ENABLED) => true,
            Some(BucketVersioningStatus::SUSPENDED) => false,
            other => return Err(s3_error!(MalformedXML, "the versioning status must be Enabled or Suspended, not {other:?}")),
        };
        // Versions are kept: the blobs of objects that would expire under
        // the bucket's lifecycle (and of open uploads' parts) lose their TTLs first (the names lose
        // their expiries with the op), or the engine would drop bytes a
        // version still names. If that fails, versioning stays off.
        let expiring: Vec<(BlobId, u64)> = strata_names::read(&*self.names, |s| {
            if s.versioning.contains_key(&i.bucket) {
                return Vec::new();
            }
            // Open uploads' parts too: completed, they become a version.
            s.buckets.get(&i.bucket).map_or_else(Vec::new, |b| {
                let objects = b.objects.values().filter(|o| o.expiry_ms != 0).map(|o| (o.blob, 0));
                objects.chain(b.uploads.values().flat_map(|u| u.parts.values()).map(|p| (p.blob, 0))).collect()
            })
        });
        let failed = self.set_expiries(expiring).await;
        if failed > 0 {
            return Err(s3_error!(InternalError, "could not keep {failed} objects' blobs from expiring; versioning was not enabled, try again"));
        }
        self.names.apply(NameOp::SetVersioning { bucket: i.bucket, enabled }).await.map_err(name_err)?;
        ok(PutBucketVersioningOutput::default())
    }

    pub(super) fn do_get_bucket_versioning(&self, i: GetBucketVersioningInput) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        strata_names::read(&*self.names, |s| s.bucket(&i.bucket).map(|_| ())).map_err(name_err)?;
        let status = self
            .versioning(&i.bucket)
            .map(|on| BucketVersioningStatus::from_static(if on { BucketVersioningStatus::ENABLED } else { BucketVersioningStatus::SUSPENDED }));
        ok(GetBucketVersioningOutput { status, ..Default::default() })
    }
}
