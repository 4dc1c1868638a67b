//! The cache-line-blocked Bloom filter (Putze, Sanders, Singler 2007; the same family as
//! RocksDB's FastLocalBloom).
//!
//! The bit array is a sequence of 512-bit lines, each exactly one 64-byte cache line and
//! allocated 64-byte aligned, so all k probes of one key touch one cache line: an
//! out-of-cache lookup costs one miss instead of k.
//!
//! A key's 64-bit hash `h` is split in two independent halves:
//! - the upper 32 bits pick the line with a multiply-shift "fast range"
//!   (`(h >> 32) * num_lines >> 32`), which maps uniformly onto any line count without `%`;
//! - the lower 32 bits seed the probes: probe i sets bit `x_i >> 23` (the top 9 bits, 0..512)
//!   of the line, where `x_0 = h as u32` and `x_{i+1} = x_i · 0x9E3779B9 mod 2³²`. Each
//!   multiplication by an odd constant is a bijection that moves fresh bits into the top.

use super::math::{self, LINE_BITS};
use crate::filter_memory::{Bits, Placement, Word};
use crate::prefetch::prefetch;

/// One 64-byte cache line of filter bits. The alignment attribute is what guarantees that a
/// line never straddles two cache lines; `crate::filter_memory` allocates every array at that
/// alignment.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Line(pub [u64; 8]);

const _: () = assert!(std::mem::size_of::<Line>() == 64 && std::mem::align_of::<Line>() == 64);

// SAFETY: `Line` is `[u64; 8]` (any bits valid, no drop glue) with alignment 64 (asserted
// above).
unsafe impl Word for Line {}

/// Multiplier that re-mixes the probe state between probes (2³² / golden ratio, odd).
const PROBE_MULT: u32 = 0x9E37_79B9;

/// A blocked Bloom filter held in RAM. Cloning shares the bit array: the engine keeps a clone
/// of each table's filter beside its key range (see `crate::version::lookup`), so a probe
/// reaches the bits without first loading the table.
#[derive(Clone, PartialEq)]
pub struct BlockedBloom {
    lines: Bits<Line>,
    num_probes: u32,
    pub(super) about: super::Described,
}

impl std::fmt::Debug for BlockedBloom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockedBloom")
            .field("lines", &self.lines.len())
            .field("num_probes", &self.num_probes)
            .field("about", &self.about)
            .finish()
    }
}

#[inline(always)]
fn line_index(hash: u64, num_lines: usize) -> usize {
    (((hash >> 32) * num_lines as u64) >> 32) as usize
}

impl BlockedBloom {
    /// Builds a filter over the given key hashes at `bits_per_key` (requested; the array is
    /// rounded up to whole lines).
    pub fn from_hashes(hashes: &[u64], bits_per_key: f64) -> Self {
        let num_probes = math::optimal_blocked_probes(bits_per_key);
        let total_bits = (hashes.len() as f64 * bits_per_key).ceil() as u64;
        let num_lines = total_bits.div_ceil(LINE_BITS as u64) as usize;
        let num_lines = if hashes.is_empty() { 0 } else { num_lines.max(1) };
        let lines = Bits::new_with(num_lines, Placement::Heap, |lines: &mut [Line]| {
            for &h in hashes {
                let line = &mut lines[line_index(h, num_lines)].0;
                let mut x = h as u32;
                for _ in 0..num_probes {
                    let bit = x >> 23;
                    line[(bit >> 6) as usize] |= 1u64 << (bit & 63);
                    x = x.wrapping_mul(PROBE_MULT);
                }
            }
        });
        let about = super::Described::whole_keys(hashes.len() as u64, bits_per_key);
        BlockedBloom { lines, num_probes, about }
    }

    /// Reassembles a filter from decoded parts (see [`super::Filter::decode`]).
    pub fn from_parts(lines: Bits<Line>, num_probes: u32, about: super::Described) -> Self {
        BlockedBloom { lines, num_probes, about }
    }

    #[cfg(test)]
    pub fn bits(&self) -> &Bits<Line> {
        &self.lines
    }

    pub fn lines(&self) -> &[Line] {
        &self.lines
    }

    /// True if the key with this hash may be in the set; false means certainly absent.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        if self.lines.is_empty() {
            return false;
        }
        let line = &self.lines[line_index(hash, self.lines.len())].0;
        // Every probe is read and the answers ANDed, with no early exit. For an absent key
        // the first clear bit falls at a random probe, so a loop that stops there
        // mispredicts its branch about once per query; the line is one cache line, so
        // reading all k words of it costs next to nothing once the first has arrived.
        let mut x = hash as u32;
        let mut all = 1u64;
        for _ in 0..self.num_probes {
            let bit = x >> 23;
            all &= line[(bit >> 6) as usize] >> (bit & 63);
            x = x.wrapping_mul(PROBE_MULT);
        }
        all & 1 != 0
    }

    /// Starts loading the one cache line [`BlockedBloom::may_contain_hash`] will read for
    /// `hash`, without waiting for it. A lookup that will consult several tables prefetches
    /// each table's line first, so their misses overlap instead of following one another.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        if !self.lines.is_empty() {
            prefetch(&self.lines[line_index(hash, self.lines.len())]);
        }
    }

    /// Probes many hashes at once: first every key's cache line is prefetched, then each is
    /// probed, so the memory system works on many misses in parallel instead of one at a time.
    /// `out[i]` receives the answer for `hashes[i]`.
    ///
    /// # Panics
    /// If `out` is shorter than `hashes`.
    pub fn may_contain_batch(&self, hashes: &[u64], out: &mut [bool]) {
        assert!(out.len() >= hashes.len(), "output slice shorter than input");
        if self.lines.is_empty() {
            out[..hashes.len()].fill(false);
            return;
        }
        let n = self.lines.len();
        for &h in hashes {
            prefetch(&self.lines[line_index(h, n)]);
        }
        for (o, &h) in out.iter_mut().zip(hashes) {
            *o = self.may_contain_hash(h);
        }
    }

    /// Number of 512-bit lines.
    pub fn num_lines(&self) -> usize {
        self.lines.len()
    }

    /// Probes per key.
    pub fn num_probes(&self) -> u32 {
        self.num_probes
    }

    /// Size of the bit array in bits.
    pub fn num_bits(&self) -> u64 {
        self.lines.len() as u64 * LINE_BITS as u64
    }

    /// Bytes of RAM the bit array occupies.
    pub fn memory_bytes(&self) -> usize {
        self.lines.bytes()
    }

    /// Number of bits set.
    pub fn bits_set(&self) -> u64 {
        self.lines.iter().flat_map(|b| b.0.iter()).map(|w| w.count_ones() as u64).sum()
    }

    /// False-positive rate the Poisson-mixture formula predicts for this filter's actual fill
    /// (keys per line after rounding to whole lines).
    pub fn expected_fpr(&self) -> f64 {
        if self.lines.is_empty() {
            return 0.0;
        }
        let lambda = self.about.num_keys as f64 / self.lines.len() as f64;
        math::blocked_fpr(lambda, self.num_probes, LINE_BITS)
    }
}
