//! Rank changes (`notify_top`): the records a landed batch's moves produce
//! to `kafka.changes_topic`, made from what the apply calls decided. Pure,
//! so it is unit tested; `held` produces them and holds their source
//! partitions until they are acknowledged, as it does dead letters.

use std::sync::Arc;

use rdkafka::message::{Header, OwnedHeaders};
use serde_json::json;

use crate::board::{Board, Decision};
use crate::event::Event;
use crate::kafka::transaction::OUTPUT_ID;
use crate::keys;
use crate::store::RankMove;

use super::held::Outgoing;
use super::record::{Decided, Item, Record};

/// The header that names a change the same way however often its record is
/// redelivered: a notification service dedupes by it.
pub const CHANGE_ID: &str = "rankflow-change-id";

/// One change record: keyed by the player, its JSON value, its headers.
pub struct Change {
    pub key: String,
    pub value: Vec<u8>,
    pub headers: OwnedHeaders,
}

/// `<event id>/<board tag>/<period>`: one event moves a player at most once
/// per period of a board tag.
pub fn change_id(event: &Event, base: &str, period: &str) -> String {
    format!("{}/{}/{period}", event.event_id, keys::tag_of_base(base).unwrap_or(base))
}

/// The record of `event`'s move on `board` (whose tag's key base is `base`).
pub fn change(board: &Board, base: &str, event: &Event, mv: &RankMove) -> Change {
    let mut value = json!({
        "board": board.id(),
        "period": mv.period,
        "split": keys::split_of_base(base).map(|(_, split)| split),
        "player_id": event.player_id,
        "old_rank": mv.old_rank,
        "new_rank": mv.new_rank,
        "passed": mv.passed,
        "pushed_out": mv.pushed_out,
        "event_id": event.event_id.to_string(),
    });
    // A board ranked by several columns: each column's value, as reads answer them.
    let values = board.column_spec().zip(mv.row.as_deref()).and_then(|(spec, row)| spec.values_of(row));
    match (board.columns(), values) {
        (Some(c), Some(values)) => {
            value["scores"] = c.scores(&values);
        }
        _ => value["score"] = json!(board.packing().decode(mv.stored)),
    }
    let id = change_id(event, base, &mv.period);
    Change {
        key: event.player_id.clone(),
        value: value.to_string().into_bytes(),
        headers: OwnedHeaders::new()
            .insert(Header { key: CHANGE_ID, value: Some(id.as_str()) })
            .insert(Header { key: OUTPUT_ID, value: Some(format!("change/{id}").as_str()) }),
    }
}

/// The change records of one landed record, for `to`: each move its
/// writes made, in the order the calls reported them.
pub fn outgoing(record: &Record, boards: &[Board], to: &Arc<str>) -> Vec<Outgoing> {
    let Item::Event { event, decided, moves } = &record.item else { return Vec::new() };
    let mut out = Vec::new();
    for (d, mv) in moves {
        let Some(Decided { board, decision: Decision::Write(w), .. }) = decided.get(*d) else { continue };
        let board = &boards[*board];
        let Change { key, value, headers } = change(board, &w.base, event, mv);
        out.push(Outgoing::change(&record.origin, board.id(), to.clone(), (key, value, headers)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::{BoardSpec, Mode};
    use crate::period::PeriodKind;
    use rdkafka::message::Headers;

    fn event() -> Event {
        Event {
            event_id: uuid::Uuid::from_u128(7),
            kind: "match_finished".into(),
            player_id: "bob".into(),
            score: Some(5),
            scores: None,
            ts_ms: 0,
            attrs: Default::default(),
            meta: None,
            team: None,
        }
    }

    #[test]
    fn a_change_names_its_board_split_period_players_and_score_and_carries_a_stable_id() {
        let board = Board::new(BoardSpec::for_tests("laps", Mode::Sum, &[PeriodKind::Daily]));
        let mv = RankMove {
            event: 0,
            period: "d:2026-08-14".into(),
            old_rank: None,
            new_rank: 5,
            stored: 40,
            row: None,
            passed: vec!["eve".into()],
            pushed_out: Some("eve".into()),
        };
        let c = change(&board, "lb:{laps:monza}", &event(), &mv);
        assert_eq!(c.key, "bob");
        let value: serde_json::Value = serde_json::from_slice(&c.value).unwrap();
        assert_eq!(
            value,
            json!({
                "board": "laps", "period": "d:2026-08-14", "split": "monza", "player_id": "bob",
                "old_rank": null, "new_rank": 5, "score": 40, "passed": ["eve"], "pushed_out": "eve",
                "event_id": "00000000-0000-0000-0000-000000000007",
            })
        );
        let id = c.headers.iter().find(|h| h.key == CHANGE_ID).and_then(|h| h.value).unwrap();
        assert_eq!(id, b"00000000-0000-0000-0000-000000000007/laps:monza/d:2026-08-14");
        // A board without splits: split is null, the tag is the board's.
        let plain = change(&board, "lb:{laps}", &event(), &RankMove { old_rank: Some(3), pushed_out: None, ..mv });
        let value: serde_json::Value = serde_json::from_slice(&plain.value).unwrap();
        assert_eq!((value["split"].clone(), value["old_rank"].clone()), (json!(null), json!(3)));
        assert_eq!(change_id(&event(), "lb:{laps}", "all"), "00000000-0000-0000-0000-000000000007/laps/all");
    }
}
