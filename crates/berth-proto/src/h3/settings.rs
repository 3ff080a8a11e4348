//! The SETTINGS frame's payload (RFC 9114 §7.2.4, RFC 9204 §5): the three settings HTTP/3 and
//! QPACK define, read with the checks the RFCs ask for and written with a reserved setting so
//! that peers keep ignoring what they do not know.

use super::error::{grease, Error, ErrorCode, H3Error};
use super::frame::{self, kind};
use super::varint;

/// Setting identifiers.
pub mod id {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY (RFC 9204 §5): the largest dynamic table the
    /// sender's decoder allows. Default 0.
    pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
    /// SETTINGS_MAX_FIELD_SECTION_SIZE (RFC 9114 §7.2.4.1): the largest field section the
    /// sender accepts, each field counted as name + value + 32. Default unlimited.
    pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
    /// SETTINGS_QPACK_BLOCKED_STREAMS (RFC 9204 §5): how many streams the sender's decoder
    /// lets be blocked at once. Default 0.
    pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;

    /// Whether `id` is one of HTTP/2's settings that HTTP/3 reserved (RFC 9114 §7.2.4.1,
    /// §11.2.2: 0x00 and 0x02 to 0x05): never sent, a connection error of type
    /// H3_SETTINGS_ERROR when received.
    pub fn is_http2_only(id: u64) -> bool {
        matches!(id, 0x00 | 0x02..=0x05)
    }
}

/// One side's settings, as sent in its SETTINGS frame. The defaults are the RFCs' initial
/// values, which hold until the peer's frame arrives (RFC 9114 §7.2.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY.
    pub qpack_max_table_capacity: u64,
    /// SETTINGS_MAX_FIELD_SECTION_SIZE; `None` is the default, unlimited.
    pub max_field_section_size: Option<u64>,
    /// SETTINGS_QPACK_BLOCKED_STREAMS.
    pub qpack_blocked_streams: u64,
}

