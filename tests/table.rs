//! Integration tests of the table layer through its public API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bloomkv::filter::{hash_key, FilterPolicy};
use bloomkv::fs::{FileSystem, MemFile, StdFs};
use bloomkv::{Error, Result};
use bloomkv_tree::iter::{BidirectionalIterator, InternalIterator};
use bloomkv_tree::key::{internal_key, parse_internal_key, ValueKind, MAX_SEQNO};
use bloomkv_tree::table::{
    BlockCache, Compression, GetOutcome, Table, TableBuilder, TableOptions, TableProperties,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;

use common::keys::key5;

/// One user key's versions, newest first: (seq, Some(value) for a put / None for a delete).
type Versions = Vec<(u64, Option<Vec<u8>>)>;

fn entries_of(model: &BTreeMap<Vec<u8>, Versions>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for (uk, versions) in model {
        for (seq, v) in versions {
            let kind = if v.is_some() { ValueKind::Put } else { ValueKind::Delete };
            out.push((internal_key(uk, *seq, kind), v.clone().unwrap_or_default()));
        }
    }
    out
}

fn build_bytes(entries: &[(Vec<u8>, Vec<u8>)], opts: TableOptions) -> (Vec<u8>, TableProperties) {
    let sink = MemFile::new();
    let mut b = TableBuilder::new(Box::new(sink.clone()), opts);
    for (k, v) in entries {
        b.add(k, v).unwrap();
    }
    let props = b.finish().unwrap();
    let bytes = sink.contents();
    (bytes, props)
}

fn open_mem(bytes: Vec<u8>, cache: Option<Arc<BlockCache>>) -> Result<Table> {
    Table::open(Arc::new(MemFile::from(bytes)), PathBuf::from("mem/000042.sst"), cache)
}

/// Random user keys 1–100 bytes, 1–3 versions each, some tombstones; values mostly small,
/// one in a hundred up to 10,000 bytes.
fn random_model(n_keys: usize, seed: u64) -> BTreeMap<Vec<u8>, Versions> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    while model.len() < n_keys {
        let len = rng.gen_range(1..=100);
        // A small alphabet makes shared prefixes (and prefix compression) common.
        let mut uk = vec![0u8; len];
        rng.fill(&mut uk[..]);
        for b in &mut uk {
            *b = b"abcdxyz\x00\xff"[usize::from(*b) % 9];
        }
        let n_versions = rng.gen_range(1..=3);
        let mut seqs: Vec<u64> = (0..n_versions).map(|_| rng.gen_range(1..1000)).collect();
        seqs.sort_unstable_by(|a, b| b.cmp(a));
        seqs.dedup();
        let versions = seqs
            .into_iter()
            .map(|s| {
                let v = if rng.gen_ratio(1, 10) {
                    None
                } else {
                    let vlen = if rng.gen_ratio(1, 100) {
                        rng.gen_range(0..=10_000)
                    } else {
                        rng.gen_range(0..=100)
                    };
                    // Bulk-filled (a per-byte RNG call is slow in debug builds), then
                    // narrowed to 16 symbols so zstd has something to compress.
                    let mut v = vec![0u8; vlen];
                    rng.fill(&mut v[..]);
                    v.iter_mut().for_each(|b| *b &= 15);
                    Some(v)
                };
                (s, v)
            })
            .collect();
        model.insert(uk, versions);
    }
    model
}

/// What a lookup of `uk` at `seq` must return according to the model.
fn expected(versions: &Versions, seq: u64) -> GetOutcome {
    match versions.iter().find(|(s, _)| *s <= seq) {
        None => GetOutcome::Absent,
        Some((_, None)) => GetOutcome::Deleted,
        Some((_, Some(v))) => GetOutcome::Found(v.clone().into()),
    }
}

fn collect_forward(t: &Arc<Table>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut it = t.iter();
    let mut out = Vec::new();
    it.seek_to_first()?;
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next()?;
    }
    Ok(out)
}

fn collect_backward(t: &Arc<Table>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut it = t.iter();
    let mut out = Vec::new();
    it.seek_to_last()?;
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.prev()?;
    }
    out.reverse();
    Ok(out)
}

