//! Helpers shared by the inspection subcommands: how keys and values are printed and parsed,
//! key-range selection, opening files read-only, and writing to stdout without panicking
//! when the reader goes away (`bloomkv dump … | head`).

use std::io::{self, Write};
use std::ops::Bound;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use bloomkv::fs::{FileSystem, StdFs};
use bloomkv::{Error, Result};
use bloomkv_tree::filename::{self, FileKind};
use bloomkv_tree::key::prefix_successor;
use bloomkv_tree::table::format::{FOOTER_LEN, TABLE_MAGIC};
use bloomkv_tree::table::Table;

/// How keys and values are shown (and how key arguments are read): the `--hex` flag, declared
/// once here and flattened into every command that takes it. Its help says what `--hex` does
/// in general; commands that also read keys or print values with it reword it with
/// `mut_arg("hex", …)`.
#[derive(clap::Args, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bytes {
    /// Print keys as hex instead of escaped text.
    #[arg(long)]
    pub hex: bool,
}

impl Bytes {
    /// `bytes` as text: hex, or escaped as `verify` shows keys ([`bloomkv::check::escape`]),
    /// so that any byte string prints on one line and can be pasted back as an argument.
    pub fn show(self, bytes: &[u8]) -> String {
        if self.hex {
            return hex(bytes);
        }
        bloomkv::check::escape(bytes)
    }

    /// `bytes` for text reports: quoted when escaped, bare when hex.
    pub fn quoted(self, bytes: &[u8]) -> String {
        if self.hex {
            hex(bytes)
        } else {
            format!("\"{}\"", self.show(bytes))
        }
    }

    /// Reads a key given on the command line: hex digits with `--hex`, otherwise the text
    /// with the escapes [`Bytes::show`] produces (`\xNN`, `\\`, `\"`) decoded.
    pub fn parse(self, arg: &str) -> Result<Vec<u8>> {
        if self.hex {
            unhex(arg)
        } else {
            unescape(arg)
        }
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

pub use bloomkv::check::chain;

fn bad_arg(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

fn unhex(s: &str) -> Result<Vec<u8>> {
    let digits = s.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err(bad_arg(format!("{s:?} is not hex: odd number of digits")));
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| bad_arg(format!("{s:?} is not hex")))
        })
        .collect()
}

fn unescape(s: &str) -> Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'\\') => out.push(b'\\'),
            Some(b'"') => out.push(b'"'),
            Some(b'x') => {
                let v = b
                    .get(i + 2..i + 4)
                    .and_then(|d| std::str::from_utf8(d).ok())
                    .and_then(|d| u8::from_str_radix(d, 16).ok())
                    .ok_or_else(|| bad_arg(format!("{s:?}: \\x needs two hex digits")))?;
                out.push(v);
                i += 4;
                continue;
            }
            _ => return Err(bad_arg(format!("{s:?}: unknown escape (use \\xNN, \\\\ or \\\")"))),
        }
        i += 2;
    }
    Ok(out)
}

/// The `--from`, `--to`, `--prefix` and `--limit` options shared by `dump` and `scan`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RangeArgs {
    /// Only keys >= this (inclusive).
    #[arg(long)]
    pub from: Option<String>,
    /// Only keys < this (exclusive).
    #[arg(long)]
    pub to: Option<String>,
    /// Only keys that start with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Stop after this many entries.
    #[arg(long)]
    pub limit: Option<u64>,
}

/// The `--json` option shared by the commands that print a report.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct JsonArg {
    /// Print one JSON document (fields documented in docs/tool.md).
    #[arg(long)]
    pub json: bool,
}

impl JsonArg {
    /// Writes `report` as one JSON document with `--json`, else as text with `text`.
    pub fn write<T: serde::Serialize>(
        self,
        out: &mut Out,
        report: &T,
        text: impl FnOnce(&mut Out, &T) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.json {
            write_json(out, report)
        } else {
            text(out, report)
        }
    }
}

