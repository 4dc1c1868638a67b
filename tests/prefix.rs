//! Prefix extractors and the prefix entries of table filters: scans inside one prefix skip
//! the tables that hold none of it, and answer exactly what they answered without.
//!
//! The model test writes keys of a dozen shared prefixes (and a few out of every extractor's
//! domain), deletes some, range-deletes some, flushes, compacts, reopens — sometimes with
//! another extractor or none, or without whole keys in the filters — and checks prefix scans,
//! bounded scans inside one prefix, cursors and `prefixes_exist`, in both directions and at a
//! snapshot, against a `BTreeMap`.

use std::collections::BTreeMap;
use std::ops::Bound;

use bloomkv::{Db, FilterPolicy, KeyspaceOptions, Options, PrefixExtractor, Readable, Snapshot};
use proptest::prelude::*;

mod common;

use common::model::{keys_of, pairs, Model};
use common::options::OptionsExt;

/// Prefix `p` under every extractor the test uses: 4 bytes ending in the delimiter.
fn prefix(p: u8) -> Vec<u8> {
    format!("p{p:02}/").into_bytes()
}

/// A key of prefix `p`; suffix 255 gives the key out of every domain ("pNN", no delimiter).
fn key(p: u8, s: u8) -> Vec<u8> {
    if s == 255 {
        return format!("p{p:02}").into_bytes();
    }
    let mut k = prefix(p);
    k.push(b'a' + s);
    k
}

/// The extractors a run switches between (index 0: none).
const EXTRACTORS: [Option<PrefixExtractor>; 4] = [
    None,
    Some(PrefixExtractor::Fixed(4)),
    Some(PrefixExtractor::UpToDelimiter(b'/')),
    Some(PrefixExtractor::Fixed(2)),
];

fn options(extractor: usize, whole_keys: bool) -> Options {
    // Tiny memtables and tables: a short run makes several L0 tables and a sorted level.
    Options::default()
        .memtable_bytes(1 << 10)
        .target_table_bytes(1 << 10)
        .block_bytes(128)
        .level_base_bytes(4 << 10)
        .l0_triggers(4)
        .prefix_extractor(EXTRACTORS[extractor])
        .whole_key_filtering(whole_keys)
}

#[derive(Debug, Clone)]
enum Op {
    Put(u8, u8, u16),
    Delete(u8, u8),
    /// Range-delete suffixes `[from, from + n)` of a prefix.
    DeleteRange(u8, u8, u8),
    /// Range-delete whole prefixes `[p, p + n)`.
    DeletePrefixes(u8, u8),
    Flush,
    Compact,
    /// Reopen with extractor `EXTRACTORS[i]`, whole keys in filters or not.
    Reopen(usize, bool),
    Snapshot,
    /// Scan prefix `p` (whole prefix, or its first 2 or 5 bytes), forward or backward.
    ScanPrefix(u8, usize, bool),
    /// Scan suffixes `[a, b)` or `[a, b]` of one prefix, forward or backward.
    ScanRange(u8, u8, u8, bool, bool),
    /// Cursor inside one prefix: seek to a suffix, step forward then back.
    Cursor(u8, u8),
    Exists(Vec<u8>),
    Get(u8, u8),
}

/// Prefixes 0..12 are written; 12..16 never are, so scans of them are of absent prefixes.
fn op() -> impl Strategy<Value = Op> {
    let p = || 0..16u8;
    let s = || prop_oneof![9 => 0..8u8, 1 => Just(255u8)];
    prop_oneof![
        30 => (0..12u8, s(), any::<u16>()).prop_map(|(p, s, v)| Op::Put(p, s, v)),
        6 => (0..12u8, s()).prop_map(|(p, s)| Op::Delete(p, s)),
        2 => (0..12u8, 0..8u8, 1..4u8).prop_map(|(p, s, n)| Op::DeleteRange(p, s, n)),
        1 => (0..12u8, 1..3u8).prop_map(|(p, n)| Op::DeletePrefixes(p, n)),
        4 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => (0..4usize, prop::bool::weighted(0.7)).prop_map(|(e, w)| Op::Reopen(e, w)),
        1 => Just(Op::Snapshot),
        6 => (p(), 0..3usize, any::<bool>()).prop_map(|(p, l, r)| Op::ScanPrefix(p, l, r)),
        4 => (p(), 0..9u8, 0..9u8, any::<bool>(), any::<bool>())
            .prop_map(|(p, a, b, i, r)| Op::ScanRange(p, a, b, i, r)),
        2 => (p(), 0..9u8).prop_map(|(p, s)| Op::Cursor(p, s)),
        2 => prop::collection::vec(p(), 1..6).prop_map(Op::Exists),
        3 => (0..12u8, s()).prop_map(|(p, s)| Op::Get(p, s)),
    ]
}

