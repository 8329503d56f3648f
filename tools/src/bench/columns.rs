//! `bench columns`: what ranking by two columns costs against one. The
//! bench stream's matches (100,000 players, 2% duplicates, 1% bad records
//! dropped at parsing) go to a board ranked by wins (sum, desc) then the
//! fastest time (min, asc), and to a board of one score (the wins, sum)
//! with the same periods, in turn: Redis time per event (paired rounds),
//! memory per member (`MEMORY USAGE` of every period key and its per-period
//! keys over the members they hold), and the top-10 and player reads each
//! board serves a second (concurrent clients on one connection, the read
//! API's way). Then what display names (`meta = true`, each event naming
//! its player) add to a member's memory on each board.

use std::time::{Duration, Instant};

use rankflow::event::Scores;
use rankflow::store::{ReadAt, ReadKeys, Reader, RowsAt};

use super::*;

const PERIODS: &str = "periods = [\"daily\", \"weekly\", \"all_time\"]";

/// The board with two columns, or the board of one score (with its dense
/// index, as configured by default, or without, as a board with columns is);
/// `-names`: keeping each member's metadata.
fn board(kind: &str) -> String {
    let ranking = match kind.trim_end_matches("-names") {
        "columns" => {
            "columns = [{ name = \"wins\", mode = \"sum\" }, { name = \"time_ms\", mode = \"min\", order = \"asc\" }]"
        }
        "one" => "mode = \"sum\"",
        _ => "mode = \"sum\"\ndense_rank = false",
    };
    let meta = if kind.ends_with("-names") { "meta = true\n" } else { "" };
    format!("[[board]]\nid = \"arena\"\non = [\"match_finished\"]\n{ranking}\n{PERIODS}\n{meta}")
}

fn settings(redis_url: &str, kind: &str) -> Result<Settings, String> {
    let text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "");
    let text = text.replace(BENCH_BOARDS, &board(kind));
    config::load_str(&text, Vec::new()).map_err(|e| e.to_string())
}

/// The bench's matches, each with its score as wins, a time from its id
/// and its player's display name as `meta` (which boards without
/// `meta = true` do not send to Redis).
pub(super) fn stream(router: &Router, events: u64) -> Vec<StreamEvent> {
    let mut list = parsed_stream(router, 23, 100_000, events);
    for (_, _, _, e) in &mut list {
        let wins = e.score.unwrap_or(0);
        let time_ms = 30_000 + (e.event_id.as_u128() % 90_000) as i64;
        e.scores = Some(Scores([("wins".to_string(), Some(wins)), ("time_ms".to_string(), Some(time_ms))].into()));
        e.meta = Some(serde_json::json!({ "name": format!("Player {}", e.player_id) }).to_string());
    }
    list
}

/// Bytes a member: every key of the board (period keys, dense indexes,
/// rows) over the members its period keys hold.
async fn memory_per_member(conn: &RedisConn) -> Result<(f64, u64), String> {
    let mut c = conn.clone();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*{arena}*").query_async(&mut c).await.map_err(|e| e.to_string())?;
    let (mut bytes, mut members) = (0u64, 0u64);
    for k in keys.iter().filter(|k| !k.contains(":_seen:") && !k.contains(":_off") && !k.contains(":_reg")) {
        let used: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(k)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        bytes += used.unwrap_or(0);
        let kind: String = redis::cmd("TYPE").arg(k).query_async(&mut c).await.map_err(|e| e.to_string())?;
        let period_key = !k.split(":{arena}:").nth(1).unwrap_or("_").starts_with('_');
        if kind == "zset" && period_key {
            members += redis::cmd("ZCARD").arg(k).query_async::<u64>(&mut c).await.map_err(|e| e.to_string())?;
        }
    }
    Ok((bytes as f64 / members.max(1) as f64, members))
}

/// Reads a second by `clients` concurrent clients for `secs`, of `read`.
async fn per_second<F, Fut>(clients: usize, secs: u64, read: F) -> Result<f64, String>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let until = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let read = read.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < until {
                read().await?;
                n += 1;
            }
            Ok::<u64, String>(n)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.map_err(|e| e.to_string())??;
    }
    Ok(rate(total, started.elapsed()))
}

