//! HTTP/2 in every model (issue 32), over real sockets: curl (nghttp2) with prior knowledge on a
//! plain listener and with ALPN `h2` over TLS, several requests on one connection; HTTP/1.1
//! still served on the same ports; and the attacks the protocol crate counts, sent as raw frames
//! over a socket (Rapid Reset, the CONTINUATION flood), answered with GOAWAY
//! ENHANCE_YOUR_CALM and a close. h2spec's 146 cases run per model in `scripts/h2spec` (CI).

#[path = "support/server.rs"]
mod server;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;

use berth::drive::Model;
use berth_testkit::h2::frame;
use berth_testkit::per_model;
use server::{test_tls, Opts, IO_TIMEOUT};

berth::with_models!(per_model! {
    h2c_answers_several_requests_on_one_connection,
    tls_offers_h2_then_http11,
    rapid_reset_is_answered_with_enhance_your_calm,
    a_continuation_flood_is_answered_with_enhance_your_calm,
    http11_is_still_served_beside_h2c,
    a_drain_says_goaway_to_an_idle_connection,
    floods_are_answered_with_enhance_your_calm_and_counted,
    a_connection_that_spends_its_streams_is_wound_down,
});

/// curl's output for `args`, which must succeed.
fn curl(args: &[&str]) -> String {
    berth_testkit::tools::require("curl");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn h2c_answers_several_requests_on_one_connection(m: Model) {
    let server = Opts::new(m).start();
    // Three streams sent at once on one connection (curl 7.88's h2c cannot reuse a prior-
    // knowledge connection, so the frames are written here): a GET, a 404 and a POST with a
    // body in a DATA frame; each answer's body is read back from its stream's DATA frames.
    let mut s = open(server.addr);
    let mut out = Vec::new();
    get_on(&mut out, 1, "/hello/world");
    get_on(&mut out, 3, "/nowhere");
    frame(&mut out, HEADERS, END_HEADERS, 5, &post_reverse());
    frame(&mut out, DATA, END_STREAM, 5, br#"{"a": "stressed"}"#);
    s.write_all(&out).unwrap();
    let bodies = read_bodies(&mut s, 3);
    assert_eq!(bodies[&1], b"Hello, World!", "{m:?}");
    assert_eq!(bodies[&3], b"Not Found\n", "{m:?}");
    assert_eq!(bodies[&5], br#"{"data":["desserts"]}"#, "{m:?}");
    drop(s);
    // The connection's streams reach /stats once it ends.
    server.wait_stats("the h2c connection counted", |s| {
        s.http2.connections == 1 && s.http2.streams == 3
    });
}

/// Reads frames until `streams` streams have ended (DATA with END_STREAM): each one's body.
fn read_bodies(s: &mut TcpStream, streams: usize) -> HashMap<u32, Vec<u8>> {
    let mut bodies: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut ended = 0;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while ended < streams {
        let n = s.read(&mut chunk).expect("frames");
        assert!(n > 0, "closed after {ended} answers");
        buf.extend_from_slice(&chunk[..n]);
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            let id = u32::from_be_bytes(buf[5..9].try_into().unwrap()) & 0x7fff_ffff;
            if buf[3] == DATA {
                bodies
                    .entry(id)
                    .or_default()
                    .extend_from_slice(&buf[9..9 + len]);
                if buf[4] & END_STREAM != 0 {
                    ended += 1;
                }
            }
            assert_ne!(buf[3], GOAWAY, "GOAWAY before the answers");
            buf.drain(..9 + len);
        }
    }
    bodies
}

fn tls_offers_h2_then_http11(m: Model) {
    let server = Opts::new(m).tls(true).start();
    let base = format!("https://localhost:{}", server.addr.port());
    let ca = test_tls().certs.ca.to_str().unwrap().to_string();
    let resolve = format!("localhost:{}:127.0.0.1", server.addr.port());
    let tls = ["--cacert", &ca, "--resolve", &resolve];
    // Three transfers over ALPN h2: the second and third reuse the first's connection.
    let h2 = curl(
        &[
            &[
                "--http2",
                "-w",
                "|%{http_code} %{http_version} %{num_connects}\n",
            ][..],
            &tls,
            &[
                &format!("{base}/hello/world") as &str,
                &format!("{base}/nowhere"),
            ],
        ]
        .concat(),
    );
    assert_eq!(
        h2, "Hello, World!|200 2 1\nNot Found\n|404 2 0\n",
        "{m:?}: ALPN h2"
    );
    let h1 = curl(
        &[
            &["--http1.1", "-w", "|%{http_version}"][..],
            &tls,
            &[&format!("{base}/hello/world") as &str],
        ]
        .concat(),
    );
    assert_eq!(h1, "Hello, World!|1.1", "{m:?}: ALPN http/1.1");
}

fn http11_is_still_served_beside_h2c(m: Model) {
    let server = Opts::new(m).start();
    let out = curl(&[
        "--http1.1",
        "-w",
        "|%{http_version}",
        &format!("http://{}/hello/world", server.addr),
    ]);
    assert_eq!(out, "Hello, World!|1.1", "{m:?}");
}

// Raw frames (RFC 9113 §4.1): length, type, flags, stream id, payload.
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const PRIORITY: u8 = 2;
const PING: u8 = 6;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// `POST /reverse` with `:authority: x`, in HPACK without indexing (so each block stands
/// alone): `:method POST` (static 3), `:scheme http` (static 6), `:path` (name 4) and
/// `:authority` (name 1) as literals.
fn post_reverse() -> Vec<u8> {
    let mut b = vec![0x83, 0x86, 0x04, 8];
    b.extend_from_slice(b"/reverse");
    b.extend_from_slice(&[0x01, 1, b'x']);
    b
}

/// `GET path` with `:authority: x` (HPACK as in [`post_reverse`]).
fn get(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x04, path.len() as u8];
    b.extend_from_slice(path.as_bytes());
    b.extend_from_slice(&[0x01, 1, b'x']);
    b
}

/// A HEADERS frame with END_STREAM asking `GET path` on stream `id`.
fn get_on(out: &mut Vec<u8>, id: u32, path: &str) {
    frame(out, HEADERS, END_HEADERS | END_STREAM, id, &get(path));
}

/// Connects with the preface and an empty SETTINGS.
fn open(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, SETTINGS, 0, 0, &[]);
    s.write_all(&out).unwrap();
    s
}

