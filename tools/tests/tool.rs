//! End-to-end tests of the `bloomkv` binary on databases made by the library: its reports
//! must be what the golden files in `tests/golden/` hold (see `support` for how to add or
//! rewrite one), what it reads must agree with the library, read-only commands must leave a
//! database that another handle holds open untouched, and `verify` must find deliberate
//! damage and survive garbage without panicking.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bloomkv::fs::{FileSystem, StdFs};
use bloomkv::{Db, FilterPolicy, KeyspaceOptions, Options, Readable};
use bloomkv_tree::table::format::FOOTER_LEN;
use bloomkv_tree::table::{Footer, Table};
use rand::{Rng, RngCore, SeedableRng};
use serde_json::Value as Json;

mod support;
use support::{golden, golden_transcript, tool};

/// Runs the tool expecting success and parses its single JSON document.
fn tool_json(args: &[&str]) -> Json {
    let (code, out, err) = tool(args);
    assert_eq!(code, 0, "bloomkv {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bloomkv {args:?}: bad JSON ({e}): {out}"))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    // Binary bytes in values exercise escaping; the length varies so blocks differ in size.
    let mut v = format!("value-{i}-{round}-").into_bytes();
    v.extend(std::iter::repeat_n((i % 251) as u8, (i % 40) as usize));
    v
}

fn options() -> Options {
    Options::default()
        .memtable_bytes(64 << 10)
        .block_bytes(1024)
        .target_table_bytes(32 << 10)
        .level_base_bytes(64 << 10)
        .l0_compaction_trigger(4)
}

/// Builds a database with tables on the last level (after a full compaction), two L0 tables
/// holding overwrites and tombstones, and unflushed writes in the WAL (one record each).
/// Returns the open handle (holding the LOCK) and the model of the live keys.
fn build_db(dir: &Path) -> (Db, BTreeMap<Vec<u8>, Vec<u8>>) {
    let db = Db::open(dir, options()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..3000 {
        db.put(key(i), value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    db.compact().unwrap();
    // L0 table 1: overwrites and tombstones.
    for i in (0..3000).step_by(7) {
        db.put(key(i), value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    for i in (3..3000).step_by(11) {
        db.delete(key(i)).unwrap();
        model.remove(&key(i));
    }
    db.flush().unwrap();
    // L0 table 2: more tombstones and new keys beyond the old range.
    for i in (5..3000).step_by(13) {
        db.delete(key(i)).unwrap();
        model.remove(&key(i));
    }
    for i in 3000..3200 {
        db.put(key(i), value(i, 2)).unwrap();
        model.insert(key(i), value(i, 2));
    }
    db.flush().unwrap();
    // Unflushed: in the memtable and the WAL only.
    for i in 3200..3300 {
        db.put(key(i), value(i, 3)).unwrap();
        model.insert(key(i), value(i, 3));
    }
    db.delete(key(1)).unwrap();
    model.remove(&key(1));
    let tables = db.stats().tables_per_level;
    assert!(tables[0] >= 2 && tables.iter().skip(1).sum::<usize>() >= 2, "{tables:?}");
    (db, model)
}

/// Builds the database and closes it, so later opens see it exactly as left.
fn build_closed(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let (db, model) = build_db(dir);
    db.close().unwrap();
    model
}

fn open_table(path: &Path) -> Arc<Table> {
    Arc::new(Table::open(StdFs.open(path).unwrap(), path.to_path_buf(), None).unwrap())
}

/// (name, size) of every file in `dir`.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len())
        })
        .collect();
    v.sort();
    v
}

/// Options under which the tree only changes when the test says so: the memtable never fills
/// (16 MiB), and no level ever reaches a compaction trigger, so tables are written by
/// `flush` and `compact` alone and the same steps give the same files, numbers and bytes;
/// one compaction thread keeps output numbering in key order. Small blocks and tables make
/// a few hundred keys span several of each.
fn golden_options() -> Options {
    Options::default()
        .block_bytes(256)
        .target_table_bytes(2 << 10)
        .l0_compaction_trigger(64)
        .l0_slowdown_trigger(64)
        .l0_stop_trigger(64)
        .level_base_bytes(1 << 40)
        .max_subcompactions(1)
}

/// The database the reports' golden files show, closed: `build_db` and
/// `build_with_range_deletes` in small, with the same parts — a last level of several tables
/// (after a full compaction); an L0 table of overwrites, tombstones, a range tombstone and
/// newer puts inside its range; an L0 table of tombstones and new keys; an L0 table holding
/// nothing but a range tombstone beyond every key; and in the WAL only, puts, a delete and a
/// range delete. Values hold binary bytes.
fn build_golden(dir: &Path) {
    let db = Db::open(dir, golden_options()).unwrap();
    for i in 0..120 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.compact().unwrap();
    for i in (0..120).step_by(7) {
        db.put(key(i), value(i, 1)).unwrap();
    }
    for i in (3..120).step_by(11) {
        db.delete(key(i)).unwrap();
    }
    db.delete_range(key(40)..key(50)).unwrap();
    for i in 45..47 {
        db.put(key(i), value(i, 1)).unwrap();
    }
    db.flush().unwrap();
    for i in (5..120).step_by(13) {
        db.delete(key(i)).unwrap();
    }
    for i in 120..130 {
        db.put(key(i), value(i, 2)).unwrap();
    }
    db.flush().unwrap();
    db.delete_range(key(5000)..key(5100)).unwrap();
    db.flush().unwrap();
    for i in 130..135 {
        db.put(key(i), value(i, 3)).unwrap();
    }
    db.delete(key(1)).unwrap();
    db.delete_range(key(60)..key(62)).unwrap();
    db.close().unwrap();
}

/// Every report on the database of `build_golden` — `db`, `inspect` and `dump` of each table
/// (named by level and place in it, L0 newest first), the WAL's and the internal dump, `verify`,
/// and `trace` of a key in each place a read can end — is its golden file. The files were
/// checked against the library when written: table facts against `Db::tables` and the table's
/// own properties and filter, entries against the table's iterator, runs against
/// `Db::filter_runs`, traces against `Db::trace`.
#[test]
fn reports_of_a_database_match_their_goldens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    build_golden(&dir);
    let db = Db::open_read_only(&dir, golden_options()).unwrap();
    let tables = db.tables();
    drop(db);
    let p = s(&dir);
    let g = |name: &str, args: &[&str]| golden(name, args, tmp.path());
    g("db.json", &["db", "--json", "--hex", p]);
    g("db.txt", &["db", p]);
    let mut index = BTreeMap::new();
    for t in &tables {
        let i = index.entry(t.level).or_insert(0);
        let case = format!("L{}-{i}", t.level);
        *i += 1;
        g(&format!("inspect_{case}.json"), &["inspect", "--json", "--hex", s(&t.path)]);
        g(&format!("dump_{case}.json"), &["dump", "--json", "--hex", s(&t.path)]);
        // The text forms of the tables with range tombstones, and of one without.
        if t.range_tombstones > 0 || case == "L1-0" {
            g(&format!("inspect_{case}.txt"), &["inspect", s(&t.path)]);
            g(&format!("dump_{case}.txt"), &["dump", s(&t.path)]);
        }
    }
    let wal = listing(&dir).into_iter().find(|(n, len)| n.ends_with(".log") && *len > 0).unwrap();
    let wal = dir.join(wal.0);
    g("dump_wal.json", &["dump", "--json", "--hex", s(&wal)]);
    g("dump_wal.txt", &["dump", s(&wal)]);
    g("dump_db_internal.json", &["dump", "--json", "--hex", "--internal", p]);
    g("verify.json", &["verify", "--json", p]);
    g("verify.txt", &["verify", p]);
    for (case, k) in [
        ("overwritten_in_l0", key(0)),
        ("deleted_in_the_memtable", key(1)),
        ("tombstone_in_l0", key(3)),
        ("in_the_last_level", key(2)),
        ("range_deleted_in_l0", key(42)),
        ("put_over_a_range_delete", key(46)),
        ("range_deleted_in_the_memtable", key(61)),
        ("new_in_l0", key(125)),
        ("in_the_memtable", key(132)),
        ("absent_beyond_every_table", key(20_000)),
        ("absent_inside_ranges", b"key000050x".to_vec()),
    ] {
        g(&format!("trace_{case}.json"), &["trace", "--json", "--hex", p, &hex(&k)]);
    }
    g("trace_range_deleted_in_l0.txt", &["trace", p, "key000042"]);
}

/// A database whose default keyspace has a prefix extractor: `trace --prefix` shows the
/// scan skipping the tables whose filter holds none of the prefix (with the extractor read
/// from the tables, or given), and `inspect` shows a table's prefix filter.
#[test]
fn trace_prefix_shows_tables_skipped_and_inspect_the_prefix_filter() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let extractor = bloomkv::PrefixExtractor::UpToDelimiter(b'/');
    let opts = golden_options()
        .prefix_extractor(Some(extractor))
        .filter_policy(bloomkv::FilterPolicy::BlockedBloom { bits_per_key: 20.0 });
    let db = Db::open(&dir, opts).unwrap();
    for (i, user) in ["user:1/", "user:2/", "user:3/"].iter().enumerate() {
        for order in 0..4 {
            db.put(format!("{user}order:{order}"), "x").unwrap();
        }
        // Every table spans the same key range, so only the filters tell them apart.
        db.put("a/first", i.to_string()).unwrap();
        db.put("z/last", i.to_string()).unwrap();
        db.flush().unwrap();
    }
    let tables = db.tables();
    db.close().unwrap();
    let p = s(&dir);
    golden_transcript(
        "trace_prefix.txt",
        &[
            &["trace", p, "--prefix", "user:2/"],
            &["trace", p, "--prefix", "user:9/"],
            &["trace", p, "--prefix", "user:2/order:1", "--extractor", "fixed:4"],
        ],
        tmp.path(),
    );
    golden("trace_prefix.json", &["trace", "--json", p, "--prefix", "user:3/"], tmp.path());
    let r = tool_json(&["trace", "--json", p, "--prefix", "user:9/"]);
    assert_eq!((r["tables_in_range"].as_u64(), r["tables_skipped"].as_u64()), (Some(3), Some(3)));
    golden("inspect_prefix.txt", &["inspect", s(&tables[0].path)], tmp.path());
    let r = tool_json(&["inspect", "--json", s(&tables[0].path)]);
    assert_eq!(r["filter"]["prefix"]["extractor"], "delimiter:0x2f");
    assert_eq!(r["filter"]["prefix"]["prefixes"], 3);
}

