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
use rankflow::store::{push_write, ApplyResult, RedisConn, Store, TagBatch, Tails};

use rankflow::samples::{Encoding, Generator};

mod cache;
mod capacity;
mod changes;
mod columns;
mod drain_reads;
mod formats;
mod integrity;
mod kafka;
mod latency;
mod league;
mod live;
mod memory;
mod pipeline;
mod probe;
mod read;
mod sharded;
mod sharded_rows;
mod store_rows;
mod teams;
mod tls;

use kafka::*;
use latency::*;
use store_rows::*;

pub use cache::cache;
pub use capacity::capacity;
pub use changes::changes;
pub use columns::columns;
pub use drain_reads::drain_reads;
pub use formats::formats;
pub use integrity::integrity;
pub use latency::latency_only;
pub use league::league;
pub use live::live;
pub use pipeline::{pipeline, PipelineRun};
pub use read::read;
pub use sharded::sharded;
pub use sharded_rows::sharded_rows;
pub use store_rows::store;
pub use teams::teams;
pub use tls::{tls, TlsRedis};

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

pub(super) fn bench_config(
    brokers: &str,
    redis: &str,
    topic: &str,
    group: &str,
    listen: &str,
    extra_options: &str,
) -> String {
    // BENCH_MAX_EVENTS_PER_CALL: the worker's `max_events_per_call`, for
    // comparisons. The section is always there, for callers to add to.
    let worker = match std::env::var("BENCH_MAX_EVENTS_PER_CALL") {
        Ok(n) => format!("[worker]\nmax_events_per_call = {n}\n"),
        Err(_) => "[worker]\n".to_string(),
    };
    format!(
        "[kafka]\nbrokers = \"{brokers}\"\ntopics = [\"{topic}\"]\ngroup_id = \"{group}\"\ndead_letter_topic = \"{topic}.dlq\"\n\
         [kafka.options]\n\"session.timeout.ms\" = 30000\n{extra_options}\n[redis]\nurl = \"{redis}\"\n[http]\nlisten = \"{listen}\"\n{worker}{BENCH_BOARDS}"
    )
}

/// `cfg` (a [`bench_config`]) with `kafka.transactions = false`.
pub(super) fn without_transactions(cfg: &str) -> String {
    cfg.replacen("[kafka]\n", "[kafka]\ntransactions = false\n", 1)
}

pub(super) fn client(brokers: &str) -> ClientConfig {
    rankflow::kafka::client::bare(brokers)
}

pub(super) fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// One row of the result table.
pub(super) struct Row {
    pub(super) what: &'static str,
    pub(super) per_sec: f64,
    pub(super) note: String,
}

/// What the generated stream holds besides good events, as a real stream
/// does: bad records (dead-lettered) and producer duplicates (counted once).
#[derive(Clone, Copy, Debug)]
pub struct Stream {
    pub bad_ratio: f64,
    pub dup_ratio: f64,
}

impl Stream {
    fn describe(&self) -> String {
        format!("{:.1}% bad records, {:.1}% producer duplicates", self.bad_ratio * 100.0, self.dup_ratio * 100.0)
    }
}

/// Set once every key in the benchmark's Redis database is its own: the
/// database was empty at the first [`flush`], or `--wipe-redis` allowed it.
pub(super) static OWNS_REDIS: AtomicBool = AtomicBool::new(false);

/// `--wipe-redis`: the benchmark may wipe a database that holds other keys.
pub fn allow_wipe() {
    OWNS_REDIS.store(true, Ordering::Relaxed);
}

