//! The TLS transport over real sockets (issue 16): certificates refused at startup with their
//! cause, a handshake and echo over blocking sockets with the certificate verified, TLS 1.2
//! and 1.3, ALPN, session resumption, and a certificate reload (and a failed one).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use berth::net::tls::{KeyPassword, TlsAcceptor, TlsConnector, TlsSettings};
use berth_testkit::certs::Certs;

/// An echo server over TLS on a blocking socket, one connection at a time, until `n`
/// connections have been served.
fn echo_server(acceptor: TlsAcceptor, n: usize) -> (std::net::SocketAddr, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let t = thread::spawn(move || {
        for _ in 0..n {
            let (sock, _) = listener.accept().unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut tls = acceptor.accept(sock).unwrap();
            let mut buf = [0u8; 4096];
            loop {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => {
                        if tls.write_all(&buf[..k]).and_then(|_| tls.flush()).is_err() {
                            break;
                        }
                    }
                }
            }
        }
    });
    (addr, t)
}

fn connect(
    connector: &TlsConnector,
    addr: std::net::SocketAddr,
) -> berth::net::tls::TlsStream<TcpStream> {
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    connector.connect("127.0.0.1", sock).unwrap()
}

fn roundtrip(tls: &mut berth::net::tls::TlsStream<TcpStream>, msg: &[u8]) {
    tls.write_all(msg).unwrap();
    tls.flush().unwrap();
    let mut back = vec![0u8; msg.len()];
    tls.read_exact(&mut back).unwrap();
    assert!(back == msg);
}

