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
//! after a few failures with more slots. Equations are banded in order of start block, three
//! stretches of them side by side (see `band`). *Back-substitution* then fixes the slots from
//! the last to the first, each column of the `r` solution bits from the slots after.
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

use crate::filter_memory::{Bits, Placement};
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
pub const FIRST_OVERHEAD: f64 = 0.05;

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

/// The first half of a key's derivation, which depends on the seed but not on the size.
#[inline(always)]
fn key_word(hash: u64, seed: u8) -> u64 {
    mix(hash ^ u64::from(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// The start slot of the key with key word `a` ([`key_word`]).
#[inline(always)]
fn start_of(a: u64, num_slots: u64) -> usize {
    let starts = num_slots - WIDTH as u64 + 1;
    ((u128::from(a) * u128::from(starts)) >> 64) as usize
}

/// The equation of the key with key word `a`: start slot, coefficients (bit 0 set),
/// fingerprint (low `r` bits).
#[inline(always)]
fn equation_of(a: u64, num_slots: u64, result_bits: u32) -> (usize, u128, u32) {
    let b = mix(a ^ 0x2545_f491_4f6c_dd1d);
    let coeffs = (u128::from(b) << 64) | u128::from(a.wrapping_mul(0xd6e8_feb8_6659_fd93)) | 1;
    let fingerprint = (b.wrapping_mul(0xa076_1d64_78bd_642f) >> 32) as u32;
    let mask = if result_bits == 32 { u32::MAX } else { (1u32 << result_bits) - 1 };
    (start_of(a, num_slots), coeffs, fingerprint & mask)
}

/// A key's equation: start slot, coefficients (bit 0 set), fingerprint (low `r` bits).
#[inline(always)]
fn equation(hash: u64, seed: u8, num_slots: u64, result_bits: u32) -> (usize, u128, u32) {
    equation_of(key_word(hash, seed), num_slots, result_bits)
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
    pub fn from_parts(
        words: Bits<u64>,
        num_slots: u64,
        result_bits: u32,
        seed: u8,
        about: super::Described,
    ) -> Self {
        debug_assert_eq!(words.len() as u64, stored_words(num_slots, result_bits));
        Ribbon { words, num_slots, result_bits, seed, about }
    }

    pub fn words(&self) -> &[u64] {
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
pub fn stored_words(num_slots: u64, result_bits: u32) -> u64 {
    match num_slots {
        0 => 0,
        m => (m / BLOCK_SLOTS as u64 + 1) * u64::from(result_bits),
    }
}

/// Working memory of a build, kept by each thread for its next build (a table's filter is
/// several megabytes of it; fresh memory each time costs a page fault per 4 KiB).
#[derive(Default)]
struct Scratch {
    /// Key words ([`key_word`]) in order of start block.
    sorted: Vec<u64>,
    /// Per start block: first the number of keys, then where its next key goes in `sorted`.
    offsets: Vec<usize>,
    /// Per slot: the coefficients of the equation banded there (0: none).
    coeffs: Vec<u128>,
    /// Per slot: the fingerprint of the equation banded there.
    results: Vec<u32>,
}

impl Scratch {
    fn bytes(&self) -> usize {
        self.sorted.capacity() * 8
            + self.offsets.capacity() * std::mem::size_of::<usize>()
            + self.coeffs.capacity() * 16
            + self.results.capacity() * 4
    }
}

/// Equations banded at once, each a stretch of the sorted equations of its own.
const BAND_LANES: usize = 3;

/// A thread keeps at most this much scratch between builds; a larger build's is freed.
const KEEP_SCRATCH_BYTES: usize = 64 << 20;

thread_local! {
    static SCRATCH: std::cell::Cell<Scratch> = std::cell::Cell::new(Scratch::default());
}

/// Bands and back-substitutes the system of `hashes` with `seed`: the interleaved solution,
/// or `None` if the system has no solution.
fn solve(hashes: &[u64], seed: u8, num_slots: u64, result_bits: u32) -> Option<Bits<u64>> {
    let mut scratch = SCRATCH.take();
    let solution = solve_with::<BAND_LANES>(&mut scratch, hashes, seed, num_slots, result_bits);
    if scratch.bytes() <= KEEP_SCRATCH_BYTES {
        SCRATCH.set(scratch);
    }
    solution
}

fn solve_with<const LANES: usize>(
    scratch: &mut Scratch,
    hashes: &[u64],
    seed: u8,
    num_slots: u64,
    result_bits: u32,
) -> Option<Bits<u64>> {
    let m = num_slots as usize;
    let Scratch { sorted, offsets, coeffs, results } = scratch;
    // Banded in order of start block (a counting sort), so each equation works on the slots
    // the previous ones just touched, in cache, rather than anywhere in the arrays. The sort
    // moves key words; each equation is derived from its key word once, when banded.
    let blocks = m / BLOCK_SLOTS;
    offsets.clear();
    offsets.resize(blocks + 1, 0);
    for &h in hashes {
        offsets[start_of(key_word(h, seed), num_slots) / BLOCK_SLOTS + 1] += 1;
    }
    for b in 0..blocks {
        offsets[b + 1] += offsets[b];
    }
    // Every element of `sorted` and every `results[i]` with `coeffs[i] != 0` is written
    // before it is read: growing them is enough.
    if sorted.len() < hashes.len() {
        sorted.resize(hashes.len(), 0);
    }
    for &h in hashes {
        let a = key_word(h, seed);
        let at = &mut offsets[start_of(a, num_slots) / BLOCK_SLOTS];
        sorted[*at] = a;
        *at += 1;
    }
    // Between builds every coefficient in the scratch is clear (back-substitution clears
    // the slots as it reads them, while they are in cache): growing is enough.
    if coeffs.len() < m {
        coeffs.resize(m, 0);
        results.resize(m, 0);
    }
    let (coeffs, results) = (&mut coeffs[..m], &mut results[..m]);
    let eqs = &sorted[..hashes.len()];
    if !band::<LANES>(eqs, coeffs, results, num_slots, result_bits) {
        coeffs.fill(0);
        return None;
    }
    let r = result_bits as usize;
    let words = stored_words(num_slots, result_bits) as usize;
    Some(Bits::new_with(words, Placement::Heap, |words: &mut [u64]| {
        back_substitute(words, coeffs, results, r)
    }))
}

/// An equation on its way to a free slot: its coefficients start at `start`.
struct Banding {
    start: usize,
    c: u128,
    f: u32,
}

impl Banding {
    #[inline(always)]
    fn of(a: u64, num_slots: u64, result_bits: u32) -> Self {
        let (start, c, f) = equation_of(a, num_slots, result_bits);
        Banding { start, c, f }
    }
}

/// What one step of banding did with an equation.
enum Step {
    /// It was reduced by the equation at its start; it goes on.
    Reduced,
    /// It is stored, or was implied by the others: done.
    Done,
    /// It contradicts the others: the system has no solution.
    Failed,
}

/// One step of banding `e`: stores it at its start slot if that is free, else XORs the
/// equation stored there into it and moves its start to its new lowest coefficient.
#[inline(always)]
fn band_step(coeffs: &mut [u128], results: &mut [u32], e: &mut Banding) -> Step {
    let stored = coeffs[e.start];
    // A banded equation has its lowest coefficient at its slot: bit 0 tells.
    if stored as u64 & 1 == 0 {
        coeffs[e.start] = e.c;
        results[e.start] = e.f;
        return Step::Done;
    }
    let c = e.c ^ stored;
    e.f ^= results[e.start];
    // Bit 0 is now clear. The next start depends on the low word alone, almost always
    // nonzero: shifts of 1 to 63 in two words, no 128-bit shift.
    let (lo, hi) = (c as u64, (c >> 64) as u64);
    if lo != 0 {
        let s = lo.trailing_zeros();
        e.c = u128::from((lo >> s) | ((hi << 1) << (63 - s))) | (u128::from(hi >> s) << 64);
        e.start += s as usize;
    } else if hi != 0 {
        let s = hi.trailing_zeros();
        e.c = u128::from(hi >> s);
        e.start += s as usize + 64;
    } else {
        return if e.f == 0 { Step::Done } else { Step::Failed };
    }
    Step::Reduced
}

/// Bands `e` to the end: false if it contradicts the equations banded before.
#[inline(always)]
fn band_one(coeffs: &mut [u128], results: &mut [u32], mut e: Banding) -> bool {
    loop {
        match band_step(coeffs, results, &mut e) {
            Step::Reduced => {}
            Step::Done => return true,
            Step::Failed => return false,
        }
    }
}

/// Bands the equations of the key words `eqs` (sorted by start) into the clear slots:
/// false if the system has no solution.
///
/// Each step of banding waits for the one before (load, XOR, lowest bit, next address), so
/// `LANES` stretches of the equations are banded side by side, a step of each in turn, for
/// the processor to overlap. Any order of banding gives a valid banded system of the same
/// equations, hence the same solution; a stored equation never changes, so the stretches
/// may meet in the same slots.
fn band<const LANES: usize>(
    eqs: &[u64],
    coeffs: &mut [u128],
    results: &mut [u32],
    num_slots: u64,
    result_bits: u32,
) -> bool {
    let n = eqs.len();
    let mut next: [usize; LANES] = std::array::from_fn(|k| n * k / LANES);
    let end: [usize; LANES] = std::array::from_fn(|k| n * (k + 1) / LANES);
    if next.iter().zip(&end).any(|(a, b)| a == b) {
        return eqs
            .iter()
            .all(|&a| band_one(coeffs, results, Banding::of(a, num_slots, result_bits)));
    }
    let mut lanes: [Banding; LANES] = std::array::from_fn(|k| {
        next[k] += 1;
        Banding::of(eqs[next[k] - 1], num_slots, result_bits)
    });
    let mut in_flight = [true; LANES];
    'all: loop {
        for k in 0..LANES {
            match band_step(coeffs, results, &mut lanes[k]) {
                Step::Reduced => {}
                Step::Failed => return false,
                Step::Done => {
                    if next[k] == end[k] {
                        in_flight[k] = false;
                        break 'all;
                    }
                    lanes[k] = Banding::of(eqs[next[k]], num_slots, result_bits);
                    next[k] += 1;
                }
            }
        }
    }
    for (k, lane) in lanes.into_iter().enumerate() {
        if in_flight[k] && !band_one(coeffs, results, lane) {
            return false;
        }
        for &a in &eqs[next[k]..end[k]] {
            if !band_one(coeffs, results, Banding::of(a, num_slots, result_bits)) {
                return false;
            }
        }
    }
    true
}

/// Fixes the slots from the last to the first, straight into the interleaved words: a
/// slot's bit in column `j` is its fingerprint bit `j` XOR the parity of its coefficients
/// ANDed with the column's bits of the slots after it, which lie in the slot's block (the
/// bits above it, already fixed) and the next two blocks (final), three words read as a
/// query reads them. A slot no equation starts at is free: 0. Leaves `coeffs` clear.
fn back_substitute(words: &mut [u64], coeffs: &mut [u128], results: &[u32], r: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has POPCNT, the one feature the function is compiled to use.
        return unsafe { back_substitute_popcnt(words, coeffs, results, r) };
    }
    back_substitute_any(words, coeffs, results, r)
}

/// [`back_substitute_any`] with the POPCNT instruction, about twice as fast as the
/// portable parity the baseline x86-64 target compiles `count_ones` to.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn back_substitute_popcnt(
    words: &mut [u64],
    coeffs: &mut [u128],
    results: &[u32],
    r: usize,
) {
    back_substitute_any(words, coeffs, results, r)
}

#[inline(always)]
fn back_substitute_any(words: &mut [u64], coeffs: &mut [u128], results: &[u32], r: usize) {
    let zeros = [0u64; MAX_RESULT_BITS as usize];
    for (b, block) in coeffs.chunks_exact_mut(BLOCK_SLOTS).enumerate().rev() {
        let (cur, after) = words[b * r..].split_at_mut(r);
        let next = &after[..r];
        let next2 = after.get(r..2 * r).unwrap_or(&zeros[..r]);
        for (o, slot) in block.iter_mut().enumerate().rev() {
            let c = std::mem::take(slot);
            if c == 0 {
                continue;
            }
            let f = results[b * BLOCK_SLOTS + o];
            let [c0, c1, c2] = spread(c, o);
            for (j, ((w, &w1), &w2)) in cur.iter_mut().zip(next).zip(&next2[..r]).enumerate() {
                let x = (c0 & *w) ^ (c1 & w1) ^ (c2 & w2);
                let bit = (x.count_ones() ^ (f >> j)) & 1;
                *w |= u64::from(bit) << o;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward build the optimized one must match bit for bit.
    fn solve_reference(
        hashes: &[u64],
        seed: u8,
        num_slots: u64,
        result_bits: u32,
    ) -> Option<Bits<u64>> {
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

    /// The build produces the very words of the straightforward one (so tables written
    /// before stay valid and decode to the same filter), at several sizes and widths, one
    /// after another on this thread: a smaller build after a larger one, or after a failed
    /// one, reuses its scratch.
    #[test]
    fn build_matches_reference_and_reuses_scratch() {
        // A failed build leaves the scratch clear too: twice the equations of the slots.
        assert!(solve(&hashes(1024, 3), 0, 512, 7).is_none());
        for (n, bits) in
            [(100_000u64, 7.35), (1000, 7.0), (50_000, 1.0), (129, 33.0), (20_000, 10.0)]
        {
            let hs = hashes(n, n ^ 0x55);
            let f = Ribbon::from_hashes(&hs, bits);
            let want = solve_reference(&hs, f.seed(), f.num_slots(), f.result_bits()).unwrap();
            assert_eq!(f.words(), &want[..], "n {n}, {bits} bits");
            assert!(hs.iter().all(|&h| f.may_contain_hash(h)), "n {n}, {bits} bits");
        }
    }

    /// Build time of the straightforward and the optimized build, alternating, at table
    /// sizes: `cargo test --release --lib ribbon::tests::build_timing -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn build_timing() {
        // Thread CPU time, not wall time: the machine may be shared.
        struct Instant(u128);
        impl Instant {
            fn now() -> Self {
                let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: `t` is a valid timespec to write.
                unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
                Instant(t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128)
            }
            fn elapsed(&self) -> std::time::Duration {
                std::time::Duration::from_nanos((Instant::now().0 - self.0) as u64)
            }
        }
        for n in [500_000u64, 1_000_000] {
            let hs = hashes(n, 99);
            let f = Ribbon::from_hashes(&hs, 7.35);
            let (seed, m, r) = (f.seed(), f.num_slots(), f.result_bits());
            let (mut old, mut new) = (Vec::new(), Vec::new());
            let mut lanes = vec![Vec::new(); 3];
            for _ in 0..15 {
                let t = Instant::now();
                std::hint::black_box(solve_reference(&hs, seed, m, r));
                old.push(t.elapsed().as_nanos() as f64 / n as f64);
                let t = Instant::now();
                std::hint::black_box(solve(&hs, seed, m, r));
                new.push(t.elapsed().as_nanos() as f64 / n as f64);
                let mut scratch = SCRATCH.take();
                let t = Instant::now();
                std::hint::black_box(solve_with::<1>(&mut scratch, &hs, seed, m, r));
                lanes[0].push(t.elapsed().as_nanos() as f64 / n as f64);
                let t = Instant::now();
                std::hint::black_box(solve_with::<2>(&mut scratch, &hs, seed, m, r));
                lanes[1].push(t.elapsed().as_nanos() as f64 / n as f64);
                let t = Instant::now();
                std::hint::black_box(solve_with::<4>(&mut scratch, &hs, seed, m, r));
                lanes[2].push(t.elapsed().as_nanos() as f64 / n as f64);
                SCRATCH.set(scratch);
            }
            for (k, v) in lanes.iter_mut().enumerate() {
                v.sort_by(f64::total_cmp);
                println!("n {n}: {} lanes: min {:.1} median {:.1}", [1, 2, 4][k], v[0], v[7]);
            }
            old.sort_by(f64::total_cmp);
            new.sort_by(f64::total_cmp);
            println!(
                "n {n}: reference min {:.1} median {:.1} ns/key; build min {:.1} median {:.1} ns/key",
                old[0], old[7], new[0], new[7]
            );
        }
    }
}
