//! What berth's tests share, written once: the message protocol's frames as a client sends and
//! reads them, engines served on a thread of their own ([`msg`]); waits with a deadline
//! ([`wait`]); byte patterns and reads until a condition ([`bytes`]); certificates made in the
//! test ([`certs`]); a TLS client that trusts them ([`tls`]); an HTTP/2 client, h2c or over
//! TLS ([`h2`]); processes as `/proc` shows them ([`procs`]); and the tools a test runs, which
//! must be there ([`tools`]).
//!
//! A dev-dependency of `berth`, `berth-cli` and `berth-lab` (`publish = false`). It does not
//! start HTTP servers of a model (`crates/berth/tests/support/server.rs` does, for the engine's
//! tests) nor the built binary (`crates/berth-cli/tests/common`).
//!
//! Every wait here has a deadline, so a test that finds a bug fails instead of hanging; none has
//! an upper bound on how fast the machine must be.

pub mod bytes;
pub mod certs;
pub mod h2;
pub mod msg;
pub mod procs;
pub mod tls;
pub mod tools;
pub mod wait;

pub use bytes::{pattern, read_until, ReadEnd};
pub use tools::{python, require, require_python_module};
pub use wait::{wait_for, LIMIT};

/// One `#[test]` per case and model, from the model registry: `berth::with_models!(per_model! {
/// case_a, case_b })` (with `use berth_testkit::per_model;`) makes a module per case holding a
/// test per model (`case_a::uring`) that calls `case_a(berth::drive::Model::Uring)`. A failure
/// in one model hides none of the others, and a new model gets every case without an edit.
/// What a case expects of a model that cannot do something it reads from the model's
/// [`Caps`](berth::drive::Caps), never from a list of models.
#[macro_export]
macro_rules! per_model {
    (@case $case:ident [$($module:ident $driver:ident),+]) => {
        mod $case {
            $(
                #[test]
                fn $module() {
                    super::$case(::berth::drive::Model::$driver)
                }
            )+
        }
    };
    ($models:tt $($case:ident),+ $(,)?) => {
        $($crate::per_model!(@case $case $models);)+
    };
}
