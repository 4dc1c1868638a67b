//! A range filter per table: "may the table hold a key in `[a, b]`?" answered in RAM, so a
//! short scan skips the tables that hold nothing in its range instead of reading a block of
//! each. Grafite (Costa, Ferragina and Vinciguerra, SIGMOD 2024):
//!
//! 1. Keys become integers by an order-preserving map ([`key_map`]): up to 8 bytes after
//!    the filter's prefix, the longest its keys share.
//! 2. Each integer `x` is hashed by a *locality-preserving* hash into a reduced universe
//!    `r ≈ n · 2^(B−2)` (B bits per key): `code(x) = (q(⌊x / L⌋) + x) mod r`, `q` a random
//!    hash of the block `⌊x / L⌋` onto `[0, r)`. Inside one block of `L` integers codes keep
//!    their distances, so a query of width at most `L` meets at most two blocks and becomes
//!    at most two code intervals (four where one wraps at `r`).
//! 3. The sorted, distinct codes are stored as an Elias–Fano sequence ([`elias_fano`]), in
//!    about `2 + log₂(r/n) = B` bits each, which answers "any code in `[c, d]`?" in a few
//!    word reads.
//!
//! A query of width `w ≤ L` with no key inside is a false positive only if some key of
//! another block lands in its code intervals: with `q` uniform, at most `n · w / r ≈ w /
//! 2^(B−2)`, whatever the keys and the queries (keys of the query's own block keep their
//! distances, so cannot land inside). Wider queries, and bounds the map cannot narrow,
//! answer [`RangeProbe::TooWide`] without a probe: the caller reads the table.
//!
//! # Encoded form (all integers little-endian)
//!
//! ```text
//! offset  size  field
//!      0     4  magic "BKVR"
//!      4     1  format version: 1
//!      5     1  lg_width: L = 2^lg_width, 0..=62
//!      6     1  low_bits l of the Elias–Fano sequence (must equal ⌊log₂(r/n)⌋, 0 if r ≤ n)
//!      7     1  w, the bytes after the prefix each key maps by (0..=8; see `key_map`)
//!      8     8  n, the distinct codes stored
//!     16     8  r, the code universe (0 iff n = 0; else L ≤ r ≤ 2^62)
//!     24     8  keys: distinct integers added (n ≤ keys)
//!     32     8  requested bits per key, f64 bits
//!     40     4  prefix length p
//!     44     p  the prefix
//!   44+p     8·⌈n·l/64⌉   the low parts, packed from bit 0 of the first word
//!      …     8·⌈(n + ⌊(r−1)/2^l⌋ + 1)/64⌉   the upper bit vector (element i: bit (code >> l) + i)
//!      …     4  CRC32 of every preceding byte
//! ```
//!
//! Decoding checks the length, checksum, magic, version, the header's numbers against one
//! another and the byte count against them before it allocates anything, then that the
//! upper vector holds exactly `n` elements, strictly increasing below `r`. Every failure is
//! [`Error::Corruption`].

pub mod elias_fano;
pub mod key_map;

use std::ops::Bound;

use crate::coding::{crc32, get_u32, get_u64, put_u32, put_u64};
use crate::filter_memory::decoded_words;
use crate::{Error, Result};
use elias_fano::{low_bits_for, upper_len_for, words_for, EliasFano, Keep};
use key_map::{common_prefix_len, map_key, map_range, narrow, window, Place, Prefix};

const MAGIC: &[u8; 4] = b"BKVR";
const VERSION: u8 = 1;
const HEADER_LEN: usize = 44;
/// The largest code universe: codes and their sums stay below 2^63.
const MAX_UNIVERSE: u64 = 1 << 62;
/// The seed of `q`, the block hash (part of the format).
const BLOCK_SEED: u64 = 0x6772_6166_6974_6521; // "grafite!"

/// What a range filter answers for a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeProbe {
    /// The filter holds no key in the range: certain.
    Absent,
    /// The filter was probed and some code lies in the range: a key may be there.
    Maybe,
    /// The range is wider than the filter answers for (after mapping): not probed.
    TooWide,
}

/// A query [`RangeFilter::prepare`]d: its mapped integers and the code of the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreparedProbe {
    lo: u64,
    hi: u64,
    code: u64,
}

/// One range's bounds as [`RangeFilter::prepare_reusing`] last mapped them: by which prefix
/// and width, and to what. Start each range with a new one.
#[derive(Debug, Default)]
pub struct MappedBounds<'f>(Option<MappedBy<'f>>);

/// A key map (prefix and width) and the bounds mapped by it (`None`: no key of it between).
type MappedBy<'f> = (&'f Prefix, u32, Option<(u64, u64)>);

/// A range filter over a set of keys (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct RangeFilter {
    prefix: Prefix,
    /// Bytes after the prefix a key maps by.
    width: u32,
    lg_width: u32,
    keys: u64,
    bits_per_key: f64,
    codes: EliasFano,
    /// The codes' universe as a divisor: a probe reduces its integer modulo the universe.
    modulus: Modulus,
}

/// The widest query a filter at `bits_per_key` answers, as a power of two: where the bound
/// `w / 2^(B−2)` reaches a half, past which a probe would mostly say "maybe" anyway.
fn lg_width_for(bits_per_key: f64) -> u32 {
    (bits_per_key.floor() as i64 - 3).clamp(0, 40) as u32
}

