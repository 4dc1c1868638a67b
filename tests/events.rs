//! Event listeners, the `log` records of background work, and per-keyspace stats: what a
//! service sees of flushes, compactions, write stalls, background errors and resumes.
//!
//! Nothing here synchronises by sleeping: a test that waits for an event waits on the
//! listener's condition variable, with a deadline that only turns a hang into a failure.

use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use bloomkv::events::{
    BackgroundErrorInfo, CompactionInfo, CompactionReason, EventListener, FlushInfo, ResumeInfo,
    StallInfo, StallReason,
};
use bloomkv::fs::{fault::unique_dir, Fault, FaultFs, OpKind};
use bloomkv::{Append, CompactionFilter, Db, Decision, Error, KeyspaceOptions, Options, Readable};

mod common;

use common::files::is_table;
use common::options::OptionsExt;

/// How long a test waits for something the engine is sure to do before calling it a hang.
const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
enum Event {
    FlushBegin(FlushInfo),
    FlushEnd(FlushInfo),
    CompactionBegin(CompactionInfo),
    CompactionEnd(CompactionInfo),
    StallBegin(StallInfo),
    StallEnd(StallInfo),
    BackgroundError(BackgroundErrorInfo),
    Resumed(ResumeInfo),
}

/// Records every event; optionally holds each flush at its beginning until `open_gate`.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
    changed: Condvar,
    gated: bool,
    gate_open: Mutex<bool>,
    gate_cv: Condvar,
}

impl Recorder {
    fn gated() -> Recorder {
        Recorder { gated: true, ..Recorder::default() }
    }

    fn push(&self, e: Event) {
        self.events.lock().unwrap().push(e);
        self.changed.notify_all();
    }

    fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until the events recorded so far satisfy `done`.
    fn wait_for(&self, what: &str, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        let until = Instant::now() + DEADLINE;
        let mut events = self.events.lock().unwrap();
        while !done(&events) {
            let left = until.checked_duration_since(Instant::now());
            let left = left.unwrap_or_else(|| panic!("no {what} within {DEADLINE:?}: {events:?}"));
            events = self.changed.wait_timeout(events, left).unwrap().0;
        }
        events.clone()
    }

    fn open_gate(&self) {
        *self.gate_open.lock().unwrap() = true;
        self.gate_cv.notify_all();
    }
}

impl EventListener for Recorder {
    fn on_flush_begin(&self, info: &FlushInfo) {
        self.push(Event::FlushBegin(info.clone()));
        if self.gated {
            let open = self.gate_open.lock().unwrap();
            // The deadline only keeps a failing test from hanging: the test opens the gate.
            let _ = self.gate_cv.wait_timeout_while(open, DEADLINE, |open| !*open).unwrap();
        }
    }
    fn on_flush_end(&self, info: &FlushInfo) {
        self.push(Event::FlushEnd(info.clone()));
    }
    fn on_compaction_begin(&self, info: &CompactionInfo) {
        self.push(Event::CompactionBegin(info.clone()));
    }
    fn on_compaction_end(&self, info: &CompactionInfo) {
        self.push(Event::CompactionEnd(info.clone()));
    }
    fn on_write_stall_begin(&self, info: &StallInfo) {
        self.push(Event::StallBegin(info.clone()));
    }
    fn on_write_stall_end(&self, info: &StallInfo) {
        self.push(Event::StallEnd(info.clone()));
    }
    fn on_background_error(&self, info: &BackgroundErrorInfo) {
        self.push(Event::BackgroundError(info.clone()));
    }
    fn on_resumed(&self, info: &ResumeInfo) {
        self.push(Event::Resumed(info.clone()));
    }
}

/// No background compaction, so the only compactions are `Db::compact`'s.
fn options(fs: &FaultFs, listener: Arc<dyn EventListener>) -> Options {
    Options::default()
        .memtable_bytes(64 << 10)
        .l0_triggers(64)
        .fault_fs(fs)
        .event_listener(listener)
}

fn flush_ends(events: &[Event]) -> Vec<&FlushInfo> {
    events.iter().filter_map(|e| if let Event::FlushEnd(i) = e { Some(i) } else { None }).collect()
}

#[test]
fn a_flush_is_reported_with_its_keyspace_and_tables() {
    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::default());
    let db = Db::open(unique_dir("flush"), options(&fs, rec.clone())).unwrap();
    let users = db.keyspace("users", KeyspaceOptions::default()).unwrap();
    for i in 0..100u32 {
        users.put(i.to_be_bytes(), [7u8; 50]).unwrap();
    }
    db.flush().unwrap();
    // The flush is installed before its end is reported, so `flush` may return first.
    let events = rec.wait_for("flush end", |e| !flush_ends(e).is_empty());
    let begins: Vec<_> = events
        .iter()
        .filter_map(|e| if let Event::FlushBegin(i) = e { Some(i) } else { None })
        .collect();
    // The default keyspace's memtable was empty: it has no table to write, and no event.
    assert_eq!(begins.len(), 1, "{events:?}");
    assert_eq!(begins[0].keyspace, "users");
    assert_eq!(begins[0].memtable_entries, 100);
    assert!(begins[0].memtable_bytes > 100 * 50);
    assert_eq!(begins[0].tables, 0);
    let end = flush_ends(&events)[0].clone();
    assert_eq!(end.keyspace, "users");
    assert_eq!(end.tables, 1);
    let stats = db.stats();
    assert_eq!(end.table_bytes, stats.flush_bytes_written);
    assert_eq!(stats.keyspace("users").unwrap().tables_per_level[0], 1);
    db.close().unwrap();
}

