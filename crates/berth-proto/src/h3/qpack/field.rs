//! Encoded field sections (RFC 9204 §4.5): the prefix (Required Insert Count and Base) and
//! the five field line representations. A section arrives whole (a HEADERS frame's
//! payload), so here a short read is an error, not a status.

use super::prim::{self, Short};

/// Required Insert Count as sent (RFC 9204 §4.5.1.1): 0, or the count modulo twice the
/// most entries the table can hold, plus one, so that it stays short on long connections.
/// `max_entries` is `floor(MaxTableCapacity / 32)`, from the decoder's setting.
pub fn encode_insert_count(required: u64, max_entries: u64) -> u64 {
    if required == 0 {
        0
    } else {
        required % (2 * max_entries) + 1
    }
}

/// The Required Insert Count an encoded value stands for, given the decoder's total inserts
/// so far (RFC 9204 §4.5.1.1's algorithm); `None` for a value no conformant encoder could
/// have produced (the caller's QPACK_DECOMPRESSION_FAILED).
pub fn decode_insert_count(encoded: u64, max_entries: u64, total_inserts: u64) -> Option<u64> {
    if encoded == 0 {
        return Some(0);
    }
    let full_range = 2 * max_entries;
    if encoded > full_range {
        return None;
    }
    let max_value = total_inserts + max_entries;
    // The largest value of the count that is 0 modulo the full range.
    let max_wrapped = max_value / full_range * full_range;
    let mut required = max_wrapped + encoded - 1;
    // Past the largest possible value, the encoder's count wrapped one time fewer.
    if required > max_value {
        if required <= full_range {
            return None;
        }
        required -= full_range;
    }
    // 0 is always encoded as 0.
    (required != 0).then_some(required)
}

/// Appends a section's prefix (§4.5.1): the Required Insert Count, then the Base as a sign
/// and a delta from it (§4.5.1.2).
pub fn write_prefix(required: u64, base: u64, max_entries: u64, out: &mut Vec<u8>) {
    prim::write_int(out, 0, 8, encode_insert_count(required, max_entries));
    if base >= required {
        prim::write_int(out, 0, 7, base - required);
    } else {
        prim::write_int(out, 0x80, 7, required - base - 1);
    }
}

/// A section's prefix as read, before the Required Insert Count is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// The Required Insert Count as encoded.
    pub encoded_insert_count: u64,
    /// S: the Base is below the Required Insert Count.
    pub sign: bool,
    /// Delta Base.
    pub delta_base: u64,
}

impl Prefix {
    /// Reads the prefix from the front of `*buf`.
    pub fn parse(buf: &mut &[u8]) -> Result<Prefix, Short> {
        let encoded_insert_count = prim::int(buf, 8)?;
        let sign = buf.first().is_some_and(|b| b & 0x80 != 0);
        let delta_base = prim::int(buf, 7)?;
        Ok(Prefix {
            encoded_insert_count,
            sign,
            delta_base,
        })
    }

    /// The Base, given the decoded Required Insert Count (§4.5.1.2); `None` when it would
    /// be negative ("An endpoint MUST treat a field block with a sign bit of 1 as invalid if
    /// the value of Required Insert Count is less than or equal to the value of Delta
    /// Base").
    pub fn base(&self, required: u64) -> Option<u64> {
        if self.sign {
            required.checked_sub(self.delta_base)?.checked_sub(1)
        } else {
            required.checked_add(self.delta_base)
        }
    }
}

/// One field line representation (RFC 9204 §4.5.2 to §4.5.6). `S` is the strings' type:
/// owned when read, borrowed when written. "Relative" indices count back from the section's
/// Base (0 is the entry just below it); "post-base" ones count up from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldLine<S = Vec<u8>> {
    /// Indexed Field Line (§4.5.2): `1`, T, a 6-bit index.
    Indexed {
        /// T: the static table; else the dynamic one, by relative index.
        static_table: bool,
        /// The index.
        index: u64,
    },
    /// Indexed Field Line with Post-Base Index (§4.5.3): `0001`, a 4-bit index.
    IndexedPostBase {
        /// The post-base index.
        index: u64,
    },
    /// Literal Field Line with Name Reference (§4.5.4): `01`, N, T, a 4-bit index, the
    /// value.
    LiteralNameRef {
        /// N: an intermediary must not index this field on later hops (§7.1.3).
        never_index: bool,
        /// T: the name is the static table's; else the dynamic one's, by relative index.
        static_table: bool,
        /// The index.
        index: u64,
        /// The value.
        value: S,
    },
    /// Literal Field Line with Post-Base Name Reference (§4.5.5): `0000`, N, a 3-bit index,
    /// the value.
    LiteralPostBaseNameRef {
        /// N.
        never_index: bool,
        /// The post-base index.
        index: u64,
        /// The value.
        value: S,
    },
    /// Literal Field Line with Literal Name (§4.5.6): `001`, N, the name with a 4-bit
    /// prefix, the value.
    LiteralName {
        /// N.
        never_index: bool,
        /// The name.
        name: S,
        /// The value.
        value: S,
    },
}

