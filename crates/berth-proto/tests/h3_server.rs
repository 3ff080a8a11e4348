//! HTTP/3's server connection in memory (issue 42): the demo routes, bodies both ways,
//! files with ranges and codings, streamed replies with trailers, jobs out of order,
//! refusals, and every RFC 9114 rule the connection enforces, with the client's bytes built
//! by berth's own frame writers and QPACK encoder and the answers decoded back.

#[path = "h2_support/mod.rs"]
mod h2_support;
mod h3_support;

use berth_proto::h3::error::ErrorCode;
use berth_proto::h3::frame::{self, Frame};
use berth_proto::h3::qpack::{self, Encoder};
use berth_proto::h3::settings::Settings;
use berth_proto::h3::stream::UniStream;
use berth_proto::h3::{varint, H3Config, Quic};
use berth_proto::http::{Limits, Popped, Reply};
use h3_support::*;

fn server() -> Server {
    let mut s = Server::new(H3Config::default());
    s.start();
    s.open_control();
    s
}

#[test]
fn the_control_stream_opens_first_with_settings_from_the_limits() {
    let mut s = Server::new(H3Config::default());
    s.limits = Limits {
        max_header_bytes: 8000,
        ..Limits::default()
    };
    s.start();
    assert_eq!(s.actions[0], Quic::Open { stream: 3 });
    assert!(matches!(
        s.actions[1],
        Quic::Send {
            stream: 3,
            fin: false,
            ..
        }
    ));
    let (settings, goaways) = hear_control(&s.written[&3].0);
    assert_eq!(
        settings,
        Settings {
            qpack_max_table_capacity: 4096,
            max_field_section_size: Some(8000),
            qpack_blocked_streams: 16,
        }
    );
    assert!(goaways.is_empty());
    // The decoder stream is opened (the client may use a table); no encoder stream, and
    // never a push.
    assert!(s.actions.contains(&Quic::Open { stream: 7 }));
    assert_eq!(s.written[&7].0, [0x03]);
    assert_eq!(
        s.actions
            .iter()
            .filter(|a| matches!(a, Quic::Open { .. }))
            .count(),
        2
    );
    s.open_control();
    assert_eq!(s.conn.peer_settings(), Some(&Settings::default()));
    assert_eq!(s.close_code(), None);
}

#[test]
fn a_table_of_zero_opens_no_decoder_stream() {
    let mut s = Server::new(H3Config {
        qpack_max_table_capacity: 0,
        ..H3Config::default()
    });
    s.start();
    assert_eq!(
        s.actions
            .iter()
            .filter(|a| matches!(a, Quic::Open { .. }))
            .count(),
        1
    );
}

