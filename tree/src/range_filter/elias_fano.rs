//! An Elias–Fano sequence: a sorted list of distinct integers below a universe `u` in about
//! `2 + log₂(u/n)` bits each, answering "is any element in `[lo, hi]`?" with a handful of
//! word reads.
//!
//! Each element is split into its `l` low bits, stored packed, and its high part `h`,
//! stored in unary: element `i` sets bit `h + i` of the upper bit vector, so the zeros
//! before that bit number exactly `h`, and the zero after bucket `h`'s elements closes the
//! bucket. With `l = ⌊log₂(u/n)⌋` the vector holds `n` ones and `⌊(u−1)/2^l⌋ + 1` zeros, at
//! most about `2n` bits. Finding where bucket `h` starts is a *select* of the `h`-th zero:
//! the position of every [`SAMPLE`]-th zero is kept (rebuilt at decode, never stored), and a
//! select scans words from the sample before it, 4 words on average.
//!
//! A decoded sequence (an open table's filter) keeps its words in the point filters'
//! huge-page memory ([`crate::filter_memory`]): a probe reads two or three words at random
//! places in tens of MiB, and with 4 KiB pages each would also miss the TLB.

use crate::filter_memory::{Arena, Bits, Placement};

/// Zeros between two select samples.
const SAMPLE: u64 = 256;

/// Positions before a bucket's guessed start whose lines a probe prefetches: about the
/// guess's error below the true start (the range filter's results give its spread).
const GUESS_BEFORE: u64 = 64;

/// Positions past a bucket's guessed start whose lines a probe prefetches: the guess's error
/// above the true start, then the bucket itself, which the probe reads to its closing zero
/// and, for its low parts, at both ends; a bucket a query meets is mostly a clump of one
/// block's codes, dozens long.
const GUESS_AFTER: u64 = 128;

/// A sorted sequence of distinct `u64`s below a universe, in Elias–Fano form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EliasFano {
    n: u64,
    universe: u64,
    low_bits: u32,
    /// `n` low parts of `low_bits` bits each, packed from bit 0 of word 0 on.
    lows: Bits<u64>,
    /// The `low_bits` lowest bits set: a low part's mask, worked out once.
    low_mask: u64,
    /// The upper bit vector, `upper_len` bits used; bits past it are zero.
    upper: Bits<u64>,
    upper_len: u64,
    /// `zero_samples[k]` is the position of zero number `k · SAMPLE` in `upper`.
    zero_samples: Bits<u64>,
    /// Ones per zero in `upper` (elements per bucket), in 32.32 fixed point: how far past the
    /// last select sample a bucket most likely starts, without a division per probe.
    ones_per_zero: u64,
}

/// Where a sequence's words go: huge-page memory for one kept while its table is open, the
/// heap for one built to be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Built to be encoded and dropped: the heap.
    Briefly,
    /// Decoded for an open table: the huge-page arena.
    Open,
}

impl Keep {
    fn placement(self) -> Placement<'static> {
        match self {
            Keep::Briefly => Placement::Heap,
            Keep::Open => Placement::Shared(Arena::global()),
        }
    }
}

/// `words` copied to where `keep` says.
pub fn words_at(words: &[u64], keep: Keep) -> Bits<u64> {
    Bits::new_with(words.len(), keep.placement(), |w| w.copy_from_slice(words))
}

/// The low-part width for `n` elements below `universe`: `⌊log₂(universe / n)⌋`, 0 when the
/// universe is not larger than the count.
pub fn low_bits_for(n: u64, universe: u64) -> u32 {
    if n == 0 || universe <= n {
        0
    } else {
        63 - (universe / n).leading_zeros()
    }
}

/// Bits of the upper vector for `n` elements below `universe` with `low_bits`: the ones plus
/// one closing zero per bucket (`None` on overflow).
pub fn upper_len_for(n: u64, universe: u64, low_bits: u32) -> Option<u64> {
    if universe == 0 {
        return Some(0);
    }
    n.checked_add(((universe - 1) >> low_bits) + 1)
}

