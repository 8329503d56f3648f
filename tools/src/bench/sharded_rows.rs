//! `bench sharded-rows`: the merged reads of a sharded board ranked by two
//! columns (wins, then the fastest time) against the same reads of a
//! sharded board of one score (the wins), both 8 shards over a Redis
//! Cluster and fed the same members: top 100, a player's rank, around a
//! player, rank-of, a friends read of 20 and a page from a cursor, each
//! timed in-process (server side), the two boards' samples interleaved so
//! the machine's load falls on both alike.

use rankflow::event::Scores;

use super::*;

const ONE: &str = "[[board]]\nid = \"one\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n\
                   dense_rank = false\nshards = 8\n";
const ROWS: &str = "[[board]]\nid = \"rows\"\non = [\"m\"]\nperiods = [\"all_time\"]\nshards = 8\n\
                    columns = [{ name = \"wins\", mode = \"sum\" }, { name = \"time_ms\", mode = \"min\", order = \"asc\" }]\n";

/// One request's time through the app, ms, and its JSON answer.
async fn timed(app: &axum::Router, req: axum::http::Request<axum::body::Body>) -> Result<(f64, Vec<u8>), String> {
    let t = Instant::now();
    let resp = tower::ServiceExt::oneshot(app.clone(), req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 24).await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok((t.elapsed().as_secs_f64() * 1000.0, body.to_vec()))
}

fn get(uri: &str) -> Result<axum::http::Request<axum::body::Body>, String> {
    axum::http::Request::get(uri).body(axum::body::Body::empty()).map_err(|e| e.to_string())
}

/// `next_cursor` of the page at `offset` of `board`.
async fn cursor_at(app: &axum::Router, board: &str, offset: u64) -> Result<String, String> {
    let (_, body) = timed(app, get(&format!("/v1/boards/{board}/top?limit=100&offset={offset}"))?).await?;
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    v["next_cursor"].as_str().map(str::to_string).ok_or_else(|| format!("no cursor at {offset} on {board}"))
}

/// `rankflow-tools bench sharded-rows --redis <cluster seed>`.
pub async fn sharded_rows(redis_url: &str, members: u64, samples: usize) -> Result<(), String> {
    let head = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n[redis]\nurl = \"{redis_url}\"\ncluster = true\n"
    );
    eprintln!("bench: filling two sharded boards of {members} members");
    let now = chrono::Utc::now().timestamp_millis();
    let mut g = rand_seed(21);
    let fill = (0..members).map(|i| {
        // Wins from 2,000 values: both boards hold long runs of ties.
        let wins = rand::Rng::random_range(&mut g, 0..2_000);
        let time_ms = rand::Rng::random_range(&mut g, 30_000..120_000);
        let mut e = m_event(&mut g, format!("player-{i:07}"), wins, now, None);
        e.scores = Some(Scores([("wins".to_string(), Some(wins)), ("time_ms".to_string(), Some(time_ms))].into()));
        e
    });
    let app = super::sharded::filled_app(&(head + ONE + ROWS), fill).await?;
    let mut cursors = [Vec::new(), Vec::new()];
    for (slot, b) in ["one", "rows"].iter().enumerate() {
        for k in 0..20 {
            cursors[slot].push(cursor_at(&app, b, 37 * k).await?);
        }
    }
    let mut rng = rand_seed(22);
    println!("\nreads of two boards of {members} members, 8 shards each, {samples} samples each (ms, in-process):\n");
    println!("| read | one score p50 | one score p99 | two columns p50 | two columns p99 | p50 ratio |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut worst: f64 = 0.0;
    for what in
        ["top 100", "player rank", "around me (radius 2)", "rank of a row", "friends (20)", "page from a cursor"]
    {
        let mut times = [Vec::with_capacity(samples), Vec::with_capacity(samples)];
        for i in 0..samples {
            let player = format!("player-{:07}", rand::Rng::random_range(&mut rng, 0..members));
            let wins: i64 = rand::Rng::random_range(&mut rng, 0..2_000);
            let time_ms: i64 = rand::Rng::random_range(&mut rng, 30_000..120_000);
            let friends: Vec<String> =
                (0..20).map(|_| format!("player-{:07}", rand::Rng::random_range(&mut rng, 0..members))).collect();
            for (slot, b) in ["one", "rows"].iter().enumerate() {
                let req = match what {
                    "top 100" => get(&format!("/v1/boards/{b}/top?limit=100"))?,
                    "player rank" => get(&format!("/v1/boards/{b}/players/{player}"))?,
                    "around me (radius 2)" => get(&format!("/v1/boards/{b}/players/{player}/around?radius=2"))?,
                    "rank of a row" if slot == 0 => get(&format!("/v1/boards/{b}/rank-of?score={wins}"))?,
                    "rank of a row" => {
                        get(&format!("/v1/boards/{b}/rank-of?scores.wins={wins}&scores.time_ms={time_ms}"))?
                    }
                    "friends (20)" => axum::http::Request::post(format!("/v1/boards/{b}/players"))
                        .header("content-type", "application/json")
                        .body(axum::body::Body::from(json!({ "players": friends }).to_string()))
                        .map_err(|e| e.to_string())?,
                    _ => get(&format!("/v1/boards/{b}/top?limit=100&cursor={}", cursors[slot][i % 20]))?,
                };
                times[slot].push(timed(&app, req).await?.0);
            }
        }
        for t in &mut times {
            t.sort_by(f64::total_cmp);
        }
        let (one, rows) = (percentile(&times[0], 0.5), percentile(&times[1], 0.5));
        worst = worst.max(rows / one);
        println!(
            "| {what} | {one:.3} | {:.3} | {rows:.3} | {:.3} | {:.2}x |",
            percentile(&times[0], 0.99),
            percentile(&times[1], 0.99),
            rows / one
        );
    }
    println!("\nthe slowest read of rows against one score, at the median: {worst:.2}x (target at most 1.5x)");
    Ok(())
}
