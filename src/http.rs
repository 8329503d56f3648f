//! The HTTP server: `/metrics`, `/healthz`, `/readyz` and the read API (the
//! README's HTTP API section).
//!
//! Reads go straight to Redis through small Lua scripts, so a page or a
//! player's rank describes one instant. Every parameter is validated before
//! Redis is asked; a bad one is a 400 whose JSON body names it. This module
//! never writes a board.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router as HttpRouter};
use chrono::{DateTime, NaiveDate, TimeZone};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::board::{Board, Order, Router};
use crate::health::Health;
use crate::keys;
use crate::metrics;
use crate::period::{Period, PeriodKind};
use crate::store::RedisConn;

const READ_LUA: &str = include_str!("scripts/read.lua");

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub router: Arc<Router>,
    /// Set once Redis is connected; until then reads answer 503 and
    /// `/readyz` says Redis is still being connected.
    redis: Arc<OnceLock<RedisConn>>,
    pub health: Arc<Health>,
    pub max_limit: usize,
    script: Arc<redis::Script>,
}

impl AppState {
    /// The handlers' state before Redis is connected (see [`AppState::connected`]).
    pub fn new(router: Arc<Router>, health: Arc<Health>, max_limit: usize) -> AppState {
        let redis = Arc::new(OnceLock::new());
        AppState { router, redis, health, max_limit, script: Arc::new(redis::Script::new(READ_LUA)) }
    }

    /// Hands the handlers the Redis connection, once it is up.
    pub fn connected(&self, conn: RedisConn) {
        let _ = self.redis.set(conn);
    }

    fn redis(&self) -> Result<RedisConn, ApiError> {
        self.redis.get().cloned().ok_or_else(|| ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            parameter: None,
            message: "Redis is not connected yet".into(),
        })
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
        .route("/v1/boards/{board}/players/{player}/around", get(around))
        .with_state(state)
}

/// What one client may cost the server.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Headers must arrive within this, and a request be answered within it (408).
    pub request_timeout: Duration,
    /// Requests in progress at once; one more is answered 503.
    pub max_concurrent: usize,
}

/// Largest request head (request line and headers) read; a larger one is
/// answered 431. hyper's read buffer cannot be smaller than 8 KiB.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Largest request body accepted; a larger one is answered 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The routes with the limits around them.
pub fn limited_app(state: AppState, limits: Limits) -> HttpRouter {
    use axum::error_handling::HandleErrorLayer;
    use tower::ServiceBuilder;
    let overload = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
            let body = json!({ "error": "too many requests in progress; try again" });
            (StatusCode::SERVICE_UNAVAILABLE, Json(body))
        }))
        .load_shed()
        // Global: axum layers each route apart, and the cap is the server's.
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(limits.max_concurrent));
    app(state)
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, limits.request_timeout))
        .layer(overload)
        .layer(tower_http::limit::RequestBodyLimitLayer::new(MAX_BODY_BYTES))
}

/// Serves until `cancel` fires, then lets the requests in progress finish.
/// Each connection must send its request headers within
/// `limits.request_timeout` and within [`MAX_HEADER_BYTES`], so a slow
/// client cannot hold a connection forever.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: Limits,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let app = limited_app(state, limits);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "Accepting an HTTP connection failed.");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = cancel.cancelled() => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.request_timeout)
            .max_buf_size(MAX_HEADER_BYTES)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "An HTTP connection ended with an error.");
            }
        });
    }
    graceful.shutdown().await;
    Ok(())
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

