//! Leagues on one board tag: what a round's settlement reads and its steps
//! (`settle.lua`), and what the league reads ask. The keys are `keys`'
//! `league_*`; the rules are `board::league`'s.

use std::collections::HashMap;

use crate::board::league::{self, COHORT_SPAN};
use crate::keys;
use crate::store::conn::msgpack::{self, MapWriter};
use crate::store::conn::scripts::SETTLE;
use crate::store::moderation::operator::failed;
use crate::store::read::reads::Reader;
use crate::store::{RedisConn, Store, StoreError};

/// Where a round's settlement stands (field `<round>:step` of the tag's
/// settlements hash; see `settle.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The cohorts from cohort `n` of `tier` on are to be settled.
    Cohorts {
        tier: usize,
        n: i64,
    },
    /// The previous round's players from the `k`th (in its cohorts zset) on
    /// are to be checked for idleness.
    Idle(u64),
    /// The next round's waiting players are being placed.
    Place,
    Done,
}

impl Progress {
    pub fn parse(text: Option<&str>) -> Option<Progress> {
        let Some(text) = text else { return Some(Progress::Cohorts { tier: 0, n: 1 }) };
        match text.split(':').collect::<Vec<_>>()[..] {
            ["c", t, n] => Some(Progress::Cohorts { tier: t.parse().ok()?, n: n.parse().ok()? }),
            ["i", k] => Some(Progress::Idle(k.parse().ok()?)),
            ["p"] => Some(Progress::Place),
            ["done"] => Some(Progress::Done),
            _ => None,
        }
    }

    pub fn text(self) -> String {
        match self {
            Progress::Cohorts { tier, n } => format!("c:{tier}:{n}"),
            Progress::Idle(k) => format!("i:{k}"),
            Progress::Place => "p".into(),
            Progress::Done => "done".into(),
        }
    }
}

/// One player's write in a settlement step: the tier of their next
/// placement and their result in the round (`<rank>:<zone>:<next tier>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierWrite {
    pub member: String,
    pub tier: usize,
    pub result: Option<String>,
}

/// A round's settlement step that writes tiers, from `at` to `next`.
#[derive(Clone, Debug)]
pub struct SettleWrite<'a> {
    pub base: &'a str,
    pub round: &'a str,
    pub at: Progress,
    pub next: Progress,
    pub writes: &'a [TierWrite],
    /// EXPIREAT seconds of the round's results (0: none).
    pub expire_at: i64,
}

/// A step placing the next round's waiting players (at most `max`).
#[derive(Clone, Debug)]
pub struct SettlePlace<'a> {
    pub base: &'a str,
    pub round: &'a str,
    /// The next round's id and its keys' EXPIREAT seconds; `None`: there is none.
    pub next_round: Option<(&'a str, i64)>,
    pub cohort_size: u32,
    pub tiers: usize,
    pub max: usize,
}

/// `ZMSCORE key members`, in chunks: each member's score, if it has one.
async fn zmscore(conn: &mut RedisConn, key: &str, members: &[String]) -> Result<Vec<Option<f64>>, redis::RedisError> {
    let mut out = Vec::with_capacity(members.len());
    for chunk in members.chunks(1000) {
        let got: Vec<Option<f64>> = redis::cmd("ZMSCORE").arg(key).arg(chunk).query_async(conn).await?;
        out.extend(got);
    }
    Ok(out)
}

/// On a board with columns: per player, its member in the period key `key`
/// (its row's first `prefix` bytes from the rows hash `rows_key`, then the
/// player id), `None` for a player without a row or hidden (a hidden
/// player's member is in the shadow, not in `key`).
async fn visible_rows(
    conn: &mut RedisConn,
    (key, rows_key, prefix): (&str, &str, usize),
    players: &[String],
) -> Result<Vec<Option<Vec<u8>>>, redis::RedisError> {
    let mut rows: Vec<Option<Vec<u8>>> = Vec::with_capacity(players.len());
    for chunk in players.chunks(1000) {
        let got: Vec<Option<Vec<u8>>> = redis::cmd("HMGET").arg(rows_key).arg(chunk).query_async(conn).await?;
        rows.extend(got);
    }
    let members: Vec<Option<Vec<u8>>> = rows
        .into_iter()
        .zip(players)
        .map(|(row, p)| row.map(|r| [&r[..prefix.min(r.len())], p.as_bytes()].concat()))
        .collect();
    let present: Vec<&Vec<u8>> = members.iter().flatten().collect();
    let mut held = Vec::with_capacity(present.len());
    for chunk in present.chunks(1000) {
        let got: Vec<Option<f64>> = redis::cmd("ZMSCORE").arg(key).arg(chunk).query_async(conn).await?;
        held.extend(got);
    }
    let mut held = held.into_iter();
    Ok(members.into_iter().map(|m| m.filter(|_| held.next().flatten().is_some())).collect())
}

