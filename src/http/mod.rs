//! The HTTP server: `/metrics`, `/healthz`, `/readyz`, the read API (the
//! README's HTTP API section) and the leaderboard page at `/` (`page.html`).
//!
//! Reads go straight to Redis through small Lua scripts, so a page or a
//! player's rank describes one instant. Every parameter is validated before
//! Redis is asked; a bad one is a 400 whose JSON body names it. This module
//! never writes a board.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router as HttpRouter};
use chrono::DateTime;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::board::Router;
use crate::health::Health;
use crate::metrics;
use crate::period::Period;
use crate::store::{Reader, StoreError};

mod caching;
mod columns;
mod cors;
mod cursor;
mod deadline;
mod history;
mod layout;
mod league;
pub mod live;
mod periods;
mod ranks;
mod reads;
mod requests;
mod review;
mod sharded;
mod sharded_rows;
mod single;
mod standing;
mod target;
mod teams;

/// The leaderboard page (`GET /`): HTML, CSS and a small script on the read
/// API, shipped inside the binary.
const PAGE_HTML: &str = include_str!("page.html");

async fn page() -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE_HTML)
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub router: Arc<Router>,
    /// Set once Redis is connected; until then reads answer 503 and
    /// `/readyz` says Redis is still being connected.
    redis: Arc<OnceLock<Reader>>,
    pub health: Arc<Health>,
    pub max_limit: usize,
    /// Most players a friends read may name.
    pub max_players: usize,
    /// The live tops watched and the streams open (`http.max_streams`).
    pub live: Arc<live::Live>,
    /// What browsers and caches are told.
    pub web: Arc<Web>,
}

/// What browsers and caches in front are told: which other origins' pages
/// may read (`http.cors_origins`) and how long an answer may be kept
/// (`http.cache_max_age`, `http.cache_max_age_sealed`; zero: `no-store`).
#[derive(Clone, Debug)]
pub struct Web {
    pub cors_origins: Vec<String>,
    pub cache_max_age: Duration,
    pub cache_max_age_sealed: Duration,
}

impl Default for Web {
    fn default() -> Web {
        Web {
            cors_origins: Vec::new(),
            cache_max_age: Duration::from_secs(1),
            cache_max_age_sealed: Duration::from_secs(3600),
        }
    }
}

impl AppState {
    /// The handlers' state before Redis is connected (see [`AppState::connected`]).
    pub fn new(router: Arc<Router>, health: Arc<Health>, max_limit: usize) -> AppState {
        let redis = Arc::new(OnceLock::new());
        let live = Arc::new(live::Live::new(10_000));
        AppState { router, redis, health, max_limit, max_players: 1000, live, web: Arc::new(Web::default()) }
    }

    /// Sets what browsers and caches are told.
    pub fn with_web(mut self, web: Web) -> AppState {
        self.web = Arc::new(web);
        self
    }

    /// Caps the live streams open at once at `n` (`http.max_streams`).
    pub fn with_max_streams(mut self, n: usize) -> AppState {
        self.live = Arc::new(live::Live::new(n));
        self
    }

    /// Caps friends reads at `n` players (`http.max_players`).
    pub fn with_max_players(mut self, n: usize) -> AppState {
        self.max_players = n;
        self
    }

    /// Hands the handlers the Redis connection, once it is up.
    pub fn connected(&self, reader: Reader) {
        let _ = self.redis.set(reader);
    }

    /// The reader for a read of `t`: a replica's unless `fresh=true` (or reads go to the primary).
    fn reader_for(&self, t: &target::Target<'_>) -> Result<Reader, ApiError> {
        Ok(self.reader()?.fresh(t.fresh))
    }

    fn reader(&self) -> Result<Reader, ApiError> {
        self.redis.get().cloned().ok_or_else(|| ApiError::busy("Redis is not connected yet"))
    }
}

/// The application's routes, with what browsers and caches need around them.
pub fn app(state: AppState) -> HttpRouter {
    let web = state.web.clone();
    for_browsers(routes(state), &web)
}