/// SplitMix64's finalizer.
#[inline]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl RangeFilter {
    /// Bits per key a filter may be built with: below 4 it answers for no useful width, above
    /// 40 nothing is gained (the universe is capped at 2^62).
    pub const BITS_PER_KEY_RANGE: std::ops::RangeInclusive<f64> = 4.0..=40.0;

    /// The filter over `keys`, given in ascending order (repeats allowed), at
    /// `bits_per_key` (clamped to [`RangeFilter::BITS_PER_KEY_RANGE`]).
    ///
    /// ```
    /// use std::ops::Bound::{Excluded, Included};
    /// use bloomkv_tree::range_filter::RangeFilter;
    ///
    /// let keys: [&[u8]; 3] = [b"user/0100", b"user/0200", b"user/0300"];
    /// let f = RangeFilter::build(keys, 16.0);
    /// assert!(f.may_contain_range(Included(b"user/0150"), Included(b"user/0250")));
    /// // Never a false negative; this empty range is (with probability ~1 - 2^-12) a "no".
    /// let empty = f.may_contain_range(Included(b"user/0201"), Excluded(b"user/0209"));
    /// # let _ = empty;
    /// ```
    pub fn build<'a>(keys: impl IntoIterator<Item = &'a [u8]>, bits_per_key: f64) -> RangeFilter {
        let mut b = RangeFilterBuilder::new(bits_per_key);
        for k in keys {
            b.add_key(k);
        }
        b.finish()
    }

    /// The largest query width (in mapped integers) the filter is probed for.
    pub fn max_width(&self) -> u64 {
        1 << self.lg_width
    }

    /// The prefix every key of the filter shares.
    pub fn prefix(&self) -> &[u8] {
        self.prefix.bytes()
    }

    /// Distinct mapped keys the filter was built over.
    pub fn num_keys(&self) -> u64 {
        self.keys
    }

    /// The bits per key asked for.
    pub fn bits_per_key(&self) -> f64 {
        self.bits_per_key
    }

    /// Bytes after the prefix each key maps by (0 to 8).
    pub fn mapped_bytes(&self) -> u32 {
        self.width
    }

    /// Bits the stored codes take (low parts and upper vector), header and prefix aside.
    pub fn num_bits(&self) -> u64 {
        64 * (self.codes.low_words().len() + self.codes.upper_words().len()) as u64
    }

    /// The bound on the chance that a query of `width` integers holding none of the keys
    /// says "maybe": `width · n / r` for `n` codes in a universe of `r`; 1 for a query wider
    /// than [`RangeFilter::max_width`], which is not probed.
    pub fn fpr_bound(&self, width: u64) -> f64 {
        if width > self.max_width() {
            return 1.0;
        }
        match self.codes.universe() {
            0 => 0.0,
            r => (width as f64 * self.codes.len() as f64 / r as f64).min(1.0),
        }
    }

    /// Heap bytes the filter holds.
    pub fn memory_bytes(&self) -> usize {
        self.prefix.heap_bytes() + self.codes.memory_bytes()
    }

    /// False only if no key of the filter lies in `(start, end)`.
    pub fn may_contain_range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
        self.probe(start, end) != RangeProbe::Absent
    }

    /// False only if no key of the filter equals `key`: the range `[key, key]`, one integer
    /// wide, so a "maybe" for a key absent from the filter comes at about `1 / 2^(B−2)`.
    /// A key sharing its integer with one of the filter's (equal to it in the mapped bytes)
    /// always answers "maybe": the map is monotone, never one-to-one.
    ///
    /// ```
    /// use bloomkv_tree::range_filter::RangeFilter;
    ///
    /// let keys: [&[u8]; 2] = [b"user/0100", b"user/0200"];
    /// let f = RangeFilter::build(keys, 16.0);
    /// assert!(f.may_contain_key(b"user/0100"));
    /// assert!(!f.may_contain_key(b"group/0100")); // outside the keys' prefix: certain
    /// ```
    #[inline]
    pub fn may_contain_key(&self, key: &[u8]) -> bool {
        let Some(p) = self.prepare_key(key) else { return false };
        // The bucket's upper and low words, guessed from the select sample, load together:
        // two dependent misses where the probe alone makes three.
        self.prefetch_words(&p);
        self.probe_prepared(&p) != RangeProbe::Absent
    }

    /// The first half of [`RangeFilter::may_contain_key`], for a caller with other work to
    /// overlap the probe's misses with: `None` when the key map alone says the key is absent,
    /// else the query, for [`RangeFilter::prefetch_sample`], then (once the sample had time
    /// to arrive) [`RangeFilter::prefetch_words`], then [`RangeFilter::probe_prepared`].
    #[inline]
    pub fn prepare_key(&self, key: &[u8]) -> Option<PreparedProbe> {
        // Every key of the filter starts with its prefix.
        if self.prefix.place(key) != Place::Within || self.codes.is_empty() {
            return None;
        }
        let x = map_key(key, self.prefix.len(), self.width);
        Some(PreparedProbe { lo: x, hi: x, code: self.code(x) })
    }

    /// What the filter says of `(start, end)`: [`RangeProbe::Absent`] only if none of its
    /// keys lies there.
    pub fn probe(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> RangeProbe {
        match map_range(&self.prefix, self.width, start, end) {
            None => RangeProbe::Absent,
            Some((lo, hi)) => self.probe_mapped(lo, hi),
        }
    }

    /// The first half of [`RangeFilter::probe`], for a caller that probes many filters and
    /// wants their cache misses to overlap: `Err` with the answer when the key map alone
    /// gives it, else the query, for [`RangeFilter::prefetch_sample`],
    /// [`RangeFilter::prefetch_words`] (each called on every filter before the next) and
    /// then [`RangeFilter::probe_prepared`].
    #[inline]
    pub fn prepare(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> std::result::Result<PreparedProbe, RangeProbe> {
        self.prepare_mapped(map_range(&self.prefix, self.width, start, end))
    }

    /// [`RangeFilter::prepare`] for a caller asking several filters about one range: the
    /// bounds are mapped again only where this filter's key map (prefix and width) differs
    /// from the one `last` mapped them by. L0's tables, which each span the key space,
    /// mostly share theirs.
    #[inline]
    pub fn prepare_reusing<'f>(
        &'f self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        last: &mut MappedBounds<'f>,
    ) -> std::result::Result<PreparedProbe, RangeProbe> {
        let mapped = match last.0 {
            Some((prefix, width, mapped)) if width == self.width && prefix.same(&self.prefix) => {
                mapped
            }
            _ => {
                let mapped = map_range(&self.prefix, self.width, start, end);
                last.0 = Some((&self.prefix, self.width, mapped));
                mapped
            }
        };
        self.prepare_mapped(mapped)
    }

    /// [`RangeFilter::prepare`] of bounds mapped to `[lo, hi]` (`None`: no key of the
    /// filter's map can lie between them).
    #[inline]
    fn prepare_mapped(
        &self,
        mapped: Option<(u64, u64)>,
    ) -> std::result::Result<PreparedProbe, RangeProbe> {
        let Some((lo, hi)) = mapped else {
            return Err(RangeProbe::Absent);
        };
        if self.codes.is_empty() {
            return Err(RangeProbe::Absent);
        }
        if hi - lo >= self.max_width() {
            return Err(RangeProbe::TooWide);
        }
        Ok(PreparedProbe { lo, hi, code: self.code(lo) })
    }

    /// Starts loading the first line a probe of `p` reads (a select sample).
    #[inline]
    pub fn prefetch_sample(&self, p: &PreparedProbe) {
        self.codes.prefetch_sample(p.code);
    }

    /// Starts loading the lines a probe of `p` most likely reads next (the bucket's words),
    /// guessed from its select sample.
    #[inline]
    pub fn prefetch_words(&self, p: &PreparedProbe) {
        self.codes.prefetch_words(p.code);
    }

    /// The answer for a query [`RangeFilter::prepare`]d.
    #[inline]
    pub fn probe_prepared(&self, p: &PreparedProbe) -> RangeProbe {
        self.probe_from(p.lo, p.hi, p.code)
    }

    /// [`RangeFilter::probe`] for the mapped integers `[lo, hi]`.
    pub fn probe_mapped(&self, lo: u64, hi: u64) -> RangeProbe {
        if self.codes.is_empty() {
            return RangeProbe::Absent;
        }
        if hi - lo >= self.max_width() {
            return RangeProbe::TooWide;
        }
        self.probe_from(lo, hi, self.code(lo))
    }

    /// [`RangeFilter::probe_mapped`] of a narrow enough `[lo, hi]` on a filter with codes,
    /// `first` being `lo`'s code.
    #[inline]
    fn probe_from(&self, lo: u64, hi: u64, first: u64) -> RangeProbe {
        let lg = self.lg_width;
        let (b1, b2) = (lo >> lg, hi >> lg);
        let found = if b1 == b2 {
            self.any_code(first, hi - lo)
        } else {
            // Two blocks: the first from lo to its end, the second from its start to hi.
            let second = b2 << lg;
            self.any_code(first, second - 1 - lo) || self.any_code(self.code(second), hi - second)
        };
        if found {
            RangeProbe::Maybe
        } else {
            RangeProbe::Absent
        }
    }

    /// The code of the mapped integer `x`.
    #[inline]
    fn code(&self, x: u64) -> u64 {
        let r = self.modulus.r;
        wrap_add(block_hash(x >> self.lg_width, r), self.modulus.rem(x), r)
    }

    /// True if a code lies in the `len + 1` codes from `c` on, wrapping at the universe.
    fn any_code(&self, c: u64, len: u64) -> bool {
        let r = self.codes.universe();
        match c.checked_add(len).filter(|&end| end < r) {
            Some(end) => self.codes.any_in(c, end),
            None => self.codes.any_in(c, r - 1) || self.codes.any_in(0, c + len - r),
        }
    }

    /// The encoded form (see the module documentation).
    pub fn encode(&self) -> Vec<u8> {
        let (lows, upper) = (self.codes.low_words(), self.codes.upper_words());
        let mut b =
            Vec::with_capacity(HEADER_LEN + self.prefix.len() + 8 * (lows.len() + upper.len()) + 4);
        b.extend_from_slice(MAGIC);
        let (lg, low) = (self.lg_width as u8, self.codes.low_bits() as u8);
        b.extend_from_slice(&[VERSION, lg, low, self.width as u8]);
        put_u64(&mut b, self.codes.len());
        put_u64(&mut b, self.codes.universe());
        put_u64(&mut b, self.keys);
        put_u64(&mut b, self.bits_per_key.to_bits());
        put_u32(&mut b, self.prefix.len() as u32);
        b.extend_from_slice(self.prefix.bytes());
        for w in lows.iter().chain(upper) {
            put_u64(&mut b, *w);
        }
        let crc = crc32(&[&b]);
        put_u32(&mut b, crc);
        b
    }

    /// Decodes [`RangeFilter::encode`]'s bytes, checking everything (see the module
    /// documentation); offsets in errors are within `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<RangeFilter> {
        let bad =
            |at: usize, why: String| Error::bad_bytes(at as u64, format!("range filter: {why}"));
        if bytes.len() < HEADER_LEN + 4 {
            return Err(bad(0, format!("{} bytes is too short", bytes.len())));
        }
        let body = bytes.len() - 4;
        let stored = get_u32(bytes, body).expect("length checked");
        if crc32(&[&bytes[..body]]) != stored {
            return Err(bad(body, "checksum mismatch".into()));
        }
        if &bytes[..4] != MAGIC {
            return Err(bad(0, "bad magic".into()));
        }
        if bytes[4] != VERSION {
            return Err(bad(4, format!("unknown version {}", bytes[4])));
        }
        let (lg_width, low_bits) = (u32::from(bytes[5]), u32::from(bytes[6]));
        if lg_width > 62 {
            return Err(bad(5, format!("width 2^{lg_width}")));
        }
        let width = u32::from(bytes[7]);
        if width > 8 {
            return Err(bad(7, format!("keys mapped by {width} bytes")));
        }
        let field = |at| get_u64(bytes, at).expect("length checked");
        let (n, universe, keys) = (field(8), field(16), field(24));
        let bits_per_key = f64::from_bits(field(32));
        if (n == 0) != (universe == 0)
            || universe > MAX_UNIVERSE
            || (n > 0 && universe < 1 << lg_width)
            || n > universe
            || n > keys
        {
            return Err(bad(8, format!("{n} codes of {keys} keys in a universe of {universe}")));
        }
        if !bits_per_key.is_finite() || bits_per_key < 0.0 {
            return Err(bad(32, format!("bits per key {bits_per_key}")));
        }
        if low_bits != low_bits_for(n, universe) {
            return Err(bad(6, format!("{low_bits} low bits for {n} codes below {universe}")));
        }
        let prefix_len = get_u32(bytes, 40).expect("length checked") as usize;
        let prefix_end = HEADER_LEN
            .checked_add(prefix_len)
            .filter(|&e| e <= body)
            .ok_or_else(|| bad(40, format!("prefix of {prefix_len} bytes runs past the end")))?;
        // Sizes from the header, with checked arithmetic, compared with the bytes present
        // before anything is allocated.
        let low_words = n.checked_mul(u64::from(low_bits)).map(words_for);
        let upper_words = upper_len_for(n, universe, low_bits).map(words_for);
        let want = low_words
            .zip(upper_words)
            .and_then(|(l, u)| l.checked_add(u))
            .and_then(|w| w.checked_mul(8));
        if want != Some((body - prefix_end) as u64) {
            return Err(bad(
                prefix_end,
                format!("{} bytes of codes, header implies {want:?}", body - prefix_end),
            ));
        }
        let low_end = prefix_end + 8 * low_words.expect("checked") as usize;
        // An open table's filter: its words go to the huge-page arena.
        let (lows, upper) =
            (decoded_words(&bytes[prefix_end..low_end]), decoded_words(&bytes[low_end..body]));
        let codes = EliasFano::from_words(n, universe, low_bits, lows, upper, Keep::Open)
            .map_err(|why| bad(prefix_end, why))?;
        let prefix = Prefix::new(bytes[HEADER_LEN..prefix_end].to_vec());
        let modulus = Modulus::new(codes.universe());
        Ok(RangeFilter { prefix, width, lg_width, keys, bits_per_key, codes, modulus })
    }
}

