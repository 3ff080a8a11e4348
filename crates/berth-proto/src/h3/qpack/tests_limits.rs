//! The limits, each with a test that fails without it: huge claimed lengths, blocked
//! streams past the setting, the table's capacity, the decoded section size, references
//! out of range; and on the encoder's side, the blocking and eviction rules and the decoder
//! stream's errors.

use super::field::{write_prefix, FieldLine};
use super::instruction::EncoderInstruction;
use super::tests_rfc::fields;
use super::*;
use crate::h3::error::{Error, ErrorCode};

fn config(capacity: u64, blocked: u64, section: u64) -> DecoderConfig {
    DecoderConfig {
        max_table_capacity: capacity,
        max_blocked_streams: blocked,
        max_field_section_size: section,
    }
}

fn code(r: Result<impl std::fmt::Debug, Error>) -> ErrorCode {
    match r {
        Err(Error::Peer(p)) => p.code,
        other => panic!("not a peer error: {other:?}"),
    }
}

fn set_capacity(c: u64) -> Vec<u8> {
    let mut out = Vec::new();
    EncoderInstruction::<&[u8]>::SetCapacity(c).write(false, &mut out);
    out
}

fn insert(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    EncoderInstruction::InsertWithLiteralName { name, value }.write(false, &mut out);
    out
}

/// A section referencing absolute index `abs` (post-base from 0), for a table of
/// `max_entries`.
fn section_needing(abs: u64, max_entries: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_prefix(abs + 1, 0, max_entries, &mut out);
    FieldLine::<&[u8]>::IndexedPostBase { index: abs }.write(false, &mut out);
    out
}

#[test]
fn a_huge_claimed_string_is_refused_before_its_bytes() {
    let mut d = Decoder::new(config(4096, 0, 16_384));
    d.handle_encoder_stream(&set_capacity(4096)).unwrap();
    // Insert With Literal Name, name of 2^31 bytes claimed: refused at once.
    let mut bytes = Vec::new();
    prim::write_int(&mut bytes, 0x40, 5, 1 << 31);
    assert_eq!(
        code(d.handle_encoder_stream(&bytes)),
        ErrorCode::QPACK_ENCODER_STREAM_ERROR
    );
    // A string that fits is waited for, and what is held stays within it.
    let mut d = Decoder::new(config(4096, 0, 16_384));
    d.handle_encoder_stream(&set_capacity(4096)).unwrap();
    let whole = insert(b"n", &[b'v'; 4000]);
    for b in whole[..whole.len() - 1].chunks(1) {
        d.handle_encoder_stream(b).unwrap();
        assert!(d.buffered() <= whole.len());
    }
    assert_eq!(d.insert_count(), 0);
    d.handle_encoder_stream(&whole[whole.len() - 1..]).unwrap();
    assert_eq!((d.insert_count(), d.buffered()), (1, 0));
}

#[test]
fn blocked_streams_past_the_setting_are_refused() {
    let max_entries = 4096 / 32;
    for allowed in [0u64, 1, 3] {
        let mut d = Decoder::new(config(4096, allowed, 16_384));
        d.handle_encoder_stream(&set_capacity(4096)).unwrap();
        for stream in 0..allowed {
            let got = d.decode(4 * stream, &section_needing(stream, max_entries));
            assert_eq!(got, Ok(Decoded::Blocked));
        }
        let one_more = d.decode(4 * allowed, &section_needing(0, max_entries));
        assert_eq!(
            code(one_more),
            ErrorCode::QPACK_DECOMPRESSION_FAILED,
            "{allowed}"
        );
    }
    // Unblocking frees a place.
    let mut d = Decoder::new(config(4096, 1, 16_384));
    d.handle_encoder_stream(&set_capacity(4096)).unwrap();
    assert_eq!(d.decode(0, &section_needing(0, 128)), Ok(Decoded::Blocked));
    d.handle_encoder_stream(&insert(b"a", b"b")).unwrap();
    assert_eq!(
        d.poll_unblocked(),
        Some((0, Decoded::Fields(fields(&[("a", "b")]))))
    );
    assert_eq!(d.decode(4, &section_needing(1, 128)), Ok(Decoded::Blocked));
    // And a cancellation too.
    d.cancel_stream(4);
    assert_eq!(d.decode(8, &section_needing(1, 128)), Ok(Decoded::Blocked));
}

