//! Per-table filters over whole keys and, with a [`crate::PrefixExtractor`], key prefixes: the
//! cache-line-blocked Bloom filter that is bloomkv's reason to exist, the Ribbon filter that
//! holds the same false-positive rate in about a quarter less memory (`ribbon.rs`), the classic Bloom
//! filter they are measured against, and "no filter"; and
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
//!      4     1  format version: 1, or 2 for a filter holding prefixes
//!      5     1  kind: 0 = none, 1 = blocked Bloom, 2 = classic Bloom, 3 = Ribbon
//!      6     1  probes per key k (0 for none); Ribbon: result bits r, 1 to 32
//!      7     1  version 1: reserved, 0; version 2: contents, bit 0 whole keys, bit 1
//!               prefixes (1 to 3)
//!      8     8  number of entries added (keys and prefixes)
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
//! A filter without prefix entries is written in version 1, as before prefixes existed;
//! one with them in version 2, which older readers refuse rather than take prefix entries
//! for keys. The prefix extractor a filter's prefixes come from is recorded in the table's
//! properties, not here.
//!
//! The hashes ([`hash_key`], XXH3-64 with seed 0; [`hash_prefix`], with seed
//! [`PREFIX_SEED`]) and the probe derivations in `blocked.rs` and
//! `classic.rs` are part of the format: changing either would make old filters answer "no"
//! for keys they hold. A golden test pins them.

pub(crate) mod blocked;
// The budget allocator and the filters' memory arena are the engine's, not an embedder's:
// public only for the workspace's own tests and tools.
#[doc(hidden)]
pub mod budget;
mod classic;
pub mod math;
#[doc(hidden)]
pub mod ribbon;

pub use blocked::BlockedBloom;
pub use classic::ClassicBloom;
pub use ribbon::Ribbon;

use crate::coding::{crc32, Decoder};
use crate::filter_memory::{decoded_words, Arena, Bits, Placement};
use crate::{Error, Result};

/// The hash every filter is built from and probed with: XXH3, 64-bit, seed 0.
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The seed of [`hash_prefix`]: prefixes are hashed apart from keys, so that a prefix equal
/// to a key (`user:42/` as both) does not make that key look present to point lookups.
pub const PREFIX_SEED: u64 = 0x7072_6566_6978; // "prefix"

/// The hash a prefix entry is added and probed with: XXH3, 64-bit, seed [`PREFIX_SEED`].
#[inline]
pub fn hash_prefix(prefix: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(prefix, PREFIX_SEED)
}

/// What a filter's entries are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FilterContents {
    /// The filter holds each distinct user key: point lookups may trust its "no".
    pub whole_keys: bool,
    /// The filter holds each distinct in-domain prefix (by [`hash_prefix`]).
    pub prefixes: bool,
}

impl FilterContents {
    /// Whole keys only: every filter written without a prefix extractor.
    pub const WHOLE_KEYS: FilterContents = FilterContents { whole_keys: true, prefixes: false };

    fn flags(self) -> u8 {
        u8::from(self.whole_keys) | u8::from(self.prefixes) << 1
    }

    fn from_flags(flags: u8) -> Option<FilterContents> {
        (1..=3)
            .contains(&flags)
            .then_some(FilterContents { whole_keys: flags & 1 != 0, prefixes: flags & 2 != 0 })
    }
}

/// What every filter records beside its bits: the entries it was built over, the bits per
/// entry asked for (keys and prefixes alike), and what the entries are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Described {
    pub num_keys: u64,
    pub bits_per_key: f64,
    pub contents: FilterContents,
}

impl Described {
    /// A filter over `num_keys` whole keys at `bits_per_key`.
    pub fn whole_keys(num_keys: u64, bits_per_key: f64) -> Self {
        Described { num_keys, bits_per_key, contents: FilterContents::WHOLE_KEYS }
    }
}

/// Decoded filters are the ones open tables keep: they go in the huge-page arena.
fn open_filters() -> Placement<'static> {
    Placement::Shared(Arena::global())
}

