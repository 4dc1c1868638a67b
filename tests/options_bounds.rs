//! The numeric options' bounds: `Db::open`, and `Db::keyspace` for a keyspace's options,
//! refuse a value outside an option's range with `Error::InvalidArgument` naming the option
//! and its range, before anything is created; a database opened at a bound works.

use std::ops::RangeInclusive;
use std::time::Duration;

use bloomkv::{
    Compression, Db, Error, FilterPolicy, KeyspaceOptions, Options, PrefixExtractor, Readable,
};

/// `v` as a `usize`, the largest one if it does not fit.
fn size(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// An option's range, both ends as `u64`.
type Span = (u64, u64);

/// `range` as a [`Span`].
fn span<T: Copy + TryInto<u64>>(range: &RangeInclusive<T>) -> Span {
    let wide = |v: T| v.try_into().ok().expect("ranges fit in u64");
    (wide(*range.start()), wide(*range.end()))
}

/// One numeric option: how to set it (the other options left as they must be for it to be
/// the one judged), its range (the public constant, whose values the refusal's text pins
/// down), and its range as a refusal shows it.
struct Bounded {
    name: &'static str,
    set: fn(Options, u64) -> Options,
    range: Span,
    shown: &'static str,
    /// The option's type is `usize` (its largest value is `usize::MAX`), else `u64`.
    is_usize: bool,
}

const L0_MAX: usize = *Options::L0_TRIGGERS_RANGE.end();

fn options_table() -> Vec<Bounded> {
    let b = |name, set, range, shown, is_usize| Bounded { name, set, range, shown, is_usize };
    vec![
        b(
            "memtable_bytes",
            |o: Options, v| o.memtable_bytes(size(v)),
            span(&Options::MEMTABLE_BYTES_RANGE),
            "between 1 KiB and 4 GiB",
            true,
        ),
        b(
            "max_immutable_memtables",
            |o: Options, v| o.max_immutable_memtables(size(v)),
            span(&Options::MAX_IMMUTABLE_MEMTABLES_RANGE),
            "between 1 and 64",
            true,
        ),
        b(
            "memtable_history_bytes",
            |o: Options, v| o.memtable_history_bytes(size(v)),
            span(&Options::MEMTABLE_HISTORY_BYTES_RANGE),
            "between 0 bytes and 16 GiB",
            true,
        ),
        b(
            "max_successive_merges",
            |o: Options, v| o.max_successive_merges(size(v)),
            span(&Options::MAX_SUCCESSIVE_MERGES_RANGE),
            "between 0 and 1000000",
            true,
        ),
        b(
            "block_bytes",
            |o: Options, v| o.block_bytes(size(v)),
            span(&Options::BLOCK_BYTES_RANGE),
            "between 64 bytes and 16 MiB",
            true,
        ),
        b(
            "block_cache_bytes",
            |o: Options, v| o.block_cache_bytes(size(v)),
            span(&Options::BLOCK_CACHE_BYTES_RANGE),
            "between 0 bytes and 1 TiB",
            true,
        ),
        b(
            "max_open_files",
            |o: Options, v| o.max_open_files(size(v)),
            span(&Options::MAX_OPEN_FILES_RANGE),
            "between 1 and 1048576",
            true,
        ),
        b(
            "max_batch_bytes",
            |o: Options, v| o.max_batch_bytes(size(v)),
            span(&Options::MAX_BATCH_BYTES_RANGE),
            "between 1 KiB and 1 GiB",
            true,
        ),
        b(
            "l0_compaction_trigger",
            |o: Options, v| {
                o.l0_compaction_trigger(size(v)).l0_slowdown_trigger(L0_MAX).l0_stop_trigger(L0_MAX)
            },
            span(&Options::L0_TRIGGERS_RANGE),
            "between 1 and 1000",
            true,
        ),
        b(
            "l0_slowdown_trigger",
            |o: Options, v| {
                o.l0_compaction_trigger(1).l0_slowdown_trigger(size(v)).l0_stop_trigger(L0_MAX)
            },
            span(&Options::L0_TRIGGERS_RANGE),
            "between 1 and 1000",
            true,
        ),
        b(
            "l0_stop_trigger",
            |o: Options, v| {
                o.l0_compaction_trigger(1).l0_slowdown_trigger(1).l0_stop_trigger(size(v))
            },
            span(&Options::L0_TRIGGERS_RANGE),
            "between 1 and 1000",
            true,
        ),
        b(
            "level_size_ratio",
            |o: Options, v| o.level_size_ratio(v),
            span(&Options::LEVEL_SIZE_RATIO_RANGE),
            "between 2 and 1000",
            false,
        ),
        b(
            "level_base_bytes",
            |o: Options, v| o.level_base_bytes(v),
            span(&Options::LEVEL_BASE_BYTES_RANGE),
            "between 1 KiB and 1 PiB",
            false,
        ),
        b(
            "target_table_bytes",
            |o: Options, v| o.target_table_bytes(v),
            span(&Options::TARGET_TABLE_BYTES_RANGE),
            "between 1 KiB and 4 GiB",
            false,
        ),
        b(
            "max_subcompactions",
            |o: Options, v| o.max_subcompactions(size(v)),
            span(&Options::MAX_SUBCOMPACTIONS_RANGE),
            "between 1 and 64",
            true,
        ),
        b(
            "periodic_compaction",
            |o: Options, v| o.periodic_compaction(Some(Duration::from_secs(v))),
            span(&Options::PERIODIC_COMPACTION_RANGE),
            "between 60 s and 315360000 s",
            false,
        ),
    ]
}

/// 0, 1, the range's ends, one past the end, and the type's largest value.
fn probes(range: Span, is_usize: bool) -> Vec<u64> {
    let max = if is_usize { usize::MAX as u64 } else { u64::MAX };
    let mut v = vec![0, 1, range.0, range.1, range.1 + 1, max];
    v.sort_unstable();
    v.dedup();
    v
}

/// Opens a database with `opts` and puts it through a write, a flush, a compaction and a
/// reopen.
fn works(opts: impl Fn() -> Options, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap_or_else(|e| panic!("{what}: {e}"));
    db.put("a", "1").unwrap_or_else(|e| panic!("{what}: put: {e}"));
    db.flush().unwrap_or_else(|e| panic!("{what}: flush: {e}"));
    db.put("b", "2").unwrap();
    db.compact().unwrap_or_else(|e| panic!("{what}: compact: {e}"));
    db.close().unwrap();
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"1"[..]), "{what}");
    assert_eq!(db.get("b").unwrap().as_deref(), Some(&b"2"[..]), "{what}");
}

