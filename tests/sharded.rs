//! Sharded boards on a local 3-primary Redis Cluster: the same 200,000-record
//! stream feeds boards with `shards = 8` and unsharded reference boards
//! with the same rules (a `sum` board with member ties, a `best` board with
//! `earliest` ties), and after the drain every read answers identically:
//! every top page followed by cursors to the end, offsets, every player's
//! score and ranks (friends reads in both policies), players' own reads with
//! percentiles, around at the edges and in ties, rank-of and totals. Reads
//! made during the drain say whether every shard stood still.

use std::time::Duration;

use serde_json::{json, Value};
use support::stream;
use support::*;

const PARTITIONS: i32 = 4;

const BOARDS: &str = r#"
[[board]]
id = "points"
on = ["match_finished", "bonus"]
mode = "sum"
periods = ["all_time"]
dense_rank = false
meta = true

[[board]]
id = "points-sharded"
on = ["match_finished", "bonus"]
mode = "sum"
periods = ["all_time"]
meta = true
shards = 8

[[board]]
id = "best"
on = ["match_finished"]
mode = "best"
tie_break = "earliest"
periods = ["all_time"]
dense_rank = false

[[board]]
id = "best-sharded"
on = ["match_finished"]
mode = "best"
tie_break = "earliest"
periods = ["all_time"]
shards = 8
"#;

