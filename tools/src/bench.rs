//! The benchmark harness (`rankflow-tools bench ...`): rankflow measured side by
//! side with the limits of the machine in one run, reported as ratios,
//! because shared machines are noisy and only ratios compare across runs.
//!
//! `bench pipeline` produces N generated events, then measures, in order:
//! the broker ceiling (a bare consumer that only reads the topic), the Redis
//! ceiling (the same events' bare writes, pipelined, no scripts), rankflow's
//! store path alone (pre-parsed events through the store), rankflow end
//! to end (the real binary, from start until the group's committed offsets
//! reach the log end, with its peak resident memory), and latency at a
//! steady produce rate. `bench read` fills a board of 1,000,000 members
//! through the store and times the read API in-process (server-side)
//! against the bare Redis commands each read needs.
//!
//! It is a tool, not part of the product: it wipes the Redis it runs
//! against between rows, so it refuses to start on one that holds keys it
//! did not create (see [`flush`]) unless `--wipe-redis` says it may.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::json;

use std::sync::atomic::{AtomicBool, Ordering};

use rankflow::board::{Decision, Router};
use rankflow::config::{self, Settings};
use rankflow::event::{self, Event, Parsed};
use rankflow::keys;
use rankflow::store::{push_write, RedisConn, Store, TagBatch, Tails};

use crate::generator::Generator;

/// The boards every pipeline benchmark uses: a match event fans out to six
/// period keys on two boards, a lap to two keys of a split board.
pub const BENCH_BOARDS: &str = r#"
[[board]]
id = "points"
on = ["match_finished"]
mode = "sum"
periods = ["daily", "weekly", "all_time"]

[[board]]
id = "best"
on = ["match_finished"]
mode = "best"
periods = ["daily", "weekly", "all_time"]

[[board]]
id = "laps"
on = ["lap_time"]
mode = "best"
order = "asc"
periods = ["daily", "all_time"]
split_by = "track"
"#;

fn bench_config(brokers: &str, redis: &str, topic: &str, group: &str, listen: &str, extra_options: &str) -> String {
    format!(
        "[kafka]\nbrokers = \"{brokers}\"\ntopics = [\"{topic}\"]\ngroup_id = \"{group}\"\ndead_letter_topic = \"{topic}.dlq\"\n\
         [kafka.options]\n\"session.timeout.ms\" = 30000\n{extra_options}\n[redis]\nurl = \"{redis}\"\n[http]\nlisten = \"{listen}\"\n{BENCH_BOARDS}"
    )
}

fn client(brokers: &str) -> ClientConfig {
    rankflow::kafka::client::bare(brokers)
}

fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// One row of the result table.
struct Row {
    what: &'static str,
    per_sec: f64,
    note: String,
}

/// Set once every key in the benchmark's Redis database is its own: the
/// database was empty at the first [`flush`], or `--wipe-redis` allowed it.
static OWNS_REDIS: AtomicBool = AtomicBool::new(false);

/// `--wipe-redis`: the benchmark may wipe a database that holds other keys.
pub fn allow_wipe() {
    OWNS_REDIS.store(true, Ordering::Relaxed);
}

/// Empties the benchmark's Redis database before a row. The first call
/// refuses a database that holds keys (someone else's data: a production
/// URL given by mistake) unless [`allow_wipe`] was called.
async fn flush(conn: &RedisConn) -> Result<(), String> {
    let mut c = conn.clone();
    if !OWNS_REDIS.load(Ordering::Relaxed) {
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut c).await.map_err(|e| format!("DBSIZE: {e}"))?;
        if keys > 0 {
            return Err(format!(
                "the Redis database holds {keys} keys this benchmark did not create, and the benchmark empties \
                 its database between rows: point it at an empty Redis, or pass --wipe-redis to let it wipe this one"
            ));
        }
        OWNS_REDIS.store(true, Ordering::Relaxed);
    }
    redis::cmd("FLUSHDB").query_async::<()>(&mut c).await.map_err(|e| format!("FLUSHDB: {e}"))
}

/// The rankflow binary the end-to-end and latency rows run: `$RANKFLOW_BIN`,
/// or `rankflow` beside this tool (cargo builds both into one directory).
fn rankflow_bin() -> Result<std::path::PathBuf, String> {
    if let Some(p) = std::env::var_os("RANKFLOW_BIN") {
        return Ok(p.into());
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = me.with_file_name("rankflow");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!("no rankflow binary at {} (build it, or set RANKFLOW_BIN)", bin.display()))
    }
}

