//! Scoring events: parsing and validating one Kafka record value against
//! the event rules (the README's Events section), and the reasons a record
//! or a board refuses it.
//!
//! Parsing is pure and allocation-light: unknown fields are skipped without
//! being built, and every rule failure becomes a [`Reason`] with a detail
//! message, so the dead-letter topic says exactly what was wrong. The type is
//! read first: an event whose type no board listens to is skipped (not
//! validated further), because a shared topic may carry other services'
//! events with other schemas.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::score::MAX_EXACT;

mod avro_fields;
pub mod cloudevents;
mod decode;
mod event_message;
#[cfg(test)]
mod fast_avro_tests;
pub mod fields;
mod moderation;
mod reason;
pub mod rule;
pub mod schema;
mod scores;
pub mod team;
pub mod wire;

pub use decode::{decode, Format, Found, Lookup, NotFetched};
use moderation::parse_admin;
pub use moderation::{AdminEvent, AdminKind};
pub use reason::Reason;
pub use rule::Rule;
pub use scores::Scores;
pub use team::Membership;

/// A rejection: the reason and a sentence for humans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: Reason,
    pub detail: String,
}

impl Rejection {
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Rejection { reason, detail: detail.into() }
    }
}

/// A valid event.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub event_id: Uuid,
    pub kind: String,
    pub player_id: String,
    /// An integer with |score| <= 2^53 - 1 (see `score`); `None` when the
    /// record has only `scores` (a board of one score refuses it).
    pub score: Option<i64>,
    /// Boards ranked by several columns: each column's value.
    pub scores: Option<Scores>,
    /// Event time, epoch milliseconds.
    pub ts_ms: i64,
    pub attrs: BTreeMap<String, String>,
    /// The event's `meta` object as compact JSON (at most
    /// [`Limits::max_meta_bytes`]), kept beside the score it explains on
    /// boards with `meta = true`.
    pub meta: Option<String>,
    /// A membership event (`team_joined`, `team_left`): its team; `None`
    /// for a score.
    pub team: Option<Membership>,
}

/// The size limits [`parse`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest record value (`too_large` beyond it).
    pub max_event_bytes: usize,
    /// Largest `meta` object, as compact JSON (`invalid_meta` beyond it).
    pub max_meta_bytes: usize,
}

impl Default for Limits {
    /// The config's defaults: 64 KiB values, 512-byte meta.
    fn default() -> Self {
        Limits { max_event_bytes: 64 * 1024, max_meta_bytes: 512 }
    }
}

/// What parsing made of a record value.
#[derive(Debug)]
pub enum Parsed {
    Event(Event),
    /// An admin event (a correction or moderation), honoured only on an admin topic.
    Admin(AdminEvent),
    /// No board listens to this type; carries the type for the metric.
    Skipped(String),
    Rejected(Rejection),
}

/// What a record's envelope (a CloudEvent's attributes) gives the fields
/// its data leaves out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Envelope {
    pub event_id: Option<Value>,
    pub kind: Option<Value>,
    pub ts: Option<Value>,
}

/// A record's fields before validation, as decoded (JSON), or as mapped
/// from a decoded record ([`fields::FieldMap`]).
#[derive(Default, Deserialize)]
struct RawEvent {
    event_id: Option<Value>,
    #[serde(rename = "type")]
    kind: Option<Value>,
    player_id: Option<Value>,
    score: Option<Value>,
    scores: Option<Value>,
    ts: Option<Value>,
    attrs: Option<Value>,
    meta: Option<Value>,
    // Admin events' own fields (see `moderation`).
    board: Option<Value>,
    boards: Option<Value>,
    delta: Option<Value>,
    split: Option<Value>,
    period: Option<Value>,
    tier: Option<Value>,
    held_event_id: Option<Value>,
    reason: Option<Value>,
    // Membership events' (see `team`).
    team_id: Option<Value>,
}

