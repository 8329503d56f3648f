//! Retrying an operation with capped exponential backoff until it succeeds
//! or shutdown begins. Used wherever a fault after start-up is waited out
//! (Redis connects and writes, scheduler jobs, erasures).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How a retried operation ended.
#[derive(Debug)]
pub enum Retried<T, E> {
    Done(T),
    /// Shutdown began while it was waited out.
    Cancelled,
    /// It failed in a way no retry mends (see [`retry_unless`]).
    Fatal(E),
}

/// Runs `op` until it succeeds, waiting 100 ms, 200 ms, ... up to `max`
/// between attempts. Returns `None` if `cancel` fires while waiting.
pub async fn retry<T, E, F, Fut>(what: &str, cancel: &CancellationToken, max: Duration, op: F) -> Option<T>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    match retry_unless(what, cancel, max, op, |_| false).await {
        Retried::Done(v) => Some(v),
        Retried::Cancelled | Retried::Fatal(_) => None,
    }
}

/// [`retry`], except that an error `fatal` says no retry mends (Redis lost
/// data) ends it at once.
pub async fn retry_unless<T, E, F, Fut>(
    what: &str,
    cancel: &CancellationToken,
    max: Duration,
    mut op: F,
    fatal: impl Fn(&E) -> bool,
) -> Retried<T, E>
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
                return Retried::Done(v);
            }
            Err(e) if fatal(&e) => return Retried::Fatal(e),
            Err(e) => {
                attempt += 1;
                warn!(error = %e, attempt, retry_in_ms = delay.as_millis() as u64, "Could not {what}; retrying.");
                tokio::select! {
                    _ = cancel.cancelled() => return Retried::Cancelled,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(max);
            }
        }
    }
}
