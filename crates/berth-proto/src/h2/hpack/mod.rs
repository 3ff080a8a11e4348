//! HPACK (RFC 7541), berth's own: header blocks in, bounded field lists out, and the other way.
//!
//! Why not a crate: the HPACK crates that exist are either unmaintained (`hpack` 0.3, 2015;
//! `hpack_codec`, 2018; `httlib-hpack`, 2021) or tied to a project that stopped (`fluke-hpack`
//! / `loona-hpack`, which also pull in `tracing` and `thiserror`, assert instead of returning
//! an error on an oversized table size, encode no Huffman, and have no header-list limits).
//! None bounds what a peer can make it decode, which is the whole point here. HPACK is small
//! (integers, strings, two tables, one Huffman code) and fully specified by test vectors, so
//! berth writes it and checks it against every example of RFC 7541 Appendix C.
//!
//! The decoder is bounded by the caller's [`ListLimits`]: the decoded list's size counted as
//! RFC 7541 §4.1 counts a table entry (name + value + 32 bytes), and the number of fields. A
//! block that goes past either is still decoded to its end, because the dynamic table must
//! stay in step with the peer's encoder, but no more fields are kept: the work is bounded by
//! the block's own length, and the memory by the limits (the HPACK bomb: a few bytes that
//! index a large table entry thousands of times). Dynamic table size updates above the size
//! berth allows ([`Decoder::new`]) are decoding errors (RFC 7541 §6.3).
//!
//! [`encode`] never adds to the dynamic table (static-table references and literals "without
//! indexing"), so it needs no state. [`Encoder`] is the exception, for the few fields every
//! response of a connection repeats (`server`, `date`, `content-type`): it indexes them, so that
//! from the second response on each is one byte, kept within the table size the peer allows
//! (and announced to it when that changes, §4.2). Strings are Huffman-coded when shorter.

pub mod huffman;

use std::collections::VecDeque;

/// RFC 7541 §4.1: each entry costs its name and value lengths plus 32 bytes.
pub const ENTRY_OVERHEAD: usize = 32;

/// The static table (RFC 7541 Appendix A), index 1 first.
pub const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Why a header block could not be decoded. Each is a connection error of type
/// COMPRESSION_ERROR (RFC 9113 §4.3): the decoder's state no longer matches the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside a representation.
    Truncated,
    /// An integer too large for any sane use (past 2^32).
    Integer,
    /// Index 0, or past the end of both tables.
    Index,
    /// A Huffman-coded string that does not decode.
    Huffman(huffman::HuffmanError),
    /// A dynamic table size update above the allowed size, or after the block's first field.
    SizeUpdate,
}

/// Bounds on one decoded header list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListLimits {
    /// Largest list size, each field counted as name + value + 32 bytes (RFC 7541 §4.1, as
    /// SETTINGS_MAX_HEADER_LIST_SIZE counts it, RFC 9113 §6.5.2).
    pub max_size: usize,
    /// Most fields.
    pub max_fields: usize,
}

/// One decoded field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field name, as sent (validation is the caller's).
    pub name: Vec<u8>,
    /// The field value.
    pub value: Vec<u8>,
}

/// What decoding a block found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Decoded {
    /// The whole list's size (as [`ListLimits::max_size`] counts), kept fields or not.
    pub size: usize,
    /// The list went past a limit: only the fields before it were kept.
    pub over: bool,
}

/// The dynamic table (RFC 7541 §2.3.2, §4): newest entry first.
#[derive(Debug, Default)]
struct Table {
    entries: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max: usize,
}

impl Table {
    fn new(max: usize) -> Self {
        Table {
            entries: VecDeque::new(),
            size: 0,
            max,
        }
    }

    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            let Some((n, v)) = self.entries.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }

    fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }

    /// RFC 7541 §4.4: an entry larger than the table empties it and is not added.
    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max - size);
        self.size += size;
        self.entries.push_front((name, value));
    }

    /// The entry at `index` in the combined index space (static first, then dynamic).
    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::Index),
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                Ok((n.as_bytes(), v.as_bytes()))
            }
            _ => self
                .entries
                .get(index - 62)
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .ok_or(HpackError::Index),
        }
    }
}

