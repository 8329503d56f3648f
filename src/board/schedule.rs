//! Recurring periods: a board's `schedules` open a period at each firing of
//! a 5-field cron expression in the board's time zone and keep it open for
//! `duration` (a weekend event: `0 18 * * FRI` for `60h`). Pure: every
//! period is computed from an instant, never from the wall clock.
//!
//! The cron arithmetic is the `croner` crate's, on the zone's local time. A
//! firing in a skipped hour (spring forward) comes at the first instant
//! after the gap, and a firing in a repeated hour (fall back) comes once, at
//! its first occurrence, as calendar periods treat those hours. A period's
//! id is `c:<name>:<local start, YYYY-MM-DDTHH:MM>`.

use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

use crate::period::id::{Names, PeriodRef};
use crate::period::{Period, PeriodKind};

/// One schedule of a board.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// `[a-z0-9_-]{1,32}`, not a period kind's name.
    pub name: String,
    /// The expression as written.
    pub pattern: String,
    cron: Cron,
    pub duration: Duration,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Schedule) -> bool {
        (&self.name, &self.pattern, self.duration) == (&other.name, &other.pattern, other.duration)
    }
}

impl Eq for Schedule {}

/// How far ahead a schedule is checked for overlapping periods: enough
/// firings to cover any calendar pattern (leap days, weekdays of months).
const OVERLAP_CHECK_FIRINGS: usize = 3000;

/// How a schedule's period id writes its local start (`2026-12-04T18:00`).
const LOCAL_START: &str = "%Y-%m-%dT%H:%M";

impl Schedule {
    /// A schedule from its config, or why not. `tz` is the board's zone,
    /// where the periods are checked not to overlap.
    pub fn new(name: &str, pattern: &str, duration: Duration, tz: Tz) -> Result<Schedule, ScheduleError> {
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .build()
            .parse(pattern)
            .map_err(|e| ScheduleError::Cron(format!("'{pattern}' is not a 5-field cron expression: {e}")))?;
        let s = Schedule { name: name.to_string(), pattern: pattern.to_string(), cron, duration };
        s.check_overlap(tz)?;
        Ok(s)
    }

    fn duration_ms(&self) -> i64 {
        self.duration.as_millis().min(i64::MAX as u128) as i64
    }

    /// Refuses a schedule whose periods would overlap: a firing before the
    /// previous period has ended.
    fn check_overlap(&self, tz: Tz) -> Result<(), ScheduleError> {
        let start = tz.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).earliest().ok_or(ScheduleError::Never)?;
        let mut prev: Option<DateTime<Tz>> = None;
        for t in self.cron.iter_after(start).take(OVERLAP_CHECK_FIRINGS) {
            if let Some(p) = prev {
                let gap = t.timestamp_millis() - p.timestamp_millis();
                if gap < self.duration_ms() {
                    return Err(ScheduleError::Overlap(format!(
                        "periods would overlap: it fires at {} and again {} later, within its duration {:?}",
                        p.naive_local().format("%Y-%m-%d %H:%M"),
                        humantime::format_duration(Duration::from_millis(gap as u64)),
                        self.duration
                    )));
                }
            }
            prev = Some(t);
        }
        if prev.is_none() {
            return Err(ScheduleError::Never);
        }
        Ok(())
    }

    /// The period that starts at the firing `start`.
    fn period_from(&self, start: DateTime<Tz>) -> Period {
        let start_ms = start.timestamp_millis();
        Period {
            kind: PeriodKind::Schedule,
            id: crate::period::id::schedule_id(&self.name, &start.naive_local().format(LOCAL_START).to_string()),
            start_ms: Some(start_ms),
            end_ms: Some(start_ms.saturating_add(self.duration_ms())),
        }
    }

    fn at(tz: Tz, ts_ms: i64) -> Option<DateTime<Tz>> {
        DateTime::from_timestamp_millis(ts_ms).map(|t| t.with_timezone(&tz))
    }

    /// The period holding `ts_ms`, if one does: the first firing after
    /// `ts_ms - duration`, when it is not after `ts_ms`.
    pub fn period_at(&self, tz: Tz, ts_ms: i64) -> Option<Period> {
        let from = Schedule::at(tz, ts_ms.saturating_sub(self.duration_ms()))?;
        let start = self.cron.find_next_occurrence(&from, false).ok()?;
        (start.timestamp_millis() <= ts_ms).then(|| self.period_from(start))
    }

    /// The last period that started at or before `ts_ms` (open or ended).
    pub fn latest_at(&self, tz: Tz, ts_ms: i64) -> Option<Period> {
        let at = Schedule::at(tz, ts_ms)?;
        self.cron.find_previous_occurrence(&at, true).ok().map(|s| self.period_from(s))
    }

    /// The first period that starts after `ts_ms`.
    pub fn next_after(&self, tz: Tz, ts_ms: i64) -> Option<Period> {
        let at = Schedule::at(tz, ts_ms)?;
        self.cron.find_next_occurrence(&at, false).ok().map(|s| self.period_from(s))
    }

    /// The period with this id (`c:<name>:2026-12-04T18:00`), if the
    /// schedule fires then.
    pub fn period_by_id(&self, tz: Tz, id: &str) -> Option<Period> {
        let (name, local) = match PeriodRef::parse(id) {
            PeriodRef { sealed: false, names: Names::Schedule { name, start: Some(local) }, .. } => (name, local),
            _ => return None,
        };
        if name != self.name {
            return None;
        }
        let naive = NaiveDateTime::parse_from_str(local, LOCAL_START).ok()?;
        let candidates: Vec<DateTime<Tz>> = match tz.from_local_datetime(&naive) {
            LocalResult::Single(t) => vec![t],
            LocalResult::Ambiguous(a, b) => vec![a, b],
            // A skipped local time: the firing came just after the gap, under another id.
            LocalResult::None => Vec::new(),
        };
        candidates.into_iter().map(|t| self.period_from(t)).find(|p| {
            p.id == id && p.start_ms.and_then(|s| self.period_at(tz, s)).is_some_and(|q| q.start_ms == p.start_ms)
        })
    }
}

