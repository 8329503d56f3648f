//! The read API's handlers: a page of the top (by offset or cursor), a
//! player, around a player, a set of players (friends) and the rank a score
//! would have. Each resolves its target and asks for its read through
//! `layout.rs` (which sends it to `single.rs` or `sharded.rs`), and renders
//! the typed answer, the same way for both.

use std::collections::{HashMap, HashSet};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::cursor::{add_cursors, check_cursor, take_cursor};
use super::ranks::{percentile, Entry, ListingJson};
use super::standing::{Friends, Page, RankOf, Standing};
use super::target::{parse_num, rank_policy, unranked, RankPolicy, Target};
use super::{columns, layout, league, teams, ApiError, AppState};

/// A listing's answer, serialised here: the entries' metadata is passed
/// through as stored, never parsed.
fn listing_response(head: Value, entries: &[Entry], policy: RankPolicy) -> Response {
    Json(ListingJson { head, entries: entries.iter().map(|e| e.json(policy)).collect() }).into_response()
}

pub(super) async fn top(
    State(s): State<AppState>,
    Path(board_id): Path<String>,
    Query(mut q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let cursor = take_cursor(&mut q)?;
    let t = layout::target(&s, &board_id, &q).await?;
    let limit = parse_num(&q, "limit", 10, s.max_limit)?;
    let offset = parse_num(&q, "offset", 0, 100_000_000)?;
    let policy = rank_policy(&q, t.board)?;
    if let Some(c) = &cursor {
        check_cursor(c, &t, None)?;
    }
    if t.board.columns().is_some() {
        return Ok(Json(columns::top(&s, &t, cursor.as_ref(), offset, limit, policy).await?).into_response());
    }
    if t.board.team().is_some() {
        return Ok(Json(teams::top(&s, &t, cursor.as_ref(), offset, limit, policy).await?).into_response());
    }
    let page = layout::top(&s, &t, cursor.as_ref(), offset, limit).await?;
    let mut head = page_head(&t, &page, None);
    add_cursors(&mut head, &t, &page.entries, page.total);
    Ok(listing_response(head, &page.entries, policy))
}

/// A page's head: the board, period, (player,) total and, on a sharded board, `consistent`.
fn page_head(t: &Target<'_>, page: &Page, player_id: Option<&str>) -> Value {
    let mut head = json!({ "board": t.board.id(), "period": t.period, "total": page.total });
    if let Some(p) = player_id {
        head["player_id"] = json!(p);
    }
    if let Some(consistent) = page.consistent {
        head["consistent"] = json!(consistent);
    }
    head
}

pub(super) async fn player(
    State(s): State<AppState>,
    Path((board_id, player_id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let t = layout::target(&s, &board_id, &q).await?;
    if t.board.columns().is_some() {
        return Ok(Json(columns::player(&s, &t, &player_id).await?).into_response());
    }
    if t.board.team().is_some() {
        return teams::player(&s, &t, &player_id, rank_policy(&q, t.board)?).await;
    }
    let standing = layout::player(&s, &t, &player_id).await?;
    let standing = standing.ok_or_else(|| unranked(&player_id, &t))?;
    let mut body = standing_json(&t, &player_id, &standing);
    if let Some(league) = league::player_field(&s, &t, &player_id).await? {
        body["league"] = league;
    }
    let split = Some(t.split.as_str()).filter(|s| !s.is_empty());
    let reader = s.reader()?.fresh(t.fresh);
    if let Some(n) = super::review::held_count(&s, &reader, t.board, split, &player_id).await? {
        body["held"] = json!(n);
    }
    Ok(Json(body).into_response())
}

fn standing_json(t: &Target<'_>, player_id: &str, st: &Standing) -> Value {
    let r = st.ranks;
    let mut body = json!({
        "board": t.board.id(),
        "period": t.period,
        "player_id": player_id,
        "score": st.score,
        "rank": { "ordinal": r.ordinal, "competition": r.competition, "dense": t.board.dense_rank().then_some(r.dense) },
        "percentile": percentile(st.total, r.competition - 1),
        "total": st.total,
    });
    if let Some(consistent) = st.consistent {
        body["consistent"] = json!(consistent);
    }
    if let Some(meta) = &st.meta {
        body["meta"] = serde_json::from_str(meta.get()).unwrap_or_default();
    }
    if st.hidden {
        body["hidden"] = json!(true);
    }
    body
}

pub(super) async fn around(
    State(s): State<AppState>,
    Path((board_id, player_id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let t = layout::target(&s, &board_id, &q).await?;
    let radius = parse_num(&q, "radius", 2, (s.max_limit.saturating_sub(1) / 2).max(1))?;
    let fill = match q.get("fill").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad("fill", "fill must be true or false")),
    };
    let policy = rank_policy(&q, t.board)?;
    if t.board.columns().is_some() {
        return Ok(Json(columns::around(&s, &t, &player_id, radius, fill, policy).await?).into_response());
    }
    if t.board.team().is_some() {
        return Err(teams_only("/teams/{team}/around"));
    }
    let page = layout::around(&s, &t, &player_id, radius, fill).await?;
    let page = page.ok_or_else(|| unranked(&player_id, &t))?;
    Ok(listing_response(page_head(&t, &page, Some(&player_id)), &page.entries, policy))
}

/// A player read a team board does not answer, and the read that does.
fn teams_only(instead: &str) -> ApiError {
    ApiError::not_found(format!("a team board ranks teams: read {instead} instead"))
}

/// The distinct player ids of a friends body `{"players": ["id", ...]}`, in
/// the order given, or a message saying what is wrong with it.
fn friends_body(body: &[u8], max: usize) -> Result<Vec<String>, String> {
    let shape = "the body must be a JSON object {\"players\": [\"id\", ...]}";
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("{shape}: {e}"))?;
    let list = v.get("players").and_then(Value::as_array).ok_or(shape)?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for p in list {
        let id = p.as_str().ok_or_else(|| format!("{shape}: every player id must be a string"))?;
        if seen.insert(id) {
            out.push(id.to_string());
        }
    }
    if out.is_empty() || out.len() > max {
        return Err(format!("players must name 1 to {max} distinct player ids, it names {}", out.len()));
    }
    Ok(out)
}

/// A friends, party or clan read: the named players' global ranks and their
/// ranks within the set, best first, in one atomic read.
pub(super) async fn players(
    State(s): State<AppState>,
    Path(board_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let t = layout::target(&s, &board_id, &q).await?;
    let policy = rank_policy(&q, t.board)?;
    let ids = friends_body(&body, s.max_players).map_err(|m| ApiError::bad("players", m))?;
    if t.board.team().is_some() {
        return Err(teams_only("/teams/{team}"));
    }
    if t.board.columns().is_some() {
        return Ok(Json(columns::players(&s, &t, ids, policy).await?).into_response());
    }
    let Friends { total, mut found, not_found, consistent } = layout::players(&s, &t, ids, policy).await?;
    found.sort_by(|a, b| t.board.order().entries((a.stored, &a.member), (b.stored, &b.member)));
    let entries: Vec<FriendJson> = found
        .iter()
        .enumerate()
        .map(|(i, f)| FriendJson {
            rank: f.rank,
            rank_in_set: i + 1,
            player_id: &f.member,
            score: t.board.packing().decode(f.stored),
            meta: f.meta.as_deref(),
        })
        .collect();
    let mut head = json!({ "board": t.board.id(), "period": t.period, "total": total, "not_found": not_found });
    if let Some(consistent) = consistent {
        head["consistent"] = json!(consistent);
    }
    Ok(Json(FriendsJson { head, entries }).into_response())
}

/// An entry of a friends read.
#[derive(Serialize)]
struct FriendJson<'a> {
    rank: i64,
    rank_in_set: usize,
    player_id: &'a str,
    score: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct FriendsJson<'a> {
    #[serde(flatten)]
    head: Value,
    entries: Vec<FriendJson<'a>>,
}

/// The rank a player with `score` would have, were they on the board.
pub(super) async fn rank_of(
    State(s): State<AppState>,
    Path(board_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let t = layout::target(&s, &board_id, &q).await?;
    if t.board.columns().is_some() {
        return Ok(Json(columns::rank_of(&s, &t, &q).await?));
    }
    let max = t.board.packing().max_value();
    let score = match q.get("score").map(|v| v.parse::<i64>()) {
        Some(Ok(v)) if v.abs() <= max => v,
        Some(Ok(_)) => return Err(ApiError::bad("score", format!("score must be from -{max} to {max} on this board"))),
        Some(Err(_)) => return Err(ApiError::bad("score", "score must be an integer")),
        None => return Err(ApiError::bad("score", "score is required")),
    };
    let RankOf { total, better, better_or_equal, dense_better, consistent } = layout::rank_of(&s, &t, score).await?;
    // A newcomer ranks after the players already at the score.
    let ordinal = better_or_equal + 1;
    let mut body = json!({
        "board": t.board.id(),
        "period": t.period,
        "score": score,
        "total": total,
        "rank": {
            "ordinal": ordinal,
            "competition": better + 1,
            "dense": t.board.dense_rank().then_some(dense_better + 1),
        },
        "percentile": percentile(total + 1, better),
    });
    if let Some(consistent) = consistent {
        body["consistent"] = json!(consistent);
    }
    Ok(Json(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_friends_body_names_distinct_players_in_order() {
        assert_eq!(friends_body(br#"{"players": ["b", "a", "b"]}"#, 2).unwrap(), ["b", "a"]);
        for bad in [&b"[]"[..], b"{}", b"nope", br#"{"players": "a"}"#, br#"{"players": [1]}"#, br#"{"players": []}"#] {
            assert!(friends_body(bad, 5).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let err = friends_body(br#"{"players": ["a", "b", "c"]}"#, 2).unwrap_err();
        assert!(err.contains("1 to 2"), "{err}");
    }
}