/// A cohort's players with their codes: `ZRANGE BYSCORE from to`.
async fn coded(conn: &mut RedisConn, key: &str, from: i64, to: i64) -> Result<Vec<(String, i64)>, redis::RedisError> {
    let flat: Vec<(String, f64)> =
        redis::cmd("ZRANGE").arg(key).arg(from).arg(to).arg("BYSCORE").arg("WITHSCORES").query_async(conn).await?;
    Ok(flat.into_iter().map(|(m, c)| (m, c as i64)).collect())
}

impl Store {
    /// Where the settlement of `round` on tag `base` stands.
    pub async fn league_progress(&self, base: &str, round: &str) -> Result<Progress, StoreError> {
        let mut conn = self.conn.clone();
        let text: Option<String> = redis::cmd("HGET")
            .arg(keys::league_state_key(base))
            .arg(format!("{round}:step"))
            .query_async(&mut conn)
            .await
            .map_err(failed("read a league settlement"))?;
        Progress::parse(text.as_deref())
            .ok_or(StoreError::Reply { script: "settle.lua", got: text.unwrap_or_default() })
    }

    /// Whether `round` can be settled: none of its players still waits,
    /// and the round before (if any) is settled or held nobody.
    pub async fn league_ready(&self, base: &str, round: &str, previous: Option<&str>) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let f = failed("read whether a league round can settle");
        let waiting: i64 =
            redis::cmd("EXISTS").arg(keys::league_pending_key(base, round)).query_async(&mut conn).await.map_err(f)?;
        let Some(prev) = previous.filter(|_| waiting == 0) else { return Ok(waiting == 0) };
        let f = failed("read whether a league round can settle");
        let settled: bool = redis::cmd("HEXISTS")
            .arg(keys::league_state_key(base))
            .arg(prev)
            .query_async(&mut conn)
            .await
            .map_err(f)?;
        if settled {
            return Ok(true);
        }
        let held: i64 = redis::cmd("EXISTS")
            .arg(keys::league_cohorts_key(base, prev))
            .arg(keys::league_pending_key(base, prev))
            .query_async(&mut conn)
            .await
            .map_err(failed("read whether a league round can settle"))?;
        Ok(held == 0)
    }

    /// The newest cohort's number of each tier in `round` (0: none).
    pub async fn league_newest(&self, base: &str, round: &str, tiers: usize) -> Result<Vec<i64>, StoreError> {
        newest(&mut self.conn.clone(), base, round, tiers).await.map_err(failed("read a round's cohorts"))
    }

    /// The players of cohorts `from..=to` (codes) of `round`, with their codes.
    pub async fn league_cohorts(
        &self,
        base: &str,
        round: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let key = keys::league_cohorts_key(base, round);
        coded(&mut self.conn.clone(), &key, from, to).await.map_err(failed("read a round's cohorts"))
    }

    /// `count` players of `round` from the `offset`th, in its cohorts zset's order.
    pub async fn league_players(
        &self,
        base: &str,
        round: &str,
        offset: u64,
        count: u64,
    ) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("ZRANGE")
            .arg(keys::league_cohorts_key(base, round))
            .arg(offset)
            .arg(offset + count.max(1) - 1)
            .query_async(&mut conn)
            .await
            .map_err(failed("read a round's players"))
    }

    /// Each member's cohort code in `round`, if placed.
    pub async fn league_codes(
        &self,
        base: &str,
        round: &str,
        members: &[String],
    ) -> Result<Vec<Option<i64>>, StoreError> {
        let key = keys::league_cohorts_key(base, round);
        let got = zmscore(&mut self.conn.clone(), &key, members).await.map_err(failed("read players' cohorts"))?;
        Ok(got.into_iter().map(|c| c.map(|c| c as i64)).collect())
    }

    /// Each member's tier at their next placement, if they have one.
    pub async fn league_tiers(&self, base: &str, members: &[String]) -> Result<Vec<Option<usize>>, StoreError> {
        let mut conn = self.conn.clone();
        let mut out = Vec::with_capacity(members.len());
        for chunk in members.chunks(1000) {
            let got: Vec<Option<usize>> = redis::cmd("HMGET")
                .arg(keys::league_tiers_key(base))
                .arg(chunk)
                .query_async(&mut conn)
                .await
                .map_err(failed("read players' tiers"))?;
            out.extend(got);
        }
        Ok(out)
    }

    /// Each member's stored score in `key`, if they have one.
    pub async fn scores_of(&self, key: &str, members: &[String]) -> Result<Vec<Option<f64>>, StoreError> {
        zmscore(&mut self.conn.clone(), key, members).await.map_err(failed("read players' scores"))
    }

    /// On a board with columns (`RowsOf`): each player's member bytes in
    /// the period key, `None` when they have no row there or are hidden.
    pub async fn rows_of(&self, at: RowsOf<'_>, players: &[String]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let at = (at.key, at.rows_key, at.prefix);
        visible_rows(&mut self.conn.clone(), at, players).await.map_err(failed("read players' rows"))
    }

    /// A settlement step writing tiers; `false` when the settlement was
    /// not at `call.at` (another worker moved it; nothing was written).
    pub async fn settle_write(&self, call: &SettleWrite<'_>) -> Result<bool, StoreError> {
        let (base, mut h) = (call.base, MapWriter::default());
        h.str("op", "write");
        h.str("round", call.round);
        h.str("at", &call.at.text());
        h.str("next", &call.next.text());
        let k = [
            keys::offsets_key(base),
            keys::league_state_key(base),
            keys::league_tiers_key(base),
            keys::league_overrides_key(base),
            keys::league_results_key(base, call.round),
            keys::league_registry_key(base),
        ];
        for (i, name) in ["offsets", "state", "tiers", "overrides", "results", "registry"].into_iter().enumerate() {
            h.int(name, i as i64 + 1);
        }
        h.int("expire_at", call.expire_at);
        let mut items = Vec::with_capacity(16 * call.writes.len());
        msgpack::array_len(&mut items, call.writes.len());
        for w in call.writes {
            msgpack::array_len(&mut items, 3);
            msgpack::str(&mut items, &w.member);
            msgpack::int(&mut items, w.tier as i64);
            msgpack::str(&mut items, w.result.as_deref().unwrap_or(""));
        }
        let answer: i64 = self.script(&SETTLE, &k, &[h.finish(), items]).await?;
        Ok(answer == 0)
    }

    /// A step placing the next round's waiting players: how many still
    /// wait (0: the round is settled), or `None` when the settlement was
    /// not placing (nothing was written).
    pub async fn settle_place(&self, call: &SettlePlace<'_>) -> Result<Option<u64>, StoreError> {
        let (base, mut h) = (call.base, MapWriter::default());
        h.str("op", "place");
        h.str("round", call.round);
        h.str("at", &Progress::Place.text());
        let mut k = vec![
            keys::offsets_key(base),
            keys::league_state_key(base),
            keys::league_tiers_key(base),
            keys::league_overrides_key(base),
            keys::league_registry_key(base),
        ];
        for (i, name) in ["offsets", "state", "tiers", "overrides", "registry"].into_iter().enumerate() {
            h.int(name, i as i64 + 1);
        }
        if let Some((next, expire_at)) = call.next_round {
            k.push(keys::league_cohorts_key(base, next));
            k.push(keys::league_open_key(base, next));
            k.push(keys::league_pending_key(base, next));
            h.int("cohorts", 6);
            h.int("open", 7);
            h.int("pending", 8);
            h.int("expire_at", expire_at);
        }
        h.int("size", i64::from(call.cohort_size));
        h.int("count", call.tiers as i64);
        h.int("max", call.max.max(1) as i64);
        let left: i64 = self.script(&SETTLE, &k, &[h.finish()]).await?;
        Ok(u64::try_from(left).ok())
    }

    /// How many cohorts of a settled round are published.
    pub async fn league_published(&self, base: &str, round: &str) -> Result<u64, StoreError> {
        let mut conn = self.conn.clone();
        let n: Option<u64> = redis::cmd("HGET")
            .arg(keys::league_state_key(base))
            .arg(format!("{round}:published"))
            .query_async(&mut conn)
            .await
            .map_err(failed("read a league's publication"))?;
        Ok(n.unwrap_or(0))
    }

    /// Where the seal topic ended before a round's publication began
    /// (`<partition>:<offset>,...`): set once, by the first publication;
    /// answers the value that holds, and whether this call set it.
    pub async fn start_league_publication(
        &self,
        base: &str,
        round: &str,
        ends: &str,
    ) -> Result<(String, bool), StoreError> {
        let mut conn = self.conn.clone();
        let field = format!("{round}:from");
        let key = keys::league_state_key(base);
        let f = failed("note where a league's publication starts");
        let set: bool = redis::cmd("HSETNX").arg(&key).arg(&field).arg(ends).query_async(&mut conn).await.map_err(f)?;
        if set {
            return Ok((ends.to_string(), true));
        }
        let f = failed("read where a league's publication starts");
        let held: String = redis::cmd("HGET").arg(&key).arg(&field).query_async(&mut conn).await.map_err(f)?;
        Ok((held, false))
    }

    /// Records that the first `n` cohorts of a settled round are published.
    pub async fn note_league_published(&self, base: &str, round: &str, n: u64) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("HSET")
            .arg(keys::league_state_key(base))
            .arg(format!("{round}:published"))
            .arg(n)
            .query_async::<i64>(&mut conn)
            .await
            .map_err(failed("note a league's publication"))?;
        Ok(())
    }

    /// Players placed in `round`, per tier.
    pub async fn league_tier_counts(&self, base: &str, round: &str, tiers: usize) -> Result<Vec<u64>, StoreError> {
        tier_counts(&mut self.conn.clone(), base, round, tiers).await.map_err(failed("count a round's players"))
    }

    /// The values of `fields` in hash `key` (`HMGET`).
    pub async fn hash_fields(&self, key: &str, fields: &[String]) -> Result<Vec<Option<String>>, StoreError> {
        if fields.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        redis::cmd("HMGET").arg(key).arg(fields).query_async(&mut conn).await.map_err(failed("read a hash"))
    }

    /// A settled round's results of `members` (`<rank>:<zone>:<next tier>`).
    pub async fn league_results(
        &self,
        base: &str,
        round: &str,
        members: &[String],
    ) -> Result<Vec<Option<String>>, StoreError> {
        results(&mut self.conn.clone(), base, round, members).await.map_err(failed("read a round's results"))
    }
}

