//! Reads of a board whose period is one sorted set: each read is one call
//! of `read.lua`, so it describes one instant.

use super::cursor::Cursor;
use super::ranks::{int, listing, meta_of, ranks_at, stored_of};
use super::standing::{Friend, Friends, Page, RankOf, Standing};
use super::target::{PeriodKeys, RankPolicy, Target};
use super::{ApiError, AppState};

/// Runs one query of `read.lua` on the period's keys.
async fn query<T: redis::FromRedisValue>(
    s: &AppState,
    t: &Target<'_>,
    keys: &PeriodKeys,
    op: &str,
    args: &[String],
) -> Result<T, ApiError> {
    s.reader_for(t)?
        .query(keys.read_keys(), op, t.board.order().as_str(), t.board.packing().shift(), args)
        .await
        .map_err(ApiError::unavailable)
}

fn page(t: &Target<'_>, keys: &PeriodKeys, reply: &[redis::Value]) -> Page {
    let (total, entries) = listing(t.board, keys.meta_key.is_some(), reply);
    Page { total, entries, consistent: None }
}

/// A page of the top, by offset or from a cursor.
pub(super) async fn top(
    s: &AppState,
    t: &Target<'_>,
    keys: &PeriodKeys,
    cursor: Option<&Cursor>,
    offset: usize,
    limit: usize,
) -> Result<Page, ApiError> {
    let reply: Vec<redis::Value> = match cursor {
        None => query(s, t, keys, "top", &[offset.to_string(), limit.to_string()]).await?,
        Some(c) => {
            let args = [c.stored.to_string(), c.member.clone(), limit.to_string(), c.direction.name().to_string()];
            query(s, t, keys, "page", &args).await?
        }
    };
    Ok(page(t, keys, &reply))
}

/// A player's standing; `None` if they are not on the board.
pub(super) async fn player(
    s: &AppState,
    t: &Target<'_>,
    keys: &PeriodKeys,
    player_id: &str,
) -> Result<Option<Standing>, ApiError> {
    let reply: Option<Vec<redis::Value>> = query(s, t, keys, "player", &[player_id.to_string()]).await?;
    let Some(reply) = reply else { return Ok(None) };
    let hidden = int(reply.get(6)) == 1;
    Ok(Some(Standing {
        total: int(reply.first()) + i64::from(hidden),
        ranks: ranks_at(int(reply.get(1)), int(reply.get(2)), int(reply.get(3))),
        score: reply.get(4).map(|v| t.board.packing().decode(stored_of(v))).unwrap_or(0),
        meta: meta_of(reply.get(5)),
        hidden,
        consistent: None,
    }))
}

/// The window around a player; `None` if they are not on the board.
pub(super) async fn around(
    s: &AppState,
    t: &Target<'_>,
    keys: &PeriodKeys,
    player_id: &str,
    radius: usize,
    fill: bool,
) -> Result<Option<Page>, ApiError> {
    let args = [player_id.to_string(), radius.to_string(), if fill { "1" } else { "0" }.to_string()];
    let reply: Option<Vec<redis::Value>> = query(s, t, keys, "around", &args).await?;
    Ok(reply.map(|reply| page(t, keys, &reply)))
}

/// A friends read: the named players' ranks under `policy`.
pub(super) async fn players(
    s: &AppState,
    t: &Target<'_>,
    keys: &PeriodKeys,
    ids: Vec<String>,
    policy: RankPolicy,
) -> Result<Friends, ApiError> {
    let mut args = vec![policy.name().to_string()];
    args.extend(ids.iter().cloned());
    let reply: Vec<redis::Value> = query(s, t, keys, "players", &args).await?;
    let stride = if keys.meta_key.is_some() { 3 } else { 2 };
    let mut found = Vec::new();
    let mut not_found = Vec::new();
    for (id, row) in ids.into_iter().zip(reply.get(1..).unwrap_or_default().chunks(stride)) {
        if matches!(row[0], redis::Value::Nil) {
            not_found.push(id);
        } else {
            found.push(Friend {
                member: id,
                stored: stored_of(&row[0]),
                rank: int(row.get(1)) + 1,
                meta: meta_of(row.get(2)),
            });
        }
    }
    Ok(Friends { total: int(reply.first()), found, not_found, consistent: None })
}

/// The counts a value would rank by.
pub(super) async fn rank_of(s: &AppState, t: &Target<'_>, keys: &PeriodKeys, value: i64) -> Result<RankOf, ApiError> {
    let reply: Vec<redis::Value> = query(s, t, keys, "rank_of", &[value.to_string()]).await?;
    Ok(RankOf {
        total: int(reply.first()),
        better: int(reply.get(1)),
        better_or_equal: int(reply.get(2)),
        dense_better: int(reply.get(3)),
        consistent: None,
    })
}