/// Produces `count` generated events, at `rate_per_sec` if it is not 0.
/// Returns the time it took and, for a paced run, each record's time from
/// send to the broker's acknowledgement (ms, sorted): how far the broker's
/// write path lags.
async fn produce(
    brokers: &str,
    topic: &str,
    count: u64,
    seed: u64,
    rate_per_sec: u64,
) -> Result<(Duration, Vec<f64>), String> {
    let producer: FutureProducer = client(brokers)
        .set("linger.ms", PRODUCER_LINGER_MS)
        .set("message.timeout.ms", "60000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .map_err(|e| e.to_string())?;
    let now = chrono::Utc::now().timestamp_millis();
    let mut g = Generator::new(seed, 100_000, now - 1000, 0);
    let started = Instant::now();
    let mut pending = Vec::new();
    let mut acks = Vec::new();
    for i in 0..count {
        if rate_per_sec > 0 {
            let due = started + Duration::from_secs_f64(i as f64 / rate_per_sec as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let s = g.next_sample();
        let f = producer
            .send_result(FutureRecord::to(topic).key(&s.key).payload(&s.value))
            .map_err(|(e, _)| e.to_string())?;
        if rate_per_sec > 0 {
            let sent = Instant::now();
            acks.push(tokio::spawn(async move {
                let r = f.await.map_err(|_| "cancelled".to_string())?.map_err(|(e, _)| e.to_string());
                r.map(|_| sent.elapsed().as_secs_f64() * 1000.0)
            }));
            continue;
        }
        pending.push(f);
        if pending.len() >= 50_000 {
            for f in pending.drain(..) {
                f.await.map_err(|_| "cancelled".to_string())?.map_err(|(e, _)| e.to_string())?;
            }
        }
    }
    for f in pending {
        f.await.map_err(|_| "cancelled".to_string())?.map_err(|(e, _)| e.to_string())?;
    }
    let mut ack_ms = Vec::with_capacity(acks.len());
    for a in acks {
        ack_ms.push(a.await.map_err(|e| e.to_string())??);
    }
    ack_ms.sort_by(f64::total_cmp);
    Ok((started.elapsed(), ack_ms))
}

async fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), String> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        client(brokers).create().map_err(|e| e.to_string())?;
    let dlq = format!("{topic}.dlq");
    let topics = vec![
        NewTopic::new(topic, partitions, TopicReplication::Fixed(1)),
        NewTopic::new(&dlq, 1, TopicReplication::Fixed(1)),
    ];
    let names: Vec<String> = topics.iter().map(|t| t.name.to_string()).collect();
    let res = admin.create_topics(&topics, &AdminOptions::new()).await.map_err(|e| e.to_string())?;
    for (r, n) in res.into_iter().zip(names) {
        r.map_err(|(_, e)| format!("create {n}: {e}"))?;
    }
    Ok(())
}

/// A consumer of its own group, assigned every partition of `topic` from the beginning.
fn assigned_consumer(
    brokers: &str,
    group_prefix: &str,
    topic: &str,
    partitions: i32,
    extra: &[(&str, &str)],
) -> Result<BaseConsumer, String> {
    let mut config = client(brokers);
    config
        .set("group.id", format!("{group_prefix}-{}", uuid::Uuid::new_v4().simple()))
        .set("enable.auto.commit", "false");
    for (k, v) in extra {
        config.set(*k, *v);
    }
    let c: BaseConsumer = config.create().map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).map_err(|e| e.to_string())?;
    }
    c.assign(&tpl).map_err(|e| e.to_string())?;
    Ok(c)
}

/// The broker ceiling: a bare consumer reading every record of the topic.
fn bare_read(brokers: &str, topic: &str, partitions: i32, count: u64) -> Result<Duration, String> {
    let c = assigned_consumer(brokers, "bench-read", topic, partitions, &[])?;
    let started = Instant::now();
    let mut n = 0u64;
    let mut bytes = 0usize;
    while n < count {
        if started.elapsed() > Duration::from_secs(600) {
            return Err(format!("bare read stalled at {n} of {count}"));
        }
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.map_err(|e| e.to_string())?;
            bytes += m.payload().map_or(0, |p| p.len());
            n += 1;
        }
    }
    let d = started.elapsed();
    std::hint::black_box(bytes);
    Ok(d)
}

