//! The validated configuration. Every value here has passed validation:
//! the structs are `#[non_exhaustive]`, so code outside this crate can read
//! them but never build one that skipped [`super::load`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::secrets::{redacted_options, RedisTls, Secret};
use crate::board::Board;
use crate::event::fields::FieldMap;
use crate::event::schema::Schema;
use crate::event::Format;

/// The whole validated configuration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    pub kafka: KafkaSettings,
    pub redis: RedisSettings,
    pub http: HttpSettings,
    pub events: EventSettings,
    pub worker: WorkerSettings,
    pub sealing: SealingSettings,
    pub boards: Vec<Board>,
}

impl Settings {
    /// Whether any board closes its periods (and so needs watermarks).
    pub fn seals(&self) -> bool {
        self.boards.iter().any(|b| b.close_after().is_some())
    }

    /// Whether the scheduler has anything to do.
    pub fn schedules(&self) -> bool {
        self.boards.iter().any(|b| b.close_after().is_some() || !b.rolling().is_empty())
    }
}

/// `[kafka]`.
#[derive(Clone)]
#[non_exhaustive]
pub struct KafkaSettings {
    pub brokers: String,
    pub topics: Vec<String>,
    /// Topics of admin events; the only ones where admin events are honoured.
    pub admin_topics: Vec<String>,
    pub group_id: String,
    pub dead_letter_topic: String,
    /// Where rank changes go (boards with `notify_top`).
    pub changes_topic: Option<String>,
    /// Where held events go for review (boards whose rules hold).
    pub review_topic: Option<String>,
    /// Outputs in Kafka transactions with the offsets of their source records.
    pub transactions: bool,
    /// librdkafka options as strings, applied after rankflow's own defaults.
    pub options: BTreeMap<String, String>,
    /// Source topics not written as JSON, and their formats.
    pub formats: BTreeMap<String, Format>,
    /// Where the event fields are in a decoded record (`kafka.fields`)...
    pub fields: FieldMap,
    /// ...and in the records of topics with maps of their own.
    pub topic_fields: BTreeMap<String, FieldMap>,
    /// Schemas from files, by id (`[kafka.schemas]`).
    pub schemas: BTreeMap<u32, Arc<Schema>>,
    /// Where the other ids' schemas are fetched (`[kafka.schema_registry]`).
    pub schema_registry: Option<RegistrySettings>,
}

/// `[kafka.schema_registry]`, checked.
#[derive(Clone, Debug)]
pub struct RegistrySettings {
    /// Without a trailing slash.
    pub url: String,
    /// Basic authentication's user and password.
    pub auth: Option<(String, Secret)>,
    /// PEM of the CAs that sign the registry's certificate; `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
}

impl KafkaSettings {
    /// How `topic`'s records are written.
    pub fn format(&self, topic: &str) -> Format {
        self.formats.get(topic).copied().unwrap_or_default()
    }

    /// Where the event fields are in `topic`'s decoded records.
    pub fn fields(&self, topic: &str) -> &FieldMap {
        self.topic_fields.get(topic).unwrap_or(&self.fields)
    }
}

impl std::fmt::Debug for KafkaSettings {
    // Options may carry passwords and tokens: never print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSettings")
            .field("brokers", &self.brokers)
            .field("topics", &self.topics)
            .field("admin_topics", &self.admin_topics)
            .field("group_id", &self.group_id)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("changes_topic", &self.changes_topic)
            .field("review_topic", &self.review_topic)
            .field("transactions", &self.transactions)
            .field("options", &redacted_options(&self.options))
            .field("formats", &self.formats)
            .field("fields", &self.fields)
            .field("topic_fields", &self.topic_fields)
            .field("schemas", &self.schemas)
            .field("schema_registry", &self.schema_registry)
            .finish()
    }
}

/// `[redis]`.
#[derive(Clone)]
#[non_exhaustive]
pub struct RedisSettings {
    pub url: String,
    pub cluster: bool,
    pub key_prefix: String,
    pub dedupe_ttl: Duration,
    /// Replicas that must acknowledge a batch's writes before its offsets are stored (0: none).
    pub min_replicas: u32,
    /// How long one `WAIT` for them waits.
    pub replica_wait: Duration,
    /// Where the HTTP API reads.
    pub read_from: ReadFrom,
    /// A single Redis's replicas, for `read_from = "replica"`.
    pub replica_urls: Vec<String>,
    /// `redis.password` or the contents of `redis.password_file`: sent by
    /// every connection (the URL's own password otherwise).
    pub password: Option<Secret>,
    /// `[redis.tls]`, its files read: for `rediss://` connections.
    pub tls: Option<RedisTls>,
}

/// Where the HTTP API reads (`redis.read_from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    Primary,
    Replica,
}

impl std::fmt::Debug for RedisSettings {
    // The URL may carry a password: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("cluster", &self.cluster)
            .field("key_prefix", &self.key_prefix)
            .field("dedupe_ttl", &self.dedupe_ttl)
            .field("min_replicas", &self.min_replicas)
            .field("read_from", &self.read_from)
            .field("replica_urls", &self.replica_urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>())
            .field("password", &self.password)
            .field("tls", &self.tls)
            .finish()
    }
}

/// `redis://user:secret@host` -> `redis://user:***@host`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let creds = &url[scheme_end + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &url[..scheme_end + 3], user, &url[at..])
        }
        _ => url.to_string(),
    }
}

/// `[http]`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpSettings {
    pub listen: SocketAddr,
    pub max_limit: usize,
    pub max_players: usize,
    pub request_timeout: Duration,
    pub max_concurrent_requests: usize,
    pub max_streams: usize,
    /// Origins allowed to read from a browser, each `scheme://host[:port]` or `*`.
    pub cors_origins: Vec<String>,
    /// `max-age` of reads' answers (zero: `no-store`).
    pub cache_max_age: Duration,
    /// `max-age` of sealed periods' and history's answers (zero: `no-store`).
    pub cache_max_age_sealed: Duration,
}

/// `[events]`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventSettings {
    /// The record value and `meta` size limits.
    pub limits: crate::event::Limits,
    pub max_future_skew: Duration,
}

/// `[worker]`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerSettings {
    pub batch_size: usize,
    /// Most events of one board tag in one apply-script call.
    pub max_events_per_call: usize,
    pub batch_linger: Duration,
    pub shutdown_timeout: Duration,
    pub max_backoff: Duration,
    /// How long one apply call may hold Redis.
    pub max_call_time: Duration,
}

/// `[sealing]`: the scheduler of sealed periods and rolling boards.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SealingSettings {
    pub topic: String,
    pub top: usize,
    pub idle_grace: Duration,
    pub check_interval: Duration,
    pub lease: Duration,
}