/// Empties the benchmark's Redis database before a row. The first call
/// refuses a database that holds keys (someone else's data: a production
/// URL given by mistake) unless [`allow_wipe`] was called.
pub(super) async fn flush(conn: &RedisConn) -> Result<(), String> {
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

/// `INFO` of `sections`, as Redis writes it.
pub(super) async fn info(conn: &RedisConn, sections: &[&str]) -> Result<String, String> {
    redis::cmd("INFO").arg(sections).query_async(&mut conn.clone()).await.map_err(|e| format!("INFO: {e}"))
}

/// Redis's CPU seconds so far (user and system) in an `INFO cpu` text.
pub(super) fn cpu_seconds(info: &str) -> f64 {
    info.lines()
        .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum()
}

/// Waits until Redis has no fork child and each of its replicas has
/// acknowledged all it was sent, so that reads are not measured beside a
/// replica's full resynchronisation: a replica that falls behind while a
/// large board is filled is dropped for its output buffer and synchronised
/// again in full (a fork of the primary, copy-on-write, the replica loading
/// the dump), which stalled every read of a run for tens of milliseconds.
pub(super) async fn wait_settled(conn: &RedisConn) -> Result<(), String> {
    let (start, mut said) = (Instant::now(), false);
    loop {
        let info = info(conn, &["replication", "persistence"]).await?;
        let field = |name: &str| info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim);
        let offset = field("master_repl_offset").unwrap_or("0");
        let forked = field("rdb_bgsave_in_progress") == Some("1") || field("aof_rewrite_in_progress") == Some("1");
        let behind = info
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains(":ip="))
            .filter(|l| !l.contains("state=online") || !l.contains(&format!(",offset={offset},")))
            .count();
        if !forked && behind == 0 {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(300) {
            return Err(format!("Redis did not settle in 300s: {behind} replicas behind, a fork child: {forked}"));
        }
        if !said {
            eprintln!("bench: waiting for Redis to settle ({behind} replicas behind, a fork child: {forked})");
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The rankflow binary the end-to-end and latency rows run: `$RANKFLOW_BIN`,
/// or `rankflow` beside this tool (cargo builds both into one directory).
pub(super) fn rankflow_bin() -> Result<std::path::PathBuf, String> {
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

pub(super) fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Stops a `rankflow run` child the way an operator would (SIGTERM) and waits for it.
pub(super) fn stop(child: &mut std::process::Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// CPU seconds (user + system) a process has used so far, 0 if unknown.
pub(super) fn proc_cpu_secs(pid: u32) -> f64 {
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

/// Each round's rate over its own round's ceiling: their median, and the
/// rounds listed (" (rounds: 0.91x, 0.95x, 0.93x)"; nothing for one round).
pub(super) fn round_ratios(rates: &[f64], ceilings: &[f64]) -> (f64, String) {
    let ratios: Vec<f64> = rates.iter().zip(ceilings).map(|(r, c)| r / c).collect();
    let each = if ratios.len() > 1 {
        format!(" (rounds: {})", ratios.iter().map(|r| format!("{r:.2}x")).collect::<Vec<_>>().join(", "))
    } else {
        String::new()
    };
    (median(&ratios), each)
}

/// The median of a few values (the mean of the middle two for an even count).
pub(super) fn median(values: &[f64]) -> f64 {
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

/// The result table, then where Redis's time went in each store-path phase.
pub(super) fn print_rows(rows: &[Row], notes: &[String]) {
    print_table(rows);
    println!("\nwhere Redis's time goes (INFO cpu and commandstats, per event):\n{}", notes.join("\n"));
}

/// The result table alone.
pub(super) fn print_table(rows: &[Row]) {
    println!("\n| measurement | events/s | ratio |");
    println!("|---|---:|---|");
    for r in rows {
        println!("| {} | {:.0} | {} |", r.what, r.per_sec, r.note);
    }
}

pub(super) fn tempfile_dir() -> Result<std::path::PathBuf, String> {
    let d = std::env::temp_dir().join(format!("rankflow-bench-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
    Ok(d)
}

pub(super) fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).map_err(|e| e.to_string())
}

pub(super) fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// An event of type `m` with a random event id (the read and sharded
/// benchmarks' boards take `m`).
pub(super) fn m_event(
    g: &mut rand::rngs::StdRng,
    player_id: String,
    score: i64,
    ts_ms: i64,
    meta: Option<String>,
) -> Event {
    Event {
        event_id: uuid::Builder::from_random_bytes(rand::Rng::random(g)).into_uuid(),
        kind: "m".into(),
        player_id,
        score: Some(score),
        scores: None,
        ts_ms,
        attrs: Default::default(),
        meta,
        team: None,
    }
}

pub(super) fn rand_seed(seed: u64) -> rand::rngs::StdRng {
    rand::SeedableRng::seed_from_u64(seed)
}

#[cfg(test)]
mod tests {
    use super::{median, round_ratios};

    #[test]
    pub(super) fn the_median_of_rounds_is_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&[1.10, 0.94, 1.05]), 1.05);
        assert_eq!(median(&[0.9, 1.3, 1.0, 1.2]), 1.1);
        assert_eq!(median(&[0.97]), 0.97);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    pub(super) fn each_round_is_set_against_its_own_rounds_ceiling() {
        let (ratio, each) = round_ratios(&[90.0, 60.0, 120.0], &[100.0, 50.0, 100.0]);
        assert_eq!(ratio, 1.2);
        assert_eq!(each, " (rounds: 0.90x, 1.20x, 1.20x)");
        assert_eq!(round_ratios(&[80.0], &[100.0]), (0.8, String::new()));
    }
}