/// `(q(⌊x / 2^lg⌋) + x) mod r`, with `q` the block's hash onto `[0, r)`: the definition the
/// build's [`codes_in_place`] and a probe's `RangeFilter::code` are tested against.
#[cfg(test)]
fn code(x: u64, lg_width: u32, r: u64) -> u64 {
    wrap_add(block_hash(x >> lg_width, r), x % r, r)
}

/// A divisor `r` (at most 2^62) with its reciprocal, `⌊(2^64 − 1) / r⌋`: `x mod r` by two
/// multiplications where a 64-bit division takes tens of cycles, and a probe reduces one or
/// two integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Modulus {
    r: u64,
    inverse: u64,
}

impl Modulus {
    fn new(r: u64) -> Self {
        Modulus { r, inverse: u64::MAX.checked_div(r).unwrap_or(0) }
    }

    /// `x mod r` (for `r > 0`). The quotient estimate `⌊x · inverse / 2^64⌋` is at most two
    /// below the true one (`inverse > (2^64 − 1) / r − 1` and `x < 2^64`), so the remainder
    /// it leaves is below `3r`, which two conditional subtractions bring below `r`; `3r`
    /// fits in 64 bits as `r ≤ 2^62`.
    #[inline]
    fn rem(self, x: u64) -> u64 {
        let q = ((u128::from(x) * u128::from(self.inverse)) >> 64) as u64;
        let m = x - q * self.r;
        let m = m.min(m.wrapping_sub(self.r));
        m.min(m.wrapping_sub(self.r))
    }
}

