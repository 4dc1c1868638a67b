//! [`VisibleIter`]: what a reader sees of the merged sources — for each user key the newest
//! version at or below a sequence number, unless that version is a tombstone — inside a key
//! range, in either direction.
//!
//! Forward, the newest visible version of a user key is the first of its entries at or below
//! the sequence number (entries of one user key run newest first), so a forward step stops
//! on it and can leave the merged iterator standing there. Backward, the same entries come
//! oldest first: a version is known to be the newest visible one only once the walk has
//! passed every entry of its user key and met an earlier key. So going backward the merged
//! iterator stands *before* the current key's entries and the current key and value are
//! copies. Every method keeps one of these two states, and changing direction moves from
//! one to the other.
//!
//! An expiring value whose expiry has passed reads as a tombstone here (judged at the time
//! the view was made), so it hides the older versions of its key in both directions; a
//! live one reads as a put, its value without the expiry.
//!
//! A key whose newest visible version is a merge operand reads as the keyspace's merge
//! operator makes of its operands and the version beneath them (a put, or nothing where a
//! tombstone, a range tombstone, an expired value or the end of the key's entries comes
//! first). Forward, the walk gathers the operands newest first and then stands past them,
//! so the current key and value are copies, as backward; backward, each operand met piles
//! onto the candidate, and a put or tombstone met later (newer) replaces the pile. This is
//! the only place reads combine operands: a point read that meets one reads the key
//! through a view of this kind (`read::search`).
use std::ops::Bound;
use std::sync::Arc;

use crate::blob::BlobFiles;
use crate::clock::{expired, ExpiryTime};
use crate::iter::merge::MergingIterator;
use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::key::{self, MergeClock, SeqNo, ValueKind, KIND_FOR_SEEK, MAX_SEQNO};
use crate::merge::Merger;
use crate::range_del::Fragments;
use crate::version::range_checks::RangeChecks;
use crate::{Error, Result};

/// The newest visible version of each user key in a range, both ways. See the module
/// documentation. Moving methods leave it invalid when they fail.
pub struct VisibleIter {
    iter: MergingIterator,
    seq: SeqNo,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    valid: bool,
    /// Forward: `iter` stands on the current entry. Backward: on the last entry before the
    /// current key's entries, or invalid when there is none.
    backward: bool,
    /// Backward: the current user key. Forward: scratch for the user key being moved past.
    key: Vec<u8>,
    /// Backward: the current value.
    value: Vec<u8>,
    /// The range tombstones of the sources: a put they cover reads as a tombstone.
    range_dels: Vec<Arc<Fragments>>,
    /// The time expiry is judged at, milliseconds since the Unix epoch.
    now: ExpiryTime,
    /// Forward: the current entry is an expiring put, whose stored value starts with its
    /// expiry.
    strip: bool,
    /// Forward: the current key's operands were combined; `key` and `value` hold the key and
    /// the result, and `iter` stands past the operands.
    merged: bool,
    /// Combines merge operands.
    merger: Merger,
    /// Forward: the current entry holds a blob reference, whose value `value` holds.
    resolved: bool,
    /// The blob files the sources' references name.
    blobs: BlobFiles,
    /// The record of the range filters' false positives its sources report to, for a twin
    /// over other sources to share.
    range_checks: Option<Arc<RangeChecks>>,
}

/// The keyspace name of a view without a merger.
fn no_keyspace() -> Arc<str> {
    static EMPTY: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| "".into()).clone()
}

