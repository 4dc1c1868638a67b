//! Ingest: sorted entries written straight into tables and added to the tree in one manifest
//! edit, without passing through the memtable or compaction. Writers are held only for the
//! moment it takes to reserve a sequence number; the tables are written while writes go on.
//!
//! 1. Read the first entry (an empty or at once invalid input changes nothing), and take
//!    `DbInner::ingest_order`, so ingests install in the order of their sequence numbers.
//! 2. As the write leader with no group (`write::exclusive`, a short step): register in
//!    `BgState::ingests`, so no compaction starts from here to the install (a manual one
//!    pauses between steps); log a batch holding one reserved op at `N = last + 1` and freeze
//!    the memtables (`Exclusive::reserve_seq`). The frozen memtables' segment ends at `N`;
//!    writes after the step take `N + 1` onwards in a new segment and new memtables.
//! 3. Take the compaction slot (so `close` waits for the ingest or makes it stop early, see
//!    `Source`, instead of leaving it writing into a directory this handle no longer owns).
//!    Give every entry the sequence number `N`, and write the entries into tables of about
//!    `target_table_bytes` while checking them (strictly ascending keys, sizes within the
//!    limits). On any error the tables written so far are removed.
//! 4. Wait until the memtables frozen in step 2 are flushed. Their flush records a last
//!    sequence of at least `N` and retires the segment holding the reserved op.
//! 5. Choose the deepest level whose tables, and those of every level above it, leave the
//!    entries' key range free, and install the tables there with one edit that also records
//!    `last_seq = N` (the manifest keeps the maximum: later writes may be flushed already).
//!
//! Why one sequence number: the keys are distinct, so no two entries need ordering between
//! them; one number newer than every write before the reservation and older than every write
//! after it places the whole ingest at one point of the history, as one atomic batch would be.
//!
//! Why every version of an ingested key lands on the right side of it, the reads consulting
//! memtables, then L0 in descending sequence order (`builder::lookup_order`), then the sorted levels:
//! - Writes before `N` are in tables by step 4, so no memtable holds them at the install, and
//!   writes after `N` are newer: the memtables may hold them, above the ingest.
//! - No compaction starts from step 2 to the install, so whatever writes after `N` were
//!   flushed meanwhile is still on L0, where an ingest table (every entry at `N`) sorts below tables of
//!   newer writes and above those of older ones; the sorted levels hold only writes before
//!   `N`. A compaction that ran while the ingest registered had picked its inputs before `N`
//!   existed, and the level is chosen under the compaction slot, after it installed.
//! - Ingests install one at a time in reservation order, so an ingest never finds the tables
//!   of a newer one below the level it chooses.
//!
//! Reads and snapshots: the tables become visible at the install, in one state swap. A
//! snapshot holds the state it was taken from, so one taken at a sequence number at or above
//! `N` before the install never sees the ingest.
//!
//! Failures: an ingest that fails after step 2 leaves `N` taken, holding nothing, and its
//! memtable switch done; its tables are removed.
//!
//! Crashes: before the reserved op's segment is fsynced, recovery finds the old state. After
//! it, the reserved op is replayed as a sequence number that holds nothing, until the flush
//! of step 4 retires the segment. Before the install's edit is durable the ingest's tables are orphans that
//! recovery removes; once it is, they are in the tree and the manifest's last sequence covers
//! them. A failure once the edit is under way stops the database like a failed WAL fsync (a
//! failed manifest fsync leaves it unknown whether the edit is durable).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::table_files::EntryStream;
use super::{flush, lock_mutex as lock, write, DbInner, Tree};
use crate::batch::check_entry_size;
use crate::key::{self, SeqNo, ValueKind};
use crate::range_del::TombstoneSplit;
use crate::version::edit::{KeyspaceId, TableMeta, VersionEdit};
use crate::version::set::{TableFile, Version, NUM_LEVELS};
use crate::{Error, Result};
use bloomkv_tree::filter_budget::{table_filters, Placement};

