//! Boards: their validated settings and the writes one event makes on a
//! board; [`Router`] routes events to boards and plans those writes.
//!
//! Planning is pure. It decides, from the event and the Kafka record
//! timestamp alone, which period keys an event lands in and when each
//! expires, and refuses what it can refuse without Redis (`expired_period`,
//! a missing or bad split value). Decisions that need the board's current
//! state (a `sum` leaving the exact range) are taken by the apply script.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono_tz::Tz;

use crate::period::id::{Names, PeriodRef};
use crate::period::{Period, PeriodKind};
use crate::score::Packing;

pub mod columns;
pub mod integrity;
pub mod league;
mod router;
mod schedule;
mod shard;
pub mod team;
mod write;

pub use league::League;
pub use router::Router;
pub use schedule::{Schedule, ScheduleError};
pub use shard::shard_of;
pub use write::{BoardWrite, Decision, PeriodWrite, Review, RoundKeys, WriteOp, WriteParams};

/// How a board combines an event's score with what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `ZINCRBY`: points accumulate; negative deltas allowed.
    Sum,
    /// `ZADD GT` (desc) or `ZADD LT` (asc): a personal best.
    Best,
    /// The value of the member's newest event (by event time).
    Latest,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Sum => "sum",
            Mode::Best => "best",
            Mode::Latest => "latest",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Higher is better.
    Desc,
    /// Lower is better (time trials).
    Asc,
}