/// The model's keys in `range`, forward or backward.
fn model_keys(m: &Model, range: (Bound<Vec<u8>>, Bound<Vec<u8>>), rev: bool) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = m.range(range).map(|(k, _)| k.clone()).collect();
    if rev {
        keys.reverse();
    }
    keys
}

fn successor(p: &[u8]) -> Bound<Vec<u8>> {
    let mut s = p.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xff {
            s.push(last + 1);
            return Bound::Excluded(s);
        }
    }
    Bound::Unbounded
}

struct Run {
    dir: tempfile::TempDir,
    db: Db,
    model: Model,
    snapshot: Option<(Snapshot, Model)>,
}

impl Run {
    /// Every read the test makes, through the database or a snapshot, against `m`.
    fn check_reads(&self, op: &Op, snap: Option<&Snapshot>, m: &Model) {
        let db = &self.db;
        match op {
            Op::ScanPrefix(p, len, rev) => {
                let full = prefix(*p);
                let pre = match len {
                    0 => full.clone(),
                    1 => full[..2].to_vec(),
                    _ => key(*p, 0),
                };
                let it = snap.map_or_else(|| db.prefix(&pre), |s| s.prefix(&pre));
                let got = if *rev { keys_of(it.rev()) } else { keys_of(it) };
                let want = model_keys(m, (Bound::Included(pre.clone()), successor(&pre)), *rev);
                assert_eq!(got, want, "prefix {pre:?}");
            }
            Op::ScanRange(p, a, b, inclusive, rev) => {
                let (lo, hi) = (key(*p, *a), key(*p, *b));
                let upper = if *inclusive {
                    Bound::Included(hi.clone())
                } else {
                    Bound::Excluded(hi.clone())
                };
                let range = (Bound::Included(lo.clone()), upper.clone());
                let it = snap.map_or_else(|| db.range(range.clone()), |s| s.range(range.clone()));
                let got = if *rev { keys_of(it.rev()) } else { keys_of(it) };
                if lo <= hi {
                    assert_eq!(got, model_keys(m, range, *rev), "range {lo:?}..{upper:?}");
                } else {
                    assert!(got.is_empty());
                }
            }
            Op::Cursor(p, s) => {
                let range = (Bound::Included(prefix(*p)), successor(&prefix(*p)));
                let mut c =
                    snap.map_or_else(|| db.cursor(range.clone()), |sn| sn.cursor(range.clone()));
                c.seek(key(*p, *s)).unwrap();
                let after: Vec<_> = m
                    .range(key(*p, *s)..)
                    .take_while(|(k, _)| k.starts_with(&prefix(*p)))
                    .map(|(k, _)| k.clone())
                    .collect();
                assert_eq!(c.key().map(<[u8]>::to_vec), after.first().cloned());
                if after.len() >= 2 {
                    c.next().unwrap();
                    assert_eq!(c.key().map(<[u8]>::to_vec), after.get(1).cloned());
                    c.prev().unwrap();
                }
                if c.valid() {
                    c.prev().unwrap();
                    let before =
                        m.range(prefix(*p)..key(*p, *s)).next_back().map(|(k, _)| k.clone());
                    assert_eq!(c.key().map(<[u8]>::to_vec), before);
                }
                c.seek_to_last().unwrap();
                let last = m.range(range).next_back().map(|(k, _)| k.clone());
                assert_eq!(c.key().map(<[u8]>::to_vec), last);
            }
            Op::Exists(ps) => {
                let prefixes: Vec<Vec<u8>> = ps.iter().map(|&p| prefix(p)).collect();
                let got = match snap {
                    Some(s) => s.prefixes_exist(&prefixes).unwrap(),
                    None => db.prefixes_exist(&prefixes).unwrap(),
                };
                let want: Vec<bool> = prefixes
                    .iter()
                    .map(|pre| {
                        m.range((Bound::Included(pre.clone()), successor(pre))).next().is_some()
                    })
                    .collect();
                assert_eq!(got, want, "{ps:?}");
            }
            Op::Get(p, s) => {
                let got = match snap {
                    Some(sn) => sn.get(key(*p, *s)).unwrap(),
                    None => db.get(key(*p, *s)).unwrap(),
                };
                assert_eq!(got.map(|v| v.to_vec()).as_ref(), m.get(&key(*p, *s)));
            }
            _ => {}
        }
    }
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1, true)).unwrap();
    let mut r = Run { dir, db, model: BTreeMap::new(), snapshot: None };
    for op in ops {
        match &op {
            Op::Put(p, s, v) => {
                r.db.put(key(*p, *s), v.to_le_bytes()).unwrap();
                r.model.insert(key(*p, *s), v.to_le_bytes().to_vec());
            }
            Op::Delete(p, s) => {
                r.db.delete(key(*p, *s)).unwrap();
                r.model.remove(&key(*p, *s));
            }
            Op::DeleteRange(p, s, n) => {
                let (lo, hi) = (key(*p, *s), key(*p, s + n));
                r.db.delete_range(lo.clone()..hi.clone()).unwrap();
                r.model.retain(|k, _| *k < lo || *k >= hi);
            }
            Op::DeletePrefixes(p, n) => {
                let (lo, hi) = (prefix(*p), prefix(p + n));
                r.db.delete_range(lo.clone()..hi.clone()).unwrap();
                r.model.retain(|k, _| *k < lo || *k >= hi);
            }
            Op::Flush => r.db.flush().unwrap(),
            Op::Compact => r.db.compact().unwrap(),
            Op::Reopen(e, w) => {
                r.snapshot = None;
                r.db.close().unwrap();
                r.db = Db::open(r.dir.path(), options(*e, *w).change_settings(true)).unwrap();
            }
            Op::Snapshot => r.snapshot = Some((r.db.snapshot(), r.model.clone())),
            read => {
                r.check_reads(read, None, &r.model);
                if let Some((snap, m)) = &r.snapshot {
                    r.check_reads(read, Some(snap), m);
                }
            }
        }
    }
    assert_eq!(
        pairs(r.db.range(..)),
        r.model.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>()
    );
    r.db.close().unwrap();
    assert_clean(r.dir.path());
}