fn check_round_trip(n_keys: usize, seed: u64, compression: Compression, get_stride: usize) {
    let model = random_model(n_keys, seed);
    let entries = entries_of(&model);
    let opts = TableOptions::default().compression(compression);
    let (bytes, props) = build_bytes(&entries, opts);
    // Large tables read through a cache: each key's several lookups then cost one block read
    // (which in a debug build is dominated by the CRC), keeping the test quick.
    let cache = (n_keys > 1000).then(|| Arc::new(BlockCache::new(64 << 20)));
    let table = Arc::new(open_mem(bytes.clone(), cache).unwrap());

    assert_eq!(table.properties(), &props);
    assert_eq!(props.num_entries, entries.len() as u64);
    let tombstones =
        entries.iter().filter(|(k, _)| parse_internal_key(k).unwrap().kind == ValueKind::Delete);
    assert_eq!(props.num_tombstones, tombstones.count() as u64);
    assert_eq!(props.compression, compression);
    assert_eq!(table.file_size(), bytes.len() as u64);
    assert_eq!(table.num_data_blocks() as u64, props.num_data_blocks);
    if n_keys > 0 {
        assert_eq!(&props.smallest_user_key, model.keys().next().unwrap());
        assert_eq!(&props.largest_user_key, model.keys().next_back().unwrap());
    }

    assert_eq!(collect_forward(&table).unwrap(), entries);
    assert_eq!(collect_backward(&table).unwrap(), entries);

    for (i, (uk, versions)) in model.iter().enumerate() {
        if i % get_stride != 0 {
            continue;
        }
        let newest = versions[0].0;
        let oldest = versions[versions.len() - 1].0;
        for seq in [MAX_SEQNO, u64::MAX, newest, newest - 1, oldest, oldest - 1, 0] {
            let got = table.get(uk, seq).unwrap();
            assert_eq!(got.outcome, expected(versions, seq), "key {uk:?} seq {seq}");
        }
        for &(seq, _) in versions {
            assert_eq!(table.get(uk, seq).unwrap().outcome, expected(versions, seq));
        }
    }
}

#[test]
fn empty_table_round_trips() {
    for c in [Compression::None, Compression::Zstd { level: 1 }] {
        check_round_trip(0, 1, c, 1);
        let (bytes, props) = build_bytes(&[], TableOptions::default().compression(c));
        assert_eq!((props.num_entries, props.num_data_blocks), (0, 0));
        let t = open_mem(bytes, None).unwrap();
        let got = t.get(b"anything", MAX_SEQNO).unwrap();
        assert_eq!(got.outcome, GetOutcome::Absent);
        assert!(!got.block_read && !got.cache_hit);
    }
}

#[test]
fn single_entry_table_round_trips() {
    for c in [Compression::None, Compression::Zstd { level: 1 }] {
        check_round_trip(1, 2, c, 1);
    }
}

#[test]
fn hundred_thousand_keys_round_trip_uncompressed() {
    check_round_trip(100_000, 3, Compression::None, 3);
}

#[test]
fn hundred_thousand_keys_round_trip_zstd() {
    check_round_trip(100_000, 4, Compression::Zstd { level: 1 }, 3);
}

/// The full-size case: `cargo test --release --test table -- --ignored million`.
#[test]
#[ignore = "about 2M entries; run in release: cargo test --release --test table -- --ignored"]
fn million_keys_round_trip() {
    check_round_trip(1_000_000, 5, Compression::None, 1);
    check_round_trip(1_000_000, 6, Compression::Zstd { level: 1 }, 7);
}

#[test]
fn real_files_round_trip_through_std_fs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("000001.sst");
    let model = random_model(2000, 7);
    let entries = entries_of(&model);
    let mut b = TableBuilder::new(StdFs.create(&path).unwrap(), TableOptions::default());
    for (k, v) in &entries {
        b.add(k, v).unwrap();
    }
    b.finish().unwrap();
    let t = Arc::new(Table::open(StdFs.open(&path).unwrap(), path.clone(), None).unwrap());
    assert_eq!(t.path(), path.as_path());
    assert_eq!(collect_forward(&t).unwrap(), entries);
}