#[test]
fn a_compaction_is_reported_with_its_levels_and_tables() {
    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::default());
    let db = Db::open(unique_dir("compact"), options(&fs, rec.clone())).unwrap();
    for round in 0..3u32 {
        for i in 0..100u32 {
            db.put(i.to_be_bytes(), round.to_be_bytes()).unwrap();
        }
        db.flush().unwrap();
    }
    let l0_bytes = db.stats().bytes_per_level[0];
    db.compact().unwrap();
    // A manual compaction runs on the caller's thread: its events precede its return.
    let events = rec.events();
    let compactions: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::CompactionBegin(_) | Event::CompactionEnd(_)))
        .collect();
    assert_eq!(compactions.len(), 2, "{events:?}");
    let (Event::CompactionBegin(begin), Event::CompactionEnd(end)) =
        (compactions[0], compactions[1])
    else {
        panic!("not a begin and an end: {compactions:?}");
    };
    for info in [begin, end] {
        assert_eq!(info.keyspace, "default");
        assert_eq!(info.reason, CompactionReason::Manual);
        assert_eq!((info.input_level, info.output_level), (0, 1));
        assert_eq!((info.input_level_tables, info.output_level_tables), (3, 0));
        assert_eq!(info.input_bytes, l0_bytes);
    }
    assert_eq!((begin.output_tables, begin.output_bytes), (0, 0));
    let stats = db.stats();
    assert_eq!(end.output_tables, stats.tables_per_level[1]);
    assert_eq!(end.output_bytes, stats.compaction_bytes_written);
    assert!(end.parts >= 1);
    db.close().unwrap();
}

/// A compaction filter that removes one key and records the levels it was asked about it at.
struct RemoveKey(Vec<u8>, Mutex<Vec<usize>>);

impl CompactionFilter for RemoveKey {
    fn filter(&self, level: usize, key: &[u8], _value: &[u8]) -> Decision {
        if key != self.0 {
            return Decision::Keep;
        }
        self.1.lock().unwrap().push(level);
        Decision::Remove
    }
}

/// Options for the L0-merge tests: merges take the newest L0 tables up to a table's target
/// (64 KiB), and L1's target is far above what the tests write.
fn l0_merge_options(fs: &FaultFs, rec: Arc<Recorder>) -> Options {
    Options::default()
        .memtable_bytes(256 << 10)
        .target_table_bytes(64 << 10)
        .level_base_bytes(4 << 20)
        .fault_fs(fs)
        .event_listener(rec)
}

