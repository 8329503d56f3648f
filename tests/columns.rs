//! Boards ranked by several columns through the real worker, Apache Kafka and
//! Redis, against the model in `board::columns`: a stream over 4
//! partitions with producer retries and a kill -9 mid-way, on a board whose
//! columns aggregate each on its own (wins, then the fastest time) and one
//! of best runs (fewest deaths, then the fastest time of that run, earliest
//! first); records missing a column dead-lettered naming it (unless another
//! board takes them); the reads (top, player, around, cursors, fill,
//! friends, rank-of) equal the model's in every period, each entry with the
//! display name (`meta`) of the event that last changed its row, and so do
//! they after a hide, an unhide, an erasure, a `score_set` of whole rows and
//! a rebuild.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::message::Message;

use rankflow::board::columns::{Columns, Row};
use serde_json::{json, Value};
use support::columns::{arena, speedrun};
use support::periods::Lcg;
use support::*;

const PARTITIONS: i32 = 4;
const DAY: i64 = 86_400_000;

const BOARDS: &str = r#"
[[board]]
id = "arena"
on = ["match"]
columns = [{ name = "wins", mode = "sum" }, { name = "time_ms", mode = "min", order = "asc" }]
periods = ["all_time", "daily"]
meta = true

[[board]]
id = "speedrun"
on = ["run"]
row = "best"
columns = [{ name = "deaths", order = "asc" }, { name = "time_ms", order = "asc" }]
tie_break = "earliest"
periods = ["all_time"]
dense_rank = true
meta = true

[[board]]
id = "pts"
on = ["match"]
mode = "sum"
periods = ["all_time"]
"#;

/// One produced record.
#[derive(Clone)]
struct Ev {
    id: String,
    kind: &'static str,
    player: String,
    /// The values in column order; `None` where the record lacks the column.
    values: Vec<Option<i64>>,
    ts: i64,
    /// A match's record carries `score` too (pts reads it).
    with_score: bool,
    /// The display name the record carries as `meta`, if any.
    name: Option<String>,
}

/// A player's entry as a read answers it: player, values, meta (null: none).
type Standing = (String, Vec<i64>, Value);

/// The model: per board and period, each player's row and its meta: that
/// of the event that last changed the row (null when it carried none).
#[derive(Default)]
struct Model {
    boards: BTreeMap<(&'static str, String), Rows>,
}

/// A period's rows: player -> (row, meta).
type Rows = BTreeMap<String, (Row, Value)>;

impl Model {
    fn apply(&mut self, board: &'static str, c: &Columns, e: &Ev, periods: &[String]) {
        let Some(values) = e.values.iter().copied().collect::<Option<Vec<i64>>>() else { return };
        let meta = e.name.as_ref().map_or(Value::Null, |n| json!({ "name": n }));
        for p in periods {
            let rows = self.boards.entry((board, p.clone())).or_default();
            let old = rows.get(&e.player).cloned();
            let mut row = old.as_ref().map(|(r, _)| r.clone());
            c.combine(&mut row, &values, e.ts);
            let row = row.expect("a row");
            let meta = match old {
                Some((was, kept)) if was.values == row.values => kept,
                _ => meta.clone(),
            };
            rows.insert(e.player.clone(), (row, meta));
        }
    }

    /// A period's standings in board order.
    fn standings(&self, board: &'static str, c: &Columns, earliest: bool, period: &str) -> Vec<Standing> {
        let mut rows: Vec<(&String, &(Row, Value))> =
            self.boards.get(&(board, period.to_string())).map(|r| r.iter().collect()).unwrap_or_default();
        rows.sort_by(|(pa, (a, _)), (pb, (b, _))| {
            c.better(&a.values, &b.values)
                .then_with(|| if earliest { a.reached.cmp(&b.reached) } else { std::cmp::Ordering::Equal })
                .then_with(|| pa.as_bytes().cmp(pb.as_bytes()))
        });
        rows.into_iter().map(|(p, (r, meta))| (p.clone(), r.values.clone(), meta.clone())).collect()
    }

