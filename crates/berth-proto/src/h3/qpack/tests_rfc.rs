//! RFC 9204 Appendix B, byte for byte, on both sides: the decoder fed the encoder stream whole,
//! a byte at a time and split at every byte, and berth's encoder producing the very bytes
//! the RFC shows, each checked against the other.

use super::*;
use crate::h3::error::{Error, ErrorCode};

pub(super) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub(super) fn fields(list: &[(&str, &str)]) -> Vec<Field> {
    list.iter()
        .map(|(n, v)| Field {
            name: n.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
        })
        .collect()
}

/// Appendix B's bytes, in the order the RFC tells them.
const B1_SECTION: &str = "0000 510b 2f69 6e64 6578 2e68 746d 6c";
const B2_ENCODER: &str = "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d
                          c10c 2f73 616d 706c 652f 7061 7468";
const B2_SECTION: &str = "0381 10 11";
const B3_ENCODER: &str = "4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565";
const B4_ENCODER: &str = "02";
const B4_SECTION: &str = "0500 80 c1 81";
const B5_ENCODER: &str = "810d 6375 7374 6f6d 2d76 616c 7565 32";

fn b4_fields() -> Vec<Field> {
    fields(&[
        (":authority", "www.example.com"),
        (":path", "/"),
        ("custom-key", "custom-value"),
    ])
}

/// How to cut each piece of encoder stream.
#[derive(Clone, Copy, Debug)]
enum Cut {
    Whole,
    Bytewise,
    At(usize),
}

fn feed(d: &mut Decoder, bytes: &[u8], cut: Cut) {
    match cut {
        Cut::Whole => d.handle_encoder_stream(bytes).unwrap(),
        Cut::Bytewise => {
            for b in bytes.chunks(1) {
                d.handle_encoder_stream(b).unwrap();
            }
        }
        Cut::At(i) => {
            let (a, b) = bytes.split_at(i.min(bytes.len()));
            d.handle_encoder_stream(a).unwrap();
            d.handle_encoder_stream(b).unwrap();
        }
    }
}

fn decoder_stream(d: &mut Decoder) -> Vec<u8> {
    let mut out = Vec::new();
    d.write_decoder_stream(&mut out);
    out
}

fn config() -> DecoderConfig {
    DecoderConfig {
        max_table_capacity: 220,
        max_blocked_streams: 100,
        max_field_section_size: 16 * 1024,
    }
}

/// The whole appendix on the decoder's side, the encoder stream cut as `cut` says.
fn decoder_side(cut: Cut) {
    let mut d = Decoder::new(config());
    // B.1: a literal with a static name reference; no dynamic state, nothing to send.
    let got = d.decode(0, &hex(B1_SECTION)).unwrap();
    assert_eq!(got, Decoded::Fields(fields(&[(":path", "/index.html")])));
    assert_eq!(decoder_stream(&mut d), b"");

    // B.2: capacity, two inserts, then a section referencing them after its Base.
    feed(&mut d, &hex(B2_ENCODER), cut);
    assert_eq!(d.table_size(), (106, 220));
    let got = d.decode(4, &hex(B2_SECTION)).unwrap();
    let want = fields(&[(":authority", "www.example.com"), (":path", "/sample/path")]);
    assert_eq!(got, Decoded::Fields(want));
    assert_eq!(
        decoder_stream(&mut d),
        hex("84"),
        "Section Acknowledgment (stream=4)"
    );

    // B.3: a speculative insert, acknowledged by an Insert Count Increment.
    feed(&mut d, &hex(B3_ENCODER), cut);
    assert_eq!(d.table_size(), (160, 220));
    assert_eq!(
        decoder_stream(&mut d),
        hex("01"),
        "Insert Count Increment (1)"
    );

    // B.4: the Duplicate is delayed; the section needing it blocks, then is cancelled.
    let got = d.decode(8, &hex(B4_SECTION)).unwrap();
    assert_eq!(got, Decoded::Blocked);
    assert_eq!(d.blocked_streams(), 1);
    d.cancel_stream(8);
    assert_eq!(
        decoder_stream(&mut d),
        hex("48"),
        "Stream Cancellation (Stream=8)"
    );
    feed(&mut d, &hex(B4_ENCODER), cut);
    assert_eq!(d.poll_unblocked(), None, "the cancelled section is gone");
    assert_eq!(d.table_size(), (217, 220));

    // B.5: an insert naming a dynamic entry, evicting the oldest.
    feed(&mut d, &hex(B5_ENCODER), cut);
    assert_eq!(d.table_size(), (215, 220));
    assert_eq!(d.insert_count(), 5);
    // Not in the RFC's trace (it stops here), but the two inserts since B.3 are owed.
    assert_eq!(decoder_stream(&mut d), hex("02"));
    // Entry 0 is gone: a section referencing it is refused.
    let e = d.decode(12, &hex("0200 80")).unwrap_err();
    assert!(matches!(e, Error::Peer(p) if p.code == ErrorCode::QPACK_DECOMPRESSION_FAILED));
}

