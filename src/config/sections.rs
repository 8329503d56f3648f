//! Validation of every section but the boards: each function checks one
//! section, records every problem under its field path, and returns the
//! validated section (or `None` when something in it is invalid).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::field::{Errors, Typed};
use super::raw::{RawEvents, RawHttp, RawKafka, RawRedis, RawSealing, RawWorker};
use super::secrets::{self, RedisTls, Secret};
use super::settings::{
    EventSettings, HttpSettings, KafkaSettings, ReadFrom, RedisSettings, SealingSettings, WorkerSettings,
};

/// `[A-Za-z0-9._-]`, 1 to 249 characters: what Kafka accepts.
pub fn is_topic_name(s: &str) -> bool {
    (1..=249).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Options rankflow sets itself, which `[kafka.options]` may not override.
const OWN_OPTIONS: &[&str] = &["enable.auto.offset.store", "group.id", "bootstrap.servers"];

/// librdkafka's `session.timeout.ms` when not set.
pub const SESSION_TIMEOUT_MS: u64 = 45_000;

/// rankflow's `transaction.timeout.ms` when not set (and the session
/// timeout allows it, see [`transaction_timeout_ms`]): a worker killed with
/// a transaction open holds back `read_committed` readers of its output
/// topics at most this long.
pub const TRANSACTION_TIMEOUT_MS: u64 = 10_000;

/// The transaction timeout: `transaction.timeout.ms` if set, else
/// [`TRANSACTION_TIMEOUT_MS`] or two thirds of `session.timeout.ms`,
/// whichever is less (at least 1 s).
pub fn transaction_timeout_ms(options: &BTreeMap<String, String>) -> u64 {
    let session = options.get("session.timeout.ms").and_then(|v| v.parse().ok()).unwrap_or(SESSION_TIMEOUT_MS);
    match options.get("transaction.timeout.ms").and_then(|v| v.parse().ok()) {
        Some(set) => set,
        None => TRANSACTION_TIMEOUT_MS.min(session * 2 / 3).max(1000),
    }
}

/// A transaction must time out before the group gives its partitions away
/// (a worker that stopped answering): else the next owner's outputs could
/// wait behind its open transaction for a whole session.
fn transaction_timeout_check(options: &BTreeMap<String, String>, e: &mut Errors) {
    let Some(set) = options.get("transaction.timeout.ms") else { return };
    let session = options.get("session.timeout.ms").and_then(|v| v.parse().ok()).unwrap_or(SESSION_TIMEOUT_MS);
    match set.parse::<u64>() {
        Err(_) => e.push("kafka.options.transaction.timeout.ms", "must be a number of milliseconds"),
        Ok(t) if t < 1000 || t >= session => e.push(
            "kafka.options.transaction.timeout.ms",
            format!("must be at least 1000 and below session.timeout.ms ({session}) with kafka.transactions = true"),
        ),
        Ok(_) => {}
    }
}

pub fn kafka(k: RawKafka, e: &mut Errors) -> KafkaSettings {
    if k.brokers.trim().is_empty() {
        e.push("kafka.brokers", "must name at least one broker");
    }
    if k.topics.is_empty() {
        e.push("kafka.topics", "must list at least one topic");
    }
    for (i, t) in k.topics.iter().enumerate() {
        if !is_topic_name(t) {
            e.push(format!("kafka.topics[{i}]"), format!("'{t}' is not a Kafka topic name ([A-Za-z0-9._-], 1 to 249)"));
        }
    }
    for (i, t) in k.admin_topics.iter().enumerate() {
        let field = format!("kafka.admin_topics[{i}]");
        if !is_topic_name(t) {
            e.push(field, format!("'{t}' is not a Kafka topic name ([A-Za-z0-9._-], 1 to 249)"));
        } else if k.topics.contains(t) {
            e.push(field, format!("'{t}' is also a score topic: admin events must have topics of their own"));
        } else if *t == k.dead_letter_topic {
            e.push(field, "must not be the dead-letter topic");
        }
    }
    if k.group_id.trim().is_empty() {
        e.push("kafka.group_id", "must not be empty");
    }
    if !is_topic_name(&k.dead_letter_topic) {
        e.push("kafka.dead_letter_topic", format!("'{}' is not a Kafka topic name", k.dead_letter_topic));
    } else if k.topics.contains(&k.dead_letter_topic) {
        e.push("kafka.dead_letter_topic", "must not be one of kafka.topics (rejected records would be read again)");
    }
    if let Some(t) = &k.changes_topic {
        if !is_topic_name(t) {
            e.push("kafka.changes_topic", format!("'{t}' is not a Kafka topic name ([A-Za-z0-9._-], 1 to 249)"));
        } else if k.topics.contains(t) || k.admin_topics.contains(t) || *t == k.dead_letter_topic {
            e.push("kafka.changes_topic", "must be a topic of its own (not a source, admin or dead-letter topic)");
        }
    }
    if let Some(t) = &k.review_topic {
        if !is_topic_name(t) {
            e.push("kafka.review_topic", format!("'{t}' is not a Kafka topic name ([A-Za-z0-9._-], 1 to 249)"));
        } else if k.topics.contains(t)
            || k.admin_topics.contains(t)
            || *t == k.dead_letter_topic
            || k.changes_topic.as_ref() == Some(t)
        {
            e.push(
                "kafka.review_topic",
                "must be a topic of its own (not a source, admin, dead-letter or changes topic)",
            );
        }
    }
    let formats = super::formats::formats(&k, e);
    let mut options = BTreeMap::new();
    for (key, value) in k.options {
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                e.push(
                    format!("kafka.options.{key}"),
                    format!("must be a string, number or boolean, not {}", other.type_str()),
                );
                continue;
            }
        };
        if OWN_OPTIONS.contains(&key.as_str()) {
            e.push(format!("kafka.options.{key}"), "is set by rankflow itself and cannot be overridden here");
            continue;
        }
        options.insert(key, text);
    }
    if k.transactions {
        transaction_timeout_check(&options, e);
    }
    KafkaSettings {
        brokers: k.brokers,
        topics: k.topics,
        admin_topics: k.admin_topics,
        group_id: k.group_id,
        dead_letter_topic: k.dead_letter_topic,
        changes_topic: k.changes_topic,
        review_topic: k.review_topic,
        transactions: k.transactions,
        options,
        formats: formats.formats,
        fields: formats.fields,
        topic_fields: formats.topic_fields,
        schemas: formats.schemas,
        schema_registry: formats.registry,
    }
}

