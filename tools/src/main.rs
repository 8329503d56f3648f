//! `rankflow-tools`: the benchmark harness and the sample producer. Tools
//! beside the product, never shipped in it: the benchmark wipes the Redis it
//! runs against (only one it created keys in, unless told otherwise).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;

#[derive(Parser)]
#[command(name = "rankflow-tools", version, about = "rankflow's benchmarks and sample producer")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    /// Benchmarks, with the machine's ceilings measured in the same run (see README).
    Bench {
        /// Let the benchmark wipe a Redis database that already holds keys (it refuses by default).
        #[arg(long, global = true)]
        wipe_redis: bool,
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
    /// Share of bad records in the generated stream (dead-lettered), as in a real stream.
    #[arg(long, default_value_t = 0.01)]
    bad_ratio: f64,
    /// Share of producer duplicates in the generated stream (counted once).
    #[arg(long, default_value_t = 0.02)]
    dup_ratio: f64,
}

impl BenchStack {
    fn stream(&self) -> bench::Stream {
        bench::Stream { bad_ratio: self.bad_ratio, dup_ratio: self.dup_ratio }
    }
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
    /// The worker's drain rate and CPU per record reading Avro and
    /// Protobuf, against JSON, on the same events (rounds alternated).
    Formats {
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// The store path over TLS against plain TCP: one Redis's plain and
    /// TLS ports, rounds alternated, on a stream with bad records and duplicates.
    Tls {
        /// The plain port's URL.
        #[arg(long)]
        redis: String,
        /// The same server's TLS port (`rediss://`).
        #[arg(long)]
        tls_redis: String,
        /// The CA that signs the server's certificate.
        #[arg(long)]
        ca_file: std::path::PathBuf,
        /// A client certificate and its key, for mutual TLS.
        #[arg(long, requires = "key_file")]
        cert_file: Option<std::path::PathBuf>,
        #[arg(long, requires = "cert_file")]
        key_file: Option<std::path::PathBuf>,
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// One board sharded over a Redis Cluster's primaries against the same
    /// board unsharded: write throughput, each primary's CPU share, merged reads.
    Sharded {
        /// A seed node of the cluster.
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 300_000)]
        events: u64,
        #[arg(long, default_value_t = 1_000_000)]
        members: u64,
        #[arg(long, default_value_t = 2000)]
        samples: usize,
    },
    /// Merged reads of a sharded board ranked by two columns against the
    /// same reads of a sharded board of one score, on a Redis Cluster.
    ShardedRows {
        /// A seed node of the cluster.
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 1_000_000)]
        members: u64,
        #[arg(long, default_value_t = 2000)]
        samples: usize,
    },
    /// Team boards: Redis time per event on a team board against the same
    /// board without `team`, and a team's read with 10,000 teams of 50.
    Teams {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        #[arg(long, default_value_t = 10_000)]
        teams: usize,
        #[arg(long, default_value_t = 2000)]
        samples: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Leagues: Redis time per event on a league board against the same board
    /// without one, and one round's settlement by the real binary.
    League {
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        /// Players of the settled round, in cohorts of 30.
        #[arg(long, default_value_t = 100_000)]
        players: u64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Rank changes: Redis time per event with notify_top = 100 against the
    /// same boards without it, for a large and a small player base.
    Changes {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Ranking by two columns against one: Redis time per event, memory
    /// per member, top and player read capacity.
    Columns {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Score integrity: Redis time per event with the integrity rules on
    /// against off, and the review listing's latency with many held events.
    Integrity {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        /// Events held on one board tag for the listing.
        #[arg(long, default_value_t = 100_000)]
        held: u64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Reads while a backlog drains: calls unbounded in time, the default
    /// max_call_time with reads on the primary, and reads on a replica.
    DrainReads {
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        redis: String,
        /// A replica of `redis` (redis-server --replicaof).
        #[arg(long)]
        replica: String,
        #[arg(long, default_value_t = 400_000)]
        events: u64,
        /// `worker.max_call_time` of the two bounded drains (unset: the worker's default).
        #[arg(long)]
        max_call_time: Option<String>,
    },
    /// Read capacity: the HTTP read API over TCP, closed loop, against the
    /// same Redis commands through redis-rs; then an open loop at half capacity.
    Capacity {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 1_000_000)]
        members: u64,
        /// Length of each loop, seconds.
        #[arg(long, default_value_t = 15)]
        seconds: u64,
        #[arg(long, default_value_t = 16)]
        clients: usize,
    },
    /// One board's top 100 read by many clients from rankflow alone and
    /// through nginx's cache (deploy/nginx), and its bytes plain and compressed.
    Cache {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 100_000)]
        members: u64,
        /// Length of each loop, seconds.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 50)]
        clients: usize,
    },
    /// Live streams: the server's memory and CPU per stream of one top, and
    /// Redis's reads meanwhile.
    Live {
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 1000)]
        clients: usize,
        /// Length of the measured window, seconds.
        #[arg(long, default_value_t = 15)]
        seconds: u64,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rankflow-tools: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::Produce { config, count, rate, seed, bad_ratio, dup_ratio } => match load(&config) {
                Ok(s) => report(rankflow::demo::produce_samples(&s, count, rate, seed, bad_ratio, dup_ratio).await),
                Err(code) => code,
            },
            Command::Bench { wipe_redis, which } => {
                if wipe_redis {
                    bench::allow_wipe();
                }
                run_bench(which).await
            }
        }
    })
}

