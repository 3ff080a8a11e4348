//! Logging of the `berth` binary: quiet per request by default, one line per response with
//! `--access-log` (nginx's combined format by default; the other formats and the filters of
//! `--log-level` and `RUST_LOG` are in tests/vocabulary.rs), debug lines with `-v`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use berth::drive::Model;
use common::{address_in, get, Berth, LIMIT};

/// Runs berth with `flags`, makes one request and one malformed one, stops it, returns stderr.
fn log_of(flags: &[&str]) -> String {
    let mut berth = Berth::spawn(&[&["serve", "-p", "0", "-A", "1"][..], flags].concat());
    let addr = address_in(&berth.line());
    for request in [
        &b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    berth.signal("TERM");
    assert_eq!(berth.wait(LIMIT).code(), Some(0));
    berth.stderr()
}

#[test]
fn access_log_has_a_line_per_response() {
    let log = log_of(&["--access-log"]);
    assert!(
        log.contains("\"GET /hello/world HTTP/1.1\" 200 13 "),
        "{log}"
    );
    // The malformed request never reached the app: logged without a request line.
    assert!(log.contains("\"-\" 400 - "), "{log}");
    // berth's former line, on request.
    let log = log_of(&["--access-log-format", "short"]);
    assert!(log.contains("GET /hello/world -> 200"), "{log}");
    assert!(log.contains("- -> 400"), "{log}");
}

/// `--access-log-format` takes gunicorn's and granian's templates as well as the names (the
/// formatter `python -m berth` uses too: crates/berth-py/tests/test_habits.py).
#[test]
fn access_log_templates_of_gunicorns_and_granians_atoms() {
    let log = log_of(&[
        "--access-log-format",
        "gunicorn %(h)s \"%(r)s\" %(s)s %(b)s %(H)s %(D)s",
    ]);
    let line = log
        .lines()
        .find(|l| {
            l.starts_with("gunicorn 127.0.0.1 \"GET /hello/world HTTP/1.1\" 200 13 HTTP/1.1 ")
        })
        .unwrap_or_else(|| panic!("{log}"));
    let micros = line.rsplit(' ').next().unwrap();
    assert!(micros.parse::<u64>().is_ok(), "{line}");
    assert!(log.contains("gunicorn - \"-\" 400 - - -"), "{log}");
    let log = log_of(&[
        "--access-log-format",
        "granian %(addr)s %(method)s %(path)s %(protocol)s %(status)d %(dt_ms).3f",
    ]);
    assert!(
        log.contains("granian 127.0.0.1 GET /hello/world HTTP/1.1 200 "),
        "{log}"
    );
}

#[test]
fn a_bad_access_log_format_is_a_usage_error() {
    let (status, _, err) = common::run(&["serve", "--access-log-format", "%(nope)s"]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("no atom %(nope)s"), "{err}");
}

#[test]
fn nothing_per_request_by_default() {
    let log = log_of(&[]);
    assert!(!log.contains("/hello/world"), "{log}");
    assert!(!log.contains("-> 200") && !log.contains("\" 200 "), "{log}");
}

#[test]
fn a_clean_stop_logs_no_warning() {
    // The blocking models once logged `accept failed: Invalid argument` on every stop: the
    // listener shut down under their accept.
    for model in Model::ALL.map(Model::name) {
        let mut berth = Berth::spawn(&["serve", "-m", model, "-p", "0", "-A", "1"]);
        let addr = address_in(&berth.line());
        assert!(
            get(addr, "/hello/world").starts_with("HTTP/1.1 200 OK"),
            "{model}"
        );
        berth.signal("TERM");
        assert_eq!(berth.wait(LIMIT).code(), Some(0), "{model}");
        let log = berth.stderr();
        assert!(log.contains("stopped"), "{model}: {log}");
        for level in ["WARN", "ERROR"] {
            assert!(
                !log.contains(level),
                "{model}: a clean stop logged {level}:\n{log}"
            );
        }
    }
}

/// Issue 44: with `-v`, each connection's start (plain or TLS) and its end, with what it spoke
/// and why it ended (here: the response closed it, and a bad request), in every model.
#[test]
fn verbose_says_when_a_connection_opens_and_why_it_closes() {
    for model in ["evloop", "threaded", "actor", "uring"] {
        let log = log_of(&["-v", "-m", model]);
        let opened = log.matches("connection from 127.0.0.1:").count();
        assert!(opened >= 4, "{model}: {log}");
        assert!(log.contains(" opened (plain)"), "{model}: {log}");
        assert!(
            log.contains("closed (HTTP/1.1, ") && log.contains(" bytes sent): "),
            "{model}: {log}"
        );
    }
}
