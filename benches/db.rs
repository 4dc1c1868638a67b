//! Engine-level point lookups and puts through `Db`, the numbers the engine's performance
//! targets are about (the `bloomkv bench` harness measures the same workloads end to end, with
//! latency percentiles and three filter policies).
//!
//! Run: `cargo bench --bench db` (add `-- --quick` for a fast pass; `BLOOMKV_BENCH_KEYS`
//! changes the key count, default 1,000,000 as in the harness).
//!
//! The read benchmarks use the harness's "layered" tree: every key written in random order,
//! compacted into the last level, then the newest tenth rewritten as three L0 tables, so an
//! absent key inside the key range is looked for in four tables (three L0 plus one deeper).
//! Reads run on a read-only handle, so no background work runs beside them.

use std::hint::black_box;
use std::time::Duration;

use bloomkv::{Db, FilterPolicy, Options, Readable};
use criterion::{criterion_group, criterion_main, Criterion};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn keys() -> u64 {
    std::env::var("BLOOMKV_BENCH_KEYS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000)
}

/// db_bench's 16-byte zero-padded decimal keys; present keys are even, absent ones odd.
fn key(n: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    let mut n = n;
    for b in k.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

fn value(i: u64) -> [u8; 100] {
    let mut v = [0u8; 100];
    for (j, b) in v.iter_mut().enumerate() {
        *b = b'a' + ((i as usize * 31 + j) % 26) as u8;
    }
    v
}

fn build_layered(dir: &std::path::Path, policy: FilterPolicy, n: u64) {
    let db = Db::open(dir, Options::default().filter_policy(policy)).unwrap();
    let mut order: Vec<u64> = (0..n).collect();
    order.shuffle(&mut StdRng::seed_from_u64(7));
    for &i in &order {
        db.put(key(2 * i), value(i)).unwrap();
    }
    db.compact().unwrap();
    let recent = &order[order.len() - order.len() / 10..];
    for part in recent.chunks(recent.len().div_ceil(3)) {
        for &i in part {
            db.put(key(2 * i), value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    db.close().unwrap();
}

fn bench_get(c: &mut Criterion) {
    let n = keys();
    let mut g = c.benchmark_group("db_get");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    for (name, policy) in [
        ("blocked", FilterPolicy::BlockedBloom { bits_per_key: 10.0 }),
        ("classic", FilterPolicy::ClassicBloom { bits_per_key: 10.0 }),
    ] {
        let dir = tempfile::tempdir().unwrap();
        build_layered(dir.path(), policy, n);
        let db = Db::open_read_only(dir.path(), Options::default()).unwrap();
        let levels = db.stats().tables_per_level;
        assert!(levels[0] == 3 && levels[1..].iter().any(|&t| t > 0), "shape {levels:?}");
        let mut rng = StdRng::seed_from_u64(11);
        g.bench_function(format!("absent_{name}"), |b| {
            b.iter(|| {
                let k = key(2 * rng.gen_range(0..n) + 1);
                assert!(db.get(black_box(k)).unwrap().is_none());
            })
        });
        g.bench_function(format!("present_{name}"), |b| {
            b.iter(|| {
                let k = key(2 * rng.gen_range(0..n));
                assert!(db.get(black_box(k)).unwrap().is_some());
            })
        });
    }
    g.finish();
}

fn bench_put(c: &mut Criterion) {
    let mut g = c.benchmark_group("db_put");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let mut rng = StdRng::seed_from_u64(13);
    let mut i = 0u64;
    // Random keys from a space much larger than any run writes: almost every put is an insert.
    g.bench_function("random_16B_key_100B_value", |b| {
        b.iter(|| {
            i += 1;
            db.put(key(rng.gen_range(0..1u64 << 40)), value(i)).unwrap();
        })
    });
    g.finish();
    db.close().unwrap();
}

criterion_group!(benches, bench_get, bench_put);
criterion_main!(benches);
