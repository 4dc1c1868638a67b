//! The checks on in-memory files: what the tool's end-to-end tests do not pin down — exact
//! findings (file, offset, what) for damage in one part and in several at once, the
//! counters, and the database checks' notes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::fs::fault::unique_dir;
use crate::fs::{FaultFs, FileSystem, MemFile, RandomAccessFile, WritableFile};
use crate::key::{internal_key, ValueKind};
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

fn as_file(bytes: &[u8]) -> Arc<dyn RandomAccessFile> {
    let f = MemFile::new();
    f.clone().append(bytes).unwrap();
    Arc::new(f)
}

fn check_bytes(bytes: &[u8]) -> Report {
    let mut r = Report::default();
    table::check_file(&mut r, Path::new("t.sst"), as_file(bytes));
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
    let live = crate::version::set::read_manifest(&fs, &dir).unwrap();
    let table = crate::filename::table_path(&dir, live.levels.concat()[0].number);
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
    let mut last = 0;
    while reader.next_record().unwrap().is_some() {
        last = reader.last_record_offset() as usize;
    }
    fs.set_contents(&manifest, bytes[..last].to_vec()).unwrap();

    let r = database(Arc::new(fs.clone()), &dir);
    assert_eq!(r.status(), Status::Corrupt, "{r:?}");
    assert!(r.problems.iter().any(|p| p.file == manifest), "{r:?}");
}
