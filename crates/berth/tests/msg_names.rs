//! Names are bytes (issue 15): FI-ASockIOCore takes any keyword bytes, and so does berth by
//! default, up to `--max-name` (4 KiB), except the `#` form of anonymous ids; `--strict-names`
//! keeps the rule of before. Binary names are reached through the API, shown escaped in logs
//! and in the relay demo, reached by relay in their escaped form, and follow `--name-taken`.
//! Real sockets on 127.0.0.1, port 0.

use std::io::Write;
use std::net::UdpSocket;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use berth::msg::{
    ClientId, ConnectError, Endpoint, Engine, EngineConfig, MsgHandler, Name, NameRule, Out,
};
use berth_proto::msg::NameTaken;
use berth_testkit::msg::*;

/// The keywords of the issue: FI-ASockIOCore answers each `OK`; berth refused them before.
const FI_NAMES: [&[u8]; 3] = [&[b'n'; 300], b"\xff\xfe", b"a\nb"];

fn strict() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.policy.names = NameRule::STRICT;
    config
}

fn refusal_text(f: &Frame) -> &str {
    match f {
        Frame::Control(t) => t,
        Frame::Data(d) => panic!("expected a refusal, got data {d:?}"),
    }
}

#[test]
fn fi_names_are_taken_by_default_and_refused_with_strict_names() {
    let default = echo(EngineConfig::default(), &[tcp_endpoint()]);
    let strict = echo(strict(), &[tcp_endpoint()]);
    for name in FI_NAMES {
        let (mut c, answer) = hello_bytes(tcp(addr_of(&default.endpoints[0])), name);
        assert_eq!(answer, ok(), "{:?}", Name::from(name));
        // Admitted for real: messages flow.
        c.write_all(&frame(b"ping")).unwrap();
        assert_eq!(read_frame(&mut c).unwrap(), Frame::Data(b"ping".to_vec()));

        let (mut s, answer) = hello_bytes(tcp(addr_of(&strict.endpoints[0])), name);
        assert_eq!(code(&answer), "name-invalid", "{:?}", Name::from(name));
        assert!(closes(&mut s));
    }
    // The strict rule says why, per fault.
    let (_, answer) = hello_bytes(tcp(addr_of(&strict.endpoints[0])), &[b'n'; 300]);
    assert!(
        refusal_text(&answer).contains("at most 255 bytes; this one has 300"),
        "{answer:?}"
    );
    let (_, answer) = hello_bytes(tcp(addr_of(&strict.endpoints[0])), b"\xff\xfe");
    assert!(refusal_text(&answer).contains("strict names"), "{answer:?}");
    // Plain names are the same under both.
    assert_eq!(hello(tcp(addr_of(&strict.endpoints[0])), "svc").1, ok());
}

#[test]
fn a_name_over_max_name_is_refused_without_being_read() {
    let default = echo(EngineConfig::default(), &[tcp_endpoint()]);
    let addr = addr_of(&default.endpoints[0]);
    assert_eq!(hello_bytes(tcp(addr), &[b'n'; 4096]).1, ok());
    let (mut s, answer) = hello_bytes(tcp(addr), &[b'n'; 4097]);
    assert_eq!(
        refusal_text(&answer),
        "refused name-invalid a name is at most 4096 bytes; this one has 4097"
    );
    assert!(closes(&mut s));

    let mut config = EngineConfig::default();
    config.policy.names.max = 16;
    let small = echo(config, &[tcp_endpoint()]);
    let addr = addr_of(&small.endpoints[0]);
    assert_eq!(hello_bytes(tcp(addr), &[0xff; 16]).1, ok());
    let (_, answer) = hello_bytes(tcp(addr), &[0xff; 17]);
    assert_eq!(
        refusal_text(&answer),
        "refused name-invalid a name is at most 16 bytes; this one has 17"
    );
    // The limit is checked on the length field: 1 TiB announced, nothing of it sent.
    let mut s = tcp(addr);
    s.write_all(&(1u64 << 40).to_le_bytes()).unwrap();
    let answer = read_frame(&mut s).unwrap();
    assert_eq!(code(&answer), "name-invalid");
    assert!(refusal_text(&answer).contains("this one has 1099511627776"));
}

#[test]
fn the_anonymous_id_form_stays_refused() {
    for config in [EngineConfig::default(), strict()] {
        let server = echo(config, &[tcp_endpoint()]);
        let addr = addr_of(&server.endpoints[0]);
        for name in [&b"#1.1"[..], b"#", b"#\xff"] {
            let (mut s, answer) = hello_bytes(tcp(addr), name);
            assert_eq!(code(&answer), "name-invalid", "{:?}", Name::from(name));
            assert!(
                refusal_text(&answer).contains("reserved for the ids of anonymous clients"),
                "{answer:?}"
            );
            assert!(closes(&mut s));
        }
    }
}

