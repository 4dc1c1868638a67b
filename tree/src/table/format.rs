//! Block handles, the per-block trailer (compression kind + CRC), compression, and the footer.
//!
//! # Block on disk
//!
//! ```text
//! stored payload (handle.size bytes) | kind u8 | crc32 u32 LE over (stored payload, kind)
//! ```
//!
//! `kind` 0: the stored payload is the block. `kind` 1: the stored payload is
//! `uncompressed_len varint | zstd frame`. The writer keeps the compressed form only if it saves
//! at least 1/8 of the block (otherwise decompression costs CPU on every read for little disk)
//! and only if `uncompressed_len` is within [`decompressed_cap`] of the stored length: at most
//! 64 MiB, and beyond 1 MiB at most 64 times the stored bytes. The reader refuses any larger
//! claim, which bounds what a damaged (or hostile) length prefix can make it allocate, even
//! though the CRC already catches accidents. Blocks up to 1 MiB may compress arbitrarily well
//! (a block of repeated values often shrinks 100-fold), since such an allocation is harmless.
//!
//! A [`BlockHandle`] is `offset varint | size varint`, where `size` counts the stored payload
//! without the 5-byte trailer.
//!
//! # Footer (the last [`FOOTER_LEN`] = 64 bytes of the file)
//!
//! ```text
//! off  0: index handle       offset u64 LE, size u64 LE
//! off 16: filter handle      offset u64 LE, size u64 LE
//! off 32: properties handle  offset u64 LE, size u64 LE
//! off 48: format version     u32 LE: 1; 2 with a range-deletion block; 3 with expiring
//!                            entries, 4 with merge operands (with or without the block)
//! off 52: crc32              u32 LE over bytes 0..52
//! off 56: magic              u64 LE whose bytes spell b"bloomkv1"
//! ```
//!
//! The footer is fixed-size (fixed-width integers, no varints) so the reader can fetch it with
//! one read of a known length at `file_size - 64`.

use std::path::Path;

use bytes::Bytes;

use crate::coding::{crc32, get_u32, get_u64, put_u32, put_u64, put_varint, Decoder};
use crate::fs::{RandomAccessFile, WritableFile};
use crate::prefetch::prefetch_all;
use crate::{Error, Result};

/// Bytes after every stored block: kind (1) + CRC32 (4).
pub const BLOCK_TRAILER_LEN: usize = 5;
/// Size of the footer at the end of every table file.
pub const FOOTER_LEN: usize = 64;
/// The footer's last eight bytes: `b"bloomkv1"` read as a little-endian `u64`.
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"bloomkv1");
/// The table format version of a table without range tombstones.
pub const FORMAT_VERSION: u32 = 1;
/// The format version of a table with a range-deletion block (named in its properties).
/// Version 1 readers refuse it: reading it without its tombstones would return deleted
/// keys.
pub const RANGE_DEL_FORMAT_VERSION: u32 = 2;
/// The format version of a table holding expiring entries (`ValueKind::PutExpiring`), with
/// or without a range-deletion block (its properties say which). Version 1 and 2 readers
/// refuse it: they would return expired values, and the expiry as part of every value.
pub const EXPIRY_FORMAT_VERSION: u32 = 3;
/// The format version of a table holding merge operands (`ValueKind::Merge`), with or
/// without expiring entries and a range-deletion block (its properties say which). Older
/// readers refuse it: they would return an operand as the key's value.
pub const MERGE_FORMAT_VERSION: u32 = 4;
/// The format version of a table holding blob references (`ValueKind::BlobPut`,
/// `ValueKind::BlobPutExpiring`), with or without anything the lower versions mark. Older
/// readers refuse it: they would return a reference as the key's value.
pub const BLOB_FORMAT_VERSION: u32 = 5;

