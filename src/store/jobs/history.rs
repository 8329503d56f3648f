//! Players' history: `history.lua`'s steps, which record a sealed period's
//! standings and raise each player's best of its kind, and the read of one
//! player's history (the tag's history registry, then one field of each
//! key it lists).

use crate::keys;
use crate::store::conn::scripts::{HISTORY, HISTORY_PUT};
use crate::store::conn::touches;
use crate::store::moderation::operator::failed;
use crate::store::{Reader, Store, StoreError};

/// One step of recording one sealed period of one tag in its players' history.
#[derive(Clone, Copy, Debug)]
pub struct HistoryStep<'a> {
    pub base: &'a str,
    /// The live period's id (its snapshot is `<id>:final`).
    pub period_id: &'a str,
    /// The kind of period, as the best hashes are named (`daily`, a schedule's name, ...).
    pub kind: &'a str,
    pub desc: bool,
    pub shift: i64,
    /// EXPIREAT seconds of the period's history (its snapshot's; 0: none).
    pub expire_at: i64,
    /// The most entries one step records.
    pub budget: usize,
}

impl HistoryStep<'_> {
    /// KEYS and ARGV, as `history.lua` documents them.
    fn invocation(&self) -> (Vec<String>, Vec<String>) {
        let (base, id) = (self.base, self.period_id);
        let k = touches::named(&touches::HISTORY, |name| {
            Some(match name {
                "final" => keys::period_key(base, &crate::period::id::final_id(id)),
                "history" => keys::history_key(base, id),
                "best" => keys::best_key(base, self.kind),
                "sealed" => keys::sealed_key(base),
                "history_registry" => keys::history_registry_key(base),
                "offsets" => keys::offsets_key(base),
                _ => return None,
            })
        });
        let args = vec![
            keys::history_field(&keys::period_key(base, id)),
            if self.desc { "desc" } else { "asc" }.to_string(),
            self.shift.to_string(),
            self.budget.max(1).to_string(),
            self.expire_at.to_string(),
            id.to_string(),
        ];
        (k, args)
    }
}

/// Standings the worker decided for the players of one shard of a sharded
/// board (`history_put.lua`): per player, `<ordinal>:<competition>:<total>:<stored>`.
#[derive(Clone, Copy, Debug)]
pub struct HistoryPut<'a> {
    pub base: &'a str,
    pub period_id: &'a str,
    pub kind: &'a str,
    /// EXPIREAT seconds of the period's history (0: none).
    pub expire_at: i64,
    /// The period's first step: expired history hashes leave the registry.
    pub first: bool,
    pub standings: &'a [(String, String)],
}

/// A player's standing in one sealed period, as recorded at its seal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedStanding {
    pub period_id: String,
    pub ordinal: i64,
    pub competition: i64,
    /// Members of the sealed board.
    pub total: i64,
    pub stored: i64,
    /// A board ranked by several columns: the row's values (`stored` 0);
    /// empty on a board of one score.
    pub values: Vec<i64>,
    /// On boards that keep metadata: the player's in the sealed snapshot.
    pub meta: Option<String>,
}

/// A player's best rank over the sealed periods of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BestRank {
    pub kind: String,
    pub rank: i64,
    pub period_id: String,
}

/// What the tag holds of one player's history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlayerHistory {
    pub periods: Vec<SealedStanding>,
    pub best: Vec<BestRank>,
}

/// A standing as the history hashes hold it,
/// `<ordinal>:<competition>:<total>:<stored>` (what `history.lua` writes).
pub fn standing(ordinal: u64, competition: u64, total: u64, stored: i64) -> String {
    format!("{ordinal}:{competition}:{total}:{stored}")
}

/// A standing on a board ranked by several columns:
/// `<ordinal>:<competition>:<total>:<value1>,<value2>,...`.
pub fn row_standing(ordinal: i64, competition: i64, total: i64, values: &[i64]) -> String {
    let values: Vec<String> = values.iter().map(i64::to_string).collect();
    format!("{ordinal}:{competition}:{total}:{}", values.join(","))
}

/// A standing the history hashes hold (see [`standing`], [`row_standing`]).
fn parse_standing(period_id: &str, v: &str) -> Option<SealedStanding> {
    let mut it = v.splitn(4, ':');
    let mut int = || it.next()?.parse::<i64>().ok();
    let (ordinal, competition, total) = (int()?, int()?, int()?);
    let last = it.next()?;
    let (stored, values) = match last.parse::<i64>() {
        Ok(stored) => (stored, Vec::new()),
        Err(_) => (0, last.split(',').map(str::parse).collect::<Result<Vec<i64>, _>>().ok()?),
    };
    Some(SealedStanding { period_id: period_id.to_string(), ordinal, competition, total, stored, values, meta: None })
}

