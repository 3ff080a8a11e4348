//! One framed connection, server side, sans-IO: keyword first, then the engine's decision
//! (admit or refuse, see [`super::policy`]), then the client's frames in streaming pieces.
//!
//! The engine appends what it reads to its input, calls [`ServerSession::next`] until it
//! returns `None`, and drops the bytes it says it used. On [`Event::Keyword`] it decides and
//! calls [`ServerSession::accept`] or [`ServerSession::refuse`], which append the answer to its
//! output; frames that arrived behind the keyword wait, unread, until then (and are never read
//! if the client is refused). After [`ServerSession::refuse`] or [`ServerSession::end`] the
//! engine writes out the output and closes.

use super::frame::{FrameDecoder, FrameError, MessageReader, Piece};
use super::handshake::{
    encode_ending, encode_refusal, parse_keyword_with, Ending, Keyword, Refusal, OK_FRAME,
};
use super::name::{BadName, NameRule};

/// What the client's bytes amount to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// The client said who it is: decide, then `accept` or `refuse`.
    Keyword(Keyword),
    /// The keyword is not a name: `refuse` with `name-invalid`, saying why.
    BadKeyword(BadName),
    /// Part of a message (admitted clients only).
    Piece(Piece<'a>),
    /// A frame the server does not take (over the limit, or a control frame): `end` with
    /// [`FrameError::ending`].
    BadFrame(FrameError),
}

#[derive(Debug, Clone)]
enum State {
    AwaitKeyword(MessageReader),
    Deciding,
    Open(FrameDecoder),
    Closing,
}

impl FrameError {
    /// The ending a client gets for sending this.
    pub fn ending(&self) -> Ending {
        match self {
            FrameError::TooLarge { .. } => Ending::TooLarge,
            FrameError::ControlFrame { .. } => Ending::BadFrame,
        }
    }
}

/// A framed connection's protocol state, server side.
#[derive(Debug, Clone)]
pub struct ServerSession {
    state: State,
    limit: u64,
    names: NameRule,
}

impl ServerSession {
    /// A new connection whose messages may be up to `limit` bytes, its keyword following the
    /// default [`NameRule`].
    pub fn new(limit: u64) -> ServerSession {
        ServerSession::with_names(limit, NameRule::DEFAULT)
    }

    /// A new connection whose keyword must follow `names` (`--max-name`, `--strict-names`): a
    /// keyword frame announcing more than its longest name is refused before it is read.
    pub fn with_names(limit: u64, names: NameRule) -> ServerSession {
        ServerSession {
            state: State::AwaitKeyword(MessageReader::new(names.max_len() as u64)),
            limit,
            names,
        }
    }

