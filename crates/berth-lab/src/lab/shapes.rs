//! The load shapes every server in the lab is measured under: the seeds' benchmarks (hello
//! world over keep-alive and per-request connections, seed 004's `POST /reverse` at 1,000
//! connections, seed 001's `/test/slow`), plus pipelining, which takes the load generator's
//! per-request cost out of the way so the server becomes the bottleneck, and hello world over
//! TLS, kept alive and with a full handshake per request.

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
}

impl Shape {
    /// Whether the shape speaks HTTPS (the server starts with the lab's certificate).
    pub fn tls(&self) -> bool {
        self.route == Route::HelloTls
    }
}

/// The body seed 004's `post.lua` would send: a small JSON object of strings.
const REVERSE_BODY: &[u8] = br#"{"greeting": "Hello, World!", "name": "berth"}"#;

/// Every shape, in table order.
pub const SHAPES: [Shape; 8] = [
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
    },
];