/// `<rank>:<period id>`, as `history.lua` records a best.
fn parse_best(kind: &str, v: &str) -> Option<BestRank> {
    let (rank, period) = v.split_once(':')?;
    Some(BestRank { kind: kind.to_string(), rank: rank.parse().ok()?, period_id: period.to_string() })
}

impl Store {
    /// Records standings decided by the worker on one shard (`history_put.lua`).
    pub async fn history_put(&self, put: &HistoryPut<'_>) -> Result<u64, StoreError> {
        let (base, id) = (put.base, put.period_id);
        let keys = touches::named(&touches::HISTORY_PUT, |name| {
            Some(match name {
                "history" => keys::history_key(base, id),
                "best" => keys::best_key(base, put.kind),
                "history_registry" => keys::history_registry_key(base),
                "offsets" => keys::offsets_key(base),
                _ => return None,
            })
        });
        let mut args = vec![put.expire_at.to_string(), id.to_string(), if put.first { "1" } else { "0" }.to_string()];
        for (member, standing) in put.standings {
            args.push(member.clone());
            args.push(standing.clone());
        }
        self.script(&HISTORY_PUT, &keys, &args).await
    }

    /// Entries `at..at + count` of a sealed snapshot, in board order, with their stored scores.
    pub async fn sealed_entries(
        &self,
        base: &str,
        period_id: &str,
        at: u64,
        count: usize,
        desc: bool,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(keys::period_key(base, &crate::period::id::final_id(period_id)))
            .arg(at)
            .arg(at + count.max(1) as u64 - 1);
        if desc {
            cmd.arg("REV");
        }
        let got: Vec<(String, f64)> = cmd
            .arg("WITHSCORES")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(failed("read a sealed snapshot's entries"))?;
        Ok(got.into_iter().map(|(m, s)| (m, s as i64)).collect())
    }

    /// How many members a sealed snapshot holds, and how many of them hold
    /// a value better than `value` (values are stored scores divided by `shift`).
    pub async fn sealed_counts(
        &self,
        base: &str,
        period_id: &str,
        value: i64,
        shift: i64,
        desc: bool,
    ) -> Result<(u64, u64), StoreError> {
        let key = keys::period_key(base, &crate::period::id::final_id(period_id));
        let (min, max) = match desc {
            true => (((value + 1) * shift).to_string(), "+inf".to_string()),
            false => ("-inf".to_string(), format!("({}", value * shift)),
        };
        redis::pipe()
            .cmd("ZCARD")
            .arg(&key)
            .cmd("ZCOUNT")
            .arg(&key)
            .arg(min)
            .arg(max)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(failed("count a sealed snapshot's members"))
    }

    /// How far a sharded board's history of a period is recorded (the field
    /// `<period key>:history` of its first shard's sealed hash).
    pub async fn history_progress(&self, base: &str, period_id: &str) -> Result<Option<String>, StoreError> {
        redis::cmd("HGET")
            .arg(keys::sealed_key(base))
            .arg(keys::history_field(&keys::period_key(base, period_id)))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(failed("read a history's progress"))
    }

    /// Records how far a sharded board's history of a period is recorded.
    pub async fn set_history_progress(&self, base: &str, period_id: &str, at: &str) -> Result<(), StoreError> {
        redis::cmd("HSET")
            .arg(keys::sealed_key(base))
            .arg(keys::history_field(&keys::period_key(base, period_id)))
            .arg(at)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(failed("record a history's progress"))
    }

    /// One step of `history.lua`: whether the period's history is all recorded, and how many entries this step did.
    pub async fn history_step(&self, step: &HistoryStep<'_>) -> Result<(bool, u64), StoreError> {
        let (keys, args) = step.invocation();
        let (done, n): (i64, u64) = self.script(&HISTORY, &keys, &args).await?;
        Ok((done == 1, n))
    }
}

