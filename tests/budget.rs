//! `FilterPolicy::Budgeted` in the engine: each table written gets the share of the memory
//! budget that `filter::budget::allocate` gives its run in the tree as the write leaves it —
//! flushes to L0, compaction outputs, ingests — and databases move between policies freely.

use bloomkv::filter::budget::allocate;
use bloomkv::filter::FilterKind;
use bloomkv::{Db, FilterPolicy, Options, Readable, TableInfo};

mod common;

use common::keys::key8;
use common::options::OptionsExt;

const BUDGET: FilterPolicy = FilterPolicy::Budgeted { bits_per_key: 10.0 };

fn put_range(db: &Db, range: std::ops::Range<u64>) {
    for i in range {
        db.put(key8(i), format!("value {i}")).unwrap();
    }
}

fn ingest_range(db: &Db, range: std::ops::Range<u64>) {
    let n = range.end - range.start;
    assert_eq!(db.ingest(range.map(|i| (key8(i), format!("value {i}")))).unwrap(), n);
}

fn close_and_read(db: Db, opts: Options) -> Db {
    let dir = db.path().to_path_buf();
    db.close().unwrap();
    // Read-only: no background work can change the tables while they are checked.
    Db::open_read_only(dir, opts).unwrap()
}

fn requested(t: &TableInfo) -> f64 {
    t.filter_requested_bits_per_key
}

fn assert_near(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-9, "{what}: {got} bits/key, want {want}");
}

fn assert_clean(dir: &std::path::Path) {
    let report = bloomkv::check::database(std::sync::Arc::new(bloomkv::fs::StdFs), dir);
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{:?}", report.problems);
}

/// Flushes into an empty tree get the average; flushes over a larger level get their run's
/// share, more than the average; a manual compaction rewrites the tree into one run, which
/// gets the average again.
#[test]
fn flushes_get_their_runs_share_and_compaction_brings_the_tree_back_to_the_average() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().filter_policy(BUDGET).l0_triggers(100);
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    put_range(&db, 0..20_000);
    db.flush().unwrap();
    assert_near(requested(&db.tables()[0]), 10.0, "the first table of an empty tree");
    db.compact().unwrap();
    put_range(&db, 20_000..22_000);
    db.flush().unwrap();
    put_range(&db, 22_000..24_000);
    db.flush().unwrap();

    let db = close_and_read(db, opts.clone());
    let tables = db.tables();
    let levels: Vec<usize> = tables.iter().map(|t| t.level).collect();
    assert_eq!(levels, [0, 0, 1], "{tables:?}");
    let (newer, older, base) = (&tables[0], &tables[1], &tables[2]);
    assert_near(requested(base), 10.0, "a compaction into a tree of one run");
    // Runs as each flush left them: the older L0 table over the 20k-key level, then the
    // newer one over both.
    assert_near(requested(older), allocate(&[20_000, 2_000], 10.0)[1], "first L0 table");
    assert_near(requested(newer), allocate(&[2_000, 20_000, 2_000], 10.0)[2], "second L0 table");
    assert!(requested(older) > 13.0, "{}", requested(older));
    for t in &tables {
        assert_eq!(t.filter_kind, FilterKind::Blocked);
    }
    for i in 0..24_000 {
        assert_eq!(db.get(key8(i)).unwrap().unwrap(), format!("value {i}").as_bytes());
    }
    drop(db);

    let db = Db::open(dir.path(), opts.clone()).unwrap();
    db.compact().unwrap();
    let db = close_and_read(db, opts);
    let tables = db.tables();
    assert!(tables.iter().all(|t| t.level == 1), "{tables:?}");
    for t in &tables {
        assert_near(requested(t), 10.0, "a compaction into a tree of one run");
    }
    drop(db);
    assert_clean(dir.path());
}

