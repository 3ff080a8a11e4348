//! Frames: an 8-byte little-endian length, then the payload (docs/msg-protocol.md §1).
//!
//! [`FrameDecoder`] is a streaming decoder: it reports a frame's start as soon as its length is
//! known, then its payload in whatever pieces the input holds, then its end. It never buffers
//! payload, so a relay can pass a 1 GiB message through in bounded memory, and it refuses an
//! over-limit length before a single payload byte arrives. [`MessageReader`] builds on it for
//! callers that want whole messages.

/// Bytes of the length field.
pub const HEADER_LEN: usize = 8;

/// Top bit of the length field: set, the frame is a control frame (server to client only).
pub const CONTROL_BIT: u64 = 1 << 63;

/// The length field for a data frame of `len` bytes.
pub fn header(len: u64) -> [u8; HEADER_LEN] {
    len.to_le_bytes()
}

/// The length field for a control frame whose payload is `len` bytes.
pub fn control_header(len: u64) -> [u8; HEADER_LEN] {
    (len | CONTROL_BIT).to_le_bytes()
}

/// Appends a whole data frame carrying `payload` to `out`.
pub fn encode(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&header(payload.len() as u64));
    out.extend_from_slice(payload);
}

/// One step of decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// A data frame begins; its payload is this long.
    Start(u64),
    /// A control frame begins (only from [`FrameDecoder::from_server`]); its payload, this
    /// long, is a control payload, and the server closes after it.
    Control(u64),
    /// Some payload bytes of the current frame, in order.
    Chunk(&'a [u8]),
    /// The current frame's payload is complete.
    End,
}

/// Input that cannot be a frame the decoder accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The length field announces more than the limit.
    TooLarge {
        /// The length field as sent.
        announced: u64,
        /// The limit in force.
        limit: u64,
    },
    /// A control frame (length field with the top bit set) where only data frames may come:
    /// from a client.
    ControlFrame {
        /// The length field as sent.
        announced: u64,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { announced, limit } => {
                write!(f, "frame of {announced} bytes over the limit of {limit}")
            }
            FrameError::ControlFrame { announced } => write!(
                f,
                "a control frame (length field {announced:#018x} has the top bit set); \
                 only the server sends control frames"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header {
        bytes: [u8; HEADER_LEN],
        have: usize,
    },
    Payload {
        left: u64,
    },
    Ending,
}

/// Streaming frame decoder for one direction of one connection.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    state: State,
    limit: u64,
    control: bool,
}

impl FrameDecoder {
    /// A decoder for what clients send: data frames of at most `limit` bytes. A length with
    /// the control bit set is [`FrameError::ControlFrame`].
    pub fn new(limit: u64) -> FrameDecoder {
        FrameDecoder {
            state: State::Header {
                bytes: [0; HEADER_LEN],
                have: 0,
            },
            limit: limit.min(CONTROL_BIT - 1),
            control: false,
        }
    }

    /// A decoder for what a server sends: data frames of at most `limit` bytes, and control
    /// frames (whose payloads are short text; they are held to the same limit).
    pub fn from_server(limit: u64) -> FrameDecoder {
        FrameDecoder {
            control: true,
            ..FrameDecoder::new(limit)
        }
    }

    /// Whether the decoder is between frames (nothing of the next one seen).
    pub fn at_boundary(&self) -> bool {
        matches!(self.state, State::Header { have: 0, .. })
    }

    /// Payload bytes of the frame being read that have not arrived yet; 0 between frames.
    pub fn payload_left(&self) -> u64 {
        match self.state {
            State::Payload { left } => left,
            _ => 0,
        }
    }

    /// Takes `n` payload bytes (at most [`FrameDecoder::payload_left`]) that the caller read
    /// into place itself, as if [`FrameDecoder::next`] had returned them as a chunk: a receiver
    /// that reads a large payload straight into the message's buffer saves copying it.
    pub fn skip_payload(&mut self, n: u64) {
        if let State::Payload { left } = &mut self.state {
            assert!(n <= *left, "skipped past the payload");
            *left -= n;
            if *left == 0 {
                self.state = State::Ending;
            }
        }
    }

    /// Decodes the next piece from the front of `input`. Returns how many bytes of `input` it
    /// used and the piece, or `None` when `input` is used up without completing one. Call again
    /// with the rest of the input until it returns `None`.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Piece<'a>>), FrameError> {
        match &mut self.state {
            State::Header { bytes, have } => {
                let n = (HEADER_LEN - *have).min(input.len());
                bytes[*have..*have + n].copy_from_slice(&input[..n]);
                *have += n;
                if *have < HEADER_LEN {
                    return Ok((n, None));
                }
                let announced = u64::from_le_bytes(*bytes);
                if !self.control && announced & CONTROL_BIT != 0 {
                    return Err(FrameError::ControlFrame { announced });
                }
                let control = announced & CONTROL_BIT != 0;
                let len = if control {
                    announced & !CONTROL_BIT
                } else {
                    announced
                };
                if len > self.limit {
                    return Err(FrameError::TooLarge {
                        announced,
                        limit: self.limit,
                    });
                }
                self.state = if len == 0 {
                    State::Ending
                } else {
                    State::Payload { left: len }
                };
                let piece = if control {
                    Piece::Control(len)
                } else {
                    Piece::Start(len)
                };
                Ok((n, Some(piece)))
            }
            State::Payload { left } => {
                if input.is_empty() {
                    return Ok((0, None));
                }
                // `left` bounds the slice, so the cast cannot truncate anything that matters.
                let n = (input.len() as u64).min(*left) as usize;
                *left -= n as u64;
                if *left == 0 {
                    self.state = State::Ending;
                }
                Ok((n, Some(Piece::Chunk(&input[..n]))))
            }
            State::Ending => {
                self.state = State::Header {
                    bytes: [0; HEADER_LEN],
                    have: 0,
                };
                Ok((0, Some(Piece::End)))
            }
        }
    }
}