/// A database under `FilterPolicy::Budgeted`: `db` shows the small L0 tables with more bits per
/// key than the level below them and, the split being the budget's own, no better split of
/// the same memory; `verify` finds it clean.
#[test]
fn db_shows_a_budgeted_trees_runs_and_verify_passes() {
    let dir = tempfile::tempdir().unwrap();
    // No level ever over its target, so once compacted the tree stays as the test left it.
    let opts = options()
        .filter_policy(bloomkv::FilterPolicy::Budgeted { bits_per_key: 10.0 })
        .level_base_bytes(64 << 20)
        .l0_compaction_trigger(8)
        .l0_slowdown_trigger(8)
        .l0_stop_trigger(8);
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..20_000 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.compact().unwrap();
    for i in (0..20_000).step_by(20) {
        db.put(key(i), value(i, 1)).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();

    let r = tool_json(&["db", "--json", s(dir.path())]);
    let runs = r["filter_runs"].as_array().unwrap();
    let f = |v: &Json| v.as_f64().unwrap();
    // The overwrites went to L0 in a few flushes (the memtable is small), over one level.
    let last = &runs[runs.len() - 1];
    assert!(last["level"] == 1 && last["keys"] == 20_000, "{runs:?}");
    let l0 = &runs[..runs.len() - 1];
    assert!(!l0.is_empty() && l0.iter().all(|r| r["level"] == 0), "{runs:?}");
    assert_eq!(l0.iter().map(|r| r["keys"].as_u64().unwrap()).sum::<u64>(), 1000);
    for run in l0 {
        assert!(f(&run["bits_per_key"]) > f(&last["bits_per_key"]) + 3.0, "{runs:?}");
        assert!(f(&run["expected_fpr"]) < f(&last["expected_fpr"]) / 5.0, "{runs:?}");
    }
    let (now, budgeted) =
        (f(&r["expected_blocks_per_absent_lookup"]), f(&r["budgeted_blocks_per_absent_lookup"]));
    assert!(budgeted <= now * 1.02, "{budgeted} vs {now}");
    let (code, text, _) = tool(&["db", s(dir.path())]);
    assert_eq!(code, 0);
    assert!(text.contains("filter runs") && text.contains("budgeted, same memory"), "{text}");
    let (code, out, err) = tool(&["verify", s(dir.path())]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A trace of an absent key reports it absent, and filters at 10 bits per key rarely answer
/// "maybe" for it. (What a trace shows step by step is in the `trace_*` golden files.)
#[test]
fn trace_of_absent_keys_finds_them_absent_with_few_false_positives() {
    let dir = tempfile::tempdir().unwrap();
    build_closed(dir.path());
    let mut keys: Vec<Vec<u8>> = (0..40).map(|i| key(20_000 + i)).collect(); // inside no range
    keys.extend((0..40).map(|i| format!("key{:06}x", i * 50).into_bytes())); // inside ranges
    let mut false_positives = 0;
    for k in &keys {
        let r = tool_json(&["trace", "--json", "--hex", s(dir.path()), &hex(k)]);
        assert_eq!((r["result"].as_str(), r["value"].as_str()), (Some("absent"), None), "{r}");
        false_positives += r["filter_false_positives"].as_u64().unwrap();
    }
    assert!(false_positives <= 40, "10 bits per key cannot give this many false positives");
}

#[test]
fn scan_and_dump_db_equal_range() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_closed(dir.path());
    let db = Db::open_read_only(dir.path(), options()).unwrap();
    let pairs = |j: &Json| -> Vec<(String, String)> {
        j["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (e["key"].as_str().unwrap().to_string(), e["value"].as_str().unwrap().to_string())
            })
            .collect()
    };
    let all: Vec<(String, String)> = db
        .range(..)
        .map(|kv| kv.map(|(k, v)| (hex(&k), hex(&v))))
        .collect::<Result<_, _>>()
        .unwrap();
    let want_model: Vec<_> = model.iter().map(|(k, v)| (hex(k), hex(v))).collect();
    assert_eq!(all, want_model);
    assert_eq!(pairs(&tool_json(&["scan", "--json", "--hex", s(dir.path())])), all);
    assert_eq!(pairs(&tool_json(&["dump", "--json", "--hex", s(dir.path())])), all);

    let (from, to) = (key(1000), key(1500));
    let want: Vec<_> = db
        .range(from.clone()..to.clone())
        .map(|kv| kv.map(|(k, v)| (hex(&k), hex(&v))))
        .collect::<Result<_, _>>()
        .unwrap();
    let got = tool_json(&[
        "scan",
        "--json",
        "--hex",
        s(dir.path()),
        "--from",
        &hex(&from),
        "--to",
        &hex(&to),
    ]);
    assert_eq!(pairs(&got), want);
    let got = tool_json(&[
        "scan",
        "--json",
        "--hex",
        s(dir.path()),
        "--from",
        &hex(&from),
        "--to",
        &hex(&to),
        "--limit",
        "10",
    ]);
    assert_eq!(pairs(&got), want[..10].to_vec());
    assert_eq!(got["truncated"], true);

    let prefix = b"key0012".to_vec();
    let want: Vec<_> = db
        .prefix(&prefix)
        .map(|kv| kv.map(|(k, v)| (hex(&k), hex(&v))))
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(!want.is_empty());
    // Escaped-text key arguments work too.
    let got = tool_json(&["scan", "--json", s(dir.path()), "--prefix", "key0012"]);
    let got_hex: Vec<_> = pairs(&got).iter().map(|(k, _)| hex(k.as_bytes())).collect();
    assert_eq!(got_hex, want.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>());

    // `dump --internal` lists every table's entries followed by the live WAL's.
    let d = tool_json(&["dump", "--json", "--hex", "--internal", s(dir.path())]);
    let table_entries: u64 = db.tables().iter().map(|t| t.entries).sum();
    assert_eq!(d["count"], table_entries + 101);
}

#[test]
fn get_put_delete_and_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let p = s(dir.path());
    let (code, _, err) = tool(&["put", p, "k1", "v1"]);
    assert_eq!(code, 2, "no database and no --create: {err}");
    assert!(listing(dir.path()).is_empty(), "a refused put leaves nothing behind");
    let (code, _, err) = tool(&["put", "--create", "--keyspace", "ks", p, "k1", "v1"]);
    assert_eq!(code, 2, "a keyspace a new database cannot have: {err}");
    assert!(err.contains("\"ks\""), "{err}");
    assert!(listing(dir.path()).is_empty(), "and nothing is created for it");
    assert_eq!(tool(&["put", "--create", p, "k1", "v\\x001"]).0, 0);
    assert_eq!(tool(&["put", p, "k2", "v2"]).0, 0);
    let (code, out, _) = tool(&["get", p, "k1"]);
    assert_eq!((code, out.trim()), (0, "\"v\\x001\""));
    assert_eq!(tool(&["delete", p, "k1"]).0, 0);
    assert_eq!(tool(&["get", p, "k1"]).0, 1);
    let r = tool_json(&["get", "--json", p, "k2"]);
    assert_eq!((r["found"].clone(), r["value"].clone()), (Json::Bool(true), Json::from("v2")));

    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"k1").unwrap(), None);
    assert_eq!(db.get(b"k2").unwrap().as_deref(), Some(&b"v2"[..]));
    // While this handle holds the LOCK, writes through the tool fail cleanly.
    let (code, _, err) = tool(&["put", p, "k3", "v3"]);
    assert_eq!(code, 2);
    assert!(err.contains("LOCK") && err.contains("another process"), "{err}");
    assert_eq!(tool(&["delete", p, "k2"]).0, 2);
    // Reads through the tool still work.
    let (code, out, _) = tool(&["get", p, "k2"]);
    assert_eq!((code, out.trim()), (0, "\"v2\""));
    db.close().unwrap();
}

/// The tool writes to a database whose default keyspace records a prefix extractor and
/// callbacks it does not have, without recording other settings; `dump` shows them.
#[test]
fn writes_keep_the_recorded_default_keyspace_settings() {
    let dir = tempfile::tempdir().unwrap();
    let p = s(dir.path());
    let opts = || {
        Options::default()
            .prefix_extractor(Some(bloomkv::PrefixExtractor::Fixed(2)))
            .merge_operator(Arc::new(bloomkv::U64Add))
    };
    let db = Db::open(dir.path(), opts()).unwrap();
    db.merge("n", bloomkv::U64Add::operand(1)).unwrap();
    db.close().unwrap();
    assert_eq!(tool(&["put", p, "k", "v"]).0, 0);
    assert_eq!(tool(&["delete", p, "k"]).0, 0);
    let current = std::fs::read_to_string(dir.path().join("CURRENT")).unwrap();
    let (code, out, _) = tool(&["dump", dir.path().join(current.trim()).to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        out.contains("keyspace 0 \"default\": prefix fixed:2, merge operator \"u64add\""),
        "{out}"
    );
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(bloomkv::U64Add::decode(&db.get("n").unwrap().unwrap()), Some(1));
    assert_eq!(db.get("k").unwrap(), None);
}

#[test]
fn read_only_commands_leave_an_open_database_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (db, model) = build_db(dir.path());
    // `compact` returns when all background work it started is done and leaves nothing over
    // its level target, so from here only the tool could change the directory.
    db.compact().unwrap();
    db.put(b"after-flush", b"in the WAL").unwrap();
    let before = listing(dir.path());
    let p = s(dir.path());
    let tables = db.tables();
    let table = s(&tables[0].path);
    let wal =
        before.iter().find(|(n, _)| n.ends_with(".log")).map(|(n, _)| dir.path().join(n)).unwrap();
    let wal = s(&wal);
    for args in [
        vec!["verify", p],
        vec!["verify", "--json", p],
        vec!["db", p],
        vec!["db", "--json", p],
        vec!["dump", p],
        vec!["dump", "--internal", p],
        vec!["dump", table],
        vec!["dump", wal],
        vec!["inspect", table],
        vec!["trace", p, "key000007"],
        vec!["probe", p, "key000007"], // the old name still works
        vec!["get", p, "key000007"],
        vec!["scan", "--limit", "5", p],
    ] {
        let (code, out, err) = tool(&args);
        assert_eq!(code, 0, "bloomkv {args:?}: {err}{out}");
        assert!(!out.is_empty(), "bloomkv {args:?} printed nothing");
    }
    // The tool sees the write made through the open handle before it ran.
    let r = tool_json(&["get", "--json", p, "after-flush"]);
    assert_eq!(r["value"], "in the WAL");
    assert_eq!(listing(dir.path()), before, "a read-only command changed the directory");
    // The handle still owns the database.
    assert_eq!(db.get(key(7)).unwrap().as_deref(), model.get(&key(7)).map(|v| &v[..]));
    db.put(b"still", b"writable").unwrap();
    db.close().unwrap();
}

