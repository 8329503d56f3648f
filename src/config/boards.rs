//! Validation of `[[board]]` tables into [`Board`]s. One function per
//! concern of a board (identity, periods and retention, top-K and rate
//! limits, sealing, rolling boards, the score packing), each recording
//! every problem under `board[i].<field>`.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::columns::Ranking;
use super::field::{At, Errors, FromText, Typed};
use super::raw::{
    RawBoard, RawRateLimit, RawRolling, RawSchedule, RawWindow, DEFAULT_TIE_EPOCH, DEFAULT_TIE_HORIZON,
    DEFAULT_TIE_RESOLUTION,
};
use crate::board::{Board, BoardSpec, Mode, Order, Rolling, Schedule, TieBreak, Window};
use crate::event::AdminKind;
use crate::period::PeriodKind;
use crate::score::Packing;

/// Every board, or `None` with each problem recorded.
pub fn boards(raw: Vec<RawBoard>, e: &mut Errors) -> Vec<Board> {
    if raw.is_empty() {
        e.push("board", "at least one [[board]] is required");
    }
    let mut seen_ids = HashSet::new();
    let mut out = Vec::new();
    for (i, b) in raw.into_iter().enumerate() {
        let at = At(i);
        if !is_board_id(&b.id) {
            e.push(at.field("id"), format!("'{}' must match [a-z0-9_-]{{1,64}}", b.id));
        } else if !seen_ids.insert(b.id.clone()) {
            e.push(at.field("id"), format!("'{}' is used by another board", b.id));
        }
        if let Some(board) = board(at, b, e) {
            out.push(board);
        }
    }
    out
}

fn board(at: At, b: RawBoard, e: &mut Errors) -> Option<Board> {
    event_types(at, &b.on, e);
    // A board with columns has neither mode nor order: the checks below
    // that depend on them see none.
    let (mode, order, columns) = match super::columns::ranking(at, &b, e) {
        Some(Ranking::One(mode, order)) => (Some(mode), Some(order), None),
        Some(Ranking::Columns(c)) => {
            super::columns::refusals(at, &b, e);
            (None, None, Some(c))
        }
        None => (None, None, None),
    };
    let tie_break = e.take(&at.field("tie_break"), &b.tie_break);
    let timezone = e.take(&at.field("timezone"), &b.timezone);
    let periods = periods(at, &b.periods, e);
    if let Some(s) = &b.split_by {
        if s.is_empty() || s.len() > 128 {
            e.push(at.field("split_by"), "must name an attrs key (1 to 128 bytes)");
        }
    }
    let retention = retention(at, &b.retention, e);
    top_k(at, b.max_members, mode, e);
    let rate_limit = b.rate_limit.as_ref().and_then(|r| rate_limit(at, r, e));
    let windows = windows(at, &b.windows, e);
    let schedules = timezone.map(|tz| schedules(at, &b.schedules, &windows, tz, e)).unwrap_or_default();
    let mut kinds = periods.clone();
    if !windows.is_empty() {
        kinds.push(PeriodKind::Window);
    }
    if !schedules.is_empty() {
        kinds.push(PeriodKind::Schedule);
    }
    let close_after = b.close_after.as_ref().and_then(|c| close_after(at, c, &kinds, &retention, e));
    let rolling = rolling(at, &b.rolling, &periods, mode, tie_break, e);
    for r in &rolling {
        if windows.iter().any(|w| w.name == r.name) || schedules.iter().any(|s| s.name == r.name) {
            e.push(at.field("rolling"), format!("'{}' is also a window's or a schedule's name", r.name));
        }
    }
    let shards = shards(at, &b, e);
    let notify_top = notify_top(at, &b, shards, e);
    let league = b.league.as_ref().and_then(|l| {
        let board = super::league::Around { shards, close_after: b.close_after.is_some(), max_members: b.max_members };
        super::league::league(at, l, &windows, &schedules, board, e)
    });
    let integrity = b.integrity.as_ref().map(|r| {
        let ranked = super::integrity::Ranked { mode, columns: columns.as_ref(), periods: &periods };
        super::integrity::integrity(at, r, ranked, e)
    });
    let team = super::team::team(at, &b, mode, tie_break, e);
    let packing = match columns {
        Some(_) => Packing::member(None).ok()?,
        None => packing(at, &b, order?, tie_break?, e)?,
    };
    Some(Board::new(BoardSpec {
        id: b.id,
        on: b.on,
        // Unused on a board with columns.
        mode: if columns.is_some() { Mode::Best } else { mode? },
        // A board with columns orders its members by ascending bytes (best first).
        order: if columns.is_some() { Order::Asc } else { order? },
        periods,
        timezone: timezone?,
        tie_break: tie_break?,
        split_by: b.split_by,
        packing,
        retention,
        max_members: b.max_members,
        rate_limit,
        dense_rank: b.dense_rank.unwrap_or(shards.is_none() && columns.is_none() && b.team.is_none()),
        meta: b.meta,
        max_attempts: b.max_attempts.filter(|&n| e.within(&at.field("max_attempts"), n, 1..=1_000_000).is_some()),
        close_after,
        rolling,
        windows,
        schedules,
        shards,
        league,
        notify_top,
        integrity: integrity.unwrap_or_default(),
        columns,
        team,
    }))
}

