//! The HTTP server: `/metrics`, `/healthz`, `/readyz` and the read API of
//! SPEC section 8.
//!
//! Reads go straight to Redis through small Lua scripts, so a page or a
//! player's rank describes one instant. Every parameter is validated before
//! Redis is asked; a bad one is a 400 whose JSON body names it. This module
//! never writes a board.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router as HttpRouter};
use chrono::{DateTime, NaiveDate, TimeZone};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::board::{Board, Order, Router};
use crate::keys;
use crate::metrics;
use crate::period::{Period, PeriodKind};
use crate::store::RedisConn;
use crate::worker::Health;

const READ_TOP_LUA: &str = include_str!("scripts/read_top.lua");
const READ_PLAYER_LUA: &str = include_str!("scripts/read_player.lua");

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub router: Arc<Router>,
    pub redis: RedisConn,
    pub health: Arc<Health>,
    pub max_limit: usize,
    scripts: Arc<Scripts>,
}

struct Scripts {
    top: redis::Script,
    player: redis::Script,
}

impl AppState {
    pub fn new(router: Arc<Router>, redis: RedisConn, health: Arc<Health>, max_limit: usize) -> AppState {
        AppState {
            router,
            redis,
            health,
            max_limit,
            scripts: Arc::new(Scripts {
                top: redis::Script::new(READ_TOP_LUA),
                player: redis::Script::new(READ_PLAYER_LUA),
            }),
        }
    }
}

/// The application's routes.
pub fn app(state: AppState) -> HttpRouter {
    HttpRouter::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(|| async { metrics::get().render() }))
        .route("/v1/boards", get(list_boards))
        .route("/v1/boards/{board}/top", get(top))
        .route("/v1/boards/{board}/players/{player}", get(player))
        .with_state(state)
}

/// Serves until `cancel` fires.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, app(state)).with_graceful_shutdown(async move { cancel.cancelled().await }).await
}

/// An API error: status and JSON body `{error, parameter?}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    parameter: Option<&'static str>,
    message: String,
}

impl ApiError {
    fn bad(parameter: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, parameter: Some(parameter), message: message.into() }
    }
    fn not_found(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::NOT_FOUND, parameter: None, message: message.into() }
    }
    fn unavailable(err: redis::RedisError) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            parameter: None,
            message: format!("Redis is unavailable: {err}"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.message });
        if let Some(p) = self.parameter {
            body["parameter"] = json!(p);
        }
        (self.status, Json(body)).into_response()
    }
}

async fn readyz(State(s): State<AppState>) -> Response {
    let mut conn = s.redis.clone();
    let redis_ok = redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok();
    s.health.redis_up.store(redis_ok, Ordering::Relaxed);
    metrics::get().redis_up.set(i64::from(redis_ok));
    let kafka_ok = s.health.kafka_up.load(Ordering::Relaxed);
    let body = json!({ "redis": redis_ok, "kafka": kafka_ok });
    let status = if redis_ok && kafka_ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(body)).into_response()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn list_boards(State(s): State<AppState>) -> Json<Value> {
    let now = now_ms();
    let boards: Vec<Value> = s
        .router
        .boards()
        .iter()
        .map(|b| {
            let periods: Vec<Value> = b
                .periods
                .iter()
                .map(|&k| {
                    let p = Period::containing(k, b.timezone, now).unwrap_or_else(|_| Period::all_time());
                    json!({
                        "name": k.name(),
                        "current": p.id,
                        "next_reset": p.end_ms.and_then(DateTime::from_timestamp_millis).map(|t| t.to_rfc3339()),
                    })
                })
                .collect();
            json!({
                "id": b.id,
                "mode": b.mode.as_str(),
                "order": b.order.as_str(),
                "timezone": b.timezone.name(),
                "split_by": b.split_by,
                "on": b.on,
                "periods": periods,
            })
        })
        .collect();
    Json(json!({ "boards": boards }))
}

/// The board, period and key a read names.
struct Target<'a> {
    board: &'a Board,
    period: Period,
    key: String,
}

fn resolve<'a>(s: &'a AppState, board_id: &str, q: &HashMap<String, String>) -> Result<Target<'a>, ApiError> {
    let board = s.router.board(board_id).ok_or_else(|| ApiError::not_found(format!("no board '{board_id}'")))?;
    let split = match (&board.split_by, q.get("split")) {
        (Some(_), Some(v)) if crate::event::valid_split_value(v) => Some(v.as_str()),
        (Some(_), Some(_)) => return Err(ApiError::bad("split", "split must be 1 to 64 of [A-Za-z0-9_-]")),
        (Some(attr), None) => {
            return Err(ApiError::bad("split", format!("board '{}' is split by '{attr}': name a split", board.id)))
        }
        (None, Some(_)) => return Err(ApiError::bad("split", format!("board '{}' has no splits", board.id))),
        (None, None) => None,
    };
    let at_ms = match q.get("at") {
        None => now_ms(),
        Some(text) => parse_at(text, board)
            .ok_or_else(|| ApiError::bad("at", "at must be a date (2026-08-14) or an RFC 3339 time"))?,
    };
    let default_kind =
        if board.periods.contains(&PeriodKind::AllTime) { PeriodKind::AllTime } else { board.periods[0] };
    let period = match q.get("period").map(String::as_str) {
        None | Some("") => {
            Period::containing(default_kind, board.timezone, at_ms).map_err(|e| ApiError::bad("at", e.to_string()))?
        }
        Some(text) if text.contains(':') || text == "all" => {
            let p = Period::from_id(text, board.timezone).map_err(|e| ApiError::bad("period", e.to_string()))?;
            if !board.periods.contains(&p.kind) {
                return Err(ApiError::bad("period", format!("board '{}' keeps no {} periods", board.id, p.kind)));
            }
            p
        }
        Some(text) => {
            let kind = PeriodKind::parse(text)
                .ok_or_else(|| ApiError::bad("period", format!("'{text}' is not a period name or id")))?;
            if !board.periods.contains(&kind) {
                return Err(ApiError::bad("period", format!("board '{}' keeps no {kind} periods", board.id)));
            }
            Period::containing(kind, board.timezone, at_ms).map_err(|e| ApiError::bad("at", e.to_string()))?
        }
    };
    let key = keys::period_key(&keys::base(s.router.prefix(), &board.id, split), &period.id);
    Ok(Target { board, period, key })
}

