//! Corrections and moderation: what an admin event does to the boards,
//! decided from the event, its record's timestamp and the configured boards
//! alone (pure: no I/O). The store carries the plan out with one atomic
//! `scripts/admin.lua` call per board tag it reaches.
//!
//! | type | reach | effect on each tag |
//! |---|---|---|
//! | `score_set` | one tag | the stored score in the named period, or every period holding `ts` |
//! | `score_adjusted` | one tag (`sum` boards) | adds the delta there |
//! | `player_removed` | one tag, or every split of the board | removes the player from one period or every one |
//! | `player_hidden` | every tag of the boards named (default all) | moves the player out of the ranked keys |
//! | `player_unhidden` | likewise | moves the player back, with every point earned meanwhile |
//! | `player_erased` | every tag | removes the player from every key |
//! | `player_tier_set` | one tag (league boards) | the tier of the player's next placement, kept by the next settlement |
//! | `review_approved`, `review_rejected` | the tag holding the held event | applies it once as if it had passed the rules, or drops it (by the apply script) |

use std::sync::Arc;

use crate::board::{Board, Mode, PeriodWrite, Router};
use crate::event::{valid_split_value, AdminEvent, AdminKind, Reason, Rejection};
use crate::period::id::PeriodRef;
use crate::period::Period;

/// Which board tags an admin event reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// One board tag: its key base.
    Tag(String),
    /// Every tag (each split) of these boards.
    Boards(Vec<String>),
    /// Every tag of every board.
    All,
}

/// What an admin event does on each tag it reaches.
#[derive(Clone, Debug, PartialEq)]
pub enum AdminOp {
    /// Stores `stored` (packed, see `score`) as the player's score in each period.
    Set {
        stored: i64,
        periods: Vec<Arc<PeriodWrite>>,
    },
    /// A board ranked by several columns: `row` (the bytes the rows hash
    /// keeps, see `board::columns`) replaces the player's row in each period.
    SetRow {
        row: Vec<u8>,
        periods: Vec<Arc<PeriodWrite>>,
    },
    /// Adds `delta` to the player's total in each period; `tie` is the
    /// tie-break component packed with the new total.
    Adjust {
        delta: i64,
        tie: i64,
        periods: Vec<Arc<PeriodWrite>>,
    },
    /// Removes the player from one period (its id, `...:final` for a sealed
    /// snapshot), or from every period, sealed and rolling ones included.
    Remove {
        period: Option<String>,
    },
    Hide,
    Unhide,
    Erase,
    /// Sets the league tier (its index) of the player's next placement.
    Tier(usize),
    /// Decides a held event (score integrity): carried out by the apply
    /// script on the tag holding it, never by `admin.lua`.
    Review {
        held: uuid::Uuid,
        approve: bool,
    },
    /// Team boards: hides a team from the reads (true), or shows it again;
    /// carried out by the team script, never by `admin.lua`.
    TeamHide {
        team: String,
        hide: bool,
    },
}

impl AdminOp {
    /// The op's name in `admin.lua`.
    pub fn script_name(&self) -> &'static str {
        match self {
            AdminOp::Set { .. } => "set",
            AdminOp::SetRow { .. } => "set_row",
            AdminOp::Adjust { .. } => "adjust",
            AdminOp::Remove { .. } => "remove",
            AdminOp::Hide => "hide",
            AdminOp::Unhide => "unhide",
            AdminOp::Erase => "erase",
            AdminOp::Tier(_) => "tier",
            AdminOp::Review { .. } => "review",
            AdminOp::TeamHide { .. } => "team_hide",
        }
    }
}

/// An admin event, checked against the boards.
#[derive(Clone, Debug, PartialEq)]
pub struct AdminPlan {
    pub reach: Reach,
    pub op: AdminOp,
}

/// `team_hidden`, `team_unhidden`: the team board's tag, and the team.
fn team_plan(event: &AdminEvent, router: &Router) -> Result<AdminPlan, Rejection> {
    let id = event.board.as_deref().unwrap_or_default();
    let board = router.board(id).ok_or_else(|| invalid(format!("board '{id}' is not a configured board")))?;
    if board.team().is_none() {
        let detail = format!("{} applies to team boards; '{id}' ranks players", event.kind);
        return Err(Rejection::new(Reason::NotAllowed, detail));
    }
    let team = event.team_id.clone().unwrap_or_default();
    let op = AdminOp::TeamHide { team, hide: event.kind == AdminKind::TeamHidden };
    Ok(AdminPlan { reach: Reach::Tag(router.base(board, None, "")), op })
}

