//! The Redis side of the write path: connecting (single node or cluster),
//! the apply script, and sending a batch of board writes in one round trip.
//!
//! A batch becomes one `EVALSHA` of `scripts/apply.lua` per board tag, all
//! sent at once over redis-rs's multiplexed connection (so they share the
//! wire like a pipeline), and on a cluster each goes to the node owning its
//! tag's slot. The script cache is lost when Redis restarts: a `NOSCRIPT`
//! reply loads the script (on every primary) and retries that call. Retrying
//! is always safe, because the script itself refuses a record at or below
//! the tag's recorded offset. This module never decides what a record's
//! outcome means for Kafka; it only reports what Redis did.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value};

use crate::board::{BoardWrite, PeriodWrite, WriteOp, WriteParams};
use crate::config::RedisSettings;
use crate::event::Event;
use crate::keys;
use rustc_hash::{FxHashMap, FxHashSet};

const APPLY_LUA: &str = include_str!("scripts/apply.lua");
const ERASE_LUA: &str = include_str!("scripts/erase.lua");

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
    #[error("the apply script for {base} returned a reply of {got} values that does not describe {expected} events")]
    BadReply { base: String, got: usize, expected: usize },
}

/// A connection to a single Redis or to a cluster, usable as either.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// Connects with short timeouts: callers retry with their own backoff,
    /// and redis-rs reconnects in the background after a failure.
    pub async fn connect(settings: &RedisSettings) -> Result<RedisConn, StoreError> {
        if settings.cluster {
            let client = redis::cluster::ClusterClient::builder(vec![settings.url.as_str()])
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(Duration::from_secs(10))
                .retries(3)
                .build()
                .map_err(StoreError::Connect)?;
            let conn = client.get_async_connection().await.map_err(StoreError::Connect)?;
            Ok(RedisConn::Cluster(conn))
        } else {
            let client = redis::Client::open(settings.url.as_str()).map_err(StoreError::Connect)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(2)))
                .set_response_timeout(Some(Duration::from_secs(10)))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_secs(1));
            let conn = ConnectionManager::new_with_config(client, config).await.map_err(StoreError::Connect)?;
            Ok(RedisConn::Single(conn))
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// What the apply script did with one event on one board tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyResult {
    Applied,
    /// The `event_id` marker was already set: a producer retry.
    DuplicateEvent,
    /// The record's offset was already applied on this tag: a redelivery.
    DuplicateOffset,
    /// The script refused the event; the code maps to an `event::Reason`.
    Refused(i64),
}

impl ApplyResult {
    fn from_code(code: i64) -> ApplyResult {
        match code {
            1 => ApplyResult::Applied,
            2 => ApplyResult::DuplicateEvent,
            3 => ApplyResult::DuplicateOffset,
            other => ApplyResult::Refused(other),
        }
    }
}

/// One event's writes on one tag, borrowed from the batch.
#[derive(Clone, Copy, Debug)]
pub struct ApplyItem<'a> {
    /// `<topic>:<partition>` (see `keys::offsets_field`).
    pub field: &'a str,
    pub offset: i64,
    pub member: &'a str,
    /// `sum`: the delta; `gt`/`lt`: the packed stored score.
    pub num: i64,
    /// `sum`: the tie component packed with the new total.
    pub tie: i64,
    /// Event time, epoch ms.
    pub ts: i64,
    pub event_id: &'a uuid::Uuid,
    pub periods: &'a [Arc<PeriodWrite>],
}

/// All of a batch's events for one board tag: one script call.
#[derive(Debug)]
pub struct TagBatch<'a> {
    pub base: &'a str,
    pub params: WriteParams,
    pub items: Vec<ApplyItem<'a>>,
}

/// Adds one event's write on one board to the batch of its board tag,
/// opening a batch for a tag not seen yet; returns the tag's index, so that
/// `tags[t].items` keeps record order.
pub fn push_write<'a>(
    tags: &mut Vec<TagBatch<'a>>,
    write: &'a BoardWrite,
    event: &'a Event,
    field: &'a str,
    offset: i64,
) -> usize {
    let t = match tags.iter().position(|t| t.base == write.base) {
        Some(t) => t,
        None => {
            tags.push(TagBatch { base: &write.base, params: write.params, items: Vec::new() });
            tags.len() - 1
        }
    };
    tags[t].items.push(ApplyItem {
        field,
        offset,
        member: &event.player_id,
        num: write.num,
        tie: write.tie,
        ts: write.ts,
        event_id: &event.event_id,
        periods: &write.periods,
    });
    t
}

