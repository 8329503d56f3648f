//! Every output exactly once (`kafka.transactions`): what settled batches
//! produce, and the offsets after their records, gathered into one Kafka
//! transaction at a time and committed together.
//!
//! A transaction opens with the first settled batch after the last one
//! and is committed [`COMMIT_INTERVAL`] later (sooner when the loop goes
//! idle), on a blocking thread while the loop goes on: batches settled
//! meanwhile wait in memory (the records of at most [`MAX_QUEUED`] full
//! batches, then the loop waits for the commit) and open the next
//! transaction once it is done.
//!
//! A transaction that cannot commit is *broken*: a failed call librdkafka
//! says needs an abort, a fatal error (the producer is replaced), or a
//! partition of it that left this worker (its next owner reads it from the
//! committed offset, so its records' outputs must not be committed here).
//! The pipeline then aborts it and reads every partition again from its
//! committed offset: Redis answers the redelivered records as it did the
//! first time (their decisions, refusals and rank changes are remembered
//! beside their offsets), so the same outputs are produced again, once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::held::Outgoing;
use super::{lost, Pipeline};
use crate::kafka::commit::{self, WorkerConsumer};
use crate::kafka::offsets::BatchOffsets;
use crate::kafka::transaction::{classify, Fault, Transactional};
use crate::keys;
use crate::metrics;

/// How long a transaction stays open while the loop is busy.
pub const COMMIT_INTERVAL: Duration = Duration::from_millis(100);

/// How many full batches' records may wait for a commit in flight before
/// the loop waits for it. Counted in records, not batches: at a low rate
/// batches are small (`batch_linger`), and a commit must not hold up the
/// many small batches that settle while it runs.
const MAX_QUEUED: usize = 8;

/// What one settled batch adds to a transaction: its outputs and, per
/// partition, the offset after its records.
pub struct Settled {
    pub outputs: Vec<Outgoing>,
    pub offsets: Vec<(Arc<str>, i32, i64)>,
    /// How many records the batch held.
    pub records: usize,
    /// When it settled: a transaction is due [`COMMIT_INTERVAL`] after its
    /// first batch settled, even if that batch waited for the commit before.
    pub at: Instant,
}

/// Why the open transaction cannot commit.
#[derive(Debug)]
pub enum Broken {
    /// Aborted, and the producer goes on.
    Abort(String),
    /// The producer is done: a new one replaces it.
    Fatal(String),
}

impl Broken {
    fn of(e: &KafkaError) -> Broken {
        match classify(e) {
            Fault::Fatal => Broken::Fatal(e.to_string()),
            _ => Broken::Abort(e.to_string()),
        }
    }
}

/// The transaction open, the one committing, and what waits for it.
pub struct Txn {
    kafka: Transactional,
    open: Option<Open>,
    committing: Option<Committing>,
    queued: Vec<Settled>,
    /// How many records the queued batches may hold.
    queue_limit: usize,
    broken: Option<Broken>,
    /// A transaction was begun and is neither committed nor aborted.
    begun: bool,
    /// Transactions aborted since the last commit: the rewind after one waits longer each time.
    aborts_in_a_row: u32,
    /// Per partition, the highest offset put in a transaction since the
    /// last abort (see [`Txn::behind`]).
    sent: std::collections::HashMap<(Arc<str>, i32), i64>,
}

struct Open {
    since: Instant,
    offsets: BTreeMap<(Arc<str>, i32), i64>,
    outputs: Vec<Outgoing>,
}

struct Committing {
    started: Instant,
    task: JoinHandle<Result<(), KafkaError>>,
    offsets: Vec<(Arc<str>, i32, i64)>,
    outputs: Vec<Outgoing>,
}

impl Txn {
    /// The pipeline's transactions, if `transactional`: `Ok(Some(None))`
    /// without; `Ok(None)` if shutdown came first; `Err`: the brokers
    /// refused them (naming `kafka.transactions` and the permission).
    pub async fn start(
        settings: &crate::config::Settings,
        cancel: &CancellationToken,
        transactional: bool,
    ) -> Result<Option<Option<Txn>>, String> {
        if !transactional {
            return Ok(Some(None));
        }
        let listen = settings.http.listen.to_string();
        Ok(Transactional::start(&settings.kafka, &listen, cancel).await?.map(|t| {
            tracing::info!(transactional_id = t.id(), "Kafka transactions initialised.");
            Some(Txn::new(t, MAX_QUEUED * settings.worker.batch_size))
        }))
    }

