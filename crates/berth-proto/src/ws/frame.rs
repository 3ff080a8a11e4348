//! WebSocket frames (RFC 6455 §5.2): the header parsed from the front of a buffer, payloads
//! unmasked in place, and frames written for the server side (never masked). RSV1 is read
//! and written for permessage-deflate (RFC 7692); whether it may be set is the session's
//! question (only when the extension was agreed, only on a data message's first frame).

/// A frame's opcode (RFC 6455 §5.2, §11.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// A later fragment of a message.
    Continuation,
    /// A UTF-8 text message (or its first fragment).
    Text,
    /// A binary message (or its first fragment).
    Binary,
    /// The closing handshake.
    Close,
    /// Asks for a pong.
    Ping,
    /// Answers a ping (or says the sender is alive).
    Pong,
}

impl Opcode {
    fn from_bits(bits: u8) -> Option<Opcode> {
        Some(match bits {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xA => Opcode::Pong,
            _ => return None,
        })
    }

    fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xA,
        }
    }

    /// Close, ping and pong: never fragmented, at most 125 bytes.
    pub fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The last frame of its message.
    pub fin: bool,
    /// RSV1: the message is compressed (permessage-deflate, RFC 7692 §6).
    pub rsv1: bool,
    /// What the frame carries.
    pub opcode: Opcode,
    /// The masking key (every frame from a client has one).
    pub mask: Option<[u8; 4]>,
    /// Payload bytes after the header.
    pub len: u64,
    /// Bytes of the header itself.
    pub header_len: usize,
}

/// Why a frame is refused: the close code to answer with (RFC 6455 §7.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Violation {
    /// 1002 (protocol error), 1007 (bad UTF-8) or 1009 (too big).
    pub code: u16,
    /// What was wrong, for the close frame's reason and the log.
    pub why: &'static str,
}

/// Parses the header at the front of `buf`: `Ok(None)` until it is all there.
pub fn parse_header(buf: &[u8]) -> Result<Option<Header>, Violation> {
    let [b0, b1, ..] = *buf else {
        return Ok(None);
    };
    if b0 & 0x30 != 0 {
        // No extension that uses RSV2 or RSV3 is ever negotiated.
        return Err(Violation {
            code: 1002,
            why: "reserved bits set",
        });
    }
    let opcode = Opcode::from_bits(b0 & 0x0F).ok_or(Violation {
        code: 1002,
        why: "reserved opcode",
    })?;
    let fin = b0 & 0x80 != 0;
    let masked = b1 & 0x80 != 0;
    // Known from the first two bytes: refused before any length bytes arrive.
    if opcode.is_control() && (!fin || b1 & 0x7F > 125) {
        return Err(Violation {
            code: 1002,
            why: "a fragmented or oversized control frame",
        });
    }
    let (len, mut at) = match b1 & 0x7F {
        126 => {
            let Some(b) = buf.get(2..4) else {
                return Ok(None);
            };
            (u16::from_be_bytes([b[0], b[1]]) as u64, 4)
        }
        127 => {
            let Some(b) = buf.get(2..10) else {
                return Ok(None);
            };
            let len = u64::from_be_bytes(b.try_into().unwrap_or([0xFF; 8]));
            if len >> 63 != 0 {
                return Err(Violation {
                    code: 1002,
                    why: "payload length with its top bit set",
                });
            }
            (len, 10)
        }
        n => (n as u64, 2),
    };
    let mask = if masked {
        let Some(k) = buf.get(at..at + 4) else {
            return Ok(None);
        };
        at += 4;
        Some([k[0], k[1], k[2], k[3]])
    } else {
        None
    };
    Ok(Some(Header {
        fin,
        rsv1: b0 & 0x40 != 0,
        opcode,
        mask,
        len,
        header_len: at,
    }))
}

/// Unmasks `data` in place; `offset` is how far into the frame's payload `data` starts.
/// Eight bytes at a time (a byte loop indexing the key cost half the server's time on 16 KiB
/// echoes). Every key costs the same, the zero key too (the bench's client uses it), so that
/// what is measured is what a browser's random key costs.
pub fn unmask(data: &mut [u8], key: [u8; 4], offset: usize) {
    // The key as it lines up with data[0]; eight bytes are two whole periods of it.
    let k: [u8; 4] = std::array::from_fn(|i| key[(offset + i) & 3]);
    let k8 = u64::from_ne_bytes([k[0], k[1], k[2], k[3], k[0], k[1], k[2], k[3]]);
    let mut words = data.chunks_exact_mut(8);
    for w in &mut words {
        let v = u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) ^ k8;
        w.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in words.into_remainder().iter_mut().enumerate() {
        *b ^= k[i & 3];
    }
}

