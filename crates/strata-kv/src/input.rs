//! Input for the local builder: CSV (with a header row) and JSON Lines,
//! key and value taken from named columns. Strings are their UTF-8 bytes;
//! other JSON values are their compact JSON text. A bad line is an error
//! naming the file and line.

use std::io::BufRead;
use std::path::{Path, PathBuf};

/// An input format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per line.
    JsonLines,
}

impl InputFormat {
    /// From a name (`csv`, `jsonl`) or, with `None`, the file's extension.
    pub fn pick(name: Option<&str>, path: &Path) -> Result<Self, InputError> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        match name.unwrap_or(ext) {
            "csv" => Ok(Self::Csv),
            "jsonl" | "ndjson" | "json" => Ok(Self::JsonLines),
            "parquet" => Err(InputError::Unsupported("Parquet input is not built into this version yet; convert to CSV or JSON Lines".into())),
            other => Err(InputError::Unsupported(format!("input format {other:?}: use csv or jsonl"))),
        }
    }
}

/// Why input cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// I/O.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Error.
        source: std::io::Error,
    },
    /// A record is malformed.
    #[error("{path}:{line}: {detail}")]
    Bad {
        /// File.
        path: PathBuf,
        /// Line (1-based).
        line: u64,
        /// What is wrong.
        detail: String,
    },
    /// The format or a column is not available.
    #[error("{0}")]
    Unsupported(String),
}

/// Records of a file: `(key, value)` pairs.
pub type Records = Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>), InputError>> + Send>;

/// Opens `path` and yields its records.
pub fn read(path: &Path, format: InputFormat, key_field: &str, value_field: &str) -> Result<Records, InputError> {
    let f = std::fs::File::open(path).map_err(|source| InputError::Io { path: path.to_path_buf(), source })?;
    let p = path.to_path_buf();
    match format {
        InputFormat::JsonLines => {
            let (kf, vf) = (key_field.to_string(), value_field.to_string());
            let lines = std::io::BufReader::with_capacity(1 << 20, f).lines();
            Ok(Box::new(lines.enumerate().filter_map(move |(i, line)| {
                let line_no = i as u64 + 1;
                let line = match line {
                    Ok(l) => l,
                    Err(source) => return Some(Err(InputError::Io { path: p.clone(), source })),
                };
                if line.trim().is_empty() {
                    return None;
                }
                let bad = |detail: String| InputError::Bad { path: p.clone(), line: line_no, detail };
                let v: serde_json::Value = match serde_json::from_str(&line) {
                    Ok(v) => v,
                    Err(e) => return Some(Err(bad(format!("not JSON: {e}")))),
                };
                let field = |name: &str| -> Result<Vec<u8>, InputError> {
                    match v.get(name) {
                        Some(serde_json::Value::String(s)) => Ok(s.clone().into_bytes()),
                        Some(other) => Ok(other.to_string().into_bytes()),
                        None => Err(bad(format!("no field {name:?}"))),
                    }
                };
                Some(field(&kf).and_then(|k| Ok((k, field(&vf)?))))
            })))
        }
        InputFormat::Csv => {
            let mut r = csv::ReaderBuilder::new().has_headers(true).from_reader(std::io::BufReader::with_capacity(1 << 20, f));
            let headers = r.byte_headers().map_err(|e| InputError::Bad { path: p.clone(), line: 1, detail: e.to_string() })?.clone();
            let col = |name: &str| {
                headers
                    .iter()
                    .position(|h| h == name.as_bytes())
                    .ok_or_else(|| InputError::Unsupported(format!("{}: no column {name:?} in the header", path.display())))
            };
            let (kc, vc) = (col(key_field)?, col(value_field)?);
            Ok(Box::new(r.into_byte_records().map(move |rec| {
                let rec = rec.map_err(|e| InputError::Bad { path: p.clone(), line: e.position().map_or(0, |pos| pos.line()), detail: e.to_string() })?;
                let line = rec.position().map_or(0, |pos| pos.line());
                let get = |c: usize| rec.get(c).map(<[u8]>::to_vec).ok_or_else(|| InputError::Bad { path: p.clone(), line, detail: "missing column".into() });
                Ok((get(kc)?, get(vc)?))
            })))
        }
    }
}
