//! HTTP/3 over real QUIC (issue 42): the built `berth serve --model evloop --listen
//! quic://...` (and `--model uring`, for the main cases: `per_model!`) answered by aioquic's HTTP/3 client (PyPI `aioquic`, an independent QUIC and
//! HTTP/3 stack; `tests/h3/client.py` drives it), over UDP on 127.0.0.1: GET, HEAD, `POST
//! /reverse`, a job, a 50 MB file checked by sha256, a range, 100 concurrent streams on one
//! connection, a client that vanishes mid-stream (nothing left behind), a drain that finishes
//! the request in flight, the UDP twin of a TLS listener (`--http3`), and the one-line refusal
//! of `quic://` by the models that do not serve it; HTTP/3's counts in `/stats`.
//!
//! aioquic must be installed (scripts/test installs it into target/py-venv): without it these
//! tests fail, naming it.

mod common;
#[path = "h3/support.rs"]
mod support;

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use berth_testkit::certs::Certs;
use common::{run_within, Berth, LIMIT};
use serde_json::{json, Value};
use support::{
    aioquic_fetch_with, answered, brief, client_script, footprint, header, quic_port, sha256_hex,
    stat as metric,
};

/// `berth serve --model evloop -A 1 -w 2 --listen quic://...` plus `extra` (support's), once
/// aioquic is known to be there.
fn serve(tag: &str, extra: &[&str]) -> support::H3 {
    serve_model("evloop", tag, extra)
}

/// [`serve`] with `--model model`.
fn serve_model(model: &str, tag: &str, extra: &[&str]) -> support::H3 {
    berth_testkit::tools::require_python_module("aioquic");
    support::serve_model(model, tag, extra)
}

/// A test run for each model that serves HTTP/3 from its loops: `body(model)` runs as
/// `body::evloop` and `body::uring` (a module beside the function of the same name).
macro_rules! per_model {
    ($($body:ident),+ $(,)?) => {
        $(
            mod $body {
                #[test]
                fn evloop() {
                    super::$body("evloop");
                }
                #[test]
                fn uring() {
                    super::$body("uring");
                }
            }
        )+
    };
}

per_model!(
    get_head_post_and_a_job_are_answered_on_one_connection,
    a_50_mb_file_comes_whole_and_a_range_comes_alone,
    a_hundred_concurrent_streams_on_one_connection_are_all_answered,
    a_client_that_vanishes_mid_stream_leaves_nothing_behind,
    a_drain_finishes_the_download_in_flight_then_exits,
    http3_opens_the_udp_twin_of_a_tls_listener,
);

/// Requests over one aioquic connection, with the client's `extra` options.
fn fetch_at(port: u16, ca: &std::path::Path, requests: &Value, extra: &[&str]) -> Vec<Value> {
    aioquic_fetch_with(port, ca, requests, extra)
}

fn get_head_post_and_a_job_are_answered_on_one_connection(model: &str) {
    let s = serve_model(model, "basic", &[]);
    let r = s.fetch(json!([
        {"path": "/"},
        {"path": "/hello/world"},
        {"method": "HEAD", "path": "/hello/world"},
        {"method": "POST", "path": "/reverse", "body": "{\"a\": \"abc\", \"b\": [1, 2]}",
         "headers": [["content-type", "application/json"]]},
        {"path": "/test/slow"},
        {"path": "/files/small.txt"},
        {"path": "/no/such/thing"},
    ]));
    answered(&r[0], 200, "Hello, World!");
    answered(&r[1], 200, "Hello, World!");
    // HEAD: the GET's length, no body.
    answered(&r[2], 200, "");
    assert_eq!(
        header(&r[2], "content-length"),
        Some("13"),
        "{}",
        brief(&r[2])
    );
    answered(&r[3], 200, "{\"data\":[\"cba\",[2,1]]}");
    // A job: run by a worker, its reply back on the connection's loop.
    assert_eq!(r[4]["status"], 200, "{}", brief(&r[4]));
    answered(&r[5], 200, "0123456789abcdefghijklmnopqrstuvwxyz");
    assert_eq!(r[6]["status"], 404, "{}", brief(&r[6]));
}

fn a_50_mb_file_comes_whole_and_a_range_comes_alone(model: &str) {
    let s = serve_model(model, "big", &[]);
    let data = berth_testkit::bytes::pattern(0, 50_000_000);
    std::fs::write(s.root.join("big.bin"), &data).unwrap();
    let want = sha256_hex(&data);
    let r = s.fetch(json!([
        {"path": "/files/big.bin"},
        {"path": "/files/big.bin", "headers": [["range", "bytes=1000000-1000015"]]},
    ]));
    assert_eq!(r[0]["error"], Value::Null, "{}", brief(&r[0]));
    assert_eq!(r[0]["status"], 200);
    assert_eq!(r[0]["length"], 50_000_000);
    assert_eq!(r[0]["sha256"], want.as_str());
    assert_eq!(header(&r[0], "content-length"), Some("50000000"));
    support::range_answered(&r[1], &data);
}

