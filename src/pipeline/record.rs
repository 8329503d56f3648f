//! One consumed record, one value from the moment it is read to the moment
//! its offset is stored: where it was read, its bytes for a dead letter, and
//! what became of it (what it decoded to, what each board decided, what
//! Redis answered and which moves it made). A broker message is copied out
//! the moment it is read, so nothing the pipeline holds borrows the
//! consumer: the [`Origin`] always, and key, payload and headers only for a
//! record that may yet be dead-lettered.

use std::sync::Arc;

use rdkafka::message::{BorrowedMessage, Headers, OwnedHeaders};
use rdkafka::Message;

use crate::board::{Decision, Router};
use crate::config::Settings;
use crate::event::{self, AdminEvent, Event, Format, NotFetched, Parsed, Reason, Rejection};
use crate::kafka::transaction::OUTPUT_ID;
use crate::metrics;
use crate::moderation::{self, AdminPlan};
use crate::schemas::Schemas;
use crate::store::{ApplyResult, RankMove};

/// Where a record was read, and its timestamp.
#[derive(Clone, Debug)]
pub struct Origin {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp, epoch ms.
    pub timestamp: Option<i64>,
}

/// One consumed record, owned, and what became of it.
pub struct Record {
    pub origin: Origin,
    /// Key, value and headers, for the dead-letter topic; `None` for a
    /// record that cannot be dead-lettered (an event type no board takes),
    /// and once its dead letter has taken them.
    pub source: Option<Box<Source>>,
    pub item: Item,
}

impl Record {
    /// Whether the record is sent to Redis in a batch of its own.
    pub fn is_alone(&self) -> bool {
        matches!(self.item, Item::Admin { .. })
    }

    /// The record time decisions use: the record's timestamp, or the event
    /// time for a record without one.
    pub fn decided_at(&self, event: &Event) -> i64 {
        self.origin.timestamp.unwrap_or(event.ts_ms)
    }
}

/// The parts of a record a dead letter copies.
pub struct Source {
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: Option<OwnedHeaders>,
}

/// What parsing made of a record, and, for an event, what the boards
/// decided and Redis answered.
pub enum Item {
    /// An event type no board takes: final at once, nothing to write.
    Skipped,
    /// An admin event from an admin topic, checked against the boards:
    /// always alone in its batch.
    Admin { event: AdminEvent, plan: AdminPlan },
    /// Rejected before any board saw it.
    Rejected(Rejection),
    Event {
        event: Event,
        /// One per board that takes the event, in the router's order.
        decided: Vec<Decided>,
        /// Filled from Redis on boards with `notify_top`: the moves the
        /// event made, each with the index of its board's entry in `decided`.
        moves: Vec<(usize, RankMove)>,
    },
}

/// What one board made of an event: its decision (a write, or a refusal
/// before Redis) and, once the write has landed, Redis's answer.
pub struct Decided {
    /// The board's index in the router.
    pub board: usize,
    pub decision: Decision,
    pub result: Option<ApplyResult>,
}

/// Topic names seen by the consumer, shared by every record of the topic
/// (a handful of topics, so a list).
#[derive(Default)]
pub struct TopicNames(Vec<Arc<str>>);

impl TopicNames {
    fn get(&mut self, topic: &str) -> Arc<str> {
        if let Some(t) = self.0.iter().find(|t| &***t == topic) {
            return t.clone();
        }
        let t: Arc<str> = Arc::from(topic);
        self.0.push(t.clone());
        t
    }
}

/// Copies a message out of the consumer and parses it; `Err` when its
/// frame names a schema not fetched yet (fetch it and take it again).
pub fn take(
    settings: &Settings,
    router: &Router,
    schemas: &Schemas,
    topics: &mut TopicNames,
    msg: &BorrowedMessage<'_>,
) -> Result<Record, NotFetched> {
    let item = parse(settings, router, schemas, msg)?;
    let source = (!matches!(item, Item::Skipped)).then(|| {
        Box::new(Source {
            key: msg.key().map(<[u8]>::to_vec),
            payload: msg.payload().map(<[u8]>::to_vec),
            headers: msg.headers().map(|h| h.detach()),
        })
    });
    let origin = Origin {
        topic: topics.get(msg.topic()),
        partition: msg.partition(),
        offset: msg.offset(),
        timestamp: msg.timestamp().to_millis(),
    };
    Ok(Record { origin, source, item })
}

/// The record's value parsed by its topic's format.
fn decode(
    settings: &Settings,
    router: &Router,
    schemas: &Schemas,
    msg: &BorrowedMessage<'_>,
    payload: &[u8],
) -> Result<Parsed, NotFetched> {
    let format = settings.kafka.format(msg.topic());
    // Only a CloudEvent is read from its headers.
    let headers: Vec<(&str, &[u8])> = match (format, msg.headers()) {
        (Format::CloudEvents, Some(h)) => h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect(),
        _ => Vec::new(),
    };
    let (lookup, fields, limits) = (|id| schemas.find(id), settings.kafka.fields(msg.topic()), settings.events.limits);
    event::decode(format, payload, &headers, &lookup, fields, limits, |t| router.listens(t))
}

