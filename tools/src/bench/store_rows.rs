//! The Redis rows: the bare-writes ceiling and rankflow's store path (with
//! and without dense indexes), in rounds, with where Redis's time went.

use super::*;

/// The Redis ceiling: per event one `SET NX EX` marker, and per board
/// period one `ZINCRBY`/`ZADD GT`/`ZADD LT`, pipelined 1000 events at a time,
/// two pipelines in flight.
pub(super) async fn bare_writes(
    conn: &RedisConn,
    router: &Router,
    events: &[(i32, i64, i64, Event)],
) -> Result<Duration, String> {
    let plans: Vec<Vec<(usize, Decision)>> = events.iter().map(|(_, _, rts, e)| router.plan(e, *rts)).collect();
    let build = |chunk_e: &[(i32, i64, i64, Event)], chunk_p: &[Vec<(usize, Decision)>]| {
        let mut pipe = redis::pipe();
        for ((_, _, _, e), plan) in chunk_e.iter().zip(chunk_p) {
            pipe.cmd("SET").arg(format!("bare:{}", e.event_id)).arg(1).arg("NX").arg("EX").arg(604800).ignore();
            for (_, d) in plan {
                let Decision::Write(w) = d else { continue };
                for p in &w.periods {
                    match w.params.op {
                        rankflow::board::WriteOp::Sum => {
                            pipe.cmd("ZINCRBY").arg(&p.key).arg(w.num).arg(&e.player_id).ignore()
                        }
                        rankflow::board::WriteOp::Gt => {
                            pipe.cmd("ZADD").arg(&p.key).arg("GT").arg(w.num).arg(&e.player_id).ignore()
                        }
                        rankflow::board::WriteOp::Lt => {
                            pipe.cmd("ZADD").arg(&p.key).arg("LT").arg(w.num).arg(&e.player_id).ignore()
                        }
                        rankflow::board::WriteOp::Latest => {
                            pipe.cmd("ZADD").arg(&p.key).arg(w.num).arg(&e.player_id).ignore()
                        }
                        // The row as the event has it: its member and the player's row.
                        rankflow::board::WriteOp::Columns => {
                            let spec = w.params.columns.expect("a board with columns has their spec");
                            let row = spec.row_key(&w.values);
                            pipe.cmd("ZADD")
                                .arg(&p.key)
                                .arg(0)
                                .arg(spec.member(&w.values, w.ts, &e.player_id))
                                .ignore();
                            pipe.cmd("HSET").arg(&p.rows_key).arg(&e.player_id).arg(row).ignore()
                        }
                    };
                }
            }
        }
        pipe
    };
    let started = Instant::now();
    // Two pipelines in flight on the one connection: Redis starts on the next
    // while the client reads the replies of the last, so it never waits for
    // the client (with one in flight it sat idle 8% of the time).
    use futures::StreamExt as _;
    let mut sent = futures::stream::iter(events.chunks(1000).zip(plans.chunks(1000)))
        .map(|(e, p)| {
            let pipe = build(e, p);
            let mut c = conn.clone();
            async move { pipe.query_async::<()>(&mut c).await.map_err(|e| format!("bare writes: {e}")) }
        })
        .buffered(2);
    while let Some(r) = sent.next().await {
        r?;
    }
    Ok(started.elapsed())
}

/// rankflow's store path: pre-parsed events, planned, grouped by board tag
/// and encoded in batches of `batch` records, two batches in flight, each
/// sent behind the one before with preconditions on it, as the worker does.
/// Answers how long it took and how many (event, board tag) pairs applied.
pub(super) async fn store_path(
    store: &Store,
    router: &Router,
    events: &[(i32, i64, i64, Event)],
    batch: usize,
) -> Result<(Duration, u64), String> {
    let (took, applied, _) = store_path_moves(store, router, events, batch).await?;
    Ok((took, applied))
}

