//! Start-up, shutdown and the HTTP server's limits as an orchestrator and
//! its clients see them: liveness from the first second, readiness that says
//! why it is not ready and turns true as soon as partitions are assigned, an
//! exit status that keeps a start-up failure, and clients that cannot hold
//! or flood the server.

use std::time::Duration;

use support::stream::{self, BOARDS};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A GET that must be answered within `within`.
async fn get_within(port: u16, path: &str, within: Duration) -> (u16, String) {
    tokio::time::timeout(within, http_get(port, path))
        .await
        .unwrap_or_else(|_| panic!("GET {path} was not answered within {within:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn liveness_answers_while_redis_is_down_at_start_and_a_start_failure_keeps_its_exit_status() {
    let redis_port = free_port();
    let cfg = WorkerConfig {
        // No broker is needed: the consumer is refused at creation (below).
        brokers: "127.0.0.1:1".into(),
        redis_url: format!("redis://127.0.0.1:{redis_port}"),
        topic: random_name("scores"),
        extra_topics: Vec::new(),
        dead_letter_topic: random_name("dlq"),
        admin_topics: Vec::new(),
        group: random_name("group"),
        http_port: free_port(),
        boards: BOARDS.into(),
        // librdkafka refuses an unknown property when the consumer is created,
        // once Redis is up: a start-up failure.
        extra_kafka_options: vec![("no.such.property".into(), "1".into())],
        worker_section: "shutdown_timeout = \"100ms\"\nmax_backoff = \"200ms\"\n".into(),
        rust_log: "info,librdkafka=warn,rdkafka=warn".into(),
        redis_extra: String::new(),
        http_extra: String::new(),
        kafka_extra: String::new(),
    };
    let mut w = Worker::spawn(&cfg);
    wait_http(w.http_port, Duration::from_secs(10)).await;

    // Redis is not there: liveness answers anyway, readiness says why not.
    let (status, _) = get_within(w.http_port, "/healthz", Duration::from_secs(2)).await;
    assert_eq!(status, 200);
    let (status, body) = get_within(w.http_port, "/readyz", Duration::from_secs(2)).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("Redis is not connected yet"), "{body}");
    let (status, body) = get_within(w.http_port, "/v1/boards/points/top", Duration::from_secs(2)).await;
    assert_eq!(status, 503, "{body}");

    // A client that never finishes its request keeps the HTTP server's
    // shutdown waiting past the watchdog's deadline (shutdown_timeout +
    // 0.5 s), so the watchdog is what ends the process.
    let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", w.http_port)).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n").await.unwrap();

    let _redis = Redis::start_on(redis_port);
    let status = w.wait_exit(Duration::from_secs(30)).expect("the worker exits after failing to start");
    assert_eq!(status.code(), Some(2), "a start-up failure must not exit 0; log:\n{}", w.log());
    assert!(w.log().contains("could not start"), "{}", w.log());
    drop(slow);
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_reports_kafka_up_as_soon_as_partitions_are_assigned() {
    let Stack { redis, broker, topic, dlq } = Stack::start(2).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let w = Worker::spawn(&cfg);
    wait_http(w.http_port, Duration::from_secs(10)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while w.metric("rankflow_assigned_partitions", &[]).await < 2.0 {
        assert!(std::time::Instant::now() < deadline, "partitions were never assigned:\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = w.http_get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"kafka\":true"), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_lag_is_exported_from_the_first_stored_offset_not_the_first_statistics() {
    let Stack { redis, broker, topic, dlq } = Stack::start(2).await;
    let s = stream::generate(2_000, 5);
    broker.produce(&topic, &s.records).await;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    // librdkafka's statistics would not come for ten minutes.
    cfg.extra_kafka_options.push(("statistics.interval.ms".into(), "600000".into()));
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 2, Duration::from_secs(120));
    let m = samples(&w.http_get("/metrics").await.1);
    let lag: Vec<_> = m.iter().filter(|(n, _, _)| n == "rankflow_consumer_lag").collect();
    assert_eq!(lag.len(), 2, "one lag series per partition: {lag:?}");
    assert!(lag.iter().all(|(_, _, v)| *v == 0.0), "every record applied, so no lag: {lag:?}");
}

/// A worker whose HTTP server runs with `http_extra`, beside a Redis but no
/// broker (the HTTP server needs none).
fn http_only_worker(redis: &Redis, http_extra: &str) -> Worker {
    let mut cfg = WorkerConfig {
        brokers: "127.0.0.1:1".into(),
        redis_url: redis.url(),
        topic: random_name("scores"),
        extra_topics: Vec::new(),
        dead_letter_topic: random_name("dlq"),
        admin_topics: Vec::new(),
        group: random_name("group"),
        http_port: free_port(),
        boards: BOARDS.into(),
        extra_kafka_options: Vec::new(),
        worker_section: "shutdown_timeout = \"2s\"\n".into(),
        rust_log: "info,librdkafka=error,rdkafka=error".into(),
        redis_extra: String::new(),
        http_extra: String::new(),
        kafka_extra: String::new(),
    };
    cfg.http_extra = http_extra.into();
    Worker::spawn(&cfg)
}

/// Sends raw bytes and reads the answer until the server closes the
/// connection (or `within` passes, which fails the test).
async fn raw_exchange(port: u16, request: &[u8], within: Duration) -> String {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // The server may answer, and close, before it has read all of a request it refuses.
    let _ = s.write_all(request).await;
    let mut buf = Vec::new();
    match tokio::time::timeout(within, s.read_to_end(&mut buf)).await {
        Ok(_) => String::from_utf8_lossy(&buf).into_owned(),
        Err(_) => panic!("the server kept the connection open for {within:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_client_is_cut_off_and_oversized_requests_are_refused_with_their_status() {
    let redis = Redis::start();
    let w = http_only_worker(&redis, "request_timeout = \"500ms\"\n");
    wait_http(w.http_port, Duration::from_secs(10)).await;

    // Headers that never end: the connection is closed after request_timeout.
    let answer =
        raw_exchange(w.http_port, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n", Duration::from_secs(10)).await;
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");

    // A body past the limit: 413, before the body is read.
    let big =
        format!("GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", 1 << 20);
    let answer = raw_exchange(w.http_port, big.as_bytes(), Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    // Headers past the limit: 431.
    let long = format!(
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Filler: {}\r\nConnection: close\r\n\r\n",
        "x".repeat(64 * 1024)
    );
    let answer = raw_exchange(w.http_port, long.as_bytes(), Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");

    // Still serving.
    let (status, _) = get_within(w.http_port, "/healthz", Duration::from_secs(2)).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_past_the_concurrency_cap_are_answered_503_and_a_stuck_one_408() {
    let redis = Redis::start();
    let w = http_only_worker(&redis, "request_timeout = \"3s\"\nmax_concurrent_requests = 1\n");
    wait_http(w.http_port, Duration::from_secs(10)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !w.log().contains("Worker started") {
        assert!(std::time::Instant::now() < deadline, "the worker never connected to Redis:\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Redis frozen: a read waits for it, holding the only place.
    redis.pause();
    let port = w.http_port;
    let stuck = tokio::spawn(async move { http_get(port, "/v1/boards/points/top").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = get_within(w.http_port, "/healthz", Duration::from_secs(2)).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("too many requests"), "{body}");
    let (status, body) = stuck.await.unwrap();
    redis.resume();
    assert_eq!(status, 408, "{body}");
    let (status, _) = get_within(w.http_port, "/healthz", Duration::from_secs(2)).await;
    assert_eq!(status, 200);
}
