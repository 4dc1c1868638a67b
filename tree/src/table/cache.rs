//! The block cache: decompressed, validated blocks shared by every table (and every database)
//! that is handed the same cache, and the checked values of blob files beside them.
//!
//! Entries are keyed by `(file id, offset)`: a table's block at its offset, or a blob file's
//! value at its reference's offset. File ids come from a process-wide counter
//! ([`BlockCache::next_table_id`], which tables and blob files share) rather than from file
//! numbers, so two databases sharing one cache can never read each other's entries, and a
//! block and a blob value never share a key. Eviction and sharding are `quick_cache`'s (a
//! CLOCK-Pro-like policy with sharded locks); each entry is charged its payload size plus a
//! fixed overhead for the key, the `Block` header and the map slot.

use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{DefaultHashBuilder, OptionsBuilder, Weighter};

use bytes::Bytes;

use crate::table::block::Block;

/// Bytes charged per entry on top of the payload.
pub const ENTRY_OVERHEAD: u64 = 64;

/// The smallest shard the cache is split into (unless the whole cache is smaller).
const MIN_SHARD_BYTES: usize = 4 << 20;

/// A blob value charged more than 1/this of the cache, or than half of the shard it would
/// sit in, is not cached: one large value read once would otherwise evict a good share of
/// the blocks every lookup needs (the shard's share, since each shard evicts on its own).
pub const MAX_BLOB_FRACTION: u64 = 8;

/// What the cache holds under a key.
#[derive(Clone, Debug)]
enum Entry {
    Block(Block),
    /// A blob value whose CRC was checked when it was read from its file.
    Blob(Bytes),
}

#[derive(Clone, Copy, Debug)]
struct EntryWeighter;

impl Weighter<(u64, u64), Entry> for EntryWeighter {
    fn weight(&self, _key: &(u64, u64), entry: &Entry) -> u64 {
        let payload = match entry {
            Entry::Block(b) => b.size(),
            Entry::Blob(v) => v.len(),
        };
        payload as u64 + ENTRY_OVERHEAD
    }
}

/// A shared, sharded cache of decompressed blocks (and blob values) bounded by bytes.
pub struct BlockCache {
    cache: Cache<(u64, u64), Entry, EntryWeighter>,
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
        // Each shard evicts on its own, and a blob value must fit in its shard with room to
        // spare: shards of at least MIN_SHARD_BYTES, as many as quick_cache would choose
        // (4 per core) when the cache is large enough.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = (capacity_bytes / MIN_SHARD_BYTES).clamp(1, cores * 4);
        let options = OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(capacity)
            .shards(shards)
            .build()
            .expect("capacity and items are set");
        let cache = Cache::with_options(
            options,
            EntryWeighter,
            DefaultHashBuilder::default(),
            DefaultLifecycle::default(),
        );
        BlockCache { cache, capacity }
    }

    /// A fresh id for a table opened in this process (`fs::next_file_id`, which blob files
    /// share: one file cache holds both).
    pub fn next_table_id() -> u64 {
        crate::fs::next_file_id()
    }

    /// The cached block at `offset` of table `table_id`, if present.
    pub fn get(&self, table_id: u64, offset: u64) -> Option<Block> {
        match self.cache.get(&(table_id, offset))? {
            Entry::Block(b) => Some(b),
            Entry::Blob(_) => None,
        }
    }

    /// Caches a block (it may be refused or evict others to stay within capacity).
    pub fn insert(&self, table_id: u64, offset: u64, block: Block) {
        self.cache.insert((table_id, offset), Entry::Block(block));
    }

    /// The cached value at `offset` of blob file `blob_id`, if present: its bytes were
    /// checked against the reference's CRC when they were read from the file.
    pub fn get_blob(&self, blob_id: u64, offset: u64) -> Option<Bytes> {
        match self.cache.get(&(blob_id, offset))? {
            Entry::Blob(v) => Some(v),
            Entry::Block(_) => None,
        }
    }

    /// Caches a checked blob value, charged its length plus [`ENTRY_OVERHEAD`]; one charged
    /// more than [`BlockCache::max_blob_charge`] is not cached.
    pub fn insert_blob(&self, blob_id: u64, offset: u64, value: Bytes) {
        if value.len() as u64 + ENTRY_OVERHEAD > self.max_blob_charge() {
            return;
        }
        self.cache.insert((blob_id, offset), Entry::Blob(value));
    }

    /// The most a cached blob value is charged (see [`MAX_BLOB_FRACTION`]).
    pub fn max_blob_charge(&self) -> u64 {
        (self.capacity / MAX_BLOB_FRACTION).min(self.cache.shard_capacity() / 2)
    }

    /// Bytes currently charged.
    pub fn usage_bytes(&self) -> u64 {
        self.cache.weight()
    }

    /// Number of cached entries (blocks and blob values).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// The most bytes it holds.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity
    }
}

impl crate::blob::ValueCache for BlockCache {
    fn get_value(&self, file_id: u64, offset: u64) -> Option<Bytes> {
        self.get_blob(file_id, offset)
    }

    fn insert_value(&self, file_id: u64, offset: u64, value: Bytes) {
        self.insert_blob(file_id, offset, value)
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
    fn blob_values_are_charged_their_length_and_large_ones_are_not_cached() {
        let cache = BlockCache::new(1 << 20);
        let id = BlockCache::next_table_id();
        cache.insert_blob(id, 4096, Bytes::from(vec![1u8; 10_000]));
        assert_eq!(cache.usage_bytes(), 10_000 + ENTRY_OVERHEAD);
        assert_eq!(cache.get_blob(id, 4096).unwrap().len(), 10_000);
        assert!(cache.get(id, 4096).is_none(), "a blob value is not a block");
        assert!(cache.get_blob(id, 0).is_none());
        // The largest charge allowed is cached; a byte more is not.
        let max = cache.max_blob_charge();
        assert!(max <= (1 << 20) / MAX_BLOB_FRACTION && max > 10_000);
        let most = (max - ENTRY_OVERHEAD) as usize;
        cache.insert_blob(id, 1 << 20, Bytes::from(vec![2u8; most + 1]));
        assert!(cache.get_blob(id, 1 << 20).is_none());
        assert_eq!(cache.usage_bytes(), 10_000 + ENTRY_OVERHEAD);
        cache.insert_blob(id, 1 << 20, Bytes::from(vec![2u8; most]));
        assert_eq!(cache.get_blob(id, 1 << 20).unwrap().len(), most);
        assert_eq!(cache.usage_bytes(), 10_000 + ENTRY_OVERHEAD + max);
        // Blocks and blob values share the one bound.
        for off in 0..1000u64 {
            cache.insert_blob(id, off * 1000 + 7, Bytes::from(vec![3u8; 5000]));
            cache.insert(id + 1, off * 1000, block(1000));
            assert!(cache.usage_bytes() <= cache.capacity_bytes());
        }
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let cache = BlockCache::new(0);
        cache.insert(1, 0, block(10));
        assert!(cache.get(1, 0).is_none());
        assert_eq!(cache.usage_bytes(), 0);
    }
}
