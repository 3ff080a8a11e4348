//! What the HTTP/2 tests share: a byte builder for hand-made client frames (berth's own
//! writers and HPACK encoder), the server's output decoded back into a summary, the server
//! connection driven in memory with a manual clock ([`Server`]), the [`pair::Pair`] that joins
//! it to berth-proto's client role, and a handler that answers the demo application's routes
//! the vectors use.
#![allow(dead_code)]

pub mod pair;
pub mod vectors;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::h2::frame::{self, kind, ErrorCode, Header, HEADER_LEN};
use berth_proto::h2::hpack::{self, Decoder, ListLimits};
use berth_proto::h2::{Connection, H2Config};
use berth_proto::http::{
    body_stream, content_type, BodyStream, Compress, Context, FileError, FileMeta, FileRequest,
    Handled, Handler, Job, Limits, Popped, Reply, Request, Response, Timeouts,
};
use berth_proto::http::{Action, Taps};
use berth_proto::switch::{KeptBodies, KeptBody};

pub const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

/// A field name longer than the encoder's stack buffer for lowercasing.
pub const LONG_NAME: &str =
    "X-A-Very-Long-Field-Name-Past-Sixty-Four-Bytes-Of-Mixed-Case-Letters-To-Lowercase";

/// The demo's routes used by the vectors, plus `/echo` (the request body back) and
/// `/stream` (a streamed reply) for the Rust-only tests.
pub struct Demo;

#[derive(Debug)]
pub enum TestJob {
    Empty,
    Streamed(usize),
    /// A request body streamed to the job ([`Sink`]): it takes what has come and answers
    /// `200 taken=<bytes> <end|aborted|more>`.
    Sink(BodyStream),
}

impl Job for TestJob {
    fn run(self) -> Reply {
        match self {
            TestJob::Empty => Reply::new(200, "text/plain", Vec::new()),
            TestJob::Streamed(n) => {
                let (writer, stream) = body_stream();
                writer.push(vec![b's'; n]).unwrap();
                writer.end();
                Reply::streamed(200, b"first".to_vec(), stream)
            }
            TestJob::Sink(stream) => {
                let mut taken = 0;
                let how = loop {
                    match stream.pop(1 << 20) {
                        Popped::Data(d) => taken += d.len(),
                        Popped::Ended => break "end",
                        Popped::Aborted => break "aborted",
                        Popped::Empty => break "more",
                    }
                };
                Reply::new(
                    200,
                    "text/plain",
                    format!("taken={taken} {how}").into_bytes(),
                )
            }
        }
    }
}

/// [`Demo`]'s routes, and request bodies streamed to a job ([`TestJob::Sink`]) where the
/// driver allows it.
pub struct Sink;

impl Handler for Sink {
    type Job = TestJob;
    const STREAMS_BODY: bool = true;
    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<TestJob> {
        Demo.handle(req, res)
    }
    fn handle_streamed(
        &mut self,
        _req: &Request<'_>,
        body: BodyStream,
        _res: &mut Response<'_>,
    ) -> Handled<TestJob> {
        Handled::Offload(TestJob::Sink(body))
    }
}

impl Handler for Demo {
    type Job = TestJob;
    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<TestJob> {
        match req.path {
            "/" => res.send(200, "text/plain; charset=utf-8", b"Hello, World!"),
            "/test/fast" => res.send(200, "", b""),
            "/test/slow" => return Handled::Offload(TestJob::Empty),
            "/stream" => return Handled::Offload(TestJob::Streamed(100_000)),
            "/echo" => res.send(200, "application/octet-stream", req.body),
            "/big" => res.send(200, "application/octet-stream", &vec![b'b'; 100_000]),
            "/fields" => res.send_with(
                200,
                "text/plain",
                &[
                    ("X-Mixed-Case", b"v"),
                    ("Connection", b"keep-alive"),
                    ("Transfer-Encoding", b"chunked"),
                    (LONG_NAME, b"w"),
                ],
                b"ok",
            ),
            "/nothing" => res.send(204, "text/plain", b""),
            path if path.starts_with("/files/") => {
                let rel = &path["/files/".len()..];
                let compress = Compress {
                    min_size: 100,
                    level: 1,
                };
                match FileRequest::parse(req, rel) {
                    Ok(file) => return Handled::File(file.compress(Some(compress))),
                    Err(_) => res.send(404, "text/plain", b"Not Found\n"),
                }
            }
            _ => res.send(404, "text/plain", b"Not Found\n"),
        }
        Handled::Done
    }
}

