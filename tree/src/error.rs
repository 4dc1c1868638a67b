//! The one error type of bloomkv.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Result alias used throughout bloomkv.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in bloomkv.
///
/// `Error` is `Clone` (I/O errors are shared behind an `Arc`) so that a failure in a
/// background flush or compaction can be handed to every later caller.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with what bloomkv was doing when it happened.
    Io {
        /// What was being attempted, usually naming the file.
        context: String,
        /// The underlying error.
        source: Arc<std::io::Error>,
    },
    /// Bytes on disk (or handed to a decoder) are not what bloomkv wrote.
    Corruption {
        /// The file holding the damage (empty when the decoder was given bare bytes).
        file: PathBuf,
        /// Byte offset in that file where the damaged structure starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// Another handle (in this or another process) holds the database's LOCK file.
    Locked {
        /// The LOCK file.
        path: PathBuf,
    },
    /// The caller passed something bloomkv cannot accept (invalid options, a bad filter
    /// policy, ...). The cases a caller may want to handle have variants of their own.
    InvalidArgument(String),
    /// A write, `flush`, `compact` or `sync` on a handle from `Db::open_read_only`.
    ReadOnly,
    /// No database at `path`, and the options say not to create one
    /// (`create_if_missing(false)`, or a read-only open).
    NotFound {
        /// The directory.
        path: PathBuf,
    },
    /// A database already exists at `path`, and the options say it must not
    /// (`error_if_exists(true)`).
    AlreadyExists {
        /// The directory.
        path: PathBuf,
    },
    /// `path` holds files that are not a database's, so no database is created there.
    NotADatabase {
        /// The directory.
        path: PathBuf,
        /// The names of the files that are not the database's (sorted).
        foreign: Vec<String>,
    },
    /// A key longer than [`crate::MAX_KEY_BYTES`]; nothing of the write was applied.
    KeyTooLarge {
        /// The key's length.
        len: usize,
    },
    /// A value larger than [`crate::MAX_VALUE_BYTES`] where it must be held whole (a batch,
    /// a transaction, a merge, a keyspace without a `blob_threshold`), or larger than
    /// [`crate::MAX_LARGE_VALUE_BYTES`]; nothing of the write was applied.
    ValueTooLarge {
        /// The value's length.
        len: usize,
    },
    /// A write batch whose encoding is larger than `Options::max_batch_bytes`;
    /// nothing of it was applied. Split it into smaller batches (each one is atomic on its
    /// own), or raise the limit.
    BatchTooLarge {
        /// The batch's encoded size (`WriteBatch::approximate_bytes`); for a single
        /// `put`, `delete` or `delete_range`, the bytes of its key(s) and value.
        bytes: usize,
        /// The limit it exceeds.
        limit: usize,
    },
    /// The database was closed, or a background error stopped it.
    Closed,
    /// There is no such keyspace: it was dropped (by `Db::drop_keyspace`), or never
    /// existed in this database (a name given to `drop_keyspace`).
    KeyspaceDropped {
        /// The keyspace's name (or its id, when only the id is known).
        name: String,
    },
    /// An open gave a keyspace a setting other than the one its database records, without
    /// [`crate::options::KeyspaceOptions::change_settings`] (or `Options::change_settings`
    /// for the default keyspace): nothing was opened or recorded. Give the recorded setting
    /// (for a merge operator or compaction filter, the object of that name), or set
    /// `change_settings` to record the new one.
    SettingMismatch {
        /// The keyspace (`"default"` for the one `Options` configures).
        keyspace: String,
        /// The setting, as its option is named: `"default_ttl"`, `"prefix_extractor"`,
        /// `"merge_operator"` or `"compaction_filter"`.
        setting: &'static str,
        /// What the database records.
        recorded: String,
        /// What the open gave.
        given: String,
    },
    /// A `Keyspace` handle given to another database than the one it came from
    /// (or to a later opening of the same directory), directly or through a
    /// `WriteBatch`; nothing was read or written.
    ForeignKeyspace {
        /// The handle's keyspace name.
        name: String,
    },
    /// A keyspace's [`crate::compaction_filter::CompactionFilter`] panicked, or gave a replacement value larger
    /// than [`crate::MAX_VALUE_BYTES`], and the keyspace stops on such failures
    /// ([`crate::options::KeyspaceOptions::stop_on_compaction_filter_error`]; otherwise the value is
    /// kept and the compaction goes on): the compaction was abandoned with its inputs intact.
    CompactionFilter {
        /// The keyspace whose filter it was.
        keyspace: String,
        /// What went wrong (for a panic, its message when it has one).
        reason: String,
    },
    /// A keyspace's [`crate::merge::MergeOperator`] failed to combine a key's merge operands: it
    /// returned an error (a malformed value, say), panicked, or made a value larger than
    /// [`crate::MAX_VALUE_BYTES`]. The read fails; nothing stored is changed, compaction
    /// keeps the operands as they are, and a put or delete of the key replaces them. Or, for
    /// a write, the operator refused an operand ([`crate::merge::MergeOperator::check_operand`]):
    /// nothing of the write was written.
    Merge {
        /// The keyspace whose operator it was.
        keyspace: String,
        /// What went wrong (the operator's message, or the panic's).
        reason: String,
    },
    /// A read met merge operands (`Db::merge`) in a keyspace that has no
    /// [`crate::merge::MergeOperator`] set (operators are not recorded in the manifest: give it
    /// again at every open), or a merge was written to such a keyspace.
    MergeOperatorMissing {
        /// The keyspace.
        keyspace: String,
    },
    /// A `Transaction`'s commit found that something it read was written after its
    /// snapshot; nothing of it was written. Run the transaction again from a new snapshot
    /// (`Db::transact` does).
    Conflict,
    /// A background flush or compaction failed; the database accepts no more writes.
    Background(Arc<Error>),
    /// A call from inside an `EventListener` callback that writes or waits for the
    /// engine's work — a write (of the database, a keyspace or a transaction), `sync`,
    /// `flush`, `compact`, an ingest, creating or dropping a keyspace, `resume`, `close` —
    /// refused before it did anything. The callback runs on a thread such a call may have to
    /// wait for (the flush thread, the holder of the compaction slot, the write queue's
    /// leader), so it would wait for itself. Reads are allowed; hand anything else to a
    /// thread of your own.
    CalledFromListener,
}