/// 100 bytes that differ for every key and round and do not compress.
fn value_of(k: u32, round: u32) -> Vec<u8> {
    let mut x = u64::from(k) << 32 | u64::from(round);
    (0..100)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

/// Keys 1000..5000 at round 0 (about 440 KiB), compacted into L1; recorded in `model`.
fn fill_l1(db: &Db, model: &mut std::collections::BTreeMap<u32, Vec<u8>>) {
    for k in 1000..5000u32 {
        db.put(k.to_be_bytes(), value_of(k, 0)).unwrap();
        model.insert(k, value_of(k, 0));
    }
    db.compact().unwrap();
}

/// Waits for a compaction other than `Db::compact`'s to end, and returns the last one that has.
fn last_background_compaction(rec: &Recorder) -> CompactionInfo {
    let events = rec.wait_for("a background compaction", |e| {
        e.iter()
            .any(|e| matches!(e, Event::CompactionEnd(i) if i.reason != CompactionReason::Manual))
    });
    match events.iter().rev().find(|e| matches!(e, Event::CompactionEnd(_))) {
        Some(Event::CompactionEnd(end)) => end.clone(),
        _ => unreachable!(),
    }
}

/// While L1 holds many times L0's bytes, the newest L0 tables are merged with each other, not
/// into L1. What lies in the older L0 table the merge left out stays beneath it (keys L1 does
/// not hold, so only that table is): a tombstone still hides its version, a value the
/// compaction filter removes (asked at level 0) leaves a tombstone over it, and operands stay
/// operands over its value. Reads see what was written, before and after a reopen.
#[test]
fn the_newest_l0_tables_are_merged_together_while_l1_is_much_larger() {
    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::default());
    let dir = unique_dir("l0-merge");
    let removes = Arc::new(RemoveKey(11u32.to_be_bytes().to_vec(), Mutex::new(Vec::new())));
    let opts = l0_merge_options(&fs, rec.clone())
        .merge_operator(Arc::new(Append::new("+")))
        .compaction_filter(removes.clone());
    let mut model = std::collections::BTreeMap::new();
    let db = Db::open(&dir, opts.clone().l0_triggers(64)).unwrap();
    fill_l1(&db, &mut model);
    // An older L0 table, larger than a merge takes: keys 0..800, which L1 does not hold.
    for k in 0..800u32 {
        db.put(k.to_be_bytes(), value_of(k, 1)).unwrap();
        model.insert(k, value_of(k, 1));
    }
    db.flush().unwrap();
    let l1_tables = db.stats().tables_per_level[1];
    assert_eq!(db.stats().tables_per_level[0], 1);
    assert!(l1_tables > 1);
    db.close().unwrap();
    drop(db);

    // L0 compacted in the background from here on, at the default triggers.
    let db = Db::open(&dir, opts.clone()).unwrap();
    let flushes_before = db.stats().flushes;
    // Three small flushes across the key range; the first deletes key 7.
    for round in 2..5u32 {
        if round == 2 {
            db.delete(7u32.to_be_bytes()).unwrap();
            model.remove(&7);
        }
        db.merge(9u32.to_be_bytes(), [b'a' + round as u8]).unwrap();
        model.get_mut(&9).unwrap().extend([b'+', b'a' + round as u8]);
        if round == 3 {
            db.put(11u32.to_be_bytes(), value_of(11, round)).unwrap();
            model.remove(&11);
        }
        for k in (round..5000).step_by(100) {
            db.put(k.to_be_bytes(), value_of(k, round)).unwrap();
            model.insert(k, value_of(k, round));
        }
        db.flush().unwrap();
    }
    let end = last_background_compaction(&rec);
    assert_eq!(end.reason, CompactionReason::L0Merge, "{end:?}");
    assert_eq!((end.input_level, end.output_level), (0, 0));
    assert_eq!((end.input_level_tables, end.output_level_tables, end.output_tables), (3, 0, 1));
    let stats = db.stats();
    assert_eq!(stats.tables_per_level[..2], [2, l1_tables]);
    let l0 = &stats.compaction_per_level[0];
    assert_eq!(l0.runs, stats.flushes + 1);
    assert_eq!((l0.bytes_read_from_above, l0.bytes_read_from_level), (0, end.input_bytes));
    assert_eq!(l0.bytes_written, stats.flush_bytes_written + end.output_bytes);
    assert_eq!(stats.flushes - flushes_before, 3);
    assert_eq!(*removes.1.lock().unwrap(), [0], "the filter asked about key 11 at these levels");

    let check = |db: &Db| {
        assert_eq!(db.get(7u32.to_be_bytes()).unwrap(), None);
        assert_eq!(db.get(11u32.to_be_bytes()).unwrap(), None);
        let all: Vec<(u32, Vec<u8>)> = db
            .range(..)
            .map(|e| {
                let (k, v) = e.unwrap();
                (u32::from_be_bytes(k[..].try_into().unwrap()), v.to_vec())
            })
            .collect();
        assert!(all.iter().map(|(k, v)| (k, v)).eq(model.iter()), "scan differs");
        for (k, v) in &model {
            assert_eq!(db.get(k.to_be_bytes()).unwrap().as_deref(), Some(&v[..]), "key {k}");
        }
    };
    check(&db);
    db.close().unwrap();
    drop(db);
    let db = Db::open(&dir, opts.l0_triggers(64)).unwrap();
    assert_eq!(db.stats().tables_per_level[..2], [2, l1_tables]);
    check(&db);
    db.close().unwrap();
}

/// An ingest's tables on L0 share one sequence number. A merge of the newest L0 tables takes
/// all of them or none: one that took the ingest's last, small table and left its full one
/// would overlap it without holding only newer entries, and the manifest would refuse to open.
#[test]
fn an_l0_merge_never_splits_an_ingest() {
    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::default());
    let dir = unique_dir("l0-merge-ingest");
    let opts = l0_merge_options(&fs, rec.clone());
    let db = Db::open(&dir, opts.clone().l0_triggers(64)).unwrap();
    fill_l1(&db, &mut Default::default());
    // A flushed table across the whole range, so the ingest below lands on L0, above it.
    for k in (0..5000u32).step_by(100) {
        db.put(k.to_be_bytes(), value_of(k, 1)).unwrap();
    }
    db.flush().unwrap();
    // Keys 0..600 in two tables: a full one and a small last one.
    db.ingest((0..600u32).map(|k| (k.to_be_bytes(), value_of(k, 2)))).unwrap();
    assert_eq!(db.stats().tables_per_level[0], 3);
    db.close().unwrap();
    drop(db);

    // One small flush makes four L0 tables, newest first: the flush, the ingest's small table
    // (the two together within a table's target), its full one, the older flush. L1 holds
    // more than twice L0, but a merge of the first two would split the ingest: L0 goes into L1.
    let db = Db::open(&dir, opts.clone()).unwrap();
    for k in (1..5000u32).step_by(100) {
        db.put(k.to_be_bytes(), value_of(k, 3)).unwrap();
    }
    db.flush().unwrap();
    let end = last_background_compaction(&rec);
    assert_eq!(end.reason, CompactionReason::L0Tables, "{end:?}");
    assert_eq!((end.input_level_tables, end.output_level), (4, 1));
    db.close().unwrap();
    drop(db);
    let db = Db::open(&dir, opts.l0_triggers(64)).unwrap();
    for (k, round) in [(1u32, 3), (2, 2), (100, 2), (700, 1), (1000, 1), (1001, 3), (1002, 0)] {
        assert_eq!(db.get(k.to_be_bytes()).unwrap(), Some(value_of(k, round).into()), "key {k}");
    }
    db.close().unwrap();
}

