//! Leagues across crashes, through real workers, Apache Kafka and Redis: placement
//! stays exact across five SIGKILLs over four partitions, and a settlement
//! killed midway and taken over by another worker leaves the model's tiers
//! and one record per cohort.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use rdkafka::message::Message;
use serde_json::Value;
use support::league::*;
use support::periods::*;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn placement_stays_exact_across_five_sigkills() {
    const PLAYERS: u64 = 2000;
    const SIZE: usize = 30;
    let stack = Stack::start(4).await;
    let boards = r#"
[[board]]
id = "lk"
on = ["match"]
mode = "sum"
periods = ["all_time"]
schedules = [{ name = "round", cron = "0 * * * *", duration = "1h" }]
close_after = "2h"
[board.league]
rounds = "round"
tiers = ["bronze", "silver", "gold", "diamond"]
cohort_size = 30
promote = 5
demote = 5
"#;
    let now = chrono::Utc::now().timestamp_millis();
    let this_hour = now - now.rem_euclid(HOUR);
    let round = round_id(this_hour);
    // Tiers as a settlement left them (the round before this one held nobody, so this one places at once).
    let mut conn = stack.redis.conn().await;
    let tier_of = |p: u64| (p * 7 + p / 3) % 4;
    seed_tiers(&mut conn, "lb:{lk}:_lgt", PLAYERS, |p| tier_of(p) as usize).await;
    let mut rng = Lcg(5);
    let mut model: BTreeMap<String, i64> = BTreeMap::new();
    let mut records = Vec::new();
    for _ in 0..20_000 {
        let p = rng.next(PLAYERS);
        let score = 1 + rng.next(50) as i64;
        let player = format!("p{p}");
        *model.entry(player.clone()).or_default() += score;
        let ts = this_hour + rng.next((now - this_hour) as u64) as i64;
        records.push(event_record("match", &player, score, ts, now, None));
    }
    stack.broker.produce(&stack.topic, &records).await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, boards);
    cfg.worker_section = "batch_size = 200\nmax_backoff = \"1s\"\n".into();
    let total = records.len() as i64;
    let kills = five_sigkills(&cfg, &mut conn, &[(stack.topic.as_str(), 4)], total, 91).await;
    assert!(kills.iter().all(|k| k[0] < total), "a kill landed after the stream ended: {kills:?}");
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 4, Duration::from_secs(300));

    // Every player of the round in exactly one cohort (a zset holds a member once), of their tier.
    let placed = zset_values(&mut conn, &format!("lb:{{lk}}:_lgc:{round}")).await;
    assert_eq!(placed.keys().collect::<Vec<_>>(), model.keys().collect::<Vec<_>>(), "{}", w.log());
    let mut sizes: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    for (player, code) in &placed {
        let p: u64 = player[1..].parse().unwrap();
        assert_eq!(code / SPAN, tier_of(p) as i64, "{player}'s tier");
        *sizes.entry((code / SPAN, code % SPAN)).or_default() += 1;
    }
    // No cohort over its size, and in each tier every cohort but the newest full.
    let open = hash(&mut conn, &format!("lb:{{lk}}:_lgo:{round}")).await;
    for tier in 0..4 {
        let newest: i64 = open[&tier.to_string()].parse().unwrap();
        for n in 1..=newest {
            let size = sizes.get(&(tier, n)).copied().unwrap_or(0);
            assert!(size <= SIZE, "cohort {tier}/{n} holds {size}");
            if n < newest {
                assert_eq!(size, SIZE, "cohort {tier}/{n} is not the newest but holds {size}");
            }
        }
        assert!(sizes.keys().all(|(t, n)| *t != tier || *n <= newest));
    }
    // Each player's cohort score is the round's score: the model's.
    assert_eq!(zset_values(&mut conn, &format!("lb:{{lk}}:{round}")).await, model);
    // The cohorts read as the model ranks them.
    let (status, body) = http_get(w.http_port, &format!("/v1/boards/lk/cohorts/gold-1?limit=30&period={round}")).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let mut gold: Vec<(&String, i64)> =
        placed.iter().filter(|(_, c)| **c == 2 * SPAN + 1).map(|(p, _)| (p, model[p])).collect();
    gold.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(a.0)));
    let got: Vec<(String, i64)> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["player_id"].as_str().unwrap().to_string(), e["score"].as_i64().unwrap()))
        .collect();
    assert_eq!(got, gold.iter().map(|(p, s)| (p.to_string(), *s)).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_settlement_killed_midway_and_taken_over_leaves_the_same_tiers_and_one_record_per_cohort() {
    settlement_killed_midway(true).await;
}

/// Without transactions, the job taken over reads back what the topic got
/// since the publication began, and sends the rest.
#[tokio::test(flavor = "multi_thread")]
async fn without_transactions_a_settlement_taken_over_reads_back_and_sends_each_cohort_once() {
    settlement_killed_midway(false).await;
}

/// With transactions, a job taken over appends to the outbox what is not
/// in it yet, and the outbox's publisher publishes each record once.
async fn settlement_killed_midway(transactions: bool) {
    const PLAYERS: u64 = 30_000;
    let Stack { redis, broker, topic, dlq } = Stack::start(1).await;
    let sealed = broker.sealed_topic().await;
    let now = chrono::Utc::now().timestamp_millis();
    let start = now - now.rem_euclid(HOUR) - 2 * HOUR;
    let round = round_id(start);
    let boards = format!(
        r#"
[sealing]
topic = "{sealed}"
idle_grace = "1s"
check_interval = "100ms"
lease = "2s"

"#
    ) + &league_board("big", "match", "10m", 30, "promote = \"20%\"\ndemote = 3\n");
    let mut conn = redis.conn().await;
    let tier_of = |p: u64| (p % 7 % 3) as usize;
    seed_tiers(&mut conn, "lb:{big}:_lgt", PLAYERS, tier_of).await;
    // One event each, in player order (the arrival order); scores with ties.
    let mut rng = Lcg(23);
    let mut scores = HashMap::new();
    let mut arrivals = Vec::new();
    let mut records = Vec::new();
    for p in 0..PLAYERS {
        let player = format!("p{p}");
        let score = 1 + rng.next(40) as i64;
        records.push(event_record("match", &player, score, start + 1000, start + 1000, None));
        scores.insert(player.clone(), score);
        arrivals.push(player);
    }
    broker.produce(&topic, &records).await;
    // The model, with ties decided as Redis orders a desc board (member bytes descending).
    let mut model =
        Model { size: 30, promote: Promote::Percent(20), demote: 3, keep_idle: false, next: HashMap::new() };
    for (p, t) in arrivals.iter().enumerate() {
        model.next.insert(t.clone(), tier_of(p as u64));
    }
    let placed = model.place(&arrivals.iter().map(String::as_str).collect::<Vec<_>>());
    let cohort_count = model.settle(&placed, &scores, None).len();
    let tiers = model.next;

    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &boards);
    cfg.worker_section = "batch_size = 1000\nshutdown_timeout = \"20s\"\nmax_backoff = \"1s\"\n".into();
    cfg.kafka_extra = format!("transactions = {transactions}");
    let mut w1 = Worker::spawn(&cfg);
    // Killed once the settlement has begun and before it has ended.
    let step = format!("{round}:step");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let at_kill = loop {
        let state = hash(&mut conn, "lb:{big}:_lgs").await;
        if let Some(at) = state.get(&step) {
            assert_ne!(at, "done", "the settlement ended before the kill could land\n{}", w1.log());
            break at.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no settlement began\n{}", w1.log());
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    w1.sigkill();
    let w2 = Worker::spawn(&cfg);
    wait_for(Duration::from_secs(120), &|| w2.log(), || async {
        hash(&mut redis.conn().await, "lb:{big}:_lgs").await.get(&format!("{round}:published"))
            == Some(&cohort_count.to_string())
    })
    .await;
    let got: HashMap<String, usize> = redis::cmd("HGETALL").arg("lb:{big}:_lgt").query_async(&mut conn).await.unwrap();
    assert_eq!(got.len(), tiers.len());
    let wrong: Vec<_> = tiers.iter().filter(|(p, t)| got.get(*p) != Some(t)).take(5).collect();
    assert!(wrong.is_empty(), "killed at {at_kill}: tiers differ from the model, e.g. {wrong:?}");
    // Published after the settlement appended them (with kafka.transactions, by the outbox's publisher).
    let published = broker.read_at_least(&sealed, 1, cohort_count + 1, Duration::from_secs(60));
    let keys: Vec<String> = published.iter().map(|m| String::from_utf8_lossy(m.key().unwrap()).into_owned()).collect();
    let distinct: HashSet<&String> = keys.iter().collect();
    assert_eq!(keys.len(), distinct.len(), "killed at {at_kill}: a record published twice");
    assert_eq!(keys.len(), cohort_count + 1, "every cohort and the top");
}
