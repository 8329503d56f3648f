//! Admin events (corrections and moderation): their types, and the fields
//! each kind needs, parsed from the same JSON envelope as a score event.
//! What they do to the boards is `moderation`'s.

use std::fmt;

use serde_json::Value;
use uuid::Uuid;

use super::{parse_ts, required_number, RawEvent, Reason, Rejection};

/// The admin event types: corrections and moderation, honoured only on
/// `kafka.admin_topics` (see `moderation` for what each does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdminKind {
    /// Sets the player's stored score, whatever the board's mode.
    ScoreSet,
    /// Adds a delta to the player's total (`sum` boards only).
    ScoreAdjusted,
    /// Removes the player from a board (every period, or one).
    PlayerRemoved,
    /// Takes the player out of every read of others; their events keep counting.
    PlayerHidden,
    /// Undoes `player_hidden`.
    PlayerUnhidden,
    /// Removes the player from every key of every board.
    PlayerErased,
    /// Sets the tier of a league board a player is placed in next.
    PlayerTierSet,
    /// Applies a held event (score integrity) to its board, once.
    ReviewApproved,
    /// Drops a held event, recorded.
    ReviewRejected,
    /// Hides a team from a team board's reads (`board`, `team_id`).
    TeamHidden,
    /// Undoes `team_hidden`.
    TeamUnhidden,
}

impl AdminKind {
    pub const ALL: [AdminKind; 11] = [
        AdminKind::ScoreSet,
        AdminKind::ScoreAdjusted,
        AdminKind::PlayerRemoved,
        AdminKind::PlayerHidden,
        AdminKind::PlayerUnhidden,
        AdminKind::PlayerErased,
        AdminKind::PlayerTierSet,
        AdminKind::ReviewApproved,
        AdminKind::ReviewRejected,
        AdminKind::TeamHidden,
        AdminKind::TeamUnhidden,
    ];

    /// The event `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            AdminKind::ScoreSet => "score_set",
            AdminKind::ScoreAdjusted => "score_adjusted",
            AdminKind::PlayerRemoved => "player_removed",
            AdminKind::PlayerHidden => "player_hidden",
            AdminKind::PlayerUnhidden => "player_unhidden",
            AdminKind::PlayerErased => "player_erased",
            AdminKind::PlayerTierSet => "player_tier_set",
            AdminKind::ReviewApproved => "review_approved",
            AdminKind::ReviewRejected => "review_rejected",
            AdminKind::TeamHidden => "team_hidden",
            AdminKind::TeamUnhidden => "team_unhidden",
        }
    }

    /// A kind about a team, which names no player.
    pub fn of_team(self) -> bool {
        matches!(self, AdminKind::TeamHidden | AdminKind::TeamUnhidden)
    }

    pub fn parse(kind: &str) -> Option<AdminKind> {
        AdminKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

impl fmt::Display for AdminKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A valid admin event: the score event's envelope (`event_id`, `type`,
/// `player_id`, `ts`) and the fields of its kind, not yet checked against
/// the boards (see `moderation::plan`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminEvent {
    pub event_id: Uuid,
    pub kind: AdminKind,
    pub player_id: String,
    /// Event time, epoch ms (0 when a kind that needs none has none).
    pub ts_ms: i64,
    /// `score_set`, `score_adjusted`, `player_removed`: the board.
    pub board: Option<String>,
    /// `player_hidden`, `player_unhidden`: the boards (`None`: all).
    pub boards: Option<Vec<String>>,
    pub split: Option<String>,
    /// A period id (`w:2026-W49`); `None`: see each kind.
    pub period: Option<String>,
    /// `score_set`: the score (`None`: it carries `scores` only);
    /// `score_adjusted`: the delta; otherwise `Some(0)`.
    pub value: Option<i64>,
    /// `score_set` on a board ranked by several columns: its row.
    pub scores: Option<super::Scores>,
    /// `player_tier_set`: the tier's name.
    pub tier: Option<String>,
    /// `review_approved`, `review_rejected`: the held event.
    pub held_event_id: Option<Uuid>,
    /// `review_approved`, `review_rejected`: why, for the record.
    pub reason: Option<String>,
    /// `team_hidden`, `team_unhidden`: the team.
    pub team_id: Option<String>,
}

