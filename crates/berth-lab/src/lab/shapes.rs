//! The load shapes every server in the lab is measured under: the seeds' benchmarks (hello
//! world over keep-alive and per-request connections, seed 004's `POST /reverse` at 1,000
//! connections, seed 001's `/test/slow`), plus pipelining, which takes the load generator's
//! per-request cost out of the way so the server becomes the bottleneck, hello world over
//! TLS, kept alive and with a full handshake per request, and hello world over HTTP/2 (issue
//! 32's 100 connections of 10 streams each), h2c with prior knowledge and over TLS (ALPN h2).

/// A route a server may or may not serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /hello/world`.
    Hello,
    /// `POST /reverse`.
    Reverse,
    /// `GET /test/slow`.
    Slow,
    /// `GET /hello/world` over TLS, with the lab's certificate.
    HelloTls,
    /// `GET /hello/world` over HTTP/2 with prior knowledge (h2c) on a plain port.
    HelloH2,
    /// `GET /hello/world` over HTTP/2 on TLS (ALPN h2), with the lab's certificate.
    HelloH2Tls,
}

/// One load shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Short name, used by `--only` and in `lab.json`.
    pub name: &'static str,
    /// What the table's heading says.
    pub title: &'static str,
    /// The route it needs.
    pub route: Route,
    /// Request method.
    pub method: &'static str,
    /// Request path.
    pub path: &'static str,
    /// Request body.
    pub body: &'static [u8],
    /// Concurrent connections.
    pub connections: usize,
    /// Requests per batch on a connection.
    pub pipeline: usize,
    /// Keep connections open (false: one per request).
    pub keep_alive: bool,
    /// HTTP/2 with this many streams in flight per connection; `None`: HTTP/1.1.
    pub http2_streams: Option<usize>,
}

impl Shape {
    /// Whether the shape speaks HTTPS (the server starts with the lab's certificate).
    pub fn tls(&self) -> bool {
        matches!(self.route, Route::HelloTls | Route::HelloH2Tls)
    }

    /// Whether the shape speaks HTTP/2 (the server starts ready for it).
    pub fn http2(&self) -> bool {
        self.http2_streams.is_some()
    }
}

/// The body seed 004's `post.lua` would send: a small JSON object of strings.
const REVERSE_BODY: &[u8] = br#"{"greeting": "Hello, World!", "name": "berth"}"#;

/// Every shape, in table order.
pub const SHAPES: [Shape; 10] = [
    Shape {
        name: "hello",
        title: "GET /hello/world, keep-alive, 100 connections",
        route: Route::Hello,
        method: "GET",
        path: "/hello/world",
        body: b"",
        connections: 100,
        pipeline: 1,
        keep_alive: true,
        http2_streams: None,
    },
    Shape {
        name: "hello-pipelined",
        title: "GET /hello/world, keep-alive pipelined 16 deep, 100 connections",
        route: Route::Hello,
        method: "GET",
        path: "/hello/world",
        body: b"",
        connections: 100,
        pipeline: 16,
        keep_alive: true,
        http2_streams: None,
    },
    Shape {
        name: "hello-close",
        title: "GET /hello/world, a connection per request, 50 connections",
        route: Route::Hello,
        method: "GET",
        path: "/hello/world",
        body: b"",
        connections: 50,
        pipeline: 1,
        keep_alive: false,
        http2_streams: None,
    },
    Shape {
        name: "reverse",
        title: "POST /reverse, keep-alive, 100 connections",
        route: Route::Reverse,
        method: "POST",
        path: "/reverse",
        body: REVERSE_BODY,
        connections: 100,
        pipeline: 1,
        keep_alive: true,
        http2_streams: None,
    },
    Shape {
        name: "reverse-1000",
        title: "POST /reverse, keep-alive, 1,000 connections (seed 004)",
        route: Route::Reverse,
        method: "POST",
        path: "/reverse",
        body: REVERSE_BODY,
        connections: 1000,
        pipeline: 1,
        keep_alive: true,
        http2_streams: None,
    },
    Shape {
        name: "slow",
        title: "GET /test/slow (30 ms job), keep-alive, 100 connections (seed 001)",
        route: Route::Slow,
        method: "GET",
        path: "/test/slow",
        body: b"",
        connections: 100,
        pipeline: 1,
        keep_alive: true,
        http2_streams: None,
    },
    Shape {
        name: "hello-tls",
        title: "GET /hello/world over TLS, keep-alive, 100 connections",
        route: Route::HelloTls,
        method: "GET",
        path: "/hello/world",
        body: b"",
        connections: 100,
        pipeline: 1,
        keep_alive: true,
        http2_streams: None,
    },
    Shape {
        name: "hello-tls-close",
        title: "GET /hello/world over TLS, a connection (a full handshake) per request, 50 \
                connections",
        route: Route::HelloTls,
        method: "GET",
        path: "/hello/world",
        body: b"",
        connections: 50,
        pipeline: 1,
        keep_alive: false,
        http2_streams: None,
    },
    Shape {
        name: "hello-h2",
        title: "GET /hello/world over HTTP/2 (h2c), 100 connections x 10 streams",
        route: Route::HelloH2,
        method: "GET",
        path: "/hello/world",
        body: b"",
        connections: 100,
        pipeline: 1,
        keep_alive: true,
        http2_streams: Some(10),
    },
    Shape {
        name: "hello-h2-tls",
        title: "GET /hello/world over HTTP/2 on TLS (ALPN h2), 100 connections x 10 streams",
        route: Route::HelloH2Tls,
        method: "GET",
        path: "/hello/world",
        body: b"",
        connections: 100,
        pipeline: 1,
        keep_alive: true,
        http2_streams: Some(10),
    },
];
