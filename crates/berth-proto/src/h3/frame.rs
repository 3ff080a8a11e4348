//! HTTP/3 frames (RFC 9114 §7): the header, each defined type's payload checked, where each
//! may appear, and the writers.
//!
//! A frame is a type and a length, both QUIC variable-length integers, then the payload. A
//! stream's bytes arrive in pieces, so [`Header::parse`] answers "need more" (`None`) rather
//! than failing on a short read, and [`Frame::parse`] takes a whole payload. [`FrameReader`]
//! puts the two together for one stream: it checks each header before anything is buffered
//! (a length of 2^62 allocates nothing), passes DATA through in pieces, skips unknown and
//! reserved types without buffering them (§7.2.8, §9), and buffers the other frames up to a
//! limit the caller chooses.

use super::error::{is_grease, Error, ErrorCode, H3Error};
use super::settings::Settings;
use super::stream;
use super::varint;
use super::Role;

/// Frame types (RFC 9114 §7.2, §11.2.1).
pub mod kind {
    /// DATA (§7.2.1).
    pub const DATA: u64 = 0x00;
    /// HEADERS (§7.2.2).
    pub const HEADERS: u64 = 0x01;
    /// CANCEL_PUSH (§7.2.3).
    pub const CANCEL_PUSH: u64 = 0x03;
    /// SETTINGS (§7.2.4).
    pub const SETTINGS: u64 = 0x04;
    /// PUSH_PROMISE (§7.2.5).
    pub const PUSH_PROMISE: u64 = 0x05;
    /// GOAWAY (§7.2.6).
    pub const GOAWAY: u64 = 0x07;
    /// MAX_PUSH_ID (§7.2.7).
    pub const MAX_PUSH_ID: u64 = 0x0d;

    /// Whether `kind` is one of HTTP/2's frame types with no HTTP/3 counterpart (PRIORITY,
    /// PING, WINDOW_UPDATE, CONTINUATION: 0x02, 0x06, 0x08, 0x09). §7.2.8: "their receipt
    /// MUST be treated as a connection error of type H3_FRAME_UNEXPECTED".
    pub fn is_http2_only(kind: u64) -> bool {
        matches!(kind, 0x02 | 0x06 | 0x08 | 0x09)
    }
}

/// The longest frame header: two 8-byte integers.
pub const MAX_HEADER_LEN: usize = 2 * varint::MAX_LEN;

/// A frame header (RFC 9114 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Frame type ([`kind`]).
    pub kind: u64,
    /// Payload length in bytes, as claimed: nothing is reserved on its word.
    pub len: u64,
}

impl Header {
    /// Reads a header from the front of `buf`: `Some((header, bytes used))`, or `None` when
    /// `buf` ends inside it.
    pub fn parse(buf: &[u8]) -> Option<(Header, usize)> {
        let (kind, a) = varint::read(buf)?;
        let (len, b) = varint::read(&buf[a..])?;
        Some((Header { kind, len }, a + b))
    }
}

/// The kinds of stream frames travel on (RFC 9114 §6): which frames each may carry is the
/// table of §7.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// The peer's control stream (§6.2.1).
    Control,
    /// A request stream (§6.1): client-initiated bidirectional.
    Request,
    /// A push stream (§6.2.2), after its header.
    Push,
}