#[test]
fn appendix_b_decoder_whole() {
    decoder_side(Cut::Whole);
}

#[test]
fn appendix_b_decoder_byte_by_byte() {
    decoder_side(Cut::Bytewise);
}

#[test]
fn appendix_b_decoder_split_at_every_byte() {
    let longest = [B2_ENCODER, B3_ENCODER, B5_ENCODER]
        .iter()
        .map(|s| hex(s).len())
        .max()
        .unwrap();
    for i in 0..=longest {
        decoder_side(Cut::At(i));
    }
}

/// B.4 as it would go had the stream not been cancelled: the Duplicate arrives, the section
/// is decoded and acknowledged.
#[test]
fn appendix_b4_unblocked_instead_of_cancelled() {
    let mut d = Decoder::new(config());
    d.handle_encoder_stream(&hex(B2_ENCODER)).unwrap();
    d.handle_encoder_stream(&hex(B3_ENCODER)).unwrap();
    assert_eq!(d.decode(8, &hex(B4_SECTION)).unwrap(), Decoded::Blocked);
    assert_eq!(d.poll_unblocked(), None, "still waiting");
    d.handle_encoder_stream(&hex(B4_ENCODER)).unwrap();
    assert_eq!(d.poll_unblocked(), Some((8, Decoded::Fields(b4_fields()))));
    assert_eq!(d.blocked_streams(), 0);
    // The acknowledgment covers every insert the section needed: no increment follows.
    assert_eq!(decoder_stream(&mut d), hex("88"));
}

/// A whole section is needed: one cut short is an error, not a status.
#[test]
fn a_truncated_section_is_an_error() {
    let mut d = Decoder::new(config());
    d.handle_encoder_stream(&hex(B2_ENCODER)).unwrap();
    for (section, whole) in [(hex(B1_SECTION), 15), (hex(B2_SECTION), 4)] {
        assert_eq!(section.len(), whole);
        // Cuts that end between representations are shorter sections, not errors: only
        // cuts inside the prefix or a representation are checked.
        let boundaries: &[usize] = if whole == 4 { &[2, 3] } else { &[2] };
        for cut in 0..whole {
            if boundaries.contains(&cut) {
                continue;
            }
            let e = d.decode(100 + cut as u64, &section[..cut]).unwrap_err();
            assert!(
                matches!(e, Error::Peer(p) if p.code == ErrorCode::QPACK_DECOMPRESSION_FAILED && !p.stream),
                "cut at {cut}: {e:?}"
            );
        }
    }
}