#[test]
fn the_demo_routes_are_answered() {
    let mut s = server();
    s.request(0, &get("/"));
    s.request(4, &get("/fields"));
    s.request(8, &get("/nothing"));
    s.request(12, &get("/missing"));
    s.request(16, &headers(&request_fields("HEAD", "/")));
    let a = s.heard(0);
    assert_eq!(
        (a.status, &a.body[..], a.fin),
        (200, &b"Hello, World!"[..], true)
    );
    assert_eq!(a.field("server"), Some("berth"));
    assert_eq!(a.field("date"), Some(std::str::from_utf8(DATE).unwrap()));
    assert_eq!(a.field("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(a.field("content-length"), Some("13"));
    let f = s.heard(4);
    assert_eq!(f.field("x-mixed-case"), Some("v"));
    assert_eq!(f.field("connection"), None);
    assert_eq!(f.field("transfer-encoding"), None);
    assert_eq!(
        f.field(&h2_support::LONG_NAME.to_ascii_lowercase()),
        Some("w")
    );
    let n = s.heard(8);
    assert_eq!((n.status, n.body.len(), n.fin), (204, 0, true));
    assert_eq!(s.heard(12).status, 404);
    let h = s.heard(16);
    assert_eq!((h.status, h.body.len(), h.fin), (200, 0, true));
    assert_eq!(h.field("content-length"), Some("13"));
    assert_eq!(s.conn.open_streams(), 0);
    assert_eq!(s.conn.counts().requests, 5);
}

/// An `Alt-Svc` the driver gives is on every answer (as over HTTP/1.1 and HTTP/2).
#[test]
fn the_alt_svc_the_driver_gives_is_on_every_answer() {
    let mut s = server();
    s.alt_svc = Some(b"h3=\":8443\"");
    s.request(0, &get("/"));
    s.request(4, &get("/missing"));
    assert_eq!(s.heard(0).field("alt-svc"), Some("h3=\":8443\""));
    assert_eq!(s.heard(4).field("alt-svc"), Some("h3=\":8443\""));
    let mut s = server();
    s.request(0, &get("/"));
    assert_eq!(s.heard(0).field("alt-svc"), None);
}

/// A request says it came over HTTP/3 (ASGI's `http_version` "3", WSGI's `SERVER_PROTOCOL`
/// `HTTP/3`, the access log's protocol).
#[test]
fn a_request_says_http3() {
    let mut s = server();
    s.request(0, &get("/version"));
    assert_eq!(&s.heard(0).body[..], b"Http3");
}

#[test]
fn a_post_body_comes_whole_to_the_handler() {
    let mut s = server();
    let mut bytes = headers(&request_fields("POST", "/echo"));
    bytes.extend(data(b"hello "));
    bytes.extend(data(b""));
    bytes.extend(data(b"world"));
    s.recv(0, &bytes, false);
    assert!(!s.written.contains_key(&0), "answered before FIN");
    s.recv(0, &[], true);
    let a = s.heard(0);
    assert_eq!((a.status, &a.body[..]), (200, &b"hello world"[..]));
}

#[test]
fn a_conversation_split_at_every_offset_is_answered_the_same() {
    let mut fields = request_fields("POST", "/echo");
    fields.push(("content-length", "11"));
    let mut post = headers(&fields);
    post.extend(data(b"hello "));
    post.extend([0x21, 0x02, 0xaa, 0xbb]); // a reserved frame type, ignored
    post.extend(data(b"world"));
    let mut ctl = control(Settings::default());
    ctl.extend([0x21, 0x00]); // a reserved frame on the control stream
    let whole = {
        let mut s = Server::new(H3Config::default());
        s.recv(2, &ctl, false);
        s.request(0, &post);
        s.request(4, &get("/"));
        (s.heard(0), s.heard(4))
    };
    assert_eq!(whole.0.body, b"hello world");
    for cut in 0..=post.len() {
        let mut s = Server::new(H3Config::default());
        let c = cut.min(ctl.len());
        s.recv(2, &ctl[..c], false);
        s.recv(0, &post[..cut], false);
        s.recv(2, &ctl[c..], false);
        s.recv(0, &post[cut..], true);
        s.request(4, &get("/"));
        assert_eq!((s.heard(0), s.heard(4)), whole, "cut at {cut}");
        assert_eq!(s.close_code(), None);
    }
    // A byte at a time.
    let mut s = Server::new(H3Config::default());
    for b in &ctl {
        s.recv(2, std::slice::from_ref(b), false);
    }
    for b in &post {
        s.recv(0, std::slice::from_ref(b), false);
    }
    s.recv(0, &[], true);
    s.request(4, &get("/"));
    assert_eq!((s.heard(0), s.heard(4)), whole);
}

fn with_files(files: &[(&str, Vec<u8>)]) -> Server {
    let mut s = server();
    s.files = files
        .iter()
        .map(|(p, b)| (p.to_string(), b.clone()))
        .collect();
    s
}

#[test]
fn a_file_range_is_pulled_a_piece_at_a_time() {
    let content: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let mut s = Server::new(H3Config {
        piece: 1000,
        ..H3Config::default()
    });
    s.start();
    s.open_control();
    s.files = vec![("a.bin".into(), content.clone())];
    s.request(0, &get("/files/a.bin"));
    let a = s.heard(0);
    assert_eq!((a.status, a.fin), (200, true));
    assert_eq!(a.body, content);
    assert!(s.pulls.iter().all(|&(st, max)| st == 0 && max == 1000));
    assert!(s.pulls.len() >= 5);
    let mut fields = request_fields("GET", "/files/a.bin");
    fields.push(("range", "bytes=10-19"));
    s.request(4, &headers(&fields));
    let r = s.heard(4);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &content[10..20]);
    assert_eq!(r.field("content-range"), Some("bytes 10-19/5000"));
    assert!(!s.conn.pulls(0) && !s.conn.pulls(4));
}

fn gunzip(gz: &[u8]) -> Vec<u8> {
    use zlib_rs::{Inflate, InflateFlush, Status};
    let mut inflate = Inflate::new(true, 31);
    let mut out = vec![0u8; 1 << 20];
    let status = inflate.decompress(gz, &mut out, InflateFlush::Finish);
    assert!(matches!(status, Ok(Status::StreamEnd)), "{status:?}");
    out.truncate(inflate.total_out() as usize);
    out
}

#[test]
fn a_file_is_compressed_on_the_fly_like_compress() {
    let text: Vec<u8> = b"berth serves files over HTTP/3. "
        .iter()
        .copied()
        .cycle()
        .take(100_000)
        .collect();
    let mut s = with_files(&[("t.txt", text.clone())]);
    let mut fields = request_fields("GET", "/files/t.txt");
    fields.push(("accept-encoding", "gzip"));
    s.request(0, &headers(&fields));
    let a = s.heard(0);
    assert_eq!((a.status, a.fin), (200, true));
    assert_eq!(a.field("content-encoding"), Some("gzip"));
    assert_eq!(a.field("content-length"), None);
    assert_eq!(a.field("vary"), Some("Accept-Encoding"));
    assert_eq!(gunzip(&a.body), text);
    // A conditional request: 304, no body.
    let etag = a.field("etag").unwrap().to_owned();
    let mut fields = request_fields("GET", "/files/t.txt");
    fields.push(("accept-encoding", "gzip"));
    fields.push(("if-none-match", &etag));
    s.request(4, &headers(&fields));
    let n = s.heard(4);
    assert_eq!((n.status, n.body.len(), n.fin), (304, 0, true));
}

#[test]
fn a_streamed_reply_and_one_with_trailers() {
    let mut s = server();
    s.request(0, &get("/stream"));
    let a = s.heard(0);
    assert_eq!(a.status, 200);
    assert_eq!(&a.body[..5], b"first");
    assert_eq!(a.body.len(), 5 + 100_000);
    assert!(a.fin && a.trailers.is_empty());
    s.request(4, &get("/trailers"));
    let t = s.heard(4);
    assert_eq!((t.status, &t.body[..], t.fin), (200, &b"body"[..], true));
    assert_eq!(t.trailers, vec![("grpc-status".to_owned(), "0".to_owned())]);
    assert_eq!(s.conn.open_streams(), 0);
}

#[test]
fn a_producer_that_has_nothing_parks_until_the_wake() {
    let mut s = server();
    s.hold = true;
    s.request(0, &get("/test/slow"));
    s.held.clear();
    let (writer, stream) = producer();
    s.reply(
        0,
        berth_proto::http::Reply::streamed(200, b"a".to_vec(), stream),
    );
    let pulls = s.pulls.len();
    // Nothing pushed: the pull found nothing and the stream waits.
    s.process();
    assert_eq!(s.pulls.len(), pulls);
    writer.push(b"bc".to_vec()).unwrap();
    writer
        .end_with(vec![("x-t".to_owned(), b"1".to_vec())])
        .unwrap();
    s.pump();
    let a = s.heard(0);
    assert_eq!((&a.body[..], a.fin), (&b"abc"[..], true));
    assert_eq!(a.trailers, vec![("x-t".to_owned(), "1".to_owned())]);
}

#[test]
fn jobs_are_answered_out_of_order_and_bounded_per_connection() {
    let mut s = server();
    s.limits.jobs_per_connection = 2;
    s.hold = true;
    for id in [0, 4, 8] {
        s.request(id, &get("/test/slow"));
    }
    // The third waits its turn in the connection.
    assert_eq!(
        s.held.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![0, 4]
    );
    s.run_job(4);
    assert_eq!(s.heard(4).status, 200);
    assert!(!s.written.contains_key(&0));
    assert_eq!(
        s.held.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![0, 8]
    );
    s.run_job(8);
    s.run_job(0);
    for id in [0, 4, 8] {
        assert_eq!((s.heard(id).status, s.heard(id).fin), (200, true));
    }
    assert_eq!(s.conn.open_streams(), 0);
}

#[test]
fn a_stream_reset_while_its_job_is_out_cancels_it() {
    let mut s = server();
    s.hold = true;
    s.request(0, &get("/test/slow"));
    // The request was whole: a reset of the client's side changes nothing...
    s.conn.reset(0, 0x10c);
    assert_eq!(s.conn.take_cancelled().count(), 0);
    // ...STOP_SENDING gives the answer up.
    s.conn.stopped(0, 0x10c);
    assert_eq!(s.conn.take_cancelled().collect::<Vec<_>>(), vec![0]);
    s.run_job(0);
    assert!(!s.written.contains_key(&0));
    assert_eq!(s.conn.open_streams(), 0);
    assert_eq!(s.conn.counts().client_resets, 1);
}

#[test]
fn refusals_are_the_exchanges() {
    let mut s = server();
    s.limits.max_body_bytes = 10;
    s.limits.max_uri_bytes = 20;
    // 413 from content-length, before the body.
    let mut fields = request_fields("POST", "/echo");
    fields.push(("content-length", "100"));
    s.recv(0, &headers(&fields), false);
    assert_eq!(s.heard(0).status, 413);
    assert_eq!(s.stops(0), vec![ErrorCode::H3_NO_ERROR]);
    // 413 from the body itself.
    let mut bytes = headers(&request_fields("POST", "/echo"));
    bytes.extend(data(&[b'x'; 11]));
    s.recv(4, &bytes, false);
    let a = s.heard(4);
    assert_eq!((a.status, a.fin), (413, true));
    assert_eq!(a.body, b"request body too large\n");
    // 414, 501.
    s.request(8, &get(&format!("/{}", "a".repeat(30))));
    assert_eq!(s.heard(8).status, 414);
    s.request(12, &headers(&request_fields("BREW", "/")));
    assert_eq!(s.heard(12).status, 501);
    s.request(
        16,
        &headers(&[(":method", "CONNECT"), (":authority", "x:1")]),
    );
    assert_eq!(s.heard(16).status, 501);
    assert_eq!(s.close_code(), None);
    assert_eq!(s.conn.open_streams(), 0);
}

#[test]
fn a_field_section_past_the_limit_is_431() {
    let mut s = Server::new(H3Config::default());
    s.limits.max_header_bytes = 200;
    s.start();
    s.open_control();
    // Decoded past the limit (the frame is within twice the limit).
    let long = "v".repeat(150);
    let mut fields = request_fields("GET", "/");
    fields.push(("x-long", &long));
    s.request(0, &headers(&fields));
    assert_eq!(s.heard(0).status, 431);
    // A HEADERS frame past the reader's limit: skipped unread, answered 431.
    let longer = "v".repeat(1000);
    let mut fields = request_fields("GET", "/");
    fields.push(("x-long", &longer));
    let mut bytes = headers(&fields);
    bytes.extend(data(b"ignored"));
    s.request(4, &bytes);
    assert_eq!(s.heard(4).status, 431);
    s.request(8, &get("/"));
    assert_eq!(s.heard(8).status, 200);
    assert_eq!(s.conn.counts().oversized_heads, 2);
    // More fields than Limits::max_headers.
    let mut s = server();
    s.limits.max_headers = 3;
    let mut fields = request_fields("GET", "/");
    fields.extend([("a", "1"), ("b", "2"), ("c", "3")]);
    s.request(0, &headers(&fields));
    assert_eq!(s.heard(0).status, 200);
    fields.push(("d", "4"));
    s.request(4, &headers(&fields));
    assert_eq!(s.heard(4).status, 431);
    assert_eq!(s.conn.counts().oversized_heads, 1);
}

#[test]
fn malformed_requests_are_stream_errors() {
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![(":method", "GET"), (":path", "/")],
        vec![
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("Upper", "x"),
        ],
        vec![
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("connection", "x"),
        ],
        vec![(":status", "200")],
    ];
    let mut s = server();
    for (i, fields) in cases.iter().enumerate() {
        let id = 4 * i as u64;
        s.request(id, &headers(fields));
        assert_eq!(
            s.resets(id),
            vec![ErrorCode::H3_MESSAGE_ERROR],
            "{fields:?}"
        );
        assert_eq!(s.stops(id), vec![ErrorCode::H3_MESSAGE_ERROR]);
        assert!(!s.written.contains_key(&id));
    }
    // content-length against DATA: more, and fewer.
    let mut fields = request_fields("POST", "/echo");
    fields.push(("content-length", "3"));
    let mut more = headers(&fields);
    more.extend(data(b"abcd"));
    s.request(100, &more);
    assert_eq!(s.resets(100), vec![ErrorCode::H3_MESSAGE_ERROR]);
    let mut fewer = headers(&fields);
    fewer.extend(data(b"ab"));
    s.request(104, &fewer);
    assert_eq!(s.resets(104), vec![ErrorCode::H3_MESSAGE_ERROR]);
    // Trailers with a pseudo-field.
    let mut bad = headers(&request_fields("POST", "/echo"));
    bad.extend(data(b"ab"));
    bad.extend(headers(&[(":path", "/")]));
    s.request(108, &bad);
    assert_eq!(s.resets(108), vec![ErrorCode::H3_MESSAGE_ERROR]);
    // FIN with no HEADERS: incomplete.
    s.request(112, &[]);
    assert_eq!(s.resets(112), vec![ErrorCode::H3_REQUEST_INCOMPLETE]);
    assert_eq!(s.close_code(), None);
    assert_eq!(s.conn.counts().stream_errors, 8);
    s.request(116, &get("/"));
    assert_eq!(s.heard(116).status, 200);
}

