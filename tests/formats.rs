//! Event formats against Apache Kafka and a real Redis: one worker reading a
//! topic per format (JSON, Avro, Protobuf with both message-index forms,
//! a nested Protobuf message through a topic's own field map, CloudEvents
//! in both modes with JSON and Avro data), the Avro and Protobuf records
//! framed by Confluent's own serializers (tests/serialize.py), with
//! producer duplicates and a kill -9 mid-stream: every score applied
//! exactly once, every bad record dead-lettered with its reason.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};
use support::encode::{explicit_indexes, produce_with_headers, schemas_toml, serialize, WithHeaders};
use support::{header, random_name, temp_dir, zset_values, Stack, Worker, WorkerConfig};

const EVENT_AVSC: &str = include_str!("../schemas/event.avsc");
const EVENT_PROTO: &str = include_str!("../schemas/event.proto");
const SOURCE: &str = "https://game.example/matches";

/// A studio's own Avro schema, whose score may be absent or fractional.
const LOOSE_AVSC: &str = r#"{"type": "record", "name": "Loose", "namespace": "studio.v1", "fields": [
  {"name": "event_id", "type": "string"}, {"name": "type", "type": "string"},
  {"name": "player_id", "type": "string"}, {"name": "score", "type": ["null", "double"]},
  {"name": "ts", "type": "long"}]}"#;

/// A studio's own Protobuf file: the event is a nested message, `Match.Result`
/// (message indexes [1, 1]), naming its fields otherwise.
const MATCH_PROTO: &str = r#"syntax = "proto3";
package studio.v2;
message Header { string region = 1; }
message Match {
  message Player { string id = 1; }
  message Result { string match_id = 1; string kind = 2; Player player = 3; int64 points = 4; int64 finished_at = 5; }
  repeated Result results = 1;
}
"#;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn event(player: &str, score: i64) -> Value {
    json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match_finished", "player_id": player,
           "score": score, "ts": now_ms(), "attrs": {}, "meta": {}})
}

/// The records of one topic, and what they should come to.
#[derive(Default)]
struct Topic {
    records: Vec<WithHeaders>,
    /// The dead-letter reasons of its bad records, by offset order.
    bad: Vec<&'static str>,
}

impl Topic {
    fn good(&mut self, value: Vec<u8>, headers: Vec<(String, String)>, dup: bool) {
        let key = format!("k{}", self.records.len() % 7);
        self.records.push((key.clone(), headers.clone(), value.clone()));
        if dup {
            // A producer's retry: the same record again.
            self.records.push((key, headers, value));
        }
    }

    fn bad(&mut self, value: Vec<u8>, headers: Vec<(String, String)>, reason: &'static str) {
        self.records.push(("bad".into(), headers, value));
        self.bad.push(reason);
    }
}