/// Whether a table of format `version` has a range-deletion block: always for version 2,
/// never for 1; for 3 and 4, as `has_range_dels` (its properties) says.
pub fn range_dels_consistent(version: u32, has_range_dels: bool) -> bool {
    match version {
        RANGE_DEL_FORMAT_VERSION => has_range_dels,
        EXPIRY_FORMAT_VERSION | MERGE_FORMAT_VERSION | BLOB_FORMAT_VERSION => true,
        _ => !has_range_dels,
    }
}
/// The largest decompressed block the reader accepts (64 MiB).
pub const MAX_BLOCK_BYTES: u64 = 64 << 20;
/// Beyond [`SMALL_BLOCK_BYTES`], the largest decompressed/stored size ratio accepted.
pub const MAX_EXPANSION: u64 = 64;
/// Decompressed sizes up to this (1 MiB) are accepted whatever the compression ratio.
pub const SMALL_BLOCK_BYTES: u64 = 1 << 20;

/// The largest decompressed size the reader accepts for `stored` compressed bytes.
pub fn decompressed_cap(stored: u64) -> u64 {
    stored.saturating_mul(MAX_EXPANSION).clamp(SMALL_BLOCK_BYTES, MAX_BLOCK_BYTES)
}

const KIND_NONE: u8 = 0;
const KIND_ZSTD: u8 = 1;

/// How data and index blocks are compressed.
///
/// The default is [`Compression::None`]: a point read that misses the block cache then pays one
/// `pread` and a CRC, not a decompression too, and bloomkv's reads are meant to be cheap
/// first. Choose `Zstd` when disk space or I/O bandwidth matters more than read CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Blocks are stored as they are.
    #[default]
    None,
    /// Blocks are compressed with zstd at `level` (1 is fast; 3 is zstd's default).
    Zstd {
        /// zstd compression level.
        level: i32,
    },
}

impl Compression {
    /// Stable numeric code (0 none, 1 zstd), as in the block trailer and the properties.
    pub fn code(&self) -> u8 {
        match self {
            Compression::None => KIND_NONE,
            Compression::Zstd { .. } => KIND_ZSTD,
        }
    }

    /// The zstd level, 0 for none.
    pub fn level(&self) -> i32 {
        match self {
            Compression::None => 0,
            Compression::Zstd { level } => *level,
        }
    }

    /// Rebuilds a value from [`Compression::code`] and [`Compression::level`].
    pub fn from_code(code: u8, level: i32) -> Option<Compression> {
        match code {
            KIND_NONE => Some(Compression::None),
            KIND_ZSTD => Some(Compression::Zstd { level }),
            _ => None,
        }
    }
}

/// Where a block lives in its file: `size` counts the stored payload, not the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct BlockHandle {
    /// Offset of the block's first byte.
    pub offset: u64,
    /// Stored payload length, without the trailer.
    pub size: u64,
}

impl BlockHandle {
    /// Appends the varint encoding.
    pub fn encode_to(&self, buf: &mut Vec<u8>) {
        put_varint(buf, self.offset);
        put_varint(buf, self.size);
    }

    /// Decodes a handle that must fill `bytes` exactly.
    pub fn decode(bytes: &[u8]) -> Result<BlockHandle> {
        let mut d = Decoder::new(bytes);
        match (d.varint(), d.varint()) {
            (Some(offset), Some(size)) if d.is_empty() => Ok(BlockHandle { offset, size }),
            _ => Err(Error::bad_bytes(0, "malformed block handle")),
        }
    }

    /// Bytes the block occupies on disk, trailer included (`None` on overflow).
    pub fn disk_size(&self) -> Option<u64> {
        self.size.checked_add(BLOCK_TRAILER_LEN as u64)
    }

    /// Offset just past the block's trailer (`None` on overflow).
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.disk_size()?)
    }
}

/// Turns block payloads into their on-disk bytes (stored payload + trailer), compressing when
/// that pays. Holds one zstd context for all the blocks of a table, since creating a context
/// costs more than compressing a 4 KiB block.
pub struct BlockEncoder {
    compression: Compression,
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl std::fmt::Debug for BlockEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockEncoder").field("compression", &self.compression).finish()
    }
}

