//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header, each frame type's payload checked as
//! the RFC requires, and the writers for what a server sends.
//!
//! Parsing is split in two so that a connection can bound what it buffers: [`Header::parse`]
//! reads the header alone (the connection refuses a length past its SETTINGS_MAX_FRAME_SIZE
//! before waiting for the payload), then [`Frame::parse`] checks the payload of a known type
//! and says which error the RFC names when it is wrong: a connection error, or a stream error
//! for the frames whose fault stays within one stream.

/// The client connection preface (RFC 9113 §3.4), before its first SETTINGS frame.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Length of a frame header.
pub const HEADER_LEN: usize = 9;

/// SETTINGS_MAX_FRAME_SIZE's initial value, and the smallest allowed (RFC 9113 §6.5.2).
pub const DEFAULT_MAX_FRAME: u32 = 16_384;

/// The largest SETTINGS_MAX_FRAME_SIZE allowed (2^24 - 1).
pub const MAX_MAX_FRAME: u32 = (1 << 24) - 1;

/// The largest flow-control window (2^31 - 1, RFC 9113 §6.9.1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// The initial flow-control window of every stream and of the connection (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;

/// Frame types (RFC 9113 §6).
#[allow(missing_docs)]
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (RFC 9113 §6).
#[allow(missing_docs)]
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS parameters (RFC 9113 §6.5.2).
#[allow(missing_docs)]
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Error codes (RFC 9113 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub u32);

#[allow(missing_docs)]
impl ErrorCode {
    pub const NO_ERROR: ErrorCode = ErrorCode(0x0);
    pub const PROTOCOL_ERROR: ErrorCode = ErrorCode(0x1);
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(0x2);
    pub const FLOW_CONTROL_ERROR: ErrorCode = ErrorCode(0x3);
    pub const SETTINGS_TIMEOUT: ErrorCode = ErrorCode(0x4);
    pub const STREAM_CLOSED: ErrorCode = ErrorCode(0x5);
    pub const FRAME_SIZE_ERROR: ErrorCode = ErrorCode(0x6);
    pub const REFUSED_STREAM: ErrorCode = ErrorCode(0x7);
    pub const CANCEL: ErrorCode = ErrorCode(0x8);
    pub const COMPRESSION_ERROR: ErrorCode = ErrorCode(0x9);
    pub const CONNECT_ERROR: ErrorCode = ErrorCode(0xa);
    pub const ENHANCE_YOUR_CALM: ErrorCode = ErrorCode(0xb);
    pub const INADEQUATE_SECURITY: ErrorCode = ErrorCode(0xc);
    pub const HTTP_1_1_REQUIRED: ErrorCode = ErrorCode(0xd);
}

/// A frame that breaks RFC 9113: the error to answer with, and whether it ends the
/// connection or only the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameError {
    /// The error code.
    pub code: ErrorCode,
    /// `Some(id)`: a stream error (RST_STREAM on that stream, RFC 9113 §5.4.2); `None`: a
    /// connection error (GOAWAY, then close, §5.4.1).
    pub stream: Option<u32>,
    /// What was wrong, for GOAWAY's debug data and for tests.
    pub reason: &'static str,
}

impl FrameError {
    /// A connection error.
    pub fn conn(code: ErrorCode, reason: &'static str) -> Self {
        FrameError {
            code,
            stream: None,
            reason,
        }
    }

    /// A stream error on `stream`.
    pub fn stream(stream: u32, code: ErrorCode, reason: &'static str) -> Self {
        FrameError {
            code,
            stream: Some(stream),
            reason,
        }
    }
}

/// A frame header (RFC 9113 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Payload length.
    pub len: u32,
    /// Frame type ([`kind`]).
    pub kind: u8,
    /// Flags ([`flag`]).
    pub flags: u8,
    /// Stream identifier (the reserved bit dropped, as §4.1 says receivers must).
    pub stream: u32,
}

