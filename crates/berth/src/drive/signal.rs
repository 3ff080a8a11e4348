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