/// Words of `bits` bits.
pub fn words_for(bits: u64) -> u64 {
    bits.div_ceil(64)
}

impl EliasFano {
    /// The sequence of `values`, which must be strictly increasing and below `universe`.
    pub fn new(values: &[u64], universe: u64) -> EliasFano {
        let n = values.len() as u64;
        debug_assert!(values.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(values.last().map_or(true, |&v| v < universe));
        let low_bits = low_bits_for(n, universe);
        let upper_len = upper_len_for(n, universe, low_bits).expect("a universe below 2^63");
        // Both parts are written a whole word at a time, each word once, as they fill in
        // order: a read-modify-write of one or two words per element cost about as much as
        // the rest of the encoding.
        let mut lows = Vec::with_capacity(words_for(n * u64::from(low_bits)) as usize);
        let mut upper = Vec::with_capacity(words_for(upper_len) as usize);
        let mask = low_mask(low_bits);
        // Low parts: `filled` bits of `acc` hold the next word's start.
        let (mut acc, mut filled) = (0u64, 0u32);
        // Upper vector: `word` holds word number `upper.len()`'s bits so far.
        let mut word = 0u64;
        for (i, &v) in values.iter().enumerate() {
            if low_bits > 0 {
                let low = v & mask;
                acc |= low << filled;
                filled += low_bits;
                if filled >= 64 {
                    lows.push(acc);
                    filled -= 64;
                    // The low part's bits that did not fit (none when it ended the word).
                    acc = if filled == 0 { 0 } else { low >> (low_bits - filled) };
                }
            }
            let pos = (v >> low_bits) + i as u64;
            while (upper.len() as u64) < pos / 64 {
                upper.push(word);
                word = 0;
            }
            word |= 1 << (pos % 64);
        }
        if filled > 0 {
            lows.push(acc);
        }
        if n > 0 {
            upper.push(word);
        }
        upper.resize(words_for(upper_len) as usize, 0);
        let (lows, upper) = (words_at(&lows, Keep::Briefly), words_at(&upper, Keep::Briefly));
        EliasFano::from_parts(n, universe, low_bits, lows, upper, upper_len, Keep::Briefly)
    }

    /// The sequence from its stored parts, whose sizes the caller has checked; the select
    /// samples are derived here, and kept as `keep` says.
    fn from_parts(
        n: u64,
        universe: u64,
        low_bits: u32,
        lows: Bits<u64>,
        upper: Bits<u64>,
        upper_len: u64,
        keep: Keep,
    ) -> EliasFano {
        let mut zero_samples = Vec::new();
        let mut zeros = 0u64;
        for (w, &word) in upper.iter().enumerate() {
            let base = w as u64 * 64;
            let free = !word & low_mask((upper_len - base).min(64) as u32);
            let count = u64::from(free.count_ones());
            let mut next = zero_samples.len() as u64 * SAMPLE;
            while next < zeros + count {
                zero_samples.push(base + u64::from(nth_set_bit(free, (next - zeros) as u32)));
                next += SAMPLE;
            }
            zeros += count;
        }
        let zero_samples = words_at(&zero_samples, keep);
        let buckets = (upper_len - n).max(1);
        let ones_per_zero = ((u128::from(n) << 32) / u128::from(buckets)) as u64;
        let low_mask = low_mask(low_bits);
        EliasFano {
            n,
            universe,
            low_bits,
            lows,
            low_mask,
            upper,
            upper_len,
            zero_samples,
            ones_per_zero,
        }
    }

    /// The sequence from stored words, checked: `lows` and `upper` must have exactly the
    /// sizes `n`, `universe` and `low_bits` imply (the caller compares byte counts before
    /// allocating), the upper vector exactly `n` ones and nothing past its length, and the
    /// elements strictly increasing below the universe. `Err` says what is wrong. The select
    /// samples are kept where the words are (`keep`).
    pub fn from_words(
        n: u64,
        universe: u64,
        low_bits: u32,
        lows: Bits<u64>,
        upper: Bits<u64>,
        keep: Keep,
    ) -> Result<EliasFano, String> {
        if n > universe {
            return Err(format!("{n} elements in a universe of {universe}"));
        }
        if low_bits != low_bits_for(n, universe) {
            return Err(format!("{low_bits} low bits for {n} elements below {universe}"));
        }
        let upper_len = upper_len_for(n, universe, low_bits).ok_or("upper length overflows")?;
        let low_words = n.checked_mul(u64::from(low_bits)).map(words_for);
        if low_words != Some(lows.len() as u64) || words_for(upper_len) != upper.len() as u64 {
            return Err("word counts do not match the header".into());
        }
        let ones: u64 = upper.iter().map(|w| u64::from(w.count_ones())).sum();
        let tail = upper_len % 64;
        if tail != 0 && upper.last().is_some_and(|&w| w & !low_mask(tail as u32) != 0) {
            return Err("bits set past the upper vector's end".into());
        }
        if ones != n {
            return Err(format!("upper vector holds {ones} elements, header says {n}"));
        }
        let ef = EliasFano::from_parts(n, universe, low_bits, lows, upper, upper_len, keep);
        let mut prev: Option<u64> = None;
        let mut bad = None;
        ef.for_each(|v| {
            if bad.is_none() && (v >= universe || prev.is_some_and(|p| p >= v)) {
                bad = Some(format!("element {v} out of order or outside the universe"));
            }
            prev = Some(v);
        });
        bad.map_or(Ok(ef), Err)
    }

    /// Number of elements.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True without elements.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The universe every element is below.
    pub fn universe(&self) -> u64 {
        self.universe
    }

    /// Bits of each low part.
    pub fn low_bits(&self) -> u32 {
        self.low_bits
    }

    /// The packed low parts, as stored.
    pub fn low_words(&self) -> &[u64] {
        &self.lows
    }

    /// The upper bit vector, as stored.
    pub fn upper_words(&self) -> &[u64] {
        &self.upper
    }

    /// True if every word (the parts and the select samples) is in huge-page memory.
    #[cfg(test)]
    pub fn in_huge_pages(&self) -> bool {
        [&self.lows, &self.upper, &self.zero_samples].iter().all(|b| b.is_empty() || b.is_huge())
    }

    /// Heap bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.lows.bytes() + self.upper.bytes() + self.zero_samples.bytes()
    }

