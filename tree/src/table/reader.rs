//! Opens a table file and answers point lookups and scans.
//!
//! Opening reads the footer, properties, index and filter once and keeps the decoded index and
//! filter in RAM; afterwards a point lookup reads at most one data block, and none when the
//! key is outside the table's key range or the filter rules it out.

use std::cmp::Ordering;
use std::ops::{Bound, ControlFlow};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::filter::Filter;
use crate::fs::FileCache;
use crate::fs::{MappedFile, RandomAccessFile};
use crate::iter::InternalIterator;
use crate::key::{
    append_internal_key, compare_internal, pack_trailer, parse_internal_key, user_key, SeqNo,
    ValueKind, KIND_FOR_SEEK, MAX_SEQNO, TRAILER_LEN,
};
use crate::key_head::{key_head, SortedHeads};
use crate::prefetch::prefetch_all;
use crate::prefix::PrefixExtractor;
use crate::range_del::{self, RangeTombstone};
use crate::range_filter::{PreparedProbe, RangeFilter, RangeProbe};
use crate::table::block::Block;
use crate::table::cache::BlockCache;
use crate::table::false_maybes::FalseMaybes;
use crate::table::format::{
    read_block, read_block_from, read_block_if_cached, read_block_in, stored_range, BlockHandle,
    Footer, FOOTER_LEN,
};
use crate::table::iter::TableIter;
use crate::table::properties::TableProperties;
use crate::{Compression, Error, Result, Value};

/// What a point lookup in one table found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetOutcome {
    /// The table holds no version visible at the lookup's sequence number.
    Absent,
    /// The newest visible version is a put of this value.
    Found(Value),
    /// The newest visible version is an expiring put of this value (without its expiry),
    /// expiring at the second field (milliseconds since the Unix epoch).
    Expiring(Value, u64),
    /// The newest visible version is a tombstone.
    Deleted,
    /// The newest visible version is a merge operand: the read combines it with what lies
    /// beneath, through an iterator.
    Merge,
    /// The newest visible version is a put whose value lives in a blob file: the read
    /// resolves the reference once the range tombstones have had their say.
    Blob(crate::blob::BlobRef),
    /// As [`GetOutcome::Blob`], expiring at the second field.
    BlobExpiring(crate::blob::BlobRef, u64),
}

/// One key's prefix hash under the extractor of the last table asked (`None` inside: the key
/// is outside that extractor's domain), so a lookup hashes the prefix at most once however
/// many tables it asks. Starts empty ([`Default`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyPrefixHash(Option<(PrefixExtractor, Option<u64>)>);

/// A point lookup's outcome and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableGet {
    /// What was found.
    pub outcome: GetOutcome,
    /// A data block was read from the file.
    pub block_read: bool,
    /// A data block was served by the block cache.
    pub cache_hit: bool,
    /// The sequence number of the version found (0 when `Absent`): a range tombstone
    /// elsewhere may be newer.
    pub seq: SeqNo,
}

impl TableGet {
    fn without_io(outcome: GetOutcome) -> Self {
        TableGet { outcome, block_read: false, cache_hit: false, seq: 0 }
    }
}

/// The index, decoded once at open: separators concatenated in one buffer, and beside them
/// each separator's user-key head, which the search runs on (see [`crate::key_head`]).
#[derive(Debug)]
struct Index {
    keys: Vec<u8>,
    /// `ends[i]` is where separator `i` ends in `keys`.
    ends: Vec<usize>,
    heads: SortedHeads,
    handles: Vec<BlockHandle>,
}

impl Index {
    fn len(&self) -> usize {
        self.handles.len()
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.keys[start..self.ends[i]]
    }

    /// The first block whose separator is `>= target` (`len()` if none).
    fn find(&self, target: &[u8]) -> usize {
        let found = self.find_interleaved(target, |_| ControlFlow::Continue(()));
        found.expect("a search nothing ends")
    }

    /// [`Index::find`] with `between(k)` run before step `k` of the search, which it may end
    /// (`None`): see [`SortedHeads::first_at_least_interleaved`].
    #[inline]
    fn find_interleaved(
        &self,
        target: &[u8],
        between: impl FnMut(usize) -> ControlFlow<()>,
    ) -> Option<usize> {
        self.heads.partition_interleaved(
            key_head(user_key(target)),
            |i| compare_internal(self.key(i), target) == Ordering::Less,
            between,
            // The block handle is read next, from its own array: in a table too large for
            // the caches it is one more miss after the search's last. Requested with the
            // last step's heads, it arrives with them.
            |last_step| prefetch_all(self.handles.get(last_step).unwrap_or_default()),
        )
    }

    fn memory_bytes(&self) -> usize {
        self.keys.capacity()
            + self.ends.capacity() * std::mem::size_of::<usize>()
            + self.heads.memory_bytes()
            + self.handles.capacity() * std::mem::size_of::<BlockHandle>()
    }
}

/// A point read's range-filter probe run a stage at a time between the steps of the index
/// search (see [`Table::get_unless_range_filtered`]).
enum StagedProbe<'f> {
    /// The select sample is loading.
    SampleAsked(&'f RangeFilter, PreparedProbe),
    /// The words guessed from it are loading.
    WordsAsked(&'f RangeFilter, PreparedProbe),
    /// Answered "maybe", or no filter to ask.
    Done,
}

impl StagedProbe<'_> {
    /// Runs the next stage: `Break` if it is the answer and that is "absent".
    #[inline]
    fn advance(&mut self) -> ControlFlow<()> {
        match std::mem::replace(self, StagedProbe::Done) {
            StagedProbe::SampleAsked(f, p) => {
                f.prefetch_words(&p);
                *self = StagedProbe::WordsAsked(f, p);
            }
            StagedProbe::WordsAsked(f, p) if f.probe_prepared(&p) == RangeProbe::Absent => {
                return ControlFlow::Break(());
            }
            StagedProbe::WordsAsked(..) | StagedProbe::Done => {}
        }
        ControlFlow::Continue(())
    }
}

/// The internal key a point lookup seeks to: the user key and the lookup's trailer. Built
/// on the stack for keys up to [`SeekKey::INLINE`] bytes, so a lookup allocates nothing; a
/// longer key uses a vector kept for the next one.
struct SeekKey {
    inline: [u8; SeekKey::INLINE + TRAILER_LEN],
    heap: Vec<u8>,
}

impl Default for SeekKey {
    fn default() -> Self {
        SeekKey { inline: [0; SeekKey::INLINE + TRAILER_LEN], heap: Vec::new() }
    }
}

impl SeekKey {
    const INLINE: usize = 56;

    fn set(&mut self, user_key: &[u8], seq: SeqNo) -> &[u8] {
        let trailer = pack_trailer(seq.min(MAX_SEQNO), KIND_FOR_SEEK).to_le_bytes();
        let n = user_key.len();
        if n <= Self::INLINE {
            self.inline[..n].copy_from_slice(user_key);
            self.inline[n..n + TRAILER_LEN].copy_from_slice(&trailer);
            &self.inline[..n + TRAILER_LEN]
        } else {
            self.heap.clear();
            append_internal_key(&mut self.heap, user_key, seq.min(MAX_SEQNO), KIND_FOR_SEEK);
            &self.heap
        }
    }
}

