//! Deferred jobs and streamed bodies, in every model, over real sockets: a job answered later
//! by another thread (as a Python ASGI app's event loop answers), whose body is pushed in
//! chunks as it is made. The body arrives whole and in order (chunked for HTTP/1.1, ended by
//! the close for HTTP/1.0, nothing for HEAD), the connection goes on with the next request, a
//! slow reader holds the producer back instead of filling memory, a client that leaves stops
//! the producer, and an answer dropped unanswered is a 500, not a hung connection. Request
//! bodies stream the other way: a handler that asks for it gets the body while it arrives
//! (in the models that wait on readiness; the blocking ones hand it over whole).

#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use berth::drive::{Model, Service};
use berth::proto::http::{body_stream, Answer, Handled, Handler, Job, Reply, Request, Response};
use berth::proto::upgrade::{Flow, Switch};
use server::{ModelServer, Opts};

use berth_testkit::{pattern, per_model, ReadEnd};

// One test per case and model of the registry (`case::uring`): see `per_model!`.
berth::with_models!(per_model! {
    a_streamed_reply_arrives_whole_and_the_connection_goes_on,
    http10_ends_a_stream_with_the_close_and_head_gets_no_body,
    a_slow_reader_holds_the_producer_back_and_loses_nothing,
    a_client_that_leaves_mid_stream_stops_the_producer,
    an_answer_dropped_unanswered_is_a_500,
    a_request_body_streams_to_its_job_as_it_arrives,
    an_answer_before_the_body_closes_the_connection_after_it,
    a_deferred_job_switches_protocols_and_the_protocol_is_woken_from_outside,
    a_streamed_reply_arrives_whole_over_http2,
    a_streamed_reply_arrives_whole_over_http2_tls,
    trailers_follow_the_body_over_http11,
    trailers_end_the_stream_over_http2,
    trailers_end_the_stream_over_http2_tls,
    a_file_reply_is_sent_from_the_file_over_http11,
    a_file_reply_is_sent_from_the_file_over_http2,
    a_file_reply_is_sent_from_the_file_over_http2_tls,
});

/// What the producers saw, shared with the tests.
#[derive(Default)]
struct Seen {
    /// Pushes that found the stream full.
    full: AtomicUsize,
    /// Producers that found their connection gone.
    gone: AtomicUsize,
    /// Request body bytes the uploads have taken so far.
    taken: AtomicUsize,
    /// Uploads whose body was cut short (aborted).
    aborted: AtomicUsize,
}

#[derive(Clone)]
struct Streams(Arc<Seen>);

struct StreamsHandler(Arc<Seen>);

/// What a request asks the producer thread to do.
enum Work {
    /// `count` chunks of `size` bytes (byte `i % 251` of the body), `pause` apart; with
    /// `trailers`, ended with `grpc-status: 0` and the body's `x-sum`.
    Stream {
        count: usize,
        size: usize,
        pause: Duration,
        trailers: bool,
    },
    /// One whole reply, after a pause; with `trailers`, the same two.
    Whole { trailers: bool },
    /// A reply whose body is `len` bytes of a file (`Reply::file`), from `offset` on: what
    /// an ASGI app's `http.response.pathsend` sends.
    File { len: usize, offset: usize },
    /// Drop the answer without answering.
    Drop,
    /// Switch to the `ticker` protocol, then send `ticks` lines on its own, `pause` apart.
    Switch { ticks: usize },
    /// Read the request body (streamed, or whole), `pause` between reads; answer its length
    /// and checksum. With `early`, answer before reading any of it.
    Upload {
        stream: Option<berth::proto::http::BodyStream>,
        whole: Vec<u8>,
        pause: Duration,
        early: bool,
    },
}

struct Deferred {
    work: Work,
    seen: Arc<Seen>,
}

impl Job for Deferred {
    const DEFERRED: bool = true;

    fn run(self) -> Reply {
        berth::drive::blocking::run_here(self)
    }

    fn start(self, answer: Answer) {
        std::thread::spawn(move || produce(self.work, answer, &self.seen));
    }
}

