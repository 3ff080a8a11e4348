//! Issue 40: a server out of file descriptors keeps serving. `berth serve` under `ulimit -n 64`
//! (a shell execs it), attacked over real sockets: HTTP/2 connections whose streams ask for a
//! file each and never read, then connections that hold descriptors by saying a few bytes and
//! no more. Files for answers are budgeted (half of the limit by default: 32 here): past it a
//! file request is answered 503 at once, and a client that finds the process at its limit is
//! accepted with the descriptor kept in reserve and answered 503, instead of waiting in the
//! backlog until it gives up (10-15 s before the fix, and the log said "Too many open files"
//! once per failed open). Each is said once in the log. Once the attackers go, everything is
//! served again.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use berth_testkit::h2::frame;
use berth_testkit::wait::wait_for;
use common::{address_in, get, Berth, BIN, LIMIT};

/// An HTTP/2 connection with one-byte windows and 128 streams that each ask for `path`.
fn greedy_h2(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, 4, 0, 0, &[0, 4, 0, 0, 0, 1]);
    let mut block = vec![0x82, 0x86, 0x00, 5];
    block.extend_from_slice(b":path");
    block.push(path.len() as u8);
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x00, 10]);
    block.extend_from_slice(b":authority");
    block.extend_from_slice(&[1, b'x']);
    for i in 0..128u32 {
        frame(&mut out, 1, 0x5, 2 * i + 1, &block);
    }
    s.write_all(&out).unwrap();
    s
}

/// The status line of a GET, or what went wrong.
fn status(addr: SocketAddr, path: &str) -> String {
    get(addr, path)
        .lines()
        .next()
        .unwrap_or("(nothing)")
        .to_string()
}

fn run(model: &str) {
    let dir = std::env::temp_dir().join(format!("berth-fds-{model}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("page.txt"), vec![b'x'; 256 * 1024]).unwrap();
    let script = format!(
        "ulimit -n 64 && exec {BIN} serve -m {model} -p 0 -A 1 --processes 1 --root {} \
         --write-timeout 60s --shutdown-timeout 1s",
        dir.display()
    );
    let mut server = Berth::spawn_command(Command::new("sh").args(["-c", &script]));
    let addr = address_in(&server.line());
    let pid = server.pid();

    // Ten connections would hold 80 files (8 each): the budget stops them at 32.
    let greedy: Vec<TcpStream> = (0..10)
        .map(|_| greedy_h2(addr, "/files/page.txt"))
        .collect();
    assert!(
        wait_for(LIMIT, || status(addr, "/files/page.txt")
            == "HTTP/1.1 503 Service Unavailable"),
        "{model}: a file request past the budget is answered 503"
    );
    assert_eq!(status(addr, "/hello/world"), "HTTP/1.1 200 OK", "{model}");

    // Connections that say a little and hold their descriptor, until the process has none.
    let mut holders = Vec::new();
    while holders.len() < 64 {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, LIMIT) else {
            break;
        };
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let _ = s.write_all(b"GET / HT");
        // A holder that was answered already (503 from the reserve) took no descriptor.
        let mut byte = [0u8; 1];
        if matches!(s.read(&mut byte), Ok(n) if n > 0) {
            break;
        }
        holders.push(s);
    }
    assert!(
        berth_testkit::procs::open_descriptors(pid) >= 60 || model == "prefork",
        "{model}: the process is at its limit ({} open)",
        berth_testkit::procs::open_descriptors(pid)
    );
    // A newcomer is answered, not left in the backlog.
    let answer = status(addr, "/hello/world");
    assert!(
        answer == "HTTP/1.1 503 Service Unavailable" || answer == "HTTP/1.1 200 OK",
        "{model}: {answer}"
    );
    drop(holders);
    drop(greedy);
    assert!(
        wait_for(LIMIT, || status(addr, "/files/page.txt")
            == "HTTP/1.1 200 OK"),
        "{model}: files are served again once the attackers are gone"
    );
    server.signal("TERM");
    let (_, _, stderr) = server.finish(LIMIT);
    assert_eq!(
        stderr.matches("out of file descriptors for files").count(),
        1,
        "{model}: said once: {stderr}"
    );
    assert!(
        !stderr.contains("opening a file failed"),
        "{model}: no failed open logged per request: {stderr}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn evloop_serves_on_at_the_descriptor_limit() {
    run("evloop");
}

#[test]
fn actor_serves_on_at_the_descriptor_limit() {
    run("actor");
}

#[test]
fn prefork_serves_on_at_the_descriptor_limit() {
    run("prefork");
}