impl VisibleIter {
    /// A view of `iter` at `seq` limited to `(lower, upper)`; unpositioned. Inlined, as are
    /// the `with_*` calls that complete it, so the view is built where it is kept instead
    /// of copied whole at each call: a short scan's largest cost after its probes.
    #[inline]
    pub fn new(
        iter: MergingIterator,
        seq: SeqNo,
        lower: Bound<Vec<u8>>,
        upper: Bound<Vec<u8>>,
        range_dels: Vec<Arc<Fragments>>,
        now: impl Into<ExpiryTime>,
    ) -> Self {
        let now = now.into();
        VisibleIter {
            iter,
            seq,
            lower,
            upper,
            valid: false,
            backward: false,
            key: Vec::new(),
            value: Vec::new(),
            range_dels,
            now,
            strip: false,
            merged: false,
            // A shared empty name, not a new allocation per scan: every scan of the engine
            // replaces it ([`VisibleIter::with_merger`]).
            merger: Merger { op: None, keyspace: no_keyspace() },
            resolved: false,
            blobs: BlobFiles::default(),
            range_checks: None,
        }
    }

    /// The same view, its sources reporting to `checks` (see [`RangeChecks`]).
    #[inline]
    pub fn with_range_checks(mut self, checks: Option<Arc<RangeChecks>>) -> Self {
        self.range_checks = checks;
        self
    }

    /// The record its sources report their range filters' false positives to, if any.
    pub fn range_checks(&self) -> Option<&Arc<RangeChecks>> {
        self.range_checks.as_ref()
    }

    /// The same view, reading the values its sources' blob references name from `blobs`
    /// (without them, meeting a reference is corruption).
    #[inline]
    pub fn with_blobs(mut self, blobs: BlobFiles) -> Self {
        self.blobs = blobs;
        self
    }

    /// The same view, combining merge operands with `merger` (without one, meeting an
    /// operand is [`Error::MergeOperatorMissing`]).
    #[inline]
    pub fn with_merger(mut self, merger: Merger) -> Self {
        self.merger = merger;
        self
    }

    /// Judges expiry at `t` from now on (a kept view's time).
    pub fn judge_at(&mut self, t: u64) {
        self.now = ExpiryTime::At(t);
    }

