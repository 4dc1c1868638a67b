//! [`RangeChecks`]: how a scan learns which tables its range filters let through held nothing
//! in its range — their false positives — from where its own positioning leaves each
//! table's iterator, without reading anything more.
//!
//! A table's iterator positioned forward at or before the scan's first possible entry stands
//! on its first entry at or after it: the table held nothing in range exactly when that entry
//! lies past the upper bound (or there is none). Backward, the mirror image. A positioning
//! from inside the range (a cursor's seek, a merge turning around) cannot tell, and one that
//! lands on an entry in range settles that the table held something; only an empty table is
//! recorded. The record is shared by both ends of a scan, so a table is counted once however
//! the scan moves.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::key::{self, ValueKind, KIND_FOR_SEEK, MAX_SEQNO};
use crate::version::set::{TableFile, NUM_LEVELS};

/// A count per level (L0 first), shared by the scans that add to it.
pub type LevelCounts = [AtomicU64; NUM_LEVELS];

/// Which tables of one scan (bounded at both ends) were let through by their range filter
/// and turned out to hold nothing in its range; each counted once into `sink`, at its level.
pub struct RangeChecks {
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// The first internal key the range can hold an entry at or after, and the last.
    first: Vec<u8>,
    last: Vec<u8>,
    sink: Arc<LevelCounts>,
    /// File numbers of the tables found empty in range: at most a few per scan.
    empty: Mutex<Vec<u64>>,
}

/// Whether a positioning moved forward (to the first entry at or after its target) or
/// backward (to the last at or before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
}

impl RangeChecks {
    /// The checks of a scan of `(lower, upper)`, counting false positives into `sink`; `None`
    /// for a scan open at an end (no range filter is asked for it).
    pub fn new(lower: Bound<&[u8]>, upper: Bound<&[u8]>, sink: &Arc<LevelCounts>) -> Option<Self> {
        let first = match lower {
            Bound::Included(k) | Bound::Excluded(k) => {
                key::internal_key(k, MAX_SEQNO, KIND_FOR_SEEK)
            }
            Bound::Unbounded => return None,
        };
        let last = match upper {
            Bound::Included(k) => key::internal_key(k, 0, ValueKind::Delete),
            Bound::Excluded(k) => key::internal_key(k, MAX_SEQNO, KIND_FOR_SEEK),
            Bound::Unbounded => return None,
        };
        Some(RangeChecks {
            lower: lower.map(<[u8]>::to_vec),
            upper: upper.map(<[u8]>::to_vec),
            first,
            last,
            sink: sink.clone(),
            empty: Mutex::new(Vec::new()),
        })
    }

    /// Judges `table`, on `level`, from where a positioning toward `from` (`None`: the table's first or
    /// last entry) left its iterator: `at`, the internal key it stands on, `None` when it ran
    /// off the end. True once the table's answer is settled, so its iterator stops asking.
    pub fn judge(
        &self,
        level: usize,
        table: &TableFile,
        direction: Direction,
        from: Option<&[u8]>,
        at: Option<&[u8]>,
    ) -> bool {
        let user_key = at.map(key::user_key);
        if user_key.is_some_and(|k| self.holds(k)) {
            return true;
        }
        let (whole, beyond) = match direction {
            Direction::Forward => (
                from.map_or(true, |f| key::compare_internal(f, &self.first).is_le()),
                user_key.map_or(true, |k| !below_upper(&self.upper, k)),
            ),
            Direction::Backward => (
                from.map_or(true, |f| key::compare_internal(f, &self.last).is_ge()),
                user_key.map_or(true, |k| !above_lower(&self.lower, k)),
            ),
        };
        if !(whole && beyond) {
            return false;
        }
        // A table whose range tombstone meets the range was read for it, rightly.
        let (lo, hi) =
            (self.lower.as_ref().map(Vec::as_slice), self.upper.as_ref().map(Vec::as_slice));
        if !table.table.tombstone_meets(lo, hi) {
            let mut empty = crate::sync::lock(&self.empty);
            if !empty.contains(&table.meta.number) {
                empty.push(table.meta.number);
                self.sink[level.min(NUM_LEVELS - 1)].fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }

    fn holds(&self, user_key: &[u8]) -> bool {
        above_lower(&self.lower, user_key) && below_upper(&self.upper, user_key)
    }
}

fn above_lower(lower: &Bound<Vec<u8>>, k: &[u8]) -> bool {
    match lower {
        Bound::Included(l) => k >= l.as_slice(),
        Bound::Excluded(l) => k > l.as_slice(),
        Bound::Unbounded => true,
    }
}

fn below_upper(upper: &Bound<Vec<u8>>, k: &[u8]) -> bool {
    match upper {
        Bound::Included(u) => k <= u.as_slice(),
        Bound::Excluded(u) => k < u.as_slice(),
        Bound::Unbounded => true,
    }
}
