//! What rankflow produces for a source record: its dead letter (a record no
//! board applied, with its reasons), its rank changes (`notify_top`), the
//! event held for review (`kafka.review_topic`) and the `player_hidden` a
//! board's `hold_hides_after` sends to the admin topic; and the partitions
//! that wait while their topic fails.
//!
//! A partition whose produced records the broker has not acknowledged is
//! held: its stored offset stopped at its first held record (and paused
//! while a produce failed), while every other partition goes on. [`Held`]
//! is that bookkeeping, pure; the pipeline pauses, resumes and stores what
//! it says.

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

use super::record::{dead_letter_headers, Origin, Source};

/// A record on its way to a topic for a source record: an owned copy, so
/// that it can wait for the topic while its source partition is paused.
pub struct Outgoing {
    /// The source record's position.
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    /// Where it goes.
    to: Arc<str>,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
    timestamp: Option<i64>,
    headers: OwnedHeaders,
    /// What it is, for the metric.
    kind: Kind,
    /// The delivery of the copy already handed to the producer, if any.
    inflight: Option<Delivery>,
}

/// What an outgoing record is.
enum Kind {
    /// A dead letter, with its first reason.
    DeadLetter(Reason),
    /// A rank change on this board.
    Change(Arc<str>),
    /// A held event of this board, for review.
    Review(Arc<str>),
    /// A `player_hidden` of this board's `hold_hides_after`, for the admin topic.
    Hide,
}

impl Outgoing {
    /// The dead letter of the record read at `origin`, whose key, value
    /// and headers were `source`, for `to`, the dead-letter topic.
    pub fn dead_letter(origin: Origin, source: Option<Box<Source>>, reasons: &[Rejection], to: Arc<str>) -> Outgoing {
        let mut reason_list: Vec<&str> = reasons.iter().map(|r| r.reason.as_str()).collect();
        reason_list.dedup();
        let reason = reason_list.join(",");
        let detail = reasons.iter().map(|r| r.detail.as_str()).collect::<Vec<_>>().join("; ");
        let headers = dead_letter_headers(&origin, source.as_deref(), &reason, &detail);
        let (key, payload) = match source {
            Some(s) => (s.key, s.payload),
            None => (None, None),
        };
        Outgoing {
            topic: origin.topic,
            partition: origin.partition,
            offset: origin.offset,
            to,
            key,
            payload,
            timestamp: origin.timestamp,
            headers,
            kind: Kind::DeadLetter(reasons.first().map_or(Reason::InvalidJson, |r| r.reason)),
            inflight: None,
        }
    }

    /// A rank change made by the source record at `source` on `board`, for
    /// `to`, the changes topic: its record's key, value and headers.
    pub fn change(
        source: &Origin,
        board: &str,
        to: Arc<str>,
        (key, value, headers): (String, Vec<u8>, OwnedHeaders),
    ) -> Outgoing {
        let mut out = Outgoing::review(source, board, to, (key, value, headers));
        out.kind = Kind::Change(Arc::from(board));
        out
    }

    /// A held event of the source record at `source` on `board`, for `to`,
    /// the review topic: its record's key, value and headers.
    pub fn review(
        source: &Origin,
        board: &str,
        to: Arc<str>,
        (key, value, headers): (String, Vec<u8>, OwnedHeaders),
    ) -> Outgoing {
        Outgoing {
            topic: source.topic.clone(),
            partition: source.partition,
            offset: source.offset,
            to,
            key: Some(key.into_bytes()),
            payload: Some(value),
            timestamp: None,
            headers,
            kind: Kind::Review(Arc::from(board)),
            inflight: None,
        }
    }

    /// A `player_hidden` admin event made by a hold at `source`, for `to`,
    /// the first admin topic.
    pub fn hide(source: &Origin, to: Arc<str>, record: (String, Vec<u8>, OwnedHeaders)) -> Outgoing {
        let mut out = Outgoing::review(source, "", to, record);
        out.kind = Kind::Hide;
        out
    }