/// Ingests `entries`; returns how many there were. See the module documentation.
pub(crate) fn ingest<K, V>(
    inner: &DbInner,
    keyspace: KeyspaceId,
    name: &str,
    entries: impl Iterator<Item = Result<(K, V)>>,
) -> Result<u64>
where
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    // Before `ingest_order`: the ingest holding it may be waiting for the flush thread a
    // listener's callback runs on.
    crate::events::refuse_in_callback()?;
    // Most sources know their length (a collection, a range, a map over either): the
    // ingest's filters are sized for a run of that many keys. Zero means unknown.
    let (expected_entries, _) = entries.size_hint();
    // The sequence number is set once reserved; an empty (or at once failing) input reserves
    // none and changes nothing.
    let mut source = Source::new(entries, 0, &inner.closed);
    source.advance()?;
    if !source.valid() {
        return Ok(0);
    }
    let _order = lock(&inner.ingest_order);
    let (seq, segment, tree, registered) = write::exclusive(inner, |leader| {
        // Keyspaces are dropped only by an exclusive leader holding the compaction slot: a
        // drop after this step is found again at the install.
        let tree = inner
            .load_state()
            .tree(keyspace)
            .cloned()
            .ok_or_else(|| Error::KeyspaceDropped { name: name.to_string() })?;
        // Registered here, not before: a compaction held off while a writer ahead in the
        // queue waits for one to make room would never come.
        let registered = Registered::new(inner, keyspace, key::user_key(source.key()));
        let (seq, segment) = leader.reserve_seq()?;
        Ok((seq, segment, tree, registered))
    })?;
    source.set_seq(seq);
    let _slot = inner.slot_alone();
    let built = build(inner, keyspace, &tree, &mut source, expected_entries, segment);
    if built.is_err() {
        // The memtable switch is the one change a refused ingest makes; its flush is
        // waited for as on success, so the caller finds no flush still under way (an error
        // in it is the flush's own, reported as any failed flush is).
        let _ = flush::wait_for_flushes_through(inner, segment);
    }
    let (metas, opened, blob_metas) = built.inspect_err(|_| registered.failed())?;
    if let Some(last) = metas.last() {
        // Before the install: a commit checked from here on finds the range's true end.
        inner.ingest_log_lock().ends_at(registered.number, key::user_key(&last.largest));
    }

    let blob_bytes: u64 = blob_metas.iter().map(|m| m.file_size).sum();
    let level = choose_level(inner, keyspace, &metas);
    let mut edit = VersionEdit {
        last_seq: Some(seq),
        added: metas.iter().map(|m| (level, m.clone())).collect(),
        added_blobs: blob_metas,
        ..VersionEdit::default()
    };
    // From here on a failure stops the database. The edit may be durable even if the
    // install fails (a failed fsync says nothing about what reached the disk), so the
    // tables stay for recovery to judge: orphans it removes, or tables the edit names.
    inner.install(&mut edit, &opened, None).inspect_err(|e| inner.set_bg_error(e.clone()))?;

    let c = &inner.counters;
    c.ingests.incr();
    c.ingested_bytes.add(source.bytes);
    c.ingest_bytes_written.add(metas.iter().map(|m| m.file_size).sum());
    c.blob_bytes_written.add(blob_bytes);
    Ok(source.entries)
}

/// An ingest's tables as the manifest records them, opened, and the blob files they reference.
type Built = (Vec<TableMeta>, Vec<Arc<TableFile>>, Vec<crate::blob::BlobFileMeta>);