#[test]
fn a_second_section_on_a_blocked_stream_is_misuse() {
    let mut d = Decoder::new(config(4096, 4, 16_384));
    d.handle_encoder_stream(&set_capacity(4096)).unwrap();
    assert_eq!(d.decode(0, &section_needing(0, 128)), Ok(Decoded::Blocked));
    assert!(matches!(
        d.decode(0, &section_needing(0, 128)),
        Err(Error::Misuse(_))
    ));
}

#[test]
fn the_table_stays_within_its_capacity() {
    let mut d = Decoder::new(config(300, 0, 16_384));
    // Past the setting.
    assert_eq!(
        code(d.handle_encoder_stream(&set_capacity(301))),
        ErrorCode::QPACK_ENCODER_STREAM_ERROR
    );
    let mut d = Decoder::new(config(300, 0, 16_384));
    // Before any Set Dynamic Table Capacity the capacity is 0 (§3.2.3): no insert fits.
    assert_eq!(
        code(d.handle_encoder_stream(&insert(b"a", b"b"))),
        ErrorCode::QPACK_ENCODER_STREAM_ERROR
    );
    let mut d = Decoder::new(config(300, 0, 16_384));
    d.handle_encoder_stream(&set_capacity(300)).unwrap();
    // Many inserts: the oldest go, the size never passes 300.
    for i in 0..100u32 {
        let value = format!("value-{i}");
        d.handle_encoder_stream(&insert(b"name", value.as_bytes()))
            .unwrap();
        assert!(d.table_size().0 <= 300);
    }
    assert_eq!(d.insert_count(), 100);
    // An entry of 301 bytes does not fit: an error, not an empty table (HPACK's rule).
    assert_eq!(
        code(d.handle_encoder_stream(&insert(b"n", &[b'v'; 268]))),
        ErrorCode::QPACK_ENCODER_STREAM_ERROR
    );
    // Shrinking evicts.
    let mut d = Decoder::new(config(300, 0, 16_384));
    d.handle_encoder_stream(&set_capacity(300)).unwrap();
    d.handle_encoder_stream(&insert(b"name", b"value")).unwrap();
    d.handle_encoder_stream(&set_capacity(0)).unwrap();
    assert_eq!(d.table_size(), (0, 0));
}