/// Record timestamp to read, in ms, for `count` records read as they arrive.
fn bare_read_latency(brokers: &str, topic: &str, partitions: i32, count: u64) -> Result<Vec<f64>, String> {
    let c = assigned_consumer(
        brokers,
        "bench-lat-read",
        topic,
        partitions,
        &[("fetch.wait.max.ms", &LATENCY_FETCH_WAIT_MS.to_string())],
    )?;
    let mut out = Vec::with_capacity(count as usize);
    let started = Instant::now();
    while (out.len() as u64) < count && started.elapsed() < Duration::from_secs(600) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            if let Some(ts) = m.timestamp().to_millis() {
                out.push((chrono::Utc::now().timestamp_millis() - ts) as f64);
            }
        }
    }
    Ok(out)
}

/// Reads the topic back as parsed events with their coordinates, for the
/// store-path and bare-write measurements (outside any timing).
fn read_events(
    brokers: &str,
    topic: &str,
    partitions: i32,
    count: u64,
    router: &Router,
) -> Result<Vec<(i32, i64, i64, Event)>, String> {
    let c = assigned_consumer(brokers, "bench-load", topic, partitions, &[])?;
    let mut out = Vec::with_capacity(count as usize);
    let mut n = 0;
    let started = Instant::now();
    while n < count && started.elapsed() < Duration::from_secs(600) {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.map_err(|e| e.to_string())?;
            n += 1;
            if let Parsed::Event(e) = event::parse(m.payload().unwrap_or_default(), 65536, |t| router.listens(t)) {
                out.push((m.partition(), m.offset(), m.timestamp().to_millis().unwrap_or(e.ts_ms), e));
            }
        }
    }
    Ok(out)
}

/// The Redis ceiling: per event one `SET NX EX` marker, and per board
/// period one `ZINCRBY`/`ZADD GT`/`ZADD LT`, pipelined 1000 events at a time,
/// two pipelines in flight.
async fn bare_writes(conn: &RedisConn, router: &Router, events: &[(i32, i64, i64, Event)]) -> Result<Duration, String> {
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
async fn store_path(
    store: &Store,
    router: &Router,
    events: &[(i32, i64, i64, Event)],
    batch: usize,
) -> Result<Duration, String> {
    let fields: HashMap<i32, String> = (0..64).map(|p| (p, keys::offsets_field("bench", p))).collect();
    let prepare = |chunk: &[(i32, i64, i64, Event)]| {
        let plans: Vec<Vec<(usize, Decision)>> = chunk.iter().map(|(_, _, rts, e)| router.plan(e, *rts)).collect();
        let mut tags: Vec<TagBatch<'_>> = Vec::new();
        for ((p, off, _, e), plan) in chunk.iter().zip(&plans) {
            for (_, d) in plan {
                if let Decision::Write(w) = d {
                    push_write(&mut tags, w, e, &fields[p], *off);
                }
            }
        }
        store.prepare(&tags)
    };
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
            async move { store.apply_prepared(&calls).await.map(|_| ()).map_err(|e| e.to_string()) }
        })
        .buffered(2);
    while let Some(r) = sent.next().await {
        r?;
    }
    Ok(started.elapsed())
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Stops a `rankflow run` child the way an operator would (SIGTERM) and waits for it.
fn stop(child: &mut std::process::Child) {
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// CPU seconds (user + system) a process has used so far, 0 if unknown.
fn proc_cpu_secs(pid: u32) -> f64 {
    // Linux reports them in clock ticks of USER_HZ, which is 100 on every
    // architecture it ships for.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses: state is
    // the first, utime the 12th and stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// Reads a group's committed offsets, with one client for the whole run: a
/// client made for every look would load the broker it measures.
struct Committed {
    consumer: BaseConsumer,
    partitions: TopicPartitionList,
}

impl Committed {
    fn new(brokers: &str, group: &str, topic: &str, partitions: i32) -> Result<Committed, String> {
        let consumer = client(brokers).set("group.id", group).create::<BaseConsumer>().map_err(|e| e.to_string())?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        Ok(Committed { consumer, partitions: tpl })
    }

    /// The sum of the committed offsets, -1 if the broker did not answer.
    fn sum(&self) -> i64 {
        match self.consumer.committed_offsets(self.partitions.clone(), Duration::from_secs(10)) {
            Ok(t) => t.elements().iter().map(|e| if let Offset::Offset(o) = e.offset() { o } else { 0 }).sum(),
            Err(_) => -1,
        }
    }
}

/// A consumer group's position on a topic.
#[derive(Clone, Copy)]
struct GroupTopic<'a> {
    brokers: &'a str,
    group: &'a str,
    topic: &'a str,
    partitions: i32,
}

/// Runs the real binary until its group has committed `count` records.
/// Returns the elapsed time, peak resident memory (KiB) and the CPU seconds
/// the process used.
fn run_to_end(
    exe: &Path,
    dir: &Path,
    cfg: &str,
    at: &GroupTopic<'_>,
    count: u64,
) -> Result<(Duration, u64, f64), String> {
    let GroupTopic { brokers, group, topic, partitions } = *at;
    let path = dir.join(format!("{group}.toml"));
    std::fs::write(&path, cfg).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join(format!("{group}.log"))).map_err(|e| e.to_string())?;
    let commits = Committed::new(brokers, group, topic, partitions)?;
    let started = Instant::now();
    let mut child = std::process::Command::new(exe)
        .args(["run", "--config"])
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stderr(log)
        .spawn()
        .map_err(|e| e.to_string())?;
    let pid = child.id();
    let mut peak = 0;
    let result = loop {
        peak = peak.max(proc_status_kib(pid, "VmHWM:"));
        if commits.sum() >= count as i64 {
            break Ok((started.elapsed(), peak));
        }
        if started.elapsed() > Duration::from_secs(900) {
            break Err("end-to-end run did not finish in 15 minutes".to_string());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    peak = peak.max(proc_status_kib(pid, "VmHWM:"));
    let cpu = proc_cpu_secs(pid);
    stop(&mut child);
    result.map(|(d, _)| (d, peak, cpu))
}

/// Quantile from Prometheus histogram buckets (upper bounds, cumulative counts).
fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
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
async fn scrape(listen: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(listen).await.map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.map_err(|e| e.to_string())?;
    Ok(text)
}

/// Waits until the rankflow serving `listen` holds `partitions` partitions,
/// so that a latency run does not count the group's join.
async fn wait_assigned(listen: &str, partitions: i32) -> Result<(), String> {
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

async fn scrape_latency(listen: &str) -> Result<Vec<(f64, f64)>, String> {
    let text = scrape(listen).await?;
    let mut out = Vec::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("rankflow_event_latency_seconds_bucket{") {
            if !rest.contains("source=\"record\"") {
                continue;
            }
            let le = rest.split("le=\"").nth(1).and_then(|x| x.split('"').next()).unwrap_or("");
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(0.0) };
            let v: f64 = l.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            out.push((le, v));
        }
    }
    Ok(out)
}

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
}

