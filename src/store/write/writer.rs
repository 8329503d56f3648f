//! The writer: the one owner of the order in which batches reach Redis.
//!
//! The pipeline hands it prepared batches ([`Writer::send`]) and gets each
//! one's answers from the future `send` returns; it settles those in the
//! order it sent them. The writer's task takes the batches one at a time,
//! in that order, and:
//!
//! - sends a batch behind the one before while that one is still on its
//!   way (so Redis has the next one queued the moment it is done), with
//!   preconditions on it (`Prepared::after`): a call then runs only if its
//!   tag has recorded the offsets the batch before carries, and otherwise
//!   answers `STALE` having done nothing;
//! - starts each batch's calls before it takes the next batch, so batches
//!   reach Redis in the order they were sent;
//! - retries what did not land, with capped backoff, once the batch before
//!   has landed: the preconditions hold from then on unless the tag lost the
//!   offsets that batch recorded, so a `STALE` then is lost data
//!   ([`StoreError::Lost`]), like `LOST`, which no retry mends;
//! - reloads the script when Redis lost it (`send.rs`), and with
//!   `redis.min_replicas` sends each call with its `WAIT`.
//!
//! Each batch's own work runs on a task of its own, so a batch waiting for
//! a retry never holds up the next batch's start.
//!
//! What the order rests on, each with the test that fails when it breaks:
//!
//! 1. redis-rs queues a command on its connection the first time its
//!    future is polled, and a connection delivers what it queued in order:
//!    `gate::start_in_order` polls each call once (`now_or_never`) as it
//!    starts it, and counts it sent from then on (tests/ordering.rs,
//!    `redis_rs_queues_a_command_on_its_first_poll` and
//!    `redis_rs_queues_a_command_on_its_first_poll_on_a_cluster`, on the
//!    connection types the store uses; `gate.rs`'s
//!    `every_call_is_polled_as_it_starts_so_it_is_queued_before_the_next_starts`).
//! 2. Each node's lane lets calls in in the order given, at most two at a
//!    time, and no node waits for another (`gate.rs`'s
//!    `each_node_takes_two_calls_at_once_in_order_and_no_node_waits_for_another`).
//! 3. One batch's calls all start before the next batch's: this task
//!    awaits a batch's start before it takes the next (tests/writer.rs,
//!    `batches_handed_to_the_writer_at_once_land_in_order_and_answer_in_order`:
//!    ten batches handed over at once each land at their first attempt, so
//!    none reached Redis ahead of the one before). A retry's calls start
//!    under the gate's order lock (`send.rs`) as a new batch's do, so the
//!    two do not interleave in a lane; correctness does not rest on that
//!    lock (5. does), only that the batches behind a retry do not overtake
//!    it and answer `STALE` once more.
//! 4. A tag's calls all reach the node owning its slot, by the cluster's
//!    slot map (tests/store.rs,
//!    `batches_sent_two_at_a_time_on_a_cluster_reach_every_tag_in_order`).
//! 5. Where the order breaks anyway (a reconnect, a failover, a retry),
//!    the preconditions make a call that overtook the one before it change
//!    nothing (tests/store.rs,
//!    `a_batch_sent_behind_one_not_yet_applied_changes_nothing_until_that_one_lands`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, Instrument};

use super::prepared::{Prepared, Tails};
use super::send::{record, Answers, BatchResults, Landed};
use crate::retry::{retry_unless, Retried};
use crate::store::{Store, StoreError};

/// What became of a batch handed to the writer.
#[derive(Debug)]
pub enum Written {
    /// Redis applied every call: per tag batch, one result per event (and
    /// the rank changes).
    Applied(BatchResults),
    /// Shutdown began before it landed (or the batch before it was given up).
    Abandoned,
    /// Redis lost data on a tag of the batch; nothing more of it is sent.
    Lost(StoreError),
}

/// Told of every attempt to send a batch: how it ended and how long it took.
pub type Observer = Arc<dyn Fn(&Result<(), StoreError>, Duration) + Send + Sync>;

/// How the writer retries.
#[derive(Clone)]
pub struct WriterSettings {
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// Shutdown: a batch not landed by then is abandoned.
    pub cancel: CancellationToken,
    pub observe: Observer,
}

struct Job {
    calls: Prepared,
    span: tracing::Span,
    handle: oneshot::Sender<JoinHandle<Written>>,
}

/// The handle on the writer's task; the task ends when the handle is dropped.
pub struct Writer {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Writer {
    /// Starts the writer's task on `store`.
    pub fn spawn(store: Store, settings: WriterSettings) -> Writer {
        let (jobs, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(store, settings, rx));
        Writer { jobs }
    }

