//! An event's `scores` (boards ranked by several columns): each column's
//! value, as every board that needs the column will check it. A value that
//! is not an integer within ±(2^53 - 1) does not refuse the record: each
//! board needing that column refuses it, naming the column, and the
//! others take it.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Reason, Rejection};

/// Column name -> its integer value, `None` when the record has the column
/// but not an integer within ±(2^53 - 1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scores(pub BTreeMap<String, Option<i64>>);

impl Scores {
    /// The values of `names`, in that order, or why a board needing them
    /// refuses the event (naming the first column at fault).
    pub fn values<'n>(&self, names: impl Iterator<Item = &'n str>) -> Result<Vec<i64>, String> {
        names
            .map(|name| match self.0.get(name) {
                Some(Some(v)) => Ok(*v),
                Some(None) => Err(format!("scores.{name} is not an integer within ±(2^53 - 1)")),
                None => Err(format!("scores.{name} is missing")),
            })
            .collect()
    }
}

impl Scores {
    /// `name=value,...` (the command line's `--scores wins=3,time_ms=53000`).
    pub fn from_pairs(text: &str) -> Result<Scores, String> {
        let mut out = BTreeMap::new();
        for pair in text.split(',') {
            let (name, value) = pair.split_once('=').ok_or_else(|| format!("'{pair}' is not name=value"))?;
            let v = value.trim().parse::<i64>().ok().filter(|v| v.abs() <= crate::score::MAX_EXACT);
            let v = v.ok_or_else(|| format!("{name}: '{value}' is not an integer within ±(2^53 - 1)"))?;
            if out.insert(name.trim().to_string(), Some(v)).is_some() {
                return Err(format!("{name} is given twice"));
            }
        }
        Ok(Scores(out))
    }

    /// As a record carries them: `{column: value}`.
    pub fn json(&self) -> Value {
        Value::Object(self.0.iter().map(|(k, v)| (k.clone(), serde_json::json!(v))).collect())
    }
}

/// The record's `scores` (`None` when it has none): an object whose values
/// are read one by one; anything but an object refuses the record. An
/// empty object is none (an Avro or Protobuf map left empty: rankflow's
/// own schemas give every record the field).
pub(super) fn parse(v: Option<Value>) -> Result<Option<Scores>, Rejection> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) if map.is_empty() => Ok(None),
        Some(Value::Object(map)) => Ok(Some(Scores(
            map.into_iter()
                .map(|(k, v)| {
                    let n = match v {
                        Value::Number(n) => super::parse_score(&n).ok(),
                        _ => None,
                    };
                    (k, n)
                })
                .collect(),
        ))),
        Some(_) => Err(Rejection::new(Reason::InvalidScore, "field 'scores' must be an object of integers")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_is_kept_or_named_when_a_board_needs_it() {
        let s = parse(Some(
            serde_json::json!({ "wins": 1, "time_ms": 53000.0, "bad": 1.5, "far": 9007199254740992i64, "s": "1" }),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(s.values(["wins", "time_ms"].into_iter()), Ok(vec![1, 53000]));
        assert_eq!(
            s.values(["wins", "bad"].into_iter()),
            Err("scores.bad is not an integer within ±(2^53 - 1)".into())
        );
        assert!(s.values(["far"].into_iter()).is_err());
        assert!(s.values(["s"].into_iter()).is_err());
        assert_eq!(s.values(["deaths"].into_iter()), Err("scores.deaths is missing".into()));
        assert_eq!(parse(None).unwrap(), None);
        assert_eq!(parse(Some(serde_json::json!({}))).unwrap(), None);
        assert_eq!(parse(Some(serde_json::json!([1]))).unwrap_err().reason, Reason::InvalidScore);
    }

    #[test]
    fn pairs_from_the_command_line_read_back_as_a_record_carries_them() {
        let s = Scores::from_pairs("wins=3, time_ms=-53000").unwrap();
        assert_eq!(parse(Some(s.json())).unwrap(), Some(s));
        for bad in ["wins", "wins=x", "wins=1.5", "wins=9007199254740992", "a=1,a=2"] {
            assert!(Scores::from_pairs(bad).is_err(), "{bad}");
        }
    }
}
