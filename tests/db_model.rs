//! Model-based test: random operations against the engine and a `BTreeMap`, with memtables
//! small enough that the sequences drive many flushes and compactions, and close/reopen in the
//! middle. Scans are checked forward, backward and with their two ends interleaved against
//! `BTreeMap::range`, and cursors against a model cursor over the map, live and on snapshots.

use std::collections::BTreeMap;
use std::ops::Bound;

use bloomkv::{
    CompactionStyle, Cursor, Db, DbIterator, Options, Readable, WriteBatch, WriteOptions,
};
use proptest::prelude::*;

mod common;

use common::keys::{group_prefix, grouped};
use common::model::{entries, pairs, Model, Pair};

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u16),
    Delete(u16),
    Get(u16),
    MultiGet(Vec<u16>),
    Range(u16, u16),
    /// A range with any kinds of bounds (see `bounds`), scanned backward.
    RangeRev(u16, u16, u8),
    /// A range whose two ends are taken in turn as the pattern says (true: front).
    RangeMixed(u16, u16, u8, Vec<bool>),
    PrefixRev(u8),
    CursorWalk(u16, u16, u8, Vec<CursorOp>),
    Prefix(u8),
    Batch(Vec<(u16, Option<u16>)>),
    /// `delete_range(grouped(a)..grouped(b))`; with a value, inside a batch between a put of
    /// `grouped(a)` (deleted by it) and a put of `grouped((a + b) / 2)` (not).
    DeleteRange(u16, u16, Option<u16>),
    Snapshot,
    CheckSnapshot,
    Flush,
    Compact,
    Reopen,
}

#[derive(Debug, Clone)]
enum CursorOp {
    Seek(u16),
    SeekForPrev(u16),
    /// A seek to a prefix of keys, which lies between two keys (or before the first).
    SeekPrefix(u8),
    SeekForPrevPrefix(u8),
    First,
    Last,
    Next(u8),
    Prev(u8),
}

fn cursor_op() -> impl Strategy<Value = CursorOp> {
    let k = 0u16..600;
    prop_oneof![
        2 => k.clone().prop_map(CursorOp::Seek),
        2 => k.prop_map(CursorOp::SeekForPrev),
        1 => (0u8..37).prop_map(CursorOp::SeekPrefix),
        1 => (0u8..37).prop_map(CursorOp::SeekForPrevPrefix),
        1 => Just(CursorOp::First),
        1 => Just(CursorOp::Last),
        4 => (1u8..6).prop_map(CursorOp::Next),
        4 => (1u8..6).prop_map(CursorOp::Prev),
    ]
}

