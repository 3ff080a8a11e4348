//! WebSocket clients of the message engine (`ws://` listeners, issue 20's `/ws/relay`): a
//! browser is a named client like any other — its first text message is its name, then
//! `@NAME text` relays to a `tcp://` client or another browser and back. Refusals and endings
//! are close frames; bad openings get an HTTP answer. Real sockets on 127.0.0.1, port 0, with
//! a real WebSocket client (tungstenite) and the framed protocol's wire.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use berth::msg::{Endpoint, EngineConfig};
use berth_testkit::msg::*;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

fn ws_endpoint() -> Endpoint {
    Endpoint::parse("ws://127.0.0.1:0").unwrap()
}

/// An engine with the relay demo on a `tcp://` and a `ws://` listener.
fn relay(config: EngineConfig) -> (Served, SocketAddr, SocketAddr) {
    let served = echo(config, &[tcp_endpoint(), ws_endpoint()]);
    let (tcp, ws) = (addr_of(&served.endpoints[0]), addr_of(&served.endpoints[1]));
    (served, tcp, ws)
}

fn open(addr: SocketAddr) -> Ws {
    let (ws, response) = tungstenite::connect(format!("ws://{addr}/ws/relay")).unwrap();
    assert_eq!(response.status(), 101);
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    ws
}

/// A browser that has given its name.
fn named(addr: SocketAddr, name: &str) -> Ws {
    let mut ws = open(addr);
    ws.send(Message::text(name)).unwrap();
    ws
}

/// The next data message (pings and pongs skipped).
fn next(ws: &mut Ws) -> Message {
    loop {
        match ws.read().unwrap() {
            Message::Ping(_) | Message::Pong(_) => continue,
            m => return m,
        }
    }
}

#[track_caller]
/// The close the server sent: its code and reason.
fn close_of(ws: &mut Ws) -> (CloseCode, String) {
    loop {
        match ws.read() {
            Ok(Message::Close(Some(f))) => return (f.code, f.reason.to_string()),
            Ok(Message::Close(None)) => panic!("a close without a code"),
            Ok(_) => continue,
            Err(e) => panic!("no close frame: {e}"),
        }
    }
}

