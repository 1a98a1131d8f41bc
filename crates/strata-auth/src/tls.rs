//! TLS: the cluster's certificate authority, the certificates nodes mint
//! from it, and the rustls configurations of both ends.
//!
//! **The cluster secret** is a CA key and certificate that `strata cluster
//! secret` creates once and an operator hands to every node (and keeps from
//! everyone else). A node holding it mints itself a certificate at every
//! start; node-to-node connections are mutual TLS against that CA, so a
//! process without the secret can neither pass for a node (its client
//! certificate does not verify) nor be talked to as one (its server
//! certificate does not verify), and nothing between nodes crosses the wire
//! in clear. Holding the secret is being a node: it is one shared trust,
//! like Garage's RPC secret; replacing it is how a cluster would revoke it
//! (not built yet).
//!
//! Nodes ask for the server name [`CLUSTER_SERVER_NAME`]; a node's port
//! answers that name with its cluster certificate and any other (or none)
//! with its client-facing one (`--tls-cert`), which is the cluster
//! certificate too when no other is configured.
//!
//! The secret's file is JSON (machine-written, never edited), versioned and
//! checksummed; `docs/formats.md` has its fields.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;

/// The server name nodes ask each other for, and the name their cluster
/// certificates carry.
pub const CLUSTER_SERVER_NAME: &str = "strata-cluster";
/// The `format` field of a cluster secret file.
const SECRET_FORMAT: &str = "strata-cluster-secret";
/// The version written by this code.
pub const SECRET_VERSION: u32 = 1;

/// TLS set-up errors.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A cluster secret file that is not one, or is damaged.
    #[error("{path}: not a usable cluster secret: {detail}")]
    BadSecret {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// A certificate or key file without a usable PEM item.
    #[error("{path}: {detail}")]
    BadPem {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// Making a certificate failed.
    #[error("making a certificate: {0}")]
    Mint(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// ring's suites with AES-128-GCM first (TLS 1.3's mandatory suite, and
/// Go's and BoringSSL's first choice on AES hardware): 10 AES rounds where
/// AES-256 takes 14, so every byte a node encrypts or decrypts costs about
/// a fifth less CPU. In a 3-replica cluster each blob byte is encrypted
/// and decrypted three times. The other suites stay for clients without it.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites.sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

/// A certificate chain and its private key.
pub struct Identity {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Self { chain: self.chain.clone(), key: self.key.clone_key() }
    }
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Identity({} certificates, key hidden)", self.chain.len())
    }
}

impl Identity {
    /// Reads a PEM certificate chain and a PEM private key (`--tls-cert`,
    /// `--tls-key`).
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let bad = |p: &Path, detail: String| TlsError::BadPem { path: p.display().to_string(), detail };
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(cert).map_err(|e| bad(cert, e.to_string()))?.collect::<Result<_, _>>().map_err(|e| bad(cert, e.to_string()))?;
        if chain.is_empty() {
            return Err(bad(cert, "no CERTIFICATE in the file".into()));
        }
        let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, format!("no usable private key: {e}")))?;
        Ok(Self { chain, key: key_der })
    }

    /// A self-signed identity for [`CLUSTER_SERVER_NAME`] made now and
    /// kept in memory, with the roots that trust it and nothing else: the
    /// name a node outside a cluster answers to its own console, whatever
    /// certificate its clients get ([`server_config_with_own`]).
    pub fn own() -> Result<(Self, RootCertStore), TlsError> {
        let (cert, key) = self_signed(&[CLUSTER_SERVER_NAME.to_owned()])?;
        let roots = roots_from_pem(cert.as_bytes(), "the node's own certificate")?;
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| TlsError::Mint(e.to_string()))?;
        let chain = CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<Vec<_>, _>>().map_err(|e| TlsError::Mint(e.to_string()))?;
        Ok((Self { chain, key }, roots))
    }

    fn certified(&self) -> Result<Arc<CertifiedKey>, TlsError> {
        let key = provider().key_provider.load_private_key(self.key.clone_key()).map_err(|e| TlsError::Config(e.to_string()))?;
        Ok(Arc::new(CertifiedKey::new(self.chain.clone(), key)))
    }
}

