//! From Redis's answers to each record's final outcome: pure functions,
//! unit tested without servers.
//!
//! A batch's script results come back per board tag, in the order the
//! tag's writes were sent; [`distribute`] hands each back to its record and
//! board, with the moves it made. [`fold`] then decides the record: applied
//! if any board applied it; held if none applied it and any held it for
//! review; a duplicate if none applied or held it and any had seen it;
//! otherwise dead-lettered with every board's reason.

use crate::board::Decision;
use crate::event::{Event, Reason, Rejection, Rule};
use crate::store::{ApplyResult, BatchResults};

use super::record::{Decided, Item, Record};

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
/// the tag's writes were sent, (record index, index of the board's entry in
/// the record's `decided`).
pub type Routes = Vec<Vec<(usize, usize)>>;

/// Writes each script result into the board entry it answers, and each
/// move into the record that made it.
pub fn distribute(records: &mut [Record], routes: &Routes, landed: BatchResults) {
    let BatchResults { results, moves } = landed;
    for (codes, route) in results.into_iter().zip(routes) {
        for (code, &(i, d)) in codes.into_iter().zip(route) {
            if let Item::Event { decided, .. } = &mut records[i].item {
                decided[d].result = Some(code);
            }
        }
    }
    for (moved, route) in moves.into_iter().zip(routes) {
        for mv in moved {
            let Some(&(i, d)) = route.get(mv.event) else { continue };
            if let Item::Event { moves, .. } = &mut records[i].item {
                moves.push((d, mv));
            }
        }
    }
}

/// Each board's tally of one record: (board index, tally), in decision order.
pub fn tallies(decided: &[Decided]) -> Vec<(usize, Tally)> {
    let mut out = Vec::with_capacity(decided.len());
    for Decided { board, decision, result } in decided {
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
        out.push((*board, tally));
    }
    out
}

