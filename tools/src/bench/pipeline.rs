//! `bench pipeline`: every row of the pipeline benchmark in one run.

use super::*;

/// What `rankflow-tools bench pipeline` runs: the backlog's size and partitions,
/// the latency run's rate and length, the broker's process (for its CPU)
/// and the rounds of the rows measured in rounds (Redis ceiling, store
/// paths; broker ceiling and end to end).
pub struct PipelineRun {
    pub count: u64,
    pub partitions: i32,
    pub latency_rate: u64,
    pub latency_secs: u64,
    pub broker_pid: Option<u32>,
    pub rounds: usize,
    pub stream: Stream,
}

/// `rankflow-tools bench pipeline`.
pub async fn pipeline(brokers: &str, redis_url: &str, run: PipelineRun) -> Result<(), String> {
    let PipelineRun { count, partitions, latency_rate, latency_secs, broker_pid, rounds, stream } = run;
    let broker_cpu = || broker_pid.map_or(0.0, proc_cpu_secs);
    // CPU seconds over the run's events, as µs per event.
    let per = |secs: f64| secs * 1e6 / count as f64;
    let exe = rankflow_bin()?;
    let dir = tempfile_dir()?;
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let run = run_id.clone();
    let topic = format!("bench-{run}");
    let cfg_text = bench_config(brokers, redis_url, &topic, "unused", "127.0.0.1:0", "");
    let (settings, conn, store) = open_store(&cfg_text).await?;
    let router = Router::new(settings.boards.clone(), &settings.redis.key_prefix);

    create_topic(brokers, &topic, partitions).await?;
    eprintln!("bench: producing {count} records to {topic} ({partitions} partitions; {})", stream.describe());
    let (produced, _) = produce(brokers, &topic, count, 7, 0, stream).await?;
    let mut rows = vec![Row { what: "produce (bench producer)", per_sec: rate(count, produced), note: String::new() }];

    let events = read_events(brokers, &topic, partitions, count, &router)?;
    let (store_rows, notes) = store_rows(&conn, &store, &settings, &events, rounds).await?;
    drop(events);
    let (redis_ceiling, store_rate, lean_rate) = (store_rows[0].per_sec, store_rows[1].per_sec, store_rows[2].per_sec);

    // The broker ceiling and the end-to-end run, in rounds like the rows
    // above: a bare read, then the binary, then again, so that a slow spell
    // of the machine falls on one round. Each end-to-end round is a fresh
    // group on a flushed Redis, reading the same topic from the start.
    let rounds = rounds.max(1);
    let (mut broker_rates, mut e2e_rates, mut joins, mut reads) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // The same drain with kafka.transactions = false, each round right after.
    let mut plain_rates = Vec::new();
    let (mut broker_alone_cpu, mut e2e_secs, mut peak_kib, mut worker_cpu, mut redis_cpu, mut broker_used) =
        (0.0, 0.0, 0, 0.0, 0.0, 0.0);
    // What the last round's drain left in Redis.
    let mut footprint = String::new();
    for round in 1..=rounds {
        eprintln!("bench: broker ceiling (bare consumer, round {round} of {rounds})");
        let cpu_before = broker_cpu();
        broker_rates.push(rate(count, bare_read(brokers, &topic, partitions, count)?));
        broker_alone_cpu += broker_cpu() - cpu_before;

        eprintln!("bench: end to end (the rankflow binary, from holding every partition until committed = log end, round {round} of {rounds})");
        flush(&conn).await?;
        let group = format!("bench-e2e-{run}-{round}");
        let listen = format!("127.0.0.1:{}", free_port()?);
        let cfg = bench_config(brokers, redis_url, &topic, &group, &listen, "");
        let at = GroupTopic { brokers, group: &group, topic: &topic, partitions };
        let (before, cpu_before) = (redis_stats(&conn).await?.cpu, broker_cpu());
        let run = run_to_end(&exe, &dir, &cfg, &listen, redis_url, &at, count)?;
        redis_cpu += redis_stats(&conn).await?.cpu - before;
        broker_used += broker_cpu() - cpu_before;
        e2e_rates.push(rate(count, run.drain));
        joins.push((run.total - run.drain).as_secs_f64());
        e2e_secs += run.drain.as_secs_f64();
        peak_kib = peak_kib.max(run.peak_kib);
        worker_cpu += run.cpu;
        reads.push(run.reads);
        if round == rounds {
            footprint = super::memory::Footprint::measure(&conn, &settings).await?.line(run.applied);
        }
        eprintln!("bench: end to end with kafka.transactions = false (round {round} of {rounds})");
        flush(&conn).await?;
        let at = GroupTopic { brokers, group: &format!("bench-plain-{run_id}-{round}"), topic: &topic, partitions };
        plain_rates.push(plain_drain(&exe, &dir, redis_url, &at, count)?);
    }
    // CPU per event over every round's events.
    let per_all = |secs: f64| per(secs) / rounds as f64;
    let broker = median(&broker_rates);
    let note = broker_pid.map_or(String::new(), |_| format!("; broker CPU {:.1} µs/record", per_all(broker_alone_cpu)));
    rows.push(Row { what: "broker ceiling: bare consumer read", per_sec: broker, note: format!("1.00x{note}") });
    rows.extend(store_rows);

    let (ratio, each) = round_ratios(&e2e_rates, &broker_rates);
    let e2e_rate = median(&e2e_rates);
    let mut cpu = format!("CPU µs/event: worker {:.1}, Redis {:.1}", per_all(worker_cpu), per_all(redis_cpu));
    if broker_pid.is_some() {
        cpu += &format!(", broker {:.1}", per_all(broker_used));
    }
    rows.push(Row {
        what: "rankflow end to end",
        per_sec: e2e_rate,
        note: format!(
            "{:.2}x the slower of the broker ceiling and the store path alone (the drain floor: 0.7x); \
             {ratio:.2}x broker{each}, {:.2}x Redis ceiling; Redis busy {:.0}%; peak RSS {} MiB; {cpu}; \
             rates per round {} (broker {}); start and group join before the drain (not in the rate): {} s",
            e2e_rate / broker.min(store_rate),
            e2e_rate / redis_ceiling,
            redis_cpu / e2e_secs * 100.0,
            peak_kib / 1024,
            e2e_rates.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", "),
            broker_rates.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", "),
            joins.iter().map(|j| format!("{j:.1}")).collect::<Vec<_>>().join(", ")
        ),
    });

    let without = median(&plain_rates);
    rows.push(plain_row(e2e_rate, &plain_rates));
    let lat = latency(
        brokers,
        redis_url,
        &conn,
        LatencyRun { partitions, rate: latency_rate, secs: latency_secs, stream },
        None,
    )
    .await?;

    let _ = std::fs::remove_dir_all(&dir);
    println!("\nstream: {count} records, {}", stream.describe());
    print_rows(&rows, &notes);
    println!("\n{}\n\nmemory after the drain: {footprint}\n\n{}", drain_reads_line(&reads), lat.line());
    let summary = json!({"produce": rows[0].per_sec, "broker": broker, "redis": redis_ceiling, "store": store_rate,
        "store_lean": lean_rate, "e2e": e2e_rate, "e2e_without_transactions": without, "peak_rss_mib": peak_kib / 1024,
        "p50_ms": lat.p50, "p99_ms": lat.p99, "max_ms": lat.max, "broker_p50_ms": lat.floor_p50,
        "broker_p99_ms": lat.floor_p99, "visible_p50_ms": lat.visible.0, "visible_p99_ms": lat.visible.1});
    println!("{summary}");
    Ok(())
}

