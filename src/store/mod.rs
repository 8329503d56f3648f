//! The only door to Redis: every script and command as a typed call, in
//! five parts, as `src/scripts/` shows the scripts' own:
//!
//! - `write`: the write path. A batch is prepared into `EVALSHA` calls of
//!   `scripts/apply.lua` (`protocol`, its header declared in `header`),
//!   each for one board tag and at most as many events as that tag's
//!   measured call size allows (`prepared`, `sizer`); a tag with more
//!   events gets calls chained on each other. The [`Writer`] owns the order
//!   in which batches reach Redis (its module doc is the contract); `send`
//!   sends a batch's calls in order, at most two in each node at a time
//!   (`gate`), on a cluster each to the node owning its tag's slot.
//! - `read`: the read API's queries, on the HTTP server's own connection
//!   and replicas.
//! - `jobs`: the scheduler's and the operator commands' scripts (seals,
//!   rolling builds, leagues' settlements, history, a rebuild's swap).
//! - `moderation`: admin events, held events for review, and the
//!   bookkeeping operators' commands read and write.
//! - `conn`: connections, the scripts assembled from `src/scripts/`, what
//!   each touches, MessagePack, and the registry of board tags.
//!
//! The script cache is lost when Redis restarts: a `NOSCRIPT` reply loads
//! the script (on every primary) and sends that call again. Sending again
//! is always safe, because the script itself refuses a record at or below
//! the tag's recorded offset. This module never decides what a record's
//! outcome means for Kafka; it only reports what Redis did.

use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};

mod conn;
mod jobs;
mod moderation;
mod read;
mod write;

pub use conn::touches;
pub use moderation::{maintenance, review};

pub use conn::connect::{node_connections, refresh_replicas, replica_connections, scan_keys, RedisConn};
pub use jobs::history::{row_standing, standing, BestRank, HistoryPut, HistoryStep, PlayerHistory, SealedStanding};
pub use jobs::league::{CohortRead, Placement, Progress, RowsOf, SettlePlace, SettleWrite, TierWrite};
pub use jobs::outbox::OutboxRecord;
pub use jobs::sched::Claim;
pub use jobs::seal_roll::{RollCall, RollStep, SealCall, SealReply};
pub use jobs::swap::{swap_invocation, Swap};
pub use moderation::admin::{admin_invocation, AdminCall};
pub use moderation::review::{decode_held, HeldEvent, HeldState};
pub use read::queries::{
    Around, Counted, Found, Listing, Page, Player, Players, PlayersFound, Query, RankOf, ReadAt, Row, ShardCounted,
    ShardCounts, ShardRows, ShardSeek, ShardTop, Sought, Top, ValueCounts,
};
pub use read::reads::{ReadKeys, Reader, Replicas, REPLICA_TIMEOUT};
pub use read::row_reads::{RowCounts, RowEntry, RowFound, RowListing, RowPlayers, RowRanks, RowsAt, SealedRows};
pub use read::row_shards::{RowAsked, RowShardCount, RowShardCounts, RowShardTop, RowSought};
pub use write::changes::RankMove;
use write::gate::Gate;
pub use write::prepared::{prepare, Prepared, Tails};
use write::protocol::ttl_secs;
pub use write::protocol::{build_invocation, push_write, ApplyItem, Invocation, TagBatch};
pub use write::reply::ApplyResult;
pub use write::send::BatchResults;
pub use write::writer::{Observer, Writer, WriterSettings, Written};

pub use crate::config::DEFAULT_MAX_EVENTS_PER_CALL;

