//! The two wire protocols behind one face, so the load loop does not care which it speaks:
//! berth's framing (docs/msg-protocol.md; the frame decoder and handshake bytes come from
//! `berth_proto::msg`) and ZeroMQ's ([`super::zmtp`]). Each gives the bytes a connection sends
//! first, the header that goes before a message's payload, and a streaming reader that turns
//! the server's bytes into [`In`] steps: the handshake's outcome, then each echo's start, bytes
//! and end.

use berth_proto::msg::frame::{self, CONTROL_BIT};
use berth_proto::msg::handshake::{encode_keyword, parse_control, OK_FRAME};
use berth_proto::msg::{FrameDecoder, Piece};

use super::Endpoint;
use super::Protocol;
use super::{ws, zmtp};

/// Longest control payload kept for the report; the rest of a longer one is read and dropped.
const MAX_CONTROL_TEXT: usize = 1024;

/// One step of what the server sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum In<'a> {
    /// The handshake succeeded: messages may flow.
    Ready,
    /// The server turned the connection away during the handshake, saying this.
    Refused(String),
    /// The server ended an established connection, saying this (berth `error` control frames,
    /// ZeroMQ ERROR commands).
    Ended(String),
    /// An echo begins; it is this long.
    Start(u64),
    /// Some of the echo's bytes, in order.
    Chunk(&'a [u8]),
    /// The echo is complete.
    End,
}

/// Which side is at fault when the server's bytes cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The handshake went wrong (no `OK`, not a ZMTP server, ...).
    Handshake(String),
    /// Framing after the handshake went wrong.
    Protocol(String),
}

/// The bytes a connection sends first: berth's keyword frame (`name` empty: anonymous), or
/// ZeroMQ's greeting and READY as a DEALER.
pub fn hello(protocol: Protocol, name: &str, endpoint: &Endpoint) -> Vec<u8> {
    let mut out = Vec::new();
    match protocol {
        Protocol::WebSocket => return ws::hello(endpoint),
        Protocol::Berth => encode_keyword(name, &mut out),
        Protocol::Zmq => {
            out.extend_from_slice(&zmtp::greeting());
            zmtp::encode_ready("DEALER", &mut out);
        }
    }
    out
}

/// Appends the header of a `len`-byte message to `out`.
pub fn message_header(protocol: Protocol, len: u64, out: &mut Vec<u8>) {
    match protocol {
        Protocol::Berth => out.extend_from_slice(&frame::header(len)),
        Protocol::Zmq => {
            let (h, n) = zmtp::message_header(len);
            out.extend_from_slice(&h[..n]);
        }
        Protocol::WebSocket => ws::message_header(len, out),
    }
}

/// Where a berth connection is in what the server sends.
#[derive(Debug, Clone)]
enum BerthState {
    /// Waiting for the `OK` frame; `got` collects its payload (at most 2 bytes).
    Hello { got: [u8; 2], have: usize },
    /// Echoes flow.
    Data,
    /// A control frame's payload is being collected; `during_hello` tells refusal from ending.
    Control { text: Vec<u8>, during_hello: bool },
    /// A control frame was complete: the server closes next, and sends nothing more.
    Closed,
}

/// Reads one connection's incoming bytes.
#[derive(Debug, Clone)]
pub struct Reader(Inner);

#[derive(Debug, Clone)]
enum Inner {
    Berth {
        /// The frame decoder, reading what a server sends (control frames included).
        frames: FrameDecoder,
        state: BerthState,
    },
    Zmq(zmtp::Reader),
    Ws(ws::Reader),
}

impl Reader {
    /// A reader for a fresh connection.
    pub fn new(protocol: Protocol) -> Reader {
        match protocol {
            // No limit of our own: the length is checked against the size sent instead, and
            // the decoder never allocates for what a length announces.
            Protocol::Berth => Reader(Inner::Berth {
                frames: FrameDecoder::from_server(CONTROL_BIT - 1),
                state: BerthState::Hello {
                    got: [0; 2],
                    have: 0,
                },
            }),
            Protocol::Zmq => Reader(Inner::Zmq(zmtp::Reader::new())),
            Protocol::WebSocket => Reader(Inner::Ws(ws::Reader::default())),
        }
    }

