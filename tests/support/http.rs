//! A minimal HTTP/1.1 client over loopback, enough to read rankflow's API.

use std::time::{Duration, Instant};

/// A minimal HTTP/1.1 GET over loopback; returns status and body.
pub async fn http_get(port: u16, path: &str) -> (u16, String) {
    http_request(port, &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")).await
}

/// A minimal HTTP/1.1 POST of a JSON body over loopback; returns status and body.
pub async fn http_post(port: u16, path: &str, body: &str) -> (u16, String) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    http_request(port, &(head + body)).await
}

async fn http_request(port: u16, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect to rankflow http");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    let body = if text.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(&body) } else { body };
    (status, body)
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Waits until `http://127.0.0.1:port/healthz` answers.
pub async fn wait_http(port: u16, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "rankflow http did not come up on {port}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A keep-alive HTTP/1.1 connection: many reads on one connection, as a
/// browser or a game client makes them (answers with a `Content-Length`
/// or chunked).
pub struct KeepAlive {
    conn: tokio::io::BufReader<tokio::net::TcpStream>,
}

impl KeepAlive {
    pub async fn connect(port: u16) -> KeepAlive {
        let s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        s.set_nodelay(true).unwrap();
        KeepAlive { conn: tokio::io::BufReader::new(s) }
    }

    /// GETs `path`; status, headers (names lowercased) and body.
    pub async fn get(&mut self, path: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        self.conn.get_mut().write_all(req.as_bytes()).await.expect("send");
        let mut line = String::new();
        self.conn.read_line(&mut line).await.expect("status line");
        let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.conn.read_line(&mut line).await.expect("header");
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((n, v)) = line.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                line.clear();
                self.conn.read_line(&mut line).await.expect("chunk size");
                let n = usize::from_str_radix(line.trim(), 16).expect("chunk size");
                let mut chunk = vec![0; n + 2];
                self.conn.read_exact(&mut chunk).await.expect("chunk");
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(n) = header("content-length").and_then(|v| v.parse().ok()) {
            body = vec![0; n];
            self.conn.read_exact(&mut body).await.expect("body");
        }
        (status, headers, body)
    }
}
