//! Per-table whole-key filters: the cache-line-blocked Bloom filter that is bloomkv's reason
//! to exist, the Ribbon filter that holds the same false-positive rate in about 30% less
//! memory (`ribbon.rs`), the classic Bloom filter they are measured against, and "no filter"; and
//! the budget allocator (`budget.rs`), which splits one filter memory budget across a
//! tree's tables ([`FilterPolicy::Budgeted`]).
//!
//! A lookup hashes its key once with [`hash_key`] and hands the hash to every table it
//! consults ([`Filter::may_contain_hash`]); nothing else is recomputed per table.
//!
//! # Encoded form
//!
//! A filter is stored (as the filter block of a table) in this layout, all integers
//! little-endian:
//!
//! ```text
//! offset  size  field
//!      0     4  magic "BKVF"
//!      4     1  format version (1)
//!      5     1  kind: 0 = none, 1 = blocked Bloom, 2 = classic Bloom, 3 = Ribbon
//!      6     1  probes per key k (0 for none); Ribbon: result bits r, 1 to 32
//!      7     1  reserved, 0
//!      8     8  number of keys added
//!     16     8  requested bits per key, IEEE-754 f64 bits
//!     24     8  m, the number of bits in the array (blocked: a multiple of 512);
//!               Ribbon: the number of slots (0, or a multiple of 64 from 128)
//!     32   m/8  the bit array as u64 words (blocked: 8 words per 64-byte line);
//!               classic arrays are rounded up to whole words
//!  32+m/8    4  CRC32 of every preceding byte
//! ```
//!
//! A Ribbon filter's body is 8 bytes of parameters (the seed, then seven zero bytes) and then
//! its interleaved solution, `(m/64 + 1) · r` u64 words (see `ribbon.rs`).
//!
//! Decoding checks the checksum, magic, version, kind, probe count, and that the array
//! length implied by the header is exactly the bytes present, so a damaged length can never
//! size an allocation.
//!
//! The hash ([`hash_key`], XXH3-64 with seed 0) and the probe derivations in `blocked.rs` and
//! `classic.rs` are part of the format: changing either would make old filters answer "no"
//! for keys they hold. A golden test pins them.

mod blocked;
// The budget allocator and the filters' memory arena are the engine's, not an embedder's:
// public only for the workspace's own tests and tools.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod budget;
#[cfg(not(feature = "internals"))]
pub(crate) mod budget;
mod classic;
pub mod math;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod memory;
#[cfg(not(feature = "internals"))]
pub(crate) mod memory;
pub mod ribbon;

pub use blocked::BlockedBloom;
pub use classic::ClassicBloom;
pub use ribbon::Ribbon;

use crate::coding::{crc32, Decoder};
use crate::{Error, Result};
use memory::{Arena, Bits, Placement};

/// The hash every filter is built from and probed with: XXH3, 64-bit, seed 0.
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Decoded filters are the ones open tables keep: they go in the huge-page arena.
fn open_filters() -> Placement<'static> {
    Placement::Shared(Arena::global())
}

const MAGIC: &[u8; 4] = b"BKVF";
const VERSION: u8 = 1;
const HEADER_LEN: usize = 32;