#[test]
fn an_echo_over_tls_is_verified_negotiates_alpn_and_resumes() {
    let certs = Certs::new("echo");
    let acceptor = TlsAcceptor::new(TlsSettings::http(&certs.cert, &certs.key)).unwrap();
    let (addr, server) = echo_server(acceptor, 3);
    let connector = TlsConnector::new(Some(&certs.ca), &[b"http/1.1"]).unwrap();

    let mut first = connect(&connector, addr);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    roundtrip(&mut first, b"hello over tls");
    roundtrip(&mut first, &big);
    assert_eq!(first.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(first.protocol_version(), Some("TLSv1.3"));
    assert!(!first.resumed());
    drop(first);

    // The same client again: the session resumes (a ticket or the server's cache).
    let mut second = connect(&connector, addr);
    roundtrip(&mut second, b"again");
    assert!(second.resumed(), "the second handshake did not resume");
    drop(second);

    // A client that does not trust the CA fails the handshake.
    let other = Certs::new("other-ca");
    let stranger = TlsConnector::new(Some(&other.ca), &[]).unwrap();
    let mut refused = connect(&stranger, addr);
    let err = refused
        .write_all(b"x")
        .and_then(|_| refused.flush())
        .and_then(|_| {
            let mut b = [0u8; 1];
            refused.read_exact(&mut b)
        });
    assert!(err.is_err(), "an untrusted certificate was accepted");
    drop(refused);
    server.join().unwrap();
}

#[test]
fn tls_1_2_clients_are_served() {
    let certs = Certs::new("tls12");
    let acceptor = TlsAcceptor::new(TlsSettings::http(&certs.cert, &certs.key)).unwrap();
    let (addr, server) = echo_server(acceptor, 1);
    let connector = TlsConnector::tls12_only(Some(&certs.ca), &[]).unwrap();
    let mut c = connect(&connector, addr);
    roundtrip(&mut c, b"twelve");
    assert_eq!(c.protocol_version(), Some("TLSv1.2"));
    drop(c);
    server.join().unwrap();
}

#[test]
fn bad_certificates_are_refused_with_their_cause() {
    let certs = Certs::new("bad");
    let err = |cert: &std::path::Path, key: &std::path::Path| {
        TlsAcceptor::new(TlsSettings::http(cert, key))
            .unwrap_err()
            .to_string()
    };
    let missing = certs.path("missing.pem");
    let e = err(&missing, &certs.key);
    assert!(
        e.starts_with("cannot read certificate") && e.contains("No such file"),
        "{e}"
    );
    let e = err(&certs.dir, &certs.key);
    assert!(e.starts_with("cannot read certificate"), "{e}");
    let e = err(&certs.key, &certs.key);
    assert!(e.contains("no certificate in it"), "{e}");
    let e = err(&certs.cert, &certs.cert);
    assert!(e.contains("no private key in it"), "{e}");

    // Another key than the certificate's.
    let (other_cert, other_key) = (certs.path("other.pem"), certs.path("other.key"));
    certs.issue("other", &other_cert, &other_key, None);
    let e = err(&certs.cert, &other_key);
    assert!(e.contains("does not match the certificate"), "{e}");

    let (old_cert, old_key) = (certs.path("old.pem"), certs.path("old.key"));
    certs.issue("old", &old_cert, &old_key, Some((1999, 2000)));
    let e = err(&old_cert, &old_key);
    assert!(e.contains("the certificate expired on"), "{e}");
    let (new_cert, new_key) = (certs.path("new.pem"), certs.path("new.key"));
    certs.issue("new", &new_cert, &new_key, Some((2090, 2100)));
    let e = err(&new_cert, &new_key);
    assert!(e.contains("not valid before"), "{e}");
}

#[test]
fn a_reload_serves_the_new_certificate_and_a_failed_one_keeps_the_old() {
    let certs = Certs::new("reload");
    let acceptor = TlsAcceptor::new(TlsSettings::http(&certs.cert, &certs.key)).unwrap();
    let (addr, server) = echo_server(acceptor.clone(), 3);
    let connector = TlsConnector::new(Some(&certs.ca), &[]).unwrap();
    let seen = |c: &berth::net::tls::TlsStream<TcpStream>| c.peer_common_name();

    let mut a = connect(&connector, addr);
    roundtrip(&mut a, b"a");
    assert_eq!(seen(&a).as_deref(), Some("server"));
    drop(a);

    certs.issue("renewed", &certs.cert, &certs.key, None);
    acceptor.reload().unwrap();
    // A fresh client: no session to resume, so the certificate is sent.
    let fresh = TlsConnector::new(Some(&certs.ca), &[]).unwrap();
    let mut b = connect(&fresh, addr);
    roundtrip(&mut b, b"b");
    assert_eq!(seen(&b).as_deref(), Some("renewed"));
    drop(b);

    std::fs::write(&certs.cert, "not a certificate").unwrap();
    let e = acceptor.reload().unwrap_err().to_string();
    assert!(e.contains("no certificate in it"), "{e}");
    let fresh = TlsConnector::new(Some(&certs.ca), &[]).unwrap();
    let mut c = connect(&fresh, addr);
    roundtrip(&mut c, b"c");
    assert_eq!(seen(&c).as_deref(), Some("renewed"));
    drop(c);
    server.join().unwrap();
}

/// `openssl ARGS...`, which must succeed (the tests' certificates are rcgen's; encrypting a
/// key is openssl's, as a user would do it).
fn openssl(args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .output()
        .expect("this test needs the openssl command");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An encrypted PKCS#8 key (`ENCRYPTED PRIVATE KEY`, issue 43): read with its password (PBES2
/// with PBKDF2 and with scrypt, as `openssl pkcs8 -topk8` writes them) and served; without it,
/// or with a wrong one, or in OpenSSL's legacy encryption, refused saying what to do.
#[test]
fn an_encrypted_key_is_read_with_its_password_and_refused_without() {
    let certs = Certs::new("encrypted");
    let key = certs.key.to_str().unwrap();
    let pbkdf2 = certs.path("pbkdf2.pem");
    let scrypt = certs.path("scrypt.pem");
    let legacy = certs.path("legacy.pem");
    openssl(&[
        "pkcs8",
        "-topk8",
        "-in",
        key,
        "-out",
        pbkdf2.to_str().unwrap(),
        "-v2",
        "aes-256-cbc",
        "-passout",
        "pass:sesame",
    ]);
    openssl(&[
        "pkcs8",
        "-topk8",
        "-in",
        key,
        "-out",
        scrypt.to_str().unwrap(),
        "-scrypt",
        "-passout",
        "pass:sesame",
    ]);
    openssl(&[
        "pkey",
        "-in",
        key,
        "-out",
        legacy.to_str().unwrap(),
        "-traditional",
        "-aes256",
        "-passout",
        "pass:sesame",
    ]);
    let with = |key: &std::path::Path, password: Option<&str>| {
        TlsAcceptor::new(TlsSettings {
            key_password: password.map(|p| KeyPassword(p.to_owned())),
            ..TlsSettings::http(&certs.cert, key)
        })
    };
    for encrypted in [&pbkdf2, &scrypt] {
        let acceptor = with(encrypted, Some("sesame")).unwrap();
        let (addr, server) = echo_server(acceptor, 1);
        let connector = TlsConnector::new(Some(&certs.ca), &[]).unwrap();
        let mut c = connect(&connector, addr);
        roundtrip(&mut c, b"decrypted");
        drop(c);
        server.join().unwrap();
        let e = with(encrypted, None).unwrap_err().to_string();
        assert!(
            e.contains("the private key is encrypted (ENCRYPTED PRIVATE KEY)")
                && e.contains("--tls-key-password")
                && e.contains("openssl pkey -in"),
            "{e}"
        );
        let e = with(encrypted, Some("wrong")).unwrap_err().to_string();
        assert!(e.contains("wrong password"), "{e}");
    }
    let e = with(&legacy, Some("sesame")).unwrap_err().to_string();
    assert!(e.contains("Proc-Type: 4,ENCRYPTED"), "{e}");
    // A password given for a plain key is not needed, and not in the way.
    assert!(with(&certs.key, Some("unused")).is_ok());
}
