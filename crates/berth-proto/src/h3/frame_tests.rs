//! Tests of the frame codec: round trips, the RFC's error for each malformed frame, and the
//! reader fed whole, byte by byte and split at every point.

use super::*;

/// Every frame type written then read back.
fn samples() -> Vec<Frame<'static>> {
    vec![
        Frame::Data(b"hello"),
        Frame::Data(b""),
        Frame::Headers(&[0x00, 0x00, 0xd1]),
        Frame::CancelPush(7),
        Frame::Settings(Settings {
            qpack_max_table_capacity: 4096,
            max_field_section_size: Some(16_384),
            qpack_blocked_streams: 16,
        }),
        Frame::PushPromise {
            push_id: 300,
            section: &[0x00, 0x00, 0xc1],
        },
        Frame::Goaway(4 * 1000),
        Frame::MaxPushId(varint::MAX),
        Frame::Unknown { kind: 0x21 },
    ]
}

#[test]
fn every_frame_round_trips() {
    for f in samples() {
        let mut out = Vec::new();
        f.write(&mut out).unwrap();
        let (h, n) = Header::parse(&out).unwrap();
        assert_eq!(h.kind, f.kind());
        assert_eq!(h.len as usize, out.len() - n, "{f:?}");
        assert_eq!(Frame::parse(h.kind, &out[n..]), Ok(f));
    }
}

#[test]
fn header_parse_is_partial_at_every_cut() {
    let mut out = Vec::new();
    write_header(0x3fff_ffff_ffff_fffe, 1 << 40, &mut out);
    assert_eq!(out.len(), 16);
    for cut in 0..out.len() {
        assert_eq!(Header::parse(&out[..cut]), None, "cut at {cut}");
    }
    let (h, n) = Header::parse(&out).unwrap();
    assert_eq!((h.kind, h.len, n), (0x3fff_ffff_ffff_fffe, 1 << 40, 16));
}

#[test]
fn one_integer_frames_must_be_exactly_one() {
    for k in [kind::CANCEL_PUSH, kind::GOAWAY, kind::MAX_PUSH_ID] {
        // Empty, cut inside a two-byte integer, and a byte too many.
        for payload in [&[][..], &[0x40][..], &[0x05, 0x00][..]] {
            let e = Frame::parse(k, payload).unwrap_err();
            assert_eq!(e.code, ErrorCode::H3_FRAME_ERROR, "{k:#x} {payload:02x?}");
        }
    }
    let e = Frame::parse(kind::PUSH_PROMISE, &[0x80, 0x00]).unwrap_err();
    assert_eq!(e.code, ErrorCode::H3_FRAME_ERROR);
}

#[test]
fn http2_frame_types_are_unexpected() {
    for k in [0x02, 0x06, 0x08, 0x09] {
        let e = Frame::parse(k, &[]).unwrap_err();
        assert_eq!(e.code, ErrorCode::H3_FRAME_UNEXPECTED);
        let e = check_placement(k, StreamKind::Request, Role::Server).unwrap_err();
        assert_eq!(e.code, ErrorCode::H3_FRAME_UNEXPECTED);
    }
    // Unknown types are not: 0x0a, 0x0e and a reserved one.
    for k in [0x0a, 0x0e, 0x21, 0x40] {
        assert_eq!(Frame::parse(k, b"x"), Ok(Frame::Unknown { kind: k }));
    }
}

#[test]
fn writing_misuse_is_refused() {
    let mut out = Vec::new();
    assert!(matches!(
        Frame::Unknown { kind: 0x06 }.write(&mut out),
        Err(Error::Misuse(_))
    ));
    assert!(matches!(
        Frame::Goaway(varint::MAX + 1).write(&mut out),
        Err(Error::Misuse(_))
    ));
    assert!(out.is_empty());
}

#[test]
fn placement_follows_the_table_of_section_7_2() {
    use StreamKind::*;
    let ok = |k, on, role| check_placement(k, on, role).is_ok();
    for role in [Role::Server, Role::Client] {
        assert!(ok(kind::DATA, Request, role) && ok(kind::DATA, Push, role));
        assert!(!ok(kind::DATA, Control, role));
        assert!(!ok(kind::HEADERS, Control, role));
        for k in [kind::CANCEL_PUSH, kind::SETTINGS, kind::GOAWAY] {
            assert!(ok(k, Control, role), "{k:#x}");
            assert!(!ok(k, Request, role) && !ok(k, Push, role), "{k:#x}");
        }
        assert!(!ok(kind::PUSH_PROMISE, Control, role));
        assert!(!ok(kind::PUSH_PROMISE, Push, role));
        assert!(ok(0x21, Control, role) && ok(0x21, Request, role));
    }
    // Only a client receives PUSH_PROMISE, only a server MAX_PUSH_ID.
    assert!(ok(kind::PUSH_PROMISE, Request, Role::Client));
    assert!(!ok(kind::PUSH_PROMISE, Request, Role::Server));
    assert!(ok(kind::MAX_PUSH_ID, Control, Role::Server));
    assert!(!ok(kind::MAX_PUSH_ID, Control, Role::Client));
}

