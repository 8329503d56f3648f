//! Prometheus metrics (the README's Metrics table), registered once in one registry.
//!
//! Every family is created here, so `dashboards/` and the tests can check
//! names against one list. Labels are boards, reasons, topics and
//! partitions: never player or event ids, which would make cardinality
//! unbounded.

use std::sync::OnceLock;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

pub struct Metrics {
    pub registry: Registry,
    pub records_consumed: IntCounterVec,
    pub events_applied: IntCounterVec,
    pub team_memberships: IntCounterVec,
    pub events_duplicate: IntCounterVec,
    pub events_skipped: IntCounter,
    pub events_rejected: IntCounterVec,
    pub dead_letters: IntCounterVec,
    pub batch_size: Histogram,
    pub redis_roundtrip: Histogram,
    pub redis_errors: IntCounterVec,
    pub dead_letter_errors: IntCounter,
    pub commits: IntCounterVec,
    /// Kafka transactions (`kafka.transactions`) by outcome: committed, aborted.
    pub transactions: IntCounterVec,
    /// How long each transaction's commit took (offsets sent, then committed).
    pub transaction_commit: Histogram,
    pub rebalances: IntCounterVec,
    pub consumer_lag: IntGaugeVec,
    pub event_latency: HistogramVec,
    pub redis_up: IntGauge,
    pub kafka_up: IntGauge,
    pub schema_registry_up: IntGauge,
    pub assigned_partitions: IntGauge,
    pub build_info: IntGaugeVec,
    pub jobs: IntCounterVec,
    pub periods_sealed: IntCounterVec,
    pub scheduler_restarts: IntCounter,
    pub admin_events: IntCounterVec,
    pub replica_wait_failures: IntCounter,
    pub redis_data_lost: IntGauge,
    pub league: LeagueMetrics,
    /// The events each board's apply calls carry (`worker.max_call_time`).
    pub call_events: IntGaugeVec,
    /// Reads a replica did not answer, sent to the primary instead.
    pub replica_fallbacks: IntCounter,
    /// Live streams (`.../live`) open.
    pub live_streams: IntGauge,
    /// Rank-change records acknowledged by the changes topic, per board.
    pub rank_changes: IntCounterVec,
    pub rank_change_errors: IntCounter,
    pub http: HttpMetrics,
    pub review: ReviewMetrics,
}

/// Score integrity's families.
pub struct ReviewMetrics {
    /// Events held for review, by board and rule.
    pub held: IntCounterVec,
    /// Held events approved or rejected, by board, rule and decision.
    pub decided: IntCounterVec,
    /// Review records acknowledged by `kafka.review_topic`, by board.
    pub records: IntCounterVec,
    pub record_errors: IntCounter,
}

impl ReviewMetrics {
    fn new(r: &Registry) -> ReviewMetrics {
        ReviewMetrics {
            held: counter_vec(r, "rankflow_events_held_total", "Events an integrity rule held for review (counted on no period of the board), by board and rule.", &["board", "rule"]),
            decided: counter_vec(r, "rankflow_reviews_total", "Held events decided by review_approved or review_rejected, by board, rule and decision (approved, rejected).", &["board", "rule", "decision"]),
            records: counter_vec(r, "rankflow_review_records_total", "Held-event records acknowledged by kafka.review_topic, per board.", &["board"]),
            record_errors: counter(r, "rankflow_review_record_errors_total", "Failed attempts to produce to the review topic (retried; the source partition waits)."),
        }
    }
}

/// The HTTP server's families.
pub struct HttpMetrics {
    /// Answers by route pattern and status.
    pub requests: IntCounterVec,
    /// Time to each answer's head, by route pattern.
    pub seconds: HistogramVec,
}

impl HttpMetrics {
    fn new(r: &Registry) -> HttpMetrics {
        let seconds = HistogramVec::new(
            HistogramOpts::new(
                "rankflow_http_request_seconds",
                "Time from an HTTP request to its answer's head, by route pattern (a live stream: until it starts).",
            )
            .buckets(HTTP_BUCKETS.to_vec()),
            &["route"],
        )
        .expect("static metric definition");
        r.register(Box::new(seconds.clone())).expect("metric registered once");
        HttpMetrics {
            requests: counter_vec(
                r,
                "rankflow_http_requests_total",
                "HTTP answers by route pattern (never a player id; unmatched for no route) and status.",
                &["route", "status"],
            ),
            seconds,
        }
    }
}

/// Leagues' families.
pub struct LeagueMetrics {
    /// Players placed in a settled round, per board and tier.
    pub players: IntGaugeVec,
    pub settlements: IntCounterVec,
    /// Players moved by settlements, per board and direction (promote, demote).
    pub moves: IntCounterVec,
}