/// An open, immutable table. Share it as `Arc<Table>`; every method takes `&self` and reads
/// with positional I/O, so any number of threads may use it at once.
#[derive(Debug)]
pub struct Table {
    file: FileSlot,
    path: PathBuf,
    id: u64,
    cache: Option<Arc<BlockCache>>,
    file_size: u64,
    footer: Footer,
    props: TableProperties,
    index: Index,
    filter: Filter,
    /// The extractor whose prefixes the filter holds, if it holds any (and this build knows
    /// the extractor the properties name).
    prefix: Option<PrefixExtractor>,
    /// The range tombstones, sorted and disjoint (held in RAM, like the filter).
    range_dels: Vec<RangeTombstone>,
    /// The range filter, if the table has one (held in RAM, like the filter).
    range_filter: Option<RangeFilter>,
    /// The same file mapped into memory, which point lookups read their blocks from when
    /// present (see [`Table::map_for_lookups`]).
    mapped: Option<MappedFile>,
    /// Where point lookups take their data blocks from: decided once, when the table is
    /// opened and when it is mapped, rather than worked out again on every lookup.
    lookups: Source,
    /// How often the point filter's "maybe" was false, for whether a point read asks the
    /// range filter.
    false_maybes: FalseMaybes,
}

/// Whether a block fetch may wait for the storage device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Read from the device if need be.
    ForDevice,
    /// Only what memory holds (the block cache, the mapping's resident pages, the page
    /// cache), so that `multi_get` can set the rest aside and read them all at once.
    IfResident,
}

/// Bytes a compaction reads from an input table at a time. Reading block by block cost a
/// system call, a buffer and a file-cache lookup per 4 KiB block.
pub const READ_AHEAD_BYTES: usize = 256 << 10;

/// The bytes of a table that a front-to-back scan read last ([`Table::fetch_ahead`]).
#[derive(Debug, Default)]
pub struct Window {
    start: u64,
    bytes: Bytes,
}

/// Where [`Table::fetch`] takes a data block from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Positional reads of the file: a table opened without a block cache.
    File,
    /// The block cache, else a positional read of the file, cached if `fill`. Scans read
    /// through the file even when it is mapped: the kernel notices their order and reads
    /// ahead. A compaction's one-off scan does not fill, so it evicts nothing readers use.
    CacheThenFile { fill: bool },
    /// The block cache, else the mapping, cached: a compressed table, mapped, whose blocks are
    /// then decompressed once rather than on every lookup.
    CacheThenMapping,
    /// The mapping alone. An uncompressed block of a mapping is a slice of it, as cheap as a
    /// cache hit, so such lookups leave the cache alone: no probe that misses, no insert that
    /// evicts; the page cache is their cache.
    Mapping,
}

/// What [`Table::fetch`] got.
pub enum Fetch {
    /// The block.
    Ready(Fetched),
    /// Only the storage device holds the block, and the fetch was not to wait for it.
    NotResident,
}

impl Fetch {
    /// The block of a fetch made with [`Wait::ForDevice`], which reads rather than answer
    /// `NotResident`; should it ever answer so, the read fails instead of panicking.
    pub fn waited(self) -> Result<Fetched> {
        match self {
            Fetch::Ready(fetched) => Ok(fetched),
            Fetch::NotResident => {
                Err(Error::io("fetching a table block", std::io::ErrorKind::WouldBlock.into()))
            }
        }
    }
}

/// A data block fetched.
#[derive(Clone)]
pub struct Fetched {
    pub block: Block,
    /// Read from the mapping or the file rather than found in the block cache.
    pub read: bool,
}

/// Where a table's data blocks are read from.
#[derive(Debug)]
enum FileSlot {
    /// The file stays open as long as the table (tools, tests, a table just written).
    Pinned(Arc<dyn RandomAccessFile>),
    /// Through the engine's bounded set of open files.
    Shared(Arc<FileCache>),
}

impl Drop for Table {
    fn drop(&mut self) {
        // A table no longer live must not keep a descriptor (or, once deleted, its disk
        // space) in the cache until it happens to be evicted.
        if let FileSlot::Shared(files) = &self.file {
            files.remove(self.id);
        }
    }
}

impl Table {
    /// The number of data blocks (for [`TableIter`], which walks them by position).
    pub(super) fn block_count(&self) -> usize {
        self.index.len()
    }

    /// Data block `i`'s handle; `None` past the last block.
    pub(super) fn block_handle(&self, i: usize) -> Option<BlockHandle> {
        self.index.handles.get(i).copied()
    }

    /// The data block that holds `target` if any block does.
    pub(super) fn find_block(&self, target: &[u8]) -> usize {
        self.index.find(target)
    }

    /// Opens the table in `file` (named `path` in errors), verifying the footer, properties,
    /// index and filter. Data blocks are read on demand, through `cache` if given.
    pub fn open(
        file: Arc<dyn RandomAccessFile>,
        path: PathBuf,
        cache: Option<Arc<BlockCache>>,
    ) -> Result<Table> {
        let file_size = file.size();
        let (footer, footer_offset) = read_footer(file.as_ref(), &path)?;

        // Regions in file order: data, filter, properties, index, footer. Each handle must
        // start where its region starts and end before the next, so no two regions overlap.
        check_region(&path, footer.filter, footer.properties.offset, "filter")?;
        check_region(&path, footer.properties, footer.index.offset, "properties")?;
        check_region(&path, footer.index, footer_offset, "index")?;

        let props = read_properties(file.as_ref(), &path, &footer)?;
        let range_dels = read_range_dels(file.as_ref(), &path, &footer, &props)?;
        let range_filter = read_range_filter(file.as_ref(), &path, &footer, &props)?;
        let filter = read_filter(file.as_ref(), &path, &footer, filter_limit(&footer, &props))?;
        let block = load_block(file.as_ref(), &path, footer.index, footer_offset)?;
        let index = decode_index(&block, footer.filter.offset)
            .map_err(|e| e.in_file(&path, footer.index.offset))?;
        if (index.len() as u64) != props.num_data_blocks
            || (index.len() == 0) != (props.num_entries == 0)
        {
            return Err(Error::corruption(
                &path,
                footer.index.offset,
                format!(
                    "index lists {} blocks, properties say {} blocks and {} entries",
                    index.len(),
                    props.num_data_blocks,
                    props.num_entries
                ),
            ));
        }
        let lookups =
            if cache.is_some() { Source::CacheThenFile { fill: true } } else { Source::File };
        let prefix = PrefixExtractor::from_name(&props.prefix_extractor)
            .filter(|_| filter.contents().prefixes);
        Ok(Table {
            file: FileSlot::Pinned(file),
            path,
            id: BlockCache::next_table_id(),
            cache,
            file_size,
            footer,
            props,
            index,
            filter,
            prefix,
            range_dels,
            range_filter,
            mapped: None,
            lookups,
            false_maybes: FalseMaybes::default(),
        })
    }

