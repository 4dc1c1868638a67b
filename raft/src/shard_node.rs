//! [`ShardNode`]: one node's raft groups, its copy of the shard map (replicated by the
//! metadata group), and the operations that change the shards: splits and replica moves.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloomkv::Options;
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::raft::ClientWriteResponse;
use openraft::{BasicNode, Config, RaftMetrics, RaftNetworkFactory};
use tokio::sync::watch;
use tracing::Instrument;

use crate::autosplit::{self, AutoSplit, AutoSplitStats};
use crate::log_store::LeaderLeaving;
use crate::shard::{
    refused_range, GroupRange, ShardCommand, ShardMap, META_GROUP, SPLIT_GROUP_BASE,
};
use crate::{Command, GroupId, KvReader, NodeId, NodeStore, Outcome, Raft, TypeConfig};
use crate::{Ping, Pong, Quiet, QuietStats};

/// What a [`ShardNode`] operation failed with.
#[derive(Debug, Clone)]
pub enum ShardError {
    /// This node runs no replica of `group`.
    NotHere {
        /// The group.
        group: GroupId,
    },
    /// This node's replica of `group` does not lead it; `leader` does, if known.
    NotLeader {
        /// The group.
        group: GroupId,
        /// The leader this node knows of.
        leader: Option<NodeId>,
    },
    /// The key is not `group`'s (it split away): the map of `version` says `owner` has it.
    WrongShard {
        /// The group the write went to.
        group: GroupId,
        /// The map's version.
        version: u64,
        /// The group serving the key in it.
        owner: GroupId,
    },
    /// The group refused the command, changing nothing: why.
    Rejected(String),
    /// Raft could not do it (no leader within the wait, shut down, a membership change
    /// refused): openraft's error.
    Raft(String),
    /// The node's storage failed.
    Storage(bloomkv::Error),
}

impl std::fmt::Display for ShardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShardError::NotHere { group } => write!(f, "no replica of group {group} here"),
            ShardError::NotLeader { group, leader: Some(l) } => {
                write!(f, "node {l} leads group {group}, not this one")
            }
            ShardError::NotLeader { group, leader: None } => {
                write!(f, "group {group} has no known leader")
            }
            ShardError::WrongShard { group, version, owner } => {
                write!(f, "group {group} does not serve the key: map {version} gives it to {owner}")
            }
            ShardError::Rejected(reason) => write!(f, "rejected: {reason}"),
            ShardError::Raft(e) => write!(f, "raft: {e}"),
            ShardError::Storage(e) => write!(f, "storage: {e}"),
        }
    }
}

impl std::error::Error for ShardError {}

impl From<bloomkv::Error> for ShardError {
    fn from(e: bloomkv::Error) -> ShardError {
        ShardError::Storage(e)
    }
}

/// How a [`ShardNode`] reaches the other nodes: the raft network of each of its groups, and
/// the forwarding of a command to the node leading a group.
pub trait Transport: Send + Sync + 'static {
    /// The network of one group's raft.
    type Network: RaftNetworkFactory<TypeConfig>;

    /// The network through which group `group`'s raft on this node reaches the same group
    /// on other nodes (whose [`ShardNode::raft`] answers the RPCs).
    fn network(&self, group: GroupId) -> Self::Network;

    /// Submits `command` to `group` on node `node`: that node's
    /// [`ShardNode::propose_local`].
    fn forward(
        &self,
        node: NodeId,
        group: GroupId,
        command: Command,
    ) -> impl Future<Output = Result<ClientWriteResponse<TypeConfig>, ShardError>> + Send;

    /// Sends `ping` to node `node`: that node's [`ShardNode::answer_ping`]. Once a heartbeat
    /// interval to each node leading a group here, whatever the number of groups (see
    /// [`Quiet`]). The default carries none: then only groups whose sole member is this node
    /// stop ticking.
    fn ping(
        &self,
        node: NodeId,
        ping: Ping,
    ) -> impl Future<Output = Result<Pong, ShardError>> + Send {
        let _ = (node, ping);
        async { Err(ShardError::Rejected("this transport carries no pings".into())) }
    }
}

/// How long an operation waits for a group to have a leader, or a learner to catch up.
const PATIENCE: Duration = Duration::from_secs(30);
/// Forwards and retries an operation makes before giving up on a group.
const ATTEMPTS: usize = 50;

