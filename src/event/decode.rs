//! A record's value decoded by its topic's format (`kafka.formats`): JSON,
//! Avro or Protobuf in the Schema Registry wire format, or a CloudEvent
//! whose data is any of those. Pure: the schemas a frame names come from
//! a lookup the caller fills (`crate::schemas`), ahead of the call.

use std::sync::Arc;

use serde_json::Value;

use super::cloudevents::{self, Data};
use super::fields::{FieldMap, Record};
use super::schema::{Decoded, Kind, Schema};
use super::{parse, parse_record, wire, Envelope, Limits, Parsed, Reason, Rejection};

/// How a source topic's records are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// A JSON object per record (the default).
    #[default]
    Json,
    Avro,
    Protobuf,
    /// A CloudEvent per record, binary or structured mode.
    CloudEvents,
}

impl Format {
    pub const NAMES: [&'static str; 4] = ["json", "avro", "protobuf", "cloudevents"];

    pub fn parse(name: &str) -> Option<Format> {
        match name {
            "json" => Some(Format::Json),
            "avro" => Some(Format::Avro),
            "protobuf" => Some(Format::Protobuf),
            "cloudevents" => Some(Format::CloudEvents),
            _ => None,
        }
    }
}

/// What a lookup knows of a schema id.
pub enum Found {
    Schema(Arc<Schema>),
    /// There is none, and why (named in the dead letter).
    Unknown(String),
    /// Not fetched from the registry yet: fetch it, then decode again.
    NotFetched,
}

/// The schemas by id.
pub type Lookup<'a> = &'a dyn Fn(u32) -> Found;

/// A record whose frame names a schema the lookup has not fetched yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotFetched(pub u32);

/// Parses and validates one record value by its topic's format.
#[allow(clippy::too_many_arguments)]
pub fn decode(
    format: Format,
    value: &[u8],
    headers: &[(&str, &[u8])],
    schemas: Lookup<'_>,
    fields: &FieldMap,
    limits: Limits,
    listens: impl Fn(&str) -> bool,
) -> Result<Parsed, NotFetched> {
    if format == Format::Json {
        return Ok(parse(value, limits, listens));
    }
    if value.len() > limits.max_event_bytes {
        let detail = format!("value is {} bytes, the limit is {}", value.len(), limits.max_event_bytes);
        return Ok(Parsed::Rejected(Rejection::new(Reason::TooLarge, detail)));
    }
    let decoded = match format {
        Format::Json => unreachable!("JSON returned above"),
        Format::Avro => framed(Kind::Avro, value, schemas, fields).map(|v| (Body::Framed(v), Envelope::default())),
        Format::Protobuf => {
            framed(Kind::Protobuf, value, schemas, fields).map(|v| (Body::Framed(v), Envelope::default()))
        }
        Format::CloudEvents => match cloudevents::decode(value, headers) {
            Ok((Data::Json(v), envelope)) => Ok((Body::Json(v), envelope)),
            Ok((Data::Framed(kind, bytes), envelope)) => {
                framed(kind, &bytes, schemas, fields).map(|v| (Body::Framed(v), envelope))
            }
            Err(r) => Err(r.into()),
        },
    };
    match decoded {
        Ok((record, envelope)) => Ok(parse_record(record, fields, envelope, limits, listens)),
        Err(Refused::Record(r)) => Ok(Parsed::Rejected(r)),
        Err(Refused::NotFetched(id)) => Err(NotFetched(id)),
    }
}

/// A record's decoded body: a CloudEvent's JSON data, or a framed record.
/// Not boxed: it lives on the stack for one record, and a box would cost
/// an allocation per record on the formats' fast paths.
#[allow(clippy::large_enum_variant)]
enum Body {
    Json(Value),
    Framed(Decoded),
}

impl Record for Body {
    fn take(&mut self, path: &[String]) -> Option<Value> {
        match self {
            Body::Json(v) => Record::take(v, path),
            Body::Framed(d) => d.take(path),
        }
    }

