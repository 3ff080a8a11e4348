//! The Huffman code of HPACK (RFC 7541 §5.2, Appendix B), both ways.
//!
//! The code is canonical: within each length, codes are consecutive and in symbol order, and
//! each length's first code follows the last code of the length before, shifted. So the table
//! below holds only each symbol's code length (Appendix B's last column); the codes themselves
//! are derived from it at compile time, and a test checks a sample of them against the RFC's
//! hex column. Decoding walks the code bit by bit: at each length, a code that falls inside
//! that length's range is a symbol. That is about a dozen operations per bit, simple enough
//! to trust; a table-driven decoder (four bits at a time, as nghttp2's) is the later speed-up.

/// Code length in bits of each symbol, 0..=255 then EOS (256), from RFC 7541 Appendix B.
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// The end-of-string symbol: never valid inside a string (RFC 7541 §5.2).
const EOS: u16 = 256;

/// Longest code, in bits.
const MAX_LEN: usize = 30;

/// The canonical code, derived from [`LENGTHS`].
struct Canon {
    /// Each symbol's code, right-aligned.
    codes: [u32; 257],
    /// The first code of each length.
    first: [u32; MAX_LEN + 1],
    /// How many codes each length has.
    count: [u32; MAX_LEN + 1],
    /// Where each length's symbols start in `sorted`.
    offset: [u32; MAX_LEN + 1],
    /// Symbols in code order (by length, then symbol).
    sorted: [u16; 257],
}

const fn canon() -> Canon {
    let mut c = Canon {
        codes: [0; 257],
        first: [0; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        offset: [0; MAX_LEN + 1],
        sorted: [0; 257],
    };
    let mut code: u32 = 0;
    let mut prev_len: usize = 0;
    let mut k = 0;
    let mut len = 1;
    while len <= MAX_LEN {
        let mut sym = 0;
        while sym < 257 {
            if LENGTHS[sym] as usize == len {
                if k > 0 {
                    code = (code + 1) << (len - prev_len);
                }
                if c.count[len] == 0 {
                    c.first[len] = code;
                    c.offset[len] = k as u32;
                }
                c.count[len] += 1;
                c.codes[sym] = code;
                c.sorted[k] = sym as u16;
                prev_len = len;
                k += 1;
            }
            sym += 1;
        }
        len += 1;
    }
    c
}

static CANON: Canon = canon();

/// Why a Huffman-coded string was refused (RFC 7541 §5.2): each is a decoding error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HuffmanError {
    /// The string holds the EOS symbol.
    Eos,
    /// The padding is longer than 7 bits, or not the EOS code's leading ones.
    Padding,
}

/// Decodes `input`, appending the symbols to `out`.
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let c = &CANON;
    let mut code: u32 = 0;
    let mut len: usize = 0;
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            let first = c.first[len];
            if code >= first && code - first < c.count[len] {
                let sym = c.sorted[(c.offset[len] + code - first) as usize];
                if sym == EOS {
                    return Err(HuffmanError::Eos);
                }
                out.push(sym as u8);
                code = 0;
                len = 0;
            } else if len == MAX_LEN {
                // Every 30-bit pattern is a code or the prefix of none: the code is complete
                // (its Kraft sum is 1), so this is unreachable for valid lengths.
                return Err(HuffmanError::Eos);
            }
        }
    }
    // What is left is padding: at most 7 bits, all ones (the EOS code's most significant
    // bits).
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

/// The length in bytes of `input` once Huffman-coded.
pub fn encoded_len(input: &[u8]) -> usize {
    let bits: usize = input.iter().map(|&b| LENGTHS[b as usize] as usize).sum();
    bits.div_ceil(8)
}

/// Appends the Huffman coding of `input` to `out`, padded with ones.
pub fn encode(input: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in input {
        let len = u32::from(LENGTHS[b as usize]);
        acc = (acc << len) | u64::from(CANON.codes[b as usize]);
        bits += len;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        // Only the low `bits` bits are still to be written; dropping the rest keeps `acc`
        // from overflowing (at most 7 + 30 bits are ever held).
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1u64 << pad) - 1)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample of Appendix B's hex column: the derived codes must be the RFC's.
    #[test]
    fn derived_codes_are_the_rfcs() {
        let sample: [(usize, u32); 12] = [
            (0, 0x1ff8),
            (1, 0x7fffd8),
            (10, 0x3ffffffc),
            (b' ' as usize, 0x14),
            (b'0' as usize, 0x0),
            (b'a' as usize, 0x3),
            (b'X' as usize, 0xfc),
            (b'\\' as usize, 0x7fff0),
            (127, 0xffffffc),
            (195, 0x7fff1),
            (255, 0x3ffffee),
            (256, 0x3fffffff),
        ];
        for (sym, code) in sample {
            assert_eq!(CANON.codes[sym], code, "symbol {sym}");
        }
        let kraft: f64 = LENGTHS.iter().map(|&l| 2f64.powi(-i32::from(l))).sum();
        assert!((kraft - 1.0).abs() < 1e-12);
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The Huffman strings of RFC 7541 C.4 and C.6, both ways.
    #[test]
    fn rfc_strings_round_trip() {
        let cases = [
            ("www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),
            ("no-cache", "a8eb10649cbf"),
            ("custom-key", "25a849e95ba97d7f"),
            ("custom-value", "25a849e95bb8e8b4bf"),
            ("302", "6402"),
            ("307", "640eff"),
            ("private", "aec3771a4b"),
            (
                "Mon, 21 Oct 2013 20:13:21 GMT",
                "d07abe941054d444a8200595040b8166e082a62d1bff",
            ),
            (
                "https://www.example.com",
                "9d29ad171863c78f0b97c8e9ae82ae43d3",
            ),
            ("gzip", "9bd9ab"),
        ];
        for (plain, coded) in cases {
            let mut out = Vec::new();
            encode(plain.as_bytes(), &mut out);
            assert_eq!(out, hex(coded), "{plain}");
            assert_eq!(encoded_len(plain.as_bytes()), out.len());
            let mut back = Vec::new();
            decode(&out, &mut back).unwrap();
            assert_eq!(back, plain.as_bytes());
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let mut out = Vec::new();
        encode(&all, &mut out);
        let mut back = Vec::new();
        decode(&out, &mut back).unwrap();
        assert_eq!(back, all);
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // Eight bits of ones: padding longer than 7 bits.
        assert_eq!(decode(&[0xff], &mut Vec::new()), Err(HuffmanError::Padding));
        // 'a' (00011) then 000 padding: padding not all ones.
        assert_eq!(
            decode(&[0b0001_1000], &mut Vec::new()),
            Err(HuffmanError::Padding)
        );
        // EOS in full (30 ones), then two ones of padding.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()),
            Err(HuffmanError::Eos)
        );
    }
}
