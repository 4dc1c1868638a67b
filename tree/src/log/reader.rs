//! Reading records back from a log file, telling a torn tail from real damage.

use std::ops::Range;
use std::path::PathBuf;

use super::{fragment_crc, FragmentType, HEADER_SIZE, PAGE_SIZE};
use crate::coding::get_u32;
use crate::{Error, Result};

/// Reads the records of a whole log file held in memory.
///
/// # End of log and damage
///
/// Records are returned in order until the first fragment that is not valid (short header,
/// length running past its page or past the end of the file, type byte not 1–4 — which
/// includes a zero-filled region — or CRC mismatch) or the first fragment that does not
/// fit the FULL / FIRST MIDDLE* LAST grammar. What happens then depends on whether any
/// *valid* fragment follows the damage:
///
/// * The positions checked are the one right after the bad fragment (when its length field
///   keeps it inside its page and the file) and every later page boundary, since every
///   page starts with a fragment header. Checking arbitrary byte positions would cost a
///   CRC per byte and would, across a large file, eventually find a garbage CRC that
///   happens to match.
/// * If none is valid, the damage is a **torn tail**, what a crash in the middle of an
///   append leaves behind: the reader stops silently, returning `Ok(None)`, and
///   [`LogReader::dropped_tail_bytes`] reports how many bytes, from the start of the
///   unfinished record, were ignored. A FIRST (and MIDDLEs) without a LAST at the end of
///   the file is likewise a torn tail.
/// * If one is valid, a record in the middle of the log was lost: the reader returns
///   [`Error::Corruption`] naming the file and the offset where the damaged record starts.
///   Every record returned before the error is intact, so a caller may choose to keep them
///   (point-in-time recovery). The error is repeated by every later call.
///
/// Zeros from where a record would start to the end of the file are the log's end, neither
/// a torn tail nor damage: a writer reserves space ahead of its records
/// ([`super::LogWriter::reserving`]), and a crash leaves the unused part as zeros.
///
/// A FIRST or FULL fragment arriving while a record is still open, and a MIDDLE or LAST
/// without a FIRST followed by later valid data, are corruption by the same rule: the
/// writer never produces them, and valid data follows the gap.
///
/// The rule has a blind spot, accepted on purpose: if the damage destroys a fragment's
/// length field and every later record sits in the same (last) page, no checked position
/// holds valid data and those records are dropped as a tail. Scanning every byte of the
/// page instead would find fragments embedded inside record payloads (a value that
/// happens to contain log bytes) and so could fail recovery after an ordinary crash.
///
/// A power loss can, on some file systems, persist later pages of an unsynced append but
/// not earlier ones; such a hole followed by valid fragments is reported as corruption,
/// because this reader cannot tell it from damage to synced data.
///
/// Nothing here sizes an allocation from a length field before checking it against the
/// bytes present, and no input can make the reader panic.
#[derive(Debug)]
pub struct LogReader {
    path: PathBuf,
    data: Vec<u8>,
    pos: usize,
    last_record_offset: u64,
    last_record_end: u64,
    dropped_tail: u64,
    done: bool,
    error: Option<Error>,
}

/// What sits at one position of the file.
enum Fragment {
    /// The end of the file.
    Eof,
    /// A valid fragment; `next` is the position just after it.
    Valid { kind: FragmentType, payload: Range<usize>, next: usize },
    /// Not a valid fragment. `next` is where the following fragment would start if the
    /// length field is plausible.
    Bad { reason: &'static str, next: Option<usize> },
}

impl LogReader {
    /// Reads the log whose whole contents are `data` (typically from
    /// [`crate::fs::FileSystem::read_all`]); `path` is only used in errors.
    pub fn new(path: PathBuf, data: Vec<u8>) -> Self {
        LogReader {
            path,
            data,
            pos: 0,
            last_record_offset: 0,
            last_record_end: 0,
            dropped_tail: 0,
            done: false,
            error: None,
        }
    }

    /// The next record, an owned copy of its bytes, or `None` at the end of the log
    /// (including after a dropped torn tail). Owned because callers keep records (a decoded
    /// write batch borrows nothing) and multi-fragment records must be copied anyway.
    pub fn next_record(&mut self) -> Result<Option<Vec<u8>>> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.done {
            return Ok(None);
        }
        // Start offset and bytes so far of a record spread over several fragments.
        let mut open: Option<(usize, Vec<u8>)> = None;
        loop {
            self.pos = skip_page_tail(self.pos, self.data.len());
            let at = self.pos;
            match parse_fragment(&self.data, at) {
                Fragment::Eof => {
                    return match open {
                        Some((start, _)) => self.torn_tail(start),
                        None => {
                            self.done = true;
                            Ok(None)
                        }
                    };
                }
                Fragment::Bad { reason, next } => {
                    let start = open.as_ref().map_or(at, |(s, _)| *s);
                    return self.damage(start, at, next, reason);
                }
                Fragment::Valid { kind, payload, next } => {
                    self.pos = next;
                    let bytes = &self.data[payload];
                    match (kind, open.as_mut()) {
                        (FragmentType::Full, None) => {
                            self.last_record_offset = at as u64;
                            self.last_record_end = next as u64;
                            return Ok(Some(bytes.to_vec()));
                        }
                        (FragmentType::First, None) => open = Some((at, bytes.to_vec())),
                        (FragmentType::Middle, Some((_, buf))) => buf.extend_from_slice(bytes),
                        (FragmentType::Last, Some((start, buf))) => {
                            buf.extend_from_slice(bytes);
                            self.last_record_offset = *start as u64;
                            self.last_record_end = next as u64;
                            let record = std::mem::take(buf);
                            return Ok(Some(record));
                        }
                        (FragmentType::Full | FragmentType::First, Some((start, _))) => {
                            // This fragment is itself valid data after the unfinished
                            // record, so the gap cannot be a torn tail.
                            let start = *start;
                            return self.fail(start, "record interrupted by the start of another");
                        }
                        (FragmentType::Middle | FragmentType::Last, None) => {
                            return self.damage(at, at, Some(next), "fragment without a FIRST");
                        }
                    }
                }
            }
        }
    }

