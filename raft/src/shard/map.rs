//! [`ShardMap`]: which raft group serves which keys, on which nodes.
//!
//! Pure data: no I/O, no clock. The map is replicated (by a metadata group) and cached by
//! clients as bytes ([`ShardMap::encode`]); every change bumps its version, so a request that
//! carries the version its client routed by can be told, by [`ShardMap::check_route`], that the
//! key has moved since.

use std::collections::{BTreeMap, BTreeSet};

use bloomkv::Error;

use crate::{GroupId, NodeId};

/// Which group serves each key, and which nodes hold each group's replicas, at one
/// [`version`](ShardMap::version).
///
/// The key space is cut into contiguous ranges, one per group: the first starts at the empty
/// key, each ends where the next starts, and the last runs to the end of the key space, so
/// every key has exactly one group. Every group has at least one member.
///
/// ```
/// use bloomkv_raft::shard::{Route, ShardMap};
///
/// let mut map = ShardMap::new(1, [1, 2, 3]).unwrap();
/// map.split(b"m", 2).unwrap(); // keys from "m" on go to the new group 2, on nodes 1, 2, 3
/// map.move_replica(2, 3, 4).unwrap(); // group 2's replica on node 3 moves to node 4
/// assert_eq!((map.group_of(b"apple"), map.group_of(b"melon")), (1, 2));
/// assert_eq!(map.version(), 3);
///
/// // A client that routed "melon" by version 1 sent it to group 1: it is told where it went.
/// assert_eq!(map.check_route(b"melon", 1, 1), Route::Stale { version: 3, group: 2 });
/// assert_eq!(map.check_route(b"apple", 1, 1), Route::Serve);
///
/// let bytes = map.encode();
/// assert_eq!(ShardMap::decode(&bytes).unwrap(), map);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    version: u64,
    /// By `start`, ascending; the first starts at the empty key.
    ranges: Vec<Range>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    start: Vec<u8>,
    group: GroupId,
    members: BTreeSet<NodeId>,
}

/// One group's range and replicas, as a [`ShardMap`] holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard<'a> {
    /// The first key of the range.
    pub start: &'a [u8],
    /// The first key after the range; `None` for the last range, which runs to the end of the
    /// key space.
    pub end: Option<&'a [u8]>,
    /// The group serving the range.
    pub group: GroupId,
    /// The nodes holding the group's replicas.
    pub members: &'a BTreeSet<NodeId>,
}

impl Shard<'_> {
    /// Whether `key` is in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start && self.end.is_none_or(|end| key < end)
    }
}

/// The part of a key range that one group serves: see [`ShardMap::pieces`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The first key of the part.
    pub start: Vec<u8>,
    /// The first key after it; `None`: to the end of the key space.
    pub end: Option<Vec<u8>>,
    /// The group serving it.
    pub group: GroupId,
}

/// What a node does with a request routed by a client's copy of the map: see
/// [`ShardMap::check_route`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The group the request was sent to serves its key.
    Serve,
    /// The key is not the group's: map `version` (newer than the request's) has moved it to
    /// `group`. The client takes the newer map and sends the request there.
    Stale {
        /// This map's version.
        version: u64,
        /// The group serving the key in it.
        group: GroupId,
    },
    /// The request was routed by a newer map than this one, in which the key is the group's:
    /// this map is behind, and the node must catch up before it can say where the key is.
    Behind {
        /// This map's version.
        version: u64,
    },
}

/// The byte that starts an encoded map: the encoding's version.
const FORMAT: u8 = 1;

/// The longest split key: a key of the data, so at most bloomkv's key limit.
pub const MAX_SPLIT_KEY_BYTES: usize = bloomkv::MAX_KEY_BYTES;

fn invalid(reason: String) -> Error {
    Error::InvalidArgument(format!("shard map: {reason}"))
}

impl ShardMap {
    /// A map of version 1 in which `group`, on `members`, serves every key. Fails if
    /// `members` is empty.
    pub fn new(
        group: GroupId,
        members: impl IntoIterator<Item = NodeId>,
    ) -> Result<ShardMap, Error> {
        let members: BTreeSet<NodeId> = members.into_iter().collect();
        if members.is_empty() {
            return Err(invalid(format!("group {group} has no members")));
        }
        Ok(ShardMap { version: 1, ranges: vec![Range { start: Vec::new(), group, members }] })
    }