/// The output flags shared by the commands that print keys in a report: `--hex` and
/// `--json`, in that order in `--help`.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct OutputArgs {
    #[command(flatten)]
    pub bytes: Bytes,
    #[command(flatten)]
    pub json: JsonArg,
}

impl OutputArgs {
    /// True with `--json`.
    pub fn json(self) -> bool {
        self.json.json
    }

    /// See [`JsonArg::write`].
    pub fn write<T: serde::Serialize>(
        self,
        out: &mut Out,
        report: &T,
        text: impl FnOnce(&mut Out, &T) -> io::Result<()>,
    ) -> io::Result<()> {
        self.json.write(out, report, text)
    }
}

/// The `--keyspace` option of the commands that read or write keys.
#[derive(clap::Args, Debug, Clone)]
pub struct KeyspaceArg {
    /// The keyspace to read or write (`bloomkv keyspace list` shows them); it must exist:
    /// the tool never creates one implicitly.
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub keyspace: String,
}

impl KeyspaceArg {
    /// The keyspace of `db` this option names.
    pub fn resolve(&self, db: &bloomkv::Db) -> Result<bloomkv::Keyspace> {
        existing_keyspace(db, &self.keyspace)
    }
}

/// Keyspace `name` of `db`, or an error that lists the keyspaces there are, since a typo is
/// the likeliest cause and creating the keyspace would hide it.
pub fn existing_keyspace(db: &bloomkv::Db, name: &str) -> Result<bloomkv::Keyspace> {
    db.existing_keyspace(name).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "no keyspace {name:?} in this database; it has: {}",
            db.keyspace_names().iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
        ))
    })
}

/// Lower and upper bounds on keys, as `Keyspace::range` takes them.
pub type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A parsed key selection: `from <= key < to`, starting with `prefix`.
#[derive(Debug, Clone, Default)]
pub struct KeyRange {
    /// Inclusive lower bound.
    pub from: Option<Vec<u8>>,
    /// Exclusive upper bound.
    pub to: Option<Vec<u8>>,
    /// Required prefix.
    pub prefix: Option<Vec<u8>>,
    /// Most entries to show.
    pub limit: Option<u64>,
}

impl KeyRange {
    /// Parses the options' keys with `fmt`.
    pub fn parse(args: &RangeArgs, fmt: Bytes) -> Result<KeyRange> {
        let p = |o: &Option<String>| o.as_deref().map(|s| fmt.parse(s)).transpose();
        Ok(KeyRange {
            from: p(&args.from)?,
            to: p(&args.to)?,
            prefix: p(&args.prefix)?,
            limit: args.limit,
        })
    }

    /// The smallest key that can be selected: the larger of `from` and `prefix`.
    pub fn start(&self) -> Option<&[u8]> {
        match (&self.from, &self.prefix) {
            (Some(f), Some(p)) => Some(f.max(p).as_slice()),
            (Some(f), None) => Some(f),
            (None, Some(p)) => Some(p),
            (None, None) => None,
        }
    }

