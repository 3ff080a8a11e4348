//! TLS as a [`Transport`] (issue 16): rustls over any plain stream, so that every model and
//! the message engine serve it by being generic over the transport, as they are for TCP.
//!
//! Three parts:
//! - [`TlsSettings`] / [`TlsAcceptor`]: the server's certificate and key, read from PEM files
//!   with a clear error for each way they can be wrong (missing, unreadable, no certificate, no
//!   key, a key that does not match, expired or not yet valid), TLS 1.2 and 1.3, ALPN, session
//!   resumption by tickets and by a bounded server-side cache, and [`TlsAcceptor::reload`]
//!   (SIGHUP): every file (chain, key, client CA) is read again into a new configuration that
//!   new handshakes get whole, and a reload that fails keeps the old one whole. A server with
//!   several acceptors [`TlsAcceptor::load`]s them all before it [`TlsAcceptor::install`]s
//!   any. Sessions from before a reload are not resumed after it.
//! - [`TlsStream`]: one connection. It reads and writes plaintext like a socket, moving TLS
//!   records to and from the socket underneath as it goes, blocking or not as that socket is.
//! - [`TlsConnector`]: the client side, for `berth msg send tls://` and `berth bench https://`,
//!   verifying the server against a CA file, or not at all (`--insecure`, for tests).
//!
//! A client that speaks plain HTTP to an HTTP listener's TLS port (`curl http://` to an
//! `https://` port) is answered as nginx answers it: `400 plain HTTP request sent to an HTTPS
//! port`, written in clear, and a debug line; rustls alone would send a TLS alert, which such
//! a client shows as garbage ("Received HTTP/0.9"). The first bytes a server connection reads
//! are looked at before rustls sees them ([`TlsStream`]'s first read), so every model and
//! every path to the handshake (a read, or [`Transport::finish_handshake`]) does it alike.
//!
//! The contract a driver keeps with a TLS stream, beyond a socket's: after its output is
//! written, it calls [`Write::flush`] until that succeeds (`WouldBlock`: wait until writable,
//! then flush again), because records the socket did not take are held in the stream. A plain
//! socket's `flush` does nothing, so drivers call it unconditionally at no cost.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};

use super::transport::{Blocking, Evented, Transport};

/// Ciphertext a connection may hold beyond what its socket has taken, and plaintext it may
/// hold before it is asked for: what bounds a TLS connection's memory.
const BUFFER_LIMIT: usize = 64 * 1024;

/// What a TLS listener serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM file with the certificate, then its chain.
    pub cert: PathBuf,
    /// PEM file with the private key (PKCS#8, PKCS#1 RSA or SEC1 EC; an encrypted PKCS#8 one
    /// with `key_password`).
    pub key: PathBuf,
    /// The password of an encrypted key (`ENCRYPTED PRIVATE KEY`); ignored for a plain one.
    pub key_password: Option<KeyPassword>,
    /// ALPN protocols offered, in preference order (e.g. `http/1.1`); empty: no ALPN.
    pub alpn: Vec<Vec<u8>>,
    /// Sessions kept in the server-side resumption cache.
    pub session_cache: usize,
    /// Issue session tickets (stateless resumption).
    pub tickets: bool,
    /// Ask clients for a certificate signed by this CA (PEM); a client without one is still
    /// served (what it may do without one is the application's rule).
    pub client_ca: Option<PathBuf>,
    /// A plain HTTP request to this HTTP listener is redirected to the same host, port and
    /// target over `https://` (308, which keeps the method and body) instead of refused with
    /// 400: `--redirect-https`, nginx's `error_page 497 =301 https://$host:$server_port$request_uri`.
    pub redirect_plain_http: bool,
}

impl TlsSettings {
    /// HTTP over TLS with the certificate and key in these files: ALPN offers `h2`, then
    /// `http/1.1` (a server that turns HTTP/2 off takes `h2` out).
    pub fn http(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsSettings {
        TlsSettings {
            cert: cert.into(),
            key: key.into(),
            key_password: None,
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            session_cache: 4096,
            tickets: true,
            client_ca: None,
            redirect_plain_http: false,
        }
    }

    /// Every file these settings read, named for a log line: `certificate F, key F` and,
    /// with one, `client CA F`.
    pub fn files(&self) -> String {
        let mut files = format!(
            "certificate {}, key {}",
            self.cert.display(),
            self.key.display()
        );
        if let Some(ca) = &self.client_ca {
            files.push_str(&format!(", client CA {}", ca.display()));
        }
        files
    }
}

/// The password of an encrypted private key: kept for reloads (SIGHUP reads the key again),
/// never shown (its `Debug` says only that there is one).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPassword(pub String);

impl std::fmt::Debug for KeyPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPassword(..)")
    }
}