async fn get(w: &Worker, path: &str) -> Value {
    let (status, body) = w.get_json(path).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Both boards' answers to `path` (with `{b}` for the board), compared.
async fn same(w: &Worker, reference: &str, sharded: &str, path: &str) -> Value {
    let r = get(w, &path.replace("{b}", reference)).await;
    let s = get(w, &path.replace("{b}", sharded)).await;
    assert_eq!(s["consistent"], true, "{path} on {sharded} after the drain: {s}");
    assert_eq!(plain(r.clone()), plain(s), "{path}");
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn sharded_boards_answer_every_read_as_the_unsharded_board_does() {
    let cluster = RedisCluster::start(3);
    let broker = Broker::start();
    let (topic, dlq) = broker.topics(PARTITIONS).await;
    let s = stream::generate(200_000, 81);
    broker.produce(&topic, &s.records).await;
    let cfg = WorkerConfig::on_cluster(&broker, &cluster, &topic, &dlq, BOARDS);
    let w = Worker::spawn(&cfg);
    wait_http(w.http_port, Duration::from_secs(30)).await;

    // During the drain: every sharded read says whether the shards stood still.
    let (mut flagged, mut unsettled) = (0, 0);
    let end: i64 = broker.log_end(&topic, PARTITIONS).iter().sum();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while broker.committed(&cfg.group, &topic, PARTITIONS).iter().filter(|o| **o > 0).sum::<i64>() < end {
        assert!(std::time::Instant::now() < deadline, "the worker did not drain\n{}", w.log());
        let (status, page) = w.get_json("/v1/boards/points-sharded/top?limit=50").await;
        if status == 200 {
            let consistent = page["consistent"].as_bool().expect("every sharded read says whether it is consistent");
            flagged += 1;
            unsettled += usize::from(!consistent);
            // Whatever the flag, a page is in board order with ranks rising.
            let ranks: Vec<i64> =
                page["entries"].as_array().unwrap().iter().map(|e| e["rank"].as_i64().unwrap()).collect();
            assert!(ranks.windows(2).all(|p| p[0] < p[1]), "{page}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("{flagged} reads during the drain, {unsettled} flagged not consistent");
    assert!(flagged > 0, "no read was made during the drain");

    for (reference, sharded) in [("points", "points-sharded"), ("best", "best-sharded")] {
        // Every top page, by cursor, to the end.
        let (mut players, mut pages) = (Vec::new(), 0);
        let (mut rc, mut sc) = (None::<String>, None::<String>);
        let page_of = |board: &str, cursor: &Option<String>| match cursor {
            None => format!("/v1/boards/{board}/top?limit=100"),
            Some(c) => format!("/v1/boards/{board}/top?limit=100&cursor={c}"),
        };
        loop {
            let r = get(&w, &page_of(reference, &rc)).await;
            let sh = get(&w, &page_of(sharded, &sc)).await;
            assert_eq!(sh["consistent"], true);
            assert_eq!(r["entries"], sh["entries"], "{reference} page {pages}");
            assert_eq!(r["total"], sh["total"]);
            assert_eq!(r["next_cursor"].is_null(), sh["next_cursor"].is_null());
            players
                .extend(r["entries"].as_array().unwrap().iter().map(|e| e["player_id"].as_str().unwrap().to_string()));
            pages += 1;
            match (r["next_cursor"].as_str(), sh["next_cursor"].as_str()) {
                (Some(a), Some(b)) => (rc, sc) = (Some(a.to_string()), Some(b.to_string())),
                _ => break,
            }
        }
        assert!(players.len() >= 200, "{reference}: only {} players", players.len());
        // The total counts every player the pages listed; pages by offset, too.
        let last_r = get(&w, &format!("/v1/boards/{reference}/top?limit=100&offset=0")).await;
        assert!(last_r["total"].as_i64().unwrap() as usize == players.len());
        let path = "/v1/boards/{b}/top?limit=37&offset=OFF&rank=competition";
        for off in [0, 1, 36, 500, 1000] {
            same(&w, reference, sharded, &path.replace("OFF", &off.to_string())).await;
        }
        // Every player, in both rank policies, through friends reads.
        for chunk in players.chunks(500) {
            for rank in ["ordinal", "competition"] {
                let body = json!({ "players": chunk }).to_string();
                let (st, r) = w.post_json(&format!("/v1/boards/{reference}/players?rank={rank}"), &body).await;
                let (ss, sh) = w.post_json(&format!("/v1/boards/{sharded}/players?rank={rank}"), &body).await;
                assert_eq!((st, ss), (200, 200), "{r} {sh}");
                assert_eq!(plain(r), plain(sh), "friends of {reference} ({rank})");
            }
        }
        // Players' own reads (percentiles), around (edges and ties), rank-of.
        let n = players.len();
        let sample: Vec<&String> =
            players.iter().enumerate().filter(|(i, _)| *i < 5 || *i >= n - 5 || i % 97 == 0).map(|(_, p)| p).collect();
        for p in &sample {
            let me = same(&w, reference, sharded, &format!("/v1/boards/{{b}}/players/{p}")).await;
            for q in ["radius=3", "radius=3&fill=true", "radius=1&rank=competition"] {
                same(&w, reference, sharded, &format!("/v1/boards/{{b}}/players/{p}/around?{q}")).await;
            }
            let score = me["score"].as_i64().unwrap();
            for v in [score - 1, score, score + 1] {
                same(&w, reference, sharded, &format!("/v1/boards/{{b}}/rank-of?score={v}")).await;
            }
        }
        // Refused where exactness cannot be kept.
        let (status, body) = w.get_json(&format!("/v1/boards/{sharded}/top?offset=1001")).await;
        assert_eq!(status, 400, "{body}");
        assert!(body.to_string().contains("offset"), "{body}");
        let (status, body) = w.get_json(&format!("/v1/boards/{sharded}/top?rank=dense")).await;
        assert_eq!(status, 400, "{body}");
        // A player's history is read from their shard (nothing is sealed here).
        let (status, body) = w.get_json(&format!("/v1/boards/{sharded}/players/p1/history")).await;
        assert_eq!(
            (status, body["periods"].clone(), body["best_rank"].clone()),
            (200, json!([]), json!(null)),
            "{body}"
        );
    }
    // The shards spread over the primaries.
    let (keys, holding) = cluster.board_keys(stream::PREFIX).await;
    assert!(keys.keys().filter(|k| k.contains("points-sharded#")).count() == 8);
    assert!(holding >= 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sharded_board_survives_five_sigkills_exactly() {
    let Stack { redis, broker, topic, dlq } = Stack::start_with(Redis::start(), PARTITIONS).await;
    let s = stream::generate(60_000, 83);
    broker.produce(&topic, &s.records).await;
    // The stream's `points` board, sharded four ways.
    let boards = stream::BOARDS.replacen(
        "periods = [\"daily\", \"weekly\", \"all_time\"]",
        "periods = [\"daily\", \"weekly\", \"all_time\"]\nshards = 4",
        1,
    );
    assert!(boards.contains("shards = 4"));
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &boards);
    cfg.worker_section = "batch_size = 300\nmax_backoff = \"1s\"\n".into();
    let mut conn = redis.conn().await;
    five_sigkills(&cfg, &mut conn, &[(&topic, PARTITIONS)], s.records.len() as i64, 85).await;
    let _w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(300));
    // The shards, put back together, are exactly the model's board.
    let shard_keys = board_keys(&mut conn, stream::PREFIX).await.keys().filter(|k| k.contains('#')).count();
    assert!(shard_keys >= 4, "the points board was not sharded");
    s.assert_boards(&mut conn).await;
}

/// One shard holds the best 60 players: a top page must read that shard
/// beyond its first share (the read asks each shard for about twice its
/// share of the page first, then reads again the shards it cut short).
#[tokio::test(flavor = "multi_thread")]
async fn a_page_whose_top_is_all_in_one_shard_is_complete() {
    let Stack { redis, broker, topic, dlq } = Stack::start_with(Redis::start(), 1).await;
    let boards =
        "[[board]]\nid = \"ref\"\non = [\"bonus\"]\nmode = \"best\"\nperiods = [\"all_time\"]\ndense_rank = false\n\
                  [[board]]\nid = \"sh\"\non = [\"bonus\"]\nmode = \"best\"\nperiods = [\"all_time\"]\nshards = 8\n";
    let ts = chrono::Utc::now().timestamp_millis();
    let (mut records, mut strong) = (Vec::new(), 0);
    for i in 0..800 {
        let player = format!("p{i}");
        let in_zero = rankflow::board::shard_of(&player, 8) == 0;
        if in_zero && strong == 60 {
            continue;
        }
        let score = if in_zero {
            strong += 1;
            10_000 + i
        } else {
            i
        };
        let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "bonus", "player_id": player, "score": score, "ts": ts});
        records.push((player, v.to_string().into_bytes(), Some(ts)));
    }
    assert_eq!(strong, 60);
    broker.produce(&topic, &records).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, boards);
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    for q in ["limit=100", "limit=100&offset=3", "limit=10&offset=55", "limit=50&offset=20&rank=competition"] {
        let page = same(&w, "ref", "sh", &format!("/v1/boards/{{b}}/top?{q}")).await;
        assert!(!page["entries"].as_array().unwrap().is_empty(), "{q}: {page}");
    }
    let top = get(&w, "/v1/boards/sh/top?limit=60").await;
    assert!(top["entries"].as_array().unwrap().iter().all(|e| e["score"].as_i64().unwrap() >= 10_000), "{top}");
}

/// Moderation on a sharded board acts on the player's shard: a correction
/// sets their score, hiding takes them off others' reads, and an erasure
/// removes them from every shard's keys.
#[tokio::test(flavor = "multi_thread")]
async fn corrections_hiding_and_erasure_reach_the_players_shard() {
    let stack = Stack::start_with(Redis::start(), 1).await;
    let admin_topic = stack.admin_topic().await;
    let boards = "[[board]]\nid = \"sh\"\non = [\"bonus\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\nshards = 4\n";
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, boards);
    cfg.admin_topics = vec![admin_topic.clone()];
    let w = Worker::spawn(&cfg);
    let ts = chrono::Utc::now().timestamp_millis();
    let records: Vec<_> = (0..40)
        .map(|i| {
            let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "bonus", "player_id": format!("p{i}"), "score": 100 + i, "ts": ts});
            (format!("p{i}"), v.to_string().into_bytes(), Some(ts))
        })
        .collect();
    stack.broker.produce(&stack.topic, &records).await;
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    let event = |kind: &str, player: &str, extra: Value| {
        let mut v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": player, "ts": chrono::Utc::now().timestamp_millis()});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        admin_record(v)
    };
    let admin = [
        event("score_set", "p3", json!({"board": "sh", "score": 1000})),
        event("player_hidden", "p5", json!({})),
        event("player_erased", "p7", json!({})),
    ];
    stack.broker.produce(&admin_topic, &admin).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin_topic, 1, Duration::from_secs(60));

    let top = get(&w, "/v1/boards/sh/top?limit=100").await;
    let ids: Vec<&str> = top["entries"].as_array().unwrap().iter().map(|e| e["player_id"].as_str().unwrap()).collect();
    assert_eq!(ids[0], "p3", "{top}");
    assert_eq!(top["entries"][0]["score"], 1000);
    assert!(!ids.contains(&"p5") && !ids.contains(&"p7"), "{top}");
    assert_eq!(top["total"], 38);
    let me = get(&w, "/v1/boards/sh/players/p5").await;
    assert_eq!(me["hidden"], true, "{me}");
    let (status, _) = w.get_json("/v1/boards/sh/players/p7").await;
    assert_eq!(status, 404);
    let mut conn = stack.redis.conn().await;
    for (key, members) in board_keys(&mut conn, stream::PREFIX).await {
        assert!(!members.contains_key("p7"), "p7 is still in {key}");
    }
}