    /// The range's bounds.
    pub fn bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (self.lower.as_ref().map(Vec::as_slice), self.upper.as_ref().map(Vec::as_slice))
    }

    /// The same view (sequence number, range and range tombstones) over other sources;
    /// unpositioned.
    pub fn twin(&self, iter: MergingIterator) -> Self {
        let (lower, upper) = (self.lower.clone(), self.upper.clone());
        // The twin judges expiry at the time this view does (read now if it was not yet).
        VisibleIter::new(iter, self.seq, lower, upper, self.range_dels.clone(), self.now.get())
            .with_merger(self.merger.clone())
            .with_blobs(self.blobs.clone())
            .with_range_checks(self.range_checks.clone())
    }

    /// The kind a reader sees for a version of `user_key` at `seq` whose stored value is
    /// `stored`: a put that a range tombstone covers is a deletion, and so is an expiring
    /// put whose expiry has passed (or that lacks one).
    #[inline]
    fn seen_kind(&self, kind: ValueKind, user_key: &[u8], seq: SeqNo, stored: &[u8]) -> ValueKind {
        if kind == ValueKind::Delete
            || self.range_dels.iter().any(|r| r.covers(user_key, seq, self.seq))
        {
            return ValueKind::Delete;
        }
        // A stamped operand's expiry comes first, as a put's: once the newest has passed,
        // the key is gone.
        if kind.is_expiring() {
            match key::split_expiring(stored) {
                Some((expiry, _)) if !expired(expiry, self.now.get()) => {}
                _ => return ValueKind::Delete,
            }
        }
        kind
    }

    /// Whether a version of `user_key` at `seq` beneath operands is hidden by a range
    /// tombstone (their expiry is judged by a [`MergeClock`]).
    fn range_deleted(&self, user_key: &[u8], seq: SeqNo) -> bool {
        self.range_dels.iter().any(|r| r.covers(user_key, seq, self.seq))
    }

    /// Whether `operands` (oldest first) give their key a value: there are some, and the
    /// newest has not expired.
    fn operands_live(&self, operands: &[(ValueKind, SeqNo, Vec<u8>)]) -> bool {
        match operands.last() {
            None => false,
            Some((ValueKind::MergeExpiring, _, stored)) => key::split_expiring(stored)
                .is_some_and(|(expiry, _)| !expired(expiry, self.now.get())),
            Some(_) => true,
        }
    }

    /// The value of the key whose visible versions, newest first, are `versions` (the
    /// newest an operand): the operands that take part combined onto the version beneath
    /// them, judged as [`MergeClock`] says.
    fn resolve_operands<'v>(
        &self,
        user_key: &[u8],
        versions: impl Iterator<Item = (ValueKind, SeqNo, &'v [u8])>,
    ) -> Result<Vec<u8>> {
        let mut clock = MergeClock::new(self.now.get());
        let mut operands: Vec<&[u8]> = Vec::new();
        let mut base = None;
        let mut separated = None;
        for (kind, seq, stored) in versions {
            if self.range_deleted(user_key, seq) {
                break;
            }
            match kind {
                ValueKind::Merge | ValueKind::MergeExpiring => match clock.operand(kind, stored) {
                    Some(operand) => operands.push(operand),
                    None => break,
                },
                ValueKind::Put => {
                    base = Some(stored);
                    break;
                }
                ValueKind::PutExpiring => {
                    base = key::split_expiring(stored)
                        .filter(|&(expiry, _)| clock.live(expiry))
                        .map(|(_, v)| v);
                    break;
                }
                ValueKind::BlobPut => {
                    separated = Some(self.blobs.read_stored(stored)?);
                    break;
                }
                ValueKind::BlobPutExpiring => {
                    if let Some((_, r)) =
                        key::split_expiring(stored).filter(|&(expiry, _)| clock.live(expiry))
                    {
                        separated = Some(self.blobs.read_stored(r)?);
                    }
                    break;
                }
                ValueKind::Delete => break,
            }
        }
        operands.reverse();
        let base = separated.as_deref().or(base);
        self.merger.full(user_key, base, &operands)
    }

    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current user key. Only meaningful while `valid()`.
    pub fn key(&self) -> &[u8] {
        if self.backward || self.merged {
            &self.key
        } else {
            key::user_key(self.iter.key())
        }
    }

    /// The current value. Only meaningful while `valid()`.
    pub fn value(&self) -> &[u8] {
        if self.backward || self.merged || self.resolved {
            &self.value
        } else if self.strip {
            self.iter.value().get(key::EXPIRY_LEN..).unwrap_or_default()
        } else {
            self.iter.value()
        }
    }

    /// Leaves the view invalid, as a failed move does.
    pub fn invalidate(&mut self) {
        self.valid = false;
    }

    pub fn seek_to_first(&mut self) -> Result<()> {
        if self.iter.has_no_children() {
            // Every source was ruled out (an absent prefix's scan): no target to build.
            self.valid = false;
            self.backward = false;
            self.merged = false;
            return Ok(());
        }
        let (target, excluded) = forward_target(self.lower.as_ref().map(Vec::as_slice));
        self.seek_forward(target.as_deref(), excluded)
    }

    pub fn seek_to_last(&mut self) -> Result<()> {
        if self.iter.has_no_children() {
            self.valid = false;
            self.backward = true;
            self.merged = false;
            return Ok(());
        }
        let target = backward_target(self.upper.as_ref().map(Vec::as_slice));
        self.seek_backward(target.as_deref())
    }

    /// Positions at the first visible key `>= user_key` in the range.
    pub fn seek(&mut self, user_key: &[u8]) -> Result<()> {
        let from = match &self.lower {
            Bound::Included(l) if user_key < l.as_slice() => Bound::Included(l.as_slice()),
            Bound::Excluded(l) if user_key <= l.as_slice() => Bound::Excluded(l.as_slice()),
            _ => Bound::Included(user_key),
        };
        let (target, excluded) = forward_target(from);
        self.seek_forward(target.as_deref(), excluded)
    }

    /// Positions at the last visible key `<= user_key` in the range.
    pub fn seek_for_prev(&mut self, user_key: &[u8]) -> Result<()> {
        let to = match &self.upper {
            Bound::Included(u) if user_key > u.as_slice() => Bound::Included(u.as_slice()),
            Bound::Excluded(u) if user_key >= u.as_slice() => Bound::Excluded(u.as_slice()),
            _ => Bound::Included(user_key),
        };
        let target = backward_target(to);
        self.seek_backward(target.as_deref())
    }

    /// Moves to the next visible key (nothing when not `valid()`).
    #[allow(clippy::should_implement_trait)] // fallible: an `Iterator` would hide its errors
    pub fn next(&mut self) -> Result<()> {
        if !self.valid {
            return Ok(());
        }
        self.valid = false;
        if self.merged {
            // `iter` stands past the current key's entries, and `key` holds the key.
            self.merged = false;
        } else if self.backward {
            // `iter` stands just before the current key's entries (`key` holds the key):
            // step onto them, and `find_next` skips them.
            self.backward = false;
            if self.iter.valid() {
                self.iter.next()?;
            } else {
                self.iter.seek_to_first()?;
            }
        } else {
            self.key.clear();
            self.key.extend_from_slice(key::user_key(self.iter.key()));
            self.iter.next()?;
        }
        self.find_next(true)
    }

    /// Moves to the previous visible key (nothing when not `valid()`).
    pub fn prev(&mut self) -> Result<()> {
        if !self.valid {
            return Ok(());
        }
        self.valid = false;
        if self.merged {
            // `iter` stands past the current key's operands: back to before its first entry.
            self.merged = false;
            self.backward = true;
            self.iter.seek(&key::internal_key(&self.key, MAX_SEQNO, KIND_FOR_SEEK))?;
            if self.iter.valid() {
                self.iter.prev()?;
            } else {
                self.iter.seek_to_last()?;
            }
        } else if !self.backward {
            // Turn around: `iter` stands on the current key's newest visible version. Only
            // newer versions of it, all invisible, lie between it and the earlier keys, and
            // `find_prev` passes over those.
            self.backward = true;
            self.iter.prev()?;
        }
        self.find_prev()
    }

    /// Seeks `iter` to `target` (the first entry when `None`) and settles forward. With
    /// `excluded`, the user key of `target` is skipped.
    fn seek_forward(&mut self, target: Option<&[u8]>, excluded: bool) -> Result<()> {
        self.valid = false;
        self.backward = false;
        self.merged = false;
        match target {
            None => self.iter.seek_to_first()?,
            Some(t) => {
                self.iter.seek(t)?;
                if excluded {
                    self.key.clear();
                    self.key.extend_from_slice(key::user_key(t));
                }
            }
        }
        self.find_next(excluded)
    }

    /// Seeks `iter` to the last entry `<= target` (the last entry when `None`) and settles
    /// backward.
    fn seek_backward(&mut self, target: Option<&[u8]>) -> Result<()> {
        self.valid = false;
        self.backward = true;
        self.merged = false;
        match target {
            None => self.iter.seek_to_last()?,
            Some(t) => self.iter.seek_for_prev(t)?,
        }
        // An excluded upper bound's target is its user key's first possible entry, which
        // only a version at the largest sequence number could be.
        while self.iter.valid() && past(&self.upper, key::user_key(self.iter.key())) {
            self.iter.prev()?;
        }
        self.find_prev()
    }

    /// From the entry `iter` stands on, moves forward to the newest visible version of the
    /// first user key that has one and is not deleted. With `skipping`, user keys up to
    /// `self.key` are passed over (the current key, or an excluded lower bound).
    fn find_next(&mut self, mut skipping: bool) -> Result<()> {
        self.resolved = false;
        while self.iter.valid() {
            let p = key::parse_internal_key(self.iter.key()).ok_or_else(malformed)?;
            if p.seq <= self.seq && !(skipping && p.user_key <= self.key.as_slice()) {
                if past(&self.upper, p.user_key) {
                    return Ok(());
                }
                match self.seen_kind(p.kind, p.user_key, p.seq, self.iter.value()) {
                    kind @ (ValueKind::Put | ValueKind::PutExpiring) => {
                        self.strip = kind == ValueKind::PutExpiring;
                        self.valid = true;
                        return Ok(());
                    }
                    kind @ (ValueKind::BlobPut | ValueKind::BlobPutExpiring) => {
                        let stored = self.iter.value();
                        let r = match kind {
                            ValueKind::BlobPut => stored,
                            _ => stored.get(key::EXPIRY_LEN..).unwrap_or_default(),
                        };
                        let value = self.blobs.read_stored(r)?;
                        self.value.clear();
                        self.value.extend_from_slice(&value);
                        self.resolved = true;
                        self.valid = true;
                        return Ok(());
                    }
                    ValueKind::Delete => {
                        // Every older version of this key is hidden by the tombstone.
                        self.key.clear();
                        self.key.extend_from_slice(p.user_key);
                        skipping = true;
                    }
                    ValueKind::Merge | ValueKind::MergeExpiring => return self.merge_forward(),
                }
            }
            self.iter.next()?;
        }
        Ok(())
    }

    /// From the operand `iter` stands on, the newest visible version of its key: gathers the
    /// key's operands down to the version beneath them and combines them into `value`,
    /// leaving `iter` past the operands.
    fn merge_forward(&mut self) -> Result<()> {
        self.key.clear();
        self.key.extend_from_slice(key::user_key(self.iter.key()));
        // Newest first: the operands, then the version beneath them if any.
        let mut versions: Vec<(ValueKind, SeqNo, Vec<u8>)> = Vec::new();
        while self.iter.valid() {
            let p = key::parse_internal_key(self.iter.key()).ok_or_else(malformed)?;
            if p.user_key != self.key.as_slice() {
                break;
            }
            versions.push((p.kind, p.seq, self.iter.value().to_vec()));
            if !p.kind.is_operand() {
                break;
            }
            self.iter.next()?;
        }
        let versions_iter = versions.iter().map(|(k, s, v)| (*k, *s, v.as_slice()));
        self.value = self.resolve_operands(&self.key, versions_iter)?;
        self.merged = true;
        self.valid = true;
        Ok(())
    }

    /// From the entry `iter` stands on, moves backward to the previous user key whose newest
    /// visible version is not a tombstone, copying that key and value, and leaves `iter` on
    /// the last entry before the key's entries.
    ///
    /// A user key's entries run oldest first this way, so each visible one replaces the
    /// candidate seen before it; the candidate is decided when an earlier user key appears.
    /// A tombstone as the latest candidate hides its key, and the walk goes on.
    fn find_prev(&mut self) -> Result<()> {
        // Whether the newest visible put or tombstone of `self.key` seen so far is a put
        // (`None` before any), and the operands newer than it, oldest first.
        let mut found: Option<bool> = None;
        // The operands, oldest first, and the kind and sequence number of the version
        // beneath them (whose stored value `self.value` holds).
        let mut operands: Vec<(ValueKind, SeqNo, Vec<u8>)> = Vec::new();
        let mut base: Option<(ValueKind, SeqNo)> = None;
        while self.iter.valid() {
            let p = key::parse_internal_key(self.iter.key()).ok_or_else(malformed)?;
            if below(&self.lower, p.user_key) {
                break;
            }
            let same_key = p.user_key == self.key.as_slice();
            if (found == Some(true) || self.operands_live(&operands)) && !same_key {
                break;
            }
            if p.seq <= self.seq {
                if !same_key {
                    self.key.clear();
                    self.key.extend_from_slice(p.user_key);
                    found = None;
                    operands.clear();
                    base = None;
                }
                let stored = self.iter.value();
                // Operands are judged together once the newest is known (`resolve_operands`).
                let kind = if p.kind.is_operand() && !self.range_deleted(p.user_key, p.seq) {
                    p.kind
                } else {
                    self.seen_kind(p.kind, p.user_key, p.seq, stored)
                };
                let value = match kind {
                    ValueKind::Delete => None,
                    ValueKind::Put | ValueKind::BlobPut => Some(stored),
                    ValueKind::PutExpiring | ValueKind::BlobPutExpiring => {
                        stored.get(key::EXPIRY_LEN..)
                    }
                    ValueKind::Merge | ValueKind::MergeExpiring => {
                        operands.push((p.kind, p.seq, stored.to_vec()));
                        self.iter.prev()?;
                        continue;
                    }
                };
                found = Some(value.is_some());
                operands.clear();
                // Kept whole (an expiring one with its expiry) for the operands above it,
                // which judge it by their own time.
                base = Some((p.kind, p.seq));
                self.value.clear();
                self.value.extend_from_slice(stored);
            }
            self.iter.prev()?;
        }
        if !self.operands_live(&operands) {
            // None, or the newest is a stamped operand that has expired: so has the key.
            self.valid = found == Some(true) && operands.is_empty();
            match base {
                Some((ValueKind::PutExpiring, _)) => {
                    self.value.drain(..key::EXPIRY_LEN.min(self.value.len()));
                }
                // Read only now, for the version that decided: the older ones a backward
                // walk meets first cost no blob read.
                Some((kind @ (ValueKind::BlobPut | ValueKind::BlobPutExpiring), _))
                    if self.valid =>
                {
                    let at = if kind == ValueKind::BlobPut { 0 } else { key::EXPIRY_LEN };
                    let r = self.value.get(at..).unwrap_or_default();
                    self.value = self.blobs.read_stored(r)?.to_vec();
                }
                _ => {}
            }
            return Ok(());
        }
        let beneath = base.map(|(kind, seq)| (kind, seq, self.value.as_slice()));
        let newest_first = operands.iter().rev().map(|(k, s, v)| (*k, *s, v.as_slice()));
        self.value = self.resolve_operands(&self.key, newest_first.chain(beneath))?;
        self.valid = true;
        Ok(())
    }
}