const MAGIC: &[u8; 4] = b"BKVF";
const VERSION: u8 = 1;
const PREFIX_VERSION: u8 = 2;
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
    /// use bloomkv::{FilterPolicy, Options, Readable};
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
    /// several times as long (DESIGN.md, "Ribbon for the levels below L0"), so tables written to levels below `bloom_before_level` (with
    /// 1, the flushes into L0: written often, read by every lookup, a small part of the
    /// memory) get a blocked Bloom filter with the same false-positive rate instead. A
    /// write-heavy tree does well with 2: compactions into L1 are the most frequent, and L1
    /// holds a few percent of the keys.
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
    /// use bloomkv::{FilterPolicy, Options, Readable};
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
        FilterBuilder {
            policy: *self,
            hashes: Vec::new(),
            whole_keys: true,
            extractor: None,
            keys: 0,
            prefixes: 0,
            last_prefix: None,
        }
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
///
/// With a prefix extractor ([`FilterBuilder::with_prefixes`]) it also adds each distinct
/// in-domain prefix, once; keys must then come in ascending order (as a table's do), which
/// puts the keys of one prefix next to each other.
///
/// ```
/// use bloomkv::filter::FilterPolicy;
/// use bloomkv::PrefixExtractor;
/// let mut b = FilterPolicy::BlockedBloom { bits_per_key: 10.0 }
///     .builder()
///     .with_prefixes(PrefixExtractor::Fixed(4), true);
/// for k in [&b"user1"[..], b"user2", b"zoo"] {
///     b.add_key(k);
/// }
/// assert_eq!((b.keys(), b.prefixes()), (3, 1)); // "zoo" is too short for a prefix
/// let filter = b.finish();
/// assert!(filter.may_contain(b"user2") && filter.may_contain_prefix(b"user"));
/// // Four entries at 10 bits each, rounded up to one 512-bit line.
/// assert_eq!(filter.num_bits(), 512);
/// ```
#[derive(Debug, Clone)]
pub struct FilterBuilder {
    policy: FilterPolicy,
    hashes: Vec<u64>,
    whole_keys: bool,
    extractor: Option<crate::PrefixExtractor>,
    keys: u64,
    prefixes: u64,
    last_prefix: Option<Vec<u8>>,
}

impl FilterBuilder {
    /// Makes the filter hold the distinct prefixes `extractor` extracts as well, and whole
    /// keys only if `whole_keys`. The filter is sized by its entries, keys and prefixes alike:
    /// the policy's bits per key times the entries (a tree that wants prefixes at the same
    /// memory asks for fewer bits per key; see `db/filter_budget.rs`).
    pub fn with_prefixes(mut self, extractor: crate::PrefixExtractor, whole_keys: bool) -> Self {
        self.extractor = Some(extractor);
        self.whole_keys = whole_keys;
        self
    }

    /// Adds a key (and its prefix, with an extractor, unless the previous key had the same).
    pub fn add_key(&mut self, key: &[u8]) {
        if self.policy == FilterPolicy::None {
            return;
        }
        self.keys += 1;
        if self.whole_keys {
            self.hashes.push(hash_key(key));
        }
        if let Some(p) = self.extractor.and_then(|e| e.prefix(key)) {
            if self.last_prefix.as_deref() != Some(p) {
                self.hashes.push(hash_prefix(p));
                self.prefixes += 1;
                let last = self.last_prefix.get_or_insert_with(Vec::new);
                last.clear();
                last.extend_from_slice(p);
            }
        }
    }

    /// Adds a key by its [`hash_key`] hash (no prefix: use [`FilterBuilder::add_key`] for
    /// that).
    pub fn add_hash(&mut self, hash: u64) {
        if self.policy != FilterPolicy::None {
            self.keys += 1;
            if self.whole_keys {
                self.hashes.push(hash);
            }
        }
    }

    /// Entries added so far, keys and prefixes (always 0 for [`FilterPolicy::None`]).
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// True if no entry was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Keys added so far, whether or not the filter holds them whole.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Distinct prefixes added so far.
    pub fn prefixes(&self) -> u64 {
        self.prefixes
    }

