//! Runs every HTTP/2 conversation of `testdata/h2` through the sans-IO
//! [`Connection`](berth_proto::h2::Connection): whole, and split at every byte (for long
//! floods: a byte at a time and at sampled split points). Every way must hear the same
//! answers. Jobs are held until all input is in. See `testdata/h2/README.md` for the format.

mod h2_support;

use std::path::PathBuf;

use berth_proto::h2::frame::{self, flag, kind};
use berth_proto::h2::hpack;
use berth_proto::h2::H2Config;
use serde::Deserialize;

use h2_support::{code_named, hear, request_fields, Heard, Server};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    case: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
    #[serde(default)]
    #[allow(dead_code)]
    rfc: String,
    send: Vec<Send>,
    /// Unset: not checked (the floods answer many streams before the limit).
    responses: Option<Vec<Expected>>,
    /// Unset: not checked.
    resets: Option<Vec<Reset>>,
    goaway: Option<String>,
    close: bool,
    pings: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    stream: u32,
    status: u16,
    body: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reset {
    stream: u32,
    code: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Send {
    frame: String,
    #[serde(default)]
    stream: u32,
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default)]
    fields: Vec<(String, String)>,
    request: Option<String>,
    data: Option<String>,
    hex: Option<String>,
    code: Option<String>,
    increment: Option<u32>,
    #[serde(rename = "type")]
    kind: Option<u8>,
    length: Option<usize>,
    #[serde(default)]
    continued: bool,
    bomb: Option<usize>,
    repeat: Option<usize>,
    #[serde(default)]
    step_stream: bool,
    #[serde(default)]
    then_rst: bool,
    #[serde(default)]
    then_data: bool,
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn flags(names: &[String]) -> u8 {
    names
        .iter()
        .map(|n| match n.as_str() {
            "end_stream" | "ack" => flag::END_STREAM,
            "end_headers" => flag::END_HEADERS,
            "padded" => flag::PADDED,
            "priority" => flag::PRIORITY,
            other => panic!("unknown flag {other}"),
        })
        .fold(0, |a, b| a | b)
}

/// The bytes one `send` item stands for, on `stream`.
fn build(s: &Send, stream: u32, out: &mut Vec<u8>) {
    let mut fl = flags(&s.flags);
    let block = || {
        let mut block = Vec::new();
        if let Some(n) = s.bomb {
            block.push(0x40);
            hpack::encode_str(&mut block, b"x-bomb");
            hpack::encode_str(&mut block, &[b'a'; 4000]);
            block.extend(std::iter::repeat_n(0x80 | 62u8, n));
            let mut pre = Vec::new();
            hpack::encode(
                request_fields("GET", "/")
                    .iter()
                    .map(|(n, v)| (n.as_bytes(), v.as_bytes())),
                &mut pre,
            );
            pre.extend_from_slice(&block);
            return pre;
        }
        let owned: Vec<(String, String)> = match &s.request {
            Some(path) => request_fields("GET", path)
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect(),
            None => s.fields.clone(),
        };
        hpack::encode(
            owned.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut block,
        );
        block
    };
    let payload = |default: Vec<u8>| match (&s.hex, &s.data) {
        (Some(h), _) => hex(h),
        (None, Some(d)) => d.as_bytes().to_vec(),
        (None, None) => default,
    };
    let code = |default: &str| code_named(s.code.as_deref().unwrap_or(default));
    let (k, p) = match s.frame.as_str() {
        "preface" => {
            out.extend_from_slice(frame::PREFACE);
            frame::write_settings(out, &[]);
            return;
        }
        "preface-only" => {
            out.extend_from_slice(frame::PREFACE);
            return;
        }
        "settings" => (kind::SETTINGS, payload(Vec::new())),
        "headers" => {
            if !s.continued {
                fl |= flag::END_HEADERS;
            }
            (kind::HEADERS, payload(block()))
        }
        "continuation" => (kind::CONTINUATION, payload(block())),
        "data" => (kind::DATA, payload(Vec::new())),
        "ping" => (kind::PING, payload(vec![0; 8])),
        "rst" => (kind::RST_STREAM, code("CANCEL").to_be_bytes().to_vec()),
        "window-update" => (
            kind::WINDOW_UPDATE,
            s.increment.unwrap_or(1).to_be_bytes().to_vec(),
        ),
        "priority" => (kind::PRIORITY, payload(vec![0, 0, 0, 0, 16])),
        "goaway" => (kind::GOAWAY, payload(vec![0; 8])),
        "push-promise" => (kind::PUSH_PROMISE, payload(vec![0, 0, 0, 2])),
        "raw" => {
            let p = payload(Vec::new());
            if let Some(len) = s.length {
                frame::write_header(out, len, s.kind.unwrap(), fl, stream);
                return;
            }
            (s.kind.unwrap(), p)
        }
        other => panic!("unknown frame {other}"),
    };
    frame::write_header(out, p.len(), k, fl, stream);
    out.extend_from_slice(&p);
    if s.then_rst {
        frame::write_rst(out, stream, frame::ErrorCode::CANCEL);
    }
    if s.then_data {
        frame::write_data(out, stream, b"x", false);
    }
}

fn bytes_of(case: &Case) -> Vec<u8> {
    let mut out = Vec::new();
    for s in &case.send {
        for i in 0..s.repeat.unwrap_or(1) {
            let stream = if s.step_stream {
                s.stream + 2 * i as u32
            } else {
                s.stream
            };
            build(s, stream, &mut out);
        }
    }
    out
}

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
            assert!(g.3 || closed, "{name} ({way}): stream {} not ended", g.0);
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
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/h2");
    let only = std::env::var("BERTH_VECTOR").ok();
    let mut ran = 0;
    let mut names = std::collections::HashSet::new();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        let file: File = toml::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        for case in file.case {
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
    }
    assert!(ran > 0, "no vector ran");
}