/// Tables that overlap neither each other nor anything on the level below are moved down by
/// a manifest edit, not rewritten; the moved files are still the database's after a reopen.
#[test]
fn tables_nothing_overlaps_are_moved_down_not_rewritten() {
    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::default());
    let dir = unique_dir("move");
    let opts = options(&fs, rec.clone()).l0_compaction_trigger(2);
    let db = Db::open(&dir, opts.clone()).unwrap();
    // Two flushes of disjoint key ranges: the second makes the L0 trigger pick both, and L1
    // is empty.
    for round in 0..2u32 {
        for i in 0..100u32 {
            db.put((round * 100 + i).to_be_bytes(), [7u8; 50]).unwrap();
        }
        db.flush().unwrap();
    }
    let events =
        rec.wait_for("a compaction", |e| e.iter().any(|e| matches!(e, Event::CompactionEnd(_))));
    let Some(Event::CompactionEnd(end)) =
        events.iter().find(|e| matches!(e, Event::CompactionEnd(_)))
    else {
        unreachable!()
    };
    assert!(end.moved, "{end:?}");
    assert_eq!(end.reason, CompactionReason::L0Tables);
    assert_eq!((end.input_level_tables, end.output_level_tables), (2, 0));
    assert_eq!((end.output_tables, end.output_bytes), (2, 0));
    let stats = db.stats();
    assert_eq!(stats.tables_per_level[..2], [0, 2]);
    assert_eq!(stats.compaction_bytes_written, 0);
    assert_eq!(stats.compaction_per_level[1].tables_moved, 2);
    assert_eq!(stats.compaction_per_level[1].bytes_moved, stats.flush_bytes_written);
    db.close().unwrap();
    // Dropped, so that whatever it still holds is let go of: a moved table taken for an
    // obsolete one would have its file deleted here.
    drop(db);

    let db = Db::open(&dir, opts).unwrap();
    assert_eq!(db.stats().tables_per_level[..2], [0, 2]);
    for k in 0..200u32 {
        assert_eq!(db.get(k.to_be_bytes()).unwrap().as_deref(), Some(&[7u8; 50][..]), "{k}");
    }
    db.close().unwrap();
}

/// Under a Ribbon policy a table leaving the levels of Bloom filters, or under a budget any
/// table, is rewritten where it would otherwise be moved: a moved table keeps its filter,
/// which was made for another level.
#[test]
fn tables_whose_filter_would_change_are_rewritten_not_moved() {
    for policy in [
        bloomkv::FilterPolicy::Ribbon { bits_per_key: 10.0, bloom_before_level: 1 },
        bloomkv::FilterPolicy::BudgetedRibbon { bits_per_key: 10.0, bloom_before_level: 1 },
        bloomkv::FilterPolicy::Budgeted { bits_per_key: 10.0 },
    ] {
        let fs = FaultFs::new();
        let rec = Arc::new(Recorder::default());
        let opts = options(&fs, rec.clone()).l0_compaction_trigger(2).filter_policy(policy);
        let db = Db::open(unique_dir("no-move"), opts).unwrap();
        // As in the test above: two disjoint flushes, an empty L1, a move if it were allowed.
        for round in 0..2u32 {
            for i in 0..100u32 {
                db.put((round * 100 + i).to_be_bytes(), [7u8; 50]).unwrap();
            }
            db.flush().unwrap();
        }
        let ended = |e: &[Event]| e.iter().any(|e| matches!(e, Event::CompactionEnd(_)));
        let events = rec.wait_for("a compaction", ended);
        let Some(Event::CompactionEnd(end)) =
            events.iter().find(|e| matches!(e, Event::CompactionEnd(_)))
        else {
            unreachable!()
        };
        assert!(!end.moved, "{policy:?}: {end:?}");
        assert!(end.output_tables >= 1 && end.output_bytes > 0, "{policy:?}: {end:?}");
        let l1: Vec<_> = db.tables().into_iter().filter(|t| t.level == 1).collect();
        assert!(!l1.is_empty());
        let want = match policy {
            bloomkv::FilterPolicy::Budgeted { .. } => bloomkv::filter::FilterKind::Blocked,
            _ => bloomkv::filter::FilterKind::Ribbon,
        };
        assert!(l1.iter().all(|t| t.filter_kind == want), "{policy:?}");
        db.close().unwrap();
    }
}

