//! Boards ranked by several columns (`columns = [...]`): the columns, the
//! order and aggregation of their rows, and the bytes a row becomes.
//!
//! A column board's period key is a sorted set whose scores are all 0, so
//! that Redis orders its members by their bytes alone; a member is
//! `<row key><tie key><player id>`. The row key is 8 bytes a column, made
//! so that a better row is a smaller key: ascending byte order is the
//! board's order (column 1 by its order, its ties by column 2, ..., then the
//! tie rule), exact for every value within ±(2^53 - 1) in every column, and
//! a rank is `ZRANK` (O(log n)), the players strictly better than a row
//! `ZLEXCOUNT key - (<row key>`. Each column's 8 bytes: with `r` the value
//! on asc columns and its negation on desc ones (smaller is better), a byte
//! 1 then `r` in 7 bytes big-endian when `r >= 0`, a byte 0 then `2^53 + r`
//! when `r < 0`; every step stays below 2^53, so the apply script (Lua,
//! whose numbers are doubles) computes the same bytes exactly. The tie key
//! is empty for `tie_break = "member"` (ascending player bytes) and, for
//! `"earliest"`, the same 8 bytes of the time (epoch ms) of the event that
//! made the row: the earlier first.
//!
//! [`Columns::combine`] and [`Columns::better`] are the model of what the
//! apply script does with a row; the tests hold the script to them.

use std::cmp::Ordering;

use super::Order;
use crate::score::MAX_EXACT;

/// The most columns a board may rank by.
pub const MAX_COLUMNS: usize = 5;

/// Bytes a column (or the tie time) takes in a row key.
pub const COLUMN_BYTES: usize = 8;

/// How one column aggregates a player's submissions (`row = "columns"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColumnMode {
    Sum,
    Max,
    Min,
    /// The value of the player's newest submission by event time.
    Latest,
}

impl ColumnMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ColumnMode::Sum => "sum",
            ColumnMode::Max => "max",
            ColumnMode::Min => "min",
            ColumnMode::Latest => "latest",
        }
    }
}

/// What a player's row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowMode {
    /// Each column aggregated on its own, by its mode.
    Columns,
    /// The player's single best submission, compared column by column:
    /// never a row mixing two submissions.
    Best,
}

impl RowMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RowMode::Columns => "columns",
            RowMode::Best => "best",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// `[a-z0-9_]{1,32}`: the key in an event's `scores` and in replies.
    pub name: String,
    pub mode: ColumnMode,
    pub order: Order,
    /// The least value a submission may carry in this column (`min`), if bounded.
    pub min: Option<i64>,
    /// The greatest (`max`), if bounded.
    pub max: Option<i64>,
}

impl Column {
    /// An unbounded column.
    pub fn new(name: impl Into<String>, mode: ColumnMode, order: Order) -> Column {
        Column { name: name.into(), mode, order, min: None, max: None }
    }

    /// Why a submission's `value` is outside this column's bounds, if it is.
    pub fn out_of_bounds(&self, value: i64) -> Option<String> {
        match (self.min, self.max) {
            (Some(min), _) if value < min => {
                Some(format!("scores.{} {value} is below the column's min {min}", self.name))
            }
            (_, Some(max)) if value > max => {
                Some(format!("scores.{} {value} is above the column's max {max}", self.name))
            }
            _ => None,
        }
    }
}

/// A board's columns, as config validation leaves them: 2 to
/// [`MAX_COLUMNS`] distinct names, and on `row = "best"` each mode the one
/// its order implies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Columns {
    pub list: Vec<Column>,
    pub row: RowMode,
}

/// A player's row, with the event times `latest` columns and `earliest`
/// ties need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub values: Vec<i64>,
    /// The time of the event that last changed the row (`earliest` ties).
    pub reached: i64,
    /// The newest event time the row has taken (`latest` columns).
    pub newest: i64,
}

/// What a submission did to a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combined {
    /// The row after the submission (it may equal the one before).
    Row,
    /// A sum column's total would leave ±(2^53 - 1): the submission is
    /// refused (`score_out_of_range`), in every column.
    OutOfRange(usize),
}

