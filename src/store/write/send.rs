//! Sending a prepared batch's apply calls: each call to the Redis node of
//! its tag, in order, at most [`gate::CALLS_IN_REDIS`] unanswered per node,
//! with `WAIT` behind it when `redis.min_replicas` asks for it; which calls
//! have landed ([`Landed`]); and reloading the script after a restart.
//! What to do when a call fails is the writer's (`writer.rs`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tracing::debug;

use super::changes::{self, RankMove};
use super::gate;
use super::prepared::Prepared;
use super::protocol::{Invocation, Script};
use super::reply::{decode_reply, ApplyResult};
use crate::store::conn::scripts::{APPLY, TEAM};
use crate::store::{wait_cmd, RedisConn, Store, StoreError};

/// One call's answers: each event's result, and the rank changes it made.
type CallReply = (Vec<ApplyResult>, Vec<RankMove>);

/// One call's answer: its reply, and whether its writes are on enough replicas.
type CallAnswer = Result<(CallReply, bool), StoreError>;

/// What Redis made of a batch, per tag batch: one result per event, in
/// order, and the rank changes of its events (boards with `notify_top`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchResults {
    pub results: Vec<Vec<ApplyResult>>,
    /// A change's `event` is its event's index in the tag batch.
    pub moves: Vec<Vec<RankMove>>,
}

/// The answers of calls started in order, once they have all ended.
pub(in crate::store) type Answers = BoxFuture<'static, Vec<(usize, CallAnswer)>>;

/// Which calls of a prepared batch Redis has applied, with their answers.
pub struct Landed {
    results: Vec<Option<CallReply>>,
    /// Whether each call's writes are known to be on enough replicas (with
    /// `redis.min_replicas`; without it, a call is durable once it landed).
    durable: Vec<bool>,
    /// The tag batch each call carries events of, in call order.
    batch_of: Vec<usize>,
}

impl Landed {
    /// Nothing landed yet.
    pub fn new(prepared: &Prepared) -> Landed {
        Landed {
            results: vec![None; prepared.calls.len()],
            durable: vec![false; prepared.calls.len()],
            batch_of: prepared.calls.iter().map(|c| c.batch).collect(),
        }
    }

    /// Whether every call has landed (and, with `redis.min_replicas`, is on enough replicas).
    pub fn is_complete(&self) -> bool {
        self.durable.iter().all(|d| *d)
    }

    /// Once all have landed, the answers per tag batch (a tag's calls put
    /// back together, in event order).
    pub fn into_results(self) -> Option<BatchResults> {
        let mut out = BatchResults::default();
        for (r, b) in self.results.into_iter().zip(self.batch_of) {
            if out.results.len() <= b {
                out.results.resize_with(b + 1, Vec::new);
                out.moves.resize_with(b + 1, Vec::new);
            }
            let (results, moves) = r?;
            // A call's events follow those of the tag's calls before it.
            let before = out.results[b].len();
            out.moves[b].extend(moves.into_iter().map(|m| RankMove { event: before + m.event, ..m }));
            out.results[b].extend(results);
        }
        Some(out)
    }
}

impl Store {
    /// Sends prepared calls, in order, at most two in each Redis node at a
    /// time (see [`gate::CALLS_IN_REDIS`]), reloading the script once if
    /// Redis lost it; no other retry.
    pub async fn apply_prepared(&self, prepared: &Prepared) -> Result<BatchResults, StoreError> {
        let prepared = Arc::new(prepared.clone());
        let mut landed = Landed::new(&prepared);
        self.apply_pending(&prepared, &mut landed).await?;
        Ok(landed.into_results().expect("every call landed"))
    }

