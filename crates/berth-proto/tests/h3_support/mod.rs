//! A memory driver for the HTTP/3 connection, as `h2_support` is for HTTP/2's: each QUIC
//! stream's bytes handed in (whole or in pieces), the connection's actions collected per
//! stream, jobs held or run, files opened from memory and kept as `switch::KeptBody`, bodies
//! pulled as the connection asks. The client's bytes are built with berth's own `h3::frame`
//! writers and QPACK encoder, and answers read back with its `FrameReader` and QPACK decoder.
//! The handler is `h2_support`'s `Demo` (shared, not copied), with a route for trailers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub use crate::h2_support::{file_time, Demo, TestJob, DATE};
use berth_proto::h3::error::ErrorCode;
use berth_proto::h3::frame::{self, Event, Frame, FrameReader, StreamKind};
use berth_proto::h3::qpack::{self, Decoded, Decoder, DecoderConfig};
use berth_proto::h3::settings::Settings;
use berth_proto::h3::stream::UniStream;
use berth_proto::h3::{Connection, H3Config, Quic, Role};
use berth_proto::http::Taps;
use berth_proto::http::{
    body_stream, content_type, Action, Context, FileError, FileMeta, FileRequest, Handled, Handler,
    Job, Limits, Reply, Request, Response, Timeouts,
};
use berth_proto::switch::{KeptBodies, KeptBody};

/// The client's control stream, QPACK encoder and decoder streams.
pub const CONTROL: u64 = 2;
pub const ENCODER: u64 = 6;
pub const DECODER: u64 = 10;

/// [`Demo`]'s routes, and `/trailers` (a job whose reply ends with trailers), `/upgrade`
/// (a handler that switches protocols) and `/switch` (a job that does).
pub struct App;

#[derive(Debug)]
pub enum AppJob {
    Demo(TestJob),
    Trailers,
    Switch,
}

fn echo_switch() -> berth_proto::upgrade::Switch {
    berth_proto::upgrade::Switch {
        protocol: "echo",
        headers: Vec::new(),
        session: Box::new(berth_proto::upgrade::Echo),
    }
}

impl Job for AppJob {
    fn run(self) -> Reply {
        match self {
            AppJob::Demo(job) => job.run(),
            AppJob::Trailers => Reply::new(200, "text/plain", b"body".to_vec())
                .with_trailers(vec![("Grpc-Status".to_owned(), b"0".to_vec())])
                .unwrap(),
            AppJob::Switch => Reply::switch(echo_switch()),
        }
    }
}

impl Handler for App {
    type Job = AppJob;
    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<AppJob> {
        match req.path {
            "/trailers" => return Handled::Offload(AppJob::Trailers),
            "/switch" => return Handled::Offload(AppJob::Switch),
            "/upgrade" => return Handled::Upgrade(echo_switch()),
            "/version" => {
                res.send(200, "text/plain", format!("{:?}", req.version).as_bytes());
                return Handled::Done;
            }
            _ => {}
        }
        match Demo.handle(req, res) {
            Handled::Done => Handled::Done,
            Handled::Offload(job) => Handled::Offload(AppJob::Demo(job)),
            Handled::File(file) => Handled::File(file),
            Handled::Upgrade(switch) => Handled::Upgrade(switch),
        }
    }
}

/// The request fields of a GET (or `method`) of `path`.
pub fn request_fields<'a>(method: &'a str, path: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        (":method", method),
        (":scheme", "https"),
        (":path", path),
        (":authority", "x"),
    ]
}

/// A HEADERS frame of `fields`, static table only.
pub fn headers(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut section = Vec::new();
    qpack::encode_static(
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        false,
        &mut section,
    );
    let mut out = Vec::new();
    Frame::Headers(&section).write(&mut out).unwrap();
    out
}