/// `verify` finds every table consistent: its filter holds each key (if it holds keys) and
/// each prefix of the extractor its properties name, and as many of each as the table has.
fn assert_clean(dir: &std::path::Path) {
    let report = bloomkv::check::database(std::sync::Arc::new(bloomkv::fs::StdFs), dir);
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{:?}", report.problems);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: common::env::u64_or("BLOOMKV_PROPTEST_CASES", 48) as u32,
        ..ProptestConfig::default()
    })]

    #[test]
    fn prop_prefix_scans_match_a_model(ops in prop::collection::vec(op(), 1..250)) {
        run(ops);
    }
}

/// Twelve L0 tables, table `p` holding prefix `p` (8 keys), one key of prefix 15 and the
/// key `p00` (out of the domain, below every prefix), so that every table's key range
/// covers prefixes 0 to 15: a scan of one prefix reads one
/// table and skips the rest, in both directions, and a scan of an absent prefix reads none
/// (at 20 bits per key the chance of a false positive among twelve tables is about 10⁻³·⁵;
/// the filters are deterministic, so this either always passes or never).
fn one_prefix_per_table(opts: Options) -> (tempfile::TempDir, Db) {
    let (dir, db) = common::db::open_temp(opts.l0_triggers(64));
    for p in 0..12 {
        for s in 0..8 {
            db.put(key(p, s), [p, s]).unwrap();
        }
        db.put(key(15, p), [p]).unwrap();
        db.put(key(0, 255), [p]).unwrap();
        db.flush().unwrap();
    }
    assert_eq!(db.stats().tables_per_level[0], 12);
    (dir, db)
}

