//! The consumer: reads records from Kafka in batches, applies them to Redis,
//! dead-letters what cannot be applied, and stores offsets only for records
//! whose outcome is final (SPEC section 5).
//!
//! Flow of one batch:
//! 1. collect up to `batch_size` records (waiting at most `batch_linger` once
//!    the first is in) and parse each one (`event::parse`, `Router::plan`);
//! 2. send every board write of the batch to Redis, one script call per board
//!    tag, all at once (`store::Store::prepare`, `apply_prepared`); on failure retry the whole
//!    batch with capped exponential backoff (safe: the script recognises
//!    records it already applied by their offset);
//! 3. produce the records that no board applied (and that were no duplicate)
//!    to the dead-letter topic; a partition whose dead letters the broker has
//!    not acknowledged is paused and its records held (see `Held`), while
//!    every other partition goes on;
//! 4. only then store, per partition, the batch's last offset + 1 (for a held
//!    partition: the offset of its first held record);
//!    librdkafka commits stored offsets every `auto.commit.interval.ms`, on
//!    revocation and on shutdown; the loop also commits them as soon as it
//!    is idle (nothing in flight, no record for `IDLE_COMMIT`).
//!
//! Batches overlap Redis: up to two batches are on their way to Redis at once
//! (each on a task of its own), so that Redis starts on the next the moment
//! it is done with one, while the loop reads, parses and encodes a third.
//! When the older one lands, the loop sends the third and only then settles
//! the older one's outcomes (steps 3 and 4). A batch sent while the one
//! before it is still in flight carries preconditions (`Prepared::after`):
//! each of its script calls runs only if its board tag has recorded the
//! earlier batch's offsets, and otherwise does nothing. So a failed batch is
//! never overtaken: the batch behind it is sent again once it has landed.
//! Redis sees each partition in log order.
//!
//! The worker must never store an offset past a record whose outcome is not
//! final: a batch that is abandoned (shutdown during a Redis retry) stores
//! nothing, nor does any batch behind it, and a held dead letter stops its
//! partition's offset. While Redis is retried the loop holds at most two
//! more batches, and a held partition is paused, so memory stays bounded by
//! three batches and librdkafka's `queued.max.messages.kbytes`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::statistics::Statistics;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{debug, debug_span, info, info_span, warn, Instrument};

use crate::board::{Decision, Router};
use crate::config::Settings;
use crate::event::{self, Event, Parsed, Reason, Rejection};
use crate::keys;
use crate::metrics;
use crate::offsets::BatchOffsets;
use crate::producer::{Delivery, KafkaProducer};
use crate::schedule::{self, JobCache, Watermarks};
use crate::store::{push_write, ApplyResult, Prepared, Store, StoreError, TagBatch, Tails};

/// Liveness facts shared with the HTTP server's `/readyz`.
#[derive(Debug, Default)]
pub struct Health {
    pub kafka_up: AtomicBool,
    pub redis_up: AtomicBool,
}

/// Errors that stop the worker at start-up. Once running, faults are retried.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot create the Kafka consumer: {0}")]
    Consumer(#[source] KafkaError),
    #[error("cannot subscribe to {topics:?}: {source}")]
    Subscribe { topics: Vec<String>, source: KafkaError },
    #[error("cannot create the dead-letter producer: {0}")]
    Producer(#[source] KafkaError),
}

/// librdkafka callbacks: rebalances, commits, statistics and errors.
pub struct WorkerContext {
    health: Arc<Health>,
    /// Boards that seal periods: where caught-up partitions raise their
    /// watermark, and by how much less than the wall clock.
    idle: Option<(Arc<Watermarks>, i64)>,
    /// An offset was stored since the loop last committed on going idle
    /// (set where offsets are stored, see `store_offset`).
    uncommitted: AtomicBool,
}

impl ClientContext for WorkerContext {
    fn stats(&self, stats: Statistics) {
        let m = metrics::get();
        let up = stats.brokers.values().any(|b| b.nodeid >= 0 && b.state == "UP");
        self.health.kafka_up.store(up, Ordering::Relaxed);
        m.kafka_up.set(i64::from(up));
        let now = chrono::Utc::now().timestamp_millis();
        for (topic, t) in &stats.topics {
            for p in t.partitions.values() {
                if p.partition >= 0 && p.consumer_lag >= 0 {
                    m.consumer_lag.with_label_values(&[topic.as_str(), &p.partition.to_string()]).set(p.consumer_lag);
                }
                // Every record of an assigned partition is applied (its stored
                // or committed offset is at the log end, or it is empty): it
                // has reached the wall clock, less the grace for records
                // produced but not yet appended.
                if let Some((marks, grace_ms)) = &self.idle {
                    let done = p.stored_offset.max(p.committed_offset);
                    let caught_up = p.hi_offset >= 0 && (done >= p.hi_offset || p.hi_offset == p.lo_offset);
                    if p.partition >= 0 && p.fetch_state == "active" && caught_up {
                        marks.raise(&keys::offsets_field(topic, p.partition), now - grace_ms);
                    }
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error, KafkaError::Global(RDKafkaErrorCode::AllBrokersDown)) {
            self.health.kafka_up.store(false, Ordering::Relaxed);
            metrics::get().kafka_up.set(0);
        }
        warn!(error = %error, reason, "Kafka client reported an error.");
    }
}

impl ConsumerContext for WorkerContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            metrics::get().rebalances.with_label_values(&["revoke"]).inc_by(tpl.count() as u64);
            // Batches are processed between polls, so every stored offset is
            // final here: commit them before the partitions move on.
            match consumer.commit_consumer_state(CommitMode::Sync) {
                Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                Err(e) => {
                    warn!(error = %e, "Committing offsets before a revocation failed; the next owner replays from the last commit.")
                }
            }
            info!(partitions = tpl.count(), "Partitions revoked.");
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let m = metrics::get();
        if let Rebalance::Assign(tpl) = rebalance {
            // A partition paused while held for the dead-letter topic, then
            // revoked, must not come back paused: nothing tracks it any more.
            if let Err(e) = consumer.resume(tpl) {
                debug!(error = %e, "Resuming newly assigned partitions failed.");
            }
            m.rebalances.with_label_values(&["assign"]).inc_by(tpl.count() as u64);
            info!(partitions = tpl.count(), "Partitions assigned.");
        }
        if let Ok(a) = consumer.assignment() {
            m.assigned_partitions.set(a.count() as i64);
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        let label = match &result {
            Ok(()) => "ok",
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => return,
            Err(_) => "error",
        };
        metrics::get().commits.with_label_values(&[label]).inc();
        if let Err(e) = result {
            warn!(error = %e, "Offset commit failed; it is retried with the next commit.");
        }
    }
}

/// Options rankflow sets on the consumer before the user's `[kafka.options]`.
fn consumer_config(settings: &Settings) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &settings.kafka.brokers)
        .set("group.id", &settings.kafka.group_id)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("statistics.interval.ms", if settings.seals() { "1000" } else { "5000" })
        .set("queued.max.messages.kbytes", "16384");
    for (k, v) in &settings.kafka.options {
        c.set(k, v);
    }
    // Never overridable: offsets are stored by rankflow only.
    c.set("enable.auto.offset.store", "false");
    c
}

