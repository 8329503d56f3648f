//! What a browser, a reverse proxy or a CDN may keep of an answer. Every
//! read's answer carries an `ETag` (a hash of its body: the same while
//! the board does not change, new when it does) and a `Cache-Control`:
//! `public, max-age=<http.cache_max_age>` for reads, the longer
//! `http.cache_max_age_sealed` for sealed periods (`:final`) and players'
//! history, `no-store` for `?fresh=true` (a player who has just played
//! asks for the newest), for errors and for the operating routes
//! (`/metrics`, `/healthz`, `/readyz`). A `GET` whose `If-None-Match`
//! names the answer's tag is answered 304 with no body. The live stream
//! is left alone: it is never buffered here.
//!
//! The tag is weak (`W/"..."`): a compressed answer and the plain one are
//! the same answer, whichever encoding the client took.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::period::id::PeriodRef;

/// The `Cache-Control` of each kind of read, made once.
#[derive(Clone, Debug)]
pub(super) struct Caching {
    read: HeaderValue,
    sealed: HeaderValue,
}

/// What kind of answer a request gets, by its route and parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A read of a board that changes as scores arrive.
    Read,
    /// A read of what no longer changes: a sealed period, a player's history.
    Sealed,
    /// `?fresh=true`: never from a cache.
    Fresh,
    /// Health and metrics: never from a cache, no tag.
    Operating,
    /// The live stream: not touched.
    Stream,
}

pub(super) const HISTORY_ROUTE: &str = "/v1/boards/{board}/players/{player}/history";
pub(super) const LIVE_ROUTE: &str = "/v1/boards/{board}/live";
/// The review queue: a moderator's read, never from a shared cache.
pub(super) const REVIEW_ROUTE: &str = "/v1/review";

fn kind(route: Option<&str>, query: Option<&str>) -> Kind {
    match route {
        Some(LIVE_ROUTE) => return Kind::Stream,
        Some(REVIEW_ROUTE) => return Kind::Fresh,
        Some("/metrics" | "/healthz" | "/readyz") | None => return Kind::Operating,
        _ => {}
    }
    let params = || form_urlencoded::parse(query.unwrap_or("").as_bytes());
    if params().any(|(k, v)| k == "fresh" && v == "true") {
        Kind::Fresh
    } else if route == Some(HISTORY_ROUTE) || params().any(|(k, v)| k == "period" && PeriodRef::parse(&v).sealed) {
        Kind::Sealed
    } else {
        Kind::Read
    }
}

/// `public, max-age=<age>`, or `no-store` for zero.
fn control_of(age: Duration) -> HeaderValue {
    if age.is_zero() {
        HeaderValue::from_static("no-store")
    } else {
        HeaderValue::try_from(format!("public, max-age={}", age.as_secs())).expect("ASCII digits")
    }
}

impl Caching {
    pub(super) fn new(max_age: Duration, sealed_max_age: Duration) -> Caching {
        Caching { read: control_of(max_age), sealed: control_of(sealed_max_age) }
    }

    fn control(&self, kind: Kind) -> HeaderValue {
        match kind {
            Kind::Read => self.read.clone(),
            Kind::Sealed => self.sealed.clone(),
            Kind::Fresh | Kind::Operating | Kind::Stream => HeaderValue::from_static("no-store"),
        }
    }
}

/// The weak tag of a body: 128 bits of XXH3, so two answers that differ never share one.
fn etag(body: &[u8]) -> HeaderValue {
    let hash = xxhash_rust::xxh3::xxh3_128(body);
    HeaderValue::try_from(format!("W/\"{hash:032x}\"")).expect("ASCII hex")
}

/// Whether `If-None-Match` names `tag` (weak comparison, as RFC 9110 asks of it), or is `*`.
fn matches(if_none_match: &HeaderValue, tag: &HeaderValue) -> bool {
    fn opaque(t: &str) -> &str {
        t.trim().trim_start_matches("W/")
    }
    let (Ok(list), Ok(tag)) = (if_none_match.to_str(), tag.to_str()) else { return false };
    list.trim() == "*" || list.split(',').any(|t| opaque(t) == opaque(tag))
}

pub(super) async fn caching(State(caching): State<Arc<Caching>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
    let kind = kind(route, req.uri().query());
    let conditional = matches!(*req.method(), Method::GET | Method::HEAD);
    let if_none_match = req.headers().get(IF_NONE_MATCH).cloned();
    let res = next.run(req).await;
    let streaming = res.headers().get(CONTENT_TYPE).is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if kind == Kind::Stream || streaming {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    if !parts.status.is_success() || kind == Kind::Operating {
        parts.headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return Response::from_parts(parts, body);
    }
    // Answers are JSON or the page, made whole before they are sent: buffering costs no memory they did not take.
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "An answer's body could not be read to tag it.");
            let mut res = StatusCode::INTERNAL_SERVER_ERROR.into_response();
            res.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            return res;
        }
    };
    let tag = etag(&bytes);
    parts.headers.insert(CACHE_CONTROL, caching.control(kind));
    if conditional && if_none_match.is_some_and(|m| matches(&m, &tag)) {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove(CONTENT_TYPE);
        parts.headers.remove(CONTENT_LENGTH);
        parts.headers.insert(ETAG, tag);
        return Response::from_parts(parts, Body::empty());
    }
    parts.headers.insert(ETAG, tag);
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_request_gets_its_cache_control() {
        let c = Caching::new(Duration::from_secs(1), Duration::from_secs(3600));
        let top = Some("/v1/boards/{board}/top");
        let control = |route, query| c.control(kind(route, query));
        assert_eq!(control(top, None), "public, max-age=1");
        assert_eq!(control(top, Some("period=weekly&limit=10")), "public, max-age=1");
        assert_eq!(control(top, Some("period=w%3A2026-W33%3Afinal")), "public, max-age=3600");
        assert_eq!(control(Some(HISTORY_ROUTE), None), "public, max-age=3600");
        assert_eq!(control(top, Some("period=w:2026-W33:final&fresh=true")), "no-store");
        assert_eq!(control(top, Some("fresh=false")), "public, max-age=1");
        assert_eq!(control(Some("/readyz"), None), "no-store");
        assert_eq!(kind(Some(LIVE_ROUTE), None), Kind::Stream);
        let off = Caching::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(off.control(kind(top, None)), "no-store");
    }

    #[test]
    fn if_none_match_compares_weakly_and_takes_lists_and_a_star() {
        let tag = etag(b"{\"entries\":[]}");
        assert_eq!(tag, etag(b"{\"entries\":[]}"));
        assert_ne!(tag, etag(b"{\"entries\":[1]}"));
        let strong = tag.to_str().unwrap().trim_start_matches("W/").to_string();
        assert!(matches(&tag, &tag));
        assert!(matches(&HeaderValue::try_from(strong).unwrap(), &tag));
        let list = format!("\"other\", {}", tag.to_str().unwrap());
        assert!(matches(&HeaderValue::try_from(list).unwrap(), &tag));
        assert!(matches(&HeaderValue::from_static("*"), &tag));
        assert!(!matches(&HeaderValue::from_static("W/\"other\""), &tag));
    }
}
