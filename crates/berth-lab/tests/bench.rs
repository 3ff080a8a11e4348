//! `berth_lab::bench` against small test servers on 127.0.0.1: keep-alive, pipelining, a
//! connection per request, every response framing, and each kind of error the report counts.
//!
//! Every server listens on port 0 and runs on plain std threads; every server socket has read
//! and write timeouts, and every bench run is bounded by a request count or a short duration and
//! watched by a deadline, so a load generator that hangs fails its test instead of hanging it.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use berth_lab::bench::{self, BenchConfig, Limit, Report, RequestSpec, Target};

/// Longest a bench run may take before its test fails as hung.
const WATCHDOG: Duration = Duration::from_secs(8);

/// Read and write timeout of every server socket: only a guard against a stuck test.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(5);

const HELLO: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

// Test servers -----------------------------------------------------------------------------------

/// What a test server saw.
#[derive(Debug, Default)]
struct Stats {
    /// Connections accepted.
    accepted: AtomicU64,
    /// Complete requests read, over all connections.
    requests: AtomicU64,
    /// Most complete requests that one read finished.
    max_per_read: AtomicU64,
    /// Requests read on each connection, recorded when the connection ends.
    per_conn: Mutex<Vec<u64>>,
    /// Anything the server found wrong with what it received.
    problems: Mutex<Vec<String>>,
}

impl Stats {
    fn problem(&self, p: String) {
        self.problems.lock().unwrap().push(p);
    }

    fn problems(&self) -> Vec<String> {
        self.problems.lock().unwrap().clone()
    }
}

/// One request as read off the wire.
struct Request {
    /// Head and body, exactly as received.
    raw: Vec<u8>,
    /// The head, up to and including the blank line.
    head: String,
    body: Vec<u8>,
    /// Position among all requests the server read (0-based).
    index: u64,
    /// Position among the requests read on this connection (0-based).
    on_conn: u64,
}

impl Request {
    fn method(&self) -> &str {
        self.head.split(' ').next().unwrap_or("")
    }

    /// The value of header `name`, if present (first occurrence).
    fn header(&self, name: &str) -> Option<&str> {
        self.head.split("\r\n").skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

type Handler = dyn Fn(TcpStream, &Stats) + Send + Sync;

/// A listener on 127.0.0.1:0 with a thread per connection; stops accepting when dropped.
struct Server {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    accept: Option<thread::JoinHandle<()>>,
}

impl Server {
    fn start(handler: impl Fn(TcpStream, &Stats) + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let accept = {
            let (stats, stop) = (stats.clone(), stop.clone());
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    stream.set_read_timeout(Some(SOCKET_TIMEOUT)).unwrap();
                    stream.set_write_timeout(Some(SOCKET_TIMEOUT)).unwrap();
                    stream.set_nodelay(true).unwrap();
                    stats.accepted.fetch_add(1, SeqCst);
                    let (stats, handler) = (stats.clone(), handler.clone());
                    thread::spawn(move || handler(stream, &stats));
                }
            })
        };
        Server {
            addr,
            stats,
            stop,
            accept: Some(accept),
        }
    }

    /// A server that reads requests and calls `respond` for each, in order; `respond` writes
    /// whatever it likes and returns whether to keep reading on the connection.
    fn requests(
        respond: impl Fn(&Request, &mut TcpStream, &Stats) -> bool + Send + Sync + 'static,
    ) -> Server {
        Server::start(move |stream, stats| serve_requests(stream, stats, &respond))
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        // Wakes the blocking accept so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Splits complete requests off the front of `buf` (framed by Content-Length, if any).
fn take_request(buf: &mut Vec<u8>) -> Option<(Vec<u8>, String, Vec<u8>)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length = head
        .split("\r\n")
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    if buf.len() < end + length {
        return None;
    }
    let raw: Vec<u8> = buf.drain(..end + length).collect();
    let body = raw[end..].to_vec();
    Some((raw, head, body))
}

