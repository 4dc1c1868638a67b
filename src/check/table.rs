//! Checks of one table file, part by part: footer, region layout, properties, filter, range
//! deletions, index and every data block, each read with the reader's own functions so that damage in one
//! part still lets the others be checked. Then [`Table::open`] must agree.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use super::{quoted, Report};
use crate::blob::BlobRef;
use crate::filter::{Filter, FilterKind};
use crate::fs::{FileSystem, RandomAccessFile};
use crate::iter::InternalIterator;
use crate::key::{compare_internal, parse_internal_key, ValueKind};
use crate::range_del::{self, last_key_before, RangeTombstone};
use crate::table::block::Block;
use crate::table::format::{
    read_block, BlockHandle, Footer, BLOB_FORMAT_VERSION, BLOCK_TRAILER_LEN, EXPIRY_FORMAT_VERSION,
    MERGE_FORMAT_VERSION, RANGE_DEL_FORMAT_VERSION,
};
use crate::table::properties::TableProperties;
use crate::table::reader::{
    filter_limit, load_block, range_dels_limit, read_filter, read_footer, read_properties,
    read_range_filter, walk_index,
};
use crate::table::Table;
use bloomkv_tree::range_filter::{RangeFilter, RangeProbe};

/// What the table's entries turned out to be, for comparing with the properties.
#[derive(Debug, Default)]
struct Contents {
    entries: u64,
    tombstones: u64,
    /// Expiring puts: count, earliest and latest expiry, bytes (keys and stored values).
    expiring: u64,
    oldest_expiry: u64,
    newest_expiry: u64,
    expiring_bytes: u64,
    /// Expiring puts whose stored value is shorter than an expiry.
    short_expiring: u64,
    /// Merge operands.
    merges: u64,
    smallest_key: Option<Vec<u8>>,
    largest_key: Option<Vec<u8>>,
    smallest_seq: u64,
    largest_seq: u64,
    raw_key_bytes: u64,
    raw_value_bytes: u64,
    distinct_keys: u64,
    /// Distinct prefixes under the extractor the properties name (0 without one).
    distinct_prefixes: u64,
    /// Every blob reference the entries hold, for the database check to resolve.
    blob_refs: Vec<FoundRef>,
    /// Bytes of the values those references name.
    blob_ref_bytes: u64,
}

/// A blob reference found in a table: the entry's user key, the offset of the data block
/// holding it, and the reference.
#[derive(Debug, Clone)]
pub(super) struct FoundRef {
    pub key: Vec<u8>,
    pub block: u64,
    pub reference: BlobRef,
}

/// The parts of a table that could be read, for comparing with its properties (`None`: that
/// part was damaged; `contents` also when some data block could not be read in full).
#[derive(Clone, Copy)]
struct Found<'a> {
    index: Option<&'a [IndexEntry]>,
    filter: Option<&'a Filter>,
    contents: Option<&'a Contents>,
    range_dels: Option<&'a [RangeTombstone]>,
}

/// One index entry: separator and handle.
type IndexEntry = (Vec<u8>, BlockHandle);

/// Checks the table at `path`; returns its properties if they could be read.
pub(super) fn check_path(
    fs: &dyn FileSystem,
    r: &mut Report,
    path: &Path,
) -> Option<TableProperties> {
    match fs.open(path) {
        Ok(file) => check_file(r, path, file, &mut Vec::new()),
        Err(e) => {
            r.checked.tables += 1;
            r.error(path, e);
            None
        }
    }
}

