//! Reads of a board whose period is one sorted set: each read is one call
//! of `read.lua`, so it describes one instant.

use super::cursor::{Cursor, Direction};
use super::ranks::{listing, meta_of, ranks_at};
use super::standing::{Friend, Friends, Page, RankOf, Standing};
use super::target::{PeriodKeys, RankPolicy, Target};
use super::{ApiError, AppState};
use crate::board::Order;
use crate::store::{self, Query, ReadAt};

/// Where a read of the target's period reads: its keys, order and packing.
pub(super) fn read_at<'k>(t: &Target<'_>, keys: &'k PeriodKeys) -> ReadAt<'k> {
    ReadAt { keys: keys.read_keys(), desc: t.board.order() == Order::Desc, shift: t.board.packing().shift() }
}

/// Runs one query of `read.lua` on the period's keys.
async fn query<Q: Query>(s: &AppState, t: &Target<'_>, keys: &PeriodKeys, q: Q) -> Result<Q::Reply, ApiError> {
    s.reader_for(t)?.read(&read_at(t, keys), &q).await.map_err(ApiError::unavailable)
}

fn page(t: &Target<'_>, l: store::Listing) -> Page {
    let (total, entries) = listing(t.board, l);
    Page { total, entries, consistent: None }
}

/// A page of the top, by offset or from a cursor.
pub(super) async fn top(
    s: &AppState,
    t: &Target<'_>,
    keys: &PeriodKeys,
    cursor: Option<&Cursor>,
    offset: usize,
    limit: usize,
) -> Result<Page, ApiError> {
    let l = match cursor {
        None => query(s, t, keys, store::Top { offset, limit }).await?,
        Some(c) => {
            let next = c.direction == Direction::Next;
            query(s, t, keys, store::Page { stored: c.stored, member: &c.member, limit, next }).await?
        }
    };
    Ok(page(t, l))
}

/// A player's standing; `None` if they are not on the board.
pub(super) async fn player(
    s: &AppState,
    t: &Target<'_>,
    keys: &PeriodKeys,
    player_id: &str,
) -> Result<Option<Standing>, ApiError> {
    let Some(f) = query(s, t, keys, store::Player { member: player_id }).await? else { return Ok(None) };
    Ok(Some(Standing {
        total: f.total + i64::from(f.hidden),
        ranks: ranks_at(f.position, f.better, f.dense_better),
        score: t.board.packing().decode(f.stored),
        meta: meta_of(f.meta),
        hidden: f.hidden,
        consistent: None,
    }))
}

/// The window around a player; `None` if they are not on the board.
pub(super) async fn around(
    s: &AppState,
    t: &Target<'_>,
    keys: &PeriodKeys,
    player_id: &str,
    radius: usize,
    fill: bool,
) -> Result<Option<Page>, ApiError> {
    let reply = query(s, t, keys, store::Around { member: player_id, radius, fill }).await?;
    Ok(reply.map(|l| page(t, l)))
}

/// A friends read: the named players' ranks under `policy`.
pub(super) async fn players(
    s: &AppState,
    t: &Target<'_>,
    keys: &PeriodKeys,
    ids: Vec<String>,
    policy: RankPolicy,
) -> Result<Friends, ApiError> {
    let reply = query(s, t, keys, store::Players { policy: policy.name(), members: &ids }).await?;
    let mut found = Vec::new();
    let mut not_found = Vec::new();
    for (id, row) in ids.into_iter().zip(reply.rows) {
        match row {
            None => not_found.push(id),
            Some(r) => found.push(Friend { member: id, stored: r.stored, rank: r.count + 1, meta: meta_of(r.meta) }),
        }
    }
    Ok(Friends { total: reply.total, found, not_found, consistent: None })
}

/// The counts a value would rank by.
pub(super) async fn rank_of(s: &AppState, t: &Target<'_>, keys: &PeriodKeys, value: i64) -> Result<RankOf, ApiError> {
    let c = query(s, t, keys, store::RankOf { value }).await?;
    Ok(RankOf {
        total: c.total,
        better: c.better,
        better_or_equal: c.better_or_equal,
        dense_better: c.dense_better,
        consistent: None,
    })
}
