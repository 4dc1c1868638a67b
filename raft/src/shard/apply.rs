//! [`ShardCommand`]: how a group's state machine changes its range (a split) or, in the
//! metadata group, the [`ShardMap`]. Called by the state machine's `apply`, inside its batch.

use bloomkv::Readable;
use openraft::{AnyError, LogId, StoredMembership, Vote};
use serde::{Deserialize, Serialize};

use super::{ShardMap, META_GROUP, SPLIT_GROUP_BASE};
use crate::group_store::{Batch, Store};
use crate::{decode, encode, keys, GroupId, NodeId, Outcome};

/// A change to the shards, submitted as [`crate::Command::Shard`]. The first two go to a data
/// group, the rest to the metadata group ([`META_GROUP`]). Each is idempotent: applied again
/// (a retry, a re-drive after a crash), it finds its change made and answers
/// [`Outcome::Applied`] without making it twice. One that cannot apply answers
/// [`Outcome::Rejected`] and changes nothing, on every node alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShardCommand {
    /// Gives a data group its range, if it has none (a new cluster's groups): from then on it
    /// refuses writes outside it. A group that never got one serves every key.
    Assign {
        /// The range's first key.
        start: Vec<u8>,
        /// The first key after it; `None`: to the end of the key space.
        end: Option<Vec<u8>>,
    },
    /// Splits a data group at `at`: see [`crate::ShardNode::split`].
    Split {
        /// The first key the new group serves.
        at: Vec<u8>,
        /// The new group, reserved by [`ShardCommand::Reserve`].
        new_group: GroupId,
    },
    /// Sets the metadata group's map (encoded), if it has none.
    InitMap(Vec<u8>),
    /// Reserves a group id for a split: [`SPLIT_GROUP_BASE`] + this entry's log index, which
    /// no other entry has.
    Reserve,
    /// Records in the map that `group` split at `at` into `new_group`.
    RecordSplit {
        /// The group that split.
        group: GroupId,
        /// The split key.
        at: Vec<u8>,
        /// The group made.
        new_group: GroupId,
    },
    /// Records in the map that `group`'s replicas are on `members` (after a move).
    RecordMembers {
        /// The group.
        group: GroupId,
        /// Its voters.
        members: Vec<NodeId>,
    },
}

impl ShardCommand {
    /// Checks the keys it names fit a data key (see [`crate::Command::validate`]).
    pub(crate) fn validate(&self) -> Result<(), String> {
        let max = bloomkv::MAX_KEY_BYTES - keys::DATA.len();
        let check = |key: &[u8]| match key.len() > max {
            true => Err(format!("key of {} bytes is over {max}", key.len())),
            false => Ok(()),
        };
        match self {
            ShardCommand::Assign { start, end } => {
                check(start)?;
                end.as_deref().map_or(Ok(()), check)?;
                match end.as_deref().is_some_and(|end| end <= start.as_slice()) {
                    true => Err("the range ends before it starts".into()),
                    false => Ok(()),
                }
            }
            ShardCommand::Split { at, .. } | ShardCommand::RecordSplit { at, .. } => check(at),
            _ => Ok(()),
        }
    }
}

/// A data group's range, as its state machine holds it: see [`crate::KvReader::range`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRange {
    /// The first key the group serves.
    pub start: Vec<u8>,
    /// The first key after its range; `None`: to the end of the key space.
    pub end: Option<Vec<u8>>,
    /// The group's splits, in the order applied: the split key and the group made, which
    /// serves from there up to the group's end at the time.
    pub splits: Vec<(Vec<u8>, GroupId)>,
}

impl GroupRange {
    fn everything() -> GroupRange {
        GroupRange { start: Vec::new(), end: None, splits: Vec::new() }
    }

    /// Whether `key` is in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|end| key < end)
    }

    /// The group a split of this one gave `key` to, if one did: the split with the greatest
    /// key at or below it (a later split of this group is at a smaller key).
    pub fn moved_to(&self, key: &[u8]) -> Option<GroupId> {
        if key < self.start.as_slice() {
            return None;
        }
        let found = self.splits.iter().filter(|(at, _)| at.as_slice() <= key);
        found.max_by(|a, b| a.0.cmp(&b.0)).map(|(_, group)| *group)
    }
}

/// The start of [`Outcome::Rejected`]'s reason for a write outside the group's range.
pub const NOT_IN_RANGE: &str = "not in this group's range";

