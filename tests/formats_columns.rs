//! Boards ranked by several columns fed Avro and Protobuf records in the
//! Schema Registry wire format, written by Confluent's own serializers
//! (tests/serialize.py) with rankflow's published schemas, a studio's Avro
//! record read through a field map, and a Protobuf writer of the event
//! file's earlier version (no `scores`), against Apache Kafka and a real Redis:
//! each record's `scores` reach the columns' board and its `score` the
//! one-column board, once each through producer retries; a record without
//! `scores` counts on the one-column board only, and no record is a dead
//! letter.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use support::encode::{produce_with_headers, schemas_toml, serialize, WithHeaders};
use support::{random_name, temp_dir, zset_values, Stack, Worker, WorkerConfig};

const EVENT_AVSC: &str = include_str!("../schemas/event.avsc");
const EVENT_PROTO: &str = include_str!("../schemas/event.proto");

/// A studio's own Avro record, its columns under another name.
const STUDIO_AVSC: &str = r#"{"type": "record", "name": "Match", "namespace": "studio.v1", "fields": [
  {"name": "event_id", "type": "string"}, {"name": "type", "type": "string"},
  {"name": "player_id", "type": "string"}, {"name": "score", "type": "long"},
  {"name": "ts", "type": "long"}, {"name": "results", "type": {"type": "map", "values": "long"}}]}"#;

/// rankflow's event as `event.proto` had it before `scores`.
const OLD_PROTO: &str = r#"syntax = "proto3";
package studio.v0;
message Event {
  string event_id = 1; string type = 2; string player_id = 3; int64 score = 4; int64 ts = 5;
  map<string, string> attrs = 6; map<string, string> meta = 7;
}
"#;

const BOARDS: &str = r#"
[[board]]
id = "arena"
on = ["match"]
columns = [{ name = "wins", mode = "sum" }, { name = "time_ms", mode = "min", order = "asc" }]
periods = ["all_time"]

[[board]]
id = "points"
on = ["match"]
mode = "sum"
periods = ["all_time"]
"#;

/// What the boards should come to: arena's rows (wins, time_ms) and points' totals.
#[derive(Default)]
struct Model {
    arena: BTreeMap<String, (i64, i64)>,
    points: BTreeMap<String, i64>,
}

impl Model {
    fn add(&mut self, e: &Value) {
        let player = e["player_id"].as_str().unwrap().to_string();
        *self.points.entry(player.clone()).or_default() += e["score"].as_i64().unwrap();
        if let Some(s) = e.get("scores").filter(|s| !s.is_null()) {
            let (wins, time) = (s["wins"].as_i64().unwrap(), s["time_ms"].as_i64().unwrap());
            let row = self.arena.entry(player).or_insert((0, time));
            *row = (row.0 + wins, row.1.min(time));
        }
    }

    /// arena's standings: most wins, then the fastest time, then member bytes.
    fn arena_top(&self) -> Vec<(String, i64, i64)> {
        let mut rows: Vec<(String, i64, i64)> = self.arena.iter().map(|(p, &(w, t))| (p.clone(), w, t)).collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)).then(a.0.as_bytes().cmp(b.0.as_bytes())));
        rows
    }
}

/// Event `i` of a stream: a player of 9, a score, and (`scores`) two columns.
fn event(i: i64, scores: bool) -> Value {
    let mut e = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "player_id": format!("p{}", i % 9),
                       "score": i % 4 + 1, "ts": chrono::Utc::now().timestamp_millis(), "attrs": {}, "meta": {}});
    if scores {
        e["scores"] = json!({"wins": i % 3, "time_ms": 40_000 + 1000 * (i % 7)});
    }
    e
}

/// Every third record sent twice (a producer's retry).
fn with_retries(values: &[Vec<u8>]) -> Vec<WithHeaders> {
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        for _ in 0..if i % 3 == 0 { 2 } else { 1 } {
            out.push((format!("k{}", i % 5), Vec::new(), v.clone()));
        }
    }
    out
}

