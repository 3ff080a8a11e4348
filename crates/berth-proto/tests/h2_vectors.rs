//! Runs every HTTP/2 conversation of `testdata/h2` through the sans-IO
//! [`Connection`](berth_proto::h2::Connection): whole, and split at every byte (for long
//! floods: a byte at a time and at sampled split points). Every way must hear the same
//! answers. Jobs are held until all input is in. See `testdata/h2/README.md` for the format.
//!
//! The request-shaped cases (frames a client of good faith sends, on streams in its own
//! order) run a second way: berth-proto's client role against the server through the
//! [`Pair`](h2_support::pair::Pair), checked by what the client heard.

mod h2_support;

use berth_proto::h2::H2Config;

use h2_support::vectors::{self, bytes_of, Case};
use h2_support::{code_named, hear, Heard, Server};

/// Runs the conversation with the input cut at `cuts`.
fn run(bytes: &[u8], cuts: &[usize]) -> (Heard, bool) {
    let mut server = Server::new(H2Config::default());
    let mut at = 0;
    for &cut in cuts.iter().chain([bytes.len()].iter()) {
        server.feed(&bytes[at..cut]);
        at = cut;
    }
    server.finish();
    (hear(&server.output), server.closed)
}

fn check(case: &Case, heard: &Heard, closed: bool, way: &str) {
    let name = &case.name;
    let mut got: Vec<_> = heard
        .responses
        .iter()
        .map(|(s, status, _, body, ended)| (*s, *status, body.clone(), *ended))
        .collect();
    got.sort_by_key(|r| r.0);
    if let Some(responses) = &case.responses {
        let mut want: Vec<_> = responses.iter().collect();
        want.sort_by_key(|r| r.stream);
        let shown: Vec<_> = got.iter().take(8).map(|r| (r.0, r.1)).collect();
        assert_eq!(
            got.len(),
            want.len(),
            "{name} ({way}): responses {shown:?}..., resets {:?}, goaway {:?}",
            &heard.resets[..heard.resets.len().min(8)],
            heard.goaway
        );
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0, g.1), (w.stream, w.status), "{name} ({way})");
            if let Some(body) = &w.body {
                assert_eq!(g.2, body.as_bytes(), "{name} ({way}): body");
            }
            if let Some(n) = w.body_length {
                assert_eq!(g.2.len(), n, "{name} ({way}): body length");
            }
            match w.ended {
                Some(ended) => assert_eq!(g.3, ended, "{name} ({way}): END_STREAM on {}", g.0),
                None => assert!(g.3 || closed, "{name} ({way}): stream {} not ended", g.0),
            }
        }
    }
    if let Some(resets) = &case.resets {
        let resets: Vec<(u32, u32)> = resets
            .iter()
            .map(|r| (r.stream, code_named(&r.code)))
            .collect();
        assert_eq!(heard.resets, resets, "{name} ({way}): resets");
    }
    assert_eq!(
        heard.goaway.map(|g| g.1),
        case.goaway.as_deref().map(code_named),
        "{name} ({way}): goaway"
    );
    assert_eq!(closed, case.close, "{name} ({way}): closed");
    if let Some(p) = case.pings {
        assert_eq!(heard.pings, p, "{name} ({way}): pings");
    }
    assert_eq!(heard.settings, 1, "{name} ({way}): one SETTINGS from berth");
}

#[test]
fn every_h2_vector_whole_and_split() {
    let only = std::env::var("BERTH_VECTOR").ok();
    let mut ran = 0;
    let mut names = std::collections::HashSet::new();
    for (_, case) in vectors::all() {
        assert!(names.insert(case.name.clone()), "duplicate {}", case.name);
        if only.as_ref().is_some_and(|o| *o != case.name) {
            continue;
        }
        let bytes = bytes_of(&case);
        let (heard, closed) = run(&bytes, &[]);
        check(&case, &heard, closed, "whole");
        let bytewise: Vec<usize> = (1..bytes.len()).collect();
        let (h, c) = run(&bytes, &bytewise);
        check(&case, &h, c, "bytewise");
        // Every split point for short conversations; a sample for floods.
        let step = (bytes.len() / 300).max(1);
        for cut in (1..bytes.len()).step_by(step) {
            let (h, c) = run(&bytes, &[cut]);
            check(&case, &h, c, &format!("split at {cut}"));
        }
        ran += 1;
    }
    assert!(ran > 0, "no vector ran");
}

/// What a well-behaved client would do for one `send` of a request-shaped case.
enum Act {
    /// Open a stream: `(method, scheme, path, authority, other fields, end_stream)`.
    Open(Vec<(String, String)>, bool),
    /// DATA on the stream opened as `stream`.
    Data(u32, Vec<u8>, bool),
    /// A PING.
    Ping([u8; 8]),
    /// Nothing: the client role does it itself (a window opened as the answer is read).
    Own,
}

