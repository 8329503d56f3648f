//! Step 1 of the pipeline: reading. The next batch of records, each copied
//! out of the consumer and parsed (fetching the schema its frame names
//! first, if need be), and, while the loop waits for the first record of a
//! batch, what else is due: settling the oldest batch in flight once it
//! lands, committing on going idle, retrying held records, flushing
//! watermarks.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::message::BorrowedMessage;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::record::{self, Record, TopicNames};
use super::{lost, Context, Next, Pipeline};
use crate::event::NotFetched;
use crate::kafka::commit;

/// Once nothing is in flight and no record has come for this long, the
/// offsets stored since the last commit are committed at once, rather than
/// at the next `auto.commit.interval.ms` tick: a drained backlog or a lull
/// shows as committed (and as zero lag) within this, not up to a second later.
const IDLE_COMMIT: Duration = Duration::from_millis(20);

/// The least time between two of those commits, so that sparse traffic
/// (a record now and then, each followed by a lull) commits at most five
/// times a second.
const IDLE_COMMIT_GAP: Duration = Duration::from_millis(200);

/// Copies a message out of the consumer and parses it ([`record::take`]),
/// first fetching the schema its frame names if need be; `None` if the
/// worker is stopping meanwhile (the record is left unread, so uncommitted).
async fn take(cx: &Context, topics: &mut TopicNames, m: &BorrowedMessage<'_>) -> Option<Record> {
    loop {
        match record::take(&cx.settings, &cx.router, &cx.schemas, topics, m) {
            Ok(taken) => return Some(taken),
            Err(NotFetched(id)) => {
                if !cx.schemas.fetch(id, &cx.health, &cx.cancel).await {
                    return None;
                }
            }
        }
    }
}

impl Pipeline {
    /// Step 1: the next batch of records, or whatever else needs doing first.
    pub(super) async fn next_batch(&mut self) -> Next {
        let first = match self.carry.take() {
            Some(c) => c,
            None => match self.wait_for_record().await {
                Ok(first) => first,
                Err(next) => return next,
            },
        };
        let alone = first.is_alone();
        let batch_size = self.cx.settings.worker.batch_size;
        let mut records = Vec::with_capacity(batch_size);
        records.push(first);
        let deadline = Instant::now() + self.cx.settings.worker.batch_linger;
        while !alone && records.len() < batch_size {
            match tokio::time::timeout_at(deadline, self.consumer.recv()).await {
                Ok(Ok(m)) => {
                    // Shutting down while a schema is fetched: the batch closes without the record.
                    let Some(record) = take(&self.cx, &mut self.topics, &m).await else { break };
                    if record.is_alone() {
                        self.carry = Some(record);
                        break;
                    }
                    records.push(record);
                }
                Ok(Err(e)) => {
                    warn!(error = %e, "Reading from Kafka failed; the batch closes early.");
                    break;
                }
                Err(_) => break,
            }
        }
        Next::Batch(records)
    }

    /// Waits for the first record of a batch. Meanwhile it settles the
    /// oldest batch in flight once it lands, commits on going idle, retries
    /// held dead letters and flushes watermarks; each of those ends the wait
    /// with [`Next::Again`].
    pub(super) async fn wait_for_record(&mut self) -> Result<Record, Next> {
        let retry_at = self.held.next_try();
        // Without transactions, the consumer commits stored offsets; with
        // them, the transaction commits (see `txn`).
        let uncommitted = self.txn.is_none() && self.consumer.context().uncommitted.load(Ordering::Relaxed);
        let txn_at = self.commit_at(IDLE_COMMIT);
        let committing = self.txn.as_ref().is_some_and(|t| t.is_committing());
        let commit_at = (self.inflight.is_empty() && uncommitted)
            .then(|| (Instant::now() + IDLE_COMMIT).max(self.last_idle_commit + IDLE_COMMIT_GAP));
        let seals = self.cx.settings.seals();
        let sleep_until = |at: Option<Instant>| tokio::time::sleep_until(at.unwrap_or_else(Instant::now));
        tokio::select! {
            biased;
            _ = self.cx.cancel.cancelled() => Err(Next::Stop),
            // Nothing new yet and the oldest batch in Redis is done: settle it now.
            (planned, results) = self.inflight.oldest(), if !self.inflight.is_empty() => match results {
                Some(results) => {
                    self.settle_landed(planned, results).await;
                    Err(Next::Again)
                }
                // Redis lost data: the loop stops consuming (see `run_with`).
                None if lost::refused(&self.cx) => Err(Next::Again),
                None => Err(Next::Stop),
            },
            // A transaction's commit is done: the next one opens.
            result = super::txn::committed(self.txn.as_mut()), if committing => {
                self.concluded(result).await;
                Err(Next::Again)
            }
            m = self.consumer.recv() => match m {
                Ok(m) => {
                    // A record came from a broker: Kafka is up.
                    self.cx.health.kafka_up.store(true, Ordering::Relaxed);
                    take(&self.cx, &mut self.topics, &m).await.ok_or(Next::Stop)
                }
                Err(e) => {
                    warn!(error = %e, "Reading from Kafka failed; retrying.");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err(Next::Again)
                }
            },
            // Idle with offsets stored since the last commit: commit them now.
            _ = sleep_until(commit_at), if commit_at.is_some() => {
                self.commit_on_idle();
                Err(Next::Again)
            }
            _ = sleep_until(txn_at), if txn_at.is_some() => {
                self.commit_now().await;
                Err(Next::Again)
            }
            _ = sleep_until(retry_at), if retry_at.is_some() => Err(Next::Again),
            // Idle partitions raise watermarks too (see ConsumerCallbacks::stats).
            _ = tokio::time::sleep(self.cx.settings.sealing.check_interval), if seals => {
                self.flush_watermarks().await;
                Err(Next::Again)
            }
        }
    }

    fn commit_on_idle(&mut self) {
        self.consumer.context().uncommitted.store(false, Ordering::Relaxed);
        if let Err(e) = commit::commit_stored(&self.consumer) {
            debug!(error = %e, "Committing on idle failed; the next commit carries the offsets.");
        }
        self.last_idle_commit = Instant::now();
    }
}
