//! The block cache: decompressed, validated blocks shared by every table (and every database)
//! that is handed the same cache.
//!
//! Entries are keyed by `(table id, block offset)`. Table ids come from a process-wide counter
//! ([`BlockCache::next_table_id`]) rather than from file numbers, so two databases sharing one
//! cache can never read each other's blocks. Eviction and sharding are `quick_cache`'s (a
//! CLOCK-Pro-like policy with sharded locks); each entry is charged its payload size plus a
//! fixed overhead for the key, the `Block` header and the map slot.

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::table::block::Block;

/// Bytes charged per entry on top of the payload.
const ENTRY_OVERHEAD: u64 = 64;

#[derive(Clone, Copy, Debug)]
struct BlockWeighter;

impl Weighter<(u64, u64), Block> for BlockWeighter {
    fn weight(&self, _key: &(u64, u64), block: &Block) -> u64 {
        block.size() as u64 + ENTRY_OVERHEAD
    }
}

/// A shared, sharded cache of decompressed blocks bounded by bytes.
pub struct BlockCache {
    cache: Cache<(u64, u64), Block, BlockWeighter>,
    capacity: u64,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity_bytes", &self.capacity)
            .field("usage_bytes", &self.usage_bytes())
            .field("entries", &self.cache.len())
            .finish()
    }
}

impl BlockCache {
    /// A cache holding at most about `capacity_bytes` of blocks.
    pub fn new(capacity_bytes: usize) -> Self {
        let capacity = capacity_bytes as u64;
        // quick_cache sizes its shards from the expected item count; 4 KiB is the default block.
        let items = (capacity_bytes / 4096).max(16);
        BlockCache { cache: Cache::with_weighter(items, capacity, BlockWeighter), capacity }
    }

    /// A fresh id for a table opened in this process (`fs::next_file_id`, which blob files
    /// share: one file cache holds both).
    pub fn next_table_id() -> u64 {
        crate::fs::next_file_id()
    }

    /// The cached block at `offset` of table `table_id`, if present.
    pub fn get(&self, table_id: u64, offset: u64) -> Option<Block> {
        self.cache.get(&(table_id, offset))
    }

    /// Caches a block (it may be refused or evict others to stay within capacity).
    pub fn insert(&self, table_id: u64, offset: u64, block: Block) {
        self.cache.insert((table_id, offset), block);
    }

    /// Bytes currently charged.
    pub fn usage_bytes(&self) -> u64 {
        self.cache.weight()
    }

    /// Number of cached blocks.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::block::BlockBuilder;
    use bytes::Bytes;

    fn block(n: usize) -> Block {
        let mut b = BlockBuilder::new(16);
        let v = vec![7u8; n];
        b.add(&crate::key::internal_key(b"k", 1, crate::key::ValueKind::Put), &v);
        Block::new(Bytes::from(b.finish())).unwrap()
    }

    #[test]
    fn hits_and_bounded_usage() {
        let cache = BlockCache::new(64 * 1024);
        let id = BlockCache::next_table_id();
        assert_ne!(id, BlockCache::next_table_id());
        assert!(cache.get(id, 0).is_none());
        cache.insert(id, 0, block(100));
        assert_eq!(cache.get(id, 0).unwrap().size(), block(100).size());
        assert!(cache.get(id + 1, 0).is_none(), "another table's id must not hit");
        for off in 0..1000u64 {
            cache.insert(id, off * 1000, block(1000));
            assert!(cache.usage_bytes() <= cache.capacity);
        }
        assert!(cache.len() < 1000 && !cache.is_empty());
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let cache = BlockCache::new(0);
        cache.insert(1, 0, block(10));
        assert!(cache.get(1, 0).is_none());
        assert_eq!(cache.usage_bytes(), 0);
    }
}
