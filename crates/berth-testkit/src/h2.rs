//! A small HTTP/2 client for tests (RFC 9113), honest about the protocol: it sends the
//! preface and its SETTINGS, requests as HEADERS (and CONTINUATION past the server's frame
//! size) and DATA within the server's windows and frame size, acknowledges the server's
//! SETTINGS and PING, opens its own windows (WINDOW_UPDATE) as it reads DATA unless told not
//! to, and decodes answers with berth-proto's HPACK decoder. Several streams may be in flight:
//! [`H2Client::send`] them, then [`H2Client::wait`] for each one's [`Outcome`].
//!
//! ```text
//!   send(Req) ──> HEADERS [+ CONTINUATION] ──> DATA as windows allow ──> server
//!   wait(id)  <── HEADERS, DATA, RST_STREAM, GOAWAY (SETTINGS, PING answered) <── server
//! ```
//!
//! It does **not** keep to the server's SETTINGS_MAX_CONCURRENT_STREAMS (a test may want to
//! go past it), push, prioritise, or index anything in its own HPACK encoding
//! ([`hpack::encode`] never does). Every read has a deadline ([`LIMIT`] unless
//! [`H2Client::set_limit`] says otherwise), so a server that stops answering fails the test
//! instead of hanging it.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use berth::net::tls::{TlsConnector, TlsStream};
use berth::proto::h2::frame::{self, flag, kind, setting, Header, HEADER_LEN};
use berth::proto::h2::hpack::{self, Decoder, Field, ListLimits};

use crate::bytes::{is_reset, TimedRead};
use crate::wait::LIMIT;

/// RFC 9113 error codes a test names.
pub mod code {
    /// NO_ERROR.
    pub const NO_ERROR: u32 = 0x0;
    /// PROTOCOL_ERROR.
    pub const PROTOCOL_ERROR: u32 = 0x1;
    /// FLOW_CONTROL_ERROR.
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    /// STREAM_CLOSED.
    pub const STREAM_CLOSED: u32 = 0x5;
    /// REFUSED_STREAM.
    pub const REFUSED_STREAM: u32 = 0x7;
    /// CANCEL.
    pub const CANCEL: u32 = 0x8;
    /// ENHANCE_YOUR_CALM.
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
}

/// A request: pseudo-fields, regular fields (names lowercase) and a body.
#[derive(Debug, Clone)]
pub struct Req {
    /// `:method`.
    pub method: String,
    /// `:path`.
    pub path: String,
    /// `:authority` (`None`: not sent).
    pub authority: Option<String>,
    /// Regular fields, in order; names must be lowercase (RFC 9113 §8.2.1).
    pub fields: Vec<(String, Vec<u8>)>,
    /// The body (sent in DATA frames; none if empty).
    pub body: Vec<u8>,
    /// Largest DATA payload to send at once (the server's frame size and windows cap it too):
    /// a small one makes a body arrive in several frames.
    pub chunk: usize,
    /// END_STREAM after the body (or on HEADERS without a body). `false` leaves the request
    /// open: a body that never ends.
    pub end: bool,
    /// `:authority` and the regular fields are sent as literals *with incremental indexing*
    /// (RFC 7541 §6.2.1), as browsers and curl send them: each goes into the server's dynamic
    /// table. Default false: nothing indexed.
    pub indexed: bool,
}

impl Req {
    /// `method path` with `:authority: test`, no body.
    pub fn new(method: &str, path: &str) -> Req {
        Req {
            method: method.to_owned(),
            path: path.to_owned(),
            authority: Some("test".to_owned()),
            fields: Vec::new(),
            body: Vec::new(),
            chunk: usize::MAX,
            end: true,
            indexed: false,
        }
    }

    /// Sends `:authority` and the regular fields with incremental indexing ([`Req::indexed`]).
    pub fn indexing(mut self) -> Req {
        self.indexed = true;
        self
    }

    /// `GET path`.
    pub fn get(path: &str) -> Req {
        Req::new("GET", path)
    }

