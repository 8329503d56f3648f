//! rankflow's own Protobuf event (`schemas/event.proto`) as a prost message
//! derived here, the fast way to decode a body whose schema is shaped like
//! it: prost-reflect's dynamic decoding costs about seven times a derived
//! message's (1.65 against 0.23 µs a record, docs/benchmarks.md). Used
//! only where the frame's message has exactly these fields, numbers and
//! types, so a record decodes to the same values either way. Pure.

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
}

/// Whether `message` has exactly the event's fields: the same names,
/// numbers and types, none with presence, nothing else.
pub fn is_event_shaped(message: &MessageDescriptor) -> bool {
    let string_map = |kind: &Kind| match kind {
        Kind::Message(entry) if entry.is_map_entry() => {
            entry.map_entry_key_field().kind() == Kind::String && entry.map_entry_value_field().kind() == Kind::String
        }
        _ => false,
    };
    let want: [(&str, u32); 7] =
        [("event_id", 1), ("type", 2), ("player_id", 3), ("score", 4), ("ts", 5), ("attrs", 6), ("meta", 7)];
    message.fields().len() == want.len()
        && want.iter().all(|(name, number)| {
            message.get_field_by_name(name).is_some_and(|f| {
                let kind = f.kind();
                let fits = match number {
                    1..=3 => kind == Kind::String && !f.is_list(),
                    4 | 5 => kind == Kind::Int64 && !f.is_list(),
                    _ => f.is_map() && string_map(&kind),
                };
                f.number() == *number && fits && (f.is_map() || !f.supports_presence())
            })
        })
}

impl EventMessage {
    /// The value of one field, by its `.proto` name, moved out.
    pub fn take(&mut self, name: &str) -> Option<Value> {
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
            _ => return None,
        })
    }

    /// The whole message as JSON.
    pub fn into_json(mut self) -> Value {
        let names = ["event_id", "type", "player_id", "score", "ts", "attrs", "meta"];
        Value::Object(names.iter().filter_map(|n| Some((n.to_string(), self.take(n)?))).collect())
    }
}
