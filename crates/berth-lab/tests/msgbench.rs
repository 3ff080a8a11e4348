//! `berth_lab::msgbench` against real sockets on 127.0.0.1 and a UNIX socket: an in-test echo
//! server speaking berth's framing on std threads (which can also refuse, corrupt, shorten or
//! withhold its echoes), the Python asyncio peer, and the pyzmq ROUTER peer (a Python or a
//! pyzmq that is missing fails its test; `scripts/test` installs pyzmq into target/py-venv).
//!
//! Every server listens on port 0 and the port is read back; every wait has a deadline.

use std::collections::BTreeSet;
use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use berth_lab::msgbench::{
    self, Endpoint, Limit, MsgBenchConfig, MsgErrors, MsgReport, Names, Protocol,
};
use berth_testkit::msg::{Behaviour, EchoServer};

fn config(endpoint: &str, protocol: Protocol, size: u64, count: u64) -> MsgBenchConfig {
    let mut c = MsgBenchConfig::new(Endpoint::parse(endpoint).unwrap(), protocol, size);
    c.limit = Limit::Messages(count);
    c.connections = 2;
    c.threads = 1;
    c.timeout = Duration::from_secs(20);
    c
}

/// A config for `count` messages of `size` bytes on a single connection, so that every
/// failure is that connection's, against an in-test server that behaves as `b` says.
fn one_connection(b: Behaviour, size: u64, count: u64) -> MsgBenchConfig {
    // The server's threads outlive the handle, which only the tests that count echoes need.
    let server = EchoServer::tcp(b);
    let mut c = config(&server.endpoint, Protocol::Berth, size, count);
    c.connections = 1;
    c
}

fn run(c: &MsgBenchConfig) -> MsgReport {
    msgbench::run(c).expect("the load runs")
}

/// Asserts that nothing was echoed and that `n` failures of the kind `kind` picks were counted.
fn assert_failed(r: &MsgReport, kind: impl Fn(&MsgErrors) -> u64, n: u64) {
    assert_eq!(r.tally.messages, 0, "{}", r.to_table());
    assert_eq!(kind(&r.tally.errors), n, "{:?}", r.tally.reasons);
}

fn assert_clean(r: &MsgReport, count: u64) {
    assert_eq!(r.tally.errors.total(), 0, "errors: {:?}", r.tally.reasons);
    assert_eq!(r.tally.messages, count, "{}", r.to_table());
    assert_eq!(r.tally.payload_bytes, count * r.shape.size);
    assert_eq!(r.tally.latency.len(), count);
}

#[test]
fn count_is_exact_across_connections_threads_and_windows() {
    let server = EchoServer::tcp(Behaviour::default());
    let mut c = config(&server.endpoint, Protocol::Berth, 64, 1000);
    c.connections = 4;
    c.threads = 2;
    c.window = 8;
    let r = run(&c);
    assert_clean(&r, 1000);
    assert_eq!(
        server.echoed.load(Relaxed),
        1000,
        "the server echoed exactly N"
    );
    assert_eq!((r.tally.connects, r.tally.handshakes), (4, 4));
    let want: BTreeSet<String> = (0..4).map(|i| format!("bench-{i}")).collect();
    assert_eq!(server.names(), want, "names count across threads");
    let j = r.to_json();
    assert_eq!(j["messages"], 1000);
    assert_eq!(j["window"], 8);
}

#[test]
fn anonymous_clients_send_empty_keywords() {
    let server = EchoServer::tcp(Behaviour::default());
    let mut c = config(&server.endpoint, Protocol::Berth, 0, 10);
    c.names = Names::Anonymous;
    let r = run(&c);
    // Empty messages are messages too.
    assert_clean(&r, 10);
    assert_eq!(server.names(), BTreeSet::from([String::new()]));
}

#[test]
fn a_corrupted_byte_is_a_protocol_error_saying_where() {
    let corrupt = Behaviour {
        corrupt_at: Some(100),
        ..Behaviour::default()
    };
    let r = run(&one_connection(corrupt, 1000, 5));
    assert_failed(&r, |e| e.protocol, 5);
    assert_eq!(r.tally.errors.total(), 5);
    let key = "protocol: the echo differs from what was sent at byte 100 of a 1000-byte message";
    assert_eq!(r.tally.reasons.get(key), Some(&5), "{:?}", r.tally.reasons);
    assert!(r.to_table().contains(key));
}

#[test]
fn a_server_that_breaks_at_8760000_bytes_shows_up_as_errors() {
    // Seed 003's asyncio could not echo 8,760,000 bytes; a server that gets the last byte
    // wrong must not pass for a fast one.
    let server = EchoServer::tcp(Behaviour {
        corrupt_at: Some(8_759_999),
        ..Behaviour::default()
    });
    let c = config(&server.endpoint, Protocol::Berth, 8_760_000, 2);
    let r = run(&c);
    assert_failed(&r, |e| e.protocol, 2);
    assert!(
        r.tally
            .reasons
            .keys()
            .any(|k| k.contains("at byte 8759999 of a 8760000-byte message")),
        "{:?}",
        r.tally.reasons
    );
}

#[test]
fn a_short_echo_is_a_protocol_error() {
    let shorten = Behaviour {
        shorten: true,
        ..Behaviour::default()
    };
    let r = run(&one_connection(shorten, 1000, 3));
    assert_failed(&r, |e| e.protocol, 3);
    assert_eq!(
        r.tally
            .reasons
            .get("protocol: an echo of 999 bytes for a message of 1000"),
        Some(&3),
        "{:?}",
        r.tally.reasons
    );
}

