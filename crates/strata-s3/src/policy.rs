//! Bucket policies: the JSON policy language's common subset, checked when
//! a policy is put and evaluated with the grants on every request
//! ([`crate::access::KeyAccess`]).
//!
//! A statement has an `Effect` (`Allow`, `Deny`), a `Principal` (`*`, or
//! `{"AWS": ...}` naming access key ids, bare or as the last part of an
//! ARN), `Action`s (`s3:GetObject`, `s3:Get*`, `s3:*`, ...), `Resource`s
//! (`arn:aws:s3:::bucket`, `arn:aws:s3:::bucket/prefix*`), and optional
//! `Condition`s: `IpAddress`/`NotIpAddress` on `aws:SourceIp` (CIDRs),
//! `StringEquals`/`StringNotEquals`/`StringLike`/`StringNotLike` on
//! `s3:prefix` (other condition keys are refused when the policy is put).
//! Evaluation is S3's: an
//! explicit Deny wins; else an Allow grants the request (even to anyone,
//! for `"Principal": "*"`); else the key's grants decide as without a
//! policy. `NotAction`, `NotPrincipal` and `NotResource` are refused when
//! the policy is put, rather than ignored.

use s3s::{S3Error, S3ErrorCode};
use serde_json::Value;
use std::net::IpAddr;

/// The document kind a bucket's policy is kept under.
pub(crate) const DOC: &str = "policy";
const POLICY_BYTES_MAX: usize = 20 * 1024;

/// The S3 actions a policy may name (the ones Strata's operations need).
const ACTIONS: &[&str] = &[
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:ListBucket",
    "s3:ListBucketVersions",
    "s3:GetObjectVersion",
    "s3:DeleteObjectVersion",
    "s3:GetObjectTagging",
    "s3:PutObjectTagging",
    "s3:DeleteObjectTagging",
    "s3:GetObjectAttributes",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
    "s3:ListBucketMultipartUploads",
    "s3:GetBucketLocation",
    "s3:GetBucketVersioning",
    "s3:PutBucketVersioning",
    "s3:GetBucketPolicy",
    "s3:PutBucketPolicy",
    "s3:DeleteBucketPolicy",
    "s3:GetBucketCORS",
    "s3:PutBucketCORS",
    "s3:GetBucketTagging",
    "s3:PutBucketTagging",
    "s3:GetLifecycleConfiguration",
    "s3:PutLifecycleConfiguration",
    "s3:GetObjectRetention",
    "s3:PutObjectRetention",
    "s3:GetObjectLegalHold",
    "s3:PutObjectLegalHold",
    "s3:BypassGovernanceRetention",
    "s3:GetBucketObjectLockConfiguration",
    "s3:PutBucketObjectLockConfiguration",
    "s3:GetBucketOwnershipControls",
    "s3:PutBucketOwnershipControls",
    "s3:DeleteBucket",
    "s3:GetBucketAcl",
    "s3:PutBucketAcl",
    "s3:GetObjectAcl",
    "s3:PutObjectAcl",
];

fn malformed(msg: impl Into<String>) -> S3Error {
    S3Error::with_message(S3ErrorCode::MalformedPolicy, msg.into())
}

/// A checked policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    statements: Vec<Statement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Statement {
    allow: bool,
    /// None: anyone (`"*"`).
    principals: Option<Vec<String>>,
    actions: Vec<String>,
    resources: Vec<String>,
    conditions: Vec<Condition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    SourceIp { nets: Vec<(IpAddr, u8)>, negate: bool },
    Prefix { values: Vec<String>, like: bool, negate: bool },
}

/// What a request is, for a policy.
pub(crate) struct Request<'a> {
    /// The access key, None for an anonymous request.
    pub who: Option<&'a str>,
    /// `s3:...`
    pub action: &'a str,
    /// `arn:aws:s3:::bucket[/key]`.
    pub resource: &'a str,
    /// The client's address, if known.
    pub source_ip: Option<IpAddr>,
    /// A listing's `prefix` parameter.
    pub prefix: Option<&'a str>,
}

