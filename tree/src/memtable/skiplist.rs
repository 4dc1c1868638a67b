//! The memtable's skip list: nodes laid out inline in arena chunks, writers inserting at
//! once, any number of lock-free readers (LevelDB's `db/skiplist.h` and `util/arena.cc`,
//! RocksDB's `InlineSkipList` and `ConcurrentArena`, Pebble's `arenaskl`).
//!
//! # Layout
//!
//! Entries are carved from 32 KiB chunks ([`CHUNK_BYTES`]); a node larger than
//! [`MAX_CHUNKED_ENTRY`] gets a buffer of its own, so that starting a new chunk never
//! abandons more than that much of the previous one. A node is one contiguous, 8-aligned
//! allocation, addressed by a pointer to its header:
//!
//! ```text
//!   next[h-1] .. next[1] next[0] | head (16) | meta (4) | value len (4) | user key | trailer (8, LE) | value | [owner]
//!   ^ the tower, h pointers      ^ node pointer: the header
//! ```
//!
//! The tower sits below the header (RocksDB's trick), so the header and the key are found at a
//! fixed offset whatever the node's height, and a search reads the head and the first tower
//! slot from the same cache line or two. The head is the user key's first 16 bytes as two
//! integers ([`Head`]): unequal heads settle a comparison without reading the key. The user
//! key is followed by its trailer so that `user key || trailer` is the encoded internal key,
//! handed out as a slice. `meta` packs the key's length, the node's height (only checked in
//! debug builds: a search only follows a node's link at a level it reached the node on) and
//! whether the node has a buffer of its own; such a node ends with a pointer to that buffer,
//! which is what lets a read share its value.
//!
//! Chunks are reference-counted ([`Chunk`] in an `Arc`): the list holds every one until it is
//! dropped, and a value shared out of a node's own buffer holds that buffer, so it outlives
//! the memtable. Values in shared chunks are never shared (see [`MAX_CHUNKED_ENTRY`]): they
//! would keep a whole chunk alive.
//!
//! # Concurrent writers, lock-free readers
//!
//! Several threads may insert at once (the write path inserts single puts beside each other,
//! `db/in_flight.rs`). Only allocation takes a lock: the arena has a few shards, each a
//! mutex over a chunk being carved, its height generator and its counts, and a thread sticks
//! to one shard, so writers on different cores neither wait for each other there nor write
//! the same cache line. Searching and linking take no lock. Readers take no lock and never
//! write.
//!
//! The memory-ordering argument is LevelDB's, with RocksDB's compare-and-swap linking. A
//! writer builds a node completely — header, key and value — in arena memory no reader can
//! reach yet, then links it into each level from the bottom up. At each level it sets the
//! node's own link to the successor it found and swaps the node's address into the
//! predecessor's link if that still holds the successor (`compare_exchange`, `Release`). If
//! another insert got there first, it searches on from the same predecessor, which stays
//! before the key because nodes are never removed. Readers load links with `Acquire`, so a
//! reader that loads the new node's address sees everything written into the node before
//! the exchange that published it. Nodes are never changed after publication except for
//! their towers, which only hold atomics, and never freed before the list, so a reader can
//! hold a node as long as it holds the list. Linking from the bottom up means a node
//! reachable at some level is already in every level below it, and a reader that meets the
//! list mid-insert sees a correct (if smaller) list either way. The list's height is a
//! `Relaxed` hint: a reader that sees a new height before the node that raised it finds a
//! null link in the head's tower there and descends; a writer whose search started below a
//! level another one raised meets that link in its exchange and searches on from the head.
//!
//! # Equal keys
//!
//! The engine never inserts the same internal key twice (every operation gets a sequence
//! number of its own, and recovery refuses a WAL whose sequence numbers repeat), but the
//! memtable documents that inserting a `(user_key, seq, kind)` again replaces its value.
//! The new node goes before the equal ones (a search stops at the first node not below its
//! key) and shadows them: `seek` lands on it, the forward step skips equal successors, and
//! the backward moves, which land on the last of a run of equal nodes, search once more for
//! its first. All of that happens only once such an insert has set [`SkipList::shadowing`];
//! it is set before the shadowing node is linked, so a reader that has seen that node sees
//! the flag too.

use std::alloc::{self, Layout};
use std::cmp::Ordering;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use crossbeam::utils::CachePadded;

use crate::key::TRAILER_LEN;
use crate::key::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::key_head::key_head;

/// Size of the chunks nodes are carved from.
pub(super) const CHUNK_BYTES: usize = 32 * 1024;

