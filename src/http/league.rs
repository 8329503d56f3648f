//! League reads: a player's place in their cohort (the `league` field of a
//! player read, and `GET .../players/{id}/cohort`), a cohort's standings
//! with zones (`GET .../cohorts/{cohort}`) and the league's tiers (`GET
//! .../league`). A cohort is ranked as the settlement ranks it (the board's
//! order, ordinal); its zones are what the settlement would do now, or,
//! once the round is settled, what it did.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde_json::{json, Value};

use super::cursor::{check_cursor, take_cursor, Cursor, Direction};
use super::target::{parse_num, resolve, Target};
use super::{ApiError, AppState};
use crate::board::league::{self, League, Zone};
use crate::board::{Board, Order};
use crate::keys;
use crate::period::id::PeriodRef;
use crate::period::Period;
use crate::store::{Placement, RowsOf};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// One ranked player of a cohort.
struct Ranked {
    rank: usize,
    member: String,
    stored: i64,
    /// On a board with columns: its member's bytes (its row, then its id).
    key: Vec<u8>,
    zone: Zone,
    next_tier: usize,
}

/// The round a resolved read names, and its tag's key base and the key its
/// scores are read from (on a board with columns, with its rows hash).
struct RoundRead<'a> {
    league: &'a League,
    base: String,
    round: Period,
    board_key: String,
    rows_key: Option<String>,
}

/// The read's round: `period` names one (a round's id or, absent, the
/// schedule or window of the rounds: its latest round); `:final` reads its
/// sealed scores.
fn round_of<'a>(t: &Target<'a>, s: &AppState) -> Result<Option<RoundRead<'a>>, ApiError> {
    let Some(league) = t.board.league() else { return Ok(None) };
    let Some(keys) = t.layout.single() else { return Ok(None) };
    let live = PeriodRef::parse(&t.period).text;
    let Ok(round) = t.board.period_by_id(live) else { return Ok(None) };
    if !t.board.is_round(&round) {
        return Ok(None);
    }
    let split = (!t.split.is_empty()).then_some(t.split.as_str());
    let base = keys::base(s.router.prefix(), t.board.id(), split);
    Ok(Some(RoundRead { league, base, round, board_key: keys.key.clone(), rows_key: keys.rows_key.clone() }))
}

/// Resolves a league read: `period` defaults to the rounds' latest.
fn league_target<'a>(
    s: &'a AppState,
    board_id: &str,
    q: &mut HashMap<String, String>,
) -> Result<(Target<'a>, RoundRead<'a>), ApiError> {
    let board: &Board = super::target::board_of(s, board_id)?;
    let league = board.league().ok_or_else(|| ApiError::not_found(format!("board '{board_id}' has no league")))?;
    q.entry("period".into()).or_insert_with(|| league.rounds.clone());
    let t = resolve(s, board_id, q)?;
    let read = round_of(&t, s)?.ok_or_else(|| {
        ApiError::bad("period", format!("'{}' is not a round of the league (rounds: '{}')", t.period, league.rounds))
    })?;
    Ok((t, read))
}

/// Cohort `code`'s tier and standings: recorded results once settled, else
/// as the settlement would rank them now.
async fn standings(
    s: &AppState,
    t: &Target<'_>,
    r: &RoundRead<'_>,
    code: i64,
) -> Result<(usize, Vec<Ranked>), ApiError> {
    let reader = s.reader_for(t)?;
    let rows = match (&r.rows_key, t.board.column_spec()) {
        (Some(rows_key), Some(spec)) => Some(RowsOf { key: &r.board_key, rows_key, prefix: spec.prefix_len() }),
        _ => None,
    };
    let read =
        reader.league_cohort(&r.base, &r.round.id, code, &r.board_key, rows).await.map_err(ApiError::unavailable)?;
    let (tier, _) = league::split_code(code).unwrap_or((0, 1));
    let (settled, mut keys) = match rows {
        None => (r.league.settle(t.board.order(), tier, read.players), Vec::new()),
        Some(_) => {
            let (keys, players): (Vec<Vec<u8>>, Vec<String>) = read.rows.into_iter().unzip();
            (r.league.settle_ranked(tier, players), keys)
        }
    };
    keys.resize(settled.len(), Vec::new());
    let ranked = settled
        .into_iter()
        .zip(keys)
        .map(|(p, key)| {
            let recorded = read.results.get(&p.member).and_then(|text| league::parse_result(text));
            let (zone, next_tier) = recorded.map_or((p.zone, p.next_tier), |(_, z, n)| (z, n));
            Ranked { rank: p.rank, member: p.member, stored: p.stored, key, zone, next_tier }
        })
        .collect();
    Ok((tier, ranked))
}

