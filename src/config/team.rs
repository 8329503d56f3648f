//! `team = { leave, counts_after }`: a board that ranks teams. Checked
//! against the board's other settings: a team board is a `sum` or `best`
//! board of one score, unsharded and unsplit, and takes none of the
//! per-player machinery that a team's score cannot follow yet.

use std::time::Duration;

use super::field::{At, Errors};
use super::raw::{RawBoard, RawTeam};
use crate::board::team::{Leave, Team};
use crate::board::{Mode, TieBreak};

/// The board's team settings, each problem recorded under `board[i].team`.
pub fn team(at: At, b: &RawBoard, mode: Option<Mode>, tie_break: Option<TieBreak>, e: &mut Errors) -> Option<Team> {
    let raw: &RawTeam = b.team.as_ref()?;
    let field = at.field("team");
    let leave = match Leave::parse(&raw.leave) {
        Some(l) => Some(l),
        None => {
            e.push(format!("{field}.leave"), format!("'{}' must be keep or forfeit", raw.leave));
            None
        }
    };
    let counts_after = match &raw.counts_after {
        Some(c) => e.take(&format!("{field}.counts_after"), c)?,
        None => Duration::ZERO,
    };
    if b.columns.is_some() {
        e.push(&field, "a team board ranks teams by one score: remove columns or team");
    } else if matches!(mode, Some(Mode::Latest)) {
        e.push(&field, "a team's score is the sum or the best of its members': mode must be sum or best");
    }
    if tie_break == Some(TieBreak::Earliest) {
        e.push(&field, "teams tie by team id: remove tie_break = \"earliest\" or team");
    }
    let refused: [(&str, bool); 10] = [
        ("shards", b.shards.is_some()),
        ("split_by", b.split_by.is_some()),
        ("league", b.league.is_some()),
        ("rolling", !b.rolling.is_empty()),
        ("max_members", b.max_members.is_some()),
        ("integrity", b.integrity.is_some()),
        ("rate_limit", b.rate_limit.is_some()),
        ("max_attempts", b.max_attempts.is_some()),
        ("meta", b.meta),
        ("notify_top", b.notify_top.is_some()),
    ];
    for (name, set) in refused {
        if set {
            e.push(&field, format!("{name} is not supported on a team board yet: remove {name} or team"));
        }
    }
    if b.dense_rank == Some(true) {
        e.push(&field, "a team board keeps no dense-rank index: remove dense_rank or team");
    }
    Some(Team { leave: leave?, counts_after_ms: counts_after.as_millis().min(i64::MAX as u128) as i64 })
}
