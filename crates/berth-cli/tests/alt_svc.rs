//! `Alt-Svc` (issue 42): with `--http3`, every answer over a TLS listener (HTTP/1.1 and
//! HTTP/2) advertises its UDP twin, `h3=":PORT"; ma=86400`, so that browsers move over to
//! HTTP/3 by themselves; `--alt-svc off` serves HTTP/3 without saying so; a plain listener and
//! a server without `--http3` never say it. Asked with curl over real sockets, as a browser's
//! first request would be (`curl -sk -D -`).

mod common;

use std::net::SocketAddr;
use std::process::Command;

use berth_testkit::certs::Certs;
use common::{run_within, Berth, LIMIT};

/// `https://` and `http://` addresses in a startup line, in order, with their scheme.
fn addresses(line: &str) -> Vec<(String, SocketAddr)> {
    line.split_whitespace()
        .filter_map(|word| {
            let (scheme, rest) = word.split_once("://")?;
            let addr = rest.trim_end_matches([',', ')', ';']).parse().ok()?;
            matches!(scheme, "http" | "https").then(|| (scheme.to_owned(), addr))
        })
        .collect()
}

/// The head curl got for `GET /hello/world` at `url` (`--http1.1` or `--http2`), lower-cased.
fn head(url: &str, version: &str) -> String {
    berth_testkit::tools::require("curl");
    let out = Command::new("curl")
        .args(["-sk", "-D", "-", "-o", "/dev/null", "--max-time", "10"])
        .arg(version)
        .arg(format!("{url}/hello/world"))
        .output()
        .expect("run curl");
    assert!(out.status.success(), "curl {version} {url}: {out:?}");
    String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
}

/// The `alt-svc` line of a head, if any.
fn alt_svc(head: &str) -> Option<&str> {
    head.lines()
        .find_map(|l| l.strip_prefix("alt-svc:"))
        .map(str::trim)
}

/// `berth serve --model evloop -A 1` with the test certificate and `extra`; its startup line.
fn serve(certs: &Certs, extra: &[&str]) -> (Berth, String) {
    let mut args = vec![
        "serve",
        "--model",
        "evloop",
        "-A",
        "1",
        "--tls-cert",
        certs.cert.to_str().unwrap(),
        "--tls-key",
        certs.key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut berth = Berth::spawn(&args);
    let line = berth.line();
    assert!(line.starts_with("berth listening on "), "{line}");
    (berth, line)
}

#[test]
fn answers_over_tls_advertise_the_http3_twin_and_plain_ones_do_not() {
    let certs = Certs::new("alt-svc-on");
    let (mut berth, line) = serve(
        &certs,
        &[
            "--listen",
            "tls://127.0.0.1:0",
            "--listen",
            "tcp://127.0.0.1:0",
            "--http3",
        ],
    );
    let found = addresses(&line);
    let tls = found
        .iter()
        .find(|(s, _)| s == "https")
        .unwrap_or_else(|| panic!("no https:// in {line}"))
        .1;
    let plain = found
        .iter()
        .find(|(s, _)| s == "http")
        .unwrap_or_else(|| panic!("no http:// in {line}"))
        .1;
    // Port 0: the bound port, which the twin shares.
    assert!(line.contains(&format!("quic://{tls}")), "{line}");
    let want = format!("h3=\":{}\"; ma=86400", tls.port());
    for version in ["--http1.1", "--http2"] {
        let got = head(&format!("https://{tls}"), version);
        assert_eq!(alt_svc(&got), Some(want.as_str()), "{version}: {got}");
        // Once per answer, and again on the next one (keep-alive or not).
        assert_eq!(got.matches("alt-svc:").count(), 1, "{version}: {got}");
        let again = head(&format!("https://{tls}"), version);
        assert_eq!(alt_svc(&again), Some(want.as_str()), "{version}: {again}");
    }
    // HTTP/2 says so in its own spelling.
    assert!(head(&format!("https://{tls}"), "--http2").starts_with("http/2 200"));
    // The plain listener of the same server has no twin to advertise.
    let got = head(&format!("http://{plain}"), "--http1.1");
    assert!(got.starts_with("http/1.1 200"), "{got}");
    assert_eq!(alt_svc(&got), None, "{got}");
    berth.kill();
}

#[test]
fn alt_svc_off_serves_http3_without_advertising_it() {
    let certs = Certs::new("alt-svc-off");
    let (mut berth, line) = serve(&certs, &["-p", "0", "--http3", "--alt-svc", "off"]);
    let tls = addresses(&line)[0].1;
    // The twin is there all the same.
    assert!(line.contains(&format!("quic://{tls}")), "{line}");
    for version in ["--http1.1", "--http2"] {
        let got = head(&format!("https://{tls}"), version);
        assert!(got.contains(" 200"), "{version}: {got}");
        assert_eq!(alt_svc(&got), None, "{version}: {got}");
    }
    berth.kill();
}

#[test]
fn without_http3_nothing_is_advertised() {
    let certs = Certs::new("alt-svc-none");
    let (mut berth, line) = serve(&certs, &["-p", "0"]);
    let tls = addresses(&line)[0].1;
    assert!(!line.contains("quic://"), "{line}");
    for version in ["--http1.1", "--http2"] {
        let got = head(&format!("https://{tls}"), version);
        assert!(got.contains(" 200"), "{version}: {got}");
        assert_eq!(alt_svc(&got), None, "{version}: {got}");
    }
    berth.kill();
    // --alt-svc is --http3's: alone it is a usage error.
    let (status, _, err) = run_within(
        &[
            "serve",
            "-p",
            "0",
            "--tls-cert",
            certs.cert.to_str().unwrap(),
            "--tls-key",
            certs.key.to_str().unwrap(),
            "--alt-svc",
            "on",
        ],
        LIMIT,
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("--http3"), "{err}");
}