/// Parses and validates one record value. `listens` says whether any board
/// takes an event type.
pub fn parse(value: &[u8], limits: Limits, listens: impl Fn(&str) -> bool) -> Parsed {
    match parse_inner(value, limits, listens) {
        Ok(p) => p,
        Err(r) => Parsed::Rejected(r),
    }
}

fn parse_inner(value: &[u8], limits: Limits, listens: impl Fn(&str) -> bool) -> Result<Parsed, Rejection> {
    use Reason::*;
    let max_bytes = limits.max_event_bytes;
    if value.len() > max_bytes {
        return Err(Rejection::new(TooLarge, format!("value is {} bytes, the limit is {max_bytes}", value.len())));
    }
    let raw: RawEvent = serde_json::from_slice(value)
        .map_err(|e| Rejection::new(InvalidJson, format!("value is not a JSON object: {e}")))?;
    validate(raw, limits, listens)
}

/// Validates a record decoded from another format (Avro, Protobuf, a
/// CloudEvent's data) as a JSON value, its fields found by `fields`. Only
/// scoring events: admin events come in JSON on admin topics.
pub fn parse_record(
    record: impl fields::Record,
    fields: &fields::FieldMap,
    envelope: Envelope,
    limits: Limits,
    listens: impl Fn(&str) -> bool,
) -> Parsed {
    let mut raw = fields.raw(record);
    raw.event_id = raw.event_id.or(envelope.event_id);
    raw.kind = raw.kind.or(envelope.kind);
    raw.ts = raw.ts.or(envelope.ts);
    if let Some(Value::String(kind)) = &raw.kind {
        if AdminKind::parse(kind).is_some() {
            let detail = format!("admin events ('{kind}') come in JSON on an admin topic");
            return Parsed::Rejected(Rejection::new(Reason::NotAllowed, detail));
        }
    }
    match validate(raw, limits, listens) {
        Ok(p) => p,
        Err(r) => Parsed::Rejected(r),
    }
}

/// The event rules, on a record's fields.
fn validate(mut raw: RawEvent, limits: Limits, listens: impl Fn(&str) -> bool) -> Result<Parsed, Rejection> {
    use Reason::*;
    let kind = match raw.kind.take() {
        None | Some(Value::Null) => return Err(Rejection::new(MissingField, "field 'type' is missing")),
        Some(Value::String(s)) if !s.is_empty() => s,
        Some(_) => return Err(Rejection::new(InvalidType, "field 'type' must be a non-empty string")),
    };
    let admin = AdminKind::parse(&kind);
    if !listens(&kind) && admin.is_none() {
        return Ok(Parsed::Skipped(kind));
    }
    let event_id = match raw.event_id.take() {
        None | Some(Value::Null) => return Err(Rejection::new(MissingField, "field 'event_id' is missing")),
        Some(Value::String(s)) => {
            Uuid::parse_str(&s).map_err(|_| Rejection::new(InvalidEventId, "field 'event_id' is not a UUID"))?
        }
        Some(_) => return Err(Rejection::new(InvalidEventId, "field 'event_id' must be a string")),
    };
    let player_id = match raw.player_id.take() {
        // A team's admin events name no player.
        None | Some(Value::Null) if admin.is_some_and(AdminKind::of_team) => String::new(),
        None | Some(Value::Null) => return Err(Rejection::new(MissingField, "field 'player_id' is missing")),
        Some(Value::String(s)) => {
            if s.is_empty() || s.len() > 128 {
                return Err(Rejection::new(
                    InvalidPlayerId,
                    format!("field 'player_id' must be 1 to 128 bytes, it is {}", s.len()),
                ));
            }
            if s.chars().any(char::is_control) {
                return Err(Rejection::new(InvalidPlayerId, "field 'player_id' contains a control character"));
            }
            s
        }
        Some(_) => return Err(Rejection::new(InvalidPlayerId, "field 'player_id' must be a string")),
    };
    if let Some(kind) = admin {
        return parse_admin(kind, event_id, player_id, raw).map(Parsed::Admin);
    }
    if let Some(joined) = team::joined(&kind) {
        let (team, ts_ms) = (team::parse(joined, raw.team_id)?, parse_ts(raw.ts)?);
        let (attrs, meta) = (BTreeMap::new(), None);
        return Ok(Parsed::Event(Event {
            event_id,
            kind,
            player_id,
            score: None,
            scores: None,
            ts_ms,
            attrs,
            meta,
            team: Some(team),
        }));
    }
    let scores = scores::parse(raw.scores)?;
    let score = match raw.score {
        None | Some(Value::Null) if scores.is_some() => None,
        v => Some(required_number(v, "score", InvalidScore)?),
    };
    let ts_ms = parse_ts(raw.ts)?;
    let attrs = match raw.attrs {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(map)) => {
            let mut attrs = BTreeMap::new();
            for (k, v) in map {
                match v {
                    Value::String(s) => {
                        attrs.insert(k, s);
                    }
                    _ => return Err(Rejection::new(InvalidAttrs, format!("attrs.{k} must be a string"))),
                }
            }
            attrs
        }
        Some(_) => return Err(Rejection::new(InvalidAttrs, "field 'attrs' must be an object of strings")),
    };
    let meta = match raw.meta {
        // An empty object explains nothing (an Avro or Protobuf map left empty).
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) if m.is_empty() => None,
        Some(v) => Some(parse_meta(v, limits.max_meta_bytes)?),
    };
    Ok(Parsed::Event(Event { event_id, kind, player_id, score, scores, ts_ms, attrs, meta, team: None }))
}

