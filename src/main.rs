//! The `rankflow` command: parses arguments, sets up logging, and calls into
//! the library. Only bad configuration at start-up exits non-zero here;
//! faults after start-up are retried by the worker.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use rankflow::board::Router;
use rankflow::config::{self, Settings};
use rankflow::store::{RedisConn, Store};
use rankflow::{admin, bench, http, worker};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

#[derive(Parser)]
#[command(name = "rankflow", version, about = "Exactly-once Kafka-to-Redis sorted-set leaderboards")]
struct Cli {
    /// Log as JSON lines (also RANKFLOW_LOG_FORMAT=json). Filter with RUST_LOG.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the worker and the HTTP server.
    Run {
        #[arg(long)]
        config: PathBuf,
    },
    /// Validate a config file without connecting; names every bad field.
    CheckConfig { file: PathBuf },
    /// Create the config's source topics and dead-letter topic.
    CreateTopics {
        #[arg(long)]
        config: PathBuf,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
    },
    /// Produce generated sample events to the first source topic.
    Produce {
        #[arg(long)]
        config: PathBuf,
        #[arg(long, default_value_t = 10_000)]
        count: u64,
        /// Events per second; 0 for as fast as possible.
        #[arg(long, default_value_t = 0)]
        rate: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Share of bad records (they go to the dead-letter topic).
        #[arg(long, default_value_t = 0.0)]
        bad_ratio: f64,
        /// Share of producer duplicates (they are counted once).
        #[arg(long, default_value_t = 0.0)]
        dup_ratio: f64,
    },
    /// Forget the offsets recorded for a topic (after deleting and recreating it).
    ForgetOffsets {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        topic: String,
    },
    /// Benchmarks, with the machine's ceilings measured in the same run (see README).
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

/// The broker and Redis a benchmark runs against, and its latency run's load.
#[derive(clap::Args)]
struct BenchStack {
    #[arg(long)]
    brokers: String,
    #[arg(long)]
    redis: String,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Produce rate of the latency run, events per second.
    #[arg(long, default_value_t = 5000)]
    rate: u64,
    /// Length of the latency run, seconds.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Broker and Redis ceilings, store path, end to end, latency and memory.
    Pipeline {
        #[command(flatten)]
        stack: BenchStack,
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// The broker's process id, when it runs on this machine: its CPU per record is reported too.
        #[arg(long)]
        broker_pid: Option<u32>,
        /// Rounds of the Redis ceiling and store-path rows, and of the broker ceiling and end-to-end rows, each run in turn; ratios are the rounds' median.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// The latency run alone: rankflow and a bare consumer at a steady produce rate.
    Latency {
        #[command(flatten)]
        stack: BenchStack,
    },
    /// The store path against the Redis ceiling alone, on generated events (no broker).
    Store {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 300_000)]
        events: u64,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        /// Rounds of the three rows, run in turn; ratios are the rounds' median.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Read API latency on a large board next to the bare Redis commands.
    Read {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 1_000_000)]
        members: u64,
        #[arg(long, default_value_t = 5000)]
        samples: usize,
    },
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let json = json || std::env::var("RANKFLOW_LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn load(path: &std::path::Path) -> Result<Settings, ExitCode> {
    config::load(path).map_err(|e| {
        eprintln!("rankflow: {e}");
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_json);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rankflow: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::CheckConfig { file } => match load(&file) {
                Ok(s) => {
                    println!("{}: ok ({} boards)", file.display(), s.boards.len());
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            },
            Command::Run { config } => match load(&config) {
                // Exit right here rather than dropping the runtime: a Kafka
                // client whose brokers are gone can block its teardown for
                // good, and SIGTERM must end the process within shutdown_timeout.
                Ok(s) => std::process::exit(run(s).await),
                Err(code) => code,
            },
            Command::CreateTopics { config, partitions } => match load(&config) {
                Ok(s) => report(admin::create_topics(&s, partitions).await),
                Err(code) => code,
            },
            Command::Produce { config, count, rate, seed, bad_ratio, dup_ratio } => match load(&config) {
                Ok(s) => report(admin::produce_samples(&s, count, rate, seed, bad_ratio, dup_ratio).await),
                Err(code) => code,
            },
            Command::ForgetOffsets { config, topic } => match load(&config) {
                Ok(s) => report(admin::forget_offsets(&s, &topic).await.map(|n| {
                    println!("forgot {n} recorded partition offsets of topic {topic}");
                })),
                Err(code) => code,
            },
            Command::Bench { which: BenchCommand::Pipeline { stack: s, events, broker_pid, rounds } } => {
                let run = bench::PipelineRun {
                    count: events,
                    partitions: s.partitions,
                    latency_rate: s.rate,
                    latency_secs: s.seconds,
                    broker_pid,
                    rounds,
                };
                report(bench::pipeline(&s.brokers, &s.redis, run).await)
            }
            Command::Bench { which: BenchCommand::Latency { stack: s } } => {
                report(bench::latency_only(&s.brokers, &s.redis, s.partitions, s.rate, s.seconds).await)
            }
            Command::Bench { which: BenchCommand::Store { redis, events, partitions, rounds } } => {
                report(bench::store(&redis, events, partitions, rounds).await)
            }
            Command::Bench { which: BenchCommand::Read { redis, members, samples } } => {
                report(bench::read(&redis, members, samples).await)
            }
        }
    })
}

