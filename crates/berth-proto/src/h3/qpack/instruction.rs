//! The instructions of QPACK's two unidirectional streams (RFC 9204 §4.3, §4.4): the
//! encoder's, which set the dynamic table's capacity and add entries to it, and the
//! decoder's, which acknowledge field sections, cancel streams and report inserts.
//!
//! Both streams are unframed sequences of instructions arriving in pieces, so parsing
//! answers "need more" (`Ok(None)`) for an instruction cut short, and consumes nothing
//! then. An encoder instruction's strings are bounded before their bytes arrive: one that
//! could not fit the table (RFC 9204 §3.2.2: an entry larger than the capacity is an error)
//! is refused at once, so a peer cannot make the decoder buffer more than a table's worth.

use super::prim::{self, Short};
use super::ENTRY_OVERHEAD;
use crate::h3::error::{ErrorCode, H3Error};

/// An encoder instruction (RFC 9204 §4.3). `S` is the strings' type: owned when read,
/// borrowed when written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncoderInstruction<S = Vec<u8>> {
    /// Set Dynamic Table Capacity (§4.3.1): `001` and a 5-bit prefix integer.
    SetCapacity(u64),
    /// Insert with Name Reference (§4.3.2): `1`, T, a 6-bit index, the value.
    InsertWithNameRef {
        /// T: the name is the static table's; else the dynamic table's, by relative index
        /// (0 is the newest entry).
        static_table: bool,
        /// The index.
        index: u64,
        /// The value.
        value: S,
    },
    /// Insert with Literal Name (§4.3.3): `01`, the name with a 6-bit prefix, the value.
    InsertWithLiteralName {
        /// The name.
        name: S,
        /// The value.
        value: S,
    },
    /// Duplicate (§4.3.4): `000` and a 5-bit relative index.
    Duplicate(u64),
}

fn encoder_stream_error(reason: &'static str) -> H3Error {
    H3Error::conn(ErrorCode::QPACK_ENCODER_STREAM_ERROR, reason)
}

fn decoder_stream_error(reason: &'static str) -> H3Error {
    H3Error::conn(ErrorCode::QPACK_DECODER_STREAM_ERROR, reason)
}

/// Maps a primitive's failure on one of the instruction streams: short input waits, the
/// rest are connection errors (§7.4: "a connection error of the appropriate type if on the
/// encoder or decoder stream").
fn on_stream<T>(
    r: Result<T, Short>,
    err: fn(&'static str) -> H3Error,
) -> Result<Option<T>, H3Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Short::Incomplete) => Ok(None),
        Err(Short::TooLarge) => Err(err("an integer past berth's limit")),
        Err(Short::Huffman) => Err(err("a Huffman string that does not decode")),
    }
}

impl EncoderInstruction {
    /// Reads the instruction at the front of `buf`: `Ok(Some((instruction, bytes used)))`,
    /// `Ok(None)` when `buf` ends inside it, or the connection error
    /// (QPACK_ENCODER_STREAM_ERROR) for one that is malformed, or whose entry could not fit
    /// a table of `capacity` bytes.
    pub fn parse(buf: &[u8], capacity: u64) -> Result<Option<(Self, usize)>, H3Error> {
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        let mut b = buf;
        let too_big = || encoder_stream_error("an entry larger than the table capacity");
        let fits = |min: usize| (min as u64).saturating_add(ENTRY_OVERHEAD as u64) <= capacity;
        let instruction = if first & 0x80 != 0 {
            let Some(index) = on_stream(prim::int(&mut b, 6), encoder_stream_error)? else {
                return Ok(None);
            };
            let Some(head) = on_stream(prim::str_head(&mut b, 8), encoder_stream_error)? else {
                return Ok(None);
            };
            // The name is at least empty: the value alone must fit.
            if !fits(head.min_decoded()) {
                return Err(too_big());
            }
            let mut value = Vec::new();
            if on_stream(
                prim::str_body(&mut b, head, &mut value),
                encoder_stream_error,
            )?
            .is_none()
            {
                return Ok(None);
            }
            EncoderInstruction::InsertWithNameRef {
                static_table: first & 0x40 != 0,
                index,
                value,
            }
        } else if first & 0x40 != 0 {
            let Some(name_head) = on_stream(prim::str_head(&mut b, 6), encoder_stream_error)?
            else {
                return Ok(None);
            };
            if !fits(name_head.min_decoded()) {
                return Err(too_big());
            }
            let mut name = Vec::new();
            if on_stream(
                prim::str_body(&mut b, name_head, &mut name),
                encoder_stream_error,
            )?
            .is_none()
            {
                return Ok(None);
            }
            let Some(head) = on_stream(prim::str_head(&mut b, 8), encoder_stream_error)? else {
                return Ok(None);
            };
            if !fits(name.len() + head.min_decoded()) {
                return Err(too_big());
            }
            let mut value = Vec::new();
            if on_stream(
                prim::str_body(&mut b, head, &mut value),
                encoder_stream_error,
            )?
            .is_none()
            {
                return Ok(None);
            }
            EncoderInstruction::InsertWithLiteralName { name, value }
        } else {
            let Some(v) = on_stream(prim::int(&mut b, 5), encoder_stream_error)? else {
                return Ok(None);
            };
            if first & 0x20 != 0 {
                EncoderInstruction::SetCapacity(v)
            } else {
                EncoderInstruction::Duplicate(v)
            }
        };
        Ok(Some((instruction, buf.len() - b.len())))
    }
}