fn serve_requests(
    mut stream: TcpStream,
    stats: &Stats,
    respond: &(impl Fn(&Request, &mut TcpStream, &Stats) -> bool + ?Sized),
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let mut on_conn = 0;
    'conn: loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut in_this_read = 0;
        while let Some((raw, head, body)) = take_request(&mut buf) {
            in_this_read += 1;
            stats.max_per_read.fetch_max(in_this_read, SeqCst);
            let req = Request {
                raw,
                head,
                body,
                index: stats.requests.fetch_add(1, SeqCst),
                on_conn,
            };
            on_conn += 1;
            if !respond(&req, &mut stream, stats) {
                break 'conn;
            }
        }
    }
    stats.per_conn.lock().unwrap().push(on_conn);
}

/// Writes `bytes`; false (end the connection) if the client is gone.
fn send(stream: &mut TcpStream, bytes: &[u8]) -> bool {
    stream.write_all(bytes).is_ok()
}

// Running the bench ------------------------------------------------------------------------------

/// A keep-alive GET run on `url`, bounded by `limit`, with a short timeout and no progress line.
fn config(url: &str, connections: usize, threads: usize, limit: Limit) -> BenchConfig {
    let mut c = BenchConfig::new(Target::parse(url).unwrap());
    c.connections = connections;
    c.threads = threads;
    c.limit = limit;
    c.timeout = Duration::from_secs(2);
    c.progress = false;
    c
}

/// Runs the bench on another thread and fails the test if it has not returned within
/// [`WATCHDOG`] (the stuck thread is left behind; the test process ends it).
fn run(config: &BenchConfig) -> Report {
    let (tx, rx) = mpsc::channel();
    let config = config.clone();
    thread::spawn(move || {
        let _ = tx.send(bench::run(&config));
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(r) => r.expect("bench run failed"),
        Err(_) => panic!("bench::run did not return within {WATCHDOG:?}"),
    }
}

/// A port on 127.0.0.1 with nothing listening on it.
fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Waits until `stats.accepted` reaches `n`, or two seconds pass.
fn wait_accepted(stats: &Stats, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while stats.accepted.load(SeqCst) < n && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
}

// 1. Keep-alive ----------------------------------------------------------------------------------

#[test]
fn keep_alive_counts_every_response_exactly() {
    // Every request must be the same bytes; the first one is checked after the run, once the
    // server's address is known.
    let first: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
    let seen = first.clone();
    let srv = Server::requests(move |req, stream, stats| {
        if req.on_conn == 0 {
            // Hold each connection's first answer until all four are open, so every
            // connection gets requests to send however the threads are scheduled.
            wait_accepted(stats, 4);
        }
        let mut seen = seen.lock().unwrap();
        if *seen.get_or_insert_with(|| req.raw.clone()) != req.raw {
            stats.problem(format!(
                "request {} differs: {:?}",
                req.index,
                String::from_utf8_lossy(&req.raw)
            ));
        }
        drop(seen);
        send(stream, HELLO)
    });
    let c = config(&srv.url(), 4, 2, Limit::Requests(1000));
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.responses, 1000);
    assert_eq!(t.errors.total(), 0, "{:?}", t.errors);
    assert_eq!(t.connects, 4);
    assert_eq!(
        t.statuses.iter().map(|(s, n)| (*s, *n)).collect::<Vec<_>>(),
        [(200, 1000)]
    );
    assert_eq!(t.bytes, 1000 * HELLO.len() as u64);
    assert_eq!(srv.stats.requests.load(SeqCst), 1000);
    assert_eq!(srv.stats.accepted.load(SeqCst), 4);
    assert_eq!(srv.stats.problems(), Vec::<String>::new());
    assert_eq!(
        first.lock().unwrap().as_deref(),
        Some(format!("GET / HTTP/1.1\r\nHost: {}\r\n\r\n", srv.addr).as_bytes())
    );
    assert_eq!(
        (r.shape.connections, r.shape.threads, r.shape.pipeline),
        (4, 2, 1)
    );

    let l = r.latency();
    assert!(
        l.min >= 1 && l.min <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.max,
        "{l:?}"
    );
    assert!(r.requests_per_sec() > 0.0);

    let j = r.to_json();
    assert_eq!(j["requests"], 1000);
    assert_eq!(j["connects"], 4);
    assert_eq!(j["bytes"], 1000 * HELLO.len() as u64);
    assert_eq!(j["status"]["200"], 1000);
    assert_eq!(j["keep_alive"], true);
    for kind in ["connect", "read", "write", "timeout", "status", "protocol"] {
        assert_eq!(j["errors"][kind], 0, "{kind}");
    }
    let table = r.to_table();
    assert!(
        table.contains("4 connections, 2 threads, keep-alive"),
        "{table}"
    );
    assert!(table.contains("status       200: 1000"), "{table}");
    assert!(table.contains("errors       0 (connect 0"), "{table}");
}

