//! `rankflow-tools produce`: generated sample events (see `generator`) to a
//! config's first source topic, for the demo and for trying a deployment.

use std::time::Duration;

use rankflow::config::Settings;
use rankflow::kafka::client;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::generator::Generator;

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
    let producer: FutureProducer = client::producer(&settings.kafka)
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
