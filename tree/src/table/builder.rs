//! Writes a table from entries added in internal-key order.

use std::cmp::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::filter::{FilterBuilder, FilterPolicy};
use crate::fs::WritableFile;
use crate::key::{compare_internal, pack_trailer, parse_internal_key, ValueKind, MAX_SEQNO};
use crate::prefix::PrefixExtractor;
use crate::range_del::{self, RangeTombstone};
use crate::range_filter::RangeFilterBuilder;
use crate::table::block::BlockBuilder;
use crate::table::format::{
    append_encoded, BlockEncoder, BlockHandle, Compression, Footer, BLOB_FORMAT_VERSION,
    EXPIRY_FORMAT_VERSION, FORMAT_VERSION, MERGE_FORMAT_VERSION, RANGE_DEL_FORMAT_VERSION,
};
use crate::table::properties::TableProperties;
use crate::{Error, Result};

/// Largest key or value the builder accepts: entries must keep a block's offsets within the
/// `u32` restart array, and the reader refuses blocks over 64 MiB. The largest value plus
/// the 8-byte expiry an expiring put stores before it.
pub const MAX_ENTRY_PART_BYTES: usize = (16 << 20) + 8;

// Everything a write accepts must fit in a table entry, or a flush would fail on it.
const _: () = assert!(crate::key::MAX_KEY_BYTES + 8 <= MAX_ENTRY_PART_BYTES);
const _: () = assert!(crate::key::MAX_VALUE_BYTES + crate::key::EXPIRY_LEN <= MAX_ENTRY_PART_BYTES);

/// How tables are built.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TableOptions {
    /// Target uncompressed size of a data block; a block is cut once it reaches this.
    pub block_bytes: usize,
    /// Entries between full keys inside a block.
    pub restart_interval: usize,
    /// Compression for data and index blocks.
    pub compression: Compression,
    /// The filter built over the table's user keys.
    pub filter_policy: FilterPolicy,
    /// With an extractor, the filter also holds the keys' distinct prefixes, and the
    /// properties record the extractor's name.
    pub prefix_extractor: Option<PrefixExtractor>,
    /// Whether the filter holds whole keys (always, without an extractor).
    pub whole_key_filtering: bool,
    /// The table's creation time (property #18), seconds since the Unix epoch: the engine
    /// gives its clock's (`Options::clock`), which periodic compaction judges a table's age
    /// by; `None` reads the system clock.
    pub creation_time: Option<u64>,
    /// With bits per key, the table also carries a range filter ([`crate::range_filter`])
    /// over its user keys and its range tombstones' starts.
    pub range_filter_bits_per_key: Option<f64>,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_bytes: 4096,
            restart_interval: 16,
            compression: Compression::default(),
            filter_policy: FilterPolicy::default(),
            prefix_extractor: None,
            whole_key_filtering: true,
            creation_time: None,
            range_filter_bits_per_key: None,
        }
    }
}

impl TableOptions {
    /// Sets [`TableOptions::block_bytes`].
    pub fn block_bytes(mut self, n: usize) -> Self {
        self.block_bytes = n;
        self
    }

    /// Sets [`TableOptions::restart_interval`].
    pub fn restart_interval(mut self, n: usize) -> Self {
        self.restart_interval = n;
        self
    }

    /// Sets [`TableOptions::compression`].
    pub fn compression(mut self, c: Compression) -> Self {
        self.compression = c;
        self
    }

    /// Sets [`TableOptions::filter_policy`].
    pub fn filter_policy(mut self, p: FilterPolicy) -> Self {
        self.filter_policy = p;
        self
    }

    /// Sets [`TableOptions::range_filter_bits_per_key`].
    pub fn range_filter(mut self, bits_per_key: Option<f64>) -> Self {
        self.range_filter_bits_per_key = bits_per_key;
        self
    }

    /// Sets [`TableOptions::prefix_extractor`] and [`TableOptions::whole_key_filtering`].
    pub fn prefixes(mut self, extractor: Option<PrefixExtractor>, whole_keys: bool) -> Self {
        self.prefix_extractor = extractor;
        self.whole_key_filtering = whole_keys;
        self
    }

    /// The builder of the filter these options ask for.
    fn filter_builder(&self) -> FilterBuilder {
        let b = self.filter_policy.builder();
        match self.prefix_extractor {
            Some(e) => b.with_prefixes(e, self.whole_key_filtering),
            None => b,
        }
    }
}

