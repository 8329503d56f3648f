//! Kafka transactions (`kafka.transactions`): the worker's transactional
//! producer, the calls of one transaction's life, and how their failures
//! are classed.
//!
//! One producer per consumer, its `transactional.id` the group's name, the
//! host's and the worker's HTTP address (`<group>-<host>-<listen>`: the same
//! when a worker is restarted in its place, whose first act is to end the
//! transaction its predecessor left open, so readers do not wait for it to
//! time out; and never the same for two live workers, which cannot listen on
//! one address). The ACL it needs is `TransactionalId Write` on the prefix
//! `<group>-`, and `IdempotentWrite` on the cluster. A transaction holds
//! the records made for a run of source records and, through
//! `send_offsets_to_transaction` with the consumer's group metadata, the
//! offsets after them: both are committed or neither is, and a worker that
//! lost its partitions (its generation is past) cannot commit them.
//!
//! librdkafka classes a failed call three ways, and so does [`Fault`]:
//! retriable (the call is made again), abortable (the transaction is
//! aborted and the consumer rewinds to the committed offsets) and fatal
//! (this producer is done: a new one, with a new epoch, takes its place).
//! The blocking calls run on tokio's blocking threads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::TopicPartitionList;
use tokio_util::sync::CancellationToken;

use super::client;
use super::producer::{Deliveries, KafkaProducer};
use crate::config::KafkaSettings;

/// The header every produced record carries, the same on every copy of it,
/// so that a consumer reading uncommitted records can deduplicate.
pub const OUTPUT_ID: &str = "rankflow-output-id";

/// How long `init_transactions` may take at start (a new cluster elects
/// its transaction coordinator in the meantime) before the worker stops.
const INIT_WAIT: Duration = Duration::from_secs(60);

/// How a failed transactional call is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Made again.
    Retriable,
    /// The transaction is aborted; its source records are read again.
    Abortable,
    /// The producer can do nothing more: a new one replaces it.
    Fatal,
}

/// librdkafka's class of a failed call. An error that is not a
/// transaction's (a flush that timed out) aborts.
pub fn classify(e: &KafkaError) -> Fault {
    match e {
        KafkaError::Transaction(r) if r.is_fatal() => Fault::Fatal,
        KafkaError::Transaction(r) if r.txn_requires_abort() => Fault::Abortable,
        KafkaError::Transaction(r) if r.is_retriable() => Fault::Retriable,
        _ => Fault::Abortable,
    }
}

/// What a refusal to start transactions means, naming `kafka.transactions`
/// and the permission missing.
pub fn refusal(e: &KafkaError, id: &str, group: &str) -> String {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed) => format!(
            "kafka.transactions: the brokers refuse transactional id '{id}': grant the worker's principal \
             TransactionalId Write on the prefix '{group}-' (or set kafka.transactions = false): {e}"
        ),
        Some(RDKafkaErrorCode::ClusterAuthorizationFailed) => format!(
            "kafka.transactions: the brokers refuse idempotent writes: grant the worker's principal \
             IdempotentWrite on the cluster (or set kafka.transactions = false): {e}"
        ),
        _ => format!(
            "kafka.transactions: the brokers did not start transactions for '{id}' (brokers without \
             transactions need kafka.transactions = false): {e}"
        ),
    }
}

/// The worker's transactional producer.
pub struct Transactional {
    producer: Arc<KafkaProducer>,
    config: ClientConfig,
    id: String,
    group: String,
    timeout: Duration,
}

impl Transactional {
    /// A producer whose transactions are initialised (which fences an
    /// earlier producer of the same id). `Err`: why the brokers refused,
    /// naming `kafka.transactions`; `Ok(None)`: shutdown came first.
    pub async fn start(
        kafka: &KafkaSettings,
        listen: &str,
        cancel: &CancellationToken,
    ) -> Result<Option<Transactional>, String> {
        Transactional::start_as(kafka, worker_id(&kafka.group_id, listen), cancel).await
    }

    /// [`Transactional::start`] with a `transactional.id` of the caller's.
    pub async fn start_as(
        kafka: &KafkaSettings,
        id: String,
        cancel: &CancellationToken,
    ) -> Result<Option<Transactional>, String> {
        let config = client::transactional_producer(kafka, &id);
        let timeout = Duration::from_millis(client::transaction_timeout_ms(kafka));
        let producer = init(&config, &id, &kafka.group_id, cancel).await?;
        Ok(producer.map(|p| Transactional { producer: p, config, id, group: kafka.group_id.clone(), timeout }))
    }

