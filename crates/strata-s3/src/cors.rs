//! CORS: a bucket's rules (Put/Get/DeleteBucketCors, kept as the bucket's
//! `cors` document in the names), preflight `OPTIONS` requests answered
//! from them before authentication (a browser sends no credentials with a
//! preflight), and the `Access-Control-*` headers of the answers to
//! cross-origin requests a rule allows.

use s3s::dto::CORSRule;
use s3s::{S3Error, s3_error};
use serde::{Deserialize, Serialize};

/// The document kind the rules are kept under.
pub(crate) const DOC: &str = "cors";
const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];
const RULES_MAX: usize = 100;

/// One CORS rule, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rule {
    pub id: Option<String>,
    pub origins: Vec<String>,
    pub methods: Vec<String>,
    pub headers: Vec<String>,
    pub expose: Vec<String>,
    pub max_age: Option<i32>,
}

/// Checks S3's CORS rules and turns them into ours: each needs at least
/// one method (of GET, PUT, POST, DELETE, HEAD) and one origin, and a
/// pattern at most one `*`.
pub(crate) fn rules_in(rules: &[CORSRule]) -> Result<Vec<Rule>, S3Error> {
    if rules.is_empty() || rules.len() > RULES_MAX {
        return Err(s3_error!(MalformedXML, "a CORS configuration holds 1 to {RULES_MAX} rules, not {}", rules.len()));
    }
    let mut out = Vec::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        let n = i + 1;
        if r.allowed_methods.is_empty() {
            return Err(s3_error!(MalformedXML, "CORS rule {n} allows no methods"));
        }
        if let Some(m) = r.allowed_methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
            return Err(s3_error!(InvalidRequest, "CORS rule {n}: unsupported method {m:?} (GET, PUT, POST, DELETE, HEAD)"));
        }
        if r.allowed_origins.is_empty() {
            return Err(s3_error!(MalformedXML, "CORS rule {n} allows no origins"));
        }
        let headers = r.allowed_headers.clone().unwrap_or_default();
        if let Some(p) = r.allowed_origins.iter().chain(&headers).find(|p| p.matches('*').count() > 1) {
            return Err(s3_error!(InvalidRequest, "CORS rule {n}: {p:?} has more than one wildcard"));
        }
        out.push(Rule {
            id: r.id.clone(),
            origins: r.allowed_origins.clone(),
            methods: r.allowed_methods.clone(),
            headers,
            expose: r.expose_headers.clone().unwrap_or_default(),
            max_age: r.max_age_seconds,
        });
    }
    Ok(out)
}

/// Our rules as S3's.
pub(crate) fn rules_out(rules: &[Rule]) -> Vec<CORSRule> {
    rules
        .iter()
        .map(|r| CORSRule {
            id: r.id.clone(),
            allowed_origins: r.origins.clone(),
            allowed_methods: r.methods.clone(),
            allowed_headers: (!r.headers.is_empty()).then(|| r.headers.clone()),
            expose_headers: (!r.expose.is_empty()).then(|| r.expose.clone()),
            max_age_seconds: r.max_age,
        })
        .collect()
}

/// Whether `s` matches `pattern` (at most one `*`, any run of characters).
fn matches(pattern: &str, s: &str, fold_case: bool) -> bool {
    let (p, s) = if fold_case { (pattern.to_ascii_lowercase(), s.to_ascii_lowercase()) } else { (pattern.to_owned(), s.to_owned()) };
    match p.split_once('*') {
        None => p == s,
        Some((pre, post)) => s.len() >= pre.len() + post.len() && s.starts_with(pre) && s.ends_with(post),
    }
}

/// The first rule allowing `origin` to send `method` with `headers`
/// (a preflight's `Access-Control-Request-Headers`; none for an actual request).
pub(crate) fn find<'a>(rules: &'a [Rule], origin: &str, method: &str, headers: &[&str]) -> Option<&'a Rule> {
    rules.iter().find(|r| {
        r.origins.iter().any(|o| matches(o, origin, false))
            && r.methods.iter().any(|m| m == method)
            && headers.iter().all(|h| r.headers.iter().any(|p| matches(p, h, true)))
    })
}

/// The `Access-Control-Allow-Origin` a rule answers `origin` with.
pub(crate) fn allow_origin(rule: &Rule, origin: &str) -> String {
    if rule.origins.iter().any(|o| o == "*") { "*".to_owned() } else { origin.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CORSRule {
        CORSRule {
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
            allowed_headers: Some(headers.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn rules_are_checked_and_matched_as_s3_does() {
        assert_eq!(rules_in(&[rule(&["*"], &[], &[])]).unwrap_err().code().as_str(), "MalformedXML");
        assert_eq!(rules_in(&[rule(&["*"], &["PATCH"], &[])]).unwrap_err().code().as_str(), "InvalidRequest");
        assert_eq!(rules_in(&[rule(&[], &["GET"], &[])]).unwrap_err().code().as_str(), "MalformedXML");
        assert_eq!(rules_in(&[rule(&["http://*.*"], &["GET"], &[])]).unwrap_err().code().as_str(), "InvalidRequest");
        assert!(rules_in(&[]).is_err());
        let rules = rules_in(&[rule(&["https://*.example.com"], &["PUT", "GET"], &["x-amz-*", "Content-Type"]), rule(&["*"], &["GET"], &[])]).unwrap();
        assert_eq!(rules_out(&rules)[0].allowed_methods, ["PUT", "GET"]);
        let first = find(&rules, "https://app.example.com", "PUT", &["content-type", "X-Amz-Date"]).unwrap();
        assert_eq!(allow_origin(first, "https://app.example.com"), "https://app.example.com");
        assert!(find(&rules, "https://app.example.com", "PUT", &["authorization"]).is_none(), "a header no rule allows");
        assert!(find(&rules, "http://app.example.com", "PUT", &[]).is_none(), "another scheme");
        let any = find(&rules, "http://elsewhere.test", "GET", &[]).unwrap();
        assert_eq!(allow_origin(any, "http://elsewhere.test"), "*");
        assert!(find(&rules, "http://elsewhere.test", "DELETE", &[]).is_none());
    }
}
