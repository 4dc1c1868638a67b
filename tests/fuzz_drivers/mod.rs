//! Fuzz drivers shared by the stable randomized test (`tests/fuzz_stable.rs`) and the
//! cargo-fuzz targets (`fuzz/fuzz_targets/*.rs` include this file by path).
//!
//! Each driver feeds arbitrary bytes to one decoder and exercises whatever it accepts. The
//! property checked is the one every decoder documents: any input yields a value or an
//! `Error::Corruption`, never a panic, a hang or an allocation sized by a corrupted length.
//! Where a decoder has an encoder, accepted inputs must also survive a round trip.
//!
//! The `seed_*` functions build valid inputs for mutation.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bloomkv::filter::{Filter, FilterPolicy};
pub use bloomkv::fs::MemFile;
use bloomkv::fs::{FaultFs, FileSystem};
use bloomkv::{Error, WriteBatch};
use bloomkv_tree::iter::{BidirectionalIterator, InternalIterator};
use bloomkv_tree::key::{internal_key, user_key, ValueKind};
use bloomkv_tree::log::{LogReader, LogWriter};
use bloomkv_tree::range_del::RangeTombstone;
use bloomkv_tree::table::{
    Block, BlockBuilder, BlockCache, Compression, Table, TableBuilder, TableOptions,
    TableProperties,
};
use bloomkv_tree::version::edit::{TableMeta, VersionEdit};

/// Bounds the work on one input (an accepted table or log can be long).
const MAX_STEPS: usize = 20_000;

fn expect_corruption(r: &Error, what: &str) {
    assert!(r.is_corruption(), "{what}: decoder failed with a non-corruption error: {r:?}");
}

fn table_path() -> PathBuf {
    PathBuf::from("/fuzz/000001.sst")
}

/// Walks `forward` from its first entry to its end, reading each value, and `backward` from
/// its last entry to its start, at most [`MAX_STEPS`] each; an error must be corruption.
/// Returns the first `keep` keys of the forward walk, for seeks.
fn walk_both_ways(
    mut forward: impl BidirectionalIterator,
    mut backward: impl BidirectionalIterator,
    keep: usize,
    what: &str,
) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    let mut r = forward.seek_to_first();
    let mut steps = 0;
    while r.is_ok() && forward.valid() && steps < MAX_STEPS {
        if keys.len() < keep {
            keys.push(forward.key().to_vec());
        }
        let _ = forward.value();
        r = forward.next();
        steps += 1;
    }
    if let Err(e) = r {
        expect_corruption(&e, &format!("{what} scan"));
    }
    let mut r = backward.seek_to_last();
    let mut steps = 0;
    while r.is_ok() && backward.valid() && steps < MAX_STEPS {
        r = backward.prev();
        steps += 1;
    }
    if let Err(e) = r {
        expect_corruption(&e, &format!("{what} reverse scan"));
    }
    keys
}

/// Table: open, scan forward and backward, seek, point gets.
pub fn table(data: &[u8]) {
    let cache = Arc::new(BlockCache::new(1 << 20));
    let t = match Table::open(Arc::new(MemFile::from(data.to_vec())), table_path(), Some(cache)) {
        Ok(t) => Arc::new(t),
        Err(e) => return expect_corruption(&e, "Table::open"),
    };
    let keys = walk_both_ways(t.iter(), t.iter(), 64, "table");
    for k in keys.iter().take(16) {
        let mut it = t.iter();
        if let Err(e) = it.seek(k) {
            expect_corruption(&e, "table seek");
        }
        let user = &k[..k.len().saturating_sub(8)];
        if let Err(e) = t.get(user, u64::MAX >> 8) {
            expect_corruption(&e, "table get");
        }
    }
    for probe in [&b""[..], b"key", b"\xff\xff"] {
        if let Err(e) = t.get(probe, 1 << 40) {
            expect_corruption(&e, "table get");
        }
    }
    // An accepted range-deletion block holds what the reader promises.
    let ts = t.range_tombstones();
    assert_eq!(ts.len() as u64, t.properties().num_range_deletions, "range tombstone count");
    assert!(ts.iter().all(|r| r.start < r.end), "empty range tombstone accepted");
    assert!(ts.windows(2).all(|w| w[0].end <= w[1].start), "range tombstones out of order");
}