/// A frame, its payload checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA: request or response content.
    Data(&'a [u8]),
    /// HEADERS: an encoded field section, for QPACK.
    Headers(&'a [u8]),
    /// CANCEL_PUSH: the push ID.
    CancelPush(u64),
    /// SETTINGS.
    Settings(Settings),
    /// PUSH_PROMISE.
    PushPromise {
        /// The push ID.
        push_id: u64,
        /// The promised request's encoded field section.
        section: &'a [u8],
    },
    /// GOAWAY: from a server, the first request stream it will not process; from a client,
    /// a push ID.
    Goaway(u64),
    /// MAX_PUSH_ID: the largest push ID the client allows.
    MaxPushId(u64),
    /// A type this module does not know, reserved ones included: its payload has no meaning
    /// and is ignored (§7.2.8, §9).
    Unknown {
        /// The type.
        kind: u64,
    },
}

/// A payload that must be exactly one integer (CANCEL_PUSH, GOAWAY, MAX_PUSH_ID). §7.1: "A
/// frame payload that contains additional bytes after the identified fields or a frame
/// payload that terminates before the end of the identified fields MUST be treated as a
/// connection error of type H3_FRAME_ERROR".
fn one_integer(payload: &[u8], what: &'static str) -> Result<u64, H3Error> {
    match varint::read(payload) {
        Some((v, n)) if n == payload.len() => Ok(v),
        _ => Err(H3Error::conn(ErrorCode::H3_FRAME_ERROR, what)),
    }
}

impl<'a> Frame<'a> {
    /// Checks `payload` (the whole of it) as a frame of type `kind`.
    ///
    /// Where the frame arrived is not checked here; see [`check_placement`].
    pub fn parse(kind: u64, payload: &'a [u8]) -> Result<Frame<'a>, H3Error> {
        match kind {
            kind::DATA => Ok(Frame::Data(payload)),
            kind::HEADERS => Ok(Frame::Headers(payload)),
            kind::CANCEL_PUSH => Ok(Frame::CancelPush(one_integer(
                payload,
                "CANCEL_PUSH is not one push ID",
            )?)),
            kind::SETTINGS => Ok(Frame::Settings(Settings::parse(payload)?)),
            kind::PUSH_PROMISE => {
                let (push_id, n) = varint::read(payload).ok_or(H3Error::conn(
                    ErrorCode::H3_FRAME_ERROR,
                    "PUSH_PROMISE ends inside its push ID",
                ))?;
                Ok(Frame::PushPromise {
                    push_id,
                    section: &payload[n..],
                })
            }
            kind::GOAWAY => Ok(Frame::Goaway(one_integer(
                payload,
                "GOAWAY is not one identifier",
            )?)),
            kind::MAX_PUSH_ID => Ok(Frame::MaxPushId(one_integer(
                payload,
                "MAX_PUSH_ID is not one push ID",
            )?)),
            k if kind::is_http2_only(k) => Err(http2_frame()),
            k => Ok(Frame::Unknown { kind: k }),
        }
    }

    /// The frame's type.
    pub fn kind(&self) -> u64 {
        match self {
            Frame::Data(_) => kind::DATA,
            Frame::Headers(_) => kind::HEADERS,
            Frame::CancelPush(_) => kind::CANCEL_PUSH,
            Frame::Settings(_) => kind::SETTINGS,
            Frame::PushPromise { .. } => kind::PUSH_PROMISE,
            Frame::Goaway(_) => kind::GOAWAY,
            Frame::MaxPushId(_) => kind::MAX_PUSH_ID,
            Frame::Unknown { kind } => *kind,
        }
    }

    /// Appends the whole frame. An [`Unknown`](Frame::Unknown) frame is written with an empty
    /// payload (grease, §7.2.8), and must then have a reserved type: writing one of HTTP/2's
    /// types, or an integer past 2^62 - 1, is the caller's mistake ([`Error::Misuse`]), and
    /// nothing is written.
    pub fn write(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        let one = |v: u64| {
            if v > varint::MAX {
                Err(Error::Misuse("an identifier past 2^62 - 1"))
            } else {
                Ok(v)
            }
        };
        match *self {
            Frame::Data(data) | Frame::Headers(data) => {
                write_header(self.kind(), data.len() as u64, out);
                out.extend_from_slice(data);
            }
            Frame::CancelPush(id) | Frame::Goaway(id) | Frame::MaxPushId(id) => {
                let id = one(id)?;
                write_header(self.kind(), varint::size(id) as u64, out);
                varint::write(id, out);
            }
            Frame::Settings(s) => s.write_frame(None, out)?,
            Frame::PushPromise { push_id, section } => {
                let id = one(push_id)?;
                write_header(
                    kind::PUSH_PROMISE,
                    (varint::size(id) + section.len()) as u64,
                    out,
                );
                varint::write(id, out);
                out.extend_from_slice(section);
            }
            Frame::Unknown { kind } => {
                if !is_grease(kind) {
                    return Err(Error::Misuse(
                        "an unknown frame that is not a reserved type",
                    ));
                }
                write_header(kind, 0, out);
            }
        }
        Ok(())
    }
}

fn http2_frame() -> H3Error {
    H3Error::conn(
        ErrorCode::H3_FRAME_UNEXPECTED,
        "an HTTP/2 frame type (RFC 9114 §7.2.8)",
    )
}

/// Checks that a frame of type `kind` may arrive on a stream of `on`, at an endpoint of
/// `role` (the table of RFC 9114 §7.2, and §7.2.5, §7.2.7 for who may receive PUSH_PROMISE
/// and MAX_PUSH_ID). Every refusal is a connection error of type H3_FRAME_UNEXPECTED. Unknown
/// and reserved types are allowed everywhere.
///
/// Order within a stream (SETTINGS first and once on the control stream, HEADERS before
/// DATA on a request stream) is a matter of state: [`FrameReader`] checks the control
/// stream's, the connection the request stream's.
pub fn check_placement(kind: u64, on: StreamKind, role: Role) -> Result<(), H3Error> {
    use StreamKind::*;
    let unexpected = |reason| Err(H3Error::conn(ErrorCode::H3_FRAME_UNEXPECTED, reason));
    match kind {
        kind::DATA | kind::HEADERS if on == Control => {
            unexpected("DATA or HEADERS on the control stream")
        }
        kind::CANCEL_PUSH | kind::SETTINGS | kind::GOAWAY | kind::MAX_PUSH_ID if on != Control => {
            unexpected("a control frame outside the control stream")
        }
        kind::PUSH_PROMISE if on != Request => unexpected("PUSH_PROMISE outside a request stream"),
        kind::PUSH_PROMISE if role == Role::Server => unexpected("PUSH_PROMISE from a client"),
        kind::MAX_PUSH_ID if role == Role::Client => unexpected("MAX_PUSH_ID from a server"),
        k if kind::is_http2_only(k) => Err(http2_frame()),
        _ => Ok(()),
    }
}

/// Appends a frame header.
///
/// # Panics
///
/// If `kind` or `len` is past 2^62 - 1 (see [`varint::write`]).
pub fn write_header(kind: u64, len: u64, out: &mut Vec<u8>) {
    varint::write(kind, out);
    varint::write(len, out);
}

/// Appends the header of a DATA frame of `len` bytes, for a caller that writes the payload
/// itself (from a file, say) rather than copying it through [`Frame::write`].
pub fn write_data_header(len: u64, out: &mut Vec<u8>) {
    write_header(kind::DATA, len, out);
}

/// What [`FrameReader::read`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A piece of a DATA frame's payload, as it arrived (never buffered). `end`: the
    /// frame's last byte is in it. An empty DATA frame gives one empty piece with `end`.
    Data {
        /// The bytes.
        chunk: &'a [u8],
        /// The frame ends here.
        end: bool,
    },
    /// A whole frame other than DATA, its payload checked. Unknown and reserved types are
    /// skipped without an event.
    Frame(Frame<'a>),
    /// A HEADERS or PUSH_PROMISE frame whose payload is longer than the reader's limit: the
    /// payload is skipped as it arrives, never buffered. The connection answers the request
    /// 431 (RFC 9114 §4.2.2) or resets it, and tells its QPACK decoder the section will
    /// never be read (`Decoder::cancel_stream`), since it may reference the dynamic table.
    Oversized {
        /// The frame type.
        kind: u64,
        /// The length it claimed.
        len: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting a header: `have` bytes of it are in `FrameReader::head`.
    Header { have: usize },
    /// Passing `left` bytes of DATA through.
    Data { left: u64 },
    /// Collecting a payload of `len` bytes into `FrameReader::buf`.
    Buffer { kind: u64, len: usize },
    /// Dropping `left` bytes (an unknown type, or an oversized HEADERS).
    Skip { left: u64 },
}

/// Reads the frames of one stream from its bytes, in whatever pieces they come (see the
/// [module docs](self)). Each call gives at most one event; call again with the rest.
///
/// Per stream kind it also checks what RFC 9114 asks of frame order on the control stream:
/// SETTINGS first (H3_MISSING_SETTINGS otherwise, §6.2.1; an unknown frame first counts as
/// missing, as §9 advises) and never again (H3_FRAME_UNEXPECTED, §7.2.4); and, at a client,
/// that a server's GOAWAY names a request stream (H3_ID_ERROR, §7.2.6). What depends on
/// earlier frames' values (GOAWAY IDs only going down, MAX_PUSH_ID only up) is the
/// connection's.
#[derive(Debug)]
pub struct FrameReader {
    on: StreamKind,
    role: Role,
    max_payload: usize,
    state: State,
    head: [u8; MAX_HEADER_LEN],
    buf: Vec<u8>,
    /// Frames begun on this stream (the control stream's first must be SETTINGS).
    frames: u64,
}

impl FrameReader {
    /// A reader for a stream of kind `on` at an endpoint of `role`, which buffers frames
    /// other than DATA up to `max_payload` bytes. Longer HEADERS and PUSH_PROMISE frames are
    /// skipped and reported ([`Event::Oversized`]); any other longer frame is a connection
    /// error of type H3_EXCESSIVE_LOAD (none of them is ever more than a few dozen bytes
    /// when honest). A limit near twice the SETTINGS_MAX_FIELD_SECTION_SIZE advertised fits
    /// every honest field section, Huffman coding included.
    pub fn new(on: StreamKind, role: Role, max_payload: usize) -> Self {
        FrameReader {
            on,
            role,
            max_payload,
            state: State::Header { have: 0 },
            head: [0; MAX_HEADER_LEN],
            buf: Vec::new(),
            frames: 0,
        }
    }

    /// Reads from `input`: `(bytes used, event)`. With no event, all of `input` was used
    /// and more is needed; with one, call again with `input[used..]` (what is used may be
    /// all of it, or nothing but an empty DATA frame's header).
    pub fn read<'a>(&'a mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>), H3Error> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Header { have } => {
                    if rest.is_empty() {
                        return Ok((used, None));
                    }
                    let take = rest.len().min(MAX_HEADER_LEN - have);
                    self.head[have..have + take].copy_from_slice(&rest[..take]);
                    let Some((h, n)) = Header::parse(&self.head[..have + take]) else {
                        // A header is at most 16 bytes, so all of `take` is part of it.
                        self.state = State::Header { have: have + take };
                        used += take;
                        continue;
                    };
                    used += n - have;
                    if let Some(event) = self.begin(h)? {
                        return Ok((used, Some(event)));
                    }
                }
                State::Data { left } => {
                    if rest.is_empty() {
                        return Ok((used, None));
                    }
                    let n = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::Header { have: 0 }
                    } else {
                        State::Data { left }
                    };
                    let chunk = &rest[..n];
                    return Ok((
                        used + n,
                        Some(Event::Data {
                            chunk,
                            end: left == 0,
                        }),
                    ));
                }
                State::Skip { left } => {
                    if rest.is_empty() {
                        return Ok((used, None));
                    }
                    let n = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    used += n;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::Header { have: 0 }
                    } else {
                        State::Skip { left }
                    };
                }
                State::Buffer { kind, len } => {
                    let n = rest.len().min(len - self.buf.len());
                    self.buf.extend_from_slice(&rest[..n]);
                    used += n;
                    if self.buf.len() < len {
                        return Ok((used, None));
                    }
                    self.state = State::Header { have: 0 };
                    let frame = Frame::parse(kind, &self.buf)?;
                    if let (Role::Client, Frame::Goaway(id)) = (self.role, frame) {
                        // §7.2.6: from a server, GOAWAY names a request stream; "A client
                        // MUST treat receipt of a GOAWAY frame containing a stream ID of any
                        // other type as a connection error of type H3_ID_ERROR".
                        if !stream::is_request(id) {
                            return Err(H3Error::conn(
                                ErrorCode::H3_ID_ERROR,
                                "GOAWAY names no request stream",
                            ));
                        }
                    }
                    return Ok((used, Some(Event::Frame(frame))));
                }
            }
        }
    }

    /// A header is complete: check it, and choose how to read its payload. Returns an event
    /// when the frame is complete already (an empty payload) or oversized.
    fn begin(&mut self, h: Header) -> Result<Option<Event<'static>>, H3Error> {
        self.frames += 1;
        if self.on == StreamKind::Control {
            if self.frames == 1 && h.kind != kind::SETTINGS {
                return Err(H3Error::conn(
                    ErrorCode::H3_MISSING_SETTINGS,
                    "the control stream does not start with SETTINGS",
                ));
            }
            if self.frames > 1 && h.kind == kind::SETTINGS {
                return Err(H3Error::conn(
                    ErrorCode::H3_FRAME_UNEXPECTED,
                    "a second SETTINGS frame",
                ));
            }
        }
        check_placement(h.kind, self.on, self.role)?;
        match h.kind {
            kind::DATA => {
                if h.len == 0 {
                    self.state = State::Header { have: 0 };
                    return Ok(Some(Event::Data {
                        chunk: &[],
                        end: true,
                    }));
                }
                self.state = State::Data { left: h.len };
            }
            kind::HEADERS
            | kind::PUSH_PROMISE
            | kind::SETTINGS
            | kind::CANCEL_PUSH
            | kind::GOAWAY
            | kind::MAX_PUSH_ID => {
                let fixed = matches!(h.kind, kind::CANCEL_PUSH | kind::GOAWAY | kind::MAX_PUSH_ID);
                if fixed && h.len > varint::MAX_LEN as u64 {
                    // One integer is at most 8 bytes: refuse before waiting for the rest.
                    return Err(H3Error::conn(
                        ErrorCode::H3_FRAME_ERROR,
                        "a one-integer frame longer than 8 bytes",
                    ));
                }
                if h.len > self.max_payload as u64 {
                    if matches!(h.kind, kind::HEADERS | kind::PUSH_PROMISE) {
                        self.state = State::Skip { left: h.len };
                        return Ok(Some(Event::Oversized {
                            kind: h.kind,
                            len: h.len,
                        }));
                    }
                    return Err(H3Error::conn(
                        ErrorCode::H3_EXCESSIVE_LOAD,
                        "a control frame past the frame size limit",
                    ));
                }
                self.buf.clear();
                self.state = State::Buffer {
                    kind: h.kind,
                    len: h.len as usize,
                };
            }
            _ => {
                // Unknown or reserved: "MUST NOT consider these frames to have any meaning".
                self.state = if h.len == 0 {
                    State::Header { have: 0 }
                } else {
                    State::Skip { left: h.len }
                };
            }
        }
        Ok(None)
    }

    /// Whether the reader stands between frames: where a stream may end cleanly.
    pub fn is_between_frames(&self) -> bool {
        self.state == State::Header { have: 0 }
    }

    /// The stream ended cleanly (FIN): fine between frames, else H3_FRAME_ERROR (§7.1:
    /// "if the last frame on the stream was truncated, this MUST be treated as a connection
    /// error of type H3_FRAME_ERROR"). Whether this stream may end at all (the control
    /// stream may not) is the connection's to check.
    pub fn finish(&self) -> Result<(), H3Error> {
        if self.is_between_frames() {
            Ok(())
        } else {
            Err(H3Error::conn(
                ErrorCode::H3_FRAME_ERROR,
                "the stream ends inside a frame",
            ))
        }
    }
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