/// A batch's encoded script calls: (board tag, call, number of events).
pub struct Prepared {
    calls: Vec<(String, Invocation, usize)>,
}

impl Prepared {
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Where this batch leaves each board tag: per tag, each partition
    /// field's last offset, which a batch sent behind it waits for.
    pub fn tails(&self) -> Tails {
        Tails(self.calls.iter().map(|(base, inv, _)| (base.clone(), inv.tails.clone())).collect())
    }

    /// Lets these calls be sent while the batch that left `before` is still
    /// on its way to Redis: each call then runs only if its tag has recorded
    /// the offsets that batch carries for the same partitions, and otherwise
    /// fails with `STALE` having done nothing (see apply.lua). Without this,
    /// a later batch applied ahead of a failed one would make the failed
    /// one's events look redelivered when it is retried.
    pub fn after(&mut self, before: &Tails) {
        for (base, inv, _) in &mut self.calls {
            let Some((_, tails)) = before.0.iter().find(|(b, _)| b == base) else { continue };
            for (f, (field, _)) in inv.tails.iter().enumerate() {
                if let Some((_, last)) = tails.iter().find(|(g, _)| g == field) {
                    inv.args[inv.need_at + f] = last.to_string().into_bytes();
                }
            }
        }
    }

    /// Drops the preconditions [`Prepared::after`] set. Once the batch
    /// before has landed they hold, unless Redis has lost its offsets (a
    /// restart without persistence): then the calls must run all the same.
    pub fn unconditional(&mut self) {
        for (_, inv, _) in &mut self.calls {
            for f in 0..inv.tails.len() {
                inv.args[inv.need_at + f] = b"-1".to_vec();
            }
        }
    }
}

/// Per board tag, each partition field's last offset in a batch (see [`Prepared::tails`]).
#[derive(Clone, Debug, Default)]
pub struct Tails(Vec<(String, Vec<(String, i64)>)>);

/// KEYS and ARGV of one apply-script call, as `scripts/apply.lua` documents them.
#[derive(Debug, PartialEq)]
pub struct Invocation {
    pub keys: Vec<String>,
    /// Strings, then the batch as one MessagePack stream (see apply.lua).
    pub args: Vec<Vec<u8>>,
    /// Each partition field of the call, in ARGV order, with its last offset.
    tails: Vec<(String, i64)>,
    /// Where in `args` the fields' preconditions start.
    need_at: usize,
}

