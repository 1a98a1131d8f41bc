//! S3 bucket notifications (Put/GetBucketNotificationConfiguration): which
//! of a bucket's events go to which change-capture target, by event type
//! and key prefix and suffix, as S3 defines them. A destination is named
//! by an ARN ending in a target's name (`arn:strata:sqs:::<target>`; any
//! ARN whose last `:` field names a configured target): the targets
//! themselves are an operator's (`strata events target add`). Stored as
//! the bucket document `notification` (`strata_events::Notification`),
//! whose presence turns capture on for the bucket.

use super::*;
use strata_events::{Notification, NotifyRule};
use strata_names::events::NOTIFICATION_DOC;

/// One destination of a configuration, whatever its kind in S3's XML.
struct Destination<'a> {
    id: Option<&'a str>,
    arn: &'a str,
    events: &'a [s3s::dto::Event],
    filter: Option<&'a NotificationConfigurationFilter>,
}

fn rule_of(d: &Destination<'_>, n: usize, targets: &std::collections::BTreeMap<String, strata_names::EventTarget>) -> Result<NotifyRule, S3Error> {
    let target = d.arn.rsplit(':').next().unwrap_or("");
    if d.arn.split(':').count() < 6 || !targets.contains_key(target) {
        return Err(s3_error!(
            InvalidArgument,
            "unable to validate the destination {:?}: name a configured event target as arn:strata:sqs:::<target> (strata events target add)",
            d.arn
        ));
    }
    if d.events.is_empty() {
        return Err(s3_error!(InvalidArgument, "a notification configuration needs at least one event type"));
    }
    let mut events = Vec::new();
    for e in d.events {
        let e: &str = e.as_ref();
        if !strata_events::valid_event_pattern(e) {
            return Err(s3_error!(InvalidArgument, "the event type {e:?} is not supported"));
        }
        events.push(e.to_owned());
    }
    let (mut prefix, mut suffix) = (None, None);
    for r in d.filter.and_then(|f| f.key.as_ref()).and_then(|k| k.filter_rules.as_ref()).into_iter().flatten() {
        let name = r.name.as_ref().map(|n| n.as_str().to_ascii_lowercase()).unwrap_or_default();
        let value = r.value.clone().unwrap_or_default();
        let slot = match name.as_str() {
            "prefix" => &mut prefix,
            "suffix" => &mut suffix,
            other => return Err(s3_error!(InvalidArgument, "filter rule name must be prefix or suffix, not {other:?}")),
        };
        if slot.replace(value).is_some() {
            return Err(s3_error!(InvalidArgument, "the filter rule {name:?} is given twice"));
        }
    }
    Ok(NotifyRule {
        id: d.id.map_or_else(|| format!("rule-{}", n + 1), str::to_owned),
        target: target.to_owned(),
        arn: d.arn.to_owned(),
        events,
        prefix: prefix.unwrap_or_default(),
        suffix: suffix.unwrap_or_default(),
    })
}

fn filter_of(r: &NotifyRule) -> Option<NotificationConfigurationFilter> {
    let rule = |name: &str, value: &str| FilterRule { name: Some(FilterRuleName::from(name.to_owned())), value: Some(value.to_owned()) };
    let mut rules = Vec::new();
    if !r.prefix.is_empty() {
        rules.push(rule(FilterRuleName::PREFIX, &r.prefix));
    }
    if !r.suffix.is_empty() {
        rules.push(rule(FilterRuleName::SUFFIX, &r.suffix));
    }
    (!rules.is_empty()).then_some(NotificationConfigurationFilter { key: Some(S3KeyFilter { filter_rules: Some(rules) }) })
}

impl StrataS3 {
    pub(super) async fn do_put_bucket_notification(
        &self,
        i: PutBucketNotificationConfigurationInput,
    ) -> S3Result<S3Response<PutBucketNotificationConfigurationOutput>> {
        self.doc(&i.bucket, NOTIFICATION_DOC)?;
        let c = &i.notification_configuration;
        if c.event_bridge_configuration.is_some() {
            return Err(s3_error!(NotImplemented, "EventBridge destinations are not supported; name an event target in a QueueConfiguration"));
        }
        let mut dests = Vec::new();
        for q in c.queue_configurations.iter().flatten() {
            dests.push(Destination { id: q.id.as_deref(), arn: &q.queue_arn, events: &q.events, filter: q.filter.as_ref() });
        }
        for t in c.topic_configurations.iter().flatten() {
            dests.push(Destination { id: t.id.as_deref(), arn: &t.topic_arn, events: &t.events, filter: t.filter.as_ref() });
        }
        for l in c.lambda_function_configurations.iter().flatten() {
            dests.push(Destination { id: l.id.as_deref(), arn: &l.lambda_function_arn, events: &l.events, filter: l.filter.as_ref() });
        }
        let targets = strata_names::read(&*self.names, |s| s.outbox.targets.clone());
        let rules = dests.iter().enumerate().map(|(n, d)| rule_of(d, n, &targets)).collect::<Result<Vec<_>, _>>()?;
        let mut ids: Vec<&str> = rules.iter().map(|r| r.id.as_str()).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(s3_error!(InvalidArgument, "two notification configurations have the same id"));
        }
        // An empty configuration turns the bucket's notifications off.
        let doc = if rules.is_empty() {
            None
        } else {
            Some(serde_json::to_string(&Notification { rules }).map_err(|e| s3_error!(InternalError, "encoding notification rules: {e}"))?)
        };
        self.set_doc(i.bucket, NOTIFICATION_DOC, doc).await?;
        ok(PutBucketNotificationConfigurationOutput::default())
    }

    pub(super) fn do_get_bucket_notification(
        &self,
        i: GetBucketNotificationConfigurationInput,
    ) -> S3Result<S3Response<GetBucketNotificationConfigurationOutput>> {
        let Some(doc) = self.doc(&i.bucket, NOTIFICATION_DOC)? else { return ok(GetBucketNotificationConfigurationOutput::default()) };
        let n: Notification = serde_json::from_str(&doc).map_err(|e| s3_error!(InternalError, "stored notification rules: {e}"))?;
        let queues = n
            .rules
            .iter()
            .map(|r| QueueConfiguration {
                id: Some(r.id.clone()),
                queue_arn: r.arn.clone(),
                events: r.events.iter().cloned().map(s3s::dto::Event::from).collect(),
                filter: filter_of(r),
            })
            .collect();
        ok(GetBucketNotificationConfigurationOutput { queue_configurations: Some(queues), ..Default::default() })
    }
}