fn value(v: u16, k: u16) -> Vec<u8> {
    // Values of varied size, some large, so blocks and tables fill unevenly.
    let len = (v as usize * 7 + k as usize) % 300;
    let mut out = format!("v{v}-k{k}-").into_bytes();
    out.resize(out.len() + len, b'x');
    out
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..600;
    prop_oneof![
        30 => (k.clone(), any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)),
        8 => k.clone().prop_map(Op::Delete),
        15 => k.clone().prop_map(Op::Get),
        3 => prop::collection::vec(k.clone(), 0..80).prop_map(Op::MultiGet),
        4 => (k.clone(), k.clone()).prop_map(|(a, b)| Op::Range(a, b)),
        3 => (k.clone(), k.clone(), 0u8..9).prop_map(|(a, b, c)| Op::RangeRev(a, b, c)),
        3 => (k.clone(), k.clone(), 0u8..9, prop::collection::vec(any::<bool>(), 1..12))
            .prop_map(|(a, b, c, p)| Op::RangeMixed(a, b, c, p)),
        1 => (0u8..37).prop_map(Op::PrefixRev),
        3 => (k.clone(), k.clone(), 0u8..9, prop::collection::vec(cursor_op(), 1..40))
            .prop_map(|(a, b, c, w)| Op::CursorWalk(a, b, c, w)),
        2 => (0u8..37).prop_map(Op::Prefix),
        6 => prop::collection::vec((k.clone(), prop::option::of(any::<u16>())), 1..8).prop_map(Op::Batch),
        3 => (k.clone(), k.clone(), prop::option::of(any::<u16>()))
            .prop_map(|(a, b, v)| Op::DeleteRange(a, b, v)),
        2 => Just(Op::Snapshot),
        2 => Just(Op::CheckSnapshot),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

fn options(mapped: bool, style: CompactionStyle) -> Options {
    Options::default()
        .compaction_style(style)
        .mmap_reads(mapped)
        .memtable_bytes(8 << 10)
        .block_bytes(256)
        .target_table_bytes(8 << 10)
        .level_base_bytes(32 << 10)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(4)
        .l0_stop_trigger(6)
}

type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The range between `grouped(a)` and `grouped(b)`, ordered, with bound kinds chosen by `kind`
/// (0..9: lower and upper each included, excluded or unbounded). Never a range
/// `BTreeMap::range` refuses.
fn bounds(a: u16, b: u16, kind: u8) -> Range {
    let (lo, hi) = (grouped(a).min(grouped(b)), grouped(a).max(grouped(b)));
    let side = |k: Vec<u8>, c: u8| match c {
        0 => Bound::Included(k),
        1 => Bound::Excluded(k),
        _ => Bound::Unbounded,
    };
    match (side(lo, kind % 3), side(hi, kind / 3)) {
        (Bound::Excluded(l), Bound::Excluded(h)) if l == h => {
            (Bound::Included(l), Bound::Excluded(h))
        }
        r => r,
    }
}

fn model_range(model: &Model, range: &Range) -> Vec<Pair> {
    model.range(range.clone()).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Takes items from both ends of `it` in the order `pattern` (cycled) gives, and the same
/// from the model's range; checks that they agree item by item and that both ends stay
/// finished once they meet.
fn check_mixed(mut it: DbIterator, model: &Model, range: &Range, pattern: &[bool]) {
    let mut want = model.range(range.clone());
    for (i, &front) in pattern.iter().cycle().enumerate() {
        let (got, expected) =
            if front { (it.next(), want.next()) } else { (it.next_back(), want.next_back()) };
        let got = got.map(|r| r.map(|(k, v)| (k, v.to_vec())).unwrap());
        let expected = expected.map(|(k, v)| (k.clone(), v.clone()));
        assert_eq!(
            got,
            expected,
            "step {i} ({}) of {pattern:?} over {range:?}",
            if front { "front" } else { "back" }
        );
        if expected.is_none() {
            break;
        }
    }
    assert!(it.next().is_none() && it.next_back().is_none(), "ends stay finished");
}

/// A cursor over the model: the key it stands on, within `range`.
struct ModelCursor<'a> {
    model: &'a Model,
    range: Range,
    at: Option<Vec<u8>>,
}

impl ModelCursor<'_> {
    fn first_from(&self, from: Bound<Vec<u8>>) -> Option<Vec<u8>> {
        // Intersect [from, ..) with the range by filtering: the model is small.
        let lo_ok = |k: &Vec<u8>| match &from {
            Bound::Included(f) => k >= f,
            Bound::Excluded(f) => k > f,
            Bound::Unbounded => true,
        };
        self.model.range(self.range.clone()).map(|(k, _)| k).find(|k| lo_ok(k)).cloned()
    }

    fn last_to(&self, to: Bound<Vec<u8>>) -> Option<Vec<u8>> {
        let hi_ok = |k: &Vec<u8>| match &to {
            Bound::Included(t) => k <= t,
            Bound::Excluded(t) => k < t,
            Bound::Unbounded => true,
        };
        self.model.range(self.range.clone()).map(|(k, _)| k).rev().find(|k| hi_ok(k)).cloned()
    }

    fn apply(&mut self, op: &CursorOp, c: &mut Cursor) -> usize {
        match *op {
            CursorOp::Seek(k) => {
                c.seek(grouped(k)).unwrap();
                self.at = self.first_from(Bound::Included(grouped(k)));
            }
            CursorOp::SeekForPrev(k) => {
                c.seek_for_prev(grouped(k)).unwrap();
                self.at = self.last_to(Bound::Included(grouped(k)));
            }
            CursorOp::SeekPrefix(p) => {
                c.seek(group_prefix(p)).unwrap();
                self.at = self.first_from(Bound::Included(group_prefix(p)));
            }
            CursorOp::SeekForPrevPrefix(p) => {
                c.seek_for_prev(group_prefix(p)).unwrap();
                self.at = self.last_to(Bound::Included(group_prefix(p)));
            }
            CursorOp::First => {
                c.seek_to_first().unwrap();
                self.at = self.first_from(Bound::Unbounded);
            }
            CursorOp::Last => {
                c.seek_to_last().unwrap();
                self.at = self.last_to(Bound::Unbounded);
            }
            CursorOp::Next(n) | CursorOp::Prev(n) => return n as usize,
        }
        0
    }

    fn step(&mut self, forward: bool, c: &mut Cursor) {
        if forward {
            c.next().unwrap();
            if let Some(k) = self.at.take() {
                self.at = self.first_from(Bound::Excluded(k));
            }
        } else {
            c.prev().unwrap();
            if let Some(k) = self.at.take() {
                self.at = self.last_to(Bound::Excluded(k));
            }
        }
    }
}

