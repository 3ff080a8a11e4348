//! A WebSocket connection, server side, as an [`Upgraded`] protocol: frames in, whole messages to
//! a [`WsHandler`], frames out. Sans-IO: the driver lends its buffers, as for HTTP.
//!
//! Payloads are taken as they arrive: a frame's bytes are unmasked and moved to the message
//! being assembled read by read, so the input never holds more than one read, whatever the
//! frame's size; the message is limited by [`WsConfig::max_message`] (close 1009 past it). Text
//! is checked as UTF-8 as it comes, across fragments, and fails at the first bad byte (close
//! 1007). Pings are answered with pongs, closes with a close echoing the code; any breach of
//! RFC 6455 is answered with a close 1002 and the end of the connection. An idle connection is
//! pinged once after the idle timeout, and closed (1001) if nothing comes back before the next.
//!
//! With permessage-deflate agreed ([`WsSession::with_deflate`]), a message whose first frame
//! has RSV1 set is inflated as its frames arrive, the limit applying to the inflated bytes
//! (close 1009 as soon as they pass it, the buffer never more than one byte past it), and
//! messages sent through the [`Outbox`] are compressed (see [`super::deflate`]).

use std::time::Instant;

use super::deflate::{Agreed, Compressor, Decompressor, DeflateConfig};
use super::frame::{self, parse_header, unmask, valid_close_code, Header, Opcode, Violation};
use crate::http::Timeouts;
use crate::upgrade::{Flow, Upgraded};

/// Largest single-frame message answered straight from the input (the driver's input buffer
/// grows to hold it); longer frames are taken read by read.
const WHOLE_FRAME_MAX: u64 = 64 * 1024;

/// Limits of a WebSocket connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WsConfig {
    /// Largest message (the sum of its fragments, inflated if it is compressed), in bytes;
    /// past it the connection is closed with 1009.
    pub max_message: usize,
    /// permessage-deflate: whether it is negotiated, and its limits.
    pub deflate: DeflateConfig,
}

impl Default for WsConfig {
    fn default() -> Self {
        WsConfig {
            max_message: 16 * 1024 * 1024,
            deflate: DeflateConfig::default(),
        }
    }
}

