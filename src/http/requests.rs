//! Request metrics: every answer counted by route and status
//! (`rankflow_http_requests_total`) and timed by route until its head is
//! ready (`rankflow_http_request_seconds`; for the live stream, until the
//! stream starts). `route` is the route's pattern
//! (`/v1/boards/{board}/players/{player}`), never a player id; requests
//! that match no route count as `unmatched`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

use crate::metrics;

pub(super) async fn count(req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().cloned();
    let started = Instant::now();
    let res = next.run(req).await;
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let m = metrics::get();
    m.http.requests.with_label_values(&[route, res.status().as_str()]).inc();
    m.http.seconds.with_label_values(&[route]).observe(started.elapsed().as_secs_f64());
    res
}