/// Checks the table `file` (opened from `path`); returns its properties if they could be
/// read, and appends the blob references its entries hold to `blob_refs`. Working on an open
/// file means a database owner deleting it meanwhile (after a compaction) cannot disturb the
/// check.
pub(super) fn check_file(
    r: &mut Report,
    path: &Path,
    file: Arc<dyn RandomAccessFile>,
    blob_refs: &mut Vec<FoundRef>,
) -> Option<TableProperties> {
    let problems_before = r.problems.len();
    r.checked.tables += 1;
    let (footer, footer_offset) = match read_footer(file.as_ref(), path) {
        Ok(f) => f,
        Err(e) => {
            // Without a footer nothing else can be located.
            r.error(path, e);
            return None;
        }
    };

    // Regions, in file order: data | filter | range deletions | range filter | properties |
    // index | footer, back to back. Only the properties say whether the range-deletion and
    // range-filter blocks exist and where, so they are read before the filter's end can be
    // checked.
    let props_ok = check_region(
        r,
        path,
        footer_offset,
        "footer's properties",
        footer.properties,
        footer.index.offset,
    );
    let index_ok =
        check_region(r, path, footer_offset, "footer's index", footer.index, footer_offset);
    let props = part(r, path, props_ok, || read_properties(file.as_ref(), path, &footer));
    let range_del = props.as_ref().filter(|p| p.num_range_deletions > 0).map(|p| p.range_del);
    let filter_ok = match (&props, range_del) {
        (_, Some(h)) => {
            check_region(r, path, footer_offset, "footer's filter", footer.filter, h.offset)
        }
        (Some(p), None) => check_region(
            r,
            path,
            footer_offset,
            "footer's filter",
            footer.filter,
            filter_limit(&footer, p),
        ),
        // Without the properties, a gap after the filter may be a range-deletion block; only
        // an overlap is certain.
        (None, None) => match footer.filter.end() {
            Some(end) if end <= footer.properties.offset => true,
            _ => check_region(
                r,
                path,
                footer_offset,
                "footer's filter",
                footer.filter,
                footer.properties.offset,
            ),
        },
    };
    let range_del_ok = range_del.zip(props.as_ref()).map(|(h, p)| {
        check_region(
            r,
            path,
            footer.properties.offset,
            "properties' range-deletion",
            h,
            range_dels_limit(&footer, p),
        )
    });
    let range_filter = props.as_ref().filter(|p| p.range_filter.size > 0).and_then(|p| {
        let ok = check_region(
            r,
            path,
            footer.properties.offset,
            "properties' range-filter",
            p.range_filter,
            footer.properties.offset,
        );
        part(r, path, ok, || read_range_filter(file.as_ref(), path, &footer, p)).flatten()
    });
    // Data blocks end where the filter starts; never look past the footer whatever it says.
    let data_end = footer.filter.offset.min(footer_offset);

    let filter_end = props.as_ref().map_or(footer.properties.offset, |p| filter_limit(&footer, p));
    let filter = part(r, path, filter_ok, || read_filter(file.as_ref(), path, &footer, filter_end));
    let range_dels = match &props {
        Some(p) => check_range_dels(r, path, file.as_ref(), &footer, p, range_del_ok),
        None => None,
    };
    let index_block =
        part(r, path, index_ok, || load_block(file.as_ref(), path, footer.index, footer_offset));
    let index = index_block.and_then(|b| decode_index(r, path, footer.index.offset, &b));

    let mut contents = Contents::default();
    let mut all_blocks_read = false;
    if let Some(index) = &index {
        check_index_layout(r, path, index, data_end, footer.index.offset);
        // The extractor whose prefixes the filter holds, as the properties name it.
        let extractor = props
            .as_ref()
            .and_then(|p| crate::PrefixExtractor::from_name(&p.prefix_extractor))
            .filter(|_| filter.as_ref().is_some_and(|f| f.contents().prefixes));
        all_blocks_read = check_data_blocks(
            r,
            path,
            file.as_ref(),
            index,
            data_end,
            (filter.as_ref(), extractor, range_filter.as_ref()),
            &mut contents,
        );
    }
    if range_filter.is_some() {
        r.checked.range_filters += 1;
    }
    if let (Some(f), Some(ts)) = (&range_filter, &range_dels) {
        let missed = ts.iter().filter(|t| !may_hold_key(f, &t.start)).count();
        if missed > 0 {
            r.problem(
                path,
                props.as_ref().map(|p| p.range_filter.offset),
                format!("range filter answers \"no\" for {missed} range tombstone start(s)"),
            );
        }
    }

    if let Some(p) = &props {
        let found = Found {
            index: index.as_deref(),
            filter: filter.as_ref(),
            contents: all_blocks_read.then_some(&contents),
            range_dels: range_dels.as_deref(),
        };
        check_properties(r, path, p, &footer, &found);
    }
    blob_refs.append(&mut contents.blob_refs);

    // Never be laxer than the engine: if the checks above found nothing, the reader's own
    // open must agree.
    if r.problems.len() == problems_before {
        if let Err(e) = Table::open(file, path.to_path_buf(), None) {
            r.error(path, e);
        }
    }
    props
}