/// Reads frames until GOAWAY: its error code, and whether the connection then closed.
fn goaway_code(s: &mut TcpStream) -> (u32, bool) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            if buf[3] == GOAWAY {
                let code = u32::from_be_bytes(buf[13..17].try_into().unwrap());
                // The connection ends after it: read to EOF (or a reset, if frames we sent
                // were still unread).
                let closed = loop {
                    match s.read(&mut chunk) {
                        Ok(0) => break true,
                        Ok(_) => {}
                        Err(e) => break berth_testkit::bytes::is_reset(&e),
                    }
                };
                return (code, closed);
            }
            buf.drain(..9 + len);
        }
        let n = s.read(&mut chunk).expect("frames until GOAWAY");
        assert!(n > 0, "closed without GOAWAY");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn rapid_reset_is_answered_with_enhance_your_calm(m: Model) {
    let server = Opts::new(m).start();
    let mut s = open(server.addr);
    // Streams opened (their bodies still to come, so the answer is pending) and cancelled at
    // once, past the default of 200 per 10 s.
    let mut out = Vec::new();
    let block = post_reverse();
    for i in 0..300u32 {
        let id = 2 * i + 1;
        frame(&mut out, HEADERS, END_HEADERS, id, &block);
        frame(&mut out, RST_STREAM, 0, id, &8u32.to_be_bytes());
    }
    // Whatever the server does with the flood, the write may be cut short by its close.
    let _ = s.write_all(&out);
    let (code, closed) = goaway_code(&mut s);
    assert_eq!(code, ENHANCE_YOUR_CALM, "{m:?}");
    assert!(closed, "{m:?}: closed after GOAWAY");
    // Counted in /stats, by kind.
    let snap = server.wait_stats("rapid reset counted", |s| abuse(s, "rapid_reset") == 1);
    assert!(snap.http2.client_resets > 200, "{m:?}: {:?}", snap.http2);
    // The server goes on serving others.
    let mut ok = open(server.addr);
    let mut req = Vec::new();
    get_on(&mut req, 1, "/hello/world");
    ok.write_all(&req).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    // The answer's DATA frame carries the body.
    while !got.windows(13).any(|w| w == b"Hello, World!") {
        let n = ok.read(&mut chunk).unwrap();
        assert!(n > 0, "{m:?}: closed before answering");
        got.extend_from_slice(&chunk[..n]);
    }
}