    /// Looks up the newest version of `user_key` with sequence number `<= seq`: the in-RAM
    /// index picks a block, [`Table::fetch`] brings it (from the cache, the mapping or the
    /// file), and the block is searched. Correct for any key. Whether a table needs searching
    /// at all — its key range, its filter — is decided by the read path (`version::lookup`
    /// and `read::search`), once, not here.
    #[inline(never)]
    pub fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<TableGet> {
        let mut seek = SeekKey::default();
        let target = seek.set(user_key, seq);
        let Some(&handle) = self.index.handles.get(self.index.find(target)) else {
            return Ok(TableGet::without_io(GetOutcome::Absent));
        };
        let Fetched { block, read } =
            self.fetch(handle, self.lookups, Wait::ForDevice)?.waited()?;
        let (outcome, seq) = self.search_block(&block, handle, target, user_key)?;
        Ok(TableGet { outcome, block_read: read, cache_hit: !read, seq })
    }

    /// [`Table::get`] for a point read that lets the table's range filter rule the key out
    /// first: `None` if the filter says the table holds no entry of `user_key`, without
    /// touching a data block. The same as [`Table::get`] without a range filter.
    ///
    /// The probe is three dependent loads (its select sample, then the words guessed from
    /// it, then the answer), the index search three or four (one per level of its nodes);
    /// a point filter's false positive in a tree larger than the caches misses on all of
    /// them. So the probe's stages go between the search's steps, each a step after the
    /// load it needs was asked for: the sample with the first step, the words before the
    /// second, the answer before the third. A key the filter rules out ends the search
    /// there, two loads deep instead of the whole search and the probe after it; a key the
    /// table may hold finds each load already arrived, and the search goes on.
    #[inline(never)]
    pub fn get_unless_range_filtered(
        &self,
        user_key: &[u8],
        seq: SeqNo,
    ) -> Result<Option<TableGet>> {
        let mut probe = match &self.range_filter {
            None => StagedProbe::Done,
            Some(f) => match f.prepare_key(user_key) {
                // Outside the filter's prefix: told without a load.
                None => return Ok(None),
                Some(_) if !self.false_maybes.worth_probing() => StagedProbe::Done,
                Some(p) => {
                    f.prefetch_sample(&p);
                    StagedProbe::SampleAsked(f, p)
                }
            },
        };
        let turned_away = || {
            self.false_maybes.record(true);
            Ok(None)
        };
        let mut seek = SeekKey::default();
        let target = seek.set(user_key, seq);
        let found = self.index.find_interleaved(target, |step| match step {
            0 => ControlFlow::Continue(()),
            _ => probe.advance(),
        });
        let Some(i) = found else { return turned_away() };
        // A search of fewer steps leaves stages to run after it.
        while !matches!(probe, StagedProbe::Done) {
            if probe.advance().is_break() {
                return turned_away();
            }
        }
        let Some(&handle) = self.index.handles.get(i) else {
            self.record_point_outcome(&GetOutcome::Absent);
            return Ok(Some(TableGet::without_io(GetOutcome::Absent)));
        };
        let Fetched { block, read } =
            self.fetch(handle, self.lookups, Wait::ForDevice)?.waited()?;
        let (outcome, seq) = self.search_block(&block, handle, target, user_key)?;
        self.record_point_outcome(&outcome);
        Ok(Some(TableGet { outcome, block_read: read, cache_hit: !read, seq }))
    }