/// Reads an integer with an `n`-bit prefix (RFC 7541 §5.1) from the front of `buf`.
pub fn decode_int(buf: &mut &[u8], n: u32) -> Result<usize, HpackError> {
    let (&first, rest) = buf.split_first().ok_or(HpackError::Truncated)?;
    *buf = rest;
    let max_prefix = (1usize << n) - 1;
    let mut value = usize::from(first) & max_prefix;
    if value < max_prefix {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let (&b, rest) = buf.split_first().ok_or(HpackError::Truncated)?;
        *buf = rest;
        // Five continuation bytes carry 35 bits: enough for anything up to 2^32, and a
        // longer run is a peer making the decoder loop (or overflow) for nothing.
        if shift > 28 {
            return Err(HpackError::Integer);
        }
        value += usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    if value > u32::MAX as usize {
        return Err(HpackError::Integer);
    }
    Ok(value)
}

/// Appends `value` with an `n`-bit prefix whose high bits are `flags`.
pub fn encode_int(out: &mut Vec<u8>, flags: u8, n: u32, mut value: usize) {
    let max_prefix = (1usize << n) - 1;
    if value < max_prefix {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max_prefix as u8);
    value -= max_prefix;
    while value >= 128 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads a string literal (RFC 7541 §5.2) into `out` (cleared first).
fn decode_str(buf: &mut &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let huff = buf.first().is_some_and(|b| b & 0x80 != 0);
    let len = decode_int(buf, 7)?;
    if len > buf.len() {
        return Err(HpackError::Truncated);
    }
    let (raw, rest) = buf.split_at(len);
    *buf = rest;
    out.clear();
    if huff {
        huffman::decode(raw, out).map_err(HpackError::Huffman)
    } else {
        out.extend_from_slice(raw);
        Ok(())
    }
}

/// Appends `s` as a string literal, Huffman-coded if that is shorter.
pub fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        encode_int(out, 0x80, 7, coded);
        huffman::encode(s, out);
    } else {
        encode_int(out, 0, 7, s.len());
        out.extend_from_slice(s);
    }
}

/// The decoding side of one connection: its dynamic table lives as long as the connection.
#[derive(Debug)]
pub struct Decoder {
    table: Table,
    /// The largest table the peer may ask for: berth's SETTINGS_HEADER_TABLE_SIZE.
    allowed: usize,
}

impl Decoder {
    /// A decoder whose peer may size the dynamic table up to `allowed` bytes (what berth
    /// advertised as SETTINGS_HEADER_TABLE_SIZE; the table starts at 4096 per RFC 9113 §6.5.2
    /// until the peer sends a size update, capped at `allowed`).
    pub fn new(allowed: usize) -> Self {
        Decoder {
            table: Table::new(allowed.min(4096)),
            allowed,
        }
    }

    /// The dynamic table's current size in bytes (RFC 7541 §4.1).
    pub fn table_size(&self) -> usize {
        self.table.size
    }