    /// `POST path` with `body`.
    pub fn post(path: &str, body: impl Into<Vec<u8>>) -> Req {
        Req::new("POST", path).body(body)
    }

    /// Adds a field.
    pub fn field(mut self, name: &str, value: impl Into<Vec<u8>>) -> Req {
        self.fields.push((name.to_owned(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Req {
        self.body = body.into();
        self
    }

    /// Sends the body in DATA frames of at most `n` bytes.
    pub fn chunked(mut self, n: usize) -> Req {
        self.chunk = n.max(1);
        self
    }

    /// Leaves the stream open after the body (no END_STREAM).
    pub fn open_ended(mut self) -> Req {
        self.end = false;
        self
    }
}

/// A stream's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// `:status`.
    pub status: u16,
    /// The other fields, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// The fields of the header block that ended the stream after the body, if one did.
    pub trailers: Vec<(String, String)>,
}

impl Response {
    /// The first value of field `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 text.
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("body is UTF-8")
    }
}

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A complete answer (END_STREAM received).
    Answered(Response),
    /// RST_STREAM with this code before the answer was complete.
    Reset(u32),
    /// A GOAWAY (this code) whose last stream is below this one: never processed.
    NotProcessed(u32),
    /// The connection ended before the answer was complete (GOAWAY's code if one came).
    Closed(Option<u32>),
}

impl Outcome {
    /// The response; panics (naming `what`) with the outcome otherwise.
    pub fn response(self, what: &str) -> Response {
        match self {
            Outcome::Answered(r) => r,
            other => panic!("{what}: no answer: {other:?}"),
        }
    }
}

/// A GOAWAY received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// Last stream id the server says it processed (or may).
    pub last_stream: u32,
    /// Error code.
    pub code: u32,
    /// Debug data, as text.
    pub debug: String,
}

#[derive(Debug, Default)]
struct Stream {
    /// Body bytes still to send, from `pos`.
    body: Vec<u8>,
    pos: usize,
    chunk: usize,
    /// END_STREAM to be sent with the last DATA.
    end: bool,
    /// Everything we had to send is sent.
    sent_all: bool,
    send_window: i64,
    /// The answer so far.
    status: Option<u16>,
    headers: Vec<(String, String)>,
    data: Vec<u8>,
    trailers: Vec<(String, String)>,
    /// How it ended, once it did.
    outcome: Option<Outcome>,
}

/// A header block in progress (HEADERS without END_HEADERS, then CONTINUATION).
struct Block {
    stream: u32,
    end_stream: bool,
    buf: Vec<u8>,
}

/// An HTTP/2 client connection over `S` (a TCP socket, or TLS over one).
pub struct H2Client<S: Read + Write + TimedRead> {
    io: S,
    input: Vec<u8>,
    decoder: Decoder,
    streams: BTreeMap<u32, Stream>,
    next_id: u32,
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE.
    peer_window: i64,
    peer_max_frame: usize,
    /// How much more we may send on the connection.
    send_window: i64,
    /// Whether we open our windows as DATA arrives.
    auto_window: bool,
    /// SETTINGS frames received from the server (acked by us), and our SETTINGS acked.
    settings_seen: u32,
    acked: bool,
    block: Option<Block>,
    goaway: Option<GoAway>,
    /// The server closed the connection (EOF or reset).
    closed: bool,
    limit: Duration,
}

