//! Sharded boards ranked by several columns on a 3-primary Redis Cluster,
//! through the real worker and Apache Kafka with a kill -9 mid-stream: a
//! wins-then-time board (two past days that seal, and today) and a top-K
//! board of best runs (fewest deaths, then the fastest time, earliest
//! first), each fed the same stream as an unsharded board with the same
//! rules. The unsharded boards equal the row model, and every read of the
//! sharded ones equals theirs: pages by cursor both ways and by offset,
//! every player's read (with display names and a hidden player), around at
//! the edges, friends in both policies, rank-of, each sealed day's
//! snapshot, its published top and every player's history.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use rdkafka::message::Message;

use rankflow::board::columns::Row;
use serde_json::{json, Value};
use support::columns::{arena, speedrun};
use support::league::wait_for;
use support::periods::{quick_sealing, wait_records, Lcg, DAY};
use support::*;

const PARTITIONS: i32 = 4;

/// A wins-then-time board (two past days seal) and a top-K board of best runs.
const ARENA: &str = r#"on = ["match"]
columns = [{ name = "wins", mode = "sum" }, { name = "time_ms", mode = "min", order = "asc" }]
periods = ["all_time", "daily"]
close_after = "1m"
dense_rank = false
meta = true
"#;
const SPEEDRUN: &str = r#"on = ["run"]
row = "best"
columns = [{ name = "deaths", order = "asc" }, { name = "time_ms", order = "asc" }]
tie_break = "earliest"
periods = ["all_time"]
max_members = 60
meta = true
"#;

/// Each board, and its twin `<id>-sharded` with 8 shards.
fn boards() -> String {
    [("arena", ARENA), ("speedrun", SPEEDRUN)]
        .iter()
        .map(|(id, body)| {
            format!("[[board]]\nid = \"{id}\"\n{body}\n[[board]]\nid = \"{id}-sharded\"\n{body}shards = 8\n\n")
        })
        .collect()
}

fn day_id(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().format("d:%Y-%m-%d").to_string()
}

/// Per (board, period): each player's row and its meta (that of the event
/// that last changed the row; null when it carried none).
type Model = BTreeMap<(&'static str, String), BTreeMap<String, (Row, Value)>>;

/// 6,000 matches and runs of 300 players over two past days and today,
/// values from few choices so rows tie; one in eight without a display
/// name; 3% produced twice (a producer's retry).
fn stream(now: i64) -> (Model, Vec<Record>) {
    let mut rng = Lcg(43);
    let today = now - now.rem_euclid(DAY);
    let start = today - 2 * DAY;
    let step = (now - 600_000 - start) / 6_000;
    let (mut model, mut records) = (Model::new(), Vec::new());
    for i in 0..6_000 {
        let ts = start + step * i;
        let player = format!("p{:03}", rng.next(300));
        let (board, kind, values, c) = if rng.next(2) == 0 {
            ("arena", "match", vec![rng.next(2) as i64, 50_000 + 1000 * rng.next(8) as i64], arena())
        } else {
            ("speedrun", "run", vec![rng.next(4) as i64, 40_000 + 500 * rng.next(12) as i64], speedrun())
        };
        let name = (rng.next(8) != 0).then(|| json!({ "name": format!("{player} #{i}") }));
        let periods = if board == "arena" { vec!["all".to_string(), day_id(ts)] } else { vec!["all".to_string()] };
        for p in periods {
            let rows = model.entry((board, p)).or_default();
            let old = rows.get(&player).cloned();
            let mut row = old.as_ref().map(|(r, _)| r.clone());
            c.combine(&mut row, &values, ts);
            let row = row.expect("a row");
            let meta = match old {
                Some((was, kept)) if was.values == row.values => kept,
                _ => name.clone().unwrap_or(Value::Null),
            };
            rows.insert(player.clone(), (row, meta));
        }
        let scores: serde_json::Map<String, Value> =
            c.names().zip(&values).map(|(n, v)| (n.into(), json!(v))).collect();
        let mut v = json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": player,
                            "ts": ts, "scores": scores });
        if let Some(n) = name {
            v["meta"] = n;
        }
        let record = (player, v.to_string().into_bytes(), Some(ts));
        if rng.next(100) < 3 {
            records.push(record.clone());
        }
        records.push(record);
    }
    (model, records)
}

