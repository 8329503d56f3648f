//! Score integrity: the rules a board checks in the event's atomic step
//! after its own refusals (`max_score`, `rate_limit`, attempts), and what a
//! broken rule does, refuse the event or hold it for review. The rules are
//! decided by `scripts/apply/rules.lua`; this is their configuration and
//! the names Rust and the script share.

pub use crate::event::rule::{held_code, refused_code, rule_of_code, Rule};

/// What a broken rule does to the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Dead-lettered naming the rule (`score_over`, `gain_over`, `jump_over`).
    Reject,
    /// Counted nowhere on the board until a reviewer approves it.
    Hold,
}

/// How far beyond the player's previous best a new best may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Jump {
    /// By more than this amount.
    Amount(i64),
    /// By more than this ratio, in thousandths (`"3x"`: 3000): on `desc`
    /// boards above best x ratio, on `asc` boards below best / ratio.
    Ratio(u32),
}

/// A board's `[board.integrity]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Integrity {
    /// An event's score (its delta on `sum` boards) above this.
    pub score_over: Option<(i64, Action)>,
    /// `sum` boards: the player's applied total in `(ts - window, ts]` of
    /// event time would pass this: (limit, window ms, action).
    pub gain_over: Option<(i64, i64, Action)>,
    /// `best` boards: a new best beyond the player's all-time best.
    pub jump_over: Option<(Jump, Action)>,
    /// Boards ranked by several columns: a submission's value better than
    /// this by its column's order (below it on `asc`, above on `desc`).
    pub better_than: Option<(i64, Action)>,
    /// `hold_hides_after`: this many events held within this window (ms)
    /// hide the player.
    pub hides_after: Option<(u32, i64)>,
    /// Boards ranked by several columns: the column each rule judges.
    pub columns: RuleColumns,
}

/// The column (0-based, in the board's order) `score_over`, `jump_over`
/// and `better_than` judge on a board ranked by several columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RuleColumns {
    pub score_over: u8,
    pub jump_over: u8,
    pub better_than: u8,
}

impl Integrity {
    /// Whether any rule can hold an event (the board keeps a review queue).
    pub fn holds(&self) -> bool {
        self.score_over.is_some_and(|r| r.1 == Action::Hold)
            || self.gain_over.is_some_and(|r| r.2 == Action::Hold)
            || self.jump_over.is_some_and(|r| r.1 == Action::Hold)
            || self.better_than.is_some_and(|r| r.1 == Action::Hold)
    }

    pub fn any(&self) -> bool {
        self.score_over.is_some() || self.gain_over.is_some() || self.jump_over.is_some() || self.better_than.is_some()
    }

    /// Which rules are on, in [`Rule::ALL`]'s order.
    pub fn on(&self) -> [bool; 4] {
        [self.score_over.is_some(), self.gain_over.is_some(), self.jump_over.is_some(), self.better_than.is_some()]
    }
}

/// The column `rule` judges on `board`, if it ranks by several columns.
pub fn rule_column(board: &super::Board, rule: Rule) -> Option<&str> {
    let c = board.integrity().columns;
    let i = match rule {
        Rule::ScoreOver => c.score_over,
        Rule::JumpOver => c.jump_over,
        Rule::BetterThan => c.better_than,
        Rule::GainOver => return None,
    };
    board.columns()?.names().nth(usize::from(i))
}

/// `limit` of `jump_over`: an integer amount, or a ratio such as `"3x"` or
/// `"1.5x"` (above 1, at most three decimals).
pub fn parse_jump(text: &str) -> Result<Jump, String> {
    let Some(num) = text.strip_suffix('x') else {
        return text
            .parse::<i64>()
            .map(Jump::Amount)
            .map_err(|_| format!("'{text}' is not an amount or a ratio like \"3x\""));
    };
    let bad = || format!("'{text}' is not a ratio above 1 like \"3x\" or \"1.5x\" (at most three decimals)");
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if whole.is_empty() || frac.len() > 3 || !whole.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let milli = whole.parse::<u32>().ok().and_then(|w| w.checked_mul(1000)).ok_or_else(bad)?
        + format!("{frac:0<3}").parse::<u32>().map_err(|_| bad())?;
    if milli <= 1000 {
        return Err(bad());
    }
    Ok(Jump::Ratio(milli))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jump_limits_are_amounts_or_ratios_above_one() {
        assert_eq!(parse_jump("500"), Ok(Jump::Amount(500)));
        assert_eq!(parse_jump("3x"), Ok(Jump::Ratio(3000)));
        assert_eq!(parse_jump("1.5x"), Ok(Jump::Ratio(1500)));
        assert_eq!(parse_jump("1.25x"), Ok(Jump::Ratio(1250)));
        for bad in ["1x", "0.5x", "x", "3.1234x", "three", "-2x", "1e3x", ""] {
            assert!(parse_jump(bad).is_err(), "{bad}");
        }
    }
}