/// The reason a write to `key` outside `range` is refused with.
pub(crate) fn not_in_range(range: &GroupRange, key: &[u8]) -> Outcome {
    let reason = match range.moved_to(key) {
        Some(group) => format!("{NOT_IN_RANGE}: moved to group {group}"),
        None => NOT_IN_RANGE.to_string(),
    };
    Outcome::Rejected { reason }
}

/// Whether `outcome` refused a write outside its group's range, and if so the group a split
/// gave the key to, if the group knows it: `Some(None)` means ask the map.
pub fn refused_range(outcome: &Outcome) -> Option<Option<GroupId>> {
    let Outcome::Rejected { reason } = outcome else { return None };
    let rest = reason.strip_prefix(NOT_IN_RANGE)?;
    Some(rest.strip_prefix(": moved to group ").and_then(|g| g.parse().ok()))
}

fn rejected(reason: impl Into<String>) -> Outcome {
    Outcome::Rejected { reason: reason.into() }
}

/// The shard state one `apply` call has read or changed, over what is in the database.
#[derive(Default)]
pub(crate) struct ShardState {
    range: Option<Option<GroupRange>>,
    map: Option<Option<ShardMap>>,
}

fn any(e: bloomkv::Error) -> AnyError {
    AnyError::new(&e)
}

impl ShardState {
    /// The group's range; `None` if it never got one (it serves every key).
    pub(crate) fn range(&mut self, db: &Store) -> Result<Option<&GroupRange>, AnyError> {
        if self.range.is_none() {
            self.range = Some(decode(db.get(keys::RANGE))?);
        }
        Ok(self.range.as_ref().and_then(Option::as_ref))
    }

    fn set_range(&mut self, batch: &mut Batch, range: GroupRange) -> Result<(), AnyError> {
        batch.put(keys::RANGE, encode(&range)?);
        self.range = Some(Some(range));
        Ok(())
    }

    fn map(&mut self, db: &Store) -> Result<Option<ShardMap>, AnyError> {
        if self.map.is_none() {
            let map = match db.get(keys::MAP).map_err(any)? {
                Some(bytes) => Some(ShardMap::decode(&bytes).map_err(any)?),
                None => None,
            };
            self.map = Some(map);
        }
        Ok(self.map.clone().flatten())
    }

    fn set_map(&mut self, batch: &mut Batch, map: ShardMap) {
        batch.put(keys::MAP, map.encode());
        self.map = Some(Some(map));
    }

    /// Applies every command but [`ShardCommand::Split`] (see [`split`]), staging into
    /// `batch`.
    pub(crate) fn apply(
        &mut self,
        db: &Store,
        command: ShardCommand,
        batch: &mut Batch,
    ) -> Result<Outcome, AnyError> {
        Ok(match command {
            ShardCommand::Assign { start, end } => {
                let wanted = GroupRange { start, end, splits: Vec::new() };
                match self.range(db)? {
                    None => {
                        self.set_range(batch, wanted)?;
                        Outcome::Applied
                    }
                    Some(r) if r.start == wanted.start && r.splits.is_empty() => {
                        match r.end == wanted.end {
                            true => Outcome::Applied,
                            false => rejected("the group has another range"),
                        }
                    }
                    Some(_) => rejected("the group has another range"),
                }
            }
            ShardCommand::Split { .. } => rejected("a split is applied on its own"),
            ShardCommand::Reserve => Outcome::Applied,
            ShardCommand::InitMap(bytes) => {
                let map = match ShardMap::decode(&bytes) {
                    Ok(map) => map,
                    Err(e) => return Ok(rejected(e.to_string())),
                };
                if let Some(g) = map.shards().map(|s| s.group).find(|&g| g >= SPLIT_GROUP_BASE) {
                    return Ok(rejected(format!(
                        "group {g}: ids from {SPLIT_GROUP_BASE} are for splits"
                    )));
                }
                match self.map(db)? {
                    None => {
                        self.set_map(batch, map);
                        Outcome::Applied
                    }
                    Some(existing) if existing.encode() == bytes => Outcome::Applied,
                    Some(_) => rejected("the metadata group has a map already"),
                }
            }
            ShardCommand::RecordSplit { group, at, new_group } => {
                let Some(mut map) = self.map(db)? else { return Ok(rejected("no map")) };
                if let Some(made) = map.group(new_group) {
                    return Ok(match made.start == at.as_slice() {
                        true => Outcome::Applied,
                        false => rejected(format!("group {new_group} is in the map already")),
                    });
                }
                if map.group_of(&at) != group {
                    return Ok(rejected(format!("group {group} does not hold the split key")));
                }
                if let Err(e) = map.split(&at, new_group) {
                    return Ok(rejected(e.to_string()));
                }
                self.set_map(batch, map);
                Outcome::Applied
            }
            ShardCommand::RecordMembers { group, members } => {
                let Some(mut map) = self.map(db)? else { return Ok(rejected("no map")) };
                let Some(shard) = map.group(group) else {
                    return Ok(rejected(format!("no group {group}")));
                };
                let now: Vec<NodeId> = shard.members.iter().copied().collect();
                let mut wanted = members.clone();
                wanted.sort_unstable();
                wanted.dedup();
                if wanted.is_empty() {
                    return Ok(rejected("no members"));
                }
                if now == wanted {
                    return Ok(Outcome::Applied);
                }
                let added: Vec<NodeId> =
                    wanted.iter().copied().filter(|n| !now.contains(n)).collect();
                let gone: Vec<NodeId> =
                    now.iter().copied().filter(|n| !wanted.contains(n)).collect();
                // A move of one replica is one change of the map, one version.
                if let ([to], [from]) = (added.as_slice(), gone.as_slice()) {
                    map.move_replica(group, *from, *to).map_err(any)?;
                } else {
                    for &node in &added {
                        map.add_replica(group, node).map_err(any)?;
                    }
                    for &node in &gone {
                        map.remove_replica(group, node).map_err(any)?;
                    }
                }
                self.set_map(batch, map);
                Outcome::Applied
            }
        })
    }
}