async fn newest(conn: &mut RedisConn, base: &str, round: &str, tiers: usize) -> Result<Vec<i64>, redis::RedisError> {
    let fields: Vec<String> = (0..tiers).map(|t| t.to_string()).collect();
    let got: Vec<Option<i64>> =
        redis::cmd("HMGET").arg(keys::league_open_key(base, round)).arg(&fields).query_async(conn).await?;
    Ok(got.into_iter().map(|n| n.unwrap_or(0)).collect())
}

async fn tier_counts(
    conn: &mut RedisConn,
    base: &str,
    round: &str,
    tiers: usize,
) -> Result<Vec<u64>, redis::RedisError> {
    let mut pipe = redis::pipe();
    for t in 0..tiers {
        let (from, to) = (league::code(t, 1), league::code(t, COHORT_SPAN - 1));
        pipe.cmd("ZCOUNT").arg(keys::league_cohorts_key(base, round)).arg(from).arg(to);
    }
    pipe.query_async(conn).await
}

async fn results(
    conn: &mut RedisConn,
    base: &str,
    round: &str,
    members: &[String],
) -> Result<Vec<Option<String>>, redis::RedisError> {
    if members.is_empty() {
        return Ok(Vec::new());
    }
    redis::cmd("HMGET").arg(keys::league_results_key(base, round)).arg(members).query_async(conn).await
}

