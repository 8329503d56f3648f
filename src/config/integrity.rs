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

#[cfg(test)]
mod tests {
    use crate::board::integrity::{Action, Jump};
    use crate::config::{load_str, ConfigError};

    fn text(kafka: &str, mode: &str, periods: &str, integrity: &str) -> String {
        format!(
            "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n{kafka}\n\
             [[board]]\nid = \"p\"\non = [\"m\"]\nmode = \"{mode}\"\nperiods = [{periods}]\n\
             [board.integrity]\n{integrity}\n"
        )
    }

    fn fields(text: &str) -> Vec<String> {
        match load_str(text, Vec::new()) {
            Err(ConfigError::Invalid(v)) => v.into_iter().map(|e| e.field).collect(),
            other => panic!("expected field errors, got {other:?}"),
        }
    }

    #[test]
    fn rules_parse_and_each_refusal_names_its_field() {
        let review = "review_topic = \"r\"\nadmin_topics = [\"a\"]";
        let sum = |rules: &str| text(review, "sum", "\"all_time\"", rules);
        let s = load_str(
            &sum("score_over = { limit = 100, action = \"hold\" }\n\
                  gain_over = { limit = 5000, window = \"1h\", action = \"reject\" }\n\
                  hold_hides_after = { count = 3, window = \"1d\" }"),
            Vec::new(),
        )
        .unwrap();
        let r = s.boards[0].integrity();
        assert_eq!(r.score_over, Some((100, Action::Hold)));
        assert_eq!(r.gain_over, Some((5000, 3_600_000, Action::Reject)));
        assert_eq!(r.hides_after, Some((3, 86_400_000)));
        let best = |periods: &str, rules: &str| text(review, "best", periods, rules);
        let s =
            load_str(&best("\"all_time\"", "jump_over = { limit = \"2.5x\", action = \"hold\" }"), Vec::new()).unwrap();
        assert_eq!(s.boards[0].integrity().jump_over, Some((Jump::Ratio(2500), Action::Hold)));
        // Each refusal names its field.
        for (text, field) in [
            (sum("score_over = { limit = 100, action = \"flag\" }"), "board[0].integrity.score_over.action"),
            (sum("score_over = { limit = \"3x\", action = \"hold\" }"), "board[0].integrity.score_over.limit"),
            (sum("score_over = { limit = 1, window = \"1h\", action = \"hold\" }"), "board[0].integrity.score_over.window"),
            (sum("gain_over = { limit = 100, action = \"hold\" }"), "board[0].integrity.gain_over.window"),
            (sum("jump_over = { limit = 100, action = \"hold\" }"), "board[0].integrity.jump_over"),
            (best("\"all_time\"", "gain_over = { limit = 1, window = \"1h\", action = \"hold\" }"), "board[0].integrity.gain_over"),
            (best("\"daily\"", "jump_over = { limit = 100, action = \"hold\" }"), "board[0].integrity.jump_over"),
            (best("\"all_time\"", "jump_over = { limit = \"1x\", action = \"hold\" }"), "board[0].integrity.jump_over.limit"),
            (best("\"all_time\"", "jump_over = { limit = 0, action = \"hold\" }"), "board[0].integrity.jump_over.limit"),
            (sum("score_over = { limit = 1, action = \"reject\" }\nhold_hides_after = { count = 2, window = \"1h\" }"), "board[0].integrity.hold_hides_after"),
            (sum("score_over = { limit = 1, action = \"hold\" }\nhold_hides_after = { count = 0, window = \"1h\" }"), "board[0].integrity.hold_hides_after.count"),
            (text("", "sum", "\"all_time\"", "score_over = { limit = 1, action = \"hold\" }"), "kafka.review_topic"),
            (text("review_topic = \"d\"", "sum", "\"all_time\"", "score_over = { limit = 1, action = \"hold\" }"), "kafka.review_topic"),
            (
                text("review_topic = \"r\"", "sum", "\"all_time\"", "score_over = { limit = 1, action = \"hold\" }\nhold_hides_after = { count = 2, window = \"1h\" }"),
                "kafka.admin_topics",
            ),
        ] {
            assert!(fields(&text).contains(&field.to_string()), "{field}: {:?}", fields(&text));
        }
        // A board whose rules only refuse needs no review topic.
        assert!(load_str(
            &text("", "sum", "\"all_time\"", "score_over = { limit = 1, action = \"reject\" }"),
            Vec::new()
        )
        .is_ok());
    }
}
