//! Where to listen or connect, written once for all of berth: an [`Addr`] (a TCP or UDP
//! address, or a UNIX socket's path) and an [`Endpoint`] (an address, the [`Scheme`] that says
//! what runs over it, and its options), parsed from `scheme://HOST:PORT?options` by
//! [`Endpoint::parse`] (docs/msg-protocol.md §7).
//!
//! `berth serve --listen`, `berth msg serve`, the msg engine
//! ([`Engine::listen`](crate::msg::Engine::listen) and `connect`), `berth msg bench` and the
//! Python front all take this one form. The parser knows every scheme; each of them refuses,
//! in one line, the schemes and options it does not serve.
//!
//! | scheme | [`Addr`] | what runs over it |
//! |---|---|---|
//! | `tcp://HOST:PORT` | `Tcp` | the bytes of the protocol (HTTP, framed messages) |
//! | `tls://HOST:PORT` | `Tcp` | the same inside TLS |
//! | `unix:///PATH` | `Unix` | the bytes, over a UNIX stream socket (`unix://rel.sock`: a relative path) |
//! | `udp://HOST:PORT` | `Udp` | messages, one per datagram |
//! | `ws://HOST:PORT[/PATH]` | `Tcp` | WebSocket at `PATH` (default [`WS_DEFAULT_PATH`]) |
//! | `wss://HOST:PORT[/PATH]` | `Tcp` | the same inside TLS |
//! | `quic://HOST:PORT` | `Udp` | QUIC (TLS 1.3 inside): parsed, not served yet (issue 42) |
//!
//! Options, after `?` and joined by `&`: `raw` (no framing, no handshake: `tcp://` and
//! `unix://`), `anonymous=no`, `expected-only`; for the TLS schemes (`tls`, `wss`, `quic`)
//! `cert=FILE`, `key=FILE` (a listener's certificate and key, PEM), `client-ca=FILE` (clients
//! must show a certificate signed by this CA), `ca=FILE` and `insecure` (a client's check of
//! the server); for `ws` and `wss` `deflate=on|off`. The text is read as a URL (by the `url`
//! crate): a character a URL escapes may be written `%XX`. IPv6 hosts go in brackets
//! (`tcp://[::1]:9100`); host names are resolved once, to their first address.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use percent_encoding::percent_decode_str;
use url::Url;

/// Where a socket is bound or connected: a TCP or UDP address, or the path of a UNIX stream
/// socket. HTTP models listen on [`Addr::Tcp`] and [`Addr::Unix`]; the msg engine on all
/// three; `quic://` (issue 42) is an [`Addr::Udp`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Addr {
    /// A TCP address (port 0: the kernel picks one).
    Tcp(SocketAddr),
    /// A UNIX stream socket's path.
    Unix(PathBuf),
    /// A UDP address (port 0: the kernel picks one).
    Udp(SocketAddr),
}

impl Addr {
    /// The TCP address, if it is one.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            Addr::Tcp(addr) => Some(*addr),
            Addr::Unix(_) | Addr::Udp(_) => None,
        }
    }

    /// The IP address and port, TCP or UDP (`None` for a UNIX socket).
    pub fn ip(&self) -> Option<SocketAddr> {
        match self {
            Addr::Tcp(addr) | Addr::Udp(addr) => Some(*addr),
            Addr::Unix(_) => None,
        }
    }
}

impl From<SocketAddr> for Addr {
    fn from(addr: SocketAddr) -> Addr {
        Addr::Tcp(addr)
    }
}

/// `127.0.0.1:9000` (TCP, as a URL's authority: `http://{addr}`), `unix:///run/berth.sock` or
/// `udp://127.0.0.1:9000` (as `--listen` takes them).
impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Tcp(addr) => write!(f, "{addr}"),
            Addr::Unix(path) => write!(f, "unix://{}", path.display()),
            Addr::Udp(addr) => write!(f, "udp://{addr}"),
        }
    }
}

