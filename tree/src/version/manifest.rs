//! The manifest on disk: reading it back on open (`CURRENT` → `MANIFEST-n` → the replayed
//! edits, each applied by `super::builder`, then the whole checked for consistency) and
//! starting a new one. Appending edits to the live
//! manifest is [`super::set::VersionSet`]'s job; the record framing is `crate::log`'s and
//! the edit encoding `super::edit`'s (both described in docs/format/).

use std::path::Path;

use crate::filename::{self, current_path, manifest_path};
use crate::fs::FileSystem;
use crate::key::{self, SeqNo};
use crate::log::{LogReader, LogWriter};
use crate::version::builder::{Counters, Keyspace, VersionBuilder};
use crate::version::edit::{KeyspaceId, TableMeta, VersionEdit};
use crate::version::set::l0_newest_first;
use crate::{Error, Result};

/// One keyspace as recovery found it in the manifest: its definition (the default
/// keyspace's are placeholders: it takes its options from `Options` at each open) and its
/// tables, per level.
pub type RecoveredKeyspace = Keyspace<TableMeta>;

/// Two L0 tables, in L0's order ([`l0_newest_first`]), that overlap by user key while the
/// first does not hold only entries newer than the other's. Lookups ask L0 tables in that
/// order and stop at the first version found, so such a pair would answer with an older
/// version. The engine writes L0 tables only by flushing memtables oldest first, each
/// holding writes newer than every table before, and by ingesting, at one sequence number
/// no flushed table straddles (see `db::ingest`). Quadratic in L0's tables, which are few.
fn l0_out_of_order(tables: &[TableMeta]) -> Option<(&TableMeta, &TableMeta)> {
    let mut ordered: Vec<&TableMeta> = tables.iter().collect();
    ordered.sort_by(|a, b| l0_newest_first(a, b));
    fn range(t: &TableMeta) -> (&[u8], &[u8]) {
        (key::user_key(&t.smallest), key::user_key(&t.largest))
    }
    ordered.iter().enumerate().find_map(|(i, &newer)| {
        let (lo, hi) = range(newer);
        ordered[i + 1..].iter().find_map(|&older| {
            let (olo, ohi) = range(older);
            (lo <= ohi && olo <= hi && newer.smallest_seq <= older.largest_seq)
                .then_some((newer, older))
        })
    })
}

/// Two tables of one sorted level (≥ 1) whose user-key ranges meet, if any. A point lookup
/// asks one table per sorted level: the first whose largest key is at or above the key. If a
/// neighbour began at that largest key, its entry for that key would never be asked for —
/// and the engine never writes such a level: a table's range (its range tombstones
/// included) ends before the next table's begins, and every compaction and ingest takes in
/// the tables whose ranges merely touch its own. So sharing a bounding key is an overlap too.
pub fn sorted_level_overlap(tables: &[TableMeta]) -> Option<(&TableMeta, &TableMeta)> {
    let mut sorted: Vec<&TableMeta> = tables.iter().collect();
    sorted.sort_by(|a, b| key::compare_internal(&a.smallest, &b.smallest));
    sorted
        .windows(2)
        .find(|w| key::user_key(&w[0].largest) >= key::user_key(&w[1].smallest))
        .map(|w| (w[0], w[1]))
}

/// What recovery found in the manifest.
#[derive(Debug)]
pub struct RecoveredManifest {
    /// The live keyspaces, by id; the default keyspace first.
    pub keyspaces: Vec<RecoveredKeyspace>,
    /// The id the next keyspace created gets: every id below it that is not live was
    /// dropped.
    pub next_keyspace_id: KeyspaceId,
    /// WALs numbered at or above this hold data not yet in tables.
    pub log_number: u64,
    /// The next unused file number.
    pub next_file_number: u64,
    /// The last sequence number recorded.
    pub last_seq: SeqNo,
    /// The highest clock high-water mark recorded (0 if none was).
    pub clock_mark: u64,
    /// Number of the manifest that was read.
    pub manifest_number: u64,
    /// Bytes of intact records: the file length, less any torn tail.
    pub valid_len: u64,
    /// True if the last record was damaged or cut short and so ignored as a torn append.
    /// Recovery must then confirm, from what the edit would have retired, that nothing it
    /// recorded is lost (see `db/recovery.rs`).
    pub torn_tail: bool,
    /// For each live table, the offset of the edit that added it (for errors).
    pub added_at: std::collections::HashMap<u64, u64>,
    /// The live blob files, by number: those added and not dropped.
    pub blob_files: std::collections::BTreeMap<u64, crate::blob::BlobFileMeta>,
}

