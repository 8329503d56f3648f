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
use crate::store::{maintenance, Store};

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
pub async fn restart_marker(settings: &Settings, store: &Store) -> Result<usize, String> {
    let consumer: BaseConsumer =
        client::observer(&settings.kafka).create().map_err(|e| format!("cannot create a Kafka client: {e}"))?;
    let topics: Vec<String> = settings.kafka.topics.iter().chain(&settings.kafka.admin_topics).cloned().collect();
    let commits = tokio::task::block_in_place(|| commit::committed_fields(&consumer, &topics))?;
    let prefix = &settings.redis.key_prefix;
    let key = keys::deploy_key(prefix, &settings.kafka.group_id);
    let marker = store.marker(&key).await.map_err(|e| e.to_string())?;
    let raised: Vec<(String, i64)> = commits.into_iter().filter(|(f, c)| marker.get(f).is_none_or(|m| m < c)).collect();
    store.set_marker(&key, &raised).await.map_err(|e| e.to_string())?;
    if !store.tag_bases(&keys::tags_key(prefix)).await.map_err(|e| e.to_string())?.is_empty() {
        store.set_marker(&key, &[(keys::REGISTRY_FIELD.to_string(), 1)]).await.map_err(|e| e.to_string())?;
    }
    Ok(raised.len())
}

/// `rankflow accept-loss`: every tag of the registry, and every tag found
/// with data, is registered again where its registration is gone (the
/// registry gets back the tags found), and the marker restarts from the
/// group's commits. Run it with the workers stopped (or refusing), then
/// restart them.
pub async fn accept_loss(settings: &Settings) -> Result<Accepted, String> {
    let store = Store::connect(&settings.redis).await.map_err(|e| e.to_string())?;
    let registry = keys::tags_key(&settings.redis.key_prefix);
    let registered = store.tag_bases(&registry).await.map_err(|e| e.to_string())?;
    let scanned = maintenance::tag_bases(&settings.redis).await?;
    let all: Vec<String> = registered.iter().chain(&scanned).cloned().collect::<BTreeSet<_>>().into_iter().collect();
    let lost_tags = store.unstamped(&all).await.map_err(|e| e.to_string())?;
    store.stamp_tags(&all).await.map_err(|e| e.to_string())?;
    store.add_to_registry(&registry, &scanned).await.map_err(|e| e.to_string())?;
    let raised = restart_marker(settings, &store).await?;
    Ok(Accepted { lost_tags, raised })
}
