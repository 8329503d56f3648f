//! The apply script against a real redis-server: the atomic step that makes
//! every score count once. (How long a duplicate's marker lasts, and how
//! marker hashes grow, is `markers.rs`.)

use std::collections::{BTreeMap, HashMap};

use std::sync::Arc;

use rankflow::board::{PeriodWrite, WriteOp, WriteParams};
use rankflow::config::RedisSettings;
use rankflow::keys;
use rankflow::moderation::AdminOp;
use rankflow::score::Packing;
use rankflow::store::{AdminCall, ApplyItem, ApplyResult, RedisConn, Store, StoreError, TagBatch};
use support::apply::{assert_markers_laid_out, item, period_write, store_with_ttl, tag, zscore, MAX};
use support::Redis;
use uuid::Uuid;

async fn store(redis: &Redis) -> Store {
    store_with_ttl(redis, 60, &[]).await
}

/// The dense index `key` of a board packed with `shift`, after checking it against its value counts: they
/// count every member of the board once, and each value's count is the
/// number of members holding it.
async fn dense(conn: &mut redis::aio::MultiplexedConnection, key: &str, shift: i64) -> Vec<String> {
    let index: Vec<String> = redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).query_async(conn).await.unwrap();
    let counts = support::value_counts(conn, &key.replace(":_dense:", ":_dcount:")).await;
    let board: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(key.replace(":_dense:", ":"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await
        .unwrap();
    let mut held: HashMap<String, i64> = HashMap::new();
    for (_, stored) in &board {
        *held.entry(format!("{}", (*stored as i64).div_euclid(shift))).or_default() += 1;
    }
    assert_eq!(counts, held, "the value counts of {key} are the board's");
    let card: i64 = redis::cmd("ZCARD").arg(key.replace(":_dense:", ":")).query_async(conn).await.unwrap();
    assert_eq!(counts.values().sum::<i64>(), card, "the value counts of {key} count every member once");
    index
}

#[tokio::test]
async fn redelivered_offsets_and_repeated_event_ids_change_nothing() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys = vec![period_write("p", "d:2026-08-14", Some(4_000_000_000)), period_write("p", "all", None)];
    let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
    let batch = |items| vec![tag("lb:{p}", WriteOp::Sum, items)];

    let r = s.apply(&batch(vec![item(10, "alice", 5, &a, &keys), item(11, "alice", -2, &b, &keys)])).await.unwrap();
    assert_eq!(r, vec![vec![ApplyResult::Applied, ApplyResult::Applied]]);
    // The same records again (a crash before the commit): recognised by offset.
    let r = s.apply(&batch(vec![item(10, "alice", 5, &a, &keys), item(11, "alice", -2, &b, &keys)])).await.unwrap();
    assert_eq!(r, vec![vec![ApplyResult::DuplicateOffset, ApplyResult::DuplicateOffset]]);
    // A producer retry of event a at a later offset: recognised by event_id.
    let r = s.apply(&batch(vec![item(12, "alice", 5, &a, &keys)])).await.unwrap();
    assert_eq!(r, vec![vec![ApplyResult::DuplicateEvent]]);
    // A new event and its retry in the same call: the retry sees the marker
    // the event set.
    let c = Uuid::from_u128(3);
    let r = s.apply(&batch(vec![item(13, "bob", 4, &c, &keys), item(14, "bob", 4, &c, &keys)])).await.unwrap();
    assert_eq!(r, vec![vec![ApplyResult::Applied, ApplyResult::DuplicateEvent]]);
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "bob").await, Some(4.0));
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "alice").await, Some(3.0));
    assert_eq!(zscore(&mut conn, "lb:{p}:d:2026-08-14", "alice").await, Some(3.0));
    let t: i64 = redis::cmd("EXPIRETIME").arg("lb:{p}:d:2026-08-14").query_async(&mut conn).await.unwrap();
    assert_eq!(t, 4_000_000_000);
    let t: i64 = redis::cmd("EXPIRETIME").arg("lb:{p}:_dense:d:2026-08-14").query_async(&mut conn).await.unwrap();
    assert_eq!(t, 4_000_000_000, "the dense index expires with its board");
    let t: i64 = redis::cmd("EXPIRETIME").arg("lb:{p}:all").query_async(&mut conn).await.unwrap();
    assert_eq!(t, -1);
    let last: String = redis::cmd("HGET").arg("lb:{p}:_offsets").arg("scores:0").query_async(&mut conn).await.unwrap();
    assert_eq!(last, "14");
}