/// Sends a raw request and reads the whole answer (the server closes after a refusal).
fn raw_answer(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn a_browser_and_a_tcp_client_relay_to_each_other_by_name() {
    let (_served, tcp_addr, ws_addr) = relay(EngineConfig::default());
    let mut alice = named(ws_addr, "alice");
    let (mut bob, answer) = hello(tcp(tcp_addr), "bob");
    assert_eq!(answer, ok());

    alice.send(Message::text("@bob hi bob")).unwrap();
    assert_eq!(
        read_frame(&mut bob).unwrap(),
        Frame::Data(b"@alice hi bob".to_vec())
    );
    bob.write_all(&frame(b"@alice hi alice")).unwrap();
    assert_eq!(next(&mut alice), Message::text("@bob hi alice"));

    // Anything else comes back to its sender, text as text and bytes as binary.
    alice.send(Message::text("plain")).unwrap();
    assert_eq!(next(&mut alice), Message::text("plain"));
    alice.send(Message::binary(vec![0xff, 0xfe, 0])).unwrap();
    assert_eq!(next(&mut alice), Message::binary(vec![0xff, 0xfe, 0]));
    alice.send(Message::text("")).unwrap();
    assert_eq!(next(&mut alice), Message::text(""));

    // An unknown name is said so, as on tcp://.
    alice.send(Message::text("@nobody hello")).unwrap();
    assert_eq!(next(&mut alice), Message::text("@! no client named nobody"));

    // Messages sent right behind the name are taken, in order.
    let mut carol = open(ws_addr);
    for m in ["carol", "@bob one", "@bob two", "@alice three"] {
        carol.send(Message::text(m)).unwrap();
    }
    assert_eq!(
        read_frame(&mut bob).unwrap(),
        Frame::Data(b"@carol one".to_vec())
    );
    assert_eq!(
        read_frame(&mut bob).unwrap(),
        Frame::Data(b"@carol two".to_vec())
    );
    assert_eq!(next(&mut alice), Message::text("@carol three"));
}

#[test]
fn large_messages_cross_between_browsers_and_tcp_whole() {
    let (_served, tcp_addr, ws_addr) = relay(EngineConfig::default());
    let mut alice = named(ws_addr, "alice");
    let mut dave = named(ws_addr, "dave");
    let (mut bob, _) = hello(tcp(tcp_addr), "bob");
    // A round trip proves both names are in before the relays.
    dave.send(Message::text("ready")).unwrap();
    assert_eq!(next(&mut dave), Message::text("ready"));
    alice.send(Message::text("ready")).unwrap();
    assert_eq!(next(&mut alice), Message::text("ready"));

    // Text of up to 64 KiB arrives as text; longer is binary (its bytes cannot be checked
    // before they are sent), in both cases whole and exact.
    let short = "é".repeat(20_000);
    alice.send(Message::text(format!("@dave {short}"))).unwrap();
    assert_eq!(next(&mut dave), Message::text(format!("@alice {short}")));
    let long = "x".repeat(1 << 20);
    alice.send(Message::text(format!("@dave {long}"))).unwrap();
    assert_eq!(
        next(&mut dave),
        Message::binary(format!("@alice {long}").into_bytes())
    );

    // 3 MiB from a framed client to a browser, and back.
    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut msg = b"@alice ".to_vec();
    msg.extend_from_slice(&big);
    bob.write_all(&frame(&msg)).unwrap();
    let Message::Binary(got) = next(&mut alice) else {
        panic!("not binary")
    };
    assert_eq!(&got[..5], b"@bob ");
    assert!(got[5..] == big[..], "the payload changed on the way");
    let mut back = b"@bob ".to_vec();
    back.extend_from_slice(&big);
    alice.send(Message::binary(back)).unwrap();
    let Frame::Data(got) = read_frame(&mut bob).unwrap() else {
        panic!("not data")
    };
    assert_eq!(&got[..7], b"@alice ");
    assert!(got[7..] == big[..], "the payload changed on the way back");
}

#[test]
fn two_browsers_race_for_one_name_and_exactly_one_wins() {
    let (_served, _, ws_addr) = relay(EngineConfig::default());
    for round in 0..10 {
        let name = format!("racer{round}");
        let mut a = open(ws_addr);
        let mut b = open(ws_addr);
        let (ta, tb) = (name.clone(), name.clone());
        let ha = std::thread::spawn(move || {
            a.send(Message::text(ta)).unwrap();
            a.send(Message::text("who")).unwrap();
            a
        });
        let hb = std::thread::spawn(move || {
            b.send(Message::text(tb)).unwrap();
            b.send(Message::text("who")).unwrap();
            b
        });
        let mut outcomes = Vec::new();
        // Both stay open until both outcomes are read: a browser dropped after its answer
        // frees the name, and the other, if the server has not read its name yet, may then
        // take it (rightly), which made this test fail under load.
        let mut both = [ha.join().unwrap(), hb.join().unwrap()];
        for ws in both.iter_mut() {
            match ws.read().unwrap() {
                Message::Text(t) => {
                    assert_eq!(t.as_str(), "who");
                    outcomes.push("won");
                }
                Message::Close(Some(f)) => {
                    assert_eq!(f.code, CloseCode::Policy);
                    assert!(f.reason.starts_with("name-taken "), "{}", f.reason);
                    outcomes.push("refused");
                }
                m => panic!("unexpected {m:?}"),
            }
        }
        outcomes.sort();
        assert_eq!(outcomes, ["refused", "won"], "round {round}");
    }
}

#[test]
fn refusals_and_endings_are_close_frames_with_the_reason() {
    let config = EngineConfig {
        max_message: 1000,
        max_opening: 400,
        handshake_timeout: Duration::from_millis(300),
        ..EngineConfig::default()
    };
    let (served, _, ws_addr) = relay(config);

    // A first message that is not text is no name.
    let mut ws = open(ws_addr);
    ws.send(Message::binary(b"alice".to_vec())).unwrap();
    let (code, reason) = close_of(&mut ws);
    assert_eq!(code, CloseCode::Policy);
    assert!(reason.starts_with("name-invalid "), "{reason}");

    // A name starting `#` is reserved, as on tcp://.
    let mut ws = named(ws_addr, "#1");
    let (code, reason) = close_of(&mut ws);
    assert_eq!(code, CloseCode::Policy);
    assert!(reason.starts_with("name-invalid"), "{reason}");

    // No name in time.
    // The engine reads its clock after the poll that sees the connection, so no earlier
    // than `started`.
    let started = Instant::now();
    let mut ws = open(ws_addr);
    let (code, reason) = close_of(&mut ws);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(code, CloseCode::Policy);
    assert!(reason.starts_with("timeout "), "{reason}");

    // An opening over `max_opening` (`--ws-max-head`): 431.
    let long = format!("GET /ws/relay HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(400));
    assert!(raw_answer(ws_addr, long.as_bytes()).starts_with("HTTP/1.1 431 "));

    // An opening that never ends is cut off at the same time.
    let mut s = TcpStream::connect(ws_addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /ws/relay HTTP/1.1\r\nHo").unwrap();
    // Closed by the server, well before the client's read timeout (10 s, 40 times the name
    // timeout) would end the read with an error.
    assert_eq!(s.read(&mut [0; 64]).unwrap(), 0);

    // A message over the engine's limit: 1009.
    let mut ws = named(ws_addr, "big");
    ws.send(Message::binary(vec![7; 1001])).unwrap();
    let (code, _) = close_of(&mut ws);
    assert_eq!(code, CloseCode::Size);

    // A frame a client may not send (unmasked) is a protocol error: 1002.
    let mut s = TcpStream::connect(ws_addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        b"GET /ws/relay HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .unwrap();
    s.write_all(b"\x81\x03abc").unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
    assert!(
        answer
            .windows(4)
            .any(|w| w[0] == 0x88 && w[2..4] == 1002u16.to_be_bytes()),
        "{answer:?}"
    );

    // Shutting down: 1001 to every browser.
    let mut ws = named(ws_addr, "last");
    ws.send(Message::text("in")).unwrap();
    assert_eq!(next(&mut ws), Message::text("in"));
    let waiter = std::thread::spawn(move || close_of(&mut ws));
    drop(served);
    let (code, reason) = waiter.join().unwrap();
    assert_eq!(code, CloseCode::Away);
    assert!(reason.starts_with("shutdown "), "{reason}");
}

#[test]
fn bad_openings_get_an_http_answer_and_the_listener_goes_on() {
    let (_served, _, ws_addr) = relay(EngineConfig::default());
    let key = "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let upgrade = "Connection: Upgrade\r\nUpgrade: websocket\r\n";
    let cases = [
        (
            format!("GET /elsewhere HTTP/1.1\r\nHost: x\r\n{upgrade}{key}\r\n"),
            "404",
        ),
        (
            "GET /ws/relay HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(),
            "426",
        ),
        (
            format!("GET /ws/relay HTTP/1.1\r\n{upgrade}Sec-WebSocket-Version: 8\r\n\r\n"),
            "426",
        ),
        (
            format!("GET /ws/relay HTTP/1.1\r\n{upgrade}Sec-WebSocket-Version: 13\r\n\r\n"),
            "400",
        ),
        (
            "\x16\x03\x01\x02\x00 not http at all\r\n\r\n".to_owned(),
            "400",
        ),
        (
            format!("GET /ws/relay HTTP/1.1\r\nX: {}\r\n", "a".repeat(20_000)),
            "431",
        ),
    ];
    for (request, status) in cases {
        let answer = raw_answer(ws_addr, request.as_bytes());
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{status}: {answer}"
        );
        assert!(answer.contains("Connection: close"), "{answer}");
    }
    // A client that resets in the middle of its opening, or of a frame, costs nothing.
    let mut s = TcpStream::connect(ws_addr).unwrap();
    s.write_all(b"GET /ws/relay HTTP/1.1\r\nHo").unwrap();
    drop(s);
    let mut ws = named(ws_addr, "still");
    let mut s = TcpStream::connect(ws_addr).unwrap();
    s.write_all(format!("GET /ws/relay HTTP/1.1\r\nHost: x\r\n{upgrade}{key}\r\n").as_bytes())
        .unwrap();
    s.write_all(b"\x81\x85ab").unwrap();
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s);
    ws.send(Message::text("alive")).unwrap();
    assert_eq!(next(&mut ws), Message::text("alive"));
}

#[test]
fn a_ws_endpoint_is_for_listening_only() {
    let mut engine = berth::msg::Engine::new(EngineConfig::default()).unwrap();
    let err = engine
        .connect(
            &Endpoint::parse("ws://127.0.0.1:9/ws/relay").unwrap(),
            "me",
            Duration::from_secs(1),
        )
        .unwrap_err();
    assert!(err.to_string().contains("for listening"), "{err}");
}

/// A masked client frame of a message compressed with permessage-deflate (RSV1 set).
fn compressed_frame(text: &str) -> Vec<u8> {
    use berth::proto::ws::deflate::{negotiate, Compressor};
    use berth::proto::ws::frame::{parse_header, Opcode};
    use berth::proto::ws::DeflateConfig;
    let config = DeflateConfig {
        threshold: 0,
        ..DeflateConfig::default()
    };
    let (agreed, _) = negotiate([b"permessage-deflate".as_slice()], &config).unwrap();
    let mut server_frame = Vec::new();
    Compressor::new(agreed).write_message(&mut server_frame, Opcode::Text, text.as_bytes());
    let h = parse_header(&server_frame).unwrap().unwrap();
    let payload = &server_frame[h.header_len..];
    assert!(payload.len() < 126);
    let mut out = vec![server_frame[0], 0x80 | payload.len() as u8, 0, 0, 0, 0];
    out.extend_from_slice(payload);
    out
}

/// Issue 34: a `ws://` listener agrees permessage-deflate and inflates what its clients send
/// (a short answer goes uncompressed, below the threshold); `?deflate=off` turns it off for
/// one listener.
#[test]
fn ws_listeners_inflate_compressed_messages_unless_deflate_is_off() {
    let off = Endpoint::parse("ws://127.0.0.1:0?deflate=off").unwrap();
    assert!(!off.deflate && ws_endpoint().deflate);
    assert!(Endpoint::parse("tcp://127.0.0.1:0?deflate=off").is_err());
    let served = echo(EngineConfig::default(), &[ws_endpoint(), off]);
    let (on, off) = (addr_of(&served.endpoints[0]), addr_of(&served.endpoints[1]));
    let opening = "GET /ws/relay HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
                   Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                   Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n";
    let head_of = |s: &mut TcpStream| {
        let mut head = Vec::new();
        let mut b = [0u8];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).unwrap();
            head.push(b[0]);
        }
        String::from_utf8(head).unwrap()
    };
    let mut s = TcpStream::connect(off).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(opening.as_bytes()).unwrap();
    let head = head_of(&mut s);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(!head.contains("Sec-WebSocket-Extensions"), "{head}");

    let mut s = TcpStream::connect(on).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(opening.as_bytes()).unwrap();
    let head = head_of(&mut s);
    assert!(
        head.contains(
            "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n"
        ),
        "{head}"
    );
    // The name and a message to itself, both compressed: the relay comes back plain.
    s.write_all(&compressed_frame("alice")).unwrap();
    s.write_all(&compressed_frame("@alice hello, compressed"))
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 256];
    while !String::from_utf8_lossy(&got).contains("hello, compressed") {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed: {got:02x?}");
        got.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(got[0], 0x81, "a plain text frame: {got:02x?}");
}

