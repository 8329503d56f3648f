//! The keys of team boards on a board tag (see the table in `keys` and
//! `board::team`): who is in which team, each period's contributions and
//! each team's contributors, and each player's list of contributions. A
//! team board's period keys rank teams (member: the team id).

/// Team boards: player -> `<join time ms>:<team id>` of the team they are in.
pub fn team_members_key(base: &str) -> String {
    format!("{base}:_tm")
}

/// Team boards: what a period's contributions hash is named by; the script
/// appends the period id.
pub fn team_contrib_prefix(base: &str) -> String {
    format!("{base}:_tc:")
}

/// Team boards: a period's contributions, a hash of `<team id>:<player>` ->
/// the player's contribution to the team (the board's mode over their
/// counted scores), expiring with the period key.
pub fn team_contrib_key(base: &str, period_id: &str) -> String {
    format!("{}{period_id}", team_contrib_prefix(base))
}

/// Team boards: the hidden players' contributions hashes (the script
/// appends the period id), off their teams' scores until they are shown again.
pub fn team_hidden_contrib_prefix(base: &str) -> String {
    format!("{base}:_tch:")
}

/// Team boards: what the teams' sets of contributors start with; the
/// script appends `<period id>:<team id>`.
pub fn team_set_prefix(base: &str) -> String {
    format!("{base}:_tt:")
}

/// Team boards: a team's counted contributors in a period (its `members`),
/// a set expiring with the period key.
pub fn team_set_key(base: &str, period_id: &str, team: &str) -> String {
    format!("{}{period_id}:{team}", team_set_prefix(base))
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

/// Team boards: the teams hidden by `team_hidden`, whose rows are in the
/// periods' shadow keys (`_hid:<period>`) until `team_unhidden`.
pub fn teams_hidden_key(base: &str) -> String {
    format!("{base}:_tth")
}