    /// True if `key` is selected.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.from.as_deref().is_none_or(|f| key >= f)
            && self.to.as_deref().is_none_or(|t| key < t)
            && self.prefix.as_deref().is_none_or(|p| key.starts_with(p))
    }

    /// True if some selected key lies in `start..end` (end exclusive): how a range tombstone
    /// is selected, since it stands for every key it covers.
    pub fn overlaps(&self, start: &[u8], end: &[u8]) -> bool {
        // The selection is one interval of keys, [lo, hi): the prefix's keys are those from
        // the prefix up to its successor.
        let lo = self.start().unwrap_or(&[]);
        let low = start.max(lo);
        match self.end() {
            Some(hi) => low < end.min(&hi[..]),
            None => low < end,
        }
    }

    /// The smallest key past the selection (exclusive), or `None` when it runs to the end:
    /// the smaller of `to` and the prefix's successor.
    pub fn end(&self) -> Option<Vec<u8>> {
        let prefix_end = self.prefix.as_deref().and_then(prefix_successor);
        match (self.to.as_deref(), prefix_end) {
            (Some(t), Some(p)) => Some(t.min(&p[..]).to_vec()),
            (Some(t), None) => Some(t.to_vec()),
            (None, Some(p)) => Some(p),
            // An all-0xff prefix has no successor: its keys run to the end, like no `--to`.
            (None, None) => None,
        }
    }

    /// The selection as bounds for `Keyspace::range`, or `None` when it selects nothing
    /// (`--from` at or past `--to`, or a prefix outside them). Exact bounds let a reverse
    /// scan start at the selection's last key instead of walking down from the very end.
    pub fn bounds(&self) -> Option<KeyBounds> {
        let start = self.start().map(<[u8]>::to_vec);
        let end = self.end();
        if let (Some(s), Some(e)) = (&start, &end) {
            if s >= e {
                return None;
            }
        }
        Some((
            start.map_or(Bound::Unbounded, Bound::Included),
            end.map_or(Bound::Unbounded, Bound::Excluded),
        ))
    }

    /// True if `key` and every larger key are outside the selection, so a sorted scan can
    /// stop.
    pub fn past_end(&self, key: &[u8]) -> bool {
        self.to.as_deref().is_some_and(|t| key >= t)
            || self.prefix.as_deref().is_some_and(|p| key > p && !key.starts_with(p))
    }
}

/// Opens a table file read-only, without a block cache (the tool reads each block once).
pub fn open_table(path: &Path) -> Result<Arc<Table>> {
    let file = StdFs.open(path)?;
    Ok(Arc::new(Table::open(file, path.to_path_buf(), None)?))
}

/// Read-only open options: a small block cache, since the tool reads most blocks once.
pub fn read_only_options() -> bloomkv::Options {
    bloomkv::Options::default().block_cache_bytes(4 << 20)
}

/// The default keyspace's table options when the tool opens a database: the manifest does
/// not record them (each opener's `Options` give them), and the tool's `Options`
/// ([`read_only_options`], and `put`'s) differ from the defaults only outside them.
pub fn default_keyspace_options() -> bloomkv::KeyspaceOptions {
    bloomkv::KeyspaceOptions::default()
}

/// `opts` with the default keyspace's settings that `Db::open` checks restated from the
/// manifest in `dir` (none where there is no database yet), so the tool's writes neither fail
/// for them nor record others. The tool has none of a program's callbacks: it gives stand-ins
/// of the recorded names, a merge operator that combines nothing (reads of operands fail
/// with its message, flushes and compactions keep them) and a filter that keeps everything.
pub fn recorded_default_settings(dir: &Path, opts: bloomkv::Options) -> Result<bloomkv::Options> {
    if !dir.join("CURRENT").exists() {
        return Ok(opts);
    }
    let m = bloomkv_tree::version::manifest::read_manifest(&StdFs, dir)?;
    let Some(def) = m.keyspaces.iter().map(|k| &k.def).find(|d| d.id == 0) else {
        return Ok(opts);
    };
    let (extractor, whole) = def.opts.prefix_parts();
    let mut opts = opts.prefix_extractor(extractor).whole_key_filtering(whole);
    if let Some(names) = &def.callbacks {
        if let Some(name) = &names.merge_operator {
            opts = opts.merge_operator(Arc::new(StandIn(name.clone())));
        }
        if let Some(name) = &names.compaction_filter {
            opts = opts.compaction_filter(Arc::new(StandIn(name.clone())));
        }
    }
    Ok(opts)
}

/// A stand-in for a callback the manifest names (see [`recorded_default_settings`]).
struct StandIn(String);

impl bloomkv::MergeOperator for StandIn {
    fn name(&self) -> &str {
        &self.0
    }
    fn full_merge(
        &self,
        _key: &[u8],
        _existing: Option<&[u8]>,
        _operands: &[&[u8]],
    ) -> std::result::Result<Vec<u8>, String> {
        Err(format!("the bloomkv tool does not have merge operator {:?}", self.0))
    }
}