/// Nodes larger than this get a buffer of their own, so that starting a new chunk never
/// abandons more than this much of the previous one.
///
/// A value in a shared chunk is smaller than this, and so less than an eighth of its chunk:
/// a read never shares it (it would keep the whole chunk alive), and the chunks need no way
/// back from a node to its chunk.
pub(super) const MAX_CHUNKED_ENTRY: usize = CHUNK_BYTES / 16;
const _: () = assert!(!crate::value::may_share(MAX_CHUNKED_ENTRY, CHUNK_BYTES));

/// Tallest tower. With a quarter of the nodes reaching each next level, 12 levels keep
/// searches logarithmic up to 4^12 (16 million) entries.
pub(super) const MAX_HEIGHT: usize = 12;

/// Alignment of every node, and so of the chunks: towers and headers hold 8-byte words.
const ALIGN: usize = 8;

/// `Header::meta`: the user key's length in the low bits, then the height, then the flag for
/// a node with a buffer of its own.
const KEY_LEN_BITS: u32 = 24;
const HEIGHT_SHIFT: u32 = KEY_LEN_BITS;
const OWN_BUFFER: u32 = 1 << 31;
const _: () = assert!(MAX_KEY_BYTES < 1 << KEY_LEN_BITS);
const _: () = assert!(MAX_HEIGHT < 1 << (31 - HEIGHT_SHIFT));
const _: () = assert!(MAX_VALUE_BYTES + crate::key::EXPIRY_LEN <= u32::MAX as usize);

/// Bytes of the user key copied into [`Head`].
pub(super) const HEAD_LEN: usize = 16;

/// The user key's [`key_head`] (its first [`HEAD_LEN`] bytes, zero-padded, big-endian),
/// held as two halves: compared as a pair it costs a search fewer instructions than a
/// `u128`. Unequal heads settle a comparison without looking at the keys; equal heads mean
/// the keys agree on as many of their first 16 bytes as the shorter one has (see
/// `crate::key_head` for why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Head(u64, u64);

impl Head {
    #[inline]
    pub(super) fn of(user_key: &[u8]) -> Head {
        let v = key_head(user_key);
        Head((v >> 64) as u64, v as u64)
    }
}

/// What the list's order looks at: the user key with its head, and the trailer. A lookup's
/// key borrows the caller's user key, so a search allocates and copies nothing.
#[derive(Clone, Copy)]
pub(super) struct Parts<'a> {
    pub(super) head: Head,
    pub(super) user_key: &'a [u8],
    pub(super) trailer: u64,
}

impl<'a> Parts<'a> {
    #[inline]
    pub(super) fn new(user_key: &'a [u8], trailer: u64) -> Self {
        Parts { head: Head::of(user_key), user_key, trailer }
    }

    /// The parts of an encoded internal key, cut exactly as `compare_internal` cuts it.
    pub(super) fn from_internal(ikey: &'a [u8]) -> Self {
        Parts::new(crate::key::user_key(ikey), crate::key::trailer(ikey))
    }
}

/// The internal-key order (`crate::key::compare_internal`) on [`Parts`]: user key
/// ascending, then trailer descending. Nodes compare through [`Node::compare`].
#[cfg(test)]
pub(super) fn compare_parts(a: Parts<'_>, b: Parts<'_>) -> Ordering {
    match a.head.cmp(&b.head) {
        Ordering::Equal => compare_past_head(a, b),
        o => o,
    }
}

/// `compare_parts` for parts whose heads are equal.
#[inline]
fn compare_past_head(a: Parts<'_>, b: Parts<'_>) -> Ordering {
    // Equal heads: the keys agree on their first `m` bytes, so only the rest can differ
    // (when either key is at most 16 bytes long, its rest is empty and no key byte is read).
    let m = a.user_key.len().min(b.user_key.len()).min(HEAD_LEN);
    match a.user_key[m..].cmp(&b.user_key[m..]) {
        Ordering::Equal => b.trailer.cmp(&a.trailer),
        o => o,
    }
}

/// A node's fixed part; its tower lies just below it, its key and value just above.
#[repr(C)]
struct Header {
    head_hi: u64,
    head_lo: u64,
    /// The user key's length, the height and [`OWN_BUFFER`].
    meta: u32,
    value_len: u32,
}

const HEADER_BYTES: usize = size_of::<Header>();
const LINK_BYTES: usize = size_of::<AtomicPtr<Header>>();
const _: () = assert!(HEADER_BYTES % ALIGN == 0 && align_of::<Header>() <= ALIGN);
const _: () = assert!(LINK_BYTES == ALIGN && align_of::<AtomicPtr<Header>>() <= ALIGN);

/// One arena allocation: a chunk of nodes, a node's own buffer, or the head's tower.
pub(super) struct Chunk {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a chunk owns its allocation. What is written into it is written by the writer that
// allocated the node, before the node is published (or into atomics), and read by readers
// after an `Acquire` load of the node's address (see the module documentation), so the chunk
// can be shared and dropped on any thread.
unsafe impl Send for Chunk {}
// SAFETY: as above; `&Chunk` gives access to nothing but its address and length.
unsafe impl Sync for Chunk {}

impl Chunk {
    fn layout(len: usize) -> Layout {
        // Sizes are bounded by the key and value limits, far below `isize::MAX`.
        Layout::from_size_align(len, ALIGN).expect("chunk layout")
    }