/// A masked client frame (FIN, `opcode`, RSV clear) of any length; the mask key is random
/// enough for a test and not zero, so that an unmasking bug shows.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let key = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![0x80 | opcode];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n < 65536 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

/// The next server frame: its first byte (FIN, RSV1, opcode) and its payload (unmasked).
fn server_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[1] & 0x80, 0, "a server frame is not masked");
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).unwrap();
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b).unwrap();
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0u8; len as usize];
    s.read_exact(&mut payload).unwrap();
    (head[0], payload)
}

/// A raw permessage-deflate message (RFC 7692 §7.2.2: the sync flush's tail put back)
/// inflated with zlib-rs's own inflater, not berth's.
fn inflate_raw(payload: &[u8]) -> Vec<u8> {
    use zlib_rs::{Inflate, InflateFlush};
    let mut input = payload.to_vec();
    input.extend_from_slice(&[0, 0, 0xff, 0xff]);
    let mut inflate = Inflate::new(false, 15);
    let mut out = vec![0u8; 4 << 20];
    inflate
        .decompress(&input, &mut out, InflateFlush::SyncFlush)
        .unwrap();
    out.truncate(inflate.total_out() as usize);
    out
}

/// JSON-like text of about `n` bytes.
fn json_like(n: usize) -> String {
    let mut s = String::from("[");
    let mut i = 0;
    while s.len() < n {
        s.push_str(&format!(
            r#"{{"id":{i},"name":"item {i}","tags":["a","b"]}},"#
        ));
        i += 1;
    }
    s.push(']');
    s
}