/// A self-signed certificate for `names` (DNS names or IP addresses) and
/// its key, both PEM: `--tls-self-signed` for tests and trials.
pub fn self_signed(names: &[String]) -> Result<(String, String), TlsError> {
    let ck = rcgen::generate_simple_self_signed(names.to_vec()).map_err(|e| TlsError::Mint(e.to_string()))?;
    Ok((ck.cert.pem(), ck.signing_key.serialize_pem()))
}

/// The cluster's certificate authority: its key and certificate.
#[derive(Clone)]
pub struct ClusterSecret {
    cluster_id: String,
    ca_cert_pem: String,
    ca_key_pem: String,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterSecret({}, key hidden)", self.cluster_id)
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SecretFile {
    format: String,
    version: u32,
    cluster_id: String,
    ca_cert: String,
    ca_key: String,
    crc32c: String,
}

fn secret_crc(cluster_id: &str, cert: &str, key: &str) -> String {
    let mut c = crc32c::crc32c(cluster_id.as_bytes());
    c = crc32c::crc32c_append(c, b"\n");
    c = crc32c::crc32c_append(c, cert.as_bytes());
    c = crc32c::crc32c_append(c, b"\n");
    c = crc32c::crc32c_append(c, key.as_bytes());
    format!("{c:08x}")
}

/// The CA's certificate parameters, a function of the cluster id alone, so
/// a node rebuilds the issuer from the stored key without parsing the
/// certificate (the subject a child names must be the CA's exactly).
fn ca_params(cluster_id: &str) -> rcgen::CertificateParams {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(rcgen::DnType::OrganizationName, "Strata");
    p.distinguished_name.push(rcgen::DnType::CommonName, format!("Strata cluster CA {cluster_id}"));
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign, rcgen::KeyUsagePurpose::DigitalSignature];
    // The trust is the key, shared by every node; expiry would add nothing
    // but an outage (see the module's header).
    p.not_before = rcgen::date_time_ymd(2020, 1, 1);
    p.not_after = rcgen::date_time_ymd(2120, 1, 1);
    p
}

