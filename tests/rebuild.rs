//! `rankflow rebuild` while a live worker consumes a continuous stream: a
//! board added after its topic had history (sharded) is backfilled into
//! each of its shards, a damaged board
//! is recomputed, and the swap, made while records keep arriving, loses
//! nothing and counts nothing twice: at the end every board is exactly the
//! model's.

use std::time::{Duration, Instant};

use support::stream::{self, BOARDS};
use support::*;

const PARTITIONS: i32 = 2;

/// The `best` board, which the first worker's config does not have yet.
const BEST: &str = r#"
[[board]]
id = "best"
on = ["match_finished"]
mode = "best"
order = "desc"
periods = ["all_time"]
"#;

fn committed_total(broker: &Broker, group: &str, topic: &str) -> i64 {
    broker.committed(group, topic, PARTITIONS).iter().filter(|o| **o > 0).sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebuild_during_a_live_stream_backfills_and_repairs_exactly() {
    assert!(BOARDS.contains(BEST.trim()), "the BEST block is BOARDS' best board");
    let Stack { redis, broker, topic, dlq } = Stack::start_with(Redis::start(), PARTITIONS).await;
    let s = stream::generate(40_000, 71);
    let (history, live) = s.records.split_at(10_000);

    // History, consumed by a worker whose config has no `best` board yet.
    broker.produce(&topic, history).await;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &BOARDS.replace(BEST.trim(), ""));
    let mut w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(60));
    assert!(w.sigterm(Duration::from_secs(25)).is_some_and(|st| st.success()));

    // `best` is added, sharded three ways; a damaged `points` board (an
    // intruder, a wrong total).
    cfg.boards = BOARDS.replace(BEST.trim(), &format!("{}\nshards = 3", BEST.trim()));
    assert!(cfg.boards.contains("shards = 3"));
    let w = Worker::spawn(&cfg);
    let mut conn = redis.conn().await;
    let all = "lb:{points}:all";
    let victim: String =
        redis::cmd("ZRANGE").arg(all).arg(0).arg(0).query_async::<Vec<String>>(&mut conn).await.unwrap()[0].clone();
    let _: () = redis::cmd("ZADD").arg(all).arg(5).arg("intruder").query_async(&mut conn).await.unwrap();
    let _: f64 = redis::cmd("ZINCRBY").arg(all).arg(1000).arg(&victim).query_async(&mut conn).await.unwrap();

    // The stream goes on (up to thirty seconds: a loaded machine's rebuild
    // took fifteen) while the rebuild runs, and its rest comes at once after.
    let hurry = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producing = broker.produce_paced_until(&topic, live.to_vec(), 200, Duration::from_millis(200), hurry.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let out = run_rankflow(&["rebuild"], &w.config_path).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rebuild failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("rebuilt"), "{stdout}");
    eprintln!("{stdout}");
    assert!(
        !producing.is_finished(),
        "the stream ended before the rebuild swapped (took {:?}): the swap was not made under a live stream",
        started.elapsed()
    );
    hurry.store(true, std::sync::atomic::Ordering::Relaxed);
    producing.await.unwrap();

    // The live worker drains the rest; every board is the model's.
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(120));
    // `best` is in its shards, backfilled: put back together, every board is the model's.
    let shards = board_keys(&mut conn, stream::PREFIX).await.into_keys().filter(|k| k.contains("{best#")).count();
    assert_eq!(shards, 3, "best is sharded three ways");
    s.assert_boards(&mut conn).await;
    let leftovers: Vec<String> = redis::cmd("KEYS").arg("_rebuild:*").query_async(&mut conn).await.unwrap();
    assert!(leftovers.is_empty(), "the rebuild left keys behind: {leftovers:?}");
    assert!(committed_total(&broker, &cfg.group, &topic) > 0);
    drop(w);
}

#[tokio::test(flavor = "multi_thread")]
async fn rebuild_names_an_unknown_board_and_changes_nothing() {
    let Stack { redis, broker, topic, dlq } = Stack::start_with(Redis::start(), 1).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let dir = temp_dir();
    let path = dir.path().join("rankflow.toml");
    std::fs::write(&path, cfg.render()).unwrap();
    let out = run_rankflow(&["rebuild", "--board", "nope"], &path).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--board nope") && err.contains("points"), "{err}");
}