/// Issue 34: what a `ws://` listener sends a client that agreed permessage-deflate goes out
/// compressed from the threshold (256 bytes) up, RSV1 set on the wire and inflating (with
/// zlib-rs's inflater, not berth's) to the message: the echo of a message (handed to the
/// queue whole), a relay from a `tcp://` client (a stream gathered whole) and a binary
/// message. Shorter messages go plain, a relayed stream longer than 64 KiB goes plain (its
/// header leaves before its payload has arrived), and a client that offered nothing gets
/// everything plain.
#[test]
fn ws_listeners_compress_what_they_send_from_the_threshold_up() {
    let (_served, tcp_addr, ws_addr) = relay(EngineConfig::default());
    let connect = |offer: &str| {
        let mut s = TcpStream::connect(ws_addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let opening = format!(
            "GET /ws/relay HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{offer}\r\n"
        );
        s.write_all(opening.as_bytes()).unwrap();
        let mut head = Vec::new();
        let mut b = [0u8];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).unwrap();
            head.push(b[0]);
        }
        (s, String::from_utf8(head).unwrap())
    };
    let (mut alice, head) =
        connect("Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n");
    assert!(head.contains("permessage-deflate"), "{head}");
    alice.write_all(&client_frame(1, b"alice")).unwrap();
    let (mut bob, answer) = hello(tcp(tcp_addr), "bob");
    assert_eq!(answer, ok());

    // The echo of a 16 KiB JSON-like text: whole, compressed, text.
    let doc = json_like(16 * 1024);
    alice.write_all(&client_frame(1, doc.as_bytes())).unwrap();
    let (first, payload) = server_frame(&mut alice);
    assert_eq!(first, 0xc1, "FIN, RSV1, text");
    assert!(payload.len() < doc.len() / 4, "{} bytes", payload.len());
    assert_eq!(inflate_raw(&payload), doc.as_bytes());

    // A relay from the tcp:// client (streamed to the queue, gathered): compressed.
    let relayed = format!("@alice {doc}");
    bob.write_all(&frame(relayed.as_bytes())).unwrap();
    let (first, payload) = server_frame(&mut alice);
    assert_eq!(first, 0xc1);
    assert_eq!(inflate_raw(&payload), format!("@bob {doc}").as_bytes());

    // Binary stays binary when compressed.
    let blob: Vec<u8> = (0..4096u32).map(|i| (i % 7) as u8 | 0x80).collect();
    alice.write_all(&client_frame(2, &blob)).unwrap();
    let (first, payload) = server_frame(&mut alice);
    assert_eq!(first, 0xc2, "FIN, RSV1, binary");
    assert_eq!(inflate_raw(&payload), blob);

    // Below the threshold: plain.
    bob.write_all(&frame(b"@alice short")).unwrap();
    assert_eq!(server_frame(&mut alice), (0x81, b"@bob short".to_vec()));

    // A relayed stream past 64 KiB: plain, as it came.
    let long = format!("@alice {}", json_like(200 * 1024));
    bob.write_all(&frame(long.as_bytes())).unwrap();
    let (first, payload) = server_frame(&mut alice);
    assert_eq!(first & 0x40, 0, "no RSV1 on a long stream");
    assert_eq!(payload, format!("@bob {}", &long[7..]).as_bytes());

    // A client that offered nothing: everything plain.
    let (mut carol, head) = connect("");
    assert!(!head.contains("permessage-deflate"), "{head}");
    carol.write_all(&client_frame(1, b"carol")).unwrap();
    carol.write_all(&client_frame(1, doc.as_bytes())).unwrap();
    let (first, payload) = server_frame(&mut carol);
    assert_eq!(first, 0x81);
    assert_eq!(payload, doc.as_bytes());
}

