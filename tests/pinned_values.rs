//! `Stats::pinned_value_bytes`: what values the application holds keep allocated beyond
//! themselves. The counter is process-wide, so this file holds one test, in a process of
//! its own.

use bloomkv::Options;
use bloomkv::Readable;

mod common;

use common::db::open_temp;

#[test]
fn held_shared_values_are_counted_until_dropped() {
    let (_dir, db) = open_temp(Options::default().block_bytes(4096));
    for i in 0..64u32 {
        // Large values (an eighth of a block or more) share their block; small ones are copies.
        db.put(format!("big{i:03}"), vec![b'b'; 1500]).unwrap();
        db.put(format!("small{i:03}"), vec![b's'; 100]).unwrap();
    }
    // From the memtable: entries of 1.5 KB sit in shared chunks and are copied out.
    let from_memtable: Vec<_> = (0..64u32).map(|i| db.get(format!("big{i:03}")).unwrap()).collect();
    assert_eq!(db.stats().pinned_value_bytes, 0, "memtable chunk values are copies");
    drop(from_memtable);
    db.flush().unwrap();
    let small: Vec<_> = (0..64u32).map(|i| db.get(format!("small{i:03}")).unwrap()).collect();
    // A small value shares only a block at most 8 times its size (a short last block).
    let after_small = db.stats().pinned_value_bytes;
    assert!(after_small <= 64 * 100 * 8, "small values pin {after_small}");
    let big: Vec<_> = (0..64u32).map(|i| db.get(format!("big{i:03}")).unwrap()).collect();
    let pinned = db.stats().pinned_value_bytes;
    // Each held value counts the block it shares: at least its own size, at most 8 times it.
    let by_big = pinned - after_small;
    assert!((64 * 1500..=64 * 1500 * 8).contains(&by_big), "big values pin {by_big}");
    let clones = big.clone();
    assert_eq!(db.stats().pinned_value_bytes, pinned, "clones share the count");
    drop(big);
    assert_eq!(db.stats().pinned_value_bytes, pinned, "clones still hold the blocks");
    drop((clones, small));
    assert_eq!(db.stats().pinned_value_bytes, 0);
}
