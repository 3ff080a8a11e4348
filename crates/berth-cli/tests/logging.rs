//! Logging of the `berth` binary: quiet per request by default, one line per response with
//! `--access-log`, debug lines with `-v`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs berth with `flags`, makes one request and one malformed one, stops it, returns stderr.
fn log_of(flags: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "-p", "0", "-A", "1"])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .unwrap()
        .to_owned();
    for request in [
        &b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    err
}

#[test]
fn access_log_has_a_line_per_response() {
    let log = log_of(&["--access-log"]);
    assert!(log.contains("GET /hello/world -> 200"), "{log}");
    // The malformed request never reached the app: logged without a request line.
    assert!(log.contains("- -> 400"), "{log}");
}

#[test]
fn nothing_per_request_by_default() {
    let log = log_of(&[]);
    assert!(!log.contains("/hello/world"), "{log}");
    assert!(!log.contains("-> 200"), "{log}");
}