impl Settings {
    /// Reads a SETTINGS frame's payload. Unknown and reserved identifiers are ignored
    /// (§7.2.4: "MUST ignore any parameter with an identifier it does not understand").
    ///
    /// Refused, as connection errors: a payload that ends inside a setting (H3_FRAME_ERROR,
    /// §7.1); an identifier that occurs twice, or one of HTTP/2's (H3_SETTINGS_ERROR,
    /// §7.2.4, §7.2.4.1; for duplicates the RFC says MAY, berth does, so that a peer cannot
    /// make the two sides disagree on which value counts).
    pub fn parse(payload: &[u8]) -> Result<Settings, H3Error> {
        let mut s = Settings::default();
        // Each setting takes at least two bytes, so this is bounded by bytes that are here.
        let mut seen: Vec<u64> = Vec::with_capacity(payload.len() / 2);
        let mut rest = payload;
        while !rest.is_empty() {
            let (Some(ident), Some(value)) = (varint::take(&mut rest), varint::take(&mut rest))
            else {
                return Err(H3Error::conn(
                    ErrorCode::H3_FRAME_ERROR,
                    "SETTINGS ends inside a setting",
                ));
            };
            if id::is_http2_only(ident) {
                return Err(H3Error::conn(
                    ErrorCode::H3_SETTINGS_ERROR,
                    "an HTTP/2 setting in SETTINGS",
                ));
            }
            seen.push(ident);
            match ident {
                id::QPACK_MAX_TABLE_CAPACITY => s.qpack_max_table_capacity = value,
                id::MAX_FIELD_SECTION_SIZE => s.max_field_section_size = Some(value),
                id::QPACK_BLOCKED_STREAMS => s.qpack_blocked_streams = value,
                _ => {}
            }
        }
        seen.sort_unstable();
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(H3Error::conn(
                ErrorCode::H3_SETTINGS_ERROR,
                "a setting occurs twice in SETTINGS",
            ));
        }
        Ok(s)
    }

    /// Appends the payload: each setting that differs from its default, then, when `grease`
    /// is given, one reserved setting (`0x1f * N + 0x21`, N and the value taken from
    /// `grease`), as §7.2.4.1 asks endpoints to send ("SHOULD include at least one"). The
    /// caller picks `grease` at random; this module has no randomness of its own.
    ///
    /// A value past 2^62 - 1 is the caller's mistake ([`Error::Misuse`]); nothing is written
    /// then.
    pub fn write_payload(&self, grease_seed: Option<u64>, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut pairs: [(u64, u64); 4] = [(0, 0); 4];
        let mut n = 0;
        let mut add = |ident: u64, value: u64| {
            pairs[n] = (ident, value);
            n += 1;
        };
        if self.qpack_max_table_capacity != 0 {
            add(id::QPACK_MAX_TABLE_CAPACITY, self.qpack_max_table_capacity);
        }
        if let Some(max) = self.max_field_section_size {
            add(id::MAX_FIELD_SECTION_SIZE, max);
        }
        if self.qpack_blocked_streams != 0 {
            add(id::QPACK_BLOCKED_STREAMS, self.qpack_blocked_streams);
        }
        if let Some(seed) = grease_seed {
            // N below 2^20 keeps the identifier at four bytes; the value is what is left.
            let ident = grease(seed & 0xf_ffff).unwrap_or(0x21);
            add(ident, (seed >> 20) & 0x3fff_ffff);
        }
        if pairs[..n].iter().any(|&(_, v)| v > varint::MAX) {
            return Err(Error::Misuse("a setting value past 2^62 - 1"));
        }
        for &(ident, value) in &pairs[..n] {
            varint::write(ident, out);
            varint::write(value, out);
        }
        Ok(())
    }

    /// Appends a whole SETTINGS frame (header and payload); see
    /// [`write_payload`](Settings::write_payload).
    pub fn write_frame(&self, grease_seed: Option<u64>, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut payload = Vec::with_capacity(24);
        self.write_payload(grease_seed, &mut payload)?;
        frame::write_header(kind::SETTINGS, payload.len() as u64, out);
        out.extend_from_slice(&payload);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h3::error::is_grease;

    fn payload(pairs: &[(u64, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(i, v) in pairs {
            varint::write(i, &mut out);
            varint::write(v, &mut out);
        }
        out
    }

    #[test]
    fn round_trip_with_grease() {
        let s = Settings {
            qpack_max_table_capacity: 4096,
            max_field_section_size: Some(16 * 1024),
            qpack_blocked_streams: 100,
        };
        for seed in [None, Some(0), Some(12_345), Some(u64::MAX)] {
            let mut out = Vec::new();
            s.write_payload(seed, &mut out).unwrap();
            assert_eq!(Settings::parse(&out), Ok(s), "seed {seed:?}");
        }
        let mut out = Vec::new();
        Settings::default().write_payload(None, &mut out).unwrap();
        assert!(out.is_empty(), "defaults are not sent");
    }

    #[test]
    fn the_grease_setting_is_reserved_and_ignored() {
        let mut out = Vec::new();
        Settings::default()
            .write_payload(Some(0xabc_def12), &mut out)
            .unwrap();
        let mut rest = &out[..];
        let ident = varint::take(&mut rest).unwrap();
        assert!(is_grease(ident), "{ident:#x}");
        assert_eq!(Settings::parse(&out), Ok(Settings::default()));
    }

    #[test]
    fn unknown_settings_are_ignored() {
        let p = payload(&[
            (0x08, 1),
            (0x33, 1),
            (0x21, 7),
            (0x01, 100),
            (0x1234_5678, 9),
        ]);
        let s = Settings::parse(&p).unwrap();
        assert_eq!(s.qpack_max_table_capacity, 100);
    }

    #[test]
    fn duplicates_are_refused() {
        for dup in [0x01, 0x06, 0x07, 0x21, 0x99] {
            let p = payload(&[(dup, 1), (0x10, 5000), (dup, 2)]);
            let e = Settings::parse(&p).unwrap_err();
            assert_eq!(e.code, ErrorCode::H3_SETTINGS_ERROR, "{dup:#x}");
            assert!(!e.stream);
        }
    }

    #[test]
    fn http2_settings_are_refused() {
        for h2 in [0x00, 0x02, 0x03, 0x04, 0x05] {
            let e = Settings::parse(&payload(&[(0x01, 0), (h2, 0)])).unwrap_err();
            assert_eq!(e.code, ErrorCode::H3_SETTINGS_ERROR, "{h2:#x}");
        }
    }

    #[test]
    fn a_truncated_setting_is_a_frame_error() {
        let p = payload(&[(0x01, 4096), (0x07, 100)]);
        for cut in 1..p.len() {
            let whole_settings = [0, 3, p.len()];
            if whole_settings.contains(&cut) {
                continue;
            }
            let e = Settings::parse(&p[..cut]).unwrap_err();
            assert_eq!(e.code, ErrorCode::H3_FRAME_ERROR, "cut at {cut}");
        }
    }

    #[test]
    fn values_past_the_varint_range_are_misuse() {
        let s = Settings {
            qpack_max_table_capacity: varint::MAX + 1,
            ..Settings::default()
        };
        let mut out = Vec::new();
        assert!(matches!(
            s.write_payload(None, &mut out),
            Err(Error::Misuse(_))
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn a_whole_frame() {
        let s = Settings {
            qpack_max_table_capacity: 0,
            max_field_section_size: Some(0x40),
            qpack_blocked_streams: 0,
        };
        let mut out = Vec::new();
        s.write_frame(None, &mut out).unwrap();
        // Type 0x04, length 3, then 0x06 = 0x40 (two bytes: 0x4040).
        assert_eq!(out, [0x04, 0x03, 0x06, 0x40, 0x40]);
    }
}