    /// Looks up several user keys at `seq`, calling `each(k, lookup)` with the outcome of the
    /// `k`-th key, in the order given. Keys that fall in the same data block one after another
    /// share one fetch of it (one read, one checksum, one cache lookup): give the keys in
    /// ascending order and every block any of them needs is fetched once. Only the first key
    /// served by a fetch reports its `block_read` or `cache_hit`, so the counters add up to
    /// real block work. With [`Wait::IfResident`], a key whose block only the storage device
    /// holds is not searched: it is [`Lookup::Waiting`] on the block, for the caller to fetch
    /// (with other such blocks, at the same time) and search with [`Table::get_in`].
    pub fn get_many<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        seq: SeqNo,
        wait: Wait,
        mut each: impl FnMut(usize, Lookup),
    ) -> Result<()> {
        let mut seek = SeekKey::default();
        let mut current: Option<(usize, Block)> = None;
        // The block the previous key was left waiting on: the next keys in it wait too,
        // without asking again.
        let mut waiting_on = None;
        for (k, user_key) in keys.into_iter().enumerate() {
            let target = seek.set(user_key, seq);
            let i = self.index.find(target);
            let Some(&handle) = self.index.handles.get(i) else {
                each(k, Lookup::Done(TableGet::without_io(GetOutcome::Absent)));
                continue;
            };
            if waiting_on == Some(i) {
                each(k, Lookup::Waiting(handle));
                continue;
            }
            let (mut block_read, mut cache_hit) = (false, false);
            let block = match &current {
                Some((held, block)) if *held == i => block,
                _ => match self.fetch(handle, self.lookups, wait)? {
                    Fetch::Ready(Fetched { block, read }) => {
                        (block_read, cache_hit) = (read, !read);
                        &current.insert((i, block)).1
                    }
                    Fetch::NotResident => {
                        waiting_on = Some(i);
                        each(k, Lookup::Waiting(handle));
                        continue;
                    }
                },
            };
            let (outcome, seq) = self.search_block(block, handle, target, user_key)?;
            each(k, Lookup::Done(TableGet { outcome, block_read, cache_hit, seq }));
        }
        Ok(())
    }

    /// Looks up `user_key` at `seq` in the block at `handle`, fetched for it (the block
    /// [`Lookup::Waiting`] named). The outcome reports the fetch's read or cache hit when
    /// `first` (the fetch's first key), so shared fetches count once.
    pub fn get_in(
        &self,
        fetched: &Fetched,
        handle: BlockHandle,
        user_key: &[u8],
        seq: SeqNo,
        first: bool,
    ) -> Result<TableGet> {
        let mut seek = SeekKey::default();
        let target = seek.set(user_key, seq);
        let (outcome, seq) = self.search_block(&fetched.block, handle, target, user_key)?;
        let (block_read, cache_hit) = (first && fetched.read, first && !fetched.read);
        Ok(TableGet { outcome, block_read, cache_hit, seq })
    }

    /// The block at `handle` for a lookup, waiting for the device if need be: what the read
    /// threads do with a block a lookup left [`Lookup::Waiting`].
    pub fn fetch_for_lookup(&self, handle: BlockHandle) -> Result<Fetched> {
        self.fetch(handle, self.lookups, Wait::ForDevice)?.waited()
    }

    /// The newest version of `user_key` at or below the sequence number in `target` (its
    /// seek key) in one data block.
    fn search_block(
        &self,
        block: &Block,
        handle: BlockHandle,
        target: &[u8],
        user_key: &[u8],
    ) -> Result<(GetOutcome, SeqNo)> {
        let it = block.seek(target).map_err(|e| e.in_file(&self.path, handle.offset))?;
        if !it.valid() {
            return Ok((GetOutcome::Absent, 0));
        }
        let parsed = parse_internal_key(it.key()).ok_or_else(|| {
            Error::corruption(&self.path, handle.offset, "malformed internal key in block")
        })?;
        Ok(match (parsed.user_key == user_key, parsed.kind) {
            (false, _) => (GetOutcome::Absent, 0),
            (true, ValueKind::Put) => {
                // A value sliced from a mapping would keep the whole mapping, and a
                // compacted-away file's disk space, alive for as long as the caller holds
                // it: values of blocks that are slices of the mapping are copied out. One
                // sliced from a block keeps the block alive, evicted from the cache or not:
                // only a value large enough next to it is shared (see `Value`).
                let share = !self.lookups_slice_mapping()
                    && crate::value::may_share(it.value().len(), block.size());
                let value = if share {
                    Value::pinning(it.value_bytes(), block.size())
                } else {
                    Value::copy_from_slice(it.value())
                };
                (GetOutcome::Found(value), parsed.seq)
            }
            (true, ValueKind::PutExpiring) => {
                let (expiry, value) = crate::key::split_expiring(it.value()).ok_or_else(|| {
                    Error::corruption(&self.path, handle.offset, "expiring entry without expiry")
                })?;
                let share = !self.lookups_slice_mapping()
                    && crate::value::may_share(value.len(), block.size());
                let value = if share {
                    let all = it.value_bytes();
                    Value::pinning(all.slice(crate::key::EXPIRY_LEN..), block.size())
                } else {
                    Value::copy_from_slice(value)
                };
                (GetOutcome::Expiring(value, expiry), parsed.seq)
            }
            (true, ValueKind::Delete) => (GetOutcome::Deleted, parsed.seq),
            (true, ValueKind::Merge | ValueKind::MergeExpiring) => (GetOutcome::Merge, parsed.seq),
            (true, kind @ (ValueKind::BlobPut | ValueKind::BlobPutExpiring)) => {
                let bad =
                    |_| Error::corruption(&self.path, handle.offset, "malformed blob reference");
                if kind == ValueKind::BlobPut {
                    let r = crate::blob::BlobRef::decode(it.value()).map_err(bad)?;
                    (GetOutcome::Blob(r), parsed.seq)
                } else {
                    let (expiry, r) = crate::key::split_expiring(it.value()).ok_or_else(|| {
                        Error::corruption(
                            &self.path,
                            handle.offset,
                            "expiring entry without expiry",
                        )
                    })?;
                    let r = crate::blob::BlobRef::decode(r).map_err(bad)?;
                    (GetOutcome::BlobExpiring(r, expiry), parsed.seq)
                }
            }
        })
    }

    /// The data block at `handle`, taken from `source`: every read of a data block — lookups,
    /// scans, the read threads — comes here. A block read is checked (CRC, restart array)
    /// and decompressed before it is cached or returned; with [`Wait::IfResident`], a block
    /// only the storage device holds is not read.
    pub fn fetch(&self, handle: BlockHandle, source: Source, wait: Wait) -> Result<Fetch> {
        let (cache, fill) = match source {
            Source::CacheThenFile { fill } => (self.cache.as_deref(), fill),
            Source::CacheThenMapping => (self.cache.as_deref(), true),
            Source::File | Source::Mapping => (None, false),
        };
        if let Some(block) = cache.and_then(|c| c.get(self.id, handle.offset)) {
            return Ok(Fetch::Ready(Fetched { block, read: false }));
        }
        let limit = self.footer.filter.offset;
        let raw = match (source, &self.mapped) {
            (Source::Mapping | Source::CacheThenMapping, Some(m)) => {
                let len = handle.disk_size().map_or(usize::MAX, |n| n as usize);
                if wait == Wait::IfResident && !m.resident(handle.offset, len) {
                    return Ok(Fetch::NotResident);
                }
                read_block_from(m.bytes(), &self.path, handle, limit)?
            }
            _ => {
                let raw = self.with_file(|file| match wait {
                    Wait::ForDevice => read_block(file, &self.path, handle, limit).map(Some),
                    Wait::IfResident => read_block_if_cached(file, &self.path, handle, limit),
                })?;
                match raw {
                    Some(raw) => raw,
                    None => return Ok(Fetch::NotResident),
                }
            }
        };
        let block = Block::new(raw).map_err(|e| e.in_file(&self.path, handle.offset))?;
        if let (Some(cache), true) = (cache, fill) {
            cache.insert(self.id, handle.offset, block.clone());
        }
        Ok(Fetch::Ready(Fetched { block, read: true }))
    }

    /// Runs `f` on the table's file, reopened through the file cache if the bound on open
    /// files closed it.
    fn with_file<R>(&self, f: impl FnOnce(&dyn RandomAccessFile) -> Result<R>) -> Result<R> {
        match &self.file {
            FileSlot::Pinned(file) => f(file.as_ref()),
            FileSlot::Shared(files) => f(files.get(self.id, &self.path)?.as_ref()),
        }
    }

    /// The data block at `handle` for a scan that reads the table once, front to back (a
    /// compaction): taken from `window`, the bytes it read last, which is first refilled with
    /// the [`READ_AHEAD_BYTES`] from the block on when it does not hold the block. One read
    /// per window instead of one per block, and no block cache: a one-off scan evicts nothing
    /// readers use.
    pub fn fetch_ahead(&self, handle: BlockHandle, window: &mut Window) -> Result<Block> {
        let limit = self.footer.filter.offset;
        let window_end = window.start + window.bytes.len() as u64;
        let held = handle.offset >= window.start && handle.end().is_some_and(|e| e <= window_end);
        if !held {
            // Within the table's data: no length read from the file sizes the buffer.
            let block = stored_range(&self.path, handle, limit)?;
            let len = block.len().max(READ_AHEAD_BYTES.min((limit - handle.offset) as usize));
            // The last window's buffer, when no block of it is held any more, saves zeroing a
            // new one.
            let mut buf = match std::mem::take(&mut window.bytes).try_into_mut() {
                Ok(old) => old,
                Err(_) => BytesMut::new(),
            };
            buf.resize(len, 0);
            self.with_file(|file| file.read_exact_at(&mut buf, handle.offset))?;
            *window = Window { start: handle.offset, bytes: buf.freeze() };
        }
        let raw = read_block_in(&window.bytes, window.start, &self.path, handle, limit)?;
        Block::new(raw).map_err(|e| e.in_file(&self.path, handle.offset))
    }

    /// Reads and validates one data block from the file, bypassing the cache.
    pub fn read_data_block(&self, handle: BlockHandle) -> Result<Block> {
        Ok(self.fetch(handle, Source::File, Wait::ForDevice)?.waited()?.block)
    }

    /// Hands the table's file to `files`, which bounds how many tables keep theirs open:
    /// from now on the file may be closed between reads and reopened by the next one.
    pub fn share_file(mut self, files: Arc<FileCache>) -> Table {
        if let FileSlot::Pinned(file) = &self.file {
            files.insert(self.id, file.clone());
        }
        self.file = FileSlot::Shared(files);
        self
    }

    /// Serves the table's point lookups from `mapped`, its file mapped into memory
    /// ([`crate::fs::FileSystem::map`]); scans keep reading through the file as before.
    /// A mapping of another size than the file the table was opened from is refused.
    pub fn map_for_lookups(mut self, mapped: MappedFile) -> Result<Table> {
        if mapped.size() != self.file_size {
            return Err(Error::corruption(
                &self.path,
                mapped.size(),
                format!("mapped {} bytes of a table opened at {}", mapped.size(), self.file_size),
            ));
        }
        self.mapped = Some(mapped);
        self.lookups = if self.cache.is_some() && self.props.compression != Compression::None {
            Source::CacheThenMapping
        } else {
            Source::Mapping
        };
        Ok(self)
    }

    /// Whether the blocks point lookups search are slices of the mapping (an uncompressed
    /// table, mapped): they bypass the block cache, and the values found in them are copied.
    fn lookups_slice_mapping(&self) -> bool {
        self.mapped.is_some() && self.props.compression == Compression::None
    }

    /// Bytes of the table's file mapped into memory for its lookups (0 when unmapped):
    /// address space, whose pages are the kernel's page cache, not the process's own memory.
    pub fn mapped_bytes(&self) -> u64 {
        self.mapped.as_ref().map_or(0, |m| m.size())
    }

    /// A two-level iterator over every entry, filling the block cache as it reads.
    pub fn iter(self: &Arc<Self>) -> TableIter {
        self.iter_with(true)
    }

    /// Like [`Table::iter`]; with `fill_cache = false` blocks not already cached are read
    /// without being inserted, so a compaction's one-off scan does not evict hot blocks.
    pub fn iter_with(self: &Arc<Self>, fill_cache: bool) -> TableIter {
        let source = match &self.cache {
            Some(_) => Source::CacheThenFile { fill: fill_cache },
            None => Source::File,
        };
        TableIter::new(Arc::clone(self), source)
    }

    /// An iterator for one pass front to back, reading [`READ_AHEAD_BYTES`] at a time past
    /// the block cache ([`Table::fetch_ahead`]): a compaction's input.
    pub fn iter_ahead(self: &Arc<Self>) -> TableIter {
        TableIter::reading_ahead(Arc::clone(self))
    }

    /// The table's range tombstones, sorted by start and disjoint.
    pub fn range_tombstones(&self) -> &[RangeTombstone] {
        &self.range_dels
    }

    /// The table's range filter, if it has one.
    pub fn range_filter(&self) -> Option<&RangeFilter> {
        self.range_filter.as_ref()
    }

    /// What the table may hold in `(start, end)`, for a scan choosing its tables:
    /// [`RangeProbe::Absent`] only if its range filter holds no key there and none of its
    /// range tombstones meets the range; [`RangeProbe::TooWide`] without a filter, or for a
    /// range the filter does not answer for.
    ///
    /// Tombstones make it "maybe" although a skipped table's tombstones still apply to a
    /// scan (it takes them from the version): so that "absent" means the table holds
    /// nothing that bears on the range, whoever asks.
    pub fn probe_range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> RangeProbe {
        let Some(f) = &self.range_filter else { return RangeProbe::TooWide };
        self.with_tombstones(f.probe(start, end), start, end)
    }

    /// The range filter's answer `probe` for `(start, end)` made the table's, as
    /// [`Table::probe_range`] gives it: "maybe" where one of its range tombstones meets the
    /// range.
    #[inline]
    pub fn with_tombstones(
        &self,
        probe: RangeProbe,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> RangeProbe {
        match probe {
            RangeProbe::Absent if self.tombstone_meets(start, end) => RangeProbe::Maybe,
            other => other,
        }
    }

    /// False only if the table's range filter says it holds no entry of `key` (of any kind:
    /// the filter holds every user key the table has an entry for); true without a filter.
    /// A point read's third chance to skip the table after its point filter said "maybe".
    /// The table's range tombstones play no part: a point read takes them from the version.
    ///
    /// As [`Table::get_unless_range_filtered`], the filter is probed only while enough of
    /// the point filter's maybes were false ([`FalseMaybes`]); a caller that goes on to
    /// search the table tells what it found with [`Table::record_point_outcome`].
    #[inline]
    pub fn range_filter_may_hold(&self, key: &[u8]) -> bool {
        let Some(f) = &self.range_filter else { return true };
        // Outside the filter's prefix: told without a load.
        let Some(p) = f.prepare_key(key) else { return false };
        if !self.false_maybes.worth_probing() {
            return true;
        }
        // The bucket's upper and low words, guessed from the select sample, load together:
        // two dependent misses where the probe alone makes three.
        f.prefetch_words(&p);
        let may = f.probe_prepared(&p) != RangeProbe::Absent;
        if !may {
            self.false_maybes.record(true);
        }
        may
    }

    /// Records what a point read found searching the table after
    /// [`Table::range_filter_may_hold`] let it through, for whether later ones ask the filter.
    #[inline]
    pub fn record_point_outcome(&self, outcome: &GetOutcome) {
        if self.range_filter.is_some() {
            self.false_maybes.record(*outcome == GetOutcome::Absent);
        }
    }

    /// True if one of the table's range tombstones holds a key of `(start, end)`.
    pub fn tombstone_meets(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
        // Tombstones are sorted and disjoint: the first whose end lies past the range's
        // start is the only candidate nearest it.
        let i = match start {
            Bound::Unbounded => 0,
            Bound::Included(k) => self.range_dels.partition_point(|t| t.end.as_slice() <= k),
            // `[s, e)` holds a key above `k` unless `e ≤ k ++ [0]`, its successor.
            Bound::Excluded(k) => self.range_dels.partition_point(|t| {
                t.end.as_slice() <= k
                    || (t.end.len() == k.len() + 1 && t.end.starts_with(k) && t.end[k.len()] == 0)
            }),
        };
        self.range_dels.get(i).is_some_and(|t| match end {
            Bound::Unbounded => true,
            Bound::Included(k) => t.start.as_slice() <= k,
            Bound::Excluded(k) => t.start.as_slice() < k,
        })
    }

    /// RAM held by the range filter (0 without one).
    pub fn range_filter_memory_bytes(&self) -> usize {
        self.range_filter.as_ref().map_or(0, RangeFilter::memory_bytes)
    }

    /// The properties recorded when the table was built.
    pub fn properties(&self) -> &TableProperties {
        &self.props
    }

    /// The table's filter, held in RAM.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    /// The extractor whose prefixes the table's filter holds, if any.
    pub fn prefix_extractor(&self) -> Option<PrefixExtractor> {
        self.prefix
    }

    /// False only if the table certainly holds no key whose prefix under `extractor` has
    /// the [`crate::filter::hash_prefix`] `hash`: its filter holds that extractor's prefixes
    /// and not this one. A table built with another extractor, or none, answers true.
    #[inline]
    pub fn may_hold_prefix(&self, extractor: PrefixExtractor, hash: u64) -> bool {
        self.prefix != Some(extractor) || self.filter.may_contain_hash(hash)
    }

    /// False only if the table certainly holds no key with `key`'s prefix under the
    /// extractor it was built with, and so not `key`: a second, independent chance for a
    /// point lookup to skip the table after its whole-key probe said "maybe". `prefix`
    /// caches the key's prefix hash across the tables of one lookup.
    #[inline]
    pub fn may_hold_prefix_of(&self, key: &[u8], prefix: &mut KeyPrefixHash) -> bool {
        let Some(e) = self.prefix else { return true };
        let hash = match *prefix {
            KeyPrefixHash(Some((of, hash))) if of == e => hash,
            _ => {
                let hash = e.prefix(key).map(crate::filter::hash_prefix);
                *prefix = KeyPrefixHash(Some((e, hash)));
                hash
            }
        };
        hash.map_or(true, |h| self.filter.may_contain_hash(h))
    }

    /// The file's path (as given to [`Table::open`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's size in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// This table's block-cache id, unique in the process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The footer read at open.
    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    /// RAM held by the decoded index.
    pub fn index_memory_bytes(&self) -> usize {
        self.index.memory_bytes()
    }

    /// RAM held by the filter's bit array.
    pub fn filter_memory_bytes(&self) -> usize {
        self.filter.memory_bytes()
    }

    /// Number of data blocks.
    pub fn num_data_blocks(&self) -> usize {
        self.index.len()
    }

    /// The handles of the data blocks in key order (their on-disk size is
    /// [`BlockHandle::disk_size`]).
    pub fn data_block_handles(&self) -> Vec<BlockHandle> {
        self.index.handles.clone()
    }

    /// The index entries: each block's separator key and handle, in order.
    pub fn index_entries(&self) -> impl Iterator<Item = (&[u8], BlockHandle)> + '_ {
        (0..self.index.len()).map(move |i| (self.index.key(i), self.index.handles[i]))
    }
}