/// Builds one table file. Add entries in strictly increasing [`compare_internal`] order, then
/// call [`TableBuilder::finish`].
///
/// A key out of order or too large is refused with [`Error::InvalidArgument`] and leaves the
/// builder as it was. After an I/O error the file is incomplete and not a table: drop the
/// builder and remove the file.
pub struct TableBuilder {
    file: Box<dyn WritableFile>,
    opts: TableOptions,
    data: BlockBuilder,
    index: BlockBuilder,
    filter: FilterBuilder,
    /// The handle of the last flushed data block, whose index entry waits for the next key
    /// so that its separator can be shortened.
    pending: Option<BlockHandle>,
    last_key: Vec<u8>,
    props: TableProperties,
    encoder: BlockEncoder,
    raw_encoder: BlockEncoder,
    scratch: Vec<u8>,
    handle_buf: Vec<u8>,
    sep_buf: Vec<u8>,
    /// Range tombstones, sorted by start and disjoint.
    range_dels: Vec<RangeTombstone>,
    /// Per blob file, the references added.
    blob_refs: Vec<crate::blob::BlobRefs>,
    range_filter: Option<RangeFilterBuilder>,
}

impl std::fmt::Debug for TableBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableBuilder")
            .field("opts", &self.opts)
            .field("entries", &self.props.num_entries)
            .field("bytes", &self.file.len())
            .finish()
    }
}

impl TableBuilder {
    /// Starts a table in `file` (which should be empty).
    pub fn new(file: Box<dyn WritableFile>, opts: TableOptions) -> Self {
        TableBuilder {
            file,
            data: BlockBuilder::new(opts.restart_interval),
            // Index blocks are searched once per open, then held decoded; a restart at every
            // entry costs little and keeps the stored separators whole for tools.
            index: BlockBuilder::new(1),
            filter: opts.filter_builder(),
            opts,
            pending: None,
            last_key: Vec::new(),
            props: TableProperties::default(),
            encoder: BlockEncoder::new(opts.compression),
            raw_encoder: BlockEncoder::new(Compression::None),
            scratch: Vec::new(),
            handle_buf: Vec::new(),
            sep_buf: Vec::new(),
            range_dels: Vec::new(),
            blob_refs: Vec::new(),
            range_filter: opts.range_filter_bits_per_key.map(RangeFilterBuilder::new),
        }
    }

    /// Adds a range tombstone, kept in the table's range-deletion block (see
    /// [`crate::range_del`]); they may come before, between or after the entries, but must
    /// be non-empty, sorted by start and disjoint. The table's key range (in its properties)
    /// grows to cover them. A table with any is written in format version
    /// [`RANGE_DEL_FORMAT_VERSION`], which builds that do not know range tombstones refuse
    /// to open rather than read without them.
    pub fn add_range_tombstone(&mut self, t: RangeTombstone) -> Result<()> {
        if t.start >= t.end {
            return Err(Error::InvalidArgument("empty range tombstone".into()));
        }
        if self.range_dels.last().is_some_and(|prev| prev.end > t.start) {
            return Err(Error::InvalidArgument(
                "range tombstones must be added sorted and disjoint".into(),
            ));
        }
        if t.start.len() > MAX_ENTRY_PART_BYTES || t.end.len() > MAX_ENTRY_PART_BYTES {
            return Err(Error::InvalidArgument(format!(
                "range tombstone bound larger than {MAX_ENTRY_PART_BYTES} bytes"
            )));
        }
        // A scan that skips the table still applies its tombstones (they come from the
        // version), but the filter holding their starts keeps its "no" meaning "nothing of
        // this table is in the range", should any reader take tombstones from the table.
        if let Some(f) = &mut self.range_filter {
            f.add_unordered(&t.start);
        }
        self.range_dels.push(t);
        Ok(())
    }