impl Header {
    /// Reads a header from the first [`HEADER_LEN`] bytes of `b`, if there are that many.
    pub fn parse(b: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        })
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A priority signal (RFC 9113 §5.3.2: parsed and checked, then ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// The stream it depends on.
    pub dependency: u32,
    /// Exclusive flag.
    pub exclusive: bool,
    /// Weight minus one.
    pub weight: u8,
}

/// A frame's payload, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA: `data` without padding; `flow` is the whole payload's length, which is what flow
    /// control counts (padding included, §6.1).
    Data {
        /// Stream.
        stream: u32,
        /// END_STREAM.
        end_stream: bool,
        /// The data.
        data: &'a [u8],
        /// Flow-controlled length.
        flow: u32,
    },
    /// HEADERS: the start of a header block.
    Headers {
        /// Stream.
        stream: u32,
        /// END_STREAM.
        end_stream: bool,
        /// END_HEADERS: no CONTINUATION follows.
        end_headers: bool,
        /// The header block fragment, without padding or priority.
        block: &'a [u8],
        /// The priority it carries makes the stream depend on itself: a stream error
        /// (§5.3.1), which the connection answers once the block is decoded (the HPACK state
        /// must stay in step).
        self_dependent: bool,
    },
    /// PRIORITY (deprecated; checked and ignored).
    Priority {
        /// Stream.
        stream: u32,
    },
    /// RST_STREAM.
    RstStream {
        /// Stream.
        stream: u32,
        /// Why.
        code: ErrorCode,
    },
    /// SETTINGS: `params` is a whole number of 6-byte entries (see [`settings`]).
    Settings {
        /// ACK flag.
        ack: bool,
        /// The entries.
        params: &'a [u8],
    },
    /// PUSH_PROMISE: a client may never send one (RFC 9113 §8.4); parsed so it can be told.
    PushPromise,
    /// PING.
    Ping {
        /// ACK flag.
        ack: bool,
        /// Opaque data, echoed.
        data: [u8; 8],
    },
    /// GOAWAY.
    GoAway {
        /// Last stream the peer processed.
        last_stream: u32,
        /// Why.
        code: ErrorCode,
    },
    /// WINDOW_UPDATE.
    WindowUpdate {
        /// Stream (0: the connection).
        stream: u32,
        /// Increment (checked non-zero by the connection, whose error it is, §6.9).
        increment: u32,
    },
    /// CONTINUATION.
    Continuation {
        /// Stream.
        stream: u32,
        /// END_HEADERS.
        end_headers: bool,
        /// The header block fragment.
        block: &'a [u8],
    },
    /// A type this endpoint does not know: ignored (RFC 9113 §4.1, §5.5).
    Unknown,
}

/// Strips the padding of a PADDED frame (§6.1, §6.2).
fn unpad<'a>(h: &Header, payload: &'a [u8]) -> Result<&'a [u8], FrameError> {
    if !h.has(flag::PADDED) {
        return Ok(payload);
    }
    let Some((&pad, rest)) = payload.split_first() else {
        return Err(FrameError::conn(
            ErrorCode::FRAME_SIZE_ERROR,
            "padded frame without a pad length",
        ));
    };
    if usize::from(pad) > rest.len() {
        return Err(FrameError::conn(
            ErrorCode::PROTOCOL_ERROR,
            "padding longer than the payload",
        ));
    }
    Ok(&rest[..rest.len() - usize::from(pad)])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn priority(stream: u32, b: &[u8]) -> Result<Priority, FrameError> {
    let raw = be32(b);
    let p = Priority {
        dependency: raw & 0x7fff_ffff,
        exclusive: raw & 0x8000_0000 != 0,
        weight: b[4],
    };
    if p.dependency == stream {
        // RFC 9113 §5.3.1: a stream cannot depend on itself.
        return Err(FrameError::stream(
            stream,
            ErrorCode::PROTOCOL_ERROR,
            "stream depends on itself",
        ));
    }
    Ok(p)
}

