//! Leagues through real workers, Apache Kafka and Redis: players are placed in
//! cohorts in arrival order, rounds settle at their seal into exactly the
//! moves a model of the rules expects (promotion, demotion, the top and
//! lowest tiers keeping their players, small cohorts, idle players), each
//! cohort's result is published once, and the next round places every
//! player in the tier the settlement gave them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::league::*;
use support::periods::*;
use support::*;

/// One record per cohort and one top per round, each once, with the
/// model's standings (`expected`, by record key); `wanted` records in all.
fn published_as_the_model(
    published: &[rdkafka::message::OwnedMessage],
    expected: &BTreeMap<String, Vec<(String, i64, &'static str, usize)>>,
    wanted: i64,
    logs: &dyn Fn() -> String,
) {
    let mut keys: Vec<String> = published
        .iter()
        .map(|m| String::from_utf8_lossy(m.key().unwrap()).into_owned())
        .filter(|k| k.contains('/'))
        .collect();
    keys.sort();
    assert_eq!(keys, expected.keys().cloned().collect::<Vec<_>>(), "the cohorts published\n{}", logs());
    assert_eq!(published.len() as i64, wanted, "{}", logs());
    let mut seen = HashSet::new();
    for m in published {
        let v: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        let key = String::from_utf8_lossy(m.key().unwrap()).into_owned();
        assert!(seen.insert(key.clone()), "{key} published twice");
        if v["kind"] == json!("top") {
            continue;
        }
        assert_eq!(v["kind"], json!("league"), "{v}");
        let want = expected.get(&key).unwrap_or_else(|| panic!("{key} is no cohort of the model: {v}"));
        let standings: Vec<Value> = want
            .iter()
            .enumerate()
            .map(|(i, (p, s, zone, next))| {
                json!({"rank": i + 1, "player_id": p, "score": s, "zone": zone, "next_tier": TIERS[*next]})
            })
            .collect();
        assert_eq!(v["standings"], Value::Array(standings), "{key}");
        assert_eq!(v["cohort"], json!(key.rsplit('/').next().unwrap()));
    }
}

/// A worker that died after sending a round's records but before
/// recording them: the one that takes the job over reads what the topic
/// holds since the publication began, and sends nothing twice.
async fn a_takeover_sends_nothing_twice(
    redis: &Redis,
    broker: &Broker,
    sealed: &str,
    first: String,
    expected: &BTreeMap<String, Vec<(String, i64, &'static str, usize)>>,
    wanted: i64,
    logs: &dyn Fn() -> String,
) {
    let mut conn = redis.conn().await;
    let _: i64 = redis::cmd("HSET")
        .arg("lb:{league}:_lgs")
        .arg(format!("{first}:published"))
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let job = format!("seal|lb:{{league}}|{first}");
    let _: i64 = redis::cmd("ZADD").arg("lb:{.sched}:due").arg(0).arg(&job).query_async(&mut conn).await.unwrap();
    let cohorts_of_first =
        expected.keys().filter(|k| k.starts_with("league/") && k.contains(&first)).count().to_string();
    wait_for(Duration::from_secs(60), logs, || async {
        hash(&mut redis.conn().await, "lb:{league}:_lgs").await.get(&format!("{first}:published"))
            == Some(&cohorts_of_first)
    })
    .await;
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(broker.read_all(sealed, 1).len() as i64, wanted, "a takeover sends nothing twice\n{}", logs());
}

/// A rebuild keeps the sealed rounds' cohorts and the settled tiers
/// (`tiers`), and places an open round's players again (here after their
/// cohorts were lost).
async fn a_rebuild_keeps_sealed_rounds(
    redis: &Redis,
    config: &std::path::Path,
    starts: &[i64],
    this_hour: i64,
    tiers: &HashMap<String, usize>,
) {
    let mut conn = redis.conn().await;
    let before: Vec<BTreeMap<String, i64>> = {
        let mut out = Vec::new();
        for start in starts {
            out.push(zset_values(&mut conn, &format!("lb:{{league}}:_lgc:{}", round_id(*start))).await);
        }
        out
    };
    let open_round = format!("lb:{{slow}}:_lgc:{}", round_id(this_hour - HOUR));
    let _: i64 = redis::cmd("DEL").arg(&open_round).query_async(&mut conn).await.unwrap();
    let out = run_rankflow(&["rebuild"], config).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (start, cohorts) in starts.iter().zip(&before) {
        let key = format!("lb:{{league}}:_lgc:{}", round_id(*start));
        assert_eq!(&zset_values(&mut conn, &key).await, cohorts, "{key} is sealed: kept");
    }
    let tiers_after: HashMap<String, usize> =
        redis::cmd("HGETALL").arg("lb:{league}:_lgt").query_async(&mut conn).await.unwrap();
    assert_eq!(&tiers_after, tiers, "the settled tiers are kept");
    assert_eq!(zset_values(&mut conn, &open_round).await, BTreeMap::from([("early".to_string(), 1)]));
    let waiting = format!("lb:{{slow}}:_lgp:{}", round_id(this_hour));
    assert_eq!(zset_values(&mut conn, &waiting).await.keys().collect::<Vec<_>>(), ["waiting"]);
}

/// A league board with a round that names no schedule is refused by
/// check-config, naming the field.
fn a_round_without_schedule_is_refused(cfg: &WorkerConfig, boards: &str) {
    let dir = temp_dir();
    let path = dir.path().join("bad.toml");
    let bad = boards.replace(
        "rounds = \"round\"\ntiers = [\"bronze\", \"silver\", \"gold\"]\ncohort_size = 4\npromote = \"25%\"",
        "rounds = \"week\"\ntiers = [\"bronze\", \"silver\", \"gold\"]\ncohort_size = 4\npromote = \"25%\"",
    );
    let mut bad_cfg = cfg.clone();
    bad_cfg.boards = bad;
    std::fs::write(&path, bad_cfg.render()).unwrap();
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_rankflow")).arg("check-config").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("board[2].league.rounds") && text.contains("'week' names no schedule or window"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rounds_place_in_arrival_order_settle_exactly_once_and_publish_each_cohort() {
    let Stack { redis, broker, topic, dlq } = Stack::start(1).await;
    let sealed = broker.sealed_topic().await;
    let now = chrono::Utc::now().timestamp_millis();
    let a = now - now.rem_euclid(HOUR) - 5 * HOUR;
    let starts = [a, a + HOUR, a + 2 * HOUR];
    let boards = format!(
        r#"
[sealing]
topic = "{sealed}"
idle_grace = "1s"
check_interval = "100ms"
lease = "5s"

"#
    ) + &league_board("league", "match", "10m", 4, "promote = 1\ndemote = 1\nidle = \"demote\"\n")
        + &league_board("keep", "match", "10m", 4, "promote = 1\ndemote = 1\nidle = \"keep\"\n")
        + &league_board("slow", "slow_match", "2h", 4, "promote = \"25%\"\ndemote = 1\n");
    // Who plays each round, in arrival order: p9 sits out round 2, n0 and n1 join late.
    let players: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    let mut rounds: Vec<Vec<&str>> = vec![players.iter().map(String::as_str).collect()];
    rounds.push(std::iter::once("n0").chain(players[..9].iter().map(String::as_str)).collect());
    rounds.push(players.iter().map(String::as_str).chain(["n0", "n1"]).collect());
    let mut rng = Lcg(11);
    let mut records = Vec::new();
    let mut scores: Vec<HashMap<String, i64>> = Vec::new();
    for (r, arrivals) in rounds.iter().enumerate() {
        let mut s = HashMap::new();
        // Distinct scores: a permutation of 1..=n times 10.
        let mut values: Vec<i64> = (1..=arrivals.len() as i64).map(|v| v * 10).collect();
        for i in (1..values.len()).rev() {
            values.swap(i, rng.next(i as u64 + 1) as usize);
        }
        // p9 wins round 1 (and so silver), then sits out round 2: `idle` decides its tier.
        if r == 0 {
            let top = values.iter().position(|&v| v == values.len() as i64 * 10).unwrap();
            values.swap(top, 9);
        }
        for (i, p) in arrivals.iter().enumerate() {
            let ts = starts[r] + 1000 * (i as i64 + 1);
            // Two events for some: the cohort score is the round's total.
            let (first, second) = (values[i] / 2, values[i] - values[i] / 2);
            records.push(event_record("match", p, first, ts, ts, None));
            records.push(event_record("match", p, second, ts + 500, ts + 500, None));
            s.insert(p.to_string(), values[i]);
        }
        scores.push(s);
    }
    // The slow board:
    // one player in the last hour's round, which is not sealed for two
    // hours, and one in this hour's, who waits for its settlement.
    let this_hour = now - now.rem_euclid(HOUR);
    records.push(event_record("slow_match", "early", 5, this_hour - HOUR + 1000, now, None));
    records.push(event_record("slow_match", "waiting", 7, now - 1000, now, None));
    broker.produce(&topic, &records).await;

    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &boards);
    cfg.worker_section = "batch_size = 7\nshutdown_timeout = \"20s\"\nmax_backoff = \"1s\"\n".into();
    let w1 = Worker::spawn(&cfg);
    let w2 = Worker::spawn_with_port(&cfg, free_port());

    // The models: each round placed with the tiers the one before settled
    // to, on the league board (idle players drop) and the keep board.
    let mut model = Model { size: 4, promote: Promote::Count(1), demote: 1, keep_idle: false, next: HashMap::new() };
    let mut keep = Model { keep_idle: true, next: HashMap::new(), ..model };
    let (mut placed, mut kept): (Vec<Round>, Vec<Round>) = (Vec::new(), Vec::new());
    let mut expected: BTreeMap<String, Vec<(String, i64, &'static str, usize)>> = BTreeMap::new();
    for (r, arrivals) in rounds.iter().enumerate() {
        for (board, m, rounds_of) in [("league", &mut model, &mut placed), ("keep", &mut keep, &mut kept)] {
            rounds_of.push(m.place(arrivals));
            let prev = r.checked_sub(1).map(|p| &rounds_of[p]);
            for (cohort, standings) in m.settle(&rounds_of[r], &scores[r], prev) {
                expected.insert(format!("{board}/{}/{cohort}", round_id(starts[r])), standings);
            }
        }
    }
    assert_ne!(placed[2].placed["p9"], kept[2].placed["p9"], "idle decides p9's tier in round 3");
    let logs = || format!("worker 1:\n{}\nworker 2:\n{}", w1.log(), w2.log());
    let wanted = 6 + expected.len() as i64;
    // Read as a read_committed consumer does (the seal topic's records go
    // out in transactions, whose markers the log end counts too).
    let published = broker.read_at_least(&sealed, 1, wanted as usize, Duration::from_secs(90));

    // Each round's cohorts are the model's placement.
    let mut conn = redis.conn().await;
    let boards_rounds = placed.iter().map(|r| ("league", r)).chain(kept.iter().map(|r| ("keep", r)));
    for (i, (board, round)) in boards_rounds.enumerate() {
        let key = format!("lb:{{{board}}}:_lgc:{}", round_id(starts[i % 3]));
        let got = zset_values(&mut conn, &key).await;
        let want: BTreeMap<String, i64> =
            round.placed.iter().map(|(p, &(t, n))| (p.clone(), t as i64 * SPAN + n)).collect();
        assert_eq!(got, want, "{key}\n{}", logs());
    }
    published_as_the_model(&published, &expected, wanted, &logs);
    // The tiers the last settlement gave.
    let tiers: HashMap<String, usize> =
        redis::cmd("HGETALL").arg("lb:{league}:_lgt").query_async(&mut conn).await.unwrap();
    assert_eq!(tiers, model.next, "tiers after three settlements");
    let tiers: HashMap<String, usize> =
        redis::cmd("HGETALL").arg("lb:{keep}:_lgt").query_async(&mut conn).await.unwrap();
    assert_eq!(tiers, keep.next, "tiers after three settlements, idle players kept");
    // Settled once across both workers.
    let mut settled = 0.0;
    for port in [w1.http_port, w2.http_port] {
        let (_, body) = http_get(port, "/metrics").await;
        settled += sum(&samples(&body), "rankflow_league_settlements_total", &[]);
    }
    assert_eq!(settled as i64, 6, "three rounds of two boards, each settled once\n{}", logs());
    a_takeover_sends_nothing_twice(&redis, &broker, &sealed, round_id(starts[0]), &expected, wanted, &logs).await;
    reads(w1.http_port, &starts, &placed, &expected, this_hour).await;

    a_rebuild_keeps_sealed_rounds(&redis, &w1.config_path, &starts, this_hour, &model.next).await;

    a_round_without_schedule_is_refused(&cfg, &boards);
}

/// A cohort's standings read two entries at a time following `next_cursor`
/// from the first page, and following `prev_cursor` back from the last.
async fn paged(port: u16, cohort: &str, round: &str) -> (Vec<Value>, Vec<Value>) {
    let page = |query: String| async move {
        let (status, body) = http_get(port, &format!("/v1/boards/league/cohorts/{cohort}?limit=2&{query}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    let entries = |v: &Value| v["entries"].as_array().unwrap().clone();
    let mut v = page(format!("period={round}")).await;
    let mut forward = entries(&v);
    while let Some(next) = v["next_cursor"].as_str().map(String::from) {
        v = page(format!("cursor={next}")).await;
        forward.extend(entries(&v));
    }
    let mut back = entries(&v);
    while let Some(prev) = v["prev_cursor"].as_str().map(String::from) {
        v = page(format!("cursor={prev}")).await;
        back.splice(0..0, entries(&v));
    }
    (forward, back)
}

/// The reads of a league: a player's `league`, a cohort's standings with
/// zones (settled: as published), the tiers, `not_placed`, and a player
/// waiting for the previous round's settlement.
async fn reads(
    port: u16,
    starts: &[i64],
    placed: &[Round],
    expected: &BTreeMap<String, Vec<(String, i64, &'static str, usize)>>,
    this_hour: i64,
) {
    let round = round_id(starts[1]);
    for (cohort_key, standings) in expected.iter().filter(|(k, _)| k.starts_with("league/") && k.contains(&round)) {
        let cohort = cohort_key.rsplit('/').next().unwrap();
        let (status, body) =
            http_get(port, &format!("/v1/boards/league/cohorts/{cohort}?period={round}&limit=100")).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let want: Vec<Value> = standings
            .iter()
            .enumerate()
            .map(|(i, (p, s, zone, next))| json!({"rank": i + 1, "player_id": p, "score": s, "zone": zone, "next_tier": TIERS[*next]}))
            .collect();
        assert_eq!(v["entries"], Value::Array(want.clone()), "{cohort}");
        assert_eq!(v["total"], json!(want.len()));
        assert_eq!((v.get("next_cursor"), v.get("prev_cursor")), (None, None), "one page holds it all");
        // Paged two at a time with the cursors, forward then back, the same standings.
        let (forward, back) = paged(port, cohort, &round).await;
        assert_eq!((forward, back), (want.clone(), want.clone()), "{cohort}");
        if want.len() > 1 {
            // A cohort's cursor pages only that cohort; a top read's, no cohort.
            let (_, body) = http_get(port, &format!("/v1/boards/league/cohorts/{cohort}?period={round}&limit=1")).await;
            let next = serde_json::from_str::<Value>(&body).unwrap()["next_cursor"].as_str().unwrap().to_string();
            let other = format!("{}-99", cohort.rsplit_once('-').unwrap().0);
            for wrong in [format!("cohorts/{other}?cursor={next}"), format!("top?cursor={next}")] {
                let (status, body) = http_get(port, &format!("/v1/boards/league/{wrong}")).await;
                let v: Value = serde_json::from_str(&body).unwrap();
                assert_eq!((status, v["parameter"].clone()), (400, json!("cursor")), "{wrong}: {body}");
            }
        }
        // Each player's read carries the same place.
        for (i, (p, _, zone, _)) in standings.iter().enumerate() {
            let (status, body) = http_get(port, &format!("/v1/boards/league/players/{p}?period={round}")).await;
            assert_eq!(status, 200, "{body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            let tier = cohort.rsplit_once('-').unwrap().0;
            assert_eq!(
                v["league"],
                json!({"tier": tier, "cohort": cohort, "rank": i + 1, "size": want.len(), "zone": zone}),
                "{p}"
            );
        }
    }
    // The tiers of round 2: cohorts and players per tier.
    let (status, body) = http_get(port, &format!("/v1/boards/league/league?period={round}")).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    for (t, name) in TIERS.iter().enumerate() {
        let players = placed[1].placed.values().filter(|(pt, _)| *pt == t).count();
        let cohorts = placed[1].placed.values().filter(|(pt, _)| *pt == t).map(|(_, n)| *n).max().unwrap_or(0);
        assert_eq!(v["tiers"][t], json!({"tier": name, "cohorts": cohorts, "players": players}), "{body}");
    }
    // p9 sat out round 2.
    let (status, body) = http_get(port, &format!("/v1/boards/league/players/p9/cohort?period={round}")).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["code"], json!("not_placed"));
    // Bad parameters name themselves.
    let (status, body) = http_get(port, "/v1/boards/league/cohorts/bronze-1?period=all").await;
    assert_eq!((status, serde_json::from_str::<Value>(&body).unwrap()["parameter"].clone()), (400, json!("period")));
    // The slow board: the first round placed at once; this round's player waits.
    let last = round_id(this_hour - HOUR);
    let (status, body) = http_get(port, &format!("/v1/boards/slow/players/early?period={last}")).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["league"], json!({"tier": "bronze", "cohort": "bronze-1", "rank": 1, "size": 1, "zone": "promote"}));
    let (status, body) = http_get(port, "/v1/boards/slow/players/waiting?period=round").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["league"], json!({"pending": true}), "{body}");
}

/// The (player, rank) of each entry of a read's answer.
fn entry_ranks(body: &str) -> Vec<(String, i64)> {
    serde_json::from_str::<Value>(body).unwrap()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["player_id"].as_str().unwrap().to_string(), e["rank"].as_i64().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn moderation_hides_sets_tiers_and_erases_players_of_a_league() {
    let stack = Stack::start(1).await;
    let admin = stack.admin_topic().await;
    let Stack { redis, broker, topic, dlq } = stack;
    let sealed = broker.sealed_topic().await;
    let now = chrono::Utc::now().timestamp_millis();
    let this_hour = now - now.rem_euclid(HOUR);
    let (last, this) = (round_id(this_hour - HOUR), round_id(this_hour));
    let boards = format!(
        r#"
[sealing]
topic = "{sealed}"
idle_grace = "1s"
check_interval = "100ms"

"#
    ) + &league_board("lg", "match", "2h", 4, "promote = 1\ndemote = 1\n");
    // Last hour's round, closed on demand below: x0..x5, x5 the best.
    let records: Vec<_> = (0..6)
        .map(|i| event_record("match", &format!("x{i}"), 10 + i, this_hour - HOUR + 1000 * (i + 1), now, None))
        .collect();
    broker.produce(&topic, &records).await;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &boards);
    cfg.admin_topics = vec![admin.clone()];
    let w = Worker::spawn(&cfg);
    let mut conn = redis.conn().await;
    let cohorts = format!("lb:{{lg}}:_lgc:{last}");
    wait_for(Duration::from_secs(60), &|| w.log(), || async {
        zset_values(&mut redis.conn().await, &cohorts).await.len() == 6
    })
    .await;
    // x1 hidden (ranks nowhere, moves nowhere); x4 set to gold for the next round.
    let id = |n: u128| uuid::Uuid::from_u128(n).to_string();
    broker
        .produce(
            &admin,
            &[
                admin_record(json!({"event_id": id(1), "type": "player_hidden", "player_id": "x1"})),
                admin_record(json!({"event_id": id(2), "type": "player_tier_set", "player_id": "x4", "board": "lg", "tier": "gold"})),
                admin_record(json!({"event_id": id(3), "type": "player_tier_set", "player_id": "x3", "board": "lg", "tier": "platinum"})),
            ],
        )
        .await;
    wait_for(Duration::from_secs(60), &|| w.log(), || async {
        hash(&mut redis.conn().await, "lb:{lg}:_lgx").await.contains_key("x4")
    })
    .await;
    // As if a worker began this round's publication and died before sending anything.
    let end = broker.log_end(&sealed, 1)[0];
    let _: i64 = redis::cmd("HSET")
        .arg("lb:{lg}:_lgs")
        .arg(format!("{last}:from"))
        .arg(format!("0:{end}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    w.close_and_wait("lg", &last);
    wait_for(Duration::from_secs(60), &|| w.log(), || async {
        hash(&mut redis.conn().await, "lb:{lg}:_lgs").await.contains_key(&format!("{last}:published"))
    })
    .await;
    // bronze-1 {x0, x1, x2, x3}: x1 hidden, so x3 promoted, x0 bottom of the lowest tier stays;
    // bronze-2 {x4, x5}: x5 promoted. x4 keeps the gold it was set to; x1 keeps no new tier.
    // The top and both cohorts, once each.
    let keys: Vec<String> = broker
        .read_at_least(&sealed, 1, 3, Duration::from_secs(60))
        .iter()
        .map(|m| String::from_utf8_lossy(m.key().unwrap()).into_owned())
        .collect();
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(keys.contains(&format!("lg/{last}/bronze-1")) && keys.contains(&format!("lg/{last}/bronze-2")), "{keys:?}");
    let results = hash(&mut conn, &format!("lb:{{lg}}:_lgr:{last}")).await;
    let want = [("x3", "1:p:1"), ("x2", "2:s:0"), ("x0", "3:s:0"), ("x5", "1:p:1"), ("x4", "2:s:0")];
    let want: HashMap<String, String> = want.into_iter().map(|(p, r)| (p.to_string(), r.to_string())).collect();
    assert_eq!(results, want, "{}", w.log());
    let tiers = hash(&mut conn, "lb:{lg}:_lgt").await;
    assert_eq!(tiers.get("x4").map(String::as_str), Some("2"), "player_tier_set wins over the settlement: {tiers:?}");
    assert_eq!(tiers.get("x1"), None, "a hidden player moves nowhere: {tiers:?}");
    assert_eq!(tiers.get("x3").map(String::as_str), Some("1"), "an unknown tier is refused: {tiers:?}");

    // x0 erased: out of the cohorts, the results and the tiers; x2 moves up.
    broker
        .produce(&admin, &[admin_record(json!({"event_id": id(4), "type": "player_erased", "player_id": "x0"}))])
        .await;
    wait_for(Duration::from_secs(60), &|| w.log(), || async {
        !zset_values(&mut redis.conn().await, &cohorts).await.contains_key("x0")
    })
    .await;
    assert!(!hash(&mut conn, &format!("lb:{{lg}}:_lgr:{last}")).await.contains_key("x0"));
    assert!(!hash(&mut conn, "lb:{lg}:_lgt").await.contains_key("x0"));
    let (status, body) = http_get(w.http_port, &format!("/v1/boards/lg/cohorts/bronze-1?period={last}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(entry_ranks(&body), vec![("x3".to_string(), 1), ("x2".to_string(), 2)], "{body}");

    // This hour's round places x4 in gold, x5 and x3 in silver, x2 in bronze.
    let next: Vec<_> = ["x2", "x3", "x4", "x5"].iter().map(|p| event_record("match", p, 1, now, now, None)).collect();
    broker.produce(&topic, &next).await;
    let cohorts = format!("lb:{{lg}}:_lgc:{this}");
    wait_for(Duration::from_secs(60), &|| w.log(), || async {
        zset_values(&mut redis.conn().await, &cohorts).await.len() == 4
    })
    .await;
    let got = zset_values(&mut conn, &cohorts).await;
    let want: BTreeMap<String, i64> = [("x2", 1), ("x3", SPAN + 1), ("x5", SPAN + 1), ("x4", 2 * SPAN + 1)]
        .into_iter()
        .map(|(p, c)| (p.to_string(), c))
        .collect();
    assert_eq!(got, want, "{}", w.log());
    assert!(hash(&mut conn, "lb:{lg}:_lgx").await.is_empty(), "the set tier is used by the placement");
}