/// A whole message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// A text message (valid UTF-8).
    Text(&'a str),
    /// A binary message.
    Binary(&'a [u8]),
}

/// What a handler sends with: frames appended to the connection's output.
pub struct Outbox<'a> {
    out: &'a mut Vec<u8>,
    close: &'a mut Option<u16>,
    /// The message just received, if it lies alone in the input and the output is empty: an
    /// echo of it is then left where it is (see [`WsSession::receive_in_place`]).
    candidate: Option<(Opcode, &'a [u8])>,
    /// `candidate` was echoed and not yet written.
    echoed: bool,
    /// Compresses what is sent, when permessage-deflate was agreed.
    deflate: Option<&'a mut Compressor>,
}

impl<'a> Outbox<'a> {
    fn new(
        out: &'a mut Vec<u8>,
        close: &'a mut Option<u16>,
        deflate: Option<&'a mut Compressor>,
    ) -> Self {
        Outbox {
            out,
            close,
            candidate: None,
            echoed: false,
            deflate,
        }
    }

    /// Writes a message, compressed if that was agreed and it is long enough.
    fn write(&mut self, opcode: Opcode, data: &[u8]) {
        self.settle();
        match self.deflate.as_deref_mut() {
            Some(deflate) => deflate.write_message(self.out, opcode, data),
            None => frame::write_frame(self.out, opcode, data),
        }
    }

    /// Writes an echo left in place, so that what follows comes after it.
    fn settle(&mut self) {
        if let (true, Some((opcode, data))) = (self.echoed, self.candidate) {
            frame::write_frame(self.out, opcode, data);
            self.echoed = false;
        }
    }

    /// Sends a text message.
    pub fn text(&mut self, text: &str) {
        self.write(Opcode::Text, text.as_bytes());
    }

    /// Sends a binary message.
    pub fn binary(&mut self, data: &[u8]) {
        self.write(Opcode::Binary, data);
    }

    /// Sends `message` back as it came.
    pub fn echo(&mut self, message: Message<'_>) {
        let bytes = match message {
            Message::Text(t) => t.as_bytes(),
            Message::Binary(b) => b,
        };
        if let Some((_, data)) = self.candidate {
            // The message itself, first out, and sent as it came (not compressed): it need
            // not be copied.
            let plain = self
                .deflate
                .as_ref()
                .is_none_or(|d| !d.compresses(bytes.len()));
            if plain && !self.echoed && self.out.is_empty() && std::ptr::eq(data, bytes) {
                self.echoed = true;
                return;
            }
        }
        match message {
            Message::Text(t) => self.text(t),
            Message::Binary(b) => self.binary(b),
        }
    }

    /// Starts the closing handshake with `code` and `reason`; the connection ends once it is
    /// sent.
    pub fn close(&mut self, code: u16, reason: &str) {
        self.settle();
        if self.close.is_none() {
            frame::write_close(self.out, code, reason);
            *self.close = Some(code);
        }
    }
}

/// The application side of a WebSocket connection.
pub trait WsHandler: Send {
    /// A whole message arrived.
    fn message(&mut self, message: Message<'_>, out: &mut Outbox<'_>);
    /// The connection is ending; `code` is the peer's close code, if it sent one.
    fn closed(&mut self, code: Option<u16>) {
        let _ = code;
    }
}

/// Echoes every message: `/ws/echo`, and the Autobahn test suite's server.
#[derive(Debug, Default)]
pub struct EchoHandler;

impl WsHandler for EchoHandler {
    fn message(&mut self, message: Message<'_>, out: &mut Outbox<'_>) {
        out.echo(message);
    }
}

/// The frame being read.
#[derive(Debug, Clone, Copy)]
struct Current {
    header: Header,
    got: u64,
}

/// A WebSocket connection serving `H`.
pub struct WsSession<H: WsHandler> {
    handler: H,
    config: WsConfig,
    current: Option<Current>,
    /// The data message being assembled (its first frame's opcode), if one is.
    message: Option<Opcode>,
    buf: Vec<u8>,
    /// Bytes of `buf` known to be valid UTF-8 (text messages).
    valid: usize,
    /// A control frame's payload, while it arrives.
    control: Vec<u8>,
    /// We sent a close (with this code): the connection ends.
    closed: Option<u16>,
    /// An idle ping is out and nothing has come since.
    pinged: bool,
    /// The handler echoed the frame that fills the input (its opcode, its header's length):
    /// [`WsSession::receive_in_place`] sends it from there.
    in_place: Option<(Opcode, usize)>,
    /// The handler was told the connection is ending ([`WsHandler::closed`], once).
    ended: bool,
    /// permessage-deflate's sending side, if it was agreed.
    compressor: Option<Compressor>,
    /// permessage-deflate's receiving side, if it was agreed.
    decompressor: Option<Decompressor>,
    /// The message being assembled is compressed (its first frame had RSV1).
    compressed: bool,
}

impl<H: WsHandler> WsSession<H> {
    /// A connection just upgraded.
    pub fn new(handler: H, config: WsConfig) -> Self {
        WsSession {
            handler,
            config,
            current: None,
            message: None,
            buf: Vec::new(),
            valid: 0,
            control: Vec::new(),
            closed: None,
            pinged: false,
            in_place: None,
            ended: false,
            compressor: None,
            decompressor: None,
            compressed: false,
        }
    }

    /// The session with permessage-deflate, if the handshake agreed it ([`super::deflate`]):
    /// compressed messages are taken, and what the handler sends is compressed.
    pub fn with_deflate(mut self, agreed: Option<Agreed>) -> Self {
        self.set_deflate(agreed);
        self
    }

    /// [`WsSession::with_deflate`] for a session made before its handshake was read (the
    /// message engine's): call it before the first frame.
    pub fn set_deflate(&mut self, agreed: Option<Agreed>) {
        self.compressor = agreed.map(Compressor::new);
        self.decompressor = agreed.map(Decompressor::new);
    }

    /// The handler, for a driver that collects what it was given (the message engine).
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    /// Starts the closing handshake from the server's side (shutting down, a refusal): a close
    /// with `code` and `reason` (cut to fit a close frame) is appended to `output`, and nothing
    /// the peer sends after it is taken. `false` if a close was already sent.
    pub fn close(&mut self, code: u16, reason: &str, output: &mut Vec<u8>) -> bool {
        if self.closed.is_some() {
            return false;
        }
        frame::write_close(output, code, reason);
        self.closed = Some(code);
        true
    }

    /// Tells the handler the connection is ending, the first time only (a close that was
    /// answered, a breach, the peer's leaving and a timeout may follow one another).
    fn ended(&mut self, code: Option<u16>) {
        if !std::mem::replace(&mut self.ended, true) {
            self.handler.closed(code);
        }
    }

    /// Whether a close was sent: the connection is ending.
    pub fn is_closing(&self) -> bool {
        self.closed.is_some()
    }

    /// Ends the connection for a breach: a close with its code, then the end.
    fn fail(&mut self, v: Violation, output: &mut Vec<u8>) -> Flow {
        if self.closed.is_none() {
            frame::write_close(output, v.code, v.why);
            self.closed = Some(v.code);
        }
        self.ended(None);
        Flow::Close
    }

    /// Takes `data` (unmasked) of the current frame.
    fn take(&mut self, header: Header, data: &[u8]) -> Result<(), Violation> {
        if header.opcode.is_control() {
            self.control.extend_from_slice(data);
            return Ok(());
        }
        if self.compressed {
            if let Some(inflater) = self.decompressor.as_mut() {
                inflater.inflate(data, &mut self.buf, self.config.max_message)?;
            }
        } else if self.buf.len() + data.len() > self.config.max_message {
            return Err(Violation {
                code: 1009,
                why: "message too big",
            });
        } else {
            self.buf.extend_from_slice(data);
        }
        if self.message == Some(Opcode::Text) {
            match std::str::from_utf8(&self.buf[self.valid..]) {
                Ok(_) => self.valid = self.buf.len(),
                Err(e) if e.error_len().is_some() => {
                    return Err(Violation {
                        code: 1007,
                        why: "text that is not UTF-8",
                    })
                }
                Err(e) => self.valid += e.valid_up_to(),
            }
        }
        Ok(())
    }

    /// A frame's header is in: checks it against the message in progress.
    fn begin(&mut self, header: Header) -> Result<(), Violation> {
        let breach = |why| Err(Violation { code: 1002, why });
        if header.mask.is_none() {
            return breach("an unmasked frame from a client");
        }
        // RSV1 marks a compressed message: only with permessage-deflate agreed, only on a
        // message's first frame (RFC 7692 §6).
        let first = matches!(header.opcode, Opcode::Text | Opcode::Binary);
        if header.rsv1 && !(first && self.decompressor.is_some()) {
            return breach("reserved bits set");
        }
        match header.opcode {
            Opcode::Text | Opcode::Binary if self.message.is_some() => {
                breach("a new message before the last one ended")
            }
            Opcode::Text | Opcode::Binary => {
                if header.len > self.config.max_message as u64 {
                    return Err(Violation {
                        code: 1009,
                        why: "message too big",
                    });
                }
                self.message = Some(header.opcode);
                self.compressed = header.rsv1;
                self.buf.clear();
                self.valid = 0;
                Ok(())
            }
            Opcode::Continuation if self.message.is_none() => {
                breach("a continuation with no message to continue")
            }
            Opcode::Continuation => Ok(()),
            _ => {
                self.control.clear();
                Ok(())
            }
        }
    }

    /// A frame is complete: acts on it. `Ok(false)`: the connection ends (a close was
    /// answered).
    fn end(&mut self, header: Header, output: &mut Vec<u8>) -> Result<bool, Violation> {
        match header.opcode {
            Opcode::Ping => {
                let payload = std::mem::take(&mut self.control);
                if self.closed.is_none() {
                    frame::write_frame(output, Opcode::Pong, &payload);
                }
                self.control = payload;
            }
            Opcode::Pong => {}
            Opcode::Close => {
                let payload = &self.control;
                let code = match payload.len() {
                    0 => None,
                    1 => {
                        return Err(Violation {
                            code: 1002,
                            why: "a close frame of one byte",
                        })
                    }
                    _ => Some(u16::from_be_bytes([payload[0], payload[1]])),
                };
                if code.is_some_and(|c| !valid_close_code(c)) {
                    return Err(Violation {
                        code: 1002,
                        why: "a close code a peer may not send",
                    });
                }
                if payload.len() > 2 && std::str::from_utf8(&payload[2..]).is_err() {
                    return Err(Violation {
                        code: 1007,
                        why: "a close reason that is not UTF-8",
                    });
                }
                if self.closed.is_none() {
                    match code {
                        Some(code) => frame::write_close(output, code, ""),
                        None => frame::write_frame(output, Opcode::Close, &[]),
                    }
                    self.closed = Some(code.unwrap_or(1005));
                }
                self.ended(code);
                return Ok(false);
            }
            Opcode::Text | Opcode::Binary | Opcode::Continuation if header.fin => {
                if std::mem::take(&mut self.compressed) {
                    if let Some(inflater) = self.decompressor.as_mut() {
                        inflater.finish(&mut self.buf, self.config.max_message)?;
                    }
                }
                let kind = self.message.take();
                let buf = std::mem::take(&mut self.buf);
                let mut out = Outbox::new(output, &mut self.closed, self.compressor.as_mut());
                match kind {
                    Some(Opcode::Text) => {
                        let Ok(text) = std::str::from_utf8(&buf) else {
                            self.buf = buf;
                            return Err(Violation {
                                code: 1007,
                                why: "text that is not UTF-8",
                            });
                        };
                        self.handler.message(Message::Text(text), &mut out);
                    }
                    _ => self.handler.message(Message::Binary(&buf), &mut out),
                }
                // Keep a modest buffer for the next message; let a big one go.
                if buf.capacity() <= 64 * 1024 {
                    self.buf = buf;
                    self.buf.clear();
                }
                if self.closed.is_some() {
                    return Ok(false);
                }
            }
            _ => {}
        }
        Ok(true)
    }

    fn receive_frames(
        &mut self,
        input: &mut [u8],
        output: &mut Vec<u8>,
        in_place: bool,
    ) -> Result<(usize, bool), Violation> {
        let mut at = 0;
        loop {
            let current = match self.current {
                Some(c) => c,
                None => {
                    let Some(header) = parse_header(&input[at..])? else {
                        return Ok((at, true));
                    };
                    // A whole message in one small frame (the everyday case) is answered from
                    // the input, not copied into a message first. A binary one waits there
                    // until all of it is in (the driver reads more behind it); a text one only
                    // if it is all in already, so that bad UTF-8 in its first part still
                    // fails at once (read by read, below).
                    let end = at + header.header_len + header.len as usize;
                    let whole = header.fin
                        && !header.rsv1
                        && self.message.is_none()
                        && header.len <= WHOLE_FRAME_MAX
                        && (header.opcode == Opcode::Binary
                            || (header.opcode == Opcode::Text && end <= input.len()));
                    if whole {
                        if end > input.len() {
                            return Ok((at, true));
                        }
                        self.begin(header)?;
                        self.message = None;
                        self.pinged = false;
                        // Alone in the input, and nothing to send before it: an echo may stay
                        // where it is.
                        let alone = in_place && at == 0 && end == input.len() && output.is_empty();
                        let data = &mut input[at + header.header_len..end];
                        if let Some(key) = header.mask {
                            unmask(data, key, 0);
                        }
                        let data = &*data;
                        at = end;
                        let mut out =
                            Outbox::new(output, &mut self.closed, self.compressor.as_mut());
                        out.candidate = alone.then_some((header.opcode, data));
                        if header.opcode == Opcode::Text {
                            let text = std::str::from_utf8(data).map_err(|_| Violation {
                                code: 1007,
                                why: "text that is not UTF-8",
                            })?;
                            self.handler.message(Message::Text(text), &mut out);
                        } else {
                            self.handler.message(Message::Binary(data), &mut out);
                        }
                        if out.echoed {
                            self.in_place = Some((header.opcode, header.header_len));
                        }
                        if self.closed.is_some() {
                            return Ok((at, false));
                        }
                        continue;
                    }
                    self.begin(header)?;
                    at += header.header_len;
                    self.pinged = false;
                    let c = Current { header, got: 0 };
                    self.current = Some(c);
                    c
                }
            };
            let left = (current.header.len - current.got) as usize;
            let n = left.min(input.len() - at);
            let data = &mut input[at..at + n];
            if let Some(key) = current.header.mask {
                unmask(data, key, current.got as usize);
            }
            self.take(current.header, data)?;
            at += n;
            let got = current.got + n as u64;
            if got < current.header.len {
                self.current = Some(Current { got, ..current });
                return Ok((at, true));
            }
            self.current = None;
            if !self.end(current.header, output)? {
                return Ok((at, false));
            }
        }
    }
}

impl<H: WsHandler> WsSession<H> {
    /// [`Upgraded::receive`], and when `in_place` (the output is empty) a message the handler
    /// echoes whole is sent from the input itself: its header is rewritten in front of the
    /// unmasked payload, the buffers are swapped, and the bytes to skip are returned.
    fn receive_with(
        &mut self,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        in_place: bool,
    ) -> (Flow, usize) {
        if self.closed.is_some() {
            input.clear();
            return (Flow::Close, 0);
        }
        match self.receive_frames(input, output, in_place) {
            Ok((used, going)) => {
                let flow = if going { Flow::Continue } else { Flow::Close };
                if let Some((opcode, header_len)) = self.in_place.take() {
                    // The frame was the whole input: the server's header (never longer than
                    // the client's, which has four bytes of mask more) goes right in front of
                    // the payload.
                    let len = (input.len() - header_len) as u64;
                    let (head, n) = frame::header_bytes(true, opcode, len);
                    let skip = header_len - n;
                    input[skip..header_len].copy_from_slice(&head[..n]);
                    std::mem::swap(input, output);
                    return (flow, skip);
                }
                input.drain(..used);
                (flow, 0)
            }
            Err(v) => {
                input.clear();
                (self.fail(v, output), 0)
            }
        }
    }
}

impl<H: WsHandler> Upgraded for WsSession<H> {
    fn receive(&mut self, input: &mut Vec<u8>, output: &mut Vec<u8>) -> Flow {
        self.receive_with(input, output, false).0
    }

    fn receive_in_place(&mut self, input: &mut Vec<u8>, output: &mut Vec<u8>) -> (Flow, usize) {
        let empty = output.is_empty();
        self.receive_with(input, output, empty)
    }

    fn peer_closed(&mut self, _output: &mut Vec<u8>) {
        // The TCP connection ended without a closing handshake (1006 in the peer's terms,
        // which is never sent).
        self.ended(None);
    }

    /// Idle: the idle timeout. After our close: the write timeout, for the peer to answer it
    /// (RFC 6455 §7.1.1: the server closes the TCP connection if it does not).
    fn poll_timeout(&mut self, now: Instant, t: &Timeouts) -> Option<Instant> {
        match self.closed {
            Some(_) => Some(now + t.write.min(t.idle)),
            None => Some(now + t.idle),
        }
    }

    /// The server is shutting down: a close with 1001 ("going away", RFC 6455 §7.4.1), the
    /// handler told (with 1001, as an application hears a peer's close), and the connection
    /// kept for the peer's answering close, which ends it.
    fn going_away(&mut self, output: &mut Vec<u8>) -> Flow {
        if self.close(1001, "server shutting down", output) {
            self.ended(Some(1001));
        }
        Flow::Continue
    }

    fn handle_timeout(&mut self, _now: Instant, output: &mut Vec<u8>) -> Flow {
        if self.closed.is_some() {
            return Flow::Close;
        }
        if !self.pinged {
            // Idle: ask whether the peer is still there.
            frame::write_frame(output, Opcode::Ping, b"berth");
            self.pinged = true;
            return Flow::Continue;
        }
        frame::write_close(output, 1001, "idle");
        self.closed = Some(1001);
        self.ended(None);
        Flow::Close
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client frame: masked with a fixed key.
    pub(super) fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        masked(fin, false, opcode, payload)
    }

    /// A client frame with RSV1 as given (a compressed message's first frame), masked.
    pub(super) fn masked(fin: bool, rsv1: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let key = [1, 2, 3, 4];
        let mut out = vec![if fin { 0x80 } else { 0 } | if rsv1 { 0x40 } else { 0 } | opcode];
        match payload.len() {
            n @ 0..=125 => out.push(0x80 | n as u8),
            n @ 126..=0xFFFF => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i & 3]));
        out
    }

    fn session() -> WsSession<EchoHandler> {
        WsSession::new(EchoHandler, WsConfig::default())
    }

    /// Feeds `bytes` one at a time (the worst split), returning the output and the last flow.
    fn feed_bytewise(s: &mut WsSession<EchoHandler>, bytes: &[u8]) -> (Vec<u8>, Flow) {
        let (mut input, mut output, mut flow) = (Vec::new(), Vec::new(), Flow::Continue);
        for &b in bytes {
            input.push(b);
            flow = s.receive(&mut input, &mut output);
            if flow == Flow::Close {
                break;
            }
        }
        (output, flow)
    }

    #[test]
    fn fragments_split_anywhere_are_echoed_as_one_message() {
        let mut bytes = client_frame(false, 1, "héllo ".as_bytes());
        bytes.extend(client_frame(true, 9, b"ping!"));
        bytes.extend(client_frame(true, 0, "wörld".as_bytes()));
        let (out, flow) = feed_bytewise(&mut session(), &bytes);
        assert_eq!(flow, Flow::Continue);
        let mut want = Vec::new();
        frame::write_frame(&mut want, Opcode::Pong, b"ping!");
        frame::write_frame(&mut want, Opcode::Text, "héllo wörld".as_bytes());
        assert_eq!(out, want);
    }

    #[test]
    fn bad_utf8_fails_fast_across_fragments() {
        // 0xF4 0x90 can never start valid UTF-8: refused before the message ends.
        let bytes = client_frame(false, 1, &[b'a', 0xF4, 0x90]);
        let (out, flow) = feed_bytewise(&mut session(), &bytes);
        assert_eq!(flow, Flow::Close);
        assert_eq!(&out[2..4], &1007u16.to_be_bytes());
    }

    #[test]
    fn breaches_close_with_1002_and_a_close_is_answered_in_kind() {
        for bad in [
            client_frame(true, 0, b"x"),          // continuation of nothing
            client_frame(true, 8, &[0x03]),       // one-byte close
            client_frame(true, 8, &[0x03, 0xEC]), // close code 1004
            vec![0x81, 0x01, b'x'],               // unmasked
        ] {
            let (out, flow) = feed_bytewise(&mut session(), &bad);
            assert_eq!(flow, Flow::Close);
            assert_eq!(&out[2..4], &1002u16.to_be_bytes(), "{bad:?}");
        }
        let (out, flow) = feed_bytewise(
            &mut session(),
            &client_frame(true, 8, &[0x03, 0xE8, b'o', b'k']),
        );
        assert_eq!(flow, Flow::Close);
        assert_eq!(out, [0x88, 2, 0x03, 0xE8]);
    }

    #[test]
    fn an_idle_connection_is_pinged_then_closed_and_any_frame_resets_the_ping() {
        let mut s = session();
        let now = Instant::now();
        let mut out = Vec::new();
        assert_eq!(s.handle_timeout(now, &mut out), Flow::Continue);
        assert_eq!(out, [0x89, 5, b'b', b'e', b'r', b't', b'h']);
        // The pong comes back: the next idle period pings again rather than closing.
        let (_, flow) = feed_bytewise(&mut s, &client_frame(true, 0xA, b"berth"));
        assert_eq!(flow, Flow::Continue);
        out.clear();
        assert_eq!(s.handle_timeout(now, &mut out), Flow::Continue);
        assert_eq!(out[0], 0x89);
        out.clear();
        assert_eq!(s.handle_timeout(now, &mut out), Flow::Close);
        assert_eq!(&out[..4], &[0x88, 6, 0x03, 0xE9]);
    }

    /// Counts what a handler is told of the connection's end.
    #[derive(Default)]
    struct Ends(Vec<Option<u16>>);
    impl WsHandler for Ends {
        fn message(&mut self, _: Message<'_>, _: &mut Outbox<'_>) {}
        fn closed(&mut self, code: Option<u16>) {
            self.0.push(code);
        }
    }

    /// Issue 29: a drain says 1001 once, tells the handler once, waits for the peer's close,
    /// and whatever ends the connection after that is not told again.
    #[test]
    fn going_away_closes_with_1001_and_tells_the_handler_once() {
        let mut s = WsSession::new(Ends::default(), WsConfig::default());
        let mut out = Vec::new();
        assert_eq!(s.going_away(&mut out), Flow::Continue);
        assert_eq!(&out[..4], &[0x88, out[1], 0x03, 0xE9]);
        assert_eq!(&out[4..], b"server shutting down");
        out.clear();
        assert_eq!(s.going_away(&mut out), Flow::Continue);
        assert!(out.is_empty(), "a second drain says nothing");
        // The peer answers with its close: the connection ends.
        let mut input = client_frame(true, 8, &1001u16.to_be_bytes());
        assert_eq!(s.receive(&mut input, &mut out), Flow::Close);
        s.peer_closed(&mut out);
        assert_eq!(s.handler_mut().0, [Some(1001)]);
        assert!(out.is_empty());
    }

    #[test]
    fn a_message_over_the_limit_closes_with_1009() {
        let mut s = WsSession::new(
            EchoHandler,
            WsConfig {
                max_message: 10,
                ..WsConfig::default()
            },
        );
        let mut bytes = client_frame(false, 2, b"123456");
        bytes.extend(client_frame(true, 0, b"7890x"));
        let (out, flow) = feed_bytewise(&mut s, &bytes);
        assert_eq!(flow, Flow::Close);
        assert_eq!(&out[2..4], &1009u16.to_be_bytes());
    }

    /// Echoes a handler sends after (or instead of) the message it got.
    struct EchoThenText;
    impl WsHandler for EchoThenText {
        fn message(&mut self, message: Message<'_>, out: &mut Outbox<'_>) {
            out.echo(message);
            out.text("after");
        }
    }

    fn server_frame(opcode: Opcode, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame::write_frame(&mut out, opcode, payload);
        out
    }

    #[test]
    fn an_echo_of_a_frame_alone_in_the_input_is_sent_from_it_without_a_copy() {
        for len in [0, 5, 125, 126, 16 * 1024, 65_535, 65_536] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut input = client_frame(true, 0x2, &payload);
            let buffer = input.as_ptr();
            let mut output = Vec::with_capacity(64);
            let (flow, skip) = session().receive_in_place(&mut input, &mut output);
            assert_eq!(flow, Flow::Continue);
            // The input's own buffer, the server's frame in it from `skip` on.
            assert_eq!(output.as_ptr(), buffer, "{len}");
            assert_eq!(
                output[skip..],
                server_frame(Opcode::Binary, &payload)[..],
                "{len}"
            );
            assert!(input.is_empty());
        }
        // Text too, checked as UTF-8 first.
        let mut input = client_frame(true, 0x1, "héllo".as_bytes());
        let mut output = Vec::new();
        let (_, skip) = session().receive_in_place(&mut input, &mut output);
        assert_eq!(
            output[skip..],
            server_frame(Opcode::Text, "héllo".as_bytes())[..]
        );
        let mut input = client_frame(true, 0x1, b"\xff");
        let mut output = Vec::new();
        let (flow, skip) = session().receive_in_place(&mut input, &mut output);
        assert_eq!((flow, skip), (Flow::Close, 0));
        assert_eq!(
            (output[0], &output[2..4]),
            (0x88, &1007u16.to_be_bytes()[..])
        );
    }

    #[test]
    fn an_echo_that_cannot_stay_in_place_is_copied_in_order() {
        // Another frame behind it in the input: copied, both answered in order.
        let mut input = client_frame(true, 0x2, b"one");
        input.extend_from_slice(&client_frame(true, 0x2, b"two"));
        let mut output = Vec::new();
        let (_, skip) = session().receive_in_place(&mut input, &mut output);
        assert_eq!(skip, 0);
        let mut want = server_frame(Opcode::Binary, b"one");
        want.extend_from_slice(&server_frame(Opcode::Binary, b"two"));
        assert_eq!(output, want);
        // Output already waiting: copied behind it.
        let mut input = client_frame(true, 0x2, b"one");
        let mut output = b"before".to_vec();
        let (_, skip) = session().receive_in_place(&mut input, &mut output);
        assert_eq!(skip, 0);
        assert_eq!(output[..6], *b"before");
        assert_eq!(output[6..], server_frame(Opcode::Binary, b"one")[..]);
        // The handler sends more after the echo: the echo first.
        let mut s = WsSession::new(EchoThenText, WsConfig::default());
        let mut input = client_frame(true, 0x1, b"hi");
        let mut output = Vec::new();
        let (_, skip) = s.receive_in_place(&mut input, &mut output);
        assert_eq!(skip, 0);
        let mut want = server_frame(Opcode::Text, b"hi");
        want.extend_from_slice(&server_frame(Opcode::Text, b"after"));
        assert_eq!(output, want);
    }
}

