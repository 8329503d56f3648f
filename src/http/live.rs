//! `GET /v1/boards/{board}/live?period=&split=&limit=`: the top as
//! Server-Sent Events. Each event's data is what the top read answers for
//! the same parameters, sent when it changes, at most once a second per
//! stream; a new stream, or one resuming with `Last-Event-ID`, gets the
//! current top at once.
//!
//! Many streams of one top cost Redis what one costs: one watcher per top
//! (board and parameters) per process reads it once a second while a
//! stream watches it, and hands each change to every stream through a
//! `watch` channel, which keeps only the newest top. A stream that falls
//! behind skips to the newest rather than queueing tops, and a client that
//! stops reading is dropped by the connection's write deadline
//! (`super::serve`). At most `http.max_streams` streams are open at once.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use tokio::sync::watch;

use super::target::{parse_num, rank_policy, resolve};
use super::{now_ms, ApiError, AppState};

/// How often a watcher reads its top, and the most often a stream sends one.
const EVERY: Duration = Duration::from_secs(1);

/// The largest `limit` of a live top.
pub const MAX_LIVE_LIMIT: usize = 100;

/// A top as the streams send it: its id (when it was read, ms) and its JSON.
#[derive(Debug)]
struct Snapshot {
    id: i64,
    json: Bytes,
}

type Latest = watch::Receiver<Option<Arc<Snapshot>>>;

/// The tops being watched and the streams open, in one process.
pub struct Live {
    /// Per top, a receiver of its watcher (which ends once it is the only one).
    watchers: Mutex<HashMap<String, Latest>>,
    open: AtomicUsize,
    max_streams: usize,
}

impl Live {
    pub fn new(max_streams: usize) -> Live {
        Live { watchers: Mutex::default(), open: AtomicUsize::new(0), max_streams }
    }

    /// Streams open now.
    pub fn streams(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    fn watchers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Latest>> {
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The top `key` names, from its watcher, started if there is none.
    fn watch(s: &AppState, key: String, board: &str, q: &HashMap<String, String>) -> Latest {
        let mut watchers = s.live.watchers();
        if let Some(rx) = watchers.get(&key).filter(|rx| rx.has_changed().is_ok()) {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        watchers.insert(key.clone(), rx.clone());
        tokio::spawn(watcher(s.clone(), key, board.to_string(), q.clone(), tx));
        rx
    }
}

/// A place among the open streams, given back when the stream ends.
struct Slot(Arc<Live>);

impl Slot {
    fn take(live: &Arc<Live>) -> Result<Slot, ApiError> {
        if live.open.fetch_add(1, Ordering::Relaxed) >= live.max_streams {
            live.open.fetch_sub(1, Ordering::Relaxed);
            let open = format!("http.max_streams ({}) live streams are open: try again later", live.max_streams);
            return Err(ApiError::busy(open));
        }
        crate::metrics::get().live_streams.inc();
        Ok(Slot(live.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        crate::metrics::get().live_streams.dec();
    }
}

/// The parameters that make one top: the board and the query, sorted.
fn top_key(board: &str, q: &HashMap<String, String>) -> String {
    let mut params: Vec<_> = q.iter().collect();
    params.sort();
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{board}?{}", query.join("&"))
}

pub(super) async fn live(
    State(s): State<AppState>,
    Path(board_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    for p in ["cursor", "offset"] {
        if q.contains_key(p) {
            return Err(ApiError::bad(p, "a live top starts at the first entry"));
        }
    }
    // Checked here, without Redis: a new stream of a watched top costs Redis nothing.
    let t = resolve(&s, &board_id, &q)?;
    parse_num(&q, "limit", 10, MAX_LIVE_LIMIT)?;
    rank_policy(&q, t.board)?;
    s.reader()?;
    let slot = Slot::take(&s.live)?;
    let rx = Live::watch(&s, top_key(&board_id, &q), &board_id, &q);
    Ok(Sse::new(updates(rx, slot)).keep_alive(KeepAlive::default()).into_response())
}

/// A stream's events: the current top at once, then each change, at most
/// one a second (a change meanwhile is sent as the newest top then).
fn updates(rx: Latest, slot: Slot) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold((rx, slot, None::<Instant>), |(mut rx, slot, sent)| async move {
        let snapshot = match sent {
            None => rx.wait_for(Option::is_some).await.ok()?.clone(),
            Some(at) => {
                tokio::time::sleep_until((at + EVERY).into()).await;
                rx.changed().await.ok()?;
                rx.borrow_and_update().clone()
            }
        }?;
        let event = Event::default().id(snapshot.id.to_string()).data(String::from_utf8_lossy(&snapshot.json));
        Some((Ok(event), (rx, slot, Some(Instant::now()))))
    })
}

/// One top's watcher: reads it every [`EVERY`] while a stream watches it
/// and hands on each change; ends once none does.
async fn watcher(
    s: AppState,
    key: String,
    board: String,
    q: HashMap<String, String>,
    tx: watch::Sender<Option<Arc<Snapshot>>>,
) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last: Option<Bytes> = None;
    loop {
        tick.tick().await;
        {
            // Under the lock, so that no stream takes this watcher as it ends.
            let mut watchers = s.live.watchers();
            if tx.receiver_count() <= 1 {
                watchers.remove(&key);
                return;
            }
        }
        match read_top(&s, &board, &q).await {
            Ok(json) if last.as_ref() != Some(&json) => {
                last = Some(json.clone());
                tx.send_replace(Some(Arc::new(Snapshot { id: now_ms(), json })));
            }
            Ok(_) => {}
            // Redis unavailable: the streams keep the last top and wait.
            Err(status) => tracing::debug!(%status, top = %key, "A live top could not be read."),
        }
    }
}

/// The top read's answer for these parameters, as its handler renders it.
async fn read_top(s: &AppState, board: &str, q: &HashMap<String, String>) -> Result<Bytes, StatusCode> {
    let answer = super::reads::top(State(s.clone()), Path(board.to_string()), Query(q.clone())).await;
    let response = answer.map_err(|e| e.status)?;
    if response.status() != StatusCode::OK {
        return Err(response.status());
    }
    axum::body::to_bytes(response.into_body(), 16 << 20).await.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_top_whatever_the_order_of_its_parameters() {
        let q = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let a = top_key("pts", &q(&[("limit", "5"), ("period", "daily")]));
        assert_eq!(a, top_key("pts", &q(&[("period", "daily"), ("limit", "5")])));
        assert_eq!(a, "pts?limit=5&period=daily");
        assert_ne!(a, top_key("pts", &q(&[("limit", "6"), ("period", "daily")])));
    }

    #[test]
    fn streams_past_the_limit_are_refused_and_a_place_comes_back_when_one_ends() {
        let live = Arc::new(Live::new(2));
        let (a, _b) = (Slot::take(&live).unwrap(), Slot::take(&live).unwrap());
        let refused = Slot::take(&live).err().expect("a third stream");
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.message.contains("http.max_streams (2)"), "{}", refused.message);
        assert_eq!(live.streams(), 2);
        drop(a);
        assert!(Slot::take(&live).is_ok());
    }
}
