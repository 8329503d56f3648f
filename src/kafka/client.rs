//! The one place librdkafka client configurations are built: the
//! consumer's, the producers' (dead letters, sealed periods, tools) and the
//! admin client's. Each starts from `bootstrap.servers`, takes rankflow's
//! defaults, then the user's `[kafka.options]` (all of them for the
//! consumer; the connection and security ones for the others).

use rdkafka::config::ClientConfig;

use crate::config::KafkaSettings;

/// Options meaningful to a client that is not the consumer (a producer or
/// the admin client): connection and security.
const SHARED_OPTION_PREFIXES: &[&str] = &[
    "security.",
    "sasl.",
    "ssl.",
    "enable.ssl.",
    "enable.sasl.",
    "https.",
    "client.",
    "socket.",
    "broker.",
    "reconnect.",
    "message.timeout.ms",
    "retry.backoff",
    "acks",
    "compression.",
    "debug",
];

/// Whether a `[kafka.options]` key also applies to producers and the admin client.
pub fn is_shared_option(key: &str) -> bool {
    SHARED_OPTION_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// A client of `brokers` with nothing else set (tools that measure a bare client).
pub fn bare(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

/// The worker's consumer. `statistics_ms`: how often librdkafka reports
/// statistics (lag, and the watermarks of boards that seal periods);
/// `transactional`: its offsets are committed by the producer's transactions.
pub fn consumer(kafka: &KafkaSettings, statistics_ms: u64, transactional: bool) -> ClientConfig {
    let mut c = bare(&kafka.brokers);
    c.set("group.id", &kafka.group_id)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("statistics.interval.ms", statistics_ms.to_string())
        .set("queued.max.messages.kbytes", "16384");
    for (k, v) in &kafka.options {
        c.set(k, v);
    }
    // Never overridable: offsets are stored by rankflow only.
    c.set("enable.auto.offset.store", "false");
    if transactional {
        // Offsets are committed by the producer's transactions, with the
        // outputs of their records; and the admin topic carries records of
        // those transactions (hold_hides_after), read once committed.
        c.set("enable.auto.commit", "false").set("isolation.level", "read_committed");
    }
    c
}

/// The transaction timeout (see `config::transaction_timeout_ms`).
pub fn transaction_timeout_ms(kafka: &KafkaSettings) -> u64 {
    crate::config::transaction_timeout_ms(&kafka.options)
}

/// The worker's transactional producer, `id` its `transactional.id`: a
/// record given up on no later than its transaction times out.
pub fn transactional_producer(kafka: &KafkaSettings, id: &str) -> ClientConfig {
    let mut c = producer(kafka);
    // A transaction begun right after the last one committed finds its
    // coordinator still writing the last one's markers: the broker answers
    // CONCURRENT_TRANSACTIONS and the client retries after this backoff.
    // librdkafka's 100 ms default made every commit last 100 ms (the Java
    // client waits 20 ms); it doubles from here on other retries.
    if c.get("retry.backoff.ms").is_none() {
        c.set("retry.backoff.ms", TRANSACTION_RETRY_BACKOFF_MS.to_string());
    }
    let timeout = transaction_timeout_ms(kafka);
    let message: u64 = c.get("message.timeout.ms").and_then(|v| v.parse().ok()).unwrap_or(10_000);
    c.set("transactional.id", id)
        .set("transaction.timeout.ms", timeout.to_string())
        .set("message.timeout.ms", message.min(timeout).to_string());
    c
}

/// The transactional producer's first retry backoff, unless
/// `[kafka.options]` sets `retry.backoff.ms`.
pub const TRANSACTION_RETRY_BACKOFF_MS: u32 = 10;

/// A producer: every record acknowledged by all in-sync replicas, given up
/// after 10 s unless `[kafka.options]` says otherwise.
pub fn producer(kafka: &KafkaSettings) -> ClientConfig {
    let mut c = bare(&kafka.brokers);
    c.set("message.timeout.ms", "10000").set("acks", "all");
    shared_options(&mut c, kafka);
    c
}

/// The admin client (topic creation).
pub fn admin(kafka: &KafkaSettings) -> ClientConfig {
    let mut c = bare(&kafka.brokers);
    shared_options(&mut c, kafka);
    c
}

/// A consumer that never joins the group: it reads the group's committed
/// offsets and the partitions' watermarks (`rankflow rebuild`'s progress).
pub fn observer(kafka: &KafkaSettings) -> ClientConfig {
    let mut c = bare(&kafka.brokers);
    c.set("group.id", &kafka.group_id).set("enable.auto.commit", "false");
    shared_options(&mut c, kafka);
    c
}

fn shared_options(c: &mut ClientConfig, kafka: &KafkaSettings) {
    for (k, v) in kafka.options.iter().filter(|(k, _)| is_shared_option(k)) {
        c.set(k, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka() -> KafkaSettings {
        KafkaSettings {
            brokers: "k:9092".into(),
            topics: vec!["t".into()],
            admin_topics: Vec::new(),
            group_id: "g".into(),
            dead_letter_topic: "d".into(),
            changes_topic: None,
            review_topic: None,
            transactions: true,
            options: [
                ("sasl.username", "u"),
                ("session.timeout.ms", "30000"),
                ("enable.auto.offset.store", "true"),
                ("security.protocol", "SASL_SSL"),
                ("enable.ssl.certificate.verification", "true"),
                ("https.ca.location", "/ca.pem"),
                ("sasl.oauthbearer.method", "oidc"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            formats: Default::default(),
            fields: Default::default(),
            topic_fields: Default::default(),
            schemas: Default::default(),
            schema_registry: None,
        }
    }

    #[test]
    fn the_consumer_takes_every_option_but_never_stores_offsets_itself() {
        let c = consumer(&kafka(), 5000, false);
        assert_eq!(c.get("session.timeout.ms"), Some("30000"));
        assert_eq!(c.get("sasl.username"), Some("u"));
        assert_eq!(c.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(c.get("statistics.interval.ms"), Some("5000"));
        assert_eq!(c.get("group.id"), Some("g"));
    }

    #[test]
    fn producers_and_admin_take_only_connection_and_security_options() {
        for c in [producer(&kafka()), admin(&kafka()), observer(&kafka())] {
            assert_eq!(c.get("bootstrap.servers"), Some("k:9092"));
            assert_eq!(c.get("sasl.username"), Some("u"));
            assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
            assert_eq!(c.get("enable.ssl.certificate.verification"), Some("true"));
            assert_eq!(c.get("https.ca.location"), Some("/ca.pem"));
            assert_eq!(c.get("sasl.oauthbearer.method"), Some("oidc"));
            assert_eq!(c.get("session.timeout.ms"), None);
        }
        assert_eq!(producer(&kafka()).get("acks"), Some("all"));
    }
}
