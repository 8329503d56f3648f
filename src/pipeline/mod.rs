//! The pipeline: reads records from Kafka in batches, applies them to Redis,
//! dead-letters what cannot be applied, and stores offsets only for records
//! whose outcome is final.
//!
//! One batch goes through these steps, each a method of [`Pipeline`]:
//! 1. [`next_batch`](Pipeline::next_batch) (`read.rs`): up to `batch_size` records
//!    (waiting at most `batch_linger` once the first is in), each copied out
//!    of the consumer and parsed (`record::take`, `Router::plan`);
//! 2. [`send`](Pipeline::send): every board write of the batch handed to
//!    the store's writer (`apply`), which sends its script calls in order
//!    behind the batch before and retries what did not land with capped
//!    backoff (safe: the script recognises records it already applied by
//!    their offset; `store::Writer` states the contract);
//! 3. [`settle`](Pipeline::settle), once it has landed: each record's
//!    outcome (`outcome::fold`); the records no board applied (and that were
//!    no duplicate) handed to the producer as dead letters, the rank
//!    changes the calls reported (`changes`) as change records and the
//!    events held for review (`review`) as review records, their
//!    acknowledgements looked at as the loop goes on
//!    ([`check_held`](Pipeline::check_held)); a partition whose produced
//!    records failed is paused until they land (`held::Held`), while every
//!    other partition goes on;
//! 4. then, per partition, the batch's last offset + 1 stored (for a
//!    partition with produced records not yet acknowledged: the offset of
//!    the first of their source records, until they are). librdkafka commits
//!    stored offsets every `auto.commit.interval.ms`, on revocation and on
//!    shutdown; the loop also commits them as soon as it is idle.
//!
//! Batches overlap Redis: up to two are on their way at once, so that Redis
//! starts on the next the moment it is done with one, while the loop reads,
//! parses and encodes a third; `inflight` states the ordering rules that keep
//! this exact. Every admin event (a correction, a hide, an erasure, a
//! review's decision) is a batch of its own, sent once every batch before
//! it has settled, so it stays ordered with the player's other events.
//!
//! The pipeline never stores an offset past a record whose outcome is not
//! final. While Redis is retried it holds at most two more batches, and a
//! partition whose produced records failed is paused, so memory stays
//! bounded by three batches, the produced records in flight and librdkafka's
//! `queued.max.messages.kbytes`.

mod apply;
mod changes;
mod held;
mod inflight;
mod lost;
mod moderation;
mod outcome;
mod read;
mod record;
mod review;
mod reviews;
mod txn;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::board::Router;
use crate::config::Settings;
use crate::health::Health;
use crate::kafka::callbacks::ConsumerCallbacks;
use crate::kafka::commit::{self, WorkerConsumer};
use crate::kafka::offsets::BatchOffsets;
use crate::kafka::{client, connect, producer::KafkaProducer};
use crate::keys;
use crate::metrics;
use crate::schedule::{self, JobCache};
use crate::schemas::Schemas;
use crate::store::{BatchResults, Store};
use crate::watermarks::Watermarks;

use apply::Planned;
use held::{Held, Outgoing, Step};
use inflight::Queue;
use outcome::Final;
use record::{Item, Record, TopicNames};

