//! The checks on in-memory files: what the tool's end-to-end tests do not pin down — exact
//! findings (file, offset, what) for damage in one part and in several at once, the
//! counters, and the database checks' notes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::fs::fault::unique_dir;
use crate::fs::{FaultFs, FileSystem, MemFile, RandomAccessFile, WritableFile};
use crate::key::{internal_key, ValueKind};
use crate::range_del::RangeTombstone;
use crate::table::format::{BlockEncoder, BlockHandle, Compression, Footer, BLOCK_TRAILER_LEN};
use crate::table::properties::TableProperties;
use crate::table::reader::read_footer;
use crate::table::{Table, TableBuilder, TableOptions};
use crate::{Db, Options};

const ENTRIES: u64 = 300;

/// A table of [`ENTRIES`] entries in small blocks.
fn build_table() -> Vec<u8> {
    let file = MemFile::new();
    let opts = TableOptions::default().block_bytes(256);
    let mut b = TableBuilder::new(Box::new(file.clone()), opts);
    for i in 0..ENTRIES {
        let kind = if i % 7 == 0 { ValueKind::Delete } else { ValueKind::Put };
        b.add(&internal_key(format!("key{i:05}").as_bytes(), 1000 - i, kind), b"value").unwrap();
    }
    b.finish().unwrap();
    file.contents()
}

/// A table of [`ENTRIES`] entries in small blocks and range tombstones, one of them below
/// every entry and one above (so the key range is the tombstones'), and one with the
/// table's lowest sequence number.
fn build_table_with_range_dels() -> (Vec<u8>, Vec<RangeTombstone>) {
    let file = MemFile::new();
    let opts = TableOptions::default().block_bytes(256);
    let mut b = TableBuilder::new(Box::new(file.clone()), opts);
    let t =
        |start: &str, end: &str, seq| RangeTombstone { start: start.into(), end: end.into(), seq };
    let tombstones = vec![t("a", "b", 2000), t("key00010", "key00020", 5), t("zz", "zz\0", 1500)];
    for ts in &tombstones {
        b.add_range_tombstone(ts.clone()).unwrap();
    }
    for i in 0..ENTRIES {
        b.add(&internal_key(format!("key{i:05}").as_bytes(), 1000 - i, ValueKind::Put), b"v")
            .unwrap();
    }
    b.finish().unwrap();
    (file.contents(), tombstones)
}

fn as_file(bytes: &[u8]) -> Arc<dyn RandomAccessFile> {
    let f = MemFile::new();
    f.clone().append(bytes).unwrap();
    Arc::new(f)
}

fn check_bytes(bytes: &[u8]) -> Report {
    let mut r = Report::default();
    table::check_file(&mut r, Path::new("t.sst"), as_file(bytes), &mut Vec::new());
    r
}

fn finding(offset: u64, what: &str) -> Finding {
    Finding { file: PathBuf::from("t.sst"), offset: Some(offset), what: what.into() }
}

#[test]
fn a_clean_table_passes_and_is_counted() {
    let bytes = build_table();
    let blocks = Table::open(as_file(&bytes), "t.sst".into(), None).unwrap().num_data_blocks();
    assert!(blocks >= 3);
    let r = check_bytes(&bytes);
    assert_eq!(r.status(), Status::Ok, "{r:?}");
    assert!(r.notes.is_empty() && r.errors.is_empty());
    let want =
        Checked { tables: 1, data_blocks: blocks as u64, entries: ENTRIES, ..Checked::default() };
    assert_eq!(r.checked, want);
}

#[test]
fn a_clean_table_with_range_tombstones_passes() {
    let (bytes, tombstones) = build_table_with_range_dels();
    let table = Table::open(as_file(&bytes), "t.sst".into(), None).unwrap();
    assert_eq!(table.range_tombstones(), &tombstones[..]);
    let p = table.properties();
    assert_eq!((&p.smallest_user_key[..], &p.largest_user_key[..]), (&b"a"[..], &b"zz"[..]));
    assert_eq!((p.smallest_seq, p.largest_seq), (5, 2000));
    let r = check_bytes(&bytes);
    assert_eq!(r.status(), Status::Ok, "{r:?}");
    assert_eq!(r.checked.entries, ENTRIES);
}

