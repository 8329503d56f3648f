//! Reads of sharded boards (`shards = N`): each shard is read atomically by
//! `read.lua`, all shards at once (one request per shard on the cluster
//! connection, so one round trip per node), and the answers are merged into
//! exactly what the unsharded board would answer. Board order is a total
//! order on (stored score, member), and a member lives in one shard, so:
//! a page is a merge of the shards' pages; a position is the sum of the
//! shards' counts of entries before a (stored, member) key; the members
//! with a better value, the sum of the shards' counts.
//!
//! Every shard's answer carries its version (the sum of its recorded
//! offsets, which every write raises), and a read compares each shard's
//! versions in its first and last step: all equal, no shard changed from
//! the first step (all of it done) to the last, so there is an instant all
//! the shards' answers describe, and the read says `"consistent": true`.
//! A read takes two steps (a page by offset, a player, rank-of) or three
//! (a page from a cursor, around, friends).
//! Dense ranks are not kept on sharded boards, and `offset` deeper than
//! `http.max_limit` is refused (a page at offset O may read O + limit
//! entries of a shard): cursors page on at any depth.

use std::cmp::Ordering;

use futures::future::try_join_all;

use super::cursor::{Cursor, Direction};
use super::ranks::{meta_of, ranks_at, ranks_of_run, Entry};
use super::single::read_at;
use super::standing::{Friend, Friends, Page, RankOf, Standing};
use super::target::{PeriodKeys, RankPolicy, Target};
use super::{ApiError, AppState};
use crate::board::{shard_of, Order};
use crate::store::{self, Query, Row, ShardCounted, ShardRows, Sought};

/// One shard's query of `read.lua`.
async fn call<Q: Query>(s: &AppState, t: &Target<'_>, k: &PeriodKeys, q: &Q) -> Result<Q::Reply, ApiError> {
    s.reader_for(t)?.read(&read_at(t, k), q).await.map_err(ApiError::unavailable)
}

/// The target's shards (none on a single key).
fn shards<'t>(t: &'t Target<'_>) -> &'t [PeriodKeys] {
    t.layout.shards()
}

/// The same query on every shard at once.
async fn fan<Q: Query>(s: &AppState, t: &Target<'_>, q: Q) -> Result<Vec<Q::Reply>, ApiError> {
    try_join_all(shards(t).iter().map(|k| call(s, t, k, &q))).await
}

/// Every shard's version, as `read.lua` works it out (see `Reader::version`).
async fn versions(s: &AppState, t: &Target<'_>) -> Result<Vec<i64>, ApiError> {
    let reader = s.reader_for(t)?;
    let calls = shards(t).iter().map(|k| {
        let reader = &reader;
        async move { reader.version(&k.version_key).await.map_err(ApiError::unavailable) }
    });
    try_join_all(calls).await
}

/// Board order of two rows (see [`Order::entries`]).
fn board_order(order: Order, a: &Row, b: &Row) -> Ordering {
    order.entries((a.stored, &a.member), (b.stored, &b.member))
}

fn merged(t: &Target<'_>, lists: Vec<Vec<Row>>) -> Vec<Row> {
    let mut all: Vec<Row> = lists.into_iter().flatten().collect();
    all.sort_by(|a, b| board_order(t.board.order(), a, b));
    all
}

/// (better, better_or_equal, before) of each (value, stored, member)
/// asked, summed over the shards, and the shards' versions.
async fn counts(
    s: &AppState,
    t: &Target<'_>,
    asked: &[(i64, i64, &str)],
) -> Result<(Vec<(i64, i64, i64)>, Vec<i64>), ApiError> {
    let replies = fan(s, t, store::ShardCounts { asked }).await?;
    let mut out = vec![(0, 0, 0); asked.len()];
    for r in &replies {
        for (o, c) in out.iter_mut().zip(&r.counts) {
            (o.0, o.1, o.2) = (o.0 + c.0, o.1 + c.1, o.2 + c.2);
        }
    }
    Ok((out, r_versions(&replies)))
}