/// `q(b)`: block `b`'s hash onto `[0, r)`.
#[inline]
fn block_hash(b: u64, r: u64) -> u64 {
    ((u128::from(mix(b ^ BLOCK_SEED)) * u128::from(r)) >> 64) as u64
}

/// `(a + b) mod r` for `a, b < r ≤ 2^62`: the sum cannot overflow, and is below `2r`.
/// Without a branch (`c − r` wraps above `c` when `c < r`): whether a hashed code wraps is
/// a coin toss, which a branch mispredicts half the time.
#[inline]
fn wrap_add(a: u64, b: u64, r: u64) -> u64 {
    let c = a + b;
    c.min(c.wrapping_sub(r))
}

/// Replaces each integer of `xs`, ascending, by its [`code`]. The codes of one block are
/// its first's plus the distance, wrapping at `r`: a block's hash and remainder are computed
/// once, not per key (their divisions were most of a build's cost). The remainder is carried
/// from the block before when the step between them is below `r`, as it is for a table's
/// keys, so a division is paid only after a wide gap: tables whose keys are each alone in
/// their block paid one per key.
fn codes_in_place(xs: &mut [u64], lg_width: u32, r: u64) {
    let mut block = None;
    // `base % r`, and the code of `base`, block `block`'s first integer.
    let (mut base, mut rem, mut base_code) = (0, 0, 0);
    for x in xs.iter_mut() {
        let b = *x >> lg_width;
        if block != Some(b) {
            let next = b << lg_width;
            rem = match block {
                Some(_) if next - base < r => wrap_add(rem, next - base, r),
                _ => next % r,
            };
            block = Some(b);
            base = next;
            base_code = wrap_add(block_hash(b, r), rem, r);
        }
        // `x − base < 2^lg_width ≤ r` and `base_code < r`: one subtraction wraps the sum.
        *x = wrap_add(base_code, *x - base, r);
    }
}

/// Below this many codes a comparison sort is as quick as counting.
const COUNTING_SORT_MIN: usize = 64;
/// Up to `2^ONE_PASS_LG` fine buckets, one pass: their counters (256 KiB) stay in L2, and a
/// top pass would cost more than the misses it saves.
const ONE_PASS_LG: u32 = 16;
/// Fine buckets counted at once after a top pass: their counters (16 KiB) stay in L1 while a
/// slice is scattered, where one histogram over all `n` buckets misses the cache on most
/// keys.
const FINE_LG: u32 = 12;
/// At most this many top-level buckets: the first pass writes to as many places at once, and
/// 1,024 streams stay within the L2 cache and the TLB, so its writes are near sequential.
const MAX_TOP_LG: u32 = 10;