/// A correction sets a player's score: a team board has none of its own.
fn not_a_team_board(board: &Board, event: &AdminEvent) -> Result<(), Rejection> {
    if board.team().is_none() {
        return Ok(());
    }
    let detail =
        format!("{} sets a player's score; board '{}' ranks teams by their members' scores", event.kind, board.id());
    Err(Rejection::new(Reason::NotAllowed, detail))
}

fn invalid(detail: impl Into<String>) -> Rejection {
    Rejection::new(Reason::InvalidAdmin, detail)
}

/// Checks an admin event against the boards and says what it does.
/// `record_ts_ms` decides, as for score events, which periods have expired
/// or closed.
pub fn plan(event: &AdminEvent, router: &Router, record_ts_ms: i64) -> Result<AdminPlan, Rejection> {
    use AdminKind::*;
    match event.kind {
        PlayerErased => Ok(AdminPlan { reach: Reach::All, op: AdminOp::Erase }),
        TeamHidden | TeamUnhidden => team_plan(event, router),
        ReviewApproved | ReviewRejected => {
            let id = event.board.as_deref().unwrap_or_default();
            let board = router.board(id).ok_or_else(|| invalid(format!("board '{id}' is not a configured board")))?;
            if !board.integrity().holds() {
                let detail = format!("board '{id}' has no integrity rule with action = \"hold\": it holds no events");
                return Err(Rejection::new(Reason::NotAllowed, detail));
            }
            let held = event.held_event_id.ok_or_else(|| invalid("held_event_id is missing"))?;
            // The held event is on one tag of the board (of its split, if named).
            split_of(event, board)?;
            let op = AdminOp::Review { held, approve: event.kind == ReviewApproved };
            Ok(AdminPlan { reach: Reach::Boards(vec![id.to_string()]), op })
        }
        PlayerTierSet => {
            let id = event.board.as_deref().unwrap_or_default();
            let board = router.board(id).ok_or_else(|| invalid(format!("board '{id}' is not a configured board")))?;
            let league = board.league().ok_or_else(|| {
                Rejection::new(
                    Reason::NotAllowed,
                    format!("player_tier_set applies to league boards; '{id}' has no league"),
                )
            })?;
            let name = event.tier.as_deref().unwrap_or_default();
            let tier = league.tier_index(name).ok_or_else(|| {
                invalid(format!("'{name}' is not a tier of board '{id}' (tiers: {})", league.tiers.join(", ")))
            })?;
            let split = split_of(event, board)?;
            Ok(AdminPlan { reach: Reach::Tag(router.base(board, split, &event.player_id)), op: AdminOp::Tier(tier) })
        }
        PlayerHidden | PlayerUnhidden => {
            let reach = match &event.boards {
                None => Reach::All,
                Some(ids) => {
                    if let Some(unknown) = ids.iter().find(|id| router.board(id).is_none()) {
                        return Err(invalid(format!("boards names '{unknown}', which is not a configured board")));
                    }
                    Reach::Boards(ids.clone())
                }
            };
            let op = if event.kind == PlayerHidden { AdminOp::Hide } else { AdminOp::Unhide };
            Ok(AdminPlan { reach, op })
        }
        ScoreSet | ScoreAdjusted | PlayerRemoved => {
            let id = event.board.as_deref().unwrap_or_default();
            let i = router.index_of(id).ok_or_else(|| invalid(format!("board '{id}' is not a configured board")))?;
            let board = &router.boards()[i];
            let split = split_of(event, board)?;
            if event.kind == PlayerRemoved {
                if let Some(p) = &event.period {
                    removable_period(p, board)?;
                }
                let reach = match split {
                    Some(s) => Reach::Tag(router.base(board, Some(s), &event.player_id)),
                    None if board.split_by().is_some() => Reach::Boards(vec![id.to_string()]),
                    None => Reach::Tag(router.base(board, None, &event.player_id)),
                };
                return Ok(AdminPlan { reach, op: AdminOp::Remove { period: event.period.clone() } });
            }
            if let (Some(c), Some(spec)) = (board.columns(), board.column_spec()) {
                if event.kind == ScoreAdjusted {
                    return Err(Rejection::new(
                        Reason::NotAllowed,
                        format!("score_adjusted carries one delta; board '{id}' ranks by several columns"),
                    ));
                }
                let scores = event.scores.as_ref().ok_or_else(|| {
                    Rejection::new(
                        Reason::MissingField,
                        format!("field 'scores' is missing (board '{id}' ranks by several columns)"),
                    )
                })?;
                let values = scores.values(c.names()).map_err(|why| Rejection::new(Reason::InvalidScore, why))?;
                let base = router.base(board, split, &event.player_id);
                let periods = correction_periods(router, i, split, &base, event, record_ts_ms)?;
                let row = spec.stored_row(&values, event.ts_ms);
                return Ok(AdminPlan { reach: Reach::Tag(base), op: AdminOp::SetRow { row, periods } });
            }
            let value = event.value.ok_or_else(|| {
                Rejection::new(
                    Reason::MissingField,
                    format!("field 'score' is missing (board '{id}' ranks by one score)"),
                )
            })?;
            not_a_team_board(board, event)?;
            if event.kind == ScoreAdjusted && board.mode() != Mode::Sum {
                return Err(Rejection::new(
                    Reason::NotAllowed,
                    format!(
                        "score_adjusted applies to sum boards only; board '{id}' is a {} board",
                        board.mode().as_str()
                    ),
                ));
            }
            let packing = board.packing();
            let out_of_range = || {
                Rejection::new(
                    Reason::ScoreOutOfRange,
                    format!("{value} is outside the board's range ±{}", packing.max_value()),
                )
            };
            if value.abs() > packing.max_value() {
                return Err(out_of_range());
            }
            let base = router.base(board, split, &event.player_id);
            let periods = correction_periods(router, i, split, &base, event, record_ts_ms)?;
            let tie = packing.tie(event.ts_ms).ok_or_else(out_of_range)?;
            let op = match (event.kind, board.mode()) {
                (ScoreAdjusted, _) => AdminOp::Adjust { delta: value, tie, periods },
                (_, Mode::Sum) => AdminOp::Set { stored: value * packing.shift() + tie, periods },
                _ => AdminOp::Set { stored: packing.encode(value, event.ts_ms).ok_or_else(out_of_range)?, periods },
            };
            Ok(AdminPlan { reach: Reach::Tag(base), op })
        }
    }
}

