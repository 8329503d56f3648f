//! Keeping the scheduler alive: it is started again, after a backoff,
//! whenever it returns or panics before shutdown, and each restart is
//! logged and counted.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::error;

use crate::metrics;

/// Runs `start()` on a task of its own until `cancel` fires, and starts it
/// again whenever it returns or panics before that, waiting 100 ms, 200 ms,
/// ... up to `max_backoff` in between. Returns how many times it restarted.
pub async fn supervise<F, Fut, E>(cancel: &CancellationToken, max_backoff: Duration, mut start: F) -> u64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let mut delay = Duration::from_millis(100).min(max_backoff);
    let mut restarts = 0;
    loop {
        let outcome = tokio::spawn(start()).await;
        if cancel.is_cancelled() {
            return restarts;
        }
        match outcome {
            Ok(Ok(())) => error!("The scheduler stopped; starting it again."),
            Ok(Err(e)) => {
                error!(error = %e, retry_in_ms = delay.as_millis() as u64, "The scheduler failed; starting it again.")
            }
            Err(e) => {
                error!(error = %e, retry_in_ms = delay.as_millis() as u64, "The scheduler panicked; starting it again.")
            }
        }
        restarts += 1;
        metrics::get().scheduler_restarts.inc();
        tokio::select! {
            _ = cancel.cancelled() => return restarts,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(max_backoff);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_scheduler_that_fails_or_panics_is_started_again_until_shutdown() {
        let cancel = CancellationToken::new();
        let starts = Arc::new(AtomicU32::new(0));
        let before = metrics::get().scheduler_restarts.get();
        let restarts = supervise(&cancel, Duration::from_millis(20), || {
            let (starts, cancel) = (starts.clone(), cancel.clone());
            async move {
                match starts.fetch_add(1, Ordering::SeqCst) {
                    0 => Err("no producer".to_string()),
                    1 => panic!("a scheduler bug"),
                    2 => Ok(()),
                    _ => {
                        // The fourth life runs until shutdown.
                        cancel.cancel();
                        Ok(())
                    }
                }
            }
        })
        .await;
        assert_eq!(starts.load(Ordering::SeqCst), 4);
        assert_eq!(restarts, 3);
        assert!(metrics::get().scheduler_restarts.get() >= before + 3);
    }
}