pub fn redis(r: RawRedis, e: &mut Errors) -> Option<RedisSettings> {
    let scheme_ok = r.url.starts_with("redis://") || r.url.starts_with("rediss://");
    let url = redis::IntoConnectionInfo::into_connection_info(r.url.as_str());
    match &url {
        _ if !scheme_ok => e.push("redis.url", "must start with redis:// or rediss://"),
        Err(err) => e.push("redis.url", format!("is not a valid Redis URL ({err})")),
        Ok(_) => {}
    }
    let url_password = url.is_ok_and(|i| i.redis_settings().password().is_some());
    if r.key_prefix.is_empty() || r.key_prefix.len() > 64 || r.key_prefix.contains(['{', '}', ' ']) {
        e.push("redis.key_prefix", "must be 1 to 64 characters without braces or spaces");
    }
    let min_replicas = e.within("redis.min_replicas", r.min_replicas, 0..=16);
    let replica_wait = e.duration_at_least("redis.replica_wait", &r.replica_wait, Duration::from_millis(10), "10ms");
    let read_from = e.take("redis.read_from", &r.read_from);
    for (i, url) in r.replica_urls.iter().enumerate() {
        if !(url.starts_with("redis://") || url.starts_with("rediss://"))
            || redis::IntoConnectionInfo::into_connection_info(url.as_str()).is_err()
        {
            e.push(format!("redis.replica_urls[{i}]"), "must be a redis:// or rediss:// URL");
        }
    }
    if r.cluster && !r.replica_urls.is_empty() {
        e.push("redis.replica_urls", "a cluster's replicas are found from the cluster: remove replica_urls");
    }
    if read_from == Some(ReadFrom::Replica) && !r.cluster && r.replica_urls.is_empty() {
        e.push("redis.replica_urls", "read_from = \"replica\" on a single Redis needs its replicas' URLs");
    }
    let password = redis_password(&r, url_password, e);
    let tls = redis_tls(&r, e);
    let dedupe_ttl = e.duration_at_least("redis.dedupe_ttl", &r.dedupe_ttl, Duration::from_secs(1), "1s")?;
    Some(RedisSettings {
        url: r.url,
        cluster: r.cluster,
        key_prefix: r.key_prefix,
        dedupe_ttl,
        min_replicas: min_replicas? as u32,
        replica_wait: replica_wait?,
        read_from: read_from?,
        replica_urls: r.replica_urls,
        password: password?,
        tls: tls?,
    })
}

