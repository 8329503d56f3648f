//! Reads of a board ranked by several columns (`board::columns`): the top
//! by offset or cursor, a player, the window around a player, a set of
//! players (friends) and the rank a row would have, each entry with its
//! `scores` (column -> value) beside its rank. Ranks are ordinal,
//! competition (equal rows share one) and, with `dense_rank = true`, dense
//! (one more than the distinct better rows).
//! A cursor carries the bytes of the member it was made at (URL-safe
//! base64), so a scan pages by that member as on a board of one score.

use std::collections::HashMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};

use super::cursor::{Cursor, Direction};
use super::layout::rows_at;
use super::ranks::{meta_of, percentile};
use super::target::{unranked, RankPolicy, Target};
use super::{sharded_rows, ApiError, AppState};
use crate::board::columns::Columns;
use crate::score::MAX_EXACT;
use crate::store::{Reader, RowEntry, RowListing, RowsAt};

fn columns_of<'b>(t: &'b Target<'_>) -> &'b Columns {
    t.board.columns().expect("a board with columns")
}

/// An entry's answer `body` with the entry's metadata, on boards that keep it.
fn entry_json(mut body: Value, e: &RowEntry) -> Value {
    if let Some(meta) = meta_of(e.meta.clone()) {
        body["meta"] = json!(meta);
    }
    body
}

/// A listing's answer: its head and its entries, ranked by `policy`.
fn listing_json(t: &Target<'_>, l: &RowListing, policy: RankPolicy, player_id: Option<&str>) -> Value {
    let c = columns_of(t);
    let entries: Vec<Value> = l
        .entries
        .iter()
        .zip(l.ranks())
        .map(|(e, r)| {
            let rank = match policy {
                RankPolicy::Ordinal => r.ordinal,
                RankPolicy::Competition => r.competition,
                RankPolicy::Dense => r.dense,
            };
            entry_json(json!({ "rank": rank, "player_id": e.player, "scores": c.scores(&e.values) }), e)
        })
        .collect();
    let mut body = json!({ "board": t.board.id(), "period": t.period, "total": l.total, "entries": entries });
    if let Some(p) = player_id {
        body["player_id"] = json!(p);
    }
    body
}

/// A sharded read's `consistent`: whether every shard stood still during it.
fn with_consistent(body: &mut Value, consistent: Option<bool>) {
    if let Some(c) = consistent {
        body["consistent"] = json!(c);
    }
}

/// Refuses what a board with columns does not answer yet.
pub(super) fn refuse(parameter: &'static str, what: &str, t: &Target<'_>) -> ApiError {
    ApiError::bad(
        parameter,
        format!("{what} is not available on board '{}', which ranks by several columns", t.board.id()),
    )
}

/// The period's keys and columns, and the reader the read goes to.
fn rows_of<'k>(s: &AppState, t: &'k Target<'_>) -> Result<(RowsAt<'k>, Reader), ApiError> {
    let at = rows_at(t).ok_or_else(|| refuse("period", "this period", t))?;
    Ok((at, s.reader()?.fresh(t.fresh)))
}

/// The cursor of `e` paging `direction` on the target.
fn cursor_at(t: &Target<'_>, e: &RowEntry, direction: Direction) -> String {
    Cursor::on(t, direction, 0, URL_SAFE_NO_PAD.encode(&e.member)).encode()
}

/// The member bytes a cursor (already checked to be the target's) was made at.
fn cursor_member(c: &Cursor, t: &Target<'_>) -> Result<Vec<u8>, ApiError> {
    let spec = t.board.column_spec().expect("a board with columns");
    URL_SAFE_NO_PAD
        .decode(&c.member)
        .ok()
        .filter(|m| spec.parse_member(m).is_some())
        .ok_or_else(|| ApiError::bad("cursor", "the cursor was not made on this board's columns"))
}

/// A page of the top, by offset or from a cursor, with the cursors of its
/// ends: `next_cursor` unless it ends the board, `prev_cursor` unless it
/// starts it.
pub(super) async fn top(
    s: &AppState,
    t: &Target<'_>,
    cursor: Option<&Cursor>,
    offset: usize,
    limit: usize,
    policy: RankPolicy,
) -> Result<Value, ApiError> {
    let member = cursor.map(|c| cursor_member(c, t)).transpose()?;
    let (l, consistent) = if t.layout.single().is_none() {
        let (l, consistent) = sharded_rows::top(s, t, cursor.zip(member.as_deref()), offset, limit).await?;
        (l, Some(consistent))
    } else {
        let (at, reader) = rows_of(s, t)?;
        let l = match (cursor, &member) {
            (Some(c), Some(m)) => reader.rows_page(&at, m, limit, c.direction == Direction::Next).await,
            _ => reader.rows_top(&at, offset, limit).await,
        };
        (l.map_err(ApiError::unavailable)?, None)
    };
    let mut body = listing_json(t, &l, policy, None);
    with_consistent(&mut body, consistent);
    if let (Some(first), Some(last)) = (l.entries.first(), l.entries.last()) {
        if l.start + (l.entries.len() as i64) < l.total {
            body["next_cursor"] = json!(cursor_at(t, last, Direction::Next));
        }
        if l.start > 0 {
            body["prev_cursor"] = json!(cursor_at(t, first, Direction::Prev));
        }
    }
    Ok(body)
}

