//! Reads of a sharded board ranked by several columns: each shard is read
//! atomically by `read_rows.lua`'s shard ops, all shards at once, and the
//! answers merged into exactly what the unsharded board would answer, as
//! `sharded.rs` does for one score. Board order is ascending member bytes
//! (the row key, the tie key, then the player id) and a player lives in
//! one shard, so a page is a merge of the shards' pages by bytes, a
//! position the sum of the shards' counts of members before a member, and
//! the players with a better row the sum of their counts below its row key.
//! Every answer says whether all shards stood still during the read
//! (`consistent`, from the shards' versions, as in `sharded.rs`). Dense
//! ranks are not kept on sharded boards, and `offset` deeper than
//! `http.max_limit` is refused: cursors page on at any depth.

use futures::future::try_join_all;

use super::cursor::{Cursor, Direction};
use super::layout::rows_at_keys;
use super::sharded::{refuse_deep, window_of, Around};
use super::target::{RankPolicy, Target};
use super::{ApiError, AppState};
use crate::board::shard_of;
use crate::store::{
    Reader, RowAsked, RowCounts, RowEntry, RowFound, RowListing, RowPlayers, RowShardCount, RowShardCounts,
    RowShardTop, RowSought, RowsAt,
};

/// One shard: its keys as `read_rows.lua` reads them, and its version hash.
struct Shard<'k> {
    at: RowsAt<'k>,
    versions: &'k str,
}

fn shards<'k>(t: &'k Target<'_>) -> Vec<Shard<'k>> {
    t.layout
        .shards()
        .iter()
        .map(|k| Shard { at: rows_at_keys(t, k).expect("a board with columns"), versions: &k.version_key })
        .collect()
}

fn reader(s: &AppState, t: &Target<'_>) -> Result<Reader, ApiError> {
    Ok(s.reader()?.fresh(t.fresh))
}

