//! A typed config value that may not have parsed.
//!
//! serde stops at the first value it cannot deserialise, but `check-config`
//! should name *every* bad field. So a duration, an enum or a time zone in
//! the raw structs is a [`Typed<T>`]: deserialised from its text, parsed at
//! once into `T`, and holding either the value or the reason it is not one.
//! Validation then takes the value or records the reason under the field's
//! path.

use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::time::Duration;

use chrono_tz::Tz;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::board::{Mode, Order, TieBreak};
use crate::period::PeriodKind;

/// Parsing a config value from its text.
pub trait FromText: Sized {
    fn from_text(text: &str) -> Result<Self, String>;
}

/// A value as written in the file: parsed, or the reason it is not valid.
#[derive(Clone, Debug)]
pub struct Typed<T> {
    pub text: String,
    pub value: Result<T, String>,
}

impl<T: FromText> Typed<T> {
    /// A default, written as a user would write it.
    pub fn default_text(text: &str) -> Typed<T> {
        Typed { text: text.to_string(), value: T::from_text(text) }
    }
}

impl<'de, T: FromText> Deserialize<'de> for Typed<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text<T>(PhantomData<T>);
        impl<T: FromText> Visitor<'_> for Text<T> {
            type Value = Typed<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Typed<T>, E> {
                Ok(Typed { text: text.to_string(), value: T::from_text(text) })
            }
        }
        d.deserialize_str(Text(PhantomData))
    }
}

/// Parses a duration written as `90s`, `15m`, `8d`, `5w`, `13months`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("'{text}' is not a duration like 90s, 15m or 8d ({e})"))
}

impl FromText for Duration {
    fn from_text(text: &str) -> Result<Self, String> {
        parse_duration(text)
    }
}

impl FromText for Mode {
    fn from_text(text: &str) -> Result<Self, String> {
        match text {
            "sum" => Ok(Mode::Sum),
            "best" => Ok(Mode::Best),
            "latest" => Ok(Mode::Latest),
            other => Err(format!("'{other}' is not one of sum, best, latest")),
        }
    }
}

impl FromText for Order {
    fn from_text(text: &str) -> Result<Self, String> {
        match text {
            "desc" => Ok(Order::Desc),
            "asc" => Ok(Order::Asc),
            other => Err(format!("'{other}' is not one of desc, asc")),
        }
    }
}

impl FromText for super::settings::ReadFrom {
    fn from_text(text: &str) -> Result<Self, String> {
        match text {
            "primary" => Ok(Self::Primary),
            "replica" => Ok(Self::Replica),
            other => Err(format!("'{other}' is not one of primary, replica")),
        }
    }
}

impl FromText for TieBreak {
    fn from_text(text: &str) -> Result<Self, String> {
        match text {
            "member" => Ok(TieBreak::Member),
            "earliest" => Ok(TieBreak::Earliest),
            other => Err(format!("'{other}' is not one of member, earliest")),
        }
    }
}

impl FromText for PeriodKind {
    fn from_text(text: &str) -> Result<Self, String> {
        PeriodKind::parse(text)
            .ok_or_else(|| format!("'{text}' is not one of hourly, daily, weekly, monthly, yearly, all_time"))
    }
}

impl FromText for Tz {
    fn from_text(text: &str) -> Result<Self, String> {
        text.parse().map_err(|_| format!("'{text}' is not an IANA time zone name"))
    }
}

impl FromText for SocketAddr {
    fn from_text(text: &str) -> Result<Self, String> {
        text.parse().map_err(|_| format!("'{text}' is not an address like 127.0.0.1:9898"))
    }
}

/// An RFC 3339 time, as epoch milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochMs(pub i64);

impl FromText for EpochMs {
    fn from_text(text: &str) -> Result<Self, String> {
        chrono::DateTime::parse_from_rfc3339(text)
            .map(|t| EpochMs(t.timestamp_millis()))
            .map_err(|_| format!("'{text}' is not an RFC 3339 time"))
    }
}

/// Field errors collected while validating, each under its dotted path.
#[derive(Default)]
pub struct Errors(pub Vec<super::FieldError>);

impl Errors {
    pub fn push(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.0.push(super::FieldError { field: field.into(), reason: reason.into() });
    }

    /// The value of a typed field, or `None` with its reason recorded.
    pub fn take<T: Clone>(&mut self, field: &str, typed: &Typed<T>) -> Option<T> {
        match &typed.value {
            Ok(v) => Some(v.clone()),
            Err(reason) => {
                self.push(field, reason.clone());
                None
            }
        }
    }

    /// A duration field, which must be at least `min` (`min_text` says it
    /// in the file's syntax). `None` with the reason recorded otherwise.
    pub fn duration_at_least(
        &mut self,
        field: &str,
        typed: &Typed<Duration>,
        min: Duration,
        min_text: &str,
    ) -> Option<Duration> {
        let d = self.take(field, typed)?;
        if d < min {
            self.push(field, format!("must be at least {min_text}"));
            return None;
        }
        Some(d)
    }

    /// A whole number within `range`, or `None` with the reason recorded.
    pub fn within(&mut self, field: &str, n: u64, range: std::ops::RangeInclusive<u64>) -> Option<u64> {
        if range.contains(&n) {
            Some(n)
        } else {
            self.push(field, format!("must be between {} and {}", range.start(), range.end()));
            None
        }
    }
}
/// The path of board `i`'s fields (`board[i].name`), shared by the
/// board and league validators.
#[derive(Clone, Copy)]
pub(super) struct At(pub(super) usize);

impl At {
    pub(super) fn field(self, name: &str) -> String {
        format!("board[{}].{name}", self.0)
    }
}