/// `notify_top`: 1 to 1000, within what top-K keeps, and not on a sharded
/// board (no one step sees a sharded board's ranks).
fn notify_top(at: At, b: &RawBoard, shards: Option<u32>, e: &mut Errors) -> Option<u32> {
    let n = b.notify_top?;
    let field = at.field("notify_top");
    e.within(&field, n, 1..=1000)?;
    if shards.is_some() {
        e.push(
            field,
            "a sharded board's ranks are decided across its shards, never in one step: remove notify_top or shards",
        );
        return None;
    }
    if let Some(k) = b.max_members.filter(|&k| k < n) {
        e.push(field, format!("must not exceed max_members ({k}): the board keeps only its best {k}"));
        return None;
    }
    Some(n as u32)
}

/// `shards`: 2 to 256, and only with what a sharded board keeps exact.
fn shards(at: At, b: &RawBoard, e: &mut Errors) -> Option<u32> {
    let n = b.shards?;
    e.within(&at.field("shards"), u64::from(n), 2..=256)?;
    if b.dense_rank == Some(true) {
        e.push(
            at.field("dense_rank"),
            "a sharded board cannot keep dense ranks exact (the shards' distinct values overlap); remove dense_rank or shards",
        );
    }
    let best =
        b.mode.as_ref().and_then(|m| m.value.as_ref().ok()) == Some(&Mode::Best) || b.row.as_deref() == Some("best");
    if b.max_members.is_some() && !best {
        e.push(
            at.field("max_members"),
            "top-K trimming on a sharded board needs mode = \"best\" (or row = \"best\" with columns): what a latest \
             board's trimming keeps depends on history the shards do not share",
        );
    }
    Some(n)
}

fn is_board_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn event_types(at: At, on: &[String], e: &mut Errors) {
    if on.is_empty() {
        e.push(at.field("on"), "must list at least one event type");
    }
    for (j, t) in on.iter().enumerate() {
        if t.is_empty() || t.len() > 128 {
            e.push(at.field(&format!("on[{j}]")), "event types are 1 to 128 bytes");
        } else if AdminKind::parse(t).is_some() {
            e.push(at.field(&format!("on[{j}]")), format!("'{t}' is reserved by rankflow for admin events"));
        } else if crate::event::team::joined(t).is_some() {
            let why = format!("'{t}' is a membership event, which every team board takes: list score events only");
            e.push(at.field(&format!("on[{j}]")), why);
        }
    }
}

fn periods(at: At, raw: &[Typed<PeriodKind>], e: &mut Errors) -> Vec<PeriodKind> {
    let mut periods = Vec::new();
    if raw.is_empty() {
        e.push(at.field("periods"), "must list at least one period");
    }
    for (j, p) in raw.iter().enumerate() {
        let field = at.field(&format!("periods[{j}]"));
        match e.take(&field, p) {
            Some(kind) if periods.contains(&kind) => e.push(field, format!("'{}' is listed twice", p.text)),
            Some(kind) => periods.push(kind),
            None => {}
        }
    }
    periods
}

