//! What the apply script answers (pure, so it is unit tested): each event's
//! result, the codes the scripts share with Rust, and the reply decoded.

use crate::event::rule::rule_of_code;
use crate::event::Rule;

/// What the apply script did with one event on one board tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyResult {
    Applied,
    /// The `event_id` marker was already set: a producer retry.
    DuplicateEvent,
    /// The record's offset was already applied on this tag: a redelivery.
    DuplicateOffset,
    /// The script refused the event; the code maps to an `event::Reason`
    /// (an integrity rule's refusal carries the value that broke it).
    Refused(i64),
    /// An integrity rule refused the event (`action = "reject"`): the rule
    /// and the value that broke it.
    RuleRefused(Rule, i64),
    /// An integrity rule held the event for review: the rule and the value
    /// that broke it.
    Held(Rule, i64),
    /// Held, and the player has now had `hold_hides_after` events held
    /// within its window: they are to be hidden.
    HeldPastLimit(Rule, i64),
}

/// The error code a script answers when its tag is not registered: the
/// tag's data is gone (`lib/registered.lua`, [`crate::store::StoreError::Lost`]).
pub(in crate::store) const LOST: &str = "LOST";
/// The error code an apply call answers when a precondition on the offsets
/// the call before records does not hold; it did nothing (`lib/offsets.lua`).
pub(in crate::store) const STALE: &str = "STALE";

/// The scripts' codes for an event applied, a duplicate event id and a
/// redelivered offset (the scripts' `Codes`, made from these by
/// `scripts.rs`); a refusal's code is its `event::Reason::script_code`.
pub(in crate::store) const APPLIED: i64 = 1;
pub(in crate::store) const DUPLICATE: i64 = 2;
pub(in crate::store) const REDELIVERED: i64 = 3;

impl ApplyResult {
    pub(in crate::store) fn from_code(code: i64) -> ApplyResult {
        match code {
            APPLIED => ApplyResult::Applied,
            DUPLICATE => ApplyResult::DuplicateEvent,
            REDELIVERED => ApplyResult::DuplicateOffset,
            other => ApplyResult::Refused(other),
        }
    }
}

/// The apply script's reply: the number of events it saw, the microseconds
/// the call held Redis, then (event number, code) for each event not
/// applied, an integrity rule's code followed by the value that broke it.
/// `None` if it does not describe `n` events.
pub(in crate::store) fn decode_reply(reply: &[i64], n: usize) -> Option<(Vec<ApplyResult>, i64)> {
    let (&seen, rest) = reply.split_first()?;
    let (&took_us, mut rest) = rest.split_first()?;
    if seen != n as i64 {
        return None;
    }
    let mut out = vec![ApplyResult::Applied; n];
    while let [i, code, more @ ..] = rest {
        let i = usize::try_from(*i).ok().filter(|i| (1..=n).contains(i))?;
        out[i - 1] = match rule_of_code(*code) {
            None => {
                rest = more;
                ApplyResult::from_code(*code)
            }
            Some((rule, held)) => {
                let (&observed, more) = more.split_first()?;
                rest = more;
                if crate::event::rule::hides(*code) {
                    ApplyResult::HeldPastLimit(rule, observed)
                } else if held {
                    ApplyResult::Held(rule, observed)
                } else {
                    ApplyResult::RuleRefused(rule, observed)
                }
            }
        };
    }
    rest.is_empty().then_some((out, took_us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_lists_the_events_not_applied_and_must_count_them_all() {
        let (got, took) = decode_reply(&[3, 700, 2, 2, 3, 4], 3).unwrap();
        assert_eq!(got, [ApplyResult::Applied, ApplyResult::DuplicateEvent, ApplyResult::Refused(4)]);
        assert_eq!(took, 700, "the call's own time in Redis, µs");
        assert_eq!(decode_reply(&[2, 5], 2).unwrap().0, [ApplyResult::Applied; 2]);
        // A reply for another number of events, a pair cut short, an event
        // number out of range: the batch fails and is retried, nothing is guessed.
        assert!(decode_reply(&[2, 5], 3).is_none());
        assert!(decode_reply(&[3, 5, 2], 3).is_none());
        assert!(decode_reply(&[3, 5, 4, 2], 3).is_none());
        assert!(decode_reply(&[3, 5, 0, 2], 3).is_none());
        assert!(decode_reply(&[2], 2).is_none());
        assert!(decode_reply(&[], 0).is_none());
    }

    #[test]
    fn an_integrity_rules_code_carries_the_value_that_broke_it() {
        let held = crate::event::rule::held_code(Rule::GainOver);
        let refused = crate::event::rule::refused_code(Rule::JumpOver);
        let (got, _) = decode_reply(&[3, 9, 1, held, 5200, 3, refused, 40], 3).unwrap();
        assert_eq!(
            got,
            [
                ApplyResult::Held(Rule::GainOver, 5200),
                ApplyResult::Applied,
                ApplyResult::RuleRefused(Rule::JumpOver, 40)
            ]
        );
        assert!(decode_reply(&[1, 9, 1, held], 1).is_none(), "the value is missing");
    }
}
