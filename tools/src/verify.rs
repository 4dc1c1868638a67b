//! `bloomkv verify <table-file | wal-file | manifest | db-dir>`: checks every byte the engine
//! relies on and reports each problem with its file, offset and what is wrong.
//!
//! A table is checked part by part (footer, region layout, properties, filter, index, every
//! data block) with the library's decoders rather than only through [`Table::open`], so one
//! damaged part does not hide the others; `Table::open` is run last as well, so `verify` never
//! accepts a table the engine would refuse. A database adds the manifest, every live table's
//! presence, size and manifest metadata, the non-overlap of sorted levels, and the WALs.
//!
//! Exit status: 0 clean, 1 corruption found, 2 usage or I/O error (and no corruption). The
//! checker never panics on bad input: every decoder it calls returns errors, its own
//! arithmetic is checked, and as a last line of defence each file is checked under
//! `catch_unwind`, so a bug would be reported as an internal error (exit 2), not a crash.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use bloomkv::filename::{self, FileKind};
use bloomkv::filter::{Filter, FilterKind};
use bloomkv::fs::{FileSystem, RandomAccessFile, StdFs};
use bloomkv::iter::InternalIterator;
use bloomkv::key::{compare_internal, parse_internal_key, ValueKind};
use bloomkv::log::LogReader;
use bloomkv::table::format::{read_block, BLOCK_TRAILER_LEN, FOOTER_LEN};
use bloomkv::table::{Block, BlockHandle, Footer, Table, TableProperties};
use bloomkv::version::edit::{TableMeta, VersionEdit};
use bloomkv::version::set::read_manifest;
use bloomkv::{Error, WriteBatch};
use serde::Serialize;

use crate::common::{self, Target};

/// Options of `verify`.
#[derive(clap::Args)]
pub struct Args {
    /// A table (`*.sst`), WAL segment (`*.log`), manifest (`MANIFEST-*`) or database
    /// directory.
    path: PathBuf,
    /// Print one JSON document (fields documented in docs/tool.md).
    #[arg(long)]
    json: bool,
}

/// One finding: where and what.
#[derive(Serialize, Debug, Clone)]
pub struct Finding {
    /// The file concerned.
    pub file: String,
    /// Byte offset in the file where the damaged structure starts, when meaningful.
    pub offset: Option<u64>,
    /// What is wrong (or, for notes, what was seen).
    pub what: String,
}

/// What was checked, for the summary.
#[derive(Serialize, Debug, Default)]
pub struct Checked {
    tables: u64,
    data_blocks: u64,
    entries: u64,
    wal_files: u64,
    wal_records: u64,
    manifest_edits: u64,
}

/// The report; field names are part of the tool's interface (see docs/tool.md).
#[derive(Serialize, Debug, Default)]
pub struct Report {
    path: String,
    target: &'static str,
    /// "ok", "corrupt" or "error".
    status: &'static str,
    /// Corruption: bytes that are not what the engine wrote.
    problems: Vec<Finding>,
    /// I/O and internal errors that prevented a check.
    errors: Vec<Finding>,
    /// Facts worth knowing that are not damage (a torn WAL tail, orphan files).
    notes: Vec<Finding>,
    checked: Checked,
}

impl Report {
    fn problem(&mut self, file: &Path, offset: Option<u64>, what: impl Into<String>) {
        self.problems.push(Finding { file: common::display(file), offset, what: what.into() });
    }

    fn note(&mut self, file: &Path, offset: Option<u64>, what: impl Into<String>) {
        self.notes.push(Finding { file: common::display(file), offset, what: what.into() });
    }

    /// Files a library error: corruption as a problem (at the file and offset it names),
    /// anything else as an error.
    fn error(&mut self, file: &Path, e: Error) {
        match e {
            Error::Corruption { file: f, offset, reason } => {
                let f = if f.as_os_str().is_empty() { file.to_path_buf() } else { f };
                self.problem(&f, Some(offset), reason);
            }
            other => self.errors.push(Finding {
                file: common::display(file),
                offset: None,
                what: common::chain(&other),
            }),
        }
    }

    fn exit_code(&self) -> u8 {
        if !self.problems.is_empty() {
            1
        } else if !self.errors.is_empty() {
            2
        } else {
            0
        }
    }
}

/// Runs `verify`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let target = common::classify(&args.path)?;
    let report = verify(&args.path, target);
    let mut out = common::stdout();
    let written = if args.json {
        common::write_json(&mut out, &report)
    } else {
        print_text(&mut out, &report)
    };
    common::finish_output(written, &mut out, ExitCode::from(report.exit_code()))
}

