//! Score exactness and the tie-break packing.
//!
//! Redis stores scores as IEEE doubles, which hold every integer only up to
//! 2^53; rankflow keeps every stored score an integer of magnitude at most
//! 2^53 - 1 so that no write is ever rounded. Using 2^53 - 1 rather than 2^53
//! matters for sums: the computed sum of two values within the bound is at
//! least 2^53 whenever the true sum is, so the apply script's range check
//! cannot be fooled by rounding.
//!
//! `tie_break = "earliest"` packs the time a player reached a value into the
//! low bits of the stored score: `stored = value * 2^bits + tie`, where `tie`
//! is the event's time tick (ticks of `resolution` since `epoch`), inverted
//! on `desc` boards so that among equal values the earlier tick is the better
//! stored score. `value = floor(stored / 2^bits)` decodes it exactly, also
//! for negative values. The budget (`bits` for the horizon, the rest for the
//! value) is computed from the config and checked at load; an event that
//! does not fit is refused, never rounded. `tie_break = "member"` is the same
//! packing with zero bits.

/// The largest magnitude a stored score may have: 2^53 - 1.
pub const MAX_EXACT: i64 = (1 << 53) - 1;

/// How values (and tie-break ticks) become stored scores for one board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packing {
    /// 2^bits: the multiplier of the value.
    shift: i64,
    /// The largest |value| the board accepts (events beyond it, and sums
    /// that would pass it, are refused with `score_out_of_range`).
    max_value: i64,
    /// Start of the tie-break clock, epoch ms.
    epoch_ms: i64,
    /// Length of one tick, ms.
    resolution_ms: i64,
    /// Whether higher values are better (the tick is then inverted).
    desc: bool,
}

impl Packing {
    /// No tie-break bits: Redis's member order breaks ties.
    pub fn member(max_value: Option<i64>) -> Result<Packing, String> {
        let max_value = max_value.unwrap_or(MAX_EXACT);
        if !(1..=MAX_EXACT).contains(&max_value) {
            return Err(format!("must be between 1 and 2^53 - 1 ({MAX_EXACT})"));
        }
        Ok(Packing { shift: 1, max_value, epoch_ms: 0, resolution_ms: 1, desc: true })
    }

    /// Earliest-first ties over `horizon_ms` from `epoch_ms` at `resolution_ms`.
    /// `max_value` defaults to the largest the budget allows.
    pub fn earliest(
        desc: bool,
        epoch_ms: i64,
        resolution_ms: i64,
        horizon_ms: i64,
        max_value: Option<i64>,
    ) -> Result<Packing, String> {
        if resolution_ms <= 0 || horizon_ms < resolution_ms {
            return Err("tie_horizon must be at least one tie_resolution".into());
        }
        let ticks = (horizon_ms + resolution_ms - 1) / resolution_ms;
        let bits = 64 - (ticks - 1).max(1).leading_zeros() as i64; // ceil(log2(ticks))
        if bits > 51 {
            return Err(format!("a horizon of {ticks} ticks needs {bits} bits, leaving no room for scores in 53"));
        }
        let allowed = (1i64 << (53 - bits)) - 1;
        let max_value = max_value.unwrap_or(allowed);
        if max_value < 1 || max_value > allowed {
            return Err(format!(
                "max_score {max_value} does not fit: {ticks} tie-break ticks take {bits} of the 53 exact bits, so scores can reach at most {allowed}; \
                 shorten tie_horizon, coarsen tie_resolution or lower max_score"
            ));
        }
        Ok(Packing { shift: 1 << bits, max_value, epoch_ms, resolution_ms, desc })
    }

    pub fn shift(&self) -> i64 {
        self.shift
    }

    pub fn max_value(&self) -> i64 {
        self.max_value
    }

    /// The tie component for an event at `ts_ms`, or `None` when the time is
    /// outside the horizon (the event cannot be packed).
    pub fn tie(&self, ts_ms: i64) -> Option<i64> {
        if self.shift == 1 {
            return Some(0);
        }
        let tick = (ts_ms - self.epoch_ms).div_euclid(self.resolution_ms);
        if !(0..self.shift).contains(&tick) {
            return None;
        }
        Some(if self.desc { self.shift - 1 - tick } else { tick })
    }

    /// The stored score for `value` reached at `ts_ms`, or `None` if it does not fit.
    pub fn encode(&self, value: i64, ts_ms: i64) -> Option<i64> {
        if value.abs() > self.max_value {
            return None;
        }
        Some(value * self.shift + self.tie(ts_ms)?)
    }

    /// The value a stored score holds.
    pub fn decode(&self, stored: i64) -> i64 {
        stored.div_euclid(self.shift)
    }

