//! Test support: starts any concurrency model in-process through [`berth::drive::serve`] on
//! `127.0.0.1:0`, and talks to it over real sockets with small, bounded clients.
//!
//! Include it from a test crate with
//! `#[path = "support/server.rs"] mod server;`.
//!
//! A server's counters come from [`Settings::new_stats`] (shared memory for `forked` and
//! `prefork`, so the test sees the children's counts). A started server is listening when
//! [`Opts::start`] returns: for `prefork` that means every child has bound its listener (seen in
//! `/proc/net/tcp`), so no test request is spent on probing and the counters start at zero.
//!
//! Every socket made here has read and write timeouts ([`IO_TIMEOUT`]), and every wait has a
//! deadline, so a test that finds a bug fails instead of hanging.
//!
//! Transport is a dimension of its own: a server started with [`Opts::tls`] (or on a thread
//! that called [`over_tls`] before [`Opts::new`]) serves HTTPS with a test certificate, and
//! every client made here for its address ([`connect`], [`Client::connect`], from any thread)
//! speaks TLS to it, verifying the certificate. The same cases then run over both.
#![allow(dead_code, unused_imports)]

/// Waits with a deadline and connection resets, from the shared test kit.
pub use berth_testkit::bytes::is_reset;
/// Test certificates (`berth_testkit::certs`), for the HTTPS servers here and for the tests.
pub use berth_testkit::certs;
pub use berth_testkit::wait_for;

use std::cell::Cell;
use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use berth::app::{Demo, DemoConfig};
use berth::drive::{serve, Common, Model, ModelConfigs, Server, Service, Settings, Timeouts};
use berth::files::Files;
use berth::net::tls::{TlsAcceptor, TlsConnector, TlsSettings, TlsStream};
use berth::net::{Acceptor, Transport};
use berth::proto::http::Limits;
use berth::stats::{Snapshot, Stats};

/// Read and write timeout of every client socket: generous, only a guard against hangs.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`wait_for`] waits for a condition before giving up.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a model is started. [`Opts::new`] suits the suites that run every model: 20 ms slow jobs,
/// 4 workers (event-loop models), 1 accept thread, 1024 slots, 256 threads or children, 2
/// prefork processes; [`Opts::evloop`] the tests of `evloop` alone. Timeouts and everything not
/// named are the models' defaults. What a model is and needs comes from berth's model registry
/// ([`Settings::listeners`], [`berth::drive::Needs`]), so a new model needs nothing here.
#[derive(Debug, Clone)]
pub struct Opts {
    /// What [`serve`] is given: the model on `127.0.0.1:0`, the common settings and every
    /// model's own.
    pub settings: Settings,
    /// How long a `/test/slow` job takes.
    pub slow: Duration,
    /// Whether `/test/slow` goes to a worker; if `None`, as the CLI does: when `workers > 0`.
    pub offload_slow: Option<bool>,
    /// Root of `/files`; none by default (every file is then 404).
    pub files: Option<PathBuf>,
    /// Serve HTTPS (the test certificate) instead of plain HTTP.
    pub tls: bool,
    /// `/ws/echo`'s limits and permessage-deflate settings.
    pub ws: berth::proto::ws::WsConfig,
    /// On-the-fly compression of `/files` (`--compress`); off by default.
    pub compress: Option<berth::proto::http::Compress>,
}

impl Opts {
    /// The defaults for `model`.
    pub fn new(model: Model) -> Opts {
        let mut settings = Settings::new(model, "127.0.0.1:0".parse().unwrap());
        settings.common.accept_threads = 1;
        settings.common.sizing.capacity = 1024;
        settings.common.workers = 4;
        settings.models.threaded.max_threads = 256;
        settings.models.forked.max_children = 256;
        settings.models.prefork.processes = 2;
        Opts {
            settings,
            slow: Duration::from_millis(20),
            offload_slow: None,
            files: None,
            tls: OVER_TLS.with(Cell::get),
            ws: berth::proto::ws::WsConfig::default(),
            compress: None,
        }
    }

    /// On-the-fly compression of `/files`, as `--compress` turns it on.
    pub fn compress(mut self, compress: Option<berth::proto::http::Compress>) -> Opts {
        self.compress = compress;
        self
    }

    /// `/ws/echo`'s settings.
    pub fn ws(mut self, ws: berth::proto::ws::WsConfig) -> Opts {
        self.ws = ws;
        self
    }

    /// Serves HTTPS with the test certificate (or plain HTTP, `false`).
    pub fn tls(mut self, yes: bool) -> Opts {
        self.tls = yes;
        self
    }