/// Where one player stands in a round, as the reads need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In the cohort with this code.
    Placed(i64),
    /// Waiting for the previous round's settlement.
    Pending,
    NotPlaced,
}

/// A cohort as a read sees it: its players with their stored scores (those
/// without one, hidden or erased, left out) and, once settled, each
/// player's recorded result.
#[derive(Clone, Debug, Default)]
pub struct CohortRead {
    /// On a board of one score: (stored score, player) of each ranked player.
    pub players: Vec<(i64, String)>,
    /// On a board with columns: (member bytes, player), in board order.
    pub rows: Vec<(Vec<u8>, String)>,
    pub results: HashMap<String, String>,
}

/// Where a board with columns keeps a period's rows: its period key, rows
/// hash, and how many bytes of a row start its member.
#[derive(Clone, Copy, Debug)]
pub struct RowsOf<'a> {
    pub key: &'a str,
    pub rows_key: &'a str,
    pub prefix: usize,
}

impl Reader {
    /// Where `member` stands in `round`.
    pub async fn league_placement(&self, base: &str, round: &str, member: &str) -> Result<Placement, StoreError> {
        let (cohorts, pending) = (keys::league_cohorts_key(base, round), keys::league_pending_key(base, round));
        let (code, pending): (Option<f64>, Option<f64>) = self
            .run(|mut conn| {
                let mut pipe = redis::pipe();
                pipe.cmd("ZSCORE").arg(&cohorts).arg(member);
                pipe.cmd("ZSCORE").arg(&pending).arg(member);
                async move { pipe.query_async(&mut conn).await }
            })
            .await?;
        Ok(match (code, pending) {
            (Some(c), _) => Placement::Placed(c as i64),
            (None, Some(_)) => Placement::Pending,
            (None, None) => Placement::NotPlaced,
        })
    }