/// A shard's reply: its version and its total.
trait ShardReply {
    fn version(&self) -> i64;
    fn total(&self) -> i64;
}

impl ShardReply for ShardRows {
    fn version(&self) -> i64 {
        self.version
    }
    fn total(&self) -> i64 {
        self.total
    }
}

impl ShardReply for Sought {
    fn version(&self) -> i64 {
        self.version
    }
    fn total(&self) -> i64 {
        self.total
    }
}

impl ShardReply for ShardCounted {
    fn version(&self) -> i64 {
        self.version
    }
    fn total(&self) -> i64 {
        self.total
    }
}

/// The shards' versions their replies carry.
fn r_versions<R: ShardReply>(replies: &[R]) -> Vec<i64> {
    replies.iter().map(ShardReply::version).collect()
}

/// A top-K board (`max_members = K`, `best` only) holds its best K: each
/// shard keeps its own best K, which hold the board's best K (a member of
/// those has fewer than K better members in its shard too), and reads show
/// only the first K of the merged order, as the unsharded board holds.
fn cap(t: &Target<'_>) -> i64 {
    t.board.max_members().map_or(i64::MAX, |k| i64::try_from(k).unwrap_or(i64::MAX))
}

fn total<R: ShardReply>(replies: &[R]) -> i64 {
    replies.iter().map(ShardReply::total).sum()
}

/// How many members have a better value than the first of `rows`, and the
/// shards' versions: one more step (`None` with no rows).
async fn better_than_first(s: &AppState, t: &Target<'_>, rows: &[Row]) -> Result<Option<(i64, Vec<i64>)>, ApiError> {
    let Some(first) = rows.first() else { return Ok(None) };
    let (sums, vers) = counts(s, t, &[(t.board.packing().decode(first.stored), 0, "")]).await?;
    Ok(Some((sums[0].0, vers)))
}

/// The listing's entries with their ranks, from the first one's position
/// and the members with a better value than it.
fn entries(t: &Target<'_>, start: i64, better: i64, rows: Vec<Row>) -> Vec<Entry> {
    let packing = t.board.packing();
    let values: Vec<i64> = rows.iter().map(|r| packing.decode(r.stored)).collect();
    let ranks = ranks_of_run(start, better, 0, &values);
    rows.into_iter()
        .zip(values)
        .zip(ranks)
        .map(|((r, value), ranks)| Entry { member: r.member, stored: r.stored, value, ranks, meta: meta_of(r.meta) })
        .collect()
}

/// Whether `a` is a better value than `b` on the board.
fn better_value(t: &Target<'_>, a: i64, b: i64) -> bool {
    match t.board.order() {
        Order::Desc => a > b,
        Order::Asc => a < b,
    }
}

/// A page of the top, by offset or from a cursor.
pub(super) async fn top(
    s: &AppState,
    t: &Target<'_>,
    cursor: Option<&Cursor>,
    offset: usize,
    limit: usize,
) -> Result<Page, ApiError> {
    refuse_deep(s, offset)?;
    let run = match cursor {
        None => top_at(s, t, offset, limit).await?,
        Some(c) => top_from(s, t, c, limit).await?,
    };
    let total = run.total.min(cap(t));
    let rows: Vec<Row> = run.rows.into_iter().take((cap(t) - run.start).max(0) as usize).collect();
    Ok(Page { total, entries: entries(t, run.start, run.better, rows), consistent: Some(run.consistent) })
}

/// Refuses an `offset` beyond `http.max_limit`: a page at offset O reads O
/// + limit entries of every shard.
pub(super) fn refuse_deep(s: &AppState, offset: usize) -> Result<(), ApiError> {
    if offset <= s.max_limit {
        return Ok(());
    }
    Err(ApiError::bad(
        "offset",
        format!(
            "offset beyond {} (http.max_limit) is refused on a sharded board: it would read offset + limit entries \
             of every shard; page on with next_cursor instead",
            s.max_limit
        ),
    ))
}