/// The internal key a forward positioning seeks to for the lower end `from`, and whether
/// that key's user key is excluded.
fn forward_target(from: Bound<&[u8]>) -> (Option<Vec<u8>>, bool) {
    match from {
        Bound::Unbounded => (None, false),
        // The largest trailer: the user key's first possible entry.
        Bound::Included(k) => (Some(key::internal_key(k, MAX_SEQNO, KIND_FOR_SEEK)), false),
        Bound::Excluded(k) => (Some(key::internal_key(k, MAX_SEQNO, KIND_FOR_SEEK)), true),
    }
}

/// The internal key a backward positioning seeks at or before for the upper end `to`.
fn backward_target(to: Bound<&[u8]>) -> Option<Vec<u8>> {
    match to {
        Bound::Unbounded => None,
        // The smallest trailer: the user key's last possible entry.
        Bound::Included(k) => Some(key::internal_key(k, 0, ValueKind::Delete)),
        Bound::Excluded(k) => Some(key::internal_key(k, MAX_SEQNO, KIND_FOR_SEEK)),
    }
}

/// True if `user_key` lies above the range's upper end.
fn past(upper: &Bound<Vec<u8>>, user_key: &[u8]) -> bool {
    match upper {
        Bound::Unbounded => false,
        Bound::Included(u) => user_key > u.as_slice(),
        Bound::Excluded(u) => user_key >= u.as_slice(),
    }
}

