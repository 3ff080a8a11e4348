//! A global allocator that counts: every allocation made (`alloc`, `alloc_zeroed`, `realloc`),
//! and the bytes allocated and not yet freed, by any thread. A test binary installs it with
//! `#[global_allocator] static A: counting::Counting = counting::Counting;` and should hold a
//! single test, so that no other test thread allocates while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering::Relaxed};

/// The system allocator, counting.
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Allocations made so far.
#[allow(dead_code)]
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Relaxed)
}

/// Bytes allocated and not freed.
#[allow(dead_code)]
pub fn live_bytes() -> isize {
    LIVE.load(Relaxed)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so it upholds
// `GlobalAlloc`'s contract exactly as `System` does; counting has no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}
