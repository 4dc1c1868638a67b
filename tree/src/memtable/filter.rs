//! A Bloom filter over the user keys a memtable holds (RocksDB's
//! `memtable_whole_key_filtering`) and, in a keyspace with a prefix extractor, over their
//! prefixes too (RocksDB's memtable prefix Bloom): the tables' hashes of both, so one filter
//! answers a point lookup and a prefix scan.
//!
//! A point lookup of a key the memtable does not hold would otherwise search the skip list
//! to its bottom level: a chain of dependent cache misses through megabytes of arena, for
//! every absent key and for every present key whose newest version is in a table. The
//! filter answers that in one cache line, with the hash the read path computed for the
//! tables' filters anyway. Inserting costs the writer one hash and one line.
//!
//! The layout and probing are the tables' blocked Bloom filter's (`crate::filter::blocked`):
//! a key's hash picks one 64-byte line with its upper half and sets [`PROBES`] bits of that
//! line from its lower half. The filter is sized from the memtable's size, not its entry
//! count (unknown until it fills): [`BYTES_PER_FILTER_BYTE`] memtable bytes per filter byte,
//! about 19 bits per entry of a 16-byte key and a 100-byte value, fewer for smaller entries.
//!
//! Bits are only ever set, with a locked `fetch_or` where a word changes (writers insert at
//! once, `skiplist.rs`), before the entry is linked into the skip list. A reader may trust a
//! "no" for every version it is entitled to see: it learnt its sequence number from a store
//! made after those versions were inserted (or waits for the ones inserted beside others,
//! `db/in_flight.rs`, where it must see them).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::prefetch::prefetch;

/// Memtable bytes per byte of filter: 16 MiB memtables get 256 KiB filters.
pub const BYTES_PER_FILTER_BYTE: usize = 64;

/// Bits set per key, all in one line.
const PROBES: u32 = 6;

/// The probe re-mixing multiplier of the tables' blocked filter.
const PROBE_MULT: u32 = 0x9E37_79B9;

#[repr(C, align(64))]
#[derive(Default)]
struct Line([AtomicU64; 8]);

/// The filter of one memtable. Its lines are allocated on the first insert, so a keyspace's
/// memtable that is never written costs nothing.
pub struct MemFilter {
    /// The memtable size the filter was made for.
    memtable_bytes: usize,
    num_lines: usize,
    lines: OnceLock<Box<[Line]>>,
}

#[inline(always)]
fn line_index(hash: u64, num_lines: usize) -> usize {
    (((hash >> 32) * num_lines as u64) >> 32) as usize
}

impl MemFilter {
    /// A filter for a memtable of up to `memtable_bytes`; none at all (every answer "maybe")
    /// when `memtable_bytes` is 0. With `prefixes` (up to one prefix entry per key) it gets
    /// twice the lines, so that the keys' rate stays what it is without.
    pub fn new(memtable_bytes: usize, prefixes: bool) -> Self {
        let num_lines = (memtable_bytes / BYTES_PER_FILTER_BYTE).div_ceil(64);
        let num_lines = if prefixes { 2 * num_lines } else { num_lines };
        MemFilter { memtable_bytes, num_lines, lines: OnceLock::new() }
    }

    /// The memtable size this filter was made for, so a memtable's successor gets the same.
    pub fn memtable_bytes(&self) -> usize {
        self.memtable_bytes
    }

    /// Records the key with this hash, before its entry is linked into the skip list. Safe
    /// from several threads at once.
    #[inline]
    pub(super) fn add(&self, hash: u64) {
        if self.num_lines == 0 {
            return;
        }
        let lines = self
            .lines
            .get_or_init(|| std::iter::repeat_with(Line::default).take(self.num_lines).collect());
        let line = &lines[line_index(hash, self.num_lines)].0;
        let mut masks = [0u64; 8];
        let mut x = hash as u32;
        for _ in 0..PROBES {
            let bit = x >> 23;
            masks[(bit >> 6) as usize] |= 1u64 << (bit & 63);
            x = x.wrapping_mul(PROBE_MULT);
        }
        for (word, mask) in line.iter().zip(masks) {
            // Only a word that changes pays for the locked read-modify-write.
            if word.load(Ordering::Relaxed) & mask != mask {
                word.fetch_or(mask, Ordering::Relaxed);
            }
        }
    }

