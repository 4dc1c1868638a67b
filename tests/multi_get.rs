//! `Db::multi_get` and `Snapshot::multi_get`: the answers of a loop of `get`, in input order,
//! with each shared data block fetched once.

use bloomkv::{Db, FilterPolicy, Options, Value};

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn val(i: u64, gen: u64) -> Vec<u8> {
    format!("value {i} generation {gen} {}", "x".repeat((i % 50) as usize)).into_bytes()
}

fn small() -> Options {
    Options::default()
        .memtable_bytes(16 << 10)
        .block_bytes(512)
        .target_table_bytes(16 << 10)
        .level_base_bytes(64 << 10)
        .l0_compaction_trigger(4)
}

fn plain(v: Vec<Option<Value>>) -> Vec<Option<Vec<u8>>> {
    v.into_iter().map(|v| v.map(|v| v.to_vec())).collect()
}

/// Keys spread over every kind of source: deeper levels, L0, the memtable; overwritten at
/// several depths, deleted, and never written.
fn layered(policy: FilterPolicy) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small().filter_policy(policy)).unwrap();
    for i in 0..3000 {
        db.put(key(i * 2), val(i * 2, 0)).unwrap();
    }
    db.compact().unwrap();
    for i in (0..3000).step_by(3) {
        db.put(key(i * 2), val(i * 2, 1)).unwrap();
    }
    for i in (0..3000).step_by(7) {
        db.delete(key(i * 2)).unwrap();
    }
    db.flush().unwrap();
    for i in (0..3000).step_by(11) {
        db.put(key(i * 2), val(i * 2, 2)).unwrap();
    }
    let s = db.stats();
    assert!(s.tables_per_level[0] > 0, "some L0 tables: {:?}", s.tables_per_level);
    assert!(s.tables_per_level[1..].iter().any(|&n| n > 0), "{:?}", s.tables_per_level);
    (dir, db)
}

/// Every key twice (one in a repeat far from its first appearance), absent keys between
/// present ones, in an order unrelated to key order, over many batches.
fn probe_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..6100).map(|i| key((i * 7919) % 6100)).collect();
    keys.extend((0..6100).step_by(13).map(key));
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
        assert_eq!(plain(db.multi_get(&[key(0)]).unwrap()), [want[0].clone()]);
        assert!(db.multi_get::<Vec<u8>>(&[]).unwrap().is_empty());
    }
}

#[test]
fn counters_match_the_loop_of_get_except_for_shared_blocks() {
    let (_dir, db) = layered(FilterPolicy::BlockedBloom { bits_per_key: 10.0 });
    // Every key once, in order up to a shuffle within each run of 32: neighbours in the
    // input rarely sit side by side, but multi_get sorts the keys each table is asked for,
    // so keys near each other in the input that share a block fetch it once.
    let keys: Vec<_> = (0..6016).map(|i| key(i / 32 * 32 + (i % 32) * 7 % 32)).collect();
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
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().block_bytes(4096)).unwrap();
    for i in 0..20 {
        db.put(key(i), val(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let keys: Vec<_> = (0..20).rev().map(key).collect();
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
            db.delete(key(i)).unwrap();
        } else {
            db.put(key(i), val(i, 9)).unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let snap = db.snapshot();
    db.close().unwrap();
    assert!(matches!(db.multi_get(&["a"]), Err(bloomkv::Error::Closed)));
    assert!(matches!(snap.multi_get(&["a"]), Err(bloomkv::Error::Closed)));
}
