//! A Kafka producer whose deliveries are awaited as futures, for every
//! record rankflow writes: dead letters, rank changes, held events for
//! review and the `player_hidden` events of `hold_hides_after` (the
//! pipeline), sealed tops and league results (the scheduler), and the
//! admin command's events.
//!
//! rdkafka's `FutureProducer` serves delivery reports from a thread that
//! calls `poll(100 ms)` in a loop. In the last millisecond of each call the
//! time left rounds down to 0 ms, and the call spins (a non-blocking poll,
//! two clock reads and a queue lock, over and over) until its deadline: about
//! 1% of a core, all the time, whether anything is produced or not. A `perf`
//! profile of the worker during an end-to-end run put that thread at the top
//! of the worker's CPU; `perf stat -t` on it, with the worker idle, counted
//! 45 ms of CPU in 5 s. This producer's thread waits a second per call, so
//! the spin is at most a millisecond a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::client::{Client, ClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::ToBytes;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, FutureRecord, Producer, ProducerContext};
use tokio::sync::oneshot;

/// How long one call of the polling thread waits for a delivery report.
/// It is also how long the thread can outlive its producer.
const POLL_WAIT: Duration = Duration::from_secs(1);

/// The outcome of one record: `Ok` once the broker has acknowledged it.
/// Awaiting it gives an error too if the producer went away first.
pub type Delivery = oneshot::Receiver<KafkaResult<()>>;

/// Hands each delivery report to the record's waiting [`Delivery`].
pub struct Deliveries;

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<oneshot::Sender<KafkaResult<()>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, tx: Self::DeliveryOpaque) {
        // Nobody waits any more if the receiver was dropped: nothing to do.
        let _ = tx.send(result.as_ref().map(|_| ()).map_err(|(e, _)| e.clone()));
    }
}

/// A producer with its own polling thread, stopped when the producer is dropped.
pub struct KafkaProducer {
    pub(super) inner: Arc<BaseProducer<Deliveries>>,
    stop: Arc<AtomicBool>,
}

impl KafkaProducer {
    pub fn new(config: &ClientConfig) -> KafkaResult<KafkaProducer> {
        let inner: Arc<BaseProducer<Deliveries>> = Arc::new(config.create_with_context(Deliveries)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (producer, stopped) = (inner.clone(), stop.clone());
        std::thread::Builder::new()
            .name("rankflow-produce".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    producer.poll(POLL_WAIT);
                }
            })
            .map_err(|e| KafkaError::ClientCreation(format!("cannot start the producer's polling thread: {e}")))?;
        Ok(KafkaProducer { inner, stop })
    }

    /// Queues a record; the returned [`Delivery`] resolves once the broker
    /// has acknowledged it or given up. An error here means it was not
    /// queued (for example the local queue is full).
    pub fn send<K, P>(&self, record: FutureRecord<'_, K, P>) -> KafkaResult<Delivery>
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        let (tx, rx) = oneshot::channel();
        let mut base = BaseRecord::with_opaque_to(record.topic, Box::new(tx));
        base.partition = record.partition;
        base.payload = record.payload;
        base.key = record.key;
        base.timestamp = record.timestamp;
        base.headers = record.headers;
        self.inner.send(base).map_err(|(e, _)| e)?;
        Ok(rx)
    }

    /// Queues a record and waits for the broker's acknowledgement.
    pub async fn deliver<K, P>(&self, record: FutureRecord<'_, K, P>) -> KafkaResult<()>
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        match self.send(record)?.await {
            Ok(result) => result,
            Err(_) => Err(KafkaError::Canceled),
        }
    }

    /// Waits up to `timeout` for every queued record's delivery.
    pub fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        self.inner.flush(timeout)
    }

    pub fn client(&self) -> &Client<Deliveries> {
        self.inner.client()
    }
}

impl Drop for KafkaProducer {
    fn drop(&mut self) {
        // The thread ends within POLL_WAIT; the librdkafka handle goes with
        // its last reference, there.
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::DefaultProducerContext;
    use rdkafka::{Message, Offset, TopicPartitionList};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delivery_resolves_once_the_broker_has_the_record_and_the_record_is_there() {
        let mock = MockCluster::<DefaultProducerContext>::new(1).expect("mock cluster");
        mock.create_topic("dead", 1, 1).expect("topic");
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", mock.bootstrap_servers());
        let producer = KafkaProducer::new(&config).expect("producer");
        let deliveries: Vec<Delivery> = (0..3)
            .map(|i| producer.send(FutureRecord::to("dead").key("k").payload(&format!("record {i}"))).expect("queued"))
            .collect();
        let within = Duration::from_secs(20);
        for d in deliveries {
            tokio::time::timeout(within, d)
                .await
                .expect("no delivery report")
                .expect("producer alive")
                .expect("delivered");
        }
        let last = producer.deliver(FutureRecord::to("dead").key("k").payload("record 3"));
        tokio::time::timeout(within, last).await.expect("no delivery report").expect("delivered");

        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("group.id", "check")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("dead", 0, Offset::Beginning).expect("partition");
        consumer.assign(&tpl).expect("assign");
        let mut seen = Vec::new();
        let started = std::time::Instant::now();
        while seen.len() < 4 && started.elapsed() < Duration::from_secs(20) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                seen.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            }
        }
        assert_eq!(seen, ["record 0", "record 1", "record 2", "record 3"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_the_broker_never_takes_resolves_as_an_error() {
        // Nothing listens on this port: the record times out in librdkafka.
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", format!("127.0.0.1:{port}")).set("message.timeout.ms", "1000");
        let producer = KafkaProducer::new(&config).expect("producer");
        let lost = producer.deliver(FutureRecord::to("dead").key("k").payload("lost"));
        let result = tokio::time::timeout(Duration::from_secs(20), lost).await.expect("no delivery report");
        assert!(result.is_err(), "a record no broker took was reported delivered");
    }
}
