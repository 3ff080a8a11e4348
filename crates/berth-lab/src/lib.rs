//! berth's measuring tools.
//!
//! - [`bench`](mod@bench): an HTTP/1.1 load generator (`berth bench`), keep-alive like wrk or a connection
//!   per request like ab, with HdrHistogram latencies and errors counted by kind.
//! - [`msgbench`]: an echo load generator for message servers (`berth msg bench`), berth framing
//!   or ZeroMQ, every echoed byte verified, msgs/s, MB/s and round-trip latencies.
//! - [`lab`]: the side-by-side lab (`berth lab`): starts every berth model and every installed
//!   peer server in turn, runs the seeds' load shapes against each with [`bench`](mod@bench), measures the
//!   server's CPU time and memory from `/proc`, and writes a table, JSON and an SVG chart.
//!
//! Nothing here is linked into the server: the engine crate does not depend on this one.
#![deny(missing_docs)]

pub mod bench;
pub mod lab;
mod latency;
mod load_threads;
pub mod msgbench;
mod poll_loop;