/// [`build_table_with_range_dels`]'s table with a range filter.
fn build_table_with_range_filter() -> Vec<u8> {
    let file = MemFile::new();
    let opts = TableOptions::default().block_bytes(256).range_filter(Some(16.0));
    let mut b = TableBuilder::new(Box::new(file.clone()), opts);
    let t =
        |start: &str, end: &str, seq| RangeTombstone { start: start.into(), end: end.into(), seq };
    for ts in [t("a", "b", 2000), t("key00010", "key00020", 5), t("zz", "zz\0", 1500)] {
        b.add_range_tombstone(ts).unwrap();
    }
    for i in 0..ENTRIES {
        let kind = if i % 7 == 0 { ValueKind::Delete } else { ValueKind::Put };
        b.add(&internal_key(format!("key{i:05}").as_bytes(), 1000 - i, kind), b"v").unwrap();
    }
    b.finish().unwrap();
    file.contents()
}

#[test]
fn a_range_filter_is_checked_against_every_key_and_tombstone() {
    let clean = build_table_with_range_filter();
    let table = Table::open(as_file(&clean), "t.sst".into(), None).unwrap();
    let props = table.properties().clone();
    assert!(props.range_filter.size > 0 && table.range_filter().is_some());
    // Every distinct user key and the tombstones' starts, of which "key00010" is a key too.
    assert_eq!(props.range_filter_keys, ENTRIES + 2);
    let r = check_bytes(&clean);
    assert_eq!(r.status(), Status::Ok, "{r:?}");

    // A filter over other keys, forged in with a valid checksum and the same size: it
    // answers "no" for the table's keys, which the check finds (and the open refuses, as
    // the properties' count no longer matches).
    let h = props.range_filter;
    // The same shape (no common prefix, 8-byte keys at most, as many keys): the same size.
    let others: Vec<Vec<u8>> = std::iter::once(b"b".to_vec())
        .chain((0..ENTRIES).map(|i| format!("key1{i:04}").into_bytes()))
        .chain([b"zy".to_vec()])
        .collect();
    let forged =
        bloomkv_tree::range_filter::RangeFilter::build(others.iter().map(|k| &k[..]), 16.0);
    let mut bytes = clean.clone();
    forge_block(&mut bytes, h, &forged.encode());
    let r = check_bytes(&bytes);
    let first = table.data_block_handles()[0].offset;
    assert!(
        r.problems.contains(&finding(
            first,
            &format!("range filter answers \"no\" for {ENTRIES} key(s) the table holds (first: \"key00000\")")
        )),
        "{r:?}"
    );
    assert!(
        r.problems.contains(&finding(
            h.offset,
            "range filter answers \"no\" for 3 range tombstone start(s)"
        )),
        "{r:?}"
    );

    // A flipped byte in the block: its checksum.
    let mut bytes = clean.clone();
    bytes[h.offset as usize + 20] ^= 1;
    let r = check_bytes(&bytes);
    assert_eq!(r.problems, [finding(h.offset, "block checksum mismatch")], "{r:?}");
    assert!(Table::open(as_file(&bytes), "t.sst".into(), None).unwrap_err().is_corruption());

    // A gap before the block.
    let moved = BlockHandle { offset: h.offset + 1, size: h.size - 1 };
    let mut bytes = clean.clone();
    let footer = read_footer(as_file(&clean).as_ref(), Path::new("t.sst")).unwrap().0;
    forge_block(
        &mut bytes,
        footer.properties,
        &TableProperties { range_filter: moved, ..props.clone() }.encode(),
    );
    let r = check_bytes(&bytes);
    assert_eq!(
        r.problems[0],
        finding(h.offset, "1 unexplained bytes after the range-deletion block"),
        "{r:?}"
    );
}

/// Replaces the stored block at `h` with `payload` (same size) and a valid checksum: damage
/// only the meaning checks can see.
fn forge_block(bytes: &mut [u8], h: BlockHandle, payload: &[u8]) {
    let mut enc = Vec::new();
    BlockEncoder::new(Compression::None).encode(payload, &mut enc);
    assert_eq!(enc.len() as u64, h.size + BLOCK_TRAILER_LEN as u64, "forging keeps the layout");
    bytes[h.offset as usize..h.offset as usize + enc.len()].copy_from_slice(&enc);
}