impl ClusterSecret {
    /// A new CA with a random cluster id.
    pub fn generate() -> Result<Self, TlsError> {
        let mut id = [0u8; 8];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut id);
        let cluster_id = hex::encode(id);
        let key = rcgen::KeyPair::generate().map_err(|e| TlsError::Mint(e.to_string()))?;
        let cert = ca_params(&cluster_id).self_signed(&key).map_err(|e| TlsError::Mint(e.to_string()))?;
        Ok(Self { cluster_id, ca_cert_pem: cert.pem(), ca_key_pem: key.serialize_pem() })
    }

    /// The cluster's id (random, in the CA's name).
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// 32 bytes derived from the CA's private key for `purpose`
    /// (HMAC-SHA256): a secret every node of the cluster shares, such as
    /// the root key of the key store, without another file to hand out.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        use hmac::{KeyInit, Mac};
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(self.ca_key_pem.as_bytes()).expect("HMAC takes any key length");
        m.update(b"strata cluster secret derivation: ");
        m.update(purpose.as_bytes());
        m.finalize().into_bytes().into()
    }

    /// The CA certificate, PEM: what clients trust (`cluster-ca.pem`).
    pub fn ca_cert_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// The file's bytes.
    pub fn to_file(&self) -> Vec<u8> {
        let f = SecretFile {
            format: SECRET_FORMAT.into(),
            version: SECRET_VERSION,
            cluster_id: self.cluster_id.clone(),
            ca_cert: self.ca_cert_pem.clone(),
            ca_key: self.ca_key_pem.clone(),
            crc32c: secret_crc(&self.cluster_id, &self.ca_cert_pem, &self.ca_key_pem),
        };
        let mut b = serde_json::to_vec_pretty(&f).expect("a secret file serializes");
        b.push(b'\n');
        b
    }

    /// Parses a secret file's bytes, checking format, version and checksum
    /// and that the key is the certificate's.
    pub fn parse(bytes: &[u8], path: &str) -> Result<Self, TlsError> {
        let bad = |detail: String| TlsError::BadSecret { path: path.into(), detail };
        let f: SecretFile = serde_json::from_slice(bytes).map_err(|e| bad(format!("not a secret file ({e})")))?;
        if f.format != SECRET_FORMAT {
            return Err(bad(format!("format {:?}, expected {SECRET_FORMAT:?}", f.format)));
        }
        if f.version != SECRET_VERSION {
            return Err(bad(format!("version {} (this Strata reads version {SECRET_VERSION})", f.version)));
        }
        if secret_crc(&f.cluster_id, &f.ca_cert, &f.ca_key) != f.crc32c {
            return Err(bad("checksum mismatch: the file is damaged".into()));
        }
        let s = Self { cluster_id: f.cluster_id, ca_cert_pem: f.ca_cert, ca_key_pem: f.ca_key };
        // A certificate minted now must verify against the stored CA.
        let probe = s.mint(&[CLUSTER_SERVER_NAME.into()]).map_err(|e| bad(e.to_string()))?;
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(s.roots()?), provider()).build().map_err(|e| bad(e.to_string()))?;
        let name = ServerName::try_from(CLUSTER_SERVER_NAME).expect("a valid DNS name");
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            &*verifier,
            &probe.chain[0],
            &[],
            &name,
            &[],
            rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_800_000_000)),
        )
        .map_err(|e| bad(format!("its key does not match its certificate ({e})")))?;
        Ok(s)
    }

    /// Reads the secret file at `path`.
    pub fn load(path: &Path) -> Result<Self, TlsError> {
        let bytes = std::fs::read(path).map_err(|source| TlsError::Io { path: path.display().to_string(), source })?;
        Self::parse(&bytes, &path.display().to_string())
    }

    /// The CA as a root store.
    pub fn roots(&self) -> Result<RootCertStore, TlsError> {
        roots_from_pem(self.ca_cert_pem.as_bytes(), "the cluster secret")
    }

    /// A certificate signed by the CA for `names` (the first is the
    /// subject; DNS names or IP addresses), usable by a server and a client.
    pub fn mint(&self, names: &[String]) -> Result<Identity, TlsError> {
        let err = |e: rcgen::Error| TlsError::Mint(e.to_string());
        let ca_key = rcgen::KeyPair::from_pem(&self.ca_key_pem).map_err(err)?;
        let issuer = rcgen::Issuer::new(ca_params(&self.cluster_id), ca_key);
        let mut p = rcgen::CertificateParams::new(names.to_vec()).map_err(err)?;
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, names.first().cloned().unwrap_or_default());
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2120, 1, 1);
        let key = rcgen::KeyPair::generate().map_err(err)?;
        let cert = p.signed_by(&key, &issuer).map_err(err)?;
        let ca = CertificateDer::from_pem_slice(self.ca_cert_pem.as_bytes()).map_err(|e| TlsError::Mint(e.to_string()))?;
        Ok(Identity { chain: vec![cert.der().clone(), ca], key: PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| TlsError::Mint(e.to_string()))? })
    }
}

/// Every certificate of a PEM bundle as roots.
pub fn roots_from_pem(pem: &[u8], what: &str) -> Result<RootCertStore, TlsError> {
    let bad = |detail: String| TlsError::BadPem { path: what.into(), detail };
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem) {
        roots.add(c.map_err(|e| bad(e.to_string()))?).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no CERTIFICATE in it".into()));
    }
    Ok(roots)
}

/// The roots a client trusts from `path`: a PEM bundle (`cluster-ca.pem`,
/// a self-signed certificate, a private CA), or a cluster secret file.
pub fn roots_from_file(path: &Path) -> Result<RootCertStore, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Io { path: path.display().to_string(), source })?;
    if bytes.trim_ascii_start().starts_with(b"{") {
        return ClusterSecret::parse(&bytes, &path.display().to_string())?.roots();
    }
    roots_from_pem(&bytes, &path.display().to_string())
}

/// Chooses the certificate by the server name asked for: the cluster's for
/// [`CLUSTER_SERVER_NAME`], the client-facing one otherwise.
#[derive(Debug)]
struct ByServerName {
    cluster: Option<Arc<CertifiedKey>>,
    public: Arc<CertifiedKey>,
}

impl ResolvesServerCert for ByServerName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match (&self.cluster, hello.server_name()) {
            (Some(c), Some(CLUSTER_SERVER_NAME)) => Some(c.clone()),
            _ => Some(self.public.clone()),
        }
    }
}

