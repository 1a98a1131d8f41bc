//! Where a key goes: its MD5 (Spock §4.1), the chunk inside its bucket
//! (the MD5's first 4 bytes, big-endian, modulo the chunk count, §4.2.2),
//! and the index's search key (the MD5's first 8 bytes). The functions live
//! in the placement library, which routers share.

/// The hash keys are filed under. MD5 in every real store; tests swap in a
/// weak hash to force collisions of the 8-byte prefix.
pub trait KeyHash: Send + Sync {
    /// The 16-byte digest of a key.
    fn digest(&self, key: &[u8]) -> [u8; 16];
}

/// MD5, as Spock and Voldemort use.
#[derive(Debug, Clone, Copy, Default)]
pub struct Md5Hash;

impl KeyHash for Md5Hash {
    fn digest(&self, key: &[u8]) -> [u8; 16] {
        strata_placement::spock::key_digest(key)
    }
}

pub use strata_placement::spock::{chunk_of, partition_of, prefix};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_the_reference() {
        // RFC 1321's test suite.
        let hex = |d: [u8; 16]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(hex(Md5Hash.digest(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(Md5Hash.digest(b"message digest")), "f96b697d7cb7938d525a2f31aaf161d0");
        let d = Md5Hash.digest(b"abc");
        assert_eq!(prefix(&d), 0x9001_5098_3cd2_4fb0);
        assert_eq!(chunk_of(&d, 7), 0x9001_5098 % 7);
        assert_eq!(partition_of(&d, 1), 0);
        assert_eq!(partition_of(&[0xff; 16], 10), 9);
        assert_eq!(partition_of(&[0; 16], 10), 0);
    }
}