/// Around the routes, innermost first: the `ETag`, `Cache-Control` and 304
/// of every read; compression of answers over 1 KiB (gzip, or br when the
/// client offers it; never the live stream); CORS, when origins are listed;
/// and the request metrics, which count every answer the layers inside gave.
fn for_browsers(routes: HttpRouter, web: &Web) -> HttpRouter {
    use axum::middleware::{from_fn, from_fn_with_state};
    use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
    use tower_http::compression::{CompressionLayer, CompressionLevel};
    let caching = Arc::new(caching::Caching::new(web.cache_max_age, web.cache_max_age_sealed));
    // Level 4: a top 100 to under a fifth of its bytes (gzip and br alike), at a fraction of br's default cost (11).
    let compress = CompressionLayer::new()
        .quality(CompressionLevel::Precise(4))
        .compress_when(SizeAbove::new(COMPRESS_ABOVE as u16 + 1).and(NotForContentType::SSE));
    let mut app = routes.layer(from_fn_with_state(caching, caching::caching)).layer(compress);
    if let Some(c) = cors::Cors::new(&web.cors_origins) {
        app = app.layer(from_fn_with_state(Arc::new(c), cors::cors));
    }
    app.layer(from_fn(requests::count))
}

/// Answers larger than this many bytes are compressed for clients that accept it.
pub const COMPRESS_ABOVE: usize = 1024;

fn routes(state: AppState) -> HttpRouter {
    HttpRouter::new()
        .route("/", get(page))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(|| async { metrics::get().render() }))
        .route("/v1/boards", get(list_boards))
        .route("/v1/boards/{board}/top", get(reads::top))
        .route(caching::LIVE_ROUTE, get(live::live))
        .route("/v1/boards/{board}/players", axum::routing::post(reads::players))
        .route("/v1/boards/{board}/players/{player}", get(reads::player))
        .route("/v1/boards/{board}/players/{player}/around", get(reads::around))
        .route("/v1/boards/{board}/rank-of", get(reads::rank_of))
        .route("/v1/boards/{board}/teams/{team}", get(teams::team))
        .route("/v1/boards/{board}/teams/{team}/around", get(teams::around))
        .route("/v1/boards/{board}/cohorts/{cohort}", get(league::cohort))
        .route("/v1/boards/{board}/players/{player}/cohort", get(league::player_cohort))
        .route(caching::HISTORY_ROUTE, get(history::history))
        .route("/v1/boards/{board}/league", get(league::overview))
        .route("/v1/boards/{board}/periods", get(periods::periods))
        .route(caching::REVIEW_ROUTE, get(review::review))
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

/// Largest request body accepted (a larger one is answered 413), unless a
/// friends read of `http.max_players` ids needs more: see [`body_limit`].
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Bytes a friends body may spend per id: a player id is at most 128 bytes,
/// plus its quotes, comma and a space.
const BODY_BYTES_PER_PLAYER: usize = 132;

/// The body limit of a server whose friends reads name up to `max_players`.
pub fn body_limit(max_players: usize) -> usize {
    MAX_BODY_BYTES.max(max_players * BODY_BYTES_PER_PLAYER + 64)
}

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
    let body_limit = body_limit(state.max_players);
    let web = state.web.clone();
    let limited = routes(state)
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, limits.request_timeout))
        .layer(overload)
        .layer(tower_http::limit::RequestBodyLimitLayer::new(body_limit));
    // The limits' own answers (408, 413, 503) are counted and never cached.
    for_browsers(limited, &web)
}

/// Serves until `cancel` fires, then lets the requests in progress finish.
/// Each connection must send its request headers within
/// `limits.request_timeout` and within [`MAX_HEADER_BYTES`], and read what
/// it is sent (no write may wait longer than `limits.request_timeout`), so
/// a slow client cannot hold a connection forever.
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
            .serve_connection(TokioIo::new(deadline::WriteDeadline::new(stream, limits.request_timeout)), service);
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
    parameter: Option<Cow<'static, str>>,
    /// A machine-readable reason where a client acts on it (`not_placed`).
    code: Option<&'static str>,
    message: String,
}

impl ApiError {
    fn bad(parameter: impl Into<Cow<'static, str>>, message: impl Into<String>) -> ApiError {
        let parameter = Some(parameter.into());
        ApiError { status: StatusCode::BAD_REQUEST, parameter, code: None, message: message.into() }
    }
    fn not_found(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::NOT_FOUND, parameter: None, code: None, message: message.into() }
    }
    /// 503: Redis cannot answer now, or a limit is reached; try again later.
    fn busy(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::SERVICE_UNAVAILABLE, parameter: None, code: None, message: message.into() }
    }
    fn unavailable(err: StoreError) -> ApiError {
        ApiError::busy(err.to_string())
    }
    /// 404 `not_placed`: a league read of a player in no cohort of the round.
    fn not_placed(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::NOT_FOUND, parameter: None, code: Some("not_placed"), message: message.into() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.message });
        if let Some(p) = self.parameter {
            body["parameter"] = json!(p);
        }
        if let Some(c) = self.code {
            body["code"] = json!(c);
        }
        (self.status, Json(body)).into_response()
    }
}