/// Builds a client's bytes.
#[derive(Default)]
pub struct Client {
    pub bytes: Vec<u8>,
}

impl Client {
    pub fn preface(&mut self) -> &mut Self {
        self.bytes.extend_from_slice(frame::PREFACE);
        frame::write_settings(&mut self.bytes, &[]);
        self
    }
    pub fn get(&mut self, stream: u32, path: &str) -> &mut Self {
        let fields = request_fields("GET", path);
        self.headers(stream, &fields, true)
    }
    pub fn headers(&mut self, stream: u32, fields: &[(&str, &str)], end: bool) -> &mut Self {
        let mut block = Vec::new();
        hpack::encode(
            fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut block,
        );
        frame::write_headers(&mut self.bytes, stream, &block, end, 16_384);
        self
    }
    pub fn data(&mut self, stream: u32, data: &[u8], end: bool) -> &mut Self {
        for (i, chunk) in data.chunks(16_384).enumerate() {
            let last = (i + 1) * 16_384 >= data.len();
            frame::write_data(&mut self.bytes, stream, chunk, end && last);
        }
        if data.is_empty() {
            frame::write_data(&mut self.bytes, stream, &[], end);
        }
        self
    }
    pub fn window_update(&mut self, stream: u32, inc: u32) -> &mut Self {
        frame::write_window_update(&mut self.bytes, stream, inc);
        self
    }
    pub fn settings(&mut self, params: &[(u16, u32)]) -> &mut Self {
        frame::write_settings(&mut self.bytes, params);
        self
    }
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }
}

pub fn request_fields<'a>(method: &'a str, path: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "x"),
    ]
}

/// One answer heard: `(stream, status, fields, body, ended)`.
pub type Answer = (u32, u16, Vec<(String, String)>, Vec<u8>, bool);

/// What the server said, decoded.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Heard {
    /// `(stream, status, fields, body, ended)` in the order the HEADERS came.
    pub responses: Vec<Answer>,
    /// `(stream, fields)` of each trailer block, in order.
    pub trailers: Vec<(u32, Vec<(String, String)>)>,
    pub resets: Vec<(u32, u32)>,
    pub goaway: Option<(u32, u32)>,
    pub pings: usize,
    pub settings: usize,
    pub settings_acks: usize,
    pub window_updates: Vec<(u32, u32)>,
}

