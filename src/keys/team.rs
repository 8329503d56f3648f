//! The keys of team boards on a board tag (see the table in `keys` and
//! `board::team`): who is in which team, each member's contributions per
//! period and team, and each player's list of those. A team board's period
//! keys rank teams (member: the team id).

/// Team boards: player -> `<join time ms>:<team id>` of the team they are in.
pub fn team_members_key(base: &str) -> String {
    format!("{base}:_tm")
}

/// Team boards: what a period's contributions keys start with; the script
/// appends `<period id>:<team id>`.
pub fn team_contrib_prefix(base: &str) -> String {
    format!("{base}:_tc:")
}

/// Team boards: a team's contributions in a period, a zset of member ->
/// contribution (the board's mode over their counted scores), expiring
/// with the period key.
pub fn team_contrib_key(base: &str, period_id: &str, team: &str) -> String {
    format!("{}{period_id}:{team}", team_contrib_prefix(base))
}

/// Team boards: what the players' contribution lists start with; the
/// script appends the player id.
pub fn team_index_prefix(base: &str) -> String {
    format!("{base}:_tp:")
}

/// Team boards: the (team, period) pairs a player holds a contribution in,
/// a set of `<team id> <period id>`.
pub fn team_index_key(base: &str, player: &str) -> String {
    format!("{}{player}", team_index_prefix(base))
}

/// Team boards: what the hidden players' contributions keys start with
/// (the script appends `<period id>:<team id>`): a hidden player's
/// contributions, off their teams' scores until they are shown again.
pub fn team_hidden_contrib_prefix(base: &str) -> String {
    format!("{base}:_tch:")
}

/// Team boards: the teams hidden by `team_hidden`, whose rows are in the
/// periods' shadow keys (`_hid:<period>`) until `team_unhidden`.
pub fn teams_hidden_key(base: &str) -> String {
    format!("{base}:_tth")
}
