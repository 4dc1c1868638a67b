//! The compaction picker on described trees: each file in `tests/testdata/picker/` defines a
//! tree's levels and states what [`picker::pick`] chooses from it (Pebble's
//! `compaction_picker` tests). The files are the specification; this runner only executes
//! them.
//!
//! A file is a sequence of commands, each followed by its expected output (the format of the
//! engine's `tests/shapes.rs`):
//!
//! ```text
//! # A comment: lines starting with '#', and blank lines, between commands are kept as is.
//! command key=value ...
//! optional input lines
//! ----
//! expected output, up to the next blank line
//! ```
//!
//! Commands:
//!
//! - `define [trigger=N] [slowdown=N] [base=BYTES] [ratio=N] [table=BYTES] [period=MS]
//!   [filter] [gc-cutoff=F] [gc-force=F] [style=leveled|fifo|tiered|lazy|fluid]
//!   [max-bytes=BYTES] [max-age=MS] [k=N] [z=N] [flush=BYTES]`: a tree, with the picker's options (the engine's
//!   defaults where not given: L0 trigger 4, slowdown 8, L1 target 64 MiB, ratio 10, tables
//!   of 64 MiB, no periodic compaction, blob garbage collection's age cutoff 0.25 and force
//!   threshold 0.5, leveled; FIFO with `max-bytes`, default unbounded, and `max-age`, default
//!   none; fluid's `k` and `z` default 1; a flushed run, `flush`, of 1000 bytes, the default
//!   table size) and, with `filter`, a compaction filter on the keyspace. Input lines:
//!   `L<n>` starts a level; `NUM: LO-HI [size=BYTES] [seq=A-B] [expiry=A-B] [plain=BYTES]
//!   [created=SECS] [blobs=FILE:BYTES,...]` is a table of that level; `blob NUM
//!   bytes=BYTES [segment values=N]` a blob file holding that many bytes of values (with
//!   `segment`, a kept WAL segment of that many bytes whose N values tables referenced when
//!   it was kept), which tables reference with `blobs` (one reference per file, of those
//!   bytes; the keyspace then has a blob threshold). Each table is a real one: LO written at seq B
//!   and HI at seq A (expiring at A and B of `expiry`, milliseconds, if given), and with
//!   `plain` an older non-expiring version of LO holding that many value bytes, which keeps
//!   a table's expired share small. `size` is what the manifest records (default 1000),
//!   `created` the table's creation time (default 1). Prints the levels as defined.
//! - `pick [now=MS]`: what the picker chooses at `now` (default 0): the reason, the levels,
//!   the input tables and those of the output level they overlap, and the blob files whose
//!   values it relocates; or `none`. The runner
//!   also checks that `needs_compaction` agrees.
//! - `beside busy=NUM,NUM,...`: what [`picker::pick_beside`] chooses to run beside compactions
//!   reading the tables numbered, in the same form as `pick`; or `none`.
//!
//! `BLOOMKV_REWRITE=1 cargo test -p bloomkv-tree --test picker` fills the expectations in
//! (review them with `git diff`).

// The script format, shared with the engine's shape scripts (`tests/shapes.rs`).
mod script;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use bloomkv_tree::blob::{BlobFile, BlobFileKind, BlobFileMeta, BlobRefs};
use bloomkv_tree::compact::picker::{self, Policy};
use bloomkv_tree::compaction_filter::{CompactionFilter, Decision};
use bloomkv_tree::fs::{Deleter, MemFile, StdFs};
use bloomkv_tree::key::{self, ValueKind};
use bloomkv_tree::options::{CompactionStyle, KeyspaceOptions};
use bloomkv_tree::table::{FileCache, Table, TableBuilder, TableOptions};
use bloomkv_tree::tree::Tree;
use bloomkv_tree::version::builder::VersionBuilder;
use bloomkv_tree::version::edit::{TableMeta, VersionEdit};
use bloomkv_tree::version::set::{TableFile, Version, NUM_LEVELS};
use std::time::Duration;

#[test]
fn picker_scripts() {
    script::run_dir("tests/testdata/picker", Script::default, |s, text| s.run(text));
}

/// A compaction filter that keeps everything: only its presence matters to the picker.
struct KeepAll;

impl CompactionFilter for KeepAll {
    fn filter(&self, _: usize, _: &[u8], _: &[u8]) -> Decision {
        Decision::Keep
    }
    fn name(&self) -> &str {
        "keep-all"
    }
}

#[derive(Default)]
struct Script {
    tree: Option<(Arc<Tree>, Policy)>,
}

fn named(words: &[&str]) -> BTreeMap<String, String> {
    words
        .iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (w.to_string(), String::new()),
        })
        .collect()
}

fn num<T: std::str::FromStr>(args: &BTreeMap<String, String>, name: &str, default: T) -> T {
    args.get(name).map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("bad {name}={v}")))
}

fn pair(s: &str) -> (u64, u64) {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    (a.parse().expect("A-B"), b.parse().expect("A-B"))
}