#[test]
fn seeks_at_block_boundaries_and_beyond_the_ends() {
    let n = 1000;
    let entries: Vec<_> = (0..n)
        .map(|i| (internal_key(&key5(i), 10, ValueKind::Put), format!("value{i}").into_bytes()))
        .collect();
    let opts = TableOptions::default().block_bytes(64).restart_interval(2);
    let (bytes, props) = build_bytes(&entries, opts);
    assert!(props.num_data_blocks > 100, "want many blocks, got {}", props.num_data_blocks);
    let t = Arc::new(open_mem(bytes, None).unwrap());
    // Every index separator lies between its block's last key and the next block's first.
    let handles = t.data_block_handles();
    assert_eq!(handles.len(), t.num_data_blocks());
    let mut it = t.iter();

    for i in 0..n {
        // Exact key, a newer snapshot of it (same entry), and a key just after it.
        for target in [
            internal_key(&key5(i), 10, ValueKind::Put),
            internal_key(&key5(i), MAX_SEQNO, ValueKind::Put),
        ] {
            it.seek(&target).unwrap();
            assert!(it.valid());
            assert_eq!(it.key(), &entries[i].0[..]);
        }
        // An older snapshot than any version sorts after this key's only version.
        it.seek(&internal_key(&key5(i), 9, ValueKind::Put)).unwrap();
        let mut mid = key5(i);
        mid.push(b'!');
        let mut it2 = t.iter();
        it2.seek(&internal_key(&mid, MAX_SEQNO, ValueKind::Put)).unwrap();
        if i + 1 < n {
            assert_eq!(it.key(), &entries[i + 1].0[..]);
            assert_eq!(it2.key(), &entries[i + 1].0[..]);
        } else {
            assert!(!it.valid() && !it2.valid());
        }
    }
    it.seek(&internal_key(b"a", 1, ValueKind::Put)).unwrap();
    assert_eq!(it.key(), &entries[0].0[..]);
    it.seek(&internal_key(b"zzz", 1, ValueKind::Put)).unwrap();
    assert!(!it.valid());

    // Walking backwards from a seek crosses block boundaries correctly.
    it.seek(&entries[500].0).unwrap();
    for j in (0..=500).rev() {
        assert_eq!(it.key(), &entries[j].0[..]);
        it.prev().unwrap();
    }
    assert!(!it.valid());

    // Point gets outside the key range find nothing (the read path does not even ask: it
    // chooses tables by range); past the last key the index alone says so.
    let below = t.get(b"aaa", MAX_SEQNO).unwrap();
    let above = t.get(b"zzz", MAX_SEQNO).unwrap();
    assert_eq!(below.outcome, GetOutcome::Absent);
    assert_eq!(above.outcome, GetOutcome::Absent);
    assert!(!above.block_read && !above.cache_hit);
}

#[test]
fn filter_has_no_false_negatives_and_skips_most_absent_keys() {
    let n = 20_000;
    let entries: Vec<_> =
        (0..n).map(|i| (internal_key(&key5(2 * i), 5, ValueKind::Put), vec![i as u8; 8])).collect();
    let (bytes, props) = build_bytes(&entries, TableOptions::default());
    assert_eq!(props.filter_kind, "blocked-bloom");
    assert!(props.filter_probes > 0 && props.filter_bits_per_key >= 9.0);
    let t = open_mem(bytes, None).unwrap();
    assert_eq!(t.filter().num_keys(), n as u64);
    for i in 0..n {
        let k = key5(2 * i);
        assert!(t.filter().may_contain_hash(hash_key(&k)), "false negative for {k:?}");
        assert_eq!(t.get(&k, 5).unwrap().outcome, GetOutcome::Found(vec![i as u8; 8].into()));
    }
    // Odd keys lie inside the range but are absent.
    let mut negatives = 0;
    for i in 0..n - 1 {
        let k = key5(2 * i + 1);
        if !t.filter().may_contain_hash(hash_key(&k)) {
            negatives += 1;
        }
        let g = t.get(&k, MAX_SEQNO).unwrap();
        assert_eq!(g.outcome, GetOutcome::Absent, "absent key {k:?}");
        assert!(g.block_read);
    }
    // 10 bits per key gives about 1% false positives; allow 4%.
    assert!(negatives as f64 >= 0.96 * (n - 1) as f64, "{negatives} of {}", n - 1);

    // Without a filter an absent in-range key costs a block read.
    let opts = TableOptions::default().filter_policy(FilterPolicy::None);
    let (bytes, props) = build_bytes(&entries, opts);
    assert_eq!(props.filter_kind, "none");
    let cache = Arc::new(BlockCache::new(1 << 20));
    let t = open_mem(bytes, Some(cache)).unwrap();
    assert_eq!(t.filter_memory_bytes(), 0);
    let k = key5(101);
    for _ in 0..2 {
        let g = t.get(&k, MAX_SEQNO).unwrap();
        assert_eq!(g.outcome, GetOutcome::Absent);
        assert!(g.block_read || g.cache_hit);
    }
}

