//! Tree shapes as scripts: each file in `tests/testdata/shapes/` drives a database through
//! writes, flushes, compactions and reopens, and states what the tree looks like and what reads
//! see at each step. The files are the specification; this runner only executes them.
//!
//! A file is a sequence of commands, each followed by its expected output:
//!
//! ```text
//! # A comment: lines starting with '#', and blank lines, between commands are kept as is.
//! command positional key=value ...
//! optional input lines
//! ----
//! expected output, up to the next blank line
//! ```
//!
//! Output that itself holds blank lines is written between two `----` lines instead, and
//! ends at a `----` line pair (the rewriter picks that form when it is needed).
//!
//! Commands (keys and values are escaped text, as `bloomkv::check::escape` prints them, so
//! `\x00` is one byte):
//!
//! - `open [filter=blocked:BITS|classic:BITS|budgeted:BITS|none] [block=BYTES] [table=BYTES]
//!   [prefix=fixed:N|delimiter:0xHH] [whole-keys=false] [l0-trigger=N] [base=BYTES]`: a new
//!   database in a fresh directory (see `script_options` for why nothing happens in the
//!   background), with a prefix extractor if given, and the picker's L0 trigger and L1
//!   target if given (else so high that nothing is ever due).
//! - `reopen`: closes the database and opens it again with the same options (recovery).
//! - `keyspace NAME`: creates (or opens) a keyspace with the database's table options.
//! - `batch [keyspace=NAME]`: one atomic write of the input lines `put K V`, `del K`,
//!   `delete-range A B` (from A up to, not including, B) and `delete-prefix P`.
//! - `ingest [keyspace=NAME]`: bulk-loads the input lines `K V` (ascending keys).
//! - `flush`, `compact`: `Db::flush` and `Db::compact` (the whole database).
//! - `pick`: `Db::picked_compaction`, the compaction the background thread would choose now
//!   (the reason, the levels, the input tables and those of the output level they overlap),
//!   or `none`.
//! - `compact-step`: `Db::compact_step`: runs that one compaction and prints it as `pick`
//!   does.
//! - `lsm`: every table, keyspace by keyspace and level by level (L0 newest first): file
//!   number, key range, sequence range and entry counts. Not file sizes: they are
//!   deterministic, but would make every case fail at any change of the table format.
//! - `snapshot NAME`: takes a snapshot, kept until the next `reopen` or `open`.
//! - `get K... [snapshot=NAME] [keyspace=NAME]`: the value of each key, or `<absent>`.
//! - `scan [FROM] [TO] [snapshot=NAME] [keyspace=NAME]`: the live keys in `FROM..TO`.
//! - `trace K [keyspace=NAME]`: `Db::trace`: for each memtable and table in read order, whether
//!   its key range covers K, what its filter answers and what it really holds. The trace goes
//!   on past the answer; `<- get stops here` marks the source that decides what `get` returns.
//! - `trace-prefix P [keyspace=NAME]`: `Db::trace_prefix`: the prefix the filters are asked
//!   about, then for each memtable and table whether its key range meets the scan of P, what
//!   its prefix filter answers, whether the scan reads it, and whether it holds a key
//!   starting with P; then what the scan returns.
//!
//! A command that succeeds without output prints `ok`; one that fails prints `error: ...`.
//!
//! # Adding a case
//!
//! Add a `.txt` file to `tests/testdata/shapes/`, named for what it shows, with commands and
//! empty expectations (a command line followed by `----` and a blank line). Run it with
//! `BLOOMKV_REWRITE=1 cargo test --release --test shapes` to fill the expectations in, then read
//! them: they are only right if they say what the engine should do. Run without the variable
//! to check; a mismatch fails with the file and line of each command whose output differs
//! and a diff of the output.
//!
//! After a deliberate change in behaviour, the same variable rewrites every file; `git diff`
//! then shows what changed, to be reviewed like code.

