//! Whether a point read (`get` or `multi_get`) asks a table's range filter after its point
//! filter said "maybe".
//!
//! The range filter's probe turns a point filter's false positive away before the block
//! read it would otherwise cost. But it costs a few dependent cache misses each time it is
//! asked, and for a key the table holds it is asked for nothing: a workload of present keys
//! pays it on every lookup, in the table that holds each key. It pays when enough of the
//! table's "maybes" are false: more than [`WORTH_PROBING`] of them, the probe's cost
//! against a block read's. So each table keeps a running share of its point filter's
//! maybes that turned out false, learnt from every outcome whether the probe was asked
//! or not (the probe's "absent", or the block's), and a point read asks the probe while
//! that share is above the line. Reading absent keys, the share stays near one and every
//! maybe is probed; reading present keys, it falls to near zero within a few dozen
//! lookups and the probe is left out, until false maybes come back.
//!
//! Skipping the probe never changes an answer: the block is read and searched instead.

use std::sync::atomic::{AtomicU32, Ordering};

/// The share's fixed-point one.
const ONE: u32 = 1 << 16;

/// The share of false maybes above which the probe is asked, in the share's fixed point:
/// about the probe's cost (its select sample and words, mostly not in cache) over a block
/// read's (an index search, a system call, a 4 KiB copy and its checksum). DESIGN.md gives
/// the measurement.
const LINE: u32 = ONE / 16;

/// [`LINE`] as a fraction.
pub const WORTH_PROBING: f64 = LINE as f64 / ONE as f64;

/// Each outcome moves the share this fraction of the way to 0 or 1: a few dozen outcomes
/// cross the line, and a lone outcome barely moves it.
const STEP_SHIFT: u32 = 4;

/// The running share of a table's point-filter maybes that were false (see the module
/// documentation). Kept on a cache line of its own: it is written by every reader that
/// reaches the table, and the table's other fields are only read.
#[derive(Debug)]
#[repr(align(64))]
pub struct FalseMaybes {
    share: AtomicU32,
}

impl Default for FalseMaybes {
    /// Every maybe false until told otherwise: a new table is probed.
    fn default() -> Self {
        FalseMaybes { share: AtomicU32::new(ONE) }
    }
}

impl FalseMaybes {
    /// True if a point read should ask the range filter.
    #[inline]
    pub fn worth_probing(&self) -> bool {
        self.share.load(Ordering::Relaxed) > LINE
    }

    /// Records one maybe's outcome: `false_maybe` if the table held no entry of the key.
    ///
    /// A load and a store, not an atomic update: two readers recording at once may lose
    /// one outcome, which moves a running estimate by a step at most, where a locked
    /// update would cost every lookup. Nothing is stored when the share would not move (at
    /// either end, once settled), so a table read only for present keys, or only for
    /// absent ones, is not written to at all.
    #[inline]
    pub fn record(&self, false_maybe: bool) {
        let share = self.share.load(Ordering::Relaxed);
        // A step rounded up, so that the share settles at 0 or one, not a few units short.
        let step = |gap: u32| (gap + (1 << STEP_SHIFT) - 1) >> STEP_SHIFT;
        let next = if false_maybe { share + step(ONE - share) } else { share - step(share) };
        if next != share {
            self.share.store(next, Ordering::Relaxed);
        }
    }

    /// The share, from 0 to 1.
    pub fn share(&self) -> f64 {
        f64::from(self.share.load(Ordering::Relaxed)) / f64::from(ONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_keys_turn_probing_off_and_false_maybes_turn_it_back_on() {
        let m = FalseMaybes::default();
        assert!(m.worth_probing());
        let mut lookups = 0;
        while m.worth_probing() {
            m.record(false);
            lookups += 1;
            assert!(lookups < 100, "still probing after {lookups} present keys");
        }
        // Once settled, one false maybe among present keys does not bring the probe back.
        for _ in 0..1000 {
            m.record(false);
        }
        assert_eq!(m.share(), 0.0);
        m.record(true);
        assert!(!m.worth_probing(), "share {}", m.share());
        let mut lookups = 0;
        while !m.worth_probing() {
            m.record(true);
            lookups += 1;
            assert!(lookups < 10, "not probing after {lookups} false maybes");
        }
        // False maybes alone settle it at exactly one.
        for _ in 0..1000 {
            m.record(true);
        }
        let settled = m.share();
        m.record(true);
        assert_eq!(m.share(), settled);
        assert!(settled > 0.99, "{settled}");
    }

    /// A mix settles near its share of false maybes, so the probe is asked exactly when
    /// that share is above the line.
    #[test]
    fn a_mix_settles_on_its_side_of_the_line() {
        for (false_every, probes) in [(4, true), (8, true), (40, false), (1000, false)] {
            let m = FalseMaybes::default();
            for i in 0..10_000 {
                m.record(i % false_every == 0);
            }
            // Averaged over a period, so the step just taken does not decide it.
            let mut sum = 0.0;
            for i in 0..false_every * 10 {
                m.record(i % false_every == 0);
                sum += m.share();
            }
            let mean = sum / (false_every * 10) as f64;
            assert!((mean - 1.0 / false_every as f64).abs() < 0.05, "1 in {false_every}: {mean}");
            assert_eq!(mean > WORTH_PROBING, probes, "1 in {false_every}: {mean}");
        }
    }
}
