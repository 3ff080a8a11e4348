//! `berth bench --h2` (issue 32) against a real `berth serve` on 127.0.0.1: h2c with prior
//! knowledge and HTTP/2 over TLS (ALPN h2), every answer counted and none lost; request
//! bodies larger than the server's windows; a server that allows fewer streams than asked; a
//! server that winds connections down with GOAWAY NO_ERROR; servers that do not speak HTTP/2
//! measured as failures, not as answers; and the usage errors. Counts, never speed.

mod common;

use std::net::SocketAddr;

use berth_testkit::certs::Certs;
use common::{address_in, run, run_within, Berth, LIMIT};
use serde_json::Value;

/// Starts `berth serve -p 0 -A 1 EXTRA`; the guard and the address it serves.
fn serve(extra: &[&str]) -> (Berth, SocketAddr) {
    let mut args = vec!["serve", "-p", "0", "-A", "1"];
    args.extend_from_slice(extra);
    let mut server = Berth::spawn(&args);
    let addr = address_in(&server.line());
    (server, addr)
}

/// Runs `berth bench ARGS --json`, which must succeed; its report.
fn bench(args: &[&str]) -> Value {
    let mut argv = vec!["bench"];
    argv.extend_from_slice(args);
    argv.push("--json");
    let (status, out, err) = run_within(&argv, LIMIT);
    assert!(status.success(), "{argv:?}: {err}\n{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `n` answers, all 200, and no error of any kind.
fn assert_all_answered(r: &Value, n: u64) {
    assert_eq!(r["requests"], n, "{r:#}");
    assert_eq!(r["status"]["200"], n, "{r:#}");
    for kind in [
        "connect", "read", "write", "timeout", "status", "protocol", "reset", "goaway",
    ] {
        assert_eq!(r["errors"][kind], 0, "{kind}: {r:#}");
    }
    assert_eq!(r["http2"], true, "{r:#}");
}

/// h2c with prior knowledge against a server that speaks nothing but HTTP/2 (so an answer
/// can only have come over it): every request answered, one connection per connection asked
/// for, and the table says HTTP/2 with its streams and its own error kinds.
#[test]
fn h2c_counts_every_request() {
    let (_server, addr) = serve(&["--http2", "only"]);
    let url = format!("http://{addr}/hello/world");
    let r = bench(&[
        &url,
        "--h2",
        "--streams",
        "10",
        "-n",
        "3000",
        "-c",
        "4",
        "-t",
        "2",
    ]);
    assert_all_answered(&r, 3000);
    assert_eq!(r["streams"], 10, "{r:#}");
    assert_eq!(r["connects"], 4, "{r:#}");
    let p = &r["latency_us"];
    assert!(p["min"].as_u64() <= p["p50"].as_u64() && p["p50"].as_u64() <= p["max"].as_u64());

    let (status, out, err) = run(&["bench", &url, "--h2", "-n", "200", "-c", "2"]);
    assert!(status.success(), "{err}");
    assert!(out.contains("HTTP/2, 10 streams per connection"), "{out}");
    assert!(out.contains("200: 200"), "{out}");
    assert!(
        out.contains("errors       0 (") && out.contains("reset 0, goaway 0)"),
        "{out}"
    );
}

/// HTTP/2 over TLS, ALPN h2, the certificate verified with `--ca`, with several models.
#[test]
fn tls_counts_every_request() {
    let certs = Certs::new("cli-bench-h2");
    let (cert, key) = (certs.cert.to_str().unwrap(), certs.key.to_str().unwrap());
    let ca = certs.ca.to_str().unwrap();
    for model in ["evloop", "uring", "threaded"] {
        let (_server, addr) = serve(&["--model", model, "--tls-cert", cert, "--tls-key", key]);
        let url = format!("https://127.0.0.1:{}/hello/world", addr.port());
        let r = bench(&[
            &url,
            "--h2",
            "--streams",
            "8",
            "-n",
            "1000",
            "-c",
            "3",
            "--ca",
            ca,
        ]);
        assert_all_answered(&r, 1000);
        assert_eq!(r["connects"], 3, "{model}: {r:#}");
    }
}

/// Request bodies larger than the server's stream window (65,535 bytes until it opens it
/// again) go out as the server's WINDOW_UPDATEs allow, several streams at once, and the
/// answers, larger than one DATA frame, come back whole.
#[test]
fn bodies_larger_than_the_windows_are_sent_within_them() {
    let (_server, addr) = serve(&[]);
    let url = format!("http://{addr}/reverse");
    // From a file: 200 KB is more than one command-line argument may hold.
    let body = std::env::temp_dir().join(format!("berth-bench-h2-body-{}", std::process::id()));
    let text = format!(r#"{{"a": "{}", "b": "xyz"}}"#, "ab".repeat(100_000));
    std::fs::write(&body, text).unwrap();
    let r = bench(&[
        &url,
        "--h2",
        "--streams",
        "4",
        "-n",
        "40",
        "-c",
        "2",
        "--method",
        "POST",
        "--body",
        body.to_str().unwrap(),
        "-H",
        "Content-Type: application/json",
    ]);
    let _ = std::fs::remove_file(&body);
    assert_all_answered(&r, 40);
    // Each answer holds the reversed 200,000 characters.
    assert!(r["bytes"].as_u64().unwrap() > 40 * 200_000, "{r:#}");
}

/// A server that allows fewer streams than asked for gets no more at once: none is refused
/// (REFUSED_STREAM would count as a reset).
#[test]
fn no_more_streams_than_the_server_allows() {
    let (_server, addr) = serve(&["--http2-max-streams", "3"]);
    let url = format!("http://{addr}/hello/world");
    let r = bench(&[&url, "--h2", "--streams", "50", "-n", "600", "-c", "2"]);
    assert_all_answered(&r, 600);
}

/// A server that ends each connection after 50 streams (GOAWAY NO_ERROR): the streams it did
/// not take are sent again on a new connection, and none counts as an error.
#[test]
fn a_polite_goaway_is_followed_by_a_new_connection() {
    let (_server, addr) = serve(&["--http2-max-requests", "50"]);
    let url = format!("http://{addr}/hello/world");
    let r = bench(&[&url, "--h2", "--streams", "10", "-n", "1000", "-c", "2"]);
    assert_all_answered(&r, 1000);
    assert!(r["connects"].as_u64().unwrap() >= 1000 / 50, "{r:#}");
}

/// A server without HTTP/2 is not measured as if it spoke it: over TLS it offers http/1.1
/// alone, so no connection is made (the client offers h2 alone); in cleartext it reads the
/// preface as a bad HTTP/1.1 request. Either way nothing is answered: exit 1, errors counted.
#[test]
fn a_server_without_http2_answers_nothing() {
    let (_plain, addr) = serve(&["--http2", "off"]);
    let url = format!("http://{addr}/hello/world");
    let (status, out, err) = run(&["bench", &url, "--h2", "-n", "20", "-c", "1", "--json"]);
    assert_eq!(status.code(), Some(1), "{out}\n{err}");
    assert!(err.contains("was answered"), "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["requests"], 0, "{r:#}");
    assert!(r["errors"]["protocol"].as_u64().unwrap() + r["errors"]["read"].as_u64().unwrap() > 0);

    let certs = Certs::new("cli-bench-h2-off");
    let (cert, key) = (certs.cert.to_str().unwrap(), certs.key.to_str().unwrap());
    let (_tls, addr) = serve(&["--http2", "off", "--tls-cert", cert, "--tls-key", key]);
    let url = format!("https://127.0.0.1:{}/hello/world", addr.port());
    let (status, out, err) = run(&["bench", &url, "--h2", "-n", "20", "-c", "1", "--json"]);
    assert_eq!(status.code(), Some(1), "{out}\n{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["requests"], 0, "{r:#}");
    assert!(
        r["errors"].as_object().unwrap().values().any(|n| n != 0),
        "{r:#}"
    );
}

/// What `--h2` cannot be combined with, and `--streams` without it: exit 2, an error naming
/// the option, the usage.
#[test]
fn usage_errors() {
    let url = "http://127.0.0.1:1/";
    for (args, names) in [
        (&["--streams", "5"][..], &["--h2"][..]),
        (&["--h2", "--pipeline", "4"], &["--pipeline", "--h2"]),
        (&["--h2", "--no-keepalive"], &["--no-keepalive", "--h2"]),
        (&["--h2", "--streams", "0"], &["--streams"]),
    ] {
        let mut argv = vec!["bench", url];
        argv.extend_from_slice(args);
        let (status, out, err) = run(&argv);
        assert_eq!(status.code(), Some(2), "{argv:?}: {err}");
        assert!(out.is_empty(), "{argv:?}: {out}");
        assert!(err.starts_with("error: "), "{argv:?}: {err}");
        let said = err.split("Usage:").next().unwrap();
        assert!(names.iter().any(|n| said.contains(n)), "{argv:?}: {err}");
        assert!(err.contains("Usage: berth bench"), "{argv:?}: {err}");
    }
}
