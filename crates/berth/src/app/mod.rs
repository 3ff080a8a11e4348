//! The built-in demo application: the routes the seeds benchmark, served by every model.
//!
//! | route | answer |
//! |---|---|
//! | `GET /`, `GET /hello/world` | 200 `Hello, World!` |
//! | `GET /test/fast` | 200, empty body, answered on the I/O thread |
//! | `GET /test/slow` | offloaded to a worker that waits `slow_duration`, then 200 |
//! | `POST /reverse` | `{"data": [each value reversed]}` from a JSON object: strings by character, arrays by top-level element; 400 with the reason otherwise |
//! | `GET /files/<path>` | the file below the root ([`Demo::with_files`]), opened and sent by the driver |
//! | `GET /stats` | counters in the Prometheus text format |
//! | `GET /ws/echo` | a WebSocket (RFC 6455) that echoes every message; 400/426 for a bad handshake |
//! | `GET /healthz` | 200 `ok`; 503 `draining` once a drain has begun ([`Stats::set_draining`]) |
//! | `OPTIONS *` | 200, `Allow: GET, HEAD, POST, OPTIONS`, no body (RFC 9110 §9.3.7) |
//! | anything else | 404; a known path with the wrong method gets 405 and `Allow` |
//!
//! With a site ([`Files::with_site`], `berth serve --site DIR`), every path but the demo's own
//! routes above (`/hello/world`, `/test/*`, `/reverse`, `/stats`, `/healthz`, `/echo`,
//! `/ws/echo`, `/files/...`, `OPTIONS *`) is a file of the site: `/` is its `index.html`, as
//! nginx's `location /` with `root DIR` beside more specific `location`s. A file of the site
//! named like a demo route (`DIR/stats`) is therefore not served; the CLI warns of such
//! names at startup.

mod access;
pub mod redirect;
pub mod relay;
mod reverse;

use std::sync::Arc;
use std::time::Duration;

use berth_proto::http::{
    Compress, FileRequest, Handled, Handler, Job, Method, Reply, Request, Response,
};
use berth_proto::upgrade::{Echo, Switch};
use berth_proto::ws::handshake::{self, Offer};
use berth_proto::ws::{EchoHandler, WsConfig, WsSession};

use crate::drive::Service;
use crate::files::Files;
use crate::stats::Stats;

use access::Pending;
pub use access::{
    protocol, AccessLog, Record, RequestLine, Template, ACCESS_LOG_FORMATS, ACCESS_TARGET,
};

/// Settings of the demo application.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// How long a `/test/slow` job waits.
    pub slow_duration: Duration,
    /// Whether `/test/slow` goes to a worker. Seed 001: with no worker threads, a slow request
    /// is answered like a fast one.
    pub offload_slow: bool,
    /// Limits of `/ws/echo`'s WebSocket connections.
    pub ws: WsConfig,
    /// On-the-fly compression of files (`/files` and the site); `None`: never (the default).
    pub compress: Option<Compress>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            slow_duration: Duration::from_millis(30),
            offload_slow: true,
            ws: WsConfig::default(),
            compress: None,
        }
    }
}

/// The demo service: makes one [`DemoHandler`] per I/O thread.
#[derive(Clone)]
pub struct Demo {
    config: Arc<DemoConfig>,
    stats: Arc<Stats>,
    access_log: Option<AccessLog>,
    /// Served over a UNIX socket (the access log's client is then `unix:`).
    unix: bool,
    /// Served over TLS (the access log's scheme is then `https`).
    tls: bool,
    files: Files,
    /// Whether the refusal at capacity names the server (`Server: berth`), as every other
    /// answer does under [`Limits::server_header`](crate::proto::http::Limits).
    server_header: bool,
}

impl Demo {
    /// A demo service counting into `stats`.
    pub fn new(config: DemoConfig, stats: Arc<Stats>) -> Self {
        Demo {
            config: Arc::new(config),
            stats,
            access_log: None,
            unix: false,
            tls: false,
            files: Files::none(),
            server_header: true,
        }
    }

    /// Whether the 503 written to a connection refused at capacity carries `Server: berth`
    /// (on unless told; `berth serve --server-header off` says so for every answer).
    pub fn with_server_header(mut self, on: bool) -> Self {
        self.server_header = on;
        self
    }

    /// Served over a UNIX socket: the access log names its clients, which have no address,
    /// `unix:` (nginx's `$remote_addr` there) rather than `-`.
    pub fn over_unix_socket(mut self, yes: bool) -> Self {
        self.unix = yes;
        self
    }

    /// Served over TLS: the access log's scheme is `https`.
    pub fn over_tls(mut self, yes: bool) -> Self {
        self.tls = yes;
        self
    }

