//! Memory for the bit arrays of the filters open tables keep, placed so the CPU can map it
//! with 2 MiB pages.
//!
//! Why: at tens of millions of keys the filters outgrow the caches, and a probe that misses
//! cache also misses the TLB — with 4 KiB pages, 60 MiB of filters is 15,000 pages, far more
//! than the TLB holds, so each cold probe adds a page walk to its memory access. With 2 MiB
//! pages the same filters are 30 pages. The blocked filter's advantage is one cache line per
//! probe; a page walk per probe hides it.
//!
//! How: open tables' filters (decoded from their files, `Placement::Shared`) are allocated,
//! 64-byte aligned, in 2 MiB chunks that are 2 MiB aligned and advised `MADV_HUGEPAGE` (this
//! machine's kernels run transparent huge pages in `madvise` mode, so memory not advised never
//! gets them). A table's filter is usually far smaller than a chunk (tens of MiB of table hold
//! well under 1 MiB of filter), so chunks are shared. A chunk is reference-counted by the
//! filters in it and unmapped when the last of them is dropped. Compaction drops short-lived
//! tables' filters that share chunks with long-lived ones, so the ranges they free are kept as
//! holes (adjacent ones merged) and a new filter takes the smallest hole it fits before the
//! chunk being filled: without that, a tree 20M keys into a fill held its 24 MiB of filters in
//! 48–64 MiB of chunks; with it, 28–30 MiB. A filter larger than a chunk gets a mapping of its
//! own, 2 MiB aligned and rounded only to whole 4 KiB pages: its whole 2 MiB extents get huge
//! pages, the tail small ones.
//!
//! Range filters' Elias–Fano words ([`crate::range_filter::elias_fano`]) live here too once
//! decoded: a range probe reads two or three words at random places, each a TLB miss with
//! 4 KiB pages.
//!
//! Filters built in memory (`Placement::Heap`,
//! [`FilterBuilder::finish`](crate::filter::FilterBuilder::finish)) are mostly encoded into a table and
//! dropped at once, never probed in bulk: they take an ordinary heap allocation rather than
//! churn the chunks.
//!
//! On Linux the chunks are anonymous `mmap`s: fresh zeroed pages that are first touched after
//! the advice, so the kernel can fault in huge pages from the start. `std::alloc` would hand
//! back recycled heap memory already mapped with 4 KiB pages, which only the background
//! `khugepaged` could later collapse. Elsewhere it is `std::alloc` with 2 MiB alignment.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The x86-64 (and common aarch64) huge page: the chunk size and alignment.
pub const CHUNK_BYTES: usize = 2 << 20;
/// Every array starts on a cache line.
const ALIGN: usize = 64;
/// The base page: large regions are rounded to it.
const PAGE_BYTES: usize = 4096;

/// A type a filter array may hold.
///
/// # Safety
/// All-zero bytes and every other bit pattern must be valid values, the type must have no
/// drop glue, and its alignment must be at most 64.
pub unsafe trait Word: Copy + Send + Sync + 'static {}

// SAFETY: any 64 bits are a valid u64; alignment 8.
unsafe impl Word for u64 {}

/// Where an array is allocated.
#[derive(Clone, Copy)]
pub enum Placement<'a> {
    /// An ordinary heap allocation (short-lived filters).
    Heap,
    /// Huge-page chunks of this arena (filters kept while a table is open).
    Shared(&'a Arena),
}

/// Live regions and the bytes they hold, for one arena.
#[derive(Debug, Default)]
struct Counters {
    regions: AtomicUsize,
    bytes: AtomicUsize,
}

/// One allocation backing one or more arrays: freed when the last array in it is dropped.
struct Region {
    ptr: NonNull<u8>,
    bytes: usize,
    /// `Some` for chunk and large-filter mappings; `None` for an ordinary heap allocation.
    counters: Option<Arc<Counters>>,
}

// SAFETY: a region is plain memory with no thread affinity; the arrays in it are written
// only before they are shared (see `Bits::new_with`).
unsafe impl Send for Region {}
// SAFETY: as above; `Region` itself offers no access to the memory.
unsafe impl Sync for Region {}

