//! Players' history through a real worker, Apache Kafka and Redis: three sealed
//! days give each player's rank, score and percentile in each, as the player
//! reads of the sealed days answer, and their best rank; an erasure removes
//! a player's history and leaves the others' as recorded at the seals; the
//! best outlives the days' expiry; a day of 12,000 players, recorded in
//! three steps, ranks every player exactly.

use std::time::Duration;

use serde_json::{json, Value};
use support::league::wait_for;
use support::periods::{quick_sealing, DAY};
use support::*;

fn day_id(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().format("d:%Y-%m-%d").to_string()
}

/// A player's history on board `pts`.
async fn history(w: &Worker, player: &str) -> Value {
    let (status, v) = w.get_json(&format!("/v1/boards/pts/players/{player}/history")).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// The periods of a history, as listed.
fn periods_of(v: &Value) -> Vec<String> {
    v["periods"].as_array().unwrap().iter().map(|p| p["period"].as_str().unwrap().to_string()).collect()
}

/// The (rank, percentile) of each period of a history, as listed.
fn ranks(v: &Value) -> Vec<(i64, f64)> {
    v["periods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["rank"].as_i64().unwrap(), p["percentile"].as_f64().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_sealed_days_give_each_players_ranks_and_best_which_an_erasure_removes_and_expiry_keeps() {
    let stack = Stack::start(1).await;
    let (admin, sealed) = (stack.admin_topic().await, stack.sealed_topic().await);
    let Stack { redis: _redis, broker, topic, dlq } = stack;
    let now = chrono::Utc::now().timestamp_millis();
    let today = now - now.rem_euclid(DAY);
    let days = [today - 3 * DAY, today - 2 * DAY, today - DAY];
    let ids: Vec<String> = days.iter().map(|d| day_id(*d)).collect();
    // The first day (and its history) expires 45 s from now, the others a day and two days later.
    let expires = now + 45_000;
    let retention = (expires - (days[0] + DAY)) / 1000;
    let boards = quick_sealing(&sealed, "")
        + &format!(
            r#"
[[board]]
id = "pts"
on = ["match"]
mode = "sum"
periods = ["daily"]
close_after = "1m"
retention = {{ daily = "{retention}s" }}
"#
        );
    // Each day's totals; carol and dave tie on the first day.
    let scores: [&[(&str, i64)]; 3] = [
        &[("alice", 50), ("bob", 40), ("carol", 30), ("dave", 30), ("erin", 10)],
        &[("bob", 70), ("alice", 60), ("erin", 20), ("carol", 5)],
        &[("carol", 90), ("alice", 80), ("bob", 10)],
    ];
    let mut records = Vec::new();
    for (d, day) in scores.iter().enumerate() {
        for (i, (player, total)) in day.iter().enumerate() {
            // Two events per total, so the days are sums; produced (record time) before the close.
            let ts = days[d] + 1000 * (i as i64 + 1);
            for part in [total / 2, total - total / 2] {
                records.push(event_record("match", player, part, ts, ts + 500, None));
            }
        }
    }
    broker.produce(&topic, &records).await;
    let mut cfg = WorkerConfig::new(&broker, &_redis, &topic, &dlq, &boards);
    cfg.admin_topics = vec![admin.clone()];
    let w = Worker::spawn(&cfg);
    wait_http(cfg.http_port, Duration::from_secs(30)).await;
    // Reads answer 503 until the worker has connected to Redis.
    wait_for(Duration::from_secs(60), &|| w.log(), || async { w.get_json("/readyz").await.0 == 200 }).await;
    wait_for(Duration::from_secs(90), &|| w.log(), || async {
        periods_of(&history(&w, "alice").await).len() == 3 && periods_of(&history(&w, "erin").await).len() == 2
    })
    .await;

    // Each recorded standing is what a player read of the sealed day answers.
    for (d, day) in scores.iter().enumerate() {
        for (player, total) in day.iter() {
            let (status, read) = w.get_json(&format!("/v1/boards/pts/players/{player}?period={}:final", ids[d])).await;
            assert_eq!(status, 200, "{read}");
            let h = history(&w, player).await;
            let entry = h["periods"].as_array().unwrap().iter().find(|p| p["period"] == ids[d].as_str()).cloned();
            assert_eq!(
                entry,
                Some(
                    json!({ "period": ids[d], "rank": read["rank"]["ordinal"], "score": total, "percentile": read["percentile"] })
                ),
                "{player} on {}",
                ids[d]
            );
        }
    }
    // Newest day first; the ranks and percentiles as the days stood.
    let alice = history(&w, "alice").await;
    assert_eq!(periods_of(&alice), [ids[2].clone(), ids[1].clone(), ids[0].clone()]);
    assert_eq!(ranks(&alice), [(2, 66.67), (2, 75.0), (1, 100.0)]);
    assert_eq!(alice["best"], json!({ "daily": { "rank": 1, "period": ids[0] } }));
    assert_eq!(alice["best_rank"], json!(1));
    assert_eq!(ranks(&history(&w, "bob").await), [(3, 33.33), (1, 100.0), (2, 80.0)]);
    assert_eq!(history(&w, "carol").await["best"]["daily"], json!({ "rank": 1, "period": ids[2] }));
    // The tie: one competition rank, so one percentile, and ordinals 3 and 4.
    let (carol, dave) = (ranks(&history(&w, "carol").await)[2], ranks(&history(&w, "dave").await)[0]);
    assert_eq!((carol.1, dave.1), (60.0, 60.0));
    assert_eq!(carol.0 + dave.0, 7, "{carol:?} {dave:?}");
    let erin = history(&w, "erin").await;
    assert_eq!(
        (ranks(&erin), erin["best"].clone()),
        (vec![(3, 50.0), (5, 20.0)], json!({ "daily": { "rank": 3, "period": ids[1] } }))
    );
    let nobody = history(&w, "nobody").await;
    assert_eq!(
        (nobody["best_rank"].clone(), nobody["periods"].clone(), nobody["best"].clone()),
        (Value::Null, json!([]), json!({}))
    );
    assert_eq!(w.get_json("/v1/boards/nope/players/alice/history").await.0, 404);

    // Bob erased: his history is gone; alice keeps the second place bob's first place left her on day 2.
    let id = uuid::Uuid::new_v4().to_string();
    broker.produce(&admin, &[admin_record(json!({"event_id": id, "type": "player_erased", "player_id": "bob"}))]).await;
    wait_for(Duration::from_secs(60), &|| w.log(), || async { history(&w, "bob").await["periods"] == json!([]) }).await;
    let bob = history(&w, "bob").await;
    assert_eq!((bob["best"].clone(), bob["best_rank"].clone()), (json!({}), Value::Null));
    let (_, read) = w.get_json(&format!("/v1/boards/pts/players/alice?period={}:final", ids[1])).await;
    assert_eq!(read["rank"]["ordinal"], json!(1), "the sealed day itself lost bob");
    assert_eq!(ranks(&history(&w, "alice").await)[1], (2, 75.0));

    // The first day expires: it leaves the periods, and its bests stay.
    let wait = (expires + 1500 - chrono::Utc::now().timestamp_millis()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let alice = history(&w, "alice").await;
    assert_eq!(periods_of(&alice), [ids[2].clone(), ids[1].clone()]);
    assert_eq!(
        (alice["best"]["daily"].clone(), alice["best_rank"].clone()),
        (json!({ "rank": 1, "period": ids[0] }), json!(1))
    );
    let dave = history(&w, "dave").await;
    assert_eq!(dave["periods"], json!([]));
    assert_eq!(dave["best"]["daily"], json!({ "rank": dave["best_rank"], "period": ids[0] }));
    assert!(matches!(dave["best_rank"].as_i64(), Some(3 | 4)), "{dave}");
}

/// A day of 12,000 players is recorded in three steps of 5,000: every
/// player's ranks are exact across the steps' edges, ties straddling them
/// included (a step takes its first entry's competition rank from a count).
#[tokio::test(flavor = "multi_thread")]
async fn a_day_recorded_in_several_steps_ranks_every_player_exactly() {
    const PLAYERS: u64 = 12_000;
    let stack = Stack::start(1).await;
    let sealed = stack.sealed_topic().await;
    let Stack { redis, broker, topic, dlq } = stack;
    let now = chrono::Utc::now().timestamp_millis();
    let day = now - now.rem_euclid(DAY) - DAY;
    let id = day_id(day);
    let boards = quick_sealing(&sealed, "")
        + "[[board]]\nid = \"pts\"\non = [\"match\"]\nmode = \"best\"\nperiods = [\"daily\"]\nclose_after = \"1m\"\n";
    // Scores from 300 values: about 40 players share each, so ties cross the steps' edges.
    let mut rng = support::periods::Lcg(11);
    let scores: Vec<(String, i64)> = (0..PLAYERS).map(|p| (format!("p{p:05}"), 1 + rng.next(300) as i64)).collect();
    let records: Vec<_> =
        scores.iter().map(|(p, s)| event_record("match", p, *s, day + 1000, day + 1500, None)).collect();
    broker.produce(&topic, &records).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &boards);
    let w = Worker::spawn(&cfg);
    let hist_key = format!("lb:{{pts}}:_hist:{id}");
    let mut conn = redis.conn().await;
    let field = format!("lb:{{pts}}:{id}:history");
    wait_for(Duration::from_secs(120), &|| w.log(), || async {
        let at: Option<String> =
            redis::cmd("HGET").arg("lb:{pts}:_sealed").arg(&field).query_async(&mut redis.conn().await).await.unwrap();
        at.as_deref() == Some("done")
    })
    .await;
    let recorded: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(&hist_key).query_async(&mut conn).await.unwrap();
    // The model: board order is the score, best first, then member bytes descending (Redis's order of a desc board).
    let mut order = scores.clone();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    assert_eq!(recorded.len(), order.len());
    for (i, (player, score)) in order.iter().enumerate() {
        let better = order.iter().take_while(|(_, s)| s > score).count();
        let want = format!("{}:{}:{}:{score}", i + 1, better + 1, PLAYERS);
        assert_eq!(recorded.get(player), Some(&want), "{player} at position {}", i + 1);
    }
    // And as the read answers, at the edges of the steps.
    for at in [4_999usize, 5_000, 5_001, 10_000, 10_001] {
        let (player, _) = &order[at - 1];
        let (_, read) = w.get_json(&format!("/v1/boards/pts/players/{player}?period={id}:final")).await;
        let (_, h) = w.get_json(&format!("/v1/boards/pts/players/{player}/history")).await;
        assert_eq!(h["periods"][0]["rank"], json!(at), "{h}");
        assert_eq!(
            (h["periods"][0]["rank"].clone(), h["periods"][0]["percentile"].clone()),
            (read["rank"]["ordinal"].clone(), read["percentile"].clone())
        );
    }
}

/// A best rank equalled in another period keeps the earlier period,
/// whichever was recorded first (a board's days may seal in any order, and
/// a sharded board's shards may record them in another order than an
/// unsharded twin's).
#[tokio::test]
async fn an_equal_best_keeps_the_earlier_period_in_whatever_order_they_were_recorded() {
    use rankflow::store::{standing, HistoryPut};
    let redis = Redis::start();
    let store = support::apply::store_with_ttl(&redis, 60, &["lb:{h}"]).await;
    let put = |day: &'static str, ordinal: u64, player: &'static str| {
        let standings = vec![(player.to_string(), standing(ordinal, ordinal, 10, 5))];
        let store = &store;
        async move {
            let put = HistoryPut {
                base: "lb:{h}",
                period_id: day,
                kind: "daily",
                expire_at: 0,
                first: true,
                standings: &standings,
            };
            store.history_put(&put).await.unwrap();
        }
    };
    // Later day first, then the earlier one at the same rank, then a worse one.
    put("d:2026-12-06", 3, "a").await;
    put("d:2026-12-05", 3, "a").await;
    put("d:2026-12-04", 4, "a").await;
    // Earlier day first: a later equal rank leaves it.
    put("d:2026-12-05", 2, "b").await;
    put("d:2026-12-06", 2, "b").await;
    for (player, want) in [("a", (3, "d:2026-12-05")), ("b", (2, "d:2026-12-05"))] {
        let h = store.primary_reader().history("lb:{h}", player, false).await.unwrap();
        let best: Vec<(i64, &str)> = h.best.iter().map(|b| (b.rank, b.period_id.as_str())).collect();
        assert_eq!(best, [want], "{player}");
    }
}
