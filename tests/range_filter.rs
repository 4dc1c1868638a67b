//! Range filters in the engine: every kind of bounded read skips the tables that hold nothing
//! in its range (counted in `Stats`) and answers exactly what it answered without them.
//!
//! The model test writes integer keys (8 bytes, big-endian, some with a byte more), deletes
//! and range-deletes some, flushes, compacts, reopens and takes snapshots, and checks short
//! ranges — both directions, cursors, transactions, at a snapshot — against a `BTreeMap`: a
//! range read never misses a key.

use std::collections::BTreeMap;
use std::ops::Bound::{self, Excluded, Included};

use bloomkv::{Db, FilterPolicy, KeyspaceOptions, Options, ReadMix, Readable, Snapshot, Stats};
use proptest::prelude::*;

mod common;

use common::model::{keys_of, Model};
use common::options::OptionsExt;

fn be(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

/// Twelve L0 tables, table `t` holding the keys `100·(t + 12·i)` for `i` in 0..50: every
/// table's key range spans all of them, so only the range filters can rule a table out. At
/// 20 bits per key a range of width 100 is a false positive with probability about 4·10⁻⁴
/// per table; the filters are deterministic, so the exact counts below either always hold
/// or never.
fn interleaved(opts: Options) -> (tempfile::TempDir, Db) {
    let (dir, db) = common::db::open_temp(opts.l0_triggers(64));
    for t in 0..12u64 {
        for i in 0..50 {
            db.put(be(100 * (t + 12 * i)), [t as u8]).unwrap();
        }
        db.flush().unwrap();
    }
    assert_eq!(db.stats().tables_per_level[0], 12);
    (dir, db)
}

fn with_range_filters() -> Options {
    Options::default().range_filter_bits_per_key(Some(20.0))
}

/// (probes, skips) since `before`.
fn delta(db: &Db, before: &Stats) -> (u64, u64) {
    let s = db.stats();
    (
        s.range_filter_probes - before.range_filter_probes,
        s.range_filter_skips - before.range_filter_skips,
    )
}

#[test]
fn bounded_ranges_skip_the_tables_without_a_key_in_them() {
    let (_dir, db) = interleaved(with_range_filters());
    // Empty: between two keys. Every table is asked and skipped, both directions.
    for rev in [false, true] {
        let s = db.stats();
        let it = db.range(be(1_201)..be(1_299));
        let got = if rev { keys_of(it.rev()) } else { keys_of(it) };
        assert!(got.is_empty());
        assert_eq!(delta(&db, &s), (12, 12), "rev {rev}");
    }
    // One key, inclusive and exclusive ends: only its table is read.
    let s = db.stats();
    assert_eq!(keys_of(db.range(be(1_250)..=be(1_300))), [be(1_300)]);
    assert_eq!(delta(&db, &s), (12, 11));
    let s = db.stats();
    assert!(keys_of(db.range((Excluded(be(1_300)), Excluded(be(1_400))))).is_empty());
    // `1300 ++ [0]` and on lie inside an excluded 1300's range: 1300's table is not ruled
    // out by its integer, the others are.
    assert_eq!(delta(&db, &s), (12, 11));
    let s = db.stats();
    assert_eq!(keys_of(db.range(be(1_300)..be(1_400)).rev()), [be(1_300)]);
    assert_eq!(delta(&db, &s), (12, 11));
    // Unbounded at an end: nothing asked. Bounded around every key: each table asked (its
    // keys share 6 bytes, so the range maps to their last two's 65,536 values, narrower
    // than the filter's widest), none skipped. Results whole.
    let s = db.stats();
    assert_eq!(keys_of(db.range(be(59_900)..)).len(), 1);
    assert_eq!(keys_of(db.range(..be(100))).len(), 1);
    assert_eq!(delta(&db, &s), (0, 0));
    assert_eq!(keys_of(db.range(be(0)..be(1 << 40))).len(), 600);
    assert_eq!(delta(&db, &s), (12, 0));
}

/// A memtable holding keys, none in the range, is left out of an empty range's scan like
/// the tables its filters skip; one holding a key in the range is read, from either end.
#[test]
fn a_memtable_without_a_key_in_the_range_is_left_out_too() {
    let (_dir, db) = interleaved(with_range_filters());
    db.put(be(1_000), b"mem").unwrap();
    db.put(be(1_290), b"mem").unwrap();
    db.delete(be(1_310)).unwrap();
    for rev in [false, true] {
        let it = db.range(be(1_201)..be(1_289));
        assert!(if rev { keys_of(it.rev()) } else { keys_of(it) }.is_empty());
        let it = db.range(be(1_201)..=be(1_290));
        assert_eq!(if rev { keys_of(it.rev()) } else { keys_of(it) }, [be(1_290)]);
        // The memtable's delete hides nothing here, and its key in range is all there is.
        let it = db.range((Excluded(be(1_290)), Excluded(be(1_399))));
        assert_eq!(if rev { keys_of(it.rev()) } else { keys_of(it) }, [be(1_300)]);
    }
    let mut both = db.range(be(1_201)..=be(1_400));
    assert_eq!(both.next().unwrap().unwrap().0, be(1_290));
    assert_eq!(both.next_back().unwrap().unwrap().0, be(1_400));
    assert_eq!(both.next().unwrap().unwrap().0, be(1_300));
    assert!(both.next().is_none() && both.next_back().is_none());
}

#[test]
fn without_the_option_nothing_is_asked() {
    let (_dir, db) = interleaved(Options::default());
    assert!(keys_of(db.range(be(1_201)..be(1_299))).is_empty());
    assert_eq!(delta(&db, &Stats::default()), (0, 0));
}

#[test]
fn cursors_snapshots_keyspaces_and_transactions_skip_too() {
    let (_dir, db) = interleaved(with_range_filters());
    // A bounded cursor: positioned by seeks, it sees the range's keys alone.
    let s = db.stats();
    let mut c = db.cursor(be(1_250)..be(1_350));
    c.seek(be(0)).unwrap();
    assert_eq!(c.key(), Some(&be(1_300)[..]));
    c.next().unwrap();
    assert!(!c.valid());
    c.seek_for_prev(be(9_999)).unwrap();
    assert_eq!(c.key(), Some(&be(1_300)[..]));
    assert_eq!(delta(&db, &s), (12, 11));

    // A snapshot taken before more writes reads its own tables, skipping them alike.
    let snap = db.snapshot();
    db.put(be(1_275), b"later").unwrap();
    db.flush().unwrap();
    let s = db.stats();
    assert_eq!(keys_of(snap.range(be(1_250)..be(1_299))), Vec::<Vec<u8>>::new());
    assert_eq!(delta(&db, &s), (12, 12));
    let s = db.stats();
    assert_eq!(keys_of(db.range(be(1_250)..be(1_299))), [be(1_275)]);
    assert_eq!(delta(&db, &s), (13, 12));

    // A transaction's range read (the newest table, holding 1275 alone, is out of range).
    let s = db.stats();
    let tx = db.transaction();
    assert!(keys_of(tx.range(be(2_401)..be(2_499))).is_empty());
    assert_eq!(delta(&db, &s), (12, 12));

    // A keyspace with its own option.
    let ks =
        db.keyspace("k", KeyspaceOptions::new().range_filter_bits_per_key(Some(20.0))).unwrap();
    for t in 0..4u64 {
        for i in 0..20 {
            ks.put(be(100 * (t + 4 * i)), b"v").unwrap();
        }
        db.flush().unwrap();
    }
    // Tables 0 and 1 (from 0 and 100 on) meet the range, 2 and 3 start past it.
    let s = db.stats();
    assert!(keys_of(ks.range(be(101)..=be(199))).is_empty());
    assert_eq!(delta(&db, &s), (2, 2));
}

/// (probes, skips, false positives) since `before`.
fn delta3(db: &Db, before: &Stats) -> (u64, u64, u64) {
    let (p, s) = delta(db, before);
    (p, s, db.stats().range_filter_false_positives - before.range_filter_false_positives)
}

/// Every table a filter lets through for a range that holds no key is a false positive; one
/// holding a key in range is not; a table is counted once however the scan moves, and a
/// table read for its range tombstone is not counted. At 8 bits per key (ranges up to 32
/// integers asked) a range of 20 is let through by a table about a quarter of the time, so
/// the counts below are large, and exact: probes less skips.
#[test]
fn false_positives_are_the_tables_let_through_that_held_nothing() {
    let few_bits = Options::default().range_filter_bits_per_key(Some(8.0));
    let (_dir, db) = interleaved(few_bits.clone());
    let empty = |k: u64| be(100 * k + 1)..=be(100 * k + 20);
    let s = db.stats();
    for k in 0..600 {
        assert!(keys_of(db.range(empty(k))).is_empty());
    }
    let (probes, skips, fps) = delta3(&db, &s);
    // Near the ends some tables' key ranges miss the range.
    assert!(probes > 580 * 12, "{probes}");
    assert_eq!(fps, probes - skips);
    assert!(fps > 600, "{fps} false positives: the case proves little");
    // Backward, alike; and a scan read from both ends counts each table once.
    let s = db.stats();
    for k in 0..600 {
        assert!(keys_of(db.range(empty(k)).rev()).is_empty());
    }
    assert_eq!(delta3(&db, &s), (probes, skips, fps));
    let s = db.stats();
    for k in 0..600 {
        let mut it = db.range(empty(k));
        assert!(it.next().is_none());
        assert!(it.next_back().is_none());
        let mut it = db.range(empty(k));
        assert!(it.next_back().is_none());
        assert!(it.next().is_none());
    }
    assert_eq!(delta3(&db, &s), (2 * probes, 2 * skips, 2 * fps));
    // A range holding one key (in table k % 12): that table is read rightly.
    let s = db.stats();
    for k in 0..600 {
        assert_eq!(keys_of(db.range(be(100 * k)..=be(100 * k + 20))), [be(100 * k)]);
    }
    let (p, s2, f) = delta3(&db, &s);
    assert_eq!(f, p - s2 - 600);
    // Bounded cursors, positioned from the range's ends.
    let s = db.stats();
    for k in 0..600 {
        let mut c = db.cursor(empty(k));
        c.seek_to_first().unwrap();
        assert!(!c.valid());
    }
    assert_eq!(delta3(&db, &s), (probes, skips, fps));

    // Below L0: the same keys compacted into a level of several tables.
    let (_dir, db) = interleaved(few_bits.target_table_bytes(8 << 10));
    db.compact().unwrap();
    let stats = db.stats();
    assert_eq!(stats.tables_per_level[0], 0);
    assert!(stats.tables_per_level.iter().max().unwrap() > &1, "{:?}", stats.tables_per_level);
    let s = db.stats();
    for k in 0..600 {
        assert!(keys_of(db.range(empty(k))).is_empty());
        assert!(keys_of(db.range(empty(k)).rev()).is_empty());
    }
    let (p, s2, f) = delta3(&db, &s);
    assert_eq!(f, p - s2);
    assert!(f > 0);

    // A table read for its range tombstone is no false positive.
    let (_dir, db) = common::db::open_temp(with_range_filters().l0_triggers(64));
    db.put(be(5_000), b"old").unwrap();
    db.flush().unwrap();
    db.delete_range(be(4_000)..be(6_000)).unwrap();
    db.put(be(1_000), b"new").unwrap();
    db.flush().unwrap();
    let s = db.stats();
    assert!(keys_of(db.range(be(4_990)..be(5_010))).is_empty());
    assert_eq!(delta3(&db, &s), (2, 0, 0));
}

/// A named keyspace's range filter setting is recorded with its options: after a reopen,
/// background work (here a full compaction, before the keyspace is opened again) builds its
/// tables with the filter, and `keyspace_options` gives the setting back. Opening it with
/// another setting records that one (it only shapes tables written later).
#[test]
fn a_keyspace_keeps_its_range_filter_setting_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let rf = KeyspaceOptions::new().range_filter_bits_per_key(Some(20.0));
    let db = Db::open(dir.path(), Options::default().l0_triggers(64)).unwrap();
    let ks = db.keyspace("k", rf.clone()).unwrap();
    for t in 0..3u64 {
        for i in 0..50 {
            ks.put(be(100 * (t + 3 * i)), b"v").unwrap();
        }
        db.flush().unwrap();
    }
    drop(ks);
    db.close().unwrap();

    let db = Db::open(dir.path(), Options::default().l0_triggers(64)).unwrap();
    assert_eq!(db.keyspace_options("k").unwrap().range_filter_bits_per_key, Some(20.0));
    db.compact().unwrap();
    // The recorded options, as `keyspace_options` gives them back, keep the filter on.
    let ks = db.keyspace("k", db.keyspace_options("k").unwrap()).unwrap();
    let s = db.stats();
    assert!(keys_of(ks.range(be(101)..=be(199))).is_empty());
    assert_eq!(delta(&db, &s), (1, 1), "the compacted table has a range filter");
    drop(ks);
    db.close().unwrap();

    // Turned off at an open: recorded, so the next reopen's compaction builds none.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.keyspace("k", rf.range_filter_bits_per_key(None)).unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.keyspace_options("k").unwrap().range_filter_bits_per_key, None);
    let ks = db.keyspace("k", KeyspaceOptions::new()).unwrap();
    ks.put(be(1), b"v").unwrap();
    db.compact().unwrap();
    let s = db.stats();
    assert!(keys_of(ks.range(be(101)..=be(199))).is_empty());
    assert_eq!(delta(&db, &s), (0, 0));
}

