//! The keys of leagues on a board tag (see the table in `keys` and
//! `board::league`): a round's cohorts, open cohorts, waiting players and
//! results, and the tag's tiers, overrides, settlements and round registry.

/// Leagues: a round's cohorts, a zset of player -> cohort code (see
/// `board::league`).
pub fn league_cohorts_key(base: &str, round: &str) -> String {
    format!("{base}:_lgc:{round}")
}

/// Leagues: a round's open cohorts, per tier `t`: `<t>` -> its newest
/// cohort's number, `<t>:size` -> players placed in it; `seq` -> arrivals.
pub fn league_open_key(base: &str, round: &str) -> String {
    format!("{base}:_lgo:{round}")
}

/// Leagues: a round's players waiting for the previous round's settlement,
/// a zset of player -> arrival number.
pub fn league_pending_key(base: &str, round: &str) -> String {
    format!("{base}:_lgp:{round}")
}

/// Leagues: a settled round's results, player -> `<rank>:<zone>:<next tier>`.
pub fn league_results_key(base: &str, round: &str) -> String {
    format!("{base}:_lgr:{round}")
}

/// Leagues: each player's tier at their next placement (player -> tier index).
pub fn league_tiers_key(base: &str) -> String {
    format!("{base}:_lgt")
}

/// Leagues: tiers set by `player_tier_set`, which the next settlement keeps.
pub fn league_overrides_key(base: &str) -> String {
    format!("{base}:_lgx")
}

/// Leagues: the settlements, `<round>` -> 1 once settled (its next round
/// places at once), `<round>:step` -> how far the settlement is,
/// `<round>:published` -> cohorts published, `<round>:from` -> where the
/// seal topic ended before the publication began.
pub fn league_state_key(base: &str) -> String {
    format!("{base}:_lgs")
}

/// Leagues: every round key of the tag that holds players, for erasure.
pub fn league_registry_key(base: &str) -> String {
    format!("{base}:_lgk")
}