/// Holds the first flush until a writer has stalled behind it: the memtable fills while the
/// only immutable one allowed cannot be flushed, so the stall cannot fail to happen.
#[test]
fn writers_outrunning_a_held_flush_stall_and_are_released() {
    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::gated());
    let opts = options(&fs, rec.clone()).memtable_bytes(1 << 10).max_immutable_memtables(1);
    let db = Db::open(unique_dir("stall"), opts).unwrap();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for i in 0..200u32 {
                db.put(i.to_be_bytes(), [1u8; 100]).unwrap();
            }
        });
        let stalled = |e: &[Event]| e.iter().any(|e| matches!(e, Event::StallBegin(_)));
        let events = rec.wait_for("write stall", stalled);
        // The flush has begun and is held: none can have ended.
        assert!(flush_ends(&events).is_empty(), "{events:?}");
        rec.open_gate();
        writer.join().unwrap();
    });
    let events = rec.events();
    let stalls: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::StallBegin(i) => Some((true, i)),
            Event::StallEnd(i) => Some((false, i)),
            _ => None,
        })
        .collect();
    let (began, first) = stalls[0];
    assert!(began);
    assert_eq!(first.reason, StallReason::ImmutableMemtables);
    assert_eq!(first.immutable_memtables, 1);
    assert_eq!(first.keyspace, None);
    // The stall ends within the write that met it, before the writer's last put returned.
    let (began, end) = stalls[1];
    assert!(!began, "{stalls:?}");
    assert_eq!(end.reason, StallReason::ImmutableMemtables);
    assert!(db.stats().write_stalls >= 1);
    db.close().unwrap();
}

#[test]
fn a_failed_flush_is_reported_and_so_is_the_resume() {
    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::default());
    let dir = unique_dir("error");
    let db = Db::open(&dir, options(&fs, rec.clone())).unwrap();
    for i in 0..50u32 {
        db.put(i.to_be_bytes(), [3u8; 100]).unwrap();
    }
    fs.inject(Fault::on(OpKind::Append).matching(is_table));
    let Err(Error::Background(cause)) = db.flush() else { panic!("the flush did not fail") };
    // Reported before the failed call returns.
    let events = rec.events();
    let errors: Vec<_> = events
        .iter()
        .filter_map(|e| if let Event::BackgroundError(i) = e { Some(i) } else { None })
        .collect();
    assert_eq!(errors.len(), 1, "{events:?}");
    assert_eq!(errors[0].error.to_string(), cause.to_string());
    assert!(matches!(errors[0].error, Error::Io { .. }));
    assert!(flush_ends(&events).is_empty(), "a failed flush reported as done: {events:?}");
    // Still full: the resume's flush fails anew, which stops the database again.
    let Err(Error::Background(again)) = db.resume() else { panic!("the resume did not fail") };
    fs.clear_faults();
    db.resume().unwrap();
    let events = rec.events();
    let tail: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::BackgroundError(_) | Event::Resumed(_)))
        .collect();
    assert_eq!(tail.len(), 3, "{events:?}");
    let Event::BackgroundError(second) = tail[1] else { panic!("{tail:?}") };
    assert_eq!(second.error.to_string(), again.to_string());
    let Event::Resumed(resumed) = tail[2] else { panic!("no resume after the errors: {tail:?}") };
    assert_eq!(resumed.error.to_string(), again.to_string());
    db.put("after", "1").unwrap();
    db.close().unwrap();
}

#[test]
fn per_keyspace_stats_add_up_to_the_totals() {
    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::default());
    // Memtables large enough that only `flush` switches them: three flushes per keyspace.
    let opts = options(&fs, rec).memtable_bytes(4 << 20);
    let db = Db::open(unique_dir("stats"), opts).unwrap();
    let a = db.keyspace("a", KeyspaceOptions::default()).unwrap();
    let b = db.keyspace("b", KeyspaceOptions::default()).unwrap();
    for round in 0..3u32 {
        for i in 0..200u32 {
            db.put(i.to_be_bytes(), [round as u8; 40]).unwrap();
            a.put(i.to_be_bytes(), [round as u8; 80]).unwrap();
            if i % 2 == 0 {
                b.put(i.to_be_bytes(), [round as u8; 20]).unwrap();
            }
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    for i in 0..50u32 {
        a.put(i.to_be_bytes(), "unflushed").unwrap();
        b.put(i.to_be_bytes(), "unflushed").unwrap();
    }
    let s = db.stats();
    let names: Vec<_> = s.keyspaces.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["default", "a", "b"]);
    let sum = |f: fn(&bloomkv::KeyspaceStats) -> u64| s.keyspaces.iter().map(f).sum::<u64>();
    assert_eq!(sum(|k| k.memtable_bytes), s.memtable_bytes);
    assert_eq!(sum(|k| k.filter_memory_bytes), s.filter_memory_bytes);
    assert_eq!(sum(|k| k.index_memory_bytes), s.index_memory_bytes);
    assert_eq!(sum(|k| k.flushes), s.flushes);
    assert_eq!(sum(|k| k.flush_bytes_written), s.flush_bytes_written);
    assert_eq!(sum(|k| k.compactions), s.compactions);
    assert_eq!(sum(|k| k.compaction_bytes_read), s.compaction_bytes_read);
    assert_eq!(sum(|k| k.compaction_bytes_written), s.compaction_bytes_written);
    for level in 0..s.tables_per_level.len() {
        let tables: usize = s.keyspaces.iter().map(|k| k.tables_per_level[level]).sum();
        let bytes: u64 = s.keyspaces.iter().map(|k| k.bytes_per_level[level]).sum();
        assert_eq!(tables, s.tables_per_level[level], "L{level}");
        assert_eq!(bytes, s.bytes_per_level[level], "L{level}");
    }
    // Each keyspace has its own share, not a copy of the totals.
    for k in &s.keyspaces {
        assert_eq!(k.flushes, 3, "{}", k.name);
        assert_eq!(k.compactions, 1, "{}", k.name);
        assert!(k.bytes_per_level.iter().sum::<u64>() > 0, "{}", k.name);
        assert!(
            k.bytes_per_level.iter().sum::<u64>() < s.bytes_per_level.iter().sum(),
            "{}",
            k.name
        );
    }
    assert!(s.keyspace("a").unwrap().memtable_bytes > 0);
    assert!(
        s.keyspace("a").unwrap().bytes_per_level[1] > s.keyspace("b").unwrap().bytes_per_level[1]
    );
    db.close().unwrap();
}

