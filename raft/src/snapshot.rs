//! The snapshot format, and the files snapshots live in.
//!
//! A snapshot is one file, written front to back in one pass and read the same way:
//!
//! ```text
//! magic    8 bytes   "bkvraft2"
//! hlen     u32 LE    length of the header (at most 16 MiB)
//! header   hlen      postcard `Header`: last applied log id, last membership
//! pairs    repeated: klen u32 LE, key, vlen u32 LE, value; keys ascending, each whole,
//!          under "client/" (the sessions) or "data/"
//! end      u32 LE    0xFFFF_FFFF, where the next klen would be
//! count    u64 LE    number of pairs
//! crc      u32 LE    CRC-32 (IEEE) of every byte before it
//! ```
//!
//! Version 1 (magic "bkvraft1", written before sessions existed) is read too: its pairs are the
//! data alone, keys without "data/".
//!
//! The header repeats what openraft's `SnapshotMeta` says of the state, so a snapshot is
//! checked against the meta it is installed with. A reader bounds every length by bloomkv's
//! key and value limits before it allocates, so a damaged length is an error, not a huge
//! allocation.
//!
//! Files live in `<database dir>/snapshots/`: `<name>.snap` for a complete snapshot,
//! `<name>.part` while one is written or received. A file becomes a snapshot by an fsync and a
//! rename (then an fsync of the directory); the database's `snapshot/current` record names the
//! current one and is written only after that, and the previous file is removed only after
//! the record is durable. So a crash at any point leaves the record naming a complete file;
//! `open` removes every other file it finds there.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bloomkv::Readable;
use openraft::{AnyError, BasicNode, LogId, SnapshotMeta, StoredMembership};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use crate::{decode, encode, keys, NodeId};

const MAGIC: &[u8; 8] = b"bkvraft2";
const MAGIC_V1: &[u8; 8] = b"bkvraft1";
const END: u32 = u32::MAX;
/// The header holds a log id and a membership: far below bloomkv's value limit, which it must
/// fit anyway, as the membership is stored as one value.
const MAX_HEADER_BYTES: usize = bloomkv::MAX_VALUE_BYTES;
/// The subdirectory of the database's directory that holds snapshot files.
pub(crate) const DIR: &str = "snapshots";
const DONE: &str = "snap";
const PART: &str = "part";

/// What a snapshot says of the state it holds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct Header {
    pub last_applied: Option<LogId<NodeId>>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
}

impl Header {
    pub fn of(meta: &SnapshotMeta<NodeId, BasicNode>) -> Header {
        Header { last_applied: meta.last_log_id, last_membership: meta.last_membership.clone() }
    }
}

/// Counts and checksums what passes through to `out`.
struct Summing<W> {
    out: W,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> Summing<W> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.crc.update(bytes);
        self.len += bytes.len() as u64;
        self.out.write_all(bytes)
    }
}

/// Writes a snapshot of `view` (a bloomkv snapshot, so the data, the applied id and the
/// membership are of one moment) to `out`, one pair at a time; returns its header and length.
pub(crate) fn write(view: &bloomkv::Snapshot, out: impl Write) -> Result<(Header, u64), AnyError> {
    let header = Header {
        last_applied: decode(view.get(keys::APPLIED))?,
        last_membership: decode(view.get(keys::MEMBERSHIP))?.unwrap_or_default(),
    };
    let io = |e: io::Error| AnyError::new(&e);
    let mut w =
        Summing { out: BufWriter::with_capacity(1 << 20, out), crc: Default::default(), len: 0 };
    let header_bytes = encode(&header)?;
    w.put(MAGIC).map_err(io)?;
    w.put(&len32(header_bytes.len())?.to_le_bytes()).map_err(io)?;
    w.put(&header_bytes).map_err(io)?;
    let mut count = 0u64;
    for item in view.range(keys::CLIENT.to_vec()..keys::DATA_END.to_vec()) {
        let (key, value) = item.map_err(|e| AnyError::new(&e))?;
        w.put(&len32(key.len())?.to_le_bytes()).map_err(io)?;
        w.put(&key).map_err(io)?;
        w.put(&len32(value.len())?.to_le_bytes()).map_err(io)?;
        w.put(&value).map_err(io)?;
        count += 1;
    }
    w.put(&END.to_le_bytes()).map_err(io)?;
    w.put(&count.to_le_bytes()).map_err(io)?;
    let crc = w.crc.clone().finalize();
    w.out.write_all(&crc.to_le_bytes()).map_err(io)?;
    w.out.flush().map_err(io)?;
    Ok((header, w.len + 4))
}