/// A record's final outcome from its item and its boards' tallies;
/// `board_id` names a board index in a refusal's detail, and `why` adds the
/// field at fault to an `invalid_score` refusal, the column and bound to a
/// `score_out_of_range` one, or the column a rule judged on a board with
/// columns (`Router::refusal_detail`).
pub fn fold<'a>(
    item: &Item,
    tallies: &[(usize, Tally)],
    board_id: impl Fn(usize) -> &'a str,
    why: impl Fn(usize, &Event, Reason) -> Option<String>,
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
                    Reason::InvalidScore | Reason::ScoreOutOfRange => why(*b, event, *reason),
                    r if r.rule().is_some() => why(*b, event, *reason),
                    _ => None,
                };
                let field = field.map(|w| format!(": {w}"));
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
    use crate::store::RankMove;
    use std::sync::Arc;

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

    fn record(item: Item) -> Record {
        let origin =
            super::super::record::Origin { topic: Arc::from("scores"), partition: 0, offset: 0, timestamp: None };
        Record { origin, source: None, item }
    }

    fn event_record<const N: usize>(decisions: [(usize, Decision); N]) -> Record {
        let event = Event {
            event_id: uuid::Uuid::from_u128(1),
            kind: "match_finished".into(),
            player_id: "alice".into(),
            score: Some(5),
            scores: None,
            ts_ms: 0,
            attrs: Default::default(),
            meta: None,
            team: None,
        };
        let decided = decisions.into_iter().map(|(board, decision)| Decided { board, decision, result: None });
        record(Item::Event { event, decided: decided.collect(), moves: Vec::new() })
    }

    fn landed(results: Vec<Vec<ApplyResult>>) -> BatchResults {
        let moves = vec![Vec::new(); results.len()];
        BatchResults { results, moves }
    }

    fn ids(b: usize) -> &'static str {
        ["points", "best", "laps"][b]
    }

    fn result(r: &Record, d: usize) -> Option<ApplyResult> {
        let Item::Event { decided, .. } = &r.item else { panic!("not an event") };
        decided[d].result
    }

    fn outcome(r: &Record) -> Final {
        let Item::Event { decided, .. } = &r.item else { return fold(&r.item, &[], ids, |_, _, _| None) };
        fold(&r.item, &tallies(decided), ids, |_, _, _| None)
    }

    fn mv(event: usize, new_rank: u32) -> RankMove {
        RankMove {
            event,
            period: "all".into(),
            old_rank: None,
            new_rank,
            stored: 5,
            row: None,
            passed: Vec::new(),
            pushed_out: None,
        }
    }

    #[test]
    fn results_and_moves_come_back_per_tag_in_send_order_to_their_record_and_board() {
        let mut records = vec![
            event_record([(0, write()), (1, write())]),
            record(Item::Skipped),
            event_record([(0, write()), (2, Decision::Refused(Reason::MissingSplit)), (1, write())]),
        ];
        // Tag 0 took the writes of board 0, tag 1 those of board 1.
        let routes: Routes = vec![vec![(0, 0), (2, 0)], vec![(0, 1), (2, 2)]];
        let mut batch = landed(vec![
            vec![ApplyResult::Applied, ApplyResult::DuplicateEvent],
            vec![ApplyResult::Refused(4), ApplyResult::DuplicateOffset],
        ]);
        // Tag 1's second event (record 2) moved, then tag 0's first (record 0).
        batch.moves = vec![vec![mv(0, 3)], vec![mv(1, 7)]];
        distribute(&mut records, &routes, batch);
        let r0 = [0, 1].map(|d| result(&records[0], d));
        assert_eq!(r0, [Some(ApplyResult::Applied), Some(ApplyResult::Refused(4))]);
        let r2 = [0, 1, 2].map(|d| result(&records[2], d));
        assert_eq!(r2, [Some(ApplyResult::DuplicateEvent), None, Some(ApplyResult::DuplicateOffset)]);
        let moves = |r: &Record| match &r.item {
            Item::Event { moves, .. } => moves.iter().map(|(d, m)| (*d, m.new_rank)).collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        assert_eq!((moves(&records[0]), moves(&records[2])), (vec![(0, 3)], vec![(2, 7)]));
    }

    #[test]
    fn a_record_is_applied_if_any_board_applied_it_even_when_others_refused() {
        let mut r = [event_record([(0, write()), (1, write())])];
        distribute(
            &mut r,
            &vec![vec![(0, 0), (0, 1)]],
            landed(vec![vec![ApplyResult::Refused(5), ApplyResult::Applied]]),
        );
        assert_eq!(outcome(&r[0]), Final::Applied);
    }

    #[test]
    fn a_record_no_board_applied_but_one_had_seen_is_a_duplicate_not_a_dead_letter() {
        let mut r = [event_record([(0, write()), (1, write()), (2, Decision::Refused(Reason::MissingSplit))])];
        distribute(
            &mut r,
            &vec![vec![(0, 0), (0, 1)]],
            landed(vec![vec![ApplyResult::Refused(4), ApplyResult::DuplicateOffset]]),
        );
        assert_eq!(outcome(&r[0]), Final::Duplicate);
        let Item::Event { decided, .. } = &r[0].item else { panic!() };
        assert_eq!(
            tallies(decided),
            [
                (0, Tally::Refused(Reason::ScoreOutOfRange)),
                (1, Tally::Duplicate("offset")),
                (2, Tally::Refused(Reason::MissingSplit))
            ]
        );
    }

    #[test]
    fn a_record_every_board_refused_is_dead_lettered_with_each_boards_reason() {
        let mut r = [event_record([(0, write()), (2, Decision::Refused(Reason::MissingSplit))])];
        distribute(&mut r, &vec![vec![(0, 0)]], landed(vec![vec![ApplyResult::Refused(5)]]));
        let Final::DeadLetter(reasons) = outcome(&r[0]) else { panic!("not a dead letter") };
        let got: Vec<(Reason, &str)> = reasons.iter().map(|r| (r.reason, r.detail.as_str())).collect();
        assert_eq!(
            got,
            [(Reason::RateLimited, "board points: rate_limited"), (Reason::MissingSplit, "board laps: missing_split")]
        );
    }

    #[test]
    fn rejected_records_are_dead_letters_and_skipped_ones_are_final_at_once() {
        let rejected = record(Item::Rejected(Rejection::new(Reason::InvalidJson, "not JSON")));
        assert!(matches!(outcome(&rejected), Final::DeadLetter(r) if r[0].reason == Reason::InvalidJson));
        assert_eq!(outcome(&record(Item::Skipped)), Final::Skipped);
    }
}
