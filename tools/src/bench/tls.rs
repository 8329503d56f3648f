//! `rankflow-tools bench tls`: what TLS costs the store path. One Redis
//! that listens on a plain port and a TLS port (mutual TLS); the same
//! generated stream (1% bad records, 2% producer duplicates) goes through
//! the store path over each in turn, round after round, on an emptied
//! database each time, so both meet the same host in the same minutes. The
//! ratio is TLS's rate over plain TCP's (target: at least 0.85x).

use std::path::PathBuf;

use rankflow::board::Router;

use super::store_rows::{generated_events, open_store, store_path};
use super::{bench_config, flush, median, print_table, rate, round_ratios, Row, Stream};

/// The TLS side of the comparison: its URL and the client's files.
pub struct TlsRedis {
    /// `rediss://` URL of the same server's TLS port.
    pub url: String,
    pub ca_file: PathBuf,
    /// The client certificate and key (mutual TLS), when the server asks for one.
    pub client: Option<(PathBuf, PathBuf)>,
}

impl TlsRedis {
    /// `[redis.tls]` of a config.
    fn section(&self) -> String {
        let mut s = format!("[redis.tls]\nca_file = \"{}\"\n", self.ca_file.display());
        if let Some((cert, key)) = &self.client {
            s.push_str(&format!("cert_file = \"{}\"\nkey_file = \"{}\"\n", cert.display(), key.display()));
        }
        s
    }
}

pub async fn tls(plain_url: &str, tls: &TlsRedis, count: u64, rounds: usize) -> Result<(), String> {
    let plain_cfg = bench_config("127.0.0.1:9", plain_url, "bench", "unused", "127.0.0.1:0", "");
    let tls_cfg = bench_config("127.0.0.1:9", &tls.url, "bench", "unused", "127.0.0.1:0", "")
        .replace("[http]\n", &format!("{}[http]\n", tls.section()));
    let sides =
        [("store path, plain TCP", open_store(&plain_cfg).await?), ("store path, TLS", open_store(&tls_cfg).await?)];
    let settings = &sides[0].1 .0;
    let router = Router::new(settings.boards.clone(), &settings.redis.key_prefix);
    let events = generated_events(&router, count, 4, Stream { bad_ratio: 0.01, dup_ratio: 0.02 });
    let n = events.len() as u64;
    let mut rates = vec![Vec::new(); sides.len()];
    for round in 1..=rounds.max(1) {
        for (i, (what, (settings, conn, store))) in sides.iter().enumerate() {
            eprintln!("bench: {what} ({n} events, round {round} of {rounds})");
            flush(conn).await?;
            let (took, _) = store_path(store, &router, &events, settings.worker.batch_size).await?;
            rates[i].push(rate(n, took));
        }
    }
    let (ratio, each) = round_ratios(&rates[1], &rates[0]);
    let rows = vec![
        Row { what: sides[0].0, per_sec: median(&rates[0]), note: "1.00x".into() },
        Row {
            what: sides[1].0,
            per_sec: median(&rates[1]),
            note: format!("{ratio:.2}x plain TCP{each} (target >= 0.85x)"),
        },
    ];
    print_table(&rows);
    println!("\nthe same Redis through its plain and TLS ports; {n} events a round, alternated");
    Ok(())
}
