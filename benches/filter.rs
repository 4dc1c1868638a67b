//! Filter costs: build (ns/key) and probe (ns/probe, hashing included) for present and absent
//! keys, blocked vs classic, for a filter that fits in L1/L2 (10,000 keys) and one far larger
//! than the last-level cache (100,000,000 keys); and the batched, prefetched probe against the
//! one-at-a-time loop on the large filter.
//!
//! Run: `cargo bench --bench filter` (add `-- --quick` for a fast pass).

use std::hint::black_box;
use std::time::Duration;

use bloomkv::filter::{hash_key, Filter, FilterPolicy};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const BPK: f64 = 10.0;
const PROBES: usize = 4096;
/// Keys each probe benchmark draws its iterations from, `PROBES` at a time in turn. A single
/// set of 4096 keys probed over and over lets the branch predictor learn at which probe each
/// absent key's filter check ends, which no real lookup stream allows: with that set the
/// early-exit probe loops measured 2–3× faster than they run inside the engine.
const POOL: usize = 256 * PROBES;
/// Far larger than the last-level cache: 100M keys at 10 bits/key is a 125 MB filter (the
/// development machine has a 32 MiB L3).
const BIG: u64 = 100_000_000;

/// 16-byte keys; present keys are 0..n, absent keys n.. (disjoint by construction).
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
    k[8..].copy_from_slice(&i.to_le_bytes());
    k
}

fn policies() -> [(&'static str, FilterPolicy); 2] {
    [
        ("blocked", FilterPolicy::BlockedBloom { bits_per_key: BPK }),
        ("classic", FilterPolicy::ClassicBloom { bits_per_key: BPK }),
    ]
}

/// The next `PROBES` keys of the pool, wrapping around.
fn next_window<'a>(pool: &'a [[u8; 16]], at: &mut usize) -> &'a [[u8; 16]] {
    let window = &pool[*at..*at + PROBES];
    *at = (*at + PROBES) % pool.len();
    window
}

/// Probe keys scattered over the whole key space so the large filter is touched at random.
fn probe_keys(n: u64, present: bool) -> Vec<[u8; 16]> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..POOL)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = x % n;
            key(if present { i } else { n + i })
        })
        .collect()
}

fn build(c: &mut Criterion) {
    let mut g = c.benchmark_group("filter_build");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    let n = 1_000_000u64;
    let keys: Vec<[u8; 16]> = (0..n).map(key).collect();
    g.throughput(Throughput::Elements(n));
    for (name, policy) in policies() {
        g.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter(|| {
                let mut fb = policy.builder();
                for k in &keys {
                    fb.add_key(k);
                }
                black_box(fb.finish())
            })
        });
    }
    g.finish();
}

fn probe(c: &mut Criterion) {
    let mut g = c.benchmark_group("filter_probe");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(PROBES as u64));
    for n in [10_000u64, BIG] {
        for (name, policy) in policies() {
            let filter = Filter::build(policy, (0..n).map(key));
            for present in [true, false] {
                let probes = probe_keys(n, present);
                let label = format!("{name}/{}", if present { "present" } else { "absent" });
                g.bench_function(BenchmarkId::new(label, n), |b| {
                    let mut at = 0;
                    b.iter(|| {
                        let mut hits = 0u32;
                        for k in next_window(&probes, &mut at) {
                            hits += filter.may_contain(black_box(k)) as u32;
                        }
                        hits
                    })
                });
            }
        }
    }
    g.finish();
}

fn batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("filter_batch");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(PROBES as u64));
    let n = BIG;
    let filter = Filter::build(FilterPolicy::BlockedBloom { bits_per_key: BPK }, (0..n).map(key));
    for present in [true, false] {
        let probes = probe_keys(n, present);
        let which = if present { "present" } else { "absent" };
        g.bench_function(BenchmarkId::new("one_at_a_time", which), |b| {
            let mut at = 0;
            b.iter(|| {
                let mut hits = 0u32;
                for k in next_window(&probes, &mut at) {
                    hits += filter.may_contain_hash(hash_key(black_box(k))) as u32;
                }
                hits
            })
        });
        for batch in [16usize, 64] {
            g.bench_function(BenchmarkId::new(format!("batch{batch}"), which), |b| {
                let mut hashes = vec![0u64; batch];
                let mut out = vec![false; batch];
                let mut at = 0;
                b.iter(|| {
                    let mut hits = 0u32;
                    for chunk in next_window(&probes, &mut at).chunks(batch) {
                        for (h, k) in hashes.iter_mut().zip(chunk) {
                            *h = hash_key(black_box(k));
                        }
                        filter.may_contain_batch(&hashes[..chunk.len()], &mut out);
                        hits += out[..chunk.len()].iter().filter(|&&x| x).count() as u32;
                    }
                    hits
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, build, probe, batch);
criterion_main!(benches);