/// Walks a cursor over `range` with `walk` and a model cursor beside it, comparing the key
/// and value after every move.
fn check_cursor(mut c: Cursor, model: &Model, range: &Range, walk: &[CursorOp]) {
    let mut m = ModelCursor { model, range: range.clone(), at: None };
    assert!(!c.valid() && c.key().is_none(), "a new cursor is unpositioned");
    for (i, op) in walk.iter().enumerate() {
        let steps = m.apply(op, &mut c);
        for s in 0..steps.max(1) {
            if steps > 0 {
                m.step(matches!(op, CursorOp::Next(_)), &mut c);
            }
            let want = m.at.as_ref().map(|k| (k.clone(), model[k].clone()));
            let got = c.key().map(|k| (k.to_vec(), c.value().unwrap().to_vec()));
            assert_eq!(got, want, "op {i} {op:?} step {s} of {walk:?} over {range:?}");
            assert_eq!(c.valid(), want.is_some());
        }
    }
}

/// What the engine did during a run, summed over reopens.
#[derive(Default, Debug)]
struct Work {
    flushes: u64,
    compactions: u64,
    deepest_level: usize,
}

impl Work {
    fn add(&mut self, db: &Db) {
        let s = db.stats();
        self.flushes += s.flushes;
        self.compactions += s.compactions;
        let deepest = s.tables_per_level.iter().rposition(|&n| n > 0).unwrap_or(0);
        self.deepest_level = self.deepest_level.max(deepest);
    }
}

/// The levels are as lookups need them and recovery checks: below L0 the tables of a level
/// are disjoint, bounding keys included (range tombstones' ends among them), since a lookup
/// asks one table per level; in L0, which lookups ask by newest entry first (then by number),
/// of two tables that overlap the one asked first holds only newer entries.
fn assert_levels_well_formed(db: &Db) {
    let mut tables = db.tables();
    tables.sort_by(|a, b| {
        (&a.keyspace, a.level, &a.smallest_key).cmp(&(&b.keyspace, b.level, &b.smallest_key))
    });
    let show = |t: &bloomkv::TableInfo| {
        format!(
            "{} ({:?}..={:?}, seq {}..={})",
            t.number,
            String::from_utf8_lossy(&t.smallest_key),
            String::from_utf8_lossy(&t.largest_key),
            t.smallest_seq,
            t.largest_seq
        )
    };
    for (i, a) in tables.iter().enumerate() {
        for b in &tables[i + 1..] {
            if a.keyspace != b.keyspace || a.level != b.level {
                break;
            }
            let overlap = a.smallest_key <= b.largest_key && b.smallest_key <= a.largest_key;
            if a.level > 0 {
                assert!(!overlap, "tables {} and {} meet on level {}", show(a), show(b), a.level);
            } else if overlap {
                let (newer, older) = if (a.largest_seq, a.number) > (b.largest_seq, b.number) {
                    (a, b)
                } else {
                    (b, a)
                };
                assert!(
                    newer.smallest_seq > older.largest_seq,
                    "L0 table {} is asked before {} but holds older entries",
                    show(newer),
                    show(older)
                );
            }
        }
    }
}

/// Runs `ops` against a model, the database's point lookups starting with or without
/// mappings (`Options::mmap_reads`) as `mapped` says; every reopen switches.
fn run(ops: Vec<Op>, mapped: bool) -> Work {
    run_styled(ops, mapped, CompactionStyle::Leveled)
}