// 2. Pipelining ----------------------------------------------------------------------------------

#[test]
fn pipelined_eight_deep() {
    let srv = Server::requests(|_, stream, _| send(stream, HELLO));
    let mut c = config(&srv.url(), 4, 2, Limit::Requests(800));
    c.pipeline = 8;
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.responses, 800);
    assert_eq!(t.errors.total(), 0, "{:?}", t.errors);
    assert_eq!(t.statuses.get(&200), Some(&800));
    assert_eq!(t.bytes, 800 * HELLO.len() as u64);
    assert!(t.connects >= 1 && t.connects <= 4, "{}", t.connects);
    assert_eq!(srv.stats.requests.load(SeqCst), 800);
    let deepest = srv.stats.max_per_read.load(SeqCst);
    assert!(
        deepest > 1,
        "no read held more than one request: not pipelined"
    );
    assert!(
        deepest <= 8,
        "{deepest} requests in one read, deeper than the pipeline"
    );
    // Each connection sends whole batches of 8 (800 is a multiple of 8 × 4). A connection's
    // count is recorded when the client has closed it, which is at the end of the run.
    let deadline = Instant::now() + Duration::from_secs(2);
    while srv.stats.per_conn.lock().unwrap().len() < t.connects as usize
        && Instant::now() < deadline
    {
        thread::sleep(Duration::from_millis(1));
    }
    let per_conn = srv.stats.per_conn.lock().unwrap().clone();
    assert_eq!(per_conn.iter().sum::<u64>(), 800, "{per_conn:?}");
    assert!(per_conn.iter().all(|n| n % 8 == 0), "{per_conn:?}");
    assert!(r.to_table().contains("keep-alive, pipelined 8 deep"));
}

#[test]
fn requests_pipelined_behind_a_close_are_sent_again() {
    // Each connection answers 3 of a batch of 8, the third with `Connection: close`. The load
    // loop says the 5 left unanswered "were refused politely, not lost: the next batch on the
    // next connection sends them again", and `Limit::Requests` ends a run "after this many
    // requests have been answered or have failed".
    let srv = Server::requests(|req, stream, _| {
        if req.on_conn < 2 {
            send(stream, HELLO)
        } else {
            send(
                stream,
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
            false
        }
    });
    let mut c = config(&srv.url(), 1, 1, Limit::Requests(80));
    c.pipeline = 8;
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.errors.total(), 0, "{:?}", t.errors);
    assert_eq!(
        t.responses,
        80,
        "{} connects, {} requests answered by the server",
        t.connects,
        srv.stats.requests.load(SeqCst)
    );
}

// 3. A connection per request --------------------------------------------------------------------

#[test]
fn connection_per_request() {
    let srv = Server::requests(|req, stream, stats| {
        if req.header("connection") != Some("close") {
            stats.problem(format!("no Connection: close in {:?}", req.head));
        }
        if req.on_conn != 0 {
            stats.problem("a second request on a closing connection".to_owned());
        }
        send(
            stream,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        );
        false
    });
    let mut c = config(&srv.url(), 5, 2, Limit::Requests(200));
    c.keep_alive = false;
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.responses, 200);
    assert_eq!(t.errors.total(), 0, "{:?}", t.errors);
    assert_eq!(t.connects, 200);
    assert_eq!(t.statuses.get(&200), Some(&200));
    assert_eq!(srv.stats.requests.load(SeqCst), 200);
    assert_eq!(srv.stats.accepted.load(SeqCst), 200);
    assert_eq!(srv.stats.problems(), Vec::<String>::new());
    assert_eq!(r.to_json()["keep_alive"], false);
    assert!(r.to_table().contains("a connection per request"));
}