pub(crate) fn producer_config(settings: &Settings) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &settings.kafka.brokers).set("message.timeout.ms", "10000").set("acks", "all");
    for (k, v) in &settings.kafka.options {
        if is_producer_option(k) {
            c.set(k, v);
        }
    }
    c
}

/// Options meaningful to a client that is not the consumer (the dead-letter
/// producer, the admin and sample-producing commands): connection and security.
pub(crate) fn is_producer_option(key: &str) -> bool {
    [
        "security.",
        "sasl.",
        "ssl.",
        "client.",
        "socket.",
        "broker.",
        "reconnect.",
        "message.timeout.ms",
        "acks",
        "compression.",
        "debug",
    ]
    .iter()
    .any(|p| key.starts_with(p))
}

/// Runs the worker until `cancel` fires, then commits what is final and
/// leaves the group.
pub async fn run(
    settings: Arc<Settings>,
    router: Arc<Router>,
    store: Store,
    health: Arc<Health>,
    cancel: CancellationToken,
) -> Result<(), WorkerError> {
    let marks = Arc::new(Watermarks::default());
    let idle = settings.seals().then(|| (marks.clone(), settings.sealing.idle_grace.as_millis() as i64));
    let consumer: StreamConsumer<WorkerContext> = consumer_config(&settings)
        .create_with_context(WorkerContext { health: health.clone(), idle, uncommitted: AtomicBool::new(false) })
        .map_err(WorkerError::Consumer)?;
    let topics: Vec<&str> = settings.kafka.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|source| WorkerError::Subscribe { topics: settings.kafka.topics.clone(), source })?;
    let producer = KafkaProducer::new(&producer_config(&settings)).map_err(WorkerError::Producer)?;
    metrics::get().init_boards(router.boards().iter().map(|b| b.id.as_str()));
    info!(topics = ?settings.kafka.topics, group = %settings.kafka.group_id, "Worker started.");

    let w = Worker {
        settings: &settings,
        router: &router,
        store: &store,
        health: &health,
        producer: &producer,
        cancel: &cancel,
        jobs: Mutex::new(JobCache::default()),
    };
    let seals = settings.seals();
    let mut batch_no: u64 = 0;
    // An erasure is a batch of its own, so it stays ordered with the
    // player's other events: one read while a batch is open waits here.
    let mut carry: Option<(BorrowedMessage<'_>, Item)> = None;
    // The batches whose writes are in Redis (or on their way), oldest
    // first, while the loop reads and prepares the next one.
    let mut inflight: VecDeque<InFlight<'_>> = VecDeque::with_capacity(IN_FLIGHT);
    let mut held = Held::default();
    // When the loop last committed on going idle.
    let mut last_idle_commit = tokio::time::Instant::now();
    'run: loop {
        if !held.is_empty() {
            // A revoked partition's held records are dropped, never stored:
            // its next owner reads them again from the committed offset.
            if let Ok(assigned) = consumer.assignment() {
                held.partitions.retain(|(t, p), _| assigned.find_partition(t, *p).is_some());
            }
            if held.next_try.is_some_and(|due| tokio::time::Instant::now() >= due) {
                w.retry_held(&consumer, &mut held).await;
            }
            if held.is_empty() {
                held.next_try = None;
            }
        }
        if held.is_empty() {
            held.next_try = None;
        }
        let mut msgs = Vec::with_capacity(settings.worker.batch_size);
        let mut items = Vec::with_capacity(settings.worker.batch_size);
        if let Some((m, item)) = carry.take() {
            msgs.push(m);
            items.push(item);
        } else {
            let retry_at = held.next_try;
            let commit_at = (inflight.is_empty() && consumer.context().uncommitted.load(Ordering::Relaxed))
                .then(|| (tokio::time::Instant::now() + IDLE_COMMIT).max(last_idle_commit + IDLE_COMMIT_GAP));
            let first = tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                // Nothing new yet and the oldest batch in Redis is done: settle it now.
                r = async { (&mut inflight.front_mut().expect("guarded").applied).await }, if !inflight.is_empty() => {
                    let f = inflight.pop_front().expect("guarded");
                    let Some(results) = landed(r) else {
                        inflight.clear();
                        break;
                    };
                    settle(&w, &consumer, &mut held, &marks, &f.msgs, w.finish(&f.msgs, f.batch, results)).await;
                    continue;
                }
                m = consumer.recv() => m,
                // Idle with offsets stored since the last commit: commit them now.
                _ = async { tokio::time::sleep_until(commit_at.unwrap_or_else(tokio::time::Instant::now)).await }, if commit_at.is_some() => {
                    consumer.context().uncommitted.store(false, Ordering::Relaxed);
                    if let Err(e) = commit_stored(&consumer) {
                        debug!(error = %e, "Committing on idle failed; the next commit carries the offsets.");
                    }
                    last_idle_commit = tokio::time::Instant::now();
                    continue;
                }
                _ = async { tokio::time::sleep_until(retry_at.unwrap_or_else(tokio::time::Instant::now)).await }, if retry_at.is_some() => continue,
                // Idle partitions raise watermarks too (see WorkerContext::stats).
                _ = tokio::time::sleep(settings.sealing.check_interval), if seals => {
                    w.flush_watermarks(&marks).await;
                    continue;
                }
            };
            match first {
                Ok(m) => {
                    items.push(w.parse(&m));
                    msgs.push(m);
                }
                Err(e) => {
                    warn!(error = %e, "Reading from Kafka failed; retrying.");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let deadline = tokio::time::Instant::now() + settings.worker.batch_linger;
        while msgs.len() < settings.worker.batch_size && carry.is_none() && !matches!(items[0], Item::Erase { .. }) {
            match tokio::time::timeout_at(deadline, consumer.recv()).await {
                Ok(Ok(m)) => {
                    let item = w.parse(&m);
                    if matches!(item, Item::Erase { .. }) {
                        carry = Some((m, item));
                        break;
                    }
                    msgs.push(m);
                    items.push(item);
                }
                Ok(Err(e)) => {
                    warn!(error = %e, "Reading from Kafka failed; the batch closes early.");
                    break;
                }
                Err(_) => break,
            }
        }
        batch_no += 1;
        let span = info_span!("batch", n = batch_no, records = msgs.len());
        if matches!(items.as_slice(), [Item::Erase { .. }]) {
            // An erasure waits for the batches before it, and runs alone.
            while let Some(f) = inflight.pop_front() {
                let Some(results) = landed(f.applied.await) else {
                    inflight.clear();
                    break 'run;
                };
                settle(&w, &consumer, &mut held, &marks, &f.msgs, w.finish(&f.msgs, f.batch, results)).await;
            }
            let Some(offsets) = w.erase_batch(&msgs, items).instrument(span).await else {
                info!("Shutdown during a retry: the erasure is abandoned and its offset is not stored.");
                break;
            };
            settle(&w, &consumer, &mut held, &marks, &msgs, (offsets, Vec::new())).await;
            continue;
        }
        let Some((batch, mut calls)) = w.prepare(&msgs, items).instrument(span.clone()).await else {
            info!("Shutdown while sending scheduler jobs: the batch is abandoned and its offsets are not stored.");
            break;
        };
        // With two batches in flight, the older one leaves Redis first; this
        // one is sent at once, behind the newer one, so Redis is never idle
        // while the loop settles the older batch's outcomes.
        let before = if inflight.len() == IN_FLIGHT {
            let f = inflight.pop_front().expect("guarded");
            match landed(f.applied.await) {
                Some(results) => Some((f.msgs, f.batch, results)),
                None => {
                    info!("Shutdown during a retry: the batches in flight are abandoned and their offsets are not stored.");
                    inflight.clear();
                    break;
                }
            }
        } else {
            None
        };
        let after = inflight.back_mut().map(|f| {
            calls.after(&f.tails);
            f.landed.take()
        });
        let (done, landed_rx) = tokio::sync::oneshot::channel();
        let tails = calls.tails();
        let applied = w.spawn_apply(calls, after.flatten(), done, span);
        inflight.push_back(InFlight { msgs, batch, applied, tails, landed: Some(landed_rx) });
        if let Some((msgs, batch, results)) = before {
            settle(&w, &consumer, &mut held, &marks, &msgs, w.finish(&msgs, batch, results)).await;
        }
    }
    // Batches Redis has already answered are settled, oldest first, unless
    // that would wait for the dead-letter topic: then that batch and those
    // behind it are left to be read again. (A batch abandoned above took
    // those behind it along: one behind it may have been applied, on other
    // board tags, but storing its offsets would pass the abandoned records.)
    while let Some(f) = inflight.pop_front() {
        let Ok(Some(results)) = tokio::time::timeout(Duration::from_secs(1), f.applied).await.map(landed) else {
            break;
        };
        let outcome = w.finish(&f.msgs, f.batch, results);
        if !outcome.1.is_empty() {
            break;
        }
        settle(&w, &consumer, &mut held, &marks, &f.msgs, outcome).await;
    }
    // librdkafka's consumer cannot close while any of its messages is alive.
    drop(inflight);
    drop(carry);

    info!("Worker stopping: committing final offsets and leaving the group.");
    // These librdkafka calls block (for long when the brokers are gone):
    // block_in_place hands this thread's other work, and the runtime's
    // timers, to another thread meanwhile, so the shutdown deadline in main
    // still fires.
    tokio::task::block_in_place(|| {
        match consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => warn!(error = %e, "Final commit failed; the next owner replays from the last commit."),
        }
        consumer.unsubscribe();
        drop(consumer);
        let _ = producer.flush(Duration::from_secs(5));
    });
    info!("Worker stopped.");
    Ok(())
}