#[test]
fn a_prefix_scan_skips_every_table_without_the_prefix() {
    let opts = Options::default()
        .filter_policy(FilterPolicy::BlockedBloom { bits_per_key: 20.0 })
        .prefix_extractor(Some(PrefixExtractor::UpToDelimiter(b'/')));
    let (_dir, db) = one_prefix_per_table(opts);
    let before = db.stats();
    assert_eq!(keys_of(db.prefix(prefix(0))).len(), 8);
    let after = db.stats();
    // Every table's range covers prefix 0; the filters rule out all but one.
    assert_eq!(after.prefix_filter_skips - before.prefix_filter_skips, 11);
    let before = after;
    assert_eq!(keys_of(db.prefix(prefix(5))).len(), 8);
    assert_eq!(keys_of(db.prefix(prefix(5)).rev()).len(), 8);
    let after = db.stats();
    // Each direction asks all twelve filters (the back end is built from the same choice,
    // uncounted); eleven say no.
    assert_eq!(after.prefix_filter_checks - before.prefix_filter_checks, 24);
    assert_eq!(after.prefix_filter_skips - before.prefix_filter_skips, 22);
    // A range inside the prefix, and a cursor over it, skip the same tables.
    assert_eq!(keys_of(db.range(key(5, 2)..key(5, 5))).len(), 3);
    let mut c = db.cursor(key(5, 2)..=key(5, 7));
    c.seek_to_last().unwrap();
    assert_eq!(c.key(), Some(&key(5, 7)[..]));
    let s = db.stats();
    assert_eq!(s.prefix_filter_skips - after.prefix_filter_skips, 22);
    // An absent prefix: every table is skipped.
    assert!(keys_of(db.prefix(prefix(13))).is_empty());
    assert_eq!(db.stats().prefix_filter_skips - s.prefix_filter_skips, 12);
    // A range across two prefixes, or a prefix shorter than the extractor's, skips none.
    let s = db.stats();
    assert_eq!(keys_of(db.range(key(5, 0)..key(6, 1))).len(), 9);
    assert_eq!(keys_of(db.prefix(b"p0")).len(), 81);
    assert_eq!(keys_of(db.prefix(b"p1")).len(), 28);
    assert_eq!(db.stats().prefix_filter_checks, s.prefix_filter_checks);
}

/// Filters of prefixes alone: a point lookup cannot trust their answer for its key, but can
/// for its key's prefix. It skips the tables that hold none of the prefix, searches the
/// rest, and answers right; scans skip as before.
#[test]
fn without_whole_keys_point_lookups_ask_for_the_prefix() {
    let opts = Options::default()
        .filter_policy(FilterPolicy::BlockedBloom { bits_per_key: 20.0 })
        .prefix_extractor(Some(PrefixExtractor::Fixed(4)))
        .whole_key_filtering(false);
    let (dir, db) = one_prefix_per_table(opts);
    assert_clean(dir.path());
    for p in 0..12 {
        assert_eq!(db.get(key(p, 3)).unwrap().as_deref(), Some(&[p, 3][..]));
    }
    assert_eq!(db.get(key(3, 9)).unwrap(), None);
    // Key (p, 3) asks tables 11 down to p (newest first) and is found in p, which alone is
    // read; (3, 9) asks all twelve and reads table 3 alone.
    let s = db.stats();
    let asked: u64 = (0..12).map(|p| 12 - p).sum::<u64>() + 12;
    assert_eq!((s.tables_consulted, s.filter_negatives), (asked, asked - 13));
    // A key out of the extractor's domain has no prefix to ask for: the newest table is
    // searched, and holds it.
    assert_eq!(db.get(key(0, 255)).unwrap().as_deref(), Some(&[11][..]));
    assert_eq!(db.stats().filter_negatives, s.filter_negatives);
    let s = db.stats();
    assert_eq!(keys_of(db.prefix(prefix(2))).len(), 8);
    assert!(db.stats().prefix_filter_skips - s.prefix_filter_skips >= 10);
}

