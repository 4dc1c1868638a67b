//! Everything the tool does with one table file (`*.sst`): `inspect` — what it holds and what
//! its parts cost (counts, key and sequence ranges, sizes of the data, index, filter and
//! range-deletion blocks, block sizes, compression, and the filter in detail: its fill, the
//! keys that fill implies, and the false-positive rate expected at it); `dump` — its internal
//! entries in key order, then its range tombstones; `verify`.
//!
//! `inspect` reads the footer, the properties, the in-RAM index, the filter and the range
//! tombstones; no data block is read, so inspecting a large table is instant.

use std::io::Write;
use std::path::Path;

use bloomkv::check;
use bloomkv::fs::StdFs;
use bloomkv::Error;
use bloomkv_tree::iter::InternalIterator;
use bloomkv_tree::key::{internal_key, parse_internal_key, KIND_FOR_SEEK, MAX_SEQNO};
use bloomkv_tree::table::format::{BLOCK_TRAILER_LEN, FOOTER_LEN};
use bloomkv_tree::table::Compression;
use serde::Serialize;

use super::sink::{DumpError, Sink};
use crate::common::{self, ratio, Bytes};

/// What `inspect` prints; field names are part of the tool's interface (see docs/tool.md).
#[derive(Serialize)]
pub struct Report {
    file: String,
    file_size: u64,
    format_version: u32,
    /// Seconds since the Unix epoch, as the properties hold it.
    creation_time: u64,
    /// The same as an RFC 3339 UTC date-time.
    created: String,
    entries: u64,
    tombstones: u64,
    puts: u64,
    smallest_key: String,
    largest_key: String,
    smallest_seq: u64,
    largest_seq: u64,
    raw_key_bytes: u64,
    raw_value_bytes: u64,
    avg_key_bytes: f64,
    avg_value_bytes: f64,
    data_bytes: u64,
    index_bytes: u64,
    filter_bytes: u64,
    properties_bytes: u64,
    footer_bytes: u64,
    data_blocks: u64,
    data_block_bytes: BlockSizes,
    compression: CompressionReport,
    index_memory_bytes: usize,
    filter: FilterReport,
    /// Range tombstones in the range-deletion block (0 without one).
    range_tombstones: u64,
    /// The range-deletion block, or null when the table has none (format version 1).
    range_deletion_block: Option<BlockReport>,
    /// The expiring entries (format version 3), or null when the table has none.
    expiring: Option<ExpiryReport>,
    /// The range filter; left out when the table has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    range_filter: Option<RangeFilterReport>,
    /// Merge operands (format version 4); left out when the table has none.
    #[serde(skip_serializing_if = "is_zero")]
    merge_operands: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A table's expiring entries, as its properties record them.
#[derive(Serialize)]
struct ExpiryReport {
    entries: u64,
    /// Internal keys and stored values (expiry included).
    bytes: u64,
    /// Milliseconds since the Unix epoch.
    oldest_expiry_ms: u64,
    /// The same as an RFC 3339 UTC date-time (to the second).
    oldest_expiry: String,
    newest_expiry_ms: u64,
    newest_expiry: String,
}

/// A table's range filter: where its block is, what it holds, and what it answers.
#[derive(Serialize)]
struct RangeFilterReport {
    offset: u64,
    size: u64,
    /// On disk, trailer included.
    bytes: u64,
    keys: u64,
    /// Bits of its codes per key (header and prefix aside).
    bits_per_key: f64,
    requested_bits_per_key: f64,
    memory_bytes: usize,
    /// The prefix its keys share, shown as keys are.
    prefix: String,
    /// Bytes after the prefix each key maps to an integer by.
    mapped_bytes: u32,
    /// The widest range, in those integers, the filter is asked about; wider ones read the
    /// table.
    max_width: u64,
    /// A range of width w ≤ `max_width` holding none of its keys is let through with a
    /// chance of at most w times this.
    fpr_bound_per_integer: f64,
}

/// Where a block is: its handle, and its bytes on disk (trailer included).
#[derive(Serialize)]
struct BlockReport {
    offset: u64,
    size: u64,
    bytes: u64,
}

/// Data blocks on disk, trailer included.
#[derive(Serialize)]
struct BlockSizes {
    min: u64,
    mean: f64,
    max: u64,
}

#[derive(Serialize)]
struct CompressionReport {
    kind: &'static str,
    level: i32,
    ratio: f64,
}

#[derive(Serialize)]
struct FilterReport {
    kind: String,
    /// Per filter entry where the filter holds prefixes beside its keys (`prefix`), as
    /// `requested_bits_per_key` and `keys` are.
    bits_per_key: f64,
    requested_bits_per_key: f64,
    /// Probes per key; for a Ribbon filter, its result (fingerprint) bits.
    probes: u32,
    lines: usize,
    /// Ribbon only: the filter's slots.
    #[serde(skip_serializing_if = "Option::is_none")]
    slots: Option<u64>,
    bits: u64,
    memory_bytes: usize,
    fraction_bits_set: f64,
    keys: u64,
    estimated_keys: f64,
    expected_fpr: f64,
    /// Only for a filter holding prefixes.
    #[serde(skip_serializing_if = "Option::is_none")]
    prefix: Option<PrefixFilterReport>,
}

/// The prefix entries of a filter: the extractor they come from, how many, and what they
/// share with the keys.
#[derive(Serialize)]
struct PrefixFilterReport {
    extractor: String,
    prefixes: u64,
    /// Whether the filter holds whole keys too (point lookups use it only then).
    whole_keys: bool,
    /// Bits of the (shared) array per prefix-or-key entry.
    bits_per_entry: f64,
    /// The rate at which a scan of an absent prefix reads the table anyway.
    expected_fpr: f64,
}

/// `inspect`: the report for the table at `path`.
pub fn inspect(path: &Path, fmt: Bytes) -> bloomkv::Result<Report> {
    let table = common::open_table(path)?;
    let p = table.properties();
    let f = table.filter();
    let footer = table.footer();
    // Block sizes from the index handles (what is really on disk), not from the properties,
    // so a mismatch would show here and in `verify`.
    let sizes: Vec<u64> =
        table.data_block_handles().iter().map(|h| h.size + BLOCK_TRAILER_LEN as u64).collect();
    let data_blocks = sizes.len() as u64;
    let data_on_disk: u64 = sizes.iter().sum();
    let disk =
        |h: bloomkv_tree::table::BlockHandle| h.size.saturating_add(BLOCK_TRAILER_LEN as u64);
    let (kind, level) = match p.compression {
        Compression::None => ("none", 0),
        Compression::Zstd { level } => ("zstd", level),
    };
    Ok(Report {
        file: common::display(path),
        file_size: table.file_size(),
        format_version: footer.version,
        creation_time: p.creation_time,
        created: common::utc_date_time(p.creation_time),
        entries: p.num_entries,
        tombstones: p.num_tombstones,
        puts: p.num_entries.saturating_sub(p.num_tombstones),
        smallest_key: fmt.show(&p.smallest_user_key),
        largest_key: fmt.show(&p.largest_user_key),
        smallest_seq: p.smallest_seq,
        largest_seq: p.largest_seq,
        raw_key_bytes: p.raw_key_bytes,
        raw_value_bytes: p.raw_value_bytes,
        avg_key_bytes: ratio(p.raw_key_bytes, p.num_entries),
        avg_value_bytes: ratio(p.raw_value_bytes, p.num_entries),
        data_bytes: data_on_disk,
        index_bytes: disk(footer.index),
        filter_bytes: disk(footer.filter),
        properties_bytes: disk(footer.properties),
        footer_bytes: FOOTER_LEN as u64,
        data_blocks,
        data_block_bytes: BlockSizes {
            min: sizes.iter().copied().min().unwrap_or(0),
            mean: ratio(data_on_disk, data_blocks),
            max: sizes.iter().copied().max().unwrap_or(0),
        },
        compression: CompressionReport {
            kind,
            level,
            ratio: ratio(p.raw_key_bytes.saturating_add(p.raw_value_bytes), data_on_disk),
        },
        index_memory_bytes: table.index_memory_bytes(),
        filter: FilterReport {
            kind: f.kind().to_string(),
            bits_per_key: f.bits_per_key(),
            requested_bits_per_key: f.requested_bits_per_key(),
            probes: f.num_probes(),
            lines: f.num_lines(),
            slots: match &f {
                bloomkv::filter::Filter::Ribbon(r) => Some(r.num_slots()),
                _ => None,
            },
            bits: f.num_bits(),
            memory_bytes: f.memory_bytes(),
            fraction_bits_set: f.fraction_bits_set(),
            keys: f.num_keys(),
            estimated_keys: f.estimated_keys(),
            expected_fpr: f.expected_fpr(),
            prefix: f.contents().prefixes.then(|| PrefixFilterReport {
                extractor: p.prefix_extractor.clone(),
                prefixes: p.num_prefixes,
                whole_keys: f.contents().whole_keys,
                bits_per_entry: f.bits_per_key(),
                expected_fpr: f.expected_fpr(),
            }),
        },
        range_tombstones: table.range_tombstones().len() as u64,
        range_deletion_block: (p.num_range_deletions > 0).then(|| BlockReport {
            offset: p.range_del.offset,
            size: p.range_del.size,
            bytes: disk(p.range_del),
        }),
        expiring: (p.num_expiring > 0).then(|| ExpiryReport {
            entries: p.num_expiring,
            bytes: p.expiring_bytes,
            oldest_expiry_ms: p.oldest_expiry,
            oldest_expiry: common::utc_date_time(p.oldest_expiry / 1000),
            newest_expiry_ms: p.newest_expiry,
            newest_expiry: common::utc_date_time(p.newest_expiry / 1000),
        }),
        range_filter: table.range_filter().map(|rf| RangeFilterReport {
            offset: p.range_filter.offset,
            size: p.range_filter.size,
            bytes: disk(p.range_filter),
            keys: rf.num_keys(),
            bits_per_key: ratio(rf.num_bits(), rf.num_keys()),
            requested_bits_per_key: rf.bits_per_key(),
            memory_bytes: rf.memory_bytes(),
            prefix: fmt.show(rf.prefix()),
            mapped_bytes: rf.mapped_bytes(),
            max_width: rf.max_width(),
            fpr_bound_per_integer: rf.fpr_bound(1),
        }),
        merge_operands: p.num_merge_operands,
    })
}

fn key_text(fmt: Bytes, shown: &str) -> String {
    if fmt.hex {
        shown.to_string()
    } else {
        format!("\"{shown}\"")
    }
}

/// `inspect`'s text form of `r`.
pub fn print_inspect(out: &mut common::Out, r: &Report, fmt: Bytes) -> std::io::Result<()> {
    let f = &r.filter;
    writeln!(out, "table            {}", r.file)?;
    writeln!(out, "file size        {} bytes, format version {}", r.file_size, r.format_version)?;
    writeln!(out, "created          {} ({} s since the Unix epoch)", r.created, r.creation_time)?;
    writeln!(out, "entries          {} ({} puts, {} tombstones)", r.entries, r.puts, r.tombstones)?;
    writeln!(
        out,
        "key range        {} .. {}",
        key_text(fmt, &r.smallest_key),
        key_text(fmt, &r.largest_key)
    )?;
    writeln!(out, "sequence range   {} .. {}", r.smallest_seq, r.largest_seq)?;
    writeln!(
        out,
        "raw keys         {} bytes (avg {:.1} per entry, 8-byte trailer included)",
        r.raw_key_bytes, r.avg_key_bytes
    )?;
    writeln!(
        out,
        "raw values       {} bytes (avg {:.1} per entry)",
        r.raw_value_bytes, r.avg_value_bytes
    )?;
    writeln!(
        out,
        "data             {} bytes in {} blocks (min {} / mean {:.1} / max {} bytes)",
        r.data_bytes,
        r.data_blocks,
        r.data_block_bytes.min,
        r.data_block_bytes.mean,
        r.data_block_bytes.max
    )?;
    writeln!(
        out,
        "index            {} bytes on disk, {} bytes in RAM",
        r.index_bytes, r.index_memory_bytes
    )?;
    writeln!(out, "filter block     {} bytes on disk", r.filter_bytes)?;
    match &r.range_deletion_block {
        Some(b) => writeln!(
            out,
            "range deletions  {} range tombstones in {} bytes on disk at offset {} (size {}; \
             format version {})",
            r.range_tombstones, b.bytes, b.offset, b.size, r.format_version
        )?,
        None => writeln!(out, "range deletions  none")?,
    }
    match &r.expiring {
        Some(e) => writeln!(
            out,
            "expiring         {} entries in {} bytes; oldest expiry {} ({} ms), newest {} ({} ms)",
            e.entries,
            e.bytes,
            e.oldest_expiry,
            e.oldest_expiry_ms,
            e.newest_expiry,
            e.newest_expiry_ms
        )?,
        None => writeln!(out, "expiring         none")?,
    }
    if let Some(rf) = &r.range_filter {
        writeln!(
            out,
            "range filter     {} keys in {} bytes on disk at offset {} (size {}), {} bytes in RAM",
            rf.keys, rf.bytes, rf.offset, rf.size, rf.memory_bytes
        )?;
        writeln!(
            out,
            "  bits per key   {:.2} (requested {:.2})",
            rf.bits_per_key, rf.requested_bits_per_key
        )?;
        writeln!(
            out,
            "  keys map by    {} byte(s) after the prefix {}",
            rf.mapped_bytes,
            key_text(fmt, &rf.prefix)
        )?;
        writeln!(
            out,
            "  answers        ranges up to {} integers wide; an empty one of width w passes \
             with at most w x {:.6}",
            rf.max_width, rf.fpr_bound_per_integer
        )?;
    }
    if r.merge_operands > 0 {
        writeln!(out, "merge operands   {} (format version 4)", r.merge_operands)?;
    }
    writeln!(
        out,
        "properties       {} bytes; footer {} bytes",
        r.properties_bytes, r.footer_bytes
    )?;
    let level = if r.compression.kind == "zstd" {
        format!(" level {}", r.compression.level)
    } else {
        String::new()
    };
    writeln!(
        out,
        "compression      {}{level}, ratio {:.2} (raw key+value bytes / data bytes on disk)",
        r.compression.kind, r.compression.ratio
    )?;
    writeln!(out, "filter")?;
    writeln!(out, "  kind           {}", f.kind)?;
    // A filter holding prefixes beside its keys is sized, and requested, per entry, and
    // counts its entries.
    let (per, counted) = match f.prefix.as_ref().is_some_and(|p| p.whole_keys) {
        true => ("bits per entry", "entries"),
        false => ("bits per key", "keys"),
    };
    writeln!(out, "  {per:<15}{:.2} (requested {:.2})", f.bits_per_key, f.requested_bits_per_key)?;
    match f.slots {
        Some(slots) => {
            writeln!(
                out,
                "  result bits    {} (a non-member matches with 2^-{})",
                f.probes, f.probes
            )?;
            writeln!(out, "  slots          {slots} ({} bits)", f.bits)?;
        }
        None => {
            writeln!(out, "  probes         {}", f.probes)?;
            writeln!(out, "  lines          {} ({} bits)", f.lines, f.bits)?;
        }
    }
    writeln!(out, "  memory         {} bytes in RAM", f.memory_bytes)?;
    writeln!(out, "  bits set       {:.4}", f.fraction_bits_set)?;
    match f.slots {
        // A Ribbon filter's bits say nothing of its key count.
        Some(_) => writeln!(out, "  {counted:<15}{}", f.keys)?,
        None => writeln!(
            out,
            "  {counted:<15}{} actual, {:.0} estimated from the fill",
            f.keys, f.estimated_keys
        )?,
    }
    writeln!(
        out,
        "  expected FPR   {:.6} ({:.4}%) at this fill",
        f.expected_fpr,
        f.expected_fpr * 100.0
    )?;
    if let Some(pf) = &f.prefix {
        writeln!(out, "prefix filter")?;
        writeln!(out, "  extractor      {}", pf.extractor)?;
        writeln!(
            out,
            "  prefixes       {} ({}), {:.2} bits per entry",
            pf.prefixes,
            if pf.whole_keys { "beside the whole keys" } else { "alone: no whole keys" },
            pf.bits_per_entry
        )?;
        writeln!(
            out,
            "  expected FPR   {:.6} ({:.4}%) for an absent prefix",
            pf.expected_fpr,
            pf.expected_fpr * 100.0
        )?;
    }
    Ok(())
}

/// `dump`: the table's selected internal entries in key order, then its range tombstones
/// that overlap the selection (they live in a block of their own); `file` labels them
/// (database dumps). Returns false if the limit stopped it.
pub fn dump(sink: &mut Sink, path: &Path, file: Option<&str>) -> Result<bool, DumpError> {
    let table = common::open_table(path)?;
    let mut it = table.iter_with(false);
    match sink.range.start() {
        Some(start) => it.seek(&internal_key(start, MAX_SEQNO, KIND_FOR_SEEK))?,
        None => it.seek_to_first()?,
    }
    while it.valid() {
        let parsed = parse_internal_key(it.key())
            .ok_or_else(|| Error::corruption(path, 0, "malformed internal key in a data block"))?;
        if sink.range.past_end(parsed.user_key) {
            break;
        }
        if sink.range.contains(parsed.user_key) {
            let mut e =
                sink.entry(parsed.user_key, Some(parsed.seq), Some(parsed.kind), it.value());
            e.file = file.map(str::to_string);
            if !sink.push(e)? {
                return Ok(false);
            }
        }
        it.next()?;
    }
    for t in table.range_tombstones() {
        if sink.range.overlaps(&t.start, &t.end) {
            let mut e = sink.range_delete_entry(&t.start, &t.end, t.seq);
            e.file = file.map(str::to_string);
            if !sink.push(e)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// `verify`: the library's check of one table.
pub fn verify(path: &Path) -> check::Report {
    check::table_file(&StdFs, path)
}
