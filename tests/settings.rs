//! Keyspace settings that change what stored data means — default time to live, prefix
//! extractor, merge operator and compaction filter names — are recorded in the manifest and
//! checked at every open; `change_settings(true)` records new ones. Table options change
//! freely.

use std::sync::Arc;
use std::time::Duration;

use bloomkv::{
    Append, CompactionFilter, Compression, Db, Decision, Error, FilterPolicy, KeyspaceOptions,
    Options, PrefixExtractor, Readable, U64Add, WriteBatch, WriteOptions,
};
use bloomkv_tree::log::LogWriter;
use bloomkv_tree::version::edit::{KeyspaceDef, VersionEdit};
use bloomkv_tree::version::manifest::{read_manifest, set_current};

/// The setting, recorded and given values of a `SettingMismatch`, checking its keyspace and
/// that its message names them all.
fn mismatch<T: std::fmt::Debug>(r: bloomkv::Result<T>, keyspace: &str) -> (String, String, String) {
    match r {
        Err(e @ Error::SettingMismatch { .. }) => {
            let msg = e.to_string();
            let Error::SettingMismatch { keyspace: k, setting, recorded, given } = e else {
                unreachable!()
            };
            assert_eq!(k, keyspace);
            for part in [&k, setting, &recorded, &given, "change_settings"] {
                assert!(msg.contains(part), "{msg:?} lacks {part:?}");
            }
            (setting.to_string(), recorded, given)
        }
        other => panic!("expected SettingMismatch, got {other:?}"),
    }
}

fn strings(a: &str, b: &str, c: &str) -> (String, String, String) {
    (a.into(), b.into(), c.into())
}

