//! The standard Ribbon filter (Dillinger and Walzer, 2021; RocksDB's `NewRibbonFilterPolicy`):
//! about 30% less memory than a Bloom filter at the same false-positive rate.
//!
//! A Ribbon filter is the solution `S` of a linear system over GF(2). It has `m` slots (a
//! little more than one per key) of `r` bits each. Every key hashes to a start slot `s`, a
//! 128-bit coefficient vector `c` whose lowest bit is one, and an `r`-bit fingerprint `f`; its
//! equation says that the XOR of the slots `s + i` for the bits `i` set in `c` equals `f`. A
//! query computes that XOR and compares: a key in the set always matches, any other key with
//! probability `2^-r`. Storing `r` bits per slot and about `1.05` slots per key puts a Ribbon
//! filter within a few percent of the information-theoretic minimum, where a Bloom filter spends
//! 44% more.
//!
//! # Building
//!
//! *Banding* (Gaussian elimination on the fly) keeps at most one equation per slot, with its
//! lowest coefficient at that slot: a new equation is XORed with the equation stored at its
//! start slot while there is one, its coefficients shifted down to their lowest set bit after
//! each step. It ends stored in an empty slot, or with no coefficients left: then it was
//! implied by the others (a key added twice) if its fingerprint is zero too, and the system is
//! unsolvable otherwise. Unsolvable systems are rare; the build retries with another seed, and
//! after a few failures with more slots. *Back-substitution* then fixes the slots from the last
//! to the first, each column of the `r` solution bits with a 128-bit window of the slots after.
//!
//! # Layout and queries
//!
//! The solution is stored interleaved, RocksDB's `InterleavedSolutionStorage`: for each block
//! of 64 slots, `r` words, word `j` holding solution bit `j` of each of the block's slots. A
//! key's 128 coefficients cover at most three consecutive blocks, so a query reads `3r`
//! adjacent words (168 bytes at `r = 7`: three cache lines, fetched together) and computes each
//! result bit as the parity of three ANDs. One block of zeros after the last keeps the third
//! block in bounds. `m` is a multiple of 64.
//!
//! Keys are derived from the engine's 64-bit key hash ([`super::hash_key`]) and the filter's
//! seed; the derivation is part of the format.

use super::memory::{Bits, Placement};
use crate::prefetch::prefetch;

/// Coefficients per equation.
const WIDTH: usize = 128;

/// Slots per block of the interleaved solution.
const BLOCK_SLOTS: usize = 64;

/// Largest number of result bits (columns) a filter stores: a false-positive rate of 2^-32.
pub const MAX_RESULT_BITS: u32 = 32;

/// Slots per key beyond one that a first build attempt gets. With 128-bit coefficients a
/// system of this density is solvable for all but a small fraction of seeds at the key counts
/// of a table (the unit tests measure it); each failure costs one more attempt.
pub(crate) const FIRST_OVERHEAD: f64 = 0.05;

/// Build attempts per slot count, each with the next seed, before the slot count grows.
const SEEDS_PER_SIZE: u32 = 4;

/// The seed is stored in one byte of the header.
const MAX_SEED: u32 = 255;

/// A Ribbon filter held in RAM. Cloning shares the solution.
#[derive(Clone, PartialEq)]
pub struct Ribbon {
    /// The interleaved solution: `(m / 64 + 1) * r` words.
    words: Bits<u64>,
    /// Slots, `m`: a multiple of 64, at least 128 (0 for a filter of no keys).
    num_slots: u64,
    result_bits: u32,
    seed: u8,
    pub(super) about: super::Described,
}

impl std::fmt::Debug for Ribbon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ribbon")
            .field("num_slots", &self.num_slots)
            .field("result_bits", &self.result_bits)
            .field("seed", &self.seed)
            .field("about", &self.about)
            .finish()
    }
}

/// The result bits (fingerprint length) for at most `bits_per_key` bits per key: each slot
/// holds `r` bits and there are about 1.05 slots per key, so `r = ⌊bits_per_key / 1.05⌋`
/// (at least 1), and a filter never takes much more memory than asked for.
pub fn result_bits_for(bits_per_key: f64) -> u32 {
    // The small slack keeps 7.35 (7 × 1.05) at 7 whatever the rounding of the division.
    let r = (bits_per_key / (1.0 + FIRST_OVERHEAD) + 1e-9).floor();
    (r.max(1.0) as u32).min(MAX_RESULT_BITS)
}

