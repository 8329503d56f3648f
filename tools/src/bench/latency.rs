//! The latency run: the broker's own latency and rankflow's at a steady
//! produce rate, on Apache Kafka or librdkafka's mock cluster.

use super::*;

/// Quantile from Prometheus histogram buckets (upper bounds, cumulative counts).
pub(super) fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    let target = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, cum) in buckets {
        if cum >= target {
            let span = cum - prev.1;
            let frac = if span > 0.0 { (target - prev.1) / span } else { 1.0 };
            return prev.0 + (le - prev.0) * frac;
        }
        prev = (le, cum);
    }
    prev.0
}

/// rankflow's `/metrics` page.
pub(super) async fn scrape(listen: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(listen).await.map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.map_err(|e| e.to_string())?;
    Ok(text)
}

/// Waits until the rankflow serving `listen` holds `partitions` partitions,
/// so that a latency run does not count the group's join.
pub(super) async fn wait_assigned(listen: &str, partitions: i32) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let want = format!("rankflow_assigned_partitions {partitions}");
    while Instant::now() < deadline {
        if scrape(listen).await.is_ok_and(|text| text.lines().any(|l| l == want)) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("rankflow was not assigned {partitions} partitions within 90s (a broker group stall?)"))
}

/// A histogram's cumulative buckets (upper bound in seconds, count) in
/// scraped metrics `text`, from its series whose labels contain `labels`.
pub(super) fn histogram(text: &str, name: &str, labels: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out = Vec::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix(prefix.as_str()) {
            if !rest.contains(labels) {
                continue;
            }
            let le = rest.split("le=\"").nth(1).and_then(|x| x.split('"').next()).unwrap_or("");
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(0.0) };
            let v: f64 = l.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            out.push((le, v));
        }
    }
    out
}

/// Both consumers' `fetch.wait.max.ms` in the latency run. A broker answers
/// a fetch as soon as it has a record for it; this bounds the wait of a
/// fetch that finds none (each answered fetch costs the broker CPU).
pub(super) const LATENCY_FETCH_WAIT_MS: u32 = 5;

/// The result of the latency runs: rankflow's record-timestamp-to-applied
/// quantiles (ms), and the broker's own record-timestamp-to-read, measured
/// by a bare consumer alone just before.
pub(super) struct Latency {
    pub(super) rate: u64,
    pub(super) secs: u64,
    pub(super) p50: f64,
    pub(super) p99: f64,
    pub(super) max: f64,
    pub(super) floor_p50: f64,
    pub(super) floor_p99: f64,
    pub(super) floor_max: f64,
    /// Produce acknowledgements (send to ack, ms) during rankflow's run and
    /// during the bare consumer's: (p50, p99) each.
    pub(super) acks: (f64, f64),
    pub(super) floor_acks: (f64, f64),
    /// Dead letters (outputs) from their source record's timestamp to
    /// readable by a `read_committed` consumer: (p50, p99, max, count), ms.
    pub(super) visible: (f64, f64, f64, usize),
    /// Transaction commits (`rankflow_transaction_commit_seconds`): (p50, p99, count), ms.
    pub(super) commits: (f64, f64, f64),
}

/// p50 and p99 of sorted samples, (0, 0) for none.
pub(super) fn p50_p99(sorted: &[f64]) -> (f64, f64) {
    if sorted.is_empty() {
        (0.0, 0.0)
    } else {
        (percentile(sorted, 0.5), percentile(sorted, 0.99))
    }
}

impl Latency {
    pub(super) fn line(&self) -> String {
        format!(
            "latency at {} events/s for {}s (producer linger {PRODUCER_LINGER_MS} ms; record timestamp to applied, from \
             rankflow_event_latency_seconds buckets): p50 {:.1} ms, p99 {:.1} ms, max <= {:.0} ms\n\
             the broker's own, just before (a bare consumer alone, record timestamp to read): p50 {:.1} ms, p99 {:.1} ms, \
             max {:.0} ms\n\
             rankflow's share above the broker's: p50 +{:.1} ms, p99 +{:.1} ms\n\
             the broker's produce acknowledgements (send to ack): p50 {:.1} ms, p99 {:.1} ms during rankflow's run; \
             p50 {:.1} ms, p99 {:.1} ms during the bare consumer's\n\
             outputs visible (the {} dead letters, source record timestamp to read by a read_committed consumer): \
             p50 {:.1} ms, p99 {:.1} ms, max {:.0} ms; {:.0} transactions committed, commit p50 {:.1} ms, p99 {:.1} ms",
            self.rate,
            self.secs,
            self.p50,
            self.p99,
            self.max,
            self.floor_p50,
            self.floor_p99,
            self.floor_max,
            self.p50 - self.floor_p50,
            self.p99 - self.floor_p99,
            self.acks.0,
            self.acks.1,
            self.floor_acks.0,
            self.floor_acks.1,
            self.visible.3,
            self.visible.0,
            self.visible.1,
            self.visible.2,
            self.commits.2,
            self.commits.0,
            self.commits.1
        )
    }
}

/// The latency runs, one after the other, each on a fresh topic while
/// events are produced at `rate` for `secs`: a bare consumer (the broker's
/// own latency), then the rankflow binary.
/// A latency run's load: partitions, produce rate, length and stream.
#[derive(Clone, Copy)]
pub(super) struct LatencyRun {
    pub(super) partitions: i32,
    pub(super) rate: u64,
    pub(super) secs: u64,
    pub(super) stream: Stream,
}