impl<'a> Frame<'a> {
    /// Checks `payload` (exactly `h.len` bytes) as a frame of `h`'s type.
    pub fn parse(h: &Header, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
        use ErrorCode as E;
        let s = h.stream;
        let on_stream = |what: &'static str| {
            if s == 0 {
                Err(FrameError::conn(E::PROTOCOL_ERROR, what))
            } else {
                Ok(())
            }
        };
        let on_conn = |what: &'static str| {
            if s != 0 {
                Err(FrameError::conn(E::PROTOCOL_ERROR, what))
            } else {
                Ok(())
            }
        };
        match h.kind {
            kind::DATA => {
                on_stream("DATA on stream 0")?;
                let data = unpad(h, payload)?;
                Ok(Frame::Data {
                    stream: s,
                    end_stream: h.has(flag::END_STREAM),
                    data,
                    flow: h.len,
                })
            }
            kind::HEADERS => {
                on_stream("HEADERS on stream 0")?;
                let mut block = unpad(h, payload)?;
                let mut self_dependent = false;
                if h.has(flag::PRIORITY) {
                    if block.len() < 5 {
                        return Err(FrameError::conn(
                            E::FRAME_SIZE_ERROR,
                            "HEADERS too short for its priority",
                        ));
                    }
                    self_dependent = priority(s, &block[..5]).is_err();
                    block = &block[5..];
                }
                Ok(Frame::Headers {
                    stream: s,
                    end_stream: h.has(flag::END_STREAM),
                    end_headers: h.has(flag::END_HEADERS),
                    block,
                    self_dependent,
                })
            }
            kind::PRIORITY => {
                on_stream("PRIORITY on stream 0")?;
                if payload.len() != 5 {
                    return Err(FrameError::stream(
                        s,
                        E::FRAME_SIZE_ERROR,
                        "PRIORITY not 5 bytes",
                    ));
                }
                priority(s, payload)?;
                Ok(Frame::Priority { stream: s })
            }
            kind::RST_STREAM => {
                on_stream("RST_STREAM on stream 0")?;
                if payload.len() != 4 {
                    return Err(FrameError::conn(
                        E::FRAME_SIZE_ERROR,
                        "RST_STREAM not 4 bytes",
                    ));
                }
                Ok(Frame::RstStream {
                    stream: s,
                    code: ErrorCode(be32(payload)),
                })
            }
            kind::SETTINGS => {
                on_conn("SETTINGS on a stream")?;
                let ack = h.has(flag::ACK);
                if ack && !payload.is_empty() {
                    return Err(FrameError::conn(
                        E::FRAME_SIZE_ERROR,
                        "SETTINGS ack with a payload",
                    ));
                }
                if payload.len() % 6 != 0 {
                    return Err(FrameError::conn(
                        E::FRAME_SIZE_ERROR,
                        "SETTINGS not a multiple of 6 bytes",
                    ));
                }
                Ok(Frame::Settings {
                    ack,
                    params: payload,
                })
            }
            kind::PUSH_PROMISE => Ok(Frame::PushPromise),
            kind::PING => {
                on_conn("PING on a stream")?;
                let data: [u8; 8] = payload
                    .try_into()
                    .map_err(|_| FrameError::conn(E::FRAME_SIZE_ERROR, "PING not 8 bytes"))?;
                Ok(Frame::Ping {
                    ack: h.has(flag::ACK),
                    data,
                })
            }
            kind::GOAWAY => {
                on_conn("GOAWAY on a stream")?;
                if payload.len() < 8 {
                    return Err(FrameError::conn(E::FRAME_SIZE_ERROR, "GOAWAY too short"));
                }
                Ok(Frame::GoAway {
                    last_stream: be32(payload) & 0x7fff_ffff,
                    code: ErrorCode(be32(&payload[4..])),
                })
            }
            kind::WINDOW_UPDATE => {
                if payload.len() != 4 {
                    return Err(FrameError::conn(
                        E::FRAME_SIZE_ERROR,
                        "WINDOW_UPDATE not 4 bytes",
                    ));
                }
                Ok(Frame::WindowUpdate {
                    stream: s,
                    increment: be32(payload) & 0x7fff_ffff,
                })
            }
            kind::CONTINUATION => {
                on_stream("CONTINUATION on stream 0")?;
                Ok(Frame::Continuation {
                    stream: s,
                    end_headers: h.has(flag::END_HEADERS),
                    block: payload,
                })
            }
            _ => Ok(Frame::Unknown),
        }
    }
}