impl Order {
    pub fn as_str(self) -> &'static str {
        match self {
            Order::Desc => "desc",
            Order::Asc => "asc",
        }
    }

    /// Board order of two entries, each (stored score, member): the better
    /// stored score first, and among equal ones member bytes as Redis orders
    /// them (descending on desc boards, ascending on asc boards). A total
    /// order, so merging the shards of a board lists it as one sorted set.
    pub fn entries(self, a: (i64, &str), b: (i64, &str)) -> std::cmp::Ordering {
        match self {
            Order::Desc => b.0.cmp(&a.0).then_with(|| b.1.as_bytes().cmp(a.1.as_bytes())),
            Order::Asc => a.0.cmp(&b.0).then_with(|| a.1.as_bytes().cmp(b.1.as_bytes())),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TieBreak {
    /// Equal scores ordered by member bytes (Redis's own order).
    Member,
    /// Among equal scores, the player who reached the score first ranks higher.
    Earliest,
}

/// One validated `[[board]]`. Built only from a [`BoardSpec`] that config
/// validation checked, and read through its methods, so a board in use
/// always holds a valid combination.
#[derive(Clone, Debug)]
pub struct Board {
    spec: BoardSpec,
}

/// Everything a board is, as config validation leaves it.
#[derive(Clone, Debug)]
pub struct BoardSpec {
    pub id: String,
    /// Event types the board takes.
    pub on: Vec<String>,
    pub mode: Mode,
    pub order: Order,
    pub periods: Vec<PeriodKind>,
    /// Where the board's days and weeks begin.
    pub timezone: Tz,
    pub tie_break: TieBreak,
    /// `attrs` key whose value selects a split board.
    pub split_by: Option<String>,
    /// How values and tie-break times become stored scores.
    pub packing: Packing,
    /// Retentions the config set; others take the period's default.
    pub retention: BTreeMap<PeriodKind, Duration>,
    /// Top-K: members kept per period key (`best` and `latest` boards only).
    pub max_members: Option<u64>,
    /// Per-player sliding window on event time: (events, window ms).
    pub rate_limit: Option<(u64, i64)>,
    /// Whether the dense-rank index is kept (reads with `rank=dense` need it).
    pub dense_rank: bool,
    /// Whether each entry keeps the `meta` of the event that explains its score.
    pub meta: bool,
    /// Events a player may have applied per period (`max_attempts`); `None`: no limit.
    pub max_attempts: Option<u64>,
    /// Periods are sealed this long after they end; `None`: never.
    pub close_after: Option<Duration>,
    /// Rolling unions of the daily keys.
    pub rolling: Vec<Rolling>,
    /// Fixed windows (seasons), each a period `s:<name>`.
    pub windows: Vec<Window>,
    /// Recurring periods, `c:<name>:<local start>`.
    pub schedules: Vec<Schedule>,
    /// Sharded boards: how many hash tags the members are spread over.
    pub shards: Option<u32>,
    /// Leagues: the rounds are played in cohorts of one tier.
    pub league: Option<League>,
    /// Rank changes are produced for moves into or inside this top.
    pub notify_top: Option<u32>,
    /// Score integrity: rules that refuse or hold events.
    pub integrity: integrity::Integrity,
    /// Ranking by several columns (`mode` and `order` then unused).
    pub columns: Option<columns::Columns>,
    /// Team boards: the board ranks teams by their members' scores.
    pub team: Option<team::Team>,
}

#[cfg(test)]
impl BoardSpec {
    /// A desc board with member ties and default limits, for unit tests.
    pub(crate) fn for_tests(id: &str, mode: Mode, periods: &[PeriodKind]) -> BoardSpec {
        BoardSpec {
            id: id.into(),
            on: vec!["match_finished".into()],
            mode,
            order: Order::Desc,
            periods: periods.to_vec(),
            timezone: Tz::UTC,
            tie_break: TieBreak::Member,
            split_by: None,
            packing: Packing::member(None).expect("the default packing"),
            retention: BTreeMap::new(),
            max_members: None,
            rate_limit: None,
            dense_rank: true,
            meta: false,
            max_attempts: None,
            close_after: None,
            rolling: Vec::new(),
            windows: Vec::new(),
            schedules: Vec::new(),
            shards: None,
            league: None,
            notify_top: None,
            integrity: integrity::Integrity::default(),
            columns: None,
            team: None,
        }
    }
}

impl Board {
    /// A board from a validated spec (see `config`).
    pub(crate) fn new(spec: BoardSpec) -> Board {
        Board { spec }
    }

    pub fn id(&self) -> &str {
        &self.spec.id
    }

    /// Event types the board takes.
    pub fn on(&self) -> &[String] {
        &self.spec.on
    }

    pub fn mode(&self) -> Mode {
        self.spec.mode
    }

    pub fn order(&self) -> Order {
        self.spec.order
    }

    pub fn periods(&self) -> &[PeriodKind] {
        &self.spec.periods
    }

    /// Where the board's days and weeks begin.
    pub fn timezone(&self) -> Tz {
        self.spec.timezone
    }

    pub fn tie_break(&self) -> TieBreak {
        self.spec.tie_break
    }

    /// `attrs` key whose value selects a split board.
    pub fn split_by(&self) -> Option<&str> {
        self.spec.split_by.as_deref()
    }

    /// How values and tie-break times become stored scores.
    pub fn packing(&self) -> &Packing {
        &self.spec.packing
    }

    /// Top-K: members kept per period key.
    pub fn max_members(&self) -> Option<u64> {
        self.spec.max_members
    }

    /// Per-player sliding window on event time: (events, window ms).
    pub fn rate_limit(&self) -> Option<(u64, i64)> {
        self.spec.rate_limit
    }

    /// Sharded boards: how many shards (hash tags) hold the members.
    pub fn shards(&self) -> Option<u32> {
        self.spec.shards
    }

    /// Leagues: `[board.league]`.
    pub fn league(&self) -> Option<&League> {
        self.spec.league.as_ref()
    }

    /// `notify_top`: rank changes are produced for this top.
    pub fn notify_top(&self) -> Option<u32> {
        self.spec.notify_top
    }

    /// Boards ranked by several columns: their columns and row mode.
    pub fn columns(&self) -> Option<&columns::Columns> {
        self.spec.columns.as_ref()
    }

    /// Boards ranked by several columns: what the scripts take of them.
    pub fn column_spec(&self) -> Option<columns::ColumnSpec> {
        Some(self.spec.columns.as_ref()?.spec(self.spec.tie_break == TieBreak::Earliest))
    }

    /// Team boards: `team = { leave, counts_after }`.
    pub fn team(&self) -> Option<team::Team> {
        self.spec.team
    }

    /// `[board.integrity]`: its rules (none by default).
    pub fn integrity(&self) -> &integrity::Integrity {
        &self.spec.integrity
    }

    /// Whether `period` is one of the league's rounds.
    pub fn is_round(&self, period: &Period) -> bool {
        let Some(l) = &self.spec.league else { return false };
        match (period.kind, PeriodRef::parse(&period.id).names) {
            (PeriodKind::Window, Names::Window(name)) => name == l.rounds,
            (PeriodKind::Schedule, Names::Schedule { name, start: Some(_) }) => name == l.rounds,
            _ => false,
        }
    }

    /// The round before a round (a schedule's previous firing); `None` for
    /// a window's single round.
    pub fn previous_round(&self, round: &Period) -> Option<Period> {
        let l = self.spec.league.as_ref()?;
        let s = self.spec.schedules.iter().find(|s| s.name == l.rounds)?;
        s.latest_at(self.spec.timezone, round.start_ms?.checked_sub(1)?)
    }

    /// The round after a round.
    pub fn next_round(&self, round: &Period) -> Option<Period> {
        let l = self.spec.league.as_ref()?;
        let s = self.spec.schedules.iter().find(|s| s.name == l.rounds)?;
        s.next_after(self.spec.timezone, round.start_ms?)
    }

    /// Whether the dense-rank index is kept.
    pub fn dense_rank(&self) -> bool {
        self.spec.dense_rank
    }

    /// Whether each entry keeps the `meta` of the event that explains its score.
    pub fn meta(&self) -> bool {
        self.spec.meta
    }

    /// Events a player may have applied per period; `None`: no limit.
    pub fn max_attempts(&self) -> Option<u64> {
        self.spec.max_attempts
    }

    /// Periods are sealed this long after they end; `None`: never.
    pub fn close_after(&self) -> Option<Duration> {
        self.spec.close_after
    }

    /// Rolling unions of the daily keys.
    pub fn rolling(&self) -> &[Rolling] {
        &self.spec.rolling
    }

    /// Fixed windows (seasons).
    pub fn windows(&self) -> &[Window] {
        &self.spec.windows
    }

    /// The index of the window a read or an admin event names, by id
    /// (`s:season-1`) or by name (`season-1`).
    pub fn window_index(&self, text: &str) -> Option<usize> {
        let name = PeriodRef::parse(text).window_name()?;
        self.spec.windows.iter().position(|w| w.name == name)
    }

    /// Recurring schedules.
    pub fn schedules(&self) -> &[Schedule] {
        &self.spec.schedules
    }

    /// The index of the schedule a read or an admin event names, by a
    /// period id (`c:weekend:2026-12-04T18:00`) or by name (`weekend`).
    pub fn schedule_index(&self, text: &str) -> Option<usize> {
        let name = PeriodRef::parse(text).schedule_name()?;
        self.spec.schedules.iter().position(|s| s.name == name)
    }

    /// A period of this board by id: a calendar id (`w:2026-W49`, `all`), a
    /// window's (`s:season-1`) or a schedule's (`c:weekend:2026-12-04T18:00`).
    pub fn period_by_id(&self, id: &str) -> Result<Period, crate::period::PeriodError> {
        let bad = || crate::period::PeriodError::BadId(id.to_string());
        match PeriodRef::parse(id).names {
            Names::Window(name) => {
                self.spec.windows.iter().find(|w| w.name == name).map(Window::period).ok_or_else(bad)
            }
            Names::Schedule { .. } => {
                let s = self.schedule_index(id).ok_or_else(bad)?;
                self.spec.schedules[s].period_by_id(self.spec.timezone, id).ok_or_else(bad)
            }
            _ => Period::from_id(id, self.spec.timezone),
        }
    }

    /// How long a period's key outlives the period; `None` never expires.
    pub fn retention(&self, kind: PeriodKind) -> Option<Duration> {
        if kind == PeriodKind::AllTime {
            return None;
        }
        self.spec.retention.get(&kind).copied().or_else(|| kind.default_retention())
    }

    /// When a period of this board closes (epoch ms): its end plus
    /// `close_after`. `None` for boards that never close and for all_time.
    pub fn close_at(&self, period: &Period) -> Option<i64> {
        let after = self.spec.close_after?;
        let end = period.end_ms?;
        Some(end.saturating_add(after.as_millis().min(i64::MAX as u128) as i64))
    }

    /// The write the apply script makes for this board.
    pub fn write_op(&self) -> WriteOp {
        if self.spec.columns.is_some() {
            return WriteOp::Columns;
        }
        match (self.spec.mode, self.spec.order) {
            (Mode::Sum, _) => WriteOp::Sum,
            (Mode::Best, Order::Desc) => WriteOp::Gt,
            (Mode::Best, Order::Asc) => WriteOp::Lt,
            (Mode::Latest, _) => WriteOp::Latest,
        }
    }

    /// Everything the apply script needs to know about the board.
    pub fn write_params(&self) -> WriteParams {
        WriteParams {
            op: self.write_op(),
            shift: self.spec.packing.shift(),
            max_value: self.spec.packing.max_value(),
            desc: self.spec.order == Order::Desc,
            top_k: self.spec.max_members.unwrap_or(0),
            rate_events: self.spec.rate_limit.map_or(0, |r| r.0),
            rate_window_ms: self.spec.rate_limit.map_or(0, |r| r.1),
            dense: self.spec.dense_rank,
            sealed: self.spec.close_after.is_some(),
            meta: self.spec.meta,
            attempts: self.spec.max_attempts.unwrap_or(0),
            cohort_size: self.spec.league.as_ref().map_or(0, |l| l.cohort_size),
            tiers: self.spec.league.as_ref().map_or(0, |l| l.tiers.len() as u32),
            notify: self.spec.notify_top.unwrap_or(0),
            integrity: self.spec.integrity,
            review: None,
            columns: self.column_spec(),
            team: self.spec.team,
        }
    }
}

/// A fixed window of a board (a season): events whose time is in
/// `[from, to)` are written to its period `s:<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// `[a-z0-9_-]{1,32}`, not a period kind's name.
    pub name: String,
    /// Epoch ms, inclusive.
    pub from_ms: i64,
    /// Epoch ms, exclusive.
    pub to_ms: i64,
}

impl Window {
    /// The period id, `s:<name>`.
    pub fn id(&self) -> String {
        crate::period::id::window_id(&self.name)
    }

    /// The window as a period (for keys, expiry and closing).
    pub fn period(&self) -> Period {
        Period { kind: PeriodKind::Window, id: self.id(), start_ms: Some(self.from_ms), end_ms: Some(self.to_ms) }
    }
}

/// A rolling board: the union of the last `days` daily keys, today included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rolling {
    pub name: String,
    pub days: u32,
    pub refresh: Duration,
}
