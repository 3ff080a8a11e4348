//! The client role against hand-written server frames: what it writes, what it hears, what it
//! refuses. Conversations with the real server are in `tests/h2_support/pair.rs`.

use super::*;
use crate::h2::frame::{flag, kind, Header, HEADER_LEN};

/// The frames in `out`: (kind, flags, stream, payload).
fn frames(mut out: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut seen = Vec::new();
    while let Some(h) = Header::parse(out) {
        let end = HEADER_LEN + h.len as usize;
        seen.push((h.kind, h.flags, h.stream, out[HEADER_LEN..end].to_vec()));
        out = &out[end..];
    }
    assert!(out.is_empty(), "a partial frame");
    seen
}

fn sent(c: &mut Client) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    c.poll_transmit(&mut out);
    let body = out.strip_prefix(frame::PREFACE).unwrap_or(&out);
    frames(body)
}

fn server_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_header(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn get(c: &mut Client, path: &str) -> u32 {
    let req = Request {
        method: b"GET",
        scheme: b"http",
        path: path.as_bytes(),
        authority: Some(b"x"),
        fields: &[],
        indexed: false,
    };
    c.request(&req, b"", true).unwrap()
}

#[test]
fn the_opening_refuses_push_and_raises_the_connection_window() {
    let mut c = Client::new(ClientConfig {
        settings: vec![(setting::INITIAL_WINDOW_SIZE, 1 << 20)],
        connection_window: 1 << 20,
        ..ClientConfig::default()
    });
    let mut out = Vec::new();
    c.poll_transmit(&mut out);
    assert!(out.starts_with(frame::PREFACE));
    let f = frames(&out[frame::PREFACE.len()..]);
    assert_eq!(f[0].0, kind::SETTINGS);
    assert_eq!(
        frame::settings(&f[0].3).collect::<Vec<_>>(),
        [
            (setting::ENABLE_PUSH, 0),
            (setting::INITIAL_WINDOW_SIZE, 1 << 20)
        ]
    );
    assert_eq!(f[1].0, kind::WINDOW_UPDATE);
    assert_eq!(f[1].3, ((1u32 << 20) - frame::DEFAULT_WINDOW).to_be_bytes());
}

#[test]
fn a_long_head_goes_in_continuations_past_the_frame_size() {
    let mut c = Client::new(ClientConfig::default());
    sent(&mut c);
    let long = vec![b'v'; 40_000];
    let fields: [(&[u8], &[u8]); 1] = [(b"x-long", &long)];
    let req = Request {
        method: b"GET",
        scheme: b"http",
        path: b"/",
        authority: None,
        fields: &fields,
        indexed: false,
    };
    assert_eq!(c.request(&req, b"", true), Some(1));
    let kinds: Vec<_> = sent(&mut c).iter().map(|f| (f.0, f.1)).collect();
    assert_eq!(
        kinds,
        [
            (kind::HEADERS, flag::END_STREAM),
            (kind::CONTINUATION, 0),
            (kind::CONTINUATION, flag::END_HEADERS)
        ]
    );
}

#[test]
fn a_body_goes_out_within_the_windows_and_the_rest_as_they_open() {
    let mut c = Client::new(ClientConfig::default());
    sent(&mut c);
    // The server's stream window is 10 bytes.
    let settings = server_frame(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 10]);
    c.recv(&settings).unwrap();
    let req = Request {
        method: b"POST",
        scheme: b"http",
        path: b"/echo",
        authority: None,
        fields: &[],
        indexed: false,
    };
    let id = c.request(&req, &[b'a'; 25], true).unwrap();
    let f = sent(&mut c);
    // SETTINGS ack, HEADERS, 10 bytes of DATA.
    assert_eq!(f[0].0, kind::SETTINGS);
    assert_eq!(f[0].1, flag::ACK);
    assert_eq!((f[1].0, f[1].1 & flag::END_STREAM), (kind::HEADERS, 0));
    assert_eq!((f[2].0, f[2].3.len()), (kind::DATA, 10));
    assert_eq!(f.len(), 3);
    c.recv(&server_frame(
        kind::WINDOW_UPDATE,
        0,
        id,
        &20u32.to_be_bytes(),
    ))
    .unwrap();
    let f = sent(&mut c);
    assert_eq!(
        (f[0].0, f[0].1, f[0].3.len()),
        (kind::DATA, flag::END_STREAM, 15)
    );
}

