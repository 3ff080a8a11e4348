//! Shared by the HTTP fuzz targets: feed bytes to a sans-IO session with the demo app, the way
//! a driver would, and collect everything the session writes.

use std::sync::Arc;
use std::time::Duration;

use berth::app::{Demo, DemoConfig, DemoHandler};
use berth::drive::Service;
use berth::proto::http::{Context, FileError, Job, Limits, Session, Step};
use berth::stats::Stats;

pub const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

pub fn handler() -> DemoHandler {
    let config = DemoConfig { slow_duration: Duration::ZERO, offload_slow: true };
    Demo::new(config, Arc::new(Stats::new(1))).handler(0)
}

/// Small limits, so the fuzzer reaches every limit path quickly.
pub fn limits() -> Limits {
    Limits { max_header_bytes: 1024, max_headers: 16, max_uri_bytes: 256, max_body_bytes: 2048, output_high_water: 512 }
}

/// Feeds `chunks` one after another; returns all output and whether the session closed.
pub fn run(chunks: &[&[u8]], limits: &Limits) -> (Vec<u8>, bool) {
    let mut handler = handler();
    let mut session = Session::new();
    let cx = Context { limits, date: DATE };
    let (mut input, mut output, mut all) = (Vec::new(), Vec::new(), Vec::new());
    let mut closed = false;
    for chunk in chunks {
        if closed {
            break;
        }
        input.extend_from_slice(chunk);
        let mut step = session.process(&mut input, &mut output, &cx, &mut handler);
        // Bounded: every step either consumes input, answers, or stops.
        for _ in 0..100_000 {
            match step {
                Step::Offload(job) => step = session.complete(job.run(), &mut input, &mut output, &cx, &mut handler),
                Step::Flush => {
                    all.append(&mut output);
                    step = session.process(&mut input, &mut output, &cx, &mut handler);
                }
                Step::Open(req) => {
                    step = session.file(&req, Err(FileError::NotFound), &mut input, &mut output, &cx, &mut handler)
                }
                Step::SendFile { .. } => unreachable!("no file is ever found"),
                Step::Read => break,
                Step::Close => {
                    closed = true;
                    break;
                }
            }
        }
        all.append(&mut output);
        // The session never holds more than a request's worth of input.
        assert!(input.len() <= chunk.len() + limits.max_header_bytes + limits.max_body_bytes + 64 * 1024);
    }
    (all, closed)
}