/// Reads the database from inside every callback, the way a service would gather context
/// for an alert; counts the callbacks that got their answers.
struct Reentrant {
    db: OnceLock<Weak<Db>>,
    answered: Mutex<Vec<&'static str>>,
    /// Holds the first flush until a write has stalled, as in the stall test.
    stalled: Mutex<bool>,
    stalled_cv: Condvar,
}

impl Reentrant {
    fn read(&self, event: &'static str) {
        let Some(db) = self.db.get().and_then(Weak::upgrade) else { return };
        let stats = db.stats();
        assert_eq!(stats.keyspaces[0].name, "default");
        let _ = db.get("k").unwrap();
        let _ = db.snapshot().get("k").unwrap();
        let _ = db.range(..).take(3).count();
        self.answered.lock().unwrap().push(event);
    }
}

impl EventListener for Reentrant {
    fn on_flush_begin(&self, _: &FlushInfo) {
        self.read("flush begin");
        let stalled = self.stalled.lock().unwrap();
        let _ = self.stalled_cv.wait_timeout_while(stalled, DEADLINE, |s| !*s).unwrap();
    }
    fn on_flush_end(&self, _: &FlushInfo) {
        self.read("flush end");
    }
    fn on_compaction_begin(&self, _: &CompactionInfo) {
        self.read("compaction begin");
    }
    fn on_compaction_end(&self, _: &CompactionInfo) {
        self.read("compaction end");
    }
    fn on_write_stall_begin(&self, _: &StallInfo) {
        self.read("stall begin");
        *self.stalled.lock().unwrap() = true;
        self.stalled_cv.notify_all();
    }
    fn on_write_stall_end(&self, _: &StallInfo) {
        self.read("stall end");
    }
    fn on_background_error(&self, _: &BackgroundErrorInfo) {
        self.read("background error");
    }
    fn on_resumed(&self, _: &ResumeInfo) {
        self.read("resumed");
    }
}

#[test]
fn a_listener_that_reads_the_database_from_its_callbacks_does_not_deadlock() {
    let fs = FaultFs::new();
    let listener = Arc::new(Reentrant {
        db: OnceLock::new(),
        answered: Mutex::new(Vec::new()),
        stalled: Mutex::new(false),
        stalled_cv: Condvar::new(),
    });
    let opts = options(&fs, listener.clone())
        .memtable_bytes(1 << 10)
        .max_immutable_memtables(1)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(3)
        .l0_stop_trigger(4);
    let db = Arc::new(Db::open(unique_dir("reentrant"), opts).unwrap());
    listener.db.set(Arc::downgrade(&db)).unwrap();
    // A deadlock would hang the scenario, so it runs on a thread of its own, watched.
    let (done_tx, done) = std::sync::mpsc::channel();
    let scenario = {
        let (db, fs) = (db.clone(), fs.clone());
        std::thread::spawn(move || {
            for i in 0..300u32 {
                db.put(i.to_be_bytes(), [5u8; 100]).unwrap();
            }
            db.flush().unwrap();
            db.compact().unwrap();
            db.put("k", "v").unwrap();
            fs.inject(Fault::on(OpKind::Append).matching(is_table));
            assert!(db.flush().is_err());
            fs.clear_faults();
            db.resume().unwrap();
            done_tx.send(()).unwrap();
        })
    };
    if done.recv_timeout(DEADLINE).is_err() {
        panic!("deadlocked; callbacks answered: {:?}", listener.answered.lock().unwrap());
    }
    scenario.join().unwrap();
    db.close().unwrap();
    let answered = listener.answered.lock().unwrap().clone();
    for event in [
        "flush begin",
        "flush end",
        "compaction begin",
        "compaction end",
        "stall begin",
        "stall end",
        "background error",
        "resumed",
    ] {
        assert!(answered.contains(&event), "no {event} answered: {answered:?}");
    }
}

/// Panics in every flush callback; a second listener behind it still hears everything.
struct Panicky;

impl EventListener for Panicky {
    fn on_flush_begin(&self, _: &FlushInfo) {
        panic!("listener bug at flush begin");
    }
    fn on_flush_end(&self, _: &FlushInfo) {
        panic!("listener bug at flush end");
    }
    fn on_compaction_end(&self, _: &CompactionInfo) {
        panic!("listener bug at compaction end");
    }
}

