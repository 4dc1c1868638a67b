//! Range shards over many raft groups: the [`ShardMap`] that says which group serves which
//! keys, and on which nodes.

mod map;

pub use map::{Piece, Route, Shard, ShardMap, MAX_SPLIT_KEY_BYTES};
