//! How many events one apply call carries, per board tag: as many as fit in
//! `worker.max_call_time` at the Redis time per event measured on that tag
//! (each call's script reports its own time), at most
//! `worker.max_events_per_call`. A call holds Redis about `max_call_time`
//! at most, so a read on the primary waits about one call, whatever the
//! tag's boards cost per event.
//!
//! Only calls of at least half the tag's limit move its measure as they
//! are. Every call also costs Redis a share that does not grow with its
//! events, so a call of a few events measures mostly that share: a trickle
//! of single events (live play between bursts) would otherwise shrink the
//! next burst's calls to a handful of events each. A smaller call of two
//! events or more counts only when it held Redis longer than
//! `max_call_time`, and then as though it carried half the limit: the tag's
//! calls still shrink when its events come in small calls that cost too
//! much, and a stall does not count as the time of every event. A call of
//! one event never counts: it cannot be split, and its time is the call's
//! own share and whatever held Redis's thread (on a busy host, one-event
//! calls that take a few hundred microseconds alone were seen to take ten
//! milliseconds, call after call).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Weight of the newest call in a tag's measured time per event.
const NEWEST: f64 = 0.2;

/// Per board tag, the measured Redis time per event and the call size it gives.
#[derive(Clone, Debug)]
pub struct CallSizer {
    /// Microseconds a call may hold Redis; `None`: calls are sized by the cap alone.
    budget_us: Option<f64>,
    /// The hard cap, `max_events_per_call`.
    cap: usize,
    per_event_us: Arc<Mutex<HashMap<String, f64>>>,
}

impl CallSizer {
    pub fn new(max_call_time: Option<Duration>, cap: usize) -> CallSizer {
        CallSizer {
            budget_us: max_call_time.map(|d| d.as_secs_f64() * 1e6),
            cap: cap.max(1),
            per_event_us: Arc::default(),
        }
    }

    /// The most events the next call on tag `base` carries.
    pub fn limit(&self, base: &str) -> usize {
        let per = self.per_event_us.lock().unwrap_or_else(|e| e.into_inner()).get(base).copied();
        self.fit(per)
    }

    /// How long a call of `events` events on tag `base` is expected to
    /// hold Redis: zero until a call has measured the tag.
    pub fn expected(&self, base: &str, events: usize) -> Duration {
        let per = self.per_event_us.lock().unwrap_or_else(|e| e.into_inner()).get(base).copied();
        Duration::from_secs_f64(per.unwrap_or(0.0).max(0.0) * events as f64 / 1e6)
    }

    /// How many events fit in the budget at `per` µs each (unmeasured: the
    /// cap, until the first call says what the tag costs).
    fn fit(&self, per: Option<f64>) -> usize {
        match (self.budget_us, per) {
            (Some(budget), Some(per)) => ((budget / per.max(0.01)) as usize).clamp(1, self.cap),
            _ => self.cap,
        }
    }

    /// A call of `events` events on `base` held Redis `us` microseconds.
    /// Returns the tag's new limit.
    pub fn observe(&self, base: &str, events: usize, us: i64) -> usize {
        let mut map = self.per_event_us.lock().unwrap_or_else(|e| e.into_inner());
        let limit = self.fit(map.get(base).copied());
        let over_budget = self.budget_us.is_some_and(|budget| us as f64 > budget);
        let counted = match events {
            n if 2 * n >= limit => n,
            n if n > 1 && over_budget => limit.div_ceil(2),
            _ => 0,
        };
        if events > 0 && counted > 0 && us >= 0 {
            let sample = us as f64 / counted as f64;
            let per = map.entry(base.to_string()).or_insert(sample);
            *per = (1.0 - NEWEST) * *per + NEWEST * sample;
        }
        self.fit(map.get(base).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_costlier_tag_gets_smaller_calls_within_the_cap() {
        let s = CallSizer::new(Some(Duration::from_millis(10)), 1000);
        assert_eq!(s.limit("a"), 1000, "unmeasured: the cap");
        // 5 µs per event: 2,000 would fit, the cap is 1,000.
        assert_eq!(s.observe("a", 1000, 5_000), 1000);
        // 100 µs per event: 100 fit in 10 ms.
        assert_eq!(s.observe("b", 1000, 100_000), 100);
        // It moves with what the calls measure, not at once.
        let after = s.observe("b", 100, 50_000);
        assert!(after < 100 && after > 20, "{after}");
        // Never below one event.
        assert_eq!(s.observe("c", 1000, 1_000_000_000), 1);
        assert_eq!(CallSizer::new(None, 500).observe("a", 500, 10_000_000), 500);
    }

    #[test]
    fn calls_under_half_the_limit_leave_the_measure_alone() {
        let s = CallSizer::new(Some(Duration::from_millis(10)), 1000);
        // A first call of one event: still unmeasured, the cap and no pace.
        assert_eq!(s.observe("a", 1, 300), 1000);
        assert_eq!(s.expected("a", 1000), Duration::ZERO);
        // 20 µs per event over full calls: 500 fit.
        assert_eq!(s.observe("a", 1000, 20_000), 500);
        // A trickle of one-event calls, each mostly the call's own share:
        // the limit stays.
        for _ in 0..1000 {
            assert_eq!(s.observe("a", 1, 300), 500);
        }
        assert_eq!(s.observe("a", 249, 9_000), 500);
        assert_eq!(s.expected("a", 500), Duration::from_millis(10));
        // A call of half the limit counts as it is: 30 µs per event.
        assert_eq!(s.observe("a", 250, 7_500), 454);
    }

    #[test]
    fn a_small_call_over_the_budget_counts_as_half_the_limit() {
        let s = CallSizer::new(Some(Duration::from_millis(10)), 1000);
        assert_eq!(s.observe("a", 1000, 10_000), 1000);
        // Two events stalled 50 ms: as 500 events of 100 µs, not two of 25 ms.
        assert_eq!(s.observe("a", 2, 50_000), 357);
        // One event over the budget, call after call: nothing to split, the
        // limit stays.
        for _ in 0..100 {
            assert_eq!(s.observe("a", 1, 50_000), 357);
        }
        // A tag whose events come 200 to a call, each call 12 ms (60 µs an
        // event): its calls shrink below 200 and then count as they are.
        let mut limit = 1000;
        for _ in 0..30 {
            limit = s.observe("b", 200.min(limit), 60 * 200.min(limit) as i64);
        }
        assert_eq!(limit, 166);
    }
}
