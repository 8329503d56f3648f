//! The consumer's librdkafka callbacks: statistics (lag, broker health, the
//! watermarks of caught-up partitions), errors, rebalances and commit
//! outcomes. They run on librdkafka's threads or inside a poll, so they only
//! record facts and commit what is already stored; they never apply or
//! store anything.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::statistics::Statistics;
use rdkafka::TopicPartitionList;
use tracing::{debug, info, warn};

use crate::health::Health;
use crate::keys;
use crate::metrics;
use crate::watermarks::Watermarks;

/// librdkafka callbacks of the worker's consumer.
pub struct ConsumerCallbacks {
    health: Arc<Health>,
    /// Boards that seal periods: where caught-up partitions raise their
    /// watermark, and by how much less than the wall clock (ms).
    idle: Option<(Arc<Watermarks>, i64)>,
    /// An offset was stored since the loop last committed on going idle
    /// (set by `commit::store_offset`).
    pub(crate) uncommitted: AtomicBool,
    /// librdkafka's statistics have reported a partition's lag: from then
    /// on they keep `rankflow_consumer_lag`; until then `commit::store_offset`
    /// does, so the series exist from the first stored offset.
    pub(crate) lag_reported: AtomicBool,
    /// Offsets are committed by Kafka transactions (`kafka.transactions`):
    /// the consumer commits none, and its stored offsets (stored once
    /// committed) are what lag is measured from.
    pub(crate) transactional: bool,
}

impl ConsumerCallbacks {
    pub fn new(health: Arc<Health>, idle: Option<(Arc<Watermarks>, i64)>, transactional: bool) -> ConsumerCallbacks {
        ConsumerCallbacks {
            health,
            idle,
            uncommitted: AtomicBool::new(false),
            lag_reported: AtomicBool::new(false),
            transactional,
        }
    }
}

impl ClientContext for ConsumerCallbacks {
    fn stats(&self, stats: Statistics) {
        let m = metrics::get();
        let up = stats.brokers.values().any(|b| b.nodeid >= 0 && b.state == "UP");
        self.health.kafka_up.store(up, Ordering::Relaxed);
        if up {
            self.health.kafka_connected();
        }
        m.kafka_up.set(i64::from(up));
        let now = chrono::Utc::now().timestamp_millis();
        for (topic, t) in &stats.topics {
            for p in t.partitions.values() {
                // With transactions the consumer learns of no commit: its
                // stored offsets are the committed ones.
                let lag = if self.transactional { p.consumer_lag_stored } else { p.consumer_lag };
                if p.partition >= 0 && lag >= 0 {
                    m.consumer_lag.with_label_values(&[topic.as_str(), &p.partition.to_string()]).set(lag);
                    self.lag_reported.store(true, Ordering::Relaxed);
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
        if let Some(why) = super::connect::refusal(&error, reason) {
            self.health.kafka_refused(why);
        }
        warn!(error = %error, reason, "Kafka client reported an error.");
    }
}

impl ConsumerContext for ConsumerCallbacks {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            metrics::get().rebalances.with_label_values(&["revoke"]).inc_by(tpl.count() as u64);
            // Batches are processed between polls, so every stored offset is
            // final here: commit them before the partitions move on (with
            // transactions, they are committed already).
            if self.transactional {
                info!(partitions = tpl.count(), "Partitions revoked.");
                return;
            }
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
            // An assignment comes from the group coordinator: a broker is
            // up, whatever the next statistics say (they come every second).
            self.health.kafka_up.store(true, Ordering::Relaxed);
            m.kafka_up.set(1);
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