/// One key's lookup in [`Table::get_many`].
pub enum Lookup {
    /// Searched: the outcome.
    Done(TableGet),
    /// Not searched: its block has to come from the storage device.
    Waiting(BlockHandle),
}

/// Checks that `h` ends by `limit`, where the next region starts.
fn check_region(path: &Path, h: BlockHandle, limit: u64, what: &str) -> Result<()> {
    match h.end() {
        Some(end) if end <= limit => Ok(()),
        _ => Err(Error::corruption(
            path,
            h.offset,
            format!("{what} block (offset {}, size {}) overlaps what follows it", h.offset, h.size),
        )),
    }
}

/// Reads the footer at the end of `file`: `(footer, its offset)`.
pub fn read_footer(file: &dyn RandomAccessFile, path: &Path) -> Result<(Footer, u64)> {
    let size = file.size();
    let offset = size.checked_sub(FOOTER_LEN as u64).ok_or_else(|| {
        Error::corruption(path, 0, format!("file of {size} bytes is too short for a table footer"))
    })?;
    let mut buf = [0u8; FOOTER_LEN];
    file.read_exact_at(&mut buf, offset)?;
    Ok((Footer::decode(&buf, path, offset)?, offset))
}

/// Reads and decodes the properties block that `footer` names.
pub fn read_properties(
    file: &dyn RandomAccessFile,
    path: &Path,
    footer: &Footer,
) -> Result<TableProperties> {
    let h = footer.properties;
    let raw = read_block(file, path, h, footer.index.offset)?;
    TableProperties::decode(&raw).map_err(|e| e.in_file(path, h.offset))
}

