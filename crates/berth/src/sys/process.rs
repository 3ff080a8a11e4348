//! The process calls the `forked` and `prefork` models and the daemon need: fork, exit a child,
//! reap it, signal it, make it follow its parent, close inherited descriptors, start a session.

use std::io;

/// Which side of a fork we are on.
pub(crate) enum Fork {
    /// The new process.
    Child,
    /// The original process; the child's pid.
    Parent(libc::pid_t),
}

/// `fork(2)`. The child has one thread, the caller's; it must end with [`exit_child`], never by
/// returning into code that assumes the parent's threads exist.
pub(crate) fn fork() -> io::Result<Fork> {
    // SAFETY: fork has no memory-safety preconditions. The child runs only code that is safe
    // with one thread (glibc keeps malloc usable after fork) and leaves through `_exit`.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Fork::Child),
        pid => Ok(Fork::Parent(pid)),
    }
}

/// Makes a freshly forked child follow its parent: the kernel sends it `sig` when the parent
/// dies (`PR_SET_PDEATHSIG`), so a master killed with SIGKILL (the OOM killer, a crash) takes
/// its children along instead of leaving them serving as orphans. Returns `false` if the parent
/// is already gone: it may have died between the fork and this call, before there was anyone to
/// tell; `parent` is its pid, taken before the fork, and a reparented child sees another.
///
/// The kernel's "parent" is the *thread* that forked: children must be forked by a thread that
/// lives as long as they should (prefork's supervisor, forked's acceptor).
pub(crate) fn follow_parent(parent: libc::pid_t, sig: libc::c_int) -> io::Result<bool> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number by value and touches no memory of
    // ours; the unused arguments are zero as the man page asks.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid has no preconditions and cannot fail.
    Ok(unsafe { libc::getppid() } == parent)
}

/// [`follow_parent`] with SIGTERM: a worker process that should drain and exit when its
/// supervisor dies.
pub(crate) fn terminate_with_parent(parent: libc::pid_t) -> io::Result<bool> {
    follow_parent(parent, libc::SIGTERM)
}

/// This process's id (taken in a parent before a fork, for [`follow_parent`]).
pub(crate) fn pid() -> libc::pid_t {
    std::process::id() as libc::pid_t
}

/// Ends a forked child at once: no destructors, no atexit handlers, no flushing of buffers that
/// are copies of the parent's.
pub(crate) fn exit_child(code: i32) -> ! {
    // SAFETY: _exit only ends the process.
    unsafe { libc::_exit(code) }
}

/// Closes every descriptor from 3 up, except those in `keep` (at most 4; negative ones are
/// ignored): a child must not hold
/// the parent's other sockets open (the parent's close would then not reach the peer). Allocates
/// nothing, as befits a freshly forked child.
pub(crate) fn close_inherited(keep: &[i32]) {
    let mut sorted = [u32::MAX; 4];
    debug_assert!(keep.len() <= sorted.len());
    for (slot, &fd) in sorted.iter_mut().zip(keep) {
        *slot = u32::try_from(fd).unwrap_or(u32::MAX);
    }
    sorted.sort_unstable();
    let mut first: u32 = 3;
    for fd in sorted.into_iter().chain([u32::MAX]) {
        if fd < first {
            continue;
        }
        if fd > first {
            // SAFETY: close_range only closes descriptors; nothing in this process refers to
            // the closed ones afterwards (the child was just forked and owns no Rust handles to
            // them that it will use).
            unsafe { libc::syscall(libc::SYS_close_range, first, fd - 1, 0) };
        }
        if fd == u32::MAX {
            break;
        }
        first = fd + 1;
    }
}

/// `setsid(2)`: a new session with this process as its leader, so no controlling terminal and
/// not in the shell's process group. Fails (`EPERM`) in a process group leader.
pub(crate) fn new_session() -> io::Result<()> {
    // SAFETY: setsid has no memory-safety preconditions.
    if unsafe { libc::setsid() } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How a child ended, if it has.
pub(crate) fn try_reap(pid: libc::pid_t) -> Option<i32> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer; WNOHANG never blocks.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    match rc {
        0 => None,
        // ECHILD: already reaped (or not ours); treat it as gone.
        -1 => Some(-1),
        _ if libc::WIFEXITED(status) => Some(libc::WEXITSTATUS(status)),
        _ if libc::WIFSIGNALED(status) => Some(128 + libc::WTERMSIG(status)),
        _ => Some(-1),
    }
}

/// Sends `sig` to `pid`.
pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) };
}

/// Asks children to stop with SIGTERM, waits up to `grace` for them, then kills the rest.
pub(crate) fn stop_children(pids: &mut Vec<libc::pid_t>, grace: std::time::Duration) {
    for &pid in pids.iter() {
        kill(pid, libc::SIGTERM);
    }
    let deadline = std::time::Instant::now() + grace;
    while !pids.is_empty() && std::time::Instant::now() < deadline {
        pids.retain(|&pid| try_reap(pid).is_none());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for &pid in pids.iter() {
        kill(pid, libc::SIGKILL);
        // SAFETY: as in try_reap, with a blocking wait for a child just sent SIGKILL.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
    pids.clear();
}