fn ce_headers(id: &str, content_type: &str) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = [
        ("ce_specversion", "1.0".to_string()),
        ("ce_id", id.to_string()),
        ("ce_source", SOURCE.to_string()),
        ("ce_type", "match_finished".to_string()),
        ("ce_time", chrono::Utc::now().to_rfc3339()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    h.push(("content-type".into(), content_type.into()));
    h
}

/// Adds a score to what the board should hold.
fn add(expected: &mut BTreeMap<String, i64>, player: &str, score: i64) {
    *expected.entry(player.to_string()).or_default() += score;
}

/// The records of every topic, framed by Confluent's serializers where
/// they are Avro or Protobuf, and what the board should come to.
struct Fixture {
    /// Per topic: its format (`json` for the stack's own topic) and records.
    topics: Vec<(&'static str, Topic)>,
    expected: BTreeMap<String, i64>,
    /// The schema ids: rankflow's Avro event, the loose Avro record,
    /// rankflow's Protobuf event, the nested message.
    ids: [u32; 4],
}

fn fixture() -> Fixture {
    let mut expected = BTreeMap::new();
    // What Confluent's serializers write: rankflow's event in Avro and in
    // Protobuf, the studio's loose Avro record and its nested Protobuf message.
    let avro_events: Vec<Value> = (0..300).map(|i| event(&format!("p{}", i % 17), i % 5 + 1)).collect();
    let loose = vec![
        json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match_finished", "player_id": "bad",
               "score": null, "ts": now_ms()}),
        json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match_finished", "player_id": "bad",
               "score": 1.5, "ts": now_ms()}),
    ];
    // Protobuf: proto3 leaves a 0 score out of the encoding; player "zero" has only that.
    let mut proto_events: Vec<Value> = (0..300).map(|i| event(&format!("p{}", i % 11), i % 4 + 1)).collect();
    proto_events.push(event("zero", 0));
    let pb = |e: &Value| {
        json!({"event_id": e["event_id"], "type": e["type"], "player_id": e["player_id"],
               "score": e["score"].to_string(), "ts": e["ts"].to_string()})
    };
    let results: Vec<Value> = (0..200)
        .map(|i| {
            json!({"match_id": uuid::Uuid::new_v4().to_string(), "kind": "match_finished",
                   "player": {"id": format!("n{}", i % 9)}, "points": (i % 6 + 1).to_string(),
                   "finished_at": now_ms().to_string()})
        })
        .collect();
    let ce_avro: Vec<Value> = (0..60).map(|i| event(&format!("c{}", i % 5), 3)).collect();
    let framed = serialize(
        &[(EVENT_AVSC, avro_events.iter().chain(&ce_avro).cloned().collect()), (LOOSE_AVSC, loose)],
        &[("event.proto", EVENT_PROTO), ("match.proto", MATCH_PROTO)],
        &[("rankflow.v1.Event", proto_events.iter().map(pb).collect()), ("studio.v2.Match.Result", results.clone())],
    );
    let (avro, loose, proto, nested) = (&framed.avro[0], &framed.avro[1], &framed.protobuf[0], &framed.protobuf[1]);
    assert_eq!(nested.values[0][5..8], [4, 2, 2], "Match.Result is framed with its indexes [1, 1]");

    // The Avro topic: duplicates, then every kind of record it must refuse.
    let mut avro_topic = Topic::default();
    for (i, (e, v)) in avro_events.iter().zip(&avro.values).enumerate() {
        add(&mut expected, e["player_id"].as_str().unwrap(), e["score"].as_i64().unwrap());
        avro_topic.good(v.clone(), Vec::new(), i % 10 == 0);
    }
    let body = &avro.values[0];
    avro_topic.bad(br#"{"score": 1}"#.to_vec(), Vec::new(), "invalid_frame");
    let mut unknown = body.clone();
    unknown[1..5].copy_from_slice(&999u32.to_be_bytes());
    avro_topic.bad(unknown, Vec::new(), "unknown_schema");
    avro_topic.bad(body[..body.len() - 4].to_vec(), Vec::new(), "invalid_body");
    avro_topic.bad(loose.values[0].clone(), Vec::new(), "missing_field");
    avro_topic.bad(loose.values[1].clone(), Vec::new(), "invalid_score");

    // The Protobuf topic: a third of the frames in the explicit index form.
    let mut proto_topic = Topic::default();
    for (i, (e, v)) in proto_events.iter().zip(&proto.values).enumerate() {
        add(&mut expected, e["player_id"].as_str().unwrap(), e["score"].as_i64().unwrap());
        let v = if i % 3 == 0 { explicit_indexes(v) } else { v.clone() };
        proto_topic.good(v, Vec::new(), i % 10 == 0);
    }
    let mut garbage = proto.values[0][..6].to_vec();
    garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
    proto_topic.bad(garbage, Vec::new(), "invalid_body");

    // The nested message, through the topic's own field map.
    let mut nested_topic = Topic::default();
    for (i, (r, v)) in results.iter().zip(&nested.values).enumerate() {
        add(&mut expected, r["player"]["id"].as_str().unwrap(), r["points"].as_str().unwrap().parse().unwrap());
        nested_topic.good(v.clone(), Vec::new(), i % 10 == 0);
    }
    let ce_topic = cloudevents_topic(&ce_avro, &avro.values[avro_events.len()..], &mut expected);
    let mut json_topic = Topic::default();
    for i in 0..100 {
        let e = event(&format!("p{}", i % 13), 2);
        add(&mut expected, e["player_id"].as_str().unwrap(), 2);
        json_topic.good(e.to_string().into_bytes(), Vec::new(), false);
    }
    Fixture {
        topics: vec![
            ("json", json_topic),
            ("avro", avro_topic),
            ("protobuf", proto_topic),
            ("nested", nested_topic),
            ("cloudevents", ce_topic),
        ],
        expected,
        ids: [avro.id, loose.id, proto.id, nested.id],
    }
}

