//! Termination signals (SIGINT, SIGTERM) turned into an ordinary blocking call, so a server can
//! shut down in an orderly way instead of dying mid-response.
//!
//! The signals are blocked in the calling thread before any other thread starts (threads inherit
//! the mask), and one thread collects them with `sigwait(2)`. No handler runs asynchronously,
//! so nothing here has to be async-signal-safe.

use std::io;

/// A termination signal that was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

fn termination_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set it is given; a zeroed sigset_t is a valid argument.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts afterwards.
/// Call it first thing, before spawning the server's threads.
pub fn block_termination() -> io::Result<()> {
    let set = termination_set();
    // SAFETY: `set` is an initialised signal set; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Undoes [`block_termination`] for the calling thread: a forked child that should die on
/// SIGTERM calls it.
pub fn unblock_termination() -> io::Result<()> {
    let set = termination_set();
    // SAFETY: as in block_termination.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits until SIGINT or SIGTERM arrives. The signals must have been blocked with
/// [`block_termination`], or they would kill the process before this returns.
pub fn wait_for_termination() -> io::Result<Termination> {
    let set = termination_set();
    let mut sig: libc::c_int = 0;
    // SAFETY: both pointers refer to live, initialised values for the duration of the call.
    let rc = unsafe { libc::sigwait(&set, &mut sig) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(if sig == libc::SIGINT {
        Termination::Interrupt
    } else {
        Termination::Terminate
    })
}
