//! The Redis side of the write path: the apply and erase scripts, and
//! sending a batch of board writes in one round trip.
//!
//! A batch becomes one `EVALSHA` of `scripts/apply.lua` per board tag, all
//! sent at once over redis-rs's multiplexed connection (so they share the
//! wire like a pipeline), and on a cluster each goes to the node owning its
//! tag's slot. The script cache is lost when Redis restarts: a `NOSCRIPT`
//! reply loads the script (on every primary) and retries that call. Retrying
//! is always safe, because the script itself refuses a record at or below
//! the tag's recorded offset. This module never decides what a record's
//! outcome means for Kafka; it only reports what Redis did.

use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::keys;

mod conn;
pub mod maintenance;
mod protocol;

pub use conn::{node_connections, scan_keys, RedisConn};
pub use protocol::{build_invocation, push_write, ApplyItem, ApplyResult, Invocation, Prepared, TagBatch, Tails};
use protocol::{decode_reply, ttl_secs};

const APPLY_LUA: &str = include_str!("../scripts/apply.lua");
const ERASE_LUA: &str = include_str!("../scripts/erase.lua");

/// Errors of the Redis store, each naming the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] RedisError),
    #[error("applying a batch to board tag {base} failed: {source}")]
    Apply { base: String, source: RedisError },
    #[error("loading a script failed: {0}")]
    LoadScript(#[source] RedisError),
    #[error("erasing a player on board tag {base} failed: {source}")]
    Erase { base: String, source: RedisError },
    #[error("listing board tags failed: {0}")]
    Scan(String),
    #[error("reading or writing the registry of board tags failed: {0}")]
    Registry(#[source] RedisError),
    #[error("the apply script for {base} returned a reply of {got} values that does not describe {expected} events")]
    BadReply { base: String, got: usize, expected: usize },
}

/// Which calls of a prepared batch Redis has applied, with their answers.
pub struct Landed {
    results: Vec<Option<Vec<ApplyResult>>>,
}

impl Landed {
    /// Nothing landed yet.
    pub fn new(prepared: &Prepared) -> Landed {
        Landed { results: vec![None; prepared.calls.len()] }
    }

    /// Whether every call has landed.
    pub fn is_complete(&self) -> bool {
        self.results.iter().all(Option::is_some)
    }

    /// Every call's answers, once all have landed.
    pub fn into_results(self) -> Option<Vec<Vec<ApplyResult>>> {
        self.results.into_iter().collect()
    }
}

/// The write side of Redis: the apply and erase scripts on one connection.
#[derive(Clone)]
pub struct Store {
    conn: RedisConn,
    script: redis::Script,
    erase_script: redis::Script,
    dedupe_ttl_secs: u64,
}

impl Store {
    pub fn new(conn: RedisConn, dedupe_ttl: Duration) -> Store {
        Store {
            conn,
            script: redis::Script::new(APPLY_LUA),
            erase_script: redis::Script::new(ERASE_LUA),
            dedupe_ttl_secs: ttl_secs(dedupe_ttl),
        }
    }

    pub fn conn(&self) -> RedisConn {
        self.conn.clone()
    }

    /// Applies every tag batch, concurrently. The result lists, per tag
    /// batch, one [`ApplyResult`] per item in order. Any failure fails the
    /// whole call: the caller retries the batch, which the script makes safe.
    pub async fn apply(&self, batches: &[TagBatch<'_>]) -> Result<Vec<Vec<ApplyResult>>, StoreError> {
        self.apply_prepared(&self.prepare(batches)).await
    }

    /// Encodes a batch's script calls, one per board tag. The result owns
    /// everything, so a batch can be sent while the caller gets on with the
    /// next one.
    pub fn prepare(&self, batches: &[TagBatch<'_>]) -> Prepared {
        Prepared {
            calls: batches
                .iter()
                .map(|b| (b.base.to_string(), build_invocation(b, self.dedupe_ttl_secs), b.items.len()))
                .collect(),
        }
    }

    /// Sends prepared calls, all at once (pipelined on the connection).
    pub async fn apply_prepared(&self, prepared: &Prepared) -> Result<Vec<Vec<ApplyResult>>, StoreError> {
        let mut landed = Landed::new(prepared);
        self.apply_pending(prepared, &mut landed).await?;
        Ok(landed.into_results().expect("every call landed"))
    }

    /// Sends the calls of `prepared` that have not landed yet, all at once,
    /// and records in `landed` each one Redis applied. Fails with the first
    /// error when any call failed; the calls that did land keep their
    /// answers, so a retry resends only the others. (Resending a call that
    /// landed would change nothing in Redis, but its events would answer as
    /// redeliveries, and be counted as duplicates instead of applied.)
    pub async fn apply_pending(&self, prepared: &Prepared, landed: &mut Landed) -> Result<(), StoreError> {
        let pending = prepared.calls.iter().zip(&landed.results).enumerate().filter(|(_, (_, r))| r.is_none());
        let sends = pending.map(|(i, ((base, inv, n), _))| async move { (i, self.apply_one(base, inv, *n).await) });
        let mut first_error = None;
        for (i, result) in futures::future::join_all(sends).await {
            match result {
                Ok(r) => landed.results[i] = Some(r),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// `EVALSHA`, loading the script on `NOSCRIPT` (a restarted Redis) and retrying once.
    pub(crate) async fn eval<T: redis::FromRedisValue, A: redis::ToRedisArgs>(
        &self,
        script: &redis::Script,
        source: &str,
        keys: &[String],
        args: &[A],
    ) -> Result<Result<T, RedisError>, StoreError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(keys.len()).arg(keys).arg(args);
        let mut conn = self.conn.clone();
        Ok(match cmd.query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                let _: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(source)
                    .query_async(&mut conn)
                    .await
                    .map_err(StoreError::LoadScript)?;
                cmd.query_async(&mut conn).await
            }
            other => other,
        })
    }

    async fn apply_one(&self, base: &str, inv: &Invocation, n: usize) -> Result<Vec<ApplyResult>, StoreError> {
        let reply: Result<Vec<i64>, RedisError> = self.eval(&self.script, APPLY_LUA, &inv.keys, &inv.args).await?;
        let reply = reply.map_err(|source| StoreError::Apply { base: base.to_string(), source })?;
        decode_reply(&reply, n).ok_or_else(|| StoreError::BadReply {
            base: base.to_string(),
            got: reply.len(),
            expected: n,
        })
    }

    /// `SCRIPT LOAD` (on a cluster, redis-rs sends it to every primary).
    pub async fn load_script(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(APPLY_LUA)
            .query_async(&mut conn)
            .await
            .map_err(StoreError::LoadScript)?;
        Ok(())
    }

    /// Removes `member` from every key of every tag in `tags` (key base and
    /// packing shift), at most once per record and once per event id (see
    /// `scripts/erase.lua`). Answers, per tag, what the script did.
    pub async fn erase(
        &self,
        tags: &[(String, i64)],
        field: &str,
        offset: i64,
        event_id: &uuid::Uuid,
        member: &str,
    ) -> Result<Vec<ApplyResult>, StoreError> {
        let calls = tags.iter().map(|(base, shift)| async move {
            let keys = [keys::offsets_key(base), keys::registry_key(base)];
            let text = [
                field.to_string(),
                offset.to_string(),
                member.to_string(),
                shift.to_string(),
                keys::period_prefix(base),
                keys::dense_prefix(base),
                keys::dense_count_prefix(base),
                keys::times_prefix(base),
                keys::rate_key(base, member),
                keys::dedupe_prefix(base),
                self.dedupe_ttl_secs.to_string(),
            ];
            let mut args: Vec<Vec<u8>> = text.into_iter().map(String::into_bytes).collect();
            args.push(event_id.as_bytes().to_vec());
            let reply: Result<i64, RedisError> = self.eval(&self.erase_script, ERASE_LUA, &keys, &args).await?;
            reply.map(ApplyResult::from_code).map_err(|source| StoreError::Erase { base: base.clone(), source })
        });
        futures::future::try_join_all(calls).await
    }

    /// The key base of every board tag registered in `registry` (see
    /// `keys::tags_key`): where an erasure looks, instead of scanning the keyspace.
    pub async fn tag_bases(&self, registry: &str) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("SMEMBERS").arg(registry).query_async(&mut conn).await.map_err(StoreError::Registry)
    }

    /// Adds board tags to the registry of tags.
    pub async fn register_tags(&self, registry: &str, bases: &[String]) -> Result<(), StoreError> {
        if bases.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        redis::cmd("SADD")
            .arg(registry)
            .arg(bases)
            .query_async::<i64>(&mut conn)
            .await
            .map_err(StoreError::Registry)?;
        Ok(())
    }

    /// `PING`, for readiness.
    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
    }
}
