//! After Redis lost data: what an operator runs so that the workers go on.
//!
//! A worker that finds Redis lost data (see `pipeline::lost`) stops and
//! waits for one of two commands, then a restart; neither happens by itself:
//! - `rankflow rebuild` recomputes the boards from the topics and, at its
//!   end, [`restart_marker`]: the boards are whole again;
//! - `rankflow accept-loss` ([`accept_loss`]) registers again every tag that
//!   lost its registration and restarts the marker: the scores that Redis
//!   lost stay lost, and the boards go on from the group's commits.

use std::collections::BTreeSet;

use rdkafka::consumer::BaseConsumer;

use crate::config::Settings;
use crate::kafka::{client, commit};
use crate::keys;
use crate::store::{maintenance, Store, StoreError};

/// Why a recovery step failed.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error("cannot create a Kafka client: {0}")]
    Client(#[source] rdkafka::error::KafkaError),
    #[error("cannot read the group's committed offsets: {0}")]
    Commits(String),
    #[error(transparent)]
    Redis(#[from] StoreError),
    #[error("cannot list the board tags: {0}")]
    Scan(String),
}

/// What `rankflow accept-loss` did.
#[derive(Debug)]
pub struct Accepted {
    /// Tags registered before whose registration (and data) was gone.
    pub lost_tags: Vec<String>,
    /// Partition fields of the marker raised to the group's commits.
    pub raised: usize,
}

/// Raises the live consumer group's deployment marker to the group's
/// commits (never lowers it) and notes that the registry holds tags, so
/// that workers started next find Redis at or past the commits. Returns how
/// many partition fields it raised.
pub async fn restart_marker(settings: &Settings, store: &Store) -> Result<usize, RecoveryError> {
    let consumer: BaseConsumer = client::observer(&settings.kafka).create().map_err(RecoveryError::Client)?;
    let topics: Vec<String> = settings.kafka.topics.iter().chain(&settings.kafka.admin_topics).cloned().collect();
    let commits =
        tokio::task::block_in_place(|| commit::committed_fields(&consumer, &topics)).map_err(RecoveryError::Commits)?;
    let prefix = &settings.redis.key_prefix;
    let key = keys::deploy_key(prefix, &settings.kafka.group_id);
    let marker = store.marker(&key).await?;
    let raised: Vec<(String, i64)> = commits.into_iter().filter(|(f, c)| marker.get(f).is_none_or(|m| m < c)).collect();
    store.set_marker(&key, &raised).await?;
    if !store.tag_bases(&keys::tags_key(prefix)).await?.is_empty() {
        store.set_marker(&key, &[(keys::REGISTRY_FIELD.to_string(), 1)]).await?;
    }
    Ok(raised.len())
}

/// `rankflow accept-loss`: every tag of the registry, and every tag found
/// with data, is registered again where its registration is gone (the
/// registry gets back the tags found), and the marker restarts from the
/// group's commits. Run it with the workers stopped (or refusing), then
/// restart them.
pub async fn accept_loss(settings: &Settings) -> Result<Accepted, RecoveryError> {
    let store = Store::connect(&settings.redis).await?;
    let registry = keys::tags_key(&settings.redis.key_prefix);
    let registered = store.tag_bases(&registry).await?;
    let scanned = maintenance::tag_bases(&settings.redis).await.map_err(RecoveryError::Scan)?;
    let all: Vec<String> = registered.iter().chain(&scanned).cloned().collect::<BTreeSet<_>>().into_iter().collect();
    let lost_tags = store.unstamped(&all).await?;
    store.stamp_tags(&all).await?;
    store.add_to_registry(&registry, &scanned).await?;
    let raised = restart_marker(settings, &store).await?;
    Ok(Accepted { lost_tags, raised })
}