impl Columns {
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.list.iter().map(|c| c.name.as_str())
    }

    /// Why a submission's values (column order) are outside a column's
    /// bounds (`min`, `max`), naming the first such column: the
    /// submission is then refused with `score_out_of_range`, as a score
    /// over a one-score board's `max_score` is.
    pub fn out_of_bounds(&self, values: &[i64]) -> Option<String> {
        self.list.iter().zip(values).find_map(|(c, &v)| c.out_of_bounds(v))
    }

    /// A row's values (column order) as every answer names them:
    /// `{"wins": 3, "time_ms": 53000}`.
    pub fn scores(&self, values: &[i64]) -> serde_json::Value {
        self.names().zip(values).map(|(n, v)| (n.to_string(), serde_json::Value::from(*v))).collect()
    }

    /// The board's order of two rows (`Less`: `a` ranks higher), column by
    /// column; equal rows are `Equal` (the tie rule decides).
    pub fn better(&self, a: &[i64], b: &[i64]) -> Ordering {
        for (c, (x, y)) in self.list.iter().zip(a.iter().zip(b)) {
            let o = match c.order {
                Order::Asc => x.cmp(y),
                Order::Desc => y.cmp(x),
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    /// A player's row (`old`, none before their first submission) after
    /// submission `new` (values in column order, event time `ts`). Sets
    /// `old` and says whether it took it.
    pub fn combine(&self, old: &mut Option<Row>, new: &[i64], ts: i64) -> Combined {
        let Some(row) = old else {
            *old = Some(Row { values: new.to_vec(), reached: ts, newest: ts });
            return Combined::Row;
        };
        if self.row == RowMode::Best {
            if self.better(new, &row.values) == Ordering::Less {
                *row = Row { values: new.to_vec(), reached: ts, newest: ts };
            }
            return Combined::Row;
        }
        let newer = ts > row.newest;
        let mut values = row.values.clone();
        for (i, c) in self.list.iter().enumerate() {
            let (v, n) = (values[i], new[i]);
            values[i] = match c.mode {
                ColumnMode::Sum => match v.checked_add(n).filter(|t| t.abs() <= MAX_EXACT) {
                    Some(t) => t,
                    None => return Combined::OutOfRange(i),
                },
                ColumnMode::Max => v.max(n),
                ColumnMode::Min => v.min(n),
                ColumnMode::Latest if newer => n,
                ColumnMode::Latest => v,
            };
        }
        if values != row.values {
            row.reached = ts;
        }
        row.newest = row.newest.max(ts);
        row.values = values;
        Combined::Row
    }

    /// What the apply script and the reads need of the columns; `earliest`:
    /// the board's ties go to who reached the row first.
    pub fn spec(&self, earliest: bool) -> ColumnSpec {
        let mut spec = ColumnSpec {
            n: self.list.len() as u8,
            desc: [false; MAX_COLUMNS],
            modes: [ColumnMode::Max; MAX_COLUMNS],
            best_row: self.row == RowMode::Best,
            earliest,
        };
        for (i, c) in self.list.iter().enumerate() {
            spec.desc[i] = c.order == Order::Desc;
            spec.modes[i] = c.mode;
        }
        spec
    }
}

/// A board's columns as the apply script takes them (a copy of
/// [`Columns`] without names), and the bytes of its members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ColumnSpec {
    /// How many columns (2 to [`MAX_COLUMNS`]); the arrays' first `n` count.
    pub n: u8,
    pub desc: [bool; MAX_COLUMNS],
    pub modes: [ColumnMode; MAX_COLUMNS],
    /// `row = "best"`.
    pub best_row: bool,
    /// `tie_break = "earliest"`: a tie key follows the row key.
    pub earliest: bool,
}

impl ColumnSpec {
    /// The bytes before the player id in a member: the row key and the tie key.
    pub fn prefix_len(&self) -> usize {
        COLUMN_BYTES * (self.n as usize + usize::from(self.earliest))
    }

    /// The row key of `values` (column order), see the module's doc.
    pub fn row_key(&self, values: &[i64]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix_len());
        for (i, &v) in values.iter().enumerate().take(self.n as usize) {
            push_ordered(&mut out, if self.desc[i] { -v } else { v });
        }
        out
    }

    /// The smallest key greater than every member whose row key is
    /// `row_key(values)`: that key plus one, read as a big-endian number (a
    /// column's first byte is 0 or 1, so it never carries out).
    pub fn row_key_after(&self, values: &[i64]) -> Vec<u8> {
        let mut key = self.row_key(values);
        for b in key.iter_mut().rev() {
            let (next, carry) = b.overflowing_add(1);
            *b = next;
            if !carry {
                break;
            }
        }
        key
    }

    /// The values of a row key (`None` if it is not one of this board's).
    pub fn values_of(&self, key: &[u8]) -> Option<Vec<i64>> {
        let n = self.n as usize;
        if key.len() < COLUMN_BYTES * n {
            return None;
        }
        (0..n)
            .map(|i| {
                let r = read_ordered(&key[i * COLUMN_BYTES..(i + 1) * COLUMN_BYTES])?;
                Some(if self.desc[i] { -r } else { r })
            })
            .collect()
    }

    /// Whether some column is `latest` (a stored row then ends with the
    /// newest event time it took).
    pub fn has_latest(&self) -> bool {
        self.modes[..self.n as usize].contains(&ColumnMode::Latest)
    }

    /// The row an event of `values` at time `ts` makes on its own, as the
    /// rows hash stores it: the member's bytes before the player id, then
    /// on boards with a `latest` column the newest event time.
    pub fn stored_row(&self, values: &[i64], ts: i64) -> Vec<u8> {
        let mut out = self.row_key(values);
        if self.earliest {
            push_ordered(&mut out, ts);
        }
        if self.has_latest() {
            push_ordered(&mut out, ts);
        }
        out
    }

    /// A sorted-set member: the row of `values`, reached at `reached` (the
    /// tie key, on `earliest` boards), of `player`.
    pub fn member(&self, values: &[i64], reached: i64, player: &str) -> Vec<u8> {
        let mut out = self.row_key(values);
        if self.earliest {
            push_ordered(&mut out, reached);
        }
        out.extend_from_slice(player.as_bytes());
        out
    }

    /// A member's values, tie time (on `earliest` boards) and player.
    pub fn parse_member<'m>(&self, member: &'m [u8]) -> Option<(Vec<i64>, Option<i64>, &'m str)> {
        let p = self.prefix_len();
        if member.len() <= p {
            return None;
        }
        let values = self.values_of(member)?;
        let tie = match self.earliest {
            true => Some(read_ordered(&member[p - COLUMN_BYTES..p])?),
            false => None,
        };
        Some((values, tie, std::str::from_utf8(&member[p..]).ok()?))
    }
}

