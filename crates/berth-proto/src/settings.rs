//! One settings spine for the protocols (issue 41): every limit and timeout a connection is
//! held to, each defined once with its default and where the default comes from, whatever
//! version the connection speaks. The engine's own settings (`berth::drive::Common`), the
//! command lines (`berth serve`, `python -m berth`) and the tests fill these in; nothing else
//! defines them again.
//!
//! - [`Limits`]: what one request may be, and what one connection may hold (jobs, files);
//! - [`Timeouts`]: how long each stage of a connection may take;
//! - [`H2Config`]: what an HTTP/2 connection advertises and tolerates (its abuse limits).

use std::time::Duration;

/// Size limits applied by a [`Session`](crate::http::Session) to each request.
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
    /// to flush ([`Action::Flush`](crate::http::Action::Flush)); bounds memory per slow reader.
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
    /// Jobs one connection may have out at once (queued for the workers or running): an
    /// HTTP/2 stream whose request would be one more waits in its connection, not in the
    /// workers' shared queue, so that one connection's many streams cannot hold every worker
    /// and the queue ahead of other clients (issue 40). HTTP/1.1 has one out at most whatever
    /// this says. Deferred jobs (answered elsewhere, holding no worker: an ASGI app's) do not
    /// count. Default 2, the default worker count of a two-core machine; `berth serve` makes
    /// it the worker count unless told otherwise. At least 1.
    pub jobs_per_connection: usize,
    /// Files one connection may hold open for its answers at once: an HTTP/2 stream answered
    /// with a file beyond them (or whose window is shut) has its file opened when an earlier
    /// one is done (or the window opens), so a client that opens streams and never reads holds
    /// this many descriptors and encoders, not one per stream. HTTP/1.1 holds one at most.
    /// Default 8. At least 1.
    pub files_per_connection: usize,
}

impl Limits {
    /// The most a connection's input buffer may grow to: a maximal head and body, and one
    /// read buffer (`buffer`) of slack. A lifted body limit (`usize::MAX`) makes it unbounded,
    /// never an overflow.
    pub fn max_input(&self, buffer: usize) -> usize {
        self.max_header_bytes
            .saturating_add(self.max_body_bytes)
            .saturating_add(buffer)
    }

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
            jobs_per_connection: 2,
            files_per_connection: 8,
        }
    }
}

/// How long a connection may take at each stage before it is given up on. The values are the
/// driver's settings; the rules that apply them are the session's ([`Session::poll_timeout`](crate::http::Session::poll_timeout)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From the first byte of a request until its head is complete (slowloris defence: it is
    /// not extended by each byte). Expiry: 408, then close.
    pub header: Duration,
    /// Longest silence while a request body arrives. Expiry: 408, then close.
    pub body: Duration,
    /// Longest silence between requests on a keep-alive connection. Expiry: close.
    pub idle: Duration,
    /// Longest time a pending response may make no progress (the peer stopped reading).
    /// Expiry: close.
    pub write: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header: Duration::from_secs(10),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            write: Duration::from_secs(30),
        }
    }
}

