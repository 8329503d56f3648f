//! The config file as written: serde structs with `deny_unknown_fields`,
//! each default stated once (in its section's `Default`), typed values as
//! [`Typed`] so that validation can name every bad field. Doc comments here
//! are the user reference (the README's configuration table follows them).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use chrono_tz::Tz;
use serde::Deserialize;

use super::field::{EpochMs, Typed};
use super::secrets::Secret;
use super::settings::ReadFrom;
use crate::board::{Mode, Order, TieBreak};
use crate::period::PeriodKind;

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBoard {
    /// `[a-z0-9_-]{1,64}`; part of every key of the board.
    pub id: String,
    /// Event types this board takes.
    pub on: Vec<String>,
    /// sum | best | latest (boards without `columns`)
    #[serde(default)]
    pub mode: Option<Typed<Mode>>,
    /// desc: higher is better; asc: lower is better. Default desc.
    #[serde(default)]
    pub order: Option<Typed<Order>>,
    /// Ranking by several columns: `[{ name, mode, order }]`, 2 to 5.
    #[serde(default)]
    pub columns: Option<Vec<RawColumn>>,
    /// With `columns`: columns (each aggregated on its own, the default) |
    /// best (the player's single best submission).
    #[serde(default)]
    pub row: Option<String>,
    /// hourly, daily, weekly, monthly, yearly, all_time
    pub periods: Vec<Typed<PeriodKind>>,
    /// IANA time zone where days and weeks begin. Default UTC.
    #[serde(default = "default_timezone")]
    pub timezone: Typed<Tz>,
    /// member | earliest. Default member.
    #[serde(default = "default_tie_break")]
    pub tie_break: Typed<TieBreak>,
    /// One board per value of `attrs.<split_by>`.
    #[serde(default)]
    pub split_by: Option<String>,
    /// Largest |score| (and |total| on `sum` boards) the board accepts;
    /// beyond it events are refused (`score_out_of_range`). Defaults to
    /// 2^53 - 1, or with `tie_break = "earliest"` the most its budget allows.
    #[serde(default)]
    pub max_score: Option<i64>,
    /// `earliest` ties: start of the tie-break clock (RFC 3339). Default 2020-01-01T00:00:00Z.
    #[serde(default)]
    pub tie_epoch: Option<Typed<EpochMs>>,
    /// `earliest` ties: how fine the clock is (`1s`, `1ms`). Default 1s.
    #[serde(default)]
    pub tie_resolution: Option<Typed<Duration>>,
    /// `earliest` ties: how long after `tie_epoch` the clock runs. Default 30 years.
    #[serde(default)]
    pub tie_horizon: Option<Typed<Duration>>,
    /// Per-period retention after the period ends, e.g. `{ daily = "30d" }`.
    #[serde(default)]
    pub retention: BTreeMap<String, Typed<Duration>>,
    /// Seal every period (but all_time) this long after it ends: freeze it
    /// into `...:final`, publish its top to `[sealing] topic`, and refuse
    /// events produced later (`period_closed`). Unset: periods never close.
    #[serde(default)]
    pub close_after: Option<Typed<Duration>>,
    /// Top-K: keep only the best `max_members` of each period key after
    /// every write (`best` and `latest` boards).
    #[serde(default)]
    pub max_members: Option<u64>,
    /// Per-player limit on event time: `{ events = 30, window = "60s" }`.
    #[serde(default)]
    pub rate_limit: Option<RawRateLimit>,
    /// Keep the dense-rank index (default true, false on sharded boards,
    /// which cannot keep it). Off, writes are cheaper and reads with
    /// `rank=dense` answer 400.
    #[serde(default)]
    pub dense_rank: Option<bool>,
    /// Spread the board's members over this many hash tags (2 to 256), so
    /// that a Redis Cluster spreads its writes over its primaries; reads
    /// merge the shards.
    #[serde(default)]
    pub shards: Option<u32>,
    /// Keep each entry's metadata: the `meta` of the event that explains
    /// its score (`best`: the event that set the best, the first on a tie;
    /// `latest`: the newest by event time; `sum`: the last applied), read
    /// with every entry. Default false.
    #[serde(default)]
    pub meta: bool,
    /// Per player and period, only the first `max_attempts` applied events
    /// count; later ones are refused there (`attempts_exhausted`), while the
    /// board's other periods decide for themselves. 1 to 1000000.
    #[serde(default)]
    pub max_attempts: Option<u64>,
    /// Rolling boards over the daily keys: `[{ name = "last7d", days = 7, refresh = "1m" }]`.
    #[serde(default)]
    pub rolling: Vec<RawRolling>,
    /// Fixed windows (seasons): `[{ name = "season-1", from = "2026-12-01T00:00:00Z", to = "2027-03-01T00:00:00Z" }]`,
    /// each a period `s:<name>` written by the events whose time is in `[from, to)`.
    #[serde(default)]
    pub windows: Vec<RawWindow>,
    /// Recurring periods: `[{ name = "weekend", cron = "0 18 * * FRI", duration = "60h" }]`,
    /// each opening at a firing of the 5-field cron expression in the
    /// board's time zone and lasting `duration`; ids `c:<name>:<local start>`.
    #[serde(default)]
    pub schedules: Vec<RawSchedule>,
    /// Leagues: the rounds (periods of one schedule or window) are played
    /// in cohorts of one tier; see `[board.league]`.
    #[serde(default)]
    pub league: Option<RawLeague>,
    /// Rank changes: every applied event that moves its player up into or
    /// inside the top `notify_top` (1 to 1000) of a period produces a
    /// record to `kafka.changes_topic`.
    #[serde(default)]
    pub notify_top: Option<u64>,
    /// Score integrity: rules that refuse or hold suspicious scores.
    #[serde(default)]
    pub integrity: Option<RawIntegrity>,
}

