//! Validation of `[board.integrity]`: each rule's limit and action, and
//! whether it can apply to the board's mode at all (`gain_over` needs a
//! total, `jump_over` a best kept on `all_time`), each refusal naming its field.

use std::time::Duration;

use super::field::{At, Errors};
use super::raw::{RawHides, RawIntegrity, RawLimit, RawRule};
use crate::board::integrity::{parse_jump, Action, Integrity, Jump};
use crate::board::Mode;
use crate::period::PeriodKind;

pub(super) fn integrity(
    at: At,
    raw: &RawIntegrity,
    mode: Option<Mode>,
    periods: &[PeriodKind],
    e: &mut Errors,
) -> Integrity {
    let f = |name: &str| at.field(&format!("integrity.{name}"));
    let mut out = Integrity::default();
    if let Some(r) = &raw.score_over {
        out.score_over =
            action(&f("score_over.action"), r, e).zip(amount(&f("score_over.limit"), r, e)).map(|(a, l)| (l, a));
        no_window(&f("score_over.window"), r, e);
    }
    if let Some(r) = &raw.gain_over {
        if mode.is_some_and(|m| m != Mode::Sum) {
            e.push(f("gain_over"), "gain_over adds up a player's points in a window: it applies to sum boards only");
        }
        let window = match &r.window {
            Some(w) => e.duration_at_least(&f("gain_over.window"), w, Duration::from_millis(1), "1ms"),
            None => {
                e.push(f("gain_over.window"), "is required: the sliding window of event time, e.g. \"1h\"");
                None
            }
        };
        let limit = amount(&f("gain_over.limit"), r, e);
        if let (Some(a), Some(l), Some(w)) = (action(&f("gain_over.action"), r, e), limit, window) {
            out.gain_over = Some((l, w.as_millis().min(i64::MAX as u128 / 4) as i64, a));
        }
    }
    if let Some(r) = &raw.jump_over {
        if mode.is_some_and(|m| m != Mode::Best) {
            e.push(
                f("jump_over"),
                "jump_over compares a new best with the previous one: it applies to best boards only",
            );
        } else if !periods.contains(&PeriodKind::AllTime) {
            e.push(f("jump_over"), "jump_over compares with the player's all-time best: add all_time to periods");
        }
        let limit = match &r.limit {
            RawLimit::Int(n) if *n > 0 => Some(Jump::Amount(*n)),
            RawLimit::Int(_) => {
                e.push(f("jump_over.limit"), "an amount must be at least 1");
                None
            }
            RawLimit::Text(t) => parse_jump(t).map_err(|m| e.push(f("jump_over.limit"), m)).ok(),
        };
        no_window(&f("jump_over.window"), r, e);
        out.jump_over = action(&f("jump_over.action"), r, e).zip(limit).map(|(a, l)| (l, a));
    }
    if let Some(h) = &raw.hold_hides_after {
        out.hides_after = hides(&f("hold_hides_after"), h, e);
    }
    if out.hides_after.is_some() && !out.holds() {
        e.push(f("hold_hides_after"), "no rule of this board holds events (action = \"hold\"): nothing would count");
    }
    out
}

fn action(field: &str, r: &RawRule, e: &mut Errors) -> Option<Action> {
    match r.action.as_str() {
        "reject" => Some(Action::Reject),
        "hold" => Some(Action::Hold),
        other => {
            e.push(field, format!("'{other}' is not one of reject, hold"));
            None
        }
    }
}

/// An integer limit (`score_over`, `gain_over`): a ratio needs a previous best.
fn amount(field: &str, r: &RawRule, e: &mut Errors) -> Option<i64> {
    match &r.limit {
        RawLimit::Int(n) if n.unsigned_abs() <= crate::score::MAX_EXACT as u64 => Some(*n),
        RawLimit::Int(_) => {
            e.push(field, "must be within the scores' range (|limit| <= 2^53 - 1)");
            None
        }
        RawLimit::Text(t) => {
            e.push(field, format!("'{t}' is not an integer (only jump_over takes a ratio)"));
            None
        }
    }
}

fn no_window(field: &str, r: &RawRule, e: &mut Errors) {
    if r.window.is_some() {
        e.push(field, "only gain_over takes a window");
    }
}

fn hides(field: &str, h: &RawHides, e: &mut Errors) -> Option<(u32, i64)> {
    let count = e.within(&format!("{field}.count"), h.count, 1..=1_000_000);
    let window = e.duration_at_least(&format!("{field}.window"), &h.window, Duration::from_millis(1), "1ms");
    Some((count? as u32, window?.as_millis().min(i64::MAX as u128 / 4) as i64))
}