#[test]
fn trailers_in_a_request_are_read_and_the_answer_goes() {
    let mut s = server();
    let mut bytes = headers(&request_fields("POST", "/echo"));
    bytes.extend(data(b"ab"));
    bytes.extend(headers(&[("x-checksum", "1")]));
    bytes.extend([0x21, 0x00]); // an unknown frame after trailers is fine
    s.request(0, &bytes);
    assert_eq!(s.heard(0).body, b"ab");
}

/// A fresh server fed `stream`'s bytes: the connection's close code.
fn closes_with(stream: u64, bytes: &[u8], fin: bool) -> Option<ErrorCode> {
    let mut s = server();
    s.recv(stream, bytes, fin);
    assert!(s.closed || s.close_code().is_none());
    s.close_code()
}

#[test]
fn connection_errors() {
    let unexpected = Some(ErrorCode::H3_FRAME_UNEXPECTED);
    // DATA before HEADERS.
    assert_eq!(closes_with(0, &data(b"x"), false), unexpected);
    // HEADERS or DATA after trailers.
    let mut after = headers(&request_fields("POST", "/echo"));
    after.extend(headers(&[("x-t", "1")]));
    after.extend(data(b"x"));
    assert_eq!(closes_with(0, &after, false), unexpected);
    // An HTTP/2 frame type (PING) on a request stream; a control frame on one.
    let mut ping = get("/");
    ping.extend([0x06, 0x00]);
    assert_eq!(closes_with(0, &ping, false), unexpected);
    let mut goaway = get("/");
    Frame::Goaway(0).write(&mut goaway).unwrap();
    assert_eq!(closes_with(0, &goaway, false), unexpected);
    // A frame cut short by FIN.
    let short = &get("/")[..3];
    assert_eq!(closes_with(0, short, true), Some(ErrorCode::H3_FRAME_ERROR));
    // A client's PUSH_PROMISE.
    let mut push = get("/");
    frame::write_header(frame::kind::PUSH_PROMISE, 2, &mut push);
    push.extend([0, 0]);
    assert_eq!(closes_with(0, &push, false), unexpected);
}