#[test]
fn an_answer_is_heard_and_windows_refilled() {
    let mut c = Client::new(ClientConfig::default());
    let id = get(&mut c, "/");
    sent(&mut c);
    let mut block = Vec::new();
    hpack::encode([(&b":status"[..], &b"200"[..]), (b"x-a", b"1")], &mut block);
    let mut input = server_frame(kind::SETTINGS, 0, 0, &[]);
    input.extend(server_frame(kind::HEADERS, flag::END_HEADERS, id, &block));
    input.extend(server_frame(kind::DATA, 0, id, b"hello"));
    input.extend(server_frame(kind::PING, 0, 0, b"12345678"));
    let mut trailers = Vec::new();
    hpack::encode([(&b"x-t"[..], &b"2"[..])], &mut trailers);
    input.extend(server_frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        id,
        &trailers,
    ));
    // Byte by byte: the same as whole.
    for b in &input {
        c.recv(std::slice::from_ref(b)).unwrap();
    }
    let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    assert_eq!(
        events,
        [
            Event::Settings { first: true },
            Event::Head {
                stream: id,
                status: 200,
                fields: vec![(b"x-a".to_vec(), b"1".to_vec())],
                end_stream: false
            },
            Event::Data {
                stream: id,
                data: b"hello".to_vec(),
                len: 5,
                end_stream: false
            },
            Event::Trailers {
                stream: id,
                fields: vec![(b"x-t".to_vec(), b"2".to_vec())]
            },
        ]
    );
    assert_eq!(c.open_streams(), 0);
    let f = sent(&mut c);
    let shape: Vec<_> = f.iter().map(|f| (f.0, f.1, f.2)).collect();
    assert_eq!(
        shape,
        [
            (kind::SETTINGS, flag::ACK, 0),
            (kind::WINDOW_UPDATE, 0, 0),
            (kind::WINDOW_UPDATE, 0, id),
            (kind::PING, flag::ACK, 0),
        ]
    );
}

#[test]
fn shut_windows_stay_shut_and_an_overrun_is_the_servers_error() {
    let mut c = Client::new(ClientConfig {
        settings: vec![(setting::INITIAL_WINDOW_SIZE, 4)],
        windows: Windows::Shut,
        ..ClientConfig::default()
    });
    let id = get(&mut c, "/");
    sent(&mut c);
    let mut block = Vec::new();
    hpack::encode([(&b":status"[..], &b"200"[..])], &mut block);
    c.recv(&server_frame(kind::HEADERS, flag::END_HEADERS, id, &block))
        .unwrap();
    c.recv(&server_frame(kind::DATA, 0, id, b"abcd")).unwrap();
    assert!(sent(&mut c).is_empty(), "no WINDOW_UPDATE");
    let e = c.recv(&server_frame(kind::DATA, 0, id, b"e")).unwrap_err();
    assert_eq!(e.code, ErrorCode::FLOW_CONTROL_ERROR);
    assert_eq!(c.recv(&[]), Err(e), "the connection stays broken");
}

#[test]
fn a_goaway_forgets_the_streams_it_did_not_take_and_a_push_is_refused() {
    let mut c = Client::new(ClientConfig::default());
    let (a, b) = (get(&mut c, "/"), get(&mut c, "/"));
    let mut payload = a.to_be_bytes().to_vec();
    payload.extend_from_slice(&0u32.to_be_bytes());
    payload.extend_from_slice(b"bye");
    c.recv(&server_frame(kind::GOAWAY, 0, 0, &payload)).unwrap();
    assert_eq!(
        c.poll_event(),
        Some(Event::GoAway {
            last_stream: a,
            code: ErrorCode::NO_ERROR,
            debug: b"bye".to_vec()
        })
    );
    assert_eq!(c.open_streams(), 1);
    assert!(b > a);
    let e = c
        .recv(&server_frame(
            kind::PUSH_PROMISE,
            flag::END_HEADERS,
            a,
            &[0, 0, 0, 2],
        ))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::PROTOCOL_ERROR);
}
