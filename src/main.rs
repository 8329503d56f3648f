//! The `rankflow` command: parses arguments, sets up logging, and calls into
//! the library. Exit status: 0 on success and after a clean stop
//! (SIGTERM); 2 when a configuration has errors (every command that loads
//! one, `check-config` included) or `run` cannot start (a listen address it
//! cannot take, Redis or a broker refusing the TLS handshake or the
//! credentials); 1 when an operator's command fails (`create-topics`,
//! `close`, `admin`, `rebuild`, `accept-loss`, `forget-offsets`), the demo
//! cannot set up its broker and topics, or the worker's task fails. Faults
//! after start-up (Redis or Kafka away for a while) are retried by the
//! worker, not exits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use rankflow::admin::AdminRequest;
use rankflow::config::{self, Settings};
use rankflow::event::AdminKind;
use rankflow::kafka::topics;
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
    /// The whole flow: sample events produced and consumed, the API and the
    /// page served. With kafka.brokers = "embedded", on a broker inside
    /// this process (nothing to install but Redis).
    Demo {
        #[arg(long, default_value = "config/demo.toml")]
        config: PathBuf,
        /// How many sample events to produce.
        #[arg(long, default_value_t = 20_000)]
        events: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How the samples are written: json, or avro or protobuf in the
        /// Schema Registry wire format with rankflow's own schemas.
        #[arg(long, default_value = "json", value_parser = ["json", "avro", "protobuf"])]
        format: String,
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
    /// Recompute boards from the earliest retained records into fresh keys
    /// while live workers go on, then swap them in per board tag where the
    /// two agree. Also backfills a board added after its topic had history.
    Rebuild {
        #[arg(long)]
        config: PathBuf,
        /// The boards to rebuild (repeat the flag); every board if none is named.
        #[arg(long = "board")]
        boards: Vec<String>,
        /// Rebuild even though the earliest records of a partition are gone
        /// (the rebuilt boards then miss them).
        #[arg(long)]
        from_retained: bool,
        /// Serve the rebuild's progress as Prometheus metrics at ADDR/metrics.
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
    },
    /// After Redis lost data: accept the loss, so that the workers go on
    /// from the group's commits (the lost scores stay lost). Run it with the
    /// workers stopped or refusing, then restart them. To recover the
    /// scores instead, run `rebuild`.
    AcceptLoss {
        #[arg(long)]
        config: PathBuf,
    },
    /// Close a period now: later records are refused there, and it is sealed
    /// once every partition has been applied past now (boards with close_after).
    Close(CloseArgs),
    /// Correct or moderate: produce an admin event to the first admin topic
    /// and print its event_id (with --wait, then its outcome).
    Admin {
        #[command(subcommand)]
        action: AdminAction,
    },
}

#[derive(Subcommand)]
enum AdminAction {
    /// Set a player's score on a board, whatever its mode (score_set): in
    /// the period named, or in every period holding now.
    Set {
        #[command(flatten)]
        on: OnBoard,
        #[arg(long, allow_hyphen_values = true, required_unless_present = "scores", conflicts_with = "scores")]
        score: Option<i64>,
        /// A board ranked by several columns: its row, `wins=3,time_ms=53000`.
        #[arg(long, allow_hyphen_values = true, value_parser = rankflow::event::Scores::from_pairs)]
        scores: Option<rankflow::event::Scores>,
    },
    /// Add to a player's total on a sum board (score_adjusted).
    Adjust {
        #[command(flatten)]
        on: OnBoard,
        #[arg(long, allow_hyphen_values = true)]
        delta: i64,
    },
    /// Remove a player from a board: the period named, or every period (player_removed).
    Remove {
        #[command(flatten)]
        on: OnBoard,
    },
    /// Hide a player from every read of others; their events keep counting (player_hidden).
    Hide {
        #[command(flatten)]
        on: OnBoards,
    },
    /// Show a hidden player again, with every point earned meanwhile (player_unhidden).
    Unhide {
        #[command(flatten)]
        on: OnBoards,
    },
    /// Set the tier a player is placed in at their next placement on a league
    /// board; the next settlement keeps it (player_tier_set).
    Tier {
        #[command(flatten)]
        on: OnBoard,
        /// A tier name of the board's league.
        #[arg(long)]
        tier: String,
    },
    /// Remove a player from every key of every board (player_erased).
    Erase {
        #[command(flatten)]
        common: AdminArgs,
    },
    /// Approve an event an integrity rule held: it is applied once, to every
    /// period it would have reached at its event time (review_approved).
    Approve(ReviewArgs),
    /// Reject an event an integrity rule held: it is dropped, recorded (review_rejected).
    Reject(ReviewArgs),
    /// The same as `rankflow close` (kept for scripts written before it).
    #[command(hide = true)]
    Close(CloseArgs),
}