/// [`store_path`], also answering how many rank changes the calls reported
/// (boards with `notify_top`).
pub(super) async fn store_path_moves(
    store: &Store,
    router: &Router,
    events: &[(i32, i64, i64, Event)],
    batch: usize,
) -> Result<(Duration, u64, u64), String> {
    let fields: HashMap<i32, String> = (0..64).map(|p| (p, keys::offsets_field("bench", p))).collect();
    let prepare = |chunk: &[(i32, i64, i64, Event)]| {
        let plans: Vec<Vec<(usize, Decision)>> = chunk.iter().map(|(_, _, rts, e)| router.plan(e, *rts)).collect();
        let mut tags: Vec<TagBatch<'_>> = Vec::new();
        for ((p, off, rts, e), plan) in chunk.iter().zip(&plans) {
            for (_, d) in plan {
                if let Decision::Write(w) = d {
                    push_write(&mut tags, w, e, &fields[p], *off, *rts);
                }
            }
        }
        store.prepare(&tags)
    };
    // Tags are registered before their first write, as the worker does
    // (once each), here before the clock starts: registering them batch by
    // batch, two batches in flight, let a batch reach a tag the batch
    // before was still registering (answered LOST).
    let registry = keys::tags_key(router.prefix());
    let mut bases: Vec<String> = Vec::new();
    for (_, _, rts, e) in events {
        for (_, d) in router.plan(e, *rts) {
            if let Decision::Write(w) = d {
                if !bases.contains(&w.base) {
                    bases.push(w.base.clone());
                }
            }
        }
    }
    store.register_tags(&registry, &bases, false).await.map_err(|e| e.to_string())?;
    let started = Instant::now();
    use futures::StreamExt as _;
    let mut before: Option<Tails> = None;
    let mut sent = futures::stream::iter(events.chunks(batch))
        .map(|chunk| {
            let mut calls = prepare(chunk);
            if let Some(tails) = &before {
                calls.after(tails);
            }
            before = Some(calls.tails());
            async move {
                let answers = store.apply_prepared(&calls).await.map_err(|e| e.to_string())?;
                let applied = answers.results.iter().flatten().filter(|r| **r == ApplyResult::Applied).count();
                Ok::<(u64, u64), String>((applied as u64, answers.moves.iter().map(Vec::len).sum::<usize>() as u64))
            }
        })
        .buffered(2);
    let (mut applied, mut moves) = (0, 0);
    while let Some(r) = sent.next().await {
        let (a, m) = r?;
        applied += a;
        moves += m;
    }
    Ok((started.elapsed(), applied, moves))
}

/// `events` generated records of `players` players (2% producer duplicates,
/// 1% bad records, which parsing drops) parsed for the store path, over four
/// partitions: (partition, offset, record time, event).
pub(super) fn parsed_stream(router: &Router, seed: u64, players: usize, events: u64) -> Vec<(i32, i64, i64, Event)> {
    let now = chrono::Utc::now().timestamp_millis();
    let mut g = Generator::new(seed, players, now - 1000, 0).with_duplicates(0.02).with_bad_records(0.01);
    let mut list = Vec::new();
    for i in 0..events {
        let s = g.next_sample();
        if let Parsed::Event(e) = event::parse(&s.value, Default::default(), |t| router.listens(t)) {
            list.push(((i % 4) as i32, (i / 4) as i64, now, e));
        }
    }
    list
}

/// Redis's own CPU seconds so far (`INFO cpu`, user + sys) and the
/// microseconds it has spent in each command (`INFO commandstats`), read
/// with one `INFO`.
#[derive(Default)]
pub(super) struct RedisStats {
    pub(super) cpu: f64,
    pub(super) usec: HashMap<String, f64>,
    /// How many times each command ran.
    pub(super) calls: HashMap<String, f64>,
}

impl RedisStats {
    /// Adds what Redis used between two readings.
    pub(super) fn add_between(&mut self, before: &RedisStats, after: &RedisStats) {
        self.cpu += after.cpu - before.cpu;
        for (k, v) in &after.usec {
            *self.usec.entry(k.clone()).or_default() += v - before.usec.get(k).copied().unwrap_or(0.0);
        }
        for (k, v) in &after.calls {
            *self.calls.entry(k.clone()).or_default() += v - before.calls.get(k).copied().unwrap_or(0.0);
        }
    }
}

