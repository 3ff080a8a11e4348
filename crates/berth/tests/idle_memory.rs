//! Memory held by idle keep-alive connections in the `evloop` driver, measured as this
//! process's RSS. One test in its own binary, so no other test allocates meanwhile.

#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use berth::app::{Demo, DemoConfig};
use berth::drive::evloop;
use berth::net::{bind_tcp, ListenConfig};
use berth::stats::Stats;
use server::get_request;

fn start(config: evloop::Config) -> (berth::drive::Server, std::net::SocketAddr, Arc<Stats>) {
    let listeners = bind_tcp("127.0.0.1:0".parse().unwrap(), 1, ListenConfig::default()).unwrap();
    let addr = listeners[0].local_addr().unwrap();
    let stats = Arc::new(Stats::new(1));
    let demo = Demo::new(DemoConfig::default(), stats.clone());
    let server = evloop::spawn(listeners, demo, config, stats.clone()).unwrap();
    (server, addr, stats)
}

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
fn an_idle_keep_alive_connection_holds_no_buffers() {
    // Counts, not speed: 1,000 connections that made one request and went idle may add at most
    // 1 KiB of server memory each (nginx takes about 530 bytes; a pooled 16 KiB read buffer per
    // connection would show as 16 MiB here).
    let config = evloop::Config {
        capacity: 4096,
        ..evloop::Config::default()
    };
    let (_server, addr, stats) = start(config);
    let mut warm: Vec<std::net::TcpStream> = Vec::new();
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
    // Warm up allocator arenas and the slab's first pages.
    open(200, &mut warm);
    let before = rss_bytes();
    let mut idle = Vec::new();
    open(1000, &mut idle);
    assert!(server::wait_for(Duration::from_secs(5), || stats
        .snapshot()
        .connections_open
        == 1200));
    let per_conn = rss_bytes().saturating_sub(before) / 1000;
    println!("{per_conn} bytes per idle connection");
    assert!(
        per_conn <= 1024,
        "{per_conn} bytes of server memory per idle connection"
    );
}