/// A node of a sharded cluster: every raft group it holds a replica of (all in one
/// [`NodeStore`]), among them the metadata group ([`META_GROUP`]), whose state machine holds
/// the [`ShardMap`]; this node's cached copy of the map; and the operations that change the
/// shards (see [`ShardNode::split`], [`ShardNode::move_replica`]).
///
/// A node starts, besides the metadata group, every group it holds state of, and any group a
/// split applied here (or a snapshot installed here) made. It re-drives at start and after
/// every split what a crash may have left half done: a split its groups applied that the map
/// does not show yet is recorded there.
///
/// ```no_run
/// use bloomkv_raft::shard::ShardMap;
/// use bloomkv_raft::{ShardNode, Transport};
///
/// async fn run<T: Transport>(transport: T) -> Result<(), Box<dyn std::error::Error>> {
///     let config = std::sync::Arc::new(openraft::Config::default().validate()?);
///     let node = ShardNode::open(1, "node-1", bloomkv::Options::default(), config, transport)
///         .await?;
///     // Once, on one node holding every first group: the metadata group and the groups.
///     let members = [(1, openraft::BasicNode::new("node-1"))].into();
///     node.bootstrap(ShardMap::new(1, [1])?, members).await?;
///     node.write(bloomkv_raft::Command::put("apple", "red")).await?;
///     let made = node.split(1, b"m").await?; // keys from "m" on now in group `made`
///     assert_eq!(node.read_map().await?.group_of(b"melon"), made);
///     node.shutdown().await?;
///     Ok(())
/// }
/// ```
pub struct ShardNode<T: Transport> {
    inner: Arc<Inner<T>>,
}

impl<T: Transport> Clone for ShardNode<T> {
    fn clone(&self) -> Self {
        ShardNode { inner: self.inner.clone() }
    }
}

struct Inner<T: Transport> {
    id: NodeId,
    store: NodeStore,
    config: Arc<Config>,
    transport: T,
    groups: Mutex<BTreeMap<GroupId, (Raft, KvReader)>>,
    map: watch::Sender<Option<ShardMap>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Held while a group starts: two tasks may ask for the same group at once.
    starting: tokio::sync::Mutex<()>,
    quiet: Quiet,
    /// The splits by size: off while `None` (see [`ShardNode::set_auto_split`]).
    auto_split: watch::Sender<Option<AutoSplit>>,
    auto_split_stats: Mutex<AutoSplitStats>,
    /// Held through a round of checks (and the splits it starts).
    checking: tokio::sync::Mutex<()>,
    /// Each group last measured under the threshold (or over it with no key to split at):
    /// its last applied index then, and the threshold. A group that applied nothing since is
    /// not read again.
    settled: Mutex<BTreeMap<GroupId, (Option<u64>, u64)>>,
}

/// Campaigns, on the lowest of the new voters, when a membership leaves out the leader that
/// wrote it (a move off the leader's node, a drain): that leader steps down once the entry is
/// committed, and openraft 0.9 has no transfer of leadership. Left to their timers, the
/// voters would wait out the old leader's lease (`election_timeout_max` since its last
/// heartbeat) and then an election timeout more; this campaign comes once the lease is over
/// (and a heartbeat interval, for the heartbeat that carried the commit). It is only asked
/// for while that membership is still the group's and no voter of it leads. One candidate,
/// not every voter: campaigns at once would split the vote. Ends with the group.
async fn take_over(
    raft: Raft,
    me: NodeId,
    mut leaving: watch::Receiver<Option<LeaderLeaving>>,
    config: Arc<Config>,
) {
    let wait = Duration::from_millis(config.election_timeout_max + config.heartbeat_interval);
    while leaving.changed().await.is_ok() {
        let Some(left) = leaving.borrow_and_update().clone() else { continue };
        if left.voters.first() != Some(&me) {
            continue;
        }
        // The lease runs from the leader's last heartbeat, which may come after the entry was
        // appended here (the leader leads until the entry commits): a campaign the voters
        // refuse for it is made again after another wait, for as long as an operation waits
        // for a leader.
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(wait).await;
            let metrics = raft.metrics().borrow().clone();
            let current = metrics.membership_config.log_id().map(|id| id.index) == Some(left.index);
            let led = metrics.current_leader.is_some_and(|l| left.voters.contains(&l));
            if !current || led {
                break;
            }
            tracing::info!(leader = left.leader, "campaigning: the leader left the group");
            let _ = raft.trigger().elect().await;
        }
    }
}

/// Returns once this node, leading `group`, has `to` holding the group's log through `index`
/// (the entry that made it a learner): a replica that holds nothing yet is no voter to count
/// on. Made one, its group would need every other member up until it catches up, and it
/// could not vote after a restart (a node with no log does not vote, in case its disk was
/// lost). openraft's own wait for a new learner (`add_learner(.., true)`) counts a learner
/// within `replication_lag_threshold` entries (5,000 by default) as caught up, which an
/// empty one of a small group always is.
async fn caught_up(raft: &Raft, group: GroupId, to: NodeId, index: u64) -> Result<(), ShardError> {
    let mut metrics = raft.metrics();
    loop {
        {
            let m = metrics.borrow_and_update();
            let Some(replication) = &m.replication else {
                return Err(ShardError::NotLeader { group, leader: m.current_leader });
            };
            if replication.get(&to).is_some_and(|matched| matched.is_some_and(|l| l.index >= index))
            {
                return Ok(());
            }
        }
        metrics.changed().await.map_err(|_| ShardError::NotHere { group })?;
    }
}

