//! The scheduler: sealed periods (`close_after`) and rolling boards
//! (`rolling`), as due work in a Redis sorted set.
//!
//! Jobs are strings, `seal|<key base>|<period id>` and
//! `roll|<key base>|<rolling name>`, in the zset `{prefix}:{.sched}:due`
//! scored by when they are due (ms). Every worker runs [`run`]: it claims due
//! jobs atomically (`scripts/sched.lua` moves each into the lease zset with a
//! lapse time), runs them, and finishes them with the claim's token. A worker
//! that dies mid-job leaves its claim to lapse, and the next claim takes the
//! job over, so a job is never lost; with several workers each claim goes to
//! one of them.
//!
//! **Sealing** waits for completeness, decided from what has been applied:
//! every worker raises, per topic-partition, a watermark in
//! `{prefix}:{.sched}:wm` to the largest record timestamp it has applied,
//! and, for a partition whose records are all applied (librdkafka's stored
//! or committed offset at the high watermark), to the wall clock minus
//! `[sealing] idle_grace`. A period is sealed once every partition of every
//! topic has a watermark at or past the period's close time; until then the
//! job is tried again every `check_interval`. `scripts/seal.lua` seals at most
//! once (the tag's `_sealed` hash), so the final board is computed once
//! whatever the claims did; its top is then published to `[sealing] topic`
//! and the publication recorded, so a job taken over after a publication
//! that Redis recorded does not publish again.
//!
//! **Rolling boards** are recomputed every `refresh` from the last `days`
//! daily keys (today, in the board's time zone, by the wall clock), in
//! bounded steps of `scripts/roll.lua` swapped in whole (see `rolling.rs`);
//! one claim runs steps for [`ROLL_SLICE`] and hands the job back, due at
//! once, while the build is unfinished.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::board::{Board, Router};
use crate::config::Settings;
use crate::health::Health;
use crate::kafka::producer::KafkaProducer;
use crate::kafka::transaction::OUTPUT_ID;
use crate::keys;
use crate::metrics;
use crate::period::PeriodError;
use crate::store::{Claim, OutboxRecord, Store, StoreError};
pub use crate::watermarks::Watermarks;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;

mod history;
mod league;
pub mod outbox;
mod rolling;
mod seal;
mod supervisor;