#[test]
fn references_out_of_range_are_refused() {
    let mut d = Decoder::new(config(4096, 8, 16_384));
    d.handle_encoder_stream(&set_capacity(4096)).unwrap();
    d.handle_encoder_stream(&insert(b"a", b"1")).unwrap();
    d.handle_encoder_stream(&insert(b"b", b"2")).unwrap();
    let section = |required: u64, base: u64, line: FieldLine<&[u8]>| {
        let mut out = Vec::new();
        write_prefix(required, base, 128, &mut out);
        line.write(false, &mut out);
        out
    };
    let idx = |static_table, index| FieldLine::Indexed {
        static_table,
        index,
    };
    // Good ones first, to show the shape is right.
    assert_eq!(
        d.decode(0, &section(2, 2, idx(false, 0))),
        Ok(Decoded::Fields(fields(&[("b", "2")])))
    );
    assert!(d.decode(0, &section(0, 0, idx(true, 98))).is_ok());
    let bad = [
        ("static 99", section(0, 0, idx(true, 99))),
        ("relative past the base", section(2, 2, idx(false, 2))),
        ("dynamic with RIC 0", section(0, 0, idx(false, 0))),
        (
            "post-base at the RIC",
            section(1, 0, FieldLine::IndexedPostBase { index: 1 }),
        ),
        // Base 3 above RIC 2: relative 0 is absolute 2, at the RIC.
        ("relative at the RIC", section(2, 3, idx(false, 0))),
        (
            "a name reference past the base",
            section(
                2,
                2,
                FieldLine::LiteralNameRef {
                    never_index: false,
                    static_table: false,
                    index: 5,
                    value: &b"x"[..],
                },
            ),
        ),
    ];
    for (what, bytes) in bad {
        assert_eq!(
            code(d.decode(4, &bytes)),
            ErrorCode::QPACK_DECOMPRESSION_FAILED,
            "{what}"
        );
    }
    // A Required Insert Count no encoder could send: past the full range of 256.
    let mut out = Vec::new();
    prim::write_int(&mut out, 0, 8, 257);
    out.push(0);
    assert_eq!(
        code(d.decode(4, &out)),
        ErrorCode::QPACK_DECOMPRESSION_FAILED
    );
    // A decoder with no table refuses any non-zero Required Insert Count.
    let mut z = Decoder::new(config(0, 0, 16_384));
    assert_eq!(
        code(z.decode(0, &[0x01, 0x00])),
        ErrorCode::QPACK_DECOMPRESSION_FAILED
    );
    // An evicted entry.
    let mut d = Decoder::new(config(100, 8, 16_384));
    d.handle_encoder_stream(&set_capacity(100)).unwrap();
    d.handle_encoder_stream(&insert(b"a", &[b'x'; 40])).unwrap();
    d.handle_encoder_stream(&insert(b"b", &[b'y'; 40])).unwrap();
    assert_eq!(d.table_size().0, 73, "the first was evicted");
    assert_eq!(
        code(d.decode(0, &section(1, 1, idx(false, 0)))),
        ErrorCode::QPACK_DECOMPRESSION_FAILED
    );
    // Encoder-stream references to entries that are not there.
    for bad in [vec![0x05u8], vec![0x85, 0x00]] {
        assert_eq!(
            code(d.handle_encoder_stream(&bad)),
            ErrorCode::QPACK_ENCODER_STREAM_ERROR
        );
    }
}

#[test]
fn a_section_past_the_size_limit_is_too_large() {
    // Each field counts name + value + 32: "a: b" is 34.
    let section = |n: usize| {
        let mut out = Vec::new();
        write_prefix(0, 0, 0, &mut out);
        for _ in 0..n {
            FieldLine::LiteralName {
                never_index: false,
                name: &b"a"[..],
                value: &b"b"[..],
            }
            .write(false, &mut out);
        }
        out
    };
    let mut d = Decoder::new(config(0, 0, 340));
    assert!(matches!(d.decode(0, &section(10)), Ok(Decoded::Fields(f)) if f.len() == 10));
    assert_eq!(d.decode(0, &section(11)), Ok(Decoded::TooLarge));
}

/// The QPACK bomb: one large entry, referenced a byte at a time. A 1,000-byte section would
/// decode to 4 MB; it stops at the limit, and is still acknowledged.
#[test]
fn a_bomb_stops_at_the_limit() {
    let mut d = Decoder::new(config(4096, 0, 16 * 1024));
    d.handle_encoder_stream(&set_capacity(4096)).unwrap();
    d.handle_encoder_stream(&insert(b"x", &[b'y'; 4000]))
        .unwrap();
    let mut out = Vec::new();
    write_prefix(1, 1, 128, &mut out);
    out.extend(std::iter::repeat_n(0x80, 1000));
    assert_eq!(d.decode(0, &out), Ok(Decoded::TooLarge));
    let mut stream = Vec::new();
    d.write_decoder_stream(&mut stream);
    assert_eq!(stream, [0x80], "Section Acknowledgment (stream 0)");
}