    /// `queue_limit`: how many settled records may wait for a commit in flight.
    pub fn new(kafka: Transactional, queue_limit: usize) -> Txn {
        Txn {
            kafka,
            open: None,
            committing: None,
            queued: Vec::new(),
            queue_limit,
            broken: None,
            begun: false,
            aborts_in_a_row: 0,
            sent: Default::default(),
        }
    }

    /// Adds a settled batch: to the open transaction (opened if need be),
    /// or behind the commit in flight.
    pub async fn add(&mut self, settled: Settled) {
        if self.broken.is_some() {
            return; // read again after the abort
        }
        if self.committing.is_some() {
            self.queued.push(settled);
            return;
        }
        self.put(settled).await;
    }

    async fn put(&mut self, Settled { outputs, offsets, at, .. }: Settled) {
        if self.open.is_none() {
            if let Err(e) = self.kafka.begin() {
                self.broken = Some(Broken::of(&e));
                return;
            }
            self.begun = true;
            self.open = Some(Open { since: at, offsets: BTreeMap::new(), outputs: Vec::new() });
        }
        let mut outputs = outputs;
        for out in &mut outputs {
            loop {
                match out.queue_in_transaction(self.kafka.producer()) {
                    // The delivery is the commit's: it fails if any record does.
                    Ok(_) => break,
                    Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)) => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(e) => {
                        self.broken = Some(Broken::of(&e));
                        return;
                    }
                }
            }
        }
        let open = self.open.as_mut().expect("opened above");
        open.outputs.extend(outputs);
        for (topic, partition, next) in offsets {
            let sent = self.sent.entry((topic.clone(), partition)).or_insert(next);
            *sent = (*sent).max(next);
            let at = open.offsets.entry((topic, partition)).or_insert(next);
            *at = (*at).max(next);
        }
    }

    /// When the open transaction is due to commit, if one is open and none is committing.
    pub fn due(&self) -> Option<Instant> {
        match (&self.open, &self.committing, &self.broken) {
            (Some(open), None, None) => Some(open.since + COMMIT_INTERVAL),
            _ => None,
        }
    }

    /// Whether a partition's position is past every offset put in a
    /// transaction: the consumer stepped over transaction markers (or
    /// aborted records) after the last record it returned. Only for a
    /// partition with a record settled since the last abort: after a
    /// rewind, the position only counts once a record read since has
    /// moved it.
    pub fn behind(&self, topic: &str, partition: i32, position: i64) -> bool {
        let sent = self.sent.iter().find(|((t, p), _)| *p == partition && &**t == topic).map(|(_, o)| *o);
        sent.is_some_and(|o| o < position)
    }

    pub fn is_committing(&self) -> bool {
        self.committing.is_some()
    }

    /// Whether settling must wait for the commit in flight.
    pub fn is_backed_up(&self) -> bool {
        self.queued.iter().map(|s| s.records).sum::<usize>() >= self.queue_limit
    }

    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    /// Hands the open transaction to a commit, with the group's metadata
    /// taken now: a partition that left this worker breaks it instead.
    pub fn start_commit(&mut self, consumer: &WorkerConsumer) {
        if self.committing.is_some() || self.broken.is_some() {
            return;
        }
        let Some(open) = self.open.take() else { return };
        let moved = open.offsets.keys().find(|(t, p)| !commit::is_assigned(consumer, t, *p));
        if let Some((t, p)) = moved {
            self.broken = Some(Broken::Abort(format!("partition {t}/{p} left this worker")));
            return;
        }
        let Some(group) = consumer.group_metadata() else {
            self.broken = Some(Broken::Abort("the consumer has no group metadata".into()));
            return;
        };
        let mut tpl = TopicPartitionList::new();
        for ((t, p), next) in &open.offsets {
            if let Err(e) = tpl.add_partition_offset(t, *p, Offset::Offset(*next)) {
                self.broken = Some(Broken::of(&e));
                return;
            }
        }
        let offsets = open.offsets.into_iter().map(|((t, p), n)| (t, p, n)).collect();
        let task = self.kafka.commit(tpl, group);
        self.committing = Some(Committing { started: Instant::now(), task, offsets, outputs: open.outputs });
    }

    /// Waits for the commit in flight. `Some`: it committed, and these are
    /// the offsets it committed (the queued batches opened the next
    /// transaction); `None`: it broke, or none was in flight.
    pub async fn finish_commit(&mut self) -> Option<Vec<(Arc<str>, i32, i64)>> {
        self.committing.as_ref()?;
        let result = committed(Some(self)).await;
        self.conclude(result).await
    }

    /// [`finish_commit`](Self::finish_commit), given the outcome of [`committed`].
    pub async fn conclude(&mut self, result: Result<(), KafkaError>) -> Option<Vec<(Arc<str>, i32, i64)>> {
        let Committing { started, offsets, outputs, .. } = self.committing.take()?;
        let m = metrics::get();
        match result {
            Ok(()) => {
                self.begun = false;
                self.aborts_in_a_row = 0;
                m.transaction_commit.observe(started.elapsed().as_secs_f64());
                m.transactions.with_label_values(&["committed"]).inc();
                for out in &outputs {
                    out.count_delivered();
                }
                debug!(outputs = outputs.len(), partitions = offsets.len(), "Transaction committed.");
                for settled in std::mem::take(&mut self.queued) {
                    self.put(settled).await;
                }
                Some(offsets)
            }
            Err(e) => {
                // Name the topics that failed, if records did.
                let (mut outputs, mut named) = (outputs, std::collections::HashSet::new());
                let mut failed = 0;
                for out in &mut outputs {
                    let first = !named.contains(out.destination());
                    if out.failed_in_transaction(first) {
                        failed += 1;
                        named.insert(out.destination().clone());
                    }
                }
                debug!(failed, "A transaction's commit failed.");
                self.broken = Some(Broken::of(&e));
                None
            }
        }
    }

    /// Whether the commit in flight is done (so [`finish_commit`](Self::finish_commit) does not wait).
    pub fn commit_done(&self) -> bool {
        self.committing.as_ref().is_some_and(|c| c.task.is_finished())
    }

    /// Ends a broken transaction: aborted (a commit in flight waited for
    /// first), or, after a fatal error, the producer replaced. Everything
    /// it and the queue held is dropped: the consumer reads it again.
    /// `Err`: a new producer was refused (the worker stops).
    pub async fn abort(&mut self, cancel: &CancellationToken) -> Result<(), String> {
        if self.committing.is_some() {
            // Whether it commits or not, only what follows it is dropped.
            self.finish_commit().await;
        }
        let broken = self.broken.take().unwrap_or(Broken::Abort("shutdown".into()));
        self.open = None;
        self.queued.clear();
        self.sent.clear();
        metrics::get().transactions.with_label_values(&["aborted"]).inc();
        self.aborts_in_a_row += 1;
        let fatal = match broken {
            Broken::Fatal(why) => {
                warn!(
                    why,
                    "Kafka transaction failed fatally; a new producer takes over and the records are read again."
                );
                true
            }
            Broken::Abort(why) => {
                warn!(why, "Kafka transaction aborted; its records are read again from the committed offsets.");
                match self.begun {
                    false => false,
                    true => match self.kafka.abort().await {
                        Ok(()) => false,
                        Err(e) => {
                            warn!(error = %e, "Aborting the transaction failed; a new producer takes over.");
                            true
                        }
                    },
                }
            }
        };
        self.begun = false;
        if fatal {
            self.kafka.renew(cancel).await?;
        }
        Ok(())
    }

    /// How long to wait before reading again after an abort: 100 ms,
    /// doubling with each abort in a row, at most `max`.
    pub fn backoff(&self, max: Duration) -> Duration {
        let n = self.aborts_in_a_row.saturating_sub(1).min(16);
        (Duration::from_millis(100) * 2u32.pow(n)).min(max)
    }

    /// On shutdown: the commit in flight finished, then the open
    /// transaction committed (or aborted if it cannot be).
    /// On a worker that found lost data: the open transaction (what was
    /// settled since the last commit) is aborted, never committed.
    pub async fn abandon(&mut self, cancel: &CancellationToken) {
        if self.broken.is_none() {
            self.broken = Some(Broken::Abort("Redis lost data: nothing more is committed".into()));
        }
        if let Err(why) = self.abort(cancel).await {
            warn!(why, "Could not end the last transaction; the brokers abort it when it times out.");
        }
    }

    pub async fn close(&mut self, consumer: &WorkerConsumer, cancel: &CancellationToken) {
        self.finish_commit().await;
        self.start_commit(consumer);
        self.finish_commit().await;
        if self.broken.is_some() {
            if let Err(why) = self.abort(cancel).await {
                warn!(why, "Could not end the last transaction; the brokers abort it when it times out.");
            }
        }
    }
}

