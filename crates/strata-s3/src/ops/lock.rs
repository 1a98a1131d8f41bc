//! Object lock: a bucket's lock configuration and default retention, the
//! retention and legal hold of each version, and the lock headers of
//! writes. The names enforce it (`strata-names`' `versions` module): a
//! version under a legal hold, a COMPLIANCE retention or a GOVERNANCE one
//! not bypassed cannot be deleted, and retentions only grow stronger.
//! Bypassing GOVERNANCE retention takes the write grant on the bucket.

use super::*;
use strata_names::{Lock, LockMode, ObjectLock};

const DAY_MS: u64 = 86_400_000;

fn mode_of(s: &str) -> Result<LockMode, S3Error> {
    LockMode::parse(s).ok_or_else(|| s3_error!(InvalidArgument, "unknown object lock mode {s:?} (GOVERNANCE or COMPLIANCE)"))
}

fn no_lock(bucket: &str) -> S3Error {
    s3_error!(InvalidRequest, "bucket {bucket:?} is missing an object lock configuration")
}

impl StrataS3 {
    /// The bucket's object lock, if enabled.
    fn lock_of(&self, bucket: &str) -> Option<Lock> {
        strata_names::read(&*self.names, |s| s.versioning.get(bucket).and_then(|v| v.lock.clone()))
    }

    /// The lock a new object gets: what the request's headers ask
    /// (checked), else the bucket's default retention.
    pub(crate) fn lock_for_write(
        &self,
        bucket: &str,
        mode: Option<&ObjectLockMode>,
        until: Option<&Timestamp>,
        hold: Option<&ObjectLockLegalHoldStatus>,
        now_ms: u64,
    ) -> Result<ObjectLock, S3Error> {
        let lock = self.lock_of(bucket);
        if lock.is_none() {
            if mode.is_some() || until.is_some() || hold.is_some() {
                return Err(no_lock(bucket));
            }
            return Ok(ObjectLock::default());
        }
        let retention = match (mode, until) {
            (Some(m), Some(u)) => {
                let until = ms(u);
                if until <= now_ms {
                    return Err(s3_error!(InvalidArgument, "the retain-until date must be in the future"));
                }
                Some((mode_of(m.as_str())?, until))
            }
            (None, None) => lock.and_then(|l| l.default).map(|(m, days)| (m, now_ms + u64::from(days) * DAY_MS)),
            _ => return Err(s3_error!(InvalidArgument, "x-amz-object-lock-mode and x-amz-object-lock-retain-until-date must be given together")),
        };
        let legal_hold = match hold.map(|h| h.as_str()) {
            None | Some(ObjectLockLegalHoldStatus::OFF) => false,
            Some(ObjectLockLegalHoldStatus::ON) => true,
            Some(other) => return Err(s3_error!(InvalidArgument, "legal hold status {other:?} is not ON or OFF")),
        };
        Ok(ObjectLock { retention, legal_hold })
    }

