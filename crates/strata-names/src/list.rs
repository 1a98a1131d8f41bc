//! Listing a bucket in key order, with S3's prefix, delimiter (common
//! prefixes), page size and "start after" semantics.

use crate::state::{Bucket, ObjectMeta};
use std::ops::Bound;

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct ListQuery<'a> {
    /// Only keys with this prefix.
    pub prefix: &'a str,
    /// Roll keys up to the first delimiter after the prefix.
    pub delimiter: Option<&'a str>,
    /// Start strictly after this key or common prefix (a continuation).
    pub after: Option<&'a str>,
    /// At most this many keys and common prefixes together.
    pub max: usize,
    /// Objects expired by then are left out.
    pub now_ms: u64,
}

/// One page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Objects, in key order.
    pub objects: Vec<(String, ObjectMeta)>,
    /// Common prefixes, in order.
    pub prefixes: Vec<String>,
    /// More follow.
    pub truncated: bool,
    /// When truncated: the last key or prefix returned, to continue after.
    pub next: Option<String>,
}

impl Bucket {
    /// One page of the bucket's listing.
    pub fn list(&self, q: &ListQuery<'_>) -> ListPage {
        let mut page = ListPage::default();
        let start = match q.after {
            Some(a) if a >= q.prefix => Bound::Excluded(a),
            _ => Bound::Included(q.prefix),
        };
        let delimiter = q.delimiter.filter(|d| !d.is_empty());
        let mut last: Option<&str> = q.after;
        for (key, object) in self.objects.range::<str, _>((start, Bound::Unbounded)) {
            if !key.starts_with(q.prefix) {
                break;
            }
            if object.expired(q.now_ms) {
                continue;
            }
            let rolled = delimiter.and_then(|d| key[q.prefix.len()..].find(d).map(|i| &key[..q.prefix.len() + i + d.len()]));
            if let Some(cp) = rolled
                && last == Some(cp)
            {
                continue;
            }
            if page.objects.len() + page.prefixes.len() >= q.max {
                page.truncated = true;
                page.next = last.map(str::to_owned);
                break;
            }
            match rolled {
                Some(cp) => {
                    page.prefixes.push(cp.to_owned());
                    last = Some(cp);
                }
                None => {
                    page.objects.push((key.clone(), object.clone()));
                    last = Some(key);
                }
            }
        }
        page
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use strata_types::{BlobId, BlobKind};

    fn bucket(keys: &[&str]) -> Bucket {
        let mut b = Bucket::default();
        for k in keys {
            let object = ObjectMeta {
                blob: BlobId::from_parts(BlobKind::Simple, 0, [0; 16]),
                size: 0,
                etag: String::new(),
                content_type: String::new(),
                meta: vec![],
                modified_ms: 0,
                expiry_ms: 0,
                parts: 0,
            };
            b.objects.insert((*k).to_owned(), object);
        }
        b
    }

    // Pages through the whole listing.
    fn all(b: &Bucket, prefix: &str, delimiter: Option<&str>, max: usize) -> (Vec<String>, Vec<String>) {
        let (mut keys, mut prefixes) = (vec![], vec![]);
        let mut after: Option<String> = None;
        loop {
            let p = b.list(&ListQuery { prefix, delimiter, after: after.as_deref(), max, now_ms: 0 });
            keys.extend(p.objects.into_iter().map(|o| o.0));
            prefixes.extend(p.prefixes);
            if !p.truncated {
                return (keys, prefixes);
            }
            after = p.next;
        }
    }

    #[test]
    fn delimiters_roll_up_common_prefixes_across_pages() {
        let b = bucket(&["a", "photos/2024/x", "photos/2024/y", "photos/2025/z", "photos/top", "photoz", "q/r"]);
        let (keys, prefixes) = all(&b, "photos/", Some("/"), 1);
        assert_eq!(keys, vec!["photos/top"]);
        assert_eq!(prefixes, vec!["photos/2024/", "photos/2025/"]);
        let (keys, prefixes) = all(&b, "", Some("/"), 2);
        assert_eq!(keys, vec!["a", "photoz"]);
        assert_eq!(prefixes, vec!["photos/", "q/"]);
    }

    proptest! {
        // Paged listing equals a filter over the sorted keys, for any page size.
        #[test]
        fn paging_matches_a_model(keys in proptest::collection::btree_set("[ab/]{1,5}", 0..40), prefix in "[ab/]{0,2}", max in 1usize..5, delim in proptest::option::of(Just("/"))) {
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            let b = bucket(&refs);
            let (got_keys, got_prefixes) = all(&b, &prefix, delim, max);
            let mut want_keys = vec![];
            let mut want_prefixes: Vec<String> = vec![];
            for k in keys.iter().filter(|k| k.starts_with(&prefix)) {
                match delim.and_then(|d| k[prefix.len()..].find(d).map(|i| k[..prefix.len() + i + 1].to_owned())) {
                    Some(cp) => if want_prefixes.last() != Some(&cp) { want_prefixes.push(cp) },
                    None => want_keys.push(k.clone()),
                }
            }
            prop_assert_eq!(got_keys, want_keys);
            prop_assert_eq!(got_prefixes, want_prefixes);
        }
    }
}