/// The outcome of the commit in flight (pending while none is): a future
/// the loop can wait on beside others, then hand to [`Txn::conclude`].
pub async fn committed(txn: Option<&mut Txn>) -> Result<(), KafkaError> {
    match txn.and_then(|t| t.committing.as_mut()) {
        Some(c) => (&mut c.task).await.unwrap_or(Err(KafkaError::Canceled)),
        None => std::future::pending().await,
    }
}

/// Moves every assigned partition back to its committed offset (the
/// beginning, for one with none), so that what an aborted transaction held
/// is read again. Blocking: call from `block_in_place`.
pub fn rewind(consumer: &WorkerConsumer) -> Result<(), KafkaError> {
    let committed = consumer.committed(Duration::from_secs(10))?;
    for e in committed.elements() {
        let to = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        if let Err(err) = consumer.seek(e.topic(), e.partition(), to, Duration::from_secs(10)) {
            debug!(error = %err, topic = e.topic(), partition = e.partition(), "Could not seek a partition (no longer assigned?).");
        }
    }
    Ok(())
}

impl Pipeline {
    /// Step 4 with transactions: the batch's outputs and the offsets after
    /// its records join the transaction (Redis first recording them, see
    /// `lost`), and the transaction commits if it is due.
    pub(super) async fn settle_in_txn(&mut self, offsets: BatchOffsets, produced: Vec<Outgoing>, records: usize) {
        let stores: Vec<(Arc<str>, i32, i64)> = offsets.to_store().map(|(t, p, n)| (Arc::from(t), p, n)).collect();
        let marked: Vec<(String, i64)> = stores.iter().map(|(t, p, n)| (keys::offsets_field(t, *p), *n)).collect();
        if !lost::record(&self.cx, &marked).await {
            return; // shutdown while Redis was retried: nothing added
        }
        let backed_up = self.txn.as_ref().is_some_and(|t| t.is_backed_up() || t.commit_done());
        if backed_up {
            self.finish_commit().await;
        }
        let Some(txn) = self.txn.as_mut() else { return };
        txn.add(Settled { outputs: produced, offsets: stores, records, at: Instant::now() }).await;
        self.commit_if_due(Instant::now());
    }