/// One of a board's `columns`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawColumn {
    pub name: String,
    /// sum | max | min | latest; on `row = "best"` left out.
    #[serde(default)]
    pub mode: Option<String>,
    /// desc (default) | asc
    #[serde(default)]
    pub order: Option<Typed<Order>>,
    /// The bounds of a submission's value in this column (inclusive).
    #[serde(default)]
    pub min: Option<i64>,
    #[serde(default)]
    pub max: Option<i64>,
}

/// `[board.integrity]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIntegrity {
    #[serde(default)]
    pub score_over: Option<RawRule>,
    #[serde(default)]
    pub gain_over: Option<RawRule>,
    #[serde(default)]
    pub jump_over: Option<RawRule>,
    #[serde(default)]
    pub better_than: Option<RawRule>,
    #[serde(default)]
    pub hold_hides_after: Option<RawHides>,
}

/// One rule: `{ limit, action }`, with `window` for `gain_over` and, on a
/// board ranked by several columns, the `column` it judges.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub limit: RawLimit,
    #[serde(default)]
    pub window: Option<Typed<Duration>>,
    #[serde(default)]
    pub column: Option<String>,
    pub action: String,
}

/// A rule's limit: an integer, or text (`jump_over`'s ratio, `"3x"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawLimit {
    Int(i64),
    Text(String),
}

/// `hold_hides_after = { count, window }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHides {
    pub count: u64,
    pub window: Typed<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLeague {
    /// The schedule or window of this board whose periods are the rounds.
    pub rounds: String,
    /// Tier names, lowest first, 2 to 32 of `[a-z0-9_-]{1,32}`.
    pub tiers: Vec<String>,
    /// Players per cohort, 2 to 1000.
    pub cohort_size: u64,
    /// How many of each cohort move up a tier at the round's end: a count,
    /// or a percentage of the cohort (`"20%"`, rounded down, at least 1).
    pub promote: RawShare,
    /// How many move down, the same way.
    pub demote: RawShare,
    /// A player placed in the previous round with no applied event in this
    /// one: `"keep"` their tier or `"demote"` them one. Default demote.
    #[serde(default = "default_idle")]
    pub idle: String,
}

/// A count (`5`) or a percentage (`"20%"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawShare {
    Count(u64),
    Text(String),
}

fn default_idle() -> String {
    "demote".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSchedule {
    /// `[a-z0-9_-]{1,32}`, unique among the board's windows and schedules.
    pub name: String,
    /// Minute, hour, day of month, month, day of week (`0 18 * * FRI`).
    pub cron: String,
    /// How long each period lasts; periods of one schedule must not overlap.
    pub duration: Typed<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWindow {
    /// `[a-z0-9_-]{1,32}`; the period id is `s:<name>`.
    pub name: String,
    /// First instant of the window (RFC 3339), inclusive.
    pub from: Typed<EpochMs>,
    /// First instant after the window (RFC 3339), exclusive.
    pub to: Typed<EpochMs>,
}

fn default_timezone() -> Typed<Tz> {
    Typed::default_text("UTC")
}
fn default_tie_break() -> Typed<TieBreak> {
    Typed::default_text("member")
}

/// `earliest` ties: the tie-break clock starts here unless `tie_epoch` says otherwise.
pub const DEFAULT_TIE_EPOCH: &str = "2020-01-01T00:00:00Z";
/// ... ticks this often unless `tie_resolution` says otherwise ...
pub const DEFAULT_TIE_RESOLUTION: &str = "1s";
/// ... and runs this long: 30 years of seconds take 30 bits and leave scores up to 8,388,607.
pub const DEFAULT_TIE_HORIZON: &str = "30years";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// Events admitted per window per player.
    pub events: u64,
    /// The sliding window `(ts - window, ts]`, on event time.
    pub window: Typed<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRolling {
    /// `[a-z0-9_]{1,32}`; the board is read as `period=<name>`, stored at `...:r:<name>`.
    pub name: String,
    /// How many days, today included, the union covers.
    pub days: u64,
    /// How often it is recomputed (`ZUNIONSTORE` over the daily keys). Default 1m.
    #[serde(default = "default_refresh")]
    pub refresh: Typed<Duration>,
}

fn default_refresh() -> Typed<Duration> {
    Typed::default_text("1m")
}
