//! Configuration: the TOML file, its `RANKFLOW_` environment overrides, and
//! validation into types that cannot hold an invalid value.
//!
//! Loading has three steps. The file is read as a TOML tree; every environment
//! variable `RANKFLOW_<SECTION>__<KEY>` (double underscores separate the path,
//! array items are numbered: `RANKFLOW_BOARD__0__MODE=best`) replaces or adds
//! one value in the tree ([`env`]); the tree is then deserialised into the raw
//! structs ([`raw`], `deny_unknown_fields`), whose typed values keep their
//! parse errors ([`field::Typed`]), and validated once, section by section
//! ([`sections`], [`boards`]), into [`Settings`]. Validation names *every*
//! bad field with its path and reason, not just the first. This module never
//! connects to anything: `rankflow check-config` is exactly [`load`].

use std::path::Path;

mod boards;
mod columns;
mod env;
pub mod field;
mod formats;
mod integrity;
mod league;
mod raw;
pub mod secrets;
mod sections;
mod settings;
mod team;

pub use field::parse_duration;
pub use raw::DEFAULT_MAX_EVENTS_PER_CALL;
pub use sections::{transaction_timeout_ms, SESSION_TIMEOUT_MS, TRANSACTION_TIMEOUT_MS};
pub use settings::{
    redact_url, EventSettings, HttpSettings, KafkaSettings, ReadFrom, RedisSettings, RegistrySettings, SealingSettings,
    Settings, WorkerSettings,
};

use env::apply_override;
use field::Errors;
use raw::RawConfig;

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

