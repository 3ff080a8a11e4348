//! QUIC variable-length integers (RFC 9000 §16), the integers of every HTTP/3 frame header,
//! frame field, setting and unidirectional stream type.
//!
//! The two most significant bits of the first byte give the length (1, 2, 4 or 8 bytes); the
//! rest, big-endian, is the value, so the largest is 2^62 - 1. Every bit pattern is a valid
//! integer, so reading can only lack bytes: [`read`] answers `None` for "need more", which a
//! caller whose stream bytes come in pieces treats as a status, not an error. Encodings longer
//! than necessary are accepted, as §16 allows (it asks for the shortest only where a frame
//! type is concerned, which is the caller's business).

/// The largest value a variable-length integer holds (2^62 - 1).
pub const MAX: u64 = (1 << 62) - 1;

/// The longest encoding, in bytes.
pub const MAX_LEN: usize = 8;

/// The encoded length announced by a first byte (its two high bits).
pub fn len_of(first: u8) -> usize {
    1 << (first >> 6)
}

/// Reads the integer at the front of `buf`: `Some((value, bytes used))`, or `None` when `buf`
/// ends before the integer does (give it more bytes and call again).
pub fn read(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = len_of(first);
    let bytes = buf.get(..len)?;
    let mut value = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        value = (value << 8) | u64::from(b);
    }
    Some((value, len))
}

/// Reads the integer at the front of `*buf` and advances `*buf` past it; `None` (and `*buf`
/// untouched) when it is incomplete.
pub fn take(buf: &mut &[u8]) -> Option<u64> {
    let (value, len) = read(buf)?;
    *buf = &buf[len..];
    Some(value)
}

/// The length of the shortest encoding of `value`.
///
/// # Panics
///
/// If `value` is past [`MAX`]: no QUIC integer holds it, so asking is a caller's bug (every
/// value berth writes is a length, an id or a setting below it by construction).
pub fn size(value: u64) -> usize {
    match value {
        0..=0x3f => 1,
        0x40..=0x3fff => 2,
        0x4000..=0x3fff_ffff => 4,
        0x4000_0000..=MAX => 8,
        _ => panic!("{value} does not fit a QUIC variable-length integer (RFC 9000 §16)"),
    }
}

/// Appends the shortest encoding of `value` to `out`.
///
/// # Panics
///
/// If `value` is past [`MAX`] (see [`size`]).
pub fn write(value: u64, out: &mut Vec<u8>) {
    match size(value) {
        1 => out.push(value as u8),
        2 => out.extend_from_slice(&(0x4000 | value as u16).to_be_bytes()),
        4 => out.extend_from_slice(&(0x8000_0000 | value as u32).to_be_bytes()),
        _ => out.extend_from_slice(&(0xc000_0000_0000_0000 | value).to_be_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9000 Appendix A.1's sample encodings, including the non-minimal two-byte 37.
    const SAMPLES: [(&[u8], u64); 5] = [
        (
            &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
            151_288_809_941_952_652,
        ),
        (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
        (&[0x7b, 0xbd], 15_293),
        (&[0x25], 37),
        (&[0x40, 0x25], 37),
    ];

    #[test]
    fn rfc9000_samples_read() {
        for (bytes, value) in SAMPLES {
            assert_eq!(read(bytes), Some((value, bytes.len())), "{bytes:02x?}");
        }
    }

    #[test]
    fn rfc9000_samples_write_shortest() {
        for (bytes, value) in &SAMPLES[..4] {
            let mut out = Vec::new();
            write(*value, &mut out);
            assert_eq!(&out, bytes);
            assert_eq!(size(*value), bytes.len());
        }
    }

    #[test]
    fn every_length_boundary_round_trips() {
        let values = [
            0,
            0x3f,
            0x40,
            0x3fff,
            0x4000,
            0x3fff_ffff,
            0x4000_0000,
            MAX - 1,
            MAX,
        ];
        for v in values {
            let mut out = Vec::new();
            write(v, &mut out);
            assert_eq!(out.len(), size(v));
            assert_eq!(read(&out), Some((v, out.len())), "{v:#x}");
            // Trailing bytes are left alone.
            out.extend_from_slice(&[0xff, 0xff]);
            assert_eq!(read(&out), Some((v, size(v))));
        }
    }

    #[test]
    fn partial_input_is_a_status() {
        for (bytes, value) in SAMPLES {
            for cut in 0..bytes.len() {
                assert_eq!(read(&bytes[..cut]), None, "{bytes:02x?} cut at {cut}");
                let mut rest = &bytes[..cut];
                assert_eq!(take(&mut rest), None);
                assert_eq!(rest.len(), cut, "an incomplete read consumes nothing");
            }
            let mut rest = bytes;
            assert_eq!(take(&mut rest), Some(value));
            assert!(rest.is_empty());
        }
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn writing_past_max_is_a_bug() {
        write(MAX + 1, &mut Vec::new());
    }
}
