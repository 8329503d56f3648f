//! A league whose cohorts rank by rows, through real workers, Apache Kafka and
//! Redis, against a model: a football-style board (points, then goal
//! difference, then goals, each summed) with a league of three tiers; a
//! round's matches over four partitions, the worker killed -9 while it
//! consumes them, the round sealed and settled by the worker that takes
//! over. Every cohort ranks by its players' rows, ties broken by the second
//! and third columns and then by player id bytes: the tiers the settlement
//! writes, the cohort records it publishes (with `scores`) and the cohort
//! reads (by offset and by cursors both ways) equal the model's.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::league::{hash, round_id, seed_tiers, wait_for, TIERS};
use support::periods::{Lcg, HOUR};
use support::*;

const PARTITIONS: i32 = 4;
const PLAYERS: u64 = 90;
const SIZE: usize = 7;
const PROMOTE: usize = 2;
const DEMOTE: usize = 2;

fn boards(sealed: &str) -> String {
    format!(
        r#"
[sealing]
topic = "{sealed}"
idle_grace = "1s"
check_interval = "100ms"
lease = "2s"

[[board]]
id = "lg"
on = ["match"]
columns = [{{ name = "points", mode = "sum" }}, {{ name = "goal_diff", mode = "sum" }}, {{ name = "goals", mode = "sum" }}]
periods = ["all_time"]
schedules = [{{ name = "round", cron = "0 * * * *", duration = "1h" }}]
close_after = "10m"
[board.league]
rounds = "round"
tiers = ["bronze", "silver", "gold"]
cohort_size = {SIZE}
promote = {PROMOTE}
demote = {DEMOTE}
"#
    )
}

/// A row: points, goal difference, goals.
type RowValues = [i64; 3];

/// A cohort as the model settles it: (player, row, zone, next tier), best first.
fn settle(tier: usize, mut players: Vec<(String, RowValues)>) -> Vec<(String, RowValues, &'static str, usize)> {
    // Each column desc, then player id bytes ascending (a board with columns' tie rule).
    players.sort_by(|(pa, a), (pb, b)| b.cmp(a).then_with(|| pa.as_bytes().cmp(pb.as_bytes())));
    let k = players.len();
    let up = PROMOTE.min(k);
    let down = DEMOTE.min(k - up);
    players
        .into_iter()
        .enumerate()
        .map(|(i, (p, row))| {
            let (zone, next) = if i < up && tier + 1 < TIERS.len() {
                ("promote", tier + 1)
            } else if i < up {
                ("stay", tier)
            } else if i >= k - down && tier > 0 {
                ("demote", tier - 1)
            } else {
                ("stay", tier)
            };
            (p, row, zone, next)
        })
        .collect()
}

/// An entry's (player, row, zone, next tier) as a read or a record gives it.
fn standing(e: &Value) -> (String, RowValues, String, String) {
    let s = &e["scores"];
    let row = [s["points"].as_i64().unwrap(), s["goal_diff"].as_i64().unwrap(), s["goals"].as_i64().unwrap()];
    let text = |f: &str| e[f].as_str().unwrap_or_default().to_string();
    (text("player_id"), row, text("zone"), text("next_tier"))
}

type Want = (String, RowValues, String, String);