    /// Calls `f` with every element, in order.
    pub fn for_each(&self, mut f: impl FnMut(u64)) {
        let mut i = 0u64;
        for (w, &word) in self.upper.iter().enumerate() {
            let mut ones = word;
            while ones != 0 {
                let pos = w as u64 * 64 + u64::from(ones.trailing_zeros());
                ones &= ones - 1;
                f((pos - i) << self.low_bits | self.low(i));
                i += 1;
            }
        }
    }

    /// The low part of element `i`.
    #[inline]
    fn low(&self, i: u64) -> u64 {
        // Both words it may span are read whether or not it crosses into the second:
        // which low parts cross is no pattern a branch predictor learns, and a probe reads
        // several. Without low parts there are no words, and the mask is 0.
        let at = i * u64::from(self.low_bits);
        let (w, off) = ((at / 64) as usize, (at % 64) as u32);
        let first = self.lows.get(w).copied().unwrap_or(0);
        let next = self.lows.get(w + 1).copied().unwrap_or(0);
        ((u128::from(first) | u128::from(next) << 64) >> off) as u64 & self.low_mask
    }

    /// Starts loading the select sample a query from `lo` ([`EliasFano::any_in`]) reads
    /// first. Nothing waits for it.
    #[inline]
    pub fn prefetch_sample(&self, lo: u64) {
        let h = lo >> self.low_bits;
        if h > 0 && lo < self.universe {
            if let Some(s) = self.zero_samples.get(((h - 1) / SAMPLE) as usize) {
                crate::prefetch::prefetch(s);
            }
        }
    }