/// 200 when Redis answers and a broker connection is up; otherwise 503,
/// with the reasons.
async fn readyz(State(s): State<AppState>) -> Response {
    let mut reasons = Vec::new();
    let redis_ok = match s.redis.get() {
        None => {
            reasons.push("Redis is not connected yet");
            false
        }
        Some(conn) => {
            let ok = redis::cmd("PING").query_async::<String>(&mut conn.clone()).await.is_ok();
            s.health.redis_up.store(ok, Ordering::Relaxed);
            metrics::get().redis_up.set(i64::from(ok));
            if !ok {
                reasons.push("Redis does not answer PING");
            }
            ok
        }
    };
    let kafka_ok = s.health.kafka_up.load(Ordering::Relaxed);
    if !kafka_ok {
        reasons.push("no Kafka broker connection is up yet");
    }
    let mut body = json!({ "redis": redis_ok, "kafka": kafka_ok });
    let status = if reasons.is_empty() {
        StatusCode::OK
    } else {
        body["reason"] = json!(reasons.join("; "));
        StatusCode::SERVICE_UNAVAILABLE
    };
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
                .periods()
                .iter()
                .map(|&k| {
                    let p = Period::containing(k, b.timezone(), now).unwrap_or_else(|_| Period::all_time());
                    json!({
                        "name": k.name(),
                        "current": p.id,
                        "next_reset": p.end_ms.and_then(DateTime::from_timestamp_millis).map(|t| t.to_rfc3339()),
                    })
                })
                .collect();
            json!({
                "id": b.id(),
                "mode": b.mode().as_str(),
                "order": b.order().as_str(),
                "timezone": b.timezone().name(),
                "split_by": b.split_by(),
                "on": b.on(),
                "periods": periods,
                "rolling": b.rolling().iter().map(|r| json!({
                    "name": r.name,
                    "period": keys::rolling_id(&r.name),
                    "days": r.days,
                    "refresh_seconds": r.refresh.as_secs(),
                })).collect::<Vec<_>>(),
                "close_after_seconds": b.close_after().map(|d| d.as_secs()),
            })
        })
        .collect();
    Json(json!({ "boards": boards }))
}

/// The board, period and keys a read names.
struct Target<'a> {
    board: &'a Board,
    /// The period id (`d:2026-08-14`), sealed (`d:2026-08-14:final`) or rolling (`r:last7d`).
    period: String,
    key: String,
    dense_key: String,
}

fn resolve<'a>(s: &'a AppState, board_id: &str, q: &HashMap<String, String>) -> Result<Target<'a>, ApiError> {
    let board = s.router.board(board_id).ok_or_else(|| ApiError::not_found(format!("no board '{board_id}'")))?;
    let split = match (&board.split_by(), q.get("split")) {
        (Some(_), Some(v)) if crate::event::valid_split_value(v) => Some(v.as_str()),
        (Some(_), Some(_)) => return Err(ApiError::bad("split", "split must be 1 to 64 of [A-Za-z0-9_-]")),
        (Some(attr), None) => {
            return Err(ApiError::bad("split", format!("board '{}' is split by '{attr}': name a split", board.id())))
        }
        (None, Some(_)) => return Err(ApiError::bad("split", format!("board '{}' has no splits", board.id()))),
        (None, None) => None,
    };
    let at_ms = match q.get("at") {
        None => now_ms(),
        Some(text) => parse_at(text, board)
            .ok_or_else(|| ApiError::bad("at", "at must be a date (2026-08-14) or an RFC 3339 time"))?,
    };
    let default_kind =
        if board.periods().contains(&PeriodKind::AllTime) { PeriodKind::AllTime } else { board.periods()[0] };
    let base = keys::base(s.router.prefix(), board.id(), split);
    let raw = q.get("period").map(String::as_str).unwrap_or("");
    let (text, sealed) = match raw.strip_suffix(":final") {
        Some(t) => (t, true),
        None => (raw, false),
    };
    // A rolling board, by name (`last7d`) or id (`r:last7d`).
    let rolling_name = text.strip_prefix("r:").unwrap_or(text);
    if board.rolling().iter().any(|r| r.name == rolling_name) {
        if sealed {
            return Err(ApiError::bad("period", "rolling boards are never sealed"));
        }
        let id = keys::rolling_id(rolling_name);
        return Ok(Target {
            board,
            key: keys::period_key(&base, &id),
            dense_key: keys::dense_key(&base, &id),
            period: id,
        });
    }
    if text.starts_with("r:") {
        return Err(ApiError::bad("period", format!("board '{}' has no rolling board '{rolling_name}'", board.id())));
    }
    let period = match Some(text) {
        None | Some("") => {
            Period::containing(default_kind, board.timezone(), at_ms).map_err(|e| ApiError::bad("at", e.to_string()))?
        }
        Some(text) if text.contains(':') || text == "all" => {
            let p = Period::from_id(text, board.timezone()).map_err(|e| ApiError::bad("period", e.to_string()))?;
            if !board.periods().contains(&p.kind) {
                return Err(ApiError::bad("period", format!("board '{}' keeps no {} periods", board.id(), p.kind)));
            }
            p
        }
        Some(text) => {
            let kind = PeriodKind::parse(text)
                .ok_or_else(|| ApiError::bad("period", format!("'{text}' is not a period name or id")))?;
            if !board.periods().contains(&kind) {
                return Err(ApiError::bad("period", format!("board '{}' keeps no {kind} periods", board.id())));
            }
            Period::containing(kind, board.timezone(), at_ms).map_err(|e| ApiError::bad("at", e.to_string()))?
        }
    };
    let id = if sealed {
        if board.close_after().is_none() {
            return Err(ApiError::bad(
                "period",
                format!("board '{}' does not seal its periods (no close_after)", board.id()),
            ));
        }
        if period.kind == PeriodKind::AllTime {
            return Err(ApiError::bad("period", "all_time is never sealed"));
        }
        keys::final_id(&period.id)
    } else {
        period.id
    };
    Ok(Target { board, key: keys::period_key(&base, &id), dense_key: keys::dense_key(&base, &id), period: id })
}