    /// The lowest stored score of `value` (all its ties lie in `[lo, lo + shift)`).
    pub fn lowest_stored(&self, value: i64) -> i64 {
        value * self.shift
    }
}

/// Whether `a + b` stays exact (the running-total rule for `sum` boards).
pub fn sum_fits(a: i64, b: i64) -> bool {
    a.checked_add(b).is_some_and(|s| s.abs() <= MAX_EXACT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const YEAR_MS: i64 = 365 * 86_400_000;

    #[test]
    fn sums_stop_at_the_exact_range() {
        assert!(sum_fits(MAX_EXACT - 1, 1));
        assert!(!sum_fits(MAX_EXACT, 1));
        assert!(sum_fits(-MAX_EXACT, 0));
        assert!(!sum_fits(-MAX_EXACT, -1));
        // The double nearest 2^53 + 1 is 2^53: the bound must be checked in integers or below 2^53.
        assert_eq!((MAX_EXACT as f64 + 2.0) as i64, 1 << 53);
    }

    #[test]
    fn the_budget_is_computed_from_the_horizon_and_resolution() {
        // 20 years of seconds: 631,152,000 ticks need 30 bits, leaving 23 for the value.
        let p = Packing::earliest(true, 0, 1000, 20 * 365 * 86_400_000 + 5 * 86_400_000, None).unwrap();
        assert_eq!(p.shift(), 1 << 30);
        assert_eq!(p.max_value(), (1 << 23) - 1);
        let err = Packing::earliest(true, 0, 1000, 20 * YEAR_MS, Some(1 << 23)).unwrap_err();
        assert!(err.contains("at most 8388607"), "{err}");
        assert!(Packing::earliest(true, 0, 1, 1 << 52, None).is_err());
        assert!(Packing::member(Some(MAX_EXACT + 1)).is_err());
    }

    #[test]
    fn earlier_ticks_rank_higher_on_both_orders() {
        let desc = Packing::earliest(true, 0, 1000, YEAR_MS, None).unwrap();
        assert!(desc.encode(100, 5_000).unwrap() > desc.encode(100, 9_000).unwrap());
        assert!(desc.encode(101, 9_000).unwrap() > desc.encode(100, 5_000).unwrap());
        let asc = Packing::earliest(false, 0, 1000, YEAR_MS, None).unwrap();
        assert!(asc.encode(100, 5_000).unwrap() < asc.encode(100, 9_000).unwrap());
        assert!(asc.encode(99, 9_000).unwrap() < asc.encode(100, 5_000).unwrap());
    }

    #[test]
    fn values_and_times_outside_the_budget_do_not_pack() {
        let p = Packing::earliest(true, 1_000_000, 1000, YEAR_MS, Some(1000)).unwrap();
        assert_eq!(p.encode(1001, 2_000_000), None);
        assert_eq!(p.encode(-1001, 2_000_000), None);
        assert_eq!(p.encode(5, 999_999), None);
        assert_eq!(p.encode(5, 1_000_000 + p.shift() * 1000), None);
        assert!(p.encode(1000, 1_000_000).is_some());
    }

    proptest! {
        #[test]
        fn packing_round_trips_exactly(v in -8_388_607i64..=8_388_607, t in 0i64..(20 * YEAR_MS)) {
            let p = Packing::earliest(true, 0, 1000, 20 * YEAR_MS, None).unwrap();
            let s = p.encode(v, t).unwrap();
            prop_assert!(s.abs() <= MAX_EXACT);
            prop_assert_eq!(s as f64 as i64, s);
            prop_assert_eq!(p.decode(s), v);
            prop_assert!(s >= p.lowest_stored(v) && s < p.lowest_stored(v) + p.shift());
        }

        #[test]
        fn packing_preserves_order(a in -8_388_607i64..=8_388_607, b in -8_388_607i64..=8_388_607,
                                   ta in 0i64..(20 * YEAR_MS), tb in 0i64..(20 * YEAR_MS)) {
            for desc in [true, false] {
                let p = Packing::earliest(desc, 0, 1000, 20 * YEAR_MS, None).unwrap();
                let (sa, sb) = (p.encode(a, ta).unwrap(), p.encode(b, tb).unwrap());
                if a != b {
                    prop_assert_eq!(sa < sb, a < b);
                } else if ta / 1000 != tb / 1000 {
                    // Equal values: the earlier tick is better, in the board's direction.
                    let a_better = if desc { sa > sb } else { sa < sb };
                    prop_assert_eq!(a_better, ta < tb);
                }
            }
        }
    }
}