/// Each shard's version, read alone (a read's first or last step).
async fn versions(r: &Reader, shards: &[Shard<'_>]) -> Result<Vec<i64>, ApiError> {
    try_join_all(shards.iter().map(|sh| async move { r.version(sh.versions).await.map_err(ApiError::unavailable) }))
        .await
}

/// A top-K board holds the first K of its shards' entries (see `sharded.rs`).
fn cap(t: &Target<'_>) -> i64 {
    t.board.max_members().map_or(i64::MAX, |k| i64::try_from(k).unwrap_or(i64::MAX))
}

/// The row key's length: an entry's first bytes, which order rows.
fn row_len(t: &Target<'_>) -> usize {
    8 * t.board.column_spec().map_or(0, |c| c.n as usize)
}

fn merged(lists: Vec<Vec<RowEntry>>) -> Vec<RowEntry> {
    let mut all: Vec<RowEntry> = lists.into_iter().flatten().collect();
    all.sort_by(|a, b| a.member.cmp(&b.member));
    all
}

/// Every shard's counts of `asked`, summed; the shards' total and versions.
async fn counts(
    r: &Reader,
    shards: &[Shard<'_>],
    asked: &[RowAsked],
) -> Result<(Vec<RowShardCount>, i64, Vec<i64>), ApiError> {
    let replies: Vec<RowShardCounts> =
        try_join_all(shards.iter().map(|sh| async move {
            r.rows_shard_counts(&sh.at, sh.versions, asked).await.map_err(ApiError::unavailable)
        }))
        .await?;
    let mut out = vec![RowShardCount::default(); asked.len()];
    for reply in &replies {
        for (o, c) in out.iter_mut().zip(&reply.counts) {
            (o.better, o.better_or_equal, o.before) =
                (o.better + c.better, o.better_or_equal + c.better_or_equal, o.before + c.before);
        }
    }
    Ok((out, replies.iter().map(|c| c.total).sum(), replies.iter().map(|c| c.version).collect()))
}

/// The players with a better row than `first`'s, and the shards' versions then.
async fn better_than(r: &Reader, shards: &[Shard<'_>], first: &RowEntry) -> Result<(i64, Vec<i64>), ApiError> {
    let asked = [RowAsked { values: first.values.clone(), member: None }];
    let (sums, _, vers) = counts(r, shards, &asked).await?;
    Ok((sums[0].better, vers))
}

/// A page of the top, by offset or from a cursor (its member bytes), and
/// whether the shards stood still.
pub(super) async fn top(
    s: &AppState,
    t: &Target<'_>,
    cursor: Option<(&Cursor, &[u8])>,
    offset: usize,
    limit: usize,
) -> Result<(RowListing, bool), ApiError> {
    refuse_deep(s, offset)?;
    let (mut l, consistent) = match cursor {
        None => top_at(s, t, offset, limit).await?,
        Some((c, member)) => top_from(s, t, member, c.direction, limit).await?,
    };
    l.total = l.total.min(cap(t));
    l.entries.truncate((cap(t) - l.start).max(0) as usize);
    Ok((l, consistent))
}

/// The shards whose first `first` entries read may not hold all of theirs
/// among the merged first `want` (see `sharded.rs`).
fn short(lists: &[Vec<RowEntry>], first: usize, want: usize) -> Vec<usize> {
    let mut all: Vec<&[u8]> = lists.iter().flatten().map(|e| e.member.as_slice()).collect();
    all.sort();
    let Some(cut) = all.get(want - 1).copied() else { return Vec::new() };
    (0..lists.len())
        .filter(|&i| lists[i].len() == first && lists[i].last().is_some_and(|l| *l.member <= *cut))
        .collect()
}

/// A page by offset: each shard's first entries, merged.
async fn top_at(s: &AppState, t: &Target<'_>, offset: usize, limit: usize) -> Result<(RowListing, bool), ApiError> {
    let (r, shards) = (reader(s, t)?, shards(t));
    let top = |i: usize, n: usize| {
        let (r, sh) = (&r, &shards[i]);
        async move { r.rows_shard_top(&sh.at, sh.versions, n).await.map_err(ApiError::unavailable) }
    };
    // As sharded.rs: each shard's expected share and some, then the shards
    // that may hold more of the first offset + limit read again to it.
    let want = offset + limit;
    let share = want.div_ceil(shards.len());
    let first = want.min(share + 4 * share.isqrt() + 8);
    let mut replies: Vec<RowShardTop> = try_join_all((0..shards.len()).map(|i| top(i, first))).await?;
    let mut lists: Vec<Vec<RowEntry>> = replies.iter_mut().map(|r| std::mem::take(&mut r.entries)).collect();
    if first < want {
        let again = short(&lists, first, want);
        let more = try_join_all(again.iter().map(|&i| top(i, want))).await?;
        for (i, reply) in again.into_iter().zip(more) {
            (lists[i], replies[i].total) = (reply.entries, reply.total);
        }
    }
    let all = merged(lists);
    // Every player with a better row than the page's first is among the merged first offset + limit.
    let row = row_len(t);
    let better = all.get(offset).map_or(0, |f| all.iter().take_while(|e| e.member[..row] < f.member[..row]).count());
    let entries: Vec<RowEntry> = all.into_iter().skip(offset).take(limit).collect();
    let consistent = versions(&r, &shards).await? == replies.iter().map(|r| r.version).collect::<Vec<_>>();
    let total = replies.iter().map(|r| r.total).sum();
    Ok((RowListing { total, start: offset as i64, better: better as i64, dense_better: 0, entries }, consistent))
}

/// Every shard's `after` entries after `member` and `before` entries before it.
async fn seek(
    r: &Reader,
    shards: &[Shard<'_>],
    member: &[u8],
    after: usize,
    before: usize,
) -> Result<Vec<RowSought>, ApiError> {
    try_join_all(shards.iter().map(|sh| async move {
        r.rows_shard_seek(&sh.at, sh.versions, member, after, before).await.map_err(ApiError::unavailable)
    }))
    .await
}

/// The shards' entries after a seek, and those before it, each merged (taken out of the replies).
fn split(replies: &mut [RowSought]) -> (Vec<RowEntry>, Vec<RowEntry>) {
    let afters = replies.iter_mut().map(|r| std::mem::take(&mut r.after_rows)).collect();
    let befores = replies.iter_mut().map(|r| std::mem::take(&mut r.before_rows)).collect();
    (merged(afters), merged(befores))
}

/// A page from a cursor: each shard's entries next to its member, merged.
async fn top_from(
    s: &AppState,
    t: &Target<'_>,
    member: &[u8],
    direction: Direction,
    limit: usize,
) -> Result<(RowListing, bool), ApiError> {
    let (r, shards) = (reader(s, t)?, shards(t));
    let (after, before) = if direction == Direction::Next { (limit, 0) } else { (0, limit) };
    let mut replies = seek(&r, &shards, member, after, before).await?;
    let before_it: i64 = replies.iter().map(|r| r.before).sum();
    let present: i64 = replies.iter().map(|r| i64::from(r.present)).sum();
    let (afters, befores) = split(&mut replies);
    let (start, entries) = if direction == Direction::Next {
        (before_it + present, afters.into_iter().take(limit).collect::<Vec<_>>())
    } else {
        let skip = befores.len().saturating_sub(limit);
        (before_it - (befores.len() - skip) as i64, befores.into_iter().skip(skip).collect())
    };
    let seen: Vec<i64> = replies.iter().map(|r| r.version).collect();
    let (better, consistent) = match entries.first() {
        Some(first) => {
            let (better, later) = better_than(&r, &shards, first).await?;
            (better, later == seen)
        }
        None => (0, versions(&r, &shards).await? == seen),
    };
    let total = replies.iter().map(|r| r.total).sum();
    Ok((RowListing { total, start, better, dense_better: 0, entries }, consistent))
}

/// The shard holding `player`.
fn owner<'s, 'k>(shards: &'s [Shard<'k>], player: &str) -> &'s Shard<'k> {
    &shards[shard_of(player, shards.len() as u32) as usize]
}

/// A player's standing, merged over the shards; `None` if they are not on
/// the board (or past a top-K board's K).
pub(super) async fn player(s: &AppState, t: &Target<'_>, player: &str) -> Result<Option<(RowFound, bool)>, ApiError> {
    let (r, shards) = (reader(s, t)?, shards(t));
    let sh = owner(&shards, player);
    let find = async { r.rows_player(&sh.at, player).await.map_err(ApiError::unavailable) };
    let (before, found) = tokio::try_join!(versions(&r, &shards), find)?;
    let Some(mut f) = found else { return Ok(None) };
    let asked = [RowAsked { values: f.values.clone(), member: Some(f.member.clone()) }];
    let (sums, total, later) = counts(&r, &shards, &asked).await?;
    if sums[0].before >= cap(t) {
        return Ok(None);
    }
    (f.total, f.position, f.better, f.dense_better) =
        ((total + i64::from(f.hidden)).min(cap(t)), sums[0].before, sums[0].better, 0);
    Ok(Some((f, later == before)))
}

/// The window within `radius` of a visible player, merged over the shards.
pub(super) async fn around(
    s: &AppState,
    t: &Target<'_>,
    player: &str,
    radius: usize,
    fill: bool,
) -> Result<Option<(RowListing, bool)>, ApiError> {
    let (r, shards) = (reader(s, t)?, shards(t));
    let sh = owner(&shards, player);
    let find = async { r.rows_player(&sh.at, player).await.map_err(ApiError::unavailable) };
    let (before, found) = tokio::try_join!(versions(&r, &shards), find)?;
    // A hidden player is not on the board others read: no window around them.
    let Some(f) = found.filter(|f| !f.hidden) else { return Ok(None) };
    let reach = 2 * radius;
    let mut replies = seek(&r, &shards, &f.member, reach, reach).await?;
    let total = replies.iter().map(|r| r.total).sum::<i64>().min(cap(t));
    let position: i64 = replies.iter().map(|r| r.before).sum();
    if position >= cap(t) {
        return Ok(None);
    }
    let (afters, befores) = split(&mut replies);
    let me = RowEntry { player: player.to_string(), values: f.values, member: f.member, meta: f.meta };
    let (start, entries) = window_of(befores, me, afters, Around { position, radius, total, fill });
    let seen: Vec<i64> = replies.iter().map(|r| r.version).collect();
    let (better, consistent) = match entries.first() {
        Some(first) => {
            let (better, later) = better_than(&r, &shards, first).await?;
            (better, later == before && seen == before)
        }
        None => (0, seen == before),
    };
    Ok(Some((RowListing { total, start, better, dense_better: 0, entries }, consistent)))
}

/// The named players' entries and the count their rank under `policy` is
/// one more than, merged over the shards (`None`: not on the board).
pub(super) async fn players(
    s: &AppState,
    t: &Target<'_>,
    ids: &[String],
    policy: RankPolicy,
) -> Result<(RowPlayers, bool), ApiError> {
    let (r, shards) = (reader(s, t)?, shards(t));
    let before = versions(&r, &shards).await?;
    // Each shard is asked for the players it holds.
    let n = shards.len() as u32;
    let mine: Vec<Vec<String>> =
        (0..n).map(|k| ids.iter().filter(|p| shard_of(p, n) == k).cloned().collect()).collect();
    let replies = try_join_all(shards.iter().zip(&mine).map(|(sh, m)| {
        let r = &r;
        async move { r.rows_players(&sh.at, m, "ordinal").await.map_err(ApiError::unavailable) }
    }))
    .await?;
    let total = replies.iter().map(|r| r.total).sum::<i64>().min(cap(t));
    let found: Vec<RowEntry> = replies.into_iter().flat_map(|r| r.rows.into_iter().flatten().map(|(e, _)| e)).collect();
    let asked: Vec<RowAsked> =
        found.iter().map(|e| RowAsked { values: e.values.clone(), member: Some(e.member.clone()) }).collect();
    let (sums, _, later) = counts(&r, &shards, &asked).await?;
    let mut rows: Vec<Option<(RowEntry, i64)>> = vec![None; ids.len()];
    for (e, c) in found.into_iter().zip(sums).filter(|(_, c)| c.before < cap(t)) {
        let count = if policy == RankPolicy::Competition { c.better } else { c.before };
        if let Some(i) = ids.iter().position(|id| *id == e.player) {
            rows[i] = Some((e, count));
        }
    }
    Ok((RowPlayers { total, rows }, later == before))
}

/// The counts a row of `values` would rank by, summed over the shards.
pub(super) async fn rank_of(s: &AppState, t: &Target<'_>, values: &[i64]) -> Result<(RowCounts, bool), ApiError> {
    let (r, shards) = (reader(s, t)?, shards(t));
    let (sums, total, seen) = counts(&r, &shards, &[RowAsked { values: values.to_vec(), member: None }]).await?;
    let consistent = versions(&r, &shards).await? == seen;
    let capped = |n: i64| n.min(cap(t));
    let (better, better_or_equal) = (capped(sums[0].better), capped(sums[0].better_or_equal));
    Ok((RowCounts { total: capped(total), better, better_or_equal, dense_better: 0 }, consistent))
}