/// Reads one of the parts the footer locates, unless its region is bad (`ok` false, already
/// reported); a failure is reported and leaves the part out of the later checks.
fn part<T>(
    r: &mut Report,
    path: &Path,
    ok: bool,
    read: impl FnOnce() -> crate::Result<T>,
) -> Option<T> {
    if !ok {
        return None;
    }
    read().map_err(|e| r.error(path, e)).ok()
}

/// Checks that the block at `h` ends exactly where the next region starts (`next`): a gap
/// is reported (the reader tolerates one, the builder never leaves one), an overlap too, at
/// `at` (where the handle is stored), and makes the block unreadable (false).
fn check_region(
    r: &mut Report,
    path: &Path,
    at: u64,
    whose: &str,
    h: BlockHandle,
    next: u64,
) -> bool {
    let name = whose.rsplit(' ').next().unwrap_or(whose);
    match h.end() {
        Some(end) if end == next => true,
        Some(end) if end < next => {
            r.problem(
                path,
                Some(end),
                format!("{} unexplained bytes after the {name} block", next - end),
            );
            true
        }
        _ => {
            r.problem(
                path,
                Some(at),
                format!(
                    "{whose} handle (offset {}, size {}) overlaps what follows it (at {next})",
                    h.offset, h.size
                ),
            );
            false
        }
    }
}

/// Checks the range-deletion block the properties name, if any: that it exists exactly when
/// the footer's format version says so, and that it decodes (non-empty pieces, sorted,
/// disjoint). `region_ok` is the block's region check (`None`: the properties name none).
/// Returns the tombstones (none for a table without the block), or `None` if they could not
/// be read.
fn check_range_dels(
    r: &mut Report,
    path: &Path,
    file: &dyn RandomAccessFile,
    footer: &Footer,
    p: &TableProperties,
    region_ok: Option<bool>,
) -> Option<Vec<RangeTombstone>> {
    let has = p.num_range_deletions > 0;
    if !crate::table::format::range_dels_consistent(footer.version, has) {
        r.problem(
            path,
            Some(footer.properties.offset),
            format!(
                "footer's format version {} but the properties record {} range tombstones \
                 (version {RANGE_DEL_FORMAT_VERSION} is for tables with range tombstones, 1 for tables without)",
                footer.version, p.num_range_deletions
            ),
        );
    }
    let h = p.range_del;
    if !has {
        if h != BlockHandle::default() {
            r.problem(
                path,
                Some(footer.properties.offset),
                format!(
                    "properties name a range-deletion block (offset {}, size {}) but record no \
                     range tombstones",
                    h.offset, h.size
                ),
            );
        }
        return Some(Vec::new());
    }
    if region_ok != Some(true) {
        return None;
    }
    let raw =
        read_block(file, path, h, footer.properties.offset).map_err(|e| r.error(path, e)).ok()?;
    let ts =
        range_del::decode_block(&raw).map_err(|e| r.error(path, e.in_file(path, h.offset))).ok()?;
    r.checked.range_tombstones += ts.len() as u64;
    Some(ts)
}

