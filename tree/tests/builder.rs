//! The manifest-edit applier on described edits: each file in `tests/testdata/builder/`
//! applies edits to a [`VersionBuilder`] and states the state it leaves, or why it refuses
//! one. The files are the specification; this runner only executes them. The format is the
//! picker scripts' (see `tests/picker.rs`).
//!
//! Commands:
//!
//! - `apply`: applies one edit, given as input lines, each a field of it:
//!   `keyspace ID NAME` (defined, default options), `next-keyspace N`,
//!   `add L<n> NUM LO-HI [ks=ID] [seq=A-B]` (a table of keyspace ID, default 0, holding LO
//!   at seq B and HI at seq A, default 1-1), `delete L<n> NUM`, `drop ID`, `log N`,
//!   `next-file N`, `last-seq N`, `clock N`. Prints the state after it: the counters, each
//!   keyspace's tables per level in the order the edits added them, the keyspaces whose
//!   tables this edit changed and the tables it retired (deleted, not moved); or
//!   `refused: REASON`, leaving the state as it was before the edit.
//! - `order`: each keyspace's tables in the order reads need (`builder::lookup_order`).
//! - `reset`: the state before a manifest's first edit.
//!
//! `BLOOMKV_REWRITE=1 cargo test -p bloomkv-tree --test builder` fills the expectations in
//! (review them with `git diff`).

mod script;

use std::fmt::Write as _;

use bloomkv_tree::key::{internal_key, user_key, ValueKind};
use bloomkv_tree::options::KeyspaceOptions;
use bloomkv_tree::version::builder::{lookup_order, VersionBuilder};
use bloomkv_tree::version::edit::{KeyspaceDef, TableMeta, VersionEdit};
use bloomkv_tree::Error;

#[test]
fn builder_scripts() {
    script::run_dir("tests/testdata/builder", VersionBuilder::new, run);
}

fn run(builder: &mut VersionBuilder<TableMeta>, text: &[String]) -> String {
    match text[0].trim() {
        "apply" => {
            let edit = edit(&text[1..]);
            // A refused edit leaves the builder part-way: the script goes on from before it.
            let mut next = builder.clone();
            match next.apply(&edit, |m| Some(m.clone())) {
                Ok(()) => {
                    *builder = next;
                    show(builder, false)
                }
                Err(Error::Corruption { file, offset, reason }) => {
                    assert!(file.as_os_str().is_empty() && offset == 0, "placed by the caller");
                    format!("refused: {reason}\n")
                }
                Err(e) => panic!("not a corruption error: {e}"),
            }
        }
        "order" => show(builder, true),
        "reset" => {
            *builder = VersionBuilder::new();
            show(builder, false)
        }
        other => panic!("unknown command {other}"),
    }
}

fn num<T: std::str::FromStr>(s: &str) -> T {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s}"))
}

fn level(s: &str) -> usize {
    num(s.strip_prefix('L').unwrap_or_else(|| panic!("L<n>, not {s}")))
}

fn pair(s: &str, sep: char) -> (&str, &str) {
    s.split_once(sep).unwrap_or((s, s))
}

fn edit(lines: &[String]) -> VersionEdit {
    let mut edit = VersionEdit::default();
    for l in lines {
        let words: Vec<&str> = l.split_whitespace().collect();
        match words.as_slice() {
            ["keyspace", id, name] => {
                edit.keyspaces.push(KeyspaceDef::new(num(id), *name, KeyspaceOptions::new()))
            }
            ["next-keyspace", n] => edit.next_keyspace_id = Some(num(n)),
            ["add", l, number, range, rest @ ..] => {
                let (mut keyspace, mut seqs) = (0, (1, 1));
                for w in rest {
                    match pair(w, '=') {
                        ("ks", id) => keyspace = num(id),
                        ("seq", s) => seqs = (num(pair(s, '-').0), num(pair(s, '-').1)),
                        _ => panic!("unknown {w}"),
                    }
                }
                let (lo, hi) = pair(range, '-');
                let meta = TableMeta {
                    keyspace,
                    number: num(number),
                    file_size: 1000,
                    smallest: internal_key(lo.as_bytes(), seqs.1, ValueKind::Put),
                    largest: internal_key(hi.as_bytes(), seqs.0, ValueKind::Put),
                    smallest_seq: seqs.0,
                    largest_seq: seqs.1,
                    num_entries: 2,
                    blob_refs: Vec::new(),
                };
                edit.added.push((level(l), meta));
            }
            ["delete", l, number] => edit.deleted.push((level(l), num(number))),
            ["drop", id] => edit.dropped_keyspaces.push(num(id)),
            ["log", n] => edit.log_number = Some(num(n)),
            ["next-file", n] => edit.next_file_number = Some(num(n)),
            ["last-seq", n] => edit.last_seq = Some(num(n)),
            ["clock", n] => edit.clock_mark = Some(num(n)),
            _ => panic!("unknown edit line {l:?}"),
        }
    }
    edit
}