/// Copies a database directory (without its LOCK) so each damage case starts clean.
fn copy_db(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn flip(path: &Path, offset: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[offset as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

fn footer(path: &Path) -> Footer {
    let b = std::fs::read(path).unwrap();
    let at = b.len() - FOOTER_LEN;
    Footer::decode(&b[at..], path, at as u64).unwrap()
}

/// Runs `verify --json` on `target`; asserts exit 1 and that some problem names `file` (at
/// `offset` if given). Returns the report.
fn expect_corrupt(target: &Path, file: &Path, offset: Option<u64>) -> Json {
    let (code, out, err) = tool(&["verify", "--json", s(target)]);
    assert_eq!(
        code,
        1,
        "verify {} should find damage in {}: {out}{err}",
        target.display(),
        file.display()
    );
    let r: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(r["status"], "corrupt");
    let problems = r["problems"].as_array().unwrap();
    let hit = problems
        .iter()
        .any(|p| p["file"] == s(file) && offset.is_none_or(|o| p["offset"].as_u64() == Some(o)));
    assert!(hit, "no problem names {} at {offset:?}: {out}", file.display());
    // The text form names the file too.
    let (code, text, _) = tool(&["verify", s(target)]);
    assert_eq!(code, 1);
    assert!(text.contains(s(file)), "{text}");
    r
}

#[test]
fn verify_finds_damage_in_every_part() {
    let base = tempfile::tempdir().unwrap();
    let clean = base.path().join("clean");
    build_closed(&clean);
    let (code, out, err) = tool(&["verify", s(&clean)]);
    assert_eq!(code, 0, "clean database: {out}{err}");
    let r = tool_json(&["verify", "--json", s(&clean)]);
    assert_eq!(r["status"], "ok");
    assert!(r["problems"].as_array().unwrap().is_empty());
    assert!(r["checked"]["tables"].as_u64().unwrap() >= 4);
    assert!(r["checked"]["wal_records"].as_u64().unwrap() >= 101);

    let db = Db::open_read_only(&clean, options()).unwrap();
    // A table with several data blocks.
    let t = db.tables().into_iter().find(|t| t.data_blocks >= 3).unwrap();
    let name = t.path.file_name().unwrap().to_owned();
    let f = footer(&t.path);
    let size = t.file_size;
    let handles = open_table(&t.path).data_block_handles();
    drop(db);

    let mut case = 0;
    let mut damaged = |damage: &dyn Fn(&Path) -> (PathBuf, Option<u64>)| {
        case += 1;
        let d = base.path().join(format!("case{case}"));
        copy_db(&clean, &d);
        let (file, offset) = damage(&d);
        expect_corrupt(&d, &file, offset);
        // The damaged file alone is reported too (tables and WALs).
        if file.extension().is_some_and(|e| e == "sst" || e == "log") && file.exists() {
            expect_corrupt(&file, &file, offset);
        }
    };
    let second = handles[1];
    for (part, at, reported) in [
        ("data block", second.offset + 3, second.offset),
        ("index", f.index.offset + 2, f.index.offset),
        ("filter", f.filter.offset + 20, f.filter.offset),
        ("properties", f.properties.offset + 1, f.properties.offset),
        ("footer", size - FOOTER_LEN as u64 + 4, size - FOOTER_LEN as u64),
    ] {
        eprintln!("damaging the {part}");
        damaged(&|d: &Path| {
            let p = d.join(&name);
            flip(&p, at);
            (p, Some(reported))
        });
    }
    // Truncated table.
    damaged(&|d: &Path| {
        let p = d.join(&name);
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() - 100]).unwrap();
        (p, None)
    });
    // Missing table.
    damaged(&|d: &Path| {
        let p = d.join(&name);
        std::fs::remove_file(&p).unwrap();
        (p, None)
    });
    // WAL damaged in the middle: its first record (offset 0) is lost, later ones are valid.
    damaged(&|d: &Path| {
        let wal =
            listing(d).into_iter().rev().find(|(n, sz)| n.ends_with(".log") && *sz > 1000).unwrap();
        let p = d.join(wal.0);
        flip(&p, 10);
        (p, Some(0))
    });
    // Manifest damaged in its first record (a later record is valid).
    damaged(&|d: &Path| {
        let current = std::fs::read_to_string(d.join("CURRENT")).unwrap();
        let p = d.join(current.trim());
        flip(&p, 9);
        (p, Some(0))
    });
    // A torn record at the end of the newest WAL is what a crash leaves: a note, exit 0.
    let torn = base.path().join("torn");
    copy_db(&clean, &torn);
    let (wal, len) = listing(&torn).into_iter().rev().find(|(n, _)| n.ends_with(".log")).unwrap();
    let wal = torn.join(wal);
    let b = std::fs::read(&wal).unwrap();
    std::fs::write(&wal, &b[..len as usize - 5]).unwrap();
    let (code, out, err) = tool(&["verify", "--json", s(&torn)]);
    assert_eq!(code, 0, "{out}{err}");
    let r: Json = serde_json::from_str(&out).unwrap();
    let notes = r["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n["file"] == s(&wal) && n["what"].as_str().unwrap().contains("torn")),
        "{out}"
    );
    // CURRENT naming nothing sensible.
    damaged(&|d: &Path| {
        let p = d.join("CURRENT");
        std::fs::write(&p, "garbage\n").unwrap();
        (p, Some(0))
    });
}

#[test]
fn verify_survives_garbage() {
    let base = tempfile::tempdir().unwrap();
    let clean = base.path().join("clean");
    build_closed(&clean);
    let db = Db::open_read_only(&clean, options()).unwrap();
    let table_bytes = std::fs::read(&db.tables()[0].path).unwrap();
    drop(db);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xb100);
    let g = base.path().join("garbage");
    std::fs::create_dir_all(&g).unwrap();
    let check = |args: &[&str]| {
        let (code, out, err) = tool(args);
        // A WAL that holds no valid fragment at all is, by the engine's rule, one torn
        // record (what a crash while writing the first record leaves), which recovery
        // accepts; `verify` then exits 0 but must say so.
        // An empty WAL is simply a WAL with no writes yet.
        let wal = args.last().is_some_and(|p| p.ends_with(".log"));
        let empty = args
            .last()
            .is_some_and(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() == 0));
        let torn_wal = wal && (out.contains("torn") || empty);
        assert!(
            code == 1 || code == 2 || (code == 0 && torn_wal),
            "bloomkv {args:?} exited {code}: {out}{err}"
        );
        assert!(!err.contains("panicked") && !out.contains("panicked"), "{err}{out}");
        assert!(!(out.trim().is_empty() && err.trim().is_empty()), "no message for {args:?}");
    };
    for i in 0..60 {
        let len = [0, 1, 7, 63, 64, 65, 200, 5000, 40_000][i % 9];
        let mut bytes = vec![0u8; len];
        rng.fill_bytes(&mut bytes);
        if i % 3 == 0 && len >= 8 {
            // Garbage ending in the table magic gets past the first check.
            let n = bytes.len();
            bytes[n - 8..].copy_from_slice(b"bloomkv1");
        }
        for name in ["x.sst", "000001.log", "MANIFEST-000001"] {
            let p = g.join(name);
            std::fs::write(&p, &bytes).unwrap();
            check(&["verify", s(&p)]);
        }
        // Every other command on the same garbage also fails cleanly.
        let p = g.join("x.sst");
        for cmd in ["inspect", "dump"] {
            let (code, _, err) = tool(&[cmd, s(&p)]);
            assert!(code == 2 && !err.contains("panicked"), "{cmd}: {code} {err}");
        }
    }
    // Real tables with random bytes overwritten: most fail a checksum, some the structure.
    for _ in 0..60 {
        let mut b = table_bytes.clone();
        let n = rng.gen_range(1..8);
        for _ in 0..n {
            let at = rng.gen_range(0..b.len());
            b[at] = rng.gen();
        }
        let p = g.join("y.sst");
        std::fs::write(&p, &b).unwrap();
        let (code, out, err) = tool(&["verify", s(&p)]);
        assert!(code == 1 || (code == 0 && b == table_bytes), "{code}: {out}{err}");
        assert!(!err.contains("panicked"));
    }
    // Fake database directories with garbage CURRENT, MANIFEST, tables and WALs.
    for i in 0..20 {
        let d = base.path().join(format!("fake{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let mut junk = |len: usize| {
            let mut v = vec![0u8; len];
            rng.fill_bytes(&mut v);
            v
        };
        let current = if i % 2 == 0 { b"MANIFEST-000002\n".to_vec() } else { junk(20) };
        std::fs::write(d.join("CURRENT"), current).unwrap();
        std::fs::write(d.join("MANIFEST-000002"), junk(300)).unwrap();
        std::fs::write(d.join("000003.sst"), junk(1000)).unwrap();
        std::fs::write(d.join("000004.log"), junk(500)).unwrap();
        check(&["verify", s(&d)]);
        check(&["db", s(&d)]);
        check(&["scan", s(&d)]);
    }
}

/// Replaces the stored block at `h` in `bytes` with `payload` (same stored size), with a
/// correct checksum: damage that only the semantic checks can see.
fn forge_block(bytes: &mut [u8], h: bloomkv_tree::table::BlockHandle, payload: &[u8]) {
    let mut enc = Vec::new();
    bloomkv_tree::table::format::BlockEncoder::new(bloomkv::Compression::None)
        .encode(payload, &mut enc);
    assert_eq!(enc.len() as u64, h.size + 5, "forged block must keep the layout");
    bytes[h.offset as usize..(h.offset + h.size + 5) as usize].copy_from_slice(&enc);
}

/// Writes `original` to `copy` with the block at `h` replaced by `payload`.
fn write_forged(original: &[u8], copy: &Path, h: bloomkv_tree::table::BlockHandle, payload: &[u8]) {
    let mut bytes = original.to_vec();
    forge_block(&mut bytes, h, payload);
    std::fs::write(copy, &bytes).unwrap();
}

#[test]
fn verify_checks_meaning_not_just_checksums() {
    let dir = tempfile::tempdir().unwrap();
    build_closed(dir.path());
    let db = Db::open_read_only(dir.path(), options()).unwrap();
    let t = db.tables().into_iter().find(|t| t.tombstones > 0).unwrap();
    drop(db);
    let table = open_table(&t.path);
    let f = footer(&t.path);
    let original = std::fs::read(&t.path).unwrap();
    let copy = dir.path().join("forged.sst");

    // A filter over other keys (same count, so the same size): intact bytes, wrong answers.
    let n = table.filter().num_keys();
    let policy = bloomkv::FilterPolicy::BlockedBloom {
        bits_per_key: table.filter().requested_bits_per_key(),
    };
    let other = bloomkv::filter::Filter::build(policy, (0..n).map(|i| format!("other{i}")));
    write_forged(&original, &copy, f.filter, &other.encode());
    // The engine opens it (every checksum holds); verify must not.
    Table::open(StdFs.open(&copy).unwrap(), copy.clone(), None).unwrap();
    let r = expect_corrupt(&copy, &copy, None);
    assert!(r.to_string().contains("filter answers"), "{r}");

    // Properties claiming one tombstone more than the table holds.
    let mut p = table.properties().clone();
    p.num_tombstones += 1;
    let enc = p.encode();
    assert_eq!(enc.len() as u64, table.properties().encode().len() as u64);
    write_forged(&original, &copy, f.properties, &enc);
    let r = expect_corrupt(&copy, &copy, Some(f.properties.offset));
    assert!(r.to_string().contains("tombstones"), "{r}");
}

/// `inspect` of a zstd table reports the level and a ratio well above 1 (repetitive values).
#[test]
fn inspect_reports_zstd_compression() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let opts = Options::default().compression(bloomkv::Compression::Zstd { level: 3 });
    let db = Db::open(&dir, opts).unwrap();
    for i in 0..2000 {
        // Repetitive values compress well.
        db.put(key(i), format!("{:0>100}", i % 10)).unwrap();
    }
    db.flush().unwrap();
    let t = db.tables().remove(0);
    db.close().unwrap();
    golden("inspect_zstd.json", &["inspect", "--json", s(&t.path)], tmp.path());
    assert_eq!(tool(&["verify", s(&dir)]).0, 0);
}

#[test]
fn read_only_commands_beside_a_busy_writer_report_no_damage() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let db =
        Db::open(dir.path(), options().memtable_bytes(16 << 10).l0_compaction_trigger(2)).unwrap();
    for i in 0..2000 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // The owner keeps flushing and compacting (deleting tables and WALs) throughout.
        let writer = scope.spawn(|| {
            let mut n = 0u32;
            while !stop.load(Ordering::Acquire) {
                db.put(key(n % 5000), value(n, 1)).unwrap();
                n += 1;
            }
            n
        });
        let p = s(dir.path());
        for _ in 0..6 {
            let (code, out, err) = tool(&["verify", "--json", p]);
            assert_eq!(code, 0, "verify beside a live writer: {out}{err}");
            for args in [["db", "--json", p], ["scan", "--limit", "3"]] {
                let mut args = args.to_vec();
                if args[0] == "scan" {
                    args.push(p);
                }
                let (code, out, err) = tool(&args);
                assert_eq!(code, 0, "{args:?}: {out}{err}");
            }
        }
        stop.store(true, Ordering::Release);
        let writes = writer.join().unwrap();
        assert!(writes > 0);
    });
    assert!(db.stats().flushes > 0, "the writer should have flushed while the tool ran");
    db.close().unwrap();
}

