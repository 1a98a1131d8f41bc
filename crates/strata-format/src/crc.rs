//! CRC32C (Castagnoli), the checksum of Strata's formats, with `crc-fast`:
//! it folds with carry-less multiplies (AVX-512 where the CPU has it)
//! where the `crc32c` crate uses the SSE4.2 instruction. Records are
//! checked on every read, so this is on the GET path of every large blob:
//! a profile of cached 64 MiB GETs at 16 clients spent a quarter of the
//! server's CPU in `crc32c`, and `strata bench s3 --no-minio --sizes 64MiB
//! --concurrency 16 --rounds 1 --seconds 4 --server-arg=--write-cache=8GiB`
//! gave 58 and 74 GETs/s with it, 71 and 82 with `crc-fast` (binaries
//! alternating). The values are the same CRC32C; nothing on disk changes.

use crc_fast::CrcAlgorithm::Crc32Iscsi;

/// The CRC32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(Crc32Iscsi, data) as u32
}

/// The CRC32C of the bytes `crc` covers followed by `data`: the digest
/// resumes from `crc` (its register is `crc` with the final XOR undone).
/// Not `checksum_combine`, which costs 2 to 6 µs whatever the lengths (a
/// matrix power per call): on every record's header it had cost 4 KiB GETs
/// about a tenth of their rate.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut d = crc_fast::Digest::new_with_init_state(Crc32Iscsi, u64::from(crc ^ 0xffff_ffff));
    d.update(data);
    d.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_value() {
        // The CRC32C check value (RFC 3720, "123456789").
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    proptest! {
        #[test]
        fn same_as_the_reference_crate(a in proptest::collection::vec(any::<u8>(), 0..5000), b in proptest::collection::vec(any::<u8>(), 0..5000)) {
            prop_assert_eq!(crc32c(&a), ::crc32c::crc32c(&a));
            prop_assert_eq!(crc32c_append(crc32c(&a), &b), ::crc32c::crc32c_append(::crc32c::crc32c(&a), &b));
        }
    }
}
