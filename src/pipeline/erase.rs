//! `player_erased`: removing a player from every key of every board tag,
//! found through the registry of tags (`keys::tags_key`), never by
//! scanning the keyspace.

use tracing::{info, warn};

use crate::keys;
use crate::retry::retry;
use crate::store::{maintenance, ApplyResult, StoreError};

use super::Context;

/// Removes a player from every key of every board tag, at most once per
/// record and once per event id, retrying until Redis has done it. `None`:
/// abandoned on shutdown.
pub async fn erase_everywhere(
    cx: &Context,
    field: &str,
    offset: i64,
    event_id: &uuid::Uuid,
    player_id: &str,
) -> Option<()> {
    let registry = keys::tags_key(cx.router.prefix());
    let results = retry("erase a player", &cx.cancel, cx.settings.worker.max_backoff, || async {
        let bases = cx.store.tag_bases(&registry).await?;
        let tags: Vec<(String, i64)> = bases
            .into_iter()
            .map(|base| {
                let shift =
                    keys::board_of_base(&base).and_then(|id| cx.router.board(id)).map_or(1, |b| b.packing().shift());
                (base, shift)
            })
            .collect();
        cx.store.erase(&tags, field, offset, event_id, player_id).await
    })
    .await?;
    if !results.is_empty() && results.iter().all(|r| *r == ApplyResult::DuplicateEvent) {
        info!(%event_id, "An erasure with an event id already applied (a producer retry) changed nothing.");
    } else {
        info!(%event_id, "Erased a player from every board.");
    }
    Some(())
}

/// At start, registers every board tag that already has data (found by one
/// scan of the offsets hashes: data written before the registry existed),
/// so that an erasure reaches them. `false`: abandoned on shutdown.
pub async fn seed_registry(cx: &Context) -> bool {
    let registry = keys::tags_key(cx.router.prefix());
    let seeded = retry("register the existing board tags", &cx.cancel, cx.settings.worker.max_backoff, || async {
        let bases = maintenance::tag_bases(&cx.settings.redis).await.map_err(StoreError::Scan)?;
        cx.store.register_tags(&registry, &bases).await?;
        Ok::<_, StoreError>(bases)
    })
    .await;
    match seeded {
        Some(bases) => {
            cx.tags.lock().unwrap_or_else(|e| e.into_inner()).extend(bases);
            true
        }
        None => {
            warn!("Shutdown while registering the board tags.");
            false
        }
    }
}
