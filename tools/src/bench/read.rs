//! `bench read`: the read API on a large board next to the bare Redis
//! commands each read needs.

use super::*;

/// `rankflow-tools bench read`: a 1,000,000-member board, the read API timed
/// in-process against the bare Redis commands.
pub async fn read(redis_url: &str, members: u64, samples: usize) -> Result<(), String> {
    use tower::ServiceExt;
    let cfg = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n[redis]\nurl = \"{redis_url}\"\n\
         [[board]]\nid = \"big\"\non = [\"m\"]\nmode = \"best\"\nperiods = [\"all_time\"]\n"
    );
    let (settings, conn, store) = open_store(&cfg).await?;
    let router = Arc::new(Router::new(settings.boards.clone(), "lb"));
    flush(&conn).await?;
    eprintln!("bench: filling a board of {members} members through the store");
    let mut g = rand_seed(5);
    let now = chrono::Utc::now().timestamp_millis();
    let events: Vec<(i32, i64, i64, Event)> = (0..members)
        .map(|i| {
            let e = Event {
                event_id: uuid::Builder::from_random_bytes(rand::Rng::random(&mut g)).into_uuid(),
                kind: "m".into(),
                player_id: format!("player-{i:07}"),
                score: rand::Rng::random_range(&mut g, 0..200_000),
                ts_ms: now,
                attrs: Default::default(),
            };
            (0, i as i64, now, e)
        })
        .collect();
    let (fill, _) = store_path(&store, &router, &events, 2000).await?;
    eprintln!("bench: filled in {:.1}s ({:.0} events/s through the store)", fill.as_secs_f64(), rate(members, fill));

    let health = Arc::new(rankflow::health::Health::default());
    let state = rankflow::http::AppState::new(router.clone(), health, 1000);
    state.connected(conn.clone());
    let app = rankflow::http::app(state);
    let key = "lb:{big}:all";
    let dense_key = "lb:{big}:_dense:all";
    let mut rng = rand_seed(6);
    let mut results: Vec<(&str, Vec<f64>, Vec<f64>)> = Vec::new();
    for what in ["top 10", "player rank", "around me (radius 2)", "dense rank (top page)"] {
        let (mut api, mut bare) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for _ in 0..samples {
            let player = format!("player-{:07}", rand::Rng::random_range(&mut rng, 0..members));
            let uri = match what {
                "top 10" => "/v1/boards/big/top?limit=10".to_string(),
                "player rank" => format!("/v1/boards/big/players/{player}"),
                "around me (radius 2)" => format!("/v1/boards/big/players/{player}/around?radius=2"),
                _ => format!(
                    "/v1/boards/big/top?limit=10&rank=dense&offset={}",
                    rand::Rng::random_range(&mut rng, 0..members - 10)
                ),
            };
            let req = axum::http::Request::get(uri).body(axum::body::Body::empty()).map_err(|e| e.to_string())?;
            let t = Instant::now();
            let resp = app.clone().oneshot(req).await.map_err(|e| e.to_string())?;
            let _ = axum::body::to_bytes(resp.into_body(), 1 << 20).await;
            api.push(t.elapsed().as_secs_f64() * 1000.0);

            let mut c = conn.clone();
            let t = Instant::now();
            match what {
                "top 10" => {
                    let _: Vec<(String, f64)> = redis::cmd("ZRANGE")
                        .arg(key)
                        .arg(0)
                        .arg(9)
                        .arg("REV")
                        .arg("WITHSCORES")
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                "player rank" => {
                    let _: (Option<f64>, Option<i64>) = redis::pipe()
                        .zscore(key, &player)
                        .zrevrank(key, &player)
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                "around me (radius 2)" => {
                    let r: Option<i64> = redis::cmd("ZREVRANK")
                        .arg(key)
                        .arg(&player)
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                    let r = r.unwrap_or(0);
                    let _: Vec<(String, f64)> = redis::cmd("ZRANGE")
                        .arg(key)
                        .arg((r - 2).max(0))
                        .arg(r + 2)
                        .arg("REV")
                        .arg("WITHSCORES")
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                _ => {
                    let s: Option<f64> = redis::cmd("ZSCORE")
                        .arg(key)
                        .arg(&player)
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                    let _: i64 = redis::cmd("ZCOUNT")
                        .arg(dense_key)
                        .arg(format!("({}", s.unwrap_or(0.0)))
                        .arg("+inf")
                        .query_async(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            bare.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        results.push((what, api, bare));
    }
    println!("\nboard of {members} members, {samples} samples each (ms):\n");
    println!("| read | API p50 | API p99 | bare Redis p50 | bare Redis p99 | bare commands |");
    println!("|---|---:|---:|---:|---:|---|");
    for (what, mut api, mut bare) in results {
        api.sort_by(f64::total_cmp);
        bare.sort_by(f64::total_cmp);
        let cmds = match what {
            "top 10" => "ZRANGE 0 9 REV WITHSCORES",
            "player rank" => "ZSCORE + ZREVRANK (pipelined)",
            "around me (radius 2)" => "ZREVRANK, then ZRANGE",
            _ => "ZSCORE, then ZCOUNT on the dense index",
        };
        println!(
            "| {what} | {:.3} | {:.3} | {:.3} | {:.3} | {cmds} |",
            percentile(&api, 0.5),
            percentile(&api, 0.99),
            percentile(&bare, 0.5),
            percentile(&bare, 0.99)
        );
    }
    Ok(())
}
