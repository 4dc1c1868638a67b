//! Merging several sorted sources into one sorted stream, in either direction.
//!
//! Children are given newest first (memtable, immutable memtables, level-0 tables newest
//! to oldest, then one iterator per deeper level). When two children hold exactly the same
//! internal key — same user key, sequence number and kind, which only happens when a
//! flush or compaction output and its input are both visible — the earlier (newer) child
//! wins and the other copies are skipped, so the merged stream is strictly increasing; the
//! same copy wins going backward.
//!
//! The children sit in a binary heap of indices: a min-heap by `(key, child index)` going
//! forward, a max-heap by key (ties still to the lower index) going backward. With the
//! 5–20 children a read typically has, a heap costs about log2(k) key comparisons per step
//! where a linear scan costs k; and when one child supplies a long run of consecutive keys
//! (the common case after seeking), the advanced top stays on top after two comparisons.
//! Beside each child the heap keeps its user key's [`key_head`]: most comparisons end
//! there, without asking the child (a virtual call down through a level, a table and a
//! block iterator) for its key.
//!
//! Changing direction is where a merge can go wrong. Going forward, every child stands at
//! its first entry at or after the current key; going backward, at its last entry at or
//! before it. So `prev` after `next` (or the reverse) first repositions every child but the
//! current one on the new side of the current key — one seek per child — and only then
//! steps. Without that, a child still standing past the current key would supply entries
//! that were already passed.

use std::cmp::Ordering;

use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::key::{compare_internal, user_key};
use crate::key_head::key_head;
use crate::Result;

/// A [`BidirectionalIterator`] over the union of its children. See the module
/// documentation.
pub struct MergingIterator {
    children: Vec<Box<dyn BidirectionalIterator>>,
    /// Indices of the valid children; `heap[0]` is the current entry's child.
    heap: Vec<usize>,
    /// `heads[i]` is the [`key_head`] of child `i`'s user key while it is in the heap.
    heads: Vec<u128>,
    /// Which way the heap is ordered and the children stand (see the module documentation).
    backward: bool,
    /// The key being moved past, copied because moving its child invalidates it.
    last_key: Vec<u8>,
}

impl MergingIterator {
    /// True if there is nothing to merge: every positioning leaves it invalid.
    pub fn has_no_children(&self) -> bool {
        self.children.is_empty()
    }

    /// Merges `children`, given newest first. Starts unpositioned, like every
    /// [`InternalIterator`]: call a seek first.
    pub fn new(children: Vec<Box<dyn BidirectionalIterator>>) -> Self {
        let heap = Vec::with_capacity(children.len());
        let heads = vec![0; children.len()];
        MergingIterator { children, heap, heads, backward: false, last_key: Vec::new() }
    }

