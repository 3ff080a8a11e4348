//! Overload and failure behaviour of the `evloop` driver over real sockets: a full worker queue
//! answers 503 with `Retry-After`, a panicking job answers 500 and leaves its worker alive, and
//! the header, body, idle and write timeouts each end the connection they should.

#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth::drive::{Service, Timeouts};
use berth::proto::http::{Handled, Handler, Job, Reply, Request, Response};
use server::{get_request, ModelServer, Opts};

/// A service whose `/sleep` offloads a job that sleeps, and `/panic` one that panics.
#[derive(Clone)]
struct Jobs;

struct JobsHandler;

enum TestJob {
    Sleep(Duration),
    Panic,
}

impl Job for TestJob {
    fn run(self) -> Reply {
        match self {
            TestJob::Sleep(d) => {
                std::thread::sleep(d);
                Reply::empty(200)
            }
            TestJob::Panic => panic!("a job that fails on purpose"),
        }
    }
}

impl Service for Jobs {
    type Handler = JobsHandler;
    fn handler(&self, _: usize) -> JobsHandler {
        JobsHandler
    }
}

impl Handler for JobsHandler {
    type Job = TestJob;
    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<TestJob> {
        match req.path {
            "/sleep" => Handled::Offload(TestJob::Sleep(Duration::from_millis(300))),
            "/panic" => Handled::Offload(TestJob::Panic),
            _ => {
                res.send(200, "text/plain", b"ok");
                Handled::Done
            }
        }
    }
}

/// `evloop` (one worker) serving [`Jobs`].
fn start(opts: Opts) -> ModelServer {
    opts.start_service(|_| Jobs)
}

#[test]
fn full_queue_is_answered_503_with_retry_after() {
    let srv = start(
        Opts::evloop()
            .workers(1)
            .with_common(|c| c.queue_capacity = 1),
    );
    // One job runs, one waits in the queue: the third finds it full.
    let mut busy = srv.client();
    busy.send(get_request("/sleep").as_bytes());
    server::wait_for(Duration::from_secs(5), || srv.snapshot().jobs_running == 1);
    let mut queued = srv.client();
    queued.send(get_request("/sleep").as_bytes());
    server::wait_for(Duration::from_secs(5), || srv.snapshot().jobs_queued == 1);
    let mut refused = srv.client();
    refused.send(get_request("/sleep").as_bytes());
    let r = refused.read_response();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("Retry-After"), Some("1"));
    // The refusal did not close the connection: it still serves.
    assert_eq!(refused.get("/").status, 200);
    assert_eq!(busy.read_response().status, 200);
    assert_eq!(queued.read_response().status, 200);
    let snap = srv.snapshot();
    assert_eq!(snap.jobs_rejected, 1, "{snap:?}");
}

#[test]
fn panicking_job_is_answered_500_and_the_worker_survives() {
    let srv = start(Opts::evloop().workers(1));
    let mut c = srv.client();
    for _ in 0..3 {
        assert_eq!(c.get("/panic").status, 500);
    }
    // The only worker still runs jobs.
    assert_eq!(c.get("/sleep").status, 200);
    assert_eq!(srv.snapshot().jobs_done, 4);
}

fn with_timeouts(t: Timeouts) -> ModelServer {
    start(Opts::evloop().timeouts(t))
}

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(30);

#[test]
fn header_timeout_runs_from_the_first_byte_and_answers_408() {
    let srv = with_timeouts(Timeouts {
        header: SHORT,
        ..Timeouts::default()
    });
    let mut c = srv.client();
    let started = Instant::now();
    // Dribbling bytes does not extend the deadline (slowloris): a byte every 50 ms, far more
    // often than the header timeout, for up to 20 s. A deadline that each byte renewed would
    // never pass, so the 408 must come while the head is still dribbling.
    let head: Vec<u8> = [&b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "[..], &[b'a'; 400]].concat();
    let mut sent = 0;
    for b in &head {
        if c.stream.write_all(&[*b]).is_err() {
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(50));
        if answered(c.stream.socket()) {
            break;
        }
    }
    assert!(
        sent < head.len(),
        "no answer while the head dribbled ({sent} bytes over {:?})",
        started.elapsed()
    );
    c.expect_refusal(408, "a head dribbled past the header timeout");
    assert!(started.elapsed() >= SHORT, "408 before the header timeout");
}

/// Whether the server has sent something (or closed): a peek that does not wait.
fn answered(s: &std::net::TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let got = s.peek(&mut [0u8; 1]);
    s.set_nonblocking(false).unwrap();
    match got {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

#[test]
fn body_timeout_answers_408() {
    let srv = with_timeouts(Timeouts {
        body: SHORT,
        ..Timeouts::default()
    });
    let mut c = srv.client();
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
    c.expect_refusal(408, "a body stalled past the body timeout");
}

#[test]
fn idle_keep_alive_connection_is_closed_silently() {
    let srv = with_timeouts(Timeouts {
        idle: SHORT,
        ..Timeouts::default()
    });
    let mut c = srv.client();
    assert_eq!(c.get("/").status, 200);
    let mut rest = Vec::new();
    let _ = c.stream.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "no bytes after the idle timeout, just EOF: {rest:?}"
    );
    server::wait_for(Duration::from_secs(5), || {
        srv.snapshot().connections_open == 0
    });
}

#[test]
fn a_peer_that_stops_reading_is_dropped_after_the_write_timeout() {
    let t = Timeouts {
        write: SHORT,
        idle: LONG,
        ..Timeouts::default()
    };
    let srv = with_timeouts(t);
    let mut c = srv.client();
    // Pipeline far more responses than the socket buffers hold, and never read them.
    let burst = get_request("/").repeat(200_000);
    let _ = c
        .stream
        .socket()
        .set_write_timeout(Some(Duration::from_secs(5)));
    let _ = c.stream.write_all(burst.as_bytes());
    let gone = server::wait_for(Duration::from_secs(10), || {
        srv.snapshot().connections_open == 0
    });
    assert!(gone, "{:?}", srv.snapshot());
}

/// Normal clients are served while 300 connections dribble their heads (a header timeout of
/// an hour keeps every one of them open): each normal request is answered while the server
/// holds all 300 open, which a server that read one connection at a time could not do.
#[test]
fn slowloris_does_not_delay_normal_clients() {
    let t = Timeouts {
        header: Duration::from_secs(3600),
        ..Timeouts::default()
    };
    let srv = with_timeouts(t);
    let addr = srv.addr;
    // 300 connections each dribbling a header byte every 100 ms, from one thread, until told
    // to stop.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dribbler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut conns: Vec<std::net::TcpStream> = (0..300)
                .filter_map(|_| std::net::TcpStream::connect(addr).ok())
                .collect();
            let head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let byte = head.get(i).copied().unwrap_or(b'a');
                for c in &mut conns {
                    let _ = c.write_all(&[byte]);
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            conns.len()
        })
    };
    srv.wait_stats("300 slowloris connections open", |s| {
        s.connections_open >= 300
    });
    for i in 0..50 {
        let mut c = srv.client();
        assert_eq!(c.get("/").status, 200, "normal request {i}");
        let s = srv.snapshot();
        assert!(
            s.connections_open >= 300,
            "normal request {i}: the slowloris connections were not all held: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(dribbler.join().unwrap(), 300);
}
