//! Leaderboard periods: which period an instant falls in, the period's id as it
//! appears in Redis keys, its bounds, and when its key expires.
//!
//! Everything here is pure and is computed from an event's own timestamp in the
//! board's time zone, never from the wall clock, so a replay computes exactly
//! what the first run computed. Weeks are ISO 8601 weeks (Monday first, week 1
//! holds the year's first Thursday), so 2026-12-31 lies in `2026-W53` and
//! 2027-01-04 opens `2027-W01`.

pub mod id;

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Datelike, Days, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Timelike};
use chrono_tz::Tz;

/// The kinds of period a board can keep: the calendar's, and named windows
/// (seasons: fixed spans a board lists in `windows`, not in `periods`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeriodKind {
    Hourly,
    Daily,
    Weekly,
    Monthly,
    Yearly,
    AllTime,
    /// A fixed window `[from, to)`, id `s:<name>` (see `board::Window`).
    Window,
    /// One period of a recurring schedule, id `c:<name>:<local start>` (see `board::Schedule`).
    Schedule,
}

impl PeriodKind {
    /// The calendar's kinds, which `periods` lists (a window is named in `windows`).
    pub const ALL: [PeriodKind; 6] = [
        PeriodKind::Hourly,
        PeriodKind::Daily,
        PeriodKind::Weekly,
        PeriodKind::Monthly,
        PeriodKind::Yearly,
        PeriodKind::AllTime,
    ];

    /// The name used in the configuration and the HTTP API.
    pub fn name(self) -> &'static str {
        match self {
            PeriodKind::Hourly => "hourly",
            PeriodKind::Daily => "daily",
            PeriodKind::Weekly => "weekly",
            PeriodKind::Monthly => "monthly",
            PeriodKind::Yearly => "yearly",
            PeriodKind::AllTime => "all_time",
            PeriodKind::Window => "window",
            PeriodKind::Schedule => "schedule",
        }
    }

    pub fn parse(name: &str) -> Option<PeriodKind> {
        PeriodKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The short code that starts a period id in a key (`d:2026-08-14`).
    pub fn code(self) -> &'static str {
        match self {
            PeriodKind::Hourly => "h",
            PeriodKind::Daily => "d",
            PeriodKind::Weekly => "w",
            PeriodKind::Monthly => "m",
            PeriodKind::Yearly => "y",
            PeriodKind::AllTime => "all",
            PeriodKind::Window => "s",
            PeriodKind::Schedule => "c",
        }
    }

    /// The default retentions: hourly 2d, daily 8d, weekly 5w, monthly 13 months,
    /// yearly 3 years, windows and schedules' periods 30d, all_time never. Months and years are humantime's
    /// (30.44 and 365.25 days), the same units a user writes in the config.
    pub fn default_retention(self) -> Option<Duration> {
        const DAY: u64 = 86_400;
        const MONTH: u64 = 2_630_016; // humantime: 30.44 days
        const YEAR: u64 = 31_557_600; // humantime: 365.25 days
        let secs = match self {
            PeriodKind::Hourly => 2 * DAY,
            PeriodKind::Daily => 8 * DAY,
            PeriodKind::Weekly => 35 * DAY,
            PeriodKind::Monthly => 13 * MONTH,
            PeriodKind::Yearly => 3 * YEAR,
            PeriodKind::Window | PeriodKind::Schedule => 30 * DAY,
            PeriodKind::AllTime => return None,
        };
        Some(Duration::from_secs(secs))
    }
}

impl fmt::Display for PeriodKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One concrete period: `d:2026-08-14` with its bounds in epoch milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Period {
    pub kind: PeriodKind,
    /// The id as written in keys: `h:2026-08-14T13`, `d:2026-08-14`,
    /// `w:2026-W33`, `m:2026-08`, `y:2026`, or `all`.
    pub id: String,
    /// First millisecond of the period (inclusive); `None` for all-time.
    pub start_ms: Option<i64>,
    /// First millisecond after the period (exclusive); `None` for all-time.
    pub end_ms: Option<i64>,
}

/// Errors of period arithmetic: only instants or ids outside what the
/// calendar can represent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PeriodError {
    #[error("timestamp {0} ms is outside the supported calendar range")]
    OutOfRange(i64),
    #[error("'{0}' is not a period id (expected h:YYYY-MM-DDTHH, d:YYYY-MM-DD, w:YYYY-Www, m:YYYY-MM, y:YYYY or all)")]
    BadId(String),
}

