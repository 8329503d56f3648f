//! Secure connections that fail: an untrusted certificate, a missing or
//! foreign client certificate, a wrong password and a refused SASL
//! mechanism each stop the worker within seconds with an error naming the
//! cause and the setting, and nothing is written (no key in Redis, no
//! offset committed, no dead letter). And secrets stay secret: no password
//! in the log (at debug level), `/metrics`, `/readyz`, `/healthz` or
//! `check-config`'s output. A broker that refuses transactions stops the
//! worker naming `kafka.transactions` and the permission.

use std::sync::Arc;
use std::time::Duration;

use support::stream::{self, BOARDS};
use support::tls::{Pki, KAFKA_PASSWORD, KAFKA_USER, REDIS_PASSWORD};
use support::*;

const PARTITIONS: i32 = 2;

struct Secured {
    pki: Arc<Pki>,
    redis: Redis,
    broker: Broker,
    topic: String,
    dlq: String,
}

async fn secured() -> Secured {
    let pki = Arc::new(Pki::new());
    let redis = Redis::start_secured(pki.clone());
    let broker = Broker::start_secured(&pki);
    let (topic, dlq) = broker.topics(PARTITIONS).await;
    broker.produce(&topic, &stream::generate(500, 7).records).await;
    Secured { pki, redis, broker, topic, dlq }
}

impl Secured {
    /// A worker as the restricted users, every secure setting right.
    fn config(&self) -> WorkerConfig {
        let mut cfg = WorkerConfig::new(&self.broker, &self.redis, &self.topic, &self.dlq, BOARDS);
        self.pki.secure(&mut cfg, self.redis.worker_url());
        cfg
    }

    /// Runs `cfg`'s worker, which must exit non-zero within 30 s with a log
    /// naming every one of `names`, having written nothing anywhere.
    async fn refused(&self, case: &str, cfg: &WorkerConfig, names: &[&str]) {
        let mut w = Worker::spawn(cfg);
        let status = w.wait_exit(Duration::from_secs(30));
        let log = w.log();
        assert!(status.is_some_and(|s| !s.success()), "{case}: the worker must stop with an error\n{log}");
        for name in names {
            assert!(log.contains(name), "{case}: the error names '{name}'\n{log}");
        }
        assert!(!log.contains(REDIS_PASSWORD) && !log.contains(KAFKA_PASSWORD), "{case}: a password was logged\n{log}");
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut self.redis.conn().await).await.unwrap();
        assert!(keys.is_empty(), "{case}: keys were written: {keys:?}");
        assert!(self.broker.committed(&cfg.group, &self.topic, PARTITIONS).iter().all(|&o| o < 0), "{case}: committed");
        assert_eq!(self.broker.log_end(&self.dlq, 1), [0], "{case}: dead letters were produced");
    }
}

