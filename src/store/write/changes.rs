//! Rank changes as the apply script reports them (boards with `notify_top`,
//! see `scripts/apply/changes.lua`): decoded from its MessagePack, pure, so
//! it is unit tested.

use rmp::decode;

/// One event's move up into or inside the top N of one period, decided in
/// the event's apply call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankMove {
    /// The event, by its index in its tag batch (0-based).
    pub event: usize,
    /// The period id (`d:2026-08-14`, `all`).
    pub period: String,
    /// Ordinal; `None`: the player was outside the top N.
    pub old_rank: Option<u32>,
    pub new_rank: u32,
    /// The player's stored score after the event (see `score::Packing::decode`).
    pub stored: i64,
    /// On a board ranked by several columns, the player's stored row after
    /// the event instead (see `board::columns`; `stored` is 0).
    pub row: Option<Vec<u8>>,
    /// The players passed: above the mover inside the top N before, below
    /// it after, nearest to its new rank first (at most 10).
    pub passed: Vec<String>,
    /// The player who fell out of the top N because of the move.
    pub pushed_out: Option<String>,
}

/// The changes string of one call's reply, for a call of `n` events. `None`
/// if it is not what the script writes.
pub(in crate::store) fn decode(mut rd: &[u8], n: usize) -> Option<Vec<RankMove>> {
    let rd = &mut rd;
    let count = decode::read_array_len(rd).ok()?;
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if decode::read_array_len(rd).ok()? != 7 {
            return None;
        }
        let i: usize = decode::read_int(rd).ok()?;
        let period = string(rd)?;
        let old_rank: u32 = decode::read_int(rd).ok()?;
        let new_rank: u32 = decode::read_int(rd).ok()?;
        let (stored, row) = match rd.first()? {
            0xa0..=0xbf | 0xd9..=0xdb => (0, Some(bytes(rd)?)),
            _ => (decode::read_int(rd).ok()?, None),
        };
        let pushed_out = Some(string(rd)?).filter(|p| !p.is_empty());
        let passed = list(rd)?;
        if !(1..=n).contains(&i) || new_rank == 0 {
            return None;
        }
        let old_rank = (old_rank > 0).then_some(old_rank);
        out.push(RankMove { event: i - 1, period, old_rank, new_rank, stored, row, passed, pushed_out });
    }
    rd.is_empty().then_some(out)
}

/// A string's bytes as they are.
fn bytes(rd: &mut &[u8]) -> Option<Vec<u8>> {
    let len = decode::read_str_len(rd).ok()? as usize;
    let bytes = rd.get(..len)?.to_vec();
    *rd = &rd[len..];
    Some(bytes)
}

fn string(rd: &mut &[u8]) -> Option<String> {
    String::from_utf8(bytes(rd)?).ok()
}

/// An array of strings (`cmsgpack` writes an empty Lua table as an empty array).
fn list(rd: &mut &[u8]) -> Option<Vec<String>> {
    let marker = *rd.first()?;
    let len = if marker == 0x80 {
        *rd = &rd[1..]; // an empty map
        0
    } else {
        decode::read_array_len(rd).ok()?
    };
    (0..len).map(|_| string(rd)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conn::msgpack::{array_len, int, str};

    fn change(buf: &mut Vec<u8>, i: i64, old: i64, new: i64, pushed: &str, passed: &[&str]) {
        array_len(buf, 7);
        int(buf, i);
        str(buf, "d:2026-08-14");
        int(buf, old);
        int(buf, new);
        int(buf, 4_500);
        str(buf, pushed);
        array_len(buf, passed.len());
        for p in passed {
            str(buf, p);
        }
    }

    #[test]
    fn a_calls_changes_name_their_event_from_zero_and_an_empty_place_is_none() {
        let mut buf = Vec::new();
        array_len(&mut buf, 2);
        change(&mut buf, 1, 0, 5, "eve", &["eve"]);
        change(&mut buf, 3, 4, 2, "", &["bob", "cat"]);
        let got = decode(&buf, 3).unwrap();
        assert_eq!(
            got[0],
            RankMove {
                event: 0,
                period: "d:2026-08-14".into(),
                old_rank: None,
                new_rank: 5,
                stored: 4_500,
                row: None,
                passed: vec!["eve".into()],
                pushed_out: Some("eve".into()),
            }
        );
        assert_eq!((got[1].event, got[1].old_rank, got[1].pushed_out.as_deref()), (2, Some(4), None));
        assert_eq!(got[1].passed, ["bob", "cat"]);
        // An event out of the call, or bytes left over: not the script's answer.
        assert!(decode(&buf, 2).is_none());
        let mut longer = buf.clone();
        longer.push(0xc0);
        assert!(decode(&longer, 3).is_none());
        // A row (bytes, any of them) where a stored score would be.
        let mut rows = Vec::new();
        array_len(&mut rows, 1);
        array_len(&mut rows, 7);
        int(&mut rows, 1);
        str(&mut rows, "all");
        int(&mut rows, 0);
        int(&mut rows, 1);
        crate::store::conn::msgpack::bytes_as_str(&mut rows, &[1, 0, 0xff, 7]);
        str(&mut rows, "");
        array_len(&mut rows, 0);
        let got = decode(&rows, 1).unwrap();
        assert_eq!((got[0].stored, got[0].row.as_deref()), (0, Some(&[1u8, 0, 0xff, 7][..])));
    }
}