    /// Starts loading the upper-vector and low-part words a query from `lo` most likely
    /// reads, from its select sample (read here, so best once
    /// [`EliasFano::prefetch_sample`] had time to bring it): the select's walk from the
    /// sample's word to the bucket's start. The ones on the way are guessed from the ones
    /// between this sample and the next (mostly in the same line), in proportion to the
    /// zeros passed: a table's keys come in runs, so its codes come in clumps, one per block,
    /// and the ratio of elements to buckets over the whole sequence guessed worse. The count
    /// still varies with the clumps, so the lines from [`GUESS_BEFORE`] positions before the
    /// guess to [`GUESS_AFTER`] past it load too, among the low parts, and in the upper
    /// vector up to as far past it: a few lines. A wrong guess costs only wasted lines.
    #[inline]
    pub fn prefetch_words(&self, lo: u64) {
        let h = lo >> self.low_bits;
        if self.n == 0 || lo >= self.universe {
            return;
        }
        let (start, past, ones) = match h {
            0 => (0, 0, 0),
            h => {
                let s = ((h - 1) / SAMPLE) as usize;
                let Some(&start) = self.zero_samples.get(s) else { return };
                let past = h - 1 - s as u64 * SAMPLE;
                let ones = match self.zero_samples.get(s + 1) {
                    Some(&next) => (next - start - SAMPLE) * past / SAMPLE,
                    None => ((u128::from(past) * u128::from(self.ones_per_zero)) >> 32) as u64,
                };
                (start, past, ones)
            }
        };
        // Zero number h − 1, then the bucket's first element just past it.
        let pos = start + past + ones + 1;
        prefetch_lines(&self.upper, start, pos + GUESS_AFTER);
        if self.low_bits > 0 {
            let i = pos.saturating_sub(h);
            let l = u64::from(self.low_bits);
            prefetch_lines(&self.lows, i.saturating_sub(GUESS_BEFORE) * l, (i + GUESS_AFTER) * l);
        }
    }

    /// The position in `upper` of zero number `k` (which must exist).
    #[inline(always)]
    fn select_zero(&self, k: u64) -> u64 {
        let s = (k / SAMPLE) as usize;
        let start = self.zero_samples[s];
        let mut left = k - s as u64 * SAMPLE;
        let mut w = (start / 64) as usize;
        let mut free = !self.upper[w] & !low_mask((start % 64) as u32);
        loop {
            let count = u64::from(free.count_ones());
            if left < count {
                return w as u64 * 64 + u64::from(nth_set_bit(free, left as u32));
            }
            left -= count;
            w += 1;
            // Zeros past the vector's end would be found only for a `k` beyond its zeros.
            free = !self.upper[w];
        }
    }

    /// The position in `upper` of the first zero at or after `pos` (which must exist: a
    /// bucket's closing zero).
    #[inline(always)]
    fn next_zero(&self, pos: u64) -> u64 {
        let mut w = (pos / 64) as usize;
        let mut free = !self.upper[w] & !low_mask((pos % 64) as u32);
        while free == 0 {
            w += 1;
            free = !self.upper[w];
        }
        w as u64 * 64 + u64::from(free.trailing_zeros())
    }

