//! Reads while a backlog drains: a game client asking for the top 10 and a
//! player's rank, one request every 20 ms, timed from connect to the last
//! byte of the answer; and beside each, the same top 10 read from Redis
//! directly (`ZRANGE ... REV`), which tells Redis's share of the wait from
//! rankflow's.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The reads a probe alternates between (board `points` of the bench's boards).
const PATHS: [&str; 2] = ["/v1/boards/points/top?limit=10", "/v1/boards/points/players/player-00042"];

/// Time between two reads.
const EVERY: Duration = Duration::from_millis(20);

/// A thread reading rankflow's HTTP API until [`ReadProbe::finish`].
pub(super) struct ReadProbe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(Vec<f64>, Vec<f64>)>,
}

/// What a probe measured, ms, each sorted.
pub(super) struct Reads {
    pub(super) http: Vec<f64>,
    pub(super) redis: Vec<f64>,
}

impl ReadProbe {
    pub(super) fn start(listen: &str, redis_url: &str) -> ReadProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, listen) = (stop.clone(), listen.to_string());
        let mut redis = redis::Client::open(redis_url).and_then(|c| c.get_connection()).ok();
        let thread = std::thread::spawn(move || {
            let (mut http, mut bare) = (Vec::new(), Vec::new());
            let mut next = Instant::now();
            for i in 0.. {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let started = Instant::now();
                if get(&listen, PATHS[i % PATHS.len()]) {
                    http.push(started.elapsed().as_secs_f64() * 1000.0);
                }
                if let Some(conn) = redis.as_mut() {
                    let started = Instant::now();
                    let top: redis::RedisResult<Vec<(String, f64)>> = redis::cmd("ZRANGE")
                        .arg("lb:{points}:all")
                        .arg(0)
                        .arg(9)
                        .arg("REV")
                        .arg("WITHSCORES")
                        .query(conn);
                    if top.is_ok() {
                        bare.push(started.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                next += EVERY;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            (http, bare)
        });
        ReadProbe { stop, thread }
    }

    /// Stops reading; what it measured.
    pub(super) fn finish(self) -> Reads {
        self.stop.store(true, Ordering::Relaxed);
        let (mut http, mut redis) = self.thread.join().unwrap_or_default();
        http.sort_by(f64::total_cmp);
        redis.sort_by(f64::total_cmp);
        Reads { http, redis }
    }
}

/// One GET; whether a status line came back (any status: the time is the point).
fn get(listen: &str, path: &str) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(listen) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    s.write_all(request.as_bytes()).is_ok() && s.read_to_end(&mut answer).is_ok() && answer.starts_with(b"HTTP/1.1 ")
}