impl BlockEncoder {
    /// An encoder for `compression`.
    pub fn new(compression: Compression) -> Self {
        let zstd = match compression {
            // A context that cannot be created (out of memory) just means raw blocks.
            Compression::Zstd { level } => zstd::bulk::Compressor::new(level).ok(),
            Compression::None => None,
        };
        BlockEncoder { compression, zstd }
    }

    /// Writes the on-disk form of `payload` to `out` (cleared first; reuse it across blocks).
    pub fn encode(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        out.clear();
        if !self.compress_into(payload, out) {
            out.extend_from_slice(payload);
            seal(out, KIND_NONE);
        }
    }

    /// The on-disk form of `payload`: compressed into `scratch` where that pays, otherwise
    /// `payload` itself with the trailer appended (no copy of the block).
    pub fn encode_in_place<'a>(
        &mut self,
        payload: &'a mut Vec<u8>,
        scratch: &'a mut Vec<u8>,
    ) -> &'a [u8] {
        scratch.clear();
        if self.compress_into(payload, scratch) {
            return scratch;
        }
        seal(payload, KIND_NONE);
        payload
    }

    /// Writes the sealed, compressed form of `payload` to the empty `out` and returns true,
    /// if compression is on and saves at least an eighth; otherwise leaves `out` empty.
    fn compress_into(&mut self, payload: &[u8], out: &mut Vec<u8>) -> bool {
        let Some(z) = self.zstd.as_mut().and_then(|c| c.compress(payload).ok()) else {
            return false;
        };
        let raw = payload.len() as u64;
        put_varint(out, raw);
        let stored = (out.len() + z.len()) as u64;
        let saves_an_eighth = stored <= raw - raw / 8;
        if !(saves_an_eighth && raw <= decompressed_cap(z.len() as u64)) {
            out.clear();
            return false;
        }
        out.extend_from_slice(&z);
        seal(out, KIND_ZSTD);
        true
    }
}

/// Appends a block trailer to the stored bytes in `out`: the kind, and the CRC of both.
fn seal(out: &mut Vec<u8>, kind: u8) {
    out.push(kind);
    let crc = crc32(&[out.as_slice()]);
    put_u32(out, crc);
}

thread_local! {
    // One decompression context per thread, reused by every block read on it.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn zstd_decompress(frame: &[u8], capacity: usize) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with(|cell| {
        // `try_borrow_mut` cannot fail (no re-entrancy), but never panic on a read path.
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return zstd::bulk::decompress(frame, capacity);
        };
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        match slot.as_mut() {
            Some(d) => d.decompress(frame, capacity),
            None => zstd::bulk::decompress(frame, capacity),
        }
    })
}

/// Appends an encoded block (from [`BlockEncoder::encode`]) to `file` and returns its handle.
pub fn append_encoded(file: &mut dyn WritableFile, encoded: &[u8]) -> Result<BlockHandle> {
    let offset = file.len();
    file.append(encoded)?;
    Ok(BlockHandle { offset, size: (encoded.len() - BLOCK_TRAILER_LEN) as u64 })
}

/// Reads, verifies and decompresses the block at `handle`, which must end at or before
/// `limit` (the start of the footer, or of the next region). Errors name `path` and the
/// block's offset.
pub fn read_block(
    file: &dyn RandomAccessFile,
    path: &Path,
    handle: BlockHandle,
    limit: u64,
) -> Result<Bytes> {
    let mut buf = block_buffer(path, handle, limit)?;
    file.read_exact_at(&mut buf, handle.offset)?;
    unpack_read(path, handle, buf)
}

/// Like [`read_block`], but only if the operating system can supply the bytes without
/// waiting for the device (`RandomAccessFile::read_exact_at_if_cached`): `Ok(None)` when it
/// cannot.
pub fn read_block_if_cached(
    file: &dyn RandomAccessFile,
    path: &Path,
    handle: BlockHandle,
    limit: u64,
) -> Result<Option<Bytes>> {
    let mut buf = block_buffer(path, handle, limit)?;
    if !file.read_exact_at_if_cached(&mut buf, handle.offset)? {
        return Ok(None);
    }
    unpack_read(path, handle, buf).map(Some)
}

