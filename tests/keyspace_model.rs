//! Model test of keyspaces: random puts, deletes, range deletes and batches spread over three
//! keyspaces, with flushes, compactions, reopens, power losses after a sync, snapshots, and
//! keyspaces dropped and created again, checked against one `BTreeMap` per keyspace.

use std::collections::BTreeMap;

use bloomkv::fs::fault::unique_dir;
use bloomkv::fs::{CrashMode, FaultFs};
use bloomkv::{
    Db, Keyspace, KeyspaceOptions, Options, Readable, Snapshot, WriteBatch, WriteOptions,
};
use proptest::prelude::*;

mod common;

use common::keys::key3;
use common::model::{entries, pairs};
use common::options::OptionsExt;

/// Keyspace 0 is the default one; 1 and 2 are named and may be dropped and created again.
const NAMES: [&str; 3] = ["default", "a", "b"];

#[derive(Debug, Clone)]
enum Op {
    Put(usize, u8, u16),
    Delete(usize, u8),
    DeleteRange(usize, u8, u8),
    /// (keyspace, key, value or delete), applied atomically.
    Batch(Vec<(usize, u8, Option<u16>)>),
    Get(usize, u8),
    Scan(usize),
    Snapshot,
    CheckSnapshot,
    Flush,
    Compact,
    Reopen,
    /// `sync`, then power off and reopen: everything is synced, so nothing may be lost.
    Crash,
    Drop(usize),
    Create(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let ks = || 0..3usize;
    let named = || 1..3usize;
    prop_oneof![
        20 => (ks(), any::<u8>(), any::<u16>()).prop_map(|(s, k, v)| Op::Put(s, k % 48, v)),
        5 => (ks(), any::<u8>()).prop_map(|(s, k)| Op::Delete(s, k % 48)),
        2 => (ks(), any::<u8>(), 1..12u8).prop_map(|(s, k, n)| Op::DeleteRange(s, k % 48, n)),
        5 => proptest::collection::vec(
            (ks(), any::<u8>(), proptest::option::of(any::<u16>())),
            1..6
        )
        .prop_map(|ops| Op::Batch(ops.into_iter().map(|(s, k, v)| (s, k % 48, v)).collect())),
        6 => (ks(), any::<u8>()).prop_map(|(s, k)| Op::Get(s, k % 48)),
        2 => ks().prop_map(Op::Scan),
        1 => Just(Op::Snapshot),
        2 => Just(Op::CheckSnapshot),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => named().prop_map(Op::Drop),
        1 => named().prop_map(Op::Create),
    ]
}

fn options(fs: &FaultFs) -> Options {
    // Tiny memtables and tables: a short run reaches L0 and L1 in every keyspace.
    Options::default()
        .memtable_bytes(2 << 10)
        .target_table_bytes(2 << 10)
        .level_base_bytes(8 << 10)
        .l0_compaction_trigger(2)
        .fault_fs(fs)
}

type Model = [Option<common::model::Model>; 3];

struct Run {
    fs: FaultFs,
    dir: std::path::PathBuf,
    db: Db,
    handles: [Option<Keyspace>; 3],
    model: Model,
    snapshot: Option<(Snapshot, Model, [Option<Keyspace>; 3])>,
}

impl Run {
    fn reopen(&mut self, fs: FaultFs) {
        self.snapshot = None;
        self.handles = Default::default();
        let db = Db::open(&self.dir, options(&fs)).unwrap();
        self.db = db;
        self.fs = fs;
        let names = self.db.keyspace_names();
        for (i, name) in NAMES.iter().enumerate() {
            assert_eq!(names.contains(&name.to_string()), self.model[i].is_some(), "{name}");
            self.handles[i] = self.db.existing_keyspace(name);
        }
    }

