//! `berth serve --tls-cert --tls-key` as a built binary (issue 16): certificate problems end
//! startup with exit 1 and the cause; the startup line says https; SIGHUP reloads the
//! certificate (new connections get it) and a reload that fails keeps the old one; curl (which
//! must be installed: .ci/run installs it) gets its answer over TLS 1.2 and 1.3.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use berth::net::tls::TlsConnector;
use berth_testkit::certs::Certs;
use berth_testkit::msg::try_hello;
use berth_testkit::per_model;
use common::{address_in, run_within, Berth};

const LIMIT: Duration = Duration::from_secs(30);

fn serve(certs: &Certs, model: &str) -> (Berth, SocketAddr) {
    let cert = certs.cert.to_str().unwrap();
    let key = certs.key.to_str().unwrap();
    let mut berth = Berth::spawn(&[
        "serve",
        "--model",
        model,
        "-p",
        "0",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
    ]);
    let line = berth.line();
    assert!(line.starts_with("berth listening on https://"), "{line}");
    (berth, address_in(&line))
}

/// One request over TLS; the answer's body and the common name of the server's certificate.
fn get(certs: &Certs, addr: SocketAddr) -> (String, Option<String>) {
    let mut tls = berth_testkit::tls::connect(&certs.ca, &[b"http/1.1"], addr);
    tls.write_all(b"GET /hello/world HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    tls.read_to_string(&mut answer).unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (body, tls.peer_common_name())
}

#[test]
fn certificate_problems_stop_startup_with_their_cause() {
    let certs = Certs::new("cli-bad");
    let (old_cert, old_key) = (certs.path("old.pem"), certs.path("old.key"));
    certs.issue("old", &old_cert, &old_key, Some((1999, 2000)));
    let (other_cert, other_key) = (certs.path("other.pem"), certs.path("other.key"));
    certs.issue("other", &other_cert, &other_key, None);
    let path = |p: &std::path::PathBuf| p.to_str().unwrap().to_owned();
    let cases = [
        (
            path(&certs.path("missing.pem")),
            path(&certs.key),
            "cannot read certificate",
        ),
        (
            path(&certs.cert),
            path(&certs.path("missing.key")),
            "cannot read private key",
        ),
        (path(&certs.key), path(&certs.key), "no certificate in it"),
        (
            path(&certs.cert),
            path(&other_key),
            "does not match the certificate",
        ),
        (
            path(&old_cert),
            path(&old_key),
            "the certificate expired on",
        ),
    ];
    for (cert, key, cause) in cases {
        let (status, _, err) = run_within(
            &["serve", "-p", "0", "--tls-cert", &cert, "--tls-key", &key],
            LIMIT,
        );
        assert_eq!(status.code(), Some(1), "{cert} {key}: {err}");
        assert!(
            err.contains("TLS: ") && err.contains(cause),
            "{cause}: {err}"
        );
    }
    // One without the other is a usage error.
    let (status, _, err) = run_within(&["serve", "--tls-cert", &path(&certs.cert)], LIMIT);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("--tls-key"), "{err}");
}

// In every model: those whose threads share the process, those that fork per connection
// from the master (forked), and those whose long-lived worker processes hold their own copy
// (prefork: renewed, a new worker before each old one drains). One test per model of the
// registry (`case::uring`): see `per_model!`.
berth::with_models!(per_model! { sighup_reloads_the_certificate_and_a_bad_reload_keeps_the_old });

fn sighup_reloads_the_certificate_and_a_bad_reload_keeps_the_old(model: berth::drive::Model) {
    reload_in(model.name());
}