/// One drain of the topic by the rankflow binary with `kafka.transactions =
/// false`, in the group `at` names: its rate.
fn plain_drain(exe: &Path, dir: &Path, redis_url: &str, at: &GroupTopic<'_>, count: u64) -> Result<f64, String> {
    let listen = format!("127.0.0.1:{}", free_port()?);
    let cfg = without_transactions(&bench_config(at.brokers, redis_url, at.topic, at.group, &listen, ""));
    Ok(rate(count, run_to_end(exe, dir, &cfg, &listen, redis_url, at, count)?.drain))
}

/// The row of the drain without transactions, and the ratio of the drain
/// with them (`with`, the end-to-end row's) to it.
fn plain_row(with: f64, plain_rates: &[f64]) -> Row {
    let without = median(plain_rates);
    let each = plain_rates.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
    Row {
        what: "end to end, kafka.transactions = false",
        per_sec: without,
        note: format!(
            "with transactions (the default, above) {:.2}x this (target: at least 0.9x); rates per round {each}",
            with / without
        ),
    }
}

/// The reads made during each end-to-end round's drain: p50, p99 and max
/// of all rounds together and of each, over HTTP and from Redis directly.
fn drain_reads_line(rounds: &[super::probe::Reads]) -> String {
    let stats = |ms: &[f64]| {
        if ms.is_empty() {
            "no answered reads".to_string()
        } else {
            let max = ms[ms.len() - 1];
            format!(
                "p50 {:.1} / p99 {:.1} / max {max:.1} ms ({} reads)",
                percentile(ms, 0.5),
                percentile(ms, 0.99),
                ms.len()
            )
        }
    };
    let all = |pick: &dyn Fn(&super::probe::Reads) -> &Vec<f64>| {
        let mut v: Vec<f64> = rounds.iter().flat_map(|r| pick(r).iter().copied()).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let each: Vec<String> = rounds
        .iter()
        .enumerate()
        .map(|(i, r)| {
            format!(
                "round {}: HTTP {}, kept alive {}, Redis {}",
                i + 1,
                stats(&r.http),
                stats(&r.kept),
                stats(&r.redis)
            )
        })
        .collect();
    format!(
        "reads during the drain, each kind one every 20 ms: over HTTP (top 10 and a player's rank) on a new \
         connection each {}, on one kept-alive connection {}; the top 10 from Redis directly (ZRANGE) {}; {}",
        stats(&all(&|r| &r.http)),
        stats(&all(&|r| &r.kept)),
        stats(&all(&|r| &r.redis)),
        each.join("; ")
    )
}
