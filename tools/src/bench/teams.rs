//! `bench teams`: what team boards cost. The Redis time per event of the
//! store path on a `sum` team board (daily, weekly and all-time, leavers
//! forfeit) against the same board without `team`, fed the same events:
//! every player's join first, then a stream of scores with 2% duplicates
//! and 1% bad records in which one event in 100 is a player switching
//! teams (the board without `team` takes no membership event: it skips
//! them); then a team's read (`GET /v1/boards/{board}/teams/{team}`: its
//! standing and its 50 members' contributions), the top 100 of teams and a
//! player's read, timed in-process (server side), with 10,000 teams of 50.

use rankflow::event::Membership;

use super::*;

const BOARD: &str = "[[board]]\nid = \"clans\"\non = [\"match_finished\"]\nmode = \"sum\"\n\
                     periods = [\"daily\", \"weekly\", \"all_time\"]\ndense_rank = false\n";
const TEAM: &str = "team = { leave = \"forfeit\" }\n";
/// The cost's players: in teams of 50, each with some 20 events of the stream.
const PLAYERS: usize = 10_000;

fn membership(player: &str, team: usize, joined: bool, ts: i64, id: u128) -> Event {
    Event {
        event_id: uuid::Uuid::from_u128(id),
        kind: (if joined { "team_joined" } else { "team_left" }).into(),
        player_id: player.to_string(),
        score: None,
        scores: None,
        ts_ms: ts,
        attrs: Default::default(),
        meta: None,
        team: Some(Membership { team_id: format!("team-{team:05}"), joined }),
    }
}

/// The generator's stream for `players` players, each joining one of
/// `players / 50` teams first, one event in 100 a switch to another team.
fn stream(router: &Router, players: usize, events: u64) -> Vec<StreamEvent> {
    let scores = parsed_stream(router, 31, players, events);
    let teams = (players / 50).max(1);
    let mut seen: Vec<String> = scores.iter().map(|(_, _, _, e)| e.player_id.clone()).collect();
    seen.sort();
    seen.dedup();
    let now = chrono::Utc::now().timestamp_millis();
    let mut list: Vec<Event> = Vec::with_capacity(seen.len() + scores.len() * 101 / 100);
    for (i, p) in seen.iter().enumerate() {
        list.push(membership(p, i % teams, true, now - 3_600_000, 1 << 64 | i as u128));
    }
    for (i, (_, _, _, e)) in scores.into_iter().enumerate() {
        if i % 100 == 99 {
            list.push(membership(&e.player_id, i % teams, true, now - 1000, 2 << 64 | i as u128));
        }
        list.push(e);
    }
    list.into_iter().enumerate().map(|(i, e)| ((i % 4) as i32, (i / 4) as i64, now, e)).collect()
}

/// Redis CPU per event, team board against the same board without; one line.
async fn cost(redis_url: &str, events: u64, rounds: usize) -> Result<String, String> {
    let text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "").replace(BENCH_BOARDS, "");
    let (settings, conn, store) = open_store(&format!("{text}{BOARD}")).await?;
    let load = |board: String| config::load_str(&(text.clone() + &board), Vec::new()).map_err(|e| e.to_string());
    let (with, without) = (load(format!("{BOARD}{TEAM}"))?, load(BOARD.to_string())?);
    let prefix = &settings.redis.key_prefix;
    let routers = [Router::new(with.boards.clone(), prefix), Router::new(without.boards.clone(), prefix)];
    let list = stream(&routers[0], PLAYERS, events);
    let n = list.len() as u64;
    let labels = ["team board", "no team"];
    let batch = settings.worker.batch_size;
    let p = paired(&conn, &store, (&routers, labels), (&list, batch, rounds), || async { Ok(0) }).await?;
    let parts = p.breakdowns(labels, n, rounds);
    Ok(format!(
        "- A sum board of daily, weekly and all-time periods, {PLAYERS} players in {} teams of 50: Redis CPU per event \
         {:.1} µs as a team board against {:.1} µs without `team`, {:.2}x (median of rounds {}; target at most 1.5x); \
         in the script {:.1} against {:.1} µs; {n} events, {} of them joins and switches{}{}",
        PLAYERS / 50,
        median(&p.cpu[0]),
        median(&p.cpu[1]),
        median(&p.ratios),
        p.ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
        median(&p.script[0]),
        median(&p.script[1]),
        list.iter().filter(|(_, _, _, e)| e.team.is_some()).count(),
        parts[0],
        parts[1],
    ))
}

/// One request's time through the app, ms.
async fn timed(app: &axum::Router, uri: &str) -> Result<f64, String> {
    let req = axum::http::Request::get(uri).body(axum::body::Body::empty()).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let resp = tower::ServiceExt::oneshot(app.clone(), req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 24).await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{uri}: {status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

/// The reads' latency with `teams` teams of 50; one line per read.
async fn reads(redis_url: &str, teams: usize, samples: usize) -> Result<Vec<String>, String> {
    let text = bench_config("127.0.0.1:9", redis_url, "bench", "bench-g", "127.0.0.1:0", "").replace(BENCH_BOARDS, "");
    let cfg = format!("{text}{}{TEAM}", BOARD.replace("match_finished", "m"));
    let players = teams * 50;
    eprintln!("bench: filling {teams} teams of 50");
    let now = chrono::Utc::now().timestamp_millis();
    let mut g = rand_seed(41);
    let joins = (0..players).map(|i| membership(&format!("player-{i:07}"), i % teams, true, now - 60_000, i as u128));
    let scores = (0..players).map(|i| {
        let score = rand::Rng::random_range(&mut g, 0..10_000);
        let mut e = m_event(&mut g, format!("player-{i:07}"), score, now, None);
        e.kind = "m".into();
        e
    });
    let fill: Vec<Event> = joins.chain(scores).collect();
    let app = super::sharded::filled_app(&cfg, fill.into_iter()).await?;
    let mut out = Vec::new();
    let kinds = [
        "a team's read (standing and 50 members)",
        "the top 100 teams",
        "a player's read (team, standing, contribution)",
    ];
    let mut took: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..samples {
        let team = format!("team-{:05}", (i * 7919) % teams);
        let player = format!("player-{:07}", (i * 104_729) % players);
        let uris = [
            format!("/v1/boards/clans/teams/{team}?period=all"),
            "/v1/boards/clans/top?period=all&limit=100".to_string(),
            format!("/v1/boards/clans/players/{player}?period=all"),
        ];
        for (k, uri) in uris.iter().enumerate() {
            took[k].push(timed(&app, uri).await?);
        }
    }
    for (k, t) in took.iter_mut().enumerate() {
        t.sort_by(f64::total_cmp);
        out.push(format!(
            "- {}: {:.3} ms median, {:.3} ms p99 ({samples} reads, in-process, one client; {teams} teams of 50)",
            kinds[k],
            median(t),
            percentile(t, 0.99)
        ));
    }
    Ok(out)
}

/// `rankflow-tools bench teams --redis URL`.
pub async fn teams(redis_url: &str, events: u64, teams: usize, samples: usize, rounds: usize) -> Result<(), String> {
    let mut lines = vec![cost(redis_url, events, rounds).await?];
    lines.extend(reads(redis_url, teams, samples).await?);
    println!("\nteam boards:\n");
    for l in lines {
        println!("{l}");
    }
    Ok(())
}
