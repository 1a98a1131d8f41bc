//! Input for the local builder: CSV (with a header row), JSON Lines and
//! Parquet, key and value taken from named columns. Strings are their UTF-8
//! bytes; other JSON values are their compact JSON text (object keys in
//! input order), null is an error, and Parquet integers are their decimal
//! text. A bad record is an error naming the file and
//! its line (Parquet: row).

use std::collections::VecDeque;
use std::io::BufRead;

use parquet::basic::Type as PhysicalType;
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{ByteArrayType, FixedLenByteArrayType, Int32Type, Int64Type};
use parquet::file::reader::{FileReader, SerializedFileReader};
use std::path::{Path, PathBuf};

/// An input format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per line.
    JsonLines,
    /// Apache Parquet (uncompressed or Snappy; BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY,
    /// INT32 or INT64 columns).
    Parquet,
}

impl InputFormat {
    /// From a name (`csv`, `jsonl`) or, with `None`, the file's extension.
    pub fn pick(name: Option<&str>, path: &Path) -> Result<Self, InputError> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        match name.unwrap_or(ext) {
            "csv" => Ok(Self::Csv),
            "jsonl" | "ndjson" | "json" => Ok(Self::JsonLines),
            "parquet" | "pq" => Ok(Self::Parquet),
            other => Err(InputError::Unsupported(format!("input format {other:?}: use csv, jsonl or parquet"))),
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

/// How much input there is, for progress: bytes for text formats, rows
/// for Parquet (whose bytes are compressed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// The file's size in bytes.
    Bytes(u64),
    /// The number of rows.
    Rows(u64),
}

/// The input's extent.
pub fn extent(path: &Path, format: InputFormat) -> Result<Extent, InputError> {
    let io = |source| InputError::Io { path: path.to_path_buf(), source };
    match format {
        InputFormat::Parquet => {
            let f = std::fs::File::open(path).map_err(io)?;
            let r = SerializedFileReader::new(f).map_err(|e| InputError::Bad { path: path.to_path_buf(), line: 0, detail: format!("not Parquet: {e}") })?;
            Ok(Extent::Rows(r.metadata().file_metadata().num_rows().max(0) as u64))
        }
        _ => Ok(Extent::Bytes(std::fs::metadata(path).map_err(io)?.len())),
    }
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
                        Some(serde_json::Value::Null) => Err(bad(format!("field {name:?} is null"))),
                        Some(other) => Ok(other.to_string().into_bytes()),
                        None => Err(bad(format!("no field {name:?}"))),
                    }
                };
                Some(field(&kf).and_then(|k| Ok((k, field(&vf)?))))
            })))
        }
        InputFormat::Parquet => Ok(Box::new(ParquetRecords::open(f, p, key_field, value_field)?)),
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

/// Rows read from both columns at a time.
const PARQUET_BATCH: usize = 8192;

/// A typed reader of one column of one row group.
enum Column {
    Bytes(ColumnReaderImpl<ByteArrayType>),
    Fixed(ColumnReaderImpl<FixedLenByteArrayType>),
    I32(ColumnReaderImpl<Int32Type>),
    I64(ColumnReaderImpl<Int64Type>),
}

impl Column {
    fn new(r: ColumnReader) -> Option<Self> {
        match r {
            ColumnReader::ByteArrayColumnReader(r) => Some(Self::Bytes(r)),
            ColumnReader::FixedLenByteArrayColumnReader(r) => Some(Self::Fixed(r)),
            ColumnReader::Int32ColumnReader(r) => Some(Self::I32(r)),
            ColumnReader::Int64ColumnReader(r) => Some(Self::I64(r)),
            _ => None,
        }
    }

    /// Up to `n` values; `None` for a null. `max_def` is the column's
    /// maximum definition level: 0 for a required column.
    fn read(&mut self, n: usize, max_def: i16) -> parquet::errors::Result<Vec<Option<Vec<u8>>>> {
        let nullable = max_def > 0;
        let mut defs = Vec::new();
        let d = if nullable { Some(&mut defs) } else { None };
        let values: Vec<Vec<u8>> = match self {
            Self::Bytes(r) => {
                let mut v = Vec::new();
                r.read_records(n, d, None, &mut v)?;
                v.into_iter().map(|b| b.data().to_vec()).collect()
            }
            Self::Fixed(r) => {
                let mut v = Vec::new();
                r.read_records(n, d, None, &mut v)?;
                v.into_iter().map(|b| b.data().to_vec()).collect()
            }
            Self::I32(r) => {
                let mut v = Vec::new();
                r.read_records(n, d, None, &mut v)?;
                v.into_iter().map(|x| x.to_string().into_bytes()).collect()
            }
            Self::I64(r) => {
                let mut v = Vec::new();
                r.read_records(n, d, None, &mut v)?;
                v.into_iter().map(|x| x.to_string().into_bytes()).collect()
            }
        };
        if !nullable {
            return Ok(values.into_iter().map(Some).collect());
        }
        let mut it = values.into_iter();
        Ok(defs.iter().map(|&d| if d == max_def { it.next() } else { None }).collect())
    }
}

