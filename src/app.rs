//! Wiring: the worker process (`rankflow run`). Starts the HTTP server, the
//! scheduler and the pipeline, and stops them on SIGTERM or SIGINT within
//! `shutdown_timeout`. The pipeline and the scheduler write on one Redis
//! connection; the HTTP reads have a connection of their own, so that a
//! read never queues behind a batch's script calls on the same socket, and
//! the HTTP server runs on threads of its own.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::board::Router;
use crate::config::{RedisSettings, Settings};
use crate::health::Health;
use crate::retry::{retry_unless, Retried};
use crate::store::{Reader, RedisConn, Store, StoreError};
use crate::{http, pipeline, schedule};

/// Runs the worker and the HTTP server until SIGTERM; returns the exit status.
///
/// The HTTP server starts first, so `/healthz` answers from the first
/// second while Redis is still being connected (`/readyz` says so).
pub async fn run(settings: Settings) -> i32 {
    let settings = Arc::new(settings);
    let cancel = CancellationToken::new();
    let status = Arc::new(AtomicI32::new(0));
    spawn_signal_handler(cancel.clone(), settings.worker.shutdown_timeout + Duration::from_millis(500), status.clone());

    let listener = match std::net::TcpListener::bind(settings.http.listen).and_then(|l| {
        l.set_nonblocking(true)?;
        Ok(l)
    }) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rankflow: cannot listen on {}: {e}", settings.http.listen);
            return 2;
        }
    };
    let reads_rt = match ReadsRuntime::start() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rankflow: cannot start the HTTP server's threads: {e}");
            return 2;
        }
    };
    let router = Arc::new(Router::new(settings.boards.clone(), &settings.redis.key_prefix));
    let health = Arc::new(Health::default());
    let state = http::AppState::new(router.clone(), health.clone(), settings.http.max_limit)
        .with_max_players(settings.http.max_players)
        .with_max_streams(settings.http.max_streams)
        .with_web(http::Web {
            cors_origins: settings.http.cors_origins.clone(),
            cache_max_age: settings.http.cache_max_age,
            cache_max_age_sealed: settings.http.cache_max_age_sealed,
        });
    info!(listen = %settings.http.listen, "HTTP server listening.");
    let limits = http::Limits {
        request_timeout: settings.http.request_timeout,
        max_concurrent: settings.http.max_concurrent_requests,
    };
    let (served, stop) = (state.clone(), cancel.clone());
    let http_task = reads_rt.handle().spawn(async move {
        // Registered with the HTTP runtime's reactor, as is every connection it accepts.
        http::serve(tokio::net::TcpListener::from_std(listener)?, served, limits, stop).await
    });

    info!(redis = ?settings.redis, "Connecting to Redis.");
    let connect = || async {
        let writes = RedisConn::connect(&settings.redis).await?;
        let reads = reads_rt.run(connect_reads(settings.redis.clone(), cancel.clone())).await?;
        Ok::<_, crate::store::StoreError>((writes, reads))
    };
    // A refused certificate or password is not waited out: it needs the
    // operator, so the worker says which setting and exits.
    let refused = |e: &StoreError| e.refused_connection().is_some();
    let (conn, reads) =
        match retry_unless("connect to Redis", &cancel, settings.worker.max_backoff, connect, refused).await {
            Retried::Done(c) => c,
            Retried::Cancelled => return 0,
            Retried::Fatal(e) => {
                let why = e.refused_connection().unwrap_or_else(|| e.to_string());
                error!(error = %why, "Cannot connect to Redis; exiting.");
                return 2;
            }
        };
    let store = Store::new(conn, settings.redis.dedupe_ttl)
        .with_call_sizes(settings.worker.max_call_time, settings.worker.max_events_per_call)
        .with_min_replicas(settings.redis.min_replicas, settings.redis.replica_wait);
    if let Err(e) = store.load_script().await {
        warn!(error = %e, "Loading the apply script failed; it is loaded again on first use.");
    }
    health.redis_up.store(true, Ordering::Relaxed);
    state.connected(reads);

    if settings.schedules() {
        tokio::spawn(schedule::run(settings.clone(), router.clone(), store.clone(), health.clone(), cancel.clone()));
    }
    if settings.seals() && settings.kafka.transactions {
        tokio::spawn(schedule::outbox::run(settings.clone(), store.clone(), cancel.clone()));
    }
    let worker_task = tokio::spawn(pipeline::run(settings.clone(), router, store, health, cancel.clone()));
    let mut worker_task = std::pin::pin!(worker_task);
    let result = tokio::select! {
        r = &mut worker_task => Some(r),
        _ = cancel.cancelled() => None,
    };
    let result = match result {
        Some(r) => r,
        None => match tokio::time::timeout(settings.worker.shutdown_timeout, &mut worker_task).await {
            Ok(r) => r,
            Err(_) => {
                warn!(timeout = ?settings.worker.shutdown_timeout, "Shutdown timed out; exiting with in-flight work abandoned (it is replayed safely).");
                return 0;
            }
        },
    };
    let code = match result {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            error!(error = %e, "The worker could not start.");
            2
        }
        Err(e) => {
            error!(error = %e, "The worker task failed.");
            1
        }
    };
    // Recorded before shutdown starts: if the watchdog ends the process
    // first, it exits with this status, not with success.
    status.store(code, Ordering::SeqCst);
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), http_task).await;
    code
}

