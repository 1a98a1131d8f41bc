//! Server-side transforms (Spock §3.1.1): a get that returns part of a
//! value, a put that changes the value held instead of replacing it, so a
//! large value need not cross the network whole. Transforms are named and
//! take an argument; [`Transform`] is the trait, [`by_name`] the set built
//! in. Both built-ins work on values that are JSON arrays.

use crate::error::{Result, RwError};

/// A transform of values on the server.
pub trait Transform: Send + Sync {
    /// Its name in requests.
    fn name(&self) -> &'static str;
    /// A get's answer from the value held (`None` when this transform
    /// does not apply to gets).
    fn on_get(&self, _value: &[u8], _arg: &[u8]) -> Option<Result<Vec<u8>>> {
        None
    }
    /// The value a put stores, from the value held (`None`: no value yet)
    /// and the put's value (`None` when this transform does not apply to puts).
    fn on_put(&self, _held: Option<&[u8]>, _given: &[u8]) -> Option<Result<Vec<u8>>> {
        None
    }
}

/// Names of the built-in transforms.
pub const NAMES: &[&str] = &["sublist", "append"];

/// A built-in transform by name.
pub fn by_name(name: &str) -> Result<&'static dyn Transform> {
    match name {
        "sublist" => Ok(&SubList),
        "append" => Ok(&Append),
        _ => Err(RwError::UnknownTransform(name.to_string())),
    }
}

fn list(name: &str, value: &[u8]) -> Result<Vec<serde_json::Value>> {
    serde_json::from_slice::<Vec<serde_json::Value>>(value)
        .map_err(|e| RwError::Transform { name: name.into(), detail: format!("the value is not a JSON array: {e}") })
}

/// Get: the elements `from..to` of a JSON array (argument `from:to`,
/// either side may be empty; out of range is clipped).
pub struct SubList;

impl Transform for SubList {
    fn name(&self) -> &'static str {
        "sublist"
    }
    fn on_get(&self, value: &[u8], arg: &[u8]) -> Option<Result<Vec<u8>>> {
        Some((|| {
            let bad = |d: String| RwError::Transform { name: "sublist".into(), detail: d };
            let arg = std::str::from_utf8(arg).map_err(|_| bad("the argument is not UTF-8".into()))?;
            let (from, to) = arg.split_once(':').ok_or_else(|| bad(format!("argument {arg:?} is not from:to")))?;
            let items = list("sublist", value)?;
            let parse = |s: &str, default: usize| if s.is_empty() { Ok(default) } else { s.parse::<usize>().map_err(|e| bad(format!("{s:?}: {e}"))) };
            let to = parse(to, items.len())?.min(items.len());
            let from = parse(from, 0)?.min(to);
            serde_json::to_vec(&items[from..to]).map_err(|e| bad(e.to_string()))
        })())
    }
}

/// Put: appends the put's value (one JSON value) to the JSON array held
/// (an empty array when there is none).
pub struct Append;

impl Transform for Append {
    fn name(&self) -> &'static str {
        "append"
    }
    fn on_put(&self, held: Option<&[u8]>, given: &[u8]) -> Option<Result<Vec<u8>>> {
        Some((|| {
            let mut items = match held {
                Some(v) => list("append", v)?,
                None => Vec::new(),
            };
            let item: serde_json::Value =
                serde_json::from_slice(given).map_err(|e| RwError::Transform { name: "append".into(), detail: format!("the put's value is not JSON: {e}") })?;
            items.push(item);
            serde_json::to_vec(&items).map_err(|e| RwError::Transform { name: "append".into(), detail: e.to_string() })
        })())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins_do_what_they_say_and_refuse_what_they_cannot() {
        let v = br#"[1,"two",{"three":3},4]"#;
        let sub = by_name("sublist").unwrap();
        assert_eq!(sub.on_get(v, b"1:3").unwrap().unwrap(), br#"["two",{"three":3}]"#);
        assert_eq!(sub.on_get(v, b":1").unwrap().unwrap(), b"[1]");
        assert_eq!(sub.on_get(v, b"2:99").unwrap().unwrap(), br#"[{"three":3},4]"#);
        assert!(sub.on_get(v, b"x:1").unwrap().is_err());
        assert!(sub.on_get(b"not json", b"0:1").unwrap().is_err());
        assert!(sub.on_put(None, b"1").is_none(), "sublist is a get transform");
        let app = by_name("append").unwrap();
        assert_eq!(app.on_put(Some(b"[1]"), b"{\"a\":2}").unwrap().unwrap(), br#"[1,{"a":2}]"#);
        assert_eq!(app.on_put(None, b"5").unwrap().unwrap(), b"[5]");
        assert!(app.on_put(Some(b"{}"), b"5").unwrap().is_err(), "the value held is not a list");
        assert!(app.on_put(None, b"nope").unwrap().is_err());
        assert!(matches!(by_name("reverse").map(|t| t.name()), Err(RwError::UnknownTransform(_))));
    }
}
