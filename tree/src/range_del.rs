//! Range tombstones: "every key in `[start, end)` written before sequence number `seq` is
//! deleted".
//!
//! A range tombstone is kept apart from the point entries, in every place entries live:
//! beside each memtable's skip list (`memtable::MemTable`), in a range-deletion block of each
//! table that has any (`table::builder`, format below), and, for reads, in a [`Fragments`]
//! set per memtable and one per [`crate::version::set::Version`] gathering every table's.
//! Readers never look for tombstones where they look for keys: the filters cannot answer
//! for ranges, so a point lookup first finds the newest version of its key as it always
//! has, and only then, if the version is a value and some tombstone exists at all, asks
//! the in-RAM sets whether a newer tombstone covers it (see `read::search`). A database with no
//! range tombstones pays one branch per found value.
//!
//! # Sets
//!
//! [`Fragments`] cuts overlapping tombstones at every start and end into disjoint
//! fragments, each carrying the sequence numbers of the tombstones over it (newest first),
//! so "is key `k`, found at `s`, covered by a tombstone visible at `read`?" is a binary
//! search for the fragment holding `k` and one for the newest of its sequence numbers at or
//! below `read`.
//!
//! # Range-deletion block (inside a table; stored with the usual block trailer)
//!
//! ```text
//! count varint
//! count times, sorted by start, fragments disjoint:
//!   seq varint | start len varint, bytes | end len varint, bytes      (start < end)
//! ```
//!
//! Tables store the fragments of their tombstones at their newest sequence number only: a
//! table is written by a flush or a compaction, which keep only the newest version of each
//! key, and for a reader at the newest sequence number the newest tombstone over a key is
//! the only one that matters (older snapshots keep the files they read alive).

use crate::coding::{put_bytes, put_varint, Decoder};
use crate::key::SeqNo;
use crate::{Error, Result};

/// One range tombstone: the keys in `start..end` (end exclusive) are deleted at `seq`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RangeTombstone {
    /// First key deleted.
    pub start: Vec<u8>,
    /// First key after the range (exclusive).
    pub end: Vec<u8>,
    /// The sequence number of the deletion: versions written before it are covered.
    pub seq: SeqNo,
}

/// A disjoint piece of one or more tombstones.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fragment {
    start: Vec<u8>,
    end: Vec<u8>,
    /// Sequence numbers of the tombstones covering the piece, newest first, no repeats.
    seqs: Vec<SeqNo>,
}

/// An immutable, searchable set of range tombstones (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fragments {
    /// Sorted by start; disjoint.
    frags: Vec<Fragment>,
}

impl Fragments {
    /// The set of `tombstones` (in any order, overlapping or not; empty ranges are ignored).
    ///
    /// Cost: O(n log n) plus the output, which for n tombstones that all overlap one another
    /// is O(n²) sequence numbers (n fragments of up to n each); sets are built when a range
    /// deletion is written to a memtable and when a version is installed, not per read.
    pub fn new<'a>(tombstones: impl IntoIterator<Item = &'a RangeTombstone>) -> Fragments {
        let mut ts: Vec<&RangeTombstone> =
            tombstones.into_iter().filter(|t| t.start < t.end).collect();
        if ts.is_empty() {
            return Fragments::default();
        }
        ts.sort_by(|a, b| a.start.cmp(&b.start));
        let mut bounds: Vec<&[u8]> =
            ts.iter().flat_map(|t| [t.start.as_slice(), t.end.as_slice()]).collect();
        bounds.sort_unstable();
        bounds.dedup();

        // Sweep the elementary intervals left to right; `active` holds the tombstones that
        // started at or before the interval (those already ended are dropped lazily).
        let mut frags: Vec<Fragment> = Vec::new();
        let mut active: Vec<&RangeTombstone> = Vec::new();
        let mut next = 0;
        for w in bounds.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            while next < ts.len() && ts[next].start.as_slice() <= lo {
                active.push(ts[next]);
                next += 1;
            }
            active.retain(|t| t.end.as_slice() > lo);
            if active.is_empty() {
                continue;
            }
            let mut seqs: Vec<SeqNo> = active.iter().map(|t| t.seq).collect();
            seqs.sort_unstable_by(|a, b| b.cmp(a));
            seqs.dedup();
            // Neighbours with the same tombstones over them are one fragment.
            if let Some(last) = frags.last_mut() {
                if last.end.as_slice() == lo && last.seqs == seqs {
                    last.end = hi.to_vec();
                    continue;
                }
            }
            frags.push(Fragment { start: lo.to_vec(), end: hi.to_vec(), seqs });
        }
        Fragments { frags }
    }

    /// True when the set holds no tombstone.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.frags.is_empty()
    }

    /// The newest sequence number at or below `read_seq` of a tombstone covering `key`.
    pub fn covering_seq(&self, key: &[u8], read_seq: SeqNo) -> Option<SeqNo> {
        let i = self.frags.partition_point(|f| f.end.as_slice() <= key);
        let f = self.frags.get(i).filter(|f| f.start.as_slice() <= key)?;
        let j = f.seqs.partition_point(|&s| s > read_seq);
        f.seqs.get(j).copied()
    }

    /// The newest sequence number of a tombstone overlapping `start..end`.
    pub fn newest_overlapping(&self, start: &[u8], end: &[u8]) -> Option<SeqNo> {
        let i = self.frags.partition_point(|f| f.end.as_slice() <= start);
        self.frags[i..].iter().take_while(|f| f.start.as_slice() < end).map(|f| f.seqs[0]).max()
    }

    /// True if a tombstone visible at `read_seq` deletes the version of `key` written at
    /// `seq`.
    #[inline]
    pub fn covers(&self, key: &[u8], seq: SeqNo, read_seq: SeqNo) -> bool {
        self.covering_seq(key, read_seq).is_some_and(|t| t > seq)
    }

    /// The set as disjoint tombstones sorted by start, each at the newest sequence number
    /// over it: what a table stores (see the module documentation).
    pub fn newest(&self) -> Vec<RangeTombstone> {
        let mut out: Vec<RangeTombstone> = Vec::with_capacity(self.frags.len());
        for f in &self.frags {
            let seq = f.seqs[0];
            if let Some(last) = out.last_mut() {
                if last.end == f.start && last.seq == seq {
                    last.end = f.end.clone();
                    continue;
                }
            }
            out.push(RangeTombstone { start: f.start.clone(), end: f.end.clone(), seq });
        }
        out
    }
}