/// The application: answers on its own thread, as another event loop would.
fn produce(work: Work, answer: Answer, seen: &Seen) {
    let (count, size, pause, trailers) = match work {
        Work::Whole { trailers } => {
            std::thread::sleep(Duration::from_millis(20));
            let mut reply = Reply::new(200, "text/plain", b"whole".to_vec());
            if trailers {
                reply = reply.with_trailers(sum_trailers(b"whole")).unwrap();
            }
            return answer.reply(reply);
        }
        Work::Drop => return drop(answer),
        Work::File { len, offset } => {
            let file = std::fs::File::open(reply_file()).unwrap();
            let reply = Reply::file(200, file, offset as u64, (len - offset) as u64)
                .with_field("Content-Type", b"application/octet-stream")
                .unwrap();
            return answer.reply(reply);
        }
        Work::Switch { ticks } => return switch(ticks, answer),
        Work::Upload {
            stream,
            whole,
            pause,
            early,
        } => return upload(stream, whole, pause, early, answer, seen),
        Work::Stream {
            count,
            size,
            pause,
            trailers,
        } => (count, size, pause, trailers),
    };
    let (writer, stream) = body_stream();
    let (room_tx, room_rx) = mpsc::channel();
    writer.on_room(move || {
        let _ = room_tx.send(());
    });
    let reply = Reply::streamed(200, pattern(0, 5), stream)
        .with_field("Content-Type", b"application/octet-stream")
        .unwrap();
    answer.reply(reply);
    let mut at = 5;
    for _ in 0..count {
        std::thread::sleep(pause);
        match writer.push(pattern(at, size)) {
            Ok(true) => {}
            Ok(false) => {
                seen.full.fetch_add(1, Ordering::SeqCst);
                // Backpressure: wait for the connection to take some.
                let _ = room_rx.recv_timeout(Duration::from_secs(20));
            }
            Err(_) => {
                seen.gone.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
        at += size;
    }
    if trailers {
        writer.end_with(sum_trailers(&pattern(0, at))).unwrap();
    } else {
        writer.end();
    }
}

/// The file `Work::File` replies from: 3 MiB of `pattern`, more than any window or buffer,
/// written once per test process under cargo's target tmp dir (a forked model's child uses
/// its parent's if the parent made it before the fork, else makes its own).
fn reply_file() -> &'static std::path::Path {
    static MADE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("berth-reply-file-{}", std::process::id()));
        std::fs::write(&path, pattern(0, REPLY_FILE)).unwrap();
        path
    })
}

const REPLY_FILE: usize = 3 << 20;

/// The trailers a producer ends with: a gRPC status and the body's sum, known only at the end.
fn sum_trailers(body: &[u8]) -> Vec<(String, Vec<u8>)> {
    vec![
        ("grpc-status".to_owned(), b"0".to_vec()),
        ("X-Sum".to_owned(), sum(body).to_string().into_bytes()),
    ]
}

/// Reads a request body as it arrives and answers `len=N sum=S`.
fn upload(
    stream: Option<berth::proto::http::BodyStream>,
    whole: Vec<u8>,
    pause: Duration,
    early: bool,
    answer: Answer,
    seen: &Seen,
) {
    let summary = |len: usize, sum: u64| format!("len={len} sum={sum}").into_bytes();
    let Some(stream) = stream else {
        let sum = whole.iter().map(|&b| b as u64).sum();
        seen.taken.fetch_add(whole.len(), Ordering::SeqCst);
        return answer.reply(Reply::new(200, "text/plain", summary(whole.len(), sum)));
    };
    if early {
        return answer.reply(Reply::new(200, "text/plain", b"early".to_vec()));
    }
    // A thread reads; the connection is told when the stream has room again.
    stream.on_room(answer.waker());
    let (mut len, mut sum) = (0usize, 0u64);
    let mut out = Vec::new();
    // This thread parks while the body has nothing new, woken by the stream's data hook.
    let me = std::thread::current();
    stream.on_data(move || me.unpark());
    loop {
        out.clear();
        let deadline = Instant::now() + Duration::from_secs(20);
        let taken = loop {
            match stream.take(&mut out, 1 << 20, false, false) {
                berth::proto::http::Taken::Empty if Instant::now() < deadline => {
                    std::thread::park_timeout(deadline - Instant::now());
                }
                taken => break taken,
            }
        };
        match taken {
            berth::proto::http::Taken::Bytes(_) => {
                len += out.len();
                sum += out.iter().map(|&b| b as u64).sum::<u64>();
                seen.taken.fetch_add(out.len(), Ordering::SeqCst);
                std::thread::sleep(pause);
            }
            berth::proto::http::Taken::Ended => break,
            _ => {
                seen.aborted.fetch_add(1, Ordering::SeqCst);
                return answer.reply(Reply::new(400, "text/plain", b"cut short".to_vec()));
            }
        }
    }
    answer.reply(Reply::new(200, "text/plain", summary(len, sum)));
}

