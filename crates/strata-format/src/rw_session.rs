//! Read-write store sessions: the binary messages a client and a node
//! exchange on a connection upgraded from HTTP (`POST /rw/{store}/session`
//! with `Upgrade: strata-rw/1`; docs/formats.md, "Read-write store
//! sessions"). Spock's clients speak a socket protocol of their own to the
//! nodes rather than HTTP; this is Strata's, for the requests whose HTTP
//! framing would cost more than their work.
//!
//! Every message is one frame ([`crate::frame`]: magic, version, kind,
//! length, payload, CRC32C). A session belongs to one store, named by the
//! upgrade request, so requests carry no store. Answers come back in the
//! order of the requests; a client may send several before reading.
//!
//! Payload fields, all little-endian: a *key* or *value* is a `u32`
//! length and its bytes; a *clock* (the text form of a vector clock,
//! `node:counter,...@ms`, empty for none) and a *text* a `u16` length and
//! UTF-8 bytes.
//!
//! | kind | message | payload |
//! |---|---|---|
//! | `0x40` | get | key |
//! | `0x41` | put | key, clock read, value |
//! | `0x42` | delete | key, clock read |
//! | `0x48` | versions (answers a get) | covering clock, `u32` count, then per version: clock, value |
//! | `0x49` | written (answers a put or delete) | clock written |
//! | `0x4F` | error | `u16` HTTP status, code (text), message (text) |

use crate::FormatError;
use crate::frame::{decode_frame, encode_frame};

/// The `Upgrade` token of a session.
pub const PROTOCOL: &str = "strata-rw/1";

/// Kind of a get request.
pub const KIND_GET: u16 = 0x40;
/// Kind of a put request.
pub const KIND_PUT: u16 = 0x41;
/// Kind of a delete request.
pub const KIND_DELETE: u16 = 0x42;
/// Kind of a get's answer.
pub const KIND_VERSIONS: u16 = 0x48;
/// Kind of a put's or delete's answer.
pub const KIND_WRITTEN: u16 = 0x49;
/// Kind of an error answer.
pub const KIND_ERROR: u16 = 0x4F;

const WHAT: &str = "read-write session message";

/// A request of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// Every concurrent version of a key.
    Get {
        /// The key.
        key: &'a [u8],
    },
    /// A put over the versions read with `clock`.
    Put {
        /// The key.
        key: &'a [u8],
        /// The clock read (text form; empty when never read).
        clock: &'a str,
        /// The value.
        value: &'a [u8],
    },
    /// A delete of the versions read with `clock`.
    Delete {
        /// The key.
        key: &'a [u8],
        /// The clock read.
        clock: &'a str,
    },
}

/// An answer of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<'a> {
    /// A get's versions: their covering clock, then each version's clock
    /// and value.
    Versions {
        /// The clock covering every version read.
        clock: &'a str,
        /// Each version's clock and value.
        versions: Vec<(&'a str, &'a [u8])>,
    },
    /// The clock a put or delete wrote.
    Written {
        /// The clock.
        clock: &'a str,
    },
    /// A refusal, as the HTTP API would answer it.
    Error {
        /// The HTTP status.
        status: u16,
        /// The error code (`ObsoleteVersion`, ...).
        code: &'a str,
        /// What went wrong.
        message: &'a str,
    },
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Texts longer than a `u16` length allows are cut at a character boundary.
fn put_text(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if self.0.len() < n {
            return Err(FormatError::Truncated { what: WHAT, need: n, have: self.0.len() });
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, FormatError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, FormatError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn bytes(&mut self) -> Result<&'a [u8], FormatError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn text(&mut self) -> Result<&'a str, FormatError> {
        let n = self.u16()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| FormatError::Invalid { what: WHAT, detail: "a text field is not UTF-8".into() })
    }
    fn end(&self) -> Result<(), FormatError> {
        if self.0.is_empty() { Ok(()) } else { Err(FormatError::Invalid { what: WHAT, detail: format!("{} bytes after the last field", self.0.len()) }) }
    }
}

impl Request<'_> {
    /// The request as one frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::new();
        let kind = match self {
            Self::Get { key } => {
                put_bytes(&mut p, key);
                KIND_GET
            }
            Self::Put { key, clock, value } => {
                put_bytes(&mut p, key);
                put_text(&mut p, clock);
                put_bytes(&mut p, value);
                KIND_PUT
            }
            Self::Delete { key, clock } => {
                put_bytes(&mut p, key);
                put_text(&mut p, clock);
                KIND_DELETE
            }
        };
        encode_frame(kind, &p)
    }
}

/// Decodes a request from one whole frame.
pub fn decode_request(frame: &[u8]) -> Result<Request<'_>, FormatError> {
    let (kind, payload) = decode_frame(frame)?;
    let mut r = Reader(payload);
    let req = match kind {
        KIND_GET => Request::Get { key: r.bytes()? },
        KIND_PUT => Request::Put { key: r.bytes()?, clock: r.text()?, value: r.bytes()? },
        KIND_DELETE => Request::Delete { key: r.bytes()?, clock: r.text()? },
        other => return Err(FormatError::Invalid { what: WHAT, detail: format!("kind {other:#06x} is not a request") }),
    };
    r.end()?;
    Ok(req)
}

