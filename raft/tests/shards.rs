//! Shards in process: four nodes (`ShardNode`s talking through direct calls), eight groups
//! on three of them, writers running throughout. A group splits under load, a node is stopped
//! and started again over its directory, and a replica moves to the fourth node under load.
//! Afterwards every acknowledged write is present once, in the group the map gives it to, on
//! every member of that group, and nowhere else; the longest wait of a write is printed per
//! operation. And a split applied by its group but not yet recorded in the map (a crash
//! between the two) takes writes meanwhile, and is recorded when a node starts again. The nodes exchange pings, so idle
//! groups go quiet (stop ticking) throughout. And with a size threshold, a group that grows
//! past it splits by itself, again and again, with the same guarantees for the writes. A
//! move's target becomes a voter only once it holds the group's log, and a move off the
//! leader has the next one campaign as soon as the old one's lease is over.

mod direct;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloomkv_raft::shard::{ShardCommand, ShardMap, META_GROUP};
use bloomkv_raft::{AutoSplit, Command, GroupId, NodeId, Outcome, Ping, Pong, TypeConfig};
use bloomkv_raft::{ShardError, ShardNode, Transport};
use direct::GroupNetwork;
use openraft::raft::ClientWriteResponse;
use openraft::{BasicNode, Config};

const PATIENCE: Option<Duration> = Some(Duration::from_secs(60));

type Nodes = Arc<Mutex<BTreeMap<NodeId, ShardNode<Net>>>>;

/// The running nodes; one that is down is absent, and RPCs to it fail as unreachable.
#[derive(Clone, Default)]
struct Net {
    nodes: Nodes,
}

impl Net {
    fn node(&self, id: NodeId) -> Option<ShardNode<Net>> {
        self.nodes.lock().unwrap().get(&id).cloned()
    }
}

impl direct::Lookup for Net {
    fn raft(&self, group: GroupId, node: NodeId) -> Option<bloomkv_raft::Raft> {
        self.node(node).and_then(|n| n.raft(group))
    }
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
        let target = self.node(node).ok_or_else(|| ShardError::Raft("node is down".into()))?;
        Ok(target.answer_ping(&ping))
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
    config: Arc<Config>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster { net: Net::default(), dirs: tempfile::tempdir().unwrap(), config: config() }
    }

    /// Nodes 1-4 started, the cluster bootstrapped on them with [`first_map`].
    async fn bootstrapped() -> Cluster {
        let cluster = Cluster::new();
        for id in 1..=4 {
            cluster.start(id).await;
        }
        cluster.node(1).bootstrap(first_map(), members(1..=4)).await.unwrap();
        cluster
    }

    async fn stop_all(&self) {
        for node in self.live() {
            self.stop(node.id()).await;
        }
    }

    fn dir(&self, id: NodeId) -> PathBuf {
        self.dirs.path().join(format!("node-{id}"))
    }

    async fn start(&self, id: NodeId) -> ShardNode<Net> {
        let node = open(id, &self.dir(id), &self.config, &self.net).await;
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

    /// The node leading `group`, once one does.
    async fn leader(&self, group: GroupId) -> ShardNode<Net> {
        let any = self.live().into_iter().find_map(|n| n.raft(group)).unwrap();
        let up: BTreeSet<NodeId> = self.net.nodes.lock().unwrap().keys().copied().collect();
        let m = any
            .wait(PATIENCE)
            .metrics(|m| m.current_leader.is_some_and(|l| up.contains(&l)), "a live leader")
            .await
            .unwrap();
        self.node(m.current_leader.unwrap())
    }
}

async fn open(id: NodeId, dir: &Path, config: &Arc<Config>, net: &Net) -> ShardNode<Net> {
    let options = bloomkv::Options::default();
    ShardNode::open(id, dir, options, config.clone(), net.clone()).await.unwrap()
}

fn members(ids: impl IntoIterator<Item = NodeId>) -> BTreeMap<NodeId, BasicNode> {
    ids.into_iter().map(|id| (id, BasicNode::new(format!("node-{id}")))).collect()
}

/// Eight groups, 1 to 8, on nodes 1-3: group `g` serves the keys from `k<g-1>` to `k<g>`.
fn first_map() -> ShardMap {
    let mut map = ShardMap::new(1, [1, 2, 3]).unwrap();
    for g in 2..=8u64 {
        map.split(format!("k{}", g - 1).as_bytes(), g).unwrap();
    }
    map
}

/// A write: the key, its value, and when it was first tried and acknowledged.
struct Acked {
    key: String,
    value: String,
    started: Instant,
    done: Instant,
}

