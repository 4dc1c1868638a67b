//! Compaction styles per keyspace (`CompactionStyle`): each keeps the keyspace's contents
//! right and its shape within the style's bounds, across flushes, compactions and reopens.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bloomkv::events::CompactionReason;
use bloomkv::{CompactionStyle, Db, KeyspaceOptions, ManualClock, Options, Readable};

mod common;

const START: u64 = 1_700_000_000_000;

/// Small tables, so a few thousand writes make a tree of many; compactions only when a test
/// steps them, so what runs is what the test chose.
fn options(clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .memtable_bytes(8 << 10)
        .block_bytes(512)
        .target_table_bytes(8 << 10)
        .level_base_bytes(32 << 10)
        .l0_stop_trigger(1000)
        .background_compactions(false)
        .clock(clock.clone())
}

fn compact_until_done(db: &Db) {
    while db.compact_step().unwrap().is_some() {}
}

fn keyspace_bytes(db: &Db, name: &str) -> u64 {
    db.stats().keyspace(name).unwrap().bytes_per_level.iter().sum()
}

/// A log kept by FIFO over an hour of its clock: one event a second, each flushed with the
/// next few. The keyspace never holds more than its bound once the picker has run, nor a
/// table older than its age bound; what it holds is the newest events, every one of them;
/// and no write waits for a compaction, however many tables L0 holds.
#[test]
fn fifo_keeps_disk_bounded_over_an_hour_with_a_manual_clock() {
    let clock = Arc::new(ManualClock::new(START));
    let (dir, db) = common::db::open_temp(options(&clock));
    let max_bytes = 96 << 10;
    let max_age = Duration::from_secs(20 * 60);
    let fifo = CompactionStyle::Fifo { max_bytes, max_age: Some(max_age) };
    let opts = KeyspaceOptions::new().compaction_style(fifo);
    let mut logs = db.keyspace("logs", opts.clone()).unwrap();
    let mut written: Vec<u64> = Vec::new();
    let mut db = Some(db);
    for second in 0..3600u64 {
        let d = db.as_ref().unwrap();
        logs.put(second.to_be_bytes(), vec![b'e'; 200]).unwrap();
        written.push(second);
        clock.advance(Duration::from_secs(1));
        if second % 10 == 9 {
            d.flush().unwrap();
            compact_until_done(d);
            assert!(keyspace_bytes(d, "logs") <= max_bytes, "at {second} s");
        }
        if second == 1800 {
            // Reopened without restating the style: the manifest kept it.
            drop(logs);
            drop(db.take());
            let d = Db::open(dir.path(), options(&clock)).unwrap();
            assert_eq!(d.keyspace_options("logs").unwrap().compaction_style, fifo);
            logs = d.keyspace("logs", d.keyspace_options("logs").unwrap()).unwrap();
            db = Some(d);
        }
    }
    let db = db.unwrap();
    db.flush().unwrap();
    compact_until_done(&db);
    let stats = db.stats();
    let ks = stats.keyspace("logs").unwrap();
    assert!(ks.bytes_per_level.iter().sum::<u64>() <= max_bytes);
    assert_eq!(ks.compactions, 0, "nothing merged");
    assert!(ks.fifo_tables_dropped > 0);
    assert!(ks.tables_per_level[0] > 12, "{:?}: more than the stop trigger", ks.tables_per_level);
    assert_eq!(ks.tables_per_level[1..].iter().sum::<usize>(), 0);
    assert_eq!(stats.write_stalls + stats.write_slowdowns, 0);
    // The newest events, all of them, back to where the bounds cut.
    let held: Vec<u64> =
        logs.range(..).map(|r| u64::from_be_bytes(r.unwrap().0[..].try_into().unwrap())).collect();
    assert!(!held.is_empty());
    let first = held[0];
    assert_eq!(held, written[first as usize..], "a contiguous tail");
    assert!(
        first > 3600 - max_age.as_secs() - 20,
        "nothing much older than the age bound: {first}"
    );
    assert!(first < 3500, "the bound keeps more than the last few tables: {first}");
}

