//! Merging several sorted sources into one sorted stream.
//!
//! Children are given newest first (memtable, immutable memtables, level-0 tables newest
//! to oldest, then one iterator per deeper level). When two children hold exactly the same
//! internal key — same user key, sequence number and kind, which only happens when a
//! flush or compaction output and its input are both visible — the earlier (newer) child
//! wins and the other copies are skipped, so the merged stream is strictly increasing.
//!
//! The children sit in a binary min-heap of indices ordered by `(key, child index)`. With
//! the 5–20 children a read typically has, a heap costs about log2(k) key comparisons per
//! step where a linear scan costs k; and when one child supplies a long run of consecutive
//! keys (the common case after seeking), the advanced top stays on top after two
//! comparisons.

use std::cmp::Ordering;

use crate::iter::InternalIterator;
use crate::key::compare_internal;
use crate::Result;

/// An [`InternalIterator`] over the union of its children. See the module documentation.
pub struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    /// Indices of the valid children; `heap[0]` is the current entry's child.
    heap: Vec<usize>,
    /// The key being moved past, copied because advancing its child invalidates it.
    last_key: Vec<u8>,
}

impl MergingIterator {
    /// Merges `children`, given newest first. Starts unpositioned, like every
    /// [`InternalIterator`]: call `seek_to_first` or `seek`.
    pub fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        let heap = Vec::with_capacity(children.len());
        MergingIterator { children, heap, last_key: Vec::new() }
    }

    /// True if child `a` sorts before child `b`; ties go to the lower (newer) index.
    fn less(&self, a: usize, b: usize) -> bool {
        match compare_internal(self.children[a].key(), self.children[b].key()) {
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
            if r < n && self.less(self.heap[r], self.heap[l]) {
                min = r;
            }
            if !self.less(self.heap[min], self.heap[i]) {
                return;
            }
            self.heap.swap(i, min);
            i = min;
        }
    }

    /// Rebuilds the heap from the children's current positions.
    fn rebuild(&mut self) {
        self.heap.clear();
        self.heap.extend((0..self.children.len()).filter(|&i| self.children[i].valid()));
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// Advances the child on top of the heap and restores the heap.
    fn advance_top(&mut self) -> Result<()> {
        let top = self.heap[0];
        if let Err(e) = self.children[top].next() {
            self.heap.clear();
            return Err(e);
        }
        if !self.children[top].valid() {
            self.heap.swap_remove(0);
        }
        self.sift_down(0);
        Ok(())
    }

    fn position_all(
        &mut self,
        mut f: impl FnMut(&mut dyn InternalIterator) -> Result<()>,
    ) -> Result<()> {
        self.heap.clear();
        for child in &mut self.children {
            f(child.as_mut())?;
        }
        self.rebuild();
        Ok(())
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        !self.heap.is_empty()
    }

    fn key(&self) -> &[u8] {
        self.heap.first().map_or(&[], |&i| self.children[i].key())
    }

    fn value(&self) -> &[u8] {
        self.heap.first().map_or(&[], |&i| self.children[i].value())
    }

    fn next(&mut self) -> Result<()> {
        let Some(&top) = self.heap.first() else {
            return Ok(());
        };
        self.last_key.clear();
        self.last_key.extend_from_slice(self.children[top].key());
        self.advance_top()?;
        // Older copies of the same internal key come next in heap order; drop them.
        while let Some(&t) = self.heap.first() {
            if self.children[t].key() != self.last_key.as_slice() {
                break;
            }
            self.advance_top()?;
        }
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.position_all(|c| c.seek(target))
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.position_all(|c| c.seek_to_first())
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
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::key::{internal_key, ValueKind};
    use crate::Error;

    /// A sorted in-memory source, optionally failing on its `fail_at`-th call to `next`.
    pub(crate) struct VecIter {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        pos: usize,
        fail_at: Option<usize>,
        nexts: usize,
    }

    impl VecIter {
        pub(crate) fn new(mut entries: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
            entries.sort_by(|a, b| compare_internal(&a.0, &b.0));
            entries.dedup_by(|a, b| a.0 == b.0);
            let pos = entries.len();
            VecIter { entries, pos, fail_at: None, nexts: 0 }
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

    type Child = Vec<(Vec<u8>, u64)>;

    fn children() -> impl Strategy<Value = Vec<Child>> {
        let entry = (proptest::collection::vec(0u8..4, 0..3), 0u64..4);
        proptest::collection::vec(proptest::collection::vec(entry, 0..30), 0..12)
    }

    proptest! {
        #[test]
        fn prop_merge_equals_sorted_union(
            kids in children(),
            seeks in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..3), 0u64..5), 0..10),
        ) {
            // Model: for each internal key, the value of the earliest child holding it.
            let mut model = BTreeMap::new();
            let mut boxed: Vec<Box<dyn InternalIterator>> = Vec::new();
            for (c, kid) in kids.iter().enumerate() {
                let entries: Vec<_> =
                    kid.iter().map(|(k, s)| (ik(k, *s), vec![c as u8])).collect();
                for (k, v) in &entries {
                    model.entry(Ik(k.clone())).or_insert_with(|| v.clone());
                }
                boxed.push(Box::new(VecIter::new(entries)));
            }
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
    }
}
