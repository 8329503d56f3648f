//! Rank changes (`notify_top = N`) by their definition, for the tests that
//! hold the apply script to a model of them.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

/// One event's move: (old rank inside the top N, `None` outside it; new
/// rank; the players passed, nearest first, at most 10; the player pushed
/// out of the top N).
pub type RankMove = (Option<u32>, u32, Vec<String>, Option<String>);

/// The move of `member`'s event, given the players in board order before
/// and after it; `None` when the event moved its player neither into nor
/// up inside the top `n`.
pub fn rank_move(before: &[String], after: &[String], member: &str, n: u32) -> Option<RankMove> {
    let rank = |list: &[String], m: &str| list.iter().position(|x| x == m).map(|i| i as u32 + 1);
    let (was, now) = (rank(before, member), rank(after, member).expect("the mover is on the board"));
    let old_rank = was.filter(|&r| r <= n);
    if now > n || old_rank.is_some_and(|r| now >= r) {
        return None;
    }
    let mover_before = was.unwrap_or(u32::MAX);
    let mut passed: Vec<(u32, String)> = before
        .iter()
        .enumerate()
        .map(|(i, m)| (i as u32 + 1, m))
        .filter(|(r, m)| *r <= n && *r < mover_before && m.as_str() != member)
        .map(|(_, m)| (rank(after, m).expect("a player passed stays"), m.clone()))
        .filter(|(r, _)| *r > now)
        .collect();
    passed.sort();
    let pushed_out = passed.iter().find(|(r, _)| *r > n).map(|(_, m)| m.clone());
    Some((old_rank, now, passed.into_iter().take(10).map(|(_, m)| m).collect(), pushed_out))
}

/// What each delivery of a record answers, as the apply script remembers
/// it: a record at or below the last offset applied is a redelivery and
/// answers its first delivery's moves again; a new offset of an event id
/// seen before (a producer's retry) answers none.
pub struct Deliveries<M> {
    seen: HashSet<Uuid>,
    last_offset: i64,
    by_offset: HashMap<i64, Vec<M>>,
}

impl<M> Default for Deliveries<M> {
    fn default() -> Self {
        Deliveries { seen: HashSet::new(), last_offset: i64::MIN, by_offset: HashMap::new() }
    }
}

impl<M: Clone> Deliveries<M> {
    /// The answer of the record at `offset` of event `id` when it is not
    /// applied (a redelivery, a retry); `None`: apply it, then [`Self::record`].
    pub fn answered(&mut self, offset: i64, id: Uuid) -> Option<Vec<M>> {
        if offset <= self.last_offset {
            return Some(self.by_offset.get(&offset).cloned().unwrap_or_default());
        }
        self.last_offset = offset;
        (!self.seen.insert(id)).then(Vec::new)
    }

    /// The moves the record at `offset` made when it was applied.
    pub fn record(&mut self, offset: i64, moves: &[M]) {
        self.by_offset.insert(offset, moves.to_vec());
    }
}