#[test]
fn the_peers_control_stream_rules() {
    // SETTINGS first.
    let mut no_settings = Vec::new();
    UniStream::Control.write(&mut no_settings).unwrap();
    Frame::Goaway(0).write(&mut no_settings).unwrap();
    let mut s = Server::new(H3Config::default());
    s.start();
    s.recv(2, &no_settings, false);
    assert_eq!(s.close_code(), Some(ErrorCode::H3_MISSING_SETTINGS));
    assert!(s.closed);
    // One control stream.
    let mut s = server();
    s.recv(6, &control(Settings::default()), false);
    assert_eq!(s.close_code(), Some(ErrorCode::H3_STREAM_CREATION_ERROR));
    // Never closed: by FIN or by reset.
    let mut s = server();
    s.recv(CONTROL, &[], true);
    assert_eq!(s.close_code(), Some(ErrorCode::H3_CLOSED_CRITICAL_STREAM));
    let mut s = server();
    s.conn.reset(CONTROL, 0);
    s.start();
    assert!(s.closed);
    assert_eq!(s.close_code(), Some(ErrorCode::H3_CLOSED_CRITICAL_STREAM));
    // A second SETTINGS.
    let mut twice = control(Settings::default());
    Settings::default().write_frame(None, &mut twice).unwrap();
    let mut s = Server::new(H3Config::default());
    s.recv(2, &twice, false);
    assert_eq!(s.close_code(), Some(ErrorCode::H3_FRAME_UNEXPECTED));
    // A client's push stream.
    let mut push = Vec::new();
    UniStream::Push { push_id: 0 }.write(&mut push).unwrap();
    let mut s = server();
    s.recv(6, &push, false);
    assert_eq!(s.close_code(), Some(ErrorCode::H3_STREAM_CREATION_ERROR));
    // A client's GOAWAY is heard, and nothing more.
    let mut s = server();
    let mut g = Vec::new();
    Frame::Goaway(0).write(&mut g).unwrap();
    s.recv(CONTROL, &g, false);
    assert!(s.conn.peer_gone());
    assert_eq!(s.close_code(), None);
}