    /// Builds the filter.
    pub fn finish(self) -> Filter {
        let contents =
            FilterContents { whole_keys: self.whole_keys, prefixes: self.extractor.is_some() };
        // Every entry gets the policy's bits, a prefix as a key: a table that holds one key
        // per prefix has twice the entries per key of one holding ten, and sized by its keys
        // its entries would get half the bits, its scans and lookups several times the
        // false-positive rate.
        let (mut filter, bits_per_key) = match self.policy {
            FilterPolicy::BlockedBloom { bits_per_key }
            | FilterPolicy::Budgeted { bits_per_key } => (
                Filter::Blocked(BlockedBloom::from_hashes(&self.hashes, bits_per_key)),
                bits_per_key,
            ),
            FilterPolicy::ClassicBloom { bits_per_key } => (
                Filter::Classic(ClassicBloom::from_hashes(&self.hashes, bits_per_key)),
                bits_per_key,
            ),
            FilterPolicy::Ribbon { bits_per_key, .. }
            | FilterPolicy::BudgetedRibbon { bits_per_key, .. } => {
                (Filter::Ribbon(Ribbon::from_hashes(&self.hashes, bits_per_key)), bits_per_key)
            }
            FilterPolicy::None => return Filter::None,
        };
        if let Some(about) = filter.about_mut() {
            about.contents = contents;
            about.bits_per_key = bits_per_key;
        }
        filter
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

    /// True if the filter may hold a key with this prefix; false means certainly none. A
    /// filter without prefix entries answers true.
    #[inline]
    pub fn may_contain_prefix(&self, prefix: &[u8]) -> bool {
        !self.contents().prefixes || self.may_contain_hash(hash_prefix(prefix))
    }

    /// What the filter's entries are ([`FilterContents::WHOLE_KEYS`] for no filter, which
    /// answers "maybe" to everything).
    pub fn contents(&self) -> FilterContents {
        self.about().map_or(FilterContents::WHOLE_KEYS, |a| a.contents)
    }

    /// What the filter records beside its bits (`None` for no filter).
    fn about(&self) -> Option<&Described> {
        match self {
            Filter::None => None,
            Filter::Blocked(f) => Some(&f.about),
            Filter::Classic(f) => Some(&f.about),
            Filter::Ribbon(f) => Some(&f.about),
        }
    }

    fn about_mut(&mut self) -> Option<&mut Described> {
        match self {
            Filter::None => None,
            Filter::Blocked(f) => Some(&mut f.about),
            Filter::Classic(f) => Some(&mut f.about),
            Filter::Ribbon(f) => Some(&mut f.about),
        }
    }

    /// The filter point lookups may use: this one if it holds whole keys, else no filter
    /// (a filter of prefixes alone would answer "no" for keys it holds).
    pub fn for_point_lookups(&self) -> Filter {
        if self.contents().whole_keys {
            self.clone()
        } else {
            Filter::None
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
        self.about().map_or(0.0, |a| a.bits_per_key)
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

    /// Entries the filter was built over: its keys, and with prefixes its distinct prefixes.
    pub fn num_keys(&self) -> u64 {
        self.about().map_or(0, |a| a.num_keys)
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
            Filter::Ribbon(_) => self.num_keys() as f64,
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
        let contents = self.contents();
        out.extend_from_slice(MAGIC);
        if contents == FilterContents::WHOLE_KEYS {
            out.extend_from_slice(&[VERSION, self.kind().code(), self.num_probes() as u8, 0]);
        } else {
            let kind = self.kind().code();
            out.extend_from_slice(&[
                PREFIX_VERSION,
                kind,
                self.num_probes() as u8,
                contents.flags(),
            ]);
        }
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
        let contents = match header[4] {
            VERSION => FilterContents::WHOLE_KEYS,
            PREFIX_VERSION => FilterContents::from_flags(header[7])
                .ok_or_else(|| bad(7, &format!("bad contents flags {}", header[7])))?,
            v => return Err(bad(4, &format!("unknown version {v}"))),
        };
        let kind = header[5];
        let num_probes = u32::from(header[6]);
        let mut h = Decoder::new(&header[8..]);
        let (num_keys, bpk_bits, num_bits) = match (h.u64(), h.u64(), h.u64()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => return Err(bad(8, "short header")),
        };
        let bits_per_key = f64::from_bits(bpk_bits);
        let about = Described { num_keys, bits_per_key, contents };
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
                if header[4] != VERSION {
                    return Err(bad(4, "'none' filter in the prefix version"));
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
                Ok(Filter::Blocked(BlockedBloom::from_parts(lines, num_probes, about)))
            }
            2 => {
                check_probes()?;
                check_bpk()?;
                if num_bits.div_ceil(64) * 8 != payload.len() as u64 {
                    return Err(bad(24, "bit count does not match the array"));
                }
                let words = decoded_words(payload);
                Ok(Filter::Classic(ClassicBloom::from_parts(words, num_bits, num_probes, about)))
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
                let words = decoded_words(solution);
                Ok(Filter::Ribbon(Ribbon::from_parts(
                    words,
                    num_slots,
                    result_bits,
                    params[0],
                    about,
                )))
            }
            k => Err(bad(5, &format!("unknown filter kind {k}"))),
        }
    }
}
