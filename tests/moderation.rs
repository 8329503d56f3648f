//! Corrections and moderation through the real worker, Apache Kafka and Redis:
//! admin events on their own topic, each exactly once. A lowered best (the
//! seeds' Alice 120 -> 110), an adjusted total and its refusal on a best
//! board, removal from one period; hiding the leader (everyone else moves
//! up, totals and percentiles follow, the leader's own read says hidden,
//! their later events count unseen) and unhiding them with every point;
//! admin types on the score topic dead-lettered `not_allowed`; a producer
//! retry at a later offset; and `rankflow admin` end to end.

use std::process::Command;
use std::time::Duration;

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::periods::quick_sealing;
use support::*;

const BOARDS: &str = r#"
[[board]]
id = "best"
on = ["match"]
mode = "best"
periods = ["all_time", "daily"]
meta = true

[[board]]
id = "pts"
on = ["match", "bonus"]
mode = "sum"
periods = ["all_time", "daily"]
"#;

fn score(kind: &str, player: &str, score: i64, ts: i64) -> (String, Vec<u8>, Option<i64>) {
    event_record(kind, player, score, ts, ts, None)
}

fn admin(kind: &str, player: &str, fields: Value) -> Value {
    let mut v = json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": player,
                        "ts": chrono::Utc::now().timestamp_millis() });
    for (k, x) in fields.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// (player, score, rank) of a top answer.