pub(super) async fn player(s: &AppState, t: &Target<'_>, player_id: &str) -> Result<Value, ApiError> {
    let (found, consistent) = if t.layout.single().is_none() {
        let found = sharded_rows::player(s, t, player_id).await?;
        let consistent = found.as_ref().map(|f| f.1);
        (found.map(|f| f.0), consistent)
    } else {
        let (at, reader) = rows_of(s, t)?;
        let mut found = reader.rows_player(&at, player_id).await.map_err(ApiError::unavailable)?;
        // A hidden player's own read counts them in the total, as on a board of one score.
        if let Some(f) = found.as_mut() {
            f.total += i64::from(f.hidden);
        }
        (found, None)
    };
    let f = found.ok_or_else(|| unranked(player_id, t))?;
    let mut body = json!({
        "board": t.board.id(),
        "period": t.period,
        "player_id": player_id,
        "scores": columns_of(t).scores(&f.values),
        "rank": {
            "ordinal": f.position + 1,
            "competition": f.better + 1,
            "dense": t.board.dense_rank().then_some(f.dense_better + 1),
        },
        "percentile": percentile(f.total, f.better),
        "total": f.total,
    });
    if f.hidden {
        body["hidden"] = json!(true);
    }
    if let Some(meta) = meta_of(f.meta) {
        body["meta"] = json!(meta);
    }
    with_consistent(&mut body, consistent);
    Ok(body)
}

pub(super) async fn around(
    s: &AppState,
    t: &Target<'_>,
    player_id: &str,
    radius: usize,
    fill: bool,
    policy: RankPolicy,
) -> Result<Value, ApiError> {
    let (l, consistent) = if t.layout.single().is_none() {
        let l = sharded_rows::around(s, t, player_id, radius, fill).await?;
        let consistent = l.as_ref().map(|l| l.1);
        (l.map(|l| l.0), consistent)
    } else {
        let (at, reader) = rows_of(s, t)?;
        (reader.rows_around(&at, player_id, radius, fill).await.map_err(ApiError::unavailable)?, None)
    };
    let l = l.ok_or_else(|| unranked(player_id, t))?;
    let mut body = listing_json(t, &l, policy, Some(player_id));
    with_consistent(&mut body, consistent);
    Ok(body)
}

/// A friends read: the named players' ranks on the board (under `policy`)
/// and among themselves, best first, in one atomic read.
pub(super) async fn players(
    s: &AppState,
    t: &Target<'_>,
    ids: Vec<String>,
    policy: RankPolicy,
) -> Result<Value, ApiError> {
    let (reply, consistent) = if t.layout.single().is_none() {
        let (reply, consistent) = sharded_rows::players(s, t, &ids, policy).await?;
        (reply, Some(consistent))
    } else {
        let (at, reader) = rows_of(s, t)?;
        (reader.rows_players(&at, &ids, policy.name()).await.map_err(ApiError::unavailable)?, None)
    };
    let mut found = Vec::new();
    let mut not_found = Vec::new();
    for (id, row) in ids.into_iter().zip(reply.rows) {
        match row {
            Some(r) => found.push(r),
            None => not_found.push(id),
        }
    }
    found.sort_by(|(a, _), (b, _)| a.member.cmp(&b.member));
    let c = columns_of(t);
    let entries: Vec<Value> = found
        .iter()
        .enumerate()
        .map(|(i, (e, count))| {
            let body = json!({ "rank": count + 1, "rank_in_set": i + 1, "player_id": e.player, "scores": c.scores(&e.values) });
            entry_json(body, e)
        })
        .collect();
    let mut body = json!({
        "board": t.board.id(),
        "period": t.period,
        "total": reply.total,
        "not_found": not_found,
        "entries": entries,
    });
    with_consistent(&mut body, consistent);
    Ok(body)
}

/// `rank-of`'s row: a value for every column, each `scores.<column>`.
fn asked_row(c: &Columns, q: &HashMap<String, String>) -> Result<Vec<i64>, ApiError> {
    if q.contains_key("score") {
        return Err(ApiError::bad("score", "this board ranks by several columns: give scores.<column> for each"));
    }
    if let Some(k) = q.keys().find(|k| k.strip_prefix("scores.").is_some_and(|n| !c.names().any(|m| m == n))) {
        return Err(ApiError::bad(k.clone(), format!("{k} names no column of this board")));
    }
    c.names()
        .map(|name| {
            let p = format!("scores.{name}");
            match q.get(&p).map(|v| v.parse::<i64>()) {
                Some(Ok(v)) if v.abs() <= MAX_EXACT => Ok(v),
                Some(Ok(_)) => Err(ApiError::bad(p.clone(), format!("{p} must be from -{MAX_EXACT} to {MAX_EXACT}"))),
                Some(Err(_)) => Err(ApiError::bad(p.clone(), format!("{p} must be an integer"))),
                None => {
                    Err(ApiError::bad(p.clone(), format!("{p} is required: rank-of takes a value for every column")))
                }
            }
        })
        .collect()
}

/// The rank a player with the asked row would have, were they on the board.
pub(super) async fn rank_of(s: &AppState, t: &Target<'_>, q: &HashMap<String, String>) -> Result<Value, ApiError> {
    let c = columns_of(t);
    let values = asked_row(c, q)?;
    let (n, consistent) = if t.layout.single().is_none() {
        let (n, consistent) = sharded_rows::rank_of(s, t, &values).await?;
        (n, Some(consistent))
    } else {
        let (at, reader) = rows_of(s, t)?;
        (reader.rows_rank_of(&at, &values).await.map_err(ApiError::unavailable)?, None)
    };
    // A newcomer ranks after the players already at the row.
    let mut body = json!({
        "board": t.board.id(),
        "period": t.period,
        "scores": c.scores(&values),
        "total": n.total,
        "rank": {
            "ordinal": n.better_or_equal + 1,
            "competition": n.better + 1,
            "dense": t.board.dense_rank().then_some(n.dense_better + 1),
        },
        "percentile": percentile(n.total + 1, n.better),
    });
    with_consistent(&mut body, consistent);
    Ok(body)
}
