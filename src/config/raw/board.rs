//! `[[board]]` as written, with its sub-tables: columns, integrity rules,
//! the league, schedules, windows, the rate limit and rolling boards.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono_tz::Tz;
use serde::Deserialize;

use crate::board::{Mode, Order, TieBreak};
use crate::config::field::{EpochMs, Typed};
use crate::period::PeriodKind;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBoard {
    /// `[a-z0-9_-]{1,64}`; part of every key of the board.
    pub id: String,
    /// Event types this board takes.
    pub on: Vec<String>,
    /// sum | best | latest (boards without `columns`)
    #[serde(default)]
    pub mode: Option<Typed<Mode>>,
    /// desc: higher is better; asc: lower is better. Default desc.
    #[serde(default)]
    pub order: Option<Typed<Order>>,
    /// Ranking by several columns: `[{ name, mode, order }]`, 2 to 5.
    #[serde(default)]
    pub columns: Option<Vec<RawColumn>>,
    /// With `columns`: columns (each aggregated on its own, the default) |
    /// best (the player's single best submission).
    #[serde(default)]
    pub row: Option<String>,
    /// hourly, daily, weekly, monthly, yearly, all_time
    pub periods: Vec<Typed<PeriodKind>>,
    /// IANA time zone where days and weeks begin. Default UTC.
    #[serde(default = "default_timezone")]
    pub timezone: Typed<Tz>,
    /// member | earliest. Default member.
    #[serde(default = "default_tie_break")]
    pub tie_break: Typed<TieBreak>,
    /// One board per value of `attrs.<split_by>`.
    #[serde(default)]
    pub split_by: Option<String>,
    /// Largest |score| (and |total| on `sum` boards) the board accepts;
    /// beyond it events are refused (`score_out_of_range`). Defaults to
    /// 2^53 - 1, or with `tie_break = "earliest"` the most its budget allows.
    #[serde(default)]
    pub max_score: Option<i64>,
    /// `earliest` ties: start of the tie-break clock (RFC 3339). Default 2020-01-01T00:00:00Z.
    #[serde(default)]
    pub tie_epoch: Option<Typed<EpochMs>>,
    /// `earliest` ties: how fine the clock is (`1s`, `1ms`). Default 1s.
    #[serde(default)]
    pub tie_resolution: Option<Typed<Duration>>,
    /// `earliest` ties: how long after `tie_epoch` the clock runs. Default 30 years.
    #[serde(default)]
    pub tie_horizon: Option<Typed<Duration>>,
    /// Per-period retention after the period ends, e.g. `{ daily = "30d" }`.
    #[serde(default)]
    pub retention: BTreeMap<String, Typed<Duration>>,
    /// Seal every period (but all_time) this long after it ends: freeze it
    /// into `...:final`, publish its top to `[sealing] topic`, and refuse
    /// events produced later (`period_closed`). Unset: periods never close.
    #[serde(default)]
    pub close_after: Option<Typed<Duration>>,
    /// Top-K: keep only the best `max_members` of each period key after
    /// every write (`best` and `latest` boards).
    #[serde(default)]
    pub max_members: Option<u64>,
    /// Per-player limit on event time: `{ events = 30, window = "60s" }`.
    #[serde(default)]
    pub rate_limit: Option<RawRateLimit>,
    /// Keep the dense-rank index (default true, false on sharded boards,
    /// which cannot keep it). Off, writes are cheaper and reads with
    /// `rank=dense` answer 400.
    #[serde(default)]
    pub dense_rank: Option<bool>,
    /// Spread the board's members over this many hash tags (2 to 256), so
    /// that a Redis Cluster spreads its writes over its primaries; reads
    /// merge the shards.
    #[serde(default)]
    pub shards: Option<u32>,
    /// Keep each entry's metadata: the `meta` of the event that explains
    /// its score (`best`: the event that set the best, the first on a tie;
    /// `latest`: the newest by event time; `sum`: the last applied), read
    /// with every entry. Default false.
    #[serde(default)]
    pub meta: bool,
    /// Per player and period, only the first `max_attempts` applied events
    /// count; later ones are refused there (`attempts_exhausted`), while the
    /// board's other periods decide for themselves. 1 to 1000000.
    #[serde(default)]
    pub max_attempts: Option<u64>,
    /// Rolling boards over the daily keys: `[{ name = "last7d", days = 7, refresh = "1m" }]`.
    #[serde(default)]
    pub rolling: Vec<RawRolling>,
    /// Fixed windows (seasons): `[{ name = "season-1", from = "2026-12-01T00:00:00Z", to = "2027-03-01T00:00:00Z" }]`,
    /// each a period `s:<name>` written by the events whose time is in `[from, to)`.
    #[serde(default)]
    pub windows: Vec<RawWindow>,
    /// Recurring periods: `[{ name = "weekend", cron = "0 18 * * FRI", duration = "60h" }]`,
    /// each opening at a firing of the 5-field cron expression in the
    /// board's time zone and lasting `duration`; ids `c:<name>:<local start>`.
    #[serde(default)]
    pub schedules: Vec<RawSchedule>,
    /// Leagues: the rounds (periods of one schedule or window) are played
    /// in cohorts of one tier; see `[board.league]`.
    #[serde(default)]
    pub league: Option<RawLeague>,
    /// Rank changes: every applied event that moves its player up into or
    /// inside the top `notify_top` (1 to 1000) of a period produces a
    /// record to `kafka.changes_topic`.
    #[serde(default)]
    pub notify_top: Option<u64>,
    /// Score integrity: rules that refuse or hold suspicious scores.
    #[serde(default)]
    pub integrity: Option<RawIntegrity>,
    /// Team boards: `{ leave = "keep" | "forfeit", counts_after = "24h" }`.
    #[serde(default)]
    pub team: Option<RawTeam>,
}

