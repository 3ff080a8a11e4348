//! Headless Chromium forced onto QUIC loads a `--site` page over HTTP/3 (issue 42's
//! "Clients"): `berth serve --model evloop --tls-cert .. --tls-key .. --http3 --site DIR
//! --access-log` serves a page with CSS, JavaScript and an image; Chromium (Debian's
//! `chromium`, which `.ci/run` installs) is told to speak QUIC to that origin from the first
//! request (`--origin-to-force-quic-on`) and to take the test certificate by its key's SPKI
//! hash (`--ignore-certificate-errors-spki-list`), and dumps the DOM after the page's script
//! ran. HTTP/3 served it: every resource's line in berth's access log says `HTTP/3`, and
//! Chromium's own net log (`--log-net-log`) has its QUIC session to the port and the HTTP/3
//! response heads it decoded.
//!
//! Chromium and openssl must be installed: without them this test fails, naming them.

mod common;
#[path = "h3/support.rs"]
mod support;

use std::path::Path;
use std::process::Command;

use berth_testkit::certs::Certs;
use common::{Berth, LIMIT};
use serde_json::Value;

const INDEX: &str = r#"<!doctype html>
<html><head><title>berth over HTTP/3</title><link rel="stylesheet" href="style.css"></head>
<body><p id="css">css</p><p id="js">js did not run</p><img id="img" src="dot.png" alt="dot">
<p id="imgstate">image not loaded</p>
<script src="app.js"></script></body></html>
"#;

const CSS: &str = "#css { color: rgb(1, 2, 3); }\n";

const JS: &str = r#"document.getElementById("js").textContent = "js ran";
var css = document.getElementById("css");
css.textContent = "css color " + getComputedStyle(css).color;
var img = document.getElementById("img");
function seen() {
  document.getElementById("imgstate").textContent = "image " + img.naturalWidth + "x" + img.naturalHeight;
}
if (img.complete && img.naturalWidth) { seen(); } else { img.addEventListener("load", seen); }
"#;

/// A 3x2 red PNG, made here (zlib's stored blocks, so no compressor is needed).
fn png() -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
    }
    // Two rows, each the filter byte (none) then three red pixels.
    let row: Vec<u8> = std::iter::once(0).chain([0xff, 0, 0].repeat(3)).collect();
    let raw = row.repeat(2);
    // zlib: header, one final stored block, adler32.
    let mut z = vec![0x78, 0x01, 0x01];
    z.extend_from_slice(&(raw.len() as u16).to_le_bytes());
    z.extend_from_slice(&(!(raw.len() as u16)).to_le_bytes());
    z.extend_from_slice(&raw);
    let (mut a, mut b) = (1u32, 0u32);
    for &x in &raw {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    z.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&3u32.to_be_bytes());
    ihdr.extend_from_slice(&2u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(&mut png, b"IDAT", &z);
    chunk(&mut png, b"IEND", &[]);
    png
}

/// The base64 SHA-256 of the certificate's public key (its SPKI), as Chromium's
/// `--ignore-certificate-errors-spki-list` takes it: openssl's pipeline.
fn spki_hash(cert: &Path) -> String {
    berth_testkit::tools::require("openssl");
    let script = format!(
        "openssl x509 -in '{}' -pubkey -noout | openssl pkey -pubin -outform der \
         | openssl dgst -sha256 -binary | openssl base64 -A",
        cert.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hash = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(hash.len(), 44, "not a SHA-256 in base64: {hash:?}");
    hash
}

/// The net log's events of these types (by name), with their parameters.
fn net_events(log: &Value, name: &str) -> Vec<Value> {
    let code = &log["constants"]["logEventTypes"][name];
    log["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter(|e| &e["type"] == code)
                .map(|e| e["params"].clone())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn chromium_forced_onto_quic_loads_a_site_page_over_http3() {
    berth_testkit::tools::require("chromium");
    let certs = Certs::new("h3-chromium");
    let dir = support::root("chromium");
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), INDEX).unwrap();
    std::fs::write(site.join("style.css"), CSS).unwrap();
    std::fs::write(site.join("app.js"), JS).unwrap();
    std::fs::write(site.join("dot.png"), png()).unwrap();
    let mut berth = Berth::spawn(&[
        "serve",
        "--model",
        "evloop",
        "-A",
        "1",
        "-p",
        "0",
        "--tls-cert",
        certs.cert.to_str().unwrap(),
        "--tls-key",
        certs.key.to_str().unwrap(),
        "--http3",
        "--site",
        site.to_str().unwrap(),
        "--access-log",
    ]);
    let line = berth.line();
    let port = support::quic_port(&line);
    let profile = dir.join("profile");
    let net_log = dir.join("netlog.json");
    let origin = format!("127.0.0.1:{port}");
    let out = Command::new("chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-sync",
            "--enable-quic",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--origin-to-force-quic-on={origin}"))
        .arg(format!(
            "--ignore-certificate-errors-spki-list={}",
            spki_hash(&certs.cert)
        ))
        .arg(format!("--log-net-log={}", net_log.display()))
        // Time for the image's load event and the script, in virtual time.
        .arg("--virtual-time-budget=5000")
        .arg("--dump-dom")
        .arg(format!("https://{origin}/"))
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chromium failed ({}): {dom}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The page, its script run, its style applied, its image decoded.
    assert!(dom.contains("<title>berth over HTTP/3</title>"), "{dom}");
    assert!(dom.contains(">js ran<"), "{dom}");
    assert!(dom.contains(">css color rgb(1, 2, 3)<"), "{dom}");
    assert!(dom.contains(">image 3x2<"), "{dom}");

    // berth's access log: each resource came over HTTP/3, and nothing over TCP.
    berth.signal("TERM");
    let (status, _, err) = berth.finish(LIMIT);
    assert!(status.success(), "{status}: {err}");
    for path in ["/", "/style.css", "/app.js", "/dot.png"] {
        let want = format!("\"GET {path} HTTP/3\" 200 ");
        assert!(err.contains(&want), "no {want:?} in berth's log:\n{err}");
    }
    assert!(!err.contains(" HTTP/1.1\" "), "{err}");
    assert!(!err.contains(" HTTP/2.0\" "), "{err}");

    // Chromium's net log: a QUIC session to the port, and the HTTP/3 heads it decoded.
    let log: Value = serde_json::from_slice(&std::fs::read(&net_log).expect("the net log"))
        .expect("the net log is JSON");
    let sessions = net_events(&log, "QUIC_SESSION");
    assert!(
        sessions
            .iter()
            .any(|p| p["host"] == "127.0.0.1" && p["port"] == port),
        "no QUIC session to 127.0.0.1:{port}: {sessions:?}"
    );
    let heads = net_events(&log, "HTTP3_HEADERS_DECODED");
    let ok = heads
        .iter()
        .filter(|p| {
            p["headers"]
                .as_array()
                .is_some_and(|h| h.iter().any(|v| v == ":status: 200"))
        })
        .count();
    assert!(ok >= 4, "HTTP/3 heads with 200: {ok} of {heads:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