fn raft_error(e: impl std::fmt::Display) -> ShardError {
    ShardError::Raft(e.to_string())
}

impl<T: Transport> ShardNode<T> {
    /// Opens the node's database in `dir` and starts its groups (see [`ShardNode`]).
    /// `config` is every group's raft configuration.
    pub async fn open(
        id: NodeId,
        dir: impl AsRef<Path>,
        options: Options,
        config: Arc<Config>,
        transport: T,
    ) -> Result<ShardNode<T>, ShardError> {
        let store = NodeStore::open(dir, options)?;
        let quiet = Quiet::new(id, config.election_timeout_min);
        let inner = Inner {
            id,
            store,
            config,
            transport,
            groups: Mutex::new(BTreeMap::new()),
            map: watch::Sender::new(None),
            tasks: Mutex::new(Vec::new()),
            starting: tokio::sync::Mutex::new(()),
            quiet,
            auto_split: watch::Sender::new(None),
            auto_split_stats: Mutex::new(AutoSplitStats::default()),
            checking: tokio::sync::Mutex::new(()),
            settled: Mutex::new(BTreeMap::new()),
        };
        let node = ShardNode { inner: Arc::new(inner) };
        let _ = node.start_group(META_GROUP).await?;
        for group in node.inner.store.group_ids() {
            if group != META_GROUP && node.inner.store.has_state(group)? {
                let _ = node.start_group(group).await?;
            }
        }
        node.refresh_map()?;
        // Every group that should run here runs once `open` returns; recording splits in the
        // map, which needs the metadata group's leader, is left to `follow_splits`.
        node.start_made().await?;
        let tasks = vec![
            tokio::spawn(node.clone().follow_map()),
            tokio::spawn(node.clone().follow_splits()),
            tokio::spawn(node.clone().keep_quiet()),
            tokio::spawn(node.clone().split_by_size()),
        ];
        *node.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()) = tasks;
        Ok(node)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// The raft of this node's replica of `group`, if it runs one: what answers the group's
    /// RPCs to this node.
    pub fn raft(&self, group: GroupId) -> Option<Raft> {
        self.lock_groups().get(&group).map(|(raft, _)| raft.clone())
    }

    /// A reader of this node's replica of `group`, if it runs one.
    pub fn reader(&self, group: GroupId) -> Option<KvReader> {
        self.lock_groups().get(&group).map(|(_, kv)| kv.clone())
    }

    /// The groups this node runs a replica of, the metadata group among them.
    pub fn groups(&self) -> Vec<GroupId> {
        self.lock_groups().keys().copied().collect()
    }

    /// This node's copy of the map: as its replica of the metadata group last applied it
    /// (`None` before the cluster's bootstrap reached it). Its version says how recent it is.
    pub fn map(&self) -> Option<ShardMap> {
        self.inner.map.borrow().clone()
    }

    /// This node's copy of the map, as it changes.
    pub fn watch_map(&self) -> watch::Receiver<Option<ShardMap>> {
        self.inner.map.subscribe()
    }

    /// The current map, linearizably: an entry passes through the metadata group's leader,
    /// and the map is read once this node's replica has applied it. Needs a replica of the
    /// metadata group here.
    pub async fn read_map(&self) -> Result<ShardMap, ShardError> {
        let resp = self.propose(META_GROUP, Command::Batch(Vec::new())).await?;
        let meta = self.raft(META_GROUP).ok_or(ShardError::NotHere { group: META_GROUP })?;
        meta.wait(Some(PATIENCE))
            .applied_index_at_least(Some(resp.log_id.index), "the read's entry")
            .await
            .map_err(raft_error)?;
        self.refresh_map()?;
        self.map().ok_or_else(|| ShardError::Rejected("the cluster has no map yet".into()))
    }

    /// Answers a peer's [`Ping`] (see [`Quiet`]): what [`Transport::ping`] calls on the node it
    /// pings.
    pub fn answer_ping(&self, ping: &Ping) -> Pong {
        self.inner.quiet.answer(ping, |group| self.raft(group))
    }

    /// How many of this node's groups are quiet (not ticking), as of the last round; it
    /// changes after every round.
    pub fn watch_quiet(&self) -> watch::Receiver<QuietStats> {
        self.inner.quiet.watch()
    }