/// Why TLS could not be set up, said so that the user can fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(pub String);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a certificate chain from a PEM file: at least one certificate.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = std::fs::read(path)
        .map_err(|e| TlsError(format!("cannot read certificate {}: {e}", path.display())))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            TlsError(format!(
                "{}: not a PEM certificate file: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "{}: no certificate in it (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// Reads the certificates of a PEM file as trust anchors.
fn roots_from(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| {
            TlsError(format!(
                "{}: not a usable CA certificate: {e}",
                path.display()
            ))
        })?;
    }
    Ok(roots)
}

/// The PEM label of an encrypted PKCS#8 key (RFC 5958 §3, RFC 7468 §11).
const ENCRYPTED_LABEL: &str = "ENCRYPTED PRIVATE KEY";

/// Reads a private key from a PEM file: a plain one as rustls reads it, an encrypted PKCS#8
/// one decrypted with `password`. A key encrypted without a password given, or in OpenSSL's
/// legacy PEM encryption (`Proc-Type: 4,ENCRYPTED`), is refused saying what to do.
fn load_key(
    path: &Path,
    password: Option<&KeyPassword>,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = std::fs::read(path)
        .map_err(|e| TlsError(format!("cannot read private key {}: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&pem);
    let begin = format!("-----BEGIN {ENCRYPTED_LABEL}-----");
    if let Some(start) = text.find(&begin) {
        let end = format!("-----END {ENCRYPTED_LABEL}-----");
        let block = match text[start..].find(&end) {
            Some(at) => &text[start..start + at + end.len()],
            None => &text[start..],
        };
        return decrypt_key(path, block, password);
    }
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(TlsError(format!(
            "{}: the private key is encrypted the legacy OpenSSL way (Proc-Type: 4,ENCRYPTED), \
             which berth does not read; convert it to encrypted PKCS#8 (openssl pkcs8 -topk8 \
             -in {0} -out NEW.pem, then give the password) or decrypt it (openssl pkey -in {0} \
             -out PLAIN.pem)",
            path.display()
        )));
    }
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        TlsError(format!(
            "{}: no private key in it (PKCS#8, PKCS#1 RSA or SEC1 EC PEM): {e}",
            path.display()
        ))
    })
}

/// Decrypts the `ENCRYPTED PRIVATE KEY` PEM `block` of the file at `path` (PBES2: PBKDF2 or
/// scrypt, with AES-CBC, what `openssl pkcs8 -topk8` and `openssl genpkey -aes256` write).
fn decrypt_key(
    path: &Path,
    block: &str,
    password: Option<&KeyPassword>,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    let Some(password) = password else {
        return Err(TlsError(format!(
            "{0}: the private key is encrypted ({ENCRYPTED_LABEL}): give its password \
             (berth serve --tls-key-password, python -m berth --ssl-keyfile-password), or \
             decrypt it once: openssl pkey -in {0} -out PLAIN.pem",
            path.display()
        )));
    };
    let bad = |what: &str| {
        TlsError(format!(
            "{}: {what} (an encrypted PKCS#8 key, {ENCRYPTED_LABEL}, with PBES2)",
            path.display()
        ))
    };
    let (_, doc) = pkcs8::der::Document::from_pem(block)
        .map_err(|e| bad(&format!("cannot read the encrypted key: {e}")))?;
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(doc.as_bytes())
        .map_err(|e| bad(&format!("cannot read the encrypted key: {e}")))?;
    use pkcs8::pkcs5::Error as Pkcs5;
    let plain = info.decrypt(password.0.as_bytes()).map_err(|e| match e {
        // A wrong password shows as bad padding (which pkcs5 0.7 reports as EncryptFailed
        // on the way in too) or, one time in 256, as decrypted bytes that are not a key.
        pkcs8::Error::EncryptedPrivateKey(Pkcs5::DecryptFailed | Pkcs5::EncryptFailed)
        | pkcs8::Error::Asn1(_) => bad("cannot decrypt the key: wrong password"),
        e => bad(&format!(
            "cannot decrypt the key: {e}; re-encrypt it with openssl pkcs8 -topk8 -v2 \
             aes-256-cbc"
        )),
    })?;
    Ok(PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into()))
}

