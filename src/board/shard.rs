//! Sharded boards (`shards = N`): which shard holds a player's entries.
//!
//! A player's shard is FNV-1a (64-bit) of the `player_id` bytes, modulo
//! `N`: stable across versions, platforms and restarts (it decides key
//! names, so it must never change), and spread evenly by any player ids.

/// The shard, `0..shards`, of a player on a board with `shards` shards.
pub fn shard_of(player: &str, shards: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in player.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(shards.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fnv1a_and_never_changes() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; of "" the offset basis.
        assert_eq!(shard_of("a", u32::MAX), (0xaf63_dc4c_8601_ec8c_u64 % u64::from(u32::MAX)) as u32);
        assert_eq!(shard_of("", 7), (0xcbf2_9ce4_8422_2325_u64 % 7) as u32);
        assert_eq!(shard_of("player-1", 1), 0);
    }

    #[test]
    fn players_spread_evenly_over_the_shards() {
        let mut counts = [0u32; 8];
        for i in 0..80_000 {
            counts[shard_of(&format!("p{i}"), 8) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }
}