/// A background compaction from L0 into L1, above a larger level, sizes its output for the
/// L1 run it makes: the tree without its inputs, plus their entries on L1. Ingests get the
/// share of the level they go to.
#[test]
fn compaction_outputs_and_ingests_get_their_levels_share() {
    let dir = tempfile::tempdir().unwrap();
    // Two L0 tables start a compaction, and a flush then waits for it to finish: L0 back
    // below two tables is the condition the write path itself waits for.
    let opts = Options::default()
        .filter_policy(BUDGET)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(2)
        .l0_stop_trigger(2);
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    // An ingest into an empty tree goes to the last level, as the only run: the average.
    ingest_range(&db, 0..50_000);
    put_range(&db, 50_000..52_000);
    db.flush().unwrap();
    put_range(&db, 52_000..54_000);
    db.flush().unwrap();
    put_range(&db, 54_000..54_001);
    db.flush().unwrap();
    // An ingest whose keys lie beyond every table goes to the deepest level and joins its run.
    ingest_range(&db, 60_000..70_000);

    let db = close_and_read(db, opts);
    let tables = db.tables();
    let on = |level: usize| tables.iter().filter(move |t| t.level == level);
    assert_eq!(on(0).count(), 1, "{tables:?}");
    assert!(on(1).count() >= 1 && on(6).count() >= 2, "{tables:?}");
    assert_eq!(on(1).count() + on(0).count() + on(6).count(), tables.len(), "{tables:?}");
    let last: Vec<&TableInfo> = on(6).collect();
    let (first_ingest, second_ingest): (Vec<_>, Vec<_>) =
        last.iter().partition(|t| t.smallest_key < key8(60_000));
    for t in first_ingest {
        assert_near(requested(t), 10.0, "an ingest into an empty tree");
    }
    let l1_share = allocate(&[50_000, 4_000], 10.0)[1];
    assert!(l1_share > 13.0, "{l1_share}");
    for t in on(1) {
        assert_near(requested(t), l1_share, "the L0 → L1 compaction's output");
    }
    // The one-key flush over L1 and the last level: a tiny run gets a lot.
    let l0 = on(0).next().unwrap();
    assert_near(requested(l0), allocate(&[4_000, 50_000, 1], 10.0)[2], "one-key flush");
    assert!(requested(l0) > 30.0, "a one-key run: {}", requested(l0));
    let deepest_share = allocate(&[1, 4_000, 60_000], 10.0)[2];
    assert!(deepest_share < 10.0, "{deepest_share}");
    for t in second_ingest {
        assert_near(requested(t), deepest_share, "an ingest joining the last level");
    }
    for i in (0..54_001).chain(60_000..70_000) {
        assert_eq!(db.get(key8(i)).unwrap().unwrap(), format!("value {i}").as_bytes(), "{i}");
    }
    drop(db);
    assert_clean(dir.path());
}

/// A run whose share is nothing gets no filter at all: under a tight budget, a large ingest
/// below a small L0 table. Its keys are still found, absent keys in its range read a block,
/// and the database verifies.
#[test]
fn a_run_with_no_share_gets_no_filter_and_still_reads_right() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().filter_policy(FilterPolicy::Budgeted { bits_per_key: 0.5 });
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    put_range(&db, 0..2_000);
    db.flush().unwrap();
    ingest_range(&db, 10_000..60_000);
    let db = close_and_read(db, opts);
    let tables = db.tables();
    assert_eq!(allocate(&[2_000, 50_000], 0.5)[1], 0.0);
    let (small, large): (Vec<&TableInfo>, Vec<&TableInfo>) =
        tables.iter().partition(|t| t.level == 0);
    assert_eq!(small.len(), 1);
    assert!(!large.is_empty());
    for t in large {
        assert_eq!(t.filter_kind, FilterKind::None, "{t:?}");
        assert_eq!(t.filter_memory_bytes, 0);
    }
    assert_eq!(small[0].filter_kind, FilterKind::Blocked);
    for i in (0..2_000).chain(10_000..60_000) {
        assert_eq!(db.get(key8(i)).unwrap().unwrap(), format!("value {i}").as_bytes());
    }
    let before = db.stats();
    for i in 10_000..10_100 {
        assert_eq!(db.get([key8(i), b"x".to_vec()].concat()).unwrap(), None);
    }
    let reads = db.stats().block_reads + db.stats().block_cache_hits
        - before.block_reads
        - before.block_cache_hits;
    assert!(reads >= 100, "no filter: every absent key in range reads a block ({reads})");
    drop(db);
    assert_clean(dir.path());
}

