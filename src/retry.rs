//! Retrying an operation with capped exponential backoff until it succeeds
//! or shutdown begins. Used wherever a fault after start-up is waited out
//! (Redis connects and writes, scheduler jobs, erasures).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Runs `op` until it succeeds, waiting 100 ms, 200 ms, ... up to `max`
/// between attempts. Returns `None` if `cancel` fires while waiting.
pub async fn retry<T, E, F, Fut>(what: &str, cancel: &CancellationToken, max: Duration, mut op: F) -> Option<T>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut delay = Duration::from_millis(100).min(max);
    let mut attempt: u32 = 0;
    loop {
        match op().await {
            Ok(v) => {
                if attempt > 0 {
                    info!(attempts = attempt + 1, "Recovered: {what} succeeded.");
                }
                return Some(v);
            }
            Err(e) => {
                attempt += 1;
                warn!(error = %e, attempt, retry_in_ms = delay.as_millis() as u64, "Could not {what}; retrying.");
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(max);
            }
        }
    }
}