/// [`run`], the default keyspace compacted in `style`.
fn run_styled(ops: Vec<Op>, mut mapped: bool, style: CompactionStyle) -> Work {
    let mut work = Work::default();
    let dir = tempfile::tempdir().unwrap();
    let mut db = Some(Db::open(dir.path(), options(mapped, style)).unwrap());
    let mut model: Model = BTreeMap::new();
    let mut snap: Option<(bloomkv::Snapshot, Model)> = None;
    for op in ops {
        let d = db.as_ref().unwrap();
        match op {
            Op::Put(k, v) => {
                d.put(grouped(k), value(v, k)).unwrap();
                model.insert(grouped(k), value(v, k));
            }
            Op::Delete(k) => {
                d.delete(grouped(k)).unwrap();
                model.remove(&grouped(k));
            }
            Op::Get(k) => {
                assert_eq!(
                    d.get(grouped(k)).unwrap().map(|v| v.to_vec()),
                    model.get(&grouped(k)).cloned(),
                    "get {k}"
                );
            }
            Op::MultiGet(ks) => {
                let keys: Vec<_> = ks.iter().map(|&k| grouped(k)).collect();
                let got: Vec<_> = d
                    .multi_get(&keys)
                    .unwrap()
                    .into_iter()
                    .map(|v| v.map(|v| v.to_vec()))
                    .collect();
                let want: Vec<_> = keys.iter().map(|k| model.get(k).cloned()).collect();
                assert_eq!(got, want, "multi_get {ks:?}");
            }
            Op::Range(a, b) => {
                let (lo, hi) = (grouped(a).min(grouped(b)), grouped(a).max(grouped(b)));
                let got =
                    pairs(d.range((Bound::Included(lo.clone()), Bound::Excluded(hi.clone()))));
                let want: Vec<_> = model
                    .range(lo.clone()..hi.clone())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "range {a}..{b}");
                let got =
                    pairs(d.range((Bound::Excluded(lo.clone()), Bound::Included(hi.clone()))));
                let want: Vec<_> = model
                    .range((Bound::Excluded(lo), Bound::Included(hi)))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "range ({a}, {b}]");
            }
            Op::RangeRev(a, b, kind) => {
                let range = bounds(a, b, kind);
                let mut want = model_range(&model, &range);
                want.reverse();
                assert_eq!(pairs(d.range(range.clone()).rev()), want, "reverse {range:?}");
                if grouped(a) != grouped(b) {
                    // Inverted bounds hold nothing, either way.
                    let (lo, hi) = (grouped(a).max(grouped(b)), grouped(a).min(grouped(b)));
                    assert_eq!(pairs(d.range(lo.clone()..=hi.clone()).rev()), vec![]);
                    assert_eq!(pairs(d.range(lo..=hi)), vec![]);
                }
            }
            Op::RangeMixed(a, b, kind, pattern) => {
                let range = bounds(a, b, kind);
                check_mixed(d.range(range.clone()), &model, &range, &pattern);
            }
            Op::PrefixRev(p) => {
                let prefix = group_prefix(p);
                let want: Vec<_> = model
                    .iter()
                    .rev()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(pairs(d.prefix(&prefix).rev()), want, "reverse prefix {p}");
            }
            Op::CursorWalk(a, b, kind, walk) => {
                let range = bounds(a, b, kind);
                check_cursor(d.cursor(range.clone()), &model, &range, &walk);
            }
            Op::Prefix(p) => {
                let prefix = group_prefix(p);
                let got = pairs(d.prefix(&prefix));
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "prefix {p}");
            }
            Op::Batch(entries) => {
                let mut b = WriteBatch::new();
                for (k, v) in &entries {
                    match v {
                        Some(v) => {
                            b.put(grouped(*k), value(*v, *k));
                            model.insert(grouped(*k), value(*v, *k));
                        }
                        None => {
                            b.delete(grouped(*k));
                            model.remove(&grouped(*k));
                        }
                    }
                }
                d.write(&b, &WriteOptions::new().sync(entries.len() % 2 == 0)).unwrap();
            }
            Op::DeleteRange(a, b, v) => {
                let (start, end) = (grouped(a), grouped(b));
                let doomed: Vec<Vec<u8>> = if start < end {
                    model.range(start.clone()..end.clone()).map(|(k, _)| k.clone()).collect()
                } else {
                    Vec::new()
                };
                match v {
                    None => {
                        d.delete_range(start..end).unwrap();
                        for k in doomed {
                            model.remove(&k);
                        }
                    }
                    Some(v) => {
                        let mid = a / 2 + b / 2;
                        let mut batch = WriteBatch::new();
                        batch.put(grouped(a), value(v, a));
                        batch.delete_range(start.clone()..end.clone());
                        batch.put(grouped(mid), value(v, mid));
                        d.write(&batch, &WriteOptions::new()).unwrap();
                        model.insert(grouped(a), value(v, a));
                        if start < end {
                            let doomed: Vec<Vec<u8>> =
                                model.range(start..end).map(|(k, _)| k.clone()).collect();
                            for k in doomed {
                                model.remove(&k);
                            }
                        }
                        model.insert(grouped(mid), value(v, mid));
                    }
                }
            }
            Op::Snapshot => snap = Some((d.snapshot(), model.clone())),
            Op::CheckSnapshot => {
                if let Some((s, m)) = &snap {
                    let got = pairs(s.range(..));
                    let want = entries(m);
                    assert_eq!(got, want, "snapshot scan");
                    // Backward, from both ends, and by cursor: later writes stay invisible.
                    let mut back = pairs(s.range(..).rev());
                    back.reverse();
                    assert_eq!(back, want, "snapshot reverse scan");
                    let all = (Bound::Unbounded, Bound::Unbounded);
                    check_mixed(s.range(..), m, &all, &[true, false, false]);
                    let walk = [
                        CursorOp::Last,
                        CursorOp::Prev(5),
                        CursorOp::Next(3),
                        CursorOp::Seek(300),
                        CursorOp::Prev(4),
                        CursorOp::SeekForPrev(300),
                        CursorOp::Next(4),
                    ];
                    check_cursor(s.cursor(..), m, &all, &walk);
                    for k in m.keys().take(20) {
                        assert_eq!(s.get(k).unwrap().map(|v| v.to_vec()).as_ref(), m.get(k));
                    }
                    // Every tenth key the model ever knew of, present or not at the snapshot.
                    let keys: Vec<_> = (0..600).step_by(10).map(grouped).collect();
                    let got: Vec<_> = s
                        .multi_get(&keys)
                        .unwrap()
                        .into_iter()
                        .map(|v| v.map(|v| v.to_vec()))
                        .collect();
                    let want: Vec<_> = keys.iter().map(|k| m.get(k).cloned()).collect();
                    assert_eq!(got, want, "snapshot multi_get");
                }
            }
            Op::Flush => {
                d.flush().unwrap();
                assert_levels_well_formed(d);
            }
            Op::Compact => {
                d.compact().unwrap();
                assert_levels_well_formed(d);
                let s = d.stats();
                let nonempty = s.tables_per_level.iter().filter(|&&n| n > 0).count();
                // FIFO merges nothing: `compact` only applies its bounds.
                if !style.is_fifo() {
                    assert!(
                        nonempty <= 1,
                        "after a full compaction all tables share one level: {:?}",
                        s.tables_per_level
                    );
                    assert_eq!(s.tables_per_level[0], 0);
                }
            }
            Op::Reopen => {
                snap = None;
                work.add(d);
                db.take().unwrap().close().unwrap();
                mapped = !mapped;
                db = Some(Db::open(dir.path(), options(mapped, style)).unwrap());
            }
        }
    }
    let d = db.as_ref().unwrap();
    assert_levels_well_formed(d);
    let all = pairs(d.range(..));
    let want = entries(&model);
    assert_eq!(all, want, "final scan");
    let mut back = pairs(d.range(..).rev());
    back.reverse();
    assert_eq!(back, want, "final reverse scan");
    drop(snap);
    work.add(d);
    db.take().unwrap().close().unwrap();
    let d = Db::open(dir.path(), options(!mapped, style)).unwrap();
    assert_eq!(pairs(d.range(..)), want, "final scan after reopen");
    let mut back = pairs(d.range(..).rev());
    back.reverse();
    assert_eq!(back, want, "final reverse scan after reopen");
    work
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_btreemap(
        ops in prop::collection::vec(op(), 200..1500),
        mapped in any::<bool>(),
    ) {
        run(ops, mapped);
    }
}

