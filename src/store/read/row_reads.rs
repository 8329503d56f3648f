//! `read_rows.lua`'s queries, typed: the reads of a board ranked by several
//! columns (see `board::columns`), whose period keys order members by
//! their bytes. Each reply is parsed strictly and its members decoded into
//! players and values with the board's [`ColumnSpec`].

use redis::Value;

use super::queries::{bad_reply, Fields};
use crate::board::columns::ColumnSpec;
use crate::store::{Reader, StoreError};

/// A period of a board with columns: its keys and its columns.
#[derive(Clone, Copy, Debug)]
pub struct RowsAt<'a> {
    pub key: &'a str,
    pub rows_key: &'a str,
    pub shadow_key: &'a str,
    /// Boards with `dense_rank`: the period's dense index (distinct row keys).
    pub dense_key: Option<&'a str>,
    /// Boards that keep metadata: the period's meta hash (player -> JSON).
    pub meta_key: Option<&'a str>,
    pub spec: ColumnSpec,
}

/// The keys of a sealed snapshot of a board with columns (`<id>:final`).
#[derive(Clone, Debug)]
pub struct SealedRows {
    pub key: String,
    pub rows_key: String,
    pub shadow_key: String,
    pub meta_key: String,
}

impl SealedRows {
    /// The snapshot of live period `period_id` of the tag `base`.
    pub fn of(base: &str, period_id: &str) -> SealedRows {
        let id = crate::period::id::final_id(period_id);
        SealedRows {
            key: crate::keys::period_key(base, &id),
            rows_key: crate::keys::rows_key(base, &id),
            shadow_key: crate::keys::shadow_key(base, &id),
            meta_key: crate::keys::meta_key(base, &id),
        }
    }

    /// The snapshot's keys; `meta`: the board keeps metadata.
    pub fn at(&self, spec: ColumnSpec, meta: bool) -> RowsAt<'_> {
        RowsAt {
            key: &self.key,
            rows_key: &self.rows_key,
            shadow_key: &self.shadow_key,
            dense_key: None,
            meta_key: meta.then_some(self.meta_key.as_str()),
            spec,
        }
    }
}

/// An entry: the player and their row's values (column order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowEntry {
    pub player: String,
    pub values: Vec<i64>,
    /// The entry's member bytes (where a page after or before it starts).
    pub member: Vec<u8>,
    /// Its metadata as stored (compact JSON), on boards that keep it.
    pub meta: Option<String>,
}

/// A run of entries in board order: the position of the first and how
/// many players have a strictly better row than it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowListing {
    pub total: i64,
    pub start: i64,
    pub better: i64,
    /// Distinct rows strictly better than the first entry's (0 without a dense index).
    pub dense_better: i64,
    pub entries: Vec<RowEntry>,
}

/// An entry's ranks, 1-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowRanks {
    pub ordinal: i64,
    /// Equal rows share one: one more than the players with a better row.
    pub competition: i64,
    /// One more than the distinct better rows (meaningful with a dense index).
    pub dense: i64,
}

impl RowListing {
    /// Each entry's ranks.
    pub fn ranks(&self) -> Vec<RowRanks> {
        let mut out = Vec::with_capacity(self.entries.len());
        let (mut competition, mut dense) = (self.better + 1, self.dense_better + 1);
        for (i, e) in self.entries.iter().enumerate() {
            let ordinal = self.start + i as i64 + 1;
            if i > 0 && e.values != self.entries[i - 1].values {
                competition = ordinal;
                dense += 1;
            }
            out.push(RowRanks { ordinal, competition, dense });
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
    /// Distinct rows strictly better (0 without a dense index).
    pub dense_better: i64,
    pub values: Vec<i64>,
    /// The player's member bytes (where they stand, or would stand if hidden).
    pub member: Vec<u8>,
    pub hidden: bool,
    /// Its metadata as stored, on boards that keep it.
    pub meta: Option<String>,
}

/// A friends read: the total, and per player asked their entry and the
/// count their rank is one more than (`None`: no visible row here).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowPlayers {
    pub total: i64,
    pub rows: Vec<Option<(RowEntry, i64)>>,
}

/// What a row would rank by: the players strictly better than it, and
/// those better or equal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowCounts {
    pub total: i64,
    pub better: i64,
    pub better_or_equal: i64,
    /// Distinct rows strictly better (0 without a dense index).
    pub dense_better: i64,
}

/// An entry of member bytes `member` (meta as the reply carries it).
pub(in crate::store) fn entry(member: Vec<u8>, meta: Option<String>, spec: &ColumnSpec) -> Result<RowEntry, String> {
    let (values, _, player) = spec.parse_member(&member).ok_or("a member of another layout")?;
    Ok(RowEntry { player: player.to_string(), values, member, meta })
}

/// A listing: total, start, better, then members (each with its meta on `at`'s boards that keep it).
fn listing(reply: Value, at: &RowsAt<'_>) -> Result<RowListing, String> {
    let mut f = Fields::of_array(reply)?;
    let (total, start, better, dense_better) = (f.int()?, f.int()?, f.int()?, f.int()?);
    let mut entries = Vec::with_capacity(f.left());
    while f.left() > 0 {
        let member = f.bytes()?;
        let meta = if at.meta_key.is_some() { f.text()? } else { None };
        entries.push(entry(member, meta, &at.spec)?);
    }
    Ok(RowListing { total, start, better, dense_better, entries })
}

