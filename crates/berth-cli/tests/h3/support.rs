//! What the HTTP/3 test files beside `tests/h3.rs` share (`h3_quicgo.rs`, `h3_chromium.rs`,
//! `h3_attacks.rs`; included with `#[path = "h3/support.rs"] mod support;` after `mod
//! common;`): a berth serving HTTP/3 on a fresh port with fresh certificates and `--root`, its
//! `/stats` asked over HTTP/3 (aioquic's client), and checks on JSON responses in
//! `tests/h3/client.py`'s shape, which the quic-go client shares.
#![allow(dead_code)] // each test binary uses a different part of it

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use berth_testkit::certs::Certs;
use serde_json::Value;

use crate::common::Berth;

/// The aioquic client script.
pub fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3/client.py")
}

/// A script of this folder.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/h3")
        .join(name)
}

/// A berth serving HTTP/3 and what its tests need: its port, its certificates, its `--root`.
pub struct H3 {
    pub berth: Berth,
    pub port: u16,
    pub certs: Certs,
    pub root: PathBuf,
}

impl Drop for H3 {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The UDP port of `quic://127.0.0.1:PORT` in a startup line.
pub fn quic_port(line: &str) -> u16 {
    let at = line
        .find("quic://127.0.0.1:")
        .unwrap_or_else(|| panic!("no quic:// address in {line:?}"))
        + "quic://127.0.0.1:".len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect("a port")
}

/// A fresh, empty `--root` for `tag`, holding `small.txt`.
pub fn root(tag: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("berth-h3-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("small.txt"),
        "0123456789abcdefghijklmnopqrstuvwxyz",
    )
    .unwrap();
    root
}

/// `berth serve --model evloop -A 1 -w 2 --listen quic://127.0.0.1:0?cert=..&key=.. --root
/// DIR` plus `extra`, with a `--root` holding `small.txt`.
pub fn serve(tag: &str, extra: &[&str]) -> H3 {
    serve_model("evloop", tag, extra)
}

/// [`serve`] with `--model model` (one of those that serve HTTP/3: `Caps::serves_http3`).
pub fn serve_model(model: &str, tag: &str, extra: &[&str]) -> H3 {
    let tag = format!("{model}-{tag}");
    let certs = Certs::new(&format!("h3-{tag}"));
    let root = root(&tag);
    let listen = format!(
        "quic://127.0.0.1:0?cert={}&key={}",
        certs.cert.display(),
        certs.key.display()
    );
    let mut args = vec![
        "serve",
        "--model",
        model,
        "-A",
        "1",
        "-w",
        "2",
        "--listen",
        &listen,
        "--root",
        root.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut berth = Berth::spawn(&args);
    let line = berth.line();
    assert!(line.starts_with("berth listening on quic://"), "{line}");
    let port = quic_port(&line);
    H3 {
        berth,
        port,
        certs,
        root,
    }
}

/// Sends `requests` as concurrent streams of one aioquic connection to `port`; returns the
/// responses in order (see `tests/h3/client.py`), failing the test if the client does.
pub fn aioquic_fetch(port: u16, ca: &Path, requests: &Value) -> Vec<Value> {
    aioquic_fetch_with(port, ca, requests, &[])
}

/// [`aioquic_fetch`] with the client's own options (`--stop N`: stop the first download
/// after N bytes).
pub fn aioquic_fetch_with(port: u16, ca: &Path, requests: &Value, extra: &[&str]) -> Vec<Value> {
    let python = berth_testkit::tools::require_python_module("aioquic");
    run_client(
        Command::new(python)
            .arg(client_script())
            .args(["127.0.0.1", &port.to_string(), ca.to_str().unwrap()])
            .args(extra),
        requests,
    )
}

/// Runs a client of `client.py`'s interface: `requests` on its stdin, its last line of
/// stdout the JSON list of responses.
pub fn run_client(cmd: &mut Command, requests: &Value) -> Vec<Value> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(requests.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the client failed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or("");
    match serde_json::from_str::<Value>(last) {
        Ok(Value::Array(responses)) => responses,
        other => panic!("the client said {other:?}: {stdout}"),
    }
}

impl H3 {
    /// Requests over aioquic.
    pub fn fetch(&self, requests: Value) -> Vec<Value> {
        aioquic_fetch(self.port, &self.certs.ca, &requests)
    }

    /// `/stats`, asked over a connection of its own (which counts itself).
    pub fn stats(&self) -> String {
        let stats = self.fetch(serde_json::json!([{"path": "/stats"}]));
        stats[0]["body"].as_str().unwrap_or("").to_owned()
    }

    /// A counter of `/stats`.
    pub fn stat(&self, name: &str) -> i64 {
        stat(&self.stats(), name)
    }
}

/// A counter of a `/stats` body.
pub fn stat(body: &str, name: &str) -> i64 {
    let prefix = format!("{name} ");
    body.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {body:?}"))
}

/// A response in a line, for a failed check: status, length, error, headers, the start of the
/// body (a body of megabytes would bury the rest).
pub fn brief(r: &Value) -> String {
    let body: String = r["body"].as_str().unwrap_or("").chars().take(200).collect();
    format!(
        "status {} length {} error {} headers {} body {body:?}",
        r["status"], r["length"], r["error"], r["headers"]
    )
}

/// A response's checks: no error, this status, this body.
pub fn answered(r: &Value, status: u64, body: &str) {
    assert_eq!(r["error"], Value::Null, "{}", brief(r));
    assert_eq!(r["status"], status, "{}", brief(r));
    assert_eq!(r["body"], body, "{}", brief(r));
}

/// A response header's value.
pub fn header<'a>(r: &'a Value, name: &str) -> Option<&'a str> {
    r["headers"]
        .as_array()?
        .iter()
        .find(|h| h[0] == name)
        .and_then(|h| h[1].as_str())
}

