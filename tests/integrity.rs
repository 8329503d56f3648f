//! Score integrity through the real worker, Apache Kafka and Redis: rules that
//! hold and refuse, the review queue (`GET /v1/review`, `held: n`), the
//! review topic, approvals and rejections as admin events (each once;
//! unknown and decided ids refused, a producer retry changing nothing),
//! `rankflow admin approve --wait`, and an erasure of a player with held
//! events.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::browser;
use support::*;

const BOARDS: &str = r#"
[[board]]
id = "pts"
on = ["match"]
mode = "sum"
periods = ["all_time", "daily"]
[board.integrity]
score_over = { limit = 100, action = "hold" }
gain_over = { limit = 250, window = "1h", action = "hold" }

[[board]]
id = "best"
on = ["match", "run"]
mode = "best"
periods = ["all_time"]
[board.integrity]
jump_over = { limit = "3x", action = "reject" }
"#;

/// A score event and its id.
fn scored(kind: &str, player: &str, score: i64, ts: i64) -> (String, Record) {
    let id = uuid::Uuid::new_v4().to_string();
    let v = json!({ "event_id": id, "type": kind, "player_id": player, "score": score, "ts": ts });
    (id, (player.to_string(), v.to_string().into_bytes(), Some(ts)))
}

fn review(kind: &str, held: &str, player: &str) -> Value {
    json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": player, "board": "pts",
            "held_event_id": held, "ts": chrono::Utc::now().timestamp_millis() })
}

struct Setup {
    stack: Stack,
    admin: String,
    review_topic: String,
    cfg: WorkerConfig,
    w: Worker,
}

impl Setup {
    async fn scores(&self, records: &[Record]) {
        self.stack.broker.produce(&self.stack.topic, records).await;
        self.stack.broker.wait_committed_to_end(&self.cfg.group, &self.stack.topic, 1, Duration::from_secs(60));
    }

    async fn admin(&self, events: &[Value]) {
        let records: Vec<_> = events.iter().cloned().map(admin_record).collect();
        self.stack.broker.produce(&self.admin, &records).await;
        self.stack.broker.wait_committed_to_end(&self.cfg.group, &self.admin, 1, Duration::from_secs(60));
    }

    /// The dead letters: (player, reason, detail).
    fn dead(&self) -> Vec<(String, String, String)> {
        let reason = |m: &rdkafka::message::OwnedMessage, h| header(m, h).unwrap_or_default();
        self.stack
            .broker
            .read_all(&self.stack.dlq, 1)
            .iter()
            .map(|m| {
                let v: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
                let player = v["player_id"].as_str().unwrap().to_string();
                (player, reason(m, "rankflow.reason"), reason(m, "rankflow.detail"))
            })
            .collect()
    }

    async fn score_of(&self, board: &str, player: &str) -> (u16, Value) {
        self.w.get_json(&format!("/v1/boards/{board}/players/{player}?fresh=true")).await
    }