    /// True if some element lies in `[lo, hi]`.
    ///
    /// One select finds where bucket `h1` starts; its end, and bucket `h2`'s when it is the
    /// next, are the zeros that follow, mostly in the same word. A short range mostly lies in
    /// one bucket, so it costs one select, not the four of asking each bucket boundary.
    pub fn any_in(&self, lo: u64, hi: u64) -> bool {
        #[cfg(all(target_arch = "x86_64", not(target_feature = "popcnt")))]
        if std::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU has POPCNT, the one feature the function is compiled to use.
            return unsafe { self.any_in_popcnt(lo, hi) };
        }
        self.any_in_any(lo, hi)
    }

    /// [`EliasFano::any_in`] with the POPCNT instruction: a select counts the zeros of a few
    /// words, and the baseline x86-64 target compiles `count_ones` to a dozen instructions.
    #[cfg(all(target_arch = "x86_64", not(target_feature = "popcnt")))]
    #[target_feature(enable = "popcnt")]
    unsafe fn any_in_popcnt(&self, lo: u64, hi: u64) -> bool {
        self.any_in_any(lo, hi)
    }

    #[inline(always)]
    fn any_in_any(&self, lo: u64, hi: u64) -> bool {
        if self.n == 0 || lo > hi || lo >= self.universe {
            return false;
        }
        let hi = hi.min(self.universe - 1);
        let (h1, h2) = (lo >> self.low_bits, hi >> self.low_bits);
        let mask = low_mask(self.low_bits);
        // Elements before bucket h are the ones before its first position, where h zeros
        // (those closing buckets 0..h) come before.
        let first = if h1 == 0 { 0 } else { self.select_zero(h1 - 1) + 1 };
        let closing = self.next_zero(first);
        let (a, b) = (first - h1, closing - h1);
        // Bucket h1's elements are a..b, their low parts sorted: the first at or above lo's.
        let i = self.first_low_at_least(a, b, lo & mask);
        if i < b {
            return h1 < h2 || self.low(i) <= hi & mask;
        }
        if h1 == h2 {
            return false;
        }
        // Nothing in bucket h1 from lo on: any element of the buckets strictly between, or
        // bucket h2's smallest at or below hi's low part.
        let before_h2 = if h2 == h1 + 1 { closing } else { self.select_zero(h2 - 1) };
        let c = before_h2 + 1 - h2;
        if c > b {
            return true;
        }
        let d = self.next_zero(before_h2 + 1) - h2;
        c < d && self.low(c) <= hi & mask
    }

    /// The first of elements `a..b` (one bucket's, their low parts ascending) whose low part
    /// is at least `target`, or `b`.
    ///
    /// A bucket mostly holds up to one element, or a run of one block's codes: a locality
    /// hash keeps a block's distances, so a dense key range makes a run as evenly spaced as
    /// its keys, dozens long. Where it is that long, the answer is guessed by interpolating
    /// between the bucket's first and last low parts, and checked against the guess's part
    /// and the one before: a run as even as its keys holds the answer there, found in a
    /// handful of independent loads where halving makes each load wait for the one before.
    /// Otherwise the part a few places further on the answer's side bounds it, and the few
    /// between are counted; a guess that misses by more still narrows the bucket to that
    /// side, which is then halved down to [`LINEAR_SEARCH`] without a branch on the
    /// comparison (which way a probe goes is a coin toss), and counted.
    #[inline]
    fn first_low_at_least(&self, a: u64, b: u64, target: u64) -> u64 {
        // The answer lies in base..=base + size, and elements base..base + size are a's.
        let (mut base, mut size) = (a, b - a);
        if size > LINEAR_SEARCH {
            let (first, last) = (self.low(a), self.low(b - 1));
            if target <= first {
                return a;
            }
            if target > last {
                return b;
            }
            // Now low(a) < target ≤ low(b − 1): the answer is in a + 1..=b − 1 (`last >
            // first`, and the fraction is at most 1). Rounded up by adding one, not by `ceil`,
            // a call on the baseline target.
            // The differences are below 2^63 (low parts have fewer than 64 bits, positions
            // are bits of a vector): converted as signed, each conversion is one instruction,
            // where an unsigned one is a branchy sequence on the baseline target.
            let fraction = (target - first) as i64 as f64 / (last - first) as i64 as f64;
            let guess = a + 1 + ((b - 1 - a) as i64 as f64 * fraction) as i64 as u64;
            let guess = guess.min(b - 1);
            // A run as even as its keys mostly puts the answer exactly at the guess, which
            // two loads from one line confirm. Otherwise the guess's part says which side
            // the answer is on, and a part up to `GUESS_REACH` places that way bounds it.
            (base, size) = if self.low(guess) >= target {
                // In a + 1..=guess.
                if self.low(guess - 1) < target {
                    return guess;
                }
                // In a + 1..=guess − 1, so `below` < guess − 1.
                let below = guess.saturating_sub(GUESS_REACH).max(a);
                if self.low(below) >= target {
                    (a + 1, below - a - 1)
                } else {
                    (below + 1, guess - below - 2)
                }
            } else {
                // In guess + 1..=b − 1 (so guess < b − 1, as low(b − 1) ≥ target).
                let above = (guess + GUESS_REACH).min(b - 1);
                if self.low(above) < target {
                    (above + 1, b - above - 2)
                } else {
                    (guess + 1, above - guess - 1)
                }
            };
        }
        while size > LINEAR_SEARCH {
            let half = size / 2;
            let below = self.low(base + half - 1) < target;
            base += half * u64::from(below);
            size -= half;
        }
        base + (base..base + size).map(|i| u64::from(self.low(i) < target)).sum::<u64>()
    }
}

