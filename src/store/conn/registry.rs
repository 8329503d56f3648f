//! Which board tags a deployment has written, kept where a Redis that lost
//! its data cannot hide it.
//!
//! Every board tag is registered before its first write: its offsets hash
//! gets the field [`keys::REGISTERED_FIELD`] (on the tag's own node), then
//! the tag joins the registry of tags (`keys::tags_key`). Every script that
//! writes to a tag (apply, admin, seal, roll) first checks that field and,
//! when it is missing, writes nothing and answers `LOST`: the tag was
//! registered, so its data is gone (a restart without persistence, a
//! `FLUSHALL`, a failover to a replica that never had it). A tag the
//! registry already holds is never given the field again here: only an
//! operator's `rankflow accept-loss` or a rebuild does that.
//!
//! With `redis.min_replicas`, the field and the registry's entry are each
//! written with `WAIT`, as an apply call is, and a registration is done
//! only once both are on enough replicas: a failover may lose a
//! registration no replica had, and the tag's next write would then read
//! as lost data though nothing acknowledged was lost.

use futures::future::try_join_all;

use crate::keys;
use crate::store::{Store, StoreError};

impl Store {
    /// Registers board tags before their first write (see the module
    /// header). A tag already in the registry is left as it is: if its
    /// field is gone, its next write answers `LOST`.
    ///
    /// `known`: the caller has registered or seen registered tags before;
    /// an empty registry then means the registry itself was lost, and the
    /// answer is [`StoreError::Lost`] with nothing written.
    pub async fn register_tags(&self, registry: &str, bases: &[String], known: bool) -> Result<(), StoreError> {
        if bases.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        let (members, size): (Vec<bool>, i64) = redis::pipe()
            .cmd("SMISMEMBER")
            .arg(registry)
            .arg(bases)
            .cmd("SCARD")
            .arg(registry)
            .query_async(&mut conn)
            .await
            .map_err(StoreError::Registry)?;
        if known && size == 0 {
            return Err(StoreError::Lost {
                base: registry.to_string(),
                detail: "the registry of board tags is empty though this worker registered tags in it".into(),
            });
        }
        let new: Vec<String> = bases.iter().zip(members).filter(|(_, m)| !m).map(|(b, _)| b.clone()).collect();
        if new.is_empty() {
            return Ok(());
        }
        self.stamp_tags(&new).await?;
        self.add_to_registry(registry, &new).await
    }

    /// Gives each tag its [`keys::REGISTERED_FIELD`] where it has none
    /// (`HSETNX`, on each tag's node), so that its writes go on. For tags
    /// being registered, tags found with data, and tags whose loss an
    /// operator accepted; never for a tag the registry holds without it.
    pub async fn stamp_tags(&self, bases: &[String]) -> Result<(), StoreError> {
        let now = chrono::Utc::now().timestamp_millis();
        let _: Vec<i64> = self
            .on_each_tag(bases, true, |b| {
                let mut cmd = redis::cmd("HSETNX");
                cmd.arg(keys::offsets_key(b)).arg(keys::REGISTERED_FIELD).arg(now);
                cmd
            })
            .await?;
        Ok(())
    }

    /// One command per tag, all at once (on a cluster, each on its tag's
    /// node); `durable`: a write, waited for as [`Store::durably`] does.
    async fn on_each_tag<T: redis::FromRedisValue>(
        &self,
        bases: &[String],
        durable: bool,
        cmd: impl Fn(&str) -> redis::Cmd,
    ) -> Result<Vec<T>, StoreError> {
        let calls = bases.iter().map(|b| {
            let cmd = cmd(b);
            async move {
                match durable {
                    true => self.durably(cmd).await,
                    false => cmd.query_async::<T>(&mut self.conn.clone()).await.map_err(StoreError::Registry),
                }
            }
        });
        try_join_all(calls).await
    }

    /// A write, with `redis.min_replicas` sent with its `WAIT` in one
    /// pipeline on the connection of its node (see `apply_one`), and an
    /// error unless enough replicas acknowledged it.
    async fn durably<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        let Some((wanted, timeout)) = self.replicas else {
            return cmd.query_async(&mut conn).await.map_err(StoreError::Registry);
        };
        let mut pipe = redis::pipe();
        pipe.add_command(cmd).add_command(crate::store::wait_cmd(wanted, timeout));
        let (reply, got): (T, i64) = pipe.query_async(&mut conn).await.map_err(StoreError::Registry)?;
        if got < i64::from(wanted) {
            return Err(StoreError::Replicas { wanted, got });
        }
        Ok(reply)
    }

    /// Adds tags to the registry as they are (for tags found with data,
    /// which [`Store::stamp_tags`] has registered).
    pub async fn add_to_registry(&self, registry: &str, bases: &[String]) -> Result<(), StoreError> {
        if bases.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("SADD");
        cmd.arg(registry).arg(bases);
        self.durably::<i64>(cmd).await?;
        Ok(())
    }

    /// The registered tags among `bases` that have lost their
    /// [`keys::REGISTERED_FIELD`], in order.
    pub async fn unstamped(&self, bases: &[String]) -> Result<Vec<String>, StoreError> {
        let present: Vec<bool> = self
            .on_each_tag(bases, false, |b| {
                let mut cmd = redis::cmd("HEXISTS");
                cmd.arg(keys::offsets_key(b)).arg(keys::REGISTERED_FIELD);
                cmd
            })
            .await?;
        Ok(bases.iter().zip(present).filter(|(_, p)| !p).map(|(b, _)| b.clone()).collect())
    }

    /// The key base of every board tag registered in `registry` (see
    /// `keys::tags_key`): where an erasure looks, instead of scanning the keyspace.
    pub async fn tag_bases(&self, registry: &str) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("SMEMBERS").arg(registry).query_async(&mut conn).await.map_err(StoreError::Registry)
    }
}
