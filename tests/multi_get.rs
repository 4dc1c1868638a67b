//! `Db::multi_get` and `Snapshot::multi_get`: the answers of a loop of `get`, in input order,
//! with each shared data block fetched once.

use bloomkv::{Db, FilterPolicy, Options, Readable, Value};

mod common;

use common::db::open_temp;
use common::keys::key8;
use common::options::small_tree;

fn val(i: u64, gen: u64) -> Vec<u8> {
    format!("value {i} generation {gen} {}", "x".repeat((i % 50) as usize)).into_bytes()
}

fn plain(v: Vec<Option<Value>>) -> Vec<Option<Vec<u8>>> {
    v.into_iter().map(|v| v.map(|v| v.to_vec())).collect()
}

/// Keys spread over every kind of source: deeper levels, L0, the memtable; overwritten at
/// several depths, deleted, and never written.
fn layered(policy: FilterPolicy) -> (tempfile::TempDir, Db) {
    let (dir, db) = open_temp(small_tree().filter_policy(policy));
    fill_layered(&db);
    (dir, db)
}

fn fill_layered(db: &Db) {
    for i in 0..3000 {
        db.put(key8(i * 2), val(i * 2, 0)).unwrap();
    }
    db.compact().unwrap();
    for i in (0..3000).step_by(3) {
        db.put(key8(i * 2), val(i * 2, 1)).unwrap();
    }
    for i in (0..3000).step_by(7) {
        db.delete(key8(i * 2)).unwrap();
    }
    db.flush().unwrap();
    for i in (0..3000).step_by(11) {
        db.put(key8(i * 2), val(i * 2, 2)).unwrap();
    }
    let s = db.stats();
    assert!(s.tables_per_level[0] > 0, "some L0 tables: {:?}", s.tables_per_level);
    assert!(s.tables_per_level[1..].iter().any(|&n| n > 0), "{:?}", s.tables_per_level);
}

/// Every key twice (one in a repeat far from its first appearance), absent keys between
/// present ones, in an order unrelated to key order, over many batches.
fn probe_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..6100).map(|i| key8((i * 7919) % 6100)).collect();
    keys.extend((0..6100).step_by(13).map(key8));
    keys
}

#[test]
fn answers_equal_a_loop_of_get_for_every_filter_policy() {
    for policy in [
        FilterPolicy::BlockedBloom { bits_per_key: 10.0 },
        FilterPolicy::ClassicBloom { bits_per_key: 10.0 },
        FilterPolicy::BlockedBloom { bits_per_key: 1.0 },
        FilterPolicy::None,
    ] {
        let (_dir, db) = layered(policy);
        let keys = probe_keys();
        let want: Vec<_> = keys.iter().map(|k| db.get(k).unwrap().map(|v| v.to_vec())).collect();
        assert!(want.iter().any(Option::is_some) && want.iter().any(Option::is_none));
        let before = db.stats();
        let got = plain(db.multi_get(&keys).unwrap());
        assert_eq!(got, want, "{policy:?}");
        let after = db.stats();
        assert_eq!(after.gets - before.gets, keys.len() as u64, "each key counts as a lookup");
        // A lone key and no key at all.
        assert_eq!(plain(db.multi_get(&[key8(0)]).unwrap()), [want[0].clone()]);
        assert!(db.multi_get::<&[u8]>([]).unwrap().is_empty());
    }
}