fn a_continuation_flood_is_answered_with_enhance_your_calm(m: Model) {
    let server = Opts::new(m).start();
    let mut s = open(server.addr);
    let block = post_reverse();
    let mut out = Vec::new();
    frame(&mut out, HEADERS, 0, 1, &block[..2]);
    // Endless CONTINUATION frames, none ending the block (the 2024 flood): cut off past 32.
    for _ in 0..100 {
        frame(&mut out, CONTINUATION, 0, 1, &[0x01, 1, b'x']);
    }
    let _ = s.write_all(&out);
    let (code, closed) = goaway_code(&mut s);
    assert_eq!(code, ENHANCE_YOUR_CALM, "{m:?}");
    assert!(closed, "{m:?}: closed after GOAWAY");
    server.wait_stats("continuation flood counted", |s| {
        abuse(s, "continuation_flood") == 1
    });
}

/// Connections ended for `kind` of abuse, as `/stats` counts them.
fn abuse(s: &berth::stats::Snapshot, kind: &str) -> u64 {
    s.http2
        .abuse
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(0, |&(_, n)| n)
}

fn a_drain_says_goaway_to_an_idle_connection(m: Model) {
    let server = Opts::new(m).start();
    let mut s = open(server.addr);
    let mut req = Vec::new();
    get_on(&mut req, 1, "/hello/world");
    s.write_all(&req).unwrap();
    read_bodies(&mut s, 1);
    // Idle now: the drain tells it GOAWAY NO_ERROR (RFC 9113 §6.8), then closes it.
    server.drain(std::time::Duration::from_secs(5));
    let (code, closed) = goaway_code(&mut s);
    assert_eq!(code, 0, "{m:?}: GOAWAY NO_ERROR");
    assert!(closed, "{m:?}: closed after GOAWAY");
}

