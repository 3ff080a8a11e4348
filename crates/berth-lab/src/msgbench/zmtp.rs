//! A minimal ZeroMQ client side, sans-IO: ZMTP 3.0 (rfc.zeromq.org/spec/23) with the NULL
//! mechanism, as a DEALER socket talking to a ROUTER, sending and receiving single-part
//! messages. It owns the greeting and READY bytes this bench sends and a streaming [`Reader`]
//! for what the server sends back; nothing else of ZeroMQ is here (no CURVE or PLAIN, no
//! multipart messages, no PING answers, no ZMTP 1.0/2.0 fallback).
//!
//! Why hand-written: the Rust ZeroMQ crates either bind libzmq (a C library and its build in
//! this workspace, for a load generator) or run on tokio (a second runtime beside mio, and its
//! scheduling in every measurement). Talking to a ROUTER needs only the handshake and frame
//! layout below, which the spec defines completely.
//!
//! ```text
//! greeting (64 bytes, each side):  FF, 8 padding bytes, 7F | major 3, minor 0 |
//!                                  "NULL" padded to 20 | as-server 0 | 31 zero bytes
//! frame:                           flags (bit 0 MORE, bit 1 LONG, bit 2 COMMAND) |
//!                                  size: 1 byte, or 8 bytes big-endian when LONG | body
//! READY command body:              5 "READY" | properties: 1-byte name size, name,
//!                                  4-byte big-endian value size, value
//! ```
//!
//! Like [`berth_proto::msg::FrameDecoder`], the reader never buffers a message's payload: it
//! reports a frame's start, its bytes in the pieces the input holds, and its end. Only command
//! bodies (READY, ERROR: a few dozen bytes) are collected, up to [`MAX_COMMAND`].

/// Bytes of a ZMTP 3 greeting.
pub const GREETING_LEN: usize = 64;

/// Longest command body this client collects; READY and ERROR are far shorter, so a longer one
/// is not a server this bench can talk to.
pub const MAX_COMMAND: usize = 64 * 1024;

/// Frame flag: more frames of this message follow.
const MORE: u8 = 0x01;
/// Frame flag: the size field is 8 bytes (big-endian) instead of 1.
const LONG: u8 = 0x02;
/// Frame flag: the frame is a command, not a message part.
const COMMAND: u8 = 0x04;

/// Socket types a DEALER may talk to (rfc.zeromq.org/spec/28).
const DEALER_PEERS: [&str; 3] = ["ROUTER", "DEALER", "REP"];

/// This client's greeting: ZMTP 3.0, the NULL mechanism, not as server (NULL has no roles).
///
/// It says 3.0 rather than 3.1 because 3.1 adds commands (PING, SUBSCRIBE, ...) this client
/// does not implement; a 3.1 peer then speaks 3.0 to it, as the spec requires.
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3;
    g[11] = 0;
    g[12..16].copy_from_slice(b"NULL");
    g
}

