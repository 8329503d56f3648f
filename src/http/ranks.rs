//! Ranks from the store's read replies: the three rank policies of a run of
//! entries, and the entries of a listing (a page, around-me, a friends set).
//! Pure: no Redis here.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::target::RankPolicy;
use crate::board::Board;
use crate::store::Listing;

/// The three ranks of one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ranks {
    pub ordinal: i64,
    pub competition: i64,
    pub dense: i64,
}

impl Ranks {
    pub fn under(&self, policy: RankPolicy) -> i64 {
        match policy {
            RankPolicy::Ordinal => self.ordinal,
            RankPolicy::Competition => self.competition,
            RankPolicy::Dense => self.dense,
        }
    }
}

/// Ranks of a contiguous run of entries in board order, from the first
/// entry's position and the counts of strictly better members and values.
/// Within the run, an entry whose value equals the previous one shares its
/// competition and dense rank; otherwise competition rank is its ordinal and
/// dense rank is one more than the previous entry's.
pub(super) fn ranks_of_run(start: i64, better: i64, dense_better: i64, values: &[i64]) -> Vec<Ranks> {
    let mut out: Vec<Ranks> = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let ordinal = start + i as i64 + 1;
        let r = match out.last() {
            None => ranks_at(start + i as i64, better, dense_better),
            Some(prev) if values[i - 1] == *v => Ranks { ordinal, ..*prev },
            Some(prev) => Ranks { ordinal, competition: ordinal, dense: prev.dense + 1 },
        };
        out.push(r);
    }
    out
}

/// The ranks of one entry alone, from its position and the counts of
/// strictly better members and values.
pub(super) fn ranks_at(position: i64, better: i64, dense_better: i64) -> Ranks {
    Ranks { ordinal: position + 1, competition: better + 1, dense: dense_better + 1 }
}

/// Percentile of a player among `total` (themselves counted) with `better`
/// players strictly better: the share of the board at or below them.
pub(super) fn percentile(total: i64, better: i64) -> f64 {
    let p = 100.0 * (total - better) as f64 / total.max(1) as f64;
    (p * 100.0).round() / 100.0
}

/// An entry's metadata as the store answers it: the JSON object it was
/// stored as, passed on as it is (it was written compact by rankflow
/// itself), not parsed and written again.
pub(super) fn meta_of(raw: Option<String>) -> Option<Box<RawValue>> {
    RawValue::from_string(raw?).ok()
}

/// One entry of a listing.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub member: String,
    pub stored: i64,
    pub value: i64,
    pub ranks: Ranks,
    /// The entry's metadata, on boards that keep it.
    pub meta: Option<Box<RawValue>>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        (&self.member, self.stored, self.value, self.ranks, self.meta.as_ref().map(|m| m.get()))
            == (&other.member, other.stored, other.value, other.ranks, other.meta.as_ref().map(|m| m.get()))
    }
}

/// An entry as a read answers it.
#[derive(Serialize)]
pub(super) struct EntryJson<'a> {
    pub rank: i64,
    pub player_id: &'a str,
    pub score: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<&'a RawValue>,
}

impl Entry {
    pub fn json(&self, policy: RankPolicy) -> EntryJson<'_> {
        EntryJson {
            rank: self.ranks.under(policy),
            player_id: &self.member,
            score: self.value,
            meta: self.meta.as_deref(),
        }
    }
}

/// A listing's answer: its fields (board, period, total, cursors, ...) and its entries.
#[derive(Serialize)]
pub(super) struct ListingJson<'a> {
    #[serde(flatten)]
    pub head: Value,
    pub entries: Vec<EntryJson<'a>>,
}

/// A listing's entries, ranked from its first entry's position and the
/// members and distinct values strictly better than it.
pub(super) fn listing(board: &Board, listing: Listing) -> (i64, Vec<Entry>) {
    let values: Vec<i64> = listing.rows.iter().map(|r| board.packing().decode(r.stored)).collect();
    let ranks = ranks_of_run(listing.start, listing.better, listing.dense_better, &values);
    let entries = listing
        .rows
        .into_iter()
        .zip(values)
        .zip(ranks)
        .map(|((r, value), ranks)| Entry { member: r.member, stored: r.stored, value, ranks, meta: meta_of(r.meta) })
        .collect();
    (listing.total, entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_fixture_ranks_three_ways() {
        // carol 100, bob 100, alice 90 in descending board order.
        let r = ranks_of_run(0, 0, 0, &[100, 100, 90]);
        let triple: Vec<(i64, i64, i64)> = r.iter().map(|r| (r.ordinal, r.competition, r.dense)).collect();
        assert_eq!(triple, [(1, 1, 1), (2, 1, 1), (3, 3, 2)]);
    }

    #[test]
    fn a_page_starting_inside_a_tie_continues_its_ranks() {
        // Page from position 5: four members are strictly better, in two distinct values.
        let r = ranks_of_run(5, 4, 2, &[50, 50, 40, 30, 30]);
        let triple: Vec<(i64, i64, i64)> = r.iter().map(|r| (r.ordinal, r.competition, r.dense)).collect();
        assert_eq!(triple, [(6, 5, 3), (7, 5, 3), (8, 8, 4), (9, 9, 5), (10, 9, 5)]);
    }

    #[test]
    fn percentiles_count_the_player_among_the_total() {
        assert_eq!(percentile(4, 0), 100.0);
        assert_eq!(percentile(4, 3), 25.0);
        assert_eq!(percentile(3, 1), 66.67);
        assert_eq!(percentile(0, 0), 0.0);
    }
}