/// What follows a batch's outcomes (its offsets and the records to
/// dead-letter, from `Worker::finish` or an erasure): watermarks, dead
/// letters, held partitions, and each partition's offset stored.
async fn settle(
    w: &Worker<'_>,
    consumer: &StreamConsumer<WorkerContext>,
    held: &mut Held,
    marks: &Watermarks,
    msgs: &[BorrowedMessage<'_>],
    (offsets, dead): (BatchOffsets, Vec<DeadRecord>),
) {
    if w.settings.seals() {
        // Applied (or final as dead letters): the partitions have reached
        // these record times.
        let mut latest: Vec<(&str, i32, i64)> = Vec::new();
        for m in msgs {
            let Some(ts) = m.timestamp().to_millis() else { continue };
            match latest.iter_mut().find(|(t, p, _)| *p == m.partition() && *t == m.topic()) {
                Some(l) => l.2 = l.2.max(ts),
                None => latest.push((m.topic(), m.partition(), ts)),
            }
        }
        for (topic, partition, ts) in latest {
            marks.raise(&keys::offsets_field(topic, partition), ts);
        }
        w.flush_watermarks(marks).await;
    }
    // While the dead-letter topic is known to fail, new dead records wait
    // with the others instead of blocking the loop on another attempt.
    let failed = if dead.is_empty() {
        dead
    } else if held.is_empty() {
        w.send_dead(dead, Some(Duration::from_secs(5))).await
    } else {
        dead
    };
    held.hold(consumer, failed, w.settings.worker.max_backoff);
    for (topic, partition, next) in offsets.to_store() {
        held.note_processed(topic, partition, next - 1);
    }
    store_offsets(consumer, &offsets, held);
}

/// The results of a batch in flight; `None`: abandoned on shutdown. A panic
/// of its apply task is raised again here.
fn landed(joined: Result<Option<Vec<Vec<ApplyResult>>>, tokio::task::JoinError>) -> Option<Vec<Vec<ApplyResult>>> {
    match joined {
        Ok(results) => results,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

/// Commits the stored offsets without waiting. Like librdkafka's own
/// automatic commits, the outcome reaches `WorkerContext::commit_callback`
/// (the `rankflow_commits_total` metric and a warning on failure), through
/// the consumer's queue. rust-rdkafka's `commit_consumer_state(Async)`
/// passes librdkafka no queue for the outcome, so it is dropped
/// (fede1024/rust-rdkafka#856); this passes the consumer's queue, as the
/// fix proposed there (#857) does.
fn commit_stored<C: ConsumerContext>(consumer: &StreamConsumer<C>) -> KafkaResult<()> {
    use rdkafka::bindings as rdsys;
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live handle of `consumer`, borrowed for the call.
    // librdkafka keeps its own reference to the queue until the outcome is
    // delivered, so ours is released at once.
    let err = unsafe {
        let queue = rdsys::rd_kafka_queue_get_consumer(rk);
        // Without a queue librdkafka would commit synchronously, blocking the loop.
        if queue.is_null() {
            return Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::InvalidArgument));
        }
        let err = rdsys::rd_kafka_commit_queue(rk, std::ptr::null(), queue, None, std::ptr::null_mut());
        rdsys::rd_kafka_queue_destroy(queue);
        err
    };
    match RDKafkaErrorCode::from(err) {
        RDKafkaErrorCode::NoError => Ok(()),
        code => Err(KafkaError::ConsumerCommit(code)),
    }
}

/// How many batches may be on their way to Redis at once: two, so that
/// Redis has the next one queued when it finishes one.
const IN_FLIGHT: usize = 2;

/// Once nothing is in flight and no record has come for this long, the
/// offsets stored since the last commit are committed at once, rather than
/// at the next `auto.commit.interval.ms` tick: a drained backlog or a lull
/// shows as committed (and as zero lag) within this, not up to a second later.
const IDLE_COMMIT: Duration = Duration::from_millis(20);

/// The least time between two of those commits, so that sparse traffic
/// (a record now and then, each followed by a lull) commits at most five
/// times a second.
const IDLE_COMMIT_GAP: Duration = Duration::from_millis(200);

/// A batch whose writes are in Redis (or queued for it) while the loop
/// reads and prepares the next one.
struct InFlight<'m> {
    msgs: Vec<BorrowedMessage<'m>>,
    batch: Planned,
    /// The script results, per board tag; `None`: abandoned on shutdown.
    applied: tokio::task::JoinHandle<Option<Vec<Vec<ApplyResult>>>>,
    /// Where the batch leaves each board tag, which the batch sent behind it waits for.
    tails: Tails,
    /// Fires once the batch has landed (dropped if it is abandoned), for the
    /// batch sent behind it; taken when that one is sent.
    landed: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// A batch planned for Redis: its records' offsets, its items, and where
/// each script result goes (per board tag: item, decision).
struct Planned {
    offsets: BatchOffsets,
    items: Vec<Item>,
    back: Vec<Vec<(usize, usize)>>,
}

/// Stores each partition's offset separately: a partition revoked while its
/// batch was in flight fails alone, and its result is dropped, not stored.
/// A partition waiting for the dead-letter topic stops at its first held record.
fn store_offsets(consumer: &StreamConsumer<WorkerContext>, offsets: &BatchOffsets, held: &Held) {
    for (topic, partition, next) in offsets.to_store() {
        let next = held.stop_at(topic, partition).map_or(next, |stop| stop.min(next));
        store_offset(consumer, topic, partition, next);
    }
}

/// Stores `next` (the last final offset + 1) for one partition.
fn store_offset(consumer: &StreamConsumer<WorkerContext>, topic: &str, partition: i32, next: i64) {
    let _span = debug_span!("partition", topic, partition).entered();
    let mut tpl = TopicPartitionList::new();
    if tpl.add_partition_offset(topic, partition, Offset::Offset(next)).is_err() {
        return;
    }
    match consumer.store_offsets(&tpl) {
        Ok(()) => {
            consumer.context().uncommitted.store(true, Ordering::Relaxed);
            debug!(next_offset = next, "Stored the partition's offset.")
        }
        Err(e) => debug!(error = %e, "Partition no longer assigned; its result is dropped, not stored."),
    }
}

/// Everything one batch needs, borrowed from `run`.
struct Worker<'a> {
    settings: &'a Settings,
    router: &'a Router,
    store: &'a Store,
    health: &'a Arc<Health>,
    producer: &'a KafkaProducer,
    cancel: &'a CancellationToken,
    /// Scheduler jobs sent lately (see `schedule::JobCache`).
    jobs: Mutex<JobCache>,
}

