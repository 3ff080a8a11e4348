//! Per-request size limits, and what an HTTP/2 connection may do. Every limit has a default a
//! public server can live with, and each maps to the status code a client is told when it is
//! exceeded.

use crate::h2::H2Config;

/// Size limits applied by a [`Session`](super::Session) to each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line + header fields + blank line) in bytes; beyond it: 431.
    pub max_header_bytes: usize,
    /// Largest number of header fields; beyond it: 431.
    pub max_headers: usize,
    /// Longest request-target in bytes; beyond it: 414.
    pub max_uri_bytes: usize,
    /// Largest request body in bytes, after chunked decoding; beyond it: 413.
    pub max_body_bytes: usize,
    /// Output a session may queue before it stops parsing pipelined requests and asks the driver
    /// to flush ([`Step::Flush`](super::Step::Flush)); bounds memory per slow reader.
    pub output_high_water: usize,
    /// A connection that starts with HTTP/2's preface is served as HTTP/2 under these
    /// settings and limits; `None`: HTTP/1.1 only (the preface is then a bad request).
    pub http2: Option<H2Config>,
    /// Write `Server: berth` into every response head (HTTP/2: `server: berth`). Off, no
    /// `Server` field is written (`berth serve --server-header off`, uvicorn's
    /// `--no-server-header`).
    pub server_header: bool,
    /// Write `Date` into every HTTP/1.1 response head (RFC 9110 §6.6.1: an origin server with
    /// a clock does). Off, none is written (a proxy in front adds its own).
    pub date_header: bool,
}

impl Limits {
    /// Hard ceiling on [`Limits::max_headers`]: headers are parsed into a stack array this big.
    pub const HEADERS_CEILING: usize = 256;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_uri_bytes: 8 * 1024,
            max_body_bytes: 1024 * 1024,
            output_high_water: 64 * 1024,
            http2: Some(H2Config::default()),
            server_header: true,
            date_header: true,
        }
    }
}
