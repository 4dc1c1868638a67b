//! Filter behaviour through the public API: no false negatives, encode/decode, bad input,
//! the pinned format, and measured accuracy against theory.

use bloomkv::filter::{hash_key, math, Filter, FilterContents, FilterKind, FilterPolicy};
use bloomkv::PrefixExtractor;
use bloomkv::Readable;
use proptest::prelude::*;

mod common;

use common::keys::be_tagged;

fn policies(bpk: f64) -> [FilterPolicy; 3] {
    [
        FilterPolicy::BlockedBloom { bits_per_key: bpk },
        FilterPolicy::ClassicBloom { bits_per_key: bpk },
        FilterPolicy::Ribbon { bits_per_key: bpk, bloom_before_level: 0 },
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_false_negatives(
        keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..1500),
        bpk in 1.0f64..24.0,
    ) {
        for policy in policies(bpk) {
            let f = Filter::build(policy, &keys);
            prop_assert_eq!(f.num_keys(), keys.len() as u64);
            for k in &keys {
                prop_assert!(f.may_contain(k), "{:?} lost key {:?}", policy, k);
                prop_assert!(f.may_contain_hash(hash_key(k)));
            }
            let decoded = Filter::decode(&f.encode()).unwrap();
            prop_assert_eq!(&decoded, &f);
            for k in &keys {
                prop_assert!(decoded.may_contain(k));
            }
            let hashes: Vec<u64> = keys.iter().map(|k| hash_key(k)).collect();
            let mut out = vec![false; hashes.len()];
            decoded.may_contain_batch(&hashes, &mut out);
            prop_assert!(out.iter().all(|&b| b));
        }
    }

    #[test]
    fn decode_of_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        // Random bytes essentially never carry a valid checksum; the point is no panic.
        let _ = Filter::decode(&bytes);
    }
}

#[test]
fn zero_and_one_key() {
    for policy in policies(10.0) {
        let empty = Filter::build(policy, Vec::<Vec<u8>>::new());
        assert_eq!(empty.num_keys(), 0);
        assert_eq!(empty.memory_bytes(), 0);
        assert!(!empty.may_contain(b"anything"), "an empty filter holds nothing");
        assert_eq!(Filter::decode(&empty.encode()).unwrap(), empty);

        let one = Filter::build(policy, [b"only"]);
        assert!(one.may_contain(b"only"));
        assert_eq!(Filter::decode(&one.encode()).unwrap(), one);
    }
    let none = Filter::build(FilterPolicy::None, [b"a", b"b"]);
    assert_eq!(none.kind(), FilterKind::None);
    assert!(none.may_contain(b"zzz"), "no filter means every key may be present");
    assert_eq!(Filter::decode(&none.encode()).unwrap(), none);
}

#[test]
fn blocked_filter_is_cache_line_aligned_and_sized() {
    let keys: Vec<[u8; 8]> = (0u64..10_000).map(|i| i.to_le_bytes()).collect();
    let f = Filter::build(FilterPolicy::BlockedBloom { bits_per_key: 10.0 }, &keys);
    assert_eq!(f.num_lines(), (10_000usize * 10).div_ceil(512));
    assert_eq!(f.memory_bytes(), f.num_lines() * 64);
    assert_eq!(f.num_probes(), math::optimal_blocked_probes(10.0));
    assert!(f.bits_per_key() >= 10.0 && f.bits_per_key() < 10.1);
}

#[test]
fn every_flipped_byte_and_truncation_is_corruption() {
    for policy in policies(8.0).into_iter().chain([FilterPolicy::None]) {
        let keys: Vec<String> = (0..50).map(|i| format!("key-{i}")).collect();
        let enc = Filter::build(policy, &keys).encode();
        for i in 0..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 0x5a;
            let err = Filter::decode(&bad).expect_err("flipped byte must not decode");
            assert!(err.is_corruption(), "{err}");
        }
        for len in 0..enc.len() {
            assert!(Filter::decode(&enc[..len]).unwrap_err().is_corruption());
        }
    }
}

#[test]
fn key_count_estimate_tracks_actual_count() {
    for policy in policies(10.0) {
        let keys: Vec<[u8; 8]> = (0u64..50_000).map(|i| i.to_le_bytes()).collect();
        let f = Filter::build(policy, &keys);
        let est = f.estimated_keys();
        assert!((est - 50_000.0).abs() / 50_000.0 < 0.05, "{policy:?}: estimated {est}");
    }
}