impl bloomkv::CompactionFilter for StandIn {
    fn name(&self) -> &str {
        &self.0
    }
    fn filter(&self, _level: usize, _key: &[u8], _value: &[u8]) -> bloomkv::Decision {
        bloomkv::Decision::Keep
    }
}

/// Opens the database in `dir` for reading without taking its LOCK or touching any file.
pub fn open_db_read_only(dir: &Path) -> Result<bloomkv::Db> {
    if !dir.is_dir() {
        return Err(not_a_db_dir(dir));
    }
    bloomkv::Db::open_read_only(dir, read_only_options())
}

/// The error for a command that takes a database directory and was given something else. A
/// file of the database is the likeliest mix-up, so the message names the command that
/// takes that kind of file.
pub fn not_a_db_dir(path: &Path) -> Error {
    let shown = path.display();
    let msg = match classify(path) {
        Ok(Target::Table) => format!(
            "{shown} is a table file, not a database directory; `bloomkv inspect {shown}` \
             shows what it holds, `bloomkv dump {shown}` its entries"
        ),
        Ok(Target::Wal | Target::Manifest | Target::Blob) => format!(
            "{shown} is a database file, not a database directory; `bloomkv dump {shown}` \
             lists what it holds"
        ),
        Ok(Target::Db) => format!("{shown} is not a database directory"),
        Err(_) if !path.exists() => format!("{shown} does not exist"),
        Err(_) => format!("{shown} is a file, not a database directory"),
    };
    Error::InvalidArgument(msg)
}

/// The error for a command that takes a file and was given a directory: a database
/// directory is the likeliest one, and `db`, `dump` and `verify` take it.
pub fn not_a_file(path: &Path, wanted: &str) -> Error {
    let shown = path.display();
    if path.join("CURRENT").is_file() {
        Error::InvalidArgument(format!(
            "{shown} is a database directory, not {wanted}; `bloomkv db {shown}` shows its \
             levels and tables (each with its file's path), `bloomkv dump {shown}` its keys"
        ))
    } else {
        Error::InvalidArgument(format!("{shown} is a directory, not {wanted}"))
    }
}

/// What the tool prints for an error. A held LOCK gets its own words: the library's message
/// speaks of handles, while here the holder is always another process, and the user needs
/// to know the read-only commands still work.
pub fn error_message(e: &Error) -> String {
    match e {
        Error::Locked { path } => {
            let dir = path.parent().unwrap_or(path);
            format!(
                "the database in {} is in use by another process (it holds {}); close it \
                 there first, or use a command that reads without the lock (get, scan, dump, \
                 db, trace, verify, checkpoint)",
                dir.display(),
                path.display()
            )
        }
        other => chain(other),
    }
}

/// `secs` since the Unix epoch as an RFC 3339 UTC date-time, e.g. `2026-11-26T07:51:32Z`.
/// (Years past 9999, which only a damaged file can hold, print with more digits.)
pub fn utc_date_time(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The proleptic Gregorian (year, month, day) of `days` since 1970-01-01: Howard Hinnant's
/// `civil_from_days` (<https://howardhinnant.github.io/date_algorithms.html>), for
/// non-negative days only, where it needs no signed arithmetic. It counts in 400-year eras
/// of 146 097 days starting on March 1st, so that the leap day is each year's last.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March is 0
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// The path as given, for reports.
pub fn display(path: &Path) -> String {
    path.display().to_string()
}

/// A buffered stdout for reports.
pub type Out = io::BufWriter<io::StdoutLock<'static>>;

/// A buffered handle on stdout.
pub fn stdout() -> Out {
    io::BufWriter::new(io::stdout().lock())
}

/// Finishes a report written to stdout: flushes it and turns a closed pipe (the reader,
/// e.g. `head`, has seen enough) into success rather than an error.
pub fn finish_output(written: io::Result<()>, out: &mut Out, code: ExitCode) -> Result<ExitCode> {
    match written.and_then(|()| out.flush()) {
        Ok(()) => Ok(code),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(code),
        Err(e) => Err(Error::io("writing to stdout", e)),
    }
}

/// Writes `value` as one pretty-printed JSON document followed by a newline.
pub fn write_json<T: serde::Serialize>(out: &mut Out, value: &T) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(io::Error::from)?;
    writeln!(out)
}