/// The SHA-256 of `bytes` in hex, by `sha256sum` (coreutils): the test's own hash,
/// independent of the client's.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!(
        "berth-h3-sha-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("data");
    std::fs::write(&file, bytes).unwrap();
    let out = Command::new("sha256sum").arg(&file).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// What the kernel and /proc say of a process: its open descriptors, its resident memory
/// (KiB), and its UDP sockets by `ss -uanp`.
pub struct Footprint {
    pub fds: usize,
    pub rss_kib: u64,
    pub udp_sockets: usize,
}

/// [`Footprint`] of `pid`.
pub fn footprint(pid: i32) -> Footprint {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let ss = Command::new("ss").args(["-uanp"]).output();
    let needle = format!("pid={pid},");
    let udp_sockets = ss
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains(&needle))
                .count()
        })
        .unwrap_or(0);
    Footprint {
        fds,
        rss_kib,
        udp_sockets,
    }
}

/// A hundred requests of four kinds for one connection's concurrent streams: hello, a one-byte
/// range of `small.txt`, `POST /reverse` and a job (`/test/slow`), in turn.
pub fn a_hundred_requests() -> Value {
    (0..100)
        .map(|i| match i % 4 {
            0 => serde_json::json!({"path": "/hello/world"}),
            1 => serde_json::json!({"path": "/files/small.txt", "headers": [["range", format!("bytes={}-{}", i % 10, i % 10)]]}),
            2 => serde_json::json!({"method": "POST", "path": "/reverse", "body": format!("{{\"n\": \"{i}x\"}}")}),
            _ => serde_json::json!({"path": "/test/slow"}),
        })
        .collect()
}

/// The answers to [`a_hundred_requests`], each checked.
pub fn a_hundred_answered(r: &[Value]) {
    assert_eq!(r.len(), 100);
    for (i, r) in r.iter().enumerate() {
        match i % 4 {
            0 => answered(r, 200, "Hello, World!"),
            1 => answered(r, 206, &"0123456789"[i % 10..i % 10 + 1]),
            2 => {
                let reversed: String = format!("{i}x").chars().rev().collect();
                answered(r, 200, &format!("{{\"data\":[\"{reversed}\"]}}"));
            }
            _ => assert_eq!(r["status"], 200, "{i}: {}", brief(r)),
        }
    }
}

/// The answer to `range: bytes=1000000-1000015` of a 50,000,000-byte file holding `data`:
/// 206, its `Content-Range`, and those 16 bytes.
pub fn range_answered(r: &Value, data: &[u8]) {
    assert_eq!(r["status"], 206, "{}", brief(r));
    assert_eq!(
        header(r, "content-range"),
        Some("bytes 1000000-1000015/50000000")
    );
    assert_eq!(r["length"], 16);
    assert_eq!(
        r["sha256"],
        sha256_hex(&data[1_000_000..1_000_016]).as_str()
    );
}