fn len32(len: usize) -> Result<u32, AnyError> {
    // bloomkv's own limits keep keys and values far below this; the check keeps a length
    // from being cut silently if those limits ever grow.
    u32::try_from(len).ok().filter(|&l| l != END).ok_or_else(|| AnyError::error("entry too long"))
}

/// Reads a snapshot front to back, checking its framing, limits and checksum as it goes.
pub(crate) struct Reader<R> {
    src: R,
    file: PathBuf,
    crc: crc32fast::Hasher,
    offset: u64,
    header: Header,
    count: u64,
    finished: bool,
    /// What a key read from the file lacks of its stored form: `data/` in version 1.
    key_prefix: &'static [u8],
}

impl Reader<BufReader<File>> {
    /// Opens the snapshot in `path` and reads its header.
    pub fn open(path: &Path) -> bloomkv::Result<Self> {
        let file = File::open(path).map_err(|e| io_error(path, "opening", e))?;
        Reader::new(BufReader::with_capacity(1 << 20, file), path)
    }
}

impl<R: Read> Reader<R> {
    /// Reads the header of the snapshot `src` holds; `file` names it in errors.
    pub fn new(src: R, file: &Path) -> bloomkv::Result<Self> {
        let mut r = Reader {
            src,
            file: file.to_path_buf(),
            crc: Default::default(),
            offset: 0,
            header: Header::default(),
            count: 0,
            finished: false,
            key_prefix: b"",
        };
        let mut magic = [0u8; 8];
        r.fill(&mut magic, "magic")?;
        match &magic {
            MAGIC => {}
            MAGIC_V1 => r.key_prefix = keys::DATA,
            _ => return Err(r.bad(0, "not a bloomkv-raft snapshot")),
        }
        let header_len = r.u32("header length")? as usize;
        if header_len > MAX_HEADER_BYTES {
            return Err(r.bad(8, &format!("header of {header_len} bytes")));
        }
        let mut header = vec![0u8; header_len];
        r.fill(&mut header, "header")?;
        r.header = postcard::from_bytes(&header).map_err(|e| r.bad(12, &format!("header: {e}")))?;
        Ok(r)
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The next pair (its key as stored, under `client/` or `data/`), or `None` after the last
    /// one once the count, the checksum and the end of the file check out. With `keep_value` false the
    /// value is checked and skipped, and an empty vector stands for it.
    pub fn next_pair(&mut self, keep_value: bool) -> bloomkv::Result<Option<(Vec<u8>, Vec<u8>)>> {
        if self.finished {
            return Ok(None);
        }
        let at = self.offset;
        let key_len = self.u32("key length")?;
        if key_len == END {
            return self.finish().map(|()| None);
        }
        let max_key = bloomkv::MAX_KEY_BYTES - self.key_prefix.len();
        if key_len as usize > max_key {
            return Err(self.bad(at, &format!("key of {key_len} bytes is over {max_key}")));
        }
        let mut key = self.key_prefix.to_vec();
        key.extend(self.take(key_len as usize, true, "key")?);
        // Only the replicated range: an install must never overwrite the log or the vote.
        if ![keys::CLIENT, keys::CLUSTER, keys::DATA].iter().any(|p| key.starts_with(p)) {
            return Err(self.bad(at, "a key outside client/, cluster/ and data/"));
        }
        let at = self.offset;
        let value_len = self.u32("value length")? as usize;
        if value_len > bloomkv::MAX_VALUE_BYTES {
            let max = bloomkv::MAX_VALUE_BYTES;
            return Err(self.bad(at, &format!("value of {value_len} bytes is over {max}")));
        }
        let value = self.take(value_len, keep_value, "value")?;
        self.count += 1;
        Ok(Some((key, value)))
    }

    fn finish(&mut self) -> bloomkv::Result<()> {
        let at = self.offset;
        let mut count = [0u8; 8];
        self.fill(&mut count, "pair count")?;
        if u64::from_le_bytes(count) != self.count {
            let said = u64::from_le_bytes(count);
            return Err(self.bad(at, &format!("says {said} pairs, holds {}", self.count)));
        }
        let want = self.crc.clone().finalize();
        let mut crc = [0u8; 4];
        self.fill(&mut crc, "checksum")?;
        if u32::from_le_bytes(crc) != want {
            return Err(self.bad(at + 8, "checksum mismatch"));
        }
        let mut more = [0u8; 1];
        match self.src.read(&mut more) {
            Ok(0) => {}
            Ok(_) => return Err(self.bad(self.offset, "bytes after the checksum")),
            Err(e) => return Err(io_error(&self.file, "reading", e)),
        }
        self.finished = true;
        Ok(())
    }

    /// Reads `n` bytes into a new vector, or (with `keep` false) through a small buffer.
    fn take(&mut self, n: usize, keep: bool, what: &str) -> bloomkv::Result<Vec<u8>> {
        if keep {
            // `n` is within bloomkv's limits, checked by the caller.
            let mut bytes = vec![0u8; n];
            self.fill(&mut bytes, what)?;
            return Ok(bytes);
        }
        let mut buf = [0u8; 8 << 10];
        let mut left = n;
        while left > 0 {
            let step = left.min(buf.len());
            self.fill(&mut buf[..step], what)?;
            left -= step;
        }
        Ok(Vec::new())
    }

    fn u32(&mut self, what: &str) -> bloomkv::Result<u32> {
        let mut b = [0u8; 4];
        self.fill(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads exactly `buf.len()` bytes and adds them to the checksum.
    fn fill(&mut self, buf: &mut [u8], what: &str) -> bloomkv::Result<()> {
        match self.src.read_exact(buf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(self.bad(self.offset, &format!("cut short in the {what}")));
            }
            Err(e) => return Err(io_error(&self.file, "reading", e)),
        }
        self.crc.update(buf);
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn bad(&self, offset: u64, reason: &str) -> bloomkv::Error {
        bloomkv::Error::Corruption {
            file: self.file.clone(),
            offset,
            reason: format!("bad snapshot: {reason}"),
        }
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = bloomkv::Result<(Vec<u8>, Vec<u8>)>;

    /// Each pair with its key as the state machine stores it; an error ends the iteration.
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_pair(true) {
            Ok(Some(pair)) => Some(Ok(pair)),
            Ok(None) => None,
            Err(e) => {
                self.finished = true;
                Some(Err(e))
            }
        }
    }
}

fn io_error(path: &Path, doing: &str, source: io::Error) -> bloomkv::Error {
    bloomkv::Error::Io {
        context: format!("{doing} snapshot {}", path.display()),
        source: std::sync::Arc::new(source),
    }
}

/// Reads the whole snapshot in `path`, checking everything, and that its header is `want`;
/// returns its number of pairs. Nothing is kept in memory beyond a header and two keys.
pub(crate) fn verify(path: &Path, want: &Header) -> bloomkv::Result<u64> {
    let mut r = Reader::open(path)?;
    verify_from(&mut r, want)?;
    Ok(r.count)
}

fn verify_from<R: Read>(r: &mut Reader<R>, want: &Header) -> bloomkv::Result<()> {
    if r.header() != want {
        let reason = format!("holds {:?}, its meta says {:?}", r.header(), want);
        return Err(r.bad(12, &reason));
    }
    // In key order, or the ingest would refuse the pairs after the old data is gone: the
    // install must fail here, before anything changes.
    let mut last: Option<Vec<u8>> = None;
    loop {
        let at = r.offset;
        let Some((key, _)) = r.next_pair(false)? else { return Ok(()) };
        if last.as_ref().is_some_and(|last| *last >= key) {
            return Err(r.bad(at, "keys out of order"));
        }
        last = Some(key);
    }
}

/// The record of the current snapshot under `snapshot/current`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Stored {
    pub meta: SnapshotMeta<NodeId, BasicNode>,
    /// The file's name in the snapshot directory.
    pub file: String,
    pub len: u64,
}

/// The current snapshot's record, from `view`.
pub(crate) fn stored(view: &bloomkv::Snapshot) -> Result<Option<Stored>, AnyError> {
    decode(view.get(keys::SNAPSHOT_CURRENT))
}

/// The name of a complete snapshot file, `stem` unique among the node's files.
pub(crate) fn done_name(stem: &str) -> String {
    format!("{stem}.{DONE}")
}

/// The name of a file being written or received.
pub(crate) fn part_name(stem: &str) -> String {
    format!("{stem}.{PART}")
}

/// Creates the snapshot directory if it is missing, durably.
pub(crate) fn ensure_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    match dir.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Makes a rename or removal in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes every file in `dir` but `keep` (leftovers of builds, receives and installs that a
/// crash or a newer snapshot interrupted). A missing directory holds nothing to remove.
pub(crate) fn remove_others(dir: &Path, keep: Option<&str>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let ours = name.to_str().is_some_and(|n| n.ends_with(DONE) || n.ends_with(PART));
        if ours && Some(name.to_str().unwrap_or_default()) != keep {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// openraft's snapshot data: an open snapshot file.
///
/// openraft 0.9 sends a snapshot in chunks (`Config::snapshot_max_chunk_size`) read from any
/// `AsyncRead + AsyncSeek` value, and has the receiver write them at their offsets into one
/// it gets from `begin_receiving_snapshot`: a file serves both, and neither side ever holds
/// more than a chunk. (The `generic-snapshot-data` feature would let a snapshot be a
/// stream, but then the transport, its retries and resumption are ours to write; the
/// chunked transport already does all that over the HTTP RPC the nodes have.)
///
/// A file that is being received checks the snapshot's checksum as the chunks arrive, and
/// its `shutdown` (which openraft calls after the last chunk) fails if it does not match: a
/// damaged transfer is then refused before it reaches the state machine, where a failed
/// install would be fatal to the node. The install checks the whole file again anyway.
#[derive(Debug)]
pub struct SnapshotFile {
    file: tokio::fs::File,
    pub(crate) path: PathBuf,
    /// Where the next read or write happens.
    pos: u64,
    /// For a file being received: the checksum of what arrived so far.
    pub(crate) receipt: Option<Receipt>,
}

impl SnapshotFile {
    pub(crate) fn reading(file: File, path: PathBuf) -> SnapshotFile {
        SnapshotFile { file: tokio::fs::File::from_std(file), path, pos: 0, receipt: None }
    }

    pub(crate) fn receiving(file: File, path: PathBuf) -> SnapshotFile {
        let receipt = Some(Receipt::default());
        SnapshotFile { file: tokio::fs::File::from_std(file), path, pos: 0, receipt }
    }

    /// Finishes pending writes and hands back the file for blocking use.
    pub(crate) async fn into_std(mut self) -> io::Result<(File, PathBuf, Option<Receipt>)> {
        use tokio::io::AsyncWriteExt;
        self.file.flush().await?;
        Ok((self.file.into_std().await, self.path, self.receipt))
    }
}

/// The checksum of a snapshot received in order, as far as it has arrived. The last four bytes
/// seen are held back: if the snapshot ends there, they are its checksum.
#[derive(Debug, Default, Clone)]
pub(crate) struct Receipt {
    crc: crc32fast::Hasher,
    next: u64,
    tail: [u8; 4],
    tail_len: usize,
    /// False once a write landed elsewhere than at the end: the check is then left to the
    /// install, which reads the whole file.
    out_of_order: bool,
}

impl Receipt {
    fn feed(&mut self, at: u64, bytes: &[u8]) {
        if at == 0 && self.next != 0 {
            // The sender started over (openraft does after a mismatch).
            *self = Receipt::default();
        }
        if self.out_of_order || at != self.next {
            self.out_of_order = true;
            return;
        }
        self.next += bytes.len() as u64;
        if bytes.len() >= 4 {
            self.crc.update(&self.tail[..self.tail_len]);
            let (body, last) = bytes.split_at(bytes.len() - 4);
            self.crc.update(body);
            self.tail.copy_from_slice(last);
            self.tail_len = 4;
        } else {
            let mut joined = [0u8; 8];
            joined[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
            let n = self.tail_len + bytes.len();
            joined[self.tail_len..n].copy_from_slice(bytes);
            let keep = n.min(4);
            self.crc.update(&joined[..n - keep]);
            self.tail[..keep].copy_from_slice(&joined[n - keep..n]);
            self.tail_len = keep;
        }
    }

    /// Whether what arrived is known good: `Some(true)` if its checksum matched, `Some(false)`
    /// if it did not, `None` if it arrived out of order and was not checked.
    pub(crate) fn matched(&self) -> Option<bool> {
        if self.out_of_order {
            return None;
        }
        Some(self.tail_len == 4 && self.crc.clone().finalize() == u32::from_le_bytes(self.tail))
    }
}

impl AsyncRead for SnapshotFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.file).poll_read(cx, buf))?;
        this.pos += (buf.filled().len() - before) as u64;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SnapshotFile {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.file).poll_write(cx, buf))?;
        if let Some(receipt) = &mut this.receipt {
            receipt.feed(this.pos, &buf[..n]);
        }
        this.pos += n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().file).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.file).poll_shutdown(cx))?;
        match this.receipt.as_ref().and_then(Receipt::matched) {
            Some(false) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("received snapshot {}: checksum mismatch", this.path.display()),
            ))),
            _ => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncSeek for SnapshotFile {
    fn start_seek(self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        Pin::new(&mut self.get_mut().file).start_seek(position)
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let this = self.get_mut();
        let pos = ready!(Pin::new(&mut this.file).poll_complete(cx))?;
        this.pos = pos;
        Poll::Ready(Ok(pos))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use bloomkv::WriteBatch;
    use openraft::testing::log_id;
    use openraft::Membership;

    use super::*;

    fn sample() -> (tempfile::TempDir, bloomkv::Db, Header) {
        let dir = tempfile::tempdir().unwrap();
        let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default()).unwrap();
        let header = Header {
            last_applied: Some(log_id(2, 1, 7)),
            last_membership: StoredMembership::new(
                Some(log_id(1, 1, 1)),
                Membership::new(vec![BTreeSet::from([1, 2, 3])], None),
            ),
        };
        let mut batch = WriteBatch::new();
        batch.put(keys::APPLIED, encode(&header.last_applied.unwrap()).unwrap());
        batch.put(keys::MEMBERSHIP, encode(&header.last_membership).unwrap());
        batch.put(keys::data(b"a"), b"1");
        batch.put(keys::data(b""), b"empty key");
        batch.put(keys::data(b"b"), b"");
        batch.put(b"log/not-data", b"x");
        batch.put(keys::client(9), b"session");
        db.write(&batch, &Default::default()).unwrap();
        (dir, db, header)
    }

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    fn read_all(bytes: &[u8]) -> bloomkv::Result<(Header, Pairs)> {
        let mut r = Reader::new(bytes, Path::new("test"))?;
        let header = r.header().clone();
        let pairs = r.by_ref().collect::<bloomkv::Result<Vec<_>>>()?;
        Ok((header, pairs))
    }

    #[test]
    fn round_trip_and_every_damage_is_caught() {
        let (_dir, db, header) = sample();
        let mut bytes = Vec::new();
        let (built, len) = write(&db.snapshot(), &mut bytes).unwrap();
        assert_eq!(built, header);
        assert_eq!(len, bytes.len() as u64);
        let (read_header, pairs) = read_all(&bytes).unwrap();
        assert_eq!(read_header, header);
        let want: Pairs = vec![
            (keys::client(9).into(), b"session".into()),
            (b"data/".into(), b"empty key".into()),
            (b"data/a".into(), b"1".into()),
            (b"data/b".into(), b"".into()),
        ];
        assert_eq!(pairs, want);

        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x40;
            assert!(read_all(&damaged).is_err(), "flipped bit at {i}");
            assert!(read_all(&bytes[..i]).is_err(), "cut at {i}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(read_all(&longer).is_err());
    }

    #[test]
    fn pairs_out_of_order_are_refused_by_the_check() {
        let (_dir, db, header) = sample();
        let mut bytes = Vec::new();
        write(&db.snapshot(), &mut bytes).unwrap();
        let verify = |bytes: &[u8]| verify_from(&mut Reader::new(bytes, Path::new("t"))?, &header);
        verify(&bytes).unwrap();
        // The same file with the pairs "a" and "b" swapped, its checksum made right again.
        let header_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let session = 4 + keys::client(9).len() + 4 + b"session".len();
        let pairs = 12 + header_len + session + 4 + 5 + 4 + b"empty key".len();
        let a = 4 + 6 + 4 + 1;
        let b = 4 + 6 + 4;
        let mut swapped = bytes[..pairs].to_vec();
        swapped.extend_from_slice(&bytes[pairs + a..pairs + a + b]);
        swapped.extend_from_slice(&bytes[pairs..pairs + a]);
        swapped.extend_from_slice(&bytes[pairs + a + b..bytes.len() - 4]);
        let crc = crc32fast::hash(&swapped);
        swapped.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(swapped.len(), bytes.len());
        assert!(read_all(&swapped).is_ok(), "the format itself holds");
        let err = verify(&swapped).unwrap_err().to_string();
        assert!(err.contains("keys out of order"), "{err}");
    }

    #[test]
    fn a_length_over_the_limits_is_refused_before_it_is_allocated() {
        let (_dir, db, _) = sample();
        let mut bytes = Vec::new();
        write(&db.snapshot(), &mut bytes).unwrap();
        let header_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let first_pair = 12 + header_len;
        let value = first_pair + 4 + keys::client(9).len();
        for (at, what) in [(8, "header of"), (first_pair, "key of"), (value, "value of")] {
            let mut huge = bytes.clone();
            huge[at..at + 4].copy_from_slice(&0xFFFF_FFFEu32.to_le_bytes());
            let err = read_all(&huge).unwrap_err().to_string();
            assert!(err.contains(what), "{err}");
        }
    }

    #[test]
    fn a_version_1_snapshot_reads_as_data_and_a_key_outside_the_state_is_refused() {
        let (_dir, db, header) = sample();
        let header_bytes = encode(&header).unwrap();
        let file = |magic: &[u8], key: &[u8]| {
            let mut bytes = magic.to_vec();
            bytes.extend_from_slice(&(header_bytes.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&header_bytes);
            bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
            bytes.extend_from_slice(key);
            bytes.extend_from_slice(&1u32.to_le_bytes());
            bytes.push(b'v');
            bytes.extend_from_slice(&END.to_le_bytes());
            bytes.extend_from_slice(&1u64.to_le_bytes());
            let crc = crc32fast::hash(&bytes);
            bytes.extend_from_slice(&crc.to_le_bytes());
            bytes
        };
        let (_, pairs) = read_all(&file(MAGIC_V1, b"k")).unwrap();
        assert_eq!(pairs, vec![(b"data/k".to_vec(), b"v".to_vec())]);
        // In version 1 every key is data, even one that looks like a session.
        let (_, pairs) = read_all(&file(MAGIC_V1, b"client/x")).unwrap();
        assert_eq!(pairs, vec![(b"data/client/x".to_vec(), b"v".to_vec())]);
        read_all(&file(MAGIC, b"data/k")).unwrap();
        read_all(&file(MAGIC, b"cluster/range")).unwrap();
        let err = read_all(&file(MAGIC, b"meta/vote")).unwrap_err().to_string();
        assert!(err.contains("outside client/, cluster/ and data/"), "{err}");
        drop(db);
    }

    #[test]
    fn a_receipt_checks_the_checksum_of_chunks_of_any_size() {
        let (_dir, db, _) = sample();
        let mut bytes = Vec::new();
        write(&db.snapshot(), &mut bytes).unwrap();
        for chunk in [1, 2, 3, 4, 5, 7, 64, bytes.len()] {
            let mut receipt = Receipt::default();
            let mut at = 0;
            for piece in bytes.chunks(chunk) {
                receipt.feed(at, piece);
                at += piece.len() as u64;
            }
            assert_eq!(receipt.matched(), Some(true), "chunks of {chunk}");
            let mut damaged = bytes.clone();
            damaged[at as usize / 2] ^= 1;
            let mut receipt = Receipt::default();
            let mut at = 0;
            for piece in damaged.chunks(chunk) {
                receipt.feed(at, piece);
                at += piece.len() as u64;
            }
            assert_eq!(receipt.matched(), Some(false), "damaged, chunks of {chunk}");
        }
        let mut receipt = Receipt::default();
        receipt.feed(0, &bytes[..bytes.len() - 1]);
        assert_eq!(receipt.matched(), Some(false), "cut short");
        receipt.feed(0, &bytes); // started over
        assert_eq!(receipt.matched(), Some(true));
        receipt.feed(3, b"xx");
        assert_eq!(receipt.matched(), None, "out of order: left to the install");
    }
}
