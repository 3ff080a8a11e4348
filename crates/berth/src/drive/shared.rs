//! Memory shared between a process and the children it forks, for the counters of the `forked`
//! and `prefork` models: a child's requests then show in the parent's `/stats`.

use std::io;
use std::ptr::NonNull;

/// Types that may live in memory shared between processes: they hold no pointers into
/// process-private memory (no `Box`, `Vec`, `Arc`...) and are safe to mutate concurrently
/// through `&self` (atomics only).
///
/// # Safety
/// Implementors promise the above; it is what makes [`SharedBox::new`] sound.
pub(crate) unsafe trait ProcessShared: Sync {}

// SAFETY: `Counters` is plain atomics in fixed-size arrays.
unsafe impl ProcessShared for crate::stats::Counters {}

/// A value in an anonymous `MAP_SHARED` mapping: every process forked after it was made sees
/// the same value.
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
