//! `berth serve --model uring` where io_uring cannot be set up (issue 19): it exits 1 with the
//! cause, and leaves nothing listening. The failure is forced with `BERTH_URING_UNAVAILABLE`
//! (set in the child only), as a kernel with `io_uring_disabled=2` or a seccomp filter would
//! make `io_uring_setup` fail.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{free_port, Berth, LIMIT};

#[test]
fn uring_refuses_with_the_cause_where_io_uring_is_unavailable() {
    let port = free_port();
    let mut b = Berth::spawn_command(
        Command::new(common::BIN)
            .args(["serve", "--model", "uring", "-p", &port.to_string()])
            .env(
                "BERTH_URING_UNAVAILABLE",
                "io_uring_setup: Operation not permitted",
            ),
    );
    let status = b
        .wait_exit(LIMIT)
        .expect("berth --model uring kept running without io_uring");
    let (_, _, stderr) = b.finish(Duration::from_secs(5));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("io_uring is unavailable")
            && stderr.contains("io_uring_setup: Operation not permitted"),
        "the cause is not said: {stderr}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "something listens on the port after the refusal"
    );
}

#[test]
fn uring_serves_where_io_uring_is_available() {
    let mut b = Berth::spawn(&["serve", "--model", "uring", "-p", "0"]);
    let line = b.line();
    assert!(line.contains("uring"), "{line}");
    let addr = common::address_in(&line);
    let response = common::get(addr, "/hello/world");
    assert!(
        response.starts_with("HTTP/1.1 200 OK\r\n") && response.ends_with("Hello, World!"),
        "{response}"
    );
}
