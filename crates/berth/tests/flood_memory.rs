//! Issue 29: a WebSocket client that floods pings and never reads costs each model a bounded
//! amount of memory, at most 64 KiB per connection. Under `uring` such a client cost 7-10 MB of
//! RSS: its multishot receive went on filling provided buffers after the connection paused
//! (cancelling a receive a flood keeps busy misses it), its receive queue kept everything it
//! had read at the front, and pongs piled up in its send queue while the session was shown
//! more pings. Now receives are limited to one buffer, the queue drops what was read, and an
//! upgraded protocol is shown input only once its last answer has left the transport, so that
//! a peer that does not read holds one batch of pongs until the write timeout ends it.
//!
//! The cost is counted on the heap (`support/counting.rs`) and shown in RSS, per flooding
//! connection, after warm-up connections have touched the pools. One test per in-process
//! model (the registry's, by `with_models!`), run one at a time, since the heap count is the
//! whole process's. `forked` and `prefork` serve from child processes, whose heap this
//! process cannot count: they run the same pump over a kernel socket, as `evloop` does here.

#[path = "support/counting.rs"]
mod counting;
// Only its `rss_bytes` here.
#[allow(dead_code)]
#[path = "support/idle.rs"]
mod idle;
#[path = "support/server.rs"]
mod server;

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use berth::drive::Model;
use server::Opts;

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

/// The tests measure one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Most heap a flooding connection may hold.
const BOUND: isize = 64 * 1024;

macro_rules! per_model {
    ([$($module:ident $driver:ident),+] $d:tt) => {$(
        #[test]
        fn $module() {
            flood(Model::$driver);
        }
    )+};
}

berth::with_models!(per_model! { ($) });

/// A masked ping with 125 bytes of payload.
fn ping() -> Vec<u8> {
    let mut f = vec![0x89, 0x80 | 125, 1, 2, 3, 4];
    f.extend(std::iter::repeat_n(0u8, 125));
    f
}

/// Upgrades a connection to `/ws/echo` (not reading the 101: this client reads nothing), with
/// a small receive buffer, non-blocking.
fn flooder(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    socket2::SockRef::from(&s)
        .set_recv_buffer_size(4096)
        .unwrap();
    (&s).write_all(
        b"GET /ws/echo HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

/// Sends pings on every flooder until none of them can send more for a while: the server has
/// stopped taking their bytes.
fn flood_until_stalled(clients: &[TcpStream], what: &str) {
    let burst: Vec<u8> = ping().repeat(64);
    // Where each client is in its stream of pings: a write may take part of a burst.
    let mut at = vec![0usize; clients.len()];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(500) {
        assert!(
            Instant::now() < deadline,
            "{what}: the server never stopped taking pings"
        );
        let mut sent_any = false;
        for (mut c, at) in clients.iter().zip(&mut at) {
            match c.write(&burst[*at..]) {
                Ok(n) if n > 0 => {
                    *at = (*at + n) % burst.len();
                    sent_any = true;
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("{what}: a flooder failed: {e}"),
            }
        }
        if sent_any {
            quiet_since = Instant::now();
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn flood(m: Model) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const WARM: usize = 8;
    let n = if m.caps().concurrent { 24 } else { 1 };
    if m.needs().forks {
        eprintln!("{m}: served from child processes; see the module docs");
        return;
    }
    let srv = Opts::new(m)
        .accept_threads(1)
        .timeouts(berth::drive::Timeouts {
            write: Duration::from_secs(120),
            ..Default::default()
        })
        .start();
    // Warm-up (`single` serves one connection at a time: none): pools, arenas and, under
    // `uring`, the loop's provided buffers, a fixed cost per loop.
    let warm: Vec<TcpStream> = (0..if m.caps().concurrent { WARM } else { 0 })
        .map(|_| flooder(srv.addr))
        .collect();
    flood_until_stalled(&warm, &format!("{m} warm-up"));
    let (rss, heap) = (idle::rss_bytes(), counting::live_bytes());
    let clients: Vec<TcpStream> = (0..n).map(|_| flooder(srv.addr)).collect();
    flood_until_stalled(&clients, &m.to_string());
    let per_heap = (counting::live_bytes() - heap) / n as isize;
    let per_rss = (idle::rss_bytes() - rss) / n as isize;
    println!("{m}: per flooding connection: heap {per_heap} bytes, RSS {per_rss} bytes");
    assert!(
        per_heap <= BOUND,
        "{m}: {per_heap} heap bytes per connection that floods pings and never reads"
    );
    drop(clients);
    drop(warm);
    srv.stop();
}