    /// `evloop` as its own tests start it: 1 accept thread, 1 worker, 1024 slots, 30 ms slow
    /// jobs.
    pub fn evloop() -> Opts {
        Opts::new(Model::Evloop)
            .workers(1)
            .slow(Duration::from_millis(30))
    }

    /// The model.
    pub fn model(&self) -> Model {
        self.settings.model
    }

    /// Serves `/files` from `root`.
    pub fn files(mut self, root: impl Into<PathBuf>) -> Opts {
        self.files = Some(root.into());
        self
    }

    /// Header, body, idle and write timeouts (every model).
    pub fn timeouts(mut self, t: Timeouts) -> Opts {
        self.settings.common.timeouts = t;
        self
    }

    /// Duration of a `/test/slow` job (`-D`).
    pub fn slow(mut self, d: Duration) -> Opts {
        self.slow = d;
        self
    }

    /// Whether `/test/slow` goes to a worker, whatever the number of workers.
    pub fn offload_slow(mut self, yes: bool) -> Opts {
        self.offload_slow = Some(yes);
        self
    }

    /// Accept threads (`-A`): `evloop`, and per process in `prefork`; scheduler threads of
    /// `actor`.
    pub fn accept_threads(mut self, n: usize) -> Opts {
        self.settings.common.accept_threads = n;
        self
    }

    /// Worker threads of the event-loop models (`-w`).
    pub fn workers(mut self, n: usize) -> Opts {
        self.settings.common.workers = n;
        self
    }

    /// Slots per accept thread of the event-loop models (`-C`).
    pub fn capacity(mut self, n: usize) -> Opts {
        self.settings.common.sizing.capacity = n;
        self
    }

    /// Thread cap of `threaded`.
    pub fn max_threads(mut self, n: usize) -> Opts {
        self.settings.models.threaded.max_threads = n;
        self
    }

    /// Process cap of `forked`.
    pub fn max_children(mut self, n: usize) -> Opts {
        self.settings.models.forked.max_children = n;
        self
    }

    /// Worker processes of `prefork`.
    pub fn processes(mut self, n: usize) -> Opts {
        self.settings.models.prefork.processes = n;
        self
    }

    /// Request limits (every model).
    pub fn limits(mut self, limits: Limits) -> Opts {
        self.settings.common.limits = limits;
        self
    }

    /// Changes some request limits, keeping the others.
    pub fn with_limits(mut self, f: impl FnOnce(&mut Limits)) -> Opts {
        f(&mut self.settings.common.limits);
        self
    }

    /// Changes the settings every model shares (capacity, workers, queue, limits, ...).
    pub fn with_common(mut self, f: impl FnOnce(&mut Common)) -> Opts {
        f(&mut self.settings.common);
        self
    }

    /// Changes models' own settings (`c.threaded.max_threads`, `c.prefork.processes`, ...).
    pub fn with_models(mut self, f: impl FnOnce(&mut ModelConfigs)) -> Opts {
        f(&mut self.settings.models);
        self
    }

    /// How many listening sockets the server has once it is fully up.
    pub fn listeners(&self) -> usize {
        self.settings.listeners()
    }

    /// Starts the server with the demo app and waits (bounded) until every listener it should
    /// have is listening.
    pub fn start(self) -> ModelServer {
        let mut app = DemoConfig {
            slow_duration: self.slow,
            offload_slow: self
                .offload_slow
                .unwrap_or(self.settings.common.workers > 0),
            ..Default::default()
        };
        app.ws = self.ws;
        app.compress = self.compress;
        let files = match &self.files {
            Some(root) => Files::new(root).expect("files root"),
            None => Files::none(),
        };
        self.start_service(|stats| Demo::new(app, stats.clone()).with_files(files))
    }

    /// Like [`Opts::start`], with the service `make` builds from the server's counters instead
    /// of the demo app.
    pub fn start_service<S: Service>(self, make: impl FnOnce(&Arc<Stats>) -> S) -> ModelServer
    where
        S::Handler: Send + 'static,
    {
        let model = self.model();
        let stats = self.settings.new_stats().expect("counters");
        let mut settings = self.settings.clone();
        if self.tls {
            settings.common.listen.transport = Acceptor::Tls(test_tls().acceptor.clone());
        }
        let (server, addr) = serve(&settings, make(&stats), stats.clone())
            .unwrap_or_else(|e| panic!("{model}: serve: {e}"));
        let addr = addr.tcp().expect("served on TCP");
        if self.tls {
            tls_addrs().insert(addr);
        }
        let srv = ModelServer {
            model,
            addr,
            stats,
            server: Some(server),
            opts: self,
        };
        srv.wait_listening();
        srv
    }
}

