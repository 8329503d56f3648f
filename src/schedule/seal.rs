//! Sealing one period of one board tag: `scripts/seal.lua` freezes it into
//! its final snapshot (at most once), and its top is published to
//! `[sealing] topic` once, the publication recorded in the tag's sealed hash.

use serde_json::{json, Value};
use tracing::info;

use super::{now_ms, JobError, Outcome, Scheduler};
use crate::board::columns::{ColumnSpec, Columns};
use crate::board::Board;
use crate::keys;
use crate::metrics;
use crate::store::{RowListing, SealCall, SealedRows};

/// `entry` with the metadata stored for it, if any.
fn with_meta(mut entry: Value, meta: Option<&str>) -> Value {
    if let Some(meta) = meta.and_then(|m| serde_json::from_str::<Value>(m).ok()) {
        entry["meta"] = meta;
    }
    entry
}

/// The published entries of a sealed top: ranks, values and each entry's metadata.
fn published_entries(board: &Board, top: &[(String, f64, Option<String>)]) -> Vec<Value> {
    top.iter()
        .enumerate()
        .map(|(i, (member, stored, meta))| {
            let score = board.packing().decode(*stored as i64);
            // A team board's top ranks teams.
            let entry = match board.team() {
                Some(_) => json!({ "rank": i + 1, "team_id": member, "score": score }),
                None => json!({ "rank": i + 1, "player_id": member, "score": score }),
            };
            with_meta(entry, meta.as_deref())
        })
        .collect()
}

/// The first `n` entries of a sealed snapshot of a board ranked by several
/// columns: ranks (ordinal), each entry's `scores` and its metadata.
fn row_entries(c: &Columns, top: &RowListing) -> Vec<Value> {
    top.entries
        .iter()
        .zip(top.ranks())
        .map(|(e, r)| {
            let entry = json!({ "rank": r.ordinal, "player_id": e.player, "scores": c.scores(&e.values) });
            with_meta(entry, e.meta.as_deref())
        })
        .collect()
}

/// The tops of a board's shards as one: merged in board order, the first `n`.
fn merged_top(
    board: &Board,
    tops: Vec<Vec<(String, f64, Option<String>)>>,
    n: usize,
) -> Vec<(String, f64, Option<String>)> {
    let mut all: Vec<_> = tops.into_iter().flatten().collect();
    all.sort_by(|a, b| board.order().entries((a.1 as i64, &a.0), (b.1 as i64, &b.0)));
    all.truncate(n);
    all
}