/// Reads and decodes the filter block that `footer` names, which must end by `limit`.
pub fn read_filter(
    file: &dyn RandomAccessFile,
    path: &Path,
    footer: &Footer,
    limit: u64,
) -> Result<Filter> {
    let h = footer.filter;
    let raw = read_block(file, path, h, limit)?;
    Filter::decode(&raw).map_err(|e| e.in_file(path, h.offset))
}

/// Where the filter block must end: at the range-deletion block if there is one, else at
/// the range filter's, else at the properties. (Regions in file order: data, filter, range
/// deletions, range filter, properties, index, footer.)
pub fn filter_limit(footer: &Footer, props: &TableProperties) -> u64 {
    if props.num_range_deletions > 0 {
        props.range_del.offset
    } else {
        range_dels_limit(footer, props)
    }
}

/// Where the range-deletion block must end: at the range filter's if there is one, else at
/// the properties.
pub fn range_dels_limit(footer: &Footer, props: &TableProperties) -> u64 {
    if props.range_filter.size > 0 {
        props.range_filter.offset
    } else {
        footer.properties.offset
    }
}

/// Reads and checks the range-filter block the properties name, if any: it lies after the
/// filter and range-deletion blocks and before the properties.
pub fn read_range_filter(
    file: &dyn RandomAccessFile,
    path: &Path,
    footer: &Footer,
    props: &TableProperties,
) -> Result<Option<RangeFilter>> {
    let h = props.range_filter;
    if h.size == 0 {
        return Ok(None);
    }
    let before = if props.num_range_deletions > 0 { props.range_del } else { footer.filter };
    if before.end().map_or(true, |end| h.offset < end) {
        return Err(Error::corruption(
            path,
            h.offset,
            "range-filter block overlaps the block before it".to_string(),
        ));
    }
    let raw = read_block(file, path, h, footer.properties.offset)?;
    let f = RangeFilter::decode(&raw).map_err(|e| e.in_file(path, h.offset))?;
    if f.num_keys() != props.range_filter_keys {
        return Err(Error::corruption(
            path,
            h.offset,
            format!(
                "range filter holds {} keys, properties say {}",
                f.num_keys(),
                props.range_filter_keys
            ),
        ));
    }
    Ok(Some(f))
}

/// Reads and checks the range-deletion block the properties name, if any: it lies between
/// the filter and the properties, holds as many tombstones as the properties say, and
/// exists exactly when the footer's format version says so.
pub fn read_range_dels(
    file: &dyn RandomAccessFile,
    path: &Path,
    footer: &Footer,
    props: &TableProperties,
) -> Result<Vec<RangeTombstone>> {
    let has = props.num_range_deletions > 0;
    if !crate::table::format::range_dels_consistent(footer.version, has) {
        return Err(Error::corruption(
            path,
            footer.properties.offset,
            format!(
                "format version {} with {} range tombstones in the properties",
                footer.version, props.num_range_deletions
            ),
        ));
    }
    if !has {
        return Ok(Vec::new());
    }
    let h = props.range_del;
    if footer.filter.end().map_or(true, |filter_end| h.offset < filter_end) {
        return Err(Error::corruption(
            path,
            h.offset,
            "range-deletion block overlaps the filter block".to_string(),
        ));
    }
    let raw = read_block(file, path, h, range_dels_limit(footer, props))?;
    let ts = range_del::decode_block(&raw).map_err(|e| e.in_file(path, h.offset))?;
    if ts.len() as u64 != props.num_range_deletions {
        return Err(Error::corruption(
            path,
            h.offset,
            format!(
                "range-deletion block holds {} tombstones, properties say {}",
                ts.len(),
                props.num_range_deletions
            ),
        ));
    }
    Ok(ts)
}