fn a_hundred_concurrent_streams_on_one_connection_are_all_answered(model: &str) {
    let s = serve_model(model, "many", &[]);
    let r = s.fetch(support::a_hundred_requests());
    support::a_hundred_answered(&r);
}

fn a_client_that_vanishes_mid_stream_leaves_nothing_behind(model: &str) {
    // The idle timeout is what notices a client that says nothing more.
    let s = serve_model(model, "vanish", &["--idle-timeout", "1s"]);
    // Its descriptors and UDP sockets once it has served one connection.
    answered(&s.fetch(json!([{"path": "/"}]))[0], 200, "Hello, World!");
    let before = footprint(s.berth.pid());
    std::fs::write(
        s.root.join("big.bin"),
        berth_testkit::bytes::pattern(0, 20_000_000),
    )
    .unwrap();
    let python = berth_testkit::tools::require_python_module("aioquic");
    let out = Command::new(python)
        .arg(client_script())
        .args(["127.0.0.1", &s.port.to_string()])
        .arg(&s.certs.ca)
        .args(["--vanish", "1000000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(br#"[{"path": "/files/big.bin"}]"#)?;
            child.wait_with_output()
        })
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("\"vanished\""),
        "the client did not vanish mid-stream: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Itself only, once the vanished one is gone: its slot, its file, its stream.
    let gone = common::wait_for(Duration::from_secs(15), || {
        s.stat("berth_connections_open") == 1
    });
    assert!(
        gone,
        "the vanished client's connection is still counted open"
    );
    let stats = s.fetch(json!([{"path": "/stats"}]));
    let body = stats[0]["body"].as_str().unwrap();
    assert!(body.contains("\nberth_jobs_running 0\n"), "{body}");
    // Nothing of it is held: no descriptor (its file, say) and no UDP socket more than
    // before it came (`ss -uanp`: the loop's one socket).
    let after = footprint(s.berth.pid());
    assert!(
        after.fds <= before.fds && after.udp_sockets == before.udp_sockets,
        "{model}: fds {} -> {}, UDP sockets {} -> {}",
        before.fds,
        after.fds,
        before.udp_sockets,
        after.udp_sockets
    );
    assert_eq!(after.udp_sockets, 1, "{model}: one loop, one UDP socket");
    // And the server serves on.
    answered(&s.fetch(json!([{"path": "/"}]))[0], 200, "Hello, World!");
}

fn a_drain_finishes_the_download_in_flight_then_exits(model: &str) {
    let mut s = serve_model(model, "drain", &[]);
    let data = berth_testkit::bytes::pattern(7, 30_000_000);
    std::fs::write(s.root.join("big.bin"), &data).unwrap();
    let want = sha256_hex(&data);
    let python = berth_testkit::tools::require_python_module("aioquic");
    let mut child = Command::new(python)
        .arg(client_script())
        .args(["127.0.0.1", &s.port.to_string()])
        .arg(&s.certs.ca)
        .arg("--announce")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"[{"path": "/files/big.bin"}]"#)
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(
        first.contains("\"started\""),
        "the download did not start: {first}"
    );
    // The answer is under way (a debug build takes seconds for 30 MB) when the stop comes.
    s.berth.signal("TERM");
    let last = lines.map_while(Result::ok).last().unwrap_or_default();
    assert!(child.wait().unwrap().success(), "the client failed: {last}");
    let r: Vec<Value> = serde_json::from_str(&last).expect("the client's answers");
    assert_eq!(r[0]["error"], Value::Null, "{}", brief(&r[0]));
    assert_eq!(r[0]["length"], 30_000_000);
    assert_eq!(r[0]["sha256"], want.as_str());
    let (status, _, err) = s.berth.finish(LIMIT);
    assert!(status.success(), "{status}: {err}");
}