impl Scheduler<'_> {
    /// Seals one period of the board tag at `base`. On a sharded board (the
    /// job names the board's own base) every shard is sealed, in shard
    /// order, and the merged top published once: a shard's seal is at most
    /// once, so a job taken over halfway seals the rest and publishes. Reads
    /// of the sealed period wait for the last shard (`http::sharded`).
    pub(super) async fn seal(&mut self, base: &str, period_id: &str) -> Result<Outcome, JobError> {
        let board = self.board_of(base)?.clone();
        let period = board.period_by_id(period_id)?;
        let Some(close_at) = board.close_at(&period) else {
            return Ok(Outcome::Done);
        };
        let split = keys::split_of_base(base).map(|(_, s)| s);
        let bases = self.router.read_bases(&board, split);
        // Closed on demand (`rankflow close`, on every shard) before its time: that close counts.
        let mut close_at = close_at;
        for b in &bases {
            let manual = self.store.closed_on_demand(b, period_id).await?;
            close_at = manual.map_or(close_at, |m| m.min(close_at));
        }
        let check = self.settings.sealing.check_interval.as_millis() as i64;
        if now_ms() < close_at {
            return Ok(Outcome::Again(close_at, "waiting"));
        }
        if !self.complete(close_at).await? {
            return Ok(Outcome::Again(now_ms() + check, "waiting"));
        }
        let expire_at = period.expire_at_secs(board.retention(period.kind)).unwrap_or(0);
        let (mut newly, mut published, mut total, mut tops) = (false, false, 0, Vec::new());
        for (k, b) in bases.iter().enumerate() {
            let call = SealCall {
                base: b,
                period_id,
                close_at,
                expire_at,
                top: self.settings.sealing.top,
                desc: board.order() == crate::board::Order::Desc,
                meta: board.meta(),
                rows: board.columns().is_some(),
            };
            let reply = self.store.seal(&call).await?;
            newly |= reply.newly;
            // The publication is recorded on the first shard.
            published |= k == 0 && reply.published;
            total += reply.total;
            tops.push(reply.top);
        }
        let live = keys::period_key(base, period_id);
        if newly {
            metrics::get().periods_sealed.with_label_values(&[&board.id()]).inc();
            info!(board = %board.id(), key = %live, members = total, "Period sealed.");
        }
        if !published {
            // A sharded top-K board's shards each keep their best K: the board holds the first K of them.
            let kept = board.max_members().unwrap_or(u64::MAX);
            let total = total.min(i64::try_from(kept).unwrap_or(i64::MAX));
            let n = self.settings.sealing.top.min(usize::try_from(kept).unwrap_or(usize::MAX));
            let entries = match board.column_spec() {
                Some(spec) => self.sealed_rows(&board, &bases, period_id, spec, n).await?,
                None => published_entries(&board, &merged_top(&board, tops, n)),
            };
            self.publish_top(&board, base, &bases, period_id, close_at, total, entries).await?;
        }
        match (board.shards(), board.column_spec()) {
            (Some(_), Some(spec)) => self.record_sharded_row_history(&bases, &board, &period, spec, expire_at).await?,
            (Some(_), None) => self.record_sharded_history(&bases, &board, &period, expire_at).await?,
            (None, Some(spec)) => self.record_row_history(base, &period, spec, expire_at).await?,
            (None, None) => self.record_history(base, &board, &period, expire_at).await?,
        }
        if board.is_round(&period) {
            return self.settle(base, &board, &period).await;
        }
        Ok(Outcome::Done)
    }

    /// The published entries of the sealed snapshot of period `period_id`
    /// of a board ranked by several columns: the first `n` of its shards'
    /// (`bases`, one on an unsharded board) merged by member bytes.
    async fn sealed_rows(
        &self,
        board: &Board,
        bases: &[String],
        period_id: &str,
        spec: ColumnSpec,
        n: usize,
    ) -> Result<Vec<Value>, JobError> {
        let mut top = RowListing::default();
        for base in bases {
            let keys = SealedRows::of(base, period_id);
            let shard = self.store.primary_reader().rows_top(&keys.at(spec, board.meta()), 0, n).await?;
            top.entries.extend(shard.entries);
        }
        top.entries.sort_by(|a, b| a.member.cmp(&b.member));
        top.entries.truncate(n);
        Ok(row_entries(board.columns().expect("a board with columns"), &top))
    }

    /// Publishes a sealed period's top (merged over the shards) once, and records it.
    #[allow(clippy::too_many_arguments)]
    async fn publish_top(
        &self,
        board: &Board,
        base: &str,
        bases: &[String],
        period_id: &str,
        close_at: i64,
        total: i64,
        entries: Vec<Value>,
    ) -> Result<(), JobError> {
        let split = keys::split_of_base(base).map(|(_, s)| s);
        let live = keys::period_key(base, period_id);
        let final_id = crate::period::id::final_id(period_id);
        let mut payload = json!({
            "kind": "top",
            "board": board.id(),
            "split": split,
            "period": period_id,
            "key": keys::period_key(base, &final_id),
            "closed_at": chrono::DateTime::from_timestamp_millis(close_at).map(|t| t.to_rfc3339()),
            "total": total,
            "entries": entries,
        });
        if board.shards().is_some() {
            payload["shard_keys"] = bases.iter().map(|b| keys::period_key(b, &final_id)).collect();
        }
        let record_key = match split {
            Some(s) => format!("{}:{s}|{period_id}", board.id()),
            None => format!("{}|{period_id}", board.id()),
        };
        let id = format!("top/{record_key}");
        self.publish(vec![(id, record_key, payload.to_string())]).await?;
        self.store.note_published(&bases[0], period_id).await?;
        info!(board = %board.id(), key = %live, topic = %self.settings.sealing.topic, "Sealed period published.");
        Ok(())
    }
}