fn retention(at: At, raw: &BTreeMap<String, Typed<Duration>>, e: &mut Errors) -> BTreeMap<PeriodKind, Duration> {
    let mut retention = BTreeMap::new();
    for (name, keep) in raw {
        let field = at.field(&format!("retention.{name}"));
        let kind = match name.as_str() {
            "window" => Some(PeriodKind::Window),
            "schedule" => Some(PeriodKind::Schedule),
            other => PeriodKind::parse(other),
        };
        match kind {
            Some(PeriodKind::AllTime) => e.push(field, "all_time boards never expire"),
            Some(kind) => {
                if let Some(d) = e.take(&field, keep) {
                    retention.insert(kind, d);
                }
            }
            None => e.push(field, "is not a period name"),
        }
    }
    retention
}

fn top_k(at: At, max_members: Option<u64>, mode: Option<Mode>, e: &mut Errors) {
    match (max_members, mode) {
        (Some(_), Some(Mode::Sum)) => e.push(
            at.field("max_members"),
            "top-K trimming is refused on sum boards: a trimmed member's total cannot be rebuilt, so its later points would count from zero",
        ),
        (Some(n), _) => {
            e.within(&at.field("max_members"), n, 1..=1_000_000_000);
        }
        _ => {}
    }
}

/// `(events, window ms)`.
fn rate_limit(at: At, r: &RawRateLimit, e: &mut Errors) -> Option<(u64, i64)> {
    let window = e.duration_at_least(&at.field("rate_limit.window"), &r.window, Duration::from_millis(1), "1ms");
    if r.events == 0 {
        e.push(at.field("rate_limit.events"), "must be at least 1");
        return None;
    }
    Some((r.events, window?.as_millis().min(i64::MAX as u128 / 4) as i64))
}

fn close_after(
    at: At,
    raw: &Typed<Duration>,
    periods: &[PeriodKind],
    retention: &BTreeMap<PeriodKind, Duration>,
    e: &mut Errors,
) -> Option<Duration> {
    let after = e.take(&at.field("close_after"), raw)?;
    if !periods.is_empty() && periods.iter().all(|&k| k == PeriodKind::AllTime) {
        e.push(at.field("close_after"), "all_time never ends, so there is no period to close");
    }
    for &kind in periods {
        let keep = retention.get(&kind).copied().or_else(|| kind.default_retention());
        if let Some(keep) = keep {
            if keep <= after {
                e.push(
                    at.field("close_after"),
                    format!("must be shorter than the {kind} retention ({keep:?}): the period would expire before it is sealed"),
                );
            }
        }
    }
    Some(after)
}

fn rolling(
    at: At,
    raw: &[RawRolling],
    periods: &[PeriodKind],
    mode: Option<Mode>,
    tie_break: Option<TieBreak>,
    e: &mut Errors,
) -> Vec<Rolling> {
    let mut rolling: Vec<Rolling> = Vec::new();
    for (j, r) in raw.iter().enumerate() {
        let g = |name: &str| at.field(&format!("rolling[{j}].{name}"));
        let refresh = e.duration_at_least(&g("refresh"), &r.refresh, Duration::from_secs(1), "1s");
        if !is_rolling_name(&r.name) {
            e.push(g("name"), format!("'{}' must match [a-z0-9_]{{1,32}} and not be a period name", r.name));
        } else if rolling.iter().any(|x| x.name == r.name) {
            e.push(g("name"), format!("'{}' is used by another rolling board", r.name));
        }
        e.within(&g("days"), r.days, 1..=366);
        if !periods.contains(&PeriodKind::Daily) {
            e.push(g("name"), "a rolling board is a union of daily keys: add \"daily\" to periods");
        }
        match mode {
            Some(Mode::Latest) => e.push(
                g("name"),
                "refused on latest boards: a union of daily values cannot tell which day's value is the newest",
            ),
            Some(Mode::Sum) if tie_break == Some(TieBreak::Earliest) => e.push(
                g("name"),
                "refused on sum boards with tie_break = \"earliest\": adding the days would add their packed tie-break times too",
            ),
            _ => {}
        }
        if let Some(refresh) = refresh {
            rolling.push(Rolling { name: r.name.clone(), days: r.days as u32, refresh });
        }
    }
    rolling
}

