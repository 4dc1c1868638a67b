//! Power cuts in the middle of the stores' writes, on bloomkv's fault-injecting file system:
//! whatever survives must be a state the stores could have been in, never half a write.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use bloomkv::fs::{CrashMode, Fault, FaultFs, OpKind};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload, RaftLogReader};

use crate::{Command, LogStore, StateMachine, TypeConfig};

fn open_on(fs: &FaultFs, dir: &Path) -> (LogStore, StateMachine) {
    crate::open(dir, bloomkv::Options::default().file_system(Arc::new(fs.clone()))).unwrap()
}

fn normal(index: u64, command: Command) -> Entry<TypeConfig> {
    Entry { log_id: log_id(1, 1, index), payload: EntryPayload::Normal(command) }
}

fn blank(index: u64) -> Entry<TypeConfig> {
    Entry { log_id: log_id(1, 1, index), payload: EntryPayload::Blank }
}

/// The keys entry `i` writes: every third entry is a batch of two.
fn entry_keys(i: u64) -> Vec<String> {
    match i % 3 {
        0 => vec![format!("k{i}a"), format!("k{i}b")],
        _ => vec![format!("k{i}")],
    }
}

fn command(i: u64) -> Command {
    let puts: Vec<Command> =
        entry_keys(i).iter().map(|k| Command::put(k, format!("v{i}"))).collect();
    match puts.len() {
        1 => puts.into_iter().next().unwrap(),
        _ => Command::Batch(puts),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_never_separates_the_data_from_the_applied_id() {
    const ENTRIES: u64 = 30;
    let mut seen_applied = BTreeSet::new();
    for seed in 0..40u64 {
        let fs = FaultFs::new();
        let dir = std::path::PathBuf::from("/raft-sm");
        let (_log, mut sm) = open_on(&fs, &dir);
        for i in 1..=ENTRIES {
            sm.apply([normal(i, command(i))]).await.unwrap();
        }
        drop(sm);
        // The applies are not fsynced: a random prefix of their WAL bytes survives.
        let after = fs.crash(CrashMode::TornTails { seed });
        let (_log, mut sm) = open_on(&after, &dir);
        let (applied, _) = sm.applied_state().await.unwrap();
        let applied = applied.map_or(0, |id| id.index);
        seen_applied.insert(applied);
        let kv = sm.reader();
        for i in 1..=ENTRIES {
            for key in entry_keys(i) {
                let got = kv.get(key.as_bytes()).unwrap();
                let want = (i <= applied).then(|| format!("v{i}"));
                assert_eq!(
                    got.as_deref(),
                    want.as_deref().map(str::as_bytes),
                    "seed {seed}: {key} with applied index {applied}"
                );
            }
        }
    }
    // The cuts must have landed at many points for the test to mean anything.
    assert!(seen_applied.len() > 10, "applied indexes after the cuts: {seen_applied:?}");
}

/// The log as the store reports it: the indexes it holds must be exactly the run after the
/// last purged id up to the last log id.
async fn assert_one_run(log: &mut LogStore, context: &str) -> (u64, u64) {
    let state = log.get_log_state().await.unwrap();
    let purged = state.last_purged_log_id.map_or(0, |id| id.index);
    let last = state.last_log_id.map_or(0, |id| id.index);
    let held: Vec<u64> =
        log.try_get_log_entries(..).await.unwrap().iter().map(|e| e.log_id.index).collect();
    assert_eq!(held, (purged + 1..=last).collect::<Vec<_>>(), "{context}: purged {purged}");
    (purged, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_in_truncate_or_purge_leaves_no_hole() {
    let mut outcomes = BTreeSet::new();
    for nth_sync in 1..=3u64 {
        for seed in 0..8u64 {
            for purge in [false, true] {
                let fs = FaultFs::new();
                let dir = std::path::PathBuf::from("/raft-log");
                let (mut log, _sm) = open_on(&fs, &dir);
                log.write_entries((1..=20).map(blank)).await.unwrap();
                // Cut the power at the n-th fsync from here: inside the operation, or
                // after it if it needs fewer.
                fs.inject(Fault::on(OpKind::Sync).nth(nth_sync).power_off());
                let _ = match purge {
                    true => log.purge(log_id(1, 1, 10)).await,
                    false => log.truncate(log_id(1, 1, 15)).await,
                };
                drop((log, _sm));
                let after = fs.crash(CrashMode::TornTails { seed });
                let (mut log, _sm) = open_on(&after, &dir);
                let context = format!("purge {purge}, cut at sync {nth_sync}, seed {seed}");
                outcomes.insert(assert_one_run(&mut log, &context).await);
            }
        }
    }
    // Both the state before each operation and the state after it were reached.
    for state in [(0, 20), (10, 20), (0, 14)] {
        assert!(outcomes.contains(&state), "{state:?} not among {outcomes:?}");
    }
}
