//! From Redis's answers to each record's final outcome: pure functions,
//! unit tested without servers.
//!
//! A batch's script results come back per board tag, in the order the
//! tag's writes were sent; [`distribute`] hands each back to its record and
//! board. [`fold`] then decides the record: applied if any board applied
//! it; held if none applied it and any held it for review; a duplicate if
//! none applied or held it and any had seen it; otherwise dead-lettered
//! with every board's reason.

use crate::board::Decision;
use crate::event::{Event, Reason, Rejection, Rule};
use crate::store::ApplyResult;

use super::record::Item;

/// What one board made of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tally {
    Applied,
    /// Seen before: `"event_id"` (a producer retry) or `"offset"` (a redelivery).
    Duplicate(&'static str),
    Refused(Reason),
    /// Held for review by an integrity rule: the rule and the value that broke it.
    Held(Rule, i64),
}

/// A record's final outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Final {
    Applied,
    Duplicate,
    /// Held for review by a board and applied by none: not a dead letter.
    Held,
    /// Nothing to apply (no board takes its type) or done apart (an erasure).
    Skipped,
    DeadLetter(Vec<Rejection>),
}

/// Where each script result of a batch goes: per board tag, in the order
/// the tag's writes were sent, (item index, decision index).
pub type Routes = Vec<Vec<(usize, usize)>>;

/// Writes each script result into the decision it answers.
pub fn distribute(items: &mut [Item], routes: &Routes, results: Vec<Vec<ApplyResult>>) {
    for (codes, route) in results.into_iter().zip(routes) {
        for (code, &(i, d)) in codes.into_iter().zip(route) {
            if let Item::Event { results, .. } = &mut items[i] {
                results[d] = Some(code);
            }
        }
    }
}

/// Each board's tally of one record: (board index, tally), in decision order.
pub fn tallies(decisions: &[(usize, Decision)], results: &[Option<ApplyResult>]) -> Vec<(usize, Tally)> {
    let mut out = Vec::with_capacity(decisions.len());
    for ((b, decision), result) in decisions.iter().zip(results) {
        let tally = match (decision, result) {
            (Decision::Refused(reason), _) => Tally::Refused(*reason),
            (Decision::Write(_), Some(ApplyResult::Applied)) => Tally::Applied,
            (Decision::Write(_), Some(ApplyResult::DuplicateEvent)) => Tally::Duplicate("event_id"),
            (Decision::Write(_), Some(ApplyResult::DuplicateOffset)) => Tally::Duplicate("offset"),
            (Decision::Write(_), Some(ApplyResult::Refused(code))) => {
                Tally::Refused(Reason::from_script_code(*code).unwrap_or(Reason::ScoreOutOfRange))
            }
            (Decision::Write(_), Some(ApplyResult::RuleRefused(rule, _))) => Tally::Refused(Reason::of_rule(*rule)),
            (Decision::Write(_), Some(ApplyResult::Held(rule, value) | ApplyResult::HeldPastLimit(rule, value))) => {
                Tally::Held(*rule, *value)
            }
            (Decision::Write(_), None) => continue, // cannot happen: every write has a result
        };
        out.push((*b, tally));
    }
    out
}

