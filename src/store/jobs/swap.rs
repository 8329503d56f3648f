//! `rankflow rebuild`'s last step on one board tag: the rebuilt keys take
//! the live keys' places, atomically, where the two agree (`scripts/swap.lua`).

use crate::keys;
use crate::store::{RedisConn, StoreError};

/// What a swap came to.
#[derive(Debug, PartialEq)]
pub enum Swap {
    /// The rebuilt keys are live: this many period keys were swapped in.
    Done(u64),
    /// The live workers have applied a record the rebuild has not yet:
    /// (partition field, live offset, rebuilt offset or -1).
    Behind(String, i64, i64),
}

/// The swap script's call for live key base `live` and rebuilt key base
/// `built`, of a team board's tag when `team` (its members, hidden teams,
/// contributions and players' lists go too).
pub fn swap_invocation(live: &str, built: &str, dedupe_ttl_secs: u64, team: bool) -> redis::ScriptInvocation<'static> {
    let mut inv = crate::store::conn::scripts::SWAP.script.prepare_invoke();
    for base in [live, built] {
        inv.key(keys::offsets_key(base));
    }
    for base in [live, built] {
        inv.key(keys::registry_key(base));
    }
    for base in [live, built] {
        inv.key(keys::sealed_key(base));
    }
    for base in [live, built] {
        inv.key(keys::hidden_key(base));
    }
    for base in [live, built] {
        inv.key(keys::held_key(base));
    }
    for base in [live, built] {
        inv.key(keys::held_queue_key(base));
    }
    inv.arg(keys::period_prefix(live)).arg(keys::period_prefix(built)).arg(dedupe_ttl_secs.max(1));
    inv.arg(keys::dedupe_prefix(live)).arg(keys::dedupe_prefix(built));
    inv.arg(keys::held_player_prefix(live)).arg(keys::held_player_prefix(built));
    let teams: [fn(&str) -> String; 5] = [
        keys::team_contrib_prefix,
        keys::team_hidden_contrib_prefix,
        keys::team_set_prefix,
        keys::team_index_prefix,
        keys::shadow_prefix,
    ];
    inv.arg(if team { teams.len() } else { 0 });
    if team {
        for base in [live, built] {
            inv.key(keys::team_members_key(base));
        }
        for base in [live, built] {
            inv.key(keys::teams_hidden_key(base));
        }
        for prefix in teams {
            inv.arg(prefix(live)).arg(prefix(built));
        }
    }
    // A league round's cohorts, open cohorts and waiting players go with
    // its period key; its results exist only once it is sealed, and stay.
    let per_period: [fn(&str) -> String; 10] = [
        keys::rows_prefix,
        keys::dense_prefix,
        keys::dense_count_prefix,
        keys::times_prefix,
        keys::meta_prefix,
        keys::attempts_prefix,
        keys::shadow_prefix,
        |b| keys::league_cohorts_key(b, ""),
        |b| keys::league_open_key(b, ""),
        |b| keys::league_pending_key(b, ""),
    ];
    for prefix in per_period {
        inv.arg(prefix(live)).arg(prefix(built));
    }
    inv
}

impl crate::store::Store {
    /// Copies a league tag's tiers, settlements and set tiers to the rebuilt
    /// tag, so that the rebuild places players in the tiers the live
    /// settlements gave them (see `rebuild`).
    pub async fn copy_league_state(&self, live: &str, built: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let pairs: [fn(&str) -> String; 3] =
            [keys::league_tiers_key, keys::league_state_key, keys::league_overrides_key];
        for key in pairs {
            redis::cmd("COPY")
                .arg(key(live))
                .arg(key(built))
                .arg("REPLACE")
                .query_async::<i64>(&mut conn)
                .await
                .map_err(StoreError::Registry)?;
        }
        Ok(())
    }

    /// Runs the swap of one tag (see `scripts/swap.lua`); `team`: a team board's.
    pub async fn swap_tag(
        &self,
        live: &str,
        built: &str,
        dedupe_ttl_secs: u64,
        team: bool,
    ) -> Result<Swap, StoreError> {
        swap_tag(&self.conn, live, built, dedupe_ttl_secs, team).await
    }
}

/// Runs the swap of one tag (see `scripts/swap.lua`).
async fn swap_tag(
    conn: &RedisConn,
    live: &str,
    built: &str,
    dedupe_ttl_secs: u64,
    team: bool,
) -> Result<Swap, StoreError> {
    let mut conn = conn.clone();
    let reply: Vec<redis::Value> = swap_invocation(live, built, dedupe_ttl_secs, team)
        .invoke_async(&mut conn)
        .await
        .map_err(StoreError::Registry)?;
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v.clone()).unwrap_or_default();
    let int = |v: &redis::Value| redis::from_redis_value::<i64>(v.clone()).unwrap_or(-1);
    match reply.first().map(int) {
        Some(1) => Ok(Swap::Done(reply.get(1).map(int).unwrap_or(0).max(0) as u64)),
        _ if reply.len() == 4 => Ok(Swap::Behind(text(&reply[1]), int(&reply[2]), int(&reply[3]))),
        _ => Ok(Swap::Behind(String::new(), -1, -1)),
    }
}
