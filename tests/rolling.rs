//! A rolling board's refresh against a real redis-server: bounded steps,
//! the new union swapped in whole, and a build that writes, an erasure or a
//! new day meet halfway.

use std::collections::{BTreeMap, BTreeSet};

use rankflow::board::Board;
use rankflow::config::Settings;
use rankflow::keys;
use rankflow::moderation::AdminOp;
use rankflow::schedule::{rolling_keys, Refresh, Step};
use rankflow::score::MAX_EXACT;
use rankflow::store::{AdminCall, RedisConn, Store};
use support::periods::Lcg;
use support::Redis;

const DAY: i64 = 86_400_000;
const BASE: &str = "lb:{p}";

fn settings(redis: &Redis, board: &str) -> Settings {
    let text = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n\
         [redis]\nurl = \"{}\"\n\
         [[board]]\nid = \"p\"\non = [\"m\"]\nperiods = [\"daily\"]\n{board}\n",
        redis.url()
    );
    rankflow::config::load_str(&text, Vec::new()).unwrap()
}

async fn store(settings: &Settings) -> Store {
    Store::new(RedisConn::connect(&settings.redis).await.unwrap(), settings.redis.dedupe_ttl)
}

/// A Redis, a store on it, the board `board` configures, a connection, and now (ms).
async fn setup(board: &str) -> (Redis, Store, Board, redis::aio::MultiplexedConnection, i64) {
    let redis = Redis::start();
    let s = settings(&redis, board);
    let store = store(&s).await;
    let conn = redis.conn().await;
    (redis, store, s.boards[0].clone(), conn, chrono::Utc::now().timestamp_millis())
}

/// The daily keys of the window ending on the day of `now`, today first.
fn day_keys(board: &Board, days: u32, now: i64) -> Vec<String> {
    // After the six keys of the build, day and copy pairs; the tag's offsets hash and the version hash last.
    let k = rolling_keys(board, BASE, "roll", days, now).unwrap();
    k[6..k.len() - 2].iter().step_by(2).cloned().collect()
}

/// Writes `members` into `key` (as the apply script would, registry included).
async fn fill(conn: &mut redis::aio::MultiplexedConnection, key: &str, members: &[(String, i64)]) {
    for chunk in members.chunks(500) {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(key);
        for (m, s) in chunk {
            cmd.arg(*s).arg(m);
        }
        let _: i64 = cmd.query_async(conn).await.unwrap();
    }
    let _: i64 = redis::cmd("SADD").arg(keys::registry_key(BASE)).arg(key).query_async(conn).await.unwrap();
    // The tag registered, as the worker registers it before its first write.
    let _: i64 = redis::cmd("HSET")
        .arg(keys::offsets_key(BASE))
        .arg(keys::REGISTERED_FIELD)
        .arg(1)
        .query_async(conn)
        .await
        .unwrap();
}