/// `Stats` count range-filter probes, skips and false positives by level, the totals their
/// sums: twelve L0 tables are asked on L0, and after a full compaction the one table asked is
/// on the last level.
#[test]
fn range_filter_stats_are_kept_per_level() {
    // Few bits: a range of 99 integers is a false positive about once in ten.
    let (_dir, db) = interleaved(Options::default().range_filter_bits_per_key(Some(12.0)));
    let level = |s: &Stats, l: usize| s.range_filter_per_level[l];
    let sums = |s: &Stats| {
        let l = &s.range_filter_per_level;
        assert_eq!(s.range_filter_probes, l.iter().map(|l| l.probes).sum::<u64>());
        assert_eq!(s.range_filter_skips, l.iter().map(|l| l.skips).sum::<u64>());
        let fp = l.iter().map(|l| l.false_positives).sum::<u64>();
        assert_eq!(s.range_filter_false_positives, fp);
    };
    let before = db.stats();
    assert!(keys_of(db.range(be(1_201)..be(1_299))).is_empty());
    // Ranges inside gaps of every table: false positives among them, on L0.
    for i in 12..512u64 {
        assert!(keys_of(db.range(be(i * 100 + 1)..=be(i * 100 + 99))).is_empty());
    }
    let s = db.stats();
    sums(&s);
    let l0 = (level(&s, 0).probes - level(&before, 0).probes, level(&s, 0).skips);
    assert_eq!(l0.0, 12 * 501);
    let fp = level(&s, 0).false_positives;
    assert!(fp > 0 && fp < l0.0 / 4 && fp == l0.0 - (l0.1 - level(&before, 0).skips), "{s:?}");
    assert!(s.range_filter_per_level[1..].iter().all(|l| l.probes == 0));

    db.compact().unwrap();
    let deepest = db.stats().tables_per_level.iter().rposition(|&n| n > 0).unwrap();
    assert!(deepest > 0);
    let before = db.stats();
    assert!(keys_of(db.range(be(1_201)..be(1_299))).is_empty());
    let s = db.stats();
    sums(&s);
    assert_eq!(level(&s, deepest).probes - level(&before, deepest).probes, 1);
    assert_eq!(level(&s, 0), level(&before, 0));
}

