//! Redis that lost data: refused in the atomic step, and detected at start.
//!
//! Three facts that a Redis which lost data cannot keep:
//! - each board tag's registration (`store::registry`): every script that
//!   writes to a tag first checks it, and a tag that lost it answers `LOST`
//!   with nothing written, whether the call was sent before the loss or
//!   after; the worker then stops consuming on every partition and stores
//!   no offset ([`lost_tag`]);
//! - the consumer group's deployment marker (`keys::deploy_key`:
//!   `<topic>:<partition>` -> the offset about to be stored, recorded before
//!   it is stored): in a Redis that kept what it acknowledged it is at or
//!   past every committed offset, so one behind the commits (or missing
//!   while commits exist) means lost data, at start ([`check`]) or at the
//!   next offsets recorded ([`record`]);
//! - the marker's `registry` field, set once the registry of tags holds a
//!   tag: an empty registry is then a lost one ([`check`]).
//!
//! Lost data stops consumption: `/readyz` answers 503 with the reason, the
//! log says what to do, and `rankflow_redis_data_lost` is 1 (alerted on).
//! What comes next is the operator's: `rankflow rebuild` or
//! `rankflow accept-loss`, then a restart.
//!
//! A Redis that holds rankflow's data but no marker yet (a deployment
//! upgraded from a version without it, or a consumer group new to the
//! deployment) gets one from the group's commits.

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::health::Health;
use crate::kafka::commit::{self, WorkerConsumer};
use crate::keys;
use crate::metrics;
use crate::retry::{retry, retry_unless, Retried};
use crate::store::{maintenance, StoreError};

use super::Context;

/// The partitions whose commit is past what Redis recorded: (field, recorded, committed).
pub fn behind(marker: &HashMap<String, i64>, committed: &HashMap<String, i64>) -> Vec<(String, i64, i64)> {
    let mut out: Vec<(String, i64, i64)> = committed
        .iter()
        .filter_map(|(f, &c)| {
            let m = marker.get(f).copied().unwrap_or(0);
            (m < c).then(|| (f.clone(), m, c))
        })
        .collect();
    out.sort();
    out
}

/// What Redis holds of the deployment at start.
struct Found {
    /// The group's deployment marker.
    marker: HashMap<String, i64>,
    /// The registry of tags.
    registry: Vec<String>,
    /// The tags with an offsets hash (a scan).
    scanned: Vec<String>,
}

async fn found(cx: &Context) -> Result<Found, StoreError> {
    let key = keys::deploy_key(cx.router.prefix(), &cx.settings.kafka.group_id);
    Ok(Found {
        marker: cx.store.marker(&key).await?,
        registry: cx.store.tag_bases(&keys::tags_key(cx.router.prefix())).await?,
        scanned: maintenance::tag_bases(&cx.settings.redis).await.map_err(StoreError::Scan)?,
    })
}

/// Checks Redis against the group's commits before consuming, and loads
/// the tags registered (`Context::tags`). `true`: go on. `false`: Redis
/// lost data (readiness and the metric say so, and the log says what to
/// do), or shutdown came first; either way consume nothing.
pub async fn check(cx: &Context, consumer: &WorkerConsumer) -> bool {
    let key = keys::deploy_key(cx.router.prefix(), &cx.settings.kafka.group_id);
    let topics: Vec<String> = cx.settings.kafka.topics.iter().chain(&cx.settings.kafka.admin_topics).cloned().collect();
    let commits = retry("read the group's committed offsets", &cx.cancel, cx.settings.worker.max_backoff, || async {
        tokio::task::block_in_place(|| commit::committed_fields(consumer, &topics))
    })
    .await;
    let Some(commits) = commits else { return false };
    let found = retry(
        "read the deployment marker and the registry of tags",
        &cx.cancel,
        cx.settings.worker.max_backoff,
        || found(cx),
    )
    .await;
    let Some(Found { marker, registry, scanned }) = found else { return false };
    if marker.get(keys::REGISTRY_FIELD) == Some(&1) && registry.is_empty() {
        let reason = format!(
            "Redis lost data: the registry of board tags ({}) is gone, though the deployment had registered tags; \
             boards on the node that held it may have lost their data too, so nothing is consumed",
            keys::tags_key(cx.router.prefix())
        );
        refuse(cx, reason);
        cx.cancel.cancelled().await;
        return false;
    }
    let has_data = !registry.is_empty() || !scanned.is_empty();
    if !seed_registry(cx, registry, scanned).await {
        return false;
    }
    if !marker.keys().any(|f| f.contains(':')) && has_data {
        // rankflow's data without a marker: a version before the marker, or
        // a group new to the deployment. Start one from the commits.
        let fields: Vec<(String, i64)> = commits.into_iter().collect();
        let fields = &fields;
        let seeded = retry("start the deployment marker", &cx.cancel, cx.settings.worker.max_backoff, || async {
            cx.store.set_marker(&key, fields).await
        })
        .await;
        info!(key = %key, "Started the deployment marker from the group's commits.");
        *cx.recorded.lock().unwrap_or_else(|e| e.into_inner()) = fields.iter().cloned().collect();
        return seeded.is_some();
    }
    let lost = behind(&marker, &commits);
    metrics::get().redis_data_lost.set(i64::from(!lost.is_empty()));
    if lost.is_empty() {
        // What the marker holds now, it must hold from here on.
        *cx.recorded.lock().unwrap_or_else(|e| e.into_inner()) = marker;
        return true;
    }
    let detail =
        lost.iter().map(|(f, m, c)| format!("{f} recorded up to {m}, committed {c}")).collect::<Vec<_>>().join("; ");
    refuse(
        cx,
        format!(
            "Redis lost data: it has recorded fewer records than the consumer group has committed ({detail}); \
             the boards miss the scores in between, so nothing is consumed"
        ),
    );
    cx.cancel.cancelled().await;
    false
}

