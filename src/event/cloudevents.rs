//! CloudEvents in Kafka records (the CloudEvents Kafka protocol binding),
//! in binary mode (the attributes in `ce_` headers, the data in the value)
//! and structured mode (`content-type: application/cloudevents+json`, the
//! whole event in the value). A CloudEvent's identity is its `source` and
//! `id`, so the event id rankflow dedupes on (when the data carries no
//! `event_id`) is the UUID v5, in the URL namespace, of `source + " " + id`:
//! two sources' ids never collide, a redelivery maps to the same id, and a
//! consumer can compute it too. `type` and `ts` default to the event's
//! `type` and `time`. Pure.

use std::borrow::Cow;

use base64::Engine;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::schema::Kind;
use super::{Envelope, Reason, Rejection};

/// The content type of a structured-mode event.
const STRUCTURED: &str = "application/cloudevents+json";

/// The event id of the CloudEvent `id` from `source`.
pub fn event_id(source: &str, id: &str) -> Uuid {
    let mut name = String::with_capacity(source.len() + 1 + id.len());
    name.push_str(source);
    name.push(' ');
    name.push_str(id);
    Uuid::new_v5(&Uuid::NAMESPACE_URL, name.as_bytes())
}

/// A CloudEvent's data: JSON, or an Avro or Protobuf record in the Schema
/// Registry wire format (by its content type), framed as on a plain Avro
/// or Protobuf topic.
#[derive(Debug, PartialEq)]
pub enum Data<'a> {
    Json(Value),
    Framed(Kind, Cow<'a, [u8]>),
}

/// A CloudEvent's data and what its attributes give the event, from a
/// record's value and headers.
pub fn decode<'a>(value: &'a [u8], headers: &[(&str, &[u8])]) -> Result<(Data<'a>, Envelope), Rejection> {
    let header = |name: &str| {
        headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| String::from_utf8_lossy(v))
    };
    let content_type = header("content-type").unwrap_or_default().to_ascii_lowercase();
    if content_type.starts_with(STRUCTURED) {
        let mut event: Map<String, Value> = serde_json::from_slice(value).map_err(|e| {
            Rejection::new(Reason::InvalidJson, format!("the structured CloudEvent is not a JSON object: {e}"))
        })?;
        let text = |event: &Map<String, Value>, name: &str| event.get(name).and_then(Value::as_str).map(str::to_string);
        let (id, source) = (text(&event, "id"), text(&event, "source"));
        let (kind, time) = (text(&event, "type"), text(&event, "time"));
        let media = text(&event, "datacontenttype").unwrap_or_default().to_ascii_lowercase();
        let data = match (event.remove("data"), event.remove("data_base64")) {
            (Some(data), _) => Data::Json(data),
            (None, Some(Value::String(b64))) => {
                let kind = framed_kind(&media).ok_or_else(|| unreadable(&media))?;
                let bytes = base64::engine::general_purpose::STANDARD.decode(b64.trim()).map_err(|e| {
                    Rejection::new(Reason::InvalidFrame, format!("the CloudEvent's data_base64 is not base64: {e}"))
                })?;
                Data::Framed(kind, Cow::Owned(bytes))
            }
            (None, Some(_)) => return Err(unreadable(&media)),
            (None, None) => Data::Json(Value::Object(Map::new())),
        };
        return finish(data, id, source, kind, time);
    }
    let data =
        if content_type.is_empty() || content_type.starts_with("application/json") || content_type.contains("+json") {
            Data::Json(
                serde_json::from_slice(value).map_err(|e| {
                    Rejection::new(Reason::InvalidJson, format!("the CloudEvent's data is not JSON: {e}"))
                })?,
            )
        } else {
            Data::Framed(framed_kind(&content_type).ok_or_else(|| unreadable(&content_type))?, Cow::Borrowed(value))
        };
    let attr = |name: &str| header(name).map(|v| v.into_owned());
    finish(data, attr("ce_id"), attr("ce_source"), attr("ce_type"), attr("ce_time"))
}

/// The format of framed data by its media type: `application/avro`,
/// `avro/binary`; `application/protobuf`, `application/x-protobuf`.
fn framed_kind(media: &str) -> Option<Kind> {
    if media.contains("avro") {
        Some(Kind::Avro)
    } else if media.contains("protobuf") {
        Some(Kind::Protobuf)
    } else {
        None
    }
}

fn unreadable(media: &str) -> Rejection {
    Rejection::new(
        Reason::InvalidJson,
        format!("the CloudEvent's data is '{media}': rankflow reads JSON, Avro and Protobuf data"),
    )
}

/// The data and the envelope its attributes make; `id` and `source` are required.
fn finish<'a>(
    data: Data<'a>,
    id: Option<String>,
    source: Option<String>,
    kind: Option<String>,
    time: Option<String>,
) -> Result<(Data<'a>, Envelope), Rejection> {
    let missing = |name: &str| Rejection::new(Reason::MissingField, format!("the CloudEvent has no '{name}'"));
    let id = id.filter(|v| !v.is_empty()).ok_or_else(|| missing("id"))?;
    let source = source.filter(|v| !v.is_empty()).ok_or_else(|| missing("source"))?;
    if matches!(&data, Data::Json(v) if !v.is_object()) {
        return Err(Rejection::new(Reason::InvalidJson, "the CloudEvent's data is not a JSON object"));
    }
    let envelope = Envelope {
        event_id: Some(Value::String(event_id(&source, &id).to_string())),
        kind: kind.map(Value::String),
        ts: time.map(Value::String),
    };
    Ok((data, envelope))
}

