//! Operator commands that talk to Kafka and Redis outside the worker loop:
//! creating the topics a config names, and producing sample events.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::config::Settings;
use crate::generator::Generator;

fn client_config(settings: &Settings) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &settings.kafka.brokers);
    for (k, v) in &settings.kafka.options {
        if k.starts_with("security.") || k.starts_with("sasl.") || k.starts_with("ssl.") {
            c.set(k, v);
        }
    }
    c
}

/// Creates the source topics (with `partitions` each) and the dead-letter
/// topic; a topic that already exists is left as it is.
pub async fn create_topics(settings: &Settings, partitions: i32) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> =
        client_config(settings).create().map_err(|e| format!("cannot create admin client: {e}"))?;
    let mut names: Vec<&str> = settings.kafka.topics.iter().map(String::as_str).collect();
    names.push(&settings.kafka.dead_letter_topic);
    let topics: Vec<NewTopic<'_>> =
        names.iter().map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1))).collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin.create_topics(&topics, &opts).await.map_err(|e| format!("create topics: {e}"))?;
    for r in results {
        match r {
            Ok(name) => println!("created topic {name}"),
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => println!("topic {name} already exists"),
            Err((name, code)) => return Err(format!("cannot create topic {name}: {code}")),
        }
    }
    Ok(())
}

/// Produces `count` generated events to the first source topic, at most
/// `rate` per second (0: as fast as possible).
pub async fn produce_samples(
    settings: &Settings,
    count: u64,
    rate: u64,
    seed: u64,
    bad_ratio: f64,
    dup_ratio: f64,
) -> Result<(), String> {
    let producer: FutureProducer = client_config(settings)
        .set("linger.ms", "20")
        .set("message.timeout.ms", "30000")
        .create()
        .map_err(|e| format!("cannot create producer: {e}"))?;
    let topic = &settings.kafka.topics[0];
    let now = chrono::Utc::now().timestamp_millis();
    let mut generator =
        Generator::new(seed, 2000, now - 60_000, 1).with_bad_records(bad_ratio).with_duplicates(dup_ratio);
    let started = std::time::Instant::now();
    let mut pending = Vec::new();
    for i in 0..count {
        if rate > 0 {
            let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let s = generator.next_sample();
        let fut = producer.send_result(FutureRecord::to(topic).key(&s.key).payload(&s.value));
        match fut {
            Ok(f) => pending.push(f),
            Err((e, _)) => return Err(format!("produce failed: {e}")),
        }
        if pending.len() >= 10_000 {
            for f in pending.drain(..) {
                f.await
                    .map_err(|_| "produce cancelled".to_string())?
                    .map_err(|(e, _)| format!("produce failed: {e}"))?;
            }
        }
    }
    for f in pending {
        f.await.map_err(|_| "produce cancelled".to_string())?.map_err(|(e, _)| format!("produce failed: {e}"))?;
    }
    println!("produced {count} records to {topic}");
    Ok(())
}
