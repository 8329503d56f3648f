//! A generated stream of scoring records and an independent model of what
//! rankflow must make of it: the exact contents and expiry of every board key
//! and the exact set of dead-lettered records with their reasons.
//!
//! The model shares no code with rankflow: periods, expiry and routing are
//! computed here again, in the simplest way (UTC boards only), from the
//! rules the README states for events, periods, expiry and boards.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Datelike, Duration as CDuration, NaiveDate, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// The boards every stream test configures.
pub const BOARDS: &str = r#"
[[board]]
id = "points"
on = ["match_finished", "bonus"]
mode = "sum"
periods = ["daily", "weekly", "all_time"]

[[board]]
id = "best"
on = ["match_finished"]
mode = "best"
order = "desc"
periods = ["all_time"]

[[board]]
id = "laps"
on = ["lap_time"]
mode = "best"
order = "asc"
periods = ["daily", "weekly"]
split_by = "track"
"#;

pub const PREFIX: &str = "lb";
const MAX: i64 = (1 << 53) - 1;
const DAY_MS: i64 = 86_400_000;

/// One record to produce: key, value, record timestamp.
pub type Record = (String, Vec<u8>, Option<i64>);

pub struct Stream {
    pub records: Vec<Record>,
    /// (value, reason) of every record that must reach the dead-letter topic.
    pub dead: Vec<(Vec<u8>, String)>,
    /// key -> member -> score.
    pub boards: HashMap<String, HashMap<String, i64>>,
    /// key -> EXPIRETIME (-1: none).
    pub expiry: HashMap<String, i64>,
    pub applied_records: usize,
    pub skipped_records: usize,
    /// board id -> events applied to it.
    pub applied_per_board: HashMap<String, u64>,
    /// board id -> events it found duplicate (by event id).
    pub duplicates_per_board: HashMap<String, u64>,
}

fn day_start(ts: i64) -> i64 {
    ts.div_euclid(DAY_MS) * DAY_MS
}

fn ms_date(ts: i64) -> NaiveDate {
    DateTime::<Utc>::from_timestamp_millis(ts).unwrap().date_naive()
}

/// (key suffix, expiry seconds or -1) of each period of a board for event time `ts`.
fn periods(board: &str, ts: i64) -> Vec<(String, i64)> {
    let date = ms_date(ts);
    let day_end = day_start(ts) + DAY_MS;
    let iso = date.iso_week();
    let monday = NaiveDate::from_isoywd_opt(iso.year(), iso.week(), chrono::Weekday::Mon).unwrap();
    let week_end = (monday + CDuration::days(7)).and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_millis();
    let daily = (format!("d:{}", date.format("%Y-%m-%d")), day_end / 1000 + 8 * 86_400);
    let weekly = (format!("w:{:04}-W{:02}", iso.year(), iso.week()), week_end / 1000 + 35 * 86_400);
    let all = ("all".to_string(), -1);
    match board {
        "points" => vec![daily, weekly, all],
        "best" => vec![all],
        "laps" => vec![daily, weekly],
        _ => unreachable!(),
    }
}

/// The model: boards as rankflow must leave them.
#[derive(Default)]
struct Model {
    boards: HashMap<String, HashMap<String, i64>>,
    expiry: HashMap<String, i64>,
    seen: HashSet<(String, String)>,
}

