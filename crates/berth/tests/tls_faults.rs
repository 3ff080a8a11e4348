//! TLS from clients that are not rustls, and TLS gone wrong, in every model (issue 16):
//! `openssl s_client` gets its answer over TLS 1.3 and 1.2; a client that offers only TLS 1.1
//! is refused with an alert; after a good handshake, plaintext where records belong, a record
//! that fails its integrity check, and a record cut short (the client stalling, or closing)
//! each end that connection — with an alert or a close, never an answer, never a hang — while
//! the server goes on serving; a handshake that stops after the ClientHello is dropped at the
//! header timeout, a record cut short at the idle timeout (no request byte has decrypted yet).

#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth::drive::{Model, Timeouts};
use server::{Client, ModelServer, Opts, Stream};

/// How long a connection that went wrong may stay open: the header timeout (1 s) and slack.
const CLOSED_WITHIN: Duration = Duration::from_secs(5);

/// An HTTPS server of model `m` with 1 s header and idle timeouts. (Bytes of a record not yet
/// whole are no request bytes yet: until a record decrypts, the connection is idle and the
/// idle timeout applies, as to a plain connection that has sent nothing.)
fn https(m: Model) -> ModelServer {
    Opts::new(m)
        .tls(true)
        .timeouts(Timeouts {
            header: Duration::from_secs(1),
            idle: Duration::from_secs(1),
            ..Timeouts::default()
        })
        .start()
}

/// Runs `case` for every model at once, each on a thread and a server of its own.
fn every_model(case: fn(Model)) {
    let threads: Vec<_> = Model::ALL
        .into_iter()
        .map(|m| std::thread::spawn(move || case(m)))
        .collect();
    for t in threads {
        t.join().expect("a model's case failed");
    }
}

/// A TLS connection to `addr` with the handshake done.
fn handshaken(addr: SocketAddr) -> Stream {
    let mut s = server::connect(addr);
    match &mut s {
        Stream::Tls(t) => t.complete_handshake().expect("handshake"),
        Stream::Plain(_) => panic!("{addr} is not an HTTPS server"),
    }
    s
}

/// Whether the server ends the connection within [`CLOSED_WITHIN`] (EOF, reset or an alert)
/// without answering anything: false if it stays open, panics if an HTTP answer comes.
fn ends_without_answer(s: &mut Stream, what: &str) -> bool {
    s.set_read_timeout(Some(CLOSED_WITHIN)).unwrap();
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!("{what}: answered {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            false
        }
        // A reset, or a TLS alert from the server: the connection is over.
        Err(_) => true,
    }
}

/// The server still answers a good client.
fn still_serves(srv: &ModelServer, what: &str) {
    let r = Client::connect(srv.addr).get("/hello/world");
    assert_eq!(r.status, 200, "{what}: not serving any more");
}

/// `openssl s_client ARGS` with `stdin` written to it; its stdout and stderr together.
fn s_client(addr: SocketAddr, args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(addr.to_string())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    // s_client exits when the server closes (the request asks it to) or on a failed handshake.
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "openssl s_client hung");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn openssl_s_client_gets_its_answer_over_tls_1_3_and_1_2() {
    berth_testkit::require("openssl");
    every_model(|m| {
        let srv = https(m);
        let ca = server::test_tls().certs.ca.to_str().unwrap();
        let request = b"GET /hello/world HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        for version in ["-tls1_3", "-tls1_2"] {
            let out = s_client(
                srv.addr,
                &[version, "-CAfile", ca, "-verify_return_error", "-quiet"],
                request,
            );
            assert!(
                out.contains("HTTP/1.1 200 OK") && out.contains("Hello, World!"),
                "{m} {version}: {out}"
            );
        }
    });
}

