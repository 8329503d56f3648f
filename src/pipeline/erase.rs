//! `player_erased`: removing a player from every key of every board tag.

use tracing::info;

use crate::keys;
use crate::retry::retry;
use crate::store::{maintenance, StoreError};

use super::Context;

/// Removes a player from every key of every board tag, at most once per
/// record, retrying until Redis has done it. `None`: abandoned on shutdown.
pub async fn erase_everywhere(cx: &Context, field: &str, offset: i64, player_id: &str) -> Option<()> {
    let settings = &cx.settings.redis;
    retry("erase a player", &cx.cancel, cx.settings.worker.max_backoff, || async {
        let bases = maintenance::tag_bases(settings).await.map_err(StoreError::Scan)?;
        let tags: Vec<(String, i64)> = bases
            .into_iter()
            .map(|base| {
                let shift =
                    keys::board_of_base(&base).and_then(|id| cx.router.board(id)).map_or(1, |b| b.packing().shift());
                (base, shift)
            })
            .collect();
        cx.store.erase(&tags, field, offset, player_id).await
    })
    .await?;
    info!("Erased a player from every board.");
    Some(())
}
