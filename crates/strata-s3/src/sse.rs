//! Server-side encryption requests. Strata does not encrypt objects yet, so
//! a request that asks for it (SSE-S3, SSE-KMS or SSE-C, on a put, a copy,
//! a multipart upload or a part) is refused and stores nothing: storing the
//! object in the clear would let the client believe it encrypted. A get or
//! head that supplies an SSE-C key is refused as S3 refuses one for an
//! object stored without encryption.

use s3s::{S3Result, s3_error};

/// The encryption a write request asks for, by header.
#[derive(Default)]
pub(crate) struct Asked<'a> {
    /// `x-amz-server-side-encryption` (`AES256`, `aws:kms`, `aws:kms:dsse`).
    pub sse: Option<&'a str>,
    /// `x-amz-server-side-encryption-customer-algorithm` (or its key
    /// headers): SSE-C.
    pub customer: bool,
    /// `x-amz-server-side-encryption-aws-kms-key-id` or its context.
    pub kms: bool,
    /// `x-amz-server-side-encryption-bucket-key-enabled: true`.
    pub bucket_key: bool,
    /// `x-amz-copy-source-server-side-encryption-customer-*`: the source of
    /// a copy is named as SSE-C encrypted.
    pub copy_source_customer: bool,
}

/// The [`Asked`] of an input with S3's full set of encryption headers
/// (PutObject, CopyObject, CreateMultipartUpload).
macro_rules! encryption_asked {
    ($i:expr) => {
        crate::sse::Asked {
            sse: $i.server_side_encryption.as_ref().map(|s| s.as_str()),
            customer: $i.sse_customer_algorithm.is_some() || $i.sse_customer_key.is_some(),
            kms: $i.ssekms_key_id.is_some() || $i.ssekms_encryption_context.is_some(),
            bucket_key: $i.bucket_key_enabled == Some(true),
            copy_source_customer: false,
        }
    };
}
pub(crate) use encryption_asked;

/// Refuses a write that asks for server-side encryption (501, naming the
/// header), or names an encrypted copy source (400).
pub(crate) fn refuse_write(a: &Asked<'_>) -> S3Result<()> {
    if a.copy_source_customer {
        return Err(s3_error!(InvalidRequest, "the copy source is not encrypted with a customer key: Strata stores no encrypted objects"));
    }
    let header = if a.customer {
        Some("x-amz-server-side-encryption-customer-algorithm (SSE-C)".to_string())
    } else if let Some(sse) = a.sse {
        Some(format!("x-amz-server-side-encryption: {sse}"))
    } else if a.kms {
        Some("x-amz-server-side-encryption-aws-kms-key-id (SSE-KMS)".to_string())
    } else if a.bucket_key {
        Some("x-amz-server-side-encryption-bucket-key-enabled".to_string())
    } else {
        None
    };
    match header {
        Some(h) => Err(s3_error!(NotImplemented, "server-side encryption is not supported yet ({h}); nothing was stored")),
        None => Ok(()),
    }
}

/// Refuses a read that supplies an SSE-C key: no object here is encrypted
/// with one (S3 answers 400 for an object stored without encryption).
pub(crate) fn refuse_read(customer: bool) -> S3Result<()> {
    if customer {
        return Err(s3_error!(InvalidRequest, "the encryption parameters are not applicable to this object: it is not encrypted with a customer key"));
    }
    Ok(())
}