    /// The pending held events of pts, oldest first: (event id, player, rule, value).
    async fn queue(&self, query: &str) -> (Vec<(String, String, String, i64)>, Value) {
        let (status, body) = self.w.get_json(&format!("/v1/review?board=pts&fresh=true{query}")).await;
        assert_eq!(status, 200, "{body}");
        let held = body["held"].as_array().unwrap().iter().map(|h| {
            let s = |k: &str| h[k].as_str().unwrap().to_string();
            (s("event_id"), s("player_id"), s("rule"), h["value"].as_i64().unwrap())
        });
        (held.collect(), body["next"].clone())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rules_hold_and_refuse_the_queue_lists_and_each_review_lands_once() {
    let stack = Stack::start(1).await;
    let admin = stack.admin_topic().await;
    let review_topic = random_name("review");
    stack.broker.create_topic(&review_topic, 1).await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    cfg.admin_topics = vec![admin.clone()];
    cfg.kafka_extra = format!("review_topic = \"{review_topic}\"");
    let w = Worker::spawn(&cfg);
    wait_http(w.http_port, Duration::from_secs(10)).await;
    let s = Setup { stack, admin, review_topic, cfg, w };

    let now = chrono::Utc::now().timestamp_millis();
    let events = [
        scored("match", "alice", 50, now - 9000),
        scored("match", "alice", 500, now - 8000), // pts: score_over; best: 10x her 50, refused
        scored("match", "bob", 90, now - 7000),
        scored("match", "bob", 90, now - 6000),
        scored("match", "bob", 90, now - 5000), // pts: 270 in the hour passes 250
        scored("match", "carol", 1000, now - 4000), // pts: score_over; best: her first
        scored("match", "dave", 20, now - 3000),
        scored("match", "dave", 200, now - 2000), // pts: score_over; best: refused
        scored("run", "erin", 30, now - 1500),
        scored("run", "erin", 200, now - 1000), // best only, refused: a dead letter
    ];
    let ids: Vec<String> = events.iter().map(|(id, _)| id.clone()).collect();
    let records: Vec<Record> = events.into_iter().map(|(_, r)| r).collect();
    s.scores(&records).await;

    let want_held = [
        (ids[1].clone(), "alice", "score_over", 500),
        (ids[4].clone(), "bob", "gain_over", 270),
        (ids[5].clone(), "carol", "score_over", 1000),
        (ids[7].clone(), "dave", "score_over", 200),
    ];
    let want: Vec<(String, String, String, i64)> =
        want_held.iter().map(|(id, p, r, v)| (id.clone(), p.to_string(), r.to_string(), *v)).collect();
    let (held, next) = s.queue("").await;
    assert_eq!(held, want, "held oldest first, each once");
    assert_eq!(next, Value::Null);
    // Pages of two: the cursor goes on where the page ended.
    let (first, next) = s.queue("&limit=2").await;
    assert_eq!(first, want[..2]);
    let (second, last) = s.queue(&format!("&limit=2&cursor={}", next.as_str().unwrap())).await;
    assert_eq!((second.as_slice(), last), (&want[2..], Value::Null));
    let (mine, _) = s.queue("&player=bob").await;
    assert_eq!(mine, want[1..2]);
    let (status, body) = s.w.get_json("/v1/review?board=pts&cursor=bogus").await;
    assert_eq!((status, body["parameter"].as_str()), (400, Some("cursor")), "{body}");
    let (status, _) = s.w.get_json("/v1/review").await;
    assert_eq!(status, 400);

    // Held events count nowhere; a player read says how many wait.
    let (_, alice) = s.score_of("pts", "alice").await;
    assert_eq!((alice["score"].as_i64(), alice["held"].as_i64()), (Some(50), Some(1)), "{alice}");
    let (_, bob) = s.score_of("pts", "bob").await;
    assert_eq!((bob["score"].as_i64(), bob["held"].as_i64()), (Some(180), Some(1)), "{bob}");
    let (_, best) = s.score_of("best", "alice").await;
    assert_eq!((best["score"].as_i64(), best.get("held")), (Some(50), None), "best holds nothing: {best}");
    let (_, carol) = s.score_of("best", "carol").await;
    assert_eq!(carol["score"].as_i64(), Some(1000));

    review_records(&s, &want_held);

    // Only the record every board refused is a dead letter, naming the rule.
    let dead = s.dead();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!((dead[0].0.as_str(), dead[0].1.as_str()), ("erin", "jump_over"), "{dead:?}");

    // Approve alice's: applied once, in every period of its event time.
    let approve = review("review_approved", &ids[1], "alice");
    s.admin(&[approve.clone(), approve.clone()]).await; // and a producer retry
    let (_, alice) = s.score_of("pts", "alice").await;
    assert_eq!((alice["score"].as_i64(), alice["held"].as_i64()), (Some(550), Some(0)), "{alice}");
    let (_, daily) = s.w.get_json("/v1/boards/pts/players/alice?period=daily&fresh=true").await;
    assert_eq!(daily["score"].as_i64(), Some(550), "{daily}");
    // Reject bob's; then a second decision and an unknown id change nothing.
    s.admin(&[
        review("review_rejected", &ids[4], "bob"),
        review("review_approved", &ids[1], "alice"),
        review("review_approved", &uuid::Uuid::new_v4().to_string(), "alice"),
    ])
    .await;
    let (_, bob) = s.score_of("pts", "bob").await;
    assert_eq!((bob["score"].as_i64(), bob["held"].as_i64()), (Some(180), Some(0)), "{bob}");
    let (_, alice) = s.score_of("pts", "alice").await;
    assert_eq!(alice["score"].as_i64(), Some(550), "a second approval adds nothing");
    let dead = s.dead();
    assert_eq!(dead.len(), 3, "{dead:?}");
    assert!(dead[1].2.contains("already approved"), "{dead:?}");
    assert!(dead[2].2.contains("no event") && dead[2].2.contains("is held"), "{dead:?}");

    // Erasing dave takes his held event with him.
    s.admin(&[json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": "player_erased", "player_id": "dave" })])
        .await;
    let (held, _) = s.queue("").await;
    assert_eq!(held, want[2..3], "carol's alone waits");

    command_and_metrics(&s, &ids[5]).await;
}

/// The review topic: each held event once, keyed by its player, naming its
/// id, rule, limit and value.
fn review_records(s: &Setup, want_held: &[(String, &str, &str, i64)]) {
    // The review topic: each held event, naming its id, rule, limit and value.
    let reviews: Vec<Value> = s
        .stack
        .broker
        .read_all(&s.review_topic, 1)
        .iter()
        .map(|m| {
            assert_eq!(
                m.key(),
                Some(
                    serde_json::from_slice::<Value>(m.payload().unwrap()).unwrap()["player_id"]
                        .as_str()
                        .unwrap()
                        .as_bytes()
                )
            );
            serde_json::from_slice(m.payload().unwrap()).unwrap()
        })
        .collect();
    let got: Vec<(String, String, i64, i64)> = reviews
        .iter()
        .map(|v| {
            (
                v["event_id"].as_str().unwrap().into(),
                v["rule"].as_str().unwrap().into(),
                v["limit"].as_i64().unwrap(),
                v["value"].as_i64().unwrap(),
            )
        })
        .collect();
    let limits = BTreeMap::from([("score_over", 100), ("gain_over", 250)]);
    let want_reviews: Vec<(String, String, i64, i64)> =
        want_held.iter().map(|(id, _, r, v)| (id.clone(), r.to_string(), limits[r], *v)).collect();
    assert_eq!(got, want_reviews);
}

/// `rankflow admin approve --wait` on carol's held event, a second decision
/// refused by the command itself, and the metrics of the whole test.
async fn command_and_metrics(s: &Setup, carol_event: &str) {
    // The command: approve carol's and wait for it.
    let out = Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(["admin", "approve", "--config"])
        .arg(&s.w.config_path)
        .args(["--board", "pts", "--event", carol_event, "--wait", "--timeout", "30s"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("applied"), "{stdout}");
    let (_, carol) = s.score_of("pts", "carol").await;
    assert_eq!(carol["score"].as_i64(), Some(1000));
    let out = Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(["admin", "reject", "--config"])
        .arg(&s.w.config_path)
        .args(["--board", "pts", "--event", carol_event])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already approved"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(s.queue("").await.0.is_empty());

    let metrics = s.w.http_get("/metrics").await.1;
    for line in [
        "rankflow_events_held_total{board=\"pts\",rule=\"score_over\"} 3",
        "rankflow_events_held_total{board=\"pts\",rule=\"gain_over\"} 1",
        "rankflow_reviews_total{board=\"pts\",decision=\"approved\",rule=\"score_over\"} 2",
        "rankflow_reviews_total{board=\"pts\",decision=\"rejected\",rule=\"gain_over\"} 1",
        "rankflow_events_rejected_total{board=\"best\",reason=\"jump_over\"} 3",
        "rankflow_review_records_total{board=\"pts\"} 4",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_player_held_too_often_is_hidden_by_an_admin_event_of_the_worker() {
    let stack = Stack::start(1).await;
    let admin = stack.admin_topic().await;
    let review_topic = random_name("review");
    stack.broker.create_topic(&review_topic, 1).await;
    let boards = r#"
[[board]]
id = "pts"
on = ["match"]
mode = "sum"
periods = ["all_time"]
[board.integrity]
score_over = { limit = 100, action = "hold" }
hold_hides_after = { count = 2, window = "1h" }
"#;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, boards);
    cfg.admin_topics = vec![admin.clone()];
    cfg.kafka_extra = format!("review_topic = \"{review_topic}\"");
    let w = Worker::spawn(&cfg);
    wait_http(w.http_port, Duration::from_secs(10)).await;
    let s = Setup { stack, admin, review_topic, cfg, w };
    let now = chrono::Utc::now().timestamp_millis();
    let events = [
        scored("match", "mallory", 60, now - 5000),
        scored("match", "trent", 40, now - 5000),
        scored("match", "mallory", 500, now - 4000),
        scored("match", "mallory", 700, now - 3000), // the second held within the hour
        scored("match", "mallory", 800, now - 2000), // a third: she is hidden once
    ];
    s.scores(&events.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>()).await;
    // The worker produced one player_hidden to the admin topic and applied it.
    let wait = Duration::from_secs(60);
    let deadline = std::time::Instant::now() + wait;
    let hides = loop {
        let hides: Vec<Value> = s
            .stack
            .broker
            .read_all(&s.admin, 1)
            .iter()
            .map(|m| serde_json::from_slice(m.payload().unwrap()).unwrap())
            .collect();
        if !hides.is_empty() || std::time::Instant::now() > deadline {
            break hides;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    s.stack.broker.wait_committed_to_end(&s.cfg.group, &s.admin, 1, wait);
    let kinds: Vec<(&str, &str)> =
        hides.iter().map(|v| (v["type"].as_str().unwrap(), v["player_id"].as_str().unwrap())).collect();
    assert_eq!(kinds, [("player_hidden", "mallory"), ("player_hidden", "mallory")], "one per hold past the limit");
    assert_eq!(hides[0]["boards"], json!(["pts"]));
    let (_, top) = s.w.get_json("/v1/boards/pts/top?fresh=true").await;
    let players: Vec<&str> =
        top["entries"].as_array().unwrap().iter().map(|e| e["player_id"].as_str().unwrap()).collect();
    assert_eq!(players, ["trent"], "{top}");
    let (_, mallory) = s.score_of("pts", "mallory").await;
    assert_eq!(
        (mallory["hidden"].as_bool(), mallory["score"].as_i64(), mallory["held"].as_i64()),
        (Some(true), Some(60), Some(3)),
        "{mallory}"
    );
    assert_eq!(s.dead(), [], "nothing dead-lettered");
}

/// The leaderboard page in Chromium: a board's review queue and a player's held count.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_shows_a_boards_review_queue_and_a_players_held_events() {
    let stack = Stack::start(1).await;
    let review_topic = random_name("review");
    stack.broker.create_topic(&review_topic, 1).await;
    let boards = "[[board]]\nid = \"checked\"\non = [\"match\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n\
                  [board.integrity]\nscore_over = { limit = 100, action = \"hold\" }\n";
    let now = chrono::Utc::now().timestamp_millis();
    let records: Vec<_> = [("alice", 50), ("alice", 500), ("bob", 700)]
        .iter()
        .enumerate()
        .map(|(i, (p, s))| {
            let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "player_id": p,
                           "score": s, "ts": now - 1000 + i as i64});
            (p.to_string(), v.to_string().into_bytes(), Some(now))
        })
        .collect();
    stack.broker.produce(&stack.topic, &records).await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, boards);
    cfg.kafka_extra = format!("review_topic = \"{review_topic}\"");
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    wait_http(w.http_port, Duration::from_secs(10)).await;

    let profile = temp_dir();
    let url = format!("http://127.0.0.1:{}/?board=checked&player=alice&live=0", w.http_port);
    let out = browser::chromium(profile.path(), &["--virtual-time-budget=20000", "--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert_eq!(browser::cells(&dom, "review", "player"), ["alice", "bob"], "{dom}");
    assert_eq!(browser::cells(&dom, "review", "rule"), ["score_over", "score_over"]);
    assert!(dom.contains("<dd id=\"me-held\">1 awaiting review</dd>"), "{dom}");
    assert!(dom.contains("<dd id=\"me-score\">50</dd>"), "{dom}");
}