    /// Sends the calls of `prepared` that have not landed yet, in order,
    /// and records in `landed` each one Redis applied. Fails with the first
    /// error when any call failed; the calls that did land keep their
    /// answers. (A landed call is sent again only ahead of a pending call of
    /// its tag, see `Prepared::to_send`, and its new answers are dropped:
    /// they would report its events as redeliveries, counted as duplicates
    /// instead of applied.)
    pub(in crate::store) async fn apply_pending(
        &self,
        prepared: &Arc<Prepared>,
        landed: &mut Landed,
    ) -> Result<(), StoreError> {
        let answers = self.start_pending(prepared, landed).await.await;
        let attempt = record(prepared, landed, answers);
        self.reload_if_lost(prepared, landed, attempt).await
    }

    /// After an attempt: Redis lost its script cache (a restart), and the
    /// calls that found the script missing may have been overtaken by later
    /// ones that then found their preconditions unmet, so all that did not
    /// land go again, in order, once the script is loaded.
    pub(in crate::store) async fn reload_if_lost(
        &self,
        prepared: &Arc<Prepared>,
        landed: &mut Landed,
        attempt: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match attempt {
            Err(e) if e.is_no_script() => {
                self.load_script().await?;
                let answers = self.start_pending(prepared, landed).await.await;
                record(prepared, landed, answers)
            }
            other => other,
        }
    }

    /// Starts the calls of `prepared` that have not landed, in order: once
    /// this returns, each is queued on the connection behind every call
    /// started before it (batches take the gate's order lock one at a time,
    /// and each call waits for a place in its node's lane). The answers come
    /// from the future it returns, which owns what it needs.
    pub(in crate::store) async fn start_pending(&self, prepared: &Arc<Prepared>, landed: &Landed) -> Answers {
        let to_send = prepared.to_send(&landed.durable);
        let (answers, mut running) = {
            let _order = self.gate.order.lock().await;
            if let RedisConn::Cluster(_) = &self.conn {
                if self.gate.map_due() {
                    self.gate.set_map(self.slot_map().await);
                }
            }
            let slots = to_send.iter().map(|&i| crate::keys::key_slot(&prepared.calls[i].base));
            let (lanes, gates) = self.gate.assign(slots);
            let order: Vec<(usize, usize, Duration)> = to_send
                .into_iter()
                .zip(lanes)
                .map(|(i, lane)| (i, lane, self.sizer.expected(&prepared.calls[i].base, prepared.calls[i].n)))
                .collect();
            let (store, prepared) = (self.clone(), prepared.clone());
            gate::start_in_order(&order, &gates, move |i| {
                let (store, prepared) = (store.clone(), prepared.clone());
                async move {
                    let c = &prepared.calls[i];
                    store.apply_one(&c.base, &c.inv, c.n).await
                }
            })
            .await
        };
        async move {
            let mut answers = answers;
            while let Some(a) = running.next().await {
                answers.push(a);
            }
            answers
        }
        .boxed()
    }

    /// One apply call: its answers, and whether its writes are on enough
    /// replicas. With `redis.min_replicas`, the call and `WAIT` go
    /// together, in one pipeline on the connection of the call's node:
    /// `WAIT` counts what its own connection wrote, and a `WAIT` sent on
    /// its own could reach another connection (redis-rs stands in another
    /// node's for one under repair) and vouch for nothing.
    async fn apply_one(&self, base: &str, inv: &Invocation, n: usize) -> Result<(CallReply, bool), StoreError> {
        // No reload here on NOSCRIPT: `apply_pending` reloads once and resends in order.
        let cmd = inv.cmd(match inv.script {
            Script::Apply => &APPLY.script,
            Script::Team => &TEAM.script,
        });
        let apply_error = |source| {
            StoreError::from_script(base, source, |source| StoreError::Apply { base: base.to_string(), source })
        };
        let (reply, durable) = match self.replicas {
            None => (cmd.query_async::<Vec<redis::Value>>(&mut self.conn.clone()).await.map_err(apply_error)?, true),
            Some((wanted, timeout)) => {
                let mut pipe = redis::pipe();
                pipe.add_command(cmd).add_command(wait_cmd(wanted, timeout));
                let (reply, got): (Vec<redis::Value>, i64) =
                    pipe.query_async(&mut self.conn.clone()).await.map_err(|e| apply_error(unpipelined(e)))?;
                (reply, got >= i64::from(wanted))
            }
        };
        let bad = || StoreError::BadReply { base: base.to_string(), got: reply.len(), expected: n };
        let (codes, moved) = split_reply(&reply).ok_or_else(bad)?;
        let (results, took_us) = decode_reply(&codes, n).ok_or_else(bad)?;
        let moves = match moved {
            Some(blob) => changes::decode(blob, n).ok_or_else(bad)?,
            None => Vec::new(),
        };
        let limit = self.sizer.observe(base, n, took_us);
        if let Some(board) = crate::keys::board_of_base(base) {
            crate::metrics::get().call_events.with_label_values(&[board]).set(limit as i64);
        }
        Ok(((results, moves), durable))
    }