/// Top-10 and player reads a second on the all-time key of the board last filled.
async fn capacity(conn: &RedisConn, settings: &Settings, player: &str) -> Result<(f64, f64), String> {
    let reader = Reader::new(conn.clone(), None);
    let base = keys::base(&settings.redis.key_prefix, "arena", None);
    let (key, dense, shadow, rows) = (
        keys::period_key(&base, "all"),
        keys::dense_key(&base, "all"),
        keys::shadow_key(&base, "all"),
        keys::rows_key(&base, "all"),
    );
    let offsets = keys::offsets_key(&base);
    let board = &settings.boards[0];
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let (key, dense, shadow, rows, offsets) = (leak(key), leak(dense), leak(shadow), leak(rows), leak(offsets));
    let player: &'static str = leak(player.to_string());
    if let Some(spec) = board.column_spec() {
        let at = RowsAt { key, rows_key: rows, shadow_key: shadow, dense_key: None, meta_key: None, spec };
        let r = reader.clone();
        let top = per_second(16, 3, move || {
            let r = r.clone();
            async move { r.rows_top(&at, 0, 10).await.map(|_| ()).map_err(|e| e.to_string()) }
        })
        .await?;
        let r = reader.clone();
        let one = per_second(16, 3, move || {
            let r = r.clone();
            async move { r.rows_player(&at, player).await.map(|_| ()).map_err(|e| e.to_string()) }
        })
        .await?;
        return Ok((top, one));
    }
    let keys = ReadKeys { key, dense_key: dense, shadow_key: shadow, version_key: offsets, meta_key: None };
    let at = ReadAt { keys, desc: true, shift: 1 };
    let r = reader.clone();
    let top = per_second(16, 3, move || {
        let r = r.clone();
        async move {
            r.read(&at, &rankflow::store::Top { offset: 0, limit: 10 }).await.map(|_| ()).map_err(|e| e.to_string())
        }
    })
    .await?;
    let r = reader.clone();
    let one =
        per_second(16, 3, move || {
            let r = r.clone();
            async move {
                r.read(&at, &rankflow::store::Player { member: player }).await.map(|_| ()).map_err(|e| e.to_string())
            }
        })
        .await?;
    Ok((top, one))
}

/// `rankflow-tools bench columns`.
pub async fn columns(redis_url: &str, events: u64, rounds: usize) -> Result<(), String> {
    let kinds = ["columns", "one", "one-no-dense", "columns-names", "one-names"];
    let all: Vec<Settings> = kinds.iter().map(|k| settings(redis_url, k)).collect::<Result<_, _>>()?;
    let cfg_text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "");
    let (base_settings, conn, store) = open_store(&cfg_text).await?;
    let prefix = &base_settings.redis.key_prefix;
    let routers: Vec<Router> = all.iter().map(|s| Router::new(s.boards.clone(), prefix)).collect();
    let list = stream(&routers[1], events);
    let n = list.len() as u64;
    let batch = base_settings.worker.batch_size;
    let mut lines = Vec::new();
    for (k, label) in [(1, "one column"), (2, "one column without its dense index")] {
        let pair = [routers[0].clone(), routers[k].clone()];
        let labels = ["two columns", label];
        let p = paired(&conn, &store, (&pair, labels), (&list, batch, rounds), || async { Ok(0) }).await?;
        let parts = p.breakdowns(labels, n, rounds);
        lines.push(format!(
            "- Redis CPU per event: two columns {:.1} µs against {label} {:.1} µs, {:.2}x (median of rounds {}; \
             target at most 1.3x){}{}",
            median(&p.cpu[0]),
            median(&p.cpu[1]),
            median(&p.ratios),
            p.ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
            parts[0],
            parts[1],
        ));
    }
    let player = list.first().map(|(_, _, _, e)| e.player_id.clone()).ok_or("no events")?;
    let mut mem = Vec::new();
    for (k, label) in kinds.iter().enumerate() {
        flush(&conn).await?;
        store_path_moves(&store, &routers[k], &list, batch).await?;
        let (per, members) = memory_per_member(&conn).await?;
        let (top, one) = capacity(&conn, &all[k], &player).await?;
        eprintln!("bench: {label}: {per:.0} B a member ({members} members), top {top:.0}/s, player {one:.0}/s");
        mem.push((per, members, top, one));
    }
    let row = |i: usize, label: &str| {
        let (per, members, top, one) = mem[i];
        format!("| {label} | {per:.0} B ({members} members) | {:.2}x | {top:.0} | {one:.0} |", per / mem[1].0)
    };
    println!("## Ranking by two columns\n");
    println!("The bench stream's {n} matches (100,000 players, 2% duplicates) on a board ranked by wins (sum, desc)");
    println!("then the fastest time (min, asc) against a board of the wins alone, periods daily, weekly, all time.\n");
    for l in &lines {
        println!("{l}");
    }
    println!("\n| board | memory a member | against one column | top-10 reads/s | player reads/s |\n|---|---:|---:|---:|---:|");
    println!("{}\n{}\n{}", row(0, "two columns"), row(1, "one column"), row(2, "one column, no dense index"));
    println!("{}\n{}", row(3, "two columns, names"), row(4, "one column, names"));
    let (on_rows, on_one) = (mem[3].0 - mem[0].0, mem[4].0 - mem[1].0);
    println!(
        "\nDisplay names add {on_rows:.1} B a member on two columns against {on_one:.1} B on one column: {:.2}x \
         (target at most 1x).",
        on_rows / on_one
    );
    Ok(())
}