impl Answer<'_> {
    /// The answer as one frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::new();
        let kind = match self {
            Self::Versions { clock, versions } => {
                put_text(&mut p, clock);
                p.extend_from_slice(&(versions.len() as u32).to_le_bytes());
                for (c, v) in versions {
                    put_text(&mut p, c);
                    put_bytes(&mut p, v);
                }
                KIND_VERSIONS
            }
            Self::Written { clock } => {
                put_text(&mut p, clock);
                KIND_WRITTEN
            }
            Self::Error { status, code, message } => {
                p.extend_from_slice(&status.to_le_bytes());
                put_text(&mut p, code);
                put_text(&mut p, message);
                KIND_ERROR
            }
        };
        encode_frame(kind, &p)
    }
}

/// Decodes an answer from one whole frame.
pub fn decode_answer(frame: &[u8]) -> Result<Answer<'_>, FormatError> {
    let (kind, payload) = decode_frame(frame)?;
    let mut r = Reader(payload);
    let answer = match kind {
        KIND_VERSIONS => {
            let clock = r.text()?;
            let n = r.u32()? as usize;
            // Each version takes at least six bytes: no allocation on a
            // count the payload cannot hold.
            if n > r.0.len() / 6 {
                return Err(FormatError::Invalid { what: WHAT, detail: format!("{n} versions in {} bytes", r.0.len()) });
            }
            let mut versions = Vec::with_capacity(n);
            for _ in 0..n {
                versions.push((r.text()?, r.bytes()?));
            }
            Answer::Versions { clock, versions }
        }
        KIND_WRITTEN => Answer::Written { clock: r.text()? },
        KIND_ERROR => Answer::Error { status: r.u16()?, code: r.text()?, message: r.text()? },
        other => return Err(FormatError::Invalid { what: WHAT, detail: format!("kind {other:#06x} is not an answer") }),
    };
    r.end()?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FRAME_HEADER_BYTES, next_frame_len};

    #[test]
    fn requests_and_answers_round_trip() {
        let reqs = [Request::Get { key: b"k" }, Request::Put { key: b"key", clock: "1:2@3", value: &[0u8; 300] }, Request::Delete { key: b"", clock: "" }];
        for r in &reqs {
            let f = r.encode();
            assert_eq!(next_frame_len(&f, 1 << 20).unwrap(), Some(f.len()));
            assert_eq!(&decode_request(&f).unwrap(), r);
        }
        let answers = [
            Answer::Versions { clock: "1:2@3,2:1@4", versions: vec![("1:2@3", b"a".as_slice()), ("2:1@4", b"")] },
            Answer::Versions { clock: "", versions: vec![] },
            Answer::Written { clock: "1:1@1" },
            Answer::Error { status: 409, code: "ObsoleteVersion", message: "held 1:2" },
        ];
        for a in &answers {
            assert_eq!(&decode_answer(&a.encode()).unwrap(), a);
        }
    }

    #[test]
    fn damage_and_misuse_are_refused() {
        let f = Request::Put { key: b"key", clock: "1:2@3", value: b"v" }.encode();
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x10;
            assert!(decode_request(&g).is_err(), "flip at {i}");
        }
        // An answer is not a request, nor a request an answer.
        assert!(decode_request(&Answer::Written { clock: "" }.encode()).is_err());
        assert!(decode_answer(&f).is_err());
        // Too large for the reader's limit, before the bytes arrive.
        assert!(next_frame_len(&f[..FRAME_HEADER_BYTES], 8).is_err());
        assert_eq!(next_frame_len(&f[..FRAME_HEADER_BYTES - 1], 8).unwrap(), None);
        // A field longer than the payload, with a valid checksum.
        let mut p = Vec::new();
        p.extend_from_slice(&100u32.to_le_bytes());
        assert!(matches!(decode_request(&encode_frame(KIND_GET, &p)), Err(FormatError::Truncated { .. })));
        // A count no payload could hold.
        let mut p = Vec::new();
        put_text(&mut p, "");
        p.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_answer(&encode_frame(KIND_VERSIONS, &p)).is_err());
        // Trailing bytes.
        let mut p = Vec::new();
        put_bytes(&mut p, b"k");
        p.push(0);
        assert!(decode_request(&encode_frame(KIND_GET, &p)).is_err());
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary() {
        let long = "é".repeat(40_000);
        let f = Answer::Error { status: 500, code: "X", message: &long }.encode();
        let Answer::Error { message, .. } = decode_answer(&f).unwrap() else { panic!("not an error") };
        assert!(message.len() <= u16::MAX as usize && long.starts_with(message));
    }
}
