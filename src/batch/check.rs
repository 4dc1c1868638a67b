//! Checking a batch before it is written: sizes of keys and values, and keyspaces.

use super::{BatchOp, WriteBatch};
use crate::key::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::version::edit::{KeyspaceId, DEFAULT_KEYSPACE};
use crate::{Error, Result};

/// Why [`WriteBatch::check`] refused a batch.
#[derive(Debug)]
pub(crate) enum BadOp {
    /// A key or value over the limits ([`Error::KeyTooLarge`] or [`Error::ValueTooLarge`]).
    Size(Error),
    /// An op on a keyspace the caller does not know.
    Keyspace(KeyspaceId),
}

/// Checks a range delete's bound, which may be one byte longer than a key (see
/// `key_range::MAX_RANGE_BOUND_BYTES`).
pub(crate) fn check_range_bound(bound: &[u8]) -> Result<()> {
    if bound.len() > crate::key_range::MAX_RANGE_BOUND_BYTES {
        return Err(Error::KeyTooLarge { len: bound.len() });
    }
    Ok(())
}

/// Checks one operation against [`MAX_KEY_BYTES`] and [`MAX_VALUE_BYTES`].
pub(crate) fn check_entry_size(key: &[u8], value: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::KeyTooLarge { len: key.len() });
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::ValueTooLarge { len: value.len() });
    }
    Ok(())
}

impl WriteBatch {
    /// Checks every operation, in one pass, against [`MAX_KEY_BYTES`] and
    /// [`MAX_VALUE_BYTES`] and for a keyspace other than the default one that `known`
    /// accepts, reporting the first that fails.
    pub(crate) fn check(&self, known: impl Fn(KeyspaceId) -> bool) -> Result<(), BadOp> {
        for (keyspace, op) in self.iter() {
            match op {
                BatchOp::Put { key, value } => check_entry_size(key, value),
                BatchOp::Merge { key, operand } => check_entry_size(key, operand),
                BatchOp::MergeExpiring { key, stored } => {
                    check_entry_size(key, stored.get(crate::key::MERGE_STAMP_LEN..).unwrap_or(&[]))
                }
                BatchOp::PutTtl { stored, .. }
                    if crate::key::split_expiring(stored).is_some_and(|(ttl, _)| ttl == 0) =>
                {
                    Err(crate::Error::InvalidArgument("ttl must not be zero".into()))
                }
                BatchOp::PutExpiring { key, stored } | BatchOp::PutTtl { key, stored } => {
                    check_entry_size(key, stored.get(crate::key::EXPIRY_LEN..).unwrap_or(&[]))
                }
                // The value is in its blob file, checked against its own limit when written.
                BatchOp::Delete { key } | BatchOp::BlobPut { key, .. } => {
                    check_entry_size(key, &[])
                }
                BatchOp::DeleteRange { start, end } => {
                    check_range_bound(start).and_then(|()| check_range_bound(end))
                }
                BatchOp::Reserved => Ok(()),
            }
            .map_err(BadOp::Size)?;
            if keyspace != DEFAULT_KEYSPACE && !known(keyspace) {
                return Err(BadOp::Keyspace(keyspace));
            }
        }
        Ok(())
    }
}