/// Sorts codes below `universe` in about `n` fine buckets by their high bits (the
/// Elias–Fano split), then each fine bucket, mostly of one or a few codes: linear where a
/// comparison sort of hashed codes was a third of a build. With many buckets, a first pass
/// splits the codes by their top bits into slices of a few thousand fine buckets each, so
/// the second pass counts and scatters inside the cache; a single pass over `n` buckets
/// made a cache miss (a histogram of `4n` bytes, an array of `8n`) on nearly every key.
fn sort_codes(codes: &mut Vec<u64>, universe: u64) {
    let n = codes.len();
    if n < COUNTING_SORT_MIN || n >= u32::MAX as usize {
        codes.sort_unstable();
        return;
    }
    let shift = low_bits_for(n as u64, universe);
    // Bits of a fine bucket's number.
    let span = 64 - ((universe - 1) >> shift).leading_zeros();
    let top_lg = if span <= ONE_PASS_LG { 0 } else { span.saturating_sub(FINE_LG).min(MAX_TOP_LG) };
    let fine_lg = span - top_lg;
    let mut scratch = vec![0u64; n];
    if top_lg == 0 {
        // Exactly the buckets there are: the scan for buckets to sort visits each.
        let mut counts = vec![0u32; ((universe - 1) >> shift) as usize + 2];
        count_into(codes, &mut scratch, shift, fine_lg, &mut counts);
        *codes = scratch;
        return;
    }
    // Top pass: `tops` as `counts` in `count_into`, by the bits above the fine ones.
    let top_shift = shift + fine_lg;
    let mut tops = vec![0u32; (1 << top_lg) + 1];
    for &c in codes.iter() {
        tops[(c >> top_shift) as usize + 1] += 1;
    }
    for t in 1..tops.len() {
        tops[t] += tops[t - 1];
    }
    let mut at = tops.clone();
    let mut counts = vec![0u32; (1 << fine_lg) + 1];
    for &c in codes.iter() {
        let slot = &mut at[(c >> top_shift) as usize];
        scratch[*slot as usize] = c;
        *slot += 1;
    }
    for t in tops.windows(2) {
        let (a, b) = (t[0] as usize, t[1] as usize);
        if b - a > 1 {
            count_into(&scratch[a..b], &mut codes[a..b], shift, fine_lg, &mut counts);
        } else {
            codes[a..b].copy_from_slice(&scratch[a..b]);
        }
    }
}

/// Writes `src` to `dst` sorted, counted by bits `shift..shift + fine_lg` (the ones above
/// are equal throughout `src`), then each bucket sorted. `counts` has a counter more than
/// the buckets `src` meets, at most `2^fine_lg`: `counts[h]` counts bucket h−1, then after
/// the sums is where bucket h starts, then after the scatter where it ends.
fn count_into(src: &[u64], dst: &mut [u64], shift: u32, fine_lg: u32, counts: &mut [u32]) {
    let mask = (1u64 << fine_lg) - 1;
    let bucket = |c: u64| ((c >> shift) & mask) as usize;
    counts.fill(0);
    for &c in src {
        counts[bucket(c) + 1] += 1;
    }
    for h in 1..counts.len() {
        counts[h] += counts[h - 1];
    }
    for &c in src {
        let at = &mut counts[bucket(c)];
        dst[*at as usize] = c;
        *at += 1;
    }
    let mut start = 0;
    for &end in &counts[..counts.len() - 1] {
        let end = end as usize;
        if end - start > 1 {
            sort_bucket(&mut dst[start..end]);
        }
        start = end;
    }
}

/// Sorts one fine bucket's codes: a few (one to three, or a block's run of up to a handful,
/// already in order) by insertion inline, where a call into the general sort, with its
/// checks for a few elements, cost more than the sorting.
#[inline]
fn sort_bucket(codes: &mut [u64]) {
    if codes.len() > 16 {
        codes.sort_unstable();
        return;
    }
    for i in 1..codes.len() {
        let c = codes[i];
        let mut j = i;
        while j > 0 && codes[j - 1] > c {
            codes[j] = codes[j - 1];
            j -= 1;
        }
        codes[j] = c;
    }
}

/// Builds a [`RangeFilter`] from keys added in ascending order, and a few more in any order.
///
/// A key's integer depends on the prefix all keys share, which is known only at the end.
/// Keys arrive sorted, so the prefix they share with the first one only shrinks: each key
/// is kept as the 8 bytes after the prefix *so far*, which hold the 8 bytes after any
/// shorter final prefix once the first key's bytes are put in front (8 bytes per key, not
/// the key).
#[derive(Debug)]
pub struct RangeFilterBuilder {
    bits_per_key: f64,
    first: Option<Vec<u8>>,
    /// The prefix all sorted keys so far share with the first.
    shared: usize,
    /// The longest key added.
    longest: usize,
    /// `(index of the first value kept with this prefix length, the length)`.
    runs: Vec<(usize, usize)>,
    values: Vec<u64>,
    /// Keys added out of order (range tombstones' starts), kept whole.
    extra: Vec<Vec<u8>>,
}

