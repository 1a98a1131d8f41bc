//! ACL operations (Put/GetBucketAcl, Put/GetObjectAcl, the ACL asked on a
//! write) and ownership controls, which switch ACLs off. What an ACL
//! grants is decided in `crate::acl`, asked by the access check.

use super::*;
use crate::acl::{Acl, Asked};

impl StrataS3 {
    /// The ACL a request asks for, checked against the bucket's ownership:
    /// a bucket with ACLs disabled refuses one that grants anyone beside
    /// the owner (S3's AccessControlListNotSupported).
    pub(super) fn asked_acl(&self, bucket: &str, asked: &Asked<'_>, on_bucket: bool) -> S3Result<Option<Acl>> {
        strata_names::read(&*self.names, |s| {
            if s.buckets.contains_key(bucket) && !crate::acl::enabled(s, bucket) && asked.grants_others(on_bucket) {
                return Err(s3_error!(
                    AccessControlListNotSupported,
                    "the bucket {bucket:?} does not allow ACLs (its object ownership is BucketOwnerEnforced)"
                ));
            }
            asked.acl(on_bucket, |k| s.keys.contains_key(k))
        })
    }

    /// Stores an object's ACL asked on its write in `meta`.
    pub(super) fn acl_on_write(&self, bucket: &str, asked: &Asked<'_>, meta: &mut Vec<(String, String)>) -> S3Result<()> {
        if let Some(acl) = self.asked_acl(bucket, asked, false)? {
            *meta = crate::acl::replaced(meta, &acl);
        }
        Ok(())
    }

    pub(super) async fn do_put_bucket_acl(&self, i: PutBucketAclInput) -> S3Result<S3Response<PutBucketAclOutput>> {
        let asked = Asked { canned: i.acl.as_ref().map(|a| a.as_str()), headers: crate::acl::grant_headers!(i), body: i.access_control_policy.as_ref() };
        strata_names::read(&*self.names, |s| s.bucket(&i.bucket).map(|_| ())).map_err(name_err)?;
        let acl = self
            .asked_acl(&i.bucket, &asked, true)?
            .ok_or_else(|| s3_error!(MissingSecurityHeader, "PutBucketAcl needs x-amz-acl, x-amz-grant-* headers or an AccessControlPolicy body"))?;
        self.set_bucket_acl(i.bucket, &acl).await?;
        ok(PutBucketAclOutput::default())
    }

    /// Replaces a bucket's ACL; the `public` switch (`strata bucket
    /// public`) is cleared with it, so the ACL alone says who may read.
    pub(super) async fn set_bucket_acl(&self, bucket: String, acl: &Acl) -> S3Result<()> {
        if strata_names::read(&*self.names, |s| s.buckets.get(&bucket).is_some_and(|b| b.public)) {
            self.names.apply(NameOp::SetPublic { bucket: bucket.clone(), public: false }).await.map_err(name_err)?;
        }
        let op = NameOp::SetBucketDoc { bucket, kind: crate::acl::DOC.to_owned(), doc: acl.stored() };
        self.names.apply(op).await.map_err(name_err)?;
        Ok(())
    }

    pub(super) fn do_get_bucket_acl(&self, i: GetBucketAclInput) -> S3Result<S3Response<GetBucketAclOutput>> {
        let (public, mut acl) =
            strata_names::read(&*self.names, |s| s.bucket(&i.bucket).map(|b| (b.public, crate::acl::of_bucket(s, &i.bucket)))).map_err(name_err)?;
        // A public bucket (`strata bucket public`) is readable by everyone.
        if public && !acl.0.contains(&(crate::acl::Grantee::AllUsers, crate::acl::Perm::Read)) {
            acl.0.push((crate::acl::Grantee::AllUsers, crate::acl::Perm::Read));
        }
        let owner = owner();
        ok(GetBucketAclOutput { grants: Some(acl.to_grants(&owner)), owner: Some(owner) })
    }