/// The protocol a deferred job switches to: what its job thread puts in `mailbox` goes out
/// when the connection is woken (`Upgraded::wake`); what the client sends is echoed.
struct Ticker {
    mailbox: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl berth::proto::upgrade::Upgraded for Ticker {
    fn receive(&mut self, input: &mut Vec<u8>, output: &mut Vec<u8>) -> Flow {
        output.extend_from_slice(b"echo:");
        output.append(input);
        Flow::Continue
    }

    fn wake(&mut self, output: &mut Vec<u8>) -> Flow {
        output.append(&mut self.mailbox.lock().unwrap());
        Flow::Continue
    }
}

/// Answers with a switch, then talks on its own through the connection's waker.
fn switch(ticks: usize, answer: Answer) {
    std::thread::sleep(Duration::from_millis(10));
    let mailbox = Arc::new(std::sync::Mutex::new(Vec::new()));
    let wake = answer.waker();
    answer.reply(Reply::switch(Switch {
        protocol: "ticker",
        headers: vec![("X-Ticks".into(), ticks.to_string())],
        session: Box::new(Ticker {
            mailbox: mailbox.clone(),
        }),
    }));
    for i in 0..ticks {
        std::thread::sleep(Duration::from_millis(15));
        mailbox
            .lock()
            .unwrap()
            .extend_from_slice(format!("tick {i}\n").as_bytes());
        wake();
    }
}

/// `len` bytes of the body from offset `from`.
impl Service for Streams {
    type Handler = StreamsHandler;
    fn handler(&self, _: usize) -> StreamsHandler {
        StreamsHandler(self.0.clone())
    }
}

impl Handler for StreamsHandler {
    type Job = Deferred;
    const STREAMS_BODY: bool = true;

    fn handle_streamed(
        &mut self,
        req: &Request<'_>,
        body: berth::proto::http::BodyStream,
        res: &mut Response<'_>,
    ) -> Handled<Deferred> {
        if req.path.starts_with("/upload") {
            return Handled::Offload(Deferred {
                work: upload_work(req, Some(body), Vec::new()),
                seen: self.0.clone(),
            });
        }
        self.handle(req, res)
    }

    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<Deferred> {
        let arg = |name: &str, default: usize| {
            req.query
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
                .unwrap_or(default)
        };
        let work = match req.path {
            "/stream" => Work::Stream {
                count: arg("count", 4),
                size: arg("size", 1000),
                pause: Duration::from_millis(arg("pause", 5) as u64),
                trailers: arg("trailers", 0) == 1,
            },
            "/whole" => Work::Whole {
                trailers: arg("trailers", 0) == 1,
            },
            "/upload" => upload_work(req, None, req.body.to_vec()),
            "/drop" => Work::Drop,
            "/file" => Work::File {
                len: arg("len", REPLY_FILE).min(REPLY_FILE),
                offset: arg("offset", 0),
            },
            "/switch" => Work::Switch {
                ticks: arg("ticks", 3),
            },
            _ => {
                res.send(200, "text/plain", b"inline");
                return Handled::Done;
            }
        };
        Handled::Offload(Deferred {
            work,
            seen: self.0.clone(),
        })
    }
}

fn upload_work(
    req: &Request<'_>,
    stream: Option<berth::proto::http::BodyStream>,
    whole: Vec<u8>,
) -> Work {
    let query = req.query.unwrap_or("");
    Work::Upload {
        stream,
        whole,
        pause: Duration::from_millis(if query.contains("slow") { 2 } else { 0 }),
        early: query.contains("early"),
    }
}

fn start(model: Model) -> (ModelServer, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let srv = Opts::new(model)
        .tls(false)
        .start_service(move |_| Streams(s));
    (srv, seen)
}

/// Decodes a chunked body at the front of `buf`; `None` until it is all there. Returns the
/// body and the bytes it took.
fn dechunk(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&buf[at..line_end]).ok()?, 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            return (buf.len() >= at + 2).then_some((body, at + 2));
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&buf[at..at + size]);
        assert_eq!(
            &buf[at + size..at + size + 2],
            b"\r\n",
            "chunk data ends with CRLF"
        );
        at += size + 2;
    }
}

