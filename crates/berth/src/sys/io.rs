//! Reading and waiting: `read(2)` into a buffer's spare capacity without zeroing it first, and
//! `poll(2)` on one or two descriptors for the blocking models.

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

/// `timeout` as poll(2)'s milliseconds, rounded up (a wait for a deadline must not end before
/// it: 299.9 ms truncated to 299 woke a connection 0.1 ms before its write timeout), saturating.
fn poll_ms(timeout: Duration) -> libc::c_int {
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
}

/// Which of two descriptors [`poll_either`] found readable.
pub(crate) enum Ready {
    First,
    Second,
    Neither,
}

/// Waits up to `timeout` for `a` or `b` to become readable; `a` wins a tie. A signal that
/// interrupts the wait (`EINTR`) counts as `a` being readable, so the caller goes on to read it
/// and sees the interruption there.
pub(crate) fn poll_either(
    a: &impl AsRawFd,
    b: &impl AsRawFd,
    timeout: Duration,
) -> io::Result<Ready> {
    let mut fds = [
        libc::pollfd {
            fd: a.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` holds two valid pollfds and we pass a count of 2.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, poll_ms(timeout)) };
    if rc == -1 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(Ready::First)
        } else {
            Err(e)
        };
    }
    Ok(if fds[0].revents != 0 {
        Ready::First
    } else if fds[1].revents != 0 {
        Ready::Second
    } else {
        Ready::Neither
    })
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
