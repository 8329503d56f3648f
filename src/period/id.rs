//! Period ids as keys, reads, admin events and the scripts name them,
//! written and taken apart here and nowhere else (`tests/layers.rs` finds
//! no prefix or suffix of one spelled outside this file):
//!
//! | id | what |
//! |---|---|
//! | `h:2026-08-14T13`, `d:2026-08-14`, `w:2026-W33`, `m:2026-08`, `y:2026`, `all` | a calendar period (`Period::from_id`) |
//! | `s:<name>` | a window (season) |
//! | `c:<name>:<local start>` | one period of a schedule |
//! | `r:<name>` | a rolling board's view |
//! | `<id>:final` | the sealed snapshot of a period |
//!
//! A read may name a window, a schedule or a rolling board by its name
//! alone (`season-1`, `weekend`, `last7d`), or a calendar kind
//! (`daily`); [`PeriodRef`] keeps such a name as it is.

use super::PeriodKind;

/// What ends a sealed snapshot's period id ([`final_id`]); the scripts get
/// it in their prelude.
pub const FINAL_SUFFIX: &str = ":final";

/// What starts a rolling board's view id ([`rolling_id`]); the scripts get
/// it in their prelude.
pub const ROLLING_PREFIX: &str = "r:";

/// A period id, or a name a read gives instead, taken apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeriodRef<'a> {
    /// The id or name without `:final`.
    pub text: &'a str,
    /// Named with `:final`: the period's sealed snapshot.
    pub sealed: bool,
    pub names: Names<'a>,
}

/// What a period id names, by its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names<'a> {
    /// `r:<name>`: a rolling board's view.
    Rolling(&'a str),
    /// `s:<name>`: a window.
    Window(&'a str),
    /// `c:<name>:<local start>`: a schedule's period (`c:<name>` alone: the
    /// schedule, as a read may write it).
    Schedule { name: &'a str, start: Option<&'a str> },
    /// No prefix: a calendar id (`d:2026-08-14`, `all`) or a bare name
    /// (`daily`, `season-1`, `weekend`, `last7d`).
    Other(&'a str),
}

impl<'a> PeriodRef<'a> {
    pub fn parse(id: &'a str) -> PeriodRef<'a> {
        let (text, sealed) = match id.strip_suffix(FINAL_SUFFIX) {
            Some(text) => (text, true),
            None => (id, false),
        };
        let names = if let Some(name) = text.strip_prefix(ROLLING_PREFIX) {
            Names::Rolling(name)
        } else if let Some(name) = strip_code(text, PeriodKind::Window) {
            Names::Window(name)
        } else if let Some(rest) = strip_code(text, PeriodKind::Schedule) {
            match rest.split_once(':') {
                Some((name, start)) => Names::Schedule { name, start: Some(start) },
                None => Names::Schedule { name: rest, start: None },
            }
        } else {
            Names::Other(text)
        };
        PeriodRef { text, sealed, names }
    }

    /// The name of the window a read names, by id or by name: `None` for
    /// anything with another prefix.
    pub fn window_name(&self) -> Option<&'a str> {
        match self.names {
            Names::Window(name) | Names::Other(name) => Some(name),
            _ => None,
        }
    }

    /// The name of the schedule a read names, by one of its periods' ids,
    /// by `c:<name>` or by name: `None` for anything with another prefix.
    pub fn schedule_name(&self) -> Option<&'a str> {
        match self.names {
            Names::Schedule { name, .. } | Names::Other(name) => Some(name),
            _ => None,
        }
    }

    /// The name of the rolling board a read names, by id or by name.
    pub fn rolling_name(&self) -> Option<&'a str> {
        match self.names {
            Names::Rolling(name) | Names::Other(name) => Some(name),
            _ => None,
        }
    }
}

/// `text` after `<code>:`, the prefix of `kind`'s ids.
fn strip_code(text: &str, kind: PeriodKind) -> Option<&str> {
    text.strip_prefix(kind.code())?.strip_prefix(':')
}

/// The sealed snapshot of a period: `d:2026-08-14:final`.
pub fn final_id(period_id: &str) -> String {
    format!("{period_id}{FINAL_SUFFIX}")
}

/// The view id of a rolling board, `r:last7d`.
pub fn rolling_id(name: &str) -> String {
    format!("{ROLLING_PREFIX}{name}")
}

/// A window's id, `s:season-1`.
pub fn window_id(name: &str) -> String {
    format!("{}:{name}", PeriodKind::Window.code())
}

/// A schedule's period's id, `c:weekend:2026-12-04T18:00` (its local start).
pub fn schedule_id(name: &str, local_start: &str) -> String {
    format!("{}:{name}:{local_start}", PeriodKind::Schedule.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_id_is_taken_apart_and_made_again() {
        let p = PeriodRef::parse;
        assert_eq!(
            p("d:2026-08-14"),
            PeriodRef { text: "d:2026-08-14", sealed: false, names: Names::Other("d:2026-08-14") }
        );
        assert_eq!(
            p("w:2026-W33:final"),
            PeriodRef { text: "w:2026-W33", sealed: true, names: Names::Other("w:2026-W33") }
        );
        assert_eq!(p("s:season-1").names, Names::Window("season-1"));
        assert_eq!(p("s:season-1:final").names, Names::Window("season-1"));
        assert_eq!(
            p("c:weekend:2026-12-04T18:00").names,
            Names::Schedule { name: "weekend", start: Some("2026-12-04T18:00") }
        );
        assert_eq!(p("c:weekend").names, Names::Schedule { name: "weekend", start: None });
        assert_eq!(p("r:last7d").names, Names::Rolling("last7d"));
        assert_eq!(p("all").names, Names::Other("all"));
        assert_eq!((p("season-1").window_name(), p("r:x").window_name()), (Some("season-1"), None));
        assert_eq!((p("c:weekend:x").schedule_name(), p("s:x").schedule_name()), (Some("weekend"), None));
        assert_eq!((p("r:last7d").rolling_name(), p("c:x").rolling_name()), (Some("last7d"), None));
        let made =
            [final_id("d:2026-08-14"), rolling_id("last7d"), window_id("s1"), schedule_id("n", "2026-12-04T18:00")];
        for id in &made {
            let r = PeriodRef::parse(id);
            assert!(!matches!(r.names, Names::Other(_)) || r.sealed, "{id}");
        }
        assert_eq!(schedule_id("weekend", "2026-12-04T18:00"), "c:weekend:2026-12-04T18:00");
        assert_eq!(window_id("season-1"), "s:season-1");
        assert!(p("d:2026-08-14:final").sealed && !p("d:2026-08-14").sealed);
        assert!(matches!(p("r:last7d").names, Names::Rolling(_)) && !matches!(p("s:x").names, Names::Rolling(_)));
    }
}