impl RangeFilterBuilder {
    /// A builder at `bits_per_key` (clamped to [`RangeFilter::BITS_PER_KEY_RANGE`]).
    pub fn new(bits_per_key: f64) -> Self {
        let (lo, hi) =
            (*RangeFilter::BITS_PER_KEY_RANGE.start(), *RangeFilter::BITS_PER_KEY_RANGE.end());
        let bits_per_key = if bits_per_key.is_nan() { lo } else { bits_per_key.clamp(lo, hi) };
        RangeFilterBuilder {
            bits_per_key,
            first: None,
            shared: 0,
            longest: 0,
            runs: Vec::new(),
            values: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// Adds a key at or after every key added with this method before.
    pub fn add_key(&mut self, key: &[u8]) {
        self.longest = self.longest.max(key.len());
        let Some(first) = &self.first else {
            self.first = Some(key.to_vec());
            self.shared = key.len();
            self.runs.push((0, key.len()));
            self.values.push(window(key, key.len()));
            return;
        };
        // Only the bytes still shared can shrink the prefix. Keys that differ in their first
        // 8 bytes (most, once the prefix has shrunk to what a table's keys share) need one
        // word compared, not a loop over the prefix's bytes.
        let shared = match (first.first_chunk::<8>(), key.first_chunk::<8>()) {
            (Some(a), Some(b)) if a != b => {
                let diff = u64::from_be_bytes(*a) ^ u64::from_be_bytes(*b);
                self.shared.min(diff.leading_zeros() as usize / 8)
            }
            _ => common_prefix_len(&first[..self.shared], key),
        };
        if shared != self.shared {
            self.shared = shared;
            self.runs.push((self.values.len(), shared));
        }
        let x = window(key, shared);
        // Versions and keys equal in the window map alike: keep one.
        if self.runs.last().is_some_and(|&(i, _)| i < self.values.len())
            && self.values.last() == Some(&x)
        {
            return;
        }
        self.values.push(x);
    }

    /// Adds a key in any order (a range tombstone's start).
    pub fn add_unordered(&mut self, key: &[u8]) {
        self.longest = self.longest.max(key.len());
        self.extra.push(key.to_vec());
    }

    /// Keys added so far (sorted ones kept, and unordered ones).
    pub fn len(&self) -> usize {
        self.values.len() + self.extra.len()
    }

    /// True before any key is added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The filter over every key added.
    pub fn finish(self) -> RangeFilter {
        let lg_width = lg_width_for(self.bits_per_key);
        // The prefix of everything: the sorted keys' with the first, cut by each extra key.
        let anchor: Option<&[u8]> = self.first.as_deref().or(self.extra.first().map(|k| &k[..]));
        let Some(anchor) = anchor else {
            return RangeFilter {
                prefix: Prefix::default(),
                width: 0,
                lg_width,
                keys: 0,
                bits_per_key: self.bits_per_key,
                codes: EliasFano::new(&[], 0),
                modulus: Modulus::new(0),
            };
        };
        let mut p = if self.first.is_some() { self.shared } else { anchor.len() };
        for k in &self.extra {
            p = p.min(common_prefix_len(anchor, k));
        }
        let prefix = Prefix::new(anchor[..p].to_vec());
        let width = (self.longest - p).min(8) as u32;
        // The kept windows become the keys' integers in place, then their codes: a table
        // build pays for one array of 8 bytes per key, not three.
        let mut xs = self.values;
        for (r, &(start, kept)) in self.runs.iter().enumerate() {
            let end = self.runs.get(r + 1).map_or(xs.len(), |&(i, _)| i);
            // Values kept after `kept` bytes; the final prefix is `p ≤ kept` bytes, and the
            // key's bytes between are the anchor's.
            let d = kept - p;
            let head = window(&anchor[..kept], p);
            for v in &mut xs[start..end] {
                let x8 = if d >= 8 { head } else { head | *v >> (8 * d) };
                *v = narrow(x8, width);
            }
        }
        xs.extend(self.extra.iter().map(|k| map_key(k, p, width)));
        // Ascending already (sorted keys, a monotone map) unless range tombstones' starts
        // were added.
        if !self.extra.is_empty() {
            xs.sort_unstable();
        }
        xs.dedup();
        let keys = xs.len() as u64;
        let scaled = keys as f64 * (self.bits_per_key - 2.0).exp2();
        let universe =
            if scaled >= MAX_UNIVERSE as f64 { MAX_UNIVERSE } else { scaled.ceil() as u64 };
        let universe = universe.max(1 << lg_width).min(MAX_UNIVERSE);
        let mut codes = xs;
        codes_in_place(&mut codes, lg_width, universe);
        sort_codes(&mut codes, universe);
        codes.dedup();
        RangeFilter {
            prefix,
            width,
            lg_width,
            keys,
            bits_per_key: self.bits_per_key,
            codes: EliasFano::new(&codes, universe),
            modulus: Modulus::new(universe),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Bound::{Excluded, Included, Unbounded};

    fn be(i: u64) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    /// Bounds mapped once and reused for the next filter with the same key map prepare the
    /// same query as mapping them for each filter, over filters whose maps are the same
    /// (two tables' worth of 8-byte integers), differ in width (shorter keys), differ in a
    /// short prefix, or share a long prefix's first 8 bytes and differ after them.
    #[test]
    fn bounds_mapped_once_prepare_what_each_filter_maps_itself() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        let ints = |from: u64, step: u64| -> Vec<Vec<u8>> {
            (0..300).map(|i| be(from + i * step)).collect()
        };
        let long = |tail: &[u8]| -> Vec<Vec<u8>> {
            (0..300u32)
                .map(|i| [b"sensor/000".as_slice(), tail, &i.to_be_bytes()].concat())
                .collect()
        };
        let key_sets = [
            ints(1 << 20, 1000),
            ints(1 << 20, 777),
            ints(1 << 20, 1000).into_iter().map(|k| k[..7].to_vec()).collect(),
            ints(5 << 40, 1000),
            long(b"7"),
            long(b"7"),
            long(b"8"),
        ];
        let filters: Vec<RangeFilter> = key_sets
            .iter()
            .map(|keys| RangeFilter::build(keys.iter().map(|k| k.as_slice()), 14.0))
            .collect();
        for _ in 0..2000 {
            let set = &key_sets[rng.gen_range(0..key_sets.len())];
            let mut lo = set[rng.gen_range(0..set.len())].clone();
            let last = lo.len() - 1;
            lo[last] = lo[last].wrapping_add(rng.gen_range(0..4));
            let mut hi = lo.clone();
            hi[last] = hi[last].saturating_add(rng.gen_range(0..40));
            let (start, end) = (Included(&lo[..]), Excluded(&hi[..]));
            let mut mapped = MappedBounds::default();
            for f in &filters {
                assert_eq!(f.prepare_reusing(start, end, &mut mapped), f.prepare(start, end));
            }
        }
    }

    /// An open table's filter (decoded) keeps its words in huge-page memory; one built to be
    /// encoded does not take from it.
    #[test]
    fn a_decoded_filter_keeps_its_words_in_huge_page_memory() {
        let keys: Vec<Vec<u8>> = (0..50_000u64).map(|i| be(i * 1000)).collect();
        let built = RangeFilter::build(keys.iter().map(Vec::as_slice), 16.0);
        assert!(!built.codes.in_huge_pages());
        let f = RangeFilter::decode(&built.encode()).unwrap();
        assert!(f.codes.in_huge_pages());
        assert_eq!(f, built);
        for k in &keys {
            assert!(f.may_contain_key(k));
        }
    }

    /// The sorted keys' integers, rebuilt from the kept windows, are what mapping each key
    /// with the final prefix gives, however the shared prefix shrank along the way.
    #[test]
    fn kept_windows_rebuild_each_keys_integer() {
        let keys: Vec<&[u8]> = vec![
            b"account/0001/a",
            b"account/0001/b",
            b"account/0001/b\x00",
            b"account/0002",
            b"account/01",
            b"account/1",
            b"accounts",
            b"b",
        ];
        for end in 1..=keys.len() {
            let mut b = RangeFilterBuilder::new(16.0);
            keys[..end].iter().for_each(|k| b.add_key(k));
            let f = b.finish();
            let p = common_prefix_len(keys[0], keys[end - 1]);
            assert_eq!(f.prefix(), &keys[0][..p]);
            for k in &keys[..end] {
                assert!(f.may_contain_range(Included(k), Included(k)), "{k:?}");
            }
        }
        // Extra keys below and above the sorted ones cut the prefix further.
        let mut b = RangeFilterBuilder::new(16.0);
        b.add_key(b"m/1");
        b.add_key(b"m/2");
        b.add_unordered(b"m");
        b.add_unordered(b"a");
        let f = b.finish();
        assert_eq!(f.prefix(), b"");
        for k in [&b"m/1"[..], b"m/2", b"m", b"a"] {
            assert!(f.may_contain_range(Included(k), Included(k)), "{k:?}");
        }
    }

    /// The build's shortcuts (codes block by block, a counting sort) store exactly the codes
    /// the definition gives: each distinct integer's `code`, sorted, repeats dropped.
    #[test]
    fn the_build_stores_the_defined_codes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut random: Vec<u64> = (0..20_000).map(|_| rng.gen()).collect();
        random.sort_unstable();
        let sets: Vec<Vec<Vec<u8>>> = vec![
            (0..5_000u64).map(|i| be(1_000_000 + i)).collect(),
            (0..20_000u64).map(|i| be(i * 1_000)).collect(),
            random.iter().map(|&x| be(x)).collect(),
            (0..3_000u64).map(|i| format!("user/{:09}/x", i * 37).into_bytes()).collect(),
            (0..40u64).map(be).collect(),
        ];
        for bits in [4.0, 10.0, 16.0, 23.5, 40.0] {
            for keys in &sets {
                let f = RangeFilter::build(keys.iter().map(|k| &k[..]), bits);
                let p = f.prefix().len();
                let mut xs: Vec<u64> = keys.iter().map(|k| map_key(k, p, f.width)).collect();
                xs.dedup();
                let r = f.codes.universe();
                let mut want: Vec<u64> = xs.iter().map(|&x| code(x, f.lg_width, r)).collect();
                want.sort_unstable();
                want.dedup();
                let mut got = Vec::new();
                f.codes.for_each(|c| got.push(c));
                assert_eq!(f.num_keys(), xs.len() as u64);
                assert!(got == want, "{bits} bits, {} keys", keys.len());
            }
        }
    }

    /// Codes computed block by block, each block's remainder carried from the one before,
    /// are each integer's `code`, for steps between integers just below, at and above the
    /// universe (where the carry gives way to a division) and within one block.
    #[test]
    fn the_modulus_reduces_as_the_remainder_operator_does() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let edges = [0, 1, 2, 3, u64::MAX, u64::MAX - 1, 1 << 62, (1 << 62) - 1, 1 << 63];
        let divisors = [1, 2, 3, 7, 1 << 20, (1 << 20) + 1, MAX_UNIVERSE - 1, MAX_UNIVERSE];
        let drawn: Vec<u64> = (0..2000).map(|_| rng.gen_range(1..=MAX_UNIVERSE)).collect();
        for r in divisors.into_iter().chain(drawn) {
            let m = Modulus::new(r);
            let near = [r - 1, r, r + 1, 2 * r, 3 * r - 1, 3 * r];
            for x in edges.into_iter().chain(near).chain((0..50).map(|_| rng.gen())) {
                assert_eq!(m.rem(x), x % r, "{x} mod {r}");
            }
        }
    }

    #[test]
    fn codes_in_place_gives_each_integers_code() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        for (lg, r) in
            [(0, 1), (3, 8), (3, 1_000_003), (13, 1 << 13), (13, 655_360_007), (37, 1 << 62)]
        {
            let steps = [1, (1 << lg) - 1, 1 << lg, (1 << lg) + 1, r - 1, r, r + 1, 3 * r];
            let mut xs = vec![rng.gen_range(0..1u64 << 40)];
            for _ in 0..5_000 {
                let step = match rng.gen_range(0..10) {
                    0..=7 => steps[rng.gen_range(0..steps.len())],
                    _ => rng.gen_range(1..=2 * r),
                };
                let Some(x) = xs.last().unwrap().checked_add(step.max(1)) else { break };
                xs.push(x);
            }
            let want: Vec<u64> = xs.iter().map(|&x| code(x, lg, r)).collect();
            codes_in_place(&mut xs, lg, r);
            assert!(xs == want, "2^{lg} wide blocks, universe {r}");
        }
    }

