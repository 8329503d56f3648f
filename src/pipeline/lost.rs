//! Redis that lost data: detected at start, before anything is consumed,
//! and while running, at the first offsets recorded after the loss.
//!
//! Before the pipeline stores an offset it records it in Redis, in the
//! consumer group's marker (`keys::deploy_key`: `<topic>:<partition>` ->
//! the offset about to be stored). So in a Redis that kept what it
//! acknowledged, the marker is at or past every offset the group has
//! committed. A Redis that came back empty, or restored from an older
//! snapshot, has a marker behind the commits (or none while commits exist):
//! the scores in between are missing from its boards. The worker then
//! refuses to consume, `/readyz` answers 503 with the reason, the log says
//! what to do, and `rankflow_redis_data_lost` is 1 (alerted on).
//!
//! A Redis that holds rankflow's data but no marker yet (a deployment
//! upgraded from a version without it) gets one from the commits.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{error, info};

use crate::kafka::commit::WorkerConsumer;
use crate::keys;
use crate::metrics;
use crate::retry::retry;
use crate::store::StoreError;

use super::Context;

/// What the group has committed, per `<topic>:<partition>` field (only
/// partitions with a commit).
fn committed(cx: &Context, consumer: &WorkerConsumer) -> Result<HashMap<String, i64>, String> {
    let topics = cx.settings.kafka.topics.iter().chain(&cx.settings.kafka.admin_topics);
    let mut tpl = TopicPartitionList::new();
    for t in topics {
        let md =
            consumer.fetch_metadata(Some(t), Duration::from_secs(10)).map_err(|e| format!("metadata of {t}: {e}"))?;
        for topic in md.topics().iter().filter(|x| x.name() == t) {
            for p in topic.partitions() {
                tpl.add_partition(t, p.id());
            }
        }
    }
    let got =
        consumer.committed_offsets(tpl, Duration::from_secs(10)).map_err(|e| format!("committed offsets: {e}"))?;
    Ok(got
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) if o > 0 => Some((keys::offsets_field(e.topic(), e.partition()), o)),
            _ => None,
        })
        .collect())
}

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

/// Checks Redis against the group's commits before consuming. `true`: go
/// on. `false`: Redis lost data (readiness and the metric say so, and the
/// log says what to do), or shutdown came first; either way consume nothing.
pub async fn check(cx: &Context, consumer: &WorkerConsumer) -> bool {
    let key = keys::deploy_key(cx.router.prefix(), &cx.settings.kafka.group_id);
    let commits = retry("read the group's committed offsets", &cx.cancel, cx.settings.worker.max_backoff, || async {
        tokio::task::block_in_place(|| committed(cx, consumer))
    })
    .await;
    let Some(commits) = commits else { return false };
    let marker = retry("read the deployment marker", &cx.cancel, cx.settings.worker.max_backoff, || async {
        cx.store.marker(&key).await
    })
    .await;
    let Some(marker) = marker else { return false };
    let has_data = !cx.tags.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
    if marker.is_empty() && has_data {
        // rankflow's data without a marker: a version before the marker. Start one from the commits.
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
    let reason = format!(
        "Redis lost data: it has recorded fewer records than the consumer group has committed ({detail}); \
         the boards miss the scores in between, so nothing is consumed"
    );
    refuse(cx, &key, reason, &detail);
    cx.cancel.cancelled().await;
    false
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
    refuse(cx, &key, format!("Redis lost data while the worker ran: it no longer holds offsets this worker recorded ({detail}); the boards miss the scores in between, so nothing more is consumed"), &detail);
    false
}

/// Stops consumption for lost data: readiness, the metric and the log say
/// why and what to do.
fn refuse(cx: &Context, key: &str, reason: String, detail: &str) {
    metrics::get().redis_data_lost.set(1);
    error!(group = %cx.settings.kafka.group_id, %detail, "Redis holds fewer applied records than the group committed: it came back empty, from an older snapshot, or failed over to a replica without the latest writes. \
        Restore Redis from a backup taken after the commits, or rebuild the boards from the topics (rankflow rebuild); \
        to accept the loss and go on, delete the marker key {key} and restart. Nothing is consumed meanwhile.");
    *cx.health.data_lost.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
}

/// Whether consumption stopped for lost data.
pub fn refused(cx: &Context) -> bool {
    cx.health.data_lost.lock().unwrap_or_else(|e| e.into_inner()).is_some()
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