/// The entries of a SETTINGS payload: `(identifier, value)`.
pub fn settings(params: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    params
        .chunks_exact(6)
        .map(|c| (u16::from_be_bytes([c[0], c[1]]), be32(&c[2..])))
}

/// Appends a frame header.
pub fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = len as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// Appends a SETTINGS frame with `params`.
pub fn write_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    write_header(out, params.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// Appends a PING acknowledgement echoing `data`.
pub fn write_ping_ack(out: &mut Vec<u8>, data: [u8; 8]) {
    write_header(out, 8, kind::PING, flag::ACK, 0);
    out.extend_from_slice(&data);
}

/// Appends a GOAWAY.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    write_header(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
    out.extend_from_slice(debug);
}

/// Appends a RST_STREAM.
pub fn write_rst(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    write_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&code.0.to_be_bytes());
}

/// Appends a WINDOW_UPDATE.
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends one DATA frame (the caller keeps it within the peer's frame size and windows).
pub fn write_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    write_header(out, data.len(), kind::DATA, flags, stream);
    out.extend_from_slice(data);
}

/// Appends a header block as HEADERS and, past `max_frame` bytes, CONTINUATION frames.
pub fn write_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let mut rest = chunks.peekable();
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if rest.peek().is_none() {
        flags |= flag::END_HEADERS;
    }
    write_header(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    while let Some(chunk) = rest.next() {
        let flags = if rest.peek().is_none() {
            flag::END_HEADERS
        } else {
            0
        };
        write_header(out, chunk.len(), kind::CONTINUATION, flags, stream);
        out.extend_from_slice(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(&mut out, payload.len(), kind, flags, stream);
        out.extend_from_slice(payload);
        out
    }

    fn parse(bytes: &[u8]) -> Result<Frame<'_>, FrameError> {
        let h = Header::parse(bytes).unwrap();
        Frame::parse(&h, &bytes[HEADER_LEN..])
    }

    fn code(r: Result<Frame<'_>, FrameError>) -> (ErrorCode, Option<u32>) {
        let e = r.unwrap_err();
        (e.code, e.stream)
    }

    #[test]
    fn the_header_drops_the_reserved_bit() {
        let h = Header::parse(&[0, 0, 5, 1, 4, 0x80, 0, 0, 3]).unwrap();
        assert_eq!(
            h,
            Header {
                len: 5,
                kind: kind::HEADERS,
                flags: flag::END_HEADERS,
                stream: 3
            }
        );
        assert!(Header::parse(&[0; 8]).is_none());
    }

    #[test]
    fn data_padding_is_stripped_and_counted() {
        let bytes = frame(kind::DATA, flag::PADDED | flag::END_STREAM, 1, b"\x02abcxx");
        assert_eq!(
            parse(&bytes),
            Ok(Frame::Data {
                stream: 1,
                end_stream: true,
                data: b"abc",
                flow: 6
            })
        );
        // A pad length as long as the whole payload: too long (§6.1).
        let bytes = frame(kind::DATA, flag::PADDED, 1, b"\x04abc");
        assert_eq!(code(parse(&bytes)), (ErrorCode::PROTOCOL_ERROR, None));
        let bytes = frame(kind::DATA, 0, 0, b"abc");
        assert_eq!(code(parse(&bytes)), (ErrorCode::PROTOCOL_ERROR, None));
    }

    #[test]
    fn headers_priority_is_skipped_and_a_self_dependency_refused() {
        let bytes = frame(
            kind::HEADERS,
            flag::PRIORITY | flag::END_HEADERS,
            3,
            &[0, 0, 0, 1, 16, 0x82],
        );
        assert_eq!(
            parse(&bytes),
            Ok(Frame::Headers {
                stream: 3,
                end_stream: false,
                end_headers: true,
                block: &[0x82],
                self_dependent: false,
            })
        );
        let bytes = frame(kind::HEADERS, flag::PRIORITY, 3, &[0, 0, 0, 3, 16]);
        assert!(matches!(
            parse(&bytes),
            Ok(Frame::Headers {
                self_dependent: true,
                ..
            })
        ));
        let bytes = frame(kind::PRIORITY, 0, 5, &[0, 0, 0, 1, 16, 0]);
        assert_eq!(code(parse(&bytes)), (ErrorCode::FRAME_SIZE_ERROR, Some(5)));
        let bytes = frame(kind::PRIORITY, 0, 5, &[0, 0, 0, 5, 16]);
        assert_eq!(code(parse(&bytes)), (ErrorCode::PROTOCOL_ERROR, Some(5)));
        let bytes = frame(kind::PRIORITY, 0, 0, &[0, 0, 0, 1, 16]);
        assert_eq!(code(parse(&bytes)), (ErrorCode::PROTOCOL_ERROR, None));
    }

    #[test]
    fn control_frames_check_their_sizes_and_streams() {
        let cases: [(Vec<u8>, ErrorCode); 9] = [
            (frame(kind::SETTINGS, 0, 1, &[]), ErrorCode::PROTOCOL_ERROR),
            (
                frame(kind::SETTINGS, flag::ACK, 0, &[0; 6]),
                ErrorCode::FRAME_SIZE_ERROR,
            ),
            (
                frame(kind::SETTINGS, 0, 0, &[0; 5]),
                ErrorCode::FRAME_SIZE_ERROR,
            ),
            (
                frame(kind::PING, 0, 0, &[0; 7]),
                ErrorCode::FRAME_SIZE_ERROR,
            ),
            (frame(kind::PING, 0, 1, &[0; 8]), ErrorCode::PROTOCOL_ERROR),
            (
                frame(kind::RST_STREAM, 0, 1, &[0; 3]),
                ErrorCode::FRAME_SIZE_ERROR,
            ),
            (
                frame(kind::RST_STREAM, 0, 0, &[0; 4]),
                ErrorCode::PROTOCOL_ERROR,
            ),
            (
                frame(kind::WINDOW_UPDATE, 0, 0, &[0; 3]),
                ErrorCode::FRAME_SIZE_ERROR,
            ),
            (
                frame(kind::GOAWAY, 0, 1, &[0; 8]),
                ErrorCode::PROTOCOL_ERROR,
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(code(parse(&bytes)), (want, None), "{bytes:?}");
        }
    }

    #[test]
    fn settings_entries_and_unknown_types() {
        let bytes = frame(kind::SETTINGS, 0, 0, &[0, 4, 0, 1, 0, 0, 0, 3, 0, 0, 0, 7]);
        let Ok(Frame::Settings { ack: false, params }) = parse(&bytes) else {
            panic!()
        };
        assert_eq!(settings(params).collect::<Vec<_>>(), [(4, 65536), (3, 7)]);
        assert_eq!(parse(&frame(0x42, 0xff, 9, b"xyz")), Ok(Frame::Unknown));
    }

    #[test]
    fn long_header_blocks_are_split_into_continuations() {
        let mut out = Vec::new();
        write_headers(&mut out, 1, &[7; 10], true, 4);
        let mut at = 0;
        let mut seen = Vec::new();
        while let Some(h) = Header::parse(&out[at..]) {
            seen.push((h.kind, h.flags, h.len));
            at += HEADER_LEN + h.len as usize;
        }
        assert_eq!(
            seen,
            [
                (kind::HEADERS, flag::END_STREAM, 4),
                (kind::CONTINUATION, 0, 4),
                (kind::CONTINUATION, flag::END_HEADERS, 2)
            ]
        );
    }
}