/// `rankflow-tools bench pipeline`.
pub async fn pipeline(brokers: &str, redis_url: &str, run: PipelineRun) -> Result<(), String> {
    let PipelineRun { count, partitions, latency_rate, latency_secs, broker_pid, rounds } = run;
    let broker_cpu = || broker_pid.map_or(0.0, proc_cpu_secs);
    // CPU seconds over the run's events, as µs per event.
    let per = |secs: f64| secs * 1e6 / count as f64;
    let exe = rankflow_bin()?;
    let dir = tempfile_dir()?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let topic = format!("bench-{run}");
    let cfg_text = bench_config(brokers, redis_url, &topic, "unused", "127.0.0.1:0", "");
    let (settings, conn, store) = open_store(&cfg_text).await?;
    let router = Router::new(settings.boards.clone(), &settings.redis.key_prefix);

    create_topic(brokers, &topic, partitions).await?;
    eprintln!("bench: producing {count} events to {topic} ({partitions} partitions)");
    let (produced, _) = produce(brokers, &topic, count, 7, 0).await?;
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
    let (mut broker_rates, mut e2e_rates) = (Vec::new(), Vec::new());
    let (mut broker_alone_cpu, mut e2e_secs, mut peak_kib, mut worker_cpu, mut redis_cpu, mut broker_used) =
        (0.0, 0.0, 0, 0.0, 0.0, 0.0);
    for round in 1..=rounds {
        eprintln!("bench: broker ceiling (bare consumer, round {round} of {rounds})");
        let cpu_before = broker_cpu();
        broker_rates.push(rate(count, bare_read(brokers, &topic, partitions, count)?));
        broker_alone_cpu += broker_cpu() - cpu_before;

        eprintln!("bench: end to end (the rankflow binary until committed = log end, round {round} of {rounds})");
        flush(&conn).await?;
        let group = format!("bench-e2e-{run}-{round}");
        let cfg = bench_config(brokers, redis_url, &topic, &group, "127.0.0.1:0", "");
        let at = GroupTopic { brokers, group: &group, topic: &topic, partitions };
        let (before, cpu_before) = (redis_stats(&conn).await?.cpu, broker_cpu());
        let (took, peak, worker) = run_to_end(&exe, &dir, &cfg, &at, count)?;
        redis_cpu += redis_stats(&conn).await?.cpu - before;
        broker_used += broker_cpu() - cpu_before;
        e2e_rates.push(rate(count, took));
        e2e_secs += took.as_secs_f64();
        peak_kib = peak_kib.max(peak);
        worker_cpu += worker;
    }
    // CPU per event over every round's events.
    let per_all = |secs: f64| per(secs) / rounds as f64;
    let broker = median(&broker_rates);
    let mut note = "1.00x".to_string();
    if broker_pid.is_some() {
        note += &format!("; broker CPU {:.1} µs/record", per_all(broker_alone_cpu));
    }
    rows.push(Row { what: "broker ceiling: bare consumer read", per_sec: broker, note });
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
            "{ratio:.2}x broker{each}, {:.2}x Redis ceiling; Redis busy {:.0}%; peak RSS {} MiB; {cpu}",
            e2e_rate / redis_ceiling,
            redis_cpu / e2e_secs * 100.0,
            peak_kib / 1024
        ),
    });

    let lat = latency(brokers, redis_url, &conn, partitions, latency_rate, latency_secs, None).await?;

    let _ = std::fs::remove_dir_all(&dir);
    print_rows(&rows, &notes);
    println!("\n{}", lat.line());
    println!(
        "{}",
        json!({"produce": rows[0].per_sec, "broker": broker, "redis": redis_ceiling, "store": store_rate,
        "store_lean": lean_rate, "e2e": e2e_rate, "peak_rss_mib": peak_kib / 1024, "p50_ms": lat.p50, "p99_ms": lat.p99,
        "max_ms": lat.max, "broker_p50_ms": lat.floor_p50, "broker_p99_ms": lat.floor_p99})
    );
    Ok(())
}

