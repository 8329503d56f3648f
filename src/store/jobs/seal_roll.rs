//! The scheduler's scripts on a board's tag, run for it: `seal.lua` (a period's seal on one tag)
//! and `roll.lua` (one step of a rolling board's build). The scheduler
//! builds their keys and arguments and reads their replies; each script's
//! header says what they are.

use crate::keys;
use crate::store::conn::msgpack::{self, MapWriter};
use crate::store::conn::scripts::{Lua, ROLL, SEAL};
use crate::store::conn::touches;
use crate::store::{Store, StoreError};
/// What one step of a refresh did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RollStep {
    /// Work remains; this many members were handled.
    More(u64),
    /// The new union (of this many members; 0: none, the key is deleted) is in place.
    Done(u64),
    /// A member's running sum left the exact range; the old union is untouched.
    Inexact,
}

/// One step of one rolling board's build, as `roll.lua` reads it.
#[derive(Clone, Copy, Debug)]
pub struct RollCall<'a> {
    /// The keys, laid out by `schedule::rolling_keys`: the rolling key, its
    /// dense index, the tag's registry, the build's state, the staged union
    /// and its dense index; each day (newest first) and its staged copy; on
    /// boards that keep metadata, the meta hashes of the rolling key, the
    /// staged union, and each day and its copy; then the tag's offsets hash,
    /// and last the rolling key's version hash (its `swaps` counter rises
    /// with every swap).
    pub keys: &'a [String],
    pub days: usize,
    /// `SUM`, `MAX` or `MIN`.
    pub agg: &'a str,
    pub shift: i64,
    pub dense: bool,
    /// EXPIREAT seconds of the rolling board and its build.
    pub expire_at: i64,
    /// Members kept (0: all).
    pub top_k: u64,
    pub desc: bool,
    pub meta: bool,
    /// The most members this step reads or writes.
    pub budget: usize,
}

impl RollCall<'_> {
    /// The header naming each key by its index in `keys` (see `roll.lua`).
    fn header(&self) -> Vec<u8> {
        let mut h = MapWriter::default();
        for (i, name) in ["dest", "dest_dense", "registry", "state", "staged", "staged_dense"].into_iter().enumerate() {
            h.int(name, i as i64 + 1);
        }
        let meta_at = 6 + 2 * self.days;
        let mut days = Vec::new();
        msgpack::array_len(&mut days, self.days);
        for d in 1..=self.days {
            let mut m = MapWriter::default();
            m.int("key", (5 + 2 * d) as i64);
            m.int("copy", (6 + 2 * d) as i64);
            if self.meta {
                m.int("meta", (meta_at + 1 + 2 * d) as i64);
                m.int("copy_meta", (meta_at + 2 + 2 * d) as i64);
            }
            days.extend_from_slice(&m.finish());
        }
        h.raw("days", &days);
        if self.meta {
            h.int("dest_meta", meta_at as i64 + 1);
            h.int("staged_meta", meta_at as i64 + 2);
        }
        h.int("offsets", self.keys.len() as i64 - 1);
        h.int("versions", self.keys.len() as i64);
        h.str("agg", self.agg);
        h.int("shift", self.shift);
        h.bool("dense", self.dense);
        h.int("expire_at", self.expire_at);
        h.int("top_k", self.top_k as i64);
        h.bool("desc", self.desc);
        h.bool("meta", self.meta);
        h.int("budget", self.budget.max(1) as i64);
        h.finish()
    }
}

/// One seal of one period of one tag.
#[derive(Clone, Copy, Debug)]
pub struct SealCall<'a> {
    pub base: &'a str,
    /// The live period's id.
    pub period_id: &'a str,
    /// The close time, ms, recorded in the sealed hash.
    pub close_at: i64,
    /// EXPIREAT seconds of the final keys (0: none).
    pub expire_at: i64,
    /// How many entries of the final board to read.
    pub top: usize,
    pub desc: bool,
    /// The board keeps metadata: the final top carries it.
    pub meta: bool,
    /// The board ranks by several columns: its rows hash is sealed too, and
    /// the top is read by the worker (`Reader::rows_top`), not here.
    pub rows: bool,
}

