//! Three nodes, each hosting eight raft groups in one database, talking through direct calls:
//! writes to every group at once, the node leading them all killed mid-write, more writes on
//! the new leaders, snapshots and a purged log, and the killed node restarted from its
//! directory, catching up every group by snapshot. Every acknowledged write is then in its
//! group exactly once, on every node, and in no other group.

mod direct;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloomkv_raft::{Command, GroupId, KvReader, NodeId, NodeStore, Outcome, Raft, TypeConfig};
use direct::GroupNetwork;
use openraft::{BasicNode, Config, RaftMetrics};

const PATIENCE: Option<Duration> = Some(Duration::from_secs(30));
/// Group 0 (the default keyspace, as a single-group node has it) and seven more.
const GROUPS: std::ops::Range<GroupId> = 0..8;

type Rafts = Arc<Mutex<BTreeMap<(GroupId, NodeId), Raft>>>;

impl direct::Lookup for Rafts {
    fn raft(&self, group: GroupId, node: NodeId) -> Option<Raft> {
        self.lock().unwrap().get(&(group, node)).cloned()
    }
}

/// One node: its database and, by group, the raft and a reader of its data.
struct Node {
    store: NodeStore,
    groups: BTreeMap<GroupId, (Raft, KvReader)>,
}

async fn start(id: NodeId, dir: &Path, rafts: &Rafts, config: &Arc<Config>) -> Node {
    let store = NodeStore::open(dir, bloomkv::Options::default()).unwrap();
    let mut groups = BTreeMap::new();
    for group in GROUPS {
        let (log, sm) = store.group(group).unwrap();
        let kv = sm.reader();
        let network = GroupNetwork { group, rafts: rafts.clone() };
        let raft = Raft::new(id, config.clone(), network, log, sm).await.unwrap();
        rafts.lock().unwrap().insert((group, id), raft.clone());
        groups.insert(group, (raft, kv));
    }
    Node { store, groups }
}

/// Takes the node off the network, stops every group, and closes its database.
async fn kill(id: NodeId, node: Node, rafts: &Rafts) {
    rafts.lock().unwrap().retain(|&(_, node), _| node != id);
    for (raft, _) in node.groups.values() {
        raft.shutdown().await.unwrap();
    }
    node.store.close().unwrap();
}

fn key(group: GroupId, i: u64) -> String {
    format!("g{group}/key-{i:04}")
}

fn value(group: GroupId, i: u64) -> String {
    format!("value-{group}-{i}")
}

/// The writes acknowledged so far, by group, and a wake-up for whoever waits on them.
#[derive(Clone, Default)]
struct Acked {
    writes: Arc<Mutex<BTreeMap<GroupId, BTreeSet<u64>>>>,
    changed: Arc<tokio::sync::Notify>,
}

impl Acked {
    fn add(&self, group: GroupId, i: u64) {
        self.writes.lock().unwrap().entry(group).or_default().insert(i);
        self.changed.notify_one();
    }
}

/// Writes `key(group, i)` for `i` from 0 through `raft` until a write fails.
async fn write_until_failure(raft: Raft, group: GroupId, acked: Acked) {
    for i in 0.. {
        match raft.client_write(Command::put(key(group, i), value(group, i))).await {
            Ok(resp) => {
                assert_eq!(resp.data, Outcome::Applied);
                acked.add(group, i);
            }
            Err(_) => return,
        }
    }
}

/// Writes `key(group, i)` for `i` in `range` through whichever node leads the group, retrying
/// a write whose leader went away on the next leader (a put applied twice is the same put).
async fn write(rafts: &Rafts, group: GroupId, range: std::ops::Range<u64>, acked: Acked) {
    for i in range {
        let mut attempts = 0;
        loop {
            let raft = leader(rafts, group).await;
            match raft.client_write(Command::put(key(group, i), value(group, i))).await {
                Ok(resp) => {
                    assert_eq!(resp.data, Outcome::Applied);
                    acked.add(group, i);
                    break;
                }
                Err(e) => {
                    attempts += 1;
                    assert!(attempts < 20, "group {group}, write {i}: {e}");
                    // Wait for the group to know a leader other than the one that failed.
                    let me = raft.metrics().borrow().id;
                    let moved = |m: &RaftMetrics<NodeId, BasicNode>| {
                        m.current_leader.is_some_and(|l| l != me)
                    };
                    let _ = raft.wait(PATIENCE).metrics(moved, "another leader").await;
                }
            }
        }
    }
}

