//! Ingest: sorted entries written straight into tables and added to the tree in one manifest
//! edit, without passing through the WAL, the memtable or compaction.
//!
//! 1. Become the write leader with no group (`write::exclusive`): writes queued behind wait,
//!    reads and background work go on.
//! 2. Flush every memtable and wait for it (`Exclusive::flush_memtables`). Afterwards the
//!    memtable is empty and the current WAL segment holds only its header, so the tables
//!    alone hold everything written so far.
//! 3. Take the compaction slot. Give every entry the one sequence number `N = last + 1`, and
//!    write the entries into tables of about `target_table_bytes` while checking them
//!    (strictly ascending keys, sizes within the limits). On any error the tables written so
//!    far are removed.
//! 4. Choose the deepest level whose tables, and those of every level above it, leave the
//!    entries' key range free, and install the tables there with one edit that also records
//!    `last_seq = N` and, as the log number, a freshly reserved WAL segment number `W`.
//! 5. Start segment `W` with the header `N + 1`, make it the WAL, and delete the old segment.
//!
//! Why one sequence number: the keys are distinct, so no two entries need ordering between
//! them; one number newer than every write before and older than every write after places the
//! whole ingest at one point of the history, as one atomic batch would be.
//!
//! Why flush first: the ingested entries are newer than everything written before, so they
//! must sit above every older version of their keys — and the read path consults memtables
//! before any table. With the memtable empty, choosing a level above every overlapping table
//! is enough.
//!
//! Crashes: before the edit is durable, the manifest still says `last_seq = N − 1` and names
//! the old segment as the log, whose header says `N`: recovery finds the old state and
//! removes the new tables as orphans. Once the edit is durable, recovery ignores the old
//! segment (below the log number) and finds either no segment at or above `W`, and starts at
//! `N + 1`, or `W`, whose header says `N + 1`: the new state either way. A failure once the
//! edit is under way stops the database like a failed WAL fsync (a failed manifest fsync
//! leaves it unknown whether the edit is durable): no write may then go to a segment recovery
//! would ignore, or take a sequence number the manifest may already hold.

use std::sync::atomic::{AtomicBool, Ordering};

use super::filter_budget::{table_filter, Placement};
use super::table_files::EntryStream;
use super::{lock_mutex as lock, write, DbInner};
use crate::batch::check_entry_size;
use crate::key::{self, SeqNo, ValueKind};
use crate::range_del::TombstoneSplit;
use crate::version::edit::{KeyspaceId, TableMeta, VersionEdit};
use crate::version::set::{Version, NUM_LEVELS};
use crate::{Error, Result};

/// Ingests `entries`; returns how many there were. See the module documentation.
pub(crate) fn ingest<K, V>(
    inner: &DbInner,
    keyspace: KeyspaceId,
    entries: impl Iterator<Item = Result<(K, V)>>,
) -> Result<u64>
where
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    // Most sources know their length (a collection, a range, a map over either): the
    // ingest's filters are sized for a run of that many keys. Zero means unknown.
    let (expected_entries, _) = entries.size_hint();
    write::exclusive(inner, |leader| {
        let seq = leader.last_seq() + 1;
        let mut source = Source::new(entries, seq, &inner.closed);
        // An empty (or at once failing) input changes nothing, not even the memtable.
        source.advance()?;
        if !source.valid() {
            return Ok(0);
        }
        leader.flush_memtables()?;
        // Held from the first table to the new WAL segment: a compaction must not move data
        // into the entries' range between the choice of level and the install, and `close`,
        // which takes the slot before it releases the LOCK, waits for the ingest (or makes it
        // stop early, see `Source`) instead of leaving it writing into a directory this handle
        // no longer owns.
        let _slot = lock(&inner.compaction_slot);
        // Keyspaces are dropped only by an exclusive leader, as this is: the tree stays.
        let tree = inner
            .load_state()
            .tree(keyspace)
            .cloned()
            .ok_or_else(|| Error::KeyspaceDropped { name: format!("with id {keyspace}") })?;
        let filter = {
            // The level is only chosen once the last key is known, after the tables are
            // written; their filters are sized for the level the first key alone allows,
            // which is that level unless the entries straddle tables of a level above it.
            let first = key::user_key(source.key());
            let level = deepest_free_level(&tree.version, first, first);
            let placement = Placement { level, keys: expected_entries as u64, replaces: &[] };
            table_filter(tree.opts.filter_policy, &tree.version, &placement)
        };
        let metas =
            inner.write_tables(&tree, &mut source, &mut TombstoneSplit::default(), filter)?;
        let opened = (|| {
            inner.fs.sync_dir(&inner.dir)?;
            let opened =
                metas.iter().map(|m| inner.open_table(m.clone())).collect::<Result<Vec<_>>>()?;
            // Whatever stopped the database while the tables were written (a failed
            // compaction may have left the manifest unwritable) stops the ingest too.
            inner.check_open()?;
            inner.check_bg_error()?;
            Ok(opened)
        })()
        .inspect_err(|_| inner.remove_tables(&metas))?;

        let wal_number = inner.file_numbers.fetch_add(1, Ordering::SeqCst);
        let level = choose_level(inner, keyspace, &metas);
        let mut edit = VersionEdit {
            log_number: Some(wal_number),
            last_seq: Some(seq),
            added: metas.iter().map(|m| (level, m.clone())).collect(),
            ..VersionEdit::default()
        };
        // From here on a failure stops the database. The edit may be durable even if the
        // install fails (a failed fsync says nothing about what reached the disk), so the
        // tables stay for recovery to judge: orphans it removes, or tables the edit names.
        inner.install(&mut edit, &opened, None).inspect_err(|e| inner.set_bg_error(e.clone()))?;
        leader.restart_wal(wal_number, seq).inspect_err(|e| inner.set_bg_error(e.clone()))?;

        let c = &inner.counters;
        c.ingests.incr();
        c.ingested_bytes.add(source.bytes);
        c.ingest_bytes_written.add(metas.iter().map(|m| m.file_size).sum());
        Ok(source.entries)
    })
}

/// The deepest level `L` such that no table on levels `0..=L` overlaps the key range of
/// `metas` (L0 when L0 overlaps it). Nothing above the tables there is older than the
/// ingest, and a sorted level only receives tables that fit between its own.
fn choose_level(inner: &DbInner, keyspace: KeyspaceId, metas: &[TableMeta]) -> usize {
    let (Some(first), Some(last)) = (metas.first(), metas.last()) else { return 0 };
    let (lo, hi) = (key::user_key(&first.smallest), key::user_key(&last.largest));
    let state = inner.load_state();
    state.tree(keyspace).map_or(0, |t| deepest_free_level(&t.version, lo, hi))
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