fn parse(
    settings: &Settings,
    router: &Router,
    schemas: &Schemas,
    msg: &BorrowedMessage<'_>,
) -> Result<Item, NotFetched> {
    let parsed = decode(settings, router, schemas, msg, msg.payload().unwrap_or_default())?;
    Ok(item(settings, router, msg, parsed))
}

/// What the pipeline does with a parsed record.
fn item(settings: &Settings, router: &Router, msg: &BorrowedMessage<'_>, parsed: Parsed) -> Item {
    let m = metrics::get();
    let reject = |r: Rejection| {
        m.events_rejected.with_label_values(&["none", r.reason.as_str()]).inc();
        Item::Rejected(r)
    };
    // Admin events are honoured only on an admin topic, and an admin topic
    // carries nothing else: game servers that can write scores cannot
    // correct or erase anyone.
    let admin_topic = settings.kafka.admin_topics.iter().any(|t| t == msg.topic());
    let event = match parsed {
        Parsed::Skipped(kind) if admin_topic => {
            return reject(Rejection::new(
                Reason::NotAllowed,
                format!("'{kind}' is not an admin event type, and {} carries admin events only", msg.topic()),
            ))
        }
        Parsed::Skipped(_) => {
            m.events_skipped.inc();
            return Item::Skipped;
        }
        Parsed::Rejected(r) => return reject(r),
        Parsed::Admin(a) if !admin_topic => {
            m.admin_events.with_label_values(&[a.kind.as_str(), "rejected"]).inc();
            return reject(Rejection::new(
                Reason::NotAllowed,
                format!("{} is an admin event, honoured only on kafka.admin_topics, not on {}", a.kind, msg.topic()),
            ));
        }
        Parsed::Admin(event) => {
            let record_ts = msg.timestamp().to_millis().unwrap_or(event.ts_ms);
            return match moderation::plan(&event, router, record_ts) {
                Ok(plan) => Item::Admin { event, plan },
                Err(r) => {
                    m.admin_events.with_label_values(&[event.kind.as_str(), "rejected"]).inc();
                    reject(r)
                }
            };
        }
        Parsed::Event(_) if admin_topic => {
            return reject(Rejection::new(
                Reason::NotAllowed,
                format!("{} carries admin events only; score events belong on kafka.topics", msg.topic()),
            ))
        }
        Parsed::Event(e) => e,
    };
    // Decisions use the record's timestamp, so a replay decides alike;
    // a record without one falls back to the event time.
    let record_ts = msg.timestamp().to_millis().unwrap_or(event.ts_ms);
    let skew = settings.events.max_future_skew.as_millis() as i64;
    if event.ts_ms > record_ts.saturating_add(skew) {
        let r = Rejection::new(
            Reason::FutureTimestamp,
            format!("event time is {} ms after the record timestamp (limit {skew} ms)", event.ts_ms - record_ts),
        );
        return reject(r);
    }
    let decided =
        router.plan(&event, record_ts).into_iter().map(|(board, decision)| Decided { board, decision, result: None });
    Item::Event { event, decided: decided.collect(), moves: Vec::new() }
}

/// The headers of a record's dead letter: the record's own, then rankflow's
/// reason, detail and source position.
/// A dead letter's headers: the source record's own, its reasons, its
/// source position, and its output id (`dead-letter/<topic>/<partition>/<offset>`).
pub fn dead_letter_headers(origin: &Origin, source: Option<&Source>, reason: &str, detail: &str) -> OwnedHeaders {
    use rdkafka::message::Header;
    let mut headers = OwnedHeaders::new();
    if let Some(own) = source.and_then(|s| s.headers.as_ref()) {
        // A source record's own output id would name another output.
        for h in own.iter().filter(|h| h.key != OUTPUT_ID) {
            headers = headers.insert(Header { key: h.key, value: h.value });
        }
    }
    let (partition, offset) = (origin.partition.to_string(), origin.offset.to_string());
    let id = format!("dead-letter/{}/{partition}/{offset}", origin.topic);
    headers
        .insert(Header { key: OUTPUT_ID, value: Some(id.as_str()) })
        .insert(Header { key: "rankflow.reason", value: Some(reason) })
        .insert(Header { key: "rankflow.detail", value: Some(detail) })
        .insert(Header { key: "rankflow.source.topic", value: Some(&*origin.topic) })
        .insert(Header { key: "rankflow.source.partition", value: Some(partition.as_str()) })
        .insert(Header { key: "rankflow.source.offset", value: Some(offset.as_str()) })
}
