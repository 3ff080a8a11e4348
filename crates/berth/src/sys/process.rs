//! The process calls the `forked` and `prefork` models and the daemon need: fork, exit a child,
//! reap it, signal it, make it follow its parent, close inherited descriptors, start a session.
//! Through `nix` where it has the call (fork, prctl, setsid, waitpid, kill); `libc` for what it
//! lacks (`_exit`, `close_range`).

use std::io;

use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{self, ForkResult, Pid};

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
    match unsafe { unistd::fork() }? {
        ForkResult::Child => Ok(Fork::Child),
        ForkResult::Parent { child } => Ok(Fork::Parent(child.as_raw())),
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
    nix::sys::prctl::set_pdeathsig(Signal::try_from(sig)?)?;
    Ok(unistd::getppid() == Pid::from_raw(parent))
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
    unistd::setsid()?;
    Ok(())
}

/// How a child ended, if it has.
pub(crate) fn try_reap(pid: libc::pid_t) -> Option<i32> {
    match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => None,
        Ok(WaitStatus::Exited(_, code)) => Some(code),
        Ok(WaitStatus::Signaled(_, sig, _)) => Some(128 + sig as i32),
        Ok(_) => Some(-1),
        // ECHILD: already reaped (or not ours); treat it as gone.
        Err(_) => Some(-1),
    }
}

/// Sends `sig` to `pid`.
pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) {
    if let Ok(sig) = Signal::try_from(sig) {
        let _ = signal::kill(Pid::from_raw(pid), sig);
    }
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
        // A blocking wait for a child just sent SIGKILL.
        let _ = waitpid(Pid::from_raw(pid), None);
    }
    pids.clear();
}