/// Decodes the server's whole output.
pub fn hear(mut out: &[u8]) -> Heard {
    let mut heard = Heard::default();
    let mut dec = Decoder::new(4096);
    let mut block: Option<(u32, Vec<u8>, bool)> = None;
    while let Some(h) = Header::parse(out) {
        let end = HEADER_LEN + h.len as usize;
        assert!(out.len() >= end, "a frame cut short in the output");
        let p = &out[HEADER_LEN..end];
        out = &out[end..];
        let end_stream = h.flags & frame::flag::END_STREAM != 0;
        match h.kind {
            kind::HEADERS | kind::CONTINUATION => {
                let b = block.get_or_insert((h.stream, Vec::new(), end_stream));
                b.1.extend_from_slice(p);
                if h.flags & frame::flag::END_HEADERS != 0 {
                    let (stream, bytes, ended) = block.take().unwrap();
                    let mut fields = Vec::new();
                    let limits = ListLimits {
                        max_size: 1 << 20,
                        max_fields: 1000,
                    };
                    dec.decode(&bytes, limits, &mut fields).unwrap();
                    let fields: Vec<(String, String)> = fields
                        .into_iter()
                        .map(|f| {
                            (
                                String::from_utf8(f.name).unwrap(),
                                String::from_utf8_lossy(&f.value).into_owned(),
                            )
                        })
                        .collect();
                    if fields.first().is_some_and(|f| f.0 != ":status") {
                        // Trailers: they end the answer already under way.
                        let r = heard
                            .responses
                            .iter_mut()
                            .rev()
                            .find(|r| r.0 == stream)
                            .expect("trailers before HEADERS");
                        assert!(!r.4, "trailers after END_STREAM on {stream}");
                        assert!(ended, "trailers without END_STREAM on {stream}");
                        r.4 = true;
                        heard.trailers.push((stream, fields));
                        continue;
                    }
                    let status = fields[0].1.parse().unwrap();
                    heard
                        .responses
                        .push((stream, status, fields, Vec::new(), ended));
                }
            }
            kind::DATA => {
                let r = heard
                    .responses
                    .iter_mut()
                    .rev()
                    .find(|r| r.0 == h.stream)
                    .expect("DATA before HEADERS");
                assert!(!r.4, "DATA after END_STREAM on {}", h.stream);
                r.3.extend_from_slice(p);
                r.4 = end_stream;
            }
            kind::RST_STREAM => heard
                .resets
                .push((h.stream, u32::from_be_bytes(p[..4].try_into().unwrap()))),
            kind::GOAWAY => {
                heard.goaway = Some((
                    u32::from_be_bytes(p[..4].try_into().unwrap()),
                    u32::from_be_bytes(p[4..8].try_into().unwrap()),
                ))
            }
            kind::PING => heard.pings += 1,
            kind::SETTINGS if h.flags & frame::flag::ACK != 0 => heard.settings_acks += 1,
            kind::SETTINGS => heard.settings += 1,
            kind::WINDOW_UPDATE => heard
                .window_updates
                .push((h.stream, u32::from_be_bytes(p[..4].try_into().unwrap()))),
            _ => {}
        }
    }
    assert!(out.is_empty(), "a partial frame at the end of the output");
    heard
}

/// A server connection driven in memory, with a manual clock.
pub struct Server<H: Handler = Demo> {
    pub conn: Connection,
    pub handler: H,
    pub limits: Limits,
    pub timeouts: Timeouts,
    /// What [`Context::stream_bodies`] says.
    pub stream_bodies: bool,
    pub input: Vec<u8>,
    pub output: Vec<u8>,
    pub now: Instant,
    /// What [`Context::alt_svc`] says.
    pub alt_svc: Option<&'static [u8]>,
    pub held: Vec<(u64, H::Job)>,
    /// Hold jobs until [`Server::finish`].
    pub hold: bool,
    pub closed: bool,
    /// Times the connection's waker was called.
    pub wakes: Arc<AtomicUsize>,
    /// The writers of request bodies going to jobs as they arrive: the driver's to hold.
    pub taps: Taps,
    /// The files `/files/` serves: relative path and content, all modified at the same time.
    pub files: Vec<(String, Vec<u8>)>,
    /// Files asked for and not opened yet, while [`Server::hold_files`] says so.
    pub held_files: Vec<(u64, FileRequest)>,
    /// Hold file opens until [`Server::open_files`] (a slow disk, or the Files actor).
    pub hold_files: bool,
    /// The content of the file last opened (or taken from a reply), until a body keeps it.
    opened: Option<Vec<u8>>,
    /// Bodies kept for their streams, pulled as the connection asks.
    pub kept: KeptBodies<u64>,
}

/// When every test file was last modified.
pub fn file_time() -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

impl Server<Demo> {
    pub fn new(config: H2Config) -> Self {
        Server::with(config, Demo)
    }
}

impl<H: Handler> Server<H> {
    pub fn with(config: H2Config, handler: H) -> Self {
        let conn = Connection::new(config);
        let wakes = Arc::new(AtomicUsize::new(0));
        Server {
            conn,
            handler,
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            stream_bodies: false,
            input: Vec::new(),
            output: Vec::new(),
            now: Instant::now(),
            alt_svc: None,
            held: Vec::new(),
            hold: true,
            closed: false,
            wakes,
            taps: Taps::default(),
            files: Vec::new(),
            held_files: Vec::new(),
            hold_files: false,
            opened: None,
            kept: KeptBodies::default(),
        }
    }