/// A running server of some model; shut down and joined when dropped.
pub struct ModelServer {
    /// The model.
    pub model: Model,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its counters (shared with its children for `forked` and `prefork`).
    pub stats: Arc<Stats>,
    /// The options it was started with.
    pub opts: Opts,
    server: Option<Server>,
}

impl ModelServer {
    /// Starts `model` with the default [`Opts`].
    pub fn start(model: Model) -> ModelServer {
        Opts::new(model).start()
    }

    /// Reads the counters.
    pub fn snapshot(&self) -> Snapshot {
        self.stats.snapshot()
    }

    /// Waits (bounded) until the counters satisfy `cond`; panics with the last snapshot if not.
    pub fn wait_stats(&self, what: &str, cond: impl Fn(&Snapshot) -> bool) -> Snapshot {
        let mut last = self.snapshot();
        let ok = wait_for(WAIT_TIMEOUT, || {
            last = self.snapshot();
            cond(&last)
        });
        assert!(
            ok,
            "{}: timed out waiting for {what}; last stats: {last:?}",
            self.model
        );
        last
    }

    /// A connected client.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Waits (bounded) until the port has as many listening sockets as the model makes. Only
    /// a model whose children bind the listeners (`prefork`) can be behind: the others listen
    /// before `serve` returns (and reading `/proc/net/tcp` costs tens of milliseconds when many
    /// connections sit in TIME_WAIT).
    pub fn wait_listening(&self) {
        if !self.model.needs().children_listen {
            return;
        }
        let want = self.opts.listeners();
        let port = self.addr.port();
        let ok = wait_for(WAIT_TIMEOUT, || listeners_on(port) >= want);
        assert!(
            ok,
            "{}: {} of {want} listener(s) on port {port} after {WAIT_TIMEOUT:?}",
            self.model,
            listeners_on(port)
        );
    }

    /// Begins a graceful drain ([`Server::drain`]) with `timeout`; [`ModelServer::stop`]
    /// (or dropping it) then waits for the end.
    pub fn drain(&self, timeout: Duration) {
        if let Some(server) = &self.server {
            server.drain(timeout);
        }
    }

    /// Stops the server and waits for it (children included).
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
            server.join();
        }
        // The port may be another (plain) server's next.
        tls_addrs().remove(&self.addr);
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Sockets in state LISTEN on `port` (any address, IPv4 or IPv6), from `/proc/net/tcp{,6}`.
pub fn listeners_on(port: u16) -> usize {
    let suffix = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|text| {
            text.lines()
                .skip(1)
                .filter(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    f.len() > 3 && f[1].ends_with(&suffix) && f[3] == "0A"
                })
                .count()
        })
        .sum()
}

/// `GET /stats` on a new connection: asserts a 200 in Prometheus text and returns the text.
pub fn stats_text(addr: SocketAddr) -> String {
    let r = roundtrip(addr, get_request("/stats").as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4"),
        "{r:?}"
    );
    r.text().to_owned()
}

/// The value of an unlabelled metric in Prometheus text; panics if it is missing.
pub fn metric(text: &str, name: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("metric {name}: {e} in:\n{text}"))
}

thread_local! {
    /// Whether [`Opts::new`] on this thread makes an HTTPS server ([`over_tls`]).
    static OVER_TLS: Cell<bool> = const { Cell::new(false) };
}

/// Makes every [`Opts::new`] on this thread (so every server a case starts) serve HTTPS: how
/// a suite runs its cases over TLS without changing them.
pub fn over_tls(yes: bool) {
    OVER_TLS.with(|t| t.set(yes));
}

/// The test certificate, made once per test process, and both ends of TLS for it.
pub struct TestTls {
    /// The certificate files (the CA is what clients trust).
    pub certs: certs::Certs,
    /// The server side (the certificate and key).
    pub acceptor: TlsAcceptor,
    /// The client side (trusts the test CA; ALPN `http/1.1`).
    pub connector: TlsConnector,
}

/// The process's [`TestTls`].
pub fn test_tls() -> &'static TestTls {
    static TLS: OnceLock<TestTls> = OnceLock::new();
    TLS.get_or_init(|| {
        let certs = certs::Certs::new("server-support");
        TestTls {
            acceptor: TlsAcceptor::new(TlsSettings::http(&certs.cert, &certs.key))
                .expect("test certificate"),
            connector: TlsConnector::new(Some(&certs.ca), &[b"http/1.1"]).expect("test CA"),
            certs,
        }
    })
}

