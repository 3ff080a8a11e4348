//! Sans-IO protocol state machines for berth.
//!
//! ```text
//!   driver (berth::drive)                       this crate
//!   ---------------------                       ----------
//!   socket --read--> input: Vec<u8> ---------> Session::process ---> Handler::handle
//!                                                    |                   |
//!   socket <-write-- output: Vec<u8> <---------------+<-- Response ------+
//!                                                    |
//!   worker threads <------- Action::Offload ---------+
//!   Job::run -> Reply ----> Session::complete -------+
//! ```
//!
//! What this crate does **not** do: it never touches a socket, a clock, a thread or the
//! allocator's global state on its own. Bytes come in as slices, time comes in as a preformatted
//! `Date` value, and every decision a session makes is returned to the caller as a [`http::Action`].
//! That is what lets one HTTP implementation run unchanged under every concurrency model, be
//! fuzzed, and be tested from files of vectors.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod h2;
pub mod h3;
pub mod http;
pub mod msg;
pub mod settings;
pub mod switch;
pub mod upgrade;
pub mod ws;
pub mod zlib;