/// The styles besides leveled, FIFO without bounds (so that it drops nothing the model
/// holds): each reads right through its own shape.
fn other_styles() -> [CompactionStyle; 4] {
    [
        CompactionStyle::Tiered,
        CompactionStyle::LazyLeveling,
        CompactionStyle::Fluid { k: 2, z: 2 },
        CompactionStyle::Fifo { max_bytes: u64::MAX, max_age: None },
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_btreemap_in_each_style(
        ops in prop::collection::vec(op(), 200..1500),
        mapped in any::<bool>(),
        style in 0..4usize,
    ) {
        run_styled(ops, mapped, other_styles()[style]);
    }
}

/// [`long_sequence_reaches_deeper_levels`] in each style besides leveled: the styles that
/// gather runs merge them (into the last level too), FIFO merges nothing.
#[test]
fn long_sequence_in_each_style() {
    for style in other_styles() {
        let work = run_styled(long_sequence(), true, style);
        assert!(work.flushes >= 20, "{style:?}: {work:?}");
        if style.is_fifo() {
            assert_eq!(work.deepest_level, 0, "{style:?}: {work:?}");
        } else {
            assert!(work.compactions >= 5, "{style:?}: {work:?}");
            assert_eq!(work.deepest_level, 6, "{style:?}: {work:?}");
        }
    }
}

/// A long deterministic run that certainly drives several levels.
#[test]
fn long_sequence_reaches_deeper_levels() {
    let work = run(long_sequence(), true);
    assert!(work.flushes >= 20 && work.compactions >= 10, "{work:?}");
    assert!(work.deepest_level >= 2, "{work:?}");
}

fn long_sequence() -> Vec<Op> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    (0..20_000)
        .map(|i| match rng.gen_range(0..100) {
            0..=69 => Op::Put(rng.gen_range(0..5000), rng.gen()),
            70..=84 => Op::Delete(rng.gen_range(0..5000)),
            85..=94 => Op::Get(rng.gen_range(0..5000)),
            95 => Op::MultiGet((0..40).map(|_| rng.gen_range(0..5000)).collect()),
            96 => match rng.gen_range(0..3) {
                0 => Op::RangeRev(
                    rng.gen_range(0..5000),
                    rng.gen_range(0..5000),
                    rng.gen_range(0..9),
                ),
                1 => Op::RangeMixed(
                    rng.gen_range(0..5000),
                    rng.gen_range(0..5000),
                    rng.gen_range(0..9),
                    (0..rng.gen_range(1..8)).map(|_| rng.gen()).collect(),
                ),
                _ => {
                    let walk = (0..30)
                        .map(|_| match rng.gen_range(0..8) {
                            0 => CursorOp::Seek(rng.gen_range(0..5000)),
                            1 => CursorOp::SeekForPrev(rng.gen_range(0..5000)),
                            2 => CursorOp::First,
                            3 => CursorOp::Last,
                            4 | 5 => CursorOp::Next(rng.gen_range(1..20)),
                            _ => CursorOp::Prev(rng.gen_range(1..20)),
                        })
                        .collect();
                    Op::CursorWalk(
                        rng.gen_range(0..5000),
                        rng.gen_range(0..5000),
                        rng.gen_range(0..9),
                        walk,
                    )
                }
            },
            97 => Op::Snapshot,
            98 => Op::CheckSnapshot,
            _ if i % 7 == 0 => Op::Reopen,
            _ if i % 7 == 1 => {
                let a = rng.gen_range(0..5000);
                let b = a + rng.gen_range(0..300);
                Op::DeleteRange(a, b, rng.gen_bool(0.5).then(|| rng.gen()))
            }
            _ => Op::Range(rng.gen_range(0..2500), rng.gen_range(2500..5000)),
        })
        .collect()
}

