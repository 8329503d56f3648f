//! Redis that lost data: detected at start, before anything is consumed.
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
        let seeded = retry("start the deployment marker", &cx.cancel, cx.settings.worker.max_backoff, || async {
            cx.store.set_marker(&key, &fields).await
        })
        .await;
        info!(key = %key, "Started the deployment marker from the group's commits.");
        return seeded.is_some();
    }
    let lost = behind(&marker, &commits);
    metrics::get().redis_data_lost.set(i64::from(!lost.is_empty()));
    if lost.is_empty() {
        return true;
    }
    let detail =
        lost.iter().map(|(f, m, c)| format!("{f} recorded up to {m}, committed {c}")).collect::<Vec<_>>().join("; ");
    let reason = format!(
        "Redis lost data: it has recorded fewer records than the consumer group has committed ({detail}); \
         the boards miss the scores in between, so nothing is consumed"
    );
    error!(group = %cx.settings.kafka.group_id, %detail, "Redis holds fewer applied records than the group committed: it came back empty or from an older snapshot. \
        Restore Redis from a backup taken after the commits, or rebuild the boards from the topics (consume with a new group from the earliest retained records); \
        to accept the loss and go on, delete the marker key {key} and restart. Nothing is consumed meanwhile.");
    *cx.health.data_lost.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
    cx.cancel.cancelled().await;
    false
}

/// The offsets about to be stored, recorded first (see the module header).
pub async fn record(cx: &Context, offsets: &[(String, i64)]) -> bool {
    if offsets.is_empty() {
        return true;
    }
    let key = keys::deploy_key(cx.router.prefix(), &cx.settings.kafka.group_id);
    retry("record offsets in the deployment marker", &cx.cancel, cx.settings.worker.max_backoff, || async {
        cx.store.set_marker(&key, offsets).await.map_err(|e: StoreError| e)
    })
    .await
    .is_some()
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
