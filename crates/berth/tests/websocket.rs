//! WebSocket (RFC 6455) on the upgrade path, in every model, over real sockets with a real
//! client (tungstenite): `/ws/echo` echoes text and binary messages, small and large, answers
//! pings and closes in kind; bad handshakes get 400 or 426; a client that breaks the protocol
//! gets a close 1002 and the end of the connection.

#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use berth::drive::Model;
use berth_testkit::per_model;
use server::{ModelServer, Opts};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Bytes, Message};

fn start(model: Model) -> ModelServer {
    Opts::new(model).tls(false).start()
}

#[test]
fn echo_in_every_model() {
    for model in Model::ALL {
        let srv = start(model);
        let url = format!("ws://{}/ws/echo", srv.addr);
        let (mut ws, response) =
            tungstenite::connect(&url).unwrap_or_else(|e| panic!("{model}: {e}"));
        assert_eq!(response.status(), 101, "{model}");
        ws.send(Message::text("hello, berth")).unwrap();
        assert_eq!(ws.read().unwrap(), Message::text("hello, berth"), "{model}");
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        ws.send(Message::binary(big.clone())).unwrap();
        assert_eq!(ws.read().unwrap(), Message::binary(big), "{model}");
        ws.send(Message::Ping(Bytes::from_static(b"are you there")))
            .unwrap();
        assert_eq!(
            ws.read().unwrap(),
            Message::Pong(Bytes::from_static(b"are you there")),
            "{model}"
        );
        ws.close(None).unwrap();
        // The server answers the close and ends the connection.
        loop {
            match ws.read() {
                Ok(Message::Close(_)) => continue,
                Ok(other) => panic!("{model}: {other:?} after close"),
                Err(tungstenite::Error::ConnectionClosed) => break,
                Err(e) => panic!("{model}: {e}"),
            }
        }
        srv.stop();
    }
}

fn raw_handshake(srv: &ModelServer, extra: &str) -> (TcpStream, String) {
    let mut sock = TcpStream::connect(srv.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let req = format!(
        "GET /ws/echo HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n{extra}\r\n"
    );
    sock.write_all(req.as_bytes()).unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.read(&mut buf).unwrap();
    (sock, String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn bad_handshakes_are_refused_with_the_right_status() {
    let srv = start(Model::Evloop);
    let (_, text) = raw_handshake(&srv, "Sec-WebSocket-Version: 13\r\n");
    assert!(text.starts_with("HTTP/1.1 400"), "no key: {text}");
    let (_, text) = raw_handshake(
        &srv,
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: c2hvcnQ=\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 400"), "short key: {text}");
    let (_, text) = raw_handshake(
        &srv,
        "Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 426"), "version 8: {text}");
    assert!(text.contains("Sec-WebSocket-Version: 13"), "{text}");
    let (_, text) = raw_handshake(
        &srv,
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    assert!(
        text.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "{text}"
    );
    srv.stop();
}

// One test per model of the registry (`case::uring`): see `per_model!`.
berth::with_models!(per_model! { a_protocol_breach_is_closed_with_1002 });

fn a_protocol_breach_is_closed_with_1002(model: Model) {
    let srv = start(model);
    let (mut sock, text) = raw_handshake(
        &srv,
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 101"), "{model}: {text}");
    // An unmasked frame: clients must mask.
    sock.write_all(&[0x81, 0x02, b'h', b'i']).unwrap();
    let mut got = Vec::new();
    let _ = sock.read_to_end(&mut got);
    assert_eq!(
        &got[..4],
        &[0x88, got[1], 0x03, 0xEA],
        "{model}: a close 1002"
    );
    srv.stop();
}

#[test]
fn a_close_code_no_peer_may_send_is_closed_with_1002() {
    // Through a real client: a close code no peer may send.
    let srv = start(Model::Evloop);
    let (mut ws, _) = tungstenite::connect(format!("ws://{}/ws/echo", srv.addr)).unwrap();
    let _ = ws.close(Some(tungstenite::protocol::CloseFrame {
        code: CloseCode::from(1004),
        reason: "".into(),
    }));
    match ws.read() {
        Ok(Message::Close(Some(frame))) => assert_eq!(u16::from(frame.code), 1002),
        other => panic!("{other:?}"),
    }
    srv.stop();
}