    fn new(len: usize) -> Chunk {
        assert!(len > 0);
        let layout = Chunk::layout(len);
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc::alloc(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Chunk { ptr, len }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated in `Chunk::new` with this very layout, and is freed
        // only here, once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Chunk::layout(self.len)) }
    }
}

/// The owner of a value shared out of a node's own buffer: it keeps the buffer alive.
struct SharedValue {
    chunk: Arc<Chunk>,
    offset: usize,
    len: usize,
}

impl AsRef<[u8]> for SharedValue {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `offset..offset + len` is a published node's value inside `chunk` (checked
        // in `Node::share_value`), which `self.chunk` keeps allocated and nobody writes again.
        unsafe { std::slice::from_raw_parts(self.chunk.ptr.as_ptr().add(self.offset), self.len) }
    }
}

/// One of the arena's [`ARENA_SHARDS`]: a chunk being carved, the height generator, and
/// the counts of what was inserted through it. Threads inserting at once use shards of
/// their own, so they neither wait for one mutex nor write one cache line (RocksDB's
/// `ConcurrentArena` shards its blocks per core for the same reason).
struct Arena {
    writer: Mutex<Writer>,
    /// Entries inserted through this shard, less those that shadow an equal one.
    len: AtomicUsize,
    /// Bytes this shard took: nodes and the chunk tails they could not fill.
    bytes: AtomicUsize,
}

/// A shard's allocation state, behind its mutex.
struct Writer {
    /// Every allocation nodes were carved from, kept until the list is dropped.
    chunks: Vec<Arc<Chunk>>,
    /// The chunk small nodes are being carved from, and how much of it is used.
    current: Option<Arc<Chunk>>,
    used: usize,
    /// State of the xorshift generator choosing heights.
    rng: u64,
}

/// How many shards the arena has. A thread sticks to one; one thread inserting uses one.
const ARENA_SHARDS: usize = 4;

thread_local! {
    /// This thread's arena shard, assigned round-robin on its first insert.
    static SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's arena shard.
fn shard() -> usize {
    SHARD
        .try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_SHARD.fetch_add(1, AtomicOrdering::Relaxed) % ARENA_SHARDS);
            }
            s.get()
        })
        .unwrap_or(0)
}

impl Writer {
    /// A tower height: 1, then each next level with probability 1/4 (LevelDB's branching).
    fn random_height(&mut self) -> usize {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        // Two bits per level: each pair of trailing zero bits is a 1/4 chance.
        1 + ((x.trailing_zeros() / 2) as usize).min(MAX_HEIGHT - 1)
    }

    /// `size` bytes, 8-aligned; the buffer they are, if they are one of their own; and the
    /// bytes the arena took for them (with a chunk tail they abandoned).
    fn alloc(&mut self, size: usize) -> (NonNull<u8>, Option<*const Chunk>, usize) {
        debug_assert!(size % ALIGN == 0);
        if size > MAX_CHUNKED_ENTRY {
            let chunk = Arc::new(Chunk::new(size));
            let ptr = chunk.ptr;
            let owner = Arc::as_ptr(&chunk);
            self.chunks.push(chunk);
            return (ptr, Some(owner), size);
        }
        let fits = self.current.is_some() && CHUNK_BYTES - self.used >= size;
        let mut taken = size;
        if !fits {
            // The rest of the current chunk is lost: count it.
            if self.current.is_some() {
                taken += CHUNK_BYTES - self.used;
            }
            let chunk = Arc::new(Chunk::new(CHUNK_BYTES));
            self.chunks.push(Arc::clone(&chunk));
            self.current = Some(chunk);
            self.used = 0;
        }
        let chunk = self.current.as_ref().expect("a current chunk");
        // SAFETY: `used + size <= CHUNK_BYTES`, so the result lies within the chunk; `used`
        // stays a multiple of `ALIGN`, and the chunk is `ALIGN`-aligned.
        let ptr = unsafe { chunk.ptr.add(self.used) };
        self.used += size;
        (ptr, None, taken)
    }
}

/// A skip list of internal-key entries. See the module documentation.
pub(super) struct SkipList {
    /// The head's tower of [`MAX_HEIGHT`] links, all null at first, with a header that is
    /// never read: the head is where every search starts.
    head: NonNull<Header>,
    _head_chunk: Chunk,
    /// Height of the tallest tower so far (a hint for readers, see the module documentation).
    height: AtomicUsize,
    /// Set once a node shadows an equal one (see the module documentation).
    shadowing: AtomicBool,
    /// The arena's shards.
    arenas: [CachePadded<Arena>; ARENA_SHARDS],
}