impl Fragments {
    /// Every piece at every sequence number over it, as tombstones (a set built from them
    /// answers like this one).
    pub fn tombstones(&self) -> impl Iterator<Item = RangeTombstone> + '_ {
        self.frags.iter().flat_map(|f| {
            f.seqs.iter().map(|&seq| RangeTombstone {
                start: f.start.clone(),
                end: f.end.clone(),
                seq,
            })
        })
    }

    /// The union of several sets.
    pub fn union<'a>(sets: impl IntoIterator<Item = &'a Fragments>) -> Fragments {
        let all: Vec<RangeTombstone> = sets.into_iter().flat_map(|s| s.tombstones()).collect();
        Fragments::new(&all)
    }

    /// The tombstones written at or below `seq`: what a snapshot at `seq` sees.
    pub fn at_or_below(&self, seq: SeqNo) -> Fragments {
        let all: Vec<RangeTombstone> = self.tombstones().filter(|t| t.seq <= seq).collect();
        Fragments::new(&all)
    }
}

/// The parts of sorted, disjoint `pieces` inside `[lo, hi)` (`None`: unbounded).
pub fn clip(
    pieces: &[RangeTombstone],
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
) -> Vec<RangeTombstone> {
    pieces
        .iter()
        .filter_map(|t| {
            let start = match lo {
                Some(lo) if lo > t.start.as_slice() => lo,
                _ => t.start.as_slice(),
            };
            let end = match hi {
                Some(hi) if hi < t.end.as_slice() => hi,
                _ => t.end.as_slice(),
            };
            (start < end).then(|| RangeTombstone {
                start: start.to_vec(),
                end: end.to_vec(),
                seq: t.seq,
            })
        })
        .collect()
}

/// Hands a sorted run of disjoint tombstones out to consecutive tables: each table takes
/// the pieces below its upper bound, a tombstone crossing the bound is cut there, so the
/// tables' ranges (including their tombstones) stay disjoint, as a sorted level needs.
#[derive(Debug, Default)]
pub struct TombstoneSplit {
    /// Disjoint, sorted by start; reversed, so the next piece is `pop`ped.
    rest: Vec<RangeTombstone>,
}

impl TombstoneSplit {
    /// `disjoint` must be sorted by start and disjoint, as [`Fragments::newest`] gives them.
    pub fn new(mut disjoint: Vec<RangeTombstone>) -> Self {
        disjoint.reverse();
        TombstoneSplit { rest: disjoint }
    }

    /// The pieces of `set` at their newest sequence numbers (see [`Fragments::newest`]).
    pub fn of(set: Option<&Fragments>) -> Self {
        TombstoneSplit::new(set.map(Fragments::newest).unwrap_or_default())
    }

