//! Memory shared between a process and the children it forks (the `forked` and `prefork`
//! models count into their parent's `/stats` through it).
//!
//! Only [`ProcessShared`] types may live there, and only this module can say which types those
//! are: atomics, fixed-size arrays of them, [`CacheAligned`] ones and tuples of them. A caller
//! builds its shared state out of these pieces, so no `unsafe` is needed (or allowed) outside
//! `sys/` to share memory.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{
    AtomicBool, AtomicI16, AtomicI32, AtomicI64, AtomicI8, AtomicIsize, AtomicU16, AtomicU32,
    AtomicU64, AtomicU8, AtomicUsize,
};

/// Types that may live in memory shared between processes: they hold no pointers into
/// process-private memory (no `Box`, `Vec`, `Arc`, reference...) and are safe to mutate
/// concurrently through `&self` from any process (atomics only; no locks, whose waiters are
/// private to a process).
///
/// # Safety
/// Implementors promise the above; it is what makes [`SharedBox::new`] sound. Every
/// implementation is in this module.
pub(crate) unsafe trait ProcessShared: Sync {}

macro_rules! process_shared_atomics {
    ($($t:ty),*) => {$(
        // SAFETY: an atomic integer is plain bytes, mutated only by atomic instructions, which
        // work across processes on shared memory as they do across threads.
        unsafe impl ProcessShared for $t {}
    )*};
}
process_shared_atomics!(
    AtomicBool,
    AtomicU8,
    AtomicU16,
    AtomicU32,
    AtomicU64,
    AtomicUsize,
    AtomicI8,
    AtomicI16,
    AtomicI32,
    AtomicI64,
    AtomicIsize
);

// SAFETY: an array holds its elements inline, with no pointer of its own.
unsafe impl<T: ProcessShared, const N: usize> ProcessShared for [T; N] {}

// SAFETY: a tuple holds its fields inline, with no pointer of its own.
unsafe impl<A: ProcessShared, B: ProcessShared> ProcessShared for (A, B) {}
// SAFETY: as above.
unsafe impl<A: ProcessShared, B: ProcessShared, C: ProcessShared> ProcessShared for (A, B, C) {}
// SAFETY: as above.
unsafe impl<A: ProcessShared, B: ProcessShared, C: ProcessShared, D: ProcessShared> ProcessShared
    for (A, B, C, D)
{
}

/// A value aligned (and so padded) to 128 bytes, so that two of them never share a cache line
/// (nor the adjacent line that x86 prefetches in pairs): counters written by different threads
/// then never contend.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct CacheAligned<T>(pub(crate) T);

// SAFETY: the value is held inline; alignment adds padding bytes only.
unsafe impl<T: ProcessShared> ProcessShared for CacheAligned<T> {}

impl<T> std::ops::Deref for CacheAligned<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A value in an anonymous `MAP_SHARED` mapping: every process forked after it was made sees
/// the same value. Dropping it unmaps it in this process only.
pub(crate) struct SharedBox<T: ProcessShared> {
    ptr: NonNull<T>,
}

// SAFETY: `T: Sync` (ProcessShared requires it), and SharedBox only hands out `&T`.
unsafe impl<T: ProcessShared> Send for SharedBox<T> {}
// SAFETY: as above.
unsafe impl<T: ProcessShared> Sync for SharedBox<T> {}

impl<T: ProcessShared> SharedBox<T> {
    /// Maps shared memory and moves `value` into it.
    pub(crate) fn new(value: T) -> io::Result<Self> {
        let size = std::mem::size_of::<T>().max(1);
        // SAFETY: an anonymous mapping with no address hint; the result is checked below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        debug_assert!(std::mem::align_of::<T>() <= 4096, "mmap is page-aligned");
        let ptr = NonNull::new(addr.cast::<T>()).ok_or_else(io::Error::last_os_error)?;
        // SAFETY: the mapping is fresh, writable, page-aligned and at least size_of::<T>() bytes.
        unsafe { ptr.as_ptr().write(value) };
        Ok(SharedBox { ptr })
    }
}

impl<T: ProcessShared> std::ops::Deref for SharedBox<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the value was written in `new` and lives until `drop`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ProcessShared> Drop for SharedBox<T> {
    fn drop(&mut self) {
        // SAFETY: we own the value and the mapping; neither is used after this.
        unsafe {
            std::ptr::drop_in_place(self.ptr.as_ptr());
            libc::munmap(self.ptr.as_ptr().cast(), std::mem::size_of::<T>().max(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn cache_aligned_values_do_not_share_lines() {
        assert_eq!(std::mem::align_of::<CacheAligned<AtomicU64>>(), 128);
        assert_eq!(std::mem::size_of::<[CacheAligned<AtomicU64>; 2]>(), 256);
    }

    #[test]
    fn a_shared_box_holds_its_value() {
        let b =
            SharedBox::new(([AtomicU64::new(7), AtomicU64::new(0)], AtomicI64::new(-1))).unwrap();
        b.0[1].fetch_add(2, Relaxed);
        b.1.fetch_sub(1, Relaxed);
        assert_eq!((b.0[0].load(Relaxed), b.0[1].load(Relaxed)), (7, 2));
        assert_eq!(b.1.load(Relaxed), -2);
    }
}
