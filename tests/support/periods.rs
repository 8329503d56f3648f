//! Helpers of the tests of periods, sealing and rolling boards: hour ids,
//! a time zone where it is about noon, a replayable generator, and waiting
//! for a topic's records.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::Broker;

pub const HOUR: i64 = 3_600_000;
pub const DAY: i64 = 86_400_000;

/// The hourly period id of a time (UTC hours; a whole-hour zone has the same).
/// A `[sealing]` section publishing to `topic` that seals as soon as it
/// may (a second's idle grace, checked every 100 ms); `extra`: more of its
/// lines (e.g. `top = 5\n`).
pub fn quick_sealing(topic: &str, extra: &str) -> String {
    format!("[sealing]\ntopic = \"{topic}\"\n{extra}idle_grace = \"1s\"\ncheck_interval = \"100ms\"\n\n")
}

pub fn hour_id(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().format("h:%Y-%m-%dT%H").to_string()
}

/// An IANA zone where it is about noon now, so no day boundary falls inside
/// the test, and its offset from UTC (ms).
pub fn noon_zone(now: i64) -> (String, i64) {
    let utc_hour = now.rem_euclid(DAY) / HOUR;
    let mut k = 12 - utc_hour;
    if k < -12 {
        k += 24;
    }
    // Etc/GMT-k is UTC+k.
    let name = if k >= 0 { format!("Etc/GMT-{k}") } else { format!("Etc/GMT+{}", -k) };
    (name, k * HOUR)
}

/// The record with `meta` added to its event.
pub fn with_meta(mut r: (String, Vec<u8>, Option<i64>), meta: Value) -> (String, Vec<u8>, Option<i64>) {
    let mut v: Value = serde_json::from_slice(&r.1).unwrap();
    v["meta"] = meta;
    r.1 = v.to_string().into_bytes();
    r
}

/// A tiny deterministic generator, so a failure can be replayed.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Waits until a one-partition topic holds `n` records (or fails naming what it saw).
pub fn wait_records(broker: &Broker, topic: &str, n: i64, timeout: Duration, logs: &dyn Fn() -> String) {
    let deadline = Instant::now() + timeout;
    loop {
        // Records a read_committed reader finds: the log end would count
        // the markers of the transactions that published them too.
        let got = broker.read_all(topic, 1).len() as i64;
        if got >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{topic} holds {got} of {n} records after {timeout:?}\n{}", logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}