    /// Adds an entry; `internal_key` must sort after every key added before.
    pub fn add(&mut self, internal_key: &[u8], value: &[u8]) -> Result<()> {
        let parsed = parse_internal_key(internal_key).ok_or_else(|| {
            Error::InvalidArgument("table entry key is not an internal key".into())
        })?;
        if internal_key.len() > MAX_ENTRY_PART_BYTES || value.len() > MAX_ENTRY_PART_BYTES {
            return Err(Error::InvalidArgument(format!(
                "table entry larger than {MAX_ENTRY_PART_BYTES} bytes"
            )));
        }
        let first = self.props.num_entries == 0;
        if !first && compare_internal(&self.last_key, internal_key) != Ordering::Less {
            return Err(Error::InvalidArgument(
                "table keys must be added in strictly increasing order".into(),
            ));
        }
        if let Some(handle) = self.pending.take() {
            shortest_separator(&self.last_key, internal_key, &mut self.sep_buf);
            self.add_index_entry(handle);
        }

        let user_key = parsed.user_key;
        let new_user_key = first || crate::key::user_key(&self.last_key) != user_key;
        if new_user_key {
            // The filter covers user keys; versions of one key are adjacent, so comparing
            // with the previous key adds each user key exactly once.
            self.filter.add_key(user_key);
            if let Some(f) = &mut self.range_filter {
                f.add_key(user_key);
            }
        }
        let p = &mut self.props;
        if first {
            p.smallest_user_key = user_key.to_vec();
            p.smallest_seq = parsed.seq;
            p.largest_seq = parsed.seq;
        }
        p.smallest_seq = p.smallest_seq.min(parsed.seq);
        p.largest_seq = p.largest_seq.max(parsed.seq);
        p.num_entries += 1;
        if parsed.kind == ValueKind::Delete {
            p.num_tombstones += 1;
        }
        if parsed.kind.is_operand() {
            p.num_merge_operands += 1;
        }
        if parsed.kind.is_blob() {
            let at = if parsed.kind == ValueKind::BlobPut { 0 } else { crate::key::EXPIRY_LEN };
            let r = value.get(at..).and_then(|r| crate::blob::BlobRef::decode(r).ok());
            let r = r.ok_or_else(|| Error::InvalidArgument("malformed blob reference".into()))?;
            crate::blob::count_ref(&mut self.blob_refs, &r);
            p.num_blob_refs += 1;
            p.blob_ref_bytes += r.len;
        }
        if parsed.kind.is_expiring() {
            // A stamped operand's expiry comes first too: once it passes, the key is gone
            // whatever lies beneath, so the table is worth rewriting as for a put.
            let (expiry, _) = crate::key::split_expiring(value).ok_or_else(|| {
                Error::InvalidArgument("expiring entry without its 8-byte expiry".into())
            })?;
            if p.num_expiring == 0 {
                (p.oldest_expiry, p.newest_expiry) = (expiry, expiry);
            }
            p.num_expiring += 1;
            p.oldest_expiry = p.oldest_expiry.min(expiry);
            p.newest_expiry = p.newest_expiry.max(expiry);
            p.expiring_bytes += (internal_key.len() + value.len()) as u64;
        }
        p.raw_key_bytes += internal_key.len() as u64;
        p.raw_value_bytes += value.len() as u64;

        self.data.add(internal_key, value);
        self.last_key.clear();
        self.last_key.extend_from_slice(internal_key);
        if self.data.estimated_size() >= self.opts.block_bytes {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// The last key added (empty before the first).
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Per blob file (ascending), the references added so far and their values' bytes:
    /// what the manifest records of the table.
    pub fn blob_refs(&self) -> &[crate::blob::BlobRefs] {
        &self.blob_refs
    }

    fn add_index_entry(&mut self, handle: BlockHandle) {
        self.handle_buf.clear();
        handle.encode_to(&mut self.handle_buf);
        self.index.add(&self.sep_buf, &self.handle_buf);
    }

    fn flush_data_block(&mut self) -> Result<()> {
        if self.data.is_empty() {
            return Ok(());
        }
        let (encoder, scratch, file) = (&mut self.encoder, &mut self.scratch, &mut self.file);
        let (handle, disk) = self.data.finish_with(|payload| {
            let encoded = encoder.encode_in_place(payload, scratch);
            append_encoded(file.as_mut(), encoded).map(|h| (h, encoded.len() as u64))
        })?;
        let p = &mut self.props;
        p.min_data_block_bytes =
            if p.num_data_blocks == 0 { disk } else { p.min_data_block_bytes.min(disk) };
        p.max_data_block_bytes = p.max_data_block_bytes.max(disk);
        p.num_data_blocks += 1;
        p.data_bytes += disk;
        self.pending = Some(handle);
        Ok(())
    }

    /// Writes the last data block, the filter, properties, index and footer, syncs the file,
    /// and returns the table's properties.
    pub fn finish(mut self) -> Result<TableProperties> {
        self.flush_data_block()?;
        if let Some(handle) = self.pending.take() {
            shortest_successor(&self.last_key, &mut self.sep_buf);
            self.add_index_entry(handle);
        }
        if let Some(p) = crate::key::parse_internal_key(&self.last_key) {
            self.props.largest_user_key = p.user_key.to_vec();
        }

        // The filter's own encoding carries a checksum too; the block trailer keeps every
        // region of the file verified the same way. Filter bits do not compress.
        let filter = std::mem::replace(&mut self.filter, FilterPolicy::None.builder());
        let prefixes = filter.prefixes();
        let filter = filter.finish();
        self.raw_encoder.encode(&filter.encode(), &mut self.scratch);
        let filter_handle = append_encoded(self.file.as_mut(), &self.scratch)?;
        let filter_bytes = self.scratch.len() as u64;

        let mut version = FORMAT_VERSION;
        if let (Some(first), Some(last)) = (self.range_dels.first(), self.range_dels.last()) {
            version = RANGE_DEL_FORMAT_VERSION;
            self.raw_encoder.encode(&range_del::encode_block(&self.range_dels), &mut self.scratch);
            let handle = append_encoded(self.file.as_mut(), &self.scratch)?;
            let p = &mut self.props;
            let points = p.num_entries > 0;
            let last_key = range_del::last_key_before(&last.end);
            if !points || first.start < p.smallest_user_key {
                p.smallest_user_key = first.start.clone();
            }
            if !points || last_key > p.largest_user_key.as_slice() {
                p.largest_user_key = last_key.to_vec();
            }
            let (lo, hi) = self
                .range_dels
                .iter()
                .fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t.seq), hi.max(t.seq)));
            p.smallest_seq = if points { p.smallest_seq.min(lo) } else { lo };
            p.largest_seq = p.largest_seq.max(hi);
            p.range_del = handle;
            p.num_range_deletions = self.range_dels.len() as u64;
        }