impl LeagueMetrics {
    fn new(r: &Registry) -> LeagueMetrics {
        LeagueMetrics {
            players: gauge_vec(
                r,
                "rankflow_league_players",
                "Players placed in the last round this worker settled, per board and tier.",
                &["board", "tier"],
            ),
            settlements: counter_vec(
                r,
                "rankflow_league_settlements_total",
                "League rounds this worker finished settling (each round is settled once across all workers).",
                &["board"],
            ),
            moves: counter_vec(
                r,
                "rankflow_league_moves_total",
                "Players a settlement moved, by direction (promote, demote; idle players demoted count as demote).",
                &["board", "direction"],
            ),
        }
    }
}

/// Every metric family name rankflow exports, for dashboards and tests.
pub const FAMILIES: &[&str] = &[
    "rankflow_records_consumed_total",
    "rankflow_events_applied_total",
    "rankflow_team_memberships_total",
    "rankflow_events_duplicate_total",
    "rankflow_events_skipped_total",
    "rankflow_events_rejected_total",
    "rankflow_dead_letters_total",
    "rankflow_batch_size",
    "rankflow_redis_roundtrip_seconds",
    "rankflow_redis_errors_total",
    "rankflow_dead_letter_errors_total",
    "rankflow_commits_total",
    "rankflow_transactions_total",
    "rankflow_transaction_commit_seconds",
    "rankflow_rebalances_total",
    "rankflow_consumer_lag",
    "rankflow_event_latency_seconds",
    "rankflow_redis_up",
    "rankflow_kafka_up",
    "rankflow_schema_registry_up",
    "rankflow_assigned_partitions",
    "rankflow_build_info",
    "rankflow_jobs_total",
    "rankflow_periods_sealed_total",
    "rankflow_scheduler_restarts_total",
    "rankflow_admin_events_total",
    "rankflow_redis_replica_wait_failures_total",
    "rankflow_redis_data_lost",
    "rankflow_league_players",
    "rankflow_league_settlements_total",
    "rankflow_league_moves_total",
    "rankflow_call_events",
    "rankflow_replica_read_fallbacks_total",
    "rankflow_live_streams",
    "rankflow_rank_changes_total",
    "rankflow_rank_change_errors_total",
    "rankflow_http_requests_total",
    "rankflow_http_request_seconds",
    "rankflow_events_held_total",
    "rankflow_reviews_total",
    "rankflow_review_records_total",
    "rankflow_review_record_errors_total",
];

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("static metric definition");
    r.register(Box::new(c.clone())).expect("metric registered once");
    c
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("static metric definition");
    r.register(Box::new(c.clone())).expect("metric registered once");
    c
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric definition");
    r.register(Box::new(g.clone())).expect("metric registered once");
    g
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("static metric definition");
    r.register(Box::new(g.clone())).expect("metric registered once");
    g
}

fn histogram(r: &Registry, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("static metric definition");
    r.register(Box::new(h.clone())).expect("metric registered once");
    h
}