// 4. Response framings ---------------------------------------------------------------------------

const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
    5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";

#[test]
fn chunked_responses_split_across_writes() {
    let srv = Server::requests(|_, stream, _| {
        // Splits inside the status line, inside the headers, inside a chunk-size line and
        // inside the trailer.
        let cuts = [0, 7, 30, 51, 70, CHUNKED.len() - 3, CHUNKED.len()];
        for w in cuts.windows(2) {
            if !send(stream, &CHUNKED[w[0]..w[1]]) {
                return false;
            }
            thread::sleep(Duration::from_millis(1));
        }
        true
    });
    let c = config(&srv.url(), 3, 2, Limit::Requests(60));
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.responses, 60);
    assert_eq!(t.errors.total(), 0, "{:?}", t.errors);
    assert_eq!(t.statuses.get(&200), Some(&60));
    assert_eq!(t.bytes, 60 * CHUNKED.len() as u64);
    assert_eq!(srv.stats.requests.load(SeqCst), 60);
    assert!(t.connects <= 3);
}

const UNTIL_CLOSE: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close";

/// A connection-per-request run against a server that answers with a body delimited by the
/// close, closing `delay` after the body.
fn close_delimited_run(delay: Duration) {
    let srv = Server::requests(move |_, stream, _| {
        send(stream, UNTIL_CLOSE);
        thread::sleep(delay);
        false
    });
    let mut c = config(&srv.url(), 4, 2, Limit::Requests(40));
    c.keep_alive = false;
    c.timeout = Duration::from_millis(500);
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.errors.total(), 0, "{:?}", t.errors);
    assert_eq!(t.responses, 40);
    assert_eq!(t.connects, 40);
    assert_eq!(t.statuses.get(&200), Some(&40));
    assert_eq!(t.bytes, 40 * UNTIL_CLOSE.len() as u64);
    assert_eq!(srv.stats.requests.load(SeqCst), 40);
}

#[test]
fn body_delimited_by_a_close_that_follows_the_body() {
    // The close comes well after the body, so the client sees it as a separate event.
    close_delimited_run(Duration::from_millis(20));
}

#[test]
fn body_delimited_by_an_immediate_close() {
    close_delimited_run(Duration::ZERO);
}

// 5. Non-2xx -------------------------------------------------------------------------------------

#[test]
fn non_2xx_responses_are_status_errors() {
    let srv = Server::requests(|req, stream, _| {
        if req.index % 2 == 1 {
            send(
                stream,
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
            )
        } else {
            send(stream, HELLO)
        }
    });
    let c = config(&srv.url(), 2, 1, Limit::Requests(200));
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.responses, 200);
    assert_eq!(t.statuses.get(&200), Some(&100));
    assert_eq!(t.statuses.get(&503), Some(&100));
    assert_eq!(t.errors.status, 100);
    assert_eq!(t.errors.total(), 100, "{:?}", t.errors);
    let j = r.to_json();
    assert_eq!(j["errors"]["status"], 100);
    assert_eq!(j["status"]["503"], 100);
    assert!(r.to_table().contains("200: 100, 503: 100"));
}

// 6. Timeouts ------------------------------------------------------------------------------------

#[test]
fn a_server_that_never_answers_times_out() {
    let srv = Server::start(|mut stream, _| {
        // Reads (and ignores) until the client gives up and closes.
        let mut buf = [0u8; 4096];
        while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
    });
    let mut c = config(
        &srv.url(),
        2,
        1,
        Limit::Duration(Duration::from_millis(700)),
    );
    c.timeout = Duration::from_millis(200);
    // A run that went on past its 700 ms would pile up more timeouts than the count below
    // allows (and one that never ended fails at run's watchdog).
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.responses, 0);
    assert!(t.errors.timeout >= 2, "{:?}", t.errors);
    // 700 ms at one timeout per 200 ms is at most 4 per connection.
    assert!(t.errors.timeout <= 8, "{:?}", t.errors);
    assert_eq!(t.errors.total(), t.errors.timeout, "{:?}", t.errors);
    assert!(t.connects >= 2, "{}", t.connects);
    assert_eq!(r.latency().max, 0);
    assert_eq!(r.to_json()["errors"]["timeout"], t.errors.timeout);
}