    /// Hands it to `producer` (inside a transaction, if one is open).
    pub fn queue(&self, producer: &KafkaProducer) -> rdkafka::error::KafkaResult<Delivery> {
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.to).headers(self.headers.clone());
        if let Some(k) = &self.key {
            record = record.key(k.as_slice());
        }
        if let Some(p) = &self.payload {
            record = record.payload(p.as_slice());
        }
        if let Some(ts) = self.timestamp {
            record = record.timestamp(ts);
        }
        producer.send(record)
    }

    /// Hands it to `producer` inside the open transaction, keeping its
    /// delivery to tell, if the transaction fails, whether it was the cause.
    pub fn queue_in_transaction(&mut self, producer: &KafkaProducer) -> rdkafka::error::KafkaResult<()> {
        self.inflight = Some(self.queue(producer)?);
        Ok(())
    }

    /// After its transaction failed: whether it was not delivered (its
    /// delivery failed, or had not come when the commit gave up); then
    /// counted and logged, naming its topic.
    /// Only the first of a topic's is logged (`log`).
    pub fn failed_in_transaction(&mut self, log: bool) -> bool {
        use tokio::sync::oneshot::error::TryRecvError;
        let why = match self.inflight.as_mut().map(|d| d.try_recv()) {
            Some(Ok(Err(e))) => e.to_string(),
            Some(Err(TryRecvError::Empty)) => "not acknowledged when the commit gave up".to_string(),
            _ => return false,
        };
        let m = metrics::get();
        match self.kind {
            Kind::DeadLetter(_) => m.dead_letter_errors.inc(),
            Kind::Change(_) => m.rank_change_errors.inc(),
            Kind::Review(_) | Kind::Hide => m.review.record_errors.inc(),
        }
        if log {
            warn!(error = why, topic = %self.to, source_partition = self.partition, source_offset = self.offset,
                "Could not produce to the {}; the transaction is aborted and its records read again.", self.what());
        }
        true
    }

    /// Counts it in its kind's metric, once its topic has it.
    pub fn count_delivered(&self) {
        let m = metrics::get();
        match &self.kind {
            Kind::DeadLetter(reason) => m.dead_letters.with_label_values(&[reason.as_str()]).inc(),
            Kind::Change(board) => m.rank_changes.with_label_values(&[board]).inc(),
            Kind::Review(board) => m.review.records.with_label_values(&[board]).inc(),
            Kind::Hide => {}
        }
    }

    /// The topic it goes to, by name.
    pub fn destination(&self) -> &Arc<str> {
        &self.to
    }

    /// The topic it goes to.
    fn what(&self) -> &'static str {
        match self.kind {
            Kind::DeadLetter(_) => "dead-letter topic",
            Kind::Change(_) => "changes topic",
            Kind::Review(_) => "review topic",
            Kind::Hide => "admin topic",
        }
    }
}