/// A period's standings in board order (player, values, meta), the first
/// `keep` (a top-K board's K).
fn standings(m: &Model, board: &'static str, period: &str, keep: usize) -> Vec<(String, Vec<i64>, Value)> {
    let (c, earliest) = if board == "arena" { (arena(), false) } else { (speedrun(), true) };
    let mut rows: Vec<(&String, &(Row, Value))> =
        m.get(&(board, period.to_string())).map(|r| r.iter().collect()).unwrap_or_default();
    rows.sort_by(|(pa, (a, _)), (pb, (b, _))| {
        c.better(&a.values, &b.values)
            .then_with(|| if earliest { a.reached.cmp(&b.reached) } else { std::cmp::Ordering::Equal })
            .then_with(|| pa.as_bytes().cmp(pb.as_bytes()))
    });
    rows.truncate(keep);
    rows.into_iter().map(|(p, (r, meta))| (p.clone(), r.values.clone(), meta.clone())).collect()
}

async fn get(w: &Worker, path: &str) -> Value {
    let (status, body) = w.get_json(path).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Both boards' answers to `path` (`{b}`: the board), the sharded one's consistent, compared.
async fn same(w: &Worker, reference: &str, path: &str) -> Value {
    let r = get(w, &path.replace("{b}", reference)).await;
    let s = get(w, &path.replace("{b}", &format!("{reference}-sharded"))).await;
    assert_eq!(s["consistent"], true, "{path} on the sharded board: {s}");
    assert_eq!(plain(r.clone()), plain(s), "{path}");
    r
}

/// Pages of `limit` by cursor from `first` to the end on both boards (the
/// entries compared page by page), then back by `prev_cursor`; the players listed.
async fn paged(w: &Worker, reference: &str, period: &str, limit: usize) -> Vec<String> {
    let sharded = format!("{reference}-sharded");
    let first = |b: &str| format!("/v1/boards/{b}/top?period={period}&limit={limit}");
    let (mut rp, mut sp) = (first(reference), first(&sharded));
    let (mut players, mut last) = (Vec::new(), (Value::Null, Value::Null));
    loop {
        let (r, s) = (get(w, &rp).await, get(w, &sp).await);
        assert_eq!(s["consistent"], true, "{sp}: {s}");
        assert_eq!((&r["entries"], &r["total"]), (&s["entries"], &s["total"]), "{reference} {period} from {rp}");
        players.extend(r["entries"].as_array().unwrap().iter().map(|e| e["player_id"].as_str().unwrap().to_string()));
        match (r["next_cursor"].as_str(), s["next_cursor"].as_str()) {
            (Some(a), Some(b)) => {
                (rp, sp) = (format!("/v1/boards/{reference}/top?cursor={a}&limit={limit}"), {
                    format!("/v1/boards/{sharded}/top?cursor={b}&limit={limit}")
                })
            }
            (None, None) => break,
            other => panic!("{reference} {period}: one board ends, the other not: {other:?}"),
        }
        last = (r, s);
    }
    // Back from the last full page.
    let (mut r, mut s) = last;
    while let (Some(a), Some(b)) = (r["prev_cursor"].as_str(), s["prev_cursor"].as_str()) {
        let (ra, sa) = (format!("/v1/boards/{reference}/top?cursor={a}&limit={limit}"), {
            format!("/v1/boards/{sharded}/top?cursor={b}&limit={limit}")
        });
        (r, s) = (get(w, &ra).await, get(w, &sa).await);
        assert_eq!(s["consistent"], true, "{sa}: {s}");
        assert_eq!(r["entries"], s["entries"], "{reference} {period} back from {ra}");
    }
    assert!(r["prev_cursor"].is_null() && s["prev_cursor"].is_null(), "both pages back to the first");
    players
}

/// Every read of the sharded board of `reference` in `period` equals the
/// unsharded board's; `want`: the model's standings, which the unsharded
/// board's pages equal.
async fn assert_same(w: &Worker, reference: &'static str, period: &str, want: &[(String, Vec<i64>, Value)]) {
    let players = paged(w, reference, period, 23).await;
    let listed: Vec<&String> = want.iter().map(|(p, _, _)| p).collect();
    assert_eq!(players.iter().collect::<Vec<_>>(), listed, "{reference} {period}: the model's order");
    let top = get(w, &format!("/v1/boards/{reference}/top?period={period}&limit=100")).await;
    for (e, (_, values, meta)) in top["entries"].as_array().unwrap().iter().zip(want) {
        let c = if reference == "arena" { arena() } else { speedrun() };
        let got: Vec<i64> = c.names().map(|n| e["scores"][n].as_i64().unwrap()).collect();
        assert_eq!((&got, &e["meta"]), (values, meta), "{reference} {period}: {e}");
    }
    for off in [0, 1, 22, 59, 150] {
        same(w, reference, &format!("/v1/boards/{{b}}/top?period={period}&limit=37&offset={off}&rank=competition"))
            .await;
    }
    // Every player, in both policies, through friends reads (and a nobody).
    let mut asked = players.clone();
    asked.push("nobody".into());
    for rank in ["ordinal", "competition"] {
        let body = json!({ "players": asked }).to_string();
        let path = |b: &str| format!("/v1/boards/{b}/players?period={period}&rank={rank}");
        let (st, r) = w.post_json(&path(reference), &body).await;
        let (ss, s) = w.post_json(&path(&format!("{reference}-sharded")), &body).await;
        assert_eq!((st, ss, &s["consistent"]), (200, 200, &json!(true)), "{r} {s}");
        assert_eq!(plain(r), plain(s), "friends of {reference} {period} ({rank})");
    }
    let n = players.len();
    for (i, p) in players.iter().enumerate() {
        let me = same(w, reference, &format!("/v1/boards/{{b}}/players/{p}?period={period}")).await;
        if i >= 3 && i + 3 < n && i % 9 != 0 {
            continue;
        }
        for q in ["radius=3", "radius=3&fill=true", "radius=1&rank=competition"] {
            same(w, reference, &format!("/v1/boards/{{b}}/players/{p}/around?period={period}&{q}")).await;
        }
        let scores = me["scores"].as_object().unwrap();
        for d in [-1, 0, 1] {
            let q: Vec<String> =
                scores.iter().map(|(k, v)| format!("scores.{k}={}", v.as_i64().unwrap() + d)).collect();
            same(w, reference, &format!("/v1/boards/{{b}}/rank-of?period={period}&{}", q.join("&"))).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sharded_boards_with_columns_answer_every_read_as_the_unsharded_board_through_a_kill() {
    let cluster = RedisCluster::start(3);
    let broker = Broker::start();
    let (topic, dlq) = broker.topics(PARTITIONS).await;
    let (admin, sealed) = (broker.admin_topic().await, broker.sealed_topic().await);
    let now = chrono::Utc::now().timestamp_millis();
    let (model, records) = stream(now);
    let boards = quick_sealing(&sealed, "top = 20\n") + &boards();
    let mut cfg = WorkerConfig::on_cluster(&broker, &cluster, &topic, &dlq, &boards);
    cfg.admin_topics = vec![admin.clone()];

    // A kill -9 once the worker applies, then the rest of the stream.
    let half = records.len() / 2;
    broker.produce(&topic, &records[..half]).await;
    let mut w = Worker::spawn(&cfg);
    wait_http(cfg.http_port, Duration::from_secs(30)).await;
    wait_for(Duration::from_secs(60), &|| w.log(), || async {
        get(&w, "/v1/boards/arena-sharded/top?limit=1&fresh=true").await["total"].as_i64() > Some(0)
    })
    .await;
    w.sigkill();
    broker.produce(&topic, &records[half..]).await;
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(180));
    wait_http(cfg.http_port, Duration::from_secs(30)).await;

    // The two past days seal on both arena boards; their histories follow.
    let days: Vec<String> = [now - 2 * DAY, now - DAY].iter().map(|t| day_id(*t)).collect();
    wait_records(&broker, &sealed, 4, Duration::from_secs(120), &|| w.log());
    let last = standings(&model, "arena", &days[1], usize::MAX).pop().unwrap().0;
    for board in ["arena", "arena-sharded"] {
        wait_for(Duration::from_secs(60), &|| w.log(), || async {
            let h = get(&w, &format!("/v1/boards/{board}/players/{last}/history")).await;
            h["periods"].as_array().is_some_and(|p| p.iter().any(|p| p["period"] == days[1].as_str()))
        })
        .await;
    }

    let today = day_id(now);
    assert_same(&w, "arena", "all_time", &standings(&model, "arena", "all", usize::MAX)).await;
    assert_same(&w, "arena", &today, &standings(&model, "arena", &today, usize::MAX)).await;
    assert_same(&w, "speedrun", "all_time", &standings(&model, "speedrun", "all", 60)).await;
    for day in &days {
        let want = standings(&model, "arena", day, usize::MAX);
        assert_same(&w, "arena", &format!("{day}:final"), &want).await;
        // Published once per board, the same top.
        let published: Vec<Value> = broker
            .read_all(&sealed, 1)
            .iter()
            .map(|m| serde_json::from_slice(m.payload().unwrap()).unwrap())
            .filter(|p: &Value| p["period"] == day.as_str())
            .collect();
        assert_eq!(published.len(), 2, "{published:?}");
        assert_eq!(
            (&published[0]["entries"], &published[0]["total"]),
            (&published[1]["entries"], &published[1]["total"])
        );
        let ids: Vec<&str> =
            published[0]["entries"].as_array().unwrap().iter().map(|e| e["player_id"].as_str().unwrap()).collect();
        let want_ids: Vec<&str> = want.iter().take(20).map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(ids, want_ids, "{day}'s published top");
        // Every player's history of the day, the same on both boards.
        for (player, _, _) in &want {
            let r = get(&w, &format!("/v1/boards/arena/players/{player}/history")).await;
            let s = get(&w, &format!("/v1/boards/arena-sharded/players/{player}/history")).await;
            assert!(r["periods"].as_array().unwrap().iter().any(|p| p["period"] == day.as_str()), "{r}");
            assert_eq!(plain(r), plain(s), "{player}'s history");
        }
    }

    // A hidden player: their own read says so and ranks them where they
    // would stand; others' reads leave them out, on both boards alike.
    let hidden = standings(&model, "arena", "all", usize::MAX)[10].0.clone();
    let ev = json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": "player_hidden", "player_id": hidden,
                     "ts": chrono::Utc::now().timestamp_millis() });
    broker.produce(&admin, &[admin_record(ev)]).await;
    broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(60));
    let own = same(&w, "arena", &format!("/v1/boards/{{b}}/players/{hidden}")).await;
    assert_eq!((&own["hidden"], &own["rank"]["ordinal"]), (&json!(true), &json!(11)), "{own}");
    let shown: Vec<_> =
        standings(&model, "arena", "all", usize::MAX).into_iter().filter(|(p, _, _)| *p != hidden).collect();
    let players = paged(&w, "arena", "all_time", 50).await;
    assert_eq!(players, shown.iter().map(|(p, _, _)| p.clone()).collect::<Vec<_>>());

    // Refused where exactness cannot be kept.
    for (path, parameter) in
        [("/v1/boards/arena-sharded/top?offset=1001", "offset"), ("/v1/boards/arena-sharded/top?rank=dense", "rank")]
    {
        let (status, body) = w.get_json(path).await;
        assert_eq!((status, body["parameter"].as_str()), (400, Some(parameter)), "{path}: {body}");
    }
    // The shards spread over the primaries.
    let masters: HashSet<usize> =
        (0..8).map(|k| cluster.master_of(&format!("lb:{{arena-sharded#{k}}}:_offsets"))).collect();
    assert!(masters.len() >= 2, "{masters:?}");
}