/// Checks `path` as `target` and returns the findings.
pub fn verify(path: &Path, target: Target) -> Report {
    let mut r = Report {
        path: common::display(path),
        target: match target {
            Target::Db => "db",
            Target::Table => "table",
            Target::Wal => "wal",
            Target::Manifest => "manifest",
        },
        ..Report::default()
    };
    match target {
        Target::Table => {
            guarded(&mut r, path, |r| {
                check_table(r, path);
            });
        }
        Target::Wal => guarded(&mut r, path, |r| check_wal(r, path, true, false)),
        Target::Manifest => guarded(&mut r, path, |r| check_manifest_file(r, path)),
        Target::Db => check_db(&mut r, path),
    }
    r.status = match r.exit_code() {
        0 => "ok",
        1 => "corrupt",
        _ => "error",
    };
    r
}

/// Runs one file's checks, turning a panic (a bug in the checker or the library) into an
/// internal error instead of a crash, so the other files still get checked.
fn guarded(r: &mut Report, file: &Path, check: impl FnOnce(&mut Report)) {
    let mut local = Report::default();
    let outcome = catch_unwind(AssertUnwindSafe(|| check(&mut local)));
    r.problems.append(&mut local.problems);
    r.errors.append(&mut local.errors);
    r.notes.append(&mut local.notes);
    let c = &mut r.checked;
    let l = &local.checked;
    c.tables += l.tables;
    c.data_blocks += l.data_blocks;
    c.entries += l.entries;
    c.wal_files += l.wal_files;
    c.wal_records += l.wal_records;
    c.manifest_edits += l.manifest_edits;
    if outcome.is_err() {
        r.errors.push(Finding {
            file: common::display(file),
            offset: None,
            what: "internal error: the checker panicked on this file (a bug; please report it)"
                .into(),
        });
    }
}

/// What the table's entries turned out to be, for comparing with the properties and the
/// manifest.
#[derive(Debug, Default)]
struct Contents {
    entries: u64,
    tombstones: u64,
    smallest_key: Option<Vec<u8>>,
    largest_key: Option<Vec<u8>>,
    smallest_seq: u64,
    largest_seq: u64,
    raw_key_bytes: u64,
    raw_value_bytes: u64,
    distinct_keys: u64,
}

/// Facts about a checked table, used by the database checks.
#[derive(Debug)]
struct TableFacts {
    properties: Option<TableProperties>,
}

/// Checks one table file; returns what could be read of it.
fn check_table(r: &mut Report, path: &Path) -> TableFacts {
    match StdFs.open(path) {
        Ok(file) => check_open_table(r, path, file),
        Err(e) => {
            r.checked.tables += 1;
            r.error(path, e);
            TableFacts { properties: None }
        }
    }
}