pub(super) async fn redis_stats(conn: &RedisConn) -> Result<RedisStats, String> {
    let info = info(conn, &["cpu", "commandstats"]).await?;
    let cpu = cpu_seconds(&info);
    let field = |name: &str| -> HashMap<String, f64> {
        let key = format!("{name}=");
        info.lines()
            .filter_map(|l| {
                let (cmd, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let v = rest.split(',').find_map(|kv| kv.strip_prefix(key.as_str()))?.parse().ok()?;
                Some((cmd.to_uppercase(), v))
            })
            .collect()
    };
    Ok(RedisStats { cpu, usec: field("usec"), calls: field("calls") })
}

/// Where Redis's time went in one phase (`spent`: what Redis used during
/// it), per event: its CPU, and each command's share (for scripts: the
/// commands inside them, and the rest, which is the interpreter and the
/// calls' own cost).
pub(super) fn breakdown(what: &str, n: u64, spent: &RedisStats) -> String {
    let per = |usec: f64| usec / n as f64;
    let mut used: Vec<(String, f64)> = spent
        .usec
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .filter(|(k, d)| {
            *d > 0.0 && !matches!(k.as_str(), "INFO" | "DBSIZE" | "FLUSHDB" | "CONFIG|RESETSTAT" | "SCRIPT|LOAD")
        })
        .collect();
    used.sort_by(|a, b| b.1.total_cmp(&a.1));
    let script: f64 = used.iter().filter(|(k, _)| k == "EVALSHA").map(|(_, d)| *d).sum();
    let inner: f64 = used.iter().filter(|(k, _)| k != "EVALSHA").map(|(_, d)| *d).sum();
    let parts: Vec<String> =
        used.iter().filter(|(k, _)| k != "EVALSHA").map(|(k, d)| format!("{k} {:.1}", per(*d))).collect();
    let mut line = format!("- {what}: Redis CPU {:.1} µs/event", spent.cpu * 1e6 / n as f64);
    if script > 0.0 {
        line += &format!(
            "; in scripts {:.1}: commands {} (sum {:.1}), interpreter and calls {:.1}",
            per(script),
            parts.join(", "),
            per(inner),
            per(script - inner)
        );
    } else {
        line += &format!("; in commands {:.1}: {}", per(inner), parts.join(", "));
    }
    line
}

/// The store-path rows of a run: the Redis ceiling, the store path and the
/// store path without dense indexes, each on a flushed Redis, each with the
/// share of its wall time Redis's thread was busy (where the time goes).
///
/// The three phases run `rounds` times in turn (ceiling, store path, lean
/// store path, then again), so that a slow spell of the shared machine falls
/// on one round, not on one row. Each row shows its median rate; a store-path
/// row's ratio is the median of its rounds' ratios to the ceiling of the same
/// round, and each round's ratio is listed.
pub(super) async fn store_rows(
    conn: &RedisConn,
    store: &Store,
    settings: &Settings,
    events: &[(i32, i64, i64, Event)],
    rounds: usize,
) -> Result<(Vec<Row>, Vec<String>), String> {
    let n = events.len() as u64;
    let rounds = rounds.max(1);
    let router = Router::new(settings.boards.clone(), &settings.redis.key_prefix);
    let lean_router = Router::new(lean_boards()?, &settings.redis.key_prefix);
    let phases = [
        ("Redis ceiling: bare pipelined writes", None),
        ("rankflow store path", Some(&router)),
        ("rankflow store path, dense_rank = false", Some(&lean_router)),
    ];
    // Per phase: each round's rate, the wall time, and Redis's CPU and
    // command times summed over the rounds.
    let mut rates = vec![Vec::new(); phases.len()];
    let mut took = vec![0.0; phases.len()];
    let mut used: Vec<RedisStats> = phases.iter().map(|_| RedisStats::default()).collect();
    // What the store path left in Redis, after its last round.
    let mut footprint = None;
    for round in 1..=rounds {
        for (p, (what, through)) in phases.iter().enumerate() {
            eprintln!("bench: {what} ({n} events, round {round} of {rounds})");
            flush(conn).await?;
            let before = redis_stats(conn).await?;
            let (elapsed, applied) = match through {
                None => (bare_writes(conn, &router, events).await?, 0),
                Some(r) => store_path(store, r, events, settings.worker.batch_size).await?,
            };
            let after = redis_stats(conn).await?;
            // Measured once Redis's CPU for the phase is read: the scan of
            // every key is not the store path's work.
            if p == 1 && round == rounds {
                footprint = Some(super::memory::Footprint::measure(conn, settings).await?.line(applied));
            }
            rates[p].push(rate(n, elapsed));
            took[p] += elapsed.as_secs_f64();
            used[p].add_between(&before, &after);
        }
    }
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for (p, (what, _)) in phases.iter().enumerate() {
        notes.push(breakdown(what, n * rounds as u64, &used[p]));
        let busy = format!("Redis busy {:.0}%", used[p].cpu / took[p] * 100.0);
        let note = if p == 0 {
            format!("1.00x; {busy}")
        } else {
            let (ratio, each) = round_ratios(&rates[p], &rates[0]);
            format!("{ratio:.2}x Redis ceiling{each}; {busy}")
        };
        rows.push(Row { what, per_sec: median(&rates[p]), note });
    }
    if let Some(f) = footprint {
        notes.push(format!("- memory after the store path: {f}"));
    }
    Ok((rows, notes))
}

/// Settings from a config text, and a store on its Redis with the apply
/// script loaded.
/// The benchmark's boards without dense-rank indexes.
pub(super) fn lean_boards() -> Result<Vec<rankflow::board::Board>, String> {
    let text = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n{}",
        BENCH_BOARDS.replace("[[board]]", "[[board]]\ndense_rank = false")
    );
    Ok(config::load_str(&text, Vec::new()).map_err(|e| e.to_string())?.boards)
}

