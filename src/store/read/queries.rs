//! `read.lua`'s queries, typed: one request type per op (its arguments, as
//! the script's header lists them) and one reply type, read by a parser
//! that refuses a reply of another shape instead of indexing past it.
//! [`Reader::read`](crate::store::Reader::read) runs them; nothing outside `store`
//! names an op or takes a reply apart.

use redis::Value;

use crate::store::StoreError;

/// The period a query reads: its keys, and the board's order and packing.
#[derive(Clone, Copy, Debug)]
pub struct ReadAt<'a> {
    pub keys: crate::store::ReadKeys<'a>,
    pub desc: bool,
    /// The board's score packing (see `score.rs`).
    pub shift: i64,
}

/// One op of `read.lua`: its name, its arguments after the order and
/// shift, and its reply.
pub trait Query {
    type Reply;
    const OP: &'static str;
    fn args(&self) -> Vec<String>;
    /// Reads the reply; `meta`: the board keeps metadata, so every entry
    /// carries it.
    fn parse(&self, reply: Value, meta: bool) -> Result<Self::Reply, String>;
}

/// An entry as a listing holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub member: String,
    /// The stored (packed) score.
    pub stored: i64,
    /// Its metadata as stored (compact JSON), on boards that keep it.
    pub meta: Option<String>,
}

/// A run of entries in board order, and what ranks them: the position of
/// the first, and the members and distinct values strictly better than it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listing {
    pub total: i64,
    pub start: i64,
    pub better: i64,
    pub dense_better: i64,
    pub rows: Vec<Row>,
}

/// The first `limit` entries from `offset`.
pub struct Top {
    pub offset: usize,
    pub limit: usize,
}

/// `limit` entries next to where a cursor was made (`stored`, `member`).
pub struct Page<'a> {
    pub stored: i64,
    pub member: &'a str,
    pub limit: usize,
    /// The entries after it; otherwise those before it.
    pub next: bool,
}

/// One player's standing.
pub struct Player<'a> {
    pub member: &'a str,
}

/// What [`Player`] answers for a player on the board or hidden from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub total: i64,
    /// 0-based; a hidden player's is where they would stand.
    pub position: i64,
    pub better: i64,
    pub dense_better: i64,
    pub stored: i64,
    pub meta: Option<String>,
    pub hidden: bool,
}

/// The window of `radius` entries each side of a player.
pub struct Around<'a> {
    pub member: &'a str,
    pub radius: usize,
    /// The window moves away from an edge instead of shrinking.
    pub fill: bool,
}

/// Named players and, for each, the count its rank under `policy` is one
/// more than.
pub struct Players<'a> {
    /// "ordinal", "competition" or "dense".
    pub policy: &'a str,
    pub members: &'a [String],
}

/// A named player on the board: stored score, count, meta.
#[derive(Clone, Debug, PartialEq)]
pub struct Counted {
    pub stored: i64,
    pub count: i64,
    pub meta: Option<String>,
}

/// [`Players`]' answer: a row per member asked, in order (`None`: absent).
#[derive(Clone, Debug, PartialEq)]
pub struct PlayersFound {
    pub total: i64,
    pub rows: Vec<Option<Counted>>,
}

/// The counts a value would rank by.
pub struct RankOf {
    pub value: i64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValueCounts {
    pub total: i64,
    pub better: i64,
    pub better_or_equal: i64,
    pub dense_better: i64,
}

/// A shard's first `n` entries.
pub struct ShardTop {
    pub n: usize,
}

/// One shard's entries and its version.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardRows {
    pub version: i64,
    pub total: i64,
    pub rows: Vec<Row>,
}

/// A shard's entries each side of the key (`stored`, `member`).
pub struct ShardSeek<'a> {
    pub stored: i64,
    pub member: &'a str,
    pub after: usize,
    pub before: usize,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sought {
    pub version: i64,
    pub total: i64,
    /// Entries before the key.
    pub before: i64,
    /// The key's member is here at that stored score.
    pub present: bool,
    /// The entries after the key, in board order.
    pub after_rows: Vec<Row>,
    /// The entries before it, in board order (nearest last).
    pub before_rows: Vec<Row>,
}

/// Per (value, stored, member): the shard's members with a better value,
/// with a better or equal one, and its entries before (stored, member)
/// (`member` empty: none asked).
pub struct ShardCounts<'a> {
    pub asked: &'a [(i64, i64, &'a str)],
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardCounted {
    pub version: i64,
    pub total: i64,
    /// (better, better_or_equal, before) per triple asked.
    pub counts: Vec<(i64, i64, i64)>,
}

