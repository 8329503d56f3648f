//! `bench read`: the read API on a large board next to the bare Redis
//! commands each read needs.

use super::*;

/// `rankflow-tools bench read`: a 1,000,000-member board, the read API timed
/// in-process against the bare Redis commands.
pub async fn read(redis_url: &str, members: u64, samples: usize) -> Result<(), String> {
    use tower::ServiceExt;
    let (conn, router) = fill(redis_url, members).await?;
    let health = Arc::new(rankflow::health::Health::default());
    let state = rankflow::http::AppState::new(router.clone(), health, 1000);
    state.connected(rankflow::store::Reader::new(conn.clone(), None));
    let app = rankflow::http::app(state);
    let key = "lb:{big}:all";
    let dense_key = "lb:{big}:_dense:all";
    let mut rng = rand_seed(6);
    // Cursors of pages of 100 (fewer on a board under 400 members): after
    // the first page, and 5,000 pages deep (or half way down a smaller board).
    let size = 100.min(members / 4).max(1);
    let deep = (5000 * size).min(members / 2 / size * size).max(size);
    let mut cursors = Vec::new();
    for offset in [0, deep - size] {
        let req = axum::http::Request::get(format!("/v1/boards/big/top?limit={size}&offset={offset}"))
            .body(axum::body::Body::empty())
            .map_err(|e| e.to_string())?;
        let resp = app.clone().oneshot(req).await.map_err(|e| e.to_string())?;
        let body = axum::body::to_bytes(resp.into_body(), 1 << 24).await.map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        cursors.push(v["next_cursor"].as_str().ok_or("a page of the top carried no next_cursor")?.to_string());
    }
    let deep_name = format!("cursor page of {size}, {} pages deep", deep / size);
    let near_name = format!("cursor page of {size}, page 2");
    let reads = [
        "top 10",
        "top 100",
        "top 100, meta = true",
        "player rank",
        "around me (radius 2)",
        "dense rank (top page)",
        "friends (100 players)",
        near_name.as_str(),
        deep_name.as_str(),
    ];
    let mut results: Vec<(&str, Vec<f64>, Vec<f64>)> = Vec::new();
    let bar = rankflow::progress::bar((reads.len() * samples) as u64, "timing reads");
    for what in reads {
        let (mut api, mut bare) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for _ in 0..samples {
            bar.inc(1);
            let player = format!("player-{:07}", rand::Rng::random_range(&mut rng, 0..members));
            let friends: Vec<String> =
                (0..100).map(|_| format!("player-{:07}", rand::Rng::random_range(&mut rng, 0..members))).collect();
            let uri = match what {
                "top 10" => "/v1/boards/big/top?limit=10".to_string(),
                "top 100" => "/v1/boards/big/top?limit=100".to_string(),
                "top 100, meta = true" => "/v1/boards/bigmeta/top?limit=100".to_string(),
                "player rank" => format!("/v1/boards/big/players/{player}"),
                "around me (radius 2)" => format!("/v1/boards/big/players/{player}/around?radius=2"),
                "friends (100 players)" => "/v1/boards/big/players".to_string(),
                w if w == near_name => format!("/v1/boards/big/top?limit={size}&cursor={}", cursors[0]),
                "dense rank (top page)" => format!(
                    "/v1/boards/big/top?limit=10&rank=dense&offset={}",
                    rand::Rng::random_range(&mut rng, 0..members - 10)
                ),
                _ => format!("/v1/boards/big/top?limit={size}&cursor={}", cursors[1]),
            };
            let req = if what.starts_with("friends") {
                let body = serde_json::json!({ "players": friends }).to_string();
                axum::http::Request::post(uri).body(axum::body::Body::from(body))
            } else {
                axum::http::Request::get(uri).body(axum::body::Body::empty())
            }
            .map_err(|e| e.to_string())?;
            let t = Instant::now();
            let resp = app.clone().oneshot(req).await.map_err(|e| e.to_string())?;
            let _ = axum::body::to_bytes(resp.into_body(), 1 << 24).await;
            api.push(t.elapsed().as_secs_f64() * 1000.0);

            let t = Instant::now();
            let page = Page { key, dense_key, size, deep, near: &near_name };
            bare_read(conn.clone(), what, &page, &player, &friends).await?;
            bare.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        results.push((what, api, bare));
    }
    bar.finish_and_clear();
    report(members, samples, results);
    Ok(())
}

/// The reads' boards (`big`, and `bigmeta` with metadata), filled with
/// `members` members through the store on a flushed Redis.
pub(super) async fn fill(redis_url: &str, members: u64) -> Result<(RedisConn, Arc<Router>), String> {
    let cfg = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n[redis]\nurl = \"{redis_url}\"\n\
         [[board]]\nid = \"big\"\non = [\"m\"]\nmode = \"best\"\nperiods = [\"all_time\"]\n\
         [[board]]\nid = \"bigmeta\"\non = [\"m\"]\nmode = \"best\"\nperiods = [\"all_time\"]\nmeta = true\n"
    );
    let (settings, conn, store) = open_store(&cfg).await?;
    let router = Arc::new(Router::new(settings.boards.clone(), "lb"));
    flush(&conn).await?;
    eprintln!("bench: filling a board of {members} members through the store");
    let mut g = rand_seed(5);
    let now = chrono::Utc::now().timestamp_millis();
    let events: Vec<(i32, i64, i64, Event)> = (0..members)
        .map(|i| {
            let score = rand::Rng::random_range(&mut g, 0..200_000);
            // A display name: what studios keep beside a score most often.
            let meta = Some(format!(r#"{{"name":"Player {i:07}"}}"#));
            let e = m_event(&mut g, format!("player-{i:07}"), score, now, meta);
            (0, i as i64, now, e)
        })
        .collect();
    let (fill, _) = store_path(&store, &router, &events, 2000).await?;
    eprintln!("bench: filled in {:.1}s ({:.0} events/s through the store)", fill.as_secs_f64(), rate(members, fill));
    wait_settled(&conn).await?;
    Ok((conn, router))
}

/// The board keys and pages the bare reads address.
#[derive(Clone, Copy)]
pub(super) struct Page<'a> {
    pub(super) key: &'a str,
    pub(super) dense_key: &'a str,
    pub(super) size: u64,
    pub(super) deep: u64,
    /// The name of the read of page 2 by cursor.
    pub(super) near: &'a str,
}

/// The bare Redis commands the read `what` needs, sent straight to Redis.
pub(super) async fn bare_read(
    mut c: RedisConn,
    what: &str,
    page: &Page<'_>,
    player: &str,
    friends: &[String],
) -> Result<(), String> {
    match what {
        w if w == "top 10" || w == "top 100" || w == page.near => {
            let (start, n) = match what {
                "top 10" => (0, 10),
                "top 100" => (0, 100),
                _ => (page.size, page.size),
            };
            let _: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(page.key)
                .arg(start)
                .arg(start + n - 1)
                .arg("REV")
                .arg("WITHSCORES")
                .query_async(&mut c)
                .await
                .map_err(|e| e.to_string())?;
        }
        "top 100, meta = true" => {
            let top: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg("lb:{bigmeta}:all")
                .arg(0)
                .arg(99)
                .arg("REV")
                .arg("WITHSCORES")
                .query_async(&mut c)
                .await
                .map_err(|e| e.to_string())?;
            let names: Vec<&String> = top.iter().map(|(m, _)| m).collect();
            let _: Vec<Option<String>> = redis::cmd("HMGET")
                .arg("lb:{bigmeta}:_meta:all")
                .arg(names)
                .query_async(&mut c)
                .await
                .map_err(|e| e.to_string())?;
        }
        "player rank" => {
            let _: (Option<f64>, Option<i64>) = redis::pipe()
                .zscore(page.key, player)
                .zrevrank(page.key, player)
                .query_async(&mut c)
                .await
                .map_err(|e| e.to_string())?;
        }
        "around me (radius 2)" => {
            let r: Option<i64> = redis::cmd("ZREVRANK")
                .arg(page.key)
                .arg(player)
                .query_async(&mut c)
                .await
                .map_err(|e| e.to_string())?;
            let r = r.unwrap_or(0);
            let _: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(page.key)
                .arg((r - 2).max(0))
                .arg(r + 2)
                .arg("REV")
                .arg("WITHSCORES")
                .query_async(&mut c)
                .await
                .map_err(|e| e.to_string())?;
        }
        w if w.starts_with("friends") => {
            let mut p = redis::pipe();
            for f in friends {
                p.zscore(page.key, f).zrevrank(page.key, f);
            }
            let _: Vec<Option<f64>> = p.query_async(&mut c).await.map_err(|e| e.to_string())?;
        }
        "dense rank (top page)" => {
            let s: Option<f64> =
                redis::cmd("ZSCORE").arg(page.key).arg(player).query_async(&mut c).await.map_err(|e| e.to_string())?;
            let _: i64 = redis::cmd("ZCOUNT")
                .arg(page.dense_key)
                .arg(format!("({}", s.unwrap_or(0.0)))
                .arg("+inf")
                .query_async(&mut c)
                .await
                .map_err(|e| e.to_string())?;
        }
        _ => {
            let _: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(page.key)
                .arg(page.deep)
                .arg(page.deep + page.size - 1)
                .arg("REV")
                .arg("WITHSCORES")
                .query_async(&mut c)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The table of reads timed through the API and bare, and what metadata adds to a top-100 read.
fn report(members: u64, samples: usize, results: Vec<(&str, Vec<f64>, Vec<f64>)>) {
    println!("\nboard of {members} members, {samples} samples each (ms):\n");
    println!("| read | API p50 | API p99 | bare Redis p50 | bare Redis p99 | bare commands |");
    println!("|---|---:|---:|---:|---:|---|");
    let mut top100 = [(0.0, 0.0); 2];
    for (what, mut api, mut bare) in results {
        api.sort_by(f64::total_cmp);
        bare.sort_by(f64::total_cmp);
        match what {
            "top 100" => top100[0] = (percentile(&api, 0.5), percentile(&api, 0.99)),
            "top 100, meta = true" => top100[1] = (percentile(&api, 0.5), percentile(&api, 0.99)),
            _ => {}
        }
        let cmds = match what {
            "top 10" => "ZRANGE 0 9 REV WITHSCORES",
            "top 100" => "ZRANGE 0 99 REV WITHSCORES",
            "top 100, meta = true" => "ZRANGE 0 99 REV WITHSCORES, then HMGET of the 100 metas",
            "player rank" => "ZSCORE + ZREVRANK (pipelined)",
            "around me (radius 2)" => "ZREVRANK, then ZRANGE",
            "dense rank (top page)" => "ZSCORE, then ZCOUNT on the dense index",
            "friends (100 players)" => "ZSCORE + ZREVRANK of each (pipelined)",
            _ => "ZRANGE of the same page by offset",
        };
        println!(
            "| {what} | {:.3} | {:.3} | {:.3} | {:.3} | {cmds} |",
            percentile(&api, 0.5),
            percentile(&api, 0.99),
            percentile(&bare, 0.5),
            percentile(&bare, 0.99)
        );
    }
    let [(p50, p99), (meta_p50, meta_p99)] = top100;
    println!(
        "\nmeta adds {:+.0}% to a top-100 read at p50 ({p50:.3} -> {meta_p50:.3} ms), {:+.0}% at p99 ({p99:.3} -> {meta_p99:.3} ms)",
        100.0 * (meta_p50 / p50 - 1.0),
        100.0 * (meta_p99 / p99 - 1.0)
    );
}