/// The refusal of `r`: `InvalidArgument` naming `name` and `shown`.
fn assert_refused<T: std::fmt::Debug>(r: bloomkv::Result<T>, name: &str, shown: &str, what: &str) {
    match r {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains(name) && msg.contains(shown), "{what}: message {msg:?}")
        }
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

/// Every numeric option of `Options` at 0, 1, its bounds, just past its bound and its type's
/// largest value: inside the range a database opens and works, outside it `open` refuses
/// with the option and its range named, and leaves the directory empty.
#[test]
fn every_numeric_option_is_refused_outside_its_range_and_works_at_its_bounds() {
    for opt in options_table() {
        for v in probes(opt.range, opt.is_usize) {
            let what = format!("{} = {v}", opt.name);
            let opts = || (opt.set)(Options::default(), v);
            if (opt.range.0..=opt.range.1).contains(&v) {
                works(opts, &what);
            } else {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("db");
                assert_refused(Db::open(&path, opts()), opt.name, opt.shown, &what);
                assert!(!path.exists(), "{what}: a refused open created the directory");
            }
        }
    }
}

/// The memtable filter is sized from `memtable_bytes`: at the bound a write allocates its
/// 64 MiB and goes on, where a size the bound refuses would have asked for more memory
/// than a machine has at the first write.
#[test]
fn the_largest_memtable_takes_writes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().memtable_bytes(*Options::MEMTABLE_BYTES_RANGE.end());
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..1000u32 {
        db.put(i.to_be_bytes(), [7u8; 100]).unwrap();
    }
    assert_eq!(db.get(999u32.to_be_bytes()).unwrap().as_deref(), Some(&[7u8; 100][..]));
}