/// Why a scheduler job (or one of its steps) failed, naming what it was doing. Every one is
/// retried (the job stays due); [`JobError::is_lost`] ones also stop
/// the worker (Redis lost data).
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Redis(#[from] StoreError),
    #[error("cannot create the sealed-topic producer: {0}")]
    Producer(#[source] KafkaError),
    #[error("publishing to {topic}: {source}")]
    Publish { topic: String, source: KafkaError },
    #[error("metadata of {topic}: {source}")]
    Metadata { topic: String, source: KafkaError },
    #[error("topic {0} has no partitions")]
    NoPartitions(String),
    #[error("reading the topics' metadata stopped: {0}")]
    MetadataTask(String),
    #[error("{script} answered {got}")]
    BadReply { script: &'static str, got: String },
    #[error(transparent)]
    Period(#[from] PeriodError),
    #[error("'{0}' is not a board key base")]
    NotABase(String),
    #[error("board '{0}' is no longer configured")]
    UnknownBoard(String),
}

impl JobError {
    /// A script found its tag's data gone (`LOST`): nothing was written.
    pub fn is_lost(&self) -> bool {
        matches!(self, JobError::Redis(StoreError::Lost { .. }))
    }
}

pub use rolling::{rolling_keys, Refresh, Step, STEP_BUDGET};

pub use supervisor::supervise;

/// A scheduled job, as its string in the due zset names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Job {
    Seal { base: String, period: String },
    Roll { base: String, name: String },
}

impl Job {
    pub fn encode(&self) -> String {
        match self {
            Job::Seal { base, period } => format!("seal|{base}|{period}"),
            Job::Roll { base, name } => format!("roll|{base}|{name}"),
        }
    }

    pub fn decode(text: &str) -> Option<Job> {
        let (kind, rest) = text.split_once('|')?;
        // The base may hold '|' (a key prefix can); ids and names cannot.
        let (base, last) = rest.rsplit_once('|')?;
        match kind {
            "seal" => Some(Job::Seal { base: base.into(), period: last.into() }),
            "roll" => Some(Job::Roll { base: base.into(), name: last.into() }),
            _ => None,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Job::Seal { .. } => "seal",
            Job::Roll { .. } => "roll",
        }
    }
}

/// Writes watermarks (raising only) in one call.
pub async fn write_watermarks(store: &Store, prefix: &str, marks: &HashMap<String, i64>) -> Result<(), JobError> {
    if marks.is_empty() {
        return Ok(());
    }
    Ok(store.sched_watermarks(prefix, marks).await?)
}

/// Adds jobs that are neither due nor claimed already.
pub async fn enqueue(store: &Store, prefix: &str, jobs: &[(String, i64)]) -> Result<(), JobError> {
    if jobs.is_empty() {
        return Ok(());
    }
    store.sched_enqueue(prefix, jobs).await?;
    Ok(())
}

/// Makes jobs due by the times given at the latest (`rankflow close`).
pub async fn advance(store: &Store, prefix: &str, jobs: &[(String, i64)]) -> Result<(), JobError> {
    store.sched_advance(prefix, jobs).await?;
    Ok(())
}

/// The jobs a batch's writes need, remembered so that each is sent once a
/// minute at most (Redis ignores a job that is due or claimed already).
#[derive(Debug)]
pub struct JobCache {
    sent: HashSet<String>,
    since: Instant,
}

impl Default for JobCache {
    fn default() -> Self {
        JobCache { sent: HashSet::new(), since: Instant::now() }
    }
}

impl JobCache {
    /// Returns the job if it has not been sent lately.
    pub fn fresh(&mut self, job: String) -> Option<String> {
        if self.since.elapsed() > Duration::from_secs(60) || self.sent.len() > 100_000 {
            self.sent.clear();
            self.since = Instant::now();
        }
        if self.sent.contains(&job) {
            return None;
        }
        self.sent.insert(job.clone());
        Some(job)
    }

    /// Forgets jobs whose enqueue failed, so the retry sends them again.
    pub fn forget(&mut self, jobs: &[(String, i64)]) {
        for (j, _) in jobs {
            self.sent.remove(j);
        }
    }
}

/// Runs the scheduler until `cancel` fires, starting it again (after a
/// backoff up to `worker.max_backoff`) whenever it stops: a scheduler that
/// cannot create its producer, or that panics, must not die silently while
/// the worker goes on. Each restart is logged and counted
/// (`rankflow_scheduler_restarts_total`, alerted on).
///
/// Once Redis lost data (`health`), it runs no job: a seal or a rolling
/// board of a tag that lost its data would freeze boards that miss scores
/// (the scripts refuse them too, and a job that meets that says so here).
pub async fn run(
    settings: Arc<Settings>,
    router: Arc<Router>,
    store: Store,
    health: Arc<Health>,
    cancel: CancellationToken,
) {
    let max_backoff = settings.worker.max_backoff;
    supervise(&cancel, max_backoff, || {
        let (settings, router, store, health, cancel) =
            (settings.clone(), router.clone(), store.clone(), health.clone(), cancel.clone());
        async move { run_once(&settings, &router, &store, &health, &cancel).await }
    })
    .await;
}

/// One life of the scheduler: until `cancel` fires, or an error it cannot go on from.
async fn run_once(
    settings: &Settings,
    router: &Router,
    store: &Store,
    health: &Health,
    cancel: &CancellationToken,
) -> Result<(), JobError> {
    let producer = KafkaProducer::new(&crate::kafka::client::producer(&settings.kafka)).map_err(JobError::Producer)?;
    let s = Scheduler { settings, router, store, health, producer: Arc::new(producer), partitions: None };
    s.run(cancel).await;
    Ok(())
}

struct Scheduler<'a> {
    settings: &'a Settings,
    router: &'a Router,
    store: &'a Store,
    /// Where lost data is reported, and looked at before each round.
    health: &'a Health,
    producer: Arc<KafkaProducer>,
    /// Partition counts of the consumed topics, and when they were read.
    partitions: Option<(Instant, HashMap<String, i32>)>,
}

/// What one run of a job decided.
enum Outcome {
    /// Done for good.
    Done,
    /// Run again at this time (ms).
    Again(i64, &'static str),
}

/// How long one claim of a rolling job runs steps before handing the job back.
const ROLL_SLICE: Duration = Duration::from_millis(250);

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Scheduler<'_> {
    async fn run(mut self, cancel: &CancellationToken) {
        let interval = self.settings.sealing.check_interval;
        info!(interval = ?interval, "Scheduler started.");
        // After a slice of a rolling build that is not finished, the next claim comes at once.
        let mut continued = false;
        loop {
            let pause = if continued { Duration::ZERO } else { interval };
            continued = false;
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
            }
            if self.health.is_lost() {
                continue;
            }
            let claimed = match self.claim().await {
                Ok(c) => c,
                Err(e) => {
                    metrics::get().redis_errors.with_label_values(&["schedule"]).inc();
                    debug!(error = %e, "Claiming due jobs failed; trying again.");
                    continue;
                }
            };
            for claim in claimed {
                let text = &claim.job;
                if cancel.is_cancelled() {
                    // The claim lapses and another worker (or this one, restarted) takes it.
                    break;
                }
                let job = Job::decode(text);
                let next = match &job {
                    None => {
                        warn!(job = %text, "Dropping a job this version cannot read.");
                        Outcome::Done
                    }
                    Some(job) => {
                        let r = match job {
                            Job::Seal { base, period } => self.seal(base, period).await,
                            Job::Roll { base, name } => self.roll(base, name).await,
                        };
                        r.unwrap_or_else(|e| {
                            if e.is_lost() {
                                self.health
                                    .lost_data(format!("{e}; a scheduled job ({text}) found it and wrote nothing"));
                            }
                            warn!(job = %text, error = %e, "A scheduled job failed; it is tried again.");
                            Outcome::Again(now_ms() + interval.as_millis() as i64 * 5, "failed")
                        })
                    }
                };
                let (next_due, outcome) = match next {
                    Outcome::Done => (0, "done"),
                    Outcome::Again(at, why) => (at, why),
                };
                continued |= outcome == "continued";
                if let Some(job) = &job {
                    metrics::get().jobs.with_label_values(&[job.kind(), outcome]).inc();
                }
                match self.store.sched_finish(self.router.prefix(), &claim, next_due).await {
                    Ok(true) => {}
                    Ok(false) => info!(job = %text, "The job's claim lapsed and another worker took it over."),
                    Err(e) => {
                        warn!(job = %text, error = %e, "Finishing a job failed; its claim lapses and it runs again.")
                    }
                }
            }
        }
        info!("Scheduler stopped.");
    }

    async fn claim(&self) -> Result<Vec<Claim>, JobError> {
        let lease = self.settings.sealing.lease.as_millis();
        Ok(self.store.sched_claim(self.router.prefix(), lease, 16).await?)
    }

    /// Publishes records (output id, key, value) to the seal topic: with
    /// `kafka.transactions`, appended to the outbox (once per id, however
    /// often the job runs; `outbox` publishes it exactly once); without,
    /// produced and acknowledged.
    async fn publish(&self, records: Vec<(String, String, String)>) -> Result<(), JobError> {
        let topic = &self.settings.sealing.topic;
        if self.settings.kafka.transactions {
            let records: Vec<OutboxRecord> = records
                .into_iter()
                .map(|(id, key, payload)| OutboxRecord { id, topic: topic.clone(), key, payload })
                .collect();
            self.store.outbox_append(self.router.prefix(), &records).await?;
            return Ok(());
        }
        let sends = records.iter().map(|(id, key, payload)| {
            let headers = OwnedHeaders::new().insert(Header { key: OUTPUT_ID, value: Some(id.as_str()) });
            self.producer.deliver(FutureRecord::to(topic).key(key.as_str()).payload(payload.as_str()).headers(headers))
        });
        futures::future::try_join_all(sends)
            .await
            .map_err(|source| JobError::Publish { topic: topic.clone(), source })?;
        Ok(())
    }

    fn board_of(&self, base: &str) -> Result<&Board, JobError> {
        let id = keys::board_of_base(base).ok_or_else(|| JobError::NotABase(base.into()))?;
        self.router.board(id).ok_or_else(|| JobError::UnknownBoard(id.into()))
    }

    /// Partition counts of every consumed topic, read from the broker's
    /// metadata and kept for 30 s.
    async fn partition_counts(&mut self) -> Result<HashMap<String, i32>, JobError> {
        if let Some((at, counts)) = &self.partitions {
            if at.elapsed() < Duration::from_secs(30) {
                return Ok(counts.clone());
            }
        }
        let producer = self.producer.clone();
        let topics = self.settings.kafka.topics.clone();
        let counts = tokio::task::spawn_blocking(move || {
            let mut counts = HashMap::new();
            for t in topics {
                let md = producer
                    .client()
                    .fetch_metadata(Some(&t), Duration::from_secs(5))
                    .map_err(|source| JobError::Metadata { topic: t.clone(), source })?;
                let n = md.topics().iter().find(|x| x.name() == t).map_or(0, |x| x.partitions().len() as i32);
                if n == 0 {
                    return Err(JobError::NoPartitions(t));
                }
                counts.insert(t, n);
            }
            Ok::<_, JobError>(counts)
        })
        .await
        .map_err(|e| JobError::MetadataTask(e.to_string()))??;
        self.partitions = Some((Instant::now(), counts.clone()));
        Ok(counts)
    }

    /// Whether every partition of every topic has been applied up to `close_at`.
    async fn complete(&mut self, close_at: i64) -> Result<bool, JobError> {
        let counts = self.partition_counts().await?;
        let (_, _, wm) = keys::sched_keys(self.router.prefix());
        let marks = self.store.integers(&wm).await?;
        Ok(counts.iter().all(|(topic, &n)| {
            (0..n).all(|p| marks.get(&keys::offsets_field(topic, p)).is_some_and(|&ms| ms >= close_at))
        }))
    }

    /// Runs steps of a rolling board's refresh for up to [`ROLL_SLICE`], then
    /// hands the job back as due now if the build is not finished, so other
    /// jobs (and other workers) take turns with a large board.
    async fn roll(&mut self, base: &str, name: &str) -> Result<Outcome, JobError> {
        let board = self.board_of(base)?.clone();
        let Some(rolling) = board.rolling().iter().find(|r| r.name == name) else {
            return Ok(Outcome::Done);
        };
        let refresh = Refresh::new(&board, base, name, rolling.days, now_ms())?;
        let started = Instant::now();
        loop {
            match refresh.step(self.store, STEP_BUDGET).await? {
                Step::More(_) if started.elapsed() < ROLL_SLICE => tokio::task::yield_now().await,
                Step::More(_) => return Ok(Outcome::Again(now_ms(), "continued")),
                Step::Inexact => {
                    warn!(board = %board.id(), rolling = name, "A rolling sum passed 2^53 - 1 and would lose exactness; the board was not recomputed.");
                    return Ok(Outcome::Again(now_ms() + rolling.refresh.as_millis() as i64, "inexact"));
                }
                // Nothing in the window: the job ends; the tag's next event enqueues it again.
                Step::Done(0) => return Ok(Outcome::Done),
                Step::Done(_) => return Ok(Outcome::Again(now_ms() + rolling.refresh.as_millis() as i64, "done")),
            }
        }
    }
}

