//! The apply script's `rules` header (score integrity, see
//! `scripts/apply/rules.lua`): each rule's limit and whether it holds, and
//! the keys and prefixes of held events and gain windows.

use super::header::Fields;
use crate::board::integrity::{Action, Integrity, Jump};
use crate::keys;

/// The header's `rules` (see `scripts/apply/rules.lua`): each rule's
/// limit and whether it holds (on a board ranked by several columns,
/// `rows`, the column it judges, from 1), and where held events go
/// (`held`, `queue`: their KEYS indexes) and gain windows are (`gain_key`).
pub(in crate::store) fn rules_header(
    r: &Integrity,
    rows: bool,
    base: &str,
    (held, queue, gain): (i64, i64, i64),
) -> Vec<u8> {
    let mut h = Fields::new("rules");
    let column = |m: &mut Fields, c: u8| {
        if rows {
            m.int("column", i64::from(c) + 1);
        }
    };
    if let Some((limit, action)) = r.score_over {
        let mut m = Fields::new("rule");
        m.int("limit", limit);
        m.bool("hold", action == Action::Hold);
        column(&mut m, r.columns.score_over);
        h.raw("score", &m.finish());
    }
    if let Some((limit, window, action)) = r.gain_over {
        let mut m = Fields::new("rule");
        m.int("limit", limit);
        m.int("window", window);
        m.bool("hold", action == Action::Hold);
        h.raw("gain", &m.finish());
    }
    if let Some((jump, action)) = r.jump_over {
        let mut m = Fields::new("rule");
        match jump {
            Jump::Amount(n) => m.int("amount", n),
            Jump::Ratio(milli) => m.int("ratio", i64::from(milli)),
        }
        m.bool("hold", action == Action::Hold);
        column(&mut m, r.columns.jump_over);
        h.raw("jump", &m.finish());
    }
    if let Some((limit, action)) = r.better_than {
        let mut m = Fields::new("rule");
        m.int("limit", limit);
        m.bool("hold", action == Action::Hold);
        column(&mut m, r.columns.better_than);
        h.raw("better", &m.finish());
    }
    if let Some((count, window)) = r.hides_after {
        let mut m = Fields::new("hides");
        m.int("count", i64::from(count));
        m.int("window", window);
        m.str("prefix", &keys::held_times_prefix(base));
        h.raw("hides", &m.finish());
    }
    h.int("held", held);
    h.int("queue", queue);
    if r.gain_over.is_some() {
        h.int("gain_key", gain);
    }
    h.str("pqueue", &keys::held_player_prefix(base));
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_header_names_each_rules_limits_and_the_keys_of_held_events() {
        let r = Integrity {
            score_over: Some((100, Action::Hold)),
            gain_over: Some((5000, 3_600_000, Action::Reject)),
            jump_over: Some((Jump::Ratio(3000), Action::Hold)),
            hides_after: Some((3, 86_400_000)),
            ..Integrity::default()
        };
        let h = rules_header(&r, false, "lb:{p}", (4, 5, 6));
        assert_eq!(
            crate::store::conn::msgpack::render(&mut h.as_slice()),
            "{score: {limit: 100, hold: true}, gain: {limit: 5000, window: 3600000, hold: false}, \
             jump: {ratio: 3000, hold: true}, hides: {count: 3, window: 86400000, prefix: lb:{p}:_heldt:}, \
             held: 4, queue: 5, gain_key: 6, pqueue: lb:{p}:_heldp:}"
        );
        let amount = Integrity { jump_over: Some((Jump::Amount(250), Action::Reject)), ..Integrity::default() };
        let h = rules_header(&amount, false, "lb:{p}", (1, 2, 3));
        assert_eq!(
            crate::store::conn::msgpack::render(&mut h.as_slice()),
            "{jump: {amount: 250, hold: false}, held: 1, queue: 2, pqueue: lb:{p}:_heldp:}"
        );
        // On a board with columns each rule names its column, from 1.
        let rows = Integrity {
            score_over: Some((50, Action::Reject)),
            better_than: Some((30_000, Action::Hold)),
            columns: crate::board::integrity::RuleColumns { score_over: 0, jump_over: 0, better_than: 1 },
            ..Integrity::default()
        };
        let h = rules_header(&rows, true, "lb:{p}", (1, 2, 3));
        assert_eq!(
            crate::store::conn::msgpack::render(&mut h.as_slice()),
            "{score: {limit: 50, hold: false, column: 1}, better: {limit: 30000, hold: true, column: 2}, held: 1, \
             queue: 2, pqueue: lb:{p}:_heldp:}"
        );
    }
}