#[test]
fn unknown_stream_types_are_stopped_and_ignored() {
    let mut s = server();
    let mut unknown = Vec::new();
    varint::write(0x21, &mut unknown);
    unknown.extend(b"anything at all");
    s.recv(6, &unknown, false);
    assert_eq!(s.stops(6), vec![ErrorCode::H3_STREAM_CREATION_ERROR]);
    s.recv(6, b"more", true);
    assert_eq!(s.close_code(), None);
    s.request(0, &get("/"));
    assert_eq!(s.heard(0).status, 200);
}

/// The client's QPACK encoder with a table the server allows.
fn client_encoder() -> Encoder {
    let mut e = Encoder::new();
    e.set_huffman(false);
    e.peer_settings(4096, 16).unwrap();
    e.set_capacity(4096).unwrap();
    e
}

fn encoded_request(e: &mut Encoder, stream: u64, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut fields = request_fields("GET", path);
    fields.extend_from_slice(extra);
    let mut section = Vec::new();
    e.encode(
        stream,
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        &mut section,
    );
    let mut out = Vec::new();
    Frame::Headers(&section).write(&mut out).unwrap();
    out
}

#[test]
fn a_request_blocked_on_the_encoder_stream_resumes_when_it_comes() {
    let mut s = server();
    let mut e = client_encoder();
    e.insert(b"x-token", b"secret-value").unwrap();
    let request = encoded_request(&mut e, 0, "/", &[("x-token", "secret-value")]);
    let mut enc = Vec::new();
    UniStream::QpackEncoder.write(&mut enc).unwrap();
    e.write_encoder_stream(&mut enc);
    // The request comes before the insert it references: blocked, not answered.
    s.request(0, &request);
    assert!(!s.written.contains_key(&0));
    assert!(!s.conn.wants_input(0, &s.limits) || s.conn.open_streams() == 1);
    // The encoder stream comes: answered, and the section acknowledged on our decoder
    // stream (7).
    s.recv(ENCODER, &enc, false);
    assert_eq!(s.heard(0).status, 200);
    let acks = &s.written[&7].0[1..];
    e.handle_decoder_stream(acks).unwrap();
    assert!(e.insert_count() >= 1);
    assert_eq!(e.known_received_count(), e.insert_count());
    assert_eq!(s.close_code(), None);
}

#[test]
fn blocked_streams_are_bounded_by_settings() {
    let mut s = Server::new(H3Config {
        qpack_blocked_streams: 1,
        ..H3Config::default()
    });
    s.start();
    s.open_control();
    let mut e = client_encoder();
    e.insert(b"x-a", b"1").unwrap();
    let r0 = encoded_request(&mut e, 0, "/", &[("x-a", "1")]);
    let r4 = encoded_request(&mut e, 4, "/", &[("x-a", "1")]);
    s.request(0, &r0);
    assert_eq!(s.close_code(), None);
    s.request(4, &r4);
    assert_eq!(s.close_code(), Some(ErrorCode::QPACK_DECOMPRESSION_FAILED));
}

#[test]
fn a_bad_encoder_stream_closes_the_connection() {
    let mut s = server();
    let mut enc = Vec::new();
    UniStream::QpackEncoder.write(&mut enc).unwrap();
    // Set Dynamic Table Capacity past what berth allows (4096).
    enc.push(0x3f);
    enc.extend([0xe1, 0xff, 0x03]);
    s.recv(ENCODER, &enc, false);
    assert_eq!(s.close_code(), Some(ErrorCode::QPACK_ENCODER_STREAM_ERROR));
    // Closing a QPACK stream is closing a critical stream.
    let mut s = server();
    let mut enc = Vec::new();
    UniStream::QpackEncoder.write(&mut enc).unwrap();
    s.recv(ENCODER, &enc, true);
    assert_eq!(s.close_code(), Some(ErrorCode::H3_CLOSED_CRITICAL_STREAM));
}