/// `meta`: an object of string to string, at most `max` bytes as compact JSON.
fn parse_meta(v: Value, max: usize) -> Result<String, Rejection> {
    let Value::Object(map) = v else {
        return Err(Rejection::new(Reason::InvalidMeta, "field 'meta' must be an object of strings"));
    };
    if let Some((k, _)) = map.iter().find(|(_, v)| !v.is_string()) {
        return Err(Rejection::new(Reason::InvalidMeta, format!("meta.{k} must be a string")));
    }
    let compact = Value::Object(map).to_string();
    if compact.len() > max {
        return Err(Rejection::new(
            Reason::InvalidMeta,
            format!("field 'meta' is {} bytes as compact JSON, the limit is {max}", compact.len()),
        ));
    }
    Ok(compact)
}

/// The integer in `field` (see [`parse_score`]); `wrong` if it is not a number.
fn required_number(v: Option<Value>, field: &str, wrong: Reason) -> Result<i64, Rejection> {
    match v {
        None | Some(Value::Null) => Err(Rejection::new(Reason::MissingField, format!("field '{field}' is missing"))),
        Some(Value::Number(n)) => parse_score(&n),
        Some(_) => Err(Rejection::new(wrong, format!("field '{field}' must be a number"))),
    }
}

/// `ts`: RFC 3339 with an offset, or integer epoch milliseconds.
fn parse_ts(v: Option<Value>) -> Result<i64, Rejection> {
    use Reason::*;
    match v {
        None | Some(Value::Null) => Err(Rejection::new(MissingField, "field 'ts' is missing")),
        Some(Value::String(s)) => chrono::DateTime::parse_from_rfc3339(&s)
            .map(|t| t.timestamp_millis())
            .map_err(|_| Rejection::new(InvalidTs, "field 'ts' is not an RFC 3339 time with offset")),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(ms) if (0..=253_402_300_799_999).contains(&ms) => Ok(ms),
            _ => {
                Err(Rejection::new(InvalidTs, "field 'ts' must be integer epoch milliseconds between 0 and year 9999"))
            }
        },
        Some(_) => Err(Rejection::new(InvalidTs, "field 'ts' must be a string or an integer")),
    }
}

