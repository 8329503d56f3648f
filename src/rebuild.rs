//! `rankflow rebuild`: boards recomputed from the earliest retained records
//! into fresh keys while the live workers go on, then swapped in per board
//! tag where the two agree.
//!
//! The rebuild runs the worker's own pipeline (so every rule of the live
//! path holds: dedupe, offsets, moderation, rate limits, attempts) under a
//! consumer group of its own that starts at the earliest records, with the
//! key prefix `_rebuild:<prefix>` (`keys::rebuild_prefix`): each rebuilt key
//! has the hash tag of the live key it replaces. It sends no dead letters
//! (the live workers sent them) and runs no scheduler (sealed periods stay
//! the live workers').
//!
//! Once it has read every record that was in the topics when it started,
//! it swaps each tag it built (`Store::swap_tag`): atomically, and only
//! where it has applied every record the live workers have applied on that
//! tag; a tag the live workers are ahead on is tried again while the
//! rebuild reads on. The live workers then find the records the rebuild
//! applied beyond theirs recorded, and skip them. Nothing is lost or counted
//! twice across the swap. At the end the rebuild's leftover keys go.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{Encoder, IntGauge, Registry};
use rdkafka::consumer::{BaseConsumer, Consumer};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::board::{Board, Router};
use crate::config::Settings;
use crate::health::Health;
use crate::kafka::client;
use crate::store::{scan_keys, Store, StoreError, Swap};
use crate::{keys, metrics, pipeline, progress};

/// League boards: the rebuild places each round's players in the tiers
/// the live settlements gave (copied from each live league tag; the
/// rebuild runs no scheduler and settles nothing). Placement follows
/// arrival order as the rebuild reads it, which across partitions need not
/// be the live workers' order: an open round's cohorts are swapped in as
/// rebuilt, a sealed round's (and its settlement) stay as they were.
async fn copy_league_state(store: &Store, live_prefix: &str, boards: &[Board]) -> Result<(), RebuildError> {
    let leagues: BTreeSet<&str> = boards.iter().filter(|b| b.league().is_some()).map(|b| b.id()).collect();
    if leagues.is_empty() {
        return Ok(());
    }
    for base in store.tag_bases(&keys::tags_key(live_prefix)).await? {
        if keys::board_of_base(&base).is_some_and(|id| leagues.contains(id)) {
            store.copy_league_state(&base, &keys::rebuilt_base(&base)).await?;
        }
    }
    Ok(())
}

