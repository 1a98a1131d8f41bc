//! Lifecycle expiration: rules in and out of S3's form, and the blob TTLs
//! that follow a change of rules. In a versioned bucket no blob gets a TTL:
//! expiration there adds a delete marker (see `crate::sweep_expired`).

use super::*;

impl StrataS3 {
    /// Sets a bucket's lifecycle rules and brings its blobs' TTLs in line,
    /// in an order that never lets a blob expire before its name, even if
    /// the process dies halfway: TTLs that grow (or go) change first, and
    /// if one of those fails the rules stay as they were; then the rules;
    /// then the TTLs that shrink, best effort (a blob that outlives its
    /// name is only late to go: the expiry sweeper frees it with the name).
    /// Only blobs whose expiry changes are written.
    pub(crate) async fn set_lifecycle(&self, bucket: &str, rules: Vec<ExpiryRule>) -> Result<(), S3Error> {
        let now = self.now_ms();
        let proposed = strata_names::Bucket { lifecycle: rules.clone(), ..strata_names::Bucket::default() };
        // Live objects: (key, blob) -> (expiry now, expiry under the new rules).
        // (A versioned bucket's objects never expire on their own.)
        let before: HashMap<(String, BlobId), (u64, u64)> = strata_names::read(&*self.names, |s| {
            let versioned = s.versioning.contains_key(bucket);
            s.bucket(bucket).map(|b| {
                b.objects
                    .iter()
                    .filter(|(_, o)| !o.expired(now))
                    .map(|(k, o)| ((k.clone(), o.blob), (o.expiry_ms, if versioned { 0 } else { proposed.expiry_for(k, o.modified_ms) })))
                    .collect()
            })
        })
        .map_err(name_err)?;
        let grows = |old: u64, new: u64| old != 0 && (new == 0 || new > old);
        let grow: Vec<(BlobId, u64)> = before.iter().filter(|(_, (old, new))| grows(*old, *new)).map(|((_, blob), (_, new))| (*blob, *new)).collect();
        let failed = self.set_expiries(grow).await;
        if failed > 0 {
            return Err(s3_error!(InternalError, "could not extend the expiry of {failed} objects' blobs; the lifecycle rules were not changed, try again"));
        }
        self.names.apply(NameOp::SetLifecycle { bucket: bucket.to_owned(), rules }).await.map_err(name_err)?;
        // Shrink; and objects written meanwhile (not seen above) get the
        // expiry their names now have, whichever way it moved.
        let rest: Vec<(BlobId, u64)> = strata_names::read(&*self.names, |s| {
            s.buckets.get(bucket).map_or_else(Vec::new, |b| {
                b.objects
                    .iter()
                    .filter(|(k, o)| match before.get(&((*k).clone(), o.blob)) {
                        None => !o.expired(now),
                        Some((old, _)) => o.expiry_ms != *old && !grows(*old, o.expiry_ms),
                    })
                    .map(|(_, o)| (o.blob, o.expiry_ms))
                    .collect()
            })
        });
        let late = self.set_expiries(rest).await;
        if late > 0 {
            tracing::warn!(bucket, blobs = late, "some blobs keep a later expiry than their objects; the expiry sweeper frees them with their names");
        }
        Ok(())
    }

    /// Sets each blob's expiry (ms since the epoch, 0 = never), a few at a
    /// time; returns how many failed. A blob already gone (deleted,
    /// expired, overwritten meanwhile) is not a failure.
    pub(super) async fn set_expiries(&self, blobs: Vec<(BlobId, u64)>) -> usize {
        let now = self.now_ms();
        futures_util::stream::iter(blobs)
            .map(|(blob, expiry)| async move {
                let ttl = (expiry != 0).then(|| expiry.saturating_sub(now).max(1));
                match self.router.update_ttl(blob, ttl).await {
                    Ok(()) | Err(RouterError::NotFound | RouterError::Deleted | RouterError::Expired) => true,
                    Err(e) => {
                        tracing::warn!(%blob, error = %e, "could not apply a lifecycle rule to a blob");
                        false
                    }
                }
            })
            .buffer_unordered(TTL_UPDATES_IN_FLIGHT)
            .filter(|ok| futures_util::future::ready(!ok))
            .count()
            .await
    }
}

/// Blob TTL updates a lifecycle change keeps in flight.
const TTL_UPDATES_IN_FLIGHT: usize = 32;

pub(super) fn rules_in(cfg: Option<BucketLifecycleConfiguration>) -> Result<Vec<ExpiryRule>, S3Error> {
    let mut out = Vec::new();
    for (i, r) in cfg.map(|c| c.rules).unwrap_or_default().into_iter().enumerate() {
        if r.transitions.as_ref().is_some_and(|t| !t.is_empty()) || r.noncurrent_version_transitions.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(s3_error!(NotImplemented, "lifecycle rule {}: only Expiration is supported, not transitions", i + 1));
        }
        let Some(exp) = r.expiration else {
            return Err(s3_error!(NotImplemented, "lifecycle rule {}: only Expiration is supported", i + 1));
        };
        let prefix =
            r.filter.as_ref().and_then(|f| f.prefix.clone().or_else(|| f.and.as_ref().and_then(|a| a.prefix.clone()))).or(r.prefix).unwrap_or_default();
        let days = match exp.days {
            Some(d) if d <= 0 => return Err(s3_error!(InvalidArgument, "lifecycle rule {}: Days must be a positive integer", i + 1)),
            Some(d) => Some(d as u32),
            None => None,
        };
        let date_ms = exp.date.as_ref().map(ms);
        if days.is_none() && date_ms.is_none() {
            return Err(s3_error!(MalformedXML, "lifecycle rule {}: Expiration needs Days or Date", i + 1));
        }
        out.push(ExpiryRule { id: r.id.unwrap_or_else(|| format!("rule-{}", i + 1)), prefix, days, date_ms, enabled: r.status.as_str() == "Enabled" });
    }
    Ok(out)
}

pub(super) fn rule_out(r: &ExpiryRule) -> LifecycleRule {
    LifecycleRule {
        id: Some(r.id.clone()),
        status: ExpirationStatus::from(if r.enabled { "Enabled".to_owned() } else { "Disabled".to_owned() }),
        filter: Some(LifecycleRuleFilter { prefix: Some(r.prefix.clone()), ..Default::default() }),
        expiration: Some(LifecycleExpiration { days: r.days.map(|d| d as i32), date: r.date_ms.map(ts), ..Default::default() }),
        abort_incomplete_multipart_upload: None,
        noncurrent_version_expiration: None,
        noncurrent_version_transitions: None,
        prefix: None,
        transitions: None,
    }
}