/// A plain TCP connection to `addr` with [`LIMIT`] read and write timeouts and `TCP_NODELAY`.
pub fn tcp(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, LIMIT).expect("connect");
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.set_write_timeout(Some(LIMIT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// A TLS connection to `addr` as `127.0.0.1`, trusting `ca`, offering only ALPN `h2`; the
/// handshake done and `h2` asserted agreed.
pub fn tls(addr: SocketAddr, ca: &Path) -> TlsStream<TcpStream> {
    let mut tls = TlsConnector::new(Some(ca), &[b"h2"])
        .expect("a TLS connector")
        .connect("127.0.0.1", tcp(addr))
        .expect("a TLS client");
    tls.complete_handshake().expect("the TLS handshake");
    assert_eq!(tls.alpn_protocol(), Some(&b"h2"[..]), "ALPN h2 not agreed");
    tls
}

/// A connection the client speaks over: plain TCP (h2c with prior knowledge) or TLS (ALPN
/// `h2`), so that one test runs over either.
pub enum Conn {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, the handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    /// A connection to `addr`: over TLS trusting `ca` if given ([`tls`]), else plain.
    pub fn open(addr: SocketAddr, ca: Option<&Path>) -> Conn {
        match ca {
            Some(ca) => Conn::Tls(Box::new(tls(addr, ca))),
            None => Conn::Plain(tcp(addr)),
        }
    }

    /// The TCP socket underneath.
    pub fn socket(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(t) => t.get_ref(),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(t) => t.flush(),
        }
    }
}

impl TimedRead for Conn {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(t)
    }
}

/// An HTTP/2 connection to `addr` (over TLS trusting `ca` if given, else h2c with prior
/// knowledge), the preface and `settings` sent.
pub fn connect(addr: SocketAddr, ca: Option<&Path>, settings: &[(u16, u32)]) -> H2Client<Conn> {
    H2Client::start(Conn::open(addr, ca), settings).expect("preface written")
}

impl<S: Read + Write + TimedRead> H2Client<S> {
    /// Writes the preface and a SETTINGS frame with `settings` (`frame::setting` ids; push is
    /// always turned off) on a connected stream.
    pub fn start(mut io: S, settings: &[(u16, u32)]) -> io::Result<H2Client<S>> {
        let mut out = frame::PREFACE.to_vec();
        let mut params = vec![(setting::ENABLE_PUSH, 0)];
        params.extend_from_slice(settings);
        frame::write_settings(&mut out, &params);
        io.write_all(&out)?;
        Ok(H2Client {
            io,
            input: Vec::new(),
            decoder: Decoder::new(4096),
            streams: BTreeMap::new(),
            next_id: 1,
            peer_window: i64::from(frame::DEFAULT_WINDOW),
            peer_max_frame: frame::DEFAULT_MAX_FRAME as usize,
            send_window: i64::from(frame::DEFAULT_WINDOW),
            auto_window: true,
            settings_seen: 0,
            acked: false,
            block: None,
            goaway: None,
            closed: false,
            limit: LIMIT,
        })
    }

    /// Whether WINDOW_UPDATE frames are sent as DATA is read (default true). With `false`
    /// the client never opens a window past what its SETTINGS gave.
    pub fn auto_window(&mut self, yes: bool) {
        self.auto_window = yes;
    }

    /// How long a wait may take before it fails (default [`LIMIT`]).
    pub fn set_limit(&mut self, d: Duration) {
        self.limit = d;
    }

    /// The socket or TLS stream.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// Gives the connection up, keeping only the stream (its state, buffers and HPACK table
    /// dropped): to hold many idle connections cheaply.
    pub fn into_inner(self) -> S {
        self.io
    }

    /// The GOAWAY received, if one was.
    pub fn goaway(&self) -> Option<&GoAway> {
        self.goaway.as_ref()
    }

    /// Whether the server closed the connection.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// SETTINGS frames received from the server so far.
    pub fn settings_seen(&self) -> u32 {
        self.settings_seen
    }

