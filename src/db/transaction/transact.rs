//! `transact` and `compare_and_swap`: transactions run again on a conflict.

use std::sync::Arc;

use super::Transaction;
use crate::db::{DbInner, Keyspace};
use crate::version::edit::DEFAULT_KEYSPACE;
use crate::{Error, Result};

/// How many times [`crate::Db::transact`] runs its closure before it gives up with
/// [`Error::Conflict`].
pub const TRANSACT_ATTEMPTS: usize = 64;

/// Sets `key` in the default keyspace or in keyspace `id` to `new` (`None` deletes it) if
/// its value is `expected` (`None`: absent): see [`crate::Db::compare_and_swap`].
pub(crate) fn compare_and_swap(
    inner: &Arc<DbInner>,
    keyspace: Option<&Keyspace>,
    key: &[u8],
    expected: Option<&[u8]>,
    new: Option<&[u8]>,
) -> Result<bool> {
    inner.check_writable()?;
    let id = keyspace.map_or(DEFAULT_KEYSPACE, Keyspace::id);
    loop {
        let mut tx = Transaction::new(inner.clone());
        if tx.get_at(id, keyspace, key)?.as_deref() != expected {
            return Ok(false);
        }
        match new {
            Some(value) => tx.put_at(id, keyspace, key, value, None)?,
            None => tx.delete_at(id, keyspace, key)?,
        }
        match tx.commit() {
            // Someone wrote the key (or the check could not tell, see `Transaction`) since
            // it was read: read it again.
            Err(Error::Conflict) => std::thread::yield_now(),
            other => return other.map(|()| true),
        }
    }
}

/// Runs `f` in a new transaction (`new` makes it) and commits it, again from a new snapshot
/// on a conflict: see [`crate::Db::transact`].
pub(crate) fn transact<T, E: From<Error>>(
    new: impl Fn() -> Transaction,
    mut f: impl FnMut(&mut Transaction) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    for _ in 0..TRANSACT_ATTEMPTS {
        let mut tx = new();
        let out = f(&mut tx)?;
        // Only the commit's own `Conflict` is retried: it is seen here before any conversion
        // into `E`, so an application error is never mistaken for one.
        match tx.commit() {
            Ok(()) => return Ok(out),
            // Give the transaction that won a moment to finish before trying again.
            Err(Error::Conflict) => std::thread::yield_now(),
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Conflict.into())
}