/// A buffer for the block at `handle` with its trailer, allocated only once the handle is
/// checked against `limit`: a damaged handle must not size an allocation.
fn block_buffer(path: &Path, handle: BlockHandle, limit: u64) -> Result<Vec<u8>> {
    stored_range(path, handle, limit)?;
    Ok(vec![0u8; handle.size as usize + BLOCK_TRAILER_LEN])
}

/// The payload of a block read into `buf`, checked and decompressed.
fn unpack_read(path: &Path, handle: BlockHandle, mut buf: Vec<u8>) -> Result<Bytes> {
    Ok(match unpack_block(path, handle, &buf)? {
        Payload::Stored => {
            buf.truncate(handle.size as usize);
            Bytes::from(buf)
        }
        Payload::Decompressed(out) => Bytes::from(out),
    })
}

/// Like [`read_block`], but from a file already in memory as one `Bytes` (a mapping):
/// an uncompressed block is a slice of `file`, not a copy.
pub fn read_block_from(
    file: &Bytes,
    path: &Path,
    handle: BlockHandle,
    limit: u64,
) -> Result<Bytes> {
    let range = stored_range(path, handle, limit.min(file.len() as u64))?;
    // Every line of the block is requested before the checksum pass reads it front to back.
    // The hardware's own prefetcher ramps up line by line and stops at each page boundary,
    // and a block read in place from a mapping is usually not in cache at all; asked for at
    // once, its misses overlap (absent-key lookups at 50M keys: 1-2% faster).
    prefetch_all(&file[range]);
    read_block_in(file, 0, path, handle, limit)
}

/// Like [`read_block_from`], from `window`: the file's bytes from offset `start` on. The
/// block must lie within both the window and `limit`.
pub fn read_block_in(
    window: &Bytes,
    start: u64,
    path: &Path,
    handle: BlockHandle,
    limit: u64,
) -> Result<Bytes> {
    let end = start.saturating_add(window.len() as u64);
    let range = stored_range(path, handle, limit.min(end))?;
    let Some(first) = handle.offset.checked_sub(start) else {
        return Err(Error::corruption(path, handle.offset, "block before the bytes read"));
    };
    let first = first as usize;
    let stored = &window[first..first + range.len()];
    Ok(match unpack_block(path, handle, stored)? {
        Payload::Stored => window.slice(first..first + handle.size as usize),
        Payload::Decompressed(out) => Bytes::from(out),
    })
}

/// Where the block at `handle` lies with its trailer, checked to end by `limit`.
pub fn stored_range(
    path: &Path,
    handle: BlockHandle,
    limit: u64,
) -> Result<std::ops::Range<usize>> {
    match handle.end() {
        Some(end) if end <= limit => Ok(handle.offset as usize..end as usize),
        _ => Err(Error::corruption(
            path,
            handle.offset,
            format!(
                "block handle (offset {}, size {}) runs past {limit}",
                handle.offset, handle.size
            ),
        )),
    }
}

/// What a block's stored bytes hold once checked: the payload itself, or a compressed frame
/// now decompressed.
enum Payload {
    Stored,
    Decompressed(Vec<u8>),
}