/// The age bound alone: an idle keyspace's tables go once their age passes it, at the next
/// pick (`Db::compact` too), whatever their bytes.
#[test]
fn fifo_drops_tables_past_their_age() {
    let clock = Arc::new(ManualClock::new(START));
    let (_dir, db) = common::db::open_temp(options(&clock));
    let fifo =
        CompactionStyle::Fifo { max_bytes: u64::MAX, max_age: Some(Duration::from_secs(60)) };
    let cache = db.keyspace("cache", KeyspaceOptions::new().compaction_style(fifo)).unwrap();
    cache.put("old", "1").unwrap();
    db.flush().unwrap();
    clock.advance(Duration::from_secs(30));
    cache.put("new", "2").unwrap();
    db.flush().unwrap();
    clock.advance(Duration::from_secs(29));
    db.compact().unwrap();
    assert_eq!(db.stats().keyspace("cache").unwrap().tables_per_level[0], 2);
    clock.advance(Duration::from_secs(1));
    let picked = db.compact_step().unwrap().expect("the old table is due");
    assert_eq!(picked.reason, CompactionReason::FifoAge);
    assert_eq!(cache.get("old").unwrap(), None);
    assert_eq!(cache.get("new").unwrap().as_deref(), Some(&b"2"[..]));
    assert!(db.compact_step().unwrap().is_none());
    clock.advance(Duration::from_secs(30));
    db.compact().unwrap();
    assert_eq!(cache.range(..).count(), 0);
}

/// Switching styles at a reopen: leveled to FIFO keeps the sorted levels' tables until the
/// bound drops them, the deepest first, and never brings back a version a newer one hid;
/// FIFO back to leveled compacts FIFO's L0 down like any other.
#[test]
fn switching_between_leveled_and_fifo_at_reopen() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    {
        let db = Db::open(dir.path(), options(&clock)).unwrap();
        let ks = db.keyspace("k", KeyspaceOptions::new()).unwrap();
        for round in 0..4u32 {
            for i in 0..400u32 {
                // Each round overwrites the keys of the last and deletes some.
                let key = format!("key{:04}", i).into_bytes();
                if i % 7 == round {
                    ks.delete(&key).unwrap();
                    model.remove(&key);
                } else {
                    let value = format!("{round}-{i}-{}", "v".repeat(40)).into_bytes();
                    ks.put(&key, &value).unwrap();
                    model.insert(key, value);
                }
            }
            db.flush().unwrap();
            compact_until_done(&db);
        }
        let levels = db.stats().keyspace("k").unwrap().tables_per_level.clone();
        assert!(levels[1..].iter().sum::<usize>() > 0, "{levels:?}");
    }
    let total;
    {
        // To FIFO with a bound the tree is over: tables go, deepest level first.
        let db = Db::open(dir.path(), options(&clock)).unwrap();
        let before = db.stats().keyspace("k").unwrap().clone();
        total = before.bytes_per_level.iter().sum::<u64>();
        let fifo = CompactionStyle::Fifo { max_bytes: total - 1, max_age: None };
        let ks = db.keyspace("k", KeyspaceOptions::new().compaction_style(fifo)).unwrap();
        let deepest = (1..before.tables_per_level.len())
            .rev()
            .find(|&l| before.tables_per_level[l] > 0)
            .unwrap();
        let picked = db.compact_step().unwrap().expect("over the bound");
        assert_eq!(picked.reason, CompactionReason::FifoBytes);
        assert_eq!(picked.level, deepest);
        assert!(db.compact_step().unwrap().is_none());
        let after = db.stats().keyspace("k").unwrap().clone();
        assert_eq!(after.tables_per_level[deepest], before.tables_per_level[deepest] - 1);
        // What is left reads as the model says, or not at all: no older version comes back.
        for (k, v) in ks.range(..).map(Result::unwrap) {
            assert_eq!(model.get(&k[..]), Some(&v.to_vec()), "{k:?}");
        }
        // New flushes stay in L0.
        ks.put("zzz", "fifo").unwrap();
        db.flush().unwrap();
        compact_until_done(&db);
        assert_eq!(db.stats().keyspace("k").unwrap().tables_per_level[0], 1);
    }
    {
        // Back to leveled: L0 is compacted down as usual.
        let db = Db::open(dir.path(), options(&clock).l0_compaction_trigger(1)).unwrap();
        assert!(db.keyspace_options("k").unwrap().compaction_style.is_fifo());
        let ks = db.keyspace("k", KeyspaceOptions::new()).unwrap();
        assert_eq!(db.keyspace_options("k").unwrap().compaction_style, CompactionStyle::Leveled);
        compact_until_done(&db);
        assert_eq!(db.stats().keyspace("k").unwrap().tables_per_level[0], 0);
        assert_eq!(ks.get("zzz").unwrap().as_deref(), Some(&b"fifo"[..]));
    }
}

/// A FIFO keyspace's ingested tables go to L0, where its drop order puts them after every
/// older table (a sorted level's tables go first).
#[test]
fn fifo_ingests_into_l0() {
    let clock = Arc::new(ManualClock::new(START));
    let (_dir, db) = common::db::open_temp(options(&clock));
    let fifo = CompactionStyle::Fifo { max_bytes: 1 << 30, max_age: None };
    let ks = db.keyspace("k", KeyspaceOptions::new().compaction_style(fifo)).unwrap();
    ks.put("a", "1").unwrap();
    db.flush().unwrap();
    ks.ingest((0..100u32).map(|i| (format!("b{i:03}"), "x"))).unwrap();
    let levels = db.stats().keyspace("k").unwrap().tables_per_level.clone();
    assert_eq!(levels[0], 2, "{levels:?}");
    assert_eq!(ks.get("b042").unwrap().as_deref(), Some(&b"x"[..]));
}