/// Produces outgoing records (each at most once while its delivery is in
/// flight) and waits for their acknowledgements until `wait` has passed
/// (`None`: until each resolves). Returns those not acknowledged yet.
pub async fn send(producer: &KafkaProducer, mut records: Vec<Outgoing>, wait: Option<Duration>) -> Vec<Outgoing> {
    let m = metrics::get();
    for r in &mut records {
        if r.inflight.is_some() {
            continue;
        }
        match r.queue(producer) {
            Ok(f) => r.inflight = Some(f),
            Err(e) => warn!(error = %e, topic = %r.to, "Could not queue a record for the {}.", r.what()),
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
            Some(Ok(Ok(_))) => r.count_delivered(),
            Some(Ok(Err(e))) => {
                match r.kind {
                    Kind::DeadLetter(_) => m.dead_letter_errors.inc(),
                    Kind::Change(_) => m.rank_change_errors.inc(),
                    Kind::Review(_) | Kind::Hide => m.review.record_errors.inc(),
                }
                warn!(error = %e, topic = %r.topic, partition = r.partition, offset = r.offset,
                    "Could not produce to the {}; the record's partition waits.", r.what());
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

/// Outgoing records not yet acknowledged, per source partition. A
/// partition's stored offset stops at its first such record, so nothing
/// after it is committed before its topic has it; meanwhile the partition
/// goes on (its later records are applied, their offsets wait). Only a
/// partition whose records *failed* (not queued, or refused by the broker)
/// is paused, until they are acknowledged; every other partition goes on.
#[derive(Default)]
pub struct Held {
    partitions: BTreeMap<(Arc<str>, i32), HeldPartition>,
    /// When the records in flight are next looked at.
    poll_at: Option<Instant>,
    /// When failed records are sent again (with backoff).
    retry_at: Option<Instant>,
    backoff: Duration,
}

struct HeldPartition {
    records: Vec<Outgoing>,
    /// The highest offset of the partition processed so far.
    processed: i64,
    /// Paused because a dead letter of it failed.
    paused: bool,
}

/// What a check of the held records asks of the consumer.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// A dead letter of this partition failed: pause it.
    Pause(Arc<str>, i32),
    /// Every dead letter of this partition is acknowledged: store this
    /// offset (its last processed + 1), and resume it if it was paused.
    Release { topic: Arc<str>, partition: i32, next: i64, resume: bool },
}

/// How often dead letters in flight are checked for their acknowledgement.
const ACK_POLL: Duration = Duration::from_millis(10);

impl HeldPartition {
    fn failed(&self) -> bool {
        self.records.iter().any(|r| r.inflight.is_none())
    }
}

impl Held {
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// When the held records want looking at: soon while any is in flight,
    /// at the retry time while some only wait to be sent again.
    pub fn next_try(&self) -> Option<Instant> {
        if self.partitions.is_empty() {
            return None;
        }
        match (self.poll_at, self.retry_at) {
            (Some(p), Some(r)) => Some(p.min(r)),
            (p, r) => p.or(r),
        }
    }

    fn any_in_flight(&self) -> bool {
        self.partitions.values().any(|p| p.records.iter().any(|r| r.inflight.is_some()))
    }

    /// The offset to store for a partition whose batch is final at `next`
    /// (its last offset + 1): a held partition stops at its first held record.
    pub fn offset_to_store(&self, topic: &str, partition: i32, next: i64) -> i64 {
        let first_held = self
            .partitions
            .iter()
            .find(|((t, p), _)| *p == partition && &**t == topic)
            .and_then(|(_, h)| h.records.iter().map(|r| r.offset).min());
        first_held.map_or(next, |stop| stop.min(next))
    }

    /// Notes that a held partition has processed up to `last`: once its
    /// records are acknowledged, it stores `last + 1`.
    pub fn note_processed(&mut self, topic: &str, partition: i32, last: i64) {
        if let Some((_, h)) = self.partitions.iter_mut().find(|((t, p), _)| *p == partition && &**t == topic) {
            h.processed = h.processed.max(last);
        }
    }

    /// Holds records just handed to the producer (or that it refused).
    pub fn hold(&mut self, records: Vec<Outgoing>) {
        for r in records {
            let h = self.partitions.entry((r.topic.clone(), r.partition)).or_insert_with(|| HeldPartition {
                records: Vec::new(),
                processed: r.offset,
                paused: false,
            });
            h.processed = h.processed.max(r.offset);
            h.records.push(r);
        }
        if self.poll_at.is_none() && self.any_in_flight() {
            self.poll_at = Some(Instant::now() + ACK_POLL);
        }
        if self.retry_at.is_none() && self.partitions.values().any(HeldPartition::failed) {
            self.retry_at = Some(Instant::now());
        }
    }

    /// Drops the partitions `assigned` says are no longer ours: their held
    /// records are never stored, and their next owner reads them again.
    pub fn keep_assigned(&mut self, assigned: impl Fn(&str, i32) -> bool) {
        self.partitions.retain(|(t, p), _| assigned(t, *p));
    }

    /// The held records to look at now: those in flight (to see whether they
    /// were acknowledged), and the failed ones once their retry is due.
    /// [`Held::put_back`] takes back what is still not acknowledged.
    pub fn take_due(&mut self, now: Instant) -> Vec<Outgoing> {
        let resend = self.retry_at.is_none_or(|at| now >= at);
        let mut out = Vec::new();
        for h in self.partitions.values_mut() {
            let (due, keep): (Vec<_>, Vec<_>) = h.records.drain(..).partition(|r| resend || r.inflight.is_some());
            h.records = keep;
            out.extend(due);
        }
        out
    }

    /// After a look: `waiting` are the records still not acknowledged.
    /// Returns what the consumer must do: pause the partitions whose dead
    /// letters failed, store and resume those whose dead letters are all in.
    pub fn put_back(&mut self, waiting: Vec<Outgoing>, now: Instant, max_backoff: Duration) -> Vec<Step> {
        for r in waiting {
            if let Some(h) = self.partitions.get_mut(&(r.topic.clone(), r.partition)) {
                h.records.push(r);
            }
        }
        let mut changes = Vec::new();
        let mut any_failed = false;
        for ((topic, partition), h) in &mut self.partitions {
            if h.records.is_empty() {
                let (topic, partition) = (topic.clone(), *partition);
                changes.push(Step::Release { topic, partition, next: h.processed + 1, resume: h.paused });
            } else if h.failed() {
                any_failed = true;
                if !h.paused {
                    h.paused = true;
                    changes.push(Step::Pause(topic.clone(), *partition));
                }
            }
        }
        self.partitions.retain(|_, h| !h.records.is_empty());
        self.poll_at = self.any_in_flight().then(|| now + ACK_POLL);
        if !any_failed {
            self.retry_at = None;
            self.backoff = Duration::ZERO;
        } else if self.retry_at.is_none_or(|at| now >= at) {
            self.backoff =
                (self.backoff * 2).clamp(Duration::from_millis(500), max_backoff.max(Duration::from_millis(1)));
            self.retry_at = Some(now + self.backoff);
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dead(topic: &Arc<str>, partition: i32, offset: i64) -> Outgoing {
        let origin = Origin { topic: topic.clone(), partition, offset, timestamp: Some(1) };
        Outgoing::dead_letter(origin, None, &[Rejection::new(Reason::InvalidJson, "not JSON")], Arc::from("dlq"))
    }

    /// A record whose delivery is in flight; the sender settles it.
    fn in_flight(
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
    ) -> (Outgoing, tokio::sync::oneshot::Sender<rdkafka::error::KafkaResult<()>>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut r = dead(topic, partition, offset);
        r.inflight = Some(rx);
        (r, tx)
    }

    #[test]
    fn a_partition_with_dead_letters_in_flight_goes_on_but_stores_no_offset_past_the_first() {
        let t: Arc<str> = Arc::from("scores");
        let mut held = Held::default();
        let (a, _ack_a) = in_flight(&t, 0, 7);
        let (b, _ack_b) = in_flight(&t, 0, 9);
        held.hold(vec![a, b]);
        held.note_processed("scores", 0, 12);
        assert_eq!(held.offset_to_store("scores", 0, 13), 7);
        assert_eq!(held.offset_to_store("scores", 1, 40), 40);
        // Still in flight: nothing to pause or release, and a look soon.
        let now = Instant::now();
        let looked = held.take_due(now);
        assert_eq!(looked.len(), 2);
        assert!(held.put_back(looked, now, Duration::from_secs(10)).is_empty());
        assert_eq!(held.next_try(), Some(now + ACK_POLL));
        // Acknowledged (send() drops acknowledged records): the partition stores past all it processed.
        held.take_due(now);
        let changes = held.put_back(Vec::new(), now, Duration::from_secs(10));
        assert_eq!(changes, [Step::Release { topic: t.clone(), partition: 0, next: 13, resume: false }]);
        assert!(held.is_empty() && held.next_try().is_none());
    }

    #[test]
    fn a_partition_whose_dead_letters_fail_is_paused_retried_with_backoff_and_resumed_once_they_land() {
        let t: Arc<str> = Arc::from("scores");
        let mut held = Held::default();
        let max = Duration::from_secs(10);
        held.hold(vec![dead(&t, 0, 7)]); // the producer refused it: no delivery in flight
        let (ok, _ack) = in_flight(&t, 1, 3);
        held.hold(vec![ok]);
        let now = Instant::now();
        let looked = held.take_due(now);
        assert_eq!(held.put_back(looked, now, max), [Step::Pause(t.clone(), 0)]);
        // Before the retry is due, the failed record is not sent again; the one in flight is looked at.
        let looked = held.take_due(now);
        assert_eq!(looked.iter().map(|r| r.offset).collect::<Vec<_>>(), [3]);
        assert!(held.put_back(looked, now, max).is_empty(), "paused once, not again");
        assert_eq!(held.offset_to_store("scores", 0, 100), 7);
        // Due (the first backoff is 500 ms): sent again, and this time acknowledged.
        let later = now + Duration::from_millis(501);
        let looked = held.take_due(later);
        assert_eq!(looked.len(), 2);
        let still: Vec<Outgoing> = looked.into_iter().filter(|r| r.partition == 1).collect();
        let changes = held.put_back(still, later, max);
        assert_eq!(changes, [Step::Release { topic: t.clone(), partition: 0, next: 8, resume: true }]);
    }

    #[test]
    fn a_revoked_partitions_held_records_are_dropped_never_stored() {
        let t: Arc<str> = Arc::from("scores");
        let mut held = Held::default();
        held.hold(vec![dead(&t, 0, 7), dead(&t, 1, 3)]);
        held.keep_assigned(|_, p| p == 1);
        assert_eq!(held.offset_to_store("scores", 0, 100), 100);
        assert_eq!(held.offset_to_store("scores", 1, 100), 3);
        held.keep_assigned(|_, _| false);
        assert!(held.is_empty() && held.next_try().is_none());
    }
    #[test]
    fn a_dead_letter_carries_every_reason_and_its_source_position() {
        use rdkafka::message::Headers;
        let t: Arc<str> = Arc::from("scores");
        let origin = Origin { topic: t, partition: 2, offset: 41, timestamp: None };
        let reasons = [
            Rejection::new(Reason::RateLimited, "board points: rate_limited"),
            Rejection::new(Reason::RateLimited, "board best: rate_limited"),
            Rejection::new(Reason::MissingSplit, "board laps: missing_split"),
        ];
        let d = Outgoing::dead_letter(origin, None, &reasons, Arc::from("dlq"));
        let headers: Vec<(String, String)> = d
            .headers
            .iter()
            .map(|h| (h.key.to_string(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned()))
            .collect();
        let get = |k: &str| headers.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("rankflow.reason"), Some("rate_limited,missing_split"));
        assert_eq!(get("rankflow.source.partition"), Some("2"));
        assert_eq!(get("rankflow.source.offset"), Some("41"));
        assert!(matches!(d.kind, Kind::DeadLetter(Reason::RateLimited)));
        assert_eq!(&*d.to, "dlq");
    }
}
