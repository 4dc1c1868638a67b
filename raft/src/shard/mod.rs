//! Range shards over many raft groups: the [`ShardMap`] that says which group serves which
//! keys, and on which nodes; the [`ShardCommand`]s that change it and split groups; and
//! [`ShardNode`], a node's groups and its copy of the map, replicated by the metadata group.

pub(crate) mod apply;
mod map;
mod node;

pub use apply::{refused_range, GroupRange, ShardCommand, NOT_IN_RANGE};
pub use map::{Piece, Route, Shard, ShardMap, MAX_SPLIT_KEY_BYTES};
pub use node::{ShardError, ShardNode, Transport};

use crate::GroupId;

/// The metadata group's id: the group whose state machine holds the [`ShardMap`]. Never a
/// data group's.
pub const META_GROUP: GroupId = u64::MAX;

/// The first id of the groups splits make: [`ShardCommand::Reserve`] gives this plus its
/// metadata log index. A cluster's first groups have ids below it.
pub const SPLIT_GROUP_BASE: GroupId = 1 << 32;
