//! The `berth` binary's concurrency models: `serve --model M` for every model, seed 000's
//! spellings (`-type s|t|f`, `-types`, `-typet`, `-typef`, `-port N`, `-portN`, with or without
//! `serve`), every malformed model or port option refused with exit 2 and the usage, and SIGTERM
//! stopping a process model with exit 0 and no worker process left behind.
//!
//! Every berth is owned by a [`Berth`] guard (`tests/common`) that stops it when the test ends,
//! pass or fail: SIGTERM, a bounded wait, then SIGKILL for it and any child it left. Every wait
//! has a deadline; every server listens on 127.0.0.1 with a port picked by the system.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use berth::drive::Model;
use common::procs::{alive, children_of, proc_stat};
use common::{address_in, free_port, get, run, signal, wait_for, Berth, LIMIT};

/// Opens a connection and sends a keep-alive GET; returns the connection and the response head
/// and body read so far (enough for the small demo responses).
fn get_keep_alive(addr: SocketAddr, path: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect_timeout(&addr, LIMIT).expect("connect");
    s.set_read_timeout(Some(LIMIT)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: cli\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&buf).contains("Hello, World!") {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    (s, String::from_utf8_lossy(&buf).into_owned())
}

/// Starts berth with `args`, checks that its startup line names `model` and that it serves
/// `/hello/world`; returns it running, with its address.
fn serving(args: &[&str], model: &str) -> (Berth, SocketAddr) {
    let mut b = Berth::spawn(args);
    let line = b.line();
    assert!(
        line.contains(&format!("(model {model},")),
        "{args:?}: model {model} not named in {line:?}"
    );
    assert!(
        line.starts_with("berth listening on http://127.0.0.1:"),
        "{args:?}: {line:?}"
    );
    let addr = address_in(&line);
    assert_ne!(addr.port(), 0, "{args:?}");
    let response = get(addr, "/hello/world");
    assert!(
        response.starts_with("HTTP/1.1 200 OK\r\n") && response.ends_with("\r\n\r\nHello, World!"),
        "{args:?}: {response}"
    );
    (b, addr)
}

#[test]
fn every_model_serves_and_stops_on_sigterm() {
    for model in Model::ALL.map(Model::name) {
        let (mut b, addr) = serving(&["serve", "--model", model, "-p", "0"], model);
        assert!(
            get(addr, "/test/slow").starts_with("HTTP/1.1 200 OK\r\n"),
            "{model}"
        );
        b.signal("TERM");
        let status = b
            .wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{model}: still running 10 s after SIGTERM"));
        assert_eq!(
            status.code(),
            Some(0),
            "{model}: {status:?}: {}",
            b.stderr()
        );
    }
}

#[test]
fn seed_000_spellings_pick_the_model_and_port() {
    let cases: [(&[&str], &str); 10] = [
        (&["serve", "-type", "s", "-port", "0"], "single"),
        (&["serve", "-type", "t", "-port", "0"], "threaded"),
        (&["serve", "-type", "f", "-port", "0"], "forked"),
        (&["serve", "-types", "-port0"], "single"),
        (&["serve", "-typet", "-port", "0"], "threaded"),
        (&["serve", "-typef", "-port0"], "forked"),
        // Without `serve`: seed 000's command line as it was.
        (&["-type", "s", "-port", "0"], "single"),
        (&["-typet", "-port0"], "threaded"),
        (&["-port", "0", "-type", "f"], "forked"),
        // Mixed with berth's own flags.
        (
            &["serve", "-type", "t", "-p", "0", "--max-threads", "8"],
            "threaded",
        ),
    ];
    for (args, model) in cases {
        let _ = serving(args, model);
    }
    // A real port number, both spellings.
    for spelling in ["-port", "-portN"] {
        let port = free_port();
        let args: Vec<String> = match spelling {
            "-port" => vec!["-type".into(), "s".into(), "-port".into(), port.to_string()],
            _ => vec!["-type".into(), "s".into(), format!("-port{port}")],
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_b, addr) = serving(&args, "single");
        assert_eq!(addr.port(), port, "{args:?}");
    }
}

#[test]
fn malformed_model_and_port_options_are_usage_errors() {
    let cases: [&[&str]; 16] = [
        &["-type", "x"],
        &["serve", "-type", "x"],
        &["-type"],
        &["serve", "-type"],
        &["-port"],
        &["serve", "-port"],
        &["-port", "70000"],
        &["serve", "-port", "70000"],
        &["-port", "abc"],
        &["serve", "-port", "abc"],
        &["serve", "--model", "bogus"],
        &["serve", "--model"],
        &["serve", "--max-threads", "0"],
        &["serve", "--max-children", "0"],
        &["serve", "--processes", "0"],
        &["-type", "s", "-port", "-1"],
    ];
    // Each case is a process of its own: run them side by side.
    let runs: Vec<_> = cases
        .iter()
        .map(|args| {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            thread::spawn(move || {
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                (args.clone(), run(&refs))
            })
        })
        .collect();
    let mut problems = Vec::new();
    for t in runs {
        let (args, (status, out, err)) = t.join().expect("runner thread");
        let mut wrong = Vec::new();
        if status.code() != Some(2) {
            wrong.push(format!("exit {status:?}"));
        }
        if !out.is_empty() {
            wrong.push(format!("stdout {out:?}"));
        }
        if !err.contains("error") {
            wrong.push("no error on stderr".to_owned());
        }
        if !err.contains("Usage:") {
            wrong.push("no usage on stderr".to_owned());
        }
        if !wrong.is_empty() {
            problems.push(format!("{args:?}: {}\n    stderr: {err}", wrong.join(", ")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Seed 000's options are `serve` options even when `serve` is left out, so an error in one
/// shows the usage of `berth serve`, as it does when `serve` is written.
#[test]
fn seed_spelling_errors_show_the_serve_usage() {
    for args in [
        &["-port", "70000"][..],
        &["-port", "abc"],
        &["-type", "x"],
        &["-port"],
        &["-types", "-port", "abc"],
    ] {
        let (status, _, err) = run(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("Usage: berth serve"), "{args:?}: {err}");
    }
}

#[test]
fn sigterm_stops_prefork_and_leaves_no_worker() {
    let (mut b, addr) = serving(
        &["serve", "--model", "prefork", "--processes", "2", "-p", "0"],
        "prefork",
    );
    let mut workers = Vec::new();
    let found = wait_for(LIMIT, || {
        workers = children_of(b.pid());
        workers.len() == 2
    });
    assert!(found, "expected 2 worker processes, found {workers:?}");
    // An idle keep-alive connection does not hold the shutdown up.
    let (_conn, response) = get_keep_alive(addr, "/hello/world");
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    b.signal("TERM");
    let status = b
        .wait_exit(Duration::from_secs(10))
        .expect("prefork berth still running 10 s after SIGTERM");
    assert_eq!(status.code(), Some(0), "{status:?}: {}", b.stderr());
    let mut left = Vec::new();
    let gone = wait_for(Duration::from_secs(5), || {
        left = workers
            .iter()
            .filter_map(|w| proc_stat(w.pid))
            .collect::<Vec<_>>();
        left.is_empty()
    });
    assert!(gone, "worker processes left after berth exited: {left:?}");
}

#[test]
fn sigterm_stops_forked_and_leaves_no_connection_process() {
    let (mut b, addr) = serving(&["serve", "--model", "forked", "-p", "0"], "forked");
    let (_conn, response) = get_keep_alive(addr, "/hello/world");
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    let mut kids = Vec::new();
    let found = wait_for(LIMIT, || {
        kids = children_of(b.pid());
        kids.len() == 1
    });
    assert!(found, "expected 1 connection process, found {kids:?}");
    b.signal("TERM");
    let status = b
        .wait_exit(Duration::from_secs(10))
        .expect("forked berth still running 10 s after SIGTERM");
    assert_eq!(status.code(), Some(0), "{status:?}: {}", b.stderr());
    let gone = wait_for(Duration::from_secs(5), || {
        kids.iter().all(|k| proc_stat(k.pid).is_none())
    });
    assert!(gone, "connection process left after berth exited: {kids:?}");
}

/// Waits up to `within` for every process in `pids` to be gone (zombies count as gone: an
/// orphan is reaped by whoever adopted it). Kills the ones left, so a failing test leaves none
/// behind, and returns them.
fn left_after(pids: &[i32], within: Duration) -> Vec<i32> {
    wait_for(within, || pids.iter().all(|&p| !alive(p)));
    let left: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        signal(p, "KILL");
    }
    left
}

#[test]
fn prefork_workers_follow_a_master_killed_with_sigkill() {
    let (mut b, addr) = serving(
        &["serve", "--model", "prefork", "--processes", "2", "-p", "0"],
        "prefork",
    );
    let mut workers = Vec::new();
    let found = wait_for(LIMIT, || {
        workers = children_of(b.pid()).iter().map(|p| p.pid).collect();
        workers.len() == 2
    });
    assert!(found, "expected 2 worker processes, found {workers:?}");
    // An idle keep-alive connection does not keep a worker alive either.
    let (_conn, response) = get_keep_alive(addr, "/hello/world");
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    // The OOM killer, a crash: the master goes without a word.
    let killed = std::time::Instant::now();
    b.signal("KILL");
    b.wait(LIMIT);
    let left = left_after(&workers, Duration::from_secs(1));
    assert!(
        left.is_empty(),
        "workers still running 1 s after their master died: {left:?}"
    );
    eprintln!("workers gone {:?} after the master", killed.elapsed());
    // Nothing listens on the port any more: a listener without SO_REUSEPORT can have it.
    let free = wait_for(Duration::from_secs(1), || {
        std::net::TcpListener::bind(addr).is_ok()
    });
    assert!(free, "port {addr} still in use after the workers left");
}

#[test]
fn forked_connection_processes_follow_a_server_killed_with_sigkill() {
    let (mut b, addr) = serving(&["serve", "--model", "forked", "-p", "0"], "forked");
    let (_conn, response) = get_keep_alive(addr, "/hello/world");
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    let mut kids = Vec::new();
    let found = wait_for(LIMIT, || {
        kids = children_of(b.pid()).iter().map(|p| p.pid).collect();
        kids.len() == 1
    });
    assert!(found, "expected 1 connection process, found {kids:?}");
    b.signal("KILL");
    b.wait(LIMIT);
    // Its connection was idle between requests: it leaves at once.
    let left = left_after(&kids, Duration::from_secs(1));
    assert!(
        left.is_empty(),
        "connection process left after its server died: {left:?}"
    );
}
