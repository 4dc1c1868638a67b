//! The live transactions, which decide what the memtables' history keeps.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::db::{lock_mutex as lock, DbInner};

/// The live transactions, by the WAL number their commits check from (and how many have
/// each), so that a flushed memtable stays in the history only while a transaction may need
/// it: with none open, the history holds nothing. A map under a lock, taken twice per
/// transaction, instead of reference counts on the memtables: `install` must decide what
/// to keep and swap the state in one step with respect to transactions beginning
/// (`LiveTransactions::begin`).
#[derive(Default)]
pub(crate) struct LiveTransactions(Mutex<BTreeMap<u64, usize>>);

/// A transaction's entry in [`LiveTransactions`], removed when dropped.
pub(super) struct LiveTransaction {
    inner: Arc<DbInner>,
    wal: u64,
}

impl LiveTransactions {
    /// Registers a transaction about to take its snapshot, at the WAL number of the memtable
    /// active now: at or below its snapshot's. The number is read under the lock `install`
    /// holds from choosing what the history keeps to swapping the state in, so either that
    /// install sees this transaction, or the number is read from the state it stored (or a
    /// newer one), whose active memtable is newer than every memtable it let go.
    pub(super) fn begin(inner: &Arc<DbInner>) -> LiveTransaction {
        let mut live = lock(&inner.live_transactions.0);
        let wal = inner.state.load().default_tree().mem.wal_number;
        *live.entry(wal).or_default() += 1;
        LiveTransaction { inner: inner.clone(), wal }
    }

    /// The WAL number from which the live transactions may need the flushed memtables
    /// (`u64::MAX` when there are none), and the lock that keeps transactions from beginning
    /// until the caller has swapped in the state built from it.
    pub(crate) fn oldest(&self) -> (u64, std::sync::MutexGuard<'_, BTreeMap<u64, usize>>) {
        let live = lock(&self.0);
        (live.keys().next().copied().unwrap_or(u64::MAX), live)
    }
}

impl Drop for LiveTransaction {
    fn drop(&mut self) {
        let mut live = lock(&self.inner.live_transactions.0);
        if let Some(n) = live.get_mut(&self.wal) {
            *n -= 1;
            if *n == 0 {
                live.remove(&self.wal);
            }
        }
    }
}