/// Records of a Parquet file, row group by row group, both columns read in
/// lockstep batches.
struct ParquetRecords {
    path: PathBuf,
    reader: SerializedFileReader<std::fs::File>,
    columns: [(usize, i16, String); 2],
    group: usize,
    current: Option<[Column; 2]>,
    buffered: VecDeque<(Vec<u8>, Vec<u8>)>,
    row: u64,
    failed: bool,
}

impl ParquetRecords {
    fn open(f: std::fs::File, path: PathBuf, key_field: &str, value_field: &str) -> Result<Self, InputError> {
        let reader = SerializedFileReader::new(f).map_err(|e| InputError::Bad { path: path.clone(), line: 0, detail: format!("not Parquet: {e}") })?;
        let schema = reader.metadata().file_metadata().schema_descr_ptr();
        let find = |name: &str| -> Result<(usize, i16, String), InputError> {
            let i = schema
                .columns()
                .iter()
                .position(|c| c.path().string() == name)
                .ok_or_else(|| InputError::Unsupported(format!("{}: no column {name:?} in the Parquet schema", path.display())))?;
            let c = schema.column(i);
            if c.max_rep_level() > 0 {
                return Err(InputError::Unsupported(format!("{}: column {name:?} is repeated; key and value must be single values", path.display())));
            }
            match c.physical_type() {
                PhysicalType::BYTE_ARRAY | PhysicalType::FIXED_LEN_BYTE_ARRAY | PhysicalType::INT32 | PhysicalType::INT64 => {}
                other => {
                    return Err(InputError::Unsupported(format!("{}: column {name:?} is {other}; use a string, binary or integer column", path.display())));
                }
            }
            Ok((i, c.max_def_level(), name.to_string()))
        };
        let columns = [find(key_field)?, find(value_field)?];
        Ok(Self { path, reader, columns, group: 0, current: None, buffered: VecDeque::new(), row: 0, failed: false })
    }

    fn bad(&self, detail: String) -> InputError {
        InputError::Bad { path: self.path.clone(), line: self.row, detail }
    }

    /// Refills the buffer; `Ok(false)` at the end of the file.
    fn fill(&mut self) -> Result<bool, InputError> {
        loop {
            if self.current.is_none() {
                if self.group >= self.reader.num_row_groups() {
                    return Ok(false);
                }
                let rg = self.reader.get_row_group(self.group).map_err(|e| self.bad(format!("row group {}: {e}", self.group)))?;
                let open = |i: usize| -> Result<Column, InputError> {
                    let r = rg.get_column_reader(self.columns[i].0).map_err(|e| self.bad(format!("row group {}: {e}", self.group)))?;
                    Column::new(r).ok_or_else(|| self.bad(format!("column {:?} changed type", self.columns[i].2)))
                };
                self.current = Some([open(0)?, open(1)?]);
                self.group += 1;
            }
            let Some([k, v]) = self.current.as_mut() else { continue };
            let keys = k.read(PARQUET_BATCH, self.columns[0].1);
            let values = v.read(PARQUET_BATCH, self.columns[1].1);
            let (keys, values) = match (keys, values) {
                (Ok(k), Ok(v)) => (k, v),
                (Err(e), _) | (_, Err(e)) => return Err(self.bad(e.to_string())),
            };
            if keys.len() != values.len() {
                return Err(self.bad(format!("columns differ in length ({} keys, {} values)", keys.len(), values.len())));
            }
            if keys.is_empty() {
                self.current = None;
                continue;
            }
            for (k, v) in keys.into_iter().zip(values) {
                self.row += 1;
                match (k, v) {
                    (Some(k), Some(v)) => self.buffered.push_back((k, v)),
                    (None, _) => return Err(self.bad(format!("null in key column {:?}", self.columns[0].2))),
                    (_, None) => return Err(self.bad(format!("null in value column {:?}", self.columns[1].2))),
                }
            }
            return Ok(true);
        }
    }
}

impl Iterator for ParquetRecords {
    type Item = Result<(Vec<u8>, Vec<u8>), InputError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(r) = self.buffered.pop_front() {
            return Some(Ok(r));
        }
        if self.failed {
            return None;
        }
        match self.fill() {
            Ok(true) => self.buffered.pop_front().map(Ok),
            Ok(false) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