mod common;
// The script format's reader and writer, shared with the tree crate's picker scripts.
#[path = "../tree/tests/script/mod.rs"]
mod script;
use script::{parse, render};

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use bloomkv::{
    Db, FilterPolicy, Keyspace, KeyspaceOptions, Options, PrefixExtractor, Presence, Readable,
    Snapshot, TraceSource, WriteBatch, WriteOptions,
};

#[test]
fn shapes() {
    script::run_dir("tests/testdata/shapes", Script::default, |s, text| s.run(text));
}

/// The state a script builds up.
#[derive(Default)]
struct Script {
    dir: Option<tempfile::TempDir>,
    opts: Option<(Options, KeyspaceOptions)>,
    db: Option<Db>,
    keyspaces: BTreeMap<String, Keyspace>,
    snapshots: BTreeMap<String, Snapshot>,
}

/// A command's positional arguments and `key=value` arguments.
struct Args {
    positional: Vec<String>,
    named: BTreeMap<String, String>,
}

impl Args {
    fn parse(line: &str) -> (String, Args) {
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or_default().to_string();
        let mut args = Args { positional: Vec::new(), named: BTreeMap::new() };
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => args.named.insert(k.to_string(), v.to_string()),
                None => {
                    args.positional.push(w.to_string());
                    None
                }
            };
        }
        (cmd, args)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.named.get(name).map(String::as_str)
    }
}