/// permessage-deflate in the session (RFC 7692): the examples of §7.2.3, split at every byte,
/// context takeover either way, the limit on the inflated size, and RSV1's rules.
#[cfg(test)]
mod deflate_tests {
    use super::*;
    use crate::ws::deflate::negotiate;
    use zlib_rs::{Inflate, InflateFlush};

    /// A client frame with RSV1 as given, masked.
    fn frame(fin: bool, rsv1: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        super::tests::masked(fin, rsv1, opcode, payload)
    }

    fn agreed(offer: &str, config: DeflateConfig) -> Agreed {
        negotiate([offer.as_bytes()], &config).unwrap().0
    }

    fn session_with(offer: &str, config: WsConfig) -> WsSession<EchoHandler> {
        let a = agreed(offer, config.deflate);
        WsSession::new(EchoHandler, config).with_deflate(Some(a))
    }

    fn session(offer: &str) -> WsSession<EchoHandler> {
        session_with(offer, WsConfig::default())
    }

    /// The server's frames: (RSV1, opcode byte, payload), payloads inflated where RSV1 is set
    /// (with one inflater, as a client taking over the context would).
    fn server_frames(mut out: &[u8]) -> Vec<(bool, u8, Vec<u8>)> {
        let mut inflate = Inflate::new(false, 15);
        let mut frames = Vec::new();
        while !out.is_empty() {
            let h = frame::parse_header(out).unwrap().unwrap();
            let payload = &out[h.header_len..h.header_len + h.len as usize];
            let data = if h.rsv1 {
                let mut input = payload.to_vec();
                input.extend_from_slice(&[0, 0, 0xff, 0xff]);
                let mut plain = vec![0; 8 << 20];
                let before = inflate.total_out();
                inflate
                    .decompress(&input, &mut plain, InflateFlush::SyncFlush)
                    .unwrap();
                plain.truncate((inflate.total_out() - before) as usize);
                plain
            } else {
                payload.to_vec()
            };
            frames.push((h.rsv1, out[0] & 0x0F, data));
            out = &out[h.header_len + h.len as usize..];
        }
        frames
    }

