//! Sealed periods and rolling boards through real workers, Apache Kafka and Redis:
//! the seal waits for every partition (a lagging one and an idle one), holds
//! exactly the events produced before the close, happens once with two
//! workers, survives a claim left by a dead worker, and refuses late events;
//! rolling boards equal the union of their days; an erasure reaches sealed
//! and rolling keys.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::periods::*;
use support::*;

fn record(
    kind: &str,
    player: &str,
    score: i64,
    ts: i64,
    record_ts: i64,
    attrs: Value,
) -> (String, Vec<u8>, Option<i64>) {
    event_record(kind, player, score, ts, record_ts, Some(attrs))
}

/// A meta hash: member -> meta.
async fn metas(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> BTreeMap<String, Value> {
    let raw: HashMap<String, String> = redis::cmd("HGETALL").arg(key).query_async(conn).await.unwrap();
    raw.into_iter().map(|(m, v)| (m, serde_json::from_str(&v).unwrap())).collect()
}

/// The scheduler's keys, for failure messages: due and claimed jobs, watermarks.
fn sched_state(url: &str) -> String {
    let mut out = String::new();
    for args in [
        ["ZRANGE", "lb:{.sched}:due", "0", "-1", "WITHSCORES"],
        ["ZRANGE", "lb:{.sched}:lease", "0", "-1", "WITHSCORES"],
        ["HGETALL", "lb:{.sched}:wm", "", "", ""],
    ] {
        let o = std::process::Command::new("redis-cli")
            .arg("-u")
            .arg(url)
            .args(args.iter().filter(|a| !a.is_empty()))
            .output()
            .unwrap();
        out.push_str(&format!("{}: {}\n", args[..2].join(" "), String::from_utf8_lossy(&o.stdout).replace('\n', " ")));
    }
    out
}

/// The sealed boards: an hourly sum (`hr`) and an hourly ascending best
/// split by track (`fast`), both closing 10 minutes after the hour.
fn hourly_boards(sealed: &str) -> String {
    format!(
        r#"
[sealing]
topic = "{sealed}"
top = 5
idle_grace = "1s"
check_interval = "100ms"
lease = "3s"

[[board]]
id = "hr"
on = ["match"]
mode = "sum"
periods = ["hourly"]
close_after = "10m"

[[board]]
id = "fast"
on = ["lap"]
mode = "best"
order = "asc"
periods = ["hourly"]
close_after = "10m"
split_by = "track"
"#
    )
}

/// What each sealed board holds: (tag, hour id) -> member -> value.
type SealedModel = HashMap<(String, String), BTreeMap<String, i64>>;

/// When an hour starting at `h` closes (`close_after = "10m"`).
fn close_of(h: i64) -> i64 {
    h + HOUR + 600_000
}

/// The records of partitions 0 and 1 over hours `h1` and `h2`, each in
/// record-time order, and the model of what each sealed board holds.
fn partitions(h1: i64, h2: i64) -> (SealedModel, Vec<Record>, Vec<Record>) {
    let mut model = SealedModel::new();
    let mut rng = Lcg(7);
    // Partition 1: a long backlog of events produced before the close.
    let mut p1 = Vec::new();
    for i in 0..12_000 {
        let h = if i % 2 == 0 { h1 } else { h2 };
        let ts = h + rng.next(HOUR as u64) as i64;
        let player = format!("p{}", rng.next(40));
        let score = 1 + rng.next(100) as i64;
        *model.entry(("hr".into(), hour_id(h))).or_default().entry(player.clone()).or_default() += score;
        // Produced up to a minute after the event, always before the close.
        p1.push(record("match", &player, score, ts, ts + rng.next(60_000) as i64, json!({})));
    }
    // Partition 0: a few events of both boards, then events produced after the close.
    let mut p0 = Vec::new();
    for _ in 0..300 {
        let h = if rng.next(2) == 0 { h1 } else { h2 };
        let ts = h + rng.next(HOUR as u64) as i64;
        let player = format!("p{}", rng.next(40));
        if rng.next(2) == 0 {
            let score = 1 + rng.next(100) as i64;
            *model.entry(("hr".into(), hour_id(h))).or_default().entry(player.clone()).or_default() += score;
            p0.push(record("match", &player, score, ts, ts + 1000, json!({})));
        } else {
            let track = if rng.next(2) == 0 { "monza" } else { "spa" };
            let ms = 60_000 + rng.next(30_000) as i64;
            let best = model.entry((format!("fast:{track}"), hour_id(h))).or_default();
            let e = best.entry(player.clone()).or_insert(ms);
            *e = (*e).min(ms);
            p0.push(record("lap", &player, ms, ts, ts + 1000, json!({ "track": track })));
        }
    }
    p0.push(record("match", "late", 1000, h2 + 10, close_of(h2), json!({})));
    p0.push(record("lap", "late", 1, h1 + 10, close_of(h1) + 5, json!({ "track": "monza" })));
    // A producer's clock moves forward: each partition is in record-time order.
    p0.sort_by_key(|r| r.2);
    p1.sort_by_key(|r| r.2);
    (model, p0, p1)
}

/// Each sealed period published once, with its top 5 in board order and
/// its total as `model` holds them.
fn published_once_with_their_top(published: &[rdkafka::message::OwnedMessage], model: &SealedModel) {
    let periods = model.len() as i64;
    assert_eq!(published.len() as i64, periods, "one record per sealed period, even with two workers");
    for m in published {
        let v: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        let tag = match v["split"].as_str() {
            Some(s) => format!("{}:{s}", v["board"].as_str().unwrap()),
            None => v["board"].as_str().unwrap().to_string(),
        };
        let expected = &model[&(tag.clone(), v["period"].as_str().unwrap().to_string())];
        let mut order: Vec<(&String, &i64)> = expected.iter().collect();
        if tag == "hr" {
            // Redis's order for desc boards: score descending, then member descending.
            order.sort_by(|a, b| b.1.cmp(a.1).then(b.0.cmp(a.0)));
        } else {
            order.sort_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)));
        }
        let top: Vec<Value> = order
            .iter()
            .take(5)
            .enumerate()
            .map(|(i, (p, s))| json!({"rank": i + 1, "player_id": p, "score": s}))
            .collect();
        assert_eq!(v["entries"], Value::Array(top), "{v}");
        assert_eq!(v["total"], json!(expected.len()));
        let key = String::from_utf8_lossy(m.key().unwrap()).into_owned();
        assert_eq!(key, format!("{tag}|{}", v["period"].as_str().unwrap()));
    }
    let mut keys: Vec<&[u8]> = published.iter().map(|m| m.key().unwrap()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len() as i64, periods, "no period published twice");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_seal_waits_for_every_partition_holds_exactly_the_events_before_the_close_and_happens_once() {
    let Stack { redis, broker, topic, dlq } = Stack::start(3).await;
    let sealed = broker.sealed_topic().await;
    let now = chrono::Utc::now().timestamp_millis();
    // Two closed hours: h1 closed about three hours ago, h2 about two.
    let h1 = now - now.rem_euclid(HOUR) - 4 * HOUR;
    let h2 = h1 + HOUR;
    let boards = hourly_boards(&sealed);

    let (model, p0, p1) = partitions(h1, h2);
    broker.produce_to(&topic, 0, &p0).await;
    broker.produce_to(&topic, 1, &p1).await;
    // Partition 2 stays empty: idle.

    // A claim left by a worker that died mid-job: it lapses, and the job runs.
    let mut conn = redis.conn().await;
    let dead_claim = format!("seal|lb:{{hr}}|{}", hour_id(h1));
    let _: i64 = redis::cmd("ZADD")
        .arg("lb:{.sched}:lease")
        .arg(now + 4000)
        .arg(&dead_claim)
        .query_async(&mut conn)
        .await
        .unwrap();

    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &boards);
    cfg.worker_section = "batch_size = 50\nshutdown_timeout = \"20s\"\nmax_backoff = \"1s\"\n".into();
    let w1 = Worker::spawn(&cfg);
    let w2 = Worker::spawn_with_port(&cfg, free_port());
    let url = redis.url();
    let logs = || format!("worker 1:\n{}\nworker 2:\n{}\n{}", w1.log(), w2.log(), sched_state(&url));
    let periods = model.len() as i64;
    assert_eq!(periods, 6, "hr and two tracks of fast, in two hours each");
    wait_records(&broker, &sealed, periods, Duration::from_secs(120), &logs);
    broker.wait_committed_to_end(&cfg.group, &topic, 3, Duration::from_secs(60));

    // Every sealed board holds exactly the events produced before its close.
    let dead_count: i64 = broker.log_end(&dlq, 1).iter().sum();
    for ((tag, hour), expected) in &model {
        let live = format!("lb:{{{tag}}}:{hour}");
        assert_eq!(
            &zset_values(&mut conn, &format!("{live}:final")).await,
            expected,
            "{live}:final ({dead_count} dead letters)\n{}",
            logs()
        );
        assert_eq!(&zset_values(&mut conn, &live).await, expected, "{live} is frozen with its seal");
        let marked: bool =
            redis::cmd("HEXISTS").arg(format!("lb:{{{tag}}}:_sealed")).arg(&live).query_async(&mut conn).await.unwrap();
        assert!(marked, "{live} is recorded as sealed");
    }
    std::thread::sleep(Duration::from_secs(2));
    published_once_with_their_top(&broker.read_all(&sealed, 1), &model);
    // The workers' seal counters add up to one seal per period.
    let mut seals = 0.0;
    for port in [w1.http_port, w2.http_port] {
        let (_, body) = http_get(port, "/metrics").await;
        seals += body
            .lines()
            .filter(|l| l.starts_with("rankflow_periods_sealed_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum::<f64>();
    }
    assert_eq!(seals as i64, periods, "each period sealed once across both workers");
    let (status, body) =
        http_get(w1.http_port, &format!("/v1/boards/hr/top?period={}:final&limit=3", hour_id(h2))).await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["period"], json!(format!("{}:final", hour_id(h2))));
    assert_eq!(body["total"], json!(model[&("hr".to_string(), hour_id(h2))].len()));
    // Cursors page a sealed period too, and carry it: the pages of 3 make
    // up the whole sealed board.
    let sealed = format!("{}:final", hour_id(h2));
    let (_, all) = http_get(w1.http_port, &format!("/v1/boards/hr/top?period={sealed}&limit=1000")).await;
    let all: Value = serde_json::from_str(&all).unwrap();
    let mut paged = body["entries"].as_array().unwrap().clone();
    let mut page = body.clone();
    while let Some(next) = page.get("next_cursor").and_then(Value::as_str) {
        let (status, text) = http_get(w1.http_port, &format!("/v1/boards/hr/top?limit=3&cursor={next}")).await;
        assert_eq!(status, 200, "{text}");
        page = serde_json::from_str(&text).unwrap();
        assert_eq!(page["period"], json!(sealed));
        paged.extend(page["entries"].as_array().unwrap().iter().cloned());
    }
    assert!(paged.len() > 3, "the sealed board fits one page of 3");
    assert_eq!(paged, *all["entries"].as_array().unwrap());

    // Produced after the close: rejected. Produced before it but arriving
    // after the seal: rejected too, and the sealed board does not move.
    broker.produce_to(&topic, 2, &[record("match", "straggler", 5, h1 + 20, close_of(h1) - 1, json!({}))]).await;
    broker.wait_committed_to_end(&cfg.group, &topic, 3, Duration::from_secs(60));
    let dead = broker.read_all(&dlq, 1);
    let reasons: Vec<(String, Option<String>)> = dead
        .iter()
        .map(|m| {
            let v: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            (v["player_id"].as_str().unwrap().to_string(), header(m, "rankflow.reason"))
        })
        .collect();
    let want = |p: &str| (p.to_string(), Some("period_closed".to_string()));
    assert_eq!(reasons, vec![want("late"), want("late"), want("straggler")]);
    let live = format!("lb:{{hr}}:{}", hour_id(h1));
    assert_eq!(&zset_values(&mut conn, &live).await, &model[&("hr".to_string(), hour_id(h1))]);
    // Nothing is left to do: no due job, no claim.
    let due: i64 = redis::cmd("ZCARD").arg("lb:{.sched}:due").query_async(&mut conn).await.unwrap();
    let leased: i64 = redis::cmd("ZCARD").arg("lb:{.sched}:lease").query_async(&mut conn).await.unwrap();
    assert_eq!((due, leased), (0, 0), "{}", logs());
}

