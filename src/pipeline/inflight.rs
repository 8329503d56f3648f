//! Batches on their way to Redis, oldest first, and the rules that keep
//! exactly-once across them on the pipeline's side (the order they reach
//! Redis in, their preconditions and retries are the writer's,
//! `store::Writer`):
//!
//! - at most [`IN_FLIGHT`] batches are in Redis at once; sending one more
//!   first takes the oldest off the queue (it is settled once the new one is
//!   sent, so Redis is never idle meanwhile);
//! - batches settle in the order they were sent;
//! - a batch abandoned on shutdown takes every batch behind it along: one
//!   behind it may have been applied, on other board tags, but storing its
//!   offsets would pass the abandoned records.
//!
//! The queue owns no broker message, so it outlives any poll of the consumer.

use std::collections::VecDeque;

use tokio::task::JoinHandle;

use crate::store::BatchResults;

/// How many batches may be on their way to Redis at once: two, so that
/// Redis has the next one queued when it finishes one.
pub const IN_FLIGHT: usize = 2;

/// The script results of a batch, per board tag; `None`: abandoned on shutdown.
pub type Results = Option<BatchResults>;

/// A batch whose writes are in Redis (or queued for it).
pub struct InFlight<B> {
    /// What settling the batch needs (its records and plan).
    pub batch: B,
    /// The task that answers the batch's results once it has landed.
    applied: JoinHandle<Results>,
}

/// The batches in flight, oldest first.
pub struct Queue<B> {
    batches: VecDeque<InFlight<B>>,
}

impl<B> Default for Queue<B> {
    fn default() -> Self {
        Queue { batches: VecDeque::with_capacity(IN_FLIGHT) }
    }
}

impl<B> Queue<B> {
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.batches.len()
    }

    /// Whether a batch must land before another may be sent.
    pub fn is_full(&self) -> bool {
        self.batches.len() >= IN_FLIGHT
    }

    /// Queues a batch just sent; `applied` answers once it has landed.
    pub fn push(&mut self, batch: B, applied: JoinHandle<Results>) {
        self.batches.push_back(InFlight { batch, applied });
    }

    /// Waits for the oldest batch to land and takes it off the queue, with
    /// its results (`None`: abandoned, and the queue is emptied, see the
    /// module's rules). Cancel-safe: the batch stays queued until it lands.
    /// A panic of its task is raised again here.
    ///
    /// # Panics
    /// On an empty queue.
    pub async fn oldest(&mut self) -> (B, Results) {
        let front = self.batches.front_mut().expect("a batch in flight");
        let joined = (&mut front.applied).await;
        let f = self.batches.pop_front().expect("a batch in flight");
        let results = match joined {
            Ok(results) => results,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => None,
        };
        if results.is_none() {
            self.batches.clear();
        }
        (f.batch, results)
    }

    /// Like [`Queue::oldest`], giving up after `wait` (for shutdown):
    /// `None` if it has not landed by then.
    pub async fn oldest_within(&mut self, wait: std::time::Duration) -> Option<(B, Results)> {
        tokio::time::timeout(wait, self.oldest()).await.ok()
    }

    /// Abandons every batch in flight (shutdown): none is settled.
    pub fn abandon(&mut self) {
        self.batches.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    fn results(n: usize) -> Results {
        Some(BatchResults { results: vec![vec![crate::store::ApplyResult::Applied; n]], moves: vec![Vec::new()] })
    }

    fn send(q: &mut Queue<&'static str>, name: &'static str, applied: JoinHandle<Results>) {
        q.push(name, applied);
    }

    #[tokio::test]
    async fn batches_settle_in_the_order_sent_even_when_a_later_one_lands_first() {
        let mut q = Queue::default();
        let (release, wait) = oneshot::channel::<()>();
        send(&mut q, "a", tokio::spawn(async move { wait.await.ok().and(results(1)) }));
        send(&mut q, "b", tokio::spawn(async { results(2) }));
        assert!(q.is_full());
        // b has landed, a has not: nothing settles before a.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(q.oldest_within(Duration::from_millis(50)).await.is_none());
        assert_eq!(q.len(), 2, "a timed-out wait leaves the oldest queued");
        release.send(()).unwrap();
        let (first, r) = q.oldest().await;
        assert_eq!((first, r.map(|r| r.results[0].len())), ("a", Some(1)));
        let (second, _) = q.oldest().await;
        assert_eq!(second, "b");
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn an_abandoned_batch_takes_every_batch_behind_it_along() {
        let mut q = Queue::default();
        send(&mut q, "a", tokio::spawn(async { None }));
        send(&mut q, "b", tokio::spawn(async { results(1) }));
        let (first, r) = q.oldest().await;
        assert_eq!(first, "a");
        assert!(r.is_none());
        assert!(q.is_empty(), "b must not be settled past a's abandoned records");
    }

    #[tokio::test]
    #[should_panic(expected = "apply task failed")]
    async fn a_panic_in_an_apply_task_is_raised_where_the_batch_is_settled() {
        let mut q: Queue<&'static str> = Queue::default();
        send(&mut q, "a", tokio::spawn(async { panic!("apply task failed") }));
        q.oldest().await;
    }
}
