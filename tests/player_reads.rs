//! Reads for players through the real worker and HTTP server: friends sets,
//! what-if ranks, around-me filled at the edges, and cursors, on the seeds'
//! rank fixture (alice 90, bob 100, carol 100) and on a board being written
//! while it is paged.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

fn event(kind: &str, player: &str, score: i64, ts_ms: i64, attrs: Value) -> (String, Vec<u8>, Option<i64>) {
    let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": player, "score": score, "ts": ts_ms, "attrs": attrs});
    (player.to_string(), v.to_string().into_bytes(), Some(ts_ms))
}

fn score(player: &str, score: i64, ts_ms: i64) -> (String, Vec<u8>, Option<i64>) {
    event("match", player, score, ts_ms, json!({}))
}

fn lap(player: &str, ms: i64, track: &str, ts_ms: i64) -> (String, Vec<u8>, Option<i64>) {
    event("lap", player, ms, ts_ms, json!({ "track": track }))
}

/// (player, rank, rank_in_set) of a friends answer.
fn set_ranks(body: &Value) -> Vec<(String, i64, i64)> {
    body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (e["player_id"].as_str().unwrap().into(), e["rank"].as_i64().unwrap(), e["rank_in_set"].as_i64().unwrap())
        })
        .collect()
}

fn triples(v: &[(&str, i64, i64)]) -> Vec<(String, i64, i64)> {
    v.iter().map(|(p, r, s)| (p.to_string(), *r, *s)).collect()
}

fn players(body: &Value) -> Vec<String> {
    body["entries"].as_array().unwrap().iter().map(|e| e["player_id"].as_str().unwrap().to_string()).collect()
}

/// The seeds' fixture and a few more, on desc, earliest and asc split boards.
async fn fixture() -> (Stack, Worker) {
    let stack = Stack::start(1).await;
    let now = chrono::Utc::now().timestamp_millis();
    // bob reaches 100 before carol; one partition keeps the order.
    let records = vec![
        score("alice", 90, now - 5000),
        score("bob", 100, now - 4000),
        score("carol", 100, now - 3000),
        score("dave", 80, now - 2000),
        score("erin", 70, now - 1000),
        score("frank", 60, now - 500),
        lap("alice", 71_000, "monza", now),
        lap("bob", 69_500, "monza", now),
        lap("carol", 80_000, "spa", now),
    ];
    stack.broker.produce(&stack.topic, &records).await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, READ_BOARDS);
    cfg.http_extra = "max_players = 4".into();
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    wait_http(w.http_port, Duration::from_secs(10)).await;
    (stack, w)
}