#[test]
fn a_damaged_range_deletion_block_is_reported_beside_other_damage() {
    let (clean, tombstones) = build_table_with_range_dels();
    let table = Table::open(as_file(&clean), "t.sst".into(), None).unwrap();
    let h = table.properties().range_del;
    let first = table.data_block_handles()[0];
    assert_eq!(check_bytes(&clean).checked.range_tombstones, tombstones.len() as u64);

    // A flipped byte: the block's checksum, reported with the data block's.
    let mut bytes = clean.clone();
    bytes[first.offset as usize + 2] ^= 0x10;
    bytes[(h.offset + h.size / 2) as usize] ^= 0x10;
    let r = check_bytes(&bytes);
    let want = [
        finding(h.offset, "block checksum mismatch"),
        finding(first.offset, "block checksum mismatch"),
    ];
    assert_eq!(r.problems, want, "{r:?}");
    assert_eq!(r.checked.range_tombstones, 0);

    // Behind a valid checksum: the second tombstone starting inside the first.
    let mut ts = tombstones.clone();
    ts[1].start = b"a\0\0\0\0\0\0\0".to_vec();
    let mut bytes = clean.clone();
    forge_block(&mut bytes, h, &crate::range_del::encode_block(&ts));
    let r = check_bytes(&bytes);
    // After the count (one byte) and tombstone 0 (seq 2000 in two bytes, "a" and "b" in two
    // each).
    let at = h.offset + 1 + 6;
    assert_eq!(
        r.problems,
        [finding(at, "range tombstone 1: overlaps or precedes the previous one")],
        "{r:?}"
    );
}

#[test]
fn range_deletion_metadata_must_agree_with_the_block() {
    let (clean, _) = build_table_with_range_dels();
    let table = Table::open(as_file(&clean), "t.sst".into(), None).unwrap();
    let footer = *table.footer();
    let props = table.properties().clone();
    let footer_at = clean.len() - crate::table::format::FOOTER_LEN;

    // A footer of format version 1 on a table with range tombstones.
    let mut bytes = clean.clone();
    bytes[footer_at..].copy_from_slice(&Footer { version: 1, ..footer }.encode());
    let r = check_bytes(&bytes);
    assert_eq!(r.status(), Status::Corrupt);
    let whats: Vec<&str> = r.problems.iter().map(|f| f.what.as_str()).collect();
    assert!(
        whats.iter().any(|w| w
            .starts_with("footer's format version 1 but the properties record 3 range tombstones")),
        "{r:?}"
    );
    assert!(r.problems.iter().all(|f| f.offset == Some(footer.properties.offset)), "{r:?}");

    // Properties that miscount them, or leave them out of the key or sequence range.
    for (p, what) in [
        (
            TableProperties { num_range_deletions: 4, ..props.clone() },
            "properties record range tombstones 4 but the table has 3",
        ),
        (
            TableProperties { smallest_user_key: b"b".to_vec(), ..props.clone() },
            "properties record smallest key \"b\" but the table has \"a\"",
        ),
        (
            TableProperties { largest_user_key: b"zy".to_vec(), ..props.clone() },
            "properties record largest key \"zy\" but the table has \"zz\"",
        ),
        (
            TableProperties { smallest_seq: 6, ..props.clone() },
            "properties record smallest sequence 6 but the table has 5",
        ),
        (
            TableProperties { largest_seq: 1999, ..props.clone() },
            "properties record largest sequence 1999 but the table has 2000",
        ),
    ] {
        let mut bytes = clean.clone();
        forge_block(&mut bytes, footer.properties, &p.encode());
        let r = check_bytes(&bytes);
        assert_eq!(r.problems, [finding(footer.properties.offset, what)], "{r:?}");
    }

    // A gap between the filter and the range-deletion block (the block named one byte
    // later than it is, so it no longer decodes either).
    let moved = BlockHandle { offset: props.range_del.offset + 1, size: props.range_del.size - 1 };
    let mut bytes = clean.clone();
    forge_block(
        &mut bytes,
        footer.properties,
        &TableProperties { range_del: moved, ..props.clone() }.encode(),
    );
    let r = check_bytes(&bytes);
    assert_eq!(
        r.problems[0],
        finding(props.range_del.offset, "1 unexplained bytes after the filter block"),
        "{r:?}"
    );
}