/// Errors that stop the worker at start-up. Once running, faults are retried.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot create the Kafka consumer: {0}")]
    Consumer(#[source] KafkaError),
    #[error("cannot subscribe to {topics:?}: {source}")]
    Subscribe { topics: Vec<String>, source: KafkaError },
    #[error("cannot create the dead-letter producer: {0}")]
    Producer(#[source] KafkaError),
    /// A broker refused the TLS handshake or the credentials before any
    /// answered: nothing was read or written.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Schemas(String),
    /// The brokers refused transactions (`kafka.transactions`), or a
    /// producer to replace a failed one.
    #[error("{0}")]
    Transactions(String),
}

/// Everything the steps share and never change.
pub(crate) struct Context {
    settings: Arc<Settings>,
    router: Arc<Router>,
    store: Store,
    health: Arc<Health>,
    producer: KafkaProducer,
    cancel: CancellationToken,
    /// Scheduler jobs sent lately (see `schedule::JobCache`).
    jobs: Mutex<JobCache>,
    /// Per-partition record times applied, for boards that seal periods.
    marks: Arc<Watermarks>,
    /// Board tags this worker knows are in the registry of tags (see `apply::register_tags`).
    tags: Mutex<HashSet<String>>,
    /// What this worker last recorded (or found at start) in the group's
    /// deployment marker, per partition field: Redis must hold at least
    /// that (see `lost::record`).
    recorded: Mutex<std::collections::HashMap<String, i64>>,
    /// The schemas of Avro and Protobuf records, fetched as records name them.
    schemas: Schemas,
    produce: Produce,
    /// Where dead letters and rank changes go (`kafka.dead_letter_topic`, `kafka.changes_topic`).
    dead_letter_topic: Arc<str>,
    changes_topic: Option<Arc<str>>,
    /// Where held events go (`kafka.review_topic`).
    review_topic: Option<Arc<str>>,
    /// Where `hold_hides_after` sends its `player_hidden` (the first admin topic).
    admin_topic: Option<Arc<str>>,
}

/// The batch loop's state, with its steps as methods.
struct Pipeline {
    cx: Context,
    consumer: WorkerConsumer,
    topics: TopicNames,
    inflight: Queue<Planned>,
    /// Sends the batches to Redis, in order (see `store::Writer`).
    writer: crate::store::Writer,
    held: Held,
    /// With `kafka.transactions`: the transactions outputs and offsets go in
    /// (`held` is then unused).
    txn: Option<txn::Txn>,
    /// A record read while a batch was open that must start a batch of its
    /// own (an erasure).
    carry: Option<Record>,
    /// When the loop last committed on going idle.
    last_idle_commit: Instant,
    batch_no: u64,
}

/// What waiting for the next batch came to.
enum Next {
    Batch(Vec<Record>),
    /// Something else was done (a batch settled, a commit, a retry): look again.
    Again,
    Stop,
}

/// Whether the pipeline produces dead letters and rank changes: the worker
/// does; a rebuild, which reads records the workers have already produced
/// for, does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Produce {
    Send,
    Drop,
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
    run_with(settings, router, store, health, cancel, Produce::Send).await
}

/// [`run`], with or without dead letters and rank changes.
pub async fn run_with(
    settings: Arc<Settings>,
    router: Arc<Router>,
    store: Store,
    health: Arc<Health>,
    cancel: CancellationToken,
    produce: Produce,
) -> Result<(), WorkerError> {
    let marks = Arc::new(Watermarks::default());
    let idle = settings.seals().then(|| (marks.clone(), settings.sealing.idle_grace.as_millis() as i64));
    // Every second: consumer lag and broker health are fresh within a
    // second of start, and boards that seal periods raise watermarks from it.
    let statistics_ms = 1000;
    // A rebuild produces nothing: its offsets are committed as without transactions.
    let transactional = settings.kafka.transactions && produce == Produce::Send;
    let consumer: WorkerConsumer = client::consumer(&settings.kafka, statistics_ms, transactional)
        .create_with_context(ConsumerCallbacks::new(health.clone(), idle, transactional))
        .map_err(WorkerError::Consumer)?;
    let topics: Vec<&str> =
        settings.kafka.topics.iter().chain(&settings.kafka.admin_topics).map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|source| WorkerError::Subscribe { topics: topics.iter().map(|t| t.to_string()).collect(), source })?;
    let producer = KafkaProducer::new(&client::producer(&settings.kafka)).map_err(WorkerError::Producer)?;
    let schemas = Schemas::new(&settings.kafka).map_err(WorkerError::Schemas)?;
    metrics::get().init_boards(router.boards());
    info!(topics = ?settings.kafka.topics, admin_topics = ?settings.kafka.admin_topics, group = %settings.kafka.group_id, "Worker started.");
    // Nothing is read or written before a broker answers: one that refuses
    // our TLS or credentials stops the worker here, naming the settings.
    match connect::first_connection(&settings.kafka, &cancel).await {
        Ok(true) => {}
        Ok(false) => return Ok(()),
        Err(why) => return Err(WorkerError::Refused(why)),
    }
    let Some(txn) = txn::Txn::start(&settings, &cancel, transactional).await.map_err(WorkerError::Transactions)? else {
        return Ok(()); // shutdown first
    };

    let dead_letter_topic = Arc::from(settings.kafka.dead_letter_topic.as_str());
    let changes_topic = settings.kafka.changes_topic.as_deref().map(Arc::from);
    let review_topic = settings.kafka.review_topic.as_deref().map(Arc::from);
    let admin_topic = settings.kafka.admin_topics.first().map(|t| Arc::from(t.as_str()));
    let cx = Context {
        settings,
        router,
        store,
        health,
        producer,
        cancel,
        jobs: Mutex::default(),
        marks,
        tags: Mutex::default(),
        recorded: Mutex::default(),
        schemas,
        produce,
        dead_letter_topic,
        changes_topic,
        review_topic,
        admin_topic,
    };
    if !lost::check(&cx, &consumer).await {
        // Redis lost data (or shutdown came first): consume nothing, commit nothing.
        commit::close(consumer, &cx.producer, false);
        return Ok(());
    }
    let mut p = Pipeline {
        writer: apply::writer(&cx),
        cx,
        consumer,
        topics: TopicNames::default(),
        inflight: Queue::default(),
        held: Held::default(),
        txn,
        carry: None,
        last_idle_commit: Instant::now(),
        batch_no: 0,
    };
    loop {
        if lost::refused(&p.cx) {
            // Redis lost data while running: nothing more is applied or
            // stored; the batches in flight are left to be read again.
            p.inflight.abandon();
            p.cx.cancel.cancelled().await;
            break;
        }
        if p.txn.as_ref().is_some_and(txn::Txn::is_broken) {
            if let Err(why) = p.rewind().await {
                p.inflight.abandon();
                let Pipeline { cx, consumer, .. } = p;
                commit::close(consumer, &cx.producer, true);
                return Err(WorkerError::Transactions(why));
            }
            continue;
        }
        p.check_held().await;
        let records = match p.next_batch().await {
            Next::Batch(records) => records,
            Next::Again => continue,
            Next::Stop => break,
        };
        if !p.send(records).await && !lost::refused(&p.cx) {
            break;
        }
    }
    p.drain().await;
    p.stop().await;
    Ok(())
}

