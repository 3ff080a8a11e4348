//! QPACK's primitives (RFC 9204 §4.1): prefixed integers and string literals, on HPACK's own
//! (RFC 7541 §5.1, §5.2), which QPACK reuses "unmodified" except that a string may start
//! mid-byte. The integer codec and the Huffman code are h2's ([`crate::h2::hpack`]), shared
//! rather than copied.
//!
//! One limit is berth's: integers past 2^32 are refused ([`Short::TooLarge`]). RFC 9204
//! §4.1.1 asks decoders to handle 62 bits, and §7.4 lets an implementation bound what it
//! accepts. Every QPACK integer berth's limits leave meaningful is far below 2^32 (table
//! capacities, indices, lengths, and stream IDs, which a connection bounded to thousands of
//! requests never takes past it); a longer run of continuation bytes is only a peer making
//! the decoder loop.

use crate::h2::hpack::{decode_int, encode_int, huffman, HpackError};

/// Why a primitive could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// The input ends inside it: on the encoder or decoder stream, wait for more; in a
    /// field section, which is whole, an error.
    Incomplete,
    /// An integer past what berth accepts (see the module docs).
    TooLarge,
    /// A Huffman-coded string that does not decode (RFC 7541 §5.2).
    Huffman,
}

/// Reads an integer with a `prefix`-bit prefix from the front of `*buf`, advancing it only
/// on success.
pub fn int(buf: &mut &[u8], prefix: u32) -> Result<u64, Short> {
    let mut b = *buf;
    match decode_int(&mut b, prefix) {
        Ok(v) => {
            *buf = b;
            Ok(v as u64)
        }
        Err(HpackError::Truncated) => Err(Short::Incomplete),
        Err(_) => Err(Short::TooLarge),
    }
}

/// Appends `value` with a `prefix`-bit prefix under the high bits `flags`.
///
/// berth is built for 64-bit targets, where every QPACK integer (at most 62 bits) fits a
/// `usize`, which is what h2's integer writer takes.
pub fn write_int(out: &mut Vec<u8>, flags: u8, prefix: u32, value: u64) {
    encode_int(out, flags, prefix, value as usize);
}

/// A string literal's header: Huffman-coded or not, and its coded length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrHead {
    /// The H bit.
    pub huffman: bool,
    /// Length in bytes as sent (Huffman-coded, if it is).
    pub len: usize,
}

impl StrHead {
    /// The fewest bytes this string can decode to: its length, or, Huffman-coded, as many
    /// 30-bit codes (the longest, RFC 7541 Appendix B) as its bits hold once at most 7 bits
    /// of padding are set aside. Lets a caller refuse a string that cannot fit before its
    /// bytes have arrived.
    pub fn min_decoded(&self) -> usize {
        if self.huffman {
            (self.len * 8).saturating_sub(7) / 30
        } else {
            self.len
        }
    }
}

/// Reads the header of a string literal with an N-bit prefix (RFC 9204 §4.1.2): the H bit
/// is the prefix's high bit, the length an (N-1)-bit prefix integer.
pub fn str_head(buf: &mut &[u8], prefix: u32) -> Result<StrHead, Short> {
    let huffman = buf.first().is_some_and(|b| b & (1 << (prefix - 1)) != 0);
    let len = int(buf, prefix - 1)?;
    Ok(StrHead {
        huffman,
        len: usize::try_from(len).map_err(|_| Short::TooLarge)?,
    })
}

/// Reads the body of a string whose header is `head` into `out` (cleared first), advancing
/// `*buf` only on success.
pub fn str_body(buf: &mut &[u8], head: StrHead, out: &mut Vec<u8>) -> Result<(), Short> {
    if head.len > buf.len() {
        return Err(Short::Incomplete);
    }
    let (raw, rest) = buf.split_at(head.len);
    out.clear();
    if head.huffman {
        huffman::decode(raw, out).map_err(|_| Short::Huffman)?;
    } else {
        out.extend_from_slice(raw);
    }
    *buf = rest;
    Ok(())
}

