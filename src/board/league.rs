//! Leagues: a board's rounds (the periods of one of its schedules or
//! windows) are played in cohorts of one tier; at each round's seal the
//! best of every cohort move up a tier and the worst down. Pure: what a
//! cohort's standings settle to, the zones a read shows, and how cohorts are
//! named and numbered in Redis.
//!
//! A cohort is stored as one number, its code: `tier * COHORT_SPAN + n` for
//! cohort `n` (from 1) of tier `tier` (0 the lowest), the score of its
//! players in the round's cohort zset, so that one `ZRANGE BYSCORE` lists a
//! cohort and one `ZSCORE` finds a player's.

use super::Order;

/// Cohort numbers of one tier and round stay below this.
pub const COHORT_SPAN: i64 = 1 << 32;

/// Players per cohort, lowest and highest.
pub const COHORT_SIZES: std::ops::RangeInclusive<u64> = 2..=1000;
/// Tiers, fewest and most.
pub const TIER_COUNTS: std::ops::RangeInclusive<usize> = 2..=32;

/// How many of a cohort move: a count, or a percentage of the cohort's
/// players at the settlement (rounded down, at least 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    Count(u32),
    Percent(u32),
}

impl Share {
    /// Parses `5` or `"20%"`.
    pub fn parse(text: &str) -> Result<Share, String> {
        let text = text.trim();
        if let Some(p) = text.strip_suffix('%') {
            return match p.trim().parse::<u32>() {
                Ok(p) if (1..=100).contains(&p) => Ok(Share::Percent(p)),
                _ => Err(format!("'{text}' is not a percentage from 1% to 100%")),
            };
        }
        text.parse::<u32>()
            .map(Share::Count)
            .map_err(|_| format!("'{text}' is neither a count nor a percentage like \"20%\""))
    }

    /// How many of `size` players this is.
    pub fn of(self, size: usize) -> usize {
        match self {
            Share::Count(n) => n as usize,
            Share::Percent(p) => (size * p as usize / 100).max(1),
        }
    }

    /// How many of a full cohort of `cohort_size` this is (for the check at load).
    pub fn of_full(self, cohort_size: u64) -> u64 {
        self.of(cohort_size as usize) as u64
    }
}

/// What a player placed in the previous round who played nothing in this
/// one is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idle {
    Keep,
    Demote,
}

/// A board's `[board.league]`, as config validation leaves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct League {
    /// The schedule or window whose periods are the rounds.
    pub rounds: String,
    /// Tier names, lowest first.
    pub tiers: Vec<String>,
    pub cohort_size: u32,
    pub promote: Share,
    pub demote: Share,
    pub idle: Idle,
}

/// Where a player stands in a cohort: what the settlement would do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zone {
    Promote,
    Stay,
    Demote,
}

impl Zone {
    pub fn as_str(self) -> &'static str {
        match self {
            Zone::Promote => "promote",
            Zone::Stay => "stay",
            Zone::Demote => "demote",
        }
    }

    /// The zone's one-letter code in Redis (the settled results).
    pub fn code(self) -> char {
        match self {
            Zone::Promote => 'p',
            Zone::Stay => 's',
            Zone::Demote => 'd',
        }
    }

    pub fn from_code(c: char) -> Option<Zone> {
        match c {
            'p' => Some(Zone::Promote),
            's' => Some(Zone::Stay),
            'd' => Some(Zone::Demote),
            _ => None,
        }
    }
}

/// One ranked player's result in a settled cohort.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    pub rank: usize,
    pub member: String,
    /// The stored score.
    pub stored: i64,
    pub zone: Zone,
    /// The tier the player is placed in next round.
    pub next_tier: usize,
}

impl League {
    pub fn tier_index(&self, name: &str) -> Option<usize> {
        self.tiers.iter().position(|t| t == name)
    }

    /// The cohort id `<tier>-<n>` of a code, if the code names a tier.
    pub fn cohort_id(&self, code: i64) -> Option<String> {
        let (tier, n) = split_code(code)?;
        Some(format!("{}-{n}", self.tiers.get(tier)?))
    }