impl Error {
    /// A corruption error at `offset` in `file`.
    pub fn corruption(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { file: file.into(), offset, reason: reason.into() }
    }

    /// A corruption error found by a decoder that was handed bare bytes; the caller that
    /// knows the file fills it in with [`Error::in_file`].
    pub fn bad_bytes(offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { file: PathBuf::new(), offset, reason: reason.into() }
    }

    /// An I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source: Arc::new(source) }
    }

    /// Attaches a file and a base offset to a corruption error raised by a decoder that
    /// only saw a slice of that file. Other errors pass through unchanged.
    pub fn in_file(self, file: &Path, base_offset: u64) -> Self {
        match self {
            Error::Corruption { file: f, offset, reason } if f.as_os_str().is_empty() => {
                Error::Corruption { file: file.to_path_buf(), offset: base_offset + offset, reason }
            }
            other => other,
        }
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The cause is the error's `source()`, not part of the message: error reporters
            // that print the chain would otherwise show it twice.
            Error::Io { context, .. } => write!(f, "I/O error while {context}"),
            Error::Corruption { file, offset, reason } => {
                write!(f, "corruption in {} at offset {offset}: {reason}", file.display())
            }
            Error::Locked { path } => {
                write!(f, "database is locked by another handle ({})", path.display())
            }
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::ReadOnly => write!(f, "the database was opened read-only"),
            Error::NotFound { path } => write!(f, "no database in {}", path.display()),
            Error::AlreadyExists { path } => {
                write!(
                    f,
                    "a database already exists in {} (error_if_exists is set)",
                    path.display()
                )
            }
            Error::NotADatabase { path, foreign } => {
                let shown: Vec<String> = foreign.iter().take(3).map(|n| format!("{n:?}")).collect();
                let more = match foreign.len() {
                    n if n > 3 => format!(" and {} more", n - 3),
                    _ => String::new(),
                };
                write!(
                    f,
                    "{} is not empty and not a bloomkv database (it holds {}{more}); a \
                     database is only created in a new or empty directory",
                    path.display(),
                    shown.join(", ")
                )
            }
            Error::KeyTooLarge { len } => write!(
                f,
                "key of {len} bytes is longer than MAX_KEY_BYTES ({})",
                crate::MAX_KEY_BYTES
            ),
            Error::ValueTooLarge { len } if *len as u64 > crate::MAX_LARGE_VALUE_BYTES => write!(
                f,
                "value of {len} bytes is larger than MAX_LARGE_VALUE_BYTES ({})",
                crate::MAX_LARGE_VALUE_BYTES
            ),
            Error::ValueTooLarge { len } => write!(
                f,
                "value of {len} bytes is larger than MAX_VALUE_BYTES ({}); only a single put \
                 into a keyspace with a blob_threshold (no default_ttl) takes values up to \
                 MAX_LARGE_VALUE_BYTES",
                crate::MAX_VALUE_BYTES
            ),
            Error::BatchTooLarge { bytes, limit } => write!(
                f,
                "write batch of {bytes} bytes is larger than max_batch_bytes ({limit}); split it \
                 or raise the limit"
            ),
            Error::Closed => write!(f, "database is closed"),
            Error::KeyspaceDropped { name } => {
                write!(f, "keyspace {name} was dropped or does not exist")
            }
            Error::SettingMismatch { keyspace, setting, recorded, given } => write!(
                f,
                "keyspace {keyspace} records {setting} {recorded}, but {given} was given; give \
                 the recorded one, or set change_settings(true) to record the new one"
            ),
            Error::ForeignKeyspace { name } => write!(
                f,
                "the handle on keyspace {name} belongs to another database, or to an earlier \
                 opening of this one"
            ),
            Error::CompactionFilter { keyspace, reason } => {
                write!(f, "the compaction filter of keyspace {keyspace} failed: {reason}")
            }
            Error::Merge { keyspace, reason } => {
                write!(f, "the merge operator of keyspace {keyspace} failed: {reason}")
            }
            Error::MergeOperatorMissing { keyspace } => {
                write!(f, "keyspace {keyspace} holds merge operands but has no merge operator")
            }
            Error::Conflict => write!(
                f,
                "transaction conflict: a key or range it read was written after its snapshot"
            ),
            Error::Background(_) => write!(f, "background work failed"),
            Error::CalledFromListener => write!(
                f,
                "called from an event listener's callback, which may read the database but \
                 not write, flush, compact, ingest, change keyspaces, resume or close it (it \
                 runs on a thread that call may wait for): hand the call to another thread"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source.as_ref()),
            Error::Background(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// A chain printer (anyhow, eyre, the tool) shows each cause once: the message and the
    /// `source()` never repeat each other.
    #[test]
    fn wrapped_errors_leave_their_cause_to_source() {
        let io = Error::io("reading /db/000007.sst", std::io::ErrorKind::UnexpectedEof.into());
        let cause = io.source().expect("an I/O error has its cause as source").to_string();
        assert_eq!(io.to_string(), "I/O error while reading /db/000007.sst");
        assert!(!io.to_string().contains(&cause));

        let bg = Error::Background(Arc::new(io.clone()));
        assert_eq!(bg.to_string(), "background work failed");
        let inner = bg.source().expect("the background error's cause");
        assert_eq!(inner.to_string(), io.to_string());
        assert_eq!(inner.source().map(|c| c.to_string()), Some(cause));
    }
}