/// Lays out one tag batch for the script. Pure, so it is unit tested.
pub fn build_invocation(batch: &TagBatch<'_>, dedupe_ttl_secs: u64) -> Invocation {
    let mut period_index: FxHashMap<&str, usize> = FxHashMap::default();
    let mut periods: Vec<&PeriodWrite> = Vec::new();
    for item in &batch.items {
        for p in item.periods {
            if !period_index.contains_key(p.key.as_str()) {
                periods.push(p);
                period_index.insert(&p.key, periods.len());
            }
        }
    }
    let p = &batch.params;
    let latest = p.op == WriteOp::Latest;
    let mut keys = Vec::with_capacity(2 + 4 * periods.len());
    keys.push(keys::offsets_key(batch.base));
    keys.extend(periods.iter().map(|p| p.key.clone()));
    keys.extend(periods.iter().map(|p| p.dense_key.clone()));
    keys.extend(periods.iter().map(|p| p.count_key.clone()));
    if latest {
        keys.extend(periods.iter().map(|p| p.times_key.clone()));
    }
    if p.sealed {
        keys.push(keys::sealed_key(batch.base));
    }

    let mut args: Vec<Vec<u8>> = Vec::with_capacity(16 + 2 * periods.len());
    let mut push = |a: String| args.push(a.into_bytes());
    push(p.op.as_str().to_string());
    push(dedupe_ttl_secs.to_string());
    push(keys::refused_prefix(batch.base));
    push(p.shift.to_string());
    push(p.max_value.to_string());
    push(if p.desc { "desc" } else { "asc" }.to_string());
    push(p.top_k.to_string());
    push(p.rate_events.to_string());
    push(p.rate_window_ms.to_string());
    push(keys::rate_prefix(batch.base));
    push(if p.dense { "1" } else { "0" }.to_string());
    push(if p.sealed { "1" } else { "0" }.to_string());
    push(periods.len().to_string());
    for period in &periods {
        push(period.expire_at.unwrap_or(0).to_string());
    }
    // The batch's distinct members, per period key the distinct members
    // written to it, and the distinct lists of period keys the events write
    // (shapes), so that the script keeps its state in tables indexed by number.
    let mut member_index: FxHashMap<&str, usize> =
        FxHashMap::with_capacity_and_hasher(batch.items.len(), Default::default());
    let mut members: Vec<&str> = Vec::with_capacity(batch.items.len());
    let mut per_period: Vec<Vec<usize>> = vec![Vec::new(); periods.len()];
    // (period key, member) pairs already in per_period.
    let mut listed: FxHashSet<(usize, usize)> = FxHashSet::default();
    let mut fields: Vec<(&str, i64)> = Vec::new();
    // A batch's events write a handful of distinct period lists at most.
    let mut shapes: Vec<Vec<usize>> = Vec::new();
    let mut shape: Vec<usize> = Vec::new();
    let with_tie = p.op == WriteOp::Sum && p.shift > 1;
    let with_ts = latest || p.rate_events > 0;
    let mut body = Vec::with_capacity(batch.items.len() * 16);
    for item in &batch.items {
        let f = match fields.iter().position(|(f, _)| *f == item.field) {
            Some(f) => f,
            None => {
                fields.push((item.field, item.offset));
                fields.len() - 1
            }
        };
        fields[f].1 = fields[f].1.max(item.offset);
        let m = *member_index.entry(item.member).or_insert_with(|| {
            members.push(item.member);
            members.len()
        });
        shape.clear();
        shape.extend(item.periods.iter().map(|period| period_index[period.key.as_str()]));
        let sh = match shapes.iter().position(|s| *s == shape) {
            Some(sh) => sh + 1,
            None => {
                shapes.push(shape.clone());
                shapes.len()
            }
        };
        mp_int(&mut body, f as i64 + 1);
        mp_int(&mut body, item.offset);
        mp_int(&mut body, m as i64);
        mp_int(&mut body, item.num);
        mp_int(&mut body, sh as i64);
        if with_tie {
            mp_int(&mut body, item.tie);
        }
        if with_ts {
            mp_int(&mut body, item.ts);
        }
        for &j in &shape {
            if listed.insert((j, m)) {
                per_period[j - 1].push(m);
            }
        }
    }
    let mut events = Vec::with_capacity(body.len() + 16 * members.len() + 16);
    mp_int(&mut events, members.len() as i64);
    for m in &members {
        rmp::encode::write_str(&mut events, m).expect("writing to a Vec cannot fail");
    }
    for list in &per_period {
        // Every member, in order (each member's first event wrote the
        // key): -1 stands for the list, which the script then need not read.
        if list.len() == members.len() && list.iter().enumerate().all(|(i, &m)| m == i + 1) {
            mp_int(&mut events, -1);
            continue;
        }
        mp_int(&mut events, list.len() as i64);
        for m in list {
            mp_int(&mut events, *m as i64);
        }
    }
    mp_int(&mut events, shapes.len() as i64);
    for shape in &shapes {
        mp_int(&mut events, shape.len() as i64);
        for &j in shape {
            mp_int(&mut events, j as i64);
        }
    }
    mp_int(&mut events, batch.items.len() as i64);
    for item in &batch.items {
        // A str of the id's 16 bytes: Redis's cmsgpack reads no bin formats.
        rmp::encode::write_str_len(&mut events, 16).expect("writing to a Vec cannot fail");
        events.extend_from_slice(item.event_id.as_bytes());
    }
    events.extend_from_slice(&body);
    push(fields.len().to_string());
    for (f, _) in &fields {
        push(f.to_string());
    }
    // No preconditions until `Prepared::after` sets them.
    let need_at = args.len();
    args.extend(fields.iter().map(|_| b"-1".to_vec()));
    args.push(events);
    let tails = fields.iter().map(|&(f, last)| (f.to_string(), last)).collect();
    Invocation { keys, args, tails, need_at }
}

/// The apply script's reply: the number of events it saw, then (event
/// number, code) for each event not applied. `None` if it does not describe
/// `n` events.
fn decode_reply(reply: &[i64], n: usize) -> Option<Vec<ApplyResult>> {
    let (&seen, rest) = reply.split_first()?;
    if seen != n as i64 || rest.len() % 2 != 0 {
        return None;
    }
    let mut out = vec![ApplyResult::Applied; n];
    for pair in rest.chunks_exact(2) {
        let i = usize::try_from(pair[0]).ok().filter(|i| (1..=n).contains(i))?;
        out[i - 1] = ApplyResult::from_code(pair[1]);
    }
    Some(out)
}

/// The apply script's `dedupe_ttl`: whole seconds, rounded up, so that an
/// event id stays a duplicate at least as long as configured.
fn ttl_secs(ttl: Duration) -> u64 {
    (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1)
}

