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
use serde_json::value::RawValue;

use super::cursor::{Cursor, Direction};
use super::ranks::{int, meta_of, ranks_at, ranks_of_run, stored_of, Entry};
use super::standing::{Friend, Friends, Page, RankOf, Standing};
use super::target::{Layout, RankPolicy, ShardKeys, Target};
use super::{ApiError, AppState};
use crate::board::{shard_of, Order};

/// One shard's query of `read.lua`.
async fn call(
    s: &AppState,
    t: &Target<'_>,
    k: &ShardKeys,
    op: &str,
    args: &[String],
) -> Result<Option<Vec<redis::Value>>, ApiError> {
    s.reader_for(t)?
        .query(k.keys.read_keys(), op, t.board.order().as_str(), t.board.packing().shift(), args)
        .await
        .map_err(ApiError::unavailable)
}

/// The target's shards (none on a single key).
fn shards<'t>(t: &'t Target<'_>) -> &'t [ShardKeys] {
    match &t.layout {
        Layout::Sharded { shards, .. } => shards,
        Layout::Single(_) => &[],
    }
}

/// The same query on every shard at once (`args` per shard).
async fn fan(
    s: &AppState,
    t: &Target<'_>,
    op: &str,
    args: impl Fn(&ShardKeys) -> Vec<String>,
) -> Result<Vec<Vec<redis::Value>>, ApiError> {
    let calls = shards(t).iter().map(|k| {
        let a = args(k);
        async move { call(s, t, k, op, &a).await.map(Option::unwrap_or_default) }
    });
    try_join_all(calls).await
}

/// A sealed period of a sharded board reads as the unsharded board's does
/// before its seal (empty) until its last shard is sealed: a job seals the
/// shards in order, so from then on every shard's snapshot is whole.
pub(super) async fn settled<'a>(s: &AppState, mut t: Target<'a>) -> Result<Target<'a>, ApiError> {
    let Layout::Sharded { shards, last_seal: Some((hash, field)) } = &mut t.layout else {
        return Ok(t);
    };
    let reader = s.reader()?.fresh(t.fresh);
    let sealed = reader.has_field(hash, field).await.map_err(ApiError::unavailable)?;
    if !sealed {
        for k in shards {
            k.keys.make_absent();
        }
    }
    Ok(t)
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

/// An entry read from a shard.
struct Row {
    member: String,
    stored: i64,
    meta: Option<Box<RawValue>>,
}

/// `n` rows (all if `None`) of (member, stored, [meta]) from `at` in a reply.
fn rows(reply: &[redis::Value], at: usize, n: Option<usize>, with_meta: bool) -> (Vec<Row>, usize) {
    let stride = if with_meta { 3 } else { 2 };
    let chunks = reply.get(at..).unwrap_or_default().chunks(stride).filter(|c| c.len() == stride);
    let out: Vec<Row> = chunks
        .take(n.unwrap_or(usize::MAX))
        .map(|c| Row {
            member: redis::from_redis_value(c[0].clone()).unwrap_or_default(),
            stored: stored_of(&c[1]),
            meta: if with_meta { meta_of(c.get(2)) } else { None },
        })
        .collect();
    let used = out.len() * stride;
    (out, at + used)
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
    let replies = fan(s, t, "shard_counts", |k| {
        let mut a = vec![k.version_key.clone()];
        for (v, stored, member) in asked {
            a.extend([v.to_string(), stored.to_string(), member.to_string()]);
        }
        a
    })
    .await?;
    let mut out = vec![(0, 0, 0); asked.len()];
    for r in &replies {
        for (i, o) in out.iter_mut().enumerate() {
            o.0 += int(r.get(2 + 3 * i));
            o.1 += int(r.get(3 + 3 * i));
            o.2 += int(r.get(4 + 3 * i));
        }
    }
    Ok((out, vers(&replies)))
}

/// The versions at the head of the shards' replies.
fn vers(replies: &[Vec<redis::Value>]) -> Vec<i64> {
    replies.iter().map(|r| int(r.first())).collect()
}