#[test]
fn a_damaged_data_block_is_reported_at_its_offset_and_the_others_still_read() {
    let mut bytes = build_table();
    let table = Table::open(as_file(&bytes), "t.sst".into(), None).unwrap();
    let handles = table.data_block_handles();
    let second = handles[1];
    bytes[second.offset as usize + 3] ^= 0x40;
    let r = check_bytes(&bytes);
    assert_eq!(r.status(), Status::Corrupt);
    // Only the block itself: the contents are incomplete, so they are not held against the
    // properties, and the engine's open (which reads no data block) is not asked.
    assert_eq!(r.problems, vec![finding(second.offset, "block checksum mismatch")]);
    assert_eq!(r.checked.data_blocks, handles.len() as u64);
    assert!(r.checked.entries > 0 && r.checked.entries < ENTRIES, "{:?}", r.checked);
}

#[test]
fn damage_in_several_parts_is_reported_part_by_part() {
    let mut bytes = build_table();
    let (footer, _) = read_footer(as_file(&bytes).as_ref(), Path::new("t.sst")).unwrap();
    let last = *Table::open(as_file(&bytes), "t.sst".into(), None)
        .unwrap()
        .data_block_handles()
        .last()
        .unwrap();
    bytes[last.offset as usize] ^= 0x01;
    bytes[footer.filter.offset as usize + 20] ^= 0x01;
    bytes[footer.properties.offset as usize + 1] ^= 0x01;
    let r = check_bytes(&bytes);
    let at: Vec<Option<u64>> = r.problems.iter().map(|f| f.offset).collect();
    assert_eq!(
        at,
        vec![Some(footer.properties.offset), Some(footer.filter.offset), Some(last.offset)],
        "{r:?}"
    );
    // The index was intact, so every block was still visited.
    assert!(r.checked.data_blocks > 1);
}

#[test]
fn a_short_file_is_a_problem_not_a_panic() {
    for len in [0, 1, 63, 64, 65] {
        let r = check_bytes(&build_table()[..len]);
        assert_eq!(r.status(), Status::Corrupt, "{len}: {r:?}");
        assert_eq!(r.problems.len(), 1, "{len}: {r:?}");
        assert_eq!(r.problems[0].offset, Some(len.saturating_sub(64) as u64), "{len}");
    }
}

#[test]
fn a_panicking_check_becomes_an_error_and_keeps_what_it_found() {
    let mut r = Report::default();
    guarded(&mut r, Path::new("x"), |r| {
        r.checked.tables += 1;
        r.problem(Path::new("x"), Some(7), "seen before the panic");
        panic!("a bug");
    });
    assert_eq!(r.checked.tables, 1);
    assert_eq!(r.problems.len(), 1);
    assert_eq!(r.errors.len(), 1);
    assert!(r.errors[0].what.starts_with("internal error"), "{r:?}");
}

/// A closed database on `fs`: compacted tables, and 50 writes left in its newest WAL.
fn build_db(fs: &FaultFs) -> PathBuf {
    let dir = unique_dir("check");
    let opts = |memtable_bytes| {
        Options::default()
            .memtable_bytes(memtable_bytes)
            .block_bytes(256)
            .file_system(Arc::new(fs.clone()))
    };
    let db = Db::open(&dir, opts(4 << 10)).unwrap();
    for i in 0..2000u32 {
        db.put(format!("k{:05}", i % 700), format!("v{i}")).unwrap();
    }
    db.compact().unwrap();
    db.close().unwrap();
    // A memtable large enough that no flush retires the WAL these writes go to.
    let db = Db::open(&dir, opts(1 << 20)).unwrap();
    for i in 0..50u32 {
        db.put(format!("w{i}"), "in the WAL only").unwrap();
    }
    db.close().unwrap();
    dir
}

fn write_file(fs: &FaultFs, path: &Path, bytes: &[u8]) {
    let mut f = fs.create(path).unwrap();
    f.append(bytes).unwrap();
    f.sync().unwrap();
}

fn files_ending(fs: &FaultFs, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        fs.files().into_iter().filter(|p| p.to_string_lossy().ends_with(suffix)).collect();
    v.sort();
    v
}