    /// Writes raw bytes (a frame a test makes itself).
    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.io.write_all(bytes)?;
        self.io.flush()
    }

    /// Opens a stream for `req`: HEADERS (+ CONTINUATION) now, the body as far as the
    /// windows allow (the rest as the server opens them, while waiting). Returns its id.
    pub fn send(&mut self, req: &Req) -> u32 {
        let id = self.next_id;
        self.next_id += 2;
        let pseudo: [(&[u8], &[u8]); 3] = [
            (b":method", req.method.as_bytes()),
            (b":scheme", b"http"),
            (b":path", req.path.as_bytes()),
        ];
        let mut rest: Vec<(&[u8], &[u8])> = Vec::new();
        if let Some(a) = &req.authority {
            rest.push((b":authority", a.as_bytes()));
        }
        rest.extend(req.fields.iter().map(|(n, v)| (n.as_bytes(), v.as_slice())));
        let mut block = Vec::new();
        hpack::encode(pseudo, &mut block);
        if req.indexed {
            for (name, value) in rest {
                encode_indexed(name, value, &mut block);
            }
        } else {
            hpack::encode(rest, &mut block);
        }
        let end_on_headers = req.end && req.body.is_empty();
        let mut out = Vec::new();
        frame::write_headers(&mut out, id, &block, end_on_headers, self.peer_max_frame);
        self.io.write_all(&out).expect("write HEADERS");
        self.streams.insert(
            id,
            Stream {
                body: req.body.clone(),
                chunk: req.chunk,
                end: req.end,
                sent_all: req.body.is_empty(),
                send_window: self.peer_window,
                ..Stream::default()
            },
        );
        self.send_data().expect("write DATA");
        id
    }

    /// Sends `req` and waits for its outcome.
    pub fn request(&mut self, req: &Req) -> Outcome {
        let id = self.send(req);
        self.wait(id)
    }

    /// Waits for stream `id` to end; panics if it does not within the limit.
    pub fn wait(&mut self, id: u32) -> Outcome {
        let deadline = Instant::now() + self.limit;
        loop {
            if let Some(o) = self.streams.get(&id).and_then(|s| s.outcome.clone()) {
                return o;
            }
            assert!(self.streams.contains_key(&id), "stream {id} was never sent");
            if let Err(e) = self.read_some(deadline) {
                panic!("waiting for stream {id}: {e}");
            }
        }
    }

    /// Waits for each of `ids`, in order.
    pub fn wait_all(&mut self, ids: &[u32]) -> Vec<Outcome> {
        ids.iter().map(|&id| self.wait(id)).collect()
    }

    /// Reads (answering what must be) until `done(self)` holds; `Err` if the limit passes or
    /// the connection closes first.
    pub fn read_until(&mut self, what: &str, done: impl Fn(&Self) -> bool) -> Result<(), String> {
        let deadline = Instant::now() + self.limit;
        while !done(self) {
            if self.closed {
                return Err(format!("{what}: the connection closed first"));
            }
            self.read_some(deadline)
                .map_err(|e| format!("{what}: {e}"))?;
        }
        Ok(())
    }

    /// Reads until the server closes the connection (EOF or reset), answering what must be
    /// meanwhile; `Err` if it is still open when the limit passes.
    pub fn read_to_close(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + self.limit;
        while !self.closed {
            self.read_some(deadline)?;
        }
        Ok(())
    }

    /// One read (bounded by `deadline`) and every whole frame it completes.
    fn read_some(&mut self, deadline: Instant) -> Result<(), String> {
        if self.closed {
            return Err(format!(
                "the connection is closed (GOAWAY: {:?})",
                self.goaway
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no frame within {:?}", self.limit));
        }
        self.io
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let mut chunk = [0u8; 32 * 1024];
        match self.io.read(&mut chunk) {
            Ok(0) => self.on_close(),
            Ok(n) => {
                self.input.extend_from_slice(&chunk[..n]);
                self.frames()?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("no frame within {:?}", self.limit));
            }
            Err(e) if is_reset(&e) => self.on_close(),
            Err(e) => return Err(format!("read: {e}")),
        }
        Ok(())
    }

    fn on_close(&mut self) {
        self.closed = true;
        let code = self.goaway.as_ref().map(|g| g.code);
        for s in self.streams.values_mut() {
            if s.outcome.is_none() {
                s.outcome = Some(Outcome::Closed(code));
            }
        }
    }

    /// Handles every whole frame in the input.
    fn frames(&mut self) -> Result<(), String> {
        loop {
            let Some(h) = Header::parse(&self.input) else {
                return Ok(());
            };
            let end = HEADER_LEN + h.len as usize;
            if self.input.len() < end {
                return Ok(());
            }
            let payload = self.input[HEADER_LEN..end].to_vec();
            self.input.drain(..end);
            self.frame(&h, &payload)?;
        }
    }

    fn frame(&mut self, h: &Header, payload: &[u8]) -> Result<(), String> {
        if let Some(b) = &self.block {
            if h.kind != kind::CONTINUATION || h.stream != b.stream {
                return Err(format!("frame {h:?} inside a header block"));
            }
        }
        let mut out = Vec::new();
        match h.kind {
            kind::DATA => {
                let data = unpad(h, payload)?;
                let flow = payload.len() as u32;
                let s = self
                    .streams
                    .get_mut(&h.stream)
                    .ok_or(format!("DATA on unknown stream {}", h.stream))?;
                if s.outcome.is_none() {
                    if s.status.is_none() {
                        return Err(format!("DATA before HEADERS on stream {}", h.stream));
                    }
                    s.data.extend_from_slice(data);
                }
                let end = h.has(flag::END_STREAM);
                if self.auto_window && flow > 0 {
                    frame::write_window_update(&mut out, 0, flow);
                    if !end {
                        frame::write_window_update(&mut out, h.stream, flow);
                    }
                }
                if end {
                    self.finish(h.stream);
                }
            }
            kind::HEADERS => {
                let mut block = unpad(h, payload)?;
                if h.has(flag::PRIORITY) {
                    block = block.get(5..).ok_or("short HEADERS priority")?;
                }
                self.block = Some(Block {
                    stream: h.stream,
                    end_stream: h.has(flag::END_STREAM),
                    buf: block.to_vec(),
                });
                if h.has(flag::END_HEADERS) {
                    self.end_block()?;
                }
            }
            kind::CONTINUATION => {
                let b = self.block.as_mut().ok_or("CONTINUATION without HEADERS")?;
                b.buf.extend_from_slice(payload);
                if h.has(flag::END_HEADERS) {
                    self.end_block()?;
                }
            }
            kind::RST_STREAM => {
                let code = be32(payload.get(..4).ok_or("short RST_STREAM")?);
                if let Some(s) = self.streams.get_mut(&h.stream) {
                    // Nothing more is sent on it; an answer already complete stands (the
                    // server may reset NO_ERROR to stop a body it no longer needs, §8.1).
                    s.sent_all = true;
                    s.body = Vec::new();
                    if s.outcome.is_none() {
                        s.outcome = Some(Outcome::Reset(code));
                    }
                }
            }
            kind::SETTINGS if h.has(flag::ACK) => self.acked = true,
            kind::SETTINGS => {
                self.settings_seen += 1;
                for (id, value) in frame::settings(payload) {
                    match id {
                        setting::INITIAL_WINDOW_SIZE => {
                            let delta = i64::from(value) - self.peer_window;
                            self.peer_window = i64::from(value);
                            for s in self.streams.values_mut() {
                                s.send_window += delta;
                            }
                        }
                        setting::MAX_FRAME_SIZE => self.peer_max_frame = value as usize,
                        _ => {}
                    }
                }
                frame::write_settings_ack(&mut out);
            }
            kind::PING if !h.has(flag::ACK) => {
                let data: [u8; 8] = payload.try_into().map_err(|_| "PING not 8 bytes")?;
                frame::write_ping_ack(&mut out, data);
            }
            kind::GOAWAY => {
                let last_stream = be32(payload.get(..4).ok_or("short GOAWAY")?) & 0x7fff_ffff;
                let code = be32(&payload[4..8]);
                self.goaway = Some(GoAway {
                    last_stream,
                    code,
                    debug: String::from_utf8_lossy(&payload[8..]).into_owned(),
                });
                for (&id, s) in self.streams.iter_mut() {
                    if id > last_stream && s.outcome.is_none() {
                        s.outcome = Some(Outcome::NotProcessed(code));
                    }
                }
            }
            kind::WINDOW_UPDATE => {
                let inc = i64::from(be32(payload.get(..4).ok_or("short WINDOW_UPDATE")?));
                if h.stream == 0 {
                    self.send_window += inc;
                } else if let Some(s) = self.streams.get_mut(&h.stream) {
                    s.send_window += inc;
                }
            }
            kind::PUSH_PROMISE => return Err("PUSH_PROMISE with push turned off".into()),
            _ => {}
        }
        if !out.is_empty() {
            self.io.write_all(&out).map_err(|e| format!("write: {e}"))?;
        }
        self.send_data().map_err(|e| format!("write DATA: {e}"))
    }

    /// A whole header block: the response head, a 1xx (dropped) or trailers.
    fn end_block(&mut self) -> Result<(), String> {
        let Some(b) = self.block.take() else {
            return Ok(());
        };
        let mut fields: Vec<Field> = Vec::new();
        let limits = ListLimits {
            max_size: 1 << 20,
            max_fields: 1000,
        };
        self.decoder
            .decode(&b.buf, limits, &mut fields)
            .map_err(|e| format!("HPACK: {e:?}"))?;
        let s = self
            .streams
            .get_mut(&b.stream)
            .ok_or(format!("HEADERS on unknown stream {}", b.stream))?;
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        if s.status.is_none() {
            let mut status = None;
            let mut headers = Vec::new();
            for f in fields {
                if f.name == b":status" {
                    status = text(&f.value).parse::<u16>().ok();
                } else {
                    headers.push((text(&f.name), text(&f.value)));
                }
            }
            let status = status.ok_or("a response without :status")?;
            if (100..200).contains(&status) {
                return Ok(());
            }
            s.status = Some(status);
            s.headers = headers;
        } else {
            if !b.end_stream {
                return Err(format!(
                    "trailers without END_STREAM on stream {}",
                    b.stream
                ));
            }
            s.trailers = fields
                .iter()
                .map(|f| (text(&f.name), text(&f.value)))
                .collect();
        }
        if b.end_stream {
            self.finish(b.stream);
        }
        Ok(())
    }

    fn finish(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            if s.outcome.is_none() {
                s.outcome = Some(Outcome::Answered(Response {
                    status: s.status.unwrap_or(0),
                    headers: std::mem::take(&mut s.headers),
                    body: std::mem::take(&mut s.data),
                    trailers: std::mem::take(&mut s.trailers),
                }));
            }
        }
    }

    /// Sends request bodies as far as the windows and the frame size allow.
    fn send_data(&mut self) -> io::Result<()> {
        let mut out = Vec::new();
        for (&id, s) in self.streams.iter_mut() {
            while !s.sent_all {
                let left = s.body.len() - s.pos;
                let n = (left as i64)
                    .min(self.send_window)
                    .min(s.send_window)
                    .min(self.peer_max_frame as i64)
                    .min(i64::try_from(s.chunk).unwrap_or(i64::MAX))
                    .max(0) as usize;
                if n == 0 && left > 0 {
                    break;
                }
                let last = n == left;
                frame::write_data(&mut out, id, &s.body[s.pos..s.pos + n], last && s.end);
                s.pos += n;
                s.send_window -= n as i64;
                self.send_window -= n as i64;
                if last {
                    s.sent_all = true;
                    s.body = Vec::new();
                }
            }
        }
        if !out.is_empty() {
            self.io.write_all(&out)?;
            self.io.flush()?;
        }
        Ok(())
    }
}

/// A literal field with incremental indexing (RFC 7541 §6.2.1), its name by static index
/// when the table has it.
fn encode_indexed(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match hpack::STATIC.iter().position(|(n, _)| n.as_bytes() == name) {
        Some(i) => hpack::encode_int(out, 0x40, 6, i + 1),
        None => {
            hpack::encode_int(out, 0x40, 6, 0);
            hpack::encode_str(out, name);
        }
    }
    hpack::encode_str(out, value);
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A DATA or HEADERS payload without its padding.
fn unpad<'a>(h: &Header, payload: &'a [u8]) -> Result<&'a [u8], String> {
    if !h.has(flag::PADDED) {
        return Ok(payload);
    }
    let (&pad, rest) = payload
        .split_first()
        .ok_or("padded frame without a length")?;
    rest.len()
        .checked_sub(usize::from(pad))
        .map(|n| &rest[..n])
        .ok_or_else(|| "padding longer than the frame".to_owned())
}