/// A cursor's entries are the cursor's keys from where it stands, each direction; a step
/// that fails is the last item, and the cursor is left where iteration stopped.
#[test]
fn cursor_entries_yield_from_the_position_and_end_on_an_error() {
    let (_dir, db) = common::db::open_temp(Options::default());
    for k in ["a", "b", "c", "d"] {
        db.put(k, k).unwrap();
    }
    let keys =
        |it: bloomkv::CursorEntries<'_>| -> Vec<Vec<u8>> { it.map(|kv| kv.unwrap().0).collect() };
    let mut cursor = db.cursor("a".."d");
    assert!(keys(cursor.entries()).is_empty(), "an unpositioned cursor yields nothing");
    cursor.seek("b").unwrap();
    assert_eq!(keys(cursor.entries()), [b"b", b"c"]);
    cursor.seek_for_prev("b").unwrap();
    assert_eq!(keys(cursor.entries_back()), [b"b", b"a"]);
    cursor.seek_to_first().unwrap();
    let mut it = cursor.entries();
    assert_eq!(it.next().unwrap().unwrap(), (b"a".to_vec(), bloomkv::Value::from("a")));
    drop(it);
    assert_eq!(cursor.key(), Some(&b"b"[..]));

    db.close().unwrap();
    let mut it = cursor.entries();
    assert_eq!(it.next().unwrap().unwrap().0, b"b");
    assert!(matches!(it.next(), Some(Err(bloomkv::Error::Closed))));
    assert!(it.next().is_none());
}
