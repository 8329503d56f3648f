//! `bench capacity`: read capacity. The HTTP read API served over TCP on a
//! board of `members` members, in a closed loop of `clients` concurrent
//! clients, each on its own keep-alive connection, asking in turn for the
//! top 10, a player's rank, the players around them and a friends list of
//! 50; next to the same Redis commands sent straight through redis-rs with
//! the same concurrency; then an open loop at half the HTTP capacity
//! measured, over four times as many keep-alive connections as the closed
//! loop's clients (each read timed from when it was due, so queueing
//! counts), with a host probe and a Redis probe beside it that say whose
//! stall a slow stretch was.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::read::{bare_read, Page};
use super::*;

/// A keep-alive HTTP/1.1 connection, enough for the read API's answers.
pub(super) struct Http {
    stream: BufReader<TcpStream>,
}

impl Http {
    pub(super) async fn connect(addr: std::net::SocketAddr) -> Result<Http, String> {
        let s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Http { stream: BufReader::new(s) })
    }

    /// Sends one request and reads its whole answer; returns the status.
    pub(super) async fn send(&mut self, method: &str, path: &str, body: &str) -> Result<u16, String> {
        let req = format!("{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        self.stream.get_mut().write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.stream.read_line(&mut line).await.map_err(|e| e.to_string())?;
        let status: u16 =
            line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or(format!("bad status line {line:?}"))?;
        let mut length = 0usize;
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.map_err(|e| e.to_string())?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().map_err(|_| format!("bad length {line:?}"))?;
            }
        }
        let mut buf = vec![0; length];
        self.stream.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        Ok(status)
    }
}

/// The `n`th read of the mix: (method, path, body) and the bare read's name.
/// The mix's kinds of read, in turn (`n % 4`), by the names `bare_read` knows.
const KINDS: [&str; 4] = ["top 10", "player rank", "around me (radius 2)", "friends (50 players)"];

fn mix(
    n: u64,
    rng: &mut rand::rngs::StdRng,
    members: u64,
) -> (&'static str, String, String, &'static str, String, Vec<String>) {
    let mut player = || format!("player-{:07}", rand::Rng::random_range(&mut *rng, 0..members));
    let me = player();
    let kind = KINDS[(n % 4) as usize];
    match n % 4 {
        0 => ("GET", "/v1/boards/big/top?limit=10".into(), String::new(), kind, me, Vec::new()),
        1 => ("GET", format!("/v1/boards/big/players/{me}"), String::new(), kind, me, Vec::new()),
        2 => ("GET", format!("/v1/boards/big/players/{me}/around?radius=2"), String::new(), kind, me, Vec::new()),
        _ => {
            let friends: Vec<String> = (0..50).map(|_| player()).collect();
            let body = serde_json::json!({ "players": friends }).to_string();
            ("POST", "/v1/boards/big/players".into(), body, kind, me, friends)
        }
    }
}

fn quantiles(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.99))
}