/// Block: decode, scan both ways, seek to each key seen.
pub fn block(data: &[u8]) {
    let b = match Block::new(bytes::Bytes::copy_from_slice(data)) {
        Ok(b) => b,
        Err(e) => return expect_corruption(&e, "Block::new"),
    };
    let keys = walk_both_ways(b.iter(), b.iter(), 32, "block");
    for k in keys.iter().chain([&Vec::new(), &vec![0xff; 9]]) {
        if let Err(e) = b.seek(k) {
            expect_corruption(&e, "block seek");
        }
    }
}

/// WAL / manifest framing: read every record.
pub fn log(data: &[u8]) {
    let mut r = LogReader::new(PathBuf::from("/fuzz/000001.log"), data.to_vec());
    let mut total = 0usize;
    for _ in 0..MAX_STEPS {
        match r.next_record() {
            Ok(Some(rec)) => {
                total += rec.len();
                assert!(total <= data.len(), "records hold more bytes than the file");
            }
            Ok(None) => {
                assert!(r.dropped_tail_bytes() as usize <= data.len());
                return;
            }
            Err(e) => return expect_corruption(&e, "LogReader"),
        }
    }
}

/// One manifest record; accepted edits must round-trip.
pub fn edit(data: &[u8]) {
    match VersionEdit::decode(data) {
        Ok(e) => {
            let again = VersionEdit::decode(&e.encode()).expect("re-encoded edit decodes");
            assert_eq!(again, e, "edit round trip");
        }
        Err(e) => expect_corruption(&e, "VersionEdit::decode"),
    }
}

/// A whole manifest file named by CURRENT, through `read_manifest`.
pub fn manifest(data: &[u8]) {
    let fs = FaultFs::new();
    let dir = Path::new("/fuzz");
    fs.create_dir_all(dir).unwrap();
    let mut f = fs.create(&dir.join("MANIFEST-000005")).unwrap();
    f.append(data).unwrap();
    drop(f);
    let mut c = fs.create(&dir.join("CURRENT")).unwrap();
    c.append(b"MANIFEST-000005\n").unwrap();
    drop(c);
    match bloomkv_tree::version::manifest::read_manifest(&fs, dir) {
        Ok(m) => {
            let numbers: Vec<u64> = m
                .keyspaces
                .iter()
                .flat_map(|k| k.levels.iter().flatten().map(|t| t.number))
                .collect();
            let distinct: std::collections::HashSet<&u64> = numbers.iter().collect();
            assert_eq!(distinct.len(), numbers.len(), "a table is named twice");
            for k in &m.keyspaces {
                assert!(k.levels.len() == bloomkv_tree::version::set::NUM_LEVELS);
                assert!(k.levels.iter().flatten().all(|t| t.number < m.next_file_number));
                assert!(k.def.id == 0 || k.def.id < m.next_keyspace_id);
                assert!(k.levels.iter().flatten().all(|t| t.largest_seq <= m.last_seq));
                assert!(k
                    .levels
                    .iter()
                    .flatten()
                    .all(|t| user_key(&t.smallest) <= user_key(&t.largest)));
                for (i, newer) in k.levels[0].iter().enumerate() {
                    for older in &k.levels[0][i + 1..] {
                        // In the order lookups ask L0: newest entry first, then number.
                        let (newer, older) = if (newer.largest_seq, newer.number)
                            > (older.largest_seq, older.number)
                        {
                            (newer, older)
                        } else {
                            (older, newer)
                        };
                        let overlap = user_key(&newer.smallest) <= user_key(&older.largest)
                            && user_key(&older.smallest) <= user_key(&newer.largest);
                        assert!(!overlap || newer.smallest_seq > older.largest_seq, "L0 order");
                    }
                }
                for level in &k.levels[1..] {
                    let mut ranges: Vec<(&[u8], &[u8])> = level
                        .iter()
                        .map(|t| (user_key(&t.smallest), user_key(&t.largest)))
                        .collect();
                    ranges.sort();
                    assert!(ranges.windows(2).all(|w| w[0].1 < w[1].0), "sorted level tables meet");
                }
            }
        }
        Err(e) => expect_corruption(&e, "read_manifest"),
    }
}