/// What a reader reports, owned, so that runs over different splits can be compared.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Data(Vec<u8>),
    Frame(String),
    Oversized(u64, u64),
}

/// Feeds `chunks` in order; DATA pieces are joined per frame.
fn run(on: StreamKind, max: usize, chunks: &[&[u8]]) -> Result<(Vec<Seen>, bool), H3Error> {
    let mut r = FrameReader::new(on, Role::Server, max);
    let mut seen = Vec::new();
    let mut data = Vec::new();
    for chunk in chunks {
        let mut input = *chunk;
        loop {
            let (n, event) = r.read(input)?;
            let more = event.is_some();
            match event {
                Some(Event::Data { chunk, end }) => {
                    data.extend_from_slice(chunk);
                    if end {
                        seen.push(Seen::Data(std::mem::take(&mut data)));
                    }
                }
                Some(Event::Frame(f)) => seen.push(Seen::Frame(format!("{f:?}"))),
                Some(Event::Oversized { kind, len }) => seen.push(Seen::Oversized(kind, len)),
                None => assert_eq!(n, input.len(), "no event means all input used"),
            }
            input = &input[n..];
            if !more {
                break;
            }
        }
    }
    Ok((seen, r.finish().is_ok()))
}

/// Whole, one byte at a time, and split at every point: the same frames.
fn every_split(on: StreamKind, max: usize, bytes: &[u8]) -> Result<(Vec<Seen>, bool), H3Error> {
    let whole = run(on, max, &[bytes]);
    let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(run(on, max, &bytewise), whole, "byte by byte");
    for cut in 0..=bytes.len() {
        let (a, b) = bytes.split_at(cut);
        assert_eq!(run(on, max, &[a, b]), whole, "split at {cut}");
    }
    whole
}

#[test]
fn a_request_stream_read_in_every_split() {
    let mut bytes = Vec::new();
    Frame::Headers(&[0x00, 0x00, 0xd1, 0xd7])
        .write(&mut bytes)
        .unwrap();
    // A reserved frame with a payload, and an unknown one: skipped.
    write_header(0x21, 3, &mut bytes);
    bytes.extend_from_slice(b"pad");
    write_header(0x0a, 0, &mut bytes);
    Frame::Data(b"hello, ").write(&mut bytes).unwrap();
    Frame::Data(b"").write(&mut bytes).unwrap();
    Frame::Data(b"world").write(&mut bytes).unwrap();
    Frame::Headers(&[0x00, 0x00]).write(&mut bytes).unwrap();
    let (seen, clean) = every_split(StreamKind::Request, 64, &bytes).unwrap();
    assert!(clean);
    assert_eq!(
        seen,
        vec![
            Seen::Frame(format!("{:?}", Frame::Headers(&[0x00, 0x00, 0xd1, 0xd7]))),
            Seen::Data(b"hello, ".to_vec()),
            Seen::Data(vec![]),
            Seen::Data(b"world".to_vec()),
            Seen::Frame(format!("{:?}", Frame::Headers(&[0x00, 0x00]))),
        ]
    );
}

#[test]
fn a_control_stream_read_in_every_split() {
    let mut bytes = Vec::new();
    Settings {
        qpack_max_table_capacity: 100,
        ..Settings::default()
    }
    .write_frame(Some(99), &mut bytes)
    .unwrap();
    Frame::Goaway(8).write(&mut bytes).unwrap();
    Frame::MaxPushId(3).write(&mut bytes).unwrap();
    let (seen, clean) = every_split(StreamKind::Control, 64, &bytes).unwrap();
    assert!(clean);
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[1], Seen::Frame("Goaway(8)".into()));
}

#[test]
fn a_stream_ending_inside_a_frame_is_a_frame_error() {
    let mut bytes = Vec::new();
    Frame::Data(b"abc").write(&mut bytes).unwrap();
    for cut in 1..bytes.len() {
        let (_, clean) = run(StreamKind::Request, 64, &[&bytes[..cut]]).unwrap();
        assert!(!clean, "cut at {cut}");
    }
    let mut r = FrameReader::new(StreamKind::Request, Role::Server, 64);
    r.read(&bytes[..2]).unwrap();
    assert_eq!(r.finish().unwrap_err().code, ErrorCode::H3_FRAME_ERROR);
}

#[test]
fn the_control_stream_starts_with_settings_once() {
    let mut goaway = Vec::new();
    Frame::Goaway(0).write(&mut goaway).unwrap();
    let e = run(StreamKind::Control, 64, &[&goaway]).unwrap_err();
    assert_eq!(e.code, ErrorCode::H3_MISSING_SETTINGS);
    // A reserved frame first does not count as SETTINGS (RFC 9114 §9).
    let mut grease = Vec::new();
    write_header(0x21, 0, &mut grease);
    let e = run(StreamKind::Control, 64, &[&grease]).unwrap_err();
    assert_eq!(e.code, ErrorCode::H3_MISSING_SETTINGS);
    let mut twice = Vec::new();
    Settings::default().write_frame(None, &mut twice).unwrap();
    Settings::default().write_frame(None, &mut twice).unwrap();
    let e = run(StreamKind::Control, 64, &[&twice]).unwrap_err();
    assert_eq!(e.code, ErrorCode::H3_FRAME_UNEXPECTED);
    // DATA on the control stream, after SETTINGS.
    let mut data = Vec::new();
    Settings::default().write_frame(None, &mut data).unwrap();
    Frame::Data(b"x").write(&mut data).unwrap();
    let e = run(StreamKind::Control, 64, &[&data]).unwrap_err();
    assert_eq!(e.code, ErrorCode::H3_FRAME_UNEXPECTED);
}