/// The raft of the node that leads `group`, once one does.
async fn leader(rafts: &Rafts, group: GroupId) -> Raft {
    let any = {
        let rafts = rafts.lock().unwrap();
        rafts.iter().find(|((g, _), _)| *g == group).map(|(_, r)| r.clone()).unwrap()
    };
    let up: BTreeSet<NodeId> = rafts.lock().unwrap().keys().map(|&(_, n)| n).collect();
    let m = any
        .wait(PATIENCE)
        .metrics(|m| m.current_leader.is_some_and(|l| up.contains(&l)), "a live leader")
        .await
        .unwrap();
    let id = m.current_leader.unwrap();
    rafts.lock().unwrap()[&(group, id)].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_groups_share_a_database_and_survive_a_restart() {
    let config = Arc::new(
        Config {
            heartbeat_interval: 50,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Default::default()
        }
        .validate()
        .unwrap(),
    );
    let dirs = tempfile::tempdir().unwrap();
    let dir = |id: NodeId| dirs.path().join(format!("node-{id}"));
    let rafts: Rafts = Default::default();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start(id, &dir(id), &rafts, &config).await);
    }
    let members: BTreeMap<NodeId, BasicNode> =
        (1..=3).map(|id| (id, BasicNode::new(format!("node-{id}")))).collect();
    for group in GROUPS {
        let raft = &nodes[&1].groups[&group].0;
        raft.initialize(members.clone()).await.unwrap();
        raft.wait(PATIENCE).metrics(|m| m.current_leader == Some(1), "node 1 leads").await.unwrap();
    }

    // Every group written at once, through node 1, until node 1 goes away mid-write.
    let acked = Acked::default();
    let writers: Vec<_> = GROUPS
        .map(|group| {
            let (raft, acked) = (nodes[&1].groups[&group].0.clone(), acked.clone());
            tokio::spawn(write_until_failure(raft, group, acked))
        })
        .collect();
    loop {
        let written = acked.writes.lock().unwrap().clone();
        if GROUPS.clone().all(|g| written.get(&g).is_some_and(|a| a.len() >= 30)) {
            break;
        }
        acked.changed.notified().await;
    }
    kill(1, nodes.remove(&1).unwrap(), &rafts).await;
    for writer in writers {
        writer.await.unwrap();
    }
    // Whatever node 1 appended, the writes it was given and may not have acknowledged.
    let attempted_first: BTreeMap<GroupId, u64> = {
        let acked = acked.writes.lock().unwrap();
        GROUPS.map(|g| (g, acked[&g].iter().max().unwrap() + 1)).collect()
    };
    let old_last: BTreeMap<GroupId, u64> = {
        let store = NodeStore::open(dir(1), Default::default()).unwrap();
        assert_eq!(store.group_ids(), GROUPS.collect::<Vec<_>>());
        let mut last = BTreeMap::new();
        for group in GROUPS {
            let (mut log, _sm) = store.group(group).unwrap();
            let state = openraft::storage::RaftLogStorage::get_log_state(&mut log).await.unwrap();
            last.insert(group, state.last_log_id.unwrap().index);
        }
        store.close().unwrap();
        last
    };

    // More writes on the new leaders, then a snapshot and a log purged past node 1's last
    // entry in every group: node 1 can catch up by snapshot only.
    let writers: Vec<_> = GROUPS
        .map(|group| {
            let (rafts, acked) = (rafts.clone(), acked.clone());
            tokio::spawn(async move { write(&rafts, group, 1_000..1_040, acked).await })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let mut leader_applied = BTreeMap::new();
    for group in GROUPS {
        let raft = leader(&rafts, group).await;
        let last = raft.metrics().borrow().last_applied.unwrap().index;
        assert!(last > old_last[&group]);
        raft.trigger().snapshot().await.unwrap();
        let taken =
            |m: &RaftMetrics<NodeId, BasicNode>| m.snapshot.is_some_and(|s| s.index >= last);
        raft.wait(PATIENCE).metrics(taken, "snapshot taken").await.unwrap();
        raft.trigger().purge_log(last).await.unwrap();
        let purged = |m: &RaftMetrics<NodeId, BasicNode>| m.purged.is_some_and(|p| p.index >= last);
        raft.wait(PATIENCE).metrics(purged, "log purged").await.unwrap();
        leader_applied.insert(group, last);
    }

    // Node 1 restarts from its directory; each of its groups installs its own snapshot.
    nodes.insert(1, start(1, &dir(1), &rafts, &config).await);
    for (id, node) in &nodes {
        for group in GROUPS {
            let raft = &node.groups[&group].0;
            let m = raft
                .wait(PATIENCE)
                .applied_index_at_least(Some(leader_applied[&group]), "caught up")
                .await
                .unwrap();
            if *id == 1 {
                let snapshot = m.snapshot.expect("a snapshot");
                assert!(snapshot.index > old_last[&group], "group {group}: {snapshot}");
            }
        }
    }
    let snapshot_files = |path: &Path| {
        std::fs::read_dir(path)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "snap"))
            .count()
    };
    assert_eq!(snapshot_files(&dir(1).join("snapshots")), 1, "group 0's");
    for group in 1..GROUPS.end {
        let path = dir(1).join("snapshots").join(format!("group-{group}"));
        assert_eq!(snapshot_files(&path), 1, "group {group}'s");
    }

    // Every acknowledged write in its group, with its value, and nothing else there: no key
    // of another group, no key never written.
    let acked = acked.writes.lock().unwrap().clone();
    for (id, node) in &nodes {
        for group in GROUPS {
            let kv = &node.groups[&group].1;
            let held: BTreeMap<Vec<u8>, Vec<u8>> =
                kv.scan().map(|r| r.unwrap()).map(|(k, v)| (k, v.to_vec())).collect();
            for &i in &acked[&group] {
                let got = held.get(key(group, i).as_bytes());
                assert_eq!(got.map(Vec::as_slice), Some(value(group, i).as_bytes()), "node {id}");
            }
            let written = |i: u64| i <= attempted_first[&group] || (1_000..1_040).contains(&i);
            for (k, v) in &held {
                let k = String::from_utf8(k.clone()).unwrap();
                let i: u64 = k
                    .strip_prefix(&format!("g{group}/key-"))
                    .unwrap_or_else(|| panic!("node {id}, group {group} holds {k}"))
                    .parse()
                    .unwrap();
                assert!(written(i), "node {id}, group {group}: {k} was never written");
                assert_eq!(v.as_slice(), value(group, i).as_bytes());
            }
            assert!(held.len() >= acked[&group].len());
        }
    }
    // The three nodes agree, group by group.
    for group in GROUPS {
        let scans: Vec<Vec<_>> = nodes
            .values()
            .map(|n| n.groups[&group].1.scan().map(Result::unwrap).collect())
            .collect();
        assert!(scans.windows(2).all(|w| w[0] == w[1]), "group {group} differs between nodes");
    }

    for (id, node) in std::mem::take(&mut nodes) {
        kill(id, node, &rafts).await;
    }
}