/// CloudEvents: binary and structured JSON, binary Avro (`avro_events`,
/// framed as `framed`); their ids are source + id.
fn cloudevents_topic(avro_events: &[Value], framed: &[Vec<u8>], expected: &mut BTreeMap<String, i64>) -> Topic {
    let mut topic = Topic::default();
    for i in 0..400 {
        let (player, points) = (format!("c{}", i % 13), i % 7 + 1);
        add(expected, &player, points);
        let data = json!({"player_id": player, "score": points});
        let id = format!("m-{i}");
        if i % 2 == 0 {
            let value = json!({"specversion": "1.0", "id": id, "source": SOURCE, "type": "match_finished",
                               "time": chrono::Utc::now().to_rfc3339(), "datacontenttype": "application/json", "data": data});
            let headers = vec![("content-type".to_string(), "application/cloudevents+json".to_string())];
            topic.good(value.to_string().into_bytes(), headers, i % 10 == 0);
        } else {
            topic.good(data.to_string().into_bytes(), ce_headers(&id, "application/json"), i % 10 == 1);
        }
    }
    for (i, (e, v)) in avro_events.iter().zip(framed).enumerate() {
        add(expected, e["player_id"].as_str().unwrap(), 3);
        topic.good(v.clone(), ce_headers(&format!("a-{i}"), "application/avro"), i % 10 == 0);
    }
    let mut no_id = ce_headers("x", "application/json");
    no_id.retain(|(n, _)| n != "ce_id");
    topic.bad(br#"{"player_id": "bad", "score": 1}"#.to_vec(), no_id, "missing_field");
    topic.bad(b"hello".to_vec(), ce_headers("y", "text/plain"), "invalid_json");
    topic.bad(b"[1, 2]".to_vec(), ce_headers("z", "application/json"), "invalid_json");
    topic
}

#[tokio::test]
async fn a_topic_per_format_in_one_worker_counts_every_score_once_through_a_kill() {
    let stack = Stack::start(2).await;
    let Fixture { topics, expected, ids } = fixture();
    let names: Vec<String> =
        topics.iter().map(|(f, _)| if *f == "json" { stack.topic.clone() } else { random_name(f) }).collect();
    for name in &names[1..] {
        stack.broker.create_topic(name, 2).await;
    }
    let dir = temp_dir();
    let schemas = schemas_toml(
        dir.path(),
        &[
            (ids[0], "event.avsc", EVENT_AVSC),
            (ids[1], "loose.avsc", LOOSE_AVSC),
            (ids[2], "event.proto", EVENT_PROTO),
            (ids[3], "match.proto", MATCH_PROTO),
        ],
    );
    let boards = "[[board]]\nid = \"points\"\non = [\"match_finished\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n";
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, boards);
    cfg.extra_topics = names[1..].to_vec();
    let (avro, proto, nested, ce) = (&names[1], &names[2], &names[3], &names[4]);
    cfg.kafka_extra = format!(
        "formats = {{ \"{avro}\" = \"avro\", \"{proto}\" = \"protobuf\", \"{nested}\" = \"protobuf\", \"{ce}\" = \"cloudevents\" }}\n\
         {schemas}\n\
         [kafka.fields.\"{nested}\"]\nevent_id = \"match_id\"\ntype = \"kind\"\nplayer_id = \"player.id\"\nscore = \"points\"\nts = \"finished_at\"",
    );

    // Half of every topic, a worker killed mid-stream, the other half, a worker
    // started again in the same group.
    for (name, (_, t)) in names.iter().zip(&topics) {
        produce_with_headers(&stack.broker, name, &t.records[..t.records.len() / 2]).await;
    }
    let mut worker = Worker::spawn(&cfg);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    worker.sigkill();
    for (name, (_, t)) in names.iter().zip(&topics) {
        produce_with_headers(&stack.broker, name, &t.records[t.records.len() / 2..]).await;
    }
    let worker = Worker::spawn(&cfg);
    for name in &names {
        stack.broker.wait_committed_to_end(&cfg.group, name, 2, Duration::from_secs(90));
    }

    let got = zset_values(&mut stack.redis.conn().await, "lb:{points}:all").await;
    assert_eq!(got, expected, "{}", worker.log());
    check_dead_letters(&stack, &names, &topics, ids[0]);
}

/// Each bad record is dead-lettered with its reason: at least once (the
/// kill may repeat one), so counted once per source position.
fn check_dead_letters(stack: &Stack, names: &[String], topics: &[(&str, Topic)], avro_id: u32) {
    let letters = stack.broker.read_all(&stack.dlq, 1);
    let mut dead: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for m in &letters {
        let at = |n: &str| header(m, n).unwrap_or_default();
        let position = (at("rankflow.source.topic"), at("rankflow.source.partition"), at("rankflow.source.offset"));
        dead.insert(position, at("rankflow.reason"));
    }
    for (name, (_, t)) in names.iter().zip(topics) {
        let mut got: Vec<&str> =
            dead.iter().filter(|((topic, _, _), _)| topic == name).map(|(_, r)| r.as_str()).collect();
        let mut want = t.bad.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "dead letters of {name}: {dead:?}");
    }
    let details: BTreeSet<String> = letters.iter().filter_map(|m| header(m, "rankflow.detail")).collect();
    assert!(
        details.contains("schema id 999: not in kafka.schemas, and no kafka.schema_registry is set"),
        "{details:?}"
    );
    assert!(details.contains("the CloudEvent has no 'id'"), "{details:?}");
    assert!(details.iter().any(|d| d.starts_with(&format!("schema id {avro_id}: "))), "{details:?}");
}
