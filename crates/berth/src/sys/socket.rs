//! Socket options that `socket2` does not cover.

use std::io;
use std::os::fd::AsRawFd;

/// `setsockopt(IPPROTO_TCP, TCP_DEFER_ACCEPT, secs)`: the listener wakes its acceptor only once
/// a connection has data (or after `secs`). Seconds beyond `c_int` are clamped.
pub(crate) fn set_defer_accept(socket: &impl AsRawFd, secs: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is open for the duration of the call, and the option value points
    // to a live c_int whose size is passed alongside it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