/// `single` serves one connection at a time and lets an idle one go when another client
/// waits: an idle HTTP/2 connection too, told GOAWAY NO_ERROR first. (It once waited on the
/// connection and its streams' waker only, not the listener: the next client waited out the
/// idle timeout.)
#[test]
fn single_lets_an_idle_h2_connection_go_with_goaway_when_another_client_waits() {
    let idle = IO_TIMEOUT * 6;
    let server = Opts::new(Model::Single)
        .timeouts(berth::drive::Timeouts {
            idle,
            ..Default::default()
        })
        .start();
    let mut a = open(server.addr);
    let mut req = Vec::new();
    get_on(&mut req, 1, "/hello/world");
    a.write_all(&req).unwrap();
    assert_eq!(read_bodies(&mut a, 1)[&1], b"Hello, World!");
    // A idles; B comes, over HTTP/1.1, and is answered within B's read timeout (a tenth of
    // A's idle timeout).
    let mut b = TcpStream::connect(server.addr).unwrap();
    b.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    b.write_all(b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    b.read_to_string(&mut answer)
        .expect("B answered while A idles");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (code, closed) = goaway_code(&mut a);
    assert_eq!(
        (code, closed),
        (0, true),
        "A told GOAWAY NO_ERROR, then closed"
    );
}

/// `single` sets aside a connection whose client has said nothing past its TLS handshake (a
/// browser's preconnect; h2spec opens one, then a second to measure an answer, before it
/// speaks on the first) and serves the client who came after it: B is answered while A stays
/// silent, then A, which was neither closed nor told GOAWAY, is answered once it speaks (B,
/// idle by then, is let go). Over HTTP/2 and HTTP/1.1. Before, B waited out A's header timeout
/// (and h2spec's cases 6.5.3/1, 6.9.1/1, 6.9.2/1 and 6.9.2/2 failed in `single` over TLS).
#[test]
fn single_sets_aside_a_tls_client_that_has_not_spoken_for_the_next_one() {
    use berth_testkit::h2::{tls, H2Client, Req};
    let header = IO_TIMEOUT * 6;
    let server = Opts::new(Model::Single)
        .tls(true)
        .timeouts(berth::drive::Timeouts {
            header,
            ..Default::default()
        })
        .start();
    let ca = test_tls().certs.ca.clone();
    // A's handshake done, then silence; B answered within its read timeout, a sixth of the
    // header timeout A could hold the thread for.
    let b_is_answered = || {
        let mut b = berth_testkit::h2::connect(server.addr, Some(&ca), &[]);
        let answer = b
            .request(&Req::get("/hello/world"))
            .response("B, while A is silent");
        assert_eq!(answer.body, b"Hello, World!");
    };
    // HTTP/2: A speaks its preface only after B's answer.
    let a = tls(server.addr, &ca);
    b_is_answered();
    let mut a =
        H2Client::start(berth_testkit::h2::Conn::Tls(Box::new(a)), &[]).expect("A's preface");
    let answer = a
        .request(&Req::get("/hello/world"))
        .response("A, once it speaks");
    assert_eq!(answer.body, b"Hello, World!");
    assert!(a.goaway().is_none(), "A was kept, not let go");
    drop(a);
    // HTTP/1.1: the same with a request.
    let mut a = berth::net::tls::TlsConnector::new(Some(&ca), &[b"http/1.1"])
        .unwrap()
        .connect("127.0.0.1", TcpStream::connect(server.addr).unwrap())
        .unwrap();
    a.complete_handshake().unwrap();
    a.get_ref().set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    b_is_answered();
    a.write_all(b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = a.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("Hello, World!"),
        "{answer}"
    );
}

/// A client set aside by `single` gets the header timeout, counted from when it was first set
/// aside, to speak, however often it is taken up and set aside again while other clients come
/// and go (else a silent client kept busy by a stream of others would live forever).
#[test]
fn single_closes_a_client_set_aside_that_stays_silent_past_the_header_timeout() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let server = Opts::new(Model::Single)
        .tls(true)
        .timeouts(berth::drive::Timeouts {
            header: std::time::Duration::from_secs(1),
            ..Default::default()
        })
        .start();
    let ca = test_tls().certs.ca.clone();
    let mut a = berth::net::tls::TlsConnector::new(Some(&ca), &[b"http/1.1"])
        .unwrap()
        .connect("127.0.0.1", TcpStream::connect(server.addr).unwrap())
        .unwrap();
    a.complete_handshake().unwrap();
    // Five times the header timeout: before, A was closed only once the others stopped.
    a.get_ref()
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                let mut b = berth::net::tls::TlsConnector::new(Some(&ca), &[b"http/1.1"])
                    .unwrap()
                    .connect("127.0.0.1", TcpStream::connect(server.addr).unwrap())
                    .unwrap();
                b.get_ref().set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                b.write_all(b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut answer = Vec::new();
                let _ = b.read_to_end(&mut answer);
                assert!(answer.starts_with(b"HTTP/1.1 200"), "B answered");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
        let mut sink = [0u8; 64];
        let ended = a.read(&mut sink);
        done.store(true, Ordering::SeqCst);
        assert!(
            matches!(ended, Ok(0))
                || ended
                    .as_ref()
                    .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock),
            "A closed, not still open: {ended:?}"
        );
    });
}

