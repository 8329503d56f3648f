//! `[kafka.fields]`: where each event field is in a decoded record whose
//! schema names things otherwise (`player_id = "player.id"`). A path is
//! object keys joined by dots; a field not mapped is read by its own name.
//! Pure: paths are checked once, at load, and applied per record.

use std::collections::BTreeMap;

use serde_json::Value;

use super::RawEvent;

/// The event fields a path can be given for.
pub const FIELDS: [&str; 8] = ["event_id", "type", "player_id", "score", "ts", "attrs", "meta", "scores"];

/// A decoded record whose values can be taken out by path: a JSON value,
/// an Avro record, a Protobuf message (`schema::Decoded`).
pub trait Record {
    /// The value at `path` as JSON, moved out of the record; `None` where
    /// there is none (a JSON or Avro null, a Protobuf field with presence
    /// left unset).
    fn take(&mut self, path: &[String]) -> Option<Value>;

    /// The whole record as JSON.
    fn into_json(self) -> Value;
}

impl Record for Value {
    fn take(&mut self, path: &[String]) -> Option<Value> {
        let at = path.iter().try_fold(self, |v, key| v.get_mut(key))?;
        Some(at.take()).filter(|v| !v.is_null())
    }

    fn into_json(self) -> Value {
        self
    }
}

/// Each event field's path in a decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldMap {
    /// In the order of [`FIELDS`].
    paths: Vec<Vec<String>>,
    /// Whether a path is another's or inside it (two fields read from one
    /// place): then values are copied, not moved, out of the record.
    overlapping: bool,
}

impl Default for FieldMap {
    /// Every field by its own name.
    fn default() -> Self {
        FieldMap { paths: FIELDS.iter().map(|f| vec![f.to_string()]).collect(), overlapping: false }
    }
}

impl FieldMap {
    /// The map `[kafka.fields]` gives (event field -> dotted path); an error
    /// names the first bad entry: `(field, message)`.
    pub fn new(given: &BTreeMap<String, String>) -> Result<FieldMap, (String, String)> {
        FieldMap::default().with(given)
    }

    /// This map with `given`'s entries put over it (a topic's own map
    /// over the one every topic shares).
    pub fn with(&self, given: &BTreeMap<String, String>) -> Result<FieldMap, (String, String)> {
        let mut map = self.clone();
        for (field, path) in given {
            let Some(i) = FIELDS.iter().position(|f| f == field) else {
                return Err((field.clone(), format!("is not an event field (one of {})", FIELDS.join(", "))));
            };
            let parts: Vec<String> = path.split('.').map(str::to_string).collect();
            if parts.iter().any(String::is_empty) {
                return Err((field.clone(), format!("'{path}' is not a path: object keys joined by dots")));
            }
            map.paths[i] = parts;
        }
        let paths = &map.paths;
        map.overlapping =
            paths.iter().enumerate().any(|(i, a)| paths[i + 1..].iter().any(|b| a.starts_with(b) || b.starts_with(a)));
        Ok(map)
    }

    /// Whether every field is read by its own name (no path given).
    pub fn own_names(&self) -> bool {
        self.paths.iter().zip(FIELDS).all(|(path, field)| matches!(path.as_slice(), [p] if p == field))
    }

    /// The record's event fields, each taken from its path.
    pub(super) fn raw(&self, mut record: impl Record) -> RawEvent {
        let mut values: [Option<Value>; 8] = Default::default();
        if self.overlapping {
            let record = record.into_json();
            for (value, path) in values.iter_mut().zip(&self.paths) {
                *value = path.iter().try_fold(&record, |v, key| v.get(key)).filter(|v| !v.is_null()).cloned();
            }
        } else {
            for (value, path) in values.iter_mut().zip(&self.paths) {
                *value = record.take(path);
            }
        }
        let [event_id, kind, player_id, score, ts, attrs, meta, scores] = values;
        RawEvent { event_id, kind, player_id, score, ts, attrs, meta, scores, ..RawEvent::default() }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{parse_record, Envelope, Limits, Parsed, Reason};
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> Result<FieldMap, (String, String)> {
        FieldMap::new(&pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect())
    }

    #[test]
    fn mapped_fields_are_read_from_their_paths_and_the_rest_by_name() {
        assert!(FieldMap::default().own_names());
        assert!(map(&[("score", "score")]).unwrap().own_names());
        let fields = map(&[("player_id", "player.id"), ("score", "result.points")]).unwrap();
        assert!(!fields.own_names());
        let record = json!({
            "event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "type": "match_finished",
            "player": {"id": "alice"}, "result": {"points": 90}, "ts": 1786100400000i64,
            "player_id": "not-this-one"
        });
        let Parsed::Event(e) =
            parse_record(record, &fields, Envelope::default(), Limits::default(), |t| t == "match_finished")
        else {
            panic!()
        };
        assert_eq!((e.player_id.as_str(), e.score, e.ts_ms), ("alice", Some(90), 1_786_100_400_000));
    }

    #[test]
    fn a_missing_path_is_a_missing_field_and_admin_events_are_refused() {
        let fields = map(&[("score", "result.points")]).unwrap();
        let record = json!({"event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "type": "m", "player_id": "a",
                            "result": {}, "ts": 1});
        match parse_record(record, &fields, Envelope::default(), Limits::default(), |_| true) {
            Parsed::Rejected(r) => {
                assert_eq!((r.reason, r.detail.as_str()), (Reason::MissingField, "field 'score' is missing"))
            }
            other => panic!("{other:?}"),
        }
        let admin = json!({"event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "type": "player_removed",
                           "player_id": "a", "board": "b"});
        assert!(matches!(parse_record(admin, &FieldMap::default(), Envelope::default(), Limits::default(), |_| true),
            Parsed::Rejected(r) if r.reason == Reason::NotAllowed));
    }

    #[test]
    fn two_fields_may_read_one_place() {
        let fields = map(&[("event_id", "match.id"), ("attrs", "match"), ("meta", "match")]).unwrap();
        let record = json!({"type": "m", "player_id": "a", "score": 3, "ts": 1,
                            "match": {"id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11"}});
        let Parsed::Event(e) = parse_record(record, &fields, Envelope::default(), Limits::default(), |_| true) else {
            panic!()
        };
        // The id was read, and so was the object it is in, twice.
        assert_eq!(e.event_id.to_string(), "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11");
        assert_eq!(e.attrs.get("id").map(String::as_str), Some("0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11"));
        assert!(e.meta.is_some_and(|m| m.contains("0b8e3f5e")));
    }

    #[test]
    fn a_bad_map_names_its_field() {
        assert_eq!(map(&[("points", "score")]).unwrap_err().0, "points");
        assert_eq!(map(&[("score", "result..points")]).unwrap_err().0, "score");
        assert_eq!(map(&[]).unwrap(), FieldMap::default());
    }
}