/// Steps 3 and 4: writes the tables, opens them and waits for the flush that retires the
/// reserved sequence number. On an error, no table is left behind.
fn build<I, K, V>(
    inner: &DbInner,
    keyspace: KeyspaceId,
    tree: &Tree,
    source: &mut Source<'_, I, K, V>,
    expected_entries: usize,
    segment: u64,
) -> Result<Built>
where
    I: Iterator<Item = Result<(K, V)>>,
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    // `close` sets `closed` before it takes the slot: if it took it first, it is gone.
    inner.check_open()?;
    let filter = {
        // The level is only chosen once the last key is known, after the tables are
        // written; their filters are sized for the level the first key alone allows, which
        // is that level unless the entries straddle tables of a level above it.
        let first = key::user_key(source.key());
        let state = inner.load_state();
        let version = state.tree(keyspace).map_or(&tree.version, |t| &t.version);
        let level = match tree.opts.compaction_style.is_fifo() {
            true => 0,
            false => deepest_free_level(version, first, first),
        };
        let placement = Placement { level, keys: expected_entries as u64, replaces: &[] };
        table_filters(&tree.opts, version, &placement)
    };
    let mut blobs = inner.separator(tree);
    let written =
        inner.write_tables(tree, source, &mut TombstoneSplit::default(), filter, &mut blobs);
    let metas = match written {
        Ok(metas) => metas,
        Err(e) => {
            blobs.abandon();
            return Err(e);
        }
    };
    let blob_metas = match blobs.finish() {
        Ok(b) => b,
        Err(e) => {
            inner.remove_tables(&metas);
            return Err(e);
        }
    };
    let opened = (|| {
        inner.fs.sync_dir(&inner.dir)?;
        let new_blobs = inner.open_blob_files(&blob_metas);
        let lookup = super::table_files::blobs_in([], &new_blobs);
        let opened = metas
            .iter()
            .map(|m| inner.open_table(m.clone(), &lookup))
            .collect::<Result<Vec<_>>>()?;
        flush::wait_for_flushes_through(inner, segment)?;
        // Whatever stopped the database while the tables were written (a failed
        // compaction may have left the manifest unwritable) stops the ingest too.
        inner.check_open()?;
        inner.check_bg_error()?;
        // Dropped meanwhile (under the compaction slot, which this holds now): its tables
        // would name a keyspace the manifest no longer has.
        if inner.load_state().tree(keyspace).is_none() {
            return Err(Error::KeyspaceDropped { name: tree.name.to_string() });
        }
        Ok(opened)
    })()
    .inspect_err(|_| {
        inner.remove_tables(&metas);
        inner.remove_blob_files(&blob_metas);
    })?;
    Ok((metas, opened, blob_metas))
}

/// An ingest's registration in `BgState::ingests`, from before it reserves its sequence
/// number until it installs or fails: no compaction starts meanwhile. Also its record in
/// `DbInner::ingest_log`, for transactions' commits, made by the exclusive write leader so
/// that every commit validated after the reservation finds it.
struct Registered<'a> {
    inner: &'a DbInner,
    /// Its number in `ingests_begun`'s count.
    number: u64,
}

impl<'a> Registered<'a> {
    fn new(inner: &'a DbInner, keyspace: KeyspaceId, first: &[u8]) -> Self {
        lock(&inner.bg).ingests += 1;
        let number = inner.ingests_begun.fetch_add(1, Ordering::SeqCst) + 1;
        inner.ingest_log_lock().begin(number, keyspace, first);
        Registered { inner, number }
    }

    /// The ingest installs nothing: no commit need fear its range.
    fn failed(&self) {
        self.inner.ingest_log_lock().failed(self.number);
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        // After the install: a transaction that sees the count see its tables too.
        self.inner.ingests_done.fetch_add(1, Ordering::SeqCst);
        let mut bg = lock(&self.inner.bg);
        bg.ingests -= 1;
        // Compactions held off, and a manual compaction waiting to start, go on.
        self.inner.bg_cv.notify_all();
        self.inner.bg_done_cv.notify_all();
    }
}

/// The deepest level `L` such that no table on levels `0..=L` overlaps the key range of
/// `metas` (L0 when L0 overlaps it). Nothing above the tables there is older than the
/// ingest, and a sorted level only receives tables that fit between its own.
fn choose_level(inner: &DbInner, keyspace: KeyspaceId, metas: &[TableMeta]) -> usize {
    let (Some(first), Some(last)) = (metas.first(), metas.last()) else { return 0 };
    let (lo, hi) = (key::user_key(&first.smallest), key::user_key(&last.largest));
    let state = inner.load_state();
    state.tree(keyspace).map_or(0, |t| ingest_level(t, lo, hi))
}

