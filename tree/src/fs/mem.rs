//! [`MemFile`]: one file held in memory, both writable and readable, for tests and
//! benchmarks that build or read tables and logs without touching a disk. (For a whole
//! database in memory, with power loss and faults, use [`super::FaultFs`].)

use std::sync::{Arc, Mutex, MutexGuard};

use super::{RandomAccessFile, WritableFile};
use crate::{Error, Result};

/// A growable byte buffer that is a [`WritableFile`] and a [`RandomAccessFile`] at once.
/// Clones share the bytes, so a test can keep one clone while a writer owns another, then
/// read what was written.
///
/// ```
/// use bloomkv::fs::{MemFile, RandomAccessFile, WritableFile};
/// let file = MemFile::new();
/// let mut w = file.clone();
/// w.append(b"hello").unwrap();
/// let mut buf = [0u8; 4];
/// file.read_exact_at(&mut buf, 1).unwrap();
/// assert_eq!(&buf, b"ello");
/// assert!(file.read_exact_at(&mut buf, 3).is_err()); // past the end
/// assert_eq!(file.contents(), b"hello");
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemFile(Arc<Mutex<Vec<u8>>>);

impl MemFile {
    /// An empty file.
    pub fn new() -> Self {
        MemFile::default()
    }

    /// A copy of the bytes written so far.
    pub fn contents(&self) -> Vec<u8> {
        self.bytes().clone()
    }

    fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
        // A panic while holding the lock cannot leave the bytes half-updated.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl From<Vec<u8>> for MemFile {
    fn from(data: Vec<u8>) -> Self {
        MemFile(Arc::new(Mutex::new(data)))
    }
}

impl WritableFile for MemFile {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.bytes().extend_from_slice(data);
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.bytes().len() as u64
    }
}

impl RandomAccessFile for MemFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let data = self.bytes();
        let range = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(buf.len())?))
            .filter(|r| r.end <= data.len());
        match range {
            Some(r) => {
                buf.copy_from_slice(&data[r]);
                Ok(())
            }
            None => Err(Error::io(
                format!(
                    "reading {} bytes at {offset} of a {}-byte memory file",
                    buf.len(),
                    data.len()
                ),
                std::io::ErrorKind::UnexpectedEof.into(),
            )),
        }
    }
    fn size(&self) -> u64 {
        self.bytes().len() as u64
    }
}
