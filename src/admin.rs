//! Operator commands that talk to Kafka and Redis outside the worker loop:
//! creating the topics a config names, producing sample events, and
//! forgetting a topic's recorded offsets.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::config::Settings;
use crate::generator::Generator;
use crate::store::{scan_keys, RedisConn, Store};

fn client_config(settings: &Settings) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &settings.kafka.brokers);
    for (k, v) in &settings.kafka.options {
        if crate::worker::is_producer_option(k) {
            c.set(k, v);
        }
    }
    c
}

/// Creates the source topics (with `partitions` each), the dead-letter
/// topic and, when a board seals its periods, the sealed topic; a topic that already exists is left as it is.
pub async fn create_topics(settings: &Settings, partitions: i32) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> =
        client_config(settings).create().map_err(|e| format!("cannot create admin client: {e}"))?;
    let mut names: Vec<&str> = settings.kafka.topics.iter().map(String::as_str).collect();
    names.push(&settings.kafka.dead_letter_topic);
    if settings.seals() {
        names.push(&settings.sealing.topic);
    }
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

/// Deletes every board tag's recorded offsets (and remembered refusals) of
/// `topic`, so that a topic deleted and recreated under the same name is
/// consumed afresh instead of being taken for redeliveries. Returns how many
/// partition entries were removed.
pub async fn forget_offsets(settings: &Settings, topic: &str) -> Result<u64, String> {
    let prefix = &settings.redis.key_prefix;
    let store =
        Store::new(RedisConn::connect(&settings.redis).await.map_err(|e| e.to_string())?, settings.redis.dedupe_ttl);
    let mut conn = store.conn();
    let mut removed = 0u64;
    for key in scan_keys(&settings.redis, &format!("{prefix}:{{*}}:_offsets")).await? {
        let fields: Vec<String> =
            redis::cmd("HKEYS").arg(&key).query_async(&mut conn).await.map_err(|e| e.to_string())?;
        let ours: Vec<&String> =
            fields.iter().filter(|f| f.rsplit_once(':').is_some_and(|(t, _)| t == topic)).collect();
        if !ours.is_empty() {
            let n: u64 =
                redis::cmd("HDEL").arg(&key).arg(&ours).query_async(&mut conn).await.map_err(|e| e.to_string())?;
            removed += n;
        }
    }
    for key in scan_keys(&settings.redis, &format!("{prefix}:{{*}}:_refused:{topic}:*")).await? {
        let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await.map_err(|e| e.to_string())?;
    }
    Ok(removed)
}
