//! Score exactness. Redis stores scores as IEEE doubles, which hold every
//! integer only up to 2^53; rankflow keeps every stored score an integer of
//! at most 2^53 - 1 in magnitude so that no write is ever rounded. Using
//! 2^53 - 1 rather than 2^53 matters for sums: the computed sum of two values
//! within the bound is at least 2^53 whenever the true sum is, so the apply
//! script's range check cannot be fooled by rounding.

/// The largest magnitude a stored score may have: 2^53 - 1.
pub const MAX_EXACT: i64 = (1 << 53) - 1;

/// Whether `a + b` stays exact (the running-total rule for `sum` boards).
pub fn sum_fits(a: i64, b: i64) -> bool {
    a.checked_add(b).is_some_and(|s| s.abs() <= MAX_EXACT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_stop_at_the_exact_range() {
        assert!(sum_fits(MAX_EXACT - 1, 1));
        assert!(!sum_fits(MAX_EXACT, 1));
        assert!(sum_fits(-MAX_EXACT, 0));
        assert!(!sum_fits(-MAX_EXACT, -1));
        // The double nearest 2^53 + 1 is 2^53: the bound must be checked in integers or below 2^53.
        assert_eq!((MAX_EXACT as f64 + 2.0) as i64, 1 << 53);
    }
}