#[test]
fn udp_hellos_follow_the_same_rule() {
    let udp = Endpoint::parse("udp://127.0.0.1:0").unwrap();
    let default = echo(EngineConfig::default(), std::slice::from_ref(&udp));
    let strict = echo(strict(), &[udp]);
    let ask = |server: &Served, datagram: &[u8]| {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(WAIT)).unwrap();
        sock.send_to(datagram, addr_of(&server.endpoints[0]))
            .unwrap();
        let mut buf = [0u8; 2048];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(ask(&default, b"H\xff\xfe"), "O");
    assert_eq!(ask(&default, b"Ha\nb"), "O");
    assert!(ask(&default, b"H#1.1").starts_with("Nrefused name-invalid"));
    assert!(ask(&strict, b"H\xff\xfe").starts_with("Nrefused name-invalid"));
    assert_eq!(ask(&strict, b"Hplain"), "O");
}

/// A handler using the API with names of any bytes: `find NAME` (raw bytes) sends `found you`
/// to NAME's client and answers the asker with the name as `Out::name` shows it; every lost
/// client's name is recorded as shown.
struct Finder {
    lost: Arc<Mutex<Vec<String>>>,
}

impl MsgHandler for Finder {
    fn on_data(&mut self, client: ClientId, msg: &[u8], out: &mut Out<'_>) {
        let Some(name) = msg.strip_prefix(b"find ") else {
            out.send(client, msg);
            return;
        };
        match out.client(name) {
            Some(to) => {
                out.send(to, b"found you");
                let shown = out.name(to).expect("a named client").to_string();
                out.send(client, shown.as_bytes());
            }
            None => {
                out.send(client, b"none");
            }
        }
    }

    fn on_connection_lost(&mut self, _: ClientId, name: Option<&Name>, _: &mut Out<'_>) {
        let shown = name.map_or("anonymous".to_owned(), |n| n.to_string());
        self.lost.lock().unwrap().push(shown);
    }
}

