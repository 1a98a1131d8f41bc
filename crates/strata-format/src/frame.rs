//! A checksummed frame around a serialized message: the unit of the
//! metadata service's log file and of every node-to-node message (Raft and
//! replica RPCs). Layout (docs/formats.md, "Frame"):
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `SFRM` |
//! | 2 | frame version (1) |
//! | 2 | message kind |
//! | 4 | payload length |
//! | n | payload (postcard) |
//! | 4 | CRC32C of everything before |

use crate::FormatError;

/// `SFRM` read as a little-endian u32.
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"SFRM");
/// Current frame version.
pub const FRAME_VERSION: u16 = 1;
/// Bytes before the payload.
pub const FRAME_HEADER_BYTES: usize = 12;
/// Largest payload accepted (a guard against garbage lengths).
pub const FRAME_PAYLOAD_MAX: usize = 1 << 30;

const WHAT: &str = "frame";

/// Frames `payload` as a message of `kind`.
pub fn encode_frame(kind: u16, payload: &[u8]) -> Vec<u8> {
    let (head, tail) = frame_around(kind, &[payload]);
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len() + 4);
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    out.extend_from_slice(&tail);
    out
}

/// The header and the checksum trailer of a frame of `kind` whose payload
/// is `parts` one after the other: the frame is `head`, the parts, `tail`.
/// For senders that pass a large payload on without copying it into one
/// buffer (a replica write's blob data); the bytes are those of
/// [`encode_frame`] over the parts joined.
pub fn frame_around(kind: u16, parts: &[&[u8]]) -> ([u8; FRAME_HEADER_BYTES], [u8; 4]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut head = [0u8; FRAME_HEADER_BYTES];
    head[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    head[4..6].copy_from_slice(&FRAME_VERSION.to_le_bytes());
    head[6..8].copy_from_slice(&kind.to_le_bytes());
    head[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    let crc = parts.iter().fold(crate::crc::crc32c(&head), |crc, p| crate::crc::crc32c_append(crc, p));
    (head, crc.to_le_bytes())
}

/// Total length of the frame whose header starts `b`, once the header is
/// whole and sane; for reading frames back to back from a file.
pub fn frame_len(b: &[u8]) -> Result<usize, FormatError> {
    if b.len() < FRAME_HEADER_BYTES {
        return Err(FormatError::Truncated { what: WHAT, need: FRAME_HEADER_BYTES, have: b.len() });
    }
    if u32::from_le_bytes([b[0], b[1], b[2], b[3]]) != FRAME_MAGIC {
        return Err(FormatError::BadMagic { what: WHAT });
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    if version != FRAME_VERSION {
        return Err(FormatError::Version { what: WHAT, version: version as u32 });
    }
    let len = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
    if len > FRAME_PAYLOAD_MAX {
        return Err(FormatError::Invalid { what: WHAT, detail: format!("payload length {len} over the limit") });
    }
    Ok(FRAME_HEADER_BYTES + len + 4)
}

/// The length of the first frame in `buf` once its header is in (`None`
/// before), refused when over `max` bytes: a reader of frames on a
/// connection waits for that many bytes, then decodes.
pub fn next_frame_len(buf: &[u8], max: usize) -> Result<Option<usize>, FormatError> {
    if buf.len() < FRAME_HEADER_BYTES {
        return Ok(None);
    }
    let n = frame_len(buf)?;
    if n > max {
        return Err(FormatError::Invalid { what: WHAT, detail: format!("a {n}-byte frame, over this connection's limit of {max}") });
    }
    Ok(Some(n))
}

/// Checks a whole frame and returns its kind and payload.
pub fn decode_frame(b: &[u8]) -> Result<(u16, &[u8]), FormatError> {
    let total = frame_len(b)?;
    if b.len() < total {
        return Err(FormatError::Truncated { what: WHAT, need: total, have: b.len() });
    }
    if b.len() > total {
        return Err(FormatError::Invalid { what: WHAT, detail: format!("{} bytes after the frame", b.len() - total) });
    }
    let stored = u32::from_le_bytes(b[total - 4..total].try_into().expect("4 bytes"));
    let computed = crate::crc::crc32c(&b[..total - 4]);
    if stored != computed {
        return Err(FormatError::Checksum { what: WHAT, stored, computed });
    }
    Ok((u16::from_le_bytes([b[6], b[7]]), &b[FRAME_HEADER_BYTES..total - 4]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let f = encode_frame(7, b"hello");
        assert_eq!(decode_frame(&f).unwrap(), (7, &b"hello"[..]));
        assert_eq!(frame_len(&f).unwrap(), f.len());
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 1;
            assert!(decode_frame(&g).is_err(), "flip at {i}");
        }
        assert!(decode_frame(&f[..f.len() - 1]).is_err());
    }

    #[test]
    fn a_frame_around_parts_is_the_frame_of_the_parts_joined() {
        let parts: [&[u8]; 4] = [b"head", b"", &[7u8; 5000], b"end"];
        let (head, tail) = frame_around(9, &parts);
        let sent = [&head[..], &parts.concat(), &tail[..]].concat();
        assert_eq!(sent, encode_frame(9, &parts.concat()));
        assert_eq!(decode_frame(&sent).unwrap(), (9, &parts.concat()[..]));
    }
}
