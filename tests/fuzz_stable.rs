//! Randomized fuzzing on stable Rust: every decoder gets arbitrary bytes and structure-aware
//! mutations of valid files — bit flips, byte overwrites, truncations, insertions, splices,
//! varint length-field tweaks — and, for checksummed formats, mutations with the checksum
//! repaired (table blocks, footers, filters, log framing), so the decoders behind the
//! checksums are reached too. See `tests/fuzz_drivers/mod.rs` for what each driver checks.
//!
//! `BLOOMKV_FUZZ_ITERS` sets the inputs per target (default 300000 in release builds, about
//! half a minute in all; 20000 in debug builds) and `BLOOMKV_FUZZ_SEED` the seed. Each test
//! prints how many inputs it tried. A failing input is printed in hex with its seed.

mod common;
mod fuzz_drivers;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use bloomkv::filter::FilterPolicy;
use bloomkv_tree::table::{Compression, Footer, Table};
use fuzz_drivers as d;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn iters() -> u64 {
    // Unoptimised builds run the decoders an order of magnitude slower.
    let default = if cfg!(debug_assertions) { 20_000 } else { 300_000 };
    common::env::u64_or("BLOOMKV_FUZZ_ITERS", default)
}

fn seed_base() -> u64 {
    common::env::u64_or("BLOOMKV_FUZZ_SEED", 0)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs `driver` on `input`, turning a panic into a report that reproduces it.
fn run(name: &str, seed: u64, input: &[u8], driver: fn(&[u8])) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| driver(input))) {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "{name}: panic on seed {seed}: {msg}\ninput ({} bytes): {}",
            input.len(),
            hex(input)
        );
    }
}