/// What an HTTP/2 connection advertises and tolerates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Config {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams a client may have open at once; one more is
    /// refused (REFUSED_STREAM). Streams the client reset while their job still runs count
    /// until the job is done, so resets cannot put more jobs in flight than this. Default 128,
    /// nginx's `http2_max_concurrent_streams` (hyper's server says 200, h2o 100).
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: how much request body a client may send on a stream
    /// before berth opens the window again (as the application takes the body). Default
    /// 65,535, the RFC's initial value, so that nothing changes before the SETTINGS ack.
    pub initial_window: u32,
    /// The connection's receive window, raised from 65,535 by a WINDOW_UPDATE at the start.
    /// Default 1 MiB: hyper's `DEFAULT_CONN_WINDOW`. Memory per connection is bounded by the
    /// stream windows anyway; this only lets several uploads run at once.
    pub connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE berth accepts. Default 16,384, the RFC's initial value
    /// (nginx, hyper and h2o keep it).
    pub max_frame_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table a client may use. Default 4096, the
    /// RFC's.
    pub header_table_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: largest request header list, each field counted as
    /// name + value + 32 bytes (RFC 7541 §4.1); past it the request is answered 431. Default
    /// 16 KiB: hyper's server default, and berth's HTTP/1.1 head limit.
    pub max_header_list_size: u32,
    /// Most fields in one header list (431 past it). Default 128; HTTP/1.1's
    /// [`Limits::max_headers`](crate::http::Limits::max_headers) is 64, and HTTP/2 adds up
    /// to four pseudo-fields and splits cookies.
    pub max_header_fields: usize,
    /// A header list more than this many times [`H2Config::max_header_list_size`] is not a
    /// big cookie but an HPACK bomb: GOAWAY ENHANCE_YOUR_CALM. Default 4 (berth's choice; a
    /// list just past the limit is a mistake and gets 431).
    pub hpack_bomb_factor: u32,
    /// Most CONTINUATION frames in one header block (the 2024 CONTINUATION flood: endless
    /// frames, each cheap, none ending the block). Past it: GOAWAY ENHANCE_YOUR_CALM. The
    /// block's bytes are bounded too, by 2 x `max_header_list_size` compressed. Default 32:
    /// with 16 KiB frames that is far past any honest block (nginx bounds the block by its
    /// header buffers, the `h2` crate by the list size).
    pub max_continuations: u32,
    /// The window over which the rates below are counted. Default 10 s.
    pub rate_window: Duration,
    /// Rapid Reset (CVE-2023-44487): streams the client resets before their answer is
    /// complete, per [`H2Config::rate_window`]. Past it: GOAWAY ENHANCE_YOUR_CALM. Default
    /// 200 (berth's choice, a browser cancelling a page's images stays far below; hyper's `h2`
    /// instead caps streams reset while still pending at 20, nginx caps new streams per read).
    pub max_client_resets: u32,
    /// MadeYouReset (CVE-2025-8671): streams berth itself resets because the client sent a
    /// frame that breaks the stream (bad headers, a window overflow, DATA past its length), per
    /// connection. Past it: GOAWAY ENHANCE_YOUR_CALM. Default 1024: hyper's `h2`
    /// `max_local_error_reset_streams` default, the fix for that CVE.
    pub max_provoked_resets: u32,
    /// SETTINGS frames per [`H2Config::rate_window`] (each must be acknowledged: a flood makes
    /// the server write). Default 100 (berth's choice; CVE-2019-9515).
    pub max_settings: u32,
    /// PING frames per [`H2Config::rate_window`] (each is answered; CVE-2019-9512). Default
    /// 100 (berth's choice).
    pub max_pings: u32,
    /// Frames in a row that carry nothing: DATA without data or END_STREAM, HEADERS or
    /// CONTINUATION with an empty fragment that does not end the block (CVE-2019-9518).
    /// Default 10 (Envoy's `max_consecutive_inbound_frames_with_empty_payload` is 1).
    pub max_empty_frames: u32,
    /// WINDOW_UPDATE frames allowed: this many, plus 10 for each DATA frame berth sent
    /// (Envoy's `max_inbound_window_update_frames_per_data_frame_sent` is 10). Default 100.
    pub window_update_allowance: u32,
    /// PRIORITY frames allowed: this many, plus this many for each stream opened (Envoy's
    /// `max_inbound_priority_frames_per_stream` is 100; CVE-2019-9513). Default 100.
    pub priority_allowance: u32,
    /// Streams (requests) one connection may open; after this many the connection is wound
    /// down with GOAWAY NO_ERROR, as nginx's `keepalive_requests` (default 1000) does, which
    /// also keeps a client from exhausting stream ids on one connection. Default 10,000
    /// (berth's choice; HTTP/2 clients expect long connections).
    pub max_streams_per_connection: u32,
    /// Every connection speaks HTTP/2 (a port for clients with prior knowledge only, such as
    /// a gRPC backend's): first bytes that are not the preface are a connection error, not an
    /// HTTP/1.1 request. Default false: a plain connection is HTTP/2's only if it starts with
    /// the preface, and HTTP/1.1's otherwise (ALPN decides over TLS).
    pub exclusive: bool,
}

impl Default for H2Config {
    fn default() -> Self {
        H2Config {
            max_concurrent_streams: 128,
            initial_window: 65_535,
            connection_window: 1 << 20,
            max_frame_size: 16_384,
            header_table_size: 4096,
            max_header_list_size: 16 * 1024,
            max_header_fields: 128,
            hpack_bomb_factor: 4,
            max_continuations: 32,
            rate_window: Duration::from_secs(10),
            max_client_resets: 200,
            max_provoked_resets: 1024,
            max_settings: 100,
            max_pings: 100,
            max_empty_frames: 10,
            window_update_allowance: 100,
            priority_allowance: 100,
            max_streams_per_connection: 10_000,
            exclusive: false,
        }
    }
}