impl Reader {
    /// `member`'s history on the tag `base`: their standing in each sealed
    /// period still retained, and their best of each kind; `meta`: the
    /// board keeps metadata, and each standing carries the member's in the
    /// period's sealed snapshot (which expires with the history hash).
    pub async fn history(&self, base: &str, member: &str, meta: bool) -> Result<PlayerHistory, StoreError> {
        let registry = keys::history_registry_key(base);
        let (hist, best) = (keys::history_prefix(base), keys::best_prefix(base));
        // Each listed key's field, then for a history hash the sealed snapshot's meta field.
        let meta_of = |key: &str| {
            let period = key.strip_prefix(&hist).filter(|_| meta)?;
            Some(keys::meta_key(base, &crate::period::id::final_id(period)))
        };
        let found: Vec<(String, Option<String>, Option<String>)> = self
            .run(|mut conn| {
                let registry = registry.clone();
                async move {
                    let listed: Vec<String> = redis::cmd("SMEMBERS").arg(&registry).query_async(&mut conn).await?;
                    if listed.is_empty() {
                        return Ok(Vec::new());
                    }
                    // The meta field only where there is one to read (a history hash of a board with meta).
                    let metas: Vec<Option<String>> = listed.iter().map(|k| meta_of(k)).collect();
                    let mut pipe = redis::pipe();
                    for (k, m) in listed.iter().zip(&metas) {
                        pipe.cmd("HGET").arg(k).arg(member);
                        if let Some(m) = m {
                            pipe.cmd("HGET").arg(m).arg(member);
                        }
                    }
                    let mut values = pipe.query_async::<Vec<Option<String>>>(&mut conn).await?.into_iter();
                    let mut out = Vec::with_capacity(listed.len());
                    for (k, m) in listed.into_iter().zip(metas) {
                        let value = values.next().flatten();
                        let meta = m.and_then(|_| values.next().flatten());
                        out.push((k, value, meta));
                    }
                    Ok(out)
                }
            })
            .await?;
        let mut out = PlayerHistory::default();
        for (key, value, meta) in found {
            let Some(value) = value else { continue };
            if let Some(period) = key.strip_prefix(&hist) {
                out.periods.extend(parse_standing(period, &value).map(|s| SealedStanding { meta, ..s }));
            } else if let Some(kind) = key.strip_prefix(&best) {
                out.best.extend(parse_best(kind, &value));
            }
        }
        out.best.sort_by(|a, b| a.kind.cmp(&b.kind));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_step_names_its_keys_in_the_declared_order_all_in_the_tag_slot() {
        let step = HistoryStep {
            base: "lb:{p}",
            period_id: "d:2026-08-14",
            kind: "daily",
            desc: true,
            shift: 1,
            expire_at: 0,
            budget: 10,
        };
        let (k, args) = step.invocation();
        assert_eq!(k.len(), touches::HISTORY.keys.len());
        assert_eq!((k[0].as_str(), k[5].as_str()), ("lb:{p}:d:2026-08-14:final", "lb:{p}:_offsets"));
        assert!(k.iter().all(|k| keys::key_slot(k) == keys::key_slot("lb:{p}")), "{k:?}");
        assert_eq!(args.len(), 6);
    }

    #[test]
    fn recorded_standings_and_bests_read_back_and_odd_ones_are_skipped() {
        assert_eq!(
            parse_standing("d:2026-08-14", "3:2:40:1200"),
            Some(SealedStanding {
                period_id: "d:2026-08-14".into(),
                ordinal: 3,
                competition: 2,
                total: 40,
                stored: 1200,
                values: vec![],
                meta: None,
            })
        );
        // A row's standing, on a board ranked by several columns.
        let row = parse_standing("d", &row_standing(3, 2, 40, &[7, -53000])).unwrap();
        assert_eq!((row.ordinal, row.stored, row.values), (3, 0, vec![7, -53000]));
        assert_eq!(parse_standing("d", "3:2:40:7,x"), None);
        assert_eq!(parse_standing("d", &standing(3, 2, 40, 1200)).map(|s| s.stored), Some(1200));
        assert_eq!(parse_standing("d", "-1:1:1:-5").map(|s| s.stored), Some(-5));
        assert_eq!(parse_standing("d", "3:2:40"), None);
        assert_eq!(parse_standing("d", "x:2:40:1"), None);
        // A period id holds colons: the best's period is everything after the rank.
        assert_eq!(
            parse_best("weekend", "2:c:weekend:2026-12-04T18:00"),
            Some(BestRank { kind: "weekend".into(), rank: 2, period_id: "c:weekend:2026-12-04T18:00".into() })
        );
        assert_eq!(parse_best("daily", "two:d:1"), None);
    }

    #[test]
    fn a_step_names_its_keys_and_arguments_as_the_script_reads_them() {
        let step = HistoryStep {
            base: "lb:{p}",
            period_id: "d:2026-08-14",
            kind: "daily",
            desc: true,
            shift: 1,
            expire_at: 99,
            budget: 0,
        };
        let (keys, args) = step.invocation();
        assert_eq!(
            keys,
            [
                "lb:{p}:d:2026-08-14:final",
                "lb:{p}:_hist:d:2026-08-14",
                "lb:{p}:_best:daily",
                "lb:{p}:_sealed",
                "lb:{p}:_hk",
                "lb:{p}:_offsets"
            ]
        );
        assert_eq!(args, ["lb:{p}:d:2026-08-14:history", "desc", "1", "1", "99", "d:2026-08-14"]);
    }
}
