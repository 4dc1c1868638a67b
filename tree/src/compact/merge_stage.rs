//! [`MergeStage`]: where flushes and compactions combine a key's merge operands with the
//! keyspace's [`crate::merge::MergeOperator`] (through `merge::Merger`, which catches its panics).
//!
//! It sits after [`super::newest::NewestVersions`], which hands it each key's
//! operands together with the put or tombstone beneath them, and before the
//! [`super::filter_stage::FilterStage`], so a compaction filter sees what
//! operands combine into, never the operands. Per key whose newest version is an operand:
//!
//! - over a put, a tombstone or an expired value, or with nothing beneath where no level
//!   below the output can hold the key: one put of the full merge, at the newest operand's
//!   sequence number (it shadows what the operands did);
//! - over an expiring value that has not expired: the operands stay over it, since their
//!   result must change when it expires (their partial merge where the operator offers
//!   one), and the value is kept;
//! - otherwise (older versions may lie below): one operand, the partial merge, where the
//!   operator offers it; else the operands unchanged.
//!
//! Operands stamped with an expiry (`ValueKind::MergeExpiring`) are judged newest first by
//! `key::MergeClock`, as reads judge them: a key whose newest operand expired becomes a
//! tombstone (or nothing where nothing lies below); a version no longer live when the next
//! newer stamped operand was written ends the key's history there; the full merge under a
//! stamped newest operand is an expiring put with that operand's expiry, and their partial
//! merge a stamped operand. A stamped operand under plain ones only is judged at the
//! compaction's time, so such operands stay as they are.
//!
//! An operator error or panic, or no operator, keeps the entries as they are: reads report
//! the failure ([`crate::Error::Merge`]) and nothing is lost. Snapshots need no check here
//! (only versions no reader can tell apart are combined): each view holds the tables and
//! memtables it was taken from, so nothing a flush or compaction writes is read by a view
//! older than it, and every newer view reads at or above every operand combined.

use std::collections::VecDeque;

use crate::blob::BlobFiles;
use crate::clock::expired;
use crate::iter::InternalIterator;
use crate::key::{self, MergeClock, ValueKind};
use crate::merge::Merger;
use crate::Result;

/// A flush's or compaction's stream of kept versions with each key's operands combined as
/// far as they can be. See the module documentation.
pub struct MergeStage<'a, I: InternalIterator> {
    inner: I,
    merger: Merger,
    /// The time expiry is judged at, milliseconds since the Unix epoch.
    now: u64,
    /// True when no level below the output can hold a version of the key.
    nothing_below: &'a (dyn Fn(&[u8]) -> bool + Sync),
    /// The entries written in place of the current key's (internal key, value); empty when
    /// the current entry is `inner`'s.
    out: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// The blob files of the inputs' references, for a value beneath operands.
    blobs: BlobFiles,
}

impl<'a, I: InternalIterator> MergeStage<'a, I> {
    pub fn new(
        inner: I,
        merger: Merger,
        now: u64,
        nothing_below: &'a (dyn Fn(&[u8]) -> bool + Sync),
    ) -> Self {
        MergeStage {
            inner,
            merger,
            now,
            nothing_below,
            out: VecDeque::new(),
            blobs: BlobFiles::default(),
        }
    }

    /// The same stage, reading a separated value beneath operands from `blobs`.
    pub fn with_blobs(mut self, blobs: BlobFiles) -> Self {
        self.blobs = blobs;
        self
    }

