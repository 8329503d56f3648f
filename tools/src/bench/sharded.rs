//! `bench sharded`: one board's write throughput sharded over a Redis
//! Cluster's primaries against the same board unsharded, each primary's
//! share of Redis CPU during the sharded run, and merged reads on a large
//! sharded board next to the same reads unsharded.

use super::*;

/// Each primary's Redis CPU seconds so far (`INFO cpu`), by address.
async fn primaries_cpu(settings: &Settings) -> Result<Vec<f64>, String> {
    let mut out = Vec::new();
    for mut c in rankflow::store::node_connections(&settings.redis).await? {
        let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut c).await.map_err(|e| format!("INFO: {e}"))?;
        out.push(cpu_seconds(&info));
    }
    Ok(out)
}

fn events_for(count: u64, players: u64, seed: u64) -> Vec<(i32, i64, i64, Event)> {
    let now = chrono::Utc::now().timestamp_millis();
    let mut g = rand_seed(seed);
    (0..count)
        .map(|i| {
            let player = format!("player-{:07}", rand::Rng::random_range(&mut g, 0..players));
            let score = rand::Rng::random_range(&mut g, 0..1_000);
            let e = m_event(&mut g, player, score, now, None);
            ((i % 8) as i32, (i / 8) as i64, now, e)
        })
        .collect()
}

/// The read API in-process over the boards of `cfg`, on a Redis emptied
/// then filled through the store with `events` (players' first events).
pub(super) async fn filled_app(cfg: &str, events: impl Iterator<Item = Event>) -> Result<axum::Router, String> {
    let (settings, conn, store) = open_store(cfg).await?;
    flush(&conn).await?;
    let router = Arc::new(Router::new(settings.boards.clone(), "lb"));
    let now = chrono::Utc::now().timestamp_millis();
    let fill: Vec<(i32, i64, i64, Event)> =
        events.enumerate().map(|(i, e)| ((i % 8) as i32, (i / 8) as i64, now, e)).collect();
    store_path(&store, &router, &fill, 2000).await?;
    let health = Arc::new(rankflow::health::Health::default());
    let state = rankflow::http::AppState::new(router, health, 1000);
    state.connected(rankflow::store::Reader::new(conn, None));
    Ok(rankflow::http::app(state))
}

/// `rankflow-tools bench sharded --redis <cluster seed>`.
pub async fn sharded(redis_url: &str, events: u64, members: u64, samples: usize) -> Result<(), String> {
    let board = |id: &str, shards: Option<u32>| {
        format!(
            "[[board]]\nid = \"{id}\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\ndense_rank = false\n{}",
            shards.map(|n| format!("shards = {n}\n")).unwrap_or_default()
        )
    };
    let head = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n[redis]\nurl = \"{redis_url}\"\ncluster = true\n"
    );
    let masters = rankflow::store::node_connections(
        &config::load_str(&(head.clone() + &board("x", None)), Vec::new()).map_err(|e| e.to_string())?.redis,
    )
    .await?
    .len();

    // Writes: the same events to one board, unsharded, then sharded over the primaries.
    println!("\nwrites of one sum board, {events} events over 100,000 players, on {masters} primaries:\n");
    println!("| board | events/s | Redis CPU share per primary |");
    println!("|---|---:|---|");
    let mut rates = Vec::new();
    // As many shards as primaries, and four times as many: a shard's tag
    // lands on a slot by its CRC16, so few shards may share a primary.
    for (id, shards) in [("flat", None), ("wide", Some(masters as u32)), ("wider", Some(4 * masters as u32))] {
        let (settings, conn, store) = open_store(&(head.clone() + &board(id, shards))).await?;
        flush(&conn).await?;
        let router = Router::new(settings.boards.clone(), "lb");
        let evs = events_for(events, 100_000, 11);
        let before = primaries_cpu(&settings).await?;
        let (took, _) = store_path(&store, &router, &evs, 2000).await?;
        let after = primaries_cpu(&settings).await?;
        let used: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let sum: f64 = used.iter().sum::<f64>().max(1e-9);
        let shares: Vec<String> = used.iter().map(|u| format!("{:.0}%", 100.0 * u / sum)).collect();
        let r = rate(events, took);
        rates.push((r, used.iter().cloned().fold(0.0, f64::max) / sum));
        println!(
            "| {} | {r:.0} | {} |",
            shards.map(|n| format!("{n} shards")).unwrap_or("unsharded".into()),
            shares.join(" / ")
        );
    }
    let (flat, _) = rates[0];
    for (label, (r, busiest)) in ["as many shards as primaries", "four shards per primary"].iter().zip(&rates[1..]) {
        println!(
            "\n{label}: sharded / unsharded throughput {:.2}x on this machine; the busiest primary did {:.0}% of the \
             Redis work, so with a core per primary the projected ratio is {:.2}x (1 / busiest share, bounded by the client)",
            r / flat,
            100.0 * busiest,
            1.0 / busiest.max(1e-9)
        );
    }

    // Reads: a board of `members` members sharded 8 ways, and unsharded.
    let cfg = head + &board("ref", None) + &board("big", Some(8));
    eprintln!("bench: filling two boards of {members} members");
    let now = chrono::Utc::now().timestamp_millis();
    let mut g = rand_seed(12);
    let fill = (0..members).map(|i| {
        let score = rand::Rng::random_range(&mut g, 0..200_000);
        m_event(&mut g, format!("player-{i:07}"), score, now, None)
    });
    let app = filled_app(&cfg, fill).await?;
    let mut rng = rand_seed(13);
    println!("\nreads of a {members}-member board, {samples} samples each (ms, in-process, server side):\n");
    println!("| read | unsharded p50 | unsharded p99 | 8 shards p50 | 8 shards p99 |");
    println!("|---|---:|---:|---:|---:|");
    for what in ["top 100", "player rank", "around me (radius 2)", "rank of a score"] {
        let mut times = [Vec::with_capacity(samples), Vec::with_capacity(samples)];
        for _ in 0..samples {
            let player = format!("player-{:07}", rand::Rng::random_range(&mut rng, 0..members));
            let score: i64 = rand::Rng::random_range(&mut rng, 0..200_000);
            for (slot, b) in ["ref", "big"].iter().enumerate() {
                let uri = match what {
                    "top 100" => format!("/v1/boards/{b}/top?limit=100"),
                    "player rank" => format!("/v1/boards/{b}/players/{player}"),
                    "around me (radius 2)" => format!("/v1/boards/{b}/players/{player}/around?radius=2"),
                    _ => format!("/v1/boards/{b}/rank-of?score={score}"),
                };
                let req = axum::http::Request::get(uri).body(axum::body::Body::empty()).map_err(|e| e.to_string())?;
                let t = Instant::now();
                let resp = tower::ServiceExt::oneshot(app.clone(), req).await.map_err(|e| e.to_string())?;
                let _ = axum::body::to_bytes(resp.into_body(), 1 << 24).await;
                times[slot].push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
        for t in &mut times {
            t.sort_by(f64::total_cmp);
        }
        println!(
            "| {what} | {:.3} | {:.3} | {:.3} | {:.3} |",
            percentile(&times[0], 0.5),
            percentile(&times[0], 0.99),
            percentile(&times[1], 0.5),
            percentile(&times[1], 0.99)
        );
    }
    Ok(())
}