/// `at` as a date (noon of that day in the board's zone) or an RFC 3339 time.
fn parse_at(text: &str, board: &Board) -> Option<i64> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_millis());
    }
    let d = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    board.timezone.from_local_datetime(&d.and_hms_opt(12, 0, 0)?).earliest().map(|t| t.timestamp_millis())
}

fn parse_num(q: &HashMap<String, String>, name: &'static str, default: usize, max: usize) -> Result<usize, ApiError> {
    match q.get(name) {
        None => Ok(default),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n <= max => Ok(n),
            _ => Err(ApiError::bad(name, format!("{name} must be an integer from 0 to {max}"))),
        },
    }
}

/// Rank policies of SPEC section 4.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RankPolicy {
    Ordinal,
    Competition,
}

fn order_arg(board: &Board) -> &'static str {
    match board.order {
        Order::Desc => "desc",
        Order::Asc => "asc",
    }
}

/// Stored scores are exact integers; show them as JSON integers.
fn score_json(raw: &str) -> Value {
    match raw.parse::<f64>() {
        Ok(f) if f.fract() == 0.0 && f.abs() <= crate::score::MAX_EXACT as f64 => json!(f as i64),
        Ok(f) => json!(f),
        Err(_) => json!(raw),
    }
}

async fn top(
    State(s): State<AppState>,
    Path(board_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let t = resolve(&s, &board_id, &q)?;
    let limit = parse_num(&q, "limit", 10, s.max_limit)?;
    let offset = parse_num(&q, "offset", 0, 10_000_000)?;
    let policy = match q.get("rank").map(String::as_str) {
        None | Some("ordinal") => RankPolicy::Ordinal,
        Some("competition") => RankPolicy::Competition,
        Some(_) => return Err(ApiError::bad("rank", "rank must be ordinal or competition")),
    };
    let mut conn = s.redis.clone();
    let reply: Vec<redis::Value> = if limit == 0 {
        vec![]
    } else {
        s.scripts
            .top
            .key(&t.key)
            .arg(order_arg(t.board))
            .arg(offset)
            .arg(limit)
            .invoke_async(&mut conn)
            .await
            .map_err(ApiError::unavailable)?
    };
    let as_i64 = |v: Option<&redis::Value>| match v {
        Some(redis::Value::Int(i)) => *i,
        _ => 0,
    };
    let total = as_i64(reply.first());
    let better = as_i64(reply.get(1));
    let mut entries = Vec::new();
    let mut prev: Option<(String, i64)> = None;
    for (i, pair) in reply.get(2..).unwrap_or_default().chunks(2).enumerate() {
        let member: String = redis::from_redis_value(pair[0].clone()).unwrap_or_default();
        let score: String = redis::from_redis_value(pair[1].clone()).unwrap_or_default();
        let ordinal = (offset + i + 1) as i64;
        let rank = match policy {
            RankPolicy::Ordinal => ordinal,
            RankPolicy::Competition => match &prev {
                None => better + 1,
                Some((s, r)) if *s == score => *r,
                Some(_) => ordinal,
            },
        };
        prev = Some((score.clone(), rank));
        entries.push(json!({ "rank": rank, "player_id": member, "score": score_json(&score) }));
    }
    Ok(Json(json!({ "board": t.board.id, "period": t.period.id, "total": total, "entries": entries })))
}

async fn player(
    State(s): State<AppState>,
    Path((board_id, player_id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let t = resolve(&s, &board_id, &q)?;
    let mut conn = s.redis.clone();
    let reply: Option<(String, i64, i64, i64)> = s
        .scripts
        .player
        .key(&t.key)
        .arg(order_arg(t.board))
        .arg(&player_id)
        .invoke_async(&mut conn)
        .await
        .map_err(ApiError::unavailable)?;
    let Some((score, pos, better, total)) = reply else {
        return Err(ApiError::not_found(format!("player '{player_id}' is unranked on {} {}", t.board.id, t.period.id)));
    };
    let competition = better + 1;
    let percentile = 100.0 * (total - better) as f64 / total as f64;
    Ok(Json(json!({
        "board": t.board.id,
        "period": t.period.id,
        "player_id": player_id,
        "score": score_json(&score),
        "rank": { "ordinal": pos + 1, "competition": competition },
        "percentile": (percentile * 100.0).round() / 100.0,
        "total": total,
    })))
}
