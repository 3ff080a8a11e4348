//! Termination signals (SIGINT, SIGTERM) turned into an ordinary blocking call, so a server can
//! shut down in an orderly way instead of dying mid-response.
//!
//! The signals are blocked in the calling thread before any other thread starts (threads inherit
//! the mask), and one thread collects them with `sigwait(2)`. No handler runs asynchronously,
//! so nothing here has to be async-signal-safe. The calls themselves are in `sys::signal`.

pub use crate::sys::signal::{
    block_termination, unblock_termination, wait_for_signal, wait_for_signal_within,
    wait_for_termination, Signal, Termination,
};

pub(crate) use crate::sys::signal::interrupt_on_termination;

/// Asks the kernel for SIGTERM when the parent process (`parent`, the one that forked this
/// one) dies, so that a worker whose supervisor was killed outright drains and exits instead of
/// holding the port for nobody. False if the parent is already gone.
pub fn terminate_with_parent(parent: i32) -> std::io::Result<bool> {
    crate::sys::process::terminate_with_parent(parent)
}
