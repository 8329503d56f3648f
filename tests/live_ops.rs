//! Live ops through the real worker, Apache Kafka and Redis: attempt limits
//! (`max_attempts`), counted in the same atomic step as the write, so that
//! a redelivery, a producer retry or a SIGKILL never spends or frees an
//! attempt twice.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rdkafka::message::Message;
use serde_json::json;
use support::periods::quick_sealing;
use support::*;

const HOUR: i64 = 3_600_000;

/// 10:00 UTC yesterday: two whole hours of one day, well inside every retention.
fn yesterday_ten() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    now - now.rem_euclid(24 * HOUR) - 24 * HOUR + 10 * HOUR
}

fn id_of(ms: i64, format: &str) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().format(format).to_string()
}

fn event(id: &str, player: &str, score: i64, ts: i64) -> (String, Vec<u8>, Option<i64>) {
    let v = json!({"event_id": id, "type": "match", "player_id": player, "score": score, "ts": ts});
    (player.to_string(), v.to_string().into_bytes(), Some(chrono::Utc::now().timestamp_millis()))
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_attempts_count_and_a_fourth_is_refused_only_where_they_are_used() {
    let stack = Stack::start(1).await;
    let boards = "[[board]]\nid = \"trial\"\non = [\"match\"]\nmode = \"best\"\nperiods = [\"hourly\", \"daily\"]\nmax_attempts = 3\n";
    let h = yesterday_ten();
    let first = new_id();
    let records = vec![
        event(&first, "alice", 50, h + 60_000),
        event(&new_id(), "alice", 70, h + 120_000),
        // A producer retry of the first attempt spends nothing.
        event(&first, "alice", 50, h + 60_000),
        event(&new_id(), "alice", 60, h + 180_000),
        // The fourth: the next hour has attempts left, the day has not.
        event(&new_id(), "alice", 90, h + HOUR + 60_000),
        // The fifth, in the first hour: used up there and in the day.
        event(&new_id(), "alice", 100, h + 240_000),
        event(&new_id(), "bob", 10, h + 60_000),
    ];
    stack.broker.produce(&stack.topic, &records).await;
    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, boards);
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    let mut conn = stack.redis.conn().await;
    let (h1, h2, day) = (id_of(h, "h:%Y-%m-%dT%H"), id_of(h + HOUR, "h:%Y-%m-%dT%H"), id_of(h, "d:%Y-%m-%d"));
    let expect = |pairs: &[(&str, i64)]| pairs.iter().map(|(p, v)| (p.to_string(), *v)).collect::<BTreeMap<_, _>>();
    assert_eq!(
        zset_values(&mut conn, &format!("lb:{{trial}}:{h1}")).await,
        expect(&[("alice", 70), ("bob", 10)]),
        "{}",
        w.log()
    );
    assert_eq!(zset_values(&mut conn, &format!("lb:{{trial}}:{h2}")).await, expect(&[("alice", 90)]));
    assert_eq!(zset_values(&mut conn, &format!("lb:{{trial}}:{day}")).await, expect(&[("alice", 70), ("bob", 10)]));
    let dead = stack.broker.read_all(&stack.dlq, 1);
    assert_eq!(dead.len(), 1, "only the fifth attempt is refused everywhere");
    assert_eq!(header(&dead[0], "rankflow.reason").as_deref(), Some("attempts_exhausted"));
    assert!(String::from_utf8_lossy(dead[0].payload().unwrap()).contains("100"));

    // A second group replays everything: no attempt is spent again.
    let attempts = |key: String| {
        let mut conn = conn.clone();
        async move {
            let m: BTreeMap<String, i64> = redis::cmd("HGETALL").arg(key).query_async(&mut conn).await.unwrap();
            m
        }
    };
    let before =
        (attempts(format!("lb:{{trial}}:_att:{day}")).await, attempts(format!("lb:{{trial}}:_att:{h2}")).await);
    assert_eq!(before.0, expect(&[("alice", 3), ("bob", 1)]));
    drop(w);
    let mut again = cfg.clone();
    again.group = random_name("replay");
    let _w = Worker::spawn(&again);
    stack.broker.wait_committed_to_end(&again.group, &stack.topic, 1, Duration::from_secs(60));
    let after = (attempts(format!("lb:{{trial}}:_att:{day}")).await, attempts(format!("lb:{{trial}}:_att:{h2}")).await);
    assert_eq!(after, before);
    // The refusal is remembered: the replayed record is refused alike (its
    // dead letter is at least once, like any), never applied.
    let dead = stack.broker.read_all(&stack.dlq, 1);
    assert!(dead.iter().all(|m| header(m, "rankflow.reason").as_deref() == Some("attempts_exhausted")));
    assert!(dead.iter().all(|m| header(m, "rankflow.source.offset") == header(&dead[0], "rankflow.source.offset")));
    assert_eq!(zset_values(&mut conn, &format!("lb:{{trial}}:{h1}")).await, expect(&[("alice", 70), ("bob", 10)]));
}

