//! The read side through the real worker and HTTP server: the seeds' rank
//! fixture (alice 90, bob 100, carol 100), earliest-first ties, around-me at
//! both edges, unranked players and bad parameters.

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

fn event(player: &str, score: i64, ts_ms: i64) -> (String, Vec<u8>, Option<i64>) {
    let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "player_id": player, "score": score, "ts": ts_ms});
    (player.to_string(), v.to_string().into_bytes(), Some(ts_ms))
}

fn lap(player: &str, ms: i64, track: &str, ts_ms: i64) -> (String, Vec<u8>, Option<i64>) {
    let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "lap", "player_id": player, "score": ms, "ts": ts_ms, "attrs": {"track": track}});
    (player.to_string(), v.to_string().into_bytes(), Some(ts_ms))
}

fn ranks(body: &Value) -> Vec<(String, i64)> {
    body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["player_id"].as_str().unwrap().to_string(), e["rank"].as_i64().unwrap()))
        .collect()
}

fn pairs(v: &[(&str, i64)]) -> Vec<(String, i64)> {
    v.iter().map(|(p, r)| (p.to_string(), *r)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_read_api_ranks_the_seed_fixture_three_ways_and_breaks_ties_by_time() {
    let Stack { redis, broker, topic, dlq } = Stack::start(1).await;
    let now = chrono::Utc::now().timestamp_millis();
    // bob reaches 100 before carol; one partition keeps the order.
    let records = vec![
        event("alice", 90, now - 3000),
        event("bob", 100, now - 2000),
        event("carol", 100, now - 1000),
        lap("alice", 71_000, "monza", now),
        lap("bob", 69_500, "monza", now),
        lap("carol", 80_000, "spa", now),
    ];
    broker.produce(&topic, &records).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, READ_BOARDS);
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    wait_http(w.http_port, Duration::from_secs(10)).await;

    // Member ties: carol before bob (member bytes, descending).
    let (status, top) = w.get_json("/v1/boards/member/top?period=all_time").await;
    assert_eq!(status, 200, "{top}");
    assert_eq!(top["total"], 3);
    assert_eq!(top["entries"][0]["score"], 100);
    assert_eq!(ranks(&top), pairs(&[("carol", 1), ("bob", 2), ("alice", 3)]));
    let (_, top) = w.get_json("/v1/boards/member/top?period=all_time&rank=competition").await;
    assert_eq!(ranks(&top), pairs(&[("carol", 1), ("bob", 1), ("alice", 3)]));
    let (_, top) = w.get_json("/v1/boards/member/top?period=all_time&rank=dense").await;
    assert_eq!(ranks(&top), pairs(&[("carol", 1), ("bob", 1), ("alice", 2)]));
    // A page that starts inside the tie continues its ranks.
    let (_, page) = w.get_json("/v1/boards/member/top?period=all&offset=1&limit=2&rank=competition").await;
    assert_eq!(ranks(&page), pairs(&[("bob", 1), ("alice", 3)]));
    let (status, alice) = w.get_json("/v1/boards/member/players/alice").await;
    assert_eq!(status, 200);
    assert_eq!(alice["score"], 90);
    assert_eq!(alice["rank"], json!({"ordinal": 3, "competition": 3, "dense": 2}));
    assert_eq!(alice["total"], 3);
    let (_, bob) = w.get_json("/v1/boards/member/players/bob?period=daily").await;
    assert_eq!(bob["rank"], json!({"ordinal": 2, "competition": 1, "dense": 1}));
    assert_eq!(bob["percentile"], 100.0);

    // Earliest ties: bob reached 100 first, on best and sum boards; scores come back decoded.
    for board in ["earliest", "total"] {
        let (_, top) = w.get_json(&format!("/v1/boards/{board}/top")).await;
        assert_eq!(ranks(&top), pairs(&[("bob", 1), ("carol", 2), ("alice", 3)]), "{board}");
        assert_eq!(top["entries"][0]["score"], 100, "{board}");
        let (_, top) = w.get_json(&format!("/v1/boards/{board}/top?rank=dense")).await;
        assert_eq!(ranks(&top), pairs(&[("bob", 1), ("carol", 1), ("alice", 2)]), "{board}");
        let (_, carol) = w.get_json(&format!("/v1/boards/{board}/players/carol")).await;
        assert_eq!(carol["score"], 100);
        assert_eq!(carol["rank"], json!({"ordinal": 2, "competition": 1, "dense": 1}), "{board}");
    }

    // Around me, at the top and bottom edges.
    let (_, a) = w.get_json("/v1/boards/member/players/carol/around?radius=1").await;
    assert_eq!(ranks(&a), pairs(&[("carol", 1), ("bob", 2)]));
    let (_, a) = w.get_json("/v1/boards/member/players/alice/around?radius=1&rank=competition").await;
    assert_eq!(ranks(&a), pairs(&[("bob", 1), ("alice", 3)]));
    let (_, a) = w.get_json("/v1/boards/member/players/bob/around?radius=5&rank=dense").await;
    assert_eq!(ranks(&a), pairs(&[("carol", 1), ("bob", 1), ("alice", 2)]));

    // Ascending split boards: lower is better.
    let (_, monza) = w.get_json("/v1/boards/laps/top?split=monza").await;
    assert_eq!(ranks(&monza), pairs(&[("bob", 1), ("alice", 2)]));
    assert_eq!(monza["entries"][0]["score"], 69_500);

    // Unranked players are 404, never rank 0 or last.
    let (status, body) = w.get_json("/v1/boards/member/players/dave").await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = w.get_json("/v1/boards/member/players/dave/around").await;
    assert_eq!(status, 404);
    let (status, _) = w.get_json("/v1/boards/laps/players/carol?split=monza").await;
    assert_eq!(status, 404);
    let (status, _) = w.get_json("/v1/boards/nope/top").await;
    assert_eq!(status, 404);

    // Bad parameters are 400 naming the parameter.
    for (path, param) in [
        ("/v1/boards/member/top?limit=abc", "limit"),
        ("/v1/boards/member/top?limit=100000", "limit"),
        ("/v1/boards/member/top?offset=-1", "offset"),
        ("/v1/boards/member/top?rank=fancy", "rank"),
        ("/v1/boards/member/top?period=fortnightly", "period"),
        ("/v1/boards/member/top?period=weekly", "period"),
        ("/v1/boards/member/top?period=w:2026-W99", "period"),
        ("/v1/boards/member/top?at=yesterday", "at"),
        ("/v1/boards/member/top?split=eu", "split"),
        ("/v1/boards/laps/top", "split"),
        ("/v1/boards/member/players/bob/around?radius=x", "radius"),
    ] {
        let (status, body) = w.get_json(path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["parameter"], param, "{path}: {body}");
    }

    // The board list names the current periods and their next reset.
    let (_, boards) = w.get_json("/v1/boards").await;
    let member = boards["boards"].as_array().unwrap().iter().find(|b| b["id"] == "member").unwrap();
    let daily = member["periods"].as_array().unwrap().iter().find(|p| p["name"] == "daily").unwrap();
    let today = chrono::Utc::now().format("d:%Y-%m-%d").to_string();
    assert_eq!(daily["current"], today);
    assert!(daily["next_reset"].as_str().unwrap().ends_with("T00:00:00+00:00"));
}