    /// Starts the open transaction's commit if it is due by `now`.
    pub(super) fn commit_if_due(&mut self, now: Instant) {
        if let Some(txn) = self.txn.as_mut() {
            if txn.due().is_some_and(|due| due <= now) {
                txn.start_commit(&self.consumer);
            }
        }
    }

    /// Starts the open transaction's commit now (the loop is idle), with
    /// the positions the consumer reached past the records it returned.
    pub(super) async fn commit_now(&mut self) {
        let ahead = self.positions_ahead();
        if !ahead.is_empty() {
            let marked: Vec<(String, i64)> = ahead.iter().map(|(t, p, n)| (keys::offsets_field(t, *p), *n)).collect();
            if !lost::record(&self.cx, &marked).await {
                return;
            }
        }
        if let Some(txn) = self.txn.as_mut() {
            if !ahead.is_empty() {
                txn.add(Settled { outputs: Vec::new(), offsets: ahead, records: 0, at: Instant::now() }).await;
            }
            txn.start_commit(&self.consumer);
        }
    }

    /// When the loop is idle (no record returned and not settled), the
    /// partitions whose position is past every offset put in a
    /// transaction: the last records of a topic written in transactions are
    /// followed by a commit marker, which the consumer steps over without
    /// returning it. Committing the position, not the last record's offset
    /// + 1, brings the group to the log end (and its lag to zero).
    fn positions_ahead(&self) -> Vec<(Arc<str>, i32, i64)> {
        let Some(txn) = self.txn.as_ref() else { return Vec::new() };
        // (Stopping, a record may have been returned and left unread.)
        if !self.inflight.is_empty() || self.carry.is_some() || txn.is_broken() || self.cx.cancel.is_cancelled() {
            return Vec::new();
        }
        let Ok(positions) = self.consumer.position() else { return Vec::new() };
        positions
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) if txn.behind(e.topic(), e.partition(), o) => {
                    Some((Arc::from(e.topic()), e.partition(), o))
                }
                _ => None,
            })
            .collect()
    }

    /// When the open transaction should commit: when due, or sooner once
    /// the loop is idle (nothing in flight), as offsets are committed
    /// without transactions; or, idle, when a position is ahead of the
    /// offsets committed ([`positions_ahead`](Self::positions_ahead)).
    pub(super) fn commit_at(&self, idle: Duration) -> Option<Instant> {
        let txn = self.txn.as_ref()?;
        let soon = Instant::now() + idle;
        match txn.due() {
            Some(due) if self.inflight.is_empty() => Some(due.min(soon)),
            Some(due) => Some(due),
            None if !txn.is_committing() && !self.positions_ahead().is_empty() => Some(soon),
            None => None,
        }
    }

    /// Waits for the commit in flight and concludes it.
    pub(super) async fn finish_commit(&mut self) {
        let Some(txn) = self.txn.as_mut() else { return };
        if let Some(done) = txn.finish_commit().await {
            self.store_committed(done);
        }
    }

    /// Concludes a commit the loop saw finish ([`committed`]).
    pub(super) async fn concluded(&mut self, result: Result<(), KafkaError>) {
        let Some(txn) = self.txn.as_mut() else { return };
        if let Some(done) = txn.conclude(result).await {
            self.store_committed(done);
        }
    }

    /// Committed offsets stored on the consumer too: its lag, and the
    /// watermarks of caught-up partitions, are measured from them. The
    /// consumer never commits them (see `ConsumerCallbacks::transactional`).
    fn store_committed(&self, done: Vec<(Arc<str>, i32, i64)>) {
        for (topic, partition, next) in done {
            commit::store_offset(&self.consumer, &topic, partition, next);
        }
    }

    /// After a broken transaction: every batch in flight lands (its effects
    /// stay in Redis; read again, its records answer the same), the
    /// transaction is aborted, and every partition is read again from its
    /// committed offset. `Err`: no producer could replace a failed one.
    pub(super) async fn rewind(&mut self) -> Result<(), String> {
        while !self.inflight.is_empty() {
            if let (_, None) = self.inflight.oldest().await {
                break; // shutdown (or lost data) during a retry
            }
        }
        self.carry = None;
        if let Some(txn) = self.txn.as_mut() {
            txn.abort(&self.cx.cancel).await?;
            // A cause that stays (a topic that refuses the records) is not spun on.
            let wait = txn.backoff(self.cx.settings.worker.max_backoff);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.cx.cancel.cancelled() => {}
            }
        }
        // Nothing is read until every partition is back at its committed
        // offset: a record skipped here would have its outputs lost.
        let mut wait = Duration::from_millis(100);
        while let Err(e) = tokio::task::block_in_place(|| rewind(&self.consumer)) {
            warn!(error = %e, "Could not move the partitions back to their committed offsets; trying again.");
            if self.cx.cancel.is_cancelled() {
                break;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(self.cx.settings.worker.max_backoff);
        }
        Ok(())
    }
}