impl Period {
    /// The name of the period's kind, as a player's history groups best
    /// ranks: the calendar kind's (`daily`), a window's or a schedule's own
    /// name (ids `s:<name>`, `c:<name>:<start>`).
    pub fn kind_name(&self) -> &str {
        let id = id::PeriodRef::parse(&self.id);
        match self.kind {
            PeriodKind::Window => id.window_name().unwrap_or(&self.id),
            PeriodKind::Schedule => id.schedule_name().unwrap_or(&self.id),
            kind => kind.name(),
        }
    }

    /// The period of `kind` that holds the instant `ts_ms`, in `tz`.
    pub fn containing(kind: PeriodKind, tz: Tz, ts_ms: i64) -> Result<Period, PeriodError> {
        match kind {
            PeriodKind::AllTime => return Ok(Period::all_time()),
            // A window's bounds are its board's (`board::Window::period`), not the calendar's.
            PeriodKind::Window | PeriodKind::Schedule => {
                return Err(PeriodError::BadId("a window's or a schedule's period is its board's".into()))
            }
            _ => {}
        }
        let utc = DateTime::from_timestamp_millis(ts_ms).ok_or(PeriodError::OutOfRange(ts_ms))?;
        let local = utc.with_timezone(&tz).naive_local();
        let date = local.date();
        let (start, next) = match kind {
            PeriodKind::Hourly => {
                let start = date.and_hms_opt(local.hour(), 0, 0).ok_or(PeriodError::OutOfRange(ts_ms))?;
                (start, start + chrono::Duration::hours(1))
            }
            PeriodKind::Daily => {
                let next = date.checked_add_days(Days::new(1)).ok_or(PeriodError::OutOfRange(ts_ms))?;
                (midnight(date), midnight(next))
            }
            PeriodKind::Weekly => {
                let iso = date.iso_week();
                let monday = NaiveDate::from_isoywd_opt(iso.year(), iso.week(), chrono::Weekday::Mon)
                    .ok_or(PeriodError::OutOfRange(ts_ms))?;
                let next = monday.checked_add_days(Days::new(7)).ok_or(PeriodError::OutOfRange(ts_ms))?;
                (midnight(monday), midnight(next))
            }
            PeriodKind::Monthly => {
                let first = date.with_day(1).ok_or(PeriodError::OutOfRange(ts_ms))?;
                let next = first.checked_add_months(chrono::Months::new(1)).ok_or(PeriodError::OutOfRange(ts_ms))?;
                (midnight(first), midnight(next))
            }
            PeriodKind::Yearly => {
                let first = NaiveDate::from_ymd_opt(date.year(), 1, 1).ok_or(PeriodError::OutOfRange(ts_ms))?;
                let next = NaiveDate::from_ymd_opt(date.year() + 1, 1, 1).ok_or(PeriodError::OutOfRange(ts_ms))?;
                (midnight(first), midnight(next))
            }
            PeriodKind::AllTime | PeriodKind::Window | PeriodKind::Schedule => unreachable!("handled above"),
        };
        Ok(Period {
            kind,
            id: format_id(kind, start),
            start_ms: Some(resolve_local(tz, start)),
            end_ms: Some(resolve_local(tz, next)),
        })
    }

    pub fn all_time() -> Period {
        Period { kind: PeriodKind::AllTime, id: "all".to_string(), start_ms: None, end_ms: None }
    }

    /// Parses an explicit period id (`w:2026-W33`) back into its period, so a
    /// reader can name a past period.
    pub fn from_id(id: &str, tz: Tz) -> Result<Period, PeriodError> {
        let bad = || PeriodError::BadId(id.to_string());
        if id == "all" {
            return Ok(Period::all_time());
        }
        let (code, rest) = id.split_once(':').ok_or_else(bad)?;
        let (kind, start) = match code {
            "h" => {
                let dt = NaiveDateTime::parse_from_str(&format!("{rest}:00"), "%Y-%m-%dT%H:%M").map_err(|_| bad())?;
                (PeriodKind::Hourly, dt)
            }
            "d" => (PeriodKind::Daily, midnight(NaiveDate::parse_from_str(rest, "%Y-%m-%d").map_err(|_| bad())?)),
            "w" => {
                let (y, w) = rest.split_once("-W").ok_or_else(bad)?;
                let y: i32 = y.parse().map_err(|_| bad())?;
                let w: u32 = w.parse().map_err(|_| bad())?;
                let monday = NaiveDate::from_isoywd_opt(y, w, chrono::Weekday::Mon).ok_or_else(bad)?;
                (PeriodKind::Weekly, midnight(monday))
            }
            "m" => {
                let d = NaiveDate::parse_from_str(&format!("{rest}-01"), "%Y-%m-%d").map_err(|_| bad())?;
                (PeriodKind::Monthly, midnight(d))
            }
            "y" => {
                let y: i32 = rest.parse().map_err(|_| bad())?;
                (PeriodKind::Yearly, midnight(NaiveDate::from_ymd_opt(y, 1, 1).ok_or_else(bad)?))
            }
            _ => return Err(bad()),
        };
        let p = Period::containing(kind, tz, resolve_local(tz, start))?;
        if p.id != id {
            return Err(bad());
        }
        Ok(p)
    }