/// Refuses a certificate outside its validity period, naming the dates.
fn check_validity(cert: &CertificateDer<'_>, path: &Path) -> Result<(), TlsError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).map_err(|e| {
        TlsError(format!(
            "{}: cannot parse the certificate: {e}",
            path.display()
        ))
    })?;
    let validity = parsed.validity();
    let now = x509_parser::time::ASN1Time::now();
    if now > validity.not_after {
        return Err(TlsError(format!(
            "{}: the certificate expired on {}",
            path.display(),
            validity.not_after
        )));
    }
    if now < validity.not_before {
        return Err(TlsError(format!(
            "{}: the certificate is not valid before {}",
            path.display(),
            validity.not_before
        )));
    }
    Ok(())
}

/// Reads and checks a certificate and its key.
fn load_certified(settings: &TlsSettings) -> Result<CertifiedKey, TlsError> {
    let certs = load_certs(&settings.cert)?;
    check_validity(&certs[0], &settings.cert)?;
    let key = load_key(&settings.key, settings.key_password.as_ref())?;
    CertifiedKey::from_der(certs, key, &provider()).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError(format!(
            "the private key in {} does not match the certificate in {}",
            settings.key.display(),
            settings.cert.display()
        )),
        e => TlsError(format!(
            "{}: the private key cannot be used: {e}",
            settings.key.display()
        )),
    })
}

/// The certificate of one built configuration (fixed: a reload builds a new configuration).
#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Builds a whole server configuration from the files `settings` names: certificate chain,
/// key and client CA, each read now. Nothing of an earlier configuration is kept, not even
/// the session cache and ticket key: a session resumed from before a reload would carry a
/// client identity that the new client CA may no longer vouch for.
fn build(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let certified = Arc::new(load_certified(settings)?);
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError(format!("TLS versions: {e}")))?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let roots = Arc::new(roots_from(path)?);
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| TlsError(format!("{}: {e}", path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(FixedCert(certified)));
    config.alpn_protocols = settings.alpn.clone();
    config.session_storage = ServerSessionMemoryCache::new(settings.session_cache.max(1));
    if settings.tickets {
        config.ticketer = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| TlsError(format!("session tickets: {e}")))?;
    }
    Ok(Arc::new(config))
}

/// A configuration read from a listener's files by [`TlsAcceptor::load`], not yet in use:
/// a server with several listeners (or several engine threads) loads every one first and
/// installs them only if all loaded, so that a reload is all or nothing.
#[derive(Clone)]
pub struct TlsLoaded(Arc<ServerConfig>);

/// A server's TLS: makes a [`TlsStream`] of each accepted socket. Cloning shares it (and its
/// reloads).
///
/// Every file it uses (certificate chain, key, client CA) goes into one [`ServerConfig`],
/// which a reload replaces whole: issue 29 found the client CA built once into the
/// configuration while a reload swapped only the certificate, so a replaced CA file was never
/// read again.
#[derive(Clone)]
pub struct TlsAcceptor {
    /// The configuration new handshakes get, replaced whole by a reload.
    live: Arc<RwLock<Arc<ServerConfig>>>,
    settings: Arc<TlsSettings>,
    /// What every HTTP answer on this listener's connections carries as `Alt-Svc`
    /// ([`TlsAcceptor::advertising`]): made once per listener, shared by its connections.
    alt_svc: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("cert", &self.settings.cert)
            .finish_non_exhaustive()
    }
}

/// Two acceptors are the same when they share one configuration (clones of each other).
impl PartialEq for TlsAcceptor {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.live, &other.live)
    }
}

impl Eq for TlsAcceptor {}

impl TlsAcceptor {
    /// Reads the certificate, key and client CA; any problem with them is the error.
    pub fn new(settings: TlsSettings) -> Result<TlsAcceptor, TlsError> {
        let config = build(&settings)?;
        Ok(TlsAcceptor {
            live: Arc::new(RwLock::new(config)),
            settings: Arc::new(settings),
            alt_svc: None,
        })
    }