/// The swap script alone, on keys written by hand: it refuses while the
/// live side is ahead on a partition; then it swaps the period boards and
/// their per-period keys, and leaves a sealed period, its snapshot and a
/// rolling board as the live workers made them.
#[tokio::test(flavor = "multi_thread")]
async fn the_swap_waits_for_agreement_and_keeps_what_the_scheduler_owns() {
    let redis = Redis::start();
    let mut c = redis.conn().await;
    let (live, built) = ("lb:{p}", "_rebuild:lb:{p}");
    let cmd = |args: &[&str]| {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd
    };
    for args in [
        // Live: an unsealed board with its dense index, a sealed day, its snapshot, a rolling board.
        &["ZADD", "lb:{p}:all", "5", "stale"][..],
        &["ZADD", "lb:{p}:_dense:all", "0", "5"],
        &["ZADD", "lb:{p}:d:2026-12-01", "7", "sealed-live"],
        &["ZADD", "lb:{p}:d:2026-12-01:final", "7", "sealed-live"],
        &["ZADD", "lb:{p}:r:last7d", "7", "rolling-live"],
        &["SADD", "lb:{p}:_keys", "lb:{p}:all", "lb:{p}:d:2026-12-01", "lb:{p}:d:2026-12-01:final", "lb:{p}:r:last7d"],
        &["HSET", "lb:{p}:_sealed", "lb:{p}:d:2026-12-01", "1"],
        &["HSET", "lb:{p}:_offsets", "t:0", "10", "t:1", "4"],
        // Rebuilt: the boards of every record, one partition behind at first.
        &["ZADD", "_rebuild:lb:{p}:all", "9", "right"],
        &["ZADD", "_rebuild:lb:{p}:_dense:all", "0", "9"],
        &["ZADD", "_rebuild:lb:{p}:d:2026-12-01", "8", "rebuilt-day"],
        &["ZADD", "_rebuild:lb:{p}:d:2026-12-02", "3", "new-day"],
        &[
            "SADD",
            "_rebuild:lb:{p}:_keys",
            "_rebuild:lb:{p}:all",
            "_rebuild:lb:{p}:d:2026-12-01",
            "_rebuild:lb:{p}:d:2026-12-02",
        ],
        &["HSET", "_rebuild:lb:{p}:_offsets", "t:0", "12", "t:1", "3"],
    ] {
        let _: redis::Value = cmd(args).query_async(&mut c).await.unwrap();
    }
    let reply: Vec<redis::Value> =
        rankflow::store::swap_invocation(live, built, 3600, false).invoke_async(&mut c).await.unwrap();
    assert_eq!(reply.len(), 4, "the live side is ahead on t:1: {reply:?}");
    let all: Vec<String> = cmd(&["ZRANGE", "lb:{p}:all", "0", "-1"]).query_async(&mut c).await.unwrap();
    assert_eq!(all, ["stale"], "a refused swap changed the live board");

    let _: i64 = cmd(&["HSET", "_rebuild:lb:{p}:_offsets", "t:1", "4"]).query_async(&mut c).await.unwrap();
    let reply: Vec<i64> =
        rankflow::store::swap_invocation(live, built, 3600, false).invoke_async(&mut c).await.unwrap();
    assert_eq!(reply, [1, 2], "two period keys swapped in");
    let members = |key: &'static str| {
        let mut c = c.clone();
        async move { cmd(&["ZRANGE", key, "0", "-1"]).query_async::<Vec<String>>(&mut c).await.unwrap() }
    };
    assert_eq!(members("lb:{p}:all").await, ["right"]);
    assert_eq!(members("lb:{p}:_dense:all").await, ["9"]);
    assert_eq!(members("lb:{p}:d:2026-12-02").await, ["new-day"]);
    assert_eq!(members("lb:{p}:d:2026-12-01").await, ["sealed-live"], "a sealed period is final");
    assert_eq!(members("lb:{p}:d:2026-12-01:final").await, ["sealed-live"]);
    assert_eq!(members("lb:{p}:r:last7d").await, ["rolling-live"]);
    let offsets: std::collections::HashMap<String, i64> =
        cmd(&["HGETALL", "lb:{p}:_offsets"]).query_async(&mut c).await.unwrap();
    assert_eq!(offsets, [("t:0".to_string(), 12), ("t:1".to_string(), 4)].into_iter().collect());
    let mut registry: Vec<String> = cmd(&["SMEMBERS", "lb:{p}:_keys"]).query_async(&mut c).await.unwrap();
    registry.sort();
    assert_eq!(
        registry,
        ["lb:{p}:all", "lb:{p}:d:2026-12-01", "lb:{p}:d:2026-12-01:final", "lb:{p}:d:2026-12-02", "lb:{p}:r:last7d"]
    );
    // Only the rebuild's own offsets stay (copied, not moved): it reads on
    // after a swap, and its later calls on the tag must find them; the
    // command removes them when it ends.
    let left: Vec<String> = cmd(&["KEYS", "_rebuild:*"]).query_async(&mut c).await.unwrap();
    assert_eq!(left, ["_rebuild:lb:{p}:_offsets"]);
}
