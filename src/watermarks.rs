//! Per-partition watermarks: the record time up to which every record of a
//! partition has been applied, raised by the pipeline after each batch and
//! by the consumer's statistics for caught-up partitions, and written to
//! Redis by the pipeline for the scheduler's completeness check (see
//! `schedule`). In memory only; pure.

use std::collections::HashMap;
use std::sync::Mutex;

/// Watermarks waiting to be written to Redis: `<topic>:<partition>` -> ms.
#[derive(Debug, Default)]
pub struct Watermarks {
    pending: Mutex<HashMap<String, i64>>,
}

impl Watermarks {
    /// Raises the pending watermark of a partition.
    pub fn raise(&self, field: &str, ms: i64) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match p.get_mut(field) {
            Some(cur) if *cur >= ms => {}
            Some(cur) => *cur = ms,
            None => {
                p.insert(field.to_string(), ms);
            }
        }
    }

    pub fn take(&self) -> HashMap<String, i64> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Puts back what could not be written.
    pub fn restore(&self, marks: HashMap<String, i64>) {
        for (f, ms) in marks {
            self.raise(&f, ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_only_rise() {
        let w = Watermarks::default();
        w.raise("t:0", 10);
        w.raise("t:0", 5);
        w.raise("t:1", 7);
        let m = w.take();
        assert_eq!(m["t:0"], 10);
        assert_eq!(m["t:1"], 7);
        assert!(w.take().is_empty());
    }
}