/// Decodes the index block at `offset`, reporting disorder and (stopping at) the first
/// entry that does not decode.
fn decode_index(
    r: &mut Report,
    path: &Path,
    offset: u64,
    block: &Block,
) -> Option<Vec<IndexEntry>> {
    let mut entries: Vec<IndexEntry> = Vec::new();
    let walked = walk_index(
        block,
        |e| {
            r.error(path, e.in_file(path, offset));
            Ok(())
        },
        |key, h| {
            entries.push((key.to_vec(), h));
            Ok(())
        },
    );
    match walked {
        Ok(()) => Some(entries),
        Err(e) => {
            r.error(path, e.in_file(path, offset));
            None
        }
    }
}
/// The data blocks must tile the data region exactly: the first at 0, each starting where
/// the previous one's trailer ends, the last ending where the filter starts.
fn check_index_layout(
    r: &mut Report,
    path: &Path,
    index: &[IndexEntry],
    data_end: u64,
    index_offset: u64,
) {
    let mut expected = 0u64;
    for (i, (_, h)) in index.iter().enumerate() {
        if h.offset != expected {
            r.problem(
                path,
                Some(index_offset),
                format!(
                    "index entry {i}: block at offset {} but the previous block ends at {expected} \
                     ({})",
                    h.offset,
                    if h.offset > expected { "gap" } else { "overlap" }
                ),
            );
        }
        expected = h.end().unwrap_or(u64::MAX);
    }
    if expected != data_end {
        r.problem(
            path,
            Some(index_offset),
            format!(
                "data blocks listed by the index end at {expected}, but the data region ends at \
                 {data_end} (where the filter starts)"
            ),
        );
    }
}

