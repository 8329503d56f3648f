//! TLS and authentication for the secured tests: a throwaway PKI made by
//! `deploy/tls/make-certs.sh` (a CA, a certificate for 127.0.0.1 that
//! servers and cluster peers use, a client certificate, and a second CA
//! nobody trusts with a client certificate of its own), the ACL users of a secured Redis, and
//! the users and TLS settings of a secured Kafka broker (which terminates
//! TLS itself and checks SCRAM and PLAIN passwords), and a TLS endpoint in
//! front of the tests' own Schema Registry.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{end, temp_dir, wait_listening, WorkerConfig};

/// The ACL user rankflow runs under: its keys only, no admin or dangerous command.
pub const REDIS_USER: &str = "rankflow";
pub const REDIS_PASSWORD: &str = "rf-redis-S3cret-pw";
/// The ACL rule of [`REDIS_USER`], as the README gives it (prefix `lb`).
pub const REDIS_ACL: &[&str] = &["~lb:*", "&*", "+@all", "-@admin", "-@dangerous"];
/// The harness's own user (checks, cluster setup, replication).
pub const REDIS_ADMIN: &str = "admin";
pub const REDIS_ADMIN_PASSWORD: &str = "adm-redis-pw";

/// The user rankflow authenticates as on the secured broker (SCRAM-SHA-512 or PLAIN).
pub const KAFKA_USER: &str = "rankflow";
pub const KAFKA_PASSWORD: &str = "rf-kafka-S3cret-pw";
/// The harness's own user (topics, producing, reading back).
pub const KAFKA_ADMIN: &str = "harness";
pub const KAFKA_ADMIN_PASSWORD: &str = "harness-kafka-pw";