/// A top-K board (`max_members = K`, `best` only) holds its best K: each
/// shard keeps its own best K, which hold the board's best K (a member of
/// those has fewer than K better members in its shard too), and reads show
/// only the first K of the merged order, as the unsharded board holds.
fn cap(t: &Target<'_>) -> i64 {
    t.board.max_members().map_or(i64::MAX, |k| i64::try_from(k).unwrap_or(i64::MAX))
}

fn total(replies: &[Vec<redis::Value>]) -> i64 {
    replies.iter().map(|r| int(r.get(1))).sum()
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
        .map(|((r, value), ranks)| Entry { member: r.member, stored: r.stored, value, ranks, meta: r.meta })
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
    if offset > s.max_limit {
        return Err(ApiError::bad(
            "offset",
            format!(
                "offset beyond {} (http.max_limit) is refused on a sharded board: it would read offset + limit \
                 entries of every shard; page on with next_cursor instead",
                s.max_limit
            ),
        ));
    }
    let with_meta = t.board.meta();
    let (total, start, better, rows, consistent) = match cursor {
        None => {
            // A shard's share of the first offset + limit is about share =
            // (offset + limit) / shards, with a standard deviation under
            // sqrt(share) when members spread evenly: share + 4 sqrt(share)
            // + 4 is read first (a shard holds more about once in 10,000
            // reads), and a shard whose last entry read still falls inside
            // the merged first offset + limit is read again, to offset + limit.
            let want = offset + limit;
            let share = want.div_ceil(shards(t).len());
            let first = want.min(share + 4 * share.isqrt() + 8);
            let n = first.to_string();
            let mut replies = fan(s, t, "shard_top", |k| vec![k.version_key.clone(), n.clone()]).await?;
            let mut lists: Vec<Vec<Row>> = replies.iter().map(|r| rows(r, 2, None, with_meta).0).collect();
            if first < want {
                let mut all: Vec<&Row> = lists.iter().flatten().collect();
                all.sort_by(|a, b| board_order(t.board.order(), a, b));
                let again: Vec<usize> = match all.get(want - 1) {
                    // Fewer than offset + limit in all: every shard was read to its end.
                    None => Vec::new(),
                    Some(cut) => (0..lists.len())
                        .filter(|&i| {
                            lists[i].len() == first
                                && lists[i].last().is_some_and(|l| board_order(t.board.order(), l, cut).is_le())
                        })
                        .collect(),
                };
                let n = want.to_string();
                let more = try_join_all(again.iter().map(|&i| {
                    let args = vec![shards(t)[i].version_key.clone(), n.clone()];
                    async move { call(s, t, &shards(t)[i], "shard_top", &args).await.map(Option::unwrap_or_default) }
                }))
                .await?;
                for (i, r) in again.into_iter().zip(more) {
                    lists[i] = rows(&r, 2, None, with_meta).0;
                    // The versions compared are the first read's: a shard that moved in between shows.
                    replies[i][1] = r.get(1).cloned().unwrap_or(redis::Value::Int(0));
                }
            }
            // Each shard read its first offset + limit entries: every one of
            // its members with a better value than the page's first entry
            // (fewer than offset + 1 of them) is among those.
            let all = merged(t, lists);
            let packing = t.board.packing();
            let better = all.get(offset).map_or(0, |first| {
                let v = packing.decode(first.stored);
                all.iter().filter(|r| better_value(t, packing.decode(r.stored), v)).count() as i64
            });
            let page: Vec<Row> = all.into_iter().skip(offset).take(limit).collect();
            let consistent = versions(s, t).await? == vers(&replies);
            (total(&replies), offset as i64, better, page, consistent)
        }
        Some(c) => {
            let (after, before_n) = match c.direction {
                Direction::Next => (limit, 0),
                Direction::Prev => (0, limit),
            };
            let replies = fan(s, t, "shard_seek", |k| {
                vec![
                    k.version_key.clone(),
                    c.stored.to_string(),
                    c.member.clone(),
                    after.to_string(),
                    before_n.to_string(),
                ]
            })
            .await?;
            let at: i64 = replies.iter().map(|r| int(r.get(2)) + int(r.get(3))).sum();
            let mut afters = Vec::new();
            let mut befores = Vec::new();
            for r in &replies {
                let n_after = int(r.get(4)).max(0) as usize;
                let (a, next) = rows(r, 5, Some(n_after), with_meta);
                afters.push(a);
                befores.push(rows(r, next, None, with_meta).0);
            }
            let (start, page): (i64, Vec<Row>) = match c.direction {
                Direction::Next => (at, merged(t, afters).into_iter().take(limit).collect()),
                Direction::Prev => {
                    let all = merged(t, befores);
                    let skip = all.len().saturating_sub(limit);
                    // Entries before the key: the cursor's own entry, if present, is not among them.
                    let present: i64 = replies.iter().map(|r| int(r.get(3))).sum();
                    (at - present - (all.len() - skip) as i64, all.into_iter().skip(skip).collect())
                }
            };
            let (better, consistent) = match better_than_first(s, t, &page).await? {
                Some((better, later)) => (better, later == vers(&replies)),
                None => (0, versions(s, t).await? == vers(&replies)),
            };
            (total(&replies), start, better, page, consistent)
        }
    };
    let total = total.min(cap(t));
    let rows: Vec<Row> = rows.into_iter().take((cap(t) - start).max(0) as usize).collect();
    Ok(Page { total, entries: entries(t, start, better, rows), consistent: Some(consistent) })
}