/// `redis.password` or `redis.password_file`, at most one, and not with a
/// password in the URL (`in_url`: one password, said in one place).
fn redis_password(r: &RawRedis, in_url: bool, e: &mut Errors) -> Option<Option<Secret>> {
    let password = match (&r.password, &r.password_file) {
        (Some(_), Some(_)) => {
            e.push("redis.password_file", "set redis.password or redis.password_file, not both");
            return None;
        }
        (Some(p), None) => Some(p.clone()),
        (None, Some(path)) => match secrets::read_password_file(path) {
            Ok(p) => Some(p),
            Err(reason) => {
                e.push("redis.password_file", reason);
                return None;
            }
        },
        (None, None) => None,
    };
    if password.is_some() && in_url {
        let field = if r.password.is_some() { "redis.password" } else { "redis.password_file" };
        e.push(field, "redis.url carries a password already: give it in one place");
        return None;
    }
    Some(password)
}

/// `[redis.tls]`, its files read and checked (a missing or malformed file
/// is an error naming its field); only with a `rediss://` URL.
fn redis_tls(r: &RawRedis, e: &mut Errors) -> Option<Option<RedisTls>> {
    let t = &r.tls;
    if t.is_empty() {
        return Some(None);
    }
    if !std::iter::once(&r.url).chain(&r.replica_urls).any(|u| u.starts_with("rediss://")) {
        e.push("redis.tls", "is set, but redis.url is not a rediss:// (TLS) URL");
        return None;
    }
    let mut files = Vec::new();
    let mut read = |name: &'static str, path: &Option<PathBuf>, reader: fn(&Path) -> Result<Vec<u8>, String>| {
        let path = path.as_ref()?;
        files.push((name, path.clone()));
        reader(path).map_err(|reason| e.push(format!("redis.tls.{name}"), reason)).ok()
    };
    let ca = read("ca_file", &t.ca_file, secrets::read_certificates);
    let cert = read("cert_file", &t.cert_file, secrets::read_certificates);
    let key = read("key_file", &t.key_file, secrets::read_private_key);
    let both = match (&t.cert_file, &t.key_file) {
        (Some(_), None) => Err(("redis.tls.key_file", "must be set with cert_file (the client certificate's key)")),
        (None, Some(_)) => Err(("redis.tls.cert_file", "must be set with key_file (the client certificate)")),
        _ => Ok(()),
    };
    if let Err((field, reason)) = both {
        e.push(field, reason);
        return None;
    }
    let client = cert.zip(key);
    let complete = (ca.is_some() || t.ca_file.is_none()) && (client.is_some() || t.cert_file.is_none());
    complete.then_some(Some(RedisTls { ca, client, files }))
}

pub fn http(h: RawHttp, e: &mut Errors) -> Option<HttpSettings> {
    let listen = e.take("http.listen", &h.listen);
    let max_limit = e.within("http.max_limit", h.max_limit, 1..=100_000);
    let max_players = e.within("http.max_players", h.max_players, 1..=100_000);
    let request_timeout =
        e.duration_at_least("http.request_timeout", &h.request_timeout, Duration::from_millis(100), "100ms");
    let max_concurrent = e.within("http.max_concurrent_requests", h.max_concurrent_requests, 1..=100_000);
    let max_streams = e.within("http.max_streams", h.max_streams, 1..=1_000_000);
    let cors_origins = cors_origins(&h.cors_origins, e);
    let cache_max_age = whole_seconds("http.cache_max_age", &h.cache_max_age, e);
    let cache_max_age_sealed = whole_seconds("http.cache_max_age_sealed", &h.cache_max_age_sealed, e);
    Some(HttpSettings {
        listen: listen?,
        max_limit: max_limit? as usize,
        max_players: max_players? as usize,
        request_timeout: request_timeout?,
        max_concurrent_requests: max_concurrent? as usize,
        max_streams: max_streams? as usize,
        cors_origins: cors_origins?,
        cache_max_age: cache_max_age?,
        cache_max_age_sealed: cache_max_age_sealed?,
    })
}

/// `http.cors_origins`: `*`, or origins as a browser sends them
/// (`https://play.example.com`, `http://localhost:8080`): a scheme, a host
/// and perhaps a port, no path and no trailing slash.
fn cors_origins(origins: &[String], e: &mut Errors) -> Option<Vec<String>> {
    let bad = origins.iter().find(|o| {
        if o.as_str() == "*" {
            return false;
        }
        let Some((scheme, host)) = o.split_once("://") else { return true };
        !matches!(scheme, "http" | "https")
            || host.is_empty()
            || !host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
    });
    match bad {
        Some(o) => {
            e.push(
                "http.cors_origins",
                format!("'{o}' is not an origin like https://play.example.com (scheme and host, no path) or \"*\""),
            );
            None
        }
        None => Some(origins.to_vec()),
    }
}

