//! The message engine over TLS (issue 16): a `tls://` listener beside a `tcp://` one, clients
//! verified against the test's CA, echo of small and held (multi-megabyte) messages, a relay
//! from a TLS client to a plain one and back, a handshake that never comes refused at the
//! handshake timeout, the certificate errors a listener reports, and a browser over `wss://`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use berth::msg::{Endpoint, Engine, EngineConfig};
use berth::net::tls::{TlsConnector, TlsStream};
use berth_testkit::certs::Certs;
use berth_testkit::msg::*;

fn tls_endpoint(certs: &Certs) -> Endpoint {
    Endpoint::parse(&format!(
        "tls://127.0.0.1:0?cert={}&key={}",
        certs.cert.display(),
        certs.key.display()
    ))
    .unwrap()
}

fn tls_client(certs: &Certs, e: &Endpoint) -> TlsStream<TcpStream> {
    berth_testkit::tls::connect(&certs.ca, &[], addr_of(e))
}

#[test]
fn tls_clients_echo_and_relay_with_plain_ones() {
    let certs = Certs::new("msg-tls");
    let server = echo(
        EngineConfig::default(),
        &[tls_endpoint(&certs), tcp_endpoint()],
    );
    assert!(server.endpoints[0]
        .to_string()
        .starts_with("tls://127.0.0.1:"));
    let (mut alice, answer) = hello(tls_client(&certs, &server.endpoints[0]), "alice");
    assert_eq!(answer, ok());
    let (mut bob, answer) = hello(tcp(addr_of(&server.endpoints[1])), "bob");
    assert_eq!(answer, ok());

    alice.write_all(&frame(b"ping")).unwrap();
    assert_eq!(
        read_frame(&mut alice).unwrap(),
        Frame::Data(b"ping".to_vec())
    );
    // Held whole (3 MB), then echoed, all of it encrypted.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 241) as u8).collect();
    alice.write_all(&frame(&big)).unwrap();
    assert_eq!(read_frame(&mut alice).unwrap(), Frame::Data(big));

    alice.write_all(&frame(b"@bob over tls")).unwrap();
    assert_eq!(
        read_frame(&mut bob).unwrap(),
        Frame::Data(b"@alice over tls".to_vec())
    );
    bob.write_all(&frame(b"@alice in clear")).unwrap();
    assert_eq!(
        read_frame(&mut alice).unwrap(),
        Frame::Data(b"@bob in clear".to_vec())
    );
}

#[test]
fn a_tls_handshake_that_never_comes_is_refused_at_the_handshake_timeout() {
    let certs = Certs::new("msg-tls-timeout");
    let config = EngineConfig {
        handshake_timeout: Duration::from_millis(500),
        ..EngineConfig::default()
    };
    let server = echo(config, &[tls_endpoint(&certs)]);
    let mut silent = tcp(addr_of(&server.endpoints[0]));
    let mut buf = [0u8; 64];
    // Closed by the server (whatever it tried to say, no plaintext refusal can reach a
    // TLS-less client), not given up on by the client's read timeout (10 s, 20 times the
    // handshake timeout).
    loop {
        match silent.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                assert!(
                    !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    "the server did not close a handshake that never came: {e}"
                );
                break;
            }
        }
    }
    // Others are still served.
    let (_c, answer) = hello(tls_client(&certs, &server.endpoints[0]), "after");
    assert_eq!(answer, ok());
}

#[test]
fn a_tls_listener_without_a_usable_certificate_is_refused() {
    let certs = Certs::new("msg-tls-bad");
    let mut engine = Engine::new(EngineConfig::default()).unwrap();
    let err = engine
        .listen(&Endpoint::parse("tls://127.0.0.1:0").unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("needs cert= and key="), "{err}");
    let wrong = Endpoint::parse(&format!(
        "tls://127.0.0.1:0?cert={}&key={}",
        certs.key.display(),
        certs.key.display()
    ))
    .unwrap();
    let err = engine.listen(&wrong).unwrap_err();
    assert!(err.to_string().contains("no certificate in it"), "{err}");
}