#[test]
fn verify_survives_damage_behind_valid_checksums() {
    let dir = tempfile::tempdir().unwrap();
    build_closed(dir.path());
    let db = Db::open_read_only(dir.path(), options()).unwrap();
    let t = db.tables().into_iter().find(|t| t.tombstones > 0 && t.data_blocks >= 2).unwrap();
    drop(db);
    let original = std::fs::read(&t.path).unwrap();
    let f = footer(&t.path);
    let handles = open_table(&t.path).data_block_handles();
    let file = StdFs.open(&t.path).unwrap();
    let regions = [f.filter, f.properties, f.index, handles[0], handles[1]];
    let payloads: Vec<Vec<u8>> = regions
        .iter()
        .map(|h| {
            bloomkv_tree::table::format::read_block(file.as_ref(), &t.path, *h, u64::MAX)
                .unwrap()
                .to_vec()
        })
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let copy = dir.path().join("forged.sst");
    let mut found = 0;
    for i in 0..150 {
        let r = i % regions.len();
        let mut payload = payloads[r].clone();
        for _ in 0..rng.gen_range(1..4) {
            let at = rng.gen_range(0..payload.len());
            payload[at] ^= 1 << rng.gen_range(0..8);
        }
        write_forged(&original, &copy, regions[r], &payload);
        let (code, out, err) = tool(&["verify", s(&copy)]);
        // A flipped bit inside a value (or unused filter bit) is invisible behind a valid
        // checksum, so 0 is allowed; anything else must be a clean report.
        assert!(code == 0 || code == 1, "exit {code}: {out}{err}");
        assert!(!err.contains("panicked") && !out.contains("internal error"), "{out}{err}");
        found += usize::from(code == 1);
    }
    assert!(found > 75, "only {found} of 150 structural damages were found");
}

#[test]
fn verify_accepts_a_database_after_ingests() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = build_db(dir.path());
    // Over the existing keys (onto L0) and beyond them (onto the last level), then a write in
    // the WAL segment the ingest started.
    db.ingest((0..3300).step_by(2).map(|i| (key(i), value(i, 9)))).unwrap();
    db.ingest((10_000..12_000).map(|i| (key(i), value(i, 9)))).unwrap();
    db.put(key(5), b"after").unwrap();
    // (The first ingest's L0 tables may already be compacting into L1.)
    let levels = db.stats().tables_per_level;
    assert!(levels[levels.len() - 1] > 0, "{levels:?}");
    let p = s(dir.path());
    let (code, out, err) = tool(&["verify", p]);
    assert_eq!(code, 0, "verify beside the open handle: {out}{err}");
    db.close().unwrap();
    let (code, out, err) = tool(&["verify", p]);
    assert_eq!(code, 0, "verify after close: {out}{err}");
}

#[test]
fn checkpoint_copies_an_open_database_without_touching_it() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let (db, model) = build_db(&live);
    db.compact().unwrap();
    db.put(b"after-flush", b"in the WAL").unwrap();
    let before = listing(&live);
    let dest = dir.path().join("copy");
    let (code, out, err) = tool(&["checkpoint", s(&live), s(&dest)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("written to"), "{out}");
    assert_eq!(listing(&live), before, "the source is only read");
    // A second checkpoint into the same, now full, directory is refused.
    let (code, _, err) = tool(&["checkpoint", s(&live), s(&dest)]);
    assert_eq!(code, 2);
    assert!(err.contains("not empty"), "{err}");
    db.close().unwrap();

    let copy = Db::open(&dest, Options::default()).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> =
        copy.range(..).map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect::<Result<_, _>>().unwrap();
    let mut want = model.clone();
    want.insert(b"after-flush".to_vec(), b"in the WAL".to_vec());
    assert!(got == want, "the copy differs from the database");
    // And `verify` finds the copy clean.
    assert_eq!(tool(&["verify", s(&dest)]).0, 0);
}

