//! Memory held by idle keep-alive connections in the `evloop` driver: the process's RSS and
//! the bytes its heap holds, per connection (`support/idle.rs`), over HTTP/1.1 and over
//! HTTP/2 (h2c). The tests of this binary take [`ALONE`] in turn, so no other test allocates
//! while one counts. The heap count is exact whatever ran before; the RSS one is honest in a
//! fresh process only (pages a test before touched and freed are not counted again), so for
//! a figure run one test alone: `cargo test -p berth --test idle_memory http2 --
//! --include-ignored --nocapture`.

#[path = "support/counting.rs"]
mod counting;
#[path = "support/idle.rs"]
mod idle;
#[path = "support/server.rs"]
mod server;

use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use berth_testkit::h2::{self, Req};
use server::{ModelServer, Opts};

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

/// Held by each test while it runs: one measures at a time.
static ALONE: Mutex<()> = Mutex::new(());

#[test]
fn an_idle_keep_alive_connection_holds_no_buffers() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    // Counts, not speed: 1,000 connections that made one request and went idle may add at most
    // 1 KiB of server memory each (nginx takes about 530 bytes; a pooled 16 KiB read buffer per
    // connection would show as 16 MiB here), and hold nothing on the heap: the slab of slots
    // is allocated up front, and buffers go back to the pool.
    let srv = Opts::evloop().capacity(4096).start();
    let cost = idle::cost_of_idle(&srv, 200, 1000);
    assert!(
        cost.rss <= 1024,
        "{} bytes of RSS per idle connection",
        cost.rss
    );
    assert!(
        cost.heap <= 16,
        "{} heap bytes per idle connection",
        cost.heap
    );
}

/// Opens `n` h2c connections that each make `req`, read the answer and stay open: only their
/// sockets are kept (the client's own state is dropped, so it is not counted).
fn open_h2(srv: &ModelServer, n: usize, req: &Req, into: &mut Vec<TcpStream>) {
    for _ in 0..n {
        let mut c = h2::connect(srv.addr, None, &[]);
        let r = c.request(req).response("an h2c request");
        assert_eq!(r.status, 200);
        // The server's SETTINGS came before its answer, and ours were sent first: nothing
        // is left to say on the connection.
        match c.into_inner() {
            h2::Conn::Plain(s) => into.push(s),
            h2::Conn::Tls(_) => unreachable!("h2c"),
        }
    }
}

/// What one idle HTTP/2 connection that made `req` costs the server, measured as
/// `idle::cost_of_idle` measures HTTP/1.1's: `warm` connections first, then the `n` counted.
fn cost_of_idle_h2(srv: &ModelServer, warm: usize, n: usize, req: &Req) -> idle::Cost {
    let mut warmed = Vec::new();
    open_h2(srv, warm, req, &mut warmed);
    let before = srv.snapshot().connections_open;
    let mut idle = Vec::with_capacity(n);
    let (rss, heap) = (idle::rss_bytes(), counting::live_bytes());
    open_h2(srv, n, req, &mut idle);
    let open_now = || srv.snapshot().connections_open == before + n as u64;
    assert!(server::wait_for(Duration::from_secs(5), open_now));
    let cost = idle::Cost {
        rss: (idle::rss_bytes() - rss) / n as isize,
        heap: (counting::live_bytes() - heap) / n as isize,
    };
    println!("per idle HTTP/2 connection ({req:?}): {cost:?}");
    drop(warmed);
    cost
}

#[test]
fn an_idle_http2_connection_costs_at_most_2_kib() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    // Issue 32: an idle HTTP/2 connection costs at most 2 KiB. Counts, not speed: 2,000 h2c
    // connections that made one request (`GET /` as curl sends it: `:authority`, `user-agent`
    // and `accept` indexed into the server's HPACK table, as curl, nghttp2 and browsers do)
    // and went idle. RSS moves in pages and allocator chunks: over 1,000 connections it read
    // 1,949 or 2,015 bytes from run to run, and 2,072 once under CI's load; over 2,000 the
    // step is half that.
    let srv = Opts::evloop().capacity(4096).start();
    let req = Req::get("/")
        .field("user-agent", "curl/7.88.1")
        .field("accept", "*/*")
        .indexing();
    let cost = cost_of_idle_h2(&srv, 200, 2000, &req);
    assert!(
        cost.rss <= 2048,
        "{} bytes of RSS per idle HTTP/2 connection",
        cost.rss
    );
    assert!(
        cost.heap <= 2048,
        "{} heap bytes per idle HTTP/2 connection",
        cost.heap
    );
}