/// A policy's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Deny,
    Allow,
    /// No statement applies: the grants decide.
    Silent,
}

fn strings(v: &Value, what: &str) -> Result<Vec<String>, S3Error> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(a) if !a.is_empty() => {
            a.iter().map(|x| x.as_str().map(str::to_owned).ok_or_else(|| malformed(format!("{what} must be strings")))).collect()
        }
        _ => Err(malformed(format!("{what} must be a string or a non-empty list of strings"))),
    }
}

fn cidr(s: &str) -> Result<(IpAddr, u8), S3Error> {
    let (ip, bits) = s.split_once('/').map_or((s, None), |(a, b)| (a, Some(b)));
    let ip: IpAddr = ip.parse().map_err(|_| malformed(format!("invalid IP address {s:?} in aws:SourceIp")))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        None => max,
        Some(b) => b.parse::<u8>().ok().filter(|b| *b <= max).ok_or_else(|| malformed(format!("invalid prefix length in {s:?}")))?,
    };
    Ok((ip, bits))
}

fn in_net(ip: IpAddr, (net, bits): (IpAddr, u8)) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => bits == 0 || (u32::from(a) ^ u32::from(b)) >> (32 - u32::from(bits)) == 0,
        (IpAddr::V6(a), IpAddr::V6(b)) => bits == 0 || (u128::from(a) ^ u128::from(b)) >> (128 - u32::from(bits)) == 0,
        _ => false,
    }
}

