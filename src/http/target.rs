//! What a read names: the board, its split and period, and the Redis keys
//! they map to; the shared query parameters (numbers, the rank policy).

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, TimeZone};

use super::{now_ms, ApiError, AppState};
use crate::board::Board;
use crate::keys;
use crate::period::id::{Names, PeriodRef};
use crate::period::{Period, PeriodKind};
use crate::store::ReadKeys;
/// The board, period and keys a read names.
pub(super) struct Target<'a> {
    pub board: &'a Board,
    /// The split read (`""` on a board without splits).
    pub split: String,
    /// The period id (`d:2026-08-14`), sealed (`d:2026-08-14:final`) or rolling (`r:last7d`).
    pub period: String,
    pub layout: Layout,
    /// `fresh=true`: read the primary, never a replica.
    pub fresh: bool,
}

/// The `fresh` parameter: `true` reads the primary (a player who just
/// played sees their own score), whatever `redis.read_from` says.
pub(super) fn fresh_of(q: &HashMap<String, String>) -> Result<bool, ApiError> {
    match q.get("fresh").map(String::as_str) {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(ApiError::bad("fresh", format!("fresh must be true or false, not '{other}'"))),
    }
}

/// Where a board's period lives in Redis, which says how it is read.
pub(super) enum Layout {
    /// One sorted set (`single.rs`).
    Single(PeriodKeys),
    /// One sorted set per shard, merged (`sharded.rs`).
    Sharded {
        shards: Vec<PeriodKeys>,
        /// A sealed period: the last shard's sealed hash and live period
        /// key. The shards are sealed in order, so the period is sealed on
        /// every shard once it is on the last.
        last_seal: Option<(String, String)>,
    },
}

impl Layout {
    /// The period's keys on a board of one key per period (`None` when sharded).
    pub fn single(&self) -> Option<&PeriodKeys> {
        match self {
            Layout::Single(keys) => Some(keys),
            Layout::Sharded { .. } => None,
        }
    }

    /// The shards' keys of the period (none on a board of one key).
    pub fn shards(&self) -> &[PeriodKeys] {
        match self {
            Layout::Sharded { shards, .. } => shards,
            Layout::Single(_) => &[],
        }
    }
}

/// The tag that holds `player`'s data on `board` (a sharded board's: the player's shard).
pub(super) fn player_base(s: &AppState, board: &Board, split: Option<&str>, player: &str) -> String {
    match board.shards() {
        Some(n) => s.router.read_bases(board, split)[crate::board::shard_of(player, n) as usize].clone(),
        None => keys::base(s.router.prefix(), board.id(), split),
    }
}

/// The keys of one period of one board tag that `read.lua` reads.
pub(super) struct PeriodKeys {
    pub key: String,
    pub dense_key: String,
    /// The period's shadow: its hidden players' values.
    pub shadow_key: String,
    /// The period's meta hash, on boards that keep metadata.
    pub meta_key: Option<String>,
    /// The period's rows hash, on boards ranked by several columns.
    pub rows_key: Option<String>,
    /// The hash whose values sum to the period's version (see `read.lua`):
    /// the tag's recorded offsets, which every write raises; for a sealed
    /// snapshot or a rolling board, its own version hash, which rises with
    /// its seal, each swap and each admin event that can change it.
    pub version_key: String,
}

impl PeriodKeys {
    fn of(board: &Board, base: &str, id: &str) -> PeriodKeys {
        PeriodKeys {
            key: keys::period_key(base, id),
            dense_key: keys::dense_key(base, id),
            shadow_key: keys::shadow_key(base, id),
            meta_key: board.meta().then(|| keys::meta_key(base, id)),
            rows_key: board.columns().map(|_| keys::rows_key(base, id)),
            version_key: if matches!(
                PeriodRef::parse(id),
                PeriodRef { sealed: true, .. } | PeriodRef { names: Names::Rolling(_), .. }
            ) {
                keys::version_key(base, id)
            } else {
                keys::offsets_key(base)
            },
        }
    }