/// A database whose tables hold range tombstones: a last level of puts, an L0 table with
/// puts and the tombstone `key000100..key000200`, a table holding nothing but the tombstone
/// `key005000..key005100` (beyond every key), and `key000300..key000310` in the WAL only.
/// Returns the model of the live keys.
fn build_with_range_deletes(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let db = Db::open(dir, options()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..3000 {
        db.put(key(i), value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    db.compact().unwrap();
    let delete_range = |db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, lo: u32, hi: u32| {
        db.delete_range(key(lo)..key(hi)).unwrap();
        model.retain(|k, _| *k < key(lo) || *k >= key(hi));
    };
    delete_range(&db, &mut model, 100, 200);
    for i in (150..160).chain(1000..1010) {
        db.put(key(i), value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    db.flush().unwrap();
    delete_range(&db, &mut model, 5000, 5100);
    db.flush().unwrap();
    delete_range(&db, &mut model, 300, 310);
    db.close().unwrap();
    model
}

/// (key, seq, kind, value) of a dump's entries.
fn dumped(d: &Json) -> Vec<(String, u64, String, String)> {
    // An empty list is left out of the document.
    let none = Vec::new();
    d["entries"]
        .as_array()
        .unwrap_or(&none)
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().to_string(),
                e["seq"].as_u64().unwrap(),
                e["kind"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A range tombstone is listed by `dump` when it covers a selected key, wherever it starts,
/// in a table as in a WAL; and the merged view applies it. (How `inspect`, `dump` and `db`
/// show range tombstones is in the golden files of `reports_of_a_database_match_their_goldens`.)
#[test]
fn dump_selects_range_tombstones_by_the_keys_they_cover_and_scan_applies_them() {
    let dir = tempfile::tempdir().unwrap();
    let model = build_with_range_deletes(dir.path());
    let db = Db::open_read_only(dir.path(), options()).unwrap();
    let tables = db.tables();
    let with: Vec<_> = tables.iter().filter(|t| t.range_tombstones > 0).collect();
    assert_eq!(with.len(), 2, "{tables:?}");
    assert!(with.iter().any(|t| t.entries == 0), "one table holds only a range tombstone");

    // Selection, in the L0 table that holds puts too: a tombstone is listed when it covers a
    // selected key, wherever it starts.
    let l0 = with.iter().find(|t| t.entries > 0).unwrap();
    let ranges = |args: &[&str]| -> Vec<(String, String)> {
        let mut a = vec!["dump", "--json", s(&l0.path)];
        a.extend_from_slice(args);
        dumped(&tool_json(&a))
            .into_iter()
            .filter(|e| e.2 == "delete-range")
            .map(|e| (e.0, e.3))
            .collect()
    };
    let the_one = vec![("key000100".to_string(), "key000200".to_string())];
    for (args, listed) in [
        (&["--from", "key000150", "--to", "key000160"][..], true),
        (&["--from", "key000199\\xff"], true),
        (&["--from", "key000200"], false),
        (&["--to", "key000100"], false),
        (&["--to", "key000100\\x00"], true),
        (&["--prefix", "key0001"], true),
        (&["--prefix", "key0002"], true), // "key0002" itself is below "key000200"
        (&["--prefix", "key0003"], false),
        (&["--prefix", "key00015", "--from", "key000159"], true),
        (&["--prefix", "key00015", "--from", "key00016"], false),
    ] {
        let want = if listed { the_one.clone() } else { Vec::new() };
        assert_eq!(ranges(args), want, "dump {args:?}");
    }

    // The WAL's range delete, selected by the same rule.
    let wal = listing(dir.path())
        .into_iter()
        .find(|(n, len)| n.ends_with(".log") && *len > 0)
        .map(|(n, _)| dir.path().join(n))
        .unwrap();
    let wal_ranges = |args: &[&str]| -> Vec<(String, String)> {
        let mut a = vec!["dump", "--json", s(&wal)];
        a.extend_from_slice(args);
        dumped(&tool_json(&a)).into_iter().map(|e| (e.0, e.3)).collect()
    };
    let wal_one = vec![("key000300".to_string(), "key000310".to_string())];
    assert_eq!(wal_ranges(&[]), wal_one);
    assert_eq!(wal_ranges(&["--from", "key000305", "--to", "key000306"]), wal_one);
    assert_eq!(wal_ranges(&["--prefix", "key00030"]), wal_one);
    assert_eq!(wal_ranges(&["--from", "key000310"]), Vec::new());

    // And the merged view reads the deletions: what the model holds.
    let all: Vec<(String, String)> =
        dumped_pairs(&tool_json(&["scan", "--json", "--hex", s(dir.path())]));
    let want: Vec<_> = model.iter().map(|(k, v)| (hex(k), hex(v))).collect();
    assert_eq!(all, want);
}

fn dumped_pairs(j: &Json) -> Vec<(String, String)> {
    j["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["key"].as_str().unwrap().to_string(), e["value"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn verify_passes_range_tombstones_and_finds_their_damage() {
    let base = tempfile::tempdir().unwrap();
    let clean = base.path().join("clean");
    build_with_range_deletes(&clean);
    let r = tool_json(&["verify", "--json", s(&clean)]);
    assert_eq!(r["status"], "ok", "{r}");
    let db = Db::open_read_only(&clean, options()).unwrap();
    let tables = db.tables();
    let t = tables.iter().find(|t| t.range_tombstones > 0 && t.entries > 0).unwrap();
    let sum: u64 = tables.iter().map(|t| t.range_tombstones).sum();
    assert_eq!(r["checked"]["range_tombstones"], sum);
    drop(db);
    for t in &tables {
        let (code, out, err) = tool(&["verify", s(&t.path)]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let name = t.path.file_name().unwrap().to_owned();
    let table = open_table(&t.path);
    let h = table.properties().range_del;
    let f = footer(&t.path);

    // A flipped byte in the block or its trailer: the block's checksum, at its offset.
    for at in [h.offset, h.offset + h.size / 2, h.offset + h.size + 2] {
        let d = base.path().join(format!("flip{at}"));
        copy_db(&clean, &d);
        let p = d.join(&name);
        flip(&p, at);
        expect_corrupt(&d, &p, Some(h.offset));
        let r = expect_corrupt(&p, &p, Some(h.offset));
        assert!(r.to_string().contains("checksum"), "{r}");
    }

    // Damage behind a valid checksum: a tombstone whose start is not below its end (its
    // bounds swapped, so the block keeps its size).
    let original = std::fs::read(&t.path).unwrap();
    let copy = base.path().join("forged.sst");
    let tombstones = table.range_tombstones();
    let mut payload = Vec::new();
    bloomkv_tree::coding::put_varint(&mut payload, tombstones.len() as u64);
    for (i, r) in tombstones.iter().enumerate() {
        let (a, b) = if i == 0 { (&r.end, &r.start) } else { (&r.start, &r.end) };
        bloomkv_tree::coding::put_varint(&mut payload, r.seq);
        bloomkv_tree::coding::put_bytes(&mut payload, a);
        bloomkv_tree::coding::put_bytes(&mut payload, b);
    }
    write_forged(&original, &copy, h, &payload);
    // Reported where the tombstone starts, after the block's one-byte count.
    let r = expect_corrupt(&copy, &copy, Some(h.offset + 1));
    assert!(r.to_string().contains("start is not below end"), "{r}");

    // Properties that miscount the tombstones, or claim a key range without them.
    let mut p = table.properties().clone();
    p.num_range_deletions += 1;
    write_forged(&original, &copy, f.properties, &p.encode());
    let r = expect_corrupt(&copy, &copy, Some(f.properties.offset));
    assert!(r.to_string().contains("range tombstones"), "{r}");
    let mut p = table.properties().clone();
    assert_eq!(p.smallest_user_key, key(100), "the tombstone is the table's first key");
    p.smallest_user_key = key(150);
    write_forged(&original, &copy, f.properties, &p.encode());
    let r = expect_corrupt(&copy, &copy, Some(f.properties.offset));
    assert!(r.to_string().contains("smallest key"), "{r}");
}

#[test]
fn delete_range_deletes_a_range_like_put_and_delete_write() {
    let dir = tempfile::tempdir().unwrap();
    let p = s(dir.path());
    let (code, _, err) = tool(&["delete-range", p, "a", "b"]);
    assert_eq!(code, 2, "no database: {err}");
    assert!(listing(dir.path()).is_empty(), "a refused write leaves nothing behind");
    assert_eq!(tool(&["put", "--create", p, "k0", "v"]).0, 0);
    for k in ["k1", "k2", "k3", "k3\\x00", "k4", "z\\xff"] {
        assert_eq!(tool(&["put", p, k, "v"]).0, 0);
    }
    // End exclusive; escaped text, then hex.
    assert_eq!(tool(&["delete-range", p, "k1", "k3\\x00"]).0, 0);
    assert_eq!(tool(&["delete-range", "--hex", p, "7a", "7aff00"]).0, 0);
    let live: Vec<String> =
        dumped_pairs(&tool_json(&["scan", "--json", p])).into_iter().map(|(k, _)| k).collect();
    assert_eq!(live, ["k0", "k3\\x00", "k4"]);
    // The live WAL holds the last as one range delete (the first may be gone already: an
    // open flushes the older WALs, and a tombstone over nothing older is dropped).
    let d = tool_json(&["dump", "--json", "--internal", p]);
    let last = d["entries"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["kind"], "delete-range");
    assert_eq!((last["key"].as_str(), last["value"].as_str()), (Some("z"), Some("z\\xff\\x00")));
    assert!(last["file"].as_str().unwrap().ends_with(".log"), "{last}");

    // An empty range is refused, not silently ignored.
    for (a, b) in [("k4", "k4"), ("k5", "k0")] {
        let (code, _, err) = tool(&["delete-range", p, a, b]);
        assert_eq!(code, 2);
        assert!(err.contains("empty range"), "{err}");
    }
    assert_eq!(tool(&["get", p, "k4"]).0, 0);
    // While another handle holds the LOCK, it fails cleanly like put and delete.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let (code, _, err) = tool(&["delete-range", p, "k0", "k9"]);
    assert_eq!(code, 2);
    assert!(err.contains("LOCK") && err.contains("another process"), "{err}");
    assert_eq!(db.get(b"k0").unwrap().as_deref(), Some(&b"v"[..]));
    db.close().unwrap();
}

/// The manifest `CURRENT` names.
fn current_manifest(dir: &Path) -> PathBuf {
    let name = std::fs::read_to_string(dir.join("CURRENT")).unwrap();
    dir.join(name.trim_end())
}

/// A database whose default keyspace and keyspace "a" hold different keys (and "shared" with
/// different values), closed so the tool can open it.
fn build_with_keyspace(dir: &Path) {
    let db = Db::open(dir, Options::default()).unwrap();
    let a = db.keyspace("a", KeyspaceOptions::default()).unwrap();
    db.put("shared", "from default").unwrap();
    db.put("only-default", "d").unwrap();
    for k in ["shared", "only-a", "r1", "r2", "r3"] {
        a.put(k, format!("{k} in a")).unwrap();
    }
    db.close().unwrap();
}

#[test]
fn keyspace_option_reads_and_writes_the_named_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let p = s(dir.path());
    build_with_keyspace(dir.path());

    let (code, out, _) = tool(&["get", "--keyspace", "a", p, "only-a"]);
    assert_eq!((code, out.trim()), (0, "\"only-a in a\""));
    assert_eq!(tool(&["get", p, "only-a"]).0, 1, "the default keyspace does not have it");
    assert_eq!(tool(&["get", "--keyspace", "a", p, "only-default"]).0, 1);
    let r = tool_json(&["get", "--json", "--keyspace", "a", p, "shared"]);
    assert_eq!(r["value"], "shared in a");
    assert_eq!(tool_json(&["get", "--json", p, "shared"])["value"], "from default");

    let scanned = dumped_pairs(&tool_json(&["scan", "--json", "--keyspace", "a", p]));
    let keys: Vec<&str> = scanned.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["only-a", "r1", "r2", "r3", "shared"]);
    // The merged dump of a database directory shows the named keyspace too.
    let dumped = dumped_pairs(&tool_json(&["dump", "--json", "--keyspace", "a", p]));
    assert_eq!(dumped, scanned);
    let default = dumped_pairs(&tool_json(&["dump", "--json", p]));
    assert!(default.iter().all(|(k, _)| k != "only-a"), "{default:?}");

    // trace walks the named keyspace's read path.
    let t = tool_json(&["trace", "--json", "--keyspace", "a", p, "only-a"]);
    assert_eq!((t["result"].as_str(), t["value"].as_str()), (Some("value"), Some("only-a in a")));
    assert_eq!(tool_json(&["trace", "--json", p, "only-a"])["result"], "absent");

    // Writes go to the named keyspace only.
    assert_eq!(tool(&["put", "--keyspace", "a", p, "new", "n"]).0, 0);
    assert_eq!(tool(&["delete", "--keyspace", "a", p, "shared"]).0, 0);
    assert_eq!(tool(&["delete-range", "--keyspace", "a", p, "r1", "r3"]).0, 0);
    let db = Db::open_read_only(dir.path(), Options::default()).unwrap();
    let a = db.existing_keyspace("a").unwrap();
    let live: Vec<Vec<u8>> = a.range(..).map(|kv| kv.unwrap().0.to_vec()).collect();
    assert_eq!(live, [&b"new"[..], b"only-a", b"r3"]);
    assert_eq!(db.get("new").unwrap(), None);
    assert_eq!(db.get("shared").unwrap().as_deref(), Some(&b"from default"[..]));
    drop(a);
    db.close().unwrap();
}

#[test]
fn an_unknown_keyspace_is_an_error_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let p = s(dir.path());
    build_with_keyspace(dir.path());
    let cases: [&[&str]; 7] = [
        &["get", "--keyspace", "nope", p, "k"],
        &["scan", "--keyspace", "nope", p],
        &["trace", "--keyspace", "nope", p, "k"],
        &["put", "--keyspace", "nope", p, "k", "v"],
        &["delete", "--keyspace", "nope", p, "k"],
        &["delete-range", "--keyspace", "nope", p, "a", "b"],
        &["dump", "--keyspace", "nope", p],
    ];
    for args in cases {
        let (code, out, err) = tool(args);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(
            err.contains("\"nope\"") && err.contains("\"default\", \"a\""),
            "{args:?} names the keyspace and the existing ones: {err}"
        );
    }
    let db = Db::open_read_only(dir.path(), Options::default()).unwrap();
    assert_eq!(db.keyspace_names(), ["default", "a"]);
    db.close().unwrap();
}

#[test]
fn keyspace_create_list_and_drop_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p = s(dir.path());
    assert_eq!(tool(&["put", "--create", p, "k", "v"]).0, 0);
    let (code, out, _) = tool(&["keyspace", "list", p]);
    assert_eq!((code, out.as_str()), (0, "default\n"));

    assert_eq!(tool(&["keyspace", "create", p, "logs", "--filter", "none", "--zstd", "3"]).0, 0);
    assert_eq!(tool(&["keyspace", "create", p, "idx", "--bits-per-key", "7"]).0, 0);
    let users = ["keyspace", "create", p, "users", "--prefix-extractor", "delimiter:0x2f"];
    assert_eq!(tool(&users).0, 0);
    let r = tool_json(&["keyspace", "list", "--json", p]);
    assert_eq!(r["keyspaces"], serde_json::json!(["default", "logs", "idx", "users"]));
    assert_eq!(tool(&["put", "--keyspace", "logs", p, "l1", "x"]).0, 0);

    // Creating one that exists, or a contradictory filter, is refused.
    for args in [
        &["keyspace", "create", p, "logs"][..],
        &["keyspace", "create", p, "default"],
        &["keyspace", "create", p, "x", "--filter", "none", "--bits-per-key", "5"],
        &["keyspace", "create", p, "x", "--prefix-extractor", "fixed:0"],
        &["keyspace", "create", p, "x", "--no-whole-key-filtering"],
        &["keyspace", "create", p, "x", "--filter", "blocked+prefix"],
    ] {
        let (code, _, err) = tool(args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    // The options given are the ones the keyspace has: its tables are written with them.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.existing_keyspace("idx").unwrap().put("i1", "y").unwrap();
    db.existing_keyspace("users").unwrap().put("u1/name", "z").unwrap();
    db.flush().unwrap();
    for (name, kind, bits) in [
        ("logs", "none", None),
        ("idx", "blocked-bloom", Some(7.0)),
        ("users", "blocked-bloom", Some(10.0)),
    ] {
        let t = db.existing_keyspace(name).unwrap().tables().unwrap();
        assert_eq!(t.len(), 1, "{name}");
        assert_eq!(t[0].filter_kind.to_string(), kind, "{name}");
        if let Some(bits) = bits {
            assert_eq!(t[0].filter_requested_bits_per_key, bits, "{name}");
        }
        let extractor = (name == "users").then_some("delimiter:0x2f");
        assert_eq!(t[0].prefix_extractor.as_deref(), extractor, "{name}");
    }
    db.close().unwrap();
    let (code, _, err) = tool(&["keyspace", "drop", p, "users"]);
    assert_eq!(code, 0, "{err}");

    assert_eq!(tool(&["keyspace", "drop", p, "logs"]).0, 0);
    let (code, out, _) = tool(&["keyspace", "list", p]);
    assert_eq!((code, out.as_str()), (0, "default\nidx\n"));
    assert_eq!(tool(&["get", "--keyspace", "idx", p, "i1"]).0, 0);
    let (code, _, err) = tool(&["keyspace", "drop", p, "logs"]);
    assert_eq!(code, 2);
    assert!(err.contains("\"logs\"") && err.contains("\"default\", \"idx\""), "{err}");
    assert_eq!(tool(&["keyspace", "drop", p, "default"]).0, 2);
    assert_eq!(tool(&["get", p, "k"]).0, 0, "the default keyspace is still there");

    // While another handle holds the LOCK, create and drop fail cleanly like put.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for args in [["keyspace", "create", p, "z"], ["keyspace", "drop", p, "idx"]] {
        let (code, _, err) = tool(&args);
        assert_eq!(code, 2);
        assert!(err.contains("LOCK"), "{err}");
    }
    assert_eq!(db.keyspace_names(), ["default", "idx"]);
    db.close().unwrap();
}

/// `db` lists each keyspace with its id, its options (the manifest's, or for the default
/// keyspace those of the opener) and its own tables and filter runs; the top-level levels
/// hold every keyspace's tables, each naming its keyspace; the text groups the tables under
/// their keyspace.
#[test]
fn db_lists_each_keyspaces_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    // One flush, one table per keyspace: nothing for background work to do.
    let db = Db::open(&dir, Options::default()).unwrap();
    let a = db
        .keyspace(
            "a",
            KeyspaceOptions::new().filter_policy(FilterPolicy::ClassicBloom { bits_per_key: 6.0 }),
        )
        .unwrap();
    for i in 0..500 {
        db.put(key(i), value(i, 0)).unwrap();
        a.put(key(i + 10_000), value(i, 1)).unwrap();
    }
    db.flush().unwrap();
    drop(a);
    db.close().unwrap();
    golden("db_keyspaces.json", &["db", "--json", s(&dir)], tmp.path());
    golden("db_keyspaces.txt", &["db", s(&dir)], tmp.path());
}

/// A WAL dump names each operation's keyspace by id; a manifest dump shows keyspaces
/// defined (with their options), dropped, and the keyspace of each table added.
#[test]
fn wal_and_manifest_dumps_show_keyspaces() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    // A fixed clock: the flush judges expiry, so the manifest records the clock's mark.
    let clock = Arc::new(bloomkv::ManualClock::new(1_800_000_000_000));
    let db = Db::open(&dir, Options::default().clock(clock)).unwrap();
    let logs = db
        .keyspace(
            "logs",
            KeyspaceOptions::new()
                .filter_policy(FilterPolicy::Budgeted { bits_per_key: 8.0 })
                .compression(bloomkv::Compression::Zstd { level: 5 }),
        )
        .unwrap();
    let gone = db.keyspace("gone", KeyspaceOptions::default()).unwrap();
    gone.put("g", "1").unwrap();
    logs.put("flushed", "1").unwrap();
    db.flush().unwrap();
    db.drop_keyspace("gone").unwrap();
    // Unflushed: a batch across keyspaces, in the live WAL only.
    let mut batch = bloomkv::WriteBatch::new();
    batch.put("in-default", "d");
    batch.put_in(&logs, "in-logs", "l");
    batch.delete_range_in(&logs, "a".."b");
    db.write(&batch, &bloomkv::WriteOptions::default()).unwrap();
    drop((logs, gone));
    db.close().unwrap();

    let (wal, _) =
        listing(&dir).into_iter().rev().find(|(n, len)| n.ends_with(".log") && *len > 0).unwrap();
    let wal = dir.join(wal);
    golden("dump_wal_keyspaces.json", &["dump", "--json", s(&wal)], tmp.path());
    golden("dump_wal_keyspaces.txt", &["dump", s(&wal)], tmp.path());
    let manifest = current_manifest(&dir);
    golden("dump_manifest_keyspaces.json", &["dump", "--json", s(&manifest)], tmp.path());
    golden("dump_manifest_keyspaces.txt", &["dump", s(&manifest)], tmp.path());
}

/// Every command that opens a database for writing reports a held LOCK as the database
/// being in use by another process, not as a bad argument.
#[test]
fn a_held_lock_is_reported_as_in_use_by_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let p = s(dir.path());
    assert_eq!(tool(&["put", "--create", p, "k", "v"]).0, 0);
    assert_eq!(tool(&["keyspace", "create", p, "ks"]).0, 0);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let lock = dir.path().join("LOCK");
    for args in [
        vec!["put", p, "k", "v2"],
        vec!["put", "--create", p, "k", "v2"],
        vec!["delete", p, "k"],
        vec!["delete-range", p, "a", "z"],
        vec!["keyspace", "create", p, "other"],
        vec!["keyspace", "drop", p, "ks"],
    ] {
        let (code, _, err) = tool(&args);
        assert_eq!(code, 2, "{args:?}");
        assert!(!err.contains("invalid argument"), "{args:?}: {err}");
        assert!(
            err.contains(&format!("the database in {p} is in use by another process")),
            "{err}"
        );
        assert!(err.contains(s(&lock)), "names the LOCK file: {err}");
        assert!(err.contains("get, scan"), "points to the commands that still work: {err}");
    }
    // The read-only commands still work beside it.
    assert_eq!(tool(&["get", p, "k"]).1.trim(), "\"v\"");
    assert_eq!(db.get("k").unwrap().unwrap(), "v");
    db.close().unwrap();
}

/// A command given a directory where it takes a file, or a file where it takes a database
/// directory, says what the path is and which command takes it.
#[test]
fn a_directory_or_file_in_the_wrong_place_is_named_for_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let p = s(dir.path());
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put("k", "v").unwrap();
    db.flush().unwrap();
    let table = db.tables()[0].path.clone();
    db.close().unwrap();

    for args in [vec!["inspect", p], vec!["inspect", "--json", p]] {
        let (code, out, err) = tool(&args);
        assert_eq!((code, out.as_str()), (2, ""), "{args:?}");
        assert!(!err.contains("Is a directory"), "{err}");
        assert!(err.contains(&format!("{p} is a database directory")), "{err}");
        assert!(err.contains(&format!("`bloomkv db {p}`")), "{err}");
    }
    let other = tempfile::tempdir().unwrap();
    let (code, _, err) = tool(&["inspect", s(other.path())]);
    assert_eq!(code, 2);
    assert!(
        err.contains("is a directory, not a table file") && !err.contains("bloomkv db"),
        "{err}"
    );

    let t = s(&table);
    for cmd in [vec!["db"], vec!["scan"], vec!["get"], vec!["trace"], vec!["put"], vec!["delete"]] {
        let mut args = cmd.clone();
        args.push(t);
        args.extend(match cmd[0] {
            "get" | "trace" | "delete" => &["k"][..],
            "put" => &["k", "v"][..],
            _ => &[][..],
        });
        let (code, _, err) = tool(&args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(&format!("{t} is a table file, not a database directory")), "{err}");
        assert!(err.contains(&format!("`bloomkv inspect {t}`")), "{err}");
    }
}

/// The proleptic Gregorian UTC date-time of `secs`, counted day by day: an oracle for the
/// tool's arithmetic.
fn naive_utc(secs: u64) -> String {
    let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let (mut days, mut y) = (secs / 86_400, 1970);
    while days >= if leap(y) { 366 } else { 365 } {
        days -= if leap(y) { 366 } else { 365 };
        y += 1;
    }
    let months = [31, if leap(y) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let mut m = 0;
    while days >= months[m] {
        days -= months[m];
        m += 1;
    }
    let t = secs % 86_400;
    format!("{y:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", m + 1, days + 1, t / 3600, t / 60 % 60, t % 60)
}

#[test]
fn inspect_shows_the_creation_time_as_a_utc_date_time() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put("k", "v").unwrap();
    db.flush().unwrap();
    let table = db.tables()[0].path.clone();
    db.close().unwrap();
    let secs = open_table(&table).properties().creation_time;
    assert!(secs > 1_600_000_000, "a table built now: {secs}");

    let r = tool_json(&["inspect", "--json", s(&table)]);
    assert_eq!(r["creation_time"], secs, "the raw seconds stay");
    assert_eq!(r["created"], naive_utc(secs));
    let (code, text, _) = tool(&["inspect", s(&table)]);
    assert_eq!(code, 0);
    let line = text.lines().find(|l| l.starts_with("created")).unwrap();
    assert_eq!(
        line,
        format!("created          {} ({secs} s since the Unix epoch)", naive_utc(secs))
    );
    // The oracle itself, on dates `date -u` gives.
    assert_eq!(naive_utc(951_868_799), "2000-02-29T23:59:59Z");
    assert_eq!(naive_utc(1_795_351_982), "2026-11-22T12:53:02Z");
}

/// A database for the `scan` flags: keys k00..k19 with values of growing length (k07 holds
/// binary bytes) and a keyspace `ks` holding a key `k05` too.
fn scan_db(dir: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = Db::open(dir, Options::default()).unwrap();
    let mut model = Vec::new();
    for i in 0..20u32 {
        let k = format!("k{i:02}").into_bytes();
        let mut v: Vec<u8> = (0..i * 10).map(|j| b'a' + (j % 26) as u8).collect();
        if i == 7 {
            v = (0..70u8).map(|j| j.wrapping_mul(37)).collect();
        }
        db.put(&k, &v).unwrap();
        model.push((k, v));
    }
    db.flush().unwrap();
    // An overwrite and a delete left in the WAL, so the merged view is what is listed.
    db.put("k03", "new").unwrap();
    model[3].1 = b"new".to_vec();
    db.delete("k04").unwrap();
    model.remove(4);
    db.keyspace("ks", KeyspaceOptions::default()).unwrap().put("k05", "other").unwrap();
    db.close().unwrap();
    model
}

/// `scan --reverse` lists the same entries last first (`--limit` keeps the last N, the bounds
/// and prefix select as forwards); `--keys-only` prints keys alone (no value in JSON);
/// `--count` prints the number alone, at most `--limit`, and JSON says whether it was cut.
#[test]
fn scan_reverse_keys_only_and_count() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    scan_db(&dir);
    let p = s(&dir);
    golden_transcript(
        "scan_reverse_keys_only_and_count.txt",
        &[
            &["scan", "--json", "--reverse", p],
            &["scan", "--json", "--reverse", "--limit", "3", p],
            &["scan", "--json", "--reverse", "--from", "k05", "--to", "k09", p],
            &["scan", "--json", "--reverse", "--prefix", "k1", "--limit", "2", p],
            &["scan", "--json", "--reverse", "--keyspace", "ks", p],
            &["scan", "--json", "--reverse", "--from", "k09", "--to", "k05", p],
            &["scan", "--reverse", "--prefix", "k0", "--max-value-bytes", "0", p],
            &["scan", "--keys-only", "--prefix", "k1", p],
            &["scan", "--keys-only", "--hex", "--reverse", "--limit", "1", p],
            &["scan", "--json", "--keys-only", p],
            &["scan", "--count", p],
            &["scan", "--count", "--prefix", "k1", "--reverse", p],
            &["scan", "--json", "--count", "--limit", "4", p],
            &["scan", "--json", "--count", "--keyspace", "ks", p],
        ],
        tmp.path(),
    );
    let (code, _, err) = tool(&["scan", "--count", "--keys-only", p]);
    assert_eq!(code, 2, "conflicting flags: {err}");
}

/// Text cuts values at 64 bytes by default, then `…` and the whole length outside the quotes;
/// binary bytes are cut, then escaped, so no escape is split; `--max-value-bytes` sets the
/// limit (0 for whole values; a value exactly at the limit is whole), in hex too. JSON gives
/// whole values unless a limit is given, and each entry says its length and whether it was cut.
#[test]
fn scan_cuts_long_values_short() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    scan_db(&dir);
    let p = s(&dir);
    golden_transcript(
        "scan_cuts_long_values_short.txt",
        &[
            &["scan", p],
            &["scan", "--max-value-bytes", "5", "--prefix", "k19", p],
            &["scan", "--hex", "--max-value-bytes", "2", "--prefix", &hex(b"k19"), p],
            &["scan", "--max-value-bytes", "0", "--prefix", "k19", p],
            &["scan", "--max-value-bytes", "190", "--prefix", "k19", p],
            &["scan", "--json", p],
            &["scan", "--json", "--max-value-bytes", "64", p],
        ],
        tmp.path(),
    );
}

/// A WAL record that reserves a sequence number for an ingest is listed by `dump` (kind
/// `reserved`, no key or value) in its place among the writes, and `verify` accepts it.
#[test]
fn dump_lists_a_reserved_sequence_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("000007.log");
    let mut w = bloomkv_tree::log::LogWriter::new(StdFs.create(&path).unwrap());
    let record = |seq: u64, ops: &[u8]| {
        let mut r = seq.to_le_bytes().to_vec();
        r.extend_from_slice(&u32::from(!ops.is_empty()).to_le_bytes());
        r.extend_from_slice(ops);
        r
    };
    w.add_record(&record(10, &[])).unwrap(); // the segment's header
    w.add_record(&record(10, &[3])).unwrap();
    w.add_record(&record(11, &[1, 1, b'k', 1, b'v'])).unwrap();
    w.sync().unwrap();
    drop(w);
    let p = s(&path);
    golden("dump_wal_reserved.json", &["dump", "--json", p], dir.path());
    golden("dump_wal_reserved.txt", &["dump", p], dir.path());
    let (code, out, err) = tool(&["verify", p]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn dump_and_inspect_show_expiry_times() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let at = 1_800_000_000_000u64; // 2027-01-15T08:00:00Z
    let clock = Arc::new(bloomkv::ManualClock::new(at));
    let db = Db::open(dir.path(), Options::new().clock(clock)).unwrap();
    db.put_with_ttl("a", "short", Duration::from_secs(60)).unwrap();
    db.put_with_ttl("b", "long", Duration::from_secs(3600)).unwrap();
    db.put("c", "forever").unwrap();
    let wal = dir.path().read_dir().unwrap().map(|e| e.unwrap().path());
    let wal: Vec<PathBuf> = wal.filter(|p| p.extension().is_some_and(|e| e == "log")).collect();
    let check = |entries: &Json| {
        let e = entries.as_array().unwrap();
        let find = |k: &str| e.iter().find(|x| x["key"] == k).unwrap().clone();
        assert_eq!(find("a")["kind"], "put-expiring");
        assert_eq!(find("a")["value"], "short");
        assert_eq!(find("a")["expires"], at + 60_000);
        assert_eq!(find("b")["expires"], at + 3_600_000);
        assert_eq!(find("c")["kind"], "put");
        assert!(find("c").get("expires").is_none());
    };
    let from_wal: Vec<Json> = wal.iter().map(|p| tool_json(&["dump", "--json", s(p)])).collect();
    check(&Json::Array(
        from_wal.iter().flat_map(|d| d["entries"].as_array().unwrap().clone()).collect(),
    ));
    db.flush().unwrap();
    let table = dir.path().read_dir().unwrap().map(|e| e.unwrap().path());
    let table: Vec<PathBuf> = table.filter(|p| p.extension().is_some_and(|e| e == "sst")).collect();
    assert_eq!(table.len(), 1);
    check(&tool_json(&["dump", "--json", s(&table[0])])["entries"]);
    let (code, out, _) = tool(&["dump", s(&table[0])]);
    assert_eq!(code, 0);
    assert!(out.contains("(expires 2027-01-15T08:01:00Z, 1800000060000 ms)"), "{out}");
    let r = tool_json(&["inspect", "--json", s(&table[0])]);
    assert_eq!(r["format_version"], 3);
    assert_eq!(r["expiring"]["entries"], 2);
    assert_eq!(r["expiring"]["oldest_expiry_ms"], at + 60_000);
    assert_eq!(r["expiring"]["oldest_expiry"], "2027-01-15T08:01:00Z");
    assert_eq!(r["expiring"]["newest_expiry_ms"], at + 3_600_000);
    let (_, out, _) = tool(&["inspect", s(&table[0])]);
    assert!(out.contains("expiring         2 entries in"), "{out}");
    // A read judged expiry at `at`: the manifest records the clock's mark at close.
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"short"[..]));
    db.close().unwrap();
    let manifest = current_manifest(dir.path());
    let edits = tool_json(&["dump", "--json", s(&manifest)])["edits"].clone();
    let marks: Vec<&Json> = edits
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["clock_mark"])
        .filter(|m| !m.is_null())
        .collect();
    assert_eq!(marks.last().copied(), Some(&Json::from(at)), "{edits}");
    let (_, out, _) = tool(&["dump", s(&manifest)]);
    assert!(out.contains(&format!(", clock mark {at} ms")), "{out}");
}

