//! The keys of score integrity on a board tag (see the table in `keys`):
//! held events, their queues, gain windows and held events' times.

use super::board_of_base;

/// The bases among `all` (the registry of tags) of board `board`: every
/// split and shard of it.
pub fn bases_of_board(all: Vec<String>, board: &str) -> Vec<String> {
    all.into_iter().filter(|b| board_of_base(b) == Some(board)).collect()
}

/// The tag's `gain_over` windows, member -> its applied (ts, delta) pairs.
pub fn gain_key(base: &str) -> String {
    format!("{base}:_gain")
}

/// Prefix completed with a member for the event times of its held events
/// (`hold_hides_after`).
pub fn held_times_prefix(base: &str) -> String {
    format!("{base}:_heldt:")
}

/// A member's held events' times (the apply script builds it from [`held_times_prefix`]).
pub fn held_times_key(base: &str, member: &str) -> String {
    format!("{}{member}", held_times_prefix(base))
}

/// The tag's held events, pending and decided, by event id.
pub fn held_key(base: &str) -> String {
    format!("{base}:_held")
}

/// The tag's pending held events, in the order they were held.
pub fn held_queue_key(base: &str) -> String {
    format!("{base}:_heldq")
}

/// Prefix completed with a member for its own pending held events.
pub fn held_player_prefix(base: &str) -> String {
    format!("{base}:_heldp:")
}

/// A member's pending held events (the scripts build it from [`held_player_prefix`]).
pub fn held_player_key(base: &str, member: &str) -> String {
    format!("{}{member}", held_player_prefix(base))
}