/// 200 when Redis answers and a broker connection is up; otherwise 503,
/// with the reasons.
async fn readyz(State(s): State<AppState>) -> Response {
    let mut reasons: Vec<String> = Vec::new();
    let redis_ok = match s.redis.get() {
        None => {
            reasons.push("Redis is not connected yet".into());
            false
        }
        Some(reader) => {
            let ok = reader.ping().await;
            s.health.redis_up.store(ok, Ordering::Relaxed);
            metrics::get().redis_up.set(i64::from(ok));
            if !ok {
                reasons.push("Redis does not answer PING".into());
            }
            ok
        }
    };
    let kafka_ok = s.health.kafka_up.load(Ordering::Relaxed);
    if !kafka_ok {
        // A broker that refused our TLS or credentials says why (the settings to check).
        reasons.push(s.health.kafka_refusal().unwrap_or_else(|| "no Kafka broker connection is up yet".into()));
    }
    // A Schema Registry that does not answer holds consuming back.
    let registry = s.health.registry_outage();
    if let Some(reason) = &registry {
        reasons.push(reason.clone());
    }
    let lost = s.health.data_lost.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(reason) = &lost {
        reasons.push(reason.clone());
    }
    let mut body = json!({ "redis": redis_ok, "kafka": kafka_ok, "data_lost": lost.is_some() });
    if registry.is_some() {
        body["schema_registry"] = json!(false);
    }
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
            let one = b.columns().is_none();
            json!({
                "id": b.id(),
                "mode": one.then(|| b.mode().as_str()),
                "order": one.then(|| b.order().as_str()),
                "columns": b.columns().map(|c| c.list.iter().map(|c| json!({
                    "name": c.name,
                    "mode": c.mode.as_str(),
                    "order": c.order.as_str(),
                })).collect::<Vec<_>>()),
                "row": b.columns().map(|c| c.row.as_str()),
                "team": b.team().map(|t| json!({ "leave": t.leave.as_str(), "counts_after_ms": t.counts_after_ms })),
                "timezone": b.timezone().name(),
                "split_by": b.split_by(),
                "on": b.on(),
                "periods": periods,
                "rolling": b.rolling().iter().map(|r| json!({
                    "name": r.name,
                    "period": crate::period::id::rolling_id(&r.name),
                    "days": r.days,
                    "refresh_seconds": r.refresh.as_secs(),
                })).collect::<Vec<_>>(),
                "close_after_seconds": b.close_after().map(|d| d.as_secs()),
                "windows": b.windows().iter().map(|w| json!({
                    "name": w.name,
                    "period": w.id(),
                    "from": DateTime::from_timestamp_millis(w.from_ms).map(|t| t.to_rfc3339()),
                    "to": DateTime::from_timestamp_millis(w.to_ms).map(|t| t.to_rfc3339()),
                    "state": if now < w.from_ms { "upcoming" } else if now < w.to_ms { "open" } else { "ended" },
                })).collect::<Vec<_>>(),
                "schedules": b.schedules().iter().map(|s| json!({
                    "name": s.name,
                    "cron": s.pattern,
                    "duration_seconds": s.duration.as_secs(),
                    "current": s.period_at(b.timezone(), now).map(|p| p.id),
                    "next": s.next_after(b.timezone(), now).map(|p| json!({
                        "period": p.id,
                        "start": p.start_ms.and_then(DateTime::from_timestamp_millis).map(|t| t.to_rfc3339()),
                    })),
                })).collect::<Vec<_>>(),
                "meta": b.meta(),
                "dense_rank": b.dense_rank(),
                "review": b.integrity().holds(),
                "league": b.league().map(|l| json!({
                    "rounds": l.rounds,
                    "tiers": l.tiers,
                    "cohort_size": l.cohort_size,
                })),
            })
        })
        .collect();
    Json(json!({ "boards": boards }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_limit_takes_a_friends_read_of_max_players_longest_ids() {
        assert_eq!(body_limit(4), MAX_BODY_BYTES);
        let ids: Vec<String> = (0..1000).map(|i| format!("{i:0>128}")).collect();
        let body = json!({ "players": ids }).to_string();
        assert!(body.len() <= body_limit(1000), "{} > {}", body.len(), body_limit(1000));
    }
}
