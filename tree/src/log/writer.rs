//! Appending records to a log file.

use super::{FragmentType, HEADER_SIZE, PAGE_SIZE};
use crate::fs::WritableFile;
use crate::{Error, Result};

/// Appends records to a log file in the format described in [`crate::log`].
///
/// After any error from the file the writer refuses further work and repeats that error:
/// the file may end in a partial fragment, and appending after it would turn a torn tail
/// (silently dropped on recovery) into damage in the middle of the log (a hard error).
pub struct LogWriter {
    file: Box<dyn WritableFile>,
    /// Position inside the current page, derived from the file length so that a writer
    /// can continue a file that already holds records.
    page_offset: usize,
    failed: Option<Error>,
    /// A cut [`LogWriter::cut_back_to`] asked for and could not make.
    cut_pending: Option<u64>,
    /// Space is reserved ahead of the writes in steps of this many bytes (0: none).
    reserve_step: u64,
    /// The file's length with the space reserved so far.
    reserved: u64,
}

impl LogWriter {
    /// Writes records to the end of `file`, which may already hold records.
    pub fn new(file: Box<dyn WritableFile>) -> Self {
        let page_offset = (file.len() % PAGE_SIZE as u64) as usize;
        let reserved = file.len();
        LogWriter { file, page_offset, failed: None, cut_pending: None, reserve_step: 0, reserved }
    }

    /// Reserves disk space ahead of the writes, `step` bytes at a time
    /// ([`WritableFile::preallocate`]), for a log synced after every few records: a sync
    /// then writes the records alone, not also the file's new size. The space left over is
    /// cut off by [`LogWriter::finish`]; a crash leaves it as zeros after the last record,
    /// which a reader takes for the log's end.
    pub fn reserving(mut self, step: u64) -> Self {
        self.reserve_step = step;
        self
    }

    /// Cuts off the space reserved beyond the records, for a log that takes no more: the
    /// writer refuses further records afterwards. Only tidiness (a reader stops at the
    /// zeros anyway), so a failed cut is ignored, and the cut needs no sync of its own.
    pub fn finish(&mut self) {
        if self.failed.is_none() && self.reserved > self.file.len() {
            let _ = self.file.truncate(self.file.len());
        }
        let finished = std::io::Error::other("appending to a finished log");
        self.failed = Some(Error::io("appending", finished));
    }

    /// Appends one record, fragmenting it across pages as needed. The bytes reach the
    /// file's buffer; call [`LogWriter::flush`] or [`LogWriter::sync`] to make them durable.
    pub fn add_record(&mut self, data: &[u8]) -> Result<()> {
        self.check()?;
        self.reserve_for(data.len());
        let r = self.emit_parts(data, &[]);
        self.note(r)
    }

    /// Appends one record whose payload is `head` followed by `tail`, as
    /// [`LogWriter::add_record`] would the two joined, without joining them: a blob file's
    /// value record is its key's few bytes and then a value of up to gigabytes, which is
    /// written from where it lies.
    pub fn add_record_parts(&mut self, head: &[u8], tail: &[u8]) -> Result<()> {
        self.check()?;
        self.reserve_for(head.len() + tail.len());
        let r = self.emit_parts(head, tail);
        self.note(r)
    }

    /// Makes sure space is reserved for a record of `len` bytes (its fragment headers and a
    /// page's padding included), when the writer reserves space.
    fn reserve_for(&mut self, len: usize) {
        if self.reserve_step == 0 {
            return;
        }
        let fragments = (len / (PAGE_SIZE - HEADER_SIZE) + 1) as u64;
        let end = self.file.len() + len as u64 + (fragments + 1) * HEADER_SIZE as u64;
        if end <= self.reserved {
            return;
        }
        let target = end.next_multiple_of(self.reserve_step);
        match self.file.preallocate(target) {
            Ok(()) => self.reserved = target,
            // A full disk or a file system that cannot reserve: the appends themselves say
            // whether there is room, so writing goes on without reserving.
            Err(_) => self.reserve_step = 0,
        }
    }