/// Arguments split at white space (a temp dir's path holds none).
fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// Certificates in a temp dir, made by `deploy/tls/make-certs.sh` (so the
/// tests use the script the compose overlay does): `ca.crt`,
/// `redis.crt`/`redis.key` (servers and cluster peers, for 127.0.0.1 and
/// localhost), `client.crt`/`client.key` (signed by the CA); and the same
/// again under `rogue/`, a CA nobody trusts and a client certificate it signed.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    // No `Default`: making a PKI runs openssl and writes files.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Pki {
        let pki = Pki { dir: temp_dir() };
        for dir in [pki.path(""), pki.path("rogue")] {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/tls/make-certs.sh");
            let out = Command::new(script).arg(&dir).output().expect("make-certs.sh runs");
            assert!(out.status.success(), "make-certs.sh: {}", String::from_utf8_lossy(&out.stderr));
        }
        pki
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `redis-server` arguments: TLS only (no plain port), client
    /// certificates required, TLS between replicas and cluster peers, the
    /// default user off, and the harness's and rankflow's users.
    pub fn redis_server_args(&self, port: u16) -> Vec<String> {
        let (d, acl) = (self.dir.path().display(), REDIS_ACL.join(" "));
        words(&format!(
            "--port 0 --tls-port {port} --tls-cert-file {d}/redis.crt --tls-key-file {d}/redis.key \
             --tls-ca-cert-file {d}/ca.crt --tls-auth-clients yes --tls-replication yes --tls-cluster yes \
             --user default off --user {REDIS_ADMIN} on >{REDIS_ADMIN_PASSWORD} ~* &* +@all \
             --user {REDIS_USER} on >{REDIS_PASSWORD} {acl} --masteruser {REDIS_ADMIN} --masterauth {REDIS_ADMIN_PASSWORD}"
        ))
    }

    /// `redis-cli` arguments that reach a secured node as the harness's user.
    pub fn redis_cli_args(&self) -> Vec<String> {
        let d = self.dir.path().display();
        words(&format!(
            "--tls --cacert {d}/ca.crt --cert {d}/client.crt --key {d}/client.key \
             --user {REDIS_ADMIN} --pass {REDIS_ADMIN_PASSWORD} --no-auth-warning"
        ))
    }

    /// The client certificates as redis-rs takes them (trusting this CA).
    pub fn redis_certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: std::fs::read(self.path("client.crt")).unwrap(),
                client_key: std::fs::read(self.path("client.key")).unwrap(),
            }),
            root_cert: Some(std::fs::read(self.path("ca.crt")).unwrap()),
        }
    }

    /// `[redis.tls]` (and the password, from a file) of a worker running
    /// as [`REDIS_USER`].
    pub fn redis_worker_section(&self) -> String {
        let pw = self.path("redis-password");
        std::fs::write(&pw, format!("{REDIS_PASSWORD}\n")).unwrap();
        format!(
            "password_file = \"{}\"\n[redis.tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            pw.display(),
            self.path("ca.crt").display(),
            self.path("client.crt").display(),
            self.path("client.key").display()
        )
    }

    /// Makes `cfg` a worker of a secured Redis (at `worker_url`, as the
    /// restricted user, its `[redis]` section's other lines kept) and a
    /// secured broker, as rankflow's users.
    pub fn secure(&self, cfg: &mut WorkerConfig, worker_url: String) {
        cfg.redis_url = worker_url;
        cfg.redis_extra = format!("{}\n{}", cfg.redis_extra, self.redis_worker_section());
        cfg.extra_kafka_options = self.kafka_options(KAFKA_USER, KAFKA_PASSWORD);
    }

    /// The secured broker's lines of `server.properties`, for the client
    /// listener `scripts/kafka.sh` names CLIENT: TLS with this PKI's
    /// certificate for 127.0.0.1 and its key (one PEM file), SCRAM-SHA-512
    /// checked against the users made when the store is formatted, and
    /// PLAIN against the same users and passwords.
    pub fn kafka_broker_properties(&self) -> String {
        let pem = self.path("kafka-broker.pem");
        let key = std::fs::read_to_string(self.path("redis.key")).unwrap();
        let cert = std::fs::read_to_string(self.path("redis.crt")).unwrap();
        std::fs::write(&pem, format!("{key}{cert}")).unwrap();
        format!(
            "listener.name.client.ssl.keystore.type=PEM\n\
             listener.name.client.ssl.keystore.location={}\n\
             listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN\n\
             listener.name.client.scram-sha-512.sasl.jaas.config=\
             org.apache.kafka.common.security.scram.ScramLoginModule required;\n\
             listener.name.client.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \
             required user_{KAFKA_USER}=\"{KAFKA_PASSWORD}\" user_{KAFKA_ADMIN}=\"{KAFKA_ADMIN_PASSWORD}\";\n",
            pem.display()
        )
    }

    /// librdkafka options of a client of the secured broker: SASL_SSL with
    /// SCRAM-SHA-512, trusting this CA.
    pub fn kafka_options(&self, user: &str, password: &str) -> Vec<(String, String)> {
        [
            ("security.protocol", "SASL_SSL"),
            ("ssl.ca.location", &self.path("ca.crt").display().to_string()),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", user),
            ("sasl.password", password),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into()
    }
}

/// A TLS endpoint (`socat OPENSSL-LISTEN`) on a port of its own that
/// forwards each connection to `target` on loopback: HTTPS in front of the
/// tests' own Schema Registry (a plain axum server).
pub struct TlsEndpoint {
    child: Option<Child>,
    pub port: u16,
}

impl TlsEndpoint {
    pub fn start(pki: &Pki, port: u16, target: u16) -> TlsEndpoint {
        let listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
            pki.path("redis.crt").display(),
            pki.path("redis.key").display()
        );
        let child = Command::new("socat")
            .args([&listen, &format!("TCP:127.0.0.1:{target}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("socat is installed (scripts/setup.sh)");
        let mut e = TlsEndpoint { child: Some(child), port };
        wait_listening(&mut e.child, port, Duration::from_secs(10)).expect("socat listens");
        e
    }
}

impl Drop for TlsEndpoint {
    fn drop(&mut self) {
        end(&mut self.child);
    }
}