    /// `SCRIPT LOAD` of the write scripts (on a cluster, redis-rs sends it
    /// to every primary).
    pub async fn load_script(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        for lua in [&APPLY, &TEAM] {
            crate::store::script_load(&mut conn, lua).await?;
        }
        Ok(())
    }

    /// A cluster's slot map (`CLUSTER SLOTS`), or `None` when it cannot be read.
    async fn slot_map(&self) -> Option<gate::SlotMap> {
        let mut conn = self.conn.clone();
        match redis::cmd("CLUSTER").arg("SLOTS").query_async::<redis::Value>(&mut conn).await {
            Ok(reply) => gate::SlotMap::parse(&reply),
            Err(e) => {
                debug!(error = %e, "Reading the cluster's slot map failed; the calls' lanes stay as they were.");
                None
            }
        }
    }
}

/// A pipeline's failed command as that command's own error: redis-rs
/// answers it as a pipeline error, whose `code()` is none for a script's
/// own codes (`LOST`, `STALE`), which the writer must tell apart.
fn unpipelined(e: redis::RedisError) -> redis::RedisError {
    if e.code().is_some() {
        return e;
    }
    match e.clone().into_server_errors() {
        Some(items) if !items.is_empty() => redis::RedisError::from(items[0].1.clone()),
        _ => e,
    }
}

/// An apply reply's integers, and the string of rank changes that may end it.
pub(in crate::store) fn split_reply(reply: &[redis::Value]) -> Option<(Vec<i64>, Option<&[u8]>)> {
    let (moved, codes) = match reply.split_last() {
        Some((redis::Value::BulkString(b), rest)) => (Some(b.as_slice()), rest),
        _ => (None, reply),
    };
    let codes =
        codes.iter().map(|v| if let redis::Value::Int(n) = v { Some(*n) } else { None }).collect::<Option<_>>()?;
    Some((codes, moved))
}

/// Records an attempt's answers in `landed`: the first error, if any call failed.
pub(in crate::store) fn record(
    prepared: &Prepared,
    landed: &mut Landed,
    answers: Vec<(usize, CallAnswer)>,
) -> Result<(), StoreError> {
    let mut first_error = None;
    for (i, result) in answers {
        match result {
            Ok((r, durable)) => {
                // A call that had landed keeps its first answers.
                if landed.results[i].is_none() {
                    landed.results[i] = Some(r);
                }
                landed.durable[i] |= durable;
                if !durable && first_error.is_none() {
                    first_error = Some(StoreError::NotReplicated { base: prepared.calls[i].base.clone() });
                }
            }
            Err(e) if landed.results[i].is_none() => {
                // A missing script is the error that says what to do next.
                if first_error.is_none() || e.is_no_script() {
                    first_error = Some(e);
                }
            }
            Err(e) => debug!(error = %e, "A call sent again ahead of a pending one failed; both are sent again."),
        }
    }
    first_error.map_or(Ok(()), Err)
}