fn wanted(settled: &[(String, RowValues, &'static str, usize)]) -> Vec<Want> {
    settled.iter().map(|(p, row, zone, next)| (p.clone(), *row, zone.to_string(), TIERS[*next].to_string())).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_league_of_rows_settles_its_cohorts_by_points_then_goal_difference_then_goals_through_a_kill() {
    let stack = Stack::start(PARTITIONS).await;
    let sealed = stack.sealed_topic().await;
    let now = chrono::Utc::now().timestamp_millis();
    let start = now - now.rem_euclid(HOUR) - 2 * HOUR;
    let round = round_id(start);
    let mut conn = stack.redis.conn().await;
    let tier_of = |p: u64| (p % 3) as usize;
    seed_tiers(&mut conn, "lb:{lg}:_lgt", PLAYERS, tier_of).await;
    // Two to five matches a player in the round: few distinct values, so
    // rows tie on points and often on goal difference too.
    let mut rng = Lcg(41);
    let mut rows: HashMap<String, RowValues> = HashMap::new();
    let mut records = Vec::new();
    for i in 0..PLAYERS * 3 {
        let player = format!("p{}", if i < PLAYERS { i } else { rng.next(PLAYERS) });
        let points = [0, 1, 3][rng.next(3) as usize];
        let (goal_diff, goals) = (rng.next(3) as i64 - 1, rng.next(3) as i64);
        let row = rows.entry(player.clone()).or_default();
        *row = [row[0] + points, row[1] + goal_diff, row[2] + goals];
        let ts = start + 1000 + i as i64;
        let v = json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "player_id": player, "ts": ts,
                        "scores": { "points": points, "goal_diff": goal_diff, "goals": goals } });
        records.push((player, v.to_string().into_bytes(), Some(ts)));
    }
    stack.broker.produce(&stack.topic, &records).await;

    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &boards(&sealed));
    let cfg = WorkerConfig { worker_section: "batch_size = 50\nmax_backoff = \"1s\"\n".into(), ..cfg };
    // Killed -9 once some of the round is applied, the rest taken by the next worker.
    let mut w1 = Worker::spawn(&cfg);
    let deadline = Instant::now() + Duration::from_secs(60);
    while stack.broker.committed(&cfg.group, &stack.topic, PARTITIONS).iter().filter(|o| **o > 0).sum::<i64>() < 50 {
        assert!(Instant::now() < deadline, "nothing committed\n{}", w1.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w1.sigkill();
    let w = Worker::spawn(&cfg);
    let state = format!("{round}:step");
    wait_for(Duration::from_secs(120), &|| w.log(), || async {
        hash(&mut stack.redis.conn().await, "lb:{lg}:_lgs").await.get(&state).map(String::as_str) == Some("done")
    })
    .await;

    // The cohorts as placed (placement order is the arrival order, which
    // the partitions interleave): each settled by the model from its rows.
    let placed: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(rankflow::keys::league_cohorts_key("lb:{lg}", &round))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(placed.len(), PLAYERS as usize, "every player placed once");
    let mut cohorts: BTreeMap<i64, Vec<(String, RowValues)>> = BTreeMap::new();
    for (p, code) in placed {
        cohorts.entry(code as i64).or_default().push((p.clone(), rows[&p]));
    }
    let mut want_tiers: HashMap<String, usize> = HashMap::new();
    let mut want_records: BTreeMap<String, Vec<Want>> = BTreeMap::new();
    let mut ties_below_points = 0;
    for (code, players) in cohorts {
        let (tier, n) = rankflow::board::league::split_code(code).expect("a cohort's code");
        let settled = settle(tier, players);
        ties_below_points += settled.windows(2).filter(|w| w[0].1[0] == w[1].1[0]).count();
        for (p, _, _, next) in &settled {
            want_tiers.insert(p.clone(), *next);
        }
        want_records.insert(format!("{}-{n}", TIERS[tier]), wanted(&settled));
    }
    assert!(ties_below_points > 10, "the stream ties on points often enough: {ties_below_points}");
    let tiers: HashMap<String, usize> = redis::cmd("HGETALL").arg("lb:{lg}:_lgt").query_async(&mut conn).await.unwrap();
    assert_eq!(tiers, want_tiers, "the tiers the settlement wrote");

    // The cohort records: one per cohort, ranked by rows, with scores.
    let cohorts = want_records.len();
    let published = stack.broker.read_at_least(&sealed, 1, cohorts + 1, Duration::from_secs(60));
    let mut got_records = BTreeMap::new();
    for m in &published {
        let v: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        if v["kind"] == "league" {
            let entries: Vec<Want> = v["standings"].as_array().unwrap().iter().map(standing).collect();
            assert!(got_records.insert(v["cohort"].as_str().unwrap().to_string(), entries).is_none(), "{v}");
        }
    }
    assert_eq!(got_records, want_records, "the cohort records");

    // The cohort reads: by offset, and paged by cursors forward and back.
    for (cohort, want) in &want_records {
        let path = format!("/v1/boards/lg/cohorts/{cohort}?period={round}&limit=100");
        let (status, body) = w.get_json(&path).await;
        assert_eq!(status, 200, "{body}");
        let got: Vec<Want> = body["entries"].as_array().unwrap().iter().map(standing).collect();
        assert_eq!(&got, want, "{cohort} read");
        let (mut paged, mut pages) = (Vec::new(), Vec::new());
        let mut path = format!("/v1/boards/lg/cohorts/{cohort}?period={round}&limit=2");
        loop {
            let (status, page) = w.get_json(&path).await;
            assert_eq!(status, 200, "{page}");
            paged.extend(page["entries"].as_array().unwrap().iter().map(standing));
            pages.push(page.clone());
            let Some(next) = page["next_cursor"].as_str() else { break };
            path = format!("/v1/boards/lg/cohorts/{cohort}?period={round}&limit=2&cursor={next}");
        }
        assert_eq!(&paged, want, "{cohort} paged by cursors");
        if let Some(prev) = pages.last().and_then(|p| p["prev_cursor"].as_str()) {
            let (_, page) =
                w.get_json(&format!("/v1/boards/lg/cohorts/{cohort}?period={round}&limit=2&cursor={prev}")).await;
            let back: Vec<Want> = page["entries"].as_array().unwrap().iter().map(standing).collect();
            let last_page = pages.last().unwrap()["entries"].as_array().unwrap().len();
            let end = want.len() - last_page;
            assert_eq!(back, want[end.saturating_sub(2)..end], "{cohort} back from its last page");
        }
    }
}