    pub fn read_keys(&self) -> ReadKeys<'_> {
        ReadKeys {
            key: &self.key,
            dense_key: &self.dense_key,
            shadow_key: &self.shadow_key,
            version_key: &self.version_key,
            meta_key: self.meta_key.as_deref(),
        }
    }

    /// Keys no board has: the period reads as empty.
    pub fn make_absent(&mut self) {
        self.key = keys::absent_key(&self.key);
        self.dense_key = keys::absent_key(&self.dense_key);
        self.shadow_key = keys::absent_key(&self.shadow_key);
        self.meta_key = self.meta_key.as_deref().map(keys::absent_key);
        self.rows_key = self.rows_key.as_deref().map(keys::absent_key);
    }
}

/// The layout of period `id` of the board whose (unsharded) key base is
/// `base`; `live_id` is the period's live id, for a sealed period.
fn layout(s: &AppState, board: &Board, split: Option<&str>, base: &str, id: &str, live_id: Option<&str>) -> Layout {
    if board.shards().is_none() {
        return Layout::Single(PeriodKeys::of(board, base, id));
    }
    let bases = s.router.read_bases(board, split);
    let last_seal = live_id.and_then(|live| bases.last().map(|b| (keys::sealed_key(b), keys::period_key(b, live))));
    Layout::Sharded { shards: bases.iter().map(|b| PeriodKeys::of(board, b, id)).collect(), last_seal }
}

/// The board a read names; 404 when there is none.
pub(super) fn board_of<'a>(s: &'a AppState, board_id: &str) -> Result<&'a Board, ApiError> {
    s.router.board(board_id).ok_or_else(|| ApiError::not_found(format!("no board '{board_id}'")))
}

pub(super) fn resolve<'a>(
    s: &'a AppState,
    board_id: &str,
    q: &HashMap<String, String>,
) -> Result<Target<'a>, ApiError> {
    let board = board_of(s, board_id)?;
    let split = split_of(board, q)?;
    let at_ms = match q.get("at") {
        None => now_ms(),
        Some(text) => parse_at(text, board)
            .ok_or_else(|| ApiError::bad("at", "at must be a date (2026-08-14) or an RFC 3339 time"))?,
    };
    let default_kind =
        if board.periods().contains(&PeriodKind::AllTime) { PeriodKind::AllTime } else { board.periods()[0] };
    let base = keys::base(s.router.prefix(), board.id(), split);
    let named = PeriodRef::parse(q.get("period").map(String::as_str).unwrap_or(""));
    let (text, sealed) = (named.text, named.sealed);
    // A rolling board, by name (`last7d`) or id (`r:last7d`).
    if let Some(rolling) = named.rolling_name().filter(|n| board.rolling().iter().any(|r| r.name == *n)) {
        if sealed {
            return Err(ApiError::bad("period", "rolling boards are never sealed"));
        }
        let id = crate::period::id::rolling_id(rolling);
        let layout = layout(s, board, split, &base, &id, None);
        return Ok(Target {
            board,
            split: split.unwrap_or_default().to_string(),
            period: id,
            layout,
            fresh: fresh_of(q)?,
        });
    }
    if let Names::Rolling(name) = named.names {
        return Err(ApiError::bad("period", format!("board '{}' has no rolling board '{name}'", board.id())));
    }
    // A window, by name (`season-1`) or id (`s:season-1`); a schedule's
    // period by id (`c:weekend:2026-12-04T18:00`), or by the schedule's name
    // (the last of its periods to start at `at`, open or ended).
    let by_name = match (board.window_index(text), board.schedule_index(text)) {
        (Some(w), _) => Some(board.windows()[w].period()),
        (None, Some(_)) if matches!(named.names, Names::Schedule { .. }) => Some(
            board
                .period_by_id(text)
                .map_err(|_| ApiError::bad("period", format!("'{text}' is not a period of this schedule")))?,
        ),
        (None, Some(s)) => {
            Some(board.schedules()[s].latest_at(board.timezone(), at_ms).ok_or_else(|| {
                ApiError::bad("period", format!("schedule '{text}' has no period starting before then"))
            })?)
        }
        (None, None) if !matches!(named.names, Names::Other(_)) => {
            return Err(ApiError::bad("period", format!("board '{}' has no window or schedule '{text}'", board.id())))
        }
        (None, None) => None,
    };
    let period = match by_name {
        Some(p) => p,
        None => match Some(text) {
            None | Some("") => Period::containing(default_kind, board.timezone(), at_ms)
                .map_err(|e| ApiError::bad("at", e.to_string()))?,
            Some(text) if text.contains(':') || text == "all" => {
                let p = Period::from_id(text, board.timezone()).map_err(|e| ApiError::bad("period", e.to_string()))?;
                if !board.periods().contains(&p.kind) {
                    return Err(ApiError::bad("period", format!("board '{}' keeps no {} periods", board.id(), p.kind)));
                }
                p
            }
            Some(text) => {
                let kind = PeriodKind::parse(text)
                    .ok_or_else(|| ApiError::bad("period", format!("'{text}' is not a period name or id")))?;
                if !board.periods().contains(&kind) {
                    return Err(ApiError::bad("period", format!("board '{}' keeps no {kind} periods", board.id())));
                }
                Period::containing(kind, board.timezone(), at_ms).map_err(|e| ApiError::bad("at", e.to_string()))?
            }
        },
    };
    let live_id = period.id.clone();
    let id = if sealed {
        if board.close_after().is_none() {
            return Err(ApiError::bad(
                "period",
                format!("board '{}' does not seal its periods (no close_after)", board.id()),
            ));
        }
        if period.kind == PeriodKind::AllTime {
            return Err(ApiError::bad("period", "all_time is never sealed"));
        }
        crate::period::id::final_id(&period.id)
    } else {
        period.id
    };
    let layout = layout(s, board, split, &base, &id, sealed.then_some(live_id.as_str()));
    Ok(Target { board, split: split.unwrap_or_default().to_string(), period: id, layout, fresh: fresh_of(q)? })
}