/// A merged run of entries: the board's total, the first's position, the
/// members with a better value than it, and whether the shards stood still.
struct Run {
    total: i64,
    start: i64,
    better: i64,
    rows: Vec<Row>,
    consistent: bool,
}

/// The shards whose first `first` entries read may not hold all of theirs
/// among the merged first `want`: they read all of theirs and their last
/// still falls inside those.
fn short(t: &Target<'_>, lists: &[Vec<Row>], first: usize, want: usize) -> Vec<usize> {
    let mut all: Vec<&Row> = lists.iter().flatten().collect();
    all.sort_by(|a, b| board_order(t.board.order(), a, b));
    // Fewer than `want` in all: every shard was read to its end.
    let Some(cut) = all.get(want - 1) else { return Vec::new() };
    (0..lists.len())
        .filter(|&i| {
            lists[i].len() == first && lists[i].last().is_some_and(|l| board_order(t.board.order(), l, cut).is_le())
        })
        .collect()
}

/// A page by offset: each shard's first entries, merged.
async fn top_at(s: &AppState, t: &Target<'_>, offset: usize, limit: usize) -> Result<Run, ApiError> {
    // A shard's share of the first offset + limit is about share =
    // (offset + limit) / shards, with a standard deviation under
    // sqrt(share) when members spread evenly: share + 4 sqrt(share) + 8 is
    // read first (a shard holds more about once in 10,000 reads), and a
    // shard whose last entry read still falls inside the merged first
    // offset + limit is read again, to offset + limit.
    let want = offset + limit;
    let share = want.div_ceil(shards(t).len());
    let first = want.min(share + 4 * share.isqrt() + 8);
    let mut replies = fan(s, t, store::ShardTop { n: first }).await?;
    let mut lists: Vec<Vec<Row>> = replies.iter_mut().map(|r| std::mem::take(&mut r.rows)).collect();
    if first < want {
        let again = short(t, &lists, first, want);
        let more = try_join_all(again.iter().map(|&i| {
            let k = &shards(t)[i];
            async move { call(s, t, k, &store::ShardTop { n: want }).await }
        }))
        .await?;
        for (i, r) in again.into_iter().zip(more) {
            // The versions compared are the first read's: a shard that moved in between shows.
            (lists[i], replies[i].total) = (r.rows, r.total);
        }
    }
    // Each shard read its first offset + limit entries: every one of its
    // members with a better value than the page's first entry (fewer than
    // offset + 1 of them) is among those.
    let all = merged(t, lists);
    let packing = t.board.packing();
    let better = all.get(offset).map_or(0, |first| {
        let v = packing.decode(first.stored);
        all.iter().filter(|r| better_value(t, packing.decode(r.stored), v)).count() as i64
    });
    let rows: Vec<Row> = all.into_iter().skip(offset).take(limit).collect();
    let consistent = versions(s, t).await? == r_versions(&replies);
    Ok(Run { total: total(&replies), start: offset as i64, better, rows, consistent })
}

/// The shards' entries after a seek, and those before it, each merged.
fn split(t: &Target<'_>, replies: &mut [Sought]) -> (Vec<Row>, Vec<Row>) {
    let afters = replies.iter_mut().map(|r| std::mem::take(&mut r.after_rows)).collect();
    let befores = replies.iter_mut().map(|r| std::mem::take(&mut r.before_rows)).collect();
    (merged(t, afters), merged(t, befores))
}

