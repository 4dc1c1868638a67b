//! Writes applied outside the WAL's lock: the single puts and deletes that a writer logs
//! under the lock and then inserts into the memtable on its own, beside other writers
//! (`db/write.rs`, `write_direct`).
//!
//! Such a write publishes its sequence number as soon as its own insert is done, with a
//! `fetch_max`, not after every earlier one's: the visible sequence number can then pass a
//! write still being inserted. For a point read that is harmless. The write is one entry, so
//! the read sees it whole or not at all, and a put or delete does not depend on the versions
//! beneath it: a read that misses it is one that ran before it, and the writer has not
//! returned yet. What must not pass such a write is anything that reads the same sequence
//! number again or combines versions:
//!
//! - a view that is kept (a snapshot, an iterator, a transaction) waits, once it has its
//!   sequence number, for every write at or below it ([`InFlight::wait_through`]), so it
//!   never changes under its reader; so does a `multi_get`, whose keys are read at one
//!   number, so that two of them never show two writes in an order no moment had;
//! - a write that must see every earlier write applied (a merge operand, which a read
//!   combines with what lies beneath; a write-group leader; a memtable switch) waits for them
//!   all ([`InFlight::wait_all`]) while it holds the WAL's lock, so no new one begins.
//!
//! Each write in flight holds a slot with its sequence number. Slots are claimed only under
//! the WAL's lock, so a reader that loads a sequence number published after a write's
//! claim (every later write takes the lock after it) also sees the claim. When every slot is
//! taken, the writer inserts under the lock instead, as a batch does.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::key::SeqNo;

/// How many writes may be inserted outside the WAL's lock at once. Two cores are kept busy
/// by two or three; more only queue for the cores.
const SLOTS: usize = 8;

/// The writes being inserted outside the WAL's lock (see the module documentation).
#[derive(Default)]
pub(crate) struct InFlight {
    /// Each slot holds the sequence number of the write using it, or 0 when free (no write
    /// has sequence number 0).
    slots: [AtomicU64; SLOTS],
}

/// A claimed slot: dropping it marks its write applied.
pub(crate) struct Claim<'a>(&'a AtomicU64);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        // `Release`: whoever sees the slot free sees the insert made before.
        self.0.store(0, Ordering::Release);
    }
}

