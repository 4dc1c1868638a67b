//! `Options::mmap_reads`: point lookups that read table files through a memory mapping
//! return what they return through `pread`, on every read path, while tables come and go;
//! and `MappedFile` itself reads exactly the file's bytes, refuses reads past its end and
//! tells a read the page cache can serve at once from one that would wait for the device.
//! Unix only: `StdFs` maps nothing elsewhere.
#![cfg(unix)]

use bloomkv::fs::{FileSystem, MappedFile, RandomAccessFile, StdFs};
use bloomkv::{Db, Options, Readable};

mod common;

use common::files::table_files;
use common::keys::key8;
use common::model::{scan, Model};

fn val(i: u64, gen: u64) -> Vec<u8> {
    format!("value {i} generation {gen} {}", "y".repeat((i % 40) as usize)).into_bytes()
}

fn small(mapped: bool) -> Options {
    common::options::small_tree().mmap_reads(mapped)
}

/// Every key, present or absent, through `get`, `multi_get` and a scan: exactly `model`.
fn check_reads(db: &Db, model: &Model, what: &str) {
    let keys: Vec<Vec<u8>> = (0..4200).map(key8).collect();
    for k in &keys {
        assert_eq!(db.get(k).unwrap().map(|v| v.to_vec()), model.get(k).cloned(), "{what}: get");
    }
    let got = db.multi_get(&keys).unwrap();
    for (k, v) in keys.iter().zip(got) {
        assert_eq!(v.map(|v| v.to_vec()), model.get(k).cloned(), "{what}: multi_get");
    }
    assert_eq!(&scan(db), model, "{what}: scan");
}

/// Every live table is mapped when `mapped` asks for it, and none otherwise.
fn check_mapped(db: &Db, mapped: bool, what: &str) {
    let s = db.stats();
    let tables: usize = s.tables_per_level.iter().sum();
    assert!(tables > 0, "{what}: some tables");
    let want = if mapped { tables as u64 } else { 0 };
    assert_eq!(s.mapped_table_files, want, "{what}: mapped tables of {tables}");
    assert_eq!(s.mapped_table_bytes > 0, mapped, "{what}: mapped bytes");
}

/// Writes keys 0..3000 (generation 0) to `db` and `model`, and compacts them to sorted
/// levels.
fn fill_compacted(db: &Db, model: &mut Model) {
    for i in 0..3000 {
        db.put(key8(i), val(i, 0)).unwrap();
        model.insert(key8(i), val(i, 0));
    }
    db.compact().unwrap();
}

#[test]
fn mapped_lookups_read_what_pread_reads_as_tables_come_and_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let db = Db::open(dir.path(), small(true)).unwrap();
    fill_compacted(&db, &mut model);
    for i in (0..3000).step_by(3) {
        db.put(key8(i), val(i, 1)).unwrap();
        model.insert(key8(i), val(i, 1));
    }
    for i in (0..3000).step_by(7) {
        db.delete(key8(i)).unwrap();
        model.remove(&key8(i));
    }
    db.flush().unwrap();
    let s = db.stats();
    assert!(s.tables_per_level[0] > 0 && s.tables_per_level[1..].iter().any(|&n| n > 0));
    check_mapped(&db, true, "filled");
    check_reads(&db, &model, "filled");

    // A compaction replaces every table: the old files are removed while reads may hold
    // their mappings, and the new ones are mapped as they are installed.
    let old = db.stats().mapped_table_files;
    db.compact().unwrap();
    assert_eq!(db.stats().tables_per_level[0], 0);
    check_mapped(&db, true, "compacted");
    assert_ne!(db.stats().mapped_table_files, old, "the compaction changed the tables");
    check_reads(&db, &model, "compacted");
    db.close().unwrap();

    // Reopened either way, with one file descriptor for all the tables: the same answers.
    // Mapped lookups need no descriptor, so they never reopen a file the bound closed;
    // lookups through `pread` take turns with the one descriptor.
    for mapped in [true, false] {
        let what = format!("reopened, mapped {mapped}");
        let db = Db::open(dir.path(), small(mapped).max_open_files(1)).unwrap();
        check_mapped(&db, mapped, &what);
        let before = db.stats().table_file_reopens;
        for i in 0..3000 {
            assert_eq!(db.get(key8(i)).unwrap().map(|v| v.to_vec()), model.get(&key8(i)).cloned());
        }
        let reopens = db.stats().table_file_reopens - before;
        assert_eq!(reopens == 0, mapped, "{what}: {reopens} files reopened by lookups");
        // The tables are uncompressed, so mapped lookups take every block from the mapping
        // and leave the block cache alone; through `pread`, the second pass hits the cache.
        let s0 = db.stats();
        for i in 0..3000 {
            db.get(key8(i)).unwrap();
        }
        let s1 = db.stats();
        let (reads, hits) =
            (s1.block_reads - s0.block_reads, s1.block_cache_hits - s0.block_cache_hits);
        assert!(reads + hits > 0);
        assert_eq!(hits == 0, mapped, "{what}: {reads} blocks read, {hits} from the cache");
        check_reads(&db, &model, &what);
        db.close().unwrap();
    }
}