#[test]
fn a_client_offering_only_tls_1_1_is_refused_with_an_alert() {
    berth_testkit::require("openssl");
    every_model(|m| {
        let srv = https(m);
        // SECLEVEL=0, or OpenSSL 3 would not even offer TLS 1.1.
        let out = s_client(srv.addr, &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"], b"");
        assert!(
            out.contains("alert handshake failure") || out.contains("alert protocol version"),
            "{m}: {out}"
        );
        still_serves(&srv, &format!("{m} after a TLS 1.1 client"));
    });
}

#[test]
fn plaintext_where_records_belong_ends_the_connection() {
    every_model(|m| {
        let srv = https(m);
        let mut s = handshaken(srv.addr);
        s.socket()
            .write_all(b"GET /hello/world HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        assert!(
            ends_without_answer(&mut s, &format!("{m}: plaintext")),
            "{m}: plaintext after the handshake kept the connection open"
        );
        still_serves(&srv, &format!("{m} after plaintext"));
    });
}

#[test]
fn a_record_that_fails_its_integrity_check_ends_the_connection() {
    every_model(|m| {
        let srv = https(m);
        let mut s = handshaken(srv.addr);
        // Application data, 40 bytes that no key encrypted: decryption must fail.
        let mut record = vec![0x17, 0x03, 0x03, 0x00, 40];
        record.extend((0..40u8).map(|i| i.wrapping_mul(37)));
        s.socket().write_all(&record).unwrap();
        assert!(
            ends_without_answer(&mut s, &format!("{m}: bad record")),
            "{m}: a record with a bad MAC kept the connection open"
        );
        still_serves(&srv, &format!("{m} after a bad record"));
    });
}

#[test]
fn a_record_cut_short_is_dropped_at_the_timeout_or_when_the_client_leaves() {
    every_model(|m| {
        let srv = https(m);
        // A header promising 100 bytes, 10 of them, then nothing: the timeout.
        let mut stalled = handshaken(srv.addr);
        let started = Instant::now();
        stalled
            .socket()
            .write_all(&[0x17, 0x03, 0x03, 0x00, 100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
            .unwrap();
        assert!(
            ends_without_answer(&mut stalled, &format!("{m}: stalled record")),
            "{m}: a stalled record kept the connection open"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(800),
            "{m}: dropped before the timeout"
        );
        // The same, then the client closes its side: closed for that, nothing answered. On a
        // server whose timeouts are an hour, so that only the client's leaving can end it
        // within CLOSED_WITHIN.
        let patient = Opts::new(m)
            .tls(true)
            .timeouts(Timeouts {
                header: Duration::from_secs(3600),
                idle: Duration::from_secs(3600),
                ..Timeouts::default()
            })
            .start();
        let mut leaving = handshaken(patient.addr);
        leaving
            .socket()
            .write_all(&[0x17, 0x03, 0x03, 0x00, 100, 1, 2, 3])
            .unwrap();
        leaving
            .socket()
            .shutdown(std::net::Shutdown::Write)
            .unwrap();
        assert!(
            ends_without_answer(&mut leaving, &format!("{m}: truncated then closed")),
            "{m}: a truncated record then a FIN kept the connection open"
        );
        still_serves(&srv, &format!("{m} after a stalled record"));
        still_serves(&patient, &format!("{m} after a truncated record"));
    });
}

#[test]
fn a_handshake_that_stops_after_the_client_hello_is_dropped() {
    every_model(|m| {
        let srv = https(m);
        let mut s = server::connect(srv.addr);
        // The ClientHello goes out (flush pushes the records the client holds); the server
        // answers with its flight and waits for the client's Finished, which never comes.
        s.flush().unwrap();
        let raw: &TcpStream = s.socket();
        raw.set_read_timeout(Some(CLOSED_WITHIN)).unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 16 * 1024];
        let closed = loop {
            match (&*raw).read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => {} // the server's flight
                Err(e) if server::is_reset(&e) => break true,
                Err(_) => break false,
            }
        };
        assert!(closed, "{m}: a handshake stopped halfway was kept");
        assert!(
            started.elapsed() >= Duration::from_millis(800),
            "{m}: dropped before the header timeout"
        );
        still_serves(&srv, &format!("{m} after a half handshake"));
    });
}
