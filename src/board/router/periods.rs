//! The period writes of the router: which period keys an event's time
//! falls in on a board (calendar periods, windows, schedules), each worked
//! out once and cached while events keep falling in it, and which of them
//! still take a record produced at a given time.

use std::sync::Arc;

use super::Router;
use crate::board::PeriodWrite;
use crate::event::Reason;
use crate::keys;
use crate::period::{Period, PeriodKind};

/// Keyed by board, kind and, for windows, the window's index (0 for the calendar's kinds).
pub(super) type PeriodCache = rustc_hash::FxHashMap<(usize, PeriodKind, usize), SplitCache>;

/// The cached periods of one board and period kind: the one of a board
/// without `split_by`, and those of each split value.
///
/// The board without a split has a slot of its own rather than an entry
/// keyed by "": comparing an empty string calls `memcmp` on a dangling
/// pointer, which glibc's AVX-512 `memcmp` reads with a fully masked load,
/// and on an unmapped page that load takes a microcode assist costing
/// hundreds of cycles. That one comparison was a sixth of the worker's CPU.
#[derive(Debug, Default)]
pub(super) struct SplitCache {
    unsplit: Option<CachedPeriod>,
    by_value: rustc_hash::FxHashMap<String, CachedPeriod>,
}

#[derive(Debug)]
struct CachedPeriod {
    start_ms: Option<i64>,
    end_ms: Option<i64>,
    write: Arc<PeriodWrite>,
}

/// Split values remembered per board and period kind before the cache of
/// that board and kind starts over.
pub(super) const PERIOD_CACHE_SPLITS: usize = 4096;

impl Router {
    /// The write of period `kind` holding `ts_ms` on board `i` (split value
    /// `split`, key base `base`): from the cache when the last one still
    /// holds `ts_ms`. `None` outside the calendar's range.
    pub(crate) fn period_write(
        &self,
        i: usize,
        split: Option<&str>,
        base: &str,
        kind: PeriodKind,
        ts_ms: i64,
    ) -> Option<Arc<PeriodWrite>> {
        let tz = self.boards[i].timezone();
        self.cached_write(i, split, base, (kind, 0), ts_ms, || Period::containing(kind, tz, ts_ms).ok())
    }

    /// The write of board `i`'s window `w` (split value `split`, key base `base`).
    pub(crate) fn window_write(&self, i: usize, w: usize, split: Option<&str>, base: &str) -> Option<Arc<PeriodWrite>> {
        let window = self.boards[i].windows().get(w)?;
        self.cached_write(i, split, base, (PeriodKind::Window, w), window.from_ms, || Some(window.period()))
    }

    /// The write of board `i`'s schedule `s` period holding `ts_ms`, if one does.
    pub(crate) fn schedule_write(
        &self,
        i: usize,
        s: usize,
        split: Option<&str>,
        base: &str,
        ts_ms: i64,
    ) -> Option<Arc<PeriodWrite>> {
        let board = &self.boards[i];
        let schedule = board.schedules().get(s)?;
        self.cached_write(i, split, base, (PeriodKind::Schedule, s), ts_ms, || {
            schedule.period_at(board.timezone(), ts_ms)
        })
    }

    /// The write of the period in `slot` holding `ts_ms`: the cached one if
    /// it still holds `ts_ms`, else `period()`'s, cached.
    fn cached_write(
        &self,
        i: usize,
        split: Option<&str>,
        base: &str,
        slot: (PeriodKind, usize),
        ts_ms: i64,
        period: impl FnOnce() -> Option<Period>,
    ) -> Option<Arc<PeriodWrite>> {
        // A sharded board's shards have keys of their own: its cache is by key base.
        let split = if self.boards[i].shards().is_some() { Some(base) } else { split };
        let mut cache = self.period_cache.lock().unwrap_or_else(|e| e.into_inner());
        let slots = cache.entry((i, slot.0, slot.1)).or_default();
        let hit = match split {
            None => slots.unsplit.as_ref(),
            Some(v) => slots.by_value.get(v),
        };
        if let Some(c) = hit {
            if c.start_ms.is_none_or(|s| s <= ts_ms) && c.end_ms.is_none_or(|e| ts_ms < e) {
                return Some(c.write.clone());
            }
        }
        let board = &self.boards[i];
        let period = period()?;
        let kind = period.kind;
        let round = board.is_round(&period).then(|| {
            let previous = board.previous_round(&period).map(|p| p.id);
            crate::board::RoundKeys::new(base, &period.id, previous.as_deref())
        });
        let write = Arc::new(PeriodWrite {
            key: keys::period_key(base, &period.id),
            dense_key: keys::dense_key(base, &period.id),
            count_key: keys::dense_count_key(base, &period.id),
            times_key: keys::times_key(base, &period.id),
            meta_key: keys::meta_key(base, &period.id),
            shadow_key: keys::shadow_key(base, &period.id),
            attempts_key: keys::attempts_key(base, &period.id),
            rows_key: keys::rows_key(base, &period.id),
            expire_at: period.expire_at_secs(board.retention(kind)),
            close_at: board.close_at(&period),
            id: period.id,
            round,
        });
        let cached = CachedPeriod { start_ms: period.start_ms, end_ms: period.end_ms, write: write.clone() };
        match split {
            None => slots.unsplit = Some(cached),
            Some(v) => match slots.by_value.get_mut(v) {
                Some(c) => *c = cached,
                None => {
                    if slots.by_value.len() >= PERIOD_CACHE_SPLITS {
                        slots.by_value.clear();
                    }
                    slots.by_value.insert(v.to_string(), cached);
                }
            },
        }
        Some(write)
    }

    /// The period keys of board `i` (split `split`, key base `base`) that
    /// hold `ts_ms` and still take a record stamped `record_ts_ms`: a
    /// period whose key has expired by then is left out, and so is one
    /// closed by then. None left: `expired_period`, or `period_closed` if a
    /// closed period was among them.
    pub(crate) fn periods_at(
        &self,
        i: usize,
        split: Option<&str>,
        base: &str,
        ts_ms: i64,
        record_ts_ms: i64,
    ) -> Result<Vec<Arc<PeriodWrite>>, Reason> {
        let board = &self.boards[i];
        let mut out = Vec::with_capacity(board.periods().len());
        let mut closed = false;
        // The calendar's periods holding ts_ms, and the windows that do (an
        // event outside a window simply does not write it).
        let calendar = board.periods().iter().filter_map(|&kind| self.period_write(i, split, base, kind, ts_ms));
        let windows = board
            .windows()
            .iter()
            .enumerate()
            .filter(|(_, w)| w.from_ms <= ts_ms && ts_ms < w.to_ms)
            .filter_map(|(w, _)| self.window_write(i, w, split, base));
        let schedules = (0..board.schedules().len()).filter_map(|s| self.schedule_write(i, s, split, base, ts_ms));
        for write in calendar.chain(windows).chain(schedules) {
            if let Some(at) = write.expire_at {
                if record_ts_ms >= at.saturating_mul(1000) {
                    continue;
                }
            }
            // Produced at or after the close: the period no longer takes it.
            if write.close_at.is_some_and(|c| record_ts_ms >= c) {
                closed = true;
                continue;
            }
            out.push(write);
        }
        if out.is_empty() {
            return Err(if closed { Reason::PeriodClosed } else { Reason::ExpiredPeriod });
        }
        Ok(out)
    }
}