#[test]
fn mapped_file_reads_its_bytes_and_nothing_past_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let f = MappedFile::open(&path).unwrap().expect("a non-empty file maps");
    assert_eq!(f.size(), data.len() as u64);
    for (offset, len) in [(0usize, 1usize), (0, 20_000), (4095, 2), (12_345, 4096), (19_999, 1)] {
        let mut buf = vec![0; len];
        f.read_exact_at(&mut buf, offset as u64).unwrap();
        assert_eq!(buf, data[offset..offset + len]);
        let mut buf = vec![0; len];
        assert!(f.read_exact_at_if_cached(&mut buf, offset as u64).unwrap(), "just written");
        assert_eq!(buf, data[offset..offset + len]);
    }
    for (offset, len) in [(19_999u64, 2usize), (20_000, 1), (u64::MAX, 1), (u64::MAX - 1, 4)] {
        let mut buf = vec![0; len];
        assert!(f.read_exact_at(&mut buf, offset).is_err(), "{offset}+{len} is past the end");
        assert!(f.read_exact_at_if_cached(&mut buf, offset).is_err(), "{offset}+{len}");
    }
    // Through the file system seam, and an empty file, which has nothing to map.
    assert_eq!(StdFs.map(&path).unwrap().unwrap().size(), data.len() as u64);
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    assert!(MappedFile::open(&dir.path().join("empty")).unwrap().is_none());
    assert!(MappedFile::open(&dir.path().join("missing")).is_err());
}

/// `read_exact_at_if_cached` must answer "would wait" for pages the page cache dropped, as
/// `multi_get` relies on it to hand device reads to its read threads. Linux only, and in the
/// target directory: a tmpfs (a common `/tmp`) cannot drop its pages.
#[test]
#[cfg(target_os = "linux")]
fn mapped_file_tells_pages_that_would_wait_from_pages_in_memory() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("f");
    let data = vec![0x5au8; 1 << 20];
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    file.sync_all().unwrap();
    // Dropped before mapping: a page a mapping holds in its page tables cannot be dropped.
    fadvise(&file, libc::POSIX_FADV_DONTNEED);
    let f = MappedFile::open(&path).unwrap().unwrap();
    let mut buf = vec![0; 4096];
    assert!(!f.read_exact_at_if_cached(&mut buf, 512 << 10).unwrap(), "dropped pages would wait");
    // A read that may wait brings the page in; then it is served at once.
    f.read_exact_at(&mut buf, 512 << 10).unwrap();
    assert!(buf.iter().all(|&b| b == 0x5a));
    buf.fill(0);
    assert!(f.read_exact_at_if_cached(&mut buf, 512 << 10).unwrap());
    assert!(buf.iter().all(|&b| b == 0x5a));
}