/// Bits per key of the live tables' point filters and range filters, as RAM holds them.
fn filter_bits(tables: &[bloomkv::TableInfo]) -> (f64, f64) {
    let keys = tables.iter().map(|t| t.entries).sum::<u64>() as f64;
    let point = tables.iter().map(|t| t.filter_memory_bytes).sum::<usize>() as f64;
    let range = tables.iter().map(|t| t.range_filter_memory_bytes).sum::<usize>() as f64;
    (8.0 * point / keys, 8.0 * range / keys)
}

fn budgeted(share: f64, width: u64) -> Options {
    Options::default()
        .l0_triggers(64)
        .filter_policy(FilterPolicy::Budgeted { bits_per_key: 20.0 })
        .read_mix(Some(ReadMix::new(share, width)))
}

/// Under a budget with a read mix, the tables' point and range filters share the budget's
/// memory: the larger the share of range reads, the more of it goes to range filters, the
/// total staying within the budget; the small runs (L0 tables over a large level) get more
/// range bits per key than the large one, as they get more point bits.
#[test]
fn a_budget_splits_its_memory_between_point_and_range_filters_by_the_read_mix() {
    let mut last = (f64::MAX, -1.0);
    for share in [0.0, 0.1, 0.5, 0.9] {
        let (_dir, db) = common::db::open_temp(budgeted(share, 64));
        for i in 0..40_000u64 {
            db.put(be(i * 100), b"v").unwrap();
        }
        db.compact().unwrap();
        // One run: the whole budget is its two filters'.
        let (point, range) = filter_bits(&db.tables());
        assert!((19.0..=20.5).contains(&(point + range)), "{share}: {point} + {range}");
        assert!(point < last.0 && range > last.1, "{share}: {point}, {range} after {last:?}");
        last = (point, range);
        if share == 0.0 {
            assert_eq!(range, 0.0);
            continue;
        }
        // Four small runs above the level.
        for t in 0..4u64 {
            for i in 0..2_000u64 {
                db.put(be(i * 2_000 + t * 10 + 5), b"v").unwrap();
            }
            db.flush().unwrap();
        }
        let tables = db.tables();
        let bits = |level: usize| {
            let t = tables.iter().find(|t| t.level == level).unwrap();
            (t.filter_requested_bits_per_key, t.range_filter_requested_bits_per_key.unwrap_or(0.0))
        };
        let (l0, deep) = (bits(0), bits(tables.iter().map(|t| t.level).max().unwrap()));
        assert!(l0.1 > deep.1 && l0.0 >= deep.0, "{share}: L0 {l0:?}, last level {deep:?}");
    }
}

