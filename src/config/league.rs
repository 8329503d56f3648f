//! Validation of `[board.league]`: everything a league needs from its
//! board (rounds that are a schedule's or a window's periods, a seal to
//! settle at, one key tag, every player kept), each refusal naming its field.

use std::collections::HashSet;

use super::field::{At, Errors};
use super::raw::{RawLeague, RawShare};
use crate::board::league::{Idle, League, Share, COHORT_SIZES, TIER_COUNTS};
use crate::board::{Schedule, Window};

/// What the league needs to know of the rest of its board.
pub(super) struct Around {
    pub shards: Option<u32>,
    pub close_after: bool,
    pub max_members: Option<u64>,
}

pub(super) fn league(
    at: At,
    l: &RawLeague,
    windows: &[Window],
    schedules: &[Schedule],
    board: Around,
    e: &mut Errors,
) -> Option<League> {
    let f = |name: &str| at.field(&format!("league.{name}"));
    let before = e.0.len();
    if board.shards.is_some() {
        e.push(
            f("rounds"),
            "a league cannot be sharded: its cohorts are placed in one atomic step on one key tag; remove shards",
        );
    }
    if !board.close_after {
        e.push(at.field("close_after"), "a league settles each round when it is sealed: set close_after");
    }
    if board.max_members.is_some() {
        e.push(at.field("max_members"), "a league ranks every player of its cohorts: remove max_members");
    }
    if !windows.iter().any(|w| w.name == l.rounds) && !schedules.iter().any(|s| s.name == l.rounds) {
        e.push(f("rounds"), format!("'{}' names no schedule or window of this board", l.rounds));
    }
    if !TIER_COUNTS.contains(&l.tiers.len()) {
        e.push(f("tiers"), format!("must list {} to {} tiers, lowest first", TIER_COUNTS.start(), TIER_COUNTS.end()));
    }
    let mut seen = HashSet::new();
    for (j, t) in l.tiers.iter().enumerate() {
        let ok = (1..=32).contains(&t.len())
            && t.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
        if !ok {
            e.push(f(&format!("tiers[{j}]")), format!("'{t}' must match [a-z0-9_-]{{1,32}}"));
        } else if !seen.insert(t) {
            e.push(f(&format!("tiers[{j}]")), format!("'{t}' is listed twice"));
        }
    }
    let size = e.within(&f("cohort_size"), l.cohort_size, COHORT_SIZES.clone());
    let promote = share(&f("promote"), &l.promote, e);
    let demote = share(&f("demote"), &l.demote, e);
    if let (Some(size), Some(p), Some(d)) = (size, promote, demote) {
        if p.of_full(size) + d.of_full(size) > size {
            e.push(
                f("demote"),
                format!(
                    "promote and demote move {} of a full cohort of {size}: more than it holds",
                    p.of_full(size) + d.of_full(size)
                ),
            );
        }
    }
    let idle = match l.idle.as_str() {
        "keep" => Some(Idle::Keep),
        "demote" => Some(Idle::Demote),
        other => {
            e.push(f("idle"), format!("'{other}' is neither \"keep\" nor \"demote\""));
            None
        }
    };
    if e.0.len() > before {
        return None;
    }
    Some(League {
        rounds: l.rounds.clone(),
        tiers: l.tiers.clone(),
        cohort_size: size? as u32,
        promote: promote?,
        demote: demote?,
        idle: idle?,
    })
}

fn share(field: &str, raw: &RawShare, e: &mut Errors) -> Option<Share> {
    let parsed = match raw {
        RawShare::Count(n) => u32::try_from(*n).map(Share::Count).map_err(|_| format!("{n} is too large")),
        RawShare::Text(t) => Share::parse(t),
    };
    parsed.map_err(|reason| e.push(field, reason)).ok()
}

#[cfg(test)]
mod tests {
    use crate::board::league::{Idle, Share};
    use crate::config::{load_str, FieldError};

    fn board(board_extra: &str, league: &str) -> String {
        format!(
            "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n\
             [[board]]\nid = \"league\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"daily\"]\n\
             schedules = [{{ name = \"week\", cron = \"0 0 * * MON\", duration = \"7d\" }}]\n{board_extra}\n\
             [board.league]\n{league}"
        )
    }

    const GOOD: &str = "rounds = \"week\"\ntiers = [\"bronze\", \"silver\", \"gold\"]\ncohort_size = 30\n\
                        promote = 5\ndemote = \"20%\"\n";

    fn errors(text: &str) -> Vec<FieldError> {
        load_str(text, std::iter::empty()).expect_err("refused").fields().to_vec()
    }

    fn refused(errs: &[FieldError], field: &str, words: &str) -> bool {
        errs.iter().any(|e| e.field == field && e.reason.contains(words))
    }

    #[test]
    fn a_league_loads_with_its_shares_and_idle_default() {
        let s = load_str(&board("close_after = \"1h\"", GOOD), std::iter::empty()).unwrap();
        let l = s.boards[0].league().expect("a league");
        assert_eq!(
            (l.cohort_size, l.promote, l.demote, l.idle),
            (30, Share::Count(5), Share::Percent(20), Idle::Demote)
        );
        assert_eq!(l.tiers.len(), 3);
    }

    #[test]
    fn refusals_name_the_field() {
        let errs = errors(&board("", GOOD));
        assert!(refused(&errs, "board[0].close_after", "settles"), "{errs:?}");
        let errs = errors(&board("close_after = \"1h\"\nshards = 4", GOOD));
        assert!(refused(&errs, "board[0].league.rounds", "sharded"), "{errs:?}");
        let errs = errors(&board("close_after = \"1h\"", &GOOD.replace("\"week\"", "\"month\"")));
        assert!(refused(&errs, "board[0].league.rounds", "'month' names no schedule or window"), "{errs:?}");
        let errs = errors(&board("close_after = \"1h\"", &GOOD.replace("promote = 5", "promote = 25")));
        assert!(refused(&errs, "board[0].league.demote", "more than it holds"), "{errs:?}");
        let errs =
            errors(&board("close_after = \"1h\"", &GOOD.replace("\"bronze\", \"silver\", \"gold\"", "\"gold\"")));
        assert!(refused(&errs, "board[0].league.tiers", "2 to 32"), "{errs:?}");
        let errs = errors(&board("close_after = \"1h\"", &GOOD.replace("cohort_size = 30", "cohort_size = 1")));
        assert!(refused(&errs, "board[0].league.cohort_size", "between 2 and 1000"), "{errs:?}");
        let errs = errors(&board("close_after = \"1h\"", &format!("{GOOD}idle = \"sleep\"\n")));
        assert!(refused(&errs, "board[0].league.idle", "'sleep'"), "{errs:?}");
        let errs = errors(&board("close_after = \"1h\"", &GOOD.replace("demote = \"20%\"", "demote = \"half\"")));
        assert!(refused(&errs, "board[0].league.demote", "'half'"), "{errs:?}");
    }
}
