//! Read cursors: where a `top` (or a league cohort's) page ended, as an
//! opaque, URL-safe token, and the `cursor` parameter's checks.
//!
//! A cursor names the entry it was made at (its stored score and member),
//! which way it pages (the entries after it, or those before it) and the
//! board, split and period (and cohort) it belongs to, so that it cannot
//! be used on another. Paging by that entry rather than by a position keeps a scan
//! stable while the board is written: a member whose score does not change
//! is either before or after each cursor's entry, so it appears on exactly
//! one page, in board order. The token is URL-safe base64 of a JSON array;
//! clients treat it as opaque.

use std::collections::HashMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};

use super::ranks::Entry;
use super::target::Target;
use super::ApiError;

/// Which entries a cursor's page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The entries after the cursor's entry, in board order.
    Next,
    /// The entries before it.
    Prev,
}

impl Direction {
    /// Its name in the token.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Next => "next",
            Direction::Prev => "prev",
        }
    }
}

/// A decoded cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub direction: Direction,
    /// The board, split (`""` for none) and period id it was made for.
    pub board: String,
    pub split: String,
    pub period: String,
    /// The entry it was made at.
    pub stored: i64,
    pub member: String,
    /// A league cohort's read: the cohort it pages (`None`: the board's top).
    pub cohort: Option<String>,
}

/// Format version, first in every token.
const VERSION: i64 = 1;

impl Cursor {
    /// The cursor of the top of `t` made at the entry (`stored`, `member`),
    /// paging `direction`.
    pub(super) fn on(t: &Target<'_>, direction: Direction, stored: i64, member: String) -> Cursor {
        Cursor {
            direction,
            board: t.board.id().to_string(),
            split: t.split.clone(),
            period: t.period.clone(),
            stored,
            member,
            cohort: None,
        }
    }

    pub fn encode(&self) -> String {
        let mut v =
            json!([VERSION, self.direction.name(), self.board, self.split, self.period, self.stored, self.member]);
        if let (Some(cohort), Some(a)) = (&self.cohort, v.as_array_mut()) {
            a.push(json!(cohort));
        }
        URL_SAFE_NO_PAD.encode(v.to_string())
    }

    /// The cursor a token holds, or `None` if it is not one of ours.
    pub fn decode(token: &str) -> Option<Cursor> {
        let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
        let v: Value = serde_json::from_slice(&bytes).ok()?;
        let a = v.as_array()?;
        if !(7..=8).contains(&a.len()) || a[0].as_i64()? != VERSION {
            return None;
        }
        let direction = match a[1].as_str()? {
            "next" => Direction::Next,
            "prev" => Direction::Prev,
            _ => return None,
        };
        let text = |i: usize| a[i].as_str().map(str::to_string);
        Some(Cursor {
            direction,
            board: text(2)?,
            split: text(3)?,
            period: text(4)?,
            stored: a[5].as_i64()?,
            member: text(6)?,
            cohort: match a.get(7) {
                Some(c) => Some(c.as_str()?.to_string()),
                None => None,
            },
        })
    }
}

/// The `cursor` parameter, decoded; the query then names the cursor's split
/// and period unless it names them itself (a mismatch is checked once the
/// target is resolved).
pub(super) fn take_cursor(q: &mut HashMap<String, String>) -> Result<Option<Cursor>, ApiError> {
    let Some(token) = q.get("cursor") else {
        return Ok(None);
    };
    if q.contains_key("offset") {
        return Err(ApiError::bad(
            "cursor",
            "cursor and offset cannot be combined: a cursor says where the page starts",
        ));
    }
    let c = Cursor::decode(token).ok_or_else(|| ApiError::bad("cursor", "cursor is not a cursor this API made"))?;
    q.entry("period".into()).or_insert_with(|| c.period.clone());
    if !c.split.is_empty() {
        q.entry("split".into()).or_insert_with(|| c.split.clone());
    }
    Ok(Some(c))
}

/// A cursor is read only by the board, split and period (and cohort) it was made for.
pub(super) fn check_cursor(c: &Cursor, t: &Target<'_>, cohort: Option<&str>) -> Result<(), ApiError> {
    if c.cohort.as_deref() != cohort {
        let made = c.cohort.as_deref().map_or("the board's top".to_string(), |c| format!("cohort '{c}'"));
        return Err(ApiError::bad("cursor", format!("the cursor was made for {made}, not this read")));
    }
    if c.board != t.board.id() || c.split != t.split || c.period != t.period {
        return Err(ApiError::bad(
            "cursor",
            format!(
                "the cursor was made for board '{}' period '{}'{}, not this read",
                c.board,
                c.period,
                if c.split.is_empty() { String::new() } else { format!(" split '{}'", c.split) }
            ),
        ));
    }
    Ok(())
}

/// The cursor of `e` paging `direction` on the target.
fn cursor_at(t: &Target<'_>, e: &Entry, direction: Direction) -> String {
    Cursor::on(t, direction, e.stored, e.member.clone()).encode()
}

/// A page's cursors: `next_cursor` unless it ends the board, `prev_cursor`
/// unless it starts it.
pub(super) fn add_cursors(head: &mut Value, t: &Target<'_>, entries: &[Entry], total: i64) {
    if let (Some(first), Some(last)) = (entries.first(), entries.last()) {
        let start = first.ranks.ordinal - 1;
        if start + (entries.len() as i64) < total {
            head["next_cursor"] = json!(cursor_at(t, last, Direction::Next));
        }
        if start > 0 {
            head["prev_cursor"] = json!(cursor_at(t, first, Direction::Prev));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cursor(direction: Direction, member: &str, stored: i64) -> Cursor {
        Cursor {
            direction,
            board: "laps".into(),
            split: "monza".into(),
            period: "d:2026-12-01".into(),
            stored,
            member: member.into(),
            cohort: None,
        }
    }

    #[test]
    fn a_token_is_url_safe_and_decodes_to_its_cursor() {
        let c = cursor(Direction::Prev, "ünïcode/+?&=", -9_007_199_254_740_991);
        let token = c.encode();
        assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{token}");
        assert_eq!(Cursor::decode(&token), Some(c.clone()));
        // A cohort's cursor carries its cohort.
        let in_cohort = Cursor { cohort: Some("2-7".into()), ..c };
        assert_eq!(Cursor::decode(&in_cohort.encode()), Some(in_cohort));
    }

    #[test]
    fn anything_else_is_no_cursor() {
        let good = cursor(Direction::Next, "bob", 100).encode();
        for bad in ["", "!!", "bm90IGpzb24", &good[..good.len() - 3], &format!("{good}A")] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
        // Valid base64 of the wrong JSON.
        for v in [json!([2, "next", "b", "", "all", 1, "m"]), json!([1, "x", "b", "", "all", 1, "m"]), json!({"a": 1})]
        {
            assert_eq!(Cursor::decode(&URL_SAFE_NO_PAD.encode(v.to_string())), None, "{v}");
        }
    }

    proptest! {
        #[test]
        fn every_cursor_round_trips(member in "\\PC{1,40}", stored in any::<i64>(), next in any::<bool>()) {
            let c = cursor(if next { Direction::Next } else { Direction::Prev }, &member, stored);
            prop_assert_eq!(Cursor::decode(&c.encode()), Some(c));
        }
    }
}