    /// Whether the client has been admitted.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open(_))
    }

    /// Whether the client is between messages: nothing of a next frame read yet (true before
    /// admission and after the end too).
    pub fn at_boundary(&self) -> bool {
        match &self.state {
            State::Open(decoder) => decoder.at_boundary(),
            _ => true,
        }
    }

    /// Payload bytes of the message being read that have not arrived yet (0 between
    /// messages and before admission): see [`FrameDecoder::payload_left`].
    pub fn payload_left(&self) -> u64 {
        match &self.state {
            State::Open(decoder) => decoder.payload_left(),
            _ => 0,
        }
    }

    /// Takes `n` payload bytes the caller read into place itself: see
    /// [`FrameDecoder::skip_payload`].
    pub fn skip_payload(&mut self, n: u64) {
        if let State::Open(decoder) = &mut self.state {
            decoder.skip_payload(n);
        }
    }

    /// Whether the connection is to be closed once the output is written.
    pub fn is_closing(&self) -> bool {
        matches!(self.state, State::Closing)
    }

    /// Reads the next event from the front of `input`; returns the bytes used. `None`: more
    /// input is needed, or a decision is pending, or the connection is closing.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> (usize, Option<Event<'a>>) {
        match &mut self.state {
            State::AwaitKeyword(reader) => match reader.next(input) {
                Ok((n, None)) => (n, None),
                Ok((n, Some(payload))) => {
                    let event = match parse_keyword_with(payload, self.names) {
                        Ok(k) => Event::Keyword(k),
                        Err(r) => Event::BadKeyword(r),
                    };
                    self.state = State::Deciding;
                    (n, Some(event))
                }
                // A keyword frame longer than any name: refused without reading it.
                Err(e) => {
                    self.state = State::Deciding;
                    let bad = match e {
                        FrameError::TooLarge { announced, limit } => BadName::TooLong {
                            len: announced,
                            max: limit as usize,
                        },
                        FrameError::ControlFrame { .. } => BadName::ControlFrame,
                    };
                    (0, Some(Event::BadKeyword(bad)))
                }
            },
            State::Deciding | State::Closing => (0, None),
            // After an error the decoder keeps reporting it until the engine calls `end`.
            State::Open(decoder) => match decoder.next(input) {
                Ok((n, piece)) => (n, piece.map(Event::Piece)),
                Err(e) => (0, Some(Event::BadFrame(e))),
            },
        }
    }

    /// Admits the client: appends `OK` to `out`; its frames are read from now on.
    pub fn accept(&mut self, out: &mut Vec<u8>) {
        if matches!(self.state, State::Deciding) {
            out.extend_from_slice(&OK_FRAME);
            self.state = State::Open(FrameDecoder::new(self.limit));
        }
    }

    /// Refuses the client: appends the refusal to `out`; close once it is written.
    pub fn refuse(&mut self, why: Refusal, text: &str, out: &mut Vec<u8>) {
        if !self.is_closing() {
            encode_refusal(why, text, out);
            self.state = State::Closing;
        }
    }

    /// Ends an admitted client's connection with a reason, after whatever `out` already holds.
    pub fn end(&mut self, why: Ending, text: &str, out: &mut Vec<u8>) {
        if self.is_open() {
            encode_ending(why, text, out);
            self.state = State::Closing;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::frame::encode;
    use super::super::handshake::encode_keyword;
    use super::*;

    /// Feeds `input` in pieces of `step` bytes; admits with `admit`; returns the events seen
    /// (payload bytes joined per message) and the output.
    fn drive(input: &[u8], step: usize, admit: bool, limit: u64) -> (Vec<String>, Vec<u8>) {
        let mut s = ServerSession::new(limit);
        let (mut buf, mut out, mut seen) = (Vec::new(), Vec::new(), Vec::new());
        let mut message = Vec::new();
        for piece in input.chunks(step) {
            buf.extend_from_slice(piece);
            loop {
                let (n, ev) = s.next(&buf);
                let ev = ev.map(|e| match e {
                    Event::Piece(Piece::Chunk(b)) => {
                        message.extend_from_slice(b);
                        None
                    }
                    Event::Piece(Piece::End) => Some(format!(
                        "msg {}",
                        String::from_utf8_lossy(&std::mem::take(&mut message))
                    )),
                    Event::Piece(_) => None,
                    other => Some(format!("{other:?}")),
                });
                let more = ev.is_some() || n > 0;
                buf.drain(..n);
                match ev.flatten() {
                    Some(e) if e.starts_with("Keyword") => {
                        if admit {
                            s.accept(&mut out);
                        } else {
                            s.refuse(Refusal::NameTaken, "", &mut out);
                        }
                        seen.push(e);
                    }
                    Some(e) if e.starts_with("BadFrame") => {
                        s.end(Ending::TooLarge, "", &mut out);
                        seen.push(e);
                    }
                    Some(e) => seen.push(e),
                    None if !more => break,
                    None => {}
                }
            }
        }
        (seen, out)
    }

    fn client_bytes() -> Vec<u8> {
        let mut input = Vec::new();
        encode_keyword("svc", &mut input);
        encode(b"ping", &mut input);
        encode(b"", &mut input);
        input
    }

    #[test]
    fn admits_then_reads_messages_however_they_arrive() {
        let input = client_bytes();
        for step in 1..=input.len() {
            let (seen, out) = drive(&input, step, true, 1024);
            assert_eq!(
                seen,
                ["Keyword(Named(\"svc\"))", "msg ping", "msg "],
                "step {step}"
            );
            assert_eq!(out, OK_FRAME);
        }
    }

    #[test]
    fn a_refused_client_has_nothing_read() {
        let (seen, out) = drive(&client_bytes(), 3, false, 1024);
        assert_eq!(seen, ["Keyword(Named(\"svc\"))"]);
        assert!(
            out.starts_with(&[0x12, 0, 0, 0, 0, 0, 0, 0x80])
                && out.ends_with(b"refused name-taken")
        );
    }

    #[test]
    fn an_oversized_keyword_or_message_ends_the_connection() {
        // Longer than the default 4 KiB (issue 15; the limit was 255 bytes before).
        let mut input = Vec::new();
        encode(&[b'n'; 5000], &mut input);
        let (seen, _) = drive(&input, 7, true, 1024);
        assert_eq!(seen, ["BadKeyword(TooLong { len: 5000, max: 4096 })"]);

        let mut input = client_bytes();
        encode(&[0; 2000], &mut input);
        let (seen, out) = drive(&input, 5, true, 1024);
        assert_eq!(seen[..3], ["Keyword(Named(\"svc\"))", "msg ping", "msg "]);
        assert!(seen[3].starts_with("BadFrame"), "{seen:?}");
        assert!(
            out.ends_with(b"error too-large"),
            "{:?}",
            String::from_utf8_lossy(&out)
        );
    }
}
