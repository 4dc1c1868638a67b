//! What a phase cost in disk: bytes written per byte the user wrote (write amplification) and
//! bytes on disk per byte of live data (space amplification), with the directory walk that
//! measures the second.

use std::path::Path;

use bloomkv::Stats;
use serde::Serialize;

/// What a directory tree's files take, counted as `du` counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DirSize {
    /// Files (anything but directories), each inode once.
    pub files: u64,
    /// Their lengths summed (`du --apparent-size`).
    pub apparent_bytes: u64,
    /// The disk blocks allocated to them (`du`; on platforms that do not tell, their
    /// lengths). Space a WAL segment reserved ahead of its writes counts; a sparse hole
    /// does not.
    pub allocated_bytes: u64,
}

/// [`DirSize`] of everything under `dir`, subdirectories included. Symbolic links are not
/// followed, and a file linked twice counts once, as with `du`. A file removed while the
/// walk runs is left out rather than failing it.
pub fn dir_size(dir: &Path) -> std::io::Result<DirSize> {
    let mut size = DirSize::default();
    let mut seen = std::collections::HashSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = match entry.path().symlink_metadata() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if meta.is_dir() {
                pending.push(entry.path());
                continue;
            }
            let (inode, allocated) = allocation(&meta);
            if inode.is_some_and(|i| !seen.insert(i)) {
                continue;
            }
            size.files += 1;
            size.apparent_bytes += meta.len();
            size.allocated_bytes += allocated;
        }
    }
    Ok(size)
}

/// A file's identity (where the platform has one) and the bytes allocated to it.
#[cfg(unix)]
fn allocation(meta: &std::fs::Metadata) -> (Option<(u64, u64)>, u64) {
    use std::os::unix::fs::MetadataExt;
    // `st_blocks` is in 512-byte units whatever the file system's block size.
    (Some((meta.dev(), meta.ino())), meta.blocks() * 512)
}

#[cfg(not(unix))]
fn allocation(meta: &std::fs::Metadata) -> (Option<(u64, u64)>, u64) {
    (None, meta.len())
}

/// A phase's write and space amplification, and the figures they come from.
#[derive(Debug, Clone, Serialize)]
pub struct Amplification {
    /// Bytes per value of the phase's database.
    pub value_bytes: usize,
    /// Keys in the database (each present once).
    pub keys: u64,
    /// `--blob-threshold`, when set.
    pub blob_threshold: Option<u64>,
    /// Keys and values the phase's writes carried (`Stats::user_bytes_written`).
    pub payload_bytes_written: u64,
    /// Bytes appended to the WAL (`Stats::wal_bytes_written`).
    pub wal_bytes_written: u64,
    /// Bytes of tables written by flushes and compactions.
    pub table_bytes_written: u64,
    /// Bytes of blob files written (`Stats::blob_bytes_written`).
    pub blob_bytes_written: u64,
    /// `wal + table + blob` bytes written.
    pub disk_bytes_written: u64,
    /// `disk_bytes_written / payload_bytes_written`; null for a phase that wrote nothing.
    pub write_amplification: Option<f64>,
    /// Keys and values the database holds at the end of the phase: every key once, with
    /// its newest value.
    pub live_payload_bytes: u64,
    /// The database directory at the end of the phase.
    pub disk: DirSize,
    /// `disk.allocated_bytes / live_payload_bytes`.
    pub space_amplification: f64,
    /// Seconds after the phase's operations until the tree was still: the memtable flushed,
    /// no compaction due, replaced files removed. Not in the phase's ops/s; its writes are in
    /// the bytes above.
    pub settle_seconds: f64,
}

/// Bytes written and held by one phase, before the arithmetic: what [`Amplification::of`]
/// divides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Keys and values the user wrote.
    pub payload: u64,
    /// Bytes the WAL appended.
    pub wal: u64,
    /// Bytes of tables written (flushes, compactions, ingests).
    pub tables: u64,
    /// Bytes of blob files written.
    pub blobs: u64,
}

impl Written {
    /// The counters' movement from `before` to `after`.
    pub fn between(before: &Stats, after: &Stats) -> Written {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Written {
            payload: d(after.user_bytes_written, before.user_bytes_written)
                + d(after.ingested_bytes, before.ingested_bytes),
            wal: d(after.wal_bytes_written, before.wal_bytes_written),
            tables: d(after.flush_bytes_written, before.flush_bytes_written)
                + d(after.compaction_bytes_written, before.compaction_bytes_written)
                + d(after.ingest_bytes_written, before.ingest_bytes_written),
            blobs: d(after.blob_bytes_written, before.blob_bytes_written),
        }
    }

    /// Every byte that reached the disk.
    pub fn disk(&self) -> u64 {
        self.wal + self.tables + self.blobs
    }
}

