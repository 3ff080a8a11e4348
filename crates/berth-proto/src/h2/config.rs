//! The settings and limits of an HTTP/2 connection, each with its default and where the
//! default comes from, and the counters a driver can report (`/stats`).
//!
//! Limits of the request itself (body size, request-target length) are the HTTP/1.1 ones, in
//! [`Limits`](crate::http::Limits), so that one setting means the same on either protocol.

pub use crate::settings::H2Config;

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
