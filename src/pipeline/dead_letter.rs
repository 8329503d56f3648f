//! Dead letters: records no board applied, produced to the dead-letter topic
//! with their reasons, and the partitions that wait while the topic fails.
//!
//! A partition whose dead letters the broker has not acknowledged is held:
//! paused, its stored offset stopped at its first held record, while every
//! other partition goes on. [`Held`] is that bookkeeping, pure; the pipeline
//! pauses, resumes and stores what it says.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::message::OwnedHeaders;
use rdkafka::producer::FutureRecord;
use tokio::time::Instant;
use tracing::warn;

use crate::event::{Reason, Rejection};
use crate::kafka::producer::{Delivery, KafkaProducer};
use crate::metrics;

use super::record::{dead_letter_headers, Record};

/// A record on its way to the dead-letter topic: an owned copy, so that it
/// can wait for the topic while its partition is paused.
pub struct DeadRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
    timestamp: Option<i64>,
    headers: OwnedHeaders,
    /// The first reason, for the metric.
    reason: Reason,
    /// The delivery of the copy already handed to the producer, if any.
    inflight: Option<Delivery>,
}

impl DeadRecord {
    pub fn new(record: Record, reasons: &[Rejection]) -> DeadRecord {
        let mut reason_list: Vec<&str> = reasons.iter().map(|r| r.reason.as_str()).collect();
        reason_list.dedup();
        let reason = reason_list.join(",");
        let detail = reasons.iter().map(|r| r.detail.as_str()).collect::<Vec<_>>().join("; ");
        let headers = dead_letter_headers(&record, &reason, &detail);
        let (key, payload) = match record.source {
            Some(s) => (s.key, s.payload),
            None => (None, None),
        };
        DeadRecord {
            topic: record.topic,
            partition: record.partition,
            offset: record.offset,
            key,
            payload,
            timestamp: record.timestamp,
            headers,
            reason: reasons.first().map_or(Reason::InvalidJson, |r| r.reason),
            inflight: None,
        }
    }
}

/// Produces dead records (each at most once while its delivery is in
/// flight) and waits for their acknowledgements until `wait` has passed
/// (`None`: until each resolves). Returns those not acknowledged yet.
pub async fn send(
    producer: &KafkaProducer,
    topic: &str,
    mut records: Vec<DeadRecord>,
    wait: Option<Duration>,
) -> Vec<DeadRecord> {
    let m = metrics::get();
    for r in &mut records {
        if r.inflight.is_some() {
            continue;
        }
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(r.headers.clone());
        if let Some(k) = &r.key {
            record = record.key(k.as_slice());
        }
        if let Some(p) = &r.payload {
            record = record.payload(p.as_slice());
        }
        if let Some(ts) = r.timestamp {
            record = record.timestamp(ts);
        }
        match producer.send(record) {
            Ok(f) => r.inflight = Some(f),
            Err(e) => warn!(error = %e, "Could not queue a record for the dead-letter topic."),
        }
    }
    let deadline = wait.map(|w| Instant::now() + w);
    let mut waiting = Vec::new();
    for mut r in records {
        let Some(f) = r.inflight.as_mut() else {
            waiting.push(r);
            continue;
        };
        let outcome = match deadline {
            None => Some(f.await),
            Some(d) => tokio::time::timeout_at(d, f).await.ok(),
        };
        match outcome {
            None => waiting.push(r), // still in flight: checked again next time, never sent twice
            Some(Ok(Ok(_))) => m.dead_letters.with_label_values(&[r.reason.as_str()]).inc(),
            Some(Ok(Err(e))) => {
                m.dead_letter_errors.inc();
                warn!(error = %e, topic = %r.topic, partition = r.partition, offset = r.offset,
                    "Could not produce to the dead-letter topic; the record's partition waits.");
                r.inflight = None;
                waiting.push(r);
            }
            Some(Err(_)) => {
                r.inflight = None;
                waiting.push(r);
            }
        }
    }
    waiting
}

/// Partitions waiting for the dead-letter topic. Such a partition is paused;
/// its stored offset stops at its first held record, so nothing after it is
/// committed, while every other partition goes on.
#[derive(Default)]
pub struct Held {
    /// (topic, partition) -> (held records, highest offset processed).
    partitions: BTreeMap<(Arc<str>, i32), (Vec<DeadRecord>, i64)>,
    /// When the held records are tried again.
    pub next_try: Option<Instant>,
    backoff: Duration,
}

impl Held {
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// The offset to store for a partition whose batch is final at `next`
    /// (its last offset + 1): a held partition stops at its first held record.
    pub fn offset_to_store(&self, topic: &str, partition: i32, next: i64) -> i64 {
        let first_held = self
            .partitions
            .iter()
            .find(|((t, p), _)| *p == partition && &**t == topic)
            .and_then(|(_, (records, _))| records.iter().map(|r| r.offset).min());
        first_held.map_or(next, |stop| stop.min(next))
    }

    /// Notes that a held partition has processed up to `last`: once its
    /// records are acknowledged, it stores `last + 1`.
    pub fn note_processed(&mut self, topic: &str, partition: i32, last: i64) {
        if let Some((_, (_, processed))) =
            self.partitions.iter_mut().find(|((t, p), _)| *p == partition && &**t == topic)
        {
            *processed = (*processed).max(last);
        }
    }

