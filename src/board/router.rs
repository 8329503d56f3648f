//! Routing events to the boards that take them, and planning each board's
//! writes (pure: no I/O, see the module above).

use std::sync::{Arc, Mutex};

use super::{Board, BoardWrite, Decision, Mode};
use crate::event::{valid_split_value, Event, Reason};
use crate::keys;

mod periods;

use periods::{PeriodCache, PERIOD_CACHE_SPLITS};

/// Maps event types to the boards that take them.
#[derive(Clone, Debug)]
pub struct Router {
    boards: Vec<Board>,
    by_type: rustc_hash::FxHashMap<String, Vec<usize>>,
    prefix: String,
    /// The last period written per board, kind and split value, with its
    /// bounds: most events fall in the period of the event before them, and
    /// their keys need not be worked out and allocated again.
    period_cache: Arc<Mutex<PeriodCache>>,
    /// Sharded boards: the key bases of each (board, split)'s shards.
    shard_cache: Arc<Mutex<ShardCache>>,
}

type ShardCache = rustc_hash::FxHashMap<(String, Option<String>), Arc<Vec<String>>>;

impl Router {
    pub fn new(boards: Vec<Board>, prefix: &str) -> Router {
        let mut by_type: rustc_hash::FxHashMap<String, Vec<usize>> = Default::default();
        for (i, b) in boards.iter().enumerate() {
            for t in b.on() {
                by_type.entry(t.clone()).or_default().push(i);
            }
            if b.team().is_some() {
                for t in crate::event::team::KINDS {
                    by_type.entry(t.to_string()).or_default().push(i);
                }
            }
        }
        Router {
            boards,
            by_type,
            prefix: prefix.to_string(),
            period_cache: Default::default(),
            shard_cache: Default::default(),
        }
    }

    pub fn boards(&self) -> &[Board] {
        &self.boards
    }