/// A `max-age`: HTTP counts it in whole seconds.
fn whole_seconds(field: &str, typed: &Typed<Duration>, e: &mut Errors) -> Option<Duration> {
    let d = e.take(field, typed)?;
    if d.subsec_nanos() != 0 {
        e.push(field, "must be whole seconds (HTTP's max-age counts in seconds), like 1s or 1h");
        return None;
    }
    Some(d)
}

pub fn events(v: RawEvents, e: &mut Errors) -> Option<EventSettings> {
    let max_event_bytes = e.within("events.max_event_bytes", v.max_event_bytes, 1..=16 * 1024 * 1024);
    let max_meta_bytes = e.within("events.max_meta_bytes", v.max_meta_bytes, 2..=64 * 1024);
    let max_future_skew = e.take("events.max_future_skew", &v.max_future_skew)?;
    let limits =
        crate::event::Limits { max_event_bytes: max_event_bytes? as usize, max_meta_bytes: max_meta_bytes? as usize };
    Some(EventSettings { limits, max_future_skew })
}

pub fn worker(w: RawWorker, e: &mut Errors) -> Option<WorkerSettings> {
    let batch_size = e.within("worker.batch_size", w.batch_size, 1..=100_000);
    let max_events_per_call = e.within("worker.max_events_per_call", w.max_events_per_call, 1..=100_000);
    let batch_linger = e.take("worker.batch_linger", &w.batch_linger);
    let shutdown_timeout = e.take("worker.shutdown_timeout", &w.shutdown_timeout);
    let max_backoff = e.duration_at_least("worker.max_backoff", &w.max_backoff, Duration::from_millis(10), "10ms");
    let max_call_time = e.duration_at_least("worker.max_call_time", &w.max_call_time, Duration::from_millis(1), "1ms");
    Some(WorkerSettings {
        batch_size: batch_size? as usize,
        max_events_per_call: max_events_per_call? as usize,
        batch_linger: batch_linger?,
        shutdown_timeout: shutdown_timeout?,
        max_backoff: max_backoff?,
        max_call_time: max_call_time?,
    })
}

pub fn sealing(s: RawSealing, e: &mut Errors) -> Option<SealingSettings> {
    if !is_topic_name(&s.topic) {
        e.push("sealing.topic", format!("'{}' is not a Kafka topic name ([A-Za-z0-9._-], 1 to 249)", s.topic));
    }
    let top = e.within("sealing.top", s.top, 1..=10_000);
    let idle_grace = e.take("sealing.idle_grace", &s.idle_grace);
    let check_interval =
        e.duration_at_least("sealing.check_interval", &s.check_interval, Duration::from_millis(10), "10ms");
    let lease = e.duration_at_least("sealing.lease", &s.lease, Duration::from_secs(1), "1s");
    Some(SealingSettings {
        topic: s.topic,
        top: top? as usize,
        idle_grace: idle_grace?,
        check_interval: check_interval?,
        lease: lease?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{load_str, ConfigError};

    fn kafka(extra: &str, options: &str) -> String {
        format!(
            "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"s\"]\ndead_letter_topic = \"d\"\n{extra}\n[kafka.options]\n{options}\n\
             [redis]\nurl = \"redis://127.0.0.1:6379\"\n[[board]]\nid = \"p\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n"
        )
    }

    #[test]
    fn transactions_are_on_by_default_and_time_out_below_the_session() {
        let s = load_str(&kafka("", ""), Vec::new()).unwrap();
        assert!(s.kafka.transactions);
        assert_eq!(super::transaction_timeout_ms(&s.kafka.options), 10_000);
        // A short session: two thirds of it.
        let s = load_str(&kafka("", "\"session.timeout.ms\" = 3000"), Vec::new()).unwrap();
        assert_eq!(super::transaction_timeout_ms(&s.kafka.options), 2_000);
        // Set at or above the session: refused, naming the field.
        let text = kafka("", "\"session.timeout.ms\" = 6000\n\"transaction.timeout.ms\" = 6000");
        match load_str(&text, Vec::new()) {
            Err(ConfigError::Invalid(errors)) => {
                assert!(
                    errors.iter().any(|e| e.to_string().contains("kafka.options.transaction.timeout.ms")),
                    "{errors:?}"
                )
            }
            other => panic!("expected the timeout refused, got {other:?}"),
        }
        // Without transactions, no such limit.
        let s = load_str(&kafka("transactions = false", "\"transaction.timeout.ms\" = 60000"), Vec::new()).unwrap();
        assert!(!s.kafka.transactions);
    }
}