#[test]
fn dump_inspect_and_verify_show_merge_operands() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::new().merge_operator(Arc::new(bloomkv::Append::new(",")));
    let db = Db::open(dir.path(), opts).unwrap();
    db.put("a", "base").unwrap();
    db.merge("a", "x").unwrap();
    db.merge("b", "y").unwrap();
    let files = |ext: &str| -> Vec<PathBuf> {
        let all = dir.path().read_dir().unwrap().map(|e| e.unwrap().path());
        all.filter(|p| p.extension().is_some_and(|e| e == ext)).collect()
    };
    let kinds = |entries: &Json| -> Vec<(String, String, String)> {
        let e = entries.as_array().unwrap();
        let text = |v: &Json| v.as_str().unwrap().to_string();
        e.iter().map(|x| (text(&x["key"]), text(&x["kind"]), text(&x["value"]))).collect()
    };
    let wal: Vec<(String, String, String)> = files("log")
        .iter()
        .flat_map(|p| kinds(&tool_json(&["dump", "--json", s(p)])["entries"]))
        .collect();
    let merge = |k: &str, v: &str| (k.to_string(), "merge".to_string(), v.to_string());
    assert!(wal.contains(&merge("a", "x")) && wal.contains(&merge("b", "y")), "{wal:?}");
    db.flush().unwrap();
    let table = files("sst");
    assert_eq!(table.len(), 1);
    // A flush keeps the operands over a put it holds folded into one put, and the operand
    // with nothing beneath it as it is: tables below may hold the key.
    let entries = kinds(&tool_json(&["dump", "--json", s(&table[0])])["entries"]);
    let put = ("a".to_string(), "put".to_string(), "base,x".to_string());
    assert_eq!(entries, [put, merge("b", "y")]);
    let r = tool_json(&["inspect", "--json", s(&table[0])]);
    assert_eq!(r["format_version"], 4);
    assert_eq!(r["merge_operands"], 1);
    let (_, out, _) = tool(&["inspect", s(&table[0])]);
    assert!(out.contains("merge operands   1 (format version 4)"), "{out}");
    db.close().unwrap();
    let (code, out, err) = tool(&["verify", s(dir.path())]);
    assert_eq!(code, 0, "{out}{err}");
    // The tool has no operator: the merged view names what is missing instead of guessing.
    let (code, out, err) = tool(&["scan", s(dir.path())]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("no merge operator"), "{err}");
}