/// Why a rebuild stopped, or could not start.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("--board {name}: no such board in the config (its boards: {known})")]
    UnknownBoard { name: String, known: String },
    #[error("cannot create a Kafka client: {0}")]
    Client(#[source] rdkafka::error::KafkaError),
    #[error("cannot read the metadata of topic {topic}: {source}")]
    Metadata { topic: String, source: rdkafka::error::KafkaError },
    #[error("topic {0} does not exist (or has no partitions)")]
    NoTopic(String),
    #[error("cannot read the offsets of {topic}/{partition}: {source}")]
    Watermarks { topic: String, partition: i32, source: rdkafka::error::KafkaError },
    #[error(
        "the earliest records of some partitions are gone (retained: {0}): rebuilt boards would miss them. \
         Pass --from-retained to rebuild from what is retained"
    )]
    NotRetained(String),
    #[error(transparent)]
    Redis(#[from] StoreError),
    #[error("cannot list the rebuild's leftover keys: {0}")]
    Scan(String),
    #[error("--listen {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("the rebuild's pipeline stopped: {0}")]
    Pipeline(String),
    #[error("interrupted: the live boards are as they were for every tag not swapped yet")]
    Interrupted,
    #[error("{0}")]
    LostData(String),
    #[error(transparent)]
    Recovery(#[from] crate::recovery::RecoveryError),
}

/// What `rankflow rebuild` was asked.
#[derive(Debug, Default)]
pub struct RebuildRequest {
    /// Board ids; every board of the config if empty.
    pub boards: Vec<String>,
    /// Rebuild even though a source partition no longer starts at offset 0
    /// (its earliest records are gone: the rebuilt boards miss them).
    pub from_retained: bool,
    /// Serve the rebuild's progress as Prometheus metrics here (`/metrics`).
    pub listen: Option<SocketAddr>,
}

/// The boards named, or every board; an unknown name is an error that lists the known ones.
pub fn select_boards(settings: &Settings, names: &[String]) -> Result<Vec<Board>, RebuildError> {
    if names.is_empty() {
        return Ok(settings.boards.clone());
    }
    let known: Vec<&str> = settings.boards.iter().map(Board::id).collect();
    names
        .iter()
        .map(|n| {
            settings
                .boards
                .iter()
                .find(|b| b.id() == n)
                .cloned()
                .ok_or_else(|| RebuildError::UnknownBoard { name: n.clone(), known: known.join(", ") })
        })
        .collect()
}

/// The rebuild's gauges, in a registry of its own served with the pipeline's.
struct Gauges {
    registry: Registry,
    target: IntGauge,
    applied: IntGauge,
    swapped: IntGauge,
    waiting: IntGauge,
}

impl Gauges {
    fn new() -> Gauges {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("static metric definition");
            registry.register(Box::new(g.clone())).expect("registered once");
            g
        };
        Gauges {
            target: gauge(
                "rankflow_rebuild_records_target",
                "Records the rebuild reads before it swaps: those in the source topics when it started.",
            ),
            applied: gauge("rankflow_rebuild_records_applied", "Records the rebuild has read and applied so far."),
            swapped: gauge("rankflow_rebuild_tags_swapped", "Board tags whose rebuilt keys are live."),
            waiting: gauge(
                "rankflow_rebuild_tags_waiting",
                "Board tags rebuilt but not swapped yet: the live workers have applied records the rebuild has not.",
            ),
            registry,
        }
    }

    fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        metrics::get().render() + &String::from_utf8_lossy(&buf)
    }
}

/// Partition field -> (earliest retained offset, log end) of every source
/// and admin topic, and the live group's committed offsets.
struct Topics {
    bounds: HashMap<String, (i64, i64)>,
}

fn topics(settings: &Settings) -> Result<Topics, RebuildError> {
    let consumer: BaseConsumer = client::observer(&settings.kafka).create().map_err(RebuildError::Client)?;
    let mut bounds = HashMap::new();
    for t in settings.kafka.topics.iter().chain(&settings.kafka.admin_topics) {
        let md = consumer
            .fetch_metadata(Some(t), Duration::from_secs(10))
            .map_err(|source| RebuildError::Metadata { topic: t.clone(), source })?;
        let topic = md.topics().iter().find(|x| x.name() == t).ok_or_else(|| RebuildError::NoTopic(t.clone()))?;
        if topic.partitions().is_empty() {
            return Err(RebuildError::NoTopic(t.clone()));
        }
        for p in topic.partitions() {
            let (low, high) = consumer
                .fetch_watermarks(t, p.id(), Duration::from_secs(10))
                .map_err(|source| RebuildError::Watermarks { topic: t.clone(), partition: p.id(), source })?;
            bounds.insert(keys::offsets_field(t, p.id()), (low, high));
        }
    }
    Ok(Topics { bounds })
}