/// A filter that removes nothing, named or not.
struct Keep(&'static str);
impl CompactionFilter for Keep {
    fn name(&self) -> &str {
        self.0
    }
    fn filter(&self, _level: usize, _key: &[u8], _value: &[u8]) -> Decision {
        Decision::Keep
    }
}

/// An unnamed filter (the trait's default name).
struct Unnamed;
impl CompactionFilter for Unnamed {
    fn filter(&self, _level: usize, _key: &[u8], _value: &[u8]) -> Decision {
        Decision::Keep
    }
}

/// Opens `dir` again, with default options.
fn reopen(db: Db, dir: &std::path::Path) -> Db {
    db.close().unwrap();
    Db::open(dir, Options::new()).unwrap()
}

#[test]
fn a_default_ttl_must_be_restated_or_changed_on_purpose() {
    let dir = tempfile::tempdir().unwrap();
    let minute = KeyspaceOptions::new().default_ttl(Some(Duration::from_secs(60)));
    let hour = KeyspaceOptions::new().default_ttl(Some(Duration::from_secs(3600)));
    let db = Db::open(dir.path(), Options::new()).unwrap();
    db.keyspace("sessions", minute.clone()).unwrap();
    // Within one opening too.
    let got = mismatch(db.keyspace("sessions", KeyspaceOptions::new()), "sessions");
    assert_eq!(got, strings("default_ttl", "60000 ms", "none"));
    let db = reopen(db, dir.path());
    let got = mismatch(db.keyspace("sessions", KeyspaceOptions::new()), "sessions");
    assert_eq!(got, strings("default_ttl", "60000 ms", "none"));
    let got = mismatch(db.keyspace("sessions", hour.clone()), "sessions");
    assert_eq!(got, strings("default_ttl", "60000 ms", "3600000 ms"));
    assert_eq!(db.keyspace_options("sessions").unwrap(), minute, "nothing was recorded");
    db.keyspace("sessions", minute.clone()).unwrap();
    // On purpose: recorded, and from then on the one to give.
    db.keyspace("sessions", hour.clone().change_settings(true)).unwrap();
    let db = reopen(db, dir.path());
    assert_eq!(db.keyspace_options("sessions").unwrap(), hour);
    db.keyspace("sessions", hour).unwrap();
    let got = mismatch(db.keyspace("sessions", minute), "sessions");
    assert_eq!(got, strings("default_ttl", "3600000 ms", "60000 ms"));
    // Dropped on purpose, none is recorded.
    db.keyspace("sessions", KeyspaceOptions::new().change_settings(true)).unwrap();
    let db = reopen(db, dir.path());
    db.keyspace("sessions", KeyspaceOptions::new()).unwrap();
}

#[test]
fn a_merge_operator_must_be_given_again_by_the_same_name() {
    let dir = tempfile::tempdir().unwrap();
    let add = || KeyspaceOptions::new().merge_operator(Arc::new(U64Add));
    let append = || KeyspaceOptions::new().merge_operator(Arc::new(Append::new(",")));
    let db = Db::open(dir.path(), Options::new()).unwrap();
    db.keyspace("hits", add()).unwrap().merge("/", U64Add::operand(2)).unwrap();
    let db = reopen(db, dir.path());
    let got = mismatch(db.keyspace("hits", KeyspaceOptions::new()), "hits");
    assert_eq!(got, strings("merge_operator", "\"u64add\"", "none"));
    let got = mismatch(db.keyspace("hits", append()), "hits");
    assert_eq!(got, strings("merge_operator", "\"u64add\"", "\"append\""));
    // The recorded options, restated without the operator, are refused the same way.
    let recorded = db.keyspace_options("hits").unwrap();
    let got = mismatch(db.keyspace("hits", recorded.clone()), "hits");
    assert_eq!(got, strings("merge_operator", "\"u64add\"", "none"));
    let hits = db.keyspace("hits", recorded.merge_operator(Arc::new(U64Add))).unwrap();
    hits.merge("/", U64Add::operand(3)).unwrap();
    assert_eq!(U64Add::decode(&hits.get("/").unwrap().unwrap()), Some(5));
    hits.put("/", "v").unwrap();
    drop(hits);
    // Replaced on purpose.
    let hits = db.keyspace("hits", append().change_settings(true)).unwrap();
    hits.merge("/", "x").unwrap();
    drop(hits);
    let db = reopen(db, dir.path());
    let got = mismatch(db.keyspace("hits", add()), "hits");
    assert_eq!(got, strings("merge_operator", "\"append\"", "\"u64add\""));
    let hits = db.keyspace("hits", append()).unwrap();
    assert_eq!(hits.get("/").unwrap().as_deref(), Some(&b"v,x"[..]));
}

#[test]
fn a_compaction_filter_must_be_given_again_by_the_same_name() {
    let dir = tempfile::tempdir().unwrap();
    let purge = || KeyspaceOptions::new().compaction_filter(Arc::new(Keep("purge")));
    let unnamed = || KeyspaceOptions::new().compaction_filter(Arc::new(Unnamed));
    let db = Db::open(dir.path(), Options::new()).unwrap();
    db.keyspace("logs", purge()).unwrap();
    db.keyspace("raw", unnamed()).unwrap();
    let db = reopen(db, dir.path());
    let got = mismatch(db.keyspace("logs", KeyspaceOptions::new()), "logs");
    assert_eq!(got, strings("compaction_filter", "\"purge\"", "none"));
    let got = mismatch(db.keyspace("logs", unnamed()), "logs");
    assert_eq!(got, strings("compaction_filter", "\"purge\"", "an unnamed filter"));
    db.keyspace("logs", purge()).unwrap();
    // An unnamed filter: any other unnamed one will do, none will not.
    let got = mismatch(db.keyspace("raw", KeyspaceOptions::new()), "raw");
    assert_eq!(got, strings("compaction_filter", "an unnamed filter", "none"));
    db.keyspace("raw", unnamed()).unwrap();
    db.keyspace("raw", KeyspaceOptions::new().change_settings(true)).unwrap();
    let db = reopen(db, dir.path());
    db.keyspace("raw", KeyspaceOptions::new()).unwrap();
    let got = mismatch(db.keyspace("raw", purge()), "raw");
    assert_eq!(got, strings("compaction_filter", "none", "\"purge\""));
    db.keyspace("raw", purge().change_settings(true)).unwrap();
    let db = reopen(db, dir.path());
    db.keyspace("raw", purge()).unwrap();
}

#[test]
fn a_prefix_extractor_must_be_restated_and_table_options_change_freely() {
    let dir = tempfile::tempdir().unwrap();
    let slash = KeyspaceOptions::new().prefix_extractor(Some(PrefixExtractor::UpToDelimiter(b'/')));
    let db = Db::open(dir.path(), Options::new()).unwrap();
    db.keyspace("orders", slash.clone()).unwrap();
    let db = reopen(db, dir.path());
    let got = mismatch(db.keyspace("orders", KeyspaceOptions::new()), "orders");
    assert_eq!(got, strings("prefix_extractor", "delimiter:0x2f", "none"));
    let fixed = slash.clone().prefix_extractor(Some(PrefixExtractor::Fixed(4)));
    let got = mismatch(db.keyspace("orders", fixed.clone()), "orders");
    assert_eq!(got, strings("prefix_extractor", "delimiter:0x2f", "fixed:4"));
    // What only shapes new tables changes without asking, and is recorded.
    let tables = slash
        .clone()
        .filter_policy(FilterPolicy::None)
        .compression(Compression::Zstd { level: 1 })
        .block_bytes(16 << 10)
        .target_table_bytes(1 << 20)
        .whole_key_filtering(false);
    db.keyspace("orders", tables.clone()).unwrap();
    let db = reopen(db, dir.path());
    assert_eq!(db.keyspace_options("orders").unwrap(), tables);
    db.keyspace("orders", fixed.clone().change_settings(true)).unwrap();
    let db = reopen(db, dir.path());
    db.keyspace("orders", fixed).unwrap();
}

#[test]
fn the_default_keyspace_settings_come_from_options_and_are_checked_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let full = || {
        Options::new()
            .prefix_extractor(Some(PrefixExtractor::Fixed(2)))
            .merge_operator(Arc::new(U64Add))
            .compaction_filter(Arc::new(Keep("purge")))
    };
    let db = Db::open(dir.path(), full()).unwrap();
    db.merge("n", U64Add::operand(1)).unwrap();
    db.close().unwrap();
    let open = |opts: Options| Db::open(dir.path(), opts);
    let got = mismatch(open(Options::new()), "default");
    assert_eq!(got, strings("merge_operator", "\"u64add\"", "none"));
    let got = mismatch(open(full().prefix_extractor(None)), "default");
    assert_eq!(got, strings("prefix_extractor", "fixed:2", "none"));
    let got = mismatch(open(full().merge_operator(Arc::new(Append::new("")))), "default");
    assert_eq!(got, strings("merge_operator", "\"u64add\"", "\"append\""));
    let got = mismatch(open(full().compaction_filter(Arc::new(Unnamed))), "default");
    assert_eq!(got, strings("compaction_filter", "\"purge\"", "an unnamed filter"));
    // Table options of the default keyspace change freely.
    let db = open(full().compression(Compression::Zstd { level: 3 })).unwrap();
    assert_eq!(U64Add::decode(&db.get("n").unwrap().unwrap()), Some(1));
    db.close().unwrap();
    // On purpose: the new settings are recorded.
    let plain = Options::new().merge_operator(Arc::new(U64Add));
    open(plain.clone().change_settings(true)).unwrap().close().unwrap();
    let got = mismatch(open(full()), "default");
    assert_eq!(got, strings("prefix_extractor", "none", "fixed:2"));
    let db = open(plain).unwrap();
    assert_eq!(U64Add::decode(&db.get("n").unwrap().unwrap()), Some(1));
}

