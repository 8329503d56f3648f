//! The outbox's publisher: with `kafka.transactions`, what scheduled jobs
//! publish (sealed tops, league results) reaches the seal topic exactly
//! once.
//!
//! A job does not produce: it appends its records to the outbox in Redis
//! (`store::OutboxRecord`), each under its output id, so a job run again
//! after a crash appends nothing twice. One worker of the deployment (the
//! holder of a lease in Redis) publishes the outbox in order, in Kafka
//! transactions of a producer whose `transactional.id` is the group's and
//! `.outbox`: each transaction holds the next records and commits, as the
//! offset of partition 0 of the seal topic in the group `<group>.outbox`,
//! the sequence number after them. Where it commits the records, it commits
//! how far it got; a new holder starts from that committed position. A
//! holder that stalled past its lease (and woke up) is fenced: the new
//! holder's producer, of the same id, ended its transactions. The position
//! carries the outbox's name (made once in Redis), so an outbox started
//! afresh is published from its start.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::supervisor::supervise;
use crate::config::Settings;
use crate::kafka::transaction::{classify, Fault, Standalone, Transactional, OUTPUT_ID};
use crate::metrics;
use crate::store::{OutboxRecord, Store};

/// How often a publisher with nothing to publish looks again, and a
/// worker without the lease tries to take it.
const POLL: Duration = Duration::from_millis(200);
const FOLLOW: Duration = Duration::from_secs(1);

/// Records in one transaction, at most.
const BATCH: usize = 500;

/// The publisher's lease (each round renews it): `sealing.lease`, as jobs'
/// claims, at most 10 s (a worker that dies holding it delays the seal
/// topic's records at most that long).
fn lease_ms(settings: &Settings) -> u64 {
    (settings.sealing.lease.as_millis() as u64).min(10_000)
}

/// The group (and `transactional.id`) of the publisher of `group`'s outbox.
pub fn publisher_group(group: &str) -> String {
    format!("{group}.outbox")
}

/// Publishes the outbox while this worker holds the lease, until `cancel`.
pub async fn run(settings: Arc<Settings>, store: Store, cancel: CancellationToken) {
    let max_backoff = settings.worker.max_backoff;
    supervise(&cancel, max_backoff, || {
        let (settings, store, cancel) = (settings.clone(), store.clone(), cancel.clone());
        async move { follow(&settings, &store, &cancel).await }
    })
    .await;
}

/// Waits for the lease, publishes while it holds it, and again.
async fn follow(settings: &Settings, store: &Store, cancel: &CancellationToken) -> Result<(), String> {
    let me = uuid::Uuid::new_v4().to_string();
    let prefix = &settings.redis.key_prefix;
    let lease = lease_ms(settings);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(FOLLOW) => {}
        }
        match store.outbox_lease(prefix, &me, lease).await {
            Ok(true) => lead(settings, store, &me, cancel).await?,
            Ok(false) => {}
            Err(e) => warn!(error = %e, "Could not take the outbox's lease; trying again."),
        }
    }
}

/// Publishes while the lease is this worker's. `Err`: the producer failed
/// fatally (a new holder fenced it, or the brokers refuse): the
/// supervisor starts again.
async fn lead(settings: &Settings, store: &Store, me: &str, cancel: &CancellationToken) -> Result<(), String> {
    let group = publisher_group(&settings.kafka.group_id);
    let Some(kafka) = Transactional::start_as(&settings.kafka, group.clone(), cancel).await? else { return Ok(()) };
    let standalone = Standalone::new(&settings.kafka, &group).map_err(|e| e.to_string())?;
    let prefix = &settings.redis.key_prefix;
    let epoch = store.outbox_epoch(prefix, &uuid::Uuid::new_v4().to_string()).await.map_err(|e| e.to_string())?;
    let topic = settings.sealing.topic.clone();
    let mut next = position(&standalone, &topic, &epoch)?;
    info!(next, "Publishing the outbox of scheduled jobs' records.");
    while !cancel.is_cancelled() {
        if !store.outbox_lease(prefix, me, lease_ms(settings)).await.map_err(|e| e.to_string())? {
            info!("Another worker holds the outbox's lease now.");
            return Ok(());
        }
        let items = store.outbox_read(prefix, next, BATCH).await.map_err(|e| e.to_string())?;
        let Some(&(last, _)) = items.last() else {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(POLL) => {}
            }
            continue;
        };
        match publish(&kafka, &standalone, &topic, &epoch, &items, last + 1).await {
            Ok(()) => {
                if let Err(e) = store.outbox_trim(prefix, next, last + 1).await {
                    warn!(error = %e, "Could not trim the published outbox; it is trimmed with the next.");
                }
                next = last + 1;
            }
            Err(e) if classify(&e) == Fault::Fatal => return Err(format!("the outbox's producer failed: {e}")),
            Err(e) => {
                warn!(error = %e, "Publishing the outbox failed; the transaction is aborted and published again.");
                metrics::get().transactions.with_label_values(&["aborted"]).inc();
                if let Err(e) = kafka.abort().await {
                    return Err(format!("aborting the outbox's transaction failed: {e}"));
                }
                next = position(&standalone, &topic, &epoch)?;
                tokio::time::sleep(POLL).await;
            }
        }
    }
    Ok(())
}

/// The next sequence number to publish: the committed one, if it is this
/// outbox's; else the outbox's first.
fn position(standalone: &Standalone, topic: &str, epoch: &str) -> Result<u64, String> {
    let got = tokio::task::block_in_place(|| standalone.committed(topic, 0))
        .map_err(|e| format!("reading the outbox's committed position: {e}"))?;
    Ok(match got {
        Some((at, name)) if name == epoch && at > 0 => at as u64,
        _ => 1,
    })
}

/// One transaction: `items`, and `end` committed as the position.
async fn publish(
    kafka: &Transactional,
    standalone: &Standalone,
    topic: &str,
    epoch: &str,
    items: &[(u64, OutboxRecord)],
    end: u64,
) -> Result<(), rdkafka::error::KafkaError> {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    let started = std::time::Instant::now();
    kafka.begin()?;
    for (_, r) in items {
        let headers = OwnedHeaders::new().insert(Header { key: OUTPUT_ID, value: Some(r.id.as_str()) });
        let record = FutureRecord::to(&r.topic).key(r.key.as_str()).payload(r.payload.as_str()).headers(headers);
        kafka.producer().send(record)?;
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(end as i64))?;
    if let Some(mut e) = tpl.find_partition(topic, 0) {
        e.set_metadata(epoch);
    }
    let group = standalone.metadata().ok_or(KafkaError::MetadataFetch(RDKafkaErrorCode::InvalidArgument))?;
    kafka.commit(tpl, group).await.unwrap_or(Err(KafkaError::Canceled))?;
    let m = metrics::get();
    m.transaction_commit.observe(started.elapsed().as_secs_f64());
    m.transactions.with_label_values(&["committed"]).inc();
    Ok(())
}