/// `*` and `?` wildcards.
fn like(pattern: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < s.len() {
        if i < p.len() && (p[i] == '?' || p[i] == s[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(st) = star {
            i = st + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

impl Policy {
    /// Parses and checks a policy for `bucket`: S3's MalformedPolicy names
    /// what is wrong.
    pub(crate) fn parse(text: &str, bucket: &str) -> Result<Self, S3Error> {
        if text.len() > POLICY_BYTES_MAX {
            return Err(malformed(format!("a policy is at most {POLICY_BYTES_MAX} bytes")));
        }
        let v: Value = serde_json::from_str(text).map_err(|e| malformed(format!("the policy is not JSON: {e}")))?;
        let list = match v.get("Statement") {
            Some(Value::Array(a)) if !a.is_empty() => a.clone(),
            Some(s @ Value::Object(_)) => vec![s.clone()],
            _ => return Err(malformed("the policy has no Statement")),
        };
        let mut statements = Vec::with_capacity(list.len());
        for (n, st) in list.iter().enumerate() {
            let n = n + 1;
            for not in ["NotAction", "NotPrincipal", "NotResource"] {
                if st.get(not).is_some() {
                    return Err(malformed(format!("statement {n}: {not} is not supported")));
                }
            }
            let allow = match st.get("Effect").and_then(Value::as_str) {
                Some("Allow") => true,
                Some("Deny") => false,
                other => return Err(malformed(format!("statement {n}: Effect must be Allow or Deny, not {other:?}"))),
            };
            let principals = match st.get("Principal") {
                Some(Value::String(s)) if s == "*" => None,
                Some(Value::Object(o)) => match o.get("AWS") {
                    Some(Value::String(s)) if s == "*" => None,
                    Some(a) => Some(strings(a, "principals")?.into_iter().map(|p| p.rsplit(['/', ':']).next().unwrap_or("").to_owned()).collect()),
                    None => return Err(malformed(format!("statement {n}: Principal must name AWS principals"))),
                },
                _ => return Err(malformed(format!("statement {n}: Principal is missing or invalid"))),
            };
            let actions = strings(st.get("Action").unwrap_or(&Value::Null), "Action")?;
            for a in &actions {
                let known = a == "*" || a == "s3:*" || ACTIONS.iter().any(|k| like(&a.to_ascii_lowercase(), &k.to_ascii_lowercase()));
                if !known {
                    return Err(malformed(format!("statement {n}: invalid action {a:?}")));
                }
            }
            let resources = strings(st.get("Resource").unwrap_or(&Value::Null), "Resource")?;
            for r in &resources {
                let ok = r.strip_prefix("arn:aws:s3:::").is_some_and(|rest| rest == bucket || rest.split_once('/').is_some_and(|(b, _)| b == bucket));
                if !ok {
                    return Err(malformed(format!("statement {n}: resource {r:?} is not this bucket ({bucket:?}) or its objects")));
                }
            }
            let mut conditions = Vec::new();
            if let Some(c) = st.get("Condition") {
                let c = c.as_object().ok_or_else(|| malformed(format!("statement {n}: Condition must be an object")))?;
                for (op, kv) in c {
                    let kv = kv.as_object().ok_or_else(|| malformed(format!("statement {n}: condition {op} must be an object")))?;
                    for (key, val) in kv {
                        let vals = match val {
                            Value::Bool(b) => vec![b.to_string()],
                            v => strings(v, "condition values")?,
                        };
                        let cond = match (op.as_str(), key.to_ascii_lowercase().as_str()) {
                            ("IpAddress" | "NotIpAddress", "aws:sourceip") => {
                                Condition::SourceIp { nets: vals.iter().map(|v| cidr(v)).collect::<Result<_, _>>()?, negate: op == "NotIpAddress" }
                            }
                            ("StringEquals" | "StringNotEquals" | "StringLike" | "StringNotLike", "s3:prefix") => {
                                Condition::Prefix { values: vals, like: op.contains("Like"), negate: op.contains("Not") }
                            }
                            _ => return Err(malformed(format!("statement {n}: condition {op} on {key} is not supported"))),
                        };
                        conditions.push(cond);
                    }
                }
            }
            statements.push(Statement { allow, principals, actions, resources, conditions });
        }
        Ok(Self { statements })
    }

    /// The policy's verdict on `r`.
    pub(crate) fn evaluate(&self, r: &Request<'_>) -> Verdict {
        let mut allowed = false;
        for st in &self.statements {
            let principal = match &st.principals {
                None => true,
                Some(p) => r.who.is_some_and(|w| p.iter().any(|x| x == w)),
            };
            let action = st.actions.iter().any(|a| a == "*" || like(&a.to_ascii_lowercase(), &r.action.to_ascii_lowercase()));
            let resource = st.resources.iter().any(|p| like(p, r.resource));
            if !(principal && action && resource && st.conditions.iter().all(|c| c.holds(r))) {
                continue;
            }
            if !st.allow {
                return Verdict::Deny;
            }
            allowed = true;
        }
        if allowed { Verdict::Allow } else { Verdict::Silent }
    }
}

impl Condition {
    fn holds(&self, r: &Request<'_>) -> bool {
        match self {
            Self::SourceIp { nets, negate } => match r.source_ip {
                Some(ip) => nets.iter().any(|n| in_net(ip, *n)) != *negate,
                // An unknown address matches neither an IpAddress nor a NotIpAddress.
                None => false,
            },
            Self::Prefix { values, like: l, negate } => {
                let p = r.prefix.unwrap_or("");
                values.iter().any(|v| if *l { like(v, p) } else { v == p }) != *negate
            }
        }
    }
}

/// The S3 action an operation needs (s3s's operation names).
pub(crate) fn action_of(op: &str) -> String {
    let a = match op {
        "HeadObject" => "GetObject",
        "ListObjects" | "ListObjectsV2" | "HeadBucket" => "ListBucket",
        "ListObjectVersions" => "ListBucketVersions",
        "CopyObject" | "CreateMultipartUpload" | "UploadPart" | "UploadPartCopy" | "CompleteMultipartUpload" | "PostObject" => "PutObject",
        "DeleteObjects" => "DeleteObject",
        "ListParts" => "ListMultipartUploadParts",
        "ListMultipartUploads" => "ListBucketMultipartUploads",
        "GetBucketCors" => "GetBucketCORS",
        "PutBucketCors" | "DeleteBucketCors" => "PutBucketCORS",
        "GetBucketLifecycleConfiguration" => "GetLifecycleConfiguration",
        "PutBucketLifecycleConfiguration" | "DeleteBucketLifecycle" => "PutLifecycleConfiguration",
        "DeleteBucketTagging" => "PutBucketTagging",
        "GetObjectLockConfiguration" => "GetBucketObjectLockConfiguration",
        "PutObjectLockConfiguration" => "PutBucketObjectLockConfiguration",
        "DeleteBucketOwnershipControls" => "PutBucketOwnershipControls",
        other => other,
    };
    format!("s3:{a}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(who: Option<&'a str>, action: &'a str, resource: &'a str) -> Request<'a> {
        Request { who, action, resource, source_ip: Some("10.1.2.3".parse().unwrap()), prefix: None }
    }

    #[test]
    fn deny_wins_over_allow_and_silence_leaves_it_to_the_grants() {
        let p = Policy::parse(
            r#"{"Version":"2012-10-17","Statement":[
                {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/public/*"},
                {"Effect":"Deny","Principal":{"AWS":["arn:aws:iam::123:user/SKBAD"]},"Action":["s3:Get*"],"Resource":"arn:aws:s3:::b/secret/*"},
                {"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::b/*","Condition":{"NotIpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}
            ]}"#,
            "b",
        )
        .unwrap();
        assert_eq!(p.evaluate(&req(None, "s3:GetObject", "arn:aws:s3:::b/public/x")), Verdict::Allow);
        assert_eq!(p.evaluate(&req(Some("SKBAD"), "s3:GetObject", "arn:aws:s3:::b/secret/x")), Verdict::Deny);
        assert_eq!(p.evaluate(&req(Some("SKGOOD"), "s3:GetObject", "arn:aws:s3:::b/secret/x")), Verdict::Silent);
        assert_eq!(p.evaluate(&req(Some("SKGOOD"), "s3:PutObject", "arn:aws:s3:::b/k")), Verdict::Silent, "from inside 10/8");
        let outside = Request { source_ip: Some("192.0.2.1".parse().unwrap()), ..req(Some("SKGOOD"), "s3:PutObject", "arn:aws:s3:::b/k") };
        assert_eq!(p.evaluate(&outside), Verdict::Deny);
        let prefix = Policy::parse(
            r#"{"Statement":{"Effect":"Deny","Principal":"*","Action":"s3:ListBucket","Resource":"arn:aws:s3:::b","Condition":{"StringLike":{"s3:prefix":"private/*"}}}}"#,
            "b",
        )
        .unwrap();
        let list = |p: &'static str| Request { prefix: Some(p), ..req(Some("K"), "s3:ListBucket", "arn:aws:s3:::b") };
        assert_eq!(prefix.evaluate(&list("private/x")), Verdict::Deny);
        assert_eq!(prefix.evaluate(&list("public/")), Verdict::Silent);
    }

    #[test]
    fn malformed_policies_are_refused_with_what_is_wrong() {
        for (text, says) in [
            ("{", "not JSON"),
            (r#"{"Statement":[]}"#, "no Statement"),
            (r#"{"Statement":[{"Effect":"Maybe","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}"#, "Effect"),
            (r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:Fly","Resource":"arn:aws:s3:::b/*"}]}"#, "invalid action"),
            (r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}]}"#, "not this bucket"),
            (r#"{"Statement":[{"Effect":"Allow","Principal":"*","NotAction":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}"#, "NotAction"),
            (
                r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Condition":{"IpAddress":{"aws:SourceIp":"300.1.1.1"}}}]}"#,
                "IP",
            ),
            (
                r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Condition":{"DateGreaterThan":{"aws:CurrentTime":"2020"}}}]}"#,
                "not supported",
            ),
        ] {
            let e = Policy::parse(text, "b").unwrap_err();
            assert_eq!(e.code(), &S3ErrorCode::MalformedPolicy, "{text}");
            assert!(e.message().is_some_and(|m| m.contains(says)), "{text}: {:?}", e.message());
        }
        assert!(like("s3:get*", "s3:getobject") && !like("s3:get*", "s3:putobject") && like("a?c", "abc"));
        assert_eq!(action_of("HeadObject"), "s3:GetObject");
        assert_eq!(action_of("PostObject"), "s3:PutObject");
    }
}