/// The bench producer's linger. tansu's cost is per produce request:
/// at 5,000 events/s with a 5 ms linger the broker itself fell seconds
/// behind (acks at p50 1.3 s); at 20 ms it keeps up (acks at p50 18 ms).
/// The linger is part of every measured latency, rankflow's and the
/// broker's alike, since record timestamps are taken when a record is sent.
const PRODUCER_LINGER_MS: &str = "20";

/// Both consumers' `fetch.wait.max.ms` in the latency run. tansu answers a
/// fetch only after its full wait, data or not, so this is part of the
/// latency; a shorter wait means more fetches, each costing tansu CPU.
const LATENCY_FETCH_WAIT_MS: u32 = 5;

/// The result of the latency runs: rankflow's record-timestamp-to-applied
/// quantiles (ms), and the broker's own record-timestamp-to-read, measured
/// by a bare consumer alone just before.
struct Latency {
    rate: u64,
    secs: u64,
    p50: f64,
    p99: f64,
    max: f64,
    floor_p50: f64,
    floor_p99: f64,
    floor_max: f64,
    /// Produce acknowledgements (send to ack, ms) during rankflow's run and
    /// during the bare consumer's: (p50, p99) each.
    acks: (f64, f64),
    floor_acks: (f64, f64),
}

/// p50 and p99 of sorted samples, (0, 0) for none.
fn p50_p99(sorted: &[f64]) -> (f64, f64) {
    if sorted.is_empty() {
        (0.0, 0.0)
    } else {
        (percentile(sorted, 0.5), percentile(sorted, 0.99))
    }
}

impl Latency {
    fn line(&self) -> String {
        format!(
            "latency at {} events/s for {}s (producer linger {PRODUCER_LINGER_MS} ms; record timestamp to applied, from \
             rankflow_event_latency_seconds buckets): p50 {:.1} ms, p99 {:.1} ms, max <= {:.0} ms\n\
             the broker's own, just before (a bare consumer alone, record timestamp to read): p50 {:.1} ms, p99 {:.1} ms, \
             max {:.0} ms\n\
             rankflow's share above the broker's: p50 +{:.1} ms, p99 +{:.1} ms\n\
             the broker's produce acknowledgements (send to ack): p50 {:.1} ms, p99 {:.1} ms during rankflow's run; \
             p50 {:.1} ms, p99 {:.1} ms during the bare consumer's",
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
            self.floor_acks.1
        )
    }
}