/// The addresses of the HTTPS servers running now.
fn tls_addrs() -> std::sync::MutexGuard<'static, HashSet<SocketAddr>> {
    static ADDRS: OnceLock<Mutex<HashSet<SocketAddr>>> = OnceLock::new();
    ADDRS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Whether the server at `addr` serves HTTPS.
pub fn is_tls(addr: SocketAddr) -> bool {
    tls_addrs().contains(&addr)
}

/// A client's connection: a TCP socket, or TLS over one (to an HTTPS server of this module).
pub enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, the handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The TCP socket underneath (for socket options: timeouts, linger, buffer sizes).
    pub fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.get_ref(),
        }
    }

    /// Whether this is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// Read timeout of the socket underneath.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(t)
    }

    /// Ends the sending side as a client does: TLS first says close_notify, then FIN.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.shutdown(Shutdown::Write),
            Stream::Tls(t) => t.shutdown_write(),
        }
    }

    /// A second handle on a plain socket (for a writer thread beside a reader); `None` for
    /// TLS, whose state cannot be shared between two threads.
    pub fn try_clone(&self) -> Option<Stream> {
        match self {
            Stream::Plain(s) => s.try_clone().ok().map(Stream::Plain),
            Stream::Tls(_) => None,
        }
    }
}

impl berth_testkit::bytes::TimedRead for Stream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        Stream::set_read_timeout(self, t)
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            // The first write finishes the handshake, so that what a case writes is on the
            // wire when `write` returns, as over plain TCP.
            Stream::Tls(t) => {
                if t.handshaking() {
                    t.complete_handshake()?;
                }
                t.write(buf)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(t) => t.flush(),
        }
    }
}

/// Connects to `addr` with [`IO_TIMEOUT`] read and write timeouts and `TCP_NODELAY`; over TLS
/// if the server there serves HTTPS.
pub fn connect(addr: SocketAddr) -> Stream {
    let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    if !is_tls(addr) {
        return Stream::Plain(stream);
    }
    // The handshake happens at the first write or read, as a real client's would: a server
    // refusing at capacity answers it with an alert, which the case then reads as an error.
    let tls = test_tls()
        .connector
        .connect("127.0.0.1", stream)
        .expect("TLS client");
    Stream::Tls(Box::new(tls))
}

/// One parsed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// Body (empty for HEAD responses).
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 text.
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("body is UTF-8")
    }

    /// Whether the server said it will close the connection.
    pub fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// A client on one connection: writes raw bytes and reads responses framed by Content-Length,
/// keeping bytes of later (pipelined) responses for the next read. Over a TCP socket, or any
/// other byte stream (a TLS client's).
pub struct Client<S = Stream> {
    /// The socket.
    pub stream: S,
    buf: Vec<u8>,
}

impl Client {
    /// Connects to `addr` (see [`connect`]).
    pub fn connect(addr: SocketAddr) -> Client {
        Client::from_stream(connect(addr))
    }

    /// Closes the connection: with a FIN, or with a RST if `reset` (`SO_LINGER` 0).
    pub fn leave(self, reset: bool) {
        if reset {
            socket2::SockRef::from(self.stream.socket())
                .set_linger(Some(Duration::ZERO))
                .unwrap();
        }
    }

    /// Shuts down the write side (over TLS, close_notify first; then FIN).
    pub fn shutdown_write(&mut self) {
        let _ = self.stream.shutdown_write();
    }
}

impl<S: Read + Write> Client<S> {
    /// Wraps a connected stream.
    pub fn from_stream(stream: S) -> Client<S> {
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes all of `bytes`.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write request");
    }

    /// Sends `GET path` (HTTP/1.1, keep-alive) and reads the response.
    pub fn get(&mut self, path: &str) -> Response {
        self.send(get_request(path).as_bytes());
        self.read_response()
    }

    /// Reads once (at most 16 KiB), keeping the bytes for the next response: a slow reader.
    pub fn read_some(&mut self) {
        self.fill().unwrap_or_else(|e| panic!("reading: {e}"));
    }

    /// Reads one response to a request that was not HEAD.
    pub fn read_response(&mut self) -> Response {
        self.try_read_response(false)
            .unwrap_or_else(|e| panic!("reading a response: {e}"))
    }

