//! One command-line vocabulary (issue 31): a flag's name, unit syntax and default mean the same
//! in `serve` and `msg serve`; a short flag means the same in every subcommand that has it; the
//! older spellings still work, each with one note line; `--help` is grouped by heading;
//! listeners are addresses; logs are filtered as `RUST_LOG` says and the access log is written
//! in the formats operators' tools read.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::process::Command;

use berth_testkit::certs;
use common::{address_in, get, run, Berth, BIN, LIMIT};

/// `berth msg serve ARGS` started; its first endpoint's address.
fn msg_server(args: &[&str]) -> (Berth, String) {
    let mut berth =
        Berth::spawn(&[&["msg", "serve", "-l", "tcp://127.0.0.1:0"][..], args].concat());
    let line = berth.line();
    let endpoint = line
        .strip_prefix("berth msg listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    (berth, endpoint)
}

/// The note lines of stderr.
fn notes(err: &str) -> Vec<&str> {
    err.lines()
        .filter(|l| l.starts_with("berth: note:"))
        .collect()
}

/// Sends one request (`head` without its blank line, plus `body`) and returns the response.
fn request(addr: SocketAddr, head: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(format!("{head}\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn msg_serve_takes_serves_names_and_its_old_ones_with_one_note() {
    for (args, note) in [
        (&["-A", "1", "-C", "10"][..], None),
        (&["--accept-threads", "1", "--accept-capacity", "10"], None),
        (
            &["--threads", "1"],
            Some("'--threads' of 'berth msg serve' is now '--accept-threads' (-A)"),
        ),
        (
            &["--capacity=10"],
            Some("'--capacity' of 'berth msg serve' is now '--accept-capacity' (-C)"),
        ),
    ] {
        let (mut berth, endpoint) = msg_server(args);
        let (status, out, err) = run(&["msg", "send", &endpoint, "hi"]);
        assert!(status.success(), "{args:?}: {err}");
        assert_eq!(out, "hi\n", "{args:?}");
        berth.signal("TERM");
        assert!(berth.wait(LIMIT).success(), "{args:?}");
        let err = berth.stderr();
        match note {
            None => assert!(notes(&err).is_empty(), "{args:?}: {err}"),
            Some(note) => {
                assert_eq!(notes(&err).len(), 1, "{args:?}: one note line: {err}");
                assert!(notes(&err)[0].contains(note), "{args:?}: {err}");
            }
        }
    }
}

#[test]
fn short_flags_that_changed_meaning_still_work_with_a_note() {
    let mut server = Berth::spawn(&["serve", "-p", "0", "-A", "1"]);
    let addr = address_in(&server.line());
    let url = format!("http://{addr}/hello/world");
    // bench: -d (now --duration; -d is --daemonize) and -m (now --method; -m is --model).
    let (status, out, err) = run(&[
        "bench", &url, "-d", "200ms", "-m", "GET", "-c", "1", "-t", "1",
    ]);
    assert!(status.success(), "{out}{err}");
    let lines = notes(&err);
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].contains("'-d' of 'berth bench' is now '--duration'"),
        "{err}"
    );
    assert!(
        lines[1].contains("'-m' of 'berth bench' is now '--method'"),
        "{err}"
    );
    let (status, out, err) = run(&[
        "bench",
        &url,
        "--duration",
        "200ms",
        "--method",
        "GET",
        "-c",
        "1",
    ]);
    assert!(status.success(), "{out}{err}");
    assert!(notes(&err).is_empty(), "{err}");

    let (mut msg, endpoint) = msg_server(&[]);
    // msg send: -n (now --name; -n is how many in the benches) and -w (now --wait; -w is
    // --worker-threads), an attached value included.
    let (status, out, err) = run(&["msg", "send", &endpoint, "-n", "ann", "-w2s", "hi"]);
    assert!(status.success(), "{err}");
    assert_eq!(out, "hi\n");
    assert_eq!(notes(&err).len(), 2, "{err}");
    // After `--`, what looks like an old flag is a message.
    let (status, out, err) = run(&["msg", "send", &endpoint, "--name", "ann", "--", "-w"]);
    assert!(status.success(), "{err}");
    assert_eq!(out, "-w\n");
    assert!(notes(&err).is_empty(), "{err}");
    msg.signal("TERM");
    assert!(msg.wait(LIMIT).success());
    server.signal("TERM");
    assert!(server.wait(LIMIT).success());
}

/// `-X, --long` pairs of a subcommand's `--help`.
fn short_flags(args: &[&str]) -> BTreeMap<char, String> {
    let (status, out, err) = run(args);
    assert!(status.success(), "{args:?}: {err}");
    out.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let (short, rest) = l.strip_prefix('-')?.split_at_checked(1)?;
            let long = rest.strip_prefix(", --")?;
            let long = long.split([' ', '<']).next()?;
            Some((short.chars().next()?, long.to_owned()))
        })
        .collect()
}

