//! Idle groups stop ticking, and still fail over: three `ShardNode`s over the in-process
//! network (each RPC and ping through its JSON encoding) with a group of three voters go
//! quiet, send no raft RPC over several rounds, wake for a write, and when the node leading
//! them is stopped the other two elect new leaders with no tick of their own left running.
//! A lone node's groups are quiet with no pings at all.
//!
//! Every wait is on an event (a round of a node's loop, a raft's metrics), bounded by a
//! patience that only a failure reaches.

mod direct;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloomkv_raft::shard::{ShardMap, META_GROUP};
use bloomkv_raft::{Command, GroupId, NodeId, Outcome, Ping, Pong, QuietStats, TypeConfig};
use bloomkv_raft::{ShardError, ShardNode, Transport};
use direct::GroupNetwork;
use openraft::raft::ClientWriteResponse;
use openraft::{BasicNode, Config};

const PATIENCE: Duration = Duration::from_secs(60);

/// The running nodes, and the raft RPCs sent to each group so far.
#[derive(Clone, Default)]
struct Net {
    nodes: Arc<Mutex<BTreeMap<NodeId, ShardNode<Net>>>>,
    rpcs: Arc<Mutex<HashMap<GroupId, u64>>>,
    /// Whether pings are carried (a transport without them is `Transport`'s default).
    pings: bool,
}

impl Net {
    fn node(&self, id: NodeId) -> Option<ShardNode<Net>> {
        self.nodes.lock().unwrap().get(&id).cloned()
    }

    fn rpcs(&self, group: GroupId) -> u64 {
        self.rpcs.lock().unwrap().get(&group).copied().unwrap_or(0)
    }
}

impl direct::Lookup for Net {
    /// Called once for every RPC a raft sends.
    fn raft(&self, group: GroupId, node: NodeId) -> Option<bloomkv_raft::Raft> {
        *self.rpcs.lock().unwrap().entry(group).or_default() += 1;
        self.node(node).and_then(|n| n.raft(group))
    }
}

fn wire<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    serde_json::from_slice(&serde_json::to_vec(value).unwrap()).unwrap()
}

impl Transport for Net {
    type Network = GroupNetwork<Net>;

    fn network(&self, group: GroupId) -> GroupNetwork<Net> {
        GroupNetwork { group, rafts: self.clone() }
    }

    async fn forward(
        &self,
        node: NodeId,
        group: GroupId,
        command: Command,
    ) -> Result<ClientWriteResponse<TypeConfig>, ShardError> {
        let target = self.node(node).ok_or_else(|| ShardError::Raft("node is down".into()))?;
        target.propose_local(group, command).await
    }

    async fn ping(&self, node: NodeId, ping: Ping) -> Result<Pong, ShardError> {
        if !self.pings {
            return Err(ShardError::Rejected("no pings".into()));
        }
        let target = self.node(node).ok_or_else(|| ShardError::Raft("node is down".into()))?;
        Ok(wire(&target.answer_ping(&wire(&ping))))
    }
}

fn config() -> Arc<Config> {
    let config = Config {
        heartbeat_interval: 50,
        election_timeout_min: 300,
        election_timeout_max: 600,
        ..Default::default()
    };
    Arc::new(config.validate().unwrap())
}

struct Cluster {
    net: Net,
    dirs: tempfile::TempDir,
}

impl Cluster {
    fn new(pings: bool) -> Cluster {
        let net = Net { pings, ..Net::default() };
        Cluster { net, dirs: tempfile::tempdir().unwrap() }
    }

    fn dir(&self, id: NodeId) -> PathBuf {
        self.dirs.path().join(format!("node-{id}"))
    }

    async fn start(&self, id: NodeId) -> ShardNode<Net> {
        let options = bloomkv::Options::default();
        let node = ShardNode::open(id, self.dir(id), options, config(), self.net.clone());
        let node = node.await.unwrap();
        self.net.nodes.lock().unwrap().insert(id, node.clone());
        node
    }

    /// Takes the node off the network and stops it.
    async fn stop(&self, id: NodeId) {
        let node = self.net.nodes.lock().unwrap().remove(&id).unwrap();
        node.shutdown().await.unwrap();
    }

    fn node(&self, id: NodeId) -> ShardNode<Net> {
        self.net.node(id).unwrap()
    }

    fn live(&self) -> Vec<ShardNode<Net>> {
        self.net.nodes.lock().unwrap().values().cloned().collect()
    }
}

fn members(ids: impl IntoIterator<Item = NodeId>) -> BTreeMap<NodeId, BasicNode> {
    ids.into_iter().map(|id| (id, BasicNode::new(format!("node-{id}")))).collect()
}

/// Waits until `node`'s loop has run a round, begun after this call, after which `done` holds:
/// a round reads its groups' state as it begins.
async fn until(node: &ShardNode<Net>, done: impl Fn(&QuietStats) -> bool) -> QuietStats {
    let mut stats = node.watch_quiet();
    let from = stats.borrow().rounds;
    let wait = stats.wait_for(|s| s.rounds > from + 1 && done(s));
    let got = *tokio::time::timeout(PATIENCE, wait).await.expect("in time").unwrap();
    got
}

