//! Range shards over many raft groups: the [`ShardMap`] that says which group serves which
//! keys, and on which nodes; and the [`ShardCommand`]s that change it and split groups, as a
//! group's state machine applies them. [`crate::ShardNode`], which runs a node's groups and
//! keeps its copy of the map, sits above the group storage, in `shard_node.rs`.

pub(crate) mod apply;
mod map;

pub use apply::{refused_range, GroupRange, ShardCommand, NOT_IN_RANGE};
pub use map::{Piece, Route, Shard, ShardMap, MAX_SPLIT_KEY_BYTES};

use crate::GroupId;

/// The metadata group's id: the group whose state machine holds the [`ShardMap`]. Never a
/// data group's.
pub const META_GROUP: GroupId = u64::MAX;

/// The first id of the groups splits make: [`ShardCommand::Reserve`] gives this plus its
/// metadata log index. A cluster's first groups have ids below it.
pub const SPLIT_GROUP_BASE: GroupId = 1 << 32;