/// One record of a batch as parsing left it.
enum Item {
    Skipped,
    /// `player_erased`: always alone in its batch.
    Erase {
        player_id: String,
    },
    Rejected(Rejection),
    Event {
        event: Event,
        decisions: Vec<(usize, Decision)>,
        /// Filled from Redis: one per write decision, in decision order.
        results: Vec<Option<ApplyResult>>,
    },
}

/// A record's final outcome.
enum Final {
    Applied,
    Duplicate,
    Skipped,
    DeadLetter(Vec<Rejection>),
}

impl Worker<'_> {
    /// Notes a batch's records: their offsets, per-partition counts, each
    /// partition's offsets field and each record's partition index.
    fn note(&self, msgs: &[BorrowedMessage<'_>]) -> (BatchOffsets, Vec<String>, Vec<usize>) {
        let m = metrics::get();
        m.batch_size.observe(msgs.len() as f64);
        let mut offsets = BatchOffsets::default();
        let mut fields: Vec<String> = Vec::new();
        let mut consumed: Vec<u64> = Vec::new();
        let mut tp_of = Vec::with_capacity(msgs.len());
        for msg in msgs {
            let tp = offsets.note(msg.topic(), msg.partition(), msg.offset());
            if tp == fields.len() {
                fields.push(keys::offsets_field(msg.topic(), msg.partition()));
                consumed.push(0);
            }
            consumed[tp] += 1;
            tp_of.push(tp);
        }
        // Counted per partition, not per record: one label lookup each.
        for (tp, n) in consumed.iter().enumerate() {
            m.records_consumed.with_label_values(&[offsets.topic_partition(tp).0]).inc_by(*n);
        }
        (offsets, fields, tp_of)
    }

    /// An erasure, always alone in its batch, retried until Redis has done
    /// it. `None`: abandoned on shutdown.
    async fn erase_batch(&self, msgs: &[BorrowedMessage<'_>], items: Vec<Item>) -> Option<BatchOffsets> {
        let (offsets, fields, tp_of) = self.note(msgs);
        if let [Item::Erase { player_id }] = items.as_slice() {
            self.erase(&fields[tp_of[0]], msgs[0].offset(), player_id).await?;
        }
        Some(offsets)
    }

    /// Plans a batch for Redis: every write grouped by board tag in record
    /// order, the scheduler jobs its periods need sent, and the script calls
    /// encoded. `None`: abandoned on shutdown while sending the jobs.
    async fn prepare(&self, msgs: &[BorrowedMessage<'_>], items: Vec<Item>) -> Option<(Planned, Prepared)> {
        let (offsets, fields, tp_of) = self.note(msgs);
        // Group every write of the batch by board tag, in record order.
        let mut tags: Vec<TagBatch<'_>> = Vec::new();
        let mut back: Vec<Vec<(usize, usize)>> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Item::Event { event, decisions, .. } = item else { continue };
            for (d, (_, decision)) in decisions.iter().enumerate() {
                let Decision::Write(w) = decision else { continue };
                let t = push_write(&mut tags, w, event, &fields[tp_of[i]], msgs[i].offset());
                if t == back.len() {
                    back.push(Vec::new());
                }
                back[t].push((i, d));
            }
        }

        // Jobs first: a period or rolling board with data always has its job.
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut jobs = Vec::new();
        {
            let mut cache = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
            let mut seen = std::collections::HashSet::new();
            for item in &items {
                let Item::Event { decisions, .. } = item else { continue };
                for (b, decision) in decisions {
                    let Decision::Write(w) = decision else { continue };
                    let board = &self.router.boards()[*b];
                    if board.close_after.is_none() && board.rolling.is_empty() {
                        continue;
                    }
                    for (job, due) in schedule::jobs_for(board, &w.base, &w.periods, now_ms, &mut seen) {
                        if let Some(job) = cache.fresh(job) {
                            jobs.push((job, due));
                        }
                    }
                }
            }
        }
        if !jobs.is_empty() {
            let prefix = self.router.prefix();
            let sent = retry("enqueue scheduled jobs", self.cancel, self.settings.worker.max_backoff, || {
                schedule::enqueue(self.store, prefix, &jobs)
            })
            .await;
            if sent.is_none() {
                self.jobs.lock().unwrap_or_else(|e| e.into_inner()).forget(&jobs);
                return None;
            }
        }

        let calls = self.store.prepare(&tags);
        drop(tags);
        Some((Planned { offsets, items, back }, calls))
    }

    /// Sends a prepared batch on a task of its own, retried with capped
    /// backoff until Redis has applied it; `done` fires then. `None`:
    /// abandoned on shutdown.
    ///
    /// `after`: the batch was sent behind one still in flight, with
    /// preconditions on it (`Prepared::after`), and this fires when that one
    /// has landed. If the first attempt fails (the batch before failed too,
    /// so the script refused this one, or Redis is down), the batch waits for
    /// the one before to land and is then retried without preconditions.
    fn spawn_apply(
        &self,
        mut calls: Prepared,
        after: Option<tokio::sync::oneshot::Receiver<()>>,
        done: tokio::sync::oneshot::Sender<()>,
        span: tracing::Span,
    ) -> tokio::task::JoinHandle<Option<Vec<Vec<ApplyResult>>>> {
        let (store, cancel, health) = (self.store.clone(), self.cancel.clone(), Arc::clone(self.health));
        let max_backoff = self.settings.worker.max_backoff;
        let apply = async move {
            // An empty batch has nothing to send.
            let mut results = calls.is_empty().then(Vec::new);
            let m = metrics::get();
            let landed = |started: Instant| {
                m.redis_roundtrip.observe(started.elapsed().as_secs_f64());
                health.redis_up.store(true, Ordering::Relaxed);
                m.redis_up.set(1);
            };
            if let (None, Some(after)) = (&results, after) {
                let started = Instant::now();
                match store.apply_prepared(&calls).await {
                    Ok(r) => {
                        landed(started);
                        results = Some(r);
                    }
                    Err(e) => {
                        debug!(error = %e, "A batch sent behind another did not apply; it is sent again once that one has landed.");
                        after.await.ok()?;
                        calls.unconditional();
                    }
                }
            }
            let results = match results {
                Some(r) => r,
                None => {
                    retry("apply a batch to Redis", &cancel, max_backoff, || async {
                        let started = Instant::now();
                        let r = store.apply_prepared(&calls).await;
                        match &r {
                            Ok(_) => landed(started),
                            Err(_) => {
                                m.redis_errors.with_label_values(&["apply"]).inc();
                                health.redis_up.store(false, Ordering::Relaxed);
                                m.redis_up.set(0);
                            }
                        }
                        r
                    })
                    .await?
                }
            };
            let _ = done.send(());
            Some(results)
        };
        // Polled once here, the task queues the batch's calls on the Redis
        // connection before this returns: batches then reach Redis in the
        // order they were sent, which the runtime's order of running new
        // tasks would not ensure (a batch overtaken by the one behind it costs
        // that one a refusal and a second round trip, never an effect).
        let mut apply = Box::pin(apply.instrument(span));
        let waker = futures::task::noop_waker();
        match std::future::Future::poll(apply.as_mut(), &mut std::task::Context::from_waker(&waker)) {
            std::task::Poll::Ready(results) => tokio::spawn(async move { results }),
            std::task::Poll::Pending => tokio::spawn(apply),
        }
    }

    /// Folds a batch's script results into each record's final outcome and
    /// the metrics. Returns the batch's offsets and the records to
    /// dead-letter, which the run loop produces (see [`Held`]).
    fn finish(
        &self,
        msgs: &[BorrowedMessage<'_>],
        batch: Planned,
        results: Vec<Vec<ApplyResult>>,
    ) -> (BatchOffsets, Vec<DeadRecord>) {
        let m = metrics::get();
        let Planned { offsets, mut items, back } = batch;
        for (t, codes) in results.into_iter().enumerate() {
            for (code, &(i, d)) in codes.into_iter().zip(&back[t]) {
                if let Item::Event { results, .. } = &mut items[i] {
                    results[d] = Some(code);
                }
            }
        }

        // Outcomes, metrics, and the records to dead-letter.
        let now_ms = chrono::Utc::now().timestamp_millis();
        let (from_event, from_record) =
            (m.event_latency.with_label_values(&["event"]), m.event_latency.with_label_values(&["record"]));
        let mut dead = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match self.finalize(item) {
                Final::Applied => {
                    if let Item::Event { event, .. } = item {
                        from_event.observe((now_ms - event.ts_ms).max(0) as f64 / 1000.0);
                    }
                    if let Some(ts) = msgs[i].timestamp().to_millis() {
                        from_record.observe((now_ms - ts).max(0) as f64 / 1000.0);
                    }
                }
                Final::Duplicate | Final::Skipped => {}
                Final::DeadLetter(reasons) => dead.push((i, reasons)),
            }
        }
        let dead = dead.iter().map(|(i, reasons)| DeadRecord::new(&msgs[*i], reasons)).collect();
        (offsets, dead)
    }

    /// Writes the pending watermarks; on failure they wait for the next flush.
    async fn flush_watermarks(&self, marks: &Watermarks) {
        let pending = marks.take();
        if pending.is_empty() {
            return;
        }
        if let Err(e) = schedule::write_watermarks(self.store, self.router.prefix(), &pending).await {
            metrics::get().redis_errors.with_label_values(&["watermark"]).inc();
            debug!(error = %e, "Writing watermarks failed; they are written with the next batch.");
            marks.restore(pending);
        }
    }

    fn parse(&self, msg: &BorrowedMessage<'_>) -> Item {
        let m = metrics::get();
        let payload = msg.payload().unwrap_or_default();
        let parsed = event::parse(payload, self.settings.events.max_event_bytes, |t| self.router.listens(t));
        let event = match parsed {
            Parsed::Skipped(_) => {
                m.events_skipped.inc();
                return Item::Skipped;
            }
            Parsed::Rejected(r) => {
                m.events_rejected.with_label_values(&["none", r.reason.as_str()]).inc();
                return Item::Rejected(r);
            }
            Parsed::Erase { player_id, .. } => return Item::Erase { player_id },
            Parsed::Event(e) => e,
        };
        // Decisions use the record's timestamp, so a replay decides alike;
        // a record without one falls back to the event time.
        let record_ts = msg.timestamp().to_millis().unwrap_or(event.ts_ms);
        let skew = self.settings.events.max_future_skew.as_millis() as i64;
        if event.ts_ms > record_ts.saturating_add(skew) {
            let r = Rejection::new(
                Reason::FutureTimestamp,
                format!("event time is {} ms after the record timestamp (limit {skew} ms)", event.ts_ms - record_ts),
            );
            m.events_rejected.with_label_values(&["none", r.reason.as_str()]).inc();
            return Item::Rejected(r);
        }
        let decisions = self.router.plan(&event, record_ts);
        let results = vec![None; decisions.len()];
        Item::Event { event, decisions, results }
    }

    /// Folds one record's board outcomes into its final outcome (SPEC 1):
    /// applied if any board applied it; a duplicate if any board had seen
    /// it; otherwise dead-lettered with every board's reason.
    fn finalize(&self, item: &Item) -> Final {
        let m = metrics::get();
        let (decisions, results) = match item {
            Item::Skipped | Item::Erase { .. } => return Final::Skipped,
            Item::Rejected(r) => return Final::DeadLetter(vec![r.clone()]),
            Item::Event { decisions, results, .. } => (decisions, results),
        };
        let (mut applied, mut duplicate) = (false, false);
        let mut refusals = Vec::new();
        for ((b, decision), result) in decisions.iter().zip(results) {
            let board = &self.router.boards()[*b].id;
            let reason = match (decision, result) {
                (Decision::Refused(reason), _) => *reason,
                (Decision::Write(_), Some(ApplyResult::Applied)) => {
                    applied = true;
                    m.events_applied.with_label_values(&[board]).inc();
                    continue;
                }
                (Decision::Write(_), Some(ApplyResult::DuplicateEvent)) => {
                    duplicate = true;
                    m.events_duplicate.with_label_values(&[board, "event_id"]).inc();
                    continue;
                }
                (Decision::Write(_), Some(ApplyResult::DuplicateOffset)) => {
                    duplicate = true;
                    m.events_duplicate.with_label_values(&[board, "offset"]).inc();
                    continue;
                }
                (Decision::Write(_), Some(ApplyResult::Refused(code))) => {
                    Reason::from_script_code(*code).unwrap_or(Reason::ScoreOutOfRange)
                }
                (Decision::Write(_), None) => continue, // cannot happen: every write has a result
            };
            m.events_rejected.with_label_values(&[board, reason.as_str()]).inc();
            refusals.push(Rejection::new(reason, format!("board {board}: {reason}")));
        }
        if applied {
            Final::Applied
        } else if duplicate {
            Final::Duplicate
        } else {
            Final::DeadLetter(refusals)
        }
    }

    /// Removes a player from every key of every board tag, retrying until
    /// Redis has done it. `None`: abandoned on shutdown.
    async fn erase(&self, field: &str, offset: i64, player_id: &str) -> Option<()> {
        let pattern = format!("{}:{{*}}:_offsets", self.settings.redis.key_prefix);
        retry("erase a player", self.cancel, self.settings.worker.max_backoff, || async {
            let offsets_keys =
                crate::store::scan_keys(&self.settings.redis, &pattern).await.map_err(StoreError::Scan)?;
            let tags: Vec<(String, i64)> = offsets_keys
                .iter()
                .map(|k| {
                    let base = k.trim_end_matches(":_offsets").to_string();
                    let shift = keys::board_of_base(&base)
                        .and_then(|id| self.router.board(id))
                        .map_or(1, |b| b.packing.shift());
                    (base, shift)
                })
                .collect();
            self.store.erase(&tags, field, offset, player_id).await
        })
        .await?;
        info!("Erased a player from every board.");
        Some(())
    }

    /// Tries the held dead records again; a partition whose records are all
    /// acknowledged stores its offset and resumes.
    async fn retry_held(&self, consumer: &StreamConsumer<WorkerContext>, held: &mut Held) {
        let records: Vec<DeadRecord> = held.partitions.values_mut().flat_map(|(r, _)| r.drain(..)).collect();
        let n = records.len();
        for r in self.send_dead(records, Some(Duration::from_secs(2))).await {
            if let Some((pending, _)) = held.partitions.get_mut(&(r.topic.clone(), r.partition)) {
                pending.push(r);
            }
        }
        let drained: Vec<((String, i32), i64)> = held
            .partitions
            .iter()
            .filter(|(_, (r, _))| r.is_empty())
            .map(|(k, (_, processed))| (k.clone(), *processed))
            .collect();
        for ((topic, partition), processed) in drained {
            store_offset(consumer, &topic, partition, processed + 1);
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&topic, partition);
            if let Err(e) = consumer.resume(&tpl) {
                warn!(error = %e, "Could not resume a partition after its dead letters were written.");
            }
            held.partitions.remove(&(topic.clone(), partition));
            info!(topic = %topic, partition, "The dead-letter topic took the held records; the partition goes on.");
        }
        if held.is_empty() {
            held.next_try = None;
        } else {
            held.backoff = (held.backoff * 2).min(self.settings.worker.max_backoff);
            held.next_try = Some(tokio::time::Instant::now() + held.backoff);
            debug!(records = n, "Dead-letter retry failed; trying again later.");
        }
    }

    /// Produces dead records (each at most once while its delivery is in
    /// flight) and waits for their acknowledgements until `wait` has passed
    /// (`None`: until each resolves). Returns those not acknowledged yet.
    async fn send_dead(&self, mut records: Vec<DeadRecord>, wait: Option<Duration>) -> Vec<DeadRecord> {
        let m = metrics::get();
        let topic = &self.settings.kafka.dead_letter_topic;
        for r in &mut records {
            if r.inflight.is_some() {
                continue;
            }
            let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(r.headers.clone());
            if let Some(k) = &r.key {
                record = record.key(k.as_slice());
            }
            if let Some(p) = &r.payload {
                record = record.payload(p.as_slice());
            }
            if let Some(ts) = r.timestamp {
                record = record.timestamp(ts);
            }
            match self.producer.send(record) {
                Ok(f) => r.inflight = Some(f),
                Err(e) => warn!(error = %e, "Could not queue a record for the dead-letter topic."),
            }
        }
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let mut waiting = Vec::new();
        for mut r in records {
            let Some(f) = r.inflight.as_mut() else {
                waiting.push(r);
                continue;
            };
            let outcome = match deadline {
                None => Some(f.await),
                Some(d) => tokio::time::timeout_at(d, f).await.ok(),
            };
            match outcome {
                None => waiting.push(r), // still in flight: checked again next time, never sent twice
                Some(Ok(Ok(_))) => m.dead_letters.with_label_values(&[r.reason.as_str()]).inc(),
                Some(Ok(Err(e))) => {
                    m.dead_letter_errors.inc();
                    warn!(error = %e, topic = %r.topic, partition = r.partition, offset = r.offset,
                        "Could not produce to the dead-letter topic; the record's partition waits.");
                    r.inflight = None;
                    waiting.push(r);
                }
                Some(Err(_)) => {
                    r.inflight = None;
                    waiting.push(r);
                }
            }
        }
        waiting
    }
}