    /// Decodes from the front of `input`: the bytes used and the next step, or `None` when
    /// `input` is used up first. Call again with the rest until it returns `None`; every byte
    /// given is eventually used, so the caller never keeps any.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<In<'a>>), WireError> {
        match &mut self.0 {
            Inner::Berth { frames, state } => berth_next(frames, state, input),
            Inner::Ws(r) => {
                let ready = r.is_ready();
                match r.next(input) {
                    Ok((n, p)) => Ok((
                        n,
                        p.map(|p| match p {
                            ws::Piece::Ready => In::Ready,
                            ws::Piece::Refused(s) => In::Refused(s),
                            ws::Piece::Closed(s) => In::Ended(s),
                            ws::Piece::Start(len) => In::Start(len),
                            ws::Piece::Chunk(b) => In::Chunk(b),
                            ws::Piece::End => In::End,
                        }),
                    )),
                    Err(e) if ready => Err(WireError::Protocol(e)),
                    Err(e) => Err(WireError::Handshake(e)),
                }
            }
            Inner::Zmq(r) => match r.next(input) {
                Ok((n, p)) => Ok((
                    n,
                    p.map(|p| match p {
                        zmtp::Piece::Ready => In::Ready,
                        zmtp::Piece::Error(text) if r.is_ready() => In::Ended(text),
                        zmtp::Piece::Error(text) => In::Refused(text),
                        zmtp::Piece::Start(len) => In::Start(len),
                        zmtp::Piece::Chunk(b) => In::Chunk(b),
                        zmtp::Piece::End => In::End,
                    }),
                )),
                Err(zmtp::ZmtpError::Handshake(e)) => Err(WireError::Handshake(e)),
                Err(zmtp::ZmtpError::Protocol(e)) => Err(WireError::Protocol(e)),
            },
        }
    }
}