/// One random generic mutation.
fn mutate(rng: &mut StdRng, data: &mut Vec<u8>, donor: &[u8]) {
    let len = data.len();
    match rng.gen_range(0..9) {
        0 if len > 0 => {
            let i = rng.gen_range(0..len);
            data[i] ^= 1 << rng.gen_range(0..8);
        }
        1 if len > 0 => {
            let i = rng.gen_range(0..len);
            data[i] = [0, 0xff, 0x7f, 0x80, rng.gen()][rng.gen_range(0..5)];
        }
        2 => data.truncate(rng.gen_range(0..=len)),
        3 => {
            let i = rng.gen_range(0..=len);
            let n = rng.gen_range(1..16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            data.splice(i..i, bytes);
        }
        4 if len > 0 => {
            // Splice: a chunk of the donor (another valid file) over this one.
            let i = rng.gen_range(0..len);
            if !donor.is_empty() {
                let s = rng.gen_range(0..donor.len());
                let n = rng.gen_range(1..=(donor.len() - s).min(64));
                let end = (i + n).min(len);
                data.splice(i..end, donor[s..s + n].iter().copied());
            }
        }
        5 if len > 0 => {
            // Length-field tweak: a big or boundary varint where a length may sit.
            let i = rng.gen_range(0..len);
            let v: u64 =
                [0, 1, 127, 128, 255, 1 << 16, 1 << 31, 1 << 40, u64::MAX][rng.gen_range(0..9)];
            let mut enc = Vec::new();
            bloomkv_tree::coding::put_varint(&mut enc, v);
            let end = (i + enc.len()).min(len);
            data.splice(i..end, enc);
        }
        6 if len > 0 => {
            let i = rng.gen_range(0..len);
            let n = rng.gen_range(1..=(len - i).min(32));
            data.drain(i..i + n);
        }
        7 if len > 8 => {
            // Duplicate a chunk in place (repeated records / entries).
            let s = rng.gen_range(0..len - 1);
            let n = rng.gen_range(1..=(len - s).min(48));
            let chunk = data[s..s + n].to_vec();
            let at = rng.gen_range(0..=data.len());
            data.splice(at..at, chunk);
        }
        _ => {
            let i = rng.gen_range(0..=len);
            data.insert(i, rng.gen());
        }
    }
}

fn mutated(rng: &mut StdRng, base: &[u8], donor: &[u8]) -> Vec<u8> {
    let mut data = base.to_vec();
    for _ in 0..rng.gen_range(1..4) {
        mutate(rng, &mut data, donor);
    }
    data
}

fn random_bytes(rng: &mut StdRng) -> Vec<u8> {
    let n = rng.gen_range(0..300);
    (0..n).map(|_| rng.gen()).collect()
}

/// Mutates a valid input and repairs its checksums.
type Repair<'a> = &'a dyn Fn(&mut StdRng, &[u8]) -> Vec<u8>;

/// Drives one target: a mix of random bytes, mutations of the seeds, and (when given) a
/// mutation with checksums repaired.
fn fuzz(name: &str, seeds: &[Vec<u8>], driver: fn(&[u8]), repair: Option<Repair<'_>>) {
    let n = iters();
    for s in seeds {
        run(name, u64::MAX, s, driver);
    }
    for i in 0..n {
        let seed = seed_base().wrapping_mul(1_000_003).wrapping_add(i);
        let mut rng = StdRng::seed_from_u64(seed ^ (name.len() as u64 * 0x9E37));
        let base = &seeds[rng.gen_range(0..seeds.len())];
        let donor = &seeds[rng.gen_range(0..seeds.len())];
        let input = match (rng.gen_range(0..10), repair) {
            (0, _) => random_bytes(&mut rng),
            (1..=5, Some(r)) => r(&mut rng, base),
            _ => mutated(&mut rng, base, donor),
        };
        run(name, seed, &input, driver);
    }
    eprintln!("fuzz {name}: {} inputs", n + seeds.len() as u64);
}

/// Mutates one region of a table in place and repairs that block's checksum (or the
/// footer's), so the mutation reaches the block decoders behind the CRC.
fn repair_table(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    let mut data = base.to_vec();
    let t =
        Table::open(Arc::new(d::MemFile::from(base.to_vec())), "/seed.sst".into(), None).unwrap();
    let f = *t.footer();
    let mut regions = t.data_block_handles();
    regions.extend([f.filter, f.properties, f.index]);
    if t.properties().num_range_deletions > 0 {
        // Twice, so the small block is picked about as often as the others.
        regions.extend([t.properties().range_del; 2]);
    }
    if rng.gen_bool(0.15) {
        // Footer: re-encode with one handle nudged; the footer CRC is recomputed.
        let mut g: Footer = f;
        let v = [0u64, 1, 7, 1 << 40, u64::MAX, base.len() as u64][rng.gen_range(0..6)];
        match rng.gen_range(0..7) {
            // A format version saying the range-deletion block is (or is not) there.
            6 => g.version = [1, 2, 3][rng.gen_range(0..3)],
            0 => g.index.size = v,
            1 => g.index.offset = v,
            2 => g.filter.size = v,
            3 => g.filter.offset = v,
            4 => g.properties.size = v,
            _ => g.properties.offset = v,
        }
        let at = data.len() - 64;
        data[at..].copy_from_slice(&g.encode());
        return data;
    }
    let h = regions[rng.gen_range(0..regions.len())];
    let (start, body) = (h.offset as usize, h.size as usize + 1); // payload + kind byte
    let mut block = data[start..start + body].to_vec();
    for _ in 0..rng.gen_range(1..4) {
        if block.is_empty() {
            break;
        }
        let i = rng.gen_range(0..block.len());
        match rng.gen_range(0..3) {
            0 => block[i] ^= 1 << rng.gen_range(0..8),
            1 => block[i] = rng.gen(),
            _ => block[i] = [0, 0xff, 0x80][rng.gen_range(0..3)],
        }
    }
    let crc = bloomkv_tree::coding::crc32(&[&block]);
    data[start..start + body].copy_from_slice(&block);
    data[start + body..start + body + 4].copy_from_slice(&crc.to_le_bytes());
    data
}

#[test]
fn fuzz_table_reader() {
    let seeds = vec![
        d::seed_table(
            300,
            Compression::None,
            FilterPolicy::BlockedBloom { bits_per_key: 10.0 },
            256,
        ),
        d::seed_table(
            200,
            Compression::Zstd { level: 1 },
            FilterPolicy::ClassicBloom { bits_per_key: 8.0 },
            512,
        ),
        d::seed_table(3, Compression::None, FilterPolicy::None, 4096),
        d::seed_table_with_range_dels(
            120,
            Compression::None,
            FilterPolicy::BlockedBloom { bits_per_key: 10.0 },
            256,
            6,
        ),
        d::seed_table_with_range_dels(0, Compression::None, FilterPolicy::None, 4096, 2),
    ];
    fuzz("table", &seeds, d::table, Some(&repair_table));
}

#[test]
fn fuzz_block_decoder() {
    let seeds = vec![
        d::seed_block(40, 4),
        d::seed_block(5, 1),
        d::seed_block(100, 16),
        d::seed_block(0, 16),
    ];
    fuzz("block", &seeds, d::block, None);
}

/// Re-frames mutated record payloads with a real log writer, so the framing is valid.
fn reframe(rng: &mut StdRng, base: &[u8], record: fn(&mut StdRng) -> Vec<u8>) -> Vec<u8> {
    let mut r = bloomkv_tree::log::LogReader::new("/seed".into(), base.to_vec());
    let mut records = Vec::new();
    while let Ok(Some(rec)) = r.next_record() {
        records.push(rec);
    }
    if records.is_empty() || rng.gen_bool(0.2) {
        records.push(record(rng));
    }
    let i = rng.gen_range(0..records.len());
    let donor = records[rng.gen_range(0..records.len())].clone();
    records[i] = mutated(rng, &records[i], &donor);
    d::frame(&records)
}

#[test]
fn fuzz_wal_reader() {
    let big = vec![7u8; 70_000];
    let seeds = vec![
        d::frame(&[d::seed_batch(3), d::seed_batch(10), Vec::new()]),
        d::frame(&[big.clone(), d::seed_batch(2)]),
        d::frame(&[vec![1; 32_760], vec![2; 5], vec![3; 40_000]]),
    ];
    fuzz(
        "wal",
        &seeds,
        d::log,
        Some(&|rng, base| reframe(rng, base, |rng| d::seed_batch(rng.gen_range(0..20)))),
    );
}

#[test]
fn fuzz_version_edit_and_manifest() {
    let edits = vec![d::seed_edit(3).encode(), d::seed_edit(0).encode(), d::seed_edit(12).encode()];
    fuzz("version_edit", &edits, d::edit, None);
    let manifests = vec![d::seed_manifest()];
    fuzz(
        "manifest",
        &manifests,
        d::manifest,
        Some(&|rng, base| reframe(rng, base, |rng| d::seed_edit(rng.gen_range(0..5)).encode())),
    );
}

fn repair_filter(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    let mut data = mutated(rng, base, base);
    if data.len() >= 4 {
        let body = data.len() - 4;
        let crc = bloomkv_tree::coding::crc32(&[&data[..body]]);
        data[body..].copy_from_slice(&crc.to_le_bytes());
    }
    data
}

#[test]
fn fuzz_filter_decoder() {
    let seeds = vec![
        d::seed_filter(FilterPolicy::BlockedBloom { bits_per_key: 10.0 }, 100),
        d::seed_filter(FilterPolicy::ClassicBloom { bits_per_key: 6.0 }, 50),
        d::seed_filter(FilterPolicy::BlockedBloom { bits_per_key: 4.0 }, 0),
        d::seed_filter(FilterPolicy::None, 10),
        d::seed_filter(FilterPolicy::Ribbon { bits_per_key: 7.0, bloom_before_level: 0 }, 300),
        d::seed_filter(FilterPolicy::Ribbon { bits_per_key: 3.0, bloom_before_level: 0 }, 0),
    ];
    fuzz("filter", &seeds, d::filter, Some(&repair_filter));
}

#[test]
fn fuzz_write_batch_and_properties() {
    let batches = vec![d::seed_batch(0), d::seed_batch(1), d::seed_batch(12)];
    fuzz("write_batch", &batches, d::batch, None);
    let t = Table::open(
        Arc::new(d::MemFile::from(d::seed_table(50, Compression::None, FilterPolicy::None, 256))),
        "/seed.sst".into(),
        None,
    )
    .unwrap();
    let with_ranges = Table::open(
        Arc::new(d::MemFile::from(d::seed_table_with_range_dels(
            50,
            Compression::None,
            FilterPolicy::None,
            256,
            3,
        ))),
        "/seed.sst".into(),
        None,
    )
    .unwrap();
    assert!(with_ranges.properties().num_range_deletions == 3);
    let props = vec![t.properties().encode(), with_ranges.properties().encode()];
    fuzz("properties", &props, d::properties, None);
}

/// Regression (found by `fuzz_filter_decoder`): a decoded blocked filter whose header claims
/// an absurd key count made `expected_fpr` sum O(keys per block) Poisson terms — 2^64 for a
/// count of u64::MAX, a hang.
#[test]
fn expected_fpr_of_a_filter_with_an_absurd_key_count_is_immediate() {
    let keys = (0..100).map(|i| format!("key{i}"));
    let mut enc =
        bloomkv::filter::Filter::build(FilterPolicy::BlockedBloom { bits_per_key: 10.0 }, keys)
            .encode();
    enc[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let body = enc.len() - 4;
    let crc = bloomkv_tree::coding::crc32(&[&enc[..body]]);
    enc[body..].copy_from_slice(&crc.to_le_bytes());
    let f = bloomkv::filter::Filter::decode(&enc).unwrap();
    assert_eq!(f.expected_fpr(), 1.0);
    // Saturation is real: at 2000 keys per 512-bit block nearly every probe hits a set bit.
    assert!(bloomkv::filter::math::blocked_fpr(2000.0, 7, 512) > 0.99);
}
