//! Validation of a board's ranking: `mode` and `order`, or `columns` and
//! `row` (ranking by several columns, `crate::board::columns`).

use super::field::{At, Errors};
use super::raw::{RawBoard, RawColumn};
use crate::board::columns::{Column, ColumnMode, Columns, RowMode, MAX_COLUMNS};
use crate::board::{Mode, Order};
use crate::score::MAX_EXACT;

/// What a board ranks by.
pub enum Ranking {
    /// One score: the board's mode and order.
    One(Mode, Order),
    /// Several columns.
    Columns(Columns),
}

/// The board's ranking, or `None` with each problem recorded.
pub fn ranking(at: At, b: &RawBoard, e: &mut Errors) -> Option<Ranking> {
    let order = b.order.as_ref().map(|o| e.take(&at.field("order"), o));
    let Some(raw) = &b.columns else {
        if let Some(row) = &b.row {
            e.push(at.field("row"), format!("'{row}' needs columns: a board of one score has no rows to choose"));
        }
        let Some(mode) = &b.mode else {
            e.push(at.field("mode"), "required: sum, best or latest (or columns, to rank by several)");
            return None;
        };
        let mode = e.take(&at.field("mode"), mode);
        return Some(Ranking::One(mode?, order.unwrap_or(Some(Order::Desc))?));
    };
    for (field, set) in [("mode", b.mode.is_some()), ("order", b.order.is_some())] {
        if set {
            e.push(at.field(field), "a board with columns has none of its own: each column has its mode and order");
        }
    }
    let row = match b.row.as_deref() {
        None | Some("columns") => RowMode::Columns,
        Some("best") => RowMode::Best,
        Some(other) => {
            e.push(at.field("row"), format!("'{other}' is not one of columns, best"));
            return None;
        }
    };
    let field = at.field("columns");
    if raw.len() < 2 || raw.len() > MAX_COLUMNS {
        e.push(&field, format!("must list 2 to {MAX_COLUMNS} columns (one score: use mode and order)"));
        return None;
    }
    let mut list = Vec::new();
    for (i, c) in raw.iter().enumerate() {
        let cf = format!("{field}[{i}]");
        if list.iter().any(|l: &Column| l.name == c.name) {
            e.push(format!("{cf}.name"), format!("'{}' names another column too", c.name));
        }
        list.push(column(&cf, c, row, e)?);
    }
    Some(Ranking::Columns(Columns { list, row }))
}

/// What a board with columns cannot have yet, each refusal naming its
/// field and why.
pub fn refusals(at: At, b: &RawBoard, e: &mut Errors) {
    let fields: [(&str, bool, &str); 4] = [
        (
            "max_members",
            b.max_members.is_some() && b.row.as_deref() != Some("best"),
            "needs row = \"best\" on a board with columns: a trimmed row of columns aggregated on their own could not be \
             rebuilt, so its later events would count from nothing",
        ),
        (
            "rolling",
            !b.rolling.is_empty(),
            "is not available on a board with columns in this version: a rolling board is rebuilt by summing or taking \
             the best of its days' scores, one number each",
        ),
        ("max_score", b.max_score.is_some(), "bounds one score; every column takes any integer within ±(2^53 - 1)"),
        (
            "tie_epoch",
            b.tie_epoch.is_some() || b.tie_resolution.is_some() || b.tie_horizon.is_some(),
            "a board with columns keeps the time a row was reached exactly (tie_break = \"earliest\"), with no clock to set",
        ),
    ];
    for (field, set, why) in fields {
        if set {
            e.push(at.field(field), why);
        }
    }
}