    /// Serves `GET /files/<path>` from `files` (without it, every such request is 404).
    pub fn with_files(mut self, files: Files) -> Self {
        self.files = files;
        self
    }

    /// Logs one line per response in `format` at info level, target [`ACCESS_TARGET`];
    /// `None`: no access log.
    pub fn with_access_log(mut self, format: Option<AccessLog>) -> Self {
        self.access_log = format;
        self
    }
}

impl Service for Demo {
    type Handler = DemoHandler;

    fn handler(&self, thread: usize) -> DemoHandler {
        DemoHandler {
            config: self.config.clone(),
            stats: self.stats.clone(),
            thread,
            scratch: Vec::new(),
            access_log: (self.access_log.clone()).map(|f| Pending::new(f, self.unix, self.tls)),
            site: self.files.site().is_some(),
        }
    }

    fn refusal(&self) -> &'static [u8] {
        if self.server_header {
            b"HTTP/1.1 503 Service Unavailable\r\nServer: berth\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        } else {
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        }
    }

    fn files(&self) -> Files {
        self.files.clone()
    }
}

/// Answers the demo routes for one I/O thread.
pub struct DemoHandler {
    config: Arc<DemoConfig>,
    stats: Arc<Stats>,
    thread: usize,
    /// Reused for bodies built per request (JSON, stats) so they stop allocating once grown.
    scratch: Vec<u8>,
    /// With `--access-log`: what the line of the request being answered needs (see the
    /// `access` module).
    access_log: Option<Pending>,
    /// A site is served at `/` ([`Files::with_site`]).
    site: bool,
}

/// The demo's own routes, which a site does not shadow (see the module's documentation).
pub const DEMO_ROUTES: [&str; 9] = [
    "/hello/world",
    "/test/fast",
    "/test/slow",
    "/reverse",
    "/stats",
    "/healthz",
    "/echo",
    "/ws/echo",
    "/files",
];

/// Whether `path` is one of [`DEMO_ROUTES`] (or below `/files/`, or `*`).
fn demo_route(path: &str) -> bool {
    path == "*" || path.starts_with("/files/") || DEMO_ROUTES.contains(&path)
}

/// Offloaded demo work.
#[derive(Debug)]
pub enum DemoJob {
    /// `/test/slow`: wait, then answer 200 with an empty body.
    Slow(Duration),
}

impl Job for DemoJob {
    fn run(self) -> Reply {
        match self {
            DemoJob::Slow(d) => {
                std::thread::sleep(d);
                Reply::empty(200)
            }
        }
    }
}

const HELLO: &[u8] = b"Hello, World!";
const TEXT: &str = "text/plain; charset=utf-8";

impl DemoHandler {
    /// What `/ws/echo` offers a WebSocket client: permessage-deflate as configured.
    fn ws_offer(&self) -> Offer<'static> {
        Offer {
            deflate: Some(self.config.ws.deflate),
            ..Offer::default()
        }
    }
}