/// A read-only open records nothing: it refuses only a merge operator other than the
/// recorded one, which would misread operands.
#[test]
fn a_read_only_open_refuses_only_another_merge_operator() {
    let dir = tempfile::tempdir().unwrap();
    let ks = KeyspaceOptions::new()
        .default_ttl(Some(Duration::from_secs(60)))
        .prefix_extractor(Some(PrefixExtractor::Fixed(1)))
        .compaction_filter(Arc::new(Keep("purge")))
        .merge_operator(Arc::new(U64Add));
    let opts = || Options::new().merge_operator(Arc::new(U64Add));
    let db = Db::open(dir.path(), opts()).unwrap();
    db.keyspace("k", ks.clone()).unwrap().merge("a", U64Add::operand(4)).unwrap();
    db.merge("a", U64Add::operand(7)).unwrap();
    db.close().unwrap();

    let db = Db::open_read_only(dir.path(), Options::new()).unwrap();
    assert!(matches!(db.get("a"), Err(Error::MergeOperatorMissing { .. })));
    let k = db.keyspace("k", KeyspaceOptions::new()).unwrap();
    assert!(matches!(k.get("a"), Err(Error::MergeOperatorMissing { .. })));
    let other = KeyspaceOptions::new().merge_operator(Arc::new(Append::new("")));
    let got = mismatch(db.keyspace("k", other), "k");
    assert_eq!(got, strings("merge_operator", "\"u64add\"", "\"append\""));
    drop((k, db));
    let append = Options::new().merge_operator(Arc::new(Append::new("")));
    let got = mismatch(Db::open_read_only(dir.path(), append), "default");
    assert_eq!(got, strings("merge_operator", "\"u64add\"", "\"append\""));
    let db = Db::open_read_only(dir.path(), opts()).unwrap();
    assert_eq!(U64Add::decode(&db.get("a").unwrap().unwrap()), Some(7));
    drop(db);
    // Nothing the read-only opens gave was recorded.
    let db = Db::open(dir.path(), opts()).unwrap();
    db.keyspace("k", ks).unwrap();
}