/// The number of the manifest `CURRENT` names.
pub fn read_current(fs: &dyn FileSystem, dir: &Path) -> Result<u64> {
    let current = current_path(dir);
    let text = fs.read_all(&current)?;
    let name = std::str::from_utf8(&text)
        .ok()
        .and_then(|s| s.strip_suffix('\n'))
        .filter(|s| !s.is_empty() && !s.contains('/') && !s.contains('\n'))
        .ok_or_else(|| Error::corruption(&current, 0, "CURRENT does not name a manifest"))?;
    match filename::parse(name) {
        Some(filename::FileKind::Manifest(n)) => Ok(n),
        _ => Err(Error::corruption(&current, 0, format!("CURRENT names {name:?}"))),
    }
}

/// Reads the manifest named by `CURRENT` and folds its edits into the live set of tables.
pub fn read_manifest(fs: &dyn FileSystem, dir: &Path) -> Result<RecoveredManifest> {
    let manifest_number = read_current(fs, dir)?;
    let path = manifest_path(dir, manifest_number);
    let data = fs.read_all(&path)?;
    let len = data.len() as u64;
    let mut reader = LogReader::new(path.clone(), data);
    let mut builder = VersionBuilder::<TableMeta>::new();
    let mut records = 0;
    let mut added_at = std::collections::HashMap::new();
    while let Some(record) = reader.next_record()? {
        let offset = reader.last_record_offset();
        let edit = VersionEdit::decode(&record).map_err(|e| e.in_file(&path, offset))?;
        records += 1;
        builder.apply(&edit, |meta| Some(meta.clone())).map_err(|e| e.in_file(&path, offset))?;
        for (_, meta) in &edit.added {
            added_at.insert(meta.number, offset);
        }
    }
    let (keyspaces, counters, blob_files) = builder.into_parts();
    let Counters {
        log_number,
        next_file_number: next_file,
        last_seq,
        next_keyspace_id,
        clock_mark,
    } = counters;
    let missing = |what| Error::corruption(&path, 0, format!("manifest has no {what}"));
    if records == 0 {
        return Err(missing("records"));
    }
    let next_file_number = next_file.ok_or_else(|| missing("next file number"))?;
    let max_used =
        keyspaces.values().flat_map(|k| k.levels.iter().flatten()).map(|t| t.number).max();
    let max_used = max_used.unwrap_or(0).max(blob_files.keys().last().copied().unwrap_or(0));
    // Every reference a table records names a live blob file, and no file is referenced for
    // more than it holds: live bytes are derived from these, so they must add up.
    let mut referenced: std::collections::BTreeMap<u64, u64> = Default::default();
    for t in keyspaces.values().flat_map(|k| k.levels.iter().flatten()) {
        for r in &t.blob_refs {
            if !blob_files.contains_key(&r.file) {
                return Err(Error::corruption(
                    &path,
                    added_at.get(&t.number).copied().unwrap_or(0),
                    format!(
                        "table {} references blob file {}, which is not live",
                        t.number, r.file
                    ),
                ));
            }
            *referenced.entry(r.file).or_default() += r.bytes;
        }
    }
    if let Some((n, bytes)) =
        referenced.iter().find(|(n, bytes)| **bytes > blob_files[*n].value_bytes)
    {
        return Err(Error::corruption(
            &path,
            0,
            format!(
                "tables reference {bytes} bytes of blob file {n}, which holds {}",
                blob_files[n].value_bytes
            ),
        ));
    }
    if max_used >= next_file_number || manifest_number >= next_file_number {
        return Err(Error::corruption(&path, 0, "a file number is not below the next file number"));
    }
    for k in keyspaces.values() {
        for (level, tables) in k.levels.iter().enumerate() {
            let at = |ts: &[&TableMeta]| {
                ts.iter().map(|t| added_at.get(&t.number).copied().unwrap_or(0)).max().unwrap_or(0)
            };
            if let Some(t) =
                tables.iter().find(|t| key::user_key(&t.smallest) > key::user_key(&t.largest))
            {
                return Err(Error::corruption(
                    &path,
                    at(&[t]),
                    format!(
                        "table {} on level {level} of keyspace {}: smallest key above largest key",
                        t.number, k.def.id
                    ),
                ));
            }
            if level == 0 {
                if let Some((newer, older)) = l0_out_of_order(tables) {
                    return Err(Error::corruption(
                        &path,
                        at(&[newer, older]),
                        format!(
                            "L0 tables {} and {} of keyspace {} overlap, and the first, which \
                             lookups ask first, does not hold only newer entries",
                            newer.number, older.number, k.def.id
                        ),
                    ));
                }
                continue;
            }
            if let Some((a, b)) = sorted_level_overlap(tables) {
                return Err(Error::corruption(
                    &path,
                    at(&[a, b]),
                    format!(
                        "tables {} and {} overlap on level {level} of keyspace {}",
                        a.number, b.number, k.def.id
                    ),
                ));
            }
        }
    }
    let last_seq = last_seq.ok_or_else(|| missing("last sequence"))?;
    // Every edit that adds a table records a last sequence at least the table's newest, so a
    // table beyond it means a damaged manifest; opened, its newer entries would be invisible.
    if let Some(t) = keyspaces
        .values()
        .flat_map(|k| k.levels.iter().flatten())
        .find(|t| t.largest_seq > last_seq)
    {
        return Err(Error::corruption(
            &path,
            added_at.get(&t.number).copied().unwrap_or(0),
            format!(
                "table {} holds sequence {} beyond the manifest's last sequence {last_seq}",
                t.number, t.largest_seq
            ),
        ));
    }
    Ok(RecoveredManifest {
        keyspaces: keyspaces.into_values().collect(),
        next_keyspace_id,
        log_number: log_number.ok_or_else(|| missing("log number"))?,
        next_file_number,
        last_seq,
        clock_mark,
        manifest_number,
        valid_len: len - reader.dropped_tail_bytes(),
        torn_tail: reader.dropped_tail_bytes() > 0,
        added_at,
        blob_files,
    })
}