    /// True if child `a` comes before child `b` in the direction of travel; ties go to the
    /// lower (newer) index either way.
    fn before(&self, a: usize, b: usize) -> bool {
        let ord = match self.heads[a].cmp(&self.heads[b]) {
            Ordering::Equal => compare_internal(self.children[a].key(), self.children[b].key()),
            unequal => unequal,
        };
        let ord = if self.backward { ord.reverse() } else { ord };
        match ord {
            Ordering::Less => true,
            Ordering::Equal => a < b,
            Ordering::Greater => false,
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                return;
            }
            let r = l + 1;
            let mut min = l;
            if r < n && self.before(self.heap[r], self.heap[l]) {
                min = r;
            }
            if !self.before(self.heap[min], self.heap[i]) {
                return;
            }
            self.heap.swap(i, min);
            i = min;
        }
    }

    /// Rebuilds the heap from the children's current positions.
    fn rebuild(&mut self) {
        self.heap.clear();
        for (i, child) in self.children.iter().enumerate() {
            if child.valid() {
                self.heads[i] = head(child.key());
                self.heap.push(i);
            }
        }
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// Moves the child on top of the heap one step in the direction of travel and restores
    /// the heap.
    fn step_top(&mut self) -> Result<()> {
        let top = self.heap[0];
        let child = &mut self.children[top];
        let r = if self.backward { child.prev() } else { child.next() };
        if let Err(e) = r {
            self.heap.clear();
            return Err(e);
        }
        if self.children[top].valid() {
            self.heads[top] = head(self.children[top].key());
        } else {
            self.heap.swap_remove(0);
        }
        self.sift_down(0);
        Ok(())
    }

    /// Steps past the current key, and past the older copies of it that other children
    /// hold (they come next in heap order).
    fn step(&mut self) -> Result<()> {
        let Some(&top) = self.heap.first() else {
            return Ok(());
        };
        self.last_key.clear();
        self.last_key.extend_from_slice(self.children[top].key());
        let last_head = self.heads[top];
        self.step_top()?;
        while let Some(&t) = self.heap.first() {
            if self.heads[t] != last_head || self.children[t].key() != self.last_key.as_slice() {
                break;
            }
            self.step_top()?;
        }
        Ok(())
    }

    /// Turns around at the current entry: every other child moves to its last entry at or
    /// before the current key (turning backward) or its first at or after it (forward), and
    /// the heap is rebuilt in the new order with the current child where it stands. The
    /// caller then steps, which also moves past the children holding a copy of the key.
    fn turn(&mut self, backward: bool) -> Result<()> {
        let Some(&top) = self.heap.first() else {
            self.backward = backward;
            return Ok(());
        };
        self.last_key.clear();
        self.last_key.extend_from_slice(self.children[top].key());
        self.heap.clear();
        self.backward = backward;
        let target = self.last_key.as_slice();
        for (i, child) in self.children.iter_mut().enumerate() {
            if i == top {
                continue;
            }
            if backward {
                child.seek_for_prev(target)?;
            } else {
                child.seek(target)?;
            }
        }
        self.rebuild();
        Ok(())
    }

    fn position_all(
        &mut self,
        backward: bool,
        mut f: impl FnMut(&mut dyn BidirectionalIterator) -> Result<()>,
    ) -> Result<()> {
        self.heap.clear();
        self.backward = backward;
        for child in &mut self.children {
            f(child.as_mut())?;
        }
        self.rebuild();
        Ok(())
    }
}

/// The head of an internal key's user key: where two differ, they order the keys.
#[inline]
fn head(ikey: &[u8]) -> u128 {
    key_head(user_key(ikey))
}

// The three accessors are `#[inline]` because the engine's compaction stream calls them once
// per entry from the other crate, where a function without it is never inlined.
impl InternalIterator for MergingIterator {
    #[inline]
    fn valid(&self) -> bool {
        !self.heap.is_empty()
    }

    #[inline]
    fn key(&self) -> &[u8] {
        self.heap.first().map_or(&[], |&i| self.children[i].key())
    }

    #[inline]
    fn value(&self) -> &[u8] {
        self.heap.first().map_or(&[], |&i| self.children[i].value())
    }

    fn next(&mut self) -> Result<()> {
        if self.backward {
            self.turn(false)?;
        }
        self.step()
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.position_all(false, |c| c.seek(target))
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.position_all(false, |c| c.seek_to_first())
    }
}

impl BidirectionalIterator for MergingIterator {
    fn prev(&mut self) -> Result<()> {
        if !self.backward {
            self.turn(true)?;
        }
        self.step()
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.position_all(true, |c| c.seek_to_last())
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.position_all(true, |c| c.seek_for_prev(target))
    }
}

impl std::fmt::Debug for MergingIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergingIterator")
            .field("children", &self.children.len())
            .field("valid_children", &self.heap.len())
            .finish()
    }
}