    /// False if no key with this hash was added; true if one may have been (or the memtable
    /// has no filter).
    #[inline]
    pub fn may_contain(&self, hash: u64) -> bool {
        if self.num_lines == 0 {
            return true;
        }
        let Some(lines) = self.lines.get() else {
            return false;
        };
        let line = &lines[line_index(hash, self.num_lines)].0;
        let mut x = hash as u32;
        let mut all = 1u64;
        for _ in 0..PROBES {
            let bit = x >> 23;
            all &= line[(bit >> 6) as usize].load(Ordering::Relaxed) >> (bit & 63);
            x = x.wrapping_mul(PROBE_MULT);
        }
        all & 1 != 0
    }

    /// Starts loading the line [`MemFilter::may_contain`] will read for `hash`.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        if let Some(lines) = self.lines.get() {
            prefetch(&lines[line_index(hash, self.num_lines)]);
        }
    }

    /// Bytes the filter holds (none until the first insert).
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.lines.get().map_or(0, |l| l.len() * 64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::hash_key;

    #[test]
    fn says_no_only_for_keys_never_added() {
        let f = MemFilter::new(1 << 20, false);
        assert!(!f.may_contain(hash_key(b"a")), "empty");
        assert_eq!(f.bytes(), 0, "nothing allocated before the first insert");
        let added: Vec<u64> = (0u32..10_000).map(|i| hash_key(&i.to_be_bytes())).collect();
        for &h in &added {
            f.add(h);
        }
        assert_eq!(f.bytes(), (1 << 20) / BYTES_PER_FILTER_BYTE);
        assert!(added.iter().all(|&h| f.may_contain(h)), "no false negative");
        let absent = (10_000u32..110_000).filter(|i| f.may_contain(hash_key(&i.to_be_bytes())));
        // 16 KiB for 10,000 keys is 13 bits per key: about 0.3% false positives.
        let fp = absent.count();
        assert!(fp < 1_000, "{fp} of 100,000 absent keys pass");
    }

    /// Writers adding to one line at once lose none of each other's bits. The filter is a
    /// single line, renewed each round so that it stays sparse and most adds change words
    /// the other thread is changing too.
    #[test]
    fn concurrent_adds_lose_no_bits() {
        const ROUNDS: u64 = 2_000;
        const PER_THREAD: u64 = 24;
        let start = std::sync::Barrier::new(2);
        let mut f = MemFilter::new(64 * BYTES_PER_FILTER_BYTE, false);
        for round in 0..ROUNDS {
            let hashes = |t: u64| {
                (0..PER_THREAD)
                    .map(move |i| hash_key(&[round, t, i].map(u64::to_le_bytes).concat()))
            };
            std::thread::scope(|s| {
                for t in 0..2 {
                    let (f, start) = (&f, &start);
                    s.spawn(move || {
                        start.wait();
                        hashes(t).for_each(|h| f.add(h));
                    });
                }
            });
            for t in 0..2 {
                assert!(hashes(t).all(|h| f.may_contain(h)), "round {round}: a bit was lost");
            }
            f = MemFilter::new(64 * BYTES_PER_FILTER_BYTE, false);
        }
    }

    #[test]
    fn without_lines_every_answer_is_maybe() {
        let f = MemFilter::new(0, true);
        f.add(1);
        assert!(f.may_contain(2));
        assert_eq!(f.memtable_bytes(), 0);
    }

    #[test]
    fn prefixes_double_the_lines() {
        let f = MemFilter::new(1 << 20, true);
        f.add(hash_key(b"a"));
        assert_eq!(f.bytes(), 2 * (1 << 20) / BYTES_PER_FILTER_BYTE);
        assert_eq!(f.memtable_bytes(), 1 << 20);
    }
}
