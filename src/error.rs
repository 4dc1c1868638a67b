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
    /// The caller passed something bloomkv cannot accept.
    InvalidArgument(String),
    /// The database was closed, or a background error stopped it.
    Closed,
    /// A background flush or compaction failed; the database accepts no more writes.
    Background(Arc<Error>),
}

impl Error {
    /// A corruption error at `offset` in `file`.
    pub fn corruption(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { file: file.into(), offset, reason: reason.into() }
    }

    /// A corruption error found by a decoder that was handed bare bytes; the caller that
    /// knows the file fills it in with [`Error::in_file`].
    pub(crate) fn bad_bytes(offset: u64, reason: impl Into<String>) -> Self {
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
            Error::Io { context, source } => write!(f, "I/O error while {context}: {source}"),
            Error::Corruption { file, offset, reason } => {
                write!(f, "corruption in {} at offset {offset}: {reason}", file.display())
            }
            Error::Locked { path } => {
                write!(f, "database is locked by another handle ({})", path.display())
            }
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::Closed => write!(f, "database is closed"),
            Error::Background(e) => write!(f, "background work failed: {e}"),
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
