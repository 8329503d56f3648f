//! `bench live`: what live streams cost. The release binary serves one
//! board's live top (`GET .../live?limit=10`) to `clients` streams while
//! the top changes four times a second (a bare `ZINCRBY` on the board key);
//! the bench reads the server's resident memory before and after the
//! streams open, its CPU over the window, the events the streams got, and
//! Redis's read commands meanwhile (one watcher per top: about one a
//! second, however many streams).

use std::sync::atomic::AtomicU64;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// Reads Redis has run: `EVALSHA_RO` and `EVAL_RO` calls.
async fn read_calls(conn: &RedisConn) -> Result<f64, String> {
    let s = redis_stats(conn).await?;
    Ok(["EVALSHA_RO", "EVAL_RO"].iter().filter_map(|c| s.calls.get(*c)).sum())
}

/// `rankflow-tools bench live`.
pub async fn live(brokers: &str, redis_url: &str, clients: usize, seconds: u64) -> Result<(), String> {
    let exe = rankflow_bin()?;
    let dir = tempfile_dir()?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let topic = format!("live-{run}");
    let listen = format!("127.0.0.1:{}", free_port()?);
    let cfg = bench_config(brokers, redis_url, &topic, &format!("live-{run}"), &listen, "")
        .replace("[http]\n", &format!("[http]\nmax_streams = {}\n", clients + 10));
    let (_, conn, _) = open_store(&cfg).await?;
    flush(&conn).await?;
    create_topic(brokers, &topic, 1).await?;
    let board = "lb:{points}:all";
    let mut c = conn.clone();
    let mut fill = redis::pipe();
    for i in 0..1000 {
        fill.cmd("ZADD").arg(board).arg(i).arg(format!("player-{i:05}")).ignore();
    }
    fill.query_async::<()>(&mut c).await.map_err(|e| format!("filling the board: {e}"))?;
    let mut child = spawn_rankflow(&exe, &dir, "live", &cfg)?;
    let pid = child.id();
    let result = measure(&conn, &listen, pid, clients, seconds).await;
    stop(&mut child);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(conn: &RedisConn, listen: &str, pid: u32, clients: usize, seconds: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while metrics_text(listen).is_none() {
        if Instant::now() > deadline {
            return Err("rankflow did not answer within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = proc_status_kib(pid, "VmRSS:");
    let events = Arc::new(AtomicU64::new(0));
    let opened = Arc::new(AtomicU64::new(0));
    eprintln!("bench: opening {clients} live streams");
    let mut streams = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (events, opened, listen) = (events.clone(), opened.clone(), listen.to_string());
        streams.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(&listen).await.map_err(|e| e.to_string())?;
            let req = "GET /v1/boards/points/live?limit=10 HTTP/1.1\r\nHost: bench\r\n\r\n";
            s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
            let mut buf = vec![0; 16 * 1024];
            let mut first = true;
            loop {
                let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err::<(), String>("a stream ended".into());
                }
                let got = buf[..n].windows(6).filter(|w| w == b"data: ").count() as u64;
                if got > 0 && first {
                    first = false;
                    opened.fetch_add(1, Ordering::Relaxed);
                }
                events.fetch_add(got, Ordering::Relaxed);
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while opened.load(Ordering::Relaxed) < clients as u64 {
        if Instant::now() > deadline {
            return Err(format!("{} of {clients} streams got their first top in 60 s", opened.load(Ordering::Relaxed)));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rss_after = proc_status_kib(pid, "VmRSS:");
    let (cpu0, reads0, events0) = (proc_cpu_secs(pid), read_calls(conn).await?, events.load(Ordering::Relaxed));
    eprintln!("bench: {clients} streams open; the top changes 4 times a second for {seconds}s");
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut c = conn.clone();
    let mut n = 0u64;
    while Instant::now() < end {
        n += 1;
        redis::cmd("ZINCRBY")
            .arg("lb:{points}:all")
            .arg(10)
            .arg(format!("player-{:05}", 990 + n % 10))
            .query_async::<f64>(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cpu = proc_cpu_secs(pid) - cpu0;
    let reads = read_calls(conn).await? - reads0;
    let sent = events.load(Ordering::Relaxed) - events0;
    for s in &streams {
        s.abort();
    }
    let per = |x: f64| x / clients as f64;
    println!(
        "\nlive streams: {clients} streams of one board's top 10, the top changing 4 times a second for {seconds}s:\n"
    );
    println!("| | value |");
    println!("|---|---:|");
    println!("| rankflow RSS before / after the streams opened | {} / {} KiB |", rss_before, rss_after);
    println!("| RSS per stream | {:.1} KiB |", per(rss_after.saturating_sub(rss_before) as f64));
    println!("| rankflow CPU over the window | {:.2} s ({:.1}% of a core) |", cpu, 100.0 * cpu / seconds as f64);
    println!("| CPU per stream | {:.1} µs/s |", per(cpu * 1e6 / seconds as f64));
    println!("| events received per stream | {:.1} ({:.2}/s) |", per(sent as f64), per(sent as f64) / seconds as f64);
    println!("| Redis reads over the window | {reads:.0} ({:.2}/s) |", reads / seconds as f64);
    Ok(())
}
