//! The read side of Redis, on the HTTP server's own connection (so that a
//! read never queues behind a batch's script calls on the write
//! connection): `read.lua`'s queries of one board tag's period, and the
//! few plain reads the API makes (which periods a tag holds, which are
//! sealed, a sharded read's versions, `PING`). With `redis.read_from =
//! "replica"` every read goes to a replica, the primary when none answers
//! or the read is `fresh`. Every failure is a [`StoreError::Read`], which
//! the API answers 503.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tracing::{info, warn};

use super::queries::{Query, ReadAt};
use crate::keys;
use crate::store::{touches, RedisConn, StoreError};

/// The keys of one period of one board tag that `read.lua` reads.
#[derive(Clone, Copy, Debug)]
pub struct ReadKeys<'a> {
    pub key: &'a str,
    pub dense_key: &'a str,
    pub shadow_key: &'a str,
    /// The hash whose values sum to the period's version (see `read.lua`).
    pub version_key: &'a str,
    /// Boards that keep metadata only.
    pub meta_key: Option<&'a str>,
}

/// Reads, on connections of their own: the primary's, and with
/// `redis.read_from = "replica"` its replicas' (see [`Replicas`]).
#[derive(Clone)]
pub struct Reader {
    /// The primary (a cluster's primaries).
    pub(in crate::store) conn: RedisConn,
    replicas: Option<Arc<Replicas>>,
    /// This read goes to the primary (`fresh=true`).
    fresh: bool,
}

/// Where replica reads go: a single Redis's replicas, in turn, or a
/// cluster connection that routes reads to the replicas of the key's node.
/// A read no replica answers (down, paused past [`REPLICA_TIMEOUT`],
/// loading, cut off from its primary) goes to the primary, counted, and
/// logged once per outage.
pub struct Replicas {
    conns: RwLock<Vec<RedisConn>>,
    next: AtomicUsize,
    down: AtomicBool,
}

/// How long a replica may take to answer a read before the primary is asked instead.
pub const REPLICA_TIMEOUT: Duration = Duration::from_millis(300);

impl Replicas {
    pub fn new(conns: Vec<RedisConn>) -> Replicas {
        Replicas { conns: RwLock::new(conns), next: AtomicUsize::new(0), down: AtomicBool::new(false) }
    }

    /// Takes new connections (a cluster's, made again to learn its replicas).
    pub fn replace(&self, conns: Vec<RedisConn>) {
        *self.conns.write().unwrap_or_else(|e| e.into_inner()) = conns;
    }

    fn pick(&self) -> Option<RedisConn> {
        let conns = self.conns.read().unwrap_or_else(|e| e.into_inner());
        let i = self.next.fetch_add(1, Ordering::Relaxed) % conns.len().max(1);
        conns.get(i).cloned()
    }
}

/// Errors after which the primary is asked: the replica is not there, not
/// answering, or not serving.
fn unavailable(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
}

fn read_failed(source: redis::RedisError) -> StoreError {
    StoreError::Read(source)
}

impl crate::store::Store {
    /// A reader of the store's own connection (the primary): for the
    /// worker's jobs, which read what they have just written.
    pub fn primary_reader(&self) -> Reader {
        Reader::new(self.conn.clone(), None).fresh(true)
    }
}

impl Reader {
    pub fn new(conn: RedisConn, replicas: Option<Arc<Replicas>>) -> Reader {
        Reader { conn, replicas, fresh: false }
    }

    /// This reader for one read: `fresh` ones go to the primary.
    pub fn fresh(&self, fresh: bool) -> Reader {
        Reader { fresh, ..self.clone() }
    }

    /// Runs `read` on a replica (unless the read is fresh or there is
    /// none), and on the primary when no replica answers.
    pub(in crate::store) async fn run<T, F, Fut>(&self, read: F) -> Result<T, StoreError>
    where
        F: Fn(RedisConn) -> Fut,
        Fut: Future<Output = Result<T, redis::RedisError>>,
    {
        let replica = self.replicas.as_ref().filter(|_| !self.fresh).and_then(|r| Some((r, r.pick()?)));
        if let Some((r, conn)) = replica {
            match read(conn).await {
                Ok(v) => {
                    if r.down.swap(false, Ordering::Relaxed) {
                        info!("A replica answers reads again.");
                    }
                    return Ok(v);
                }
                Err(e) if unavailable(&e) => {
                    crate::metrics::get().replica_fallbacks.inc();
                    if !r.down.swap(true, Ordering::Relaxed) {
                        warn!(error = %e, "A replica did not answer a read; reads go to the primary until one does.");
                    }
                }
                Err(e) => return Err(read_failed(e)),
            }
        }
        read(self.conn.clone()).await.map_err(read_failed)
    }

