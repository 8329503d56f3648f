//! What a read answers, whatever the board's layout: the readers
//! (`single.rs`, `sharded.rs`) return these, and `reads.rs` renders them,
//! once for both layouts. `consistent` is a sharded read's: whether one
//! instant is described by every shard's answer (`None` on a single key,
//! which is read atomically).

use serde_json::value::RawValue;

use super::ranks::{Entry, Ranks};

/// A page of the board: the top from an offset or a cursor, or the window around a player.
pub(super) struct Page {
    pub total: i64,
    pub entries: Vec<Entry>,
    pub consistent: Option<bool>,
}

/// One player's standing.
pub(super) struct Standing {
    pub total: i64,
    pub ranks: Ranks,
    pub score: i64,
    pub meta: Option<Box<RawValue>>,
    /// A hidden player reads where they would stand, counted in the total.
    pub hidden: bool,
    pub consistent: Option<bool>,
}

/// A player of a friends read, found on the board.
pub(super) struct Friend {
    pub member: String,
    pub stored: i64,
    /// The rank under the read's policy.
    pub rank: i64,
    pub meta: Option<Box<RawValue>>,
}

/// A friends read: the players found (in no order), those not.
pub(super) struct Friends {
    pub total: i64,
    pub found: Vec<Friend>,
    pub not_found: Vec<String>,
    pub consistent: Option<bool>,
}

/// The counts a score would rank by, were its player on the board.
pub(super) struct RankOf {
    pub total: i64,
    pub better: i64,
    pub better_or_equal: i64,
    /// Distinct values better (boards that keep dense ranks).
    pub dense_better: i64,
    pub consistent: Option<bool>,
}