impl<S: AsRef<[u8]>> EncoderInstruction<S> {
    /// Appends the instruction; strings are Huffman-coded when `huffman` is set and that is
    /// shorter.
    pub fn write(&self, huffman: bool, out: &mut Vec<u8>) {
        match self {
            EncoderInstruction::SetCapacity(c) => prim::write_int(out, 0x20, 5, *c),
            EncoderInstruction::InsertWithNameRef {
                static_table,
                index,
                value,
            } => {
                let t = if *static_table { 0x40 } else { 0 };
                prim::write_int(out, 0x80 | t, 6, *index);
                prim::write_string(out, 0, 8, value.as_ref(), huffman);
            }
            EncoderInstruction::InsertWithLiteralName { name, value } => {
                prim::write_string(out, 0x40, 6, name.as_ref(), huffman);
                prim::write_string(out, 0, 8, value.as_ref(), huffman);
            }
            EncoderInstruction::Duplicate(i) => prim::write_int(out, 0, 5, *i),
        }
    }
}

/// A decoder instruction (RFC 9204 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderInstruction {
    /// Section Acknowledgment (§4.4.1): `1` and the stream ID, 7-bit prefix.
    SectionAck(u64),
    /// Stream Cancellation (§4.4.2): `01` and the stream ID, 6-bit prefix.
    StreamCancel(u64),
    /// Insert Count Increment (§4.4.3): `00` and the increment, 6-bit prefix.
    InsertCountIncrement(u64),
}

impl DecoderInstruction {
    /// Reads the instruction at the front of `buf`: `Ok(Some((instruction, bytes used)))`,
    /// `Ok(None)` when `buf` ends inside it, or a connection error of type
    /// QPACK_DECODER_STREAM_ERROR for an integer past berth's limit.
    pub fn parse(buf: &[u8]) -> Result<Option<(Self, usize)>, H3Error> {
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        let mut b = buf;
        let (prefix, make): (u32, fn(u64) -> DecoderInstruction) = if first & 0x80 != 0 {
            (7, DecoderInstruction::SectionAck)
        } else if first & 0x40 != 0 {
            (6, DecoderInstruction::StreamCancel)
        } else {
            (6, DecoderInstruction::InsertCountIncrement)
        };
        let Some(v) = on_stream(prim::int(&mut b, prefix), decoder_stream_error)? else {
            return Ok(None);
        };
        Ok(Some((make(v), buf.len() - b.len())))
    }

