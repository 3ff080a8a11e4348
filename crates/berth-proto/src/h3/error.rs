//! HTTP/3 and QPACK error codes (RFC 9114 §8.1, RFC 9204 §6), and the errors of this module,
//! sorted by fault: [`H3Error`] when the peer broke the protocol (with the code to close the
//! connection, or reset the stream, with), [`Error::Misuse`] when the caller used the API
//! wrongly (a bug on this side, never to be blamed on the peer).

use std::fmt;

/// An HTTP/3 application error code, as carried by QUIC's CONNECTION_CLOSE, RESET_STREAM and
/// STOP_SENDING (RFC 9114 §8.1). A plain number: codes this module does not name are valid
/// too, and §9 says an unknown one means [`ErrorCode::H3_NO_ERROR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u64);

#[allow(missing_docs)]
impl ErrorCode {
    pub const H3_NO_ERROR: ErrorCode = ErrorCode(0x100);
    pub const H3_GENERAL_PROTOCOL_ERROR: ErrorCode = ErrorCode(0x101);
    pub const H3_INTERNAL_ERROR: ErrorCode = ErrorCode(0x102);
    pub const H3_STREAM_CREATION_ERROR: ErrorCode = ErrorCode(0x103);
    pub const H3_CLOSED_CRITICAL_STREAM: ErrorCode = ErrorCode(0x104);
    pub const H3_FRAME_UNEXPECTED: ErrorCode = ErrorCode(0x105);
    pub const H3_FRAME_ERROR: ErrorCode = ErrorCode(0x106);
    pub const H3_EXCESSIVE_LOAD: ErrorCode = ErrorCode(0x107);
    pub const H3_ID_ERROR: ErrorCode = ErrorCode(0x108);
    pub const H3_SETTINGS_ERROR: ErrorCode = ErrorCode(0x109);
    pub const H3_MISSING_SETTINGS: ErrorCode = ErrorCode(0x10a);
    pub const H3_REQUEST_REJECTED: ErrorCode = ErrorCode(0x10b);
    pub const H3_REQUEST_CANCELLED: ErrorCode = ErrorCode(0x10c);
    pub const H3_REQUEST_INCOMPLETE: ErrorCode = ErrorCode(0x10d);
    pub const H3_MESSAGE_ERROR: ErrorCode = ErrorCode(0x10e);
    pub const H3_CONNECT_ERROR: ErrorCode = ErrorCode(0x10f);
    pub const H3_VERSION_FALLBACK: ErrorCode = ErrorCode(0x110);
    pub const QPACK_DECOMPRESSION_FAILED: ErrorCode = ErrorCode(0x200);
    pub const QPACK_ENCODER_STREAM_ERROR: ErrorCode = ErrorCode(0x201);
    pub const QPACK_DECODER_STREAM_ERROR: ErrorCode = ErrorCode(0x202);
}

impl ErrorCode {
    /// The name the RFCs give it, or `None` for a code they do not define (a reserved
    /// `0x1f * N + 0x21` code among them).
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x100 => "H3_NO_ERROR",
            0x101 => "H3_GENERAL_PROTOCOL_ERROR",
            0x102 => "H3_INTERNAL_ERROR",
            0x103 => "H3_STREAM_CREATION_ERROR",
            0x104 => "H3_CLOSED_CRITICAL_STREAM",
            0x105 => "H3_FRAME_UNEXPECTED",
            0x106 => "H3_FRAME_ERROR",
            0x107 => "H3_EXCESSIVE_LOAD",
            0x108 => "H3_ID_ERROR",
            0x109 => "H3_SETTINGS_ERROR",
            0x10a => "H3_MISSING_SETTINGS",
            0x10b => "H3_REQUEST_REJECTED",
            0x10c => "H3_REQUEST_CANCELLED",
            0x10d => "H3_REQUEST_INCOMPLETE",
            0x10e => "H3_MESSAGE_ERROR",
            0x10f => "H3_CONNECT_ERROR",
            0x110 => "H3_VERSION_FALLBACK",
            0x200 => "QPACK_DECOMPRESSION_FAILED",
            0x201 => "QPACK_ENCODER_STREAM_ERROR",
            0x202 => "QPACK_DECODER_STREAM_ERROR",
            _ => return None,
        })
    }

    /// Whether this is one of the codes reserved to exercise "unknown codes mean
    /// H3_NO_ERROR" (RFC 9114 §8.1: `0x1f * N + 0x21`).
    pub fn is_reserved(self) -> bool {
        is_grease(self.0)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{:#x}", self.0),
        }
    }
}

