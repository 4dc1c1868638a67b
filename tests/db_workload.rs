//! The workload: 1,000,000 keys (16-byte keys, 100-byte values, random order) with
//! 4 MiB memtables end in several levels, and looking up 1,000,000 absent keys that fall inside
//! the tables' key ranges reads, on average, no more data blocks than the filters'
//! false-positive rate times the tables consulted predicts.

use bloomkv::Options;
use bloomkv::Readable;
use rand::seq::SliceRandom;
use rand::SeedableRng;

mod common;

use common::db::open_temp;
use common::keys::decimal16;

const N: u64 = 1_000_000;

#[test]
fn million_keys_make_levels_and_filters_predict_block_reads() {
    let (_dir, db) = open_temp(Options::default().memtable_bytes(4 << 20));
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut order: Vec<u64> = (0..N).collect();
    order.shuffle(&mut rng);
    let value = [0x5au8; 100];
    // Present keys are even numbers, absent keys odd ones: an absent key always lies inside
    // the key range of the tables around it, so only a filter can rule a table out.
    for &i in &order {
        db.put(decimal16(2 * i), value).unwrap();
    }
    db.flush().unwrap();

    let shape = db.stats();
    let levels_in_use = shape.tables_per_level.iter().filter(|&&n| n > 0).count();
    println!("tables per level: {:?}", shape.tables_per_level);
    assert!(levels_in_use >= 3, "expected several levels, got {:?}", shape.tables_per_level);

    // Mean expected false-positive rate of the live tables' filters.
    let tables = db.tables();
    let mean_fpr = tables.iter().map(|t| t.expected_fpr).sum::<f64>() / tables.len() as f64;

    order.shuffle(&mut rng);
    let before = db.stats();
    for &i in &order {
        assert!(db.get(decimal16(2 * i + 1)).unwrap().is_none());
    }
    let after = db.stats();
    let checks = (after.tables_consulted - before.tables_consulted) as f64;
    let negatives = after.filter_negatives - before.filter_negatives;
    let false_positives = after.filter_false_positives - before.filter_false_positives;
    let blocks = (after.block_reads + after.block_cache_hits)
        - (before.block_reads + before.block_cache_hits);
    let predicted = checks * mean_fpr;
    println!(
        "absent lookups: {:.3} tables consulted/lookup, {:.3} skipped by filter/lookup, \
         {:.5} blocks/lookup; predicted {:.5} (mean expected FPR {:.4}%), false positives {}",
        checks / N as f64,
        negatives as f64 / N as f64,
        blocks as f64 / N as f64,
        predicted / N as f64,
        mean_fpr * 100.0,
        false_positives
    );
    // Every block read by an absent lookup is a filter false positive.
    assert_eq!(blocks, false_positives);
    // Within 15% of the prediction (a binomial count in the thousands varies by ~2%).
    assert!((blocks as f64) <= predicted * 1.15, "{blocks} blocks read, {predicted:.0} predicted");
    assert!(checks >= N as f64, "every lookup consults at least one table");
}