/// A record's final outcome from its item and its boards' tallies;
/// `board_id` names a board index in a refusal's detail, and `why` adds the
/// field at fault to an `invalid_score` refusal (`Router::refusal_detail`).
pub fn fold<'a>(
    item: &Item,
    tallies: &[(usize, Tally)],
    board_id: impl Fn(usize) -> &'a str,
    why: impl Fn(usize, &Event) -> Option<String>,
) -> Final {
    let event = match item {
        Item::Skipped | Item::Admin { .. } => return Final::Skipped,
        Item::Rejected(r) => return Final::DeadLetter(vec![r.clone()]),
        Item::Event { event, .. } => event,
    };
    if tallies.iter().any(|(_, t)| *t == Tally::Applied) {
        return Final::Applied;
    }
    if tallies.iter().any(|(_, t)| matches!(t, Tally::Held(..))) {
        return Final::Held;
    }
    if tallies.iter().any(|(_, t)| matches!(t, Tally::Duplicate(_))) {
        return Final::Duplicate;
    }
    let refusals = tallies
        .iter()
        .filter_map(|(b, t)| match t {
            Tally::Refused(reason) => {
                let field = match reason {
                    Reason::InvalidScore => why(*b, event).map(|w| format!(": {w}")),
                    _ => None,
                };
                Some(Rejection::new(*reason, format!("board {}: {reason}{}", board_id(*b), field.unwrap_or_default())))
            }
            _ => None,
        })
        .collect();
    Final::DeadLetter(refusals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::{BoardWrite, WriteParams};
    use crate::event::Event;

    fn write() -> Decision {
        let params = WriteParams::plain_sum();
        Decision::Write(BoardWrite {
            base: "lb:{points}".into(),
            params,
            periods: Vec::new(),
            num: 5,
            tie: 0,
            ts: 0,
            values: Vec::new(),
        })
    }

    fn event_item(decisions: Vec<(usize, Decision)>) -> Item {
        let results = vec![None; decisions.len()];
        let event = Event {
            event_id: uuid::Uuid::from_u128(1),
            kind: "match_finished".into(),
            player_id: "alice".into(),
            score: Some(5),
            scores: None,
            ts_ms: 0,
            attrs: Default::default(),
            meta: None,
        };
        Item::Event { event, decisions, results }
    }

    fn ids(b: usize) -> &'static str {
        ["points", "best", "laps"][b]
    }

    fn outcome(item: &Item) -> Final {
        let Item::Event { decisions, results, .. } = item else { return fold(item, &[], ids, |_, _| None) };
        fold(item, &tallies(decisions, results), ids, |_, _| None)
    }

    #[test]
    fn results_come_back_per_tag_in_send_order_to_their_record_and_board() {
        let mut items = vec![
            event_item(vec![(0, write()), (1, write())]),
            Item::Skipped,
            event_item(vec![(0, write()), (2, Decision::Refused(Reason::MissingSplit)), (1, write())]),
        ];
        // Tag 0 took the writes of board 0, tag 1 those of board 1.
        let routes: Routes = vec![vec![(0, 0), (2, 0)], vec![(0, 1), (2, 2)]];
        let results = vec![
            vec![ApplyResult::Applied, ApplyResult::DuplicateEvent],
            vec![ApplyResult::Refused(4), ApplyResult::DuplicateOffset],
        ];
        distribute(&mut items, &routes, results);
        let Item::Event { results: r0, .. } = &items[0] else { panic!() };
        assert_eq!(r0, &[Some(ApplyResult::Applied), Some(ApplyResult::Refused(4))]);
        let Item::Event { results: r2, .. } = &items[2] else { panic!() };
        assert_eq!(r2, &[Some(ApplyResult::DuplicateEvent), None, Some(ApplyResult::DuplicateOffset)]);
    }

    #[test]
    fn a_record_is_applied_if_any_board_applied_it_even_when_others_refused() {
        let mut item = event_item(vec![(0, write()), (1, write())]);
        distribute(
            item_slice(&mut item),
            &vec![vec![(0, 0), (0, 1)]],
            vec![vec![ApplyResult::Refused(5), ApplyResult::Applied]],
        );
        assert_eq!(outcome(&item), Final::Applied);
    }

    fn item_slice(item: &mut Item) -> &mut [Item] {
        std::slice::from_mut(item)
    }

    #[test]
    fn a_record_no_board_applied_but_one_had_seen_is_a_duplicate_not_a_dead_letter() {
        let mut item = event_item(vec![(0, write()), (1, write()), (2, Decision::Refused(Reason::MissingSplit))]);
        distribute(
            item_slice(&mut item),
            &vec![vec![(0, 0), (0, 1)]],
            vec![vec![ApplyResult::Refused(4), ApplyResult::DuplicateOffset]],
        );
        assert_eq!(outcome(&item), Final::Duplicate);
        let Item::Event { decisions, results, .. } = &item else { panic!() };
        assert_eq!(
            tallies(decisions, results),
            [
                (0, Tally::Refused(Reason::ScoreOutOfRange)),
                (1, Tally::Duplicate("offset")),
                (2, Tally::Refused(Reason::MissingSplit))
            ]
        );
    }

    #[test]
    fn a_record_every_board_refused_is_dead_lettered_with_each_boards_reason() {
        let mut item = event_item(vec![(0, write()), (2, Decision::Refused(Reason::MissingSplit))]);
        distribute(item_slice(&mut item), &vec![vec![(0, 0)]], vec![vec![ApplyResult::Refused(5)]]);
        let Final::DeadLetter(reasons) = outcome(&item) else { panic!("not a dead letter") };
        let got: Vec<(Reason, &str)> = reasons.iter().map(|r| (r.reason, r.detail.as_str())).collect();
        assert_eq!(
            got,
            [(Reason::RateLimited, "board points: rate_limited"), (Reason::MissingSplit, "board laps: missing_split")]
        );
    }

    #[test]
    fn rejected_records_are_dead_letters_and_skipped_ones_are_final_at_once() {
        let rejected = Item::Rejected(Rejection::new(Reason::InvalidJson, "not JSON"));
        assert!(matches!(outcome(&rejected), Final::DeadLetter(r) if r[0].reason == Reason::InvalidJson));
        assert_eq!(outcome(&Item::Skipped), Final::Skipped);
    }
}