/// Reads from `sock` into `buf` until `done` says the bytes so far are enough.
/// Reads into `buf` until `done` holds or the peer closes; fails the test on a timeout.
fn read_until(sock: &mut std::net::TcpStream, buf: &mut Vec<u8>, done: impl Fn(&[u8]) -> bool) {
    match berth_testkit::read_until(sock, buf, Duration::from_secs(20), done) {
        Ok(ReadEnd::TimedOut) => panic!("timed out; got {} bytes", buf.len()),
        Ok(_) => {}
        Err(e) => panic!("read: {e}"),
    }
}

fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn connect(srv: &ModelServer) -> std::net::TcpStream {
    let sock = std::net::TcpStream::connect(srv.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    sock
}

/// A streamed body arrives whole through a real HTTP client, and on a raw connection the
/// pipelined request behind it is answered after it, on the same connection, in order.
fn a_streamed_reply_arrives_whole_and_the_connection_goes_on(model: Model) {
    let (srv, _) = start(model);
    let url = format!("http://{}/stream?count=6&size=3000", srv.addr);
    let res = ureq::get(&url)
        .call()
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(res.header("transfer-encoding"), Some("chunked"), "{model}");
    assert_eq!(res.header("content-type"), Some("application/octet-stream"));
    let mut body = Vec::new();
    res.into_reader().read_to_end(&mut body).unwrap();
    assert_eq!(
        body,
        pattern(0, 5 + 6 * 3000),
        "{model}: the body, whole and in order"
    );

    let mut sock = connect(&srv);
    sock.write_all(
        b"GET /stream?count=3&size=10 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /whole HTTP/1.1\r\nHost: t\r\n\r\nGET /inline HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.ends_with(b"inline"));
    let text = String::from_utf8_lossy(&buf).into_owned();
    let first = head_end(&buf).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{model}: {text}");
    let (body, used) = dechunk(&buf[first..]).unwrap_or_else(|| panic!("{model}: {text}"));
    assert_eq!(body, pattern(0, 35), "{model}");
    let rest = String::from_utf8_lossy(&buf[first + used..]).into_owned();
    assert!(rest.starts_with("HTTP/1.1 200 OK\r\n"), "{model}: {rest}");
    let whole = rest.find("whole").expect("the deferred whole reply second");
    assert!(
        whole < rest.find("inline").unwrap(),
        "{model}: in order: {rest}"
    );
    srv.stop();
}

/// HTTP/1.0 has no chunked coding: the body is the bytes until the server closes. HEAD gets
/// the head alone, and the connection stays usable.
fn http10_ends_a_stream_with_the_close_and_head_gets_no_body(model: Model) {
    let (srv, _) = start(model);
    let mut sock = connect(&srv);
    sock.write_all(b"GET /stream?count=3&size=100 HTTP/1.0\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |_| false);
    let end = head_end(&buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    assert!(!head.contains("transfer-encoding"), "{model}: {head}");
    assert!(head.contains("connection: close"), "{model}: {head}");
    assert_eq!(&buf[end..], &pattern(0, 305)[..], "{model}");

    let mut sock = connect(&srv);
    sock.write_all(
        b"HEAD /stream HTTP/1.1\r\nHost: t\r\n\r\nGET /inline HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.ends_with(b"inline"));
    let end = head_end(&buf).unwrap();
    assert!(
        buf[end..].starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{model}: no body after a HEAD head: {:?}",
        String::from_utf8_lossy(&buf)
    );
    srv.stop();
}

/// A reader that stops reading fills the socket, then the stream's window: the producer is
/// told to wait (not buffered without bound), and once the reader reads again every byte
/// arrives in order.
fn a_slow_reader_holds_the_producer_back_and_loses_nothing(model: Model) {
    let (srv, seen) = start(model);
    let mut sock = connect(&srv);
    let (count, size) = (256, 64 * 1024);
    let req = format!("GET /stream?count={count}&size={size}&pause=0 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    sock.write_all(req.as_bytes()).unwrap();
    if !model.needs().forks {
        // The producer is in this process: it must be told to wait while nobody reads.
        // (A model that forks runs it in a child, whose counts this test cannot see.)
        server::wait_for(Duration::from_secs(10), || {
            seen.full.load(Ordering::SeqCst) > 0
        });
        assert!(
            seen.full.load(Ordering::SeqCst) > 0,
            "{model}: never held back"
        );
    }
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |_| false);
    let end = head_end(&buf).unwrap();
    let (body, _) = dechunk(&buf[end..]).expect("the whole chunked body");
    assert_eq!(body.len(), 5 + count * size, "{model}");
    assert!(body == pattern(0, body.len()), "{model}: bytes in order");
    srv.stop();
}

/// A client that resets in the middle of a stream ends it: the producer's next push learns the
/// connection has gone, and the server serves the next client. (A model that forks runs the
/// producer in a child, whose counts this test cannot see: there, the next client is served.)
fn a_client_that_leaves_mid_stream_stops_the_producer(model: Model) {
    let (srv, seen) = start(model);
    let mut sock = connect(&srv);
    sock.write_all(b"GET /stream?count=100000&size=100&pause=2 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.len() > 500);
    socket2::SockRef::from(&sock)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(sock);
    if !model.needs().forks {
        let stopped = server::wait_for(Duration::from_secs(10), || {
            seen.gone.load(Ordering::SeqCst) == 1
        });
        assert!(stopped, "{model}: the producer was not told");
    }
    assert_eq!(srv.client().get("/inline").status, 200, "{model}");
    srv.stop();
}

/// An answer dropped without a reply (the application lost the request) is a 500, in every
/// model, and the connection goes on.
fn an_answer_dropped_unanswered_is_a_500(model: Model) {
    let (srv, _) = start(model);
    let mut client = srv.client();
    assert_eq!(client.get("/drop").status, 500, "{model}");
    assert_eq!(client.get("/whole").text(), "whole", "{model}");
    srv.stop();
}

fn sum(bytes: &[u8]) -> u64 {
    bytes.iter().map(|&b| b as u64).sum()
}

/// A request body reaches the job while it arrives (the job has the first half before the
/// client sends the second), whole and in order, with a Content-Length or chunked, in every
/// model that streams bodies ([`Caps::streams_bodies`](berth::drive::Caps)); the others hand
/// it over whole. Either way the job sees every byte, and the connection then serves the next
/// request.
fn a_request_body_streams_to_its_job_as_it_arrives(model: Model) {
    let (srv, seen) = start(model);
    let body = pattern(0, 900 * 1024);
    let (first, second) = body.split_at(body.len() / 2);
    let mut sock = connect(&srv);
    let head = format!(
        "POST /upload?slow HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).unwrap();
    sock.write_all(first).unwrap();
    // (prefork's job runs in a worker process, where this test cannot count.)
    if model.caps().streams_bodies && !model.needs().forks {
        let got = server::wait_for(Duration::from_secs(10), || {
            seen.taken.load(Ordering::SeqCst) >= first.len() / 2
        });
        assert!(
            got,
            "{model}: the job had none of the body before it was all sent"
        );
    }
    sock.write_all(second).unwrap();
    sock.write_all(b"GET /inline HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.ends_with(b"inline"));
    let text = String::from_utf8_lossy(&buf).into_owned();
    let want = format!("len={} sum={}", body.len(), sum(&body));
    assert!(text.contains(&want), "{model}: {text}");

    // Chunked, in uneven chunks.
    let mut sock = connect(&srv);
    let mut req =
        b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let mut at = 0;
    for size in [1, 7000, 65536, 3, 200_000].into_iter().cycle().take(40) {
        let end = (at + size).min(body.len());
        req.extend_from_slice(format!("{:x}\r\n", end - at).as_bytes());
        req.extend_from_slice(&body[at..end]);
        req.extend_from_slice(b"\r\n");
        at = end;
    }
    req.extend_from_slice(b"0\r\n\r\nGET /inline HTTP/1.1\r\nHost: t\r\n\r\n");
    sock.write_all(&req).unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.ends_with(b"inline"));
    let text = String::from_utf8_lossy(&buf).into_owned();
    let want = format!("len={at} sum={}", sum(&body[..at]));
    assert!(text.contains(&want), "{model}: chunked: {text}");
    srv.stop();
}

/// A job that answers before reading the body: the answer goes out, and the connection
/// closes (the rest of the body is not read as requests). `Expect: 100-continue` is honoured.
/// A model that does not stream bodies reads the body first, whole, and its job answers it.
fn an_answer_before_the_body_closes_the_connection_after_it(model: Model) {
    if !model.caps().streams_bodies {
        let (srv, _) = start(model);
        let mut sock = connect(&srv);
        sock.write_all(b"POST /upload?early HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
            .unwrap();
        let mut buf = Vec::new();
        read_until(&mut sock, &mut buf, |b| b.ends_with(b"\r\n\r\n"));
        let text = String::from_utf8_lossy(&buf).into_owned();
        assert_eq!(text, "HTTP/1.1 100 Continue\r\n\r\n", "{model}");
        let body = pattern(0, 100_000);
        sock.write_all(&body).unwrap();
        let want = format!("len={} sum={}", body.len(), sum(&body));
        read_until(&mut sock, &mut buf, |b| b.ends_with(want.as_bytes()));
        let text = String::from_utf8_lossy(&buf).into_owned();
        assert!(
            text.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK"),
            "{model}: {text}"
        );
        srv.stop();
        return;
    }
    let (srv, _) = start(model);
    let mut sock = connect(&srv);
    sock.write_all(b"POST /upload?early HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.ends_with(b"early"));
    let text = String::from_utf8_lossy(&buf).into_owned();
    assert!(
        text.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK"),
        "{model}: {text}"
    );
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{model}: {text}"
    );
    read_until(&mut sock, &mut buf, |_| false);
    srv.stop();
}

/// A streamed body that goes bad — malformed chunked framing, a client that stops sending —
/// is answered by berth at once (400, 408) and the connection closed; the job learns that its
/// body was cut short, and its late answer is dropped.
#[test]
fn a_bad_or_stalled_streamed_body_is_aborted_and_the_job_told() {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let srv = Opts::new(Model::Evloop)
        .tls(false)
        .timeouts(berth::drive::Timeouts {
            body: Duration::from_millis(300),
            ..Default::default()
        })
        .start_service(move |_| Streams(s));
    let mut sock = connect(&srv);
    sock.write_all(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n")
        .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |_| false);
    let text = String::from_utf8_lossy(&buf).into_owned();
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(
        !text.contains("cut short"),
        "the job's late answer is dropped: {text}"
    );
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );

    let mut sock = connect(&srv);
    sock.write_all(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\nonly this")
        .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |_| false);
    let text = String::from_utf8_lossy(&buf).into_owned();
    assert!(text.starts_with("HTTP/1.1 408"), "a stalled body: {text}");
    // The stalled body's job was running, and is told. (The malformed one came in the same
    // read as its head: its job may be dropped before it is handed out, never to run.)
    let told = server::wait_for(Duration::from_secs(5), || {
        seen.aborted.load(Ordering::SeqCst) >= 1
    });
    assert!(told, "the job of the stalled body was not told");
    srv.stop();
}

/// A deferred job switches protocols (`Reply::switch`, as an ASGI app's `websocket.accept`
/// does) and the new protocol then talks on its own, woken from the job's thread, with nothing
/// from the client to prompt it. A model that cannot wake an upgraded protocol
/// ([`Caps::wakes_upgraded`](berth::drive::Caps): the blocking ones wait in `read`) switches
/// all the same, and its protocol speaks when spoken to.
fn a_deferred_job_switches_protocols_and_the_protocol_is_woken_from_outside(model: Model) {
    let (srv, _) = start(model);
    let mut sock = connect(&srv);
    sock.write_all(
        b"GET /switch?ticks=3 HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: ticker\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    let wakes = model.caps().wakes_upgraded;
    read_until(&mut sock, &mut buf, |b| match wakes {
        true => b.ends_with(b"tick 2\n"),
        false => head_end(b).is_some(),
    });
    let text = String::from_utf8_lossy(&buf).into_owned();
    assert!(
        text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{model}: {text}"
    );
    assert!(
        text.contains("\r\nUpgrade: ticker\r\nX-Ticks: 3\r\n"),
        "{model}: {text}"
    );
    if wakes {
        assert!(
            text.ends_with("\r\n\r\ntick 0\ntick 1\ntick 2\n"),
            "{model}: {text}"
        );
    }
    sock.write_all(b"hi").unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.ends_with(b"echo:hi"));
    // (A model that serves one connection at a time takes the next once this one ends.)
    drop(sock);

    // Not asked for: the job's switch is refused with a 500, and the connection goes on.
    let mut sock = connect(&srv);
    sock.write_all(
        b"GET /switch HTTP/1.1\r\nHost: t\r\n\r\nGET /inline HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.ends_with(b"inline"));
    let text = String::from_utf8_lossy(&buf).into_owned();
    assert!(text.starts_with("HTTP/1.1 500 "), "{model}: {text}");
    srv.stop();
}

/// The same streamed bodies over HTTP/2 (h2c), two at once on one connection: the producer's
/// pushes wake the connection (in the blocking models too, whose thread waits on the socket
/// and the streams' wake-ups together), and each body arrives whole and in order.
fn a_streamed_reply_arrives_whole_over_http2(model: Model) {
    streamed_over_http2(model, false);
}

/// The same over TLS: there the blocking models' thread waits on the socket and the wake-ups
/// only while TLS holds no decrypted input (once it did not wait on the wake-ups at all, and
/// an answer stalled until the client sent something).
fn a_streamed_reply_arrives_whole_over_http2_tls(model: Model) {
    streamed_over_http2(model, true);
}

/// A server of the deferred jobs in `model` and an HTTP/2 client connected to it (h2c, or TLS
/// with ALPN `h2`).
fn h2_served(
    model: Model,
    tls: bool,
) -> (
    ModelServer,
    berth_testkit::h2::H2Client<berth_testkit::h2::Conn>,
) {
    let seen = Arc::new(Seen::default());
    let srv = Opts::new(model)
        .tls(tls)
        .start_service(move |_| Streams(seen));
    let ca = tls.then(|| server::test_tls().certs.ca.clone());
    let client = berth_testkit::h2::connect(srv.addr, ca.as_deref(), &[]);
    (srv, client)
}

fn streamed_over_http2(model: Model, tls: bool) {
    use berth_testkit::h2::Req;
    let (srv, mut client) = h2_served(model, tls);
    // Both bodies fit the initial windows: the client sends nothing once it has asked, so
    // only the producers' wake-ups can move the answers.
    client.auto_window(false);
    let a = client.send(&Req::get("/stream?count=6&size=3000"));
    let b = client.send(&Req::get("/stream?count=40&size=1000"));
    let ra = client.wait(a).response("first stream");
    let rb = client.wait(b).response("second stream");
    assert_eq!(ra.status, 200, "{model}");
    assert_eq!(ra.body, pattern(0, 5 + 6 * 3000), "{model}: the first body");
    assert_eq!(
        rb.body,
        pattern(0, 5 + 40 * 1000),
        "{model}: the second body"
    );
    srv.stop();
}

/// Trailers over HTTP/1.1: a trailer section after the last chunk, of a streamed reply and of a
/// whole one, and the pipelined request behind them is answered after them. HTTP/1.0 and HEAD
/// have nowhere to carry them: the body (or the head) comes alone.
fn trailers_follow_the_body_over_http11(model: Model) {
    let (srv, _) = start(model);
    let mut sock = connect(&srv);
    sock.write_all(
        b"GET /stream?count=3&size=10&trailers=1 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /whole?trailers=1 HTTP/1.1\r\nHost: t\r\n\r\n\
          HEAD /whole?trailers=1 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /inline HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.ends_with(b"inline"));
    let text = String::from_utf8_lossy(&buf).into_owned();
    let streamed = format!(
        "0\r\ngrpc-status: 0\r\nX-Sum: {}\r\n\r\nHTTP/1.1 200 OK\r\n",
        sum(&pattern(0, 35))
    );
    assert!(text.contains(&streamed), "{model}: {text}");
    let whole = format!(
        "5\r\nwhole\r\n0\r\ngrpc-status: 0\r\nX-Sum: {}\r\n\r\nHTTP/1.1 200 OK\r\n",
        sum(b"whole")
    );
    assert!(text.contains(&whole), "{model}: {text}");
    let first = head_end(&buf).unwrap();
    let (body, _) = dechunk(&buf[first..]).unwrap();
    assert_eq!(body, pattern(0, 35), "{model}");
    assert_eq!(
        text.matches("grpc-status").count(),
        2,
        "{model}: none after HEAD: {text}"
    );
    drop(sock);

    let mut sock = connect(&srv);
    sock.write_all(b"GET /stream?count=2&size=10&trailers=1 HTTP/1.0\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |_| false);
    let end = head_end(&buf).unwrap();
    assert_eq!(
        &buf[end..],
        &pattern(0, 25)[..],
        "{model}: HTTP/1.0, the body alone"
    );
    srv.stop();
}

/// Trailers over HTTP/2 (h2c): a HEADERS frame ends each stream after its body, a streamed
/// reply's and a whole one's, two streams at once on one connection.
fn trailers_end_the_stream_over_http2(model: Model) {
    trailers_over_http2(model, false);
}

/// The same over TLS.
fn trailers_end_the_stream_over_http2_tls(model: Model) {
    trailers_over_http2(model, true);
}

fn trailers_over_http2(model: Model, tls: bool) {
    use berth_testkit::h2::Req;
    let (srv, mut client) = h2_served(model, tls);
    let a = client.send(&Req::get("/stream?count=20&size=1000&trailers=1"));
    let b = client.send(&Req::get("/whole?trailers=1"));
    let c = client.send(&Req::get("/stream?count=2&size=10"));
    let ra = client.wait(a).response("streamed with trailers");
    let rb = client.wait(b).response("whole with trailers");
    let rc = client.wait(c).response("streamed without");
    let expect = |body: &[u8]| {
        vec![
            ("grpc-status".to_owned(), "0".to_owned()),
            ("x-sum".to_owned(), sum(body).to_string()),
        ]
    };
    assert_eq!(ra.body, pattern(0, 5 + 20 * 1000), "{model}");
    assert_eq!(ra.trailers, expect(&ra.body), "{model}");
    assert_eq!(
        (rb.body.as_slice(), &rb.trailers),
        (&b"whole"[..], &expect(b"whole")),
        "{model}"
    );
    assert!(rc.trailers.is_empty(), "{model}: {rc:?}");
    srv.stop();
}

/// A job's reply whose body is a file (`Reply::file`, ASGI's pathsend) goes the way a `/files`
/// answer's does (sendfile(2) on a plain socket): whole, with its length, then the pipelined
/// requests behind it, in order; HEAD gets the head alone; a range of it (an offset) too.
fn a_file_reply_is_sent_from_the_file_over_http11(model: Model) {
    let (srv, _) = start(model);
    let mut sock = connect(&srv);
    sock.write_all(
        b"GET /file HTTP/1.1\r\nHost: t\r\n\r\n\
          HEAD /file HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /file?offset=5&len=17 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /inline HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, |b| b.ends_with(b"inline"));
    let first = head_end(&buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..first]).to_lowercase();
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{model}: {head}");
    assert!(
        head.contains(&format!("content-length: {REPLY_FILE}\r\n")),
        "{model}: {head}"
    );
    assert!(
        head.contains("content-type: application/octet-stream"),
        "{model}"
    );
    let body_end = first + REPLY_FILE;
    assert!(
        buf[first..body_end] == pattern(0, REPLY_FILE),
        "{model}: the file, whole"
    );
    let rest = &buf[body_end..];
    let second = head_end(rest).unwrap();
    let head = String::from_utf8_lossy(&rest[..second]).to_lowercase();
    assert!(
        head.contains(&format!("content-length: {REPLY_FILE}\r\n")),
        "{model}: {head}"
    );
    let rest = &rest[second..];
    assert!(
        rest.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{model}: HEAD sent no body"
    );
    let third = head_end(rest).unwrap();
    assert!(String::from_utf8_lossy(&rest[..third]).contains("Content-Length: 12\r\n"));
    assert_eq!(
        &rest[third..third + 12],
        &pattern(5, 12)[..],
        "{model}: from the offset"
    );
    assert!(
        rest[third + 12..].starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{model}"
    );
    srv.stop();
}

fn a_file_reply_is_sent_from_the_file_over_http2(model: Model) {
    file_over_http2(model, false);
}

/// Over TLS the file is read and encrypted in bounded pieces (no sendfile).
fn a_file_reply_is_sent_from_the_file_over_http2_tls(model: Model) {
    file_over_http2(model, true);
}

fn file_over_http2(model: Model, tls: bool) {
    use berth_testkit::h2::Req;
    let (srv, mut client) = h2_served(model, tls);
    let a = client.send(&Req::get("/file"));
    let b = client.send(&Req::get("/file?offset=100&len=1100"));
    let ra = client.wait(a).response("the whole file");
    let rb = client.wait(b).response("a range of it");
    assert_eq!(ra.status, 200, "{model}");
    assert!(
        ra.body == pattern(0, REPLY_FILE),
        "{model}: the file, whole"
    );
    assert_eq!(rb.body, pattern(100, 1000), "{model}");
    srv.stop();
}