/// A DATA frame.
pub fn data(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_data_header(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

/// The client's control stream: its type and SETTINGS.
pub fn control(settings: Settings) -> Vec<u8> {
    let mut out = Vec::new();
    UniStream::Control.write(&mut out).unwrap();
    settings.write_frame(None, &mut out).unwrap();
    out
}

/// A GET request stream's bytes.
pub fn get(path: &str) -> Vec<u8> {
    headers(&request_fields("GET", path))
}

/// One answer read back: status, fields, body, trailers, and whether FIN came.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Heard {
    pub status: u16,
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
    pub fin: bool,
}

impl Heard {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn strings(decoded: Decoded) -> Vec<(String, String)> {
    let Decoded::Fields(fields) = decoded else {
        panic!("an answer section that did not decode: {decoded:?}");
    };
    fields
        .into_iter()
        .map(|f| {
            (
                String::from_utf8(f.name).unwrap(),
                String::from_utf8_lossy(&f.value).into_owned(),
            )
        })
        .collect()
}

/// Reads a request stream's answer bytes.
pub fn hear(stream: u64, bytes: &[u8], fin: bool) -> Heard {
    let mut reader = FrameReader::new(StreamKind::Request, Role::Client, 1 << 20);
    // Answers use the static table only: a decoder with no table reads them.
    let mut dec = Decoder::new(DecoderConfig {
        max_table_capacity: 0,
        max_blocked_streams: 0,
        max_field_section_size: 1 << 20,
    });
    let mut heard = Heard {
        fin,
        ..Heard::default()
    };
    let mut sections = 0;
    let mut at = 0;
    loop {
        let (used, ev) = reader.read(&bytes[at..]).unwrap();
        at += used;
        match ev {
            None => break,
            Some(Event::Data { chunk, .. }) => {
                assert_eq!(sections, 1, "DATA outside the body on {stream}");
                heard.body.extend_from_slice(chunk);
            }
            Some(Event::Frame(Frame::Headers(section))) => {
                let fields = strings(dec.decode(stream, section).unwrap());
                sections += 1;
                if sections == 1 {
                    assert_eq!(fields[0].0, ":status");
                    heard.status = fields[0].1.parse().unwrap();
                    heard.fields = fields;
                } else {
                    assert_eq!(sections, 2, "a third HEADERS on {stream}");
                    heard.trailers = fields;
                }
            }
            Some(other) => panic!("unexpected {other:?} on {stream}"),
        }
    }
    assert!(reader.is_between_frames(), "a frame cut short on {stream}");
    heard
}

/// What the server's control stream said: its SETTINGS and GOAWAYs.
pub fn hear_control(bytes: &[u8]) -> (Settings, Vec<u64>) {
    let (ty, n) = UniStream::parse(bytes).unwrap();
    assert_eq!(ty, UniStream::Control);
    let mut reader = FrameReader::new(StreamKind::Control, Role::Client, 1 << 10);
    let mut settings = None;
    let mut goaways = Vec::new();
    let mut at = n;
    loop {
        let (used, ev) = reader.read(&bytes[at..]).unwrap();
        at += used;
        match ev {
            None => break,
            Some(Event::Frame(Frame::Settings(s))) => settings = Some(s),
            Some(Event::Frame(Frame::Goaway(id))) => goaways.push(id),
            Some(other) => panic!("unexpected {other:?} on the control stream"),
        }
    }
    (settings.expect("no SETTINGS"), goaways)
}

/// A server connection driven in memory.
pub struct Server<H: Handler = App> {
    pub conn: Connection,
    pub handler: H,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub stream_bodies: bool,
    pub now: Instant,
    /// What [`Context::alt_svc`] says.
    pub alt_svc: Option<&'static [u8]>,
    /// Jobs held until [`Server::finish`] or [`Server::run_job`].
    pub held: Vec<(u64, H::Job)>,
    pub hold: bool,
    pub closed: bool,
    pub files: Vec<(String, Vec<u8>)>,
    opened: Option<Vec<u8>>,
    pub kept: KeptBodies<u64>,
    /// Every action, in order.
    pub actions: Vec<Quic>,
    /// Bytes written per stream, and whether FIN followed.
    pub written: BTreeMap<u64, (Vec<u8>, bool)>,
    /// Pull sizes asked, per stream.
    pub pulls: Vec<(u64, usize)>,
    /// Keep pulls for later (QUIC has no room on the stream): [`Server::answer_pulls`].
    pub hold_pulls: bool,
    pub held_pulls: Vec<(u64, usize)>,
    /// The writers of request bodies going to jobs as they arrive: the driver's to hold.
    pub taps: Taps,
}

impl Server<App> {
    pub fn new(config: H3Config) -> Self {
        Server::with(config, App)
    }
}

impl<H: Handler> Server<H> {
    pub fn with(config: H3Config, handler: H) -> Self {
        Server {
            conn: Connection::new(config),
            handler,
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            stream_bodies: false,
            now: Instant::now(),
            alt_svc: None,
            held: Vec::new(),
            hold: false,
            closed: false,
            files: Vec::new(),
            opened: None,
            kept: KeptBodies::default(),
            actions: Vec::new(),
            written: BTreeMap::new(),
            pulls: Vec::new(),
            hold_pulls: false,
            held_pulls: Vec::new(),
            taps: Taps::default(),
        }
    }

    fn cx(&self) -> Context<'static> {
        let limits: &'static Limits = Box::leak(Box::new(self.limits));
        Context {
            limits,
            date: DATE,
            stream_bodies: self.stream_bodies,
            now: self.now,
            alt_svc: self.alt_svc,
        }
    }

    /// Collects the actions the connection asked for.
    fn collect(&mut self) {
        while let Some(action) = self.conn.poll_quic() {
            if let Quic::Send { stream, bytes, fin } = &action {
                let w = self.written.entry(*stream).or_default();
                assert!(!w.1, "bytes after FIN on {stream}");
                w.0.extend_from_slice(bytes);
                w.1 = *fin;
            }
            self.actions.push(action);
        }
    }

    fn call(
        &mut self,
        f: impl FnOnce(&mut Connection, &Context<'_>, &mut H) -> Action<H::Job>,
    ) -> Action<H::Job> {
        let cx = self.cx();
        self.carry();
        let step = f(&mut self.conn, &cx, &mut self.handler);
        self.carry();
        self.collect();
        step
    }

    /// Carries the request bodies the connection passed on to their jobs, and tells it how
    /// far each job has taken its own (jobs run in the test's thread: nothing to wake).
    fn carry(&mut self) {
        self.taps.exchange(&mut self.conn, None);
    }

    fn drive(&mut self, mut step: Action<H::Job>) {
        let mut spins = 0;
        loop {
            spins += 1;
            assert!(spins < 100_000, "no progress");
            match step {
                Action::Close => {
                    self.closed = true;
                    return;
                }
                Action::Read => return,
                Action::Flush | Action::Switched => {
                    unreachable!("HTTP/3 neither flushes nor switches")
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
                Action::Stream { stream, streamed } => {
                    self.kept.keep(stream, KeptBody::Producer(streamed));
                    step = self.process();
                }
                Action::Pull { stream, max } if self.hold_pulls => {
                    self.pulls.push((stream, max));
                    self.held_pulls.push((stream, max));
                    step = self.process();
                }
                Action::Pull { stream, max } => {
                    self.pulls.push((stream, max));
                    step = self.pull(stream, max);
                }
                Action::Offload { stream, job } => {
                    if self.hold {
                        self.held.push((stream, job));
                        step = self.process();
                    } else {
                        step = self.complete(stream, job.run());
                    }
                }
            }
        }
    }

    /// Reads a stream's next piece from what is kept for it, and hands it over.
    fn pull(&mut self, stream: u64, max: usize) -> Action<H::Job> {
        let conn = &self.conn;
        let (mut bytes, pulled, trailers) = self
            .kept
            .pull(stream, max, |s| conn.pulls(s))
            .unwrap_or_else(|| panic!("a pull for {stream} with no body"));
        self.call(|c, cx, h| c.pulled(stream, &mut bytes, pulled, trailers, cx, h))
    }

    /// QUIC has room again: the held pulls are answered, in order (and any they lead to are
    /// held again while `hold_pulls` says so).
    pub fn answer_pulls(&mut self) {
        for (stream, max) in std::mem::take(&mut self.held_pulls) {
            let step = self.pull(stream, max);
            self.drive(step);
        }
    }

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
        self.call(|c, cx, h| c.file(stream, &request, found, cx, h))
    }

    fn complete(&mut self, stream: u64, reply: Reply) -> Action<H::Job> {
        self.call(|c, cx, h| c.complete(stream, reply, cx, h))
    }

    pub fn process(&mut self) -> Action<H::Job> {
        self.call(|c, cx, h| c.process(cx, h))
    }

    /// The connection starts (its control stream goes out).
    pub fn start(&mut self) {
        let step = self.process();
        self.drive(step);
    }

    /// Bytes arrive on `stream`.
    pub fn recv(&mut self, stream: u64, bytes: &[u8], fin: bool) {
        if self.closed {
            return;
        }
        self.conn.recv(stream, bytes, fin);
        let step = self.process();
        self.drive(step);
    }

    /// The client's control stream with default SETTINGS.
    pub fn open_control(&mut self) {
        self.recv(CONTROL, &control(Settings::default()), false);
    }

    /// A whole request on `stream`.
    pub fn request(&mut self, stream: u64, bytes: &[u8]) {
        self.recv(stream, bytes, true);
    }

    /// A job's reply comes.
    pub fn reply(&mut self, stream: u64, reply: Reply) {
        let step = self.complete(stream, reply);
        self.drive(step);
    }

    /// Runs the held job of `stream`.
    pub fn run_job(&mut self, stream: u64) {
        let at = self
            .held
            .iter()
            .position(|(s, _)| *s == stream)
            .unwrap_or_else(|| panic!("no job held for {stream}"));
        let job = self.held.remove(at).1;
        self.reply(stream, job.run());
    }

    /// Time passes; past the connection's deadline, it expires, as a driver would. Returns
    /// the deadline that was in force.
    pub fn advance(&mut self, by: Duration) -> Option<Instant> {
        let deadline = self.conn.poll_timeout(&self.timeouts);
        self.now += by;
        if deadline.is_some_and(|d| d <= self.now) && !self.closed {
            let t = self.timeouts;
            let step = self.call(|c, cx, h| c.expire(&t, cx, h));
            self.drive(step);
        }
        deadline
    }

    /// The driver was woken.
    pub fn pump(&mut self) {
        self.conn.wake_bodies();
        let step = self.process();
        self.drive(step);
    }

    /// The answer on `stream`, read back.
    pub fn heard(&self, stream: u64) -> Heard {
        let (bytes, fin) = self
            .written
            .get(&stream)
            .unwrap_or_else(|| panic!("nothing written on {stream}"));
        hear(stream, bytes, *fin)
    }

    /// The connection close, if any.
    pub fn close_code(&self) -> Option<ErrorCode> {
        self.actions.iter().find_map(|a| match a {
            Quic::Close { code, .. } => Some(*code),
            _ => None,
        })
    }

    /// The resets of `stream`, in order.
    pub fn resets(&self, stream: u64) -> Vec<ErrorCode> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Quic::Reset { stream: s, code } if *s == stream => Some(*code),
                _ => None,
            })
            .collect()
    }

    /// The STOP_SENDINGs of `stream`, in order.
    pub fn stops(&self, stream: u64) -> Vec<ErrorCode> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Quic::Stop { stream: s, code } if *s == stream => Some(*code),
                _ => None,
            })
            .collect()
    }
}

/// A streamed body for tests that need a producer of their own.
pub fn producer() -> (
    berth_proto::http::StreamWriter,
    berth_proto::http::BodyStream,
) {
    body_stream()
}