/// What an [`Endpoint`] runs over its address: its URL scheme. Told by the endpoint's address
/// and options ([`Endpoint::scheme`]), so it cannot disagree with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `tcp://`: plain TCP.
    Tcp,
    /// `tls://`: TLS over TCP.
    Tls,
    /// `unix://`: a UNIX stream socket.
    Unix,
    /// `udp://`: one message per datagram.
    Udp,
    /// `ws://`: WebSocket over TCP.
    Ws,
    /// `wss://`: WebSocket over TLS.
    Wss,
    /// `quic://`: QUIC over UDP, TLS 1.3 inside (HTTP/3, issue 42).
    Quic,
}

impl Scheme {
    /// Every scheme, in the order the docs list them.
    pub const ALL: [Scheme; 7] = [
        Scheme::Tcp,
        Scheme::Tls,
        Scheme::Unix,
        Scheme::Udp,
        Scheme::Ws,
        Scheme::Wss,
        Scheme::Quic,
    ];

    /// The name before `://`.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Tcp => "tcp",
            Scheme::Tls => "tls",
            Scheme::Unix => "unix",
            Scheme::Udp => "udp",
            Scheme::Ws => "ws",
            Scheme::Wss => "wss",
            Scheme::Quic => "quic",
        }
    }

    /// Whether TLS is part of it (`tls`, `wss`, `quic`): it takes `cert=`, `key=` and the
    /// other TLS options.
    pub fn tls(self) -> bool {
        matches!(self, Scheme::Tls | Scheme::Wss | Scheme::Quic)
    }

    /// Whether it is WebSocket (`ws`, `wss`): it has a path.
    pub fn websocket(self) -> bool {
        matches!(self, Scheme::Ws | Scheme::Wss)
    }

    /// How it is written in an endpoint, for errors: `tcp://HOST:PORT`.
    fn form(self) -> &'static str {
        match self {
            Scheme::Tcp => "tcp://HOST:PORT",
            Scheme::Tls => "tls://HOST:PORT",
            Scheme::Unix => "unix:///PATH",
            Scheme::Udp => "udp://HOST:PORT",
            Scheme::Ws => "ws://HOST:PORT/PATH",
            Scheme::Wss => "wss://HOST:PORT/PATH",
            Scheme::Quic => "quic://HOST:PORT",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.name())
    }
}

/// An address and its options: what `--listen` and the engine's `listen`/`connect` take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The address.
    pub address: Addr,
    /// The host as written, without brackets or port (`::1`, `localhost`): what a client
    /// checks a server's certificate against and names in a WebSocket handshake. Empty for
    /// `unix://`.
    pub host: String,
    /// No framing and no handshake (stream transports only).
    pub raw: bool,
    /// Anonymous clients are refused on this listener.
    pub no_anonymous: bool,
    /// Names not expected in advance are refused on this listener.
    pub expected_only: bool,
    /// TLS (`tls://`, `wss://`, `quic://`), and the files it takes.
    pub tls: Option<TlsFiles>,
    /// WebSocket (`ws://`, `wss://`): clients open with a WebSocket handshake for this path,
    /// and each message is a WebSocket message.
    pub websocket: Option<String>,
    /// WebSocket listeners only: permessage-deflate may be negotiated (`?deflate=off` turns
    /// it off for this listener; the engine's `ws_deflate` decides otherwise).
    pub deflate: bool,
}

/// The path a `ws://` endpoint serves when its URL names none.
pub const WS_DEFAULT_PATH: &str = "/ws/relay";

/// The files of a TLS endpoint. A listener needs a certificate and a key (here, or given to
/// the whole server); a client needs neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM).
    pub cert: Option<PathBuf>,
    /// The private key (PEM).
    pub key: Option<PathBuf>,
    /// Clients are asked for a certificate signed by this CA (PEM).
    pub client_ca: Option<PathBuf>,
    /// Client mode: the CA (PEM) the server's certificate must be signed by.
    pub ca: Option<PathBuf>,
    /// Client mode: accept any server certificate (`?insecure`; for tests).
    pub insecure: bool,
}