/// The level for an ingest into `tree` of `[lo, hi]`: [`deepest_free_level`], or L0 for a
/// FIFO keyspace, whose L0 holds its tables in the order they are dropped (a sorted level's
/// go first, as older).
fn ingest_level(tree: &super::Tree, lo: &[u8], hi: &[u8]) -> usize {
    match tree.opts.compaction_style.is_fifo() {
        true => 0,
        false => deepest_free_level(&tree.version, lo, hi),
    }
}

/// The deepest level `L` such that no table on levels `0..=L` overlaps `[lo, hi]`; 0 if L0
/// does.
fn deepest_free_level(version: &Version, lo: &[u8], hi: &[u8]) -> usize {
    let free = |level: usize| version.overlapping(level, lo, hi).is_empty();
    (0..NUM_LEVELS).take_while(|&level| free(level)).last().unwrap_or(0)
}

/// How many entries go by between two looks at `closed`.
const CLOSED_CHECK_EVERY: u64 = 4096;

/// The caller's entries as a stream of internal keys at one sequence number, checked one by
/// one: sizes within the limits, keys strictly ascending. (The table builder refuses keys out
/// of order too, but only within one table: a key below the previous one that starts the
/// next table would make a sorted level's tables overlap.)
struct Source<'a, I, K, V> {
    input: I,
    /// `DbInner::closed`: a long ingest stops soon after `close` begins.
    closed: &'a AtomicBool,
    seq: SeqNo,
    current: Option<(K, V)>,
    /// The current entry's internal key; its user-key part is what the next key must exceed.
    key: Vec<u8>,
    /// Entries, and their key + value bytes, accepted so far.
    entries: u64,
    bytes: u64,
}

impl<'a, I, K, V> Source<'a, I, K, V>
where
    I: Iterator<Item = Result<(K, V)>>,
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    fn new(input: I, seq: SeqNo, closed: &'a AtomicBool) -> Self {
        Source { input, closed, seq, current: None, key: Vec::new(), entries: 0, bytes: 0 }
    }

    /// Gives the current entry and every later one the sequence number `seq`.
    fn set_seq(&mut self, seq: SeqNo) {
        self.seq = seq;
        if self.current.is_some() {
            let user_key_len = self.key.len() - key::TRAILER_LEN;
            let user_key = self.key[..user_key_len].to_vec();
            self.key.clear();
            key::append_internal_key(&mut self.key, &user_key, seq, ValueKind::Put);
        }
    }

    /// Moves to the caller's next entry, checking it.
    fn advance(&mut self) -> Result<()> {
        // Invalid until the next entry passes its checks.
        self.current = None;
        if self.entries % CLOSED_CHECK_EVERY == CLOSED_CHECK_EVERY - 1
            && self.closed.load(Ordering::Acquire)
        {
            return Err(Error::Closed);
        }
        let Some(item) = self.input.next() else { return Ok(()) };
        let (k, v) = item?;
        let (uk, value) = (k.as_ref(), v.as_ref());
        check_entry_size(uk, value)?;
        if self.entries > 0 {
            let previous = &self.key[..self.key.len() - key::TRAILER_LEN];
            if uk <= previous {
                return Err(Error::InvalidArgument(format!(
                    "ingest: keys must be strictly ascending, but entry {} ({}) {} the one \
                     before it",
                    self.entries + 1,
                    shown(uk),
                    if uk == previous { "repeats" } else { "sorts before" }
                )));
            }
        }
        self.key.clear();
        key::append_internal_key(&mut self.key, uk, self.seq, ValueKind::Put);
        self.entries += 1;
        self.bytes += (uk.len() + value.len()) as u64;
        self.current = Some((k, v));
        Ok(())
    }
}

impl<I, K, V> EntryStream for Source<'_, I, K, V>
where
    I: Iterator<Item = Result<(K, V)>>,
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn value(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |(_, v)| v.as_ref())
    }
    fn next(&mut self) -> Result<()> {
        self.advance()
    }
}

/// A key for an error message: escaped, and cut after 40 bytes.
fn shown(key: &[u8]) -> String {
    let cut = &key[..key.len().min(40)];
    let more = if key.len() > cut.len() { "..." } else { "" };
    format!("\"{}\"{more}", cut.escape_ascii())
}