    /// From `inner`'s current entry: passes it through, or takes the key's operands and
    /// what lies beneath them and queues what replaces them.
    fn settle(&mut self) -> Result<()> {
        if !self.out.is_empty() || !self.inner.valid() || self.merger.op.is_none() {
            return Ok(());
        }
        let Some(first) = key::parse_internal_key(self.inner.key()) else { return Ok(()) };
        if !first.kind.is_operand() {
            return Ok(());
        }
        let (user_key, newest_seq, first_kind) = (first.user_key.to_vec(), first.seq, first.kind);
        // As they came, newest first: (internal key, value).
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        while self.inner.valid() {
            let Some(p) = key::parse_internal_key(self.inner.key()) else { break };
            if p.user_key != user_key.as_slice() {
                break;
            }
            let operand = p.kind.is_operand();
            let entry = match p.kind {
                // The operands need the value beneath: it goes on inline (the table writer
                // separates it again if it stays large).
                ValueKind::BlobPut | ValueKind::BlobPutExpiring => {
                    let stored = self.inner.value();
                    let (kind, value) = match p.kind {
                        ValueKind::BlobPut => {
                            (ValueKind::Put, self.blobs.read_stored_with(stored, false)?.to_vec())
                        }
                        _ => {
                            let (expiry, r) = key::split_expiring(stored).unwrap_or((0, &[]));
                            let value = self.blobs.read_stored_with(r, false)?;
                            (ValueKind::PutExpiring, key::expiring_value(expiry, &value))
                        }
                    };
                    (key::internal_key(p.user_key, p.seq, kind), value)
                }
                _ => (self.inner.key().to_vec(), self.inner.value().to_vec()),
            };
            self.inner.next()?;
            entries.push(entry);
            if !operand {
                break;
            }
        }
        // The newest operand's expiry, if stamped: the key's, whatever lies beneath.
        let top_expiry = match first_kind {
            ValueKind::MergeExpiring => entries.first().and_then(|e| key::split_expiring(&e.1)),
            _ => None,
        }
        .map(|(expiry, _)| expiry);
        if top_expiry.is_some_and(|e| expired(e, self.now)) {
            if !(self.nothing_below)(&user_key) {
                let tombstone = key::internal_key(&user_key, newest_seq, ValueKind::Delete);
                self.out.push_back((tombstone, Vec::new()));
            }
            return Ok(());
        }
        // The versions judged newest first (`MergeClock`): the operands that take part, and
        // what they combine onto when that is known here.
        let mut clock = MergeClock::new(self.now);
        let mut operands: Vec<&[u8]> = Vec::new();
        let mut under: Option<Option<&[u8]>> = None;
        // A history cut by an expired operand: what lies beneath must stay hidden.
        let mut cut = false;
        for (i, (ikey, stored)) in entries.iter().enumerate() {
            let Some(p) = key::parse_internal_key(ikey) else { break };
            match p.kind {
                ValueKind::Merge | ValueKind::MergeExpiring => {
                    let judged_at_now = !clock.fixed;
                    match clock.operand(p.kind, stored) {
                        // A stamped operand under plain ones alone is judged at the read's
                        // time: their result changes when it expires, so they stay.
                        Some(_) if i > 0 && judged_at_now && p.kind == ValueKind::MergeExpiring => {
                            self.out.extend(entries);
                            return Ok(());
                        }
                        Some(operand) => operands.push(operand),
                        None => {
                            under = Some(None);
                            cut = true;
                            break;
                        }
                    }
                }
                ValueKind::Put => under = Some(Some(stored.as_slice())),
                ValueKind::Delete => under = Some(None),
                // Read into an inline value when the entries were gathered.
                ValueKind::BlobPut | ValueKind::BlobPutExpiring => {
                    self.out.extend(entries);
                    return Ok(());
                }
                ValueKind::PutExpiring => match key::split_expiring(stored) {
                    Some((at, value)) if clock.live(at) => {
                        // Judged at a stamped operand's write time it is settled; at the
                        // read's time, the result changes when it expires.
                        under = clock.fixed.then_some(Some(value));
                    }
                    _ => under = Some(None),
                },
            }
        }
        if under.is_none() && !entries.last().is_some_and(|e| !is_operand(&e.0)) {
            under = (self.nothing_below)(&user_key).then_some(None);
        }
        operands.reverse();
        let n = operands.len();
        if let Some(existing) = under {
            if let Ok(value) = self.merger.full(&user_key, existing, &operands) {
                let entry = match top_expiry {
                    Some(e) => (ValueKind::PutExpiring, key::expiring_value(e, &value)),
                    None => (ValueKind::Put, value),
                };
                self.out.push_back((key::internal_key(&user_key, newest_seq, entry.0), entry.1));
                return Ok(());
            }
        }
        let combined = (n > 1 && !cut).then(|| self.merger.partial(&user_key, &operands)).flatten();
        match combined {
            Some(operand) => {
                let entry = match top_expiry {
                    // Judged below at the write time of the oldest operand it replaces.
                    Some(e) => {
                        (ValueKind::MergeExpiring, key::merge_expiring_value(e, clock.at, &operand))
                    }
                    None => (ValueKind::Merge, operand),
                };
                self.out.push_back((key::internal_key(&user_key, newest_seq, entry.0), entry.1));
                // The value beneath stays (a live expiring one, or one kept on failure).
                self.out.extend(entries.into_iter().filter(|e| !is_operand(&e.0)));
            }
            None => self.out.extend(entries),
        }
        Ok(())
    }
}

