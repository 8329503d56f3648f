//! Reading back what a topic holds, without joining a group: its end
//! offsets now, and the keys of the records written since given offsets.
//! A league settlement's publication records where the topic ended before
//! it began; one taken over after a crash reads what was published since
//! and sends only the rest, so each cohort's record is on the topic once.
//! Blocking: call from `spawn_blocking`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::client;
use crate::config::KafkaSettings;

const TIMEOUT: Duration = Duration::from_secs(10);

fn observer(kafka: &KafkaSettings) -> KafkaResult<BaseConsumer> {
    client::observer(kafka).create()
}

/// Each partition of `topic` with its end offset (the next record's).
pub fn end_offsets(kafka: &KafkaSettings, topic: &str) -> KafkaResult<Vec<(i32, i64)>> {
    let consumer = observer(kafka)?;
    let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT)?;
    let partitions: Vec<i32> = metadata.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
    partitions.into_iter().map(|p| Ok((p, consumer.fetch_watermarks(topic, p, TIMEOUT)?.1))).collect()
}

/// The keys starting with `prefix` of the records of `topic` from the
/// offsets `from` (per partition) to the end.
pub fn keys_since(
    kafka: &KafkaSettings,
    topic: &str,
    from: &[(i32, i64)],
    prefix: &str,
) -> KafkaResult<HashSet<String>> {
    let consumer = observer(kafka)?;
    let mut left: HashMap<i32, i64> = HashMap::new();
    let mut tpl = TopicPartitionList::new();
    for &(p, start) in from {
        let end = consumer.fetch_watermarks(topic, p, TIMEOUT)?.1;
        if start < end {
            tpl.add_partition_offset(topic, p, Offset::Offset(start))?;
            left.insert(p, end);
        }
    }
    let mut keys = HashSet::new();
    if left.is_empty() {
        return Ok(keys);
    }
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + 3 * TIMEOUT;
    while !left.is_empty() {
        if Instant::now() > deadline {
            return Err(KafkaError::MessageConsumption(rdkafka::types::RDKafkaErrorCode::OperationTimedOut));
        }
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            // Nothing more to read: a partition whose position reached its end is done.
            for e in consumer.position()?.elements() {
                if let (Offset::Offset(at), Some(&end)) = (e.offset(), left.get(&e.partition())) {
                    if at >= end {
                        left.remove(&e.partition());
                    }
                }
            }
            continue;
        };
        let m = m?;
        if let Some(key) = m.key().and_then(|k| std::str::from_utf8(k).ok()) {
            if key.starts_with(prefix) {
                keys.insert(key.to_string());
            }
        }
        if left.get(&m.partition()).is_some_and(|&end| m.offset() + 1 >= end) {
            left.remove(&m.partition());
        }
    }
    Ok(keys)
}

/// Offsets as the text Redis keeps: `<partition>:<offset>,...`.
pub fn offsets_text(offsets: &[(i32, i64)]) -> String {
    offsets.iter().map(|(p, o)| format!("{p}:{o}")).collect::<Vec<_>>().join(",")
}

/// Reads [`offsets_text`] back.
pub fn parse_offsets(text: &str) -> Option<Vec<(i32, i64)>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|pair| {
            let (p, o) = pair.split_once(':')?;
            Some((p.parse().ok()?, o.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_read_back() {
        let o = vec![(0, 12), (3, 0)];
        assert_eq!(parse_offsets(&offsets_text(&o)), Some(o));
        assert_eq!(parse_offsets(""), Some(Vec::new()));
        assert_eq!(parse_offsets("x"), None);
    }
}
