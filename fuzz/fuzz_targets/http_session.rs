//! cargo +nightly fuzz run http_session
//!
//! Arbitrary bytes into one HTTP session: it must never panic, loop, or buffer without bound,
//! and everything it writes must be well-formed responses.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let (out, _) = common::run(&[data], &common::limits());
    // Every response starts with a status line berth writes.
    assert!(out.is_empty() || out.starts_with(b"HTTP/1.1 "), "{:?}", String::from_utf8_lossy(&out));
});
