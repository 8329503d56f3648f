//! `bench league`: what leagues cost. The Redis time per event on a league
//! board against the same board without `league` (the store path, the same
//! events, rounds in turn), and one round of `players` players in cohorts
//! of 30 settled by the real binary: how long the settlement and the
//! publication of its cohorts take, and the longest any Redis command held
//! Redis meanwhile (`SLOWLOG`).

use super::*;

/// A sum board with hourly rounds, with or without its league.
fn league_config(redis_url: &str, brokers: &str, topic: &str, sealed: &str, listen: &str, league: bool) -> String {
    let base = bench_config(brokers, redis_url, topic, &format!("{topic}-g"), listen, "");
    // Only the league board: the bench boards go.
    let head = base.split("[[board]]").next().unwrap_or_default().to_string();
    let league_section = if league {
        "[board.league]\nrounds = \"round\"\ntiers = [\"bronze\", \"silver\", \"gold\", \"diamond\"]\n\
         cohort_size = 30\npromote = 5\ndemote = 5\n"
    } else {
        ""
    };
    format!(
        "{head}[sealing]\ntopic = \"{sealed}\"\nidle_grace = \"1s\"\ncheck_interval = \"100ms\"\n\n\
         [[board]]\nid = \"lg\"\non = [\"match_finished\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n\
         schedules = [{{ name = \"round\", cron = \"0 * * * *\", duration = \"1h\" }}]\nclose_after = \"10m\"\n\
         {league_section}"
    )
}

/// Redis CPU per event of the store path on each of the two boards, rounds in turn.
async fn cost_ratio(redis_url: &str, events: u64, rounds: usize) -> Result<Vec<String>, String> {
    let with = league_config(redis_url, "127.0.0.1:9", "bench", "sealed", "127.0.0.1:0", true);
    let without = league_config(redis_url, "127.0.0.1:9", "bench", "sealed", "127.0.0.1:0", false);
    let (settings, conn, store) = open_store(&with).await?;
    let plain = config::load_str(&without, Vec::new()).map_err(|e| e.to_string())?;
    let routers = [
        Router::new(settings.boards.clone(), &settings.redis.key_prefix),
        Router::new(plain.boards.clone(), &settings.redis.key_prefix),
    ];
    let list = parsed_stream(&routers[0], 7, 100_000, events);
    let n = list.len() as u64;
    let (mut cpu, mut ratios) = ([Vec::new(), Vec::new()], Vec::new());
    for round in 1..=rounds.max(1) {
        for (k, router) in routers.iter().enumerate() {
            eprintln!("bench: store path, {} (round {round})", if k == 0 { "league" } else { "same board, no league" });
            flush(&conn).await?;
            let before = redis_stats(&conn).await?;
            store_path(&store, router, &list, settings.worker.batch_size).await?;
            let after = redis_stats(&conn).await?;
            cpu[k].push((after.cpu - before.cpu) * 1e6 / n as f64);
        }
        ratios.push(cpu[0][round - 1] / cpu[1][round - 1]);
    }
    Ok(vec![format!(
        "- league board, Redis CPU per event: {:.1} µs against {:.1} µs without league, {:.2}x (median of rounds {}; target at most 1.15x); {n} events, 100,000 players, 2% duplicates",
        median(&cpu[0]),
        median(&cpu[1]),
        median(&ratios),
        ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ")
    )])
}

/// A hash as text pairs.
async fn hash(conn: &RedisConn, key: &str) -> Result<HashMap<String, String>, String> {
    redis::cmd("HGETALL").arg(key).query_async(&mut conn.clone()).await.map_err(|e| e.to_string())
}