/// The latency runs, one after the other, each on a fresh topic while
/// events are produced at `rate` for `secs`: a bare consumer (the broker's
/// own latency), then the rankflow binary.
async fn latency(
    brokers: &str,
    redis_url: &str,
    conn: &RedisConn,
    partitions: i32,
    rate: u64,
    secs: u64,
    mock: Option<&Mock>,
) -> Result<Latency, String> {
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
    let (_, floor_acks) = produce(brokers, &floor_topic, n, 9, rate).await?;
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
    .replace("[http]", "[worker]\nbatch_linger = \"2ms\"\n[http]");
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
    // As long as the bare consumer had between its assignment and the first record.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, acks) = produce(brokers, &topic, n, 9, rate).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let commits = Committed::new(brokers, &group, &topic, partitions)?;
    while commits.sum() < n as i64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let buckets = scrape_latency(&listen).await?;
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
    })
}

type Mock = rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>;

/// `rankflow-tools bench latency`: the latency run alone. With `brokers` =
/// "mock", against librdkafka's mock cluster, an in-memory Kafka broker that
/// this process runs on a loopback port for the run: the same run with a
/// broker far faster than tansu, to show rankflow's own share.
pub async fn latency_only(brokers: &str, redis_url: &str, partitions: i32, rate: u64, secs: u64) -> Result<(), String> {
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
    let lat = latency(&brokers, redis_url, &conn, partitions, rate, secs, mock.as_ref()).await?;
    println!("{}", lat.line());
    Ok(())
}

/// Redis's own CPU seconds so far (`INFO cpu`, user + sys) and the
/// microseconds it has spent in each command (`INFO commandstats`), read
/// with one `INFO`.
#[derive(Default)]
struct RedisStats {
    cpu: f64,
    usec: HashMap<String, f64>,
}

impl RedisStats {
    /// Adds what Redis used between two readings.
    fn add_between(&mut self, before: &RedisStats, after: &RedisStats) {
        self.cpu += after.cpu - before.cpu;
        for (k, v) in &after.usec {
            *self.usec.entry(k.clone()).or_default() += v - before.usec.get(k).copied().unwrap_or(0.0);
        }
    }
}

async fn redis_stats(conn: &RedisConn) -> Result<RedisStats, String> {
    let mut c = conn.clone();
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .map_err(|e| format!("INFO: {e}"))?;
    let cpu = info
        .lines()
        .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum();
    let usec = info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let usec = rest.split(',').find_map(|kv| kv.strip_prefix("usec="))?.parse().ok()?;
            Some((name.to_uppercase(), usec))
        })
        .collect();
    Ok(RedisStats { cpu, usec })
}

