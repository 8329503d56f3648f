//! Secrets in the configuration: which values are secret, a type that never
//! prints its value, and the TLS files of `[redis.tls]` read and checked at
//! load.
//!
//! The rule (the README's "Security"): a password, token or key never
//! appears in a log line, a metric, a health answer or an error message.
//! URLs lose their password ([`super::redact_url`]); every value whose name
//! holds `password`, `secret`, `token` or `key` is printed as `***`
//! ([`is_secret_name`]), whether it is a `[kafka.options]` entry or a
//! `RANKFLOW_` override.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// What a secret prints as.
pub const REDACTED: &str = "***";

/// Whether a setting or option of this name holds a secret (its value is
/// never printed): `sasl.password`, `ssl.key.password`,
/// `sasl.oauthbearer.client.secret`, `ssl.key.pem`, `redis.password`.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "secret", "token", "key"].iter().any(|w| name.contains(w))
}

/// librdkafka options as they may be printed: secret values replaced.
pub fn redacted_options(options: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    options.iter().map(|(k, v)| (k.as_str(), if is_secret_name(k) { REDACTED } else { v.as_str() })).collect()
}

/// A secret string (a password): its `Debug` and `Display` print `***`;
/// [`Secret::expose`] is the one way to its value, for the client that
/// sends it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the connection that sends it. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    /// A string, or a number (an environment override of digits is read as
    /// one); a wrong type is refused without echoing the value, as serde's
    /// own message would.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Secret;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Secret, E> {
                Ok(Secret::new(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Secret, E> {
                Ok(Secret::new(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Secret, E> {
                Ok(Secret::new(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Secret, E> {
                Err(E::custom("must be a string"))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Secret, E> {
                Err(E::custom("must be a string"))
            }
        }
        d.deserialize_any(V)
    }
}

/// `redis.password_file`: the password, without the file's trailing newline.
pub fn read_password_file(path: &Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let password = text.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(Secret::new(password))
}

/// `[redis.tls]`, read and checked: the PEM files themselves, so that a
/// missing or malformed file is a configuration error naming its field,
/// not a failed handshake later. Certificates are read once, at start: a
/// renewed certificate takes a restart.
#[derive(Clone)]
pub struct RedisTls {
    /// The CA certificates (PEM) that sign the servers'; `None`: the
    /// system's roots.
    pub ca: Option<Vec<u8>>,
    /// The client certificate chain and its key (PEM), for mutual TLS.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
    /// Where they came from, for messages.
    pub files: Vec<(&'static str, PathBuf)>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("RedisTls");
        for (field, path) in &self.files {
            s.field(field, path);
        }
        s.finish()
    }
}

/// A PEM file of certificates (a CA's, a client's chain), once it is known
/// to hold at least one. Messages name the file, never its contents.
pub fn read_certificates(path: &Path) -> Result<Vec<u8>, String> {
    read_pem(path, Pem::Certificates)
}

/// A PEM file holding a private key.
pub fn read_private_key(path: &Path) -> Result<Vec<u8>, String> {
    read_pem(path, Pem::PrivateKey)
}

enum Pem {
    Certificates,
    PrivateKey,
}

fn read_pem(path: &Path, what: Pem) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match what {
        Pem::Certificates => {
            let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
            match certs {
                Ok(c) if !c.is_empty() => Ok(bytes),
                _ => Err(format!("{} holds no PEM certificate", path.display())),
            }
        }
        Pem::PrivateKey => match PrivateKeyDer::from_pem_slice(&bytes) {
            Ok(_) => Ok(bytes),
            Err(_) => Err(format!("{} holds no PEM private key", path.display())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_cover_passwords_tokens_and_keys() {
        for name in ["sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret", "ssl.key.pem", "PASSWORD"] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["sasl.username", "security.protocol", "ssl.ca.location", "sasl.mechanism"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn a_secret_never_prints_its_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "*** ***");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn options_print_without_their_secrets() {
        let options: BTreeMap<String, String> =
            [("sasl.password", "pw"), ("sasl.username", "u")].map(|(k, v)| (k.to_string(), v.to_string())).into();
        let shown = format!("{:?}", redacted_options(&options));
        assert!(!shown.contains("pw") && shown.contains("\"u\""), "{shown}");
    }

    #[test]
    fn pem_files_are_checked_for_what_they_hold_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let e = read_certificates(&junk).unwrap_err();
        assert!(e.contains("junk.pem holds no PEM certificate") && !e.contains("not a certificate"), "{e}");
        assert!(read_private_key(&junk).unwrap_err().contains("no PEM private key"));
        assert!(read_certificates(&dir.path().join("missing.pem")).unwrap_err().contains("cannot read"));
    }

    #[test]
    fn a_password_file_loses_its_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "s3cret\n").unwrap();
        assert_eq!(read_password_file(&p).unwrap().expose(), "s3cret");
        std::fs::write(&p, "\n").unwrap();
        assert!(read_password_file(&p).unwrap_err().contains("is empty"));
    }
}