#[tokio::test]
async fn a_sum_that_would_leave_the_exact_range_is_refused_whole_and_again_on_redelivery() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys = vec![period_write("p", "all", None)];
    let ids: Vec<Uuid> = (0..4).map(Uuid::from_u128).collect();
    let max = MAX;
    let batch = |items| vec![tag("lb:{p}", WriteOp::Sum, items)];
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
    let hi = vec![period_write("hi", "all", None)];
    let lo = vec![period_write("lo", "all", None)];
    let ids: Vec<Uuid> = (0..6).map(Uuid::from_u128).collect();
    let batches = vec![
        TagBatch {
            base: "lb:{hi}",
            params: WriteParams::plain(WriteOp::Gt, 1, MAX),
            items: vec![
                item(0, "bob", 100, &ids[0], &hi),
                item(1, "bob", 90, &ids[1], &hi),
                item(2, "bob", 120, &ids[2], &hi),
            ],
        },
        TagBatch {
            base: "lb:{lo}",
            params: WriteParams::plain(WriteOp::Lt, 1, MAX),
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
    assert_eq!(dense(&mut conn, "lb:{hi}:_dense:all", 1).await, ["120"]);
    assert_eq!(dense(&mut conn, "lb:{lo}:_dense:all", 1).await, ["90"]);
}

/// `i` with the event's meta.
fn with_meta<'a>(i: ApplyItem<'a>, meta: &'a str) -> ApplyItem<'a> {
    ApplyItem { meta: Some(meta), ..i }
}

async fn hash(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> BTreeMap<String, String> {
    redis::cmd("HGETALL").arg(key).query_async(conn).await.unwrap()
}

#[tokio::test]
async fn metadata_moves_with_the_value_it_explains_and_leaves_with_a_trimmed_member() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let at = chrono::Utc::now().timestamp() + 3600;
    let keys = vec![period_write("m", "d:2026-08-14", Some(at))];
    let (board, meta) = ("lb:{m}:d:2026-08-14", "lb:{m}:_meta:d:2026-08-14");
    let ids: Vec<Uuid> = (0..7).map(Uuid::from_u128).collect();
    let params = WriteParams { meta: true, top_k: 2, ..WriteParams::plain(WriteOp::Gt, 1, MAX) };
    let entries = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    // One call: alice 100 (a1), a tie at 100 (a2: the first keeps it), bob
    // 90 without meta, and carol 80 (c1), whom top-K trimming (2) drops.
    let items = vec![
        with_meta(item(0, "alice", 100, &ids[0], &keys), r#"{"n":"a1"}"#),
        with_meta(item(1, "alice", 100, &ids[1], &keys), r#"{"n":"a2"}"#),
        item(2, "bob", 90, &ids[2], &keys),
        with_meta(item(3, "carol", 80, &ids[3], &keys), r#"{"n":"c1"}"#),
    ];
    s.apply(&[TagBatch { base: "lb:{m}", params, items }]).await.unwrap();
    assert_eq!(hash(&mut conn, meta).await, entries(&[("alice", r#"{"n":"a1"}"#)]));
    let expires: i64 = redis::cmd("EXPIRETIME").arg(meta).query_async(&mut conn).await.unwrap();
    assert_eq!(expires, at, "the meta hash expires with its period");
    // The next call: bob raised with meta b1, alice raised without meta (which
    // clears a1), carol back at 95 with c2 and trimmed again.
    let items = vec![
        with_meta(item(4, "bob", 110, &ids[4], &keys), r#"{"n":"b1"}"#),
        item(5, "alice", 120, &ids[5], &keys),
        with_meta(item(6, "carol", 95, &ids[6], &keys), r#"{"n":"c2"}"#),
    ];
    s.apply(&[TagBatch { base: "lb:{m}", params, items }]).await.unwrap();
    let board_now: Vec<String> = redis::cmd("ZRANGE").arg(board).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    assert_eq!(board_now, ["bob", "alice"]);
    assert_eq!(hash(&mut conn, meta).await, entries(&[("bob", r#"{"n":"b1"}"#)]));
}

#[tokio::test]
async fn a_period_closed_on_demand_refuses_records_produced_at_or_after_its_close_before_it_is_sealed() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys_ = vec![period_write("c", "s:cup", None), period_write("c", "all", None)];
    let ids: Vec<Uuid> = (0..3).map(Uuid::from_u128).collect();
    let params = WriteParams { sealed: true, ..WriteParams::plain(WriteOp::Sum, 1, MAX) };
    // Closed at 1000 on demand (rankflow close), not sealed yet.
    let _: i64 = redis::cmd("HSET")
        .arg("lb:{c}:_sealed")
        .arg(keys::closes_field("lb:{c}:s:cup"))
        .arg(1000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let only_cup = vec![period_write("c", "s:cup", None)];
    let at = |i: usize, record_ts: i64, periods| ApplyItem { record_ts, ..item(i as i64, "ann", 10, &ids[i], periods) };
    let items = vec![at(0, 999, &keys_), at(1, 1000, &keys_), at(2, 1500, &only_cup)];
    let results = s.apply(&[TagBatch { base: "lb:{c}", params, items }]).await.unwrap();
    // Before the close: both periods; at the close: all-time only; only the window: refused period_closed.
    assert_eq!(results[0], [ApplyResult::Applied, ApplyResult::Applied, ApplyResult::Refused(6)]);
    assert_eq!(zscore(&mut conn, "lb:{c}:s:cup", "ann").await, Some(10.0));
    assert_eq!(zscore(&mut conn, "lb:{c}:all", "ann").await, Some(20.0));
}

#[tokio::test]
async fn the_dense_index_holds_exactly_the_distinct_values_as_totals_move() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys = vec![period_write("p", "all", None)];
    let ids: Vec<Uuid> = (0..8).map(Uuid::from_u128).collect();
    // alice 90, bob 100, carol 100; then bob moves to 90 and carol to 95.
    let steps: [(&str, i64); 6] =
        [("alice", 90), ("bob", 100), ("carol", 100), ("bob", -10), ("carol", -5), ("dave", 0)];
    for (n, (member, delta)) in steps.iter().enumerate() {
        s.apply(&[tag("lb:{p}", WriteOp::Sum, vec![item(n as i64, member, *delta, &ids[n], &keys)])]).await.unwrap();
    }
    let mut d = dense(&mut conn, "lb:{p}:_dense:all", 1).await;
    d.sort();
    assert_eq!(d, ["0", "90", "95"]);
    // The same steps in one call: each sees the totals the earlier ones left.
    let keys = vec![period_write("q", "all", None)];
    let ids: Vec<Uuid> = (10..16).map(Uuid::from_u128).collect();
    let items = steps.iter().enumerate().map(|(n, (m, delta))| item(n as i64, m, *delta, &ids[n], &keys)).collect();
    s.apply(&[tag("lb:{q}", WriteOp::Sum, items)]).await.unwrap();
    let mut d = dense(&mut conn, "lb:{q}:_dense:all", 1).await;
    d.sort();
    assert_eq!(d, ["0", "90", "95"]);
    assert_eq!(zscore(&mut conn, "lb:{q}:all", "carol").await, Some(95.0));
    let counts = support::value_counts(&mut conn, "lb:{q}:_dcount:all").await;
    assert_eq!(counts, HashMap::from([("0".into(), 1), ("90".into(), 2), ("95".into(), 1)]));
}

#[tokio::test]
async fn earliest_ties_pack_the_time_and_sums_keep_the_tie_of_their_latest_total() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let p = Packing::earliest(true, 0, 1000, 365 * 86_400_000, Some(1_000_000)).unwrap();
    let keys = vec![period_write("e", "all", None)];
    let ids: Vec<Uuid> = (0..4).map(Uuid::from_u128).collect();
    let it = |off: i64, member: &'static str, delta: i64, ts: i64, id: &'static Uuid| {
        let mut i = item(off, member, delta, id, &keys);
        i.tie = p.tie(ts).unwrap();
        i
    };
    let ids: &'static [Uuid] = Box::leak(ids.into_boxed_slice());
    let batch = TagBatch {
        base: "lb:{e}",
        params: WriteParams::plain(WriteOp::Sum, p.shift(), p.max_value()),
        // bob reaches 100 at t=5s, carol at t=9s (in two steps), alice 90 at t=1s.
        items: vec![
            it(0, "bob", 100, 5_000, &ids[0]),
            it(1, "carol", 60, 2_000, &ids[1]),
            it(2, "carol", 40, 9_000, &ids[2]),
            it(3, "alice", 90, 1_000, &ids[3]),
        ],
    };
    s.apply(&[batch]).await.unwrap();
    let order: Vec<String> =
        redis::cmd("ZRANGE").arg("lb:{e}:all").arg(0).arg(-1).arg("REV").query_async(&mut conn).await.unwrap();
    assert_eq!(order, ["bob", "carol", "alice"]);
    let carol = zscore(&mut conn, "lb:{e}:all", "carol").await.unwrap() as i64;
    assert_eq!(p.decode(carol), 100);
    assert_eq!(carol, p.encode(100, 9_000).unwrap());
    let mut d = dense(&mut conn, "lb:{e}:_dense:all", p.shift()).await;
    d.sort();
    assert_eq!(d, ["100", "90"]);
    // A total past max_score is refused.
    let big = TagBatch {
        base: "lb:{e}",
        params: WriteParams::plain(WriteOp::Sum, p.shift(), p.max_value()),
        items: vec![it(4, "bob", 999_901, 10_000, &ids[0])],
    };
    let fresh = Uuid::from_u128(77);
    let mut big = big;
    big.items[0].event_id = &fresh;
    assert_eq!(s.apply(&[big]).await.unwrap()[0], vec![ApplyResult::Refused(4)]);
}

#[tokio::test]
async fn a_lost_script_cache_is_reloaded() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys = vec![period_write("p", "all", None)];
    let id = Uuid::from_u128(9);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.unwrap();
    let r = s.apply(&[tag("lb:{p}", WriteOp::Sum, vec![item(0, "carol", 7, &id, &keys)])]).await.unwrap();
    assert_eq!(r[0], vec![ApplyResult::Applied]);
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "carol").await, Some(7.0));
}

#[tokio::test]
async fn a_sum_near_the_edge_of_the_exact_range_is_refused_only_when_it_would_leave_it() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys = vec![period_write("g", "d:2026-08-14", None), period_write("g", "all", None)];
    let half = MAX / 2;
    let ids: Vec<Uuid> = (0..5).map(Uuid::from_u128).collect();
    let steps = [
        (half - 5, ApplyResult::Applied),
        (10, ApplyResult::Applied),
        (half, ApplyResult::Refused(4)),
        (-3, ApplyResult::Applied),
    ];
    for (n, (delta, expected)) in steps.iter().enumerate() {
        let r = s
            .apply(&[tag("lb:{g}", WriteOp::Sum, vec![item(n as i64, "whale", *delta, &ids[n], &keys)])])
            .await
            .unwrap();
        assert_eq!(r[0], vec![*expected], "step {n}");
    }
    for key in ["lb:{g}:d:2026-08-14", "lb:{g}:all"] {
        assert_eq!(zscore(&mut conn, key, "whale").await, Some((half + 2) as f64), "{key}");
    }
    assert_eq!(dense(&mut conn, "lb:{g}:_dense:all", 1).await, [(half + 2).to_string()]);
}

#[tokio::test]
async fn a_batch_larger_than_one_read_of_the_script_is_applied_whole() {
    // The script reads its batch a few thousand values at a time: 12,000
    // events on 7,000 members, on two period shapes, with a repeated event id
    // every 50 events, must come out exactly as added up here.
    a_large_batch_is_applied_whole(100_000).await;
}

#[tokio::test]
async fn a_batch_split_over_many_calls_is_applied_as_one() {
    // The same batch in calls of 7 events: repeated ids fall on both sides
    // of a call boundary, and every call waits for the one before it.
    a_large_batch_is_applied_whole(7).await;
}

async fn a_large_batch_is_applied_whole(max_events_per_call: usize) {
    let redis = Redis::start();
    // No script loaded: the first calls find it missing, as after a Redis restart.
    let s = store(&redis).await.with_max_events_per_call(max_events_per_call);
    let mut conn = redis.conn().await;
    let both = vec![period_write("big", "d:2026-08-14", Some(4_000_000_000)), period_write("big", "all", None)];
    let all_only = vec![both[1].clone()];
    let names: Vec<String> = (0..7000).map(|m| format!("player-{m}")).collect();
    let ids: Vec<Uuid> = (0..12_000u128).map(|i| Uuid::from_u128(if i % 50 == 49 { i - 1 } else { i } + 1)).collect();
    let mut items = Vec::new();
    let (mut day, mut all): (HashMap<&str, i64>, HashMap<&str, i64>) = (HashMap::new(), HashMap::new());
    let mut expected = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let member = names[(i * 7919) % names.len()].as_str();
        let num = (i % 17) as i64 - 5;
        let periods = if i % 3 == 0 { &all_only } else { &both };
        items.push(item(i as i64, member, num, id, periods));
        if i % 50 == 49 {
            expected.push(ApplyResult::DuplicateEvent);
            continue;
        }
        expected.push(ApplyResult::Applied);
        *all.entry(member).or_default() += num;
        if i % 3 != 0 {
            *day.entry(member).or_default() += num;
        }
    }
    let r = s.apply(&[tag("lb:{big}", WriteOp::Sum, items)]).await.unwrap();
    assert_eq!(r, vec![expected]);
    for (key, sums) in [("lb:{big}:d:2026-08-14", &day), ("lb:{big}:all", &all)] {
        let card: usize = redis::cmd("ZCARD").arg(key).query_async(&mut conn).await.unwrap();
        assert_eq!(card, sums.len(), "{key}");
        for (member, sum) in sums {
            assert_eq!(zscore(&mut conn, key, member).await, Some(*sum as f64), "{key} {member}");
        }
        let values: std::collections::BTreeSet<i64> = sums.values().copied().collect();
        assert_eq!(dense(&mut conn, &key.replace("{big}:", "{big}:_dense:"), 1).await.len(), values.len(), "{key}");
    }
    let applied: std::collections::BTreeSet<Uuid> = ids.iter().copied().collect();
    assert_markers_laid_out(&mut conn, "lb:{big}", &applied).await;
    // The same events again at later offsets (a producer's retries): every one is known.
    let again: Vec<ApplyItem> =
        ids.iter().enumerate().map(|(i, id)| item(20_000 + i as i64, "x", 1, id, &all_only)).collect();
    let r = s.apply(&[tag("lb:{big}", WriteOp::Sum, again)]).await.unwrap();
    assert_eq!(r, vec![vec![ApplyResult::DuplicateEvent; ids.len()]]);
}

#[tokio::test]
async fn a_batch_sent_behind_one_not_yet_applied_changes_nothing_until_that_one_lands() {
    let redis = Redis::start();
    sent_behind_one_not_yet_applied(&redis, store(&redis).await).await;
}

/// The same with `redis.min_replicas`: each call goes with its `WAIT` in a
/// pipeline, whose failed call must still read as `STALE` or lost data.
#[tokio::test]
async fn with_min_replicas_a_call_sent_behind_one_not_yet_applied_and_lost_data_read_the_same() {
    let redis = Redis::start();
    let _replica = Redis::start_with(&["--replicaof", "127.0.0.1", &redis.port.to_string()]);
    replica_online(&redis).await;
    let s = store(&redis).await.with_min_replicas(1, std::time::Duration::from_secs(5));
    sent_behind_one_not_yet_applied(&redis, s).await;
}

/// Waits until `primary`'s replica has synced (its writes can be waited for).
async fn replica_online(primary: &Redis) {
    let mut conn = primary.conn().await;
    for _ in 0..200 {
        let info: String = redis::cmd("INFO").arg("replication").query_async(&mut conn).await.unwrap();
        if info.contains("state=online") {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the replica never came online");
}

/// With `redis.min_replicas`, a tag's registration is done only once a
/// replica has it: a failover to a replica without it would otherwise make
/// the tag's next write read as lost data though nothing acknowledged was
/// lost.
#[tokio::test]
async fn with_min_replicas_a_registration_waits_for_a_replica() {
    let redis = Redis::start();
    let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &redis.port.to_string()]);
    let s = store(&redis).await.with_min_replicas(1, std::time::Duration::from_millis(300));
    let tags = vec!["lb:{p}".to_string()];
    // Synced first: a registration with the replica up is done (once it acknowledges at all).
    replica_online(&redis).await;
    let mut synced = false;
    for _ in 0..50 {
        if s.register_tags("lb:{.tags}:_bases", &["lb:{q}".to_string()], false).await.is_ok() {
            synced = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(synced, "the replica never acknowledged a registration");
    replica.pause();
    let err = s.register_tags("lb:{.tags}:_bases", &tags, true).await.unwrap_err();
    assert!(matches!(err, StoreError::Replicas { .. }), "{err}");
    replica.resume();
    s.register_tags("lb:{.tags}:_bases", &tags, true).await.unwrap();
}

async fn sent_behind_one_not_yet_applied(redis: &Redis, s: Store) {
    let mut conn = redis.conn().await;
    let keys = vec![period_write("p", "all", None)];
    let ids: Vec<Uuid> = (1..=3).map(Uuid::from_u128).collect();
    let first = vec![tag(
        "lb:{p}",
        WriteOp::Sum,
        vec![item(10, "alice", 5, &ids[0], &keys), item(11, "bob", 1, &ids[1], &keys)],
    )];
    let second = vec![tag("lb:{p}", WriteOp::Sum, vec![item(12, "carol", 7, &ids[2], &keys)])];
    let first = s.prepare(&first);
    let mut second = s.prepare(&second);
    second.after(&first.tails());
    // Registered before its first write, as the worker does.
    s.register_tags("lb:{.tags}:_bases", &first.bases(), false).await.unwrap();

    // The first batch failed on its way (it never reached Redis): the second
    // must not run ahead of it, or offset 12 would make 10 and 11 look
    // redelivered when the first is retried.
    let err = s.apply_prepared(&second).await.unwrap_err();
    assert!(err.to_string().contains("STALE"), "{err}");
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "carol").await, None);
    let markers: Vec<String> = redis::cmd("KEYS").arg("lb:{p}:_seen:*").query_async(&mut conn).await.unwrap();
    assert!(markers.is_empty(), "a refused call sets no marker: {markers:?}");
    let mut offsets: HashMap<String, i64> =
        redis::cmd("HGETALL").arg("lb:{p}:_offsets").query_async(&mut conn).await.unwrap();
    offsets.remove(keys::REGISTERED_FIELD);
    assert!(offsets.is_empty(), "a refused call records no offset: {offsets:?}");

    // Retried in order, both apply, each event once.
    assert_eq!(s.apply_prepared(&first).await.unwrap().results, vec![vec![ApplyResult::Applied; 2]]);
    assert_eq!(s.apply_prepared(&second).await.unwrap().results, vec![vec![ApplyResult::Applied]]);
    for (member, score) in [("alice", 5.0), ("bob", 1.0), ("carol", 7.0)] {
        assert_eq!(zscore(&mut conn, "lb:{p}:all", member).await, Some(score), "{member}");
    }

    // Redis lost its data (a restart without persistence) after the first
    // batch landed: the tag's registration is gone with it, so the call is
    // refused as lost data and writes nothing, with its precondition or
    // without (a board refilled from the middle of the stream would miss
    // every score before).
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let err = s.apply_prepared(&second).await.unwrap_err();
    assert!(matches!(err, StoreError::Lost { .. }), "{err}");
    let unconditional = s.prepare(&[tag("lb:{p}", WriteOp::Sum, vec![item(13, "dana", 2, &ids[0], &keys)])]);
    let err = s.apply_prepared(&unconditional).await.unwrap_err();
    assert!(matches!(err, StoreError::Lost { .. }), "{err}");
    let left: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut conn).await.unwrap();
    assert!(left.is_empty(), "a refused call writes nothing: {left:?}");
}

#[tokio::test]
async fn admin_events_keep_the_value_counts_exact_as_values_gain_and_lose_holders() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let mut conn = redis.conn().await;
    let keys = vec![period_write("v", "all", None)];
    let ids: Vec<Uuid> = (1..4).map(Uuid::from_u128).collect();
    let items = [("alice", 10), ("bob", 20), ("carol", 30)]
        .iter()
        .enumerate()
        .map(|(n, (m, v))| item(n as i64, m, *v, &ids[n], &keys))
        .collect();
    s.apply(&[tag("lb:{v}", WriteOp::Sum, items)]).await.unwrap();
    let index = "lb:{v}:_dense:all";
    // Each admin event moves a value's holders across 1 and 2 (the counts
    // hash keeps only 2 and up); after each, the counts are the board's.
    let steps: Vec<(&str, AdminOp, Vec<&str>)> = vec![
        ("alice", AdminOp::Set { stored: 20, periods: keys.clone() }, vec!["20", "30"]),
        ("carol", AdminOp::Adjust { delta: -10, tie: 0, periods: keys.clone() }, vec!["20"]),
        ("bob", AdminOp::Remove { period: None }, vec!["20"]),
        ("carol", AdminOp::Hide, vec!["20"]),
        ("alice", AdminOp::Hide, vec![]),
        ("carol", AdminOp::Unhide, vec!["20"]),
        ("alice", AdminOp::Unhide, vec!["20"]),
    ];
    for (offset, (member, op, values)) in steps.iter().enumerate() {
        let id = Uuid::from_u128(100 + offset as u128);
        let call = AdminCall { field: "admin:0", offset: offset as i64, event_id: &id, member, ts_ms: 0, op };
        s.admin(&[("lb:{v}".to_string(), None)], &call).await.unwrap();
        let mut d = dense(&mut conn, index, 1).await;
        d.sort();
        assert_eq!(d, *values, "after {} of {member}", op.script_name());
    }
    let counts = support::value_counts(&mut conn, "lb:{v}:_dcount:all").await;
    assert_eq!(counts, HashMap::from([("20".into(), 2)]));
}

#[tokio::test]
async fn batches_sent_two_at_a_time_on_a_cluster_reach_every_tag_in_order() {
    // Each node of a cluster takes two calls at a time, the worker's batches
    // two at a time, each behind the one before with preconditions: on a
    // fresh store (whose first batches read the cluster's slot map) every
    // batch must still reach each tag after the one before it, or its calls
    // fail as STALE. Twelve tags over three primaries, eight fresh stores.
    use futures::StreamExt as _;
    let cluster = support::RedisCluster::start(3);
    let text = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n\
         [redis]\nurl = \"{}\"\ncluster = true\n\
         [[board]]\nid = \"p\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n",
        cluster.url()
    );
    let settings: RedisSettings = rankflow::config::load_str(&text, Vec::new()).unwrap().redis;
    let bases: Vec<String> = (0..12).map(|t| format!("lb:{{t{t}}}")).collect();
    let periods: Vec<Vec<Arc<PeriodWrite>>> =
        (0..12).map(|t| vec![period_write(&format!("t{t}"), "all", None)]).collect();
    let members: Vec<String> = (0..40).map(|m| format!("player-{m}")).collect();
    let ids: Vec<Uuid> = (0..8 * 6 * 40u128).map(|i| Uuid::from_u128(i + 1)).collect();
    let mut expected: HashMap<(usize, usize), i64> = HashMap::new();
    for round in 0..8 {
        let s =
            Store::new(RedisConn::connect(&settings).await.unwrap(), settings.dedupe_ttl).with_max_events_per_call(10);
        // Six batches of 40 events, each event on every tag.
        let batches: Vec<Vec<TagBatch<'_>>> = (0..6)
            .map(|b| {
                (0..12)
                    .map(|t| {
                        let items = (0..40)
                            .map(|e| {
                                let n = (round * 6 + b) * 40 + e;
                                item(n as i64, &members[e], (n % 7) as i64 + 1, &ids[n], &periods[t])
                            })
                            .collect();
                        tag(&bases[t], WriteOp::Sum, items)
                    })
                    .collect()
            })
            .collect();
        for (b, _) in batches.iter().enumerate() {
            for e in 0..40 {
                let n = (round * 6 + b) * 40 + e;
                for t in 0..12 {
                    *expected.entry((t, e)).or_default() += (n % 7) as i64 + 1;
                }
            }
        }
        s.register_tags("lb:{.tags}:_bases", &bases, false).await.unwrap();
        let mut before: Option<rankflow::store::Tails> = None;
        let mut sent = futures::stream::iter(&batches)
            .map(|batch| {
                let mut calls = s.prepare(batch);
                if let Some(tails) = &before {
                    calls.after(tails);
                }
                before = Some(calls.tails());
                let s = &s;
                async move { s.apply_prepared(&calls).await }
            })
            .buffered(2);
        while let Some(r) = sent.next().await {
            let r = r.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(r.results.iter().flatten().all(|a| *a == ApplyResult::Applied), "round {round}: {r:?}");
        }
    }
    let (boards, holding) = cluster.board_keys("lb").await;
    assert_eq!(holding, 3, "the tags are on every primary");
    for t in 0..12 {
        let board = &boards[&format!("lb:{{t{t}}}:all")];
        for e in 0..40 {
            assert_eq!(board.get(&members[e]).copied(), Some(expected[&(t, e)] as f64), "t{t} {}", members[e]);
        }
    }
}