/// `at` as a date (noon of that day in the board's zone) or an RFC 3339 time.
fn parse_at(text: &str, board: &Board) -> Option<i64> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_millis());
    }
    let d = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    board.timezone().from_local_datetime(&d.and_hms_opt(12, 0, 0)?).earliest().map(|t| t.timestamp_millis())
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

/// Rank policies: ordinal, competition and dense.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RankPolicy {
    /// Position + 1.
    Ordinal,
    /// 1 + players with a strictly better score.
    Competition,
    /// 1 + distinct better scores.
    Dense,
}

fn rank_policy(q: &HashMap<String, String>, board: &Board) -> Result<RankPolicy, ApiError> {
    match q.get("rank").map(String::as_str) {
        None | Some("ordinal") => Ok(RankPolicy::Ordinal),
        Some("competition") => Ok(RankPolicy::Competition),
        Some("dense") if board.dense_rank() => Ok(RankPolicy::Dense),
        Some("dense") => {
            Err(ApiError::bad("rank", format!("board '{}' keeps no dense-rank index (dense_rank = false)", board.id())))
        }
        Some(_) => Err(ApiError::bad("rank", "rank must be ordinal, competition or dense")),
    }
}

/// The 404 of a player absent from a board: unranked, never rank 0 or last.
fn unranked(player_id: &str, t: &Target<'_>) -> ApiError {
    ApiError::not_found(format!("player '{player_id}' is unranked on {} {}", t.board.id(), t.period))
}

/// Runs one query of `read.lua` on the target's keys.
async fn read_script<T: redis::FromRedisValue>(
    s: &AppState,
    t: &Target<'_>,
    op: &str,
    args: &[String],
) -> Result<T, ApiError> {
    let mut conn = s.redis()?;
    let mut inv = s.script.key(&t.key);
    inv.key(&t.dense_key).arg(op).arg(order_arg(t.board)).arg(t.board.packing().shift());
    for a in args {
        inv.arg(a);
    }
    inv.invoke_async(&mut conn).await.map_err(ApiError::unavailable)
}

fn order_arg(board: &Board) -> &'static str {
    match board.order() {
        Order::Desc => "desc",
        Order::Asc => "asc",
    }
}

/// The three ranks of one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ranks {
    ordinal: i64,
    competition: i64,
    dense: i64,
}

/// Ranks of a contiguous run of entries in board order, from the first
/// entry's position and the counts of strictly better members and values.
/// Within the run, an entry whose value equals the previous one shares its
/// competition and dense rank; otherwise competition rank is its ordinal and
/// dense rank is one more than the previous entry's.
fn ranks_of_run(start: i64, better: i64, dense_better: i64, values: &[i64]) -> Vec<Ranks> {
    let mut out: Vec<Ranks> = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let ordinal = start + i as i64 + 1;
        let r = match out.last() {
            None => Ranks { ordinal, competition: better + 1, dense: dense_better + 1 },
            Some(prev) if values[i - 1] == *v => Ranks { ordinal, ..*prev },
            Some(prev) => Ranks { ordinal, competition: ordinal, dense: prev.dense + 1 },
        };
        out.push(r);
    }
    out
}

fn int(v: Option<&redis::Value>) -> i64 {
    match v {
        Some(redis::Value::Int(i)) => *i,
        Some(other) => redis::from_redis_value::<i64>(other.clone()).unwrap_or(0),
        None => 0,
    }
}

/// A stored score (Redis replies with a string) decoded to its value.
fn value_of(board: &Board, raw: &redis::Value) -> i64 {
    let stored: f64 = redis::from_redis_value(raw.clone()).unwrap_or(0.0);
    board.packing().decode(stored as i64)
}