    /// The code of a cohort id `<tier>-<n>`.
    pub fn cohort_code(&self, id: &str) -> Option<i64> {
        let (tier, n) = id.rsplit_once('-')?;
        let n: i64 = n.parse().ok().filter(|n| (1..COHORT_SPAN).contains(n))?;
        Some(self.tier_index(tier)? as i64 * COHORT_SPAN + n)
    }

    /// The zone of the player at `rank` (from 1) of `size` ranked players
    /// in a cohort of `tier`. Promotion wins where a cohort is too small for
    /// both; the top tier has no promotion zone and the lowest no demotion zone.
    pub fn zone(&self, tier: usize, rank: usize, size: usize) -> Zone {
        let up = self.promote.of(size).min(size);
        let down = self.demote.of(size).min(size - up);
        if rank <= up {
            if tier + 1 < self.tiers.len() {
                Zone::Promote
            } else {
                Zone::Stay
            }
        } else if rank > size - down && tier > 0 {
            Zone::Demote
        } else {
            Zone::Stay
        }
    }

    /// The tier a zone leads to from `tier`.
    pub fn next_tier(&self, tier: usize, zone: Zone) -> usize {
        match zone {
            Zone::Promote => (tier + 1).min(self.tiers.len() - 1),
            Zone::Stay => tier,
            Zone::Demote => tier.saturating_sub(1),
        }
    }

    /// A cohort of `tier` settled: its ranked players as (stored score,
    /// member), in any order, ranked by the board's order (ordinal, member
    /// bytes last, so exactly the counts move).
    pub fn settle(&self, order: Order, tier: usize, mut players: Vec<(i64, String)>) -> Vec<Settled> {
        players.sort_by(|a, b| order.entries((a.0, &a.1), (b.0, &b.1)));
        let stored: Vec<i64> = players.iter().map(|p| p.0).collect();
        let mut settled = self.settle_ranked(tier, players.into_iter().map(|p| p.1).collect());
        for (s, v) in settled.iter_mut().zip(stored) {
            s.stored = v;
        }
        settled
    }

    /// A cohort of `tier` settled from its players already in board order
    /// (a board with columns orders them by their members' bytes); `stored`
    /// is 0.
    pub fn settle_ranked(&self, tier: usize, players: Vec<String>) -> Vec<Settled> {
        let size = players.len();
        players
            .into_iter()
            .enumerate()
            .map(|(i, member)| {
                let zone = self.zone(tier, i + 1, size);
                Settled { rank: i + 1, member, stored: 0, zone, next_tier: self.next_tier(tier, zone) }
            })
            .collect()
    }

    /// The tier an idle player (placed last round, nothing this round) is
    /// given, from the tier they held for this round.
    pub fn idle_tier(&self, held: usize) -> usize {
        match self.idle {
            Idle::Keep => held,
            Idle::Demote => held.saturating_sub(1),
        }
    }
}

impl Settled {
    /// The result as the round keeps it: `<rank>:<zone>:<next tier>`.
    pub fn result_text(&self) -> String {
        format!("{}:{}:{}", self.rank, self.zone.code(), self.next_tier)
    }
}

/// (rank, zone, next tier) of [`Settled::result_text`].
pub fn parse_result(text: &str) -> Option<(usize, Zone, usize)> {
    let mut it = text.split(':');
    let rank = it.next()?.parse().ok()?;
    let zone = Zone::from_code(it.next()?.chars().next()?)?;
    Some((rank, zone, it.next()?.parse().ok()?))
}

/// (tier, n) of a cohort code.
pub fn split_code(code: i64) -> Option<(usize, i64)> {
    if code <= 0 {
        return None;
    }
    let (tier, n) = (code / COHORT_SPAN, code % COHORT_SPAN);
    (n >= 1).then_some((tier as usize, n))
}