#[test]
fn the_drain_sends_goaway_finishes_what_is_in_flight_and_rejects_the_rest() {
    let mut s = server();
    s.hold = true;
    s.request(0, &get("/test/slow"));
    s.request(4, &get("/"));
    s.conn.close_after_response();
    s.start(); // a process with nothing new
    let (_, goaways) = hear_control(&s.written[&3].0);
    assert_eq!(goaways, vec![8]);
    assert!(!s.closed);
    // A request past the GOAWAY is rejected; the client retries it elsewhere.
    s.request(8, &get("/"));
    assert_eq!(s.resets(8), vec![ErrorCode::H3_REQUEST_REJECTED]);
    assert_eq!(s.conn.counts().rejected, 1);
    s.run_job(0);
    assert_eq!(s.heard(0).status, 200);
    assert!(s.closed);
    assert_eq!(s.close_code(), Some(ErrorCode::H3_NO_ERROR));
    // The last action closes.
    assert!(matches!(s.actions.last(), Some(Quic::Close { .. })));
}

#[test]
fn a_body_fed_to_a_job_as_it_arrives() {
    let mut s = Server::with(H3Config::default(), h2_support::Sink);
    s.stream_bodies = true;
    s.hold = true;
    s.start();
    s.open_control();
    let mut bytes = headers(&request_fields("POST", "/upload"));
    bytes.extend(data(b"abc"));
    s.recv(0, &bytes, false);
    assert_eq!(s.held.len(), 1);
    s.recv(0, &data(b"defg"), true);
    let (id, job) = s.held.pop().unwrap();
    let reply = berth_proto::http::Job::run(job);
    s.reply(id, reply);
    assert_eq!(s.heard(0).body, b"taken=7 end");
}

#[test]
fn a_streamed_body_past_the_limit_aborts_the_job_and_is_answered_413() {
    // As over HTTP/1.1 and HTTP/2: the client hears 413 at once, the job that reads the body
    // hears it cut, and the job's own answer, when it comes, is dropped.
    let mut s = Server::with(H3Config::default(), h2_support::Sink);
    s.stream_bodies = true;
    s.hold = true;
    s.limits.max_body_bytes = 1000;
    s.start();
    s.open_control();
    let mut bytes = headers(&request_fields("POST", "/upload"));
    bytes.extend(data(&[1; 600]));
    s.recv(0, &bytes, false);
    let (id, job) = s.held.pop().unwrap();
    s.recv(0, &data(&[2; 600]), false);
    let a = s.heard(0);
    assert_eq!((a.status, a.fin), (413, true));
    assert_eq!(
        s.stops(0),
        vec![ErrorCode::H3_NO_ERROR],
        "the client is told to stop"
    );
    let h2_support::TestJob::Sink(body) = job else {
        panic!()
    };
    assert!(matches!(body.pop(1 << 20), Popped::Data(d) if d.len() == 600));
    assert_eq!(
        body.pop(1 << 20),
        Popped::Aborted,
        "the job learns the body is cut"
    );
    s.reply(id, Reply::new(200, "text/plain", b"late".to_vec()));
    assert_eq!(s.heard(0).status, 413, "the job's late answer is dropped");
    assert_eq!(s.conn.open_streams(), 0);
}

#[test]
fn bodies_taken_whole_are_read_on_only_within_about_one_body_limit() {
    // As over HTTP/2: the connection holds about one body limit of bodies taken whole,
    // however many streams send them. Past it only the lowest stream is read on (QUIC's
    // stream window holds the others' clients), until the one before it is answered.
    let mut s = server();
    s.limits.max_body_bytes = 100_000;
    for id in [0, 4, 8] {
        let mut bytes = headers(&request_fields("POST", "/missing"));
        bytes.extend(data(&[b' '; 60_000]));
        s.recv(id, &bytes, false);
    }
    let wants = |s: &Server| [0, 4, 8].map(|id| s.conn.wants_input(id, &s.limits));
    assert_eq!(wants(&s), [true, false, false]);
    s.recv(0, &[], true);
    assert_eq!(s.heard(0).status, 404);
    assert_eq!(wants(&s)[1..], [true, false], "the next is read on");
    s.recv(4, &[], true);
    s.recv(8, &[], true);
    assert_eq!((s.heard(4).status, s.heard(8).status), (404, 404));
}

#[test]
fn the_static_answers_decode_without_a_table() {
    // What `hear` relies on: nothing the server sends needs its encoder stream.
    let mut s = server();
    for id in (0..40).step_by(4) {
        s.request(id, &get("/"));
    }
    assert!(!s.written.contains_key(&(3 + 4)) || s.written[&7].0 == [0x03]);
    let mut section = Vec::new();
    qpack::encode_static([(&b":status"[..], &b"200"[..])], false, &mut section);
    assert_eq!(section[..2], [0, 0]);
}

#[test]
fn a_head_dribbled_past_the_header_timeout_resets_its_stream() {
    let mut s = server();
    let t = s.timeouts;
    assert_eq!(s.conn.poll_timeout(&t), None);
    let bytes = get("/");
    s.recv(0, &bytes[..3], false);
    let start = s.now;
    assert_eq!(s.conn.poll_timeout(&t), Some(start + t.header));
    // Each byte does not extend it.
    s.advance(t.header / 2);
    s.recv(0, &bytes[3..4], false);
    assert_eq!(s.conn.poll_timeout(&t), Some(start + t.header));
    s.advance(t.header / 2);
    assert_eq!(s.resets(0), vec![ErrorCode::H3_REQUEST_INCOMPLETE]);
    assert_eq!(s.conn.open_streams(), 0);
    assert_eq!(s.conn.poll_timeout(&t), None);
    assert_eq!(s.close_code(), None);
}

