//! Descriptor plumbing for running as a daemon or a service: a close-on-exec pipe, the standard
//! streams pointed elsewhere, and descriptors inherited from a service manager adopted.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The process's soft limit on open descriptors (`RLIMIT_NOFILE`); `None` if unlimited or
/// unknown.
pub(crate) fn open_files_limit() -> Option<u64> {
    let (soft, _) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok()?;
    (soft != nix::sys::resource::RLIM_INFINITY).then_some(soft)
}

/// `pipe2(O_CLOEXEC)`: the read end, then the write end.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these two descriptors, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Points the standard streams at other descriptors: `dup2(stdin, 0)`, `dup2(stdout, 1)`,
/// `dup2(stderr, 2)`, in that order, stopping at the first failure. Each replacement is atomic.
pub(crate) fn redirect_standard_streams(
    stdin: &impl AsRawFd,
    stdout: &impl AsRawFd,
    stderr: &impl AsRawFd,
) -> io::Result<()> {
    for (from, to) in [
        (stdin.as_raw_fd(), 0),
        (stdout.as_raw_fd(), 1),
        (stderr.as_raw_fd(), 2),
    ] {
        // SAFETY: dup2 only changes the descriptor table. `from` is borrowed, hence open, for
        // the call; `to` is a standard stream, which no Rust value owns and closes.
        if unsafe { libc::dup2(from, to) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Takes ownership of descriptor `fd`, which this process inherited open (systemd's socket
/// activation passes listening sockets as descriptors 3 and up), and marks it close-on-exec,
/// so that a program berth might run does not inherit it in turn. `EBADF` if it is not open.
pub(crate) fn adopt_inherited(fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only reads the descriptor's flags; an unopened descriptor is EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above, F_SETFD only sets the flags of this open descriptor.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (checked above) and was handed to this process by the one
    // that started it: no Rust value owns it yet, and the caller takes each one only once
    // (`net::activation` clears the environment that names them).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
