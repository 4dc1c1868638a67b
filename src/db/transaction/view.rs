//! A transaction's reads ([`crate::Readable`]): in its own keyspace, and through
//! [`TransactionKeyspace`] in any other.

use super::{Transaction, TransactionCursor, TransactionIter};
use crate::db::readable::sealed::{Sealed, Token};
use crate::db::readable::{Bounds, BoundsRef};
use crate::db::Keyspace;
use crate::version::edit::KeyspaceId;
use crate::{Readable, Result, Value};
use bloomkv_tree::read::search::Stored;

// Named only by the rustdoc.
#[cfg(doc)]
use crate::Error;

/// A transaction's view of one keyspace, from [`Transaction::keyspace`]: its reads are the
/// transaction's — its snapshot with its writes in that keyspace over it — and are recorded
/// in the transaction's read set, checked at its commit like those of the transaction's own
/// keyspace. Read with [`Readable`]; write with the transaction's `_in` methods
/// ([`Transaction::put_in`], ...).
///
/// It borrows the transaction, so it ends before the transaction writes again: take a new
/// one after a write to read that write back.
#[derive(Clone, Copy)]
pub struct TransactionKeyspace<'a> {
    tx: &'a Transaction,
    id: KeyspaceId,
    /// `None`: the default keyspace, read through the transaction itself.
    keyspace: Option<&'a Keyspace>,
}

impl std::fmt::Debug for TransactionKeyspace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.keyspace.map_or("default", Keyspace::name);
        f.debug_struct("TransactionKeyspace").field("keyspace", &name).finish_non_exhaustive()
    }
}

impl Transaction {
    /// A read view of the transaction in `keyspace` (see [`TransactionKeyspace`]): what
    /// the transaction's own reads are in its keyspace, there.
    ///
    /// Fails with [`Error::ForeignKeyspace`] for a handle of another database. A keyspace the
    /// transaction's snapshot does not have (dropped before, or created after, the
    /// transaction began) fails the view's reads with [`Error::KeyspaceDropped`], except
    /// those the transaction's own writes there answer.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use bloomkv::Readable;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let accounts = db.keyspace("accounts", bloomkv::KeyspaceOptions::default())?;
    /// accounts.put("alice", "100")?;
    ///
    /// let mut tx = db.transaction();
    /// let alice = tx.keyspace(&accounts)?.get("alice")?; // recorded: checked at commit
    /// assert_eq!(alice.as_deref(), Some(&b"100"[..]));
    /// tx.put_in(&accounts, "bob", "30")?;
    /// let keys: Vec<_> = tx.keyspace(&accounts)?.range(..).map(|kv| kv.map(|(k, _)| k)).collect::<bloomkv::Result<_>>()?;
    /// assert_eq!(keys, [&b"alice"[..], b"bob"]); // its own write, in that keyspace
    /// accounts.put("alice", "0")?; // written after the transaction read it
    /// assert!(matches!(tx.commit(), Err(bloomkv::Error::Conflict)));
    /// # Ok(()) }
    /// ```
    pub fn keyspace<'a>(&'a self, keyspace: &'a Keyspace) -> Result<TransactionKeyspace<'a>> {
        let id = self.id_of(keyspace)?;
        Ok(TransactionKeyspace { tx: self, id, keyspace: Some(keyspace) })
    }

    /// The view of the transaction's own keyspace, which its reads go through.
    #[inline]
    fn home(&self) -> TransactionKeyspace<'_> {
        TransactionKeyspace { tx: self, id: self.home_id(), keyspace: self.home.as_ref() }
    }
}

impl Sealed for TransactionKeyspace<'_> {
    #[inline]
    fn read_one(&self, _: Token, key: &[u8]) -> Result<Option<Value>> {
        self.tx.get_at(self.id, self.keyspace, key)
    }

    fn read_stored(&self, _: Token, key: &[u8]) -> Result<Option<Stored>> {
        self.tx.get_stored_at(self.id, self.keyspace, key)
    }

    #[inline]
    fn read_many<K: AsRef<[u8]>>(&self, _: Token, keys: &[K]) -> Result<Vec<Option<Value>>> {
        self.tx.multi_get_at(self.id, self.keyspace, keys)
    }

    fn open_iter(&self, _: Token, (lo, hi): BoundsRef<'_>) -> <Self as Readable>::Iter {
        let bounds = (lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec));
        self.tx.range_at(self.id, self.keyspace, bounds)
    }

    fn open_cursor(&self, _: Token, bounds: Bounds) -> <Self as Readable>::Cursor {
        self.tx.cursor_at(self.id, self.keyspace, bounds)
    }

    fn probe_prefixes<P: AsRef<[u8]>>(&self, _: Token, prefixes: &[P]) -> Result<Vec<bool>> {
        self.tx.prefixes_exist_at(self.id, self.keyspace, prefixes)
    }
}

impl Readable for TransactionKeyspace<'_> {
    type Iter = TransactionIter;
    type Cursor = TransactionCursor;
}

impl Sealed for Transaction {
    #[inline]
    fn read_one(&self, t: Token, key: &[u8]) -> Result<Option<Value>> {
        self.home().read_one(t, key)
    }

    fn read_stored(&self, t: Token, key: &[u8]) -> Result<Option<Stored>> {
        self.home().read_stored(t, key)
    }

    #[inline]
    fn read_many<K: AsRef<[u8]>>(&self, t: Token, keys: &[K]) -> Result<Vec<Option<Value>>> {
        self.home().read_many(t, keys)
    }

    fn open_iter(&self, t: Token, bounds: BoundsRef<'_>) -> <Self as Readable>::Iter {
        self.home().open_iter(t, bounds)
    }

    fn open_cursor(&self, t: Token, bounds: Bounds) -> <Self as Readable>::Cursor {
        self.home().open_cursor(t, bounds)
    }

    fn probe_prefixes<P: AsRef<[u8]>>(&self, t: Token, prefixes: &[P]) -> Result<Vec<bool>> {
        self.home().probe_prefixes(t, prefixes)
    }
}

impl Readable for Transaction {
    type Iter = TransactionIter;
    type Cursor = TransactionCursor;
}