impl Script {
    fn run(&mut self, text: &[String]) -> String {
        let words: Vec<&str> = text[0].split_whitespace().collect();
        let args = named(&words[1..]);
        match words[0] {
            "define" => self.define(&args, &text[1..]),
            "pick" => self.pick(num(&args, "now", 0)),
            "beside" => self.beside(args.get("busy").map_or("", String::as_str)),
            other => panic!("unknown command {other}"),
        }
    }

    fn define(&mut self, args: &BTreeMap<String, String>, lines: &[String]) -> String {
        let policy = Policy {
            level_base_bytes: num(args, "base", 64 << 20),
            level_size_ratio: num(args, "ratio", 10),
            l0_compaction_trigger: num(args, "trigger", 4),
            l0_slowdown_trigger: num(args, "slowdown", 8),
            periodic_millis: args.get("period").map(|p| p.parse().expect("period=MS")),
            run_base_bytes: num(args, "flush", 1000),
        };
        let mut opts = KeyspaceOptions::new().target_table_bytes(num(args, "table", 64 << 20));
        if args.contains_key("filter") {
            opts = opts.compaction_filter(Arc::new(KeepAll));
        }
        opts = opts.compaction_style(style(args));
        let fraction =
            |name: &str, default: f64| args.get(name).map_or(default, |v| v.parse().expect(name));
        opts = opts
            .blob_gc_age_cutoff(fraction("gc-cutoff", KeyspaceOptions::DEFAULT_BLOB_GC_AGE_CUTOFF))
            .blob_gc_force_threshold(fraction(
                "gc-force",
                KeyspaceOptions::DEFAULT_BLOB_GC_FORCE_THRESHOLD,
            ));
        let mut blobs: BTreeMap<u64, Arc<BlobFile>> = BTreeMap::new();
        let mut level = 0;
        let mut edit = VersionEdit::default();
        let mut opened = Vec::new();
        for l in lines {
            let l = l.trim();
            if let Some(n) = l.strip_prefix('L') {
                level = n.parse().expect("L<n>");
                assert!(level < NUM_LEVELS, "no level {level}");
                continue;
            }
            if let Some(rest) = l.strip_prefix("blob ") {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let number: u64 = words[0].parse().expect("blob NUM bytes=BYTES");
                let blob_args = named(&words[1..]);
                let value_bytes = num(&blob_args, "bytes", 0);
                let values = num(&blob_args, "values", 1);
                let kind = match blob_args.contains_key("segment") {
                    true => BlobFileKind::WalSegment,
                    false => BlobFileKind::Separated,
                };
                let file_size = value_bytes;
                let meta = BlobFileMeta { number, value_bytes, values, file_size, kind };
                let path = PathBuf::from(format!("mem/{number:06}.blob"));
                let files = Arc::new(FileCache::new(Arc::new(StdFs), 1));
                let deleter = Deleter::new(Arc::new(StdFs));
                blobs.insert(number, Arc::new(BlobFile::new(meta, path, files, None, deleter)));
                opts = opts.blob_threshold(Some(1));
                continue;
            }
            let t = table(l, &blobs);
            edit.added.push((level, t.meta.clone()));
            opened.push(t);
        }
        let mut built = VersionBuilder::new();
        let open = |m: &TableMeta| opened.iter().find(|t| t.meta.number == m.number).cloned();
        built.apply(&edit, open).expect("a tree the manifest could record");
        let version = Version::new(built.keyspace(0).unwrap().levels.clone());
        let tree = Arc::new(Tree { opts, version: Arc::new(version), ..Tree::empty() });
        let out = show_levels(&tree.version);
        self.tree = Some((tree, policy));
        out
    }

    fn pick(&self, now: u64) -> String {
        let (tree, policy) = self.tree.as_ref().expect("define first");
        let trees = [tree.clone()];
        let task = picker::pick(&trees, policy, now);
        assert_eq!(
            picker::needs_compaction(&trees, policy, now),
            task.is_some(),
            "needs_compaction disagrees with pick"
        );
        self.show(task)
    }

    fn beside(&self, busy: &str) -> String {
        let (tree, policy) = self.tree.as_ref().expect("define first");
        let busy = busy.split(',').filter(|n| !n.is_empty()).map(|n| n.parse().expect("NUM"));
        self.show(picker::pick_beside(std::slice::from_ref(tree), policy, &busy.collect()))
    }

    fn show(&self, task: Option<picker::Task>) -> String {
        let (tree, policy) = self.tree.as_ref().expect("define first");
        let Some(t) = task else { return "none\n".into() };
        let numbers = |ts: &[Arc<TableFile>]| {
            ts.iter().map(|t| t.meta.number.to_string()).collect::<Vec<_>>()
        };
        let mut s = format!("{:?}: L{} -> L{}\n", t.reason, t.level, t.out_level);
        let _ = writeln!(s, "  inputs: {}", numbers(&t.inputs).join(" "));
        if !t.next_inputs.is_empty() {
            let _ = writeln!(s, "  overlapped: {}", numbers(&t.next_inputs).join(" "));
        }
        if !t.relocate.is_empty() {
            let files: Vec<String> = t.relocate.iter().map(u64::to_string).collect();
            let _ = writeln!(s, "  relocates: {}", files.join(" "));
        }
        let excess = picker::excess_runs(tree, policy);
        if excess > 0 {
            let _ = writeln!(s, "  runs beyond the style: {excess}");
        }
        s
    }
}