#[test]
fn an_integer_past_the_limit_in_a_section_is_a_stream_error() {
    let mut out = Vec::new();
    write_prefix(0, 0, 0, &mut out);
    prim::write_int(&mut out, 0xc0, 6, 1 << 40);
    let mut d = Decoder::new(config(0, 0, 16_384));
    match d.decode(0, &out) {
        Err(Error::Peer(p)) => {
            assert!(p.stream);
            assert_eq!(p.code, ErrorCode::QPACK_DECOMPRESSION_FAILED);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_cancellations_without_a_table() {
    let mut d = Decoder::new(config(0, 0, 16_384));
    d.cancel_stream(4);
    assert!(!d.has_decoder_stream_output());
    let mut d = Decoder::new(config(1, 0, 16_384));
    d.cancel_stream(4);
    let mut out = Vec::new();
    d.write_decoder_stream(&mut out);
    assert_eq!(out, [0x44]);
}

/// Encoder: with no blocked streams allowed, nothing unacknowledged is referenced; entries
/// arrive by the encoder stream and are used once acknowledged.
#[test]
fn the_encoder_does_not_block_when_not_allowed() {
    let mut e = Encoder::new();
    e.peer_settings(4096, 0).unwrap();
    e.set_capacity(4096).unwrap();
    let field = [(&b"server"[..], &b"berth"[..])];
    let mut first = Vec::new();
    e.encode(0, field, &mut first);
    assert_eq!(&first[..2], [0, 0], "Required Insert Count 0: no reference");
    assert_eq!(e.insert_count(), 1, "inserted for later");
    let mut d = Decoder::new(config(4096, 0, 16_384));
    let mut stream = Vec::new();
    e.write_encoder_stream(&mut stream);
    d.handle_encoder_stream(&stream).unwrap();
    assert!(matches!(d.decode(0, &first), Ok(Decoded::Fields(_))));
    let mut second = Vec::new();
    e.encode(4, field, &mut second);
    assert_eq!(&second[..2], [0, 0], "still not acknowledged");
    let mut feedback = Vec::new();
    d.write_decoder_stream(&mut feedback);
    assert_eq!(feedback, [0x01], "Insert Count Increment");
    e.handle_decoder_stream(&feedback).unwrap();
    let mut third = Vec::new();
    e.encode(8, field, &mut third);
    assert_eq!(third.len(), 3, "prefix and one byte");
    assert_eq!(
        d.decode(8, &third),
        Ok(Decoded::Fields(fields(&[("server", "berth")])))
    );
}

#[test]
fn the_encoder_keeps_to_the_peers_blocked_streams() {
    let mut e = Encoder::new();
    e.peer_settings(4096, 1).unwrap();
    e.set_capacity(4096).unwrap();
    let mut a = Vec::new();
    e.encode(0, [(&b"x-a"[..], &b"1"[..])], &mut a);
    assert_ne!(a[0], 0, "stream 0 may block");
    let mut b = Vec::new();
    e.encode(4, [(&b"x-b"[..], &b"2"[..])], &mut b);
    assert_eq!(b[0], 0, "a second stream may not");
    let mut c = Vec::new();
    e.encode(0, [(&b"x-c"[..], &b"3"[..])], &mut c);
    assert_ne!(c[0], 0, "the stream already at risk may");
    assert_eq!(e.blocking_streams(), 1);
}

#[test]
fn the_encoder_never_evicts_what_the_decoder_needs() {
    let mut e = Encoder::new();
    e.peer_settings(100, 10).unwrap();
    e.set_capacity(100).unwrap();
    let big = [b'v'; 40];
    assert_eq!(e.insert(b"a", &big), Some(0));
    // 73 bytes used; a second 73-byte entry would evict entry 0, not yet acknowledged.
    assert_eq!(e.insert(b"b", &big), None);
    // Acknowledged, but referenced by a section in flight: still not.
    e.handle_decoder_stream(&[0x01]).unwrap();
    let mut s = Vec::new();
    e.encode(0, [(&b"a"[..], &big[..])], &mut s);
    assert_ne!(s[0], 0, "the section references entry 0");
    assert_eq!(e.insert(b"b", &big), None);
    assert!(matches!(e.set_capacity(0), Err(Error::Misuse(_))));
    // Once that section is acknowledged, it can go.
    e.handle_decoder_stream(&[0x80]).unwrap();
    assert_eq!(e.insert(b"b", &big), Some(1));
    assert_eq!(e.table_size(), 73);
}

#[test]
fn the_encoders_misuse_and_the_decoder_streams_errors() {
    let mut e = Encoder::new();
    assert!(
        matches!(e.set_capacity(1), Err(Error::Misuse(_))),
        "no peer settings"
    );
    e.peer_settings(100, 0).unwrap();
    assert!(matches!(e.peer_settings(100, 0), Err(Error::Misuse(_))));
    assert!(matches!(e.set_capacity(101), Err(Error::Misuse(_))));
    e.set_capacity(100).unwrap();
    let decoder_error = |e: &mut Encoder, bytes: &[u8]| code(e.handle_decoder_stream(bytes));
    // An acknowledgment for a stream with nothing awaiting one.
    assert_eq!(
        decoder_error(&mut e, &[0x84]),
        ErrorCode::QPACK_DECODER_STREAM_ERROR
    );
    // An increment of zero, or past the inserts.
    assert_eq!(
        decoder_error(&mut e, &[0x00]),
        ErrorCode::QPACK_DECODER_STREAM_ERROR
    );
    assert_eq!(
        decoder_error(&mut e, &[0x01]),
        ErrorCode::QPACK_DECODER_STREAM_ERROR
    );
    assert_eq!(e.insert(b"a", b"b"), Some(0));
    assert!(e.handle_decoder_stream(&[0x01]).is_ok());
    // A cancellation for an unknown stream is fine (the section may never have gone).
    assert!(e.handle_decoder_stream(&[0x48]).is_ok());
    // Pieces: an acknowledgment for stream 300 in two bytes, one at a time, is awaited.
    let mut s = Vec::new();
    let mut e = Encoder::new();
    e.peer_settings(100, 10).unwrap();
    e.set_capacity(100).unwrap();
    e.encode(300, [(&b"k"[..], &b"v"[..])], &mut s);
    let mut ack = Vec::new();
    instruction::DecoderInstruction::SectionAck(300).write(&mut ack);
    assert_eq!(ack.len(), 3);
    for b in ack.chunks(1) {
        e.handle_decoder_stream(b).unwrap();
    }
    assert_eq!(e.known_received_count(), 1);
}

/// Sensitive fields are never indexed and carry the N bit, in both encoders.
#[test]
fn sensitive_fields_stay_literal() {
    let fields = [
        (&b"authorization"[..], &b"secret"[..]),
        (&b"cookie"[..], &b"c=1"[..]),
    ];
    let mut e = Encoder::new();
    e.peer_settings(4096, 10).unwrap();
    e.set_capacity(4096).unwrap();
    let mut dynamic = Vec::new();
    e.encode(0, fields, &mut dynamic);
    assert_eq!(e.insert_count(), 0);
    let mut stat = Vec::new();
    encode_static(fields, true, &mut stat);
    for section in [dynamic, stat] {
        let mut buf = &section[2..];
        while !buf.is_empty() {
            match FieldLine::parse(&mut buf).unwrap() {
                FieldLine::LiteralNameRef { never_index, .. }
                | FieldLine::LiteralName { never_index, .. } => assert!(never_index),
                other => panic!("{other:?}"),
            }
        }
    }
}

/// A blocked section is decoded as soon as the insert it needs arrives, even when the same
/// piece of encoder stream goes on to evict that entry: the result must not depend on where
/// QUIC cut the stream.
#[test]
fn unblocking_does_not_depend_on_the_cut() {
    for bytewise in [false, true] {
        let mut d = Decoder::new(config(100, 1, 16_384));
        d.handle_encoder_stream(&set_capacity(100)).unwrap();
        assert_eq!(d.decode(0, &section_needing(0, 3)), Ok(Decoded::Blocked));
        let mut piece = insert(b"a", &[b'x'; 40]);
        piece.extend(insert(b"b", &[b'y'; 40]));
        if bytewise {
            for b in piece.chunks(1) {
                d.handle_encoder_stream(b).unwrap();
            }
        } else {
            d.handle_encoder_stream(&piece).unwrap();
        }
        let want = vec![Field {
            name: b"a".to_vec(),
            value: vec![b'x'; 40],
        }];
        assert_eq!(
            d.poll_unblocked(),
            Some((0, Decoded::Fields(want))),
            "{bytewise}"
        );
    }
}
