//! The fields berth writes itself into every response head, `Server: berth` and `Date`, and
//! their switches (`Limits::server_header`, `Limits::date_header`: `berth serve
//! --server-header off`, `python -m berth --no-date-header`), over HTTP/1.1 and HTTP/2, in
//! memory through the same pump the drivers use: every kind of answer the session writes (a
//! handler's, a job's, an error's) obeys them.

mod h2_support;

use berth_proto::http::{Handled, Handler, Job, Limits, Reply, Request, Response};
use berth_proto::switch::{NoFiles, Pump};

use h2_support::{hear, Client};

const DATE: &[u8] = b"Tue, 24 Nov 2026 00:00:00 GMT";

struct App;

struct Slow;

impl Job for Slow {
    fn run(self) -> Reply {
        Reply::new(200, "text/plain", b"slow".to_vec())
    }
}

impl Handler for App {
    type Job = Slow;

    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<Slow> {
        match req.path {
            "/job" => Handled::Offload(Slow),
            _ => {
                res.send(200, "text/plain", b"hi");
                Handled::Done
            }
        }
    }
}

fn limits(server: bool, date: bool) -> Limits {
    Limits {
        server_header: server,
        date_header: date,
        ..Limits::default()
    }
}

/// The heads of the responses to `requests`, sent in one go (pipelined), lower-cased.
fn heads(limits: Limits, requests: &[u8]) -> Vec<String> {
    let mut pump = Pump::new(App, limits, DATE, false);
    pump.feed(requests, &mut NoFiles).unwrap();
    let text = String::from_utf8(pump.take_written()).unwrap();
    // Each head runs from its status line to its blank line (the bodies are short text).
    text.match_indices("HTTP/1.1 ")
        .map(|(at, _)| {
            let head = &text[at..];
            head[..head.find("\r\n\r\n").unwrap()].to_ascii_lowercase()
        })
        .collect()
}

const REQUESTS: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\
    GET /job HTTP/1.1\r\nHost: x\r\n\r\n\
    GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";

#[test]
fn http1_heads_carry_server_and_date_by_default() {
    let heads = heads(Limits::default(), REQUESTS);
    assert_eq!(heads.len(), 3, "{heads:?}");
    assert!(heads[2].starts_with("http/1.1 400"), "{heads:?}");
    for head in &heads {
        assert!(head.contains("\r\nserver: berth\r\n"), "{head}");
        assert!(
            head.contains("\r\ndate: tue, 24 nov 2026 00:00:00 gmt"),
            "{head}"
        );
    }
}

#[test]
fn http1_heads_leave_out_what_is_switched_off() {
    for (server, date) in [(false, true), (true, false), (false, false)] {
        let heads = heads(limits(server, date), REQUESTS);
        assert_eq!(heads.len(), 3, "{heads:?}");
        for head in &heads {
            assert_eq!(head.contains("\r\nserver:"), server, "{head}");
            assert_eq!(head.contains("\r\ndate:"), date, "{head}");
            // The rest of the head is as it was.
            assert!(head.contains("\r\ncontent-length: "), "{head}");
        }
    }
    // Neither: the head is the status line, Content-Type and Content-Length alone.
    let heads = heads(limits(false, false), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(
        heads,
        ["http/1.1 200 ok\r\ncontent-type: text/plain\r\ncontent-length: 2"]
    );
}

/// The fields of the HTTP/2 answers to two GETs of `/` (prior knowledge, through the pump's
/// preface sniffing, as a driver serves it).
fn h2_fields(limits: Limits) -> Vec<Vec<(String, String)>> {
    let mut pump = Pump::new(App, limits, DATE, false);
    let mut c = Client::default();
    c.preface().get(1, "/").get(3, "/");
    pump.feed(&c.take(), &mut NoFiles).unwrap();
    hear(&pump.take_written())
        .responses
        .into_iter()
        .map(|r| r.2)
        .collect()
}

#[test]
fn http2_answers_carry_server_unless_switched_off() {
    let named =
        |fields: &[(String, String)]| fields.iter().any(|(n, v)| n == "server" && v == "berth");
    let on = h2_fields(Limits::default());
    assert_eq!(on.len(), 2, "{on:?}");
    assert!(on.iter().all(|f| named(f)), "{on:?}");
    let off = h2_fields(limits(false, true));
    assert_eq!(off.len(), 2, "{off:?}");
    for fields in &off {
        assert!(fields.iter().all(|(n, _)| n != "server"), "{fields:?}");
        assert_eq!(fields[0], (":status".to_owned(), "200".to_owned()));
    }
}