/// Escaped text (`\xNN`, `\\`, `\"`) back to bytes.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1)) {
            (b'\\', Some(b'x')) => {
                let hex = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 4;
            }
            (b'\\', Some(&c)) => {
                out.push(c);
                i += 2;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// A picked compaction as `pick` and `compact-step` print it.
fn show_picked(c: Option<bloomkv::PickedCompaction>) -> String {
    let Some(c) = c else { return "none\n".into() };
    let numbers = |ns: &[u64]| ns.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
    let mut s = format!("{}: {:?}: L{} -> L{}\n", c.keyspace, c.reason, c.level, c.out_level);
    let _ = writeln!(s, "  inputs: {}", numbers(&c.inputs));
    if !c.overlapped.is_empty() {
        let _ = writeln!(s, "  overlapped: {}", numbers(&c.overlapped));
    }
    s
}

fn show(b: &[u8]) -> String {
    bloomkv::check::escape(b)
}

/// Options under which only the script changes the tree. A memtable fills and switches at
/// 16 MiB, far beyond what a script writes, so tables are only written by `flush`,
/// `compact`, `ingest` and recovery, each of which returns once its tables are installed; and
/// compaction triggers are set so high that the background compaction thread never finds
/// anything to do (it would otherwise run after a flush, at a moment the script cannot
/// see). The background thread is also told not to compact at all, so a script that sets
/// triggers low (`l0-trigger`, `base`) steps the compactions itself (`compact-step`). One
/// compaction thread keeps the numbering of output tables in key order.
fn script_options(args: &Args) -> (Options, KeyspaceOptions) {
    let never = *Options::L0_TRIGGERS_RANGE.end();
    let mut o = Options::new()
        .l0_compaction_trigger(never)
        .l0_slowdown_trigger(never)
        .l0_stop_trigger(never)
        .level_base_bytes(*Options::LEVEL_BASE_BYTES_RANGE.end())
        .max_subcompactions(1)
        .background_compactions(false);
    if let Some(n) = args.get("l0-trigger") {
        o = o.l0_compaction_trigger(n.parse().expect("l0-trigger=N"));
    }
    if let Some(b) = args.get("base") {
        o = o.level_base_bytes(b.parse().expect("base=BYTES"));
    }
    // Keyspaces get the same table settings as the default keyspace.
    let mut k = KeyspaceOptions::new();
    if let Some(f) = args.get("filter") {
        let (kind, bits) = f.split_once(':').unwrap_or((f, "10"));
        let bits_per_key: f64 = bits.parse().expect("filter=KIND:BITS");
        let policy = match kind {
            "blocked" => FilterPolicy::BlockedBloom { bits_per_key },
            "classic" => FilterPolicy::ClassicBloom { bits_per_key },
            "budgeted" => FilterPolicy::Budgeted { bits_per_key },
            "none" => FilterPolicy::None,
            _ => panic!("unknown filter {f}"),
        };
        (o, k) = (o.filter_policy(policy), k.filter_policy(policy));
    }
    if let Some(b) = args.get("block") {
        let b = b.parse().expect("block=BYTES");
        (o, k) = (o.block_bytes(b), k.block_bytes(b));
    }
    if let Some(t) = args.get("table") {
        let t = t.parse().expect("table=BYTES");
        (o, k) = (o.target_table_bytes(t), k.target_table_bytes(t));
    }
    if let Some(e) = args.get("prefix") {
        let e = Some(PrefixExtractor::from_name(e).expect("prefix=fixed:N|delimiter:0xHH"));
        (o, k) = (o.prefix_extractor(e), k.prefix_extractor(e));
    }
    if let Some(w) = args.get("whole-keys") {
        let w = w.parse().expect("whole-keys=true|false");
        (o, k) = (o.whole_key_filtering(w), k.whole_key_filtering(w));
    }
    (o, k)
}

impl Script {
    fn db(&self) -> &Db {
        self.db.as_ref().expect("no database: `open` first")
    }

    fn keyspace(&self, args: &Args) -> Option<&Keyspace> {
        args.get("keyspace").map(|name| {
            self.keyspaces.get(name).unwrap_or_else(|| panic!("no keyspace {name}: create it"))
        })
    }

    /// Runs one command (its line and input lines) and returns its output.
    fn run(&mut self, text: &[String]) -> String {
        let (cmd, args) = Args::parse(&text[0]);
        let input = &text[1..];
        match self.command(&cmd, &args, input) {
            Ok(out) if out.is_empty() => "ok\n".to_string(),
            Ok(out) => out,
            Err(e) => format!("error: {e}\n"),
        }
    }

    fn command(&mut self, cmd: &str, args: &Args, input: &[String]) -> bloomkv::Result<String> {
        let mut out = String::new();
        match cmd {
            "open" => {
                (self.snapshots, self.keyspaces) = Default::default();
                let opts = script_options(args);
                let (dir, db) = common::db::open_temp(opts.0.clone());
                self.db = Some(db);
                (self.dir, self.opts) = (Some(dir), Some(opts));
            }
            "reopen" => {
                self.snapshots.clear();
                let names: Vec<String> = self.keyspaces.keys().cloned().collect();
                self.keyspaces.clear();
                self.db.take().expect("no database").close()?;
                let dir = self.dir.as_ref().unwrap().path();
                let db = Db::open(dir, self.opts.as_ref().unwrap().0.clone())?;
                for name in names {
                    let ks = db.existing_keyspace(&name).expect("keyspace lost on reopen");
                    self.keyspaces.insert(name, ks);
                }
                self.db = Some(db);
            }
            "keyspace" => {
                let name = &args.positional[0];
                let ks = self.db().keyspace(name, self.opts.as_ref().unwrap().1.clone())?;
                self.keyspaces.insert(name.clone(), ks);
            }
            "batch" => {
                let ks = self.keyspace(args);
                let mut b = WriteBatch::new();
                for l in input {
                    let w: Vec<Vec<u8>> = l.split_whitespace().skip(1).map(unescape).collect();
                    match (l.split_whitespace().next(), ks) {
                        (Some("put"), None) => b.put(&w[0], &w[1]),
                        (Some("put"), Some(ks)) => b.put_in(ks, &w[0], &w[1]),
                        (Some("del"), None) => b.delete(&w[0]),
                        (Some("del"), Some(ks)) => b.delete_in(ks, &w[0]),
                        (Some("delete-range"), None) => b.delete_range(w[0].clone()..w[1].clone()),
                        (Some("delete-range"), Some(ks)) => {
                            b.delete_range_in(ks, w[0].clone()..w[1].clone())
                        }
                        (Some("delete-prefix"), None) => b.delete_prefix(&w[0]),
                        (Some("delete-prefix"), Some(ks)) => b.delete_prefix_in(ks, &w[0]),
                        _ => panic!("unknown batch operation: {l}"),
                    }
                }
                self.db().write(&b, &WriteOptions::default())?;
            }
            "ingest" => {
                let rows: Vec<(Vec<u8>, Vec<u8>)> = input
                    .iter()
                    .map(|l| {
                        let (k, v) = l.split_once(' ').expect("ingest lines are `K V`");
                        (unescape(k), unescape(v))
                    })
                    .collect();
                let n = match self.keyspace(args) {
                    Some(ks) => ks.ingest(rows)?,
                    None => self.db().ingest(rows)?,
                };
                let _ = writeln!(out, "ingested {n}");
            }
            "flush" => self.db().flush()?,
            "compact" => self.db().compact()?,
            "pick" => out = show_picked(self.db().picked_compaction()),
            "compact-step" => out = show_picked(self.db().compact_step()?),
            "lsm" => out = self.lsm(),
            "snapshot" => {
                let snap = self.db().snapshot();
                self.snapshots.insert(args.positional[0].clone(), snap);
            }
            "get" => {
                let snap = self.view(args)?;
                for k in &args.positional {
                    let v = snap.get(unescape(k))?;
                    let v = v.as_deref().map_or("<absent>".to_string(), show);
                    let _ = writeln!(out, "{k}: {v}");
                }
            }
            "scan" => {
                let snap = self.view(args)?;
                let p = &args.positional;
                let from = p.first().map(|k| unescape(k)).unwrap_or_default();
                let it = match p.get(1) {
                    Some(to) => snap.range(from..unescape(to)),
                    None => snap.range(from..),
                };
                for kv in it {
                    let (k, v) = kv?;
                    let _ = writeln!(out, "{}: {}", show(&k), show(&v));
                }
                if out.is_empty() {
                    out.push_str("<empty>\n");
                }
            }
            "trace" => {
                let k = unescape(&args.positional[0]);
                let steps = match self.keyspace(args) {
                    Some(ks) => ks.trace(&k)?,
                    None => self.db().trace(&k)?,
                };
                for s in steps {
                    let source = match s.source {
                        TraceSource::Memtable => "memtable".to_string(),
                        TraceSource::ImmutableMemtable(i) => format!("immutable memtable {i}"),
                        TraceSource::Table { level, number } => format!("L{level} {number:06}"),
                    };
                    let filter = match (s.in_range, s.filter_maybe) {
                        (false, _) => "not in range",
                        (true, None) => "",
                        (true, Some(true)) => "filter: maybe",
                        (true, Some(false)) => "filter: no",
                    };
                    // A table out of range is not looked at: it has nothing to report.
                    let actual = match (s.in_range, s.actual) {
                        (false, _) => "",
                        (true, Presence::Value) => "value",
                        (true, Presence::Tombstone) => "tombstone",
                        (true, Presence::Absent) => "absent",
                        (true, Presence::RangeDeleted) => "range-deleted",
                        (true, Presence::Expired) => "expired",
                        (true, Presence::MergeOperand) => "merge operand",
                    };
                    let decides = if s.decides { "  <- get stops here" } else { "" };
                    let line = format!("{source:<10} {filter:<14} {actual}{decides}");
                    let _ = writeln!(out, "{}", line.trim_end());
                }
            }
            "trace-prefix" => {
                let p = unescape(&args.positional[0]);
                let trace = match self.keyspace(args) {
                    Some(ks) => ks.trace_prefix(&p)?,
                    None => self.db().trace_prefix(&p)?,
                };
                let asked = trace.filter_prefix.as_deref().map_or("<none>".to_string(), show);
                let extractor = trace.extractor.as_deref().unwrap_or("<none>");
                let _ = writeln!(out, "extractor {extractor}, filters asked about {asked}");
                for s in trace.steps {
                    let source = match s.source {
                        TraceSource::Memtable => "memtable".to_string(),
                        TraceSource::ImmutableMemtable(i) => format!("immutable memtable {i}"),
                        TraceSource::Table { level, number } => format!("L{level} {number:06}"),
                    };
                    let filter = match (s.in_range, s.prefix_filter_maybe) {
                        (false, _) => "not in range",
                        (true, None) => "",
                        (true, Some(true)) => "filter: maybe",
                        (true, Some(false)) => "filter: no",
                    };
                    let read = if s.read { "read" } else { "skipped" };
                    let holds = if s.holds { "holds it" } else { "holds none" };
                    let line = format!("{source:<10} {filter:<14} {read:<8} {holds}");
                    let _ = writeln!(out, "{}", line.trim_end());
                }
                let it = match self.keyspace(args) {
                    Some(ks) => ks.prefix(&p),
                    None => self.db().prefix(&p),
                };
                let keys: Vec<String> =
                    it.map(|kv| kv.map(|(k, _)| show(&k))).collect::<bloomkv::Result<_>>()?;
                let _ = writeln!(
                    out,
                    "scan: {}",
                    if keys.is_empty() { "<empty>".to_string() } else { keys.join(" ") }
                );
            }
            _ => panic!("unknown command {cmd}"),
        }
        Ok(out)
    }

    /// The view a read command reads: a named snapshot, or the database as it is now; of the
    /// default keyspace or the one named.
    fn view(&self, args: &Args) -> bloomkv::Result<Snapshot> {
        let ks = match self.keyspace(args) {
            Some(ks) => ks.clone(),
            None => self.db().existing_keyspace("default").expect("the default keyspace"),
        };
        match args.get("snapshot") {
            Some(name) => self.snapshots.get(name).expect("no such snapshot").keyspace(&ks),
            None => Ok(ks.snapshot()),
        }
    }

    fn lsm(&self) -> String {
        let mut out = String::new();
        let mut section = None;
        for t in self.db().tables() {
            if section != Some((t.keyspace.clone(), t.level)) {
                if t.keyspace != "default" {
                    let _ = writeln!(out, "{}: L{}", t.keyspace, t.level);
                } else {
                    let _ = writeln!(out, "L{}", t.level);
                }
                section = Some((t.keyspace.clone(), t.level));
            }
            let _ = write!(
                out,
                "  {:06} [{} .. {}] seq {}..{} entries {}",
                t.number,
                show(&t.smallest_key),
                show(&t.largest_key),
                t.smallest_seq,
                t.largest_seq,
                t.entries
            );
            if t.tombstones > 0 {
                let _ = write!(out, " tombstones {}", t.tombstones);
            }
            if t.range_tombstones > 0 {
                let _ = write!(out, " range-tombstones {}", t.range_tombstones);
            }
            out.push('\n');
        }
        if out.is_empty() {
            out.push_str("<no tables>\n");
        }
        out
    }
}

/// The rewriter gives back a file it would not change, in both forms of output.
#[test]
fn rewriting_keeps_a_file_as_written() {
    let text = "# comment\n\nget a\n----\na: 1\n\n# blank lines inside\nscan\n----\n----\nx\n\ny\n----\n----\nflush\n----\nok\n";
    let (cases, trailer) = parse(Path::new("inline"), text);
    let outputs: Vec<String> = cases.iter().map(|c| c.expected.clone()).collect();
    assert_eq!(outputs, ["a: 1\n", "x\n\ny\n", "ok\n"]);
    assert_eq!(render(&cases, &outputs, &trailer), text);
    // Output that loses its blank lines is ended by one before the next command.
    let outputs = ["a: 1\n".to_string(), "x\n".to_string(), "ok\n".to_string()];
    let (again, _) = parse(Path::new("inline"), &render(&cases, &outputs, &trailer));
    let got: Vec<&str> = again.iter().map(|c| c.expected.as_str()).collect();
    assert_eq!(got, outputs);
}
