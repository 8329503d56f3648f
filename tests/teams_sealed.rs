//! Sealed periods of a team board through the real worker, Apache Kafka and
//! Redis: two past days seal, each snapshot ranks the teams as the model
//! does and its published top names teams; a sealed day's teams and
//! contributions read as they were sealed; a forfeit after the seal takes
//! the leaver's points off the open periods only, and a late score counts
//! in the open periods only; an erasure reaches the sealed days too,
//! snapshot included.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::periods::{quick_sealing, wait_records, DAY};
use support::*;

const HOUR: i64 = 3_600_000;

const BOARDS: &str = r#"
[[board]]
id = "clans"
on = ["match"]
mode = "sum"
periods = ["daily", "all_time"]
close_after = "1h"
team = { leave = "forfeit" }
"#;

/// Per period, per team, each member's contribution.
type Model = BTreeMap<String, BTreeMap<String, BTreeMap<String, i64>>>;

fn day_id(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().format("d:%Y-%m-%d").to_string()
}

fn team_of(i: usize) -> String {
    format!("t{}", i % 3)
}

fn record(v: Value, record_ts: i64) -> Record {
    let player = v["player_id"].as_str().unwrap().to_string();
    let mut v = v;
    v["event_id"] = json!(uuid::Uuid::new_v4().to_string());
    (player, v.to_string().into_bytes(), Some(record_ts))
}

fn score(player: &str, score: i64, ts: i64) -> Value {
    json!({"type": "match", "player_id": player, "score": score, "ts": ts})
}

/// A period's teams, best first (ties by team id, descending as Redis orders them).
fn teams(model: &Model, period: &str) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> =
        model.get(period).into_iter().flatten().map(|(t, c)| (t.clone(), c.values().sum())).collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    out
}

/// The top and each team's members of `period` (a day's `:final` snapshot
/// when sealed) equal the model's `contributions` of the live period.
async fn reads_equal(w: &Worker, model: &Model, period: &str, read: &str) {
    let (status, top) = w.get_json(&format!("/v1/boards/clans/top?period={read}&limit=100&fresh=true")).await;
    assert_eq!(status, 200, "{top}");
    let got: Vec<(String, i64)> = top["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["team_id"].as_str().unwrap().to_string(), e["score"].as_i64().unwrap()))
        .collect();
    assert_eq!(got, teams(model, period), "{read}: the teams");
    for (team, members) in model.get(period).into_iter().flatten() {
        let (_, body) = w.get_json(&format!("/v1/boards/clans/teams/{team}?period={read}&fresh=true")).await;
        let got: BTreeMap<String, i64> = body["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["player_id"].as_str().unwrap().to_string(), m["score"].as_i64().unwrap()))
            .collect();
        assert_eq!(&got, members, "{read}: {team}'s members");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_boards_sealed_days_keep_their_teams_through_a_forfeit_a_late_score_and_an_erasure() {
    let stack = Stack::start(1).await;
    let (admin, sealed) = (stack.admin_topic().await, stack.sealed_topic().await);
    let now = chrono::Utc::now().timestamp_millis();
    let today = now - now.rem_euclid(DAY);
    let days = [today - 3 * DAY, today - 2 * DAY];
    let mut model = Model::new();
    let mut records: Vec<Record> = (0..12)
        .map(|i| {
            let v =
                json!({"type": "team_joined", "player_id": format!("p{i:02}"), "team_id": team_of(i), "ts": days[0]});
            record(v, days[0])
        })
        .collect();
    for &d in &days {
        for k in 0..3 {
            for i in 0..12 {
                let (player, ts, points) =
                    (format!("p{i:02}"), d + (k + 1) * HOUR + i as i64 * 1000, (i as i64 + 1) * 10 + k);
                records.push(record(score(&player, points, ts), ts));
                for period in [day_id(d), "all".to_string()] {
                    *model
                        .entry(period)
                        .or_default()
                        .entry(team_of(i))
                        .or_default()
                        .entry(player.clone())
                        .or_default() += points;
                }
            }
        }
    }
    stack.broker.produce(&stack.topic, &records).await;
    let boards = quick_sealing(&sealed, "top = 10\n") + BOARDS;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &boards);
    cfg.admin_topics = vec![admin.clone()];
    let w = Worker::spawn(&cfg);
    wait_http(cfg.http_port, Duration::from_secs(30)).await;
    wait_records(&stack.broker, &sealed, 2, Duration::from_secs(120), &|| w.log());
    for &d in &days {
        reads_equal(&w, &model, &day_id(d), &format!("{}:final", day_id(d))).await;
    }
    reads_equal(&w, &model, "all", "all").await;
    // Each sealed day's published top names its teams.
    for m in stack.broker.read_all(&sealed, 1) {
        let v: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        let period = v["period"].as_str().unwrap().to_string();
        let published: Vec<(String, i64)> = v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["team_id"].as_str().unwrap().to_string(), e["score"].as_i64().unwrap()))
            .collect();
        assert_eq!(published, teams(&model, &period), "{v}");
    }

    // After the seals: p00 leaves (forfeit: off all time, the sealed days
    // stay), and a late score of p01 for the first day counts in all time only.
    let leave = json!({"type": "team_left", "player_id": "p00", "team_id": team_of(0), "ts": now});
    let late = score("p01", 1000, days[0] + 5 * HOUR);
    stack.broker.produce(&stack.topic, &[record(leave, now), record(late, now)]).await;
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    model.get_mut("all").unwrap().get_mut(&team_of(0)).unwrap().remove("p00");
    *model.get_mut("all").unwrap().get_mut(&team_of(1)).unwrap().get_mut("p01").unwrap() += 1000;
    for &d in &days {
        reads_equal(&w, &model, &day_id(d), &format!("{}:final", day_id(d))).await;
        reads_equal(&w, &model, &day_id(d), &day_id(d)).await;
    }
    reads_equal(&w, &model, "all", "all").await;

    // An erasure reaches the sealed days, their snapshots included.
    let erase = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "player_erased", "player_id": "p02"});
    stack.broker.produce(&admin, &[admin_record(erase)]).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(60));
    for teams in model.values_mut() {
        for members in teams.values_mut() {
            members.remove("p02");
        }
    }
    for &d in &days {
        reads_equal(&w, &model, &day_id(d), &format!("{}:final", day_id(d))).await;
    }
    reads_equal(&w, &model, "all", "all").await;
    let (status, body) = w.get_json("/v1/boards/clans/players/p02?period=all").await;
    assert_eq!((status, body["team_id"].clone()), (404, json!(null)), "{body}");
}