    /// The two-pass counting sort orders codes exactly as a comparison sort does, at every
    /// size around its thresholds (comparison sort below `COUNTING_SORT_MIN`, one pass up to
    /// `2^ONE_PASS_LG` fine buckets, slices of `2^FINE_LG`, the top pass capped at
    /// `2^MAX_TOP_LG` buckets) and for the
    /// inputs that stress it: all codes equal, all in one top or one fine bucket, all at the
    /// universe's end, ascending, descending.
    #[test]
    fn sort_codes_orders_as_a_comparison_sort() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let fine = 1usize << FINE_LG;
        let mut sizes = vec![0, 1, 2, COUNTING_SORT_MIN - 1, COUNTING_SORT_MIN, 1_000];
        for edge in
            [fine / 2, fine, 2 * fine, 1 << ONE_PASS_LG, 2 << ONE_PASS_LG, fine << MAX_TOP_LG]
        {
            sizes.extend([edge - 1, edge, edge + 1]);
        }
        // Beyond the cap on top buckets: each slice holds more than `2^FINE_LG` buckets.
        sizes.push((fine << MAX_TOP_LG) * 3 / 2);
        for &n in &sizes {
            // Universes from n itself (a code per bucket) up past the filter's widest ratio,
            // and ones just off a power of two.
            for universe in [n as u64 + 1, 4 * n as u64 + 3, ((n as u64) << 14).max(1), 1 << 62] {
                let shift = low_bits_for(n as u64, universe);
                let top_width = 1u64 << (shift + FINE_LG).min(62);
                let inputs: Vec<Vec<u64>> = vec![
                    (0..n).map(|_| rng.gen_range(0..universe)).collect(),
                    vec![universe - 1; n],
                    vec![0; n],
                    (0..n).map(|_| rng.gen_range(0..top_width.min(universe))).collect(),
                    (0..n).map(|_| rng.gen_range(0..(1u64 << shift).min(universe))).collect(),
                    (0..n)
                        .map(|_| universe - 1 - rng.gen_range(0..(2u64 << shift).min(universe)))
                        .collect(),
                    (0..n as u64).map(|i| i * (universe / n.max(1) as u64)).collect(),
                    (0..n as u64).rev().map(|i| i * (universe / n.max(1) as u64)).collect(),
                ];
                for (i, mut codes) in inputs.into_iter().enumerate() {
                    let mut want = codes.clone();
                    want.sort_unstable();
                    sort_codes(&mut codes, universe);
                    assert!(codes == want, "{n} codes below {universe}, input {i}");
                }
            }
        }
    }

    /// A key alone is the range `[key, key]`: every key of the filter answers "maybe",
    /// keys of any length and bytes answer as that range does, and the prepared probe (with
    /// its prefetches) answers as the plain one.
    #[test]
    fn a_key_alone_answers_as_its_one_key_range() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let gen = |rng: &mut rand::rngs::StdRng| -> Vec<u8> {
            let len = rng.gen_range(0..14);
            let mut k = b"ev/".to_vec();
            k.extend(
                (0..len).map(|_| *[0u8, 1, 7, 0xff].get(rng.gen_range(0..6)).unwrap_or(&rng.gen())),
            );
            k
        };
        let mut keys: Vec<Vec<u8>> = (0..2_000).map(|_| gen(&mut rng)).collect();
        keys.sort();
        for bits in [4.0, 9.0, 18.0] {
            let f = RangeFilter::build(keys.iter().map(|k| &k[..]), bits);
            assert!(keys.iter().all(|k| f.may_contain_key(k)));
            for _ in 0..5_000 {
                let mut q = gen(&mut rng);
                if rng.gen_bool(0.1) {
                    q[0] = b'a';
                }
                let range = f.probe(Included(&q), Included(&q));
                assert_eq!(f.may_contain_key(&q), range != RangeProbe::Absent, "{q:?}");
                let hi = [&q[..], &[rng.gen::<u8>()]].concat();
                let prepared = f.prepare(Included(&q), Included(&hi)).map(|p| {
                    f.prefetch_sample(&p);
                    f.prefetch_words(&p);
                    f.probe_prepared(&p)
                });
                assert_eq!(prepared.unwrap_or_else(|a| a), f.probe(Included(&q), Included(&hi)));
            }
        }
    }

    #[test]
    fn empty_filters_and_bounds_outside_the_prefix_say_no() {
        // Keys of 8 bytes past the prefix: a range over all of them is too wide.
        let keys: [&[u8]; 2] = [b"k/12345678", b"k/99999999"];
        assert_eq!(RangeFilter::build(keys, 16.0).probe(Unbounded, Unbounded), RangeProbe::TooWide);
        let f = RangeFilterBuilder::new(16.0).finish();
        assert_eq!(f.probe(Unbounded, Unbounded), RangeProbe::Absent);
        let f = RangeFilter::decode(&f.encode()).unwrap();
        assert_eq!(f.probe(Unbounded, Unbounded), RangeProbe::Absent);

        let keys: [&[u8]; 2] = [b"k/1", b"k/9"];
        let f = RangeFilter::build(keys, 16.0);
        assert_eq!(f.probe(Included(b"l"), Unbounded), RangeProbe::Absent);
        assert_eq!(f.probe(Unbounded, Excluded(b"k/")), RangeProbe::Absent);
        assert_eq!(f.probe(Included(b"k/5"), Excluded(b"k/1")), RangeProbe::Absent);
        // Keys of one byte past the prefix map to one byte's 256 values: every range is
        // narrow enough to probe.
        assert_eq!(f.probe(Unbounded, Unbounded), RangeProbe::Maybe);
        assert_eq!(f.probe(Included(b"k/1"), Excluded(b"k/2")), RangeProbe::Maybe);
        assert_eq!(f.probe(Excluded(b"k/0"), Included(b"k/1")), RangeProbe::Maybe);
        assert_eq!(f.probe(Included(b"k/2"), Included(b"k/8")), RangeProbe::Absent);
        // One byte's values are 256 integers: narrow enough to probe, whatever the bounds.
        assert_eq!(f.probe(Included(b"k/2"), Unbounded), RangeProbe::Maybe);
        assert_eq!(f.probe(Excluded(b"k/9"), Unbounded), RangeProbe::Maybe);
        assert_eq!(f.probe(Included(b"k/\xfe"), Unbounded), RangeProbe::Absent);
    }

    #[test]
    fn dense_integer_keys_answer_every_short_range_exactly_around_them() {
        // Every 3rd integer from 10^6: ranges of width 1 between keys are empty; with dense
        // keys each block holds many, so codes cluster and the bucket search is exercised.
        let keys: Vec<Vec<u8>> = (0..30_000u64).map(|i| be(1_000_000 + 3 * i)).collect();
        let f = RangeFilter::build(keys.iter().map(|k| &k[..]), 18.0);
        let mut false_positives = 0;
        for i in 0..30_000u64 {
            let k = 1_000_000 + 3 * i;
            assert!(f.may_contain_range(Included(&be(k)), Included(&be(k))));
            assert!(f.may_contain_range(Included(&be(k - 1)), Included(&be(k + 1))));
            false_positives +=
                u32::from(f.may_contain_range(Included(&be(k + 1)), Included(&be(k + 2))));
        }
        // Width 2 at 18 bits per key: bound 2 / 2^16 per query.
        assert!(false_positives < 30, "{false_positives}");
    }

    #[test]
    fn round_trips_and_refuses_damage_without_panicking() {
        let keys: Vec<Vec<u8>> =
            (0..500u64).map(|i| format!("key{:05}", i * 7).into_bytes()).collect();
        let f = RangeFilter::build(keys.iter().map(|k| &k[..]), 12.5);
        let bytes = f.encode();
        assert_eq!(RangeFilter::decode(&bytes).unwrap(), f);
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= flip;
                let e = RangeFilter::decode(&b).unwrap_err();
                assert!(e.is_corruption(), "{e:?}");
            }
        }
        for len in 0..bytes.len() {
            assert!(RangeFilter::decode(&bytes[..len]).unwrap_err().is_corruption());
        }
        // A header that claims huge sizes, with a valid checksum, allocates nothing.
        let mut b = bytes[..bytes.len() - 4].to_vec();
        b[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        b[16..24].copy_from_slice(&(1u64 << 62).to_le_bytes());
        b[24..32].copy_from_slice(&(1u64 << 41).to_le_bytes());
        b[6] = 22;
        let crc = crc32(&[&b]);
        put_u32(&mut b, crc);
        assert!(RangeFilter::decode(&b).unwrap_err().is_corruption());
    }
}