impl Amplification {
    /// The figures of a phase that wrote `w` and left `disk` holding `live_payload_bytes` of
    /// keys and values (`keys` of `value_bytes`).
    pub fn of(
        (value_bytes, keys, blob_threshold): (usize, u64, Option<u64>),
        w: Written,
        live_payload_bytes: u64,
        disk: DirSize,
        settle_seconds: f64,
    ) -> Amplification {
        Amplification {
            value_bytes,
            keys,
            blob_threshold,
            payload_bytes_written: w.payload,
            wal_bytes_written: w.wal,
            table_bytes_written: w.tables,
            blob_bytes_written: w.blobs,
            disk_bytes_written: w.disk(),
            write_amplification: (w.payload > 0).then(|| w.disk() as f64 / w.payload as f64),
            live_payload_bytes,
            disk,
            space_amplification: disk.allocated_bytes as f64 / live_payload_bytes.max(1) as f64,
            settle_seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Stats` is non-exhaustive: built from the default, field by field.
    fn stats(f: impl FnOnce(&mut Stats)) -> Stats {
        let mut s = Stats::default();
        f(&mut s);
        s
    }

    #[test]
    fn write_amplification_counts_wal_tables_and_blobs_per_payload_byte() {
        let before = stats(|s| {
            s.user_bytes_written = 1000;
            s.wal_bytes_written = 1100;
        });
        let after = stats(|s| {
            s.user_bytes_written = 3000;
            s.wal_bytes_written = 3300;
            s.flush_bytes_written = 2100;
            s.compaction_bytes_written = 4000;
            s.blob_bytes_written = 500;
        });
        let w = Written::between(&before, &after);
        assert_eq!(w, Written { payload: 2000, wal: 2200, tables: 6100, blobs: 500 });
        let disk = DirSize { files: 3, apparent_bytes: 9000, allocated_bytes: 12_000 };
        let a = Amplification::of((4096, 10, None), w, 4000, disk, 0.5);
        assert_eq!(a.disk_bytes_written, 8800);
        assert_eq!(a.write_amplification, Some(4.4));
        // Space: the blocks allocated (du), not the lengths, over the live keys and values.
        assert_eq!(a.space_amplification, 3.0);
        // An ingest's bytes count on both sides, as in `Stats::write_amplification`.
        let ingested = stats(|s| {
            *s = before.clone();
            s.ingested_bytes = 1000;
            s.ingest_bytes_written = 1200;
        });
        let w = Written::between(&before, &ingested);
        assert_eq!(w, Written { payload: 1000, tables: 1200, ..Written::default() });
    }

    #[test]
    fn a_phase_that_wrote_nothing_has_no_write_amplification() {
        let s = stats(|s| {
            s.user_bytes_written = 10;
            s.wal_bytes_written = 20;
        });
        let w = Written::between(&s, &s);
        assert_eq!(w, Written::default());
        let disk = DirSize { files: 1, apparent_bytes: 10, allocated_bytes: 4096 };
        let a = Amplification::of((100, 1, Some(64)), w, 0, disk, 0.0);
        assert_eq!(a.write_amplification, None);
        // An empty database's space over no live bytes: its bytes, not a division by zero.
        assert_eq!(a.space_amplification, 4096.0);
    }

    #[test]
    fn dir_size_counts_files_in_subdirectories_once_by_their_blocks() {
        let dir = tempfile::tempdir_in(std::env::current_exe().unwrap().parent().unwrap()).unwrap();
        assert_eq!(dir_size(dir.path()).unwrap(), DirSize::default());
        // Bytes no file system compresses away, so their blocks are allocated.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..100_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(dir.path().join("a"), &noise).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), &noise[..3000]).unwrap();
        let s = dir_size(dir.path()).unwrap();
        assert_eq!((s.files, s.apparent_bytes), (2, 103_000));
        assert!(s.allocated_bytes >= 103_000, "{s:?}");
        // Whole blocks: at most a block (64 KiB on any common file system) over per file.
        assert!(s.allocated_bytes <= 103_000 + 2 * 65_536, "{s:?}");
        // A hard link is the same file.
        #[cfg(unix)]
        {
            std::fs::hard_link(dir.path().join("a"), dir.path().join("sub/a-again")).unwrap();
            assert_eq!(dir_size(dir.path()).unwrap(), s);
        }
        // A file's length beyond what was written is a hole: in its length, not its blocks.
        let sparse = std::fs::File::create(dir.path().join("sparse")).unwrap();
        sparse.set_len(64 << 20).unwrap();
        let with_sparse = dir_size(dir.path()).unwrap();
        assert_eq!(with_sparse.apparent_bytes, s.apparent_bytes + (64 << 20));
        if cfg!(unix) {
            assert!(with_sparse.allocated_bytes < s.allocated_bytes + (1 << 20), "{with_sparse:?}");
        }
        assert!(dir_size(&dir.path().join("absent")).is_err());
    }
}