/// With whole keys and prefixes in one filter, a lookup whose key the filter answers "maybe"
/// for asks for the key's prefix as well: an absent key of an absent prefix is searched only
/// if both answers are false, about the square of one filter's rate.
#[test]
fn a_point_lookup_also_asks_for_its_prefix() {
    let opts = Options::default()
        .filter_policy(FilterPolicy::BlockedBloom { bits_per_key: 5.0 })
        .prefix_extractor(Some(PrefixExtractor::UpToDelimiter(b'/')));
    let (_dir, db) = common::db::open_temp(opts);
    // One table of 20,000 keys, each its own prefix: 40,000 entries at 5 bits each (the
    // tree's first table with prefixes, so its bits are not scaled down for them), so either
    // probe alone answers falsely about 10% of the time.
    const N: u32 = 20_000;
    for i in 0..N {
        db.put(format!("{:06}/v", 2 * i), b"x").unwrap();
    }
    db.flush().unwrap();
    let absent = |i: u32, prefix_present: bool| match prefix_present {
        true => format!("{:06}/w", 2 * i),
        false => format!("{:06}/v", 2 * i + 1),
    };
    let searched = |prefix_present| {
        let before = db.stats();
        for i in 0..N - 1 {
            assert_eq!(db.get(absent(i, prefix_present)).unwrap(), None);
        }
        let after = db.stats();
        assert_eq!(after.tables_consulted - before.tables_consulted, u64::from(N - 1));
        after.filter_false_positives - before.filter_false_positives
    };
    // Measured 1% against 10% (a single probe's rate, seen for keys whose prefix is present).
    let (absent_prefix, present_prefix) = (searched(false), searched(true));
    eprintln!("searched: {absent_prefix} (absent prefix), {present_prefix} (present prefix)");
    assert!(absent_prefix < u64::from(N) / 30, "{absent_prefix} of {N} searched");
    assert!(present_prefix > u64::from(N) / 20, "{present_prefix} of {N} searched");
    let keys: Vec<String> = (0..N - 1).map(|i| absent(i, false)).collect();
    let before = db.stats().filter_false_positives;
    assert!(db.multi_get(&keys).unwrap().iter().all(Option::is_none));
    assert_eq!(db.stats().filter_false_positives - before, absent_prefix, "as get");
}

/// A table built with another extractor, or none, is never skipped: after the option
/// changes, the old tables are read (and answer right) until compaction rewrites them.
#[test]
fn tables_of_another_extractor_are_not_skipped() {
    let opts = Options::default().prefix_extractor(Some(PrefixExtractor::Fixed(4)));
    let (dir, db) = one_prefix_per_table(opts.clone());
    db.close().unwrap();
    for other in [None, Some(PrefixExtractor::Fixed(3)), Some(PrefixExtractor::UpToDelimiter(b'/'))]
    {
        let opts = opts.clone().prefix_extractor(other).l0_triggers(64).change_settings(true);
        let db = Db::open(dir.path(), opts).unwrap();
        assert_eq!(keys_of(db.prefix(prefix(4))).len(), 8);
        assert_eq!(keys_of(db.prefix(b"p04")).len(), 8);
        assert_eq!(db.stats().prefix_filter_checks, 0, "{other:?}");
        db.close().unwrap();
    }
    // Back to the extractor the tables were built with: they are skipped again.
    let db = Db::open(dir.path(), opts.l0_triggers(64).change_settings(true)).unwrap();
    assert_eq!(keys_of(db.prefix(prefix(4))).len(), 8);
    assert!(db.stats().prefix_filter_skips >= 10);
}

