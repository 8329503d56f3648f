//! The duplicate markers against a real redis-server: an event id stays a
//! duplicate for at least one `dedupe_ttl` of Redis's clock and at most
//! two, whichever way that clock moves, and a marker hash grows its
//! buckets as the layout `rankflow::markers` states.

use std::sync::Arc;
use std::time::Duration;

use rankflow::board::{PeriodWrite, WriteOp};
use rankflow::keys;
use rankflow::markers::{self, Growth};
use rankflow::store::{ApplyResult, TagBatch};
use support::apply::{assert_markers_laid_out, growth, item, period_write, store_with_ttl, tag, zscore};
use support::Redis;
use uuid::Uuid;

/// Redis's clock, in seconds.
async fn redis_time(conn: &mut redis::aio::MultiplexedConnection) -> f64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs as f64 + micros as f64 / 1e6
}

/// Sleeps until `at` (Redis seconds) has passed by a margin.
async fn until(conn: &mut redis::aio::MultiplexedConnection, at: f64) {
    let now = redis_time(conn).await;
    tokio::time::sleep(Duration::from_secs_f64((at - now).max(0.0) + 0.1)).await;
}

/// Whether the marker hash `lb:{p}:_seen:<n>` holds event `id`, looked up
/// by the layout `rankflow::markers` states.
async fn marked(conn: &mut redis::aio::MultiplexedConnection, n: u64, id: &Uuid) -> bool {
    let key = keys::dedupe_hash_key("lb:{p}", n);
    let m = markers::marker(id);
    let bucket = growth(conn, &key).await.bucket(&m);
    let blob: Option<Vec<u8>> = redis::cmd("HGET").arg(&key).arg(bucket).query_async(conn).await.unwrap();
    blob.is_some_and(|b| markers::bucket_holds(&b, &m))
}

#[tokio::test]
async fn an_event_id_is_a_duplicate_for_at_least_one_dedupe_ttl_and_at_most_two() {
    // Markers live in one hash per dedupe_ttl of Redis's clock: 2 s here.
    const TTL: u64 = 2;
    let redis = Redis::start();
    let s = store_with_ttl(&redis, TTL, &[]).await;
    let mut conn = redis.conn().await;
    let keys = vec![period_write("p", "all", None)];
    let id = Uuid::from_u128(0xfeed);
    let batch = |offset| vec![tag("lb:{p}", WriteOp::Sum, vec![item(offset, "dana", 1, &id, &keys)])];
    // Start just after a hash begins, so that each step below lands where meant.
    let n = (redis_time(&mut conn).await as u64) / TTL + 1;
    until(&mut conn, (n * TTL) as f64).await;

    assert_eq!(s.apply(&batch(0)).await.unwrap()[0], vec![ApplyResult::Applied]);
    assert!(marked(&mut conn, n, &id).await, "the marker is in hash {n}");
    let expires: i64 =
        redis::cmd("EXPIRETIME").arg(keys::dedupe_hash_key("lb:{p}", n)).query_async(&mut conn).await.unwrap();
    assert_eq!(expires, ((n + 2) * TTL + TTL / 2) as i64, "hash {n} expires half a ttl after hash {} ends", n + 1);

    // In the next hash, the marker is still found: a producer retry.
    until(&mut conn, ((n + 1) * TTL) as f64).await;
    assert_eq!(s.apply(&batch(1)).await.unwrap()[0], vec![ApplyResult::DuplicateEvent]);
    assert!(!marked(&mut conn, n + 1, &id).await, "a duplicate sets no marker");

    // Two hashes on, the window has passed: the retry counts again, and the
    // call unlinks hash n, which no call reads any more.
    until(&mut conn, ((n + 2) * TTL) as f64).await;
    assert_eq!(s.apply(&batch(2)).await.unwrap()[0], vec![ApplyResult::Applied]);
    assert!(marked(&mut conn, n + 2, &id).await);
    let exists: bool =
        redis::cmd("EXISTS").arg(keys::dedupe_hash_key("lb:{p}", n)).query_async(&mut conn).await.unwrap();
    assert!(!exists, "hash {n} is unlinked before it expires");
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "dana").await, Some(2.0));
}

