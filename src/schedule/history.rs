//! Players' history at a seal: once a period is sealed (and its top
//! published), `scripts/history.lua` records every player's standing in the
//! snapshot and raises their best of the period's kind, in steps of
//! [`STEP_ENTRIES`] entries from where the last step left off, so a job
//! taken over carries on and Redis is never held long.

use super::{JobError, Scheduler};
use crate::board::Board;
use crate::period::Period;
use crate::store::HistoryStep;

/// Entries one step records (a step of 5,000 holds Redis a few milliseconds).
const STEP_ENTRIES: usize = 5_000;

impl Scheduler<'_> {
    /// Records the history of sealed period `period` of the tag `base`
    /// (a board's own tag: sharded boards keep no history yet).
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
}