fn reload_in(model: &str) {
    let certs = Certs::new(&format!("cli-reload-{model}"));
    let (mut berth, addr) = serve(&certs, model);
    assert_eq!(
        get(&certs, addr),
        ("Hello, World!".into(), Some("server".into()))
    );

    certs.issue("renewed", &certs.cert, &certs.key, None);
    berth.signal("HUP");
    let renewed = common::wait_for(LIMIT, || get(&certs, addr).1.as_deref() == Some("renewed"));
    assert!(
        renewed,
        "{model}: the new certificate was not served after SIGHUP"
    );
    // Every new connection, whichever worker takes it.
    for _ in 0..20 {
        assert_eq!(get(&certs, addr).1.as_deref(), Some("renewed"), "{model}");
    }

    std::fs::write(&certs.key, "not a key").unwrap();
    berth.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        get(&certs, addr),
        ("Hello, World!".into(), Some("renewed".into()))
    );

    berth.signal("TERM");
    let (status, _, err) = berth.finish(LIMIT);
    assert!(status.success(), "{err}");
    assert!(err.contains("certificate reloaded from"), "{err}");
    assert!(
        err.contains("certificate not reloaded, the one in use stays")
            && err.contains("no private key"),
        "{err}"
    );
}

// Plain HTTP sent to a TLS port (issue 44) is answered as nginx answers it, in every model:
// 400 and its reason in clear, and a debug line naming the client; HTTPS on the same port
// goes on as before.
berth::with_models!(per_model! { plain_http_to_the_tls_port_is_answered_400 });

fn plain_http_to_the_tls_port_is_answered_400(model: berth::drive::Model) {
    berth_testkit::require("curl");
    let certs = Certs::new(&format!("cli-plain-{model}", model = model.name()));
    let (cert, key) = (certs.cert.to_str().unwrap(), certs.key.to_str().unwrap());
    let mut berth = Berth::spawn(&[
        "serve",
        "-m",
        model.name(),
        "-p",
        "0",
        "-A",
        "1",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--log-level",
        "info,berth::net=debug",
    ]);
    let addr = address_in(&berth.line());
    // curl as someone who typed http:// for an https:// site.
    let answer = plain_curl(addr, "/hello/world", &[]);
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{model}: {answer}"
    );
    assert!(
        answer.ends_with("\r\n\r\nplain HTTP request sent to an HTTPS port\n"),
        "{model}: {answer}"
    );
    // The same port still speaks TLS.
    assert_eq!(get(&certs, addr).0, "Hello, World!", "{model}");
    berth.signal("TERM");
    let (status, _, err) = berth.finish(LIMIT);
    assert!(status.success(), "{model}: {err}");
    assert!(
        err.contains("127.0.0.1:") && err.contains("plain HTTP request sent to an HTTPS port"),
        "{model}: no debug line: {err}"
    );
}