impl Reader {
    /// Runs one op of `read_rows.lua` on period `at`.
    async fn rows_op(&self, at: &RowsAt<'_>, op: &str, args: &[Vec<u8>]) -> Result<Value, StoreError> {
        self.rows_op_in(at, None, op, args).await
    }

    /// Runs one op of `read_rows.lua` on period `at`; `versions`: the
    /// period's version hash, which only the shard ops read.
    pub(in crate::store) async fn rows_op_in(
        &self,
        at: &RowsAt<'_>,
        versions: Option<&str>,
        op: &str,
        args: &[Vec<u8>],
    ) -> Result<Value, StoreError> {
        let lua = &*crate::store::conn::scripts::READ_ROWS;
        // A key that never exists holds the place of an optional key missing before one given.
        let absent = || crate::keys::absent_key(at.key);
        let keys = crate::store::conn::touches::named(&crate::store::conn::touches::READ_ROWS, |name| match name {
            "period" => Some(at.key.to_string()),
            "rows" => Some(at.rows_key.to_string()),
            "shadow" => Some(at.shadow_key.to_string()),
            "dense" => {
                at.dense_key.map(str::to_string).or_else(|| (at.meta_key.is_some() || versions.is_some()).then(absent))
            }
            "meta" => at.meta_key.map(str::to_string).or_else(|| versions.is_some().then(absent)),
            "versions" => versions.map(str::to_string),
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
        listing(reply, at).map_err(bad_reply)
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
        listing(reply, at).map_err(bad_reply)
    }

    /// `player`'s standing, `None` when they have no row here.
    pub async fn rows_player(&self, at: &RowsAt<'_>, player: &str) -> Result<Option<RowFound>, StoreError> {
        let reply = self.rows_op(at, "player", &[player.as_bytes().to_vec()]).await?;
        let parse = || -> Result<Option<RowFound>, String> {
            let Some(mut f) = Fields::of(reply)? else { return Ok(None) };
            let (total, position, better, dense_better) = (f.int()?, f.int()?, f.int()?, f.int()?);
            let row = f.bytes()?;
            let values = at.spec.values_of(&row).ok_or("a row of another layout")?;
            let mut member = row.get(..at.spec.prefix_len()).ok_or("a row of another layout")?.to_vec();
            member.extend_from_slice(player.as_bytes());
            let hidden = f.int()? == 1;
            let meta = if at.meta_key.is_some() { f.text()? } else { None };
            f.end()?;
            Ok(Some(RowFound { total, position, better, dense_better, values, member, hidden, meta }))
        };
        parse().map_err(bad_reply)
    }

    /// The entries within `radius` of `player`, `None` when they have no
    /// row here; `fill`: the window moves away from an edge instead of
    /// shrinking.
    pub async fn rows_around(
        &self,
        at: &RowsAt<'_>,
        player: &str,
        radius: usize,
        fill: bool,
    ) -> Result<Option<RowListing>, StoreError> {
        let args = [player.as_bytes().to_vec(), radius.to_string().into_bytes(), vec![if fill { b'1' } else { b'0' }]];
        match self.rows_op(at, "around", &args).await? {
            Value::Nil => Ok(None),
            reply => listing(reply, at).map(Some).map_err(bad_reply),
        }
    }

    /// The named players' entries and the count their rank under `policy`
    /// ("ordinal", "competition" or, with a dense index, "dense") is one
    /// more than, in one atomic read. A hidden player is not found.
    pub async fn rows_players(
        &self,
        at: &RowsAt<'_>,
        players: &[String],
        policy: &str,
    ) -> Result<RowPlayers, StoreError> {
        let mut args = vec![policy.as_bytes().to_vec()];
        args.extend(players.iter().map(|p| p.as_bytes().to_vec()));
        let reply = self.rows_op(at, "players", &args).await?;
        let parse = || -> Result<RowPlayers, String> {
            let mut f = Fields::of_array(reply)?;
            let total = f.int()?;
            let mut rows = Vec::with_capacity(players.len());
            for _ in players {
                let member = f.opt_bytes()?;
                let count = f.int()?;
                let meta = if at.meta_key.is_some() { f.text()? } else { None };
                rows.push(match member {
                    None => None,
                    Some(member) => Some((entry(member, meta, &at.spec)?, count)),
                });
            }
            f.end()?;
            Ok(RowPlayers { total, rows })
        };
        parse().map_err(bad_reply)
    }

    /// The counts a row of `values` would rank by.
    pub async fn rows_rank_of(&self, at: &RowsAt<'_>, values: &[i64]) -> Result<RowCounts, StoreError> {
        let reply = self.rows_op(at, "rank_of", &[at.spec.row_key(values), at.spec.row_key_after(values)]).await?;
        let parse = || -> Result<RowCounts, String> {
            let mut f = Fields::of_array(reply)?;
            let c = RowCounts { total: f.int()?, better: f.int()?, better_or_equal: f.int()?, dense_better: f.int()? };
            f.end()?;
            Ok(c)
        };
        parse().map_err(bad_reply)
    }
}
