//! Players' history at a seal: once a period is sealed (and its top
//! published), `scripts/history.lua` records every player's standing in the
//! snapshot and raises their best of the period's kind, in steps of
//! [`STEP_ENTRIES`] entries from where the last step left off, so a job
//! taken over carries on and Redis is never held long.
//!
//! A sharded board's ranks need its shards merged: each step reads the
//! next entries of every shard's snapshot, merges them in board order,
//! ranks the first [`STEP_ENTRIES`] and hands each shard its players'
//! standings (`scripts/history_put.lua`). Where each shard's walk stands is
//! the first shard's progress field, written after the step's writes (a
//! step done again writes the same values).

use super::{JobError, Scheduler};
use crate::board::{Board, Order};
use crate::period::Period;
use std::collections::VecDeque;

use std::cmp::Ordering;

use crate::board::columns::ColumnSpec;
use crate::store::{row_standing, standing, HistoryPut, HistoryStep, RowEntry, SealedRows};

/// Entries one step records (a step of 5,000 holds Redis a few milliseconds).
const STEP_ENTRIES: usize = 5_000;

impl Scheduler<'_> {
    /// Records the history of sealed period `period` of the tag `base`
    /// (a board's own tag).
    pub(super) async fn record_history(
        &self,
        base: &str,
        board: &Board,
        period: &Period,
        expire_at: i64,
    ) -> Result<(), JobError> {
        let step = HistoryStep {
            base,
            period_id: &period.id,
            kind: period.kind_name(),
            desc: board.order() == crate::board::Order::Desc,
            shift: board.packing().shift(),
            expire_at,
            budget: STEP_ENTRIES,
        };
        while !self.store.history_step(&step).await?.0 {
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// Records the history of sealed period `period` of a board ranked by
    /// several columns, whose members are bytes a script does not decode:
    /// the worker reads the snapshot in steps and hands its standings
    /// (`<ordinal>:<competition>:<total>:<values>`) to `history_put.lua`,
    /// recording how far it got as a sharded board's walk does.
    pub(super) async fn record_row_history(
        &self,
        base: &str,
        period: &Period,
        spec: ColumnSpec,
        expire_at: i64,
    ) -> Result<(), JobError> {
        let id = period.id.as_str();
        let mut at = match self.store.history_progress(base, id).await?.as_deref() {
            Some("done") => return Ok(()),
            Some(n) => n.parse::<usize>().unwrap_or(0),
            None => 0,
        };
        let sealed = SealedRows::of(base, id);
        let reader = self.store.primary_reader();
        loop {
            let page = reader.rows_top(&sealed.at(spec, false), at, STEP_ENTRIES).await?;
            let standings: Vec<(String, String)> = page
                .entries
                .iter()
                .zip(page.ranks())
                .map(|(e, r)| (e.player.clone(), row_standing(r.ordinal, r.competition, page.total, &e.values)))
                .collect();
            if !standings.is_empty() {
                let kind = period.kind_name();
                let put = HistoryPut { base, period_id: id, kind, expire_at, first: at == 0, standings: &standings };
                self.store.history_put(&put).await?;
            }
            at += standings.len();
            if standings.len() < STEP_ENTRIES || at as i64 >= page.total {
                self.store.set_history_progress(base, id, "done").await?;
                return Ok(());
            }
            self.store.set_history_progress(base, id, &at.to_string()).await?;
            tokio::task::yield_now().await;
        }
    }

    /// Records the history of sealed period `period` of a sharded board,
    /// whose shards' key bases are `bases`.
    pub(super) async fn record_sharded_history(
        &self,
        bases: &[String],
        board: &Board,
        period: &Period,
        expire_at: i64,
    ) -> Result<(), JobError> {
        let id = period.id.as_str();
        let (order, desc, shift) = (board.order(), board.order() == Order::Desc, board.packing().shift());
        let progress = self.store.history_progress(&bases[0], id).await?;
        let Some(mut at) = positions(progress.as_deref(), bases.len()) else { return Ok(()) };
        let in_order = |a: &(i64, String), b: &(i64, String)| order.entries((a.0, &a.1), (b.0, &b.1));
        let value = |stored: i64| board.packing().decode(stored);
        // Each shard's entries read and not ranked yet, kept from one step
        // to the next: a shard is read again only for what a step took of it.
        let mut walk = Walk::new(bases.len());
        loop {
            for (k, base) in bases.iter().enumerate() {
                if let Some((from, count)) = walk.wanted(k, at[k], STEP_ENTRIES) {
                    let got = self.store.sealed_entries(base, id, from, count, desc).await?;
                    walk.read(k, got.into_iter().map(|(member, stored)| (stored, member)).collect(), count);
                }
            }
            let Some(&(first, _)) = walk.first(in_order) else { break };
            // The first entry's competition rank, and the board's members.
            let (mut total, mut better) = (0, 0);
            for base in bases {
                let (members, above) = self.store.sealed_counts(base, id, value(first), shift, desc).await?;
                total += members;
                better += above;
            }
            let step = self.sharded_step(board, &at, total, better);
            let per_shard = step.rank(
                walk.take(step.take(), in_order),
                bases.len(),
                |a, b| value(a.0) == value(b.0),
                |(stored, member), ordinal, competition| {
                    (member.clone(), standing(ordinal, competition, step.total, *stored))
                },
            );
            if self.put_sharded_step(bases, period, expire_at, &step, per_shard, &mut at).await? {
                return Ok(());
            }
        }
        self.store.set_history_progress(&bases[0], id, "done").await?;
        Ok(())
    }

    /// Records the history of sealed period `period` of a sharded board
    /// ranked by several columns: its shards' snapshots merged by member
    /// bytes, in steps, as [`Self::record_sharded_history`] does.
    pub(super) async fn record_sharded_row_history(
        &self,
        bases: &[String],
        board: &Board,
        period: &Period,
        spec: ColumnSpec,
        expire_at: i64,
    ) -> Result<(), JobError> {
        let id = period.id.as_str();
        let progress = self.store.history_progress(&bases[0], id).await?;
        let Some(mut at) = positions(progress.as_deref(), bases.len()) else { return Ok(()) };
        let sealed: Vec<SealedRows> = bases.iter().map(|b| SealedRows::of(b, id)).collect();
        let reader = self.store.primary_reader();
        let in_order = |a: &RowEntry, b: &RowEntry| a.member.cmp(&b.member);
        let mut walk = Walk::new(bases.len());
        loop {
            for (k, keys) in sealed.iter().enumerate() {
                if let Some((from, count)) = walk.wanted(k, at[k], STEP_ENTRIES) {
                    let got = reader.rows_top(&keys.at(spec, false), from as usize, count).await?;
                    walk.read(k, got.entries, count);
                }
            }
            let Some(first) = walk.first(in_order).map(|e| e.values.clone()) else { break };
            let (mut total, mut better) = (0, 0);
            for keys in &sealed {
                let counts = reader.rows_rank_of(&keys.at(spec, false), &first).await?;
                total += counts.total as u64;
                better += counts.better as u64;
            }
            let step = self.sharded_step(board, &at, total, better);
            let per_shard = step.rank(
                walk.take(step.take(), in_order),
                bases.len(),
                |a, b| a.values == b.values,
                |e, ordinal, competition| {
                    let (o, c, t) = (ordinal as i64, competition as i64, step.total as i64);
                    (e.player.clone(), row_standing(o, c, t, &e.values))
                },
            );
            if self.put_sharded_step(bases, period, expire_at, &step, per_shard, &mut at).await? {
                return Ok(());
            }
        }
        self.store.set_history_progress(&bases[0], id, "done").await?;
        Ok(())
    }

    /// The next step of a sharded history standing at `at`: the board's
    /// members (a top-K board holds the first K of its shards' entries).
    fn sharded_step(&self, board: &Board, at: &[u64], total: u64, better: u64) -> Ranked {
        let total = total.min(board.max_members().unwrap_or(u64::MAX));
        Ranked { emitted: at.iter().sum(), total, better }
    }

    /// Writes a step's standings to each shard and where the walk stands;
    /// whether the history is done.
    async fn put_sharded_step(
        &self,
        bases: &[String],
        period: &Period,
        expire_at: i64,
        step: &Ranked,
        per_shard: Vec<Vec<(String, String)>>,
        at: &mut [u64],
    ) -> Result<bool, JobError> {
        let id = period.id.as_str();
        for (k, standings) in per_shard.iter().enumerate() {
            at[k] += standings.len() as u64;
        }
        for (k, standings) in per_shard.iter().enumerate().filter(|(_, s)| !s.is_empty()) {
            let kind = period.kind_name();
            let first = step.emitted == 0;
            let put = HistoryPut { base: &bases[k], period_id: id, kind, expire_at, first, standings };
            self.store.history_put(&put).await?;
        }
        if at.iter().sum::<u64>() >= step.total {
            self.store.set_history_progress(&bases[0], id, "done").await?;
            return Ok(true);
        }
        let next = at.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        self.store.set_history_progress(&bases[0], id, &next).await?;
        tokio::task::yield_now().await;
        Ok(false)
    }
}

/// The shards' snapshots as a sharded history walks them: per shard, the
/// entries read and not ranked yet (in board order), and whether the shard
/// has no more.
struct Walk<T> {
    read: Vec<VecDeque<T>>,
    ended: Vec<bool>,
}

impl<T> Walk<T> {
    fn new(shards: usize) -> Walk<T> {
        Walk { read: (0..shards).map(|_| VecDeque::new()).collect(), ended: vec![false; shards] }
    }

    /// What to read of shard k, whose first `ranked` entries are ranked, so
    /// that it holds `budget` unranked ones (or all it has): (position, count).
    fn wanted(&self, k: usize, ranked: u64, budget: usize) -> Option<(u64, usize)> {
        let held = self.read[k].len();
        (!self.ended[k] && held < budget).then(|| (ranked + held as u64, budget - held))
    }

    /// Shard k's next entries, `got` of the `asked` read: fewer means its end.
    fn read(&mut self, k: usize, got: Vec<T>, asked: usize) {
        self.ended[k] = got.len() < asked;
        self.read[k].extend(got);
    }

    /// The best entry held (`in_order`: board order).
    fn first(&self, in_order: impl Fn(&T, &T) -> Ordering) -> Option<&T> {
        self.read.iter().filter_map(|r| r.front()).min_by(|a, b| in_order(a, b))
    }

    /// Takes at most `n` entries off the shards, best first (each with its
    /// shard). It stops before a shard that holds nothing and may have
    /// more: an entry not read ranks below every entry read from its shard,
    /// and nothing is known of the next.
    fn take(&mut self, n: usize, in_order: impl Fn(&T, &T) -> Ordering) -> Vec<(T, usize)> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            if (0..self.read.len()).any(|k| self.read[k].is_empty() && !self.ended[k]) {
                break;
            }
            let best = (0..self.read.len())
                .filter_map(|k| self.read[k].front().map(|e| (k, e)))
                .min_by(|(_, a), (_, b)| in_order(a, b))
                .map(|(k, _)| k);
            let Some(k) = best else { break };
            let entry = self.read[k].pop_front().expect("the shard holds its best");
            out.push((entry, k));
        }
        out
    }
}