#[derive(Clone, Default)]
struct Log {
    acked: Arc<Mutex<Vec<Acked>>>,
    /// Every key a writer tried, acknowledged or not.
    tried: Arc<Mutex<BTreeSet<String>>>,
    changed: Arc<tokio::sync::Notify>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Log {
    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits until `n` more writes than now are acknowledged.
    async fn more(&self, n: usize) {
        let target = self.count() + n;
        loop {
            let notified = self.changed.notified();
            if self.count() >= target {
                return;
            }
            notified.await;
        }
    }
}

/// Writer `w`'s `n`th key: spread over the eight ranges of [`first_map`].
fn spread_key(w: u64, n: u64) -> String {
    format!("k{}/{:03}/w{w}-{n}", (n * 3 + w) % 8, (n * 37 + w * 11) % 1000)
}

/// Writes keys spread over every range, each through a live node (another one after a
/// failure), until told to stop. Each key is written once: present twice would mean a copy.
async fn writer(net: Net, w: u64, log: Log, key: fn(u64, u64) -> String) {
    for n in 0u64.. {
        if log.stop.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let key = key(w, n);
        let value = format!("value of {key}");
        log.tried.lock().unwrap().insert(key.clone());
        let started = Instant::now();
        for attempt in 0.. {
            let nodes: Vec<_> = net.nodes.lock().unwrap().values().cloned().collect();
            let node = &nodes[(attempt + n as usize) % nodes.len()];
            match node.write(Command::put(&key, &value)).await {
                Ok(outcome) => {
                    assert_eq!(outcome, Outcome::Applied, "{key}");
                    break;
                }
                Err(e) => assert!(attempt < 20, "{key}: {e}"),
            }
        }
        let done = Instant::now();
        log.acked.lock().unwrap().push(Acked { key, value, started, done });
        log.changed.notify_waiters();
    }
}

/// The longest a write that was waiting at some moment in `during` took.
fn longest_wait(log: &Log, during: std::ops::Range<Instant>) -> Duration {
    let acked = log.acked.lock().unwrap();
    acked
        .iter()
        .filter(|a| a.started < during.end && a.done > during.start)
        .map(|a| a.done - a.started)
        .max()
        .unwrap_or_default()
}

/// Checks, once the writers stopped, that every acknowledged write is present once, in the
/// group `map` (the current map) gives it to, on every member of that group, and nowhere else,
/// and that each member's replica has the group's range in the map.
async fn every_write_once(cluster: &Cluster, log: &Log, map: &ShardMap) {
    // Every member of every group caught up with its leader.
    for shard in map.shards() {
        let leader = cluster.leader(shard.group).await.raft(shard.group).unwrap();
        let resp = leader.client_write(Command::Batch(Vec::new())).await.unwrap();
        for member in shard.members {
            let raft = cluster.node(*member).raft(shard.group).unwrap();
            raft.wait(PATIENCE)
                .applied_index_at_least(Some(resp.log_id.index), "caught up")
                .await
                .unwrap();
        }
    }

    // Where each key is: (node, group) for every copy.
    let mut copies: BTreeMap<String, Vec<(NodeId, GroupId, Vec<u8>)>> = BTreeMap::new();
    for node in cluster.live() {
        for group in node.groups().into_iter().filter(|&g| g != META_GROUP) {
            for item in node.reader(group).unwrap().scan() {
                let (key, value) = item.unwrap();
                let key = String::from_utf8(key).unwrap();
                copies.entry(key).or_default().push((node.id(), group, value.to_vec()));
            }
        }
    }
    let tried = log.tried.lock().unwrap().clone();
    for (key, held) in &copies {
        assert!(tried.contains(key), "{key} was never written");
        let owner = map.shard_of(key.as_bytes());
        let on: BTreeSet<NodeId> = held.iter().map(|&(node, _, _)| node).collect();
        assert!(held.iter().all(|(_, g, _)| *g == owner.group), "{key} is in {held:?}");
        assert_eq!(&on, owner.members, "{key}: one copy per member of group {}", owner.group);
        assert_eq!(held.len(), owner.members.len(), "{key}: {held:?}");
    }
    for acked in log.acked.lock().unwrap().iter() {
        let held = copies.get(&acked.key).unwrap_or_else(|| panic!("{} is lost", acked.key));
        assert!(held.iter().all(|(_, _, v)| v == acked.value.as_bytes()), "{}", acked.key);
    }
    for shard in map.shards() {
        for member in shard.members {
            let range = cluster.node(*member).range(shard.group).unwrap().unwrap();
            assert_eq!((range.start.as_slice(), range.end.as_deref()), (shard.start, shard.end));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_a_split_a_restart_and_a_move_exactly_once() {
    let cluster = Cluster::bootstrapped().await;
    let map = cluster.node(1).read_map().await.unwrap();
    assert_eq!(map.len(), 8);

    let log = Log::default();
    let writers: Vec<_> = (0..4)
        .map(|w| tokio::spawn(writer(cluster.net.clone(), w, log.clone(), spread_key)))
        .collect();
    log.more(200).await;

    // A split under load: group 3 (keys k2 to k3) at k2/500.
    let started = Instant::now();
    let made = cluster.leader(3).await.split(3, b"k2/500").await.unwrap();
    let split_time = started..Instant::now();
    let map = cluster.node(2).read_map().await.unwrap();
    assert_eq!(map.group_of(b"k2/499"), 3);
    assert_eq!(map.group_of(b"k2/500"), made);
    assert_eq!(map.group(made).unwrap().members, &BTreeSet::from([1, 2, 3]));
    log.more(100).await;

    // Node 3 stops, writes go on, node 3 starts again over its directory.
    cluster.stop(3).await;
    log.more(100).await;
    cluster.start(3).await;
    log.more(100).await;

    // A move under load: group 5's replica on node 2 goes to node 4.
    let started = Instant::now();
    cluster.node(4).host(5).await.unwrap();
    cluster.leader(5).await.move_replica(5, 2, 4).await.unwrap();
    let move_time = started..Instant::now();
    cluster.node(2).remove_replica(5).await.unwrap();
    assert!(!cluster.node(2).groups().contains(&5));
    log.more(100).await;

    log.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    eprintln!(
        "longest write wait: split {:?} (took {:?}), move {:?} (took {:?}); {} writes",
        longest_wait(&log, split_time.clone()),
        split_time.end - split_time.start,
        longest_wait(&log, move_time.clone()),
        move_time.end - move_time.start,
        log.count()
    );

    let map = cluster.node(1).read_map().await.unwrap();
    assert_eq!(map.group(5).unwrap().members, &BTreeSet::from([1, 3, 4]));
    every_write_once(&cluster, &log, &map).await;
    // The split is in the groups' own state too: group 3 ends where the new group starts.
    for node in cluster.live().iter().filter(|n| n.id() != 4) {
        let range = node.range(3).unwrap().unwrap();
        assert_eq!(range.end.as_deref(), Some(&b"k2/500"[..]));
        assert_eq!(range.splits, [(b"k2/500".to_vec(), made)]);
        assert_eq!(node.range(made).unwrap().unwrap().end.as_deref(), Some(&b"k3"[..]));
    }

    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_its_group_applied_is_recorded_in_the_map_at_the_next_start() {
    let cluster = Cluster::new();
    // Node 4 holds the metadata group only.
    for id in 1..=4 {
        cluster.start(id).await;
    }
    let map = ShardMap::new(1, [1, 2, 3]).unwrap();
    cluster.node(1).bootstrap(map, members(1..=4)).await.unwrap();
    for key in ["a", "m", "z"] {
        cluster.node(2).write(Command::put(key, "v")).await.unwrap();
    }

    // The split's first two steps with the metadata group stopped on every node, so that
    // neither the split nor the nodes' own re-drive can record it: as if every node had
    // crashed between the steps.
    let node = cluster.node(1);
    let reserved = node.propose(META_GROUP, Command::Shard(ShardCommand::Reserve)).await.unwrap();
    let made = bloomkv_raft::shard::SPLIT_GROUP_BASE + reserved.log_id.index;
    for id in 1..=4 {
        cluster.node(id).raft(META_GROUP).unwrap().shutdown().await.unwrap();
    }
    let split = ShardCommand::Split { at: b"m".to_vec(), new_group: made };
    let resp = node.propose(1, Command::Shard(split)).await.unwrap();
    assert_eq!(resp.data, Outcome::Applied);
    assert_eq!(node.map().unwrap().len(), 1, "not recorded");
    let range = node.range(1).unwrap().unwrap();
    assert_eq!(range.splits, [(b"m".to_vec(), made)]);
    // Group 1 refuses the keys it gave away, naming the group it gave them to.
    let resp = node.propose(1, Command::put("q", "v")).await.unwrap();
    assert_eq!(bloomkv_raft::shard::refused_range(&resp.data), Some(Some(made)));
    // A write to them from a node whose map does not know that group, and that runs no
    // replica of it, reaches it on the members of the group it split from.
    let written = cluster.node(4).write(Command::put("q", "v")).await.unwrap();
    assert_eq!(written, Outcome::Applied);

    // Restarted, the nodes record it.
    for id in 1..=4 {
        cluster.stop(id).await;
    }
    for id in 1..=4 {
        cluster.start(id).await;
    }
    let mut watch = cluster.node(3).watch_map();
    let map = watch
        .wait_for(|m| m.as_ref().is_some_and(|m| m.len() == 2))
        .await
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(map.group_of(b"m"), made);
    assert_eq!(map.group_of(b"l"), 1);
    assert_eq!(cluster.node(1).write(Command::put("n", "v")).await.unwrap(), Outcome::Applied);
    let leader = cluster.leader(made).await;
    let kv = leader.reader(made).unwrap();
    let keys: Vec<Vec<u8>> = kv.scan().map(|r| r.unwrap().0).collect();
    assert_eq!(keys, [b"m".to_vec(), b"n".to_vec(), b"q".to_vec(), b"z".to_vec()]);
    let kv = leader.reader(1).unwrap();
    let keys: Vec<Vec<u8>> = kv.scan().map(|r| r.unwrap().0).collect();
    assert_eq!(keys, [b"a".to_vec()]);

    cluster.stop_all().await;
}

/// Writer `w`'s `n`th key, spread over the key space (`0000` to `9999`) in no order.
fn scattered_key(w: u64, n: u64) -> String {
    format!("{:04}/w{w}-{n}", (n * 7919 + w * 2503) % 10_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_over_the_size_threshold_splits_and_keeps_every_write_once() {
    let cluster = Cluster::new();
    for id in 1..=3 {
        cluster.start(id).await;
    }
    let map = ShardMap::new(1, [1, 2, 3]).unwrap();
    cluster.node(1).bootstrap(map, members(1..=3)).await.unwrap();
    // A few hundred keys pass 4 KiB: every group made must grow past it again to split.
    let policy = AutoSplit::new(4 << 10).every(Duration::from_millis(50));
    for node in cluster.live() {
        node.set_auto_split(Some(policy)).await;
    }

    let log = Log::default();
    let writers: Vec<_> = (0..3)
        .map(|w| tokio::spawn(writer(cluster.net.clone(), w, log.clone(), scattered_key)))
        .collect();
    // Only splits by size change the map here; the bound is for a cluster that never splits.
    let mut watch = cluster.node(1).watch_map();
    let three = watch.wait_for(|m| m.as_ref().is_some_and(|m| m.len() >= 3));
    let grown = tokio::time::timeout(Duration::from_secs(120), three).await.is_ok();
    for node in cluster.live() {
        node.set_auto_split(None).await;
    }
    log.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let stats: Vec<_> = cluster.live().iter().map(|n| n.auto_split_stats()).collect();
    assert!(grown, "the map did not reach three groups; {} writes; {stats:?}", log.count());

    let map = cluster.node(2).read_map().await.unwrap();
    let made: u64 = stats.iter().map(|s| s.splits).sum();
    assert!(map.len() >= 3, "{map:?}");
    assert!(made >= map.len() as u64 - 1, "every group but the first made by size: {stats:?}");
    every_write_once(&cluster, &log, &map).await;
    // Each split cut its group near its middle: no group made is empty.
    for shard in map.shards() {
        let leader = cluster.leader(shard.group).await;
        let held = leader.reader(shard.group).unwrap().scan().count();
        assert!(held > 0, "group {} is empty: {map:?}", shard.group);
    }
    eprintln!("{} groups from {} writes; {stats:?}", map.len(), log.count());

    cluster.stop_all().await;
}

/// A move makes its target a voter only once the target holds the group's log: made one
/// while empty, it could not vote after a restart (a node with no log does not vote), and
/// until it caught up its group would need every other member up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_makes_its_target_a_voter_only_once_it_holds_the_log() {
    let cluster = Cluster::bootstrapped().await;
    let group = 3;
    let leader = cluster.leader(group).await;
    let from = (1..=3).find(|&n| n != leader.id()).unwrap();
    let voters = |node: &ShardNode<Net>| -> BTreeSet<NodeId> {
        let metrics = node.raft(group).unwrap().metrics().borrow().clone();
        metrics.membership_config.membership().voter_ids().collect()
    };

    // Node 4 runs no replica of the group yet, so nothing can fill it.
    let mut moving = {
        let leader = leader.clone();
        tokio::spawn(async move { leader.move_replica(group, from, 4).await })
    };
    let early = tokio::time::timeout(Duration::from_secs(1), &mut moving).await;
    assert!(early.is_err(), "the move finished with its target empty: {early:?}");
    assert_eq!(voters(&leader), BTreeSet::from([1, 2, 3]));

    cluster.node(4).host(group).await.unwrap();
    moving.await.unwrap().unwrap();
    let expected: BTreeSet<NodeId> = [1, 2, 3, 4].into_iter().filter(|&n| n != from).collect();
    assert_eq!(voters(&leader), expected);
    let held = cluster.node(4).raft(group).unwrap().metrics().borrow().last_log_index;
    assert!(held.is_some(), "node 4 became a voter holding no log");

    cluster.stop_all().await;
}

/// A move off the group's leader leaves the group no leader (the leader removes itself and
/// steps down); the lowest of the new voters campaigns once the old leader's lease is over,
/// rather than every voter waiting out an election timeout more. Here the voters' own timers
/// are off, so only that campaign can elect anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_off_the_leader_elects_a_new_one_without_the_election_timers() {
    let cluster = Cluster::bootstrapped().await;
    let group = 3;
    let leader = cluster.leader(group).await;
    cluster.node(4).host(group).await.unwrap();
    for node in cluster.live() {
        node.raft(group).unwrap().runtime_config().elect(false);
    }

    leader.move_replica(group, leader.id(), 4).await.unwrap();
    let voters: BTreeSet<NodeId> = [1, 2, 3, 4].into_iter().filter(|&n| n != leader.id()).collect();
    let raft = cluster.node(4).raft(group).unwrap();
    let m = raft
        .wait(PATIENCE)
        .metrics(|m| m.current_leader.is_some_and(|l| voters.contains(&l)), "a new leader")
        .await
        .unwrap();
    assert_eq!(m.current_leader, voters.first().copied(), "the lowest new voter campaigns");

    cluster.stop_all().await;
}

/// A replica moved away from a node is not started there again, when the node restarts, by
/// the split that made its group (it would run outside the group's membership, never hearing
/// from a leader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_moved_away_stays_away_when_its_old_node_restarts() {
    let cluster = Cluster::bootstrapped().await;
    let gone = cluster.leader(3).await.split(3, b"k2/500").await.unwrap();
    let kept = cluster.leader(3).await.split(3, b"k2/200").await.unwrap();
    cluster.node(4).host(gone).await.unwrap();
    cluster.leader(gone).await.move_replica(gone, 2, 4).await.unwrap();
    // Twice at once, as a move sent again while the first still runs can: both done.
    let node_2 = cluster.node(2);
    let (first, second) = tokio::join!(node_2.remove_replica(gone), node_2.remove_replica(gone));
    first.unwrap();
    second.unwrap();

    // Every group that should run on a node runs once it has opened.
    cluster.stop(2).await;
    let node = cluster.start(2).await;
    assert!(node.groups().contains(&kept));
    assert!(!node.groups().contains(&gone), "node 2 runs group {gone} again");
    assert!(node.range(gone).unwrap().is_none());
    let map = cluster.node(1).read_map().await.unwrap();

    cluster.stop_all().await;
    // What the nodes' directories say, read as `bloomkv raft` reads them: node 2 holds the
    // group that stayed and not the one that moved, node 4 holds that one as a voter, and
    // the metadata group's leader holds the map the cluster answered with (a follower may
    // not have applied its last entry when stopped).
    let report = |id| bloomkv_raft::inspect(cluster.dir(id)).unwrap();
    let group = |r: &bloomkv_raft::NodeReport, g| r.groups.iter().find(|x| x.id == g).cloned();
    let (node_2, node_4) = (report(2), report(4));
    assert!(group(&node_2, gone).is_none(), "node 2's directory still holds group {gone}");
    let range = group(&node_2, kept).unwrap().range.unwrap();
    assert_eq!((range.start, range.end), (b"k2/200".to_vec(), Some(b"k2/500".to_vec())));
    let moved = group(&node_4, gone).unwrap();
    let voters: BTreeSet<NodeId> = moved.membership.membership().voter_ids().collect();
    assert!(voters.contains(&4) && !voters.contains(&2), "{voters:?}");
    assert_eq!(moved.range.unwrap().start, b"k2/500".to_vec());
    assert!(moved.applied.is_some() && moved.log.is_some() && moved.vote.is_some());
    let held: Vec<ShardMap> =
        (1..=4).filter_map(|id| group(&report(id), META_GROUP).and_then(|g| g.map)).collect();
    assert!(held.contains(&map), "no node's directory holds the map {map:?}");
    assert!(held.iter().all(|m| m.version() <= map.version()));
}