impl FieldLine {
    /// Reads the representation at the front of `*buf`, advancing it.
    pub fn parse(buf: &mut &[u8]) -> Result<FieldLine, Short> {
        let first = *buf.first().ok_or(Short::Incomplete)?;
        let never_index = |bit: u8| first & bit != 0;
        Ok(if first & 0x80 != 0 {
            FieldLine::Indexed {
                static_table: first & 0x40 != 0,
                index: prim::int(buf, 6)?,
            }
        } else if first & 0x40 != 0 {
            let index = prim::int(buf, 4)?;
            let mut value = Vec::new();
            prim::string(buf, 8, &mut value)?;
            FieldLine::LiteralNameRef {
                never_index: never_index(0x20),
                static_table: first & 0x10 != 0,
                index,
                value,
            }
        } else if first & 0x20 != 0 {
            let mut name = Vec::new();
            prim::string(buf, 4, &mut name)?;
            let mut value = Vec::new();
            prim::string(buf, 8, &mut value)?;
            FieldLine::LiteralName {
                never_index: never_index(0x10),
                name,
                value,
            }
        } else if first & 0x10 != 0 {
            FieldLine::IndexedPostBase {
                index: prim::int(buf, 4)?,
            }
        } else {
            let index = prim::int(buf, 3)?;
            let mut value = Vec::new();
            prim::string(buf, 8, &mut value)?;
            FieldLine::LiteralPostBaseNameRef {
                never_index: never_index(0x08),
                index,
                value,
            }
        })
    }
}

