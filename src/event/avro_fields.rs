//! An Avro record read straight into the event's fields, without the
//! generic value tree `apache-avro` builds for every record (by
//! `serde_avro_fast`, which deserializes a datum through serde by its
//! schema). Taken when a topic reads every field by its own name and the
//! writer schema is a record whose event fields are of types both ways
//! turn into the same JSON (null, boolean, int, long, float, double,
//! string, UUID, timestamps, unions of those, maps of those): the values
//! are then exactly what the generic decoding gives, field for field
//! (tested against it). Any other schema takes the generic way.

use apache_avro::Schema as AvroSchema;
use serde::Deserialize;
use serde_json::Value;

use super::fields::FIELDS;

/// The fast reader of one writer schema.
pub struct FastAvro(serde_avro_fast::Schema);

impl std::fmt::Debug for FastAvro {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FastAvro")
    }
}

/// The event's fields of one record, as JSON (`None`: absent or null).
#[derive(Debug, Default, Deserialize)]
pub struct EventFields {
    event_id: Option<Value>,
    #[serde(rename = "type")]
    kind: Option<Value>,
    player_id: Option<Value>,
    score: Option<Value>,
    ts: Option<Value>,
    attrs: Option<Value>,
    meta: Option<Value>,
    scores: Option<Value>,
}

impl EventFields {
    /// Field `name`'s value, moved out (a NaN or infinite double reads as none, as the generic way reads it).
    pub fn take(&mut self, name: &str) -> Option<Value> {
        let slot = match name {
            "event_id" => &mut self.event_id,
            "type" => &mut self.kind,
            "player_id" => &mut self.player_id,
            "score" => &mut self.score,
            "ts" => &mut self.ts,
            "attrs" => &mut self.attrs,
            "meta" => &mut self.meta,
            "scores" => &mut self.scores,
            _ => return None,
        };
        slot.take().filter(|v| !v.is_null())
    }

    /// The fields as a JSON object.
    pub fn into_json(mut self) -> Value {
        let object = FIELDS.iter().filter_map(|&f| self.take(f).map(|v| (f.to_string(), v))).collect();
        Value::Object(object)
    }
}

/// Whether `schema` turns into the same JSON read either way: a plain
/// value, a map of them, or a union of those.
fn plain(schema: &AvroSchema) -> bool {
    let scalar = |s: &AvroSchema| {
        matches!(
            s,
            AvroSchema::Null
                | AvroSchema::Boolean
                | AvroSchema::Int
                | AvroSchema::Long
                | AvroSchema::Float
                | AvroSchema::Double
                | AvroSchema::String
                | AvroSchema::Uuid
                | AvroSchema::TimestampMillis
                | AvroSchema::TimestampMicros
        )
    };
    let scalars = |s: &AvroSchema| match s {
        AvroSchema::Union(u) => u.variants().iter().all(scalar),
        other => scalar(other),
    };
    let value = |s: &AvroSchema| match s {
        AvroSchema::Map(m) => scalars(&m.types),
        other => scalar(other),
    };
    match schema {
        AvroSchema::Union(u) => u.variants().iter().all(value),
        other => value(other),
    }
}

impl FastAvro {
    /// The fast reader of a writer schema (`text`, parsed as `schema`), if
    /// its event fields allow one.
    pub fn new(schema: &AvroSchema, text: &str) -> Option<FastAvro> {
        let AvroSchema::Record(record) = schema else { return None };
        let fields_plain = record.fields.iter().filter(|f| FIELDS.contains(&f.name.as_str())).all(|f| plain(&f.schema));
        if !fields_plain {
            return None;
        }
        text.parse().ok().map(FastAvro)
    }

    /// One datum's event fields; every byte of `body` must be the datum's.
    pub fn decode(&self, body: &[u8]) -> Result<EventFields, String> {
        let mut state = serde_avro_fast::de::DeserializerState::from_slice(body, &self.0);
        let fields = EventFields::deserialize(state.deserializer())
            .map_err(|e| format!("the body does not match the Avro schema: {e}"))?;
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut *state, &mut rest);
        if !rest.is_empty() {
            return Err(format!("{} bytes follow the Avro record", rest.len()));
        }
        Ok(fields)
    }
}

#[cfg(test)]
mod tests {
    use apache_avro::types::{Record as AvroRecord, Value as AvroValue};

    use super::super::fields::Record as _;
    use super::super::schema::Schema;
    use super::super::wire::Framed;