impl Region {
    fn heap(bytes: usize) -> Region {
        let layout = Layout::from_size_align(bytes, ALIGN).expect("filter size overflows");
        // SAFETY: `bytes` is non-zero (callers never allocate empty arrays).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Region { ptr, bytes, counters: None }
    }

    /// `bytes` (a multiple of 4 KiB) of zeroed memory, 2 MiB aligned, advised for huge pages.
    fn huge(bytes: usize, counters: &Arc<Counters>) -> Region {
        let ptr = huge_alloc(bytes);
        counters.regions.fetch_add(1, Ordering::Relaxed);
        counters.bytes.fetch_add(bytes, Ordering::Relaxed);
        Region { ptr, bytes, counters: Some(counters.clone()) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        match &self.counters {
            None => {
                let layout = Layout::from_size_align(self.bytes, ALIGN).expect("as allocated");
                // SAFETY: allocated by `Region::heap` with this layout, and freed only here.
                unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
            }
            Some(c) => {
                // SAFETY: allocated by `huge_alloc(self.bytes)` and freed only here.
                unsafe { huge_free(self.ptr, self.bytes) };
                c.regions.fetch_sub(1, Ordering::Relaxed);
                c.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn huge_alloc(bytes: usize) -> NonNull<u8> {
    // Over-map by one huge page, then cut back to the 2 MiB-aligned part.
    let span = bytes + CHUNK_BYTES;
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
    // existing memory.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        std::alloc::handle_alloc_error(Layout::from_size_align(bytes, CHUNK_BYTES).expect("ok"));
    }
    let base = base as usize;
    let start = base.next_multiple_of(CHUNK_BYTES);
    let (head, tail) = (start - base, base + span - (start + bytes));
    // SAFETY: both ranges lie inside the mapping just made, are page aligned (mmap returns page
    // aligned addresses and `bytes` is whole pages), and nothing refers to them.
    unsafe {
        if head > 0 {
            libc::munmap(base as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((start + bytes) as *mut libc::c_void, tail);
        }
    }
    // SAFETY: advice on our own mapping; failure (a kernel without THP) only loses the gain.
    unsafe { libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE) };
    NonNull::new(start as *mut u8).expect("mmap never maps page 0")
}

/// # Safety
/// `ptr` and `bytes` must come from one `huge_alloc` call, and the memory not be used after.
#[cfg(target_os = "linux")]
unsafe fn huge_free(ptr: NonNull<u8>, bytes: usize) {
    // SAFETY: the caller passes a mapping `huge_alloc` made, which nothing uses any more.
    unsafe { libc::munmap(ptr.as_ptr().cast(), bytes) };
}

#[cfg(not(target_os = "linux"))]
fn huge_alloc(bytes: usize) -> NonNull<u8> {
    let layout = Layout::from_size_align(bytes, CHUNK_BYTES).expect("filter size overflows");
    // SAFETY: `bytes` is non-zero.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

/// # Safety
/// `ptr` and `bytes` must come from one `huge_alloc` call, and the memory not be used after.
#[cfg(not(target_os = "linux"))]
unsafe fn huge_free(ptr: NonNull<u8>, bytes: usize) {
    let layout = Layout::from_size_align(bytes, CHUNK_BYTES).expect("as allocated");
    // SAFETY: the caller passes memory `huge_alloc` allocated with this layout.
    unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
}

/// Hands out 64-byte-aligned pieces of 2 MiB huge-page chunks, reusing the holes dropped
/// filters leave.
pub struct Arena {
    state: Arc<Mutex<State>>,
    counters: Arc<Counters>,
}

#[derive(Default)]
struct State {
    /// The chunk being filled and the offset of its first free byte.
    current: Option<(Arc<Region>, usize)>,
    /// Free ranges inside chunks that still hold a live filter, adjacent ones merged.
    holes: Vec<Hole>,
}

struct Hole {
    chunk: Weak<Region>,
    offset: usize,
    bytes: usize,
}

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}

impl Arena {
    pub fn new() -> Arena {
        Arena { state: Arc::default(), counters: Arc::default() }
    }

    /// The process-wide arena every open table's filter lives in.
    pub fn global() -> &'static Arena {
        static GLOBAL: OnceLock<Arena> = OnceLock::new();
        GLOBAL.get_or_init(Arena::new)
    }

    /// Chunks and large-filter mappings alive (including the chunk being filled).
    #[cfg(test)]
    pub fn live_regions(&self) -> usize {
        self.counters.regions.load(Ordering::Relaxed)
    }

    /// Free ranges waiting for reuse.
    #[cfg(test)]
    fn holes(&self) -> usize {
        lock(&self.state).holes.len()
    }

    /// Bytes those regions hold: every live filter's array plus every hole and tail in them.
    pub fn held_bytes(&self) -> usize {
        self.counters.bytes.load(Ordering::Relaxed)
    }

    /// A zeroed, 64-byte aligned piece of at least `bytes` (> 0) bytes.
    fn alloc(&self, bytes: usize) -> Piece {
        if bytes > CHUNK_BYTES {
            let bytes = bytes.next_multiple_of(PAGE_BYTES);
            let region = Arc::new(Region::huge(bytes, &self.counters));
            return Piece { region, offset: 0, bytes, arena: None };
        }
        let bytes = bytes.next_multiple_of(ALIGN);
        let mut state = lock(&self.state);
        // A retired chunk whose filters are all gone has been unmapped; forget its holes. (One
        // whose last filter is being dropped on another thread right now may still upgrade
        // below; then the upgrade keeps it alive.)
        state.holes.retain(|h| h.chunk.strong_count() > 0);
        // Best fit among the holes, so big holes stay big.
        let best = (state.holes.iter().enumerate())
            .filter(|(_, h)| h.bytes >= bytes)
            .filter_map(|(i, h)| Some((i, h.bytes, h.chunk.upgrade()?)))
            .min_by_key(|&(_, size, _)| size);
        if let Some((i, _, chunk)) = best {
            let hole = &mut state.holes[i];
            let offset = hole.offset;
            hole.offset += bytes;
            hole.bytes -= bytes;
            if hole.bytes == 0 {
                state.holes.swap_remove(i);
            }
            // SAFETY: the hole lies inside the live chunk and no array uses it any more; it
            // held a dropped filter's bits, and callers get zeroed memory.
            unsafe { std::ptr::write_bytes(chunk.ptr.as_ptr().add(offset), 0, bytes) };
            return Piece { region: chunk, offset, bytes, arena: Some(self.state.clone()) };
        }
        let fits = matches!(&state.current, Some((_, used)) if CHUNK_BYTES - used >= bytes);
        if !fits {
            // The old chunk's tail stays unused; the chunk lives on while its filters do.
            state.current = Some((Arc::new(Region::huge(CHUNK_BYTES, &self.counters)), 0));
        }
        let (chunk, used) = state.current.as_mut().expect("set above");
        let offset = *used;
        *used += bytes;
        Piece { region: chunk.clone(), offset, bytes, arena: Some(self.state.clone()) }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The part of a region one array and its clones own.
struct Piece {
    region: Arc<Region>,
    offset: usize,
    bytes: usize,
    /// The arena to give the piece back to (chunk pieces only).
    arena: Option<Arc<Mutex<State>>>,
}

impl Piece {
    fn ptr(&self) -> NonNull<u8> {
        // SAFETY: `offset` lies inside the region (`offset + bytes <= region.bytes`).
        unsafe { NonNull::new_unchecked(self.region.ptr.as_ptr().add(self.offset)) }
    }
}

impl Drop for Piece {
    fn drop(&mut self) {
        let Some(arena) = &self.arena else { return };
        let mut state = lock(arena);
        let same = |h: &Hole| std::ptr::eq(h.chunk.as_ptr(), Arc::as_ptr(&self.region));
        // Pieces of a chunk are made and dropped only under this lock, so the count is exact:
        // if this is the chunk's last user, the chunk goes, and its holes with it.
        if Arc::strong_count(&self.region) == 1 {
            state.holes.retain(|h| !same(h));
            return;
        }
        let (mut offset, mut bytes) = (self.offset, self.bytes);
        state.holes.retain(|h| {
            if same(h) && h.offset + h.bytes == offset {
                (offset, bytes) = (h.offset, bytes + h.bytes);
                false
            } else if same(h) && offset + bytes == h.offset {
                bytes += h.bytes;
                false
            } else {
                true
            }
        });
        state.holes.push(Hole { chunk: Arc::downgrade(&self.region), offset, bytes });
    }
}

/// A filter's bit array: an immutable slice of `T` in a [`Region`] it shares ownership of.
/// Clones share the array. Dereferencing costs what `Arc<[T]>` does: the pointer and length
/// sit in the filter itself.
pub struct Bits<T: Word> {
    ptr: NonNull<T>,
    len: usize,
    /// `None` only for an empty array.
    piece: Option<Arc<Piece>>,
}

// SAFETY: the array is never written once a `Bits` exists, and the region is `Send + Sync`.
unsafe impl<T: Word> Send for Bits<T> {}
// SAFETY: as above.
unsafe impl<T: Word> Sync for Bits<T> {}

impl<T: Word> Bits<T> {
    /// Allocates `len` zeroed words at `placement` and lets `fill` write them before the
    /// array becomes immutable.
    pub fn new_with(len: usize, placement: Placement<'_>, fill: impl FnOnce(&mut [T])) -> Self {
        const { assert!(std::mem::align_of::<T>() <= ALIGN) };
        let bytes = len.checked_mul(std::mem::size_of::<T>()).expect("filter size overflows");
        if bytes == 0 {
            return Bits { ptr: NonNull::dangling(), len, piece: None };
        }
        let piece = match placement {
            Placement::Heap => {
                Piece { region: Arc::new(Region::heap(bytes)), offset: 0, bytes, arena: None }
            }
            Placement::Shared(arena) => arena.alloc(bytes),
        };
        let ptr = piece.ptr().cast::<T>();
        // SAFETY: `ptr` is 64-byte aligned (so aligned for `T`), at least `bytes` long, zeroed
        // (a valid `T` by the `Word` contract), inside the piece's region, which this function
        // keeps alive, and no other array overlaps it; nothing else refers to it until this
        // function returns.
        fill(unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) });
        Bits { ptr, len, piece: Some(Arc::new(piece)) }
    }

    /// Bytes this array holds: whole cache lines in a chunk, the whole mapping of a large
    /// filter.
    pub fn bytes(&self) -> usize {
        match &self.piece {
            None => 0,
            Some(p) if p.arena.is_none() && p.region.counters.is_none() => {
                (self.len * std::mem::size_of::<T>()).next_multiple_of(ALIGN)
            }
            Some(p) => p.bytes,
        }
    }
}

#[cfg(test)]
impl<T: Word> Bits<T> {
    /// True if the array lives in huge-page memory (a chunk or a large filter's mapping).
    pub fn is_huge(&self) -> bool {
        self.piece.as_ref().is_some_and(|p| p.region.counters.is_some())
    }
}

impl<T: Word> std::ops::Deref for Bits<T> {
    type Target = [T];

    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialised `T`s (or is dangling with `len` 0) that
        // nothing writes any more, inside a region `self.piece` keeps alive.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Word> Clone for Bits<T> {
    fn clone(&self) -> Self {
        Bits { ptr: self.ptr, len: self.len, piece: self.piece.clone() }
    }
}

impl<T: Word + PartialEq> PartialEq for Bits<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Word + Eq> Eq for Bits<T> {}

impl<T: Word> std::fmt::Debug for Bits<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bits({} words)", self.len)
    }
}

/// Little-endian u64 words (a length the caller checked is a multiple of 8), copied into the
/// open filters' memory: an open table's filter, decoded from its file.
pub fn decoded_words(bytes: &[u8]) -> Bits<u64> {
    Bits::new_with(bytes.len() / 8, Placement::Shared(Arena::global()), |words: &mut [u64]| {
        for (w, c) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
    })
}

/// Bytes held by the memory every open table's filter lives in, across all databases in the
/// process: the filters themselves plus the holes and tails of the chunks they share.
pub fn held_bytes() -> u64 {
    Arena::global().held_bytes() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::blocked::Line;

    fn shared(arena: &Arena, lines: usize) -> Bits<Line> {
        Bits::new_with(lines, Placement::Shared(arena), |l: &mut [Line]| {
            for (i, line) in l.iter_mut().enumerate() {
                line.0 = [i as u64; 8];
            }
        })
    }

    fn line_addr(b: &Bits<Line>) -> usize {
        b.as_ptr() as usize
    }

    const LINES_PER_CHUNK: usize = CHUNK_BYTES / 64;

    #[test]
    fn arrays_are_zeroed_aligned_and_hold_what_was_written() {
        let arena = Arena::new();
        let mut all = Vec::new();
        for len in [1usize, 3, 100, 7] {
            let words: Bits<u64> =
                Bits::new_with(len, Placement::Shared(&arena), |w: &mut [u64]| {
                    assert!(w.iter().all(|&x| x == 0), "fresh memory is zeroed");
                    w[len - 1] = len as u64;
                });
            assert_eq!(words.as_ptr() as usize % 64, 0, "{len} words not cache-line aligned");
            assert_eq!(words.len(), len);
            assert_eq!(words[len - 1], len as u64);
            all.push(words);
        }
        // Consecutive pieces of one chunk: each starts at the next cache line after the last.
        let addr = |b: &Bits<u64>| b.as_ptr() as usize;
        assert_eq!(addr(&all[1]) - addr(&all[0]), 64);
        assert_eq!(addr(&all[2]) - addr(&all[1]), 64);
        assert_eq!(addr(&all[3]) - addr(&all[2]), 832); // 800 bytes, rounded to 13 lines
        assert_eq!(addr(&all[0]) % CHUNK_BYTES, 0, "a chunk starts 2 MiB aligned");
        // Earlier arrays are not overwritten by later ones.
        for (b, len) in all.iter().zip([1usize, 3, 100, 7]) {
            assert_eq!(b[len - 1], len as u64);
            assert!(b[..len - 1].iter().all(|&x| x == 0));
        }
        let heap: Bits<Line> = Bits::new_with(5, Placement::Heap, |_| {});
        assert_eq!(line_addr(&heap) % 64, 0);
        assert_eq!(arena.live_regions(), 1);
    }

    #[test]
    fn a_chunk_is_filled_exactly_then_a_new_one_starts() {
        let arena = Arena::new();
        let a = shared(&arena, LINES_PER_CHUNK - 1);
        let b = shared(&arena, 1);
        assert_eq!(line_addr(&b), line_addr(&a) + CHUNK_BYTES - 64, "the last line is used");
        assert_eq!(arena.live_regions(), 1);
        let c = shared(&arena, 1);
        assert_eq!(arena.live_regions(), 2, "a full chunk takes nothing more");
        assert_eq!(line_addr(&c) % CHUNK_BYTES, 0);
        assert_eq!(arena.held_bytes(), 2 * CHUNK_BYTES);
        // Every line keeps what was written into it.
        assert!(a.iter().enumerate().all(|(i, l)| l.0 == [i as u64; 8]));
        assert_eq!(b[0].0, [0; 8]);
        assert_eq!(c[0].0, [0; 8]);
    }

    #[test]
    fn a_chunk_is_freed_when_its_last_filter_goes() {
        let arena = Arena::new();
        let first: Vec<_> = (0..4).map(|_| shared(&arena, LINES_PER_CHUNK / 4)).collect();
        let clone = first[2].clone();
        let second = shared(&arena, 1);
        assert_eq!((arena.live_regions(), arena.held_bytes()), (2, 2 * CHUNK_BYTES));
        drop(first);
        assert_eq!(arena.live_regions(), 2, "a clone still holds the first chunk");
        assert!(clone.iter().enumerate().all(|(i, l)| l.0 == [i as u64; 8]));
        drop(clone);
        assert_eq!((arena.live_regions(), arena.held_bytes()), (1, CHUNK_BYTES));
        // The chunk being filled stays with the arena after its filters go, and is reused.
        drop(second);
        assert_eq!((arena.live_regions(), arena.held_bytes()), (1, CHUNK_BYTES));
        let third = shared(&arena, 1);
        assert_eq!(arena.live_regions(), 1, "the chunk being filled is reused");
        drop(third);
        drop(arena);
    }

    #[test]
    fn the_arena_lets_go_of_its_current_chunk_when_dropped() {
        let arena = Arena::new();
        let counters = arena.counters.clone();
        let a = shared(&arena, 10);
        drop(arena);
        assert_eq!(counters.regions.load(Ordering::Relaxed), 1, "a filter outlives its arena");
        assert_eq!(a[9].0, [9; 8]);
        drop(a);
        assert_eq!(counters.regions.load(Ordering::Relaxed), 0);
        assert_eq!(counters.bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn holes_left_by_dropped_filters_are_reused_zeroed_and_merged() {
        let arena = Arena::new();
        let v: Vec<_> = (0..6).map(|_| shared(&arena, 10)).collect();
        let base = line_addr(&v[0]);
        let [a, b, c, d, e, f] = <[_; 6]>::try_from(v).ok().unwrap();
        drop(b);
        assert_eq!(arena.holes(), 1);
        // A smaller array goes in the hole, zeroed although the old one was written.
        let small: Bits<Line> = Bits::new_with(4, Placement::Shared(&arena), |l: &mut [Line]| {
            assert!(l.iter().all(|x| x.0 == [0; 8]), "reused memory is zeroed");
        });
        assert_eq!(line_addr(&small), base + 10 * 64);
        assert_eq!(arena.holes(), 1, "the rest of the hole stays free");
        // Adjacent holes merge, on either side: c merges with what small left of b; then e
        // stands alone until d, between them, joins all three.
        drop((c, e));
        assert_eq!(arena.holes(), 2);
        drop(d);
        assert_eq!(arena.holes(), 1);
        let big = shared(&arena, 36);
        assert_eq!(line_addr(&big), base + 14 * 64);
        assert_eq!(arena.holes(), 0);
        // Nothing handed out overlaps what is live.
        assert!(a.iter().chain(&*big).chain(&*f).enumerate().all(|(i, l)| {
            let i = if i < 10 {
                i
            } else if i < 46 {
                i - 10
            } else {
                i - 46
            };
            l.0 == [i as u64; 8]
        }));
        assert_eq!(small[0].0, [0; 8]);
        drop((a, small, big, f));
    }

    #[test]
    fn the_smallest_hole_that_fits_is_used() {
        let arena = Arena::new();
        let v: Vec<_> = [10, 1, 6, 1].iter().map(|&n| shared(&arena, n)).collect();
        let six_at = line_addr(&v[2]);
        let [ten, one, six, other] = <[_; 4]>::try_from(v).ok().unwrap();
        drop((ten, six));
        let five = shared(&arena, 5);
        assert_eq!(line_addr(&five), six_at);
        drop((one, other, five));
    }

    #[test]
    fn a_freed_chunk_takes_its_holes_with_it() {
        let arena = Arena::new();
        let first: Vec<_> = (0..4).map(|_| shared(&arena, LINES_PER_CHUNK / 4)).collect();
        let next = shared(&arena, 1);
        let mut first = first.into_iter();
        drop(first.next());
        assert_eq!(arena.holes(), 1);
        drop(first);
        assert_eq!((arena.live_regions(), arena.holes()), (1, 0));
        // Its memory is gone, so a new array comes from the current chunk.
        let again = shared(&arena, 1);
        assert_eq!(line_addr(&again), line_addr(&next) + 64);
        drop((next, again));
    }

    #[test]
    fn a_filter_larger_than_a_chunk_gets_its_own_mapping() {
        let arena = Arena::new();
        let small = shared(&arena, 1);
        let lines = LINES_PER_CHUNK + 1;
        let big = shared(&arena, lines);
        assert_eq!(line_addr(&big) % CHUNK_BYTES, 0, "2 MiB aligned");
        assert_eq!(big.len(), lines);
        assert!(big.iter().enumerate().all(|(i, l)| l.0 == [i as u64; 8]));
        // Rounded to whole pages, not to a whole huge page.
        assert_eq!(big.bytes(), CHUNK_BYTES + PAGE_BYTES);
        assert_eq!(arena.held_bytes(), CHUNK_BYTES + CHUNK_BYTES + PAGE_BYTES);
        assert_eq!(arena.live_regions(), 2);
        // The chunk being filled was not retired for it.
        let next = shared(&arena, 1);
        assert_eq!(line_addr(&next), line_addr(&small) + 64);
        drop(big);
        assert_eq!((arena.live_regions(), arena.held_bytes()), (1, CHUNK_BYTES));
        // Exactly one chunk's worth still goes in a chunk.
        let exact = shared(&arena, LINES_PER_CHUNK);
        assert_eq!(exact.bytes(), CHUNK_BYTES);
        assert_eq!(arena.live_regions(), 2);
        drop((small, next, exact));
    }

    #[test]
    fn empty_arrays_take_no_memory() {
        let arena = Arena::new();
        let e: Bits<u64> =
            Bits::new_with(0, Placement::Shared(&arena), |w: &mut [u64]| assert!(w.is_empty()));
        let h: Bits<Line> = Bits::new_with(0, Placement::Heap, |_| {});
        assert!(e.is_empty() && h.is_empty());
        assert_eq!((e.bytes(), h.bytes()), (0, 0));
        assert_eq!((arena.live_regions(), arena.held_bytes()), (0, 0));
        assert!(e == e.clone());
        // An empty array does not move the bump pointer either.
        let a = shared(&arena, 1);
        let _ = Bits::<Line>::new_with(0, Placement::Shared(&arena), |_| {});
        let b = shared(&arena, 1);
        assert_eq!(line_addr(&b) - line_addr(&a), 64);
    }

    #[test]
    fn bytes_counts_whole_cache_lines() {
        let arena = Arena::new();
        let w: Bits<u64> = Bits::new_with(9, Placement::Shared(&arena), |_| {});
        assert_eq!(w.bytes(), 128);
        let l = shared(&arena, 3);
        assert_eq!(l.bytes(), 192);
        let h: Bits<u64> = Bits::new_with(1, Placement::Heap, |_| {});
        assert_eq!(h.bytes(), 64);
        assert_eq!(arena.live_regions(), 1, "heap arrays are not the arena's");
    }

    #[test]
    fn decoded_filters_live_in_huge_page_memory_and_built_ones_do_not() {
        use crate::filter::{Filter, FilterPolicy};
        let keys = (0..1000u32).map(|i| i.to_le_bytes());
        for policy in [
            FilterPolicy::BlockedBloom { bits_per_key: 10.0 },
            FilterPolicy::ClassicBloom { bits_per_key: 10.0 },
        ] {
            let built = Filter::build(policy, keys.clone());
            let decoded = Filter::decode(&built.encode()).unwrap();
            assert_eq!(decoded, built);
            let (built_huge, decoded_huge, addr) = match (&built, &decoded) {
                (Filter::Blocked(b), Filter::Blocked(d)) => {
                    (b.bits().is_huge(), d.bits().is_huge(), d.bits().as_ptr() as usize)
                }
                (Filter::Classic(b), Filter::Classic(d)) => {
                    (b.bits().is_huge(), d.bits().is_huge(), d.bits().as_ptr() as usize)
                }
                _ => unreachable!(),
            };
            assert!(!built_huge && decoded_huge, "{policy:?}");
            assert_eq!(addr % 64, 0);
            assert_eq!(decoded.memory_bytes(), built.memory_bytes());
            assert!(held_bytes() >= decoded.memory_bytes() as u64);
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn chunks_are_advised_for_huge_pages() {
        let arena = Arena::new();
        let a = shared(&arena, 1);
        let start = line_addr(&a);
        // The mapping shows up in smaps with the advice flag `hg`.
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines();
        let mut found = false;
        while let Some(l) = lines.next() {
            let Some((range, _)) = l.split_once(' ') else { continue };
            let Some((lo, hi)) = range.split_once('-') else { continue };
            let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            else {
                continue;
            };
            if lo <= start && start < hi {
                let flags = lines.by_ref().find(|l| l.starts_with("VmFlags:")).unwrap();
                assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
                found = true;
                break;
            }
        }
        assert!(found, "no mapping holds the chunk");
    }
}