#[derive(Args)]
struct CloseArgs {
    #[arg(long)]
    config: PathBuf,
    #[arg(long)]
    board: String,
    /// A period id, e.g. s:season-1 or w:2026-W49.
    #[arg(long)]
    period: String,
    #[arg(long)]
    split: Option<String>,
    /// Return once the period is sealed.
    #[arg(long)]
    wait: bool,
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

#[derive(Args)]
struct AdminArgs {
    #[arg(long)]
    config: PathBuf,
    #[arg(long)]
    player: String,
    /// Return once a worker has carried it out (or refused it).
    #[arg(long)]
    wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

#[derive(Args)]
struct ReviewArgs {
    #[arg(long)]
    config: PathBuf,
    #[arg(long)]
    board: String,
    /// The held event's event_id (GET /v1/review lists them).
    #[arg(long)]
    event: uuid::Uuid,
    /// The split of a board with split_by (found by itself if not given).
    #[arg(long)]
    split: Option<String>,
    /// Why, for the record.
    #[arg(long)]
    reason: Option<String>,
    /// Return once a worker has carried it out (or refused it).
    #[arg(long)]
    wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

#[derive(Args)]
struct OnBoard {
    #[command(flatten)]
    common: AdminArgs,
    #[arg(long)]
    board: String,
    /// A period id, e.g. w:2026-W49 (a removal also takes d:2026-12-01:final).
    #[arg(long)]
    period: Option<String>,
    /// The split of a board with split_by.
    #[arg(long)]
    split: Option<String>,
}

#[derive(Args)]
struct OnBoards {
    #[command(flatten)]
    common: AdminArgs,
    /// The boards (repeat the flag); every board if none is named.
    #[arg(long = "board")]
    boards: Vec<String>,
}

impl AdminAction {
    /// The request and the config file it names; `Err`: `admin close`, which produces no admin event.
    fn request(self) -> Result<(PathBuf, AdminRequest), CloseArgs> {
        let req = |kind, common: AdminArgs, board, boards, split, period, value| {
            let wait = common.wait.then_some(common.timeout);
            let (player, tier, held_event_id, reason) = (common.player, None, None, None);
            let scores = None;
            let r = AdminRequest {
                kind,
                player,
                board,
                boards,
                split,
                period,
                value,
                scores,
                tier,
                held_event_id,
                reason,
                wait,
            };
            Ok((common.config, r))
        };
        let review = |kind, a: ReviewArgs| {
            let request = AdminRequest {
                kind,
                // The worker's envelope names the held event's player: `admin::run` finds it.
                player: String::new(),
                board: Some(a.board),
                boards: None,
                split: a.split,
                period: None,
                value: 0,
                scores: None,
                tier: None,
                held_event_id: Some(a.event),
                reason: a.reason,
                wait: a.wait.then_some(a.timeout),
            };
            Ok((a.config, request))
        };
        let boards = |b: Vec<String>| (!b.is_empty()).then_some(b);
        match self {
            AdminAction::Set { on, score, scores } => {
                let set =
                    req(AdminKind::ScoreSet, on.common, Some(on.board), None, on.split, on.period, score.unwrap_or(0));
                set.map(|(config, r)| (config, AdminRequest { scores, ..r }))
            }
            AdminAction::Adjust { on, delta } => {
                req(AdminKind::ScoreAdjusted, on.common, Some(on.board), None, on.split, on.period, delta)
            }
            AdminAction::Remove { on } => {
                req(AdminKind::PlayerRemoved, on.common, Some(on.board), None, on.split, on.period, 0)
            }
            AdminAction::Hide { on } => req(AdminKind::PlayerHidden, on.common, None, boards(on.boards), None, None, 0),
            AdminAction::Unhide { on } => {
                req(AdminKind::PlayerUnhidden, on.common, None, boards(on.boards), None, None, 0)
            }
            AdminAction::Erase { common } => req(AdminKind::PlayerErased, common, None, None, None, None, 0),
            AdminAction::Tier { on, tier } => {
                req(AdminKind::PlayerTierSet, on.common, Some(on.board), None, on.split, None, 0)
                    .map(|(path, r)| (path, AdminRequest { tier: Some(tier), ..r }))
            }
            AdminAction::Approve(a) => review(AdminKind::ReviewApproved, a),
            AdminAction::Reject(a) => review(AdminKind::ReviewRejected, a),
            AdminAction::Close(args) => Err(args),
        }
    }
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
                Ok(s) if s.kafka.brokers == rankflow::demo::EMBEDDED => {
                    eprintln!("rankflow: kafka.brokers = \"embedded\" is the demo's broker: run `rankflow demo`, or name a real broker");
                    ExitCode::from(2)
                }
                // Exit right here rather than dropping the runtime: a Kafka
                // client whose brokers are gone can block its teardown for
                // good, and SIGTERM must end the process within shutdown_timeout.
                Ok(s) => std::process::exit(rankflow::app::run(s).await),
                Err(code) => code,
            },
            Command::Demo { config, events, seed, format } => match load(&config) {
                Ok(s) => {
                    let format = rankflow::event::Format::parse(&format).unwrap_or_default();
                    let stream = rankflow::demo::DemoStream { events, seed, format };
                    std::process::exit(rankflow::demo::run(s, stream).await)
                }
                Err(code) => code,
            },
            Command::CreateTopics { config, partitions } => match load(&config) {
                Ok(s) => report(topics::create_topics(&s, partitions).await),
                Err(code) => code,
            },
            Command::Close(args) => close(args).await,
            Command::Admin { action } => match action.request() {
                Ok((config, request)) => match load(&config) {
                    Ok(s) => report(rankflow::admin::run(&s, &request).await),
                    Err(code) => code,
                },
                Err(args) => close(args).await,
            },
            Command::Rebuild { config, boards, from_retained, listen } => match load(&config) {
                Ok(s) => {
                    let request = rankflow::rebuild::RebuildRequest { boards, from_retained, listen };
                    report(rankflow::rebuild::run(s, request).await)
                }
                Err(code) => code,
            },
            Command::AcceptLoss { config } => match load(&config) {
                Ok(s) => report(rankflow::recovery::accept_loss(&s).await.map(|a| {
                    println!(
                        "accepted the loss: {} board tag(s) had lost their data and take writes again{}; \
                         the deployment marker restarts from the group's commits ({} partition(s) raised). \
                         Restart the workers.",
                        a.lost_tags.len(),
                        if a.lost_tags.is_empty() { String::new() } else { format!(" ({})", a.lost_tags.join(", ")) },
                        a.raised
                    );
                })),
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

async fn close(a: CloseArgs) -> ExitCode {
    match load(&a.config) {
        Ok(s) => report(
            rankflow::close::close(&s, &a.board, a.split.as_deref(), &a.period, a.wait.then_some(a.timeout)).await,
        ),
        Err(code) => code,
    }
}

fn report<E: std::fmt::Display>(r: Result<(), E>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rankflow: {e}");
            ExitCode::FAILURE
        }
    }
}
