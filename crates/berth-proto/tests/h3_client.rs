//! HTTP/3's client role on its own: what it sends for a request, and what it makes of a
//! server's bytes, good and bad, built with berth's frame writers and QPACK encoder.

use berth_proto::h3::client::{Client, Event};
use berth_proto::h3::error::ErrorCode;
use berth_proto::h3::frame::{self, Event as Read, Frame, FrameReader, StreamKind};
use berth_proto::h3::qpack::{self, Decoded, Decoder, DecoderConfig};
use berth_proto::h3::settings::Settings;
use berth_proto::h3::stream::UniStream;
use berth_proto::h3::{Quic, Role};

fn section(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut s = Vec::new();
    qpack::encode_static(
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        false,
        &mut s,
    );
    let mut out = Vec::new();
    Frame::Headers(&s).write(&mut out).unwrap();
    out
}

fn data(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_data_header(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

fn server_control() -> Vec<u8> {
    let mut out = Vec::new();
    UniStream::Control.write(&mut out).unwrap();
    Settings::default().write_frame(None, &mut out).unwrap();
    out
}

fn events(c: &mut Client) -> Vec<Event> {
    c.process();
    std::iter::from_fn(|| c.poll_event()).collect()
}

#[test]
fn a_request_goes_out_as_control_then_headers_data_fin() {
    let mut c = Client::new(DecoderConfig::default());
    c.set_origin("https", "example.com");
    let id = c.request("POST", "/up", &[("x-a", b"1")], b"body", true);
    assert_eq!(id, 0);
    let actions: Vec<Quic> = std::iter::from_fn(|| c.poll_quic()).collect();
    assert_eq!(actions[0], Quic::Open { stream: 2 });
    assert_eq!(actions[2], Quic::Open { stream: 6 });
    let Quic::Send {
        stream: 0,
        bytes,
        fin: true,
    } = &actions[4]
    else {
        panic!("{actions:?}");
    };
    let mut reader = FrameReader::new(StreamKind::Request, Role::Server, 1 << 16);
    let (n, ev) = reader.read(bytes).unwrap();
    let Some(Read::Frame(Frame::Headers(s))) = ev else {
        panic!("{ev:?}");
    };
    let mut dec = Decoder::new(DecoderConfig::default());
    let Decoded::Fields(fields) = dec.decode(0, s).unwrap() else {
        panic!("blocked");
    };
    let names: Vec<(&[u8], &[u8])> = fields.iter().map(|f| (&f.name[..], &f.value[..])).collect();
    assert_eq!(
        names,
        vec![
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"https"),
            (b":authority", b"example.com"),
            (b":path", b"/up"),
            (b"x-a", b"1"),
        ]
    );
    let (_, ev) = reader.read(&bytes[n..]).unwrap();
    assert_eq!(
        ev,
        Some(Read::Data {
            chunk: b"body",
            end: true
        })
    );
    assert_eq!(c.request("GET", "/", &[], b"", true), 4);
}

#[test]
fn an_answer_comes_back_as_events() {
    let mut c = Client::new(DecoderConfig::default());
    let id = c.request("GET", "/", &[], b"", true);
    c.recv(3, &server_control(), false);
    let mut bytes = section(&[(":status", "103"), ("link", "</a>")]);
    bytes.extend(section(&[
        (":status", "200"),
        ("content-type", "text/plain"),
    ]));
    bytes.extend(data(b"hel"));
    bytes.extend([0x21, 0x00]);
    bytes.extend(data(b"lo"));
    bytes.extend(section(&[("x-t", "1")]));
    c.recv(id, &bytes, true);
    let ev = events(&mut c);
    assert_eq!(c.peer_settings(), Some(&Settings::default()));
    assert!(matches!(&ev[0], Event::Head { status: 200, fields, .. } if fields.len() == 1));
    assert_eq!(
        ev[1],
        Event::Data {
            stream: 0,
            bytes: b"hel".to_vec()
        }
    );
    assert_eq!(
        ev[2],
        Event::Data {
            stream: 0,
            bytes: b"lo".to_vec()
        }
    );
    assert!(matches!(&ev[3], Event::Trailers { fields, .. } if fields[0].name == b"x-t"));
    assert_eq!(ev[4], Event::End { stream: 0 });
    assert_eq!(c.open_streams(), 0);
}

#[test]
fn a_bad_answer_is_a_stream_error_and_bad_framing_a_connection_error() {
    let mut c = Client::new(DecoderConfig::default());
    let a = c.request("GET", "/", &[], b"", true);
    let b = c.request("GET", "/", &[], b"", true);
    c.recv(a, &section(&[("content-type", "x")]), true);
    let ev = events(&mut c);
    assert_eq!(
        ev,
        vec![Event::Reset {
            stream: a,
            code: ErrorCode::H3_MESSAGE_ERROR
        }]
    );
    c.recv(b, &data(b"x"), false);
    let ev = events(&mut c);
    assert_eq!(ev, vec![Event::Closed(ErrorCode::H3_FRAME_UNEXPECTED)]);
}

#[test]
fn the_servers_control_stream_rules_and_goaway() {
    let mut c = Client::new(DecoderConfig::default());
    c.recv(3, &server_control(), false);
    let mut g = Vec::new();
    Frame::Goaway(8).write(&mut g).unwrap();
    c.recv(3, &g, false);
    assert_eq!(events(&mut c), vec![Event::GoAway(8)]);
    c.recv(3, &[], true);
    assert_eq!(
        events(&mut c),
        vec![Event::Closed(ErrorCode::H3_CLOSED_CRITICAL_STREAM)]
    );
    // GOAWAY naming no request stream.
    let mut c = Client::new(DecoderConfig::default());
    let mut bytes = server_control();
    Frame::Goaway(3).write(&mut bytes).unwrap();
    c.recv(3, &bytes, false);
    assert_eq!(events(&mut c), vec![Event::Closed(ErrorCode::H3_ID_ERROR)]);
    // The server resets a stream.
    let mut c = Client::new(DecoderConfig::default());
    let id = c.request("GET", "/", &[], b"", true);
    c.reset(id, ErrorCode::H3_REQUEST_REJECTED.0);
    assert_eq!(
        events(&mut c),
        vec![Event::Reset {
            stream: id,
            code: ErrorCode::H3_REQUEST_REJECTED
        }]
    );
}
