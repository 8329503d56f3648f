//! rankflow's own Protobuf event (`schemas/event.proto`) as a prost message
//! derived here, the fast way to decode a body whose schema is shaped like
//! it: prost-reflect's dynamic decoding costs about seven times a derived
//! message's (1.65 against 0.23 µs a record, docs/benchmarks.md). Used
//! only where the frame's message has exactly these fields, numbers and
//! types (with or without `scores`, which earlier versions of the file
//! lack), so a record decodes to the same values either way. Pure.

use std::collections::BTreeMap;

use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Value};

/// `rankflow.v1.Event`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EventMessage {
    #[prost(string, tag = "1")]
    pub event_id: String,
    #[prost(string, tag = "2")]
    pub r#type: String,
    #[prost(string, tag = "3")]
    pub player_id: String,
    #[prost(int64, tag = "4")]
    pub score: i64,
    #[prost(int64, tag = "5")]
    pub ts: i64,
    #[prost(btree_map = "string, string", tag = "6")]
    pub attrs: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "7")]
    pub meta: BTreeMap<String, String>,
    #[prost(btree_map = "string, int64", tag = "8")]
    pub scores: BTreeMap<String, i64>,
}

/// The event's fields by name and number; `scores` may be left out.
const FIELDS: [(&str, u32); 8] =
    [("event_id", 1), ("type", 2), ("player_id", 3), ("score", 4), ("ts", 5), ("attrs", 6), ("meta", 7), ("scores", 8)];

/// Whether `message` has exactly the event's fields: the same names,
/// numbers and types, none with presence, nothing else. `Some(true)`: it
/// has `scores` too; `Some(false)`: the seven others only.
pub fn event_shape(message: &MessageDescriptor) -> Option<bool> {
    let map_of = |kind: &Kind, value: Kind| match kind {
        Kind::Message(entry) if entry.is_map_entry() => {
            entry.map_entry_key_field().kind() == Kind::String && entry.map_entry_value_field().kind() == value
        }
        _ => false,
    };
    let with_scores = message.get_field_by_name("scores").is_some();
    let want = &FIELDS[..if with_scores { 8 } else { 7 }];
    let shaped = message.fields().len() == want.len()
        && want.iter().all(|(name, number)| {
            message.get_field_by_name(name).is_some_and(|f| {
                let kind = f.kind();
                let fits = match number {
                    1..=3 => kind == Kind::String && !f.is_list(),
                    4 | 5 => kind == Kind::Int64 && !f.is_list(),
                    6 | 7 => f.is_map() && map_of(&kind, Kind::String),
                    _ => f.is_map() && map_of(&kind, Kind::Int64),
                };
                f.number() == *number && fits && (f.is_map() || !f.supports_presence())
            })
        });
    shaped.then_some(with_scores)
}

impl EventMessage {
    /// The value of one field, by its `.proto` name, moved out;
    /// `with_scores`: the writer's message has `scores`.
    pub fn take(&mut self, name: &str, with_scores: bool) -> Option<Value> {
        let object = |m: &mut BTreeMap<String, String>| {
            Value::Object(std::mem::take(m).into_iter().map(|(k, v)| (k, Value::String(v))).collect::<Map<_, _>>())
        };
        Some(match name {
            "event_id" => Value::String(std::mem::take(&mut self.event_id)),
            "type" => Value::String(std::mem::take(&mut self.r#type)),
            "player_id" => Value::String(std::mem::take(&mut self.player_id)),
            "score" => self.score.into(),
            "ts" => self.ts.into(),
            "attrs" => object(&mut self.attrs),
            "meta" => object(&mut self.meta),
            "scores" if with_scores => {
                Value::Object(std::mem::take(&mut self.scores).into_iter().map(|(k, v)| (k, v.into())).collect())
            }
            _ => return None,
        })
    }

    /// The whole message as JSON.
    pub fn into_json(mut self, with_scores: bool) -> Value {
        let object = FIELDS.iter().filter_map(|(n, _)| Some((n.to_string(), self.take(n, with_scores)?))).collect();
        Value::Object(object)
    }
}
