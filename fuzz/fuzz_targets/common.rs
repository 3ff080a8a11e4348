//! Shared by the HTTP fuzz targets: feed bytes to a sans-IO session with the demo app, the way
//! a driver would, and collect everything the session writes.

use std::sync::Arc;
use std::time::Duration;

use berth::app::{Demo, DemoConfig, DemoHandler};
use berth::drive::Service;
use berth::proto::switch::{NoFiles, Pump};
use berth::proto::http::Limits;
use berth::stats::Stats;

pub const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

pub fn handler() -> DemoHandler {
    let config = DemoConfig { slow_duration: Duration::ZERO, offload_slow: true, ..DemoConfig::default() };
    Demo::new(config, Arc::new(Stats::new(1))).handler(0)
}

/// Small limits, so the fuzzer reaches every limit path quickly.
pub fn limits() -> Limits {
    Limits {
        max_header_bytes: 1024,
        max_headers: 16,
        max_uri_bytes: 256,
        max_body_bytes: 2048,
        output_high_water: 512,
        ..Limits::default()
    }
}

/// Feeds `chunks` one after another through berth-proto's in-memory pump (jobs run inline,
/// no files); returns all output and whether the session closed. A broken step rule (output
/// after Close, an answer while a job is out, a livelock) is a crash.
pub fn run(chunks: &[&[u8]], limits: &Limits) -> (Vec<u8>, bool) {
    let mut pump = Pump::new(handler(), *limits, DATE, false);
    for chunk in chunks {
        if pump.is_closed() {
            break;
        }
        if let Err(violation) = pump.feed(chunk, &mut NoFiles) {
            panic!("{violation}");
        }
        // The session never holds more than a request's worth of input.
        assert!(pump.unread().len() <= chunk.len() + limits.max_header_bytes + limits.max_body_bytes + 64 * 1024);
    }
    let closed = pump.is_closed();
    (pump.take_written(), closed)
}