impl<S: AsRef<[u8]>> FieldLine<S> {
    /// Appends the representation; strings are Huffman-coded when `huffman` is set and that
    /// is shorter.
    pub fn write(&self, huffman: bool, out: &mut Vec<u8>) {
        let n = |set: bool, bit: u8| if set { bit } else { 0 };
        match self {
            FieldLine::Indexed {
                static_table,
                index,
            } => prim::write_int(out, 0x80 | n(*static_table, 0x40), 6, *index),
            FieldLine::IndexedPostBase { index } => prim::write_int(out, 0x10, 4, *index),
            FieldLine::LiteralNameRef {
                never_index,
                static_table,
                index,
                value,
            } => {
                let flags = 0x40 | n(*never_index, 0x20) | n(*static_table, 0x10);
                prim::write_int(out, flags, 4, *index);
                prim::write_string(out, 0, 8, value.as_ref(), huffman);
            }
            FieldLine::LiteralPostBaseNameRef {
                never_index,
                index,
                value,
            } => {
                prim::write_int(out, n(*never_index, 0x08), 3, *index);
                prim::write_string(out, 0, 8, value.as_ref(), huffman);
            }
            FieldLine::LiteralName {
                never_index,
                name,
                value,
            } => {
                prim::write_string(out, 0x20 | n(*never_index, 0x10), 4, name.as_ref(), huffman);
                prim::write_string(out, 0, 8, value.as_ref(), huffman);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §4.5.1.1's example: a 100-byte table (6 entries, counts modulo 12), 10 inserts
    /// received, encoded 4 stands for 9.
    #[test]
    fn the_rfcs_insert_count_example() {
        assert_eq!(decode_insert_count(4, 3, 10), Some(9));
        assert_eq!(encode_insert_count(9, 3), 4);
    }

    /// Every count an encoder can send decodes back: at most `max_entries` past the inserts
    /// the decoder has, and less than `max_entries` behind them (older entries than that
    /// are evicted, so no section can need them).
    #[test]
    fn insert_counts_round_trip_across_wraps() {
        for max_entries in [1u64, 2, 3, 6, 128] {
            for total in 0..(6 * max_entries) {
                let lowest = (total + 1).saturating_sub(max_entries).max(1);
                for required in lowest..=total + max_entries {
                    let enc = encode_insert_count(required, max_entries);
                    assert_eq!(
                        decode_insert_count(enc, max_entries, total),
                        Some(required),
                        "max {max_entries} total {total} required {required}"
                    );
                }
            }
        }
        assert_eq!(decode_insert_count(0, 6, 100), Some(0));
    }

    #[test]
    fn impossible_insert_counts_are_refused() {
        // Past the full range.
        assert_eq!(decode_insert_count(13, 6, 0), None);
        // A table of capacity 0 has no range at all.
        assert_eq!(decode_insert_count(1, 0, 0), None);
        // With nothing inserted, 12 stands for 11 > 6 = max value, and 11 <= 12: invalid.
        assert_eq!(decode_insert_count(12, 6, 0), None);
        // With 6 inserts, an encoded 1 stands for 12: the most an encoder can be ahead.
        assert_eq!(decode_insert_count(1, 6, 6), Some(12));
    }

    #[test]
    fn base_follows_the_sign() {
        let p = |sign, delta_base| Prefix {
            encoded_insert_count: 0,
            sign,
            delta_base,
        };
        assert_eq!(p(false, 2).base(9), Some(11));
        // §4.5.1.2's example: Required Insert Count 9, sign 1, delta 2: Base 6.
        assert_eq!(p(true, 2).base(9), Some(6));
        assert_eq!(p(true, 8).base(9), Some(0));
        assert_eq!(
            p(true, 9).base(9),
            None,
            "RIC <= Delta Base with the sign set"
        );
        assert_eq!(p(true, 0).base(0), None);
    }

    #[test]
    fn every_representation_round_trips_and_reads_short_as_incomplete() {
        let lines: Vec<FieldLine> = vec![
            FieldLine::Indexed {
                static_table: true,
                index: 98,
            },
            FieldLine::Indexed {
                static_table: false,
                index: 1000,
            },
            FieldLine::IndexedPostBase { index: 20 },
            FieldLine::LiteralNameRef {
                never_index: true,
                static_table: true,
                index: 1,
                value: b"/index.html".to_vec(),
            },
            FieldLine::LiteralNameRef {
                never_index: false,
                static_table: false,
                index: 16,
                value: vec![],
            },
            FieldLine::LiteralPostBaseNameRef {
                never_index: true,
                index: 9,
                value: b"v".to_vec(),
            },
            FieldLine::LiteralName {
                never_index: false,
                name: b"custom-key".to_vec(),
                value: b"custom-value".to_vec(),
            },
            FieldLine::LiteralName {
                never_index: true,
                name: b"authorization".to_vec(),
                value: b"secret".to_vec(),
            },
        ];
        for line in lines {
            for huffman in [false, true] {
                let mut out = Vec::new();
                line.write(huffman, &mut out);
                let mut buf = &out[..];
                assert_eq!(FieldLine::parse(&mut buf), Ok(line.clone()));
                assert!(buf.is_empty());
                for cut in 0..out.len() {
                    let mut buf = &out[..cut];
                    assert_eq!(
                        FieldLine::parse(&mut buf),
                        Err(Short::Incomplete),
                        "{line:?}"
                    );
                }
            }
        }
    }

    /// B.1's section: prefix 0000, then `:path=/index.html` by static name reference.
    #[test]
    fn appendix_b1_bytes() {
        let bytes = [
            0x00, 0x00, 0x51, 0x0b, 0x2f, 0x69, 0x6e, 0x64, 0x65, 0x78, 0x2e, 0x68, 0x74, 0x6d,
            0x6c,
        ];
        let mut buf = &bytes[..];
        let prefix = Prefix::parse(&mut buf).unwrap();
        assert_eq!(prefix.encoded_insert_count, 0);
        assert_eq!(prefix.base(0), Some(0));
        let line = FieldLine::parse(&mut buf).unwrap();
        assert_eq!(
            line,
            FieldLine::LiteralNameRef {
                never_index: false,
                static_table: true,
                index: 1,
                value: b"/index.html".to_vec()
            }
        );
        let mut out = Vec::new();
        write_prefix(0, 0, 6, &mut out);
        line.write(false, &mut out);
        assert_eq!(out, bytes);
    }
}