/// Hands openraft's storage suite group 7 of a node whose groups 0 and 3 hold a vote, a
/// committed id, an applied state and data of their own: the suite's checks of an empty or a written store hold only if nothing of the
/// other groups leaks into group 7, nor anything of group 7 into them.
struct GroupSevenStores;

/// What the suite keeps while it tests a store: the directory, and the other groups.
type Guard = (tempfile::TempDir, Vec<bloomkv_raft::StateMachine>);

impl
    openraft::testing::StoreBuilder<
        TypeConfig,
        bloomkv_raft::LogStore,
        bloomkv_raft::StateMachine,
        Guard,
    > for GroupSevenStores
{
    async fn build(
        &self,
    ) -> Result<
        (Guard, bloomkv_raft::LogStore, bloomkv_raft::StateMachine),
        bloomkv_raft::StorageError,
    > {
        use openraft::storage::{RaftLogStorage, RaftStateMachine};
        use openraft::testing::log_id;
        use openraft::{Entry, EntryPayload};
        let io = |e: &dyn std::fmt::Display| {
            openraft::StorageIOError::new(
                openraft::ErrorSubject::Store,
                openraft::ErrorVerb::Write,
                openraft::AnyError::error(e),
            )
        };
        let dir = tempfile::tempdir().map_err(|e| io(&e))?;
        let node = NodeStore::open(dir.path(), bloomkv::Options::default()).map_err(|e| io(&e))?;
        let mut others = Vec::new();
        for group in [0, 3] {
            let (mut log, mut sm) = node.group(group).map_err(|e| io(&e))?;
            let entries: Vec<Entry<TypeConfig>> = (1..=5)
                .map(|i| Entry {
                    log_id: log_id(2, 2, i),
                    payload: EntryPayload::Normal(Command::put(format!("other-{i}"), "x")),
                })
                .collect();
            log.save_vote(&openraft::Vote::new(2, 2)).await?;
            log.save_committed(Some(log_id(2, 2, 5))).await?;
            sm.apply(entries).await?;
            others.push(sm);
        }
        let (log, sm) = node.group(7).map_err(|e| io(&e))?;
        Ok(((dir, others), log, sm))
    }
}

#[test]
fn openraft_storage_suite_on_a_group_beside_others() {
    openraft::testing::Suite::test_all(GroupSevenStores).expect("openraft's storage suite");
}