/// What curl, given `http://` for a TLS port, prints of the answer (`-i`: head and body),
/// with `extra` options.
fn plain_curl(addr: SocketAddr, target: &str, extra: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "10"])
        .args(extra)
        .arg(format!("http://{addr}{target}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `--redirect-https` (issue 44): plain HTTP to the TLS port is sent to the same host, port
/// and target over https:// with 308 (the method kept), in a readiness model and a blocking
/// one; a request whose Host is no host still gets the 400; HTTPS on the port goes on. Without
/// a TLS listener the flag is a usage error.
#[test]
fn redirect_https_sends_plain_http_to_the_same_place_over_https() {
    berth_testkit::require("curl");
    for model in ["evloop", "threaded"] {
        let certs = Certs::new(&format!("cli-redirect-{model}"));
        let (cert, key) = (certs.cert.to_str().unwrap(), certs.key.to_str().unwrap());
        let mut berth = Berth::spawn(&[
            "serve",
            "-m",
            model,
            "-p",
            "0",
            "-A",
            "1",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
            "--redirect-https",
        ]);
        let addr = address_in(&berth.line());
        let curl = |extra: &[&str]| plain_curl(addr, "/hello/world?x=1", extra);
        let answer = curl(&[]);
        assert!(
            answer.starts_with("HTTP/1.1 308 Permanent Redirect\r\n"),
            "{model}: {answer}"
        );
        let location = format!("Location: https://{addr}/hello/world?x=1\r\n");
        assert!(answer.contains(&location), "{model}: {answer}");
        // A POST keeps its method through a 308; the Host the client named is the one used.
        let answer = curl(&["-X", "POST", "-d", "x", "-H", "Host: example.test:8443"]);
        assert!(
            answer.contains("Location: https://example.test:8443/hello/world?x=1\r\n"),
            "{model}: {answer}"
        );
        // A Host that is no host (a space, a slash) could make the Location point elsewhere.
        for host in ["Host: a b", "Host: evil.test/path", "Host:"] {
            let answer = curl(&["-H", host]);
            assert!(
                answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
                "{model} {host}: {answer}"
            );
        }
        assert_eq!(get(&certs, addr).0, "Hello, World!", "{model}");
        berth.signal("TERM");
        let (status, _, err) = berth.finish(LIMIT);
        assert!(status.success(), "{model}: {err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "-p", "0", "--redirect-https"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // clap's usage error: the cause on the first line, then the usage.
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.contains("--redirect-https is for TLS listeners"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// A `tls://` listener of the message protocol speaks no HTTP: plain bytes to it get no HTTP
/// answer (its ALPN offers none).
#[test]
fn a_msg_tls_listener_answers_no_http() {
    let certs = Certs::new("cli-plain-msg");
    let endpoint = format!(
        "tls://127.0.0.1:0?cert={}&key={}",
        certs.cert.display(),
        certs.key.display()
    );
    let mut berth = Berth::spawn(&["msg", "serve", "--listen", &endpoint, "-A", "1"]);
    let line = berth.line();
    let at = line.find("tls://").expect(&line) + "tls://".len();
    let addr: SocketAddr = line[at..]
        .split(|c: char| c.is_whitespace() || c == '?' || c == ',' || c == ')')
        .next()
        .unwrap()
        .parse()
        .expect(&line);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
}

#[test]
fn curl_gets_its_answer_over_tls_1_2_and_1_3() {
    berth_testkit::require("curl");
    let certs = Certs::new("cli-curl");
    let (mut berth, addr) = serve(&certs, "evloop");
    let url = format!("https://127.0.0.1:{}/hello/world", addr.port());
    for version in [&["--tlsv1.2", "--tls-max", "1.2"][..], &["--tlsv1.3"][..]] {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&certs.ca)
            .args(version)
            .arg(&url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{version:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "Hello, World!",
            "{version:?}"
        );
    }
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());
}

/// `berth msg serve` with a tls:// endpoint, and `berth msg send` to it: verified against the
/// CA, refused without one (or with the wrong one), or `--insecure`.
#[test]
fn msg_send_speaks_to_a_tls_listener() {
    let certs = Certs::new("cli-msg");
    let cert = certs.cert.to_str().unwrap();
    let key = certs.key.to_str().unwrap();
    let mut server = Berth::spawn(&[
        "msg",
        "serve",
        "--listen",
        "tls://127.0.0.1:0",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
    ]);
    let line = server.line();
    let endpoint = line
        .trim()
        .strip_prefix("berth msg listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    assert!(endpoint.starts_with("tls://127.0.0.1:"), "{endpoint}");
    let ca = certs.ca.to_str().unwrap();
    let (status, out, err) = run_within(&["msg", "send", &endpoint, "--ca", ca, "hello"], LIMIT);
    assert!(status.success(), "{err}");
    assert_eq!(out, "hello\n");
    let (status, out, _) = run_within(&["msg", "send", &endpoint, "--insecure", "x"], LIMIT);
    assert!(status.success());
    assert_eq!(out, "x\n");
    let (status, _, err) = run_within(&["msg", "send", &endpoint, "x"], LIMIT);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("needs ?ca=FILE"), "{err}");
    let other = Certs::new("cli-msg-other");
    let (status, _, err) = run_within(
        &[
            "msg",
            "send",
            &endpoint,
            "--ca",
            other.ca.to_str().unwrap(),
            "x",
        ],
        LIMIT,
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("certificate"), "{err}");
    server.signal("TERM");
    assert!(server.wait(LIMIT).success());
}

/// The common name of the certificate a msg tls:// listener at `endpoint` serves, through a
/// verified handshake.
fn msg_cert_name(certs: &Certs, endpoint: &str) -> Option<String> {
    let place = endpoint.strip_prefix("tls://")?;
    let addr: SocketAddr = place.split('?').next()?.parse().ok()?;
    let connector = TlsConnector::new(Some(&certs.ca), &[]).ok()?;
    let sock = TcpStream::connect(addr).ok()?;
    sock.set_read_timeout(Some(LIMIT)).ok()?;
    let mut tls = connector.connect("127.0.0.1", sock).ok()?;
    tls.complete_handshake().ok()?;
    tls.peer_common_name()
}

/// SIGHUP makes `berth msg serve` read the certificates of its tls:// listeners again — the
/// global `--tls-cert` and an endpoint's own `?cert=`, in every engine thread — and a reload
/// that fails keeps the certificate in use, saying why.
#[test]
fn sighup_reloads_the_certificates_of_msg_listeners() {
    let certs = Certs::new("cli-msg-reload");
    let (own_cert, own_key) = (certs.path("own.pem"), certs.path("own.key"));
    certs.issue("own", &own_cert, &own_key, None);
    let own = format!(
        "tls://127.0.0.1:0?cert={}&key={}",
        own_cert.display(),
        own_key.display()
    );
    let mut server = Berth::spawn(&[
        "msg",
        "serve",
        "-A",
        "2",
        "--listen",
        "tls://127.0.0.1:0",
        "--listen",
        &own,
        "--tls-cert",
        certs.cert.to_str().unwrap(),
        "--tls-key",
        certs.key.to_str().unwrap(),
    ]);
    let line = server.line();
    let endpoints: Vec<String> = line
        .trim()
        .strip_prefix("berth msg listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .split(' ')
        .map(String::from)
        .collect();
    assert_eq!(endpoints.len(), 2, "{line}");
    assert_eq!(
        msg_cert_name(&certs, &endpoints[0]).as_deref(),
        Some("server")
    );
    assert_eq!(msg_cert_name(&certs, &endpoints[1]).as_deref(), Some("own"));

    certs.issue("renewed", &certs.cert, &certs.key, None);
    certs.issue("own-renewed", &own_cert, &own_key, None);
    server.signal("HUP");
    let renewed = common::wait_for(LIMIT, || {
        msg_cert_name(&certs, &endpoints[0]).as_deref() == Some("renewed")
            && msg_cert_name(&certs, &endpoints[1]).as_deref() == Some("own-renewed")
    });
    assert!(renewed, "the new certificates were not served after SIGHUP");
    // Every new connection, whichever engine thread takes it.
    for _ in 0..20 {
        assert_eq!(
            msg_cert_name(&certs, &endpoints[0]).as_deref(),
            Some("renewed")
        );
        assert_eq!(
            msg_cert_name(&certs, &endpoints[1]).as_deref(),
            Some("own-renewed")
        );
    }

    std::fs::write(&own_key, "not a key").unwrap();
    server.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        msg_cert_name(&certs, &endpoints[1]).as_deref(),
        Some("own-renewed")
    );

    server.signal("TERM");
    let (status, _, err) = server.finish(LIMIT);
    assert!(status.success(), "{err}");
    assert!(
        err.contains("SIGHUP received: read again and in use for new connections: certificate"),
        "{err}"
    );
    assert!(
        err.contains("nothing reloaded, every tls:// listener keeps the files it had")
            && err.contains("no private key"),
        "{err}"
    );
}

/// Claims `name` on the msg tls:// listener at `endpoint` presenting `cert` and `key` (the
/// server verified against `server_ca`): the server's answer (`OK`, or a refusal's control
/// payload), or the TLS error that ended the connection (a client certificate the server does
/// not trust ends the handshake with an alert).
fn msg_hello_as(
    server_ca: &std::path::Path,
    endpoint: &str,
    (cert, key): (&std::path::Path, &std::path::Path),
    name: &str,
) -> Result<String, String> {
    let place = endpoint.strip_prefix("tls://").unwrap();
    let addr: SocketAddr = place.split('?').next().unwrap().parse().unwrap();
    let tls = berth_testkit::tls::connect_as(server_ca, (cert, key), addr)?;
    let (_, answer) = try_hello(tls, name.as_bytes()).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(answer.payload()).into_owned())
}

/// Issue 29: SIGHUP did not read `--client-ca` again. After the CA file was replaced and
/// SIGHUP sent, a certificate from the old CA still got the name bound to it (`NAME:cert`),
/// and one from the new CA did not, while the log said "certificate reloaded". Now every file
/// of a tls:// listener is read again, in every engine thread; a reload with a bad file keeps
/// the whole old set, and the log names the files and the cause.
#[test]
fn sighup_reads_the_client_ca_again() {
    let old = Certs::new("cli-client-ca-old");
    let new = Certs::new("cli-client-ca-new");
    let ca_file = old.path("client-ca.pem");
    std::fs::copy(&old.ca, &ca_file).unwrap();
    let old_admin = (old.path("admin.pem"), old.path("admin.key"));
    old.issue("admin", &old_admin.0, &old_admin.1, None);
    let new_admin = (new.path("admin.pem"), new.path("admin.key"));
    new.issue("admin", &new_admin.0, &new_admin.1, None);
    let mut server = Berth::spawn(&[
        "msg",
        "serve",
        "-A",
        "2",
        "--listen",
        "tls://127.0.0.1:0",
        "--tls-cert",
        old.cert.to_str().unwrap(),
        "--tls-key",
        old.key.to_str().unwrap(),
        "--client-ca",
        ca_file.to_str().unwrap(),
        "--rule",
        "admin:cert",
    ]);
    let line = server.line();
    let endpoint = line
        .trim()
        .strip_prefix("berth msg listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    let as_old = || msg_hello_as(&old.ca, &endpoint, (&old_admin.0, &old_admin.1), "admin");
    let as_new = || msg_hello_as(&old.ca, &endpoint, (&new_admin.0, &new_admin.1), "admin");
    assert_eq!(as_old(), Ok("OK".into()));
    assert_ne!(as_new(), Ok("OK".into()));

    std::fs::copy(&new.ca, &ca_file).unwrap();
    server.signal("HUP");
    assert!(
        common::wait_for(LIMIT, || as_new() == Ok("OK".into())),
        "a certificate of the new client CA was not taken after SIGHUP: {:?}",
        as_new()
    );
    // In every engine thread, for every new connection.
    for _ in 0..20 {
        assert_eq!(as_new(), Ok("OK".into()));
        let old_answer = as_old();
        assert_ne!(
            old_answer,
            Ok("OK".into()),
            "the old CA still binds the name"
        );
    }

    // A client CA that cannot be read: nothing is reloaded (not the renewed certificate
    // either), and the log says which file and why.
    old.issue("renewed", &old.cert, &old.key, None);
    std::fs::write(&ca_file, "not a certificate").unwrap();
    server.signal("HUP");
    server.signal("TERM");
    let (status, _, err) = server.finish(LIMIT);
    assert!(status.success(), "{err}");
    assert!(
        err.contains("SIGHUP received: read again")
            && err.contains(&format!("client CA {}", ca_file.display())),
        "{err}"
    );
    assert!(
        err.contains(
            "SIGHUP received: nothing reloaded, every tls:// listener keeps the files it had"
        ) && err.contains("no certificate in it"),
        "{err}"
    );
}

/// A response that ends the connection ends the TLS stream properly: Python's `ssl`, told not
/// to forgive a missing close_notify (`suppress_ragged_eofs=False`), reads the whole answer
/// and then a clean end, in every model.
#[test]
fn a_closing_response_ends_with_close_notify() {
    berth_testkit::require("python3");
    let certs = Certs::new("cli-close-notify");
    let script = r#"
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
raw = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10)
s = ctx.wrap_socket(raw, server_hostname="127.0.0.1", suppress_ragged_eofs=False)
s.sendall(b"GET /hello/world HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
data = b""
while True:
    chunk = s.recv(65536)  # raises SSLEOFError if the stream ends without close_notify
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode())
"#;
    for model in berth::drive::Model::ALL.map(berth::drive::Model::name) {
        let (mut berth, addr) = serve(&certs, model);
        let out = Command::new("python3")
            .args(["-c", script])
            .arg(&certs.ca)
            .arg(addr.port().to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{model}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer = String::from_utf8_lossy(&out.stdout);
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("Hello, World!"),
            "{model}: {answer}"
        );
        berth.signal("TERM");
        assert!(berth.wait(LIMIT).success(), "{model}");
    }
}

/// `--http-port`: a plain listener beside HTTPS that redirects (308, same host and target) by
/// default, or serves the same application with `--http-mode serve`.
#[test]
fn the_plain_http_port_redirects_or_serves() {
    let certs = Certs::new("cli-plain");
    let (cert, key) = (certs.cert.to_str().unwrap(), certs.key.to_str().unwrap());
    let http_port = common::free_port().to_string();
    let mut berth = Berth::spawn(&[
        "serve",
        "-p",
        "0",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--http-port",
        &http_port,
    ]);
    let line = berth.line();
    assert!(
        line.contains("plain http on") && line.contains("redirects to https"),
        "{line}"
    );
    let https = address_in(&line);
    let plain: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let mut s = TcpStream::connect(plain).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(b"POST /reverse?x=1 HTTP/1.1\r\nHost: localhost:1234\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 308 Permanent Redirect\r\n"),
        "{answer}"
    );
    let location = format!(
        "Location: https://localhost:{}/reverse?x=1\r\n",
        https.port()
    );
    assert!(answer.contains(&location), "{answer}");
    // The HTTPS side is as before.
    assert_eq!(get(&certs, https).0, "Hello, World!");
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());

    let http_port = common::free_port().to_string();
    let mut berth = Berth::spawn(&[
        "serve",
        "-p",
        "0",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--http-port",
        &http_port,
        "--http-mode",
        "serve",
    ]);
    let line = berth.line();
    assert!(line.contains("serves the same"), "{line}");
    let plain: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let answer = common::get(plain, "/hello/world");
    assert!(answer.ends_with("Hello, World!"), "{answer}");
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());
}

/// `berth bench https://`: keep-alive, pipelined and a connection per request (a handshake
/// each), every response counted, none lost; verified with `--ca`, and a wrong CA fails every
/// connection rather than measuring anything.
#[test]
fn bench_measures_https() {
    let certs = Certs::new("cli-bench");
    let (mut berth, addr) = serve(&certs, "evloop");
    let url = format!("https://127.0.0.1:{}/hello/world", addr.port());
    let ca = certs.ca.to_str().unwrap().to_owned();
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["bench", url.as_str(), "-c", "4", "-t", "1", "--json"];
        args.extend_from_slice(extra);
        let (status, out, err) = run_within(&args, LIMIT);
        assert!(status.success(), "{args:?}: {err}");
        serde_json::from_str(&out).unwrap()
    };
    for extra in [
        &["-n", "400"][..],
        &["-n", "400", "--pipeline", "8"][..],
        &["-n", "60", "--no-keepalive"][..],
        &["-n", "100", "--ca", &ca][..],
    ] {
        let r = run(extra);
        let want = extra[1].parse::<u64>().unwrap();
        assert_eq!(r["status"]["200"], want, "{extra:?}: {r}");
        assert_eq!(r["requests"], want, "{extra:?}: {r}");
    }
    let other = Certs::new("cli-bench-other");
    let (status, _, err) = run_within(
        &[
            "bench",
            &url,
            "-n",
            "20",
            "--ca",
            other.ca.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("was answered"), "{err}");
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());
}

