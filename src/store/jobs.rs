//! The scheduler's scripts, run for it: `sched.lua` (due jobs, claims and
//! watermarks, under `{.sched}`), `seal.lua` (a period's seal on one tag)
//! and `roll.lua` (one step of a rolling board's build). The scheduler
//! builds their keys and arguments and reads their replies; each script's
//! header says what they are.

use std::sync::LazyLock;

use super::{Store, StoreError};
use crate::keys;

const SCHED_LUA: &str = include_str!("../scripts/sched.lua");
static SCHED: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SCHED_LUA));
// Seal and roll write to a board tag: its lost-data check goes before them.
static SEAL_LUA: LazyLock<String> =
    LazyLock::new(|| [super::REGISTERED_LUA, include_str!("../scripts/seal.lua")].concat());
static SEAL: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(&SEAL_LUA));
static ROLL_LUA: LazyLock<String> =
    LazyLock::new(|| [super::REGISTERED_LUA, include_str!("../scripts/roll.lua")].concat());
static ROLL: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(&ROLL_LUA));

impl Store {
    /// One call of a script on `keys` (the first names what it is about),
    /// its error reply typed: `LOST` as [`StoreError::Lost`].
    async fn script<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        source: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<T, StoreError> {
        let about = keys.first().map(String::as_str).unwrap_or_default();
        self.eval(script, source, keys, args).await?.map_err(|source| {
            StoreError::from_script(about, source, |source| StoreError::Script { base: about.into(), source })
        })
    }

    /// One call of `sched.lua` under `prefix`: `args` is its op and the op's arguments.
    pub async fn sched(&self, prefix: &str, args: &[String]) -> Result<redis::Value, StoreError> {
        let (due, lease, wm) = keys::sched_keys(prefix);
        self.script(&SCHED, SCHED_LUA, &[due, lease, wm], args).await
    }

    /// One call of `seal.lua`: its reply's values.
    pub async fn seal(&self, keys: &[String], args: &[String]) -> Result<Vec<redis::Value>, StoreError> {
        self.script(&SEAL, &SEAL_LUA, keys, args).await
    }

    /// One step of `roll.lua`: its state ("more", "done", "inexact") and count.
    pub async fn roll_step(&self, keys: &[String], args: &[String]) -> Result<(String, u64), StoreError> {
        self.script(&ROLL, &ROLL_LUA, keys, args).await
    }
}