fn berth_next<'a>(
    frames: &mut FrameDecoder,
    state: &mut BerthState,
    input: &'a [u8],
) -> Result<(usize, Option<In<'a>>), WireError> {
    let mut used = 0;
    loop {
        if matches!(state, BerthState::Closed) && used < input.len() {
            return Err(WireError::Protocol(
                "bytes after a control frame (the server must close after one)".to_owned(),
            ));
        }
        // The decoder's limit is the largest length there is, so it has nothing to refuse.
        let (n, piece) = frames
            .next(&input[used..])
            .map_err(|e| WireError::Protocol(e.to_string()))?;
        used += n;
        let Some(piece) = piece else {
            return Ok((used, None));
        };
        match (&mut *state, piece) {
            (BerthState::Hello { .. }, Piece::Control(_))
            | (BerthState::Data, Piece::Control(_)) => {
                let during_hello = matches!(state, BerthState::Hello { .. });
                *state = BerthState::Control {
                    text: Vec::new(),
                    during_hello,
                };
            }
            (BerthState::Control { text, .. }, Piece::Chunk(b)) => {
                let room = MAX_CONTROL_TEXT.saturating_sub(text.len());
                text.extend_from_slice(&b[..b.len().min(room)]);
            }
            (BerthState::Control { text, during_hello }, Piece::End) => {
                let said = match parse_control(text) {
                    Some(c) if c.text.is_empty() => format!("{} {}", c.kind, c.code),
                    Some(c) => format!("{} {} {}", c.kind, c.code, c.text),
                    None => format!(
                        "an unreadable control frame: {:?}",
                        String::from_utf8_lossy(text)
                    ),
                };
                let during_hello = *during_hello;
                *state = BerthState::Closed;
                return Ok((
                    used,
                    Some(if during_hello {
                        In::Refused(said)
                    } else {
                        In::Ended(said)
                    }),
                ));
            }
            (BerthState::Hello { .. }, Piece::Start(len)) if len != 2 => {
                return Err(WireError::Handshake(format!(
                    "expected the OK frame, got a frame of {len} bytes"
                )));
            }
            (BerthState::Hello { .. }, Piece::Start(_)) => {}
            (BerthState::Hello { got, have }, Piece::Chunk(b)) => {
                // The length was checked to be 2, so the chunks fit.
                let n = b.len().min(2 - *have);
                got[*have..*have + n].copy_from_slice(&b[..n]);
                *have += n;
            }
            (BerthState::Hello { got, .. }, Piece::End) => {
                if *got != OK_FRAME[8..] {
                    return Err(WireError::Handshake(format!(
                        "expected the OK frame, got {:?}",
                        String::from_utf8_lossy(got)
                    )));
                }
                *state = BerthState::Data;
                return Ok((used, Some(In::Ready)));
            }
            (BerthState::Data, Piece::Start(len)) => return Ok((used, Some(In::Start(len)))),
            (BerthState::Data, Piece::Chunk(b)) => return Ok((used, Some(In::Chunk(b)))),
            (BerthState::Data, Piece::End) => return Ok((used, Some(In::End))),
            // The decoder gives a frame's pieces in order (Start or Control, Chunks, End), and
            // `Closed` stops before the decoder is asked again; nothing else can happen.
            (BerthState::Control { .. }, Piece::Start(_) | Piece::Control(_))
            | (BerthState::Closed, _) => {
                return Err(WireError::Protocol("frame pieces out of order".to_owned()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::msg::handshake::{encode_ending, encode_refusal};
    use berth_proto::msg::{Ending, Refusal};

    /// Feeds `input` `step` bytes at a time; returns the steps as text (chunks joined).
    fn read(protocol: Protocol, input: &[u8], step: usize) -> Result<Vec<String>, WireError> {
        let mut r = Reader::new(protocol);
        let mut out: Vec<String> = Vec::new();
        for part in input.chunks(step) {
            let mut at = 0;
            loop {
                let (n, step) = r.next(&part[at..])?;
                at += n;
                match step {
                    None => break,
                    Some(In::Chunk(b)) => match out.last_mut() {
                        Some(last) if last.starts_with("Chunk:") => {
                            last.push_str(&String::from_utf8_lossy(b))
                        }
                        _ => out.push(format!("Chunk:{}", String::from_utf8_lossy(b))),
                    },
                    Some(s) => out.push(format!("{s:?}")),
                }
            }
            assert_eq!(at, part.len());
        }
        Ok(out)
    }

    #[test]
    fn berth_ok_then_echoes_at_every_split() {
        let mut input = OK_FRAME.to_vec();
        frame::encode(b"ping", &mut input);
        frame::encode(b"", &mut input);
        for step in 1..=input.len() {
            assert_eq!(
                read(Protocol::Berth, &input, step).unwrap(),
                ["Ready", "Start(4)", "Chunk:ping", "End", "Start(0)", "End"],
                "step {step}"
            );
        }
    }

    #[test]
    fn berth_refusal_and_ending_carry_their_text() {
        let mut input = Vec::new();
        encode_refusal(Refusal::NameTaken, "name \"bench-0\" is held", &mut input);
        assert_eq!(
            read(Protocol::Berth, &input, 3).unwrap(),
            [r#"Refused("refused name-taken name \"bench-0\" is held")"#]
        );
        let mut input = OK_FRAME.to_vec();
        encode_ending(Ending::Shutdown, "", &mut input);
        assert_eq!(
            read(Protocol::Berth, &input, 1).unwrap(),
            ["Ready", r#"Ended("error shutdown")"#]
        );
        input.push(0);
        assert!(matches!(
            read(Protocol::Berth, &input, 100),
            Err(WireError::Protocol(_))
        ));
    }

    #[test]
    fn berth_wrong_answers_to_the_keyword() {
        let mut no = Vec::new();
        frame::encode(b"NO", &mut no);
        assert!(matches!(
            read(Protocol::Berth, &no, 1),
            Err(WireError::Handshake(_))
        ));
        let mut long = Vec::new();
        frame::encode(b"OKAY", &mut long);
        assert!(matches!(
            read(Protocol::Berth, &long, 1),
            Err(WireError::Handshake(_))
        ));
        let mut huge = Vec::from(OK_FRAME);
        huge.extend_from_slice(&frame::control_header(1 << 40));
        huge.extend_from_slice(&[b'x'; 5000]);
        // A long control payload is read, kept short, and never allocated up front.
        assert_eq!(read(Protocol::Berth, &huge, 4096).unwrap(), ["Ready"]);
    }

    #[test]
    fn hello_bytes() {
        let tcp = Endpoint::parse("tcp://127.0.0.1:1").unwrap();
        assert_eq!(
            hello(Protocol::Berth, "svc", &tcp),
            b"\x03\0\0\0\0\0\0\0svc"
        );
        assert_eq!(hello(Protocol::Berth, "", &tcp), [0u8; 8]);
        let z = hello(Protocol::Zmq, "ignored", &tcp);
        assert_eq!(z.len(), 64 + 30);
        let mut h = Vec::new();
        message_header(Protocol::Zmq, 1 << 20, &mut h);
        message_header(Protocol::Berth, 5, &mut h);
        assert_eq!(h, [2, 0, 0, 0, 0, 0, 0x10, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);
    }
}
