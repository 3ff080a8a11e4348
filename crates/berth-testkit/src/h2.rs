//! A blocking HTTP/2 client for tests: a socket (plain TCP or TLS) with a read deadline under
//! berth-proto's client role ([`berth::proto::h2::client`]), which does all the protocol: the
//! preface and SETTINGS, requests as HEADERS (CONTINUATION past the server's frame size) and
//! DATA within the server's windows, SETTINGS and PING acknowledged, windows opened as DATA is
//! read unless told not to, answers decoded with berth-proto's HPACK decoder. This file only
//! moves bytes and gathers each stream's events into an [`Outcome`]. Several streams may be
//! in flight: [`H2Client::send`] them, then [`H2Client::wait`] for each one.
//!
//! ```text
//!   send(Req) ──> Client::open / send_data ──> poll_transmit ──> socket ──> server
//!   wait(id)  <── Outcome <── poll_event <── Client::recv <── socket (deadline) <── server
//! ```
//!
//! It does **not** keep to the server's SETTINGS_MAX_CONCURRENT_STREAMS (a test may want to
//! go past it), push, prioritise, or index anything in its own HPACK encoding unless a
//! request asks ([`Req::indexing`]). Every read has a deadline ([`LIMIT`] unless
//! [`H2Client::set_limit`] says otherwise), so a server that stops answering fails the test
//! instead of hanging it.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use berth::net::tls::{TlsConnector, TlsStream};
use berth::proto::h2::client::{self, Client, ClientConfig, Event, Windows};
use berth::proto::h2::frame;

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

/// What has come on a stream the client opened: the answer so far, and how it ended once
/// it did.
#[derive(Debug, Default)]
struct Tracked {
    answer: Response,
    outcome: Option<Outcome>,
}

/// An HTTP/2 client connection over `S` (a TCP socket, or TLS over one).
pub struct H2Client<S: Read + Write + TimedRead> {
    io: S,
    client: Client,
    /// Output taken from the client, written at once (kept for its capacity).
    out: Vec<u8>,
    streams: BTreeMap<u32, Tracked>,
    /// SETTINGS frames received from the server (acked by the client role).
    settings_seen: u32,
    goaway: Option<GoAway>,
    /// The server closed the connection (EOF or reset).
    closed: bool,
    limit: Duration,
}

/// Appends one raw frame (RFC 9113 §4.1): for the attack tests, which write what no client
/// of good faith would.
pub fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    frame::write_header(out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
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
    pub fn start(io: S, settings: &[(u16, u32)]) -> io::Result<H2Client<S>> {
        let client = Client::new(ClientConfig {
            settings: settings.to_vec(),
            ..ClientConfig::default()
        });
        let mut c = H2Client {
            io,
            client,
            out: Vec::new(),
            streams: BTreeMap::new(),
            settings_seen: 0,
            goaway: None,
            closed: false,
            limit: LIMIT,
        };
        c.flush()?;
        Ok(c)
    }

    /// Whether WINDOW_UPDATE frames are sent as DATA is read (default true). With `false`
    /// the client never opens a window past what its SETTINGS gave.
    pub fn auto_window(&mut self, yes: bool) {
        self.client.set_windows(if yes {
            Windows::Refill { every: 1 }
        } else {
            Windows::Shut
        });
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

    /// Writes raw bytes (a frame a test makes itself), after what the client has queued.
    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.client.write_raw(bytes);
        self.flush()
    }

    /// Opens a stream for `req`: HEADERS (+ CONTINUATION) now, the body as far as the
    /// windows allow (the rest as the server opens them, while waiting). Returns its id.
    pub fn send(&mut self, req: &Req) -> u32 {
        let fields: Vec<(&[u8], &[u8])> = req
            .fields
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_slice()))
            .collect();
        let head = client::Request {
            method: req.method.as_bytes(),
            scheme: b"http",
            path: req.path.as_bytes(),
            authority: req.authority.as_deref().map(str::as_bytes),
            fields: &fields,
            indexed: req.indexed,
        };
        let mut block = Vec::new();
        head.encode(&mut block);
        let id = self
            .client
            .open(&block, req.end && req.body.is_empty())
            .expect("a stream id left");
        if !req.body.is_empty() || !req.end {
            self.client.set_chunk(id, req.chunk);
            self.client.send_data(id, &req.body, req.end);
        }
        self.streams.insert(id, Tracked::default());
        self.flush().expect("write HEADERS and DATA");
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

    /// Writes what the client role has queued.
    fn flush(&mut self) -> io::Result<()> {
        self.client.poll_transmit(&mut self.out);
        if self.out.is_empty() {
            return Ok(());
        }
        let written = self.io.write_all(&self.out).and_then(|()| self.io.flush());
        self.out.clear();
        written
    }

    /// One read (bounded by `deadline`), handed to the client role, and what it heard.
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
                let heard = self.client.recv(&chunk[..n]);
                // What it heard before an error still counts (a GOAWAY, say).
                self.events();
                heard.map_err(|e| format!("the server broke the protocol: {e}"))?;
                self.flush().map_err(|e| format!("write: {e}"))?;
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
            s.outcome.get_or_insert(Outcome::Closed(code));
        }
    }

    /// Gathers the client role's events into each stream's answer.
    fn events(&mut self) {
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        let texts =
            |f: Vec<(Vec<u8>, Vec<u8>)>| f.iter().map(|(n, v)| (text(n), text(v))).collect();
        while let Some(event) = self.client.poll_event() {
            let (id, end) = match event {
                Event::Head {
                    stream,
                    status,
                    fields,
                    end_stream,
                } => {
                    if let Some(s) = self.streams.get_mut(&stream) {
                        s.answer.status = status;
                        s.answer.headers = texts(fields);
                    }
                    (stream, end_stream)
                }
                Event::Data {
                    stream,
                    data,
                    end_stream,
                    ..
                } => {
                    if let Some(s) = self.streams.get_mut(&stream) {
                        s.answer.body.extend_from_slice(&data);
                    }
                    (stream, end_stream)
                }
                Event::Trailers { stream, fields } => {
                    if let Some(s) = self.streams.get_mut(&stream) {
                        s.answer.trailers = texts(fields);
                    }
                    (stream, true)
                }
                Event::Reset { stream, code } => {
                    self.end(stream, Outcome::Reset(code.0));
                    continue;
                }
                Event::GoAway {
                    last_stream,
                    code,
                    debug,
                } => {
                    self.goaway = Some(GoAway {
                        last_stream,
                        code: code.0,
                        debug: text(&debug),
                    });
                    for (_, s) in self.streams.range_mut(last_stream + 1..) {
                        s.outcome.get_or_insert(Outcome::NotProcessed(code.0));
                    }
                    continue;
                }
                Event::Settings { .. } => {
                    self.settings_seen += 1;
                    continue;
                }
                Event::SettingsAcked | Event::Pong(_) => continue,
            };
            if end {
                let answer = self
                    .streams
                    .get_mut(&id)
                    .map(|s| std::mem::take(&mut s.answer));
                self.end(id, Outcome::Answered(answer.unwrap_or_default()));
            }
        }
    }

    /// Stream `id` ended as `how`, unless it had already ended.
    fn end(&mut self, id: u32, how: Outcome) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.outcome.get_or_insert(how);
        }
    }
}