    pub fn board(&self, id: &str) -> Option<&Board> {
        self.boards.iter().find(|b| b.id() == id)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn listens(&self, kind: &str) -> bool {
        self.by_type.contains_key(kind)
    }

    /// Every board the event reaches, with its decision. `record_ts_ms` is
    /// the Kafka record timestamp: a period whose key has already expired at
    /// that time is not written, and a board left with no period refuses the
    /// event (`expired_period`).
    pub fn plan(&self, event: &Event, record_ts_ms: i64) -> Vec<(usize, Decision)> {
        let Some(targets) = self.by_type.get(&event.kind) else {
            return Vec::new();
        };
        targets.iter().map(|&i| (i, self.plan_board(i, event, record_ts_ms))).collect()
    }

    /// Board `i`'s decision for `event` (of a type it takes), as [`Router::plan`]
    /// makes it: an approved held event is planned again this way.
    pub fn plan_board(&self, i: usize, event: &Event, record_ts_ms: i64) -> Decision {
        let board = &self.boards[i];
        if event.team.is_some() {
            // A membership event writes no period: it changes the player's
            // team, and with `forfeit` takes contributions off it.
            let base = self.base(board, None, &event.player_id);
            let params = board.write_params();
            return Decision::Write(BoardWrite {
                base,
                params,
                periods: Vec::new(),
                num: 0,
                tie: 0,
                ts: event.ts_ms,
                values: Vec::new(),
            });
        }
        let split = match board.split_by() {
            None => None,
            Some(attr) => match event.attrs.get(attr) {
                None => return Decision::Refused(Reason::MissingSplit),
                Some(v) if !valid_split_value(v) => return Decision::Refused(Reason::InvalidSplit),
                Some(v) => Some(v.as_str()),
            },
        };
        let (num, tie, values) = match board.columns() {
            Some(c) => match event.scores.as_ref().map(|s| s.values(c.names())) {
                Some(Ok(values)) if c.out_of_bounds(&values).is_some() => {
                    return Decision::Refused(Reason::ScoreOutOfRange)
                }
                Some(Ok(values)) => (0, 0, values),
                _ => return Decision::Refused(Reason::InvalidScore),
            },
            None => match one_score(board, event) {
                Ok((num, tie)) => (num, tie, Vec::new()),
                Err(reason) => return Decision::Refused(reason),
            },
        };
        let base = self.base(board, split, &event.player_id);
        match self.periods_at(i, split, &base, event.ts_ms, record_ts_ms) {
            Ok(periods) => Decision::Write(BoardWrite {
                base,
                params: board.write_params(),
                periods,
                num,
                tie,
                ts: event.ts_ms,
                values,
            }),
            Err(reason) => Decision::Refused(reason),
        }
    }

    /// Why board `i` refuses `event`, in words naming the field at fault
    /// (a dead letter's detail); `None` for a refusal its reason says all of.
    pub fn refusal_detail(&self, i: usize, event: &Event, reason: Reason) -> Option<String> {
        let board = &self.boards[i];
        if let Some(rule) = reason.rule() {
            // On a board with columns, the column the rule judged and the value it found.
            let column = crate::board::integrity::rule_column(board, rule)?;
            let value = event.scores.as_ref()?.0.get(column).copied().flatten()?;
            return Some(format!("{} judges scores.{column}, which is {value}", rule.as_str()));
        }
        match (board.columns(), &event.scores) {
            (Some(c), Some(s)) => match s.values(c.names()) {
                Ok(values) => c.out_of_bounds(&values),
                Err(why) => Some(why),
            },
            (Some(_), None) => Some("field 'scores' is missing (the board ranks by several columns)".into()),
            (None, _) if event.score.is_none() => {
                Some("field 'score' is missing (the board ranks by one score)".into())
            }
            (None, _) => None,
        }
    }

    /// The key base holding `player`'s entries on `board` (split `split`):
    /// the board's tag, or on a sharded board the player's shard's.
    pub fn base(&self, board: &Board, split: Option<&str>, player: &str) -> String {
        match board.shards() {
            Some(n) => self.shard_bases(board, split, n)[super::shard_of(player, n) as usize].clone(),
            None => keys::base(&self.prefix, board.id(), split),
        }
    }

    /// Every key base a read of `board` (split `split`) merges: the
    /// board's tag, or each shard's.
    pub fn read_bases(&self, board: &Board, split: Option<&str>) -> Vec<String> {
        match board.shards() {
            Some(n) => self.shard_bases(board, split, n).to_vec(),
            None => vec![keys::base(&self.prefix, board.id(), split)],
        }
    }

    /// Every key base of `board` (of split `split`, if named) as the config
    /// says them; `None` for every split of a split board, which only the
    /// registry of tags knows (see [`keys::bases_of_board`]).
    pub fn known_bases(&self, board: &Board, split: Option<&str>) -> Option<Vec<String>> {
        (board.split_by().is_none() || split.is_some()).then(|| self.read_bases(board, split))
    }

    /// The key bases of a sharded board's `n` shards (of split `split`),
    /// worked out once (see `keys::shard_base`) and cached.
    fn shard_bases(&self, board: &Board, split: Option<&str>, n: u32) -> Arc<Vec<String>> {
        let id = (board.id().to_string(), split.map(str::to_string));
        let mut cache = self.shard_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = cache.get(&id) {
            return b.clone();
        }
        if cache.len() >= PERIOD_CACHE_SPLITS {
            cache.clear();
        }
        let bases = Arc::new((0..n).map(|k| keys::shard_base(&self.prefix, board.id(), split, k, n)).collect());
        cache.insert(id, Arc::clone(&bases));
        bases
    }

    /// The index of the board with this id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.boards.iter().position(|b| b.id() == id)
    }
}