/// A filter block; accepted filters answer queries.
pub fn filter(data: &[u8]) {
    match Filter::decode(data) {
        Ok(f) => {
            for k in [&b"a"[..], b"key", b""] {
                let _ = f.may_contain(k);
            }
            let hashes = [1u64, 2, u64::MAX, 0x1234_5678_9abc_def0];
            let mut out = [false; 4];
            f.may_contain_batch(&hashes, &mut out);
            let _ = (f.memory_bytes(), f.expected_fpr(), f.estimated_keys(), f.fraction_bits_set());
            assert!(f.memory_bytes() <= data.len() + 64, "filter larger than its encoding");
        }
        Err(e) => expect_corruption(&e, "Filter::decode"),
    }
}

/// A WAL record payload as a write batch.
pub fn batch(data: &[u8]) {
    match WriteBatch::decode(data.to_vec()) {
        Ok(b) => {
            let n = b.iter().count();
            assert_eq!(n, b.len(), "iterated op count differs from the header");
            assert!(n <= data.len(), "more ops than bytes");
        }
        Err(e) => expect_corruption(&e, "WriteBatch::decode"),
    }
}

/// A properties block.
pub fn properties(data: &[u8]) {
    match TableProperties::decode(data) {
        Ok(p) => {
            // Compared as encodings: a float field may hold NaN, which is never `==` itself.
            let again = TableProperties::decode(&p.encode()).expect("re-encoded properties decode");
            assert_eq!(again.encode(), p.encode(), "properties round trip");
        }
        Err(e) => expect_corruption(&e, "TableProperties::decode"),
    }
}

// ---------------------------------------------------------------------------------------
// Valid inputs.

/// A valid table of `n` entries (internal keys, some tombstones).
pub fn seed_table(
    n: usize,
    compression: Compression,
    policy: FilterPolicy,
    block_bytes: usize,
) -> Vec<u8> {
    seed_table_with_range_dels(n, compression, policy, block_bytes, 0)
}

/// [`seed_table`] plus `ranges` range tombstones (format version 2, a range-deletion
/// block, properties #22-#24): disjoint, over the first entries' keys.
pub fn seed_table_with_range_dels(
    n: usize,
    compression: Compression,
    policy: FilterPolicy,
    block_bytes: usize,
    ranges: usize,
) -> Vec<u8> {
    let fs = FaultFs::new();
    let dir = Path::new("/seed");
    fs.create_dir_all(dir).unwrap();
    let path = dir.join("1.sst");
    let opts =
        TableOptions { block_bytes, compression, filter_policy: policy, ..TableOptions::default() };
    let mut b = TableBuilder::new(fs.create(&path).unwrap(), opts);
    for i in 0..n {
        let kind = if i % 9 == 4 { ValueKind::Delete } else { ValueKind::Put };
        let k = internal_key(format!("key{i:05}").as_bytes(), 1000 - (i as u64 % 1000), kind);
        let v = if kind == ValueKind::Put {
            format!("value-{i}-{}", "x".repeat(i % 40))
        } else {
            String::new()
        };
        b.add(&k, v.as_bytes()).unwrap();
    }
    for r in 0..ranges {
        b.add_range_tombstone(RangeTombstone {
            start: format!("key{:05}", r * 7).into_bytes(),
            end: format!("key{:05}x", r * 7 + 3).into_bytes(),
            seq: 500 + r as u64 * 37,
        })
        .unwrap();
    }
    b.finish().unwrap();
    fs.contents(&path).unwrap()
}