/// `rankflow-tools bench capacity`.
pub async fn capacity(redis_url: &str, members: u64, seconds: u64, clients: usize) -> Result<(), String> {
    let (conn, router) = super::read::fill(redis_url, members).await?;
    let state = rankflow::http::AppState::new(router, Arc::new(rankflow::health::Health::default()), 1000);
    state.connected(rankflow::store::Reader::new(conn.clone(), None));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, rankflow::http::app(state)).await });
    let window = Duration::from_secs(seconds);
    let page = Page { key: "lb:{big}:all", dense_key: "lb:{big}:_dense:all", size: 100, deep: 100, near: "" };

    eprintln!("bench: HTTP read API, {clients} clients, {seconds}s closed loop");
    let mut tasks = Vec::new();
    for c in 0..clients {
        tasks.push(tokio::spawn(async move {
            let mut http = Http::connect(addr).await?;
            let (mut rng, mut ms, end) = (rand_seed(100 + c as u64), Vec::new(), Instant::now() + window);
            let mut n = c as u64;
            while Instant::now() < end {
                let (method, path, body, ..) = mix(n, &mut rng, members);
                let t = Instant::now();
                let status = http.send(method, &path, &body).await?;
                if status != 200 {
                    return Err(format!("{path} answered {status}"));
                }
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
                n += 1;
            }
            Ok::<_, String>(ms)
        }));
    }
    let mut http_ms = Vec::new();
    for t in tasks {
        http_ms.extend(t.await.map_err(|e| e.to_string())??);
    }
    let http_rate = http_ms.len() as f64 / window.as_secs_f64();

    eprintln!("bench: the same Redis commands through redis-rs, {clients} clients, {seconds}s closed loop");
    let mut tasks = Vec::new();
    for c in 0..clients {
        let conn = conn.clone();
        let page = Page { ..page };
        tasks.push(tokio::spawn(async move {
            let (mut rng, mut ms, end) = (rand_seed(100 + c as u64), Vec::new(), Instant::now() + window);
            let mut n = c as u64;
            while Instant::now() < end {
                let (.., what, me, friends) = mix(n, &mut rng, members);
                let t = Instant::now();
                bare_read(conn.clone(), what, &page, &me, &friends).await?;
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
                n += 1;
            }
            Ok::<_, String>(ms)
        }));
    }
    let mut bare_ms = Vec::new();
    for t in tasks {
        bare_ms.extend(t.await.map_err(|e| e.to_string())??);
    }
    let bare_rate = bare_ms.len() as f64 / window.as_secs_f64();

    let open_rate = (http_rate / 2.0).max(1.0);
    eprintln!("bench: HTTP read API, open loop at {open_rate:.0} reads/s for {seconds}s");
    let host = std::thread::spawn(move || host_stalls(window));
    let ru = redis_url.to_string();
    let pings = std::thread::spawn(move || redis_stalls(&ru, window));
    let connections = 4 * clients;
    let open = open_loop(addr, open_rate, window, members, connections).await?;
    let host = host.join().map_err(|_| "the host probe panicked".to_string())?;
    let pings = pings.join().map_err(|_| "the Redis probe panicked".to_string())??;
    let kinds: Vec<String> = (0..4u64)
        .map(|k| {
            let ms: Vec<f64> = open.iter().filter(|(kind, _)| *kind == k).map(|(_, ms)| *ms).collect();
            let (p50, p99) = quantiles(ms);
            format!("{} {p50:.2} / {p99:.2}", KINDS[k as usize])
        })
        .collect();
    let stretches = slow_stretches(&open, open_rate);
    let open_ms: Vec<f64> = open.into_iter().map(|(_, ms)| ms).collect();

    let ((hp50, hp99), (bp50, bp99), (op50, op99)) = (quantiles(http_ms), quantiles(bare_ms), quantiles(open_ms));
    println!("\nread capacity on a board of {members} members, {clients} clients, {seconds}s each (the mix: top 10, a player's rank, around (radius 2), friends of 50, in turn):\n");
    println!("| | reads/s | p50 ms | p99 ms |");
    println!("|---|---:|---:|---:|");
    println!("| HTTP read API, closed loop | {http_rate:.0} | {hp50:.2} | {hp99:.2} |");
    println!("| the same Redis commands through redis-rs, closed loop | {bare_rate:.0} | {bp50:.2} | {bp99:.2} |");
    println!("| HTTP read API, open loop at half its capacity ({open_rate:.0}/s, {connections} connections) | | {op50:.2} | {op99:.2} |");
    println!("\nthe open loop by kind, p50 / p99 ms: {}", kinds.join("; "));
    println!("the open loop's slowest stretches (reads due in each 100 ms over 5 ms, and the slowest): {stretches}");
    println!("the host meanwhile (a thread of its own sleeping 1 ms at a time; its late wakes over 5 ms): {host}");
    println!("Redis meanwhile (a PING every ms from a thread of its own, answers over 5 ms): {pings}");
    println!(
        "\nHTTP capacity {:.2}x the direct commands' rate (target at least 0.5x); open-loop p99 {op99:.2} ms (target at most 5 ms)",
        http_rate / bare_rate
    );
    Ok(())
}

/// The three 100 ms stretches of the open loop with the most reads over
/// 5 ms, by when those reads were due (`open` in the order they were due):
/// one stretch holding them all is a stall of the host or of Redis, not
/// the cost of a read.
fn slow_stretches(open: &[(u64, f64)], rate: f64) -> String {
    let mut by_stretch: HashMap<u64, (usize, f64)> = HashMap::new();
    for (n, (_, ms)) in open.iter().enumerate() {
        if *ms > 5.0 {
            let s = by_stretch.entry((n as f64 / rate * 10.0) as u64).or_default();
            *s = (s.0 + 1, s.1.max(*ms));
        }
    }
    let mut worst: Vec<(u64, (usize, f64))> = by_stretch.into_iter().collect();
    worst.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    let shown: Vec<String> = worst
        .iter()
        .take(3)
        .map(|(at, (count, max))| format!("at {:.1}s {count} (max {max:.1} ms)", *at as f64 / 10.0))
        .collect();
    let total: usize = worst.iter().map(|(_, (c, _))| c).sum();
    if shown.is_empty() {
        "none".to_string()
    } else {
        format!("{}; {total} in all, in {} stretches", shown.join(", "), worst.len())
    }
}