/// A window's or a schedule's name: a key segment, not a period kind's name.
fn is_named_period(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
        && PeriodKind::parse(name).is_none()
        && name != "all"
}

fn schedules(at: At, raw: &[RawSchedule], windows: &[Window], tz: chrono_tz::Tz, e: &mut Errors) -> Vec<Schedule> {
    let mut out: Vec<Schedule> = Vec::new();
    for (j, s) in raw.iter().enumerate() {
        let g = |name: &str| at.field(&format!("schedules[{j}].{name}"));
        if !is_named_period(&s.name) {
            e.push(g("name"), format!("'{}' must match [a-z0-9_-]{{1,32}} and not be a period name", s.name));
            continue;
        }
        if raw[..j].iter().any(|o| o.name == s.name) || windows.iter().any(|w| w.name == s.name) {
            e.push(g("name"), format!("'{}' is used by another schedule or window", s.name));
        }
        let Some(duration) = e.duration_at_least(&g("duration"), &s.duration, Duration::from_secs(60), "1m") else {
            continue;
        };
        match Schedule::new(&s.name, &s.cron, duration, tz) {
            Ok(schedule) => out.push(schedule),
            Err(err @ crate::board::ScheduleError::Overlap(_)) => e.push(g("duration"), err.to_string()),
            Err(err) => e.push(g("cron"), err.to_string()),
        }
    }
    out
}

fn windows(at: At, raw: &[RawWindow], e: &mut Errors) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    for (j, w) in raw.iter().enumerate() {
        let g = |name: &str| at.field(&format!("windows[{j}].{name}"));
        let named = is_named_period(&w.name);
        if !named {
            e.push(g("name"), format!("'{}' must match [a-z0-9_-]{{1,32}} and not be a period name", w.name));
        } else if out.iter().any(|o| o.name == w.name) {
            e.push(g("name"), format!("'{}' is used by another window", w.name));
        }
        let (from, to) = (e.take(&g("from"), &w.from), e.take(&g("to"), &w.to));
        if let (Some(from), Some(to)) = (from, to) {
            if to.0 <= from.0 {
                e.push(g("to"), "must be after from: a window is [from, to)");
            } else if named {
                out.push(Window { name: w.name.clone(), from_ms: from.0, to_ms: to.0 });
            }
        }
    }
    out
}

/// A rolling board's name: a key segment that cannot be mistaken for a period.
fn is_rolling_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        && PeriodKind::parse(name).is_none()
        && name != "all"
}

/// A typed field as written, or its default text when absent.
fn or_default<T: FromText + Clone>(typed: &Option<Typed<T>>, text: &str) -> Typed<T> {
    typed.clone().unwrap_or_else(|| Typed::default_text(text))
}

/// How the board's values (and tie-break times) become stored scores.
fn packing(at: At, b: &RawBoard, order: Order, tie_break: TieBreak, e: &mut Errors) -> Option<Packing> {
    match tie_break {
        TieBreak::Member => {
            for (name, set) in [
                ("tie_epoch", b.tie_epoch.is_some()),
                ("tie_resolution", b.tie_resolution.is_some()),
                ("tie_horizon", b.tie_horizon.is_some()),
            ] {
                if set {
                    e.push(at.field(name), "only applies with tie_break = \"earliest\"");
                }
            }
            Packing::member(b.max_score).map_err(|reason| e.push(at.field("max_score"), reason)).ok()
        }
        TieBreak::Earliest => {
            let epoch = e.take(&at.field("tie_epoch"), &or_default(&b.tie_epoch, DEFAULT_TIE_EPOCH));
            let resolution = e.duration_at_least(
                &at.field("tie_resolution"),
                &or_default(&b.tie_resolution, DEFAULT_TIE_RESOLUTION),
                Duration::from_millis(1),
                "1ms",
            );
            let horizon = e.take(&at.field("tie_horizon"), &or_default(&b.tie_horizon, DEFAULT_TIE_HORIZON));
            Packing::earliest(
                order == Order::Desc,
                epoch?.0,
                resolution?.as_millis() as i64,
                horizon?.as_millis().min(i64::MAX as u128) as i64,
                b.max_score,
            )
            .map_err(|reason| e.push(at.field("tie_horizon"), reason))
            .ok()
        }
    }
}
