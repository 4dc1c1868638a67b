//! Three raft nodes on bloomkv in one process, talking through direct calls: write, shut the
//! leader down, find every acknowledged write on the new leader, then restart the old leader
//! from its directory and watch it catch up by snapshot. And a snapshot damaged on its way to
//! a learner: refused, sent again, installed.
// The errors are openraft's network errors, returned by value as its traits want them.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloomkv_raft::{Command, KvReader, NodeId, Outcome, Raft, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, ServerState, SnapshotPolicy};

/// Every wait for the cluster gives up after this long (it normally takes milliseconds).
const PATIENCE: Option<Duration> = Some(Duration::from_secs(20));

/// The running nodes by id; a node that is down is absent, and RPCs to it fail as unreachable.
#[derive(Clone, Default)]
struct Router {
    nodes: Arc<Mutex<BTreeMap<NodeId, Raft>>>,
    /// The first snapshot chunk sent at or after this offset has a byte flipped.
    damage_from: Arc<Mutex<Option<u64>>>,
}

struct Connection {
    target: NodeId,
    nodes: Arc<Mutex<BTreeMap<NodeId, Raft>>>,
    damage_from: Arc<Mutex<Option<u64>>>,
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection { target, nodes: self.nodes.clone(), damage_from: self.damage_from.clone() }
    }
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl Connection {
    fn target<E: std::error::Error>(&self) -> RpcResult<Raft, E> {
        let down = || std::io::Error::new(std::io::ErrorKind::NotConnected, "node is down");
        let nodes = self.nodes.lock().unwrap();
        nodes
            .get(&self.target)
            .cloned()
            .ok_or_else(|| RPCError::Unreachable(Unreachable::new(&down())))
    }

    /// Passes each request through its wire encoding, as a real network would.
    fn wire<T: serde::Serialize + serde::de::DeserializeOwned, E: std::error::Error>(
        value: T,
    ) -> RpcResult<T, E> {
        let bytes =
            serde_json::to_vec(&value).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        serde_json::from_slice(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        req: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let raft = self.target()?;
        let resp = raft.append_entries(Self::wire(req)?).await;
        resp.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        req: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let raft = self.target()?;
        let mut req = Self::wire(req)?;
        {
            let mut damage = self.damage_from.lock().unwrap();
            if damage.is_some_and(|from| req.offset >= from && !req.data.is_empty()) {
                let middle = req.data.len() / 2;
                req.data[middle] ^= 0x01;
                *damage = None;
            }
        }
        let resp = raft.install_snapshot(req).await;
        resp.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        req: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        let raft = self.target()?;
        let resp = raft.vote(Self::wire(req)?).await;
        resp.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

struct Node {
    raft: Raft,
    kv: KvReader,
}

async fn start(id: NodeId, dir: &Path, router: &Router, config: &Arc<Config>) -> Node {
    let (log, sm) = bloomkv_raft::open(dir, bloomkv::Options::default()).unwrap();
    let kv = sm.reader();
    let raft = Raft::new(id, config.clone(), router.clone(), log, sm).await.unwrap();
    router.nodes.lock().unwrap().insert(id, raft.clone());
    Node { raft, kv }
}

/// Takes the node off the network, stops it, and closes its database.
async fn kill(id: NodeId, node: Node, router: &Router) {
    router.nodes.lock().unwrap().remove(&id);
    node.raft.shutdown().await.unwrap();
    node.kv.close().unwrap();
}

fn key(i: u64) -> String {
    format!("key-{i:05}")
}

fn value(i: u64) -> String {
    format!("value-{i}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover_and_catch_up_by_snapshot() {
    let config = Arc::new(
        Config {
            heartbeat_interval: 50,
            election_timeout_min: 200,
            election_timeout_max: 400,
            // Small, so that the writes below make snapshots and purge the log.
            snapshot_policy: SnapshotPolicy::LogsSinceLast(40),
            max_in_snapshot_log_to_keep: 0,
            purge_batch_size: 1,
            ..Default::default()
        }
        .validate()
        .unwrap(),
    );
    let dirs = tempfile::tempdir().unwrap();
    let dir = |id: NodeId| dirs.path().join(format!("node-{id}"));
    let router = Router::default();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start(id, &dir(id), &router, &config).await);
    }
    let members: BTreeMap<NodeId, BasicNode> =
        (1..=3).map(|id| (id, BasicNode::new(format!("node-{id}")))).collect();
    nodes[&1].raft.initialize(members).await.unwrap();
    let m = nodes[&1].raft.wait(PATIENCE).metrics(|m| m.current_leader.is_some(), "a leader").await;
    let old_leader = m.unwrap().current_leader.unwrap();

    // A client writes through the leader until it goes away; every write it saw succeed is
    // acknowledged, and must survive.
    let (count_tx, mut count_rx) = tokio::sync::watch::channel(0u64);
    let writer = {
        let raft = nodes[&old_leader].raft.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0.. {
                match raft.client_write(Command::put(key(i), value(i))).await {
                    Ok(resp) => {
                        assert_eq!(resp.data, Outcome::Applied);
                        acked.push(i);
                        count_tx.send_replace(acked.len() as u64);
                    }
                    Err(_) => break, // the leader is shutting down
                }
            }
            acked
        })
    };
    count_rx.wait_for(|&n| n >= 100).await.unwrap();
    kill(old_leader, nodes.remove(&old_leader).unwrap(), &router).await;
    let acked = writer.await.unwrap();
    assert!(acked.len() >= 100);
    let old_last_index = {
        let (mut log, sm) = bloomkv_raft::open(dir(old_leader), Default::default()).unwrap();
        let state = openraft::storage::RaftLogStorage::get_log_state(&mut log).await.unwrap();
        sm.reader().close().unwrap();
        state.last_log_id.unwrap().index
    };

    // The two others elect a new leader, which holds every acknowledged write.
    let survivor = nodes.keys().next().copied().unwrap();
    let m = nodes[&survivor]
        .raft
        .wait(PATIENCE)
        .metrics(|m| m.current_leader.is_some_and(|l| l != old_leader), "a new leader")
        .await
        .unwrap();
    let leader = m.current_leader.unwrap();
    nodes[&leader].raft.wait(PATIENCE).state(ServerState::Leader, "leading").await.unwrap();
    nodes[&leader].raft.ensure_linearizable().await.unwrap();
    for &i in &acked {
        let got = nodes[&leader].kv.get(key(i).as_bytes()).unwrap();
        assert_eq!(got.as_deref(), Some(value(i).as_bytes()), "acknowledged {}", key(i));
    }

    // Enough further writes for snapshots, and a log purged past the old leader's last entry:
    // it cannot catch up from the log any more.
    let first_new = acked.last().unwrap() + 1_000;
    for i in first_new..first_new + 150 {
        let resp = nodes[&leader].raft.client_write(Command::put(key(i), value(i))).await;
        assert_eq!(resp.unwrap().data, Outcome::Applied);
    }
    let m = nodes[&leader]
        .raft
        .wait(PATIENCE)
        .metrics(|m| m.purged.is_some_and(|p| p.index > old_last_index), "log purged")
        .await
        .unwrap();
    let leader_applied = m.last_applied.unwrap().index;

    // The old leader restarts from its directory and is brought up to date.
    let node = start(old_leader, &dir(old_leader), &router, &config).await;
    let m = node
        .raft
        .wait(PATIENCE)
        .applied_index_at_least(Some(leader_applied), "caught up")
        .await
        .unwrap();
    let snapshot = m.snapshot.expect("the restarted node holds a snapshot");
    assert!(snapshot.index > old_last_index, "{snapshot} vs its log up to {old_last_index}");
    let on_leader: Vec<_> = nodes[&leader].kv.scan().map(Result::unwrap).collect();
    let on_restarted: Vec<_> = node.kv.scan().map(Result::unwrap).collect();
    assert!(on_leader.len() >= acked.len() + 150);
    assert!(on_restarted == on_leader, "the restarted node's data differs from the leader's");
    nodes.insert(old_leader, node);

    for (id, node) in nodes {
        kill(id, node, &router).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_damaged_on_the_way_is_refused_then_sent_again() {
    let config = Arc::new(
        Config {
            heartbeat_interval: 50,
            election_timeout_min: 200,
            election_timeout_max: 400,
            // Small chunks, so that the damaged one is neither the first nor the last.
            snapshot_max_chunk_size: 1 << 10,
            ..Default::default()
        }
        .validate()
        .unwrap(),
    );
    let dirs = tempfile::tempdir().unwrap();
    let dir = |id: NodeId| dirs.path().join(format!("node-{id}"));
    let router = Router::default();
    let leader = start(1, &dir(1), &router, &config).await;
    let members = BTreeMap::from([(1, BasicNode::new("node-1"))]);
    leader.raft.initialize(members).await.unwrap();
    leader.raft.wait(PATIENCE).state(ServerState::Leader, "leading").await.unwrap();
    for i in 0..200 {
        let resp = leader.raft.client_write(Command::put(key(i), value(i))).await.unwrap();
        assert_eq!(resp.data, Outcome::Applied);
    }
    let last = leader.raft.metrics().borrow().last_applied.unwrap().index;
    leader.raft.trigger().snapshot().await.unwrap();
    let taken =
        |m: &openraft::RaftMetrics<NodeId, BasicNode>| m.snapshot.is_some_and(|s| s.index >= last);
    leader.raft.wait(PATIENCE).metrics(taken, "snapshot taken").await.unwrap();
    leader.raft.trigger().purge_log(last).await.unwrap();
    let purged =
        |m: &openraft::RaftMetrics<NodeId, BasicNode>| m.purged.is_some_and(|p| p.index >= last);
    leader.raft.wait(PATIENCE).metrics(purged, "log purged").await.unwrap();

    *router.damage_from.lock().unwrap() = Some(2 << 10);
    let learner = start(2, &dir(2), &router, &config).await;
    leader.raft.add_learner(2, BasicNode::new("node-2"), false).await.unwrap();
    let m =
        learner.raft.wait(PATIENCE).applied_index_at_least(Some(last), "caught up").await.unwrap();
    assert!(router.damage_from.lock().unwrap().is_none(), "no chunk was damaged");
    assert!(m.running_state.is_ok(), "the learner stopped: {:?}", m.running_state);
    assert!(m.snapshot.is_some_and(|s| s.index >= last), "{m:?}");
    let on_leader: Vec<_> = leader.kv.scan().map(Result::unwrap).collect();
    let on_learner: Vec<_> = learner.kv.scan().map(Result::unwrap).collect();
    assert_eq!(on_learner.len(), 200);
    assert!(on_learner == on_leader, "the learner's data differs from the leader's");
    // The refused file is gone; only the installed snapshot is left.
    let files = std::fs::read_dir(dir(2).join("snapshots")).unwrap().count();
    assert_eq!(files, 1);

    kill(2, learner, &router).await;
    kill(1, leader, &router).await;
}