/// A keyspace's extractor is recorded in the manifest: its background work uses it after a
/// reopen, and opening it with another records that one.
#[test]
fn a_keyspace_keeps_its_extractor_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let ks_opts = KeyspaceOptions::new()
        .prefix_extractor(Some(PrefixExtractor::UpToDelimiter(b'/')))
        .whole_key_filtering(false);
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let ks = db.keyspace("orders", ks_opts).unwrap();
        for p in 0..3 {
            // Each table spans "p00" to "p09/…", so every table's range covers every prefix.
            ks.put(key(p, 0), "v").unwrap();
            ks.put(key(0, 255), "v").unwrap();
            ks.put(key(9, p), "v").unwrap();
            db.flush().unwrap();
        }
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let ks = db.existing_keyspace("orders").unwrap();
    assert_eq!(keys_of(ks.prefix(prefix(1))).len(), 1);
    assert_eq!(db.stats().prefix_filter_skips, 2);
    let tables = ks.tables().unwrap();
    assert!(tables.iter().all(|t| t.prefix_extractor.as_deref() == Some("delimiter:0x2f")));
    assert!(tables.iter().all(|t| t.prefixes == 2 && !t.filter_whole_keys));
}

/// Blocked filters at 10 bits per key holding 5-byte prefixes, with L0 left to grow, so a test
/// decides when compactions run.
fn blocked_with_prefixes() -> Options {
    Options::default()
        .filter_policy(FilterPolicy::BlockedBloom { bits_per_key: 10.0 })
        .prefix_extractor(Some(PrefixExtractor::Fixed(5)))
        .l0_triggers(64)
}

/// Filters are sized by their entries, keys and prefixes alike, at the tree's bits per key
/// scaled by its share of keys among entries: an L0 table of scattered writes (one key per
/// prefix) gets about twice the bits per key of a level holding ten keys per prefix, and that
/// level about the bits per key asked for.
#[test]
fn a_table_of_one_key_per_prefix_gets_more_bits_per_key() {
    let (_dir, db) = common::db::open_temp(blocked_with_prefixes());
    for s in 0..10u32 {
        for p in 0..2000u32 {
            db.put(format!("{p:04}/{s}"), "v").unwrap();
        }
    }
    db.compact().unwrap();
    for p in 0..2000u32 {
        db.put(format!("{p:04}/x"), "v").unwrap();
    }
    db.flush().unwrap();
    let tables = db.tables();
    let bits_per_key = |level: usize| {
        let at: Vec<_> = tables.iter().filter(|t| t.level == level).collect();
        let bits: f64 = at.iter().map(|t| t.filter_memory_bytes as f64 * 8.0).sum();
        bits / at.iter().map(|t| t.entries as f64).sum::<f64>()
    };
    let deepest = tables.iter().map(|t| t.level).max().unwrap();
    let (l0, last) = (bits_per_key(0), bits_per_key(deepest));
    assert!((9.5..11.0).contains(&last), "{last} bits per key on the last level");
    assert!(l0 > 1.6 * last, "{l0} bits per key on L0 against {last}");
}

/// A compaction into the last level is sized at the share of keys among entries the tree will
/// have once it is done, not the one it has: here the last level holds five keys per prefix
/// when the second half of each prefix's keys is merged into it, and the merged level, ten
/// keys per prefix, gets the bits per key asked for (sized at the share before the write it
/// got 9.2).
#[test]
fn a_compaction_into_the_last_level_is_sized_at_the_share_it_leaves() {
    let (_dir, db) = common::db::open_temp(blocked_with_prefixes());
    for half in 0..2u32 {
        for s in 5 * half..5 * half + 5 {
            for p in 0..2000u32 {
                db.put(format!("{p:04}/{s}"), "v").unwrap();
            }
        }
        db.compact().unwrap();
    }
    let tables = db.tables();
    assert!(tables.iter().all(|t| t.prefixes > 0 && t.filter_whole_keys && t.level > 0));
    let bits: f64 = tables.iter().map(|t| t.filter_memory_bytes as f64 * 8.0).sum();
    let keys: f64 = tables.iter().map(|t| t.entries as f64).sum();
    assert_eq!(keys, 20_000.0);
    assert!((9.7..10.8).contains(&(bits / keys)), "{} bits per key", bits / keys);
}

