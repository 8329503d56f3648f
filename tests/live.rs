//! The live top (`GET .../live`, Server-Sent Events) through a real worker,
//! Apache Kafka and Redis: two streams see the same top, the top read's answer;
//! a change reaches both; a stream resuming with `Last-Event-ID` gets the
//! current top at once; 200 streams of one top cost Redis what one does
//! (its read commands counted by `INFO commandstats`); past
//! `http.max_streams` a stream is refused 503, and `limit` over 100 is a 400.

use std::time::Duration;

use serde_json::Value;
use support::league::wait_for;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A Server-Sent Events client on a plain connection.
struct EventStream {
    conn: BufReader<TcpStream>,
    /// Text received and not yet read as events.
    text: String,
}

impl EventStream {
    /// Opens `path`; the status and body when it is not a stream.
    async fn open(port: u16, path: &str, last_id: Option<&str>) -> Result<EventStream, (u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let resume = last_id.map(|id| format!("Last-Event-ID: {id}\r\n")).unwrap_or_default();
        let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n{resume}\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut conn = BufReader::new(s);
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut length = 0;
        loop {
            line.clear();
            conn.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        if status != 200 {
            let mut body = vec![0; length];
            conn.read_exact(&mut body).await.unwrap();
            return Err((status, String::from_utf8_lossy(&body).into_owned()));
        }
        Ok(EventStream { conn, text: String::new() })
    }

    /// The next event with data: its id and its data as JSON (within 10 s).
    async fn next(&mut self) -> (String, Value) {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                while let Some(end) = self.text.find("\n\n") {
                    let block: String = self.text.drain(..end + 2).collect();
                    let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(str::to_string);
                    if let (Some(id), Some(data)) = (field("id: "), field("data: ")) {
                        return (id, serde_json::from_str(&data).unwrap());
                    }
                }
                // One chunk of the chunked body: its size, its bytes, CRLF.
                let mut size = String::new();
                self.conn.read_line(&mut size).await.unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap_or_else(|_| panic!("chunk size {size:?}"));
                assert!(n > 0, "the stream ended");
                let mut chunk = vec![0; n + 2];
                self.conn.read_exact(&mut chunk).await.unwrap();
                self.text.push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        })
        .await
        .expect("an event within 10 s")
    }
}

/// Read commands Redis has run (the reads are `EVALSHA_RO`, or `EVAL_RO` once per node).
async fn reads_run(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha_ro:") || l.starts_with("cmdstat_eval_ro:"))
        .filter_map(|l| l.split([':', ',']).find_map(|kv| kv.strip_prefix("calls="))?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn live_streams_share_one_watcher_see_each_change_resume_at_once_and_are_bounded() {
    let Stack { redis, broker, topic, dlq } = Stack::start(1).await;
    let boards = "[[board]]\nid = \"pts\"\non = [\"match\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n";
    let now = chrono::Utc::now().timestamp_millis();
    let score = |player: &str, points: i64| event_record("match", player, points, now, now, None);
    broker.produce(&topic, &[score("alice", 50), score("bob", 40), score("carol", 30)]).await;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, boards);
    cfg.http_extra = "max_streams = 210".into();
    let w = Worker::spawn(&cfg);
    let port = cfg.http_port;
    wait_http(port, Duration::from_secs(30)).await;
    let top = || async { w.get_json("/v1/boards/pts/top?limit=5").await.1 };
    wait_for(Duration::from_secs(60), &|| w.log(), || async { top().await["total"] == 3 }).await;
    let path = "/v1/boards/pts/live?limit=5";

    // Two streams: the same top, the top read's answer, at once.
    let (mut a, mut b) =
        (EventStream::open(port, path, None).await.unwrap(), EventStream::open(port, path, None).await.unwrap());
    let ((first_id, first), (_, from_b)) = (a.next().await, b.next().await);
    assert_eq!(first, from_b);
    assert_eq!(first, top().await);
    // A change reaches both.
    broker.produce(&topic, &[score("dave", 100)]).await;
    let (changed_id, changed) = a.next().await;
    assert_eq!(changed["entries"][0]["player_id"], "dave", "{changed}");
    assert_eq!(changed["total"], 4);
    assert_eq!(b.next().await.1, changed);
    assert!(changed_id.parse::<i64>().unwrap() > first_id.parse::<i64>().unwrap());
    // Resuming from the first top: the current one at once.
    let mut resumed = EventStream::open(port, path, Some(&first_id)).await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(resumed.next().await, (changed_id, changed));
    assert!(started.elapsed() < Duration::from_millis(500), "{:?}", started.elapsed());
    drop((b, resumed));

    // Redis's read commands over 4 s with one stream open, then with 200.
    let mut conn = redis.conn().await;
    let window = || tokio::time::sleep(Duration::from_secs(4));
    let before = reads_run(&mut conn).await;
    window().await;
    let one = reads_run(&mut conn).await - before;
    let mut many = Vec::new();
    for _ in 0..200 {
        let mut s = EventStream::open(port, path, None).await.unwrap();
        s.next().await;
        many.push(s);
    }
    let before = reads_run(&mut conn).await;
    window().await;
    let with_200 = reads_run(&mut conn).await - before;
    assert!(one >= 2, "the watcher reads the top about once a second: {one} reads in 4 s");
    assert!(with_200 <= one + 1, "201 streams cost Redis {with_200} reads in 4 s, one stream {one}");

    // At most http.max_streams (210) open: 201 are, 9 more fit, then 503.
    for _ in 0..9 {
        many.push(EventStream::open(port, path, None).await.unwrap());
    }
    let Err((status, body)) = EventStream::open(port, path, None).await else { panic!("a 211th stream") };
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("http.max_streams (210)"), "{body}");
    // A stream that ends gives its place back.
    many.pop();
    wait_for(Duration::from_secs(10), &|| w.log(), || async { EventStream::open(port, path, None).await.is_ok() })
        .await;
    let Err((status, body)) = EventStream::open(port, "/v1/boards/pts/live?limit=101", None).await else { panic!() };
    assert_eq!(status, 400, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["parameter"], "limit");
}