    /// Cohort `code` of `round`, scored from `board_key` (the live round or its snapshot).
    /// Cohort `code` of `round`: its ranked players on the period key
    /// `board_key` (on a board with columns, `rows`: their rows, in board
    /// order) and its recorded results.
    pub async fn league_cohort(
        &self,
        base: &str,
        round: &str,
        code: i64,
        board_key: &str,
        rows: Option<RowsOf<'_>>,
    ) -> Result<CohortRead, StoreError> {
        let key = keys::league_cohorts_key(base, round);
        self.run(|mut conn| {
            let key = key.clone();
            async move {
                let members: Vec<String> =
                    coded(&mut conn, &key, code, code).await?.into_iter().map(|(m, _)| m).collect();
                let got = results(&mut conn, base, round, &members).await?;
                let results = members.iter().zip(got).filter_map(|(m, r)| Some((m.clone(), r?))).collect();
                if let Some(at) = rows {
                    let found = visible_rows(&mut conn, (at.key, at.rows_key, at.prefix), &members).await?;
                    let mut rows: Vec<(Vec<u8>, String)> =
                        members.into_iter().zip(found).filter_map(|(m, r)| Some((r?, m))).collect();
                    rows.sort();
                    return Ok(CohortRead { players: Vec::new(), rows, results });
                }
                let scores = zmscore(&mut conn, board_key, &members).await?;
                let players = members.into_iter().zip(scores).filter_map(|(m, s)| Some((s? as i64, m))).collect();
                Ok(CohortRead { players, rows: Vec::new(), results })
            }
        })
        .await
    }

    /// Per tier, its cohorts and players in `round`.
    pub async fn league_overview(&self, base: &str, round: &str, tiers: usize) -> Result<Vec<(i64, u64)>, StoreError> {
        self.run(|mut conn| async move {
            let newest = newest(&mut conn, base, round, tiers).await?;
            let players = tier_counts(&mut conn, base, round, tiers).await?;
            Ok(newest.into_iter().zip(players).collect())
        })
        .await
    }
}