/// The long flags a short one stands for where it means the same idea under another name:
/// `-n` is how many to send, requests (`bench`) or messages (`msg bench`).
fn same_idea(a: &str, b: &str) -> bool {
    a == b || matches!((a, b), ("requests", "count") | ("count", "requests"))
}

#[test]
fn a_short_flag_means_the_same_in_every_subcommand() {
    let mut seen: BTreeMap<char, (String, String)> = BTreeMap::new();
    for sub in [
        &["serve"][..],
        &["bench"],
        &["lab"],
        &["msg", "serve"],
        &["msg", "send"],
        &["msg", "listen"],
        &["msg", "bench"],
    ] {
        let name = sub.join(" ");
        for (short, long) in short_flags(&[sub, &["--help"]].concat()) {
            match seen.get(&short) {
                Some((other, first)) => assert!(
                    same_idea(&long, first),
                    "-{short} is --{long} in {name} but --{first} in {other}"
                ),
                None => {
                    seen.insert(short, (name.clone(), long));
                }
            }
        }
    }
    for (short, long) in [
        ('d', "daemonize"),
        ('A', "accept-threads"),
        ('C', "accept-capacity"),
        ('l', "listen"),
        ('v', "verbose"),
    ] {
        assert_eq!(seen[&short].1, long);
    }
}

#[test]
fn help_is_grouped_by_heading() {
    for sub in [&["serve"][..], &["msg", "serve"]] {
        let (status, out, _) = run(&[sub, &["--help"]].concat());
        assert!(status.success());
        for heading in [
            "Listening:",
            "Model, threads and capacity:",
            "Limits:",
            "Timeouts:",
            "TLS:",
            "Shutdown:",
            "Process:",
            "Logging:",
        ] {
            assert!(out.contains(heading), "{sub:?}: {heading} missing:\n{out}");
        }
        // The same defaults for the same ideas.
        for default in [
            "--write-timeout <DURATION>",
            "--shutdown-timeout <DURATION>",
            "--drain-delay <DURATION>",
            "-C, --accept-capacity <N>",
        ] {
            assert!(out.contains(default), "{sub:?}: {default} missing:\n{out}");
        }
    }
}