    /// A `score_set`: the row replaces the player's in each period (their
    /// meta stays: a correction carries none).
    fn set(&mut self, board: &'static str, periods: &[String], player: &str, values: Vec<i64>, ts: i64) {
        for p in periods {
            let row = Row { values: values.clone(), reached: ts, newest: ts };
            let rows = self.boards.entry((board, p.clone())).or_default();
            let meta = rows.get(player).map_or(Value::Null, |(_, m)| m.clone());
            rows.insert(player.to_string(), (row, meta));
        }
    }

    fn erase(&mut self, player: &str) {
        for rows in self.boards.values_mut() {
            rows.remove(player);
        }
    }
}

/// 2,000 events of 30 players over two days: matches (a win or not, a time
/// from few values, so rows tie), runs (deaths and a time, some at the
/// range's ends); 2% lack a column, 3% are produced again later.
fn stream(n: usize) -> (Vec<Ev>, Vec<Record>) {
    let mut rng = Lcg(17);
    let start = chrono::Utc::now().timestamp_millis() - 2 * DAY + 3_600_000;
    let mut events = Vec::new();
    for i in 0..n {
        let player = format!("p{:02}", rng.next(30));
        let ts = start + i as i64 * 60_000;
        let kind = if rng.next(2) == 0 { "match" } else { "run" };
        let mut values = match kind {
            "match" => vec![Some(rng.next(2) as i64), Some(50_000 + 1000 * rng.next(5) as i64)],
            _ => match rng.next(25) {
                0 => vec![Some(0), Some((1 << 53) - 1)],
                1 => vec![Some(-((1 << 53) - 1)), Some(1)],
                _ => vec![Some(rng.next(4) as i64), Some(40_000 + 500 * rng.next(6) as i64)],
            },
        };
        if rng.next(50) == 0 {
            values[1] = None;
        }
        let with_score = rng.next(10) != 0;
        // One record in eight carries no display name (its row's meta is cleared when it changes the row).
        let name = (rng.next(8) != 0).then(|| format!("{player} #{i}"));
        events.push(Ev { id: uuid::Uuid::new_v4().to_string(), kind, player, values, ts, with_score, name });
    }
    let mut produced = Vec::new();
    for e in &events {
        produced.push(e.clone());
        if rng.next(100) < 3 {
            produced.push(e.clone());
        }
    }
    let records = produced.iter().map(record).collect();
    (produced, records)
}

fn record(e: &Ev) -> Record {
    let names: &[&str] = if e.kind == "match" { &["wins", "time_ms"] } else { &["deaths", "time_ms"] };
    let scores: serde_json::Map<String, Value> =
        names.iter().zip(&e.values).filter_map(|(n, v)| v.map(|v| (n.to_string(), json!(v)))).collect();
    let mut v = json!({ "event_id": e.id, "type": e.kind, "player_id": e.player, "ts": e.ts, "scores": scores });
    // pts reads score: a match without one is refused there only, and one
    // lacking a column is refused by arena only.
    if e.kind == "match" && e.with_score {
        v["score"] = json!(e.values[0]);
    }
    if let Some(n) = &e.name {
        v["meta"] = json!({ "name": n });
    }
    (e.player.clone(), v.to_string().into_bytes(), Some(e.ts))
}

/// The model after `events` (each id applied once).
fn model(events: &[Ev]) -> Model {
    let mut m = Model::default();
    let mut seen = std::collections::HashSet::new();
    for e in events {
        if !seen.insert(e.id.clone()) {
            continue;
        }
        match e.kind {
            "match" => {
                let day = chrono::DateTime::from_timestamp_millis(e.ts).unwrap().format("d:%Y-%m-%d").to_string();
                m.apply("arena", &arena(), e, &["all".into(), day]);
            }
            _ => m.apply("speedrun", &speedrun(), e, &["all".into()]),
        }
    }
    m
}

/// Every entry of a period, through GET top.
async fn top(w: &Worker, board: &str, c: &Columns, period: &str) -> Vec<Standing> {
    let (status, body) = w.get_json(&format!("/v1/boards/{board}/top?period={period}&limit=100&fresh=true")).await;
    assert_eq!(status, 200, "{body}");
    entries_of(&body, c)
}

/// The reads of every period agree with the model: the whole top, and each
/// player's standing and window.
async fn assert_reads(w: &Worker, m: &Model, when: &str) {
    for (board, period) in m.boards.keys() {
        let (c, earliest) = if *board == "arena" { (arena(), false) } else { (speedrun(), true) };
        let want = m.standings(board, &c, earliest, period);
        let id = if period == "all" { "all_time".to_string() } else { period.clone() };
        assert_eq!(top(w, board, &c, &id).await, want, "{when}: {board} {period}");
        for (i, (player, values, meta)) in want.iter().enumerate().step_by(7) {
            let (status, body) =
                w.get_json(&format!("/v1/boards/{board}/players/{player}?period={id}&fresh=true")).await;
            assert_eq!(status, 200, "{body}");
            let better = want.iter().filter(|(_, v, _)| c.better(v, values) == std::cmp::Ordering::Less).count() as i64;
            let got: Vec<i64> = c.names().map(|n| body["scores"][n].as_i64().unwrap()).collect();
            assert_eq!(
                (&got, body["rank"]["ordinal"].as_i64(), body["rank"]["competition"].as_i64(), &body["meta"]),
                (values, Some(i as i64 + 1), Some(better + 1), meta),
                "{when}: {board} {period} {player}: {body}"
            );
            // speedrun keeps a dense index: one more than the distinct better rows.
            let mut distinct: Vec<&Vec<i64>> =
                want.iter().map(|(_, v, _)| v).filter(|v| c.better(v, values).is_lt()).collect();
            distinct.dedup();
            let dense = (*board == "speedrun").then_some(distinct.len() + 1);
            assert_eq!(body["rank"]["dense"], json!(dense), "{when}: {board} {period} {player}'s dense rank");
            let (_, around) = w
                .get_json(&format!("/v1/boards/{board}/players/{player}/around?period={id}&radius=1&fresh=true"))
                .await;
            let lo = i.saturating_sub(1);
            assert_eq!(entries_of(&around, &c), want[lo..(i + 2).min(want.len())], "{when}: around {player}");
        }
        paged_friends_and_what_if(w, board, &c, &id, &want, when).await;
    }
}

/// The entries of a listing read: player ids, values and metas.
fn entries_of(body: &Value, c: &Columns) -> Vec<Standing> {
    let entries = body["entries"].as_array().unwrap_or_else(|| panic!("no entries: {body}"));
    entries
        .iter()
        .map(|e| {
            let values = c.names().map(|n| e["scores"][n].as_i64().unwrap()).collect();
            (e["player_id"].as_str().unwrap().to_string(), values, e["meta"].clone())
        })
        .collect()
}

/// Cursors page the whole period forward and back, filled windows,
/// friends reads and rank-of agree with `want` (the model's order).
async fn paged_friends_and_what_if(w: &Worker, board: &str, c: &Columns, id: &str, want: &[Standing], when: &str) {
    let better = |v: &[i64]| want.iter().filter(|(_, x, _)| c.better(x, v).is_lt()).count() as i64;
    let better_or_equal = |v: &[i64]| want.iter().filter(|(_, x, _)| c.better(x, v).is_le()).count() as i64;
    // Pages of 6 by next_cursor, then back from the last page by prev_cursor.
    let (mut forward, mut pages) = (Vec::new(), Vec::new());
    let mut path = format!("/v1/boards/{board}/top?period={id}&limit=6&fresh=true");
    loop {
        let (status, body) = w.get_json(&path).await;
        assert_eq!(status, 200, "{when}: {path}: {body}");
        forward.extend(entries_of(&body, c));
        pages.push(body.clone());
        let Some(next) = body["next_cursor"].as_str() else { break };
        path = format!("/v1/boards/{board}/top?cursor={next}&limit=6&fresh=true");
    }
    assert_eq!(forward, want, "{when}: {board} {id} paged by cursors");
    let mut backward = entries_of(pages.last().unwrap(), c);
    let mut at = pages.last().unwrap()["prev_cursor"].as_str().map(str::to_string);
    while let Some(prev) = at {
        let (_, body) = w.get_json(&format!("/v1/boards/{board}/top?cursor={prev}&limit=6&fresh=true")).await;
        let first = body["entries"][0]["rank"].as_i64().unwrap();
        assert_eq!(first as usize, want.len() - backward.len() - body["entries"].as_array().unwrap().len() + 1);
        backward.splice(0..0, entries_of(&body, c));
        at = body["prev_cursor"].as_str().map(str::to_string);
    }
    assert_eq!(backward, want, "{when}: {board} {id} paged back by cursors");
    for (i, (player, values, _)) in want.iter().enumerate().step_by(5) {
        // A filled window of 5 moves away from the ends.
        let (_, around) =
            w.get_json(&format!("/v1/boards/{board}/players/{player}/around?period={id}&radius=2&fill=true")).await;
        let lo = i.saturating_sub(2).min(want.len().saturating_sub(5));
        assert_eq!(entries_of(&around, c), want[lo..(lo + 5).min(want.len())], "{when}: filled around {player}");
        // rank-of the player's own row: after everyone at it.
        let q: Vec<String> = c.names().zip(values).map(|(n, v)| format!("scores.{n}={v}")).collect();
        let (status, body) = w.get_json(&format!("/v1/boards/{board}/rank-of?period={id}&{}", q.join("&"))).await;
        assert_eq!(status, 200, "{body}");
        let rank = (body["rank"]["ordinal"].as_i64(), body["rank"]["competition"].as_i64());
        assert_eq!(rank, (Some(better_or_equal(values) + 1), Some(better(values) + 1)), "{when}: rank-of {body}");
    }
    // Friends: every third player and a nobody, ranked globally and among themselves.
    let mut asked: Vec<&str> = want.iter().step_by(3).map(|(p, _, _)| p.as_str()).collect();
    asked.push("nobody");
    let body = json!({ "players": asked }).to_string();
    let (status, got) = w.post_json(&format!("/v1/boards/{board}/players?period={id}&rank=competition"), &body).await;
    assert_eq!(status, 200, "{got}");
    let friends: Vec<Standing> = want.iter().step_by(3).cloned().collect();
    assert_eq!(entries_of(&got, c), friends, "{when}: friends in board order");
    for e in got["entries"].as_array().unwrap() {
        let values: Vec<i64> = c.names().map(|n| e["scores"][n].as_i64().unwrap()).collect();
        assert_eq!(e["rank"].as_i64(), Some(better(&values) + 1), "{when}: a friend's competition rank: {e}");
    }
    assert_eq!(got["not_found"], json!(["nobody"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn boards_with_columns_rank_exactly_once_through_a_kill_moderation_and_a_rebuild() {
    let stack = Stack::start(PARTITIONS).await;
    let admin = stack.admin_topic().await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    cfg.admin_topics = vec![admin.clone()];
    let (events, records) = stream(2000);
    let mut m = model(&events);

    let w = killed_mid_stream(&stack, &cfg, &records, PARTITIONS).await;
    assert_reads(&w, &m, "after the stream").await;

    // Only records every board refused are dead letters: runs lacking
    // time_ms (and matches lacking it that have no score either), each
    // naming the column.
    let dead = stack.broker.read_all(&stack.dlq, 1);
    let dead_ids: std::collections::BTreeSet<String> = dead
        .iter()
        .map(|m| {
            let detail = header(m, "rankflow.detail").unwrap_or_default();
            assert_eq!(header(m, "rankflow.reason").as_deref(), Some("invalid_score"), "{detail}");
            assert!(detail.contains("scores.time_ms is missing"), "{detail}");
            serde_json::from_slice::<Value>(m.payload().unwrap()).unwrap()["event_id"].as_str().unwrap().to_string()
        })
        .collect();
    let refused_by_all = |e: &&Ev| e.values[1].is_none() && (e.kind == "run" || !e.with_score);
    let want_dead: std::collections::BTreeSet<String> =
        events.iter().filter(refused_by_all).map(|e| e.id.clone()).collect();
    assert!(!want_dead.is_empty());
    assert_eq!(dead_ids, want_dead);
    let (_, pts) = w.get_json("/v1/boards/pts/top?limit=100&fresh=true").await;
    assert!(pts["total"].as_i64() > Some(0), "{pts}");

    // Hidden: out of every read of others, their own read says so; back on unhiding.
    let (p, q) = ("p03", "p04");
    let event = |kind: &str, player: &str| {
        json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": player,
                "ts": chrono::Utc::now().timestamp_millis() })
    };
    let admin_events = |evs: Vec<Value>| evs.into_iter().map(admin_record).collect::<Vec<_>>();
    stack.broker.produce(&admin, &admin_events(vec![event("player_hidden", p)])).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(60));
    let (_, own) = w.get_json(&format!("/v1/boards/arena/players/{p}?fresh=true")).await;
    assert_eq!(own["hidden"], json!(true), "{own}");
    let shown = top(&w, "arena", &arena(), "all_time").await;
    let want: Vec<_> = m.standings("arena", &arena(), false, "all").into_iter().filter(|(x, _, _)| x != p).collect();
    assert_eq!(shown, want, "a hidden player is in no one else's read");
    stack.broker.produce(&admin, &admin_events(vec![event("player_unhidden", p), event("player_erased", q)])).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(60));
    m.erase(q);
    assert_reads(&w, &m, "after an unhide and an erasure").await;
    let (status, _) = w.get_json(&format!("/v1/boards/speedrun/players/{q}?fresh=true")).await;
    assert_eq!(status, 404);
    let mut conn = stack.redis.conn().await;
    let row: Option<Vec<u8>> =
        redis::cmd("HGET").arg("lb:{arena}:_rows:all").arg(q).query_async(&mut conn).await.unwrap();
    assert_eq!(row, None, "an erasure takes the row too");

    // A correction sets a whole row: in the period named, or in every
    // period holding its time.
    let now = chrono::Utc::now().timestamp_millis();
    let today = chrono::DateTime::from_timestamp_millis(now).unwrap().format("d:%Y-%m-%d").to_string();
    let set = |board: &str, player: &str, scores: Value, period: Option<&str>| {
        let mut v = json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": "score_set", "board": board,
                            "player_id": player, "scores": scores, "ts": now });
        if let Some(p) = period {
            v["period"] = json!(p);
        }
        v
    };
    let sets = vec![
        set("speedrun", "p05", json!({ "deaths": 0, "time_ms": 1 }), Some("all")),
        set("arena", "p06", json!({ "wins": 500, "time_ms": 7 }), None),
        // Refused: a column missing.
        set("arena", "p07", json!({ "wins": 900 }), None),
    ];
    stack.broker.produce(&admin, &admin_events(sets)).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(60));
    m.set("speedrun", &["all".into()], "p05", vec![0, 1], now);
    m.set("arena", &["all".into(), today], "p06", vec![500, 7], now);
    assert_reads(&w, &m, "after score_set").await;
    // The same through the command: `rankflow admin set --scores`.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(["admin", "set", "--config"])
        .arg(&w.config_path)
        .args(["--board", "arena", "--player", "p08", "--period", "all", "--scores", "wins=600,time_ms=5", "--wait"])
        .output()
        .unwrap();
    assert!(out.status.success(), "admin set: {}", String::from_utf8_lossy(&out.stderr));
    m.set("arena", &["all".into()], "p08", vec![600, 5], now);
    assert_reads(&w, &m, "after admin set --scores").await;

    // A rebuild reproduces every board (the erasure is an admin event it reads too).
    let out = run_rankflow(&["rebuild"], &w.config_path).await;
    assert!(out.status.success(), "rebuild: {}", String::from_utf8_lossy(&out.stderr));
    assert_reads(&w, &m, "after a rebuild").await;

    // A bad read is a 400 naming the parameter.
    for (path, parameter) in [
        ("/v1/boards/arena/top?cursor=x", "cursor"),
        ("/v1/boards/arena/rank-of?score=1", "score"),
        ("/v1/boards/arena/rank-of?scores.wins=1", "scores.time_ms"),
        ("/v1/boards/arena/rank-of?scores.wins=1&scores.time_ms=x", "scores.time_ms"),
        ("/v1/boards/arena/rank-of?scores.wins=1&scores.time_ms=2&scores.kills=3", "scores.kills"),
        ("/v1/boards/arena/rank-of?scores.wins=9007199254740992&scores.time_ms=2", "scores.wins"),
        ("/v1/boards/arena/top?rank=dense", "rank"),
        ("/v1/boards/speedrun/top?rank=sparse", "rank"),
    ] {
        let (status, body) = w.get_json(path).await;
        assert_eq!((status, body["parameter"].as_str()), (400, Some(parameter)), "{path}: {body}");
    }
}
