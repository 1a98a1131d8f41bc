//! What the console reads from the node's S3 API: its XML answers, parsed
//! with quick-xml into the few fields the pages show.

use quick_xml::events::Event;

/// The elements of an XML document as (path, text) pairs in document
/// order, the path the element names from the root joined by `/`
/// (`ListBucketResult/Contents/Key`), the text with its entities resolved.
pub fn leaves(xml: &str) -> Result<Vec<(String, String)>, String> {
    let mut r = quick_xml::Reader::from_str(xml);
    let mut path: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut out = Vec::new();
    loop {
        match r.read_event().map_err(|e| format!("the S3 answer is not XML: {e}"))? {
            Event::Start(e) => {
                path.push(String::from_utf8_lossy(e.local_name().as_ref()).into_owned());
                text.clear();
            }
            Event::Text(t) => text.push_str(&t.decode().map_err(|e| e.to_string())?),
            Event::CData(t) => text.push_str(&t.decode().map_err(|e| e.to_string())?),
            Event::GeneralRef(g) => {
                if g.is_char_ref() {
                    if let Ok(Some(c)) = g.resolve_char_ref() {
                        text.push(c);
                    }
                } else {
                    let name = g.decode().map_err(|e| e.to_string())?;
                    let entity = format!("&{name};");
                    text.push_str(&quick_xml::escape::unescape(&entity).map_err(|e| e.to_string())?);
                }
            }
            Event::End(_) => {
                out.push((path.join("/"), std::mem::take(&mut text)));
                path.pop();
            }
            Event::Empty(e) => {
                path.push(String::from_utf8_lossy(e.local_name().as_ref()).into_owned());
                out.push((path.join("/"), String::new()));
                path.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(out)
}

/// A bucket as ListBuckets gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Its name.
    pub name: String,
    /// When it was made (ISO 8601).
    pub created: String,
}

/// The buckets of a ListBuckets answer.
pub fn buckets(xml: &str) -> Result<Vec<Bucket>, String> {
    let mut out: Vec<Bucket> = Vec::new();
    for (path, text) in leaves(xml)? {
        match path.as_str() {
            "ListAllMyBucketsResult/Buckets/Bucket/Name" => out.push(Bucket { name: text, created: String::new() }),
            "ListAllMyBucketsResult/Buckets/Bucket/CreationDate" => {
                if let Some(b) = out.last_mut() {
                    b.created = text;
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A bucket's lifecycle rule as the S3 API gives it (Strata's rules
/// expire objects; they have no other action).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExpiryRule {
    /// Its id.
    pub id: String,
    /// The key prefix it covers ("" = every object).
    pub prefix: String,
    /// Days after an object is written.
    pub days: Option<u32>,
    /// Or a date (ISO 8601).
    pub date: Option<String>,
    /// Whether it is on.
    pub enabled: bool,
}

/// The rules of a GetBucketLifecycleConfiguration answer.
pub fn lifecycle(xml: &str) -> Result<Vec<ExpiryRule>, String> {
    let mut out = Vec::new();
    let mut cur = ExpiryRule::default();
    for (path, text) in leaves(xml)? {
        let Some(rest) = path.strip_prefix("LifecycleConfiguration/Rule") else { continue };
        match rest {
            // The rule's own end.
            "" => out.push(std::mem::take(&mut cur)),
            "/ID" => cur.id = text,
            "/Prefix" | "/Filter/Prefix" | "/Filter/And/Prefix" => cur.prefix = text,
            "/Expiration/Days" => cur.days = text.trim().parse().ok(),
            "/Expiration/Date" => cur.date = Some(text),
            "/Status" => cur.enabled = text == "Enabled",
            _ => {}
        }
    }
    Ok(out)
}

/// A PutBucketLifecycleConfiguration body holding `rules`.
pub fn lifecycle_xml(rules: &[ExpiryRule]) -> String {
    let esc = |t: &str| quick_xml::escape::escape(t).into_owned();
    let mut x = String::from("<LifecycleConfiguration>");
    for r in rules {
        let when = match (&r.days, &r.date) {
            (Some(d), _) => format!("<Days>{d}</Days>"),
            (None, Some(date)) => format!("<Date>{}</Date>", esc(date)),
            (None, None) => String::new(),
        };
        x.push_str(&format!(
            "<Rule><ID>{}</ID><Filter><Prefix>{}</Prefix></Filter><Status>{}</Status><Expiration>{when}</Expiration></Rule>",
            esc(&r.id),
            esc(&r.prefix),
            if r.enabled { "Enabled" } else { "Disabled" }
        ));
    }
    x.push_str("</LifecycleConfiguration>");
    x
}

/// An object of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Object {
    /// Its key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written (ISO 8601).
    pub modified: String,
}

/// One page of a ListObjectsV2 answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// The "folders": common prefixes under the delimiter.
    pub prefixes: Vec<String>,
    /// The objects.
    pub objects: Vec<Object>,
    /// Where the next page starts, if there is one.
    pub next: Option<String>,
}

/// A ListObjectsV2 answer.
pub fn listing(xml: &str) -> Result<Listing, String> {
    let mut out = Listing::default();
    for (path, text) in leaves(xml)? {
        match path.as_str() {
            "ListBucketResult/Contents/Key" => out.objects.push(Object { key: text, ..Object::default() }),
            "ListBucketResult/Contents/Size" => {
                if let Some(o) = out.objects.last_mut() {
                    o.size = text.parse().unwrap_or(0);
                }
            }
            "ListBucketResult/Contents/LastModified" => {
                if let Some(o) = out.objects.last_mut() {
                    o.modified = text;
                }
            }
            "ListBucketResult/CommonPrefixes/Prefix" => out.prefixes.push(text),
            "ListBucketResult/NextContinuationToken" if !text.is_empty() => out.next = Some(text),
            _ => {}
        }
    }
    Ok(out)
}

/// The upload id of a CreateMultipartUpload answer.
pub fn upload_id(xml: &str) -> Result<String, String> {
    leaves(xml)?
        .into_iter()
        .find(|(p, _)| p == "InitiateMultipartUploadResult/UploadId")
        .map(|(_, t)| t)
        .ok_or_else(|| "the S3 answer names no upload id".to_owned())
}

/// `s` percent-encoded for a URL path segment or query value (RFC 3986's
/// unreserved characters kept; `/` too when `keep_slash`, for a key's path).
pub fn enc(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_rules_read_back_what_was_written() {
        let rules = vec![
            ExpiryRule { id: "all".into(), prefix: String::new(), days: Some(30), date: None, enabled: true },
            ExpiryRule { id: "logs <&>".into(), prefix: "logs/&".into(), days: None, date: Some("2027-01-01T00:00:00Z".into()), enabled: false },
        ];
        assert_eq!(lifecycle(&lifecycle_xml(&rules)).unwrap(), rules);
        // S3's own answer: elements in its order, a namespace, the old Prefix form.
        let xml = "<?xml version=\"1.0\"?><LifecycleConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
<Rule><Expiration><Days>7</Days></Expiration><ID>a</ID><Prefix>tmp/</Prefix><Status>Enabled</Status></Rule>\
<Rule><Expiration><Days>1</Days></Expiration><ID>b</ID><Filter><And><Prefix>x/</Prefix></And></Filter><Status>Disabled</Status></Rule>\
</LifecycleConfiguration>";
        let got = lifecycle(xml).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].id.as_str(), got[0].prefix.as_str(), got[0].days, got[0].enabled), ("a", "tmp/", Some(7), true));
        assert_eq!((got[1].id.as_str(), got[1].prefix.as_str(), got[1].days, got[1].enabled), ("b", "x/", Some(1), false));
    }

    #[test]
    fn a_listing_gives_folders_objects_and_the_next_page() {
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
<Name>b</Name><Prefix>a/</Prefix><KeyCount>3</KeyCount><IsTruncated>true</IsTruncated>\
<Contents><Key>a/x &amp; y.txt</Key><LastModified>2026-11-28T10:00:00.000Z</LastModified><Size>12</Size></Contents>\
<Contents><Key>a/&#60;z&#62;</Key><Size>0</Size></Contents>\
<CommonPrefixes><Prefix>a/sub/</Prefix></CommonPrefixes><NextContinuationToken>tok+1</NextContinuationToken></ListBucketResult>";
        let l = listing(xml).unwrap();
        assert_eq!(l.prefixes, vec!["a/sub/"]);
        assert_eq!(l.objects.len(), 2);
        assert_eq!((l.objects[0].key.as_str(), l.objects[0].size), ("a/x & y.txt", 12));
        assert_eq!(l.objects[1].key, "a/<z>");
        assert_eq!(l.next.as_deref(), Some("tok+1"));
        assert!(listing("<ListBucketResult></Contents>").is_err(), "a mismatched end tag is not a listing");
    }

    #[test]
    fn buckets_and_upload_ids() {
        let xml = "<ListAllMyBucketsResult><Buckets><Bucket><Name>one</Name><CreationDate>2026-01-01T00:00:00Z</CreationDate></Bucket>\
<Bucket><Name>two</Name></Bucket></Buckets></ListAllMyBucketsResult>";
        let b = buckets(xml).unwrap();
        assert_eq!(b.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(), vec!["one", "two"]);
        assert_eq!(upload_id("<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>").unwrap(), "u1");
        assert!(upload_id("<Other/>").is_err());
    }

    #[test]
    fn encoding_keeps_only_unreserved_bytes() {
        assert_eq!(enc("a b/c+d", false), "a%20b%2Fc%2Bd");
        assert_eq!(enc("a b/c", true), "a%20b/c");
    }
}
