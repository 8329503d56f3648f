//! The few reads and writes of rankflow's bookkeeping that operators'
//! commands and the scheduler make outside the scripts: an admin event's
//! outcome, whether a player is on a tag, a period closed on demand or
//! sealed, watermarks, and removing a rebuild's leftovers. Each is one
//! command, named for what it answers.

use std::collections::HashMap;

use crate::keys;
use crate::store::{Store, StoreError};

/// A bookkeeping command's failure, naming what it was for.
pub(in crate::store) fn failed(what: &'static str) -> impl Fn(redis::RedisError) -> StoreError {
    move |source| StoreError::Bookkeeping { what, source }
}

impl Store {
    /// The outcome a worker left for an admin event (`keys::admin_outcome_key`), if any yet.
    pub async fn admin_outcome(&self, key: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("GET").arg(key).query_async(&mut conn).await.map_err(failed("read an admin event's outcome"))
    }

    /// Whether `player` is hidden on the tag `base`.
    pub async fn is_hidden(&self, base: &str, player: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("SISMEMBER")
            .arg(keys::hidden_key(base))
            .arg(player)
            .query_async(&mut conn)
            .await
            .map_err(failed("read a tag's hidden players"))
    }

    /// Whether `player` is on the team board tag `base`: in a team, or
    /// holding a contribution (its period keys rank teams, not players).
    pub async fn on_team_board(&self, base: &str, player: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let (member, list): (bool, bool) = redis::pipe()
            .cmd("HEXISTS")
            .arg(keys::team_members_key(base))
            .arg(player)
            .cmd("EXISTS")
            .arg(keys::team_index_key(base, player))
            .query_async(&mut conn)
            .await
            .map_err(failed("read a team board's members"))?;
        Ok(member || list)
    }

    /// Every period key the tag `base` has written (its registry of period keys).
    pub async fn period_keys(&self, base: &str) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("SMEMBERS")
            .arg(keys::registry_key(base))
            .query_async(&mut conn)
            .await
            .map_err(failed("read a tag's period keys"))
    }

    /// `player`'s stored score on the board `key`, if they are on it.
    pub async fn stored_score(&self, key: &str, player: &str) -> Result<Option<f64>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("ZSCORE").arg(key).arg(player).query_async(&mut conn).await.map_err(failed("read a score"))
    }

    /// Closes period `period_id` on demand at `at_ms` on each of `bases`
    /// (the first close stands: `HSETNX` of `keys::closes_field`).
    pub async fn close_on_demand(&self, bases: &[String], period_id: &str, at_ms: i64) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        for b in bases {
            redis::cmd("HSETNX")
                .arg(keys::sealed_key(b))
                .arg(keys::closes_field(&keys::period_key(b, period_id)))
                .arg(at_ms)
                .query_async::<i64>(&mut conn)
                .await
                .map_err(failed("close a period on demand"))?;
        }
        Ok(())
    }

    /// When period `period_id` of the tag `base` was closed on demand (ms), if it was.
    pub async fn closed_on_demand(&self, base: &str, period_id: &str) -> Result<Option<i64>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("HGET")
            .arg(keys::sealed_key(base))
            .arg(keys::closes_field(&keys::period_key(base, period_id)))
            .query_async(&mut conn)
            .await
            .map_err(failed("read a period's close on demand"))
    }

    /// Whether period `period_id` of the tag `base` is sealed.
    pub async fn is_sealed(&self, base: &str, period_id: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("HEXISTS")
            .arg(keys::sealed_key(base))
            .arg(keys::period_key(base, period_id))
            .query_async(&mut conn)
            .await
            .map_err(failed("read whether a period is sealed"))
    }

    /// Notes that the top of sealed period `period_id` of the tag `base` is published.
    pub async fn note_published(&self, base: &str, period_id: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("HSET")
            .arg(keys::sealed_key(base))
            .arg(keys::published_field(&keys::period_key(base, period_id)))
            .arg(1)
            .query_async::<i64>(&mut conn)
            .await
            .map_err(failed("note a sealed period's top published"))?;
        Ok(())
    }

    /// A hash of integers (watermarks: `<topic>:<partition>` -> ms).
    pub async fn integers(&self, key: &str) -> Result<HashMap<String, i64>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("HGETALL").arg(key).query_async(&mut conn).await.map_err(failed("read a hash"))
    }

    /// Removes `keys`, one at a time, going on past a failure (a rebuild's
    /// leftovers); returns how many could not be removed.
    pub async fn unlink_each(&self, keys: &[String]) -> usize {
        let mut conn = self.conn.clone();
        let mut failed = 0;
        for key in keys {
            let r: Result<i64, _> = redis::cmd("UNLINK").arg(key).query_async(&mut conn).await;
            failed += usize::from(r.is_err());
        }
        failed
    }
}