#[cfg(test)]
mod tests {
    use super::super::fields::FieldMap;
    use super::super::{parse_record, Limits, Parsed};
    use super::*;

    fn parsed(value: &str, headers: &[(&str, &str)]) -> Parsed {
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        match decode(value.as_bytes(), &headers) {
            Ok((Data::Framed(..), _)) => panic!("framed"),
            Ok((Data::Json(data), envelope)) => {
                parse_record(data, &FieldMap::default(), envelope, Limits::default(), |t| t == "match_finished")
            }
            Err(r) => Parsed::Rejected(r),
        }
    }

    const BINARY: [(&str, &str); 5] = [
        ("ce_specversion", "1.0"),
        ("ce_id", "42"),
        ("ce_source", "https://game.example/matches"),
        ("ce_type", "match_finished"),
        ("ce_time", "2026-08-14T13:00:00+02:00"),
    ];

    #[test]
    fn a_binary_event_takes_its_id_type_and_time_from_its_headers() {
        let Parsed::Event(e) = parsed(r#"{"player_id": "alice", "score": 90}"#, &BINARY) else { panic!() };
        assert_eq!(e.event_id, event_id("https://game.example/matches", "42"));
        assert_eq!((e.kind.as_str(), e.player_id.as_str(), e.score), ("match_finished", "alice", Some(90)));
        assert_eq!(e.ts_ms, chrono::DateTime::parse_from_rfc3339("2026-08-14T11:00:00Z").unwrap().timestamp_millis());
        // The data's own event_id wins.
        let own = r#"{"event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "player_id": "alice", "score": 90}"#;
        let Parsed::Event(e) = parsed(own, &BINARY) else { panic!() };
        assert_eq!(e.event_id.to_string(), "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11");
    }

    #[test]
    fn a_structured_event_is_read_from_the_value() {
        let value = r#"{"specversion": "1.0", "id": "42", "source": "https://game.example/matches",
            "type": "match_finished", "time": "2026-08-14T11:00:00Z", "datacontenttype": "application/json",
            "data": {"player_id": "bob", "score": 7}}"#;
        let Parsed::Event(e) = parsed(value, &[("content-type", "application/cloudevents+json; charset=utf-8")]) else {
            panic!()
        };
        assert_eq!(
            (e.event_id, e.player_id.as_str(), e.score),
            (event_id("https://game.example/matches", "42"), "bob", Some(7))
        );
        // A board with columns reads the data's scores.
        let columns = value.replace(r#""score": 7"#, r#""scores": {"wins": 1, "time_ms": 53000}"#);
        let Parsed::Event(e) = parsed(&columns, &[("content-type", "application/cloudevents+json")]) else { panic!() };
        let scores = e.scores.expect("scores");
        assert_eq!((e.score, scores.values(["wins", "time_ms"].into_iter())), (None, Ok(vec![1, 53000])));
    }

    #[test]
    fn a_cloudevent_without_id_or_source_or_with_data_it_cannot_read_is_refused() {
        let reason = |p: Parsed| match p {
            Parsed::Rejected(r) => (r.reason, r.detail),
            other => panic!("{other:?}"),
        };
        let no_id: Vec<(&str, &str)> = BINARY.iter().copied().filter(|(n, _)| *n != "ce_id").collect();
        assert_eq!(reason(parsed(r#"{"player_id": "a", "score": 1}"#, &no_id)).1, "the CloudEvent has no 'id'");
        let structured = [("content-type", "application/cloudevents+json")];
        let (r, detail) = reason(parsed(r#"{"id": "1", "type": "match_finished", "data": {}}"#, &structured));
        assert_eq!((r, detail.as_str()), (Reason::MissingField, "the CloudEvent has no 'source'"));
        let text: Vec<(&str, &str)> = BINARY.iter().copied().chain([("content-type", "text/plain")]).collect();
        assert_eq!(reason(parsed("hi", &text)).0, Reason::InvalidJson);
        assert_eq!(reason(parsed("[1]", &BINARY)).0, Reason::InvalidJson);
    }

    #[test]
    fn avro_and_protobuf_data_is_handed_on_framed() {
        let avro: Vec<(&str, &[u8])> = BINARY
            .iter()
            .map(|(n, v)| (*n, v.as_bytes()))
            .chain([("content-type", &b"application/avro"[..])])
            .collect();
        let (data, envelope) = decode(&[0, 0, 0, 0, 1, 2], &avro).unwrap();
        assert_eq!(data, Data::Framed(Kind::Avro, Cow::Borrowed(&[0, 0, 0, 0, 1, 2][..])));
        assert_eq!(envelope.kind, Some(Value::String("match_finished".into())));
        let structured =
            r#"{"id": "1", "source": "s", "datacontenttype": "application/x-protobuf", "data_base64": "AAAAAAcA"}"#;
        let (data, _) = decode(structured.as_bytes(), &[("content-type", b"application/cloudevents+json")]).unwrap();
        assert_eq!(data, Data::Framed(Kind::Protobuf, Cow::Owned(vec![0, 0, 0, 0, 7, 0])));
    }

    #[test]
    fn the_id_is_the_url_namespace_uuid_v5_of_source_space_id() {
        // Python: uuid.uuid5(uuid.NAMESPACE_URL, "https://game.example/matches 42")
        let want: Uuid = "bfa4e771-5c75-53dc-adf2-b53c67790e82".parse().unwrap();
        assert_eq!(event_id("https://game.example/matches", "42"), want);
        // Another source's id 42 is another event. (A source is a URI-reference,
        // which holds no space, so the space always ends it.)
        assert_ne!(event_id("https://game.example/laps", "42"), want);
        assert_ne!(event_id("https://game.example/matches", "43"), want);
    }
}