    /// Reads every file again (certificate chain, key, client CA) into a configuration of
    /// its own, without putting it in use ([`TlsAcceptor::install`] does).
    pub fn load(&self) -> Result<TlsLoaded, TlsError> {
        build(&self.settings).map(TlsLoaded)
    }

    /// Puts a loaded configuration in use: new handshakes get it, connections already made
    /// keep what they were made with.
    pub fn install(&self, loaded: &TlsLoaded) {
        *self.live.write().unwrap_or_else(|e| e.into_inner()) = loaded.0.clone();
    }

    /// Reads every file again and puts them in use together ([`TlsAcceptor::load`], then
    /// [`TlsAcceptor::install`]); on any error everything in use stays, and the error says
    /// why.
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = self.load()?;
        self.install(&loaded);
        Ok(())
    }

    /// The files.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// This acceptor (sharing its configuration and reloads), whose connections answer every
    /// HTTP request with `Alt-Svc: <alt_svc>` (an HTTP/3 twin on the same port:
    /// [`h3_alt_svc`]). The value is made once here; each connection holds a reference to it
    /// ([`Transport::alt_svc`]), and each answer borrows it.
    pub fn advertising(&self, alt_svc: Option<Arc<[u8]>>) -> TlsAcceptor {
        TlsAcceptor {
            alt_svc,
            ..self.clone()
        }
    }

    /// What [`TlsAcceptor::advertising`] gave, if anything.
    pub fn alt_svc(&self) -> Option<&[u8]> {
        self.alt_svc.as_deref()
    }

    /// The configuration new QUIC handshakes get (HTTP/3, `drive::quic`), beside the TCP one
    /// [`TlsAcceptor::accept`] uses: made from the live configuration, so that a reload
    /// (SIGHUP) reaches QUIC as it reaches TCP, with the same certificate, key, client CA,
    /// session cache and tickets. Returned with the live configuration it was made from: the
    /// caller keeps the pair and makes a new one only when [`TlsAcceptor::live_is`] says the
    /// live one changed.
    ///
    /// What QUIC changes: ALPN offers `h3` only (RFC 9114 §3.1: a QUIC connection speaks the
    /// one protocol ALPN chose, and the TCP list's `h2` and `http/1.1` are not spoken over
    /// QUIC); TLS is 1.3 only, which rustls enforces on a QUIC connection whatever versions
    /// the configuration lists (RFC 9001 §4.2: it refuses 1.2 with `Tls13RequiredForQuic`);
    /// and no early data (0-RTT: requests that can be replayed; issue 42 leaves it off by
    /// default).
    pub fn quic(&self) -> (Arc<ServerConfig>, ServerConfig) {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut quic = (*live).clone();
        quic.alpn_protocols = vec![b"h3".to_vec()];
        quic.max_early_data_size = 0;
        (live, quic)
    }

    /// Whether `config` is still the live configuration (no reload since
    /// [`TlsAcceptor::quic`] gave it).
    pub fn live_is(&self, config: &Arc<ServerConfig>) -> bool {
        Arc::ptr_eq(&self.live.read().unwrap_or_else(|e| e.into_inner()), config)
    }

    /// Starts the server side of TLS on an accepted socket. The handshake happens as the
    /// stream is read.
    pub fn accept<S>(&self, sock: S) -> io::Result<TlsStream<S>> {
        let config = self.live.read().unwrap_or_else(|e| e.into_inner()).clone();
        // A listener that offers HTTP by ALPN speaks HTTP: a plain request to it gets an
        // HTTP answer (the message protocol's tls:// listeners offer no ALPN, and get none).
        let http = config
            .alpn_protocols
            .iter()
            .any(|p| p == b"h2" || p == b"http/1.1");
        let mut conn = ServerConnection::new(config).map_err(io::Error::other)?;
        conn.set_buffer_limit(Some(BUFFER_LIMIT));
        let sniff = match (http, self.settings.redirect_plain_http) {
            (false, _) => Sniff::Off,
            (true, false) => Sniff::Refuse,
            (true, true) => Sniff::Redirect,
        };
        Ok(TlsStream {
            sock,
            conn: rustls::Connection::Server(conn),
            sniff,
            alt_svc: self.alt_svc.clone(),
        })
    }
}