/// Rolling boards over three days (a sum with metadata, a top-3 best with
/// metadata) in `zone`, and an hourly board that seals.
fn rolling_boards(sealed: &str, zone: &str) -> String {
    format!(
        r#"
[sealing]
topic = "{sealed}"
idle_grace = "1s"
check_interval = "100ms"

[[board]]
id = "pts"
on = ["match"]
mode = "sum"
periods = ["daily"]
timezone = "{zone}"
rolling = [{{ name = "last3d", days = 3, refresh = "1s" }}]
meta = true

[[board]]
id = "hi"
on = ["match"]
mode = "best"
periods = ["daily"]
timezone = "{zone}"
max_members = 3
rolling = [{{ name = "last3d", days = 3, refresh = "1s" }}]
meta = true

[[board]]
id = "sess"
on = ["session"]
mode = "sum"
periods = ["hourly"]
close_after = "10m"
meta = true
"#
    )
}

/// The union's metadata over the window's days (`d` < 3), alice's being
/// `alice`: the sum's from the newest day a player is on; the best's from
/// the day with the best value, the older day on a tie.
fn union_metas(
    last_meta: &BTreeMap<(i64, String), Value>,
    best_meta: &BTreeMap<(i64, String), (i64, Value)>,
    alice: &Value,
) -> (BTreeMap<String, Value>, BTreeMap<String, (i64, Value)>) {
    let mut sum_meta: BTreeMap<String, Value> = BTreeMap::from([("alice".to_string(), alice.clone())]);
    let mut max_meta: BTreeMap<String, (i64, Value)> = BTreeMap::from([("alice".to_string(), (5000, alice.clone()))]);
    for ((d, player), meta) in last_meta {
        if *d < 3 && player != "alice" {
            sum_meta.entry(player.clone()).or_insert_with(|| meta.clone());
        }
    }
    for ((d, player), (best, meta)) in best_meta {
        if *d < 3 && player != "alice" {
            let m = max_meta.entry(player.clone()).or_insert((*best, meta.clone()));
            if *best >= m.0 {
                *m = (*best, meta.clone());
            }
        }
    }
    (sum_meta, max_meta)
}

