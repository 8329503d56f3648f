//! Validation of `[board.integrity]`: each rule's limit and action, and
//! whether it can apply to the board's mode at all (`gain_over` needs a
//! total, `jump_over` a best kept on `all_time`); on a board ranked by
//! several columns, the `column` each rule judges. Each refusal names its
//! field.

use std::time::Duration;

use super::field::{At, Errors};
use super::raw::{RawHides, RawIntegrity, RawLimit, RawRule};
use crate::board::columns::{Columns, RowMode};
use crate::board::integrity::{parse_jump, Action, Integrity, Jump};
use crate::board::Mode;
use crate::period::PeriodKind;

/// What the rules depend on of their board: its mode (a board of one
/// score), or its columns, and its periods.
pub(super) struct Ranked<'a> {
    pub mode: Option<Mode>,
    pub columns: Option<&'a Columns>,
    pub periods: &'a [PeriodKind],
}

pub(super) fn integrity(at: At, raw: &RawIntegrity, board: Ranked<'_>, e: &mut Errors) -> Integrity {
    let f = |name: &str| at.field(&format!("integrity.{name}"));
    let mut out = Integrity::default();
    let column = |name: &str, r: &RawRule, e: &mut Errors| column_of(&f(name), r, board.columns, e);
    if let Some(r) = &raw.score_over {
        out.columns.score_over = column("score_over", r, e);
        out.score_over =
            action(&f("score_over.action"), r, e).zip(amount(&f("score_over.limit"), r, e)).map(|(a, l)| (l, a));
        no_window(&f("score_over.window"), r, e);
    }
    if let Some(r) = &raw.gain_over {
        if board.columns.is_some() {
            e.push(f("gain_over"), "gain_over adds up one score in a window: not available on a board with columns");
        } else if board.mode.is_some_and(|m| m != Mode::Sum) {
            e.push(f("gain_over"), "gain_over adds up a player's points in a window: it applies to sum boards only");
        }
        out.gain_over = gain(&f("gain_over"), r, e);
    }
    if let Some(r) = &raw.jump_over {
        let best_rows = board.columns.is_some_and(|c| c.row == RowMode::Best);
        if board.mode.is_some_and(|m| m != Mode::Best) || (board.columns.is_some() && !best_rows) {
            e.push(
                f("jump_over"),
                "jump_over compares a new best with the previous one: it applies to best boards (and to boards of \
                 columns with row = \"best\") only",
            );
        } else if !board.periods.contains(&PeriodKind::AllTime) {
            e.push(f("jump_over"), "jump_over compares with the player's all-time best: add all_time to periods");
        }
        out.columns.jump_over = column("jump_over", r, e);
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
    if let Some(r) = &raw.better_than {
        if board.columns.is_none() && board.mode.is_some() {
            e.push(
                f("better_than"),
                "better_than judges a column by its order: it applies to boards with columns (use score_over)",
            );
        }
        out.columns.better_than = column("better_than", r, e);
        out.better_than =
            action(&f("better_than.action"), r, e).zip(amount(&f("better_than.limit"), r, e)).map(|(a, l)| (l, a));
        no_window(&f("better_than.window"), r, e);
    }
    if let Some(h) = &raw.hold_hides_after {
        out.hides_after = hides(&f("hold_hides_after"), h, e);
    }
    if out.hides_after.is_some() && !out.holds() {
        e.push(f("hold_hides_after"), "no rule of this board holds events (action = \"hold\"): nothing would count");
    }
    out
}

/// `gain_over`'s limit, window and action.
fn gain(field: &str, r: &RawRule, e: &mut Errors) -> Option<(i64, i64, Action)> {
    let window = match &r.window {
        Some(w) => e.duration_at_least(&format!("{field}.window"), w, Duration::from_millis(1), "1ms"),
        None => {
            e.push(format!("{field}.window"), "is required: the sliding window of event time, e.g. \"1h\"");
            None
        }
    };
    let limit = amount(&format!("{field}.limit"), r, e);
    let action = action(&format!("{field}.action"), r, e);
    if let Some(c) = &r.column {
        e.push(format!("{field}.column"), format!("'{c}': only a rule of a board with columns names one"));
    }
    Some((limit?, window?.as_millis().min(i64::MAX as u128 / 4) as i64, action?))
}

/// The column a rule names (0-based): required on a board with columns,
/// refused on a board of one score.
fn column_of(field: &str, r: &RawRule, columns: Option<&Columns>, e: &mut Errors) -> u8 {
    let at = format!("{field}.column");
    match (columns, &r.column) {
        (Some(c), Some(name)) => match c.names().position(|n| n == name) {
            Some(i) => i as u8,
            None => {
                e.push(at, format!("'{name}' names no column of this board"));
                0
            }
        },
        (Some(_), None) => {
            e.push(at, "is required on a board ranked by several columns: the column the rule judges");
            0
        }
        (None, Some(name)) => {
            e.push(at, format!("'{name}': only a rule of a board with columns names one"));
            0
        }
        (None, None) => 0,
    }
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
        // Only a board with columns takes better_than, and only its rules name a column.
        for (text, field) in [
            (sum("better_than = { limit = 1, action = \"hold\" }"), "board[0].integrity.better_than"),
            (
                sum("score_over = { limit = 1, column = \"kills\", action = \"hold\" }"),
                "board[0].integrity.score_over.column",
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

    /// A board with columns `row` and `rules`.
    fn rows(row: &str, periods: &str, rules: &str) -> String {
        format!(
            "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\nreview_topic = \"r\"\n\
             [[board]]\nid = \"p\"\non = [\"m\"]\nperiods = [{periods}]\nrow = \"{row}\"\n\
             columns = [{{ name = \"deaths\", mode = \"min\", order = \"asc\" }}, {{ name = \"time_ms\", mode = \"min\", order = \"asc\" }}]\n\
             [board.integrity]\n{rules}\n"
        )
    }

    #[test]
    fn rules_on_a_board_with_columns_each_name_the_column_they_judge() {
        let s = load_str(
            &rows(
                "best",
                "\"all_time\"",
                "score_over = { column = \"deaths\", limit = 50, action = \"reject\" }\n\
                 jump_over = { column = \"time_ms\", limit = \"3x\", action = \"hold\" }\n\
                 better_than = { column = \"time_ms\", limit = 30000, action = \"hold\" }",
            ),
            Vec::new(),
        )
        .unwrap();
        let r = s.boards[0].integrity();
        assert_eq!((r.score_over, r.jump_over), (Some((50, Action::Reject)), Some((Jump::Ratio(3000), Action::Hold))));
        assert_eq!(r.better_than, Some((30_000, Action::Hold)));
        assert_eq!((r.columns.score_over, r.columns.jump_over, r.columns.better_than), (0, 1, 1));
        assert_eq!(crate::board::integrity::rule_column(&s.boards[0], crate::event::Rule::BetterThan), Some("time_ms"));
        let best = |rules: &str| rows("best", "\"all_time\"", rules);
        for (text, field) in [
            (best("score_over = { limit = 50, action = \"hold\" }"), "board[0].integrity.score_over.column"),
            (
                best("better_than = { column = \"kills\", limit = 1, action = \"hold\" }"),
                "board[0].integrity.better_than.column",
            ),
            (best("gain_over = { limit = 1, window = \"1h\", action = \"hold\" }"), "board[0].integrity.gain_over"),
            (
                best("better_than = { column = \"deaths\", limit = \"3x\", action = \"hold\" }"),
                "board[0].integrity.better_than.limit",
            ),
            (
                rows("columns", "\"all_time\"", "jump_over = { column = \"time_ms\", limit = 5, action = \"hold\" }"),
                "board[0].integrity.jump_over",
            ),
            (
                rows("best", "\"daily\"", "jump_over = { column = \"time_ms\", limit = 5, action = \"hold\" }"),
                "board[0].integrity.jump_over",
            ),
        ] {
            assert!(fields(&text).contains(&field.to_string()), "{field}: {:?}", fields(&text));
        }
    }
}
