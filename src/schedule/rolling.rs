//! Rolling boards: the union of a board's last `days` daily keys, rebuilt by
//! `scripts/roll.lua` in bounded steps and swapped in whole.
//!
//! A refresh is a build kept in Redis (the state hash and staged keys of
//! [`keys::rolling_build_id`]): each [`step`] does at most `budget` members'
//! work, so a large board never holds Redis for long, and a build that a
//! worker leaves half done is carried on by whichever worker runs the job
//! next. Readers see the previous union until the last step renames the new
//! one into place.

use crate::board::{Board, Mode, Order};
use crate::keys;
use crate::period::{Period, PeriodError, PeriodKind};
use crate::store::{RollCall, Store};

use super::JobError;

/// The most members one call of `roll.lua` reads or writes: a few
/// milliseconds of Redis time.
pub const STEP_BUDGET: usize = 1000;

/// What one step of a refresh did.
pub use crate::store::RollStep as Step;

/// One rolling board of one tag, as the script sees it at one instant.
#[derive(Clone, Debug)]
pub struct Refresh {
    keys: Vec<String>,
    days: usize,
    agg: &'static str,
    shift: i64,
    dense: bool,
    expire_at: i64,
    top_k: u64,
    desc: bool,
    meta: bool,
}

impl Refresh {
    /// The refresh of rolling board `name` (`days` days ending with the day
    /// containing `now_ms`) of the tag at `base`.
    pub fn new(board: &Board, base: &str, name: &str, days: u32, now_ms: i64) -> Result<Refresh, PeriodError> {
        let today = Period::containing(PeriodKind::Daily, board.timezone(), now_ms)?;
        // Kept a day past today, so a scheduler that stops leaves no stale board for long.
        let expire_at = today.end_ms.unwrap_or(now_ms).div_euclid(1000) + 86_400;
        let agg = match (board.mode(), board.order()) {
            (Mode::Sum, _) => "SUM",
            (_, Order::Desc) => "MAX",
            (_, Order::Asc) => "MIN",
        };
        Ok(Refresh {
            keys: rolling_keys(board, base, name, days, now_ms)?,
            days: days as usize,
            agg,
            shift: board.packing().shift(),
            dense: board.dense_rank(),
            expire_at,
            top_k: board.max_members().unwrap_or(0),
            desc: board.order() == Order::Desc,
            meta: board.meta(),
        })
    }

    /// The script call of one step of at most `budget` members.
    pub fn call(&self, budget: usize) -> RollCall<'_> {
        RollCall {
            keys: &self.keys,
            days: self.days,
            agg: self.agg,
            shift: self.shift,
            dense: self.dense,
            expire_at: self.expire_at,
            top_k: self.top_k,
            desc: self.desc,
            meta: self.meta,
            budget,
        }
    }

    /// Runs one step of at most `budget` members.
    pub async fn step(&self, store: &Store, budget: usize) -> Result<Step, JobError> {
        Ok(store.roll_step(&self.call(budget)).await?)
    }
}

/// KEYS of `roll.lua`: the rolling key, its dense index, the registry, the
/// build's state, staged union and staged dense index, then each daily key
/// of the `days` days ending with the day containing `now_ms`, followed by
/// its staged copy; on boards that keep metadata, then the meta hashes of
/// the rolling key and the staged union, and of each day and its copy;
/// then the tag's offsets hash (whose `registered` field says the tag
/// still has its data), and last the rolling key's version hash, which
/// each swap raises.
pub fn rolling_keys(board: &Board, base: &str, name: &str, days: u32, now_ms: i64) -> Result<Vec<String>, PeriodError> {
    let id = crate::period::id::rolling_id(name);
    let build = keys::rolling_build_id(name);
    let mut out = vec![
        keys::period_key(base, &id),
        keys::dense_key(base, &id),
        keys::registry_key(base),
        keys::rolling_state_key(base, name),
        keys::period_key(base, &build),
        keys::dense_key(base, &build),
    ];
    // (a day's id, its staged copy's id), newest first.
    let mut ids = Vec::with_capacity(days as usize);
    let mut day = Period::containing(PeriodKind::Daily, board.timezone(), now_ms)?;
    for d in 1..=days {
        let start = day.start_ms.unwrap_or(now_ms);
        ids.push((day.id, format!("{build}:{d}")));
        day = Period::containing(PeriodKind::Daily, board.timezone(), start - 1)?;
    }
    for (day, copy) in &ids {
        out.push(keys::period_key(base, day));
        out.push(keys::period_key(base, copy));
    }
    if board.meta() {
        out.push(keys::meta_key(base, &id));
        out.push(keys::meta_key(base, &build));
        for (day, copy) in &ids {
            out.push(keys::meta_key(base, day));
            out.push(keys::meta_key(base, copy));
        }
    }
    out.push(keys::offsets_key(base));
    out.push(keys::version_key(base, &id));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rolling_keys_walk_back_over_days_in_the_board_zone() {
        let mut spec = crate::board::BoardSpec::for_tests("p", Mode::Sum, &[PeriodKind::Daily]);
        spec.timezone = "America/New_York".parse().unwrap();
        let board = Board::new(spec);
        // 2026-11-02 03:00 UTC is still Nov 1 in New York (the DST change is that day).
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-02T03:00:00Z").unwrap().timestamp_millis();
        let k = rolling_keys(&board, "lb:{p}", "last3d", 3, now).unwrap();
        assert_eq!(
            k,
            [
                "lb:{p}:r:last3d",
                "lb:{p}:_dense:r:last3d",
                "lb:{p}:_keys",
                "lb:{p}:_roll:last3d",
                "lb:{p}:_roll:r:last3d",
                "lb:{p}:_dense:_roll:r:last3d",
                "lb:{p}:d:2026-11-01",
                "lb:{p}:_roll:r:last3d:1",
                "lb:{p}:d:2026-10-31",
                "lb:{p}:_roll:r:last3d:2",
                "lb:{p}:d:2026-10-30",
                "lb:{p}:_roll:r:last3d:3",
                "lb:{p}:_offsets",
                "lb:{p}:_ver:r:last3d",
            ]
        );
        // A board that keeps metadata: each of those zsets' meta hash follows, in the same order, before the offsets and version hash.
        let mut spec = crate::board::BoardSpec::for_tests("p", Mode::Best, &[PeriodKind::Daily]);
        spec.meta = true;
        let with_meta = rolling_keys(&Board::new(spec), "lb:{p}", "last3d", 3, now).unwrap();
        assert_eq!(with_meta.len(), k.len() + 8);
        assert_eq!(
            with_meta[k.len() - 2..with_meta.len() - 2],
            [
                "lb:{p}:_meta:r:last3d",
                "lb:{p}:_meta:_roll:r:last3d",
                "lb:{p}:_meta:d:2026-11-02",
                "lb:{p}:_meta:_roll:r:last3d:1",
                "lb:{p}:_meta:d:2026-11-01",
                "lb:{p}:_meta:_roll:r:last3d:2",
                "lb:{p}:_meta:d:2026-10-31",
                "lb:{p}:_meta:_roll:r:last3d:3",
            ]
        );
    }
}
