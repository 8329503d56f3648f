//! Rank changes (`notify_top = N`) by their definition, for the tests that
//! hold the apply script to a model of them.

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