/// The case as calls on the client role, if every frame it sends is one a client of good
/// faith sends through that API, on streams in the order the client numbers them; `None`
/// for the cases that test the server's parsing of bad or hand-made input (those stay raw
/// bytes only).
fn request_shaped(case: &Case) -> Option<Vec<Act>> {
    let mut acts = Vec::new();
    let mut next = 1;
    let mut open = std::collections::HashSet::new();
    for (i, s) in case.send.iter().enumerate() {
        let plain = s.hex.is_none()
            && s.bomb.is_none()
            && s.repeat.is_none()
            && !s.continued
            && !s.then_rst
            && !s.then_data
            && s.flags.iter().all(|f| f == "end_stream");
        let end = s.flags.iter().any(|f| f == "end_stream");
        match s.frame.as_str() {
            "preface" if i == 0 => {}
            "headers" if plain && s.stream == next => {
                let fields = match &s.request {
                    Some(path) => h2_support::request_fields("GET", path)
                        .into_iter()
                        .map(|(n, v)| (n.to_owned(), v.to_owned()))
                        .collect(),
                    None => s.fields.clone(),
                };
                let names: Vec<&str> = fields.iter().map(|f| f.0.as_str()).collect();
                let pseudo = [":method", ":scheme", ":path"];
                let regular = |n: &&str| !n.starts_with(':');
                let shaped = names.len() >= 3
                    && names[..3] == pseudo
                    && (names.len() == 3 || names[3] == ":authority" || regular(&names[3]))
                    && names.iter().skip(4).all(regular);
                if !shaped {
                    return None;
                }
                if !end {
                    open.insert(s.stream);
                }
                acts.push(Act::Open(fields, end));
                next += 2;
            }
            "data" if plain && open.contains(&s.stream) && s.data.is_some() => {
                if end {
                    open.remove(&s.stream);
                }
                let data = s.data.clone().unwrap_or_default().into_bytes();
                acts.push(Act::Data(s.stream, data, end));
            }
            "ping" if s.flags.is_empty() && s.repeat.is_none() => {
                let data = s.hex.as_deref().map(vectors::hex).unwrap_or(vec![0; 8]);
                acts.push(Act::Ping(data.try_into().ok()?));
            }
            // A window opened by about an answer's length: what the role's refill does as it
            // reads (a zero, tiny or huge one tests the server's limits, raw).
            "window-update"
                if s.repeat.is_none() && (1_000..=100_000).contains(&s.increment.unwrap_or(1)) =>
            {
                acts.push(Act::Own)
            }
            _ => return None,
        }
    }
    Some(acts)
}

/// The request-shaped vectors again, client role ↔ server through the [`Pair`]: what the
/// client heard (decoded by the role, not by the test's own decoder) must be what the case
/// says, as for the raw bytes.
#[test]
fn request_shaped_vectors_run_client_to_server() {
    use berth_proto::h2::client::{ClientConfig, Event};
    use h2_support::pair::Pair;

    let mut ran = Vec::new();
    for (_, case) in vectors::all() {
        let Some(acts) = request_shaped(&case) else {
            continue;
        };
        let name = &case.name;
        // Jobs held until all input is in, as for the raw bytes.
        let server = Server::new(H2Config::default());
        let mut pair = Pair::with(server, ClientConfig::default());
        for act in acts {
            match act {
                Act::Open(fields, end) => {
                    let regular: Vec<(&[u8], &[u8])> = fields
                        .iter()
                        .filter(|(n, _)| !n.starts_with(':'))
                        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
                        .collect();
                    let pseudo = |name: &str| {
                        fields
                            .iter()
                            .find(|(n, _)| n == name)
                            .map(|(_, v)| v.as_bytes())
                    };
                    let req = berth_proto::h2::client::Request {
                        method: pseudo(":method").unwrap(),
                        scheme: pseudo(":scheme").unwrap(),
                        path: pseudo(":path").unwrap(),
                        authority: pseudo(":authority"),
                        fields: &regular,
                        indexed: false,
                    };
                    pair.client.request(&req, b"", end).unwrap();
                }
                Act::Data(stream, data, end) => pair.client.send_data(stream, &data, end),
                Act::Ping(data) => pair.client.ping(data),
                Act::Own => {}
            }
        }
        pair.drive();
        pair.finish();
        assert_eq!(
            pair.error, None,
            "{name}: the client found the server wrong"
        );
        let closed = pair.server.closed;
        if let Some(responses) = &case.responses {
            assert_eq!(
                pair.answered().len(),
                responses.len(),
                "{name}: heads heard {:?}",
                pair.answered()
            );
            for w in responses {
                let got = pair.answer(w.stream);
                assert_eq!(got.status, w.status, "{name}: status of {}", w.stream);
                if let Some(body) = &w.body {
                    assert_eq!(got.body, body.as_bytes(), "{name}: body of {}", w.stream);
                }
                if let Some(n) = w.body_length {
                    assert_eq!(got.body.len(), n, "{name}: body length of {}", w.stream);
                }
                match w.ended {
                    Some(ended) => assert_eq!(got.ended, ended, "{name}: END_STREAM"),
                    None => assert!(got.ended || closed, "{name}: {} not ended", w.stream),
                }
            }
        }
        if let Some(resets) = &case.resets {
            let want: Vec<(u32, u32)> = resets
                .iter()
                .map(|r| (r.stream, code_named(&r.code)))
                .collect();
            assert_eq!(pair.resets(), want, "{name}: resets");
        }
        assert_eq!(
            pair.goaway().map(|g| g.1 .0),
            case.goaway.as_deref().map(code_named),
            "{name}: goaway"
        );
        assert_eq!(closed, case.close, "{name}: closed");
        if let Some(p) = case.pings {
            assert_eq!(pair.count(|e| matches!(e, Event::Pong(_))), p, "{name}");
        }
        let settings = pair.count(|e| matches!(e, Event::Settings { .. }));
        assert_eq!(settings, 1, "{name}: one SETTINGS from berth");
        ran.push(case.name.clone());
    }
    eprintln!("request-shaped vectors run through the pair: {ran:?}");
    assert!(ran.len() >= 8, "only {ran:?}");
}