/// Tables written under one policy open and read under another: the filter records its own
/// size and probe count. New tables follow the policy of the open that writes them.
#[test]
fn databases_switch_between_uniform_and_budgeted_filters() {
    let dir = tempfile::tempdir().unwrap();
    let uniform =
        Options::default().filter_policy(FilterPolicy::BlockedBloom { bits_per_key: 6.0 });
    let db = Db::open(dir.path(), uniform.clone()).unwrap();
    put_range(&db, 0..10_000);
    db.compact().unwrap();
    db.close().unwrap();

    let budgeted = Options::default().filter_policy(BUDGET);
    let db = Db::open(dir.path(), budgeted.clone()).unwrap();
    put_range(&db, 10_000..11_000);
    db.flush().unwrap();
    let tables = db.tables();
    assert_eq!(tables.len(), 2, "{tables:?}");
    assert_near(requested(&tables[1]), 6.0, "the table written before");
    assert_near(requested(&tables[0]), allocate(&[10_000, 1_000], 10.0)[1], "the flush after");
    for i in 0..11_000 {
        assert_eq!(db.get(key8(i)).unwrap().unwrap(), format!("value {i}").as_bytes());
    }
    db.close().unwrap();
    assert_clean(dir.path());

    let db = Db::open(dir.path(), uniform).unwrap();
    db.compact().unwrap();
    assert!(db.tables().iter().all(|t| t.filter_requested_bits_per_key == 6.0));
    assert_eq!(db.get(key8(10_500)).unwrap().unwrap(), &b"value 10500"[..]);
}

/// Recovery writes the memtable it rebuilt from the WAL as an L0 table: sized like a flush.
#[test]
fn the_table_recovery_writes_gets_its_share_too() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().filter_policy(BUDGET);
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    put_range(&db, 0..20_000);
    db.compact().unwrap();
    put_range(&db, 20_000..21_000);
    // Closing keeps the last writes in the WAL only; the next open writes them to L0.
    db.close().unwrap();
    let db = Db::open_read_only(dir.path(), opts.clone()).unwrap();
    assert!(db.tables().iter().all(|t| t.level > 0), "nothing flushed yet");
    drop(db);
    let db = Db::open(dir.path(), opts).unwrap();
    let tables = db.tables();
    assert_eq!(tables[0].level, 0, "{tables:?}");
    assert_near(requested(&tables[0]), allocate(&[20_000, 1_000], 10.0)[1], "recovered table");
    assert_eq!(db.get(key8(20_500)).unwrap().unwrap(), &b"value 20500"[..]);
}

#[test]
fn budgets_outside_the_range_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for bits_per_key in [0.4, 32.5, f64::NAN, f64::INFINITY] {
        let opts = Options::default().filter_policy(FilterPolicy::Budgeted { bits_per_key });
        let e = Db::open(dir.path(), opts).unwrap_err();
        assert!(matches!(e, bloomkv::Error::InvalidArgument(_)), "{bits_per_key}: {e:?}");
    }
    let opts = Options::default().filter_policy(FilterPolicy::Budgeted { bits_per_key: 32.0 });
    Db::open(dir.path(), opts).unwrap();
}

/// `Db::filter_runs` lists the runs a lookup meets, with their filters' rates, and what the
/// budget would give each at the tree's own memory: for a uniform tree of small L0 tables
/// over a large level, fewer expected block reads.
#[test]
fn filter_runs_show_each_run_and_the_budgeted_split_of_the_same_memory() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().l0_triggers(100);
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    put_range(&db, 0..40_000);
    db.compact().unwrap();
    for r in 0..3 {
        put_range(&db, 40_000 + r * 2_000..42_000 + r * 2_000);
        db.flush().unwrap();
    }
    let db = close_and_read(db, opts);
    let runs = db.filter_runs();
    let shape: Vec<(usize, u64)> = runs.iter().map(|r| (r.level, r.keys)).collect();
    assert_eq!(shape, [(0, 2_000), (0, 2_000), (0, 2_000), (1, 40_000)]);
    let tables = db.tables();
    assert_eq!(runs[0].table, Some(tables[0].number));
    assert_eq!(runs[3].table, None);
    assert_eq!(runs[3].tables, tables.iter().filter(|t| t.level == 1).count());
    for r in &runs {
        // Rounded up to whole 512-bit lines.
        assert!((10.0..10.3).contains(&r.bits_per_key()), "{r:?}");
        assert!((0.008..0.011).contains(&r.expected_fpr), "{r:?}");
    }
    let bits: u64 = runs.iter().map(|r| r.filter_bits).sum();
    let spent: f64 = runs.iter().map(|r| r.budgeted_bits_per_key * r.keys as f64).sum();
    assert!((spent - bits as f64).abs() < 1.0, "the same memory: {spent} vs {bits}");
    assert!(runs[0].budgeted_bits_per_key > runs[3].budgeted_bits_per_key);
    let now: f64 = runs.iter().map(|r| r.expected_fpr).sum();
    let budgeted: f64 = runs.iter().map(|r| r.budgeted_fpr).sum();
    assert!(budgeted < 0.7 * now, "{budgeted} vs {now}");
}