/// A landed batch's clock and its latency histograms (`rankflow_event_latency_seconds`).
struct Latency {
    now_ms: i64,
    from_event: prometheus::Histogram,
    from_record: prometheus::Histogram,
}

/// Counts each board's tally of a record in the metrics (a membership
/// event applied to a team board in `rankflow_team_memberships_total` too).
fn count<'a>(
    tallies: &[(usize, outcome::Tally)],
    board_id: impl Fn(usize) -> &'a str,
    membership: Option<&crate::event::Membership>,
) {
    use outcome::Tally;
    let m = metrics::get();
    for (b, tally) in tallies {
        let board = board_id(*b);
        match tally {
            Tally::Applied => {
                m.events_applied.with_label_values(&[board]).inc();
                if let Some(t) = membership {
                    m.team_memberships.with_label_values(&[board, if t.joined { "joined" } else { "left" }]).inc();
                }
            }
            Tally::Duplicate(by) => m.events_duplicate.with_label_values(&[board, by]).inc(),
            Tally::Refused(reason) => m.events_rejected.with_label_values(&[board, reason.as_str()]).inc(),
            Tally::Held(rule, _) => m.review.held.with_label_values(&[board, rule.as_str()]).inc(),
        }
    }
}

impl Pipeline {
    /// Ends the run: the last transaction committed (or the stored offsets)
    /// and the group left. A worker that found lost data commits nothing
    /// more, not even what it settled before: the recovery (a rebuild or
    /// accept-loss) starts from the commits as they stood, which a commit
    /// at shutdown would move past.
    async fn stop(mut self) {
        let refused = lost::refused(&self.cx);
        match refused {
            false => info!("Worker stopping: committing final offsets and leaving the group."),
            true => info!("Worker stopping after lost data: nothing is committed; leaving the group."),
        }
        if let Some(t) = self.txn.as_mut() {
            match refused {
                false => t.close(&self.consumer, &self.cx.cancel).await,
                true => t.abandon(&self.cx.cancel).await,
            }
        }
        let Pipeline { cx, consumer, .. } = self;
        commit::close(consumer, &cx.producer, !refused);
        info!("Worker stopped.");
    }

    /// Step 2: sends a batch to Redis behind those in flight (an admin
    /// event waits for them and runs alone). `false`: shutdown abandoned it.
    async fn send(&mut self, records: Vec<Record>) -> bool {
        self.batch_no += 1;
        let span = info_span!("batch", n = self.batch_no, records = records.len());
        if let [record] = records.as_slice() {
            if record.is_alone() {
                return self.admin(records).instrument(span).await;
            }
        }
        let Some((planned, calls)) = apply::prepare(&self.cx, records).instrument(span.clone()).await else {
            info!("Shutdown (or lost data) while registering tags or sending scheduler jobs: the batch is abandoned and its offsets are not stored.");
            return false;
        };
        // With two batches in flight, the older one leaves Redis first; this
        // one is sent at once, behind the newer one, so Redis is never idle
        // while the loop settles the older batch's outcomes.
        let before = if self.inflight.is_full() {
            match self.inflight.oldest().await {
                (older, Some(results)) => Some((older, results)),
                (_, None) => {
                    info!("Shutdown (or lost data) during a retry: the batches in flight are abandoned and their offsets are not stored.");
                    return false;
                }
            }
        } else {
            None
        };
        let applied = tokio::spawn(apply::send(&self.cx, &self.writer, calls, span));
        self.inflight.push(planned, applied);
        if let Some((older, results)) = before {
            self.settle_landed(older, results).await;
        }
        true
    }