/// A board of one score: what the event writes (`num`, `tie`), or why not.
fn one_score(board: &Board, event: &Event) -> Result<(i64, i64), Reason> {
    // A record with only `scores`: this board ranks by one score.
    let score = event.score.ok_or(Reason::InvalidScore)?;
    match board.mode() {
        Mode::Sum => match board.packing().tie(event.ts_ms) {
            Some(tie) if score.abs() <= board.packing().max_value() => Ok((score, tie)),
            _ => Err(Reason::ScoreOutOfRange),
        },
        Mode::Best | Mode::Latest => match board.packing().encode(score, event.ts_ms) {
            Some(stored) => Ok((stored, 0)),
            None => Err(Reason::ScoreOutOfRange),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::board::{BoardSpec, Order, PeriodWrite, WriteOp};
    use crate::period::PeriodKind;
    use crate::score::Packing;
    use uuid::Uuid;

    fn spec(id: &str, mode: Mode, order: Order, periods: &[PeriodKind], split: Option<&str>) -> BoardSpec {
        let mut spec = BoardSpec::for_tests(id, mode, periods);
        spec.order = order;
        spec.split_by = split.map(String::from);
        spec
    }

    fn board(id: &str, mode: Mode, order: Order, periods: &[PeriodKind], split: Option<&str>) -> Board {
        Board::new(spec(id, mode, order, periods, split))
    }

    fn event(ts: &str, attrs: &[(&str, &str)]) -> Event {
        Event {
            event_id: Uuid::nil(),
            kind: "match_finished".into(),
            player_id: "alice".into(),
            score: Some(10),
            scores: None,
            ts_ms: chrono::DateTime::parse_from_rfc3339(ts).unwrap().timestamp_millis(),
            attrs: attrs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            meta: None,
            team: None,
        }
    }

    #[test]
    fn an_event_fans_out_to_every_period_of_every_board_that_takes_it() {
        use PeriodKind::*;
        let r = Router::new(
            vec![
                board("points", Mode::Sum, Order::Desc, &[Daily, Weekly, AllTime], None),
                board("laps", Mode::Best, Order::Asc, &[AllTime], Some("track")),
            ],
            "lb",
        );
        let e = event("2026-08-14T13:00:00Z", &[("track", "monza")]);
        let plan = r.plan(&e, e.ts_ms);
        assert_eq!(plan.len(), 2);
        let Decision::Write(w) = &plan[0].1 else { panic!() };
        assert_eq!(w.params.op, WriteOp::Sum);
        let keys: Vec<&str> = w.periods.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["lb:{points}:d:2026-08-14", "lb:{points}:w:2026-W33", "lb:{points}:all"]);
        assert_eq!(w.periods[2].expire_at, None);
        assert_eq!(w.periods[0].dense_key, "lb:{points}:_dense:d:2026-08-14");
        assert_eq!((w.num, w.tie, w.params.shift), (10, 0, 1));
        let Decision::Write(w) = &plan[1].1 else { panic!() };
        assert_eq!(w.params.op, WriteOp::Lt);
        assert_eq!(w.periods[0].key, "lb:{laps:monza}:all");
    }

    #[test]
    fn period_writes_are_shared_within_a_period_and_worked_out_again_outside_it() {
        use PeriodKind::*;
        let r = Router::new(vec![board("laps", Mode::Best, Order::Asc, &[Daily, AllTime], Some("track"))], "lb");
        let plan = |ts: &str, track: &str| {
            let e = event(ts, &[("track", track)]);
            let Decision::Write(w) = r.plan(&e, e.ts_ms).remove(0).1 else { panic!() };
            w.periods
        };
        let first = plan("2026-08-14T00:00:00Z", "monza");
        let same_day = plan("2026-08-14T23:59:59.999Z", "monza");
        assert!(Arc::ptr_eq(&first[0], &same_day[0]), "one day, one write");
        assert!(Arc::ptr_eq(&first[1], &same_day[1]));
        let next_day = plan("2026-08-15T00:00:00Z", "monza");
        assert_eq!(next_day[0].key, "lb:{laps:monza}:d:2026-08-15");
        assert!(Arc::ptr_eq(&first[1], &next_day[1]), "all-time holds every instant");
        // Back to the day before (a late event): its keys again, not the cached day's.
        let late = plan("2026-08-14T12:00:00Z", "monza");
        assert_eq!(late[0].key, "lb:{laps:monza}:d:2026-08-14");
        assert_eq!(late[0].expire_at, first[0].expire_at);
        assert_eq!(late[0].dense_key, "lb:{laps:monza}:_dense:d:2026-08-14");
        // Another split value is another key base.
        let spa = plan("2026-08-14T12:00:00Z", "spa");
        assert_eq!(spa[0].key, "lb:{laps:spa}:d:2026-08-14");
        assert_eq!(spa[1].key, "lb:{laps:spa}:all");
        assert_eq!(plan("2026-08-14T12:00:00Z", "monza")[1].key, "lb:{laps:monza}:all");
    }

    #[test]
    fn a_board_without_a_split_keeps_its_period_writes_apart_from_split_boards() {
        use PeriodKind::*;
        let r = Router::new(
            vec![
                board("points", Mode::Sum, Order::Desc, &[Daily], None),
                board("laps", Mode::Best, Order::Asc, &[Daily], Some("track")),
            ],
            "lb",
        );
        let keys = |ts: &str, attrs: &[(&str, &str)]| -> Vec<Arc<PeriodWrite>> {
            let e = event(ts, attrs);
            r.plan(&e, e.ts_ms)
                .into_iter()
                .filter_map(|(_, d)| if let Decision::Write(w) = d { Some(w.periods[0].clone()) } else { None })
                .collect()
        };
        let first = keys("2026-08-14T01:00:00Z", &[("track", "monza")]);
        assert_eq!(
            first.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(),
            ["lb:{points}:d:2026-08-14", "lb:{laps:monza}:d:2026-08-14"]
        );
        let again = keys("2026-08-14T22:00:00Z", &[("track", "monza")]);
        assert!(Arc::ptr_eq(&first[0], &again[0]), "the unsplit board's day is cached");
        let next = keys("2026-08-15T00:00:00Z", &[("track", "monza")]);
        assert_eq!(next[0].key, "lb:{points}:d:2026-08-15");
        assert_eq!(next[1].key, "lb:{laps:monza}:d:2026-08-15");
        // An empty split value is refused, never confused with the unsplit slot.
        let e = event("2026-08-15T00:00:00Z", &[("track", "")]);
        let plan = r.plan(&e, e.ts_ms);
        assert!(matches!(&plan[0].1, Decision::Write(w) if w.periods[0].key == "lb:{points}:d:2026-08-15"));
        assert_eq!(plan[1].1, Decision::Refused(Reason::InvalidSplit));
    }

    #[test]
    fn expired_periods_are_skipped_and_a_board_with_none_left_refuses() {
        use PeriodKind::*;
        let r = Router::new(vec![board("points", Mode::Sum, Order::Desc, &[Daily, Weekly], None)], "lb");
        let e = event("2026-08-14T13:00:00Z", &[]);
        // Nine days later the day (8d retention) is gone but the week (5w) is not.
        let later = e.ts_ms + 9 * 86_400_000;
        let Decision::Write(w) = &r.plan(&e, later)[0].1 else { panic!() };
        assert_eq!(w.periods.len(), 1);
        assert!(w.periods[0].key.ends_with(":w:2026-W33"));
        // Exactly at the day's expiry the day is already gone.
        let day_expiry = chrono::DateTime::parse_from_rfc3339("2026-08-23T00:00:00Z").unwrap().timestamp_millis();
        let Decision::Write(w) = &r.plan(&e, day_expiry)[0].1 else { panic!() };
        assert_eq!(w.periods.len(), 1);
        let Decision::Write(w) = &r.plan(&e, day_expiry - 1)[0].1 else { panic!() };
        assert_eq!(w.periods.len(), 2);
        assert_eq!(r.plan(&e, e.ts_ms + 100 * 86_400_000)[0].1, Decision::Refused(Reason::ExpiredPeriod));
    }

    #[test]
    fn a_period_refuses_events_produced_at_or_after_its_close() {
        use PeriodKind::*;
        let mut b = spec("points", Mode::Sum, Order::Desc, &[Hourly, Daily, AllTime], None);
        b.close_after = Some(Duration::from_secs(3600));
        let r = Router::new(vec![Board::new(b)], "lb");
        let e = event("2026-08-14T13:30:00Z", &[]);
        let close_hour = chrono::DateTime::parse_from_rfc3339("2026-08-14T15:00:00Z").unwrap().timestamp_millis();
        let Decision::Write(w) = &r.plan(&e, close_hour - 1)[0].1 else { panic!() };
        assert_eq!(w.periods.len(), 3);
        assert_eq!(w.periods[0].close_at, Some(close_hour));
        assert_eq!(w.periods[2].close_at, None);
        // From the close on, the hour is closed; the day and all_time still take it.
        let Decision::Write(w) = &r.plan(&e, close_hour)[0].1 else { panic!() };
        let ids: Vec<&str> = w.periods.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["d:2026-08-14", "all"]);
        let mut only_hour = spec("h", Mode::Sum, Order::Desc, &[Hourly], None);
        only_hour.close_after = Some(Duration::from_secs(3600));
        let r = Router::new(vec![Board::new(only_hour)], "lb");
        assert_eq!(r.plan(&e, close_hour)[0].1, Decision::Refused(Reason::PeriodClosed));
    }

    #[test]
    fn split_boards_need_a_key_safe_value() {
        let r = Router::new(vec![board("laps", Mode::Best, Order::Asc, &[PeriodKind::AllTime], Some("track"))], "lb");
        let e = event("2026-08-14T13:00:00Z", &[]);
        assert_eq!(r.plan(&e, e.ts_ms)[0].1, Decision::Refused(Reason::MissingSplit));
        let e = event("2026-08-14T13:00:00Z", &[("track", "a}b")]);
        assert_eq!(r.plan(&e, e.ts_ms)[0].1, Decision::Refused(Reason::InvalidSplit));
    }

    #[test]
    fn earliest_boards_pack_the_time_and_refuse_what_does_not_fit() {
        let mut b = spec("best", Mode::Best, Order::Desc, &[PeriodKind::AllTime], None);
        b.packing = Packing::earliest(true, 0, 1000, 365 * 86_400_000, Some(1000)).unwrap();
        let b = Board::new(b);
        let r = Router::new(vec![b.clone()], "lb");
        let e = event("1970-01-01T00:00:05Z", &[]);
        let Decision::Write(w) = &r.plan(&e, e.ts_ms)[0].1 else { panic!() };
        assert_eq!(w.num, b.packing().encode(10, 5000).unwrap());
        let mut big = e.clone();
        big.score = Some(1001);
        assert_eq!(r.plan(&big, big.ts_ms)[0].1, Decision::Refused(Reason::ScoreOutOfRange));
    }

    #[test]
    fn types_nobody_takes_reach_no_board() {
        let r = Router::new(vec![board("points", Mode::Sum, Order::Desc, &[PeriodKind::AllTime], None)], "lb");
        let mut e = event("2026-08-14T13:00:00Z", &[]);
        e.kind = "chat".into();
        assert!(!r.listens("chat"));
        assert!(r.plan(&e, e.ts_ms).is_empty());
    }

    #[test]
    fn a_board_with_columns_takes_the_events_values_in_column_order_or_names_the_one_at_fault() {
        use crate::board::columns::{Column, ColumnMode, Columns, RowMode};
        let mut with_columns = spec("arena", Mode::Best, Order::Desc, &[PeriodKind::AllTime], None);
        let col = |name: &str, mode, order| Column::new(name, mode, order);
        with_columns.columns = Some(Columns {
            list: vec![col("wins", ColumnMode::Sum, Order::Desc), col("time_ms", ColumnMode::Min, Order::Asc)],
            row: RowMode::Columns,
        });
        let r = Router::new(
            vec![Board::new(with_columns), board("points", Mode::Sum, Order::Desc, &[PeriodKind::AllTime], None)],
            "lb",
        );
        let mut e = event("2026-08-14T13:00:00Z", &[]);
        let scores = |json: serde_json::Value| {
            let crate::event::Parsed::Event(p) = crate::event::parse(
                serde_json::json!({"event_id": Uuid::nil(), "type": "match_finished", "player_id": "alice", "ts": 5, "scores": json})
                    .to_string()
                    .as_bytes(),
                Default::default(),
                |_| true,
            ) else {
                panic!("an event")
            };
            p.scores
        };
        e.scores = scores(serde_json::json!({"time_ms": 53000, "wins": 1, "extra": 7}));
        let plan = r.plan(&e, e.ts_ms);
        let Decision::Write(w) = &plan[0].1 else { panic!("{plan:?}") };
        assert_eq!((w.params.op, w.values.clone()), (WriteOp::Columns, vec![1, 53000]));
        assert!(w.params.columns.is_some_and(|c| c.n == 2 && c.desc[..2] == [true, false]));
        assert_eq!(r.refusal_detail(0, &e, Reason::InvalidScore), None);
        // The board of one score takes the record's score, or refuses it when it has none.
        assert!(matches!(plan[1].1, Decision::Write(_)));
        e.score = None;
        assert_eq!(r.plan(&e, e.ts_ms)[1].1, Decision::Refused(Reason::InvalidScore));
        assert_eq!(
            r.refusal_detail(1, &e, Reason::InvalidScore).as_deref(),
            Some("field 'score' is missing (the board ranks by one score)")
        );
        for (json, why) in [
            (serde_json::json!({"wins": 1}), "scores.time_ms is missing"),
            (serde_json::json!({"wins": 1.5, "time_ms": 1}), "scores.wins is not an integer within ±(2^53 - 1)"),
        ] {
            e.scores = scores(json);
            assert_eq!(r.plan(&e, e.ts_ms)[0].1, Decision::Refused(Reason::InvalidScore));
            assert_eq!(r.refusal_detail(0, &e, Reason::InvalidScore).as_deref(), Some(why));
        }
        // Bounds: a value outside a column's [min, max] is out of range, named.
        let mut bounded = spec("run", Mode::Best, Order::Desc, &[PeriodKind::AllTime], None);
        let mut time = col("time_ms", ColumnMode::Min, Order::Asc);
        (time.min, time.max) = (Some(1000), Some(60_000));
        bounded.columns =
            Some(Columns { list: vec![col("wins", ColumnMode::Sum, Order::Desc), time], row: RowMode::Columns });
        let r = Router::new(vec![Board::new(bounded)], "lb");
        for (t, why) in [
            (999, Some("scores.time_ms 999 is below the column's min 1000")),
            (60_001, Some("scores.time_ms 60001 is above the column's max 60000")),
            (1000, None),
            (60_000, None),
        ] {
            e.scores = scores(serde_json::json!({"wins": 1, "time_ms": t}));
            let decision = &r.plan(&e, e.ts_ms)[0].1;
            match why {
                Some(_) => assert_eq!(*decision, Decision::Refused(Reason::ScoreOutOfRange), "{t}"),
                None => assert!(matches!(decision, Decision::Write(_)), "{t}: {decision:?}"),
            }
            assert_eq!(r.refusal_detail(0, &e, Reason::InvalidScore).as_deref(), why);
        }
    }
}