/// The `Alt-Svc` value that advertises HTTP/3 on `port` of the same host, for a day (RFC
/// 7838; RFC 9114 §3.1.1): `h3=":443"; ma=86400`.
pub fn h3_alt_svc(port: u16) -> Arc<[u8]> {
    Arc::from(format!("h3=\":{port}\"; ma=86400").into_bytes())
}

/// The client side: whom to trust.
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
}

impl TlsConnector {
    /// Trusts the certificates in `ca` (PEM), or, with `None`, no one at all: every server
    /// certificate is accepted (`--insecure`; for tests against a self-signed server).
    pub fn new(ca: Option<&Path>, alpn: &[&[u8]]) -> Result<TlsConnector, TlsError> {
        Self::build(
            ca,
            alpn,
            None,
            &[&rustls::version::TLS13, &rustls::version::TLS12],
        )
    }

    /// [`TlsConnector::new`] presenting a client certificate (`cert` and `key`, PEM) to
    /// servers that ask for one.
    pub fn with_identity(
        ca: Option<&Path>,
        alpn: &[&[u8]],
        cert: &Path,
        key: &Path,
    ) -> Result<TlsConnector, TlsError> {
        let versions = [&rustls::version::TLS13, &rustls::version::TLS12];
        Self::build(ca, alpn, Some((cert, key)), &versions)
    }

    /// [`TlsConnector::new`] offering TLS 1.2 only (as `curl --tls-max 1.2`: to check that a
    /// server still serves 1.2 clients).
    pub fn tls12_only(ca: Option<&Path>, alpn: &[&[u8]]) -> Result<TlsConnector, TlsError> {
        Self::build(ca, alpn, None, &[&rustls::version::TLS12])
    }

    fn build(
        ca: Option<&Path>,
        alpn: &[&[u8]],
        identity: Option<(&Path, &Path)>,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Result<TlsConnector, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .map_err(|e| TlsError(format!("TLS versions: {e}")))?;
        let config = match ca {
            Some(path) => builder.with_root_certificates(roots_from(path)?),
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(insecure::AcceptAny(provider()))),
        };
        let mut config = match identity {
            None => config.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = load_certs(cert)?;
                config
                    .with_client_auth_cert(chain, load_key(key, None)?)
                    .map_err(|e| TlsError(format!("{}: {e}", cert.display())))?
            }
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(TlsConnector {
            config: Arc::new(config),
        })
    }

    /// The rustls configuration itself, for a client whose TLS runs inside another protocol
    /// (QUIC's, in `berth bench --h3`), with the same trust and ALPN as [`TlsConnector::connect`].
    pub fn rustls_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// Starts the client side of TLS to `server` (a DNS name or an IP address) on a connected
    /// socket. The handshake happens as the stream is written and read.
    pub fn connect<S>(&self, server: &str, sock: S) -> io::Result<TlsStream<S>> {
        let name = ServerName::try_from(server.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut conn =
            ClientConnection::new(self.config.clone(), name).map_err(io::Error::other)?;
        conn.set_buffer_limit(Some(BUFFER_LIMIT));
        Ok(TlsStream {
            sock,
            conn: rustls::Connection::Client(conn),
            sniff: Sniff::Off,
            alt_svc: None,
        })
    }
}

/// A TLS connection over the socket `S`: plaintext in and out, records underneath.
pub struct TlsStream<S> {
    sock: S,
    conn: rustls::Connection,
    /// The server side of an HTTP listener that has read nothing yet: its first bytes are
    /// looked at for a plain HTTP request before rustls gets them ([`TlsStream::first_read`]).
    sniff: Sniff,
    /// The listener's `Alt-Svc` ([`TlsAcceptor::advertising`]), if it advertises one.
    alt_svc: Option<Arc<[u8]>>,
}

/// What becomes of a plain HTTP request on a TLS port, until the first read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sniff {
    /// Not looked for (a client connection, or a listener that speaks no HTTP), or looked
    /// for already.
    Off,
    /// Answered 400 ([`PLAIN_HTTP_ANSWER`]).
    Refuse,
    /// Redirected to `https://` ([`redirect_answer`]), or 400 if it names no usable host.
    Redirect,
}