/// An optional string field of an admin event.
fn admin_text(v: Option<Value>, field: &str) -> Result<Option<String>, Rejection> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
        Some(_) => Err(Rejection::new(Reason::InvalidAdmin, format!("field '{field}' must be a non-empty string"))),
    }
}

/// The fields of an admin event of `kind`; which are required depends on
/// the kind (see `moderation`).
pub(super) fn parse_admin(
    kind: AdminKind,
    event_id: Uuid,
    player_id: String,
    raw: RawEvent,
) -> Result<AdminEvent, Rejection> {
    use AdminKind::*;
    use Reason::MissingField;
    let board = admin_text(raw.board, "board")?;
    if board.is_none()
        && matches!(
            kind,
            ScoreSet
                | ScoreAdjusted
                | PlayerRemoved
                | PlayerTierSet
                | ReviewApproved
                | ReviewRejected
                | TeamHidden
                | TeamUnhidden
        )
    {
        return Err(Rejection::new(
            Reason::MissingField,
            format!("field 'board' is missing (a {kind} names its board)"),
        ));
    }
    let held_event_id = match admin_text(raw.held_event_id, "held_event_id")? {
        None if matches!(kind, ReviewApproved | ReviewRejected) => {
            return Err(Rejection::new(
                MissingField,
                format!("field 'held_event_id' is missing (a {kind} names the held event)"),
            ))
        }
        None => None,
        Some(text) => Some(Uuid::parse_str(&text).map_err(|_| {
            Rejection::new(Reason::InvalidAdmin, format!("field 'held_event_id' must be a UUID, not '{text}'"))
        })?),
    };
    let reason = admin_text(raw.reason, "reason")?;
    let team_id = match (kind.of_team(), raw.team_id) {
        (false, _) => None,
        (true, team_id) => Some(super::team::parse(false, team_id)?.team_id),
    };
    let tier = admin_text(raw.tier, "tier")?;
    if tier.is_none() && kind == PlayerTierSet {
        return Err(Rejection::new(Reason::MissingField, "field 'tier' is missing (a player_tier_set names the tier)"));
    }
    let scores = if kind == ScoreSet { super::scores::parse(raw.scores)? } else { None };
    let value = match (kind, raw.score) {
        (ScoreSet, None | Some(Value::Null)) if scores.is_some() => None,
        (ScoreSet, score) => Some(required_number(score, "score", Reason::InvalidScore)?),
        (ScoreAdjusted, _) => Some(required_number(raw.delta, "delta", Reason::InvalidScore)?),
        _ => Some(0),
    };
    // A correction lands in the periods holding its time; the others need none.
    let ts_ms = match kind {
        ScoreSet | ScoreAdjusted => parse_ts(raw.ts)?,
        _ if raw.ts.as_ref().is_some_and(|t| !t.is_null()) => parse_ts(raw.ts)?,
        _ => 0,
    };
    let boards = match raw.boards {
        None | Some(Value::Null) => None,
        Some(Value::Array(list)) if !list.is_empty() => Some(
            list.into_iter()
                .map(|b| match b {
                    Value::String(s) if !s.is_empty() => Ok(s),
                    _ => Err(Rejection::new(Reason::InvalidAdmin, "field 'boards' must list board ids")),
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(Rejection::new(Reason::InvalidAdmin, "field 'boards' must be a non-empty list of board ids"))
        }
    };
    Ok(AdminEvent {
        event_id,
        kind,
        player_id,
        ts_ms,
        board,
        boards,
        split: admin_text(raw.split, "split")?,
        period: admin_text(raw.period, "period")?,
        value,
        scores,
        tier,
        held_event_id,
        reason,
        team_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{parse, Limits, Parsed};

    fn admin(json: &str) -> Result<AdminEvent, Reason> {
        match parse(json.as_bytes(), Limits::default(), |_| false) {
            Parsed::Admin(a) => Ok(a),
            Parsed::Rejected(r) => Err(r.reason),
            other => panic!("expected an admin event or a rejection for {json}, got {other:?}"),
        }
    }

    #[test]
    fn admin_events_parse_with_the_fields_of_their_kind() {
        let id = r#""event_id":"0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11","player_id":"alice""#;
        let set = admin(&format!(r#"{{{id},"type":"score_set","board":"best","score":110,"ts":5}}"#)).unwrap();
        assert_eq!(
            (set.kind, set.board.as_deref(), set.value, set.ts_ms),
            (AdminKind::ScoreSet, Some("best"), Some(110), 5)
        );
        let adj = admin(&format!(
            r#"{{{id},"type":"score_adjusted","board":"pts","delta":-7,"ts":5,"split":"eu","period":"w:2026-W49"}}"#
        ))
        .unwrap();
        assert_eq!(
            (adj.value, adj.split.as_deref(), adj.period.as_deref()),
            (Some(-7), Some("eu"), Some("w:2026-W49"))
        );
        let hide = admin(&format!(r#"{{{id},"type":"player_hidden","boards":["a","b"]}}"#)).unwrap();
        assert_eq!((hide.boards, hide.ts_ms), (Some(vec!["a".to_string(), "b".to_string()]), 0));
        assert_eq!(admin(&format!(r#"{{{id},"type":"player_unhidden"}}"#)).unwrap().boards, None);
        // Each kind's required fields, and their types.
        assert_eq!(admin(&format!(r#"{{{id},"type":"score_set","score":1,"ts":5}}"#)), Err(Reason::MissingField));
        assert_eq!(admin(&format!(r#"{{{id},"type":"score_set","board":"b","ts":5}}"#)), Err(Reason::MissingField));
        assert_eq!(admin(&format!(r#"{{{id},"type":"score_set","board":"b","score":1}}"#)), Err(Reason::MissingField));
        assert_eq!(
            admin(&format!(r#"{{{id},"type":"score_adjusted","board":"b","score":1,"ts":1}}"#)),
            Err(Reason::MissingField)
        );
        assert_eq!(
            admin(&format!(r#"{{{id},"type":"score_set","board":"b","score":1.5,"ts":1}}"#)),
            Err(Reason::InvalidScore)
        );
        // A set of a board with columns carries `scores` instead.
        let row = admin(&format!(r#"{{{id},"type":"score_set","board":"b","scores":{{"wins":3,"t":-1}},"ts":1}}"#));
        let row = row.unwrap();
        assert_eq!((row.value, row.scores.unwrap().values(["wins", "t"].into_iter())), (None, Ok(vec![3, -1])));
        assert_eq!(
            admin(&format!(r#"{{{id},"type":"score_set","board":"b","scores":[1],"ts":1}}"#)),
            Err(Reason::InvalidScore)
        );
        assert_eq!(admin(&format!(r#"{{{id},"type":"player_removed"}}"#)), Err(Reason::MissingField));
        assert_eq!(admin(&format!(r#"{{{id},"type":"player_removed","board":7}}"#)), Err(Reason::InvalidAdmin));
        assert_eq!(admin(&format!(r#"{{{id},"type":"player_hidden","boards":"all"}}"#)), Err(Reason::InvalidAdmin));
        assert_eq!(admin(&format!(r#"{{{id},"type":"player_hidden","boards":[]}}"#)), Err(Reason::InvalidAdmin));
        let held = "7d1f0a2e-5b1c-4f7e-9a51-3c2b1a0f9e8d";
        let ok = admin(&format!(
            r#"{{{id},"type":"review_approved","board":"pts","held_event_id":"{held}","reason":"replay checked"}}"#
        ))
        .unwrap();
        assert_eq!(
            (ok.kind, ok.held_event_id.map(|u| u.to_string())),
            (AdminKind::ReviewApproved, Some(held.to_string()))
        );
        assert_eq!(ok.reason.as_deref(), Some("replay checked"));
        assert_eq!(admin(&format!(r#"{{{id},"type":"review_rejected","board":"pts"}}"#)), Err(Reason::MissingField));
        assert_eq!(
            admin(&format!(r#"{{{id},"type":"review_rejected","held_event_id":"{held}"}}"#)),
            Err(Reason::MissingField)
        );
        assert_eq!(
            admin(&format!(r#"{{{id},"type":"review_rejected","board":"pts","held_event_id":"x"}}"#)),
            Err(Reason::InvalidAdmin)
        );
    }
}