fn show(builder: &VersionBuilder<TableMeta>, ordered: bool) -> String {
    let mut s = String::new();
    if !ordered {
        let c = builder.counters();
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let _ = writeln!(
            s,
            "log={} next-file={} last-seq={} next-keyspace={} clock={}",
            opt(c.log_number),
            opt(c.next_file_number),
            opt(c.last_seq),
            c.next_keyspace_id,
            c.clock_mark
        );
    }
    for k in builder.keyspaces() {
        let _ = writeln!(s, "keyspace {} {}", k.def.id, k.def.name);
        for (l, tables) in k.levels.iter().enumerate().filter(|(_, ts)| !ts.is_empty()) {
            let mut tables = tables.clone();
            if ordered {
                lookup_order(l, &mut tables);
            }
            let shown: Vec<String> = tables
                .iter()
                .map(|t| {
                    let (lo, hi) = (user_key(&t.smallest), user_key(&t.largest));
                    let (lo, hi) = (String::from_utf8_lossy(lo), String::from_utf8_lossy(hi));
                    format!("{}:{lo}-{hi}@{}-{}", t.number, t.smallest_seq, t.largest_seq)
                })
                .collect();
            let _ = writeln!(s, "  L{l}: {}", shown.join(" "));
        }
    }
    if !ordered {
        let ids = builder.keyspaces().map(|k| k.def.id).filter(|&id| builder.changed(id));
        let ids: Vec<String> = ids.map(|id| id.to_string()).collect();
        let retired: Vec<String> = builder.retired().iter().map(|t| t.number.to_string()).collect();
        for (what, list) in [("changed", ids), ("retired", retired)] {
            if !list.is_empty() {
                let _ = writeln!(s, "{what}: {}", list.join(" "));
            }
        }
    }
    s
}

/// At runtime the edit is applied before it is written: one the next open would refuse is
/// refused with a corruption error placed where its record would have gone, the manifest is
/// left as it was, and the set goes on taking edits.
#[test]
fn an_edit_the_next_open_would_refuse_is_never_written() {
    use std::sync::Arc;

    use bloomkv_tree::filename::manifest_path;
    use bloomkv_tree::fs::StdFs;
    use bloomkv_tree::version::manifest::read_manifest;
    use bloomkv_tree::version::set::{default_keyspace_def, Version, VersionSet};

    let dir = tempfile::tempdir().unwrap();
    let mut set = VersionSet::new(dir.path(), Arc::new(StdFs), 10, 1, 5);
    set.set_keyspaces(vec![default_keyspace_def()], 1);
    let empty = Version::empty();
    set.write_snapshot([&empty]).unwrap();
    let manifest = manifest_path(dir.path(), set.manifest_number());
    let len = || std::fs::metadata(&manifest).unwrap().len();
    let before = len();
    let tables = || [(0, &empty)];

    let refused = [
        VersionEdit { deleted: vec![(1, 7)], ..VersionEdit::default() },
        VersionEdit { dropped_keyspaces: vec![0], ..VersionEdit::default() },
        VersionEdit { next_keyspace_id: Some(0), ..VersionEdit::default() },
        VersionEdit {
            keyspaces: vec![KeyspaceDef::new(3, "logs", KeyspaceOptions::new())],
            ..VersionEdit::default()
        },
        // A table the engine did not hand over open.
        edit(&["add L0 9 a-b".to_string()]),
    ];
    for mut edit in refused {
        let shown = format!("{edit:?}");
        match set.apply(&mut edit, tables(), &[]) {
            Err(Error::Corruption { file, offset, reason }) => {
                assert_eq!((file, offset), (manifest.clone(), before), "{reason}");
                assert!(reason.contains("refused, not written"), "{reason}");
            }
            other => panic!("{shown}: {other:?}"),
        }
        assert_eq!(len(), before, "{shown} was written");
    }

    let mut create = VersionEdit {
        keyspaces: vec![KeyspaceDef::new(1, "logs", KeyspaceOptions::new())],
        next_keyspace_id: Some(2),
        ..VersionEdit::default()
    };
    let applied = set.apply(&mut create, tables(), &[]).unwrap();
    set.log(&create, &applied).unwrap();
    assert_eq!(set.next_keyspace_id(), 2);
    let m = read_manifest(&StdFs, dir.path()).unwrap();
    let names: Vec<&str> = m.keyspaces.iter().map(|k| k.def.name.as_str()).collect();
    assert_eq!(names, ["default", "logs"]);
    assert_eq!((m.next_keyspace_id, m.last_seq), (2, 5));
}
