//! Graceful shutdown of the `berth` binary, in every model: SIGTERM while `/test/slow` requests
//! are in flight answers every one of them 200, refuses new connections, closes idle keep-alive
//! connections, and exits 0; a second signal stops at once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Berth(Child);

impl Drop for Berth {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(args: &[&str]) -> (Berth, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("serve")
        .args(["-p", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start berth");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("startup line");
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (Berth(child), addr)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads one response head and returns its status line.
fn status_line(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&buf)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("berth did not exit within {within:?}");
}

fn drains(model: &str, in_flight: usize) {
    let (mut berth, addr) = start(&[
        "--model",
        model,
        "-D",
        "700",
        "-w",
        "20",
        "--max-threads",
        "100",
    ]);
    // An idle keep-alive connection that must be closed by the drain.
    let mut idle = connect(addr);
    // `/test/fast` has an empty body, so reading the head reads the whole response.
    idle.write_all(b"GET /test/fast HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(status_line(&mut idle), "HTTP/1.1 200 OK");
    let mut slow: Vec<TcpStream> = (0..in_flight)
        .map(|_| {
            let mut s = connect(addr);
            s.write_all(b"GET /test/slow HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    signal(&berth.0, "-TERM");
    std::thread::sleep(Duration::from_millis(150));
    assert!(
        TcpStream::connect(addr).is_err(),
        "{model}: a new connection was accepted while draining"
    );
    for (i, s) in slow.iter_mut().enumerate() {
        assert_eq!(
            status_line(s),
            "HTTP/1.1 200 OK",
            "{model}: slow request {i}"
        );
    }
    let mut rest = Vec::new();
    let _ = idle.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "{model}: the idle connection got bytes instead of a close"
    );
    assert_eq!(
        wait_exit(&mut berth.0, Duration::from_secs(10)),
        Some(0),
        "{model}"
    );
}

#[test]
fn evloop_drains_on_sigterm() {
    drains("evloop", 20);
}

#[test]
fn threaded_drains_on_sigterm() {
    drains("threaded", 20);
}

#[test]
fn forked_drains_on_sigterm() {
    drains("forked", 20);
}

#[test]
fn prefork_drains_on_sigterm() {
    drains("prefork", 20);
}

#[test]
fn actor_drains_on_sigterm() {
    drains("actor", 20);
}

#[test]
fn single_finishes_its_request_on_sigterm() {
    let (mut berth, addr) = start(&["--model", "single", "-D", "500"]);
    let mut s = connect(addr);
    s.write_all(b"GET /test/slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    signal(&berth.0, "-TERM");
    assert_eq!(status_line(&mut s), "HTTP/1.1 200 OK");
    assert_eq!(wait_exit(&mut berth.0, Duration::from_secs(10)), Some(0));
}

#[test]
fn a_second_signal_stops_at_once() {
    let (mut berth, addr) = start(&["-D", "5000", "--shutdown-timeout", "30"]);
    let mut s = connect(addr);
    s.write_all(b"GET /test/slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    signal(&berth.0, "-TERM");
    std::thread::sleep(Duration::from_millis(200));
    signal(&berth.0, "-INT");
    let started = Instant::now();
    let code = wait_exit(&mut berth.0, Duration::from_secs(4));
    assert_eq!(code, Some(1));
    assert!(started.elapsed() < Duration::from_secs(3));
}
