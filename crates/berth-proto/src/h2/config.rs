//! The settings and limits of an HTTP/2 connection, each with its default and where the
//! default comes from, and the counters a driver can report (`/stats`).
//!
//! Limits of the request itself (body size, request-target length) are the HTTP/1.1 ones, in
//! [`Limits`](crate::http::Limits), so that one setting means the same on either protocol.

use std::time::Duration;

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

/// The abuse a connection was ended for (GOAWAY ENHANCE_YOUR_CALM), for `/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abuse {
    /// Too many streams opened and reset by the client (CVE-2023-44487).
    RapidReset,
    /// Too many streams the client's frames made berth reset (CVE-2025-8671).
    MadeYouReset,
    /// A header block with too many CONTINUATION frames or bytes.
    ContinuationFlood,
    /// A header list many times past the limit (HPACK bomb).
    HpackBomb,
    /// Too many SETTINGS frames.
    SettingsFlood,
    /// Too many PING frames.
    PingFlood,
    /// Too many frames in a row that carry nothing.
    EmptyFrameFlood,
    /// Too many WINDOW_UPDATE frames for the data sent.
    WindowUpdateFlood,
    /// Too many PRIORITY frames.
    PriorityFlood,
}

impl Abuse {
    /// Every kind, in a fixed order (a driver's counters index by it).
    pub const ALL: [Abuse; 9] = [
        Abuse::RapidReset,
        Abuse::MadeYouReset,
        Abuse::ContinuationFlood,
        Abuse::HpackBomb,
        Abuse::SettingsFlood,
        Abuse::PingFlood,
        Abuse::EmptyFrameFlood,
        Abuse::WindowUpdateFlood,
        Abuse::PriorityFlood,
    ];

    /// A short name for metrics (`rapid_reset`).
    pub fn name(self) -> &'static str {
        match self {
            Abuse::RapidReset => "rapid_reset",
            Abuse::MadeYouReset => "made_you_reset",
            Abuse::ContinuationFlood => "continuation_flood",
            Abuse::HpackBomb => "hpack_bomb",
            Abuse::SettingsFlood => "settings_flood",
            Abuse::PingFlood => "ping_flood",
            Abuse::EmptyFrameFlood => "empty_frame_flood",
            Abuse::WindowUpdateFlood => "window_update_flood",
            Abuse::PriorityFlood => "priority_flood",
        }
    }

    /// Its place in [`Abuse::ALL`].
    pub fn index(self) -> usize {
        Abuse::ALL.iter().position(|&a| a == self).unwrap_or(0)
    }
}

/// Running counts of one connection, for `/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Streams the client opened (requests).
    pub streams: u64,
    /// Streams refused because too many were open (REFUSED_STREAM).
    pub refused: u64,
    /// Streams the client reset before their answer was complete.
    pub client_resets: u64,
    /// Streams berth reset because of the client's frames.
    pub provoked_resets: u64,
    /// Requests answered 431 for their header list.
    pub oversized_heads: u64,
    /// Connections wound down because they reached
    /// [`H2Config::max_streams_per_connection`] (0 or 1 here).
    pub exhausted: u64,
    /// What the connection was ended for, if it was ended for abuse.
    pub abuse: Option<Abuse>,
}
