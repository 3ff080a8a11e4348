//! The WebSocket side of `berth msg bench ws://HOST:PORT/PATH`: the opening handshake a client
//! sends, the header of a binary message it writes, and a streaming reader of what an echo
//! server sends back (the 101, then unmasked frames: one per echoed message).
//!
//! Messages are masked with the all-zero key: RFC 6455 asks clients for a mask, not for an
//! unpredictable one in a load generator, and a zero key leaves the payload as the pattern, so
//! the writer sends it from the shared pattern without copying it (the server cannot tell).

use super::endpoint::authority;
use super::Endpoint;

/// Longest 101 head read before the server is called wrong.
const MAX_HEAD: usize = 16 * 1024;

/// The opening handshake: a GET that asks to upgrade (RFC 6455 §4.1). The key is fixed: it
/// only proves the server speaks WebSocket.
pub fn hello(endpoint: &Endpoint) -> Vec<u8> {
    let host = authority(endpoint);
    let path = endpoint.websocket.as_deref().unwrap_or("/");
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .into_bytes()
}

/// Appends the header of a masked binary frame of `len` bytes (mask key 0).
pub fn message_header(len: u64, out: &mut Vec<u8>) {
    out.push(0x82);
    match len {
        0..=125 => out.push(0x80 | len as u8),
        126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(0x80 | 127);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
    out.extend_from_slice(&[0; 4]);
}

/// One step of what the server sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    /// The 101 came: messages may flow.
    Ready,
    /// The handshake was answered otherwise (its status line).
    Refused(String),
    /// A close frame (its code).
    Closed(String),
    /// An echo begins; it is this long.
    Start(u64),
    /// Some of its bytes.
    Chunk(&'a [u8]),
    /// It is complete.
    End,
}

#[derive(Debug, Clone)]
enum State {
    Head(Vec<u8>),
    /// Collecting a frame header.
    Header {
        buf: [u8; 10],
        have: usize,
    },
    /// In a data frame's payload.
    Data {
        left: u64,
    },
    /// Skipping a control frame's payload (a ping, a pong), or reading a close's.
    Control {
        left: u64,
        close: bool,
        text: Vec<u8>,
    },
    Closed,
}

/// Reads one connection's incoming bytes.
#[derive(Debug, Clone)]
pub struct Reader(State);

impl Default for Reader {
    fn default() -> Self {
        Reader(State::Head(Vec::new()))
    }
}

impl Reader {
    /// Whether the handshake is done.
    pub fn is_ready(&self) -> bool {
        !matches!(self.0, State::Head(_))
    }

    /// Decodes from the front of `input`: the bytes used and the next step, or `None` once
    /// `input` is used up. Every byte given is used.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Piece<'a>>), String> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match &mut self.0 {
                State::Head(head) => {
                    // Take bytes up to the end of the head, no further.
                    let before = head.len();
                    head.extend_from_slice(rest);
                    let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                        if head.len() > MAX_HEAD {
                            return Err("the handshake's answer has no end".to_owned());
                        }
                        return Ok((input.len(), None));
                    };
                    used += end + 4 - before;
                    let status = String::from_utf8_lossy(&head[..end])
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_owned();
                    if !status.starts_with("HTTP/1.1 101") {
                        self.0 = State::Closed;
                        return Ok((input.len(), Some(Piece::Refused(status))));
                    }
                    self.0 = State::Header {
                        buf: [0; 10],
                        have: 0,
                    };
                    return Ok((used, Some(Piece::Ready)));
                }
                State::Header { buf, have } => {
                    if rest.is_empty() {
                        return Ok((used, None));
                    }
                    let need = if *have < 2 {
                        2
                    } else {
                        match buf[1] & 0x7F {
                            126 => 4,
                            127 => 10,
                            _ => 2,
                        }
                    };
                    if *have < need {
                        let n = (need - *have).min(rest.len());
                        buf[*have..*have + n].copy_from_slice(&rest[..n]);
                        *have += n;
                        used += n;
                        continue;
                    }
                    let (b0, b1) = (buf[0], buf[1]);
                    if b1 & 0x80 != 0 {
                        return Err("a masked frame from the server".to_owned());
                    }
                    let len = match b1 & 0x7F {
                        126 => u16::from_be_bytes([buf[2], buf[3]]) as u64,
                        127 => u64::from_be_bytes(buf[2..10].try_into().unwrap_or([0; 8])),
                        n => n as u64,
                    };
                    match b0 & 0x0F {
                        0x1 | 0x2 if b0 & 0x80 != 0 => {
                            self.0 = State::Data { left: len };
                            return Ok((used, Some(Piece::Start(len))));
                        }
                        0x0..=0x2 => {
                            return Err("a fragmented echo (one frame per message expected)".into())
                        }
                        op @ (0x8..=0xA) => {
                            self.0 = State::Control {
                                left: len,
                                close: op == 0x8,
                                text: Vec::new(),
                            };
                        }
                        op => return Err(format!("a frame with opcode {op}")),
                    }
                }
                State::Data { left } => {
                    if *left == 0 {
                        self.0 = State::Header {
                            buf: [0; 10],
                            have: 0,
                        };
                        return Ok((used, Some(Piece::End)));
                    }
                    if rest.is_empty() {
                        return Ok((used, None));
                    }
                    let n = (*left).min(rest.len() as u64) as usize;
                    *left -= n as u64;
                    return Ok((used + n, Some(Piece::Chunk(&rest[..n]))));
                }
                State::Control { left, close, text } => {
                    let n = (*left).min(rest.len() as u64) as usize;
                    text.extend_from_slice(&rest[..n]);
                    *left -= n as u64;
                    used += n;
                    if *left > 0 {
                        return Ok((used, None));
                    }
                    if *close {
                        let code = match text.as_slice() {
                            [a, b, ..] => u16::from_be_bytes([*a, *b]).to_string(),
                            _ => "without a code".to_owned(),
                        };
                        self.0 = State::Closed;
                        return Ok((used, Some(Piece::Closed(format!("close {code}")))));
                    }
                    self.0 = State::Header {
                        buf: [0; 10],
                        have: 0,
                    };
                }
                State::Closed => {
                    if rest.is_empty() {
                        return Ok((used, None));
                    }
                    return Err("bytes after a close".to_owned());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_101_then_echoes_split_anywhere() {
        let mut all = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n".to_vec();
        all.extend_from_slice(&[0x82, 126, 0, 200]);
        all.extend((0..200).map(|i| i as u8));
        all.extend_from_slice(&[0x89, 1, b'p', 0x82, 2, 7, 8]);
        let mut r = Reader::default();
        let mut seen = Vec::new();
        for byte in all.chunks(1) {
            let mut at = 0;
            while let (n, Some(p)) = r.next(&byte[at..]).unwrap() {
                at += n;
                seen.push(match p {
                    Piece::Chunk(b) => format!("{}b", b.len()),
                    p => format!("{p:?}"),
                });
            }
        }
        let chunks = seen.iter().filter(|s| s.ends_with('b')).count();
        assert_eq!(seen[0], "Ready");
        assert_eq!(chunks, 202);
        assert_eq!(seen.iter().filter(|s| *s == "End").count(), 2);
    }
}