// 7. Connect errors ------------------------------------------------------------------------------

#[test]
fn nothing_listening_is_connect_errors_for_a_duration() {
    let url = format!("http://127.0.0.1:{}/", dead_port());
    let c = config(&url, 2, 2, Limit::Duration(Duration::from_millis(300)));
    let started = Instant::now();
    let r = run(&c);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let t = &r.tally;
    assert!(t.errors.connect > 0, "{:?}", t.errors);
    assert_eq!(t.errors.total(), t.errors.connect, "{:?}", t.errors);
    assert_eq!((t.responses, t.connects, t.bytes), (0, 0, 0));
}

#[test]
fn nothing_listening_spends_the_request_budget() {
    // Each failed connect spends the request it was made for, so a count-bounded run ends.
    let url = format!("http://127.0.0.1:{}/", dead_port());
    let c = config(&url, 2, 1, Limit::Requests(20));
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.errors.connect, 20, "{:?}", t.errors);
    assert_eq!(t.errors.total(), 20, "{:?}", t.errors);
    assert_eq!((t.responses, t.connects), (0, 0));
}

// 8. Read errors ---------------------------------------------------------------------------------

/// A keep-alive run against a server that sends a head promising 100 bytes and 10 of them,
/// then closes `delay` later.
fn cut_short_run(delay: Duration) {
    let srv = Server::requests(move |_, stream, _| {
        send(
            stream,
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789",
        );
        thread::sleep(delay);
        false
    });
    let mut c = config(&srv.url(), 2, 1, Limit::Requests(20));
    c.timeout = Duration::from_millis(500);
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.responses, 0);
    assert!(t.errors.read > 0, "{:?}", t.errors);
    assert_eq!(t.errors.read, 20, "{:?}", t.errors);
    assert_eq!(t.errors.total(), 20, "{:?}", t.errors);
    assert_eq!(srv.stats.requests.load(SeqCst), 20);
}

#[test]
fn a_body_cut_short_is_a_read_error() {
    cut_short_run(Duration::from_millis(20));
}

#[test]
fn a_body_cut_short_by_an_immediate_close_is_a_read_error() {
    cut_short_run(Duration::ZERO);
}

// 9. Protocol errors -----------------------------------------------------------------------------

#[test]
fn garbage_is_a_protocol_error() {
    let srv = Server::requests(|_, stream, _| send(stream, b"garbage\r\n\r\n"));
    let c = config(&srv.url(), 2, 1, Limit::Requests(20));
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.responses, 0);
    assert!(t.errors.protocol > 0, "{:?}", t.errors);
    assert_eq!(t.errors.protocol, 20, "{:?}", t.errors);
    assert_eq!(t.errors.total(), 20, "{:?}", t.errors);
    assert_eq!(r.to_json()["errors"]["protocol"], 20);
}

// 10. Methods and bodies -------------------------------------------------------------------------