fn standings(body: &Value) -> Vec<(String, i64, i64)> {
    body["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|e| (e["player_id"].as_str().unwrap().into(), e["score"].as_i64().unwrap(), e["rank"].as_i64().unwrap()))
        .collect()
}

fn rows(v: &[(&str, i64, i64)]) -> Vec<(String, i64, i64)> {
    v.iter().map(|(p, s, r)| (p.to_string(), *s, *r)).collect()
}

/// A worker with an admin topic, and the steps that produce to either
/// topic and wait until the worker has committed it.
struct Setup {
    stack: Stack,
    admin: String,
    cfg: WorkerConfig,
    w: Worker,
}

impl Setup {
    async fn start() -> Setup {
        let stack = Stack::start(1).await;
        let admin = stack.admin_topic().await;
        let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
        cfg.admin_topics = vec![admin.clone()];
        let w = Worker::spawn(&cfg);
        wait_http(w.http_port, Duration::from_secs(10)).await;
        Setup { stack, admin, cfg, w }
    }

    async fn scores(&self, records: &[(String, Vec<u8>, Option<i64>)]) {
        self.stack.broker.produce(&self.stack.topic, records).await;
        self.stack.broker.wait_committed_to_end(&self.cfg.group, &self.stack.topic, 1, Duration::from_secs(60));
    }

    async fn admin(&self, events: &[Value]) {
        let records: Vec<_> = events.iter().cloned().map(admin_record).collect();
        self.stack.broker.produce(&self.admin, &records).await;
        self.stack.broker.wait_committed_to_end(&self.cfg.group, &self.admin, 1, Duration::from_secs(60));
    }

    /// The dead letters so far: (player, reason).
    fn dead(&self) -> Vec<(String, String)> {
        self.stack
            .broker
            .read_all(&self.stack.dlq, 1)
            .iter()
            .map(|m| {
                let v: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
                (v["player_id"].as_str().unwrap().to_string(), header(m, "rankflow.reason").unwrap_or_default())
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn corrections_lower_a_best_adjust_a_total_and_remove_from_one_period_each_exactly_once() {
    let s = Setup::start().await;
    let now = chrono::Utc::now().timestamp_millis();
    s.scores(&[
        score("match", "alice", 120, now - 3000),
        score("match", "bob", 100, now - 2000),
        score("match", "carol", 115, now - 1000),
    ])
    .await;
    let adjust = admin("score_adjusted", "alice", json!({ "board": "pts", "delta": 7 }));
    s.admin(&[
        // The seeds' case: ZADD GT would ignore a lower score, a correction lowers it.
        admin("score_set", "alice", json!({ "board": "best", "score": 110 })),
        adjust.clone(),
        admin("score_adjusted", "bob", json!({ "board": "best", "delta": 5 })),
        admin(
            "player_removed",
            "bob",
            json!({ "board": "pts", "period": format!("d:{}", chrono::Utc::now().format("%Y-%m-%d")) }),
        ),
        // The producer retries the adjustment: same event id, a later offset.
        adjust,
    ])
    .await;
    // An admin type on the score topic is not honoured.
    s.scores(&[admin_record(admin("player_erased", "carol", json!({})))]).await;

    let (_, best) = s.w.get_json("/v1/boards/best/top").await;
    assert_eq!(standings(&best), rows(&[("carol", 115, 1), ("alice", 110, 2), ("bob", 100, 3)]), "{}", s.w.log());
    let (_, day) = s.w.get_json("/v1/boards/best/top?period=daily").await;
    assert_eq!(standings(&day), standings(&best), "a correction without a period sets every period holding its time");
    let (_, pts) = s.w.get_json("/v1/boards/pts/top").await;
    assert_eq!(standings(&pts), rows(&[("alice", 127, 1), ("carol", 115, 2), ("bob", 100, 3)]));
    let (_, pts_day) = s.w.get_json("/v1/boards/pts/top?period=daily").await;
    assert_eq!(standings(&pts_day), rows(&[("alice", 127, 1), ("carol", 115, 2)]), "bob removed from the day only");
    // A later event counts from the corrected score.
    s.scores(&[score("match", "alice", 112, now)]).await;
    let (_, me) = s.w.get_json("/v1/boards/best/players/alice").await;
    assert_eq!(me["score"], 112);

    let mut dead = s.dead();
    dead.sort();
    assert_eq!(
        dead,
        [("bob".to_string(), "not_allowed".to_string()), ("carol".to_string(), "not_allowed".to_string())]
    );
    let applied =
        s.w.metric("rankflow_admin_events_total", &[("type", "score_adjusted"), ("outcome", "applied")]).await;
    let duplicate =
        s.w.metric("rankflow_admin_events_total", &[("type", "score_adjusted"), ("outcome", "duplicate")]).await;
    let rejected =
        s.w.metric("rankflow_admin_events_total", &[("type", "score_adjusted"), ("outcome", "rejected")]).await;
    assert_eq!((applied, duplicate, rejected), (1.0, 1.0, 1.0));
    let log = s.w.log();
    assert!(log.contains("Admin event applied") && log.contains("score_set") && log.contains("alice"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hidden_leader_vanishes_from_every_read_of_others_and_comes_back_with_every_point() {
    let s = Setup::start().await;
    let now = chrono::Utc::now().timestamp_millis();
    let first = [("lead", 100), ("ann", 90), ("ben", 80), ("cat", 70)];
    s.scores(&first.map(|(p, v)| score("match", p, v, now - 5000))).await;
    s.admin(&[admin("player_hidden", "lead", json!({}))]).await;

    // Everyone else moves up one; the total and percentiles follow.
    let (_, top) = s.w.get_json("/v1/boards/pts/top?rank=dense").await;
    assert_eq!(standings(&top), rows(&[("ann", 90, 1), ("ben", 80, 2), ("cat", 70, 3)]));
    assert_eq!(top["total"], 3);
    let (_, ann) = s.w.get_json("/v1/boards/pts/players/ann").await;
    assert_eq!(
        (ann["rank"]["ordinal"].clone(), ann["percentile"].clone(), ann["total"].clone()),
        (json!(1), json!(100.0), json!(3))
    );
    assert!(ann.get("hidden").is_none());
    // Their own read: hidden, with the rank they would hold.
    let (status, lead) = s.w.get_json("/v1/boards/pts/players/lead").await;
    assert_eq!(status, 200, "{lead}");
    assert_eq!((lead["hidden"].clone(), lead["score"].clone()), (json!(true), json!(100)), "{}", s.w.log());
    assert_eq!(lead["rank"], json!({ "ordinal": 1, "competition": 1, "dense": 1 }));
    assert_eq!(lead["total"], 4);
    // Others' reads: around, friends, what-if ranks and cursors never see them.
    let (status, _) = s.w.get_json("/v1/boards/pts/players/lead/around").await;
    assert_eq!(status, 404);
    let (_, set) = s.w.post_json("/v1/boards/pts/players", r#"{"players": ["lead", "ben"]}"#).await;
    assert_eq!(set["not_found"], json!(["lead"]));
    assert_eq!(set["entries"][0]["rank"], 2);
    let (_, what_if) = s.w.get_json("/v1/boards/pts/rank-of?score=95").await;
    assert_eq!(what_if["rank"]["competition"], 1);
    let (_, page) = s.w.get_json("/v1/boards/best/top?limit=2").await;
    let next = page["next_cursor"].as_str().unwrap().to_string();
    let (_, page2) = s.w.get_json(&format!("/v1/boards/best/top?limit=2&cursor={next}")).await;
    assert_eq!(standings(&page2), rows(&[("cat", 70, 3)]));

    // Their events keep counting, unseen; a producer retry of the hiding changes nothing.
    s.scores(&[
        score("match", "lead", 50, now - 4000),
        score("bonus", "lead", 25, now - 3000),
        score("match", "ann", 5, now - 2000),
    ])
    .await;
    let (_, top) = s.w.get_json("/v1/boards/pts/top").await;
    assert_eq!(standings(&top), rows(&[("ann", 95, 1), ("ben", 80, 2), ("cat", 70, 3)]));
    let (_, lead) = s.w.get_json("/v1/boards/pts/players/lead?period=daily").await;
    assert_eq!((lead["hidden"].clone(), lead["score"].clone()), (json!(true), json!(175)));
    let (_, best) = s.w.get_json("/v1/boards/best/players/lead").await;
    assert_eq!((best["hidden"].clone(), best["score"].clone()), (json!(true), json!(100)));

    // Back with every point: 100 + 50 + 25.
    s.admin(&[admin("player_unhidden", "lead", json!({}))]).await;
    let (_, top) = s.w.get_json("/v1/boards/pts/top?rank=competition").await;
    assert_eq!(standings(&top), rows(&[("lead", 175, 1), ("ann", 95, 2), ("ben", 80, 3), ("cat", 70, 4)]));
    let (_, lead) = s.w.get_json("/v1/boards/pts/players/lead").await;
    assert!(lead.get("hidden").is_none(), "{lead}");
    assert_eq!(lead["total"], 4);
    let mut conn = s.stack.redis.conn().await;
    let dense: Vec<String> =
        redis::cmd("ZRANGE").arg("lb:{pts}:_dense:all").arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    assert_eq!(dense, ["70", "80", "95", "175"]);
    let shadows: Vec<String> = redis::cmd("KEYS").arg("lb:*:_hid:*").query_async(&mut conn).await.unwrap();
    assert!(shadows.is_empty(), "{shadows:?}");

    // Hiding only one board leaves the others alone.
    s.admin(&[admin("player_hidden", "lead", json!({ "boards": ["best"] }))]).await;
    let (_, best) = s.w.get_json("/v1/boards/best/top").await;
    assert_eq!(standings(&best)[0].0, "ann");
    let (_, pts) = s.w.get_json("/v1/boards/pts/top").await;
    assert_eq!(standings(&pts)[0].0, "lead");
}

/// Runs `rankflow admin ...` on the worker's config: (exit success, stdout, stderr).
fn cli(w: &Worker, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .arg("admin")
        .arg(args[0])
        .arg("--config")
        .arg(&w.config_path)
        .args(&args[1..])
        .output()
        .expect("run rankflow admin");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_command_produces_waits_and_names_what_it_cannot_do() {
    let s = Setup::start().await;
    let now = chrono::Utc::now().timestamp_millis();
    s.scores(&[score("match", "alice", 120, now - 2000), score("match", "bob", 100, now - 1000)]).await;

    // set, with --wait: the event id, then the outcome, once applied.
    let (ok, out, err) = cli(&s.w, &["set", "--player", "alice", "--board", "best", "--score", "110", "--wait"]);
    assert!(ok, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(uuid::Uuid::parse_str(lines[0]).is_ok() && lines[1] == "applied", "{out}");
    let (_, me) = s.w.get_json("/v1/boards/best/players/alice").await;
    assert_eq!(me["score"], 110);
    let (ok, out, err) = cli(&s.w, &["adjust", "--player", "alice", "--board", "pts", "--delta", "-20", "--wait"]);
    assert!(ok, "{out}{err}");
    let (_, me) = s.w.get_json("/v1/boards/pts/players/alice").await;
    assert_eq!(me["score"], 100);
    let (ok, out, err) = cli(&s.w, &["hide", "--player", "alice", "--wait"]);
    assert!(ok, "{out}{err}");
    let (_, me) = s.w.get_json("/v1/boards/pts/players/alice").await;
    assert_eq!(me["hidden"], true);
    let (ok, _, err) = cli(&s.w, &["unhide", "--player", "bob", "--wait"]);
    assert!(!ok && err.contains("not hidden"), "{err}");
    let (ok, out, err) = cli(&s.w, &["unhide", "--player", "alice", "--wait"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = cli(&s.w, &["remove", "--player", "bob", "--board", "best", "--wait"]);
    assert!(ok, "{out}{err}");
    let (status, _) = s.w.get_json("/v1/boards/best/players/bob").await;
    assert_eq!(status, 404);
    let (ok, out, err) = cli(&s.w, &["erase", "--player", "alice", "--wait"]);
    assert!(ok, "{out}{err}");
    let (status, _) = s.w.get_json("/v1/boards/pts/players/alice").await;
    assert_eq!(status, 404);

    // What cannot be done is said before anything is produced.
    let before = s.stack.broker.log_end(&s.admin, 1)[0];
    for (args, says) in [
        (vec!["adjust", "--player", "bob", "--board", "best", "--delta", "5"], "not_allowed"),
        (vec!["set", "--player", "bob", "--board", "nope", "--score", "5"], "board 'nope'"),
        (vec!["remove", "--player", "zed", "--board", "pts"], "player 'zed' is not on board 'pts'"),
        (
            vec!["set", "--player", "bob", "--board", "pts", "--score", "5", "--period", "w:2026-W49"],
            "no weekly periods",
        ),
    ] {
        let (ok, out, err) = cli(&s.w, &args);
        assert!(!ok && err.contains(says), "{args:?}: {out}{err}");
    }
    assert_eq!(s.stack.broker.log_end(&s.admin, 1)[0], before);
    // Six admin events applied, and each says so in the audit log.
    assert_eq!(s.stack.broker.log_end(&s.admin, 1)[0], 6);
    assert_eq!(s.w.log().matches("Admin event applied").count(), 6, "{}", s.w.log());
}

/// The admin sequence of the kill test, and what it leaves.
struct Model {
    /// (board, player) -> the value on the board, absent when removed or never set.
    values: std::collections::BTreeMap<(&'static str, String), i64>,
    hidden: std::collections::BTreeSet<String>,
}

impl Model {
    /// The board's expected (visible, hidden) entries.
    fn board(&self, board: &str) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
        let (mut shown, mut hid) = (BTreeMap::new(), BTreeMap::new());
        for ((b, p), v) in &self.values {
            if *b == board {
                if self.hidden.contains(p) { &mut hid } else { &mut shown }.insert(p.clone(), *v);
            }
        }
        (shown, hid)
    }
}

use std::collections::BTreeMap;

const KILL_BOARDS: &str = r#"
[[board]]
id = "pts"
on = ["match"]
mode = "sum"
periods = ["all_time"]

[[board]]
id = "best"
on = ["match"]
mode = "best"
periods = ["all_time"]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_admin_sequence_beside_a_score_stream_stays_exact_across_five_sigkills() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(241);
    let stack = Stack::start(4).await;
    let admin_topic = stack.admin_topic().await;
    let now = chrono::Utc::now().timestamp_millis();
    let mut model = Model { values: BTreeMap::new(), hidden: Default::default() };
    // Score events of players m0..m79; admin events reach them only in ways
    // that commute with their scores (adjustments, hiding), while players
    // a0..a29 get admin events only, so their order alone decides.
    let mut scores = Vec::new();
    for _ in 0..60_000 {
        let p = format!("m{}", rng.random_range(0..80));
        let v = rng.random_range(1..1000);
        *model.values.entry(("pts", p.clone())).or_default() += v;
        let best = model.values.entry(("best", p.clone())).or_insert(v);
        *best = (*best).max(v);
        scores.push(score("match", &p, v, now - rng.random_range(1000..60_000)));
    }
    let mut admins = Vec::new();
    for _ in 0..1500 {
        let event = if rng.random_bool(0.5) {
            let p = format!("m{}", rng.random_range(0..80));
            match rng.random_range(0..4) {
                0 => {
                    model.hidden.insert(p.clone());
                    admin("player_hidden", &p, json!({}))
                }
                1 => {
                    model.hidden.remove(&p);
                    admin("player_unhidden", &p, json!({}))
                }
                _ => {
                    let d = rng.random_range(-50..50);
                    *model.values.entry(("pts", p.clone())).or_default() += d;
                    admin("score_adjusted", &p, json!({ "board": "pts", "delta": d }))
                }
            }
        } else {
            let p = format!("a{}", rng.random_range(0..30));
            let board = if rng.random_bool(0.5) { "pts" } else { "best" };
            match rng.random_range(0..6) {
                0 | 1 => {
                    let v = rng.random_range(0..500);
                    model.values.insert((board, p.clone()), v);
                    admin("score_set", &p, json!({ "board": board, "score": v }))
                }
                2 => {
                    let d = rng.random_range(-50..50);
                    *model.values.entry(("pts", p.clone())).or_default() += d;
                    admin("score_adjusted", &p, json!({ "board": "pts", "delta": d }))
                }
                3 => {
                    model.values.remove(&(board, p.clone()));
                    admin("player_removed", &p, json!({ "board": board }))
                }
                4 => {
                    model.hidden.insert(p.clone());
                    admin("player_hidden", &p, json!({}))
                }
                _ => {
                    model.hidden.remove(&p);
                    admin("player_unhidden", &p, json!({}))
                }
            }
        };
        admins.push(event.clone());
        // A producer retry now and then: the same event at a later offset.
        if rng.random_bool(0.05) {
            admins.push(event);
        }
    }
    stack.broker.produce(&stack.topic, &scores).await;
    let records: Vec<_> = admins.into_iter().map(admin_record).collect();
    stack.broker.produce(&admin_topic, &records).await;

    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, KILL_BOARDS);
    cfg.admin_topics = vec![admin_topic.clone()];
    cfg.worker_section = "batch_size = 300\nmax_backoff = \"1s\"\n".into();
    let mut conn = stack.redis.conn().await;
    let total = (scores.len() + records.len()) as i64;
    let topics = [(stack.topic.as_str(), 4), (admin_topic.as_str(), 1)];
    let kills = five_sigkills(&cfg, &mut conn, &topics, total, 242).await;
    let inside = kills.iter().filter(|k| k[1] < records.len() as i64).count();
    assert!(inside >= 3, "only {inside} of the kills landed while admin events were still being applied");
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 4, Duration::from_secs(300));
    stack.broker.wait_committed_to_end(&cfg.group, &admin_topic, 1, Duration::from_secs(300));
    for board in ["pts", "best"] {
        let (shown, hid) = model.board(board);
        let got = zset_values(&mut conn, &format!("lb:{{{board}}}:all")).await;
        let got_hidden = zset_values(&mut conn, &format!("lb:{{{board}}}:_hid:all")).await;
        assert_eq!(got, shown, "visible entries of {board}\n{}", w.log());
        assert_eq!(got_hidden, hid, "hidden entries of {board}");
    }
    assert!(stack.broker.read_all(&stack.dlq, 1).is_empty(), "no admin event of the sequence is refused");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hidden_player_stays_out_of_a_sealed_snapshot_and_its_published_top_until_unhidden() {
    const HOUR: i64 = 3_600_000;
    let stack = Stack::start(1).await;
    let admin_topic = stack.admin_topic().await;
    let sealed = stack.sealed_topic().await;
    let boards = quick_sealing(&sealed, "top = 5\n")
        + "[[board]]\nid = \"hr\"\non = [\"match\"]\nmode = \"sum\"\nperiods = [\"hourly\"]\nclose_after = \"10m\"\n";
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &boards);
    cfg.admin_topics = vec![admin_topic.clone()];
    let w = Worker::spawn(&cfg);
    // Hidden before their first event: the board's one tag takes the hiding at once.
    stack.broker.produce(&admin_topic, &[admin_record(admin("player_hidden", "x", json!({})))]).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin_topic, 1, Duration::from_secs(60));
    let now = chrono::Utc::now().timestamp_millis();
    let h = now - now.rem_euclid(HOUR) - 3 * HOUR;
    let hour = chrono::DateTime::from_timestamp_millis(h).unwrap().format("h:%Y-%m-%dT%H").to_string();
    let records: Vec<_> = [("x", 500), ("y", 20), ("z", 10)]
        .iter()
        .map(|(p, v)| event_record("match", p, *v, h + 1, h + 2, None))
        .collect();
    stack.broker.produce(&stack.topic, &records).await;
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while stack.broker.log_end(&sealed, 1)[0] < 1 {
        assert!(std::time::Instant::now() < deadline, "the hour was not sealed\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let published: Value = serde_json::from_slice(stack.broker.read_all(&sealed, 1)[0].payload().unwrap()).unwrap();
    assert_eq!(published["total"], 2);
    assert_eq!(
        published["entries"].as_array().unwrap().iter().map(|e| e["player_id"].clone()).collect::<Vec<_>>(),
        [json!("y"), json!("z")]
    );
    let final_period = format!("{hour}:final");
    let (_, top) = w.get_json(&format!("/v1/boards/hr/top?period={final_period}")).await;
    assert_eq!(standings(&top), rows(&[("y", 20, 1), ("z", 10, 2)]));
    let (_, x) = w.get_json(&format!("/v1/boards/hr/players/x?period={final_period}")).await;
    assert_eq!(
        (x["hidden"].clone(), x["score"].clone(), x["rank"]["ordinal"].clone()),
        (json!(true), json!(500), json!(1))
    );

    // Unhidden, they are back in the live hour and in its snapshot.
    stack.broker.produce(&admin_topic, &[admin_record(admin("player_unhidden", "x", json!({})))]).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin_topic, 1, Duration::from_secs(60));
    let (_, top) = w.get_json(&format!("/v1/boards/hr/top?period={final_period}")).await;
    assert_eq!(standings(&top), rows(&[("x", 500, 1), ("y", 20, 2), ("z", 10, 3)]));
    let (_, live) = w.get_json(&format!("/v1/boards/hr/top?period={hour}")).await;
    assert_eq!(standings(&live), standings(&top));
}