        // After the range deletions, before the properties: a build that does not know the
        // block reads the table as before (readers allow room before the properties, and
        // skip the properties' fields they do not know), so it needs no format version.
        if let Some(f) = self.range_filter.take().filter(|f| !f.is_empty()) {
            let f = f.finish();
            self.raw_encoder.encode(&f.encode(), &mut self.scratch);
            self.props.range_filter = append_encoded(self.file.as_mut(), &self.scratch)?;
            self.props.range_filter_keys = f.num_keys();
        }

        // The index goes last but its size belongs in the properties, so encode it first.
        let index_payload = self.index.finish();
        let mut index_encoded = Vec::new();
        self.encoder.encode(&index_payload, &mut index_encoded);

        let p = &mut self.props;
        p.filter_bytes = filter_bytes;
        p.index_bytes = index_encoded.len() as u64;
        p.compression = self.opts.compression;
        p.filter_kind = filter.kind().to_string();
        p.filter_bits_per_key = filter.bits_per_key();
        p.filter_probes = filter.num_probes();
        // A table without a filter records no extractor: it holds no prefix entries, and
        // scans must not take its silence for a "no".
        if filter.contents().prefixes {
            if let Some(e) = self.opts.prefix_extractor {
                p.prefix_extractor = e.name();
                p.num_prefixes = prefixes;
            }
        }
        p.creation_time = self.opts.creation_time.unwrap_or_else(|| {
            SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
        });
        if p.num_expiring > 0 {
            // Builds that do not know expiring entries refuse the table rather than return
            // expired values with their expiry as part of them.
            version = EXPIRY_FORMAT_VERSION;
        }
        if p.num_merge_operands > 0 {
            // Builds that do not know merge operands refuse the table rather than return an
            // operand as a value.
            version = MERGE_FORMAT_VERSION;
        }
        if p.num_blob_refs > 0 {
            // Builds that do not know blob files refuse the table rather than return a
            // reference as a value.
            version = BLOB_FORMAT_VERSION;
        }
        p.format_version = version;
        self.raw_encoder.encode(&p.encode(), &mut self.scratch);
        let props_handle = append_encoded(self.file.as_mut(), &self.scratch)?;
        let index_handle = append_encoded(self.file.as_mut(), &index_encoded)?;

        let footer = Footer {
            index: index_handle,
            filter: filter_handle,
            properties: props_handle,
            version,
        };
        self.file.append(&footer.encode())?;
        self.file.sync()?;
        Ok(self.props)
    }
}