    /// A map of `version` with the given ranges, each `(start, group, members)`, in key order:
    /// how a node that cuts the key space itself (say into N ranges at its first start)
    /// states its map without N - 1 splits. Fails, as [`ShardMap::validate`] does, if the
    /// ranges break a rule (the first must start at the empty key).
    ///
    /// ```
    /// use bloomkv_raft::shard::ShardMap;
    ///
    /// let map = ShardMap::from_ranges(1, [(vec![], 0, [1].into()), (b"m".to_vec(), 1, [1].into())])
    ///     .unwrap();
    /// assert_eq!((map.group_of(b"apple"), map.group_of(b"melon"), map.version()), (0, 1, 1));
    /// assert!(ShardMap::from_ranges(1, [(b"m".to_vec(), 1, [1].into())]).is_err());
    /// ```
    pub fn from_ranges(
        version: u64,
        ranges: impl IntoIterator<Item = (Vec<u8>, GroupId, BTreeSet<NodeId>)>,
    ) -> Result<ShardMap, Error> {
        let ranges =
            ranges.into_iter().map(|(start, group, members)| Range { start, group, members });
        let map = ShardMap { version, ranges: ranges.collect() };
        map.validate()?;
        Ok(map)
    }

    /// [`ShardMap::pieces`] of the keys that start with `prefix`.
    pub fn prefix_pieces(&self, prefix: &[u8]) -> Vec<Piece> {
        // The first key after every key with the prefix: its last byte below 0xff raised by
        // one; none (the end of the key space) if every byte is 0xff.
        let mut end = prefix.to_vec();
        while end.last() == Some(&0xff) {
            end.pop();
        }
        let end = end.last_mut().map(|last| *last += 1).map(|()| end);
        self.pieces(prefix, end.as_deref())
    }

