//! Sealed periods of boards ranked by several columns, through a real
//! worker, Apache Kafka and Redis, against the model in `board::columns`: three
//! days of a wins-then-time board, of a best-run board (earliest ties) and
//! of a five-column board (every mode, mixed orders, values at the
//! range's ends) close and seal; each day's snapshot (top, player reads,
//! cursors), its published top and every player's history (rank, scores,
//! percentile, best) equal the model's, with the players' display names
//! (`meta`) on the two boards that keep them, and again after a rebuild; an
//! erasure takes a player out of the snapshots (through their sealed rows),
//! their sealed metadata and out of the history.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::message::Message;

use rankflow::board::columns::{Column, ColumnMode, Columns, Row, RowMode};
use rankflow::board::Order;
use rankflow::score::MAX_EXACT;
use serde_json::{json, Value};
use support::league::wait_for;
use support::periods::{quick_sealing, Lcg, DAY};
use support::*;

const BOARDS: &str = r#"
[[board]]
id = "arena"
on = ["match"]
columns = [{ name = "wins", mode = "sum" }, { name = "time_ms", mode = "min", order = "asc" }]
periods = ["daily"]
close_after = "1m"
dense_rank = true
meta = true

[[board]]
id = "speedrun"
on = ["run"]
row = "best"
columns = [{ name = "deaths", order = "asc" }, { name = "time_ms", order = "asc" }]
tie_break = "earliest"
periods = ["daily"]
close_after = "1m"
meta = true

[[board]]
id = "trial"
on = ["trial"]
columns = [
  { name = "level", mode = "max" },
  { name = "xp", mode = "sum" },
  { name = "deaths", mode = "min", order = "asc" },
  { name = "mood", mode = "latest" },
  { name = "record", mode = "max", order = "asc" },
]
tie_break = "earliest"
periods = ["daily"]
close_after = "1m"
dense_rank = true
"#;

fn columns(board: &str) -> (Columns, bool) {
    let c = |name: &str, mode, order| Column::new(name, mode, order);
    match board {
        "arena" => (
            Columns {
                list: vec![c("wins", ColumnMode::Sum, Order::Desc), c("time_ms", ColumnMode::Min, Order::Asc)],
                row: RowMode::Columns,
            },
            false,
        ),
        "speedrun" => (
            Columns {
                list: vec![c("deaths", ColumnMode::Min, Order::Asc), c("time_ms", ColumnMode::Min, Order::Asc)],
                row: RowMode::Best,
            },
            true,
        ),
        _ => (
            Columns {
                list: vec![
                    c("level", ColumnMode::Max, Order::Desc),
                    c("xp", ColumnMode::Sum, Order::Desc),
                    c("deaths", ColumnMode::Min, Order::Asc),
                    c("mood", ColumnMode::Latest, Order::Desc),
                    c("record", ColumnMode::Max, Order::Asc),
                ],
                row: RowMode::Columns,
            },
            true,
        ),
    }
}

/// The boards keeping a dense index.
fn dense(board: &str) -> bool {
    board != "speedrun"
}

fn day_id(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().format("d:%Y-%m-%d").to_string()
}

/// The boards keeping metadata.
fn keeps_meta(board: &str) -> bool {
    board != "trial"
}

/// Per (board, day id): each player's row and its meta (that of the event
/// that last changed the row; null on a board that keeps none).
type Model = BTreeMap<(&'static str, String), BTreeMap<String, (Row, Value)>>;

/// An entry as a read answers it: player, values, meta (null: none).
type Standing = (String, Vec<i64>, Value);

/// A day's standings in board order.
fn standings(m: &Model, board: &'static str, day: &str) -> Vec<Standing> {
    let (c, earliest) = columns(board);
    let mut rows: Vec<(&String, &(Row, Value))> =
        m.get(&(board, day.to_string())).map(|r| r.iter().collect()).unwrap_or_default();
    rows.sort_by(|(pa, (a, _)), (pb, (b, _))| {
        c.better(&a.values, &b.values)
            .then_with(|| if earliest { a.reached.cmp(&b.reached) } else { std::cmp::Ordering::Equal })
            .then_with(|| pa.as_bytes().cmp(pb.as_bytes()))
    });
    rows.into_iter().map(|(p, (r, meta))| (p.clone(), r.values.clone(), meta.clone())).collect()
}

/// The entries of a listing (or a published top).
fn entries_of(v: &Value, c: &Columns) -> Vec<Standing> {
    v["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries: {v}"))
        .iter()
        .map(|e| {
            let values = c.names().map(|n| e["scores"][n].as_i64().unwrap()).collect();
            (e["player_id"].as_str().unwrap().to_string(), values, e["meta"].clone())
        })
        .collect()
}