    /// When the period's key expires: the end of the period plus `retention`,
    /// in epoch seconds (for `EXPIREAT`). `None`: the key never expires.
    pub fn expire_at_secs(&self, retention: Option<Duration>) -> Option<i64> {
        let end_ms = self.end_ms?;
        let retention = retention?;
        let end_secs = end_ms.div_euclid(1000) + i64::from(end_ms.rem_euclid(1000) != 0);
        Some(end_secs.saturating_add(i64::try_from(retention.as_secs()).unwrap_or(i64::MAX)))
    }
}

fn midnight(d: NaiveDate) -> NaiveDateTime {
    d.and_time(chrono::NaiveTime::MIN)
}

fn format_id(kind: PeriodKind, start: NaiveDateTime) -> String {
    match kind {
        PeriodKind::Hourly => format!("h:{}", start.format("%Y-%m-%dT%H")),
        PeriodKind::Daily => format!("d:{}", start.format("%Y-%m-%d")),
        PeriodKind::Weekly => {
            let iso = start.date().iso_week();
            format!("w:{:04}-W{:02}", iso.year(), iso.week())
        }
        PeriodKind::Monthly => format!("m:{}", start.format("%Y-%m")),
        PeriodKind::Yearly => format!("y:{}", start.format("%Y")),
        PeriodKind::AllTime => "all".to_string(),
        PeriodKind::Window | PeriodKind::Schedule => {
            unreachable!("named by their board (board::Window, board::Schedule)")
        }
    }
}

