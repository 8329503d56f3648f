//! Held events (score integrity): the records a landed batch's holds
//! produce to `kafka.review_topic`, one per event and board that held it,
//! again on every redelivery (at least once: a consumer dedupes by the
//! event id and board). Pure, so it is unit tested; `held` produces them and
//! holds their source partitions until they are acknowledged, as it does
//! dead letters.

use std::sync::Arc;

use rdkafka::message::{Header, OwnedHeaders};
use serde_json::{json, Value};

use crate::board::integrity::{Integrity, Jump};
use crate::board::{Board, Decision};
use crate::event::{Event, Rule};
use crate::kafka::transaction::OUTPUT_ID;
use crate::keys;
use crate::store::ApplyResult;

use super::held::Outgoing;
use super::record::{Decided, Item, Record};

/// The header naming the held event: `<event id>/<board>`.
pub const HELD_ID: &str = "rankflow-held-id";

/// A rule's limit as the config gave it (a number, or a ratio like `"3x"`).
pub fn limit_of(rules: &Integrity, rule: Rule) -> Value {
    match rule {
        Rule::ScoreOver => rules.score_over.map_or(Value::Null, |(l, _)| json!(l)),
        Rule::GainOver => rules.gain_over.map_or(Value::Null, |(l, _, _)| json!(l)),
        Rule::JumpOver => match rules.jump_over {
            Some((Jump::Amount(n), _)) => json!(n),
            Some((Jump::Ratio(milli), _)) => json!(ratio_text(milli)),
            None => Value::Null,
        },
        Rule::BetterThan => rules.better_than.map_or(Value::Null, |(l, _)| json!(l)),
    }
}

/// `3000` -> `"3x"`, `1500` -> `"1.5x"`.
fn ratio_text(milli: u32) -> String {
    let frac = format!("{:03}", milli % 1000);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("{}x", milli / 1000)
    } else {
        format!("{}.{frac}x", milli / 1000)
    }
}

/// The review record of `event` held on `board` (tag base `base`) by `rule`,
/// broken by `value` (the score, the window's total with it, or the previous
/// best): keyed by player, its JSON value, its headers.
pub fn record(board: &Board, base: &str, event: &Event, rule: Rule, value: i64) -> (String, Vec<u8>, OwnedHeaders) {
    let body = json!({
        "event_id": event.event_id.to_string(),
        "board": board.id(),
        "split": keys::split_of_base(base).map(|(_, split)| split),
        "player_id": event.player_id,
        "score": event.score,
        "ts": event.ts_ms,
        "rule": rule.as_str(),
        "limit": limit_of(board.integrity(), rule),
        "value": value,
    });
    let mut body = body;
    if let (Some(c), Some(scores)) = (board.columns(), &event.scores) {
        // A row: the submission's values, and the column the rule judged.
        body["scores"] = scores.values(c.names()).map(|v| c.scores(&v)).unwrap_or_default();
        body["column"] = json!(crate::board::integrity::rule_column(board, rule));
    }
    let id = format!("{}/{}", event.event_id, board.id());
    let output = format!("review/{id}");
    let headers = OwnedHeaders::new()
        .insert(Header { key: HELD_ID, value: Some(id.as_str()) })
        .insert(Header { key: OUTPUT_ID, value: Some(output.as_str()) });
    (event.player_id.clone(), body.to_string().into_bytes(), headers)
}

/// The `player_hidden` a hold that brought its player to `hold_hides_after`
/// makes: its id is the held event's and the board's, so that however often
/// the hold is redelivered, the player is hidden once.
pub fn hide(board: &Board, event: &Event) -> (String, Vec<u8>, OwnedHeaders) {
    let name = format!("rankflow-hold-hides/{}/{}", event.event_id, board.id());
    let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes());
    let body = json!({
        "event_id": id.to_string(),
        "type": "player_hidden",
        "player_id": event.player_id,
        "boards": [board.id()],
        "ts": event.ts_ms,
    });
    let output = format!("hide/{id}");
    let headers = OwnedHeaders::new().insert(Header { key: OUTPUT_ID, value: Some(output.as_str()) });
    (event.player_id.clone(), body.to_string().into_bytes(), headers)
}

/// The review records of one landed record, for `to`, one per board that
/// held it, and the hides for `admin` (the first admin topic).
pub fn outgoing(record: &Record, boards: &[Board], to: &Arc<str>, admin: Option<&Arc<str>>) -> Vec<Outgoing> {
    let Item::Event { event, decided, .. } = &record.item else { return Vec::new() };
    let mut out = Vec::new();
    for Decided { board, decision, result } in decided {
        let (rule, value, past) = match result {
            Some(ApplyResult::Held(rule, value)) => (rule, value, false),
            Some(ApplyResult::HeldPastLimit(rule, value)) => (rule, value, true),
            _ => continue,
        };
        let Decision::Write(w) = decision else { continue };
        let board = &boards[*board];
        let source = &record.origin;
        out.push(Outgoing::review(source, board.id(), to.clone(), self::record(board, &w.base, event, *rule, *value)));
        if let (true, Some(admin)) = (past, admin) {
            out.push(Outgoing::hide(source, admin.clone(), hide(board, event)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::integrity::Action;
    use crate::board::{BoardSpec, Mode};
    use crate::period::PeriodKind;
    use rdkafka::message::Headers;

    #[test]
    fn a_review_record_names_the_event_board_rule_limit_and_value() {
        let mut spec = BoardSpec::for_tests("points", Mode::Sum, &[PeriodKind::AllTime]);
        spec.integrity.gain_over = Some((5000, 3_600_000, Action::Hold));
        let board = Board::new(spec);
        let event = Event {
            event_id: uuid::Uuid::from_u128(7),
            kind: "match_finished".into(),
            player_id: "alice".into(),
            score: Some(900),
            scores: None,
            ts_ms: 1_700_000_000_000,
            attrs: Default::default(),
            meta: None,
            team: None,
        };
        let (key, value, headers) = record(&board, "lb:{points:eu}", &event, Rule::GainOver, 5300);
        assert_eq!(key, "alice");
        let v: Value = serde_json::from_slice(&value).unwrap();
        assert_eq!(v["event_id"], event.event_id.to_string());
        assert_eq!((v["board"].as_str(), v["split"].as_str()), (Some("points"), Some("eu")));
        assert_eq!(
            (v["rule"].as_str(), v["limit"].as_i64(), v["value"].as_i64()),
            (Some("gain_over"), Some(5000), Some(5300))
        );
        assert_eq!((v["score"].as_i64(), v["ts"].as_i64()), (Some(900), Some(1_700_000_000_000)));
        let h = headers.get(0);
        assert_eq!((h.key, h.value), (HELD_ID, Some(format!("{}/points", event.event_id).as_bytes())));
    }

    #[test]
    fn ratios_read_as_written() {
        assert_eq!(ratio_text(3000), "3x");
        assert_eq!(ratio_text(1500), "1.5x");
        assert_eq!(ratio_text(1250), "1.25x");
        assert_eq!(ratio_text(1005), "1.005x");
    }
}