/// Validates every section, collecting every problem.
fn validate(raw: RawConfig) -> Result<Settings, ConfigError> {
    let mut e = Errors::default();
    let kafka = sections::kafka(raw.kafka, &mut e);
    let redis = sections::redis(raw.redis, &mut e);
    let http = sections::http(raw.http, &mut e);
    let events = sections::events(raw.events, &mut e);
    let worker = sections::worker(raw.worker, &mut e);
    let sealing = sections::sealing(raw.sealing, &mut e);
    let boards = boards::boards(raw.boards, &mut e);
    if kafka.changes_topic.is_none() {
        if let Some(b) = boards.iter().find(|b| b.notify_top().is_some()) {
            e.push("kafka.changes_topic", format!("must be set: board '{}' has notify_top", b.id()));
        }
    }
    if kafka.admin_topics.is_empty() {
        if let Some(b) = boards.iter().find(|b| b.integrity().hides_after.is_some()) {
            let why = format!(
                "must name a topic: board '{}' has hold_hides_after, which hides players by admin events",
                b.id()
            );
            e.push("kafka.admin_topics", why);
        }
    }
    if kafka.review_topic.is_none() {
        if let Some(b) = boards.iter().find(|b| b.integrity().holds()) {
            e.push("kafka.review_topic", format!("must be set: board '{}' has a rule with action = \"hold\"", b.id()));
        }
    }
    match (redis, http, events, worker, sealing) {
        (Some(redis), Some(http), Some(events), Some(worker), Some(sealing)) if e.0.is_empty() => {
            Ok(Settings { kafka, redis, http, events, worker, sealing, boards })
        }
        _ => Err(ConfigError::Invalid(e.0)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::board::{Mode, Order, Rolling};
    use crate::event::Format;
    use crate::period::PeriodKind;

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
        assert_eq!(s.events.limits.max_event_bytes, 65536);
        assert_eq!(s.events.limits.max_meta_bytes, 512);
        assert!(!s.boards[0].meta());
        assert_eq!(s.events.max_future_skew, Duration::from_secs(300));
        assert_eq!(s.boards.len(), 2);
        assert_eq!(s.boards[1].order(), Order::Asc);
        assert_eq!(s.boards[1].split_by(), Some("track"));
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
        assert_eq!(s.boards[1].mode(), Mode::Sum);
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
    fn browser_settings_default_and_bad_ones_are_named() {
        let s = load_str(GOOD, none()).unwrap();
        assert!(s.http.cors_origins.is_empty());
        assert_eq!(
            (s.http.cache_max_age, s.http.cache_max_age_sealed),
            (Duration::from_secs(1), Duration::from_secs(3600))
        );
        let good = GOOD.to_string() + "[http]\ncors_origins = [\"https://play.example.com\", \"http://localhost:8080\", \"*\"]\ncache_max_age = \"0s\"\n";
        let s = load_str(&good, none()).unwrap();
        assert_eq!(s.http.cors_origins.len(), 3);
        assert_eq!(s.http.cache_max_age, Duration::ZERO);
        for (line, field) in [
            ("cors_origins = [\"https://play.example.com/\"]", "http.cors_origins"),
            ("cors_origins = [\"play.example.com\"]", "http.cors_origins"),
            ("cache_max_age = \"1500ms\"", "http.cache_max_age"),
            ("cache_max_age_sealed = \"soon\"", "http.cache_max_age_sealed"),
        ] {
            let errs = errors(&(GOOD.to_string() + "[http]\n" + line + "\n"), none());
            assert_eq!(errs.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), [field], "{line}");
        }
    }

    #[test]
    fn bad_durations_and_numbers_in_every_section_are_all_named_at_once() {
        let text = GOOD.replace("dedupe_ttl = \"7d\"", "dedupe_ttl = \"500ms\"")
            + "[worker]\nbatch_linger = \"soon\"\nmax_backoff = \"1ms\"\nbatch_size = 0\nmax_events_per_call = 0\n\
               [http]\nlisten = \"nowhere\"\n[sealing]\nlease = \"forever\"\ntopic = \"sealed topic!\"\n";
        let errs = errors(&text, none());
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        for f in [
            "redis.dedupe_ttl",
            "worker.batch_linger",
            "worker.max_backoff",
            "worker.batch_size",
            "worker.max_events_per_call",
            "http.listen",
            "sealing.lease",
            "sealing.topic",
        ] {
            assert!(fields.contains(&f), "{f} not in {fields:?}");
        }
        let reason = |f: &str| errs.iter().find(|e| e.field == f).map(|e| e.reason.as_str()).unwrap_or_default();
        assert_eq!(reason("redis.dedupe_ttl"), "must be at least 1s");
        assert!(reason("worker.batch_linger").contains("'soon' is not a duration"), "{errs:?}");
    }

    #[test]
    fn a_sharded_board_keeps_no_dense_ranks_and_refuses_what_it_cannot_merge() {
        let sharded = |extra: &str| {
            format!(
                "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n\
                 [[board]]\nid = \"p\"\non = [\"m\"]\nmode = \"best\"\nperiods = [\"all_time\"]\nshards = 8\n{extra}"
            )
        };
        let s = load_str(&sharded(""), none()).unwrap();
        assert_eq!(s.boards[0].shards(), Some(8));
        assert!(!s.boards[0].dense_rank(), "a sharded board keeps no dense index unless asked (and cannot be)");
        let errs = errors(&sharded("dense_rank = true"), none());
        assert!(errs.iter().any(|e| e.field == "board[0].dense_rank" && e.reason.contains("exact")), "{errs:?}");
        // Sealing and rolling boards work per shard.
        let periodic = sharded("close_after = \"1h\"\nrolling = [{ name = \"last3d\", days = 3 }]")
            .replace("periods = [\"all_time\"]", "periods = [\"daily\", \"all_time\"]");
        let s = load_str(&periodic, none()).unwrap();
        assert_eq!((s.boards[0].shards(), s.boards[0].rolling().len()), (Some(8), 1));
        let errs = errors(&sharded("").replace("shards = 8", "shards = 1"), none());
        assert!(errs.iter().any(|e| e.field == "board[0].shards"), "{errs:?}");
        // Top-K on a sharded board: best boards only.
        assert!(load_str(&sharded("max_members = 10"), none()).is_ok());
        let latest = sharded("max_members = 10").replace("mode = \"best\"", "mode = \"latest\"");
        let errs = errors(&latest, none());
        assert!(errs.iter().any(|e| e.field == "board[0].max_members"), "{errs:?}");
    }

    #[test]
    fn notify_top_needs_a_changes_topic_a_single_board_and_a_top_the_board_keeps() {
        let text = |kafka: &str, board: &str| {
            format!(
                "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n{kafka}\n\
                 [[board]]\nid = \"p\"\non = [\"m\"]\nmode = \"best\"\nperiods = [\"all_time\"]\n{board}"
            )
        };
        let s = load_str(&text("changes_topic = \"c\"", "notify_top = 100"), none()).unwrap();
        assert_eq!((s.boards[0].notify_top(), s.kafka.changes_topic.as_deref()), (Some(100), Some("c")));
        assert_eq!(s.boards[0].write_params().notify, 100);
        let field_of = |kafka: &str, board: &str| errors(&text(kafka, board), none())[0].field.clone();
        assert_eq!(field_of("", "notify_top = 5"), "kafka.changes_topic");
        assert_eq!(field_of("changes_topic = \"t\"", "notify_top = 5"), "kafka.changes_topic");
        assert_eq!(field_of("changes_topic = \"c\"", "notify_top = 1001"), "board[0].notify_top");
        assert_eq!(field_of("changes_topic = \"c\"", "notify_top = 0"), "board[0].notify_top");
        assert_eq!(field_of("changes_topic = \"c\"", "notify_top = 5\nshards = 4"), "board[0].notify_top");
        assert_eq!(field_of("changes_topic = \"c\"", "notify_top = 50\nmax_members = 10"), "board[0].notify_top");
        // A changes topic without a board that notifies is harmless.
        assert!(load_str(&text("changes_topic = \"c\"", ""), none()).is_ok());
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
        assert_eq!(s.boards[0].close_after(), Some(Duration::from_secs(3600)));
        assert_eq!(
            s.boards[0].rolling()[0],
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
        assert_eq!(s.boards[0].packing().max_value(), (1 << 23) - 1);
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
        assert_eq!(s.boards[1].mode(), Mode::Latest);
        assert_eq!(s.boards[1].max_members(), Some(3));
        assert_eq!(s.boards[1].rate_limit(), Some((2, 60_000)));
        let text = GOOD.replace("mode = \"best\"", "mode = \"best\"\nrate_limit = { events = 0, window = \"soon\" }");
        let fields: Vec<String> = errors(&text, none()).into_iter().map(|e| e.field).collect();
        assert!(fields.contains(&"board[1].rate_limit.window".to_string()), "{fields:?}");
    }

    #[test]
    fn attempt_limits_parse_and_zero_is_refused() {
        let s = load_str(&GOOD.replace("mode = \"best\"", "mode = \"best\"\nmax_attempts = 3"), none()).unwrap();
        assert_eq!((s.boards[0].max_attempts(), s.boards[1].max_attempts()), (None, Some(3)));
        let errs = errors(&GOOD.replace("mode = \"best\"", "mode = \"best\"\nmax_attempts = 0"), none());
        assert_eq!(errs[0].field, "board[1].max_attempts");
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
    fn the_redis_password_comes_from_one_place_and_an_override_of_digits_stays_a_string() {
        let env = vec![("RANKFLOW_REDIS__PASSWORD".to_string(), "12345".to_string())];
        let s = load_str(GOOD, env.clone()).unwrap();
        assert_eq!(s.redis.password.as_ref().map(|p| p.expose()), Some("12345"));
        let in_url = GOOD.replace("redis://127.0.0.1", "redis://u:pw@127.0.0.1");
        assert_eq!(errors(&in_url, env.clone())[0].field, "redis.password");
        let both = GOOD.replace("[redis]\n", "[redis]\npassword_file = \"/run/secrets/redis\"\n");
        assert_eq!(errors(&both, env)[0].field, "redis.password_file");
        let missing = GOOD.replace("[redis]\n", "[redis]\npassword_file = \"/nonexistent/redis-password\"\n");
        let e = &errors(&missing, none())[0];
        assert!(e.field == "redis.password_file" && e.reason.contains("cannot read"), "{e}");
    }

    #[test]
    fn tls_files_need_a_rediss_url() {
        let tls =
            GOOD.replace("dedupe_ttl = \"7d\"\n", "dedupe_ttl = \"7d\"\n[redis.tls]\nca_file = \"/etc/ca.pem\"\n");
        assert_eq!(errors(&tls, none())[0].field, "redis.tls");
        let e = errors(&tls.replace("redis://", "rediss://"), none());
        assert_eq!((e[0].field.as_str(), e[0].reason.contains("cannot read /etc/ca.pem")), ("redis.tls.ca_file", true));
        let half = tls.replace("redis://", "rediss://").replace("ca_file", "cert_file");
        assert!(errors(&half, none()).iter().any(|e| e.field == "redis.tls.key_file"), "a cert_file needs its key");
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "junk").unwrap();
        let both = format!("cert_file = \"{0}\"\nkey_file = \"{0}\"", junk.display());
        let fields: Vec<String> =
            errors(&half.replace("cert_file = \"/etc/ca.pem\"", &both), none()).into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["redis.tls.cert_file", "redis.tls.key_file"]);
    }

    #[test]
    fn settings_print_without_their_secrets() {
        let text = GOOD
            .replace("redis://127.0.0.1", "rediss://u:redis-pw@127.0.0.1")
            .replace("\"session.timeout.ms\" = 30000", "\"sasl.password\" = \"kafka-pw\"\n\"sasl.username\" = \"rf\"");
        let shown = format!("{:?}", load_str(&text, none()).unwrap());
        assert!(!shown.contains("redis-pw") && !shown.contains("kafka-pw") && shown.contains("\"rf\""), "{shown}");
        let bad = text.replace("[redis]\n", "[redis]\npassword = [\"array-pw\"]\n");
        let shown = load_str(&bad, none()).unwrap_err().to_string();
        assert!(shown.contains("redis.password") && !shown.contains("array-pw"), "{shown}");
    }

    #[test]
    fn formats_and_field_paths_are_per_source_topic_and_name_their_field() {
        let with = |extra: &str| GOOD.replace("[kafka.options]", &format!("{extra}\n[kafka.options]"));
        let s =
            load_str(&with("formats = { scores = \"cloudevents\" }\nfields = { player_id = \"player.id\" }"), none())
                .unwrap();
        assert_eq!((s.kafka.format("scores"), s.kafka.format("other")), (Format::CloudEvents, Format::Json));
        let avsc = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/event.avsc");
        let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/event.proto");
        let given = format!(
            "formats = {{ scores = \"avro\" }}\nschemas = {{ \"3\" = \"{avsc}\", \"4\" = \"{proto}\" }}\n\
             fields = {{ score = \"points\", scores = {{ player_id = \"who.id\" }} }}"
        );
        let s = load_str(&with(&given), none()).unwrap();
        assert_eq!(s.kafka.schemas.keys().copied().collect::<Vec<_>>(), [3, 4]);
        assert_ne!(s.kafka.fields("scores"), s.kafka.fields("other"));
        assert_eq!(s.kafka.fields("other"), &s.kafka.fields);
        let mut names: Vec<String> = Vec::new();
        for (extra, field) in [
            ("formats = { other = \"json\" }", "kafka.formats.other"),
            ("formats = { scores = \"xml\" }", "kafka.formats.scores"),
            ("formats = { scores = \"avro\" }", "kafka.formats.scores"),
            ("fields = { points = \"score\" }", "kafka.fields.points"),
            ("fields = { score = \"a..b\" }", "kafka.fields.score"),
            ("fields = { other = { score = \"x\" } }", "kafka.fields.other"),
            ("fields = { scores = { points = \"x\" } }", "kafka.fields.scores.points"),
            ("schemas = { \"x\" = \"a.avsc\" }", "kafka.schemas.x"),
            ("schemas = { \"7\" = \"/nonexistent.avsc\" }", "kafka.schemas.7"),
            ("schema_registry = { url = \"ftp://r\" }", "kafka.schema_registry.url"),
            ("schema_registry = { url = \"http://r\", username = \"u\" }", "kafka.schema_registry.password"),
            ("schema_registry = { url = \"http://r\", ca_file = \"/etc/hosts\" }", "kafka.schema_registry.ca_file"),
        ] {
            let e = errors(&with(extra), none());
            assert_eq!(e.len(), 1, "{extra}: {e:?}");
            assert_eq!(e[0].field, field, "{extra}");
            names.push(e[0].reason.clone());
        }
        assert!(names[2].contains("set [kafka.schemas] or [kafka.schema_registry]"), "{}", names[2]);
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }
}