/// A page from a cursor: each shard's entries next to its key, merged.
async fn top_from(s: &AppState, t: &Target<'_>, c: &Cursor, limit: usize) -> Result<Run, ApiError> {
    let (after, before) = match c.direction {
        Direction::Next => (limit, 0),
        Direction::Prev => (0, limit),
    };
    let mut replies = fan(s, t, store::ShardSeek { stored: c.stored, member: &c.member, after, before }).await?;
    let at: i64 = replies.iter().map(|r| r.before + i64::from(r.present)).sum();
    let (afters, befores) = split(t, &mut replies);
    let (start, rows): (i64, Vec<Row>) = match c.direction {
        Direction::Next => (at, afters.into_iter().take(limit).collect()),
        Direction::Prev => {
            let skip = befores.len().saturating_sub(limit);
            // Entries before the key: the cursor's own entry, if present, is not among them.
            let present: i64 = replies.iter().map(|r| i64::from(r.present)).sum();
            (at - present - (befores.len() - skip) as i64, befores.into_iter().skip(skip).collect())
        }
    };
    let (better, consistent) = match better_than_first(s, t, &rows).await? {
        Some((better, later)) => (better, later == r_versions(&replies)),
        None => (0, versions(s, t).await? == r_versions(&replies)),
    };
    Ok(Run { total: total(&replies), start, better, rows, consistent })
}

/// The shard holding `player`.
fn owner<'t>(t: &'t Target<'_>, player: &str) -> &'t PeriodKeys {
    let shards = shards(t);
    &shards[shard_of(player, shards.len() as u32) as usize]
}

/// A player's entry as their shard holds it.
async fn find(s: &AppState, t: &Target<'_>, player: &str) -> Result<Option<store::Found>, ApiError> {
    call(s, t, owner(t, player), &store::Player { member: player }).await
}

/// A player's standing; `None` if they are not on the board (or past a top-K board's K).
pub(super) async fn player(s: &AppState, t: &Target<'_>, player_id: &str) -> Result<Option<Standing>, ApiError> {
    let (before, found) = tokio::try_join!(versions(s, t), find(s, t, player_id))?;
    let Some(found) = found else {
        return Ok(None);
    };
    let value = t.board.packing().decode(found.stored);
    let asked = [(value, found.stored, player_id)];
    let replies = fan(s, t, store::ShardCounts { asked: &asked }).await?;
    let position: i64 = replies.iter().map(|r| r.counts[0].2).sum();
    if position >= cap(t) {
        return Ok(None);
    }
    let better: i64 = replies.iter().map(|r| r.counts[0].0).sum();
    Ok(Some(Standing {
        total: (total(&replies) + i64::from(found.hidden)).min(cap(t)),
        ranks: ranks_at(position, better, 0),
        score: value,
        meta: meta_of(found.meta),
        hidden: found.hidden,
        consistent: Some(r_versions(&replies) == before),
    }))
}

pub(super) async fn around(
    s: &AppState,
    t: &Target<'_>,
    player_id: &str,
    radius: usize,
    fill: bool,
) -> Result<Option<Page>, ApiError> {
    let (before, found) = tokio::try_join!(versions(s, t), find(s, t, player_id))?;
    // A hidden player is not on the board others read: no window around them.
    let Some(found) = found.filter(|f| !f.hidden) else {
        return Ok(None);
    };
    let reach = 2 * radius;
    let mut replies =
        fan(s, t, store::ShardSeek { stored: found.stored, member: player_id, after: reach, before: reach }).await?;
    let total = total(&replies).min(cap(t));
    let position: i64 = replies.iter().map(|r| r.before).sum();
    if position >= cap(t) {
        return Ok(None);
    }
    let (afters, befores) = split(t, &mut replies);
    let me = Row { member: player_id.to_string(), stored: found.stored, meta: found.meta };
    let (start, rows) = window_of(befores, me, afters, Around { position, radius, total, fill });
    let (better, consistent) = match better_than_first(s, t, &rows).await? {
        Some((better, later)) => (better, later == before && r_versions(&replies) == before),
        None => (0, r_versions(&replies) == before),
    };
    Ok(Some(Page { total, entries: entries(t, start, better, rows), consistent: Some(consistent) }))
}

/// Where a merged window around a player stands: their position, the
/// radius asked, the board's total and whether to fill.
pub(super) struct Around {
    pub position: i64,
    pub radius: usize,
    pub total: i64,
    pub fill: bool,
}