#[tokio::test(flavor = "multi_thread")]
async fn friends_rank_globally_and_within_the_set_under_each_policy() {
    let (_stack, w) = fixture().await;
    let body = r#"{"players": ["alice", "zed", "carol", "alice", "bob"]}"#;

    // Member ties: carol before bob; zed is not on the board; alice counts once.
    let (status, set) = w.post_json("/v1/boards/member/players?period=all_time", body).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["total"], 6);
    assert_eq!(set["not_found"], json!(["zed"]));
    assert_eq!(set_ranks(&set), triples(&[("carol", 1, 1), ("bob", 2, 2), ("alice", 3, 3)]));
    assert_eq!(set["entries"][2]["score"], 90);
    let (_, set) = w.post_json("/v1/boards/member/players?rank=competition", body).await;
    assert_eq!(set_ranks(&set), triples(&[("carol", 1, 1), ("bob", 1, 2), ("alice", 3, 3)]));
    let (_, set) = w.post_json("/v1/boards/member/players?period=daily&rank=dense", body).await;
    assert_eq!(set_ranks(&set), triples(&[("carol", 1, 1), ("bob", 1, 2), ("alice", 2, 3)]));

    // A set that leaves out the leaders ranks within itself from 1.
    let (_, set) = w.post_json("/v1/boards/member/players", r#"{"players": ["frank", "dave"]}"#).await;
    assert_eq!(set_ranks(&set), triples(&[("dave", 4, 1), ("frank", 6, 2)]));

    // Earliest ties: bob reached 100 first.
    let (_, set) = w.post_json("/v1/boards/earliest/players", body).await;
    assert_eq!(set_ranks(&set), triples(&[("bob", 1, 1), ("carol", 2, 2), ("alice", 3, 3)]));
    assert_eq!(set["entries"][0]["score"], 100);

    // Ascending split board: lower is better; carol drives another track.
    let (_, set) = w.post_json("/v1/boards/laps/players?split=monza", body).await;
    assert_eq!(set_ranks(&set), triples(&[("bob", 1, 1), ("alice", 2, 2)]));
    let mut missing: Vec<String> = serde_json::from_value(set["not_found"].clone()).unwrap();
    missing.sort();
    assert_eq!(missing, ["carol", "zed"]);

    // Bad bodies and too many players are 400 naming players.
    for bad in [
        "",
        "[]",
        "{}",
        r#"{"players": "alice"}"#,
        r#"{"players": [1, 2]}"#,
        r#"{"players": []}"#,
        r#"{"players": ["a", "b", "c", "d", "e"]}"#,
    ] {
        let (status, body) = w.post_json("/v1/boards/member/players", bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["parameter"], "players", "{bad}: {body}");
    }
    // Repeated ids count once against max_players (4 here).
    let (status, _) = w.post_json("/v1/boards/member/players", r#"{"players": ["a", "b", "c", "d", "a"]}"#).await;
    assert_eq!(status, 200);
    let (status, body) = w.post_json("/v1/boards/member/players?rank=fancy", body).await;
    assert_eq!((status, body["parameter"].clone()), (400, json!("rank")));
}

#[tokio::test(flavor = "multi_thread")]
async fn rank_of_places_a_newcomer_after_the_players_at_its_score() {
    let (_stack, w) = fixture().await;
    // Board: carol 100, bob 100, alice 90, dave 80, erin 70, frank 60.
    for (board, score, ordinal, competition, dense) in [
        ("member", 100, 3, 1, 1),
        ("member", 101, 1, 1, 1),
        ("member", 95, 3, 3, 2),
        ("member", 90, 4, 3, 2),
        ("member", 10, 7, 7, 6),
        ("earliest", 100, 3, 1, 1),
        ("earliest", 80, 5, 4, 3),
    ] {
        let (status, r) = w.get_json(&format!("/v1/boards/{board}/rank-of?score={score}")).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(
            r["rank"],
            json!({"ordinal": ordinal, "competition": competition, "dense": dense}),
            "{board} {score}"
        );
        assert_eq!((r["total"].clone(), r["score"].clone()), (json!(6), json!(score)));
    }
    // Percentile as if counted with the board: 7 players, 6 strictly better.
    let (_, r) = w.get_json("/v1/boards/member/rank-of?score=10").await;
    assert_eq!(r["percentile"], 14.29);
    let (_, r) = w.get_json("/v1/boards/member/rank-of?score=500&period=daily").await;
    assert_eq!(r["percentile"], 100.0);

    // Ascending: bob 69,500, alice 71,000 on monza.
    for (score, ordinal, competition) in [(69_500, 2, 1), (70_000, 2, 2), (71_000, 3, 2), (60_000, 1, 1)] {
        let (_, r) = w.get_json(&format!("/v1/boards/laps/rank-of?score={score}&split=monza")).await;
        assert_eq!(
            (r["rank"]["ordinal"].clone(), r["rank"]["competition"].clone()),
            (json!(ordinal), json!(competition)),
            "{score}"
        );
    }
    // An empty board: rank 1 of 1.
    let (_, r) = w.get_json("/v1/boards/laps/rank-of?score=1&split=suzuka").await;
    assert_eq!(
        (r["rank"]["ordinal"].clone(), r["total"].clone(), r["percentile"].clone()),
        (json!(1), json!(0), json!(100.0))
    );

    for path in [
        "/v1/boards/member/rank-of",
        "/v1/boards/member/rank-of?score=1.5",
        "/v1/boards/member/rank-of?score=abc",
        "/v1/boards/member/rank-of?score=99999999999999999999",
    ] {
        let (status, body) = w.get_json(path).await;
        assert_eq!((status, body["parameter"].clone()), (400, json!("score")), "{path}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn around_filled_answers_a_full_window_at_both_edges() {
    let (_stack, w) = fixture().await;
    // carol, bob, alice, dave, erin, frank.
    for (player, radius, fill, want) in [
        ("carol", 1, false, vec!["carol", "bob"]),
        ("carol", 1, true, vec!["carol", "bob", "alice"]),
        ("bob", 2, true, vec!["carol", "bob", "alice", "dave", "erin"]),
        ("dave", 1, true, vec!["alice", "dave", "erin"]),
        ("frank", 2, false, vec!["dave", "erin", "frank"]),
        ("frank", 2, true, vec!["bob", "alice", "dave", "erin", "frank"]),
        ("erin", 10, true, vec!["carol", "bob", "alice", "dave", "erin", "frank"]),
    ] {
        let (status, a) =
            w.get_json(&format!("/v1/boards/member/players/{player}/around?radius={radius}&fill={fill}")).await;
        assert_eq!(status, 200, "{a}");
        assert_eq!(players(&a), want, "{player} radius {radius} fill {fill}");
    }
    // Ranks stay those of the board (competition: carol and bob share 1).
    let (_, a) = w.get_json("/v1/boards/member/players/carol/around?radius=1&fill=true&rank=competition").await;
    let ranks: Vec<i64> = a["entries"].as_array().unwrap().iter().map(|e| e["rank"].as_i64().unwrap()).collect();
    assert_eq!(ranks, [1, 1, 3]);
    // Ascending edge.
    let (_, a) = w.get_json("/v1/boards/laps/players/alice/around?radius=1&fill=true&split=monza").await;
    assert_eq!(players(&a), ["bob", "alice"]);
    let (status, body) = w.get_json("/v1/boards/member/players/bob/around?fill=yes").await;
    assert_eq!((status, body["parameter"].clone()), (400, json!("fill")));
}

#[tokio::test(flavor = "multi_thread")]
async fn cursors_page_both_ways_and_refuse_what_is_not_theirs() {
    let (_stack, w) = fixture().await;
    let (_, all) = w.get_json("/v1/boards/member/top?limit=10&rank=competition").await;
    assert!(all.get("next_cursor").is_none() && all.get("prev_cursor").is_none(), "{all}");
    // Pages of two, forwards: the same entries and ranks as one page of all.
    let mut seen = Vec::new();
    let (_, mut page) = w.get_json("/v1/boards/member/top?limit=2&rank=competition").await;
    assert!(page.get("prev_cursor").is_none());
    let mut pages = vec![page.clone()];
    loop {
        seen.extend(page["entries"].as_array().unwrap().iter().cloned());
        let Some(next) = page.get("next_cursor").and_then(Value::as_str) else { break };
        page = w.get_json(&format!("/v1/boards/member/top?limit=2&rank=competition&cursor={next}")).await.1;
        pages.push(page.clone());
    }
    assert_eq!(seen, *all["entries"].as_array().unwrap());
    assert_eq!(pages.len(), 3);
    // And back: the prev cursor of page 3 gives page 2, of page 2 page 1.
    let prev = pages[2]["prev_cursor"].as_str().unwrap();
    let (_, back) = w.get_json(&format!("/v1/boards/member/top?limit=2&rank=competition&cursor={prev}")).await;
    assert_eq!(back["entries"], pages[1]["entries"]);
    let prev = back["prev_cursor"].as_str().unwrap();
    let (_, back) = w.get_json(&format!("/v1/boards/member/top?limit=2&rank=competition&cursor={prev}")).await;
    assert_eq!(back["entries"], pages[0]["entries"]);
    assert!(back.get("prev_cursor").is_none(), "{back}");

    // Ascending split board: the cursor carries its split.
    let (_, first) = w.get_json("/v1/boards/laps/top?split=monza&limit=1").await;
    assert_eq!(players(&first), ["bob"]);
    let next = first["next_cursor"].as_str().unwrap();
    let (status, second) = w.get_json(&format!("/v1/boards/laps/top?limit=1&cursor={next}")).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(players(&second), ["alice"]);
    assert_eq!(second["entries"][0]["rank"], 2);

    let cursor = pages[0]["next_cursor"].as_str().unwrap();
    for path in [
        format!("/v1/boards/member/top?cursor={cursor}&offset=2"),
        "/v1/boards/member/top?cursor=bm90LWEtY3Vyc29y".to_string(),
        "/v1/boards/member/top?cursor=!!!".to_string(),
        format!("/v1/boards/earliest/top?cursor={cursor}"),
        format!("/v1/boards/member/top?period=daily&cursor={cursor}"),
        format!("/v1/boards/laps/top?split=spa&cursor={next}"),
    ] {
        let (status, body) = w.get_json(&path).await;
        assert_eq!((status, body["parameter"].clone()), (400, json!("cursor")), "{path}: {body}");
    }
}

const MOVING: &str = r#"
[[board]]
id = "moving"
on = ["match"]
mode = "latest"
periods = ["all_time"]
"#;

/// Board order of (member, value) pairs: value descending, then member bytes descending.
fn board_order(a: &(String, i64), b: &(String, i64)) -> std::cmp::Ordering {
    b.1.cmp(&a.1).then_with(|| b.0.as_bytes().cmp(a.0.as_bytes()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_scan_sees_every_unchanged_member_once_in_order_while_others_move() {
    let Stack { redis: _redis, broker, topic, dlq } = Stack::start(1).await;
    let now = chrono::Utc::now().timestamp_millis();
    // 300 players on 20 values, so that pages end inside ties; every third moves,
    // often onto those values, so that a cursor made at a mover that has moved
    // since must find its place among the ties it left.
    let name = |i: usize| format!("p{i:03}");
    let initial: Vec<_> = (0..300).map(|i| score(&name(i), (i % 20) as i64 * 10, now - 60_000)).collect();
    broker.produce(&topic, &initial).await;
    let cfg = WorkerConfig::new(&broker, &_redis, &topic, &dlq, MOVING);
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    wait_http(w.http_port, Duration::from_secs(10)).await;
    let moving: HashSet<String> = (0..300).step_by(3).map(name).collect();
    let unchanged: HashMap<String, i64> =
        (0..300).filter(|i| i % 3 != 0).map(|i| (name(i), (i % 20) as i64 * 10)).collect();

    // A writer moves the moving players up and down (latest wins) all through the scan.
    let writer_broker = broker.producer();
    let writer_topic = topic.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer_stop = stop.clone();
    let moving_list: Vec<String> = moving.iter().cloned().collect();
    let writer = tokio::spawn(async move {
        let mut round = 0i64;
        while !writer_stop.load(std::sync::atomic::Ordering::Relaxed) {
            round += 1;
            let moves: Vec<_> = moving_list
                .iter()
                .enumerate()
                .map(|(k, p)| score(p, ((k as i64 * 37 + round * 53) % 43) * 5 - 10, now + round * 100 + k as i64))
                .collect();
            let sends = moves.iter().map(|(key, payload, ts)| {
                let rec =
                    rdkafka::producer::FutureRecord::to(&writer_topic).key(key).payload(payload).timestamp(ts.unwrap());
                writer_broker.send(rec, Duration::from_secs(5))
            });
            for sent in futures::future::join_all(sends).await {
                sent.expect("produce a move");
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        round
    });

    // Let the first moves land, then scan in pages of 7, a little apart.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = w.get_json("/v1/boards/moving/top?limit=1000").await.1;
    let mut scanned: Vec<(String, i64)> = Vec::new();
    let (_, mut page) = w.get_json("/v1/boards/moving/top?limit=7").await;
    let mut moved_at_cursor = 0;
    loop {
        for e in page["entries"].as_array().unwrap() {
            scanned.push((e["player_id"].as_str().unwrap().into(), e["score"].as_i64().unwrap()));
        }
        let Some(next) = page.get("next_cursor").and_then(Value::as_str) else { break };
        // When the page ends at a mover, move it now, onto a value that
        // unchanged members hold, so that the cursor's entry is gone and the
        // next page must find its place among the ties it left. (Its time is
        // past all the writer's, so the move stays.)
        let (last, value) = scanned.last().cloned().unwrap();
        if moving.contains(&last) {
            let to = (value.div_euclid(10) + 7).rem_euclid(20) * 10;
            broker.produce(&topic, &[score(&last, to, now + 200_000 + moved_at_cursor)]).await;
            let path = format!("/v1/boards/moving/players/{last}");
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while w.get_json(&path).await.1["score"] != to {
                assert!(std::time::Instant::now() < deadline, "the move of {last} never landed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            moved_at_cursor += 1;
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
        let (status, p) = w.get_json(&format!("/v1/boards/moving/top?limit=7&cursor={next}")).await;
        assert_eq!(status, 200, "{p}");
        page = p;
    }
    let after = w.get_json("/v1/boards/moving/top?limit=1000").await.1;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.await.unwrap();
    assert!(rounds >= 3, "the writer ran {rounds} rounds only");
    assert!(moved_at_cursor >= 3, "only {moved_at_cursor} cursors were made at a member that then moved");
    assert_ne!(before["entries"], after["entries"], "nothing moved during the scan");

    // Every unchanged member exactly once, with its score, in board order.
    let kept: Vec<(String, i64)> = scanned.iter().filter(|(p, _)| unchanged.contains_key(p)).cloned().collect();
    let mut ids: Vec<&String> = kept.iter().map(|(p, _)| p).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), kept.len(), "an unchanged member appeared twice");
    assert_eq!(kept.len(), unchanged.len(), "an unchanged member was missed");
    for (p, v) in &kept {
        assert_eq!(unchanged[p], *v, "{p}");
    }
    let mut sorted = kept.clone();
    sorted.sort_by(board_order);
    assert_eq!(kept, sorted, "unchanged members out of board order");

    // A friends read of http.max_players (1,000 by default) of the longest
    // ids fits the body limit.
    let mut ids: Vec<String> = (0..999).map(|i| format!("{i:0>128}")).collect();
    ids.push(name(1));
    let (status, set) = w.post_json("/v1/boards/moving/players", &json!({ "players": ids }).to_string()).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!((set["entries"].as_array().unwrap().len(), set["not_found"].as_array().unwrap().len()), (1, 999));
}
