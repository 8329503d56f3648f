//! `GET /v1/boards/{board}/players/{player}/history?split=`: a player's
//! standing in each sealed period the board still holds (recorded at the
//! seal: later erasures of others do not change it), newest end first, and
//! their best rank ever per kind of period, kept after the periods expire.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde_json::{json, Map, Value};

use super::ranks::percentile;
use super::{ApiError, AppState};
use crate::board::Board;
use crate::store::{PlayerHistory, SealedStanding};

pub(super) async fn history(
    State(s): State<AppState>,
    Path((board_id, player_id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let board = super::target::board_of(&s, &board_id)?;
    let split = super::target::split_of(board, &q)?;
    let reader = s.reader()?.fresh(super::target::fresh_of(&q)?);
    // A sharded board keeps a player's history on the player's shard.
    let base = super::target::player_base(&s, board, split, &player_id);
    let found = reader.history(&base, &player_id, board.meta()).await.map_err(ApiError::unavailable)?;
    Ok(Json(history_json(board, split, &player_id, found)))
}

/// The answer: periods newest end first (a period the board no longer
/// configures sorts by its id), bests by kind.
fn history_json(board: &Board, split: Option<&str>, player_id: &str, found: PlayerHistory) -> Value {
    let end = |p: &SealedStanding| board.period_by_id(&p.period_id).ok().and_then(|p| p.end_ms).unwrap_or(i64::MIN);
    let mut periods = found.periods;
    periods.sort_by(|a, b| end(b).cmp(&end(a)).then_with(|| b.period_id.cmp(&a.period_id)));
    let periods: Vec<Value> = periods
        .iter()
        .map(|p| {
            let mut entry = json!({
                "period": p.period_id,
                "rank": p.ordinal,
                "percentile": percentile(p.total, p.competition - 1),
            });
            match board.columns() {
                Some(c) => entry["scores"] = c.scores(&p.values),
                None => entry["score"] = json!(board.packing().decode(p.stored)),
            }
            if let Some(meta) = p.meta.as_deref().and_then(|m| serde_json::from_str::<Value>(m).ok()) {
                entry["meta"] = meta;
            }
            entry
        })
        .collect();
    let best: Map<String, Value> =
        found.best.iter().map(|b| (b.kind.clone(), json!({ "rank": b.rank, "period": b.period_id }))).collect();
    json!({
        "board": board.id(),
        "split": split,
        "player_id": player_id,
        "best_rank": found.best.iter().map(|b| b.rank).min(),
        "best": best,
        "periods": periods,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::BestRank;

    #[test]
    fn periods_come_newest_end_first_with_their_percentile_and_the_best_rank_is_the_best_of_the_kinds() {
        let settings = crate::config::load_str(
            "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n[sealing]\ntopic = \"s\"\n\
             [[board]]\nid = \"pts\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"daily\", \"weekly\"]\nclose_after = \"1m\"\n",
            [],
        )
        .unwrap();
        let board = &settings.boards[0];
        let standing = |id: &str, ordinal, competition, total, stored| SealedStanding {
            period_id: id.into(),
            ordinal,
            competition,
            total,
            stored,
            values: vec![],
            meta: None,
        };
        let found = PlayerHistory {
            periods: vec![
                standing("d:2026-08-13", 2, 2, 4, 30),
                standing("w:2026-W33", 5, 4, 10, 90),
                standing("d:2026-08-14", 1, 1, 3, 50),
            ],
            best: vec![
                BestRank { kind: "daily".into(), rank: 1, period_id: "d:2026-08-14".into() },
                BestRank { kind: "weekly".into(), rank: 5, period_id: "w:2026-W33".into() },
            ],
        };
        let body = history_json(board, None, "alice", found);
        let ids: Vec<&str> =
            body["periods"].as_array().unwrap().iter().map(|p| p["period"].as_str().unwrap()).collect();
        // The week ends on 2026-08-17, after both days.
        assert_eq!(ids, ["w:2026-W33", "d:2026-08-14", "d:2026-08-13"]);
        assert_eq!(body["periods"][2], json!({ "period": "d:2026-08-13", "rank": 2, "score": 30, "percentile": 75.0 }));
        assert_eq!(body["periods"][0]["percentile"], json!(70.0));
        assert_eq!(body["best_rank"], json!(1));
        assert_eq!(body["best"]["weekly"], json!({ "rank": 5, "period": "w:2026-W33" }));
        let none = history_json(board, None, "bob", PlayerHistory::default());
        assert_eq!((none["best_rank"].clone(), none["periods"].clone()), (Value::Null, json!([])));
    }
}
