//! Prefetch hints: start loading memory that the next steps will read, and return at once.
//!
//! The read path's costs are mostly waits for memory: a filter line, an index node, a data
//! block. Where the address of the next load is known before the load is needed, asking for
//! it early lets several misses overlap instead of following one another.

/// Asks the CPU to start loading the cache line holding `target` into L1.
#[inline(always)]
pub fn prefetch<T>(target: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `_mm_prefetch` is a hint that never faults and writes nothing; SSE is part of
        // the x86_64 baseline, and the pointer comes from a live reference.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(target as *const T as *const i8) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = target;
    }
}

/// [`prefetch`] for every cache line of `items`.
#[inline]
pub fn prefetch_all<T>(items: &[T]) {
    const LINE: usize = 64;
    let step = LINE.div_ceil(std::mem::size_of::<T>().max(1));
    for item in items.iter().step_by(step) {
        prefetch(item);
    }
    // The stride may step over the last line when `items` does not start on a line.
    if let Some(last) = items.last() {
        prefetch(last);
    }
}
