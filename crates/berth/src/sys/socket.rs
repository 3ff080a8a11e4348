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

/// `getsockopt(IPPROTO_TCP, TCP_INFO)`'s `tcpi_bytes_acked`: how many bytes the peer has
/// acknowledged on this TCP connection so far. An error on a socket that is not TCP.
pub(crate) fn bytes_acked(socket: &impl AsRawFd) -> io::Result<u64> {
    // SAFETY: tcp_info is plain integers; all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the descriptor is open for the duration of the call; `info` is a live tcp_info
    // whose size is passed in `len`, and the kernel writes at most `len` bytes into it.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // A kernel older than the field (4.2) gives a shorter struct: no count to go by.
    let end = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_acked) + std::mem::size_of::<u64>();
    if (len as usize) < end {
        return Err(io::ErrorKind::Unsupported.into());
    }
    Ok(info.tcpi_bytes_acked)
}