    /// An admin event, alone in its batch: every batch before it settles
    /// first, so it stays ordered with the records before it.
    async fn admin(&mut self, mut records: Vec<Record>) -> bool {
        while !self.inflight.is_empty() {
            match self.inflight.oldest().await {
                (planned, Some(results)) => self.settle_landed(planned, results).await,
                (_, None) => return false,
            }
        }
        let (offsets, fields) = apply::note(&records);
        let mut dead = Vec::new();
        if let [Record { origin, source, item: Item::Admin { event, plan } }] = records.as_mut_slice() {
            let done = match plan.op {
                crate::moderation::AdminOp::Review { held, approve } => {
                    let ts = origin.timestamp.unwrap_or_else(|| chrono::Utc::now().timestamp_millis());
                    reviews::apply_review(&self.cx, (&fields[0], origin.offset, ts), event, (held, approve)).await
                }
                _ => moderation::apply_admin(&self.cx, &fields[0], origin.offset, event, plan).await,
            };
            match done {
                None => {
                    info!("Shutdown during a retry: the admin event is abandoned and its offset is not stored.");
                    return false;
                }
                Some(moderation::AdminOutcome::Refused(rejection)) => {
                    let to = self.cx.dead_letter_topic.clone();
                    dead.push(Outgoing::dead_letter(origin.clone(), source.take(), &[rejection], to));
                }
                Some(_) => {}
            }
        }
        self.settle(&records, offsets, dead).await;
        true
    }

    /// Step 3 for a batch Redis has answered.
    async fn settle_landed(&mut self, planned: Planned, results: BatchResults) {
        let (records, offsets, dead) = self.finish(planned, results);
        self.settle(&records, offsets, dead).await;
    }

    /// Folds a batch's script results into each record's final outcome and
    /// the metrics. Returns the batch's records, its offsets and the records
    /// to produce for them: rank changes, review records, dead letters.
    fn finish(&self, planned: Planned, results: BatchResults) -> (Vec<Record>, BatchOffsets, Vec<Outgoing>) {
        let Planned { mut records, offsets, routes } = planned;
        outcome::distribute(&mut records, &routes, results);
        // The latency histograms looked up once per batch, not per record.
        let m = metrics::get();
        let latency = Latency {
            now_ms: chrono::Utc::now().timestamp_millis(),
            from_event: m.event_latency.with_label_values(&["event"]),
            from_record: m.event_latency.with_label_values(&["record"]),
        };
        let mut out = Vec::new();
        for record in &mut records {
            self.conclude(record, &latency, &mut out);
        }
        (records, offsets, out)
    }

    /// One landed record: its boards' tallies counted, its outcome decided,
    /// and what it produces added to `out`: its rank changes, its review
    /// records and hides, its dead letter (which takes its source bytes).
    fn conclude(&self, record: &mut Record, latency: &Latency, out: &mut Vec<Outgoing>) {
        let boards = self.cx.router.boards();
        let (tallies, membership) = match &record.item {
            Item::Event { decided, event, .. } => (outcome::tallies(decided), event.team.as_ref()),
            _ => (Vec::new(), None),
        };
        count(&tallies, |b| boards[b].id(), membership);
        if let Some(to) = &self.cx.changes_topic {
            out.extend(changes::outgoing(record, boards, to));
        }
        if let Some(to) = &self.cx.review_topic {
            out.extend(review::outgoing(record, boards, to, self.cx.admin_topic.as_ref()));
        }
        let why = |b, e: &_, r| self.cx.router.refusal_detail(b, e, r);
        match outcome::fold(&record.item, &tallies, |b| boards[b].id(), why) {
            Final::Applied => {
                let secs = |since_ms: i64| (latency.now_ms - since_ms).max(0) as f64 / 1000.0;
                if let Item::Event { event, .. } = &record.item {
                    latency.from_event.observe(secs(event.ts_ms));
                }
                if let Some(ts) = record.origin.timestamp {
                    latency.from_record.observe(secs(ts));
                }
            }
            Final::Duplicate | Final::Held | Final::Skipped => {}
            Final::DeadLetter(reasons) => {
                let to = self.cx.dead_letter_topic.clone();
                out.push(Outgoing::dead_letter(record.origin.clone(), record.source.take(), &reasons, to));
            }
        }
    }