/// The same random writes into a keyspace of each style, every compaction the picker wants
/// run after each flush: the styles that gather runs write fewer compaction bytes than
/// leveled (tiered fewest), and every keyspace reads the same, before and after a reopen
/// that keeps each style.
#[test]
fn tiered_and_lazy_leveling_write_less_than_leveled_and_read_the_same() {
    use rand::{Rng, SeedableRng};
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let styles = [
        ("leveled", CompactionStyle::Leveled),
        ("lazy", CompactionStyle::LazyLeveling),
        ("tiered", CompactionStyle::Tiered),
        ("fluid", CompactionStyle::Fluid { k: 3, z: 1 }),
    ];
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    {
        let db = Db::open(dir.path(), options(&clock).memtable_bytes(16 << 10)).unwrap();
        let handles: Vec<_> = styles
            .iter()
            .map(|(name, s)| {
                db.keyspace(name, KeyspaceOptions::new().compaction_style(*s)).unwrap()
            })
            .collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for i in 0..20_000u32 {
            // Mostly new keys, as a fill: the cost leveling pays for sorted levels shows.
            let key = format!("{:07}", rng.gen_range(0..1_000_000u32)).into_bytes();
            if i % 10 == 9 {
                for ks in &handles {
                    ks.delete(&key).unwrap();
                }
                model.remove(&key);
            } else {
                let value = format!("{i}-{}", "v".repeat(60)).into_bytes();
                for ks in &handles {
                    ks.put(&key, &value).unwrap();
                }
                model.insert(key, value);
            }
            if i % 500 == 499 {
                db.flush().unwrap();
                compact_until_done(&db);
            }
        }
        let stats = db.stats();
        let written = |name| stats.keyspace(name).unwrap().compaction_bytes_written;
        let (leveled, lazy, tiered) = (written("leveled"), written("lazy"), written("tiered"));
        let shown = format!("leveled {leveled}, lazy {lazy}, tiered {tiered}");
        assert!(lazy * 10 < leveled * 8, "{shown}");
        assert!(tiered < lazy, "{shown}");
        println!("compaction bytes written: {shown}");
        // Runs merged in L0 into one table each (written unsplit), and the last level.
        for (name, _) in &styles[1..] {
            let ks = stats.keyspace(name).unwrap();
            assert!(ks.tables_per_level[6] > 0, "{name}: {:?}", ks.tables_per_level);
        }
        for ks in &handles {
            let got: Vec<_> = ks.range(..).map(|r| r.unwrap()).collect();
            assert_eq!(got.len(), model.len());
            assert!(got.iter().all(|(k, v)| model.get(&k[..]) == Some(&v.to_vec())));
        }
    }
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    for (name, style) in &styles {
        assert_eq!(db.keyspace_options(name).unwrap().compaction_style, *style);
        let ks = db.keyspace(name, db.keyspace_options(name).unwrap()).unwrap();
        for (k, v) in model.iter().step_by(37) {
            assert_eq!(ks.get(k).unwrap().as_deref(), Some(&v[..]), "{name}");
        }
        assert_eq!(ks.range(..).count(), model.len(), "{name}");
    }
}

/// Write stalls bound a tiered keyspace's runs beyond what its style allows, not its L0
/// tables (most of which its style keeps), and the stall's event counts those runs.
#[test]
fn stalls_bound_the_runs_a_style_does_not_allow() {
    use bloomkv::events::{EventListener, StallInfo};
    struct Stalls(std::sync::Mutex<Vec<StallInfo>>);
    impl EventListener for Stalls {
        fn on_write_stall_begin(&self, info: &StallInfo) {
            self.0.lock().unwrap().push(info.clone());
        }
    }
    let clock = Arc::new(ManualClock::new(START));
    let stalls = Arc::new(Stalls(Default::default()));
    let opts = options(&clock)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(3)
        .event_listener(stalls.clone());
    let (_dir, db) = common::db::open_temp(opts.compaction_style(CompactionStyle::Tiered));
    // Ratio 10: nine flushed runs are within the style; no slowdown, though L0 holds nine.
    for i in 0..9u32 {
        db.put(i.to_be_bytes(), "v").unwrap();
        db.flush().unwrap();
    }
    assert_eq!(db.stats().tables_per_level[0], 9);
    assert_eq!(db.stats().write_slowdowns, 0);
    // Three more (compactions held off) are beyond it: writes slow down, and say why.
    for i in 9..12u32 {
        db.put(i.to_be_bytes(), "v").unwrap();
        db.flush().unwrap();
    }
    db.put("next", "v").unwrap();
    assert!(db.stats().write_slowdowns > 0);
    let seen = stalls.0.lock().unwrap().clone();
    let last = seen.last().expect("a stall");
    assert_eq!(last.keyspace.as_deref(), Some("default"));
    assert_eq!(last.l0_tables, 3, "runs beyond the style");
    // The picker merges them: nothing is beyond the style any more.
    compact_until_done(&db);
    db.put("after", "v").unwrap();
    let before = db.stats().write_slowdowns;
    db.put("after2", "v").unwrap();
    assert_eq!(db.stats().write_slowdowns, before);
}

