//! Reads of team boards. A team board's period keys rank teams, so its top
//! (by offset or cursor), the window around a team and rank-of are the
//! ranking reads of any board (through `layout.rs`), answered with
//! `team_id` and each team's `members` (how many contributions it holds in
//! the period); a team's read lists its contributions, best first, ties by
//! player id; a player's read answers their current team, its standing
//! and their contribution.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::cursor::Cursor;
use super::ranks::{percentile, Entry};
use super::standing::{Page, Standing};
use super::target::{parse_num, rank_policy, RankPolicy, Target};
use super::{layout, ApiError, AppState};

/// The team board tag (team boards are neither split nor sharded).
fn base(s: &AppState, t: &Target<'_>) -> String {
    s.router.base(t.board, None, "")
}

/// The period id the contributions keys carry: a sealed snapshot's live period's.
fn live_period<'t>(t: &'t Target<'_>) -> &'t str {
    crate::period::id::PeriodRef::parse(&t.period).text
}

/// A page's entries as teams: rank, team id, score and members.
async fn team_entries(
    s: &AppState,
    t: &Target<'_>,
    entries: &[Entry],
    policy: RankPolicy,
) -> Result<Vec<Value>, ApiError> {
    let teams: Vec<&str> = entries.iter().map(|e| e.member.as_str()).collect();
    let reader = s.reader()?.fresh(t.fresh);
    let sizes = reader.team_sizes(&base(s, t), live_period(t), &teams).await.map_err(ApiError::unavailable)?;
    Ok(entries
        .iter()
        .zip(sizes)
        .map(|(e, n)| json!({ "rank": e.ranks.under(policy), "team_id": e.member, "score": e.value, "members": n }))
        .collect())
}

fn listing(t: &Target<'_>, page: &Page, entries: Vec<Value>) -> Value {
    let mut body = json!({ "board": t.board.id(), "period": t.period, "total": page.total });
    super::cursor::add_cursors(&mut body, t, &page.entries, page.total);
    body["entries"] = Value::Array(entries);
    body
}

/// `GET /v1/boards/{board}/top` of a team board.
pub(super) async fn top(
    s: &AppState,
    t: &Target<'_>,
    cursor: Option<&Cursor>,
    offset: usize,
    limit: usize,
    policy: RankPolicy,
) -> Result<Value, ApiError> {
    let page = layout::top(s, t, cursor, offset, limit).await?;
    let entries = team_entries(s, t, &page.entries, policy).await?;
    Ok(listing(t, &page, entries))
}

/// `GET /v1/boards/{board}/teams/{team}/around`: the teams around a team.
pub(super) async fn around(
    State(s): State<AppState>,
    Path((board_id, team_id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let t = team_target(&s, &board_id, &q).await?;
    let radius = parse_num(&q, "radius", 2, (s.max_limit.saturating_sub(1) / 2).max(1))?;
    let policy = rank_policy(&q, t.board)?;
    shown(&s, &t, &team_id).await?.ok_or_else(|| no_team(&team_id, &t))?;
    let page = layout::around(&s, &t, &team_id, radius, false).await?;
    let page = page.ok_or_else(|| no_team(&team_id, &t))?;
    let entries = team_entries(&s, &t, &page.entries, policy).await?;
    let mut body = listing(&t, &page, entries);
    body["team_id"] = json!(team_id);
    if let Some(o) = body.as_object_mut() {
        o.remove("next_cursor");
        o.remove("prev_cursor");
    }
    Ok(Json(body))
}

/// A team's standing, unless it holds no contribution in the period or is
/// hidden (`team_hidden` keeps its rows in the period's shadow, which a
/// player board's hidden player reads their own place from).
async fn shown(s: &AppState, t: &Target<'_>, team_id: &str) -> Result<Option<Standing>, ApiError> {
    Ok(layout::player(s, t, team_id).await?.filter(|st| !st.hidden))
}

fn no_team(team_id: &str, t: &Target<'_>) -> ApiError {
    ApiError::not_found(format!("team '{team_id}' holds no contribution on {} {}", t.board.id(), t.period))
}

/// The target of a read only team boards answer.
async fn team_target<'a>(s: &'a AppState, board_id: &str, q: &HashMap<String, String>) -> Result<Target<'a>, ApiError> {
    let t = layout::target(s, board_id, q).await?;
    if t.board.team().is_none() {
        return Err(ApiError::not_found(format!("board '{board_id}' is not a team board")));
    }
    Ok(t)
}

/// `GET /v1/boards/{board}/teams/{team}`: the team's standing and its
/// members' contributions, best first, ties by player id.
pub(super) async fn team(
    State(s): State<AppState>,
    Path((board_id, team_id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let t = team_target(&s, &board_id, &q).await?;
    let policy = rank_policy(&q, t.board)?;
    let standing = shown(&s, &t, &team_id).await?.ok_or_else(|| no_team(&team_id, &t))?;
    let reader = s.reader()?.fresh(t.fresh);
    let mut rows =
        reader.team_contributions(&base(&s, &t), live_period(&t), &team_id).await.map_err(ApiError::unavailable)?;
    let desc = t.board.order() == crate::board::Order::Desc;
    rows.sort_by(|a, b| if desc { b.1.cmp(&a.1) } else { a.1.cmp(&b.1) }.then_with(|| a.0.cmp(&b.0)));
    let mut better = 0;
    let members: Vec<Value> = rows
        .iter()
        .enumerate()
        .map(|(i, (player, score))| {
            if i > 0 && rows[i - 1].1 != *score {
                better = i;
            }
            let rank = if policy == RankPolicy::Competition { better + 1 } else { i + 1 };
            json!({ "player_id": player, "score": score, "rank": rank })
        })
        .collect();
    Ok(Json(json!({
        "board": t.board.id(),
        "period": t.period,
        "team_id": team_id,
        "rank": standing.ranks.under(policy),
        "score": standing.score,
        "percentile": percentile(standing.total, standing.ranks.competition - 1),
        "total": standing.total,
        "members": members,
    })))
}

/// `GET /v1/boards/{board}/players/{player}` of a team board: the player's
/// current team, its standing in the period and their contribution to it
/// (`team` and `contribution` null where the team holds none there); 404
/// with `team_id` null when the player is in no team.
pub(super) async fn player(
    s: &AppState,
    t: &Target<'_>,
    player_id: &str,
    policy: RankPolicy,
) -> Result<Response, ApiError> {
    let reader = s.reader()?.fresh(t.fresh);
    let found = reader.team_of(&base(s, t), live_period(t), player_id).await.map_err(ApiError::unavailable)?;
    let mut body = json!({ "board": t.board.id(), "period": t.period, "player_id": player_id, "team_id": null });
    let Some((of, contribution)) = found else {
        body["error"] = json!(format!("player '{player_id}' is in no team on {}", t.board.id()));
        return Ok((StatusCode::NOT_FOUND, Json(body)).into_response());
    };
    let standing = shown(s, t, &of.team_id).await?;
    body["team_id"] = json!(of.team_id);
    body["team"] = match standing {
        Some(st) => json!({ "rank": st.ranks.under(policy), "score": st.score }),
        None => Value::Null,
    };
    body["contribution"] = json!(contribution);
    Ok(Json(body).into_response())
}
