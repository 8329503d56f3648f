//! Reads from other origins (`http.cors_origins`): a page served from a
//! listed origin may read the API from the browser. A listed `Origin` is
//! answered `Access-Control-Allow-Origin` (the origin itself, or `*` when
//! any may read); an origin not listed gets no CORS headers, so the
//! browser keeps the answer from the page. Preflights (`OPTIONS` with
//! `Access-Control-Request-Method`, which a browser sends before the
//! friends `POST` with its JSON `Content-Type`, or a read that sets
//! `If-None-Match` itself) are answered here, 204, without reaching a
//! route. Every answer says `Vary: Origin`, so a cache in front never
//! hands one origin's answer to another.
//!
//! Written here rather than taken from tower-http's `CorsLayer`, which
//! answers every `OPTIONS` as a preflight and names the allowed methods to
//! origins it does not allow.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The origins allowed to read.
#[derive(Debug)]
pub(super) struct Cors {
    any: bool,
    origins: Vec<String>,
}

impl Cors {
    /// `None` when no origin is listed: no CORS at all, as before.
    pub(super) fn new(origins: &[String]) -> Option<Cors> {
        (!origins.is_empty()).then(|| Cors {
            any: origins.iter().any(|o| o == "*"),
            origins: origins.iter().map(|o| o.to_ascii_lowercase()).collect(),
        })
    }

    /// The `Access-Control-Allow-Origin` for a request from `origin`, if it may read.
    fn allow(&self, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
        let origin = origin?;
        if self.any {
            return Some(HeaderValue::from_static("*"));
        }
        let text = origin.to_str().ok()?.to_ascii_lowercase();
        self.origins.contains(&text).then(|| origin.clone())
    }
}

/// How long a browser may keep a preflight's answer.
const PREFLIGHT_MAX_AGE: &str = "600";

pub(super) async fn cors(State(cors): State<Arc<Cors>>, req: Request, next: Next) -> Response {
    let allowed = cors.allow(req.headers().get(ORIGIN));
    let preflight = req.method() == Method::OPTIONS && req.headers().contains_key(ACCESS_CONTROL_REQUEST_METHOD);
    let mut res = if preflight { StatusCode::NO_CONTENT.into_response() } else { next.run(req).await };
    let h = res.headers_mut();
    if let Some(origin) = allowed {
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        if preflight {
            h.insert(ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST"));
            h.insert(ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("Content-Type, If-None-Match"));
            h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(PREFLIGHT_MAX_AGE));
        } else {
            // A page may read the ETag to send it back in `If-None-Match`.
            h.insert(ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("ETag"));
        }
    }
    h.append(VARY, HeaderValue::from_static("Origin"));
    if preflight {
        h.append(VARY, HeaderValue::from_static("Access-Control-Request-Method, Access-Control-Request-Headers"));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_origin_is_echoed_and_others_get_nothing() {
        let cors = Cors::new(&["https://play.example.com".into()]).unwrap();
        let listed = HeaderValue::from_static("https://Play.example.com");
        assert_eq!(cors.allow(Some(&listed)), Some(listed.clone()));
        assert_eq!(cors.allow(Some(&HeaderValue::from_static("https://evil.example.com"))), None);
        assert_eq!(cors.allow(None), None);
        let any = Cors::new(&["*".into()]).unwrap();
        assert_eq!(any.allow(Some(&listed)), Some(HeaderValue::from_static("*")));
        assert!(Cors::new(&[]).is_none());
    }
}