/// Checks the table `file` (opened from `path`). Working on an open file means a database
/// owner deleting it meanwhile (after a compaction) cannot disturb the check.
fn check_open_table(r: &mut Report, path: &Path, file: Arc<dyn RandomAccessFile>) -> TableFacts {
    let mut facts = TableFacts { properties: None };
    let problems_before = r.problems.len();
    r.checked.tables += 1;
    let size = file.size();
    let Some(footer_offset) = size.checked_sub(FOOTER_LEN as u64) else {
        r.problem(path, Some(0), format!("file of {size} bytes is too short for a table footer"));
        return facts;
    };
    let mut buf = [0u8; FOOTER_LEN];
    if let Err(e) = file.read_exact_at(&mut buf, footer_offset) {
        r.error(path, e);
        return facts;
    }
    let footer = match Footer::decode(&buf, path, footer_offset) {
        Ok(f) => f,
        Err(e) => {
            // Without a footer nothing else can be located.
            r.error(path, e);
            return facts;
        }
    };

    // Regions, in file order: data | filter | properties | index | footer, back to back.
    let regions = [
        ("filter", footer.filter, footer.properties.offset),
        ("properties", footer.properties, footer.index.offset),
        ("index", footer.index, footer_offset),
    ];
    let mut region_ok = [true; 3];
    for (i, (name, h, next)) in regions.iter().enumerate() {
        match h.end() {
            Some(end) if end == *next => {}
            Some(end) if end < *next => {
                // The library tolerates a gap; the builder never leaves one.
                r.problem(
                    path,
                    Some(end),
                    format!("{} unexplained bytes after the {name} block", next - end),
                );
            }
            _ => {
                region_ok[i] = false;
                r.problem(
                    path,
                    Some(footer_offset),
                    format!(
                        "footer's {name} handle (offset {}, size {}) overlaps what follows it \
                         (at {next})",
                        h.offset, h.size
                    ),
                );
            }
        }
    }
    // Data blocks end where the filter starts; never look past the footer whatever it says.
    let data_end = footer.filter.offset.min(footer_offset);

    // Properties.
    let props = if region_ok[1] {
        match read_block(file.as_ref(), path, footer.properties, footer.index.offset).and_then(
            |raw| {
                TableProperties::decode(&raw).map_err(|e| e.in_file(path, footer.properties.offset))
            },
        ) {
            Ok(p) => Some(p),
            Err(e) => {
                r.error(path, e);
                None
            }
        }
    } else {
        None
    };
    // Filter.
    let filter = if region_ok[0] {
        match read_block(file.as_ref(), path, footer.filter, footer.properties.offset)
            .and_then(|raw| Filter::decode(&raw).map_err(|e| e.in_file(path, footer.filter.offset)))
        {
            Ok(f) => Some(f),
            Err(e) => {
                r.error(path, e);
                None
            }
        }
    } else {
        None
    };
    // Index.
    let index = if region_ok[2] {
        match read_block(file.as_ref(), path, footer.index, footer_offset)
            .and_then(|raw| Block::new(raw).map_err(|e| e.in_file(path, footer.index.offset)))
        {
            Ok(block) => decode_index(r, path, footer.index.offset, &block),
            Err(e) => {
                r.error(path, e);
                None
            }
        }
    } else {
        None
    };

    let mut contents = Contents::default();
    let mut all_blocks_read = false;
    if let Some(index) = &index {
        check_index_layout(r, path, index, data_end, footer.index.offset);
        all_blocks_read = check_data_blocks(
            r,
            path,
            file.as_ref(),
            index,
            data_end,
            filter.as_ref(),
            &mut contents,
        );
    }

    if let Some(p) = &props {
        check_properties(
            r,
            path,
            p,
            &footer,
            index.as_deref(),
            filter.as_ref(),
            all_blocks_read.then_some(&contents),
        );
    }

    // Never be laxer than the engine: if the checks above found nothing, the library's own
    // open must agree.
    if r.problems.len() == problems_before {
        if let Err(e) = Table::open(file, path.to_path_buf(), None) {
            r.error(path, e);
        }
    }
    facts.properties = props;
    facts
}

/// One index entry: separator and handle.
type IndexEntry = (Vec<u8>, BlockHandle);

/// Decodes the index block at `offset`, reporting (and stopping at) the first bad entry.
fn decode_index(
    r: &mut Report,
    path: &Path,
    offset: u64,
    block: &Block,
) -> Option<Vec<IndexEntry>> {
    let mut it = block.iter();
    let mut entries: Vec<IndexEntry> = Vec::new();
    if let Err(e) = it.seek_to_first() {
        r.error(path, e.in_file(path, offset));
        return None;
    }
    while it.valid() {
        let i = entries.len();
        let key = it.key();
        if parse_internal_key(key).is_none() {
            r.problem(
                path,
                Some(offset),
                format!("index entry {i}: separator is not an internal key"),
            );
            return None;
        }
        if let Some((prev, _)) = entries.last() {
            if compare_internal(prev, key) != Ordering::Less {
                r.problem(path, Some(offset), format!("index entry {i}: separators out of order"));
            }
        }
        match BlockHandle::decode(it.value()) {
            Ok(h) => entries.push((key.to_vec(), h)),
            Err(_) => {
                r.problem(path, Some(offset), format!("index entry {i}: malformed block handle"));
                return None;
            }
        }
        if let Err(e) = it.next() {
            r.error(path, e.in_file(path, offset));
            return None;
        }
    }
    Some(entries)
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
    filter: Option<&Filter>,
    c: &mut Contents,
) -> bool {
    let mut all_read = true;
    // Last internal key seen (across blocks) and last user key, for order and distinct counts.
    let mut prev_key: Option<Vec<u8>> = None;
    let mut prev_sep: Option<&[u8]> = None;
    let mut filter_misses = 0u64;
    let mut first_filter_miss: Option<(u64, Vec<u8>)> = None;
    for (i, (sep, h)) in index.iter().enumerate() {
        r.checked.data_blocks += 1;
        let block = match read_block(file, path, *h, data_end)
            .and_then(|raw| Block::new(raw).map_err(|e| e.in_file(path, h.offset)))
        {
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
                if let Some(f) = filter {
                    if !f.may_contain(parsed.user_key) {
                        filter_misses += 1;
                        first_filter_miss.get_or_insert((h.offset, parsed.user_key.to_vec()));
                    }
                }
            }
            c.entries += 1;
            if parsed.kind == ValueKind::Delete {
                c.tombstones += 1;
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
                common::Bytes { hex: false }.quoted(&key)
            ),
        );
    }
    all_read
}