    /// Hands buffered bytes to the operating system (survives a process crash).
    pub fn flush(&mut self) -> Result<()> {
        self.check()?;
        let r = self.file.flush();
        self.note(r)
    }

    /// Flushes and fsyncs (survives a power loss).
    pub fn sync(&mut self) -> Result<()> {
        self.check()?;
        let r = self.file.sync();
        self.note(r)
    }

    /// After a failure: cuts the file back to `len` (a length [`LogWriter::len`] returned
    /// before the refused records were added), so that a record whose write was reported as
    /// failed cannot be replayed by the next open, whole or torn. The writer stays failed.
    pub fn cut_back_to(&mut self, len: u64) -> Result<()> {
        debug_assert!(self.failed.is_some(), "only a failed log is cut back");
        let len = self.cut_pending.map_or(len, |pending| pending.min(len));
        self.cut_pending = Some(len);
        self.file.truncate(len)?;
        self.cut_pending = None;
        Ok(())
    }

    /// Makes a cut that [`LogWriter::cut_back_to`] could not: `Ok` once none is pending.
    pub fn finish_cut(&mut self) -> Result<()> {
        match self.cut_pending {
            Some(len) => self.cut_back_to(len),
            None => Ok(()),
        }
    }

    /// True while a cut [`LogWriter::cut_back_to`] could not make is pending: refused
    /// records may still be in the file, for the next open to replay.
    pub fn cut_pending(&self) -> bool {
        self.cut_pending.is_some()
    }

    /// True once a write or sync has failed: the writer refuses everything from then on.
    pub fn has_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Bytes written to the file so far, including any bytes it held before.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    /// True when the file is empty.
    pub fn is_empty(&self) -> bool {
        self.file.len() == 0
    }

    fn check(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn note(&mut self, r: Result<()>) -> Result<()> {
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// Writes `head ++ tail` as one record. Runs at least once, so that an empty record is
    /// written as an empty FULL fragment.
    fn emit_parts(&mut self, head: &[u8], tail: &[u8]) -> Result<()> {
        let total = head.len() + tail.len();
        let mut done = 0;
        let mut first = true;
        loop {
            let leftover = PAGE_SIZE - self.page_offset;
            if leftover < HEADER_SIZE {
                const ZEROS: [u8; HEADER_SIZE] = [0; HEADER_SIZE];
                self.file.append(&ZEROS[..leftover])?;
                self.page_offset = 0;
            }
            let avail = PAGE_SIZE - self.page_offset - HEADER_SIZE;
            let n = (total - done).min(avail);
            let last = done + n == total;
            let kind = match (first, last) {
                (true, true) => FragmentType::Full,
                (true, false) => FragmentType::First,
                (false, false) => FragmentType::Middle,
                (false, true) => FragmentType::Last,
            };
            // Bytes `done..done + n` of `head ++ tail`.
            let h = head.len();
            let a = &head[done.min(h)..(done + n).min(h)];
            let b = &tail[done.saturating_sub(h)..(done + n).saturating_sub(h)];
            let mut header = [0u8; HEADER_SIZE];
            let crc = crate::coding::crc32(&[&[kind as u8], a, b]);
            header[..4].copy_from_slice(&crc.to_le_bytes());
            header[4..6].copy_from_slice(&(n as u16).to_le_bytes());
            header[6] = kind as u8;
            self.file.append(&header)?;
            self.file.append(a)?;
            if !b.is_empty() {
                self.file.append(b)?;
            }
            self.page_offset += HEADER_SIZE + n;
            done += n;
            first = false;
            if last {
                return Ok(());
            }
        }
    }
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("len", &self.file.len())
            .field("page_offset", &self.page_offset)
            .field("failed", &self.failed)
            .finish()
    }
}