fn is_operand(ikey: &[u8]) -> bool {
    key::parse_internal_key(ikey).is_some_and(|p| p.kind.is_operand())
}

impl<I: InternalIterator> InternalIterator for MergeStage<'_, I> {
    fn valid(&self) -> bool {
        !self.out.is_empty() || self.inner.valid()
    }
    fn key(&self) -> &[u8] {
        match self.out.front() {
            Some((k, _)) => k,
            None => self.inner.key(),
        }
    }
    fn value(&self) -> &[u8] {
        match self.out.front() {
            Some((_, v)) => v,
            None => self.inner.value(),
        }
    }
    fn next(&mut self) -> Result<()> {
        if self.out.pop_front().is_none() {
            self.inner.next()?;
        }
        self.settle()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.out.clear();
        self.inner.seek(target)?;
        self.settle()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.out.clear();
        self.inner.seek_to_first()?;
        self.settle()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::iter::merge::tests::VecIter;
    use crate::key::internal_key;
    use crate::merge::MergeSlot;
    use crate::merge::U64Add;

    fn e(k: &str, seq: u64, kind: ValueKind, v: &[u8]) -> (Vec<u8>, Vec<u8>) {
        (internal_key(k.as_bytes(), seq, kind), v.to_vec())
    }

    fn run(entries: Vec<(Vec<u8>, Vec<u8>)>, bottom: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
        let merger = Merger::new(&MergeSlot(Some(Arc::new(U64Add))), "ks".into());
        let below = move |_: &[u8]| bottom;
        let mut s = MergeStage::new(VecIter::new(entries), merger, 0, &below);
        s.seek_to_first().unwrap();
        let mut out = Vec::new();
        while s.valid() {
            out.push((s.key().to_vec(), s.value().to_vec()));
            s.next().unwrap();
        }
        out
    }

    #[test]
    fn operands_fold_onto_a_base_or_into_one_operand() {
        let n = |v: u64| U64Add::operand(v).to_vec();
        let m = ValueKind::Merge;
        let input = vec![
            e("a", 9, m, &n(1)),
            e("a", 8, m, &n(2)),
            e("a", 7, ValueKind::Put, &n(10)),
            e("b", 6, m, &n(3)),
            e("b", 5, m, &n(4)),
            e("c", 4, ValueKind::Put, &n(5)),
        ];
        let folded = vec![
            e("a", 9, ValueKind::Put, &n(13)),
            e("b", 6, m, &n(7)),
            e("c", 4, ValueKind::Put, &n(5)),
        ];
        assert_eq!(run(input.clone(), false), folded);
        let mut bottom = folded;
        bottom[1] = e("b", 6, ValueKind::Put, &n(7));
        assert_eq!(run(input, true), bottom);
        // A malformed operand keeps everything as it was.
        let bad = vec![e("a", 9, m, b"x"), e("a", 8, m, &n(1)), e("a", 7, ValueKind::Delete, b"")];
        assert_eq!(run(bad.clone(), true), bad);
    }
}