#[test]
fn a_body_that_stops_arriving_is_answered_408() {
    let mut s = server();
    let t = s.timeouts;
    let mut bytes = headers(&request_fields("POST", "/echo"));
    bytes.extend(data(b"abc"));
    s.recv(0, &bytes, false);
    let start = s.now;
    assert_eq!(s.conn.poll_timeout(&t), Some(start + t.body));
    // Body bytes extend it.
    s.advance(t.body / 2);
    s.recv(0, &data(b"d"), false);
    assert_eq!(s.conn.poll_timeout(&t), Some(start + t.body / 2 + t.body));
    s.advance(t.body);
    let a = s.heard(0);
    assert_eq!((a.status, a.fin), (408, true));
    assert_eq!(s.stops(0), vec![ErrorCode::H3_NO_ERROR]);
    assert_eq!(s.conn.open_streams(), 0);
    // A whole request waits for nothing from the client: no deadline while its job is out.
    s.hold = true;
    s.request(4, &get("/test/slow"));
    assert_eq!(s.conn.poll_timeout(&t), None);
}

#[test]
fn streams_may_start_in_any_order_and_late_bytes_are_dropped() {
    let mut s = server();
    // QUIC may bring stream 8's first bytes before 4's, and 4's before 0's.
    s.request(8, &get("/"));
    s.request(4, &get("/fields"));
    s.request(0, &get("/nothing"));
    assert_eq!(
        (s.heard(0).status, s.heard(4).status, s.heard(8).status),
        (204, 200, 200)
    );
    // Bytes after a stream is done with (a retransmission, a late frame) are dropped.
    let written = s.written.clone();
    s.recv(4, &get("/"), true);
    assert_eq!(s.written, written);
    assert_eq!(s.conn.open_streams(), 0);
    // A stream rejected after GOAWAY stays rejected.
    s.conn.close_after_response();
    s.hold = true;
    s.request(20, &get("/test/slow"));
    s.request(12, &get("/test/slow"));
    assert_eq!(s.resets(12), vec![]);
    assert_eq!(s.resets(20), vec![]);
    s.pump();
    s.request(24, &get("/"));
    assert_eq!(s.resets(24), vec![ErrorCode::H3_REQUEST_REJECTED]);
    s.recv(24, &get("/"), true);
    assert_eq!(s.resets(24).len(), 1);
    // 16 was opened by QUIC when 20 was, below the GOAWAY: it is served when it comes.
    // (It waits its turn behind the two jobs out: the connection's share.)
    s.request(16, &get("/"));
    s.run_job(12);
    s.run_job(20);
    assert_eq!(s.heard(16).status, 200);
    assert_eq!(s.close_code(), Some(ErrorCode::H3_NO_ERROR));
}

/// A small deterministic generator, so that the noise below is the same every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn noise_on_every_stream_never_panics_and_ends_in_an_answer_or_an_error() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut post = headers(&request_fields("POST", "/echo"));
    post.extend(data(b"hello"));
    let valid = [control(Settings::default()), get("/"), post];
    for round in 0..300 {
        let mut s = server();
        s.files = vec![("a.txt".into(), b"abc".to_vec())];
        for _ in 0..8 {
            // Either a valid stream's bytes with a few bytes flipped, or noise.
            let stream = [0u64, 4, 8, 2, 6, 10, 14][(rng.next() % 7) as usize];
            let mut bytes = valid[(rng.next() % 3) as usize].clone();
            if rng.next() % 2 == 0 {
                for _ in 0..(rng.next() % 4) {
                    let i = (rng.next() as usize) % bytes.len();
                    bytes[i] = rng.next() as u8;
                }
            } else {
                bytes = (0..rng.next() % 40).map(|_| rng.next() as u8).collect();
            }
            let cut = (rng.next() as usize) % (bytes.len() + 1);
            s.recv(stream, &bytes[..cut], false);
            s.recv(stream, &bytes[cut..], rng.next() % 3 == 0);
        }
        // Whatever happened, each request stream that is gone was answered, reset, or the
        // connection is closed; nothing is held for a stream that is not there.
        assert!(s.closed || s.close_code().is_none(), "round {round}");
        if s.closed {
            assert_eq!(s.conn.open_streams(), 0, "round {round}");
        } else {
            // A connection the noise did not end still serves a good request.
            s.request(400, &get("/"));
            assert_eq!(s.heard(400).status, 200, "round {round}");
        }
    }
}

#[test]
fn a_pull_waits_for_quic_while_other_streams_go_on() {
    let content = vec![b'f'; 3000];
    let mut s = Server::new(H3Config {
        piece: 1000,
        ..H3Config::default()
    });
    s.start();
    s.open_control();
    s.files = vec![
        ("a.bin".into(), content.clone()),
        ("b.bin".into(), content.clone()),
    ];
    s.hold_pulls = true;
    s.request(0, &get("/files/a.bin"));
    s.request(4, &get("/files/b.bin"));
    // One pull per stream out at a time, however often the connection is called.
    assert_eq!(s.held_pulls, vec![(0, 1000), (4, 1000)]);
    s.request(8, &get("/"));
    s.start();
    assert_eq!(s.held_pulls.len(), 2);
    assert_eq!(s.heard(8).status, 200);
    assert!(s.conn.pulls(0) && s.conn.pulls(4));
    while !s.held_pulls.is_empty() {
        s.answer_pulls();
    }
    assert_eq!(s.heard(0).body, content);
    assert_eq!(s.heard(4).body, content);
    // The streams took turns.
    let order: Vec<u64> = s.pulls.iter().map(|p| p.0).collect();
    assert_eq!(order, vec![0, 4, 0, 4, 0, 4]);
}