fn http3_opens_the_udp_twin_of_a_tls_listener(model: &str) {
    berth_testkit::tools::require_python_module("aioquic");
    let certs = Certs::new(&format!("h3-twin-{model}"));
    let mut berth = Berth::spawn(&[
        "serve",
        "--model",
        model,
        "-A",
        "1",
        "-p",
        "0",
        "--tls-cert",
        certs.cert.to_str().unwrap(),
        "--tls-key",
        certs.key.to_str().unwrap(),
        "--http3",
    ]);
    let line = berth.line();
    let tcp = common::address_in(&line);
    let udp = quic_port(&line);
    // Without a TLS listener there is nothing to be the twin of: a usage error.
    let (status, _, err) = run_within(&["serve", "--http3", "-p", "0"], LIMIT);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("--http3 opens the UDP twin"), "{err}");
    assert_eq!(tcp.port(), udp, "{line}");
    let r = fetch_at(udp, &certs.ca, &json!([{"path": "/hello/world"}]), &[]);
    answered(&r[0], 200, "Hello, World!");
    // The TLS listener serves on beside it.
    let mut tls = berth_testkit::tls::connect(&certs.ca, &[b"http/1.1"], tcp);
    tls.write_all(b"GET /hello/world HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut tls, &mut answer).unwrap();
    assert!(answer.ends_with("Hello, World!"), "{answer}");
    // One server: the TLS listener's /stats counts the QUIC connection too (the HTTP/3 one,
    // the TLS one above, and this one).
    let mut tls = berth_testkit::tls::connect(&certs.ca, &[b"http/1.1"], tcp);
    tls.write_all(b"GET /stats HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut stats = String::new();
    std::io::Read::read_to_string(&mut tls, &mut stats).unwrap();
    assert!(stats.contains("\nberth_connections_total 3\n"), "{stats}");
    assert!(stats.contains("\nberth_requests_total 3\n"), "{stats}");
    // A drain ends both.
    berth.signal("TERM");
    let (status, _, err) = berth.finish(LIMIT);
    assert!(status.success(), "{status}: {err}");
}

#[test]
fn models_that_do_not_serve_http3_refuse_quic_in_one_line() {
    let certs = Certs::new("h3-refuse");
    let listen = format!(
        "quic://127.0.0.1:0?cert={}&key={}",
        certs.cert.display(),
        certs.key.display()
    );
    for model in berth::drive::Model::ALL {
        if model.caps().serves_http3 {
            continue;
        }
        let (status, _, err) = run_within(
            &["serve", "--model", model.name(), "--listen", &listen],
            LIMIT,
        );
        assert_eq!(status.code(), Some(2), "{model}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{model}: {err}");
        assert!(
            err.contains("--model evloop") && err.contains(model.name()),
            "{model}: {err}"
        );
        let (status, _, err) = run_within(
            &[
                "serve",
                "--model",
                model.name(),
                "-p",
                "0",
                "--tls-cert",
                certs.cert.to_str().unwrap(),
                "--tls-key",
                certs.key.to_str().unwrap(),
                "--http3",
            ],
            LIMIT,
        );
        assert_eq!(status.code(), Some(2), "{model} --http3: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{model}: {err}");
    }
}

#[test]
fn a_request_body_past_the_stream_window_arrives_whole_and_one_past_the_limit_is_413() {
    let s = serve("upload", &[]);
    // 700 KB: more than QUIC's stream window (256 KiB), so the client sends it as berth reads
    // it and grants more; under the 1 MiB body limit.
    let text: String = (0..700_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let reversed: String = text.chars().rev().collect();
    let want = format!("{{\"data\":[\"{reversed}\"]}}");
    let too_big = "x".repeat(2 << 20);
    let r = s.fetch(json!([
        {"method": "POST", "path": "/reverse", "body": format!("{{\"t\": \"{text}\"}}")},
        {"method": "POST", "path": "/reverse", "body": format!("{{\"t\": \"{too_big}\"}}")},
        {"path": "/hello/world"},
    ]));
    assert_eq!(r[0]["error"], Value::Null, "{}", brief(&r[0]));
    assert_eq!(r[0]["status"], 200, "{}", brief(&r[0]));
    assert_eq!(r[0]["length"], want.len());
    assert_eq!(r[0]["sha256"], sha256_hex(want.as_bytes()).as_str());
    assert_eq!(r[1]["status"], 413, "{}", brief(&r[1]));
    // The connection goes on.
    answered(&r[2], 200, "Hello, World!");
}

#[test]
fn a_download_the_client_stops_ends_and_the_connection_serves_on() {
    let s = serve("stop", &[]);
    std::fs::write(
        s.root.join("big.bin"),
        berth_testkit::bytes::pattern(0, 20_000_000),
    )
    .unwrap();
    let r = fetch_at(
        s.port,
        &s.certs.ca,
        &json!([{"path": "/files/big.bin"}]),
        &["--stop", "500000"],
    );
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["error"], "stopped by the client", "{}", brief(&r[0]));
    assert!(
        r[0]["length"].as_u64().unwrap() < 20_000_000,
        "{}",
        brief(&r[0])
    );
    // The request sent after the stop, on the same connection.
    answered(&r[1], 200, "Hello, World!");
    // Nothing of the stopped stream is left: the connection closed with the client, and only
    // the one asking is open.
    let gone = common::wait_for(Duration::from_secs(10), || {
        s.stat("berth_connections_open") == 1
    });
    assert!(gone, "a connection is still counted open");
}

#[test]
fn stats_count_http3_connections_and_requests_beside_http2() {
    berth_testkit::tools::require_python_module("aioquic");
    let certs = Certs::new("h3-stats");
    let root = std::env::temp_dir().join(format!("berth-h3-stats-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("big.bin"),
        berth_testkit::bytes::pattern(0, 20_000_000),
    )
    .unwrap();
    let mut berth = Berth::spawn(&[
        "serve",
        "--model",
        "evloop",
        "-A",
        "1",
        "-p",
        "0",
        "--tls-cert",
        certs.cert.to_str().unwrap(),
        "--tls-key",
        certs.key.to_str().unwrap(),
        "--http3",
        "--root",
        root.to_str().unwrap(),
    ]);
    let line = berth.line();
    let tcp = common::address_in(&line);
    let udp = quic_port(&line);
    // /stats asked over TLS (HTTP/1.1), so that the asking adds nothing to HTTP/3's counts.
    let stats = || {
        let mut tls = berth_testkit::tls::connect(&certs.ca, &[b"http/1.1"], tcp);
        tls.write_all(b"GET /stats HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut stats = String::new();
        std::io::Read::read_to_string(&mut tls, &mut stats).unwrap();
        stats
    };
    let before = stats();
    for name in [
        "berth_http3_connections_total",
        "berth_http3_connections_open",
    ] {
        assert_eq!(metric(&before, name), 0, "{name}: {before}");
    }
    // One connection: three requests answered.
    let r = fetch_at(
        udp,
        &certs.ca,
        &json!([
            {"path": "/hello/world"},
            {"method": "HEAD", "path": "/hello/world"},
            {"method": "POST", "path": "/reverse", "body": "{\"t\": \"abc\"}"},
        ]),
        &[],
    );
    assert!(r.iter().all(|r| r["status"] == 200), "{r:?}");
    // Another: a download the client stops, then one more request.
    let r = fetch_at(
        udp,
        &certs.ca,
        &json!([{"path": "/files/big.bin"}]),
        &["--stop", "500000"],
    );
    answered(&r[1], 200, "Hello, World!");
    // Counted as each connection ends: once QUIC has closed them (the client's
    // CONNECTION_CLOSE, then the closing period).
    let mut last = String::new();
    let counted = common::wait_for(Duration::from_secs(10), || {
        last = stats();
        metric(&last, "berth_http3_connections_open") == 0
            && metric(&last, "berth_http3_requests_total") == 5
    });
    assert!(counted, "{last}");
    for (name, want) in [
        ("berth_http3_connections_total", 2),
        ("berth_http3_client_resets_total", 1),
        ("berth_http3_stream_errors_total", 0),
        ("berth_http3_rejected_streams_total", 0),
        ("berth_http3_oversized_heads_total", 0),
    ] {
        assert_eq!(metric(&last, name), want, "{name}: {last}");
    }
    // HTTP/2's are its own: the TLS connections asking spoke HTTP/1.1.
    assert_eq!(metric(&last, "berth_http2_connections_total"), 0, "{last}");
    berth.signal("TERM");
    let (status, _, err) = berth.finish(LIMIT);
    assert!(status.success(), "{status}: {err}");
    let _ = std::fs::remove_dir_all(&root);
}

/// SIGHUP reloads the certificate for QUIC as it does for TCP (issue 42): a connection made
/// after it is handed the renewed certificate (aioquic reports the one it verified), and a
/// reload that fails keeps the one in use, saying why.
#[test]
fn sighup_reloads_the_quic_certificate_and_a_bad_reload_keeps_the_old() {
    let mut s = serve("reload", &[]);
    let served = |s: &support::H3| -> Option<String> {
        let r = s.fetch(json!([{"path": "/hello/world"}]));
        answered(&r[0], 200, "Hello, World!");
        r[0]["peer_cn"].as_str().map(str::to_owned)
    };
    let first = served(&s);
    assert!(
        first.is_some() && first.as_deref() != Some("renewed"),
        "{first:?}"
    );

    s.certs.issue("renewed", &s.certs.cert, &s.certs.key, None);
    s.berth.signal("HUP");
    let renewed = common::wait_for(LIMIT, || served(&s).as_deref() == Some("renewed"));
    assert!(
        renewed,
        "the new certificate was not served over QUIC after SIGHUP"
    );

    std::fs::write(&s.certs.key, "not a key").unwrap();
    s.berth.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(served(&s).as_deref(), Some("renewed"));

    s.berth.signal("TERM");
    let (status, _, err) = s.berth.finish(LIMIT);
    assert!(status.success(), "{err}");
    assert!(err.contains("certificate reloaded from"), "{err}");
    assert!(
        err.contains("certificate not reloaded, the one in use stays"),
        "{err}"
    );
}