/// Top-K on a sharded `best` board: each shard keeps its best K, and reads
/// show the board's best K exactly as the unsharded board keeps them.
#[tokio::test(flavor = "multi_thread")]
async fn a_sharded_top_k_board_reads_as_the_unsharded_one() {
    use rand::{Rng, SeedableRng};
    let Stack { redis, broker, topic, dlq } = Stack::start_with(Redis::start(), 2).await;
    let board = |id: &str, extra: &str| {
        format!("[[board]]\nid = \"{id}\"\non = [\"bonus\"]\nmode = \"best\"\nperiods = [\"all_time\"]\nmax_members = 25\ndense_rank = false\n{extra}")
    };
    let boards = board("ref", "") + &board("sh", "shards = 4").replace("dense_rank = false\n", "");
    let ts = chrono::Utc::now().timestamp_millis();
    let mut rng = rand::rngs::StdRng::seed_from_u64(87);
    let records: Vec<_> = (0..3_000)
        .map(|_| {
            let player = format!("p{}", rng.random_range(0..200));
            let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "bonus", "player_id": player, "score": rng.random_range(0..5_000), "ts": ts});
            (player, v.to_string().into_bytes(), Some(ts))
        })
        .collect();
    broker.produce(&topic, &records).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &boards);
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 2, Duration::from_secs(60));
    for q in ["limit=10", "limit=100", "limit=10&offset=20", "limit=10&offset=30&rank=competition"] {
        same(&w, "ref", "sh", &format!("/v1/boards/{{b}}/top?{q}")).await;
    }
    let top = same(&w, "ref", "sh", "/v1/boards/{b}/top?limit=100").await;
    assert_eq!(top["total"], 25);
    let kept: Vec<String> =
        top["entries"].as_array().unwrap().iter().map(|e| e["player_id"].as_str().unwrap().to_string()).collect();
    for i in 0..200 {
        let p = format!("p{i}");
        let (a, ra) = w.get_json(&format!("/v1/boards/ref/players/{p}")).await;
        let (b, rb) = w.get_json(&format!("/v1/boards/sh/players/{p}")).await;
        assert_eq!(a, b, "{p}: {ra} {rb}");
        if a == 200 {
            assert_eq!(plain(ra), plain(rb), "{p}");
        }
        assert_eq!(a == 200, kept.contains(&p), "{p}");
        if a == 200 {
            same(&w, "ref", "sh", &format!("/v1/boards/{{b}}/players/{p}/around?radius=3&fill=true")).await;
        }
    }
    let all: Vec<String> = (0..200).map(|i| format!("p{i}")).collect();
    let body = json!({ "players": all }).to_string();
    let (_, r) = w.post_json("/v1/boards/ref/players", &body).await;
    let (_, sh) = w.post_json("/v1/boards/sh/players", &body).await;
    assert_eq!(plain(r), plain(sh));
    for v in [0, 2_500, 4_990, 5_000] {
        same(&w, "ref", "sh", &format!("/v1/boards/{{b}}/rank-of?score={v}")).await;
    }
}
