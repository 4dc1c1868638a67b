//! Model-based test: random operations against the engine and a `BTreeMap`, with memtables
//! small enough that the sequences drive many flushes and compactions, and close/reopen in the
//! middle.

use std::collections::BTreeMap;
use std::ops::Bound;

use bloomkv::{Db, Options, WriteBatch, WriteOptions};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u16),
    Delete(u16),
    Get(u16),
    MultiGet(Vec<u16>),
    Range(u16, u16),
    Prefix(u8),
    Batch(Vec<(u16, Option<u16>)>),
    Snapshot,
    CheckSnapshot,
    Flush,
    Compact,
    Reopen,
}

fn key(k: u16) -> Vec<u8> {
    // Two-byte-ish prefixes so prefix scans select real subsets.
    format!("{:02}/{:05}", k % 37, k).into_bytes()
}

fn value(v: u16, k: u16) -> Vec<u8> {
    // Values of varied size, some large, so blocks and tables fill unevenly.
    let len = (v as usize * 7 + k as usize) % 300;
    let mut out = format!("v{v}-k{k}-").into_bytes();
    out.resize(out.len() + len, b'x');
    out
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..600;
    prop_oneof![
        30 => (k.clone(), any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)),
        8 => k.clone().prop_map(Op::Delete),
        15 => k.clone().prop_map(Op::Get),
        3 => prop::collection::vec(k.clone(), 0..80).prop_map(Op::MultiGet),
        4 => (k.clone(), k.clone()).prop_map(|(a, b)| Op::Range(a, b)),
        2 => (0u8..37).prop_map(Op::Prefix),
        6 => prop::collection::vec((k.clone(), prop::option::of(any::<u16>())), 1..8).prop_map(Op::Batch),
        2 => Just(Op::Snapshot),
        2 => Just(Op::CheckSnapshot),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

fn options() -> Options {
    Options::default()
        .memtable_bytes(8 << 10)
        .block_bytes(256)
        .target_table_bytes(8 << 10)
        .level_base_bytes(32 << 10)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(4)
        .l0_stop_trigger(6)
}

fn scan(db: &Db, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.range((lo, hi)).map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect::<Result<_, _>>().unwrap()
}

/// What the engine did during a run, summed over reopens.
#[derive(Default, Debug)]
struct Work {
    flushes: u64,
    compactions: u64,
    deepest_level: usize,
}

impl Work {
    fn add(&mut self, db: &Db) {
        let s = db.stats();
        self.flushes += s.flushes;
        self.compactions += s.compactions;
        let deepest = s.tables_per_level.iter().rposition(|&n| n > 0).unwrap_or(0);
        self.deepest_level = self.deepest_level.max(deepest);
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn run(ops: Vec<Op>) -> Work {
    let mut work = Work::default();
    let dir = tempfile::tempdir().unwrap();
    let mut db = Some(Db::open(dir.path(), options()).unwrap());
    let mut model: Model = BTreeMap::new();
    let mut snap: Option<(bloomkv::Snapshot, Model)> = None;
    for op in ops {
        let d = db.as_ref().unwrap();
        match op {
            Op::Put(k, v) => {
                d.put(key(k), value(v, k)).unwrap();
                model.insert(key(k), value(v, k));
            }
            Op::Delete(k) => {
                d.delete(key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Get(k) => {
                assert_eq!(
                    d.get(key(k)).unwrap().map(|v| v.to_vec()),
                    model.get(&key(k)).cloned(),
                    "get {k}"
                );
            }
            Op::MultiGet(ks) => {
                let keys: Vec<_> = ks.iter().map(|&k| key(k)).collect();
                let got: Vec<_> = d
                    .multi_get(&keys)
                    .unwrap()
                    .into_iter()
                    .map(|v| v.map(|v| v.to_vec()))
                    .collect();
                let want: Vec<_> = keys.iter().map(|k| model.get(k).cloned()).collect();
                assert_eq!(got, want, "multi_get {ks:?}");
            }
            Op::Range(a, b) => {
                let (lo, hi) = (key(a).min(key(b)), key(a).max(key(b)));
                let got = scan(d, Bound::Included(lo.clone()), Bound::Excluded(hi.clone()));
                let want: Vec<_> = model
                    .range(lo.clone()..hi.clone())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "range {a}..{b}");
                let got = scan(d, Bound::Excluded(lo.clone()), Bound::Included(hi.clone()));
                let want: Vec<_> = model
                    .range((Bound::Excluded(lo), Bound::Included(hi)))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "range ({a}, {b}]");
            }
            Op::Prefix(p) => {
                let prefix = format!("{p:02}/").into_bytes();
                let got: Vec<_> = d
                    .prefix(&prefix)
                    .map(|r| r.map(|(k, v)| (k, v.to_vec())))
                    .collect::<Result<_, _>>()
                    .unwrap();
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "prefix {p}");
            }
            Op::Batch(entries) => {
                let mut b = WriteBatch::new();
                for (k, v) in &entries {
                    match v {
                        Some(v) => {
                            b.put(key(*k), value(*v, *k));
                            model.insert(key(*k), value(*v, *k));
                        }
                        None => {
                            b.delete(key(*k));
                            model.remove(&key(*k));
                        }
                    }
                }
                d.write(&b, &WriteOptions::new().sync(entries.len() % 2 == 0)).unwrap();
            }
            Op::Snapshot => snap = Some((d.snapshot(), model.clone())),
            Op::CheckSnapshot => {
                if let Some((s, m)) = &snap {
                    let got: Vec<_> = s
                        .range(..)
                        .map(|r| r.map(|(k, v)| (k, v.to_vec())))
                        .collect::<Result<_, _>>()
                        .unwrap();
                    let want: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    assert_eq!(got, want, "snapshot scan");
                    for k in m.keys().take(20) {
                        assert_eq!(s.get(k).unwrap().map(|v| v.to_vec()).as_ref(), m.get(k));
                    }
                    // Every tenth key the model ever knew of, present or not at the snapshot.
                    let keys: Vec<_> = (0..600).step_by(10).map(key).collect();
                    let got: Vec<_> = s
                        .multi_get(&keys)
                        .unwrap()
                        .into_iter()
                        .map(|v| v.map(|v| v.to_vec()))
                        .collect();
                    let want: Vec<_> = keys.iter().map(|k| m.get(k).cloned()).collect();
                    assert_eq!(got, want, "snapshot multi_get");
                }
            }
            Op::Flush => d.flush().unwrap(),
            Op::Compact => {
                d.compact().unwrap();
                let s = d.stats();
                let nonempty = s.tables_per_level.iter().filter(|&&n| n > 0).count();
                assert!(
                    nonempty <= 1,
                    "after a full compaction all tables share one level: {:?}",
                    s.tables_per_level
                );
                assert_eq!(s.tables_per_level[0], 0);
            }
            Op::Reopen => {
                snap = None;
                work.add(d);
                db.take().unwrap().close().unwrap();
                db = Some(Db::open(dir.path(), options()).unwrap());
            }
        }
    }
    let d = db.as_ref().unwrap();
    let all = scan(d, Bound::Unbounded, Bound::Unbounded);
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all, want, "final scan");
    drop(snap);
    work.add(d);
    db.take().unwrap().close().unwrap();
    let d = Db::open(dir.path(), options()).unwrap();
    assert_eq!(scan(&d, Bound::Unbounded, Bound::Unbounded), want, "final scan after reopen");
    work
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_btreemap(ops in prop::collection::vec(op(), 200..1500)) {
        run(ops);
    }
}

/// A long deterministic run that certainly drives several levels.
#[test]
fn long_sequence_reaches_deeper_levels() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let ops: Vec<Op> = (0..20_000)
        .map(|i| match rng.gen_range(0..100) {
            0..=69 => Op::Put(rng.gen_range(0..5000), rng.gen()),
            70..=84 => Op::Delete(rng.gen_range(0..5000)),
            85..=94 => Op::Get(rng.gen_range(0..5000)),
            95..=96 => Op::MultiGet((0..40).map(|_| rng.gen_range(0..5000)).collect()),
            97 => Op::Snapshot,
            98 => Op::CheckSnapshot,
            _ if i % 7 == 0 => Op::Reopen,
            _ => Op::Range(rng.gen_range(0..2500), rng.gen_range(2500..5000)),
        })
        .collect();
    let work = run(ops);
    assert!(work.flushes >= 20 && work.compactions >= 10, "{work:?}");
    assert!(work.deepest_level >= 2, "{work:?}");
}