/// Which filter a table carries, chosen with `Options::filter_policy`. Non-exhaustive: new
/// kinds of filter may be added without breaking code that matches on it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum FilterPolicy {
    /// Cache-line-blocked Bloom filter (the default, at 10 bits per key).
    BlockedBloom {
        /// Bits of filter per key; 10 gives about a 1% false-positive rate.
        bits_per_key: f64,
    },
    /// Blocked Bloom filters under one memory budget for the whole tree: `bits_per_key` is the
    /// average over every key in every table, and the engine gives each table the share that
    /// minimises the data blocks an absent-key lookup reads in all (Monkey, Dayan et al.,
    /// SIGMOD 2017; see DESIGN.md, "One memory budget across the tree"). Lookups consult every L0 table and one table per deeper
    /// level, so the small runs near the top — where a few bits per key buy a much lower
    /// rate — get more bits per key than the average, and the last level, holding most of the
    /// keys, a little less. Each table's share is worked out when it is written, from the
    /// tree's shape then: a flush, a compaction's output and an ingest's tables get the
    /// current share of the level they go to, and compaction brings the rest along as it
    /// rewrites tables. A tree of one run gets the average. The bits each table got are
    /// recorded in its filter, so a database can switch to or from this policy at any open.
    ///
    /// Outside a database (a [`FilterBuilder`] on its own, or [`Filter::build`]) there is
    /// no tree to share: the filter is a blocked Bloom filter at `bits_per_key`.
    ///
    /// ```
    /// use bloomkv::{FilterPolicy, Options};
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let policy = FilterPolicy::Budgeted { bits_per_key: 10.0 };
    /// policy.validate()?;
    /// let db = bloomkv::Db::open(dir.path(), Options::default().filter_policy(policy))?;
    /// db.put(b"k", b"v")?;
    /// db.flush()?;
    /// assert_eq!(db.get(b"k")?.as_deref(), Some(&b"v"[..]));
    /// // Averages outside [0.5, 32] bits per key are refused.
    /// assert!(FilterPolicy::Budgeted { bits_per_key: 40.0 }.validate().is_err());
    /// # Ok(()) }
    /// ```
    Budgeted {
        /// Bits of filter per key, averaged over every key in the tree.
        bits_per_key: f64,
    },
    /// Ribbon filters (Dillinger and Walzer 2021, RocksDB's `NewRibbonFilterPolicy`): at most
    /// about `bits_per_key` bits per key, as `r = ⌊bits_per_key / 1.05⌋` fingerprint bits per
    /// slot at 1.05 slots per key, for a false-positive rate of `2^-r`: 7.35 bits per key give
    /// 0.78%, where a blocked Bloom filter needs about 10.6. A query reads three to four
    /// adjacent cache lines where a blocked Bloom filter reads one, and building one takes
    /// about ten times as long, so tables written to levels below `bloom_before_level` (with
    /// 1, the flushes into L0: written often, read by every lookup, a small part of the
    /// memory) get a blocked Bloom filter with the same false-positive rate instead.
    ///
    /// Outside a database (a [`FilterBuilder`] on its own, or [`Filter::build`]) every filter
    /// is a Ribbon filter.
    ///
    /// ```
    /// use bloomkv::filter::{Filter, FilterPolicy};
    /// let keys: Vec<String> = (0..10_000).map(|i| format!("key{i}")).collect();
    /// let ribbon = Filter::build(FilterPolicy::Ribbon { bits_per_key: 7.35, bloom_before_level: 1 }, &keys);
    /// let bloom = Filter::build(FilterPolicy::BlockedBloom { bits_per_key: 10.0 }, &keys);
    /// assert!(keys.iter().all(|k| ribbon.may_contain(k.as_bytes())));
    /// assert!(ribbon.expected_fpr() < bloom.expected_fpr());
    /// assert!(ribbon.memory_bytes() * 4 < bloom.memory_bytes() * 3);
    /// ```
    Ribbon {
        /// About how many bits of filter per key.
        bits_per_key: f64,
        /// Tables written to levels below this one get a blocked Bloom filter with the same
        /// false-positive rate (0: Ribbon everywhere).
        bloom_before_level: u8,
    },
    /// One memory budget across the tree, as [`FilterPolicy::Budgeted`], spent on Ribbon
    /// filters (blocked Bloom filters on the levels below `bloom_before_level`): each run's
    /// share is worked out on the curve of the filter it gets, so the small runs near the top
    /// get more bits per key and the last level fewer, and the same memory buys fewer block
    /// reads per absent key than either the budget over Bloom filters or Ribbon filters of
    /// equal size. Outside a database, a Ribbon filter at `bits_per_key`.
    ///
    /// ```
    /// use bloomkv::{FilterPolicy, Options};
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let policy = FilterPolicy::BudgetedRibbon { bits_per_key: 10.0, bloom_before_level: 1 };
    /// let db = bloomkv::Db::open(dir.path(), Options::default().filter_policy(policy))?;
    /// db.put(b"k", b"v")?;
    /// db.flush()?;
    /// assert_eq!(db.get(b"k")?.as_deref(), Some(&b"v"[..]));
    /// # Ok(()) }
    /// ```
    BudgetedRibbon {
        /// Bits of filter per key, averaged over every key in the tree.
        bits_per_key: f64,
        /// Tables written to levels below this one get blocked Bloom filters (0: Ribbon
        /// everywhere).
        bloom_before_level: u8,
    },
    /// Classic Bloom filter with k = round(ln 2 · bits/key), the benchmark baseline.
    ClassicBloom {
        /// Bits of filter per key.
        bits_per_key: f64,
    },
    /// No filter: every table whose key range covers a key is read.
    None,
}