    fn into_json(self) -> Value {
        match self {
            Body::Json(v) => v,
            Body::Framed(d) => d.into_json(),
        }
    }
}

/// Why a record was not decoded.
enum Refused {
    Record(Rejection),
    NotFetched(u32),
}

impl From<Rejection> for Refused {
    fn from(r: Rejection) -> Self {
        Refused::Record(r)
    }
}

/// A framed Avro or Protobuf record decoded, its schema looked up by the
/// frame's id; every refusal names the schema id.
fn framed(kind: Kind, value: &[u8], schemas: Lookup<'_>, fields: &FieldMap) -> Result<Decoded, Refused> {
    let frame = match kind {
        Kind::Avro => wire::avro(value),
        Kind::Protobuf => wire::protobuf(value),
    }
    .map_err(|e| Rejection::new(Reason::InvalidFrame, format!("{e} ({kind} expected)")))?;
    let id = frame.schema_id;
    let schema = match schemas(id) {
        Found::Schema(schema) => schema,
        Found::Unknown(why) => {
            return Err(Rejection::new(Reason::UnknownSchema, format!("schema id {id}: {why}")).into())
        }
        Found::NotFetched => return Err(Refused::NotFetched(id)),
    };
    if schema.kind() != kind {
        let detail = format!("schema id {id} is a {} schema, the record is {kind}", schema.kind());
        return Err(Rejection::new(Reason::UnknownSchema, detail).into());
    }
    let decoded = schema.decode(&frame, fields.own_names());
    Ok(decoded.map_err(|e| Rejection::new(Reason::InvalidBody, format!("schema id {id}: {e}")))?)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::Event;
    use super::*;

    const AVSC: &str = super::super::schema::EVENT_AVSC;

    fn avro_body(score: i64) -> Vec<u8> {
        let Schema::Avro(schema, ..) = Schema::avro(AVSC).unwrap() else { panic!() };
        let record = json!({"event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "type": "match_finished",
                            "player_id": "alice", "score": score, "ts": 1_786_100_400_000i64, "attrs": {}, "meta": {}});
        let value = apache_avro::to_value(record).unwrap().resolve(&schema).unwrap();
        apache_avro::to_avro_datum(&schema, value).unwrap()
    }

    fn run(format: Format, value: &[u8], schemas: Lookup<'_>) -> Parsed {
        decode(format, value, &[], schemas, &FieldMap::default(), Limits::default(), |t| t == "match_finished").unwrap()
    }

    fn refusal(p: Parsed) -> (Reason, String) {
        match p {
            Parsed::Rejected(r) => (r.reason, r.detail),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_avro_topic_decodes_by_the_frames_schema_and_names_the_id_when_it_cannot() {
        let schema = Arc::new(Schema::avro(AVSC).unwrap());
        let known = |id: u32| {
            if id == 7 {
                Found::Schema(schema.clone())
            } else {
                Found::Unknown("not in kafka.schemas".into())
            }
        };
        let body = avro_body(90);
        let Parsed::Event(Event { score, .. }) = run(Format::Avro, &wire::frame(7, None, &body), &known) else {
            panic!()
        };
        assert_eq!(score, Some(90));
        let (r, d) = refusal(run(Format::Avro, &wire::frame(8, None, &body), &known));
        assert_eq!((r, d.as_str()), (Reason::UnknownSchema, "schema id 8: not in kafka.schemas"));
        let (r, d) = refusal(run(Format::Avro, b"{\"score\": 1}", &known));
        assert_eq!(r, Reason::InvalidFrame);
        assert!(d.contains("magic byte"), "{d}");
        let cut = wire::frame(7, None, &body[..body.len() - 2]);
        let (r, d) = refusal(run(Format::Avro, &cut, &known));
        assert_eq!(r, Reason::InvalidBody);
        assert!(d.starts_with("schema id 7: "), "{d}");
        // A Protobuf topic whose frame names an Avro schema.
        let (r, d) = refusal(run(Format::Protobuf, &wire::frame(7, Some(&[0]), &body), &known));
        assert_eq!((r, d.as_str()), (Reason::UnknownSchema, "schema id 7 is a Avro schema, the record is Protobuf"));
    }

    #[test]
    fn a_schema_not_fetched_yet_is_asked_for_and_nothing_is_refused() {
        let body = avro_body(1);
        let lookup = |_: u32| Found::NotFetched;
        let value = wire::frame(42, None, &body);
        let got = decode(Format::Avro, &value, &[], &lookup, &FieldMap::default(), Limits::default(), |_| true);
        assert_eq!(got.err(), Some(NotFetched(42)));
        let ce = [("ce_id", &b"1"[..]), ("ce_source", b"s"), ("content-type", b"application/avro")];
        let got = decode(Format::CloudEvents, &value, &ce, &lookup, &FieldMap::default(), Limits::default(), |_| true);
        assert_eq!(got.err(), Some(NotFetched(42)));
    }
}