/// Errors of the Redis store, each naming the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] RedisError),
    #[error("applying a batch to board tag {base} failed: {source}")]
    Apply { base: String, source: RedisError },
    #[error("loading a script failed: {0}")]
    LoadScript(#[source] RedisError),
    #[error("an admin event on board tag {base} failed: {source}")]
    Admin { base: String, source: RedisError },
    #[error("listing board tags failed: {0}")]
    Scan(String),
    #[error("reading or writing the registry of board tags failed: {0}")]
    Registry(#[source] RedisError),
    #[error("{got} of the {wanted} replicas asked for acknowledged the batch's writes within the wait")]
    Replicas { wanted: u32, got: i64 },
    #[error("waiting for replicas failed: {0}")]
    Wait(#[source] RedisError),
    #[error("too few replicas acknowledged the writes to board tag {base} within redis.replica_wait")]
    NotReplicated { base: String },
    #[error("the apply script for {base} returned a reply of {got} values that does not describe {expected} events")]
    BadReply { base: String, got: usize, expected: usize },
    #[error("Redis is unavailable: {0}")]
    Read(#[source] RedisError),
    #[error("{script} answered {got}")]
    Reply { script: &'static str, got: String },
    #[error("cannot {what}: {source}")]
    Bookkeeping { what: &'static str, source: RedisError },
    #[error("a script on board tag {base} failed: {source}")]
    Script { base: String, source: RedisError },
    /// Redis no longer holds what it acknowledged on a board tag (see
    /// `registry`): nothing was written, and retrying cannot help.
    #[error("Redis lost data: {base}: {detail}")]
    Lost { base: String, detail: String },
}

impl StoreError {
    /// Redis answered `NOSCRIPT`: its script cache is empty (a restart).
    fn is_no_script(&self) -> bool {
        matches!(self, StoreError::Apply { source, .. } if source.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
    }

    /// Redis lost data (see `registry`): no retry mends it.
    pub fn is_lost(&self) -> bool {
        matches!(self, StoreError::Lost { .. })
    }

    /// Why connecting failed in a way no retry mends, naming the cause and
    /// the settings to check: the server's certificate not trusted, the
    /// TLS handshake refused (a client certificate missing or refused), or
    /// authentication failed. `None` for anything else (an outage, which
    /// is waited out).
    pub fn refused_connection(&self) -> Option<String> {
        let StoreError::Connect(e) = self else { return None };
        let text = e.to_string();
        let lower = text.to_ascii_lowercase();
        if e.kind() == ErrorKind::AuthenticationFailed
            || lower.contains("wrongpass")
            || lower.contains("noauth")
            || lower.contains("invalid username-password")
        {
            return Some(format!(
                "Redis authentication failed (check the user and password: redis.url, redis.password or redis.password_file): {text}"
            ));
        }
        let tls = ["certificate", "handshake", "tls", "alert", "peer sent no certificates"];
        tls.iter().any(|w| lower.contains(w)).then(|| {
            format!(
                "Redis TLS connection refused (check redis.tls.ca_file for the servers' CA, redis.tls.cert_file and \
                 redis.tls.key_file for the client certificate, and that redis.url is rediss://): {text}"
            )
        })
    }

    /// A script's error reply, as a [`StoreError::Lost`] when it is `LOST`
    /// (the tag is not registered: its data is gone), else as `other`.
    pub fn from_script(base: &str, source: RedisError, other: impl FnOnce(RedisError) -> StoreError) -> StoreError {
        match source.code() {
            Some(write::reply::LOST) => StoreError::Lost {
                base: base.to_string(),
                detail: source.detail().unwrap_or("the tag is not registered").to_string(),
            },
            _ => other(source),
        }
    }
}

/// `SCRIPT LOAD` of `lua` (on a cluster, redis-rs sends it to every primary).
async fn script_load(conn: &mut RedisConn, lua: &conn::scripts::Lua) -> Result<(), StoreError> {
    let _: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(&lua.source).query_async(conn).await.map_err(StoreError::LoadScript)?;
    Ok(())
}

/// `EVALSHA` of `script` on `keys` and `args`.
fn evalsha<A: redis::ToRedisArgs>(script: &redis::Script, keys: &[String], args: &[A]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys).arg(args);
    cmd
}

/// `WAIT n timeout`: how many replicas acknowledged every write of the connection it runs on.
fn wait_cmd(n: u32, timeout: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(n).arg(timeout.as_millis().max(1) as u64);
    cmd
}

/// The write side of Redis: the apply and admin scripts on one connection.
#[derive(Clone)]
pub struct Store {
    conn: RedisConn,
    dedupe_ttl_secs: u64,
    /// How many events each tag's calls carry (`max_call_time`, `max_events_per_call`).
    sizer: write::sizer::CallSizer,
    gate: Arc<Gate>,
    /// `redis.min_replicas` and `redis.replica_wait`, when set.
    replicas: Option<(u32, Duration)>,
}

impl Store {
    pub fn new(conn: RedisConn, dedupe_ttl: Duration) -> Store {
        Store {
            conn,
            dedupe_ttl_secs: ttl_secs(dedupe_ttl),
            sizer: write::sizer::CallSizer::new(None, DEFAULT_MAX_EVENTS_PER_CALL),
            gate: Arc::new(Gate::new()),
            replicas: None,
        }
    }

    /// A store on a connection of its own, with the settings' replica
    /// wait: what operators' commands use.
    pub async fn connect(settings: &crate::config::RedisSettings) -> Result<Store, StoreError> {
        let conn = RedisConn::connect(settings).await?;
        Ok(Store::new(conn, settings.dedupe_ttl).with_min_replicas(settings.min_replicas, settings.replica_wait))
    }

    /// Registers the batches' tags where they are new (see `registry`), then
    /// applies every tag batch (its calls sent in order, as the writer sends
    /// them, without the writer's retries). The result lists, per tag batch,
    /// one [`ApplyResult`] per item in order. Any failure fails the whole
    /// call: the caller retries the batch, which the script makes safe.
    pub async fn apply(&self, batches: &[TagBatch<'_>]) -> Result<Vec<Vec<ApplyResult>>, StoreError> {
        for b in batches {
            let registry = crate::keys::tags_key(crate::keys::prefix_of_base(b.base));
            self.register_tags(&registry, &[b.base.to_string()], false).await?;
        }
        Ok(self.apply_prepared(&self.prepare(batches)).await?.results)
    }

    /// Encodes a batch's script calls: per board tag, one or more (each at
    /// most the tag's call size, chained on each other). The result owns
    /// everything, so a batch can be sent while the caller gets on with the
    /// next one.
    pub fn prepare(&self, batches: &[TagBatch<'_>]) -> Prepared {
        write::prepared::prepare(batches, self.dedupe_ttl_secs, |base| self.sizer.limit(base))
    }

    /// Sets the most events one apply-script call carries (see
    /// [`DEFAULT_MAX_EVENTS_PER_CALL`]).
    pub fn with_max_events_per_call(mut self, n: usize) -> Store {
        self.sizer = write::sizer::CallSizer::new(None, n);
        self
    }

    /// Sizes each tag's calls to hold Redis about `max_call_time` at the
    /// Redis time per event measured on the tag, at most `max_events_per_call`
    /// events (see `sizer`).
    pub fn with_call_sizes(mut self, max_call_time: Duration, max_events_per_call: usize) -> Store {
        self.sizer = write::sizer::CallSizer::new(Some(max_call_time), max_events_per_call);
        self
    }

    /// `EVALSHA`, loading the script on `NOSCRIPT` (a restarted Redis) and retrying once.
    async fn eval<T: redis::FromRedisValue, A: redis::ToRedisArgs>(
        &self,
        lua: &conn::scripts::Lua,
        keys: &[String],
        args: &[A],
    ) -> Result<Result<T, RedisError>, StoreError> {
        let cmd = evalsha(&lua.script, keys, args);
        let mut conn = self.conn.clone();
        Ok(match cmd.query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script_load(&mut conn, lua).await?;
                cmd.query_async(&mut conn).await
            }
            other => other,
        })
    }

    /// Waits for `n` replicas on every write (`redis.min_replicas`): each
    /// apply call is then followed by `WAIT n timeout` on its connection,
    /// and a call is done only once enough replicas acknowledged it.
    pub fn with_min_replicas(mut self, n: u32, timeout: Duration) -> Store {
        self.replicas = (n > 0).then_some((n, timeout));
        self
    }

    /// A deployment marker (`keys::deploy_key`): field -> offset.
    pub async fn marker(&self, key: &str) -> Result<std::collections::HashMap<String, i64>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("HGETALL").arg(key).query_async(&mut conn).await.map_err(StoreError::Registry)
    }

    /// Records offsets in a deployment marker, each `(field, the offset
    /// this worker last recorded for it, if any, the new offset)`, unless
    /// Redis no longer holds what this worker recorded: then nothing is
    /// written and the answer is each such `(field, found (-1: none),
    /// expected)` (see `scripts/deploy.lua`).
    pub async fn record_marker(
        &self,
        key: &str,
        entries: &[(String, Option<i64>, i64)],
    ) -> Result<Vec<(String, i64, i64)>, StoreError> {
        let mut inv = conn::scripts::DEPLOY.script.key(key);
        for (field, expected, new) in entries {
            inv.arg(field).arg(expected.unwrap_or(-1)).arg(new);
        }
        let mut conn = self.conn.clone();
        let flat: Vec<String> = match self.replicas {
            None => inv.invoke_async(&mut conn).await.map_err(StoreError::Registry)?,
            // Waited for like an apply call (see `apply_one`), so that a
            // failover that keeps every acknowledged write keeps the marker.
            Some((wanted, timeout)) => {
                let mut eval = redis::cmd("EVAL");
                eval.arg(&conn::scripts::DEPLOY.source).arg(1).arg(key);
                for (field, expected, new) in entries {
                    eval.arg(field).arg(expected.unwrap_or(-1)).arg(new);
                }
                let mut pipe = redis::pipe();
                pipe.add_command(eval).add_command(wait_cmd(wanted, timeout));
                let (flat, got): (Vec<String>, i64) = pipe.query_async(&mut conn).await.map_err(StoreError::Wait)?;
                if got < i64::from(wanted) {
                    return Err(StoreError::Replicas { wanted, got });
                }
                flat
            }
        };
        Ok(flat.chunks(3).map(|c| (c[0].clone(), c[1].parse().unwrap_or(-1), c[2].parse().unwrap_or(-1))).collect())
    }

    /// Records offsets in a deployment marker.
    pub async fn set_marker(&self, key: &str, offsets: &[(String, i64)]) -> Result<(), StoreError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("HSET");
        cmd.arg(key);
        for (f, o) in offsets {
            cmd.arg(f).arg(o);
        }
        let mut conn = self.conn.clone();
        cmd.query_async::<i64>(&mut conn).await.map_err(StoreError::Registry)?;
        Ok(())
    }

    /// `PING`, for readiness.
    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
    }
}