/// Runs a rebuild to its end (see the module header). Progress goes to a
/// bar on a terminal, the log, and the gauges (on `listen`).
pub async fn run(settings: Settings, request: RebuildRequest) -> Result<(), RebuildError> {
    let boards = select_boards(&settings, &request.boards)?;
    let ids: BTreeSet<String> = boards.iter().map(|b| b.id().to_string()).collect();
    let topics = tokio::task::block_in_place(|| topics(&settings))?;
    let mut gone: Vec<String> =
        topics.bounds.iter().filter(|(_, (low, _))| *low > 0).map(|(f, (low, _))| format!("{f} from {low}")).collect();
    gone.sort();
    if !gone.is_empty() && !request.from_retained {
        return Err(RebuildError::NotRetained(gone.join(", ")));
    }
    let target: i64 = topics.bounds.values().map(|(low, high)| high - low).sum();

    // The rebuild's own settings: its prefix, its group, from the earliest records, its boards only.
    let live_prefix = settings.redis.key_prefix.clone();
    let mut own = settings.clone();
    own.redis.key_prefix = keys::rebuild_prefix(&live_prefix);
    own.kafka.group_id = format!("{}.rebuild.{}", settings.kafka.group_id, chrono::Utc::now().timestamp_millis());
    own.kafka.options.insert("auto.offset.reset".into(), "earliest".into());
    own.boards = boards;
    let own = Arc::new(own);

    let store = Store::connect(&settings.redis)
        .await?
        .with_call_sizes(settings.worker.max_call_time, settings.worker.max_events_per_call);
    store.load_script().await?;
    copy_league_state(&store, &live_prefix, &own.boards).await?;

    let gauges = Arc::new(Gauges::new());
    gauges.target.set(target);
    let cancel = CancellationToken::new();
    if let Some(addr) = request.listen {
        serve_metrics(addr, gauges.clone(), cancel.clone()).await?;
    }
    info!(boards = ?ids, group = %own.kafka.group_id, records = target, "Rebuilding.");
    let router = Arc::new(Router::new(own.boards.clone(), &own.redis.key_prefix));
    let health = Arc::new(Health::default());
    let mut worker = tokio::spawn(pipeline::run_with(
        own.clone(),
        router,
        store.clone(),
        health.clone(),
        cancel.clone(),
        pipeline::Produce::Drop,
    ));

    let bar = progress::bar(target.max(0) as u64, "rebuild: records");
    let marker = keys::deploy_key(&own.redis.key_prefix, &own.kafka.group_id);
    let dedupe_ttl = settings.redis.dedupe_ttl.as_secs();
    let mut swapped: BTreeSet<String> = BTreeSet::new();
    // Team boards' tags swap their members, contributions and players' lists too.
    let teams: BTreeSet<String> =
        own.boards.iter().filter(|b| b.team().is_some()).map(|b| b.id().to_string()).collect();
    let mut last_note = std::time::Instant::now();
    let outcome = loop {
        tokio::select! {
            r = &mut worker => break Err(RebuildError::Pipeline(format!("{r:?}"))),
            _ = tokio::signal::ctrl_c() => break Err(RebuildError::Interrupted),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        if let Some(reason) = health.data_lost.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            break Err(RebuildError::LostData(reason));
        }
        // How far the rebuild has read: its marker holds each partition's stored offset.
        let Ok(at) = store.marker(&marker).await else { continue };
        let applied: i64 = topics
            .bounds
            .iter()
            .map(|(f, (low, high))| at.get(f).copied().unwrap_or(*low).clamp(*low, *high) - low)
            .sum();
        bar.set_position(applied.max(0) as u64);
        gauges.applied.set(applied);
        if applied < target {
            continue;
        }
        // Every record there was at the start is applied: swap what agrees.
        let built = store.tag_bases(&keys::tags_key(&own.redis.key_prefix)).await?;
        let waiting = swap_agreeing(&store, &built, &mut swapped, (&live_prefix, &teams), dedupe_ttl).await?;
        gauges.swapped.set(swapped.len() as i64);
        gauges.waiting.set(waiting.len() as i64);
        if waiting.is_empty() && built.iter().all(|b| swapped.contains(b)) {
            break Ok(());
        }
        if last_note.elapsed() > Duration::from_secs(5) {
            last_note = std::time::Instant::now();
            for (tag, field, live_at, built_at) in &waiting {
                info!(%tag, %field, live_at, built_at, "Waiting to agree: the live workers are ahead on this tag.");
            }
        }
    };
    bar.finish_and_clear();
    cancel.cancel();
    let _ = tokio::time::timeout(settings.worker.shutdown_timeout, worker).await;
    // The rebuild's own keys: what was not swapped in, and its bookkeeping.
    let pattern = format!("{}:*", own.redis.key_prefix);
    let leftovers = scan_keys(&settings.redis, &pattern).await.map_err(RebuildError::Scan)?;
    let kept = store.unlink_each(&leftovers).await;
    if kept > 0 {
        warn!(keys = kept, pattern = %pattern, "Some of the rebuild's own keys could not be removed; remove them by hand.");
    }
    outcome?;
    // The live workers, stopped after Redis lost data, start again from the
    // group's commits, which the rebuilt tags now hold (a no-op otherwise).
    crate::recovery::restart_marker(&settings, &store).await?;
    let live_tags = store.tag_bases(&keys::tags_key(&live_prefix)).await?;
    let untouched: Vec<&String> = live_tags
        .iter()
        .filter(|t| keys::board_of_base(t).is_some_and(|b| ids.contains(b)))
        .filter(|t| !swapped.iter().any(|s| keys::live_base(s) == Some(t.as_str())))
        .collect();
    println!(
        "rebuilt {} board tag(s) of {} from {target} records; {} left as they were (no retained record touches them){}",
        swapped.len(),
        ids.iter().cloned().collect::<Vec<_>>().join(", "),
        untouched.len(),
        if untouched.is_empty() { String::new() } else { format!(": {untouched:?}") }
    );
    Ok(())
}