/// Applies a split of the group at `log_id` (see [`crate::ShardNode::split`]): in
/// `batch`, the keys from `at` to the group's end leave the group, its range ends at `at`, and
/// the new group's keyspace gets those keys, the group's sessions, and a raft state that
/// starts at `log_id` (applied, purged up to it, the group's membership, a vote of its term),
/// unless this node holds raft state for the new group already (a replica it got by snapshot:
/// this node's copy of the group was behind). `db` must hold every earlier entry's writes.
pub(crate) fn split(
    db: &Store,
    state: &mut ShardState,
    log_id: LogId<NodeId>,
    at: Vec<u8>,
    new_group: GroupId,
    batch: &mut Batch,
) -> Result<Outcome, AnyError> {
    if new_group == META_GROUP || new_group == db.id() {
        return Ok(rejected(format!("group {new_group} cannot be made by a split")));
    }
    let range = state.range(db)?.cloned().unwrap_or_else(GroupRange::everything);
    if at.as_slice() <= range.start.as_slice() || !range.contains(&at) {
        return Ok(rejected("the split key is not inside the group's range, after its start"));
    }
    if range.splits.iter().any(|(_, g)| *g == new_group) {
        return Ok(rejected(format!("group {new_group} was made by a split already")));
    }
    let membership: StoredMembership<NodeId, openraft::BasicNode> =
        decode(db.get(keys::MEMBERSHIP))?.unwrap_or_default();
    let m = membership.membership();
    if m.get_joint_config().len() != 1 || m.learner_ids().next().is_some() {
        return Ok(rejected("the group's membership is changing"));
    }
    let data_end = match &range.end {
        Some(end) => keys::data(end),
        None => keys::DATA_END.to_vec(),
    };
    let moved = keys::data(&at)..data_end;

    let target = db.sibling(new_group).map_err(any)?;
    let has_state = target.get(keys::APPLIED).map_err(any)?.is_some()
        || target.get(keys::VOTE).map_err(any)?.is_some()
        || target.range(keys::LOG.to_vec()..keys::LOG_END.to_vec()).next().is_some();
    if !has_state {
        let view = db.snapshot();
        for item in view.prefix(keys::CLIENT).chain(view.range(moved.clone())) {
            let (key, value) = item.map_err(any)?;
            batch.put_to(&target, key, value);
        }
        batch.put_to(&target, keys::FORMAT, keys::FORMAT_VERSION.to_le_bytes());
        batch.put_to(&target, keys::APPLIED, encode(&log_id)?);
        batch.put_to(&target, keys::PURGED, encode(&log_id)?);
        let seeded = StoredMembership::new(Some(log_id), m.clone());
        batch.put_to(&target, keys::MEMBERSHIP, encode(&seeded)?);
        // The new group's terms go on from the split's: its first leader's entries follow the
        // split's log id, with a higher term.
        let vote = Vote::new(log_id.leader_id.term, log_id.leader_id.node_id);
        batch.put_to(&target, keys::VOTE, encode(&vote)?);
        let made = GroupRange { start: at.clone(), end: range.end.clone(), splits: Vec::new() };
        batch.put_to(&target, keys::RANGE, encode(&made)?);
    }
    batch.delete_range(moved);
    let mut kept = range;
    kept.end = Some(at.clone());
    kept.splits.push((at, new_group));
    state.set_range(batch, kept)?;
    Ok(Outcome::Applied)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload, Membership};

    use super::*;
    use crate::{Command, KvReader, NodeStore, StateMachine, TypeConfig};

    fn entry(index: u64, command: Command) -> Entry<TypeConfig> {
        Entry { log_id: log_id(2, 1, index), payload: EntryPayload::Normal(command) }
    }

    fn members(index: u64, learners: bool) -> Entry<TypeConfig> {
        let voters = BTreeSet::from([1, 2, 3]);
        let mut m = Membership::new(vec![voters], None);
        if learners {
            m = Membership::new(vec![BTreeSet::from([1, 2, 3])], BTreeSet::from([4]));
        }
        Entry { log_id: log_id(2, 1, index), payload: EntryPayload::Membership(m) }
    }

    fn shard(index: u64, command: ShardCommand) -> Entry<TypeConfig> {
        entry(index, Command::Shard(command))
    }

    fn keys(kv: &KvReader) -> Vec<String> {
        kv.scan().map(|r| String::from_utf8(r.unwrap().0).unwrap()).collect()
    }

    fn split(at: &str, new_group: GroupId) -> ShardCommand {
        ShardCommand::Split { at: at.into(), new_group }
    }

    fn once(client: u64, seq: u64, key: &str) -> Command {
        Command::Once { client, seq, command: Box::new(Command::put(key, "v")) }
    }

    #[tokio::test]
    async fn a_split_moves_the_keys_from_its_key_on_in_one_batch_with_the_log_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeStore::open(dir.path(), bloomkv::Options::default()).unwrap();
        let (_log, mut g) = node.group(3).unwrap();
        let assign = ShardCommand::Assign { start: b"b".to_vec(), end: None };
        g.apply([members(1, false), shard(2, assign)]).await.unwrap();
        // Written in the same call as the split, before it: the split must see them.
        let outcomes = g
            .apply([
                entry(3, Command::put("c", "1")),
                entry(4, Command::put("m", "2")),
                entry(5, once(7, 1, "z")),
                shard(6, split("m", 9)),
                entry(7, Command::put("n", "3")),
                entry(8, Command::Batch(vec![Command::put("d", "4"), Command::put("x", "5")])),
                entry(9, Command::put("d", "6")),
                entry(10, Command::put("a", "7")),
            ])
            .await
            .unwrap();
        let moved = Some(Some(9));
        assert_eq!(outcomes[3], Outcome::Applied);
        assert_eq!(refused_range(&outcomes[4]), moved, "{:?}", outcomes[4]);
        assert_eq!(refused_range(&outcomes[5]), moved, "a batch with one key moved");
        assert_eq!(outcomes[6], Outcome::Applied);
        assert_eq!(refused_range(&outcomes[7]), Some(None), "below the range: ask the map");
        assert_eq!(keys(&g.reader()), ["c", "d"]);
        let range = g.reader().range().unwrap().unwrap();
        assert_eq!((range.start, range.end), (b"b".to_vec(), Some(b"m".to_vec())));
        assert_eq!(range.splits, [(b"m".to_vec(), 9)]);

        // Group 9 starts where the split was applied: its data, the sessions, its range and a
        // raft state at the split's log id, its log purged up to it.
        let (mut log9, mut h) = node.group(9).unwrap();
        assert_eq!(keys(&h.reader()), ["m", "z"]);
        let (applied, membership) = h.applied_state().await.unwrap();
        assert_eq!(applied, Some(log_id(2, 1, 6)));
        assert_eq!(membership.voter_ids().collect::<Vec<_>>(), [1, 2, 3]);
        use openraft::storage::RaftLogStorage;
        let state = log9.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(2, 1, 6)));
        assert_eq!(log9.read_vote().await.unwrap(), Some(openraft::Vote::new(2, 1)));
        let made = h.reader().range().unwrap().unwrap();
        assert_eq!((made.start, made.end), (b"m".to_vec(), None));
        // The client's session came along: its retry is answered, not applied again.
        let retry = h.apply([entry(7, once(7, 1, "z"))]).await.unwrap();
        assert_eq!(retry, [Outcome::Applied]);
        let lower = h.apply([entry(8, once(7, 0, "z"))]).await.unwrap();
        assert!(matches!(lower[0], Outcome::OutOfOrder { .. }), "{lower:?}");

        // A snapshot of group 9 carries its range: a new replica of it serves the same keys.
        let snapshot = h.get_snapshot_builder().await.build_snapshot().await.unwrap();
        let (_log, mut copy) = node.group(10).unwrap();
        copy.install_snapshot(&snapshot.meta, snapshot.snapshot).await.unwrap();
        assert_eq!(copy.reader().range().unwrap(), h.reader().range().unwrap());
        assert_eq!(keys(&copy.reader()), ["m", "z"]);
    }

    #[tokio::test]
    async fn a_split_that_cannot_apply_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeStore::open(dir.path(), bloomkv::Options::default()).unwrap();
        let (_log, mut g) = node.group(3).unwrap();
        let assign = ShardCommand::Assign { start: b"b".to_vec(), end: Some(b"k".to_vec()) };
        g.apply([members(1, false), shard(2, assign), entry(3, Command::put("c", "1"))])
            .await
            .unwrap();
        let refused = g
            .apply([
                shard(4, split("b", 9)),
                shard(5, split("k", 9)),
                shard(6, split("a", 9)),
                shard(7, split("c", 3)),
                shard(8, split("c", crate::shard::META_GROUP)),
                members(9, true),
                shard(10, split("c", 9)),
            ])
            .await
            .unwrap();
        for outcome in refused.iter().filter(|o| **o != Outcome::Applied) {
            assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
        }
        assert_eq!(refused.iter().filter(|o| **o == Outcome::Applied).count(), 1, "{refused:?}");
        assert_eq!(keys(&g.reader()), ["c"]);
        assert!(g.reader().range().unwrap().unwrap().splits.is_empty());
        assert_eq!(node.group_ids(), [3], "no group made");
    }

    #[tokio::test]
    async fn a_replica_that_got_the_new_group_by_snapshot_keeps_it_when_its_split_applies() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeStore::open(dir.path(), bloomkv::Options::default()).unwrap();
        let (_log, mut g) = node.group(3).unwrap();
        g.apply([members(1, false), entry(2, Command::put("x", "old"))]).await.unwrap();
        // Group 9 here already runs, ahead: a later value of x.
        let (_log9, mut h) = node.group(9).unwrap();
        h.apply([members(7, false), entry(8, Command::put("x", "new"))]).await.unwrap();
        g.apply([shard(3, split("m", 9))]).await.unwrap();
        assert!(keys(&g.reader()).is_empty());
        assert_eq!(h.reader().get(b"x").unwrap().as_deref(), Some(&b"new"[..]));
        assert_eq!(h.applied_state().await.unwrap().0, Some(log_id(2, 1, 8)));
    }

    fn map_of(sm: &StateMachine) -> ShardMap {
        sm.reader().shard_map().unwrap().unwrap()
    }

    #[tokio::test]
    async fn the_metadata_group_applies_each_change_of_the_map_once() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeStore::open(dir.path(), bloomkv::Options::default()).unwrap();
        let (_log, mut meta) = node.group(crate::shard::META_GROUP).unwrap();
        let map = ShardMap::new(1, [1, 2, 3]).unwrap();
        let record = ShardCommand::RecordSplit { group: 1, at: b"m".to_vec(), new_group: 9 };
        let moved = ShardCommand::RecordMembers { group: 9, members: vec![1, 2, 4] };
        let outcomes = meta
            .apply([
                shard(1, ShardCommand::InitMap(map.encode())),
                shard(2, ShardCommand::InitMap(map.encode())),
                shard(3, record.clone()),
                shard(4, record),
                shard(5, moved.clone()),
                shard(6, moved),
                shard(7, ShardCommand::RecordSplit { group: 1, at: b"q".to_vec(), new_group: 10 }),
                shard(8, ShardCommand::InitMap(ShardMap::new(2, [1]).unwrap().encode())),
                shard(
                    9,
                    ShardCommand::InitMap(ShardMap::new(SPLIT_GROUP_BASE, [1]).unwrap().encode()),
                ),
            ])
            .await
            .unwrap();
        assert!(outcomes[..6].iter().all(|o| *o == Outcome::Applied), "{outcomes:?}");
        assert!(outcomes[6..].iter().all(|o| matches!(o, Outcome::Rejected { .. })));
        let map = map_of(&meta);
        assert_eq!(map.version(), 3, "a split and a move, each recorded once");
        assert_eq!(map.group_of(b"m"), 9);
        assert_eq!(map.group(9).unwrap().members, &BTreeSet::from([1, 2, 4]));
    }
}