/// Reads the data or index block at `handle` (which must end by `limit`) and checks its
/// restart array.
pub fn load_block(
    file: &dyn RandomAccessFile,
    path: &Path,
    handle: BlockHandle,
    limit: u64,
) -> Result<Block> {
    let raw = read_block(file, path, handle, limit)?;
    Block::new(raw).map_err(|e| e.in_file(path, handle.offset))
}

/// Walks the index block's entries in order, calling `visit(separator, handle)` for each,
/// and stops at the first separator that is not an internal key or value that is not a
/// block handle. A separator not above the previous one goes to `out_of_order` first, whose
/// answer decides: the reader refuses the table, a checker notes it and walks on so that
/// later damage is still found. Errors are relative to the block.
pub fn walk_index(
    block: &Block,
    mut out_of_order: impl FnMut(Error) -> Result<()>,
    mut visit: impl FnMut(&[u8], BlockHandle) -> Result<()>,
) -> Result<()> {
    let mut it = block.iter();
    it.seek_to_first()?;
    let mut prev: Option<Vec<u8>> = None;
    let mut i = 0usize;
    while it.valid() {
        let key = it.key();
        let bad = |why: &str| Error::bad_bytes(0, format!("index entry {i}: {why}"));
        if parse_internal_key(key).is_none() {
            return Err(bad("separator is not an internal key"));
        }
        if prev.as_deref().is_some_and(|p| compare_internal(p, key) != Ordering::Less) {
            out_of_order(bad("separators out of order"))?;
        }
        let handle = BlockHandle::decode(it.value()).map_err(|_| bad("malformed block handle"))?;
        visit(key, handle)?;
        let p = prev.get_or_insert_with(Vec::new);
        p.clear();
        p.extend_from_slice(key);
        i += 1;
        it.next()?;
    }
    Ok(())
}

