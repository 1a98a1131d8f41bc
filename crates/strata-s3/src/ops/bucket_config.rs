//! Bucket configuration kept as the bucket's documents in the names: CORS
//! rules (enforced by `cors` and the endpoint), tags, and ownership
//! controls (Strata's buckets own every object, S3's `BucketOwnerEnforced`;
//! the other settings would make ACLs decide ownership, which Strata does
//! not do, so they are refused rather than stored and ignored).

use super::*;

const TAGGING: &str = "tagging";

impl StrataS3 {
    pub(super) fn doc(&self, bucket: &str, kind: &str) -> Result<Option<String>, S3Error> {
        strata_names::read(&*self.names, |s| s.bucket(bucket).map(|_| s.bucket_doc(bucket, kind).map(str::to_owned))).map_err(name_err)
    }

    pub(super) async fn set_doc(&self, bucket: String, kind: &str, doc: Option<String>) -> Result<(), S3Error> {
        self.names.apply(NameOp::SetBucketDoc { bucket, kind: kind.to_owned(), doc }).await.map(|_| ()).map_err(name_err)
    }

    pub(super) async fn do_put_bucket_cors(&self, i: PutBucketCorsInput) -> S3Result<S3Response<PutBucketCorsOutput>> {
        self.doc(&i.bucket, crate::cors::DOC)?;
        let rules = crate::cors::rules_in(&i.cors_configuration.cors_rules)?;
        let doc = serde_json::to_string(&rules).map_err(|e| s3_error!(InternalError, "encoding CORS rules: {e}"))?;
        self.set_doc(i.bucket, crate::cors::DOC, Some(doc)).await?;
        ok(PutBucketCorsOutput::default())
    }

    pub(super) fn do_get_bucket_cors(&self, i: GetBucketCorsInput) -> S3Result<S3Response<GetBucketCorsOutput>> {
        let doc =
            self.doc(&i.bucket, crate::cors::DOC)?.ok_or_else(|| s3_error!(NoSuchCORSConfiguration, "bucket {:?} has no CORS configuration", i.bucket))?;
        let rules: Vec<crate::cors::Rule> = serde_json::from_str(&doc).map_err(|e| s3_error!(InternalError, "stored CORS rules: {e}"))?;
        ok(GetBucketCorsOutput { cors_rules: Some(crate::cors::rules_out(&rules)) })
    }