/// Where Redis's time went in one phase (`spent`: what Redis used during
/// it), per event: its CPU, and each command's share (for scripts: the
/// commands inside them, and the rest, which is the interpreter and the
/// calls' own cost).
fn breakdown(what: &str, n: u64, spent: &RedisStats) -> String {
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
async fn store_rows(
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
    for round in 1..=rounds {
        for (p, (what, through)) in phases.iter().enumerate() {
            eprintln!("bench: {what} ({n} events, round {round} of {rounds})");
            flush(conn).await?;
            let before = redis_stats(conn).await?;
            let elapsed = match through {
                None => bare_writes(conn, &router, events).await?,
                Some(r) => store_path(store, r, events, settings.worker.batch_size).await?,
            };
            let after = redis_stats(conn).await?;
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
    Ok((rows, notes))
}

/// Each round's rate over its own round's ceiling: their median, and the
/// rounds listed (" (rounds: 0.91x, 0.95x, 0.93x)"; nothing for one round).
fn round_ratios(rates: &[f64], ceilings: &[f64]) -> (f64, String) {
    let ratios: Vec<f64> = rates.iter().zip(ceilings).map(|(r, c)| r / c).collect();
    let each = if ratios.len() > 1 {
        format!(" (rounds: {})", ratios.iter().map(|r| format!("{r:.2}x")).collect::<Vec<_>>().join(", "))
    } else {
        String::new()
    };
    (median(&ratios), each)
}

/// The median of a few values (the mean of the middle two for an even count).
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.is_empty() {
        0.0
    } else if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Settings from a config text, and a store on its Redis with the apply
/// script loaded.
/// The benchmark's boards without dense-rank indexes.
fn lean_boards() -> Result<Vec<rankflow::board::Board>, String> {
    let text = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n{}",
        BENCH_BOARDS.replace("[[board]]", "[[board]]\ndense_rank = false")
    );
    Ok(config::load_str(&text, Vec::new()).map_err(|e| e.to_string())?.boards)
}

async fn open_store(cfg_text: &str) -> Result<(Settings, RedisConn, Store), String> {
    let settings = config::load_str(cfg_text, Vec::new()).map_err(|e| e.to_string())?;
    let conn = RedisConn::connect(&settings.redis).await.map_err(|e| e.to_string())?;
    let store = Store::new(conn.clone(), settings.redis.dedupe_ttl);
    store.load_script().await.map_err(|e| e.to_string())?;
    Ok((settings, conn, store))
}

/// `rankflow-tools bench store`: the store path against the Redis ceiling alone,
/// on events generated in-process (no broker), for quick comparisons.
pub async fn store(redis_url: &str, count: u64, partitions: i32, rounds: usize) -> Result<(), String> {
    let cfg_text = bench_config("127.0.0.1:9", redis_url, "bench", "unused", "127.0.0.1:0", "");
    let (settings, conn, store) = open_store(&cfg_text).await?;
    let router = Router::new(settings.boards.clone(), &settings.redis.key_prefix);
    let now = chrono::Utc::now().timestamp_millis();
    let mut g = Generator::new(7, 100_000, now - 1000, 0);
    let mut offsets = vec![0i64; partitions.max(1) as usize];
    let mut events = Vec::with_capacity(count as usize);
    for i in 0..count {
        let s = g.next_sample();
        let p = (i % offsets.len() as u64) as usize;
        if let Parsed::Event(e) = event::parse(&s.value, 65536, |t| router.listens(t)) {
            events.push((p as i32, offsets[p], now, e));
        }
        offsets[p] += 1;
    }
    let (rows, notes) = store_rows(&conn, &store, &settings, &events, rounds).await?;
    print_rows(&rows, &notes);
    Ok(())
}

/// The result table, then where Redis's time went in each store-path phase.
fn print_rows(rows: &[Row], notes: &[String]) {
    println!("\n| measurement | events/s | ratio |");
    println!("|---|---:|---|");
    for r in rows {
        println!("| {} | {:.0} | {} |", r.what, r.per_sec, r.note);
    }
    println!("\nwhere Redis's time goes (INFO cpu and commandstats, per event):\n{}", notes.join("\n"));
}

fn tempfile_dir() -> Result<std::path::PathBuf, String> {
    let d = std::env::temp_dir().join(format!("rankflow-bench-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
    Ok(d)
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).map_err(|e| e.to_string())
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// `rankflow-tools bench read`: a 1,000,000-member board, the read API timed
/// in-process against the bare Redis commands.
pub async fn read(redis_url: &str, members: u64, samples: usize) -> Result<(), String> {
    use tower::ServiceExt;
    let cfg = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n[redis]\nurl = \"{redis_url}\"\n\
         [[board]]\nid = \"big\"\non = [\"m\"]\nmode = \"best\"\nperiods = [\"all_time\"]\n"
    );
    let (settings, conn, store) = open_store(&cfg).await?;
    let router = Arc::new(Router::new(settings.boards.clone(), "lb"));
    flush(&conn).await?;
    eprintln!("bench: filling a board of {members} members through the store");
    let mut g = rand_seed(5);
    let now = chrono::Utc::now().timestamp_millis();
    let events: Vec<(i32, i64, i64, Event)> = (0..members)
        .map(|i| {
            let e = Event {
                event_id: uuid::Builder::from_random_bytes(rand::Rng::random(&mut g)).into_uuid(),
                kind: "m".into(),
                player_id: format!("player-{i:07}"),
                score: rand::Rng::random_range(&mut g, 0..200_000),
                ts_ms: now,
                attrs: Default::default(),
            };
            (0, i as i64, now, e)
        })
        .collect();
    let fill = store_path(&store, &router, &events, 2000).await?;
    eprintln!("bench: filled in {:.1}s ({:.0} events/s through the store)", fill.as_secs_f64(), rate(members, fill));

    let health = Arc::new(rankflow::health::Health::default());
    let app = rankflow::http::app(rankflow::http::AppState::new(router.clone(), conn.clone(), health, 1000));
    let key = "lb:{big}:all";
    let dense_key = "lb:{big}:_dense:all";
    let mut rng = rand_seed(6);
    let mut results: Vec<(&str, Vec<f64>, Vec<f64>)> = Vec::new();
    for what in ["top 10", "player rank", "around me (radius 2)", "dense rank (top page)"] {
        let (mut api, mut bare) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for _ in 0..samples {
            let player = format!("player-{:07}", rand::Rng::random_range(&mut rng, 0..members));
            let uri = match what {
                "top 10" => "/v1/boards/big/top?limit=10".to_string(),
                "player rank" => format!("/v1/boards/big/players/{player}"),
                "around me (radius 2)" => format!("/v1/boards/big/players/{player}/around?radius=2"),
                _ => format!(
                    "/v1/boards/big/top?limit=10&rank=dense&offset={}",
                    rand::Rng::random_range(&mut rng, 0..members - 10)
                ),
            };
            let req = axum::http::Request::get(uri).body(axum::body::Body::empty()).map_err(|e| e.to_string())?;
            let t = Instant::now();
            let resp = app.clone().oneshot(req).await.map_err(|e| e.to_string())?;
            let _ = axum::body::to_bytes(resp.into_body(), 1 << 20).await;
            api.push(t.elapsed().as_secs_f64() * 1000.0);

            let mut c = conn.clone();
            let t = Instant::now();
            match what {
                "top 10" => {
                    let _: Vec<(String, f64)> = redis::cmd("ZRANGE")
                        .arg(key)
                        .arg(0)
                        .arg(9)
                        .arg("REV")
                        .arg("WITHSCORES")
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                "player rank" => {
                    let _: (Option<f64>, Option<i64>) = redis::pipe()
                        .zscore(key, &player)
                        .zrevrank(key, &player)
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                "around me (radius 2)" => {
                    let r: Option<i64> = redis::cmd("ZREVRANK")
                        .arg(key)
                        .arg(&player)
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                    let r = r.unwrap_or(0);
                    let _: Vec<(String, f64)> = redis::cmd("ZRANGE")
                        .arg(key)
                        .arg((r - 2).max(0))
                        .arg(r + 2)
                        .arg("REV")
                        .arg("WITHSCORES")
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                _ => {
                    let s: Option<f64> = redis::cmd("ZSCORE")
                        .arg(key)
                        .arg(&player)
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                    let _: i64 = redis::cmd("ZCOUNT")
                        .arg(dense_key)
                        .arg(format!("({}", s.unwrap_or(0.0)))
                        .arg("+inf")
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            bare.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        results.push((what, api, bare));
    }
    println!("\nboard of {members} members, {samples} samples each (ms):\n");
    println!("| read | API p50 | API p99 | bare Redis p50 | bare Redis p99 | bare commands |");
    println!("|---|---:|---:|---:|---:|---|");
    for (what, mut api, mut bare) in results {
        api.sort_by(f64::total_cmp);
        bare.sort_by(f64::total_cmp);
        let cmds = match what {
            "top 10" => "ZRANGE 0 9 REV WITHSCORES",
            "player rank" => "ZSCORE + ZREVRANK (pipelined)",
            "around me (radius 2)" => "ZREVRANK, then ZRANGE",
            _ => "ZSCORE, then ZCOUNT on the dense index",
        };
        println!(
            "| {what} | {:.3} | {:.3} | {:.3} | {:.3} | {cmds} |",
            percentile(&api, 0.5),
            percentile(&api, 0.99),
            percentile(&bare, 0.5),
            percentile(&bare, 0.99)
        );
    }
    Ok(())
}

fn rand_seed(seed: u64) -> rand::rngs::StdRng {
    rand::SeedableRng::seed_from_u64(seed)
}

#[cfg(test)]
mod tests {
    use super::{median, round_ratios};

    #[test]
    fn the_median_of_rounds_is_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&[1.10, 0.94, 1.05]), 1.05);
        assert_eq!(median(&[0.9, 1.3, 1.0, 1.2]), 1.1);
        assert_eq!(median(&[0.97]), 0.97);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn each_round_is_set_against_its_own_rounds_ceiling() {
        let (ratio, each) = round_ratios(&[90.0, 60.0, 120.0], &[100.0, 50.0, 100.0]);
        assert_eq!(ratio, 1.2);
        assert_eq!(each, " (rounds: 0.90x, 1.20x, 1.20x)");
        assert_eq!(round_ratios(&[80.0], &[100.0]), (0.8, String::new()));
    }
}