/// One column: its name, order and mode (on `row = "best"`, the mode its
/// order implies).
fn column(cf: &str, c: &RawColumn, row: RowMode, e: &mut Errors) -> Option<Column> {
    let ok_name = !c.name.is_empty()
        && c.name.len() <= 32
        && c.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok_name {
        e.push(format!("{cf}.name"), format!("'{}' must match [a-z0-9_]{{1,32}}", c.name));
    }
    let order = match &c.order {
        Some(o) => e.take(&format!("{cf}.order"), o)?,
        None => Order::Desc,
    };
    let implied = if order == Order::Asc { ColumnMode::Min } else { ColumnMode::Max };
    let mode = match c.mode.as_deref() {
        Some("sum") => ColumnMode::Sum,
        Some("max") => ColumnMode::Max,
        Some("min") => ColumnMode::Min,
        Some("latest") => ColumnMode::Latest,
        None if row == RowMode::Best => implied,
        None => {
            e.push(format!("{cf}.mode"), "required: sum, max, min or latest");
            return None;
        }
        Some(other) => {
            e.push(format!("{cf}.mode"), format!("'{other}' is not one of sum, max, min, latest"));
            return None;
        }
    };
    if row == RowMode::Best && mode != implied {
        e.push(
            format!("{cf}.mode"),
            format!(
                "on row = \"best\" a row is one whole submission, compared by the columns' orders: \
                 leave mode out or write '{}' (this column's order is {})",
                implied.as_str(),
                order.as_str()
            ),
        );
        return None;
    }
    for (bound, value) in [("min", c.min), ("max", c.max)] {
        if value.is_some_and(|v| !(-MAX_EXACT..=MAX_EXACT).contains(&v)) {
            e.push(format!("{cf}.{bound}"), "must be within ±(2^53 - 1), as every column's values are");
            return None;
        }
    }
    if let (Some(min), Some(max)) = (c.min, c.max) {
        if min > max {
            e.push(format!("{cf}.min"), format!("{min} is above the column's max {max}"));
            return None;
        }
    }
    if !ok_name {
        return None;
    }
    Some(Column { name: c.name.clone(), mode, order, min: c.min, max: c.max })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranking of a board written as TOML, or the fields refused.
    fn check(board: &str) -> Result<Ranking, Vec<String>> {
        let b: RawBoard = toml::from_str(&format!("id = \"b\"\non = [\"m\"]\nperiods = [\"all_time\"]\n{board}"))
            .expect("a board table");
        let mut e = Errors(Vec::new());
        match ranking(At(0), &b, &mut e) {
            Some(r) if e.0.is_empty() => Ok(r),
            _ => Err(e.0.into_iter().map(|f| f.field).collect()),
        }
    }

    fn columns(board: &str) -> Columns {
        match check(board) {
            Ok(Ranking::Columns(c)) => c,
            Ok(Ranking::One(..)) => panic!("one score"),
            Err(f) => panic!("refused: {f:?}"),
        }
    }

    #[test]
    fn a_columns_bounds_are_kept_and_checked() {
        let c = columns(
            "row = \"best\"\ncolumns = [{ name = \"deaths\", order = \"asc\", max = 99 }, \
             { name = \"time_ms\", order = \"asc\", min = 1000, max = 3600000 }]",
        );
        assert_eq!((c.list[0].min, c.list[0].max), (None, Some(99)));
        assert_eq!((c.list[1].min, c.list[1].max), (Some(1000), Some(3_600_000)));
        let refused = |spec: &str| {
            check(&format!("columns = [{{ name = \"wins\", mode = \"sum\" }}, {spec}]")).err().unwrap_or_default()
        };
        assert_eq!(refused("{ name = \"t\", mode = \"min\", min = 5, max = 4 }"), ["board[0].columns[1].min"]);
        assert_eq!(refused("{ name = \"t\", mode = \"min\", max = 9007199254740992 }"), ["board[0].columns[1].max"]);
        assert_eq!(refused("{ name = \"t\", mode = \"min\", min = -9007199254740992 }"), ["board[0].columns[1].min"]);
    }

    #[test]
    fn columns_parse_with_their_defaults() {
        let c = columns(
            "columns = [{ name = \"wins\", mode = \"sum\" }, { name = \"time_ms\", mode = \"min\", order = \"asc\" }]",
        );
        assert_eq!(c.row, RowMode::Columns);
        assert_eq!(
            c.list,
            [Column::new("wins", ColumnMode::Sum, Order::Desc), Column::new("time_ms", ColumnMode::Min, Order::Asc),]
        );
        // On best rows each mode is the one its order implies.
        let c = columns("row = \"best\"\ncolumns = [{ name = \"deaths\", order = \"asc\" }, { name = \"level\" }]");
        assert_eq!(c.row, RowMode::Best);
        assert_eq!(c.list.iter().map(|c| c.mode).collect::<Vec<_>>(), [ColumnMode::Min, ColumnMode::Max]);
        assert!(matches!(check("mode = \"sum\"\norder = \"asc\""), Ok(Ranking::One(Mode::Sum, Order::Asc))));
    }

    #[test]
    fn each_refusal_names_its_field() {
        let two = "{ name = \"a\", mode = \"sum\" }, { name = \"b\", mode = \"max\" }";
        for (board, field) in [
            ("", "board[0].mode"),
            ("mode = \"sum\"\nrow = \"best\"", "board[0].row"),
            (&format!("mode = \"sum\"\ncolumns = [{two}]"), "board[0].mode"),
            (&format!("order = \"asc\"\ncolumns = [{two}]"), "board[0].order"),
            (&format!("row = \"first\"\ncolumns = [{two}]"), "board[0].row"),
            ("columns = [{ name = \"a\", mode = \"sum\" }]", "board[0].columns"),
            (&format!("columns = [{two}, {two}, {two}]"), "board[0].columns"),
            (
                "columns = [{ name = \"a\", mode = \"sum\" }, { name = \"a\", mode = \"max\" }]",
                "board[0].columns[1].name",
            ),
            (
                "columns = [{ name = \"A b\", mode = \"sum\" }, { name = \"b\", mode = \"max\" }]",
                "board[0].columns[0].name",
            ),
            ("columns = [{ name = \"a\" }, { name = \"b\", mode = \"max\" }]", "board[0].columns[0].mode"),
            (
                "columns = [{ name = \"a\", mode = \"avg\" }, { name = \"b\", mode = \"max\" }]",
                "board[0].columns[0].mode",
            ),
            (
                "columns = [{ name = \"a\", mode = \"sum\", order = \"up\" }, { name = \"b\", mode = \"max\" }]",
                "board[0].columns[0].order",
            ),
            // A best row is one submission: a sum column, or a max on an asc column, cannot be.
            (
                "row = \"best\"\ncolumns = [{ name = \"a\", mode = \"sum\" }, { name = \"b\" }]",
                "board[0].columns[0].mode",
            ),
            (
                "row = \"best\"\ncolumns = [{ name = \"a\" }, { name = \"b\", mode = \"max\", order = \"asc\" }]",
                "board[0].columns[1].mode",
            ),
        ] {
            let got = check(board).err().unwrap_or_default();
            assert!(got.iter().any(|f| f == field), "{board:?}: expected {field}, got {got:?}");
        }
    }

    #[test]
    fn what_a_board_with_columns_cannot_have_yet_is_refused_by_name() {
        let text = "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n\
                    [[board]]\nid = \"b\"\non = [\"m\"]\nperiods = [\"all_time\"]\n\
                    columns = [{ name = \"a\", mode = \"sum\" }, { name = \"b\", mode = \"max\" }]\n\
                    shards = 4\nmax_members = 100\n\
                    max_score = 10\ntie_resolution = \"1ms\"\n";
        let fields: Vec<String> = match crate::config::load_str(text, Vec::new()) {
            Err(crate::config::ConfigError::Invalid(v)) => v.into_iter().map(|e| e.field).collect(),
            other => panic!("expected field errors, got {other:?}"),
        };
        for f in ["max_members", "max_score", "tie_epoch"] {
            assert!(fields.contains(&format!("board[0].{f}")), "{f}: {fields:?}");
        }
        // A sharded board with columns merges its shards by rows.
        assert!(!fields.contains(&"board[0].shards".to_string()), "{fields:?}");
        // Top-K on best rows, sealing, rank changes and metadata are a board with columns' too.
        let best =
            "[kafka]\nbrokers = \"k:9092\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\nchanges_topic = \"c\"\n\
                    [[board]]\nid = \"b\"\non = [\"m\"]\nperiods = [\"daily\"]\nrow = \"best\"\n\
                    columns = [{ name = \"a\", order = \"asc\" }, { name = \"b\" }]\n\
                    max_members = 100\nclose_after = \"1h\"\nnotify_top = 10\ndense_rank = true\nmeta = true\n";
        let s = crate::config::load_str(best, Vec::new()).unwrap();
        assert_eq!((s.boards[0].write_params().top_k, s.boards[0].dense_rank(), s.boards[0].meta()), (100, true, true));
    }
}
