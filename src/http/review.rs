//! `GET /v1/review?board=&player=&cursor=&limit=`: a board's pending held
//! events (score integrity), oldest first by when they were held, with
//! `next`, the cursor of the next page (null on the last). A board's
//! events are kept per tag (split, shard); the page merges its tags, whose
//! places (`<stamp>:<event id>`) order them all. And `held: n`, a
//! player's pending held events on a board, for the player read.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use serde_json::{json, Value};

use super::target::{board_of, fresh_of, parse_num, player_base, split_of};
use super::{ApiError, AppState};
use crate::board::Board;
use crate::keys;
use crate::store::review::STAMP_DIGITS;
use crate::store::{HeldEvent, Reader};

pub(super) async fn review(
    State(s): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let board_id = q.get("board").ok_or_else(|| ApiError::bad("board", "board is required"))?;
    let board = board_of(&s, board_id)?;
    let limit = parse_num(&q, "limit", 50, s.max_limit)?.max(1);
    let cursor = match q.get("cursor").map(String::as_str) {
        None | Some("") => None,
        Some(c) if valid_cursor(c) => Some(c),
        Some(_) => return Err(ApiError::bad("cursor", "cursor must be a `next` this endpoint answered")),
    };
    let player = q.get("player").map(String::as_str).filter(|p| !p.is_empty());
    let reader = s.reader()?.fresh(fresh_of(&q)?);
    let bases = bases(&s, &reader, board, &q, player).await?;
    let mut page: Vec<HeldEvent> = Vec::new();
    for base in &bases {
        // One more than the page, to know whether another follows.
        let got = reader.held_page(base, player, cursor, limit + 1).await.map_err(ApiError::unavailable)?;
        page.extend(got);
    }
    page.sort_by_key(HeldEvent::place);
    let next = (page.len() > limit).then(|| page[limit - 1].place());
    page.truncate(limit);
    let held: Vec<Value> = page
        .iter()
        .map(|h| {
            let mut v = json!({
                "event_id": h.event_id,
                "player_id": h.player_id,
                "score": h.score,
                "ts": h.ts,
                "rule": h.rule.as_str(),
                "value": h.value,
                "held_at": h.held_ms,
            });
            if let Some(c) = board.columns() {
                // A row: its values in place of a score, and the column the rule judged.
                v["scores"] = c.scores(&h.values);
                v["column"] = json!(crate::board::integrity::rule_column(board, h.rule));
                v.as_object_mut().map(|o| o.remove("score"));
            }
            v
        })
        .collect();
    Ok(Json(json!({ "board": board.id(), "held": held, "next": next })))
}

/// A place: a held event's stamp, a colon, its id.
fn valid_cursor(c: &str) -> bool {
    c.split_once(':').is_some_and(|(stamp, id)| {
        stamp.len() == STAMP_DIGITS && stamp.bytes().all(|b| b.is_ascii_digit()) && uuid::Uuid::parse_str(id).is_ok()
    })
}

/// The tags whose queues the page reads: the player's (of `split`, if the
/// board splits and the query names one), or every tag of the board.
async fn bases(
    s: &AppState,
    reader: &Reader,
    board: &Board,
    q: &HashMap<String, String>,
    player: Option<&str>,
) -> Result<Vec<String>, ApiError> {
    let split = if board.split_by().is_some() && q.contains_key("split") { split_of(board, q)? } else { None };
    match (s.router.known_bases(board, split), player) {
        (Some(_), Some(p)) => Ok(vec![player_base(s, board, split, p)]),
        (Some(bases), None) => Ok(bases),
        // Every split of the board: its tags, from the registry of tags.
        (None, _) => {
            let all = reader.tag_bases(&keys::tags_key(s.router.prefix())).await.map_err(ApiError::unavailable)?;
            Ok(keys::bases_of_board(all, board.id()))
        }
    }
}

/// `held: n` for a player read of `board` (split `split`): `None` on a
/// board whose rules hold nothing.
pub(super) async fn held_count(
    s: &AppState,
    reader: &Reader,
    board: &Board,
    split: Option<&str>,
    player: &str,
) -> Result<Option<u64>, ApiError> {
    if !board.integrity().holds() {
        return Ok(None);
    }
    let base = player_base(s, board, split, player);
    reader.held_count(&base, player).await.map(Some).map_err(ApiError::unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_a_place_and_nothing_else() {
        assert!(valid_cursor("17900000005001230002:00000000-0000-0000-0000-000000000007"));
        assert!(!valid_cursor("17900000005001230002"));
        assert!(!valid_cursor("1790000000500123000:00000000-0000-0000-0000-000000000007"));
        assert!(!valid_cursor("17900000005001230002:alice"));
        assert!(!valid_cursor("(17900000005001230002:00000000-0000-0000-0000-000000000007"));
    }
}