/// The instant at which local time `local` begins in `tz`. An ambiguous time
/// (clocks going back) resolves to its first occurrence; a time skipped by a
/// forward jump resolves to the jump itself, found by stepping in quarter
/// hours, since every real zone's transitions fall on quarter hours.
fn resolve_local(tz: Tz, local: NaiveDateTime) -> i64 {
    let mut probe = local;
    for _ in 0..16 {
        match tz.from_local_datetime(&probe) {
            LocalResult::Single(t) => return t.timestamp_millis(),
            LocalResult::Ambiguous(first, _) => return first.timestamp_millis(),
            LocalResult::None => probe += chrono::Duration::minutes(15),
        }
    }
    local.and_utc().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(rfc3339: &str) -> i64 {
        DateTime::parse_from_rfc3339(rfc3339).unwrap().timestamp_millis()
    }

    fn id(kind: PeriodKind, tz: &str, at: &str) -> String {
        Period::containing(kind, tz.parse().unwrap(), ms(at)).unwrap().id
    }

    #[test]
    fn iso_weeks_across_year_ends() {
        assert_eq!(id(PeriodKind::Weekly, "UTC", "2026-12-31T12:00:00Z"), "w:2026-W53");
        assert_eq!(id(PeriodKind::Weekly, "UTC", "2027-01-03T23:59:59Z"), "w:2026-W53");
        assert_eq!(id(PeriodKind::Weekly, "UTC", "2027-01-04T00:00:00Z"), "w:2027-W01");
        assert_eq!(id(PeriodKind::Weekly, "UTC", "2024-12-30T00:00:00Z"), "w:2025-W01");
        assert_eq!(id(PeriodKind::Weekly, "UTC", "2026-08-14T13:00:00Z"), "w:2026-W33");
    }

    #[test]
    fn every_kind_formats_its_id() {
        let at = "2026-08-14T13:45:00Z";
        assert_eq!(id(PeriodKind::Hourly, "UTC", at), "h:2026-08-14T13");
        assert_eq!(id(PeriodKind::Daily, "UTC", at), "d:2026-08-14");
        assert_eq!(id(PeriodKind::Monthly, "UTC", at), "m:2026-08");
        assert_eq!(id(PeriodKind::Yearly, "UTC", at), "y:2026");
        assert_eq!(id(PeriodKind::AllTime, "UTC", at), "all");
    }

    #[test]
    fn days_follow_the_board_time_zone() {
        // 23:30 UTC on the 14th is already the 15th in Tokyo and still the 14th in New York.
        assert_eq!(id(PeriodKind::Daily, "Asia/Tokyo", "2026-08-14T23:30:00Z"), "d:2026-08-15");
        assert_eq!(id(PeriodKind::Daily, "America/New_York", "2026-08-15T03:30:00Z"), "d:2026-08-14");
        let p =
            Period::containing(PeriodKind::Daily, "Asia/Tokyo".parse().unwrap(), ms("2026-08-14T23:30:00Z")).unwrap();
        assert_eq!(p.start_ms, Some(ms("2026-08-14T15:00:00Z")));
        assert_eq!(p.end_ms, Some(ms("2026-08-15T15:00:00Z")));
    }

    #[test]
    fn days_around_daylight_saving_changes_have_their_real_length() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        // Spring forward on 2026-03-29: a 23-hour day.
        let p = Period::containing(PeriodKind::Daily, tz, ms("2026-03-29T12:00:00Z")).unwrap();
        assert_eq!(p.end_ms.unwrap() - p.start_ms.unwrap(), 23 * 3_600_000);
        // Fall back on 2026-10-25: a 25-hour day, and the repeated 02:00 hour is one period.
        let p = Period::containing(PeriodKind::Daily, tz, ms("2026-10-25T12:00:00Z")).unwrap();
        assert_eq!(p.end_ms.unwrap() - p.start_ms.unwrap(), 25 * 3_600_000);
        let a = Period::containing(PeriodKind::Hourly, tz, ms("2026-10-25T00:30:00Z")).unwrap();
        let b = Period::containing(PeriodKind::Hourly, tz, ms("2026-10-25T01:30:00Z")).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.id, "h:2026-10-25T02");
    }

    #[test]
    fn a_day_whose_midnight_is_skipped_starts_at_the_jump() {
        // America/Santiago jumps from 00:00 to 01:00 on 2026-09-06.
        let tz: Tz = "America/Santiago".parse().unwrap();
        let p = Period::containing(PeriodKind::Daily, tz, ms("2026-09-06T12:00:00Z")).unwrap();
        assert_eq!(p.id, "d:2026-09-06");
        assert_eq!(p.start_ms, Some(ms("2026-09-06T04:00:00Z")));
    }

    #[test]
    fn expiry_is_period_end_plus_retention() {
        let p = Period::containing(PeriodKind::Daily, Tz::UTC, ms("2026-08-14T13:00:00Z")).unwrap();
        let end = ms("2026-08-15T00:00:00Z") / 1000;
        assert_eq!(p.expire_at_secs(PeriodKind::Daily.default_retention()), Some(end + 8 * 86_400));
        assert_eq!(Period::all_time().expire_at_secs(Some(Duration::from_secs(5))), None);
        assert_eq!(p.expire_at_secs(None), None);
        let w = Period::containing(PeriodKind::Weekly, Tz::UTC, ms("2026-08-14T13:00:00Z")).unwrap();
        assert_eq!(
            w.expire_at_secs(PeriodKind::Weekly.default_retention()),
            Some(ms("2026-08-17T00:00:00Z") / 1000 + 35 * 86_400)
        );
    }

    #[test]
    fn ids_parse_back_to_their_period() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        for kind in PeriodKind::ALL {
            let p = Period::containing(kind, tz, ms("2026-12-31T22:30:00Z")).unwrap();
            assert_eq!(Period::from_id(&p.id, tz).unwrap(), p, "{kind}");
        }
        assert!(Period::from_id("w:2026-W54", tz).is_err());
        assert!(Period::from_id("d:2026-02-30", tz).is_err());
        assert!(Period::from_id("q:2026", tz).is_err());
    }

    #[test]
    fn default_retentions_are_the_humantime_durations_a_user_would_write() {
        for (kind, text) in [
            (PeriodKind::Hourly, "2d"),
            (PeriodKind::Daily, "8d"),
            (PeriodKind::Weekly, "5w"),
            (PeriodKind::Monthly, "13months"),
            (PeriodKind::Yearly, "3years"),
        ] {
            assert_eq!(kind.default_retention(), Some(humantime::parse_duration(text).unwrap()), "{text}");
        }
        assert_eq!(PeriodKind::AllTime.default_retention(), None);
    }
}