/// The 8 bytes of `r` (|r| <= 2^53 - 1) that order as `r` does.
pub fn push_ordered(out: &mut Vec<u8>, r: i64) {
    let (sign, w) = if r >= 0 { (1u8, r) } else { (0u8, (1i64 << 53) + r) };
    out.push(sign);
    out.extend_from_slice(&w.to_be_bytes()[1..]);
}

/// The inverse of [`push_ordered`] (`None` for bytes it never makes).
pub fn read_ordered(b: &[u8]) -> Option<i64> {
    if b.len() != COLUMN_BYTES || b[0] > 1 {
        return None;
    }
    let mut w = [0u8; 8];
    w[1..].copy_from_slice(&b[1..]);
    let w = i64::from_be_bytes(w);
    match b[0] {
        1 if w <= MAX_EXACT => Some(w),
        0 if (1..(1 << 53)).contains(&w) => Some(w - (1 << 53)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cols(specs: &[(&str, ColumnMode, Order)], row: RowMode) -> Columns {
        let list = specs.iter().map(|&(n, mode, order)| Column::new(n, mode, order)).collect();
        Columns { list, row }
    }

    fn value() -> impl Strategy<Value = i64> {
        prop_oneof![
            -MAX_EXACT..=MAX_EXACT,
            -3i64..=3,
            Just(MAX_EXACT),
            Just(-MAX_EXACT),
            Just(MAX_EXACT - 1),
            Just(-MAX_EXACT + 1)
        ]
    }

    fn order() -> impl Strategy<Value = Order> {
        prop_oneof![Just(Order::Asc), Just(Order::Desc)]
    }

    proptest! {
        #[test]
        fn row_keys_order_as_the_board_does_and_decode_back(
            orders in proptest::collection::vec(order(), 1..=MAX_COLUMNS),
            a in proptest::collection::vec(value(), MAX_COLUMNS),
            b in proptest::collection::vec(value(), MAX_COLUMNS),
        ) {
            let specs: Vec<_> = orders.iter().map(|&o| ("c", ColumnMode::Max, o)).collect();
            let c = cols(&specs, RowMode::Columns);
            let spec = c.spec(false);
            let (a, b) = (&a[..orders.len()], &b[..orders.len()]);
            let (ka, kb) = (spec.row_key(a), spec.row_key(b));
            prop_assert_eq!(ka.len(), COLUMN_BYTES * orders.len());
            prop_assert_eq!(ka.cmp(&kb), c.better(a, b));
            prop_assert_eq!(spec.values_of(&ka), Some(a.to_vec()));
            // Members: the rows first, then the tie time, then the player.
            let tied = c.spec(true);
            let (ma, mb) = (tied.member(a, 5, "bob"), tied.member(a, 4, "carol"));
            prop_assert!(mb < ma, "the earlier reached first");
            prop_assert_eq!(tied.parse_member(&ma), Some((a.to_vec(), Some(5), "bob")));
            let plain = spec.member(a, 5, "bob");
            prop_assert_eq!(spec.parse_member(&plain), Some((a.to_vec(), None, "bob")));
            // The key after a row: above its members, at or below every worse row's.
            let after = spec.row_key_after(a);
            let last = tied.member(a, MAX_EXACT, "\u{10ffff}");
            prop_assert!(after > plain && after > last, "above the row's members");
            prop_assert!(after.len() == ka.len() && (ka >= kb || after <= kb), "at or below a worse row");
        }
    }

    #[test]
    fn the_range_ends_encode_in_order() {
        let mut keys = Vec::new();
        for r in [-MAX_EXACT, -MAX_EXACT + 1, -1, 0, 1, MAX_EXACT - 1, MAX_EXACT] {
            let mut k = Vec::new();
            push_ordered(&mut k, r);
            assert_eq!(read_ordered(&k), Some(r));
            keys.push(k);
        }
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        assert_eq!(read_ordered(&[2, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(read_ordered(&[0, 0, 0, 0, 0, 0, 0, 0]), None, "2^53 + r is never 0");
    }

    #[test]
    fn columns_aggregate_each_by_its_mode_and_latest_by_event_time() {
        use ColumnMode::*;
        let c = cols(
            &[
                ("wins", Sum, Order::Desc),
                ("best", Max, Order::Desc),
                ("low", Min, Order::Asc),
                ("last", Latest, Order::Desc),
            ],
            RowMode::Columns,
        );
        let mut row = None;
        assert_eq!(c.combine(&mut row, &[1, 10, 10, 5], 100), Combined::Row);
        c.combine(&mut row, &[1, 7, 3, 6], 300);
        c.combine(&mut row, &[1, 12, 4, 9], 200); // older: latest keeps 6
        assert_eq!(row, Some(Row { values: vec![3, 12, 3, 6], reached: 200, newest: 300 }));
        assert_eq!(c.combine(&mut row, &[MAX_EXACT, 0, 0, 0], 400), Combined::OutOfRange(0));
        assert_eq!(row.as_ref().map(|r| r.values.clone()), Some(vec![3, 12, 3, 6]), "refused in every column");
    }

    #[test]
    fn best_rows_keep_one_whole_submission() {
        // Fewest deaths, then the fastest time of that same run.
        let c =
            cols(&[("deaths", ColumnMode::Min, Order::Asc), ("time_ms", ColumnMode::Min, Order::Asc)], RowMode::Best);
        let mut row = None;
        c.combine(&mut row, &[2, 50_000], 1);
        c.combine(&mut row, &[3, 40_000], 2); // faster, but more deaths
        c.combine(&mut row, &[2, 51_000], 3);
        let values = |r: &Option<Row>| r.as_ref().map(|r| (r.values.clone(), r.reached));
        assert_eq!(values(&row), Some((vec![2, 50_000], 1)), "never (2, 40000): no run made it");
        c.combine(&mut row, &[2, 49_000], 4);
        assert_eq!(values(&row), Some((vec![2, 49_000], 4)));
    }
}
