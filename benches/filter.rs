//! Filter costs: build (ns/key) and probe (ns/probe, hashing included) for present and absent
//! keys, blocked vs classic, for a filter that fits in L1/L2 (10,000 keys) and one far larger
//! than the last-level cache (100,000,000 keys); and the batched, prefetched probe against the
//! one-at-a-time loop on the large filter; and the compact filters: Ribbon against a binary
//! fuse filter (xorf's `BinaryFuse8`, Graf and Lemire 2022), the alternative considered for
//! the deep levels, at the same false-positive rate; and the range filter's build (ns/key) at
//! a flushed table's size, a compaction output's and a large one's, and its probe as a scan
//! makes it across a tree's worth of open tables' filters (20M keys, far larger than the
//! last-level cache).
//!
//! Run: `cargo bench --bench filter` (add `-- --quick` for a fast pass; `-- compact` for the
//! compact filters alone, `-- range_build` for the range filter's build, `-- range_probe` for
//! its probe).

use std::hint::black_box;
use std::time::Duration;

use bloomkv::filter::{hash_key, Filter, FilterPolicy};
use bloomkv_tree::range_filter::{RangeFilter, RangeFilterBuilder, RangeProbe};
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
fn next_window<'a, T>(pool: &'a [T], at: &mut usize) -> &'a [T] {
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

/// Building from key hashes at a table's size (500k keys): Ribbon at 7.35 bits per key
/// (r = 7) against blocked Bloom at 10, the two policies a fill compares.
fn build_table_sized(c: &mut Criterion) {
    let mut g = c.benchmark_group("filter_build_hashes");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    let n = 500_000u64;
    let hashes: Vec<u64> = (0..n).map(|i| hash_key(&key(i))).collect();
    g.throughput(Throughput::Elements(n));
    let ribbon = FilterPolicy::Ribbon { bits_per_key: 7.35, bloom_before_level: 0 };
    for (name, policy) in [("blocked", policies()[0].1), ("ribbon", ribbon)] {
        g.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter(|| {
                let mut fb = policy.builder();
                for &h in &hashes {
                    fb.add_hash(h);
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

/// Ribbon at 8 result bits (2^-8 = 0.39%, 8.4 bits per key) against `BinaryFuse8` (8-bit
/// fingerprints, the same rate, about 9 bits per key) over the same 10M key hashes: build
/// time and absent probes (hash given). The memory and the measured false-positive rate of
/// each are printed before the timings.
fn compact(c: &mut Criterion) {
    use xorf::Filter as _;
    let n = 10_000_000u64;
    let hashes: Vec<u64> = (0..n).map(|i| hash_key(&key(i))).collect();
    let absent: Vec<u64> = (n..n + 2_000_000).map(|i| hash_key(&key(i))).collect();
    let ribbon_policy = FilterPolicy::Ribbon { bits_per_key: 8.4, bloom_before_level: 0 };
    let build_ribbon = || {
        let mut b = ribbon_policy.builder();
        for &h in &hashes {
            b.add_hash(h);
        }
        b.finish()
    };
    let ribbon = build_ribbon();
    let fuse = xorf::BinaryFuse8::try_from(&hashes[..]).expect("distinct hashes");
    let rate = |hits: usize| hits as f64 / absent.len() as f64 * 100.0;
    let ribbon_hits = absent.iter().filter(|&&h| ribbon.may_contain_hash(h)).count();
    let fuse_hits = absent.iter().filter(|&&h| fuse.contains(&h)).count();
    println!(
        "compact filters over {n} keys: ribbon {:.3} bits/key, FPR {:.4}% (theory {:.4}%); \
         binary fuse 8 {:.3} bits/key, FPR {:.4}% (theory 0.3906%)",
        ribbon.memory_bytes() as f64 * 8.0 / n as f64,
        rate(ribbon_hits),
        ribbon.expected_fpr() * 100.0,
        fuse.fingerprints.len() as f64 * 8.0 / n as f64,
        rate(fuse_hits),
    );

    let mut g = c.benchmark_group("compact_build");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(n));
    g.bench_function(BenchmarkId::new("ribbon", n), |b| b.iter(|| black_box(build_ribbon())));
    g.bench_function(BenchmarkId::new("binary_fuse8", n), |b| {
        b.iter(|| black_box(xorf::BinaryFuse8::try_from(&hashes[..]).expect("distinct hashes")))
    });
    g.finish();

    let mut g = c.benchmark_group("compact_probe");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(PROBES as u64));
    let windows = |at: &mut usize| {
        let w = &absent[*at..*at + PROBES];
        *at = (*at + PROBES) % (absent.len() - PROBES);
        w
    };
    g.bench_function(BenchmarkId::new("ribbon/absent", n), |b| {
        let mut at = 0;
        b.iter(|| {
            windows(&mut at).iter().filter(|&&h| ribbon.may_contain_hash(black_box(h))).count()
        })
    });
    g.bench_function(BenchmarkId::new("binary_fuse8/absent", n), |b| {
        let mut at = 0;
        b.iter(|| windows(&mut at).iter().filter(|&&h| fuse.contains(black_box(&h))).count())
    });
    g.finish();
}

/// `bloomkv bench --profile range`'s default `--range-bits-per-key`.
const RANGE_BPK: f64 = 16.0;

/// Building a range filter from `n` sorted keys shaped as `bloomkv bench --profile range`
/// writes them: 8-byte big-endian integers 1,000 apart, every 16th position left out, here
/// the first `n` present ones (a table's keys, as a compaction writes them).
fn range_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("range_build");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for n in [50_000u64, 500_000, 4_000_000] {
        let keys: Vec<[u8; 8]> = (0..)
            .filter(|j| j % 16 != 15)
            .take(n as usize)
            .map(|j: u64| (j * 1_000).to_be_bytes())
            .collect();
        g.throughput(Throughput::Elements(n));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let mut rb = RangeFilterBuilder::new(RANGE_BPK);
                for k in &keys {
                    rb.add_key(k);
                }
                black_box(rb.finish())
            })
        });
    }
    g.finish();
}