/// The jobs one planned write needs that `seen` (one batch's) does not hold
/// yet: a seal per closing period (of the whole board on a sharded board:
/// one job seals every shard), a rolling refresh per rolling board of the
/// tag (each shard's own). Each with when it is due. Job strings are only
/// built for new ones.
pub fn jobs_for<'a>(
    board: &'a Board,
    base: &'a str,
    periods: &'a [std::sync::Arc<crate::board::PeriodWrite>],
    now_ms: i64,
    seen: &mut HashSet<(&'a str, &'a str)>,
) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for p in periods {
        if let Some(close_at) = p.close_at {
            // Period ids hold a ':' (or are "all"); rolling names cannot.
            if seen.insert((base, p.id.as_str())) {
                let board_base = match board.shards() {
                    Some(_) => keys::unsharded_base(base).unwrap_or_else(|| base.to_string()),
                    None => base.to_string(),
                };
                out.push((Job::Seal { base: board_base, period: p.id.clone() }.encode(), close_at));
            }
        }
    }
    for r in board.rolling() {
        if seen.insert((base, r.name.as_str())) {
            out.push((Job::Roll { base: base.into(), name: r.name.clone() }.encode(), now_ms));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_round_trip_even_when_the_prefix_holds_a_bar() {
        for job in [
            Job::Seal { base: "lb:{points}".into(), period: "d:2026-08-14".into() },
            Job::Roll { base: "a|b:{laps:monza}".into(), name: "last7d".into() },
        ] {
            assert_eq!(Job::decode(&job.encode()), Some(job.clone()));
        }
        assert_eq!(Job::decode("nap|x|y"), None);
    }
}