#[tokio::test]
async fn avro_and_protobuf_records_carry_each_column_to_a_board_ranked_by_several() {
    let stack = Stack::start(1).await;
    let mut model = Model::default();
    let avro: Vec<Value> = (0..120).map(|i| event(i, true)).collect();
    // The studio's record: the columns under "results", no attrs or meta.
    let studio: Vec<Value> = (0..60)
        .map(|i| {
            let mut e = event(i + 1000, true);
            let obj = e.as_object_mut().unwrap();
            let results = obj.remove("scores").unwrap();
            obj.retain(|k, _| !["attrs", "meta"].contains(&k.as_str()));
            obj.insert("results".into(), results);
            e
        })
        .collect();
    // Protobuf's JSON form takes 64-bit integers as strings.
    let pb = |e: &Value| {
        let mut v = json!({"event_id": e["event_id"], "type": e["type"], "player_id": e["player_id"],
                           "score": e["score"].to_string(), "ts": e["ts"].to_string()});
        if let Some(s) = e.get("scores") {
            v["scores"] = json!({"wins": s["wins"].to_string(), "time_ms": s["time_ms"].to_string()});
        }
        v
    };
    let proto: Vec<Value> = (0..120).map(|i| event(i + 2000, true)).collect();
    // The earlier version's writers are players of their own: no row on arena.
    let old: Vec<Value> = (0..60)
        .map(|i| {
            let mut e = event(i, false);
            e["player_id"] = json!(format!("q{}", i % 5));
            e
        })
        .collect();
    for e in avro.iter().chain(&proto).chain(&old) {
        model.add(e);
    }
    for e in &studio {
        model.add(&json!({"player_id": e["player_id"], "score": e["score"], "scores": e["results"]}));
    }
    let framed = serialize(
        &[(EVENT_AVSC, avro), (STUDIO_AVSC, studio)],
        &[("event.proto", EVENT_PROTO), ("old.proto", OLD_PROTO)],
        &[("rankflow.v1.Event", proto.iter().map(pb).collect()), ("studio.v0.Event", old.iter().map(pb).collect())],
    );

    let names: Vec<String> = ["avro", "studio", "protobuf", "old"].iter().map(|n| random_name(n)).collect();
    for name in &names {
        stack.broker.create_topic(name, 1).await;
    }
    let dir = temp_dir();
    let schemas = schemas_toml(
        dir.path(),
        &[
            (framed.avro[0].id, "event.avsc", EVENT_AVSC),
            (framed.avro[1].id, "studio.avsc", STUDIO_AVSC),
            (framed.protobuf[0].id, "event.proto", EVENT_PROTO),
            (framed.protobuf[1].id, "old.proto", OLD_PROTO),
        ],
    );
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    cfg.extra_topics = names.clone();
    let [a, s, p, o] = [&names[0], &names[1], &names[2], &names[3]];
    cfg.kafka_extra = format!(
        "formats = {{ \"{a}\" = \"avro\", \"{s}\" = \"avro\", \"{p}\" = \"protobuf\", \"{o}\" = \"protobuf\" }}\n\
         {schemas}\n[kafka.fields.\"{s}\"]\nscores = \"results\"",
    );
    let parts = [&framed.avro[0], &framed.avro[1], &framed.protobuf[0], &framed.protobuf[1]];
    for (name, part) in names.iter().zip(parts) {
        produce_with_headers(&stack.broker, name, &with_retries(&part.values)).await;
    }
    let worker = Worker::spawn(&cfg);
    for name in &names {
        stack.broker.wait_committed_to_end(&cfg.group, name, 1, Duration::from_secs(90));
    }

    let points = zset_values(&mut stack.redis.conn().await, "lb:{points}:all").await;
    assert_eq!(points, model.points, "{}", worker.log());
    let (status, top) = worker.get_json("/v1/boards/arena/top?limit=100").await;
    assert_eq!(status, 200, "{top}");
    let got: Vec<(String, i64, i64)> = top["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let p = e["player_id"].as_str().unwrap().to_string();
            (p, e["scores"]["wins"].as_i64().unwrap(), e["scores"]["time_ms"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(got, model.arena_top(), "{}", worker.log());
    // None of the records is a dead letter (the old writer's count on points).
    assert!(stack.broker.read_all(&stack.dlq, 1).is_empty(), "dead letters: {}", worker.log());
}