/// Mutual TLS identity: with `client-ca=`, a rule `NAME:cert` admits `NAME` only to a client
/// whose certificate (signed by that CA) carries `NAME` as its common name; other names need
/// no certificate.
#[test]
fn a_cert_rule_admits_a_name_only_with_a_certificate_naming_it() {
    let certs = Certs::new("msg-mtls");
    let endpoint = Endpoint::parse(&format!(
        "tls://127.0.0.1:0?cert={}&key={}&client-ca={}",
        certs.cert.display(),
        certs.key.display(),
        certs.ca.display()
    ))
    .unwrap();
    let mut config = EngineConfig::default();
    let (name, rule) = berth_proto::msg::policy::parse_rule("admin:cert").unwrap();
    config.policy.rules.insert(name, rule);
    let server = echo(config, &[endpoint]);
    let e = &server.endpoints[0];
    let (admin_cert, admin_key) = (certs.path("admin.pem"), certs.path("admin.key"));
    certs.issue("admin", &admin_cert, &admin_key, None);
    let (eve_cert, eve_key) = (certs.path("eve.pem"), certs.path("eve.key"));
    certs.issue("eve", &eve_cert, &eve_key, None);
    let with_identity = |cert: &std::path::Path, key: &std::path::Path| {
        let sock = tcp(addr_of(e));
        let mut tls = TlsConnector::with_identity(Some(&certs.ca), &[], cert, key)
            .unwrap()
            .connect("127.0.0.1", sock)
            .unwrap();
        tls.complete_handshake().unwrap();
        tls
    };

    let (mut admin, answer) = hello(with_identity(&admin_cert, &admin_key), "admin");
    assert_eq!(answer, ok());
    admin.write_all(&frame(b"hi")).unwrap();
    assert_eq!(read_frame(&mut admin).unwrap(), Frame::Data(b"hi".to_vec()));
    drop(admin);

    let (_, answer) = hello(tls_client(&certs, e), "admin");
    assert_eq!(
        answer,
        Frame::Control(
            "refused cert-refused name \"admin\" needs a TLS client certificate issued to it"
                .into()
        )
    );
    let (_, answer) = hello(with_identity(&eve_cert, &eve_key), "admin");
    assert!(
        matches!(&answer, Frame::Control(t) if t.starts_with("refused cert-refused")),
        "{answer:?}"
    );
    // Names without the rule need no certificate.
    let (_, answer) = hello(tls_client(&certs, e), "guest");
    assert_eq!(answer, ok());
}

/// Claims `name` over TLS presenting `identity` (certificate and key files), the server
/// verified against `server_ca`: the answer, or the TLS error that ended the connection (a
/// client certificate the server does not trust ends the handshake with an alert).
fn hello_as(
    server_ca: &std::path::Path,
    e: &Endpoint,
    identity: &(std::path::PathBuf, std::path::PathBuf),
    name: &str,
) -> Result<Frame, String> {
    let tls = berth_testkit::tls::connect_as(server_ca, (&identity.0, &identity.1), addr_of(e))?;
    let (_, answer) = try_hello(tls, name.as_bytes()).map_err(|e| e.to_string())?;
    Ok(answer)
}

/// Issue 29: a reload read the certificate and key again but never the client CA, which was
/// built once into the listener's configuration. Now every file is read again into a new
/// configuration, for every engine thread (two here, each with an acceptor of its own for the
/// listener naming its files, and one shared for `--tls-cert`); and when any file of any
/// listener fails, nothing changes anywhere: not the CA, not a certificate renewed beside it.
#[test]
fn a_reload_reads_the_client_ca_again_in_every_thread_or_keeps_every_old_file() {
    let old = Certs::new("msg-reload-ca-old");
    let new = Certs::new("msg-reload-ca-new");
    let ca_file = old.path("client-ca.pem");
    std::fs::copy(&old.ca, &ca_file).unwrap();
    let old_admin = (old.path("admin.pem"), old.path("admin.key"));
    old.issue("admin", &old_admin.0, &old_admin.1, None);
    let new_admin = (new.path("admin.pem"), new.path("admin.key"));
    new.issue("admin", &new_admin.0, &new_admin.1, None);
    let (own_cert, own_key) = (old.path("own.pem"), old.path("own.key"));
    old.issue("own", &own_cert, &own_key, None);
    let own = Endpoint::parse(&format!(
        "tls://127.0.0.1:0?cert={}&key={}&client-ca={}",
        own_cert.display(),
        own_key.display(),
        ca_file.display()
    ))
    .unwrap();
    let mut config = EngineConfig::default();
    let (name, rule) = berth_proto::msg::policy::parse_rule("admin:cert").unwrap();
    config.policy.rules.insert(name, rule);
    let settings = berth::net::tls::TlsSettings {
        alpn: Vec::new(),
        client_ca: Some(ca_file.clone()),
        ..berth::net::tls::TlsSettings::http(&old.cert, &old.key)
    };
    config.listen.transport =
        berth::net::Acceptor::Tls(berth::net::tls::TlsAcceptor::new(settings).unwrap());
    let shared = Endpoint::parse("tls://127.0.0.1:0").unwrap();
    let server =
        berth::msg::MsgServer::spawn(&[own, shared], config, 2, Duration::from_secs(1), |_| {
            berth::app::relay::EchoRelay::new(1 << 20)
        })
        .unwrap();
    let reloader = server.tls_reloader();
    let admitted = || Ok(ok());
    for e in &server.endpoints {
        assert_eq!(hello_as(&old.ca, e, &old_admin, "admin"), admitted());
        assert_ne!(hello_as(&old.ca, e, &new_admin, "admin"), admitted());
    }

    std::fs::copy(&new.ca, &ca_file).unwrap();
    let files = reloader.reload().unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        files
            .iter()
            .all(|f| f.contains(&format!("client CA {}", ca_file.display()))),
        "{files:?}"
    );
    // Whichever thread takes the connection.
    for _ in 0..10 {
        for e in &server.endpoints {
            assert_eq!(hello_as(&old.ca, e, &new_admin, "admin"), admitted());
            assert_ne!(hello_as(&old.ca, e, &old_admin, "admin"), admitted());
        }
    }

    // Renewed certificates beside a CA file that is no certificate: nothing changes.
    old.issue("renewed", &old.cert, &old.key, None);
    old.issue("own-renewed", &own_cert, &own_key, None);
    std::fs::write(&ca_file, "not a certificate").unwrap();
    let errors = reloader.reload().unwrap_err();
    assert!(
        errors
            .iter()
            .all(|e| e.to_string().contains("no certificate in it")),
        "{errors:?}"
    );
    for _ in 0..10 {
        for (e, cn) in server.endpoints.iter().zip(["own", "server"]) {
            assert_eq!(hello_as(&old.ca, e, &new_admin, "admin"), admitted());
            let mut plain = tls_client(&old, e);
            assert_eq!(plain.peer_common_name().as_deref(), Some(cn));
            plain.write_all(&frame(b"")).unwrap();
            assert_eq!(read_frame(&mut plain).unwrap(), ok());
        }
    }
    server.stop();
    server.join().unwrap();
}