/// One round of `players` players settled by the real binary.
async fn settlement(brokers: &str, redis_url: &str, players: u64) -> Result<Vec<String>, String> {
    let exe = rankflow_bin()?;
    let dir = tempfile_dir()?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let (topic, sealed) = (format!("league-{run}"), format!("league-{run}-sealed"));
    create_topic(brokers, &topic, 4).await?;
    create_topic(brokers, &sealed, 1).await?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let cfg = league_config(redis_url, brokers, &topic, &sealed, &listen, true);
    let (_, conn, _) = open_store(&cfg).await?;
    flush(&conn).await?;
    // A round two hours ago, closed ten minutes after it ended: one event per player.
    let now = chrono::Utc::now().timestamp_millis();
    let start = now - now.rem_euclid(3_600_000) - 2 * 3_600_000;
    let round = format!(
        "c:round:{}",
        chrono::DateTime::from_timestamp_millis(start).unwrap_or_default().format("%Y-%m-%dT%H:%M")
    );
    let producer: FutureProducer =
        client(brokers).set("linger.ms", PRODUCER_LINGER_MS).create().map_err(|e| e.to_string())?;
    let mut pending = Vec::new();
    for p in 0..players {
        let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match_finished",
                       "player_id": format!("p{p}"), "score": (p * 7919) % 1000, "ts": start + 1000});
        let key = format!("p{p}");
        let payload = v.to_string();
        // Produced before the round closed, as a live game's records were.
        let record = FutureRecord::to(&topic).key(&key).payload(&payload).timestamp(start + 2000);
        pending.push(producer.send_result(record).map_err(|(e, _)| e.to_string())?);
    }
    for f in pending {
        f.await.map_err(|_| "cancelled".to_string())?.map_err(|(e, _)| e.to_string())?;
    }
    for (k, v) in [("slowlog-log-slower-than", "1000"), ("slowlog-max-len", "100000")] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query_async(&mut conn.clone())
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut child = spawn_rankflow(&exe, &dir, &run, &cfg)?;
    let cohorts_of = |n: u64| n.div_ceil(30);
    let (step, published) = (format!("{round}:step"), format!("{round}:published"));
    let (mut began, mut settled) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(900);
    let outcome = loop {
        let state = hash(&conn, "lb:{lg}:_lgs").await?;
        if began.is_none() && state.contains_key(&step) {
            began = Some((Instant::now(), chrono::Utc::now().timestamp()));
            let _: () =
                redis::cmd("SLOWLOG").arg("RESET").query_async(&mut conn.clone()).await.map_err(|e| e.to_string())?;
        }
        if settled.is_none() && state.contains_key(&round) {
            settled = Some(Instant::now());
        }
        if state.get(&published).and_then(|n| n.parse::<u64>().ok()) == Some(cohorts_of(players)) {
            break Ok(Instant::now());
        }
        if Instant::now() > deadline {
            break Err("the settlement did not finish in 15 minutes".to_string());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    stop(&mut child);
    let done = outcome?;
    let (began, settled) = (began.ok_or("no settlement seen")?.0, settled.ok_or("no settled round seen")?);
    let slow: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100_000)
        .query_async(&mut conn.clone())
        .await
        .map_err(|e| e.to_string())?;
    let longest = slow
        .iter()
        .filter_map(|e| match e {
            redis::Value::Array(f) => redis::from_redis_value::<i64>(f.get(2)?.clone()).ok(),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    Ok(vec![format!(
        "- league settlement: {players} players in {} cohorts of 30 settled in {:.2} s (target under 5 s), published in {:.2} s more; \
         longest Redis command meanwhile {:.1} ms (target at most 50 ms; SLOWLOG over 1 ms)",
        cohorts_of(players),
        (settled - began).as_secs_f64(),
        (done - settled).as_secs_f64(),
        longest as f64 / 1000.0
    )])
}

/// `rankflow-tools bench league`.
pub async fn league(brokers: &str, redis_url: &str, events: u64, players: u64, rounds: usize) -> Result<(), String> {
    let mut notes = cost_ratio(redis_url, events, rounds).await?;
    notes.extend(settlement(brokers, redis_url, players).await?);
    for n in notes {
        println!("{n}");
    }
    Ok(())
}
