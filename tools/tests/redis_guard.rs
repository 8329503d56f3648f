//! The benchmark wipes its Redis between rows, so it must refuse a Redis
//! that holds someone else's keys unless told it may wipe it.

use std::net::TcpListener;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

struct Redis {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Redis {
        let port =
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/setup.sh installs it)");
        let redis = Redis { child, url: format!("redis://127.0.0.1:{port}"), _dir: dir };
        let started = Instant::now();
        while redis.cli(&["PING"]) != "PONG" {
            assert!(started.elapsed() < Duration::from_secs(10), "redis-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        redis
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli").args(["-u", &self.url]).args(args).output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench_read(redis: &Redis, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rankflow-tools"))
        .args(["bench", "read", "--redis", &redis.url, "--members", "50", "--samples", "20"])
        .args(extra)
        .output()
        .expect("rankflow-tools runs")
}

#[test]
fn the_bench_refuses_a_redis_holding_keys_it_did_not_create_unless_told_to_wipe_it() {
    let redis = Redis::start();
    redis.cli(&["SET", "production:player:1", "precious"]);

    let refused = bench_read(&redis, &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "the bench ran against a Redis with foreign keys");
    assert!(stderr.contains("holds 1 keys") && stderr.contains("--wipe-redis"), "{stderr}");
    assert_eq!(redis.cli(&["GET", "production:player:1"]), "precious");

    let allowed = bench_read(&redis, &["--wipe-redis"]);
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stderr));
    assert_eq!(redis.cli(&["EXISTS", "production:player:1"]), "0");
}

#[test]
fn the_bench_runs_on_an_empty_redis_without_being_told() {
    let redis = Redis::start();
    let out = bench_read(&redis, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
