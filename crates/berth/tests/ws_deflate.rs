//! permessage-deflate (RFC 7692, issue 34) on `/ws/echo`, over real sockets: Python's
//! `websockets` (which offers it by default) in every model, the frames on the wire read raw
//! (RSV1 on compressed echoes, none below the threshold), a compression bomb closed with 1009
//! in every model, and the settings that turn it off or cap its window.

#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use berth::drive::Model;
use berth::proto::ws::deflate::Compressor;
use berth::proto::ws::frame::{parse_header, Opcode};
use berth::proto::ws::{deflate, DeflateConfig, WsConfig};
use server::{ModelServer, Opts};

fn start(model: Model, ws: WsConfig) -> ModelServer {
    Opts::new(model).tls(false).ws(ws).start()
}

/// The client: echoes through `websockets` with its default offer, and prints what was agreed.
const CLIENT: &str = r#"
import asyncio, sys, json
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

async def main(url, bomb):
    async with connect(url, max_size=None) as ws:
        print("extensions", ws.response.headers.get("Sec-WebSocket-Extensions"))
        if bomb:
            try:
                await ws.send(b"\0" * bomb)
                await ws.recv()
                print("no close")
            except ConnectionClosedError as e:
                print("closed", e.rcvd.code)
            return
        small = "hi" * 10
        doc = json.dumps([{"id": i, "name": "item %d" % i, "tags": ["a", "b"]} for i in range(300)])
        blob = bytes(range(256)) * 1200
        for msg in [small, doc, blob, doc, "", small]:
            await ws.send(msg)
            assert await ws.recv() == msg, len(msg)
        print("echoed", len(doc))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"#;

fn client(srv: &ModelServer, bomb: usize) -> String {
    let python = berth_testkit::require_python_module("websockets");
    let out = Command::new(python)
        .args(["-c", CLIENT, &format!("ws://{}/ws/echo", srv.addr)])
        .arg(bomb.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn python_websockets_agrees_and_echoes_compressed_in_every_model() {
    for model in Model::ALL {
        let srv = start(model, WsConfig::default());
        let out = client(&srv, 0);
        assert!(
            out.contains("extensions permessage-deflate; server_no_context_takeover"),
            "{model}: {out}"
        );
        assert!(out.contains("echoed"), "{model}: {out}");
        srv.stop();
    }
}

#[test]
fn a_compression_bomb_is_closed_with_1009_in_every_model() {
    let ws = WsConfig {
        max_message: 1 << 20,
        ..WsConfig::default()
    };
    for model in Model::ALL {
        let srv = start(model, ws);
        // 64 MiB of zeros: websockets sends them compressed, about 64 KiB on the wire.
        let out = client(&srv, 64 << 20);
        assert!(out.contains("closed 1009"), "{model}: {out}");
        srv.stop();
    }
}

/// Opens `/ws/echo` with `extensions` offered; the socket and the 101's head.
fn open(srv: &ModelServer, extensions: &str) -> (TcpStream, String) {
    let mut sock = TcpStream::connect(srv.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let offer = match extensions {
        "" => String::new(),
        e => format!("Sec-WebSocket-Extensions: {e}\r\n"),
    };
    let req = format!(
        "GET /ws/echo HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{offer}\r\n"
    );
    sock.write_all(req.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        sock.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    (sock, String::from_utf8(head).unwrap())
}

/// A masked client frame.
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let key = [9, 8, 7, 6];
    let mut out = vec![first];
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n @ 126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i & 3]));
    out
}

/// Reads one server frame: its first byte and payload.
fn read_frame(sock: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some(h)) = parse_header(&buf) {
            let end = h.header_len + h.len as usize;
            if buf.len() >= end {
                return (buf[0], buf[h.header_len..end].to_vec());
            }
        }
        let n = sock.read(&mut chunk).unwrap();
        assert!(n > 0, "closed early");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A message compressed as a client would send it (RSV1 and its first byte, masked).
fn compressed(opcode: Opcode, payload: &[u8], level: u8) -> Vec<u8> {
    let config = DeflateConfig {
        threshold: 0,
        level,
        ..DeflateConfig::default()
    };
    let (agreed, _) = deflate::negotiate([b"permessage-deflate".as_slice()], &config).unwrap();
    let mut frame = Vec::new();
    Compressor::new(agreed).write_message(&mut frame, opcode, payload);
    let h = parse_header(&frame).unwrap().unwrap();
    masked(frame[0], &frame[h.header_len..])
}

