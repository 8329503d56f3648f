//! Reads while a backlog drains, each kind one every 20 ms, the kinds in
//! turn: a game client asking for the top 10 and a player's rank on one
//! kept-alive connection, as a game server that pools its connections
//! sends it; the same on a new connection each time (timed from connect to
//! the last byte of the answer); and the same top 10 read from Redis
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
    thread: JoinHandle<Reads>,
}

/// What a probe measured, ms, each sorted.
#[derive(Default)]
pub(super) struct Reads {
    /// Over HTTP, a new connection per read.
    pub(super) http: Vec<f64>,
    /// Over HTTP, one kept-alive connection.
    pub(super) kept: Vec<f64>,
    pub(super) redis: Vec<f64>,
}

impl ReadProbe {
    pub(super) fn start(listen: &str, redis_url: &str) -> ReadProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, listen) = (stop.clone(), listen.to_string());
        let mut redis = redis::Client::open(redis_url).and_then(|c| c.get_connection()).ok();
        let thread = std::thread::spawn(move || {
            let mut reads = Reads::default();
            let mut kept: Option<std::net::TcpStream> = None;
            let mut next = Instant::now();
            // The three reads take turns a third of EVERY apart, so that each
            // finds the processes it wakes as a lone read does (a read right
            // behind another finds them awake, and is faster).
            for slot in 0.. {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let path = PATHS[(slot / 3) % PATHS.len()];
                let started = Instant::now();
                let (done, into) = match slot % 3 {
                    0 => {
                        if kept.is_none() {
                            kept = connect(&listen);
                        }
                        let done = kept.as_mut().is_some_and(|s| get_kept(s, path));
                        if !done {
                            kept = None;
                        }
                        (done, &mut reads.kept)
                    }
                    1 => (get(&listen, path), &mut reads.http),
                    _ => (redis.as_mut().is_some_and(|c| top_10(c).is_ok()), &mut reads.redis),
                };
                if done {
                    into.push(started.elapsed().as_secs_f64() * 1000.0);
                }
                next += EVERY / 3;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            reads
        });
        ReadProbe { stop, thread }
    }

    /// Stops reading; what it measured.
    pub(super) fn finish(self) -> Reads {
        self.stop.store(true, Ordering::Relaxed);
        let mut reads = self.thread.join().unwrap_or_default();
        for ms in [&mut reads.http, &mut reads.kept, &mut reads.redis] {
            ms.sort_by(f64::total_cmp);
        }
        reads
    }
}

/// The bench board's top 10, from Redis directly.
fn top_10(conn: &mut redis::Connection) -> redis::RedisResult<Vec<(String, f64)>> {
    redis::cmd("ZRANGE").arg("lb:{points}:all").arg(0).arg(9).arg("REV").arg("WITHSCORES").query(conn)
}

fn connect(listen: &str) -> Option<std::net::TcpStream> {
    let s = std::net::TcpStream::connect(listen).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_nodelay(true);
    Some(s)
}

/// One GET on a kept-alive connection; whether a whole answer came back
/// (its body by `Content-Length`).
fn get_kept(s: &mut std::net::TcpStream, path: &str) -> bool {
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
            let Some(length) =
                head.lines().find_map(|l| l.strip_prefix("content-length:")?.trim().parse::<usize>().ok())
            else {
                return false;
            };
            if answer.len() >= end + 4 + length {
                return answer.starts_with(b"HTTP/1.1 ");
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One GET on a new connection; whether a status line came back (any
/// status: the time is the point).
fn get(listen: &str, path: &str) -> bool {
    let Some(mut s) = connect(listen) else { return false };
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    s.write_all(request.as_bytes()).is_ok() && s.read_to_end(&mut answer).is_ok() && answer.starts_with(b"HTTP/1.1 ")
}