/// A valid block.
pub fn seed_block(n: usize, restart_interval: usize) -> Vec<u8> {
    let mut b = BlockBuilder::new(restart_interval);
    for i in 0..n {
        let k = internal_key(format!("k{i:04}").as_bytes(), i as u64 + 1, ValueKind::Put);
        b.add(&k, format!("v{i}").as_bytes());
    }
    b.finish()
}

/// A valid version edit.
pub fn seed_edit(tables: u64) -> VersionEdit {
    let meta = |n: u64| TableMeta {
        keyspace: 0,
        number: n,
        file_size: 1000 + n,
        smallest: internal_key(format!("a{n}").as_bytes(), n, ValueKind::Put),
        largest: internal_key(format!("z{n}").as_bytes(), n + 5, ValueKind::Delete),
        smallest_seq: n,
        largest_seq: n + 5,
        num_entries: 10 * n,
        blob_refs: Vec::new(),
    };
    VersionEdit {
        log_number: Some(3),
        next_file_number: Some(100),
        last_seq: Some(77),
        added: (1..=tables)
            .map(|n| ((n % 7) as usize, TableMeta { keyspace: (n % 2) as u32, ..meta(n) }))
            .collect(),
        deleted: vec![(1, 2)],
        keyspaces: vec![bloomkv_tree::version::edit::KeyspaceDef {
            id: 1,
            name: "one".into(),
            opts: bloomkv::KeyspaceOptions::new()
                .compression(bloomkv::Compression::Zstd { level: 3 }),
            callbacks: Some(Default::default()),
        }],
        dropped_keyspaces: vec![],
        next_keyspace_id: Some(2),
        clock_mark: None,
        added_blobs: Vec::new(),
        dropped_blobs: Vec::new(),
    }
}

/// Frames `records` as a log file (WAL / manifest format).
pub fn frame(records: &[Vec<u8>]) -> Vec<u8> {
    let fs = FaultFs::new();
    let dir = Path::new("/seed");
    fs.create_dir_all(dir).unwrap();
    let path = dir.join("1.log");
    let mut w = LogWriter::new(fs.create(&path).unwrap());
    for r in records {
        w.add_record(r).unwrap();
    }
    w.flush().unwrap();
    fs.contents(&path).unwrap()
}

/// A valid manifest: a snapshot edit, then edits that delete what earlier ones added.
pub fn seed_manifest() -> Vec<u8> {
    let mut first = seed_edit(6);
    first.deleted.clear();
    let second = VersionEdit {
        deleted: vec![(1, 1)],
        added: seed_edit(2)
            .added
            .into_iter()
            .map(|(l, mut m)| {
                m.number += 10;
                (l, m)
            })
            .collect(),
        ..VersionEdit::default()
    };
    frame(&[first.encode(), second.encode()])
}

/// A valid write-batch record: `seq | count | ops`.
pub fn seed_batch(ops: usize) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&42u64.to_le_bytes());
    out.extend_from_slice(&(ops as u32).to_le_bytes());
    for i in 0..ops {
        // Delete (0), put (1) and, every fifth op, delete-range (2: start, end).
        let kind: u8 = if i % 5 == 3 { 2 } else { u8::from(i % 3 != 1) };
        out.push(kind);
        let k = format!("key{i}");
        bloomkv_tree::coding::put_bytes(&mut out, k.as_bytes());
        match kind {
            1 => bloomkv_tree::coding::put_bytes(&mut out, format!("value{i}").as_bytes()),
            2 => bloomkv_tree::coding::put_bytes(&mut out, format!("key{i}z").as_bytes()),
            _ => {}
        }
    }
    out
}

/// A valid filter block.
pub fn seed_filter(policy: FilterPolicy, keys: usize) -> Vec<u8> {
    Filter::build(policy, (0..keys).map(|i| format!("key{i}"))).encode()
}
