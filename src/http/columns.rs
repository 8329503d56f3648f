//! Reads of a board ranked by several columns (`board::columns`): the top
//! by offset, a player and the window around a player, each entry with its
//! `scores` (column -> value) beside its rank. Ranks are ordinal and
//! competition (equal rows share one); such a board keeps no dense index.
//! What a board with columns does not answer yet (cursors, friends,
//! `rank-of`) is refused with a 400 naming the parameter.

use serde_json::{json, Map, Value};

use super::layout::rows_at;
use super::ranks::percentile;
use super::target::{unranked, RankPolicy, Target};
use super::{ApiError, AppState};
use crate::board::columns::Columns;
use crate::store::{Reader, RowListing, RowsAt};

fn columns_of<'b>(t: &'b Target<'_>) -> &'b Columns {
    t.board.columns().expect("a board with columns")
}

/// A row's values by column name.
fn scores(c: &Columns, values: &[i64]) -> Value {
    Value::Object(c.names().zip(values).map(|(n, v)| (n.to_string(), json!(v))).collect::<Map<_, _>>())
}

/// A listing's answer: its head and its entries, ranked by `policy`.
fn listing_json(t: &Target<'_>, l: &RowListing, policy: RankPolicy, player_id: Option<&str>) -> Value {
    let c = columns_of(t);
    let entries: Vec<Value> = l
        .entries
        .iter()
        .zip(l.ranks())
        .map(|(e, (ordinal, competition))| {
            let rank = if policy == RankPolicy::Competition { competition } else { ordinal };
            json!({ "rank": rank, "player_id": e.player, "scores": scores(c, &e.values) })
        })
        .collect();
    let mut body = json!({ "board": t.board.id(), "period": t.period, "total": l.total, "entries": entries });
    if let Some(p) = player_id {
        body["player_id"] = json!(p);
    }
    body
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

pub(super) async fn top(
    s: &AppState,
    t: &Target<'_>,
    offset: usize,
    limit: usize,
    policy: RankPolicy,
) -> Result<Value, ApiError> {
    let (at, reader) = rows_of(s, t)?;
    let l = reader.rows_top(&at, offset, limit).await.map_err(ApiError::unavailable)?;
    Ok(listing_json(t, &l, policy, None))
}

pub(super) async fn player(s: &AppState, t: &Target<'_>, player_id: &str) -> Result<Value, ApiError> {
    let (at, reader) = rows_of(s, t)?;
    let found = reader.rows_player(&at, player_id).await.map_err(ApiError::unavailable)?;
    let f = found.ok_or_else(|| unranked(player_id, t))?;
    let mut body = json!({
        "board": t.board.id(),
        "period": t.period,
        "player_id": player_id,
        "scores": scores(columns_of(t), &f.values),
        "rank": { "ordinal": f.position + 1, "competition": f.better + 1, "dense": null },
        "percentile": percentile(f.total, f.better),
        "total": f.total,
    });
    if f.hidden {
        body["hidden"] = json!(true);
    }
    Ok(body)
}

pub(super) async fn around(
    s: &AppState,
    t: &Target<'_>,
    player_id: &str,
    radius: usize,
    policy: RankPolicy,
) -> Result<Value, ApiError> {
    let (at, reader) = rows_of(s, t)?;
    let l = reader.rows_around(&at, player_id, radius).await.map_err(ApiError::unavailable)?;
    let l = l.ok_or_else(|| unranked(player_id, t))?;
    Ok(listing_json(t, &l, policy, Some(player_id)))
}
