//! HTTP/3's two roles joined in memory (DESIGN §11, "Both roles"): `h3::client::Client`'s
//! actions are the server's input and the server's actions the client's, as QUIC would carry
//! them, with no QUIC in between. The server is `h3_support`'s memory driver.

#[path = "h2_support/mod.rs"]
mod h2_support;
mod h3_support;

use berth_proto::h3::client::{Answers, Client};
use berth_proto::h3::error::ErrorCode;
use berth_proto::h3::qpack::DecoderConfig;
use berth_proto::h3::{H3Config, Quic};
use h3_support::Server;

struct Pair {
    client: Client,
    server: Server,
    /// Server actions already carried to the client.
    carried: usize,
    answers: Answers,
}

impl Pair {
    fn new() -> Self {
        Pair::with_client(Client::new(DecoderConfig::default()))
    }

    fn with_client(client: Client) -> Self {
        let mut server = Server::new(H3Config::default());
        server.start();
        Pair {
            client,
            server,
            carried: 0,
            answers: Answers::default(),
        }
    }

    /// Carries actions both ways until neither side has more to say.
    fn run(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            while let Some(action) = self.client.poll_quic() {
                moved = true;
                match action {
                    Quic::Send { stream, bytes, fin } => self.server.conn.recv(stream, &bytes, fin),
                    Quic::Reset { stream, code } => self.server.conn.reset(stream, code.0),
                    Quic::Stop { stream, code } => self.server.conn.stopped(stream, code.0),
                    Quic::Open { .. } => {}
                    Quic::Close { code, .. } => self.answers.closed = Some(code),
                }
            }
            if moved {
                self.server.pump();
            }
            let new: Vec<Quic> = self.server.actions[self.carried..].to_vec();
            self.carried = self.server.actions.len();
            for action in &new {
                match action {
                    Quic::Send { stream, bytes, fin } => self.client.recv(*stream, bytes, *fin),
                    Quic::Reset { stream, code } => self.client.reset(*stream, code.0),
                    Quic::Close { code, .. } => self.answers.closed = Some(*code),
                    Quic::Stop { .. } | Quic::Open { .. } => {}
                }
            }
            self.client.process();
            self.answers.gather(&mut self.client);
            if !moved && new.is_empty() {
                return;
            }
        }
        panic!("the pair never settled");
    }

    fn get(&mut self, path: &str, fields: &[(&str, &[u8])]) -> u64 {
        self.client.request("GET", path, fields, b"", true)
    }
}

#[test]
fn every_route_over_the_pair() {
    let mut p = Pair::new();
    let text: Vec<u8> = b"over HTTP/3 in memory. "
        .iter()
        .copied()
        .cycle()
        .take(50_000)
        .collect();
    p.server.files = vec![("t.txt".into(), text.clone())];
    let hello = p.get("/", &[]);
    let echo = p.client.request("POST", "/echo", &[], b"first ", false);
    p.client.send_data(echo, b"second", true);
    let file = p.get("/files/t.txt", &[("range", b"bytes=5-14")]);
    let gz = p.get("/files/t.txt", &[("accept-encoding", b"zstd")]);
    let streamed = p.get("/stream", &[]);
    let trailers = p.get("/trailers", &[]);
    let missing = p.get("/missing", &[]);
    p.run();
    assert!(p.client.peer_settings().is_some());
    let a = &p.answers.by_stream[&hello];
    assert_eq!(
        (a.status, &a.body[..], a.ended),
        (200, &b"Hello, World!"[..], true)
    );
    assert_eq!(a.field("server"), Some("berth"));
    assert_eq!(p.answers.by_stream[&echo].body, b"first second");
    let f = &p.answers.by_stream[&file];
    assert_eq!((f.status, &f.body[..]), (206, &text[5..15]));
    let z = &p.answers.by_stream[&gz];
    assert_eq!(z.field("content-encoding"), Some("zstd"));
    assert_eq!(zstd::decode_all(&z.body[..]).unwrap(), text);
    let s = &p.answers.by_stream[&streamed];
    assert_eq!((s.body.len(), s.ended), (100_005, true));
    let t = &p.answers.by_stream[&trailers];
    assert_eq!(t.trailers, vec![("grpc-status".into(), "0".into())]);
    assert!(t.ended);
    assert_eq!(p.answers.by_stream[&missing].status, 404);
    assert_eq!(p.client.open_streams(), 0);
    assert_eq!(p.server.conn.open_streams(), 0);
    assert_eq!(p.answers.closed, None);
}

#[test]
fn the_drain_over_the_pair() {
    let mut p = Pair::new();
    p.server.hold = true;
    let slow = p.get("/test/slow", &[]);
    p.run();
    p.server.conn.close_after_response();
    p.server.pump();
    p.run();
    assert_eq!(p.answers.goaway, Some(slow + 4));
    let late = p.get("/", &[]);
    p.run();
    assert_eq!(
        p.answers.by_stream[&late].reset,
        Some(ErrorCode::H3_REQUEST_REJECTED)
    );
    p.server.run_job(slow);
    p.run();
    assert_eq!(
        (
            p.answers.by_stream[&slow].status,
            p.answers.by_stream[&slow].ended
        ),
        (200, true)
    );
    assert_eq!(p.answers.closed, Some(ErrorCode::H3_NO_ERROR));
}

#[test]
fn a_request_refused_over_the_pair_is_a_reset_the_client_hears() {
    let mut p = Pair::new();
    let bad = p.get("/", &[("Upper", b"x")]);
    let good = p.get("/", &[]);
    p.run();
    assert_eq!(
        p.answers.by_stream[&bad].reset,
        Some(ErrorCode::H3_MESSAGE_ERROR)
    );
    assert_eq!(p.answers.by_stream[&good].status, 200);
}

#[test]
fn requests_with_a_dynamic_table_are_decoded_and_acknowledged() {
    let mut p = Pair::with_client(Client::new(DecoderConfig::default()).with_table(4096));
    // The first request goes before the server's SETTINGS: static table only.
    let first = p.get("/", &[("x-session", b"0123456789abcdef")]);
    p.run();
    assert_eq!(p.answers.by_stream[&first].status, 200);
    assert_eq!(p.client.qpack_inserts(), (0, 0));
    let ids: Vec<u64> = (0..5)
        .map(|_| p.get("/", &[("x-session", b"0123456789abcdef")]))
        .collect();
    p.run();
    for id in ids {
        assert_eq!(p.answers.by_stream[&id].status, 200, "stream {id}");
    }
    let (inserts, acked) = p.client.qpack_inserts();
    assert!(inserts > 0);
    assert_eq!(acked, inserts, "the server acknowledged every insert");
    assert_eq!(p.answers.closed, None);
}