    /// Feeds `bytes` whole, then again one byte at a time into a fresh session: both give the
    /// same output, which is returned with the last flow.
    fn run(make: impl Fn() -> WsSession<EchoHandler>, bytes: &[u8]) -> (Vec<u8>, Flow) {
        let mut s = make();
        let (mut input, mut whole) = (bytes.to_vec(), Vec::new());
        let flow = s.receive(&mut input, &mut whole);
        let mut s = make();
        let (mut input, mut split, mut split_flow) = (Vec::new(), Vec::new(), Flow::Continue);
        for &b in bytes {
            input.push(b);
            split_flow = s.receive(&mut input, &mut split);
            if split_flow == Flow::Close {
                break;
            }
        }
        assert_eq!(
            (&whole, flow),
            (&split, split_flow),
            "whole and split differ"
        );
        (whole, flow)
    }

    /// RFC 7692 §7.2.3.1: "Hello" in one compressed block.
    const HELLO: &[u8] = &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
    /// §7.2.3.2: the second "Hello", taken from the shared window.
    const HELLO_AGAIN: &[u8] = &[0xf2, 0x00, 0x11, 0x00, 0x00];

    #[test]
    fn the_rfcs_examples_inflate_whole_and_split_at_every_byte() {
        let text = |out: &[u8]| {
            server_frames(out)
                .into_iter()
                .map(|(_, op, d)| (op, String::from_utf8(d).unwrap()))
                .collect::<Vec<_>>()
        };
        let hello = || vec![(1, "Hello".to_owned())];
        for payload in [
            HELLO.to_vec(),
            // §7.2.3.3: a stored block.
            vec![
                0x00, 0x05, 0x00, 0xfa, 0xff, 0x48, 0x65, 0x6c, 0x6c, 0x6f, 0x00,
            ],
            // §7.2.3.4: BFINAL set.
            vec![0xf3, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00, 0x00],
            // §7.2.3.5: two blocks.
            vec![
                0xf2, 0x48, 0x05, 0x00, 0x00, 0x00, 0xff, 0xff, 0xca, 0xc9, 0xc9, 0x07, 0x00,
            ],
        ] {
            let (out, flow) = run(
                || session("permessage-deflate"),
                &frame(true, true, 1, &payload),
            );
            assert_eq!(flow, Flow::Continue);
            assert_eq!(text(&out), hello(), "{payload:02x?}");
        }
        // §7.2.3.1's message in three fragments: RSV1 on the first only.
        let mut bytes = frame(false, true, 1, &HELLO[..2]);
        bytes.extend(frame(true, false, 9, b"ping"));
        bytes.extend(frame(false, false, 0, &HELLO[2..5]));
        bytes.extend(frame(true, false, 0, &HELLO[5..]));
        let (out, _) = run(|| session("permessage-deflate"), &bytes);
        assert_eq!(
            text(&out),
            [(0xA, "ping".to_owned()), (1, "Hello".to_owned())]
        );
    }