impl SealCall<'_> {
    /// KEYS and ARGV, as `seal.lua` documents them.
    fn invocation(&self) -> (Vec<String>, Vec<String>) {
        let (base, period_id) = (self.base, self.period_id);
        let final_id = crate::period::id::final_id(period_id);
        let live = keys::period_key(base, period_id);
        let k = touches::named(&touches::SEAL, |name| {
            Some(match name {
                "live" => live.clone(),
                "final" => keys::period_key(base, &final_id),
                "live_dense" => keys::dense_key(base, period_id),
                "final_dense" => keys::dense_key(base, &final_id),
                "sealed" => keys::sealed_key(base),
                "registry" => keys::registry_key(base),
                "live_shadow" => keys::shadow_key(base, period_id),
                "final_shadow" => keys::shadow_key(base, &final_id),
                "offsets" => keys::offsets_key(base),
                "final_versions" => keys::version_key(base, &final_id),
                "live_meta" if self.meta || self.rows => keys::meta_key(base, period_id),
                "final_meta" if self.meta || self.rows => keys::meta_key(base, &final_id),
                "live_rows" if self.rows => keys::rows_key(base, period_id),
                "final_rows" if self.rows => keys::rows_key(base, &final_id),
                _ => return None,
            })
        });
        let args = vec![
            self.close_at.to_string(),
            self.expire_at.to_string(),
            if self.rows { 0 } else { self.top }.to_string(),
            if self.desc { "desc" } else { "asc" }.to_string(),
            keys::published_field(&live),
        ];
        (k, args)
    }
}

/// What `seal.lua` answered.
#[derive(Debug, PartialEq)]
pub struct SealReply {
    /// This call sealed the period (an earlier one may have).
    pub newly: bool,
    /// Its top was already published.
    pub published: bool,
    /// Members of the final board.
    pub total: i64,
    /// The final board's top: (member, stored score, meta as stored).
    pub top: Vec<(String, f64, Option<String>)>,
}

/// Reads `seal.lua`'s reply, refusing one of another shape (never indexing
/// past its end). `with_meta`: entries are (member, score, meta) triples.
fn parse_seal_reply(reply: &[redis::Value], with_meta: bool) -> Result<SealReply, StoreError> {
    let stride = if with_meta { 3 } else { 2 };
    if reply.len() < 3 || !(reply.len() - 3).is_multiple_of(stride) {
        let got = format!("{} values, not 3 followed by entries of {stride}", reply.len());
        return Err(StoreError::Reply { script: "seal.lua", got });
    }
    let err = |e: redis::ParsingError| StoreError::Reply { script: "seal.lua", got: e.to_string() };
    let int = |v: &redis::Value| redis::from_redis_value::<i64>(v.clone()).map_err(err);
    let mut top = Vec::with_capacity((reply.len() - 3) / stride);
    for entry in reply[3..].chunks_exact(stride) {
        let member: String = redis::from_redis_value(entry[0].clone()).map_err(err)?;
        let stored: f64 = redis::from_redis_value(entry[1].clone()).map_err(err)?;
        let meta: Option<String> = match entry.get(2) {
            Some(v) => redis::from_redis_value(v.clone()).map_err(err)?,
            None => None,
        };
        top.push((member, stored, meta));
    }
    Ok(SealReply { newly: int(&reply[0])? == 1, published: int(&reply[1])? == 1, total: int(&reply[2])?, top })
}

impl Store {
    /// One call of a script on `keys` (the first names what it is about),
    /// its error reply typed: `LOST` as [`StoreError::Lost`].
    pub(in crate::store) async fn script<T: redis::FromRedisValue, A: redis::ToRedisArgs>(
        &self,
        lua: &Lua,
        keys: &[String],
        args: &[A],
    ) -> Result<T, StoreError> {
        let about = keys.first().map(String::as_str).unwrap_or_default();
        self.eval(lua, keys, args).await?.map_err(|source| {
            StoreError::from_script(about, source, |source| StoreError::Script { base: about.into(), source })
        })
    }

    /// `seal.lua` on one tag (a board's, or one shard's): seals the period
    /// at most once and reads its final top.
    pub async fn seal(&self, call: &SealCall<'_>) -> Result<SealReply, StoreError> {
        let (keys, args) = call.invocation();
        let reply: Vec<redis::Value> = self.script(&SEAL, &keys, &args).await?;
        parse_seal_reply(&reply, call.meta)
    }

