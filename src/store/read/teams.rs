//! The reads only team boards make, beside the ranking reads of their
//! period keys (which rank teams, and are read by `read.lua` as any
//! board's): how many contributions each team holds in a period, a team's
//! contributions, and which team a player is in. Each is one plain command
//! per key, pipelined (the keys of a board tag share a hash slot).

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
            pipe.cmd("ZCARD").arg(keys::team_contrib_key(base, period_id, team));
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
        let key = keys::team_contrib_key(base, period_id, team);
        let key = &key;
        let rows: Vec<(String, f64)> = self
            .run(|mut c| async move {
                redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query_async(&mut c).await
            })
            .await?;
        Ok(rows.into_iter().map(|(m, v)| (m, v as i64)).collect())
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
        let ckey = keys::team_contrib_key(base, period_id, team);
        let ckey = &ckey;
        let c: Option<f64> = self
            .run(|mut c| async move { redis::cmd("ZSCORE").arg(ckey).arg(player).query_async(&mut c).await })
            .await?;
        Ok(Some((of, c.map(|v| v as i64))))
    }
}
