//! Sealing and rolling boards on sharded boards, on a local 3-primary Redis
//! Cluster, against unsharded reference boards fed the same stream: every
//! period is sealed on every shard and published once, with the merged top
//! and total the reference publishes; reads of sealed snapshots and rolling
//! boards answer as the reference's (pages by cursor, every player, around,
//! rank-of); an erasure reaches every shard's snapshots and rolling boards;
//! `rankflow close` closes a period on every shard.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::periods::*;
use support::*;

const SHARDS: usize = 4;

/// A sharded board's answer made while no shard changed: rolling boards
/// are swapped in every second, and a read that spans a swap says so.
async fn settled(w: &Worker, path: &str) -> (u16, Value) {
    for _ in 0..50 {
        let (status, v) = w.get_json(path).await;
        if status != 200 || v["consistent"] == true {
            return (status, v);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{path}: no read found every shard standing still");
}

/// Both boards' answers to `path` (`{b}` for the board), which must be
/// equal; the reference's.
async fn same(w: &Worker, reference: &str, path: &str) -> (u16, Value) {
    let (rs, r) = w.get_json(&path.replace("{b}", reference)).await;
    let (ss, s) = settled(w, &path.replace("{b}", &format!("{reference}-sh"))).await;
    assert_eq!(rs, ss, "{path}: {r} / {s}");
    let s = match s["error"].as_str() {
        Some(e) => json!({ "error": e.replace(&format!("{reference}-sh"), reference) }),
        None => s,
    };
    assert_eq!(plain(r.clone()), plain(s), "{path}");
    (rs, r)
}

/// Every read of one period compared: the top by cursor to the end (pages
/// of 7), then each listed player's own read, around and rank-of. Returns
/// the players listed.
async fn compare_period(w: &Worker, reference: &str, period: &str) -> Vec<String> {
    let sharded = format!("{reference}-sh");
    let (mut rc, mut sc) = (None::<String>, None::<String>);
    let mut players = Vec::new();
    loop {
        let page = |b: &str, c: &Option<String>| match c {
            None => format!("/v1/boards/{b}/top?period={period}&limit=7&rank=competition"),
            Some(c) => format!("/v1/boards/{b}/top?limit=7&rank=competition&cursor={c}"),
        };
        let (_, r) = w.get_json(&page(reference, &rc)).await;
        let (_, s) = settled(w, &page(&sharded, &sc)).await;
        assert_eq!(plain(r.clone()), plain(s.clone()), "{reference} {period} after {} players", players.len());
        players.extend(r["entries"].as_array().unwrap().iter().map(|e| e["player_id"].as_str().unwrap().to_string()));
        match (r["next_cursor"].as_str(), s["next_cursor"].as_str()) {
            (Some(a), Some(b)) => (rc, sc) = (Some(a.to_string()), Some(b.to_string())),
            (None, None) => break,
            _ => panic!("only one board has a next page: {r} / {s}"),
        }
    }
    for p in &players {
        same(w, reference, &format!("/v1/boards/{{b}}/players/{p}?period={period}")).await;
    }
    for p in players.iter().take(3).chain(players.iter().rev().take(3)) {
        same(w, reference, &format!("/v1/boards/{{b}}/players/{p}/around?period={period}&radius=3&fill=true")).await;
    }
    for score in [1, 10, 100, 1000] {
        same(w, reference, &format!("/v1/boards/{{b}}/rank-of?period={period}&score={score}")).await;
    }
    players
}

/// A command on the cluster (`redis-cli -c`), its output on one line.
fn cli(url: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli").args(["-c", "-u", url]).args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().replace('\n', " ")
}

/// The two boards (a sum over hours and days, a top-K best over days, both
/// with rolling boards and sealing in `zone`) unsharded (`pts`, `hi`) and
/// sharded (`pts-sh`, `hi-sh`), after the sealing section.
fn boards(sealed: &str, zone: &str) -> String {
    let board = |id: &str, shards: &str| {
        format!(
            r#"
[[board]]
id = "{id}"
on = ["match"]
mode = "sum"
periods = ["hourly", "daily"]
timezone = "{zone}"
close_after = "10m"
dense_rank = false
rolling = [{{ name = "last3d", days = 3, refresh = "1s" }}]
meta = true
{shards}

[[board]]
id = "hi{}"
on = ["match"]
mode = "best"
periods = ["daily"]
timezone = "{zone}"
max_members = 5
close_after = "10m"
dense_rank = false
rolling = [{{ name = "last3d", days = 3, refresh = "1s" }}]
{shards}
"#,
            id.strip_prefix("pts").unwrap()
        )
    };
    quick_sealing(sealed, "top = 20\n") + &board("pts", "") + &board("pts-sh", &format!("shards = {SHARDS}"))
}

/// Events on today (up to three hours ago, so every hour with events has
/// closed) and the three days before; small scores, so players tie. Sorted
/// by record time, each produced before its periods' close. Answers them,
/// the hours and the days before today they fall in.
fn stream(now: i64, offset: i64, last_hour: i64) -> (Vec<Record>, BTreeSet<i64>, BTreeSet<i64>) {
    let today = {
        let local = now + offset;
        local - local.rem_euclid(DAY) - offset
    };
    let mut rng = Lcg(29);
    let (mut records, mut hours, mut days) = (Vec::new(), BTreeSet::new(), BTreeSet::new());
    for d in 0..4 {
        for i in 0..600 {
            let ts = match d {
                0 => today + rng.next((last_hour + HOUR - today).max(1) as u64) as i64,
                _ => today - d * DAY + rng.next(DAY as u64) as i64,
            };
            hours.insert(ts - ts.rem_euclid(HOUR));
            if d > 0 {
                days.insert(d);
            }
            let player = format!("p{}", rng.next(120));
            let score = 1 + rng.next(6) as i64;
            records.push(with_meta(
                event_record("match", &player, score, ts, ts + rng.next(60_000) as i64, None),
                json!({ "n": format!("{d}-{i}") }),
            ));
        }
    }
    // In record-time order (a producer's clock moves forward).
    records.sort_by_key(|r| r.2);
    (records, hours, days)
}

/// Every closed period of both boards is published once, `want` records:
/// the sharded board's record holds the reference's top and total.
fn published_once_as_the_reference(broker: &Broker, sealed: &str, want: i64, logs: &dyn Fn() -> String) {
    wait_records(broker, sealed, want, Duration::from_secs(120), logs);
    std::thread::sleep(Duration::from_secs(2));
    let published = broker.read_all(sealed, 1);
    assert_eq!(published.len() as i64, want, "one record per period and board");
    let mut by_key: BTreeMap<String, Value> = BTreeMap::new();
    for m in &published {
        let key = String::from_utf8_lossy(m.key().unwrap()).into_owned();
        let v: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        assert!(by_key.insert(key.clone(), v).is_none(), "{key} published twice");
    }
    let mut filled = 0;
    for (key, r) in by_key.iter().filter(|(k, _)| k.starts_with("pts|") || k.starts_with("hi|")) {
        let s = &by_key[&key.replacen('|', "-sh|", 1)];
        assert_eq!((&s["entries"], &s["total"]), (&r["entries"], &r["total"]), "{key}");
        assert_eq!(s["shard_keys"].as_array().map(Vec::len), Some(SHARDS), "{s}");
        if key.starts_with("hi|") {
            // A top-K board publishes its K.
            assert_eq!((r["total"].as_i64(), r["entries"].as_array().map(Vec::len)), (Some(5), Some(5)), "{r}");
        } else {
            // (Hours past the hourly retention were refused: their tops are empty.)
            filled += usize::from(r["total"].as_i64() > Some(1) && r["entries"][0]["meta"].is_object());
        }
    }
    assert!(filled > 20, "only {filled} periods hold players");
}

/// Every player's history (each sealed hour and day: ranks, percentiles,
/// bests) is the reference's, the shards merged in board order; top-K
/// boards rank the K the board holds.
async fn histories_match(w: &Worker, url: &str, hours: usize, days: usize) {
    // First every period's history is recorded, on the reference's tag and
    // on the first shard (which holds a sharded history's progress).
    let recorded = |base: &str| {
        let all = cli(url, &["HGETALL", &format!("{base}:_sealed")]);
        let words: Vec<&str> = all.split_whitespace().collect();
        words.chunks(2).filter(|kv| kv.len() == 2 && kv[0].ends_with(":history") && kv[1] == "done").count()
    };
    let first = |b: &str| rankflow::keys::shard_base("lb", b, None, 0, SHARDS as u32);
    let deadline = Instant::now() + Duration::from_secs(120);
    for (base, sealed) in [
        ("lb:{pts}".to_string(), hours + days),
        (first("pts-sh"), hours + days),
        ("lb:{hi}".to_string(), days),
        (first("hi-sh"), days),
    ] {
        while recorded(&base) < sealed {
            assert!(
                Instant::now() < deadline,
                "{base}: {} of {sealed} histories recorded\n{}",
                recorded(&base),
                w.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut ranked = 0;
    for reference in ["pts", "hi"] {
        for p in 0..120 {
            let path = format!("/v1/boards/{{b}}/players/p{p}/history");
            let (_, r) = w.get_json(&path.replace("{b}", reference)).await;
            let (_, s) = w.get_json(&path.replace("{b}", &format!("{reference}-sh"))).await;
            assert_eq!(plain(r.clone()), plain(s), "p{p}'s {reference} history");
            ranked += r["periods"].as_array().map_or(0, Vec::len);
        }
    }
    assert!(ranked > 300, "only {ranked} recorded standings");
}

/// `rankflow close` closes the current hour on every shard: what is
/// produced after it is refused on each, and the period is sealed.
async fn close_the_current_hour(w: &Worker, broker: &Broker, topic: &str, group: &str, offset: i64) {
    let t = chrono::Utc::now().timestamp_millis();
    if t.rem_euclid(HOUR) > HOUR - 60_000 {
        // Not in the last minute of an hour (what follows takes seconds):
        // the events before and after the close share it.
        tokio::time::sleep(Duration::from_millis((HOUR - t.rem_euclid(HOUR) + 1000) as u64)).await;
    }
    let t = chrono::Utc::now().timestamp_millis();
    let current = hour_id(t + offset);
    let before: Vec<_> = (0..8).map(|i| event_record("match", &format!("early{i}"), 5, t, t, None)).collect();
    broker.produce(topic, &before).await;
    broker.wait_committed_to_end(group, topic, 2, Duration::from_secs(60));
    w.close_and_wait("pts-sh", &current);
    let t = chrono::Utc::now().timestamp_millis();
    let after: Vec<_> = (0..8).map(|i| event_record("match", &format!("late{i}"), 5, t, t, None)).collect();
    broker.produce(topic, &after).await;
    broker.wait_committed_to_end(group, topic, 2, Duration::from_secs(60));
    let final_top = format!("/v1/boards/pts-sh/top?period={current}:final&limit=100");
    let (_, top) = w.get_json(&final_top).await;
    let listed: BTreeSet<&str> =
        top["entries"].as_array().unwrap().iter().map(|e| e["player_id"].as_str().unwrap()).collect();
    let early: BTreeSet<String> = (0..8).map(|i| format!("early{i}")).collect();
    assert_eq!(listed, early.iter().map(String::as_str).collect(), "{top}");
    let (_, live) = w.get_json(&format!("/v1/boards/pts-sh/top?period={current}&limit=100")).await;
    assert_eq!(live["total"], 8, "the late events are refused on every shard: {live}");
    let (_, reference) = w.get_json(&format!("/v1/boards/pts/top?period={current}&limit=100")).await;
    assert_eq!(reference["total"], 16, "the reference board was not closed: {reference}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sharded_boards_seal_publish_and_roll_as_the_unsharded_boards_do() {
    let cluster = RedisCluster::start(3);
    let broker = Broker::start();
    let (topic, dlq) = broker.topics(2).await;
    let (admin, sealed) = (broker.admin_topic().await, broker.sealed_topic().await);
    let now = chrono::Utc::now().timestamp_millis();
    let (zone, offset) = noon_zone(now);
    let boards = boards(&sealed, &zone);
    let last_hour = now - now.rem_euclid(HOUR) - 3 * HOUR;
    let (records, hours, days) = stream(now, offset, last_hour);
    broker.produce(&topic, &records).await;
    let mut cfg = WorkerConfig::on_cluster(&broker, &cluster, &topic, &dlq, &boards);
    cfg.admin_topics = vec![admin.clone()];
    let w = Worker::spawn(&cfg);
    wait_http(w.http_port, Duration::from_secs(30)).await;
    broker.wait_committed_to_end(&cfg.group, &topic, 2, Duration::from_secs(120));

    // Every closed period of both boards is published once: the sharded
    // board's record holds the reference's top and total.
    // (`pts` seals its hours and days, `hi` its days.)
    let periods = (hours.len() + 2 * days.len()) as i64;
    let url = cluster.url();
    let logs = || {
        let due = cli(&url, &["ZRANGE", "lb:{.sched}:due", "0", "-1", "WITHSCORES"]);
        let marks = cli(&url, &["HGETALL", "lb:{.sched}:wm"]);
        format!("{}\ndue jobs: {due}\nwatermarks: {marks}", w.log())
    };
    published_once_as_the_reference(&broker, &sealed, 2 * periods, &logs);

    // Sealed snapshots, read: an hour and a day.
    // The boards' zone is a whole number of hours from UTC: its hour ids are UTC's moved by the offset.
    let hour = format!("{}:final", hour_id(last_hour + offset));
    let day = {
        let (_, p) = w.get_json("/v1/boards/pts-sh/periods").await;
        let sealed_days: Vec<String> = p["periods"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] == "daily" && p["sealed"] == true)
            .map(|p| p["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(sealed_days.len(), days.len(), "{p}");
        format!("{}:final", sealed_days[0])
    };
    // Until its last shard is sealed, a period reads as not sealed (empty):
    // the shards are sealed in order, so not all may be yet.
    let last = rankflow::keys::shard_base("lb", "pts-sh", None, SHARDS as u32 - 1, SHARDS as u32);
    let (sealed_hash, live_key) = (format!("{last}:_sealed"), format!("{last}:{}", hour.trim_end_matches(":final")));
    let at = cli(&url, &["HGET", &sealed_hash, &live_key]);
    assert!(at.parse::<i64>().is_ok(), "{sealed_hash} {live_key}: {at}");
    assert_eq!(cli(&url, &["HDEL", &sealed_hash, &live_key]), "1");
    let (_, halfway) = w.get_json(&format!("/v1/boards/pts-sh/top?period={hour}")).await;
    assert_eq!((&halfway["total"], &halfway["entries"]), (&json!(0), &json!([])), "{halfway}");
    assert_eq!(cli(&url, &["HSET", &sealed_hash, &live_key, &at]), "1");
    let in_hour = compare_period(&w, "pts", &hour).await;
    assert!(in_hour.len() > 5, "{in_hour:?}");
    assert!(compare_period(&w, "pts", &day).await.len() > 50);

    // Rolling boards, once each shard's refresh has run: the same union.
    let deadline = Instant::now() + Duration::from_secs(60);
    for reference in ["pts", "hi"] {
        loop {
            let path = "/v1/boards/{b}/top?period=last3d&limit=1000";
            let (_, r) = w.get_json(&path.replace("{b}", reference)).await;
            let (_, s) = w.get_json(&path.replace("{b}", &format!("{reference}-sh"))).await;
            if r["total"].as_i64() > Some(0) && plain(r.clone()) == plain(s.clone()) {
                break;
            }
            assert!(Instant::now() < deadline, "{reference} rolling boards differ:\n{r}\n{s}\n{}", w.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        compare_period(&w, reference, "last3d").await;
    }

    histories_match(&w, &url, hours.len(), days.len()).await;
    let (_, h) = w.get_json(&format!("/v1/boards/pts-sh/players/{}/history", in_hour[0])).await;
    assert!(h["periods"].as_array().is_some_and(|p| p.len() >= 2), "{h}");

    // An erasure reaches every shard's snapshots and rolling boards.
    let gone = &in_hour[0];
    let erase = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "player_erased", "player_id": gone});
    broker.produce(&admin, &[admin_record(erase)]).await;
    broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(60));
    for period in [&hour, &day, &"last3d".to_string()] {
        let (status, _) = same(&w, "pts", &format!("/v1/boards/{{b}}/players/{gone}?period={period}")).await;
        assert_eq!(status, 404, "{gone} erased from {period}");
        compare_period(&w, "pts", period).await;
    }
    let (_, h) = w.get_json(&format!("/v1/boards/pts-sh/players/{gone}/history")).await;
    assert_eq!((&h["periods"], &h["best_rank"]), (&json!([]), &json!(null)), "{gone}'s history is erased: {h}");

    close_the_current_hour(&w, &broker, &topic, &cfg.group, offset).await;
}