/// What a plain HTTP request to a TLS port is answered, in clear (nginx's words, and its
/// status: 400).
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
Content-Type: text/plain; charset=utf-8\r\n\
Content-Length: 41\r\n\
Connection: close\r\n\
\r\n\
plain HTTP request sent to an HTTPS port\n";

/// The error a read returns after answering a plain HTTP request ([`PLAIN_HTTP_ANSWER`]):
/// the connection is over. [`is_plain_http`] tells it from other errors.
#[derive(Debug)]
struct PlainHttp {
    /// It was redirected to https:// (`--redirect-https`), not answered 400.
    redirected: bool,
}

impl PlainHttp {
    fn answer(&self) -> &'static str {
        match self.redirected {
            true => "redirected to https://",
            false => "answered 400",
        }
    }
}

impl std::fmt::Display for PlainHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plain HTTP request sent to an HTTPS port ({})",
            self.answer()
        )
    }
}

impl std::error::Error for PlainHttp {}

/// The redirect of a plain HTTP request to the same place over `https://`: its `Host` and
/// target, when the head is whole in `head` and the host is a host (name, IPv4, `[IPv6]`,
/// with a port or not); else `None` (answered 400 instead). A target that is not a path
/// (`*`, an absolute form) goes to `/`.
fn redirect_answer(head: &[u8]) -> Option<Vec<u8>> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut fields);
    if !req.parse(head).ok()?.is_complete() {
        return None;
    }
    let host = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))?
        .value;
    let host_ok = !host.is_empty()
        && host.len() <= 255
        && host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b));
    if !host_ok {
        return None;
    }
    let host = std::str::from_utf8(host).ok()?;
    let target = req.path.filter(|p| p.starts_with('/')).unwrap_or("/");
    let location = format!("https://{host}{target}");
    Some(
        format!(
            "HTTP/1.1 308 Permanent Redirect\r\nLocation: {location}\r\n\
             Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{location}\n",
            location.len() + 1
        )
        .into_bytes(),
    )
}

/// Whether `e` is a read's report of a plain HTTP request answered 400.
pub fn is_plain_http(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<PlainHttp>())
}

/// Whether a connection's first byte starts an HTTP request rather than a TLS record: an
/// HTTP method is upper-case letters (`GET`, `POST`, `PRI` of HTTP/2's preface...), a TLS
/// record starts with its content type (22, a handshake), an SSLv2 hello with its top bit set.
fn starts_plain_http(first: u8) -> bool {
    first.is_ascii_uppercase()
}

impl<S> TlsStream<S> {
    /// The socket underneath.
    pub fn get_ref(&self) -> &S {
        &self.sock
    }

    /// The socket underneath, to change (a transport that keeps state of its own, as the
    /// `uring` model's, which its loop fills).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.sock
    }

    /// The same connection over another type of the same socket (a blocking std socket
    /// made non-blocking and handed to mio, say), with everything it holds.
    pub fn map_socket<T>(self, f: impl FnOnce(S) -> T) -> TlsStream<T> {
        TlsStream {
            sock: f(self.sock),
            conn: self.conn,
            sniff: self.sniff,
            alt_svc: self.alt_svc,
        }
    }

    /// The negotiated ALPN protocol, once the handshake is done.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// The negotiated protocol version (`TLSv1.3`, `TLSv1.2`), once the handshake is done.
    pub fn protocol_version(&self) -> Option<&'static str> {
        match self.conn.protocol_version()? {
            rustls::ProtocolVersion::TLSv1_3 => Some("TLSv1.3"),
            rustls::ProtocolVersion::TLSv1_2 => Some("TLSv1.2"),
            _ => Some("other"),
        }
    }

    /// The common name in the peer's certificate (the server's, to a client; a client
    /// certificate's, to a server that asked for one), once the handshake is done.
    pub fn peer_common_name(&self) -> Option<String> {
        let cert = self.conn.peer_certificates()?.first()?;
        let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
        let cn = parsed.subject().iter_common_name().next()?;
        cn.as_str().ok().map(str::to_owned)
    }

    /// Whether the handshake is still under way.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Whether this (client) connection resumed an earlier session.
    pub fn resumed(&self) -> bool {
        matches!(
            self.conn.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed)
        )
    }
}