    #[test]
    fn the_window_is_shared_across_messages_unless_the_client_gives_it_up() {
        let mut bytes = frame(true, true, 1, HELLO);
        bytes.extend(frame(true, true, 1, HELLO_AGAIN));
        let (out, flow) = run(|| session("permessage-deflate"), &bytes);
        assert_eq!(flow, Flow::Continue);
        assert_eq!(server_frames(&out).len(), 2);
        assert!(server_frames(&out).iter().all(|f| f.2 == b"Hello"));
        // client_no_context_takeover: each message on its own; one that reaches back into the
        // last fails (1007), and one that does not is fine.
        let nct = "permessage-deflate; client_no_context_takeover";
        let mut alone = frame(true, true, 1, HELLO);
        alone.extend(frame(true, true, 1, HELLO));
        let (out, _) = run(|| session(nct), &alone);
        assert!(server_frames(&out).iter().all(|f| f.2 == b"Hello"));
        let (out, flow) = run(|| session(nct), &bytes);
        assert_eq!(flow, Flow::Close);
        let frames = server_frames(&out);
        assert_eq!(frames[1].1, 0x8);
        assert_eq!(frames[1].2[..2], 1007u16.to_be_bytes());
        // And the inflater is let go between messages.
        let mut s = session(nct);
        let mut input = frame(true, true, 1, HELLO);
        s.receive(&mut input, &mut Vec::new());
        assert!(!s.decompressor.as_ref().unwrap().is_holding());
        let mut s = session("permessage-deflate");
        let mut input = frame(true, true, 1, HELLO);
        s.receive(&mut input, &mut Vec::new());
        assert!(s.decompressor.as_ref().unwrap().is_holding());
    }