/// A record on its way to the dead-letter topic: an owned copy, so that it
/// can wait for the topic while its partition is paused.
pub struct DeadRecord {
    topic: String,
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
    timestamp: Option<i64>,
    headers: OwnedHeaders,
    /// The first reason, for the metric.
    reason: Reason,
    /// The delivery of the copy already handed to the producer, if any.
    inflight: Option<Delivery>,
}

impl DeadRecord {
    fn new(msg: &BorrowedMessage<'_>, reasons: &[Rejection]) -> DeadRecord {
        let mut reason_list: Vec<&str> = reasons.iter().map(|r| r.reason.as_str()).collect();
        reason_list.dedup();
        let reason = reason_list.join(",");
        let detail = reasons.iter().map(|r| r.detail.as_str()).collect::<Vec<_>>().join("; ");
        let partition = msg.partition().to_string();
        let offset = msg.offset().to_string();
        let mut headers = OwnedHeaders::new();
        if let Some(h) = msg.headers() {
            for header in h.iter() {
                headers = headers.insert(Header { key: header.key, value: header.value });
            }
        }
        let headers = headers
            .insert(Header { key: "rankflow.reason", value: Some(reason.as_str()) })
            .insert(Header { key: "rankflow.detail", value: Some(detail.as_str()) })
            .insert(Header { key: "rankflow.source.topic", value: Some(msg.topic()) })
            .insert(Header { key: "rankflow.source.partition", value: Some(partition.as_str()) })
            .insert(Header { key: "rankflow.source.offset", value: Some(offset.as_str()) });
        DeadRecord {
            topic: msg.topic().to_string(),
            partition: msg.partition(),
            offset: msg.offset(),
            key: msg.key().map(<[u8]>::to_vec),
            payload: msg.payload().map(<[u8]>::to_vec),
            timestamp: msg.timestamp().to_millis(),
            headers,
            reason: reasons.first().map_or(Reason::InvalidJson, |r| r.reason),
            inflight: None,
        }
    }
}