/// Appends a command frame with `body`.
fn command(body: &[u8], out: &mut Vec<u8>) {
    match u8::try_from(body.len()) {
        Ok(n) => out.extend_from_slice(&[COMMAND, n]),
        Err(_) => {
            out.push(COMMAND | LONG);
            out.extend_from_slice(&(body.len() as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(body);
}

/// Appends the READY command announcing `socket_type` (no identity: the ROUTER makes one up,
/// so two bench connections can never collide on a name).
pub fn encode_ready(socket_type: &str, out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(32);
    body.push(5);
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&(socket_type.len() as u32).to_be_bytes());
    body.extend_from_slice(socket_type.as_bytes());
    command(&body, out);
}

/// The header of a single-part message frame of `len` bytes: its bytes and how many of them
/// are used (2 for a short frame, 9 for a long one).
pub fn message_header(len: u64) -> ([u8; 9], usize) {
    let mut h = [0u8; 9];
    match u8::try_from(len) {
        Ok(n) => {
            h[1] = n;
            (h, 2)
        }
        Err(_) => {
            h[0] = LONG;
            h[1..].copy_from_slice(&len.to_be_bytes());
            (h, 9)
        }
    }
}

/// What the server's bytes mean, one step at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    /// The server's READY arrived (after a valid greeting): messages may flow.
    Ready,
    /// The server sent an ERROR command with this reason; it closes next.
    Error(String),
    /// A single-part message begins; its body is this long.
    Start(u64),
    /// Some bytes of the current message, in order.
    Chunk(&'a [u8]),
    /// The current message is complete.
    End,
}

/// Bytes that are not a ZMTP 3 NULL-mechanism ROUTER this client can talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZmtpError {
    /// The greeting or READY is wrong: not ZMTP, an old version, another mechanism, a socket
    /// type a DEALER cannot talk to.
    Handshake(String),
    /// Framing after the handshake is wrong, or uses what this client does not support.
    Protocol(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Greeting {
        bytes: [u8; GREETING_LEN],
        have: usize,
    },
    /// The flags byte and size of the next frame.
    Head {
        flags: u8,
        size: [u8; 8],
        have: usize,
    },
    /// A command body being collected (into [`Reader::command`]).
    Command { left: usize },
    /// A message body being streamed.
    Body { left: u64 },
    /// A message body is complete; [`Piece::End`] is next.
    Ending,
}

/// Streaming reader of what a ZMTP server sends to this DEALER.
#[derive(Debug, Clone)]
pub struct Reader {
    state: State,
    ready: bool,
    /// The command body being collected; kept between commands so it is allocated once.
    command: Vec<u8>,
}

impl Default for Reader {
    fn default() -> Self {
        Reader::new()
    }
}

impl Reader {
    /// A reader expecting the server's greeting.
    pub fn new() -> Reader {
        Reader {
            state: State::Greeting {
                bytes: [0; GREETING_LEN],
                have: 0,
            },
            ready: false,
            command: Vec::new(),
        }
    }

    /// Whether the server's READY has arrived.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    fn head() -> State {
        State::Head {
            flags: 0,
            size: [0; 8],
            have: 0,
        }
    }

    /// Decodes from the front of `input`: the bytes used and the next piece, or `None` when
    /// `input` is used up first. Call again with the rest until it returns `None`.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Piece<'a>>), ZmtpError> {
        let mut used = 0;
        loop {
            match &mut self.state {
                State::Greeting { bytes, have } => {
                    let n = (GREETING_LEN - *have).min(input.len() - used);
                    bytes[*have..*have + n].copy_from_slice(&input[used..used + n]);
                    *have += n;
                    used += n;
                    if *have < GREETING_LEN {
                        return Ok((used, None));
                    }
                    check_greeting(bytes)?;
                    self.state = Reader::head();
                }
                State::Head { flags, size, have } => {
                    if used == input.len() {
                        return Ok((used, None));
                    }
                    if *have == 0 {
                        *flags = input[used];
                        used += 1;
                        *have = 1;
                        if *flags & !(MORE | LONG | COMMAND) != 0 {
                            return Err(ZmtpError::Protocol(format!(
                                "frame flags {:#04x} use reserved bits",
                                *flags
                            )));
                        }
                        continue;
                    }
                    let need = if *flags & LONG != 0 { 8 } else { 1 };
                    let n = (need - (*have - 1)).min(input.len() - used);
                    size[*have - 1..*have - 1 + n].copy_from_slice(&input[used..used + n]);
                    *have += n;
                    used += n;
                    if *have - 1 < need {
                        return Ok((used, None));
                    }
                    let len = if need == 8 {
                        u64::from_be_bytes(*size)
                    } else {
                        u64::from(size[0])
                    };
                    let flags = *flags;
                    if flags & COMMAND != 0 {
                        if len > MAX_COMMAND as u64 {
                            return Err(ZmtpError::Protocol(format!(
                                "a command of {len} bytes (this client reads up to {MAX_COMMAND})"
                            )));
                        }
                        self.command.clear();
                        self.state = State::Command { left: len as usize };
                        continue;
                    }
                    if !self.ready {
                        return Err(ZmtpError::Handshake(
                            "a message arrived before the server's READY".to_owned(),
                        ));
                    }
                    if flags & MORE != 0 {
                        return Err(ZmtpError::Protocol(
                            "a multipart message: the echo should be single-part, as sent"
                                .to_owned(),
                        ));
                    }
                    if len >= 1 << 63 {
                        return Err(ZmtpError::Protocol(format!(
                            "a frame size of {len} (the spec allows less than 2^63)"
                        )));
                    }
                    self.state = if len == 0 {
                        State::Ending
                    } else {
                        State::Body { left: len }
                    };
                    return Ok((used, Some(Piece::Start(len))));
                }
                State::Command { left } => {
                    let n = (*left).min(input.len() - used);
                    self.command.extend_from_slice(&input[used..used + n]);
                    *left -= n;
                    used += n;
                    if *left > 0 {
                        return Ok((used, None));
                    }
                    self.state = Reader::head();
                    if let Some(piece) = self.on_command()? {
                        return Ok((used, Some(piece)));
                    }
                }
                State::Body { left } => {
                    if used == input.len() {
                        return Ok((used, None));
                    }
                    // `left` bounds the slice, so the cast cannot truncate what matters.
                    let n = ((input.len() - used) as u64).min(*left) as usize;
                    *left -= n as u64;
                    if *left == 0 {
                        self.state = State::Ending;
                    }
                    return Ok((used + n, Some(Piece::Chunk(&input[used..used + n]))));
                }
                State::Ending => {
                    self.state = Reader::head();
                    return Ok((used, Some(Piece::End)));
                }
            }
        }
    }

    /// Acts on the command just collected: READY (once), ERROR, or one to ignore.
    fn on_command<'a>(&mut self) -> Result<Option<Piece<'a>>, ZmtpError> {
        let body = &self.command;
        let name_len = *body
            .first()
            .ok_or_else(|| ZmtpError::Protocol("an empty command".to_owned()))?
            as usize;
        let name = body
            .get(1..1 + name_len)
            .ok_or_else(|| ZmtpError::Protocol("a command name longer than its frame".into()))?;
        let data = 1 + name_len;
        match name {
            b"READY" => {
                if self.ready {
                    return Err(ZmtpError::Protocol("a second READY".to_owned()));
                }
                let socket_type = socket_type(&body[data..])?;
                if !DEALER_PEERS.contains(&socket_type.as_str()) {
                    return Err(ZmtpError::Handshake(format!(
                        "the server is a {socket_type} socket; a DEALER talks to {}",
                        DEALER_PEERS.join(", ")
                    )));
                }
                self.ready = true;
                Ok(Some(Piece::Ready))
            }
            b"ERROR" => {
                let len = body.get(data).copied().unwrap_or(0) as usize;
                let end = (data + 1 + len).min(body.len());
                // ERROR reasons are ASCII; a server that breaks that gets its bytes shown
                // lossily rather than a failure of its own.
                let reason = String::from_utf8_lossy(&body[(data + 1).min(end)..end]);
                Ok(Some(Piece::Error(reason.into_owned())))
            }
            // Anything else (PING from a 3.1 server that ignored our 3.0, SUBSCRIBE, ...) has
            // no bearing on an echo; skipping it is what the spec asks of unknown commands.
            _ if self.ready => Ok(None),
            _ => Err(ZmtpError::Handshake(format!(
                "expected READY, got the command {:?}",
                String::from_utf8_lossy(name)
            ))),
        }
    }
}

/// Checks the server's greeting: the ZMTP signature, version 3 or later, the NULL mechanism.
fn check_greeting(g: &[u8; GREETING_LEN]) -> Result<(), ZmtpError> {
    if g[0] != 0xff || g[9] != 0x7f {
        return Err(ZmtpError::Handshake(
            "the server's first bytes are not a ZMTP greeting".to_owned(),
        ));
    }
    if g[10] < 3 {
        return Err(ZmtpError::Handshake(format!(
            "the server speaks ZMTP {}.{}; this client speaks 3.x",
            g[10], g[11]
        )));
    }
    let mechanism = &g[12..32];
    let name_end = mechanism.iter().position(|&b| b == 0).unwrap_or(20);
    if &mechanism[..name_end] != b"NULL" {
        return Err(ZmtpError::Handshake(format!(
            "the server wants the {:?} security mechanism; this client has only NULL",
            String::from_utf8_lossy(&mechanism[..name_end])
        )));
    }
    Ok(())
}

/// Finds the Socket-Type property in READY's metadata.
fn socket_type(mut meta: &[u8]) -> Result<String, ZmtpError> {
    let bad = || ZmtpError::Handshake("READY's metadata is cut short".to_owned());
    while !meta.is_empty() {
        let name_len = meta[0] as usize;
        let name = meta.get(1..1 + name_len).ok_or_else(bad)?;
        let size: [u8; 4] = meta
            .get(1 + name_len..5 + name_len)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(bad)?;
        let value_len = u32::from_be_bytes(size) as usize;
        let value = meta
            .get(5 + name_len..5 + name_len + value_len)
            .ok_or_else(bad)?;
        // Property names are case-insensitive (spec 23, "READY").
        if name.eq_ignore_ascii_case(b"Socket-Type") {
            return Ok(String::from_utf8_lossy(value).into_owned());
        }
        meta = &meta[5 + name_len + value_len..];
    }
    Err(ZmtpError::Handshake(
        "READY has no Socket-Type property".to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a ROUTER sends: its greeting (version 3.1), READY, then `messages` as frames.
    fn router_bytes(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = greeting().to_vec();
        out[11] = 1;
        let mut body = vec![5];
        body.extend_from_slice(b"READY");
        // Property names are case-insensitive; libzmq sends "Socket-Type", others may not.
        body.push(11);
        body.extend_from_slice(b"socket-type");
        body.extend_from_slice(&6u32.to_be_bytes());
        body.extend_from_slice(b"ROUTER");
        body.push(8);
        body.extend_from_slice(b"Identity");
        body.extend_from_slice(&0u32.to_be_bytes());
        command(&body, &mut out);
        for m in messages {
            let (h, n) = message_header(m.len() as u64);
            out.extend_from_slice(&h[..n]);
            out.extend_from_slice(m);
        }
        out
    }

    /// Feeds `input` in pieces of `step` bytes; returns the pieces as text.
    fn decode(input: &[u8], step: usize) -> Result<Vec<String>, ZmtpError> {
        let mut r = Reader::new();
        let mut pieces: Vec<String> = Vec::new();
        for part in input.chunks(step) {
            let mut at = 0;
            loop {
                let (n, piece) = r.next(&part[at..])?;
                at += n;
                match piece {
                    None => break,
                    Some(Piece::Chunk(b)) => {
                        // Chunks split with the input; join them to compare.
                        match pieces.last_mut() {
                            Some(last) if last.starts_with("Chunk") => {
                                last.push_str(&String::from_utf8_lossy(b))
                            }
                            _ => pieces.push(format!("Chunk{}", String::from_utf8_lossy(b))),
                        }
                    }
                    Some(p) => pieces.push(format!("{p:?}")),
                }
            }
            assert_eq!(at, part.len(), "the reader uses all it is given");
        }
        Ok(pieces)
    }

    #[test]
    fn greeting_and_ready_bytes() {
        let g = greeting();
        assert_eq!(&g[..12], &[0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0]);
        assert_eq!(&g[12..17], b"NULL\0");
        assert!(g[32..].iter().all(|&b| b == 0));
        let mut out = Vec::new();
        encode_ready("DEALER", &mut out);
        let mut want = vec![0x04, 28, 5];
        want.extend_from_slice(b"READY\x0bSocket-Type\0\0\0\x06DEALER");
        assert_eq!(out, want);
        assert_eq!(message_header(255), ([0, 255, 0, 0, 0, 0, 0, 0, 0], 2));
        assert_eq!(message_header(256), ([2, 0, 0, 0, 0, 0, 0, 1, 0], 9));
    }

    #[test]
    fn reads_a_router_whole_and_at_every_split() {
        let long = vec![b'x'; 300];
        let input = router_bytes(&[b"hi", b"", &long]);
        let want = [
            "Ready".to_owned(),
            "Start(2)".to_owned(),
            "Chunkhi".to_owned(),
            "End".to_owned(),
            "Start(0)".to_owned(),
            "End".to_owned(),
            "Start(300)".to_owned(),
            format!("Chunk{}", "x".repeat(300)),
            "End".to_owned(),
        ];
        for step in [input.len(), 1, 2, 7, 63, 64, 65] {
            assert_eq!(decode(&input, step).unwrap(), want, "step {step}");
        }
    }

    #[test]
    fn refusals_and_bad_servers() {
        let mut err = greeting().to_vec();
        let mut body = vec![5];
        body.extend_from_slice(b"ERROR");
        body.push(6);
        body.extend_from_slice(b"denied");
        command(&body, &mut err);
        assert_eq!(decode(&err, 1).unwrap(), ["Error(\"denied\")"]);

        let mut http = b"HTTP/1.1 400 Bad Request\r\n".to_vec();
        http.resize(64, b' ');
        assert!(matches!(decode(&http, 64), Err(ZmtpError::Handshake(_))));

        let mut plain = greeting();
        plain[12..17].copy_from_slice(b"PLAIN");
        let e = decode(&plain, 64).unwrap_err();
        assert!(format!("{e:?}").contains("PLAIN"), "{e:?}");

        let mut pubsock = router_bytes(&[]);
        let at = pubsock.windows(6).position(|w| w == b"ROUTER").unwrap();
        pubsock[at..at + 6].copy_from_slice(b"PUB\0\0\0");
        pubsock[at - 1] = 3;
        // Shorten the value size to 3 and drop the 3 padding bytes again.
        pubsock.drain(at + 3..at + 6);
        pubsock[65] -= 3;
        let e = decode(&pubsock, 5).unwrap_err();
        assert!(format!("{e:?}").contains("PUB"), "{e:?}");

        let mut multi = router_bytes(&[]);
        multi.extend_from_slice(&[MORE, 1, b'a', 0, 1, b'b']);
        assert!(matches!(decode(&multi, 3), Err(ZmtpError::Protocol(_))));

        let mut early = greeting().to_vec();
        early.extend_from_slice(&[0, 1, b'a']);
        assert!(matches!(decode(&early, 1), Err(ZmtpError::Handshake(_))));

        let mut huge = router_bytes(&[]);
        huge.push(COMMAND | LONG);
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(decode(&huge, 9), Err(ZmtpError::Protocol(_))));
    }

    #[test]
    fn ignores_other_commands_after_ready() {
        let mut input = router_bytes(&[]);
        let mut ping = vec![4];
        ping.extend_from_slice(b"PING\0\x0a");
        command(&ping, &mut input);
        let (h, n) = message_header(1);
        input.extend_from_slice(&h[..n]);
        input.push(b'z');
        assert_eq!(
            decode(&input, 1).unwrap(),
            ["Ready", "Start(1)", "Chunkz", "End"]
        );
    }
}