    /// The map's version: 1 when made, one more at every change.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The number of groups (and of ranges).
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Always false: every map has at least one group.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    fn shard(&self, i: usize) -> Shard<'_> {
        let range = &self.ranges[i];
        Shard {
            start: &range.start,
            end: self.ranges.get(i + 1).map(|next| next.start.as_slice()),
            group: range.group,
            members: &range.members,
        }
    }

    /// Every shard, in key order.
    pub fn shards(&self) -> impl Iterator<Item = Shard<'_>> {
        (0..self.ranges.len()).map(|i| self.shard(i))
    }

    /// The index of the range holding `key`.
    fn index_of(&self, key: &[u8]) -> usize {
        // The first range starts at the empty key, which no key sorts before.
        self.ranges.partition_point(|r| r.start.as_slice() <= key) - 1
    }

    /// The shard holding `key`.
    pub fn shard_of(&self, key: &[u8]) -> Shard<'_> {
        self.shard(self.index_of(key))
    }

    /// The group serving `key`.
    pub fn group_of(&self, key: &[u8]) -> GroupId {
        self.ranges[self.index_of(key)].group
    }

    /// Group `group`'s shard, if the map has the group.
    pub fn group(&self, group: GroupId) -> Option<Shard<'_>> {
        self.position(group).map(|i| self.shard(i))
    }

    fn position(&self, group: GroupId) -> Option<usize> {
        self.ranges.iter().position(|r| r.group == group)
    }

    fn position_or_err(&self, group: GroupId) -> Result<usize, Error> {
        self.position(group).ok_or_else(|| invalid(format!("no group {group}")))
    }

    /// A group id the map does not use: one above the largest.
    pub fn unused_group_id(&self) -> GroupId {
        self.ranges.iter().map(|r| r.group).max().map_or(0, |g| g.saturating_add(1))
    }

    /// The keys from `start` up to `end` (excluded; `None`: to the end of the key space) cut
    /// where their groups change, in key order: how a scan or a range delete over them is
    /// split into one request per group. Empty if the range is.
    pub fn pieces(&self, start: &[u8], end: Option<&[u8]>) -> Vec<Piece> {
        if end.is_some_and(|end| end <= start) {
            return Vec::new();
        }
        let mut pieces = Vec::new();
        for i in self.index_of(start)..self.ranges.len() {
            let shard = self.shard(i);
            if end.is_some_and(|end| end <= shard.start) {
                break;
            }
            let piece_end = match (shard.end, end) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            pieces.push(Piece {
                start: shard.start.max(start).to_vec(),
                end: piece_end.map(<[u8]>::to_vec),
                group: shard.group,
            });
        }
        pieces
    }

    /// `keys` by the group serving each, in their order within each group: how a batch is
    /// split into one per group (each atomic on its own, the whole not).
    pub fn by_group<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> BTreeMap<GroupId, Vec<&'k [u8]>> {
        let mut groups: BTreeMap<GroupId, Vec<&'k [u8]>> = BTreeMap::new();
        for key in keys {
            groups.entry(self.group_of(key)).or_default().push(key);
        }
        groups
    }

    /// Where a request for `key`, routed to `group` by the client's map of version `version`,
    /// stands against this map. The group serves it if this map gives it the key, whatever
    /// the versions (a change elsewhere in the map does not concern it). Otherwise a request
    /// routed by this version or an older one is stale ([`Route::Stale`], with the group to
    /// send it to), and one routed by a newer map finds this one behind ([`Route::Behind`]).
    pub fn check_route(&self, key: &[u8], version: u64, group: GroupId) -> Route {
        let owner = self.group_of(key);
        if owner == group {
            Route::Serve
        } else if version > self.version {
            Route::Behind { version: self.version }
        } else {
            Route::Stale { version: self.version, group: owner }
        }
    }

    fn changed(&mut self) {
        self.version += 1;
    }

    /// Splits the range holding `at` there: the keys from `at` to the range's end go to the
    /// new group `new_group`, on the same members as the range's group (a replica moves
    /// later, on its own). Fails, changing nothing, if `new_group` is in the map, `at` already
    /// starts a range (the empty key starts the first), or `at` is longer than
    /// [`MAX_SPLIT_KEY_BYTES`].
    pub fn split(&mut self, at: &[u8], new_group: GroupId) -> Result<(), Error> {
        if at.len() > MAX_SPLIT_KEY_BYTES {
            return Err(invalid(format!(
                "a split key of {} bytes is over {MAX_SPLIT_KEY_BYTES}",
                at.len()
            )));
        }
        if self.position(new_group).is_some() {
            return Err(invalid(format!("group {new_group} is in the map already")));
        }
        let i = self.index_of(at);
        if self.ranges[i].start == at {
            return Err(invalid(format!("a range starts at {:?} already", at.escape_ascii())));
        }
        let members = self.ranges[i].members.clone();
        self.ranges.insert(i + 1, Range { start: at.to_vec(), group: new_group, members });
        self.changed();
        Ok(())
    }

    /// Joins group `right`'s range to group `left`'s, which must end where it starts: `left`
    /// serves both, on its members, and `right` leaves the map. Fails, changing nothing, if
    /// either group is missing or the ranges are not adjacent in that order.
    pub fn merge(&mut self, left: GroupId, right: GroupId) -> Result<(), Error> {
        let (l, r) = (self.position_or_err(left)?, self.position_or_err(right)?);
        if r != l + 1 {
            return Err(invalid(format!(
                "group {right}'s range does not start where group {left}'s ends"
            )));
        }
        self.ranges.remove(r);
        self.changed();
        Ok(())
    }

    /// Adds a replica of `group` on `node`. Fails, changing nothing, if the group is missing
    /// or `node` holds one already.
    pub fn add_replica(&mut self, group: GroupId, node: NodeId) -> Result<(), Error> {
        let i = self.position_or_err(group)?;
        if !self.ranges[i].members.insert(node) {
            return Err(invalid(format!("node {node} holds group {group} already")));
        }
        self.changed();
        Ok(())
    }

    /// Removes `group`'s replica on `node`. Fails, changing nothing, if the group is missing,
    /// `node` holds none, or it is the group's last.
    pub fn remove_replica(&mut self, group: GroupId, node: NodeId) -> Result<(), Error> {
        let i = self.position_or_err(group)?;
        let members = &mut self.ranges[i].members;
        if !members.contains(&node) {
            return Err(invalid(format!("node {node} holds no replica of group {group}")));
        }
        if members.len() == 1 {
            return Err(invalid(format!("node {node} holds group {group}'s last replica")));
        }
        members.remove(&node);
        self.changed();
        Ok(())
    }

    /// Moves `group`'s replica from node `from` to node `to`, as one change. Fails, changing
    /// nothing, if the group is missing, `from` holds no replica or `to` holds one.
    pub fn move_replica(&mut self, group: GroupId, from: NodeId, to: NodeId) -> Result<(), Error> {
        let i = self.position_or_err(group)?;
        let members = &mut self.ranges[i].members;
        if !members.contains(&from) {
            return Err(invalid(format!("node {from} holds no replica of group {group}")));
        }
        if members.contains(&to) {
            return Err(invalid(format!("node {to} holds group {group} already")));
        }
        members.remove(&from);
        members.insert(to);
        self.changed();
        Ok(())
    }

    /// Checks what every map must hold: the first range starts at the empty key, the ranges
    /// ascend strictly (so they cover every key, once), no group has two ranges, every group
    /// has a member and every split key fits [`MAX_SPLIT_KEY_BYTES`]. Maps built by the
    /// operations here always pass; [`ShardMap::decode`] checks a map it reads.
    pub fn validate(&self) -> Result<(), Error> {
        let Some(first) = self.ranges.first() else {
            return Err(invalid("no ranges".into()));
        };
        if !first.start.is_empty() {
            return Err(invalid("the first range does not start at the empty key".into()));
        }
        if self.version == 0 {
            return Err(invalid("version 0".into()));
        }
        let mut groups = BTreeSet::new();
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 && self.ranges[i - 1].start >= range.start {
                return Err(invalid(format!("range {i} does not start after range {}", i - 1)));
            }
            if range.start.len() > MAX_SPLIT_KEY_BYTES {
                return Err(invalid(format!("range {i} starts at a key too long")));
            }
            if !groups.insert(range.group) {
                return Err(invalid(format!("group {} has two ranges", range.group)));
            }
            if range.members.is_empty() {
                return Err(invalid(format!("group {} has no members", range.group)));
            }
        }
        Ok(())
    }

    /// The map as bytes, for the metadata group's log and the clients' caches:
    ///
    /// ```text
    /// format   u8        1
    /// version  u64 LE
    /// count    u32 LE    number of ranges, in key order
    /// range    repeated: start length u32 LE, start, group u64 LE,
    ///                    member count u32 LE, members u64 LE each (ascending)
    /// crc      u32 LE    CRC-32 (IEEE) of every byte before it
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.ranges.len() as u32).to_le_bytes());
        for range in &self.ranges {
            out.extend_from_slice(&(range.start.len() as u32).to_le_bytes());
            out.extend_from_slice(&range.start);
            out.extend_from_slice(&range.group.to_le_bytes());
            out.extend_from_slice(&(range.members.len() as u32).to_le_bytes());
            for member in &range.members {
                out.extend_from_slice(&member.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a map [`ShardMap::encode`] wrote, and [validates](ShardMap::validate) it. Bytes
    /// it did not write (damaged, cut short, another format) give
    /// [`Error::Corruption`]; a map that decodes but breaks a rule gives the rule's
    /// [`Error::InvalidArgument`]. Never allocates more than the input's size.
    pub fn decode(bytes: &[u8]) -> Result<ShardMap, Error> {
        let corrupt = |offset: usize, reason: String| Error::Corruption {
            file: Default::default(),
            offset: offset as u64,
            reason: format!("shard map: {reason}"),
        };
        let Some(body_len) = bytes.len().checked_sub(4) else {
            return Err(corrupt(0, format!("{} bytes, too short", bytes.len())));
        };
        let (body, crc) = bytes.split_at(body_len);
        if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(corrupt(body_len, "checksum mismatch".into()));
        }
        let mut r = Cursor { bytes: body, at: 0 };
        let format = r.take(1).ok_or_else(|| corrupt(0, "empty".into()))?[0];
        if format != FORMAT {
            return Err(corrupt(0, format!("format {format}, this build reads {FORMAT}")));
        }
        let cut = |r: &Cursor, what: &str| corrupt(r.at, format!("cut short in the {what}"));
        let version = r.u64().ok_or_else(|| cut(&r, "version"))?;
        let count = r.u32().ok_or_else(|| cut(&r, "range count"))? as usize;
        // The smallest range takes 16 bytes: a bound on the count before anything is
        // allocated for it.
        if count > r.left() / 16 {
            return Err(corrupt(r.at, format!("{count} ranges in {} bytes", r.left())));
        }
        let mut ranges = Vec::with_capacity(count);
        for _ in 0..count {
            let len = r.u32().ok_or_else(|| cut(&r, "start length"))? as usize;
            let start = r.take(len).ok_or_else(|| cut(&r, "start"))?.to_vec();
            let group = r.u64().ok_or_else(|| cut(&r, "group"))?;
            let members_len = r.u32().ok_or_else(|| cut(&r, "member count"))? as usize;
            if members_len > r.left() / 8 {
                return Err(corrupt(r.at, format!("{members_len} members in {} bytes", r.left())));
            }
            let mut members = BTreeSet::new();
            let mut last = None;
            for _ in 0..members_len {
                let member = r.u64().ok_or_else(|| cut(&r, "members"))?;
                if last.is_some_and(|last| last >= member) {
                    return Err(corrupt(r.at - 8, "members out of order".into()));
                }
                last = Some(member);
                members.insert(member);
            }
            ranges.push(Range { start, group, members });
        }
        if r.left() != 0 {
            return Err(corrupt(r.at, format!("{} bytes after the last range", r.left())));
        }
        let map = ShardMap { version, ranges };
        map.validate()?;
        Ok(map)
    }
}

/// Reads an encoded map front to back; every read is bounds-checked.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}
