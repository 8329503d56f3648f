//! `bench cache`: one board's top 100 read by many clients, from rankflow
//! alone and through nginx with the repository's example config
//! (`deploy/nginx/rankflow-cache.conf`) in front, in the same run: reads
//! per second each way, and how many of the reads through the cache
//! reached rankflow (its own request metric). Then the bytes of one top-100
//! answer plain, gzip and br, and the time rankflow takes to compress it.

use std::process::{Child, Command, Stdio};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::capacity::Http;
use super::*;

const TOP: &str = "/v1/boards/big/top?limit=100";

/// nginx with the example config, rankflow at `upstream`, in `dir`; its port.
fn start_nginx(dir: &std::path::Path, upstream: u16) -> Result<(Child, u16), String> {
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/nginx/rankflow-cache.conf"))
        .map_err(|e| format!("deploy/nginx/rankflow-cache.conf: {e}"))?;
    let port = free_port()?;
    let d = dir.display();
    let server = example
        .replace("server 127.0.0.1:9898;", &format!("server 127.0.0.1:{upstream};"))
        .replace("listen 8080;", &format!("listen 127.0.0.1:{port};"))
        .replace("/var/cache/nginx/rankflow", &format!("{d}/cache"));
    std::fs::write(dir.join("rankflow-cache.conf"), server).map_err(|e| e.to_string())?;
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let main = format!(
        "{}\ndaemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 4096; }}\nhttp {{ access_log off; keepalive_requests 10000000; client_body_temp_path {d}/body; \
         proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; \
         scgi_temp_path {d}/scgi; include {d}/rankflow-cache.conf; }}\n",
        if root { "user root;" } else { "" }
    );
    std::fs::write(dir.join("nginx.conf"), main).map_err(|e| e.to_string())?;
    let bin = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or("nginx is not installed (apt-get install nginx)")?;
    let child = Command::new(bin)
        .args(["-p", &d.to_string(), "-e", &format!("{d}/error.log"), "-c", &format!("{d}/nginx.conf")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("nginx: {e}"))?;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok((child, port));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("nginx did not listen: {}", std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()))
}

/// `clients` keep-alive clients reading the top for `window`: reads/s, p50 and p99 ms.
async fn read_loop(port: u16, clients: usize, window: Duration) -> Result<(f64, f64, f64), String> {
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        tasks.push(tokio::spawn(async move {
            let mut http = Http::connect(addr).await?;
            let (mut ms, end) = (Vec::new(), Instant::now() + window);
            while Instant::now() < end {
                let t = Instant::now();
                let status = http.send("GET", TOP, "").await?;
                if status != 200 {
                    return Err(format!("{TOP} answered {status}"));
                }
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            Ok::<_, String>(ms)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.map_err(|e| e.to_string())??);
    }
    all.sort_by(f64::total_cmp);
    Ok((all.len() as f64 / window.as_secs_f64(), percentile(&all, 0.5), percentile(&all, 0.99)))
}

/// The body bytes of one top-100 answer asked with `Accept-Encoding: encoding`, and its `Content-Encoding`.
async fn answer_bytes(port: u16, encoding: &str) -> Result<(usize, String), String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let accept = if encoding.is_empty() { String::new() } else { format!("Accept-Encoding: {encoding}\r\n") };
    let req = format!("GET {TOP} HTTP/1.1\r\nHost: bench\r\n{accept}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no head")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let used = head.lines().find_map(|l| l.strip_prefix("content-encoding:")).unwrap_or("identity").trim().to_string();
    Ok((raw.len() - end - 4, used))
}

/// rankflow's own count of top reads it answered.
fn top_reads() -> f64 {
    let m = rankflow::metrics::get();
    ["200", "304"].iter().map(|s| m.http.requests.with_label_values(&["/v1/boards/{board}/top", s]).get() as f64).sum()
}

/// `rankflow-tools bench cache`.
pub async fn cache(redis_url: &str, members: u64, seconds: u64, clients: usize) -> Result<(), String> {
    let (conn, router) = super::read::fill(redis_url, members).await?;
    let state = rankflow::http::AppState::new(router, Arc::new(rankflow::health::Health::default()), 1000);
    state.connected(rankflow::store::Reader::new(conn.clone(), None));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    tokio::spawn(async move { axum::serve(listener, rankflow::http::app(state)).await });
    let window = Duration::from_secs(seconds);

    let mut sizes = Vec::new();
    for encoding in ["", "gzip", "br"] {
        sizes.push(answer_bytes(port, encoding).await?);
    }
    // What compressing costs rankflow: the same reads asked plain and with br, one at a time.
    let mut per_read = Vec::new();
    for encoding in ["", "gzip", "br"] {
        let t = Instant::now();
        for _ in 0..200 {
            answer_bytes(port, encoding).await?;
        }
        per_read.push(t.elapsed().as_secs_f64() * 1000.0 / 200.0);
    }

    eprintln!("bench: {clients} clients reading the top 100 from rankflow alone for {seconds}s");
    let (alone, ap50, ap99) = read_loop(port, clients, window).await?;
    let dir = tempfile_dir()?;
    let (mut nginx, nginx_port) = start_nginx(&dir, port)?;
    eprintln!("bench: the same through nginx (deploy/nginx/rankflow-cache.conf) for {seconds}s");
    let before = top_reads();
    let through = read_loop(nginx_port, clients, window).await;
    let reached = top_reads() - before;
    let _ = Command::new("kill").args(["-TERM", &nginx.id().to_string()]).status();
    let _ = nginx.wait();
    let (cached, cp50, cp99) = through?;

    println!("\nthe top 100 of a board of {members} members, {clients} keep-alive clients, {seconds}s each, Cache-Control max-age=1:\n");
    println!("| | reads/s | p50 ms | p99 ms | top reads rankflow answered |");
    println!("|---|---:|---:|---:|---:|");
    println!("| rankflow alone | {alone:.0} | {ap50:.2} | {ap99:.2} | {:.0} |", alone * seconds as f64);
    println!(
        "| through nginx's cache | {cached:.0} | {cp50:.2} | {cp99:.2} | {reached:.0} ({:.1} a second) |",
        reached / seconds as f64
    );
    println!("\nthrough the cache {:.1}x rankflow alone's reads per second", cached / alone);
    println!("\none top-100 answer, bytes of its body and one read's time (sequential, new connection each):\n");
    println!("| asked | sent as | bytes | ratio to plain | ms per read |");
    println!("|---|---|---:|---:|---:|");
    for (i, asked) in ["(nothing)", "gzip", "br"].iter().enumerate() {
        let (bytes, used) = &sizes[i];
        println!("| {asked} | {used} | {bytes} | {:.2} | {:.3} |", *bytes as f64 / sizes[0].0 as f64, per_read[i]);
    }
    Ok(())
}