fn report(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rankflow: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the worker and the HTTP server until SIGTERM; returns the exit status.
async fn run(settings: Settings) -> i32 {
    let settings = Arc::new(settings);
    let cancel = CancellationToken::new();
    spawn_signal_handler(cancel.clone(), settings.worker.shutdown_timeout + Duration::from_millis(500));

    let listener = match tokio::net::TcpListener::bind(settings.http.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rankflow: cannot listen on {}: {e}", settings.http.listen);
            return 2;
        }
    };
    info!(redis = ?settings.redis, "Connecting to Redis.");
    let connect = || RedisConn::connect(&settings.redis);
    let Some(conn) = worker::retry("connect to Redis", &cancel, settings.worker.max_backoff, connect).await else {
        return 0;
    };
    let store = Store::new(conn.clone(), settings.redis.dedupe_ttl);
    if let Err(e) = store.load_script().await {
        warn!(error = %e, "Loading the apply script failed; it is loaded again on first use.");
    }
    let router = Arc::new(Router::new(settings.boards.clone(), &settings.redis.key_prefix));
    let health = Arc::new(worker::Health::default());
    health.redis_up.store(true, std::sync::atomic::Ordering::Relaxed);

    let state = http::AppState::new(router.clone(), conn, health.clone(), settings.http.max_limit);
    info!(listen = %settings.http.listen, "HTTP server listening.");
    let http_task = tokio::spawn(http::serve(listener, state, cancel.clone()));

    if settings.schedules() {
        tokio::spawn(rankflow::schedule::run(settings.clone(), router.clone(), store.clone(), cancel.clone()));
    }
    let worker_task = tokio::spawn(worker::run(settings.clone(), router, store, health, cancel.clone()));
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
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), http_task).await;
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            error!(error = %e, "The worker could not start.");
            2
        }
        Err(e) => {
            error!(error = %e, "The worker task failed.");
            1
        }
    }
}

/// SIGTERM or SIGINT cancels the token once, and starts a watchdog: a
/// plain thread that ends the process with status 0 if shutdown has not
/// finished `deadline` later. The runtime's own timeout normally comes
/// first; the watchdog holds even if every runtime thread is stuck in a
/// blocking librdkafka call. Whatever is abandoned is uncommitted, so it is
/// replayed and recognised by its recorded offset.
fn spawn_signal_handler(cancel: CancellationToken, deadline: Duration) {
    let fire = cancel.clone();
    std::thread::spawn(move || {
        while !fire.is_cancelled() {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(deadline);
        eprintln!("rankflow: shutdown still running after {deadline:?}; exiting, in-flight work abandoned (it is replayed safely)");
        std::process::exit(0);
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