#[test]
fn a_binary_named_client_is_reached_through_the_api() {
    let lost = Arc::new(Mutex::new(Vec::new()));
    let server = serve(
        EngineConfig::default(),
        &[tcp_endpoint()],
        Finder { lost: lost.clone() },
    );
    let addr = addr_of(&server.endpoints[0]);
    let binary = b"\xff\xfe a\n";
    let (mut target, answer) = hello_bytes(tcp(addr), binary);
    assert_eq!(answer, ok());
    let (mut asker, _) = hello(tcp(addr), "asker");
    let mut ask = b"find ".to_vec();
    ask.extend_from_slice(binary);
    asker.write_all(&frame(&ask)).unwrap();
    assert_eq!(
        read_frame(&mut target).unwrap(),
        Frame::Data(b"found you".to_vec())
    );
    // Escaped: no space, no control character, every byte there.
    assert_eq!(
        read_frame(&mut asker).unwrap(),
        Frame::Data(b"\\xff\\xfe\\x20a\\x0a".to_vec())
    );
    asker.write_all(&frame(b"find \xff\xfe")).unwrap();
    assert_eq!(
        read_frame(&mut asker).unwrap(),
        Frame::Data(b"none".to_vec())
    );
    drop(target);
    let deadline = Instant::now() + WAIT;
    while !lost
        .lock()
        .unwrap()
        .iter()
        .any(|n| n == "\\xff\\xfe\\x20a\\x0a")
    {
        assert!(
            Instant::now() < deadline,
            "lost: {:?}",
            lost.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_relay_shows_binary_senders_escaped_and_reaches_every_name() {
    let server = echo(EngineConfig::default(), &[tcp_endpoint()]);
    let addr = addr_of(&server.endpoints[0]);
    let (mut bob, _) = hello(tcp(addr), "bob");
    let (mut bin, answer) = hello_bytes(tcp(addr), b"\xff\xfe");
    assert_eq!(answer, ok());
    let (mut utf8, _) = hello(tcp(addr), "ñame");
    let data = |s: &mut std::net::TcpStream| match read_frame(s).unwrap() {
        Frame::Data(d) => d,
        other => panic!("{other:?}"),
    };

    // A binary sender is shown escaped, and the receiver replies to what it was shown.
    bin.write_all(&frame(b"@bob hi")).unwrap();
    assert_eq!(data(&mut bob), b"@\\xff\\xfe hi");
    bob.write_all(&frame(b"@\\xff\\xfe yo")).unwrap();
    assert_eq!(data(&mut bin), b"@bob yo");
    // A UTF-8 name is relayed to as it always was, both ways.
    bob.write_all(&frame("@ñame hola".as_bytes())).unwrap();
    assert_eq!(data(&mut utf8), b"@bob hola");
    utf8.write_all(&frame(b"@bob back")).unwrap();
    assert_eq!(data(&mut bob), "@ñame back".as_bytes());
    // Nobody there: said in the escaped form.
    bob.write_all(&frame(b"@\\x00nobody x")).unwrap();
    assert_eq!(data(&mut bob), b"@! no client named \\x00nobody");
    // A target that is not escaped text (raw bytes that are not UTF-8) is no relay: echoed.
    bob.write_all(&frame(b"@\xff\xfe raw")).unwrap();
    assert_eq!(data(&mut bob), b"@\xff\xfe raw");

    // The longest names: 4 KiB of 0xff, whose escaped form is 16 KiB, both ways.
    let (mut long, answer) = hello_bytes(tcp(addr), &[0xff; 4096]);
    assert_eq!(answer, ok());
    let escaped = "\\xff".repeat(4096);
    bob.write_all(&frame(format!("@{escaped} far").as_bytes()))
        .unwrap();
    assert_eq!(data(&mut long), b"@bob far");
    long.write_all(&frame(b"@bob near")).unwrap();
    assert_eq!(data(&mut bob), format!("@{escaped} near").as_bytes());
    // One byte more than the longest target: not looked for, echoed.
    let over = format!("@{escaped}x over");
    bob.write_all(&frame(over.as_bytes())).unwrap();
    assert_eq!(data(&mut bob), over.as_bytes());
}

#[test]
fn duplicate_binary_names_follow_name_taken() {
    let refuse = echo(EngineConfig::default(), &[tcp_endpoint()]);
    let addr = addr_of(&refuse.endpoints[0]);
    let (_first, answer) = hello_bytes(tcp(addr), b"\xff\xfe");
    assert_eq!(answer, ok());
    let (mut second, answer) = hello_bytes(tcp(addr), b"\xff\xfe");
    assert_eq!(
        refusal_text(&answer),
        "refused name-taken name \"\\xff\\xfe\" is held by a live connection"
    );
    assert!(closes(&mut second));
    // Another name of the same text but other bytes is another name.
    assert_eq!(hello_bytes(tcp(addr), b"\xff\xfe\x00").1, ok());

    let mut config = EngineConfig::default();
    config.policy.name_taken = NameTaken::Replace;
    let replace = echo(config, &[tcp_endpoint()]);
    let addr = addr_of(&replace.endpoints[0]);
    let (mut old, _) = hello_bytes(tcp(addr), b"a\nb");
    let (mut new, answer) = hello_bytes(tcp(addr), b"a\nb");
    assert_eq!(answer, ok());
    match read_frame(&mut old).unwrap() {
        Frame::Control(t) => assert!(t.starts_with("error name-replaced"), "{t}"),
        other => panic!("{other:?}"),
    }
    let (mut bob, _) = hello(tcp(addr), "bob");
    bob.write_all(&frame(b"@a\\x0ab to the new one")).unwrap();
    assert_eq!(
        read_frame(&mut new).unwrap(),
        Frame::Data(b"@bob to the new one".to_vec())
    );
}

/// A refusal quotes a name cut short: a 4 KiB name escapes to 16 KiB, and berth's own client
/// reads a control frame of at most 4 KiB. It must hear `name-taken`, not a protocol error.
#[test]
fn a_refusal_of_a_long_name_stays_short() {
    let server = echo(EngineConfig::default(), &[tcp_endpoint()]);
    let name = vec![0xffu8; 4096];
    let mut first = Engine::new(EngineConfig::default()).unwrap();
    first
        .connect(&server.endpoints[0], &name, WAIT)
        .expect("the first holder");
    let mut second = Engine::new(EngineConfig::default()).unwrap();
    match second.connect(&server.endpoints[0], &name, WAIT) {
        Err(ConnectError::Refused { code, text }) => {
            assert_eq!(code, "name-taken");
            assert!(text.len() < 200 && text.contains("\\xff..."), "{text}");
        }
        other => panic!("{other:?}"),
    }
}

// ----- logs --------------------------------------------------------------------------------

/// Every log line of this test binary (all tests run in it; each looks for its own names).
fn captured() -> &'static Mutex<Vec<String>> {
    static LINES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    LINES.get_or_init(Mutex::default)
}

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        captured().lock().unwrap().push(record.args().to_string());
    }
    fn flush(&self) {}
}

#[test]
fn logs_show_names_escaped() {
    static LOGGER: Capture = Capture;
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Debug);
    let server = echo(EngineConfig::default(), &[tcp_endpoint()]);
    let addr = addr_of(&server.endpoints[0]);
    // A name that would break a log line: a newline, a terminal escape, a bidi override.
    let name = "log\n\u{1b}[31m\u{202e}me".as_bytes();
    let (c, answer) = hello_bytes(tcp(addr), name);
    assert_eq!(answer, ok());
    drop(c);
    let shown = "log\\x0a\\x1b[31m\\xe2\\x80\\xaeme";
    let deadline = Instant::now() + WAIT;
    loop {
        let lines = captured().lock().unwrap().clone();
        let admitted = lines
            .iter()
            .any(|l| l.contains(&format!("admitted: {shown} (Unknown, Tcp)")));
        let gone = lines.iter().any(|l| l.ends_with(&format!("gone: {shown}")));
        if admitted && gone {
            // No line carries the raw bytes.
            assert!(!lines
                .iter()
                .any(|l| l.contains('\u{1b}') || l.contains('\u{202e}')));
            break;
        }
        assert!(Instant::now() < deadline, "{lines:#?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
