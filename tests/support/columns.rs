//! The boards with columns the tests share, as the row model
//! (`rankflow::board::columns`) describes them.

use rankflow::board::columns::{Column, ColumnMode, Columns, RowMode};
use rankflow::board::Order;

/// Most wins (summed), then the fastest time (the least).
pub fn arena() -> Columns {
    let c = |name: &str, mode, order| Column::new(name, mode, order);
    Columns {
        list: vec![c("wins", ColumnMode::Sum, Order::Desc), c("time_ms", ColumnMode::Min, Order::Asc)],
        row: RowMode::Columns,
    }
}

/// A speedrun's best run: the fewest deaths, then the fastest time of that run.
pub fn speedrun() -> Columns {
    let c = |name: &str| Column::new(name, ColumnMode::Min, Order::Asc);
    Columns { list: vec![c("deaths"), c("time_ms")], row: RowMode::Best }
}
