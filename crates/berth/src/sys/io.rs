//! Reading, sending and waiting: `read(2)` into a buffer's spare capacity without zeroing it
//! first, `sendto(2)` of a connection's output, and `poll(2)` on one or a few descriptors for
//! the blocking models.
//!
//! The read and the send are raw system calls (`syscall(2)`), not glibc's `read`/`send`: those
//! are pthread cancellation points, and in a threaded process glibc switches asynchronous
//! cancellation on and off around each one (about 90 instructions of a keep-alive request's
//! 3,800, issue 41). berth never cancels a thread, so the wrapper buys nothing.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Reads once from `fd` into the unused capacity of `buf` and extends `buf` by what was read.
/// Returns the byte count (0 at end of stream). `buf` must have spare capacity.
#[inline]
pub fn read_into_spare(fd: &impl AsRawFd, buf: &mut Vec<u8>) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    debug_assert!(!spare.is_empty(), "read_into_spare needs spare capacity");
    // SAFETY: `spare` is valid for writes of `spare.len()` bytes and read(2) writes at most that
    // many; the kernel never reads from it, so it being uninitialised is fine.
    let n = unsafe {
        libc::syscall(
            libc::SYS_read,
            fd.as_raw_fd(),
            spare.as_mut_ptr(),
            spare.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: read(2) initialised the first `n` bytes of the spare capacity, and `n` is at most
    // `spare.len()`, so the new length is within capacity and every byte below it is initialised.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Reads up to `len` bytes of `file` from `offset` (`pread(2)`) into the unused capacity of
/// `buf`, reserved here and not zeroed first, and extends `buf` by what was read: a body piece
/// read straight into the output it goes out from. Returns the byte count (0 at end of file).
pub fn pread_into_spare(
    file: &impl AsRawFd,
    buf: &mut Vec<u8>,
    len: usize,
    offset: u64,
) -> io::Result<usize> {
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
    buf.reserve(len);
    let spare = &mut buf.spare_capacity_mut()[..len];
    // SAFETY: `spare` is valid for writes of `len` bytes and pread(2) writes at most that many;
    // the kernel never reads from it, so it being uninitialised is fine.
    let n = unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), len, offset) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: pread(2) initialised the first `n` bytes of the spare capacity, `n` <= `len`,
    // which is within the capacity reserved above.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Sends what it can of `buf` on the socket `fd` (`sendto(2)` with `MSG_NOSIGNAL`: a peer that
/// left is an `EPIPE` error, not a `SIGPIPE`), as std's `send` does, without glibc's wrapper
/// (see the module docs). Returns the byte count.
#[inline]
pub fn send(fd: &impl AsRawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reads of `buf.len()` bytes; no address is passed.
    let n = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd.as_raw_fd(),
            buf.as_ptr(),
            buf.len(),
            libc::MSG_NOSIGNAL,
            std::ptr::null::<libc::sockaddr>(),
            0 as libc::socklen_t,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `timeout` as poll(2)'s milliseconds, rounded up (a wait for a deadline must not end before
/// it: 299.9 ms truncated to 299 woke a connection 0.1 ms before its write timeout), saturating.
fn poll_ms(timeout: Duration) -> libc::c_int {
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
}

/// Waits up to `timeout` for any of `fds` to become readable: the index of the first that is
/// (earlier ones win a tie), `None` if the time ran out. A signal that interrupts the wait
/// (`EINTR`) counts as the first being readable, so the caller goes on to read it and sees the
/// interruption there. At most four descriptors.
pub(crate) fn poll_first(fds: &[&dyn AsRawFd], timeout: Duration) -> io::Result<Option<usize>> {
    const MAX: usize = 4;
    assert!(
        fds.len() <= MAX,
        "poll_first takes at most {MAX} descriptors"
    );
    let mut polled = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; MAX];
    for (p, fd) in polled.iter_mut().zip(fds) {
        p.fd = fd.as_raw_fd();
    }
    let n = fds.len();
    // SAFETY: the first `n` entries of `polled` are valid pollfds and we pass a count of `n`.
    let rc = unsafe { libc::poll(polled.as_mut_ptr(), n as libc::nfds_t, poll_ms(timeout)) };
    if rc == -1 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(Some(0))
        } else {
            Err(e)
        };
    }
    Ok(polled[..n].iter().position(|p| p.revents != 0))
}

/// True if the peer has reset the connection (or it failed otherwise): nothing sent to it can
/// arrive. A peer that only shut its sending side (FIN) still reads, so it is not gone.
/// Never blocks (`poll(2)` with no events asked and a zero timeout).
pub(crate) fn peer_reset(fd: &impl AsRawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd and we pass a count of 1; a zero timeout never blocks.
    let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
    rc > 0 && pfd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Waits up to `timeout` for `fd` to become readable. A signal that interrupts the wait
/// (`EINTR`) is `Ok(false)`: nothing became readable.
pub(crate) fn poll_readable(fd: &impl AsRawFd, timeout: Duration) -> io::Result<bool> {
    poll_one(fd, libc::POLLIN, timeout)
}

/// Waits up to `timeout` for `fd` to have room to write (or an error or hang-up, which the
/// write then reports). A signal that interrupts the wait is `Ok(false)`.
pub(crate) fn poll_writable(fd: &impl AsRawFd, timeout: Duration) -> io::Result<bool> {
    poll_one(fd, libc::POLLOUT, timeout)
}

/// Waits up to `timeout` for `events` on `fd`: whether any came.
fn poll_one(fd: &impl AsRawFd, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd and we pass a count of 1.
    let rc = unsafe { libc::poll(&mut pfd, 1, poll_ms(timeout)) };
    match rc {
        -1 => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}