/// The separator between adjacent blocks whose boundary keys are `a` (last of the left
/// block) and `b` (first of the right): a key `s` with `a <= s < b`, written to `out`.
///
/// When the user keys differ at a byte that can be incremented while staying below `b`'s,
/// the separator is that short user-key prefix with the largest trailer (newest sequence),
/// which sorts before every real version of that user key and after all of `a`. Otherwise
/// `a` itself is used: correct, merely longer.
fn shortest_separator(a: &[u8], b: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let (ua, ub) = (crate::key::user_key(a), crate::key::user_key(b));
    let common = ua.iter().zip(ub).take_while(|(x, y)| x == y).count();
    if common < ua.len() && common < ub.len() {
        let byte = ua[common];
        if byte < 0xff && byte + 1 < ub[common] {
            out.extend_from_slice(&ua[..common]);
            out.push(byte + 1);
            out.extend_from_slice(&pack_trailer(MAX_SEQNO, ValueKind::Put).to_le_bytes());
            debug_assert_eq!(compare_internal(a, out), Ordering::Less);
            debug_assert_eq!(compare_internal(out, b), Ordering::Less);
            return;
        }
    }
    out.extend_from_slice(a);
}

/// A short key `>= a` for the last block: the first byte of the user key below 0xff is
/// incremented and the rest dropped; `a` itself when every byte is 0xff.
fn shortest_successor(a: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let ua = crate::key::user_key(a);
    if let Some(i) = ua.iter().position(|&x| x != 0xff) {
        out.extend_from_slice(&ua[..i]);
        out.push(ua[i] + 1);
        out.extend_from_slice(&pack_trailer(MAX_SEQNO, ValueKind::Put).to_le_bytes());
        return;
    }
    out.extend_from_slice(a);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::internal_key;

    #[test]
    fn separators_sit_between_blocks() {
        let cases: &[(&[u8], u64, &[u8], u64)] = &[
            (b"abc", 5, b"abz", 9),
            (b"abc", 5, b"abd", 9),
            (b"abc", 5, b"abc", 4),
            (b"ab", 5, b"abc", 9),
            (b"a\xff", 1, b"b", 1),
            (b"", 1, b"a", 1),
        ];
        let mut out = Vec::new();
        for &(ua, sa, ub, sb) in cases {
            let a = internal_key(ua, sa, ValueKind::Put);
            let b = internal_key(ub, sb, ValueKind::Delete);
            shortest_separator(&a, &b, &mut out);
            assert_ne!(compare_internal(&a, &out), Ordering::Greater, "{ua:?} {ub:?}");
            assert_eq!(compare_internal(&out, &b), Ordering::Less, "{ua:?} {ub:?}");
        }
        let a = internal_key(b"abc", 5, ValueKind::Put);
        shortest_separator(&a, &internal_key(b"abz", 9, ValueKind::Put), &mut out);
        assert_eq!(crate::key::user_key(&out), b"abd");
        for ua in [&b"abc"[..], b"\xff\xffa", b"\xff\xff", b""] {
            let a = internal_key(ua, 3, ValueKind::Put);
            shortest_successor(&a, &mut out);
            assert_ne!(compare_internal(&a, &out), Ordering::Greater);
            // Every version of every user key with prefix `ua` sorts at or below `out`.
            let longer = internal_key(&[ua, b"\xff\xff"].concat(), 0, ValueKind::Delete);
            if ua.iter().any(|&x| x != 0xff) {
                assert_eq!(compare_internal(&longer, &out), Ordering::Less);
            }
        }
    }

    #[test]
    fn out_of_order_and_malformed_keys_are_refused() {
        let mut b = TableBuilder::new(Box::new(crate::fs::MemFile::new()), TableOptions::default());
        b.add(&internal_key(b"b", 5, ValueKind::Put), b"x").unwrap();
        for k in [internal_key(b"b", 5, ValueKind::Put), internal_key(b"a", 9, ValueKind::Put)] {
            assert!(matches!(b.add(&k, b"y"), Err(Error::InvalidArgument(_))));
        }
        assert!(matches!(b.add(b"short", b""), Err(Error::InvalidArgument(_))));
        b.add(&internal_key(b"b", 4, ValueKind::Delete), b"").unwrap();
        let props = b.finish().unwrap();
        assert_eq!((props.num_entries, props.num_tombstones), (2, 1));
        assert_eq!((props.smallest_seq, props.largest_seq), (4, 5));
        assert_eq!(props.largest_user_key, b"b");
    }
}