/// The write side of Redis.
fn mp_int(buf: &mut Vec<u8>, n: i64) {
    rmp::encode::write_sint(buf, n).expect("writing to a Vec cannot fail");
}

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
        let calls = prepared.calls.iter().map(|(base, inv, n)| self.apply_one(base, inv, *n));
        futures::future::try_join_all(calls).await
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
    /// packing shift), at most once per record (see `scripts/erase.lua`).
    pub async fn erase(
        &self,
        tags: &[(String, i64)],
        field: &str,
        offset: i64,
        member: &str,
    ) -> Result<(), StoreError> {
        let calls = tags.iter().map(|(base, shift)| async move {
            let keys = [keys::offsets_key(base), keys::registry_key(base)];
            let args = [field.to_string(), offset.to_string(), member.to_string(), shift.to_string(), base.clone()];
            let reply: Result<i64, RedisError> = self.eval(&self.erase_script, ERASE_LUA, &keys, &args).await?;
            reply.map(|_| ()).map_err(|source| StoreError::Erase { base: base.clone(), source })
        });
        futures::future::try_join_all(calls).await.map(|_| ())
    }

    /// `PING`, for readiness.
    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
    }
}

/// One connection to each Redis node that holds data: the server, or every
/// primary of a cluster (for scans, which a cluster answers per node).
pub async fn node_connections(settings: &RedisSettings) -> Result<Vec<redis::aio::MultiplexedConnection>, String> {
    let client = redis::Client::open(settings.url.as_str()).map_err(|e| format!("redis url: {e}"))?;
    let mut seed = client.get_multiplexed_async_connection().await.map_err(|e| format!("connect to Redis: {e}"))?;
    if !settings.cluster {
        return Ok(vec![seed]);
    }
    let nodes: String =
        redis::cmd("CLUSTER").arg("NODES").query_async(&mut seed).await.map_err(|e| format!("CLUSTER NODES: {e}"))?;
    let mut out = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 3 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        let addr = fields[1].split('@').next().unwrap_or_default();
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| format!("bad node address {addr}"))?;
        let port: u16 = port.parse().map_err(|_| format!("bad node address {addr}"))?;
        let info = client.get_connection_info().clone().set_addr(redis::ConnectionAddr::Tcp(host.to_string(), port));
        let c = redis::Client::open(info).map_err(|e| e.to_string())?;
        out.push(c.get_multiplexed_async_connection().await.map_err(|e| format!("connect to {addr}: {e}"))?);
    }
    Ok(out)
}

