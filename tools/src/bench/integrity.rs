//! `bench integrity`: what score integrity costs. The Redis time per event
//! of the store path on the bench boards with the three rules on (each
//! board its rules: `score_over` and `gain_over` on points, `score_over`
//! and `jump_over` on best, `jump_over` on laps) against the same boards
//! without, the same events in turn; then the review listing's latency with
//! 100,000 held events on one board tag.

use std::time::Instant;

use rankflow::store::Reader;

use super::*;

/// The rules each bench board gets, with limits a suspicious score passes
/// and an honest one seldom does: the generator's match scores run from -20
/// to 199 (score_over 198 holds one in 220), a new best 200 above the old
/// one needs an old best below zero, laps run 60 to 120 s (none is three
/// times faster than a best); every event is checked by every rule of its
/// board all the same, and gain windows kept for every player.
const RULES: [(&str, &str); 3] = [
    (
        "id = \"points\"",
        "[board.integrity]\nscore_over = { limit = 198, action = \"hold\" }\n\
         gain_over = { limit = 100000, window = \"1h\", action = \"hold\" }\n",
    ),
    ("id = \"best\"", "[board.integrity]\nscore_over = { limit = 198, action = \"hold\" }\njump_over = { limit = 200, action = \"hold\" }\n"),
    ("id = \"laps\"", "[board.integrity]\njump_over = { limit = \"3x\", action = \"hold\" }\n"),
];

/// The bench boards' settings, with the rules or without.
fn integrity_config(redis_url: &str, with_rules: bool) -> Result<Settings, String> {
    let mut text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "");
    if with_rules {
        text = text.replace("[kafka.options]", "review_topic = \"bench.review\"\n[kafka.options]");
        // Each board's table ends where the next begins: its rules go just before.
        let mut out = String::new();
        for (i, part) in text.split("[[board]]").enumerate() {
            if i > 0 {
                out.push_str("[[board]]");
            }
            out.push_str(part);
            if let Some((_, r)) = RULES.iter().find(|(id, _)| part.contains(id)) {
                out.push_str(r);
            }
        }
        text = out;
    }
    config::load_str(&text, Vec::new()).map_err(|e| e.to_string())
}

/// Redis CPU and script time per event, rules on against off; one line.
async fn cost(
    conn: &RedisConn,
    store: &Store,
    routers: &[Router; 2],
    batch: usize,
    events: u64,
    rounds: usize,
) -> Result<String, String> {
    let list = parsed_stream(&routers[0], 13, 100_000, events);
    let n = list.len() as u64;
    let labels = ["rules on", "no rules"];
    let p = paired(conn, store, (routers, labels), (&list, batch, rounds), || held_events(conn)).await?;
    let (cpu, script, ratios, held) = (&p.cpu, &p.script, &p.ratios, p.counted);
    let parts = p.breakdowns(labels, n, rounds);
    Ok(format!(
        "- Redis CPU per event {:.1} µs with the rules against {:.1} µs without, {:.2}x (median of rounds {}; \
         target at most 1.15x); in the script {:.1} against {:.1} µs; {held} of the {n} events held on some board{}{}",
        median(&cpu[0]),
        median(&cpu[1]),
        median(ratios),
        ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
        median(&script[0]),
        median(&script[1]),
        parts[0],
        parts[1],
    ))
}

/// A board of best rows (most wins, then the fastest time) fed the
/// columns bench's matches, with the three rules that judge a column (none
/// of its events breaks them, so every event is checked by all three) or
/// without.
fn rows_config(redis_url: &str, with_rules: bool) -> Result<Settings, String> {
    let text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "");
    let mut board = "[[board]]\nid = \"arena\"\non = [\"match_finished\"]\nrow = \"best\"\n\
                     columns = [{ name = \"wins\" }, { name = \"time_ms\", order = \"asc\" }]\n\
                     periods = [\"daily\", \"weekly\", \"all_time\"]\n"
        .to_string();
    let mut text = text.replace(BENCH_BOARDS, "");
    if with_rules {
        text = text.replace("[kafka.options]", "review_topic = \"bench.review\"\n[kafka.options]");
        board.push_str(
            "[board.integrity]\nscore_over = { column = \"wins\", limit = 100000, action = \"hold\" }\n\
             jump_over = { column = \"time_ms\", limit = \"5x\", action = \"hold\" }\n\
             better_than = { column = \"time_ms\", limit = 1000, action = \"hold\" }\n",
        );
    }
    config::load_str(&(text + &board), Vec::new()).map_err(|e| e.to_string())
}

/// Redis CPU per event of a board of best rows with its rules against
/// without; one line.
async fn rows_cost(redis_url: &str, events: u64, rounds: usize) -> Result<String, String> {
    let (with, without) = (rows_config(redis_url, true)?, rows_config(redis_url, false)?);
    let cfg_text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "");
    let (settings, conn, store) = open_store(&cfg_text).await?;
    let prefix = &settings.redis.key_prefix;
    let routers = [Router::new(with.boards.clone(), prefix), Router::new(without.boards.clone(), prefix)];
    let list = super::columns::stream(&routers[0], events);
    let n = list.len() as u64;
    let labels = ["rules on rows", "no rules"];
    let batch = settings.worker.batch_size;
    let p = paired(&conn, &store, (&routers, labels), (&list, batch, rounds), || held_events(&conn)).await?;
    let parts = p.breakdowns(labels, n, rounds);
    Ok(format!(
        "- A board of best rows (wins, then time; score_over, jump_over and better_than each on a column): Redis CPU \
         per event {:.1} µs with the rules against {:.1} µs without, {:.2}x (median of rounds {}; target at most \
         1.15x); {} of the {n} events held{}{}",
        median(&p.cpu[0]),
        median(&p.cpu[1]),
        median(&p.ratios),
        p.ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
        p.counted,
        parts[0],
        parts[1],
    ))
}