async fn run_bench(which: BenchCommand) -> ExitCode {
    match which {
        BenchCommand::Pipeline { stack: s, events, broker_pid, rounds } => {
            let run = bench::PipelineRun {
                count: events,
                partitions: s.partitions,
                latency_rate: s.rate,
                latency_secs: s.seconds,
                broker_pid,
                rounds,
                stream: s.stream(),
            };
            report(bench::pipeline(&s.brokers, &s.redis, run).await)
        }
        BenchCommand::Latency { stack: s } => {
            report(bench::latency_only(&s.brokers, &s.redis, s.partitions, s.rate, s.seconds, s.stream()).await)
        }
        BenchCommand::Store { redis, events, partitions, rounds } => {
            report(bench::store(&redis, events, partitions, rounds).await)
        }
        BenchCommand::Tls { redis, tls_redis, ca_file, cert_file, key_file, events, rounds } => {
            let tls = bench::TlsRedis { url: tls_redis, ca_file, client: cert_file.zip(key_file) };
            report(bench::tls(&redis, &tls, events, rounds).await)
        }
        BenchCommand::League { brokers, redis, events, players, rounds } => {
            report(bench::league(&brokers, &redis, events, players, rounds).await)
        }
        BenchCommand::Formats { brokers, redis, events, partitions, rounds } => {
            report(bench::formats(&brokers, &redis, events, partitions, rounds).await)
        }
        BenchCommand::Changes { redis, events, rounds } => report(bench::changes(&redis, events, rounds).await),
        BenchCommand::Columns { redis, events, rounds } => report(bench::columns(&redis, events, rounds).await),
        BenchCommand::Teams { redis, events, teams, samples, rounds } => {
            report(bench::teams(&redis, events, teams, samples, rounds).await)
        }
        BenchCommand::Integrity { redis, events, held, rounds } => {
            report(bench::integrity(&redis, events, held, rounds).await)
        }
        BenchCommand::DrainReads { brokers, redis, replica, events, max_call_time } => {
            report(bench::drain_reads(&brokers, &redis, &replica, events, max_call_time.as_deref()).await)
        }
        BenchCommand::Capacity { redis, members, seconds, clients } => {
            report(bench::capacity(&redis, members, seconds, clients).await)
        }
        BenchCommand::Cache { redis, members, seconds, clients } => {
            report(bench::cache(&redis, members, seconds, clients).await)
        }
        BenchCommand::Live { brokers, redis, clients, seconds } => {
            report(bench::live(&brokers, &redis, clients, seconds).await)
        }
        BenchCommand::Read { redis, members, samples } => report(bench::read(&redis, members, samples).await),
        BenchCommand::Sharded { redis, events, members, samples } => {
            report(bench::sharded(&redis, events, members, samples).await)
        }
        BenchCommand::ShardedRows { redis, members, samples } => {
            report(bench::sharded_rows(&redis, members, samples).await)
        }
    }
}

fn load(path: &std::path::Path) -> Result<rankflow::config::Settings, ExitCode> {
    rankflow::config::load(path).map_err(|e| {
        eprintln!("rankflow-tools: {e}");
        ExitCode::from(2)
    })
}

fn report(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rankflow-tools: {e}");
            ExitCode::FAILURE
        }
    }
}