/// A point read asks a table's range filter after its point filter's "maybe", and the range
/// filter turns nearly every false one away: in a run with a range filter, a point filter's
/// false positive costs a probe, not a block read. The split prices it so, and the point
/// filter keeps fewer bits than a split pricing it at a block read would leave it.
#[test]
fn a_point_filters_false_positives_are_priced_at_the_range_probe_that_follows() {
    use bloomkv::filter::budget::{allocate_weighted, CurveKind, RANGE_OVERHEAD_BITS};
    use bloomkv_tree::filter_budget::SCREENED_POINT_COST;
    let (_dir, db) = common::db::open_temp(budgeted(0.5, 64));
    for i in 0..40_000u64 {
        db.put(be(i * 100), b"v").unwrap();
    }
    db.compact().unwrap();
    let tables = db.tables();
    assert!(tables.iter().all(|t| t.level == tables[0].level), "one run");
    let kinds = [CurveKind::Blocked, CurveKind::Range { width: 64 }];
    // One run of n keys: the budget's 20 bits per key spread over 2n filter keys.
    let split = |point_cost: f64| allocate_weighted(&[1, 1], &kinds, &[point_cost, 0.5], 10.0);
    let (at_a_probe, at_a_block) = (split(0.5 * SCREENED_POINT_COST), split(0.5));
    for t in &tables {
        let point = t.filter_requested_bits_per_key;
        // A range filter's share includes its select samples.
        let range = t.range_filter_requested_bits_per_key.unwrap() + RANGE_OVERHEAD_BITS;
        assert!((point - at_a_probe[0]).abs() < 0.01, "{point} against {at_a_probe:?}");
        assert!(point < at_a_block[0] - 1.0, "{point} against {at_a_block:?}");
        assert!(range > at_a_block[1] + 1.0, "{range} against {at_a_block:?}");
    }
}

