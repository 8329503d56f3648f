//! The config file as written: serde structs with `deny_unknown_fields`,
//! each default stated once (in its section's `Default`), typed values as
//! [`Typed`] so that validation can name every bad field. Doc comments here
//! are the user reference (the README's configuration table follows them).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

mod board;

pub use board::*;

use super::field::Typed;
use super::secrets::Secret;
use super::settings::ReadFrom;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub kafka: RawKafka,
    #[serde(default)]
    pub redis: RawRedis,
    #[serde(default)]
    pub http: RawHttp,
    #[serde(default)]
    pub events: RawEvents,
    #[serde(default)]
    pub worker: RawWorker,
    #[serde(default)]
    pub sealing: RawSealing,
    #[serde(default, rename = "board")]
    pub boards: Vec<RawBoard>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKafka {
    /// Bootstrap servers, comma separated (librdkafka `bootstrap.servers`).
    pub brokers: String,
    /// Topics to consume.
    pub topics: Vec<String>,
    /// Consumer group; every worker of one deployment uses the same. Default `rankflow`.
    #[serde(default = "default_group_id")]
    pub group_id: String,
    /// Where rejected records go, with headers naming the reason.
    pub dead_letter_topic: String,
    /// Topics of admin events (corrections and moderation): the only
    /// topics whose admin events are honoured; admin events anywhere else
    /// are dead-lettered `not_allowed`, and so is anything but an admin
    /// event here. Default none.
    #[serde(default)]
    pub admin_topics: Vec<String>,
    /// Where rank changes go (boards with `notify_top`); required by them.
    #[serde(default)]
    pub changes_topic: Option<String>,
    /// Where held events go for review (boards whose integrity rules
    /// hold); required by them.
    #[serde(default)]
    pub review_topic: Option<String>,
    /// Every record rankflow produces goes out in Kafka transactions that
    /// commit the offsets of exactly the records it was made for: a
    /// `read_committed` consumer sees each once. Default true; false:
    /// outputs at least once (offsets committed by the consumer).
    #[serde(default = "default_true")]
    pub transactions: bool,
    /// Per source topic, how its records are written: `"json"` (the
    /// default for a topic not listed), `"avro"` or `"protobuf"` (the
    /// Schema Registry wire format) or `"cloudevents"` (binary or
    /// structured mode, JSON, Avro or Protobuf data).
    #[serde(default)]
    pub formats: BTreeMap<String, String>,
    /// Where each event field (`event_id`, `type`, `player_id`, `score`,
    /// `ts`, `attrs`, `meta`) is in a decoded record whose names differ:
    /// a path of object keys joined by dots (`player_id = "player.id"`).
    /// Applies to the topics of `formats` other than JSON; a topic whose
    /// schema names things otherwise again has a table of its own
    /// (`[kafka.fields."match-results"]`), put over the shared entries.
    #[serde(default)]
    pub fields: BTreeMap<String, RawFieldEntry>,
    /// Schemas by id, from files: `"<id>" = "file"` (`.avsc`; `.proto`, or
    /// a compiled descriptor set), read at start.
    #[serde(default)]
    pub schemas: BTreeMap<String, PathBuf>,
    /// The Schema Registry the ids not in `schemas` are fetched from, once each.
    #[serde(default)]
    pub schema_registry: Option<RawSchemaRegistry>,
    /// Passed to librdkafka as is, for the consumer (all of them) and the
    /// producers (connection and security ones: `security.*`, `sasl.*`,
    /// `ssl.*`, ...). Values may be strings, numbers or booleans.
    #[serde(default)]
    pub options: BTreeMap<String, toml::Value>,
}

fn default_true() -> bool {
    true
}