    /// True when every piece has been handed out.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The pieces below `upper` (all that are left when `None`), cutting the one that
    /// crosses it.
    pub fn take_below(&mut self, upper: Option<&[u8]>) -> Vec<RangeTombstone> {
        let mut out = Vec::new();
        while let Some(t) = self.rest.last_mut() {
            match upper {
                None => out.push(self.rest.pop().expect("checked")),
                Some(u) if t.end.as_slice() <= u => out.push(self.rest.pop().expect("checked")),
                Some(u) if t.start.as_slice() < u => {
                    out.push(RangeTombstone {
                        start: t.start.clone(),
                        end: u.to_vec(),
                        seq: t.seq,
                    });
                    t.start = u.to_vec();
                    break;
                }
                Some(_) => break,
            }
        }
        out
    }
}

/// The smallest key after `key`: `key` followed by a zero byte.
pub fn successor(key: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(key.len() + 1);
    s.extend_from_slice(key);
    s.push(0);
    s
}

/// The largest key a range ending (exclusive) at `end` can hold, if it has a name: for
/// `end = k ++ [0]` that is `k`; otherwise there is none (it would be infinitely long), and
/// `end` itself is returned as a bound one key too large — a table's key range may then
/// claim the key `end`, which only ever makes it look overlapping where it is not.
pub fn last_key_before(end: &[u8]) -> &[u8] {
    match end.split_last() {
        Some((0, k)) => k,
        _ => end,
    }
}

/// Encodes a range-deletion block (see the module documentation).
pub fn encode_block(tombstones: &[RangeTombstone]) -> Vec<u8> {
    let mut b = Vec::new();
    put_varint(&mut b, tombstones.len() as u64);
    for t in tombstones {
        put_varint(&mut b, t.seq);
        put_bytes(&mut b, &t.start);
        put_bytes(&mut b, &t.end);
    }
    b
}