/// A reply's values read in order, each read refusing the wrong type.
pub(in crate::store) struct Fields {
    values: std::vec::IntoIter<Value>,
}

impl Fields {
    /// An array reply (`None`: the script answered false).
    pub(in crate::store) fn of(reply: Value) -> Result<Option<Fields>, String> {
        match reply {
            Value::Nil => Ok(None),
            Value::Array(values) => Ok(Some(Fields { values: values.into_iter() })),
            other => Err(format!("{other:?}, not an array")),
        }
    }

    pub(in crate::store) fn of_array(reply: Value) -> Result<Fields, String> {
        Fields::of(reply)?.ok_or_else(|| "false, not an array".to_string())
    }

    fn next(&mut self) -> Result<Value, String> {
        self.values.next().ok_or_else(|| "a reply that ends early".to_string())
    }

    pub(in crate::store) fn int(&mut self) -> Result<i64, String> {
        redis::from_redis_value(self.next()?).map_err(|e| e.to_string())
    }

    /// A string's bytes as they are (a member of a board with columns).
    pub(in crate::store) fn bytes(&mut self) -> Result<Vec<u8>, String> {
        redis::from_redis_value(self.next()?).map_err(|e| e.to_string())
    }

    /// A string's bytes, or `None` where the script answered false.
    pub(in crate::store) fn opt_bytes(&mut self) -> Result<Option<Vec<u8>>, String> {
        redis::from_redis_value(self.next()?).map_err(|e| e.to_string())
    }

    /// How many values are left.
    pub(in crate::store) fn left(&self) -> usize {
        self.values.len()
    }

    /// A stored score (Redis answers it as a string; exact: stored scores are integers within 2^53).
    fn stored(&mut self) -> Result<Option<i64>, String> {
        let v: Option<f64> = redis::from_redis_value(self.next()?).map_err(|e| e.to_string())?;
        Ok(v.map(|s| s as i64))
    }

    /// A string, or `None` where the script answered false.
    pub(in crate::store) fn text(&mut self) -> Result<Option<String>, String> {
        redis::from_redis_value(self.next()?).map_err(|e| e.to_string())
    }

    fn row(&mut self, meta: bool) -> Result<Row, String> {
        let member = self.text()?.ok_or("an entry without a member")?;
        let stored = self.stored()?.ok_or("an entry without a score")?;
        let meta = if meta { self.text()? } else { None };
        Ok(Row { member, stored, meta })
    }

    /// `n` entries, or all that are left.
    fn rows(&mut self, n: Option<usize>, meta: bool) -> Result<Vec<Row>, String> {
        let mut out = Vec::new();
        while n.is_none_or(|n| out.len() < n) && self.values.len() > 0 {
            out.push(self.row(meta)?);
        }
        match n {
            Some(n) if out.len() < n => Err(format!("{} entries, not {n}", out.len())),
            _ => Ok(out),
        }
    }

    pub(in crate::store) fn end(mut self) -> Result<(), String> {
        match self.values.next() {
            None => Ok(()),
            Some(v) => Err(format!("{v:?} past the reply's end")),
        }
    }

    fn listing(mut self, meta: bool) -> Result<Listing, String> {
        let (total, start, better, dense_better) = (self.int()?, self.int()?, self.int()?, self.int()?);
        let rows = self.rows(None, meta)?;
        Ok(Listing { total, start, better, dense_better, rows })
    }
}

impl Query for Top {
    type Reply = Listing;
    const OP: &'static str = "top";
    fn args(&self) -> Vec<String> {
        vec![self.offset.to_string(), self.limit.to_string()]
    }
    fn parse(&self, reply: Value, meta: bool) -> Result<Listing, String> {
        Fields::of_array(reply)?.listing(meta)
    }
}

impl Query for Page<'_> {
    type Reply = Listing;
    const OP: &'static str = "page";
    fn args(&self) -> Vec<String> {
        let direction = if self.next { "next" } else { "prev" };
        vec![self.stored.to_string(), self.member.to_string(), self.limit.to_string(), direction.to_string()]
    }
    fn parse(&self, reply: Value, meta: bool) -> Result<Listing, String> {
        Fields::of_array(reply)?.listing(meta)
    }
}