    fn cx(&self) -> Context<'static> {
        // The limits live as long as the test; leaking one small value per server is fine
        // in a test and keeps the borrow simple.
        let limits: &'static Limits = Box::leak(Box::new(self.limits));
        Context {
            limits,
            date: DATE,
            stream_bodies: self.stream_bodies,
            now: self.now,
            alt_svc: self.alt_svc,
        }
    }

    /// Runs the connection on what it has, as a driver would.
    fn drive(&mut self, mut step: Action<H::Job>) {
        let mut spins = 0;
        loop {
            spins += 1;
            assert!(spins < 1_000_000, "no progress");
            match step {
                Action::Close => {
                    self.closed = true;
                    return;
                }
                Action::Read => return,
                Action::Switched => panic!("HTTP/2 never switches protocols"),
                // The output is "written": it stays in `output`, which the test reads whole;
                // the high-water mark is about the driver's buffer, so the connection is
                // shown an empty one (`process` does).
                Action::Flush => step = self.process(),
                Action::Open { stream, request } if self.hold_files => {
                    self.held_files.push((stream, request));
                    step = self.process();
                }
                Action::Open { stream, request } => step = self.open(stream, request),
                Action::Body {
                    stream,
                    offset,
                    len,
                    encode,
                } => {
                    let file = self.opened.take().expect("a body without a file");
                    let range = file[offset as usize..(offset + len) as usize].to_vec();
                    self.kept.keep(stream, KeptBody::new(range, encode));
                    step = self.process();
                }
                Action::Pull { stream, max } => {
                    let conn = &self.conn;
                    let (mut bytes, pulled, trailers) = self
                        .kept
                        .pull(stream, max, |s| conn.pulls(s))
                        .unwrap_or_else(|| panic!("a pull for stream {stream}, with no body"));
                    step = self.call(|c, input, out, cx, h| {
                        c.pulled(stream, &mut bytes, pulled, trailers, input, out, cx, h)
                    });
                }
                Action::Stream { stream, streamed } => {
                    // The producer wakes the driver, which counts it.
                    let w = self.wakes.clone();
                    streamed.on_data(move || {
                        w.fetch_add(1, Ordering::SeqCst);
                    });
                    self.kept.keep(stream, KeptBody::Producer(streamed));
                    step = self.process();
                }
                Action::Offload { stream, job } => {
                    if self.hold {
                        self.held.push((stream, job));
                        step = self.process();
                    } else {
                        let reply = job.run();
                        step = self.complete(stream, reply);
                    }
                }
            }
        }
    }

    /// Opens the file a stream asked for, as a driver would, and hands it over.
    fn open(&mut self, stream: u64, request: FileRequest) -> Action<H::Job> {
        let found = self
            .files
            .iter()
            .find(|(path, _)| *path == request.path())
            .map(|(path, bytes)| {
                let meta = FileMeta::plain(bytes.len() as u64, file_time(), content_type(path));
                (meta, bytes.clone())
            })
            .ok_or(FileError::NotFound);
        self.opened = found.as_ref().ok().map(|(_, bytes)| bytes.clone());
        let found = found.as_ref().map(|(meta, _)| meta).map_err(|e| *e);
        self.call(|c, input, out, cx, h| c.file(stream, &request, found, input, out, cx, h))
    }

    /// Calls the connection as a driver would: its output kept in `output`.
    fn call(
        &mut self,
        f: impl FnOnce(
            &mut Connection,
            &mut Vec<u8>,
            &mut Vec<u8>,
            &Context<'_>,
            &mut H,
        ) -> Action<H::Job>,
    ) -> Action<H::Job> {
        let cx = self.cx();
        let mut out = Vec::new();
        self.carry();
        let step = f(
            &mut self.conn,
            &mut self.input,
            &mut out,
            &cx,
            &mut self.handler,
        );
        self.output.append(&mut out);
        self.carry();
        step
    }

    /// Carries the request bodies the connection passed on to their jobs, and tells it how
    /// far each job has taken its own. A job taking a body as it arrives wakes the driver,
    /// which counts it.
    fn carry(&mut self) {
        let wakes = self.wakes.clone();
        let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            wakes.fetch_add(1, Ordering::SeqCst);
        });
        self.taps.exchange(&mut self.conn, Some(&wake));
    }

    /// Opens the held files, in the order asked.
    pub fn open_files(&mut self) {
        self.hold_files = false;
        for (stream, request) in std::mem::take(&mut self.held_files) {
            if self.closed {
                return;
            }
            let step = self.open(stream, request);
            self.drive(step);
        }
    }

    fn process(&mut self) -> Action<H::Job> {
        self.call(|c, input, out, cx, h| c.process(input, out, cx, h))
    }

    fn complete(&mut self, stream: u64, mut reply: Reply) -> Action<H::Job> {
        if let Some(file) = &mut reply.file {
            // A driver takes the job's file from the reply and keeps it if a body follows.
            use std::io::Read;
            let taken = std::mem::replace(&mut file.source, berth_proto::http::FileSource::Taken);
            if let berth_proto::http::FileSource::Open(mut f) = taken {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).unwrap();
                self.opened = Some(bytes);
            }
        }
        self.call(|c, input, out, cx, h| c.complete(stream, reply, input, out, cx, h))
    }

    /// Bytes arrive.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.closed {
            return;
        }
        self.input.extend_from_slice(bytes);
        let step = self.process();
        self.drive(step);
    }

    /// The driver was woken (a producer pushed, a job took body): `process` with no new input.
    pub fn pump(&mut self) {
        self.conn.wake_bodies();
        self.feed(&[]);
    }

    /// A job's reply comes, as a driver would pass it.
    pub fn reply(&mut self, stream: u64, reply: Reply) {
        if self.closed {
            return;
        }
        let step = self.complete(stream, reply);
        self.drive(step);
    }

    /// Takes the held job of `stream`.
    pub fn take_job(&mut self, stream: u64) -> H::Job {
        let at = self
            .held
            .iter()
            .position(|(s, _)| *s == stream)
            .unwrap_or_else(|| panic!("no job held for stream {stream}"));
        self.held.remove(at).1
    }

    /// All input is in: runs held jobs.
    pub fn finish(&mut self) {
        self.hold = false;
        for (stream, job) in std::mem::take(&mut self.held) {
            if self.closed {
                return;
            }
            let reply = job.run();
            let step = self.complete(stream, reply);
            self.drive(step);
        }
    }

    /// The deadline [`Connection::poll_timeout`] gives now (the output is written).
    pub fn deadline(&mut self) -> Option<Instant> {
        self.conn
            .poll_timeout(&self.input, false, self.now, &self.timeouts)
    }

    /// Time passes; if the deadline passes, expire, as a driver would. Returns the deadline
    /// that was in force.
    pub fn advance(&mut self, by: Duration) -> Option<Instant> {
        let deadline = self.deadline();
        self.now += by;
        if deadline.is_some_and(|d| d <= self.now) && !self.closed {
            let cx = self.cx();
            let mut out = Vec::new();
            let step = self
                .conn
                .expire(&mut self.input, &mut out, &cx, &mut self.handler);
            self.output.append(&mut out);
            self.drive(step);
        }
        deadline
    }

    /// What the server said so far.
    pub fn heard(&self) -> Heard {
        hear(&self.output)
    }
}

/// An error code's name.
pub fn code_named(name: &str) -> u32 {
    let all = [
        ("NO_ERROR", ErrorCode::NO_ERROR),
        ("PROTOCOL_ERROR", ErrorCode::PROTOCOL_ERROR),
        ("INTERNAL_ERROR", ErrorCode::INTERNAL_ERROR),
        ("FLOW_CONTROL_ERROR", ErrorCode::FLOW_CONTROL_ERROR),
        ("STREAM_CLOSED", ErrorCode::STREAM_CLOSED),
        ("FRAME_SIZE_ERROR", ErrorCode::FRAME_SIZE_ERROR),
        ("REFUSED_STREAM", ErrorCode::REFUSED_STREAM),
        ("CANCEL", ErrorCode::CANCEL),
        ("COMPRESSION_ERROR", ErrorCode::COMPRESSION_ERROR),
        ("ENHANCE_YOUR_CALM", ErrorCode::ENHANCE_YOUR_CALM),
    ];
    all.iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("unknown error code {name}"))
        .1
         .0
}