/// At start: every tag found with data gets its registration where it has
/// none (data written by a version before registrations) and joins the
/// registry; the registry's tags and those are the tags this worker knows
/// (`Context::tags`), and the marker notes that the registry holds tags.
/// `false`: abandoned on shutdown.
async fn seed_registry(cx: &Context, registry: Vec<String>, scanned: Vec<String>) -> bool {
    let tags_key = keys::tags_key(cx.router.prefix());
    let key = keys::deploy_key(cx.router.prefix(), &cx.settings.kafka.group_id);
    let seeded = retry("register the existing board tags", &cx.cancel, cx.settings.worker.max_backoff, || async {
        cx.store.stamp_tags(&scanned).await?;
        cx.store.add_to_registry(&tags_key, &scanned).await?;
        if !registry.is_empty() || !scanned.is_empty() {
            cx.store.set_marker(&key, &[(keys::REGISTRY_FIELD.to_string(), 1)]).await?;
        }
        Ok::<_, StoreError>(())
    })
    .await;
    if seeded.is_none() {
        return false;
    }
    cx.tags.lock().unwrap_or_else(|e| e.into_inner()).extend(registry.into_iter().chain(scanned));
    true
}

/// Records the offsets about to be stored (see the module header), after
/// checking that Redis still holds what this worker recorded before: a
/// Redis that restarted empty or failed over to a replica without the
/// latest writes is caught at the first batch after it came back, not
/// only at the next start. `false`: store nothing (shutdown came first, or
/// Redis lost data: then the worker stops consuming, as at start).
///
/// With `redis.min_replicas`, the marker waits for the replicas too, so
/// that a failover that keeps every acknowledged write keeps the marker.
pub async fn record(cx: &Context, offsets: &[(String, i64)]) -> bool {
    if offsets.is_empty() {
        return true;
    }
    let key = keys::deploy_key(cx.router.prefix(), &cx.settings.kafka.group_id);
    let entries: Vec<(String, Option<i64>, i64)> = {
        let recorded = cx.recorded.lock().unwrap_or_else(|e| e.into_inner());
        offsets.iter().map(|(f, o)| (f.clone(), recorded.get(f).copied(), *o)).collect()
    };
    let answer =
        retry("record offsets in the deployment marker", &cx.cancel, cx.settings.worker.max_backoff, || async {
            let r = cx.store.record_marker(&key, &entries).await;
            if let Err(StoreError::Replicas { .. }) = r {
                metrics::get().replica_wait_failures.inc();
            }
            r
        })
        .await;
    let Some(lost) = answer else { return false };
    if lost.is_empty() {
        let mut recorded = cx.recorded.lock().unwrap_or_else(|e| e.into_inner());
        for (f, o) in offsets {
            let r = recorded.entry(f.clone()).or_insert(*o);
            *r = (*r).max(*o);
        }
        return true;
    }
    let detail = lost
        .iter()
        .map(|(f, found, expected)| match found {
            -1 => format!("{f} recorded up to {expected}, now none"),
            _ => format!("{f} recorded up to {expected}, now {found}"),
        })
        .collect::<Vec<_>>()
        .join("; ");
    refuse(cx, format!("Redis lost data while the worker ran: it no longer holds offsets this worker recorded ({detail}); the boards miss the scores in between, so nothing more is consumed"));
    false
}

/// The reason `/readyz` gives for a tag whose registration is gone (a
/// script answered `LOST`), or whose offsets fell behind what the batch
/// before recorded there.
pub(super) fn lost_tag(error: &StoreError) -> String {
    let what = match error {
        StoreError::Lost { base, detail } => format!("{base}: {detail}"),
        other => other.to_string(),
    };
    format!(
        "Redis lost data while the worker ran: {what}; nothing was written to it, and nothing more is consumed \
         (a board refilled from the middle of the stream would miss every score before)"
    )
}

/// Runs a Redis step as `retry` does, until it succeeds or shutdown begins,
/// except when Redis lost data: that is reported (`Health::lost_data`) and
/// ends it at once. `None`: shutdown, or lost data.
pub async fn retry_unless_lost<T, F, Fut>(
    what: &str,
    cancel: &CancellationToken,
    max_backoff: Duration,
    health: &Health,
    op: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    match retry_unless(what, cancel, max_backoff, op, StoreError::is_lost).await {
        Retried::Done(v) => Some(v),
        Retried::Cancelled => None,
        Retried::Fatal(e) => {
            health.lost_data(lost_tag(&e));
            None
        }
    }
}

/// Stops consumption for lost data: readiness, the metric and the log say
/// why and what to do.
fn refuse(cx: &Context, reason: String) {
    cx.health.lost_data(reason);
}

/// Whether consumption stopped for lost data.
pub fn refused(cx: &Context) -> bool {
    cx.health.is_lost()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_behind_a_commit_or_missing_is_lost_data() {
        let m = |pairs: &[(&str, i64)]| pairs.iter().map(|(f, o)| (f.to_string(), *o)).collect::<HashMap<_, _>>();
        let committed = m(&[("t:0", 100), ("t:1", 50)]);
        assert!(behind(&m(&[("t:0", 100), ("t:1", 60)]), &committed).is_empty());
        assert_eq!(behind(&m(&[("t:0", 99), ("t:1", 60)]), &committed), [("t:0".to_string(), 99, 100)]);
        assert_eq!(behind(&m(&[]), &committed).len(), 2);
    }
}
