//! Team membership events: `team_joined` and `team_left`, keyed by player
//! like scores, which every team board applies in the player's order (see
//! `board::team` for what they do there).

use serde_json::Value;

use super::{valid_split_value, Reason, Rejection};

/// The event type of a join.
pub const JOINED: &str = "team_joined";
/// The event type of a leave.
pub const LEFT: &str = "team_left";
/// Both membership types, which every team board takes.
pub const KINDS: [&str; 2] = [JOINED, LEFT];

/// What a membership event says: the player joined `team_id`, or left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// 1 to 64 of `[A-Za-z0-9_-]` (it becomes part of a key).
    pub team_id: String,
    pub joined: bool,
}

/// `Some(true)` for a join, `Some(false)` for a leave, `None` for any other type.
pub fn joined(kind: &str) -> Option<bool> {
    match kind {
        JOINED => Some(true),
        LEFT => Some(false),
        _ => None,
    }
}

/// The membership a join or leave names, from its `team_id`.
pub(super) fn parse(joined: bool, team_id: Option<Value>) -> Result<Membership, Rejection> {
    match team_id {
        None | Some(Value::Null) => Err(Rejection::new(Reason::MissingField, "field 'team_id' is missing")),
        Some(Value::String(s)) if valid_split_value(&s) => Ok(Membership { team_id: s, joined }),
        Some(Value::String(_)) => {
            Err(Rejection::new(Reason::InvalidTeam, "field 'team_id' must be 1 to 64 of [A-Za-z0-9_-]"))
        }
        Some(_) => Err(Rejection::new(Reason::InvalidTeam, "field 'team_id' must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use crate::event::{parse, Limits, Parsed, Reason};

    fn p(json: &str) -> Parsed {
        parse(json.as_bytes(), Limits::default(), |t| t == "team_joined" || t == "team_left")
    }

    const JOIN: &str = r#"{"event_id":"0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11","type":"team_joined","player_id":"alice","team_id":"red-1","ts":1786100400000}"#;

    #[test]
    fn a_join_and_a_leave_parse_with_their_team() {
        let Parsed::Event(e) = p(JOIN) else { panic!() };
        assert_eq!(e.team.as_ref().map(|t| (t.team_id.as_str(), t.joined)), Some(("red-1", true)));
        assert_eq!((e.score, e.ts_ms), (None, 1_786_100_400_000));
        let Parsed::Event(e) = p(&JOIN.replace("team_joined", "team_left")) else { panic!() };
        assert_eq!(e.team.map(|t| t.joined), Some(false));
    }

    #[test]
    fn a_bad_membership_event_is_refused_with_its_reason() {
        let reason = |json: &str| match p(json) {
            Parsed::Rejected(r) => r.reason,
            other => panic!("expected a rejection, got {other:?}"),
        };
        assert_eq!(reason(&JOIN.replace(r#""team_id":"red-1","#, "")), Reason::MissingField);
        assert_eq!(reason(&JOIN.replace("red-1", "red:1")), Reason::InvalidTeam);
        assert_eq!(reason(&JOIN.replace(r#""red-1""#, "7")), Reason::InvalidTeam);
        assert_eq!(reason(&JOIN.replace("red-1", &"r".repeat(65))), Reason::InvalidTeam);
        assert_eq!(reason(&JOIN.replace(r#","ts":1786100400000"#, "")), Reason::MissingField);
        assert_eq!(reason(&JOIN.replace(r#""alice""#, r#""""#)), Reason::InvalidPlayerId);
    }
}