// SAFETY: `head` points into `_head_chunk`, owned by the list. Readers only load atomics and
// read published nodes, which never change; writers change links only through atomics, and
// write nodes only while no one else can reach them, into space their arena shard's mutex
// gave them alone (see the module documentation).
unsafe impl Send for SkipList {}
// SAFETY: as above.
unsafe impl Sync for SkipList {}

/// A published node of a list borrowed for `'a`.
#[derive(Clone, Copy)]
pub(super) struct Node<'a> {
    ptr: NonNull<Header>,
    _list: PhantomData<&'a SkipList>,
}

/// A node's address without the borrow of its list, for an iterator that holds the list
/// through an `Arc`: [`SkipList::node_at`] turns it back into a [`Node`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct RawNode(NonNull<Header>);

// SAFETY: an address, nothing more; dereferencing it takes the unsafe `SkipList::node_at`,
// whose contract (the list is alive) is the same on every thread.
unsafe impl Send for RawNode {}
// SAFETY: as above.
unsafe impl Sync for RawNode {}

/// The link at `level` of the node (or head) whose header is at `x`.
///
/// # Safety
///
/// `x` must be the head of a live list or a node written into one, and `level` below its
/// height.
#[inline(always)]
unsafe fn link<'a>(x: NonNull<Header>, level: usize) -> &'a AtomicPtr<Header> {
    // SAFETY: the tower lies just below the header, `level < height` slots of it; it was
    // initialised before the node was published (or, for the head, when it was made), and
    // the caller keeps the list, and so the chunk, alive.
    unsafe { &*(x.as_ptr() as *const AtomicPtr<Header>).sub(level + 1) }
}

impl<'a> Node<'a> {
    /// # Safety
    ///
    /// `ptr` must be a node published in a list that lives for `'a`.
    #[inline(always)]
    unsafe fn new(ptr: NonNull<Header>) -> Self {
        Node { ptr, _list: PhantomData }
    }

    #[inline(always)]
    fn header(self) -> &'a Header {
        // SAFETY: a published node's header is initialised and never written again, and the
        // list (so the chunk) lives for `'a`.
        unsafe { self.ptr.as_ref() }
    }

    #[inline(always)]
    fn key_len(self) -> usize {
        (self.header().meta & ((1 << KEY_LEN_BITS) - 1)) as usize
    }

    #[inline(always)]
    fn height(self) -> usize {
        ((self.header().meta & !OWN_BUFFER) >> HEIGHT_SHIFT) as usize
    }

    #[inline(always)]
    fn data(self) -> *const u8 {
        // SAFETY: the key and value follow the header within the node's allocation.
        unsafe { (self.ptr.as_ptr() as *const u8).add(HEADER_BYTES) }
    }

    /// The node after this one at `level`.
    ///
    /// # Safety
    ///
    /// `level` must be below the node's height: a search only follows links at a level it
    /// reached the node on.
    #[inline(always)]
    unsafe fn next(self, level: usize) -> Option<Node<'a>> {
        debug_assert!(level < self.height());
        // SAFETY: the node is published and `level` is below its height (the caller's
        // promise); a non-null link holds a published node of the same list (`Acquire`
        // pairs with the `Release` that linked it).
        unsafe {
            NonNull::new(link(self.ptr, level).load(AtomicOrdering::Acquire)).map(|p| Node::new(p))
        }
    }

    /// The encoded internal key: `user key || trailer`.
    #[inline]
    pub(super) fn internal_key(self) -> &'a [u8] {
        // SAFETY: the user key and trailer were written after the header before the node was
        // published, and are never written again.
        unsafe { std::slice::from_raw_parts(self.data(), self.key_len() + TRAILER_LEN) }
    }

    #[inline]
    pub(super) fn user_key(self) -> &'a [u8] {
        &self.internal_key()[..self.key_len()]
    }

    #[inline]
    pub(super) fn trailer(self) -> u64 {
        let ikey = self.internal_key();
        u64::from_le_bytes(ikey[ikey.len() - TRAILER_LEN..].try_into().expect("8 bytes"))
    }

    #[inline]
    pub(super) fn value(self) -> &'a [u8] {
        let len = self.header().value_len as usize;
        // SAFETY: the value was written after the trailer before the node was published, and
        // is never written again.
        unsafe { std::slice::from_raw_parts(self.data().add(self.key_len() + TRAILER_LEN), len) }
    }

    #[inline]
    pub(super) fn parts(self) -> Parts<'a> {
        Parts {
            head: Head(self.header().head_hi, self.header().head_lo),
            user_key: self.user_key(),
            trailer: self.trailer(),
        }
    }

    /// This node's order against `key`'s: the heads, held in the header, settle most.
    #[inline(always)]
    pub(super) fn compare(self, key: &Parts<'_>) -> Ordering {
        let h = self.header();
        // Half by half rather than as a tuple: the search's hot path is then two compares
        // and branches.
        if h.head_hi != key.head.0 {
            return if h.head_hi < key.head.0 { Ordering::Less } else { Ordering::Greater };
        }
        if h.head_lo != key.head.1 {
            return if h.head_lo < key.head.1 { Ordering::Less } else { Ordering::Greater };
        }
        compare_past_head(self.parts(), *key)
    }

    /// The buffer this node has of its own, if it has one.
    fn own_buffer(self) -> Option<*const Chunk> {
        if self.header().meta & OWN_BUFFER == 0 {
            return None;
        }
        let at = owner_offset(self.key_len(), self.header().value_len as usize);
        // SAFETY: a node with a buffer of its own ends with the `Arc<Chunk>` address of that
        // buffer, 8-aligned at `owner_offset`, written before it was published.
        Some(unsafe { ptr::read((self.ptr.as_ptr() as *const u8).add(at) as *const *const Chunk) })
    }

    /// The size of the buffer the value lies in when the node has one of its own (what
    /// sharing the value keeps alive); `None` for a node in a shared chunk, whose value is
    /// never shared.
    pub(super) fn own_buffer_len(self) -> Option<usize> {
        // SAFETY: the list holds an `Arc` of every buffer its nodes lie in for `'a`.
        self.own_buffer().map(|chunk| unsafe { (*chunk).len })
    }

    /// The value as `Bytes` that keep the node's own buffer alive, or `None` for a node in
    /// a shared chunk.
    pub(super) fn share_value(self) -> Option<Bytes> {
        let chunk = self.own_buffer()?;
        // SAFETY: `chunk` came from `Arc::as_ptr` of an `Arc<Chunk>` the list holds for
        // `'a`, so the count is at least one while this new reference is made.
        let chunk = unsafe {
            Arc::increment_strong_count(chunk);
            Arc::from_raw(chunk)
        };
        let value = self.value();
        let offset = value.as_ptr() as usize - chunk.ptr.as_ptr() as usize;
        assert!(offset + value.len() <= chunk.len);
        Some(Bytes::from_owner(SharedValue { chunk, offset, len: value.len() }))
    }

    /// The address, to be held without the list's borrow.
    pub(super) fn raw(self) -> RawNode {
        RawNode(self.ptr)
    }
}