#[cfg(test)]
pub mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::iter::testing::{check_walk, walk_op};
    use crate::key::{internal_key, ValueKind};
    use crate::Error;

    /// A sorted in-memory source, optionally failing on its `fail_at`-th call to `next`.
    pub struct VecIter {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        pos: usize,
        fail_at: Option<usize>,
        nexts: usize,
        fail_prev: bool,
    }

    impl VecIter {
        pub fn new(mut entries: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
            entries.sort_by(|a, b| compare_internal(&a.0, &b.0));
            entries.dedup_by(|a, b| a.0 == b.0);
            let pos = entries.len();
            VecIter { entries, pos, fail_at: None, nexts: 0, fail_prev: false }
        }
    }

    impl InternalIterator for VecIter {
        fn valid(&self) -> bool {
            self.pos < self.entries.len()
        }
        fn key(&self) -> &[u8] {
            &self.entries[self.pos].0
        }
        fn value(&self) -> &[u8] {
            &self.entries[self.pos].1
        }
        fn next(&mut self) -> Result<()> {
            self.nexts += 1;
            if Some(self.nexts) == self.fail_at {
                self.pos = self.entries.len();
                return Err(Error::corruption("t.sst", 77, "injected"));
            }
            self.pos += 1;
            Ok(())
        }
        fn seek(&mut self, target: &[u8]) -> Result<()> {
            self.pos = self.entries.partition_point(|(k, _)| compare_internal(k, target).is_lt());
            Ok(())
        }
        fn seek_to_first(&mut self) -> Result<()> {
            self.pos = 0;
            Ok(())
        }
    }

    impl BidirectionalIterator for VecIter {
        fn prev(&mut self) -> Result<()> {
            if self.fail_prev {
                self.pos = self.entries.len();
                return Err(Error::corruption("t.sst", 78, "injected"));
            }
            if self.valid() {
                self.pos = self.pos.checked_sub(1).unwrap_or(self.entries.len());
            }
            Ok(())
        }
        fn seek_to_last(&mut self) -> Result<()> {
            self.pos = self.entries.len().saturating_sub(1);
            Ok(())
        }
    }

    fn drain(it: &mut dyn InternalIterator) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next().unwrap();
        }
        out
    }

    use crate::key::OrderedKey as Ik;

    fn ik(k: &[u8], seq: u64) -> Vec<u8> {
        internal_key(k, seq, ValueKind::Put)
    }

    #[test]
    fn earlier_child_wins_exact_duplicates() {
        let newer =
            VecIter::new(vec![(ik(b"a", 1), b"new".to_vec()), (ik(b"c", 1), b"c".to_vec())]);
        let older = VecIter::new(vec![
            (ik(b"a", 1), b"old".to_vec()),
            (ik(b"a", 0), b"a0".to_vec()),
            (ik(b"b", 4), b"b".to_vec()),
        ]);
        let mut m = MergingIterator::new(vec![Box::new(newer), Box::new(older)]);
        assert!(!m.valid());
        m.seek_to_first().unwrap();
        assert_eq!(
            drain(&mut m),
            vec![
                (ik(b"a", 1), b"new".to_vec()),
                (ik(b"a", 0), b"a0".to_vec()),
                (ik(b"b", 4), b"b".to_vec()),
                (ik(b"c", 1), b"c".to_vec()),
            ]
        );
        // Same when the older child is given first.
        let newer = VecIter::new(vec![(ik(b"a", 1), b"new".to_vec())]);
        let older = VecIter::new(vec![(ik(b"a", 1), b"old".to_vec())]);
        let mut m = MergingIterator::new(vec![Box::new(older), Box::new(newer)]);
        m.seek(&ik(b"a", 5)).unwrap();
        assert_eq!(drain(&mut m), vec![(ik(b"a", 1), b"old".to_vec())]);
    }

    #[test]
    fn no_children_is_empty() {
        let mut m = MergingIterator::new(Vec::new());
        m.seek_to_first().unwrap();
        assert!(!m.valid());
        m.next().unwrap();
        assert!(!m.valid());
    }

    #[test]
    fn child_error_propagates_and_invalidates() {
        let mut failing =
            VecIter::new((0..10u8).map(|i| (ik(&[b'a', i], 1), vec![i])).collect::<Vec<_>>());
        failing.fail_at = Some(3);
        let other = VecIter::new(vec![(ik(b"z", 1), vec![])]);
        let mut m = MergingIterator::new(vec![Box::new(failing), Box::new(other)]);
        m.seek_to_first().unwrap();
        m.next().unwrap();
        m.next().unwrap();
        let e = m.next().unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 77, .. }));
        assert!(!m.valid());
    }

    #[test]
    fn child_error_while_turning_around_propagates_and_invalidates() {
        let a = VecIter::new(vec![(ik(b"a1", 1), vec![]), (ik(b"a3", 1), vec![])]);
        let mut b = VecIter::new(vec![(ik(b"a2", 1), vec![])]);
        b.fail_prev = true;
        let mut m = MergingIterator::new(vec![Box::new(a), Box::new(b)]);
        m.seek_to_first().unwrap();
        m.next().unwrap();
        assert_eq!(m.key(), &ik(b"a2", 1)[..]);
        let e = m.prev().unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 78, .. }));
        assert!(!m.valid());
        // A seek that needs the failing step fails too; one that does not recovers.
        m.seek_for_prev(&ik(b"a1", 0)).unwrap_err();
        assert!(!m.valid());
        m.seek_to_first().unwrap();
        assert_eq!(m.key(), &ik(b"a1", 1)[..]);
    }

    type Child = Vec<(Vec<u8>, u64)>;
    type Children = Vec<Box<dyn BidirectionalIterator>>;

    /// User keys that exercise the heads: short ones over few byte values (zero included, so
    /// one key is another's zero-padded head), keys around sixteen bytes, and long keys that
    /// share their first sixteen bytes and differ only after them.
    fn user_keys() -> impl Strategy<Value = Vec<u8>> + Clone {
        prop_oneof![
            proptest::collection::vec(0u8..4, 0..3),
            proptest::collection::vec(0u8..2, 15..18),
            proptest::collection::vec(0u8..4, 0..3)
                .prop_map(|t| [&[0u8, 1].repeat(8)[..], &t].concat()),
        ]
    }

    fn children() -> impl Strategy<Value = Vec<Child>> {
        let entry = (user_keys(), 0u64..4);
        proptest::collection::vec(proptest::collection::vec(entry, 0..30), 0..12)
    }

    /// One iterator per child (its value the child's index) and, for each internal key, the
    /// value of the earliest child holding it: what the merge must yield.
    fn children_and_model(kids: &[Child]) -> (BTreeMap<Ik, Vec<u8>>, Children) {
        let mut model = BTreeMap::new();
        let mut boxed: Children = Vec::new();
        for (c, kid) in kids.iter().enumerate() {
            let entries: Vec<_> = kid.iter().map(|(k, s)| (ik(k, *s), vec![c as u8])).collect();
            for (k, v) in &entries {
                model.entry(Ik(k.clone())).or_insert_with(|| v.clone());
            }
            boxed.push(Box::new(VecIter::new(entries)));
        }
        (model, boxed)
    }

    proptest! {
        #[test]
        fn prop_merge_equals_sorted_union(
            kids in children(),
            seeks in proptest::collection::vec((user_keys(), 0u64..5), 0..10),
        ) {
            let (model, boxed) = children_and_model(&kids);
            let mut m = MergingIterator::new(boxed);
            m.seek_to_first().unwrap();
            let want: Vec<_> = model.iter().map(|(k, v)| (k.0.clone(), v.clone())).collect();
            prop_assert_eq!(drain(&mut m), want);

            for (k, s) in seeks {
                let target = ik(&k, s);
                m.seek(&target).unwrap();
                let want: Vec<_> =
                    model.range(Ik(target)..).map(|(k, v)| (k.0.clone(), v.clone())).collect();
                prop_assert_eq!(drain(&mut m), want);
            }
        }

        /// Random walks — seeks both ways and steps that change direction at any point —
        /// agree with a cursor over the sorted union, exact copies in several children
        /// included (the earliest child's copy must win both ways).
        #[test]
        fn prop_random_walks_match_a_model_cursor(
            kids in children(),
            walk in proptest::collection::vec(
                walk_op((user_keys(), 0u64..5).prop_map(|(k, s)| ik(&k, s))),
                1..40,
            ),
        ) {
            let (model, boxed) = children_and_model(&kids);
            let sorted: Vec<_> = model.into_iter().map(|(k, v)| (k.0, v)).collect();
            check_walk(&mut MergingIterator::new(boxed), &sorted, &walk)?;
        }
    }
}