#[test]
fn a_panicking_listener_leaves_the_database_working() {
    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::default());
    let dir = unique_dir("panicky");
    let opts = options(&fs, Arc::new(Panicky)).event_listener(rec.clone());
    let db = Arc::new(Db::open(&dir, opts.clone()).unwrap());
    // Were the panic to kill the flush thread, `flush` would wait for it forever.
    let (done_tx, done) = std::sync::mpsc::channel();
    let scenario = {
        let db = db.clone();
        std::thread::spawn(move || {
            for round in 0..2u32 {
                for i in 0..100u32 {
                    db.put(i.to_be_bytes(), round.to_be_bytes()).unwrap();
                }
                db.flush().unwrap();
            }
            db.compact().unwrap();
            done_tx.send(()).unwrap();
        })
    };
    let finished = done.recv_timeout(DEADLINE);
    assert!(finished.is_ok(), "the database stopped working: {:?}", rec.events());
    scenario.join().unwrap();
    rec.wait_for("two flush ends", |e| flush_ends(e).len() == 2);
    assert!(rec.events().iter().any(|e| matches!(e, Event::CompactionEnd(_))));
    assert_eq!(db.get(7u32.to_be_bytes()).unwrap().as_deref(), Some(&1u32.to_be_bytes()[..]));
    db.put("after", "1").unwrap();
    db.close().unwrap();
    drop(db);
    let db = Db::open(&dir, opts).unwrap();
    assert_eq!(db.get("after").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.stats().tables_per_level[1], 1);
}

/// What a [`Meddler`] does to the database from its `on_flush_end`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Meddle {
    /// Three puts of 2 KiB into memtables of 1 KiB, one immutable memtable at most: the
    /// third would wait for the flush thread running the callback.
    Put,
    /// `flush` waits for the flush thread running the callback.
    Flush,
    Compact,
    Sync,
    Commit,
    Ingest,
    CreateKeyspace,
    Resume,
    /// `close` joins the flush thread running the callback.
    Close,
}

impl Meddle {
    const ALL: [Meddle; 9] = [
        Meddle::Put,
        Meddle::Flush,
        Meddle::Compact,
        Meddle::Sync,
        Meddle::Commit,
        Meddle::Ingest,
        Meddle::CreateKeyspace,
        Meddle::Resume,
        Meddle::Close,
    ];

    fn on(self, db: &Db) -> bloomkv::Result<()> {
        match self {
            Meddle::Put => (0..3).try_for_each(|i| db.put(format!("meddled{i}"), [9u8; 2048])),
            Meddle::Flush => db.flush(),
            Meddle::Compact => db.compact(),
            Meddle::Sync => db.sync(),
            Meddle::Commit => {
                let mut t = db.transaction();
                t.put("meddled0", "t")?;
                t.commit()
            }
            Meddle::Ingest => db.ingest([("meddled0", "i")]).map(drop),
            Meddle::CreateKeyspace => db.keyspace("meddled", KeyspaceOptions::new()).map(drop),
            Meddle::Resume => db.resume(),
            Meddle::Close => db.close(),
        }
    }
}

/// Calls into the database from the first `on_flush_end`, against the rules, and reports
/// what the call returned; holds each flush at its beginning until the test opens the gate.
struct Meddler {
    db: OnceLock<Weak<Db>>,
    meddle: Meddle,
    returned: Mutex<Option<std::sync::mpsc::Sender<bloomkv::Result<()>>>>,
    gate: Recorder,
}

impl EventListener for Meddler {
    fn on_flush_begin(&self, info: &FlushInfo) {
        self.gate.on_flush_begin(info);
    }
    fn on_flush_end(&self, _: &FlushInfo) {
        let Some(tx) = self.returned.lock().unwrap().take() else { return };
        let Some(db) = self.db.get().and_then(Weak::upgrade) else { return };
        let _ = tx.send(self.meddle.on(&db));
    }
}

/// A callback that writes, flushes, compacts, syncs, commits, ingests, creates a keyspace,
/// resumes or closes gets `Error::CalledFromListener` at once, having done nothing, where
/// the put, the flush and the close would wait for the flush thread running the callback:
/// a hang. The database goes on as if the call had not been made.
#[test]
fn a_listener_that_writes_flushes_or_closes_from_its_callback_is_refused_not_hung() {
    for meddle in Meddle::ALL {
        meddle_from_on_flush_end(meddle);
    }
}

