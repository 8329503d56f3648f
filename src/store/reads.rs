//! The read side of Redis, on the HTTP server's own connection (so that a
//! read never queues behind a batch's script calls on the write
//! connection): `read.lua`'s queries of one board tag's period, and the
//! few plain reads the API makes (which periods a tag holds, which are
//! sealed, a sharded read's versions, `PING`). Every failure is a
//! [`StoreError::Read`], which the API answers 503.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{RedisConn, StoreError};
use crate::keys;

/// The keys of one period of one board tag that `read.lua` reads.
#[derive(Clone, Copy, Debug)]
pub struct ReadKeys<'a> {
    pub key: &'a str,
    pub dense_key: &'a str,
    pub shadow_key: &'a str,
    /// Boards that keep metadata only.
    pub meta_key: Option<&'a str>,
}

/// Reads, on a connection of their own.
#[derive(Clone)]
pub struct Reader {
    pub(super) conn: RedisConn,
    script: Arc<redis::Script>,
}

fn read_failed(source: redis::RedisError) -> StoreError {
    StoreError::Read(source)
}

impl Reader {
    pub fn new(conn: RedisConn) -> Reader {
        Reader { conn, script: Arc::new(super::scripts::READ.script.clone()) }
    }

    /// One query of `read.lua` (see its header): `op`, the board's order
    /// (`desc` or `asc`) and score packing `shift`, then the op's arguments.
    pub async fn query<T: redis::FromRedisValue>(
        &self,
        keys: ReadKeys<'_>,
        op: &str,
        order: &str,
        shift: i64,
        args: &[String],
    ) -> Result<T, StoreError> {
        let mut inv = self.script.key(keys.key);
        inv.key(keys.dense_key).key(keys.shadow_key);
        if let Some(meta) = keys.meta_key {
            inv.key(meta);
        }
        inv.arg(op).arg(order).arg(shift);
        for a in args {
            inv.arg(a);
        }
        inv.invoke_async(&mut self.conn.clone()).await.map_err(read_failed)
    }

    /// `PING`, for readiness.
    pub async fn ping(&self) -> bool {
        redis::cmd("PING").query_async::<String>(&mut self.conn.clone()).await.is_ok()
    }

    /// Every period key the tag `base` has written (its registry of period keys).
    pub async fn period_keys(&self, base: &str) -> Result<Vec<String>, StoreError> {
        redis::cmd("SMEMBERS")
            .arg(keys::registry_key(base))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(read_failed)
    }

    /// Whether period `period_id` of the tag `base` holds anyone (its key
    /// or its hidden players' shadow exists).
    pub async fn holds(&self, base: &str, period_id: &str) -> Result<bool, StoreError> {
        let n: i64 = redis::cmd("EXISTS")
            .arg(keys::period_key(base, period_id))
            .arg(keys::shadow_key(base, period_id))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(read_failed)?;
        Ok(n > 0)
    }

    /// The fields of the tag `base`'s sealed hash (sealed period keys, and their notes).
    pub async fn sealed_fields(&self, base: &str) -> Result<BTreeSet<String>, StoreError> {
        redis::cmd("HKEYS").arg(keys::sealed_key(base)).query_async(&mut self.conn.clone()).await.map_err(read_failed)
    }

    /// Whether `hash` has `field`.
    pub async fn has_field(&self, hash: &str, field: &str) -> Result<bool, StoreError> {
        redis::cmd("HEXISTS").arg(hash).arg(field).query_async(&mut self.conn.clone()).await.map_err(read_failed)
    }

    /// A version hash's version: the sum of its values (as `read.lua` works
    /// it out), from one `HVALS`: a plain command costs Redis a fortieth of
    /// a script call (0.4 against 17.4 µs).
    pub async fn version(&self, key: &str) -> Result<i64, StoreError> {
        let values: Vec<i64> =
            redis::cmd("HVALS").arg(key).query_async(&mut self.conn.clone()).await.map_err(read_failed)?;
        Ok(values.iter().sum())
    }
}