/// A manifest written before the names and the default keyspace's settings were recorded
/// opens with whatever is given, which is then recorded.
#[test]
fn a_manifest_without_recorded_names_opens_and_learns_them() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options::new().merge_operator(Arc::new(U64Add));
    let hits = || KeyspaceOptions::new().merge_operator(Arc::new(U64Add));
    let db = Db::open(dir.path(), opts()).unwrap();
    db.keyspace("hits", hits()).unwrap().merge("a", U64Add::operand(2)).unwrap();
    db.merge("a", U64Add::operand(3)).unwrap();
    db.flush().unwrap();
    db.close().unwrap();

    // The same state as an older build wrote it: no names, no default keyspace settings.
    let fs = bloomkv::fs::StdFs;
    let m = read_manifest(&fs, dir.path()).unwrap();
    let mut edit = VersionEdit {
        log_number: Some(m.log_number),
        next_file_number: Some(m.next_file_number + 20),
        last_seq: Some(m.last_seq),
        next_keyspace_id: Some(m.next_keyspace_id),
        ..VersionEdit::default()
    };
    for k in &m.keyspaces {
        assert!(k.def.callbacks.is_some(), "this build records them");
        if k.def.id != 0 {
            edit.keyspaces.push(KeyspaceDef { callbacks: None, ..k.def.clone() });
        }
        for (level, tables) in k.levels.iter().enumerate() {
            edit.added.extend(tables.iter().map(|t| (level, t.clone())));
        }
    }
    let number = m.next_file_number + 10;
    let path = bloomkv_tree::filename::manifest_path(dir.path(), number);
    let mut w = LogWriter::new(bloomkv::fs::FileSystem::create(&fs, &path).unwrap());
    w.add_record(&edit.encode()).unwrap();
    w.sync().unwrap();
    set_current(&fs, dir.path(), number).unwrap();
    let old = read_manifest(&fs, dir.path()).unwrap();
    assert!(old.keyspaces.iter().all(|k| k.def.callbacks.is_none()));

    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(U64Add::decode(&db.get("a").unwrap().unwrap()), Some(3));
    let ks = db.keyspace("hits", hits()).unwrap();
    assert_eq!(U64Add::decode(&ks.get("a").unwrap().unwrap()), Some(2));
    drop(ks);
    let db = reopen_with(db, dir.path(), opts());
    // Learnt: now checked.
    let got = mismatch(db.keyspace("hits", KeyspaceOptions::new()), "hits");
    assert_eq!(got, strings("merge_operator", "\"u64add\"", "none"));
    db.close().unwrap();
    let got = mismatch(Db::open(dir.path(), Options::new()), "default");
    assert_eq!(got, strings("merge_operator", "\"u64add\"", "none"));
}

fn reopen_with(db: Db, dir: &std::path::Path, opts: Options) -> Db {
    db.close().unwrap();
    Db::open(dir, opts).unwrap()
}

/// A batch decoded from a record names keyspaces by id only; one dropped since the database
/// was opened is reported by its name.
#[test]
fn a_decoded_batch_names_a_dropped_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::new()).unwrap();
    let gone = db.keyspace("gone", KeyspaceOptions::new()).unwrap();
    let id = 1u8; // the first keyspace created
    gone.put("k", "v").unwrap();
    db.drop_keyspace("gone").unwrap();
    // seq 0, one op: put (1 | 0x80 with a keyspace id) "k" -> "v" in keyspace 1.
    let mut record = 0u64.to_le_bytes().to_vec();
    record.extend_from_slice(&1u32.to_le_bytes());
    record.extend_from_slice(&[0x81, id, 1, b'k', 1, b'v']);
    let batch = WriteBatch::decode(record.clone()).unwrap();
    match db.write(&batch, &WriteOptions::default()) {
        Err(Error::KeyspaceDropped { name }) => assert_eq!(name, "gone"),
        other => panic!("expected KeyspaceDropped, got {other:?}"),
    }
    // One that never existed has only its id.
    record[13] = 9;
    let batch = WriteBatch::decode(record).unwrap();
    match db.write(&batch, &WriteOptions::default()) {
        Err(Error::KeyspaceDropped { name }) => assert_eq!(name, "with id 9"),
        other => panic!("expected KeyspaceDropped, got {other:?}"),
    }
}

/// `Stats::keyspace` takes any `AsRef<str>`, as the other keyspace-name APIs do.
#[test]
fn stats_of_a_keyspace_by_any_name_type() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::new()).unwrap();
    db.keyspace(String::from("t-1"), KeyspaceOptions::new()).unwrap();
    let stats = db.stats();
    let name = format!("t-{}", 1);
    assert_eq!(stats.keyspace(&name).unwrap().name, "t-1");
    assert_eq!(stats.keyspace(name).unwrap().name, "t-1");
    assert!(stats.keyspace("default").is_some());
}