/// `a / b`, or 0 when `b` is 0 (averages over empty tables).
pub fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_and_hex_forms_round_trip() {
        let samples: [&[u8]; 5] =
            [b"", b"plain", b"quote\"back\\slash", &[0, 1, 0x7f, 0x80, 0xff], b"\\x41"];
        for fmt in [Bytes { hex: false }, Bytes { hex: true }] {
            for s in samples {
                assert_eq!(fmt.parse(&fmt.show(s)).unwrap(), s, "{fmt:?} {s:?}");
            }
        }
        assert_eq!(Bytes { hex: false }.show(&[b'a', 0, b'"']), "a\\x00\\\"");
        assert_eq!(Bytes { hex: true }.show(&[0xab, 1]), "ab01");
        for bad in ["\\", "\\x4", "\\xzz", "\\q"] {
            assert!(Bytes { hex: false }.parse(bad).is_err(), "{bad}");
        }
        for bad in ["a", "abc", "zz"] {
            assert!(Bytes { hex: true }.parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn utc_date_times() {
        // Checked against `date -u -d @SECS`.
        for (secs, want) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (951_868_799, "2000-02-29T23:59:59Z"),
            (1_795_351_982, "2026-11-22T12:53:02Z"),
            (4_102_444_800, "2100-01-01T00:00:00Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ] {
            assert_eq!(utc_date_time(secs), want, "{secs}");
        }
        // Garbage from a damaged file prints, rather than overflowing.
        assert!(utc_date_time(u64::MAX).ends_with('Z'));
    }

    #[test]
    fn key_range_bounds() {
        let r = KeyRange {
            from: Some(b"b".to_vec()),
            to: Some(b"d".to_vec()),
            prefix: Some(b"c".to_vec()),
            limit: None,
        };
        assert_eq!(
            r.bounds(),
            Some((Bound::Included(b"c".to_vec()), Bound::Excluded(b"d".to_vec())))
        );
        let none = KeyRange { from: Some(b"d".to_vec()), to: Some(b"b".to_vec()), ..r.clone() };
        assert_eq!(none.bounds(), None);
        let ff = KeyRange { prefix: Some(vec![0xff]), ..KeyRange::default() };
        assert_eq!(ff.bounds(), Some((Bound::Included(vec![0xff]), Bound::Unbounded)));
        assert_eq!(KeyRange::default().bounds(), Some((Bound::Unbounded, Bound::Unbounded)));
    }

    #[test]
    fn key_range_selects_and_stops() {
        let r = KeyRange {
            from: Some(b"b".to_vec()),
            to: Some(b"d".to_vec()),
            prefix: None,
            limit: None,
        };
        assert_eq!(r.start(), Some(&b"b"[..]));
        assert!(!r.contains(b"a") && r.contains(b"b") && r.contains(b"cz") && !r.contains(b"d"));
        assert!(!r.past_end(b"c") && r.past_end(b"d"));
        let p = KeyRange {
            from: Some(b"ab".to_vec()),
            prefix: Some(b"b".to_vec()),
            ..KeyRange::default()
        };
        assert_eq!(p.start(), Some(&b"b"[..]));
        assert!(p.contains(b"b1") && !p.contains(b"c") && !p.contains(b"ab"));
        assert!(!p.past_end(b"a") && !p.past_end(b"bzz") && p.past_end(b"c"));
    }

    #[test]
    fn key_range_selects_ranges_that_overlap_it() {
        let all = KeyRange::default();
        assert!(all.overlaps(b"", b"\0") && all.overlaps(b"a", b"b"));
        let r = KeyRange {
            from: Some(b"b".to_vec()),
            to: Some(b"d".to_vec()),
            prefix: None,
            limit: None,
        };
        // Ending at `from` (exclusive) or starting at `to` (exclusive) misses it.
        assert!(!r.overlaps(b"a", b"b") && !r.overlaps(b"d", b"e"));
        assert!(r.overlaps(b"a", b"b\0") && r.overlaps(b"c", b"z") && r.overlaps(b"a", b"z"));
        let p = KeyRange { prefix: Some(b"b\xff".to_vec()), ..KeyRange::default() };
        assert!(p.overlaps(b"a", b"b\xff\0") && p.overlaps(b"b\xff\xff", b"z"));
        assert!(!p.overlaps(b"a", b"b\xff") && !p.overlaps(b"c", b"z"));
        let p = KeyRange {
            from: Some(b"bm".to_vec()),
            prefix: Some(b"b".to_vec()),
            ..KeyRange::default()
        };
        assert!(!p.overlaps(b"ba", b"bm") && p.overlaps(b"ba", b"bn") && !p.overlaps(b"c", b"d"));
        let ff = KeyRange { prefix: Some(vec![0xff, 0xff]), ..KeyRange::default() };
        assert!(ff.overlaps(&[0xff, 0xff, 7], &[0xff, 0xff, 8]) && !ff.overlaps(b"a", &[0xff]));
        assert_eq!(prefix_successor(b"a\xff\xff").as_deref(), Some(&b"b"[..]));
        assert_eq!(prefix_successor(b""), None);
    }
}

/// What a path on the command line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A database directory.
    Db,
    /// A table file.
    Table,
    /// A write-ahead-log segment.
    Wal,
    /// A manifest.
    Manifest,
    /// A blob file.
    Blob,
}

impl Target {
    /// The kind's name in reports (`verify`'s `target`, `dump`'s `source`).
    pub fn name(self) -> &'static str {
        match self {
            Target::Table => "table",
            Target::Wal => "wal",
            Target::Manifest => "manifest",
            Target::Blob => "blob",
            Target::Db => "db",
        }
    }
}