    pub(super) async fn do_delete_bucket_cors(&self, i: DeleteBucketCorsInput) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        self.doc(&i.bucket, crate::cors::DOC)?;
        self.set_doc(i.bucket, crate::cors::DOC, None).await?;
        ok(DeleteBucketCorsOutput::default())
    }

    pub(super) async fn do_put_bucket_tagging(&self, i: PutBucketTaggingInput) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        self.doc(&i.bucket, TAGGING)?;
        let tags = crate::tags::bucket_from_set(&i.tagging.tag_set)?;
        let doc = serde_json::to_string(&tags).map_err(|e| s3_error!(InternalError, "encoding tags: {e}"))?;
        self.set_doc(i.bucket, TAGGING, Some(doc)).await?;
        ok(PutBucketTaggingOutput::default())
    }

    pub(super) fn do_get_bucket_tagging(&self, i: GetBucketTaggingInput) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let doc = self.doc(&i.bucket, TAGGING)?.ok_or_else(|| s3_error!(NoSuchTagSet, "bucket {:?} has no tags", i.bucket))?;
        let tags: Vec<(String, String)> = serde_json::from_str(&doc).map_err(|e| s3_error!(InternalError, "stored tags: {e}"))?;
        ok(GetBucketTaggingOutput { tag_set: crate::tags::to_set(&tags) })
    }

    pub(super) async fn do_delete_bucket_tagging(&self, i: DeleteBucketTaggingInput) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        self.doc(&i.bucket, TAGGING)?;
        self.set_doc(i.bucket, TAGGING, None).await?;
        ok(DeleteBucketTaggingOutput::default())
    }

    pub(super) async fn do_put_bucket_policy(&self, i: PutBucketPolicyInput) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        self.doc(&i.bucket, crate::policy::DOC)?;
        crate::policy::Policy::parse(&i.policy, &i.bucket)?;
        self.set_doc(i.bucket, crate::policy::DOC, Some(i.policy)).await?;
        ok(PutBucketPolicyOutput::default())
    }

    pub(super) fn do_get_bucket_policy(&self, i: GetBucketPolicyInput) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        let policy = self.doc(&i.bucket, crate::policy::DOC)?.ok_or_else(|| s3_error!(NoSuchBucketPolicy, "bucket {:?} has no policy", i.bucket))?;
        ok(GetBucketPolicyOutput { policy: Some(policy) })
    }

    pub(super) async fn do_delete_bucket_policy(&self, i: DeleteBucketPolicyInput) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        self.doc(&i.bucket, crate::policy::DOC)?;
        self.set_doc(i.bucket, crate::policy::DOC, None).await?;
        ok(DeleteBucketPolicyOutput::default())
    }

    pub(super) async fn do_put_bucket_encryption(&self, i: PutBucketEncryptionInput) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
        self.doc(&i.bucket, crate::sse::DEFAULT_DOC)?;
        let rule = match i.server_side_encryption_configuration.rules.as_slice() {
            [r] => r,
            rules => return Err(s3_error!(MalformedXML, "a default encryption configuration holds exactly one rule, not {}", rules.len())),
        };
        let Some(by_default) = &rule.apply_server_side_encryption_by_default else {
            return Err(s3_error!(MalformedXML, "the rule has no ApplyServerSideEncryptionByDefault"));
        };
        let default = strata_names::read(&*self.names, |s| {
            crate::sse::BucketDefault::from_rule(
                by_default.sse_algorithm.as_str(),
                by_default.kms_master_key_id.as_deref(),
                rule.bucket_key_enabled.unwrap_or(false),
                |id| s.kms.contains_key(id),
            )
        })?;
        let doc = serde_json::to_string(&default).map_err(|e| s3_error!(InternalError, "encoding the default encryption: {e}"))?;
        self.set_doc(i.bucket, crate::sse::DEFAULT_DOC, Some(doc)).await?;
        ok(PutBucketEncryptionOutput::default())
    }

    pub(super) fn do_get_bucket_encryption(&self, i: GetBucketEncryptionInput) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
        self.doc(&i.bucket, crate::sse::DEFAULT_DOC)?;
        let d = self.default_encryption(&i.bucket).ok_or_else(|| {
            let mut e = s3_error!(
                ServerSideEncryptionConfigurationNotFoundError,
                "the bucket {:?} has no default encryption: objects are stored as each request asks",
                i.bucket
            );
            // S3 answers it with 404 (s3s's table says 400).
            e.set_status_code(http::StatusCode::NOT_FOUND);
            e
        })?;
        let rule = ServerSideEncryptionRule {
            apply_server_side_encryption_by_default: Some(ServerSideEncryptionByDefault {
                sse_algorithm: ServerSideEncryption::from(d.algorithm),
                kms_master_key_id: d.kms_key_id,
            }),
            bucket_key_enabled: Some(d.bucket_key),
        };
        ok(GetBucketEncryptionOutput { server_side_encryption_configuration: Some(ServerSideEncryptionConfiguration { rules: vec![rule] }) })
    }

    pub(super) async fn do_delete_bucket_encryption(&self, i: DeleteBucketEncryptionInput) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
        self.doc(&i.bucket, crate::sse::DEFAULT_DOC)?;
        self.set_doc(i.bucket, crate::sse::DEFAULT_DOC, None).await?;
        ok(DeleteBucketEncryptionOutput::default())
    }
}