/// The HTTP reads' connections: to the primary, and to its replicas with
/// `redis.read_from = "replica"`. Made on the HTTP runtime (see
/// [`ReadsRuntime`]), so that their replies are read there.
async fn connect_reads(redis: RedisSettings, cancel: CancellationToken) -> Result<Reader, StoreError> {
    let reads = RedisConn::connect(&redis).await?;
    let replicas = crate::store::replica_connections(&redis, crate::store::REPLICA_TIMEOUT).await?;
    if let Some(r) = &replicas {
        tokio::spawn(crate::store::refresh_replicas(redis, r.clone(), crate::store::REPLICA_TIMEOUT, cancel));
    }
    Ok(Reader::new(reads, replicas))
}

/// The HTTP server's runtime, with threads of its own: a read is never
/// queued behind the pipeline's work (decoding records, preparing a batch's
/// calls, settling its answers) on a busy thread of the worker's runtime.
/// The reads' Redis connections are driven on it too.
struct ReadsRuntime(Option<tokio::runtime::Runtime>);

impl ReadsRuntime {
    fn start() -> std::io::Result<ReadsRuntime> {
        let runtime = tokio::runtime::Builder::new_multi_thread().thread_name("rankflow-http").enable_all().build()?;
        Ok(ReadsRuntime(Some(runtime)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("running until dropped").handle()
    }

    /// Runs `work` on this runtime and waits for it from another; a panic
    /// in it is raised again here.
    async fn run<T: Send + 'static>(&self, work: impl std::future::Future<Output = T> + Send + 'static) -> T {
        match self.handle().spawn(work).await {
            Ok(out) => out,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(e) => panic!("the HTTP runtime dropped a task while running: {e}"),
            },
        }
    }
}

impl Drop for ReadsRuntime {
    /// Without waiting for its tasks: dropped from within the worker's runtime, where blocking is not allowed.
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// SIGTERM or SIGINT cancels the token once, and starts a watchdog: a
/// plain thread that ends the process if shutdown has not finished
/// `deadline` later, with `status` (0 unless a failure was recorded). The runtime's own timeout normally comes
/// first; the watchdog holds even if every runtime thread is stuck in a
/// blocking librdkafka call. Whatever is abandoned is uncommitted, so it is
/// replayed and recognised by its recorded offset.
fn spawn_signal_handler(cancel: CancellationToken, deadline: Duration, status: Arc<AtomicI32>) {
    let fire = cancel.clone();
    std::thread::spawn(move || {
        while !fire.is_cancelled() {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(deadline);
        eprintln!("rankflow: shutdown still running after {deadline:?}; exiting, in-flight work abandoned (it is replayed safely)");
        std::process::exit(status.load(Ordering::SeqCst));
    });
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "Cannot listen for SIGTERM.");
                let _ = tokio::signal::ctrl_c().await;
                cancel.cancel();
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => info!("SIGTERM received: stopping."),
            _ = tokio::signal::ctrl_c() => info!("SIGINT received: stopping."),
        }
        cancel.cancel();
    });
}
