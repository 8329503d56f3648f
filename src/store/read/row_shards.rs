//! `read_rows.lua`'s shard ops, typed: one shard of a sharded board ranked
//! by several columns, read atomically; `http::sharded_rows` merges the
//! shards by member bytes. Every reply starts with the shard's version
//! (see `read.lua`) and carries each entry's meta (`None` where there is
//! none, and on boards that keep none).

use super::queries::{bad_reply, Fields};
use super::row_reads::{entry, RowEntry, RowsAt};
use crate::store::{Reader, StoreError};

/// A shard's first entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowShardTop {
    pub version: i64,
    pub total: i64,
    pub entries: Vec<RowEntry>,
}

/// A shard's entries next to a member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowSought {
    pub version: i64,
    pub total: i64,
    /// The shard's entries before the member.
    pub before: i64,
    /// The member is in the shard.
    pub present: bool,
    /// Entries after the member, in board order.
    pub after_rows: Vec<RowEntry>,
    /// Entries before the member, in board order (nearest last).
    pub before_rows: Vec<RowEntry>,
}

/// What one triple asked of a shard counts: the shard's members with a
/// better row, with a better or equal row, and before the member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowShardCount {
    pub better: i64,
    pub better_or_equal: i64,
    pub before: i64,
}

/// A shard's counts of the triples asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowShardCounts {
    pub version: i64,
    pub total: i64,
    pub counts: Vec<RowShardCount>,
}

/// What a shard is asked to count: a row of values and, optionally, a
/// member (whose entries before it are counted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowAsked {
    pub values: Vec<i64>,
    pub member: Option<Vec<u8>>,
}

/// `n` entries, each (member, meta).
fn entries(f: &mut Fields, n: usize, at: &RowsAt<'_>) -> Result<Vec<RowEntry>, String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let member = f.bytes()?;
        let meta = f.text()?;
        out.push(entry(member, meta, &at.spec)?);
    }
    Ok(out)
}

impl Reader {
    /// The first `n` entries of shard `at` (version hash `versions`).
    pub async fn rows_shard_top(&self, at: &RowsAt<'_>, versions: &str, n: usize) -> Result<RowShardTop, StoreError> {
        let reply = self.rows_op_in(at, Some(versions), "shard_top", &[n.to_string().into_bytes()]).await?;
        let parse = || -> Result<RowShardTop, String> {
            let mut f = Fields::of_array(reply)?;
            let (version, total) = (f.int()?, f.int()?);
            let n = f.left() / 2;
            let entries = entries(&mut f, n, at)?;
            f.end()?;
            Ok(RowShardTop { version, total, entries })
        };
        parse().map_err(bad_reply)
    }

    /// Shard `at`'s `after` entries after `member` and `before` entries before it.
    pub async fn rows_shard_seek(
        &self,
        at: &RowsAt<'_>,
        versions: &str,
        member: &[u8],
        after: usize,
        before: usize,
    ) -> Result<RowSought, StoreError> {
        let args = [member.to_vec(), after.to_string().into_bytes(), before.to_string().into_bytes()];
        let reply = self.rows_op_in(at, Some(versions), "shard_seek", &args).await?;
        let parse = || -> Result<RowSought, String> {
            let mut f = Fields::of_array(reply)?;
            let (version, total, before, present) = (f.int()?, f.int()?, f.int()?, f.int()? == 1);
            let n_after = usize::try_from(f.int()?).map_err(|_| "a negative count")?;
            let after_rows = entries(&mut f, n_after, at)?;
            let n_before = f.left() / 2;
            let before_rows = entries(&mut f, n_before, at)?;
            f.end()?;
            Ok(RowSought { version, total, before, present, after_rows, before_rows })
        };
        parse().map_err(bad_reply)
    }

    /// Shard `at`'s counts of each row (and member) asked.
    pub async fn rows_shard_counts(
        &self,
        at: &RowsAt<'_>,
        versions: &str,
        asked: &[RowAsked],
    ) -> Result<RowShardCounts, StoreError> {
        let mut args = Vec::with_capacity(3 * asked.len());
        for a in asked {
            args.push(at.spec.row_key(&a.values));
            args.push(at.spec.row_key_after(&a.values));
            args.push(a.member.clone().unwrap_or_default());
        }
        let reply = self.rows_op_in(at, Some(versions), "shard_counts", &args).await?;
        let parse = || -> Result<RowShardCounts, String> {
            let mut f = Fields::of_array(reply)?;
            let (version, total) = (f.int()?, f.int()?);
            let mut counts = Vec::with_capacity(asked.len());
            for _ in asked {
                counts.push(RowShardCount { better: f.int()?, better_or_equal: f.int()?, before: f.int()? });
            }
            f.end()?;
            Ok(RowShardCounts { version, total, counts })
        };
        parse().map_err(bad_reply)
    }
}
