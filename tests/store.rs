//! The apply script against a real redis-server: the atomic step that makes
//! every score count once.

mod support;

use std::time::Duration;

use rankflow::board::WriteOp;
use rankflow::config::RedisSettings;
use rankflow::store::{ApplyItem, ApplyResult, RedisConn, Store, TagBatch};
use support::Redis;
use uuid::Uuid;

async fn store(redis: &Redis) -> Store {
    let settings = RedisSettings {
        url: redis.url(),
        cluster: false,
        key_prefix: "lb".into(),
        dedupe_ttl: Duration::from_secs(60),
    };
    Store::new(RedisConn::connect(&settings).await.unwrap(), settings.dedupe_ttl)
}

fn item<'a>(
    offset: i64,
    member: &'a str,
    score: i64,
    id: &'a Uuid,
    keys: &'a [(String, Option<i64>)],
) -> ApplyItem<'a> {
    ApplyItem { field: "scores:0", offset, member, score, event_id: id, keys }
}

async fn zscore(conn: &mut redis::aio::MultiplexedConnection, key: &str, member: &str) -> Option<f64> {
    redis::cmd("ZSCORE").arg(key).arg(member).query_async(conn).await.unwrap()
}

#[tokio::test]
async fn redelivered_offsets_and_repeated_event_ids_change_nothing() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys = vec![("lb:{p}:d:2026-08-14".to_string(), Some(4_000_000_000)), ("lb:{p}:all".to_string(), None)];
    let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
    let batch = |items| vec![TagBatch { base: "lb:{p}", op: WriteOp::Sum, items }];

    let r = s.apply(&batch(vec![item(10, "alice", 5, &a, &keys), item(11, "alice", -2, &b, &keys)])).await.unwrap();
    assert_eq!(r, vec![vec![ApplyResult::Applied, ApplyResult::Applied]]);
    // The same records again (a crash before the commit): recognised by offset.
    let r = s.apply(&batch(vec![item(10, "alice", 5, &a, &keys), item(11, "alice", -2, &b, &keys)])).await.unwrap();
    assert_eq!(r, vec![vec![ApplyResult::DuplicateOffset, ApplyResult::DuplicateOffset]]);
    // A producer retry of event a at a later offset: recognised by event_id.
    let r = s.apply(&batch(vec![item(12, "alice", 5, &a, &keys)])).await.unwrap();
    assert_eq!(r, vec![vec![ApplyResult::DuplicateEvent]]);
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "alice").await, Some(3.0));
    assert_eq!(zscore(&mut conn, "lb:{p}:d:2026-08-14", "alice").await, Some(3.0));
    let t: i64 = redis::cmd("EXPIRETIME").arg("lb:{p}:d:2026-08-14").query_async(&mut conn).await.unwrap();
    assert_eq!(t, 4_000_000_000);
    let t: i64 = redis::cmd("EXPIRETIME").arg("lb:{p}:all").query_async(&mut conn).await.unwrap();
    assert_eq!(t, -1);
    let last: String = redis::cmd("HGET").arg("lb:{p}:_offsets").arg("scores:0").query_async(&mut conn).await.unwrap();
    assert_eq!(last, "12");
}

#[tokio::test]
async fn a_sum_that_would_leave_the_exact_range_is_refused_whole_and_again_on_redelivery() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys = vec![("lb:{p}:all".to_string(), None)];
    let ids: Vec<Uuid> = (0..4).map(Uuid::from_u128).collect();
    let max = (1i64 << 53) - 1;
    let batch = |items| vec![TagBatch { base: "lb:{p}", op: WriteOp::Sum, items }];
    let r = s
        .apply(&batch(vec![
            item(0, "whale", max - 1, &ids[0], &keys),
            item(1, "whale", 2, &ids[1], &keys),
            item(2, "whale", 1, &ids[2], &keys),
        ]))
        .await
        .unwrap();
    assert_eq!(r[0], vec![ApplyResult::Applied, ApplyResult::Refused(4), ApplyResult::Applied]);
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "whale").await, Some(max as f64));
    // The refused event's marker was not kept: a retry of it is judged again, not a duplicate.
    let r = s.apply(&batch(vec![item(3, "whale", 2, &ids[1], &keys)])).await.unwrap();
    assert_eq!(r[0], vec![ApplyResult::Refused(4)]);
    // A redelivery of the refused record reports the same refusal.
    let r = s.apply(&batch(vec![item(1, "whale", 2, &ids[1], &keys)])).await.unwrap();
    assert_eq!(r[0], vec![ApplyResult::Refused(4)]);
}

#[tokio::test]
async fn best_boards_keep_the_personal_best_in_their_direction() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let hi = vec![("lb:{hi}:all".to_string(), None)];
    let lo = vec![("lb:{lo}:all".to_string(), None)];
    let ids: Vec<Uuid> = (0..6).map(Uuid::from_u128).collect();
    let batches = vec![
        TagBatch {
            base: "lb:{hi}",
            op: WriteOp::Gt,
            items: vec![
                item(0, "bob", 100, &ids[0], &hi),
                item(1, "bob", 90, &ids[1], &hi),
                item(2, "bob", 120, &ids[2], &hi),
            ],
        },
        TagBatch {
            base: "lb:{lo}",
            op: WriteOp::Lt,
            items: vec![
                item(3, "bob", 100, &ids[3], &lo),
                item(4, "bob", 90, &ids[4], &lo),
                item(5, "bob", 120, &ids[5], &lo),
            ],
        },
    ];
    s.apply(&batches).await.unwrap();
    assert_eq!(zscore(&mut conn, "lb:{hi}:all", "bob").await, Some(120.0));
    assert_eq!(zscore(&mut conn, "lb:{lo}:all", "bob").await, Some(90.0));
}

#[tokio::test]
async fn a_lost_script_cache_is_reloaded() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys = vec![("lb:{p}:all".to_string(), None)];
    let id = Uuid::from_u128(9);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.unwrap();
    let r = s
        .apply(&[TagBatch { base: "lb:{p}", op: WriteOp::Sum, items: vec![item(0, "carol", 7, &id, &keys)] }])
        .await
        .unwrap();
    assert_eq!(r[0], vec![ApplyResult::Applied]);
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "carol").await, Some(7.0));
}
