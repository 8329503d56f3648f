//! `GET /v1/boards/{board}/periods?split=`: every period a board (or one
//! split of it) still holds, newest first, with its state: `upcoming`,
//! `open`, `ended` or `sealed`. The periods held are the period keys the
//! tag's registry lists that still exist (calendar periods, windows,
//! schedules' periods), plus the windows and the next period of each
//! schedule that have not started yet.

use std::collections::{BTreeSet, HashMap};

use axum::extract::{Path, Query, State};
use axum::Json;
use chrono::DateTime;
use serde_json::{json, Value};

use super::{now_ms, ApiError, AppState};
use crate::board::Board;
use crate::keys;
use crate::period::id::{Names, PeriodRef};
use crate::period::{Period, PeriodKind};

/// A period's state at `now`.
fn state(p: &Period, sealed: bool, now: i64) -> &'static str {
    match (p.start_ms, p.end_ms) {
        _ if sealed => "sealed",
        (Some(start), _) if now < start => "upcoming",
        (_, Some(end)) if end <= now => "ended",
        _ => "open",
    }
}

fn period_json(p: &Period, sealed: bool, now: i64) -> Value {
    let rfc = |ms: Option<i64>| ms.and_then(DateTime::from_timestamp_millis).map(|t| t.to_rfc3339());
    json!({
        "id": p.id,
        "kind": p.kind.name(),
        "start": rfc(p.start_ms),
        "end": rfc(p.end_ms),
        "state": state(p, sealed, now),
        "sealed": sealed,
    })
}

/// The board's periods in the tag's registry of keys (live period keys
/// only: not sealed snapshots, rolling boards or their builds).
fn held(board: &Board, base: &str, keys_: &[String]) -> Vec<Period> {
    let prefix = keys::period_prefix(base);
    keys_
        .iter()
        .filter_map(|k| k.strip_prefix(&prefix))
        .filter(|id| {
            let r = PeriodRef::parse(id);
            !r.sealed && !matches!(r.names, Names::Rolling(_)) && !id.starts_with('_')
        })
        .filter_map(|id| board.period_by_id(id).ok())
        .collect()
}

pub(super) async fn periods(
    State(s): State<AppState>,
    Path(board_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let board = super::target::board_of(&s, &board_id)?;
    let split = super::target::split_of(board, &q)?;
    let reader = s.reader()?.fresh(super::target::fresh_of(&q)?);
    // A sharded board's periods are those any shard holds, sealed once its
    // last shard is (the shards are sealed in order).
    let mut candidates: Vec<Period> = Vec::new();
    let bases = s.router.read_bases(board, split);
    for base in &bases {
        let registered = reader.period_keys(base).await.map_err(ApiError::unavailable)?;
        for p in held(board, base, &registered) {
            if candidates.iter().any(|c| c.id == p.id) {
                continue;
            }
            // Expired keys can linger in the registry until an erasure cleans it: only the existing count.
            if reader.holds(base, &p.id).await.map_err(ApiError::unavailable)? {
                candidates.push(p);
            }
        }
    }
    let last = bases.last().expect("a board has a tag");
    let sealed_keys = reader.sealed_fields(last).await.map_err(ApiError::unavailable)?;
    let sealed: BTreeSet<String> = candidates
        .iter()
        .filter(|p| sealed_keys.contains(&keys::period_key(last, &p.id)))
        .map(|p| p.id.clone())
        .collect();
    let now = now_ms();
    let mut ids: BTreeSet<String> = candidates.iter().map(|p| p.id.clone()).collect();
    let upcoming = board
        .windows()
        .iter()
        .map(|w| w.period())
        .chain(board.schedules().iter().filter_map(|s| s.next_after(board.timezone(), now)))
        .filter(|p| p.start_ms.is_some_and(|start| now < start));
    for p in upcoming {
        if ids.insert(p.id.clone()) {
            candidates.push(p);
        }
    }
    // Newest first; all-time (no start) last.
    candidates
        .sort_by(|a, b| b.start_ms.unwrap_or(i64::MIN).cmp(&a.start_ms.unwrap_or(i64::MIN)).then(a.id.cmp(&b.id)));
    let periods: Vec<Value> = candidates
        .iter()
        .map(|p| {
            let sealed = p.kind != PeriodKind::AllTime && sealed.contains(&p.id);
            period_json(p, sealed, now)
        })
        .collect();
    Ok(Json(json!({ "board": board.id(), "split": split, "periods": periods })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_is_upcoming_then_open_then_ended_unless_sealed() {
        let p = Period { kind: PeriodKind::Window, id: "s:x".into(), start_ms: Some(10), end_ms: Some(20) };
        assert_eq!(state(&p, false, 9), "upcoming");
        assert_eq!(state(&p, false, 10), "open");
        assert_eq!(state(&p, false, 20), "ended");
        assert_eq!(state(&p, true, 25), "sealed");
        assert_eq!(state(&Period::all_time(), false, 0), "open");
    }
}