#[tokio::test]
async fn markers_are_found_when_redis_clock_goes_back_a_hash() {
    // A dedupe_ttl so long that the current hash cannot change during the test.
    const TTL: u64 = 1_000_000_000;
    let redis = Redis::start();
    let s = store_with_ttl(&redis, TTL, &[]).await;
    let mut conn = redis.conn().await;
    let keys = vec![period_write("p", "all", None)];
    let n = redis_time(&mut conn).await as u64 / TTL;
    let (early, late) = (Uuid::from_u128(1), Uuid::from_u128(2));
    // A marker in the hash after the current one: set by a node whose clock
    // was ahead (before a failover), or by this one before its clock stepped back.
    let _: () = redis::cmd("HSET")
        .arg(keys::dedupe_hash_key("lb:{p}", n + 1))
        .arg("0")
        .arg(&markers::marker(&early)[..])
        .arg("count")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let batch =
        vec![tag("lb:{p}", WriteOp::Sum, vec![item(0, "erin", 4, &early, &keys), item(1, "erin", 5, &late, &keys)])];
    let r = s.apply(&batch).await.unwrap();
    assert_eq!(r[0], vec![ApplyResult::DuplicateEvent, ApplyResult::Applied]);
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "erin").await, Some(5.0));
    // New markers go on in that later hash, where the next call looks first.
    assert!(marked(&mut conn, n + 1, &late).await);
    assert!(!marked(&mut conn, n, &late).await);
}

#[tokio::test]
async fn a_new_marker_hash_starts_as_large_as_the_last_and_both_are_read() {
    const TTL: u64 = 2;
    let redis = Redis::start();
    let s = store_with_ttl(&redis, TTL, &[]).await;
    let mut conn = redis.conn().await;
    let keys = vec![period_write("p", "all", None)];
    let first: Vec<Uuid> = (1..=5000u128).map(Uuid::from_u128).collect();
    let later: Vec<Uuid> = (5001..=8000u128).map(Uuid::from_u128).collect();
    fn batch<'a>(ids: &'a [Uuid], from: i64, keys: &'a [Arc<PeriodWrite>]) -> Vec<TagBatch<'a>> {
        let items = ids.iter().enumerate().map(|(i, id)| item(from + i as i64, "fay", 1, id, keys)).collect();
        vec![tag("lb:{p}", WriteOp::Sum, items)]
    }
    // Hash n takes the first markers, splitting its buckets as it fills.
    let n = (redis_time(&mut conn).await as u64) / TTL + 1;
    until(&mut conn, (n * TTL) as f64).await;
    assert_eq!(s.apply(&batch(&first, 0, &keys)).await.unwrap(), vec![vec![ApplyResult::Applied; first.len()]]);
    let grown = growth(&mut conn, &keys::dedupe_hash_key("lb:{p}", n)).await;
    assert!(grown.buckets() * markers::LOAD >= first.len() as u64, "{grown:?}");

    // In hash n + 1, the first markers are still found in hash n, and the
    // new ones go to a hash that starts with a power of two of buckets
    // enough for as many markers as hash n holds, so it does not split.
    until(&mut conn, ((n + 1) * TTL) as f64).await;
    let again = s.apply(&batch(&first, 10_000, &keys)).await.unwrap();
    assert_eq!(again, vec![vec![ApplyResult::DuplicateEvent; first.len()]]);
    assert_eq!(s.apply(&batch(&later, 20_000, &keys)).await.unwrap(), vec![vec![ApplyResult::Applied; later.len()]]);
    let mut level = 0;
    while markers::LOAD << level < first.len() as u64 {
        level += 1;
    }
    assert_eq!(growth(&mut conn, &keys::dedupe_hash_key("lb:{p}", n + 1)).await, Growth { level, split: 0 });
    let all: std::collections::BTreeSet<Uuid> = first.iter().chain(&later).copied().collect();
    assert_markers_laid_out(&mut conn, "lb:{p}", &all).await;
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "fay").await, Some(8000.0));
}