fn set_option(cfg: &mut WorkerConfig, key: &str, value: &str) {
    cfg.extra_kafka_options.retain(|(k, _)| k != key);
    cfg.extra_kafka_options.push((key.into(), value.into()));
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_tls_and_password_failures_stop_the_worker_naming_the_cause_and_write_nothing() {
    let s = secured().await;
    let path = |n: &str| s.pki.path(n).display().to_string();

    let mut cfg = s.config();
    cfg.redis_extra = cfg.redis_extra.replace(&path("ca.crt"), &path("rogue/ca.crt"));
    s.refused("untrusted server certificate", &cfg, &["TLS", "redis.tls.ca_file"]).await;

    let mut cfg = s.config();
    let section = cfg.redis_extra.clone();
    cfg.redis_extra = section
        .lines()
        .filter(|l| !l.starts_with("cert_file") && !l.starts_with("key_file"))
        .collect::<Vec<_>>()
        .join("\n");
    s.refused("no client certificate", &cfg, &["TLS", "redis.tls.cert_file"]).await;

    let mut cfg = s.config();
    cfg.redis_extra = section
        .replace(&path("client.crt"), &path("rogue/client.crt"))
        .replace(&path("client.key"), &path("rogue/client.key"));
    s.refused("a client certificate of another CA", &cfg, &["TLS", "redis.tls.cert_file"]).await;

    let mut cfg = s.config();
    let wrong = s.pki.path("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    cfg.redis_extra = section.replace(&path("redis-password"), &wrong.display().to_string());
    s.refused("a wrong password", &cfg, &["authentication failed", "redis.password"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_tls_and_sasl_failures_stop_the_worker_naming_the_cause_and_write_nothing() {
    let s = secured().await;

    let mut cfg = s.config();
    set_option(&mut cfg, "ssl.ca.location", &s.pki.path("rogue/ca.crt").display().to_string());
    s.refused("untrusted broker certificate", &cfg, &["Kafka TLS handshake failed", "ssl.ca.location"]).await;

    let mut cfg = s.config();
    set_option(&mut cfg, "sasl.password", "not-the-password");
    s.refused("a wrong SCRAM password", &cfg, &["Kafka authentication failed", "sasl.password"]).await;

    // PLAIN's passwords are checked as SCRAM's are.
    let mut cfg = s.config();
    set_option(&mut cfg, "sasl.mechanism", "PLAIN");
    set_option(&mut cfg, "sasl.password", "not-the-password");
    s.refused("a wrong PLAIN password", &cfg, &["Kafka authentication failed", "sasl.password"]).await;

    let mut cfg = s.config();
    set_option(&mut cfg, "sasl.mechanism", "OAUTHBEARER");
    set_option(&mut cfg, "enable.sasl.oauthbearer.unsecure.jwt", "true");
    set_option(&mut cfg, "sasl.oauthbearer.config", "principal=rankflow");
    s.refused("a SASL mechanism the broker refuses", &cfg, &["Kafka authentication failed", "sasl.mechanism"]).await;

    // An operator's command says so too, rather than timing out.
    let mut cfg = s.config();
    set_option(&mut cfg, "sasl.password", "not-the-password");
    let dir = temp_dir();
    let path = dir.path().join("rankflow.toml");
    std::fs::write(&path, cfg.render()).unwrap();
    let out = run_rankflow(&["create-topics"], &path).await;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && text.contains("Kafka authentication failed"), "create-topics: {text}");
    assert!(!text.contains("not-the-password"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_secret_reaches_the_log_metrics_health_answers_or_check_config() {
    let s = secured().await;
    let mut cfg = s.config();
    cfg.rust_log = "debug".into();
    // A secret of every kind the rule names, in options a client ignores.
    set_option(&mut cfg, "ssl.key.password", "key-password-S3cret");
    let w = Worker::spawn(&cfg);
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(120));
    let secrets = [REDIS_PASSWORD, KAFKA_PASSWORD, "key-password-S3cret"];
    let mut seen = vec![("log", w.log())];
    for path in ["/metrics", "/readyz", "/healthz"] {
        let (status, body) = w.http_get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        seen.push((path, body));
    }
    // check-config: a valid file, and one with errors beside its secrets.
    let check = |config: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankflow"))
            .arg("check-config")
            .arg(config)
            .output()
            .unwrap();
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    };
    seen.push(("check-config", check(&w.config_path)));
    let text = std::fs::read_to_string(&w.config_path).unwrap();
    let bad = w.config_path.with_file_name("bad.toml");
    let bad_text = text.replace("[redis]\n", &format!("[redis]\npassword = [\"{REDIS_PASSWORD}\"]\n"));
    std::fs::write(&bad, bad_text).unwrap();
    let out = check(&bad);
    assert!(out.contains("redis.password"), "check-config names the field: {out}");
    seen.push(("check-config of a bad file", out));
    for (place, text) in &seen {
        for secret in secrets {
            assert!(!text.contains(secret), "{place} shows a secret:\n{text}");
        }
    }
}

/// A broker that authorizes every request, the worker's user granted all it
/// needs but transactions: the worker stops at start naming
/// `kafka.transactions` and the permission, having written nothing; granted
/// that permission (on the prefix the error names), it runs and commits.
#[tokio::test(flavor = "multi_thread")]
async fn a_broker_refusing_transactions_stops_the_worker_naming_kafka_transactions_and_the_permission() {
    let pki = Arc::new(Pki::new());
    let redis = Redis::start_secured(pki.clone());
    let broker = Broker::start_authorizing(&pki);
    let (topic, dlq) = broker.topics(PARTITIONS).await;
    broker.produce(&topic, &stream::generate(500, 7).records).await;
    let s = Secured { pki: pki.clone(), redis, broker, topic, dlq };
    let cfg = s.config();
    let user = format!("User:{KAFKA_USER}");
    let allow = |resource: &str, pattern: &str, name: &str, operation: &str| {
        format!("{resource}:{pattern}:{name}:{user}:{operation}")
    };
    s.broker.grant(
        &pki,
        &[
            allow("TOPIC", "LITERAL", "*", "ALL"),
            allow("GROUP", "LITERAL", "*", "ALL"),
            allow("BROKER", "LITERAL", "kafka-cluster", "IDEMPOTENT_WRITE"),
        ],
    );
    s.refused(
        "no TransactionalId Write",
        &cfg,
        &["kafka.transactions", "TransactionalId Write", &format!("'{}-'", cfg.group)],
    )
    .await;
    // Granted as the error says, the same worker starts and commits the stream.
    s.broker.grant(&pki, &[allow("TRANSACTIONAL_ID", "PREFIXED", &format!("{}-", cfg.group), "ALL")]);
    let w = Worker::spawn(&cfg);
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(120));
    assert!(w.metric("rankflow_transactions_total", &[("outcome", "committed")]).await >= 1.0, "{}", w.log());
}