    /// Reads one response to a HEAD request (Content-Length present, no body follows).
    pub fn read_head_response(&mut self) -> Response {
        self.try_read_response(true)
            .unwrap_or_else(|e| panic!("reading a HEAD response: {e}"))
    }

    /// Reads one response; `head_only` for a HEAD request. Interim (1xx) responses are returned
    /// like any other. Fails on a timeout, on EOF before a whole response, or on bad framing.
    pub fn try_read_response(&mut self, head_only: bool) -> io::Result<Response> {
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            self.fill()?;
        };
        let head = std::str::from_utf8(&self.buf[..head_end - 4])
            .map_err(|_| bad("response head is not UTF-8"))?
            .to_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let mut parts = status_line.splitn(3, ' ');
        if parts.next() != Some("HTTP/1.1") {
            return Err(bad(&format!("bad status line {status_line:?}")));
        }
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(&format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| bad(&format!("bad header line {line:?}")))?;
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
        let mut response = Response {
            status,
            headers,
            body: Vec::new(),
        };
        // No content, whatever the head says: HEAD, 1xx, 204 and 304 (RFC 9110 §6.4.1).
        let len = if head_only || (100..200).contains(&status) || status == 204 || status == 304 {
            0
        } else {
            response
                .header("content-length")
                .ok_or_else(|| bad("response without Content-Length"))?
                .parse::<usize>()
                .map_err(|_| bad("bad Content-Length"))?
        };
        while self.buf.len() < head_end + len {
            self.fill()?;
        }
        response.body = self.buf[head_end..head_end + len].to_vec();
        self.buf.drain(..head_end + len);
        Ok(response)
    }

    /// Bytes received but not yet returned as part of a response.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Reads until the server closes the connection (EOF or reset) and returns what came after
    /// the responses already read. Fails if the connection is still open after [`IO_TIMEOUT`].
    pub fn read_to_close(&mut self) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + IO_TIMEOUT;
        loop {
            match self.fill() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) if is_reset(&e) => break,
                Err(e) => return Err(e),
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection not closed",
                ));
            }
        }
        Ok(std::mem::take(&mut self.buf))
    }

    /// Asserts that the server closes the connection without sending anything more.
    pub fn expect_closed(&mut self) {
        self.expect_closed_after("the responses read");
    }

    /// [`Client::expect_closed`], where `what` names what the close follows, in a failure.
    pub fn expect_closed_after(&mut self, what: &str) {
        let rest = self
            .read_to_close()
            .unwrap_or_else(|e| panic!("{what}: connection not closed: {e}"));
        assert!(
            rest.is_empty(),
            "{what}: bytes before the close: {:?}",
            String::from_utf8_lossy(&rest)
        );
    }

    /// Reads the answer to a request the server must refuse: `status` with `Connection: close`,
    /// then the connection closed with nothing more. `what` names the request in a failure.
    pub fn expect_refusal(&mut self, status: u16, what: &str) -> Response {
        let r = self
            .try_read_response(false)
            .unwrap_or_else(|e| panic!("{what}: no response: {e}"));
        assert_eq!(r.status, status, "{what}: {}", r.text());
        assert!(r.closes(), "{what}: no Connection: close");
        self.expect_closed_after(&format!("{what}: the {status}"));
        r
    }

    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "connection closed; {} bytes pending: {:?}",
                    self.buf.len(),
                    String::from_utf8_lossy(&self.buf)
                ),
            )),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// `GET path HTTP/1.1` with a Host header and nothing else.
pub fn get_request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n")
}

/// `POST path HTTP/1.1` with a Content-Length body.
pub fn post_request(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Sends one request on a new connection and reads one response.
pub fn roundtrip(addr: SocketAddr, request: &[u8]) -> Response {
    let mut c = Client::connect(addr);
    c.send(request);
    c.read_response()
}

/// `n` clients at once, each on a thread and a connection of its own, `GET path`; returns their
/// responses in client order.
pub fn get_at_once(addr: SocketAddr, n: u64, path: &str) -> Vec<Response> {
    let clients: Vec<_> = (0..n)
        .map(|_| {
            let path = path.to_owned();
            std::thread::spawn(move || Client::connect(addr).get(&path))
        })
        .collect();
    clients
        .into_iter()
        .map(|t| t.join().expect("client thread"))
        .collect()
}

/// Sends one request on a new connection and reads everything until the server closes it.
pub fn send_raw_until_close(addr: SocketAddr, request: &[u8]) -> io::Result<Vec<u8>> {
    let mut c = Client::connect(addr);
    c.send(request);
    c.read_to_close()
}

/// Position of `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}