/// Offset from a header to the buffer pointer that ends a node with a buffer of its own.
fn owner_offset(key_len: usize, value_len: usize) -> usize {
    (HEADER_BYTES + key_len + TRAILER_LEN + value_len).next_multiple_of(ALIGN)
}

impl SkipList {
    pub(super) fn new() -> Self {
        let head_chunk = Chunk::new(MAX_HEIGHT * LINK_BYTES + HEADER_BYTES);
        let tower = head_chunk.ptr.as_ptr() as *mut AtomicPtr<Header>;
        for i in 0..MAX_HEIGHT {
            // SAFETY: the chunk holds `MAX_HEIGHT` aligned links before the header.
            unsafe { ptr::write(tower.add(i), AtomicPtr::new(ptr::null_mut())) };
        }
        // SAFETY: the header follows the tower within the chunk; it is written (though never
        // read) so that no uninitialised memory is ever behind a `&Header`.
        let head = unsafe {
            let head = tower.add(MAX_HEIGHT) as *mut Header;
            ptr::write(
                head,
                Header {
                    head_hi: 0,
                    head_lo: 0,
                    meta: (MAX_HEIGHT as u32) << HEIGHT_SHIFT,
                    value_len: 0,
                },
            );
            NonNull::new_unchecked(head)
        };
        SkipList {
            head,
            _head_chunk: head_chunk,
            height: AtomicUsize::new(1),
            arenas: std::array::from_fn(|i| {
                CachePadded::new(Arena {
                    writer: Mutex::new(Writer {
                        chunks: Vec::new(),
                        current: None,
                        used: 0,
                        // Each shard's own sequence of heights.
                        rng: 0x9e37_79b9_7f4a_7c15
                            ^ (i as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
                    }),
                    len: AtomicUsize::new(0),
                    bytes: AtomicUsize::new(0),
                })
            }),
            shadowing: AtomicBool::new(false),
        }
    }

    /// Entries, not counting nodes shadowed by an equal newer one.
    pub(super) fn len(&self) -> usize {
        self.arenas.iter().map(|a| a.len.load(AtomicOrdering::Relaxed)).sum()
    }

    /// Bytes the arena took so far.
    pub(super) fn bytes(&self) -> usize {
        self.arenas.iter().map(|a| a.bytes.load(AtomicOrdering::Relaxed)).sum()
    }

    /// The node at `raw`.
    ///
    /// # Safety
    ///
    /// `raw` must come from a node of this list.
    pub(super) unsafe fn node_at(&self, raw: RawNode) -> Node<'_> {
        // SAFETY: a node of this list, which `&self` keeps alive (the caller's promise).
        unsafe { Node::new(raw.0) }
    }

