//! Offset bookkeeping for one batch, kept apart from Kafka so it is tested
//! without a broker.
//!
//! A batch is stored only when every record in it has a final outcome, so the
//! offset to store for a partition is the batch's highest offset of that
//! partition plus one: Kafka's committed offset names the *next* record to
//! read. `rdkafka`'s `store_offsets` takes the list as is, so the +1 is made
//! here and nowhere else.

/// The highest offset seen per topic-partition in one batch.
#[derive(Debug, Default)]
pub struct BatchOffsets {
    /// (topic, partition, highest offset); few entries, so a vector.
    entries: Vec<(String, i32, i64)>,
}

impl BatchOffsets {
    /// Records that `offset` of `topic`/`partition` is in the batch and
    /// returns the partition's index in the batch.
    pub fn note(&mut self, topic: &str, partition: i32, offset: i64) -> usize {
        if let Some(i) = self.entries.iter().position(|(t, p, _)| *p == partition && t == topic) {
            let e = &mut self.entries[i];
            e.2 = e.2.max(offset);
            i
        } else {
            self.entries.push((topic.to_string(), partition, offset));
            self.entries.len() - 1
        }
    }

    /// The index [`note`](Self::note) gave `topic`/`partition`.
    ///
    /// # Panics
    /// If the partition was never noted.
    pub fn index_of(&self, topic: &str, partition: i32) -> usize {
        self.entries.iter().position(|(t, p, _)| *p == partition && t == topic).expect("a noted partition")
    }

    pub fn topic_partition(&self, index: usize) -> (&str, i32) {
        let (t, p, _) = &self.entries[index];
        (t, *p)
    }

    /// What to store once the batch is final: (topic, partition, last + 1).
    pub fn to_store(&self) -> impl Iterator<Item = (&str, i32, i64)> {
        self.entries.iter().map(|(t, p, o)| (t.as_str(), *p, o + 1))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_offset_is_the_last_final_offset_plus_one_per_partition() {
        let mut b = BatchOffsets::default();
        assert_eq!(b.note("scores", 0, 10), 0);
        assert_eq!(b.note("scores", 1, 4), 1);
        assert_eq!(b.note("scores", 0, 11), 0);
        assert_eq!(b.note("other", 0, 99), 2);
        let stored: Vec<_> = b.to_store().collect();
        assert_eq!(stored, vec![("scores", 0, 12), ("scores", 1, 5), ("other", 0, 100)]);
    }
}