    /// Hands the writer a batch, behind every batch sent before. The future
    /// answers once it has landed, been abandoned or found lost data; a
    /// panic of its work is raised again there.
    pub fn send(&self, calls: Prepared, span: tracing::Span) -> BoxFuture<'static, Written> {
        let (handle, rx) = oneshot::channel();
        // A writer whose task has ended answers every batch as abandoned.
        let _ = self.jobs.send(Job { calls, span, handle });
        async move {
            let Ok(task) = rx.await else { return Written::Abandoned };
            match task.await {
                Ok(written) => written,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => Written::Abandoned,
            }
        }
        .boxed()
    }
}

/// The batch sent last: where it leaves each tag, and a signal that fires
/// once it has landed (dropped if it never does).
struct Last {
    tails: Tails,
    landed: oneshot::Receiver<()>,
}

async fn run(store: Store, settings: WriterSettings, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut last: Option<Last> = None;
    while let Some(Job { mut calls, span, handle }) = jobs.recv().await {
        if calls.is_empty() {
            // Nothing to send (every record was refused before Redis). The
            // batch before stays the one the next batch is sent behind: were
            // this one in its place, landed at once, the next would carry no
            // preconditions while that one may still fail.
            let _ = handle.send(tokio::spawn(async { Written::Applied(BatchResults::default()) }));
            continue;
        }
        // Behind a batch still on its way: preconditions on it, and its
        // landing awaited before any retry. Behind one that has landed
        // already, neither.
        let before = last.take().and_then(|mut l| l.landed.try_recv().is_err().then_some(l));
        let after = before.map(|l| {
            calls.after(&l.tails);
            l.landed
        });
        let tails = calls.tails();
        let calls = Arc::new(calls);
        let landed = Landed::new(&calls);
        let started = Instant::now();
        // Started here, before the next batch is taken: the order of arrival.
        let first = store.start_pending(&calls, &landed).await;
        let (landed_tx, landed_rx) = oneshot::channel();
        let batch = Batch { store: store.clone(), settings: settings.clone(), calls, landed, started };
        let task = tokio::spawn(batch.finish(first, after, landed_tx).instrument(span));
        let _ = handle.send(task);
        last = Some(Last { tails, landed: landed_rx });
    }
}

/// One batch's work after its first calls were started.
struct Batch {
    store: Store,
    settings: WriterSettings,
    calls: Arc<Prepared>,
    landed: Landed,
    started: Instant,
}

impl Batch {
    async fn finish(
        mut self,
        first: Answers,
        after: Option<oneshot::Receiver<()>>,
        landed_tx: oneshot::Sender<()>,
    ) -> Written {
        let answers = first.await;
        let attempt = record(&self.calls, &mut self.landed, answers);
        let attempt = self.store.reload_if_lost(&self.calls, &mut self.landed, attempt).await;
        (self.settings.observe)(&attempt, self.started.elapsed());
        match attempt {
            Err(e) if e.is_lost() => return Written::Lost(e),
            Err(e) => {
                debug!(error = %e, "A batch is not done; what is not is sent again once the batch before it is.");
                if let Some(after) = after {
                    if after.await.is_err() {
                        return Written::Abandoned;
                    }
                }
            }
            Ok(()) => {}
        }
        // What is not done yet (not landed, or with redis.min_replicas not
        // on enough replicas: the writes may have died with their primary)
        // is sent again, with capped backoff, until it is; the script's
        // recorded offsets make a second landing exact, and each call keeps
        // the answers of its first. The next batch is told this one is done
        // only then, so that a batch sent again after a failover lands
        // before the ones behind it.
        if !self.landed.is_complete() {
            let Batch { store, settings, calls, landed, .. } = &mut self;
            let shared = tokio::sync::Mutex::new(landed);
            let retried = retry_unless(
                "apply a batch to Redis",
                &settings.cancel,
                settings.max_backoff,
                || async {
                    let started = Instant::now();
                    let mut landed = shared.lock().await;
                    let attempt = store.apply_pending(calls, &mut landed).await.map_err(stale_is_lost);
                    (settings.observe)(&attempt, started.elapsed());
                    attempt
                },
                StoreError::is_lost,
            )
            .await;
            match retried {
                Retried::Done(()) => {}
                Retried::Cancelled => return Written::Abandoned,
                Retried::Fatal(e) => return Written::Lost(e),
            }
        }
        let _ = landed_tx.send(());
        Written::Applied(self.landed.into_results().expect("every call landed"))
    }
}

/// Once every batch before has landed, a call's preconditions hold unless
/// its tag lost the offsets they name: `STALE` then means lost data.
fn stale_is_lost(e: StoreError) -> StoreError {
    match e {
        StoreError::Apply { base, source } if source.code() == Some(crate::store::write::reply::STALE) => {
            StoreError::Lost {
                base,
                detail: "it no longer holds the offsets the batch before this one recorded there (a restart without \
                     persistence, or a failover to a replica without those writes)"
                    .into(),
            }
        }
        other => other,
    }
}