/// Appends an unmasked frame (a server's) carrying `payload` whole.
pub fn write_frame(out: &mut Vec<u8>, opcode: Opcode, payload: &[u8]) {
    write_header(out, true, opcode, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// Appends the header of an unmasked frame of `len` payload bytes.
pub fn write_header(out: &mut Vec<u8>, fin: bool, opcode: Opcode, len: u64) {
    let (bytes, n) = header_bytes(fin, opcode, len);
    out.extend_from_slice(&bytes[..n]);
}

/// The header of an unmasked frame of `len` payload bytes: its bytes, and how many of them.
pub fn header_bytes(fin: bool, opcode: Opcode, len: u64) -> ([u8; 10], usize) {
    header_bytes_rsv1(fin, false, opcode, len)
}

/// [`header_bytes`], with RSV1 set if `rsv1` (a compressed message's first frame).
pub fn header_bytes_rsv1(fin: bool, rsv1: bool, opcode: Opcode, len: u64) -> ([u8; 10], usize) {
    let mut h = [0u8; 10];
    h[0] = if fin { 0x80 } else { 0 } | if rsv1 { 0x40 } else { 0 } | opcode.bits();
    let n = match len {
        0..=125 => {
            h[1] = len as u8;
            2
        }
        126..=0xFFFF => {
            h[1] = 126;
            h[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        }
        _ => {
            h[1] = 127;
            h[2..10].copy_from_slice(&len.to_be_bytes());
            10
        }
    };
    (h, n)
}

/// Appends a close frame with `code` and `reason` (cut to fit 125 bytes).
pub fn write_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    let mut payload = code.to_be_bytes().to_vec();
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    payload.extend_from_slice(&reason.as_bytes()[..end]);
    write_frame(out, Opcode::Close, &payload);
}

/// Whether a close frame from a peer may carry `code` (RFC 6455 §7.4: the defined codes an
/// endpoint may send, and the ranges for libraries and applications).
pub fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1011 | 3000..=4999)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_with_every_length_form_and_refuse_what_the_rfc_forbids() {
        // RFC 6455 §5.7: a masked "Hello" from a client.
        let hello = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        let h = parse_header(&hello).unwrap().unwrap();
        assert_eq!(
            (h.fin, h.opcode, h.len, h.header_len),
            (true, Opcode::Text, 5, 6)
        );
        let mut data = hello[6..].to_vec();
        unmask(&mut data, h.mask.unwrap(), 0);
        assert_eq!(data, b"Hello");
        assert_eq!(parse_header(&hello[..5]), Ok(None));
        let mut out = Vec::new();
        write_header(&mut out, true, Opcode::Binary, 300);
        assert_eq!(out, [0x82, 126, 1, 44]);
        out.clear();
        write_header(&mut out, false, Opcode::Binary, 70_000);
        assert_eq!(parse_header(&out).unwrap().unwrap().len, 70_000);
        assert!(
            parse_header(&[0xC1, 0x00]).unwrap().unwrap().rsv1,
            "RSV1 is read"
        );
        assert_eq!(parse_header(&[0xA1, 0x80]).unwrap_err().code, 1002, "RSV2");
        assert_eq!(parse_header(&[0x91, 0x80]).unwrap_err().code, 1002, "RSV3");
        assert_eq!(
            parse_header(&[0x83, 0x80]).unwrap_err().code,
            1002,
            "opcode 3"
        );
        assert_eq!(
            parse_header(&[0x09, 0x80]).unwrap_err().code,
            1002,
            "fragmented ping"
        );
        assert_eq!(
            parse_header(&[0x89, 0xFE]).unwrap_err().code,
            1002,
            "126-byte ping"
        );
    }

    #[test]
    fn unmasking_word_by_word_matches_the_definition_at_every_offset() {
        let key = [0x37, 0xfa, 0x21, 0x3d];
        let plain: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        for offset in 0..8 {
            for len in [0, 1, 3, 7, 8, 9, 15, 16, 17, 100, 999] {
                let mut data = plain[..len].to_vec();
                unmask(&mut data, key, offset);
                let want: Vec<u8> = plain[..len]
                    .iter()
                    .enumerate()
                    .map(|(i, b)| b ^ key[(offset + i) & 3])
                    .collect();
                assert_eq!(data, want, "offset {offset} len {len}");
            }
        }
    }

    #[test]
    fn close_codes_are_the_ones_a_peer_may_send() {
        for ok in [
            1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999,
        ] {
            assert!(valid_close_code(ok), "{ok}");
        }
        for bad in [
            0, 999, 1004, 1005, 1006, 1012, 1013, 1014, 1015, 1016, 1100, 2000, 2999, 5000,
        ] {
            assert!(!valid_close_code(bad), "{bad}");
        }
    }
}
