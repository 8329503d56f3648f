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

use super::raw::RawRedisTls;

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

/// Reads and checks `[redis.tls]`; `Ok(None)` when nothing is set. Errors
/// are (field, reason).
pub fn redis_tls(raw: &RawRedisTls) -> Result<Option<RedisTls>, Vec<(&'static str, String)>> {
    if raw.is_empty() {
        return Ok(None);
    }
    let mut errors = Vec::new();
    let mut files = Vec::new();
    let ca = raw.ca_file.as_ref().and_then(|p| {
        files.push(("ca_file", p.clone()));
        read_pem(p, Pem::Certificates).map_err(|e| errors.push(("redis.tls.ca_file", e))).ok()
    });
    let client = match (&raw.cert_file, &raw.key_file) {
        (Some(cert), Some(key)) => {
            files.push(("cert_file", cert.clone()));
            files.push(("key_file", key.clone()));
            let c = read_pem(cert, Pem::Certificates).map_err(|e| errors.push(("redis.tls.cert_file", e))).ok();
            let k = read_pem(key, Pem::PrivateKey).map_err(|e| errors.push(("redis.tls.key_file", e))).ok();
            c.zip(k)
        }
        (Some(_), None) => {
            errors.push(("redis.tls.key_file", "must be set with cert_file (the client certificate's key)".into()));
            None
        }
        (None, Some(_)) => {
            errors.push(("redis.tls.cert_file", "must be set with key_file (the client certificate)".into()));
            None
        }
        (None, None) => None,
    };
    if errors.is_empty() {
        Ok(Some(RedisTls { ca, client, files }))
    } else {
        Err(errors)
    }
}

enum Pem {
    Certificates,
    PrivateKey,
}

/// A PEM file's bytes, once it is known to hold what it should. Messages
/// name the file, never its contents.
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
    fn tls_files_are_checked_at_load_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let raw = RawRedisTls {
            ca_file: Some(junk.clone()),
            cert_file: Some(dir.path().join("missing.pem")),
            key_file: Some(junk),
        };
        let errors = redis_tls(&raw).unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|(f, _)| *f).collect();
        assert_eq!(fields, ["redis.tls.ca_file", "redis.tls.cert_file", "redis.tls.key_file"]);
        assert!(errors[0].1.contains("no PEM certificate") && errors[1].1.contains("cannot read"), "{errors:?}");
        let half = RawRedisTls { cert_file: Some("c.pem".into()), ..Default::default() };
        assert_eq!(redis_tls(&half).unwrap_err()[0].0, "redis.tls.key_file");
        assert!(redis_tls(&RawRedisTls::default()).unwrap().is_none());
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
