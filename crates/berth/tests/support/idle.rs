//! Measures what idle keep-alive connections cost a server running in this process, two ways:
//! the process's resident set (what the kernel charges: slots, pages touched) and the bytes
//! its heap holds, counted by `support/counting.rs`, which the test binary installs as its
//! global allocator. A binary using this should hold one test, so nothing else allocates meanwhile.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::counting;
use super::server::{self, get_request, ModelServer};

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> isize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: isize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Opens `n` connections that each make one request, read the answer and stay open.
fn open(addr: SocketAddr, n: usize, into: &mut Vec<TcpStream>) {
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(get_request("/").as_bytes()).unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        into.push(s);
    }
}

/// What one idle connection costs, in bytes.
#[derive(Debug)]
pub struct Cost {
    pub rss: isize,
    pub heap: isize,
}

/// Opens `warm` connections first (allocator arenas, the slab's first pages, pooled buffers),
/// then `n` more, each idle after one request; returns what the `n` added per connection.
pub fn cost_of_idle(srv: &ModelServer, warm: usize, n: usize) -> Cost {
    let mut warmed = Vec::new();
    open(srv.addr, warm, &mut warmed);
    // Room for the clients' sockets up front: their list is not the server's memory.
    let mut idle = Vec::with_capacity(n);
    let (rss, heap) = (rss_bytes(), counting::live_bytes());
    open(srv.addr, n, &mut idle);
    let open_now = || srv.snapshot().connections_open == (warm + n) as u64;
    assert!(server::wait_for(Duration::from_secs(5), open_now));
    let cost = Cost {
        rss: (rss_bytes() - rss) / n as isize,
        heap: (counting::live_bytes() - heap) / n as isize,
    };
    println!("per idle connection: {cost:?}");
    cost
}