    /// File offset of the first fragment of the record last returned by
    /// [`LogReader::next_record`] (0 before any).
    pub fn last_record_offset(&self) -> u64 {
        self.last_record_offset
    }

    /// File offset just past the last fragment of the record last returned by
    /// [`LogReader::next_record`] (0 before any): after the last record, where the log's
    /// records end, without any zeros reserved or padded beyond them.
    pub fn last_record_end(&self) -> u64 {
        self.last_record_end
    }

    /// How many bytes at the end of the file were ignored as a torn tail (0 if none, or
    /// if the end has not been reached yet). The valid log is the first
    /// `file length - dropped_tail_bytes()` bytes.
    pub fn dropped_tail_bytes(&self) -> u64 {
        self.dropped_tail
    }

    /// Handles an invalid or out-of-place fragment at `bad`: corruption if any valid
    /// fragment follows it, otherwise a torn tail starting at `start`.
    fn damage(
        &mut self,
        start: usize,
        bad: usize,
        next: Option<usize>,
        reason: &'static str,
    ) -> Result<Option<Vec<u8>>> {
        match later_valid_fragment(&self.data, bad, next) {
            Some(valid) => {
                self.fail(start, format!("{reason} at offset {bad}; valid data follows at {valid}"))
            }
            None => self.torn_tail(start),
        }
    }

    fn torn_tail(&mut self, start: usize) -> Result<Option<Vec<u8>>> {
        // Nothing of a record reached zeros that run to the end: reserved space, not a tail.
        let reserved = self.data[start..].iter().all(|&b| b == 0);
        self.dropped_tail = if reserved { 0 } else { (self.data.len() - start) as u64 };
        self.pos = self.data.len();
        self.done = true;
        Ok(None)
    }

    fn fail(&mut self, at: usize, reason: impl Into<String>) -> Result<Option<Vec<u8>>> {
        let e = Error::corruption(self.path.clone(), at as u64, reason);
        self.error = Some(e.clone());
        Err(e)
    }
}

/// Moves past the zero padding at the end of a page, if `pos` is in it.
fn skip_page_tail(pos: usize, len: usize) -> usize {
    let left = PAGE_SIZE - pos % PAGE_SIZE;
    if left < HEADER_SIZE {
        (pos + left).min(len)
    } else {
        pos
    }
}

/// Decodes the fragment at `pos`, which must not be inside a page's padding.
fn parse_fragment(data: &[u8], pos: usize) -> Fragment {
    if pos >= data.len() {
        return Fragment::Eof;
    }
    let Some(header) = data.get(pos..pos + HEADER_SIZE) else {
        return Fragment::Bad { reason: "truncated fragment header", next: None };
    };
    let crc = get_u32(header, 0).unwrap_or(0);
    let len = u16::from_le_bytes([header[4], header[5]]) as usize;
    let kind_byte = header[6];
    let page_left = PAGE_SIZE - pos % PAGE_SIZE;
    if HEADER_SIZE + len > page_left {
        return Fragment::Bad { reason: "fragment length crosses a page boundary", next: None };
    }
    let payload = pos + HEADER_SIZE..pos + HEADER_SIZE + len;
    if payload.end > data.len() {
        return Fragment::Bad { reason: "truncated fragment payload", next: None };
    }
    let next = Some(payload.end);
    if kind_byte == 0 && len == 0 {
        return Fragment::Bad { reason: "zero-filled region", next };
    }
    let Some(kind) = FragmentType::from_u8(kind_byte) else {
        return Fragment::Bad { reason: "unknown fragment type", next };
    };
    if fragment_crc(kind_byte, &data[payload.clone()]) != crc {
        return Fragment::Bad { reason: "fragment checksum mismatch", next };
    }
    let next = payload.end;
    Fragment::Valid { kind, payload, next }
}

fn is_valid_at(data: &[u8], pos: usize) -> bool {
    let pos = skip_page_tail(pos, data.len());
    matches!(parse_fragment(data, pos), Fragment::Valid { .. })
}

/// The first position after a bad fragment at `bad` that holds a valid fragment, checking
/// `next` (right after the bad fragment) and every later page boundary.
fn later_valid_fragment(data: &[u8], bad: usize, next: Option<usize>) -> Option<usize> {
    if let Some(n) = next.filter(|&n| n < data.len()) {
        if is_valid_at(data, n) {
            return Some(n);
        }
    }
    let mut boundary = (bad / PAGE_SIZE + 1) * PAGE_SIZE;
    while boundary < data.len() {
        if is_valid_at(data, boundary) {
            return Some(boundary);
        }
        boundary += PAGE_SIZE;
    }
    None
}
