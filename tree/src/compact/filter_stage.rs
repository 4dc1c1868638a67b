//! [`FilterStage`]: where compaction asks a keyspace's [`CompactionFilter`] about each value,
//! the one place the engine calls it, and where it drops expired values.
//!
//! It sits after [`super::newest::NewestVersions`], so it sees only the newest
//! version of each key among the compaction's inputs, with range-deleted versions already
//! dropped; it passes tombstones through unasked. An expiring value whose expiry has passed
//! is removed here as if the filter had said [`Decision::Remove`] (without asking it): a
//! tombstone takes its place where an older version may lie below. The filter sees other
//! expiring values without their expiry, and a replacement keeps the expiry. Snapshots need no check here: each holds
//! the tables it was taken from, so nothing written by a compaction is ever read by a view
//! older than it.
//!
//! A filter that fails on an entry (panics, or gives a replacement over the size limit) is
//! taken to have kept it: the entry goes on as it came, and the failure is counted, for the
//! compaction to report once it installs. Failing the compaction instead would stop the
//! database at every compaction that meets the entry, for as long as the filter fails on it;
//! a keyspace asks for that with `stop_on_compaction_filter_error`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::clock::expired;
use crate::compaction_filter::{CompactionFilter, Decision};
use crate::iter::InternalIterator;
use crate::key::{self, ValueKind, MAX_SEQNO};
use crate::tree::Tree;
use crate::{Error, Result};

/// The user's decisions applied to a compaction's stream of newest versions.
pub struct FilterStage<'a, I: InternalIterator> {
    inner: I,
    filter: Option<&'a dyn CompactionFilter>,
    /// The time expiry is judged at, milliseconds since the Unix epoch.
    now: u64,
    /// The level the compaction writes into, as the filter is told.
    level: usize,
    /// The tree as the compaction was picked: its memtables' and tables' range tombstones
    /// say which values are already deleted.
    tree: &'a Tree,
    /// True when no level below the output can hold a version of the key, so a removed
    /// value may vanish instead of leaving a tombstone.
    nothing_below: &'a (dyn Fn(&[u8]) -> bool + Sync),
    /// The entry in place of the current one when the filter rewrote it: (internal key,
    /// value).
    rewritten: Option<(Vec<u8>, Vec<u8>)>,
    /// Values the filter removed (dropped or replaced by a tombstone).
    pub removed: u64,
    /// Values the filter replaced.
    pub changed: u64,
    /// Expired values removed.
    pub expired: u64,
    /// Values the filter failed on, kept as they were.
    pub failed: u64,
    /// The first of them: its user key, and what went wrong.
    pub first_failure: Option<(Vec<u8>, String)>,
}

impl<'a, I: InternalIterator> FilterStage<'a, I> {
    pub fn new(
        inner: I,
        filter: Option<&'a dyn CompactionFilter>,
        now: u64,
        level: usize,
        tree: &'a Tree,
        nothing_below: &'a (dyn Fn(&[u8]) -> bool + Sync),
    ) -> Self {
        FilterStage {
            inner,
            filter,
            now,
            expired: 0,
            level,
            tree,
            nothing_below,
            rewritten: None,
            removed: 0,
            changed: 0,
            failed: 0,
            first_failure: None,
        }
    }

    /// Asks the filter about the current value, catching a panic. A failure is the reason;
    /// the caller decides whether the entry is kept or the compaction fails.
    fn ask(
        &self,
        filter: &dyn CompactionFilter,
        user_key: &[u8],
        value: &[u8],
    ) -> std::result::Result<Decision, String> {
        let level = self.level;
        // Unwind safety: the entry the filter panicked on is written as it came (or, when
        // the keyspace stops on filter errors, nothing of this compaction is used), and the
        // filter is the user's to keep consistent.
        let decision = catch_unwind(AssertUnwindSafe(|| filter.filter(level, user_key, value)))
            .map_err(crate::merge::panic_message)?;
        if let Decision::ChangeValue(v) = &decision {
            if v.len() > crate::MAX_VALUE_BYTES {
                return Err(format!(
                    "its replacement value of {} bytes is larger than MAX_VALUE_BYTES",
                    v.len()
                ));
            }
        }
        Ok(decision)
    }