    /// A writer schema of a studio's own: the event fields typed otherwise,
    /// some left out or null, and fields of other types around them.
    const STUDIO: &str = r#"{"type": "record", "name": "Match", "fields": [
        {"name": "level", "type": {"type": "array", "items": "int"}},
        {"name": "event_id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "type", "type": "string"},
        {"name": "player_id", "type": ["null", "string"]},
        {"name": "blob", "type": "bytes"},
        {"name": "score", "type": ["null", "int", "double", "string"]},
        {"name": "ts", "type": ["string", "long"]},
        {"name": "attrs", "type": ["null", {"type": "map", "values": "string"}]},
        {"name": "scores", "type": ["null", {"type": "map", "values": ["long", "double"]}]},
        {"name": "where", "type": {"type": "record", "name": "Where", "fields": [{"name": "x", "type": "float"}]}}
    ]}"#;

    fn studio_body(schema: &apache_avro::Schema, score: AvroValue, player: AvroValue, ts: AvroValue) -> Vec<u8> {
        let mut r = AvroRecord::new(schema).unwrap();
        r.put("level", AvroValue::Array(vec![AvroValue::Int(3)]));
        r.put("event_id", AvroValue::Uuid("0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11".parse().unwrap()));
        r.put("type", "match_finished");
        r.put("player_id", player);
        r.put("blob", AvroValue::Bytes(vec![1, 2, 3]));
        r.put("score", score);
        r.put("ts", ts);
        r.put("attrs", AvroValue::Union(1, Box::new(AvroValue::Map([("track".to_string(), "monza".into())].into()))));
        let scores = [
            ("wins".to_string(), AvroValue::Union(0, Box::new(AvroValue::Long(3)))),
            ("time_ms".to_string(), AvroValue::Union(1, Box::new(AvroValue::Double(53000.0)))),
        ];
        r.put("scores", AvroValue::Union(1, Box::new(AvroValue::Map(scores.into()))));
        r.put("where", AvroValue::Record(vec![("x".into(), AvroValue::Float(1.5))]));
        apache_avro::to_avro_datum(schema, r).unwrap()
    }

    #[test]
    fn the_fast_way_reads_every_field_as_the_generic_way_does() {
        let schema = Schema::avro(STUDIO).unwrap();
        let Schema::Avro(avro, _, fast) = &schema else { panic!() };
        assert!(fast.is_some(), "a studio schema whose event fields are plain is read the fast way");
        let u = |i: u32, v: AvroValue| AvroValue::Union(i, Box::new(v));
        let cases = [
            (u(1, AvroValue::Int(-42)), u(1, "alice".into()), u(1, AvroValue::Long(1_786_100_400_000))),
            (u(2, AvroValue::Double(100.0)), u(0, AvroValue::Null), u(0, "2026-08-14T10:00:00Z".into())),
            (u(2, AvroValue::Double(0.5)), u(1, "bob".into()), u(1, AvroValue::Long(-1))),
            (u(2, AvroValue::Double(f64::NAN)), u(1, "carol".into()), u(1, AvroValue::Long(0))),
            (u(3, "12".into()), u(1, "".into()), u(0, "".into())),
            (u(0, AvroValue::Null), u(1, "dan".into()), u(1, AvroValue::Long(i64::MAX))),
        ];
        for (score, player, ts) in cases {
            let bytes = studio_body(avro, score, player, ts);
            let framed = Framed { schema_id: 1, indexes: vec![], body: &bytes };
            let (mut quick, mut generic) =
                (schema.decode(&framed, true).unwrap(), schema.decode(&framed, false).unwrap());
            for field in super::super::fields::FIELDS {
                let path = [field.to_string()];
                assert_eq!(quick.take(&path), generic.take(&path), "{field} of {bytes:?}");
            }
        }
    }

    #[test]
    fn a_schema_whose_event_fields_are_not_plain_takes_the_generic_way() {
        for score in [
            r#""bytes""#,
            r#"{"type": "enum", "name": "S", "symbols": ["A"]}"#,
            r#"{"type": "array", "items": "long"}"#,
        ] {
            let text =
                format!(r#"{{"type": "record", "name": "E", "fields": [{{"name": "score", "type": {score}}}]}}"#);
            let Schema::Avro(_, _, fast) = Schema::avro(&text).unwrap() else { panic!() };
            assert!(fast.is_none(), "{score}");
        }
        let Schema::Avro(_, _, fast) = Schema::avro(r#"{"type": "array", "items": "long"}"#).unwrap() else { panic!() };
        assert!(fast.is_none(), "not a record");
    }
}