/// The properties must describe what is really in the file.
fn check_properties(
    r: &mut Report,
    path: &Path,
    p: &TableProperties,
    footer: &Footer,
    index: Option<&[IndexEntry]>,
    filter: Option<&Filter>,
    contents: Option<&Contents>,
) {
    let at = Some(footer.properties.offset);
    let mut mismatch = |what: &str, recorded: String, actual: String| {
        if recorded != actual {
            r.problems.push(Finding {
                file: common::display(path),
                offset: at,
                what: format!("properties record {what} {recorded} but the table has {actual}"),
            });
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
    let Some(c) = contents else { return };
    let k = |v: &Option<Vec<u8>>| common::Bytes { hex: false }.quoted(v.as_deref().unwrap_or(b""));
    mismatch("entries", p.num_entries.to_string(), c.entries.to_string());
    mismatch("tombstones", p.num_tombstones.to_string(), c.tombstones.to_string());
    mismatch("raw key bytes", p.raw_key_bytes.to_string(), c.raw_key_bytes.to_string());
    mismatch("raw value bytes", p.raw_value_bytes.to_string(), c.raw_value_bytes.to_string());
    if c.entries > 0 {
        mismatch("smallest key", k(&Some(p.smallest_user_key.clone())), k(&c.smallest_key));
        mismatch("largest key", k(&Some(p.largest_user_key.clone())), k(&c.largest_key));
        mismatch("smallest sequence", p.smallest_seq.to_string(), c.smallest_seq.to_string());
        mismatch("largest sequence", p.largest_seq.to_string(), c.largest_seq.to_string());
    }
    if let Some(f) = filter.filter(|f| f.kind() != FilterKind::None) {
        if f.num_keys() != c.distinct_keys {
            r.problem(
                path,
                Some(footer.filter.offset),
                format!(
                    "filter was built over {} keys but the table holds {} distinct keys",
                    f.num_keys(),
                    c.distinct_keys
                ),
            );
        }
    }
}

/// Checks a WAL segment: every record intact and a valid write batch. A torn tail is a note
/// when `newest` (what a crash mid-append leaves), corruption otherwise (recovery refuses it).
/// `in_db`: the segment was found by listing a database directory, whose owner may retire
/// it (after a flush) between the listing and the read.
fn check_wal(r: &mut Report, path: &Path, newest: bool, in_db: bool) {
    r.checked.wal_files += 1;
    let data = match StdFs.read_all(path) {
        Ok(d) => d,
        Err(Error::Io { source, .. }) if in_db && source.kind() == std::io::ErrorKind::NotFound => {
            r.note(path, None, "WAL segment was retired by the database's owner while verifying");
            return;
        }
        Err(e) => return r.error(path, e),
    };
    let mut reader = LogReader::new(path.to_path_buf(), data);
    let mut prev_seq: Option<(u64, u64)> = None;
    loop {
        match reader.next_record() {
            Ok(Some(record)) => {
                r.checked.wal_records += 1;
                let offset = reader.last_record_offset();
                match WriteBatch::decode(record) {
                    Ok(b) => {
                        let first = b.sequence();
                        if let Some((prev_first, prev_len)) = prev_seq {
                            if first < prev_first.saturating_add(prev_len) {
                                r.problem(
                                    path,
                                    Some(offset),
                                    format!(
                                        "record's sequence number {first} does not follow the \
                                         previous record's {prev_first} (+{prev_len} ops)"
                                    ),
                                );
                            }
                        }
                        prev_seq = Some((first, b.len() as u64));
                    }
                    Err(e) => r.error(path, e.in_file(path, offset)),
                }
            }
            Ok(None) => break,
            Err(e) => {
                // The reader repeats its error from here on; the rest of the file is unread.
                r.error(path, e);
                return;
            }
        }
    }
    let dropped = reader.dropped_tail_bytes();
    if dropped > 0 {
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let at = Some(len.saturating_sub(dropped));
        if newest {
            r.note(
                path,
                at,
                format!("torn record at the end ({dropped} bytes), as a crash mid-append leaves; recovery ignores it"),
            );
        } else {
            r.problem(
                path,
                at,
                format!("torn record ({dropped} bytes) in a WAL segment that is not the newest"),
            );
        }
    }
}

/// Checks a manifest file on its own: every record intact and a valid version edit.
fn check_manifest_file(r: &mut Report, path: &Path) {
    let data = match StdFs.read_all(path) {
        Ok(d) => d,
        Err(e) => return r.error(path, e),
    };
    let mut reader = LogReader::new(path.to_path_buf(), data);
    loop {
        match reader.next_record() {
            Ok(Some(record)) => {
                r.checked.manifest_edits += 1;
                if let Err(e) = VersionEdit::decode(&record) {
                    r.error(path, e.in_file(path, reader.last_record_offset()));
                }
            }
            Ok(None) => break,
            Err(e) => return r.error(path, e),
        }
    }
    if r.checked.manifest_edits == 0 {
        r.problem(path, Some(0), "manifest holds no records");
    }
    let dropped = reader.dropped_tail_bytes();
    if dropped > 0 {
        r.note(
            path,
            None,
            format!("torn record at the end ({dropped} bytes); recovery ignores it"),
        );
    }
}

/// Checks a database directory.
fn check_db(r: &mut Report, dir: &Path) {
    let files = match common::list_db_files(dir) {
        Ok(f) => f,
        Err(e) => return r.error(dir, e),
    };
    let current = filename::current_path(dir);
    let has_data = files
        .iter()
        .any(|(_, k)| matches!(k, FileKind::Manifest(_) | FileKind::Table(_) | FileKind::Wal(_)));
    if !current.exists() && !has_data {
        r.errors.push(Finding {
            file: common::display(dir),
            offset: None,
            what: "no database here (no CURRENT and no database files)".into(),
        });
        return;
    }

    // The manifest as the engine reads it (CURRENT → manifest → folded edits).
    let mut manifest = None;
    if current.exists() {
        guarded(r, &current, |r| match read_manifest(&StdFs, dir) {
            Ok(m) => manifest = Some(m),
            // CURRENT was read (it exists), so a missing file is the manifest it names.
            Err(Error::Io { context, source }) if source.kind() == std::io::ErrorKind::NotFound => {
                r.problem(
                    &current,
                    Some(0),
                    format!("CURRENT names a manifest that is missing ({context})"),
                )
            }
            Err(e) => r.error(&current, e),
        });
    } else {
        r.problem(&current, None, "CURRENT is missing but the directory holds database files");
    }
    // Every record of the live manifest, checked on its own for counts and tail notes.
    if let Some(m) = &manifest {
        let path = filename::manifest_path(dir, m.manifest_number);
        guarded(r, &path, |r| check_manifest_file(r, &path));
    }

    let live: BTreeSet<u64> =
        manifest.iter().flat_map(|m| m.levels.iter().flatten().map(|t| t.number)).collect();
    match &manifest {
        Some(m) => {
            for (level, tables) in m.levels.iter().enumerate() {
                for meta in tables {
                    check_live_table(r, dir, level, meta);
                }
                if level > 0 {
                    check_level_order(r, dir, level, tables, m.manifest_number);
                }
            }
        }
        None => {
            // Without a manifest, check every table file found on its own.
            for (name, kind) in &files {
                if let FileKind::Table(_) = kind {
                    let path = dir.join(name);
                    guarded(r, &path, |r| {
                        check_table(r, &path);
                    });
                }
            }
        }
    }
    for (name, kind) in &files {
        match kind {
            FileKind::Table(n) if manifest.is_some() && !live.contains(n) => r.note(
                &dir.join(name),
                None,
                "table not in the manifest (left over; the next writable open deletes it)",
            ),
            FileKind::Temp => {
                r.note(&dir.join(name), None, "temporary file (an interrupted write)")
            }
            _ => {}
        }
    }

    // WALs: those at or above the manifest's log number hold unflushed writes and are
    // replayed oldest first; only the newest may end in a torn record.
    let log_number = manifest.as_ref().map_or(0, |m| m.log_number);
    let mut wals: Vec<u64> = files
        .iter()
        .filter_map(|(_, k)| match k {
            FileKind::Wal(n) => Some(*n),
            _ => None,
        })
        .collect();
    wals.sort_unstable();
    let newest = wals.last().copied();
    for n in wals {
        let path = filename::wal_path(dir, n);
        if n < log_number {
            r.note(
                &path,
                None,
                format!("obsolete WAL (below log number {log_number}); recovery ignores it"),
            );
            continue;
        }
        guarded(r, &path, |r| check_wal(r, &path, Some(n) == newest, true));
    }
}

/// A table the manifest lists: present, of the recorded size, intact, and matching the
/// manifest's metadata.
fn check_live_table(r: &mut Report, dir: &Path, level: usize, meta: &TableMeta) {
    let path = filename::table_path(dir, meta.number);
    let file = match StdFs.open(&path) {
        Ok(f) => f,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            // An owner compacting right now may have deleted it since we read the manifest.
            let still_live = read_manifest(&StdFs, dir)
                .map(|m| m.levels.iter().flatten().any(|t| t.number == meta.number))
                .unwrap_or(true);
            if still_live {
                r.problem(
                    &path,
                    None,
                    format!("table listed by the manifest on level {level} is missing"),
                );
            } else {
                r.note(&path, None, "table was removed by a concurrent compaction while verifying");
            }
            return;
        }
        Err(e) => {
            r.error(&path, e);
            return;
        }
    };
    let size = file.size();
    if size != meta.file_size {
        r.problem(
            &path,
            Some(size.min(meta.file_size)),
            format!("table is {size} bytes but the manifest recorded {}", meta.file_size),
        );
    }
    let mut facts = None;
    guarded(r, &path, |r| facts = Some(check_open_table(r, &path, file)));
    let Some(p) = facts.and_then(|f| f.properties) else { return };
    let uk = |ik: &[u8]| parse_internal_key(ik).map(|k| k.user_key.to_vec()).unwrap_or_default();
    let show = |k: &[u8]| common::Bytes { hex: false }.quoted(k);
    let mut differs = |what: &str, manifest: String, table: String| {
        if manifest != table {
            r.problem(
                &path,
                None,
                format!(
                    "manifest records {what} {manifest} but the table's properties say {table}"
                ),
            );
        }
    };
    if p.num_entries > 0 {
        differs("smallest key", show(&uk(&meta.smallest)), show(&p.smallest_user_key));
        differs("largest key", show(&uk(&meta.largest)), show(&p.largest_user_key));
    }
    differs("smallest sequence", meta.smallest_seq.to_string(), p.smallest_seq.to_string());
    differs("largest sequence", meta.largest_seq.to_string(), p.largest_seq.to_string());
    differs("entry count", meta.num_entries.to_string(), p.num_entries.to_string());
}

/// Tables on a sorted level must not overlap: sorted by smallest key, each must end before
/// the next begins.
fn check_level_order(
    r: &mut Report,
    dir: &Path,
    level: usize,
    tables: &[TableMeta],
    manifest: u64,
) {
    let uk = |ik: &[u8]| parse_internal_key(ik).map(|k| k.user_key.to_vec()).unwrap_or_default();
    let mut sorted: Vec<&TableMeta> = tables.iter().collect();
    sorted.sort_by(|a, b| compare_internal(&a.smallest, &b.smallest));
    for t in &sorted {
        if uk(&t.smallest) > uk(&t.largest) {
            r.problem(
                &filename::manifest_path(dir, manifest),
                None,
                format!("table {} on level {level}: smallest key above largest key", t.number),
            );
        }
    }
    for pair in sorted.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if uk(&a.largest) >= uk(&b.smallest) {
            r.problem(
                &filename::manifest_path(dir, manifest),
                None,
                format!("tables {} and {} overlap on sorted level {level}", a.number, b.number),
            );
        }
    }
}

fn print_text(out: &mut common::Out, r: &Report) -> std::io::Result<()> {
    let line = |f: &Finding| match f.offset {
        Some(o) => format!("{} @ {o}: {}", f.file, f.what),
        None => format!("{}: {}", f.file, f.what),
    };
    for f in &r.problems {
        writeln!(out, "CORRUPT  {}", line(f))?;
    }
    for f in &r.errors {
        writeln!(out, "ERROR    {}", line(f))?;
    }
    for f in &r.notes {
        writeln!(out, "note     {}", line(f))?;
    }
    let c = &r.checked;
    writeln!(
        out,
        "{}: {} — {} problem(s), {} error(s); checked {} table(s), {} data block(s), {} entries, \
         {} manifest edit(s), {} WAL file(s) with {} record(s)",
        r.path,
        r.status,
        r.problems.len(),
        r.errors.len(),
        c.tables,
        c.data_blocks,
        c.entries,
        c.manifest_edits,
        c.wal_files,
        c.wal_records
    )
}