/// The code of cohort `n` of `tier`.
pub fn code(tier: usize, n: i64) -> i64 {
    tier as i64 * COHORT_SPAN + n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn league(promote: Share, demote: Share) -> League {
        League {
            rounds: "week".into(),
            tiers: vec!["bronze".into(), "silver".into(), "gold".into()],
            cohort_size: 10,
            promote,
            demote,
            idle: Idle::Demote,
        }
    }

    #[test]
    fn shares_parse_and_round_down_to_at_least_one() {
        assert_eq!(Share::parse("5"), Ok(Share::Count(5)));
        assert_eq!(Share::parse("20%"), Ok(Share::Percent(20)));
        assert!(Share::parse("0%").is_err() && Share::parse("x").is_err() && Share::parse("101%").is_err());
        assert_eq!(Share::Percent(20).of(9), 1);
        assert_eq!(Share::Percent(20).of(3), 1);
        assert_eq!(Share::Percent(20).of(30), 6);
    }

    #[test]
    fn cohort_ids_and_codes_round_trip() {
        let l = league(Share::Count(1), Share::Count(1));
        let c = l.cohort_code("silver-12").unwrap();
        assert_eq!(c, COHORT_SPAN + 12);
        assert_eq!(l.cohort_id(c).as_deref(), Some("silver-12"));
        assert_eq!(l.cohort_code("platinum-1"), None);
        assert_eq!(l.cohort_code("gold-0"), None);
        assert_eq!(split_code(code(2, 3)), Some((2, 3)));
    }

    #[test]
    fn settlement_moves_exactly_the_counts_with_ties_by_member() {
        let l = league(Share::Count(2), Share::Count(2));
        let players = vec![(5, "a".into()), (9, "b".into()), (5, "c".into()), (1, "d".into()), (5, "e".into())];
        let s = l.settle(Order::Desc, 1, players);
        let names: Vec<_> = s.iter().map(|p| (p.member.as_str(), p.zone, p.next_tier)).collect();
        // Ties at 5: member bytes descending on desc boards (e, c, a).
        assert_eq!(
            names,
            vec![
                ("b", Zone::Promote, 2),
                ("e", Zone::Promote, 2),
                ("c", Zone::Stay, 1),
                ("a", Zone::Demote, 0),
                ("d", Zone::Demote, 0),
            ]
        );
    }

    #[test]
    fn top_and_bottom_tiers_keep_their_players_and_promotion_wins_small_cohorts() {
        let l = league(Share::Count(2), Share::Count(2));
        let top = l.settle(Order::Desc, 2, vec![(3, "a".into()), (2, "b".into()), (1, "c".into())]);
        assert_eq!(top.iter().map(|p| p.next_tier).collect::<Vec<_>>(), vec![2, 2, 1]);
        assert_eq!(top[0].zone, Zone::Stay);
        let low = l.settle(Order::Asc, 0, vec![(3, "a".into()), (2, "b".into()), (1, "c".into())]);
        assert_eq!(
            low.iter().map(|p| (p.member.as_str(), p.next_tier)).collect::<Vec<_>>(),
            vec![("c", 1), ("b", 1), ("a", 0)]
        );
        // One player: promoted, not also demoted.
        assert_eq!(l.settle(Order::Desc, 1, vec![(1, "x".into())])[0].zone, Zone::Promote);
    }

    #[test]
    fn results_read_back() {
        let s = Settled { rank: 3, member: "a".into(), stored: 1, zone: Zone::Demote, next_tier: 0 };
        assert_eq!(parse_result(&s.result_text()), Some((3, Zone::Demote, 0)));
        assert_eq!(parse_result("x"), None);
    }

    #[test]
    fn idle_players_keep_or_drop_one_tier() {
        let mut l = league(Share::Count(1), Share::Count(1));
        assert_eq!((l.idle_tier(2), l.idle_tier(0)), (1, 0));
        l.idle = Idle::Keep;
        assert_eq!(l.idle_tier(2), 2);
    }
}