/// Checks the CRC of `raw` (a block as stored: payload and trailer) and decompresses it if
/// its kind says so.
fn unpack_block(path: &Path, handle: BlockHandle, raw: &[u8]) -> Result<Payload> {
    let bad = |reason: String| Error::corruption(path, handle.offset, reason);
    let body = raw.len() - 4;
    let stored_crc = get_u32(raw, body).unwrap_or(0);
    if crc32(&[&raw[..body]]) != stored_crc {
        return Err(bad("block checksum mismatch".into()));
    }
    let kind = raw[body - 1];
    match kind {
        KIND_NONE => Ok(Payload::Stored),
        KIND_ZSTD => {
            let stored = &raw[..handle.size as usize];
            let mut d = Decoder::new(stored);
            let raw = d.varint().ok_or_else(|| bad("bad uncompressed length".into()))?;
            let frame = &stored[d.position()..];
            let cap = decompressed_cap(frame.len() as u64);
            if raw > cap {
                return Err(bad(format!("uncompressed length {raw} exceeds the cap {cap}")));
            }
            let out =
                zstd_decompress(frame, raw as usize).map_err(|e| bad(format!("zstd: {e}")))?;
            if out.len() as u64 != raw {
                return Err(bad(format!("decompressed {} bytes, expected {raw}", out.len())));
            }
            Ok(Payload::Decompressed(out))
        }
        k => Err(bad(format!("unknown compression kind {k}"))),
    }
}

/// The table's fixed-size trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footer {
    /// The index block.
    pub index: BlockHandle,
    /// The filter block.
    pub filter: BlockHandle,
    /// The properties block.
    pub properties: BlockHandle,
    /// The format version the file was written with.
    pub version: u32,
}

