//! Storing and committing offsets on the consumer.
//!
//! rankflow stores an offset only once every record before it is final
//! (the pipeline decides that); librdkafka commits stored offsets every
//! `auto.commit.interval.ms`, on revocation and on shutdown, and
//! [`commit_stored`] commits them at once when the loop goes idle. The +1
//! is made in `offsets::BatchOffsets`: what is stored here is already the
//! next offset to read.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, debug_span, warn};

use super::callbacks::ConsumerCallbacks;
use super::producer::KafkaProducer;
use crate::metrics;

/// The worker's consumer.
pub type WorkerConsumer = StreamConsumer<ConsumerCallbacks>;

/// Stores `next` (the last final offset + 1) for one partition. A partition
/// no longer assigned fails alone, and its result is dropped, not stored.
pub fn store_offset(consumer: &WorkerConsumer, topic: &str, partition: i32, next: i64) {
    let _span = debug_span!("partition", topic, partition).entered();
    let mut tpl = TopicPartitionList::new();
    if tpl.add_partition_offset(topic, partition, Offset::Offset(next)).is_err() {
        return;
    }
    match consumer.store_offsets(&tpl) {
        Ok(()) => {
            consumer.context().uncommitted.store(true, Ordering::Relaxed);
            if !consumer.context().lag_reported.load(Ordering::Relaxed) {
                if let Some(high) = cached_high_watermark(consumer, topic, partition) {
                    let lag = (high - next).max(0);
                    metrics::get().consumer_lag.with_label_values(&[topic, &partition.to_string()]).set(lag);
                }
            }
            debug!(next_offset = next, "Stored the partition's offset.")
        }
        Err(e) => debug!(error = %e, "Partition no longer assigned; its result is dropped, not stored."),
    }
}

/// The high watermark of a partition as librdkafka last heard it in a fetch
/// response, without asking the broker; `None` before the first one.
fn cached_high_watermark(consumer: &WorkerConsumer, topic: &str, partition: i32) -> Option<i64> {
    use rdkafka::bindings as rdsys;
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: `rk` is the live handle of `consumer`, borrowed for the call;
    // the topic string and both out-pointers outlive it. The call only
    // reads librdkafka's cached partition state under its own lock.
    let err = unsafe {
        rdsys::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (RDKafkaErrorCode::from(err) == RDKafkaErrorCode::NoError && high >= 0).then_some(high)
}

/// Pauses or resumes one partition (dead-letter holding).
pub fn set_paused(consumer: &WorkerConsumer, topic: &str, partition: i32, paused: bool) {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let result = if paused { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
    if let Err(e) = result {
        warn!(error = %e, topic, partition, paused, "Could not pause or resume a partition.");
    }
}

/// Whether the consumer still holds `topic`/`partition`.
pub fn is_assigned(consumer: &WorkerConsumer, topic: &str, partition: i32) -> bool {
    consumer.assignment().is_ok_and(|a| a.find_partition(topic, partition).is_some())
}

/// Commits the stored offsets without waiting. Like librdkafka's own
/// automatic commits, the outcome reaches `ConsumerCallbacks::commit_callback`
/// (the `rankflow_commits_total` metric and a warning on failure), through
/// the consumer's queue. rust-rdkafka's `commit_consumer_state(Async)`
/// passes librdkafka no queue for the outcome, so it is dropped
/// (fede1024/rust-rdkafka#856); this passes the consumer's queue, as the
/// fix proposed there (#857) does.
pub fn commit_stored<C: ConsumerContext>(consumer: &StreamConsumer<C>) -> KafkaResult<()> {
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

/// Commits what is stored (unless `commit` is false: a worker that found
/// lost data commits nothing more), leaves the group and flushes the producer. These
/// librdkafka calls block (for long when the brokers are gone):
/// `block_in_place` hands this thread's other work, and the runtime's
/// timers, to another thread meanwhile, so the shutdown deadline still fires.
pub fn close(consumer: WorkerConsumer, producer: &KafkaProducer, commit: bool) {
    tokio::task::block_in_place(|| {
        // With transactions, the last one committed the offsets.
        let commit = commit && !consumer.context().transactional;
        match commit.then(|| consumer.commit_consumer_state(CommitMode::Sync)) {
            None | Some(Ok(())) | Some(Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset))) => {}
            Some(Err(e)) => warn!(error = %e, "Final commit failed; the next owner replays from the last commit."),
        }
        consumer.unsubscribe();
        drop(consumer);
        let _ = producer.flush(Duration::from_secs(5));
    });
}

/// What a consumer's group has committed on `topics`, per
/// `<topic>:<partition>` field (`keys::offsets_field`), for the partitions
/// with a commit. Blocking: call it from `block_in_place`.
pub fn committed_fields<C: ConsumerContext, K: Consumer<C>>(
    consumer: &K,
    topics: &[String],
) -> Result<std::collections::HashMap<String, i64>, String> {
    let mut tpl = TopicPartitionList::new();
    for t in topics {
        let md =
            consumer.fetch_metadata(Some(t), Duration::from_secs(10)).map_err(|e| format!("metadata of {t}: {e}"))?;
        for topic in md.topics().iter().filter(|x| x.name() == t) {
            for p in topic.partitions() {
                tpl.add_partition(t, p.id());
            }
        }
    }
    let got =
        consumer.committed_offsets(tpl, Duration::from_secs(10)).map_err(|e| format!("committed offsets: {e}"))?;
    Ok(got
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) if o > 0 => Some((crate::keys::offsets_field(e.topic(), e.partition()), o)),
            _ => None,
        })
        .collect())
}
