//! Start-up and shutdown as an orchestrator sees them: liveness from the
//! first second, readiness that says why it is not ready and turns true as
//! soon as partitions are assigned, and an exit status that keeps a
//! start-up failure.

mod support;

use std::time::Duration;

use support::stream::BOARDS;
use support::*;
use tokio::io::AsyncWriteExt;

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
        dead_letter_topic: random_name("dlq"),
        group: random_name("group"),
        http_port: free_port(),
        boards: BOARDS.into(),
        // librdkafka refuses an unknown property when the consumer is created,
        // once Redis is up: a start-up failure.
        extra_kafka_options: vec![("no.such.property".into(), "1".into())],
        worker_section: "shutdown_timeout = \"100ms\"\nmax_backoff = \"200ms\"\n".into(),
        rust_log: "info,librdkafka=warn,rdkafka=warn".into(),
        redis_extra: String::new(),
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