/// The window around a player from the merged entries before them (board
/// order, up to 2 * radius), theirs and those after: as the unsharded read,
/// `[p - r, p + r]`, moved off an edge when filling. Its first entry's
/// position and its entries.
pub(super) fn window_of<E>(befores: Vec<E>, me: E, afters: Vec<E>, a: Around) -> (i64, Vec<E>) {
    let reach = 2 * a.radius;
    let keep = befores.len().min(reach);
    let first_at = a.position - keep as i64;
    let skip = befores.len() - keep;
    let window = befores.into_iter().skip(skip).chain(std::iter::once(me)).chain(afters.into_iter().take(reach));
    let r = a.radius as i64;
    let (mut start, mut stop) = (a.position - r, a.position + r);
    if a.fill {
        if start < 0 {
            (start, stop) = (0, stop - start);
        }
        if stop > a.total - 1 {
            (start, stop) = (start - (stop - (a.total - 1)), a.total - 1);
        }
    }
    let (start, stop) = (start.max(0), stop.min(a.total - 1));
    let entries = window.enumerate().filter(|(i, _)| (start..=stop).contains(&(first_at + *i as i64))).map(|(_, e)| e);
    (start, entries.collect())
}

/// A friends read: each named player's rank on the whole board.
pub(super) async fn players(
    s: &AppState,
    t: &Target<'_>,
    ids: &[String],
    policy: RankPolicy,
) -> Result<Friends, ApiError> {
    let before = versions(s, t).await?;
    // Each shard is asked for the players it holds.
    let mine: Vec<Vec<String>> =
        shards(t).iter().map(|k| ids.iter().filter(|p| std::ptr::eq(owner(t, p), k)).cloned().collect()).collect();
    let replies = try_join_all(
        shards(t)
            .iter()
            .zip(&mine)
            .map(|(k, m)| async move { call(s, t, k, &store::Players { policy: "competition", members: m }).await }),
    )
    .await?;
    let mut found = Vec::new();
    for (m, reply) in mine.iter().zip(&replies) {
        for (id, row) in m.iter().zip(&reply.rows) {
            if let Some(row) = row {
                found.push((id.clone(), row.stored, row.meta.clone()));
            }
        }
    }
    let packing = t.board.packing();
    let asked: Vec<(i64, i64, &str)> = found.iter().map(|f| (packing.decode(f.1), f.1, f.0.as_str())).collect();
    let (sums, later) = counts(s, t, &asked).await?;
    let total: i64 = replies.iter().map(|r| r.total).sum::<i64>().min(cap(t));
    let rows: Vec<_> = found
        .into_iter()
        .zip(sums)
        .filter(|(_, (_, _, before))| *before < cap(t))
        .map(|((id, stored, meta), (better, _, before))| {
            let rank = match policy {
                RankPolicy::Competition => better + 1,
                _ => before + 1,
            };
            Friend { member: id, stored, rank, meta: meta_of(meta) }
        })
        .collect();
    let not_found: Vec<String> =
        ids.iter().filter(|id| !rows.iter().any(|r: &Friend| &r.member == *id)).cloned().collect();
    Ok(Friends { total, found: rows, not_found, consistent: Some(later == before) })
}

/// The counts a value would rank by (no dense ranks on a sharded board).
pub(super) async fn rank_of(s: &AppState, t: &Target<'_>, value: i64) -> Result<RankOf, ApiError> {
    let asked = [(value, 0, "")];
    let replies = fan(s, t, store::ShardCounts { asked: &asked }).await?;
    let better = replies.iter().map(|r| r.counts[0].0).sum::<i64>().min(cap(t));
    let better_or_equal = replies.iter().map(|r| r.counts[0].1).sum::<i64>().min(cap(t));
    let consistent = versions(s, t).await? == r_versions(&replies);
    Ok(RankOf {
        total: total(&replies).min(cap(t)),
        better,
        better_or_equal,
        dense_better: 0,
        consistent: Some(consistent),
    })
}