    pub(super) async fn do_put_object_acl(&self, i: PutObjectAclInput) -> S3Result<S3Response<PutObjectAclOutput>> {
        if i.grant_write.is_some() {
            return Err(s3_error!(InvalidArgument, "x-amz-grant-write does not apply to an object"));
        }
        let asked = Asked { canned: i.acl.as_ref().map(|a| a.as_str()), headers: crate::acl::grant_headers!(i), body: i.access_control_policy.as_ref() };
        self.current_version(&i.bucket, &i.key, i.version_id.as_deref())?;
        let acl = self
            .asked_acl(&i.bucket, &asked, false)?
            .ok_or_else(|| s3_error!(MissingSecurityHeader, "PutObjectAcl needs x-amz-acl, x-amz-grant-* headers or an AccessControlPolicy body"))?;
        crate::cause::set_kind("s3:ObjectAcl:Put");
        self.rewrite_meta(&i.bucket, &i.key, "ACL grants", |meta| crate::acl::replaced(meta, &acl)).await?;
        ok(PutObjectAclOutput::default())
    }

    pub(super) fn do_get_object_acl(&self, i: GetObjectAclInput) -> S3Result<S3Response<GetObjectAclOutput>> {
        let o = self.object_version(&i.bucket, &i.key, i.version_id.as_deref())?;
        let owner = owner();
        ok(GetObjectAclOutput { grants: Some(crate::acl::of_object(&o.meta).to_grants(&owner)), owner: Some(owner), ..Default::default() })
    }

    /// An object's ACL is set on its current version: a version id, if
    /// given, must name it.
    fn current_version(&self, bucket: &str, key: &str, version_id: Option<&str>) -> S3Result<()> {
        let o = self.object(bucket, key)?;
        match version_id {
            Some(v) if v != strata_names::version_id(&o) => {
                Err(s3_error!(NotImplemented, "an ACL is set on the current version of {key:?} only, not on version {v:?}"))
            }
            _ => Ok(()),
        }
    }

    pub(super) async fn do_put_bucket_ownership_controls(&self, i: PutBucketOwnershipControlsInput) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        self.doc(&i.bucket, crate::acl::OWNERSHIP_DOC)?;
        let setting = match i.ownership_controls.rules.as_slice() {
            [r] => ownership(r.object_ownership.as_str())?,
            rules => return Err(s3_error!(MalformedXML, "ownership controls hold exactly one rule, not {}", rules.len())),
        };
        self.set_doc(i.bucket, crate::acl::OWNERSHIP_DOC, Some(setting.to_owned())).await?;
        ok(PutBucketOwnershipControlsOutput::default())
    }

    pub(super) fn do_get_bucket_ownership_controls(&self, i: GetBucketOwnershipControlsInput) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
        let setting = self
            .doc(&i.bucket, crate::acl::OWNERSHIP_DOC)?
            .ok_or_else(|| s3_error!(OwnershipControlsNotFoundError, "the bucket {:?} has no ownership controls (ACLs are enabled)", i.bucket))?;
        let rule = OwnershipControlsRule { object_ownership: ObjectOwnership::from(setting) };
        ok(GetBucketOwnershipControlsOutput { ownership_controls: Some(OwnershipControls { rules: vec![rule] }) })
    }

    pub(super) async fn do_delete_bucket_ownership_controls(
        &self,
        i: DeleteBucketOwnershipControlsInput,
    ) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
        self.doc(&i.bucket, crate::acl::OWNERSHIP_DOC)?;
        self.set_doc(i.bucket, crate::acl::OWNERSHIP_DOC, None).await?;
        ok(DeleteBucketOwnershipControlsOutput::default())
    }
}

/// An object-ownership setting S3 knows.
pub(super) fn ownership(s: &str) -> S3Result<&'static str> {
    [ObjectOwnership::BUCKET_OWNER_ENFORCED, ObjectOwnership::BUCKET_OWNER_PREFERRED, ObjectOwnership::OBJECT_WRITER]
        .into_iter()
        .find(|o| *o == s)
        .ok_or_else(|| s3_error!(InvalidArgument, "object ownership {s:?} is not one of BucketOwnerEnforced, BucketOwnerPreferred, ObjectWriter"))
}