pub(super) async fn open_store(cfg_text: &str) -> Result<(Settings, RedisConn, Store), String> {
    let settings = config::load_str(cfg_text, Vec::new()).map_err(|e| e.to_string())?;
    let conn = RedisConn::connect(&settings.redis).await.map_err(|e| e.to_string())?;
    let store = Store::new(conn.clone(), settings.redis.dedupe_ttl)
        .with_max_events_per_call(settings.worker.max_events_per_call);
    // BENCH_MAX_CALL_TIME (e.g. 10ms): calls sized by time as the worker's
    // (`worker.max_call_time`); unset, by `max_events_per_call` alone, as
    // the store-path floor is defined.
    let store = match std::env::var("BENCH_MAX_CALL_TIME") {
        Ok(t) => store.with_call_sizes(
            config::parse_duration(&t).map_err(|e| format!("BENCH_MAX_CALL_TIME: {e}"))?,
            settings.worker.max_events_per_call,
        ),
        Err(_) => store,
    };
    store.load_script().await.map_err(|e| e.to_string())?;
    Ok((settings, conn, store))
}

/// `rankflow-tools bench store`: the store path against the Redis ceiling alone,
/// on events generated in-process (no broker), for quick comparisons.
pub async fn store(redis_url: &str, count: u64, partitions: i32, rounds: usize) -> Result<(), String> {
    let cfg_text = bench_config("127.0.0.1:9", redis_url, "bench", "unused", "127.0.0.1:0", "");
    let (settings, conn, store) = open_store(&cfg_text).await?;
    let router = Router::new(settings.boards.clone(), &settings.redis.key_prefix);
    let events = generated_events(&router, count, partitions, Stream { bad_ratio: 0.0, dup_ratio: 0.0 });
    let (rows, notes) = store_rows(&conn, &store, &settings, &events, rounds).await?;
    print_rows(&rows, &notes);
    Ok(())
}