    /// Steps 3 and 4: watermarks, dead letters, held partitions, and each
    /// partition's offset stored.
    async fn settle(&mut self, records: &[Record], offsets: BatchOffsets, produced: Vec<Outgoing>) {
        if self.cx.settings.seals() {
            // Applied (or final as dead letters): the partitions have reached
            // these record times.
            let mut latest: Vec<(&str, i32, i64)> = Vec::new();
            for Record { origin: r, .. } in records {
                let Some(ts) = r.timestamp else { continue };
                match latest.iter_mut().find(|(t, p, _)| *p == r.partition && *t == &*r.topic) {
                    Some(l) => l.2 = l.2.max(ts),
                    None => latest.push((&r.topic, r.partition, ts)),
                }
            }
            for (topic, partition, ts) in latest {
                self.cx.marks.raise(&keys::offsets_field(topic, partition), ts);
            }
            self.flush_watermarks().await;
        }
        if self.txn.is_some() {
            self.settle_in_txn(offsets, produced, records.len()).await;
            return;
        }
        // Dead letters and rank changes go to the producer at once; their
        // acknowledgements are looked at as the loop goes on (see `check_held`).
        if !produced.is_empty() && self.cx.produce == Produce::Send {
            let queued = held::send(&self.cx.producer, produced, Some(Duration::ZERO)).await;
            self.held.hold(queued);
        }
        let mut stores = Vec::new();
        for (topic, partition, next) in offsets.to_store() {
            self.held.note_processed(topic, partition, next - 1);
            stores.push((topic, partition, self.held.offset_to_store(topic, partition, next)));
        }
        // Redis records what is about to be stored first (see `lost`).
        let marked: Vec<(String, i64)> = stores.iter().map(|(t, p, n)| (keys::offsets_field(t, *p), *n)).collect();
        if !lost::record(&self.cx, &marked).await {
            return; // shutdown while Redis was retried: nothing stored
        }
        for (topic, partition, next) in stores {
            commit::store_offset(&self.consumer, topic, partition, next);
        }
        self.check_held().await;
    }

    /// Looks at the produced records not yet acknowledged, once due: a
    /// partition whose records are all in stores its offset (and resumes, if
    /// a failure had paused it); one whose records failed is paused, and
    /// they are sent again with backoff.
    async fn check_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let consumer = &self.consumer;
        self.held.keep_assigned(|t, p| commit::is_assigned(consumer, t, p));
        let now = Instant::now();
        if self.held.next_try().is_none_or(|due| now < due) {
            return;
        }
        let due = self.held.take_due(now);
        let waiting = held::send(&self.cx.producer, due, Some(Duration::ZERO)).await;
        for step in self.held.put_back(waiting, now, self.cx.settings.worker.max_backoff) {
            match step {
                Step::Pause(topic, partition) => {
                    warn!(topic = %topic, partition, "Records produced for this partition (dead letters or rank changes) failed; it waits until their topic takes them.");
                    commit::set_paused(&self.consumer, &topic, partition, true);
                }
                Step::Release { topic, partition, next, resume } => {
                    if !lost::record(&self.cx, &[(keys::offsets_field(&topic, partition), next)]).await {
                        return;
                    }
                    commit::store_offset(&self.consumer, &topic, partition, next);
                    if resume {
                        commit::set_paused(&self.consumer, &topic, partition, false);
                        info!(topic = %topic, partition, "The held records are in their topic; the partition goes on.");
                    }
                }
            }
        }
    }

    /// Writes the pending watermarks; on failure they wait for the next flush.
    async fn flush_watermarks(&self) {
        let pending = self.cx.marks.take();
        if pending.is_empty() {
            return;
        }
        if let Err(e) = schedule::write_watermarks(&self.cx.store, self.cx.router.prefix(), &pending).await {
            metrics::get().redis_errors.with_label_values(&["watermark"]).inc();
            debug!(error = %e, "Writing watermarks failed; they are written with the next batch.");
            self.cx.marks.restore(pending);
        }
    }

    /// On shutdown: batches Redis has already answered are settled, oldest
    /// first, unless that would wait for a produced record; then that
    /// batch and those behind it are left to be read again.
    async fn drain(&mut self) {
        while !self.inflight.is_empty() {
            let Some((planned, Some(results))) = self.inflight.oldest_within(Duration::from_secs(1)).await else {
                break;
            };
            let (records, offsets, produced) = self.finish(planned, results);
            if !produced.is_empty() && self.cx.produce == Produce::Send && self.txn.is_none() {
                break;
            }
            self.settle(&records, offsets, produced).await;
        }
        self.inflight.abandon();
        self.carry = None;
    }
}