    /// One query of `read.lua` (see its header and [`crate::store::read::queries`]) on
    /// one period: sent as `EVALSHA_RO`, which a replica runs and a cluster
    /// routes to a replica; a node without the script gets it with
    /// `EVAL_RO` once. A reply of another shape is a [`StoreError::Reply`].
    pub async fn read<Q: Query>(&self, at: &ReadAt<'_>, query: &Q) -> Result<Q::Reply, StoreError> {
        let lua = &*crate::store::conn::scripts::READ;
        let keys = at.keys;
        let key_list = touches::named(&touches::READ, |name| match name {
            "period" => Some(keys.key.to_string()),
            "dense" => Some(keys.dense_key.to_string()),
            "shadow" => Some(keys.shadow_key.to_string()),
            "versions" => Some(keys.version_key.to_string()),
            "meta" => keys.meta_key.map(str::to_string),
            _ => None,
        });
        let order = if at.desc { "desc" } else { "asc" };
        let mut args = vec![Q::OP.as_bytes().to_vec(), order.as_bytes().to_vec(), at.shift.to_string().into_bytes()];
        args.extend(query.args().into_iter().map(String::into_bytes));
        let reply = self.eval_ro(lua, &key_list, &args).await?;
        query.parse(reply, keys.meta_key.is_some()).map_err(crate::store::read::queries::bad_reply)
    }

    /// Runs the read-only script `lua` (see [`Reader::run`] for where):
    /// `EVALSHA_RO`, which a replica runs and a cluster routes to a
    /// replica; a node without the script gets its source with `EVAL_RO`
    /// once.
    pub(in crate::store) async fn eval_ro(
        &self,
        lua: &crate::store::conn::scripts::Lua,
        keys: &[String],
        args: &[Vec<u8>],
    ) -> Result<redis::Value, StoreError> {
        let call = |cmd: &str, body: &str| {
            let mut c = redis::cmd(cmd);
            c.arg(body).arg(keys.len()).arg(keys).arg(args);
            c
        };
        let call = &call;
        self.run(|mut conn| async move {
            match call("EVALSHA_RO", lua.script.get_hash()).query_async(&mut conn).await {
                // The script's source goes only to a node that lacks it.
                Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                    call("EVAL_RO", &lua.source).query_async(&mut conn).await
                }
                other => other,
            }
        })
        .await
    }

    /// `PING`, for readiness (the primary's).
    pub async fn ping(&self) -> bool {
        redis::cmd("PING").query_async::<String>(&mut self.conn.clone()).await.is_ok()
    }

    /// Every period key the tag `base` has written (its registry of period keys).
    pub async fn period_keys(&self, base: &str) -> Result<Vec<String>, StoreError> {
        let key = keys::registry_key(base);
        self.run(|mut c| {
            let key = key.clone();
            async move { redis::cmd("SMEMBERS").arg(key).query_async(&mut c).await }
        })
        .await
    }

    /// Whether period `period_id` of the tag `base` holds anyone (its key
    /// or its hidden players' shadow exists).
    pub async fn holds(&self, base: &str, period_id: &str) -> Result<bool, StoreError> {
        let (key, shadow) = (keys::period_key(base, period_id), keys::shadow_key(base, period_id));
        let n: i64 = self
            .run(|mut c| {
                let (key, shadow) = (key.clone(), shadow.clone());
                async move { redis::cmd("EXISTS").arg(key).arg(shadow).query_async(&mut c).await }
            })
            .await?;
        Ok(n > 0)
    }

    /// The fields of the tag `base`'s sealed hash (sealed period keys, and their notes).
    pub async fn sealed_fields(&self, base: &str) -> Result<BTreeSet<String>, StoreError> {
        let key = keys::sealed_key(base);
        self.run(|mut c| {
            let key = key.clone();
            async move { redis::cmd("HKEYS").arg(key).query_async(&mut c).await }
        })
        .await
    }

    /// Whether `hash` has `field`.
    pub async fn has_field(&self, hash: &str, field: &str) -> Result<bool, StoreError> {
        self.run(|mut c| async move { redis::cmd("HEXISTS").arg(hash).arg(field).query_async(&mut c).await }).await
    }

    /// A version hash's version: the sum of its values (as `read.lua` works
    /// it out), from one `HVALS`: a plain command costs Redis a fortieth of
    /// a script call (0.4 against 17.4 µs).
    pub async fn version(&self, key: &str) -> Result<i64, StoreError> {
        let values: Vec<i64> =
            self.run(|mut c| async move { redis::cmd("HVALS").arg(key).query_async(&mut c).await }).await?;
        Ok(values.iter().sum())
    }
}