#[test]
fn durations_and_sizes_take_units_everywhere() {
    let mut berth = Berth::spawn(&[
        "serve",
        "-p",
        "0",
        "-A",
        "1",
        "--write-timeout",
        "500ms",
        "--header-timeout",
        "10",
        "--idle-timeout",
        "2m",
        "--shutdown-timeout",
        "5s",
        "--drain-delay",
        "0",
        "-D",
        "1ms",
        "--max-body-size",
        "1k",
        "--max-header-size",
        "16k",
        "--ws-max-message",
        "1m",
    ]);
    let addr = address_in(&berth.line());
    let small = request(
        addr,
        "POST /reverse HTTP/1.1\r\nHost: x\r\nContent-Length: 10",
        b"{\"a\":\"bc\"}",
    );
    assert!(small.starts_with("HTTP/1.1 200"), "{small}");
    let big = vec![b'x'; 2000];
    let over = request(
        addr,
        "POST /reverse HTTP/1.1\r\nHost: x\r\nContent-Length: 2000",
        &big,
    );
    assert!(over.starts_with("HTTP/1.1 413"), "{over}");
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());

    // --max-body, as `python -m berth` spells it, is the same flag.
    let mut berth = Berth::spawn(&["serve", "-p", "0", "-A", "1", "--max-body", "1k"]);
    let addr = address_in(&berth.line());
    let over = request(
        addr,
        "POST /reverse HTTP/1.1\r\nHost: x\r\nContent-Length: 2000",
        &big,
    );
    assert!(over.starts_with("HTTP/1.1 413"), "{over}");
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());

    let (mut msg, endpoint) = msg_server(&[
        "--write-timeout",
        "500ms",
        "--handshake-timeout",
        "10",
        "--stall-timeout",
        "1m",
        "--udp-idle",
        "30s",
        "--max-message",
        "1m",
        "--out-high",
        "64k",
        "--shutdown-timeout",
        "2s",
    ]);
    let (status, out, err) = run(&["msg", "send", &endpoint, "hi", "--wait", "10"]);
    assert!(status.success(), "{err}");
    assert_eq!(out, "hi\n");
    msg.signal("TERM");
    assert!(msg.wait(LIMIT).success());
}

#[test]
fn bad_values_are_usage_errors_naming_the_flag() {
    for (args, flag) in [
        (&["serve", "--write-timeout", "5x"][..], "--write-timeout"),
        (&["serve", "--max-body-size", "1q"], "--max-body-size"),
        (&["serve", "--header-timeout", "0"], "--header-timeout"),
        (&["serve", "--log-level", "loud"], "--log-level"),
        (
            &["serve", "--access-log-format", "xml"],
            "--access-log-format",
        ),
        (
            &[
                "serve",
                "--http-mode",
                "both",
                "--http-port",
                "1",
                "--tls-cert",
                "c",
                "--tls-key",
                "k",
            ],
            "--http-mode",
        ),
        (
            &[
                "msg",
                "serve",
                "-l",
                "tcp://127.0.0.1:0",
                "--write-timeout",
                "soon",
            ],
            "--write-timeout",
        ),
        (
            &[
                "msg",
                "serve",
                "-l",
                "tcp://127.0.0.1:0",
                "--accept-capacity",
                "0",
            ],
            "--accept-capacity",
        ),
        (
            &[
                "msg",
                "serve",
                "-l",
                "tcp://127.0.0.1:0",
                "--max-held",
                "1x",
            ],
            "--max-held",
        ),
    ] {
        let (status, out, err) = run(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{args:?}: one error line: {err}");
        assert!(errors[0].contains(flag), "{args:?}: {err}");
    }
}

#[test]
fn a_msg_serve_usage_error_shows_msg_serves_usage() {
    for args in [
        &[
            "msg",
            "serve",
            "-l",
            "tcp://127.0.0.1:0",
            "--accept-capacity",
            "x",
        ][..],
        &["msg", "serve", "-l", "bogus://x"],
        &["msg", "serve", "-l", "tcp://127.0.0.1:0", "--bogus"],
    ] {
        let (status, _, err) = run(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("Usage: berth msg serve"), "{args:?}: {err}");
        assert!(!err.contains("berth msg <COMMAND>"), "{args:?}: {err}");
    }
}

#[test]
fn serve_listens_on_every_listen_address() {
    let mut berth = Berth::spawn(&[
        "serve",
        "-A",
        "1",
        "--listen",
        "tcp://127.0.0.1:0",
        "-l",
        "tcp://127.0.0.1:0",
    ]);
    let line = berth.line();
    let addrs: Vec<SocketAddr> = line
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("http://"))
        .map(|a| a.parse().unwrap())
        .collect();
    assert_eq!(addrs.len(), 2, "{line}");
    assert_ne!(addrs[0], addrs[1]);
    for addr in addrs {
        assert!(
            get(addr, "/hello/world").ends_with("Hello, World!"),
            "{addr}"
        );
    }
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());

    // --host/--port is its short form; both at once is a usage error.
    let (status, _, err) = run(&["serve", "--listen", "tcp://127.0.0.1:0", "-p", "1"]);
    assert_eq!(status.code(), Some(2), "{err}");
    // A certificate no listener takes is a mistake.
    let (status, _, err) = run(&[
        "serve",
        "--listen",
        "tcp://127.0.0.1:0",
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
    ]);
    assert_eq!(status.code(), Some(2), "{err}");
    // What msg serve's endpoints have and HTTP does not is refused.
    for bad in [
        "udp://127.0.0.1:0",
        "ws://127.0.0.1:0",
        "tcp://127.0.0.1:0?raw",
        "tls://127.0.0.1:0",
    ] {
        let (status, _, err) = run(&["serve", "--listen", bad]);
        assert_eq!(status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--listen"), "{bad}: {err}");
    }
}