/// Every key matching `pattern` on every node.
pub async fn scan_keys(settings: &RedisSettings, pattern: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for mut conn in node_connections(settings).await? {
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("SCAN: {e}"))?;
            out.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pw(period: &str, expire_at: Option<i64>) -> Arc<PeriodWrite> {
        Arc::new(PeriodWrite {
            id: period.to_string(),
            key: format!("lb:{{p}}:{period}"),
            dense_key: format!("lb:{{p}}:_dense:{period}"),
            count_key: format!("lb:{{p}}:_dcount:{period}"),
            times_key: format!("lb:{{p}}:_ts:{period}"),
            expire_at,
            close_at: None,
        })
    }

    #[test]
    fn the_dedupe_ttl_goes_to_the_script_in_whole_seconds_rounded_up() {
        assert_eq!(ttl_secs(Duration::from_secs(604_800)), 604_800);
        assert_eq!(ttl_secs(Duration::from_millis(1_500)), 2);
        assert_eq!(ttl_secs(Duration::from_millis(1)), 1);
        assert_eq!(ttl_secs(Duration::ZERO), 1);
    }

    #[test]
    fn a_reply_lists_the_events_not_applied_and_must_count_them_all() {
        let got = decode_reply(&[3, 2, 2, 3, 4], 3).unwrap();
        assert_eq!(got, [ApplyResult::Applied, ApplyResult::DuplicateEvent, ApplyResult::Refused(4)]);
        assert_eq!(decode_reply(&[2], 2).unwrap(), [ApplyResult::Applied; 2]);
        // A reply for another number of events, a pair cut short, an event
        // number out of range: the batch fails and is retried, nothing is guessed.
        assert!(decode_reply(&[2], 3).is_none());
        assert!(decode_reply(&[3, 2], 3).is_none());
        assert!(decode_reply(&[3, 4, 2], 3).is_none());
        assert!(decode_reply(&[3, 0, 2], 3).is_none());
        assert!(decode_reply(&[], 0).is_none());
    }

    #[test]
    fn invocations_share_period_keys_and_index_them_from_one() {
        let id1 = uuid::Uuid::from_u128(1);
        let id2 = uuid::Uuid::from_u128(2);
        let k1 = vec![pw("d:2026-08-14", Some(100)), pw("all", None)];
        let k2 = vec![pw("all", None)];
        let batch = TagBatch {
            base: "lb:{p}",
            params: WriteParams {
                op: WriteOp::Sum,
                shift: 1,
                max_value: 1000,
                desc: true,
                top_k: 0,
                rate_events: 0,
                rate_window_ms: 0,
                dense: true,
                sealed: false,
            },
            items: vec![
                ApplyItem {
                    field: "t:0",
                    offset: 7,
                    member: "alice",
                    num: 5,
                    tie: 0,
                    ts: 1,
                    event_id: &id1,
                    periods: &k1,
                },
                ApplyItem {
                    field: "t:1",
                    offset: 9,
                    member: "bob",
                    num: -3,
                    tie: 0,
                    ts: 2,
                    event_id: &id2,
                    periods: &k2,
                },
            ],
        };
        let inv = build_invocation(&batch, 60);
        assert_eq!(
            inv.keys,
            [
                "lb:{p}:_offsets",
                "lb:{p}:d:2026-08-14",
                "lb:{p}:all",
                "lb:{p}:_dense:d:2026-08-14",
                "lb:{p}:_dense:all",
                "lb:{p}:_dcount:d:2026-08-14",
                "lb:{p}:_dcount:all"
            ]
        );
        let (events, head) = inv.args.split_last().unwrap();
        let head: Vec<&str> = head.iter().map(|a| std::str::from_utf8(a).unwrap()).collect();
        assert_eq!(
            head,
            [
                "sum",
                "60",
                "lb:{p}:_refused:",
                "1",
                "1000",
                "desc",
                "0",
                "0",
                "0",
                "lb:{p}:_rl:",
                "1",
                "0",
                "2",
                "100",
                "0",
                "2",
                "t:0",
                "t:1",
                "-1",
                "-1"
            ]
        );
        // The members; per period key its members' indexes (-1: all of them, in
        // order); the shapes; then
        // the events: field index, offset, member index, num, shape (a sum
        // without a tie-break and without a rate limit sends no tie or time).
        let mut rd = events.as_slice();
        let mut got = Vec::new();
        while !rd.is_empty() {
            let mut buf = [0u8; 64];
            let mut peek = rd;
            match rmp::decode::read_int::<i64, _>(&mut peek) {
                Ok(n) => {
                    rd = peek;
                    got.push(n.to_string());
                }
                Err(_) if rd[0] == 0xb0 => {
                    // An event id: a str of its 16 bytes.
                    let len = rmp::decode::read_str_len(&mut rd).unwrap() as usize;
                    got.push(uuid::Uuid::from_slice(&rd[..len]).unwrap().to_string());
                    rd = &rd[len..];
                }
                Err(_) => got.push(rmp::decode::read_str(&mut rd, &mut buf).unwrap().to_string()),
            }
        }
        assert!(rd.is_empty());
        #[rustfmt::skip]
        let want = [
            "2", "alice", "bob", // members
            "1", "1",  // period key 1: alice
            "-1", // period key 2: every member in order (alice, bob)
            "2", "2", "1", "2", "1", "2", // shapes: keys 1 and 2; key 2
            "2", // events
            "00000000-0000-0000-0000-000000000001", // their ids
            "00000000-0000-0000-0000-000000000002",
            "1", "7", "1", "5", "1", // alice's event, shape 1
            "2", "9", "2", "-3", "2", // bob's event, shape 2
        ];
        assert_eq!(got, want);

        // Sent behind a batch still in flight, the call waits for that
        // batch's last offset of each partition it shares on the same tag.
        let mut next = Prepared { calls: vec![("lb:{p}".to_string(), inv, 2)] };
        let before = Tails(vec![
            ("lb:{other}".to_string(), vec![("t:1".to_string(), 50)]),
            ("lb:{p}".to_string(), vec![("t:1".to_string(), 8), ("t:2".to_string(), 3)]),
        ]);
        let needs = |p: &Prepared| -> Vec<String> {
            let inv = &p.calls[0].1;
            inv.args[inv.need_at..inv.need_at + 2].iter().map(|a| String::from_utf8(a.clone()).unwrap()).collect()
        };
        next.after(&before);
        assert_eq!(needs(&next), ["-1", "8"]);
        next.unconditional();
        assert_eq!(needs(&next), ["-1", "-1"]);
        // Its own tails: each partition's last offset in the call.
        assert_eq!(next.tails().0, [("lb:{p}".to_string(), vec![("t:0".to_string(), 7), ("t:1".to_string(), 9)])]);
    }
}