/// How far past [`EliasFano::first_low_at_least`]'s guess, on the side the answer is, it
/// checks a part, so that the parts between, fewer than [`LINEAR_SEARCH`], are counted.
const GUESS_REACH: u64 = LINEAR_SEARCH;

/// Elements of a bucket [`EliasFano::first_low_at_least`] counts rather than halves.
const LINEAR_SEARCH: u64 = 8;

/// The `bits` lowest bits set (all 64 for 64 and more).
#[inline]
fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The position of set bit number `n` (from 0) of `x`, which has more than `n`: the byte
/// holding it from the bytes' running counts (no loop over up to 63 bits), then within it.
#[inline(always)]
fn nth_set_bit(x: u64, n: u32) -> u32 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut c = x - ((x >> 1) & 0x5555_5555_5555_5555);
    c = (c & 0x3333_3333_3333_3333) + ((c >> 2) & 0x3333_3333_3333_3333);
    c = (c + (c >> 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // Byte i: the set bits of bytes 0..=i (at most 64, so no byte overflows).
    let running = c.wrapping_mul(ONES);
    // High bit of byte i set where that count is at most n: the bytes wholly before the bit.
    let at_most = (((u64::from(n) * ONES) | HIGH) - running) & HIGH;
    let byte = ((at_most >> 7).wrapping_mul(ONES) >> 56) as u32;
    let before = if byte == 0 { 0 } else { ((running >> (8 * (byte - 1))) & 0xff) as u32 };
    let b = (x >> (8 * byte)) & 0xff;
    8 * byte + u32::from(SELECT_IN_BYTE[b as usize][(n - before) as usize])
}

/// `SELECT_IN_BYTE[b][k]`: the position of set bit number `k` of the byte `b` (8 where it has
/// no such bit). A table (2 KiB, in cache after a few probes) where clearing the bits below
/// took a loop of up to seven steps whose count a branch predictor cannot learn.
static SELECT_IN_BYTE: [[u8; 8]; 256] = {
    let mut table = [[8u8; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let (mut bit, mut k) = (0, 0);
        while bit < 8 {
            if b >> bit & 1 == 1 {
                table[b][k] = bit as u8;
                k += 1;
            }
            bit += 1;
        }
        b += 1;
    }
    table
};

/// Writes the `bits`-bit `value` at bit `at` of `words`.
#[cfg(test)]
fn put_bits(words: &mut [u64], at: u64, bits: u32, value: u64) {
    if bits == 0 {
        return;
    }
    let (w, off) = ((at / 64) as usize, (at % 64) as u32);
    words[w] |= value << off;
    if off + bits > 64 {
        words[w + 1] |= value >> (64 - off);
    }
}

/// Starts loading every cache line of `words` (64-byte aligned) that holds a bit of
/// `from..=to`, clamped to the array.
#[inline]
fn prefetch_lines(words: &[u64], from: u64, to: u64) {
    let Some(last) = words.len().checked_sub(1) else { return };
    let (first, end) = (((from / 64) as usize).min(last), ((to / 64) as usize).min(last));
    let mut w = first;
    while w <= end {
        crate::prefetch::prefetch(&words[w]);
        w = (w | 7) + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The `bits`-bit value at bit `at` of `words`.
    fn get_bits(words: &[u64], at: u64, bits: u32) -> u64 {
        let (w, off) = ((at / 64) as usize, (at % 64) as u32);
        let next = words.get(w + 1).copied().unwrap_or(0);
        ((u128::from(words[w]) | u128::from(next) << 64) >> off) as u64 & low_mask(bits)
    }

    /// [`EliasFano::from_words`] of words given as vectors, kept on the heap.
    fn from_vecs(
        n: u64,
        u: u64,
        l: u32,
        lows: Vec<u64>,
        upper: Vec<u64>,
    ) -> Result<EliasFano, String> {
        let (lows, upper) = (words_at(&lows, Keep::Briefly), words_at(&upper, Keep::Briefly));
        EliasFano::from_words(n, u, l, lows, upper, Keep::Briefly)
    }

    fn naive_any(values: &[u64], lo: u64, hi: u64) -> bool {
        values.iter().any(|&v| lo <= v && v <= hi)
    }

    fn check(values: &[u64], universe: u64, rng: &mut impl Rng) {
        let ef = EliasFano::new(values, universe);
        let mut back = Vec::new();
        ef.for_each(|v| back.push(v));
        assert_eq!(back, values);
        let again = from_vecs(
            ef.len(),
            universe,
            ef.low_bits(),
            ef.low_words().to_vec(),
            ef.upper_words().to_vec(),
        )
        .unwrap();
        assert_eq!(again, ef);
        // Every element's own point, its neighbours, and random intervals.
        for &v in values {
            assert!(ef.any_in(v, v));
            if v > 0 {
                let lo = v.saturating_sub(3);
                assert_eq!(ef.any_in(lo, v - 1), naive_any(values, lo, v - 1));
            }
            assert_eq!(ef.any_in(v + 1, v + 2), naive_any(values, v + 1, v + 2));
        }
        for _ in 0..2000 {
            let lo = rng.gen_range(0..universe.max(1) + 5);
            let width = match rng.gen_range(0..3) {
                0 => rng.gen_range(0..4),
                1 => rng.gen_range(0..1000),
                _ => rng.gen_range(0..universe.max(1)),
            };
            let hi = lo.saturating_add(width);
            assert_eq!(ef.any_in(lo, hi), naive_any(values, lo, hi), "[{lo}, {hi}]");
        }
    }

    /// The words `new` writes a word at a time are the ones placing each element's bits
    /// one by one gives, for every low-part width from 0 to 62, words ending exactly at an
    /// element's end or mid-element, and upper vectors with long runs of empty words.
    #[test]
    fn new_writes_the_words_each_elements_bits_define() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        let mut cases: Vec<(u64, u64)> = vec![(0, 0), (0, 100), (1, 1), (64, 64), (3, 1 << 62)];
        for l in 0..=62u32 {
            for n in [1u64, 2, 63, 64, 65, 130] {
                cases.push((n, (n << l).max(n) + rng.gen_range(0..n)));
            }
        }
        for (n, universe) in cases {
            let mut values: Vec<u64> = (0..n).map(|_| rng.gen_range(0..universe.max(1))).collect();
            values.sort_unstable();
            values.dedup();
            // Clustered at both ends: empty upper words between.
            if values.len() > 4 && universe > 1 << 20 {
                let half = values.len() / 2;
                for v in &mut values[..half] {
                    *v >>= 16;
                }
                values.sort_unstable();
                values.dedup();
            }
            let ef = EliasFano::new(&values, universe);
            let l = ef.low_bits();
            let mut lows = vec![0u64; ef.low_words().len()];
            let mut upper = vec![0u64; ef.upper_words().len()];
            for (i, &v) in values.iter().enumerate() {
                put_bits(&mut lows, i as u64 * u64::from(l), l, v & low_mask(l));
                let pos = (v >> l) + i as u64;
                upper[(pos / 64) as usize] |= 1 << (pos % 64);
            }
            assert_eq!(lows.len() as u64, words_for(values.len() as u64 * u64::from(l)));
            assert_eq!(ef.low_words(), lows, "{} values below {universe}", values.len());
            assert_eq!(ef.upper_words(), upper, "{} values below {universe}", values.len());
        }
    }

    #[test]
    fn answers_intervals_exactly_for_sparse_dense_and_clustered_sets() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        check(&[], 0, &mut rng);
        check(&[], 100, &mut rng);
        check(&[0], 1, &mut rng);
        check(&[5], 6, &mut rng);
        check(&(0..1000).collect::<Vec<_>>(), 1000, &mut rng);
        for (n, universe) in [(10, 1 << 20), (1000, 1 << 24), (5000, 20_000), (3000, 1 << 40)] {
            let mut v: Vec<u64> = (0..n).map(|_| rng.gen_range(0..universe)).collect();
            v.sort_unstable();
            v.dedup();
            check(&v, universe, &mut rng);
        }
        // Runs of consecutive values (a dense key range hashed block by block): many
        // elements per bucket, so the search inside a bucket matters.
        let mut v = Vec::new();
        for start in [100u64, 70_000, 1 << 30] {
            v.extend(start..start + 3000);
        }
        check(&v, 1 << 32, &mut rng);
        // Buckets whose parts are far from evenly spread (squares; a clump then a sparse
        // tail; a sparse head then a clump): a guess between the first and last part lands
        // off the answer, below it or above it.
        let mut v: Vec<u64> = (0..3000u64).map(|i| i * i).collect();
        v.extend((0..40).map(|i| (1 << 31) + i).chain((1..40).map(|i| (1 << 31) + i * 5000)));
        v.extend(
            (0..40).map(|i| (3 << 30) + i * 5000).chain((0..40).map(|i| (3 << 30) + 200_000 + i)),
        );
        check(&v, 1 << 32, &mut rng);
        // Long runs of empty buckets, so selects cross many words and samples.
        check(&[1, 1 << 35, (1 << 35) + 1, (1 << 36) - 1], 1 << 36, &mut rng);
    }

    #[test]
    fn nth_set_bit_finds_each_set_bit() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let words = [1u64, u64::MAX, 1 << 63, 0x8000_0000_0000_0001, 0x00ff_0000_ff00_00f0];
        for x in words.into_iter().chain((0..2000).map(|_| rng.gen::<u64>() & rng.gen::<u64>())) {
            let positions: Vec<u32> = (0..64).filter(|&i| x >> i & 1 == 1).collect();
            for (n, &p) in positions.iter().enumerate() {
                assert_eq!(nth_set_bit(x, n as u32), p, "{x:#x} bit {n}");
            }
        }
    }

    #[test]
    fn stored_words_are_checked() {
        let ef = EliasFano::new(&[3, 9, 200, 201], 1024);
        let (n, u, l) = (ef.len(), ef.universe(), ef.low_bits());
        let (lows, upper) = (ef.low_words().to_vec(), ef.upper_words().to_vec());
        assert!(from_vecs(n, u, l + 1, lows.clone(), upper.clone()).is_err());
        assert!(from_vecs(n + 1, u, l, lows.clone(), upper.clone()).is_err());
        assert!(from_vecs(n, u, l, vec![], upper.clone()).is_err());
        let mut extra = upper.clone();
        extra[0] |= 1 << 40;
        assert!(from_vecs(n, u, l, lows.clone(), extra).is_err());
        // Low parts out of order inside a bucket: 200 and 201 share one.
        let mut swapped = lows.clone();
        let (a, b) = (get_bits(&lows, 2 * u64::from(l), l), get_bits(&lows, 3 * u64::from(l), l));
        swapped.iter_mut().for_each(|w| *w = 0);
        for (i, v) in [3u64, 9, 201, 200].iter().enumerate() {
            put_bits(&mut swapped, i as u64 * u64::from(l), l, v & low_mask(l));
        }
        assert_ne!(a, b);
        assert!(from_vecs(n, u, l, swapped, upper.clone()).is_err());
        assert!(from_vecs(n, u, l, lows, upper).is_ok());
    }
}
