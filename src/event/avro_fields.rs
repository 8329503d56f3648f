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
