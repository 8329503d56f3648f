//! The dedupe markers' encoding, the part of their layout that the worker
//! computes: what a marker is (a bijection of the event id, so that its
//! first bytes are uniform whatever kind of UUID producers use) and which
//! bucket of a marker hash holds it. `scripts/lib/markers.lua` keeps the
//! buckets in Redis; this module is the same rule in Rust, for the worker
//! and for tests that look a marker up. Pure; it never touches Redis.
//!
//! A tag's marker hash (one per `dedupe_ttl` of Redis's clock, see
//! [`crate::keys::dedupe_hash_key`]) holds its markers in buckets: the field
//! `<b>` (decimal) is the concatenation of bucket `b`'s 12-byte markers, and
//! the fields `level`, `split` and `count` say how the buckets have grown.
//! They grow by linear hashing: a marker whose first four bytes read as `h`
//! (big endian) is in bucket `h mod 2^level`, or `h mod 2^(level + 1)` when
//! that is below `split`; once `count` passes [`LOAD`] markers per bucket,
//! bucket `split` is split in two. A marker costs its 12 bytes and a share
//! of its bucket's field, where a field per marker cost Redis about 83
//! bytes.

use uuid::Uuid;

/// The mean number of markers per bucket past which a bucket is split
/// (`Const.MARKER_LOAD` in the scripts, made from this one).
pub const LOAD: u64 = 48;

/// A marker's length in bytes (the same constant as `BYTES` in
/// `scripts/lib/markers.lua`, as `Const.MARKER_BYTES`).
pub const BYTES: usize = 12;

/// A dedupe marker: the first [`BYTES`] bytes of an event id through a
/// bijection.
pub type Marker = [u8; BYTES];

/// The marker of an event id: its 16 bytes through a two-round Feistel
/// network, a bijection that spreads ids differing in any bits over the
/// first four bytes, which pick the bucket (time-ordered ids, UUID v7,
/// start with the same bytes for a millisecond; their markers do not),
/// cut to its first 12 bytes: the second half's whole mix and four bytes
/// of the first.
///
/// Two ids with the same first eight bytes (the same millisecond and
/// counter of a UUID v7, or ids that differ only in their last eight bytes)
/// never share a marker: the first eight bytes of the marker are then a
/// bijection of the last eight of the id. Any other two ids share one with
/// a chance of about 2^-96, as two random 96-bit strings would: a tag
/// holding 10^10 markers at once would mistake a new event for a retry
/// about once in 10^19 events.
pub fn marker(id: &Uuid) -> Marker {
    let (hi, lo) = id.as_u64_pair();
    let lo = lo ^ mix(hi);
    let hi = hi ^ mix(lo);
    let mut out = [0u8; BYTES];
    out[..8].copy_from_slice(&hi.to_be_bytes());
    out[8..].copy_from_slice(&lo.to_be_bytes()[..BYTES - 8]);
    out
}

/// splitmix64's finaliser: every input bit moves about half the output bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How a marker hash's buckets have grown: its `level` and `split` fields
/// (both 0 in a hash that has none yet: one bucket, `0`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Growth {
    pub level: u32,
    pub split: u64,
}

impl Growth {
    /// The bucket that holds `marker`.
    pub fn bucket(&self, marker: &Marker) -> u64 {
        let h = u64::from(u32::from_be_bytes(marker[..4].try_into().expect("4 bytes")));
        let size = 1u64 << self.level;
        let b = h % size;
        if b < self.split {
            h % (2 * size)
        } else {
            b
        }
    }

    /// How many buckets there are.
    pub fn buckets(&self) -> u64 {
        (1u64 << self.level) + self.split
    }
}

/// Whether a bucket's value (concatenated markers) holds `marker`.
pub fn bucket_holds(bucket: &[u8], marker: &Marker) -> bool {
    bucket.chunks_exact(BYTES).any(|m| m == marker)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ids_that_share_their_first_eight_bytes_never_share_a_marker(
            hi in any::<u64>(), a in any::<u64>(), b in any::<u64>(),
        ) {
            prop_assume!(a != b);
            prop_assert_ne!(marker(&Uuid::from_u64_pair(hi, a)), marker(&Uuid::from_u64_pair(hi, b)));
        }
    }

    #[test]
    fn time_ordered_ids_spread_evenly_over_buckets() {
        // UUID v7-like ids: one millisecond's timestamp, a counter in the
        // next bytes, so their own first four bytes are all the same.
        let g = Growth { level: 8, split: 0 };
        let mut per = vec![0u32; g.buckets() as usize];
        let n = 256 * 200;
        for i in 0..n {
            let id = Uuid::from_u128((0x0190_0000_0000_7000u128 << 64) | (i as u128) << 16);
            per[g.bucket(&marker(&id)) as usize] += 1;
        }
        let (lo, hi) = (per.iter().min().unwrap(), per.iter().max().unwrap());
        assert!(*lo > 140 && *hi < 260, "200 per bucket expected, got {lo} to {hi}");
    }

    #[test]
    fn a_split_bucket_keeps_its_markers_or_moves_them_to_its_new_twin() {
        let before = Growth { level: 3, split: 2 };
        let after = Growth { level: 3, split: 3 };
        for i in 0..10_000u128 {
            let m = marker(&Uuid::from_u128(i));
            let (b, a) = (before.bucket(&m), after.bucket(&m));
            if b == 2 {
                assert!(a == 2 || a == 2 + 8, "bucket 2 splits into 2 and 10, not {a}");
            } else {
                assert_eq!(a, b, "only the split bucket's markers move");
            }
            assert!(a < after.buckets());
        }
        // A full round of splits doubles the buckets: level 4, split 0.
        let next = Growth { level: 4, split: 0 };
        let last = Growth { level: 3, split: 7 };
        for i in 0..1000u128 {
            let m = marker(&Uuid::from_u128(i));
            let b = last.bucket(&m);
            assert!(next.bucket(&m) == b || (b == 7 && next.bucket(&m) == 15));
        }
    }

    #[test]
    fn a_bucket_holds_only_whole_markers() {
        let a = marker(&Uuid::from_u128(1));
        let b = marker(&Uuid::from_u128(2));
        let bucket: Vec<u8> = [a, b].concat();
        assert!(bucket_holds(&bucket, &a) && bucket_holds(&bucket, &b));
        // The bytes of a marker that straddles two stored ones are no marker.
        let mut straddle = [0u8; BYTES];
        straddle[..6].copy_from_slice(&a[6..]);
        straddle[6..].copy_from_slice(&b[..6]);
        assert!(!bucket_holds(&bucket, &straddle));
    }
}
