//! Load test: several writers and readers on one database whose memtables are tiny, so the
//! background thread flushes and compacts without pause and writers outrun it. Bounded by
//! operation counts, not time. Checks:
//!
//! - every key ends with the last value its writer wrote, or absent after its last delete or
//!   range delete (through `get`, `multi_get`, a scan, and again after reopening), and
//!   readers (`get`, `multi_get`, prefix scans) never see a value that belongs to another key;
//! - memory stays bounded while writers outrun compaction: a monitor thread samples `Stats`
//!   and the memtables never hold more than `(max_immutable_memtables + 1) × memtable_bytes`
//!   plus one write group per memtable, and L0 never holds more than `l0_stop_trigger` plus
//!   the immutable memtables that may be flushed after writers stopped;
//! - back-pressure actually engaged (`write_stalls`, `write_slowdowns`).
//!
//! `BLOOMKV_STRESS_OPS` sets the writes per writer (default 8000).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bloomkv::{Db, Options, Readable};

mod common;

use common::keys::writer_key;
use common::model::scan;

const WRITERS: u64 = 4;
const READERS: u64 = 2;
const KEYS_PER_WRITER: u64 = 1500;
const MEMTABLE: usize = 8 << 10;
const MAX_IMM: usize = 1;
const L0_STOP: usize = 6;
/// Largest single write (key + value + encoding overhead), generously.
const MAX_WRITE: usize = 256;

fn ops() -> u64 {
    common::env::u64_or("BLOOMKV_STRESS_OPS", 8000)
}

fn options(mapped: bool) -> Options {
    Options::default()
        .mmap_reads(mapped)
        .memtable_bytes(MEMTABLE)
        .max_immutable_memtables(MAX_IMM)
        .block_bytes(512)
        .target_table_bytes(16 << 10)
        .level_base_bytes(32 << 10)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(3)
        .l0_stop_trigger(L0_STOP)
}

/// A value starts with the key it was written for, so a reader can tell whose it got.
fn value(w: u64, k: u64, i: u64) -> Vec<u8> {
    let mut v = writer_key(w, k);
    v.extend_from_slice(format!("={i};").as_bytes());
    v.resize(v.len() + (i % 97) as usize, b'#');
    v
}

/// The key a value was written for.
fn owner(v: &[u8]) -> &[u8] {
    let end = v.iter().position(|&b| b == b'=').unwrap_or(v.len());
    &v[..end]
}

#[test]
fn writers_outrunning_compaction_keep_memory_bounded_and_lose_nothing() {
    stress(false);
}

/// The same with `Options::mmap_reads`: readers take blocks from mappings of tables that
/// compactions retire under them.
#[test]
fn the_same_through_mapped_reads() {
    stress(true);
}