/// The shard holding `player`.
fn owner<'t>(t: &'t Target<'_>, player: &str) -> &'t ShardKeys {
    let shards = shards(t);
    &shards[shard_of(player, shards.len() as u32) as usize]
}

/// A player's entry as their shard holds it: (stored, meta, hidden).
async fn find(
    s: &AppState,
    t: &Target<'_>,
    player: &str,
) -> Result<Option<(i64, Option<Box<RawValue>>, bool)>, ApiError> {
    let Some(reply) = call(s, t, owner(t, player), "player", &[player.to_string()]).await? else {
        return Ok(None);
    };
    Ok(Some((reply.get(4).map(stored_of).unwrap_or(0), meta_of(reply.get(5)), int(reply.get(6)) == 1)))
}

/// A player's standing; `None` if they are not on the board (or past a top-K board's K).
pub(super) async fn player(s: &AppState, t: &Target<'_>, player_id: &str) -> Result<Option<Standing>, ApiError> {
    let (before, found) = tokio::try_join!(versions(s, t), find(s, t, player_id))?;
    let Some((stored, meta, hidden)) = found else {
        return Ok(None);
    };
    let value = t.board.packing().decode(stored);
    let replies = fan(s, t, "shard_counts", |k| {
        vec![k.version_key.clone(), value.to_string(), stored.to_string(), player_id.to_string()]
    })
    .await?;
    let position: i64 = replies.iter().map(|r| int(r.get(4))).sum();
    if position >= cap(t) {
        return Ok(None);
    }
    let better: i64 = replies.iter().map(|r| int(r.get(2))).sum();
    Ok(Some(Standing {
        total: (total(&replies) + i64::from(hidden)).min(cap(t)),
        ranks: ranks_at(position, better, 0),
        score: value,
        meta,
        hidden,
        consistent: Some(vers(&replies) == before),
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
    let Some((stored, meta, false)) = found else {
        return Ok(None);
    };
    let with_meta = t.board.meta();
    let reach = (2 * radius).to_string();
    let replies = fan(s, t, "shard_seek", |k| {
        vec![k.version_key.clone(), stored.to_string(), player_id.to_string(), reach.clone(), reach.clone()]
    })
    .await?;
    let total = total(&replies).min(cap(t));
    let position: i64 = replies.iter().map(|r| int(r.get(2))).sum();
    if position >= cap(t) {
        return Ok(None);
    }
    let (mut afters, mut befores) = (Vec::new(), Vec::new());
    for r in &replies {
        let n_after = int(r.get(4)).max(0) as usize;
        let (a, next) = rows(r, 5, Some(n_after), with_meta);
        afters.push(a);
        befores.push(rows(r, next, None, with_meta).0);
    }
    let befores = merged(t, befores);
    let keep = befores.len().min(2 * radius);
    let first_at = position - keep as i64;
    let mut window: Vec<Row> = befores.into_iter().rev().take(keep).collect::<Vec<_>>().into_iter().rev().collect();
    window.push(Row { member: player_id.to_string(), stored, meta });
    window.extend(merged(t, afters).into_iter().take(2 * radius));
    // As the unsharded read: [p - r, p + r], moved off an edge when filling.
    let r = radius as i64;
    let (mut start, mut stop) = (position - r, position + r);
    if fill {
        if start < 0 {
            (start, stop) = (0, stop - start);
        }
        if stop > total - 1 {
            (start, stop) = (start - (stop - (total - 1)), total - 1);
        }
    }
    let (start, stop) = (start.max(0), stop.min(total - 1));
    let rows: Vec<Row> = window
        .into_iter()
        .enumerate()
        .filter(|(i, _)| (start..=stop).contains(&(first_at + *i as i64)))
        .map(|(_, row)| row)
        .collect();
    let (better, consistent) = match better_than_first(s, t, &rows).await? {
        Some((better, later)) => (better, later == before && vers(&replies) == before),
        None => (0, vers(&replies) == before),
    };
    Ok(Some(Page { total, entries: entries(t, start, better, rows), consistent: Some(consistent) }))
}

/// A friends read: each named player's rank on the whole board.
pub(super) async fn players(
    s: &AppState,
    t: &Target<'_>,
    ids: &[String],
    policy: RankPolicy,
) -> Result<Friends, ApiError> {
    let before = versions(s, t).await?;
    let with_meta = t.board.meta();
    let stride = if with_meta { 3 } else { 2 };
    // Each shard is asked for the players it holds.
    let replies = fan(s, t, "players", |k| {
        let mut a = vec!["competition".to_string()];
        a.extend(ids.iter().filter(|p| std::ptr::eq(owner(t, p), k)).cloned());
        a
    })
    .await?;
    let mut found = Vec::new();
    for (k, reply) in shards(t).iter().zip(&replies) {
        let mine = ids.iter().filter(|p| std::ptr::eq(owner(t, p), k));
        for (id, row) in mine.zip(reply.get(1..).unwrap_or_default().chunks(stride)) {
            if !matches!(row[0], redis::Value::Nil) {
                found.push((id.clone(), stored_of(&row[0]), meta_of(row.get(2))));
            }
        }
    }
    let packing = t.board.packing();
    let asked: Vec<(i64, i64, &str)> = found.iter().map(|f| (packing.decode(f.1), f.1, f.0.as_str())).collect();
    let (sums, later) = counts(s, t, &asked).await?;
    let total: i64 = replies.iter().map(|r| int(r.first())).sum::<i64>().min(cap(t));
    let rows: Vec<_> = found
        .into_iter()
        .zip(sums)
        .filter(|(_, (_, _, before))| *before < cap(t))
        .map(|((id, stored, meta), (better, _, before))| {
            let rank = match policy {
                RankPolicy::Competition => better + 1,
                _ => before + 1,
            };
            Friend { member: id, stored, rank, meta }
        })
        .collect();
    let not_found: Vec<String> =
        ids.iter().filter(|id| !rows.iter().any(|r: &Friend| &r.member == *id)).cloned().collect();
    Ok(Friends { total, found: rows, not_found, consistent: Some(later == before) })
}

/// The counts a value would rank by (no dense ranks on a sharded board).
pub(super) async fn rank_of(s: &AppState, t: &Target<'_>, value: i64) -> Result<RankOf, ApiError> {
    let replies =
        fan(s, t, "shard_counts", |k| vec![k.version_key.clone(), value.to_string(), "0".into(), String::new()])
            .await?;
    let better = replies.iter().map(|r| int(r.get(2))).sum::<i64>().min(cap(t));
    let better_or_equal = replies.iter().map(|r| int(r.get(3))).sum::<i64>().min(cap(t));
    let consistent = versions(s, t).await? == vers(&replies);
    Ok(RankOf {
        total: total(&replies).min(cap(t)),
        better,
        better_or_equal,
        dense_better: 0,
        consistent: Some(consistent),
    })
}
