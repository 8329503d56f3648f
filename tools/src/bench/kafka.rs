//! The broker side of the benchmark: producing the generated stream, bare
//! consumers (the broker ceiling), and running the rankflow binary until its
//! group has committed the stream.

use super::*;

/// Produces `count` generated records (`stream` says how many are bad or
/// duplicates), at `rate_per_sec` if it is not 0.
/// Returns the time it took and, for a paced run, each record's time from
/// send to the broker's acknowledgement (ms, sorted): how far the broker's
/// write path lags.
pub(super) async fn produce(
    brokers: &str,
    topic: &str,
    count: u64,
    seed: u64,
    rate_per_sec: u64,
    stream: Stream,
) -> Result<(Duration, Vec<f64>), String> {
    produce_as(brokers, topic, (count, seed, rate_per_sec), stream, &Encoding::Json).await
}

/// [`produce`], each record written in `encoding`: `(count, seed, rate)`.
pub(super) async fn produce_as(
    brokers: &str,
    topic: &str,
    (count, seed, rate_per_sec): (u64, u64, u64),
    stream: Stream,
    encoding: &Encoding,
) -> Result<(Duration, Vec<f64>), String> {
    let producer: FutureProducer = client(brokers)
        .set("linger.ms", PRODUCER_LINGER_MS)
        .set("message.timeout.ms", "60000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .map_err(|e| e.to_string())?;
    let now = chrono::Utc::now().timestamp_millis();
    let mut g = Generator::new(seed, 100_000, now - 1000, 0)
        .with_bad_records(stream.bad_ratio)
        .with_duplicates(stream.dup_ratio);
    let started = Instant::now();
    let mut pending = Vec::new();
    let mut acks = Vec::new();
    let bar = rankflow::progress::bar(count, &format!("producing to {topic}"));
    for i in 0..count {
        bar.inc(1);
        if rate_per_sec > 0 {
            let due = started + Duration::from_secs_f64(i as f64 / rate_per_sec as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let s = g.next_sample();
        let value = encoding.encode(&s.value);
        let f = producer
            .send_result(FutureRecord::to(topic).key(&s.key).payload(&value))
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
    bar.finish_and_clear();
    let mut ack_ms = Vec::with_capacity(acks.len());
    for a in acks {
        ack_ms.push(a.await.map_err(|e| e.to_string())??);
    }
    ack_ms.sort_by(f64::total_cmp);
    Ok((started.elapsed(), ack_ms))
}

pub(super) async fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), String> {
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
pub(super) fn assigned_consumer(
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
pub(super) fn bare_read(brokers: &str, topic: &str, partitions: i32, count: u64) -> Result<Duration, String> {
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
pub(super) fn bare_read_latency(brokers: &str, topic: &str, partitions: i32, count: u64) -> Result<Vec<f64>, String> {
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

/// How long each record of `topic` (one partition: dead letters, whose
/// timestamp is their source record's) took from that timestamp to be read
/// by a `read_committed` consumer, until `stop` is set: ms.
pub(super) fn visibility(
    brokers: &str,
    topic: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<Vec<f64>, String> {
    let wait = LATENCY_FETCH_WAIT_MS.to_string();
    let c = assigned_consumer(
        brokers,
        "bench-visible",
        topic,
        1,
        &[("fetch.wait.max.ms", &wait), ("isolation.level", "read_committed")],
    )?;
    let mut out = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
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
pub(super) fn read_events(
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
            if let Parsed::Event(e) =
                event::parse(m.payload().unwrap_or_default(), Default::default(), |t| router.listens(t))
            {
                out.push((m.partition(), m.offset(), m.timestamp().to_millis().unwrap_or(e.ts_ms), e));
            }
        }
    }
    Ok(out)
}

/// Reads a group's committed offsets, with one client for the whole run: a
/// client made for every look would load the broker it measures.
pub(super) struct Committed {
    pub(super) consumer: BaseConsumer,
    pub(super) partitions: TopicPartitionList,
}

impl Committed {
    pub(super) fn new(brokers: &str, group: &str, topic: &str, partitions: i32) -> Result<Committed, String> {
        let consumer = client(brokers).set("group.id", group).create::<BaseConsumer>().map_err(|e| e.to_string())?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        Ok(Committed { consumer, partitions: tpl })
    }

    /// The sum of the committed offsets, -1 if the broker did not answer.
    pub(super) fn sum(&self) -> i64 {
        match self.consumer.committed_offsets(self.partitions.clone(), Duration::from_secs(10)) {
            Ok(t) => t.elements().iter().map(|e| if let Offset::Offset(o) = e.offset() { o } else { 0 }).sum(),
            Err(_) => -1,
        }
    }
}

/// A consumer group's position on a topic.
#[derive(Clone, Copy)]
pub(super) struct GroupTopic<'a> {
    pub(super) brokers: &'a str,
    pub(super) group: &'a str,
    pub(super) topic: &'a str,
    pub(super) partitions: i32,
}

/// One run of the binary over the stream.
pub(super) struct Drain {
    /// From start until the group has committed every record.
    pub(super) total: Duration,
    /// From the moment it held every partition (the group's join done)
    /// until then: the drain itself, comparable with a bare consumer's
    /// read, which joins no group.
    pub(super) drain: Duration,
    /// Peak resident memory, KiB.
    pub(super) peak_kib: u64,
    /// CPU seconds the process used.
    pub(super) cpu: f64,
    /// The reads made every 20 ms during the drain.
    pub(super) reads: super::probe::Reads,
    /// (event, board tag) pairs applied, from its metrics at the end.
    pub(super) applied: u64,
}

/// The `/metrics` page of the rankflow serving HTTP at `listen`, if it answers.
pub(super) fn metrics_text(listen: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(listen).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut text = String::new();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

/// Whether the rankflow serving metrics at `listen` holds `partitions` partitions.
fn holds(listen: &str, partitions: i32) -> bool {
    let want = format!("rankflow_assigned_partitions {partitions}");
    metrics_text(listen).is_some_and(|text| text.lines().any(|l| l == want))
}

/// How many (event, board tag) pairs the rankflow at `listen` has applied:
/// the sum of `rankflow_events_applied_total` over its boards (an event
/// reaches one tag of each board it is applied to).
fn applied_pairs(listen: &str) -> u64 {
    metrics_text(listen).map_or(0, |text| {
        text.lines()
            .filter(|l| l.starts_with("rankflow_events_applied_total"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum::<f64>() as u64
    })
}

/// Starts `rankflow run` on `cfg`, written to `dir/<name>.toml`, its log
/// (warnings and worse) to `dir/<name>.log`.
pub(super) fn spawn_rankflow(exe: &Path, dir: &Path, name: &str, cfg: &str) -> Result<std::process::Child, String> {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, cfg).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(worker_log(dir, name)).map_err(|e| e.to_string())?;
    std::process::Command::new(exe)
        .args(["run", "--config"])
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stderr(log)
        .spawn()
        .map_err(|e| e.to_string())
}

/// Where the worker [`spawn_rankflow`] started as `name` logs.
fn worker_log(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join(format!("{name}.log"))
}

/// Runs the real binary (its config serving HTTP at `listen`) until its
/// group has committed `count` records.
pub(super) fn run_to_end(
    exe: &Path,
    dir: &Path,
    cfg: &str,
    listen: &str,
    redis_url: &str,
    at: &GroupTopic<'_>,
    count: u64,
) -> Result<Drain, String> {
    let GroupTopic { brokers, group, topic, partitions } = *at;
    let commits = Committed::new(brokers, group, topic, partitions)?;
    let started = Instant::now();
    let mut child = spawn_rankflow(exe, dir, group, cfg)?;
    let pid = child.id();
    let mut peak = 0;
    let mut assigned = None;
    let mut last_check = started;
    let result = loop {
        peak = peak.max(proc_status_kib(pid, "VmHWM:"));
        if assigned.is_none() && holds(listen, partitions) {
            assigned = Some((Instant::now(), super::probe::ReadProbe::start(listen, redis_url)));
        }
        // The committed offsets every 100 ms, as a probe costs the broker a request.
        if last_check.elapsed() >= Duration::from_millis(100) {
            last_check = Instant::now();
            if commits.sum() >= count as i64 {
                break Ok(Instant::now());
            }
        }
        if started.elapsed() > Duration::from_secs(900) {
            break Err("end-to-end run did not finish in 15 minutes".to_string());
        }
        // A worker that exited (a config it refused, say) never drains.
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(worker_log(dir, group)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(5)..].join("\n");
            break Err(format!("rankflow exited ({status}) before the drain ended:\n{tail}"));
        }
        std::thread::sleep(Duration::from_millis(if assigned.is_none() { 5 } else { 20 }));
    };
    // The reads stop with the drain, before the process does.
    let (assigned, reads) = match assigned {
        Some((at, probe)) => (Some(at), probe.finish()),
        None => (None, super::probe::Reads::default()),
    };
    peak = peak.max(proc_status_kib(pid, "VmHWM:"));
    let cpu = proc_cpu_secs(pid);
    let applied = applied_pairs(listen);
    stop(&mut child);
    let end = result?;
    let assigned = assigned.ok_or("rankflow finished without ever showing its partitions assigned")?;
    Ok(Drain { total: end - started, drain: end - assigned, peak_kib: peak, cpu, reads, applied })
}

/// The bench producer's linger, part of every measured latency
/// (rankflow's and the broker's alike), since record timestamps are taken
/// when a record is sent.
pub(super) const PRODUCER_LINGER_MS: &str = "5";