/// The hash and the encoding are part of the on-disk format: a filter written today must
/// answer the same forever. These constants were recorded when format version 1 was fixed.
#[test]
fn format_is_pinned() {
    assert_eq!(hash_key(b""), 0x2d06800538d394c2);
    assert_eq!(hash_key(b"bloomkv"), GOLDEN_HASH);
    let keys: Vec<String> = (0..100).map(|i| format!("golden-{i}")).collect();
    let blocked = Filter::build(FilterPolicy::BlockedBloom { bits_per_key: 10.0 }, &keys).encode();
    let classic = Filter::build(FilterPolicy::ClassicBloom { bits_per_key: 10.0 }, &keys).encode();
    let ribbon = FilterPolicy::Ribbon { bits_per_key: 7.0, bloom_before_level: 0 };
    let ribbon = Filter::build(ribbon, &keys).encode();
    assert_eq!(xxhash_of(&blocked), GOLDEN_BLOCKED);
    assert_eq!(xxhash_of(&classic), GOLDEN_CLASSIC);
    assert_eq!(xxhash_of(&ribbon), GOLDEN_RIBBON, "{:#x}", xxhash_of(&ribbon));
}

fn xxhash_of(b: &[u8]) -> u64 {
    hash_key(b)
}

const GOLDEN_HASH: u64 = 0x121cf26dff551751;
const GOLDEN_BLOCKED: u64 = 0x7a029977c1913243;
const GOLDEN_CLASSIC: u64 = 0x13c8c319d05318e5;
const GOLDEN_RIBBON: u64 = 0xf7eb8d25b429c25f;

struct Accuracy {
    measured: f64,
    expected: f64,
}

/// Absent keys are distinct from present ones by construction (disjoint counters).
fn measure(policy: FilterPolicy, n: u64, probes: u64) -> Accuracy {
    let f = Filter::build(policy, (0..n).map(be_tagged));
    let fp = (n..n + probes).filter(|&i| f.may_contain(&be_tagged(i))).count();
    Accuracy { measured: fp as f64 / probes as f64, expected: f.expected_fpr() }
}

fn check_accuracy(n: u64, min_probes: u64, min_false_positives: f64) {
    for bpk in [4.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0] {
        for policy in policies(bpk) {
            let guess = Filter::build(policy, (0..1000).map(be_tagged)).expected_fpr();
            // Enough probes that the count of false positives is statistically meaningful.
            let probes = min_probes.max((min_false_positives / guess) as u64).min(40_000_000);
            let a = measure(policy, n, probes);
            let rel = (a.measured - a.expected).abs() / a.expected;
            // Where the probe cap leaves few expected false positives (a Ribbon filter's rate
            // at 20 bits per key is 2^-19), four binomial standard deviations.
            let noise = 4.0 / (probes as f64 * a.expected).sqrt();
            println!(
                "{:?} bpk {bpk:>4}: measured {:.5}% expected {:.5}% ({:+.1}%) over {probes} probes",
                policy.kind(),
                a.measured * 100.0,
                a.expected * 100.0,
                (a.measured / a.expected - 1.0) * 100.0
            );
            assert!(
                rel < noise.max(0.10),
                "{policy:?}: measured {} vs expected {}",
                a.measured,
                a.expected
            );
            if bpk == 10.0 && policy.kind() == FilterKind::Blocked {
                assert!(a.measured <= 0.010, "blocked at 10 bits/key: {}", a.measured);
            }
        }
    }
}

/// CI-sized accuracy check: 200,000 keys and enough absent probes for at least 3,000
/// expected false positives at every setting (relative standard error under 2%).
#[test]
fn measured_fpr_matches_theory() {
    check_accuracy(200_000, 2_000_000, 3_000.0);
}

/// The full-size check from the issue: 1,000,000 keys and at least 10,000,000 absent probes
/// at each bits-per-key. Run with
/// `cargo test --release --test filter -- --ignored --nocapture measured_fpr_matches_theory_full`.
#[test]
#[ignore]
fn measured_fpr_matches_theory_full() {
    check_accuracy(1_000_000, 10_000_000, 5_000.0);
}