/// The split a read names: required on a board with `split_by`, refused on one without.
pub(super) fn split_of<'q>(board: &Board, q: &'q HashMap<String, String>) -> Result<Option<&'q str>, ApiError> {
    match (&board.split_by(), q.get("split")) {
        (Some(_), Some(v)) if crate::event::valid_split_value(v) => Ok(Some(v.as_str())),
        (Some(_), Some(_)) => Err(ApiError::bad("split", "split must be 1 to 64 of [A-Za-z0-9_-]")),
        (Some(attr), None) => {
            Err(ApiError::bad("split", format!("board '{}' is split by '{attr}': name a split", board.id())))
        }
        (None, Some(_)) => Err(ApiError::bad("split", format!("board '{}' has no splits", board.id()))),
        (None, None) => Ok(None),
    }
}

/// `at` as a date (noon of that day in the board's zone) or an RFC 3339 time.
fn parse_at(text: &str, board: &Board) -> Option<i64> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_millis());
    }
    let d = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    board.timezone().from_local_datetime(&d.and_hms_opt(12, 0, 0)?).earliest().map(|t| t.timestamp_millis())
}

pub(super) fn parse_num(
    q: &HashMap<String, String>,
    name: &'static str,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    match q.get(name) {
        None => Ok(default),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n <= max => Ok(n),
            _ => Err(ApiError::bad(name, format!("{name} must be an integer from 0 to {max}"))),
        },
    }
}

/// Rank policies: ordinal, competition and dense.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum RankPolicy {
    /// Position + 1.
    Ordinal,
    /// 1 + players with a strictly better score.
    Competition,
    /// 1 + distinct better scores.
    Dense,
}

impl RankPolicy {
    /// The policy's name in queries and in `read.lua`.
    pub fn name(self) -> &'static str {
        match self {
            RankPolicy::Ordinal => "ordinal",
            RankPolicy::Competition => "competition",
            RankPolicy::Dense => "dense",
        }
    }
}

pub(super) fn rank_policy(q: &HashMap<String, String>, board: &Board) -> Result<RankPolicy, ApiError> {
    match q.get("rank").map(String::as_str) {
        None | Some("ordinal") => Ok(RankPolicy::Ordinal),
        Some("competition") => Ok(RankPolicy::Competition),
        Some("dense") if board.dense_rank() => Ok(RankPolicy::Dense),
        Some("dense") => {
            Err(ApiError::bad("rank", format!("board '{}' keeps no dense-rank index (dense_rank = false)", board.id())))
        }
        Some(_) => Err(ApiError::bad("rank", "rank must be ordinal, competition or dense")),
    }
}

/// The 404 of a player absent from a board: unranked, never rank 0 or last.
pub(super) fn unranked(player_id: &str, t: &Target<'_>) -> ApiError {
    ApiError::not_found(format!("player '{player_id}' is unranked on {} {}", t.board.id(), t.period))
}