/// Decodes and checks a range-deletion block: every piece non-empty, pieces sorted and
/// disjoint, nothing after the last. Errors carry offsets inside `bytes`.
pub fn decode_block(bytes: &[u8]) -> Result<Vec<RangeTombstone>> {
    let mut d = Decoder::new(bytes);
    let count = d.varint().ok_or_else(|| Error::bad_bytes(0, "range-deletion block: bad count"))?;
    // Each piece takes at least three bytes, so a count beyond that is a lie; checked
    // before it sizes an allocation.
    if count > (bytes.len() / 3) as u64 {
        return Err(Error::bad_bytes(0, format!("range-deletion block: count {count} too large")));
    }
    let mut out: Vec<RangeTombstone> = Vec::with_capacity(count as usize);
    for i in 0..count {
        let at = d.position() as u64;
        let bad = |what: &str| Error::bad_bytes(at, format!("range tombstone {i}: {what}"));
        let seq = d.varint().ok_or_else(|| bad("bad sequence number"))?;
        let start = d.length_prefixed().ok_or_else(|| bad("bad start"))?.to_vec();
        let end = d.length_prefixed().ok_or_else(|| bad("bad end"))?.to_vec();
        if start >= end {
            return Err(bad("start is not below end"));
        }
        if out.last().is_some_and(|prev| prev.end > start) {
            return Err(bad("overlaps or precedes the previous one"));
        }
        out.push(RangeTombstone { start, end, seq });
    }
    if !d.is_empty() {
        return Err(Error::bad_bytes(d.position() as u64, "bytes after the last range tombstone"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(start: &str, end: &str, seq: SeqNo) -> RangeTombstone {
        RangeTombstone { start: start.into(), end: end.into(), seq }
    }

    /// What a set must answer: the newest covering tombstone at or below `read`, by brute force.
    fn model(ts: &[RangeTombstone], key: &[u8], read: SeqNo) -> Option<SeqNo> {
        let inside = |t: &RangeTombstone| t.start.as_slice() <= key && key < t.end.as_slice();
        ts.iter().filter(|t| inside(t) && t.seq <= read).map(|t| t.seq).max()
    }

    #[test]
    fn overlapping_tombstones_answer_by_sequence_number() {
        let ts = [t("b", "f", 10), t("d", "h", 5), t("a", "c", 20)];
        let f = Fragments::new(&ts);
        assert_eq!(f.covering_seq(b"a", 100), Some(20));
        assert_eq!(f.covering_seq(b"b", 100), Some(20));
        assert_eq!(f.covering_seq(b"b", 15), Some(10));
        assert_eq!(f.covering_seq(b"e", 100), Some(10));
        assert_eq!(f.covering_seq(b"e", 9), Some(5));
        assert_eq!(f.covering_seq(b"e", 4), None);
        assert_eq!(f.covering_seq(b"h", 100), None, "end is exclusive");
        assert_eq!(f.covering_seq(b"", 100), None);
        assert!(f.covers(b"e", 7, 100));
        assert!(!f.covers(b"e", 11, 100), "a newer version is not covered");
        assert!(!f.covers(b"e", 7, 6), "a tombstone after the read is not seen");
    }

    #[test]
    fn newest_is_disjoint_and_merges_neighbours() {
        let ts = [t("b", "f", 10), t("d", "h", 5), t("a", "c", 20), t("c", "d", 20)];
        let newest = Fragments::new(&ts).newest();
        assert_eq!(newest, [t("a", "d", 20), t("d", "f", 10), t("f", "h", 5)]);
        assert!(Fragments::new(&[t("b", "b", 3), t("c", "a", 3)]).is_empty());
    }

    #[test]
    fn split_cuts_at_each_bound_and_hands_out_everything_once() {
        let mut s = TombstoneSplit::new(vec![t("a", "d", 3), t("f", "k", 4)]);
        assert_eq!(s.take_below(Some(b"b")), [t("a", "b", 3)]);
        assert_eq!(s.take_below(Some(b"b")), []);
        assert_eq!(s.take_below(Some(b"g")), [t("b", "d", 3), t("f", "g", 4)]);
        assert!(!s.is_empty());
        assert_eq!(s.take_below(None), [t("g", "k", 4)]);
        assert!(s.is_empty());
    }

    #[test]
    fn clip_union_and_snapshots() {
        let pieces = [t("a", "c", 1), t("d", "f", 2)];
        assert_eq!(clip(&pieces, Some(b"b"), Some(b"e")), [t("b", "c", 1), t("d", "e", 2)]);
        assert_eq!(clip(&pieces, Some(b"c"), Some(b"d")), []);
        assert_eq!(clip(&pieces, None, None), pieces);
        let a = Fragments::new(&[t("a", "c", 5)]);
        let b = Fragments::new(&[t("b", "d", 9)]);
        let u = Fragments::union([&a, &b]);
        assert_eq!(u.covering_seq(b"b", 100), Some(9));
        assert_eq!(u.covering_seq(b"b", 8), Some(5));
        assert_eq!(u.at_or_below(8).covering_seq(b"b", 100), Some(5));
        assert_eq!(u.at_or_below(8).covering_seq(b"c", 100), None);
        assert_eq!(Fragments::new(&u.tombstones().collect::<Vec<_>>()), u);
    }

    #[test]
    fn key_bounds() {
        assert_eq!(successor(b"ab"), b"ab\0");
        assert_eq!(last_key_before(b"ab\0"), b"ab");
        assert_eq!(last_key_before(b"ab"), b"ab");
        assert_eq!(last_key_before(b""), b"");
    }

    #[test]
    fn block_round_trip_and_damage() {
        let ts = vec![t("a", "b", 1), t("b", "zz", 9)];
        let enc = encode_block(&ts);
        assert_eq!(decode_block(&enc).unwrap(), ts);
        assert_eq!(decode_block(&encode_block(&[])).unwrap(), []);
        for bad in [
            encode_block(&[t("b", "a", 1)]),
            encode_block(&[t("a", "c", 1), t("b", "d", 2)]),
            [enc.clone(), vec![0]].concat(),
            enc[..enc.len() - 1].to_vec(),
            vec![0xff, 0xff, 0xff, 0x0f],
        ] {
            assert!(decode_block(&bad).unwrap_err().is_corruption());
        }
    }

    fn arb_tombstones() -> impl Strategy<Value = Vec<RangeTombstone>> {
        let key = || prop::collection::vec(0u8..4, 0..3);
        prop::collection::vec(
            (key(), key(), 1u64..30).prop_map(|(start, end, seq)| RangeTombstone {
                start,
                end,
                seq,
            }),
            0..12,
        )
    }

    proptest! {
        #[test]
        fn fragments_answer_like_the_tombstones(
            ts in arb_tombstones(),
            probes in prop::collection::vec((prop::collection::vec(0u8..4, 0..4), 0u64..32), 1..40),
        ) {
            let f = Fragments::new(&ts);
            let newest = Fragments::new(&f.newest());
            for (key, read) in probes {
                prop_assert_eq!(f.covering_seq(&key, read), model(&ts, &key, read));
                // The stored form answers alike for the newest reader.
                prop_assert_eq!(newest.covering_seq(&key, u64::MAX), model(&ts, &key, u64::MAX));
            }
            let newest = f.newest();
            prop_assert!(newest.windows(2).all(|w| w[0].end <= w[1].start));
            prop_assert_eq!(decode_block(&encode_block(&newest)).unwrap(), newest);
        }
    }
}