#[test]
fn counters_match_the_loop_of_get_except_for_shared_blocks() {
    let (_dir, db) = layered(FilterPolicy::BlockedBloom { bits_per_key: 10.0 });
    // Every key once, in order up to a shuffle within each run of 32: neighbours in the
    // input rarely sit side by side, but multi_get sorts the keys each table is asked for,
    // so keys near each other in the input that share a block fetch it once.
    let keys: Vec<_> = (0..6016).map(|i| key8(i / 32 * 32 + (i % 32) * 7 % 32)).collect();
    // Through one snapshot, so both see the same tables even if a compaction finishes.
    let snap = db.snapshot();
    let s0 = db.stats();
    for k in &keys {
        snap.get(k).unwrap();
    }
    let s1 = db.stats();
    snap.multi_get(&keys).unwrap();
    let s2 = db.stats();
    // The same tables are consulted and ruled out, and the same false positives met: each key
    // walks its candidates in `get`'s order and stops where `get` stops.
    assert_eq!(
        s2.tables_consulted - s1.tables_consulted,
        s1.tables_consulted - s0.tables_consulted
    );
    assert_eq!(
        s2.filter_negatives - s1.filter_negatives,
        s1.filter_negatives - s0.filter_negatives
    );
    assert_eq!(
        s2.filter_false_positives - s1.filter_false_positives,
        s1.filter_false_positives - s0.filter_false_positives
    );
    assert_eq!(s2.memtable_hits - s1.memtable_hits, s1.memtable_hits - s0.memtable_hits);
    let blocks = |a: &bloomkv::Stats, b: &bloomkv::Stats| {
        (b.block_reads + b.block_cache_hits) - (a.block_reads + a.block_cache_hits)
    };
    // About six keys share each 512-byte block: within a call's batch, fetched once for all
    // of them.
    assert!(
        blocks(&s1, &s2) * 2 < blocks(&s0, &s1),
        "multi_get fetched {} blocks, the loop of get {}",
        blocks(&s1, &s2),
        blocks(&s0, &s1)
    );
}

