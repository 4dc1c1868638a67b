//! Table build throughput and point-lookup cost, with a blocked Bloom filter and without one.
//!
//! Run: `cargo bench --bench table` (add `-- --quick` for a fast pass). Tables hold 100,000
//! entries of 16-byte user keys and 100-byte values; lookups go through a real file (page
//! cache) and a block cache large enough to hold every block unless the name says "uncached".

use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloomkv::filter::{hash_key, FilterPolicy};
use bloomkv::fs::{FileSystem, StdFs, WritableFile};
use bloomkv_tree::key::{internal_key, ValueKind, MAX_SEQNO};
use bloomkv_tree::table::{
    BlockCache, Compression, GetOutcome, Table, TableBuilder, TableGet, TableOptions,
};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const N: usize = 100_000;

fn user_key(i: usize) -> Vec<u8> {
    // Present keys are even numbers, absent ones odd: absent keys fall inside the key range,
    // so only the filter (or a block read) can answer them.
    format!("user{:012}", i).into_bytes()
}

fn entries() -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..N)
        .map(|i| {
            let v: Vec<u8> = (0..100).map(|j| ((i * 31 + j) % 61) as u8 + b'0').collect();
            (internal_key(&user_key(2 * i), 1, ValueKind::Put), v)
        })
        .collect()
}

struct Sink(Arc<Mutex<u64>>);
impl WritableFile for Sink {
    fn append(&mut self, data: &[u8]) -> bloomkv::Result<()> {
        *self.0.lock().unwrap() += data.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> bloomkv::Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> bloomkv::Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        *self.0.lock().unwrap()
    }
}

fn bench_build(c: &mut Criterion) {
    let es = entries();
    let raw: u64 = es.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    let mut g = c.benchmark_group("table_build");
    g.sample_size(10).measurement_time(Duration::from_secs(3)).throughput(Throughput::Bytes(raw));
    for (name, comp) in [("none", Compression::None), ("zstd1", Compression::Zstd { level: 1 })] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let opts = TableOptions::default().compression(comp);
                let mut t = TableBuilder::new(Box::new(Sink(Arc::new(Mutex::new(0)))), opts);
                for (k, v) in &es {
                    t.add(k, v).unwrap();
                }
                black_box(t.finish().unwrap())
            })
        });
    }
    g.finish();
}

fn build_file(dir: &std::path::Path, policy: FilterPolicy) -> std::path::PathBuf {
    let path = dir.join(format!("{policy:?}.sst").replace([' ', '{', '}', ':'], "_"));
    let opts = TableOptions::default().filter_policy(policy);
    let mut t = TableBuilder::new(StdFs.create(&path).unwrap(), opts);
    for (k, v) in entries() {
        t.add(&k, &v).unwrap();
    }
    t.finish().unwrap();
    path
}

/// A point lookup in one table as the engine's read path makes it: the filter first (with
/// the hash computed once per key), the table only on "maybe". `None`: the filter said no.
fn lookup(table: &Table, key: &[u8], hash: u64) -> Option<TableGet> {
    table.filter().may_contain_hash(hash).then(|| table.get(key, MAX_SEQNO).unwrap())
}

fn bench_get(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let present: Vec<(Vec<u8>, u64)> = (0..N)
        .step_by(7)
        .map(|i| user_key(2 * i))
        .map(|k| {
            let h = hash_key(&k);
            (k, h)
        })
        .collect();
    let absent: Vec<(Vec<u8>, u64)> = (0..N)
        .step_by(7)
        .map(|i| user_key(2 * i + 1))
        .map(|k| {
            let h = hash_key(&k);
            (k, h)
        })
        .collect();

    let mut g = c.benchmark_group("table_get");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for (fname, policy) in [
        ("blocked", FilterPolicy::BlockedBloom { bits_per_key: 10.0 }),
        ("nofilter", FilterPolicy::None),
    ] {
        let path = build_file(dir.path(), policy);
        for cached in [true, false] {
            let cache = cached.then(|| Arc::new(BlockCache::new(64 << 20)));
            let table = Table::open(StdFs.open(&path).unwrap(), path.clone(), cache).unwrap();
            let suffix = if cached { "" } else { "_uncached" };
            for (kname, keys) in [("present", &present), ("absent", &absent)] {
                // Warm the cache so cached runs measure the in-memory path.
                let mut block_reads = 0usize;
                for (k, h) in keys.iter() {
                    let Some(got) = lookup(&table, k, *h) else {
                        assert_eq!(kname, "absent", "a filter false negative");
                        continue;
                    };
                    block_reads += usize::from(got.block_read || got.cache_hit);
                    match (kname, &got.outcome) {
                        ("present", GetOutcome::Found(_)) | ("absent", GetOutcome::Absent) => {}
                        (_, o) => panic!("{kname} key gave {o:?}"),
                    }
                }
                if kname == "absent" {
                    // Without a filter every absent key reads a block; with one, few do.
                    if policy == FilterPolicy::None {
                        assert_eq!(block_reads, keys.len());
                    } else {
                        assert!(block_reads < keys.len() / 20);
                    }
                }
                let mut i = 0;
                g.bench_function(format!("{kname}_{fname}{suffix}"), |b| {
                    b.iter(|| {
                        let (k, h) = &keys[i % keys.len()];
                        i += 1;
                        black_box(lookup(&table, k, *h))
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench_build, bench_get);
criterion_main!(benches);