/// Swaps in each rebuilt tag of `built` not `swapped` yet where the rebuild
/// and the live workers agree, and registers it live; returns the tags the
/// live workers are ahead on: (tag, partition field, live offset, rebuilt offset).
async fn swap_agreeing(
    store: &Store,
    built: &[String],
    swapped: &mut BTreeSet<String>,
    (live_prefix, teams): (&str, &BTreeSet<String>),
    dedupe_ttl: u64,
) -> Result<Vec<(String, String, i64, i64)>, RebuildError> {
    let mut waiting = Vec::new();
    let pending: Vec<&String> = built.iter().filter(|b| !swapped.contains(*b)).collect();
    for b in pending {
        let Some(live) = keys::live_base(b) else { continue };
        let team = keys::board_of_base(live).is_some_and(|id| teams.contains(id));
        match store.swap_tag(live, b, dedupe_ttl, team).await {
            Ok(Swap::Done(n)) => {
                store.register_tags(&keys::tags_key(live_prefix), &[live.to_string()], false).await?;
                info!(tag = %live, period_keys = n, "Swapped the rebuilt keys in.");
                swapped.insert(b.clone());
            }
            Ok(Swap::Behind(field, live_at, built_at)) => waiting.push((live.to_string(), field, live_at, built_at)),
            Err(e) => warn!(error = %e, tag = %live, "A swap failed; it is tried again."),
        }
    }
    Ok(waiting)
}

async fn serve_metrics(addr: SocketAddr, gauges: Arc<Gauges>, cancel: CancellationToken) -> Result<(), RebuildError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| RebuildError::Listen { addr, source })?;
    let app = axum::Router::new().route("/metrics", axum::routing::get(move || async move { gauges.render() }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).with_graceful_shutdown(async move { cancel.cancelled().await }).await;
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_board_is_named_with_the_known_ones() {
        let settings = crate::config::load_str(
            "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n\
             [[board]]\nid = \"points\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n",
            [],
        )
        .unwrap();
        assert_eq!(select_boards(&settings, &[]).unwrap().len(), 1);
        let err = select_boards(&settings, &["nope".into()]).unwrap_err().to_string();
        assert!(err.contains("--board nope") && err.contains("points"), "{err}");
    }
}
