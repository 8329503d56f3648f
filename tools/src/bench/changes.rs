//! `bench changes`: what rank changes cost. The Redis time per event of the
//! store path on the bench boards with `notify_top = 100` against the same
//! boards without it: the same events, rounds in turn, for a large player
//! base (the top rarely moves) and a small one (it moves all the time).

use super::*;

/// The bench boards' settings, each board notifying its top 100 or not.
fn changes_config(redis_url: &str, notify: bool) -> Result<Settings, String> {
    let base = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "");
    let text = if notify {
        base.replace("[kafka.options]", "changes_topic = \"bench.changes\"\n[kafka.options]")
            .replace("[[board]]", "[[board]]\nnotify_top = 100")
    } else {
        base
    };
    config::load_str(&text, Vec::new()).map_err(|e| e.to_string())
}

/// Redis CPU and script time per event, with and without `notify_top`, for
/// `players` players; one line.
async fn one_population(
    conn: &RedisConn,
    store: &Store,
    routers: &[Router; 2],
    batch: usize,
    events: u64,
    players: usize,
    rounds: usize,
) -> Result<String, String> {
    let list = parsed_stream(&routers[0], 11, players, events);
    let n = list.len() as u64;
    let labels = ["notify_top = 100", "without"];
    let p = paired(conn, store, (routers, labels), (&list, batch, rounds), || async { Ok(0) }).await?;
    let (cpu, script, ratios, moves) = (&p.cpu, &p.script, &p.ratios, p.moves);
    let parts = p.breakdowns(labels, n, rounds);
    Ok(format!(
        "- {players} players: Redis CPU per event {:.1} µs with notify_top = 100 against {:.1} µs without, {:.2}x \
         (median of rounds {}; target at most 1.2x); in the script {:.1} against {:.1} µs; {:.3} change records per event \
         ({moves} for {n} events){}{}",
        median(&cpu[0]),
        median(&cpu[1]),
        median(ratios),
        ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
        median(&script[0]),
        median(&script[1]),
        moves as f64 / n as f64,
        parts[0],
        parts[1],
    ))
}

/// `rankflow-tools bench changes`.
pub async fn changes(redis_url: &str, events: u64, rounds: usize) -> Result<(), String> {
    let with = changes_config(redis_url, true)?;
    let without = changes_config(redis_url, false)?;
    let cfg_text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "");
    let (settings, conn, store) = open_store(&cfg_text).await?;
    let prefix = &settings.redis.key_prefix;
    let routers = [Router::new(with.boards.clone(), prefix), Router::new(without.boards.clone(), prefix)];
    let mut notes = Vec::new();
    for players in [100_000, 1_000] {
        let line = one_population(&conn, &store, &routers, settings.worker.batch_size, events, players, rounds).await?;
        eprintln!("{line}");
        notes.push(line);
    }
    println!("## Rank changes (notify_top)\n");
    println!("The bench boards (three boards, seven period keys per match event) with and without notify_top = 100:");
    println!("the store path on the same events, 2% duplicates and 1% bad records, rounds in turn.\n");
    for n in notes {
        println!("{n}");
    }
    Ok(())
}