#[test]
fn block_cache_hits_on_second_read_and_stays_bounded() {
    let entries: Vec<_> =
        (0..5000).map(|i| (internal_key(&key5(i), 1, ValueKind::Put), vec![b'v'; 100])).collect();
    let (bytes, _) = build_bytes(&entries, TableOptions::default());
    let capacity = 64 * 1024;
    let cache = Arc::new(BlockCache::new(capacity));
    let t = Arc::new(open_mem(bytes, Some(cache.clone())).unwrap());
    let k = key5(1234);
    let first = t.get(&k, 1).unwrap();
    assert!(first.block_read && !first.cache_hit);
    let second = t.get(&k, 1).unwrap();
    assert!(!second.block_read && second.cache_hit);
    assert_eq!(first.outcome, second.outcome);
    assert_eq!(second.outcome, GetOutcome::Found(vec![b'v'; 100].into()));

    for i in 0..5000 {
        let k = key5(i);
        assert!(matches!(t.get(&k, 1).unwrap().outcome, GetOutcome::Found(_)));
        assert!(cache.usage_bytes() <= capacity as u64);
    }
    assert!(cache.usage_bytes() > 0);

    // A scan that does not fill the cache leaves it as it was.
    let before = cache.len();
    let cold = Arc::new(
        open_mem(build_bytes(&entries, TableOptions::default()).0, Some(cache.clone())).unwrap(),
    );
    let mut it = cold.iter_with(false);
    it.seek_to_first().unwrap();
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.next().unwrap();
    }
    assert_eq!(n, 5000);
    assert_eq!(cache.len(), before);
}

#[test]
fn concurrent_gets_on_one_table() {
    let model = random_model(5000, 8);
    let entries = entries_of(&model);
    let (bytes, _) =
        build_bytes(&entries, TableOptions::default().compression(Compression::Zstd { level: 1 }));
    let cache = Arc::new(BlockCache::new(256 * 1024));
    let t = Arc::new(open_mem(bytes, Some(cache)).unwrap());
    let model = Arc::new(model);
    let threads: Vec<_> = (0..4)
        .map(|tid| {
            let t = Arc::clone(&t);
            let model = Arc::clone(&model);
            std::thread::spawn(move || {
                let mut checked = 0;
                for (i, (uk, versions)) in model.iter().enumerate() {
                    if (i + tid) % 2 == 0 {
                        let got = t.get(uk, MAX_SEQNO).unwrap();
                        assert_eq!(got.outcome, expected(versions, MAX_SEQNO));
                        checked += 1;
                    }
                }
                checked
            })
        })
        .collect();
    for th in threads {
        assert!(th.join().unwrap() > 2000);
    }
}