impl Default for FilterPolicy {
    fn default() -> Self {
        FilterPolicy::BlockedBloom { bits_per_key: 10.0 }
    }
}

impl FilterPolicy {
    /// Starts building a filter for one table.
    pub fn builder(&self) -> FilterBuilder {
        FilterBuilder { policy: *self, hashes: Vec::new() }
    }

    /// Checks that bits per key is a finite number in [0.5, 100], or for
    /// [`FilterPolicy::Budgeted`] in [0.5, 32].
    pub fn validate(&self) -> Result<()> {
        match *self {
            FilterPolicy::BlockedBloom { bits_per_key }
            | FilterPolicy::ClassicBloom { bits_per_key }
            | FilterPolicy::Ribbon { bits_per_key, .. }
                if !(0.5..=100.0).contains(&bits_per_key) =>
            {
                Err(Error::InvalidArgument(format!(
                    "filter bits per key must be in [0.5, 100], got {bits_per_key}"
                )))
            }
            FilterPolicy::Budgeted { bits_per_key }
            | FilterPolicy::BudgetedRibbon { bits_per_key, .. }
                if !(0.5..=budget::MAX_AVERAGE_BITS_PER_KEY).contains(&bits_per_key) =>
            {
                Err(Error::InvalidArgument(format!(
                    "budgeted filter bits per key must be in [0.5, {}], got {bits_per_key}",
                    budget::MAX_AVERAGE_BITS_PER_KEY
                )))
            }
            _ => Ok(()),
        }
    }

    /// The kind of filter this policy builds.
    pub fn kind(&self) -> FilterKind {
        match self {
            FilterPolicy::BlockedBloom { .. } | FilterPolicy::Budgeted { .. } => {
                FilterKind::Blocked
            }
            FilterPolicy::ClassicBloom { .. } => FilterKind::Classic,
            FilterPolicy::Ribbon { .. } | FilterPolicy::BudgetedRibbon { .. } => FilterKind::Ribbon,
            FilterPolicy::None => FilterKind::None,
        }
    }
}

/// The kind of a built filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FilterKind {
    /// No filter.
    None,
    /// Blocked Bloom filter.
    Blocked,
    /// Classic Bloom filter.
    Classic,
    /// Ribbon filter.
    Ribbon,
}

impl FilterKind {
    fn code(self) -> u8 {
        match self {
            FilterKind::None => 0,
            FilterKind::Blocked => 1,
            FilterKind::Classic => 2,
            FilterKind::Ribbon => 3,
        }
    }
}

impl std::fmt::Display for FilterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FilterKind::None => "none",
            FilterKind::Blocked => "blocked-bloom",
            FilterKind::Classic => "classic-bloom",
            FilterKind::Ribbon => "ribbon",
        })
    }
}

/// Collects the keys of a table as it is written, then builds its filter.
///
/// ```
/// use bloomkv::filter::FilterPolicy;
/// let mut b = FilterPolicy::BlockedBloom { bits_per_key: 10.0 }.builder();
/// for k in [&b"apple"[..], b"banana", b"cherry"] {
///     b.add_key(k);
/// }
/// let filter = b.finish();
/// assert!(filter.may_contain(b"banana"));
/// assert_eq!(filter.num_keys(), 3);
/// ```
#[derive(Debug, Clone)]
pub struct FilterBuilder {
    policy: FilterPolicy,
    hashes: Vec<u64>,
}

impl FilterBuilder {
    /// Adds a key.
    pub fn add_key(&mut self, key: &[u8]) {
        self.add_hash(hash_key(key));
    }

    /// Adds a key by its [`hash_key`] hash.
    pub fn add_hash(&mut self, hash: u64) {
        if self.policy != FilterPolicy::None {
            self.hashes.push(hash);
        }
    }

    /// Keys added so far (always 0 for [`FilterPolicy::None`]).
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// True if no key was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Builds the filter.
    pub fn finish(self) -> Filter {
        match self.policy {
            FilterPolicy::BlockedBloom { bits_per_key }
            | FilterPolicy::Budgeted { bits_per_key } => {
                Filter::Blocked(BlockedBloom::from_hashes(&self.hashes, bits_per_key))
            }
            FilterPolicy::ClassicBloom { bits_per_key } => {
                Filter::Classic(ClassicBloom::from_hashes(&self.hashes, bits_per_key))
            }
            FilterPolicy::Ribbon { bits_per_key, .. }
            | FilterPolicy::BudgetedRibbon { bits_per_key, .. } => {
                Filter::Ribbon(Ribbon::from_hashes(&self.hashes, bits_per_key))
            }
            FilterPolicy::None => Filter::None,
        }
    }
}