fn default_group_id() -> String {
    "rankflow".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRedis {
    /// `redis://` or `rediss://` (TLS); user and password in the URL.
    pub url: String,
    /// true: Redis Cluster, and `url` is a seed node.
    pub cluster: bool,
    /// First segment of every key rankflow writes.
    pub key_prefix: String,
    /// How long an `event_id` is recognised (at least this, at most twice);
    /// a producer retry later than that counts again (a redelivered offset
    /// never does). At least 1s.
    pub dedupe_ttl: Typed<Duration>,
    /// Replicas that must acknowledge a batch's writes (`WAIT`) before any
    /// of its offsets is stored, 0 to 16; 0: none asked. With 1 or more, a
    /// failover to a replica loses no acknowledged score.
    pub min_replicas: u64,
    /// How long one `WAIT` waits for them before it is tried again (with
    /// backoff); at least 10ms.
    pub replica_wait: Typed<Duration>,
    /// Where the HTTP API reads: `primary` (default) or `replica` (a replica
    /// of the node holding the key; the primary when none answers, and for
    /// reads with `fresh=true`).
    pub read_from: Typed<ReadFrom>,
    /// A single Redis's replicas (`redis://` URLs) for `read_from =
    /// "replica"`; a cluster's are found from the cluster.
    pub replica_urls: Vec<String>,
    /// The password (with the URL's user, or the default user), for every
    /// connection: primary, replicas, cluster nodes. Also
    /// `RANKFLOW_REDIS__PASSWORD`. Not with a password in the URL.
    pub password: Option<Secret>,
    /// A file holding the password (a mounted secret); its trailing newline
    /// is dropped. Not with `password`.
    pub password_file: Option<PathBuf>,
    /// TLS files for `rediss://` URLs.
    pub tls: RawRedisTls,
}

impl Default for RawRedis {
    fn default() -> Self {
        RawRedis {
            url: "redis://127.0.0.1:6379".into(),
            cluster: false,
            key_prefix: "lb".into(),
            dedupe_ttl: Typed::default_text("7d"),
            min_replicas: 0,
            replica_wait: Typed::default_text("1s"),
            read_from: Typed::default_text("primary"),
            replica_urls: Vec::new(),
            password: None,
            password_file: None,
            tls: RawRedisTls::default(),
        }
    }
}

/// One `[kafka.fields]` entry: an event field's path, or a topic's own map.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawFieldEntry {
    Path(String),
    Topic(BTreeMap<String, String>),
}

/// `[kafka.schema_registry]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSchemaRegistry {
    /// `http://` or `https://` and the registry's address (and path prefix, if any).
    pub url: String,
    /// HTTP basic authentication's user; with `password`.
    pub username: Option<String>,
    /// HTTP basic authentication's password (`RANKFLOW_KAFKA__SCHEMA_REGISTRY__PASSWORD`).
    pub password: Option<Secret>,
    /// PEM file of the CA certificates that sign the registry's
    /// certificate (`https://` only). Default: the system's trusted roots.
    pub ca_file: Option<PathBuf>,
}

/// `[redis.tls]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedisTls {
    /// PEM file of the CA certificates that sign the Redis servers'
    /// certificates. Default: the system's trusted roots.
    pub ca_file: Option<PathBuf>,
    /// PEM file of this client's certificate (chain), for mutual TLS; with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key; with `cert_file`.
    pub key_file: Option<PathBuf>,
}