impl Query for Player<'_> {
    type Reply = Option<Found>;
    const OP: &'static str = "player";
    fn args(&self) -> Vec<String> {
        vec![self.member.to_string()]
    }
    fn parse(&self, reply: Value, _meta: bool) -> Result<Option<Found>, String> {
        let Some(mut f) = Fields::of(reply)? else { return Ok(None) };
        let (total, position, better, dense_better) = (f.int()?, f.int()?, f.int()?, f.int()?);
        let stored = f.stored()?.ok_or("a standing without a score")?;
        let (meta, hidden) = (f.text()?, f.int()? == 1);
        f.end()?;
        Ok(Some(Found { total, position, better, dense_better, stored, meta, hidden }))
    }
}

impl Query for Around<'_> {
    type Reply = Option<Listing>;
    const OP: &'static str = "around";
    fn args(&self) -> Vec<String> {
        vec![self.member.to_string(), self.radius.to_string(), if self.fill { "1" } else { "0" }.to_string()]
    }
    fn parse(&self, reply: Value, meta: bool) -> Result<Option<Listing>, String> {
        Fields::of(reply)?.map(|f| f.listing(meta)).transpose()
    }
}

impl Query for Players<'_> {
    type Reply = PlayersFound;
    const OP: &'static str = "players";
    fn args(&self) -> Vec<String> {
        let mut args = vec![self.policy.to_string()];
        args.extend(self.members.iter().cloned());
        args
    }
    fn parse(&self, reply: Value, meta: bool) -> Result<PlayersFound, String> {
        let mut f = Fields::of_array(reply)?;
        let total = f.int()?;
        let mut rows = Vec::new();
        while f.values.len() > 0 {
            let stored = f.stored()?;
            let count = f.int()?;
            let meta = if meta { f.text()? } else { None };
            rows.push(stored.map(|stored| Counted { stored, count, meta }));
        }
        if rows.len() != self.members.len() {
            return Err(format!("{} rows for {} players", rows.len(), self.members.len()));
        }
        Ok(PlayersFound { total, rows })
    }
}

impl Query for RankOf {
    type Reply = ValueCounts;
    const OP: &'static str = "rank_of";
    fn args(&self) -> Vec<String> {
        vec![self.value.to_string()]
    }
    fn parse(&self, reply: Value, _meta: bool) -> Result<ValueCounts, String> {
        let mut f = Fields::of_array(reply)?;
        let counts =
            ValueCounts { total: f.int()?, better: f.int()?, better_or_equal: f.int()?, dense_better: f.int()? };
        f.end()?;
        Ok(counts)
    }
}

impl Query for ShardTop {
    type Reply = ShardRows;
    const OP: &'static str = "shard_top";
    fn args(&self) -> Vec<String> {
        vec![self.n.to_string()]
    }
    fn parse(&self, reply: Value, meta: bool) -> Result<ShardRows, String> {
        let mut f = Fields::of_array(reply)?;
        let (version, total) = (f.int()?, f.int()?);
        Ok(ShardRows { version, total, rows: f.rows(None, meta)? })
    }
}

impl Query for ShardSeek<'_> {
    type Reply = Sought;
    const OP: &'static str = "shard_seek";
    fn args(&self) -> Vec<String> {
        let (stored, member) = (self.stored.to_string(), self.member.to_string());
        vec![stored, member, self.after.to_string(), self.before.to_string()]
    }
    fn parse(&self, reply: Value, meta: bool) -> Result<Sought, String> {
        let mut f = Fields::of_array(reply)?;
        let (version, total, before, present) = (f.int()?, f.int()?, f.int()?, f.int()? == 1);
        let n_after = usize::try_from(f.int()?).map_err(|e| e.to_string())?;
        let after_rows = f.rows(Some(n_after), meta)?;
        let before_rows = f.rows(None, meta)?;
        Ok(Sought { version, total, before, present, after_rows, before_rows })
    }
}

impl Query for ShardCounts<'_> {
    type Reply = ShardCounted;
    const OP: &'static str = "shard_counts";
    fn args(&self) -> Vec<String> {
        let mut a = Vec::with_capacity(3 * self.asked.len());
        for (v, stored, member) in self.asked {
            a.extend([v.to_string(), stored.to_string(), member.to_string()]);
        }
        a
    }
    fn parse(&self, reply: Value, _meta: bool) -> Result<ShardCounted, String> {
        let mut f = Fields::of_array(reply)?;
        let (version, total) = (f.int()?, f.int()?);
        let mut counts = Vec::new();
        while f.values.len() > 0 {
            counts.push((f.int()?, f.int()?, f.int()?));
        }
        if counts.len() != self.asked.len() {
            return Err(format!("{} counts for {} asked", counts.len(), self.asked.len()));
        }
        Ok(ShardCounted { version, total, counts })
    }
}

