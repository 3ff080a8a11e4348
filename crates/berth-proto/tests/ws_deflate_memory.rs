//! What permessage-deflate holds per connection (issue 34: at most 64 KiB with the default
//! window), measured with a counting allocator (zlib-rs allocates through Rust's allocator):
//! live bytes of 64 sessions, idle and after a compressed message each way, with the default
//! settings and with the server keeping its context. `cargo test -p berth-proto --test
//! ws_deflate_memory -- --nocapture` prints the figures BENCHMARKS.md quotes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use berth_proto::upgrade::Upgraded;
use berth_proto::ws::deflate::negotiate;
use berth_proto::ws::{DeflateConfig, EchoHandler, WsConfig, WsSession};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, as the trait requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: allocated above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as the trait requires.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SESSIONS: usize = 64;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// A masked client frame, RSV1 as given.
fn frame(rsv1: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x81 | if rsv1 { 0x40 } else { 0 }];
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(payload);
    out
}

/// Live bytes per session: made with `deflate` agreed (`offer`), after a compressed "Hello"
/// in and a 4 KiB text echoed (compressed) out.
fn per_session(offer: &str, config: DeflateConfig) -> (isize, isize) {
    let ws = WsConfig {
        deflate: config,
        ..WsConfig::default()
    };
    let (agreed, _) = negotiate([offer.as_bytes()], &config).unwrap();
    // Warm the shared pool first: its compressors are not per connection.
    let mut warm = WsSession::new(EchoHandler, ws).with_deflate(Some(agreed));
    let mut input = frame(false, "warm ".repeat(800).as_bytes());
    warm.receive(&mut input, &mut Vec::new());
    let thread_compressor = live();
    drop(warm);
    let start = live();
    let mut sessions: Vec<_> = (0..SESSIONS)
        .map(|_| WsSession::new(EchoHandler, ws).with_deflate(Some(agreed)))
        .collect();
    let made = live();
    let text = "all work and no play makes jack a dull boy ".repeat(95);
    for s in &mut sessions {
        let mut input = frame(true, &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00]);
        let mut out = Vec::new();
        s.receive(&mut input, &mut out);
        assert_eq!(out, b"\x81\x05Hello");
        let mut input = frame(false, text.as_bytes());
        let mut out = Vec::new();
        s.receive(&mut input, &mut out);
        assert_eq!(out[0], 0xC1);
    }
    let busy = live();
    drop(sessions);
    let _ = thread_compressor;
    let n = SESSIONS as isize;
    ((made - start) / n, (busy - start) / n)
}

#[test]
fn a_connection_holds_at_most_64_kib_of_zlib_state_by_default() {
    // One pooled compressor: what server_no_context_takeover shares.
    let before = live();
    let (agreed, _) = negotiate(
        [b"permessage-deflate".as_slice()],
        &DeflateConfig::default(),
    )
    .unwrap();
    let mut s = WsSession::new(EchoHandler, WsConfig::default()).with_deflate(Some(agreed));
    let mut input = frame(false, "x".repeat(1000).as_bytes());
    s.receive(&mut input, &mut Vec::new());
    drop(s);
    let thread = live() - before;

    let (idle, busy) = per_session("permessage-deflate", DeflateConfig::default());
    let (nct_idle, nct_busy) = per_session(
        "permessage-deflate; client_no_context_takeover",
        DeflateConfig::default(),
    );
    let keep = DeflateConfig {
        server_context_takeover: true,
        ..DeflateConfig::default()
    };
    let (keep_idle, keep_busy) = per_session("permessage-deflate", keep);
    let low = DeflateConfig {
        server_context_takeover: true,
        mem_level: 1,
        max_window_bits: 9,
        ..DeflateConfig::default()
    };
    let (low_idle, low_busy) = per_session("permessage-deflate; client_max_window_bits", low);
    println!("zlib-rs compressor in the shared pool (window 15, memLevel 8): {thread} B");
    println!("per connection, default: idle {idle} B, busy {busy} B");
    println!("per connection, client_no_context_takeover: idle {nct_idle} B, busy {nct_busy} B");
    println!("per connection, server context takeover: idle {keep_idle} B, busy {keep_busy} B");
    println!(
        "per connection, server context takeover, window 9, memLevel 1: idle {low_idle} B, \
         busy {low_busy} B"
    );
    assert!(busy <= 64 * 1024, "{busy}");
    assert!(idle < 1024, "{idle}");
    // The client giving up its context lets the inflater go between messages.
    assert!(nct_busy < 4 * 1024, "{nct_busy}");
    // A compressor of one's own costs its state, and memLevel and window bits shrink it.
    assert!(keep_busy > busy + 128 * 1024, "{keep_busy}");
    assert!(low_busy < keep_busy, "{low_busy} {keep_busy}");
}