/// Whether `value` has the form `0x1f * N + 0x21`, the form RFC 9114 reserves in every
/// registry (frame types §7.2.8, settings §7.2.4.1, stream types §6.2.3, error codes §8.1) so
/// that peers keep ignoring what they do not know.
pub fn is_grease(value: u64) -> bool {
    value >= 0x21 && (value - 0x21) % 0x1f == 0
}

/// The `n`-th reserved value (`0x1f * n + 0x21`), for sending grease; `None` past 2^62 - 1.
pub fn grease(n: u64) -> Option<u64> {
    n.checked_mul(0x1f)
        .and_then(|v| v.checked_add(0x21))
        .filter(|&v| v <= super::varint::MAX)
}

/// The peer broke RFC 9114 or RFC 9204: what to answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H3Error {
    /// The code to send.
    pub code: ErrorCode,
    /// `true`: a stream error, reset (and stop reading) only the stream it happened on
    /// (RFC 9114 §8); `false`: a connection error, close the connection with `code`.
    pub stream: bool,
    /// What was wrong, for the CONNECTION_CLOSE reason phrase, logs and tests.
    pub reason: &'static str,
}

impl H3Error {
    /// A connection error.
    pub fn conn(code: ErrorCode, reason: &'static str) -> Self {
        H3Error {
            code,
            stream: false,
            reason,
        }
    }

    /// A stream error.
    pub fn stream(code: ErrorCode, reason: &'static str) -> Self {
        H3Error {
            code,
            stream: true,
            reason,
        }
    }
}

impl fmt::Display for H3Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scope = if self.stream { "stream" } else { "connection" };
        write!(f, "{scope} error {}: {}", self.code, self.reason)
    }
}

impl std::error::Error for H3Error {}

/// What a stateful part of this module (the QPACK encoder and decoder, the settings writer)
/// refuses, by fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The peer broke the protocol.
    Peer(H3Error),
    /// The caller broke the API's contract (the message says which rule); the peer is not
    /// at fault and must not be told it is.
    Misuse(&'static str),
}

impl From<H3Error> for Error {
    fn from(e: H3Error) -> Self {
        Error::Peer(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Peer(e) => e.fmt(f),
            Error::Misuse(what) => write!(f, "API misuse: {what}"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grease_values_are_the_rfcs() {
        assert!(is_grease(0x21));
        assert!(is_grease(0x40));
        assert!(is_grease(0x3fff_ffff_ffff_fffe));
        assert!(!is_grease(0x20));
        assert!(!is_grease(0x22));
        assert!(!is_grease(0));
        assert_eq!(grease(0), Some(0x21));
        assert_eq!(grease(1), Some(0x40));
        // The last one is 0x3ffffffffffffffe (RFC 9114 §11.2.1); the next is past 2^62 - 1.
        let last = (0x3fff_ffff_ffff_fffe - 0x21) / 0x1f;
        assert_eq!(grease(last), Some(0x3fff_ffff_ffff_fffe));
        assert_eq!(grease(last + 1), None);
        assert!(ErrorCode(0x21).is_reserved());
        assert!(!ErrorCode::H3_NO_ERROR.is_reserved());
    }

    #[test]
    fn codes_have_their_names() {
        assert_eq!(
            ErrorCode::H3_SETTINGS_ERROR.to_string(),
            "H3_SETTINGS_ERROR"
        );
        assert_eq!(
            ErrorCode::QPACK_DECOMPRESSION_FAILED.to_string(),
            "QPACK_DECOMPRESSION_FAILED"
        );
        assert_eq!(ErrorCode(0x21).to_string(), "0x21");
        let e = H3Error::conn(ErrorCode::H3_FRAME_ERROR, "short");
        assert_eq!(e.to_string(), "connection error H3_FRAME_ERROR: short");
    }
}