/// Buckets of the latency histograms: fine around the tens of milliseconds
/// a live stream takes, so that a quantile read from them is off by little.
const LATENCY_BUCKETS: [f64; 26] = [
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Buckets of the HTTP request histogram: reads take tens of microseconds
/// to a few milliseconds; a request near `http.request_timeout` is in trouble.
const HTTP_BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// `rankflow_build_info`, set.
fn build_info(r: &Registry) -> IntGaugeVec {
    let info = gauge_vec(r, "rankflow_build_info", "Always 1; labels name the build.", &["version"]);
    info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
    info
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registry::new();
        let latency_buckets = LATENCY_BUCKETS.to_vec();
        let event_latency = HistogramVec::new(
            HistogramOpts::new(
                "rankflow_event_latency_seconds",
                "Time from a record's event time (source=event) or Kafka timestamp (source=record) to its Redis write being acknowledged.",
            )
            .buckets(latency_buckets.clone()),
            &["source"],
        )
        .expect("static metric definition");
        r.register(Box::new(event_latency.clone())).expect("metric registered once");
        let consumer_lag = gauge_vec(
            &r,
            "rankflow_consumer_lag",
            "Records between the committed offset and the log end, per partition (librdkafka statistics).",
            &["topic", "partition"],
        );
        let build_info = build_info(&r);
        let events_skipped = counter(&r, "rankflow_events_skipped_total", "Events whose type no board takes.");
        let dead_letter_errors = counter(
            &r,
            "rankflow_dead_letter_errors_total",
            "Failed attempts to produce to the dead-letter topic (retried).",
        );
        Metrics {
            records_consumed: counter_vec(&r, "rankflow_records_consumed_total", "Records read from Kafka.", &["topic"]),
            events_applied: counter_vec(&r, "rankflow_events_applied_total", "Events applied to a board.", &["board"]),
            team_memberships: counter_vec(&r, "rankflow_team_memberships_total", "Membership events (team_joined, team_left) applied to a team board, by kind.", &["board", "kind"]),
            events_duplicate: counter_vec(
                &r,
                "rankflow_events_duplicate_total",
                "Events a board had already applied: kind=event_id (producer retry) or kind=offset (redelivery).",
                &["board", "kind"],
            ),
            events_skipped,
            events_rejected: counter_vec(
                &r,
                "rankflow_events_rejected_total",
                "Refusals by board and reason; board=\"none\" for records rejected before reaching any board.",
                &["board", "reason"],
            ),
            dead_letters: counter_vec(
                &r,
                "rankflow_dead_letters_total",
                "Records acknowledged by the dead-letter topic, by first reason.",
                &["reason"],
            ),
            batch_size: histogram(
                &r,
                "rankflow_batch_size",
                "Records per batch.",
                vec![1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0],
            ),
            redis_roundtrip: histogram(
                &r,
                "rankflow_redis_roundtrip_seconds",
                "Time to apply one batch in Redis.",
                latency_buckets,
            ),
            redis_errors: counter_vec(&r, "rankflow_redis_errors_total", "Failed Redis operations (retried).", &["op"]),
            dead_letter_errors,
            commits: counter_vec(&r, "rankflow_commits_total", "Offset commits by result.", &["result"]),
            transactions: counter_vec(&r, "rankflow_transactions_total", "Kafka transactions (kafka.transactions) by outcome: committed (their records and source offsets), aborted (their source records read again).", &["outcome"]),
            transaction_commit: histogram(&r, "rankflow_transaction_commit_seconds", "Time to commit one Kafka transaction: its source offsets sent, its records flushed, the commit acknowledged.", LATENCY_BUCKETS.to_vec()),
            rebalances: counter_vec(&r, "rankflow_rebalances_total", "Partitions assigned or revoked, by kind.", &["kind"]),
            consumer_lag,
            event_latency,
            redis_up: gauge(&r, "rankflow_redis_up", "1 when the last Redis operation succeeded."),
            kafka_up: gauge(&r, "rankflow_kafka_up", "1 when at least one broker connection is up."),
            schema_registry_up: gauge(&r, "rankflow_schema_registry_up", "1 while the Schema Registry answers."),
            assigned_partitions: gauge(&r, "rankflow_assigned_partitions", "Partitions this worker holds."),
            build_info,
            jobs: counter_vec(
                &r,
                "rankflow_jobs_total",
                "Scheduled job runs by kind (seal, roll) and outcome (done, waiting, failed, inexact, continued: a slice of a rolling build).",
                &["kind", "outcome"],
            ),
            periods_sealed: counter_vec(
                &r,
                "rankflow_periods_sealed_total",
                "Periods this worker sealed into ...:final (each period is sealed once across all workers).",
                &["board"],
            ),
            scheduler_restarts: counter(
                &r,
                "rankflow_scheduler_restarts_total",
                "Times the scheduler stopped (failed or panicked) and was started again.",
            ),
            admin_events: counter_vec(
                &r,
                "rankflow_admin_events_total",
                "Admin events by type and outcome: applied, duplicate (a producer retry or a redelivery), refused (by the board's state), rejected (dead-lettered before reaching Redis).",
                &["type", "outcome"],
            ),
            replica_wait_failures: counter(
                &r,
                "rankflow_redis_replica_wait_failures_total",
                "WAITs that saw fewer replicas acknowledge a batch's writes than redis.min_replicas asks (retried; the batch's offsets wait).",
            ),
            redis_data_lost: gauge(
                &r,
                "rankflow_redis_data_lost",
                "1 when Redis lost data (a board tag's registration is gone, or Redis holds fewer applied records than the consumer group committed): nothing is consumed or written.",
            ),
            league: LeagueMetrics::new(&r),
            call_events: gauge_vec(&r, "rankflow_call_events", "Most events the next apply call on each of a board's tags carries: as many as fit in worker.max_call_time at the Redis time per event measured there, at most worker.max_events_per_call (the last tag measured).", &["board"]),
            replica_fallbacks: counter(&r, "rankflow_replica_read_fallbacks_total", "HTTP reads no replica answered, sent to the primary instead (redis.read_from = \"replica\")."),
            live_streams: gauge(&r, "rankflow_live_streams", "Live streams (GET .../live, Server-Sent Events) open, at most http.max_streams."),
            rank_changes: counter_vec(&r, "rankflow_rank_changes_total", "Rank-change records (notify_top) acknowledged by kafka.changes_topic, per board.", &["board"]),
            rank_change_errors: counter(&r, "rankflow_rank_change_errors_total", "Failed attempts to produce to the changes topic (retried; the source partition waits)."),
            http: HttpMetrics::new(&r),
            review: ReviewMetrics::new(&r),
            registry: r,
        }
    }

    /// Creates the series whose label values are known up front, at zero,
    /// so dashboards and alerts see every family before its first event.
    fn init_known_series(&self) {
        self.redis_errors.with_label_values(&["apply"]);
        for k in ["seal", "roll"] {
            for o in ["done", "waiting", "failed"] {
                self.jobs.with_label_values(&[k, o]);
            }
        }
        self.jobs.with_label_values(&["roll", "continued"]);
        for r in ["ok", "error"] {
            self.commits.with_label_values(&[r]);
        }
        for o in ["committed", "aborted"] {
            self.transactions.with_label_values(&[o]);
        }
        for k in ["assign", "revoke"] {
            self.rebalances.with_label_values(&[k]);
        }
        for r in crate::event::Reason::ALL {
            self.dead_letters.with_label_values(&[r.as_str()]);
        }
        for s in ["event", "record"] {
            self.event_latency.with_label_values(&[s]);
        }
        for k in crate::event::AdminKind::ALL {
            for o in ["applied", "duplicate", "refused", "rejected"] {
                self.admin_events.with_label_values(&[k.as_str(), o]);
            }
        }
    }

    /// Creates the per-board series of every configured board at zero
    /// (and a league board's, per tier and direction).
    pub fn init_boards(&self, boards: &[crate::board::Board]) {
        for board in boards {
            let b = board.id();
            if let Some(l) = board.league() {
                self.league.settlements.with_label_values(&[b]);
                for d in ["promote", "demote"] {
                    self.league.moves.with_label_values(&[b, d]);
                }
                for t in &l.tiers {
                    self.league.players.with_label_values(&[b, t]);
                }
            }
            if board.notify_top().is_some() {
                self.rank_changes.with_label_values(&[b]);
            }
            if board.team().is_some() {
                for kind in ["joined", "left"] {
                    self.team_memberships.with_label_values(&[b, kind]);
                }
            }
            let rules = board.integrity();
            for (rule, _) in crate::event::Rule::ALL.iter().zip(rules.on()).filter(|(_, on)| *on) {
                self.review.held.with_label_values(&[b, rule.as_str()]);
                for d in ["approved", "rejected"] {
                    self.review.decided.with_label_values(&[b, rule.as_str(), d]);
                }
            }
            if rules.holds() {
                self.review.records.with_label_values(&[b]);
            }
            self.events_applied.with_label_values(&[b]);
            self.call_events.with_label_values(&[b]);
            self.periods_sealed.with_label_values(&[b]);
            for kind in ["event_id", "offset"] {
                self.events_duplicate.with_label_values(&[b, kind]);
            }
        }
    }

    /// The text exposition of every family.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The process-wide metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let m = Metrics::new();
        m.init_known_series();
        m
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_family_is_registered_and_counters_end_in_total() {
        let m = get();
        m.records_consumed.with_label_values(&["t"]).inc();
        m.events_applied.with_label_values(&["b"]).inc();
        m.team_memberships.with_label_values(&["b", "joined"]).inc();
        m.periods_sealed.with_label_values(&["b"]).inc();
        m.events_duplicate.with_label_values(&["b", "offset"]).inc();
        m.events_rejected.with_label_values(&["b", "r"]).inc();
        m.dead_letters.with_label_values(&["r"]).inc();
        m.redis_errors.with_label_values(&["apply"]).inc();
        m.commits.with_label_values(&["ok"]).inc();
        m.rebalances.with_label_values(&["assign"]).inc();
        m.consumer_lag.with_label_values(&["t", "0"]).set(1);
        m.event_latency.with_label_values(&["event"]).observe(0.1);
        m.league.players.with_label_values(&["b", "gold"]).set(1);
        m.league.settlements.with_label_values(&["b"]).inc();
        m.league.moves.with_label_values(&["b", "promote"]).inc();
        m.call_events.with_label_values(&["b"]).set(1000);
        m.rank_changes.with_label_values(&["b"]).inc();
        m.http.requests.with_label_values(&["/v1/boards", "200"]).inc();
        m.http.seconds.with_label_values(&["/v1/boards"]).observe(0.001);
        m.review.held.with_label_values(&["b", "score_over"]).inc();
        m.review.decided.with_label_values(&["b", "score_over", "approved"]).inc();
        m.review.records.with_label_values(&["b"]).inc();
        let names: Vec<String> = m.registry.gather().iter().map(|f| f.name().to_string()).collect();
        for f in FAMILIES {
            assert!(names.iter().any(|n| n == f), "{f} missing from {names:?}");
        }
        for f in m.registry.gather() {
            if f.get_field_type() == prometheus::proto::MetricType::COUNTER {
                assert!(f.name().ends_with("_total"), "{}", f.name());
            }
        }
    }
}