/// Decodes the index block: separators strictly increasing, valid internal keys; handles in
/// file order, non-overlapping, and inside the data region that ends at `data_end`.
fn decode_index(block: &Block, data_end: u64) -> Result<Index> {
    let (mut keys, mut ends) = (Vec::new(), Vec::new());
    let (mut heads, mut handles) = (Vec::new(), Vec::new());
    let mut prev_end = 0u64;
    walk_index(block, Err, |key, handle| {
        match handle.end() {
            Some(end) if handle.offset >= prev_end && end <= data_end => prev_end = end,
            _ => {
                let i = handles.len();
                return Err(Error::bad_bytes(
                    0,
                    format!("index entry {i}: handle outside the data region"),
                ));
            }
        }
        keys.extend_from_slice(key);
        ends.push(keys.len());
        heads.push(key_head(user_key(key)));
        handles.push(handle);
        Ok(())
    })?;
    keys.shrink_to_fit();
    ends.shrink_to_fit();
    heads.shrink_to_fit();
    handles.shrink_to_fit();
    Ok(Index { keys, ends, heads: SortedHeads::new(heads), handles })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFile;
    use crate::key::internal_key;
    use crate::table::builder::{TableBuilder, TableOptions};

    fn table_of(entries: &[(Vec<u8>, Vec<u8>)], compression: Compression) -> (Vec<u8>, Arc<Table>) {
        let sink = MemFile::new();
        let opts = TableOptions { compression, ..TableOptions::default() };
        let mut b = TableBuilder::new(Box::new(sink.clone()), opts);
        for (k, v) in entries {
            b.add(k, v).unwrap();
        }
        b.finish().unwrap();
        let bytes = sink.contents();
        let file = Arc::new(MemFile::from(bytes.clone()));
        (bytes, Arc::new(Table::open(file, PathBuf::from("t/000007.sst"), None).unwrap()))
    }

    fn drain(mut it: TableIter) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        it.seek_to_first()?;
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next()?;
        }
        Ok(out)
    }

    /// Reading ahead yields what block-by-block reading does, over many windows, with a
    /// block larger than a window among them, compressed or not; and a damaged block
    /// is an error that names it, as it is for any read.
    #[test]
    fn reading_ahead_yields_every_entry_and_reports_a_damaged_block() {
        // Values that do not compress, so that zstd tables span many windows too.
        let noise = |seed: u32, n: u32| -> Vec<u8> {
            let mix = |mut x: u32| {
                x = (x ^ (x >> 16)).wrapping_mul(0x7feb_352d);
                x = (x ^ (x >> 15)).wrapping_mul(0x846c_a68b);
                (x ^ (x >> 16)) as u8
            };
            (0..n).map(|i| mix(seed.wrapping_mul(1_000_003).wrapping_add(i))).collect()
        };
        let mut entries: Vec<_> = (0..20_000u32)
            .map(|i| (internal_key(&i.to_be_bytes(), 1, ValueKind::Put), noise(i, 100)))
            .collect();
        entries[7_000].1 = noise(7, READ_AHEAD_BYTES as u32 + 5_000);
        for c in [Compression::None, Compression::Zstd { level: 1 }] {
            let (bytes, table) = table_of(&entries, c);
            assert!(table.footer.filter.offset > 4 * READ_AHEAD_BYTES as u64);
            assert_eq!(drain(table.iter_ahead()).unwrap(), entries);
            assert_eq!(drain(table.iter()).unwrap(), entries);

            // Damage a byte in a block well inside the data, past the first window.
            let (mut damaged, at) = (bytes.clone(), 3 * READ_AHEAD_BYTES + 100);
            damaged[at] ^= 0x40;
            let file = Arc::new(MemFile::from(damaged));
            let t = Arc::new(Table::open(file, PathBuf::from("t/000007.sst"), None).unwrap());
            let e = drain(t.iter_ahead()).unwrap_err();
            let Error::Corruption { file, offset, .. } = &e else { panic!("{e:?}") };
            assert!(file.ends_with("000007.sst"), "{e:?}");
            let (lo, hi) = (*offset as usize, *offset as usize + 5_000);
            assert!(lo <= at && at < hi, "damage at {at}, error names block at {offset}");
        }
    }

    /// A table with a range filter answers for short ranges: "absent" between its keys, "maybe"
    /// over a key, and "maybe" over a range only a range tombstone of it meets (inclusive and
    /// exclusive bounds alike); one without the option carries no block and reads as before.
    #[test]
    fn range_filter_answers_for_keys_and_tombstones() {
        use crate::range_filter::RangeProbe::{Absent, Maybe, TooWide};
        use std::ops::Bound::{Excluded, Included};
        let be = |i: u64| i.to_be_bytes().to_vec();
        let build = |bits: Option<f64>| {
            let sink = MemFile::new();
            let opts = TableOptions::default().range_filter(bits);
            let mut b = TableBuilder::new(Box::new(sink.clone()), opts);
            // Range tombstone over [5500, 5600): no key inside it.
            b.add_range_tombstone(RangeTombstone { start: be(5500), end: be(5600), seq: 9 })
                .unwrap();
            for i in 0..100u64 {
                let kind = if i % 3 == 0 { ValueKind::Delete } else { ValueKind::Put };
                b.add(&internal_key(&be(i * 1000), 1, kind), b"v").unwrap();
            }
            b.finish().unwrap();
            let file = Arc::new(MemFile::from(sink.contents()));
            Table::open(file, PathBuf::from("t/000009.sst"), None).unwrap()
        };
        let t = build(Some(16.0));
        let incl = |a: u64, b: u64| t.probe_range(Included(&be(a)), Included(&be(b)));
        assert_eq!(t.properties().range_filter_keys, 101);
        for i in 0..100u64 {
            assert_eq!(incl(i * 1000, i * 1000), Maybe, "{i}");
            // Deletes count: a scan must see the tombstone that hides an older value.
            assert_eq!(incl(i * 1000 - 10 * u64::from(i > 0), i * 1000 + 10), Maybe, "{i}");
            if i != 5 {
                assert_eq!(incl(i * 1000 + 1, i * 1000 + 999), Absent, "{i}");
            }
        }
        // The tombstone's range holds no key; it still makes the table "maybe".
        assert_eq!(incl(5550, 5560), Maybe);
        assert_eq!(incl(5501, 5599), Maybe);
        assert_eq!(incl(5600, 5999), Absent);
        assert_eq!(incl(5001, 5499), Absent);
        assert_eq!(t.probe_range(Included(&be(5001)), Excluded(&be(5500))), Absent);
        assert_eq!(t.probe_range(Included(&be(5001)), Included(&be(5500))), Maybe);
        // Keys above 5599's 8 bytes and below 5600's (5599 with bytes added) are in both.
        assert_eq!(t.probe_range(Excluded(&be(5599)), Included(&be(5999))), Maybe);
        let mut just_past = be(5599);
        just_past.push(0);
        assert_eq!(t.probe_range(Excluded(&just_past), Included(&be(5999))), Maybe);
        let mut end = be(5600);
        end.truncate(8);
        assert_eq!(t.probe_range(Included(&end), Included(&be(5999))), Absent);
        assert_eq!(incl(0, 1 << 40), TooWide);

        let plain = build(None);
        assert!(plain.range_filter().is_none());
        assert_eq!(plain.properties().range_filter, BlockHandle::default());
        assert_eq!(plain.probe_range(Included(&be(1)), Included(&be(2))), TooWide);
    }

    /// A point read through the range filter finds every key the table holds (puts and
    /// deletes) exactly as `get` does, and is turned away, with no block touched, between keys
    /// and outside the filter's prefix; without a filter it is `get`. Once it has found only
    /// held keys for a while, it reads a gap's block instead of asking the filter, until
    /// false maybes come back.
    #[test]
    fn get_unless_range_filtered_agrees_with_get_and_skips_gaps() {
        let be = |i: u64| i.to_be_bytes().to_vec();
        let build = |n: u64, bits: Option<f64>| {
            let sink = MemFile::new();
            let mut b = TableBuilder::new(
                Box::new(sink.clone()),
                TableOptions::default().range_filter(bits),
            );
            for i in 0..n {
                let kind = if i % 3 == 0 { ValueKind::Delete } else { ValueKind::Put };
                b.add(&internal_key(&be(i * 1000), 1, kind), b"v").unwrap();
            }
            b.finish().unwrap();
            let file = Arc::new(MemFile::from(sink.contents()));
            Table::open(file, PathBuf::from("t/000011.sst"), None).unwrap()
        };
        // An index of one node, and one of three levels of nodes: the probe then answers
        // between the search's steps, and a key it rules out ends the search there.
        for (n, every) in [(2_000u64, 1usize), (120_000, 7)] {
            for bits in [Some(16.0), None] {
                let t = build(n, bits);
                if n > 2_000 {
                    assert!(t.index.heads.levels() >= 2, "{} levels", t.index.heads.levels());
                }
                let (mut asked, mut turned_away) = (0, 0);
                for i in (0..n).step_by(every) {
                    let k = be(i * 1000 + 500);
                    asked += 1;
                    match t.get_unless_range_filtered(&k, 5).unwrap() {
                        None => turned_away += 1,
                        Some(got) => assert_eq!(got.outcome, GetOutcome::Absent, "{i}"),
                    }
                }
                for i in (0..n).step_by(every) {
                    let k = be(i * 1000);
                    let got =
                        t.get_unless_range_filtered(&k, 5).unwrap().expect("held key turned away");
                    assert_eq!(got.outcome, t.get(&k, 5).unwrap().outcome, "{i}");
                }
                if bits.is_some() {
                    // The held keys settled the share of false maybes at zero: the probe is
                    // left out and a gap's block is read, until false maybes bring it back.
                    let mut read = 0;
                    while let Some(got) =
                        t.get_unless_range_filtered(&be(read * 1000 + 500), 5).unwrap()
                    {
                        assert_eq!(got.outcome, GetOutcome::Absent);
                        read += 1;
                        assert!(read < 10, "the probe still left out after {read} gaps");
                    }
                    assert!(read >= 2, "one false maybe brought the probe back");
                }
                let outside = t.get_unless_range_filtered(b"short", 5).unwrap();
                if bits.is_some() {
                    // 16 bits per key: a false-positive rate far below 1%.
                    assert!(turned_away * 100 > asked * 99, "{turned_away} of {asked}");
                    assert!(outside.is_none());
                } else {
                    assert_eq!(turned_away, 0);
                    assert_eq!(outside.unwrap().outcome, GetOutcome::Absent);
                }
            }
        }
    }

    /// The stack-built seek key is byte for byte the one `internal_key` builds, on both sides
    /// of the inline limit, and reusing it for a shorter key leaves nothing of the longer one.
    #[test]
    fn seek_key_matches_internal_key_inline_and_on_the_heap() {
        let mut seek = SeekKey::default();
        for len in [0, 1, 16, SeekKey::INLINE - 1, SeekKey::INLINE, SeekKey::INLINE + 1, 300, 3] {
            let user: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
            for seq in [0, 7, MAX_SEQNO, MAX_SEQNO + 1, SeqNo::MAX] {
                let want = internal_key(&user, seq.min(MAX_SEQNO), KIND_FOR_SEEK);
                assert_eq!(seek.set(&user, seq), &want[..], "len {len}, seq {seq}");
            }
        }
    }
}