#[test]
fn post_sends_its_body_with_content_length() {
    const BODY: &[u8] = b"{\"k\":\"v\"}";
    let expected = Arc::new(Mutex::new(Vec::new()));
    let want = expected.clone();
    let srv = Server::requests(move |req, stream, stats| {
        let problem = if req.method() != "POST" {
            Some(format!("method {:?}", req.method()))
        } else if req.header("content-length") != Some("9") {
            Some(format!("Content-Length {:?}", req.header("content-length")))
        } else if req.header("x-test") != Some("yes") {
            Some(format!("X-Test {:?}", req.header("x-test")))
        } else if req.body != BODY {
            Some(format!("body {:?}", String::from_utf8_lossy(&req.body)))
        } else if req.raw != *want.lock().unwrap() {
            Some(format!("request {:?}", String::from_utf8_lossy(&req.raw)))
        } else {
            None
        };
        if let Some(p) = problem {
            stats.problem(p);
        }
        send(stream, b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
    });
    let mut c = config(&srv.url(), 2, 2, Limit::Requests(100));
    c.request = RequestSpec {
        method: "POST".to_owned(),
        headers: vec![("X-Test".to_owned(), "yes".to_owned())],
        body: BODY.to_vec(),
    };
    *expected.lock().unwrap() = format!(
        "POST / HTTP/1.1\r\nHost: {}\r\nX-Test: yes\r\nContent-Length: 9\r\n\r\n{{\"k\":\"v\"}}",
        srv.addr
    )
    .into_bytes();
    assert_eq!(c.request.encode(&c.target, true), *expected.lock().unwrap());
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(srv.stats.problems(), Vec::<String>::new());
    assert_eq!(t.responses, 100);
    assert_eq!(t.statuses.get(&201), Some(&100));
    assert_eq!(t.errors.total(), 0, "{:?}", t.errors);
    assert_eq!(srv.stats.requests.load(SeqCst), 100);
    assert_eq!(r.to_json()["method"], "POST");
}

#[test]
fn head_responses_have_no_body() {
    const HEAD_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n";
    let srv = Server::requests(|req, stream, stats| {
        if req.method() != "HEAD" {
            stats.problem(format!("method {:?}", req.method()));
        }
        send(stream, HEAD_RESPONSE)
    });
    let mut c = config(&srv.url(), 2, 1, Limit::Requests(100));
    c.request.method = "HEAD".to_owned();
    // A client that waited for a body would time out on each response: errors, counted below.
    let r = run(&c);
    let t = &r.tally;
    assert_eq!(t.responses, 100);
    assert_eq!(t.errors.total(), 0, "{:?}", t.errors);
    assert_eq!(t.bytes, 100 * HEAD_RESPONSE.len() as u64);
    assert_eq!(srv.stats.requests.load(SeqCst), 100);
    assert_eq!(srv.stats.problems(), Vec::<String>::new());
}

// 11. Usage errors -------------------------------------------------------------------------------

#[test]
fn bad_configurations_are_refused_before_any_load() {
    let url = format!("http://127.0.0.1:{}/", dead_port());
    let base = {
        let mut c = config(&url, 2, 1, Limit::Requests(1));
        c.timeout = Duration::from_millis(100);
        c
    };
    let refused = |c: &BenchConfig, what: &str| match bench::run(c) {
        Err(e) => assert!(!e.is_empty(), "{what}"),
        Ok(r) => panic!("{what}: ran instead of refusing: {:?}", r.tally.errors),
    };
    refused(
        &BenchConfig {
            connections: 0,
            ..base.clone()
        },
        "0 connections",
    );
    refused(
        &BenchConfig {
            pipeline: 0,
            ..base.clone()
        },
        "pipeline 0",
    );
    refused(
        &BenchConfig {
            limit: Limit::Requests(0),
            ..base.clone()
        },
        "0 requests",
    );
    refused(
        &BenchConfig {
            limit: Limit::Duration(Duration::ZERO),
            ..base.clone()
        },
        "0 s",
    );
    for method in ["GE T", "", "GET\r\n"] {
        let mut c = base.clone();
        c.request.method = method.to_owned();
        refused(&c, &format!("method {method:?}"));
    }
    let mut c = base.clone();
    c.request.headers = vec![("X-A".to_owned(), "1\r\nInjected: 1".to_owned())];
    refused(&c, "header value with a line break");
    let mut c = base.clone();
    c.request.headers = vec![("Bad Name".to_owned(), "1".to_owned())];
    refused(&c, "header name with a space");
    // The same base configuration runs (and fails to connect) when nothing is wrong with it.
    let r = run(&base);
    assert_eq!(r.tally.errors.connect, 1, "{:?}", r.tally.errors);
    // https:// is measured since issue 16; a scheme berth does not speak is refused.
    assert!(Target::parse("ftp://127.0.0.1/").is_err());
}
