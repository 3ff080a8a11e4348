//! The `evloop` and `uring` drivers serve keep-alive requests without touching the allocator
//! in steady state (DESIGN §2: "no allocation per connection or per request in steady state").
//!
//! A counting global allocator (`support/counting.rs`) wraps the system one. After a warm-up, 10,000 keep-alive
//! `GET /hello/world` requests go over one connection with a client that itself allocates
//! nothing (a fixed request, a fixed read buffer, Content-Length parsed by hand), and the count
//! must not move; then 500 short connections (one request each) must not move it either. A
//! `/stats` request in between proves the counter sees the server's threads. This binary holds
//! a single test so that no other test thread allocates while it counts.

#[path = "support/counting.rs"]
mod counting;
#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use berth::drive::Model;
use counting::allocations;
use server::Opts;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

const REQUEST: &[u8] = b"GET /hello/world HTTP/1.1\r\nHost: alloc\r\n\r\n";
const BODY: &[u8] = b"Hello, World!";

/// Sends [`REQUEST`] and reads its response into `buf` without allocating. Returns false (never
/// panics, since a panic message allocates) if anything is off.
fn exchange(stream: &mut (impl Read + Write), buf: &mut [u8; 16384]) -> bool {
    match exchange_with(stream, buf, REQUEST) {
        Some(len) => buf[..len].starts_with(b"HTTP/1.1 200 ") && buf[..len].ends_with(BODY),
        None => false,
    }
}

/// Sends `request` and reads exactly one response into `buf`; returns its length. Allocates
/// nothing.
fn exchange_with(
    stream: &mut (impl Read + Write),
    buf: &mut [u8; 16384],
    request: &[u8],
) -> Option<usize> {
    stream.write_all(request).ok()?;
    let mut have = 0;
    loop {
        if let Some(total) = complete_response(&buf[..have]) {
            // One request in flight, so one response, and nothing may follow it.
            return (total == have).then_some(have);
        }
        if have == buf.len() {
            return None;
        }
        match stream.read(&mut buf[have..]) {
            Ok(0) | Err(_) => return None,
            Ok(n) => have += n,
        }
    }
}

/// Connects with read and write timeouts, allocating nothing (a `SocketAddr` needs no lookup).
fn connect_bounded(addr: SocketAddr) -> Option<TcpStream> {
    let conn = TcpStream::connect_timeout(&addr, server::IO_TIMEOUT).ok()?;
    conn.set_read_timeout(Some(server::IO_TIMEOUT)).ok()?;
    conn.set_write_timeout(Some(server::IO_TIMEOUT)).ok()?;
    Some(conn)
}

/// The length of the response at the front of `bytes` if it is complete (head and
/// Content-Length body), parsed by hand.
fn complete_response(bytes: &[u8]) -> Option<usize> {
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = &bytes[..head_end];
    let name = b"\r\ncontent-length:";
    let at = head
        .windows(name.len())
        .position(|w| w.eq_ignore_ascii_case(name))?
        + name.len();
    let mut len = 0usize;
    let mut digits = 0;
    for &b in &head[at..] {
        match b {
            b' ' | b'\t' if digits == 0 => {}
            b'0'..=b'9' => {
                len = len * 10 + usize::from(b - b'0');
                digits += 1;
            }
            _ => break,
        }
    }
    if digits == 0 {
        return None;
    }
    (bytes.len() >= head_end + len).then_some(head_end + len)
}

#[test]
fn steady_state_does_not_allocate() {
    // One model after the other, in one test: no other test thread allocates meanwhile (so
    // not a test per model). The models that say so, whose serving threads are in this
    // process (a forked one's allocations are not counted here).
    let models = Model::ALL
        .into_iter()
        .filter(|m| m.caps().allocation_free && !m.needs().forks);
    for model in models {
        steady_state(model);
    }
}

fn steady_state(model: Model) {
    let srv = Opts::new(model).accept_threads(1).workers(1).start();
    let mut stream = server::connect(srv.addr);
    let mut buf = [0u8; 16384];

    for i in 0..1000 {
        assert!(
            exchange(&mut stream, &mut buf),
            "warm-up request {i} failed"
        );
    }

    // The counter sees the server's allocations: `/stats` builds its text in a new String.
    let start = allocations();
    assert!(
        exchange_with(
            &mut stream,
            &mut buf,
            b"GET /stats HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        .is_some(),
        "GET /stats failed"
    );
    assert!(
        allocations() > start,
        "the counting allocator did not see the server allocate"
    );
    assert!(
        exchange(&mut stream, &mut buf),
        "request after /stats failed"
    );

    let before = allocations();
    let mut failed_at = None;
    for i in 0..10_000u32 {
        if !exchange(&mut stream, &mut buf) {
            failed_at = Some(i);
            break;
        }
    }
    let after = allocations();

    assert_eq!(failed_at, None, "a request in the counted window failed");
    assert_eq!(
        after - before,
        0,
        "{model}: {} allocations during 10,000 keep-alive requests",
        after - before
    );
    // New connections do not allocate either (the slab is preallocated and buffers pooled):
    // 500 connections, one request each, closed by the client. Warm up the same way first.
    for i in 0..100 {
        let ok = connect_bounded(srv.addr).is_some_and(|mut conn| exchange(&mut conn, &mut buf));
        assert!(ok, "warm-up connection {i} failed");
    }
    let before = allocations();
    let mut failed_at = None;
    for i in 0..500u32 {
        let ok = connect_bounded(srv.addr).is_some_and(|mut conn| exchange(&mut conn, &mut buf));
        if !ok {
            failed_at = Some(i);
            break;
        }
    }
    let after = allocations();
    assert_eq!(failed_at, None, "a connection in the counted window failed");
    assert_eq!(
        after - before,
        0,
        "{model}: {} allocations during 500 short connections",
        after - before
    );

    let s = srv.snapshot();
    assert_eq!(s.requests, 11_602, "{s:?}");
    assert_eq!(s.connections_total, 601, "{s:?}");
}
