//! `bench drain-reads`: reads while a backlog drains, three ways on the same
//! backlog: calls sized by `max_events_per_call` alone (`max_call_time` so
//! long it never binds), calls bounded by `max_call_time` (the worker's
//! default unless `--max-call-time` says otherwise) with reads on the
//! primary, and the same with reads on a replica
//! (`redis.read_from = "replica"`). Each is the release binary draining the
//! topic under a fresh group on a flushed Redis, with the probe's reads (see
//! `probe.rs`: over HTTP kept alive and on new connections, and a bare
//! `ZRANGE`, on the node the HTTP reads go to).

use super::*;

/// One drain's figures.
struct Run {
    what: String,
    rate: f64,
    reads: super::probe::Reads,
    /// What the primary spent meanwhile.
    redis: RedisStats,
}

/// `rankflow-tools bench drain-reads`; `bound` is the bounded drains'
/// `worker.max_call_time` (`None`: the worker's default, left unset in
/// their config).
pub async fn drain_reads(
    brokers: &str,
    redis_url: &str,
    replica_url: &str,
    count: u64,
    bound: Option<&str>,
) -> Result<(), String> {
    let exe = rankflow_bin()?;
    let dir = tempfile_dir()?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let topic = format!("drain-{run}");
    let partitions = 4;
    let cfg_text = bench_config(brokers, redis_url, &topic, "unused", "127.0.0.1:0", "");
    let (_, conn, _) = open_store(&cfg_text).await?;
    create_topic(brokers, &topic, partitions).await?;
    eprintln!("bench: producing {count} records to {topic}");
    produce(brokers, &topic, count, 11, 0, Stream { bad_ratio: 0.01, dup_ratio: 0.02 }).await?;
    let named = bound.map_or("the default max_call_time".to_string(), |b| format!("max_call_time {b}"));
    let ways: [(String, Option<&str>, bool); 3] = [
        ("calls by max_events_per_call only (max_call_time = 10s), reads on the primary".into(), Some("10s"), false),
        (format!("{named}, reads on the primary"), bound, false),
        (format!("{named}, reads on a replica"), bound, true),
    ];
    let mut runs = Vec::new();
    for (i, (what, call_time, replica)) in ways.into_iter().enumerate() {
        eprintln!("bench: drain {} of 3: {what}", i + 1);
        flush(&conn).await?;
        let group = format!("drain-{run}-{i}");
        let listen = format!("127.0.0.1:{}", free_port()?);
        let mut cfg = bench_config(brokers, redis_url, &topic, &group, &listen, "");
        if let Some(t) = call_time {
            cfg = cfg.replace("[worker]\n", &format!("[worker]\nmax_call_time = \"{t}\"\n"));
        }
        if replica {
            cfg = cfg
                .replace("[http]\n", &format!("read_from = \"replica\"\nreplica_urls = [\"{replica_url}\"]\n[http]\n"));
        }
        let at = GroupTopic { brokers, group: &group, topic: &topic, partitions };
        let probe_at = if replica { replica_url } else { redis_url };
        let before = redis_stats(&conn).await?;
        let d = run_to_end(&exe, &dir, &cfg, &listen, probe_at, &at, count)?;
        let mut redis = RedisStats::default();
        redis.add_between(&before, &redis_stats(&conn).await?);
        runs.push(Run { what, rate: rate(count, d.drain), reads: d.reads, redis });
    }
    let _ = std::fs::remove_dir_all(&dir);
    let p = |ms: &[f64], q: f64| if ms.is_empty() { f64::NAN } else { percentile(ms, q) };
    println!("\nreads during a drain of {count} records (one every 20 ms; ms):\n");
    println!(
        "| drain | records/s | primary CPU µs/record | apply calls (mean ms) | HTTP p50 / p99, a new connection each | \
         HTTP p50 / p99, kept alive | bare ZRANGE p50 / p99 |"
    );
    println!("|---|---:|---:|---:|---|---|---|");
    for r in &runs {
        let calls = r.redis.calls.get("EVALSHA").copied().unwrap_or(0.0);
        let usec = r.redis.usec.get("EVALSHA").copied().unwrap_or(0.0);
        println!(
            "| {} | {:.0} | {:.1} | {:.0} ({:.1}) | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} / {:.1} |",
            &r.what,
            r.rate,
            r.redis.cpu * 1e6 / count as f64,
            calls,
            usec / calls.max(1.0) / 1000.0,
            p(&r.reads.http, 0.5),
            p(&r.reads.http, 0.99),
            p(&r.reads.kept, 0.5),
            p(&r.reads.kept, 0.99),
            p(&r.reads.redis, 0.5),
            p(&r.reads.redis, 0.99)
        );
    }
    println!(
        "\ndrain with {named} {:.2}x the drain without the bound (target at least 0.85x); primary p99 {:.1} ms \
         (target at most 30 ms); replica p99 {:.1} ms (target at most 20 ms); on a new connection each: primary p99 \
         {:.1} ms, replica p99 {:.1} ms",
        runs[1].rate / runs[0].rate,
        p(&runs[1].reads.kept, 0.99),
        p(&runs[2].reads.kept, 0.99),
        p(&runs[1].reads.http, 0.99),
        p(&runs[2].reads.http, 0.99)
    );
    Ok(())
}