/// A listing reply `{ total, start, better, dense_better, m1, s1, ... }` as JSON entries.
fn listing(t: &Target<'_>, reply: &[redis::Value], policy: RankPolicy) -> (i64, Vec<Value>) {
    let total = int(reply.first());
    let pairs: Vec<(String, i64)> = reply
        .get(4..)
        .unwrap_or_default()
        .chunks(2)
        .map(|p| (redis::from_redis_value(p[0].clone()).unwrap_or_default(), value_of(t.board, &p[1])))
        .collect();
    let values: Vec<i64> = pairs.iter().map(|(_, v)| *v).collect();
    let ranks = ranks_of_run(int(reply.get(1)), int(reply.get(2)), int(reply.get(3)), &values);
    let entries = pairs
        .into_iter()
        .zip(ranks)
        .map(|((member, value), r)| {
            let rank = match policy {
                RankPolicy::Ordinal => r.ordinal,
                RankPolicy::Competition => r.competition,
                RankPolicy::Dense => r.dense,
            };
            json!({ "rank": rank, "player_id": member, "score": value })
        })
        .collect();
    (total, entries)
}

async fn top(
    State(s): State<AppState>,
    Path(board_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let t = resolve(&s, &board_id, &q)?;
    let limit = parse_num(&q, "limit", 10, s.max_limit)?;
    let offset = parse_num(&q, "offset", 0, 100_000_000)?;
    let policy = rank_policy(&q, t.board)?;
    let reply: Vec<redis::Value> = read_script(&s, &t, "top", &[offset.to_string(), limit.to_string()]).await?;
    let (total, mut entries) = listing(&t, &reply, policy);
    if limit == 0 {
        entries.clear();
    }
    Ok(Json(json!({ "board": t.board.id(), "period": t.period, "total": total, "entries": entries })))
}

async fn player(
    State(s): State<AppState>,
    Path((board_id, player_id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let t = resolve(&s, &board_id, &q)?;
    let reply: Option<Vec<redis::Value>> = read_script(&s, &t, "player", std::slice::from_ref(&player_id)).await?;
    let Some(reply) = reply else {
        return Err(unranked(&player_id, &t));
    };
    let total = int(reply.first());
    let r = ranks_of_run(int(reply.get(1)), int(reply.get(2)), int(reply.get(3)), &[0])[0];
    let score = reply.get(4).map(|v| value_of(t.board, v)).unwrap_or(0);
    let percentile = 100.0 * (total - (r.competition - 1)) as f64 / total.max(1) as f64;
    Ok(Json(json!({
        "board": t.board.id(),
        "period": t.period,
        "player_id": player_id,
        "score": score,
        "rank": { "ordinal": r.ordinal, "competition": r.competition, "dense": t.board.dense_rank().then_some(r.dense) },
        "percentile": (percentile * 100.0).round() / 100.0,
        "total": total,
    })))
}

async fn around(
    State(s): State<AppState>,
    Path((board_id, player_id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let t = resolve(&s, &board_id, &q)?;
    let radius = parse_num(&q, "radius", 2, (s.max_limit.saturating_sub(1) / 2).max(1))?;
    let policy = rank_policy(&q, t.board)?;
    let reply: Option<Vec<redis::Value>> =
        read_script(&s, &t, "around", &[player_id.clone(), radius.to_string()]).await?;
    let Some(reply) = reply else {
        return Err(unranked(&player_id, &t));
    };
    let (total, entries) = listing(&t, &reply, policy);
    Ok(Json(json!({
        "board": t.board.id(),
        "period": t.period,
        "player_id": player_id,
        "total": total,
        "entries": entries,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_fixture_ranks_three_ways() {
        // carol 100, bob 100, alice 90 in descending board order.
        let r = ranks_of_run(0, 0, 0, &[100, 100, 90]);
        let triple: Vec<(i64, i64, i64)> = r.iter().map(|r| (r.ordinal, r.competition, r.dense)).collect();
        assert_eq!(triple, [(1, 1, 1), (2, 1, 1), (3, 3, 2)]);
    }

    #[test]
    fn a_page_starting_inside_a_tie_continues_its_ranks() {
        // Page from position 5: four members are strictly better, in two distinct values.
        let r = ranks_of_run(5, 4, 2, &[50, 50, 40, 30, 30]);
        let triple: Vec<(i64, i64, i64)> = r.iter().map(|r| (r.ordinal, r.competition, r.dense)).collect();
        assert_eq!(triple, [(6, 5, 3), (7, 5, 3), (8, 8, 4), (9, 9, 5), (10, 9, 5)]);
    }
}
