//! Configuration: the TOML file of SPEC section 2, its `RANKFLOW_` environment
//! overrides, and validation into types that cannot hold an invalid value.
//!
//! Loading has three steps. The file is read as a TOML tree; every environment
//! variable `RANKFLOW_<SECTION>__<KEY>` (double underscores separate the path,
//! array items are numbered: `RANKFLOW_BOARD__0__MODE=best`) replaces or adds
//! one value in the tree; the tree is then deserialised into the raw structs
//! below (`deny_unknown_fields`) and validated once into [`Settings`]. Raw
//! fields are kept loosely typed (strings for durations and enums) so that
//! validation can name *every* bad field with its reason, not just the first.
//! This module never connects to anything: `rankflow check-config` is exactly
//! [`load`].

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use chrono_tz::Tz;
use serde::Deserialize;

use crate::board::{Board, Mode, Order, Rolling, TieBreak};
use crate::period::PeriodKind;
use crate::score::Packing;

/// `earliest` ties: the tie-break clock starts here unless `tie_epoch` says otherwise.
const DEFAULT_TIE_EPOCH: &str = "2020-01-01T00:00:00Z";
/// ... and runs this long: 30 years of seconds take 30 bits and leave scores up to 8,388,607.
const DEFAULT_TIE_HORIZON: &str = "30years";

/// Event types that are rankflow's own and that no board may list in `on`.
pub const RESERVED_TYPES: &[&str] = &["player_erased"];

// ---------------------------------------------------------------------------
// Raw structs: the file as written. Doc comments here are the user reference.
// ---------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    kafka: RawKafka,
    #[serde(default)]
    redis: RawRedis,
    #[serde(default)]
    http: RawHttp,
    #[serde(default)]
    events: RawEvents,
    #[serde(default)]
    worker: RawWorker,
    #[serde(default)]
    sealing: RawSealing,
    #[serde(default, rename = "board")]
    boards: Vec<RawBoard>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSealing {
    /// Where the top of every sealed period is published (one record per
    /// board, split and period, keyed `<board>[:<split>]|<period>`).
    #[serde(default = "default_sealed_topic")]
    topic: String,
    /// How many entries of a sealed period are published.
    #[serde(default = "default_sealed_top")]
    top: u64,
    /// A partition whose records are all applied counts as having reached
    /// the wall clock minus this (records produced earlier may still be on
    /// their way to the broker).
    #[serde(default = "default_idle_grace")]
    idle_grace: String,
    /// How often a worker looks for due jobs, and how soon a seal that is
    /// not complete yet is tried again.
    #[serde(default = "default_check_interval")]
    check_interval: String,
    /// How long a claimed job is its worker's; after that (a worker that
    /// died mid-job) another worker takes it.
    #[serde(default = "default_lease")]
    lease: String,
}