/// Reads every data block: checksum, restart array, entry decoding, key order within and
/// across blocks, separators, and the filter's answer for every user key. Returns true if
/// every block could be read in full (so the totals in `c` are the table's).
fn check_data_blocks(
    r: &mut Report,
    path: &Path,
    file: &dyn RandomAccessFile,
    index: &[IndexEntry],
    data_end: u64,
    (filter, extractor, range_filter): (
        Option<&Filter>,
        Option<crate::PrefixExtractor>,
        Option<&RangeFilter>,
    ),
    c: &mut Contents,
) -> bool {
    let whole_keys = filter.is_some_and(|f| f.contents().whole_keys);
    let mut prev_prefix: Option<Vec<u8>> = None;
    let mut all_read = true;
    // Last internal key seen (across blocks) and last user key, for order and distinct counts.
    let mut prev_key: Option<Vec<u8>> = None;
    let mut prev_sep: Option<&[u8]> = None;
    let mut filter_misses = 0u64;
    let mut first_filter_miss: Option<(u64, Vec<u8>)> = None;
    let mut range_filter_misses = 0u64;
    let mut first_range_filter_miss: Option<(u64, Vec<u8>)> = None;
    for (i, (sep, h)) in index.iter().enumerate() {
        r.checked.data_blocks += 1;
        let block = match load_block(file, path, *h, data_end) {
            Ok(b) => b,
            Err(e) => {
                all_read = false;
                r.error(path, e);
                prev_sep = Some(sep);
                continue;
            }
        };
        let mut it = block.iter();
        let mut first_in_block = true;
        let mut last_in_block: Option<Vec<u8>> = None;
        let mut step = it.seek_to_first();
        let mut block_read = true;
        loop {
            if let Err(e) = step {
                all_read = false;
                block_read = false;
                r.error(path, e.in_file(path, h.offset));
                break;
            }
            if !it.valid() {
                break;
            }
            let key = it.key();
            let Some(parsed) = parse_internal_key(key) else {
                all_read = false;
                block_read = false;
                r.problem(
                    path,
                    Some(h.offset),
                    format!("data block {i}: key is not an internal key"),
                );
                break;
            };
            if let Some(prev) = &prev_key {
                if compare_internal(prev, key) != Ordering::Less {
                    let where_ = if first_in_block {
                        "first key is not above the previous block's last key"
                    } else {
                        "keys out of order"
                    };
                    r.problem(path, Some(h.offset), format!("data block {i}: {where_}"));
                }
            }
            if first_in_block {
                // The previous separator must sort below this block's first key.
                if let Some(ps) = prev_sep {
                    if compare_internal(ps, key) != Ordering::Less {
                        r.problem(
                            path,
                            Some(h.offset),
                            format!(
                                "index separator {} is not below data block {i}'s first key",
                                i - 1
                            ),
                        );
                    }
                }
                first_in_block = false;
            }
            let new_user_key = prev_key
                .as_deref()
                .and_then(parse_internal_key)
                .map_or(true, |p| p.user_key != parsed.user_key);
            if new_user_key {
                c.distinct_keys += 1;
                if range_filter.is_some_and(|f| !may_hold_key(f, parsed.user_key)) {
                    range_filter_misses += 1;
                    first_range_filter_miss.get_or_insert((h.offset, parsed.user_key.to_vec()));
                }
                if let Some(f) = filter.filter(|_| whole_keys) {
                    if !f.may_contain(parsed.user_key) {
                        filter_misses += 1;
                        first_filter_miss.get_or_insert((h.offset, parsed.user_key.to_vec()));
                    }
                }
                let prefix = extractor.and_then(|e| e.prefix(parsed.user_key));
                if let (Some(p), Some(f)) = (prefix, filter) {
                    if prev_prefix.as_deref() != Some(p) {
                        c.distinct_prefixes += 1;
                        prev_prefix = Some(p.to_vec());
                        if !f.may_contain_prefix(p) {
                            filter_misses += 1;
                            first_filter_miss.get_or_insert((h.offset, parsed.user_key.to_vec()));
                        }
                    }
                }
            }
            c.entries += 1;
            if parsed.kind == ValueKind::Delete {
                c.tombstones += 1;
            }
            if parsed.kind.is_operand() {
                c.merges += 1;
            }
            // A blob reference's expiry stands before it, as an inline value's does.
            if parsed.kind.is_expiring() {
                match crate::key::split_expiring(it.value()) {
                    Some((at, _)) => {
                        if c.expiring == 0 {
                            (c.oldest_expiry, c.newest_expiry) = (at, at);
                        }
                        c.expiring += 1;
                        c.oldest_expiry = c.oldest_expiry.min(at);
                        c.newest_expiry = c.newest_expiry.max(at);
                        c.expiring_bytes += (key.len() + it.value().len()) as u64;
                    }
                    None => c.short_expiring += 1,
                }
            }
            if parsed.kind.is_blob() {
                let stored = it.value();
                let encoded = if parsed.kind == ValueKind::BlobPutExpiring {
                    crate::key::split_expiring(stored).map(|(_, v)| v)
                } else {
                    Some(stored)
                };
                match encoded.map(BlobRef::decode) {
                    Some(Ok(reference)) => {
                        c.blob_ref_bytes += reference.len;
                        c.blob_refs.push(FoundRef {
                            key: parsed.user_key.to_vec(),
                            block: h.offset,
                            reference,
                        });
                    }
                    _ => r.problem(
                        path,
                        Some(h.offset),
                        format!(
                            "data block {i}: malformed blob reference for key {}",
                            quoted(parsed.user_key)
                        ),
                    ),
                }
            }
            if c.smallest_key.is_none() {
                c.smallest_key = Some(parsed.user_key.to_vec());
                c.smallest_seq = parsed.seq;
                c.largest_seq = parsed.seq;
            }
            c.smallest_seq = c.smallest_seq.min(parsed.seq);
            c.largest_seq = c.largest_seq.max(parsed.seq);
            c.largest_key = Some(parsed.user_key.to_vec());
            c.raw_key_bytes += key.len() as u64;
            c.raw_value_bytes += it.value().len() as u64;
            r.checked.entries += 1;
            prev_key = Some(key.to_vec());
            last_in_block = Some(key.to_vec());
            step = it.next();
        }
        match &last_in_block {
            None if block_read => {
                r.problem(path, Some(h.offset), format!("data block {i} holds no entries"));
            }
            Some(last) if compare_internal(last, sep) == Ordering::Greater => {
                r.problem(
                    path,
                    Some(h.offset),
                    format!("index separator {i} is below data block {i}'s last key"),
                );
            }
            _ => {}
        }
        prev_sep = Some(sep);
    }
    if let Some((offset, key)) = first_filter_miss {
        r.problem(
            path,
            Some(offset),
            format!(
                "filter answers \"no\" for {filter_misses} key(s) the table holds (first: {})",
                quoted(&key)
            ),
        );
    }
    if let Some((offset, key)) = first_range_filter_miss {
        r.problem(
            path,
            Some(offset),
            format!(
                "range filter answers \"no\" for {range_filter_misses} key(s) the table holds \
                 (first: {})",
                quoted(&key)
            ),
        );
    }
    all_read
}