enum BoardOutcome {
    Applied,
    Duplicate,
    Refused(&'static str),
}

impl Model {
    fn apply(&mut self, board: &str, tag: &str, ev: &Value, record_ts: i64) -> BoardOutcome {
        let ts = match &ev["ts"] {
            Value::Number(n) => n.as_i64().unwrap(),
            Value::String(s) => DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis(),
            _ => unreachable!(),
        };
        let member = ev["player_id"].as_str().unwrap().to_string();
        let score = ev["score"].as_i64().unwrap();
        let id = ev["event_id"].as_str().unwrap().to_lowercase();
        let keys: Vec<(String, i64)> = periods(board, ts)
            .into_iter()
            .filter(|(_, exp)| *exp < 0 || record_ts < exp * 1000)
            .map(|(suffix, exp)| (format!("{PREFIX}:{{{tag}}}:{suffix}"), exp))
            .collect();
        if keys.is_empty() {
            return BoardOutcome::Refused("expired_period");
        }
        if self.seen.contains(&(tag.to_string(), id.clone())) {
            return BoardOutcome::Duplicate;
        }
        if board == "points" {
            for (k, _) in &keys {
                let cur = self.boards.get(k).and_then(|b| b.get(&member)).copied().unwrap_or(0);
                if (cur + score).abs() > MAX {
                    return BoardOutcome::Refused("score_out_of_range");
                }
            }
        }
        self.seen.insert((tag.to_string(), id));
        for (k, exp) in keys {
            let b = self.boards.entry(k.clone()).or_default();
            match board {
                "points" => *b.entry(member.clone()).or_insert(0) += score,
                "best" => {
                    let e = b.entry(member.clone()).or_insert(score);
                    *e = (*e).max(score);
                }
                "laps" => {
                    let e = b.entry(member.clone()).or_insert(score);
                    *e = (*e).min(score);
                }
                _ => unreachable!(),
            }
            self.expiry.insert(k, exp);
        }
        BoardOutcome::Applied
    }
}

fn uuid(rng: &mut StdRng) -> String {
    uuid::Builder::from_random_bytes(rng.random()).into_uuid().to_string()
}

/// Generates `n` records (plus the fixed fixtures) with about 2% producer
/// duplicates at later offsets and about 1% bad records of every kind.
pub fn generate(n: usize, seed: u64) -> Stream {
    generate_with(n, seed, 0.02)
}

/// [`generate`] with a chosen share of producer duplicates.
pub fn generate_with(n: usize, seed: u64, dup_ratio: f64) -> Stream {
    let mut rng = StdRng::seed_from_u64(seed);
    let record_ts = Utc::now().timestamp_millis();
    let players: Vec<String> = (0..300)
        .map(|i| match i {
            0 => "José-🎮".to_string(),
            1 => "a".repeat(128),
            _ => format!("p{i:03}"),
        })
        .collect();
    let tracks = ["monza", "spa", "suzuka"];
    let mut records: Vec<(String, Value)> = Vec::new();
    let mut raw_bad: Vec<(String, Vec<u8>, &'static str)> = Vec::new();
    let mut good: Vec<usize> = Vec::new();

    // The whale: a sum that reaches the exact limit and a delta that would pass it.
    let whale_ts = record_ts - 3_600_000;
    for score in [MAX - 1000, 2000, -500] {
        let v =
            json!({"event_id": uuid(&mut rng), "type": "bonus", "player_id": "whale", "score": score, "ts": whale_ts});
        records.push(("whale".into(), v));
    }
    // Boundary of the future skew (5m): 4 minutes ahead is fine.
    records.push(("p002".into(), json!({"event_id": uuid(&mut rng), "type": "match_finished", "player_id": "p002", "score": 7, "ts": record_ts + 240_000})));

    let bad_kinds = [
        "invalid_json",
        "missing_field",
        "invalid_type",
        "invalid_event_id",
        "invalid_player_id",
        "invalid_score",
        "score_out_of_range",
        "invalid_ts",
        "invalid_attrs",
        "future_timestamp",
        "expired_period",
        "too_large",
        "missing_split",
        "invalid_split",
    ];
    let mut bad_i = 0;
    for _ in 0..n {
        let player = players[rng.random_range(0..players.len())].clone();
        let roll: f64 = rng.random();
        if roll < 0.01 {
            let kind = bad_kinds[bad_i % bad_kinds.len()];
            bad_i += 1;
            let id = uuid(&mut rng);
            let ts = record_ts - rng.random_range(0..DAY_MS);
            let value = bad_value(kind, &id, &player, ts, record_ts);
            raw_bad.push((player, value, kind));
            records.push(("__bad".into(), json!(raw_bad.len() - 1)));
            continue;
        }
        if roll < 0.01 + dup_ratio && !good.is_empty() {
            // A producer retry: the same record again, later.
            let orig = good[rng.random_range(0..good.len())];
            records.push(records[orig].clone());
            continue;
        }
        if roll < 0.015 + dup_ratio {
            records.push((
                player.clone(),
                json!({"event_id": uuid(&mut rng), "type": "chat", "player_id": player, "text": "gg"}),
            ));
            continue;
        }
        // Event times over the last ten days, some old enough that their day has expired.
        let ts = record_ts - rng.random_range(0..10 * DAY_MS);
        let ts_json = if rng.random_bool(0.5) {
            json!(ts)
        } else {
            json!(DateTime::<Utc>::from_timestamp_millis(ts).unwrap().to_rfc3339())
        };
        let kind = rng.random_range(0..100);
        let v = if kind < 55 {
            json!({"event_id": uuid(&mut rng), "type": "match_finished", "player_id": player, "score": rng.random_range(-50..=300), "ts": ts_json, "extra": {"map": "dust"}})
        } else if kind < 70 {
            json!({"event_id": uuid(&mut rng), "type": "bonus", "player_id": player, "score": rng.random_range(1..=1000), "ts": ts_json})
        } else if kind < 72 {
            // Old matches: only the all-time boards still take them.
            json!({"event_id": uuid(&mut rng), "type": "match_finished", "player_id": player, "score": rng.random_range(0..=300), "ts": record_ts - 90 * DAY_MS})
        } else {
            let track = tracks[rng.random_range(0..tracks.len())];
            json!({"event_id": uuid(&mut rng), "type": "lap_time", "player_id": player, "score": rng.random_range(50_000..=200_000), "ts": ts_json, "attrs": {"track": track}})
        };
        good.push(records.len());
        records.push((player, v));
    }

    model_of(records, &raw_bad, record_ts)
}

/// The bytes of a bad record of `kind` (one of the dead-letter reasons the
/// stream exercises) for event `id` of `player` at `ts`.
fn bad_value(kind: &str, id: &str, player: &str, ts: i64, record_ts: i64) -> Vec<u8> {
    let base = json!({"event_id": id, "type": "match_finished", "player_id": player, "score": 10, "ts": ts});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b.to_string().into_bytes()
    };
    match kind {
        "invalid_json" => b"{\"event_id\": \"x\", \"type\": ".to_vec(),
        "missing_field" => {
            let mut b = base.clone();
            b.as_object_mut().unwrap().remove("score");
            b.to_string().into_bytes()
        }
        "invalid_type" => with("type", json!(5)),
        "invalid_event_id" => with("event_id", json!("not-a-uuid")),
        "invalid_player_id" => with("player_id", json!("bad\u{1}id")),
        "invalid_score" => with("score", json!(1.5)),
        "score_out_of_range" => with("score", json!(9_007_199_254_740_993_i64)),
        "invalid_ts" => with("ts", json!("yesterday")),
        "invalid_attrs" => with("attrs", json!({"track": 5})),
        "future_timestamp" => with("ts", json!(record_ts + 360_000)),
        "expired_period" => json!({"event_id": id, "type": "lap_time", "player_id": player, "score": 90_000, "ts": record_ts - 60 * DAY_MS, "attrs": {"track": "spa"}}).to_string().into_bytes(),
        "too_large" => with("padding", json!("x".repeat(70_000))),
        "missing_split" => json!({"event_id": id, "type": "lap_time", "player_id": player, "score": 90_000, "ts": ts}).to_string().into_bytes(),
        "invalid_split" => json!({"event_id": id, "type": "lap_time", "player_id": player, "score": 90_000, "ts": ts, "attrs": {"track": "a b"}}).to_string().into_bytes(),
        _ => unreachable!(),
    }
}

/// The stream's records (a bad one stands as `("__bad", its index in
/// `raw_bad`)`) as produced, run through the model in order.
fn model_of(records: Vec<(String, Value)>, raw_bad: &[(String, Vec<u8>, &'static str)], record_ts: i64) -> Stream {
    let mut model = Model::default();
    let mut out = Vec::with_capacity(records.len());
    let mut dead = Vec::new();
    let (mut applied_records, mut skipped_records) = (0, 0);
    let mut applied_per_board: HashMap<String, u64> = HashMap::new();
    let mut duplicates_per_board: HashMap<String, u64> = HashMap::new();
    for (key, v) in records {
        if key == "__bad" {
            let (player, value, reason) = &raw_bad[v.as_u64().unwrap() as usize];
            dead.push((value.clone(), reason.to_string()));
            out.push((player.clone(), value.clone(), Some(record_ts)));
            continue;
        }
        let value = v.to_string().into_bytes();
        out.push((key, value.clone(), Some(record_ts)));
        let targets: Vec<(&str, String)> = match v["type"].as_str().unwrap() {
            "match_finished" => vec![("points", "points".into()), ("best", "best".into())],
            "bonus" => vec![("points", "points".into())],
            "lap_time" => vec![("laps", format!("laps:{}", v["attrs"]["track"].as_str().unwrap()))],
            _ => {
                skipped_records += 1;
                continue;
            }
        };
        let (mut applied, mut duplicate, mut reasons) = (false, false, Vec::new());
        for (board, tag) in targets {
            match model.apply(board, &tag, &v, record_ts) {
                BoardOutcome::Applied => {
                    applied = true;
                    *applied_per_board.entry(board.to_string()).or_default() += 1;
                }
                BoardOutcome::Duplicate => {
                    duplicate = true;
                    *duplicates_per_board.entry(board.to_string()).or_default() += 1;
                }
                BoardOutcome::Refused(r) => reasons.push(r),
            }
        }
        if applied {
            applied_records += 1;
        } else if !duplicate {
            dead.push((value, reasons.join(",")));
        }
    }
    Stream {
        records: out,
        dead,
        boards: model.boards,
        expiry: model.expiry,
        applied_records,
        skipped_records,
        applied_per_board,
        duplicates_per_board,
    }
}

impl Stream {
    /// Checks the per-board counters of a worker's metrics (`samples` of
    /// its `/metrics`) against the model: events applied and producer
    /// duplicates on every board.
    pub fn assert_board_counts(&self, m: &[(String, HashMap<String, String>, f64)]) {
        for board in ["points", "best", "laps"] {
            let applied = *self.applied_per_board.get(board).unwrap_or(&0) as f64;
            assert_eq!(
                super::sum(m, "rankflow_events_applied_total", &[("board", board)]),
                applied,
                "applied on {board}"
            );
            let dups = *self.duplicates_per_board.get(board).unwrap_or(&0) as f64;
            assert_eq!(
                super::sum(m, "rankflow_events_duplicate_total", &[("board", board), ("kind", "event_id")]),
                dups,
                "duplicates on {board}"
            );
        }
    }

    /// Asserts that Redis holds exactly the model's boards, with the model's
    /// expiry times, and no other board key.
    pub async fn assert_boards(&self, conn: &mut redis::aio::MultiplexedConnection) {
        // A sharded board's shards, put back together, are the model's board.
        self.assert_board_contents(&super::merged_board_keys(conn, PREFIX).await);
        let actual = super::board_keys(conn, PREFIX).await;
        for key in actual.keys() {
            let exp = self.expiry[&super::unsharded_key(key)];
            let t: i64 = redis::cmd("EXPIRETIME").arg(key).query_async(conn).await.unwrap();
            assert_eq!(t, exp, "EXPIRETIME of {key}");
        }
        // Every board's dense-rank index holds exactly its distinct values
        // (these boards break ties by member, so a value is the score); a
        // sharded board keeps none.
        for (key, entries) in actual.iter().filter(|(k, _)| !k.contains('#')) {
            let (tag, period) = key.split_once("}:").expect("a board key");
            let dense_key = format!("{tag}}}:_dense:{period}");
            let mut got: Vec<String> =
                redis::cmd("ZRANGE").arg(&dense_key).arg(0).arg(-1).query_async(conn).await.unwrap();
            got.sort();
            let mut want: Vec<String> = entries.values().map(|v| format!("{}", *v as i64)).collect();
            want.sort();
            want.dedup();
            assert_eq!(got, want, "dense index {dense_key}");
            let count_key = format!("{tag}}}:_dcount:{period}");
            let counts = super::value_counts(conn, &count_key).await;
            let mut expected: HashMap<String, i64> = HashMap::new();
            for v in entries.values() {
                *expected.entry(format!("{}", *v as i64)).or_default() += 1;
            }
            assert_eq!(counts, expected, "value counts {count_key}");
        }
    }

    /// Asserts that `actual` (key -> member -> score) is exactly the model's boards.
    pub fn assert_board_contents(&self, actual: &HashMap<String, HashMap<String, f64>>) {
        let wrong = self.board_differences(actual);
        assert!(
            wrong.is_empty(),
            "{} board entries differ from the model, first: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(10)]
        );
    }

    /// How `actual` (key -> member -> score) differs from the model's
    /// boards, one line per key or entry.
    pub fn board_differences(&self, actual: &HashMap<String, HashMap<String, f64>>) -> Vec<String> {
        let mut wrong = Vec::new();
        let empty = HashMap::new();
        for (key, expected) in &self.boards {
            let Some(got) = actual.get(key) else {
                wrong.push(format!("{key}: missing"));
                continue;
            };
            for (member, score) in expected {
                match got.get(member) {
                    Some(s) if *s == *score as f64 => {}
                    other => wrong.push(format!("{key} {member}: expected {score}, got {other:?}")),
                }
            }
            for member in got.keys() {
                if !expected.contains_key(member) {
                    wrong.push(format!("{key} {member}: unexpected member"));
                }
            }
        }
        for key in actual.keys().filter(|k| !self.boards.contains_key(*k)) {
            wrong.push(format!("{key}: unexpected key ({} members)", actual.get(key).unwrap_or(&empty).len()));
        }
        wrong.sort();
        wrong
    }

    /// Asserts that the dead-letter topic holds exactly the model's dead
    /// records, each with its reason and its source coordinates.
    pub fn assert_dead_letters(&self, dlq: &[rdkafka::message::OwnedMessage], source_topic: &str) {
        use super::header;
        use rdkafka::Message;
        let mut expected: Vec<(Vec<u8>, String)> = self.dead.clone();
        let mut actual: Vec<(Vec<u8>, String)> = Vec::new();
        let mut coords = HashSet::new();
        for m in dlq {
            assert_eq!(header(m, "rankflow.source.topic").as_deref(), Some(source_topic));
            let p = header(m, "rankflow.source.partition").expect("partition header");
            let o = header(m, "rankflow.source.offset").expect("offset header");
            assert!(coords.insert((p, o)), "a source record was dead-lettered twice");
            actual.push((m.payload().unwrap_or_default().to_vec(), header(m, "rankflow.reason").unwrap_or_default()));
        }
        expected.sort();
        actual.sort();
        let exp_reasons: Vec<&String> = expected.iter().map(|(_, r)| r).collect();
        let act_reasons: Vec<&String> = actual.iter().map(|(_, r)| r).collect();
        assert_eq!(act_reasons.len(), exp_reasons.len(), "dead letters: expected {exp_reasons:?}, got {act_reasons:?}");
        assert!(actual == expected, "dead-letter records or reasons differ from the model");
    }
}
