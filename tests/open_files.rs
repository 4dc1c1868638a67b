//! Bounded file descriptors (`Options::max_open_files`): a database with many more tables
//! than a lowered `RLIMIT_NOFILE` allows open at once still opens, reads, scans, compacts and
//! reopens. Its own test binary, because the limit applies to the whole process.

use std::collections::BTreeMap;

use bloomkv::{Db, Options, Readable};

mod common;

use common::files::table_files;
use common::keys::key8;
use common::model::pairs;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

fn set_nofile(soft: u64) {
    // SAFETY: `getrlimit`/`setrlimit` only read and write the `rlimit` struct passed by
    // pointer, which lives on this stack frame for the duration of each call.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = soft.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}

/// Small memtables and tables (8 KiB on L3 and below, where a full compaction leaves them),
/// so a test makes many tables; `max_open_files` left default.
fn small() -> Options {
    Options::new()
        .memtable_bytes(64 << 10)
        .target_table_bytes(2 << 10)
        .level_base_bytes(64 << 10)
        .block_bytes(1024)
}

fn opts(max_open_files: usize) -> Options {
    small().max_open_files(max_open_files)
}

#[test]
#[cfg(target_os = "linux")]
fn more_tables_than_the_descriptor_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let value = |i: u64, g: u64| format!("value-{i}-{g}-{}", "x".repeat((i % 40) as usize));
    {
        let db = Db::open(dir.path(), opts(16)).unwrap();
        for g in 0..2 {
            for i in (0..20_000).step_by(1 + g as usize) {
                db.put(key8(i), value(i, g)).unwrap();
                model.insert(key8(i), value(i, g));
            }
            db.flush().unwrap();
        }
        db.compact().unwrap();
        db.close().unwrap();
    }
    let tables = table_files(dir.path()).len();
    assert!(tables > 100, "only {tables} tables: the test needs far more than the limit");

    // Leave room for the test harness, stdio, the WAL, manifest and LOCK, but not for
    // one descriptor per table.
    let limit = (open_fds() + 48) as u64;
    assert!(limit < tables as u64);
    set_nofile(limit);

    // `max_open_files` beyond the descriptor limit (the default, or far more) is clipped to
    // it at open, so the database opens and reads every table; unclipped, opening it failed
    // with EMFILE.
    let clipped = limit - 16 - limit / 8;
    for (what, o) in [("the default", small()), ("100000", opts(100_000))] {
        let db = Db::open(dir.path(), o)
            .unwrap_or_else(|e| panic!("max_open_files {what}, {limit} fds: {e}"));
        assert_eq!(db.stats().open_table_files_limit, clipped);
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_bytes()), "{k:?}");
        }
        let s = db.stats();
        assert!(s.open_table_files <= clipped, "{} table files open", s.open_table_files);
        assert!(s.table_file_reopens > 0, "the clipped limit never closed a file");
        assert!(open_fds() < limit as usize);
        db.close().unwrap();
    }

    let db = Db::open(dir.path(), opts(16)).unwrap();
    let s = db.stats();
    assert!(s.open_table_files <= 16, "{} table files open", s.open_table_files);
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_bytes()), "{k:?}");
    }
    let scanned = pairs(db.range(..));
    assert_eq!(scanned.len(), model.len());
    assert!(scanned.iter().zip(&model).all(|((k, v), (mk, mv))| k == mk && v == mv.as_bytes()));
    // Writes, a flush and a full compaction under the same limit.
    for i in (0..20_000).step_by(3) {
        db.put(key8(i), value(i, 9)).unwrap();
        model.insert(key8(i), value(i, 9));
    }
    db.compact().unwrap();
    let s = db.stats();
    assert!(s.open_table_files <= 16, "{} table files open", s.open_table_files);
    assert!(s.table_file_reopens > 0, "the limit never closed a file");
    assert!(open_fds() < limit as usize);
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(16)).unwrap();
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_bytes()), "{k:?}");
    }
}
