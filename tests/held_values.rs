//! A value a read returns keeps at most a bounded multiple of its own size allocated,
//! however long the application holds it: a small value is copied out of the data block
//! (or memtable chunk) it was found in, rather than sharing, and so keeping alive, the
//! whole block after the block cache has let go of it. A large one is still shared.
//!
//! The observable is the value's own `Bytes`: whether anything else (the block cache's
//! block, the memtable) shares its allocation, and how large that allocation is.

use bloomkv::{Db, Options, Readable, Value};
use bytes::BytesMut;

mod common;

use common::db::open_temp;
use common::keys::key8;

/// The bytes of the allocation a value keeps alive, counted from its first byte, when it is
/// that allocation's only owner; `None` when something else shares the allocation (the
/// block cache's block, or the memtable's chunk, the value lies in).
fn own_allocation(v: Value) -> Option<usize> {
    let b = v.into_bytes();
    // A unique `Bytes` becomes a `BytesMut` over the same allocation, without a copy.
    b.is_unique().then(|| BytesMut::from(b).capacity())
}

/// 100-byte values, as in an application's small records.
fn small_value(i: u64) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(100, b'.');
    v
}

const BLOCK: usize = 4096;

fn options() -> Options {
    Options::default().block_bytes(BLOCK).memtable_bytes(1 << 20)
}

#[test]
fn small_values_read_from_tables_are_their_own_allocations() {
    let (dir, db) = open_temp(options());
    for i in 0..20_000 {
        db.put(key8(i), small_value(i)).unwrap();
    }
    db.compact().unwrap();
    assert!(db.stats().tables_per_level.iter().sum::<usize>() > 0);

    // Held values from many blocks, every block still in the cache: each value is a copy
    // exactly its size, sharing nothing with its cached block.
    let held: Vec<Value> =
        (0..20_000).step_by(37).map(|i| db.get(key8(i)).unwrap().unwrap()).collect();
    let hits = db.stats().block_cache_hits;
    db.get(key8(0)).unwrap().unwrap();
    assert_eq!(db.stats().block_cache_hits, hits + 1, "the blocks are still cached");
    for (n, v) in held.into_iter().enumerate() {
        let len = v.len();
        assert_eq!(own_allocation(v), Some(len), "value {n}");
    }
    let keys: Vec<Vec<u8>> = (0..20_000).step_by(101).map(key8).collect();
    for v in db.multi_get(&keys).unwrap() {
        let v = v.unwrap();
        let len = v.len();
        assert_eq!(own_allocation(v), Some(len), "multi_get");
    }
    db.close().unwrap();

    // With no block cache, a shared value would be its block's only owner: what it keeps
    // is then the block from the value on, not the value.
    let db = Db::open(dir.path(), options().block_cache_bytes(0)).unwrap();
    for i in (0..20_000).step_by(53) {
        let v = db.get(key8(i)).unwrap().unwrap();
        assert_eq!(v, small_value(i));
        assert_eq!(own_allocation(v), Some(100), "key {i}");
    }
    db.close().unwrap();
}

#[test]
fn large_values_stay_shared_with_their_block() {
    let (_dir, db) = open_temp(options());
    // Each tested value and a filler after it make one block of a little over BLOCK bytes
    // (a block is cut once it reaches BLOCK), so the share rule's line, an eighth of the
    // block, lies a little above BLOCK / 8.
    let sizes = [100, BLOCK / 8 - 20, BLOCK / 8 + 40, BLOCK / 2, 3 * BLOCK];
    for (i, len) in sizes.iter().enumerate() {
        db.put(format!("g{i}-a"), vec![b'v'; *len]).unwrap();
        db.put(format!("g{i}-b"), vec![b'f'; BLOCK.saturating_sub(*len)]).unwrap();
    }
    db.flush().unwrap();
    for (i, len) in sizes.iter().enumerate() {
        let v = db.get(format!("g{i}-a")).unwrap().unwrap();
        assert_eq!(v.len(), *len);
        // Shared: the block cache's block shares the value's allocation.
        let shared = own_allocation(v).is_none();
        assert_eq!(shared, *len > BLOCK / 8, "a value of {len} bytes");
    }
    db.close().unwrap();
}

#[test]
fn small_values_read_from_the_memtable_are_their_own_allocations() {
    let (_dir, db) = open_temp(options());
    for i in 0..2000 {
        db.put(key8(i), small_value(i)).unwrap();
    }
    // A large entry has an allocation of its own, which its value fills: shared.
    db.put("large", vec![b'x'; 8192]).unwrap();
    assert_eq!(db.stats().tables_per_level.iter().sum::<usize>(), 0, "all in the memtable");
    let held: Vec<Value> =
        (0..2000).step_by(7).map(|i| db.get(key8(i)).unwrap().unwrap()).collect();
    // Gone to a table: a value shared with its memtable chunk would now keep the chunk
    // alone.
    db.flush().unwrap();
    for v in held {
        assert_eq!(own_allocation(v), Some(100));
    }
    db.put("large2", vec![b'y'; 8192]).unwrap();
    let v = db.get("large2").unwrap().unwrap();
    assert_eq!(own_allocation(v), None, "shared with the memtable's entry");
    db.close().unwrap();
}