    #[test]
    fn rsv1_is_a_protocol_error_where_it_does_not_belong() {
        let no_deflate = || WsSession::new(EchoHandler, WsConfig::default());
        let continuation = {
            let mut b = frame(false, true, 1, &HELLO[..3]);
            b.extend(frame(true, true, 0, &HELLO[3..]));
            b
        };
        for (bytes, with) in [
            (frame(true, true, 1, HELLO), false),
            (frame(true, true, 9, b"x"), true),
            (frame(true, true, 8, &1000u16.to_be_bytes()), true),
            (continuation, true),
        ] {
            let make = || match with {
                true => session("permessage-deflate"),
                false => no_deflate(),
            };
            let (out, flow) = run(make, &bytes);
            assert_eq!(flow, Flow::Close);
            assert_eq!(out[0], 0x88, "{bytes:02x?}");
            assert_eq!(out[2..4], 1002u16.to_be_bytes(), "{bytes:02x?}");
        }
    }

    #[test]
    fn a_compression_bomb_is_closed_with_1009_and_the_buffer_stays_within_the_limit() {
        // 4 MiB of zeros compress to about 4 KiB (at level 9).
        let zeros = vec![0u8; 4 << 20];
        let mut deflated = Vec::new();
        let best = DeflateConfig {
            level: 9,
            ..DeflateConfig::default()
        };
        Compressor::new(agreed("permessage-deflate", best)).write_message(
            &mut deflated,
            Opcode::Binary,
            &zeros,
        );
        let h = frame::parse_header(&deflated).unwrap().unwrap();
        let payload = &deflated[h.header_len..];
        assert!(payload.len() < 8192, "{}", payload.len());
        let config = WsConfig {
            max_message: 100_000,
            ..WsConfig::default()
        };
        let mut s = session_with("permessage-deflate", config);
        let mut input = frame(true, true, 2, payload);
        let mut out = Vec::new();
        assert_eq!(s.receive(&mut input, &mut out), Flow::Close);
        assert_eq!(out[2..4], 1009u16.to_be_bytes());
        assert!(s.buf.capacity() <= 2 * 100_001, "{}", s.buf.capacity());
        // Just within the limit: taken.
        let config = WsConfig {
            max_message: 4 << 20,
            ..WsConfig::default()
        };
        let (out, flow) = run(
            || session_with("permessage-deflate", config),
            &frame(true, true, 2, payload),
        );
        assert_eq!(flow, Flow::Continue);
        assert_eq!(server_frames(&out)[0].2.len(), 4 << 20);
    }

