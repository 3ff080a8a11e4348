//! The conformance suite's route, status, body and limit cases over HTTP/2 (issue 32), in every
//! model of the registry, over h2c with prior knowledge and over TLS with ALPN `h2`: one test
//! per case and model (`case::model`, `case::tls::model`), generated as `conformance.rs` does.
//! The client is `berth_testkit::h2`: it keeps to the server's windows and frame size, opens
//! its own as it reads, and answers SETTINGS and PING.
//!
//! Run one case for every model with `cargo test -p berth --test conformance_h2 slow_streams`,
//! one model with `cargo test -p berth --test conformance_h2 ::evloop`.
//!
//! Every socket has timeouts and every wait a deadline; no case bounds how fast anything is.
//! That streams of one connection run at once is shown by the server's `jobs_running` gauge.

#[path = "support/server.rs"]
mod server;

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use berth::app::{Demo, DemoConfig};
use berth::drive::{Model, Timeouts};
use berth::net::Acceptor;
use berth::proto::h2::frame::{self, setting};
use berth_testkit::h2::{self, code, Conn, H2Client, Outcome, Req};
use server::{metric, test_tls, ModelServer, Opts};

const HELLO: &str = "Hello, World!";

/// Generates one `#[test]` per model for each case function, plain and over TLS; after a case,
/// `<model>: #[attr]` adds an attribute to that model's tests (both transports).
macro_rules! conformance_h2 {
    (@case $d:tt $case:ident
        [$($model:ident #[$meta:meta])*]
        [$($module:ident $driver:ident),+]
    ) => {
        mod $case {
            macro_rules! for_model {
                $(($model $d test:item) => { #[$meta] $d test };)*
                ($d other:ident $d test:item) => { $d test };
            }
            $(
                for_model! {
                    $module
                    #[test]
                    fn $module() {
                        super::run(berth::drive::Model::$driver, false, super::$case)
                    }
                }
            )+
            /// The same case over TLS (ALPN `h2`).
            mod tls {
                macro_rules! for_model {
                    $(($model $d test:item) => { #[$meta] $d test };)*
                    ($d other:ident $d test:item) => { $d test };
                }
                $(
                    for_model! {
                        $module
                        #[test]
                        fn $module() {
                            super::super::run(berth::drive::Model::$driver, true, super::super::$case)
                        }
                    }
                )+
            }
        }
    };
    ($models:tt ($d:tt) $(
        $case:ident $(, $model:ident: #[$meta:meta])*
    );+ $(;)?) => {
        $(conformance_h2!(@case $d $case [$($model #[$meta])*] $models);)+
    };
}

berth::with_models!(conformance_h2! {
    ($)
    hello_and_root_200;
    head_has_no_body;
    unknown_path_404;
    wrong_method_405_with_allow;
    slow_job_answered;
    slow_streams_on_one_connection;
    reverse_json_in_several_data_frames;
    body_over_limit_413_with_content_length;
    body_over_limit_413_without_content_length;
    header_list_over_limit_431;
    long_path_414;
    stats_over_h2_counts_http2;
    unopened_window_closed_at_write_timeout;
    preface_never_completes_dropped_at_header_timeout;
    drain_sends_goaway_and_finishes_in_flight;
});

/// Runs `case` for `model`, every server it starts serving HTTPS if `tls`.
fn run(model: Model, tls: bool, case: fn(Model)) {
    server::over_tls(tls);
    case(model)
}

/// An HTTP/2 connection to `srv`: over TLS with ALPN `h2` if it serves HTTPS, else h2c.
fn client(srv: &ModelServer) -> H2Client<Conn> {
    client_with(srv, &[])
}

/// [`client`] with our SETTINGS.
fn client_with(srv: &ModelServer, settings: &[(u16, u32)]) -> H2Client<Conn> {
    connect(srv.addr, srv.opts.tls, settings)
}

/// An HTTP/2 connection to `addr`, over TLS (trusting the test CA) if `tls`.
fn connect(addr: SocketAddr, tls: bool, settings: &[(u16, u32)]) -> H2Client<Conn> {
    h2::connect(addr, ca(tls), settings)
}

/// The test CA if `tls`.
fn ca(tls: bool) -> Option<&'static Path> {
    tls.then(|| test_tls().certs.ca.as_path())
}

/// A short-timeout server: `header`, `write` (the rest the defaults).
fn timeouts(header: Duration, write: Duration) -> Timeouts {
    Timeouts {
        header,
        write,
        ..Default::default()
    }
}

// Routes, statuses and bodies ---------------------------------------------------------------------

/// `/` and `/hello/world`: 200 with the body, its type and length, on one connection.
fn hello_and_root_200(m: Model) {
    let srv = Opts::new(m).start();
    let mut c = client(&srv);
    for path in ["/", "/hello/world"] {
        let r = c.request(&Req::get(path)).response(&format!("{m}: {path}"));
        assert_eq!(r.status, 200, "{m}: {path}");
        assert_eq!(r.text(), HELLO, "{m}: {path}");
        assert_eq!(r.header("content-length"), Some("13"), "{m}: {r:?}");
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; charset=utf-8"),
            "{m}: {r:?}"
        );
        assert_eq!(r.header("server"), Some("berth"), "{m}: {r:?}");
        // RFC 9113 §8.2.2: no connection-specific fields.
        assert!(r.header("connection").is_none(), "{m}: {r:?}");
    }
}

/// HEAD: the GET's head (length included), no body.
fn head_has_no_body(m: Model) {
    let srv = Opts::new(m).start();
    let mut c = client(&srv);
    let r = c
        .request(&Req::new("HEAD", "/hello/world"))
        .response(&format!("{m}: HEAD"));
    assert_eq!(r.status, 200, "{m}");
    assert!(r.body.is_empty(), "{m}: {r:?}");
    assert_eq!(r.header("content-length"), Some("13"), "{m}: {r:?}");
    // The connection goes on.
    let r = c.request(&Req::get("/")).response(&format!("{m}: GET"));
    assert_eq!(r.text(), HELLO, "{m}");
}

fn unknown_path_404(m: Model) {
    let srv = Opts::new(m).start();
    let mut c = client(&srv);
    let r = c
        .request(&Req::get("/nowhere"))
        .response(&format!("{m}: 404"));
    assert_eq!(r.status, 404, "{m}");
    assert_eq!(r.text(), "Not Found\n", "{m}");
}

/// A known path with the wrong method: 405 and `allow`.
fn wrong_method_405_with_allow(m: Model) {
    let srv = Opts::new(m).start();
    let mut c = client(&srv);
    for (req, allow) in [
        (Req::post("/hello/world", "x"), "GET, HEAD"),
        (Req::get("/reverse"), "POST"),
    ] {
        let what = format!("{m}: {} {}", req.method, req.path);
        let r = c.request(&req).response(&what);
        assert_eq!(r.status, 405, "{what}");
        assert_eq!(r.header("allow"), Some(allow), "{what}: {r:?}");
    }
}

/// `/test/slow` is offloaded to a job and answered.
fn slow_job_answered(m: Model) {
    let srv = Opts::new(m).start();
    let mut c = client(&srv);
    let r = c
        .request(&Req::get("/test/slow"))
        .response(&format!("{m}: slow"));
    assert_eq!(r.status, 200, "{m}");
    assert!(r.body.is_empty(), "{m}");
    let s = srv.wait_stats("the job counted", |s| s.jobs_done == 1);
    assert_eq!(s.jobs_running, 0, "{m}: {s:?}");
}

/// Several `/test/slow` streams on one connection are all answered; in the event models their
/// jobs run at once (two or more running together, as the `jobs_running` gauge shows), the
/// blocking models answer them in turn.
fn slow_streams_on_one_connection(m: Model) {
    const N: usize = 4;
    // Long enough jobs that a poll every 2 ms sees them overlap (a bound on nothing).
    let srv = Opts::new(m)
        .workers(4)
        .slow(Duration::from_millis(300))
        .start();
    let mut c = client(&srv);
    let ids: Vec<u32> = (0..N).map(|_| c.send(&Req::get("/test/slow"))).collect();
    if !m.caps().blocking {
        srv.wait_stats("two of the connection's jobs running at once", |s| {
            s.jobs_running >= 2
        });
    }
    for (id, o) in ids.iter().zip(c.wait_all(&ids)) {
        let r = o.response(&format!("{m}: stream {id}"));
        assert_eq!(r.status, 200, "{m}: stream {id}");
    }
    let s = srv.wait_stats("every job done", |s| s.jobs_done == N as u64);
    assert_eq!(s.requests, N as u64, "{m}: {s:?}");
}

/// `POST /reverse` whose JSON body comes in several DATA frames.
fn reverse_json_in_several_data_frames(m: Model) {
    let srv = Opts::new(m).start();
    let mut c = client(&srv);
    let body = br#"{"a": "hello", "b": [1, 2, 3], "c": "stressed"}"#;
    let req = Req::post("/reverse", &body[..])
        .field("content-type", "application/json")
        .chunked(7);
    let r = c.request(&req).response(&format!("{m}: reverse"));
    assert_eq!(r.status, 200, "{m}: {}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.text(), r#"{"data":["olleh",[3,2,1],"desserts"]}"#, "{m}");
    assert_eq!(r.header("content-type"), Some("application/json"), "{m}");
    // Bad JSON in pieces too: 400 with the reason.
    let r = c
        .request(&Req::post("/reverse", &br#"{"a": "#[..]).chunked(2))
        .response(&format!("{m}: bad JSON"));
    assert_eq!(r.status, 400, "{m}");
    assert!(r.text().starts_with("body is not valid JSON"), "{m}: {r:?}");
}

/// Largest body the limit cases allow.
const BODY_LIMIT: usize = 1000;

/// A body over `max_body_bytes` announced by `content-length` (or not), sent in DATA frames:
/// 413, and the connection still serves.
fn body_over_limit(m: Model, announce: bool) {
    let srv = Opts::new(m)
        .with_limits(|l| l.max_body_bytes = BODY_LIMIT)
        .start();
    let mut c = client(&srv);
    let body = vec![b' '; 4 * BODY_LIMIT];
    let mut req = Req::post("/reverse", body).chunked(BODY_LIMIT / 2);
    if announce {
        req = req.field("content-length", (4 * BODY_LIMIT).to_string());
    }
    let what = format!("{m}: content-length {announce}");
    let r = c.request(&req).response(&what);
    assert_eq!(
        r.status,
        413,
        "{what}: {}",
        String::from_utf8_lossy(&r.body)
    );
    // A body at the limit still passes (and reaches the application: 400, not JSON).
    let r = c
        .request(&Req::post("/reverse", vec![b' '; BODY_LIMIT]).chunked(300))
        .response(&what);
    assert_eq!(r.status, 400, "{what}: a body at the limit");
    let r = c.request(&Req::get("/")).response(&what);
    assert_eq!(r.text(), HELLO, "{what}");
}

fn body_over_limit_413_with_content_length(m: Model) {
    body_over_limit(m, true);
}

fn body_over_limit_413_without_content_length(m: Model) {
    body_over_limit(m, false);
}

/// A header list past SETTINGS_MAX_HEADER_LIST_SIZE (16 KiB by default, each field counted
/// with 32 bytes more), in HEADERS and CONTINUATION frames: 431, counted, the connection kept.
fn header_list_over_limit_431(m: Model) {
    let srv = Opts::new(m).start();
    let mut c = client(&srv);
    // `~` has a 13-bit Huffman code, so the value goes raw: 20,000 bytes are a HEADERS frame
    // and a CONTINUATION at the default 16 KiB frame size.
    let req = Req::get("/hello/world").field("x-big", vec![b'~'; 20_000]);
    let r = c.request(&req).response(&format!("{m}: 431"));
    assert_eq!(r.status, 431, "{m}: {}", String::from_utf8_lossy(&r.body));
    // Just under the limit: served.
    let req = Req::get("/hello/world").field("x-big", vec![b'~'; 15_000]);
    let r = c.request(&req).response(&format!("{m}: under the limit"));
    assert_eq!(r.text(), HELLO, "{m}");
    drop(c);
    let s = srv.wait_stats("the connection counted", |s| s.http2.connections == 1);
    assert_eq!(s.http2.oversized_heads, 1, "{m}: {:?}", s.http2);
}

/// A `:path` past `max_uri_bytes`: 414 (`h2::head::check_request` applies the HTTP/1.1 limit).
fn long_path_414(m: Model) {
    let srv = Opts::new(m).with_limits(|l| l.max_uri_bytes = 1024).start();
    let mut c = client(&srv);
    let long = format!("/hello/{}", "a".repeat(2000));
    let r = c.request(&Req::get(&long)).response(&format!("{m}: 414"));
    assert_eq!(r.status, 414, "{m}: {}", String::from_utf8_lossy(&r.body));
    let at_limit = format!("/{}", "a".repeat(1023));
    let r = c
        .request(&Req::get(&at_limit))
        .response(&format!("{m}: at the limit"));
    assert_eq!(r.status, 404, "{m}: a target at the limit");
}

/// `/stats` over HTTP/2: Prometheus text, counting the HTTP/2 connections that ended and
/// their streams (`berth_http2_*`).
fn stats_over_h2_counts_http2(m: Model) {
    let srv = Opts::new(m).start();
    let mut c = client(&srv);
    for path in ["/", "/hello/world", "/nowhere"] {
        c.request(&Req::get(path)).response(&format!("{m}: {path}"));
    }
    drop(c);
    srv.wait_stats("the first connection counted", |s| s.http2.connections == 1);
    let mut c = client(&srv);
    let r = c
        .request(&Req::get("/stats"))
        .response(&format!("{m}: stats"));
    assert_eq!(r.status, 200, "{m}");
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4"),
        "{m}"
    );
    let text = r.text();
    assert_eq!(
        metric(text, "berth_http2_connections_total"),
        1,
        "{m}:\n{text}"
    );
    assert_eq!(metric(text, "berth_http2_streams_total"), 3, "{m}:\n{text}");
    assert_eq!(metric(text, "berth_http2_refused_streams_total"), 0, "{m}");
    assert_eq!(metric(text, "berth_http2_oversized_heads_total"), 0, "{m}");
    assert!(
        text.contains("berth_http2_resets_total{by=\"client\"} 0"),
        "{m}:\n{text}"
    );
    // The /stats request counts itself.
    assert_eq!(metric(text, "berth_requests_total"), 4, "{m}:\n{text}");
    assert!(
        text.contains("berth_responses_total{status=\"404\"} 1"),
        "{m}:\n{text}"
    );
}

// Timeouts and the drain -----------------------------------------------------------------------

/// A client that never opens its window (SETTINGS_INITIAL_WINDOW_SIZE 0) and asks for a body
/// gets the head, no data, and is closed at the write timeout (not before it).
fn unopened_window_closed_at_write_timeout(m: Model) {
    let write = Duration::from_millis(300);
    let srv = Opts::new(m)
        .timeouts(timeouts(Duration::from_secs(10), write))
        .start();
    let asked = Instant::now();
    let mut c = client_with(&srv, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    c.auto_window(false);
    let id = c.send(&Req::get("/hello/world"));
    c.read_to_close()
        .unwrap_or_else(|e| panic!("{m}: a client with a shut window: {e}"));
    assert!(
        asked.elapsed() >= write,
        "{m}: closed before the write timeout: after {:?}, {:?}",
        asked.elapsed(),
        c.goaway()
    );
    match c.wait(id) {
        Outcome::Closed(_) => {}
        other => panic!("{m}: the body was sent into a shut window: {other:?}"),
    }
    let s = srv.wait_stats("the connection closed", |s| s.connections_open == 0);
    assert_eq!(s.http2.connections, 1, "{m}: {s:?}");
}

/// A preface that never completes is dropped at the header timeout: half of it, and the whole
/// preface without the SETTINGS frame that must follow it.
fn preface_never_completes_dropped_at_header_timeout(m: Model) {
    let header = Duration::from_millis(300);
    let srv = Opts::new(m)
        .timeouts(timeouts(header, Duration::from_secs(10)))
        .start();
    let preface = berth::proto::h2::PREFACE;
    for (what, bytes) in [
        ("half a preface", &preface[..12]),
        ("a preface without SETTINGS", preface),
    ] {
        // The clock starts before the connection: over TLS the server's header timer runs
        // from the handshake, before the preface's bytes.
        let sent = Instant::now();
        let mut conn = Conn::open(srv.addr, ca(srv.opts.tls));
        conn.write_all(bytes).unwrap();
        let mut got = Vec::new();
        let end = berth_testkit::read_until(&mut conn, &mut got, berth_testkit::LIMIT, |_| false)
            .unwrap_or_else(|e| panic!("{m}: {what}: {e}"));
        assert_eq!(
            end,
            berth_testkit::ReadEnd::Closed,
            "{m}: {what}: not closed"
        );
        assert!(
            sent.elapsed() >= header,
            "{m}: {what}: closed before the header timeout"
        );
        if bytes.len() < preface.len() && !srv.opts.tls {
            // Over h2c a prefix of the preface is also a prefix of an HTTP/1.1 request line
            // (`PRI * HTTP/2.0`): until it completes, the connection is HTTP/1.1's, whose
            // header timeout answers 408.
            assert!(
                got.starts_with(b"HTTP/1.1 408 "),
                "{m}: {what}: {:?}",
                String::from_utf8_lossy(&got)
            );
        } else {
            // HTTP/2's (ALPN h2, or the whole preface): GOAWAY before the close (RFC 9113
            // §6.8: an endpoint should always send one), after the server's SETTINGS.
            assert_eq!(
                last_frame(&got),
                Some(frame::kind::GOAWAY),
                "{m}: {what}: no GOAWAY before the close: {got:?}"
            );
        }
    }
}

/// The type of the last whole frame in `bytes` (frames from their start).
fn last_frame(mut bytes: &[u8]) -> Option<u8> {
    let mut last = None;
    while let Some(h) = frame::Header::parse(bytes) {
        let end = frame::HEADER_LEN + h.len as usize;
        if bytes.len() < end {
            break;
        }
        last = Some(h.kind);
        bytes = &bytes[end..];
    }
    last
}

/// A drain (the server stopping gracefully, as at SIGTERM) while streams are in flight: GOAWAY
/// NO_ERROR naming the last stream taken up, those streams answered, then the connection
/// closed, and the server's threads end. (`ModelServer` stops at once, so this case starts the
/// server through `berth::drive::serve` itself, to call `Server::drain`.)
fn drain_sends_goaway_and_finishes_in_flight(m: Model) {
    let opts = Opts::new(m).workers(4);
    let tls = opts.tls;
    let mut settings = opts.settings.clone();
    if tls {
        settings.common.listen.transport = Acceptor::Tls(test_tls().acceptor.clone());
    }
    let stats = settings.new_stats().expect("counters");
    let app = DemoConfig {
        slow_duration: Duration::from_millis(300),
        offload_slow: true,
        ..Default::default()
    };
    let (srv, addr) = berth::drive::serve(&settings, Demo::new(app, stats.clone()), stats.clone())
        .unwrap_or_else(|e| panic!("{m}: serve: {e}"));
    let addr = addr.tcp().expect("served on TCP");
    if m.needs().children_listen {
        let want = settings.listeners();
        assert!(
            berth_testkit::wait_for(berth_testkit::LIMIT, || server::listeners_on(addr.port())
                >= want),
            "{m}: not listening"
        );
    }
    let mut c = connect(addr, tls, &[]);
    let ids = [
        c.send(&Req::get("/test/slow")),
        c.send(&Req::get("/test/slow")),
    ];
    assert!(
        berth_testkit::wait_for(berth_testkit::LIMIT, || stats.snapshot().requests == 2),
        "{m}: the requests never reached the application: {:?}",
        stats.snapshot()
    );
    let (done, stopped) = std::sync::mpsc::channel();
    thread::spawn(move || {
        srv.drain(berth_testkit::LIMIT);
        srv.join();
        let _ = done.send(());
    });
    let outcomes = c.wait_all(&ids);
    // The GOAWAY may come after both answers (a blocking model notices the drain between
    // streams): read on to the close before looking for it.
    if !c.is_closed() {
        c.read_to_close()
            .unwrap_or_else(|e| panic!("{m}: after the drain: {e}"));
    }
    let goaway = c.goaway().cloned();
    let answered = outcomes
        .iter()
        .all(|o| matches!(o, Outcome::Answered(r) if r.status == 200));
    assert!(
        answered,
        "{m}: in-flight streams at the drain: {outcomes:?} (GOAWAY {goaway:?})"
    );
    let g = goaway.unwrap_or_else(|| panic!("{m}: no GOAWAY at the drain"));
    assert_eq!(g.code, code::NO_ERROR, "{m}: {g:?}");
    assert_eq!(g.last_stream, ids[1], "{m}: {g:?}");
    stopped
        .recv_timeout(berth_testkit::LIMIT)
        .unwrap_or_else(|_| panic!("{m}: the drain did not end"));
}