/// A parse failure as the store's error.
pub(in crate::store) fn bad_reply(got: String) -> StoreError {
    StoreError::Reply { script: "read.lua", got }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value::{Array, BulkString, Int, Nil};

    const TOP: Top = Top { offset: 0, limit: 10 };

    fn seek() -> ShardSeek<'static> {
        ShardSeek { stored: 7, member: "a", after: 3, before: 3 }
    }

    fn s(t: &str) -> Value {
        BulkString(t.as_bytes().to_vec())
    }

    #[test]
    fn a_listing_reads_its_counts_and_entries_with_or_without_meta() {
        let reply = Array(vec![Int(3), Int(0), Int(0), Int(0), s("carol"), s("100"), s("alice"), s("90")]);
        let l = TOP.parse(reply.clone(), false).unwrap();
        assert_eq!((l.total, l.start, l.rows.len()), (3, 0, 2));
        assert_eq!(l.rows[1], Row { member: "alice".into(), stored: 90, meta: None });
        // Read as triples, the pairs are refused (a member where a score should be).
        assert!(TOP.parse(reply, true).is_err());
        let meta = Array(vec![Int(1), Int(0), Int(0), Int(0), s("carol"), s("100"), s(r#"{"a":1}"#)]);
        assert_eq!(TOP.parse(meta, true).unwrap().rows[0].meta.as_deref(), Some(r#"{"a":1}"#));
    }

    #[test]
    fn short_or_mistyped_replies_are_errors_not_panics() {
        assert!(TOP.parse(Array(vec![Int(3), Int(0)]), false).is_err());
        assert!(TOP.parse(Nil, false).is_err());
        assert!(RankOf { value: 1 }.parse(Array(vec![Int(1), Int(0), Int(1), Int(0), Int(9)]), false).is_err());
        assert!(Player { member: "p" }.parse(Array(vec![Int(1), Int(0), Int(0), Int(0)]), false).is_err());
        assert_eq!(Player { member: "p" }.parse(Nil, false).unwrap(), None);
        // A seek that says three entries follow and holds one.
        let reply = Array(vec![Int(1), Int(5), Int(2), Int(1), Int(3), s("a"), s("7")]);
        assert!(seek().parse(reply, false).is_err());
    }

    #[test]
    fn a_player_hidden_or_not_and_players_absent_or_not() {
        let hidden = Array(vec![Int(4), Int(2), Int(1), Int(1), s("50"), Nil, Int(1)]);
        let f = Player { member: "p" }.parse(hidden, false).unwrap().unwrap();
        assert_eq!((f.position, f.stored, f.meta, f.hidden), (2, 50, None, true));
        let rows = Array(vec![Int(9), s("50"), Int(3), s("{}"), Nil, Int(0), Nil]);
        let p = Players { policy: "ordinal", members: &["a".into(), "b".into()] }.parse(rows, true).unwrap();
        assert_eq!(p.total, 9);
        assert_eq!(p.rows, [Some(Counted { stored: 50, count: 3, meta: Some("{}".into()) }), None]);
    }

    #[test]
    fn a_seek_splits_the_entries_after_from_those_before() {
        let reply =
            Array(vec![s("12"), Int(5), Int(2), Int(1), Int(1), s("b"), s("7"), s("x"), s("9"), s("y"), s("8")]);
        let r = seek().parse(reply, false).unwrap();
        assert_eq!((r.version, r.total, r.before, r.present), (12, 5, 2, true));
        let names = |rows: &[Row]| rows.iter().map(|r| r.member.clone()).collect::<Vec<_>>();
        assert_eq!((names(&r.after_rows), names(&r.before_rows)), (vec!["b".into()], vec!["x".into(), "y".into()]));
        let counts = Array(vec![s("3"), Int(5), Int(1), Int(2), Int(0), Int(4), Int(4), Int(3)]);
        assert_eq!(
            ShardCounts { asked: &[(1, 0, ""), (2, 0, "")] }.parse(counts, false).unwrap().counts,
            [(1, 2, 0), (4, 4, 3)]
        );
    }
}
