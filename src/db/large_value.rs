//! Values over `MAX_VALUE_BYTES`, put into a keyspace that separates values: written straight
//! to a blob file of their own, never into a batch, the WAL or a memtable.
//!
//! 1. The value is appended to a new `NNNNNN.blob` from the caller's slice, fragment by
//!    fragment (no copy of it is made), and the file and the directory are synced.
//! 2. The file is staged (`DbInner::staged_blobs`), and a put of its reference is written as
//!    any put is: logged, then applied, where the memtable takes the file from the stage and
//!    holds it for its entry (`MemTable::hold_blob`), so every reader that can see the entry
//!    can read the value.
//! 3. The memtable's flush adopts the file (the manifest edit adding the table that
//!    references it adds it, tag 15); a file no table references after all (overwritten in
//!    the same memtable) goes with the memtable.
//!
//! Crashes: before the record is logged, the file is one no manifest and no record names,
//! which the next open removes with the other orphans; after, the record is replayed and
//! adopts it (recovery checks it is there, long enough for the reference). The file is
//! synced before the record is logged, so a record that survives finds its value. A write
//! that fails after the file was written removes it at once, unless the WAL could not cut
//! its refused record back off: then the next open may replay the record, and removes or
//! adopts the file as after a crash.

use std::sync::atomic::Ordering;

use super::{lock_mutex as lock, DbInner};
use crate::blob::BlobWriter;
use crate::filename::blob_path;
use crate::version::edit::KeyspaceId;
use crate::{Error, Result, MAX_KEY_BYTES, MAX_LARGE_VALUE_BYTES};

/// Puts `key → value`, a value over `MAX_VALUE_BYTES`, into `keyspace` (whose existence
/// `live` checks, after the arguments are).
pub(crate) fn put(
    inner: &DbInner,
    keyspace: KeyspaceId,
    key: &[u8],
    value: &[u8],
    live: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::KeyTooLarge { len: key.len() });
    }
    let too_large = Error::ValueTooLarge { len: value.len() };
    if value.len() as u64 > MAX_LARGE_VALUE_BYTES {
        return Err(too_large);
    }
    live()?;
    // A stopped database would refuse the record: no point writing the file first.
    inner.check_bg_error()?;
    {
        // Only a keyspace separating values reads references, and a time to live would
        // need an expiry beside the reference, which a plain put does not carry.
        let state = inner.state.load();
        let separates = state
            .tree(keyspace)
            .is_some_and(|t| t.opts.blob_threshold.is_some() && t.opts.default_ttl.is_none());
        if !separates {
            return Err(too_large);
        }
    }
    let number = inner.file_numbers.fetch_add(1, Ordering::SeqCst);
    let path = blob_path(&inner.dir, number);
    let written = (|| {
        let mut writer = BlobWriter::new(inner.fs.create(&path)?, number)?;
        let reference = writer.add(key, value)?;
        let meta = writer.finish()?;
        // A record that survives a power loss must find the file.
        inner.fs.sync_dir(&inner.dir)?;
        Ok((reference, meta))
    })();
    let (reference, meta) = match written {
        Ok(w) => w,
        Err(e) => {
            let _ = inner.fs.remove(&path);
            return Err(e);
        }
    };
    inner.counters.blob_bytes_written.add(meta.file_size);
    let file = super::table_files::blob_file(&inner.dir, &inner.caches, meta);
    lock(&inner.staged_blobs).insert(number, file);
    let encoded = reference.encode();
    let result = super::write::write(inner, inner.opts.sync_writes, false, |b| {
        b.put_blob_ref_to(keyspace, key, &encoded)
    });
    // Held by the memtable now if the put was applied.
    lock(&inner.staged_blobs).remove(&number);
    if result.is_err() && !refused_record_may_remain(inner) {
        // Refused: nothing will ever reference the file, and a database resumed rather
        // than reopened would otherwise keep it (16 MiB or more) until its next open.
        let _ = inner.fs.remove(&path);
    }
    result
}

/// Whether a record the WAL refused may still be in its segment, for the next open to
/// replay: its cut back off failed, and is retried by a resume.
fn refused_record_may_remain(inner: &DbInner) -> bool {
    lock(&inner.wal).writer.as_ref().is_some_and(|w| w.cut_pending())
}