/// Meddles from the first `on_flush_end` of a database whose active memtable holds a write.
fn meddle_from_on_flush_end(meddle: Meddle) {
    let fs = FaultFs::new();
    let (tx, returned) = std::sync::mpsc::channel();
    let listener = Arc::new(Meddler {
        db: OnceLock::new(),
        meddle,
        returned: Mutex::new(Some(tx)),
        gate: Recorder::gated(),
    });
    let dir = unique_dir("meddler");
    let opts = || options(&fs, listener.clone()).memtable_bytes(1 << 10).max_immutable_memtables(1);
    let db = Arc::new(Db::open(&dir, opts()).unwrap());
    listener.db.set(Arc::downgrade(&db)).unwrap();
    db.put("a", [1u8; 2048]).unwrap();
    // A switch: the flush of "a" begins and waits at the gate, "b" goes to the new
    // memtable, so the callback finds one holding something.
    db.put("b", "2").unwrap();
    listener.gate.open_gate();
    let Ok(r) = returned.recv_timeout(DEADLINE) else {
        // Dropping the handle would join the hung flush thread.
        std::mem::forget(db);
        panic!("{meddle:?} from on_flush_end never returned");
    };
    assert!(matches!(r, Err(Error::CalledFromListener)), "{meddle:?} returned {r:?}");
    // Nothing of the call happened, and the database goes on.
    db.put("c", "3").unwrap();
    db.flush().unwrap();
    assert_eq!(db.get("meddled0").unwrap(), None, "{meddle:?}");
    assert!(db.existing_keyspace("meddled").is_none(), "{meddle:?}");
    db.close().unwrap();
    drop(db);
    let db = Db::open(&dir, opts()).unwrap();
    for (k, v) in [("a", &[1u8; 2048][..]), ("b", b"2"), ("c", b"3")] {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v), "{meddle:?}: {k}");
    }
    assert_eq!(db.get("meddled0").unwrap(), None, "{meddle:?}");
}

/// Drops the last handle on the database from the first `on_flush_end`.
struct LastHandle {
    db: Mutex<Option<Db>>,
    dropped: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    gate: Recorder,
}

impl EventListener for LastHandle {
    fn on_flush_begin(&self, info: &FlushInfo) {
        self.gate.on_flush_begin(info);
    }
    fn on_flush_end(&self, _: &FlushInfo) {
        let Some(tx) = self.dropped.lock().unwrap().take() else { return };
        drop(self.db.lock().unwrap().take());
        let _ = tx.send(());
    }
}

/// Dropping the last handle closes the database; in a callback on the flush thread, which
/// closing joins, it closes on a thread of its own once the callback has returned: the LOCK
/// is released and every write is there at the next open.
#[test]
fn a_listener_dropping_the_last_handle_closes_the_database_after_its_callback() {
    let fs = FaultFs::new();
    let (tx, dropped) = std::sync::mpsc::channel();
    let listener = Arc::new(LastHandle {
        db: Mutex::new(None),
        dropped: Mutex::new(Some(tx)),
        gate: Recorder::gated(),
    });
    let dir = unique_dir("last-handle");
    let opts = || options(&fs, listener.clone()).memtable_bytes(1 << 10);
    let db = Db::open(&dir, opts()).unwrap();
    db.put("a", [1u8; 2048]).unwrap();
    db.put("b", "2").unwrap();
    *listener.db.lock().unwrap() = Some(db);
    listener.gate.open_gate();
    assert!(dropped.recv_timeout(DEADLINE).is_ok(), "the drop in the callback did not return");
    // The close goes on on its own thread: the next open succeeds once it is done.
    let until = Instant::now() + DEADLINE;
    let db = loop {
        match Db::open(&dir, opts()) {
            Ok(db) => break db,
            Err(Error::Locked { .. }) if Instant::now() < until => std::thread::yield_now(),
            Err(e) => panic!("reopening after the drop: {e}"),
        }
    };
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&[1u8; 2048][..]));
    assert_eq!(db.get("b").unwrap().as_deref(), Some(&b"2"[..]));
}

/// Captures every record whose target is `bloomkv`, for all the tests of this binary (a
/// process has one logger); each test looks for records naming its own directory or
/// keyspace.
struct Capture(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.target() == "bloomkv"
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push((r.level(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

#[test]
fn background_work_is_logged_under_the_bloomkv_target() {
    static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let logged = |level: log::Level, words: &[&str]| {
        CAPTURE
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|(l, m)| *l == level && words.iter().all(|w| m.contains(w)))
    };

    let fs = FaultFs::new();
    let rec = Arc::new(Recorder::default());
    let dir = unique_dir("logged");
    let db = Db::open(&dir, options(&fs, rec.clone())).unwrap();
    let ks = db.keyspace("logged_keyspace", KeyspaceOptions::default()).unwrap();
    ks.put("k", "v").unwrap();
    db.flush().unwrap();
    rec.wait_for("flush end", |e| !flush_ends(e).is_empty());
    assert!(logged(log::Level::Info, &["flush begins", "logged_keyspace"]));
    assert!(logged(log::Level::Info, &["flush done", "logged_keyspace"]));
    db.compact().unwrap();
    assert!(logged(log::Level::Info, &["compaction done", "logged_keyspace"]));

    ks.put("k2", "v").unwrap();
    fs.inject(Fault::on(OpKind::Append).matching(is_table));
    assert!(db.flush().is_err());
    let dir_name = dir.to_string_lossy().into_owned();
    assert!(logged(log::Level::Error, &["background error", &dir_name]));
    fs.clear_faults();
    db.resume().unwrap();
    assert!(logged(log::Level::Warn, &["resumed", &dir_name]));
    db.close().unwrap();
}