#[test]
fn a_huge_length_allocates_nothing() {
    // HEADERS claiming 2^62 - 1 bytes: reported, then skipped as it arrives.
    let mut bytes = Vec::new();
    write_header(kind::HEADERS, varint::MAX, &mut bytes);
    bytes.extend_from_slice(&[0u8; 100]);
    let mut r = FrameReader::new(StreamKind::Request, Role::Server, 1024);
    let (n, event) = r.read(&bytes).unwrap();
    assert_eq!(
        event,
        Some(Event::Oversized {
            kind: kind::HEADERS,
            len: varint::MAX
        })
    );
    let (m, event) = r.read(&bytes[n..]).unwrap();
    assert_eq!((m, event), (100, None));
    assert_eq!(r.buf.capacity(), 0, "nothing was buffered");
    // SETTINGS past the limit is a connection error, before any payload.
    let mut bytes = Vec::new();
    write_header(kind::SETTINGS, varint::MAX, &mut bytes);
    let e = run(StreamKind::Control, 1024, &[&bytes]).unwrap_err();
    assert_eq!(e.code, ErrorCode::H3_EXCESSIVE_LOAD);
    // A one-integer frame may not claim more than 8 bytes, whatever the limit.
    let mut bytes = Vec::new();
    Settings::default().write_frame(None, &mut bytes).unwrap();
    write_header(kind::GOAWAY, 9, &mut bytes);
    let e = run(StreamKind::Control, 1024, &[&bytes]).unwrap_err();
    assert_eq!(e.code, ErrorCode::H3_FRAME_ERROR);
}

#[test]
fn the_limit_is_the_boundary() {
    let section = [0u8; 32];
    let mut bytes = Vec::new();
    Frame::Headers(&section).write(&mut bytes).unwrap();
    let (seen, _) = run(StreamKind::Request, 32, &[&bytes]).unwrap();
    assert!(matches!(seen[0], Seen::Frame(_)));
    let (seen, clean) = every_split(StreamKind::Request, 31, &bytes).unwrap();
    assert_eq!(seen, vec![Seen::Oversized(kind::HEADERS, 32)]);
    assert!(clean, "the oversized payload was skipped to its end");
}

#[test]
fn a_huge_unknown_frame_is_skipped_not_buffered() {
    let mut bytes = Vec::new();
    write_header(0x1f * 7 + 0x21, 1 << 40, &mut bytes);
    bytes.extend_from_slice(&[0xaa; 1000]);
    let mut r = FrameReader::new(StreamKind::Request, Role::Server, 16);
    let (n, event) = r.read(&bytes).unwrap();
    assert_eq!((n, event), (bytes.len(), None));
    assert_eq!(r.buf.capacity(), 0);
    assert!(!r.is_between_frames());
}

#[test]
fn a_client_refuses_max_push_id_and_a_server_push_promise() {
    let mut bytes = Vec::new();
    Frame::PushPromise {
        push_id: 0,
        section: &[0, 0],
    }
    .write(&mut bytes)
    .unwrap();
    let e = run(StreamKind::Request, 64, &[&bytes]).unwrap_err();
    assert_eq!(e.code, ErrorCode::H3_FRAME_UNEXPECTED);
    let mut r = FrameReader::new(StreamKind::Request, Role::Client, 64);
    let (_, event) = r.read(&bytes).unwrap();
    assert!(matches!(
        event,
        Some(Event::Frame(Frame::PushPromise { push_id: 0, .. }))
    ));
}

#[test]
fn a_client_refuses_a_goaway_naming_no_request_stream() {
    for (id, ok) in [(0, true), (8, true), (1, false), (2, false), (7, false)] {
        let mut bytes = Vec::new();
        Settings::default().write_frame(None, &mut bytes).unwrap();
        Frame::Goaway(id).write(&mut bytes).unwrap();
        let mut r = FrameReader::new(StreamKind::Control, Role::Client, 64);
        let (n, _) = r.read(&bytes).unwrap();
        let got = r.read(&bytes[n..]).map(|(_, e)| format!("{e:?}"));
        match got {
            Ok(e) => assert!(ok && e.contains("Goaway"), "{id}: {e}"),
            Err(e) => assert!(!ok && e.code == ErrorCode::H3_ID_ERROR, "{id}: {e:?}"),
        }
        // A server takes any push ID.
        let mut r = FrameReader::new(StreamKind::Control, Role::Server, 64);
        let (n, _) = r.read(&bytes).unwrap();
        assert!(r.read(&bytes[n..]).is_ok());
    }
}