impl<S: Read + Write> TlsStream<S> {
    /// Writes held records to the socket until none are left (`WouldBlock` if it fills).
    fn push(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Drives the handshake to its end (on a blocking socket; a non-blocking one may return
    /// `WouldBlock` to be called again). A client calls it before it writes, so that what it
    /// writes goes out at once rather than waiting in the stream for a handshake that only a
    /// read would advance.
    pub fn complete_handshake(&mut self) -> io::Result<()> {
        while self.conn.is_handshaking() {
            self.push()?;
            if self.conn.is_handshaking() && self.conn.wants_read() && self.pull()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed during the TLS handshake",
                ));
            }
        }
        self.push()
    }

    /// Reads records from the socket once and decrypts them. `Ok(0)`: the socket is at its
    /// end. A protocol error sends the peer its alert (as far as the socket takes it).
    fn pull(&mut self) -> io::Result<usize> {
        let n = match self.sniff {
            Sniff::Refuse | Sniff::Redirect => self.first_read()?,
            Sniff::Off => loop {
                match self.conn.read_tls(&mut self.sock) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    other => break other?,
                }
            },
        };
        self.decrypt()?;
        Ok(n)
    }

    /// The first read of a server connection of an HTTP listener: bytes that start a plain
    /// HTTP request are answered [`PLAIN_HTTP_ANSWER`], or redirected ([`Sniff::Redirect`]),
    /// and the error is then [`PlainHttp`]; any others go to rustls as if it had read them
    /// itself. One read of a few KiB takes a client's first flight whole (a ClientHello, or a
    /// request head).
    fn first_read(&mut self) -> io::Result<usize> {
        let mut first = [0u8; 4096];
        let n = loop {
            match self.sock.read(&mut first) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        let sniff = std::mem::replace(&mut self.sniff, Sniff::Off);
        if n > 0 && starts_plain_http(first[0]) {
            // The whole request was read with it (a head fits in the read), so closing after
            // the answer sends FIN, not a reset that would drop the answer. A socket that will
            // not take a few hundred bytes at once gets what it takes: the client still sees
            // the end.
            let redirect = match sniff {
                Sniff::Redirect => redirect_answer(&first[..n]),
                _ => None,
            };
            let _ = self
                .sock
                .write(redirect.as_deref().unwrap_or(PLAIN_HTTP_ANSWER));
            let redirected = redirect.is_some();
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                PlainHttp { redirected },
            ));
        }
        // rustls reads them from the slice (an empty read would mean the end, as from the
        // socket: so only when the socket said so).
        let mut fed = &first[..n];
        loop {
            if self.conn.read_tls(&mut fed)? == 0 || fed.is_empty() {
                break;
            }
        }
        Ok(n)
    }

    /// Decrypts the records rustls holds.
    fn decrypt(&mut self) -> io::Result<()> {
        if let Err(e) = self.conn.process_new_packets() {
            let _ = self.push();
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        Ok(())
    }
}

impl<S: Read + Write> Read for TlsStream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                // The peer closed without close_notify: an end of stream, as on a socket (HTTP
                // and the message protocol frame their own messages, so no truncation goes
                // unnoticed above this).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // Handshake answers first: the peer may wait for them before it sends more.
            match self.push() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if self.pull()? == 0 {
                // The socket is at its end: what plaintext is left, then the end (clean or
                // not; see above).
                return Ok(self.conn.reader().read(buf).unwrap_or(0));
            }
            // The handshake may have produced records to answer (and sessions to send).
            match self.push() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl<S: Read + Write> TlsStream<S> {
    /// Encrypts what of `buf` the stream will hold and pushes it; with `last`, once all of it
    /// is taken, close_notify follows it in the same push.
    fn take(&mut self, buf: &[u8], last: bool) -> io::Result<usize> {
        self.push()?;
        let n = self.conn.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if last && n == buf.len() {
            self.conn.send_close_notify();
        }
        match self.push() {
            Ok(()) => Ok(n),
            // Taken: the rest goes out with the next write or flush.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
            Err(e) => Err(e),
        }
    }
}