#[test]
fn a_refusal_is_a_handshake_error_with_its_text() {
    let text = "refused name-taken name \"bench-0\" is held by a live connection";
    let refuse = Behaviour {
        refuse: Some(text.to_owned()),
        ..Behaviour::default()
    };
    let r = run(&one_connection(refuse, 64, 3));
    assert_failed(&r, |e| e.handshake, 3);
    assert_eq!(r.tally.errors.total(), 3);
    assert_eq!(r.tally.reasons.get(&format!("handshake: {text}")), Some(&3));
    assert_eq!(r.to_json()["errors"]["handshake"], 3);
}

#[test]
fn nine_megabyte_messages_round_trip() {
    let server = EchoServer::tcp(Behaviour::default());
    let mut c = config(&server.endpoint, Protocol::Berth, 9_000_000, 6);
    c.window = 2;
    let r = run(&c);
    assert_clean(&r, 6);
    assert_eq!(server.echoed.load(Relaxed), 6);
}

#[test]
fn unix_endpoint() {
    let path = std::env::temp_dir().join(format!("berth-msgbench-{}.sock", std::process::id()));
    let server = EchoServer::unix(Behaviour::default(), &path);
    let r = run(&config(&server.endpoint, Protocol::Berth, 1024, 200));
    let _ = std::fs::remove_file(&path);
    assert_clean(&r, 200);
    assert_eq!(r.shape.endpoint, server.endpoint);
}

#[test]
fn a_silent_server_is_a_timeout() {
    let silent = Behaviour {
        silent: true,
        ..Behaviour::default()
    };
    let mut c = one_connection(silent, 64, 1);
    c.timeout = Duration::from_millis(200);
    let r = run(&c);
    assert_failed(&r, |e| e.timeout, 1);
    assert_eq!(r.tally.errors.total(), 1);
    assert!(r.elapsed >= Duration::from_millis(200));
}

#[test]
fn a_closed_port_is_a_connect_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = run(&config(
        &format!("tcp://127.0.0.1:{port}"),
        Protocol::Berth,
        64,
        3,
    ));
    assert_failed(&r, |e| e.connect, 3);
}

#[test]
fn a_duration_run_stops_on_time() {
    let server = EchoServer::tcp(Behaviour::default());
    let mut c = config(&server.endpoint, Protocol::Berth, 64, 1);
    c.limit = Limit::Duration(Duration::from_millis(300));
    let r = run(&c);
    assert!(r.tally.messages > 0);
    assert_eq!(r.tally.errors.total(), 0, "{:?}", r.tally.reasons);
    assert!(
        r.elapsed >= Duration::from_millis(300) && r.elapsed < Duration::from_secs(5),
        "{:?}",
        r.elapsed
    );
}

#[test]
fn a_zmq_client_against_a_server_that_is_not_zmtp_fails_its_handshake() {
    // An HTTP server's error page is not a ZMTP greeting: the bench must say so as a handshake
    // error (not hang, not panic), however the bytes are split.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("tcp://{}", listener.local_addr().unwrap());
    thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            thread::spawn(move || {
                let page =
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                for b in page {
                    let _ = s.write_all(&[*b]);
                }
                let _ = io::copy(&mut s, &mut io::sink());
            });
        }
    });
    let mut c = config(&endpoint, Protocol::Zmq, 64, 2);
    c.connections = 1;
    let r = run(&c);
    assert_failed(&r, |e| e.handshake, 2);
    assert!(
        r.tally
            .reasons
            .keys()
            .all(|k| k.contains("not a ZMTP greeting")),
        "{:?}",
        r.tally.reasons
    );
}

/// A Python peer, killed and reaped when dropped.
struct Peer {
    child: Child,
    port: u16,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../peers")
}

/// Starts `peers/SCRIPT --port 0` with `python` and reads the port from its `... listening on
/// HOST:PORT`.
fn start_peer(python: &Path, script: &str) -> Peer {
    let mut child = Command::new(python)
        .arg(peers_dir().join(script))
        .args(["--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", python.display()));
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let mut peer = Peer { child, port: 0 };
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the peer prints its startup line");
    peer.port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in the startup line {line:?}"));
    peer
}

/// The shapes run against each peer: small messages with a window, a message just over a short
/// ZMTP frame, and seed 003's 8,760,000 bytes.
fn run_shapes(protocol: Protocol, port: u16) {
    let endpoint = format!("tcp://127.0.0.1:{port}");
    for (size, count, connections) in [(64, 2000, 8), (300, 100, 2), (8_760_000, 3, 2)] {
        let mut c = config(&endpoint, protocol, size, count);
        c.connections = connections;
        c.threads = 2;
        let r = run(&c);
        assert_clean(&r, count);
    }
}

#[test]
fn python_asyncio_peer() {
    let python = berth_testkit::require_python_module("asyncio");
    let peer = start_peer(&python, "msg_asyncio_echo.py");
    run_shapes(Protocol::Berth, peer.port);
}

/// pyzmq is installed into `target/py-venv` by `scripts/test` (and so by `.ci/run`).
#[test]
fn pyzmq_router_peer() {
    let python = berth_testkit::require_python_module("zmq");
    let peer = start_peer(&python, "zmq_router_echo.py");
    run_shapes(Protocol::Zmq, peer.port);
}