/// Writes manifest `number` in `dir` with `edit` (which must describe the whole tree: every
/// table, the log number, next file number and last sequence number) as its first record,
/// fsynced. CURRENT is left alone: pointing it at the new manifest is the caller's commit.
pub fn create_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    edit: &VersionEdit,
) -> Result<LogWriter> {
    let mut writer = LogWriter::new(fs.create(&manifest_path(dir, number))?);
    writer.add_record(&edit.encode())?;
    writer.sync()?;
    Ok(writer)
}

/// Points CURRENT at manifest `number`, atomically.
pub fn set_current(fs: &dyn FileSystem, dir: &Path, number: u64) -> Result<()> {
    replace_current(fs, dir, number)?;
    fs.sync_dir(dir)
}

/// Renames a new CURRENT naming manifest `number` over the old one, not yet durable: until
/// the directory is fsynced, a power loss may bring back the old CURRENT. On failure CURRENT
/// is as it was, and no `CURRENT.tmp` is left behind.
pub fn replace_current(fs: &dyn FileSystem, dir: &Path, number: u64) -> Result<()> {
    let tmp = dir.join("CURRENT.tmp");
    let replaced = (|| {
        let mut f = fs.create(&tmp)?;
        f.append(format!("MANIFEST-{number:06}\n").as_bytes())?;
        f.sync()?;
        drop(f);
        fs.rename(&tmp, &current_path(dir))
    })();
    if replaced.is_err() {
        let _ = fs.remove(&tmp);
    }
    replaced
}
