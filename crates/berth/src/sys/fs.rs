//! Files: `openat2(2)` confined below a directory, and `sendfile(2)` from a file to a socket.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// `struct open_how` of `openat2(2)` (libc's is `non_exhaustive`, so it cannot be built).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(dir, path, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, close-on-exec: the
/// kernel refuses (`EXDEV`) any resolution of `path` that would leave `dir`. `ENOSYS` on kernels
/// before 5.6.
pub(crate) fn openat2_beneath(
    dir: &impl AsFd,
    path: &std::ffi::CStr,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `path` is a NUL-terminated string and `how` a live open_how whose size is passed
    // with it; both outlive the call. The descriptor is borrowed for the call only.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_fd().as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat2 returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// One `sendfile(2)` call: up to `count` bytes of `file` from `*offset` to `out`, advancing
/// `*offset` by what was sent. Returns that count (0 if the file ends at `*offset`);
/// `WouldBlock` on a full non-blocking socket; `InvalidInput` for an offset beyond `off_t`.
#[inline]
pub(crate) fn sendfile(
    out: &impl AsRawFd,
    file: &impl AsRawFd,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off =
        libc::off_t::try_from(*offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both descriptors are open for the call (borrowed), and `off` is a live off_t the
    // kernel updates in place.
    let n = unsafe { libc::sendfile(out.as_raw_fd(), file.as_raw_fd(), &mut off, count) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    *offset = off as u64;
    Ok(n as usize)
}

/// `mkfifo(2)`, for tests that plant a FIFO where a file is expected.
#[cfg(test)]
pub(crate) fn mkfifo(path: &std::path::Path, mode: libc::mode_t) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::mkfifo(path.as_ptr(), mode) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