    /// The producer records are sent with (inside a transaction).
    pub fn producer(&self) -> &KafkaProducer {
        &self.producer
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Starts a transaction (no broker call).
    pub fn begin(&self) -> Result<(), KafkaError> {
        self.producer.inner.begin_transaction()
    }

    /// Adds `offsets` (with the group's metadata) and commits, on a
    /// blocking thread, retrying what is retriable until the transaction
    /// timeout has passed.
    pub fn commit(
        &self,
        offsets: TopicPartitionList,
        group: ConsumerGroupMetadata,
    ) -> tokio::task::JoinHandle<Result<(), KafkaError>> {
        let (p, timeout) = (self.producer.inner.clone(), self.timeout);
        tokio::task::spawn_blocking(move || {
            if offsets.count() > 0 {
                retried(timeout, || p.send_offsets_to_transaction(&offsets, &group, timeout))?;
            }
            delivered(&p, timeout);
            retried(timeout, || p.commit_transaction(timeout))
        })
    }

    /// Aborts the open transaction: none of its records is ever seen by a
    /// `read_committed` consumer, none of its offsets committed.
    pub async fn abort(&self) -> Result<(), KafkaError> {
        let (p, timeout) = (self.producer.inner.clone(), self.timeout);
        blocking(move || retried(timeout, || p.abort_transaction(timeout))).await
    }

    /// After a fatal error: a new producer of the same id (a new epoch,
    /// which fences the old one and ends its transaction). `Ok(false)`:
    /// shutdown came first.
    pub async fn renew(&mut self, cancel: &CancellationToken) -> Result<bool, String> {
        match init(&self.config, &self.id, &self.group, cancel).await? {
            Some(p) => {
                self.producer = p;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// The `transactional.id` of the worker of `group` on this host listening
/// on `listen`: `<group>-<host>-<listen>`.
pub fn worker_id(group: &str, listen: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{group}-{host}-{listen}")
}

/// A consumer of `group` that never joins it: the group's metadata for
/// `send_offsets_to_transaction` (no generation, so the broker checks
/// none) and the offsets committed to it, for a producer that keeps its
/// own position in a group's offsets (the outbox's publisher).
pub struct Standalone {
    consumer: rdkafka::consumer::BaseConsumer,
}

impl Standalone {
    pub fn new(kafka: &KafkaSettings, group: &str) -> Result<Standalone, KafkaError> {
        let mut config = client::observer(kafka);
        config.set("group.id", group).set("isolation.level", "read_committed");
        Ok(Standalone { consumer: config.create()? })
    }

    pub fn metadata(&self) -> Option<ConsumerGroupMetadata> {
        use rdkafka::consumer::Consumer;
        self.consumer.group_metadata()
    }

    /// The offset committed to the group for `topic`/`partition`, with its
    /// metadata; `None` if none. Blocking: call from `block_in_place`.
    pub fn committed(&self, topic: &str, partition: i32) -> Result<Option<(i64, String)>, KafkaError> {
        use rdkafka::consumer::Consumer;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition);
        let got = self.consumer.committed_offsets(tpl, Duration::from_secs(10))?;
        Ok(got.elements().first().and_then(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => Some((o, e.metadata().to_string())),
            _ => None,
        }))
    }
}

/// Creates a producer of `config` and initialises its transactions,
/// retrying what is retriable for up to [`INIT_WAIT`].
async fn init(
    config: &ClientConfig,
    id: &str,
    group: &str,
    cancel: &CancellationToken,
) -> Result<Option<Arc<KafkaProducer>>, String> {
    let producer = Arc::new(
        KafkaProducer::new(config).map_err(|e| format!("kafka.transactions: cannot create the producer: {e}"))?,
    );
    let started = Instant::now();
    loop {
        let p: Arc<BaseProducer<Deliveries>> = producer.inner.clone();
        let got = blocking(move || p.init_transactions(Duration::from_secs(10))).await;
        match got {
            Ok(()) => return Ok(Some(producer)),
            Err(e) if classify(&e) == Fault::Retriable && started.elapsed() < INIT_WAIT => {
                tracing::info!(error = %e, "Initialising Kafka transactions; trying again.");
            }
            Err(e) => return Err(refusal(&e, id, group)),
        }
        if cancel.is_cancelled() {
            return Ok(None);
        }
    }
}

/// Waits, in steps of a millisecond and for up to `within`, until no record
/// of the producer is queued or in flight. rust-rdkafka's
/// `commit_transaction` flushes first, and its flush polls for up to 100 ms
/// at a time: the producer's own thread (see `KafkaProducer`) serves the
/// deliveries that poll waits for, so every commit with a record in flight
/// lasted 100 ms longer. Waited for here, the flush finds none.
fn delivered(p: &BaseProducer<Deliveries>, within: Duration) {
    let started = Instant::now();
    while p.in_flight_count() > 0 && started.elapsed() < within {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Makes `call` again while it fails retriably, for up to `within`.
fn retried(within: Duration, mut call: impl FnMut() -> Result<(), KafkaError>) -> Result<(), KafkaError> {
    let started = Instant::now();
    loop {
        match call() {
            Err(e) if classify(&e) == Fault::Retriable && started.elapsed() < within => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// Runs a blocking librdkafka call on a blocking thread.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, KafkaError> + Send + 'static,
) -> Result<T, KafkaError> {
    tokio::task::spawn_blocking(call).await.unwrap_or(Err(KafkaError::Canceled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_setting_and_the_permission() {
        let acl = KafkaError::Global(RDKafkaErrorCode::TransactionalIdAuthorizationFailed);
        let why = refusal(&acl, "g-1", "g");
        assert!(
            why.starts_with("kafka.transactions:") && why.contains("TransactionalId Write") && why.contains("'g-'")
        );
        let cluster = KafkaError::Global(RDKafkaErrorCode::ClusterAuthorizationFailed);
        assert!(refusal(&cluster, "g-1", "g").contains("IdempotentWrite"));
        let other = refusal(&KafkaError::Global(RDKafkaErrorCode::OperationTimedOut), "g-1", "g");
        assert!(other.contains("kafka.transactions = false"));
        assert_eq!(classify(&KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)), Fault::Abortable);
    }
}