/// Leveled compaction's output tables grow with the level: `target_table_bytes` on L1, twice
/// that on L2, five times on L3 and below, so the deep levels, which hold nearly all the
/// data, take few tables.
#[test]
fn leveled_tables_grow_with_the_level() {
    let clock = Arc::new(ManualClock::new(START));
    let (_dir, db) = common::db::open_temp(options(&clock));
    let target = 8u64 << 10;
    // Compacted as it fills, as the background would: compacted only at the end, L0 would go
    // to L1 whole and then move down table by table, never merged into the deeper levels.
    for i in 0..20_000u32 {
        db.put(format!("k{:08}", i.wrapping_mul(2_654_435_761) % 1_000_000), [i as u8; 100])
            .unwrap();
        if i % 500 == 499 {
            compact_until_done(&db);
        }
    }
    db.flush().unwrap();
    compact_until_done(&db);
    let tables = db.tables();
    let on = |l: usize| tables.iter().filter(move |t| t.level == l).map(|t| t.file_size);
    let deep: Vec<u64> = (3..7).flat_map(on).collect();
    assert!(
        deep.len() >= 4,
        "the tree reached no level below L2: {:?}",
        db.stats().tables_per_level
    );
    let average = deep.iter().sum::<u64>() / deep.len() as u64;
    assert!(average > 2 * target, "L3 and below: {average} bytes a table on average");
    assert!(on(1).all(|s| s < 2 * target), "L1 keeps tables of the target size");
    assert!(on(2).all(|s| s < 3 * target), "L2's are twice it");
}

/// While a lazy-leveling keyspace merges runs into its last level, the flushed runs arriving
/// meanwhile are merged beside it, on the second compaction thread, so writers are not held
/// behind the long merge. A listener holds the first merge into the last level until a merge
/// of L0 runs into one L0 table begins beside it (giving up after a while, so that without
/// one the test fails rather than hangs); the contents stay exact throughout.
#[test]
fn runs_merge_beside_a_merge_into_the_last_level() {
    use bloomkv::events::{CompactionInfo, EventListener};
    use std::sync::{Condvar, Mutex};
    #[derive(Default)]
    struct Progress {
        holding: bool,
        beside: Option<CompactionInfo>,
        released: bool,
    }
    #[derive(Default)]
    struct Hold(Mutex<Progress>, Condvar);
    impl EventListener for Hold {
        fn on_compaction_begin(&self, info: &CompactionInfo) {
            let mut p = self.0.lock().unwrap();
            if info.output_level == 6 && !p.holding {
                p.holding = true;
                let give_up = Duration::from_secs(60);
                p = self.1.wait_timeout_while(p, give_up, |p| p.beside.is_none()).unwrap().0;
                p.released = true;
            } else if p.holding && !p.released && info.output_level == 0 {
                p.beside = Some(info.clone());
                self.1.notify_all();
            }
        }
    }
    let clock = Arc::new(ManualClock::new(START));
    let hold = Arc::new(Hold::default());
    let opts = options(&clock)
        .background_compactions(true)
        .event_listener(hold.clone())
        .compaction_style(CompactionStyle::LazyLeveling);
    let (_dir, db) = common::db::open_temp(opts);
    let mut model = BTreeMap::new();
    for round in 0..400u32 {
        if hold.0.lock().unwrap().beside.is_some() {
            break;
        }
        for i in 0..40u32 {
            let key = (i * 7919 + round).to_be_bytes();
            let value = format!("{round}-{i}").repeat(8);
            db.put(key, &value).unwrap();
            model.insert(key, value);
        }
        db.flush().unwrap();
    }
    let beside = hold.0.lock().unwrap().beside.clone();
    let beside = beside.expect("a merge of L0 runs began beside the merge into the last level");
    assert_eq!((beside.reason, beside.input_level), (CompactionReason::Runs, 0));
    for (key, value) in &model {
        assert_eq!(db.get(key).unwrap().unwrap(), value.as_bytes());
    }
}