    /// Decodes a whole header block, appending the fields it keeps to `out` (see the
    /// [module docs](self) for what happens past `limits`).
    pub fn decode(
        &mut self,
        mut buf: &[u8],
        limits: ListLimits,
        out: &mut Vec<Field>,
    ) -> Result<Decoded, HpackError> {
        let mut found = Decoded::default();
        let mut fields = 0usize;
        let mut first = true;
        let mut name = Vec::new();
        let mut value = Vec::new();
        while let Some(&b) = buf.first() {
            if b & 0xe0 == 0x20 {
                // Dynamic table size update: only before the block's first field (§4.2).
                if !first {
                    return Err(HpackError::SizeUpdate);
                }
                let size = decode_int(&mut buf, 5)?;
                if size > self.allowed {
                    return Err(HpackError::SizeUpdate);
                }
                self.table.set_max(size);
                continue;
            }
            first = false;
            let keep;
            if b & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = decode_int(&mut buf, 7)?;
                let (n, v) = self.table.get(index)?;
                let size = n.len() + v.len() + ENTRY_OVERHEAD;
                found.size = found.size.saturating_add(size);
                fields += 1;
                keep = !found.over && found.size <= limits.max_size && fields <= limits.max_fields;
                if keep {
                    out.push(Field {
                        name: n.to_vec(),
                        value: v.to_vec(),
                    });
                }
            } else {
                // Literal: with incremental indexing (01), without (0000), never (0001).
                let (prefix, index_it) = if b & 0x40 != 0 { (6, true) } else { (4, false) };
                let index = decode_int(&mut buf, prefix)?;
                if index == 0 {
                    decode_str(&mut buf, &mut name)?;
                } else {
                    let (n, _) = self.table.get(index)?;
                    name.clear();
                    name.extend_from_slice(n);
                }
                decode_str(&mut buf, &mut value)?;
                let size = name.len() + value.len() + ENTRY_OVERHEAD;
                found.size = found.size.saturating_add(size);
                fields += 1;
                keep = !found.over && found.size <= limits.max_size && fields <= limits.max_fields;
                if keep {
                    out.push(Field {
                        name: name.clone(),
                        value: value.clone(),
                    });
                }
                if index_it {
                    self.table
                        .insert(std::mem::take(&mut name), std::mem::take(&mut value));
                }
            }
            if !keep {
                found.over = true;
            }
        }
        Ok(found)
    }
}

/// Encodes one header block into `out`: each field by a static-table reference when the
/// table has it whole, else as a literal without indexing (with the name's static index when
/// it has one). Names must be lowercase (RFC 9113 §8.2.1); that is the caller's to ensure.
pub fn encode<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, out: &mut Vec<u8>) {
    for (name, value) in fields {
        let mut name_index = 0;
        let mut whole = 0;
        for (i, (n, v)) in STATIC.iter().enumerate() {
            if n.as_bytes() == name {
                if name_index == 0 {
                    name_index = i + 1;
                }
                if v.as_bytes() == value {
                    whole = i + 1;
                    break;
                }
            }
        }
        if whole != 0 {
            encode_int(out, 0x80, 7, whole);
            continue;
        }
        encode_int(out, 0x00, 4, name_index);
        if name_index == 0 {
            encode_str(out, name);
        }
        encode_str(out, value);
    }
}

/// The encoding side of one connection, for fields that repeat from response to response:
/// each is sent once as a literal with incremental indexing (RFC 7541 §6.2.1), then as an
/// index into the dynamic table while it stays there. The table mirrors the peer decoder's:
/// entries newest first, evicted oldest first past `max`, which never exceeds what the peer's
/// SETTINGS_HEADER_TABLE_SIZE allows.
#[derive(Debug)]
pub struct Encoder {
    /// (static index of the name, value), newest first.
    entries: VecDeque<(usize, Vec<u8>)>,
    size: usize,
    max: usize,
    /// A new maximum to announce at the start of the next block.
    announce: Option<usize>,
}

/// The most table berth's encoder uses, whatever the peer allows: a few dates' worth.
const ENCODER_TABLE: usize = 4096;

/// Static-table indexes (1-based) of the names [`Encoder::field`] is used for.
pub mod names {
    /// `content-type`.
    pub const CONTENT_TYPE: usize = 31;
    /// `date`.
    pub const DATE: usize = 33;
    /// `server`.
    pub const SERVER: usize = 54;
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder {
            entries: VecDeque::new(),
            size: 0,
            // RFC 9113 §6.5.2: the peer's table is 4096 bytes until its SETTINGS say otherwise.
            max: 4096.min(ENCODER_TABLE),
            announce: None,
        }
    }
}

impl Encoder {
    /// The peer's SETTINGS_HEADER_TABLE_SIZE: the table shrinks to it (or to berth's own
    /// bound), and the new size is announced at the next block.
    pub fn set_peer_max(&mut self, peer: usize) {
        let max = peer.min(ENCODER_TABLE);
        if max != self.max {
            self.max = max;
            self.evict();
            self.announce = Some(max);
        }
    }

