//! berth's engine: listeners ([`net`]), concurrency models ([`drive`]) and the demo
//! application ([`app`]), over the sans-IO protocols of `berth-proto`. The event-loop models
//! and the message engine ([`msg`]) share one runtime: a timer wheel, a buffer pool and the
//! drain/stop control (`rt`).
//!
//! ```text
//!   net::bind ──> listeners ──> drive::<model>::spawn(listeners, service, common, config, stats)
//!                                          │  bytes <-> berth_proto::http::Session
//!                                          └─ Service::handler() ──> app::DemoHandler (or yours)
//! ```
//!
//! What this crate does not do: parse HTTP (that is `berth-proto`) or parse command lines (that
//! is `berth-cli`, and `berth-py`'s front); the unit syntaxes their flags share are here
//! ([`units`]), so that both read a value alike.
#![deny(missing_docs)]
// Every libc call and raw-pointer block is in `sys`, behind safe functions; its `mod.rs` states
// the contract. CI checks that the keyword appears nowhere else.
#![deny(unsafe_code)]

pub mod app;
pub mod drive;
pub mod files;
pub mod msg;
pub mod net;
pub mod process;
pub(crate) mod rt;
pub mod stats;
#[allow(unsafe_code)]
mod sys;
pub mod units;

pub use berth_proto as proto;