/// Under the budgeted policy the prefix entries are paid for from about the same memory: the
/// tree's filters hold about what they hold without an extractor (bits per key times keys,
/// give or take the rounding of small tables to whole lines). About: a new table's prefixes
/// are estimated before it is written, here from a compacted level holding three keys per
/// prefix for flushes holding one (measured 3.8% over; 9.6% when the estimate took the
/// deepest level's keys per prefix for every new table).
#[test]
fn the_budget_pays_for_prefix_entries_from_the_same_memory() {
    let mut per_key = Vec::new();
    for extractor in [None, Some(PrefixExtractor::Fixed(5))] {
        let opts = Options::default()
            .filter_policy(FilterPolicy::Budgeted { bits_per_key: 10.0 })
            .prefix_extractor(extractor)
            .memtable_bytes(64 << 10)
            .target_table_bytes(64 << 10)
            .l0_triggers(64);
        let (_dir, db) = common::db::open_temp(opts);
        for round in 0..6u32 {
            for p in 0..400u32 {
                db.put(format!("{p:04}/{round}"), "v").unwrap();
            }
            db.flush().unwrap();
            if round == 2 {
                db.compact().unwrap();
            }
        }
        let tables = db.tables();
        let bits: f64 = tables.iter().map(|t| t.filter_memory_bytes as f64 * 8.0).sum();
        let keys: f64 = tables.iter().map(|t| t.entries as f64).sum();
        per_key.push(bits / keys);
        if extractor.is_some() {
            assert!(tables.iter().all(|t| t.prefixes > 0 && t.filter_whole_keys));
        }
    }
    assert!((9.5..11.5).contains(&per_key[0]), "{per_key:?} bits per key");
    assert!((per_key[1] / per_key[0] - 1.0).abs() < 0.06, "{per_key:?} bits per key");
}

/// `Db::filter_runs` splits its what-if budget as the engine does: per filter entry where
/// filters hold prefixes beside keys. A tree of one level is one run, which the budget gives
/// all the memory, so its budgeted rate is the rate its filters have now; split per key, a
/// level of one key per prefix would be promised the rate of twice the bits it has per entry.
#[test]
fn filter_runs_split_the_memory_per_entry_when_filters_hold_prefixes() {
    let opts = Options::default()
        .filter_policy(FilterPolicy::BlockedBloom { bits_per_key: 10.0 })
        .prefix_extractor(Some(PrefixExtractor::Fixed(5)));
    let (_dir, db) = common::db::open_temp(opts);
    for p in 0..20_000u32 {
        db.put(format!("{p:04}/x"), "v").unwrap();
    }
    db.compact().unwrap();
    let runs = db.filter_runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(run.keys, 20_000);
    let spent = run.budgeted_bits_per_key * run.keys as f64;
    assert!((spent - run.filter_bits as f64).abs() < 1.0, "{run:?}");
    let off = run.budgeted_fpr / run.expected_fpr;
    assert!((0.85..1.15).contains(&off), "budgeted {run:?}");
}

