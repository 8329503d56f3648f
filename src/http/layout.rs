//! The one place a read meets its board's layout: a period on one sorted
//! set is read by `single.rs`, one sharded over tags by `sharded.rs`; the
//! handlers ask here and never look at the layout themselves.

use std::collections::HashMap;

use super::cursor::Cursor;
use super::standing::{Friends, Page, RankOf, Standing};
use super::target::{resolve, Layout, PeriodKeys, RankPolicy, Target};
use super::{sharded, single, ApiError, AppState};

/// The target a read names, as it stands: a sealed period of a sharded
/// board reads as the unsharded board's does before its seal (empty) until
/// its last shard is sealed (a job seals the shards in order, so from then
/// on every shard's snapshot is whole).
pub(super) async fn target<'a>(
    s: &'a AppState,
    board_id: &str,
    q: &HashMap<String, String>,
) -> Result<Target<'a>, ApiError> {
    let mut t = resolve(s, board_id, q)?;
    let Layout::Sharded { shards, last_seal: Some((hash, field)) } = &mut t.layout else {
        return Ok(t);
    };
    let reader = s.reader()?.fresh(t.fresh);
    let sealed = reader.has_field(hash, field).await.map_err(ApiError::unavailable)?;
    if !sealed {
        for k in shards {
            k.make_absent();
        }
    }
    Ok(t)
}

/// A period of a board with columns on one sorted set: its keys and
/// columns (`None` on a sharded board: `sharded_rows.rs` reads its shards).
pub(super) fn rows_at<'k>(t: &'k Target<'_>) -> Option<crate::store::RowsAt<'k>> {
    rows_at_keys(t, t.layout.single()?)
}

/// The period keys `keys` (a board's or one shard's) of a board with
/// columns, as `read_rows.lua` reads them.
pub(super) fn rows_at_keys<'k>(t: &Target<'_>, keys: &'k PeriodKeys) -> Option<crate::store::RowsAt<'k>> {
    let spec = t.board.column_spec()?;
    let rows_key = keys.rows_key.as_deref()?;
    let dense_key = t.board.dense_rank().then_some(keys.dense_key.as_str());
    let meta_key = keys.meta_key.as_deref();
    Some(crate::store::RowsAt { key: &keys.key, rows_key, shadow_key: &keys.shadow_key, dense_key, meta_key, spec })
}

/// A page of the top, by offset or from a cursor.
pub(super) async fn top(
    s: &AppState,
    t: &Target<'_>,
    cursor: Option<&Cursor>,
    offset: usize,
    limit: usize,
) -> Result<Page, ApiError> {
    match &t.layout {
        Layout::Single(keys) => single::top(s, t, keys, cursor, offset, limit).await,
        Layout::Sharded { .. } => sharded::top(s, t, cursor, offset, limit).await,
    }
}

/// A player's standing; `None` if they are not on the board.
pub(super) async fn player(s: &AppState, t: &Target<'_>, player_id: &str) -> Result<Option<Standing>, ApiError> {
    match &t.layout {
        Layout::Single(keys) => single::player(s, t, keys, player_id).await,
        Layout::Sharded { .. } => sharded::player(s, t, player_id).await,
    }
}

/// The window around a player; `None` if they are not on the board.
pub(super) async fn around(
    s: &AppState,
    t: &Target<'_>,
    player_id: &str,
    radius: usize,
    fill: bool,
) -> Result<Option<Page>, ApiError> {
    match &t.layout {
        Layout::Single(keys) => single::around(s, t, keys, player_id, radius, fill).await,
        Layout::Sharded { .. } => sharded::around(s, t, player_id, radius, fill).await,
    }
}

/// The named players' ranks under `policy`.
pub(super) async fn players(
    s: &AppState,
    t: &Target<'_>,
    ids: Vec<String>,
    policy: RankPolicy,
) -> Result<Friends, ApiError> {
    match &t.layout {
        Layout::Single(keys) => single::players(s, t, keys, ids, policy).await,
        Layout::Sharded { .. } => sharded::players(s, t, &ids, policy).await,
    }
}

/// The counts a value would rank by.
pub(super) async fn rank_of(s: &AppState, t: &Target<'_>, value: i64) -> Result<RankOf, ApiError> {
    match &t.layout {
        Layout::Single(keys) => single::rank_of(s, t, keys, value).await,
        Layout::Sharded { .. } => sharded::rank_of(s, t, value).await,
    }
}