impl<S: Read + Write> Write for TlsStream<S> {
    /// Takes plaintext once the records before it are on the socket, so that what waits in
    /// the stream stays bounded; `WouldBlock` when they are not.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.take(buf, false)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.push()?;
        let n = self.conn.writer().write_vectored(bufs)?;
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match self.push() {
            Ok(()) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
            Err(e) => Err(e),
        }
    }

    /// Writes the records still held (`WouldBlock` if the socket will not take them yet).
    fn flush(&mut self) -> io::Result<()> {
        self.push()
    }
}

impl<S: Transport> TlsStream<S> {
    /// Says at debug level that a plain HTTP request was answered, naming the client.
    fn noted<T>(&self, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            if let Some(plain) = e.get_ref().and_then(|e| e.downcast_ref::<PlainHttp>()) {
                let peer = self.sock.peer();
                let who = peer.map_or_else(|| "a client".to_owned(), |p| p.to_string());
                let answer = plain.answer();
                log::debug!("{who}: plain HTTP request sent to an HTTPS port: {answer}");
            }
        }
        result
    }
}

impl<S: Transport> Transport for TlsStream<S> {
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        // rustls reads into initialised memory: the spare capacity is zeroed first (a cost
        // next to decryption's).
        let len = buf.len();
        buf.resize(buf.capacity(), 0);
        let got = self.read(&mut buf[len..]);
        buf.truncate(len + *got.as_ref().unwrap_or(&0));
        self.noted(got)
    }

    /// File bytes must be encrypted: never `sendfile`.
    fn can_send_file(&self) -> bool {
        false
    }

    /// Sends close_notify, then ends the socket's sending side.
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.conn.send_close_notify();
        let _ = self.push();
        self.sock.shutdown_write()
    }

    fn has_pending(&self) -> bool {
        self.conn.wants_write()
    }

    fn short_read_drains(&self) -> bool {
        false
    }

    /// rustls wants no more records while plaintext it decrypted waits to be read (or after
    /// the peer's close_notify, whose end a read reports).
    fn holds_input(&self) -> bool {
        !self.conn.is_handshaking() && !self.conn.wants_read()
    }

    fn handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    fn finish_handshake(&mut self) -> io::Result<()> {
        let done = self.complete_handshake();
        self.noted(done)?;
        // Session tickets and the like, which rustls queues once the handshake is done.
        self.push()
    }

    fn write_last(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.take(buf, true)
    }

    fn abort(&mut self) {
        self.sock.abort()
    }
    fn peer(&self) -> Option<std::net::SocketAddr> {
        self.sock.peer()
    }
    fn alpn(&self) -> Option<&[u8]> {
        self.alpn_protocol()
    }
    fn alt_svc(&self) -> Option<&[u8]> {
        self.alt_svc.as_deref()
    }
}

impl<S: Evented> Evented for TlsStream<S> {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        self.sock.source()
    }
}

impl<S: AsRawFd> AsRawFd for TlsStream<S> {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl<S: Blocking> Blocking for TlsStream<S> {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.set_write_timeout(t)
    }
}

mod insecure {
    //! `--insecure`: a verifier that accepts any server certificate (but still checks the
    //! handshake's signatures, so the connection is encrypted, just not authenticated).

    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};

    #[derive(Debug)]
    pub(super) struct AcceptAny(pub(super) Arc<CryptoProvider>);

    impl ServerCertVerifier for AcceptAny {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_testkit::certs::Certs;

    /// QUIC's configuration is the live one with ALPN `h3` alone and no early data, accepted
    /// by quinn-proto; a reload makes the pair stale, so the QUIC side makes a new one.
    #[test]
    fn quic_gets_the_live_configuration_as_quic_needs_it() {
        let certs = Certs::new("tls-quic-unit");
        let acceptor = TlsAcceptor::new(TlsSettings::http(&certs.cert, &certs.key)).unwrap();
        let (live, quic) = acceptor.quic();
        assert_eq!(quic.alpn_protocols, vec![b"h3".to_vec()]);
        assert_eq!(quic.max_early_data_size, 0);
        // The TCP listener's own is left as it was.
        assert_eq!(
            live.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        assert!(quinn_proto::crypto::rustls::QuicServerConfig::try_from(quic).is_ok());
        assert!(acceptor.live_is(&live));
        acceptor.reload().unwrap();
        assert!(!acceptor.live_is(&live));
        assert!(acceptor.live_is(&acceptor.quic().0));
    }
}