/// Making a mapping enters the pages the page cache holds into its page tables, and only
/// those: lookups then take no page fault on them, and a page not in memory is not read
/// from the device for it. What a mapping holds in its page tables is its `Rss` in
/// `/proc/self/smaps`. In the target directory, as above, so pages can be dropped.
#[test]
#[cfg(target_os = "linux")]
fn mapping_a_file_populates_exactly_the_pages_in_memory() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, vec![0x33u8; 1 << 20]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    file.sync_all().unwrap();

    let whole = MappedFile::open(&path).unwrap().unwrap();
    assert_eq!(mapped_rss_kib(&path), vec![1024], "a file just written is in memory, all of it");
    drop(whole);

    // Drop the file from the page cache (nothing maps it now), then read its first half
    // back without read-ahead. (Dropping only half could leave a large folio spanning both.)
    fadvise(&file, libc::POSIX_FADV_DONTNEED);
    fadvise(&file, libc::POSIX_FADV_RANDOM);
    let mut first = vec![0; 512 << 10];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut first, 0).unwrap();
    let half = MappedFile::open(&path).unwrap().unwrap();
    assert_eq!(mapped_rss_kib(&path), vec![512], "the half in memory is populated");
    let mut buf = vec![0; 4096];
    assert!(
        !half.read_exact_at_if_cached(&mut buf, 768 << 10).unwrap(),
        "the dropped half was not read back in to populate it"
    );
    assert!(half.read_exact_at_if_cached(&mut buf, 256 << 10).unwrap());
    assert!(buf.iter().all(|&b| b == 0x33));
}

/// `posix_fadvise(advice)` over the whole of `file`, which must succeed.
#[cfg(target_os = "linux")]
fn fadvise(file: &std::fs::File, advice: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: an advisory call on a descriptor the caller owns; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, advice) };
    assert_eq!(rc, 0, "posix_fadvise({advice})");
}

/// The `Rss` of each mapping of `path` in this process, in KiB.
#[cfg(target_os = "linux")]
fn mapped_rss_kib(path: &std::path::Path) -> Vec<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.to_str().unwrap();
    let mut found = Vec::new();
    let mut lines = smaps.lines();
    while let Some(line) = lines.next() {
        if line.split_whitespace().nth(5) == Some(name) {
            let rss = lines.find_map(|l| l.strip_prefix("Rss:")).expect("an Rss line follows");
            found.push(rss.trim().trim_end_matches("kB").trim().parse().unwrap());
        }
    }
    found
}

/// A flipped byte in a data block of an uncompressed table, which mapped lookups take
/// straight from the mapping (no block cache, no copy): every lookup that meets it fails
/// naming the table and the block, every other one reads the right value.
#[test]
fn mapped_lookups_catch_a_damaged_block() {
    use bloomkv_tree::table::Table;
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    {
        let db = Db::open(dir.path(), small(true)).unwrap();
        fill_compacted(&db, &mut model);
        db.close().unwrap();
    }
    let tables = table_files(dir.path());
    let damaged = tables[tables.len() / 2].clone();
    let t = Table::open(StdFs.open(&damaged).unwrap(), damaged.clone(), None).unwrap();
    assert_eq!(t.properties().compression, bloomkv::Compression::None);
    let block = t.data_block_handles()[1];
    drop(t);
    let mut bytes = std::fs::read(&damaged).unwrap();
    bytes[(block.offset + block.size / 2) as usize] ^= 0x40;
    std::fs::write(&damaged, &bytes).unwrap();

    let db = Db::open(dir.path(), small(true)).unwrap();
    check_mapped(&db, true, "damaged");
    let (mut failed, mut fine) = (0, 0);
    let keys: Vec<Vec<u8>> = (0..3000).map(key8).collect();
    for k in &keys {
        match db.get(k) {
            Ok(v) => {
                assert_eq!(v.map(|v| v.to_vec()), model.get(k).cloned());
                fine += 1;
            }
            Err(bloomkv::Error::Corruption { file, offset, .. }) => {
                assert_eq!((file.as_path(), offset), (damaged.as_path(), block.offset));
                failed += 1;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    // The block holds a handful of keys; multi_get over all of them fails the same way.
    assert!(failed > 0 && fine > 2000, "{failed} failed, {fine} fine");
    match db.multi_get(&keys) {
        Err(bloomkv::Error::Corruption { file, offset, .. }) => {
            assert_eq!((file.as_path(), offset), (damaged.as_path(), block.offset));
        }
        other => panic!("{:?}", other.map(|v| v.len())),
    }
}