impl Default for RawSealing {
    fn default() -> Self {
        RawSealing {
            topic: default_sealed_topic(),
            top: default_sealed_top(),
            idle_grace: default_idle_grace(),
            check_interval: default_check_interval(),
            lease: default_lease(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRolling {
    /// `[a-z0-9_]{1,32}`; the board is read as `period=<name>`, stored at `...:r:<name>`.
    name: String,
    /// How many days, today included, the union covers.
    days: u64,
    /// How often it is recomputed (`ZUNIONSTORE` over the daily keys).
    #[serde(default = "default_refresh")]
    refresh: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKafka {
    /// Bootstrap servers, comma separated (librdkafka `bootstrap.servers`).
    brokers: String,
    /// Topics to consume.
    topics: Vec<String>,
    /// Consumer group; every worker of one deployment uses the same.
    #[serde(default = "default_group_id")]
    group_id: String,
    /// Where rejected records go, with headers naming the reason.
    dead_letter_topic: String,
    /// Passed to librdkafka as is, for both the consumer and the dead-letter
    /// producer (`security.protocol`, `sasl.*`, `ssl.*`, `session.timeout.ms`, ...).
    /// Values may be strings, numbers or booleans.
    #[serde(default)]
    options: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedis {
    /// `redis://` or `rediss://` (TLS); user and password in the URL.
    #[serde(default = "default_redis_url")]
    url: String,
    /// true: Redis Cluster, and `url` is a seed node.
    #[serde(default)]
    cluster: bool,
    /// First segment of every key rankflow writes.
    #[serde(default = "default_key_prefix")]
    key_prefix: String,
    /// How long an `event_id` is recognised (at least this, at most twice);
    /// a producer retry later than that counts again (a redelivered offset
    /// never does).
    #[serde(default = "default_dedupe_ttl")]
    dedupe_ttl: String,
}

impl Default for RawRedis {
    fn default() -> Self {
        RawRedis {
            url: default_redis_url(),
            cluster: false,
            key_prefix: default_key_prefix(),
            dedupe_ttl: default_dedupe_ttl(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    /// Address of /metrics, /healthz, /readyz and the read API.
    #[serde(default = "default_listen")]
    listen: String,
    /// Largest `limit` (and `radius` * 2 + 1) a read may ask for.
    #[serde(default = "default_max_limit")]
    max_limit: u64,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp { listen: default_listen(), max_limit: default_max_limit() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    /// Largest record value accepted; larger ones are rejected (`too_large`).
    #[serde(default = "default_max_event_bytes")]
    max_event_bytes: u64,
    /// How far an event's `ts` may be ahead of its Kafka record timestamp
    /// before it is rejected (`future_timestamp`).
    #[serde(default = "default_max_future_skew")]
    max_future_skew: String,
}

impl Default for RawEvents {
    fn default() -> Self {
        RawEvents { max_event_bytes: default_max_event_bytes(), max_future_skew: default_max_future_skew() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    /// Most records applied in one Redis round trip.
    #[serde(default = "default_batch_size")]
    batch_size: u64,
    /// How long a batch waits to fill once its first record is in.
    #[serde(default = "default_batch_linger")]
    batch_linger: String,
    /// SIGTERM: how long in-flight work may take before it is abandoned.
    #[serde(default = "default_shutdown_timeout")]
    shutdown_timeout: String,
    /// Longest wait between retries of Redis or the dead-letter topic.
    #[serde(default = "default_max_backoff")]
    max_backoff: String,
}

impl Default for RawWorker {
    fn default() -> Self {
        RawWorker {
            batch_size: default_batch_size(),
            batch_linger: default_batch_linger(),
            shutdown_timeout: default_shutdown_timeout(),
            max_backoff: default_max_backoff(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBoard {
    /// `[a-z0-9_-]{1,64}`; part of every key of the board.
    id: String,
    /// Event types this board takes.
    on: Vec<String>,
    /// sum | best | latest
    mode: String,
    /// desc: higher is better; asc: lower is better.
    #[serde(default = "default_order")]
    order: String,
    /// hourly, daily, weekly, monthly, yearly, all_time
    periods: Vec<String>,
    /// IANA time zone where days and weeks begin.
    #[serde(default = "default_timezone")]
    timezone: String,
    /// member | earliest
    #[serde(default = "default_tie_break")]
    tie_break: String,
    /// One board per value of `attrs.<split_by>`.
    #[serde(default)]
    split_by: Option<String>,
    /// Largest |score| (and |total| on `sum` boards) the board accepts;
    /// beyond it events are refused (`score_out_of_range`). Defaults to
    /// 2^53 - 1, or with `tie_break = "earliest"` the most its budget allows.
    #[serde(default)]
    max_score: Option<i64>,
    /// `earliest` ties: start of the tie-break clock (RFC 3339).
    #[serde(default)]
    tie_epoch: Option<String>,
    /// `earliest` ties: how fine the clock is (`1s`, `1ms`).
    #[serde(default)]
    tie_resolution: Option<String>,
    /// `earliest` ties: how long after `tie_epoch` the clock runs.
    #[serde(default)]
    tie_horizon: Option<String>,
    /// Per-period retention after the period ends, e.g. `{ daily = "30d" }`.
    #[serde(default)]
    retention: BTreeMap<String, String>,
    /// Seal every period (but all_time) this long after it ends: freeze it
    /// into `...:final`, publish its top to `[sealing] topic`, and refuse
    /// events produced later (`period_closed`). Unset: periods never close.
    #[serde(default)]
    close_after: Option<String>,
    /// Top-K: keep only the best `max_members` of each period key after
    /// every write (`best` and `latest` boards).
    #[serde(default)]
    max_members: Option<u64>,
    /// Per-player limit on event time: `{ events = 30, window = "60s" }`.
    #[serde(default)]
    rate_limit: Option<RawRateLimit>,
    /// Keep the dense-rank index (default true). Off, writes are cheaper and
    /// reads with `rank=dense` answer 400.
    #[serde(default = "default_true")]
    dense_rank: bool,
    /// Rolling boards over the daily keys: `[{ name = "last7d", days = 7, refresh = "1m" }]`.
    #[serde(default)]
    rolling: Vec<RawRolling>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    /// Events admitted per window per player.
    events: u64,
    /// The sliding window `(ts - window, ts]`, on event time.
    window: String,
}

fn default_sealed_topic() -> String {
    "leaderboards.sealed".into()
}
fn default_sealed_top() -> u64 {
    100
}
fn default_idle_grace() -> String {
    "5s".into()
}
fn default_check_interval() -> String {
    "1s".into()
}
fn default_lease() -> String {
    "60s".into()
}
fn default_refresh() -> String {
    "1m".into()
}

fn default_true() -> bool {
    true
}

fn default_group_id() -> String {
    "rankflow".into()
}
fn default_redis_url() -> String {
    "redis://127.0.0.1:6379".into()
}
fn default_key_prefix() -> String {
    "lb".into()
}
fn default_dedupe_ttl() -> String {
    "7d".into()
}
fn default_listen() -> String {
    "127.0.0.1:9898".into()
}
fn default_max_limit() -> u64 {
    1000
}
fn default_max_event_bytes() -> u64 {
    64 * 1024
}
fn default_max_future_skew() -> String {
    "5m".into()
}
fn default_batch_size() -> u64 {
    5000
}
fn default_batch_linger() -> String {
    "5ms".into()
}
fn default_shutdown_timeout() -> String {
    "30s".into()
}
fn default_max_backoff() -> String {
    "10s".into()
}
fn default_order() -> String {
    "desc".into()
}
fn default_timezone() -> String {
    "UTC".into()
}
fn default_tie_break() -> String {
    "member".into()
}

// ---------------------------------------------------------------------------
// Validated settings.
// ---------------------------------------------------------------------------

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub kafka: KafkaSettings,
    pub redis: RedisSettings,
    pub http: HttpSettings,
    pub events: EventSettings,
    pub worker: WorkerSettings,
    pub sealing: SealingSettings,
    pub boards: Vec<Board>,
}

/// `[sealing]`: the scheduler of sealed periods and rolling boards.
#[derive(Debug, Clone)]
pub struct SealingSettings {
    pub topic: String,
    pub top: usize,
    pub idle_grace: Duration,
    pub check_interval: Duration,
    pub lease: Duration,
}

impl Settings {
    /// Whether any board closes its periods (and so needs watermarks).
    pub fn seals(&self) -> bool {
        self.boards.iter().any(|b| b.close_after.is_some())
    }

    /// Whether the scheduler has anything to do.
    pub fn schedules(&self) -> bool {
        self.boards.iter().any(|b| b.close_after.is_some() || !b.rolling.is_empty())
    }
}

#[derive(Debug, Clone)]
pub struct KafkaSettings {
    pub brokers: String,
    pub topics: Vec<String>,
    pub group_id: String,
    pub dead_letter_topic: String,
    /// librdkafka options as strings, applied after rankflow's own defaults.
    pub options: BTreeMap<String, String>,
}

#[derive(Clone)]
pub struct RedisSettings {
    pub url: String,
    pub cluster: bool,
    pub key_prefix: String,
    pub dedupe_ttl: Duration,
}

impl std::fmt::Debug for RedisSettings {
    // The URL may carry a password: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("cluster", &self.cluster)
            .field("key_prefix", &self.key_prefix)
            .field("dedupe_ttl", &self.dedupe_ttl)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub listen: SocketAddr,
    pub max_limit: usize,
}

#[derive(Debug, Clone)]
pub struct EventSettings {
    pub max_event_bytes: usize,
    pub max_future_skew: Duration,
}

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub batch_size: usize,
    pub batch_linger: Duration,
    pub shutdown_timeout: Duration,
    pub max_backoff: Duration,
}

/// One problem with the configuration: the dotted path of the field and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("config file is not valid TOML: {0}")]
    Toml(String),
    #[error("invalid configuration:\n{}", .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<FieldError>),
}

impl ConfigError {
    /// The field errors, if this is a validation failure.
    pub fn fields(&self) -> &[FieldError] {
        match self {
            ConfigError::Invalid(v) => v,
            _ => &[],
        }
    }
}

/// Reads, overrides from the process environment, and validates a config file.
pub fn load(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
    load_str(&text, std::env::vars())
}

/// [`load`] on a string, with the environment passed in (for tests).
pub fn load_str(text: &str, env: impl IntoIterator<Item = (String, String)>) -> Result<Settings, ConfigError> {
    let mut tree: toml::Value = toml::from_str(text).map_err(|e| ConfigError::Toml(e.to_string()))?;
    let mut errors = Vec::new();
    for (name, value) in env {
        if let Some(path) = name.strip_prefix("RANKFLOW_") {
            if path == "LOG" || path == "LOG_FORMAT" {
                continue; // logging switches, read by main
            }
            if let Err(reason) = apply_override(&mut tree, path, &value) {
                errors.push(FieldError { field: name.clone(), reason });
            }
        }
    }
    if !errors.is_empty() {
        return Err(ConfigError::Invalid(errors));
    }
    let raw: RawConfig = serde_path_to_error::deserialize(tree).map_err(|e| {
        let field = e.path().to_string();
        let reason = e.inner().to_string();
        ConfigError::Invalid(vec![FieldError {
            field: if field == "." { "(top level)".into() } else { field },
            reason,
        }])
    })?;
    validate(raw)
}

/// Applies one `RANKFLOW_` variable to the TOML tree. Path segments are
/// matched case-insensitively; under `kafka.options` a segment's underscores
/// become dots (`SASL_PASSWORD` -> `sasl.password`).
fn apply_override(tree: &mut toml::Value, path: &str, value: &str) -> Result<(), String> {
    let segments: Vec<String> = path.split("__").map(|s| s.to_ascii_lowercase()).collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err("empty path segment in variable name (use __ between segments)".into());
    }
    let mut node = tree;
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        let in_options = i == 2 && segments[0] == "kafka" && segments[1] == "options";
        let key = if in_options { seg.replace('_', ".") } else { seg.clone() };
        // `board` is an array of tables in the file.
        let key = if i == 0 && key == "board" { "board".to_string() } else { key };
        match node {
            toml::Value::Array(items) => {
                let idx: usize = seg.parse().map_err(|_| format!("segment '{seg}' must be an array index"))?;
                if idx >= items.len() {
                    return Err(format!("index {idx} is past the {} configured items", items.len()));
                }
                if i == last {
                    items[idx] = parse_env_value(value, Some(&items[idx]));
                    return Ok(());
                }
                node = &mut items[idx];
            }
            toml::Value::Table(table) => {
                if i == last {
                    let parsed = parse_env_value(value, table.get(&key));
                    table.insert(key, parsed);
                    return Ok(());
                }
                node = table.entry(key).or_insert_with(|| toml::Value::Table(Default::default()));
            }
            _ => return Err(format!("'{seg}' is inside a value that is not a table")),
        }
    }
    Ok(())
}

/// An override keeps the type of the value it replaces where that is a
/// string; otherwise it is read as a TOML value (`true`, `42`, `["a","b"]`)
/// and falls back to a string.
fn parse_env_value(text: &str, existing: Option<&toml::Value>) -> toml::Value {
    if matches!(existing, Some(toml::Value::String(_))) {
        return toml::Value::String(text.to_string());
    }
    match toml::from_str::<toml::Table>(&format!("v = {text}")) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| toml::Value::String(text.to_string())),
        Err(_) => toml::Value::String(text.to_string()),
    }
}

/// Parses a duration written as `90s`, `15m`, `8d`, `5w`, `13months`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("'{text}' is not a duration like 90s, 15m or 8d ({e})"))
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

fn is_board_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn is_topic_name(s: &str) -> bool {
    (1..=249).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.0.push(FieldError { field: field.into(), reason: reason.into() });
    }
    fn duration(&mut self, field: &str, text: &str) -> Duration {
        parse_duration(text).unwrap_or_else(|reason| {
            self.push(field, reason);
            Duration::ZERO
        })
    }
}

fn validate(raw: RawConfig) -> Result<Settings, ConfigError> {
    let mut e = Errors(Vec::new());

    // [kafka]
    let k = raw.kafka;
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
    if k.group_id.trim().is_empty() {
        e.push("kafka.group_id", "must not be empty");
    }
    if !is_topic_name(&k.dead_letter_topic) {
        e.push("kafka.dead_letter_topic", format!("'{}' is not a Kafka topic name", k.dead_letter_topic));
    } else if k.topics.contains(&k.dead_letter_topic) {
        e.push("kafka.dead_letter_topic", "must not be one of kafka.topics (rejected records would be read again)");
    }
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
        if matches!(key.as_str(), "enable.auto.offset.store" | "group.id" | "bootstrap.servers") {
            e.push(format!("kafka.options.{key}"), "is set by rankflow itself and cannot be overridden here");
            continue;
        }
        options.insert(key, text);
    }

    // [redis]
    let r = raw.redis;
    if !(r.url.starts_with("redis://") || r.url.starts_with("rediss://")) {
        e.push("redis.url", "must start with redis:// or rediss://");
    } else if let Err(err) = redis::Client::open(r.url.as_str()) {
        e.push("redis.url", format!("is not a valid Redis URL ({err})"));
    }
    if r.key_prefix.is_empty() || r.key_prefix.len() > 64 || r.key_prefix.contains(['{', '}', ' ']) {
        e.push("redis.key_prefix", "must be 1 to 64 characters without braces or spaces");
    }
    let dedupe_ttl = e.duration("redis.dedupe_ttl", &r.dedupe_ttl);
    if dedupe_ttl < Duration::from_secs(1) && parse_duration(&r.dedupe_ttl).is_ok() {
        e.push("redis.dedupe_ttl", "must be at least 1s");
    }

    // [http]
    let listen = raw.http.listen.parse::<SocketAddr>().unwrap_or_else(|_| {
        e.push("http.listen", format!("'{}' is not an address like 127.0.0.1:9898", raw.http.listen));
        SocketAddr::from(([127, 0, 0, 1], 0))
    });
    if raw.http.max_limit == 0 || raw.http.max_limit > 100_000 {
        e.push("http.max_limit", "must be between 1 and 100000");
    }

    // [events]
    if raw.events.max_event_bytes == 0 || raw.events.max_event_bytes > 16 * 1024 * 1024 {
        e.push("events.max_event_bytes", "must be between 1 and 16777216");
    }
    let max_future_skew = e.duration("events.max_future_skew", &raw.events.max_future_skew);

    // [worker]
    if raw.worker.batch_size == 0 || raw.worker.batch_size > 100_000 {
        e.push("worker.batch_size", "must be between 1 and 100000");
    }
    let batch_linger = e.duration("worker.batch_linger", &raw.worker.batch_linger);
    let shutdown_timeout = e.duration("worker.shutdown_timeout", &raw.worker.shutdown_timeout);
    let max_backoff = e.duration("worker.max_backoff", &raw.worker.max_backoff);
    if max_backoff < Duration::from_millis(10) && parse_duration(&raw.worker.max_backoff).is_ok() {
        e.push("worker.max_backoff", "must be at least 10ms");
    }

    // [sealing]
    let sealing = raw.sealing;
    if sealing.topic.is_empty() || sealing.topic.len() > 249 {
        e.push("sealing.topic", "must be a Kafka topic name (1 to 249 characters)");
    }
    if sealing.top == 0 || sealing.top > 10_000 {
        e.push("sealing.top", "must be between 1 and 10000");
    }
    let idle_grace = e.duration("sealing.idle_grace", &sealing.idle_grace);
    let check_interval = e.duration("sealing.check_interval", &sealing.check_interval);
    if check_interval < Duration::from_millis(10) && parse_duration(&sealing.check_interval).is_ok() {
        e.push("sealing.check_interval", "must be at least 10ms");
    }
    let lease = e.duration("sealing.lease", &sealing.lease);
    if lease < Duration::from_secs(1) && parse_duration(&sealing.lease).is_ok() {
        e.push("sealing.lease", "must be at least 1s");
    }

    // [[board]]
    if raw.boards.is_empty() {
        e.push("board", "at least one [[board]] is required");
    }
    let mut seen_ids = HashSet::new();
    let mut boards = Vec::new();
    for (i, b) in raw.boards.into_iter().enumerate() {
        let f = |name: &str| format!("board[{i}].{name}");
        if !is_board_id(&b.id) {
            e.push(f("id"), format!("'{}' must match [a-z0-9_-]{{1,64}}", b.id));
        } else if !seen_ids.insert(b.id.clone()) {
            e.push(f("id"), format!("'{}' is used by another board", b.id));
        }
        if b.on.is_empty() {
            e.push(f("on"), "must list at least one event type");
        }
        for (j, t) in b.on.iter().enumerate() {
            if t.is_empty() || t.len() > 128 {
                e.push(format!("board[{i}].on[{j}]"), "event types are 1 to 128 bytes");
            } else if RESERVED_TYPES.contains(&t.as_str()) {
                e.push(format!("board[{i}].on[{j}]"), format!("'{t}' is reserved by rankflow"));
            }
        }
        let mode = match b.mode.as_str() {
            "sum" => Some(Mode::Sum),
            "best" => Some(Mode::Best),
            "latest" => Some(Mode::Latest),
            other => {
                e.push(f("mode"), format!("'{other}' is not one of sum, best, latest"));
                None
            }
        };
        let order = match b.order.as_str() {
            "desc" => Order::Desc,
            "asc" => Order::Asc,
            other => {
                e.push(f("order"), format!("'{other}' is not one of desc, asc"));
                Order::Desc
            }
        };
        let tie_break = match b.tie_break.as_str() {
            "member" => TieBreak::Member,
            "earliest" => TieBreak::Earliest,
            other => {
                e.push(f("tie_break"), format!("'{other}' is not one of member, earliest"));
                TieBreak::Member
            }
        };
        let mut periods = Vec::new();
        if b.periods.is_empty() {
            e.push(f("periods"), "must list at least one period");
        }
        for (j, p) in b.periods.iter().enumerate() {
            match PeriodKind::parse(p) {
                Some(kind) if periods.contains(&kind) => {
                    e.push(format!("board[{i}].periods[{j}]"), format!("'{p}' is listed twice"))
                }
                Some(kind) => periods.push(kind),
                None => e.push(
                    format!("board[{i}].periods[{j}]"),
                    format!("'{p}' is not one of hourly, daily, weekly, monthly, yearly, all_time"),
                ),
            }
        }
        let timezone: Tz = b.timezone.parse().unwrap_or_else(|_| {
            e.push(f("timezone"), format!("'{}' is not an IANA time zone name", b.timezone));
            Tz::UTC
        });
        if let Some(s) = &b.split_by {
            if s.is_empty() || s.len() > 128 {
                e.push(f("split_by"), "must name an attrs key (1 to 128 bytes)");
            }
        }
        let mut retention = BTreeMap::new();
        for (name, text) in &b.retention {
            match PeriodKind::parse(name) {
                Some(PeriodKind::AllTime) => {
                    e.push(format!("board[{i}].retention.{name}"), "all_time boards never expire")
                }
                Some(kind) => {
                    let d = e.duration(&format!("board[{i}].retention.{name}"), text);
                    retention.insert(kind, d);
                }
                None => e.push(format!("board[{i}].retention.{name}"), "is not a period name"),
            }
        }
        match (b.max_members, mode) {
            (Some(_), Some(Mode::Sum)) => e.push(
                f("max_members"),
                "top-K trimming is refused on sum boards: a trimmed member's total cannot be rebuilt, so its later points would count from zero",
            ),
            (Some(0), _) | (Some(1_000_000_001..), _) => e.push(f("max_members"), "must be between 1 and 1000000000"),
            _ => {}
        }
        let rate_limit = b.rate_limit.as_ref().and_then(|r| {
            let window = e.duration(&f("rate_limit.window"), &r.window);
            if r.events == 0 {
                e.push(f("rate_limit.events"), "must be at least 1");
                None
            } else if window < Duration::from_millis(1) {
                e.push(f("rate_limit.window"), "must be at least 1ms");
                None
            } else {
                Some((r.events, window.as_millis().min(i64::MAX as u128 / 4) as i64))
            }
        });
        let close_after = b.close_after.as_ref().map(|text| e.duration(&f("close_after"), text));
        if close_after.is_some() {
            if periods.iter().all(|&k| k == PeriodKind::AllTime) && !periods.is_empty() {
                e.push(f("close_after"), "all_time never ends, so there is no period to close");
            }
            for &kind in &periods {
                let keep = retention.get(&kind).copied().or_else(|| kind.default_retention());
                if let (Some(keep), Some(after)) = (keep, close_after) {
                    if keep <= after {
                        e.push(
                            f("close_after"),
                            format!("must be shorter than the {kind} retention ({keep:?}): the period would expire before it is sealed"),
                        );
                    }
                }
            }
        }
        let mut rolling = Vec::new();
        for (j, r) in b.rolling.iter().enumerate() {
            let g = |name: &str| format!("board[{i}].rolling[{j}].{name}");
            let refresh = e.duration(&g("refresh"), &r.refresh);
            if !is_rolling_name(&r.name) {
                e.push(g("name"), format!("'{}' must match [a-z0-9_]{{1,32}} and not be a period name", r.name));
            } else if rolling.iter().any(|x: &Rolling| x.name == r.name) {
                e.push(g("name"), format!("'{}' is used by another rolling board", r.name));
            }
            if r.days == 0 || r.days > 366 {
                e.push(g("days"), "must be between 1 and 366");
            }
            if refresh < Duration::from_secs(1) && parse_duration(&r.refresh).is_ok() {
                e.push(g("refresh"), "must be at least 1s");
            }
            if !periods.contains(&PeriodKind::Daily) {
                e.push(g("name"), "a rolling board is a union of daily keys: add \"daily\" to periods");
            }
            match mode {
                Some(Mode::Latest) => e.push(
                    g("name"),
                    "refused on latest boards: a union of daily values cannot tell which day's value is the newest",
                ),
                Some(Mode::Sum) if tie_break == TieBreak::Earliest => e.push(
                    g("name"),
                    "refused on sum boards with tie_break = \"earliest\": adding the days would add their packed tie-break times too",
                ),
                _ => {}
            }
            rolling.push(Rolling { name: r.name.clone(), days: r.days as u32, refresh });
        }
        let packing = match tie_break {
            TieBreak::Member => {
                for (name, set) in [
                    ("tie_epoch", b.tie_epoch.is_some()),
                    ("tie_resolution", b.tie_resolution.is_some()),
                    ("tie_horizon", b.tie_horizon.is_some()),
                ] {
                    if set {
                        e.push(f(name), "only applies with tie_break = \"earliest\"");
                    }
                }
                Packing::member(b.max_score).map_err(|reason| e.push(f("max_score"), reason)).ok()
            }
            TieBreak::Earliest => {
                let epoch_text = b.tie_epoch.as_deref().unwrap_or(DEFAULT_TIE_EPOCH);
                let epoch_ms = chrono::DateTime::parse_from_rfc3339(epoch_text)
                    .map(|t| t.timestamp_millis())
                    .unwrap_or_else(|_| {
                        e.push(f("tie_epoch"), format!("'{epoch_text}' is not an RFC 3339 time"));
                        0
                    });
                let resolution = e.duration(&f("tie_resolution"), b.tie_resolution.as_deref().unwrap_or("1s"));
                let horizon = e.duration(&f("tie_horizon"), b.tie_horizon.as_deref().unwrap_or(DEFAULT_TIE_HORIZON));
                if resolution < Duration::from_millis(1) {
                    e.push(f("tie_resolution"), "must be at least 1ms");
                    None
                } else {
                    Packing::earliest(
                        order == Order::Desc,
                        epoch_ms,
                        resolution.as_millis() as i64,
                        horizon.as_millis().min(i64::MAX as u128) as i64,
                        b.max_score,
                    )
                    .map_err(|reason| e.push(f("tie_horizon"), reason))
                    .ok()
                }
            }
        };
        if let (Some(mode), Some(packing)) = (mode, packing) {
            let mut board =
                Board::new(b.id, b.on, mode, order, periods, timezone, tie_break, b.split_by, packing, retention);
            board.max_members = b.max_members;
            board.rate_limit = rate_limit;
            board.dense_rank = b.dense_rank;
            board.close_after = close_after;
            board.rolling = rolling;
            boards.push(board);
        }
    }

    if !e.0.is_empty() {
        return Err(ConfigError::Invalid(e.0));
    }
    Ok(Settings {
        kafka: KafkaSettings {
            brokers: k.brokers,
            topics: k.topics,
            group_id: k.group_id,
            dead_letter_topic: k.dead_letter_topic,
            options,
        },
        redis: RedisSettings { url: r.url, cluster: r.cluster, key_prefix: r.key_prefix, dedupe_ttl },
        http: HttpSettings { listen, max_limit: raw.http.max_limit as usize },
        events: EventSettings { max_event_bytes: raw.events.max_event_bytes as usize, max_future_skew },
        worker: WorkerSettings {
            batch_size: raw.worker.batch_size as usize,
            batch_linger,
            shutdown_timeout,
            max_backoff,
        },
        sealing: SealingSettings { topic: sealing.topic, top: sealing.top as usize, idle_grace, check_interval, lease },
        boards,
    })
}

/// A rolling board's name: a key segment that cannot be mistaken for a period.
fn is_rolling_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        && PeriodKind::parse(name).is_none()
        && name != "all"
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[kafka]
brokers = "127.0.0.1:9092"
topics = ["scores"]
dead_letter_topic = "scores.dlq"
[kafka.options]
"session.timeout.ms" = 30000

[redis]
url = "redis://127.0.0.1:6379"
dedupe_ttl = "7d"

[[board]]
id = "points"
on = ["match_finished"]
mode = "sum"
periods = ["daily", "weekly", "all_time"]

[[board]]
id = "laps"
on = ["lap"]
mode = "best"
order = "asc"
periods = ["all_time"]
timezone = "Europe/Berlin"
split_by = "track"
retention = { daily = "30d" }
"#;

    fn none() -> Vec<(String, String)> {
        Vec::new()
    }

    fn errors(text: &str, env: Vec<(String, String)>) -> Vec<FieldError> {
        match load_str(text, env) {
            Err(ConfigError::Invalid(v)) => v,
            other => panic!("expected field errors, got {other:?}"),
        }
    }

    #[test]
    fn a_good_file_loads_with_defaults() {
        let s = load_str(GOOD, none()).unwrap();
        assert_eq!(s.kafka.group_id, "rankflow");
        assert_eq!(s.kafka.options["session.timeout.ms"], "30000");
        assert_eq!(s.redis.dedupe_ttl, Duration::from_secs(7 * 86400));
        assert_eq!(s.redis.key_prefix, "lb");
        assert_eq!(s.http.listen.port(), 9898);
        assert_eq!(s.events.max_event_bytes, 65536);
        assert_eq!(s.events.max_future_skew, Duration::from_secs(300));
        assert_eq!(s.boards.len(), 2);
        assert_eq!(s.boards[1].order, Order::Asc);
        assert_eq!(s.boards[1].split_by.as_deref(), Some("track"));
        assert_eq!(s.boards[1].retention(PeriodKind::Daily), Some(Duration::from_secs(30 * 86400)));
        assert_eq!(s.boards[1].retention(PeriodKind::Weekly), Some(Duration::from_secs(35 * 86400)));
    }

    #[test]
    fn environment_overrides_any_value() {
        let env = vec![
            ("RANKFLOW_KAFKA__BROKERS".to_string(), "k1:9092,k2:9092".to_string()),
            ("RANKFLOW_REDIS__CLUSTER".to_string(), "true".to_string()),
            ("RANKFLOW_BOARD__1__MODE".to_string(), "sum".to_string()),
            ("RANKFLOW_KAFKA__OPTIONS__SASL_PASSWORD".to_string(), "s3cret".to_string()),
            ("RANKFLOW_KAFKA__TOPICS".to_string(), r#"["a","b"]"#.to_string()),
            ("UNRELATED".to_string(), "x".to_string()),
        ];
        let s = load_str(GOOD, env).unwrap();
        assert_eq!(s.kafka.brokers, "k1:9092,k2:9092");
        assert!(s.redis.cluster);
        assert_eq!(s.boards[1].mode, Mode::Sum);
        assert_eq!(s.kafka.options["sasl.password"], "s3cret");
        assert_eq!(s.kafka.topics, vec!["a", "b"]);
    }

    #[test]
    fn every_bad_field_is_named_with_its_reason() {
        let bad = GOOD
            .replace("id = \"points\"", "id = \"Points!\"")
            .replace("mode = \"best\"", "mode = \"median\"")
            .replace("\"weekly\"", "\"fortnightly\"")
            .replace("Europe/Berlin", "Mars/Olympus")
            .replace("dedupe_ttl = \"7d\"", "dedupe_ttl = \"seven days\"");
        let errs = errors(&bad, none());
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        for f in ["board[0].id", "board[1].mode", "board[0].periods[1]", "board[1].timezone", "redis.dedupe_ttl"] {
            assert!(fields.contains(&f), "{f} not in {fields:?}");
        }
        assert!(errs.iter().all(|e| !e.reason.is_empty()));
    }

    #[test]
    fn unknown_fields_are_named() {
        let errs = errors(&GOOD.replace("[redis]", "[redis]\ncolour = \"blue\""), none());
        assert_eq!(errs[0].field, "redis.colour");
        assert!(errs[0].reason.contains("unknown field"), "{}", errs[0].reason);
    }

    #[test]
    fn dead_letter_topic_cannot_be_a_source_topic() {
        let errs = errors(&GOOD.replace("\"scores.dlq\"", "\"scores\""), none());
        assert_eq!(errs[0].field, "kafka.dead_letter_topic");
    }

    #[test]
    fn reserved_event_types_are_refused_with_a_reason() {
        let text = GOOD.replace("on = [\"lap\"]", "on = [\"player_erased\"]");
        let errs = errors(&text, none());
        assert!(errs.iter().any(|e| e.field == "board[1].on[0]" && e.reason.contains("reserved")));
    }

    #[test]
    fn sealing_and_rolling_boards_parse_and_inexact_combinations_are_refused() {
        let text = GOOD.replace(
            "periods = [\"daily\", \"weekly\", \"all_time\"]",
            "periods = [\"daily\", \"weekly\", \"all_time\"]\nclose_after = \"1h\"\nrolling = [{ name = \"last7d\", days = 7, refresh = \"30s\" }]",
        ) + "[sealing]\ntopic = \"prizes\"\ntop = 10\n";
        let s = load_str(&text, none()).unwrap();
        assert_eq!(s.boards[0].close_after, Some(Duration::from_secs(3600)));
        assert_eq!(
            s.boards[0].rolling[0],
            Rolling { name: "last7d".into(), days: 7, refresh: Duration::from_secs(30) }
        );
        assert_eq!((s.sealing.topic.as_str(), s.sealing.top), ("prizes", 10));
        assert!(s.seals() && s.schedules());

        // A rolling union needs daily keys; latest boards and summed packed ties cannot be unioned.
        let text = GOOD.replace("split_by = \"track\"", "rolling = [{ name = \"week\", days = 7 }]");
        let errs = errors(&text, none());
        assert!(errs.iter().any(|e| e.field == "board[1].rolling[0].name" && e.reason.contains("daily")), "{errs:?}");
        let text = GOOD.replace(
            "mode = \"sum\"",
            "mode = \"sum\"\ntie_break = \"earliest\"\nrolling = [{ name = \"daily\", days = 0 }, { name = \"last3d\", days = 3 }]",
        );
        let errs = errors(&text, none());
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"board[0].rolling[0].name"), "{errs:?}");
        assert!(fields.contains(&"board[0].rolling[0].days"), "{errs:?}");
        assert!(
            errs.iter().any(|e| e.field == "board[0].rolling[1].name" && e.reason.contains("earliest")),
            "{errs:?}"
        );
        let text = GOOD.replace("mode = \"sum\"", "mode = \"latest\"\nrolling = [{ name = \"last3d\", days = 3 }]");
        let errs = errors(&text, none());
        assert!(errs.iter().any(|e| e.field == "board[0].rolling[0].name" && e.reason.contains("latest")), "{errs:?}");

        // Sealing: all_time never closes, and a period must outlive its close.
        let text = GOOD.replace("split_by = \"track\"", "close_after = \"1h\"");
        let errs = errors(&text, none());
        assert!(errs.iter().any(|e| e.field == "board[1].close_after" && e.reason.contains("all_time")), "{errs:?}");
        let text = GOOD.replace("mode = \"sum\"", "mode = \"sum\"\nclose_after = \"9d\"");
        let errs = errors(&text, none());
        assert!(
            errs.iter().any(|e| e.field == "board[0].close_after" && e.reason.contains("daily retention")),
            "{errs:?}"
        );
    }

    #[test]
    fn an_impossible_tie_budget_is_refused_with_the_numbers() {
        let text = GOOD.replace("tie_break = \"member\"", "").replace(
            "periods = [\"daily\", \"weekly\", \"all_time\"]",
            "periods = [\"all_time\"]\ntie_break = \"earliest\"\ntie_resolution = \"1ms\"\nmax_score = 1000000",
        );
        let errs = errors(&text, none());
        assert_eq!(errs[0].field, "board[0].tie_horizon");
        assert!(errs[0].reason.contains("at most"), "{}", errs[0].reason);
        let ok = GOOD.replace(
            "periods = [\"daily\", \"weekly\", \"all_time\"]",
            "periods = [\"all_time\"]\ntie_break = \"earliest\"",
        );
        let s = load_str(&ok, none()).unwrap();
        assert_eq!(s.boards[0].packing.max_value(), (1 << 23) - 1);
    }

    #[test]
    fn top_k_on_a_sum_board_is_refused_with_the_reason_and_rate_limits_parse() {
        let text = GOOD.replace("mode = \"sum\"", "mode = \"sum\"\nmax_members = 10");
        let errs = errors(&text, none());
        assert_eq!(errs[0].field, "board[0].max_members");
        assert!(errs[0].reason.contains("cannot be rebuilt"), "{}", errs[0].reason);
        let text = GOOD.replace(
            "mode = \"best\"",
            "mode = \"latest\"\nmax_members = 3\nrate_limit = { events = 2, window = \"60s\" }",
        );
        let s = load_str(&text, none()).unwrap();
        assert_eq!(s.boards[1].mode, Mode::Latest);
        assert_eq!(s.boards[1].max_members, Some(3));
        assert_eq!(s.boards[1].rate_limit, Some((2, 60_000)));
        let text = GOOD.replace("mode = \"best\"", "mode = \"best\"\nrate_limit = { events = 0, window = \"soon\" }");
        let fields: Vec<String> = errors(&text, none()).into_iter().map(|e| e.field).collect();
        assert!(fields.contains(&"board[1].rate_limit.window".to_string()), "{fields:?}");
    }

    #[test]
    fn duplicate_board_ids_are_refused() {
        let errs = errors(&GOOD.replace("id = \"laps\"", "id = \"points\""), none());
        assert_eq!(errs[0].field, "board[1].id");
    }

    #[test]
    fn bad_environment_paths_name_the_variable() {
        let errs = errors(GOOD, vec![("RANKFLOW_BOARD__7__MODE".into(), "sum".into())]);
        assert_eq!(errs[0].field, "RANKFLOW_BOARD__7__MODE");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }
}