    /// One step of `roll.lua`: at most `call.budget` members' work.
    pub async fn roll_step(&self, call: &RollCall<'_>) -> Result<RollStep, StoreError> {
        let (state, n): (String, u64) = self.script(&ROLL, call.keys, &[call.header()]).await?;
        match state.as_str() {
            "more" => Ok(RollStep::More(n)),
            "done" => Ok(RollStep::Done(n)),
            "inexact" => Ok(RollStep::Inexact),
            other => Err(StoreError::Reply { script: "roll.lua", got: format!("'{other}'") }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_or_odd_seal_reply_is_an_error_not_a_panic() {
        use redis::Value::{BulkString, Int, Nil};
        let s = |t: &str| BulkString(t.as_bytes().to_vec());
        for bad in [vec![], vec![Int(1), Int(0)], vec![Int(1), Int(0), Int(2), s("alice")]] {
            assert!(parse_seal_reply(&bad, false).is_err(), "{bad:?}");
        }
        let good = [Int(1), Int(0), Int(2), s("alice"), s("120"), s("bob"), s("100")];
        let reply = parse_seal_reply(&good, false).unwrap();
        assert_eq!((reply.newly, reply.published, reply.total), (true, false, 2));
        assert_eq!(reply.top, [("alice".to_string(), 120.0, None), ("bob".to_string(), 100.0, None)]);
        // With metadata, entries are triples; a pair alone is refused.
        assert!(parse_seal_reply(&good, true).is_err());
        let meta = [Int(0), Int(0), Int(2), s("alice"), s("120"), s(r#"{"n":"A"}"#), s("bob"), s("100"), Nil];
        let reply = parse_seal_reply(&meta, true).unwrap();
        assert_eq!(
            reply.top,
            [("alice".to_string(), 120.0, Some(r#"{"n":"A"}"#.to_string())), ("bob".to_string(), 100.0, None)]
        );
    }
}

#[cfg(test)]
mod seal_tests {
    use super::*;

    #[test]
    fn a_seal_names_every_key_it_writes_in_keys_all_in_the_tag_slot() {
        for (meta, rows) in [(false, false), (true, false), (false, true)] {
            let (base, period_id) = ("lb:{p}", "d:2026-08-14");
            let call = SealCall { base, period_id, close_at: 1, expire_at: 0, top: 10, desc: true, meta, rows };
            let (k, args) = call.invocation();
            assert_eq!(k.len(), [10, 12, 14][usize::from(meta || rows) + usize::from(rows)]);
            assert_eq!(args[2], if rows { "0" } else { "10" }, "a top of rows is read by the worker");
            assert!(k.iter().all(|k| keys::key_slot(k) == keys::key_slot(base)), "{k:?}");
            assert_eq!(k[9], "lb:{p}:_ver:d:2026-08-14:final");
            let final_meta = (meta || rows).then_some("lb:{p}:_meta:d:2026-08-14:final");
            assert_eq!(k.get(11).map(String::as_str), final_meta);
            assert_eq!(k.get(13).map(String::as_str), rows.then_some("lb:{p}:_rows:d:2026-08-14:final"));
            // The version hash it raises is no longer an argument.
            assert!(args.iter().all(|a| !a.contains(":_ver:")), "{args:?}");
        }
    }
}

#[cfg(test)]
mod roll_tests {
    use super::*;

    #[test]
    fn a_roll_header_names_each_key_where_the_layout_puts_it() {
        // The layout of `schedule::rolling_keys` for two days, with metadata.
        let keys: Vec<String> = [
            "r",
            "r_dense",
            "reg",
            "state",
            "staged",
            "staged_dense",
            "day1",
            "copy1",
            "day2",
            "copy2",
            "r_meta",
            "staged_meta",
            "day1_meta",
            "copy1_meta",
            "day2_meta",
            "copy2_meta",
            "offsets",
            "versions",
        ]
        .map(String::from)
        .to_vec();
        let call = RollCall {
            keys: &keys,
            days: 2,
            agg: "SUM",
            shift: 1,
            dense: true,
            expire_at: 100,
            top_k: 0,
            desc: true,
            meta: true,
            budget: 10,
        };
        let header = msgpack::render(&mut call.header().as_slice());
        // Each name's index, 1-based as in Lua, read back to the key it names.
        let at = |name: &str| -> String {
            let start =
                header.find(&format!("{name}: ")).unwrap_or_else(|| panic!("{name} in {header}")) + name.len() + 2;
            let n: usize = header[start..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap();
            keys[n - 1].clone()
        };
        for (name, key) in [
            ("dest", "r"),
            ("dest_dense", "r_dense"),
            ("registry", "reg"),
            ("state", "state"),
            ("staged", "staged"),
            ("staged_dense", "staged_dense"),
            ("dest_meta", "r_meta"),
            ("staged_meta", "staged_meta"),
            ("offsets", "offsets"),
            ("versions", "versions"),
        ] {
            assert_eq!(at(name), key, "{header}");
        }
        assert!(
            header.contains(
                "days: [{key: 7, copy: 8, meta: 13, copy_meta: 14}, {key: 9, copy: 10, meta: 15, copy_meta: 16}]"
            ),
            "{header}"
        );
    }
}