/// Tables and keys per table of [`range_probe`]'s tree: 20M keys, as the range profile's
/// targets are set at.
const RANGE_TABLES: u64 = 64;
const RANGE_TABLE_KEYS: u64 = 312_500;
/// Tables a scan of [`range_probe`] asks: one per level of a four-level tree below L0.
const RANGE_SCAN_TABLES: usize = 3;

/// A table's number and the bounds of a range to ask its filter.
type RangeQuery = (usize, [u8; 8], [u8; 8]);

/// Empty scans over a tree's range filters, each asking [`RANGE_SCAN_TABLES`] tables chosen at
/// random the way a scan does: every table's select sample starts loading, then every
/// table's guessed words, then each is probed. The filters are decoded, as an open table's
/// are (in the huge-page arena), at 17 bits/key (what the range profile's budget gives them)
/// over the range profile's keys; the ranges are 16 integers inside a gap between two keys,
/// so every answer is "absent" but for false positives.
fn range_probe(c: &mut Criterion) {
    use std::ops::Bound::Included;
    let filters: Vec<RangeFilter> = (0..RANGE_TABLES)
        .map(|t| {
            let mut rb = RangeFilterBuilder::new(17.0);
            for j in t * RANGE_TABLE_KEYS..(t + 1) * RANGE_TABLE_KEYS {
                rb.add_key(&(j * 1_000).to_be_bytes());
            }
            RangeFilter::decode(&rb.finish().encode()).expect("a filter just encoded")
        })
        .collect();
    let mut state = 0x5eed_u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        state ^ (state >> 29)
    };
    let scans: Vec<[RangeQuery; RANGE_SCAN_TABLES]> = (0..POOL / 4)
        .map(|_| {
            std::array::from_fn(|_| {
                let t = (next() % RANGE_TABLES) as usize;
                let j = t as u64 * RANGE_TABLE_KEYS + next() % RANGE_TABLE_KEYS;
                let lo = j * 1_000 + 1 + next() % (1_000 - 16);
                (t, lo.to_be_bytes(), (lo + 15).to_be_bytes())
            })
        })
        .collect();
    let mut g = c.benchmark_group("range_probe");
    g.throughput(Throughput::Elements(PROBES as u64));
    let mut at = 0;
    g.bench_function("empty_16_three_tables", |b| {
        b.iter(|| {
            let batch = next_window(&scans, &mut at);
            let mut maybes = 0u32;
            for scan in batch {
                let prepared = scan.map(|(t, lo, hi)| {
                    let f = &filters[t];
                    let q = f.prepare(Included(&lo[..]), Included(&hi[..])).ok();
                    if let Some(q) = &q {
                        f.prefetch_sample(q);
                    }
                    (f, q)
                });
                for (f, q) in &prepared {
                    if let Some(q) = q {
                        f.prefetch_words(q);
                    }
                }
                for (f, q) in &prepared {
                    if let Some(q) = q {
                        maybes += u32::from(f.probe_prepared(q) != RangeProbe::Absent);
                    }
                }
            }
            black_box(maybes)
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    build,
    build_table_sized,
    probe,
    batch,
    compact,
    range_build,
    range_probe
);
criterion_main!(benches);