impl Handler for DemoHandler {
    type Job = DemoJob;

    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<DemoJob> {
        self.stats.shard(self.thread).request();
        if let Some(log) = &mut self.access_log {
            log.start(req);
        }
        let readable = matches!(req.method, Method::Get | Method::Head);
        if self.site && !demo_route(req.path) {
            return self.file(req, res, req.path.strip_prefix('/'), true);
        }
        match req.path {
            "/" | "/hello/world" if readable => send(&mut self.access_log, res, 200, TEXT, HELLO),
            "/test/fast" if readable => send(&mut self.access_log, res, 200, TEXT, b""),
            "/test/slow" if readable && self.config.offload_slow => {
                // Its answer has no body.
                if let Some(log) = &mut self.access_log {
                    log.body(0);
                }
                return Handled::Offload(DemoJob::Slow(self.config.slow_duration));
            }
            "/test/slow" if readable => send(&mut self.access_log, res, 200, TEXT, b""),
            // A load balancer's health check: 503 once a drain has begun, so that it stops
            // sending new requests here before the listener closes.
            "/healthz" if readable && self.stats.is_draining() => {
                send(&mut self.access_log, res, 503, TEXT, b"draining\n")
            }
            "/healthz" if readable => send(&mut self.access_log, res, 200, TEXT, b"ok\n"),
            "/stats" if readable => {
                let mut text = String::new();
                self.stats.snapshot().to_prometheus(&mut text);
                send(
                    &mut self.access_log,
                    res,
                    200,
                    "text/plain; version=0.0.4",
                    text.as_bytes(),
                );
            }
            "/" | "/hello/world" | "/test/fast" | "/test/slow" | "/stats" | "/healthz" => {
                not_allowed(&mut self.access_log, res, b"GET, HEAD");
            }
            "/reverse" if req.method == Method::Post => {
                self.scratch.clear();
                match reverse::reverse(req.body, &mut self.scratch) {
                    Ok(()) => send(
                        &mut self.access_log,
                        res,
                        200,
                        "application/json",
                        &self.scratch,
                    ),
                    Err(why) => send(&mut self.access_log, res, 400, TEXT, why.as_bytes()),
                }
            }
            "/reverse" => not_allowed(&mut self.access_log, res, b"POST"),
            // The protocol seam's demo: `Upgrade: echo` turns the connection into a raw tunnel
            // that echoes every byte (400 without the upgrade headers).
            "/echo" if req.method == Method::Get => {
                return Handled::Upgrade(Switch {
                    protocol: "echo",
                    headers: Vec::new(),
                    session: Box::new(Echo),
                });
            }
            "/echo" => not_allowed(&mut self.access_log, res, b"GET"),
            // WebSocket echo (RFC 6455): the handshake checked here, the frames by the session
            // the connection is handed to.
            // permessage-deflate (RFC 7692) is agreed when the client offers it and the
            // configuration allows it.
            "/ws/echo" => match handshake::accept(req, &self.ws_offer()) {
                Ok(accepted) => {
                    let session =
                        WsSession::new(EchoHandler, self.config.ws).with_deflate(accepted.deflate);
                    return Handled::Upgrade(Switch {
                        protocol: "websocket",
                        headers: accepted.headers,
                        session: Box::new(session),
                    });
                }
                Err(r) if r.status == 426 => send_with(
                    &mut self.access_log,
                    res,
                    426,
                    TEXT,
                    &[("Sec-WebSocket-Version", b"13")],
                    r.why.as_bytes(),
                ),
                Err(r) => send(&mut self.access_log, res, r.status, TEXT, r.why.as_bytes()),
            },
            // The server as a whole (RFC 9110 §9.3.7): what it serves, and nothing else.
            "*" if req.method == Method::Options => send_with(
                &mut self.access_log,
                res,
                200,
                TEXT,
                &[("Allow", b"GET, HEAD, POST, OPTIONS")],
                b"",
            ),
            "*" => send(
                &mut self.access_log,
                res,
                400,
                TEXT,
                b"the request-target * is for OPTIONS only\n",
            ),
            path if path == "/files" || path.starts_with("/files/") => {
                // `/files//etc/passwd` keeps its second slash: an absolute path, refused.
                let rel = &path["/files".len()..];
                let rel = rel.strip_prefix('/').unwrap_or(rel);
                return self.file(req, res, Some(rel), false);
            }
            _ => send(&mut self.access_log, res, 404, TEXT, b"Not Found\n"),
        }
        Handled::Done
    }

    fn on_response(&mut self, status: u16) {
        self.stats.shard(self.thread).response(status);
        if let Some(log) = &mut self.access_log {
            log.respond(status);
        }
    }
}

impl DemoHandler {
    /// A file below the `/files` root, or the site's (`site`): `rel` is the request path below
    /// it (`None`: not a path at all).
    fn file(
        &mut self,
        req: &Request<'_>,
        res: &mut Response<'_>,
        rel: Option<&str>,
        site: bool,
    ) -> Handled<DemoJob> {
        if !matches!(req.method, Method::Get | Method::Head) {
            not_allowed(&mut self.access_log, res, b"GET, HEAD");
            return Handled::Done;
        }
        match rel.map(|rel| FileRequest::parse(req, rel)) {
            Some(Ok(file)) => {
                let file = file.compress(self.config.compress);
                return Handled::File(if site { file.in_site() } else { file });
            }
            Some(Err(why)) => log::debug!("{}: refused ({})", req.target, why.0),
            None => {}
        }
        send(&mut self.access_log, res, 404, TEXT, b"Not Found\n");
        Handled::Done
    }
}

/// [`Response::send`], the body's size noted for the access log.
fn send(log: &mut Option<Pending>, res: &mut Response<'_>, status: u16, kind: &str, body: &[u8]) {
    send_with(log, res, status, kind, &[], body);
}

/// 405, naming the methods the path takes (`Allow`, RFC 9110 §15.5.6).
fn not_allowed(log: &mut Option<Pending>, res: &mut Response<'_>, allow: &[u8]) {
    send_with(
        log,
        res,
        405,
        TEXT,
        &[("Allow", allow)],
        b"Method Not Allowed\n",
    );
}

/// [`Response::send_with`], the body's size noted for the access log.
fn send_with(
    log: &mut Option<Pending>,
    res: &mut Response<'_>,
    status: u16,
    kind: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) {
    if let Some(log) = log {
        log.body(body.len());
    }
    res.send_with(status, kind, headers, body);
}