/// Scores are integers: a decimal fraction cannot be stored exactly in a
/// double, and sums of them drift. `100` and `100.0` are the same score.
fn parse_score(n: &serde_json::Number) -> Result<i64, Rejection> {
    let out_of_range = || Rejection::new(Reason::ScoreOutOfRange, format!("score {n} is outside ±(2^53 - 1)"));
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_EXACT as u64 {
            return Err(out_of_range());
        }
        return Ok(i);
    }
    if n.is_u64() {
        return Err(out_of_range());
    }
    let f = n.as_f64().ok_or_else(|| Rejection::new(Reason::InvalidScore, "score is not a finite number"))?;
    if !f.is_finite() {
        return Err(Rejection::new(Reason::InvalidScore, "score is not a finite number"));
    }
    if f.fract() != 0.0 {
        return Err(Rejection::new(Reason::InvalidScore, format!("score {n} is not an integer")));
    }
    if f.abs() > MAX_EXACT as f64 {
        return Err(out_of_range());
    }
    Ok(f as i64)
}

/// A split value: 1 to 64 of `[A-Za-z0-9_-]` (it becomes part of a key).
pub fn valid_split_value(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(json: &str) -> Parsed {
        parse(json.as_bytes(), Limits::default(), |t| t == "match_finished")
    }

    fn reason(json: &str) -> Reason {
        match p(json) {
            Parsed::Rejected(r) => r.reason,
            other => panic!("expected a rejection for {json}, got {other:?}"),
        }
    }

    const OK: &str = r#"{"event_id":"0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11","type":"match_finished","player_id":"alice","score":90,"ts":"2026-08-14T13:00:00+02:00","attrs":{"region":"eu"},"extra":[1,2,{"x":null}]}"#;

    #[test]
    fn a_valid_event_parses_with_unknown_fields_ignored() {
        let Parsed::Event(e) = p(OK) else { panic!() };
        assert_eq!(e.player_id, "alice");
        assert_eq!(e.score, Some(90));
        assert_eq!(e.ts_ms, chrono::DateTime::parse_from_rfc3339("2026-08-14T11:00:00Z").unwrap().timestamp_millis());
        assert_eq!(e.attrs["region"], "eu");
    }

    #[test]
    fn epoch_millisecond_timestamps_and_integral_floats_are_accepted() {
        let Parsed::Event(e) =
            p(&OK.replace(r#""2026-08-14T13:00:00+02:00""#, "1786100400000").replace(":90,", ":-90.0,"))
        else {
            panic!()
        };
        assert_eq!(e.ts_ms, 1_786_100_400_000);
        assert_eq!(e.score, Some(-90));
    }

    #[test]
    fn unknown_types_are_skipped_before_validation() {
        assert!(matches!(p(r#"{"type":"chat","score":"x"}"#), Parsed::Skipped(t) if t == "chat"));
    }

    #[test]
    fn every_rule_has_its_reason() {
        use Reason::*;
        assert_eq!(reason("not json"), InvalidJson);
        assert_eq!(reason("[1,2]"), InvalidJson);
        assert_eq!(reason(&OK.replace(r#""type":"match_finished","#, "")), MissingField);
        assert_eq!(reason(&OK.replace(r#""type":"match_finished""#, r#""type":7"#)), InvalidType);
        assert_eq!(reason(&OK.replace("0b8e3f5e-4c39", "zzzz")), InvalidEventId);
        assert_eq!(reason(&OK.replace(r#""player_id":"alice","#, "")), MissingField);
        assert_eq!(reason(&OK.replace(r#""alice""#, r#""""#)), InvalidPlayerId);
        assert_eq!(reason(&OK.replace(r#""alice""#, &format!("\"{}\"", "a".repeat(129)))), InvalidPlayerId);
        assert_eq!(reason(&OK.replace(r#""alice""#, r#""al\nice""#)), InvalidPlayerId);
        assert_eq!(reason(&OK.replace(":90,", ":\"90\",")), InvalidScore);
        assert_eq!(reason(&OK.replace(":90,", ":90.5,")), InvalidScore);
        assert_eq!(reason(&OK.replace(":90,", ":9007199254740992,")), ScoreOutOfRange);
        assert_eq!(reason(&OK.replace(":90,", ":1e300,")), ScoreOutOfRange);
        assert_eq!(reason(&OK.replace("+02:00", "")), InvalidTs);
        assert_eq!(reason(&OK.replace(r#""2026-08-14T13:00:00+02:00""#, "1.5")), InvalidTs);
        assert_eq!(reason(&OK.replace(r#"{"region":"eu"}"#, r#"{"region":1}"#)), InvalidAttrs);
        let tiny = Limits { max_event_bytes: 10, ..Limits::default() };
        assert_eq!(parse(OK.as_bytes(), tiny, |_| true).rejection().unwrap().reason, TooLarge);
        let with_meta = |meta: &str| OK.replace(r#""extra""#, &format!(r#""meta":{meta},"extra""#));
        assert_eq!(reason(&with_meta(r#"{"name":7}"#)), InvalidMeta);
        assert_eq!(reason(&with_meta(r#""Alice""#)), InvalidMeta);
        assert_eq!(reason(&with_meta(r#"["a"]"#)), InvalidMeta);
        assert_eq!(reason(&with_meta(&format!(r#"{{"name":"{}"}}"#, "x".repeat(600)))), InvalidMeta);
    }

    #[test]
    fn an_erasure_needs_only_its_id_and_player() {
        let json = r#"{"event_id":"0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11","type":"player_erased","player_id":"alice"}"#;
        assert!(matches!(
            parse(json.as_bytes(), Limits::default(), |_| false),
            Parsed::Admin(AdminEvent { kind: AdminKind::PlayerErased, player_id, .. }) if player_id == "alice"
        ));
        assert_eq!(
            reason(r#"{"event_id":"0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11","type":"player_erased"}"#),
            Reason::MissingField
        );
    }

    #[test]
    fn meta_is_kept_as_compact_json_up_to_its_limit() {
        let Parsed::Event(e) = p(OK) else { panic!() };
        assert_eq!(e.meta, None);
        let json = OK.replace(r#""extra""#, r#""meta": { "name" : "Alice", "team": "red" },"extra""#);
        let Parsed::Event(e) = p(&json) else { panic!() };
        assert_eq!(e.meta.as_deref(), Some(r#"{"name":"Alice","team":"red"}"#));
        // Exactly at the limit passes; one byte over does not.
        let fits = OK.replace(r#""extra""#, &format!(r#""meta":{{"n":"{}"}},"extra""#, "x".repeat(504)));
        assert!(matches!(p(&fits), Parsed::Event(e) if e.meta.as_ref().unwrap().len() == 512));
        let over = fits.replace("xxxx", "xxxxx");
        assert_eq!(reason(&over), Reason::InvalidMeta);
        assert!(matches!(p(&OK.replace(r#""extra""#, r#""meta":null,"extra""#)), Parsed::Event(e) if e.meta.is_none()));
    }

    #[test]
    fn the_exact_range_ends_at_two_to_the_53_minus_one() {
        let Parsed::Event(e) = p(&OK.replace(":90,", ":-9007199254740991,")) else { panic!() };
        assert_eq!(e.score, Some(-9_007_199_254_740_991));
    }

    #[test]
    fn split_values_are_key_safe() {
        assert!(valid_split_value("eu-west_1"));
        assert!(!valid_split_value(""));
        assert!(!valid_split_value("eu:west"));
        assert!(!valid_split_value(&"a".repeat(65)));
    }

    impl Parsed {
        fn rejection(self) -> Option<Rejection> {
            match self {
                Parsed::Rejected(r) => Some(r),
                _ => None,
            }
        }
    }
}