/// A server configuration. `public` is what clients get (`None`: the
/// cluster's certificate); with `cluster`, nodes get the cluster's
/// certificate and a client certificate, optional, is verified against
/// the cluster's CA (a connection that presents one is a node's).
pub fn server_config(public: Option<&Identity>, cluster: Option<(&Identity, &ClusterSecret)>) -> Result<Arc<ServerConfig>, TlsError> {
    let cfg = |e: rustls::Error| TlsError::Config(e.to_string());
    let builder = ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(cfg)?;
    let (builder, cluster_key) = match cluster {
        Some((identity, secret)) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(secret.roots()?), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            (builder.with_client_cert_verifier(verifier), Some(identity.certified()?))
        }
        None => (builder.with_no_client_auth(), None),
    };
    let public = match (public, &cluster_key) {
        (Some(p), _) => p.certified()?,
        (None, Some(c)) => c.clone(),
        (None, None) => {
            return Err(TlsError::Config("a TLS port needs a certificate (--tls-cert and --tls-key, --tls-self-signed, or a cluster secret)".into()));
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(ByServerName { cluster: cluster_key, public }));
    // This server's order of suites decides, not the client's.
    config.ignore_client_order = true;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A server configuration for a node outside a cluster: clients get
/// `public` (an operator's certificate), a client asking for
/// [`CLUSTER_SERVER_NAME`] gets `own` ([`Identity::own`]) — the node's
/// console, calling its ports on a loopback address `public` need not name.
pub fn server_config_with_own(public: &Identity, own: &Identity) -> Result<Arc<ServerConfig>, TlsError> {
    let cfg = |e: rustls::Error| TlsError::Config(e.to_string());
    let builder = ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(cfg)?.with_no_client_auth();
    let mut config = builder.with_cert_resolver(Arc::new(ByServerName { cluster: Some(own.certified()?), public: public.certified()? }));
    config.ignore_client_order = true;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration trusting `roots`, presenting `identity` (a node's
/// or a secret holder's certificate) when given.
pub fn client_config(roots: RootCertStore, identity: Option<&Identity>) -> Result<Arc<ClientConfig>, TlsError> {
    let cfg = |e: rustls::Error| TlsError::Config(e.to_string());
    let builder = ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(cfg)?.with_root_certificates(roots);
    let config = match identity {
        Some(id) => builder.with_client_auth_cert(id.chain.clone(), id.key.clone_key()).map_err(cfg)?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The system's roots (the Mozilla set as the OS ships it), for
/// `https://` sources outside the cluster.
pub fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for c in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(c);
    }
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_survives_its_file_and_refuses_damage() {
        let s = ClusterSecret::generate().unwrap();
        let file = s.to_file();
        let back = ClusterSecret::parse(&file, "f").unwrap();
        assert_eq!(back.cluster_id(), s.cluster_id());
        // One character of the key changed: the checksum says so.
        let text = String::from_utf8(file.clone()).unwrap();
        let i = text.find("MIG").expect("a PEM body") + 10;
        let mut damaged = text.into_bytes();
        damaged[i] = if damaged[i] == b'A' { b'B' } else { b'A' };
        assert!(matches!(ClusterSecret::parse(&damaged, "f"), Err(TlsError::BadSecret { detail, .. }) if detail.contains("checksum")));
        // Another cluster's key under this certificate does not verify.
        let other = ClusterSecret::generate().unwrap();
        let mixed = ClusterSecret { ca_key_pem: other.ca_key_pem.clone(), ..s.clone() };
        let mut f: serde_json::Value = serde_json::from_slice(&mixed.to_file()).unwrap();
        f["crc32c"] = secret_crc(&mixed.cluster_id, &mixed.ca_cert_pem, &mixed.ca_key_pem).into();
        assert!(ClusterSecret::parse(&serde_json::to_vec(&f).unwrap(), "f").is_err());
        assert!(matches!(ClusterSecret::parse(b"{}", "f"), Err(TlsError::BadSecret { .. })));
    }

    /// A client that prefers AES-256 (ring's default order, as the node
    /// and client crates build theirs) gets AES-128-GCM from a Strata server.
    #[test]
    fn servers_choose_aes_128_gcm_whatever_the_client_prefers() {
        let s = ClusterSecret::generate().unwrap();
        let node = s.mint(&[CLUSTER_SERVER_NAME.into()]).unwrap();
        let server_cfg = server_config(None, Some((&node, &s))).unwrap();
        let client_cfg = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(s.roots().unwrap())
            .with_no_client_auth();
        assert_eq!(
            client_cfg.crypto_provider().cipher_suites[0].suite(),
            rustls::CipherSuite::TLS13_AES_256_GCM_SHA384,
            "the client must prefer AES-256 for this test to mean anything"
        );
        let name = rustls::pki_types::ServerName::try_from(CLUSTER_SERVER_NAME).unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(client_cfg), name).unwrap();
        let mut server = rustls::ServerConnection::new(server_cfg).unwrap();
        for _ in 0..10 {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut &wire[..]).unwrap();
            server.process_new_packets().unwrap();
            let mut back = Vec::new();
            server.write_tls(&mut back).unwrap();
            client.read_tls(&mut &back[..]).unwrap();
            client.process_new_packets().unwrap();
        }
        assert!(!client.is_handshaking() && !server.is_handshaking(), "the handshake did not finish");
        assert_eq!(server.negotiated_cipher_suite().map(|c| c.suite()), Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256));
    }

    /// Runs a handshake in memory; the first error either side met.
    fn handshake(client: Arc<ClientConfig>, server: Arc<ServerConfig>, name: &str) -> Result<(), rustls::Error> {
        let name = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("a valid name");
        let mut client = rustls::ClientConnection::new(client, name)?;
        let mut server = rustls::ServerConnection::new(server)?;
        for _ in 0..10 {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).map_err(|e| rustls::Error::General(e.to_string()))?;
            server.read_tls(&mut &wire[..]).map_err(|e| rustls::Error::General(e.to_string()))?;
            server.process_new_packets()?;
            let mut back = Vec::new();
            server.write_tls(&mut back).map_err(|e| rustls::Error::General(e.to_string()))?;
            client.read_tls(&mut &back[..]).map_err(|e| rustls::Error::General(e.to_string()))?;
            client.process_new_packets()?;
        }
        if client.is_handshaking() { Err(rustls::Error::General("the handshake did not finish".into())) } else { Ok(()) }
    }

    /// With an operator's certificate, a node's own console (trusting only
    /// the node's own certificate, asking for the cluster name) gets in; a
    /// client asking for another name gets the operator's certificate, which
    /// the console does not trust, and the operator's clients trust only that.
    #[test]
    fn the_own_certificate_answers_only_its_name() {
        let dir = std::env::temp_dir().join(format!("strata-own-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = self_signed(&["example.test".into()]).unwrap();
        std::fs::write(dir.join("c.pem"), &cert).unwrap();
        std::fs::write(dir.join("k.pem"), &key).unwrap();
        let public = Identity::from_pem_files(&dir.join("c.pem"), &dir.join("k.pem")).unwrap();
        let (own, own_roots) = Identity::own().unwrap();
        let server = server_config_with_own(&public, &own).unwrap();
        let console = client_config(own_roots, None).unwrap();
        handshake(console.clone(), server.clone(), CLUSTER_SERVER_NAME).expect("the console gets the node's own certificate");
        assert!(handshake(console, server.clone(), "example.test").is_err(), "the console must not trust the operator's certificate");
        let operator = client_config(roots_from_pem(cert.as_bytes(), "c").unwrap(), None).unwrap();
        handshake(operator.clone(), server.clone(), "example.test").expect("clients get the operator's certificate");
        assert!(handshake(operator, server, CLUSTER_SERVER_NAME).is_err(), "the own certificate is not the operator's");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn configurations_build_for_every_mode() {
        let s = ClusterSecret::generate().unwrap();
        let node = s.mint(&[CLUSTER_SERVER_NAME.into(), "127.0.0.1".into()]).unwrap();
        server_config(None, Some((&node, &s))).unwrap();
        let (cert, key) = self_signed(&["localhost".into()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.pem"), &cert).unwrap();
        std::fs::write(dir.path().join("k.pem"), &key).unwrap();
        let public = Identity::from_pem_files(&dir.path().join("c.pem"), &dir.path().join("k.pem")).unwrap();
        server_config(Some(&public), None).unwrap();
        server_config(Some(&public), Some((&node, &s))).unwrap();
        assert!(server_config(None, None).is_err());
        client_config(s.roots().unwrap(), Some(&node)).unwrap();
        std::fs::write(dir.path().join("secret"), s.to_file()).unwrap();
        assert_eq!(roots_from_file(&dir.path().join("secret")).unwrap().len(), 1);
        assert_eq!(roots_from_file(&dir.path().join("c.pem")).unwrap().len(), 1);
        assert!(Identity::from_pem_files(&dir.path().join("k.pem"), &dir.path().join("k.pem")).is_err());
    }
}