/// The periods a correction writes: the one it names, or every period
/// holding its time.
fn correction_periods(
    router: &Router,
    i: usize,
    split: Option<&str>,
    base: &str,
    event: &AdminEvent,
    record_ts_ms: i64,
) -> Result<Vec<Arc<PeriodWrite>>, Rejection> {
    match &event.period {
        Some(p) => Ok(vec![named_period(router, i, split, base, p, record_ts_ms)?]),
        None => router
            .periods_at(i, split, base, event.ts_ms, record_ts_ms)
            .map_err(|r| Rejection::new(r, "no period of the board holding the event's time takes it")),
    }
}

/// The split an admin event names, checked against its board.
fn split_of<'a>(event: &'a AdminEvent, board: &Board) -> Result<Option<&'a str>, Rejection> {
    match (board.split_by(), event.split.as_deref()) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(invalid(format!("board '{}' has no splits", board.id()))),
        (Some(_), Some(s)) if valid_split_value(s) => Ok(Some(s)),
        (Some(_), Some(s)) => {
            Err(Rejection::new(Reason::InvalidSplit, format!("split '{s}' is not 1 to 64 of [A-Za-z0-9_-]")))
        }
        // A removal without a split reaches every split of the board.
        (Some(_), None)
            if matches!(
                event.kind,
                AdminKind::PlayerRemoved | AdminKind::ReviewApproved | AdminKind::ReviewRejected
            ) =>
        {
            Ok(None)
        }
        (Some(attr), None) => Err(Rejection::new(
            Reason::MissingSplit,
            format!("board '{}' is split by '{attr}': a {} names its split", board.id(), event.kind),
        )),
    }
}

/// A period of the board by id, as it is now: one the board keeps (a
/// calendar period or a window).
fn board_period(id: &str, board: &Board) -> Result<Period, Rejection> {
    let p = board.period_by_id(id).map_err(|e| invalid(format!("period: {e}")))?;
    let named = matches!(p.kind, crate::period::PeriodKind::Window | crate::period::PeriodKind::Schedule);
    if !named && !board.periods().contains(&p.kind) {
        return Err(invalid(format!("board '{}' keeps no {} periods", board.id(), p.kind)));
    }
    Ok(p)
}

/// A removal's period: one the board keeps, or its sealed snapshot.
fn removable_period(id: &str, board: &Board) -> Result<(), Rejection> {
    match PeriodRef::parse(id) {
        PeriodRef { sealed: true, text: live, .. } if board.close_after().is_some() => {
            board_period(live, board).map(|_| ())
        }
        PeriodRef { sealed: true, .. } => Err(invalid(format!("board '{}' does not seal its periods", board.id()))),
        PeriodRef { sealed: false, .. } => board_period(id, board).map(|_| ()),
    }
}

