//! Reads for browsers and caches through a real worker, Apache Kafka and Redis,
//! with curl as the client (not ours: it decodes gzip and br itself): CORS
//! answers and preflights for a listed and an unlisted origin; an `ETag`
//! that stays while the board does not change and changes when it does;
//! 304 on `If-None-Match`; `Cache-Control` per kind of read; compressed
//! answers equal to the plain one; the live stream uncompressed and still
//! resuming; request metrics by route pattern. And nginx with the
//! repository's example config in front: 50 clients reading one top for
//! 10 seconds cost rankflow about one read a second, and no client is
//! handed an answer older than max-age plus one refresh.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::curl::{curl, Answer};
use support::league::wait_for;
use support::nginx::Nginx;
use support::*;

const ORIGIN: &str = "https://play.example.com";

const BOARDS: &str = r#"
[[board]]
id = "points"
on = ["match_finished"]
mode = "sum"
periods = ["daily", "all_time"]
close_after = "1h"
"#;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn origin(o: &str) -> String {
    format!("Origin: {o}")
}

/// The first entry of a top's answer: (player, score).
fn leader(a: &Value) -> (String, i64) {
    let e = &a["entries"][0];
    (e["player_id"].as_str().unwrap_or_default().to_string(), e["score"].as_i64().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_read_across_origins_and_caches_keep_and_revalidate_answers() {
    let stack = Stack::start(1).await;
    let sealed = stack.sealed_topic().await;
    let boards = format!("[sealing]\ntopic = \"{sealed}\"\n{BOARDS}");
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &boards);
    cfg.http_extra = format!("cors_origins = [\"{ORIGIN}\"]\ncache_max_age = \"2s\"");
    let w = Worker::spawn(&cfg);
    let now = now_ms();
    let records: Vec<Record> =
        (0..150).map(|i| event_record("match_finished", &format!("player-{i:03}"), 10 + i, now, now, None)).collect();
    stack.broker.produce(&stack.topic, &records).await;
    let base = format!("http://127.0.0.1:{}", cfg.http_port);
    let top = format!("{base}/v1/boards/points/top?limit=100");
    wait_for(Duration::from_secs(60), &|| w.log(), || async {
        w.get_json("/v1/boards/points/top").await.1["total"] == 150
    })
    .await;

    // CORS: a listed origin may read; another gets no CORS headers; both answers say Vary: Origin.
    let listed = curl(&top, &["-H", &origin(ORIGIN)]);
    assert_eq!(listed.status, 200);
    assert_eq!(listed.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(listed.header("access-control-expose-headers"), Some("ETag"));
    assert!(listed.joined("vary").contains("origin"), "{:?}", listed.headers);
    let other = curl(&top, &["-H", &origin("https://elsewhere.example.com")]);
    assert_eq!(other.status, 200);
    assert!(other.names_starting("access-control-").is_empty(), "{:?}", other.headers);
    assert!(other.joined("vary").contains("origin"));
    assert_eq!(other.body, listed.body);
    // Preflights for the friends POST: 204, the methods and headers for a listed origin, nothing for another.
    let friends = format!("{base}/v1/boards/points/players");
    let preflight = |o: &str| {
        let ask = [
            "-X",
            "OPTIONS",
            "-H",
            "Access-Control-Request-Method: POST",
            "-H",
            "Access-Control-Request-Headers: content-type",
        ];
        curl(&friends, &[&ask[..], &["-H", &origin(o)]].concat())
    };
    let ok = preflight(ORIGIN);
    assert_eq!(ok.status, 204);
    assert_eq!(ok.header("access-control-allow-origin"), Some(ORIGIN));
    let methods = ok.joined("access-control-allow-methods");
    assert!(methods.contains("post") && methods.contains("get"), "{methods}");
    assert!(ok.joined("access-control-allow-headers").contains("content-type"));
    let refused = preflight("https://elsewhere.example.com");
    assert_eq!(refused.status, 204);
    assert!(refused.names_starting("access-control-").is_empty(), "{:?}", refused.headers);
    let posted = curl(
        &friends,
        &["-H", &origin(ORIGIN), "-H", "Content-Type: application/json", "-d", r#"{"players":["player-001"]}"#],
    );
    assert_eq!(posted.status, 200, "{}", posted.text());
    assert_eq!(posted.header("access-control-allow-origin"), Some(ORIGIN));

    // ETag: the same while the board does not change; 304 with no body on If-None-Match.
    let tag = listed.header("etag").expect("an ETag").to_string();
    assert!(tag.starts_with("W/\""), "{tag}");
    assert_eq!(curl(&top, &[]).header("etag"), Some(tag.as_str()));
    let unchanged = curl(&top, &["-H", &format!("If-None-Match: {tag}"), "--compressed"]);
    assert_eq!(unchanged.status, 304);
    assert!(unchanged.body.is_empty());
    assert_eq!(unchanged.header("etag"), Some(tag.as_str()));
    assert_eq!(unchanged.header("cache-control"), Some("public, max-age=2"));
    // The board changes: a new tag, and the old one gets the whole answer.
    let bump = event_record("match_finished", "player-000", 1000, now_ms(), now_ms(), None);
    stack.broker.produce(&stack.topic, &[bump]).await;
    wait_for(Duration::from_secs(30), &|| w.log(), || async {
        leader(&curl(&top, &[]).json()) == ("player-000".to_string(), 1010)
    })
    .await;
    let changed = curl(&top, &["-H", &format!("If-None-Match: {tag}")]);
    assert_eq!(changed.status, 200);
    assert_ne!(changed.header("etag"), Some(tag.as_str()));

    // Cache-Control per kind of read.
    let control = |path: &str| {
        let a = curl(&format!("{base}{path}"), &[]);
        (a.status, a.header("cache-control").unwrap_or("(none)").to_string())
    };
    assert_eq!(control("/v1/boards/points/top"), (200, "public, max-age=2".into()));
    assert_eq!(control("/v1/boards"), (200, "public, max-age=2".into()));
    assert_eq!(control("/v1/boards/points/players/player-001"), (200, "public, max-age=2".into()));
    assert_eq!(control("/v1/boards/points/top?fresh=true"), (200, "no-store".into()));
    assert_eq!(control("/v1/boards/nope/top"), (404, "no-store".into()));
    assert_eq!(control("/v1/boards/points/top?limit=x"), (400, "no-store".into()));
    assert_eq!(control("/readyz"), (200, "no-store".into()));
    assert_eq!(posted.header("cache-control"), Some("public, max-age=2"));
    assert!(posted.header("etag").is_some());

    compression(&top, &base);
    live_stream(&base);

    // A sealed period and a player's history do not change: a long max-age.
    let day = chrono::Utc::now().format("d:%Y-%m-%d").to_string();
    w.close_and_wait("points", &day);
    assert_eq!(control(&format!("/v1/boards/points/top?period={day}:final")), (200, "public, max-age=3600".into()));
    assert_eq!(control(&format!("/v1/boards/points/top?period={day}:final&fresh=true")), (200, "no-store".into()));
    assert_eq!(control("/v1/boards/points/players/player-000/history"), (200, "public, max-age=3600".into()));

    // Request metrics: by route pattern and status, never a player id.
    let text = w.http_get("/metrics").await.1;
    let all = samples(&text);
    let top_route = [("route", "/v1/boards/{board}/top")];
    assert!(sum(&all, "rankflow_http_requests_total", &[top_route[0], ("status", "200")]) >= 10.0);
    assert!(sum(&all, "rankflow_http_requests_total", &[top_route[0], ("status", "304")]) >= 1.0);
    assert!(sum(&all, "rankflow_http_requests_total", &[top_route[0], ("status", "400")]) >= 1.0);
    assert!(
        sum(&all, "rankflow_http_requests_total", &[("route", "/v1/boards/{board}/players"), ("status", "204")]) >= 2.0
    );
    assert!(sum(&all, "rankflow_http_request_seconds_count", &top_route) >= 14.0);
    let labelled: Vec<&str> =
        text.lines().filter(|l| l.starts_with("rankflow_http_") && l.contains("player-")).collect();
    assert!(labelled.is_empty(), "{labelled:?}");
}

/// gzip and br as curl decodes them equal the plain answer; a small answer is sent plain.
fn compression(top: &str, base: &str) {
    let plain = curl(top, &[]);
    assert_eq!(plain.header("content-encoding"), None);
    assert!(plain.body.len() > 1024, "a top-100 answer is over 1 KiB: {}", plain.body.len());
    for encoding in ["gzip", "br"] {
        let a = curl(top, &["--compressed", "-H", &format!("Accept-Encoding: {encoding}")]);
        assert_eq!(a.status, 200);
        assert_eq!(a.header("content-encoding"), Some(encoding));
        assert!(a.joined("vary").contains("accept-encoding"));
        assert_eq!(a.body, plain.body, "{encoding}");
        assert_eq!(a.header("etag"), plain.header("etag"));
    }
    let offered = curl(top, &["--compressed", "-H", "Accept-Encoding: gzip, br"]);
    assert_eq!(offered.header("content-encoding"), Some("br"));
    let small = curl(&format!("{base}/v1/boards/points/players/player-001"), &["--compressed"]);
    assert_eq!(small.status, 200);
    assert!(small.body.len() < 1024);
    assert_eq!(small.header("content-encoding"), None);
}

/// The first `id:` and `data:` of a stream's text.
fn first_event(a: &Answer) -> (String, Value) {
    let text = a.text();
    let id = text.lines().find_map(|l| l.strip_prefix("id:")).map(|s| s.trim().to_string());
    let data = text.lines().find_map(|l| l.strip_prefix("data:")).map(|s| serde_json::from_str(s.trim()).unwrap());
    (id.unwrap_or_else(|| panic!("no id in {text}")), data.unwrap_or_else(|| panic!("no data in {text}")))
}

/// The live stream, offered gzip and br from a listed origin: plain, CORS, and it resumes.
fn live_stream(base: &str) {
    let live = format!("{base}/v1/boards/points/live?limit=5");
    let args = ["-N", "--max-time", "3", "--compressed", "-H", "Accept-Encoding: gzip, br", "-H"];
    let first = curl(&live, &[&args[..], &[&origin(ORIGIN)]].concat());
    assert_eq!(first.status, 200);
    assert!(first.header("content-type").is_some_and(|t| t.starts_with("text/event-stream")));
    assert_eq!(first.header("content-encoding"), None);
    assert_eq!(first.header("access-control-allow-origin"), Some(ORIGIN));
    let (id, top) = first_event(&first);
    assert_eq!(top["entries"].as_array().map(Vec::len), Some(5));
    let resumed = curl(&live, &[&args[..], &[&origin(ORIGIN), "-H", &format!("Last-Event-ID: {id}")]].concat());
    assert_eq!(resumed.header("content-encoding"), None);
    assert_eq!(first_event(&resumed).1["entries"], top["entries"]);
}

/// What the clients were handed through the cache: (when, the clock's score).
type Seen = Arc<Mutex<Vec<(Instant, i64)>>>;

/// The clock player's score in a top's answer.
fn clock_of(body: &[u8]) -> Option<i64> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v["entries"].as_array()?.iter().find(|e| e["player_id"] == "clock").and_then(|e| e["score"].as_i64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_in_front_answers_fifty_readers_with_about_one_read_a_second() {
    const CLIENTS: usize = 50;
    const READING: Duration = Duration::from_secs(10);
    const MAX_AGE: Duration = Duration::from_secs(1);
    let stack = Stack::start(1).await;
    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    let w = Worker::spawn(&cfg);
    let now = now_ms();
    let fill: Vec<Record> =
        (0..120).map(|i| event_record("match_finished", &format!("player-{i:03}"), 10 + i, now, now, None)).collect();
    stack.broker.produce(&stack.topic, &fill).await;
    wait_for(Duration::from_secs(60), &|| w.log(), || async {
        w.get_json("/v1/boards/points/top").await.1["total"] == 120
    })
    .await;
    let nginx = Nginx::start(cfg.http_port);

    // The board changes ten times a second: the clock player, always first, gains 1000 points each time.
    let ticks: Vec<Record> =
        (0..200).map(|_| event_record("match_finished", "clock", 1000, now_ms(), now_ms(), None)).collect();
    let producing = stack.broker.produce_paced(&stack.topic, ticks, 1, Duration::from_millis(100));
    // When rankflow itself first answered each clock score (read past the cache, on another route).
    let first_seen: Arc<Mutex<BTreeMap<i64, Instant>>> = Arc::default();
    let watcher = {
        let (first_seen, port) = (first_seen.clone(), cfg.http_port);
        tokio::spawn(async move {
            let mut c = KeepAlive::connect(port).await;
            loop {
                let (_, _, body) = c.get("/v1/boards/points/players/clock").await;
                if let Some(score) = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["score"].as_i64()) {
                    first_seen.lock().unwrap().entry(score).or_insert_with(Instant::now);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let top_route = [("route", "/v1/boards/{board}/top")];
    let before = w.metric("rankflow_http_requests_total", &top_route).await;
    let seen: Seen = Arc::default();
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (seen, port) = (seen.clone(), nginx.port);
            tokio::spawn(async move {
                let mut c = KeepAlive::connect(port).await;
                let mut n = 0;
                while started.elapsed() < READING {
                    let (status, _, body) = c.get("/v1/boards/points/top?limit=100").await;
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                    let clock = clock_of(&body).expect("the clock is in the top");
                    seen.lock().unwrap().push((Instant::now(), clock));
                    n += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                n
            })
        })
        .collect();
    let mut reads = 0;
    for c in clients {
        reads += c.await.unwrap();
    }
    let elapsed = started.elapsed();
    let origin_reads = w.metric("rankflow_http_requests_total", &top_route).await - before;
    watcher.abort();
    producing.abort();

    // About one read a second of the key reached rankflow, however many were made.
    let allowed = elapsed.as_secs_f64() / MAX_AGE.as_secs_f64() + 2.0;
    eprintln!("{reads} reads through nginx in {elapsed:?}; rankflow answered {origin_reads} (at most {allowed:.0})");
    assert!(reads >= CLIENTS * 100, "{reads} reads");
    assert!(origin_reads >= 3.0 && origin_reads <= allowed, "rankflow answered {origin_reads} top reads");
    // No answer older than max-age plus one refresh: a score is stale from when
    // rankflow first answered a newer one. nginx counts max-age in whole
    // seconds, so an answer it keeps may live up to one second past it;
    // half a second more for the refresh on a loaded machine.
    let first_seen = first_seen.lock().unwrap().clone();
    let bound = MAX_AGE * 2 + Duration::from_millis(500);
    let mut oldest = Duration::ZERO;
    for (at, score) in seen.lock().unwrap().iter() {
        let Some((_, newer)) = first_seen.range(score + 1..).next() else { continue };
        if *at > *newer {
            oldest = oldest.max(*at - *newer);
        }
    }
    eprintln!("oldest answer handed out: {oldest:?} past its replacement");
    assert!(
        oldest <= bound,
        "an answer {oldest:?} past its replacement (bound {bound:?})\n{}",
        nginx.access_log().len()
    );
    let scores: Vec<i64> = first_seen.keys().copied().collect();
    assert!(scores.len() >= 20, "the clock moved while the clients read: {scores:?}");
}