/// An attack's kind (as `/stats` names it) and the bytes that make it.
type Flood = (&'static str, fn() -> Vec<u8>);

/// The other attacks of issue 32, each on a connection of its own, over a real socket: each is
/// answered GOAWAY ENHANCE_YOUR_CALM and a close, and counted in `/stats` under its kind. (Limits
/// are H2Config's defaults; `testdata/h2/attacks.toml` has the same cases in memory, split at
/// every byte.)
fn floods_are_answered_with_enhance_your_calm_and_counted(m: Model) {
    let server = Opts::new(m).start();
    let floods: [Flood; 7] = [
        ("settings_flood", || {
            let mut out = Vec::new();
            for _ in 0..101 {
                frame(&mut out, SETTINGS, 0, 0, &[]);
            }
            out
        }),
        ("ping_flood", || {
            let mut out = Vec::new();
            for _ in 0..101 {
                frame(&mut out, PING, 0, 0, &[0; 8]);
            }
            out
        }),
        ("empty_frame_flood", || {
            let mut out = Vec::new();
            frame(&mut out, HEADERS, END_HEADERS, 1, &post_reverse());
            for _ in 0..11 {
                frame(&mut out, DATA, 0, 1, &[]);
            }
            out
        }),
        ("window_update_flood", || {
            let mut out = Vec::new();
            for _ in 0..101 {
                frame(&mut out, WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes());
            }
            out
        }),
        ("priority_flood", || {
            let mut out = Vec::new();
            for _ in 0..101 {
                frame(&mut out, PRIORITY, 0, 3, &[0, 0, 0, 1, 16]);
            }
            out
        }),
        ("hpack_bomb", || {
            // One 4,000-byte field put in the table (literal with incremental indexing, a
            // new name), then referenced 20 times: 80 KB decoded from about 4 KB, four times
            // past the 16 KiB header list limit.
            let mut block = vec![0x82, 0x86, 0x84, 0x01, 1, b'x', 0x40, 1, b'a'];
            block.push(0x7f);
            // 4000 as an HPACK integer with a 7-bit prefix: 127, then 3873 in 7-bit groups.
            let mut rest = 4000 - 127;
            while rest >= 128 {
                block.push((rest % 128) as u8 | 0x80);
                rest /= 128;
            }
            block.push(rest as u8);
            block.extend(std::iter::repeat_n(b'v', 4000));
            // The entry is index 62 (the first of the dynamic table): indexed field 0xbe.
            block.extend(std::iter::repeat_n(0xbe, 20));
            let mut out = Vec::new();
            frame(&mut out, HEADERS, END_HEADERS | END_STREAM, 1, &block);
            out
        }),
        ("made_you_reset", || {
            // Streams answered at once, then DATA on each (closed by then): every one is a
            // reset the client provoked, past the 1,024 allowed.
            let mut out = Vec::new();
            for i in 0..1100u32 {
                let id = 2 * i + 1;
                get_on(&mut out, id, "/test/fast");
                frame(&mut out, DATA, 0, id, b"x");
            }
            out
        }),
    ];
    for (kind, make) in floods {
        let mut s = open(server.addr);
        let _ = s.write_all(&make());
        let (code, closed) = goaway_code(&mut s);
        assert_eq!(code, ENHANCE_YOUR_CALM, "{m:?}: {kind}");
        assert!(closed, "{m:?}: {kind}: closed after GOAWAY");
        server.wait_stats(kind, |s| abuse(s, kind) == 1);
    }
}

/// Stream ids are not spent without end on one connection: after
/// `H2Config::max_streams_per_connection` streams (here 4) berth says GOAWAY NO_ERROR naming
/// the last one it serves, answers those, and closes once they are done; the client's later
/// streams are not served (it retries them on a new connection, RFC 9113 §6.8).
fn a_connection_that_spends_its_streams_is_wound_down(m: Model) {
    let server = Opts::new(m)
        .with_limits(|l| {
            l.http2 = Some(berth::proto::h2::H2Config {
                max_streams_per_connection: 4,
                ..berth::proto::h2::H2Config::default()
            })
        })
        .start();
    let mut s = open(server.addr);
    let mut out = Vec::new();
    for i in 0..6u32 {
        get_on(&mut out, 2 * i + 1, "/hello/world");
    }
    s.write_all(&out).unwrap();
    // Everything until the server closes: the answers, and the GOAWAY among them.
    let mut all = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => all.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("{m:?}: {e}"),
        }
    }
    let (mut bodies, mut goaway) = (HashMap::<u32, Vec<u8>>::new(), None);
    let mut at = 0;
    while at + 9 <= all.len() {
        let len = u32::from_be_bytes([0, all[at], all[at + 1], all[at + 2]]) as usize;
        let id = u32::from_be_bytes(all[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        let payload = &all[at + 9..at + 9 + len];
        match all[at + 3] {
            DATA => bodies.entry(id).or_default().extend_from_slice(payload),
            GOAWAY => {
                let last = u32::from_be_bytes(payload[..4].try_into().unwrap());
                let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                goaway = Some((last, code));
            }
            _ => {}
        }
        at += 9 + len;
    }
    assert_eq!(
        goaway,
        Some((7, 0)),
        "{m:?}: GOAWAY NO_ERROR naming stream 7"
    );
    assert_eq!(bodies.len(), 4, "{m:?}: {bodies:?}");
    for id in [1, 3, 5, 7] {
        assert_eq!(bodies[&id], b"Hello, World!", "{m:?}: stream {id}");
    }
}
