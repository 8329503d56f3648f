//! The Schema Registry as rankflow meets it: down when the worker starts,
//! then back. Records wait for it (nothing dead-lettered, nothing skipped,
//! `/readyz` names it), then every one is applied once, each schema id is
//! fetched once, and only the id the registry does not have is
//! dead-lettered. No Schema Registry server installs here: the test serves
//! its one read, `GET /schemas/ids/{id}`, with basic authentication, as
//! Confluent's registry answers it; behind TLS (socat in front of it), it
//! is trusted through `ca_file`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use support::encode::{produce_with_headers, serialize, WithHeaders};
use support::{free_port, header, tls, wait_http, zset_values, Stack, Worker, WorkerConfig};

const EVENT_AVSC: &str = include_str!("../schemas/event.avsc");
/// `user:secret`, as basic authentication sends it.
const AUTH: &str = "Basic dXNlcjpzZWNyZXQ=";

/// The registry's schemas, and how often each id was answered.
#[derive(Clone, Default)]
struct Registry {
    schemas: Arc<HashMap<u32, Value>>,
    answered: Arc<Mutex<BTreeMap<u32, u32>>>,
}

async fn schema_by_id(State(r): State<Registry>, Path(id): Path<u32>, headers: HeaderMap) -> (StatusCode, Json<Value>) {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(AUTH) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"error_code": 401, "message": "Unauthorized"})));
    }
    *r.answered.lock().unwrap().entry(id).or_default() += 1;
    match r.schemas.get(&id) {
        Some(schema) => (StatusCode::OK, Json(schema.clone())),
        None => (StatusCode::NOT_FOUND, Json(json!({"error_code": 40403, "message": "Schema not found"}))),
    }
}

// Multi-threaded: the registry is served on this runtime while the harness
// blocks a thread waiting for the commits.
/// Serves the registry's read on `port`, with rankflow's Avro event as schema `id`.
async fn serve(port: u16, id: u32) -> Registry {
    let registry = Registry {
        schemas: Arc::new([(id, json!({"schema": EVENT_AVSC}))].into_iter().collect()),
        answered: Arc::default(),
    };
    let app = Router::new().route("/schemas/ids/{id}", get(schema_by_id)).with_state(registry.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    registry
}

/// `count` Avro events framed by Confluent's serializer, the expected
/// board, and the schema id the serializer registered.
fn avro_records(count: usize) -> (Vec<WithHeaders>, BTreeMap<String, i64>, u32) {
    let events: Vec<Value> = (0..count)
        .map(|i| {
            json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match_finished",
                   "player_id": format!("p{}", i % 9), "score": i % 4 + 1,
                   "ts": chrono::Utc::now().timestamp_millis(), "attrs": {}, "meta": {}})
        })
        .collect();
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for e in &events {
        *expected.entry(e["player_id"].as_str().unwrap().into()).or_default() += e["score"].as_i64().unwrap();
    }
    let framed = serialize(&[(EVENT_AVSC, events)], &[], &[]);
    let avro = &framed.avro[0];
    let records = avro.values.iter().enumerate().map(|(i, v)| (format!("k{}", i % 5), Vec::new(), v.clone())).collect();
    (records, expected, avro.id)
}

async fn board(stack: &Stack) -> BTreeMap<String, i64> {
    zset_values(&mut stack.redis.conn().await, "lb:{points}:all").await
}

const BOARDS: &str =
    "[[board]]\nid = \"points\"\non = [\"match_finished\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n";

/// A registry behind TLS whose CA the system does not trust: without
/// `ca_file` an outage naming the certificate, with it every record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_over_https_is_trusted_through_its_ca_file() {
    let stack = Stack::start(2).await;
    let (records, expected, id) = avro_records(60);
    produce_with_headers(&stack.broker, &stack.topic, &records).await;
    let (plain, pki) = (free_port(), tls::Pki::new());
    let registry = serve(plain, id).await;
    let endpoint = tls::TlsEndpoint::start(&pki, free_port(), plain);
    let config = |ca: &str| {
        let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
        cfg.kafka_extra = format!(
            "formats = {{ \"{}\" = \"avro\" }}\n[kafka.schema_registry]\nurl = \"https://127.0.0.1:{}\"\nusername = \"user\"\npassword = \"secret\"\n{ca}",
            stack.topic, endpoint.port
        );
        cfg
    };
    let untrusting = Worker::spawn(&config(""));
    wait_http(untrusting.http_port, Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = untrusting.get_json("/readyz").await;
        // The reason names the registry and why: its certificate is not trusted.
        if status == 503
            && body["reason"].as_str().is_some_and(|r| r.contains("Schema Registry") && r.contains("certificate"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "readyz never named the registry: {body}\n{}", untrusting.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(board(&stack).await.is_empty());
    assert!(registry.answered.lock().unwrap().is_empty(), "no request got through TLS");
    drop(untrusting);

    let cfg = config(&format!("ca_file = \"{}\"", pki.path("ca.crt").display()));
    let worker = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 2, Duration::from_secs(90));
    assert_eq!(board(&stack).await, expected, "{}", worker.log());
    assert_eq!(stack.broker.log_end(&stack.dlq, 1), [0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_down_at_start_holds_records_back_and_every_one_counts_once_it_answers() {
    let stack = Stack::start(2).await;
    let (mut records, expected, id) = avro_records(200);
    // One record whose schema id the registry does not have.
    let mut unknown = records[0].2.clone();
    unknown[1..5].copy_from_slice(&77u32.to_be_bytes());
    records.insert(100, ("k0".into(), Vec::new(), unknown));
    produce_with_headers(&stack.broker, &stack.topic, &records).await;

    let port = free_port();
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    cfg.kafka_extra = format!(
        "formats = {{ \"{}\" = \"avro\" }}\n[kafka.schema_registry]\nurl = \"http://127.0.0.1:{port}/\"\nusername = \"user\"\npassword = \"secret\"",
        stack.topic
    );
    let worker = Worker::spawn(&cfg);
    wait_http(worker.http_port, Duration::from_secs(60)).await;

    // Down: the worker says so and holds every record back.
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        let (status, body) = worker.get_json("/readyz").await;
        if status == 503 && body["reason"].as_str().is_some_and(|r| r.contains("Schema Registry")) {
            break body;
        }
        assert!(Instant::now() < deadline, "readyz never named the registry: {status} {body} {}", worker.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(ready["schema_registry"], false, "{ready}");
    assert_eq!(worker.metric("rankflow_schema_registry_up", &[]).await, 0.0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(board(&stack).await.is_empty(), "nothing is applied while the registry is down");
    assert_eq!(stack.broker.log_end(&stack.dlq, 1), [0], "nothing is dead-lettered while the registry is down");

    // Back: every record applied once, the unknown id dead-lettered.
    let registry = serve(port, id).await;
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 2, Duration::from_secs(90));
    assert_eq!(board(&stack).await, expected, "{}", worker.log());
    let dead = stack.broker.read_all(&stack.dlq, 1);
    let letters: Vec<(Option<String>, Option<String>)> =
        dead.iter().map(|m| (header(m, "rankflow.reason"), header(m, "rankflow.detail"))).collect();
    assert_eq!(
        letters,
        [(Some("unknown_schema".into()), Some("schema id 77: the Schema Registry has no schema 77".into()))]
    );
    // Each id asked of the registry once it answered: the schema is kept.
    assert_eq!(registry.answered.lock().unwrap().get(&id), Some(&1));
    let (status, _) = worker.get_json("/readyz").await;
    assert_eq!(status, 200);
    assert_eq!(worker.metric("rankflow_schema_registry_up", &[]).await, 1.0);
}
