//! Sending a batch to Redis: grouping its writes by board tag, enqueuing the
//! scheduler jobs its periods need, and handing it to the writer.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::board::Decision;
use crate::health::Health;
use crate::kafka::offsets::BatchOffsets;
use crate::keys;
use crate::metrics;
use crate::retry::retry;
use crate::schedule;
use crate::store::{push_write, Prepared, StoreError, TagBatch, Writer, WriterSettings, Written};

use super::inflight::Results;
use super::lost::{lost_tag, retry_unless_lost};
use super::outcome::Routes;
use super::record::{Decided, Item, Record};
use super::Context;

/// A batch planned for Redis: its records, their offsets, and where each
/// script result goes.
pub struct Planned {
    pub records: Vec<Record>,
    pub offsets: BatchOffsets,
    pub routes: Routes,
}

/// Notes a batch's records: their offsets and per-partition counts, and
/// each partition's offsets field, in the order of `BatchOffsets`'s
/// partition indices.
pub fn note(records: &[Record]) -> (BatchOffsets, Vec<String>) {
    let m = metrics::get();
    m.batch_size.observe(records.len() as f64);
    let mut offsets = BatchOffsets::default();
    let mut fields: Vec<String> = Vec::new();
    let mut consumed: Vec<u64> = Vec::new();
    for r in records {
        let tp = offsets.note(&r.origin.topic, r.origin.partition, r.origin.offset);
        if tp == fields.len() {
            fields.push(keys::offsets_field(&r.origin.topic, r.origin.partition));
            consumed.push(0);
        }
        consumed[tp] += 1;
    }
    // Counted per partition, not per record: one label lookup each.
    for (tp, n) in consumed.iter().enumerate() {
        m.records_consumed.with_label_values(&[offsets.topic_partition(tp).0]).inc_by(*n);
    }
    (offsets, fields)
}

/// Plans a batch for Redis: every write grouped by board tag in record
/// order, the scheduler jobs its periods need sent, and the script calls
/// encoded. `None`: abandoned on shutdown while sending the jobs.
pub async fn prepare(cx: &Context, records: Vec<Record>) -> Option<(Planned, Prepared)> {
    let (offsets, fields) = note(&records);
    let mut tags: Vec<TagBatch<'_>> = Vec::new();
    let mut routes: Routes = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let Item::Event { event, decided, .. } = &r.item else { continue };
        let field = &fields[offsets.index_of(&r.origin.topic, r.origin.partition)];
        for (d, Decided { decision, .. }) in decided.iter().enumerate() {
            let Decision::Write(w) = decision else { continue };
            let t = push_write(&mut tags, w, event, field, r.origin.offset, r.decided_at(event));
            if t == routes.len() {
                routes.push(Vec::new());
            }
            routes[t].push((i, d));
        }
    }
    // The tags in the registry and the jobs first: a tag with data can
    // always be found by an erasure, and a period or rolling board with data
    // always has its job.
    if !register_tags(cx, &tags).await || !enqueue_jobs(cx, &records).await {
        return None;
    }
    let calls = cx.store.prepare(&tags);
    drop(tags);
    Some((Planned { records, offsets, routes }, calls))
}

/// Adds the batch's board tags that this worker has not registered yet to
/// the registry of tags. `false`: abandoned on shutdown.
async fn register_tags(cx: &Context, tags: &[TagBatch<'_>]) -> bool {
    let new: Vec<String> = {
        let known = cx.tags.lock().unwrap_or_else(|e| e.into_inner());
        tags.iter().filter(|t| !known.contains(t.base)).map(|t| t.base.to_string()).collect()
    };
    if new.is_empty() {
        return true;
    }
    let known = !cx.tags.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
    let registry = keys::tags_key(cx.router.prefix());
    let marker = keys::deploy_key(cx.router.prefix(), &cx.settings.kafka.group_id);
    let flag = [(keys::REGISTRY_FIELD.to_string(), 1)];
    let max_backoff = cx.settings.worker.max_backoff;
    let sent = retry_unless_lost("register board tags", &cx.cancel, max_backoff, &cx.health, || async {
        cx.store.register_tags(&registry, &new, known).await?;
        // From now on an empty registry is a lost one (see `lost`).
        cx.store.set_marker(&marker, &flag).await
    })
    .await;
    if sent.is_none() {
        return false;
    }
    cx.tags.lock().unwrap_or_else(|e| e.into_inner()).extend(new);
    true
}

/// Sends the scheduler jobs (seals, rolling refreshes) the batch's periods
/// need and the cache has not sent lately. `false`: abandoned on shutdown.
async fn enqueue_jobs(cx: &Context, records: &[Record]) -> bool {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut jobs = Vec::new();
    {
        let mut cache = cx.jobs.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen = HashSet::new();
        for r in records {
            let Item::Event { decided, .. } = &r.item else { continue };
            for Decided { board, decision, .. } in decided {
                let Decision::Write(w) = decision else { continue };
                let board = &cx.router.boards()[*board];
                if board.close_after().is_none() && board.rolling().is_empty() {
                    continue;
                }
                for (job, due) in schedule::jobs_for(board, &w.base, &w.periods, now_ms, &mut seen) {
                    if let Some(job) = cache.fresh(job) {
                        jobs.push((job, due));
                    }
                }
            }
        }
    }
    if jobs.is_empty() {
        return true;
    }
    let prefix = cx.router.prefix();
    let sent = retry("enqueue scheduled jobs", &cx.cancel, cx.settings.worker.max_backoff, || {
        schedule::enqueue(&cx.store, prefix, &jobs)
    })
    .await;
    if sent.is_none() {
        cx.jobs.lock().unwrap_or_else(|e| e.into_inner()).forget(&jobs);
        return false;
    }
    true
}

/// The pipeline's writer (see `store::Writer`): each attempt to send a
/// batch counted in the metrics and the health's view of Redis.
pub fn writer(cx: &Context) -> Writer {
    let health = cx.health.clone();
    let observe = move |attempt: &Result<(), StoreError>, took: std::time::Duration| {
        let m = metrics::get();
        let up = |health: &Health| {
            m.redis_roundtrip.observe(took.as_secs_f64());
            health.redis_up.store(true, Ordering::Relaxed);
            m.redis_up.set(1);
        };
        match attempt {
            Ok(()) => up(&health),
            Err(StoreError::NotReplicated { .. }) => {
                up(&health);
                m.replica_wait_failures.inc();
            }
            Err(e) if e.is_lost() => up(&health),
            Err(_) => {
                m.redis_errors.with_label_values(&["apply"]).inc();
                health.redis_up.store(false, Ordering::Relaxed);
                m.redis_up.set(0);
            }
        }
    };
    let settings = WriterSettings {
        max_backoff: cx.settings.worker.max_backoff,
        cancel: cx.cancel.clone(),
        observe: Arc::new(observe),
    };
    Writer::spawn(cx.store.clone(), settings)
}

/// Hands a prepared batch to the writer; the future answers its results
/// once it has landed, `None` if it was abandoned on shutdown or Redis lost
/// data (then `Health::lost_data` says so, and nothing of the batch is stored).
pub fn send(cx: &Context, writer: &Writer, calls: Prepared, span: tracing::Span) -> BoxFuture<'static, Results> {
    let written = writer.send(calls, span);
    let health = cx.health.clone();
    async move {
        match written.await {
            Written::Applied(results) => Some(results),
            Written::Lost(e) => {
                health.lost_data(lost_tag(&e));
                None
            }
            Written::Abandoned => None,
        }
    }
    .boxed()
}