/// The memtables' filters hold their keys' prefixes too: a scan inside one prefix leaves
/// out a memtable that holds none of it, as it does a table, and still answers right: a
/// range tombstone in that memtable (beside its skip list, not in it) still deletes older
/// table data, a point tombstone keeps its memtable in the scan, and a snapshot, a reverse
/// scan, a cursor and `prefixes_exist` see what they should.
#[test]
fn a_prefix_scan_skips_a_memtable_without_the_prefix() {
    let opts = Options::default()
        .memtable_bytes(1 << 20)
        .prefix_extractor(Some(PrefixExtractor::UpToDelimiter(b'/')));
    let (_dir, db) = common::db::open_temp(opts);
    // Prefixes 0 to 3 in a table; prefixes 4 and 5 only in the memtable.
    for p in 0..4 {
        for s in 0..4 {
            db.put(key(p, s), [p, s]).unwrap();
        }
    }
    db.flush().unwrap();
    for s in 0..4 {
        db.put(key(4, s), [4, s]).unwrap();
        db.put(key(5, s), [5, s]).unwrap();
    }
    let skips = |db: &Db| db.stats().memtable_prefix_skips;
    let s0 = skips(&db);
    assert_eq!(keys_of(db.prefix(prefix(4))).len(), 4);
    assert_eq!(skips(&db), s0, "the memtable holds prefix 4");
    assert_eq!(keys_of(db.prefix(prefix(2))).len(), 4);
    assert_eq!(keys_of(db.prefix(prefix(13))).len(), 0);
    assert_eq!(skips(&db), s0 + 2, "the memtable holds neither prefix 2 nor prefix 13");

    // Range-delete most of prefix 1 and point-delete a key of prefix 2: the tombstones are
    // in the memtable, the keys they delete in the table.
    let before = db.snapshot();
    db.delete_range(key(1, 1)..key(1, 9)).unwrap();
    db.delete(key(2, 3)).unwrap();
    let s1 = skips(&db);
    assert_eq!(keys_of(db.prefix(prefix(1))), [key(1, 0)]);
    assert_eq!(keys_of(db.prefix(prefix(1)).rev()), [key(1, 0)]);
    assert_eq!(keys_of(db.range(key(1, 1)..=key(1, 3))).len(), 0);
    assert_eq!(skips(&db), s1 + 3, "the range tombstone adds no prefix to the filter");
    assert_eq!(keys_of(db.prefix(prefix(2))), [key(2, 0), key(2, 1), key(2, 2)]);
    assert_eq!(keys_of(db.prefix(prefix(2)).rev()).len(), 3);
    assert_eq!(skips(&db), s1 + 3, "the point tombstone adds its prefix");
    let mut c = db.cursor(prefix(1)..prefix(2));
    c.seek_to_last().unwrap();
    assert_eq!(c.key(), Some(&key(1, 0)[..]));
    assert_eq!(
        db.prefixes_exist(&[prefix(1), prefix(3), prefix(13)]).unwrap(),
        [true, true, false]
    );
    db.delete(key(1, 0)).unwrap();
    assert_eq!(db.prefixes_exist(&[prefix(1)]).unwrap(), [false]);
    // The snapshot from before the deletes reads the same memtable at its own number.
    assert_eq!(keys_of(before.prefix(prefix(1))).len(), 4);
    assert_eq!(keys_of(before.prefix(prefix(2)).rev()).len(), 4);
    assert_eq!(keys_of(before.prefix(prefix(5))).len(), 4);

    // Once the memtable is immutable (and then flushed), the same answers.
    db.flush().unwrap();
    assert!(keys_of(db.prefix(prefix(1))).is_empty());
    assert_eq!(keys_of(db.prefix(prefix(5))).len(), 4);
    assert_eq!(keys_of(before.prefix(prefix(1))).len(), 4);
}

/// A memtable's filter holds the prefixes of the extractor its keyspace had when it was
/// made: a keyspace created with an extractor gets memtables that hold its prefixes even
/// when the default keyspace has none, and a reopen with an extractor gives the default
/// keyspace memtables that hold its prefixes.
#[test]
fn each_keyspace_memtable_holds_its_own_extractor_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().memtable_bytes(1 << 20);
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let ks_opts =
        KeyspaceOptions::new().prefix_extractor(Some(PrefixExtractor::UpToDelimiter(b'/')));
    let ks = db.keyspace("orders", ks_opts).unwrap();
    for s in 0..4 {
        ks.put(key(1, s), "v").unwrap();
        db.put(key(1, s), "v").unwrap();
    }
    assert!(keys_of(db.prefix(prefix(2))).is_empty());
    assert_eq!(db.stats().memtable_prefix_skips, 0, "the default keyspace has no extractor");
    assert!(keys_of(ks.prefix(prefix(2))).is_empty());
    assert_eq!(keys_of(ks.prefix(prefix(1))).len(), 4);
    assert_eq!(db.stats().memtable_prefix_skips, 1);
    db.close().unwrap();

    let fixed = Some(PrefixExtractor::Fixed(4));
    let db = Db::open(dir.path(), opts.prefix_extractor(fixed).change_settings(true)).unwrap();
    db.put(key(1, 5), "v").unwrap();
    assert!(keys_of(db.prefix(prefix(2))).is_empty());
    assert_eq!(db.stats().memtable_prefix_skips, 1);
    assert_eq!(keys_of(db.prefix(prefix(1))).len(), 5);
    assert_eq!(db.stats().memtable_prefix_skips, 1);
    db.close().unwrap();
}