impl Footer {
    /// The 64-byte encoding.
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut v = Vec::with_capacity(FOOTER_LEN);
        for h in [self.index, self.filter, self.properties] {
            put_u64(&mut v, h.offset);
            put_u64(&mut v, h.size);
        }
        put_u32(&mut v, self.version);
        let crc = crc32(&[&v]);
        put_u32(&mut v, crc);
        put_u64(&mut v, TABLE_MAGIC);
        let mut out = [0u8; FOOTER_LEN];
        out.copy_from_slice(&v);
        out
    }

    /// Decodes and checks a footer read from `offset` of `path`.
    pub fn decode(bytes: &[u8], path: &Path, offset: u64) -> Result<Footer> {
        let bad = |reason: &str| Error::corruption(path, offset, reason);
        if bytes.len() != FOOTER_LEN {
            return Err(bad("short footer"));
        }
        if get_u64(bytes, 56) != Some(TABLE_MAGIC) {
            return Err(bad("bad magic number: not a bloomkv table"));
        }
        if get_u32(bytes, 52) != Some(crc32(&[&bytes[..52]])) {
            return Err(bad("footer checksum mismatch"));
        }
        let version = get_u32(bytes, 48).unwrap_or(0);
        let known = [
            FORMAT_VERSION,
            RANGE_DEL_FORMAT_VERSION,
            EXPIRY_FORMAT_VERSION,
            MERGE_FORMAT_VERSION,
            BLOB_FORMAT_VERSION,
        ];
        if !known.contains(&version) {
            return Err(bad(&format!("unsupported table format version {version}")));
        }
        let h = |i: usize| BlockHandle {
            offset: get_u64(bytes, 16 * i).unwrap_or(0),
            size: get_u64(bytes, 16 * i + 8).unwrap_or(0),
        };
        Ok(Footer { index: h(0), filter: h(1), properties: h(2), version })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use crate::fs::MemFile as Mem;

    fn store(payload: &[u8], c: Compression) -> (Mem, BlockHandle) {
        let mut enc = Vec::new();
        BlockEncoder::new(c).encode(payload, &mut enc);
        let h = BlockHandle { offset: 0, size: (enc.len() - BLOCK_TRAILER_LEN) as u64 };
        (Mem::from(enc), h)
    }

    #[test]
    fn blocks_round_trip_with_and_without_zstd() {
        let p = PathBuf::from("t.sst");
        let compressible: Vec<u8> = (0..4096u32).map(|i| (i % 7) as u8).collect();
        let random: Vec<u8> =
            (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for payload in [&compressible[..], &random[..], &[][..]] {
            for c in [Compression::None, Compression::Zstd { level: 1 }] {
                let (m, h) = store(payload, c);
                let got = read_block(&m, &p, h, m.size()).unwrap();
                assert_eq!(&got[..], payload);
            }
        }
        // Compressible data is stored compressed, within the expansion bound.
        let (m, _) = store(&compressible, Compression::Zstd { level: 1 });
        let kind = |m: &Mem| m.contents()[m.size() as usize - 5];
        assert_eq!(kind(&m), KIND_ZSTD);
        // Highly compressible data beyond the bound falls back to raw storage.
        let zeros = vec![0u8; 4 << 20];
        let (m, h) = store(&zeros, Compression::Zstd { level: 1 });
        assert_eq!(kind(&m), KIND_NONE);
        assert_eq!(read_block(&m, &p, h, m.size()).unwrap().len(), zeros.len());
    }

    #[test]
    fn encoding_in_place_stores_what_encoding_into_a_copy_does() {
        let compressible: Vec<u8> = (0..4096u32).map(|i| (i % 7) as u8).collect();
        let random: Vec<u8> =
            (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for payload in [&compressible[..], &random[..], &[][..]] {
            for c in [Compression::None, Compression::Zstd { level: 1 }] {
                let mut copied = Vec::new();
                BlockEncoder::new(c).encode(payload, &mut copied);
                let (mut block, mut scratch) = (payload.to_vec(), vec![9; 3]);
                let mut enc = BlockEncoder::new(c);
                assert_eq!(enc.encode_in_place(&mut block, &mut scratch), &copied[..]);
            }
        }
    }

    #[test]
    fn damaged_blocks_are_corruption_naming_the_file() {
        let p = PathBuf::from("x.sst");
        let payload: Vec<u8> = (0..500u32).map(|i| (i % 13) as u8).collect();
        let (m, h) = store(&payload, Compression::Zstd { level: 3 });
        let stored = m.contents();
        for i in 0..stored.len() {
            let mut d = stored.clone();
            d[i] ^= 0x55;
            let e = read_block(&Mem::from(d), &p, h, m.size()).unwrap_err();
            assert!(matches!(&e, Error::Corruption { file, .. } if file == &p), "{e}");
        }
        // A handle past the limit is refused before any read.
        let big = BlockHandle { offset: 0, size: u64::MAX };
        assert!(read_block(&m, &p, big, m.size()).unwrap_err().is_corruption());
        // A compressed block claiming a huge uncompressed size (with a valid CRC) is refused.
        let mut forged = Vec::new();
        put_varint(&mut forged, 1 << 40);
        forged.extend_from_slice(&zstd::bulk::compress(b"abc", 1).unwrap());
        forged.push(KIND_ZSTD);
        let crc = crc32(&[&forged]);
        put_u32(&mut forged, crc);
        let h = BlockHandle { offset: 0, size: (forged.len() - 5) as u64 };
        let m = Mem::from(forged);
        assert!(read_block(&m, &p, h, m.size()).unwrap_err().is_corruption());
    }

    #[test]
    fn footer_round_trip_and_checks() {
        let p = PathBuf::from("f.sst");
        let f = Footer {
            index: BlockHandle { offset: 10, size: 20 },
            filter: BlockHandle { offset: 1, size: 2 },
            properties: BlockHandle { offset: 3, size: 4 },
            version: FORMAT_VERSION,
        };
        let enc = f.encode();
        assert_eq!(Footer::decode(&enc, &p, 7).unwrap(), f);
        for i in 0..FOOTER_LEN {
            let mut d = enc;
            d[i] ^= 0x55;
            match Footer::decode(&d, &p, 7).unwrap_err() {
                Error::Corruption { file, offset, .. } => {
                    assert_eq!((file, offset), (p.clone(), 7))
                }
                e => panic!("{e}"),
            }
        }
        let mut v2 = Footer { version: 6, ..f }.encode();
        assert!(Footer::decode(&v2, &p, 0).unwrap_err().to_string().contains("version"));
        v2[56] ^= 1;
        assert!(Footer::decode(&v2, &p, 0).unwrap_err().to_string().contains("magic"));
    }
}
