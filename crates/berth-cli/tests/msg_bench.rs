//! The built `berth msg bench`: its report (table and JSON) against an in-test echo server of
//! berth's framing on 127.0.0.1, usage errors (exit 2 with usage), and exit 1 with the cause
//! when nothing was echoed. Every run is bounded by a message count, and waited for with a
//! deadline.

mod common;

use std::process::ExitStatus;
use std::time::Duration;

use berth_testkit::msg::{Behaviour, EchoServer};
use common::{free_port, run_within};

/// Generous bound on one run; only a guard against hangs.
const LIMIT: Duration = Duration::from_secs(30);

/// Runs `berth ARGS` to its end (killed after [`LIMIT`]); returns its exit status, stdout and
/// stderr.
fn berth(args: &[&str]) -> (ExitStatus, String, String) {
    run_within(args, LIMIT)
}

/// An echo server of berth framing (keyword, OK, then every frame back), a thread per client:
/// its endpoint.
fn echo_server() -> String {
    EchoServer::tcp(Behaviour::default()).endpoint
}

#[test]
fn json_report_of_an_exact_count() {
    let endpoint = echo_server();
    let (status, out, err) = berth(&[
        "msg", "bench", &endpoint, "-n", "300", "-c", "3", "-t", "2", "-s", "1k", "--json",
    ]);
    assert!(status.success(), "stderr: {err}");
    let j: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(j["messages"], 300);
    assert_eq!(j["size"], 1024);
    assert_eq!(j["window"], 16, "the default window for small messages");
    assert_eq!(j["payload_bytes"], 300 * 1024);
    assert_eq!(j["protocol"], "berth");
    assert_eq!(j["connections"], 3);
    for kind in [
        "connect",
        "handshake",
        "read",
        "write",
        "timeout",
        "protocol",
    ] {
        assert_eq!(j["errors"][kind], 0, "{kind}");
    }
    assert!(j["latency_us"]["p99"].as_u64().unwrap() >= j["latency_us"]["p50"].as_u64().unwrap());
}

#[test]
fn table_report_with_a_window_and_a_big_size() {
    let endpoint = echo_server();
    let (status, table, err) = berth(&[
        "msg",
        "bench",
        &endpoint,
        "--count",
        "4",
        "--size",
        "1m",
        "--window",
        "2",
        "--anonymous",
    ]);
    assert!(status.success(), "stderr: {err}");
    assert!(table.contains("1048576-byte messages"), "{table}");
    assert!(table.contains("window 2"), "{table}");
    assert!(table.contains("messages     4 echoed"), "{table}");
    assert!(table.contains("errors       0 "), "{table}");
}

#[test]
fn usage_errors_exit_2_with_usage() {
    for (args, says) in [
        (&["-s", "12q"][..], "is not a size"),
        (&["-c", "0"][..], "connections"),
        (&["-d", "0"][..], "more than zero"),
        (&["-n", "5", "-d", "1s"][..], "cannot be used with"),
        (
            &["--anonymous", "--name-prefix", "x"][..],
            "cannot be used with",
        ),
        (&["--name-prefix", "a\nb"][..], "not valid names"),
    ] {
        let mut argv = vec!["msg", "bench", "tcp://127.0.0.1:9"];
        argv.extend_from_slice(args);
        let (status, _, err) = berth(&argv);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains("Usage:"), "{args:?}: {err}");
    }
    let (status, _, err) = berth(&["msg", "bench", "127.0.0.1:9100", "-n", "1"]);
    assert_eq!(status.code(), Some(2));
    // Said by the parser every command shares (berth::net::Endpoint).
    assert!(err.contains("bad endpoint \"127.0.0.1:9100\""), "{err}");
    assert!(err.contains("expected tcp://HOST:PORT"), "{err}");
}

#[test]
fn nothing_echoed_is_exit_1_with_the_cause() {
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let (status, out, err) = berth(&["msg", "bench", &endpoint, "-n", "2"]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("no message to"), "{err}");
    assert!(err.contains("connect: "), "{err}");
    // The report is still printed: the errors are the measurement.
    assert!(out.contains("errors       2 (connect 2"));
}