/// Waits until every live node has run `rounds` more rounds of its loop.
async fn rounds(cluster: &Cluster, rounds: u64) {
    for node in cluster.live() {
        let now = node.watch_quiet().borrow().rounds;
        until(&node, |s| s.rounds >= now + 1 + rounds).await;
    }
}

/// Waits until every live node's every group is quiet.
async fn all_quiet(cluster: &Cluster) {
    for node in cluster.live() {
        let groups = node.groups().len();
        until(&node, |s| s.groups == groups && s.quiet == groups).await;
    }
}

/// The leader of `group` as `node` knows it, once it knows one other than `not`.
async fn leader(node: &ShardNode<Net>, group: GroupId, not: Option<NodeId>) -> NodeId {
    let raft = node.raft(group).unwrap();
    let other = |m: &openraft::RaftMetrics<NodeId, BasicNode>| {
        m.current_leader.is_some_and(|l| Some(l) != not)
    };
    let m = raft.wait(Some(PATIENCE)).metrics(other, "a leader").await.unwrap();
    m.current_leader.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_groups_go_quiet_wake_for_a_write_and_elect_when_their_leader_dies() {
    let cluster = Cluster::new(true);
    for id in 1..=3 {
        cluster.start(id).await;
    }
    let map = ShardMap::new(1, [1, 2, 3]).unwrap();
    cluster.node(1).bootstrap(map, members(1..=3)).await.unwrap();
    assert_eq!(cluster.node(2).write(Command::put("a", "1")).await.unwrap(), Outcome::Applied);

    // Every group on every node goes quiet, and then no raft RPC of group 1 is sent while
    // every node runs five more rounds (ten heartbeat intervals; a tick already on its way
    // when the group went quiet is let through by one round first).
    all_quiet(&cluster).await;
    rounds(&cluster, 1).await;
    let before = cluster.net.rpcs(1);
    rounds(&cluster, 5).await;
    assert_eq!(cluster.net.rpcs(1), before, "a quiet group sent raft RPCs");

    // A write wakes it: acknowledged, applied on every member, and the group quiet again.
    let leader_1 = leader(&cluster.node(3), 1, None).await;
    let resp = cluster.node(leader_1).propose(1, Command::put("b", "2")).await.unwrap();
    assert_eq!(resp.data, Outcome::Applied);
    for node in cluster.live() {
        let raft = node.raft(1).unwrap();
        let index = Some(resp.log_id.index);
        raft.wait(Some(PATIENCE)).applied_index_at_least(index, "b").await.unwrap();
        assert_eq!(node.reader(1).unwrap().get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    }
    all_quiet(&cluster).await;

    // The node leading group 1 stops while every group is quiet: no follower's election timer
    // runs, and the other two elect a leader of it (and of the metadata group, if it led
    // that too) once their pings to it go unanswered.
    cluster.stop(leader_1).await;
    let survivor = cluster.live()[0].clone();
    let new_leader = leader(&survivor, 1, Some(leader_1)).await;
    assert_ne!(new_leader, leader_1);
    let outcome = survivor.write(Command::put("c", "3")).await.unwrap();
    assert_eq!(outcome, Outcome::Applied);
    let meta_leader = leader(&survivor, META_GROUP, Some(leader_1)).await;
    assert_ne!(meta_leader, leader_1);
    let resp = cluster.node(new_leader).propose(1, Command::Batch(Vec::new())).await.unwrap();
    for node in cluster.live() {
        let raft = node.raft(1).unwrap();
        let index = Some(resp.log_id.index);
        raft.wait(Some(PATIENCE)).applied_index_at_least(index, "c").await.unwrap();
        let kv = node.reader(1).unwrap();
        let keys: Vec<Vec<u8>> = kv.scan().map(|r| r.unwrap().0).collect();
        assert_eq!(keys, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    }
    for node in cluster.live() {
        cluster.stop(node.id()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_nodes_groups_are_quiet_without_pings_and_take_writes() {
    let cluster = Cluster::new(false);
    let node = cluster.start(1).await;
    let map = ShardMap::from_ranges(1, [(vec![], 1, [1].into()), (b"m".to_vec(), 2, [1].into())]);
    node.bootstrap(map.unwrap(), members([1])).await.unwrap();
    all_quiet(&cluster).await;
    assert_eq!(node.watch_quiet().borrow().quiet, 3, "groups 1, 2 and the metadata group");
    for key in ["apple", "melon"] {
        assert_eq!(node.write(Command::put(key, "v")).await.unwrap(), Outcome::Applied);
    }
    assert_eq!(node.reader(2).unwrap().get(b"melon").unwrap().as_deref(), Some(&b"v"[..]));
    all_quiet(&cluster).await;
    cluster.stop(1).await;
}