/// One step of a sharded history: `emitted` entries ranked before it, of
/// `total`; `better` members rank strictly above the step's first entry.
struct Ranked {
    emitted: u64,
    total: u64,
    better: u64,
}

impl Ranked {
    /// How many entries the step ranks.
    fn take(&self) -> usize {
        STEP_ENTRIES.min(self.total.saturating_sub(self.emitted) as usize)
    }

    /// Ranks `merged` (the step's entries in board order, each with its
    /// shard; `same`: two entries tie): per shard, its players' standings,
    /// each made by `standing` from an entry, its ordinal and competition ranks.
    fn rank<T>(
        &self,
        merged: Vec<(T, usize)>,
        shards: usize,
        same: impl Fn(&T, &T) -> bool,
        standing: impl Fn(&T, u64, u64) -> (String, String),
    ) -> Vec<Vec<(String, String)>> {
        let mut per_shard: Vec<Vec<(String, String)>> = vec![Vec::new(); shards];
        let mut competition = self.better + 1;
        for i in 0..merged.len() {
            let ordinal = self.emitted + i as u64 + 1;
            if i > 0 && !same(&merged[i - 1].0, &merged[i].0) {
                competition = ordinal;
            }
            let (entry, k) = &merged[i];
            per_shard[*k].push(standing(entry, ordinal, competition));
        }
        per_shard
    }
}