/// berth's encoder, told to place entries where the RFC's encoder did, writes the RFC's
/// bytes; and the decoder's instructions from the RFC drive its state.
#[test]
fn appendix_b_encoder_writes_the_rfcs_bytes() {
    let mut e = Encoder::new();
    e.set_huffman(false);
    e.peer_settings(220, 100).unwrap();
    let mut stream = Vec::new();
    let mut section = Vec::new();

    // B.1: no table yet, a static name reference.
    e.encode(0, [(&b":path"[..], &b"/index.html"[..])], &mut section);
    assert_eq!(section, hex(B1_SECTION));
    e.write_encoder_stream(&mut stream);
    assert!(stream.is_empty());

    // B.2: the table, then a section that inserts both fields and references them.
    e.set_capacity(220).unwrap();
    section.clear();
    e.encode(
        4,
        [
            (&b":authority"[..], &b"www.example.com"[..]),
            (&b":path"[..], &b"/sample/path"[..]),
        ],
        &mut section,
    );
    e.write_encoder_stream(&mut stream);
    assert_eq!(stream, hex(B2_ENCODER));
    assert_eq!(section, hex(B2_SECTION));
    assert_eq!(e.blocking_streams(), 1);
    e.handle_decoder_stream(&hex("84")).unwrap();
    assert_eq!((e.known_received_count(), e.blocking_streams()), (2, 0));

    // B.3: a speculative insert.
    stream.clear();
    assert_eq!(e.insert(b"custom-key", b"custom-value"), Some(2));
    e.write_encoder_stream(&mut stream);
    assert_eq!(stream, hex(B3_ENCODER));
    e.handle_decoder_stream(&hex("01")).unwrap();
    assert_eq!(e.known_received_count(), 3);

    // B.4: a duplicate, and a section referencing it, a static entry, and entry 2.
    stream.clear();
    assert_eq!(e.duplicate(0), Some(3));
    e.write_encoder_stream(&mut stream);
    assert_eq!(stream, hex(B4_ENCODER));
    section.clear();
    let b4 = b4_fields();
    e.encode(
        8,
        b4.iter().map(|f| (&f.name[..], &f.value[..])),
        &mut section,
    );
    assert_eq!(section, hex(B4_SECTION));
    assert_eq!(e.table_size(), 217);
    // Entry 0 is not referenced by an unacknowledged section, but 2 and 3 are: until the
    // cancellation, an insert needing room cannot evict beyond entry 1.
    e.handle_decoder_stream(&hex("48")).unwrap();
    assert_eq!(e.blocking_streams(), 0);

    // B.5: an insert by dynamic name reference, evicting entry 0.
    stream.clear();
    assert_eq!(e.insert(b"custom-key", b"custom-value2"), Some(4));
    e.write_encoder_stream(&mut stream);
    assert_eq!(stream, hex(B5_ENCODER));
    assert_eq!(e.table_size(), 215);
}

/// The same exchange in one go, both sides berth's, the encoder stream a byte at a time.
#[test]
fn appendix_b_encoder_to_decoder() {
    let mut e = Encoder::new();
    e.peer_settings(220, 100).unwrap();
    e.set_capacity(220).unwrap();
    let mut d = Decoder::new(config());
    let list = [
        (":authority", "www.example.com"),
        (":path", "/sample/path"),
        ("custom-key", "custom-value"),
    ];
    for (i, stream) in [0u64, 4, 8, 12].into_iter().enumerate() {
        let mut section = Vec::new();
        e.encode(
            stream,
            list[..=i.min(2)]
                .iter()
                .map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut section,
        );
        let mut bytes = Vec::new();
        e.write_encoder_stream(&mut bytes);
        for b in bytes.chunks(1) {
            d.handle_encoder_stream(b).unwrap();
        }
        let got = d.decode(stream, &section).unwrap();
        assert_eq!(got, Decoded::Fields(fields(&list[..=i.min(2)])));
        let mut acks = Vec::new();
        d.write_decoder_stream(&mut acks);
        for b in acks.chunks(1) {
            e.handle_decoder_stream(b).unwrap();
        }
    }
    assert_eq!(e.blocking_streams(), 0);
    assert_eq!(e.known_received_count(), e.insert_count());
}