/// Why a schedule cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("{0}")]
    Cron(String),
    #[error("{0}")]
    Overlap(String),
    #[error("the expression never fires")]
    Never,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: &str) -> i64 {
        DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis()
    }

    fn weekend(tz: Tz) -> Schedule {
        Schedule::new("weekend", "0 18 * * FRI", Duration::from_secs(60 * 3600), tz).unwrap()
    }

    #[test]
    fn a_weekly_period_holds_its_sixty_hours_and_nothing_else() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        let s = weekend(tz);
        // Friday 2026-12-04 18:00 CET is 17:00Z; 60 hours later is Monday 05:00Z.
        let p = s.period_at(tz, ms("2026-12-04T17:00:00Z")).unwrap();
        assert_eq!(p.id, "c:weekend:2026-12-04T18:00");
        assert_eq!((p.start_ms, p.end_ms), (Some(ms("2026-12-04T17:00:00Z")), Some(ms("2026-12-07T05:00:00Z"))));
        assert_eq!(s.period_at(tz, ms("2026-12-07T04:59:59.999Z")).unwrap().id, p.id);
        assert_eq!(s.period_at(tz, ms("2026-12-07T05:00:00Z")), None);
        assert_eq!(s.period_at(tz, ms("2026-12-04T16:59:59.999Z")), None);
        assert_eq!(s.period_by_id(tz, &p.id), Some(p.clone()));
        assert_eq!(s.latest_at(tz, ms("2026-12-09T12:00:00Z")), Some(p.clone()));
        assert_eq!(s.next_after(tz, ms("2026-12-05T12:00:00Z")).unwrap().id, "c:weekend:2026-12-11T18:00");
        assert_eq!(s.period_by_id(tz, "c:weekend:2026-12-05T18:00"), None, "a Saturday never fires");
    }

    #[test]
    fn a_weekend_across_the_change_to_winter_time_lasts_its_sixty_real_hours() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        let s = weekend(tz);
        // Friday 2026-10-23 18:00 CEST (16:00Z); clocks go back on Sunday the 25th.
        let p = s.period_at(tz, ms("2026-10-25T12:00:00Z")).unwrap();
        assert_eq!(p.id, "c:weekend:2026-10-23T18:00");
        assert_eq!((p.start_ms, p.end_ms), (Some(ms("2026-10-23T16:00:00Z")), Some(ms("2026-10-26T04:00:00Z"))));
        // The next one starts at 18:00 CET.
        assert_eq!(s.next_after(tz, p.start_ms.unwrap()).unwrap().start_ms, Some(ms("2026-10-30T17:00:00Z")));
    }

    #[test]
    fn firings_in_a_skipped_and_in_a_repeated_hour_come_once() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        let s = Schedule::new("night", "30 2 * * *", Duration::from_secs(3600), tz).unwrap();
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
        let skipped = s.next_after(tz, ms("2026-03-28T23:00:00Z")).unwrap();
        // At the first instant after the gap: 03:00 CEST, 01:00Z.
        assert_eq!(
            (skipped.id.as_str(), skipped.start_ms),
            ("c:night:2026-03-29T03:00", Some(ms("2026-03-29T01:00:00Z")))
        );
        assert_eq!(s.period_by_id(tz, &skipped.id), Some(skipped.clone()));
        // 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice, the period once.
        let first = s.next_after(tz, ms("2026-10-24T23:00:00Z")).unwrap();
        assert_eq!((first.id.as_str(), first.start_ms), ("c:night:2026-10-25T02:30", Some(ms("2026-10-25T00:30:00Z"))));
        let next = s.next_after(tz, first.start_ms.unwrap()).unwrap();
        assert_eq!(next.id, "c:night:2026-10-26T02:30");
        assert_eq!(s.period_by_id(tz, &first.id), Some(first));
    }

    #[test]
    fn bad_expressions_and_overlapping_periods_are_refused() {
        let tz = Tz::UTC;
        assert!(matches!(Schedule::new("x", "0 18 * *", Duration::from_secs(60), tz), Err(ScheduleError::Cron(_))));
        assert!(matches!(
            Schedule::new("x", "0 0 18 * * FRI", Duration::from_secs(60), tz),
            Err(ScheduleError::Cron(_))
        ));
        assert!(matches!(Schedule::new("x", "nonsense", Duration::from_secs(60), tz), Err(ScheduleError::Cron(_))));
        // Daily for 25 hours: each period would still be open at the next firing.
        let err = Schedule::new("x", "0 12 * * *", Duration::from_secs(25 * 3600), tz).unwrap_err();
        assert!(matches!(err, ScheduleError::Overlap(ref m) if m.contains("overlap")), "{err}");
        // Monthly for 29 days: February is shorter.
        assert!(matches!(
            Schedule::new("x", "0 0 1 * *", Duration::from_secs(29 * 86_400), tz),
            Err(ScheduleError::Overlap(_))
        ));
        assert!(Schedule::new("x", "0 0 1 * *", Duration::from_secs(28 * 86_400), tz).is_ok());
    }
}