    fn check_all(&self, model: &Model, snap: Option<&Snapshot>, handles: &[Option<Keyspace>; 3]) {
        for i in 0..3 {
            let (Some(m), Some(h)) = (&model[i], &handles[i]) else { continue };
            let got = pairs(match snap {
                Some(s) => s.keyspace(h).unwrap().range(..),
                None => h.range(..),
            });
            assert_eq!(got, entries(m), "keyspace {}", NAMES[i]);
        }
    }
}

fn run(ops: Vec<Op>) {
    let fs = FaultFs::new();
    let dir = unique_dir("keyspace-model");
    let db = Db::open(&dir, options(&fs)).unwrap();
    let a = db.keyspace("a", KeyspaceOptions::default()).unwrap();
    let b = db
        .keyspace("b", KeyspaceOptions::new().compression(bloomkv::Compression::Zstd { level: 1 }))
        .unwrap();
    let default = db.existing_keyspace("default").unwrap();
    let mut r = Run {
        fs,
        dir,
        db,
        handles: [Some(default), Some(a), Some(b)],
        model: [Some(BTreeMap::new()), Some(BTreeMap::new()), Some(BTreeMap::new())],
        snapshot: None,
    };
    for op in ops {
        match op {
            Op::Put(s, k, v) => {
                let Some(h) = &r.handles[s] else { continue };
                h.put(key3(k), v.to_le_bytes()).unwrap();
                r.model[s].as_mut().unwrap().insert(key3(k), v.to_le_bytes().to_vec());
            }
            Op::Delete(s, k) => {
                let Some(h) = &r.handles[s] else { continue };
                h.delete(key3(k)).unwrap();
                r.model[s].as_mut().unwrap().remove(&key3(k));
            }
            Op::DeleteRange(s, k, n) => {
                let Some(h) = &r.handles[s] else { continue };
                let (lo, hi) = (key3(k), key3(k.saturating_add(n)));
                h.delete_range(lo.clone()..hi.clone()).unwrap();
                r.model[s].as_mut().unwrap().retain(|key, _| *key < lo || *key >= hi);
            }
            Op::Batch(ops) => {
                let mut batch = WriteBatch::new();
                let mut model = r.model.clone();
                for (s, k, v) in ops {
                    let Some(h) = &r.handles[s] else { continue };
                    let m = model[s].as_mut().unwrap();
                    match v {
                        Some(v) => {
                            batch.put_in(h, key3(k), v.to_le_bytes());
                            m.insert(key3(k), v.to_le_bytes().to_vec());
                        }
                        None => {
                            batch.delete_in(h, key3(k));
                            m.remove(&key3(k));
                        }
                    }
                }
                r.db.write(&batch, &WriteOptions::default()).unwrap();
                r.model = model;
            }
            Op::Get(s, k) => {
                let Some(h) = &r.handles[s] else { continue };
                let got = h.get(key3(k)).unwrap().map(|v| v.to_vec());
                assert_eq!(got.as_ref(), r.model[s].as_ref().unwrap().get(&key3(k)));
            }
            Op::Scan(s) => {
                let mut only: [Option<Keyspace>; 3] = Default::default();
                only[s] = r.handles[s].clone();
                r.check_all(&r.model, None, &only);
            }
            Op::Snapshot => {
                let snap = r.db.snapshot();
                r.snapshot = Some((snap, r.model.clone(), r.handles.clone()));
            }
            Op::CheckSnapshot => {
                if let Some((snap, model, handles)) = &r.snapshot {
                    // Keyspaces dropped since still read as they were.
                    r.check_all(model, Some(snap), handles);
                }
            }
            Op::Flush => r.db.flush().unwrap(),
            Op::Compact => r.db.compact().unwrap(),
            Op::Reopen => {
                r.snapshot = None;
                r.handles = Default::default();
                r.db.close().unwrap();
                let fs = r.fs.clone();
                r.reopen(fs);
            }
            Op::Crash => {
                r.db.sync().unwrap();
                let after = r.fs.crash(CrashMode::DropUnsynced);
                r.reopen(after);
            }
            Op::Drop(s) => {
                if r.model[s].take().is_some() {
                    r.db.drop_keyspace(NAMES[s]).unwrap();
                    r.handles[s] = None;
                }
            }
            Op::Create(s) => {
                if r.model[s].is_none() {
                    r.handles[s] =
                        Some(r.db.keyspace(NAMES[s], KeyspaceOptions::default()).unwrap());
                    r.model[s] = Some(BTreeMap::new());
                }
            }
        }
    }
    r.check_all(&r.model, None, &r.handles);
    r.snapshot = None;
    r.db.close().unwrap();
    let fs = r.fs.clone();
    r.reopen(fs);
    r.check_all(&r.model, None, &r.handles);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn keyspaces_match_a_map_each(ops in proptest::collection::vec(op(), 1..300)) {
        run(ops);
    }
}

/// One long fixed run, deep enough that every keyspace's tree compacts on its own.
#[test]
fn long_run_with_drops_and_power_losses() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut ops = Vec::new();
    for i in 0..6000u32 {
        let s = rng.gen_range(0..3usize);
        let k = rng.gen_range(0..200u32) as u8;
        ops.push(match i % 1000 {
            333 => Op::Crash,
            500 => Op::Drop(1 + (i as usize / 1000) % 2),
            501 => Op::Create(1 + (i as usize / 1000) % 2),
            700 => Op::Snapshot,
            900 => Op::CheckSnapshot,
            999 => Op::Reopen,
            _ if i % 97 == 0 => Op::DeleteRange(s, k, 20),
            _ if i % 7 == 0 => Op::Delete(s, k),
            _ if i % 11 == 0 => {
                Op::Batch(vec![(0, k, Some(i as u16)), (1, k, Some(1)), (2, k, None)])
            }
            _ => Op::Put(s, k, i as u16),
        });
    }
    run(ops);
}