impl InFlight {
    /// A slot for the write numbered `seq`, if one is free. The WAL's lock must be held.
    pub(crate) fn claim(&self, seq: SeqNo) -> Option<Claim<'_>> {
        debug_assert!(seq > 0);
        let slot = self.slots.iter().find(|s| s.load(Ordering::Relaxed) == 0)?;
        // Only holders of the WAL's lock store a sequence number, so the free slot is still
        // free. `Relaxed`: the lock's release orders it before every later write's publish.
        slot.store(seq, Ordering::Relaxed);
        Some(Claim(slot))
    }

    /// Waits until every write numbered at or below `seq` that is inserted outside the
    /// lock has been applied.
    pub(crate) fn wait_through(&self, seq: SeqNo) {
        self.wait_while(|s| s != 0 && s <= seq);
    }

    /// Waits until no write is being inserted outside the lock. The WAL's lock must be held
    /// (or the write queue's leadership, which keeps new ones from starting), or more may
    /// begin.
    pub(crate) fn wait_all(&self) {
        self.wait_while(|s| s != 0);
    }

    /// Whether any write is being inserted outside the lock now.
    pub(crate) fn any(&self) -> bool {
        self.slots.iter().any(|s| s.load(Ordering::Acquire) != 0)
    }

    fn wait_while(&self, busy: impl Fn(SeqNo) -> bool) {
        for slot in &self.slots {
            let mut spins = 0u32;
            // An insert takes a microsecond or two: spin a little, then give the core to
            // the writer, which may be waiting for it.
            while busy(slot.load(Ordering::Acquire)) {
                if spins < 64 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::*;
    use crate::{Db, Options, Readable, U64Add};

    /// A write numbered and claimed but not yet applied, as `write_direct` leaves one
    /// between releasing the WAL's lock and finishing its insert.
    fn numbered_not_applied(db: &Db) -> (SeqNo, Claim<'_>) {
        let mut wal = db.inner.wal.lock().unwrap();
        wal.last_seq += 1;
        let seq = wal.last_seq;
        (seq, db.inner.in_flight.claim(seq).expect("a free slot"))
    }

    /// What may not pass a write still being applied waits for it: a snapshot, an iterator
    /// and a `multi_get` (their number is at or above the write's), and a merge (a read
    /// combines it with what lies beneath). A put made meanwhile does not wait, or this test
    /// would not end.
    #[test]
    fn snapshots_and_merges_wait_for_writes_being_applied() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default().merge_operator(Arc::new(U64Add))).unwrap();
        db.put(b"k", b"old").unwrap();
        let (seq, claim) = numbered_not_applied(&db);
        db.put(b"k", b"new").unwrap();
        assert!(db.inner.visible_seq.load(Ordering::Acquire) > seq, "published past it");
        let applied = AtomicBool::new(false);
        let started = std::sync::Barrier::new(5);
        let returned = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let snapshot = s.spawn(|| {
                started.wait();
                let snap = db.snapshot();
                returned.fetch_add(1, Ordering::AcqRel);
                assert!(applied.load(Ordering::Acquire), "the snapshot did not wait");
                assert_eq!(snap.get(b"k").unwrap().as_deref(), Some(&b"new"[..]));
            });
            let iter = s.spawn(|| {
                started.wait();
                let first = db.range(..).next();
                returned.fetch_add(1, Ordering::AcqRel);
                assert!(applied.load(Ordering::Acquire), "the iterator did not wait");
                assert!(first.is_some());
            });
            let many = s.spawn(|| {
                started.wait();
                let got = db.multi_get([b"k"]).unwrap();
                returned.fetch_add(1, Ordering::AcqRel);
                assert!(applied.load(Ordering::Acquire), "multi_get did not wait");
                assert_eq!(got[0].as_deref(), Some(&b"new"[..]));
            });
            let merge = s.spawn(|| {
                started.wait();
                db.merge(b"n", 1u64.to_le_bytes()).unwrap();
                returned.fetch_add(1, Ordering::AcqRel);
                assert!(applied.load(Ordering::Acquire), "the merge did not wait");
            });
            started.wait();
            // Gives the threads time to get stuck, or to return and fail, before the write
            // is applied: the test cannot fail for want of it, only miss a failure.
            for _ in 0..20_000 {
                if returned.load(Ordering::Acquire) > 0 {
                    break;
                }
                std::thread::yield_now();
            }
            applied.store(true, Ordering::Release);
            drop(claim);
            snapshot.join().unwrap();
            iter.join().unwrap();
            many.join().unwrap();
            merge.join().unwrap();
        });
    }

    #[test]
    fn slots_are_claimed_until_full_and_freed_when_dropped() {
        let f = InFlight::default();
        let claims: Vec<_> = (1..=SLOTS as u64).map(|s| f.claim(s).expect("a free slot")).collect();
        assert!(f.claim(99).is_none(), "every slot is taken");
        assert!(f.any());
        drop(claims);
        assert!(!f.any());
        f.wait_all();
        f.wait_through(u64::MAX);
        assert!(f.claim(100).is_some());
    }

    #[test]
    fn a_wait_ends_when_the_writes_at_or_below_its_number_are_applied() {
        let f = InFlight::default();
        let low = f.claim(5).unwrap();
        let high = f.claim(9).unwrap();
        // Only writes at or below the number are waited for.
        f.wait_through(4);
        // The flags are set just before the claims are dropped: a waiter that returned
        // before that would find them unset.
        let applied = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                f.wait_through(5);
                assert!(applied.load(Ordering::Acquire), "returned before the write at 5");
            });
            applied.store(true, Ordering::Release);
            drop(low);
            waiter.join().unwrap();
        });
        assert!(f.any(), "the write at 9 is still in flight");
        applied.store(false, Ordering::Release);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                f.wait_all();
                assert!(applied.load(Ordering::Acquire), "returned before the write at 9");
            });
            applied.store(true, Ordering::Release);
            drop(high);
            waiter.join().unwrap();
        });
        assert!(!f.any());
    }
}