/// The rolling board reads like a period: a player with dense ranks from
/// its own index, a top with dense ranks, cursors, friends and what-if
/// ranks; an unknown rolling board is a 400 naming the period.
async fn rolling_reads_like_a_period(
    w: &Worker,
    sum3: &BTreeMap<String, i64>,
    alice: &Value,
    top3_meta: &BTreeMap<String, Value>,
) {
    let (status, body) = w.http_get("/v1/boards/pts/players/alice?period=last3d").await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["score"], json!(5000));
    assert_eq!(&body["meta"], alice);
    let better = sum3.values().filter(|&&v| v > 5000).count();
    assert_eq!(body["rank"]["competition"], json!(better + 1));
    let (status, body) = w.http_get("/v1/boards/hi/top?period=r:last3d&rank=dense").await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["total"], json!(3));
    let (status, body) = w.http_get("/v1/boards/hi/top?period=r:last9d").await;
    assert_eq!((status, body.contains("period")), (400, true), "{body}");
    // Cursors, friends and what-if ranks read a rolling board like a period.
    let (_, all) = w.http_get("/v1/boards/hi/top?period=r:last3d&limit=10").await;
    let all: Value = serde_json::from_str(&all).unwrap();
    let (_, first) = w.http_get("/v1/boards/hi/top?period=r:last3d&limit=1").await;
    let mut page: Value = serde_json::from_str(&first).unwrap();
    let mut paged = page["entries"].as_array().unwrap().clone();
    while let Some(next) = page.get("next_cursor").and_then(Value::as_str) {
        page = serde_json::from_str(&w.http_get(&format!("/v1/boards/hi/top?limit=1&cursor={next}")).await.1).unwrap();
        assert_eq!(page["period"], json!("r:last3d"));
        paged.extend(page["entries"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(paged, *all["entries"].as_array().unwrap());
    assert_eq!(paged.len(), 3);
    assert!(paged.iter().all(|e| e["meta"] == top3_meta[e["player_id"].as_str().unwrap()]), "{paged:?}");
    let (status, set) = http_post(
        w.http_port,
        "/v1/boards/pts/players?period=last3d&rank=competition",
        r#"{"players": ["nobody", "alice"]}"#,
    )
    .await;
    assert_eq!(status, 200, "{set}");
    let set: Value = serde_json::from_str(&set).unwrap();
    assert_eq!(set["entries"][0]["rank"], json!(better + 1));
    assert_eq!(set["not_found"], json!(["nobody"]));
    let (_, what_if) = w.http_get("/v1/boards/pts/rank-of?period=last3d&score=5000").await;
    let what_if: Value = serde_json::from_str(&what_if).unwrap();
    assert_eq!(what_if["rank"]["competition"], json!(better + 1));
    assert_eq!(what_if["rank"]["ordinal"], json!(sum3.values().filter(|&&v| v >= 5000).count() + 1));
}

/// Top-K trimming keeps each day's metadata of board `hi` (top 3, four
/// days) to the members it keeps.
async fn top_k_days_keep_only_their_members_meta(conn: &mut redis::aio::MultiplexedConnection) {
    let days: Vec<String> = redis::cmd("KEYS").arg("lb:{hi}:d:*").query_async(conn).await.unwrap();
    assert_eq!(days.len(), 4, "{days:?}");
    for day in &days {
        let kept: Vec<String> = zset_values(conn, day).await.into_keys().collect();
        let with_meta: Vec<String> = metas(conn, &day.replace(":d:", ":_meta:d:")).await.into_keys().collect();
        assert_eq!((kept.len(), &with_meta), (3, &kept), "{day}");
    }
}

/// The keys of `keys` (sorted sets and hashes) that hold `member`.
async fn holding(conn: &mut redis::aio::MultiplexedConnection, keys: &[String], member: &str) -> Vec<String> {
    let mut traces = Vec::new();
    for k in keys {
        let kind: String = redis::cmd("TYPE").arg(k).query_async(conn).await.unwrap();
        let found = match kind.as_str() {
            "zset" => redis::cmd("ZSCORE").arg(k).arg(member).query_async::<Option<f64>>(conn).await.unwrap().is_some(),
            "hash" => redis::cmd("HEXISTS").arg(k).arg(member).query_async::<bool>(conn).await.unwrap(),
            _ => false,
        };
        if found {
            traces.push(k.clone());
        }
    }
    traces
}

#[tokio::test(flavor = "multi_thread")]
async fn rolling_boards_equal_the_union_of_their_days_with_their_metadata_and_an_erasure_reaches_rolling_and_sealed_keys(
) {
    let stack = Stack::start(2).await;
    let admin = stack.admin_topic().await;
    let Stack { redis, broker, topic, dlq } = stack;
    let sealed = broker.sealed_topic().await;
    let now = chrono::Utc::now().timestamp_millis();
    let (zone, offset) = noon_zone(now);
    let h = now - now.rem_euclid(HOUR) - 3 * HOUR;
    let boards = rolling_boards(&sealed, &zone);
    // Events on today, the two days before, and the day before those (outside the window).
    let mut rng = Lcg(11);
    let mut sum3: BTreeMap<String, i64> = BTreeMap::new();
    let mut max3: BTreeMap<String, i64> = BTreeMap::new();
    // Metadata, per day d and player: the day's last event (sum) and the
    // first event that reached the day's best (best), with that best.
    let mut last_meta: BTreeMap<(i64, String), Value> = BTreeMap::new();
    let mut best_meta: BTreeMap<(i64, String), (i64, Value)> = BTreeMap::new();
    let mut n = 0;
    let mut records = Vec::new();
    for d in 0..4 {
        let day_start = {
            let local = now + offset;
            local - local.rem_euclid(DAY) - offset - d * DAY
        };
        for _ in 0..200 {
            let player = format!("p{}", rng.next(12));
            let score = 1 + rng.next(1000) as i64;
            let ts =
                if d == 0 { now - 1000 - rng.next(3_600_000) as i64 } else { day_start + rng.next(DAY as u64) as i64 };
            if d < 3 {
                *sum3.entry(player.clone()).or_default() += score;
                let m = max3.entry(player.clone()).or_insert(score);
                *m = (*m).max(score);
            }
            n += 1;
            let meta = json!({ "n": n.to_string() });
            // One player's records share a partition (keyed by player), so they apply in this order.
            last_meta.insert((d, player.clone()), meta.clone());
            let best = best_meta.entry((d, player.clone())).or_insert((score, meta.clone()));
            if score > best.0 {
                *best = (score, meta.clone());
            }
            records.push(with_meta(record("match", &player, score, ts, now, json!({})), meta));
        }
    }
    // alice: on the rolling boards, and in an hour that gets sealed.
    let alice = json!({ "name": "Alice" });
    records.push(with_meta(record("match", "alice", 5000, h + 1, now, json!({})), alice.clone()));
    records.push(with_meta(record("session", "alice", 5000, h + 1, h + 2, json!({})), json!({ "seat": "7" })));
    sum3.insert("alice".into(), 5000);
    max3.insert("alice".into(), 5000);
    let (sum_meta, max_meta) = union_metas(&last_meta, &best_meta, &alice);
    broker.produce(&topic, &records).await;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &boards);
    cfg.admin_topics = vec![admin.clone()];
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 2, Duration::from_secs(60));
    let mut conn = redis.conn().await;

    // The union of the days, recomputed on the scheduler.
    let mut top3: Vec<(&String, &i64)> = max3.iter().collect();
    top3.sort_by(|a, b| b.1.cmp(a.1).then(b.0.cmp(a.0)));
    let top3: BTreeMap<String, i64> = top3.into_iter().take(3).map(|(p, s)| (p.clone(), *s)).collect();
    let top3_meta: BTreeMap<String, Value> = top3.keys().map(|p| (p.clone(), max_meta[p].1.clone())).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (a, b) =
            (zset_values(&mut conn, "lb:{pts}:r:last3d").await, zset_values(&mut conn, "lb:{hi}:r:last3d").await);
        let (am, bm) =
            (metas(&mut conn, "lb:{pts}:_meta:r:last3d").await, metas(&mut conn, "lb:{hi}:_meta:r:last3d").await);
        if a == sum3 && b == top3 && am == sum_meta && bm == top3_meta {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rolling boards\n{a:?}\n{b:?}\nexpected\n{sum3:?}\n{top3:?}\nmetas\n{am:?}\n{bm:?}\nexpected\n{sum_meta:?}\n{top3_meta:?}\n{}",
            w.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    top_k_days_keep_only_their_members_meta(&mut conn).await;
    rolling_reads_like_a_period(&w, &sum3, &alice, &top3_meta).await;

    // The hour alice played in is sealed.
    wait_records(&broker, &sealed, 1, Duration::from_secs(60), &|| w.log());
    let final_key = format!("lb:{{sess}}:{}:final", hour_id(h));
    assert_eq!(zset_values(&mut conn, &final_key).await, BTreeMap::from([("alice".to_string(), 5000)]));
    // With its metadata: in the snapshot, its reads and the published top.
    let seat = json!({ "seat": "7" });
    let final_meta = format!("lb:{{sess}}:_meta:{}:final", hour_id(h));
    assert_eq!(metas(&mut conn, &final_meta).await, BTreeMap::from([("alice".to_string(), seat.clone())]));
    let (_, top) = w.http_get(&format!("/v1/boards/sess/top?period={}:final", hour_id(h))).await;
    let top: Value = serde_json::from_str(&top).unwrap();
    assert_eq!(top["entries"][0]["meta"], seat, "{top}");
    let published: Value = serde_json::from_slice(broker.read_all(&sealed, 1)[0].payload().unwrap()).unwrap();
    assert_eq!(published["entries"], json!([{ "rank": 1, "player_id": "alice", "score": 5000, "meta": seat }]));

    // Erased: gone from every key, sealed and rolling ones included.
    let erase = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "player_erased", "player_id": "alice"});
    broker.produce(&admin, &[admin_record(erase)]).await;
    broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(60));
    let keys: Vec<String> = redis::cmd("KEYS").arg("lb:*").query_async(&mut conn).await.unwrap();
    let traces = holding(&mut conn, &keys, "alice").await;
    assert!(traces.is_empty(), "alice is still in {traces:?}");
    // She was the sealed hour's only player: the final board and its dense index are gone.
    assert!(!keys.contains(&final_key) && !keys.contains(&final_meta), "{keys:?}");
    assert!(!keys.iter().any(|k| k.contains(":_dense:h:")), "{keys:?}");
    // And the next refresh, from the erased days, still has no alice.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    sum3.remove("alice");
    assert_eq!(zset_values(&mut conn, "lb:{pts}:r:last3d").await, sum3);
}
