//! What berth's tests share, written once: the message protocol's frames as a client sends and
//! reads them, engines served on a thread of their own ([`msg`]); waits with a deadline
//! ([`wait`]); byte patterns and reads until a condition ([`bytes`]); certificates made in the
//! test ([`certs`]); a TLS client that trusts them ([`tls`]); processes as `/proc` shows them
//! ([`procs`]); and the tools a test runs, which must be there ([`tools`]).
//!
//! A dev-dependency of `berth`, `berth-cli` and `berth-lab` (`publish = false`). It does not
//! start HTTP servers of a model (`crates/berth/tests/support/server.rs` does, for the engine's
//! tests) nor the built binary (`crates/berth-cli/tests/common`).
//!
//! Every wait here has a deadline, so a test that finds a bug fails instead of hanging; none has
//! an upper bound on how fast the machine must be.

pub mod bytes;
pub mod certs;
pub mod msg;
pub mod procs;
pub mod tls;
pub mod tools;
pub mod wait;

pub use bytes::{pattern, read_until, ReadEnd};
pub use tools::{python, require, require_python_module};
pub use wait::{wait_for, LIMIT};