/// True if `user_key` lies below the range's lower end.
fn below(lower: &Bound<Vec<u8>>, user_key: &[u8]) -> bool {
    match lower {
        Bound::Unbounded => false,
        Bound::Included(l) => user_key < l.as_slice(),
        Bound::Excluded(l) => user_key <= l.as_slice(),
    }
}

fn malformed() -> Error {
    Error::corruption("", 0, "scan met a malformed internal key")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iter::merge::tests::VecIter;
    use crate::key::internal_key;

    fn put(k: &str, seq: SeqNo, v: &str) -> (Vec<u8>, Vec<u8>) {
        (internal_key(k.as_bytes(), seq, ValueKind::Put), v.as_bytes().to_vec())
    }

    fn del(k: &str, seq: SeqNo) -> (Vec<u8>, Vec<u8>) {
        (internal_key(k.as_bytes(), seq, ValueKind::Delete), Vec::new())
    }

    /// Two sources splitting the versions of each key between them.
    fn view(seq: SeqNo, lower: Bound<&str>, upper: Bound<&str>) -> VisibleIter {
        let newer =
            VecIter::new(vec![put("b", 5, "b5"), del("b", 3), put("c", 4, "c4"), del("d", 2)]);
        let older = VecIter::new(vec![put("a", 1, "a1"), put("b", 1, "b1"), put("c", 2, "c2")]);
        let merged = MergingIterator::new(vec![Box::new(newer), Box::new(older)]);
        let own = |b: Bound<&str>| b.map(|k| k.as_bytes().to_vec());
        VisibleIter::new(merged, seq, own(lower), own(upper), Vec::new(), 0)
    }

    fn forward(v: &mut VisibleIter) -> Vec<(String, String)> {
        let mut out = Vec::new();
        v.seek_to_first().unwrap();
        while v.valid() {
            out.push((as_str(v.key()), as_str(v.value())));
            v.next().unwrap();
        }
        out
    }

    fn backward(v: &mut VisibleIter) -> Vec<(String, String)> {
        let mut out = Vec::new();
        v.seek_to_last().unwrap();
        while v.valid() {
            out.push((as_str(v.key()), as_str(v.value())));
            v.prev().unwrap();
        }
        out.reverse();
        out
    }

    fn as_str(b: &[u8]) -> String {
        String::from_utf8(b.to_vec()).unwrap()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn both_directions_see_the_newest_visible_version_and_hide_tombstones() {
        let all = (Bound::Unbounded, Bound::Unbounded);
        for (seq, want) in [
            (0, pairs(&[])),
            (1, pairs(&[("a", "a1"), ("b", "b1")])),
            // d's tombstone at 2 hides nothing older; c's version at 2 appears.
            (2, pairs(&[("a", "a1"), ("b", "b1"), ("c", "c2")])),
            // b's tombstone at 3 hides b1.
            (3, pairs(&[("a", "a1"), ("c", "c2")])),
            (4, pairs(&[("a", "a1"), ("c", "c4")])),
            (5, pairs(&[("a", "a1"), ("b", "b5"), ("c", "c4")])),
        ] {
            let mut v = view(seq, all.0, all.1);
            assert_eq!(forward(&mut v), want, "forward at {seq}");
            assert_eq!(backward(&mut v), want, "backward at {seq}");
        }
    }

    #[test]
    fn turning_around_returns_to_the_neighbouring_keys() {
        let mut v = view(5, Bound::Unbounded, Bound::Unbounded);
        v.seek("b".as_bytes()).unwrap();
        assert_eq!(v.key(), b"b");
        v.prev().unwrap();
        assert_eq!((v.key(), v.value()), (&b"a"[..], &b"a1"[..]));
        v.next().unwrap();
        assert_eq!((v.key(), v.value()), (&b"b"[..], &b"b5"[..]));
        v.next().unwrap();
        assert_eq!(v.key(), b"c");
        v.prev().unwrap();
        assert_eq!((v.key(), v.value()), (&b"b"[..], &b"b5"[..]));
        v.prev().unwrap();
        v.prev().unwrap();
        assert!(!v.valid());
        // Off the front, steps do nothing until a seek.
        v.next().unwrap();
        assert!(!v.valid());
        v.seek_for_prev(b"bz").unwrap();
        assert_eq!(v.key(), b"b");
    }

    #[test]
    fn bounds_hold_in_both_directions() {
        let want = pairs(&[("b", "b5")]);
        let mut v = view(5, Bound::Excluded("a"), Bound::Excluded("c"));
        assert_eq!(forward(&mut v), want);
        assert_eq!(backward(&mut v), want);
        let mut v = view(5, Bound::Included("b"), Bound::Included("b"));
        assert_eq!(forward(&mut v), want);
        assert_eq!(backward(&mut v), want);
        // Seeks outside the range land on its ends.
        v.seek(b"a").unwrap();
        assert_eq!(v.key(), b"b");
        v.seek_for_prev(b"z").unwrap();
        assert_eq!(v.key(), b"b");
        v.seek(b"ba").unwrap();
        assert!(!v.valid());
    }

    #[test]
    fn an_excluded_upper_bound_excludes_a_version_at_the_largest_sequence_number() {
        // The backward seek target for `..k` is k's first possible entry, which is exactly
        // this version.
        let source = VecIter::new(vec![put("a", 1, "a1"), put("k", MAX_SEQNO, "top")]);
        let merged = MergingIterator::new(vec![Box::new(source)]);
        let mut v = VisibleIter::new(
            merged,
            MAX_SEQNO,
            Bound::Unbounded,
            Bound::Excluded(b"k".to_vec()),
            Vec::new(),
            0,
        );
        v.seek_to_last().unwrap();
        assert_eq!(v.key(), b"a");
        v.seek_for_prev(b"z").unwrap();
        assert_eq!(v.key(), b"a");
    }

    #[test]
    fn a_malformed_key_is_an_error_both_ways() {
        let source = VecIter::new(vec![(b"short".to_vec(), Vec::new())]);
        let merged = MergingIterator::new(vec![Box::new(source)]);
        let mut v = VisibleIter::new(merged, 9, Bound::Unbounded, Bound::Unbounded, Vec::new(), 0);
        assert!(v.seek_to_first().unwrap_err().is_corruption());
        assert!(!v.valid());
        assert!(v.seek_to_last().unwrap_err().is_corruption());
        assert!(!v.valid());
    }

    #[test]
    fn an_expired_version_hides_older_ones_both_ways_and_a_live_one_loses_its_expiry() {
        let exp = |k: &str, seq: SeqNo, at: u64, v: &str| {
            let key = internal_key(k.as_bytes(), seq, ValueKind::PutExpiring);
            (key, key::expiring_value(at, v.as_bytes()))
        };
        let newer = vec![exp("a", 5, 100, "a5"), exp("b", 6, 200, "b6")];
        let older = vec![put("a", 1, "a1"), put("b", 2, "b2"), put("c", 3, "c3")];
        let at = |now: u64| {
            let merged = MergingIterator::new(vec![
                Box::new(VecIter::new(newer.clone())),
                Box::new(VecIter::new(older.clone())),
            ]);
            VisibleIter::new(merged, 9, Bound::Unbounded, Bound::Unbounded, Vec::new(), now)
        };
        for (now, want) in [
            (99, pairs(&[("a", "a5"), ("b", "b6"), ("c", "c3")])),
            // a's newest version expired: a1 stays hidden.
            (100, pairs(&[("b", "b6"), ("c", "c3")])),
            (200, pairs(&[("c", "c3")])),
        ] {
            assert_eq!(forward(&mut at(now)), want, "forward at {now}");
            assert_eq!(backward(&mut at(now)), want, "backward at {now}");
        }
    }
}
