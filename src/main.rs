//! The `rankflow` command: parses arguments, sets up logging, and calls into
//! the library. Only bad configuration at start-up exits non-zero here;
//! faults after start-up are retried by the worker.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rankflow::config::{self, Settings};
use rankflow::kafka::admin;
use rankflow::store::maintenance;

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
    /// Forget the offsets recorded for a topic (after deleting and recreating it).
    ForgetOffsets {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        topic: String,
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
                Ok(s) => std::process::exit(rankflow::app::run(s).await),
                Err(code) => code,
            },
            Command::CreateTopics { config, partitions } => match load(&config) {
                Ok(s) => report(admin::create_topics(&s, partitions).await),
                Err(code) => code,
            },
            Command::ForgetOffsets { config, topic } => match load(&config) {
                Ok(s) => report(maintenance::forget_offsets(&s.redis, &topic).await.map(|n| {
                    println!("forgot {n} recorded partition offsets of topic {topic}");
                })),
                Err(code) => code,
            },
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