/// Sleeps 1 ms at a time for `window`; answers the wakes more than 5 ms
/// late, with when each was due: a stall the whole host took
/// (another tenant, the kernel), which the reads due then share, whatever
/// they are waiting on.
fn host_stalls(window: Duration) -> String {
    let (start, mut wakes) = (Instant::now(), Vec::new());
    while start.elapsed() < window {
        let due = Instant::now() + Duration::from_millis(1);
        std::thread::sleep(Duration::from_millis(1));
        wakes.push((due - start, Instant::now().saturating_duration_since(due)));
    }
    over_5ms(wakes)
}

/// A `PING` every millisecond for `window` on a connection and a thread of
/// their own; answers those that took over 5 ms, with when each was sent: Redis
/// itself was slow then (a long command, a fork, its process not running),
/// or the reads queued in front of it were.
fn redis_stalls(url: &str, window: Duration) -> Result<String, String> {
    let mut conn = redis::Client::open(url).and_then(|c| c.get_connection()).map_err(|e| e.to_string())?;
    let (start, mut pings) = (Instant::now(), Vec::new());
    while start.elapsed() < window {
        std::thread::sleep(Duration::from_millis(1));
        let t = Instant::now();
        let _: String = redis::cmd("PING").query(&mut conn).map_err(|e| e.to_string())?;
        pings.push((t - start, t.elapsed()));
    }
    Ok(over_5ms(pings))
}

/// The (when, how long) pairs over 5 ms, the first eight shown.
fn over_5ms(all: Vec<(Duration, Duration)>) -> String {
    let late: Vec<String> = all
        .into_iter()
        .filter(|(_, d)| *d > Duration::from_millis(5))
        .map(|(at, d)| format!("at {:.2}s {:.1} ms", at.as_secs_f64(), d.as_secs_f64() * 1000.0))
        .collect();
    match late.len() {
        0 => "none".to_string(),
        n if n > 8 => format!("{}, ... ({n} in all)", late[..8].join(", ")),
        _ => late.join(", "),
    }
}

/// Reads at `rate` per second for `window`, each timed from when it was
/// due, over `connections` keep-alive connections opened beforehand: a
/// read due while every connection is busy waits for the first one free,
/// and that wait counts (the model of wrk2). The reads are sent from a
/// thread of their own that sleeps to each one's time: the runtime's timers
/// tick by the millisecond, and the clients of a real server do not share
/// its runtime.
/// Answers each read's kind (its index in [`KINDS`]) and time.
async fn open_loop(
    addr: std::net::SocketAddr,
    rate: f64,
    window: Duration,
    members: u64,
    connections: usize,
) -> Result<Vec<(u64, f64)>, String> {
    type Due = (u64, Instant, &'static str, String, String);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Due>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut workers = Vec::new();
    for _ in 0..connections {
        let (mut http, rx) = (Http::connect(addr).await?, rx.clone());
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let next = rx.lock().await.recv().await;
                let Some((n, due, method, path, body)) = next else { return Ok::<_, String>(out) };
                let status = http.send(method, &path, &body).await?;
                if status != 200 {
                    return Err(format!("{path} answered {status}"));
                }
                out.push((n, due.elapsed().as_secs_f64() * 1000.0));
            }
        }));
    }
    let total = (rate * window.as_secs_f64()) as u64;
    let sending = std::thread::spawn(move || {
        let (mut rng, start) = (rand_seed(7), Instant::now());
        for n in 0..total {
            let due = start + Duration::from_secs_f64(n as f64 / rate);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let (method, path, body, ..) = mix(n, &mut rng, members);
            if tx.send((n, due, method, path, body)).is_err() {
                return;
            }
        }
    });
    tokio::task::spawn_blocking(move || sending.join())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|_| "the open loop's sending thread panicked".to_string())?;
    let mut out = Vec::with_capacity(total as usize);
    for w in workers {
        out.extend(w.await.map_err(|e| e.to_string())??);
    }
    out.sort_by_key(|(n, _)| *n);
    Ok(out.into_iter().map(|(n, ms)| (n % 4, ms)).collect())
}
