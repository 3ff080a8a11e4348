//! The `evloop` driver over real sockets on 127.0.0.1, with real clients: raw `TcpStream`s,
//! `ureq`, `curl` and Python's `http.client` (a missing curl or python3 fails its test).
//!
//! What every model must do (keep-alive, pipelining in order, chunked bodies, smuggling
//! refused, the FIFO worker queue, shutdown) is checked for `evloop` too by `conformance.rs`;
//! this file holds what that suite does not: evloop's workers, job counters and slots, its
//! limits and routes in detail, and real clients.
//!
//! Every server listens on port 0; every socket has timeouts and every wait a deadline, so no
//! test can hang, and no test relies on the machine being fast beyond generous upper bounds.

#[path = "support/server.rs"]
mod server;

use std::io::Write;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use server::{get_request, metric, post_request, stats_text, Client, Opts};

const HELLO: &str = "Hello, World!";

// 1. Keep-alive and pipelining -------------------------------------------------------------------

#[test]
fn http10_keep_alive_only_when_asked() {
    let srv = Opts::evloop().start();
    let mut c = srv.client();
    c.send(b"GET /hello/world HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = c.read_response();
    assert_eq!((r.status, r.text()), (200, HELLO));
    assert_eq!(r.header("connection"), Some("keep-alive"));
    c.send(b"GET /hello/world HTTP/1.0\r\n\r\n");
    let r = c.read_response();
    assert_eq!((r.status, r.text()), (200, HELLO));
    assert!(r.closes());
    c.expect_closed();
}

#[test]
fn pipelined_requests_split_across_writes() {
    let srv = Opts::evloop().start();
    let mut all = Vec::new();
    for _ in 0..5 {
        all.extend_from_slice(get_request("/hello/world").as_bytes());
        all.extend_from_slice(post_request("/reverse", r#"{"k":"abc"}"#).as_bytes());
    }
    let mut c = srv.client();
    // Cut the stream at awkward places: inside request lines, CRLFs and bodies.
    for piece in all.chunks(7) {
        c.send(piece);
    }
    for i in 0..5 {
        let r = c.read_response();
        assert_eq!((r.status, r.text()), (200, HELLO), "pair {i}");
        let r = c.read_response();
        assert_eq!(
            (r.status, r.text()),
            (200, r#"{"data":["cba"]}"#),
            "pair {i}"
        );
    }
}

// 2. Expect: 100-continue ------------------------------------------------------------------------

#[test]
fn expect_100_continue_over_a_raw_socket() {
    let srv = Opts::evloop().start();
    let mut c = srv.client();
    let body = r#"{"x":"berth"}"#;
    c.send(
        format!(
            "POST /reverse HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    let interim = c.read_response();
    assert_eq!(interim.status, 100);
    c.send(body.as_bytes());
    let r = c.read_response();
    assert_eq!((r.status, r.text()), (200, r#"{"data":["htreb"]}"#));
}

// 3. Concurrency with workers --------------------------------------------------------------------

#[test]
fn hundred_concurrent_slow_requests_with_ten_workers() {
    let srv = Opts::evloop()
        .accept_threads(2)
        .workers(10)
        .slow(Duration::from_millis(30))
        .start();
    for (i, r) in server::get_at_once(srv.addr, 100, "/test/slow")
        .iter()
        .enumerate()
    {
        assert_eq!(r.status, 200, "client {i}");
        assert!(r.body.is_empty());
    }
    let s = srv.wait_stats("100 jobs done", |s| s.jobs_done == 100);
    assert_eq!((s.jobs_queued, s.jobs_running), (0, 0), "{s:?}");
    assert!(s.responses.contains(&(200, 100)), "{s:?}");
}

// 4. A peer leaving while its job runs -----------------------------------------------------------

fn peer_leaves_during_slow_job(reset: bool) {
    let slow = Duration::from_secs(1);
    let srv = Opts::evloop().workers(1).slow(slow).start();
    let mut c = srv.client();
    c.send(get_request("/test/slow").as_bytes());
    srv.wait_stats("the job to start", |s| s.jobs_running == 1);
    c.leave(reset);
    // The slot outlives the peer while the job runs: no snapshot, from the peer's leaving
    // until the job is done, shows the job unfinished and the slot free ...
    let running = std::cell::Cell::new(0);
    let s = srv.wait_stats("the job to finish", |s| {
        if s.jobs_done == 0 {
            running.set(running.get() + 1);
            assert_eq!(
                s.connections_open, 1,
                "slot freed under a running job: {s:?}"
            );
        }
        s.jobs_done == 1
    });
    eprintln!(
        "{} snapshot(s) while the job ran; then {s:?}",
        running.get()
    );
    // ... and is freed once the job is done.
    let s = srv.wait_stats("the slot to be freed", |s| {
        s.jobs_done == 1 && s.connections_open == 0
    });
    assert_eq!((s.jobs_queued, s.jobs_running), (0, 0), "{s:?}");
    assert_eq!(s.connections_total, 1);
    // Over HTTP, the only open connection is the one asking.
    let text = stats_text(srv.addr);
    assert_eq!(metric(&text, "berth_connections_open"), 1, "{text}");
    assert_eq!(metric(&text, "berth_jobs_done_total"), 1, "{text}");
    // And the server still serves.
    assert_eq!(srv.client().get("/test/slow").status, 200);
}

#[test]
fn peer_closing_during_slow_job_leaves_no_slot() {
    peer_leaves_during_slow_job(false);
}

#[test]
fn peer_resetting_during_slow_job_leaves_no_slot() {
    peer_leaves_during_slow_job(true);
}

// 5. Capacity ------------------------------------------------------------------------------------

#[test]
fn connection_beyond_capacity_is_refused_and_counted() {
    let srv = Opts::evloop().accept_threads(1).capacity(2).start();
    let mut a = srv.client();
    let mut b = srv.client();
    assert_eq!(a.get("/hello/world").status, 200);
    assert_eq!(b.get("/hello/world").status, 200);
    srv.wait_stats("two connections", |s| s.connections_open == 2);

    let mut third = srv.client();
    let rest = third.read_to_close().expect("refused connection closed");
    if !rest.is_empty() {
        let text = String::from_utf8_lossy(&rest);
        assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    }
    let s = srv.wait_stats("one refusal", |s| s.connections_refused == 1);
    assert_eq!(s.connections_open, 2, "{s:?}");

    // The two admitted clients still work; free one slot to ask /stats over HTTP.
    assert_eq!(a.get("/hello/world").text(), HELLO);
    drop(a);
    srv.wait_stats("a slot to free up", |s| s.connections_open == 1);
    let text = stats_text(srv.addr);
    assert_eq!(
        metric(&text, "berth_connections_refused_total"),
        1,
        "{text}"
    );
    assert_eq!(metric(&text, "berth_connections_total"), 3, "{text}");
    assert_eq!(b.get("/hello/world").text(), HELLO);
}

/// A drain serves what is in flight (issue 33): a client that connected before the drain and
/// sends its request after it began is answered, as the connection's last (`Connection:
/// close`), as nginx and uvicorn answer it; one that sends nothing within the grace is closed.
/// Before the fix the loop closed every connection it had not read from yet, so the request
/// met a closed connection.
#[test]
fn a_drain_answers_a_request_sent_on_a_connection_accepted_before_it() {
    drain_answers_a_late_request(berth::drive::Model::Evloop);
}

/// The same rule in `uring`, the other model built on `loops` (rt::DRAIN_GRACE).
#[test]
fn a_uring_drain_answers_a_request_sent_on_a_connection_accepted_before_it() {
    drain_answers_a_late_request(berth::drive::Model::Uring);
}

/// The same rule in `actor`, whose connections are actors told of the drain by message.
#[test]
fn an_actor_drain_answers_a_request_sent_on_a_connection_accepted_before_it() {
    drain_answers_a_late_request(berth::drive::Model::Actor);
}

fn drain_answers_a_late_request(model: berth::drive::Model) {
    let srv = Opts::new(model).accept_threads(1).start();
    let mut late = srv.client();
    let mut silent = srv.client();
    let mut idle = srv.client();
    assert_eq!(idle.get("/hello/world").status, 200);
    srv.wait_stats("three connections", |s| s.connections_open == 3);
    srv.drain(Duration::from_secs(10));
    // The drain has begun once the listener is closed: a new connection is refused.
    let began = Instant::now();
    while std::net::TcpStream::connect(srv.addr).is_ok() {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the listener stays open"
        );
        thread::sleep(Duration::from_millis(10));
    }
    // A keep-alive connection idle between requests is closed at once.
    idle.expect_closed();
    late.send(get_request("/hello/world").as_bytes());
    let r = late.read_response();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), HELLO);
    assert!(
        r.closes(),
        "the answer is the connection's last: {}",
        r.text()
    );
    late.expect_closed();
    // Nothing sent within the grace: closed, and the drain ends well before its deadline.
    silent.expect_closed();
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    srv.wait_stats("every connection closed", |s| s.connections_open == 0);
}

/// A drain serves the clients the kernel has already accepted (their handshake done, their
/// request sent) but the loop has not yet taken: a loop busy with a long turn (an application
/// run inline on the loop's thread, as `python -m berth --threads 1` runs it) leaves them in
/// the listener's queue. Before the fix the drain closed the listener first, which reset them
/// (a CI run of the WSGI front lost one this way). An inline loop makes it exact: nothing is
/// taken before its first turn, which begins the drain.
#[test]
fn a_drain_serves_the_connections_waiting_in_the_listeners_queue() {
    use berth::drive::evloop::Inline;
    let settings =
        berth::drive::Settings::new(berth::drive::Model::Evloop, "127.0.0.1:0".parse().unwrap());
    let stats = settings.new_stats().expect("counters");
    let demo = berth::app::Demo::new(berth::app::DemoConfig::default(), stats.clone());
    let (mut inline, bound) = Inline::bind(
        settings.addr.clone(),
        &demo,
        &settings.common,
        &settings.models.evloop,
        stats,
    )
    .expect("bind");
    let berth::net::Addr::Tcp(addr) = bound else {
        panic!("{bound:?}")
    };
    let mut clients: Vec<Client> = (0..5).map(|_| Client::connect(addr)).collect();
    for c in &mut clients {
        c.send(get_request("/hello/world").as_bytes());
    }
    inline.drain(Duration::from_secs(10));
    let began = Instant::now();
    while inline.turn().expect("turn") {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the drain never ended"
        );
        thread::sleep(Duration::from_millis(1));
    }
    for (i, c) in clients.iter_mut().enumerate() {
        let r = c.read_response();
        assert_eq!((r.status, r.text()), (200, HELLO), "client {i}");
        assert!(r.closes(), "client {i}: the answer is the last");
    }
    // And the listener is gone.
    assert!(std::net::TcpStream::connect(addr).is_err());
}

// 6. Limits --------------------------------------------------------------------------------------

#[test]
fn limits_over_a_real_socket() {
    let srv = Opts::evloop()
        .with_limits(|l| {
            l.max_header_bytes = 512;
            l.max_headers = 8;
            l.max_uri_bytes = 64;
            l.max_body_bytes = 32;
        })
        .start();
    let big_header = format!(
        "GET /hello/world HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(600)
    );
    let many_headers = {
        let mut s = String::from("GET /hello/world HTTP/1.1\r\nHost: t\r\n");
        for i in 0..10 {
            s.push_str(&format!("X-{i}: v\r\n"));
        }
        s + "\r\n"
    };
    let long_uri = get_request(&format!("/{}", "u".repeat(200)));
    let longish_uri = get_request(&format!("/{}", "u".repeat(80)));
    let big_body = post_request("/reverse", &format!(r#"{{"a":"{}"}}"#, "b".repeat(40)));
    let big_chunked = format!(
        "POST /reverse HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n{}\r\n14\r\n{}\r\n0\r\n\r\n",
        "c".repeat(20),
        "c".repeat(20)
    );
    let cases = [
        ("header bytes", big_header, 431),
        ("header count", many_headers, 431),
        ("long URI", long_uri, 414),
        ("URI just past the limit", longish_uri, 414),
        ("Content-Length body", big_body, 413),
        ("chunked body", big_chunked, 413),
        (
            "unknown method",
            "BREW /pot HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(),
            501,
        ),
    ];
    for (name, req, status) in cases {
        let mut c = srv.client();
        c.send(req.as_bytes());
        c.expect_refusal(status, name);
    }
    // Right at the limits is fine.
    let at_limit = post_request("/reverse", &format!(r#"{{"a":"{}"}}"#, "b".repeat(24)));
    assert_eq!(at_limit.len() - at_limit.find("\r\n\r\n").unwrap() - 4, 32);
    let r = server::roundtrip(srv.addr, at_limit.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

// 7. Routes --------------------------------------------------------------------------------------

#[test]
fn head_404_405_bad_json_and_dates() {
    let srv = Opts::evloop().start();
    let mut c = srv.client();

    // HEAD: the GET's Content-Length, no body; the next response must still frame correctly.
    c.send(
        b"HEAD /hello/world HTTP/1.1\r\nHost: t\r\n\r\nGET /test/fast HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    let r = c.read_head_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("13"));
    let r = c.read_response();
    assert_eq!((r.status, r.text()), (200, ""));
    assert_eq!(r.header("content-length"), Some("0"));

    let r = c.get("/nope");
    assert_eq!((r.status, r.text()), (404, "Not Found\n"));
    assert!(!r.closes());

    c.send(post_request("/hello/world", "{}").as_bytes());
    let r = c.read_response();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));

    let r = c.get("/reverse");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));

    for bad in ["{\"a\": ", "[1, 2]", "{\"a\": 1}", ""] {
        c.send(post_request("/reverse", bad).as_bytes());
        let r = c.read_response();
        assert_eq!(r.status, 400, "body {bad:?}: {}", r.text());
        assert!(!r.closes(), "a bad JSON body need not cost the connection");
    }

    let r = c.get("/hello/world");
    let date = r.header("date").expect("Date header");
    assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
    assert_eq!(r.header("server"), Some("berth"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
}

#[test]
fn stats_is_prometheus_text() {
    let srv = Opts::evloop().start();
    assert_eq!(srv.client().get("/hello/world").status, 200);
    assert_eq!(srv.client().get("/nope").status, 404);
    assert_eq!(srv.client().get("/test/slow").status, 200);
    srv.wait_stats("closes counted", |s| s.connections_open == 0);
    let mut c = srv.client();
    let r = c.get("/stats");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain; version=0.0.4"));
    let text = r.text();
    for (name, kind) in [
        ("berth_connections_open", "gauge"),
        ("berth_connections_total", "counter"),
        ("berth_connections_refused_total", "counter"),
        ("berth_requests_total", "counter"),
        ("berth_jobs_queued", "gauge"),
        ("berth_jobs_running", "gauge"),
        ("berth_jobs_done_total", "counter"),
        ("berth_responses_total", "counter"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "no TYPE line for {name}:\n{text}"
        );
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}"
        );
    }
    // Every sample line is `name[{labels}] value`.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').expect(line);
        assert!(name.starts_with("berth_"), "{line}");
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
    assert_eq!(metric(text, "berth_connections_open"), 1);
    assert_eq!(metric(text, "berth_connections_total"), 4);
    assert_eq!(metric(text, "berth_requests_total"), 4);
    assert_eq!(metric(text, "berth_jobs_done_total"), 1);
    assert!(
        text.contains("berth_responses_total{status=\"200\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("berth_responses_total{status=\"404\"} 1\n"),
        "{text}"
    );
}

#[test]
fn slow_requests_answered_inline_without_workers() {
    let srv = Opts::evloop()
        .workers(0)
        .slow(Duration::from_secs(30))
        .start();
    // With no worker, /test/slow is answered at once, like a fast one (seed 001's -w 0).
    // (Slept inline, the answer would come after 30 s, past the client's read timeout.)
    let r = srv.client().get("/test/slow");
    assert_eq!(r.status, 200);
    assert_eq!(srv.snapshot().jobs_done, 0);
}

// 8. Real clients --------------------------------------------------------------------------------

#[test]
fn ureq_client() {
    let srv = Opts::evloop().start();
    let base = format!("http://{}", srv.addr);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    for _ in 0..3 {
        let r = agent.get(&format!("{base}/hello/world")).call().unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.header("server"), Some("berth"));
        assert_eq!(r.into_string().unwrap(), HELLO);
    }
    let r = agent
        .post(&format!("{base}/reverse"))
        .set("Content-Type", "application/json")
        .send_string(r#"{"name":"berth","list":["a","b"]}"#)
        .unwrap();
    assert_eq!(r.into_string().unwrap(), r#"{"data":["htreb",["b","a"]]}"#);
    match agent.get(&format!("{base}/nope")).call() {
        Err(ureq::Error::Status(404, r)) => assert_eq!(r.into_string().unwrap(), "Not Found\n"),
        other => panic!("expected 404, got {other:?}"),
    }
    assert_eq!(
        agent
            .get(&format!("{base}/test/slow"))
            .call()
            .unwrap()
            .status(),
        200
    );
    // ureq pools connections: everything went over one.
    assert_eq!(srv.snapshot().connections_total, 1);
}

/// Runs a command with a deadline; returns (status code, stdout, stderr).
fn run_bounded(cmd: &mut Command, limit: Duration) -> (Option<i32>, String, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn curl_client_with_expect_100_continue() {
    berth_testkit::require("curl");
    let srv = Opts::evloop().start();
    let url = format!("http://{}", srv.addr);
    let (code, out, err) = run_bounded(
        Command::new("curl")
            .args(["--http1.1", "-sS", "--max-time", "10"])
            .args([
                "-H",
                "Expect: 100-continue",
                "-H",
                "Content-Type: application/json",
            ])
            .args(["--data-binary", r#"{"a":"abc","b":"xyz"}"#])
            .args(["-w", "\n%{http_code}"])
            .arg(format!("{url}/reverse")),
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(0), "curl failed: {err}");
    assert_eq!(out, "{\"data\":[\"cba\",\"zyx\"]}\n200", "stderr: {err}");

    // Two URLs on one command line: curl reuses the connection.
    let (code, out, err) = run_bounded(
        Command::new("curl")
            .args([
                "--http1.1",
                "-sS",
                "--max-time",
                "10",
                "-w",
                " %{http_code}\n",
            ])
            .arg(format!("{url}/hello/world"))
            .arg(format!("{url}/nope")),
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(0), "curl failed: {err}");
    assert_eq!(out, "Hello, World! 200\nNot Found\n 404\n");
    // 1 connection above plus 1 for both URLs here.
    assert_eq!(srv.snapshot().connections_total, 2);

    let (code, out, err) = run_bounded(
        Command::new("curl")
            .args(["--http1.1", "-sS", "--max-time", "10", "-I"])
            .arg(format!("{url}/hello/world")),
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(0), "curl failed: {err}");
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.contains("Content-Length: 13\r\n"), "{out}");
}

#[test]
fn python_http_client() {
    berth_testkit::require("python3");
    let srv = Opts::evloop().start();
    let script = r#"
import http.client, json, sys
port = int(sys.argv[1])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
out = []
for _ in range(3):
    c.request("GET", "/hello/world")
    r = c.getresponse()
    out.append(f"{r.status} {r.read().decode()}")
c.request("POST", "/reverse", body=json.dumps({"k": "python"}),
          headers={"Content-Type": "application/json"})
r = c.getresponse()
out.append(f"{r.status} {r.read().decode()}")
def chunks():
    yield b'{"c": '
    yield b'"chunked"}'
c.request("POST", "/reverse", body=chunks(), encode_chunked=True)
r = c.getresponse()
out.append(f"{r.status} {r.read().decode()}")
c.request("HEAD", "/hello/world")
r = c.getresponse()
out.append(f"{r.status} {r.getheader('Content-Length')} {r.read()!r}")
print("|".join(out))
"#;
    let (code, out, err) = run_bounded(
        Command::new("python3")
            .args(["-c", script])
            .arg(srv.addr.port().to_string()),
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "python failed: {err}");
    assert_eq!(
        out.trim_end(),
        "200 Hello, World!|200 Hello, World!|200 Hello, World!|200 {\"data\":[\"nohtyp\"]}|200 {\"data\":[\"deknuhc\"]}|200 13 b''"
    );
    assert_eq!(srv.snapshot().connections_total, 1);
}

// Odds and ends over real sockets ----------------------------------------------------------------

#[test]
fn half_closed_client_still_gets_its_answers() {
    let srv = Opts::evloop().slow(Duration::from_millis(20)).start();
    let mut c = srv.client();
    c.send(
        format!(
            "{}{}",
            get_request("/test/slow"),
            get_request("/hello/world")
        )
        .as_bytes(),
    );
    c.shutdown_write();
    assert_eq!(c.read_response().status, 200);
    assert_eq!(c.read_response().text(), HELLO);
    c.expect_closed();
    srv.wait_stats("the slot to be freed", |s| s.connections_open == 0);
}

#[test]
fn many_connections_over_several_loops() {
    let srv = Opts::evloop().accept_threads(3).workers(2).start();
    let addr = srv.addr;
    let threads: Vec<_> = (0..20)
        .map(|_| {
            thread::spawn(move || {
                let mut c = Client::connect(addr);
                for _ in 0..50 {
                    assert_eq!(c.get("/hello/world").text(), HELLO);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = srv.wait_stats("all closed", |s| s.connections_open == 0);
    assert_eq!(s.requests, 1000);
    assert_eq!(s.connections_total, 20);
}

#[test]
fn deep_pipeline_with_backpressure() {
    // Far more output than the session's high-water mark, to a reader that lags behind.
    const N: usize = 5000;
    let srv = Opts::evloop().start();
    let mut c = srv.client();
    let mut writer = c.stream.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let mut batch = Vec::new();
        for i in 0..N {
            let path = if i % 3 == 0 { "/nope" } else { "/hello/world" };
            batch.extend_from_slice(get_request(path).as_bytes());
            if batch.len() > 60_000 {
                writer.write_all(&batch).unwrap();
                batch.clear();
            }
        }
        writer.write_all(&batch).unwrap();
    });
    thread::sleep(Duration::from_millis(50));
    for i in 0..N {
        let r = c.read_response();
        let expected = if i % 3 == 0 {
            (404, "Not Found\n")
        } else {
            (200, HELLO)
        };
        assert_eq!((r.status, r.text()), expected, "response {i}");
    }
    sender.join().unwrap();
    assert_eq!(srv.snapshot().requests, N as u64);
}

#[test]
fn large_bodies_up_to_the_limit() {
    let srv = Opts::evloop().start();
    let max = berth::proto::http::Limits::default().max_body_bytes;
    for (len, chunked) in [(300_000usize, false), (max, false), (max, true)] {
        // {"a":"xxx...y"} of exactly `len` bytes.
        let fill = len - r#"{"a":""}"#.len();
        let body = format!(r#"{{"a":"{}y"}}"#, "x".repeat(fill - 1));
        assert_eq!(body.len(), len);
        let mut c = srv.client();
        if chunked {
            c.send(b"POST /reverse HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
            for piece in body.as_bytes().chunks(10_000) {
                c.send(format!("{:x}\r\n", piece.len()).as_bytes());
                c.send(piece);
                c.send(b"\r\n");
            }
            c.send(b"0\r\n\r\n");
        } else {
            c.send(post_request("/reverse", &body).as_bytes());
        }
        let r = c.read_response();
        assert_eq!(
            r.status,
            200,
            "{len} bytes, chunked {chunked}: {}",
            r.text()
        );
        assert_eq!(
            r.body.len(),
            len + r#"{"data":[]}"#.len() - r#"{"a":}"#.len()
        );
        assert!(r.text().starts_with(r#"{"data":["yxxx"#));
        if len == max {
            // One byte more is refused.
            let over = format!(r#"{{"a":"{}"}}"#, "x".repeat(fill + 1));
            let mut c = srv.client();
            // The server answers after the head and may close before the body is all sent.
            let _ = c
                .stream
                .write_all(post_request("/reverse", &over).as_bytes());
            let r = c.read_response();
            assert_eq!(r.status, 413);
            assert!(r.closes());
        }
    }
}

#[test]
fn connection_close_and_head_on_slow_requests() {
    let srv = Opts::evloop().slow(Duration::from_millis(10)).start();
    let mut c = srv.client();
    c.send(b"HEAD /test/slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_head_response();
    assert_eq!((r.status, r.header("content-length")), (200, Some("0")));
    c.send(b"GET /test/slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert!(r.closes());
    // The request after `Connection: close` is not answered.
    c.expect_closed();
    srv.wait_stats("slots freed", |s| s.connections_open == 0);
}

#[test]
fn peer_leaving_with_pipelined_requests_behind_a_slow_job() {
    let srv = Opts::evloop()
        .workers(1)
        .slow(Duration::from_millis(100))
        .start();
    let mut c = srv.client();
    c.send(
        format!(
            "{}{}{}",
            get_request("/test/slow"),
            get_request("/test/slow"),
            get_request("/hello/world")
        )
        .as_bytes(),
    );
    srv.wait_stats("the first job", |s| s.jobs_running == 1);
    drop(c);
    let s = srv.wait_stats("everything settled", |s| {
        s.connections_open == 0 && s.jobs_queued == 0 && s.jobs_running == 0
    });
    assert!(s.jobs_done >= 1, "{s:?}");
    // Settled for good: nothing left behind a little later.
    thread::sleep(Duration::from_millis(250));
    let s = srv.snapshot();
    assert_eq!(
        (s.connections_open, s.jobs_queued, s.jobs_running),
        (0, 0, 0),
        "{s:?}"
    );
    assert_eq!(srv.client().get("/hello/world").text(), HELLO);
}

/// Sends `bytes` one at a time, pausing so that most land in separate reads on the server.
fn send_byte_by_byte(c: &mut Client, bytes: &[u8]) -> std::io::Result<()> {
    for b in bytes {
        c.stream.write_all(std::slice::from_ref(b))?;
        thread::sleep(Duration::from_micros(300));
    }
    Ok(())
}

#[test]
fn requests_arriving_a_byte_at_a_time() {
    let srv = Opts::evloop().start();
    let mut c = srv.client();
    send_byte_by_byte(
        &mut c,
        b"\r\nGET /hello/world?x=1 HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    assert_eq!(c.read_response().text(), HELLO);
    let chunked: &[u8] = b"POST /reverse HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n7;x=y\r\n: \"xyz\"\r\n1\r\n}\r\n0\r\nT: 1\r\n\r\n";
    send_byte_by_byte(&mut c, chunked).unwrap();
    let r = c.read_response();
    assert_eq!((r.status, r.text()), (200, r#"{"data":["zyx"]}"#));

    // Refusals do not depend on where the reads split the bytes.
    let refused: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: t\nX: y\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n",
        b"POST /reverse HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\n0\r\n\r\n",
        b"POST /reverse HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n",
    ];
    for req in refused {
        let mut c = srv.client();
        // The server may close before the last bytes are written.
        let _ = send_byte_by_byte(&mut c, req);
        c.expect_refusal(400, &String::from_utf8_lossy(req));
    }
}

#[test]
fn a_bad_request_mid_pipeline_ends_the_connection_after_earlier_answers() {
    let srv = Opts::evloop().slow(Duration::from_millis(10)).start();
    let mut c = srv.client();
    let mut burst = Vec::new();
    burst.extend_from_slice(get_request("/hello/world").as_bytes());
    burst.extend_from_slice(get_request("/test/slow").as_bytes());
    burst.extend_from_slice(
        b"GET /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    );
    burst.extend_from_slice(get_request("/hello/world").as_bytes());
    c.send(&burst);
    assert_eq!(c.read_response().text(), HELLO);
    assert_eq!(c.read_response().status, 200);
    c.expect_refusal(400, "the third request");
}

#[test]
fn unsupported_expectation_and_version() {
    let srv = Opts::evloop().start();
    let cases: [(&[u8], u16); 3] = [
        (
            b"POST /reverse HTTP/1.1\r\nHost: t\r\nExpect: magic\r\nContent-Length: 2\r\n\r\n{}",
            417,
        ),
        (b"GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
    ];
    for (req, status) in cases {
        let mut c = srv.client();
        c.send(req);
        c.expect_refusal(status, &String::from_utf8_lossy(req));
    }
}

#[test]
fn refused_client_that_already_sent_a_request() {
    let srv = Opts::evloop().capacity(1).start();
    let mut a = srv.client();
    assert_eq!(a.get("/hello/world").status, 200);
    let mut b = srv.client();
    let _ = b.stream.write_all(get_request("/hello/world").as_bytes());
    match b.try_read_response(false) {
        Ok(r) => {
            assert_eq!(r.status, 503);
            assert!(r.closes());
        }
        // A reset may overtake the refusal; the connection must be gone either way.
        Err(e) => assert!(
            server::is_reset(&e) || e.kind() == std::io::ErrorKind::UnexpectedEof,
            "{e}"
        ),
    }
    srv.wait_stats("the refusal", |s| s.connections_refused == 1);
    assert_eq!(a.get("/hello/world").text(), HELLO);
}

/// Pipelined `requests`, where `/test/slow` takes long: each answer must go out as soon as it
/// is ready, not when a later job ends. Checked without timing: when the first response
/// arrives, the later job must not have finished.
fn first_answer_not_held_by_a_later_job(requests: &[&str], done_before: u64) {
    let srv = Opts::evloop()
        .workers(1)
        .slow(Duration::from_secs(2))
        .start();
    let mut c = srv.client();
    let burst: String = requests.iter().map(|p| get_request(p)).collect();
    c.send(burst.as_bytes());
    let r = c.read_response();
    assert_eq!(r.status, 200);
    let s = srv.snapshot();
    // The later job takes 2 s, so it cannot have finished yet; whether it is already queued or
    // running when the response lands is a race, and not what this test is about.
    assert!(
        s.jobs_done == done_before,
        "the first response waited for a later job to finish: {s:?}"
    );
    for _ in 1..requests.len() {
        assert_eq!(c.read_response().status, 200);
    }
}

#[test]
fn response_before_a_slow_job_is_not_held_back() {
    first_answer_not_held_by_a_later_job(&["/hello/world", "/test/slow"], 0);
}

#[test]
fn slow_response_is_not_held_by_the_next_slow_job() {
    first_answer_not_held_by_a_later_job(&["/test/slow", "/test/slow"], 1);
}

#[test]
fn more_framing_ambiguities_are_refused() {
    let srv = Opts::evloop().start();
    let cases: [(&str, &[u8], u16); 10] = [
        (
            "two Transfer-Encoding lines",
            b"POST /reverse HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
        ),
        (
            "differing Content-Length list",
            b"POST /reverse HTTP/1.1\r\nHost: t\r\nContent-Length: 2, 3\r\n\r\n{}x",
            400,
        ),
        (
            "signed Content-Length",
            b"POST /reverse HTTP/1.1\r\nHost: t\r\nContent-Length: +2\r\n\r\n{}",
            400,
        ),
        (
            "space before colon",
            b"POST /reverse HTTP/1.1\r\nHost: t\r\nContent-Length : 2\r\n\r\n{}",
            400,
        ),
        (
            "chunk size overflow",
            b"POST /reverse HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000002\r\n{}\r\n0\r\n\r\n",
            400,
        ),
        (
            "chunked in HTTP/1.0",
            b"POST /reverse HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            400,
        ),
        (
            "chunked not last",
            b"POST /reverse HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
            501,
        ),
        (
            "unknown coding",
            b"POST /reverse HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n0\r\n\r\n",
            501,
        ),
        (
            "two Host fields",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            400,
        ),
        (
            "bare CR",
            b"GET / HTTP/1.1\r\nHost: t\rX: y\r\n\r\n",
            400,
        ),
    ];
    for (name, req, status) in cases {
        let mut c = srv.client();
        let _ = c.stream.write_all(req);
        c.expect_refusal(status, name);
    }
    assert_eq!(srv.snapshot().requests, 0);
}

// Descriptor exhaustion ---------------------------------------------------------------------------

const EMFILE_CHILD: &str = "BERTH_TEST_EMFILE_CHILD";

/// Runs [`emfile_child`] in a child process of this test binary, since it lowers the process's
/// descriptor limit, which would starve every other test running in parallel.
#[test]
fn a_client_at_emfile_is_answered_and_the_next_served_once_descriptors_free_up() {
    let exe = std::env::current_exe().unwrap();
    let (code, out, err) = run_bounded(
        Command::new(exe)
            .args(["emfile_child", "--exact", "--ignored", "--nocapture"])
            .env(EMFILE_CHILD, "1"),
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "child failed:\n{out}\n{err}");
    assert!(
        out.contains("1 passed"),
        "the child test did not run:\n{out}\n{err}"
    );
}

#[test]
#[ignore = "run only as a child of a_client_at_emfile_is_answered_and_the_next_served_once_descriptors_free_up"]
fn emfile_child() {
    use std::fs::File;

    if std::env::var_os(EMFILE_CHILD).is_none() {
        return;
    }
    let srv = Opts::evloop().start();
    let mut first = srv.client();
    assert_eq!(first.get("/hello/world").text(), HELLO);

    // Cap the descriptor table, then fill it so that not one descriptor is free.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit for getrlimit to fill in.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0, "getrlimit");
    limit.rlim_cur = limit.rlim_cur.min(512);
    // SAFETY: `limit` is a valid rlimit; a soft limit at most the hard one is always allowed.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(set, 0, "setrlimit");
    let mut filler = Vec::with_capacity(600);
    loop {
        match File::open("/dev/null") {
            Ok(f) => filler.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => break,
            Err(e) => panic!("open /dev/null: {e}"),
        }
    }
    // One descriptor for the client; the server's accept(2) then fails with EMFILE.
    drop(filler.pop());
    let mut second = srv.client();
    second.send(get_request("/hello/world").as_bytes());
    // Issue 40: the client is not left in the backlog until descriptors free up (it once
    // waited there, and at the limit honest clients timed out): the descriptor kept in reserve
    // accepts it, and it is answered 503 at once, counted as refused.
    second
        .stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let r = second.try_read_response(false);
    assert!(
        matches!(&r, Ok(r) if r.status == 503),
        "the client at EMFILE is answered 503: {r:?}"
    );
    assert_eq!(srv.snapshot().connections_total, 1);
    assert!(srv.snapshot().connections_refused >= 1);
    // Descriptors are free again: the next client is served.
    drop(filler);
    let mut third = srv.client();
    assert_eq!(third.get("/hello/world").text(), HELLO);
    drop(first);
}