/// A blob file is classified by its name: `dump` lists its values with the offsets
/// references name them by, `verify` checks it, and finds damage in it, alone or as part of
/// its database.
#[test]
fn dump_and_verify_a_blob_file() {
    let dir = tempfile::tempdir().unwrap();
    let db =
        Db::open(dir.path(), options().memtable_bytes(4 << 20).blob_threshold(Some(100))).unwrap();
    for i in 0..20u32 {
        db.put(key(i), vec![i as u8; 100 + 1000 * i as usize]).unwrap();
    }
    db.put("small", "x").unwrap();
    pad_segment(&db, 400_000);
    db.flush().unwrap();
    db.close().unwrap();
    let blobs: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "blob"))
        .collect();
    assert_eq!(blobs.len(), 1);
    let blob = &blobs[0];
    let dumped = tool_json(&["dump", "--json", s(blob)]);
    let entries = dumped["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 20, "{dumped}");
    let offsets: Vec<u64> = entries.iter().map(|e| e["offset"].as_u64().unwrap()).collect();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
    let r = tool_json(&["verify", "--json", s(blob)]);
    assert_eq!((r["status"].as_str(), r["target"].as_str()), (Some("ok"), Some("blob")));
    let len = std::fs::metadata(blob).unwrap().len();
    flip(blob, len - 50);
    expect_corrupt(blob, blob, None);
}

/// Small values, kept inline, so that the large ones are under half of the WAL segment: the
/// flush then copies them into a blob file (`*.blob`) rather than keeping the segment.
fn pad_segment(db: &Db, bytes: usize) {
    for j in 0..bytes / 50 {
        db.put(format!("~pad{j:06}"), [0u8; 40]).unwrap();
    }
}

/// A closed database with two blob files, one of them half garbage: 20 separated values
/// flushed, then 10 of them overwritten and flushed. (No compaction: the overwritten values
/// stay referenced by the older table, so the garbage comes from a full compaction below.)
fn build_blob_db(dir: &Path) -> Vec<PathBuf> {
    // No garbage collection: the compaction leaves the first file's garbage in place.
    let opts = options().memtable_bytes(4 << 20).blob_threshold(Some(100)).blob_gc_age_cutoff(0.0);
    let db = Db::open(dir, opts).unwrap();
    for i in 0..20u32 {
        db.put(key(i), vec![i as u8; 200 + 100 * i as usize]).unwrap();
    }
    db.put("small", "x").unwrap();
    pad_segment(&db, 60_000);
    db.flush().unwrap();
    for i in 0..10u32 {
        db.put(key(i), vec![i as u8 + 1; 300]).unwrap();
    }
    pad_segment(&db, 10_000);
    db.flush().unwrap();
    db.compact().unwrap();
    db.close().unwrap();
    let mut blobs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "blob"))
        .collect();
    blobs.sort();
    blobs
}

/// `db` lists the live blob files with what `Stats::blob_files` says of each, and totals
/// whose space amplification is file bytes per live value byte; text and JSON agree.
#[test]
fn db_lists_blob_files_with_live_and_garbage_bytes() {
    let dir = tempfile::tempdir().unwrap();
    build_blob_db(dir.path());
    let stats = Db::open_read_only(dir.path(), options()).unwrap().stats();
    assert!(!stats.blob_files.is_empty());
    assert!(stats.blob_garbage_bytes > 0, "the overwrite left no garbage: {stats:?}");
    let r = tool_json(&["db", "--json", s(dir.path())]);
    let b = &r["blobs"];
    let files = b["files"].as_array().unwrap();
    assert_eq!(files.len(), stats.blob_files.len(), "{b}");
    for (f, want) in files.iter().zip(&stats.blob_files) {
        assert_eq!(f["number"].as_u64(), Some(want.number));
        assert_eq!(f["file_size"].as_u64(), Some(want.file_size));
        assert_eq!(f["values"].as_u64(), Some(want.values));
        assert_eq!(f["value_bytes"].as_u64(), Some(want.value_bytes));
        assert_eq!(f["live_values"].as_u64(), Some(want.live_values));
        assert_eq!(f["live_bytes"].as_u64(), Some(want.live_bytes));
        assert_eq!(f["garbage_bytes"].as_u64(), Some(want.garbage_bytes));
        assert_eq!(f["keyspace"].as_str(), Some("default"));
        let path = dir.path().join(format!("{:06}.blob", want.number));
        assert_eq!(f["file"].as_str(), Some(s(&path)));
    }
    assert_eq!(b["total_files"].as_u64(), Some(files.len() as u64));
    assert_eq!(b["total_file_bytes"].as_u64(), Some(stats.blob_file_bytes));
    assert_eq!(b["total_live_bytes"].as_u64(), Some(stats.blob_live_bytes));
    assert_eq!(b["total_garbage_bytes"].as_u64(), Some(stats.blob_garbage_bytes));
    let amp = stats.blob_file_bytes as f64 / stats.blob_live_bytes as f64;
    assert!((b["space_amplification"].as_f64().unwrap() - amp).abs() < 1e-9, "{b}");

    let (code, text, err) = tool(&["db", s(dir.path())]);
    assert_eq!(code, 0, "{err}");
    for f in &stats.blob_files {
        let line = format!(
            "blob {:06}.blob {:>10} bytes  keyspace \"default\"  {} values ({} bytes), live {} ({} bytes), garbage {} bytes",
            f.number, f.file_size, f.values, f.value_bytes, f.live_values, f.live_bytes, f.garbage_bytes
        );
        assert!(text.contains(&line), "{line} not in {text}");
    }
    assert!(text.contains(&format!("space amplification {amp:.2}")), "{text}");
}

/// `inspect` of a blob file shows its header and what its values add up to.
#[test]
fn inspect_shows_a_blob_files_header_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = build_blob_db(dir.path());
    let blob = &blobs[0];
    let number: u64 = blob.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    let dumped = tool_json(&["dump", "--json", s(blob)]);
    let entries = dumped["entries"].as_array().unwrap();
    let r = tool_json(&["inspect", "--json", s(blob)]);
    assert_eq!(r["format_version"].as_u64(), Some(1), "{r}");
    assert_eq!(r["kind"].as_u64(), Some(1));
    assert_eq!(r["number"].as_u64(), Some(number));
    assert_eq!(r["values"].as_u64(), Some(entries.len() as u64));
    let stats = Db::open_read_only(dir.path(), options()).unwrap().stats();
    let meta = stats.blob_files.iter().find(|b| b.number == number).unwrap();
    assert_eq!(r["value_bytes"].as_u64(), Some(meta.value_bytes));
    assert_eq!(r["file_size"].as_u64(), Some(std::fs::metadata(blob).unwrap().len()));
    let (code, text, err) = tool(&["inspect", s(blob)]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("format version 1, kind 1 (separated"), "{text}");
    assert!(text.contains(&format!("number {number}")), "{text}");
    assert!(
        text.contains(&format!("values   {} ({} bytes", entries.len(), meta.value_bytes)),
        "{text}"
    );
}