/// A table's filter, held in RAM while the table is open. Clones share the bit array.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// No filter: every key "may" be present.
    None,
    /// A cache-line-blocked Bloom filter.
    Blocked(BlockedBloom),
    /// A classic Bloom filter.
    Classic(ClassicBloom),
    /// A Ribbon filter.
    Ribbon(Ribbon),
}

impl Filter {
    /// Builds a filter over `keys` with `policy` (convenience for tests and tools).
    pub fn build<K: AsRef<[u8]>>(policy: FilterPolicy, keys: impl IntoIterator<Item = K>) -> Self {
        let mut b = policy.builder();
        for k in keys {
            b.add_key(k.as_ref());
        }
        b.finish()
    }

    /// True if `key` may be in the set; false means certainly absent.
    #[inline]
    pub fn may_contain(&self, key: &[u8]) -> bool {
        match self {
            Filter::None => true,
            _ => self.may_contain_hash(hash_key(key)),
        }
    }

    /// Like [`Filter::may_contain`], for a key already hashed with [`hash_key`].
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        match self {
            Filter::Blocked(f) => f.may_contain_hash(hash),
            Filter::Classic(f) => f.may_contain_hash(hash),
            Filter::Ribbon(f) => f.may_contain_hash(hash),
            Filter::None => true,
        }
    }

    /// Starts loading the memory [`Filter::may_contain_hash`] will read for `hash` and returns
    /// at once: a hint that lets the probes of several filters overlap their cache misses.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        match self {
            Filter::Blocked(f) => f.prefetch(hash),
            Filter::Classic(f) => f.prefetch(hash),
            Filter::Ribbon(f) => f.prefetch(hash),
            Filter::None => {}
        }
    }

    /// Answers for many hashes at once; the blocked filter prefetches every key's cache line
    /// before probing any. `out[i]` receives the answer for `hashes[i]`.
    ///
    /// # Panics
    /// If `out` is shorter than `hashes`.
    pub fn may_contain_batch(&self, hashes: &[u64], out: &mut [bool]) {
        match self {
            Filter::Blocked(f) => f.may_contain_batch(hashes, out),
            Filter::Ribbon(f) => f.may_contain_batch(hashes, out),
            _ => {
                assert!(out.len() >= hashes.len(), "output slice shorter than input");
                for (o, &h) in out.iter_mut().zip(hashes) {
                    *o = self.may_contain_hash(h);
                }
            }
        }
    }

    /// The filter's kind.
    pub fn kind(&self) -> FilterKind {
        match self {
            Filter::None => FilterKind::None,
            Filter::Blocked(_) => FilterKind::Blocked,
            Filter::Classic(_) => FilterKind::Classic,
            Filter::Ribbon(_) => FilterKind::Ribbon,
        }
    }

    /// Bytes of RAM the bit array occupies.
    pub fn memory_bytes(&self) -> usize {
        match self {
            Filter::None => 0,
            Filter::Blocked(f) => f.memory_bytes(),
            Filter::Classic(f) => f.memory_bytes(),
            Filter::Ribbon(f) => f.memory_bytes(),
        }
    }

    /// Size of the bit array in bits.
    pub fn num_bits(&self) -> u64 {
        match self {
            Filter::None => 0,
            Filter::Blocked(f) => f.num_bits(),
            Filter::Classic(f) => f.num_bits(),
            Filter::Ribbon(f) => f.num_bits(),
        }
    }

    /// Bits of array per key actually used (after rounding up); 0 for no filter or no keys.
    pub fn bits_per_key(&self) -> f64 {
        match self.num_keys() {
            0 => 0.0,
            n => self.num_bits() as f64 / n as f64,
        }
    }

    /// The bits per key the policy asked for.
    pub fn requested_bits_per_key(&self) -> f64 {
        match self {
            Filter::None => 0.0,
            Filter::Blocked(f) => f.requested_bits_per_key(),
            Filter::Classic(f) => f.requested_bits_per_key(),
            Filter::Ribbon(f) => f.requested_bits_per_key(),
        }
    }

    /// Probes per key, k; for a Ribbon filter, its result bits r.
    pub fn num_probes(&self) -> u32 {
        match self {
            Filter::None => 0,
            Filter::Blocked(f) => f.num_probes(),
            Filter::Classic(f) => f.num_probes(),
            Filter::Ribbon(f) => f.result_bits(),
        }
    }

    /// Number of 512-bit lines (0 unless blocked).
    pub fn num_lines(&self) -> usize {
        match self {
            Filter::Blocked(f) => f.num_lines(),
            _ => 0,
        }
    }

    /// Keys the filter was built over.
    pub fn num_keys(&self) -> u64 {
        match self {
            Filter::None => 0,
            Filter::Blocked(f) => f.num_keys(),
            Filter::Classic(f) => f.num_keys(),
            Filter::Ribbon(f) => f.num_keys(),
        }
    }

    /// Number of bits set (for a Ribbon filter, of its solution: about half).
    pub fn bits_set(&self) -> u64 {
        match self {
            Filter::None => 0,
            Filter::Blocked(f) => f.bits_set(),
            Filter::Classic(f) => f.bits_set(),
            Filter::Ribbon(f) => f.words().iter().map(|w| u64::from(w.count_ones())).sum(),
        }
    }

    /// Fraction of the array's bits that are set.
    pub fn fraction_bits_set(&self) -> f64 {
        match self.num_bits() {
            0 => 0.0,
            m => self.bits_set() as f64 / m as f64,
        }
    }

    /// False-positive rate theory predicts for this filter at its actual fill: the
    /// Poisson-mixture formula for the blocked filter, the classic formula for the classic
    /// one, `2^-r` for Ribbon. 1.0 for no filter.
    pub fn expected_fpr(&self) -> f64 {
        match self {
            Filter::None => 1.0,
            Filter::Blocked(f) => f.expected_fpr(),
            Filter::Classic(f) => f.expected_fpr(),
            Filter::Ribbon(f) => f.expected_fpr(),
        }
    }

    /// Estimates how many distinct keys the filter holds from the fraction of bits set,
    /// n ≈ −(m/k)·ln(1 − X/m). Useful for spotting a filter built over the wrong keys.
    /// A Ribbon filter's bits say nothing of its keys: its recorded key count.
    pub fn estimated_keys(&self) -> f64 {
        match self {
            Filter::Ribbon(f) => f.num_keys() as f64,
            _ => math::estimate_keys(
                self.num_bits() as f64,
                self.bits_set() as f64,
                self.num_probes(),
            ),
        }
    }

    /// Serialises the filter (see the module docs for the layout).
    pub fn encode(&self) -> Vec<u8> {
        let words: Box<dyn Iterator<Item = &u64>> = match self {
            Filter::None => Box::new(std::iter::empty()),
            Filter::Blocked(f) => Box::new(f.lines().iter().flat_map(|b| b.0.iter())),
            Filter::Classic(f) => Box::new(f.words().iter()),
            Filter::Ribbon(f) => Box::new(f.words().iter()),
        };
        let mut out = Vec::with_capacity(HEADER_LEN + self.memory_bytes() + 4);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(self.kind().code());
        out.push(self.num_probes() as u8);
        out.push(0);
        out.extend_from_slice(&self.num_keys().to_le_bytes());
        out.extend_from_slice(&self.requested_bits_per_key().to_bits().to_le_bytes());
        match self {
            Filter::Ribbon(f) => {
                out.extend_from_slice(&f.num_slots().to_le_bytes());
                out.extend_from_slice(&[f.seed(), 0, 0, 0, 0, 0, 0, 0]);
            }
            _ => out.extend_from_slice(&self.num_bits().to_le_bytes()),
        }
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        let crc = crc32(&[&out]);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses bytes produced by [`Filter::encode`]. Anything else yields
    /// [`Error::Corruption`] (with an empty file name, for the caller to fill in with
    /// [`Error::in_file`]); never a panic, and never an allocation larger than the input.
    pub fn decode(bytes: &[u8]) -> Result<Filter> {
        let bad =
            |offset: usize, why: &str| Error::bad_bytes(offset as u64, format!("filter: {why}"));
        if bytes.len() < HEADER_LEN + 4 {
            return Err(bad(0, "shorter than the header"));
        }
        let body_len = bytes.len() - 4;
        let stored = u32::from_le_bytes(bytes[body_len..].try_into().expect("4 bytes"));
        if crc32(&[&bytes[..body_len]]) != stored {
            return Err(bad(body_len, "checksum mismatch"));
        }
        let mut d = Decoder::new(&bytes[..body_len]);
        let header = d.bytes(HEADER_LEN).ok_or_else(|| bad(0, "short header"))?;
        if &header[0..4] != MAGIC {
            return Err(bad(0, "bad magic"));
        }
        if header[4] != VERSION {
            return Err(bad(4, &format!("unknown version {}", header[4])));
        }
        let kind = header[5];
        let num_probes = u32::from(header[6]);
        let mut h = Decoder::new(&header[8..]);
        let (num_keys, bpk_bits, num_bits) = match (h.u64(), h.u64(), h.u64()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => return Err(bad(8, "short header")),
        };
        let bits_per_key = f64::from_bits(bpk_bits);
        let payload = &bytes[HEADER_LEN..body_len];
        let check_probes = || {
            if (1..=math::MAX_PROBES).contains(&num_probes) {
                Ok(())
            } else {
                Err(bad(6, &format!("probe count {num_probes} out of range")))
            }
        };
        let check_bpk = || {
            if bits_per_key.is_finite() && bits_per_key >= 0.0 {
                Ok(())
            } else {
                Err(bad(16, "bits per key is not a finite positive number"))
            }
        };
        match kind {
            0 => {
                if !payload.is_empty() || num_bits != 0 {
                    return Err(bad(24, "'none' filter with a bit array"));
                }
                Ok(Filter::None)
            }
            1 => {
                check_probes()?;
                check_bpk()?;
                let line_bits = u64::from(math::LINE_BITS);
                if num_bits % line_bits != 0 || num_bits / 8 != payload.len() as u64 {
                    return Err(bad(24, "bit count does not match the array"));
                }
                let lines = Bits::new_with(
                    payload.len() / 64,
                    open_filters(),
                    |lines: &mut [blocked::Line]| {
                        for (line, c) in lines.iter_mut().zip(payload.chunks_exact(64)) {
                            for (w, bytes) in line.0.iter_mut().zip(c.chunks_exact(8)) {
                                *w = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                            }
                        }
                    },
                );
                Ok(Filter::Blocked(BlockedBloom::from_parts(
                    lines,
                    num_probes,
                    num_keys,
                    bits_per_key,
                )))
            }
            2 => {
                check_probes()?;
                check_bpk()?;
                if num_bits.div_ceil(64) * 8 != payload.len() as u64 {
                    return Err(bad(24, "bit count does not match the array"));
                }
                let words =
                    Bits::new_with(payload.len() / 8, open_filters(), |words: &mut [u64]| {
                        for (w, c) in words.iter_mut().zip(payload.chunks_exact(8)) {
                            *w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                        }
                    });
                Ok(Filter::Classic(ClassicBloom::from_parts(
                    words,
                    num_bits,
                    num_probes,
                    num_keys,
                    bits_per_key,
                )))
            }
            3 => {
                check_bpk()?;
                let result_bits = num_probes;
                if !(1..=ribbon::MAX_RESULT_BITS).contains(&result_bits) {
                    return Err(bad(6, &format!("result bit count {result_bits} out of range")));
                }
                let num_slots = num_bits;
                if num_slots != 0 && (num_slots < 128 || num_slots % 64 != 0) {
                    return Err(bad(24, &format!("{num_slots} slots is not a Ribbon size")));
                }
                let Some((params, solution)) = payload.split_first_chunk::<8>() else {
                    return Err(bad(HEADER_LEN, "no Ribbon parameters"));
                };
                if params[1..] != [0; 7] {
                    return Err(bad(HEADER_LEN + 1, "reserved Ribbon parameter bytes are not 0"));
                }
                let words = ribbon::stored_words(num_slots, result_bits);
                if words.checked_mul(8) != Some(solution.len() as u64) {
                    return Err(bad(24, "slot count does not match the solution"));
                }
                let words =
                    Bits::new_with(solution.len() / 8, open_filters(), |words: &mut [u64]| {
                        for (w, c) in words.iter_mut().zip(solution.chunks_exact(8)) {
                            *w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                        }
                    });
                Ok(Filter::Ribbon(Ribbon::from_parts(
                    words,
                    num_slots,
                    result_bits,
                    params[0],
                    num_keys,
                    bits_per_key,
                )))
            }
            k => Err(bad(5, &format!("unknown filter kind {k}"))),
        }
    }
}