/// Decides what `path` is: a directory is a database; a file is classified by its name
/// (`*.sst`, `*.log`, `MANIFEST-*`), or else by the table magic at its end.
pub fn classify(path: &Path) -> Result<Target> {
    let meta =
        std::fs::metadata(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    if meta.is_dir() {
        return Ok(Target::Db);
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match filename::parse(name) {
        Some(FileKind::Table(_)) => return Ok(Target::Table),
        Some(FileKind::Wal(_)) => return Ok(Target::Wal),
        Some(FileKind::Manifest(_)) => return Ok(Target::Manifest),
        Some(FileKind::Blob(_)) => return Ok(Target::Blob),
        _ => {}
    }
    if name.ends_with(".sst") {
        return Ok(Target::Table);
    }
    if name.ends_with(".log") {
        return Ok(Target::Wal);
    }
    if name.starts_with("MANIFEST") {
        return Ok(Target::Manifest);
    }
    if name.ends_with(".blob") {
        return Ok(Target::Blob);
    }
    if has_table_magic(path) {
        return Ok(Target::Table);
    }
    Err(Error::InvalidArgument(format!(
        "cannot tell what {} is: expected a database directory, a table (*.sst or ending in the \
         table magic), a WAL segment (*.log), a manifest (MANIFEST-*) or a blob file (*.blob)",
        path.display()
    )))
}

fn has_table_magic(path: &Path) -> bool {
    let Ok(file) = StdFs.open(path) else { return false };
    let Some(at) = file.size().checked_sub(8) else { return false };
    let mut buf = [0u8; 8];
    file.read_exact_at(&mut buf, at).is_ok()
        && u64::from_le_bytes(buf) == TABLE_MAGIC
        && file.size() >= FOOTER_LEN as u64
}
