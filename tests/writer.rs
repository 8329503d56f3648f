//! The writer (`store::Writer`) against a real Redis: batches handed to it
//! all at once reach every tag in the order they were sent, each behind
//! the one before with preconditions, and answer in that order.

use std::sync::Arc;
use std::time::Duration;

use rankflow::board::{PeriodWrite, WriteOp, WriteParams};
use rankflow::store::{ApplyItem, ApplyResult, BatchResults, TagBatch, Writer, WriterSettings, Written};
use support::apply::{period_write, store_with_ttl};
use support::Redis;
use uuid::Uuid;

#[tokio::test]
async fn batches_handed_to_the_writer_at_once_land_in_order_and_answer_in_order() {
    let redis = Redis::start();
    let bases: Vec<String> = (0..4).map(|t| format!("lb:{{t{t}}}")).collect();
    let tags: Vec<&str> = bases.iter().map(String::as_str).collect();
    // Small calls: each batch is several calls per tag, chained.
    let store = store_with_ttl(&redis, 7 * 86_400, &tags).await.with_max_events_per_call(7);
    // Loaded first, as a worker loads it at start: a fresh Redis's NOSCRIPT
    // would send the first batch again behind the ones after it.
    store.load_script().await.unwrap();
    let periods: Vec<Vec<Arc<PeriodWrite>>> =
        (0..4).map(|t| vec![period_write(&format!("t{t}"), "all", None)]).collect();
    let members: Vec<String> = (0..5).map(|m| format!("player-{m}")).collect();
    let ids: Vec<Uuid> = (0..10 * 30u128).map(|i| Uuid::from_u128(i + 1)).collect();
    let params = WriteParams::plain(WriteOp::Sum, 1, (1 << 53) - 1);
    // Every attempt, and those that did not land whole (a call that overtook
    // the one before it answers STALE and is sent again).
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (counted, counted_failed) = (attempts.clone(), failed.clone());
    let writer = Writer::spawn(
        store,
        WriterSettings {
            max_backoff: Duration::from_millis(200),
            cancel: Default::default(),
            observe: Arc::new(move |attempt: &Result<(), _>, _| {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if let Err(e) = attempt {
                    eprintln!("attempt failed: {e}");
                    counted_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }),
        },
    );
    // Ten batches of 30 events on one partition, offsets rising, every event on every tag:
    // a batch that ran ahead of the one before would make that one's events redeliveries.
    let mut answers = Vec::new();
    for b in 0..10 {
        let tags: Vec<TagBatch<'_>> = (0..4)
            .map(|t| TagBatch {
                base: &bases[t],
                params,
                items: (0..30)
                    .map(|e| {
                        let n = b * 30 + e;
                        ApplyItem {
                            field: "scores:0",
                            offset: n as i64,
                            member: &members[e % 5],
                            num: 1,
                            tie: 0,
                            ts: 0,
                            event_id: &ids[n],
                            periods: &periods[t],
                            meta: None,
                            record_ts: 0,
                            values: &[],
                            team: None,
                        }
                    })
                    .collect(),
            })
            .collect();
        let calls = rankflow::store::prepare(&tags, 60, |_| 7);
        answers.push(writer.send(calls, tracing::Span::none()));
    }
    for (b, answer) in answers.into_iter().enumerate() {
        match answer.await {
            Written::Applied(BatchResults { results: r, .. }) => {
                assert_eq!(r.len(), 4, "batch {b}: one answer per tag");
                assert!(r.iter().flatten().all(|a| *a == ApplyResult::Applied), "batch {b}: {r:?}");
                assert!(r.iter().all(|t| t.len() == 30), "batch {b}: every event answered");
            }
            other => panic!("batch {b}: {other:?}"),
        }
    }
    // In order, each batch lands at its first attempt: none ran ahead of the one before.
    assert_eq!(failed.load(std::sync::atomic::Ordering::Relaxed), 0, "a batch overtook the one before it");
    assert_eq!(attempts.load(std::sync::atomic::Ordering::Relaxed), 10, "one attempt per batch");
    let mut conn = redis.conn().await;
    for t in 0..4 {
        let board: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(format!("lb:{{t{t}}}:all"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(board.len(), 5);
        assert!(board.iter().all(|(_, s)| *s == 60.0), "t{t}: {board:?}");
    }
}