    /// The node at `x`, or `None` for the head.
    #[inline(always)]
    fn node_or_head(&self, x: NonNull<Header>) -> Option<Node<'_>> {
        // SAFETY: every address a search holds is the head or a published node of this list.
        (x != self.head).then(|| unsafe { Node::new(x) })
    }

    fn top_level(&self) -> usize {
        self.height.load(AtomicOrdering::Relaxed) - 1
    }

    /// The last node for which `advance` holds (`None`: the head) and the one after it,
    /// for an `advance` true on a prefix of the list (`Less`, or not `Greater`, than a key).
    #[inline(always)]
    fn descend(&self, advance: impl Fn(Node<'_>) -> bool) -> (Option<Node<'_>>, Option<Node<'_>>) {
        let mut x = self.head;
        let mut level = self.top_level();
        // The node a higher level stopped at: known not to pass `advance`, so not compared
        // again when the level below reaches it too.
        let mut stop: *mut Header = ptr::null_mut();
        loop {
            // SAFETY: `x` is the head or was reached on this level or one above it, so its
            // tower reaches `level`.
            let next = unsafe { link(x, level) }.load(AtomicOrdering::Acquire);
            // SAFETY: a non-null link holds a published node of this list (`Acquire` pairs
            // with the `Release` that linked it).
            match NonNull::new(next) {
                Some(n) if next != stop && advance(unsafe { Node::new(n) }) => x = n,
                _ => {
                    if level == 0 {
                        // SAFETY: as above.
                        return (
                            self.node_or_head(x),
                            NonNull::new(next).map(|n| unsafe { Node::new(n) }),
                        );
                    }
                    stop = next;
                    level -= 1;
                }
            }
        }
    }

    /// The first node at or after `key`.
    #[inline]
    pub(super) fn seek(&self, key: &Parts<'_>) -> Option<Node<'_>> {
        self.descend(|n| n.compare(key) == Ordering::Less).1
    }

    /// The first node.
    // Inline: `MemTable::is_empty`, inlined into the engine's point reads, calls this.
    #[inline]
    pub(super) fn first(&self) -> Option<Node<'_>> {
        // SAFETY: the head has every level; a non-null link holds a published node of this
        // list.
        let first = unsafe { link(self.head, 0) }.load(AtomicOrdering::Acquire);
        // SAFETY: as above.
        NonNull::new(first).map(|n| unsafe { Node::new(n) })
    }

    /// The node after `n`, skipping nodes `n` shadows.
    #[inline]
    pub(super) fn next<'a>(&'a self, n: Node<'a>) -> Option<Node<'a>> {
        // SAFETY: every node has level 0.
        let mut next = unsafe { n.next(0) };
        if self.shadowing.load(AtomicOrdering::Relaxed) {
            while let Some(m) = next.filter(|m| m.internal_key() == n.internal_key()) {
                // SAFETY: as above.
                next = unsafe { m.next(0) };
            }
        }
        next
    }

    /// The node before `n`.
    pub(super) fn prev<'a>(&'a self, n: Node<'a>) -> Option<Node<'a>> {
        let key = n.parts();
        self.newest_of(self.descend(|m| m.compare(&key) == Ordering::Less).0)
    }

    /// The last node at or before `key`.
    pub(super) fn seek_for_prev(&self, key: &Parts<'_>) -> Option<Node<'_>> {
        self.newest_of(self.descend(|n| n.compare(key) != Ordering::Greater).0)
    }

    /// The last node.
    pub(super) fn last(&self) -> Option<Node<'_>> {
        self.newest_of(self.descend(|_| true).0)
    }

    /// The first of the nodes equal to `n` (the newest, which shadows the others): a backward
    /// search lands on the last.
    fn newest_of<'a>(&'a self, n: Option<Node<'a>>) -> Option<Node<'a>> {
        match n {
            Some(n) if self.shadowing.load(AtomicOrdering::Relaxed) => self.seek(&n.parts()),
            n => n,
        }
    }

    /// Inserts `user_key || trailer || value`, before any equal entry (which it then
    /// shadows), and returns its node. Safe while other threads read and insert.
    ///
    /// # Panics
    ///
    /// If the key is over [`MAX_KEY_BYTES`] or the value over [`MAX_VALUE_BYTES`] plus the
    /// 8-byte expiry an expiring put stores before it.
    #[cfg(test)]
    pub(super) fn insert(&self, user_key: &[u8], trailer: u64, value: &[u8]) -> Node<'_> {
        self.insert_with(user_key, trailer, value, || ())
    }

    /// [`SkipList::insert`], calling `before_link` before the node is linked: what the
    /// caller keeps beside the list (the memtable's key filter) is then updated before any
    /// reader can reach the node.
    ///
    /// Several threads may insert at once: the search and the linking take no lock (see
    /// the module documentation), only the allocation does.
    pub(super) fn insert_with(
        &self,
        user_key: &[u8],
        trailer: u64,
        value: &[u8],
        before_link: impl FnOnce(),
    ) -> Node<'_> {
        assert!(user_key.len() <= MAX_KEY_BYTES, "memtable key of {} bytes", user_key.len());
        let max = MAX_VALUE_BYTES + crate::key::EXPIRY_LEN;
        assert!(value.len() <= max, "memtable value of {} bytes", value.len());
        let key = Parts::new(user_key, trailer);

        // The splice: at every level, the last node before `key` and the one after it. Above
        // the height the search saw, the head and (to be loaded when linking) its link.
        let list_height = self.top_level() + 1;
        let mut prev = [self.head; MAX_HEIGHT];
        let mut next = [ptr::null_mut::<Header>(); MAX_HEIGHT];
        let mut x = self.head;
        // The node a higher level stopped at (see `descend`).
        let mut stop: *mut Header = ptr::null_mut();
        for level in (0..list_height).rev() {
            let n = loop {
                // SAFETY: `x` is the head or was reached on this level or one above it.
                let n = unsafe { link(x, level) }.load(AtomicOrdering::Acquire);
                match NonNull::new(n) {
                    // SAFETY: a non-null link holds a published node of this list.
                    Some(m)
                        if n != stop && unsafe { Node::new(m) }.compare(&key) == Ordering::Less =>
                    {
                        x = m
                    }
                    _ => break n,
                }
            };
            prev[level] = x;
            next[level] = n;
            stop = n;
        }

        let own_at = owner_offset(user_key.len(), value.len());
        let arena = &self.arenas[shard()];
        let (height, base, owner, own) = {
            // Nothing below panics while this is held (a failed allocation aborts), so
            // poisoning never leaves the arena half-updated.
            let mut w = arena.writer.lock().unwrap_or_else(|p| p.into_inner());
            let height = w.random_height();
            let mut size = height * LINK_BYTES + own_at;
            let own = size > MAX_CHUNKED_ENTRY;
            if own {
                size += size_of::<*const Chunk>();
            }
            let (base, owner, taken) = w.alloc(size);
            debug_assert_eq!(own, owner.is_some());
            // Only holders of the mutex change the counts, so a load and a store suffice, and
            // the line they share with the mutex moves between cores once per insert. The
            // entry is counted now; one found to shadow an equal entry is uncounted below.
            let relaxed = AtomicOrdering::Relaxed;
            arena.bytes.store(arena.bytes.load(relaxed) + taken, relaxed);
            arena.len.store(arena.len.load(relaxed) + 1, relaxed);
            if height > self.height.load(relaxed) {
                // Before linking: a reader that meets a link at this height must descend
                // into it. Rarely taken, so the locked update seldom touches the line.
                self.height.fetch_max(height, relaxed);
            }
            (height, base, owner, own)
        };
        let head = Head::of(user_key);
        let meta = user_key.len() as u32
            | (height as u32) << HEIGHT_SHIFT
            | if own { OWN_BUFFER } else { 0 };
        // SAFETY: `base` is fresh bytes, 8-aligned, that no reader can reach: the tower,
        // header, key, trailer, value and (for a buffer of its own) the owner pointer all fit
        // (the size was computed from them). The tower's links are written as they are linked.
        let node = unsafe {
            let header = base.as_ptr().add(height * LINK_BYTES) as *mut Header;
            ptr::write(
                header,
                Header { head_hi: head.0, head_lo: head.1, meta, value_len: value.len() as u32 },
            );
            let data = (header as *mut u8).add(HEADER_BYTES);
            ptr::copy_nonoverlapping(user_key.as_ptr(), data, user_key.len());
            let data = data.add(user_key.len());
            ptr::copy_nonoverlapping(trailer.to_le_bytes().as_ptr(), data, TRAILER_LEN);
            ptr::copy_nonoverlapping(value.as_ptr(), data.add(TRAILER_LEN), value.len());
            if let Some(owner) = owner {
                ptr::write((header as *mut u8).add(own_at) as *mut *const Chunk, owner);
            }
            let tower = header as *mut AtomicPtr<Header>;
            for level in 0..height {
                ptr::write(tower.sub(level + 1), AtomicPtr::new(ptr::null_mut()));
            }
            NonNull::new_unchecked(header)
        };

        // After the search, so what the caller prefetched for it has had the search's time
        // to arrive.
        before_link();
        let mut replaces = false;
        for level in 0..height {
            loop {
                let (p, n) = (prev[level], next[level]);
                if level == 0 && !n.is_null() {
                    // SAFETY: a non-null link holds a published node of this list.
                    let equal = unsafe { Node::new(NonNull::new_unchecked(n)) }.compare(&key)
                        == Ordering::Equal;
                    if equal {
                        // Before the node is linked: whoever sees the node sees this too.
                        self.shadowing.store(true, AtomicOrdering::Relaxed);
                        replaces = true;
                    }
                }
                // SAFETY: `level` is below the node's height; its link there is unreachable
                // until the exchange below publishes the node at this level.
                unsafe { link(node, level) }.store(n, AtomicOrdering::Relaxed);
                // SAFETY: `p` is the head or was reached on `level`, so its tower reaches it.
                let linked = unsafe { link(p, level) }.compare_exchange(
                    n,
                    node.as_ptr(),
                    AtomicOrdering::Release,
                    AtomicOrdering::Relaxed,
                );
                if linked.is_ok() {
                    break;
                }
                // Another insert linked a node after `p` first: search on from `p`, which
                // stays before `key` (nodes are never removed).
                (prev[level], next[level]) = self.splice_from(p, level, &key);
            }
        }
        if replaces {
            let _w = arena.writer.lock().unwrap_or_else(|p| p.into_inner());
            let relaxed = AtomicOrdering::Relaxed;
            arena.len.store(arena.len.load(relaxed) - 1, relaxed);
        }
        // SAFETY: published above, in this list.
        unsafe { Node::new(node) }
    }

    /// The last node before `key` at `level`, starting from `x` (before `key`), and the link
    /// that follows it.
    fn splice_from(
        &self,
        mut x: NonNull<Header>,
        level: usize,
        key: &Parts<'_>,
    ) -> (NonNull<Header>, *mut Header) {
        loop {
            // SAFETY: `x` is the head or a node linked at `level`, so its tower reaches it.
            let n = unsafe { link(x, level) }.load(AtomicOrdering::Acquire);
            match NonNull::new(n) {
                // SAFETY: a non-null link holds a published node of this list.
                Some(m) if unsafe { Node::new(m) }.compare(key) == Ordering::Less => x = m,
                _ => return (x, n),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nodes linked at `level`, in link order.
    fn walk(list: &SkipList, level: usize) -> Vec<Node<'_>> {
        let mut out = Vec::new();
        let mut x = list.head;
        // SAFETY: the head has every level, and every node reached at `level` has it too.
        while let Some(n) = NonNull::new(unsafe { link(x, level) }.load(AtomicOrdering::Acquire)) {
            // SAFETY: a non-null link holds a published node of this list.
            out.push(unsafe { Node::new(n) });
            x = n;
        }
        out
    }

    /// Writers inserting at once, into neighbouring places, leave every level sorted and
    /// every node linked at each level of its tower: a lost or misplaced link shows as a
    /// missing key, a level out of order, or a count that differs from the towers'.
    #[test]
    fn concurrent_writers_leave_every_level_sorted_and_complete() {
        const THREADS: u64 = 4;
        const PER_THREAD: u64 = 20_000;
        const TOTAL: u64 = THREADS * PER_THREAD;
        for round in 0..4u64 {
            let list = SkipList::new();
            let start = std::sync::Barrier::new(THREADS as usize);
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (list, start) = (&list, &start);
                    s.spawn(move || {
                        start.wait();
                        for i in 0..PER_THREAD {
                            // Consecutive writes of different threads land next to each
                            // other, scattered over the list (7919 is coprime to TOTAL).
                            let n = ((i * THREADS + t) * 7919 + round) % TOTAL;
                            let key = format!("key{n:08}");
                            list.insert(key.as_bytes(), n << 8 | 1, key.as_bytes());
                        }
                    });
                }
            });
            assert_eq!(list.len(), TOTAL as usize);
            let bottom = walk(&list, 0);
            assert_eq!(bottom.len(), TOTAL as usize, "round {round}: entries lost");
            for (i, n) in bottom.iter().enumerate() {
                assert_eq!(n.user_key(), format!("key{i:08}").as_bytes(), "round {round}");
                assert_eq!(n.value(), n.user_key());
            }
            for level in 1..MAX_HEIGHT {
                let linked = walk(&list, level);
                let towers = bottom.iter().filter(|n| n.height() > level).count();
                assert_eq!(linked.len(), towers, "round {round}: level {level} misses nodes");
                for pair in linked.windows(2) {
                    assert!(pair[0].user_key() < pair[1].user_key(), "level {level} unsorted");
                }
            }
        }
    }
}