/// The false-positive rate of a Ribbon filter built at `bits_per_key`: `2^-r`.
pub fn fpr_at(bits_per_key: f64) -> f64 {
    0.5f64.powi(result_bits_for(bits_per_key) as i32)
}

/// Finalizer of SplitMix64: every input bit affects every output bit.
#[inline(always)]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A key's equation: start slot, coefficients (bit 0 set), fingerprint (low `r` bits).
#[inline(always)]
fn equation(hash: u64, seed: u8, num_slots: u64, result_bits: u32) -> (usize, u128, u32) {
    let a = mix(hash ^ u64::from(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let starts = num_slots - WIDTH as u64 + 1;
    let start = ((u128::from(a) * u128::from(starts)) >> 64) as usize;
    let b = mix(a ^ 0x2545_f491_4f6c_dd1d);
    let coeffs = (u128::from(b) << 64) | u128::from(a.wrapping_mul(0xd6e8_feb8_6659_fd93)) | 1;
    let fingerprint = (b.wrapping_mul(0xa076_1d64_78bd_642f) >> 32) as u32;
    let mask = if result_bits == 32 { u32::MAX } else { (1u32 << result_bits) - 1 };
    (start, coeffs, fingerprint & mask)
}

/// The three words of coefficients a query ANDs with three consecutive blocks' columns, for
/// coefficients `c` starting at offset `o` (0..64) into the first block.
#[inline(always)]
fn spread(c: u128, o: usize) -> [u64; 3] {
    let (lo, hi) = (c as u64, (c >> 64) as u64);
    if o == 0 {
        [lo, hi, 0]
    } else {
        [lo << o, (hi << o) | (lo >> (64 - o)), hi >> (64 - o)]
    }
}

impl Ribbon {
    /// Builds a filter over the given key hashes at most about `bits_per_key` bits per key (see
    /// [`result_bits_for`]). Repeated hashes are fine.
    pub fn from_hashes(hashes: &[u64], bits_per_key: f64) -> Self {
        let result_bits = result_bits_for(bits_per_key);
        let about = super::Described::whole_keys(hashes.len() as u64, bits_per_key);
        if hashes.is_empty() {
            let words = Bits::new_with(0, Placement::Heap, |_: &mut [u64]| {});
            return Ribbon::from_parts(words, 0, result_bits, 0, about);
        }
        let mut overhead = FIRST_OVERHEAD;
        let mut seed = 0u32;
        loop {
            let wanted = (hashes.len() as f64 * (1.0 + overhead)).ceil() as u64;
            let num_slots = wanted.max(WIDTH as u64).next_multiple_of(BLOCK_SLOTS as u64);
            for _ in 0..SEEDS_PER_SIZE {
                // Past the last seed a byte can hold, keep growing with seed 0: each size
                // is a fresh system.
                let s = if seed > MAX_SEED { 0 } else { seed as u8 };
                seed += 1;
                if let Some(words) = solve(hashes, s, num_slots, result_bits) {
                    return Ribbon::from_parts(words, num_slots, result_bits, s, about);
                }
            }
            overhead *= 1.5;
        }
    }

    /// Assembles a filter from its parts: a build's, or decoded ones (see
    /// [`super::Filter::decode`], which checks that `words` has the length `num_slots` and
    /// `result_bits` imply).
    pub(crate) fn from_parts(
        words: Bits<u64>,
        num_slots: u64,
        result_bits: u32,
        seed: u8,
        about: super::Described,
    ) -> Self {
        debug_assert_eq!(words.len() as u64, stored_words(num_slots, result_bits));
        Ribbon { words, num_slots, result_bits, seed, about }
    }

    pub(crate) fn words(&self) -> &[u64] {
        &self.words
    }

    /// The first of the `3r` words a query for `hash` reads, and its three coefficient words.
    #[inline(always)]
    fn locate(&self, hash: u64) -> (usize, [u64; 3], u32) {
        let (start, coeffs, fingerprint) =
            equation(hash, self.seed, self.num_slots, self.result_bits);
        let first = (start / BLOCK_SLOTS) * self.result_bits as usize;
        (first, spread(coeffs, start % BLOCK_SLOTS), fingerprint)
    }

    /// True if the key with this hash may be in the set; false means certainly absent.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        if self.num_slots == 0 {
            return false;
        }
        let (first, c, fingerprint) = self.locate(hash);
        let r = self.result_bits as usize;
        let w = &self.words[first..first + 3 * r];
        let mut result = 0u32;
        for j in 0..r {
            let x = (c[0] & w[j]) ^ (c[1] & w[r + j]) ^ (c[2] & w[2 * r + j]);
            result |= (x.count_ones() & 1) << j;
        }
        result == fingerprint
    }

    /// Starts loading the words [`Ribbon::may_contain_hash`] will read for `hash` (`3r`
    /// adjacent words, up to four cache lines) without waiting for them.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        if self.num_slots == 0 {
            return;
        }
        let (first, _, _) = self.locate(hash);
        let last = first + 3 * self.result_bits as usize - 1;
        // One touch per cache line the range spans (8 words per line).
        let mut at = first;
        while at <= last {
            prefetch(&self.words[at]);
            at = (at | 7) + 1;
        }
    }

    /// Answers for many hashes at once, prefetching every key's words before probing any.
    /// `out[i]` receives the answer for `hashes[i]`.
    ///
    /// # Panics
    /// If `out` is shorter than `hashes`.
    pub fn may_contain_batch(&self, hashes: &[u64], out: &mut [bool]) {
        assert!(out.len() >= hashes.len(), "output slice shorter than input");
        for &h in hashes {
            self.prefetch(h);
        }
        for (o, &h) in out.iter_mut().zip(hashes) {
            *o = self.may_contain_hash(h);
        }
    }

    /// Slots, `m`.
    pub fn num_slots(&self) -> u64 {
        self.num_slots
    }

    /// Result bits per slot, `r`: the fingerprint length.
    pub fn result_bits(&self) -> u32 {
        self.result_bits
    }

    /// The seed the build settled on.
    pub fn seed(&self) -> u8 {
        self.seed
    }

    /// Bits of solution, `m · r` (the padding block not counted).
    pub fn num_bits(&self) -> u64 {
        self.num_slots * u64::from(self.result_bits)
    }

    /// Bytes of RAM the solution occupies, padding block included.
    pub fn memory_bytes(&self) -> usize {
        self.words.bytes()
    }

    /// The false-positive rate: a key not in the set matches an `r`-bit fingerprint with
    /// probability `2^-r`.
    pub fn expected_fpr(&self) -> f64 {
        match self.num_slots {
            0 => 0.0,
            _ => 0.5f64.powi(self.result_bits as i32),
        }
    }
}