    #[test]
    fn sent_messages_are_compressed_above_the_threshold_with_rsv1_on_the_first_frame() {
        let small = "x".repeat(255);
        let big = "abcdefgh".repeat(100);
        let mut bytes = frame(true, false, 1, small.as_bytes());
        bytes.extend(frame(true, false, 1, big.as_bytes()));
        bytes.extend(frame(true, false, 1, big.as_bytes()));
        let (out, _) = run(|| session("permessage-deflate"), &bytes);
        let frames = server_frames(&out);
        assert_eq!(frames[0], (false, 1, small.clone().into_bytes()));
        assert_eq!(frames[1], (true, 1, big.clone().into_bytes()));
        assert_eq!(frames[2], (true, 1, big.clone().into_bytes()));
        // The frames really are small, and each stands alone (server_no_context_takeover).
        assert!(out.len() < 255 + 2 * 40, "{}", out.len());
        // The threshold is configurable: 0 compresses everything, even "" (§7.2.3.6: 0x00).
        let config = WsConfig {
            deflate: DeflateConfig {
                threshold: 0,
                level: 6,
                ..DeflateConfig::default()
            },
            ..WsConfig::default()
        };
        let mut bytes = frame(true, false, 1, b"Hello");
        bytes.extend(frame(true, false, 2, b""));
        let (out, _) = run(|| session_with("permessage-deflate", config), &bytes);
        // §7.2.3.1's bytes exactly, then an empty message as a single 0x00.
        assert_eq!(out[..2], [0xC1, 7]);
        assert_eq!(out[2..9], *HELLO);
        assert_eq!(out[9..], [0xC2, 1, 0x00]);
        // With the server keeping its context, the second "Hello" reaches back (§7.2.3.2).
        let keep = WsConfig {
            deflate: DeflateConfig {
                server_context_takeover: true,
                ..config.deflate
            },
            ..WsConfig::default()
        };
        let mut bytes = frame(true, false, 1, b"Hello");
        bytes.extend(frame(true, false, 1, b"Hello"));
        let (out, _) = run(|| session_with("permessage-deflate", keep), &bytes);
        assert_eq!(out[9..11], [0xC1, 5]);
        assert_eq!(out[11..], *HELLO_AGAIN);
        assert!(server_frames(&out).iter().all(|f| f.2 == b"Hello"));
    }

    #[test]
    fn bad_deflate_data_and_bad_utf8_inside_it_close_the_connection() {
        let (out, flow) = run(
            || session("permessage-deflate"),
            &frame(true, true, 1, &[0xff, 0xff, 0xff]),
        );
        assert_eq!(flow, Flow::Close);
        assert_eq!(out[2..4], 1007u16.to_be_bytes());
        // 0xff inflated: not UTF-8.
        let mut deflated = Vec::new();
        let config = DeflateConfig {
            threshold: 0,
            ..DeflateConfig::default()
        };
        Compressor::new(agreed("permessage-deflate", config)).write_message(
            &mut deflated,
            Opcode::Binary,
            b"ok \xff",
        );
        let (out, flow) = run(
            || session("permessage-deflate"),
            &frame(true, true, 1, &deflated[2..]),
        );
        assert_eq!(flow, Flow::Close);
        assert_eq!(out[2..4], 1007u16.to_be_bytes());
    }
}