    /// Appends the instruction.
    pub fn write(&self, out: &mut Vec<u8>) {
        match *self {
            DecoderInstruction::SectionAck(s) => prim::write_int(out, 0x80, 7, s),
            DecoderInstruction::StreamCancel(s) => prim::write_int(out, 0x40, 6, s),
            DecoderInstruction::InsertCountIncrement(n) => prim::write_int(out, 0, 6, n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The encoder instructions of RFC 9204 Appendix B, one by one, both ways, and cut at
    /// every byte.
    #[test]
    fn appendix_b_encoder_instructions() {
        let cases: [(&str, EncoderInstruction); 6] = [
            ("3fbd01", EncoderInstruction::SetCapacity(220)),
            (
                "c00f 7777 772e 6578 616d 706c 652e 636f 6d",
                EncoderInstruction::InsertWithNameRef {
                    static_table: true,
                    index: 0,
                    value: b"www.example.com".to_vec(),
                },
            ),
            (
                "c10c 2f73 616d 706c 652f 7061 7468",
                EncoderInstruction::InsertWithNameRef {
                    static_table: true,
                    index: 1,
                    value: b"/sample/path".to_vec(),
                },
            ),
            (
                "4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565",
                EncoderInstruction::InsertWithLiteralName {
                    name: b"custom-key".to_vec(),
                    value: b"custom-value".to_vec(),
                },
            ),
            ("02", EncoderInstruction::Duplicate(2)),
            (
                "810d 6375 7374 6f6d 2d76 616c 7565 32",
                EncoderInstruction::InsertWithNameRef {
                    static_table: false,
                    index: 1,
                    value: b"custom-value2".to_vec(),
                },
            ),
        ];
        for (bytes, instruction) in cases {
            let bytes = hex(bytes);
            assert_eq!(
                EncoderInstruction::parse(&bytes, 220),
                Ok(Some((instruction.clone(), bytes.len())))
            );
            for cut in 0..bytes.len() {
                assert_eq!(EncoderInstruction::parse(&bytes[..cut], 220), Ok(None));
            }
            let mut out = Vec::new();
            instruction.write(false, &mut out);
            assert_eq!(out, bytes);
            // Huffman-coded, it reads back the same.
            out.clear();
            instruction.write(true, &mut out);
            let (back, n) = EncoderInstruction::parse(&out, 220).unwrap().unwrap();
            assert_eq!((back, n), (instruction, out.len()));
        }
    }

    #[test]
    fn appendix_b_decoder_instructions() {
        let cases = [
            (0x84, DecoderInstruction::SectionAck(4)),
            (0x01, DecoderInstruction::InsertCountIncrement(1)),
            (0x48, DecoderInstruction::StreamCancel(8)),
        ];
        for (byte, instruction) in cases {
            assert_eq!(
                DecoderInstruction::parse(&[byte]),
                Ok(Some((instruction, 1)))
            );
            let mut out = Vec::new();
            instruction.write(&mut out);
            assert_eq!(out, [byte]);
        }
        // A long stream ID, cut short, then whole.
        let mut out = Vec::new();
        DecoderInstruction::SectionAck(1 << 20).write(&mut out);
        for cut in 0..out.len() {
            assert_eq!(DecoderInstruction::parse(&out[..cut]), Ok(None));
        }
        assert_eq!(
            DecoderInstruction::parse(&out),
            Ok(Some((DecoderInstruction::SectionAck(1 << 20), out.len())))
        );
    }

    /// An insert that cannot fit the table is refused from its length alone, before its
    /// bytes arrive: a 2^32-byte value claimed in six bytes.
    #[test]
    fn an_entry_past_the_capacity_is_refused_before_its_bytes() {
        let mut out = Vec::new();
        prim::write_int(&mut out, 0xc0, 6, 0);
        prim::write_int(&mut out, 0, 7, u64::from(u32::MAX));
        let e = EncoderInstruction::parse(&out, 4096).unwrap_err();
        assert_eq!(e.code, ErrorCode::QPACK_ENCODER_STREAM_ERROR);
        // At the boundary (a name reference counts the value alone until the name is
        // looked up): 4064 + 32 = 4096 fits, 4065 does not.
        let mut ok = Vec::new();
        prim::write_int(&mut ok, 0xc0, 6, 0);
        prim::write_int(&mut ok, 0, 7, 4064);
        assert_eq!(
            EncoderInstruction::parse(&ok, 4096),
            Ok(None),
            "waits for the value"
        );
        let mut over = Vec::new();
        prim::write_int(&mut over, 0xc0, 6, 0);
        prim::write_int(&mut over, 0, 7, 4065);
        assert!(EncoderInstruction::parse(&over, 4096).is_err());
        // A literal name too long for the table, likewise.
        let mut name = Vec::new();
        prim::write_int(&mut name, 0x40, 5, 5000);
        assert!(EncoderInstruction::parse(&name, 4096).is_err());
        // With capacity 0 no entry fits at all.
        let mut empty = Vec::new();
        EncoderInstruction::InsertWithLiteralName {
            name: &b""[..],
            value: &b""[..],
        }
        .write(false, &mut empty);
        assert!(EncoderInstruction::parse(&empty, 0).is_err());
    }

    #[test]
    fn huge_integers_are_stream_errors() {
        let mut out = Vec::new();
        prim::write_int(&mut out, 0x20, 5, 1 << 40);
        let e = EncoderInstruction::parse(&out, 4096).unwrap_err();
        assert_eq!(e.code, ErrorCode::QPACK_ENCODER_STREAM_ERROR);
        out.clear();
        prim::write_int(&mut out, 0x80, 7, 1 << 40);
        let e = DecoderInstruction::parse(&out).unwrap_err();
        assert_eq!(e.code, ErrorCode::QPACK_DECODER_STREAM_ERROR);
    }
}