    /// Starts a header block: a pending table size update goes first (§4.2).
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        if let Some(max) = self.announce.take() {
            encode_int(out, 0x20, 5, max);
        }
    }

    /// Appends the field whose name is the static table's entry `name` (1-based) with
    /// `value`: an index if the dynamic table holds it, else a literal that the peer indexes.
    pub fn field(&mut self, name: usize, value: &[u8], out: &mut Vec<u8>) {
        if let Some(at) = self
            .entries
            .iter()
            .position(|(n, v)| *n == name && v == value)
        {
            encode_int(out, 0x80, 7, STATIC.len() + 1 + at);
            return;
        }
        let cost = STATIC[name - 1].0.len() + value.len() + ENTRY_OVERHEAD;
        if cost > self.max {
            // It would empty the table and not fit: a literal the peer does not index.
            encode_int(out, 0x00, 4, name);
            encode_str(out, value);
            return;
        }
        encode_int(out, 0x40, 6, name);
        encode_str(out, value);
        self.entries.push_front((name, value.to_vec()));
        self.size += cost;
        self.evict();
    }

    /// Drops the oldest entries until the table fits `max`, as the peer's decoder does.
    fn evict(&mut self) {
        while self.size > self.max {
            let Some((name, value)) = self.entries.pop_back() else {
                break;
            };
            self.size -= STATIC[name - 1].0.len() + value.len() + ENTRY_OVERHEAD;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const LOOSE: ListLimits = ListLimits {
        max_size: 1 << 20,
        max_fields: 1000,
    };

    fn fields(list: &[(&str, &str)]) -> Vec<Field> {
        list.iter()
            .map(|(n, v)| Field {
                name: n.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
            })
            .collect()
    }

    /// One block of an example: its hex, the fields it decodes to, the table size after it.
    type Block<'a> = (&'a str, &'a [(&'a str, &'a str)], usize);

    /// Decodes each block in turn with one decoder; checks the fields and the table size
    /// after each.
    fn run(table: usize, blocks: &[Block<'_>]) {
        let mut d = Decoder::new(table);
        d.table.set_max(table);
        for (i, (wire, want, size)) in blocks.iter().enumerate() {
            let mut out = Vec::new();
            let got = d.decode(&hex(wire), LOOSE, &mut out).unwrap();
            assert_eq!(out, fields(want), "block {i}");
            assert!(!got.over);
            assert_eq!(d.table_size(), *size, "table size after block {i}");
        }
    }

    #[test]
    fn rfc7541_c1_integers() {
        let mut out = Vec::new();
        encode_int(&mut out, 0, 5, 10);
        assert_eq!(out, [0x0a]);
        out.clear();
        encode_int(&mut out, 0, 5, 1337);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
        out.clear();
        encode_int(&mut out, 0, 8, 42);
        assert_eq!(out, [0x2a]);
        let mut buf: &[u8] = &[0x1f, 0x9a, 0x0a];
        assert_eq!(decode_int(&mut buf, 5), Ok(1337));
        let mut buf: &[u8] = &[0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(decode_int(&mut buf, 5), Err(HpackError::Integer));
        let mut buf: &[u8] = &[0x1f, 0x9a];
        assert_eq!(decode_int(&mut buf, 5), Err(HpackError::Truncated));
    }

    #[test]
    fn rfc7541_c2_field_representations() {
        // C.2.1: literal with indexing.
        run(
            4096,
            &[(
                "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
                &[("custom-key", "custom-header")],
                55,
            )],
        );
        // C.2.2: literal without indexing.
        run(
            4096,
            &[(
                "040c 2f73 616d 706c 652f 7061 7468",
                &[(":path", "/sample/path")],
                0,
            )],
        );
        // C.2.3: literal never indexed.
        run(
            4096,
            &[(
                "1008 7061 7373 776f 7264 0673 6563 7265 74",
                &[("password", "secret")],
                0,
            )],
        );
        // C.2.4: indexed.
        run(4096, &[("82", &[(":method", "GET")], 0)]);
    }

    const REQ1: &[(&str, &str)] = &[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ];
    const REQ2: &[(&str, &str)] = &[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ];
    const REQ3: &[(&str, &str)] = &[
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];

    #[test]
    fn rfc7541_c3_requests_without_huffman() {
        run(
            4096,
            &[
                (
                    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                    REQ1,
                    57,
                ),
                ("8286 84be 5808 6e6f 2d63 6163 6865", REQ2, 110),
                (
                    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
                    REQ3,
                    164,
                ),
            ],
        );
    }

    #[test]
    fn rfc7541_c4_requests_with_huffman() {
        run(
            4096,
            &[
                ("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", REQ1, 57),
                ("8286 84be 5886 a8eb 1064 9cbf", REQ2, 110),
                (
                    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
                    REQ3,
                    164,
                ),
            ],
        );
    }

    const RES1: &[(&str, &str)] = &[
        (":status", "302"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ];
    const RES2: &[(&str, &str)] = &[
        (":status", "307"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ];
    const RES3: &[(&str, &str)] = &[
        (":status", "200"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
        ("location", "https://www.example.com"),
        ("content-encoding", "gzip"),
        (
            "set-cookie",
            "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
        ),
    ];

    #[test]
    fn rfc7541_c5_responses_without_huffman_and_eviction() {
        run(
            256,
            &[
                (
                    "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420
                     3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77
                     7777 2e65 7861 6d70 6c65 2e63 6f6d",
                    RES1,
                    222,
                ),
                ("4803 3330 37c1 c0bf", RES2, 222),
                (
                    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32
                     3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a
                     584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33
                     3630 303b 2076 6572 7369 6f6e 3d31",
                    RES3,
                    215,
                ),
            ],
        );
    }

    #[test]
    fn rfc7541_c6_responses_with_huffman_and_eviction() {
        run(
            256,
            &[
                (
                    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81
                     66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                    RES1,
                    222,
                ),
                ("4883 640e ffc1 c0bf", RES2, 222),
                (
                    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a
                     839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36
                     72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
                    RES3,
                    215,
                ),
            ],
        );
    }

    #[test]
    fn encoder_output_decodes_back() {
        let list: &[(&str, &str)] = &[
            (":status", "200"),
            ("server", "berth"),
            ("content-type", "text/plain"),
            ("x-odd", "\u{1}\u{7f}"),
            ("content-length", "13"),
        ];
        let mut block = Vec::new();
        encode(
            list.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut block,
        );
        assert_eq!(block[0], 0x88, ":status 200 is static index 8");
        let mut out = Vec::new();
        Decoder::new(4096).decode(&block, LOOSE, &mut out).unwrap();
        assert_eq!(out, fields(list));
    }

    /// The HPACK bomb: one 4 KiB entry referenced over and over. The list is cut at the
    /// limit, the block is still decoded to its end, and nothing past the limit is kept.
    #[test]
    fn a_bomb_is_cut_at_the_list_limit() {
        let mut block = Vec::new();
        // Literal with incremental indexing, new name "x", a value of 4000 bytes.
        block.push(0x40);
        encode_str(&mut block, b"x");
        encode_str(&mut block, &[b'a'; 4000]);
        // Index 62 (the entry just added), 1000 times: 1000 bytes for ~4 MB decoded.
        block.extend(std::iter::repeat_n(0x80 | 62, 1000).map(|b| b as u8));
        let mut d = Decoder::new(4096);
        let mut out = Vec::new();
        let limits = ListLimits {
            max_size: 16 * 1024,
            max_fields: 100,
        };
        let got = d.decode(&block, limits, &mut out).unwrap();
        assert!(got.over);
        assert_eq!(out.len(), 4);
        assert_eq!(got.size, 1001 * (1 + 4000 + 32));
    }

    #[test]
    fn too_many_fields_are_cut() {
        let block = vec![0x82; 50];
        let mut out = Vec::new();
        let limits = ListLimits {
            max_size: 1 << 20,
            max_fields: 10,
        };
        let got = Decoder::new(4096).decode(&block, limits, &mut out).unwrap();
        assert!(got.over);
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn size_updates_are_checked() {
        let mut d = Decoder::new(4096);
        let mut out = Vec::new();
        // 0x3f e1 1f = 31 + 0x61 + (0x1f << 7) = 4096: allowed.
        assert!(d.decode(&[0x3f, 0xe1, 0x1f], LOOSE, &mut out).is_ok());
        // 4097: above what berth advertised.
        assert_eq!(
            d.decode(&[0x3f, 0xe2, 0x1f], LOOSE, &mut out),
            Err(HpackError::SizeUpdate)
        );
        // A size update after a field.
        assert_eq!(
            d.decode(&[0x82, 0x20], LOOSE, &mut out),
            Err(HpackError::SizeUpdate)
        );
        // Index 0 and an index past both tables.
        assert_eq!(d.decode(&[0x80], LOOSE, &mut out), Err(HpackError::Index));
        assert_eq!(d.decode(&[0xbe], LOOSE, &mut out), Err(HpackError::Index));
        // A string longer than the block.
        assert_eq!(
            d.decode(&[0x00, 0x05, b'a'], LOOSE, &mut out),
            Err(HpackError::Truncated)
        );
    }

    #[test]
    fn a_zero_table_keeps_nothing() {
        let mut d = Decoder::new(0);
        let mut out = Vec::new();
        let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
        d.decode(&block, LOOSE, &mut out).unwrap();
        assert_eq!(d.table_size(), 0);
        assert_eq!(d.decode(&[0xbe], LOOSE, &mut out), Err(HpackError::Index));
    }

    /// The encoder's table stays in step with a decoder's through insertions, evictions and
    /// a peer that shrinks the table (to nothing, then back), and a repeated field is a byte.
    #[test]
    fn the_encoder_indexes_repeats_within_the_peers_table() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::new(4096);
        let mut out = Vec::new();
        let mut sizes = Vec::new();
        for i in 0..300u32 {
            if i == 120 {
                enc.set_peer_max(0);
            }
            if i == 160 {
                enc.set_peer_max(200);
            }
            let date = format!("Thu, 26 Nov 2026 09:{:02}:{:02} GMT", i / 60 % 60, i % 60);
            let mut block = Vec::new();
            enc.begin(&mut block);
            enc.field(names::SERVER, b"berth", &mut block);
            enc.field(names::DATE, date.as_bytes(), &mut block);
            enc.field(names::CONTENT_TYPE, b"text/plain", &mut block);
            out.clear();
            dec.decode(&block, LOOSE, &mut out).unwrap();
            let got: Vec<(&[u8], &[u8])> = out
                .iter()
                .map(|f| (f.name.as_slice(), f.value.as_slice()))
                .collect();
            assert_eq!(
                got,
                [
                    (&b"server"[..], &b"berth"[..]),
                    (b"date", date.as_bytes()),
                    (b"content-type", b"text/plain"),
                ],
                "block {i}"
            );
            assert!(dec.table_size() <= enc.max, "block {i}");
            assert_eq!(dec.table_size(), enc.size, "block {i}");
            if (1..120).contains(&i) {
                sizes.push(block.len());
            }
            if (121..160).contains(&i) {
                assert_eq!(dec.table_size(), 0, "block {i}");
            }
        }
        // A new date each block: its literal (about 25 bytes) and a byte for each of the other
        // two, which are literals again only when the dates have pushed them out.
        let mean = sizes.iter().sum::<usize>() / sizes.len();
        assert!(mean <= 30, "{mean} bytes per block: {sizes:?}");
        // Repeats of an indexed field: a byte each.
        let mut block = Vec::new();
        enc.begin(&mut block);
        enc.field(names::CONTENT_TYPE, b"text/plain", &mut block);
        enc.field(names::CONTENT_TYPE, b"text/plain", &mut block);
        assert_eq!(block.len(), 2, "{block:?}");
    }
}