/// Opens, gets every key and scans the damaged bytes. Returns the first error, or `None` if
/// everything succeeded — in which case it asserts the answers were exactly right.
fn exercise(
    bytes: Vec<u8>,
    model: &BTreeMap<Vec<u8>, Versions>,
    entries: &[(Vec<u8>, Vec<u8>)],
) -> Option<Error> {
    let t = match open_mem(bytes, None) {
        Ok(t) => Arc::new(t),
        Err(e) => return Some(e),
    };
    let mut first_err = None;
    for (uk, versions) in model {
        match t.get(uk, MAX_SEQNO) {
            Ok(g) => {
                assert_eq!(g.outcome, expected(versions, MAX_SEQNO), "wrong answer for {uk:?}")
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match collect_forward(&t) {
        Ok(got) => assert_eq!(got, entries, "scan returned wrong data"),
        Err(e) => {
            first_err.get_or_insert(e);
        }
    }
    match collect_backward(&t) {
        Ok(got) => assert_eq!(got, entries, "reverse scan returned wrong data"),
        Err(e) => {
            first_err.get_or_insert(e);
        }
    }
    first_err
}

fn assert_names_table(e: &Error) {
    match e {
        Error::Corruption { file, .. } => assert_eq!(file, Path::new("mem/000042.sst"), "{e}"),
        Error::Io { .. } => {}
        other => panic!("unexpected error kind: {other}"),
    }
}

#[test]
fn every_byte_flip_and_truncation_is_detected() {
    // Short values keep the file (and so the number of damaged copies) small.
    let mut model = random_model(20, 9);
    for versions in model.values_mut() {
        for (_, v) in versions.iter_mut() {
            if let Some(v) = v {
                v.truncate(30);
            }
        }
    }
    let entries = entries_of(&model);
    for c in [Compression::None, Compression::Zstd { level: 1 }] {
        let opts = TableOptions::default().block_bytes(256).compression(c);
        let (good, props) = build_bytes(&entries, opts);
        assert!(good.len() < 8192, "file of {} bytes makes this test slow", good.len());
        assert!(props.num_data_blocks >= 3, "want several blocks");
        assert!(exercise(good.clone(), &model, &entries).is_none());

        let mut corruption_errors = 0;
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x55;
            // Every byte of the file is covered by a block CRC or the footer CRC, so a
            // flip must be reported somewhere — and never turn into wrong answers.
            let e = exercise(bad, &model, &entries)
                .unwrap_or_else(|| panic!("flip at {i} of {} went unnoticed", good.len()));
            assert_names_table(&e);
            corruption_errors += usize::from(e.is_corruption());
        }
        assert!(corruption_errors > good.len() / 2);
        for len in 0..good.len() {
            let e = exercise(good[..len].to_vec(), &model, &entries)
                .unwrap_or_else(|| panic!("truncation to {len} went unnoticed"));
            assert!(e.is_corruption(), "truncation to {len}: {e}");
            assert_names_table(&e);
        }
    }
}

#[test]
fn footer_damage_names_the_footer_offset() {
    let entries = vec![(internal_key(b"k", 1, ValueKind::Put), b"v".to_vec())];
    let (mut bytes, _) = build_bytes(&entries, TableOptions::default());
    let footer_at = bytes.len() as u64 - 64;
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    match open_mem(bytes, None).unwrap_err() {
        Error::Corruption { file, offset, reason } => {
            assert_eq!(file, Path::new("mem/000042.sst"));
            assert_eq!(offset, footer_at);
            assert!(reason.contains("magic"), "{reason}");
        }
        e => panic!("{e}"),
    }
}

#[test]
fn index_entries_describe_the_data_blocks() {
    let entries: Vec<_> =
        (0..3000).map(|i| (internal_key(&key5(i), 3, ValueKind::Put), vec![1u8; 20])).collect();
    let (bytes, props) = build_bytes(&entries, TableOptions::default().block_bytes(512));
    let t = Arc::new(open_mem(bytes, None).unwrap());
    let index: Vec<_> = t.index_entries().map(|(k, h)| (k.to_vec(), h)).collect();
    assert_eq!(index.len() as u64, props.num_data_blocks);
    let mut disk = 0;
    let mut seen = 0;
    for (i, (sep, h)) in index.iter().enumerate() {
        let block = t.read_data_block(*h).unwrap();
        disk += h.disk_size().unwrap();
        let mut it = block.iter();
        it.seek_to_last().unwrap();
        // The separator bounds its block from above and the next block from below.
        assert_ne!(bloomkv_tree::key::compare_internal(it.key(), sep), std::cmp::Ordering::Greater);
        if let Some((_, next)) = index.get(i + 1) {
            let nb = t.read_data_block(*next).unwrap();
            let mut nit = nb.iter();
            nit.seek_to_first().unwrap();
            assert_eq!(
                bloomkv_tree::key::compare_internal(sep, nit.key()),
                std::cmp::Ordering::Less
            );
        }
        it.seek_to_first().unwrap();
        while it.valid() {
            seen += 1;
            it.next().unwrap();
        }
    }
    assert_eq!(seen, 3000);
    assert_eq!(disk, props.data_bytes);
    assert!(props.min_data_block_bytes <= props.max_data_block_bytes);
    assert!(t.index_memory_bytes() > 0);
}

mod model_checks {
    use super::*;
    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Seeks, steps both ways and point gets agree with a sorted-vector model, for any
        /// small keys (a tiny alphabet forces shared prefixes and equal user keys) and
        /// block/restart sizes.
        #[test]
        fn table_matches_a_sorted_model(
            keys in btree_map((vec(0u8..4, 0..6), 0u64..6), any::<bool>(), 0..200),
            targets in vec((vec(0u8..4, 0..6), 0u64..7), 1..40),
            block_bytes in 24usize..400,
            restart_interval in 1usize..6,
        ) {
            let mut entries: Vec<(Vec<u8>, Vec<u8>)> = keys
                .iter()
                .map(|((uk, seq), put)| {
                    let kind = if *put { ValueKind::Put } else { ValueKind::Delete };
                    (internal_key(uk, *seq, kind), format!("{uk:?}@{seq}").into_bytes())
                })
                .collect();
            entries.sort_by(|a, b| bloomkv_tree::key::compare_internal(&a.0, &b.0));
            let opts = TableOptions::default()
                .block_bytes(block_bytes)
                .restart_interval(restart_interval);
            let (bytes, _) = build_bytes(&entries, opts);
            let t = Arc::new(open_mem(bytes, None).unwrap());
            prop_assert_eq!(collect_backward(&t).unwrap(), entries.clone());

            let mut it = t.iter();
            for (uk, seq) in targets {
                let target = internal_key(&uk, seq, ValueKind::Put);
                let pos = entries.partition_point(|(k, _)| {
                    bloomkv_tree::key::compare_internal(k, &target) == std::cmp::Ordering::Less
                });
                it.seek(&target).unwrap();
                match entries.get(pos) {
                    Some((k, v)) => {
                        prop_assert!(it.valid());
                        prop_assert_eq!(it.key(), &k[..]);
                        prop_assert_eq!(it.value(), &v[..]);
                        it.prev().unwrap();
                        if pos == 0 {
                            prop_assert!(!it.valid());
                        } else {
                            prop_assert_eq!(it.key(), &entries[pos - 1].0[..]);
                        }
                    }
                    None => prop_assert!(!it.valid()),
                }
                // Backward: the last entry at or before the target.
                let at_or_before = entries.partition_point(|(k, _)| {
                    bloomkv_tree::key::compare_internal(k, &target) != std::cmp::Ordering::Greater
                });
                it.seek_for_prev(&target).unwrap();
                match at_or_before.checked_sub(1) {
                    Some(i) => {
                        prop_assert!(it.valid());
                        prop_assert_eq!(it.key(), &entries[i].0[..]);
                        prop_assert_eq!(it.value(), &entries[i].1[..]);
                    }
                    None => prop_assert!(!it.valid()),
                }
                // The point get sees the first entry at or after the target if it has this
                // user key.
                let want = match entries.get(pos) {
                    Some((k, v)) if bloomkv_tree::key::user_key(k) == &uk[..] => {
                        match parse_internal_key(k).unwrap().kind {
                            ValueKind::Put => GetOutcome::Found(v.clone().into()),
                            ValueKind::Delete => GetOutcome::Deleted,
                            ValueKind::PutExpiring
                            | ValueKind::Merge
                            | ValueKind::MergeExpiring
                            | ValueKind::BlobPut
                            | ValueKind::BlobPutExpiring => unreachable!("not generated"),
                        }
                    }
                    _ => GetOutcome::Absent,
                };
                let got = t.get(&uk, seq).unwrap().outcome;
                prop_assert_eq!(got, want);
            }
        }
    }
}