/// Partitions waiting for the dead-letter topic. Such a partition is paused;
/// its stored offset stops at its first held record, so nothing after it is
/// committed, while every other partition goes on.
#[derive(Default)]
struct Held {
    /// (topic, partition) -> (held records, highest offset processed).
    partitions: BTreeMap<(String, i32), (Vec<DeadRecord>, i64)>,
    next_try: Option<tokio::time::Instant>,
    backoff: Duration,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// The offset to store for a held partition: its first held record.
    fn stop_at(&self, topic: &str, partition: i32) -> Option<i64> {
        let (records, _) = self.partitions.get(&(topic.to_string(), partition))?;
        records.iter().map(|r| r.offset).min()
    }

    fn note_processed(&mut self, topic: &str, partition: i32, last: i64) {
        if let Some((_, processed)) = self.partitions.get_mut(&(topic.to_string(), partition)) {
            *processed = (*processed).max(last);
        }
    }

    fn hold(&mut self, consumer: &StreamConsumer<WorkerContext>, records: Vec<DeadRecord>, max_backoff: Duration) {
        // Nothing to hold: no retry is due (a due time with nothing held
        // would wake the run loop at once, over and over).
        if records.is_empty() {
            return;
        }
        for r in records {
            let key = (r.topic.clone(), r.partition);
            if !self.partitions.contains_key(&key) {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition(&r.topic, r.partition);
                if let Err(e) = consumer.pause(&tpl) {
                    warn!(error = %e, "Could not pause a partition waiting for the dead-letter topic.");
                }
                self.partitions.insert(key.clone(), (Vec::new(), r.offset));
            }
            if let Some((held, processed)) = self.partitions.get_mut(&key) {
                *processed = (*processed).max(r.offset);
                held.push(r);
            }
        }
        if self.next_try.is_none() {
            self.backoff = Duration::from_millis(500).min(max_backoff);
            self.next_try = Some(tokio::time::Instant::now() + self.backoff);
        }
    }
}

/// Runs `op` until it succeeds, waiting 100 ms, 200 ms, ... up to `max`
/// between attempts. Returns `None` if `cancel` fires while waiting.
pub async fn retry<T, E, F, Fut>(what: &str, cancel: &CancellationToken, max: Duration, mut op: F) -> Option<T>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut delay = Duration::from_millis(100).min(max);
    let mut attempt: u32 = 0;
    loop {
        match op().await {
            Ok(v) => {
                if attempt > 0 {
                    info!(attempts = attempt + 1, "Recovered: {what} succeeded.");
                }
                return Some(v);
            }
            Err(e) => {
                attempt += 1;
                warn!(error = %e, attempt, retry_in_ms = delay.as_millis() as u64, "Could not {what}; retrying.");
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(max);
            }
        }
    }
}