/// Issue 34: Python's `websockets` (which offers permessage-deflate by default) as a client
/// of a `ws://` listener: it agrees, and what the listener sends it (echoes of 64 B and 16 KiB
/// texts, a binary message, a relay) inflates to what was sent, as the client's own
/// inflater reads it.
#[test]
fn python_websockets_reads_what_a_ws_listener_compresses() {
    let python = berth_testkit::require_python_module("websockets");
    let (_served, _tcp_addr, ws_addr) = relay(EngineConfig::default());
    let script = r#"
import json, sys
from websockets.sync.client import connect
with connect(sys.argv[1], max_size=None) as ws:
    print(ws.response.headers.get("Sec-WebSocket-Extensions"))
    ws.send("py")
    doc = json.dumps([{"id": i, "name": "item %d" % i} for i in range(600)])
    for msg in ["x" * 64, doc, bytes(range(256)) * 64]:
        ws.send(msg)
        assert ws.recv(10) == msg, len(msg)
    ws.send("@py " + doc)
    assert ws.recv(10) == "@py " + doc
    print("ok")
"#;
    let out = std::process::Command::new(python)
        .args(["-c", script, &format!("ws://{ws_addr}/ws/relay")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("permessage-deflate"), "{stdout}");
    assert!(stdout.contains("ok"), "{stdout}");
}