    /// Once a heartbeat interval: sets each group's ticker (see [`Quiet`]) and pings the
    /// nodes leading groups here. A ping waits at most an interval; a round never waits for
    /// one, so a peer that does not answer delays nothing.
    async fn keep_quiet(self) {
        let period = Duration::from_millis(self.inner.config.heartbeat_interval);
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let groups: Vec<(GroupId, Raft)> =
                self.lock_groups().iter().map(|(g, (raft, _))| (*g, raft.clone())).collect();
            let pings = self.inner.quiet.round(groups.iter().map(|(g, raft)| (*g, raft)));
            for (leader, ping) in pings {
                let node = self.clone();
                tokio::spawn(async move {
                    let sent = node.inner.transport.ping(leader, ping.clone());
                    let answer = tokio::time::timeout(period, sent).await.ok().and_then(Result::ok);
                    node.inner.quiet.vouched(leader, &ping, answer.as_ref());
                });
            }
        }
    }

    /// Splits the groups this node leads once their data grows past `policy`'s bytes, or
    /// (`None`, as a node starts) never. Every `policy.every`, for each group this node leads
    /// whose range the map shows as the group has it (a split not yet recorded is left to
    /// finish first) and that applied an entry since it last measured under the threshold,
    /// the node measures the group's data and, if it is over the threshold,
    /// splits the group ([`ShardNode::split`]) at the key that leaves about half the bytes on
    /// each side, if one lies strictly inside the range (a single key holding everything
    /// does not split). One split at a time: the next check sees the groups it made. A
    /// measurement or split that fails is counted ([`ShardNode::auto_split_stats`]) and
    /// tried again at the next check. Each node leads its own groups: set it on every node.
    ///
    /// Returns once a round of checks in progress (and the split it may be making) is over:
    /// after `set_auto_split(None)`, this node starts no split by size.
    ///
    /// ```no_run
    /// # async fn run<T: bloomkv_raft::Transport>(node: bloomkv_raft::ShardNode<T>) {
    /// node.set_auto_split(Some(bloomkv_raft::AutoSplit::new(256 << 20))).await;
    /// # }
    /// ```
    pub async fn set_auto_split(&self, policy: Option<AutoSplit>) {
        self.inner.auto_split.send_replace(policy);
        let _round_over = self.inner.checking.lock().await;
    }

    /// What this node's splits by size did since it started.
    pub fn auto_split_stats(&self) -> AutoSplitStats {
        self.inner.auto_split_stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn count(&self, change: impl FnOnce(&mut AutoSplitStats)) {
        change(&mut self.inner.auto_split_stats.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// The checks of [`ShardNode::set_auto_split`], while a policy is set.
    async fn split_by_size(self) {
        let mut policy = self.inner.auto_split.subscribe();
        loop {
            let Some(now) = *policy.borrow_and_update() else {
                if policy.changed().await.is_err() {
                    return;
                }
                continue;
            };
            tokio::select! {
                _ = tokio::time::sleep(now.every) => {
                    let _round = self.inner.checking.lock().await;
                    // Turned off (or changed) while this waited for the lock.
                    let current = *self.inner.auto_split.borrow();
                    if let Some(now) = current {
                        self.check_sizes(now.bytes).await;
                    }
                }
                changed = policy.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Measures each data group this node leads and splits those over `bytes`.
    async fn check_sizes(&self, bytes: u64) {
        let Some(map) = self.map() else { return };
        let groups = self.groups();
        let settled = || self.inner.settled.lock().unwrap_or_else(|p| p.into_inner());
        settled().retain(|g, _| groups.contains(g));
        for group in groups.into_iter().filter(|&g| g != META_GROUP) {
            let Some((raft, kv)) = self.lock_groups().get(&group).cloned() else { continue };
            let (leader, applied) = {
                let m = raft.metrics();
                let m = m.borrow();
                (m.current_leader, m.last_applied.map(|l| l.index))
            };
            // The measurement reads at least what was applied by `applied`: a group that
            // applied nothing since it settled is as it was.
            if leader != Some(self.inner.id) || settled().get(&group) == Some(&(applied, bytes)) {
                continue;
            }
            let range = match self.inner.store.range(group) {
                Ok(Some(range)) => range,
                // No range: not a group of the map (never assigned one).
                Ok(None) => continue,
                Err(e) => {
                    self.failed(group, &ShardError::Storage(e));
                    continue;
                }
            };
            let in_map = map.group(group).is_some_and(|s| {
                s.start == range.start.as_slice() && s.end == range.end.as_deref()
            });
            if !in_map {
                continue;
            }
            self.count(|s| s.checks += 1);
            let measured = {
                let range = range.clone();
                tokio::task::spawn_blocking(move || autosplit::measure(&kv, &range, bytes)).await
            };
            let spans = match measured {
                Ok(Ok((total, spans))) if total > bytes => spans,
                Ok(Ok(_)) => {
                    settled().insert(group, (applied, bytes));
                    continue;
                }
                Ok(Err(e)) => {
                    self.failed(group, &ShardError::Storage(e));
                    continue;
                }
                Err(e) => {
                    self.failed(group, &ShardError::Rejected(e.to_string()));
                    continue;
                }
            };
            let Some(at) = autosplit::split_key(&range.start, range.end.as_deref(), &spans) else {
                settled().insert(group, (applied, bytes));
                continue;
            };
            match self.split(group, &at).await {
                Ok(_) => self.count(|s| s.splits += 1),
                Err(e) => self.failed(group, &e),
            }
        }
    }

    fn failed(&self, group: GroupId, e: &ShardError) {
        let why = format!("group {group}: {e}");
        self.count(|s| {
            s.failures += 1;
            s.last_failure = Some(why);
        });
    }

    fn lock_groups(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupId, (Raft, KvReader)>> {
        self.inner.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts this node's replica of `group` if it does not run one: from its state here,
    /// or empty (to be filled by a snapshot from the group's leader).
    /// Returns whether it started it.
    async fn start_group(&self, group: GroupId) -> Result<bool, ShardError> {
        let _starting = self.inner.starting.lock().await;
        if self.lock_groups().contains_key(&group) {
            return Ok(false);
        }
        let (log, sm) = self.inner.store.group(group)?;
        let leaving = log.leader_leaving();
        let kv = sm.reader();
        let network = self.inner.transport.network(group);
        // openraft runs the group's core task in the span current at `Raft::new`: a node's
        // log then names the group of each election, vote and append it reports.
        let span = tracing::info_span!("group", id = group);
        let raft = Raft::new(self.inner.id, self.inner.config.clone(), network, log, sm)
            .instrument(span)
            .await
            .map_err(raft_error)?;
        tokio::spawn(take_over(raft.clone(), self.inner.id, leaving, self.inner.config.clone()));
        self.lock_groups().insert(group, (raft, kv));
        Ok(true)
    }

    /// Reads the map from this node's replica of the metadata group into the cached copy.
    fn refresh_map(&self) -> Result<(), ShardError> {
        let Some(kv) = self.reader(META_GROUP) else { return Ok(()) };
        let Some(map) = kv.shard_map()? else { return Ok(()) };
        self.inner.map.send_if_modified(|cached| match cached {
            Some(c) if c.version() >= map.version() => false,
            _ => {
                *cached = Some(map);
                true
            }
        });
        Ok(())
    }

    /// Keeps the cached map that of the metadata group's replica here.
    async fn follow_map(self) {
        let Some(meta) = self.raft(META_GROUP) else { return };
        let mut metrics = meta.metrics();
        let mut applied = None;
        while metrics.changed().await.is_ok() {
            let now = metrics.borrow().last_applied;
            if now != applied {
                applied = now;
                if self.refresh_map().is_err() || self.start_listed().await.is_err() {
                    return;
                }
            }
        }
    }

    /// Starts the cluster's first groups (made at bootstrap) that the map puts on this node:
    /// their replicas here get their state from the group. A group a split made is started
    /// once this node's replica of the group that split holds the split (see
    /// [`ShardNode::follow_splits`]): started earlier, it would get the data both from its
    /// leader and from that split. A replica a move brings is started by [`ShardNode::host`].
    async fn start_listed(&self) -> Result<(), ShardError> {
        let Some(map) = self.map() else { return Ok(()) };
        let me = self.inner.id;
        for shard in map.shards() {
            if shard.group < SPLIT_GROUP_BASE && shard.members.contains(&me) {
                let _ = self.start_group(shard.group).await?;
            }
        }
        Ok(())
    }

    /// Starts the groups the splits applied here made, and records in the map each split it
    /// does not show yet: at start (a crash may have come between a split and its record),
    /// then after every split applied or snapshot installed here.
    async fn follow_splits(self) {
        let mut changes = self.inner.store.shard_changes();
        loop {
            match self.redrive_splits().await {
                Ok(()) => {}
                // Closed, or storage failed: the next start re-drives.
                Err(ShardError::Storage(_)) => return,
                // The metadata group had no leader through every attempt: again once it
                // changes (and never if it stopped: the next start re-drives).
                Err(_) => {
                    let Some(meta) = self.raft(META_GROUP) else { return };
                    if meta.metrics().changed().await.is_err() {
                        return;
                    }
                    continue;
                }
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    async fn redrive_splits(&self) -> Result<(), ShardError> {
        for (group, at, made) in self.start_made().await? {
            let recorded = self.map().and_then(|m| m.group(made).map(|s| s.start == at.as_slice()));
            if recorded != Some(true) {
                let record = ShardCommand::RecordSplit { group, at, new_group: made };
                self.propose(META_GROUP, Command::Shard(record)).await?;
            }
        }
        Ok(())
    }

    /// Starts the groups the splits applied here made that are not running, and returns
    /// those splits (group, key, group made), for the map to record.
    async fn start_made(&self) -> Result<Vec<(GroupId, Vec<u8>, GroupId)>, ShardError> {
        let groups: Vec<GroupId> = self.groups().into_iter().filter(|&g| g != META_GROUP).collect();
        let mut splits = Vec::new();
        for group in groups {
            if let Some(range) = self.inner.store.range(group)? {
                splits.extend(range.splits.iter().map(|(at, made)| (group, at.clone(), *made)));
            }
        }
        let stored = self.inner.store.group_ids();
        let mut made_here = Vec::with_capacity(splits.len());
        for (group, at, made) in splits {
            // A replica of the made group that moved away from here (dropped, and the map
            // shows the group without this node) is not brought back by the split that made
            // it: it would run outside the group's membership and never hear from its leader.
            let moved_away = self
                .map()
                .and_then(|m| m.group(made).map(|s| !s.members.contains(&self.inner.id)))
                .unwrap_or(false);
            if moved_away && !stored.contains(&made) {
                continue;
            }
            let leads = |g| {
                self.raft(g)
                    .is_some_and(|r| r.metrics().borrow().current_leader == Some(self.inner.id))
            };
            if self.start_group(made).await? && leads(group) {
                // The group's leader campaigns at once in the group it made, rather than
                // every member waiting out an election timeout: the new group's keys are
                // unavailable until it has a leader.
                if let Some(raft) = self.raft(made) {
                    let _ = raft.trigger().elect().await;
                }
            }
            made_here.push((group, at, made));
        }
        Ok(made_here)
    }

    /// Submits `command` to this node's replica of `group`, which must lead it. What
    /// [`Transport::forward`] calls on the node it forwards to.
    pub async fn propose_local(
        &self,
        group: GroupId,
        command: Command,
    ) -> Result<ClientWriteResponse<TypeConfig>, ShardError> {
        let raft = self.raft(group).ok_or(ShardError::NotHere { group })?;
        command.validate().map_err(ShardError::Rejected)?;
        match raft.client_write(command).await {
            Ok(resp) => Ok(resp),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(ShardError::NotLeader { group, leader: f.leader_id })
            }
            Err(e) => Err(raft_error(e)),
        }
    }

    /// Submits `command` to `group` through its leader, wherever it is: this node's replica
    /// if it leads, else forwarded to the leader this node (or the replica it asks) knows.
    /// Retries while the group elects a leader.
    pub async fn propose(
        &self,
        group: GroupId,
        command: Command,
    ) -> Result<ClientWriteResponse<TypeConfig>, ShardError> {
        self.propose_among(group, command, &[]).await
    }

    /// [`ShardNode::propose`], trying `fallback` when neither this node nor its map knows
    /// where `group` runs: a group a split just made is missing from the map until the
    /// metadata group records the split, and runs on the members of the group it split from.
    async fn propose_among(
        &self,
        group: GroupId,
        command: Command,
        fallback: &[NodeId],
    ) -> Result<ClientWriteResponse<TypeConfig>, ShardError> {
        let members = self.members_of(group).unwrap_or_else(|| fallback.to_vec());
        let mut target = match self.raft(group) {
            Some(raft) => raft.metrics().borrow().current_leader.unwrap_or(self.inner.id),
            None => *members.first().ok_or(ShardError::NotHere { group })?,
        };
        let mut last = ShardError::NotHere { group };
        for attempt in 0..ATTEMPTS {
            let result = match target == self.inner.id {
                true => self.propose_local(group, command.clone()).await,
                false => self.inner.transport.forward(target, group, command.clone()).await,
            };
            match result {
                Err(ShardError::NotLeader { leader: Some(l), .. }) if l != target => target = l,
                Err(e @ (ShardError::NotLeader { .. } | ShardError::NotHere { .. })) => {
                    last = e;
                    target = self.await_leader(group, target, &members, attempt).await;
                }
                // Unreachable, or the leader went away mid-write: a put applied twice is the
                // same put, and a shard command is idempotent.
                Err(e @ ShardError::Raft(_)) => {
                    last = e;
                    target = self.await_leader(group, target, &members, attempt).await;
                }
                other => return other,
            }
        }
        Err(last)
    }

    /// `group`'s members as this node's copy of the map lists them.
    fn members_of(&self, group: GroupId) -> Option<Vec<NodeId>> {
        self.map().and_then(|m| m.group(group).map(|s| s.members.iter().copied().collect()))
    }

    /// The node to try next for `group` after `failed` did not take a command: the leader
    /// this node's replica knows once it knows one other than `failed`, else the next member.
    async fn await_leader(
        &self,
        group: GroupId,
        failed: NodeId,
        members: &[NodeId],
        attempt: usize,
    ) -> NodeId {
        if let Some(raft) = self.raft(group) {
            let other =
                |m: &RaftMetrics<NodeId, BasicNode>| m.current_leader.is_some_and(|l| l != failed);
            // Waits for the election (or a heartbeat naming the leader), bounded by the
            // election timeout: a leader that stays the same is tried again after it.
            let wait = Duration::from_millis(self.inner.config.election_timeout_max);
            if let Ok(m) = raft.wait(Some(wait)).metrics(other, "another leader").await {
                return m.current_leader.unwrap_or(failed);
            }
            return raft.metrics().borrow().current_leader.unwrap_or(failed);
        }
        // A member that answered "not here" may be about to apply the split that starts its
        // replica, or one with no leader about to elect one: the next is tried after a
        // heartbeat, so the attempts span more than the moment of a split or an election.
        tokio::time::sleep(Duration::from_millis(self.inner.config.heartbeat_interval)).await;
        match members.is_empty() {
            true => failed,
            false => members[attempt % members.len()],
        }
    }

    /// Writes `command` (a put, a delete, or a batch whose keys one group serves) to the
    /// group the map gives its first key to, following the group's answer when a split moved
    /// the key. A batch whose keys span groups is refused by each: batches are atomic within
    /// one group only.
    pub async fn write(&self, command: Command) -> Result<Outcome, ShardError> {
        let key = first_key(&command)
            .ok_or_else(|| ShardError::Rejected("a write with no key".into()))?
            .to_vec();
        let map = self.map().ok_or_else(|| ShardError::Rejected("no map yet".into()))?;
        let mut group = map.group_of(&key);
        let mut split_from: Vec<NodeId> = Vec::new();
        for _ in 0..ATTEMPTS {
            let resp = self.propose_among(group, command.clone(), &split_from).await?;
            match refused_range(&resp.data) {
                None => return Ok(resp.data),
                Some(Some(moved_to)) => {
                    split_from = self.members_of(group).unwrap_or_default();
                    group = moved_to;
                }
                Some(None) => {
                    let map = self.read_map().await?;
                    let owner = map.group_of(&key);
                    if owner == group {
                        return Err(ShardError::WrongShard {
                            group,
                            version: map.version(),
                            owner,
                        });
                    }
                    group = owner;
                }
            }
        }
        Err(ShardError::Rejected("the key's group kept moving".into()))
    }

    /// Creates the cluster's shards, once, from this node, which must be a member of every
    /// group of `map` and of `meta_members`: starts the metadata group on `meta_members`
    /// (addressed as given) with `map` as its state, then each group of `map` on its members,
    /// given its range. Group ids must be below [`SPLIT_GROUP_BASE`]. Run again (after a
    /// crash part way), it does what is left.
    pub async fn bootstrap(
        &self,
        map: ShardMap,
        meta_members: BTreeMap<NodeId, BasicNode>,
    ) -> Result<(), ShardError> {
        let me = self.inner.id;
        if !meta_members.contains_key(&me) || map.shards().any(|s| !s.members.contains(&me)) {
            return Err(ShardError::Rejected(format!(
                "node {me} must be a member of the metadata group and of every group"
            )));
        }
        self.initialize(META_GROUP, meta_members.clone()).await?;
        let init = Command::Shard(ShardCommand::InitMap(map.encode()));
        expect_applied(self.propose(META_GROUP, init).await?.data)?;
        for shard in map.shards() {
            let _ = self.start_group(shard.group).await?;
            let members = shard
                .members
                .iter()
                .map(|n| (*n, meta_members.get(n).cloned().unwrap_or_default()))
                .collect();
            self.initialize(shard.group, members).await?;
            let assign = ShardCommand::Assign {
                start: shard.start.to_vec(),
                end: shard.end.map(<[u8]>::to_vec),
            };
            expect_applied(self.propose(shard.group, Command::Shard(assign)).await?.data)?;
        }
        self.refresh_map()
    }

    async fn initialize(
        &self,
        group: GroupId,
        members: BTreeMap<NodeId, BasicNode>,
    ) -> Result<(), ShardError> {
        let raft = self.raft(group).ok_or(ShardError::NotHere { group })?;
        match raft.initialize(members).await {
            Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(raft_error(e)),
        }
    }

    /// Splits `group` at key `at`: the keys from `at` to the group's end go to a new group,
    /// on the same members, whose id this returns. Three steps, each idempotent:
    ///
    /// 1. the metadata group reserves the new group's id ([`ShardCommand::Reserve`]);
    /// 2. the split goes through `group`'s log ([`ShardCommand::Split`]): every replica
    ///    applies it at the same index, in one batch moving the keys to the new group's
    ///    keyspace, ending the group's range at `at`, and starting the new group's raft state
    ///    at that index; each node then starts the new group's raft;
    /// 3. the metadata group records the split ([`ShardCommand::RecordSplit`]), a new map
    ///    version. Every node whose replica applied step 2 re-drives this step (after a crash,
    ///    at its next start), so a split applied is recorded.
    ///
    /// From step 2 on, the group refuses writes at or after `at` (see
    /// [`crate::shard::refused_range`]), naming the new group. Fails if `at` is not inside
    /// the group's range after its start, or while the group's membership changes.
    pub async fn split(&self, group: GroupId, at: &[u8]) -> Result<GroupId, ShardError> {
        let reserved = self.propose(META_GROUP, Command::Shard(ShardCommand::Reserve)).await?;
        let made = SPLIT_GROUP_BASE + reserved.log_id.index;
        let split = ShardCommand::Split { at: at.to_vec(), new_group: made };
        expect_applied(self.propose(group, Command::Shard(split)).await?.data)?;
        let record = ShardCommand::RecordSplit { group, at: at.to_vec(), new_group: made };
        expect_applied(self.propose(META_GROUP, Command::Shard(record)).await?.data)?;
        Ok(made)
    }

    /// Starts an empty replica of `group` here, to be made a member by
    /// [`ShardNode::move_replica`] on the group's leader: the leader's snapshot fills it.
    pub async fn host(&self, group: GroupId) -> Result<(), ShardError> {
        self.start_group(group).await.map(|_| ())
    }

    /// Moves `group`'s replica from node `from` to node `to`, from this node, which must lead
    /// the group; `to` must run an empty replica ([`ShardNode::host`]). `to` joins as a
    /// learner and catches up (by snapshot, streamed as for any learner), is made a voter in
    /// `from`'s place, and the metadata group records the group's new members. Then `from`
    /// removes its copy ([`ShardNode::remove_replica`]). Waits as long as `to` takes to catch
    /// up (for ever if it is down): bound it with a timeout, and send the move again.
    pub async fn move_replica(
        &self,
        group: GroupId,
        from: NodeId,
        to: NodeId,
    ) -> Result<(), ShardError> {
        let raft = self.raft(group).ok_or(ShardError::NotHere { group })?;
        let membership = raft.metrics().borrow().membership_config.clone();
        let mut voters: BTreeSet<NodeId> = membership.membership().voter_ids().collect();
        if !voters.contains(&from) {
            return Err(ShardError::Rejected(format!("node {from} is not in group {group}")));
        }
        let address = self
            .raft(META_GROUP)
            .and_then(|m| {
                m.metrics().borrow().membership_config.membership().get_node(&to).cloned()
            })
            .unwrap_or_default();
        let not_leader = |e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>| match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                ShardError::NotLeader { group, leader: f.leader_id }
            }
            e => raft_error(e),
        };
        if !voters.contains(&to) {
            let joined = raft.add_learner(to, address, false).await.map_err(not_leader)?;
            caught_up(&raft, group, to, joined.log_id.index).await?;
            voters.remove(&from);
            voters.insert(to);
            raft.change_membership(voters.clone(), false).await.map_err(not_leader)?;
        } else {
            voters.remove(&from);
            raft.change_membership(voters.clone(), false).await.map_err(not_leader)?;
        }
        // The metadata group's own members are its raft membership, not in the map.
        if group == META_GROUP {
            return Ok(());
        }
        let record = ShardCommand::RecordMembers { group, members: voters.into_iter().collect() };
        expect_applied(self.propose(META_GROUP, Command::Shard(record)).await?.data)
    }

    /// Stops this node's replica of `group` and removes its copy: after a move took it
    /// away. Refused while the current map still lists this node among the group's members.
    /// Nothing to remove (removed already, or by a call running at the same time, as a move
    /// sent again can make): done.
    pub async fn remove_replica(&self, group: GroupId) -> Result<(), ShardError> {
        let map = self.read_map().await?;
        if map.group(group).is_some_and(|s| s.members.contains(&self.inner.id)) {
            return Err(ShardError::Rejected(format!(
                "the map still has group {group} on node {}",
                self.inner.id
            )));
        }
        let _starting = self.inner.starting.lock().await;
        let removed = self.lock_groups().remove(&group);
        if let Some((raft, _)) = removed {
            raft.shutdown().await.map_err(raft_error)?;
        }
        self.inner.store.closed(group).await;
        if self.inner.store.group_ids().contains(&group) {
            self.inner.store.remove_group(group)?;
        }
        Ok(())
    }

    /// The range this node's replica of `group` holds, if it has one.
    pub fn range(&self, group: GroupId) -> Result<Option<GroupRange>, ShardError> {
        Ok(self.inner.store.range(group)?)
    }

    /// Stops every group and the node's background tasks, and closes its database.
    pub async fn shutdown(&self) -> Result<(), ShardError> {
        for task in self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            task.abort();
        }
        let groups = std::mem::take(&mut *self.lock_groups());
        for (raft, _) in groups.values() {
            // An error is a raft stopped already.
            let _ = raft.shutdown().await;
        }
        self.inner.store.close()?;
        Ok(())
    }
}

fn expect_applied(outcome: Outcome) -> Result<(), ShardError> {
    match outcome {
        Outcome::Applied => Ok(()),
        Outcome::Rejected { reason } => Err(ShardError::Rejected(reason)),
        other => Err(ShardError::Rejected(format!("{other:?}"))),
    }
}

/// The first key a write names.
fn first_key(command: &Command) -> Option<&[u8]> {
    match command {
        Command::Put { key, .. } | Command::Delete { key } => Some(key),
        Command::Batch(commands) => commands.iter().find_map(first_key),
        Command::Once { command, .. } => first_key(command),
        Command::Shard(_) => None,
    }
}
