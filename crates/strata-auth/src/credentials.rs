//! Credentials files: an access key id and secret in the AWS shared
//! credentials format, so the same file serves `strata`, the AWS CLI and
//! boto3 (`AWS_SHARED_CREDENTIALS_FILE=strata-data/admin.credentials`).
//!
//! ```text
//! # Strata credentials, format 1
//! [default]
//! aws_access_key_id = SK...
//! aws_secret_access_key = ...
//! ```
//!
//! `strata server` writes its admin key to `<data>/admin.credentials` on
//! first start, readable only by its owner; `strata cluster init` writes the
//! cluster's first admin key the same way. People edit these files, so
//! they carry no checksum: a damaged one fails to parse or to sign, loudly.

use crate::sigv4::Credentials;
use std::io::Write;
use std::path::Path;

/// The first line written, naming the format and its version.
pub const HEADER: &str = "# Strata credentials, format 1";

/// Why a credentials file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file has no usable profile.
    #[error("{path}: {detail}")]
    Invalid {
        /// The file.
        path: String,
        /// What is missing or wrong.
        detail: String,
    },
}

/// Parses the `profile` section (`default` if `None`) of a credentials file.
pub fn parse(text: &str, profile: Option<&str>) -> Result<Credentials, String> {
    let want = profile.unwrap_or("default");
    let (mut section, mut id, mut secret) = (String::new(), None, None);
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().trim_start_matches("profile ").to_owned();
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!("line {}: expected `name = value`", n + 1));
        };
        if section != want {
            continue;
        }
        match k.trim() {
            "aws_access_key_id" => id = Some(v.trim().to_owned()),
            "aws_secret_access_key" => secret = Some(v.trim().to_owned()),
            _ => {}
        }
    }
    match (id, secret) {
        (Some(access_key_id), Some(secret_access_key)) if !access_key_id.is_empty() && !secret_access_key.is_empty() => {
            Ok(Credentials { access_key_id, secret_access_key })
        }
        _ => Err(format!("no profile [{want}] with aws_access_key_id and aws_secret_access_key")),
    }
}

/// The text of a credentials file holding `creds` as its default profile.
pub fn render(creds: &Credentials, comment: &str) -> String {
    let mut s = format!("{HEADER}\n");
    for line in comment.lines() {
        s.push_str(&format!("# {line}\n"));
    }
    s.push_str(&format!("[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n", creds.access_key_id, creds.secret_access_key));
    s
}

/// Reads the default profile of the file at `path`.
pub fn load(path: &Path) -> Result<Credentials, CredentialsError> {
    let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Io { path: path.display().to_string(), source })?;
    parse(&text, None).map_err(|detail| CredentialsError::Invalid { path: path.display().to_string(), detail })
}

/// Writes `text` to `path` atomically (temporary file, fsync, rename,
/// directory fsync), readable and writable only by its owner: key files
/// hold secrets.
pub fn write_private(path: &Path, text: &[u8]) -> Result<(), CredentialsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| CredentialsError::Io { path: path.display().to_string(), source };
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
    f.write_all(text).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn written_files_read_back_are_private_and_profiles_are_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.credentials");
        let creds = Credentials { access_key_id: "SKA".into(), secret_access_key: "secret".into() };
        write_private(&path, render(&creds, "the admin key").as_bytes()).unwrap();
        assert_eq!(load(&path).unwrap(), creds);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let text = "[default]\naws_access_key_id=A\naws_secret_access_key = B\n[profile other]\naws_access_key_id = C\naws_secret_access_key = D\n";
        assert_eq!(parse(text, Some("other")).unwrap().access_key_id, "C");
        assert_eq!(parse(text, None).unwrap().secret_access_key, "B");
        assert!(parse(text, Some("missing")).unwrap_err().contains("[missing]"));
        assert!(parse("[default]\nnonsense\n", None).unwrap_err().contains("line 2"));
    }
}