fn entry_json(board: &Board, league: &League, e: &Ranked) -> Value {
    let mut v = json!({
        "rank": e.rank,
        "player_id": e.member,
        "zone": e.zone.as_str(),
        "next_tier": league.tiers.get(e.next_tier),
    });
    match board.columns().zip(board.column_spec()) {
        Some((c, spec)) => v["scores"] = spec.parse_member(&e.key).map(|(x, _, _)| c.scores(&x)).unwrap_or_default(),
        None => v["score"] = json!(board.packing().decode(e.stored)),
    }
    v
}

/// The `league` field of a player read on a round of a league board:
/// `None` when the read is of no round or the player is not placed in it.
pub(super) async fn player_field(s: &AppState, t: &Target<'_>, player_id: &str) -> Result<Option<Value>, ApiError> {
    let Some(r) = round_of(t, s)? else { return Ok(None) };
    let placement =
        s.reader_for(t)?.league_placement(&r.base, &r.round.id, player_id).await.map_err(ApiError::unavailable)?;
    let code = match placement {
        Placement::Placed(code) => code,
        Placement::Pending => return Ok(Some(json!({ "pending": true }))),
        Placement::NotPlaced => return Ok(None),
    };
    let (tier, ranked) = standings(s, t, &r, code).await?;
    let me = ranked.iter().find(|e| e.member == player_id);
    Ok(Some(json!({
        "tier": r.league.tiers.get(tier),
        "cohort": r.league.cohort_id(code),
        "rank": me.map(|e| e.rank),
        "size": ranked.len(),
        "zone": me.map(|e| e.zone.as_str()),
    })))
}