/// `quic://` (issue 42): `serve` serves it in evloop (tests/h3.rs), and refuses it in one line
/// in the other models, naming evloop; the message commands refuse it in one line as not served
/// yet; without a certificate it is a usage error naming what it needs.
#[test]
fn quic_endpoints_are_served_by_evloop_and_refused_in_one_line_elsewhere() {
    for args in [
        &["msg", "serve", "--listen", "quic://127.0.0.1:0"][..],
        &["msg", "send", "quic://127.0.0.1:9", "m"],
        &[
            "serve",
            "-m",
            "threaded",
            "--listen",
            "quic://127.0.0.1:0?cert=c.pem&key=k.pem",
        ],
    ] {
        let (status, out, err) = run(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("berth: "), "{args:?}: {err}");
        assert!(
            err.contains("quic://") || err.contains("HTTP/3"),
            "{args:?}: {err}"
        );
        assert!(err.contains("not"), "{args:?}: {err}");
    }
    let (_, _, err) = run(&[
        "serve",
        "-m",
        "threaded",
        "--listen",
        "quic://127.0.0.1:0?cert=c&key=k",
    ]);
    assert!(err.contains("evloop"), "{err}");
    // Without a certificate, or without a port: usage errors like any other.
    let (status, _, err) = run(&["serve", "--listen", "quic://127.0.0.1:0"]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("cert"), "{err}");
    let (status, _, err) = run(&["serve", "--listen", "quic://127.0.0.1"]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("no port"), "{err}");
}

/// Runs berth with `flags`, makes one request with a referer and a user agent and one
/// malformed one, stops it, returns stderr.
fn access_log_of(flags: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(BIN);
    cmd.args([&["serve", "-p", "0", "-A", "1"][..], flags].concat());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut berth = Berth::spawn_command(&mut cmd);
    let addr = address_in(&berth.line());
    let ok = request(
        addr,
        "GET /hello/world HTTP/1.1\r\nHost: x\r\nUser-Agent: vocab-test/1.0\r\nReferer: http://ref.example/",
        b"",
    );
    assert!(ok.ends_with("Hello, World!"), "{ok}");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let _ = s.read_to_end(&mut Vec::new());
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());
    berth.stderr()
}

#[test]
fn the_access_log_in_combined_format() {
    for flags in [&["--access-log"][..], &["--access-log-format", "combined"]] {
        let log = access_log_of(flags, &[]);
        let line = log
            .lines()
            .find(|l| l.contains("\"GET /hello/world HTTP/1.1\""))
            .unwrap_or_else(|| panic!("{flags:?}: no access line:\n{log}"));
        // ADDR - - [TIME] "REQUEST" STATUS BYTES "REFERER" "AGENT" SECONDS
        let (addr, rest) = line
            .split_once(" - - [")
            .unwrap_or_else(|| panic!("{line}"));
        // The client's address: the test connects from 127.0.0.1.
        assert_eq!(addr, "127.0.0.1", "{line}");
        let (time, rest) = rest.split_once("] ").unwrap();
        assert!(time.ends_with(" +0000") && time.len() == 26, "{line}");
        let rest = rest
            .strip_prefix(
                "\"GET /hello/world HTTP/1.1\" 200 13 \"http://ref.example/\" \"vocab-test/1.0\" ",
            )
            .unwrap_or_else(|| panic!("{line}"));
        assert!(rest.parse::<f64>().is_ok(), "duration: {line}");
        // The malformed request never reached the app: no request, no size.
        assert!(log.contains("\"-\" 400 - \"-\" \"-\" -"), "{log}");
    }
}