/// `verify` of a database reads every blob reference of every table: a clean database counts
/// them; a byte damaged inside a value is found at the reference's offset in its blob file,
/// naming the table and key; a deleted blob file is named missing.
#[test]
fn verify_resolves_every_blob_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("clean");
    let blobs = build_blob_db(&clean);
    let stats = Db::open_read_only(&clean, options()).unwrap().stats();
    let live_refs: u64 = stats.blob_files.iter().map(|b| b.live_values).sum();
    let r = tool_json(&["verify", "--json", s(&clean)]);
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["checked"]["blob_files"].as_u64(), Some(stats.blob_files.len() as u64));
    assert_eq!(r["checked"]["blob_refs"].as_u64(), Some(live_refs));
    let (code, text, _) = tool(&["verify", s(&clean)]);
    assert_eq!(code, 0);
    let counts = format!("{} blob file(s), {live_refs} blob reference(s)", stats.blob_files.len());
    assert!(text.contains(&counts), "{text}");

    // The value of a key written once is live wherever it is: in the first flush's blob
    // file, or where a compaction relocated it.
    let mut found = Vec::new();
    for b in &blobs {
        let dumped = tool_json(&["dump", "--json", s(b)]);
        for e in dumped["entries"].as_array().unwrap() {
            if e["key"].as_str() == Some("key000019") {
                found.push((b.file_name().unwrap().to_owned(), e["offset"].as_u64().unwrap()));
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    let (live, offset) = found.pop().unwrap();

    let damaged = tmp.path().join("damaged");
    copy_db(&clean, &damaged);
    let blob = damaged.join(&live);
    flip(&blob, offset + 10);
    let r = expect_corrupt(&damaged, &blob, Some(offset));
    let hit = r["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["file"] == s(&blob) && p["offset"].as_u64() == Some(offset))
        .unwrap();
    let what = hit["what"].as_str().unwrap();
    assert!(what.contains("checksum") && what.contains(".sst"), "{what}");

    let missing = tmp.path().join("missing");
    copy_db(&clean, &missing);
    let blob = missing.join(&live);
    std::fs::remove_file(&blob).unwrap();
    let r = expect_corrupt(&missing, &blob, None);
    let text = r["problems"].to_string();
    assert!(text.contains("missing"), "{text}");

    // Cut short: the size disagrees with the manifest, and the references past the new end
    // are found as such.
    let short = tmp.path().join("short");
    copy_db(&clean, &short);
    let blob = short.join(&live);
    let len = std::fs::metadata(&blob).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&blob).unwrap().set_len(offset + 5).unwrap();
    let r = expect_corrupt(&short, &blob, Some(offset));
    let text = r["problems"].to_string();
    assert!(text.contains(&format!("but the manifest recorded {len}")), "{text}");
    assert!(text.contains("runs past the end of the file"), "{text}");

    // A blob file the manifest does not list is a note, not damage.
    let extra = tmp.path().join("extra");
    copy_db(&clean, &extra);
    std::fs::copy(extra.join(&live), extra.join("000999.blob")).unwrap();
    let r = tool_json(&["verify", "--json", s(&extra)]);
    assert_eq!(r["status"], "ok", "{r}");
    let notes = r["notes"].to_string();
    assert!(notes.contains("000999.blob") && notes.contains("not in the manifest"), "{notes}");
}

/// A table whose references carry an expiry (`put_with_ttl` of a large value) is clean: its
/// expiring references count as expiring entries, and its format version is the blob one.
#[test]
fn verify_accepts_expiring_blob_references() {
    let dir = tempfile::tempdir().unwrap();
    let db =
        Db::open(dir.path(), options().memtable_bytes(4 << 20).blob_threshold(Some(100))).unwrap();
    for i in 0..10u32 {
        let ttl = std::time::Duration::from_secs(3600 * 24 * 365);
        db.put_with_ttl(key(i), vec![i as u8; 500], ttl).unwrap();
    }
    db.put_with_ttl("inline", "x", std::time::Duration::from_secs(3600)).unwrap();
    db.put(key(100), vec![7u8; 500]).unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    let r = tool_json(&["verify", "--json", s(dir.path())]);
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["checked"]["blob_refs"].as_u64(), Some(11), "{r}");
}

/// A WAL segment kept as the blob file of its large values (no `*.blob` written) passes
/// `verify`, which resolves the tables' references into it.
#[test]
fn verify_accepts_a_kept_wal_segment() {
    let dir = tempfile::tempdir().unwrap();
    let db =
        Db::open(dir.path(), options().memtable_bytes(4 << 20).blob_threshold(Some(100))).unwrap();
    for i in 0..20u32 {
        db.put(key(i), vec![i as u8; 16 << 10]).unwrap();
    }
    db.flush().unwrap();
    let stats = db.stats();
    assert!(stats.blob_files.iter().any(|b| b.wal_segment), "{:?}", stats.blob_files);
    db.close().unwrap();
    let blobs = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path());
    assert_eq!(blobs.filter(|p| p.extension().is_some_and(|x| x == "blob")).count(), 0);
    let r = tool_json(&["verify", "--json", s(dir.path())]);
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["checked"]["blob_refs"].as_u64(), Some(20), "{r}");
}

/// A WAL segment kept as a blob file is handled under its real name, `NNNNNN.log`: `db`
/// lists it so (text and JSON) and not as an obsolete segment, `inspect` and `dump` read it,
/// and `verify` of a database whose kept segment is gone names that file.
#[test]
fn the_tool_names_and_reads_a_kept_wal_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let db = Db::open(&dir, options().memtable_bytes(4 << 20).blob_threshold(Some(100))).unwrap();
    for i in 0..20u32 {
        db.put(key(i), vec![i as u8; 16 << 10]).unwrap();
    }
    db.flush().unwrap();
    let stats = db.stats();
    db.close().unwrap();
    let kept: Vec<_> = stats.blob_files.iter().filter(|b| b.wal_segment).collect();
    assert_eq!(kept.len(), 1, "{:?}", stats.blob_files);
    let segment = dir.join(format!("{:06}.log", kept[0].number));
    assert!(segment.exists());

    let r = tool_json(&["db", "--json", s(&dir)]);
    let files = r["blobs"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{r}");
    assert_eq!(files[0]["file"].as_str(), Some(s(&segment)), "{r}");
    assert_eq!(files[0]["wal_segment"].as_bool(), Some(true));
    let wal = r["wal_files"].as_array().unwrap();
    let listed = wal.iter().find(|w| w["number"].as_u64() == Some(kept[0].number)).unwrap();
    assert_eq!((listed["live"].as_bool(), listed["kept"].as_bool()), (Some(false), Some(true)));
    let (code, text, err) = tool(&["db", s(&dir)]);
    assert_eq!(code, 0, "{err}");
    let name = format!("{:06}.log", kept[0].number);
    assert!(text.contains(&format!("blob {name} ")), "{text}");
    assert!(text.contains("(kept WAL segment)"), "{text}");
    assert!(!text.contains(&format!("{:06}.blob", kept[0].number)), "{text}");
    assert!(
        text.contains(&format!("WAL {name} ")) && text.contains("(kept as a blob file)"),
        "{text}"
    );

    let r = tool_json(&["inspect", "--json", s(&segment)]);
    assert_eq!(r["puts"].as_u64(), Some(20), "{r}");
    assert_eq!(r["put_value_bytes"].as_u64(), Some(20 * (16 << 10)));
    assert_eq!(r["kept"]["values"].as_u64(), Some(20), "{r}");
    assert_eq!(r["kept"]["file_size"].as_u64(), Some(kept[0].file_size));
    let (code, text, err) = tool(&["inspect", s(&segment)]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("kept as a blob file: tables referenced 20"), "{text}");
    let dumped = tool_json(&["dump", "--json", s(&segment)]);
    let entries = dumped["entries"].as_array().unwrap();
    assert_eq!(
        entries.iter().filter(|e| e["key"].as_str().is_some_and(|k| k.starts_with("key"))).count(),
        20,
        "{dumped}"
    );

    std::fs::remove_file(&segment).unwrap();
    let r = expect_corrupt(&dir, &segment, None);
    let text = r["problems"].to_string();
    assert!(text.contains("missing") && text.contains(&name), "{text}");
    assert!(!text.contains(&format!("{:06}.blob", kept[0].number)), "{text}");
}

/// A table's range filter shows in `inspect` and `db` (keys, bits per key, bytes), not at
/// all for a table without one, and `verify` counts it and finds its block damaged.
#[test]
fn range_filters_show_in_inspect_and_db_and_verify_checks_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let db = Db::open(&dir, options().range_filter_bits_per_key(Some(16.0))).unwrap();
    for i in 0..2000 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let tables = db.tables();
    db.close().unwrap();
    assert!(tables.len() >= 2, "{}", tables.len());

    let mut ram = 0;
    for t in &tables {
        let r = tool_json(&["inspect", "--json", s(&t.path)]);
        let f = &r["range_filter"];
        assert_eq!(f["keys"], t.entries, "{r}");
        assert_eq!(f["requested_bits_per_key"], 16.0);
        let bits = f["bits_per_key"].as_f64().unwrap();
        assert!((14.0..=18.0).contains(&bits), "{bits}");
        assert_eq!(f["bytes"], f["size"].as_u64().unwrap() + 5);
        let shared = t.smallest_key.iter().zip(&t.largest_key).take_while(|(a, b)| a == b).count();
        assert_eq!(f["prefix"], String::from_utf8(t.smallest_key[..shared].to_vec()).unwrap());
        assert!(f["max_width"].as_u64().unwrap() >= 1 << 12);
        let text = tool(&["inspect", s(&t.path)]).1;
        assert!(text.contains(&format!("range filter     {} keys", t.entries)), "{text}");
        ram += f["memory_bytes"].as_u64().unwrap();
    }
    let r = tool_json(&["db", "--json", s(&dir)]);
    assert_eq!(r["range_filter_memory_bytes"], ram, "{r}");
    let listed: Vec<&Json> = r["levels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["tables"].as_array().unwrap())
        .collect();
    assert_eq!(listed.len(), tables.len());
    for t in listed {
        assert_eq!(t["range_filter"]["keys"], t["entries"], "{t}");
        assert_eq!(t["range_filter"]["requested_bits_per_key"], 16.0);
    }
    let text = tool(&["db", s(&dir)]).1;
    assert!(
        text.contains(", range filter ") && text.contains(&format!("range filters {ram} bytes"))
    );

    let r = tool_json(&["verify", "--json", s(&dir)]);
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["checked"]["range_filters"], tables.len());
    assert!(tool(&["verify", s(&dir)]).1.contains(&format!("{} range filter(s)", tables.len())));

    // A flipped byte inside the block: its checksum, at the block's offset.
    let name = tables[0].path.file_name().unwrap().to_owned();
    let h = open_table(&tables[0].path).properties().range_filter;
    let d = tmp.path().join("flipped");
    copy_db(&dir, &d);
    flip(&d.join(&name), h.offset + h.size / 2);
    expect_corrupt(&d, &d.join(&name), Some(h.offset));

    // Without range filters nothing of them shows.
    let plain = tmp.path().join("plain");
    let db = Db::open(&plain, options()).unwrap();
    db.put(key(1), value(1, 0)).unwrap();
    db.flush().unwrap();
    let t = db.tables().remove(0);
    db.close().unwrap();
    assert!(tool_json(&["inspect", "--json", s(&t.path)]).get("range_filter").is_none());
    let r = tool_json(&["db", "--json", s(&plain)]);
    assert!(r.get("range_filter_memory_bytes").is_none(), "{r}");
    assert!(!tool(&["db", s(&plain)]).1.contains("range filter"));
    assert!(tool_json(&["verify", "--json", s(&plain)])["checked"].get("range_filters").is_none());
}
