//! The conversation vectors of `testdata/h2`: their format (see `testdata/h2/README.md`) and
//! the client bytes each case stands for, shared by the vector runner and the fuzz test (whose
//! seeds they are).

use std::path::PathBuf;

use berth_proto::h2::frame::{self, flag, kind};
use berth_proto::h2::hpack;
use serde::Deserialize;

use super::{code_named, request_fields};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub case: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    #[serde(default)]
    #[allow(dead_code)]
    pub description: String,
    #[serde(default)]
    #[allow(dead_code)]
    pub rfc: String,
    pub send: Vec<Send>,
    /// Unset: not checked (the floods answer many streams before the limit).
    pub responses: Option<Vec<Expected>>,
    /// Unset: not checked.
    pub resets: Option<Vec<Reset>>,
    pub goaway: Option<String>,
    pub close: bool,
    pub pings: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    pub stream: u32,
    pub status: u16,
    pub body: Option<String>,
    /// The body's length, for bodies too long to write out.
    pub body_length: Option<usize>,
    /// Whether END_STREAM came (default: it did, or the connection closed).
    pub ended: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reset {
    pub stream: u32,
    pub code: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Send {
    pub frame: String,
    #[serde(default)]
    pub stream: u32,
    #[serde(default)]
    pub flags: Vec<String>,
    #[serde(default)]
    pub fields: Vec<(String, String)>,
    pub request: Option<String>,
    pub data: Option<String>,
    pub hex: Option<String>,
    pub code: Option<String>,
    pub increment: Option<u32>,
    #[serde(rename = "type")]
    pub kind: Option<u8>,
    pub length: Option<usize>,
    #[serde(default)]
    pub continued: bool,
    pub bomb: Option<usize>,
    pub repeat: Option<usize>,
    #[serde(default)]
    pub step_stream: bool,
    #[serde(default)]
    pub then_rst: bool,
    #[serde(default)]
    pub then_data: bool,
}

pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub fn flags(names: &[String]) -> u8 {
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
pub fn build(s: &Send, stream: u32, out: &mut Vec<u8>) {
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

pub fn bytes_of(case: &Case) -> Vec<u8> {
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

/// Every case of every file in `testdata/h2`, in file order, with the file it came from.
pub fn all() -> Vec<(PathBuf, Case)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/h2");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        let file: File = toml::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        out.extend(file.case.into_iter().map(|c| (path.clone(), c)));
    }
    out
}