/// Words the interleaved solution of `num_slots` slots of `result_bits` bits takes, the
/// padding block included (0 for a filter of no keys).
pub(crate) fn stored_words(num_slots: u64, result_bits: u32) -> u64 {
    match num_slots {
        0 => 0,
        m => (m / BLOCK_SLOTS as u64 + 1) * u64::from(result_bits),
    }
}

/// Bands and back-substitutes the system of `hashes` with `seed`: the interleaved solution,
/// or `None` if the system has no solution.
fn solve(hashes: &[u64], seed: u8, num_slots: u64, result_bits: u32) -> Option<Bits<u64>> {
    let m = num_slots as usize;
    let mut coeffs = vec![0u128; m];
    let mut results = vec![0u32; m];
    // Banded in order of start block (a counting sort), so each equation works on the slots
    // the previous ones just touched, in cache, rather than anywhere in the arrays.
    let blocks = m / BLOCK_SLOTS;
    let mut offsets = vec![0usize; blocks + 1];
    for &h in hashes {
        offsets[equation(h, seed, num_slots, result_bits).0 / BLOCK_SLOTS + 1] += 1;
    }
    for b in 0..blocks {
        offsets[b + 1] += offsets[b];
    }
    let mut equations = vec![(0usize, 0u128, 0u32); hashes.len()];
    for &h in hashes {
        let e = equation(h, seed, num_slots, result_bits);
        let at = &mut offsets[e.0 / BLOCK_SLOTS];
        equations[*at] = e;
        *at += 1;
    }
    for (mut start, mut c, mut f) in equations {
        loop {
            let stored = coeffs[start];
            if stored == 0 {
                coeffs[start] = c;
                results[start] = f;
                break;
            }
            c ^= stored;
            f ^= results[start];
            if c == 0 {
                if f == 0 {
                    break;
                }
                return None;
            }
            let shift = c.trailing_zeros();
            start += shift as usize;
            c >>= shift;
        }
    }
    let r = result_bits as usize;
    let words = stored_words(num_slots, result_bits) as usize;
    Some(Bits::new_with(words, Placement::Heap, |words: &mut [u64]| {
        // Column j's solution bits for the slots after the current one, nearest in bit 1.
        let mut window = [0u128; MAX_RESULT_BITS as usize];
        for i in (0..m).rev() {
            let (c, f) = (coeffs[i], results[i]);
            let word = (i / BLOCK_SLOTS) * r;
            for (j, w) in window.iter_mut().enumerate().take(r) {
                let shifted = *w << 1;
                // A slot no equation starts at is free: 0.
                let bit = match c {
                    0 => 0,
                    _ => ((c & shifted).count_ones() ^ (f >> j)) & 1,
                };
                *w = shifted | u128::from(bit);
                words[word + j] |= u64::from(bit) << (i % BLOCK_SLOTS);
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(n: u64, salt: u64) -> Vec<u64> {
        (0..n).map(|i| mix(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt)).collect()
    }

    #[test]
    fn every_added_key_is_found() {
        for n in [1u64, 2, 63, 64, 65, 127, 128, 129, 1000, 10_000, 100_000] {
            for bits in [1.0, 4.0, 7.0, 10.0, 20.0, 33.0] {
                let hs = hashes(n, n);
                let f = Ribbon::from_hashes(&hs, bits);
                assert!(hs.iter().all(|&h| f.may_contain_hash(h)), "n {n}, {bits} bits");
                assert_eq!(f.words().len() as u64, stored_words(f.num_slots, f.result_bits));
                assert_eq!(f.num_slots % BLOCK_SLOTS as u64, 0);
            }
        }
    }

    #[test]
    fn repeated_keys_are_implied_not_conflicting() {
        let mut hs = hashes(5000, 7);
        hs.extend_from_within(..2500);
        let f = Ribbon::from_hashes(&hs, 7.0);
        assert!(hs.iter().all(|&h| f.may_contain_hash(h)));
    }

    #[test]
    fn an_empty_filter_holds_nothing() {
        let f = Ribbon::from_hashes(&[], 7.0);
        assert!(!f.may_contain_hash(42));
        assert_eq!((f.num_slots(), f.memory_bytes(), f.expected_fpr()), (0, 0, 0.0));
    }

    /// The measured false-positive rate matches `2^-r` within four standard deviations of
    /// the binomial, over many seeds of keys and at several widths.
    #[test]
    fn measured_fpr_matches_theory() {
        let probes = 200_000u64;
        for (salt, bits) in [(1u64, 4.0), (2, 7.0), (3, 7.0), (4, 8.0), (5, 10.0)] {
            let f = Ribbon::from_hashes(&hashes(20_000, salt), bits);
            let absent = hashes(probes, !salt);
            let hits = absent.iter().filter(|&&h| f.may_contain_hash(h)).count() as f64;
            let p = f.expected_fpr();
            let sd = (probes as f64 * p * (1.0 - p)).sqrt();
            let want = probes as f64 * p;
            assert!(
                (hits - want).abs() <= 4.0 * sd,
                "r {}: {hits} false positives, expected {want:.0} ± {sd:.0}",
                f.result_bits()
            );
        }
    }

    /// About 1.05 slots per key: the memory the format promises, measured.
    #[test]
    fn space_stays_near_one_slot_per_key() {
        for n in [10_000u64, 100_000, 400_000] {
            let f = Ribbon::from_hashes(&hashes(n, n + 1), 7.35);
            let slots_per_key = f.num_slots() as f64 / n as f64;
            assert!(slots_per_key < 1.08, "n {n}: {slots_per_key} slots per key");
            assert_eq!(f.result_bits(), 7);
        }
    }

    #[test]
    fn batch_answers_match_single_answers() {
        let hs = hashes(3000, 11);
        let f = Ribbon::from_hashes(&hs, 7.0);
        let probe: Vec<u64> = hs.iter().copied().chain(hashes(3000, 12)).collect();
        let mut out = vec![false; probe.len()];
        f.may_contain_batch(&probe, &mut out);
        for (h, o) in probe.iter().zip(&out) {
            assert_eq!(*o, f.may_contain_hash(*h));
        }
    }
}
