//! What one event writes on one board: the board's constants as the apply
//! script takes them (`WriteParams`), the period keys and league rounds it
//! writes, and the board's decision (a write or a refusal).

use std::sync::Arc;

use super::integrity;
use crate::event::Reason;

/// A board's constants as the apply script takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteParams {
    pub op: WriteOp,
    /// Packing multiplier (2^tie bits) and value limit (see `score::Packing`).
    pub shift: i64,
    pub max_value: i64,
    /// Whether higher is better (which end top-K trimming drops).
    pub desc: bool,
    /// Members kept per period key; 0: no limit.
    pub top_k: u64,
    /// Rate limit per member; 0 events: none.
    pub rate_events: u64,
    pub rate_window_ms: i64,
    /// Whether the dense-rank index is kept.
    pub dense: bool,
    /// Whether periods are sealed: writes to a sealed period are refused.
    pub sealed: bool,
    /// Whether each entry keeps its explaining event's `meta`.
    pub meta: bool,
    /// `max_attempts`: events a member may have applied per period key; 0: no limit.
    pub attempts: u64,
    /// Leagues: players per cohort (0: no league) and how many tiers.
    pub cohort_size: u32,
    pub tiers: u32,
    /// `notify_top`: the top whose changes the script reports; 0: none.
    pub notify: u32,
    /// The integrity rules the script checks.
    pub integrity: integrity::Integrity,
    /// A review's call (one admin event alone).
    pub review: Option<Review>,
    /// Boards ranked by several columns (`op` is then `Columns`).
    pub columns: Option<super::columns::ColumnSpec>,
    /// Team boards: their calls go to `team.lua`, not `apply.lua`.
    pub team: Option<super::team::Team>,
}

/// A review of a held event, as its apply call carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Review {
    /// The held event's id.
    pub held: uuid::Uuid,
    /// Approved, else rejected.
    pub approve: bool,
    /// A rebuild's: a review read before the event it decides is recorded,
    /// and the event decided as it is held (else it is refused, unknown).
    pub early: bool,
}

impl WriteParams {
    /// A board that only writes: `op` on values packed by `shift` up to
    /// `max_value`, ordered as `op` implies (descending but for `Lt`, and
    /// `Columns`, whose members order by ascending bytes), with
    /// the dense index and none of the rest (no top-K, rate limit, sealing,
    /// metadata, attempts, league or rank changes). Tests and benchmarks
    /// start from it and set what they need.
    pub fn plain(op: WriteOp, shift: i64, max_value: i64) -> WriteParams {
        WriteParams {
            op,
            shift,
            max_value,
            desc: !matches!(op, WriteOp::Lt | WriteOp::Columns),
            top_k: 0,
            rate_events: 0,
            rate_window_ms: 0,
            dense: true,
            sealed: false,
            meta: false,
            attempts: 0,
            cohort_size: 0,
            tiers: 0,
            notify: 0,
            integrity: integrity::Integrity::default(),
            review: None,
            columns: None,
            team: None,
        }
    }

    /// A `sum` board without ties, limits or sealing, values up to 1000, for unit tests.
    #[cfg(test)]
    pub(crate) fn plain_sum() -> WriteParams {
        WriteParams::plain(WriteOp::Sum, 1, 1000)
    }
}

/// The Redis write a board makes, as the apply script names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteOp {
    Sum,
    Gt,
    Lt,
    Latest,
    /// A row of several columns (see `board::columns`).
    Columns,
}

impl WriteOp {
    pub fn as_str(self) -> &'static str {
        match self {
            WriteOp::Sum => "sum",
            WriteOp::Gt => "gt",
            WriteOp::Lt => "lt",
            WriteOp::Latest => "latest",
            WriteOp::Columns => "cols",
        }
    }
}

/// One period key an event writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeriodWrite {
    /// The period id, e.g. `d:2026-08-14`.
    pub id: String,
    /// The board key, e.g. `lb:{points}:d:2026-08-14`.
    pub key: String,
    /// Its dense-rank index, `lb:{points}:_dense:d:2026-08-14`.
    pub dense_key: String,
    /// The index's value counts, `lb:{points}:_dcount:d:2026-08-14`.
    pub count_key: String,
    /// `latest` boards: each member's event time, `lb:{points}:_ts:d:2026-08-14`.
    pub times_key: String,
    /// `meta = true` boards: each member's metadata, `lb:{points}:_meta:d:2026-08-14`.
    pub meta_key: String,
    /// The hidden players' values, `lb:{points}:_hid:d:2026-08-14`.
    pub shadow_key: String,
    /// `max_attempts` boards: each member's applied events, `lb:{points}:_att:d:2026-08-14`.
    pub attempts_key: String,
    /// Boards with `columns`: each member's row, `lb:{points}:_rows:d:2026-08-14`.
    pub rows_key: String,
    /// `EXPIREAT` seconds of both; `None`: never expires.
    pub expire_at: Option<i64>,
    /// Boards with `close_after`: when the period closes, epoch ms.
    pub close_at: Option<i64>,
    /// A league's round: its league keys.
    pub round: Option<RoundKeys>,
}

/// The league keys of one round on one board tag (see `keys`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundKeys {
    /// Player -> cohort code.
    pub cohorts: String,
    /// Per tier, the newest cohort and its size.
    pub open: String,
    /// Players waiting for the previous round's settlement.
    pub pending: String,
    /// The previous round's id, if the rounds are a schedule's, and its
    /// cohorts and pending players: a round places at once when the
    /// previous one is settled or held nobody.
    pub previous: Option<(String, String, String)>,
}

impl RoundKeys {
    pub fn new(base: &str, round: &str, previous: Option<&str>) -> RoundKeys {
        RoundKeys {
            cohorts: crate::keys::league_cohorts_key(base, round),
            open: crate::keys::league_open_key(base, round),
            pending: crate::keys::league_pending_key(base, round),
            previous: previous.map(|p| {
                (p.to_string(), crate::keys::league_cohorts_key(base, p), crate::keys::league_pending_key(base, p))
            }),
        }
    }
}

/// The writes one event makes on one board.
#[derive(Clone, Debug, PartialEq)]
pub struct BoardWrite {
    /// Key base of the board (or split): every key below shares its hash tag.
    pub base: String,
    pub params: WriteParams,
    /// Shared with the router's cache: every event of a period on a board
    /// (and split) writes the same keys.
    pub periods: Vec<Arc<PeriodWrite>>,
    /// `sum`: the delta; `best` and `latest`: the packed stored score.
    pub num: i64,
    /// `sum`: the tie component to pack with the new total; otherwise 0.
    pub tie: i64,
    /// The event time, epoch ms (for `latest` and the rate limit).
    pub ts: i64,
    /// Boards with `columns`: the event's value in each, in column order.
    pub values: Vec<i64>,
}

/// One board's decision for one event, before Redis.
// Write is the variant nearly every decision takes: boxing it would cost
// an allocation per event and board for the rare refusal's sake.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Write(BoardWrite),
    Refused(Reason),
}