#[test]
fn the_access_log_as_json_lines() {
    let log = access_log_of(&["--access-log-format", "json"], &[]);
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "{log}");
    let ok = &lines[0];
    assert_eq!(ok["method"], "GET");
    assert_eq!(ok["target"], "/hello/world");
    assert_eq!(ok["protocol"], "HTTP/1.1");
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["bytes"], 13);
    assert_eq!(ok["user_agent"], "vocab-test/1.0");
    assert_eq!(ok["referer"], "http://ref.example/");
    assert!(ok["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{ok}");
    assert!(
        ok["time"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{ok}"
    );
    assert_eq!(ok["addr"], "127.0.0.1", "{ok}");
    assert_eq!(lines[1]["status"], 400);
    assert!(lines[1]["method"].is_null());

    // The former line is still there for whoever reads it.
    let log = access_log_of(&["--access-log-format", "short"], &[]);
    assert!(log.contains("GET /hello/world -> 200"), "{log}");
}

#[test]
fn log_levels_and_rust_log_filters() {
    // By default: info (the stop is logged).
    let log = access_log_of(&[], &[]);
    assert!(log.contains(" INFO ") && log.contains("stopped"), "{log}");
    // --log-level warn: no info.
    let log = access_log_of(&["--log-level", "warn", "--access-log"], &[]);
    assert!(
        !log.contains("stopped") && !log.contains("/hello/world"),
        "{log}"
    );
    // RUST_LOG filters, as env_logger reads them: the access log alone.
    let log = access_log_of(&["--access-log"], &[("RUST_LOG", "warn,access=info")]);
    assert!(!log.contains("stopped"), "{log}");
    assert!(log.contains("\"GET /hello/world HTTP/1.1\" 200"), "{log}");
    // --log-level wins over RUST_LOG, and takes module filters: the command's own lines
    // (target berth::serve) and not the library's.
    let log = access_log_of(
        &["--log-level", "warn,berth::serve=info"],
        &[("RUST_LOG", "off")],
    );
    assert!(log.contains("berth::serve] stopped"), "{log}");
    let log = access_log_of(&["--log-level", "warn,berth::drive=info"], &[]);
    assert!(!log.contains("stopped"), "{log}");
    // Given after the subcommand's flags or before the subcommand, the same.
    let (status, _, err) = run(&["--log-level", "off", "serve", "-p", "70000"]);
    assert_eq!(status.code(), Some(2), "{err}");
}

/// A datagram socket standing in for systemd's `$NOTIFY_SOCKET`.
fn manager(tag: &str) -> (UnixDatagram, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("berth-vocab-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(LIMIT)).unwrap();
    (socket, path)
}

fn next(manager: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = manager.recv(&mut buf).expect("a notification");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn msg_serve_tells_the_service_manager_and_serves_through_its_drain_delay() {
    let (socket, path) = manager("notify");
    let mut berth = Berth::spawn_command(
        Command::new(BIN)
            .args([
                "msg",
                "serve",
                "-l",
                "tcp://127.0.0.1:0",
                "--drain-delay",
                "10m",
            ])
            .env("NOTIFY_SOCKET", &path),
    );
    let line = berth.line();
    let endpoint = line
        .strip_prefix("berth msg listening on ")
        .unwrap()
        .to_owned();
    let ready = next(&socket);
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(ready.contains(&format!("STATUS={line}")), "{ready}");
    berth.signal("HUP");
    assert_eq!(next(&socket), "RELOADING=1");
    assert_eq!(next(&socket), "READY=1");
    berth.signal("TERM");
    assert_eq!(next(&socket), "STOPPING=1");
    // Within the drain delay: still serving.
    let (status, out, err) = run(&["msg", "send", &endpoint, "still here"]);
    assert!(status.success(), "{err}");
    assert_eq!(out, "still here\n");
    // A second signal ends the delay: the drain, and a clean exit.
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn msg_serve_runs_as_a_daemon() {
    let dir = std::env::temp_dir().join(format!("berth-vocab-daemon-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("msg.pid");
    let log_file = dir.join("msg.log");
    let (status, out, err) = run(&[
        "msg",
        "serve",
        "-l",
        "tcp://127.0.0.1:0",
        "-d",
        "--pid-file",
        pid_file.to_str().unwrap(),
        "--log-file",
        log_file.to_str().unwrap(),
    ]);
    assert!(status.success(), "{err}");
    let endpoint = out
        .trim()
        .strip_prefix("berth msg listening on ")
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (status, out, err) = run(&["msg", "send", &endpoint, "hi"]);
    assert!(status.success(), "{err}");
    assert_eq!(out, "hi\n");
    assert!(common::signal(pid, "TERM"));
    // The pid file goes when the daemon has stopped.
    assert!(
        common::wait_for(LIMIT, || !pid_file.exists()),
        "the daemon did not stop"
    );
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert!(
        log.contains("berth msg listening on") && log.contains("stopped"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn msg_serve_serves_a_socket_passed_by_systemd() {
    // Python passes berth a listening socket as systemd does: descriptor 3, LISTEN_PID
    // (berth's own: Python execs it) and LISTEN_FDS=1. The tcp:// endpoint given names another
    // port: the passed socket wins.
    let script = r#"
import os, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(128)
print("port", s.getsockname()[1], flush=True)
if s.fileno() != 3:
    os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDS"] = "1"
os.execv(sys.argv[1], sys.argv[1:])
"#;
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script, BIN, "msg", "serve", "-A", "2"])
        .args(["-l", "tcp://127.0.0.1:1", "-l", "tcp://127.0.0.1:0"]);
    let mut berth = Berth::spawn_command(&mut cmd);
    let port = berth.line();
    let port = port
        .strip_prefix("port ")
        .unwrap_or_else(|| panic!("{port}"));
    let line = berth.line();
    let endpoints: Vec<&str> = line
        .strip_prefix("berth msg listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .split(' ')
        .collect();
    assert_eq!(endpoints[0], format!("tcp://127.0.0.1:{port}"), "{line}");
    for endpoint in endpoints {
        let (status, out, err) = run(&["msg", "send", endpoint, "hi"]);
        assert!(status.success(), "{endpoint}: {err}");
        assert_eq!(out, "hi\n");
    }
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());
}

/// `curl ARGS`, which the test needs: a missing curl fails it.
fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl is needed by this test (install curl)");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn serve_listens_on_tls_addresses_with_their_own_or_the_default_certificate() {
    let certs = certs::Certs::new("vocab-listen");
    let (cert, key, ca) = (
        certs.cert.to_str().unwrap(),
        certs.key.to_str().unwrap(),
        certs.ca.to_str().unwrap(),
    );
    let own = format!("tls://127.0.0.1:0?cert={cert}&key={key}");
    let mut berth = Berth::spawn(&[
        "serve",
        "-A",
        "1",
        "-l",
        &own,
        "-l",
        "tls://127.0.0.1:0",
        "-l",
        "tcp://127.0.0.1:0",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
    ]);
    let line = berth.line();
    let urls: Vec<&str> = line
        .split_whitespace()
        .filter(|w| w.starts_with("http://") || w.starts_with("https://"))
        .collect();
    assert_eq!(urls.len(), 3, "{line}");
    assert!(
        urls[0].starts_with("https://") && urls[1].starts_with("https://"),
        "{line}"
    );
    assert!(urls[2].starts_with("http://"), "{line}");
    for url in urls {
        let body = curl(&["--cacert", ca, &format!("{url}/hello/world")]);
        assert_eq!(body, "Hello, World!", "{url}");
    }
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());
}