fn stress(mapped: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), options(mapped)).unwrap();
    let done = AtomicBool::new(false);
    let n = ops();
    let (max_mem, max_l0, samples, expected) = std::thread::scope(|s| {
        let monitor = s.spawn(|| {
            let (mut max_mem, mut max_l0, mut samples) = (0u64, 0usize, 0u64);
            while !done.load(Ordering::Acquire) {
                let st = db.stats();
                max_mem = max_mem.max(st.memtable_bytes);
                max_l0 = max_l0.max(st.tables_per_level[0]);
                samples += 1;
                // A sampling interval, not synchronisation: the bound must hold at every
                // sample, however they fall.
                std::thread::sleep(Duration::from_micros(200));
            }
            (max_mem, max_l0, samples)
        });
        for r in 0..READERS {
            let (db, done) = (&db, &done);
            s.spawn(move || {
                let mut i = r;
                while !done.load(Ordering::Acquire) {
                    let (w, k) = (i % WRITERS, (i * 7919) % KEYS_PER_WRITER);
                    if let Some(v) = db.get(writer_key(w, k)).unwrap() {
                        assert_eq!(owner(&v), &writer_key(w, k)[..], "a value of another key");
                    }
                    if i % 10 == 0 {
                        // Keys of every writer, in one call, while tables come and go.
                        let keys: Vec<_> = (0..16)
                            .map(|j| writer_key(j % WRITERS, (k + j) % KEYS_PER_WRITER))
                            .collect();
                        for (k, v) in keys.iter().zip(db.multi_get(&keys).unwrap()) {
                            if let Some(v) = v {
                                assert_eq!(owner(&v), &k[..], "multi_get: a value of another key");
                            }
                        }
                    }
                    if i % 50 == 0 {
                        for kv in db.prefix(format!("w{w}/k0{}", k % 10)).take(20) {
                            let (k, v) = kv.unwrap();
                            assert_eq!(owner(&v), &k[..]);
                        }
                    }
                    i += READERS;
                }
            });
        }
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let db = &db;
                s.spawn(move || {
                    let mut last = BTreeMap::new();
                    for i in 0..n {
                        let k = (i * 31 + w) % KEYS_PER_WRITER;
                        if i % 97 == 50 {
                            // A range delete of up to 40 of this writer's keys, meeting the
                            // flushes and compactions (tiny tables: many cut tombstones).
                            let end = (k + 1 + i % 40).min(KEYS_PER_WRITER);
                            db.delete_range(writer_key(w, k)..writer_key(w, end)).unwrap();
                            for j in k..end {
                                last.insert(writer_key(w, j), None);
                            }
                        } else if i % 13 == 5 {
                            db.delete(writer_key(w, k)).unwrap();
                            last.insert(writer_key(w, k), None);
                        } else {
                            db.put(writer_key(w, k), value(w, k, i)).unwrap();
                            last.insert(writer_key(w, k), Some(value(w, k, i)));
                        }
                    }
                    last
                })
            })
            .collect();
        let mut expected = BTreeMap::new();
        for h in writers {
            expected.extend(h.join().unwrap());
        }
        done.store(true, Ordering::Release);
        let (m, l, s) = monitor.join().unwrap();
        (m, l, s, expected)
    });

    let stats = db.stats();
    eprintln!(
        "stress: {} writes, {samples} samples, max memtable bytes {max_mem}, max L0 {max_l0}, \
         stalls {}, slowdowns {}, flushes {}, compactions {}",
        n * WRITERS,
        stats.write_stalls,
        stats.write_slowdowns,
        stats.flushes,
        stats.compactions
    );
    // Each memtable may overshoot its size by the write group that filled it: at most one
    // write per writer thread.
    let slack = (MAX_IMM + 1) * WRITERS as usize * MAX_WRITE;
    assert!(max_mem <= ((MAX_IMM + 1) * MEMTABLE + slack) as u64, "memtables held {max_mem} bytes");
    assert!(max_l0 <= L0_STOP + MAX_IMM, "L0 reached {max_l0} tables");
    assert!(stats.write_stalls > 0, "writers never had to wait: the test does not stress");
    assert!(stats.write_slowdowns > 0, "L0 never reached the slowdown trigger");
    // Every slowdown waits for a background step or a millisecond, whichever comes first.
    assert!(stats.write_stall_micros > 0, "writers waited, but no waiting time was counted");
    assert!(stats.flushes > 50 && stats.compactions > 10, "{stats:?}");

    let check = |db: &Db| {
        for (k, v) in &expected {
            assert_eq!(
                db.get(k).unwrap().as_deref(),
                v.as_deref(),
                "{}",
                String::from_utf8_lossy(k)
            );
        }
        let keys: Vec<&Vec<u8>> = expected.keys().collect();
        for (chunk, got) in keys.chunks(100).map(|c| (c, db.multi_get(c).unwrap())) {
            for (k, v) in chunk.iter().zip(got) {
                assert_eq!(v.as_deref(), expected[*k].as_deref(), "multi_get {k:?}");
            }
        }
        let scanned = scan(db);
        let live: BTreeMap<Vec<u8>, Vec<u8>> =
            expected.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))).collect();
        assert_eq!(scanned, live);
    };
    check(&db);
    db.close().unwrap();
    let db = Db::open(tmp.path(), options(mapped)).unwrap();
    if mapped && cfg!(unix) {
        assert!(db.stats().mapped_table_files > 0, "the tables are mapped");
    }
    check(&db);
}
