//! Who a request is from: AWS SigV4 signing and verification (the one
//! scheme every Strata client signs with, on every port), credentials files
//! (the AWS shared-credentials format), and the cluster's certificate
//! authority with the TLS configurations built on it.
//!
//! Owns: canonical requests and signing keys, the credentials file and the
//! cluster secret file, certificates and rustls configurations.
//! Must not depend on: any other Strata crate (it sits at the bottom beside
//! `strata-types`), an async runtime, or HTTP crates: a request reaches it
//! as borrowed parts, so the server's fast path, axum handlers and clients
//! share it. Rights (who may do what) are not here: they live with the
//! access keys in `strata-names`.
//!
//! Layer rule (checked by the test command): may use no Strata crate;
//! never an async runtime or an HTTP crate.

pub mod credentials;
pub mod sigv4;
pub mod tls;

pub use sigv4::{Claim, Credentials, Payload, RequestView, Scope, SigError, Signer, SigningKey};
pub use tls::{CLUSTER_SERVER_NAME, ClusterSecret, Identity, TlsError};

/// The service name the node's HTTP port verifies in credential scopes.
/// It is S3's, so `curl --aws-sigv4 aws:amz:REGION:s3` and any SDK's S3
/// signer can sign native requests; the signed `host` (with its port)
/// keeps a signature for one port from being replayed on the other.
pub const SERVICE: &str = "s3";