/// Three days of matches, runs and trials by 14 players, values from few
/// choices so that rows tie; each record produced a second after its event.
fn stream(days: &[i64]) -> (Model, Vec<Record>) {
    let mut rng = Lcg(29);
    let (mut model, mut records) = (Model::new(), Vec::new());
    for (d, start) in days.iter().enumerate() {
        for i in 0..150 {
            let ts = start + 60_000 * (i + 1);
            let player = format!("p{:02}", rng.next(14));
            let (board, kind, values) = match rng.next(3) {
                0 => ("arena", "match", vec![rng.next(2) as i64, 50_000 + 1000 * rng.next(4) as i64]),
                1 => ("speedrun", "run", vec![rng.next(3) as i64, 40_000 + 500 * rng.next(4) as i64]),
                _ => {
                    let end = [-MAX_EXACT, 0, MAX_EXACT][rng.next(3) as usize];
                    let mut v: Vec<i64> = (0..4).map(|_| rng.next(2) as i64).collect();
                    v.push(end);
                    ("trial", "trial", v)
                }
            };
            let (c, _) = columns(board);
            let names: Vec<&str> = c.names().collect();
            let rows = model.entry((board, day_id(days[d]))).or_default();
            let old = rows.get(&player).cloned();
            let mut row = old.as_ref().map(|(r, _)| r.clone());
            c.combine(&mut row, &values, ts);
            let row = row.expect("a row");
            let name = json!({ "name": format!("{player} of day {d} #{i}") });
            let meta = match old {
                Some((was, kept)) if was.values == row.values => kept,
                _ if keeps_meta(board) => name.clone(),
                _ => Value::Null,
            };
            rows.insert(player.clone(), (row, meta));
            let scores: serde_json::Map<String, Value> =
                names.iter().zip(&values).map(|(n, v)| (n.to_string(), json!(v))).collect();
            let v = json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": player,
                            "ts": ts, "scores": scores, "meta": name });
            records.push((player, v.to_string().into_bytes(), Some(ts + 1000)));
        }
    }
    (model, records)
}

