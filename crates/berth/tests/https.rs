//! HTTPS in every model (issue 16), over real sockets with a rustls client that verifies the
//! server against the test's CA: keep-alive, pipelining, a request body, a file body read and
//! encrypted in chunks (no `sendfile` under TLS); a handshake that never comes, or stalls
//! halfway, is dropped at the header timeout; slowloris over TLS is cut off while others are
//! served; plain HTTP sent to the TLS port is closed, not answered or hung on.

#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use berth::drive::{Model, Timeouts};
use berth::net::tls::{TlsAcceptor, TlsConnector, TlsSettings, TlsStream};
use berth::net::Acceptor;
use server::certs::Certs;
use server::{get_request, Client, ModelServer, Opts, IO_TIMEOUT};

use berth_testkit::per_model;

// One test per case and model of the registry (`case::uring`): see `per_model!`.
berth::with_models!(per_model! {
    https_answers,
    a_handshake_that_never_comes_or_stalls_is_dropped_at_the_header_timeout,
    slowloris_over_tls_is_cut_off_while_others_are_served,
    plain_http_to_the_tls_port_is_closed_not_answered,
});

/// A file bigger than any buffer, so that its body goes out in many encrypted chunks.
const BIG: usize = 3 * 1024 * 1024 + 17;

fn big() -> Vec<u8> {
    (0..BIG as u32)
        .map(|i| (i.wrapping_mul(7) % 251) as u8)
        .collect()
}

struct Site {
    certs: Certs,
    root: PathBuf,
}

impl Site {
    fn new(tag: &str) -> Site {
        let certs = Certs::new(&format!("https-{tag}"));
        let root = certs.path("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("big.bin"), big()).unwrap();
        Site { certs, root }
    }

    fn serve(&self, m: Model, timeouts: Option<Timeouts>) -> ModelServer {
        let tls = TlsAcceptor::new(TlsSettings::http(&self.certs.cert, &self.certs.key)).unwrap();
        let mut opts = Opts::new(m)
            .files(&self.root)
            .with_common(|c| c.listen.transport = Acceptor::Tls(tls));
        if let Some(t) = timeouts {
            opts = opts.timeouts(t);
        }
        opts.start()
    }

    fn client(&self, addr: SocketAddr) -> Client<TlsStream<TcpStream>> {
        let connector = TlsConnector::new(Some(&self.certs.ca), &[b"http/1.1"]).unwrap();
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        sock.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut tls = connector.connect("127.0.0.1", sock).unwrap();
        tls.complete_handshake().unwrap();
        Client::from_stream(tls)
    }
}

fn short_timeouts() -> Timeouts {
    Timeouts {
        header: Duration::from_secs(1),
        ..Timeouts::default()
    }
}

/// Reads until the server closes; true if it did within `within` (EOF, reset or a TLS alert),
/// false if the connection was still open then.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if server::is_reset(&e) => return true,
            Err(_) => return false,
        }
        if start.elapsed() > within {
            return false;
        }
    }
}

fn https_answers(m: Model) {
    let site = Site::new(&format!("answers-{m}"));
    let srv = site.serve(m, None);
    let mut c = site.client(srv.addr);
    assert_eq!(c.get("/hello/world").text(), "Hello, World!", "{m}");
    assert_eq!(
        c.get("/hello/world").text(),
        "Hello, World!",
        "{m}: keep-alive"
    );
    assert_eq!(c.stream.alpn_protocol(), Some(&b"http/1.1"[..]), "{m}");

    let body = r#"{"text":"stressed"}"#;
    c.send(
        format!(
            "POST /reverse HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    let r = c.read_response();
    assert_eq!(r.status, 200, "{m}: {}", r.text());
    assert!(r.text().contains("desserts"), "{m}: {}", r.text());

    // A file: read and encrypted chunk by chunk, every byte checked.
    let r = c.get("/files/big.bin");
    assert_eq!(r.status, 200, "{m}");
    assert_eq!(r.body.len(), BIG, "{m}");
    assert!(r.body == big(), "{m}: the file's bytes differ");

    // Pipelined: three requests in one write, answered in order.
    let mut three = get_request("/hello/world");
    three.push_str(&get_request("/files/big.bin"));
    three.push_str(&get_request("/hello/world"));
    c.send(three.as_bytes());
    assert_eq!(c.read_response().text(), "Hello, World!", "{m}");
    assert_eq!(c.read_response().body.len(), BIG, "{m}");
    assert_eq!(c.read_response().text(), "Hello, World!", "{m}");
    drop(c);
    srv.stop();
}

fn a_handshake_that_never_comes_or_stalls_is_dropped_at_the_header_timeout(m: Model) {
    let site = Site::new(&format!("handshake-{m}"));
    let srv = site.serve(m, Some(short_timeouts()));
    // TCP only: no ClientHello at all.
    let mut silent = TcpStream::connect(srv.addr).unwrap();
    // Half a TLS record header, then nothing.
    let mut halfway = TcpStream::connect(srv.addr).unwrap();
    halfway.write_all(&[0x16, 0x03, 0x01]).unwrap();
    let started = Instant::now();
    assert!(
        closed_within(&mut silent, Duration::from_secs(5)),
        "{m}: a silent connection was kept"
    );
    assert!(
        closed_within(&mut halfway, Duration::from_secs(5)),
        "{m}: a stalled handshake was kept"
    );
    assert!(started.elapsed() >= Duration::from_millis(800), "{m}");
    // Still serving.
    assert_eq!(site.client(srv.addr).get("/hello/world").status, 200, "{m}");
    srv.stop();
}

fn slowloris_over_tls_is_cut_off_while_others_are_served(m: Model) {
    let site = Site::new(&format!("slowloris-{m}"));
    let srv = site.serve(m, Some(short_timeouts()));
    let addr = srv.addr;
    let mut slow = site.client(addr);
    let dribble = thread::spawn(move || {
        let started = Instant::now();
        for b in b"GET /hello/world HTTP/1.1\r\nHost: slow\r\nX-A: 1\r\nX-B: 2\r\n" {
            if slow
                .stream
                .write_all(&[*b])
                .and_then(|_| slow.stream.flush())
                .is_err()
            {
                break;
            }
            thread::sleep(Duration::from_millis(200));
            if started.elapsed() > Duration::from_secs(8) {
                break;
            }
        }
        let r = slow.try_read_response(false);
        (started.elapsed(), r.map(|r| r.status).ok())
    });
    // Others are served meanwhile (blocking models: on their own thread or process).
    if m.caps().concurrent {
        for _ in 0..3 {
            assert_eq!(site.client(addr).get("/hello/world").status, 200, "{m}");
        }
    }
    let (took, status) = dribble.join().unwrap();
    assert!(
        took < Duration::from_secs(6),
        "{m}: the slow client was kept {took:?}"
    );
    assert!(
        matches!(status, None | Some(408)),
        "{m}: the slow client got {status:?}"
    );
    assert_eq!(site.client(addr).get("/hello/world").status, 200, "{m}");
    srv.stop();
}

fn plain_http_to_the_tls_port_is_closed_not_answered(m: Model) {
    let site = Site::new(&format!("plain-{m}"));
    let srv = site.serve(m, Some(short_timeouts()));
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.write_all(get_request("/hello/world").as_bytes()).unwrap();
    let mut got = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read_to_end(&mut got);
    assert!(
        !got.windows(13).any(|w| w == b"Hello, World!"),
        "{m}: plain HTTP was answered on the TLS port"
    );
    assert_eq!(site.client(srv.addr).get("/hello/world").status, 200, "{m}");
    srv.stop();
}
