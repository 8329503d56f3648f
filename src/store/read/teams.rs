//! The reads only team boards make, beside the ranking reads of their
//! period keys (which rank teams, and are read by `read.lua` as any
//! board's): how many contributors each team counts in a period, a team's
//! contributions, and which team a player is in: plain commands, a few
//! microseconds of Redis each (a script call costs more). A team's read
//! takes its contributors, then their contributions: one removed between
//! the two is left out.

use super::reads::Reader;
use crate::keys;
use crate::store::StoreError;

/// A player's team on a team board, and when they joined it (event time, ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TeamOf {
    pub team_id: String,
    pub joined_ms: i64,
}

impl Reader {
    /// Per team of `teams`, how many contributions it holds in the period
    /// `period_id` of the team board tag `base` (its `members`).
    pub async fn team_sizes(&self, base: &str, period_id: &str, teams: &[&str]) -> Result<Vec<i64>, StoreError> {
        if teams.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for team in teams {
            pipe.cmd("SCARD").arg(keys::team_set_key(base, period_id, team));
        }
        let pipe = &pipe;
        self.run(|mut c| async move { pipe.query_async(&mut c).await }).await
    }

    /// A team's contributions in a period, as stored (member, value), in no order.
    pub async fn team_contributions(
        &self,
        base: &str,
        period_id: &str,
        team: &str,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let (set, hash) = (keys::team_set_key(base, period_id, team), keys::team_contrib_key(base, period_id));
        let (set, hash) = (&set, &hash);
        let players: Vec<String> =
            self.run(|mut c| async move { redis::cmd("SMEMBERS").arg(set).query_async(&mut c).await }).await?;
        if players.is_empty() {
            return Ok(Vec::new());
        }
        let fields: Vec<String> = players.iter().map(|p| format!("{team}:{p}")).collect();
        let fields = &fields;
        let values: Vec<Option<i64>> = self
            .run(|mut c| async move { redis::cmd("HMGET").arg(hash).arg(fields).query_async(&mut c).await })
            .await?;
        Ok(players.into_iter().zip(values).filter_map(|(p, v)| Some((p, v?))).collect())
    }

    /// The team `player` is in on the team board tag `base`, and their
    /// contribution to it in the period (`None`: none there).
    pub async fn team_of(
        &self,
        base: &str,
        period_id: &str,
        player: &str,
    ) -> Result<Option<(TeamOf, Option<i64>)>, StoreError> {
        let key = keys::team_members_key(base);
        let key = &key;
        let got: Option<String> =
            self.run(|mut c| async move { redis::cmd("HGET").arg(key).arg(player).query_async(&mut c).await }).await?;
        let Some((joined, team)) = got.as_deref().and_then(|g| g.split_once(':')) else { return Ok(None) };
        let of = TeamOf { team_id: team.to_string(), joined_ms: joined.parse().unwrap_or(0) };
        let (hash, field) = (keys::team_contrib_key(base, period_id), format!("{team}:{player}"));
        let (hash, field) = (&hash, &field);
        let c: Option<i64> =
            self.run(|mut c| async move { redis::cmd("HGET").arg(hash).arg(field).query_async(&mut c).await }).await?;
        Ok(Some((of, c)))
    }
}