/// Where each of `n` shards' walk stands, from a sharded history's
/// progress field (none yet: at the start); `None` once done.
fn positions(progress: Option<&str>, n: usize) -> Option<Vec<u64>> {
    match progress {
        Some("done") => None,
        Some(p) => {
            let at: Vec<u64> = p.split(',').filter_map(|x| x.parse().ok()).collect();
            Some(if at.len() == n { at } else { vec![0; n] })
        }
        None => Some(vec![0; n]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shards of players p0..p{n} with values that tie often, each sorted
    /// in board order (desc), as their snapshots are; the first shard's
    /// players lead, so the first steps take all they read of it.
    fn shards(n: usize, k: usize) -> Vec<Vec<(i64, String)>> {
        let mut out = vec![Vec::new(); k];
        for p in 0..n {
            let member = format!("p{p}");
            let shard = crate::board::shard_of(&member, k as u32) as usize;
            let lead = if shard == 0 { 20 } else { 0 };
            out[shard].push(((p as i64 * 7919) % 13 + lead, member));
        }
        for s in &mut out {
            s.sort_by(|a, b| Order::Desc.entries((a.0, &a.1), (b.0, &b.1)));
        }
        out
    }

    #[test]
    fn steps_over_merged_shards_rank_every_player_as_one_board_would() {
        let (n, k, budget) = (500, 4, 37);
        let shards = shards(n, k);
        // The board: every entry in board order; a top-K board's first 450.
        let mut board: Vec<(i64, String)> = shards.iter().flatten().cloned().collect();
        board.sort_by(|a, b| Order::Desc.entries((a.0, &a.1), (b.0, &b.1)));
        let total = 450u64;
        let (mut at, mut walk, mut reads) = (vec![0u64; k], Walk::new(k), 0);
        let in_order = |a: &(i64, String), b: &(i64, String)| Order::Desc.entries((a.0, &a.1), (b.0, &b.1));
        let mut got: Vec<(String, String)> = Vec::new();
        loop {
            for (s, shard) in shards.iter().enumerate() {
                if let Some((from, count)) = walk.wanted(s, at[s], budget) {
                    let chunk = shard.iter().skip(from as usize).take(count).cloned().collect();
                    walk.read(s, chunk, count);
                    reads += count;
                }
            }
            let Some(&(first, _)) = walk.first(in_order) else { break };
            let better = board.iter().filter(|(v, _)| *v > first).count() as u64;
            let emitted: u64 = at.iter().sum();
            let take = budget.min((total - emitted) as usize);
            let step = Ranked { emitted, total, better };
            let per_shard = step.rank(
                walk.take(take, in_order),
                k,
                |a, b| a.0 == b.0,
                |(v, m), ordinal, competition| (m.clone(), standing(ordinal, competition, total, *v)),
            );
            for (s, standings) in per_shard.into_iter().enumerate() {
                at[s] += standings.len() as u64;
                got.extend(standings);
            }
            if at.iter().sum::<u64>() >= total {
                break;
            }
        }
        assert_eq!(got.len(), 450, "every player the board holds, once");
        assert!(reads < 2 * n, "each entry is read about once, not once per step: {reads} reads");
        got.sort_by_key(|(_, standing)| standing.split(':').next().unwrap().parse::<u64>().unwrap());
        for (i, ((member, standing), (value, want))) in got.iter().zip(&board).enumerate() {
            let competition = board.iter().filter(|(v, _)| v > value).count() + 1;
            assert_eq!(member, want, "ordinal {}", i + 1);
            assert_eq!(standing, &format!("{}:{competition}:450:{value}", i + 1), "{member}");
        }
    }

    #[test]
    fn a_sharded_historys_progress_names_each_shards_position_until_done() {
        assert_eq!(positions(None, 3), Some(vec![0, 0, 0]));
        assert_eq!(positions(Some("5,0,12"), 3), Some(vec![5, 0, 12]));
        assert_eq!(positions(Some("done"), 3), None);
        // A progress of another shard count starts over (the writes are idempotent).
        assert_eq!(positions(Some("5,0"), 3), Some(vec![0, 0, 0]));
    }
}