/// `team = { leave, counts_after }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTeam {
    /// keep: a leaver's contributions stay with the team; forfeit: they are
    /// taken off it in every period not yet sealed.
    pub leave: String,
    /// A score counts for the team only this long after the join. Default 0s.
    #[serde(default)]
    pub counts_after: Option<Typed<Duration>>,
}

/// One of a board's `columns`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawColumn {
    pub name: String,
    /// sum | max | min | latest; on `row = "best"` left out.
    #[serde(default)]
    pub mode: Option<String>,
    /// desc (default) | asc
    #[serde(default)]
    pub order: Option<Typed<Order>>,
    /// The bounds of a submission's value in this column (inclusive).
    #[serde(default)]
    pub min: Option<i64>,
    #[serde(default)]
    pub max: Option<i64>,
}

/// `[board.integrity]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIntegrity {
    #[serde(default)]
    pub score_over: Option<RawRule>,
    #[serde(default)]
    pub gain_over: Option<RawRule>,
    #[serde(default)]
    pub jump_over: Option<RawRule>,
    #[serde(default)]
    pub better_than: Option<RawRule>,
    #[serde(default)]
    pub hold_hides_after: Option<RawHides>,
}

/// One rule: `{ limit, action }`, with `window` for `gain_over` and, on a
/// board ranked by several columns, the `column` it judges.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub limit: RawLimit,
    #[serde(default)]
    pub window: Option<Typed<Duration>>,
    #[serde(default)]
    pub column: Option<String>,
    pub action: String,
}

/// A rule's limit: an integer, or text (`jump_over`'s ratio, `"3x"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawLimit {
    Int(i64),
    Text(String),
}

/// `hold_hides_after = { count, window }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHides {
    pub count: u64,
    pub window: Typed<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLeague {
    /// The schedule or window of this board whose periods are the rounds.
    pub rounds: String,
    /// Tier names, lowest first, 2 to 32 of `[a-z0-9_-]{1,32}`.
    pub tiers: Vec<String>,
    /// Players per cohort, 2 to 1000.
    pub cohort_size: u64,
    /// How many of each cohort move up a tier at the round's end: a count,
    /// or a percentage of the cohort (`"20%"`, rounded down, at least 1).
    pub promote: RawShare,
    /// How many move down, the same way.
    pub demote: RawShare,
    /// A player placed in the previous round with no applied event in this
    /// one: `"keep"` their tier or `"demote"` them one. Default demote.
    #[serde(default = "default_idle")]
    pub idle: String,
}

/// A count (`5`) or a percentage (`"20%"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawShare {
    Count(u64),
    Text(String),
}

fn default_idle() -> String {
    "demote".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSchedule {
    /// `[a-z0-9_-]{1,32}`, unique among the board's windows and schedules.
    pub name: String,
    /// Minute, hour, day of month, month, day of week (`0 18 * * FRI`).
    pub cron: String,
    /// How long each period lasts; periods of one schedule must not overlap.
    pub duration: Typed<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWindow {
    /// `[a-z0-9_-]{1,32}`; the period id is `s:<name>`.
    pub name: String,
    /// First instant of the window (RFC 3339), inclusive.
    pub from: Typed<EpochMs>,
    /// First instant after the window (RFC 3339), exclusive.
    pub to: Typed<EpochMs>,
}

fn default_timezone() -> Typed<Tz> {
    Typed::default_text("UTC")
}
fn default_tie_break() -> Typed<TieBreak> {
    Typed::default_text("member")
}

/// `earliest` ties: the tie-break clock starts here unless `tie_epoch` says otherwise.
pub const DEFAULT_TIE_EPOCH: &str = "2020-01-01T00:00:00Z";
/// ... ticks this often unless `tie_resolution` says otherwise ...
pub const DEFAULT_TIE_RESOLUTION: &str = "1s";
/// ... and runs this long: 30 years of seconds take 30 bits and leave scores up to 8,388,607.
pub const DEFAULT_TIE_HORIZON: &str = "30years";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// Events admitted per window per player.
    pub events: u64,
    /// The sliding window `(ts - window, ts]`, on event time.
    pub window: Typed<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRolling {
    /// `[a-z0-9_]{1,32}`; the board is read as `period=<name>`, stored at `...:r:<name>`.
    pub name: String,
    /// How many days, today included, the union covers.
    pub days: u64,
    /// How often it is recomputed (`ZUNIONSTORE` over the daily keys). Default 1m.
    #[serde(default = "default_refresh")]
    pub refresh: Typed<Duration>,
}

fn default_refresh() -> Typed<Duration> {
    Typed::default_text("1m")
}
