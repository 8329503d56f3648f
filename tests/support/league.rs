//! Leagues' test helpers: a model of the rules (placement in arrival
//! order, settlement by score), round ids, and waiting on Redis.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

pub const SPAN: i64 = 1 << 32;
pub const TIERS: [&str; 3] = ["bronze", "silver", "gold"];

/// A sum board with hourly rounds (schedule `round`) and a league of
/// bronze, silver and gold in cohorts of `size`; `rest` ends its
/// `[board.league]` (promote, demote, idle).
pub fn league_board(id: &str, on: &str, close_after: &str, size: usize, rest: &str) -> String {
    format!(
        "\n[[board]]\nid = \"{id}\"\non = [\"{on}\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n\
         schedules = [{{ name = \"round\", cron = \"0 * * * *\", duration = \"1h\" }}]\nclose_after = \"{close_after}\"\n\
         [board.league]\nrounds = \"round\"\ntiers = [\"bronze\", \"silver\", \"gold\"]\ncohort_size = {size}\n{rest}"
    )
}

/// Sets the tiers hash at `key` as a settlement would have: player `p<i>` in `tier_of(i)`.
pub async fn seed_tiers(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    players: u64,
    tier_of: impl Fn(u64) -> usize,
) {
    let mut seed = redis::cmd("HSET");
    seed.arg(key);
    for p in 0..players {
        seed.arg(format!("p{p}")).arg(tier_of(p));
    }
    let _: i64 = seed.query_async(conn).await.unwrap();
}

/// How many of a cohort move up: a count, or a percentage of its players
/// (rounded down, at least 1).
#[derive(Clone, Copy)]
pub enum Promote {
    Count(usize),
    Percent(usize),
}

/// The rules, written plainly: tiers at the next placement, placement in
/// arrival order, settlement by score, ties as Redis orders a desc board
/// (member bytes descending).
pub struct Model {
    pub size: usize,
    pub promote: Promote,
    pub demote: usize,
    /// `idle = "keep"`: a player of the previous round absent from this one keeps their tier.
    pub keep_idle: bool,
    /// Player -> tier at their next placement.
    pub next: HashMap<String, usize>,
}

/// A round as the model placed it: player -> (tier, cohort n), and the cohorts' sizes.
#[derive(Default, Debug)]
pub struct Round {
    pub placed: BTreeMap<String, (usize, i64)>,
}

impl Model {
    pub fn place(&self, arrivals: &[&str]) -> Round {
        let mut open: HashMap<usize, (i64, usize)> = HashMap::new();
        let mut r = Round::default();
        for p in arrivals {
            let t = self.next.get(*p).copied().unwrap_or(0);
            let o = open.entry(t).or_insert((0, self.size));
            if o.1 >= self.size {
                *o = (o.0 + 1, 0);
            }
            o.1 += 1;
            r.placed.insert(p.to_string(), (t, o.0));
        }
        r
    }

    /// Settles `round` with its scores; `previous` idle players drop a tier.
    /// Returns per cohort id its standings (player, score, zone, next tier).
    pub fn settle(
        &mut self,
        round: &Round,
        scores: &HashMap<String, i64>,
        previous: Option<&Round>,
    ) -> BTreeMap<String, Vec<(String, i64, &'static str, usize)>> {
        let mut cohorts: BTreeMap<(usize, i64), Vec<(String, i64)>> = BTreeMap::new();
        for (p, &(t, n)) in &round.placed {
            cohorts.entry((t, n)).or_default().push((p.clone(), scores[p]));
        }
        let mut out = BTreeMap::new();
        for ((t, n), mut players) in cohorts {
            players.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
            let k = players.len();
            let up = match self.promote {
                Promote::Count(n) => n,
                Promote::Percent(p) => (k * p / 100).max(1),
            }
            .min(k);
            let down = self.demote.min(k - up);
            let mut standings = Vec::new();
            for (i, (p, s)) in players.into_iter().enumerate() {
                let (zone, next) = if i < up && t + 1 < TIERS.len() {
                    ("promote", t + 1)
                } else if i < up {
                    ("stay", t)
                } else if i >= k - down && t > 0 {
                    ("demote", t - 1)
                } else {
                    ("stay", t)
                };
                self.next.insert(p.clone(), next);
                standings.push((p, s, zone, next));
            }
            out.insert(format!("{}-{n}", TIERS[t]), standings);
        }
        for (p, &(t, _)) in previous.map(|r| &r.placed).into_iter().flatten() {
            if !round.placed.contains_key(p) && !self.keep_idle {
                let held = self.next.get(p).copied().unwrap_or(t);
                self.next.insert(p.clone(), held.saturating_sub(1));
            }
        }
        out
    }
}

pub fn round_id(start: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(start).unwrap();
    format!("c:round:{}", t.format("%Y-%m-%dT%H:%M"))
}

/// A hash as a map.
pub async fn hash(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query_async(conn).await.unwrap()
}

/// Waits until `check` holds, or fails with the logs.
pub async fn wait_for<F, Fut>(timeout: Duration, logs: &dyn Fn() -> String, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "not within {timeout:?}\n{}", logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