/// Whether the range filter may hold `key` (asked as the range of that key alone).
fn may_hold_key(f: &RangeFilter, key: &[u8]) -> bool {
    use std::ops::Bound::Included;
    f.probe(Included(key), Included(key)) != RangeProbe::Absent
}

/// The properties must describe what is really in the file.
fn check_properties(
    r: &mut Report,
    path: &Path,
    p: &TableProperties,
    footer: &Footer,
    found: &Found<'_>,
) {
    let Found { index, filter, contents, range_dels } = *found;
    let at = Some(footer.properties.offset);
    let mut mismatch = |what: &str, recorded: String, actual: String| {
        if recorded != actual {
            r.problem(
                path,
                at,
                format!("properties record {what} {recorded} but the table has {actual}"),
            );
        }
    };
    let disk = |h: BlockHandle| h.size.saturating_add(BLOCK_TRAILER_LEN as u64);
    mismatch("format version", p.format_version.to_string(), footer.version.to_string());
    mismatch("index bytes", p.index_bytes.to_string(), disk(footer.index).to_string());
    mismatch("filter bytes", p.filter_bytes.to_string(), disk(footer.filter).to_string());
    if let Some(index) = index {
        let sizes: Vec<u64> = index.iter().map(|(_, h)| disk(*h)).collect();
        mismatch("data blocks", p.num_data_blocks.to_string(), sizes.len().to_string());
        let total = sizes.iter().fold(0u64, |a, &b| a.saturating_add(b));
        mismatch("data bytes", p.data_bytes.to_string(), total.to_string());
        let min = sizes.iter().copied().min().unwrap_or(0);
        let max = sizes.iter().copied().max().unwrap_or(0);
        mismatch("smallest data block bytes", p.min_data_block_bytes.to_string(), min.to_string());
        mismatch("largest data block bytes", p.max_data_block_bytes.to_string(), max.to_string());
    }
    if let Some(f) = filter {
        mismatch(
            "filter kind",
            format!("{:?}", p.filter_kind),
            format!("{:?}", f.kind().to_string()),
        );
        mismatch("filter probes", p.filter_probes.to_string(), f.num_probes().to_string());
    }
    if let Some(ts) = range_dels {
        let n = ts.len().to_string();
        mismatch("range tombstones", p.num_range_deletions.to_string(), n);
    }
    let Some(c) = contents else { return };
    let k = |v: &Option<Vec<u8>>| quoted(v.as_deref().unwrap_or(b""));
    mismatch("entries", p.num_entries.to_string(), c.entries.to_string());
    mismatch("tombstones", p.num_tombstones.to_string(), c.tombstones.to_string());
    mismatch("expiring entries", p.num_expiring.to_string(), c.expiring.to_string());
    if c.expiring > 0 {
        mismatch("oldest expiry", p.oldest_expiry.to_string(), c.oldest_expiry.to_string());
        mismatch("newest expiry", p.newest_expiry.to_string(), c.newest_expiry.to_string());
        mismatch("expiring bytes", p.expiring_bytes.to_string(), c.expiring_bytes.to_string());
    }
    mismatch("merge operands", p.num_merge_operands.to_string(), c.merges.to_string());
    let refs = c.blob_refs.len().to_string();
    mismatch("blob references", p.num_blob_refs.to_string(), refs);
    mismatch("blob reference bytes", p.blob_ref_bytes.to_string(), c.blob_ref_bytes.to_string());
    // Blob references exactly in tables of format version 5, else merge operands exactly in
    // tables of version 4, and expiring entries in tables of version 3 unless they also hold
    // operands (the properties say whether the table has some: they were checked against the
    // entries above).
    let want_version = match (p.num_merge_operands > 0, p.num_expiring > 0, footer.version) {
        _ if p.num_blob_refs > 0 => BLOB_FORMAT_VERSION.to_string(),
        (true, _, _) => MERGE_FORMAT_VERSION.to_string(),
        (false, true, _) => EXPIRY_FORMAT_VERSION.to_string(),
        (false, false, EXPIRY_FORMAT_VERSION | MERGE_FORMAT_VERSION | BLOB_FORMAT_VERSION) => {
            "1 or 2".to_string()
        }
        (false, false, v) => v.to_string(),
    };
    let what = format!(
        "{} expiring entries and {} merge operands, so format version",
        p.num_expiring, p.num_merge_operands
    );
    mismatch(&what, want_version, footer.version.to_string());
    let short = c.short_expiring.to_string();
    mismatch("expiring entries without an 8-byte expiry:", "0".into(), short);
    mismatch("raw key bytes", p.raw_key_bytes.to_string(), c.raw_key_bytes.to_string());
    mismatch("raw value bytes", p.raw_value_bytes.to_string(), c.raw_value_bytes.to_string());
    // The key and sequence ranges cover the range tombstones too (see `TableBuilder::finish`).
    if let Some(ts) = range_dels {
        let mut keys = c.smallest_key.clone().zip(c.largest_key.clone());
        let mut seqs = (c.entries > 0).then_some((c.smallest_seq, c.largest_seq));
        if let (Some(first), Some(last)) = (ts.first(), ts.last()) {
            let (lo, hi) = (first.start.clone(), last_key_before(&last.end).to_vec());
            keys = Some(match keys {
                Some((s, l)) => (s.min(lo), l.max(hi)),
                None => (lo, hi),
            });
            for t in ts {
                seqs = Some(seqs.map_or((t.seq, t.seq), |(s, l)| (s.min(t.seq), l.max(t.seq))));
            }
        }
        if let (Some((smallest, largest)), Some((lo, hi))) = (keys, seqs) {
            mismatch("smallest key", k(&Some(p.smallest_user_key.clone())), k(&Some(smallest)));
            mismatch("largest key", k(&Some(p.largest_user_key.clone())), k(&Some(largest)));
            mismatch("smallest sequence", p.smallest_seq.to_string(), lo.to_string());
            mismatch("largest sequence", p.largest_seq.to_string(), hi.to_string());
        }
    }
    if let Some(f) = filter.filter(|f| f.kind() != FilterKind::None) {
        let content = f.contents();
        if content.prefixes {
            mismatch("prefixes", p.num_prefixes.to_string(), c.distinct_prefixes.to_string());
        }
        let keys = if content.whole_keys { c.distinct_keys } else { 0 };
        let entries = keys + if content.prefixes { c.distinct_prefixes } else { 0 };
        if f.num_keys() != entries {
            r.problem(
                path,
                Some(footer.filter.offset),
                if content.prefixes {
                    format!(
                        "filter was built over {} entries but the table holds {keys} distinct \
                         keys and {} distinct prefixes for it",
                        f.num_keys(),
                        c.distinct_prefixes
                    )
                } else {
                    format!(
                        "filter was built over {} keys but the table holds {} distinct keys",
                        f.num_keys(),
                        c.distinct_keys
                    )
                },
            );
        }
    }
}