fn show_levels(v: &Version) -> String {
    let mut s = String::new();
    for (level, tables) in v.levels.iter().enumerate().filter(|(_, ts)| !ts.is_empty()) {
        let _ = writeln!(s, "L{level}: {} bytes", v.level_bytes(level));
        for t in tables {
            let _ = writeln!(
                s,
                "  {}: {}-{} size={} seq={}-{}",
                t.meta.number,
                String::from_utf8_lossy(t.smallest_user_key()),
                String::from_utf8_lossy(t.largest_user_key()),
                t.meta.file_size,
                t.meta.smallest_seq,
                t.meta.largest_seq
            );
        }
    }
    if s.is_empty() {
        s.push_str("empty\n");
    }
    s
}

/// The compaction style `style=` names: `fifo` with `max-bytes=BYTES` (default unbounded)
/// and `max-age=MS` (default none); `tiered`; `lazy`; `fluid` with `k=N` and `z=N`
/// (default 1); leveled when not given.
fn style(args: &BTreeMap<String, String>) -> CompactionStyle {
    match args.get("style").map(String::as_str) {
        None | Some("leveled") => CompactionStyle::Leveled,
        Some("fifo") => CompactionStyle::Fifo {
            max_bytes: num(args, "max-bytes", u64::MAX),
            max_age: args.get("max-age").map(|a| Duration::from_millis(a.parse().expect("MS"))),
        },
        Some("tiered") => CompactionStyle::Tiered,
        Some("lazy") => CompactionStyle::LazyLeveling,
        Some("fluid") => CompactionStyle::Fluid { k: num(args, "k", 1), z: num(args, "z", 1) },
        Some(other) => panic!("unknown style {other}"),
    }
}

/// A table as a `define` line describes it, built for real into memory.
fn table(line: &str, blobs: &BTreeMap<u64, Arc<BlobFile>>) -> Arc<TableFile> {
    let (number, rest) = line.split_once(':').expect("NUM: LO-HI ...");
    let number: u64 = number.trim().parse().expect("table number");
    let words: Vec<&str> = rest.split_whitespace().collect();
    let (lo, hi) = words[0].split_once('-').expect("LO-HI");
    let args = named(&words[1..]);
    let (seq_lo, seq_hi) = args.get("seq").map_or((1, 1), |s| pair(s));
    let expiry = args.get("expiry").map(|s| pair(s));
    let plain: usize = num(&args, "plain", 0);
    let entry = |k: &str, seq, exp: Option<u64>| match exp {
        Some(e) => (
            key::internal_key(k.as_bytes(), seq, ValueKind::PutExpiring),
            key::expiring_value(e, b"v"),
        ),
        None => (key::internal_key(k.as_bytes(), seq, ValueKind::Put), b"v".to_vec()),
    };
    let mut entries = vec![entry(lo, seq_hi, expiry.map(|e| e.0))];
    if plain > 0 {
        assert!(seq_lo < seq_hi, "plain= needs a sequence range of two or more");
        entries.push((key::internal_key(lo.as_bytes(), seq_lo, ValueKind::Put), vec![b'p'; plain]));
    }
    if hi != lo {
        entries.push(entry(hi, seq_lo, expiry.map(|e| e.1)));
    }
    let sink = MemFile::new();
    let created = Some(num(&args, "created", 1));
    let opts = TableOptions { creation_time: created, ..TableOptions::default() };
    let mut b = TableBuilder::new(Box::new(sink.clone()), opts);
    for (k, v) in &entries {
        b.add(k, v).unwrap();
    }
    b.finish().unwrap();
    let path = PathBuf::from(format!("mem/{number:06}.sst"));
    let meta = TableMeta {
        keyspace: 0,
        number,
        file_size: num(&args, "size", 1000),
        smallest: entries[0].0.clone(),
        largest: entries[entries.len() - 1].0.clone(),
        smallest_seq: seq_lo,
        largest_seq: seq_hi,
        num_entries: entries.len() as u64,
        blob_refs: Vec::new(),
    };
    let mut held = Vec::new();
    let mut meta = meta;
    for r in args.get("blobs").map_or("", String::as_str).split(',').filter(|r| !r.is_empty()) {
        let (file, bytes) = r.split_once(':').expect("blobs=FILE:BYTES,...");
        let file: u64 = file.parse().expect("blob file number");
        held.push(blobs.get(&file).unwrap_or_else(|| panic!("no blob {file} defined")).clone());
        let bytes = bytes.parse().expect("blob bytes");
        meta.blob_refs.push(BlobRefs { file, count: 1, bytes });
    }
    meta.blob_refs.sort_by_key(|r| r.file);
    let table = Table::open(Arc::new(MemFile::from(sink.contents())), path.clone(), None).unwrap();
    let deleter = Deleter::new(Arc::new(StdFs));
    Arc::new(TableFile::new(meta, Arc::new(table), path, deleter).with_blobs(held))
}