#[test]
fn rsv1_marks_compressed_echoes_and_small_ones_go_plain() {
    for model in [Model::Threaded, Model::Evloop, Model::Actor] {
        let srv = start(model, WsConfig::default());
        let (mut sock, head) = open(&srv, "permessage-deflate; client_max_window_bits");
        assert!(head.starts_with("HTTP/1.1 101"), "{model}: {head}");
        assert!(
            head.contains(
                "\r\nSec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n"
            ),
            "{model}: {head}"
        );
        // RFC 7692 §7.2.3.1's "Hello", compressed: echoed plain (below the threshold).
        sock.write_all(&masked(0xC1, &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00]))
            .unwrap();
        assert_eq!(read_frame(&mut sock), (0x81, b"Hello".to_vec()), "{model}");
        // 4 KiB of text, sent plain: echoed compressed, RSV1 set, much shorter.
        let text = "all work and no play ".repeat(200);
        sock.write_all(&masked(0x81, text.as_bytes())).unwrap();
        let (first, payload) = read_frame(&mut sock);
        assert_eq!(first, 0xC1, "{model}");
        assert!(
            payload.len() < text.len() / 10,
            "{model}: {}",
            payload.len()
        );
        // Sent compressed in two fragments (RSV1 on the first only): the same echo.
        let whole = compressed(Opcode::Text, text.as_bytes(), 6);
        let h = parse_header(&whole).unwrap().unwrap();
        let mut key_free = whole[h.header_len..].to_vec();
        berth::proto::ws::frame::unmask(&mut key_free, h.mask.unwrap(), 0);
        let (a, b) = key_free.split_at(key_free.len() / 2);
        sock.write_all(&masked(0x41, a)).unwrap();
        sock.write_all(&masked(0x80, b)).unwrap();
        assert_eq!(read_frame(&mut sock), (0xC1, payload), "{model}");
        // A ping with RSV1: 1002.
        sock.write_all(&masked(0xC9, b"x")).unwrap();
        let (first, close) = read_frame(&mut sock);
        assert_eq!(
            (first, &close[..2]),
            (0x88, &1002u16.to_be_bytes()[..]),
            "{model}"
        );
        srv.stop();
    }
}

#[test]
fn a_raw_bomb_never_inflates_past_the_limit() {
    let ws = WsConfig {
        max_message: 100_000,
        ..WsConfig::default()
    };
    for model in [Model::Single, Model::Prefork, Model::Evloop] {
        let srv = start(model, ws);
        let (mut sock, _) = open(&srv, "permessage-deflate");
        // 16 MiB of zeros in about 16 KiB.
        sock.write_all(&compressed(Opcode::Binary, &vec![0; 16 << 20], 9))
            .unwrap();
        let (first, close) = read_frame(&mut sock);
        assert_eq!(
            (first, &close[..2]),
            (0x88, &1009u16.to_be_bytes()[..]),
            "{model}"
        );
        srv.stop();
    }
}

#[test]
fn the_settings_turn_it_off_and_cap_the_window() {
    let off = WsConfig {
        deflate: DeflateConfig {
            enabled: false,
            ..DeflateConfig::default()
        },
        ..WsConfig::default()
    };
    let srv = start(Model::Evloop, off);
    let (mut sock, head) = open(&srv, "permessage-deflate");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(!head.contains("Sec-WebSocket-Extensions"), "{head}");
    // Without the extension, RSV1 is a protocol error (RFC 6455 §5.2).
    sock.write_all(&masked(0xC1, &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00]))
        .unwrap();
    let (first, close) = read_frame(&mut sock);
    assert_eq!((first, &close[..2]), (0x88, &1002u16.to_be_bytes()[..]));
    srv.stop();

    let capped = WsConfig {
        deflate: DeflateConfig {
            max_window_bits: 10,
            ..DeflateConfig::default()
        },
        ..WsConfig::default()
    };
    let srv = start(Model::Evloop, capped);
    // A client that cannot be held to a smaller window: no compression, the handshake goes on.
    let (_, head) = open(&srv, "permessage-deflate");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(!head.contains("Sec-WebSocket-Extensions"), "{head}");
    let (_, head) = open(
        &srv,
        "permessage-deflate; server_max_window_bits=12, permessage-deflate; client_max_window_bits",
    );
    assert!(
        head.contains(
            "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; \
             server_max_window_bits=10; client_max_window_bits=10\r\n"
        ),
        "{head}"
    );
    // A malformed offer is declined, not refused.
    let (_, head) = open(&srv, "permessage-deflate; client_max_window_bits=\"99\"");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(!head.contains("Sec-WebSocket-Extensions"), "{head}");
    srv.stop();
}