/// Every day's snapshot, published top and the players' histories agree
/// with the model; `published`: the sealing topic's records.
async fn assert_sealed(w: &Worker, m: &Model, published: &[Value], when: &str) {
    for (board, day) in m.keys() {
        let (c, _) = columns(board);
        let want = standings(m, board, day);
        let (status, top) = w.get_json(&format!("/v1/boards/{board}/top?period={day}:final&limit=100")).await;
        assert_eq!(status, 200, "{top}");
        assert_eq!(entries_of(&top, &c), want, "{when}: {board} {day}:final");
        // The sealed period itself answers as its snapshot does.
        let (_, sealed) = w.get_json(&format!("/v1/boards/{board}/top?period={day}&limit=100")).await;
        assert_eq!(entries_of(&sealed, &c), want, "{when}: {board} {day}");
        // Paged by cursors, as the live period is.
        let (mut paged, mut path) = (Vec::new(), format!("/v1/boards/{board}/top?period={day}:final&limit=4"));
        loop {
            let (_, page) = w.get_json(&path).await;
            paged.extend(entries_of(&page, &c));
            let Some(next) = page["next_cursor"].as_str() else { break };
            path = format!("/v1/boards/{board}/top?cursor={next}&limit=4");
        }
        assert_eq!(paged, want, "{when}: {board} {day}:final by cursors");
        let record = published
            .iter()
            .find(|p| p["board"] == *board && p["period"] == day.as_str())
            .unwrap_or_else(|| panic!("{board} {day} was published"));
        assert_eq!(record["total"], json!(want.len()), "{record}");
        assert_eq!(entries_of(record, &c), want[..want.len().min(10)], "{when}: {board} {day}'s published top");
        for (i, (player, values, meta)) in want.iter().enumerate() {
            let better = want.iter().filter(|(_, v, _)| c.better(v, values).is_lt()).count();
            let (_, read) = w.get_json(&format!("/v1/boards/{board}/players/{player}?period={day}:final")).await;
            assert_eq!(read["rank"]["ordinal"], json!(i + 1), "{when}: {read}");
            assert_eq!(&read["meta"], meta, "{when}: {read}");
            assert_eq!(read["rank"]["competition"], json!(better + 1), "{when}: {read}");
            // arena and trial keep a dense index, sealed with the day.
            let mut distinct: Vec<&Vec<i64>> =
                want.iter().map(|(_, v, _)| v).filter(|v| c.better(v, values).is_lt()).collect();
            distinct.dedup();
            let dense = dense(board).then_some(distinct.len() + 1);
            assert_eq!(read["rank"]["dense"], json!(dense), "{when}: {read}");
            let (_, h) = w.get_json(&format!("/v1/boards/{board}/players/{player}/history")).await;
            let entry = h["periods"].as_array().unwrap().iter().find(|p| p["period"] == day.as_str()).cloned();
            let scores: serde_json::Map<String, Value> =
                c.names().zip(values).map(|(n, v)| (n.into(), json!(v))).collect();
            let mut want_entry =
                json!({ "period": day, "rank": i + 1, "scores": scores, "percentile": read["percentile"] });
            if !meta.is_null() {
                want_entry["meta"] = meta.clone();
            }
            assert_eq!(entry, Some(want_entry), "{when}: {player}'s history of {board} {day}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sealed_days_of_boards_with_columns_read_publish_and_record_history_as_the_model_ranks_them() {
    let stack = Stack::start(1).await;
    let (admin, sealed) = (stack.admin_topic().await, stack.sealed_topic().await);
    let now = chrono::Utc::now().timestamp_millis();
    let today = now - now.rem_euclid(DAY);
    let days = [today - 3 * DAY, today - 2 * DAY, today - DAY];
    let (mut model, records) = stream(&days);
    stack.broker.produce(&stack.topic, &records).await;
    let boards = quick_sealing(&sealed, "top = 10\n") + BOARDS;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &boards);
    cfg.admin_topics = vec![admin.clone()];
    let w = Worker::spawn(&cfg);
    wait_http(cfg.http_port, Duration::from_secs(30)).await;
    let n = model.len() as i64;
    support::periods::wait_records(&stack.broker, &sealed, n, Duration::from_secs(120), &|| w.log());
    let published = || -> Vec<Value> {
        stack
            .broker
            .read_all(&sealed, 1)
            .iter()
            .map(|m| serde_json::from_slice(m.payload().unwrap()).unwrap())
            .collect()
    };
    // The history is recorded after the publication: wait for the last player's.
    let (board, day) = model.keys().last().cloned().unwrap();
    let last = standings(&model, board, &day).pop().unwrap().0;
    wait_for(Duration::from_secs(60), &|| w.log(), || async {
        let (_, h) = w.get_json(&format!("/v1/boards/{board}/players/{last}/history")).await;
        h["periods"].as_array().is_some_and(|p| p.iter().any(|p| p["period"] == day.as_str()))
    })
    .await;
    assert_sealed(&w, &model, &published(), "after the seals").await;

    // A rebuild leaves every sealed day as the live workers sealed it
    // (snapshots, their rows and dense index, the history).
    let out = run_rankflow(&["rebuild"], &w.config_path).await;
    assert!(out.status.success(), "rebuild: {}", String::from_utf8_lossy(&out.stderr));
    assert_sealed(&w, &model, &published(), "after a rebuild").await;

    // An erasure: out of every snapshot (found through its sealed rows) and the history.
    let erased = standings(&model, "arena", &day_id(days[0]))[0].0.clone();
    let sealed_meta = format!("lb:{{arena}}:_meta:{}:final", day_id(days[0]));
    let mut conn = stack.redis.conn().await;
    let meta: Option<String> = redis::cmd("HGET").arg(&sealed_meta).arg(&erased).query_async(&mut conn).await.unwrap();
    assert!(meta.is_some(), "the sealed day keeps {erased}'s metadata");
    let id = uuid::Uuid::new_v4().to_string();
    let erase = json!({ "event_id": id, "type": "player_erased", "player_id": erased });
    stack.broker.produce(&admin, &[admin_record(erase)]).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(60));
    let (_, h) = w.get_json(&format!("/v1/boards/arena/players/{erased}/history")).await;
    assert_eq!(h["periods"], json!([]), "{h}");
    for rows in model.values_mut() {
        rows.remove(&erased);
    }
    for (board, day) in model.keys() {
        let (c, _) = columns(board);
        let (_, top) = w.get_json(&format!("/v1/boards/{board}/top?period={day}:final&limit=100")).await;
        let want = standings(&model, board, day);
        assert_eq!(entries_of(&top, &c), want, "{board} {day}:final after the erasure");
        // The sealed dense index follows: the erased row leaves it unless another player holds it.
        for (i, (player, values, _)) in want.iter().enumerate().filter(|_| dense(board)) {
            let (_, read) = w.get_json(&format!("/v1/boards/{board}/players/{player}?period={day}:final")).await;
            let mut distinct: Vec<&Vec<i64>> =
                want.iter().map(|(_, v, _)| v).filter(|v| c.better(v, values).is_lt()).collect();
            distinct.dedup();
            assert_eq!(
                (read["rank"]["ordinal"].clone(), read["rank"]["dense"].clone()),
                (json!(i + 1), json!(distinct.len() + 1))
            );
        }
    }
    let row: Option<Vec<u8>> = redis::cmd("HGET")
        .arg(format!("lb:{{arena}}:_rows:{}:final", day_id(days[0])))
        .arg(&erased)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(row, None, "the erasure takes the sealed row too");
    let meta: Option<String> = redis::cmd("HGET").arg(&sealed_meta).arg(&erased).query_async(&mut conn).await.unwrap();
    assert_eq!(meta, None, "and its sealed metadata");
}
