//! HTTP/3 over real QUIC answered by quic-go's `http3` client (issue 42's "Clients"): a second
//! independent QUIC and HTTP/3 stack beside aioquic's (`tests/h3.rs`), the Go program
//! `tests/h3/quicgo/` (`go.mod` pins quic-go; built once per run with `go build` into cargo's
//! target tmpdir, the module fetched from the Go module proxy the first time), which takes
//! `tests/h3/client.py`'s requests and gives its responses. The cases: GET, HEAD, `POST
//! /reverse`, a 50 MB file checked by sha256 with a range of it, and 100 concurrent requests
//! on one connection.
//!
//! Go must be installed (`.ci/run` checks; the machine has it): without it these tests fail,
//! naming it.

mod common;
#[path = "h3/support.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{json, Value};
use support::{answered, brief, header, serve, sha256_hex};

/// The quic-go client, built once for this test binary.
fn client() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        berth_testkit::tools::require("go");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3/quicgo");
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("h3-quicgo");
        let out = Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg(".")
            .current_dir(&src)
            .output()
            .expect("run go build");
        assert!(
            out.status.success(),
            "go build of tests/h3/quicgo failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
}

/// `requests` over one quic-go connection to `port`.
fn quicgo(port: u16, ca: &Path, requests: Value) -> Vec<Value> {
    support::run_client(
        Command::new(client()).args(["127.0.0.1", &port.to_string(), ca.to_str().unwrap()]),
        &requests,
    )
}

#[test]
fn quicgo_get_head_and_post_reverse_are_answered() {
    let s = serve("qg-basic", &[]);
    let r = quicgo(
        s.port,
        &s.certs.ca,
        json!([
            {"path": "/hello/world"},
            {"method": "HEAD", "path": "/hello/world"},
            {"method": "POST", "path": "/reverse", "body": "{\"a\": \"abc\", \"b\": [1, 2]}",
             "headers": [["content-type", "application/json"]]},
            {"path": "/files/small.txt"},
            {"path": "/no/such/thing"},
        ]),
    );
    answered(&r[0], 200, "Hello, World!");
    assert_eq!(r[0]["proto"], "HTTP/3.0", "{}", brief(&r[0]));
    answered(&r[1], 200, "");
    assert_eq!(
        header(&r[1], "content-length"),
        Some("13"),
        "{}",
        brief(&r[1])
    );
    answered(&r[2], 200, "{\"data\":[\"cba\",[2,1]]}");
    answered(&r[3], 200, "0123456789abcdefghijklmnopqrstuvwxyz");
    assert_eq!(r[4]["status"], 404, "{}", brief(&r[4]));
}

/// A whole file of 50 MB, checked by sha256, and a range of it on the same connection. The
/// whole file stalled partway two runs in three (the server went silent 4-31 MB in and
/// quic-go gave up on "no recent network activity"): the loop's QUIC timers spun with a clock
/// that stood still when quinn-proto's pacer set its timer to that very time (see
/// `Endpoint::expire` in berth's `drive/quic/endpoint.rs`).
#[test]
fn quicgo_gets_a_50_mb_file_and_a_range() {
    let s = serve("qg-big", &[]);
    let data = berth_testkit::bytes::pattern(3, 50_000_000);
    std::fs::write(s.root.join("big.bin"), &data).unwrap();
    let r = quicgo(
        s.port,
        &s.certs.ca,
        json!([
            {"path": "/files/big.bin"},
            {"path": "/files/big.bin", "headers": [["range", "bytes=1000000-1000015"]]},
        ]),
    );
    assert_eq!(r[0]["status"], 200, "{}", brief(&r[0]));
    assert_eq!(r[0]["length"], 50_000_000, "{}", brief(&r[0]));
    assert_eq!(r[0]["sha256"], sha256_hex(&data).as_str());
    support::range_answered(&r[1], &data);
}

#[test]
fn quicgo_sends_a_hundred_concurrent_requests_on_one_connection() {
    let s = serve("qg-many", &[]);
    let r = quicgo(s.port, &s.certs.ca, support::a_hundred_requests());
    support::a_hundred_answered(&r);
    // One connection carried them: quic-go's and the one asking for /stats.
    let stats = s.stats();
    assert_eq!(
        support::stat(&stats, "berth_connections_total"),
        2,
        "{stats}"
    );
    assert_eq!(
        support::stat(&stats, "berth_requests_total"),
        101,
        "{stats}"
    );
}
