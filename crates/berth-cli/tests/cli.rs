//! The built `berth` binary: startup line, serving, usage errors (exit 2), help (exit 0) and
//! runtime failures (exit 1), per DESIGN §6.
//!
//! Every child process is owned by a [`Berth`] guard that stops and reaps it when the test ends,
//! pass or fail; every wait has a deadline; every server listens on port 0.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use berth::drive::Model;
use common::{address_in, free_port, get, run, Berth, LIMIT};

#[test]
fn serve_prints_its_address_and_serves() {
    let mut berth = Berth::spawn(&["serve", "-p", "0", "-A", "2", "-w", "3", "-C", "50"]);
    let line = berth.line();
    for part in [
        "berth listening on http://127.0.0.1:",
        "evloop",
        "2 accept threads",
        "3 workers",
        "capacity 50",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
    let addr = address_in(&line);
    assert_ne!(addr.port(), 0);

    let response = get(addr, "/hello/world");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\nHello, World!"), "{response}");
    let response = get(addr, "/test/slow");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");

    // Still running: it serves until stopped.
    assert!(berth.is_running(), "berth exited early");
    // And the startup line was the only one.
    berth.kill();
    let rest = berth.rest_of_stdout();
    assert!(rest.is_empty(), "more than one line on stdout: {rest:?}");
}

#[test]
fn serve_defaults_are_reported() {
    let mut berth = Berth::spawn(&["serve", "--port", "0", "--host", "127.0.0.1"]);
    let line = berth.line();
    let addr = address_in(&line);
    assert!(line.contains("capacity 100000"), "{line}");
    let response = get(addr, "/");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
}

#[test]
fn the_startup_line_agrees_in_number() {
    for (args, shape) in [
        (
            &["-m", "prefork"][..],
            "(model prefork, 2 processes x 1 accept thread, 1 worker and capacity 100000 per thread)",
        ),
        (
            &["-m", "prefork", "--processes", "1", "-A", "2", "-w", "0"],
            "(model prefork, 1 process x 2 accept threads, 0 workers and capacity 100000 per thread)",
        ),
        (
            &["-A", "1", "-w", "1", "-C", "5"],
            "(model evloop, 1 accept thread, 1 worker, capacity 5 per thread)",
        ),
        (
            &["-m", "actor", "-A", "1", "-w", "2"],
            "(model actor, 1 scheduler thread, batch 2, 2 workers, capacity 100000)",
        ),
    ] {
        let mut berth = Berth::spawn(&[&["serve", "-p", "0"][..], args].concat());
        let line = berth.line();
        assert!(line.ends_with(shape), "{args:?}: {line}");
    }
}

/// Asserts that `args` is a usage error: exit 2, nothing on stdout, and on stderr an error
/// naming one of `names` followed by the usage.
fn assert_usage_error(args: &[&str], names: &[&str]) {
    let (status, out, err) = run(args);
    assert_eq!(status.code(), Some(2), "{args:?}: stderr: {err}");
    assert!(out.is_empty(), "{args:?}: stdout: {out}");
    assert!(err.contains("error"), "{args:?}: {err}");
    assert!(
        names.iter().any(|n| err.contains(n)),
        "{args:?}: the error does not name the option ({names:?}): {err}"
    );
    assert!(err.contains("Usage:"), "{args:?}: no usage: {err}");
    assert!(
        err.contains(&format!("berth {}", args[0])),
        "{args:?}: usage of the wrong command: {err}"
    );
}

#[test]
fn malformed_options_are_usage_errors() {
    let cases: [(&[&str], &[&str]); 16] = [
        // `-d` works now (tests/daemon.rs); what it needs must come with it.
        (&["serve", "--log-file", "x.log"], &["--daemonize"]),
        (&["serve", "-p", "70000"], &["--port", "-p"]),
        (&["serve", "-p", "abc"], &["--port", "-p"]),
        (&["serve", "-A", "0"], &["--accept-threads", "-A"]),
        (&["serve", "-C", "0"], &["--accept-capacity", "-C"]),
        (&["serve", "--bogus"], &["--bogus"]),
        (&["serve", "-D", "x"], &["--slow-duration", "-D"]),
        (&["serve", "--max-headers", "0"], &["--max-headers"]),
        (&["serve", "--root", "/nonexistent/berth-root"], &["--root"]),
        (&["serve", "--actor-batch", "0"], &["--actor-batch"]),
        (&["serve", "--http2", "maybe"], &["--http2"]),
        (
            &["serve", "--http2-max-streams", "0"],
            &["--http2-max-streams"],
        ),
        (
            &["serve", "--http2-max-requests", "0"],
            &["--http2-max-requests"],
        ),
        (
            &["serve", "--http3-max-streams", "0"],
            &["--http3-max-streams"],
        ),
        (
            &["serve", "--http3-max-streams", "many"],
            &["--http3-max-streams"],
        ),
        (&["serve", "--quic-retry", "maybe"], &["--quic-retry"]),
    ];
    for (args, names) in cases {
        assert_usage_error(args, names);
    }
    // Negative numbers given with `=` are read as values, and refused as such.
    assert_usage_error(&["serve", "-w=-1"], &["--worker-threads", "-w"]);
    assert_usage_error(&["serve", "--worker-threads=-1"], &["--worker-threads"]);
}

#[test]
fn negative_worker_count_names_the_option() {
    assert_usage_error(&["serve", "-w", "-1"], &["--worker-threads", "-w"]);
}

#[test]
fn negative_worker_count_is_a_usage_error() {
    // Whatever the message says, `-w -1` must be refused with exit 2 and usage.
    let (status, _, err) = run(&["serve", "-w", "-1"]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("-1") && err.contains("Usage:"), "{err}");
}

#[test]
fn help_lists_every_option() {
    for flag in ["--help", "-h"] {
        let (status, out, err) = run(&["serve", flag]);
        assert_eq!(status.code(), Some(0), "serve {flag}: {err}");
        assert!(out.contains("Usage:"), "serve {flag}: {out}");
        for (short, long) in [
            ("-v", "--verbose"),
            ("-d", "--daemonize"),
            ("-p", "--port"),
            ("-A", "--accept-threads"),
            ("-C", "--accept-capacity"),
            ("-w", "--worker-threads"),
            ("-D", "--slow-duration"),
        ] {
            assert!(
                out.contains(&format!("{short}, {long}")),
                "serve {flag}: {short}/{long} missing:\n{out}"
            );
        }
        for long in ["--host", "--root", "--actor-batch", "actor"] {
            assert!(out.contains(long), "serve {flag}: {long} missing:\n{out}");
        }
    }
    for args in [&["--help"][..], &["-h"], &["help", "serve"]] {
        let (status, out, err) = run(args);
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert!(out.contains("serve"), "{args:?}: {out}");
    }
}

#[test]
fn no_arguments_prints_help_and_fails() {
    let (status, out, err) = run(&[]);
    assert_eq!(status.code(), Some(2), "{out}{err}");
    assert!(
        err.contains("Usage:") || out.contains("Usage:"),
        "{out}{err}"
    );
}

#[test]
fn address_in_use_is_a_runtime_failure() {
    // std's listener does not set SO_REUSEPORT, so berth cannot share its port, even asked to.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (status, out, err) = run(&["serve", "-p", &port, "-A", "2", "--reuse-port"]);
    assert_eq!(status.code(), Some(1), "stdout: {out}\nstderr: {err}");
    assert!(out.is_empty(), "{out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected a one-line error: {err}");
    assert!(lines[0].contains("already in use"), "{err}");
    assert!(lines[0].contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(
        !err.contains("Usage:"),
        "a runtime failure is not a usage error: {err}"
    );
    drop(taken);
}

#[test]
fn a_second_berth_is_refused_the_port_of_a_running_one() {
    // The first one's listeners have SO_REUSEPORT (its threads, or its worker processes, share
    // the port): the kernel alone would let any berth join them.
    for first_model in sharing_a_port() {
        let mut first = Berth::spawn(&["serve", "-m", first_model, "-p", "0", "-A", "2"]);
        let addr = address_in(&first.line());
        let port = addr.port().to_string();
        for model in Model::ALL.map(Model::name) {
            let (status, out, err) = run(&["serve", "-m", model, "-p", &port]);
            assert_eq!(
                status.code(),
                Some(1),
                "{first_model} then {model}: {out}{err}"
            );
            assert!(out.is_empty(), "{model}: {out}");
            assert_eq!(
                err,
                format!("berth: address {addr} already in use\n"),
                "{model}"
            );
        }
        assert!(get(addr, "/hello/world").starts_with("HTTP/1.1 200 OK"));
        first.signal("TERM");
        assert_eq!(first.wait(LIMIT).code(), Some(0));
    }
}

#[test]
fn reuse_port_shares_the_port_for_a_restart() {
    // README's zero-downtime restart: start the new server with --reuse-port next to the old
    // one, then stop the old one; the port never stops answering.
    for new_model in sharing_a_port() {
        let mut old = Berth::spawn(&["serve", "-p", "0", "-A", "1", "--reuse-port"]);
        let addr = address_in(&old.line());
        let port = addr.port().to_string();
        let mut new = Berth::spawn(&["serve", "-m", new_model, "-p", &port, "--reuse-port"]);
        assert_eq!(address_in(&new.line()), addr, "{new_model}");
        for _ in 0..20 {
            assert!(get(addr, "/hello/world").starts_with("HTTP/1.1 200 OK"));
        }
        old.signal("TERM");
        assert_eq!(old.wait(LIMIT).code(), Some(0));
        for _ in 0..20 {
            assert!(get(addr, "/hello/world").starts_with("HTTP/1.1 200 OK"));
        }
        new.signal("TERM");
        assert_eq!(
            new.wait(LIMIT).code(),
            Some(0),
            "{new_model}: {}",
            new.stderr()
        );
    }
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut berth = Berth::spawn(&["serve", "-p", "0", "-A", "1"]);
    let addr = address_in(&berth.line());
    assert!(get(addr, "/hello/world").starts_with("HTTP/1.1 200 OK"));
    berth.signal("TERM");
    let status = berth.wait(LIMIT);
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn server_and_date_headers_are_switches() {
    let has = |response: &str, field: &str| {
        let head = response
            .split("\r\n\r\n")
            .next()
            .unwrap()
            .to_ascii_lowercase();
        head.contains(&format!("\r\n{field}: "))
    };
    let (_on, addr) = serve(&[]);
    let response = get(addr, "/hello/world");
    assert!(
        has(&response, "server") && has(&response, "date"),
        "{response}"
    );
    let (_off, addr) = serve(&["--server-header", "off", "--date-header", "off"]);
    for path in ["/hello/world", "/nowhere", "/test/slow"] {
        let response = get(addr, path);
        assert!(response.starts_with("HTTP/1.1 "), "{response}");
        assert!(
            !has(&response, "server") && !has(&response, "date"),
            "{response}"
        );
    }
    let (_half, addr) = serve(&["--date-header", "off"]);
    let response = get(addr, "/hello/world");
    assert!(
        has(&response, "server") && !has(&response, "date"),
        "{response}"
    );
    assert_usage_error(&["serve", "--server-header", "maybe"], &["--server-header"]);
}

/// The 503 at capacity follows `--server-header` as every other answer does (issue 33: it
/// said `Server: berth` with the switch off).
#[test]
fn the_refusal_at_capacity_follows_the_server_header_switch() {
    use std::io::{Read, Write};
    for (switch, named) in [("on", true), ("off", false)] {
        let (_server, addr) = serve(&["-C", "1", "--server-header", switch]);
        // The one slot, held by a keep-alive connection that has had its answer.
        let mut held = std::net::TcpStream::connect_timeout(&addr, LIMIT).expect("connect");
        held.set_read_timeout(Some(LIMIT)).unwrap();
        held.write_all(b"GET /hello/world HTTP/1.1\r\nHost: cli\r\n\r\n")
            .unwrap();
        let mut answer = [0u8; 512];
        let n = held.read(&mut answer).expect("read the held answer");
        assert!(answer[..n].starts_with(b"HTTP/1.1 200 OK"));
        let refused = get(addr, "/hello/world");
        assert!(
            refused.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{refused}"
        );
        let head = refused
            .split("\r\n\r\n")
            .next()
            .unwrap()
            .to_ascii_lowercase();
        assert_eq!(
            head.contains("\r\nserver: berth"),
            named,
            "{switch}: {refused}"
        );
    }
}

/// Starts `berth serve` on a free port; returns the guard and the address it serves.
fn serve(extra: &[&str]) -> (Berth, SocketAddr) {
    let mut args = vec!["serve", "-p", "0", "-A", "1"];
    args.extend_from_slice(extra);
    let mut server = Berth::spawn(&args);
    let addr = address_in(&server.line());
    (server, addr)
}

#[test]
fn bench_counts_every_request_it_sends() {
    let (_server, addr) = serve(&[]);
    let url = format!("http://{addr}/hello/world");
    let (status, out, err) = run(&["bench", &url, "-n", "500", "-c", "5", "-t", "2", "--json"]);
    assert!(status.success(), "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(report["requests"], 500, "{out}");
    assert_eq!(report["status"]["200"], 500, "{out}");
    assert_eq!(report["connects"], 5, "{out}");
    for kind in ["connect", "read", "write", "timeout", "status", "protocol"] {
        assert_eq!(report["errors"][kind], 0, "{kind}: {out}");
    }
    assert_eq!(
        report["bytes"].as_u64().unwrap() % 500,
        0,
        "same response each time: {out}"
    );
    let p = &report["latency_us"];
    assert!(p["min"].as_u64() <= p["p50"].as_u64() && p["p50"].as_u64() <= p["p99"].as_u64());
    assert!(p["p99"].as_u64() <= p["max"].as_u64() && p["max"].as_u64() > Some(0));
    // Nothing on stderr: the progress line is only for terminals.
    assert!(err.is_empty(), "{err}");
}

#[test]
fn bench_posts_a_body_pipelines_and_reconnects() {
    let (_server, addr) = serve(&[]);
    let url = format!("http://{addr}/reverse");
    let body = r#"{"a": "abc"}"#;
    let (status, out, err) = run(&[
        "bench",
        &url,
        "-m",
        "POST",
        "--body-string",
        body,
        "-H",
        "Content-Type: application/json",
        "-n",
        "64",
        "-c",
        "2",
        "--pipeline",
        "8",
        "--json",
    ]);
    assert!(status.success(), "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["status"]["200"], 64, "{out}");
    assert_eq!(report["pipeline"], 8);
    let url = format!("http://{addr}/hello/world");
    let (status, out, err) = run(&[
        "bench",
        &url,
        "-n",
        "40",
        "-c",
        "4",
        "--no-keepalive",
        "--json",
    ]);
    assert!(status.success(), "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["status"]["200"], 40, "{out}");
    assert_eq!(report["connects"], 40, "a connection per request: {out}");
}

#[test]
fn bench_prints_a_table_with_errors_by_kind() {
    let (_server, addr) = serve(&[]);
    let url = format!("http://{addr}/no/such/page");
    let (status, out, err) = run(&["bench", &url, "-d", "300ms", "-c", "2", "-t", "1"]);
    assert!(status.success(), "{err}");
    for want in [
        "GET http://",
        "latency ms",
        "p99.9",
        "requests",
        "status       404:",
        "non-2xx",
    ] {
        assert!(out.contains(want), "{want:?} missing: {out}");
    }
    assert!(!out.contains("errors       0 "), "404s are errors: {out}");
}

#[test]
fn bench_against_nothing_fails_with_the_cause() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/");
    let (status, out, err) = run(&["bench", &url, "-d", "200ms", "-c", "2"]);
    assert_eq!(status.code(), Some(1), "{out}{err}");
    assert!(out.contains("connect "), "{out}");
    assert!(err.contains("no request") && err.contains(&url), "{err}");
}

#[test]
fn bench_usage_errors() {
    let cases: [(&[&str], &[&str]); 7] = [
        (&["bench"], &["<URL>"]),
        (&["bench", "ftp://127.0.0.1/"], &["scheme"]),
        (&["bench", "127.0.0.1:80"], &["scheme"]),
        (
            &["bench", "http://127.0.0.1:1/", "-d", "1", "-n", "5"],
            &["--duration", "--requests"],
        ),
        (
            &["bench", "http://127.0.0.1:1/", "-H", "novalue"],
            &["-H", "--header"],
        ),
        (
            &["bench", "http://127.0.0.1:1/", "--pipeline", "0"],
            &["--pipeline"],
        ),
        (&["bench", "http://127.0.0.1:1/", "-m", "GE T"], &["method"]),
    ];
    for (args, names) in cases {
        assert_usage_error(args, names);
    }
}

#[test]
fn lab_refuses_unknown_names() {
    let dir = std::env::temp_dir().join(format!("berth-lab-usage-{}", std::process::id()));
    let dir_arg = dir.to_string_lossy().into_owned();
    let (status, out, err) = run(&[
        "lab",
        "--quick",
        "--only",
        "nosuchserver",
        "--out",
        &dir_arg,
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status.code(), Some(2), "{out}{err}");
    assert!(
        err.contains("nosuchserver") && err.contains("evloop") && err.contains("Usage:"),
        "{err}"
    );
}

/// `--root DIR` serves `/files/` from DIR; without it `./public` is the root if it exists;
/// with neither, `/files/` is 404 and the log says why.
#[test]
fn serve_root_and_its_default() {
    let base = std::env::temp_dir().join(format!("berth-cli-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("with/public")).unwrap();
    std::fs::create_dir_all(base.join("without")).unwrap();
    std::fs::write(base.join("with/public/a.txt"), "from public\n").unwrap();
    std::fs::write(base.join("b.txt"), "from root\n").unwrap();

    let root = base.to_string_lossy().into_owned();
    let (_server, addr) = serve(&["--root", &root]);
    let r = get(addr, "/files/b.txt");
    assert!(
        r.starts_with("HTTP/1.1 200 ") && r.ends_with("from root\n"),
        "{r}"
    );

    let mut public = Berth::spawn_in(&base.join("with"), &["serve", "-p", "0", "-A", "1"]);
    let addr = address_in(&public.line());
    let r = get(addr, "/files/a.txt");
    assert!(
        r.starts_with("HTTP/1.1 200 ") && r.ends_with("from public\n"),
        "{r}"
    );
    public.signal("TERM");
    public.wait(LIMIT);
    let err = public.stderr();
    assert!(!err.contains("/files/ answers 404"), "{err}");

    // Without a root the log says so at startup, before any request for a file.
    let mut none = Berth::spawn_in(&base.join("without"), &["serve", "-p", "0", "-A", "1"]);
    none.line();
    none.signal("TERM");
    none.wait(LIMIT);
    let err = none.stderr();
    assert!(
        err.contains("INFO")
            && err.contains("no --root given and no ./public: /files/ answers 404"),
        "no hint in the log at startup: {err}"
    );
    let mut none = Berth::spawn_in(&base.join("without"), &["serve", "-p", "0", "-A", "1"]);
    let addr = address_in(&none.line());
    let r = get(addr, "/files/a.txt");
    assert!(r.starts_with("HTTP/1.1 404 "), "{r}");
    none.signal("TERM");
    none.wait(LIMIT);
    let err = none.stderr();
    assert_eq!(
        err.matches("/files/ answers 404").count(),
        1,
        "said once: {err}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// `--model actor --actor-batch N`: the startup line names the model and its batch, and it
/// serves the demo routes and files.
#[test]
fn serve_actor_model_with_its_batch() {
    let base = std::env::temp_dir().join(format!("berth-cli-actor-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("f.txt"), "actor file\n").unwrap();
    let root = base.to_string_lossy().into_owned();
    let mut server = Berth::spawn(&[
        "serve",
        "--model",
        "actor",
        "--actor-batch",
        "7",
        "-p",
        "0",
        "-A",
        "2",
        "--root",
        &root,
    ]);
    let line = server.line();
    assert!(
        line.contains("(model actor, 2 scheduler threads, batch 7,"),
        "{line}"
    );
    let addr = address_in(&line);
    let r = get(addr, "/hello/world");
    assert!(
        r.starts_with("HTTP/1.1 200 ") && r.ends_with("Hello, World!"),
        "{r}"
    );
    let r = get(addr, "/files/f.txt");
    assert!(
        r.starts_with("HTTP/1.1 200 ") && r.ends_with("actor file\n"),
        "{r}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&base);
}

/// The models whose listeners share their port through `SO_REUSEPORT` when there are several
/// (`-A 2`: threads or processes of their own listening on it), from the model registry.
fn sharing_a_port() -> Vec<&'static str> {
    Model::ALL
        .into_iter()
        .filter(|&m| {
            let mut settings = berth::drive::Settings::new(m, "127.0.0.1:0".parse().unwrap());
            settings.common.accept_threads = 2;
            settings.listeners() > 1
        })
        .map(Model::name)
        .collect()
}

/// `--http2 on` (the default) serves HTTP/2 with prior knowledge and HTTP/1.1 on one port;
/// `off` answers the preface as the HTTP/1.1 request-line it then is (505); `only` refuses
/// HTTP/1.1; `--http2-max-requests` winds a connection down after that many streams (curl
/// goes on with a new connection, so every transfer succeeds).
#[test]
fn http2_on_off_only_and_max_requests() {
    berth_testkit::tools::require("curl");
    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} ",
            ])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (_on, addr) = serve(&[]);
    let url = format!("http://{addr}/hello/world");
    assert_eq!(curl(&["--http2-prior-knowledge", &url]), "200 ");
    assert_eq!(curl(&["--http1.1", &url]), "200 ");
    let (_off, addr) = serve(&["--http2", "off"]);
    let url = format!("http://{addr}/hello/world");
    assert_eq!(curl(&["--http1.1", &url]), "200 ");
    assert_ne!(curl(&["--http2-prior-knowledge", &url]), "200 ");
    let (_only, addr) = serve(&["--http2", "only"]);
    let url = format!("http://{addr}/hello/world");
    assert_eq!(curl(&["--http2-prior-knowledge", &url]), "200 ");
    assert_ne!(curl(&["--http1.1", &url]), "200 ");
    let (_few, addr) = serve(&["--http2-max-requests", "2"]);
    // Two streams, as raw frames (the client writes nothing after them, so the server's close
    // cannot meet a write of ours): both served, and the second spends the connection: GOAWAY
    // NO_ERROR naming stream 3, then the close.
    let frame = |out: &mut Vec<u8>, kind: u8, flags: u8, id: u32, payload: &[u8]| {
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(payload);
    };
    // GET /hello/world, :scheme http, :authority x (HPACK without indexing).
    let mut get = vec![0x82, 0x86, 0x04, 12];
    get.extend_from_slice(b"/hello/world");
    get.extend_from_slice(&[0x01, 1, b'x']);
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, 4, 0, 0, &[]);
    frame(&mut out, 1, 0x5, 1, &get);
    frame(&mut out, 1, 0x5, 3, &get);
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(LIMIT)).unwrap();
    std::io::Write::write_all(&mut sock, &out).unwrap();
    let mut all = Vec::new();
    std::io::Read::read_to_end(&mut sock, &mut all).unwrap();
    let (mut ended, mut goaway, mut at) = (0, None, 0);
    while at + 9 <= all.len() {
        let len = u32::from_be_bytes([0, all[at], all[at + 1], all[at + 2]]) as usize;
        let payload = &all[at + 9..at + 9 + len];
        match (all[at + 3], all[at + 4] & 1) {
            (0, 1) => ended += 1,
            (7, _) => {
                let word = |k: usize| u32::from_be_bytes(payload[k..k + 4].try_into().unwrap());
                goaway = Some((word(0), word(4)));
            }
            _ => {}
        }
        at += 9 + len;
    }
    assert_eq!(ended, 2, "both streams answered");
    assert_eq!(goaway, Some((3, 0)), "GOAWAY NO_ERROR naming stream 3");
}

/// Issue 41: `--max-body-size 0` (or `none`) lifts the limit, as `python -m berth --max-body 0`
/// does; it once meant a limit of zero bytes here. The default (1m) still answers 413.
#[test]
fn max_body_zero_means_no_limit_as_in_python() {
    let mut body = br#"{"a": ""#.to_vec();
    body.resize(2 << 20, b'x');
    body.extend_from_slice(br#""}"#);
    let post = |addr: SocketAddr| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(LIMIT)).unwrap();
        let head = format!(
            "POST /reverse HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = s.write_all(&[head.as_bytes(), &body].concat());
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out[..out.len().min(40)]).into_owned()
    };
    for lifted in ["0", "none"] {
        let (_server, addr) = serve(&["--max-body-size", lifted]);
        assert!(post(addr).starts_with("HTTP/1.1 200 "), "{lifted}");
    }
    let (_server, addr) = serve(&[]);
    assert!(post(addr).starts_with("HTTP/1.1 413 "));
}