/// Reads a whole string literal with an N-bit prefix into `out`.
pub fn string(buf: &mut &[u8], prefix: u32, out: &mut Vec<u8>) -> Result<(), Short> {
    let mut b = *buf;
    let head = str_head(&mut b, prefix)?;
    str_body(&mut b, head, out)?;
    *buf = b;
    Ok(())
}

/// Appends `s` as a string literal with an N-bit prefix under the high bits `flags`,
/// Huffman-coded when `huffman` is set and that is shorter.
pub fn write_string(out: &mut Vec<u8>, flags: u8, prefix: u32, s: &[u8], huffman: bool) {
    let h = 1u8 << (prefix - 1);
    let coded = if huffman {
        huffman::encoded_len(s)
    } else {
        usize::MAX
    };
    if coded < s.len() {
        encode_int(out, flags | h, prefix - 1, coded);
        huffman::encode(s, out);
    } else {
        encode_int(out, flags, prefix - 1, s.len());
        out.extend_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_at_every_prefix_round_trip() {
        let samples: [&[u8]; 4] = [b"", b"custom-key", b"www.example.com", &[0xff; 200]];
        for prefix in 2..=8u32 {
            // The bits above the prefix belong to the representation; they must survive.
            let flags = !((1u16 << prefix) - 1) as u8;
            for s in samples {
                for huff in [false, true] {
                    let mut out = Vec::new();
                    write_string(&mut out, flags, prefix, s, huff);
                    assert_eq!(out[0] & flags, flags);
                    let mut buf = &out[..];
                    let mut back = Vec::new();
                    string(&mut buf, prefix, &mut back).unwrap();
                    assert_eq!(back, s, "prefix {prefix} huffman {huff}");
                    assert!(buf.is_empty());
                    for cut in 0..out.len() {
                        let mut buf = &out[..cut];
                        assert_eq!(string(&mut buf, prefix, &mut back), Err(Short::Incomplete));
                        assert_eq!(buf.len(), cut, "nothing consumed on a short read");
                    }
                }
            }
        }
    }

    #[test]
    fn huffman_is_used_only_when_shorter() {
        let mut out = Vec::new();
        write_string(&mut out, 0, 8, b"www.example.com", true);
        assert_eq!(out[0], 0x80 | 12, "Huffman, 12 bytes (RFC 7541 C.4.1)");
        out.clear();
        write_string(&mut out, 0, 8, &[0xff; 3], true);
        assert_eq!(out[0], 3, "0xff takes 26 bits: raw is shorter");
    }

    #[test]
    fn integers_past_2_32_are_refused_and_short_ones_wait() {
        let mut out = Vec::new();
        write_int(&mut out, 0, 6, u64::from(u32::MAX));
        assert_eq!(int(&mut &out[..], 6), Ok(u64::from(u32::MAX)));
        out.clear();
        write_int(&mut out, 0, 6, 1 << 40);
        assert_eq!(int(&mut &out[..], 6), Err(Short::TooLarge));
        assert_eq!(int(&mut &out[..3], 6), Err(Short::Incomplete));
        assert_eq!(int(&mut &[][..], 6), Err(Short::Incomplete));
    }

    #[test]
    fn min_decoded_is_a_lower_bound() {
        // '\n' has a 30-bit code, the longest: the bound is tight for it.
        for n in [0, 1, 7, 8, 100] {
            let s = vec![b'\n'; n];
            let mut coded = Vec::new();
            huffman::encode(&s, &mut coded);
            let head = StrHead {
                huffman: true,
                len: coded.len(),
            };
            assert!(head.min_decoded() <= n, "{n}");
        }
        let head = StrHead {
            huffman: false,
            len: 9,
        };
        assert_eq!(head.min_decoded(), 9);
    }

    #[test]
    fn bad_huffman_is_refused() {
        // H set, length 1, then eight ones: padding longer than 7 bits.
        let mut buf = &[0x81, 0xff][..];
        assert_eq!(string(&mut buf, 8, &mut Vec::new()), Err(Short::Huffman));
    }
}