/// A named keyspace's read mix is recorded with its options: after a reopen, background work
/// (here a full compaction, before the keyspace is opened again) splits the budget as it did,
/// and `keyspace_options` gives the mix back.
#[test]
fn a_keyspace_keeps_its_read_mix_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = KeyspaceOptions::new()
        .filter_policy(FilterPolicy::Budgeted { bits_per_key: 20.0 })
        .read_mix(Some(ReadMix::new(0.7, 64)));
    let db = Db::open(dir.path(), Options::default().l0_triggers(64)).unwrap();
    let ks = db.keyspace("k", opts.clone()).unwrap();
    for t in 0..3u64 {
        for i in 0..2_000u64 {
            ks.put(be(100 * (t + 3 * i)), b"v").unwrap();
        }
        db.flush().unwrap();
    }
    drop(ks);
    db.close().unwrap();

    let db = Db::open(dir.path(), Options::default().l0_triggers(64)).unwrap();
    assert_eq!(db.keyspace_options("k").unwrap().read_mix, Some(ReadMix::new(0.7, 64)));
    db.compact().unwrap();
    let ks = db.keyspace("k", db.keyspace_options("k").unwrap()).unwrap();
    let tables = ks.tables().unwrap();
    assert_eq!(tables.len(), 1);
    // One run: its point and range filters (and the range filter's select samples, 0.35 bit
    // per key) take the whole budget.
    let point = tables[0].filter_requested_bits_per_key;
    let range = tables[0].range_filter_requested_bits_per_key.expect("a range filter");
    assert!((point + range + 0.35 - 20.0).abs() < 0.01, "{point} + {range}");
    assert!(range > 10.0 && point > 3.0, "{point} + {range}");
    let s = db.stats();
    assert!(keys_of(ks.range(be(101)..=be(199))).is_empty());
    assert_eq!(delta(&db, &s), (1, 1), "the compacted table has a range filter");
}

