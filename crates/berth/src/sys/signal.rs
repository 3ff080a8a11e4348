//! The termination signals (SIGINT, SIGTERM) and SIGHUP (reload): blocked in every thread and
//! collected with `sigwait(2)` (`process::signal` tells the story), or, in a single-threaded
//! forked child, caught by a handler that only sets a flag (SIGHUP stays blocked there).
//! Through `nix` where it has the call (signal sets and masks, `sigwait`, `sigaction`); `libc`
//! for what it lacks (`sigtimedwait`, and the handler's `setsockopt` and `_exit`).

use std::io;

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal as Sig};

/// A termination signal that was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

/// A signal [`wait_for_signal`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT or SIGTERM.
    Stop(Termination),
    /// SIGHUP: read configuration files again (a TLS certificate).
    Reload,
}

fn signal_set(hangup: bool) -> SigSet {
    let mut set = SigSet::empty();
    set.add(Sig::SIGINT);
    set.add(Sig::SIGTERM);
    if hangup {
        set.add(Sig::SIGHUP);
    }
    set
}

fn termination_set() -> SigSet {
    signal_set(false)
}

/// The signal `sig` is, as [`wait_for_signal`] tells it.
fn told(sig: libc::c_int) -> Signal {
    match sig {
        libc::SIGINT => Signal::Stop(Termination::Interrupt),
        libc::SIGHUP => Signal::Reload,
        _ => Signal::Stop(Termination::Terminate),
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and every thread it starts
/// afterwards. Call it first thing, before spawning the server's threads.
pub fn block_termination() -> io::Result<()> {
    Ok(signal_set(true).thread_block()?)
}

/// Undoes [`block_termination`] for the calling thread: a forked child that should die on
/// SIGTERM calls it.
pub fn unblock_termination() -> io::Result<()> {
    Ok(termination_set().thread_unblock()?)
}

/// Waits until SIGINT or SIGTERM arrives (a SIGHUP meanwhile is taken and ignored). The
/// signals must have been blocked with [`block_termination`], or they would kill the process
/// before this returns.
pub fn wait_for_termination() -> io::Result<Termination> {
    loop {
        if let Signal::Stop(t) = wait_for_signal()? {
            return Ok(t);
        }
    }
}

/// Waits until SIGINT, SIGTERM or SIGHUP arrives (blocked first with [`block_termination`]).
pub fn wait_for_signal() -> io::Result<Signal> {
    Ok(told(signal_set(true).wait()? as libc::c_int))
}

/// Like [`wait_for_signal`], for at most `timeout`: `None` if no signal came in that time.
pub fn wait_for_signal_within(timeout: std::time::Duration) -> io::Result<Option<Signal>> {
    let set = signal_set(true);
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    loop {
        // SAFETY: `set` and `ts` are initialised and live for the call; a null info pointer is
        // allowed.
        let sig = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
        if sig >= 0 {
            return Ok(Some(told(sig)));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(None),
            // A handler of another signal ran (berth installs none where this is called): the
            // wait starts again in full.
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

static TERMINATION_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The connection of the child that [`interrupt_on_termination`] was called in (-1: none).
static CONNECTION: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// SIGTERMs seen by that child: the server sends one when its drain begins and one when its
/// deadline passes (a terminal's SIGINT to the whole group is not one of them).
static TERMS_SEEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn note_termination(sig: libc::c_int) {
    use std::sync::atomic::Ordering;
    // Only atomics, setsockopt and _exit: async-signal-safe.
    TERMINATION_SEEN.store(true, Ordering::Release);
    if sig != libc::SIGTERM || TERMS_SEEN.fetch_add(1, Ordering::AcqRel) == 0 {
        return;
    }
    // The second SIGTERM: the server's deadline passed. The connection is given up at once, with a
    // reset (SO_LINGER 0, as `Transport::abort`), rather than left to the kernel as an orphan
    // when the server kills this process.
    let fd = CONNECTION.load(Ordering::Acquire);
    if fd >= 0 {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt on a descriptor of this process with a live linger value and its
        // size; _exit ends the process without running anything that is not signal-safe.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
    // SAFETY: see above.
    unsafe { libc::_exit(0) }
}

/// For a single-threaded child serving one blocking connection, `connection`: SIGTERM (and
/// SIGINT) no longer kill it but set the returned flag and interrupt a blocked `read` (no
/// `SA_RESTART`), so the child can finish the request in flight and leave once idle. A second
/// SIGTERM (the server's drain deadline passed) resets the connection and exits at once. Unblocks
/// the signals too.
pub(crate) fn interrupt_on_termination(
    connection: &impl std::os::fd::AsRawFd,
) -> io::Result<&'static std::sync::atomic::AtomicBool> {
    CONNECTION.store(connection.as_raw_fd(), std::sync::atomic::Ordering::Release);
    // A handler that only does what is async-signal-safe, with an empty mask and no
    // SA_RESTART (a blocked `read` is interrupted).
    let action = SigAction::new(
        SigHandler::Handler(note_termination),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in [Sig::SIGTERM, Sig::SIGINT] {
        // SAFETY: `note_termination` touches only atomics, setsockopt and _exit, all
        // async-signal-safe; no previous handler is relied on.
        unsafe { sigaction(sig, &action) }?;
    }
    unblock_termination()?;
    Ok(&TERMINATION_SEEN)
}
