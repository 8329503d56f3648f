//! Moderation on team boards through the real worker, Apache Kafka and
//! Redis, against the model of `support::teams`: a hidden player's
//! contributions leave their teams' scores (and the reads) and come back,
//! with what they scored meanwhile, on unhide; a removal takes them off in
//! one period; a hidden team leaves the ranking and comes back with what
//! its members scored meanwhile; an erasure forgets the player's
//! contributions and team; a correction on a team board is a dead letter.

use std::time::Duration;

use serde_json::json;
use support::teams::*;
use support::*;

struct Run {
    stack: Stack,
    cfg: WorkerConfig,
    admin: String,
    models: Vec<Board>,
    now: i64,
}

impl Run {
    fn wait(&self) {
        let b = &self.stack.broker;
        b.wait_committed_to_end(&self.cfg.group, &self.stack.topic, 2, Duration::from_secs(120));
        b.wait_committed_to_end(&self.cfg.group, &self.admin, 1, Duration::from_secs(120));
    }

    async fn scores(&mut self, seed: u64, n: usize) {
        let events = stream(seed, 30, n, self.now);
        let records: Vec<Record> =
            events.iter().map(|e| record(e, &uuid::Uuid::new_v4().to_string(), self.now)).collect();
        self.stack.broker.produce(&self.stack.topic, &records).await;
        for (model, rules) in self.models.iter_mut().zip(&RULES) {
            events.iter().for_each(|e| model.apply(rules, e));
        }
        self.wait();
    }

    async fn admin(&mut self, mut event: serde_json::Value, change: impl Fn(&mut Board, &Rules)) {
        event["event_id"] = json!(uuid::Uuid::new_v4().to_string());
        self.stack.broker.produce(&self.admin, &[admin_record(event)]).await;
        for (model, rules) in self.models.iter_mut().zip(&RULES) {
            change(model, rules);
        }
        self.wait();
    }

    async fn check(&self, w: &Worker, step: &str) {
        let mut conn = self.stack.redis.conn().await;
        for (model, rules) in self.models.iter().zip(&RULES) {
            eprintln!("{step}: {}", rules.id);
            equal_the_model(&mut conn, w, rules, model).await;
        }
    }
}

/// A player with contributions to their current team on every board.
fn a_member(models: &[Board], skip: &str) -> (String, String) {
    let m = &models[0];
    let (player, (team, _)) = m
        .members
        .iter()
        .find(|(p, (t, _))| {
            *p != skip
                && models.iter().all(|m| m.counted(false).iter().any(|((_, t2), c)| t2 == t && c.contains_key(*p)))
        })
        .expect("a member with contributions on every board");
    (player.clone(), team.clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn hiding_removing_and_erasing_players_and_hiding_teams_equal_the_model() {
    let stack = Stack::start(2).await;
    let admin = stack.admin_topic().await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    cfg.admin_topics = vec![admin.clone()];
    let now = chrono::Utc::now().timestamp_millis();
    let models = RULES.iter().map(|_| Board::default()).collect();
    let mut run = Run { stack, cfg, admin, models, now };
    let w = Worker::spawn(&run.cfg);
    run.scores(11, 1500).await;
    run.check(&w, "the stream").await;
    // Every membership event is counted once per team board, by kind.
    let events = stream(11, 30, 1500, now);
    let joins = events.iter().filter(|e| matches!(e, Ev::Join { .. })).count() as f64;
    let leaves = events.iter().filter(|e| matches!(e, Ev::Leave { .. })).count() as f64;
    for rules in &RULES {
        let kind = |k| [("board", rules.id), ("kind", k)];
        assert_eq!(w.metric("rankflow_team_memberships_total", &kind("joined")).await, joins, "{}", rules.id);
        assert_eq!(w.metric("rankflow_team_memberships_total", &kind("left")).await, leaves, "{}", rules.id);
    }

    // The admin command finds a team board's players by their team (its
    // period keys rank teams), and refuses one that is on none.
    let (x, _) = a_member(&run.models, "");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankflow"))
            .args(["admin", args[0], "--config"])
            .arg(&w.config_path)
            .args(&args[1..])
            .output()
            .expect("run rankflow admin");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (ok, err) = cli(&["hide", "--player", "nobody", "--board", "clans"]);
    assert!(!ok && err.contains("nobody"), "{err}");
    let (ok, err) = cli(&["hide", "--player", &x, "--wait"]);
    assert!(ok, "{err}");
    for model in run.models.iter_mut() {
        model.hidden.insert(x.clone());
    }
    run.wait();
    run.check(&w, "hidden").await;
    run.scores(12, 500).await;
    run.check(&w, "scores while hidden").await;
    run.admin(json!({"type": "player_unhidden", "player_id": x}), |m, _| {
        m.hidden.remove(&x);
    })
    .await;
    run.check(&w, "unhidden").await;

    run.admin(json!({"type": "player_removed", "player_id": x, "board": "clans", "period": "all"}), |m, r| {
        if r.id == "clans" {
            m.remove(&x, Some("all"));
        }
    })
    .await;
    run.check(&w, "removed from all time").await;

    let (y, team) = a_member(&run.models, &x);
    run.admin(json!({"type": "team_hidden", "board": "clans", "team_id": team}), |m, r| {
        if r.id == "clans" {
            m.hidden_teams.insert(team.clone());
        }
    })
    .await;
    run.check(&w, "team hidden").await;
    let (status, _) = w.get_json(&format!("/v1/boards/clans/teams/{team}?period=all&fresh=true")).await;
    assert_eq!(status, 404);
    run.scores(13, 300).await;
    run.check(&w, "scores while the team is hidden").await;
    run.admin(json!({"type": "team_unhidden", "board": "clans", "team_id": team}), |m, _| {
        m.hidden_teams.remove(&team);
    })
    .await;
    run.check(&w, "team shown").await;

    run.admin(json!({"type": "player_erased", "player_id": y}), |m, _| m.erase(&y)).await;
    run.check(&w, "erased").await;
    let mut conn = run.stack.redis.conn().await;
    for rules in &RULES {
        let index: i64 =
            redis::cmd("EXISTS").arg(format!("lb:{{{}}}:_tp:{y}", rules.id)).query_async(&mut conn).await.unwrap();
        assert_eq!(index, 0, "{}: the erased player's list of contributions", rules.id);
    }

    // A correction sets a player's score: a team board has none of its own.
    let set = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "score_set", "player_id": x, "board": "clans", "score": 5, "ts": now});
    run.stack.broker.produce(&run.admin, &[admin_record(set)]).await;
    run.wait();
    let dead = run.stack.broker.read_all(&run.stack.dlq, 1);
    assert_eq!(dead.len(), 1, "{}", w.log());
    assert_eq!(header(&dead[0], "rankflow.reason").as_deref(), Some("not_allowed"));
    run.check(&w, "after the refused correction").await;
}