/// The options every scheme takes, and those of the TLS and WebSocket schemes, for errors.
const KNOWN_OPTIONS: &str = "known: raw, anonymous=no, expected-only; for tls://, wss:// and \
                             quic://, cert=, key=, client-ca=, ca=, insecure; for ws:// and \
                             wss://, deflate=on|off";

impl Endpoint {
    /// Parses `tcp://127.0.0.1:9100?raw` and the like (see the module docs). Errors name the
    /// text and say what is wrong with it, in one line.
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let bad = |why: &str| format!("bad endpoint {s:?}: {why}");
        let expected = || {
            let forms: Vec<&str> = Scheme::ALL.iter().map(|s| s.form()).collect();
            format!("expected {}", forms.join(", "))
        };
        let Some((written, rest)) = s.split_once("://") else {
            return Err(bad(&expected()));
        };
        let Some(scheme) = Scheme::ALL.into_iter().find(|k| k.name() == written) else {
            return Err(bad(&format!("unknown scheme {written:?}; {}", expected())));
        };
        let url = Url::parse(s).map_err(|e| bad(&format!("{e}; {}", expected())))?;
        if url.fragment().is_some() {
            return Err(bad("a #fragment means nothing here"));
        }
        let decoded = |text: &str| percent_decode_str(text).decode_utf8_lossy().into_owned();
        // What stands between `://` and the path or query, as written: `url` leaves out a
        // port that is the scheme's default (80 for ws://), and gives ws:// a path `/` when
        // none is written.
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let path_written = rest[authority.len()..].starts_with('/');
        let (address, host) = if scheme == Scheme::Unix {
            let path = decoded(&format!("{}{}", url.host_str().unwrap_or(""), url.path()));
            if path.is_empty() {
                return Err(bad("no socket path"));
            }
            (Addr::Unix(PathBuf::from(path)), String::new())
        } else {
            let port_written = authority.rsplit_once(':').is_some_and(|(host, port)| {
                !port.is_empty() && (!host.starts_with('[') || host.ends_with(']'))
            });
            let (host, port) = match (url.host_str(), url.port_or_known_default()) {
                _ if !port_written => return Err(bad("no port")),
                (Some(host), Some(port)) if !host.is_empty() => (decoded(host), port),
                _ => return Err(bad("no host")),
            };
            // HOST:PORT, IPv6 in brackets (as `url` gives it).
            let addr = socket_addr(&format!("{host}:{port}")).map_err(|e| bad(&e))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let address = match scheme {
                Scheme::Udp | Scheme::Quic => Addr::Udp(addr),
                _ => Addr::Tcp(addr),
            };
            (address, host.to_owned())
        };
        let websocket = match url.path() {
            _ if !scheme.websocket() => None,
            _ if !path_written => Some(WS_DEFAULT_PATH.to_owned()),
            path => Some(decoded(path)),
        };
        if path_written && websocket.is_none() && scheme != Scheme::Unix {
            return Err(bad(&format!(
                "a path ({}) means nothing for {scheme}",
                url.path()
            )));
        }
        let mut endpoint = Endpoint {
            address,
            host,
            raw: false,
            no_anonymous: false,
            expected_only: false,
            tls: scheme.tls().then(TlsFiles::default),
            websocket,
            deflate: true,
        };
        for option in url
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|o| !o.is_empty())
        {
            endpoint.option(option, scheme).map_err(|e| bad(&e))?;
        }
        if endpoint.raw && !matches!(scheme, Scheme::Tcp | Scheme::Unix) {
            return Err(bad("raw applies to tcp:// and unix:// only"));
        }
        Ok(endpoint)
    }

    /// Applies one `?option` (written `name` or `name=value`).
    fn option(&mut self, option: &str, scheme: Scheme) -> Result<(), String> {
        let (name, value) = option.split_once('=').unwrap_or((option, ""));
        let unknown = || format!("unknown option {option:?} ({KNOWN_OPTIONS})");
        match (option, name) {
            ("raw" | "raw=yes", _) => self.raw = true,
            ("anonymous=no", _) => self.no_anonymous = true,
            ("anonymous=yes", _) => self.no_anonymous = false,
            ("expected-only" | "expected-only=yes", _) => self.expected_only = true,
            ("deflate=on" | "deflate=off", _) if scheme.websocket() => {
                self.deflate = option == "deflate=on";
            }
            (_, "insecure") if value.is_empty() => match self.tls.as_mut() {
                Some(tls) => tls.insecure = true,
                None => return Err(unknown()),
            },
            (_, "ca" | "cert" | "key" | "client-ca") => {
                let Some(tls) = self.tls.as_mut() else {
                    return Err(unknown());
                };
                let file = match name {
                    "ca" => &mut tls.ca,
                    "cert" => &mut tls.cert,
                    "key" => &mut tls.key,
                    _ => &mut tls.client_ca,
                };
                if value.is_empty() {
                    return Err(format!("{option:?} names no file"));
                }
                *file = Some(PathBuf::from(
                    percent_decode_str(value).decode_utf8_lossy().into_owned(),
                ));
            }
            _ => return Err(unknown()),
        }
        Ok(())
    }

    /// What runs over the address, told by the address and the options.
    pub fn scheme(&self) -> Scheme {
        match (&self.address, self.tls.is_some(), self.websocket.is_some()) {
            (Addr::Tcp(_), false, false) => Scheme::Tcp,
            (Addr::Tcp(_), true, false) => Scheme::Tls,
            (Addr::Tcp(_), false, true) => Scheme::Ws,
            (Addr::Tcp(_), true, true) => Scheme::Wss,
            (Addr::Unix(_), ..) => Scheme::Unix,
            (Addr::Udp(_), false, _) => Scheme::Udp,
            (Addr::Udp(_), true, _) => Scheme::Quic,
        }
    }
}

