//! The scheduler's scripts, run for it: `sched.lua` (due jobs, claims and
//! watermarks, under `{.sched}`), `seal.lua` (a period's seal on one tag)
//! and `roll.lua` (one step of a rolling board's build). The scheduler
//! builds their keys and arguments and reads their replies; each script's
//! header says what they are.

use super::scripts::{Lua, ROLL, SCHED, SEAL};
use super::{Store, StoreError};
use crate::keys;

impl Store {
    /// One call of a script on `keys` (the first names what it is about),
    /// its error reply typed: `LOST` as [`StoreError::Lost`].
    async fn script<T: redis::FromRedisValue>(
        &self,
        lua: &Lua,
        keys: &[String],
        args: &[String],
    ) -> Result<T, StoreError> {
        let about = keys.first().map(String::as_str).unwrap_or_default();
        self.eval(lua, keys, args).await?.map_err(|source| {
            StoreError::from_script(about, source, |source| StoreError::Script { base: about.into(), source })
        })
    }

    /// One call of `sched.lua` under `prefix`: `args` is its op and the op's arguments.
    pub async fn sched(&self, prefix: &str, args: &[String]) -> Result<redis::Value, StoreError> {
        let (due, lease, wm) = keys::sched_keys(prefix);
        self.script(&SCHED, &[due, lease, wm], args).await
    }

    /// One call of `seal.lua`: its reply's values.
    pub async fn seal(&self, keys: &[String], args: &[String]) -> Result<Vec<redis::Value>, StoreError> {
        self.script(&SEAL, keys, args).await
    }

    /// One step of `roll.lua`: its state ("more", "done", "inexact") and count.
    pub async fn roll_step(&self, keys: &[String], args: &[String]) -> Result<(String, u64), StoreError> {
        self.script(&ROLL, keys, args).await
    }
}
