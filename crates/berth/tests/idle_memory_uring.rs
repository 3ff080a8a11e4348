//! Memory held by idle keep-alive connections in the `uring` driver (issue 19: no more than
//! `evloop`'s, whose bound `idle_memory.rs` checks the same way): its receives go to a ring of
//! provided buffers shared by the loop, so an idle connection holds no buffer of its own. One
//! test in its own binary, so no other test allocates meanwhile.

#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::time::Duration;

use berth::drive::Model;
use server::{get_request, Opts};

/// Resident set size of this process, in bytes.
fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn an_idle_uring_connection_holds_no_buffers() {
    // The bound of `idle_memory.rs`: at most 1 KiB of server memory per idle connection.
    let srv = Opts::new(Model::Uring).workers(1).capacity(4096).start();
    let addr = srv.addr;
    let open = |n: usize, into: &mut Vec<std::net::TcpStream>| {
        for _ in 0..n {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(get_request("/").as_bytes()).unwrap();
            let mut buf = [0u8; 512];
            let n = s.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            into.push(s);
        }
    };
    // Warm up allocator arenas, the slab's first pages and the provided buffers: the kernel
    // takes them in ring order, so the loop's 256 are all touched once 256 requests have come
    // (a fixed 4 MiB per loop, not a cost per connection).
    let mut warm = Vec::new();
    open(300, &mut warm);
    let before = rss_bytes();
    let mut idle = Vec::new();
    open(1000, &mut idle);
    assert!(server::wait_for(Duration::from_secs(5), || srv
        .snapshot()
        .connections_open
        == 1300));
    let per_conn = rss_bytes().saturating_sub(before) / 1000;
    println!("{per_conn} bytes per idle connection");
    assert!(
        per_conn <= 1024,
        "{per_conn} bytes of server memory per idle connection"
    );
}