#[test]
fn a_database_is_checked_whole() {
    let fs = FaultFs::new();
    let dir = build_db(&fs);
    let r = database(Arc::new(fs.clone()), &dir);
    assert_eq!(r.status(), Status::Ok, "{r:?}");
    assert!(r.checked.tables >= 1 && r.checked.manifest_edits >= 1, "{:?}", r.checked);
    assert!(r.checked.wal_records >= 50, "{:?}", r.checked);

    // A torn tail on the newest WAL is what a crash leaves: a note at where it starts.
    let wal = files_ending(&fs, ".log").pop().unwrap();
    let mut bytes = fs.contents(&wal).unwrap();
    bytes.truncate(bytes.len() - 3);
    let len = bytes.len() as u64;
    fs.set_contents(&wal, bytes).unwrap();
    let r = database(Arc::new(fs.clone()), &dir);
    assert_eq!(r.status(), Status::Ok, "{r:?}");
    let torn = r.notes.iter().find(|n| n.file == wal).unwrap();
    assert!(torn.what.contains("torn") && torn.offset.is_some_and(|o| o < len), "{torn:?}");

    // A missing live table, a left-over one and a temporary file.
    let live = crate::version::manifest::read_manifest(&fs, &dir).unwrap();
    let table = crate::filename::table_path(&dir, live.keyspaces[0].levels.concat()[0].number);
    let bytes = fs.contents(&table).unwrap();
    fs.remove(&table).unwrap();
    let orphan = crate::filename::table_path(&dir, 999_999);
    write_file(&fs, &orphan, &bytes);
    write_file(&fs, &dir.join("CURRENT.tmp"), b"");
    let r = database(Arc::new(fs.clone()), &dir);
    assert_eq!(r.status(), Status::Corrupt);
    assert_eq!(r.problems.len(), 1, "{r:?}");
    assert_eq!(r.problems[0].file, table);
    assert!(r.problems[0].what.contains("is missing"), "{r:?}");
    for noted in [&orphan, &dir.join("CURRENT.tmp")] {
        assert!(r.notes.iter().any(|n| &n.file == noted), "{noted:?}: {r:?}");
    }
}

#[test]
fn a_database_without_a_manifest_still_has_its_tables_checked() {
    let fs = FaultFs::new();
    let dir = build_db(&fs);
    let tables = files_ending(&fs, ".sst").len() as u64;
    fs.remove(&crate::filename::current_path(&dir)).unwrap();
    let r = database(Arc::new(fs.clone()), &dir);
    assert_eq!(r.status(), Status::Corrupt);
    assert_eq!(r.problems.len(), 1, "{r:?}");
    assert!(r.problems[0].what.contains("CURRENT is missing"), "{r:?}");
    assert_eq!(r.checked.tables, tables);

    let empty = unique_dir("check-empty");
    fs.create_dir_all(&empty).unwrap();
    let r = database(Arc::new(fs.clone()), &empty);
    assert_eq!(r.status(), Status::Error, "{r:?}");
}

/// A manifest that lost its last edit (a flush whose WAL segment is gone) reads as a clean,
/// shorter log and every file checks out on its own; only recovery's cross-checks see the
/// loss. `verify` must not call a database clean that the engine refuses to open.
#[test]
fn a_database_the_engine_refuses_is_not_clean() {
    let fs = FaultFs::new();
    let dir = unique_dir("check-lost-edit");
    let db = Db::open(&dir, Options::new().file_system(Arc::new(fs.clone()))).unwrap();
    db.put(b"a", b"1").unwrap();
    db.flush().unwrap();
    db.put(b"a", b"2").unwrap();
    db.flush().unwrap();
    drop(db);
    let manifest = files_ending(&fs, "")
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("MANIFEST-")));
    let manifest = manifest.unwrap();
    let bytes = fs.contents(&manifest).unwrap();
    let mut reader = crate::log::LogReader::new(manifest.clone(), bytes.clone());
    // The last edit adding a table (the close may have recorded the clock's mark after it).
    let mut last = 0;
    while let Some(record) = reader.next_record().unwrap() {
        if !crate::version::edit::VersionEdit::decode(&record).unwrap().added.is_empty() {
            last = reader.last_record_offset() as usize;
        }
    }
    fs.set_contents(&manifest, bytes[..last].to_vec()).unwrap();

    let r = database(Arc::new(fs.clone()), &dir);
    assert_eq!(r.status(), Status::Corrupt, "{r:?}");
    assert!(r.problems.iter().any(|p| p.file == manifest), "{r:?}");
}