/// The write of a named period for a correction: refused like a score
/// event's when it has expired or closed by the record's time.
fn named_period(
    router: &Router,
    i: usize,
    split: Option<&str>,
    base: &str,
    id: &str,
    record_ts_ms: i64,
) -> Result<Arc<PeriodWrite>, Rejection> {
    let board = &router.boards()[i];
    let p = board_period(id, board)?;
    let write = match (p.kind, board.window_index(id), board.schedule_index(id)) {
        (crate::period::PeriodKind::Window, Some(w), _) => router.window_write(i, w, split, base),
        (crate::period::PeriodKind::Schedule, _, Some(s)) => {
            router.schedule_write(i, s, split, base, p.start_ms.unwrap_or(0))
        }
        _ => router.period_write(i, split, base, p.kind, p.start_ms.unwrap_or(0)),
    }
    .ok_or_else(|| invalid(format!("period '{id}' is outside the calendar")))?;
    if write.expire_at.is_some_and(|at| record_ts_ms >= at.saturating_mul(1000)) {
        return Err(Rejection::new(Reason::ExpiredPeriod, format!("period '{id}' has expired")));
    }
    if write.close_at.is_some_and(|c| record_ts_ms >= c) {
        return Err(Rejection::new(Reason::PeriodClosed, format!("period '{id}' is closed")));
    }
    Ok(write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::{BoardSpec, Order, TieBreak};
    use crate::period::PeriodKind;
    use crate::score::Packing;

    fn router() -> Router {
        use PeriodKind::*;
        let pts = BoardSpec::for_tests("pts", Mode::Sum, &[Daily, AllTime]);
        let mut best = BoardSpec::for_tests("best", Mode::Best, &[Weekly, AllTime]);
        best.tie_break = TieBreak::Earliest;
        best.packing = Packing::earliest(true, 0, 1000, 100 * 365 * 86_400_000, Some(1_000_000)).unwrap();
        let mut laps = BoardSpec::for_tests("laps", Mode::Best, &[AllTime]);
        laps.order = Order::Asc;
        laps.split_by = Some("track".into());
        Router::new(vec![Board::new(pts), Board::new(best), Board::new(laps)], "lb")
    }

    fn admin(kind: AdminKind, board: Option<&str>, value: i64) -> AdminEvent {
        let value = Some(value);
        AdminEvent {
            event_id: uuid::Uuid::nil(),
            kind,
            player_id: "alice".into(),
            ts_ms: chrono::DateTime::parse_from_rfc3339("2026-12-02T10:00:00Z").unwrap().timestamp_millis(),
            board: board.map(String::from),
            boards: None,
            split: None,
            period: None,
            value,
            scores: None,
            tier: None,
            held_event_id: None,
            reason: None,
            team_id: None,
        }
    }

    fn reason(e: &AdminEvent, r: &Router) -> Reason {
        plan(e, r, e.ts_ms).unwrap_err().reason
    }

    #[test]
    fn a_set_lands_in_every_period_holding_its_time_or_the_one_named() {
        let r = router();
        let e = admin(AdminKind::ScoreSet, Some("pts"), 110);
        let p = plan(&e, &r, e.ts_ms).unwrap();
        assert_eq!(p.reach, Reach::Tag("lb:{pts}".into()));
        let AdminOp::Set { stored, periods } = &p.op else { panic!("{p:?}") };
        assert_eq!(*stored, 110);
        let ids: Vec<&str> = periods.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["d:2026-12-02", "all"]);
        let mut one = e.clone();
        one.period = Some("d:2026-11-30".into());
        let AdminOp::Set { periods, .. } = plan(&one, &r, e.ts_ms).unwrap().op else { panic!() };
        assert_eq!(periods.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(), ["lb:{pts}:d:2026-11-30"]);
        // An earliest board packs the set score with its time, as an event's.
        let e = admin(AdminKind::ScoreSet, Some("best"), 110);
        let AdminOp::Set { stored, .. } = plan(&e, &r, e.ts_ms).unwrap().op else { panic!() };
        assert_eq!(stored, r.board("best").unwrap().packing().encode(110, e.ts_ms).unwrap());
    }

    #[test]
    fn what_cannot_be_done_is_refused_with_its_reason() {
        let r = router();
        assert_eq!(reason(&admin(AdminKind::ScoreAdjusted, Some("best"), 5), &r), Reason::NotAllowed);
        assert_eq!(reason(&admin(AdminKind::ScoreSet, Some("nope"), 5), &r), Reason::InvalidAdmin);
        assert_eq!(reason(&admin(AdminKind::ScoreSet, Some("best"), 1_000_001), &r), Reason::ScoreOutOfRange);
        assert_eq!(reason(&admin(AdminKind::ScoreSet, Some("laps"), 5), &r), Reason::MissingSplit);
        let mut e = admin(AdminKind::ScoreSet, Some("pts"), 5);
        e.split = Some("eu".into());
        assert_eq!(reason(&e, &r), Reason::InvalidAdmin);
        e.split = None;
        e.period = Some("w:2026-W49".into());
        assert_eq!(reason(&e, &r), Reason::InvalidAdmin, "pts keeps no weekly periods");
        e.period = Some("d:2026-01-01".into());
        assert_eq!(reason(&e, &r), Reason::ExpiredPeriod);
        let mut hide = admin(AdminKind::PlayerHidden, None, 0);
        hide.boards = Some(vec!["pts".into(), "nope".into()]);
        assert_eq!(reason(&hide, &r), Reason::InvalidAdmin);
    }

    #[test]
    fn a_set_on_a_board_with_columns_takes_a_value_for_every_column() {
        use crate::board::columns::{Column, ColumnMode, Columns, RowMode};
        let mut arena = BoardSpec::for_tests("arena", Mode::Best, &[PeriodKind::AllTime]);
        let col = |name: &str, mode, order| Column::new(name, mode, order);
        arena.columns = Some(Columns {
            list: vec![col("wins", ColumnMode::Sum, Order::Desc), col("time_ms", ColumnMode::Min, Order::Asc)],
            row: RowMode::Columns,
        });
        arena.dense_rank = false;
        let r = Router::new(vec![Board::new(arena)], "lb");
        let mut e = admin(AdminKind::ScoreSet, Some("arena"), 0);
        e.value = None;
        e.scores = crate::event::Scores::from_pairs("time_ms=53000,wins=3").ok();
        let AdminOp::SetRow { row, periods } = plan(&e, &r, e.ts_ms).unwrap().op else { panic!("a row set") };
        let spec = r.board("arena").unwrap().column_spec().unwrap();
        assert_eq!((row, periods.len()), (spec.stored_row(&[3, 53000], e.ts_ms), 1));
        e.scores = crate::event::Scores::from_pairs("wins=3").ok();
        let refused = plan(&e, &r, e.ts_ms).unwrap_err();
        assert_eq!((refused.reason, refused.detail.as_str()), (Reason::InvalidScore, "scores.time_ms is missing"));
        e.scores = None;
        assert_eq!(reason(&e, &r), Reason::MissingField);
        assert_eq!(reason(&admin(AdminKind::ScoreAdjusted, Some("arena"), 5), &r), Reason::NotAllowed);
        // A board of one score needs `score`.
        let mut only_scores = admin(AdminKind::ScoreSet, Some("pts"), 0);
        only_scores.value = None;
        assert_eq!(reason(&only_scores, &router()), Reason::MissingField);
    }

    #[test]
    fn removal_hiding_and_erasure_reach_the_tags_they_name() {
        let r = router();
        let e = admin(AdminKind::PlayerRemoved, Some("laps"), 0);
        assert_eq!(plan(&e, &r, 0).unwrap().reach, Reach::Boards(vec!["laps".into()]));
        let mut one = e.clone();
        one.split = Some("monza".into());
        one.period = Some("all".into());
        let p = plan(&one, &r, 0).unwrap();
        assert_eq!(
            (p.reach, p.op),
            (Reach::Tag("lb:{laps:monza}".into()), AdminOp::Remove { period: Some("all".into()) })
        );
        let mut sealed = admin(AdminKind::PlayerRemoved, Some("pts"), 0);
        sealed.period = Some("d:2026-12-01:final".into());
        assert_eq!(reason(&sealed, &r), Reason::InvalidAdmin, "pts does not seal");
        let hide = admin(AdminKind::PlayerHidden, None, 0);
        assert_eq!(plan(&hide, &r, 0).unwrap(), AdminPlan { reach: Reach::All, op: AdminOp::Hide });
        let erase = admin(AdminKind::PlayerErased, None, 0);
        assert_eq!(plan(&erase, &r, 0).unwrap(), AdminPlan { reach: Reach::All, op: AdminOp::Erase });
    }
}