/// The two numeric settings a keyspace may have of its own, given to `Db::keyspace`: outside
/// their range the keyspace is refused and not created; at the bounds it works.
#[test]
fn a_keyspace_is_refused_with_options_outside_their_range() {
    type Set = fn(KeyspaceOptions, u64) -> KeyspaceOptions;
    let table: [(&str, Set, Span, &str, bool); 2] = [
        (
            "block_bytes",
            |o, v| o.block_bytes(size(v)),
            span(&Options::BLOCK_BYTES_RANGE),
            "between 64 bytes and 16 MiB",
            true,
        ),
        (
            "target_table_bytes",
            |o, v| o.target_table_bytes(v),
            span(&Options::TARGET_TABLE_BYTES_RANGE),
            "between 1 KiB and 4 GiB",
            false,
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for (name, set, range, shown, is_usize) in table {
        for v in probes(range, is_usize) {
            let what = format!("keyspace {name} = {v}");
            let ks = format!("{name}-{v}");
            let r = db.keyspace(&ks, set(KeyspaceOptions::new(), v));
            if (range.0..=range.1).contains(&v) {
                let ks = r.unwrap_or_else(|e| panic!("{what}: {e}"));
                ks.put("k", "v").unwrap();
                db.flush().unwrap();
                assert_eq!(ks.get("k").unwrap().as_deref(), Some(&b"v"[..]), "{what}");
            } else {
                assert_refused(r, name, shown, &what);
                assert!(db.existing_keyspace(&ks).is_none(), "{what}: created anyway");
            }
        }
    }
}

/// Whether a database opens with `opts`; a refusal must be `InvalidArgument`.
fn opens(opts: Options) -> bool {
    let dir = tempfile::tempdir().unwrap();
    match Db::open(dir.path(), opts) {
        Ok(db) => db.put("k", "v").and_then(|()| db.flush()).map(|()| true).unwrap(),
        Err(Error::InvalidArgument(_)) => false,
        Err(e) => panic!("refused with {e:?}"),
    }
}

/// The other numeric settings (a filter's bits per key, a zstd level, a fixed prefix's
/// length, a default time to live) at 0, 1, their bounds and their type's extremes.
#[test]
fn the_other_numeric_settings_are_refused_outside_their_range() {
    let bloom =
        |bits| Options::default().filter_policy(FilterPolicy::BlockedBloom { bits_per_key: bits });
    let budget =
        |bits| Options::default().filter_policy(FilterPolicy::Budgeted { bits_per_key: bits });
    for (bits, ok) in
        [(0.0, false), (1.0, true), (100.0, true), (f64::MAX, false), (f64::NAN, false)]
    {
        assert_eq!(opens(bloom(bits)), ok, "bloom bits {bits}");
    }
    for (bits, ok) in [(0.0, false), (1.0, true), (32.0, true), (32.5, false), (f64::MAX, false)] {
        assert_eq!(opens(budget(bits)), ok, "budgeted bits {bits}");
    }
    for (level, ok) in [
        (i32::MIN, false),
        (-7, true),
        (0, true),
        (1, true),
        (22, true),
        (23, false),
        (i32::MAX, false),
    ] {
        let opts = Options::default().compression(Compression::Zstd { level });
        assert_eq!(opens(opts), ok, "zstd level {level}");
    }
    let max_prefix = bloomkv::MAX_FIXED_PREFIX_BYTES;
    for (n, ok) in
        [(0, false), (1, true), (max_prefix, true), (max_prefix + 1, false), (usize::MAX, false)]
    {
        let opts = Options::default().prefix_extractor(Some(PrefixExtractor::Fixed(n)));
        assert_eq!(opens(opts), ok, "fixed prefix of {n}");
    }
    // Blob garbage collection's fractions, for the database and for a keyspace.
    for (f, ok) in
        [(-0.1, false), (0.0, true), (0.25, true), (1.0, true), (1.01, false), (f64::NAN, false)]
    {
        assert_eq!(opens(Options::default().blob_gc_age_cutoff(f)), ok, "age cutoff {f}");
        assert_eq!(opens(Options::default().blob_gc_force_threshold(f)), ok, "force threshold {f}");
    }
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    match db.keyspace("gc", KeyspaceOptions::new().blob_gc_age_cutoff(2.0)) {
        Err(Error::InvalidArgument(m)) => {
            assert_eq!(m, "blob_gc_age_cutoff must be between 0 and 1, got 2")
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    assert!(db.existing_keyspace("gc").is_none());
    drop(db);
    // A time to live saturates: the longest never expires.
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let ttl = |t| KeyspaceOptions::new().default_ttl(Some(t));
    assert!(matches!(db.keyspace("zero", ttl(Duration::ZERO)), Err(Error::InvalidArgument(_))));
    let forever = db.keyspace("forever", ttl(Duration::MAX)).unwrap();
    forever.put("k", "v").unwrap();
    assert_eq!(forever.get("k").unwrap().as_deref(), Some(&b"v"[..]));
}