/// Whole messages, for callers that want them assembled (up to the decoder's limit).
#[derive(Debug, Clone)]
pub struct MessageReader {
    decoder: FrameDecoder,
    message: Vec<u8>,
}

impl MessageReader {
    /// A reader that refuses messages longer than `limit` bytes.
    pub fn new(limit: u64) -> MessageReader {
        MessageReader {
            decoder: FrameDecoder::new(limit),
            message: Vec::new(),
        }
    }

    /// Whether the reader is between messages.
    pub fn at_boundary(&self) -> bool {
        self.decoder.at_boundary()
    }

    /// Reads from `input` until a message is complete or `input` is used up. Returns the bytes
    /// used and the message, if one completed; it stays valid until the next call.
    pub fn next(&mut self, input: &[u8]) -> Result<(usize, Option<&[u8]>), FrameError> {
        let mut used = 0;
        loop {
            let (n, piece) = self.decoder.next(&input[used..])?;
            used += n;
            match piece {
                None => return Ok((used, None)),
                Some(Piece::Start(len) | Piece::Control(len)) => {
                    self.message.clear();
                    // Reserve what has arrived at most: a peer announcing 64 MiB and sending
                    // 8 bytes must not make us allocate 64 MiB.
                    let arrived = (input.len() - used) as u64;
                    self.message.reserve(len.min(arrived) as usize);
                }
                Some(Piece::Chunk(bytes)) => self.message.extend_from_slice(bytes),
                Some(Piece::End) => return Ok((used, Some(&self.message))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_seed_ok_frame() {
        let mut out = Vec::new();
        encode(b"OK", &mut out);
        assert_eq!(out, [2, 0, 0, 0, 0, 0, 0, 0, b'O', b'K']);
        assert_eq!(control_header(18), [0x12, 0, 0, 0, 0, 0, 0, 0x80]);
    }

    #[test]
    fn streams_a_payload_without_buffering_it() {
        let mut d = FrameDecoder::new(u64::MAX >> 1);
        let head = header(1 << 30);
        let (n, p) = d.next(&head).unwrap();
        assert_eq!((n, p), (8, Some(Piece::Start(1 << 30))));
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..1024 {
            let (n, p) = d.next(&chunk).unwrap();
            assert_eq!((n, p), (1 << 20, Some(Piece::Chunk(&chunk[..]))));
        }
        assert_eq!(d.next(&[]).unwrap(), (0, Some(Piece::End)));
        assert!(d.at_boundary());
    }

    #[test]
    fn payload_read_into_place_is_skipped_and_the_frame_still_ends() {
        let mut d = FrameDecoder::new(1 << 20);
        assert_eq!(d.payload_left(), 0);
        let mut input = header(10).to_vec();
        input.extend_from_slice(b"abc");
        assert_eq!(d.next(&input).unwrap(), (8, Some(Piece::Start(10))));
        assert_eq!(
            d.next(&input[8..]).unwrap(),
            (3, Some(Piece::Chunk(b"abc")))
        );
        assert_eq!(d.payload_left(), 7);
        d.skip_payload(4);
        assert_eq!(d.payload_left(), 3);
        assert_eq!(d.next(b"xyz!").unwrap(), (3, Some(Piece::Chunk(b"xyz"))));
        assert_eq!(d.next(b"!").unwrap(), (0, Some(Piece::End)));
        d.next(&header(2)).unwrap();
        d.skip_payload(2);
        assert_eq!(d.next(b"").unwrap(), (0, Some(Piece::End)));
        assert!(d.at_boundary());
    }

    #[test]
    fn refuses_before_the_payload() {
        let mut d = FrameDecoder::new(10);
        assert_eq!(d.next(&header(10)[..5]).unwrap(), (5, None));
        let mut r = MessageReader::new(10);
        assert_eq!(
            r.next(&header(11)),
            Err(FrameError::TooLarge {
                announced: 11,
                limit: 10
            })
        );
        let mut r = MessageReader::new(u64::MAX);
        assert!(
            r.next(&control_header(2)).is_err(),
            "a control bit is over any limit"
        );
    }

    #[test]
    fn a_server_decoder_tells_control_frames_apart() {
        let mut d = FrameDecoder::from_server(1 << 20);
        let mut input = control_header(4).to_vec();
        input.extend_from_slice(b"oops");
        encode(b"hi", &mut input);
        let mut pieces = Vec::new();
        let mut at = 0;
        while let (n, Some(p)) = d.next(&input[at..]).unwrap() {
            at += n;
            pieces.push(format!("{p:?}"));
        }
        assert_eq!(
            pieces,
            [
                "Control(4)",
                "Chunk([111, 111, 112, 115])",
                "End",
                "Start(2)",
                "Chunk([104, 105])",
                "End"
            ]
        );
    }

    #[test]
    fn announced_size_is_not_allocated_up_front() {
        let mut r = MessageReader::new(1 << 40);
        let (_, m) = r.next(&header(1 << 40)).unwrap();
        assert!(m.is_none());
        assert!(r.message.capacity() < 1024);
    }
}
