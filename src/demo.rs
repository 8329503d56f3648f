//! `rankflow demo`: the whole flow with nothing to install but Redis. With
//! `kafka.brokers = "embedded"` it starts librdkafka's mock cluster in this
//! process (a Kafka-protocol broker that keeps its topics in memory),
//! creates the config's topics there, produces sample events (with a few
//! producer duplicates and bad records) and runs the real worker, HTTP API
//! and page on them until Ctrl-C. With a real broker configured instead, it
//! creates the topics and produces the samples there. Also the sample
//! producer of `rankflow-tools produce`.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::config::Settings;
use crate::event::schema::{Schema, EVENT_AVSC, EVENT_PROTO};
use crate::event::Format;
use crate::kafka::client;
use crate::samples::{Encoding, Generator};

/// The `kafka.brokers` value that asks `rankflow demo` for the embedded broker.
pub const EMBEDDED: &str = "embedded";

/// Partitions of each topic the demo creates on the embedded broker.
const PARTITIONS: i32 = 4;

/// What the demo produces.
#[derive(Clone, Copy, Debug)]
pub struct DemoStream {
    pub events: u64,
    pub seed: u64,
    /// The first source topic's format: JSON, or Avro or Protobuf framed
    /// with rankflow's own schemas (ids 1 and 2), which the worker then reads.
    pub format: Format,
}

/// The schema ids the demo gives rankflow's Avro and Protobuf events.
const DEMO_AVRO_ID: u32 = 1;
const DEMO_PROTOBUF_ID: u32 = 2;

/// The demo's first topic written in `format`, with rankflow's own schema.
fn use_format(settings: &mut Settings, format: Format) -> Result<(), String> {
    let schema = match format {
        Format::Json => return Ok(()),
        Format::Avro => (DEMO_AVRO_ID, Schema::avro(EVENT_AVSC)?),
        Format::Protobuf => (DEMO_PROTOBUF_ID, Schema::proto(EVENT_PROTO)?),
        Format::CloudEvents => return Err("the demo produces json, avro or protobuf".into()),
    };
    settings.kafka.formats.insert(settings.kafka.topics[0].clone(), format);
    settings.kafka.schemas.insert(schema.0, Arc::new(schema.1));
    Ok(())
}

/// Runs the demo until Ctrl-C or SIGTERM; returns the exit status.
pub async fn run(mut settings: Settings, stream: DemoStream) -> i32 {
    if let Err(e) = use_format(&mut settings, stream.format) {
        eprintln!("rankflow: {e}");
        return 1;
    }
    // Kept alive for as long as the worker runs: dropping it stops the broker.
    let _cluster = if settings.kafka.brokers == EMBEDDED {
        match embedded_broker(&settings) {
            Ok((cluster, servers)) => {
                settings.kafka.brokers = servers;
                // librdkafka's mock cluster acknowledges a transaction's
                // offsets without storing them: the embedded demo's outputs
                // are at least once, as with kafka.transactions = false.
                settings.kafka.transactions = false;
                Some(cluster)
            }
            Err(e) => {
                eprintln!("rankflow: cannot start the embedded broker: {e}");
                return 1;
            }
        }
    } else {
        if let Err(e) = crate::kafka::topics::create_topics(&settings, PARTITIONS).await {
            eprintln!("rankflow: {e}");
            return 1;
        }
        None
    };
    if let Err(e) = produce_samples(&settings, stream.events, 0, stream.seed, 0.01, 0.02).await {
        eprintln!("rankflow: {e}");
        return 1;
    }
    if stream.format != Format::Json {
        println!(
            "demo: the samples are {:?} records in the Schema Registry wire format, with rankflow's own schema",
            stream.format
        );
    }
    let page = format!("http://{}/", settings.http.listen);
    println!("demo: the worker is starting on {} (broker: {})", settings.http.listen, settings.kafka.brokers);
    println!("demo: the leaderboard page:  {page}");
    println!("demo: the boards:            {page}v1/boards");
    if let Some(b) = settings.boards.first() {
        println!("demo: the top of '{}':    {page}v1/boards/{}/top?limit=5", b.id(), b.id());
    }
    println!("demo: metrics:               {page}metrics   (Ctrl-C stops the demo)");
    crate::app::run(settings).await
}

/// librdkafka's mock cluster, with every topic the config names.
fn embedded_broker(
    settings: &Settings,
) -> Result<(MockCluster<'static, rdkafka::producer::DefaultProducerContext>, String), String> {
    let cluster = MockCluster::new(1).map_err(|e| e.to_string())?;
    let mut topics: Vec<&str> = settings.kafka.topics.iter().map(String::as_str).collect();
    topics.extend(settings.kafka.admin_topics.iter().map(String::as_str));
    topics.push(&settings.kafka.dead_letter_topic);
    topics.extend(settings.kafka.changes_topic.as_deref());
    topics.extend(settings.kafka.review_topic.as_deref());
    if settings.seals() {
        topics.push(&settings.sealing.topic);
    }
    for t in topics {
        cluster.create_topic(t, PARTITIONS, 1).map_err(|e| format!("creating topic {t}: {e}"))?;
    }
    let servers = cluster.bootstrap_servers();
    Ok((cluster, servers))
}

/// Produces `count` generated events to the first source topic (in its
/// format: [`Encoding::for_topic`]), at most
/// `rate` per second (0: as fast as possible), with a share of bad records
/// and of producer duplicates; a progress bar on a terminal.
pub async fn produce_samples(
    settings: &Settings,
    count: u64,
    rate: u64,
    seed: u64,
    bad_ratio: f64,
    dup_ratio: f64,
) -> Result<(), String> {
    let producer: FutureProducer = client::producer(&settings.kafka)
        .set("linger.ms", "20")
        .set("message.timeout.ms", "30000")
        .create()
        .map_err(|e| format!("cannot create producer: {e}"))?;
    let topic = &settings.kafka.topics[0];
    let encoding = Encoding::for_topic(settings, topic)?;
    let now = chrono::Utc::now().timestamp_millis();
    let mut generator = Generator::new(seed, 2000, now - 60_000, 1)
        .with_bad_records(bad_ratio)
        .with_duplicates(dup_ratio)
        .with_names()
        .with_columns();
    let bar = crate::progress::bar(count, "producing sample events");
    let started = std::time::Instant::now();
    let mut pending = Vec::new();
    for i in 0..count {
        if rate > 0 {
            let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let s = generator.next_sample();
        let value = encoding.encode(&s.value);
        let fut = producer.send_result(FutureRecord::to(topic).key(&s.key).payload(&value));
        match fut {
            Ok(f) => pending.push(f),
            Err((e, _)) => return Err(format!("produce failed: {e}")),
        }
        if pending.len() >= 10_000 {
            for f in pending.drain(..) {
                f.await
                    .map_err(|_| "produce cancelled".to_string())?
                    .map_err(|(e, _)| format!("produce failed: {e}"))?;
                bar.inc(1);
            }
        }
    }
    for f in pending {
        f.await.map_err(|_| "produce cancelled".to_string())?.map_err(|(e, _)| format!("produce failed: {e}"))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!("produced {count} records to {topic}");
    Ok(())
}