#[test]
fn request_bytes_before_the_first_process_are_read_under_the_limits() {
    let mut s = Server::new(H3Config::default());
    s.conn.recv(0, &get("/"), true);
    s.start();
    assert_eq!(s.heard(0).status, 200);
    // And with no control stream from the client yet (§6.2.1 lets requests come first).
    assert!(s.conn.peer_settings().is_none());
}

#[test]
fn a_request_reset_while_its_body_arrives_is_dropped() {
    let mut s = server();
    let mut bytes = headers(&request_fields("POST", "/echo"));
    bytes.extend(data(b"abc"));
    s.recv(0, &bytes, false);
    s.conn.reset(0, 0x10c);
    s.start();
    assert_eq!(s.resets(0), vec![ErrorCode::H3_REQUEST_CANCELLED]);
    assert_eq!(s.conn.open_streams(), 0);
    // Its late bytes are dropped; the connection goes on.
    s.recv(0, &data(b"d"), true);
    assert!(!s.written.contains_key(&0));
    s.request(4, &get("/"));
    assert_eq!(s.heard(4).status, 200);
}

#[test]
fn a_switch_over_http3_is_refused_by_the_exchange() {
    let mut s = server();
    // HTTP/3 has no Upgrade: a handler's switch is the client's mistake (400), a job's the
    // server's (500), as over HTTP/2.
    s.request(0, &get("/upgrade"));
    assert_eq!(s.heard(0).status, 400);
    s.request(4, &get("/switch"));
    let a = s.heard(4);
    assert_eq!(a.status, 500);
    assert!(String::from_utf8_lossy(&a.body).contains("switch protocols"));
}

#[test]
fn a_blocked_stream_reset_by_the_client_is_cancelled_to_its_encoder() {
    let mut s = server();
    let mut e = client_encoder();
    e.insert(b"x-a", b"1").unwrap();
    let r0 = encoded_request(&mut e, 0, "/", &[("x-a", "1")]);
    s.recv(0, &r0, false);
    assert!(
        !s.conn.wants_input(0, &s.limits),
        "a blocked stream takes no more"
    );
    s.conn.reset(0, 0x10c);
    s.start();
    // Stream Cancellation (0b01, stream 0) on our decoder stream: the encoder may release
    // what the section referenced.
    let decoder_stream = &s.written[&7].0;
    assert_eq!(decoder_stream[1..], [0x40]);
    e.handle_decoder_stream(&decoder_stream[1..]).unwrap();
    assert_eq!(s.conn.open_streams(), 0);
    // The encoder stream comes late: nothing is answered for the cancelled stream.
    let mut enc = Vec::new();
    UniStream::QpackEncoder.write(&mut enc).unwrap();
    e.write_encoder_stream(&mut enc);
    s.recv(ENCODER, &enc, false);
    assert!(!s.written.contains_key(&0));
    assert_eq!(s.close_code(), None);
}

#[test]
fn trailers_blocked_on_the_encoder_stream_wait_with_the_end_of_the_request() {
    let mut s = server();
    let mut e = client_encoder();
    let mut bytes = headers(&request_fields("POST", "/echo"));
    bytes.extend(data(b"abc"));
    e.insert(b"x-sum", b"42").unwrap();
    let mut section = Vec::new();
    e.encode(0, [(&b"x-sum"[..], &b"42"[..])], &mut section);
    Frame::Headers(&section).write(&mut bytes).unwrap();
    s.request(0, &bytes);
    assert!(
        !s.written.contains_key(&0),
        "the request ends after its trailers"
    );
    let mut enc = Vec::new();
    UniStream::QpackEncoder.write(&mut enc).unwrap();
    e.write_encoder_stream(&mut enc);
    s.recv(ENCODER, &enc, false);
    assert_eq!(s.heard(0).body, b"abc");
}

#[test]
fn a_body_fed_to_a_job_is_read_only_as_the_job_takes_it() {
    let mut s = Server::with(
        H3Config {
            piece: 4,
            ..H3Config::default()
        },
        h2_support::Sink,
    );
    s.stream_bodies = true;
    s.hold = true;
    s.start();
    s.open_control();
    let mut bytes = headers(&request_fields("POST", "/upload"));
    for piece in [&b"abcd"[..], b"efgh", b"ij"] {
        bytes.extend(data(piece));
    }
    s.recv(0, &bytes, true);
    // The first piece fills the feed: the rest waits in the connection, and QUIC is told to
    // hold the client back.
    assert!(!s.conn.wants_input(0, &s.limits));
    let (_, job) = s.held.pop().unwrap();
    let h2_support::TestJob::Sink(body) = job else {
        panic!("not a sink job");
    };
    let mut taken = Vec::new();
    for _ in 0..10 {
        while let Popped::Data(d) = body.pop(1 << 20) {
            taken.extend(d);
        }
        s.pump();
    }
    assert_eq!(taken, b"abcdefghij");
    assert_eq!(body.pop(1), Popped::Ended);
}
