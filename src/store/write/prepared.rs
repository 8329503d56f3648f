//! A batch's script calls as they are sent: each tag's events split into
//! calls of bounded size, each call's preconditions (on the batch before,
//! and on the call before it on the same tag), what a batch leaves each tag
//! at (its tails), and which calls a retry sends.

use super::protocol::{build_invocation, Invocation, TagBatch};

/// One script call of a prepared batch.
#[derive(Clone)]
pub(in crate::store) struct Call {
    /// Which of the batch's tag batches its events are from.
    pub(in crate::store) batch: usize,
    pub(in crate::store) base: String,
    pub(in crate::store) inv: Invocation,
    /// How many events it carries.
    pub(in crate::store) n: usize,
    /// Per partition field of the call: whether its precondition is on an
    /// earlier call of the same batch and tag (a tag's events split over
    /// several calls), which always holds once that call has run, rather
    /// than on the batch before (see [`Prepared::after`]).
    pub(in crate::store) chained: Vec<bool>,
}

/// A batch's encoded script calls: each tag's events in calls of at most
/// `max_events` events, a tag's calls one after the other.
#[derive(Clone)]
pub struct Prepared {
    pub(in crate::store) calls: Vec<Call>,
}

/// Encodes a batch's calls. A tag with more than `max_events` events gets
/// several calls, so that no call holds Redis for long (reads get in
/// between); each later call waits, with a precondition, for the offsets
/// of the call before it on the tag, so that they apply in order even when
/// one of them must be sent again.
pub fn prepare(batches: &[TagBatch<'_>], dedupe_ttl_secs: u64, max_events: impl Fn(&str) -> usize) -> Prepared {
    let mut calls: Vec<Call> = Vec::new();
    for (b, batch) in batches.iter().enumerate() {
        let first = calls.len();
        for items in batch.items.chunks(max_events(batch.base).max(1)) {
            let part = TagBatch { base: batch.base, params: batch.params, items: items.to_vec() };
            let mut inv = match part.params.team {
                Some(_) => super::team::build_invocation(&part, dedupe_ttl_secs),
                None => build_invocation(&part, dedupe_ttl_secs),
            };
            let mut chained = vec![false; inv.tails.len()];
            for (f, (field, _)) in inv.tails.iter().enumerate() {
                let earlier = calls[first..].iter().rev().find_map(|c| c.inv.last_offset(field));
                if let Some(last) = earlier {
                    inv.needs[f] = last;
                    chained[f] = true;
                }
            }
            calls.push(Call { batch: b, base: batch.base.to_string(), inv, n: items.len(), chained });
        }
    }
    Prepared { calls }
}

impl Prepared {
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The board tags the calls write to, each once, in call order.
    pub fn bases(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in &self.calls {
            if !out.contains(&c.base) {
                out.push(c.base.clone());
            }
        }
        out
    }

    /// Where this batch leaves each board tag: per tag, each partition
    /// field's last offset, which a batch sent behind it waits for.
    pub fn tails(&self) -> Tails {
        let mut out: Vec<(String, Vec<(String, i64)>)> = Vec::new();
        for c in &self.calls {
            let t = match out.iter().position(|(b, _)| *b == c.base) {
                Some(t) => t,
                None => {
                    out.push((c.base.clone(), Vec::new()));
                    out.len() - 1
                }
            };
            // A tag's later calls carry its later offsets.
            for (field, last) in &c.inv.tails {
                match out[t].1.iter_mut().find(|(g, _)| g == field) {
                    Some(e) => e.1 = *last,
                    None => out[t].1.push((field.clone(), *last)),
                }
            }
        }
        Tails(out)
    }

    /// Lets these calls be sent while the batch that left `before` is still
    /// on its way to Redis: each call then runs only if its tag has recorded
    /// the offsets that batch carries for the same partitions, and otherwise
    /// fails with `STALE` having done nothing (see apply.lua). Without this,
    /// a later batch applied ahead of a failed one would make the failed
    /// one's events look redelivered when it is retried.
    ///
    /// The preconditions stay once that batch has landed: they hold then,
    /// unless the tag lost the offsets it recorded (Redis restarted
    /// without persistence, or failed over to a replica without the
    /// writes), and a call must not run on a tag that lost them.
    pub fn after(&mut self, before: &Tails) {
        for c in &mut self.calls {
            let Some((_, tails)) = before.0.iter().find(|(b, _)| *b == c.base) else { continue };
            for (f, (field, _)) in c.inv.tails.iter().enumerate() {
                if c.chained[f] {
                    continue;
                }
                if let Some((_, last)) = tails.iter().find(|(g, _)| g == field) {
                    c.inv.needs[f] = *last;
                }
            }
        }
    }

    /// The calls to send while `landed` says which have landed: those that
    /// have not, and, before each, the calls of its tag it is chained to
    /// that have (sent again, they change nothing; on a tag that lost its
    /// data they answer `LOST`, as the pending call would).
    pub(in crate::store) fn to_send(&self, landed: &[bool]) -> Vec<usize> {
        let pending = |i: usize| !landed[i];
        (0..self.calls.len())
            .filter(|&i| {
                pending(i)
                    || (i + 1..self.calls.len()).take_while(|&j| self.calls[j].base == self.calls[i].base).any(pending)
            })
            .collect()
    }
}

/// Per board tag, each partition field's last offset in a batch (see [`Prepared::tails`]).
#[derive(Clone, Debug, Default)]
pub struct Tails(Vec<(String, Vec<(String, i64)>)>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::WriteParams;
    use crate::store::write::protocol::tests::{pw, two_event_invocation};
    use crate::store::write::protocol::ApplyItem;

    #[test]
    fn a_call_sent_behind_another_waits_for_its_last_offset_of_each_shared_partition() {
        // Sent behind a batch still in flight, the call waits for that
        // batch's last offset of each partition it shares on the same tag.
        let inv = two_event_invocation();
        let mut next =
            Prepared { calls: vec![Call { batch: 0, base: "lb:{p}".to_string(), inv, n: 2, chained: vec![false; 2] }] };
        let before = Tails(vec![
            ("lb:{other}".to_string(), vec![("t:1".to_string(), 50)]),
            ("lb:{p}".to_string(), vec![("t:1".to_string(), 8), ("t:2".to_string(), 3)]),
        ]);
        let needs = |p: &Prepared| -> Vec<String> { p.calls[0].inv.needs.iter().map(i64::to_string).collect() };
        next.after(&before);
        assert_eq!(needs(&next), ["-1", "8"]);
        // Its own tails: each partition's last offset in the call.
        assert_eq!(next.tails().0, [("lb:{p}".to_string(), vec![("t:0".to_string(), 7), ("t:1".to_string(), 9)])]);
    }

    #[test]
    fn a_tag_with_more_events_than_a_call_takes_gets_calls_chained_on_each_other() {
        let ids: Vec<uuid::Uuid> = (1..=5).map(uuid::Uuid::from_u128).collect();
        let k = vec![pw("all", None)];
        let at = [("t:0", 1), ("t:1", 10), ("t:0", 2), ("t:0", 3), ("t:1", 11)];
        let items = at
            .iter()
            .zip(&ids)
            .map(|(&(field, offset), id)| ApplyItem {
                field,
                offset,
                member: "alice",
                num: 1,
                tie: 0,
                ts: 1,
                event_id: id,
                periods: &k,
                meta: None,
                record_ts: 0,
                values: &[],
                team: None,
            })
            .collect();
        let batch = TagBatch { base: "lb:{p}", params: WriteParams::plain_sum(), items };
        let mut p = prepare(&[batch], 60, |_| 2);
        let needs = |p: &Prepared, i: usize| -> Vec<(String, String)> {
            let inv = &p.calls[i].inv;
            inv.tails.iter().enumerate().map(|(f, (field, _))| (field.clone(), inv.needs[f].to_string())).collect()
        };
        assert_eq!(p.calls.iter().map(|c| c.n).collect::<Vec<_>>(), [2, 2, 1]);
        // Each later call waits for the offsets the calls before it on the tag carry.
        let pair = |f: &str, n: &str| (f.to_string(), n.to_string());
        assert_eq!(needs(&p, 0), [pair("t:0", "-1"), pair("t:1", "-1")]);
        assert_eq!(needs(&p, 1), [pair("t:0", "1")]);
        assert_eq!(needs(&p, 2), [pair("t:1", "10")]);
        // Behind another batch, only the first call's fields wait for it.
        p.after(&Tails(vec![("lb:{p}".to_string(), vec![("t:0".to_string(), 0), ("t:1".to_string(), 9)])]));
        assert_eq!(needs(&p, 0), [pair("t:0", "0"), pair("t:1", "9")]);
        assert_eq!(needs(&p, 1), [pair("t:0", "1")]);
        assert_eq!(needs(&p, 2), [pair("t:1", "10")]);
        // The tag's tails are its last offsets over all its calls.
        assert_eq!(p.tails().0, [("lb:{p}".to_string(), vec![("t:0".to_string(), 3), ("t:1".to_string(), 11)])]);
        // Sent again: a pending call goes with the landed calls of its tag before it.
        assert_eq!(p.to_send(&[true, false, true]), [0, 1]);
        assert_eq!(p.to_send(&[true, true, false]), [0, 1, 2]);
        assert_eq!(p.to_send(&[true, true, true]), Vec::<usize>::new());
    }
}