/// Held events on every tag (`_held` hashes).
async fn held_events(conn: &RedisConn) -> Result<u64, String> {
    let mut c = conn.clone();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*:_held").query_async(&mut c).await.map_err(|e| e.to_string())?;
    let mut n = 0;
    for k in keys {
        n += redis::cmd("HLEN").arg(k).query_async::<u64>(&mut c).await.map_err(|e| e.to_string())?;
    }
    Ok(n)
}

/// Median and p99 of `samples` timings of `read`, ms.
async fn timed<F, Fut>(samples: usize, mut read: F) -> Result<(f64, f64), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<usize, String>>,
{
    let mut took = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let got = read().await?;
        took.push(t.elapsed().as_secs_f64() * 1000.0);
        if got == 0 {
            return Err("a listing read nothing".into());
        }
    }
    took.sort_by(f64::total_cmp);
    Ok((median(&took), took[(took.len() * 99 / 100).min(took.len() - 1)]))
}

/// The listing's latency with `held` events held on one tag; one line.
async fn listing(redis_url: &str, held: u64) -> Result<String, String> {
    let text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "")
        .replace("[kafka.options]", "review_topic = \"bench.review\"\n[kafka.options]")
        .replace("periods = [\"daily\", \"weekly\", \"all_time\"]\n\n[[board]]\nid = \"best\"",
            "periods = [\"daily\", \"weekly\", \"all_time\"]\n[board.integrity]\nscore_over = { limit = -1000, action = \"hold\" }\n\n[[board]]\nid = \"best\"");
    let (settings, conn, store) = open_store(&text).await?;
    flush(&conn).await?;
    let router = Router::new(settings.boards.clone(), &settings.redis.key_prefix);
    eprintln!("bench: holding {held} events on points");
    // Seven in ten generated events are matches (the points board's), a few are bad.
    let list = parsed_stream(&router, 17, 20_000, held * 100 / 69 + held / 20);
    store_path_moves(&store, &router, &list, settings.worker.batch_size).await?;
    let base = keys::base(&settings.redis.key_prefix, "points", None);
    let mut c = conn.clone();
    let count: u64 =
        redis::cmd("ZCARD").arg(keys::held_queue_key(&base)).query_async(&mut c).await.map_err(|e| e.to_string())?;
    let middle: Vec<String> = redis::cmd("ZRANGE")
        .arg(keys::held_queue_key(&base))
        .arg(count / 2)
        .arg(count / 2)
        .query_async(&mut c)
        .await
        .map_err(|e| e.to_string())?;
    let player = list.iter().map(|(_, _, _, e)| e.player_id.clone()).next().ok_or("no events")?;
    let reader = Reader::new(conn.clone(), None);
    let err = |e: rankflow::store::StoreError| e.to_string();
    let first =
        timed(2000, || async { reader.held_page(&base, None, None, 50).await.map(|p| p.len()).map_err(err) }).await?;
    let mid = middle.first().ok_or("an empty queue")?;
    let inner =
        timed(2000, || async { reader.held_page(&base, None, Some(mid), 50).await.map(|p| p.len()).map_err(err) })
            .await?;
    let own =
        timed(2000, || async { reader.held_page(&base, Some(&player), None, 50).await.map(|p| p.len()).map_err(err) })
            .await?;
    Ok(format!(
        "- The listing with {count} held events on one tag (GET /v1/review's Redis part: ZRANGE BYLEX from the cursor, \
         then HMGET of the page), 50 a page, 2,000 reads each, one client: the first page {:.3} ms median, {:.3} ms p99; \
         a page from a cursor halfway {:.3} / {:.3} ms; one player's {:.3} / {:.3} ms",
        first.0, first.1, inner.0, inner.1, own.0, own.1
    ))
}

/// `rankflow-tools bench integrity`.
pub async fn integrity(redis_url: &str, events: u64, held: u64, rounds: usize) -> Result<(), String> {
    let with = integrity_config(redis_url, true)?;
    let without = integrity_config(redis_url, false)?;
    let cfg_text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "");
    let (settings, conn, store) = open_store(&cfg_text).await?;
    let prefix = &settings.redis.key_prefix;
    let routers = [Router::new(with.boards.clone(), prefix), Router::new(without.boards.clone(), prefix)];
    let line = cost(&conn, &store, &routers, settings.worker.batch_size, events, rounds).await?;
    eprintln!("{line}");
    let rows = rows_cost(redis_url, events, rounds).await?;
    eprintln!("{rows}");
    let listed = listing(redis_url, held).await?;
    eprintln!("{listed}");
    println!("## Score integrity\n");
    println!("The bench boards (three boards, seven period keys per match event) with their rules and without:");
    println!(
        "the store path on the same events for 100,000 players, 2% duplicates and 1% bad records, rounds in turn.\n"
    );
    println!("{line}\n{rows}\n{listed}");
    Ok(())
}