async fn zset(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> BTreeMap<String, i64> {
    let v: Vec<(String, f64)> =
        redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query_async(conn).await.unwrap();
    v.into_iter().map(|(m, s)| (m, s as i64)).collect()
}

async fn dense(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> BTreeSet<i64> {
    zset(conn, key).await.into_values().collect()
}

/// Every key of the tag that belongs to a build in progress.
async fn staged(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut out: Vec<String> = redis::cmd("KEYS").arg("lb:{p}:*_roll*").query_async(conn).await.unwrap();
    out.sort();
    out
}

/// Steps until the build ends: the steps taken and the last answer.
async fn run_out(refresh: &Refresh, store: &Store, budget: usize) -> (usize, Step) {
    let mut steps = 0;
    loop {
        steps += 1;
        match refresh.step(store, budget).await.unwrap() {
            Step::More(_) => assert!(steps < 1_000_000, "the build never ends"),
            end => return (steps, end),
        }
    }
}

#[tokio::test]
async fn a_large_union_is_built_in_bounded_steps_and_readers_see_the_old_one_until_the_swap() {
    let (_redis, store, board, mut conn, now) =
        setup("mode = \"sum\"\ndense_rank = true\nrolling = [{ name = \"roll\", days = 3 }]").await;
    let mut rng = Lcg(7);
    let mut union: BTreeMap<String, i64> = BTreeMap::new();
    let mut rows = 0;
    for key in day_keys(&board, 3, now) {
        let members: BTreeMap<String, i64> =
            (0..3000).map(|_| (format!("p{}", rng.next(5000)), 1 + rng.next(500) as i64)).collect();
        for (m, v) in &members {
            *union.entry(m.clone()).or_default() += v;
        }
        rows += members.len();
        fill(&mut conn, &key, &members.into_iter().collect::<Vec<_>>()).await;
    }
    // The union of an earlier refresh, which readers keep seeing meanwhile.
    let old: Vec<(String, i64)> = vec![("old".into(), 9)];
    fill(&mut conn, "lb:{p}:r:roll", &old).await;
    fill(&mut conn, "lb:{p}:_dense:r:roll", &[("9".into(), 9)]).await;

    let refresh = Refresh::new(&board, BASE, "roll", 3, now).unwrap();
    let budget = 200;
    let mut steps = 0;
    let card = loop {
        steps += 1;
        match refresh.step(&store, budget).await.unwrap() {
            Step::More(n) => {
                assert!(n as usize <= 2 * budget, "step {steps} did {n} members' work");
                assert_eq!(zset(&mut conn, "lb:{p}:r:roll").await, old.iter().cloned().collect());
                assert_eq!(dense(&mut conn, "lb:{p}:_dense:r:roll").await, BTreeSet::from([9]));
            }
            Step::Done(card) => break card,
            Step::Inexact => panic!("inexact"),
        }
    };
    // Copying every day, merging two of them and indexing the union: each member handled in a bounded step.
    assert!(steps * 2 * budget >= rows, "{steps} steps for {rows} rows");
    assert_eq!(card as usize, union.len());
    assert_eq!(zset(&mut conn, "lb:{p}:r:roll").await, union);
    assert_eq!(dense(&mut conn, "lb:{p}:_dense:r:roll").await, union.values().copied().collect());
    assert_eq!(staged(&mut conn).await, Vec::<String>::new());
    let registry: BTreeSet<String> =
        redis::cmd("SMEMBERS").arg(keys::registry_key(BASE)).query_async(&mut conn).await.unwrap();
    assert!(registry.iter().all(|k| !k.contains("_roll")), "{registry:?}");
    let ttl: i64 = redis::cmd("TTL").arg("lb:{p}:r:roll").query_async(&mut conn).await.unwrap();
    assert!(ttl > 86_400, "{ttl}");
}

#[tokio::test]
async fn writes_and_an_erasure_during_a_build_are_not_lost_and_the_erased_player_does_not_come_back() {
    let (_redis, store, board, mut conn, now) =
        setup("mode = \"sum\"\nrolling = [{ name = \"roll\", days = 2 }]").await;
    let days = day_keys(&board, 2, now);
    let members: Vec<(String, i64)> = (0..2000).map(|i| (format!("p{i}"), i + 1)).collect();
    for key in &days {
        fill(&mut conn, key, &members).await;
    }
    fill(&mut conn, &days[0], &[("alice".into(), 50)]).await;
    fill(&mut conn, &days[1], &[("alice".into(), 70)]).await;

    let refresh = Refresh::new(&board, BASE, "roll", 2, now).unwrap();
    // Until a staged copy holds alice.
    let copy = format!("lb:{{p}}:{}:1", keys::rolling_build_id("roll"));
    while !zset(&mut conn, &copy).await.contains_key("alice") {
        assert!(matches!(refresh.step(&store, 100).await.unwrap(), Step::More(_)));
    }
    // Halfway through: an erasure, and new points for a player on both days.
    let id = uuid::Uuid::new_v4();
    let call = AdminCall { field: "t:0", offset: 1, event_id: &id, member: "alice", ts_ms: 0, op: &AdminOp::Erase };
    let erased = store.admin(&[(BASE.to_string(), Some(board.clone()))], &call).await.unwrap();
    assert_eq!(erased.len(), 1);
    for key in &days {
        let _: f64 = redis::cmd("ZINCRBY").arg(key).arg(1000).arg("p7").query_async(&mut conn).await.unwrap();
    }
    let (_, end) = run_out(&refresh, &store, 100).await;
    assert!(matches!(end, Step::Done(_)), "{end:?}");
    let built = zset(&mut conn, "lb:{p}:r:roll").await;
    assert!(!built.contains_key("alice"), "the erased player came back");
    let mut keys_with_alice = Vec::new();
    let all: Vec<String> = redis::cmd("KEYS").arg("lb:{p}:*").query_async(&mut conn).await.unwrap();
    for k in all {
        let kind: String = redis::cmd("TYPE").arg(&k).query_async(&mut conn).await.unwrap();
        if kind == "zset" && zset(&mut conn, &k).await.contains_key("alice") {
            keys_with_alice.push(k);
        }
    }
    assert_eq!(keys_with_alice, Vec::<String>::new());
    // Every other member counted once per day; p7's new points at most once per day.
    for (m, v) in &members {
        let got = built[m];
        if m == "p7" {
            assert!([2 * v, 2 * v + 1000, 2 * v + 2000].contains(&got), "p7: {got}");
        } else {
            assert_eq!(got, 2 * v, "{m}");
        }
    }
    // The next refresh has all of it.
    let (_, end) = run_out(&refresh, &store, 100).await;
    assert_eq!(end, Step::Done(members.len() as u64));
    assert_eq!(zset(&mut conn, "lb:{p}:r:roll").await["p7"], 2 * 8 + 2000);
}

#[tokio::test]
async fn best_boards_keep_their_best_k_and_a_build_the_day_overtook_starts_again() {
    let (_redis, store, board, mut conn, now) = setup("mode = \"best\"\norder = \"asc\"\nmax_members = 5\ndense_rank = true\nrolling = [{ name = \"roll\", days = 2 }]",).await;
    let tomorrow = now + DAY;
    let window = day_keys(&board, 2, tomorrow);
    let yesterday = day_keys(&board, 2, now)[1].clone();
    assert_eq!(window[1], day_keys(&board, 2, now)[0]);
    let mut rng = Lcg(3);
    let mut days: Vec<BTreeMap<String, i64>> = Vec::new();
    for key in [&window[0], &window[1], &yesterday] {
        let m: BTreeMap<String, i64> =
            (0..400).map(|_| (format!("p{}", rng.next(600)), rng.next(10_000) as i64)).collect();
        fill(&mut conn, key, &m.clone().into_iter().collect::<Vec<_>>()).await;
        days.push(m);
    }
    // A build started today, then carried on once it is tomorrow: the window moved, so it starts again.
    let today = Refresh::new(&board, BASE, "roll", 2, now).unwrap();
    for _ in 0..4 {
        assert!(matches!(today.step(&store, 50).await.unwrap(), Step::More(_)));
    }
    let (_, end) = run_out(&Refresh::new(&board, BASE, "roll", 2, tomorrow).unwrap(), &store, 50).await;
    assert_eq!(end, Step::Done(5));
    let mut best: BTreeMap<String, i64> = days[0].clone();
    for (m, v) in &days[1] {
        let e = best.entry(m.clone()).or_insert(*v);
        *e = (*e).min(*v);
    }
    let mut ranked: Vec<(String, i64)> = best.into_iter().collect();
    ranked.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    let top: BTreeMap<String, i64> = ranked.into_iter().take(5).collect();
    assert_eq!(zset(&mut conn, "lb:{p}:r:roll").await, top);
    assert_eq!(dense(&mut conn, "lb:{p}:_dense:r:roll").await, top.values().copied().collect());
    assert_eq!(staged(&mut conn).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_sum_is_refused_only_when_a_members_running_sum_leaves_the_exact_range() {
    let (_redis, store, board, mut conn, now) =
        setup("mode = \"sum\"\nrolling = [{ name = \"roll\", days = 2 }]").await;
    let days = day_keys(&board, 2, now);
    let near = MAX_EXACT - 10;
    // Two players each near the edge on another day: every sum is exact.
    fill(&mut conn, &days[0], &[("a".into(), near), ("b".into(), 1)]).await;
    fill(&mut conn, &days[1], &[("b".into(), near - 1)]).await;
    let refresh = Refresh::new(&board, BASE, "roll", 2, now).unwrap();
    assert_eq!(run_out(&refresh, &store, 1).await.1, Step::Done(2));
    let union = BTreeMap::from([("a".to_string(), near), ("b".to_string(), near)]);
    assert_eq!(zset(&mut conn, "lb:{p}:r:roll").await, union);
    // One of them passes it over the two days: refused, and the last union stays.
    fill(&mut conn, &days[1], &[("a".into(), 11)]).await;
    assert_eq!(run_out(&refresh, &store, 1).await.1, Step::Inexact);
    assert_eq!(zset(&mut conn, "lb:{p}:r:roll").await, union);
    assert_eq!(staged(&mut conn).await, Vec::<String>::new());
}
