//! Reading from a socket into a buffer's spare capacity without zeroing it first.

use std::io;
use std::os::fd::AsRawFd;

/// Reads once from `fd` into the unused capacity of `buf` and extends `buf` by what was read.
/// Returns the byte count (0 at end of stream). `buf` must have spare capacity.
pub fn read_into_spare(fd: &impl AsRawFd, buf: &mut Vec<u8>) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    debug_assert!(!spare.is_empty(), "read_into_spare needs spare capacity");
    // SAFETY: `spare` is valid for writes of `spare.len()` bytes and read(2) writes at most that
    // many; the kernel never reads from it, so it being uninitialised is fine.
    let n = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: read(2) initialised the first `n` bytes of the spare capacity, and `n` is at most
    // `spare.len()`, so the new length is within capacity and every byte below it is initialised.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}