/// `transport=tls` names the tls:// listener: a name with that rule is admitted over TLS and
/// refused over plain TCP on the same server; `transport=tcp` is plain TCP only.
#[test]
fn a_transport_rule_tells_tls_from_plain_tcp() {
    let certs = Certs::new("msg-transport");
    let mut config = EngineConfig::default();
    for rule in ["secret:transport=tls", "plain:transport=tcp"] {
        let (name, rule) = berth_proto::msg::policy::parse_rule(rule).unwrap();
        config.policy.rules.insert(name, rule);
    }
    let server = echo(config, &[tls_endpoint(&certs), tcp_endpoint()]);
    let (tls_e, tcp_e) = (&server.endpoints[0], &server.endpoints[1]);
    let refused =
        |f: &Frame| matches!(f, Frame::Control(t) if t.starts_with("refused transport-refused"));

    let (_, answer) = hello(tls_client(&certs, tls_e), "secret");
    assert_eq!(answer, ok());
    let (_, answer) = hello(tcp(addr_of(tcp_e)), "secret");
    assert!(refused(&answer), "{answer:?}");
    let (_, answer) = hello(tcp(addr_of(tcp_e)), "plain");
    assert_eq!(answer, ok());
    let (_, answer) = hello(tls_client(&certs, tls_e), "plain");
    assert!(refused(&answer), "{answer:?}");
}

#[test]
fn a_browser_over_wss_relays_with_a_plain_client() {
    use tungstenite::Message;
    let certs = Certs::new("msg-wss");
    let wss = Endpoint::parse(&format!(
        "wss://127.0.0.1:0/chat?cert={}&key={}",
        certs.cert.display(),
        certs.key.display()
    ))
    .unwrap();
    let server = echo(EngineConfig::default(), &[wss, tcp_endpoint()]);
    let url = server.endpoints[0].to_string();
    let url = url.split('?').next().unwrap().to_owned();
    assert!(
        url.starts_with("wss://127.0.0.1:") && url.ends_with("/chat"),
        "{url}"
    );
    let tls = tls_client(&certs, &server.endpoints[0]);
    let (mut alice, response) = tungstenite::client(url.as_str(), tls).unwrap();
    assert_eq!(response.status(), 101);
    alice.send(Message::text("alice")).unwrap();
    alice.send(Message::text("in?")).unwrap();
    assert_eq!(alice.read().unwrap(), Message::text("in?"));
    let (mut bob, answer) = hello(tcp(addr_of(&server.endpoints[1])), "bob");
    assert_eq!(answer, ok());
    bob.write_all(&frame(b"@alice to the browser")).unwrap();
    assert_eq!(alice.read().unwrap(), Message::text("@bob to the browser"));
    alice.send(Message::text("@bob encrypted")).unwrap();
    assert_eq!(
        read_frame(&mut bob).unwrap(),
        Frame::Data(b"@alice encrypted".to_vec())
    );
}