pub(super) async fn latency(
    brokers: &str,
    redis_url: &str,
    conn: &RedisConn,
    run: LatencyRun,
    mock: Option<&Mock>,
) -> Result<Latency, String> {
    let LatencyRun { partitions, rate, secs, stream } = run;
    // The mock cluster does not take CreateTopics requests: its own call makes them.
    let make_topic = async |topic: &str, partitions: i32| match mock {
        Some(m) => {
            for (t, p) in [(topic.to_string(), partitions), (format!("{topic}.dlq"), 1)] {
                m.create_topic(&t, p, 1).map_err(|e| format!("mock cluster: create {t}: {e}"))?;
            }
            Ok(())
        }
        None => create_topic(brokers, topic, partitions).await,
    };
    let exe = rankflow_bin()?;
    let dir = tempfile_dir()?;
    let n = rate * secs;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();

    // The broker's own latency first, alone: a bare consumer's record
    // timestamp to read, the floor under rankflow's record-to-applied.
    // Alone, because on two cores a second consumer on the same broker
    // slows both.
    eprintln!("bench: the broker's latency at {rate} events/s for {secs}s (a bare consumer)");
    let floor_topic = format!("bench-{run}-latency-floor");
    make_topic(&floor_topic, partitions).await?;
    let reader = {
        let (brokers, topic) = (brokers.to_string(), floor_topic.clone());
        std::thread::spawn(move || bare_read_latency(&brokers, &topic, partitions, n))
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, floor_acks) = produce(brokers, &floor_topic, n, 9, rate, stream).await?;
    let mut floor = reader.join().map_err(|_| "latency reader panicked".to_string())??;
    floor.sort_by(f64::total_cmp);
    let (floor_p50, floor_p99) = p50_p99(&floor);
    let floor_max = floor.last().copied().unwrap_or(0.0);

    eprintln!("bench: rankflow's latency at {rate} events/s for {secs}s");
    flush(conn).await?;
    let topic = format!("bench-{run}-latency");
    make_topic(&topic, partitions).await?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let group = format!("bench-lat-{run}");
    let cfg = bench_config(
        brokers,
        redis_url,
        &topic,
        &group,
        &listen,
        &format!("\"fetch.wait.max.ms\" = {LATENCY_FETCH_WAIT_MS}\n"),
    )
    .replace("[worker]\n", "[worker]\nbatch_linger = \"2ms\"\n");
    // The mock cluster does not keep transactions' offsets (see the demo).
    let cfg = if mock.is_some() { without_transactions(&cfg) } else { cfg };
    let path = dir.join("latency.toml");
    std::fs::write(&path, &cfg).map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(&exe)
        .args(["run", "--config"])
        .arg(&path)
        .env("RUST_LOG", "warn")
        .spawn()
        .map_err(|e| e.to_string())?;
    if let Err(e) = wait_assigned(&listen, partitions).await {
        stop(&mut child);
        return Err(e);
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let outputs = {
        let (brokers, dlq, done) = (brokers.to_string(), format!("{topic}.dlq"), done.clone());
        std::thread::spawn(move || visibility(&brokers, &dlq, done))
    };
    // As long as the bare consumer had between its assignment and the first record.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, acks) = produce(brokers, &topic, n, 9, rate, stream).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let commits = Committed::new(brokers, &group, &topic, partitions)?;
    while commits.sum() < n as i64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut visible = outputs.join().map_err(|_| "visibility reader panicked".to_string())??;
    visible.sort_by(f64::total_cmp);
    let (visible_p50, visible_p99) = p50_p99(&visible);
    let text = scrape(&listen).await?;
    let buckets = histogram(&text, "rankflow_event_latency_seconds", "source=\"record\"");
    let commit_buckets = histogram(&text, "rankflow_transaction_commit_seconds", "");
    let commits = (
        bucket_quantile(&commit_buckets, 0.50) * 1000.0,
        bucket_quantile(&commit_buckets, 0.99) * 1000.0,
        commit_buckets.last().map_or(0.0, |b| b.1),
    );
    stop(&mut child);
    let _ = std::fs::remove_dir_all(&dir);
    let total = buckets.last().map_or(0.0, |b| b.1);
    let max = buckets.iter().find(|(_, c)| *c >= total).map_or(0.0, |b| b.0) * 1000.0;
    Ok(Latency {
        rate,
        secs,
        p50: bucket_quantile(&buckets, 0.50) * 1000.0,
        p99: bucket_quantile(&buckets, 0.99) * 1000.0,
        max,
        floor_p50,
        floor_p99,
        floor_max,
        acks: p50_p99(&acks),
        floor_acks: p50_p99(&floor_acks),
        visible: (visible_p50, visible_p99, visible.last().copied().unwrap_or(0.0), visible.len()),
        commits,
    })
}

pub(super) type Mock = rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>;

/// `rankflow-tools bench latency`: the latency run alone. With `brokers` =
/// "mock", against librdkafka's mock cluster, an in-memory Kafka broker that
/// this process runs on a loopback port for the run: the same run with a
/// broker inside this process, to show rankflow's own share.
pub async fn latency_only(
    brokers: &str,
    redis_url: &str,
    partitions: i32,
    rate: u64,
    secs: u64,
    stream: Stream,
) -> Result<(), String> {
    let mock = if brokers == "mock" {
        let m = rdkafka::mocking::MockCluster::new(1).map_err(|e| format!("mock cluster: {e}"))?;
        eprintln!("bench: librdkafka's mock cluster at {}", m.bootstrap_servers());
        Some(m)
    } else {
        None
    };
    let brokers = mock.as_ref().map_or_else(|| brokers.to_string(), |m| m.bootstrap_servers());
    let cfg_text = bench_config(&brokers, redis_url, "unused", "unused", "127.0.0.1:0", "");
    let (_, conn, _) = open_store(&cfg_text).await?;
    let lat = latency(&brokers, redis_url, &conn, LatencyRun { partitions, rate, secs, stream }, mock.as_ref()).await?;
    println!("{}", lat.line());
    Ok(())
}