/// `count` generated records spread over `partitions`, as (partition,
/// offset, record time, event) for the events `router` takes (the rest
/// keep their offsets: the stream's bad records).
pub(super) fn generated_events(
    router: &Router,
    count: u64,
    partitions: i32,
    stream: Stream,
) -> Vec<(i32, i64, i64, Event)> {
    let now = chrono::Utc::now().timestamp_millis();
    let mut g =
        Generator::new(7, 100_000, now - 1000, 0).with_duplicates(stream.dup_ratio).with_bad_records(stream.bad_ratio);
    let mut offsets = vec![0i64; partitions.max(1) as usize];
    let mut events = Vec::with_capacity(count as usize);
    for i in 0..count {
        let s = g.next_sample();
        let p = (i % offsets.len() as u64) as usize;
        if let Parsed::Event(e) = event::parse(&s.value, Default::default(), |t| router.listens(t)) {
            events.push((p as i32, offsets[p], now, e));
        }
        offsets[p] += 1;
    }
    events
}

/// One parsed event of a generated stream: (partition, offset, record time, event).
pub(super) type StreamEvent = (i32, i64, i64, Event);

/// The store path on the same events with two routers (the boards with a
/// feature, then without), rounds taken in turn on an emptied database.
pub(super) struct Paired {
    /// Redis CPU and script µs per event, per router, by round.
    pub(super) cpu: [Vec<f64>; 2],
    pub(super) script: [Vec<f64>; 2],
    /// The first router's CPU over the second's, by round.
    pub(super) ratios: Vec<f64>,
    /// Redis's time spent, per router, over every round.
    pub(super) used: [RedisStats; 2],
    /// The first router's rank-change records in its last round, and what
    /// `after_first` counted after it (its database as the run left it).
    pub(super) moves: u64,
    pub(super) counted: u64,
}

impl Paired {
    /// Where each side's Redis time went (`labels`: the sides' names), one
    /// indented line each, for `n` events a round.
    pub(super) fn breakdowns(&self, labels: [&str; 2], n: u64, rounds: usize) -> [String; 2] {
        [0, 1].map(|k| {
            format!("\n  {}", breakdown(labels[k], n * rounds.max(1) as u64, &self.used[k]).trim_start_matches("- "))
        })
    }
}

/// Runs [`Paired`]'s rounds; `after_first` counts something in Redis after
/// each run of the first router.
pub(super) async fn paired<F, Fut>(
    conn: &RedisConn,
    store: &Store,
    (routers, labels): (&[Router; 2], [&str; 2]),
    (list, batch, rounds): (&[StreamEvent], usize, usize),
    after_first: F,
) -> Result<Paired, String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<u64, String>>,
{
    let n = list.len() as f64;
    let mut p = Paired {
        cpu: [vec![], vec![]],
        script: [vec![], vec![]],
        ratios: Vec::new(),
        used: [RedisStats::default(), RedisStats::default()],
        moves: 0,
        counted: 0,
    };
    for round in 1..=rounds.max(1) {
        for (k, router) in routers.iter().enumerate() {
            eprintln!("bench: store path, {} (round {round})", labels[k]);
            flush(conn).await?;
            let before = redis_stats(conn).await?;
            let (_, _, moves) = store_path_moves(store, router, list, batch).await?;
            let after = redis_stats(conn).await?;
            p.used[k].add_between(&before, &after);
            let usec = |s: &RedisStats| s.usec.get("EVALSHA").copied().unwrap_or(0.0);
            p.cpu[k].push((after.cpu - before.cpu) * 1e6 / n);
            p.script[k].push((usec(&after) - usec(&before)) / n);
            if k == 0 {
                p.moves = moves;
                p.counted = after_first().await?;
            }
        }
        p.ratios.push(p.cpu[0][round - 1] / p.cpu[1][round - 1]);
    }
    Ok(p)
}