/// A read mix needs a budget to split, and replaces a fixed range filter.
#[test]
fn a_read_mix_without_a_budget_or_with_a_fixed_range_filter_is_refused() {
    let mix = Some(ReadMix::new(0.5, 16));
    let dir = tempfile::tempdir().unwrap();
    let refused = |o: Options| match Db::open(dir.path(), o) {
        Err(bloomkv::Error::InvalidArgument(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(refused(Options::default().read_mix(mix)).contains("budget"));
    let both = budgeted(0.5, 16).range_filter_bits_per_key(Some(16.0));
    assert!(refused(both).contains("range_filter_bits_per_key"));
    assert!(refused(budgeted(1.5, 16)).contains("range_share"));
    assert!(refused(budgeted(0.5, 0)).contains("range_width"));
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let ks = db.keyspace("k", KeyspaceOptions::new().read_mix(mix));
    assert!(matches!(ks, Err(bloomkv::Error::InvalidArgument(_))));
}

/// A table whose range tombstone covers part of the range is read (its tombstone hides the
/// older table's key either way: the version applies every table's tombstones).
#[test]
fn a_range_tombstone_keeps_its_table_and_hides_older_keys() {
    let (_dir, db) = common::db::open_temp(with_range_filters().l0_triggers(64));
    db.put(be(5_000), b"old").unwrap();
    db.put(be(9_000), b"old").unwrap();
    db.flush().unwrap();
    db.delete_range(be(4_000)..be(6_000)).unwrap();
    db.put(be(1_000), b"new").unwrap();
    db.flush().unwrap();
    let s = db.stats();
    assert!(keys_of(db.range(be(4_990)..be(5_010))).is_empty());
    // The newer table's tombstone meets the range: both read.
    assert_eq!(delta(&db, &s), (2, 0));
    // Past the tombstone (and the newer table's key range): the older table is skipped.
    let s = db.stats();
    assert!(keys_of(db.range(be(6_100)..be(6_200))).is_empty());
    assert_eq!(delta(&db, &s), (1, 1));
}

/// (lookups' range-filter negatives, point filters' false positives, block reads) since
/// `before`.
fn point_delta(db: &Db, before: &Stats) -> (u64, u64, u64) {
    let s = db.stats();
    (
        s.range_filter_point_negatives - before.range_filter_point_negatives,
        s.filter_false_positives - before.filter_false_positives,
        s.block_reads + s.block_cache_hits - before.block_reads - before.block_cache_hits,
    )
}

/// With no point filter every table in a lookup's path says "maybe", so each is asked its
/// range filter for the key alone: an absent key between two present ones is turned away by
/// all twelve (about 2^-18 each to let it through at 20 bits per key), with no block read,
/// by `get` and `multi_get` alike; a present key is found, the tables before its own turned
/// away.
#[test]
fn point_reads_ask_the_range_filter_after_a_point_filter_maybe() {
    let (_dir, db) = interleaved(with_range_filters().filter_policy(FilterPolicy::None));
    // Inside every table's key range: table t holds 100·t to 100·(t + 588).
    let absent: Vec<Vec<u8>> = (11..587).map(|i| be(100 * i + 50)).collect();
    let s = db.stats();
    for k in &absent {
        assert_eq!(db.get(k).unwrap(), None);
    }
    let (negatives, false_positives, blocks) = point_delta(&db, &s);
    assert_eq!(negatives + false_positives, 576 * 12);
    assert!(false_positives <= 2, "{false_positives}");
    assert_eq!(blocks, false_positives);
    let s = db.stats();
    assert!(db.multi_get(&absent).unwrap().iter().all(Option::is_none));
    assert_eq!(point_delta(&db, &s), (negatives, false_positives, false_positives));
    // Key 100·(t + 12·i) is in table t, the 12 − t − 1 newer tables before it turned away.
    let s = db.stats();
    for t in 0..12u64 {
        assert_eq!(db.get(be(100 * (t + 12 * 7))).unwrap().as_deref(), Some(&[t as u8][..]));
    }
    let (negatives, false_positives, blocks) = point_delta(&db, &s);
    assert_eq!(negatives + false_positives, (0..12).sum::<u64>());
    assert_eq!(blocks, 12 + false_positives);
}

/// A table read only for keys it holds stops asking its range filter after a point filter's
/// "maybe" (every such probe answers "maybe"): the first absent keys after them read the
/// table's block instead, until they bring the probe back, and then are turned away again —
/// through `get` and `multi_get` alike, with the same answers throughout.
#[test]
fn point_reads_leave_out_the_range_probe_while_it_turns_nothing_away() {
    for multi in [false, true] {
        let opts = with_range_filters().filter_policy(FilterPolicy::None);
        let (_dir, db) = common::db::open_temp(opts);
        for i in 0..1000u64 {
            db.put(be(100 * i), [1]).unwrap();
        }
        db.flush().unwrap();
        let read = |keys: &[Vec<u8>]| -> Vec<Option<bloomkv::Value>> {
            if multi {
                db.multi_get(keys).unwrap()
            } else {
                keys.iter().map(|k| db.get(k).unwrap()).collect()
            }
        };
        let present: Vec<Vec<u8>> = (0..200).map(|i| be(100 * i)).collect();
        let s = db.stats();
        assert!(read(&present).iter().all(Option::is_some));
        // (`multi_get` searches one block for all of them.)
        let (negatives, false_positives, _) = point_delta(&db, &s);
        assert_eq!((negatives, false_positives), (0, 0));
        let mut blocks_read = 0;
        loop {
            let s = db.stats();
            assert_eq!(read(&[be(100 * blocks_read + 50)]), [None]);
            match point_delta(&db, &s) {
                (1, 0, 0) => break,
                delta => assert_eq!(delta, (0, 1, 1), "absent key {blocks_read}"),
            }
            blocks_read += 1;
            assert!(blocks_read < 10, "the probe still left out after {blocks_read} absent keys");
        }
        assert!(blocks_read >= 2, "one absent key brought the probe back");
        let absent: Vec<Vec<u8>> = (500..600).map(|i| be(100 * i + 50)).collect();
        let s = db.stats();
        assert!(read(&absent).iter().all(Option::is_none));
        let (negatives, false_positives, blocks) = point_delta(&db, &s);
        assert_eq!(negatives + false_positives, 100);
        assert!(false_positives <= 1 && blocks == false_positives, "{false_positives}");
    }
}

/// Keys that share the 8 bytes past the filter's prefix all map to one integer: the range
/// filter cannot tell them apart, so it answers "maybe" for each and a point read never loses
/// one, whatever kind of entry decides it — a put, a delete, a merge operand, a value held in
/// a blob file, an expiring value (live or expired) — through `get` and `multi_get`. Keys
/// whose integer no table holds are turned away.
#[test]
fn point_reads_never_lose_a_key_the_map_cannot_separate() {
    use std::sync::Arc;
    use std::time::Duration;
    let clock = Arc::new(bloomkv::ManualClock::new(1_700_000_000_000));
    let opts = with_range_filters()
        .filter_policy(FilterPolicy::None)
        .merge_operator(Arc::new(bloomkv::Append::new(",")))
        .blob_threshold(Some(1000))
        .clock(clock.clone())
        .l0_triggers(64);
    let (_dir, db) = common::db::open_temp(opts);
    // `a` or `b`, the shared 7 bytes, then the key's number: the window is `[g] ++ "shared!"`.
    let long = |g: u8, i: u64| [&[g][..], b"shared!", &i.to_be_bytes()].concat();
    let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    for g in [b'a', b'b'] {
        for i in 0..200u64 {
            let v = format!("v{i}").into_bytes();
            db.put(long(g, i), &v).unwrap();
            model.insert(long(g, i), Some(v));
        }
    }
    db.flush().unwrap();
    let big = vec![7u8; 2000];
    for (round, g) in [b'a', b'b'].into_iter().enumerate() {
        for i in (0..200u64).filter(|i| i % 7 == round as u64) {
            let k = long(g, i);
            let v = model.get_mut(&k).unwrap();
            match i % 5 {
                0 => {
                    db.delete(&k).unwrap();
                    *v = None;
                }
                1 => {
                    db.put_with_ttl(&k, b"short", Duration::from_secs(10)).unwrap();
                    *v = None;
                }
                2 => {
                    db.merge(&k, b"m").unwrap();
                    v.as_mut().unwrap().extend_from_slice(b",m");
                }
                3 => {
                    db.put(&k, &big).unwrap();
                    *v = Some(big.clone());
                }
                _ => {
                    db.put_with_ttl(&k, b"long", Duration::from_secs(1_000)).unwrap();
                    *v = Some(b"long".to_vec());
                }
            }
        }
        db.flush().unwrap();
    }
    clock.advance(Duration::from_secs(60));
    assert_eq!(db.stats().tables_per_level[0], 3);
    // Absent keys of both integers, and of an integer between them (inside the oldest
    // table's key range only) that no table holds.
    for i in 200..260u64 {
        for g in [b'a', b'b'] {
            model.insert(long(g, i), None);
        }
        model.insert([&b"ashares!"[..], &i.to_be_bytes()].concat(), None);
    }
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    let want: Vec<Option<Vec<u8>>> = model.values().cloned().collect();
    let s = db.stats();
    let got: Vec<Option<Vec<u8>>> =
        keys.iter().map(|k| db.get(k).unwrap().map(|v| v.to_vec())).collect();
    assert!(got == want, "get disagrees with the model");
    let got: Vec<Option<Vec<u8>>> =
        db.multi_get(&keys).unwrap().into_iter().map(|v| v.map(|v| v.to_vec())).collect();
    assert!(got == want, "multi_get disagrees with the model");
    // The oldest table holds both groups, so its filter maps by `[g] ++ "shared!"` and
    // cannot tell a group's keys apart: the absent `a` ones past the newer tables' ranges
    // (and inside its own) are searched there (60 keys × 2 reads). The newer tables hold one
    // group each, map by the keys' numbers, and turn away what they lack, as the oldest
    // turns away every `ashares!` key.
    let (negatives, false_positives, _) = point_delta(&db, &s);
    assert!(false_positives >= 2 * 60, "{false_positives}");
    assert!(negatives >= 2 * 60, "{negatives}");
}

// The model test.

#[derive(Debug, Clone)]
enum Op {
    Put(u16, bool),
    Delete(u16),
    DeleteRange(u16, u8),
    Flush,
    Compact,
    Reopen(u8),
    Snapshot,
    /// A range from key `k`'s integer plus `a` (−1 to 1) to key `k + j`'s plus `b`, inclusive
    /// or not at each end: its ends on, just before or just after keys, where a filter that
    /// lost an integer would miss one. In one of the read kinds (0 forward, 1 backward, 2
    /// cursor, 3 transaction).
    Read {
        k: u16,
        j: u8,
        a: i8,
        b: i8,
        incl: (bool, bool),
        how: u8,
    },
}

/// Key `k`: its integer ×16 (so ranges between keys are empty), with a byte more when
/// `long` (a key the 8-byte window does not hold whole).
fn key(k: u16, long: bool) -> Vec<u8> {
    let mut v = be(u64::from(k) * 16);
    if long {
        v.push(7);
    }
    v
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..400u16;
    prop_oneof![
        30 => (k.clone(), prop::bool::weighted(0.2)).prop_map(|(k, l)| Op::Put(k, l)),
        6 => k.clone().prop_map(Op::Delete),
        3 => (k.clone(), 1..20u8).prop_map(|(k, n)| Op::DeleteRange(k, n)),
        5 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => (0..3u8).prop_map(Op::Reopen),
        2 => Just(Op::Snapshot),
        30 => (k, 0..5u8, -1..=1i8, -1..=1i8, any::<(bool, bool)>(), 0..4u8)
            .prop_map(|(k, j, a, b, incl, how)| Op::Read { k, j, a, b, incl, how }),
    ]
}

/// The options of range-filter mode `mode`: 0 none, 1 a fixed range filter, 2 a budget split
/// between point and range filters for a read mix.
fn options(mode: u8) -> Options {
    let o = Options::default()
        .memtable_bytes(2 << 10)
        .target_table_bytes(2 << 10)
        .block_bytes(256)
        .level_base_bytes(8 << 10)
        .l0_triggers(4);
    match mode {
        0 => o,
        // Few bits (ranges up to 128 integers asked): false positives as well as skips.
        1 => o.range_filter_bits_per_key(Some(10.0)),
        // Tables of each level get their own split, some of them (the small runs) range
        // filters of many bits, the large ones few or none.
        _ => o
            .filter_policy(FilterPolicy::Budgeted { bits_per_key: 12.0 })
            .read_mix(Some(ReadMix::new(0.5, 32))),
    }
}

fn read(
    db: &Db,
    snap: Option<&Snapshot>,
    range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    how: u8,
) -> Vec<Vec<u8>> {
    match (how, snap) {
        (0, None) => keys_of(db.range(range)),
        (0, Some(s)) => keys_of(s.range(range)),
        (1, None) => keys_of(db.range(range).rev()),
        (1, Some(s)) => keys_of(s.range(range).rev()),
        (2, _) => {
            let mut c = snap.map_or_else(|| db.cursor(range.clone()), |s| s.cursor(range.clone()));
            let mut keys = Vec::new();
            c.seek_to_first().unwrap();
            while let Some(k) = c.key() {
                keys.push(k.to_vec());
                c.next().unwrap();
            }
            // And back from the end, which must agree.
            c.seek_to_last().unwrap();
            let mut back = Vec::new();
            while let Some(k) = c.key() {
                back.push(k.to_vec());
                c.prev().unwrap();
            }
            back.reverse();
            assert_eq!(back, keys);
            keys
        }
        _ => match snap {
            // A transaction reads at its own snapshot: only of the live database here.
            Some(s) => keys_of(s.range(range)),
            None => keys_of(db.transaction().range(range)),
        },
    }
}

fn run(ops: Vec<Op>, mode: u8) {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), options(mode)).unwrap();
    let mut model: Model = BTreeMap::new();
    let mut snapshot: Option<(Snapshot, Model)> = None;
    for op in ops {
        match op {
            Op::Put(k, long) => {
                db.put(key(k, long), [k as u8]).unwrap();
                model.insert(key(k, long), vec![k as u8]);
            }
            Op::Delete(k) => {
                db.delete(key(k, false)).unwrap();
                model.remove(&key(k, false));
            }
            Op::DeleteRange(k, n) => {
                let (lo, hi) = (key(k, false), key(k + u16::from(n), false));
                db.delete_range(lo.clone()..hi.clone()).unwrap();
                model.retain(|x, _| *x < lo || *x >= hi);
            }
            Op::Flush => db.flush().unwrap(),
            Op::Compact => db.compact().unwrap(),
            Op::Reopen(mode) => {
                snapshot = None;
                db.close().unwrap();
                db = Db::open(dir.path(), options(mode)).unwrap();
            }
            Op::Snapshot => snapshot = Some((db.snapshot(), model.clone())),
            Op::Read { k, j, a, b, incl: (incl_lo, incl_hi), how } => {
                let at = |k: u64, d: i8| be((k * 16).saturating_add_signed(i64::from(d)));
                let (lo, hi) = (at(u64::from(k), a), at(u64::from(k) + u64::from(j), b));
                let range = (
                    if incl_lo { Included(lo.clone()) } else { Excluded(lo.clone()) },
                    if incl_hi { Included(hi.clone()) } else { Excluded(hi.clone()) },
                );
                if lo > hi || (lo == hi && !(incl_lo && incl_hi)) {
                    continue;
                }
                let want = |m: &Model| {
                    let mut keys: Vec<Vec<u8>> =
                        m.range(range.clone()).map(|(k, _)| k.clone()).collect();
                    if how == 1 {
                        keys.reverse();
                    }
                    keys
                };
                assert_eq!(
                    read(&db, None, range.clone(), how),
                    want(&model),
                    "{range:?} how {how}"
                );
                if let Some((s, m)) = &snapshot {
                    assert_eq!(
                        read(&db, Some(s), range.clone(), how),
                        want(m),
                        "snapshot {range:?}"
                    );
                }
            }
        }
    }
    assert_eq!(keys_of(db.range(..)), model.keys().cloned().collect::<Vec<_>>());
    // Only tables a filter let through are ever false positives.
    let s = db.stats();
    assert!(s.range_filter_false_positives <= s.range_filter_probes - s.range_filter_skips);
    db.close().unwrap();
    let report = bloomkv::check::database(std::sync::Arc::new(bloomkv::fs::StdFs), dir.path());
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{:?}", report.problems);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: common::env::u64_or("BLOOMKV_PROPTEST_CASES", 48) as u32,
        ..ProptestConfig::default()
    })]

    #[test]
    fn prop_range_reads_never_miss_a_key(ops in prop::collection::vec(op(), 1..300)) {
        run(ops, 1);
    }

    /// The same under a budget split between point and range filters.
    #[test]
    fn prop_budgeted_range_reads_never_miss_a_key(ops in prop::collection::vec(op(), 1..300)) {
        run(ops, 2);
    }
}

/// The model test's runs skip tables (it would prove little if every table were read).
#[test]
fn the_model_runs_skip_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1)).unwrap();
    for k in 0..400u16 {
        db.put(key(k * 3 % 400, false), b"v").unwrap();
    }
    db.flush().unwrap();
    for k in 0..400u64 {
        keys_of(db.range(be(k * 16 + 1)..be(k * 16 + 15)));
    }
    let s = db.stats();
    assert!(s.range_filter_skips > s.range_filter_probes / 2, "{s:?}");
}