/// A database with the Ribbon policy: its flushes (L0) get blocked Bloom filters with the
/// Ribbon filters' false-positive rate, its compactions Ribbon filters, each in about 30%
/// less memory per key; every key is found, before and after reopening, and the policy is
/// what the keyspace keeps.
#[test]
fn ribbon_policy_blooms_the_flushes_and_ribbons_the_levels_below() {
    use bloomkv::{Db, KeyspaceOptions, Options};
    let policy = FilterPolicy::Ribbon { bits_per_key: 7.35, bloom_before_level: 1 };
    let dir = tempfile::tempdir().unwrap();
    let key = |i: u32| format!("key{i:08}");
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let ks = db.keyspace("ribbon", KeyspaceOptions::new().filter_policy(policy)).unwrap();
        for i in 0..20_000 {
            ks.put(key(i), b"v").unwrap();
        }
        db.flush().unwrap();
        let tables = db.tables();
        assert!(!tables.is_empty() && tables.iter().all(|t| t.level == 0));
        for t in &tables {
            assert_eq!(t.filter_kind, FilterKind::Blocked);
            assert!((0.007..0.0082).contains(&t.expected_fpr), "L0 at {}", t.expected_fpr);
        }
        db.compact().unwrap();
        let tables = db.tables();
        assert!(!tables.is_empty() && tables.iter().all(|t| t.level > 0));
        for t in &tables {
            assert_eq!(t.filter_kind, FilterKind::Ribbon);
            assert_eq!(t.expected_fpr, 0.5f64.powi(7));
            assert!(t.filter_bits_per_key < 7.6, "{} bits per key", t.filter_bits_per_key);
        }
        assert!((0..20_000).all(|i| ks.get(key(i)).unwrap().as_deref() == Some(&b"v"[..])));
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let ks = db.existing_keyspace("ribbon").unwrap();
    assert!((0..20_000).all(|i| ks.get(key(i)).unwrap().as_deref() == Some(&b"v"[..])));
    assert_eq!(ks.get(key(20_000)).unwrap(), None);
    // The keyspace kept its policy: a flush now gets the Ribbon-matching Bloom filter again.
    for i in 20_000..25_000 {
        ks.put(key(i), b"v").unwrap();
    }
    db.flush().unwrap();
    let l0: Vec<_> = db.tables().into_iter().filter(|t| t.level == 0).collect();
    assert_eq!(l0.len(), 1);
    assert!((0.007..0.0082).contains(&l0[0].expected_fpr), "L0 at {}", l0[0].expected_fpr);
}

/// Ribbon filters under one budget: a tree of one run gets the average in Ribbon filters; a
/// flush into it then gets a blocked Bloom filter with more bits per key than the average (a
/// small run buys much for little memory), and every key is found.
#[test]
fn budgeted_ribbon_gives_the_small_runs_more_bits_and_ribbons_the_levels() {
    use bloomkv::{Db, Options};
    let policy = FilterPolicy::BudgetedRibbon { bits_per_key: 10.0, bloom_before_level: 1 };
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().filter_policy(policy)).unwrap();
    let key = |i: u32| format!("key{i:08}");
    for i in 0..50_000 {
        db.put(key(i), b"v").unwrap();
    }
    db.compact().unwrap();
    let deep = db.tables();
    assert!(!deep.is_empty() && deep.iter().all(|t| t.level > 0));
    for t in &deep {
        assert_eq!(t.filter_kind, FilterKind::Ribbon);
        assert!((9.0..10.6).contains(&t.filter_bits_per_key), "{}", t.filter_bits_per_key);
    }
    for i in 50_000..55_000 {
        db.put(key(i), b"v").unwrap();
    }
    db.flush().unwrap();
    let l0: Vec<_> = db.tables().into_iter().filter(|t| t.level == 0).collect();
    assert_eq!(l0.len(), 1);
    assert_eq!(l0[0].filter_kind, FilterKind::Blocked);
    assert!(l0[0].filter_bits_per_key > 12.0, "L0 at {} bits per key", l0[0].filter_bits_per_key);
    assert!((0..55_000).all(|i| db.get(key(i)).unwrap().as_deref() == Some(&b"v"[..])));
}

/// Keys `prefix(8 B) + suffix(8 B)`, `per_prefix` keys for each of `prefixes` prefixes
/// numbered from `first`, in ascending order (as a table adds them).
fn prefixed_keys(first: u64, prefixes: u64, per_prefix: u64) -> Vec<[u8; 16]> {
    let mut keys = Vec::new();
    for p in first..first + prefixes {
        for s in 0..per_prefix {
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&p.to_be_bytes());
            k[8..].copy_from_slice(&s.to_be_bytes());
            keys.push(k);
        }
    }
    keys
}

fn prefix_filter(policy: FilterPolicy, keys: &[[u8; 16]], whole_keys: bool) -> Filter {
    let mut b = policy.builder().with_prefixes(PrefixExtractor::Fixed(8), whole_keys);
    for k in keys {
        b.add_key(k);
    }
    b.finish()
}