/// `GET /v1/boards/{board}/cohorts/{cohort}?period=&offset=&limit=&cursor=`:
/// pages as a top read does, by offset or from a cursor, with
/// `next_cursor` and `prev_cursor`.
pub(super) async fn cohort(
    State(s): State<AppState>,
    Path((board_id, cohort)): Path<(String, String)>,
    Query(mut q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let cursor = take_cursor(&mut q)?;
    let (t, r) = league_target(&s, &board_id, &mut q)?;
    let code = r.league.cohort_code(&cohort).ok_or_else(|| {
        ApiError::not_found(format!("'{cohort}' is not a cohort of board '{board_id}' (cohorts are <tier>-<n>)"))
    })?;
    let limit = parse_num(&q, "limit", 10, s.max_limit)?;
    let offset = parse_num(&q, "offset", 0, 100_000_000)?;
    if let Some(c) = &cursor {
        check_cursor(c, &t, Some(&cohort))?;
    }
    let (tier, ranked) = standings(&s, &t, &r, code).await?;
    if ranked.is_empty() {
        return Err(ApiError::not_found(format!("cohort '{cohort}' holds no ranked player in {}", t.period)));
    }
    let rows = t.board.columns().is_some();
    let range = match &cursor {
        None => offset.min(ranked.len())..(offset + limit).min(ranked.len()),
        Some(c) if rows => {
            let key =
                URL_SAFE_NO_PAD.decode(&c.member).map_err(|_| ApiError::bad("cursor", "not made on this cohort"))?;
            page_range_by(&ranked, c.direction, limit, |e| e.key.as_slice().cmp(&key))
        }
        Some(c) => page_range(t.board.order(), &ranked, c, limit),
    };
    let start = range.start;
    let page = &ranked[range];
    let entries: Vec<Value> = page.iter().map(|e| entry_json(t.board, r.league, e)).collect();
    let mut body = json!({
        "board": t.board.id(), "period": t.period, "cohort": cohort, "tier": r.league.tiers[tier],
        "total": ranked.len(), "entries": entries,
    });
    let at = |e: &Ranked, direction| {
        let (board, split, period) = (t.board.id().to_string(), t.split.clone(), t.period.clone());
        // On a board with columns a cursor carries the entry's member bytes, as a top's does.
        let member = if rows { URL_SAFE_NO_PAD.encode(&e.key) } else { e.member.clone() };
        let (stored, cohort) = (e.stored, Some(cohort.clone()));
        Cursor { direction, board, split, period, stored, member, cohort }.encode()
    };
    if let (Some(first), Some(last)) = (page.first(), page.last()) {
        if start + page.len() < ranked.len() {
            body["next_cursor"] = json!(at(last, Direction::Next));
        }
        if start > 0 {
            body["prev_cursor"] = json!(at(first, Direction::Prev));
        }
    }
    Ok(Json(body))
}

/// The page from cursor `c` in `ranked` (in board order): the `limit`
/// entries after the cursor's entry, or the `limit` before it. The entry
/// need not be there any more: its place in board order is.
fn page_range(order: Order, ranked: &[Ranked], c: &Cursor, limit: usize) -> std::ops::Range<usize> {
    page_range_by(ranked, c.direction, limit, |e| order.entries((e.stored, &e.member), (c.stored, &c.member)))
}

/// The page `direction` of the cursor's entry, where `cmp` orders an entry
/// against it.
fn page_range_by(
    ranked: &[Ranked],
    direction: Direction,
    limit: usize,
    cmp: impl Fn(&Ranked) -> std::cmp::Ordering,
) -> std::ops::Range<usize> {
    let before = ranked.partition_point(|e| cmp(e).is_lt());
    match direction {
        Direction::Next => {
            let here = ranked.get(before).is_some_and(|e| cmp(e).is_eq());
            let from = before + usize::from(here);
            from..(from + limit).min(ranked.len())
        }
        Direction::Prev => before.saturating_sub(limit)..before,
    }
}

/// `GET /v1/boards/{board}/players/{player}/cohort?period=`: the player's
/// cohort's standings, or 404 `not_placed`.
pub(super) async fn player_cohort(
    State(s): State<AppState>,
    Path((board_id, player_id)): Path<(String, String)>,
    Query(mut q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let (t, r) = league_target(&s, &board_id, &mut q)?;
    let placement =
        s.reader_for(&t)?.league_placement(&r.base, &r.round.id, &player_id).await.map_err(ApiError::unavailable)?;
    let code = match placement {
        Placement::Placed(code) => code,
        Placement::Pending => {
            return Ok(Json(
                json!({ "board": t.board.id(), "period": t.period, "player_id": player_id, "pending": true }),
            ))
        }
        Placement::NotPlaced => {
            return Err(ApiError::not_placed(format!("player '{player_id}' is not placed in {}", t.period)))
        }
    };
    let (tier, ranked) = standings(&s, &t, &r, code).await?;
    let entries: Vec<Value> = ranked.iter().map(|e| entry_json(t.board, r.league, e)).collect();
    Ok(Json(json!({
        "board": t.board.id(), "period": t.period, "player_id": player_id,
        "cohort": r.league.cohort_id(code), "tier": r.league.tiers[tier],
        "total": ranked.len(), "entries": entries,
    })))
}

/// `GET /v1/boards/{board}/league?period=`: per tier, its cohorts and players.
pub(super) async fn overview(
    State(s): State<AppState>,
    Path(board_id): Path<String>,
    Query(mut q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let (t, r) = league_target(&s, &board_id, &mut q)?;
    let tiers = r.league.tiers.len();
    let counts = s.reader_for(&t)?.league_overview(&r.base, &r.round.id, tiers).await.map_err(ApiError::unavailable)?;
    let rows: Vec<Value> = r
        .league
        .tiers
        .iter()
        .zip(counts)
        .map(|(name, (cohorts, players))| json!({ "tier": name, "cohorts": cohorts, "players": players }))
        .collect();
    Ok(Json(json!({
        "board": t.board.id(), "period": t.period, "round": r.round.id,
        "cohort_size": r.league.cohort_size, "tiers": rows,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranked(scores: &[(i64, &str)]) -> Vec<Ranked> {
        let ranked = scores.iter().enumerate().map(|(i, (stored, member))| Ranked {
            rank: i + 1,
            member: member.to_string(),
            stored: *stored,
            key: Vec::new(),
            zone: Zone::Stay,
            next_tier: 0,
        });
        ranked.collect()
    }

    fn cursor(direction: Direction, stored: i64, member: &str) -> Cursor {
        let (board, split, period) = ("b".into(), String::new(), "c:x".into());
        Cursor { direction, board, split, period, stored, member: member.into(), cohort: Some("0-1".into()) }
    }

    #[test]
    fn a_cohort_pages_from_a_cursor_both_ways_whether_its_entry_stayed_or_moved() {
        // Board order on a desc board: higher first, ties by member descending.
        let r = ranked(&[(50, "e"), (40, "d"), (40, "c"), (20, "b"), (10, "a")]);
        let order = Order::Desc;
        assert_eq!(page_range(order, &r, &cursor(Direction::Next, 40, "d"), 2), 2..4);
        assert_eq!(page_range(order, &r, &cursor(Direction::Next, 20, "b"), 5), 4..5);
        assert_eq!(page_range(order, &r, &cursor(Direction::Prev, 40, "c"), 5), 0..2);
        assert_eq!(page_range(order, &r, &cursor(Direction::Prev, 20, "b"), 2), 1..3);
        // The cursor's entry left (or moved): the page starts where it stood.
        assert_eq!(page_range(order, &r, &cursor(Direction::Next, 30, "x"), 2), 3..5);
        assert_eq!(page_range(order, &r, &cursor(Direction::Prev, 30, "x"), 2), 1..3);
        assert_eq!(page_range(order, &r, &cursor(Direction::Prev, 60, "z"), 2), 0..0);
    }
}