#[tokio::test(flavor = "multi_thread")]
async fn attempt_limits_stay_exact_across_five_sigkills() {
    const LIMIT: usize = 5;
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    let stack = Stack::start(4).await;
    let boards = format!(
        "[[board]]\nid = \"tries\"\non = [\"match\"]\nmode = \"sum\"\nperiods = [\"hourly\", \"daily\"]\nmax_attempts = {LIMIT}\n"
    );
    let h = yesterday_ten();
    // The model: per player and period, the first LIMIT events in produce
    // order (one player's records share a partition) count.
    let mut used: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut model: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    let mut records = Vec::new();
    for _ in 0..40_000 {
        let player = format!("p{}", rng.random_range(0..400));
        let ts = h + rng.random_range(0..3 * HOUR);
        let score = rng.random_range(1..100);
        for period in [id_of(ts, "h:%Y-%m-%dT%H"), id_of(ts, "d:%Y-%m-%d")] {
            let n = used.entry((player.clone(), period.clone())).or_default();
            if *n < LIMIT {
                *n += 1;
                *model.entry(period).or_default().entry(player.clone()).or_default() += score;
            }
        }
        records.push(event(&new_id(), &player, score, ts));
    }
    stack.broker.produce(&stack.topic, &records).await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &boards);
    cfg.worker_section = "batch_size = 300\nmax_backoff = \"1s\"\n".into();
    let mut conn = stack.redis.conn().await;
    let total = records.len() as i64;
    let kills = five_sigkills(&cfg, &mut conn, &[(stack.topic.as_str(), 4)], total, 78).await;
    assert!(kills.iter().all(|k| k[0] < total), "a kill landed after the stream ended: {kills:?}");
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 4, Duration::from_secs(300));
    for (period, players) in &model {
        assert_eq!(&zset_values(&mut conn, &format!("lb:{{tries}}:{period}")).await, players, "{period}\n{}", w.log());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_season_window_takes_exactly_the_events_of_its_span_and_is_sealed_after_it() {
    let stack = Stack::start(1).await;
    let sealed = stack.sealed_topic().await;
    let from = yesterday_ten();
    let to = from + 2 * HOUR;
    let now = chrono::Utc::now().timestamp_millis();
    let rfc = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339();
    let boards = quick_sealing(&sealed, "")
        + &format!(
        "[[board]]\nid = \"season\"\non = [\"match\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\nclose_after = \"10m\"\n\
         windows = [{{ name = \"s1\", from = \"{}\", to = \"{}\" }}, {{ name = \"s2\", from = \"{}\", to = \"{}\" }},\n\
                    {{ name = \"s3\", from = \"{}\", to = \"{}\" }}, {{ name = \"s4\", from = \"{}\", to = \"{}\" }}]\n",
        rfc(from),
        rfc(to),
        rfc(to),
        rfc(to + 365 * 24 * HOUR),
        rfc(now + 240 * HOUR),
        rfc(now + 480 * HOUR),
        rfc(now - HOUR),
        rfc(now - 60_000),
    );
    // At from - 1 ms, from, to - 1 ms and to: the middle two are the window's.
    let at = |player: &str, score: i64, ts: i64| {
        let v = json!({"event_id": new_id(), "type": "match", "player_id": player, "score": score, "ts": ts});
        (player.to_string(), v.to_string().into_bytes(), Some(ts + 1))
    };
    let mut records =
        vec![at("a", 1, from - 1), at("b", 10, from), at("c", 100, to - 1), at("d", 1000, to), at("b", 5, from + HOUR)];
    // s4 ended a minute ago and closes in nine: it holds an event, not yet sealed.
    records.push(at("f", 3, now - 30 * 60_000));
    stack.broker.produce(&stack.topic, &records).await;
    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &boards);
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    let mut conn = stack.redis.conn().await;
    let expect = |pairs: &[(&str, i64)]| pairs.iter().map(|(p, v)| (p.to_string(), *v)).collect::<BTreeMap<_, _>>();
    assert_eq!(zset_values(&mut conn, "lb:{season}:s:s1").await, expect(&[("b", 15), ("c", 100)]), "{}", w.log());
    assert_eq!(zset_values(&mut conn, "lb:{season}:s:s2").await, expect(&[("d", 1000), ("f", 3)]));
    assert_eq!(zset_values(&mut conn, "lb:{season}:all").await.len(), 5);
    // Expires retention.window (30d by default) after it ends.
    let expires: i64 = redis::cmd("EXPIRETIME").arg("lb:{season}:s:s1").query_async(&mut conn).await.unwrap();
    assert_eq!(expires, to / 1000 + 30 * 86_400);
    // Read by id and by name; listed with its state.
    let (_, by_id) = w.get_json("/v1/boards/season/top?period=s:s1").await;
    let (_, by_name) = w.get_json("/v1/boards/season/top?period=s1").await;
    assert_eq!((by_id["period"].clone(), by_id["total"].clone()), (json!("s:s1"), json!(2)), "{by_id}");
    assert_eq!(by_id["entries"], by_name["entries"]);
    let (status, body) = w.get_json("/v1/boards/season/top?period=s:nope").await;
    assert_eq!((status, body["parameter"].clone()), (400, json!("period")));
    let (_, boards) = w.get_json("/v1/boards").await;
    let states: Vec<(String, String)> = boards["boards"][0]["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].as_str().unwrap().into(), w["state"].as_str().unwrap().into()))
        .collect();
    let want = [("s1", "ended"), ("s2", "open"), ("s3", "upcoming"), ("s4", "ended")];
    assert_eq!(states, want.map(|(a, b)| (a.to_string(), b.to_string())));
    // Ten minutes after it ended it was sealed, like a calendar period, and its top published.
    let deadline = Instant::now() + Duration::from_secs(60);
    while stack.broker.log_end(&sealed, 1)[0] < 1 {
        assert!(Instant::now() < deadline, "the window was not sealed\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, sealed_top) = w.get_json("/v1/boards/season/top?period=s1:final").await;
    assert_eq!(sealed_top["entries"], by_id["entries"]);
    // The periods the board holds, newest first, through a window's life.
    let (_, listed) = w.get_json("/v1/boards/season/periods").await;
    let got: Vec<(String, String)> = listed["periods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().into(), p["state"].as_str().unwrap().into()))
        .collect();
    let want = [("s:s3", "upcoming"), ("s:s4", "ended"), ("s:s2", "open"), ("s:s1", "sealed"), ("all", "open")];
    assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())), "{listed}");
    // A late event for the window, produced after its close, is refused there.
    stack
        .broker
        .produce(
            &stack.topic,
            &[(
                "e".to_string(),
                json!({"event_id": new_id(), "type": "match", "player_id": "e", "score": 7, "ts": from + 60_000})
                    .to_string()
                    .into_bytes(),
                Some(chrono::Utc::now().timestamp_millis()),
            )],
        )
        .await;
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    assert_eq!(zset_values(&mut conn, "lb:{season}:s:s1").await, expect(&[("b", 15), ("c", 100)]));
    assert_eq!(zset_values(&mut conn, "lb:{season}:all").await.get("e"), Some(&7), "all_time still takes it");
    let (status, body) = w.get_json("/v1/boards/season/periods?split=x").await;
    assert_eq!((status, body["parameter"].clone()), (400, json!("split")));
}

#[test]
fn bad_windows_are_refused_naming_the_field() {
    let text = "[kafka]\nbrokers = \"k:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n\
                [[board]]\nid = \"b\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n\
                windows = [{ name = \"s1\", from = \"2027-01-01T00:00:00Z\", to = \"2027-01-01T00:00:00Z\" },\n\
                           { name = \"Daily!\", from = \"2027-01-01T00:00:00Z\", to = \"2027-02-01T00:00:00Z\" },\n\
                           { name = \"s3\", from = \"soon\", to = \"2027-02-01T00:00:00Z\" }]\n";
    let err = rankflow::config::load_str(text, Vec::new()).unwrap_err();
    let fields: Vec<&str> = err.fields().iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["board[0].windows[0].to", "board[0].windows[1].name", "board[0].windows[2].from"], "{err}");
    assert!(err.fields()[0].reason.contains("after from"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_weekly_schedule_in_a_daylight_saving_zone_holds_its_sixty_real_hours_across_the_change() {
    let stack = Stack::start(1).await;
    let boards = "[[board]]\nid = \"wknd\"\non = [\"match\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n\
                  timezone = \"Europe/Berlin\"\nretention = { schedule = \"400d\" }\n\
                  schedules = [{ name = \"weekend\", cron = \"0 18 * * FRI\", duration = \"60h\" }]\n";
    let ms = |t: &str| chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis();
    // Friday 2026-10-23 18:00 CEST is 16:00Z; clocks go back on the Sunday,
    // so 60 hours end on Monday at 05:00 CET, 04:00Z.
    let records = vec![
        event(&new_id(), "early", 1, ms("2026-10-23T15:59:59.999Z")),
        event(&new_id(), "first", 10, ms("2026-10-23T16:00:00Z")),
        event(&new_id(), "last", 100, ms("2026-10-26T03:59:59.999Z")),
        event(&new_id(), "late", 1000, ms("2026-10-26T04:00:00Z")),
        event(&new_id(), "next", 7, ms("2026-10-30T17:00:00Z")),
    ];
    stack.broker.produce(&stack.topic, &records).await;
    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, boards);
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    let mut conn = stack.redis.conn().await;
    let expect = |pairs: &[(&str, i64)]| pairs.iter().map(|(p, v)| (p.to_string(), *v)).collect::<BTreeMap<_, _>>();
    let key = "lb:{wknd}:c:weekend:2026-10-23T18:00";
    assert_eq!(zset_values(&mut conn, key).await, expect(&[("first", 10), ("last", 100)]), "{}", w.log());
    // The next weekend starts at 18:00 CET, 17:00Z.
    assert_eq!(zset_values(&mut conn, "lb:{wknd}:c:weekend:2026-10-30T18:00").await, expect(&[("next", 7)]));
    let (status, body) = w.get_json("/v1/boards/wknd/top?period=c:weekend:2026-10-23T18:00").await;
    assert_eq!((status, body["total"].clone()), (200, json!(2)), "{body}");
    let (status, body) = w.get_json("/v1/boards/wknd/top?period=c:weekend:2026-10-24T18:00").await;
    assert_eq!((status, body["parameter"].clone()), (400, json!("period")), "a Saturday never starts one");
    let (_, boards) = w.get_json("/v1/boards").await;
    let next = &boards["boards"][0]["schedules"][0]["next"]["period"];
    assert!(next.as_str().is_some_and(|p| p.starts_with("c:weekend:") && p.ends_with("T18:00")), "{boards}");
}

#[test]
fn bad_schedules_are_refused_naming_the_field() {
    let text = "[kafka]\nbrokers = \"k:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n\
                [[board]]\nid = \"b\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n\
                schedules = [{ name = \"daily2\", cron = \"0 12 * * *\", duration = \"25h\" },\n\
                             { name = \"bad\", cron = \"0 18 * FRI\", duration = \"1h\" },\n\
                             { name = \"daily2\", cron = \"0 0 * * MON\", duration = \"1h\" }]\n";
    let err = rankflow::config::load_str(text, Vec::new()).unwrap_err();
    let fields: Vec<&str> = err.fields().iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        ["board[0].schedules[0].duration", "board[0].schedules[1].cron", "board[0].schedules[2].name"],
        "{err}"
    );
    assert!(err.fields()[0].reason.contains("overlap"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_period_closed_on_demand_is_sealed_and_refuses_what_comes_after() {
    let stack = Stack::start(1).await;
    let sealed = stack.sealed_topic().await;
    let now = chrono::Utc::now().timestamp_millis();
    let rfc = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339();
    let boards = quick_sealing(&sealed, "")
        + &format!(
        "[[board]]\nid = \"cup\"\non = [\"match\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\nclose_after = \"1h\"\n\
         windows = [{{ name = \"cup\", from = \"{}\", to = \"{}\" }}]\n\n\
         [[board]]\nid = \"open\"\non = [\"match\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n",
        rfc(now - HOUR),
        rfc(now + 240 * HOUR)
    );
    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &boards);
    let w = Worker::spawn(&cfg);
    stack
        .broker
        .produce(&stack.topic, &[event(&new_id(), "ann", 10, now - 1000), event(&new_id(), "bo", 20, now - 1000)])
        .await;
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));

    let close = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rankflow"))
            .args(["admin", "close", "--config"])
            .arg(&w.config_path)
            .args(args)
            .output()
            .unwrap()
    };
    let out = close(&["--board", "cup", "--period", "s:cup", "--wait", "--timeout", "30s"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("sealed"),
        "{text}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        w.log()
    );
    let (_, top) = w.get_json("/v1/boards/cup/top?period=s:cup:final").await;
    assert_eq!(top["total"], 2, "{top}");
    // Published once, by the outbox (after the seal, in its own transaction).
    let published = stack.broker.read_at_least(&sealed, 1, 1, Duration::from_secs(30));
    assert_eq!(published.len(), 1, "its top is published once\n{}", w.log());
    // A later event: the closed window refuses it, all_time takes it.
    let later = chrono::Utc::now().timestamp_millis();
    stack.broker.produce(&stack.topic, &[event(&new_id(), "cy", 30, later)]).await;
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    let mut conn = stack.redis.conn().await;
    let expect = |pairs: &[(&str, i64)]| pairs.iter().map(|(p, v)| (p.to_string(), *v)).collect::<BTreeMap<_, _>>();
    assert_eq!(zset_values(&mut conn, "lb:{cup}:s:cup").await, expect(&[("ann", 10), ("bo", 20)]));
    assert_eq!(zset_values(&mut conn, "lb:{cup}:all").await.get("cy"), Some(&30));
    let (_, listed) = w.get_json("/v1/boards/cup/periods").await;
    assert_eq!(listed["periods"][0]["state"], "sealed", "{listed}");
    // Only a board that seals can be closed, and never its all-time board.
    let out = close(&["--board", "open", "--period", "all"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("does not seal"));
    let out = close(&["--board", "cup", "--period", "all"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("never closes"));
}
