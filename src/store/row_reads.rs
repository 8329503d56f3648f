//! `read_rows.lua`'s queries, typed: the reads of a board ranked by several
//! columns (see `board::columns`), whose period keys order members by
//! their bytes. Each reply is parsed strictly and its members decoded into
//! players and values with the board's [`ColumnSpec`].

use redis::Value;

use super::queries::{bad_reply, Fields};
use super::{Reader, StoreError};
use crate::board::columns::ColumnSpec;

/// A period of a board with columns: its keys and its columns.
#[derive(Clone, Copy, Debug)]
pub struct RowsAt<'a> {
    pub key: &'a str,
    pub rows_key: &'a str,
    pub shadow_key: &'a str,
    pub spec: ColumnSpec,
}

/// An entry: the player and their row's values (column order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowEntry {
    pub player: String,
    pub values: Vec<i64>,
    /// The entry's member bytes (where a page after or before it starts).
    pub member: Vec<u8>,
}

/// A run of entries in board order: the position of the first and how
/// many players have a strictly better row than it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowListing {
    pub total: i64,
    pub start: i64,
    pub better: i64,
    pub entries: Vec<RowEntry>,
}

impl RowListing {
    /// Each entry's ranks: (ordinal, competition), 1-based; equal rows
    /// share a competition rank.
    pub fn ranks(&self) -> Vec<(i64, i64)> {
        let mut out = Vec::with_capacity(self.entries.len());
        let mut competition = self.better + 1;
        for (i, e) in self.entries.iter().enumerate() {
            let ordinal = self.start + i as i64 + 1;
            if i > 0 && e.values != self.entries[i - 1].values {
                competition = ordinal;
            }
            out.push((ordinal, competition));
        }
        out
    }
}

/// One player's standing on a board with columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowFound {
    pub total: i64,
    /// 0-based; a hidden player's is where they would stand.
    pub position: i64,
    /// Players with a strictly better row.
    pub better: i64,
    pub values: Vec<i64>,
    pub hidden: bool,
}

/// A listing: total, start, better, then members.
fn listing(reply: Value, spec: &ColumnSpec) -> Result<RowListing, String> {
    let mut f = Fields::of_array(reply)?;
    let (total, start, better) = (f.int()?, f.int()?, f.int()?);
    let mut entries = Vec::with_capacity(f.left());
    while f.left() > 0 {
        let member = f.bytes()?;
        let (values, _, player) = spec.parse_member(&member).ok_or("a member of another layout")?;
        entries.push(RowEntry { player: player.to_string(), values, member });
    }
    Ok(RowListing { total, start, better, entries })
}

impl Reader {
    /// Runs one op of `read_rows.lua` on period `at`.
    async fn rows_op(&self, at: &RowsAt<'_>, op: &str, args: &[Vec<u8>]) -> Result<Value, StoreError> {
        let lua = &*super::scripts::READ_ROWS;
        let keys = super::touches::named(&super::touches::READ_ROWS, |name| match name {
            "period" => Some(at.key.to_string()),
            "rows" => Some(at.rows_key.to_string()),
            "shadow" => Some(at.shadow_key.to_string()),
            _ => None,
        });
        let (prefix, row) = (at.spec.prefix_len(), 8 * at.spec.n as usize);
        let mut all = vec![op.as_bytes().to_vec(), prefix.to_string().into_bytes(), row.to_string().into_bytes()];
        all.extend_from_slice(args);
        self.eval_ro(lua, &keys, &all).await
    }

    /// The first `limit` entries from `offset`.
    pub async fn rows_top(&self, at: &RowsAt<'_>, offset: usize, limit: usize) -> Result<RowListing, StoreError> {
        let reply = self.rows_op(at, "top", &[offset.to_string().into_bytes(), limit.to_string().into_bytes()]).await?;
        listing(reply, &at.spec).map_err(bad_reply)
    }

    /// `limit` entries after (`next`) or before the entry `member` (the
    /// bytes of a listed entry, which may have moved or left since): a
    /// cursor's page, O(log n + limit) however deep.
    pub async fn rows_page(
        &self,
        at: &RowsAt<'_>,
        member: &[u8],
        limit: usize,
        next: bool,
    ) -> Result<RowListing, StoreError> {
        let dir = if next { "next" } else { "prev" };
        let args = [member.to_vec(), limit.to_string().into_bytes(), dir.as_bytes().to_vec()];
        let reply = self.rows_op(at, "page", &args).await?;
        listing(reply, &at.spec).map_err(bad_reply)
    }

    /// `player`'s standing, `None` when they have no row here.
    pub async fn rows_player(&self, at: &RowsAt<'_>, player: &str) -> Result<Option<RowFound>, StoreError> {
        let reply = self.rows_op(at, "player", &[player.as_bytes().to_vec()]).await?;
        let parse = || -> Result<Option<RowFound>, String> {
            let Some(mut f) = Fields::of(reply)? else { return Ok(None) };
            let (total, position, better) = (f.int()?, f.int()?, f.int()?);
            let values = at.spec.values_of(&f.bytes()?).ok_or("a row of another layout")?;
            let hidden = f.int()? == 1;
            f.end()?;
            Ok(Some(RowFound { total, position, better, values, hidden }))
        };
        parse().map_err(bad_reply)
    }

    /// The entries within `radius` of `player`, `None` when they have no row here.
    pub async fn rows_around(
        &self,
        at: &RowsAt<'_>,
        player: &str,
        radius: usize,
    ) -> Result<Option<RowListing>, StoreError> {
        match self.rows_op(at, "around", &[player.as_bytes().to_vec(), radius.to_string().into_bytes()]).await? {
            Value::Nil => Ok(None),
            reply => listing(reply, &at.spec).map(Some).map_err(bad_reply),
        }
    }
}