fn socket_addr(place: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = place.parse() {
        return Ok(addr);
    }
    place
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {place:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{place:?} resolves to no address"))
}

/// The endpoint as [`Endpoint::parse`] takes it back (the address resolved: a host name is
/// written as its address).
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = self.scheme();
        match &self.address {
            Addr::Tcp(a) | Addr::Udp(a) => write!(f, "{scheme}{a}")?,
            Addr::Unix(p) => write!(f, "{scheme}{}", p.display())?,
        }
        if let Some(path) = &self.websocket {
            write!(f, "{path}")?;
        }
        let options = [
            (self.raw, "raw"),
            (self.no_anonymous, "anonymous=no"),
            (self.expected_only, "expected-only"),
            (self.websocket.is_some() && !self.deflate, "deflate=off"),
            (self.tls.as_ref().is_some_and(|t| t.insecure), "insecure"),
        ];
        let mut sep = '?';
        for (on, name) in options {
            if on {
                write!(f, "{sep}{name}")?;
                sep = '&';
            }
        }
        let files = self.tls.iter().flat_map(|t| {
            [
                ("cert", &t.cert),
                ("key", &t.key),
                ("client-ca", &t.client_ca),
                ("ca", &t.ca),
            ]
        });
        for (name, path) in files {
            if let Some(path) = path {
                write!(f, "{sep}{name}={}", path.display())?;
                sep = '&';
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn tcp(s: &str) -> Addr {
        Addr::Tcp(s.parse().unwrap())
    }

    fn udp(s: &str) -> Addr {
        Addr::Udp(s.parse().unwrap())
    }

    #[test]
    fn every_scheme_parses_to_its_address_and_back() {
        for (text, address, scheme) in [
            ("tcp://127.0.0.1:9100", tcp("127.0.0.1:9100"), Scheme::Tcp),
            ("tls://127.0.0.1:9443", tcp("127.0.0.1:9443"), Scheme::Tls),
            (
                "unix:///tmp/b.sock",
                Addr::Unix("/tmp/b.sock".into()),
                Scheme::Unix,
            ),
            ("udp://127.0.0.1:9101", udp("127.0.0.1:9101"), Scheme::Udp),
            (
                "ws://127.0.0.1:9102/ws/relay",
                tcp("127.0.0.1:9102"),
                Scheme::Ws,
            ),
            (
                "wss://127.0.0.1:9443/chat",
                tcp("127.0.0.1:9443"),
                Scheme::Wss,
            ),
            ("quic://127.0.0.1:4433", udp("127.0.0.1:4433"), Scheme::Quic),
            ("tcp://[::1]:0", tcp("[::1]:0"), Scheme::Tcp),
            ("quic://[::1]:0", udp("[::1]:0"), Scheme::Quic),
        ] {
            let e = Endpoint::parse(text).unwrap();
            assert_eq!(e.address, address, "{text}");
            assert_eq!(e.scheme(), scheme, "{text}");
            assert_eq!(e.scheme().tls(), e.tls.is_some(), "{text}");
            assert_eq!(e.to_string(), text);
            assert_eq!(Endpoint::parse(&e.to_string()).unwrap(), e, "{text}");
        }
        assert_eq!(Scheme::ALL.len(), 7);
    }

    #[test]
    fn hosts_are_kept_as_written_and_resolved() {
        let e = Endpoint::parse("tcp://[::1]:9100?raw").unwrap();
        assert_eq!(e.address, tcp("[::1]:9100"));
        assert_eq!(e.host, "::1");
        assert!(e.raw);
        let e = Endpoint::parse("udp://localhost:9101").unwrap();
        assert_eq!(e.host, "localhost");
        assert!(matches!(e.address, Addr::Udp(a) if a.port() == 9101 && a.ip().is_loopback()));
        let e = Endpoint::parse("tls://127.0.0.1:9443").unwrap();
        assert_eq!(e.host, "127.0.0.1");
        assert_eq!(Endpoint::parse("unix:///tmp/x").unwrap().host, "");
        // Port 0: the kernel picks one when bound.
        assert_eq!(
            Endpoint::parse("tcp://[::1]:0")
                .unwrap()
                .address
                .ip()
                .unwrap()
                .port(),
            0
        );
    }

    #[test]
    fn unix_paths_absolute_relative_and_escaped() {
        let e = Endpoint::parse("unix:///tmp/berth.sock?anonymous=no&expected-only").unwrap();
        assert_eq!(e.address, Addr::Unix("/tmp/berth.sock".into()));
        assert!(e.no_anonymous && e.expected_only);
        assert_eq!(
            e.to_string(),
            "unix:///tmp/berth.sock?anonymous=no&expected-only"
        );
        let e = Endpoint::parse("unix://relative.sock").unwrap();
        assert_eq!(e.address, Addr::Unix("relative.sock".into()));
        // What a URL escapes may be written escaped.
        let e = Endpoint::parse("unix:///tmp/my%20berth.sock").unwrap();
        assert_eq!(e.address, Addr::Unix("/tmp/my berth.sock".into()));
    }

    #[test]
    fn tls_schemes_take_their_files() {
        for scheme in ["tls", "quic"] {
            let text =
                format!("{scheme}://127.0.0.1:9443?cert=/c.pem&key=/k.pem&client-ca=/ca.pem");
            let e = Endpoint::parse(&text).unwrap();
            let tls = e.tls.as_ref().unwrap();
            assert_eq!(tls.cert.as_deref(), Some(Path::new("/c.pem")));
            assert_eq!(tls.key.as_deref(), Some(Path::new("/k.pem")));
            assert_eq!(tls.client_ca.as_deref(), Some(Path::new("/ca.pem")));
            assert_eq!(e.to_string(), text);
        }
        let e = Endpoint::parse("tls://127.0.0.1:9443?ca=/ca%20x.pem&insecure").unwrap();
        let tls = e.tls.as_ref().unwrap();
        assert_eq!(tls.ca.as_deref(), Some(Path::new("/ca x.pem")));
        assert!(tls.insecure);
        for bad in [
            "tcp://127.0.0.1:9?cert=/c.pem",
            "udp://127.0.0.1:9?key=/k.pem",
            "ws://127.0.0.1:9?insecure",
            "tls://127.0.0.1:9?cert=",
            "quic://127.0.0.1:9?key=",
        ] {
            let err = Endpoint::parse(bad).unwrap_err();
            assert!(err.starts_with(&format!("bad endpoint {bad:?}: ")), "{err}");
        }
    }

    #[test]
    fn websocket_paths_and_deflate() {
        let e = Endpoint::parse("ws://127.0.0.1:9102").unwrap();
        assert_eq!(e.websocket.as_deref(), Some(WS_DEFAULT_PATH));
        assert_eq!(e.to_string(), "ws://127.0.0.1:9102/ws/relay");
        let e = Endpoint::parse("wss://127.0.0.1:9443/chat?anonymous=no").unwrap();
        assert_eq!(e.websocket.as_deref(), Some("/chat"));
        assert!(e.no_anonymous);
        assert_eq!(e.to_string(), "wss://127.0.0.1:9443/chat?anonymous=no");
        let e = Endpoint::parse("ws://127.0.0.1:0?deflate=off").unwrap();
        assert!(!e.deflate);
        assert_eq!(Endpoint::parse(&e.to_string()).unwrap(), e);
        assert!(Endpoint::parse("tcp://127.0.0.1:9100")
            .unwrap()
            .websocket
            .is_none());
        // The scheme's default port, written, is still a port; none written is none.
        let e = Endpoint::parse("ws://127.0.0.1:80/").unwrap();
        assert_eq!(e.address, tcp("127.0.0.1:80"));
        assert_eq!(e.websocket.as_deref(), Some("/"));
    }

    #[test]
    fn refuses_what_it_cannot_mean_in_one_line_naming_the_text() {
        for (text, why) in [
            ("127.0.0.1:9100", "expected tcp://HOST:PORT, "),
            ("http://127.0.0.1:80", "unknown scheme \"http\""),
            ("tcp://127.0.0.1", "no port"),
            ("quic://127.0.0.1", "no port"),
            ("ws://127.0.0.1/chat", "no port"),
            ("tcp://:9", "empty host"),
            ("tcp://[::1]", "no port"),
            ("tcp://[::1:9100", "invalid IPv6"),
            ("tcp://::1:9100", ""),
            ("tcp://127.0.0.1:70000", "invalid port"),
            ("unix://", "no socket path"),
            (
                "udp://127.0.0.1:9?raw",
                "raw applies to tcp:// and unix:// only",
            ),
            (
                "quic://127.0.0.1:9?raw",
                "raw applies to tcp:// and unix:// only",
            ),
            ("ws://127.0.0.1:9?raw", "raw applies"),
            (
                "tcp://127.0.0.1:9?fast",
                "unknown option \"fast\" (known: raw,",
            ),
            ("tcp://127.0.0.1:9?deflate=off", "unknown option"),
            (
                "tcp://127.0.0.1:9/x",
                "a path (/x) means nothing for tcp://",
            ),
            (
                "quic://127.0.0.1:9/x",
                "a path (/x) means nothing for quic://",
            ),
            ("unix:///tmp/a#b", "#fragment"),
            ("tcp://nohost.invalid:9", "cannot resolve"),
        ] {
            let err = Endpoint::parse(text).unwrap_err();
            assert!(
                err.starts_with(&format!("bad endpoint {text:?}: ")),
                "{err}"
            );
            assert!(err.contains(why), "{text}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn addresses_show_as_listen_takes_them() {
        assert_eq!(tcp("127.0.0.1:9").to_string(), "127.0.0.1:9");
        assert_eq!(udp("[::1]:9").to_string(), "udp://[::1]:9");
        assert_eq!(Addr::Unix("/a.sock".into()).to_string(), "unix:///a.sock");
        assert_eq!(
            tcp("127.0.0.1:9").tcp(),
            Some("127.0.0.1:9".parse().unwrap())
        );
        assert_eq!(udp("127.0.0.1:9").tcp(), None);
        assert_eq!(
            udp("127.0.0.1:9").ip(),
            Some("127.0.0.1:9".parse().unwrap())
        );
    }
}