    /// Holds records the dead-letter topic did not take. Returns the
    /// partitions held from now on, which the caller pauses.
    pub fn hold(&mut self, records: Vec<DeadRecord>, max_backoff: Duration) -> Vec<(Arc<str>, i32)> {
        let mut newly = Vec::new();
        // Nothing to hold: no retry is due (a due time with nothing held
        // would wake the run loop at once, over and over).
        if records.is_empty() {
            return newly;
        }
        for r in records {
            let key = (r.topic.clone(), r.partition);
            let (held, processed) = self.partitions.entry(key.clone()).or_insert_with(|| {
                newly.push(key);
                (Vec::new(), r.offset)
            });
            *processed = (*processed).max(r.offset);
            held.push(r);
        }
        if self.next_try.is_none() {
            self.backoff = Duration::from_millis(500).min(max_backoff);
            self.next_try = Some(Instant::now() + self.backoff);
        }
        newly
    }

    /// Drops the partitions `assigned` says are no longer ours: their held
    /// records are never stored, and their next owner reads them again.
    pub fn keep_assigned(&mut self, assigned: impl Fn(&str, i32) -> bool) {
        self.partitions.retain(|(t, p), _| assigned(t, *p));
        if self.partitions.is_empty() {
            self.next_try = None;
        }
    }

    /// Every held record, for another try; [`Held::retried`] takes back those still waiting.
    pub fn take_records(&mut self) -> Vec<DeadRecord> {
        self.partitions.values_mut().flat_map(|(r, _)| r.drain(..)).collect()
    }

    /// After a try: `waiting` are the records still not acknowledged.
    /// Returns each partition that has none left, with the offset it now
    /// stores (its last processed + 1); the caller resumes it.
    pub fn retried(&mut self, waiting: Vec<DeadRecord>, max_backoff: Duration) -> Vec<(Arc<str>, i32, i64)> {
        for r in waiting {
            if let Some((pending, _)) = self.partitions.get_mut(&(r.topic.clone(), r.partition)) {
                pending.push(r);
            }
        }
        let drained: Vec<(Arc<str>, i32, i64)> = self
            .partitions
            .iter()
            .filter(|(_, (r, _))| r.is_empty())
            .map(|((t, p), (_, processed))| (t.clone(), *p, processed + 1))
            .collect();
        for (t, p, _) in &drained {
            self.partitions.remove(&(t.clone(), *p));
        }
        if self.is_empty() {
            self.next_try = None;
        } else {
            self.backoff = (self.backoff * 2).min(max_backoff);
            self.next_try = Some(Instant::now() + self.backoff);
        }
        drained
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dead(topic: &Arc<str>, partition: i32, offset: i64) -> DeadRecord {
        let record = Record { topic: topic.clone(), partition, offset, timestamp: Some(1), source: None };
        DeadRecord::new(record, &[Rejection::new(Reason::InvalidJson, "not JSON")])
    }

    #[tokio::test]
    async fn a_held_partition_stores_no_offset_past_its_first_held_record_until_the_topic_takes_them() {
        let t: Arc<str> = Arc::from("scores");
        let mut held = Held::default();
        let max = Duration::from_secs(10);
        assert_eq!(held.hold(vec![dead(&t, 0, 7), dead(&t, 0, 9)], max), [(t.clone(), 0)]);
        assert!(held.next_try.is_some());
        // A later batch of the same partition (paused, but it was in flight) and another partition.
        held.note_processed("scores", 0, 12);
        assert_eq!(held.offset_to_store("scores", 0, 13), 7);
        assert_eq!(held.offset_to_store("scores", 1, 40), 40);
        // A second hold on the same partition pauses nothing new.
        assert!(held.hold(vec![dead(&t, 0, 10)], max).is_empty());

        // One record still fails: the partition stays held, and retries back off.
        let records = held.take_records();
        assert_eq!(records.len(), 3);
        let still: Vec<DeadRecord> = records.into_iter().filter(|r| r.offset == 9).collect();
        assert!(held.retried(still, max).is_empty());
        assert_eq!(held.offset_to_store("scores", 0, 13), 9);
        // Then it succeeds: the partition stores past everything it processed.
        held.take_records();
        assert_eq!(held.retried(Vec::new(), max), [(t.clone(), 0, 13)]);
        assert!(held.is_empty() && held.next_try.is_none());
    }

    #[test]
    fn a_revoked_partitions_held_records_are_dropped_never_stored() {
        let t: Arc<str> = Arc::from("scores");
        let mut held = Held::default();
        held.hold(vec![dead(&t, 0, 7), dead(&t, 1, 3)], Duration::from_secs(1));
        held.keep_assigned(|_, p| p == 1);
        assert_eq!(held.offset_to_store("scores", 0, 100), 100);
        assert_eq!(held.offset_to_store("scores", 1, 100), 3);
        held.keep_assigned(|_, _| false);
        assert!(held.is_empty() && held.next_try.is_none());
    }

    #[test]
    fn a_dead_letter_carries_every_reason_and_its_source_position() {
        use rdkafka::message::Headers;
        let t: Arc<str> = Arc::from("scores");
        let record = Record { topic: t, partition: 2, offset: 41, timestamp: None, source: None };
        let reasons = [
            Rejection::new(Reason::RateLimited, "board points: rate_limited"),
            Rejection::new(Reason::RateLimited, "board best: rate_limited"),
            Rejection::new(Reason::MissingSplit, "board laps: missing_split"),
        ];
        let d = DeadRecord::new(record, &reasons);
        let headers: Vec<(String, String)> = d
            .headers
            .iter()
            .map(|h| (h.key.to_string(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned()))
            .collect();
        let get = |k: &str| headers.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("rankflow.reason"), Some("rate_limited,missing_split"));
        assert_eq!(get("rankflow.source.partition"), Some("2"));
        assert_eq!(get("rankflow.source.offset"), Some("41"));
        assert_eq!(d.reason, Reason::RateLimited);
    }
}