impl RawRedisTls {
    pub(super) fn is_empty(&self) -> bool {
        self.ca_file.is_none() && self.cert_file.is_none() && self.key_file.is_none()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawHttp {
    /// Address of /metrics, /healthz, /readyz and the read API.
    pub listen: Typed<SocketAddr>,
    /// Largest `limit` (and `radius` * 2 + 1) a read may ask for, 1 to 100000.
    pub max_limit: u64,
    /// Most players one friends read (`POST .../players`) may name, 1 to 100000.
    pub max_players: u64,
    /// How long a client may take to send a request's headers, and a
    /// request to be answered; past it the connection is closed (headers)
    /// or the request answered 408. At least 100ms.
    pub request_timeout: Typed<Duration>,
    /// Requests served at once; more are answered 503 at once, 1 to 100000.
    pub max_concurrent_requests: u64,
    /// Live streams (`.../live`) open at once; more are answered 503, 1 to 1000000.
    pub max_streams: u64,
    /// Origins whose pages may read the API from a browser (CORS), such as
    /// `https://play.example.com`; `"*"` lets any. Default: none.
    pub cors_origins: Vec<String>,
    /// How long a browser, proxy or CDN may keep a read's answer, in whole
    /// seconds (`Cache-Control: public, max-age`); `0s` sends `no-store`.
    pub cache_max_age: Typed<Duration>,
    /// The same for answers that do not change: sealed periods (`:final`)
    /// and players' history.
    pub cache_max_age_sealed: Typed<Duration>,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            listen: Typed::default_text("127.0.0.1:9898"),
            max_limit: 1000,
            max_players: 1000,
            request_timeout: Typed::default_text("10s"),
            max_concurrent_requests: 512,
            max_streams: 10_000,
            cors_origins: Vec::new(),
            cache_max_age: Typed::default_text("1s"),
            cache_max_age_sealed: Typed::default_text("1h"),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawEvents {
    /// Largest record value accepted; larger ones are rejected (`too_large`).
    pub max_event_bytes: u64,
    /// Largest `meta` object of an event, as compact JSON, 2 to 65536;
    /// larger ones (and any `meta` that is not an object of strings) are
    /// rejected (`invalid_meta`).
    pub max_meta_bytes: u64,
    /// How far an event's `ts` may be ahead of its Kafka record timestamp
    /// before it is rejected (`future_timestamp`).
    pub max_future_skew: Typed<Duration>,
}

impl Default for RawEvents {
    fn default() -> Self {
        let limits = crate::event::Limits::default();
        RawEvents {
            max_event_bytes: limits.max_event_bytes as u64,
            max_meta_bytes: limits.max_meta_bytes as u64,
            max_future_skew: Typed::default_text("5m"),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawWorker {
    /// Most records applied in one Redis round trip, 1 to 100000.
    pub batch_size: u64,
    /// Most events of one board tag in one apply-script call, 1 to 100000.
    pub max_events_per_call: u64,
    /// How long a batch waits to fill once its first record is in.
    pub batch_linger: Typed<Duration>,
    /// SIGTERM: how long in-flight work may take before it is abandoned.
    pub shutdown_timeout: Typed<Duration>,
    /// Longest wait between retries of Redis or the dead-letter topic; at least 10ms.
    pub max_backoff: Typed<Duration>,
    /// How long one apply call may hold Redis: each board tag's calls carry
    /// as many events as fit at the Redis time per event measured on it (at
    /// most `max_events_per_call`), so a read on the primary waits about one
    /// call. At least 1ms. Default 10ms.
    pub max_call_time: Typed<Duration>,
}

/// The most events one apply-script call carries unless configured
/// (`[worker] max_events_per_call`): 25-55 ms of Redis's time on a 2-core
/// machine, so that reads get in between a batch's calls. Smaller calls
/// cost Redis more per event (docs/benchmarks.md, "What a call's size costs").
pub const DEFAULT_MAX_EVENTS_PER_CALL: usize = 1000;

impl Default for RawWorker {
    fn default() -> Self {
        RawWorker {
            batch_size: 5000,
            max_events_per_call: DEFAULT_MAX_EVENTS_PER_CALL as u64,
            batch_linger: Typed::default_text("5ms"),
            shutdown_timeout: Typed::default_text("30s"),
            max_backoff: Typed::default_text("10s"),
            max_call_time: Typed::default_text("10ms"),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawSealing {
    /// Where the top of every sealed period is published (one record per
    /// board, split and period, keyed `<board>[:<split>]|<period>`).
    pub topic: String,
    /// How many entries of a sealed period are published, 1 to 10000.
    pub top: u64,
    /// A partition whose records are all applied counts as having reached
    /// the wall clock minus this (records produced earlier may still be on
    /// their way to the broker).
    pub idle_grace: Typed<Duration>,
    /// How often a worker looks for due jobs, and how soon a seal that is
    /// not complete yet is tried again; at least 10ms.
    pub check_interval: Typed<Duration>,
    /// How long a claimed job is its worker's; after that (a worker that
    /// died mid-job) another worker takes it. At least 1s.
    pub lease: Typed<Duration>,
}

impl Default for RawSealing {
    fn default() -> Self {
        RawSealing {
            topic: "leaderboards.sealed".into(),
            top: 100,
            idle_grace: Typed::default_text("5s"),
            check_interval: Typed::default_text("1s"),
            lease: Typed::default_text("60s"),
        }
    }
}