    /// Settles on the next entry to write, from the inner stream's current one.
    fn settle(&mut self) -> Result<()> {
        self.rewritten = None;
        while self.inner.valid() {
            let Some(p) = key::parse_internal_key(self.inner.key()) else { return Ok(()) };
            let (expiry, value) = match p.kind {
                // Operands are not values: the filter sees what they combine into once a
                // compaction combines them (`merge_stage`).
                ValueKind::Delete | ValueKind::Merge | ValueKind::MergeExpiring => return Ok(()),
                // A reference stands for its value until the filter needs the value.
                ValueKind::Put | ValueKind::BlobPut => (None, self.inner.value()),
                ValueKind::PutExpiring | ValueKind::BlobPutExpiring => {
                    match key::split_expiring(self.inner.value()) {
                        Some((expiry, value)) => (Some(expiry), value),
                        None => return Ok(()),
                    }
                }
            };
            let expired = expiry.is_some_and(|e| expired(e, self.now));
            if !expired && self.filter.is_none() {
                return Ok(());
            }
            // Values a range deletion already hides are not the filter's. An expired one
            // goes all the same, so that no table keeps expired data to be picked for.
            if !expired && self.tree.range_deleted(p.user_key, p.seq, MAX_SEQNO) {
                return Ok(());
            }
            let separated;
            let value = match p.kind.is_blob() && !expired {
                // The filter sees the value, never the reference; kept, the reference is
                // written on unchanged.
                true => {
                    separated = self.tree.version.blobs.read_stored_with(value, false)?;
                    &separated[..]
                }
                false => value,
            };
            let decision = match self.filter {
                _ if expired => Decision::Remove,
                Some(filter) => match self.ask(filter, p.user_key, value) {
                    Ok(decision) => decision,
                    Err(reason) if self.tree.opts.stop_on_compaction_filter_error => {
                        let keyspace = self.tree.name.to_string();
                        return Err(Error::CompactionFilter { keyspace, reason });
                    }
                    Err(reason) => {
                        self.failed += 1;
                        self.first_failure.get_or_insert_with(|| (p.user_key.to_vec(), reason));
                        Decision::Keep
                    }
                },
                None => Decision::Keep,
            };
            match decision {
                Decision::Keep => return Ok(()),
                Decision::ChangeValue(value) => {
                    self.changed += 1;
                    let (kind, value) = match expiry {
                        Some(e) => (ValueKind::PutExpiring, key::expiring_value(e, &value)),
                        None => (ValueKind::Put, value),
                    };
                    // Inline now, whatever it was: the table writer separates it again if
                    // it is large.
                    let ikey = key::internal_key(p.user_key, p.seq, kind);
                    self.rewritten = Some((ikey, value));
                    return Ok(());
                }
                Decision::Remove => {
                    if expired {
                        self.expired += 1;
                    } else {
                        self.removed += 1;
                    }
                    if (self.nothing_below)(p.user_key) {
                        self.inner.next()?;
                        continue;
                    }
                    // At the value's own sequence number: it shadows exactly what the value
                    // did, the older versions below.
                    let tombstone = key::internal_key(p.user_key, p.seq, ValueKind::Delete);
                    self.rewritten = Some((tombstone, Vec::new()));
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

impl<I: InternalIterator> InternalIterator for FilterStage<'_, I> {
    fn valid(&self) -> bool {
        self.inner.valid()
    }
    fn key(&self) -> &[u8] {
        match &self.rewritten {
            Some((k, _)) => k,
            None => self.inner.key(),
        }
    }
    fn value(&self) -> &[u8] {
        match &self.rewritten {
            Some((_, v)) => v,
            None => self.inner.value(),
        }
    }
    fn next(&mut self) -> Result<()> {
        self.inner.next()?;
        self.settle()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.inner.seek(target)?;
        self.settle()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.inner.seek_to_first()?;
        self.settle()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::memtable::MemTable;

    /// Removes values starting with `r`, capitalises those starting with `c`, keeps the
    /// rest; records the keys it is asked about.
    #[derive(Default)]
    struct Recording(Mutex<Vec<Vec<u8>>>);

    impl CompactionFilter for Recording {
        fn filter(&self, _level: usize, key: &[u8], value: &[u8]) -> Decision {
            self.0.lock().unwrap().push(key.to_vec());
            match value.first() {
                Some(b'r') => Decision::Remove,
                Some(b'c') => Decision::ChangeValue([b"C", &value[1..]].concat()),
                _ => Decision::Keep,
            }
        }
    }

    #[test]
    fn decisions_tombstones_and_range_deleted_values() {
        let source = Arc::new(MemTable::new());
        source.insert(b"a", 5, ValueKind::Put, b"r-a");
        source.insert(b"b", 6, ValueKind::Put, b"r-b");
        source.insert(b"c", 7, ValueKind::Delete, b"");
        source.insert(b"d", 8, ValueKind::Put, b"c-d");
        source.insert(b"e", 9, ValueKind::Put, b"r-e");
        source.insert(b"f", 10, ValueKind::Put, b"v-f");
        // A range deletion outside the compaction's inputs, in the tree's memtable: the
        // inputs' own are applied before this stage, this one only here.
        let tree = Tree::empty();
        tree.mem.table.delete_range(b"b", b"c", 20);
        let filter = Recording::default();
        // An older version of "a" lies below; nothing of "e" does.
        let nothing_below = |uk: &[u8]| uk != b"a";
        let mut stage = FilterStage::new(source.iter(), Some(&filter), 0, 3, &tree, &nothing_below);
        stage.seek_to_first().unwrap();
        let mut out = Vec::new();
        while stage.valid() {
            let p = key::parse_internal_key(stage.key()).unwrap();
            out.push((p.user_key.to_vec(), p.seq, p.kind, stage.value().to_vec()));
            stage.next().unwrap();
        }
        let entry = |k: &[u8], seq, kind, v: &[u8]| (k.to_vec(), seq, kind, v.to_vec());
        assert_eq!(
            out,
            [
                // Removed over an older version: a tombstone at the value's own seq.
                entry(b"a", 5, ValueKind::Delete, b""),
                // Range-deleted: passed on unasked.
                entry(b"b", 6, ValueKind::Put, b"r-b"),
                // A tombstone: passed on unasked.
                entry(b"c", 7, ValueKind::Delete, b""),
                entry(b"d", 8, ValueKind::Put, b"C-d"),
                // "e" was removed with nothing below: gone.
                entry(b"f", 10, ValueKind::Put, b"v-f"),
            ]
        );
        assert_eq!(*filter.0.lock().unwrap(), [&b"a"[..], b"d", b"e", b"f"]);
        assert_eq!((stage.removed, stage.changed), (2, 1));
    }

    /// Panics on values starting with `p`, replaces those starting with `h` with one too
    /// large, and removes the rest.
    struct Failing;

    impl CompactionFilter for Failing {
        fn filter(&self, _level: usize, _key: &[u8], value: &[u8]) -> Decision {
            match value.first() {
                Some(b'p') => panic!("cannot judge {value:?}"),
                Some(b'h') => Decision::ChangeValue(vec![0; crate::MAX_VALUE_BYTES + 1]),
                _ => Decision::Remove,
            }
        }
    }

    #[test]
    fn values_the_filter_fails_on_go_on_as_they_came_unless_the_keyspace_stops() {
        let source = Arc::new(MemTable::new());
        let exp = key::expiring_value(500, b"p-b");
        source.insert(b"a", 5, ValueKind::Put, b"r-a");
        source.insert(b"b", 6, ValueKind::PutExpiring, &exp);
        source.insert(b"c", 7, ValueKind::Put, b"h-c");
        source.insert(b"d", 8, ValueKind::Put, b"r-d");
        let mut tree = Tree::empty();
        let nothing_below = |_: &[u8]| true;
        let filter: Option<&dyn CompactionFilter> = Some(&Failing);
        let mut stage = FilterStage::new(source.iter(), filter, 100, 2, &tree, &nothing_below);
        stage.seek_to_first().unwrap();
        let mut out = Vec::new();
        while stage.valid() {
            out.push((stage.key().to_vec(), stage.value().to_vec()));
            stage.next().unwrap();
        }
        let entry = |k: &[u8], seq, kind, v: &[u8]| (key::internal_key(k, seq, kind), v.to_vec());
        assert_eq!(
            out,
            [entry(b"b", 6, ValueKind::PutExpiring, &exp), entry(b"c", 7, ValueKind::Put, b"h-c")]
        );
        assert_eq!((stage.removed, stage.changed, stage.failed), (2, 0, 2));
        let (first, reason) = stage.first_failure.clone().unwrap();
        assert_eq!(first, b"b");
        assert!(reason.contains("it panicked: cannot judge"), "{reason}");

        tree.opts.stop_on_compaction_filter_error = true;
        let mut stage = FilterStage::new(source.iter(), filter, 100, 2, &tree, &nothing_below);
        match stage.seek_to_first() {
            Err(Error::CompactionFilter { reason, .. }) => {
                assert!(reason.contains("cannot judge"), "{reason}")
            }
            other => panic!("expected the filter's failure, got {other:?}"),
        }
    }

    #[test]
    fn expired_values_go_without_asking_and_others_keep_their_expiry() {
        let source = Arc::new(MemTable::new());
        let exp = |at: u64, v: &[u8]| key::expiring_value(at, v);
        // Expired at 100 over an older version below: a tombstone.
        source.insert(b"a", 5, ValueKind::PutExpiring, &exp(100, b"r-a"));
        // Expired, nothing below: gone.
        source.insert(b"b", 6, ValueKind::PutExpiring, &exp(99, b"k-b"));
        // Expired and range-deleted: it goes all the same.
        source.insert(b"c", 7, ValueKind::PutExpiring, &exp(50, b"k-c"));
        // Live: the filter sees the value without its expiry, a replacement keeps it.
        source.insert(b"d", 8, ValueKind::PutExpiring, &exp(101, b"c-d"));
        source.insert(b"e", 9, ValueKind::PutExpiring, &exp(500, b"r-e"));
        let tree = Tree::empty();
        tree.mem.table.delete_range(b"c", b"d", 20);
        let filter = Recording::default();
        let nothing_below = |uk: &[u8]| uk != b"a";
        for with_filter in [true, false] {
            let f: Option<&dyn CompactionFilter> = with_filter.then_some(&filter);
            let mut stage = FilterStage::new(source.iter(), f, 100, 3, &tree, &nothing_below);
            stage.seek_to_first().unwrap();
            let mut out = Vec::new();
            while stage.valid() {
                let p = key::parse_internal_key(stage.key()).unwrap();
                out.push((p.user_key.to_vec(), p.seq, p.kind, stage.value().to_vec()));
                stage.next().unwrap();
            }
            let entry = |k: &[u8], seq, kind, v: &[u8]| (k.to_vec(), seq, kind, v.to_vec());
            let mut want = vec![entry(b"a", 5, ValueKind::Delete, b"")];
            if with_filter {
                want.push(entry(b"d", 8, ValueKind::PutExpiring, &exp(101, b"C-d")));
                assert_eq!((stage.expired, stage.removed, stage.changed), (3, 1, 1));
            } else {
                want.push(entry(b"d", 8, ValueKind::PutExpiring, &exp(101, b"c-d")));
                want.push(entry(b"e", 9, ValueKind::PutExpiring, &exp(500, b"r-e")));
                assert_eq!((stage.expired, stage.removed, stage.changed), (3, 0, 0));
            }
            assert_eq!(out, want);
        }
        assert_eq!(*filter.0.lock().unwrap(), [&b"d"[..], b"e"]);
    }
}