#[test]
fn prefix_entries_have_no_false_negatives_and_survive_encoding() {
    let keys = prefixed_keys(0, 300, 7);
    for policy in policies(10.0) {
        for whole_keys in [true, false] {
            let f = prefix_filter(policy, &keys, whole_keys);
            assert_eq!(f.num_keys(), if whole_keys { 2100 + 300 } else { 300 });
            assert_eq!(f.contents(), FilterContents { whole_keys, prefixes: true });
            // Sized by its entries, keys and prefixes alike. (A Ribbon filter takes at most
            // about the bits asked for.)
            let sized_by = f.num_keys() as f64;
            if policy.kind() == FilterKind::Ribbon {
                assert!((f.num_bits() as f64) <= 10.0 * sized_by + 64.0 * 10.0);
            } else {
                assert!(f.num_bits() as f64 >= 10.0 * sized_by);
                assert!((f.num_bits() as f64) < 10.0 * sized_by + 512.0);
            }
            let back = Filter::decode(&f.encode()).unwrap();
            assert_eq!(back, f);
            for k in &keys {
                assert!(back.may_contain_prefix(&k[..8]));
                if whole_keys {
                    assert!(back.may_contain(k));
                }
            }
            // Prefix-only filters are no filter for point lookups.
            assert_eq!(back.for_point_lookups() == Filter::None, !whole_keys);
            for i in 0..back.encode().len() {
                let mut bad = back.encode();
                bad[i] ^= 0x5a;
                assert!(Filter::decode(&bad).unwrap_err().is_corruption());
            }
        }
    }
    // A filter without prefixes answers "maybe" for every prefix.
    let plain = Filter::build(FilterPolicy::default(), &keys);
    assert!(plain.may_contain_prefix(b"anything"));
}

/// One filter holding keys and prefixes against two filters (keys; prefixes) splitting the
/// same memory in proportion to their entries: the decision DESIGN.md records. Both layouts
/// give each entry the same bits, so theory predicts the same rates; measured, both land
/// within 10% of it, for keys and prefixes alike. Printed with `--nocapture`.
#[test]
fn one_filter_for_keys_and_prefixes_matches_two_at_equal_memory() {
    let (prefixes, per_prefix) = (20_000u64, 10u64);
    let keys = prefixed_keys(0, prefixes, per_prefix);
    let absent = prefixed_keys(1 << 40, 200_000, 1);
    let absent_keys: Vec<[u8; 16]> =
        prefixed_keys(0, prefixes, per_prefix + 10).into_iter().filter(|k| k[15] >= 10).collect();
    let policy = FilterPolicy::BlockedBloom { bits_per_key: 10.0 };
    let rate = |probes: &mut dyn Iterator<Item = bool>| {
        let (mut n, mut yes) = (0u64, 0u64);
        for hit in probes {
            n += 1;
            yes += u64::from(hit);
        }
        yes as f64 / n as f64
    };
    let one = prefix_filter(policy, &keys, true);
    let one_keys = rate(&mut absent_keys.iter().map(|k| one.may_contain(k)));
    let one_prefixes = rate(&mut absent.iter().map(|k| one.may_contain_prefix(&k[..8])));
    let n = keys.len() as f64;
    let p = prefixes as f64;
    let key_bits = 10.0 * n * n / (n + p) / n;
    let keys_only = Filter::build(FilterPolicy::BlockedBloom { bits_per_key: key_bits }, &keys);
    let prefix_bits = 10.0 * n * p / (n + p);
    let prefixes_only = {
        let mut b = FilterPolicy::BlockedBloom { bits_per_key: prefix_bits / p }
            .builder()
            .with_prefixes(PrefixExtractor::Fixed(8), false);
        for k in &keys {
            b.add_key(k);
        }
        b.finish()
    };
    let two_keys = rate(&mut absent_keys.iter().map(|k| keys_only.may_contain(k)));
    let two_prefixes = rate(&mut absent.iter().map(|k| prefixes_only.may_contain_prefix(&k[..8])));
    println!(
        "one filter: {} bits, key FPR {:.4}%, prefix FPR {:.4}%, expected {:.4}%",
        one.num_bits(),
        one_keys * 100.0,
        one_prefixes * 100.0,
        one.expected_fpr() * 100.0
    );
    println!(
        "two filters: {} + {} bits, key FPR {:.4}% (expected {:.4}%), prefix FPR {:.4}% (expected {:.4}%)",
        keys_only.num_bits(),
        prefixes_only.num_bits(),
        two_keys * 100.0,
        keys_only.expected_fpr() * 100.0,
        two_prefixes * 100.0,
        prefixes_only.expected_fpr() * 100.0
    );
    for (measured, expected) in [
        (one_keys, one.expected_fpr()),
        (one_prefixes, one.expected_fpr()),
        (two_keys, keys_only.expected_fpr()),
        (two_prefixes, prefixes_only.expected_fpr()),
    ] {
        assert!((measured - expected).abs() / expected < 0.10, "{measured} vs {expected}");
    }
}