/// RSA keys as well as ECDSA: a 2048-bit RSA certificate with its key in PKCS#8 and in PKCS#1
/// ("BEGIN RSA PRIVATE KEY") form, made by `openssl`, served and verified by Python's `ssl`.
#[test]
fn rsa_keys_in_pkcs8_and_pkcs1_are_served() {
    berth_testkit::require("openssl");
    berth_testkit::require("python3");
    let certs = Certs::new("cli-rsa");
    let (cert, pkcs8, pkcs1) = (
        certs.path("rsa.pem"),
        certs.path("rsa-pkcs8.key"),
        certs.path("rsa-pkcs1.key"),
    );
    let ok = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&pkcs8)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let ok = Command::new("openssl")
        .args(["rsa", "-traditional", "-in"])
        .arg(&pkcs8)
        .arg("-out")
        .arg(&pkcs1)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(std::fs::read_to_string(&pkcs1)
        .unwrap()
        .contains("BEGIN RSA PRIVATE KEY"));
    let script = r#"
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
with socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10) as raw:
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(b"GET /hello/world HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        sys.stdout.write(s.version() + " " + data.decode().split("\r\n\r\n", 1)[1])
"#;
    for key in [&pkcs8, &pkcs1] {
        let mut berth = Berth::spawn(&[
            "serve",
            "-p",
            "0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ]);
        let addr = address_in(&berth.line());
        let out = Command::new("python3")
            .args(["-c", script])
            .arg(&cert)
            .arg(addr.port().to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            key.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "TLSv1.3 Hello, World!",
            "{}",
            key.display()
        );
        berth.signal("TERM");
        assert!(berth.wait(LIMIT).success());
    }
}

/// `--tls-key-password` (issue 43): an encrypted PKCS#8 key (`openssl pkcs8 -topk8`) is served
/// with it; without it startup stops (exit 1) saying the key is encrypted and how to decrypt
/// it; with a wrong one, saying so.
#[test]
fn an_encrypted_key_needs_its_password() {
    let certs = Certs::new("cli-encrypted");
    let encrypted = certs.path("encrypted.pem");
    let out = Command::new("openssl")
        .args([
            "pkcs8",
            "-topk8",
            "-v2",
            "aes-256-cbc",
            "-passout",
            "pass:sesame",
            "-in",
        ])
        .arg(&certs.key)
        .arg("-out")
        .arg(&encrypted)
        .output()
        .expect("this test needs the openssl command");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cert = certs.cert.to_str().unwrap();
    let key = encrypted.to_str().unwrap();
    let (status, _, err) = run_within(
        &["serve", "-p", "0", "--tls-cert", cert, "--tls-key", key],
        LIMIT,
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("the private key is encrypted (ENCRYPTED PRIVATE KEY)")
            && err.contains("--tls-key-password")
            && err.contains("openssl pkey -in"),
        "{err}"
    );
    let (status, _, err) = run_within(
        &[
            "serve",
            "-p",
            "0",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
            "--tls-key-password",
            "nope",
        ],
        LIMIT,
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("wrong password"), "{err}");
    let mut berth = Berth::spawn(&[
        "serve",
        "-p",
        "0",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--tls-key-password",
        "sesame",
    ]);
    let line = berth.line();
    assert!(line.starts_with("berth listening on https://"), "{line}");
    let (body, _) = get(&certs, address_in(&line));
    assert_eq!(body, "Hello, World!");
}