#[test]
fn keys_in_one_block_fetch_it_once() {
    let (_dir, db) = open_temp(Options::default().block_bytes(4096));
    for i in 0..20 {
        db.put(key8(i), val(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let keys: Vec<_> = (0..20).rev().map(key8).collect();
    let before = db.stats();
    let got = db.multi_get(&keys).unwrap();
    let after = db.stats();
    for (i, v) in (0..20).rev().zip(&got) {
        assert_eq!(v.as_deref(), Some(&val(i, 0)[..]));
    }
    let fetched = (after.block_reads + after.block_cache_hits)
        - (before.block_reads + before.block_cache_hits);
    assert_eq!(fetched, 1, "one 4 KiB block holds all 20 entries");
}

#[test]
fn snapshot_multi_get_reads_at_the_snapshot() {
    let (_dir, db) = layered(FilterPolicy::default());
    let keys = probe_keys();
    let want: Vec<_> = keys.iter().map(|k| db.get(k).unwrap().map(|v| v.to_vec())).collect();
    let snap = db.snapshot();
    for i in 0..6100 {
        if i % 5 == 0 {
            db.delete(key8(i)).unwrap();
        } else {
            db.put(key8(i), val(i, 9)).unwrap();
        }
    }
    db.flush().unwrap();
    assert_eq!(plain(snap.multi_get(&keys).unwrap()), want);
    let now: Vec<_> = keys.iter().map(|k| db.get(k).unwrap().map(|v| v.to_vec())).collect();
    assert_eq!(plain(db.multi_get(&keys).unwrap()), now);
    assert_ne!(now, want);
}

#[test]
fn multi_get_after_close_fails() {
    let (_dir, db) = open_temp(Options::default());
    let snap = db.snapshot();
    db.close().unwrap();
    assert!(matches!(db.multi_get(["a"]), Err(bloomkv::Error::Closed)));
    assert!(matches!(snap.multi_get(["a"]), Err(bloomkv::Error::Closed)));
}

mod cold {
    //! Blocks that must come from the storage device: a round's reads are set aside and done
    //! together on the engine's read threads. A test file system says every read would wait.

    use super::*;
    use bloomkv::fs::{FileLock, FileSystem, RandomAccessFile, StdFs, WritableFile};
    use bloomkv::{Error, Result};
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    /// What the test watches and steers: reads done on the read threads, and whether those
    /// fail.
    #[derive(Debug, Default)]
    pub struct Probe {
        pub pool_reads: AtomicU64,
        /// Reads asked to succeed only without waiting (all of them decline).
        pub asked: AtomicU64,
        pub fail_pool_reads: AtomicBool,
    }

    #[derive(Debug)]
    struct ColdFs(Arc<Probe>);

    #[derive(Debug)]
    struct ColdFile(Arc<dyn RandomAccessFile>, Arc<Probe>);

    impl RandomAccessFile for ColdFile {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            let on_pool =
                std::thread::current().name().is_some_and(|n| n.starts_with("bloomkv-read"));
            if on_pool {
                self.1.pool_reads.fetch_add(1, Ordering::Relaxed);
                if self.1.fail_pool_reads.load(Ordering::Relaxed) {
                    return Err(Error::io("test read", std::io::Error::other("injected")));
                }
            }
            self.0.read_exact_at(buf, offset)
        }
        fn read_exact_at_if_cached(&self, _: &mut [u8], _: u64) -> Result<bool> {
            self.1.asked.fetch_add(1, Ordering::Relaxed);
            Ok(false)
        }
        fn size(&self) -> u64 {
            self.0.size()
        }
    }

    impl FileSystem for ColdFs {
        fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
            StdFs.create(path)
        }
        fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
            Ok(Arc::new(ColdFile(StdFs.open(path)?, self.0.clone())))
        }
        fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
            StdFs.read_all(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> Result<()> {
            StdFs.rename(from, to)
        }
        fn remove(&self, path: &Path) -> Result<()> {
            StdFs.remove(path)
        }
        fn sync_dir(&self, dir: &Path) -> Result<()> {
            StdFs.sync_dir(dir)
        }
        fn create_dir_all(&self, dir: &Path) -> Result<()> {
            StdFs.create_dir_all(dir)
        }
        fn remove_dir(&self, dir: &Path) -> Result<()> {
            StdFs.remove_dir(dir)
        }
        fn rename_dir(&self, from: &Path, to: &Path) -> Result<()> {
            StdFs.rename_dir(from, to)
        }
        fn canonicalize(&self, path: &Path) -> Result<std::path::PathBuf> {
            StdFs.canonicalize(path)
        }
        fn list(&self, dir: &Path) -> Result<Vec<String>> {
            StdFs.list(dir)
        }
        fn exists(&self, path: &Path) -> bool {
            StdFs.exists(path)
        }
        fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
            StdFs.lock(path)
        }
    }

    /// `layered`'s tree on the cold file system, with no block cache, so every block a
    /// lookup needs is a device read as far as the engine can tell.
    fn cold_layered(policy: FilterPolicy) -> (tempfile::TempDir, Db, Arc<Probe>) {
        let probe = Arc::new(Probe::default());
        let dir = tempfile::tempdir().unwrap();
        let opts = small_tree()
            .filter_policy(policy)
            .block_cache_bytes(0)
            .file_system(Arc::new(ColdFs(probe.clone())));
        let db = Db::open(dir.path(), opts).unwrap();
        fill_layered(&db);
        // A range tombstone over keys in every source, flushed so tables carry it too.
        db.delete_range(key8(1000)..key8(1400)).unwrap();
        db.flush().unwrap();
        (dir, db, probe)
    }

    #[test]
    fn device_reads_are_done_together_on_the_read_threads_with_the_same_answers() {
        for policy in [FilterPolicy::BlockedBloom { bits_per_key: 10.0 }, FilterPolicy::None] {
            let (_dir, db, probe) = cold_layered(policy);
            let keys = probe_keys();
            let s0 = db.stats();
            let want: Vec<_> =
                keys.iter().map(|k| db.get(k).unwrap().map(|v| v.to_vec())).collect();
            let s1 = db.stats();
            assert_eq!(probe.pool_reads.load(Ordering::Relaxed), 0, "get reads on its own");
            let got = plain(db.multi_get(&keys).unwrap());
            let s2 = db.stats();
            assert_eq!(got, want, "{policy:?}");
            // The memtable answers some keys; the rest needed blocks, read by the pool
            // (a round with a single block to read reads it itself).
            let pooled = probe.pool_reads.load(Ordering::Relaxed);
            let multi_reads = s2.block_reads - s1.block_reads;
            assert!(pooled * 10 > multi_reads * 9, "{pooled} of {multi_reads} reads pooled");
            let get_reads = s1.block_reads - s0.block_reads;
            assert!(multi_reads <= get_reads, "multi_get {multi_reads}, get {get_reads}");
            // Keys in key order, so a batch's keys share blocks: each shared block is read
            // once for all of them, where the loop of get (no block cache) reads it per key.
            let dense: Vec<_> = (0..6000).map(key8).collect();
            let s3 = db.stats();
            let want: Vec<_> =
                dense.iter().map(|k| db.get(k).unwrap().map(|v| v.to_vec())).collect();
            let s4 = db.stats();
            let asked = probe.asked.load(Ordering::Relaxed);
            assert_eq!(plain(db.multi_get(&dense).unwrap()), want, "{policy:?}");
            let s5 = db.stats();
            let (get_reads, multi_reads) =
                (s4.block_reads - s3.block_reads, s5.block_reads - s4.block_reads);
            assert!(multi_reads * 2 < get_reads, "multi_get {multi_reads}, get {get_reads}");
            // A block is asked about once per round, not once per key that needs it.
            let asked = probe.asked.load(Ordering::Relaxed) - asked;
            assert!(asked <= multi_reads, "asked {asked} times for {multi_reads} blocks");
            assert!(probe.pool_reads.load(Ordering::Relaxed) > pooled);
            assert_eq!(s5.block_cache_hits, s0.block_cache_hits, "no block cache");
            // A snapshot reads the versions of its time through the same threads.
            let snap = db.snapshot();
            for i in (0..6000).step_by(5) {
                db.put(key8(i), val(i, 9)).unwrap();
            }
            db.flush().unwrap();
            let then: Vec<_> =
                keys.iter().map(|k| snap.get(k).unwrap().map(|v| v.to_vec())).collect();
            let pooled = probe.pool_reads.load(Ordering::Relaxed);
            assert_eq!(plain(snap.multi_get(&keys).unwrap()), then, "{policy:?} snapshot");
            assert!(probe.pool_reads.load(Ordering::Relaxed) > pooled);
        }
    }

    #[test]
    fn a_failed_read_on_a_read_thread_fails_the_call_and_the_next_call_works() {
        let (_dir, db, probe) = cold_layered(FilterPolicy::BlockedBloom { bits_per_key: 10.0 });
        let keys = probe_keys();
        let want: Vec<_> = keys.iter().map(|k| db.get(k).unwrap().map(|v| v.to_vec())).collect();
        probe.fail_pool_reads.store(true, Ordering::Relaxed);
        match db.multi_get(&keys) {
            Err(Error::Io { source, .. }) => assert_eq!(source.to_string(), "injected"),
            other => panic!("expected the injected error, got {other:?}"),
        }
        probe.fail_pool_reads.store(false, Ordering::Relaxed);
        assert_eq!(plain(db.multi_get(&keys).unwrap()), want);
    }

    #[test]
    fn a_damaged_block_read_on_a_read_thread_is_corruption_naming_the_table() {
        let (dir, db, _probe) = cold_layered(FilterPolicy::None);
        db.compact().unwrap();
        let keys: Vec<_> = (0..6000).step_by(2).map(key8).collect();
        let want: Vec<_> = keys.iter().map(|k| db.get(k).unwrap().map(|v| v.to_vec())).collect();
        // Damage the first data block of every table.
        let mut tables = Vec::new();
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "sst") {
                let mut bytes = std::fs::read(&path).unwrap();
                bytes[20] ^= 0x40;
                std::fs::write(&path, bytes).unwrap();
                tables.push(path);
            }
        }
        assert!(tables.len() > 1, "{tables:?}");
        match db.multi_get(&keys) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert!(tables.contains(&file), "blames {file:?}");
                assert_eq!(offset, 0, "the first block");
            }
            Ok(got) => {
                panic!("read damaged blocks without noticing (equal: {})", plain(got) == want)
            }
            Err(e) => panic!("expected corruption, got {e:?}"),
        }
    }
}