    pub(super) async fn do_put_object_lock_configuration(&self, i: PutObjectLockConfigurationInput) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        strata_names::read(&*self.names, |s| s.bucket(&i.bucket).map(|_| ())).map_err(name_err)?;
        let config = i.object_lock_configuration.ok_or_else(|| s3_error!(MalformedXML, "no object lock configuration"))?;
        if config.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some(ObjectLockEnabled::ENABLED) {
            return Err(s3_error!(MalformedXML, "ObjectLockEnabled must be Enabled"));
        }
        let default = match config.rule.and_then(|r| r.default_retention) {
            None => None,
            Some(d) => {
                let mode = mode_of(d.mode.as_ref().map(|m| m.as_str()).unwrap_or(""))?;
                let days = match (d.days, d.years) {
                    (Some(n), None) if n > 0 => n as u32,
                    (None, Some(y)) if y > 0 => (y as u32).saturating_mul(365),
                    _ => return Err(s3_error!(MalformedXML, "a default retention needs exactly one of Days or Years, above zero")),
                };
                Some((mode, days))
            }
        };
        self.names.apply(NameOp::SetObjectLock { bucket: i.bucket, default }).await.map_err(name_err)?;
        ok(PutObjectLockConfigurationOutput::default())
    }

    pub(super) fn do_get_object_lock_configuration(&self, i: GetObjectLockConfigurationInput) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        strata_names::read(&*self.names, |s| s.bucket(&i.bucket).map(|_| ())).map_err(name_err)?;
        let lock =
            self.lock_of(&i.bucket).ok_or_else(|| s3_error!(ObjectLockConfigurationNotFoundError, "bucket {:?} has no object lock configuration", i.bucket))?;
        let rule = lock.default.map(|(mode, days)| ObjectLockRule {
            default_retention: Some(DefaultRetention {
                days: Some(days as i32),
                mode: Some(ObjectLockRetentionMode::from(mode.as_str().to_owned())),
                years: None,
            }),
        });
        ok(GetObjectLockConfigurationOutput {
            object_lock_configuration: Some(ObjectLockConfiguration {
                object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
                rule,
            }),
        })
    }

    async fn set_lock_state(&self, op: NameOp, bucket: &str) -> Result<(), S3Error> {
        if self.lock_of(bucket).is_none() {
            strata_names::read(&*self.names, |s| s.bucket(bucket).map(|_| ())).map_err(name_err)?;
            return Err(no_lock(bucket));
        }
        self.names.apply(op).await.map(|_| ()).map_err(|e| match e {
            strata_names::NameError::NoSuchKey { .. } => s3_error!(NoSuchKey, "no such object or version"),
            e => name_err(e),
        })
    }

    pub(super) async fn do_put_object_retention(&self, i: PutObjectRetentionInput) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        let now = self.now_ms();
        let retention = match i.retention.as_ref().map(|r| (r.mode.as_ref(), r.retain_until_date.as_ref())) {
            None | Some((None, None)) => None,
            Some((Some(m), Some(u))) => {
                let until = ms(u);
                if until <= now {
                    return Err(s3_error!(InvalidArgument, "the retain-until date must be in the future"));
                }
                Some((mode_of(m.as_str())?, until))
            }
            Some(_) => return Err(s3_error!(MalformedXML, "a retention needs both Mode and RetainUntilDate")),
        };
        let op = NameOp::SetLockState {
            bucket: i.bucket.clone(),
            key: i.key,
            version_id: i.version_id,
            retention: Some(retention),
            legal_hold: None,
            bypass_governance: i.bypass_governance_retention == Some(true),
            now_ms: now,
        };
        self.set_lock_state(op, &i.bucket).await?;
        ok(PutObjectRetentionOutput::default())
    }

    pub(super) async fn do_put_object_legal_hold(&self, i: PutObjectLegalHoldInput) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        let on = match i.legal_hold.as_ref().and_then(|h| h.status.as_ref()).map(|s| s.as_str()) {
            Some(ObjectLockLegalHoldStatus::ON) => true,
            Some(ObjectLockLegalHoldStatus::OFF) => false,
            other => return Err(s3_error!(MalformedXML, "the legal hold status must be ON or OFF, not {other:?}")),
        };
        let op = NameOp::SetLockState {
            bucket: i.bucket.clone(),
            key: i.key,
            version_id: i.version_id,
            retention: None,
            legal_hold: Some(on),
            bypass_governance: false,
            now_ms: self.now_ms(),
        };
        self.set_lock_state(op, &i.bucket).await?;
        ok(PutObjectLegalHoldOutput::default())
    }

    pub(super) fn do_get_object_retention(&self, i: GetObjectRetentionInput) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        if self.lock_of(&i.bucket).is_none() {
            strata_names::read(&*self.names, |s| s.bucket(&i.bucket).map(|_| ())).map_err(name_err)?;
            return Err(no_lock(&i.bucket));
        }
        let o = self.object_version(&i.bucket, &i.key, i.version_id.as_deref())?;
        let (mode, until) = ObjectLock::of(&o.meta).retention.ok_or_else(|| s3_error!(NoSuchObjectLockConfiguration, "{:?} has no retention", i.key))?;
        ok(GetObjectRetentionOutput {
            retention: Some(ObjectLockRetention { mode: Some(ObjectLockRetentionMode::from(mode.as_str().to_owned())), retain_until_date: Some(ts(until)) }),
        })
    }

    pub(super) fn do_get_object_legal_hold(&self, i: GetObjectLegalHoldInput) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        if self.lock_of(&i.bucket).is_none() {
            strata_names::read(&*self.names, |s| s.bucket(&i.bucket).map(|_| ())).map_err(name_err)?;
            return Err(no_lock(&i.bucket));
        }
        let o = self.object_version(&i.bucket, &i.key, i.version_id.as_deref())?;
        let on = ObjectLock::of(&o.meta).legal_hold;
        ok(GetObjectLegalHoldOutput {
            legal_hold: Some(ObjectLockLegalHold {
                status: Some(ObjectLockLegalHoldStatus::from_static(if on { ObjectLockLegalHoldStatus::ON } else { ObjectLockLegalHoldStatus::OFF })),
            }),
        })
    }
}

/// The lock fields of a GET or HEAD answer about `o`.
pub(super) fn lock_out(o: &ObjectMeta) -> (Option<ObjectLockMode>, Option<Timestamp>, Option<ObjectLockLegalHoldStatus>) {
    let l = ObjectLock::of(&o.meta);
    let hold = (l != ObjectLock::default())
        .then(|| ObjectLockLegalHoldStatus::from_static(if l.legal_hold { ObjectLockLegalHoldStatus::ON } else { ObjectLockLegalHoldStatus::OFF }));
    (l.retention.map(|(m, _)| ObjectLockMode::from(m.as_str().to_owned())), l.retention.map(|(_, u)| ts(u)), hold)
}
